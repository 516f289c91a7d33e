//! Reading a recipe: TOML, YAML or JSON, with Goose's field names where
//! they mean the same thing, every error naming the file, line and field.
//!
//! A Goose recipe drives an LLM agent; a sandbox recipe runs commands.
//! Fields that only an agent can use (`instructions`, `prompt`,
//! `extensions`, …) are refused by name rather than skipped, since
//! skipping them would run something other than what the author meant.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::Deserialize;

/// The largest recipe read (a recipe is a short list of commands).
pub const MAX_RECIPE_BYTES: u64 = 1 << 20;
/// Most steps in a recipe.
pub const MAX_STEPS: usize = 1000;
/// Most retries of a step or of the whole recipe.
pub const MAX_RETRIES: u32 = 100;
/// The longest delay between attempts (after back-off).
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// A recipe that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    /// The file could not be read.
    #[error("reading the recipe {path}: {source}")]
    Read {
        /// The recipe.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is larger than any recipe needs.
    #[error("{path}: larger than {MAX_RECIPE_BYTES} bytes, which no recipe needs: put long scripts in files of the project and run them from a step")]
    TooLarge {
        /// The recipe.
        path: PathBuf,
    },
    /// Not a name this reader knows the format of.
    #[error("{path}: a recipe is a .toml, .yaml, .yml or .json file")]
    Format {
        /// The recipe.
        path: PathBuf,
    },
    /// The text does not parse as a recipe.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// The recipe.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's words (they name the field).
        message: String,
    },
    /// A field that parses but cannot mean what it says here.
    #[error("{path}:{line}: `{field}`: {why}")]
    Field {
        /// The recipe.
        path: PathBuf,
        /// 1-based line where the field first appears (0: not found).
        line: usize,
        /// The field.
        field: String,
        /// Why, and what to write instead.
        why: String,
    },
}

/// A checked recipe.
#[derive(Debug, Clone)]
pub struct Recipe {
    /// The file it came from.
    pub path: PathBuf,
    /// Its title (Goose's `title`), or the file's name.
    pub title: String,
    /// The profile every step runs under (the command line may override).
    pub profile: Option<String>,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Goose's recipe-wide `retry`: checks after the last step, and how
    /// often the whole transaction is tried.
    pub whole: WholeRetry,
}

/// Goose's `retry` block: the whole recipe is tried again, from the
/// project as it was, while its checks fail.
#[derive(Debug, Clone, Default)]
pub struct WholeRetry {
    /// Tries after the first (`max_retries`).
    pub retries: u32,
    /// Shell commands that must all succeed after the last step (`checks`).
    pub checks: Vec<String>,
    /// Their time limit (`timeout_seconds`).
    pub checks_timeout: Option<Duration>,
    /// A shell command run over a failed try before it is rolled back
    /// (`on_failure`).
    pub on_failure: Option<String>,
    /// Its time limit (`on_failure_timeout_seconds`).
    pub on_failure_timeout: Option<Duration>,
}

/// One step.
#[derive(Debug, Clone)]
pub struct Step {
    /// Its name (`name`, else `step N`).
    pub name: String,
    /// What it runs: an argv, or a script for /bin/sh.
    pub argv: Vec<String>,
    /// Its time limit, per attempt.
    pub timeout: Option<Duration>,
    /// Environment on top of the profile's (the recipe's, then the step's).
    pub env: Vec<(String, String)>,
    /// Attempts after the first.
    pub retries: u32,
    /// The wait before the second attempt.
    pub delay: Duration,
    /// How the wait grows.
    pub backoff: Backoff,
    /// Shell commands run after the command, in the same attempt: all must
    /// succeed for the attempt to.
    pub checks: Vec<String>,
}

/// How the wait between attempts grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backoff {
    /// The same wait every time.
    #[default]
    Fixed,
    /// Twice the previous wait.
    Exponential,
}

impl Step {
    /// The wait before attempt `attempt` (2 and later).
    pub fn delay_before(&self, attempt: u32) -> Duration {
        let wait = match self.backoff {
            Backoff::Fixed => self.delay,
            Backoff::Exponential => {
                let doublings = attempt.saturating_sub(2).min(32);
                self.delay.saturating_mul(1u32 << doublings.min(31))
            }
        };
        wait.min(MAX_DELAY)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRecipe {
    version: Option<IgnoredAny>,
    title: Option<String>,
    description: Option<String>,
    author: Option<IgnoredAny>,
    profile: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    steps: Vec<RawStep>,
    retry: Option<RawWholeRetry>,
    // An agent's fields: refused by name (see the module's comment).
    instructions: Option<IgnoredAny>,
    prompt: Option<IgnoredAny>,
    extensions: Option<IgnoredAny>,
    activities: Option<IgnoredAny>,
    parameters: Option<IgnoredAny>,
    response: Option<IgnoredAny>,
    sub_recipes: Option<IgnoredAny>,
    settings: Option<IgnoredAny>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawStep {
    name: Option<String>,
    command: Option<Vec<String>>,
    script: Option<String>,
    #[serde(alias = "timeout_seconds")]
    timeout: Option<RawDuration>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default, alias = "max_retries")]
    retry: u32,
    #[serde(alias = "retry_delay")]
    retry_delay: Option<RawDuration>,
    #[serde(default, alias = "retry_backoff")]
    retry_backoff: Backoff,
    #[serde(default)]
    checks: Vec<RawCheck>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWholeRetry {
    #[serde(default)]
    max_retries: u32,
    #[serde(default)]
    checks: Vec<RawCheck>,
    on_failure: Option<String>,
    timeout_seconds: Option<u64>,
    on_failure_timeout_seconds: Option<u64>,
}

/// Goose's check: `{type: shell, command: "..."}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    #[serde(rename = "type")]
    kind: CheckKind,
    command: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum CheckKind {
    Shell,
}

/// A duration: seconds as a number, or text such as "30s" or "2m".
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Seconds(u64),
    Text(String),
}

/// Read and check the recipe at `path`.
pub fn load(path: &Path) -> Result<Recipe, RecipeError> {
    use std::io::Read;
    let read = |source| RecipeError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = crate::safe_file::open_read(path)
        .map_err(|err| read(std::io::Error::other(err.to_string())))?;
    let mut text = String::new();
    std::io::BufReader::new(file)
        .take(MAX_RECIPE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() as u64 > MAX_RECIPE_BYTES {
        return Err(RecipeError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    parse(path, &text)
}

/// Check the recipe `text`, read from `path` (whose extension says the
/// format).
pub fn parse(path: &Path, text: &str) -> Result<Recipe, RecipeError> {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let syntax = |line: usize, column: usize, message: String| RecipeError::Syntax {
        path: path.to_path_buf(),
        line,
        column,
        message,
    };
    let raw: RawRecipe = match extension {
        "toml" => toml::from_str(text).map_err(|err| {
            let (line, column) = line_column(text, err.span().map_or(0, |s| s.start));
            syntax(line, column, err.message().trim_end().to_owned())
        })?,
        "yaml" | "yml" => serde_norway::from_str(text).map_err(|err| {
            let (line, column) = err.location().map_or((0, 0), |l| (l.line(), l.column()));
            syntax(line, column, err.to_string())
        })?,
        "json" => serde_json::from_str(text)
            .map_err(|err| syntax(err.line(), err.column(), err.to_string()))?,
        _ => {
            return Err(RecipeError::Format {
                path: path.to_path_buf(),
            })
        }
    };
    check(path, text, raw)
}

fn check(path: &Path, text: &str, raw: RawRecipe) -> Result<Recipe, RecipeError> {
    let field = |field: &str, why: String| RecipeError::Field {
        path: path.to_path_buf(),
        line: line_of(text, field),
        field: field.to_owned(),
        why,
    };
    let agent_only = [
        ("instructions", raw.instructions.is_some()),
        ("prompt", raw.prompt.is_some()),
        ("extensions", raw.extensions.is_some()),
        ("activities", raw.activities.is_some()),
        ("response", raw.response.is_some()),
        ("sub_recipes", raw.sub_recipes.is_some()),
        ("settings", raw.settings.is_some()),
    ];
    if let Some((name, _)) = agent_only.iter().find(|(_, present)| *present) {
        return Err(field(
            name,
            "a Goose field for an LLM agent; a sandbox recipe runs commands, not an agent: remove it and write the work as `steps` (each a `command` or a `script`)".into(),
        ));
    }
    if raw.parameters.is_some() {
        return Err(field(
            "parameters",
            "template parameters are not supported: write the values into the steps, or pass them with `env`".into(),
        ));
    }
    let _ = (raw.version, raw.author, raw.description);
    if raw.steps.is_empty() {
        return Err(field(
            "steps",
            "a recipe needs at least one step (`[[steps]]` in TOML, `steps:` in YAML), each with a `command` or a `script`".into(),
        ));
    }
    if raw.steps.len() > MAX_STEPS {
        return Err(field("steps", format!("more than {MAX_STEPS} steps")));
    }
    let whole = match raw.retry {
        None => WholeRetry::default(),
        Some(retry) => {
            if retry.max_retries > MAX_RETRIES {
                return Err(field("max_retries", format!("at most {MAX_RETRIES}")));
            }
            WholeRetry {
                retries: retry.max_retries,
                checks: retry.checks.into_iter().map(shell).collect(),
                checks_timeout: retry.timeout_seconds.map(Duration::from_secs),
                on_failure: retry.on_failure,
                on_failure_timeout: retry.on_failure_timeout_seconds.map(Duration::from_secs),
            }
        }
    };
    let mut steps = Vec::new();
    for (index, step) in raw.steps.into_iter().enumerate() {
        let name = step.name.unwrap_or_else(|| format!("step {}", index + 1));
        let argv = match (step.command, step.script) {
            (Some(argv), None) if !argv.is_empty() && !argv[0].is_empty() => argv,
            (None, Some(script)) => vec!["/bin/sh".into(), "-c".into(), script],
            (Some(_), Some(_)) => {
                return Err(field(
                    "script",
                    format!("step `{name}` has both a `command` and a `script`: keep one"),
                ))
            }
            (Some(_), None) => {
                return Err(field(
                    "command",
                    format!("step `{name}`: the command is empty; give the program and its arguments, e.g. [\"make\", \"test\"]"),
                ))
            }
            (None, None) => {
                return Err(field(
                    "steps",
                    format!("step `{name}` has neither a `command` (a list: program and arguments) nor a `script` (run by /bin/sh)"),
                ))
            }
        };
        if step.retry > MAX_RETRIES {
            return Err(field(
                "retry",
                format!("step `{name}`: at most {MAX_RETRIES} retries"),
            ));
        }
        let duration = |name_of: &str, value: RawDuration| -> Result<Duration, RecipeError> {
            match value {
                RawDuration::Seconds(s) => Ok(Duration::from_secs(s)),
                RawDuration::Text(t) => crate::profile::size::parse_duration(&t)
                    .map_err(|why| field(name_of, format!("step `{name}`: {why}"))),
            }
        };
        let timeout = step
            .timeout
            .map(|t| {
                duration("timeout", t).and_then(|d| {
                    crate::profile::size::timeout_flag(&format!("{}ms", d.as_millis()))
                        .map_err(|why| field("timeout", format!("step `{name}`: {why}")))
                })
            })
            .transpose()?;
        let delay = step
            .retry_delay
            .map(|d| duration("retry-delay", d))
            .transpose()?
            .unwrap_or_default();
        if delay > MAX_DELAY {
            return Err(field(
                "retry-delay",
                format!("step `{name}`: at most an hour"),
            ));
        }
        let mut env: Vec<(String, String)> = raw.env.clone().into_iter().collect();
        env.extend(step.env);
        steps.push(Step {
            name,
            argv,
            timeout,
            env,
            retries: step.retry,
            delay,
            backoff: step.retry_backoff,
            checks: step.checks.into_iter().map(shell).collect(),
        });
    }
    let title = raw.title.unwrap_or_else(|| {
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    Ok(Recipe {
        path: path.to_path_buf(),
        title,
        profile: raw.profile,
        steps,
        whole,
    })
}

fn shell(check: RawCheck) -> String {
    let CheckKind::Shell = check.kind;
    check.command
}

/// 1-based line and column of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|b| **b != b'\n').count() + 1;
    (line, column)
}

/// The first line where `field` is a key (`field =`, `field:`, `"field":`,
/// `[field]`, `[[field]]`), 0 when none is.
fn line_of(text: &str, field: &str) -> usize {
    text.lines()
        .position(|line| {
            let key = line
                .trim_start()
                .trim_start_matches("- ")
                .trim_start_matches('[')
                .trim_start_matches('"');
            key.strip_prefix(field).is_some_and(|rest| {
                let rest = rest.trim_start_matches('"').trim_start();
                rest.starts_with('=') || rest.starts_with(':') || rest.starts_with(']')
            })
        })
        .map_or(0, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(text: &str) -> Result<Recipe, RecipeError> {
        parse(Path::new("r.toml"), text)
    }

    fn yaml(text: &str) -> Result<Recipe, RecipeError> {
        parse(Path::new("r.yaml"), text)
    }

    #[test]
    fn toml_and_yaml_say_the_same_recipe() {
        let a = toml(
            "title = \"t\"\n[[steps]]\nname = \"a\"\ncommand = [\"make\", \"x\"]\nretry = 2\nretry-delay = \"1s\"\nretry-backoff = \"exponential\"\ntimeout = \"30s\"\n[steps.env]\nX = \"1\"\n",
        )
        .unwrap();
        let b = yaml(
            "title: t\nsteps:\n  - name: a\n    command: [make, x]\n    retry: 2\n    retry_delay: 1s\n    retry_backoff: exponential\n    timeout_seconds: 30\n    env: {X: \"1\"}\n",
        )
        .unwrap();
        for recipe in [&a, &b] {
            let step = &recipe.steps[0];
            assert_eq!(step.argv, ["make", "x"]);
            assert_eq!(step.retries, 2);
            assert_eq!(step.timeout, Some(Duration::from_secs(30)));
            assert_eq!(step.env, [("X".to_owned(), "1".to_owned())]);
            assert_eq!(step.delay_before(2), Duration::from_secs(1));
            assert_eq!(step.delay_before(4), Duration::from_secs(4));
        }
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let err = toml("[[steps]]\nscript = \"true\"\nretires = 2\n").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("r.toml:3:"), "{text}");
        assert!(text.contains("retires"), "{text}");
        let err = yaml("steps:\n  - script: \"true\"\n    retires: 2\n").unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("r.yaml:3:"), "{text}");
        assert!(text.contains("retires"), "{text}");
    }

    #[test]
    fn an_agents_fields_are_refused_by_name() {
        let err = yaml("version: 1.0.0\ntitle: t\ndescription: d\nprompt: do it\nsteps:\n  - script: \"true\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("r.yaml:4: `prompt`"), "{err}");
        assert!(err.contains("not an agent"), "{err}");
    }

    #[test]
    fn a_step_runs_one_thing() {
        let err = toml("[[steps]]\ncommand = [\"a\"]\nscript = \"b\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("both"), "{err}");
        let err = toml("[[steps]]\nname = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("neither"), "{err}");
    }
}
