//! `sandbox skill`: list, show, check and run skills.
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use sandbox::skill::manifest::{self, ExecutionMode};

/// Where to look for skills, and how much they may get.
#[derive(Debug, Args)]
pub struct Roots {
    /// A directory of your skills (repeatable); with ~/.config/sandbox/skills
    /// these win over the project's .skills/, which can never replace one.
    #[arg(long = "skills-dir", value_name = "DIR")]
    pub skills_dirs: Vec<PathBuf>,
    /// The project root (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// The most a skill may get (built-in name or profile file): a skill's
    /// own `profile` must lie within it, or the skill is refused.
    #[arg(long, short = 'p', default_value = "strict", value_name = "NAME|PATH")]
    pub profile: String,
}

impl Roots {
    /// The person's profile, loaded, and how a host process loads it
    /// again (a file as an absolute path: hosts run elsewhere).
    pub fn profile(&self) -> anyhow::Result<(sandbox::Policy, String)> {
        let policy = sandbox::profile::load(&self.profile)
            .with_context(|| format!("loading profile {}", self.profile))?;
        let spec = if sandbox::profile::builtin_source(&self.profile).is_some() {
            self.profile.clone()
        } else {
            std::path::absolute(&self.profile)
                .with_context(|| format!("--profile {}", self.profile))?
                .to_string_lossy()
                .into_owned()
        };
        Ok((policy, spec))
    }
}

/// Subcommands of `sandbox skill`.
#[derive(Debug, Subcommand)]
pub enum SkillCommand {
    /// List the skills found, and the manifests that did not load.
    List {
        #[command(flatten)]
        roots: Roots,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a skill's manifest and instructions (templates: also their files).
    Show {
        /// The skill's name.
        name: String,
        #[command(flatten)]
        roots: Roots,
    },
    /// Run a skill once in its sandbox and print its result.
    Run {
        /// The skill's name.
        name: String,
        /// Its parameters: a JSON object, or @FILE to read one from FILE.
        #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
        params: String,
        /// Print one JSON line: {"result": ...} or {"error": ...}.
        #[arg(long)]
        json: bool,
        /// Pre-approve a broker action for this run (repeatable); still only
        /// within what the skill declares.
        #[arg(long = "grant", value_name = "ACTION[:PATTERN]")]
        grants: Vec<String>,
        /// Append one JSON line per broker request to FILE.
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// Never prompt: actions that would ask are denied.
        #[arg(long = "non-interactive")]
        non_interactive: bool,
        #[command(flatten)]
        roots: Roots,
    },
    /// Rate how exposed a skill's runs leave the host: your profile narrowed
    /// by its manifest (docs/src/explain.md).
    Explain {
        /// The skill's name.
        name: String,
        #[command(flatten)]
        roots: Roots,
        #[command(flatten)]
        output: crate::explain::OutputArgs,
    },
    /// Check the skills in DIR (a skill directory or a directory of skills).
    Check {
        /// Default: every skill root.
        dir: Option<PathBuf>,
        #[command(flatten)]
        roots: Roots,
    },
}

pub fn project_of(roots: &Roots) -> anyhow::Result<PathBuf> {
    let project = match &roots.project {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let project = std::fs::canonicalize(&project)
        .with_context(|| format!("the project root {}", project.display()))?;
    if roots.project.is_none() {
        let homes = sandbox::project::home::home_directories();
        if let Some(why) = sandbox::project::home::too_broad(&project, &homes) {
            anyhow::bail!(
                "refusing to use the current directory {} as the project root: {why}, and skills would work on everything below it. Run from the project's own directory, or pass --project {} if you mean it",
                project.display(),
                project.display()
            );
        }
    }
    Ok(project)
}

fn discover(roots: &Roots) -> anyhow::Result<manifest::Discovered> {
    Ok(manifest::discover_roots(&manifest::roots(
        &roots.skills_dirs,
        &project_of(roots)?,
    )))
}

/// Largest `--params`: the same as one invocation line a skill host takes.
const MAX_PARAMS: u64 = 1 << 20;

/// `--params`: inline JSON or @FILE.
fn read_params(text: &str) -> anyhow::Result<serde_json::Value> {
    let (source, text) = match text.strip_prefix('@') {
        Some(path) => {
            use std::io::Read;
            let mut bytes = Vec::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(MAX_PARAMS + 1).read_to_end(&mut bytes))
                .with_context(|| format!("reading --params @{path}"))?;
            anyhow::ensure!(
                bytes.len() as u64 <= MAX_PARAMS,
                "--params @{path}: larger than {MAX_PARAMS} bytes; pass the data through a file in the project instead"
            );
            (
                format!("--params @{path}"),
                String::from_utf8(bytes)
                    .with_context(|| format!("--params @{path} is not UTF-8 text"))?,
            )
        }
        None => ("--params".to_string(), text.to_string()),
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{source} is not valid JSON"))?;
    anyhow::ensure!(
        value.is_object(),
        "{source} must be a JSON object (the skill's named parameters)"
    );
    Ok(value)
}

/// Exit statuses of `sandbox skill run` (and `show`, `check`).
const EXIT_SKILL_ERROR: i32 = 1;
const EXIT_BAD_PARAMS: i32 = 2;
/// The skill asks for more than the person's profile allows, or a
/// project skill tries to replace one of the person's.
const EXIT_REFUSED: i32 = 2;
const EXIT_TIMEOUT: i32 = 124;
const EXIT_SANDBOX: i32 = 125;

fn run_skill(
    skill: &manifest::Skill,
    launch: &sandbox::skill::Launch,
    params: serde_json::Value,
    json: bool,
) -> anyhow::Result<i32> {
    use sandbox::skill::{SkillError, StartError};
    let invoked = match sandbox::skill::invoke_once(skill, launch, params) {
        Ok(invoked) => invoked,
        Err(StartError::Skill(err @ SkillError::Params { .. })) => {
            eprintln!("sandbox: {err}");
            return Ok(EXIT_BAD_PARAMS);
        }
        Err(StartError::Skill(
            err @ (SkillError::Wider { .. } | SkillError::UnknownProfile { .. }),
        )) => {
            eprintln!("sandbox: {err}");
            return Ok(EXIT_REFUSED);
        }
        Err(err) => {
            eprintln!("sandbox: {err}");
            return Ok(EXIT_SANDBOX);
        }
    };
    if let Some(report) = &invoked.finished.report {
        super::run::print_warnings(report.warnings());
        // A skill under a review profile: what its run kept, and how to
        // apply or drop it, as `sandbox run --review` says it.
        if let Some(kept) = &report.review {
            eprintln!("{}", kept.notice());
        }
    }
    if let Err(err) = &invoked.finished.result {
        eprintln!("sandbox: {err}");
        return Ok(EXIT_SANDBOX);
    }
    let Some(answer) = invoked.answer else {
        eprintln!("sandbox: skill {} gave no answer", skill.name);
        return Ok(EXIT_SKILL_ERROR);
    };
    let line = match &answer {
        Ok(result) => serde_json::json!({ "result": result }),
        Err(error) => serde_json::json!({ "error": error }),
    };
    match (&answer, json) {
        (_, true) => println!("{line}"),
        (Ok(serde_json::Value::String(text)), false) => println!("{text}"),
        (Ok(result), false) => println!("{}", serde_json::to_string_pretty(result)?),
        (Err(error), false) => eprintln!(
            "sandbox: skill {}: {} (code {})",
            skill.name,
            error["message"].as_str().unwrap_or("error"),
            error["code"]
        ),
    }
    Ok(match answer {
        Ok(_) => 0,
        Err(_) if invoked.timed_out => EXIT_TIMEOUT,
        Err(_) => EXIT_SKILL_ERROR,
    })
}

/// Arguments of the hidden `sandbox __skill-host`: one skill process
/// for `sandbox serve`, with its control socket on stdin.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// The skill's directory.
    #[arg(long)]
    pub dir: PathBuf,
    /// The project root.
    #[arg(long)]
    pub project: PathBuf,
    /// The person's profile (built-in name or absolute path).
    #[arg(long)]
    pub profile: String,
    /// Audit log.
    #[arg(long)]
    pub audit: Option<PathBuf>,
    /// Pre-approved actions.
    #[arg(long = "grant")]
    pub grants: Vec<String>,
    /// The process that started this host: if it is gone already, exit.
    #[arg(long)]
    pub parent: i32,
    /// Put "ask" decisions to `serve` over the control socket.
    #[arg(long)]
    pub ask_client: bool,
    /// How long such a question waits for `serve`'s answer.
    #[arg(long, value_name = "DURATION", default_value = "60s",
          value_parser = sandbox::profile::size::timeout_flag)]
    pub question_timeout: std::time::Duration,
    /// Prepare an on-demand skill's sandbox before its call arrives.
    #[arg(long)]
    pub prepare_ahead: bool,
}

pub fn host(args: HostArgs) -> anyhow::Result<i32> {
    // Die with `sandbox serve`: the run's init dies with this process in
    // turn, which tears down the skill's whole sandbox.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .context("setting the parent-death signal")?;
    if nix::unistd::getppid().as_raw() != args.parent {
        return Ok(EXIT_SANDBOX);
    }
    let control = sandbox::os::adopt_inherited_socket(0)
        .context("the control socket (stdin) is not a socket")?;
    let control = std::os::unix::net::UnixStream::from(control);
    let skill = manifest::load(&args.dir)?;
    let profile = sandbox::profile::load(&args.profile)
        .with_context(|| format!("loading profile {}", args.profile))?;
    let launch = sandbox::skill::Launch {
        profile,
        project: args.project,
        grants: args.grants,
        audit: args.audit,
        interactive: false,
        ask_client: args.ask_client,
        question_timeout: args.question_timeout,
        prepare_ahead: args.prepare_ahead,
    };
    Ok(sandbox::skill::host_process(&skill, &launch, control))
}

/// Skills that may not be served under `profile` (`serve`, MCP, the
/// daemon): (name, why). Templates never run, so they are never refused.
fn refusals(found: &manifest::Discovered, profile: &sandbox::Policy) -> Vec<(String, String)> {
    found
        .skills
        .values()
        .filter(|s| s.execution_mode == ExecutionMode::Direct)
        .filter_map(|s| {
            sandbox::skill::launch::served_policy(s, profile)
                .err()
                .map(|e| (s.name.clone(), e.to_string()))
        })
        .collect()
}

fn report_problems(found: &manifest::Discovered) {
    for err in &found.invalid {
        eprintln!("sandbox: skipping an invalid skill: {err}");
    }
    for error in found.shadowing_errors() {
        eprintln!("sandbox: error: {error}");
    }
    for (name, used, ignored) in &found.duplicates {
        eprintln!(
            "sandbox: skill {name} is defined twice; using {} and ignoring {}",
            used.display(),
            ignored.display()
        );
    }
}

pub fn run(cmd: SkillCommand) -> anyhow::Result<i32> {
    match cmd {
        SkillCommand::List { roots, json } => {
            let found = discover(&roots)?;
            report_problems(&found);
            let (profile, _) = roots.profile()?;
            for (_, refusal) in refusals(&found, &profile) {
                eprintln!("sandbox: error: {refusal}");
            }
            if json {
                let skills: Vec<_> = found.skills.values().collect();
                println!("{}", serde_json::to_string_pretty(&skills)?);
            } else if found.skills.is_empty() {
                println!("no skills found");
            } else {
                for skill in found.skills.values() {
                    let mode = match skill.execution_mode {
                        ExecutionMode::Template => "template".to_string(),
                        ExecutionMode::Direct => {
                            format!("{:?}", skill.runtime.unwrap_or(manifest::Runtime::Exec))
                                .to_lowercase()
                        }
                    };
                    println!("{:<24} {:<9} {}", skill.name, mode, skill.description);
                }
            }
            Ok(0)
        }
        SkillCommand::Show { name, roots } => {
            let found = discover(&roots)?;
            let (profile, _) = roots.profile()?;
            let shadowing: Vec<String> = found
                .shadowing_errors()
                .into_iter()
                .zip(&found.shadowed)
                .filter(|(_, (shadowed, _, _))| *shadowed == name)
                .map(|(error, _)| error)
                .collect();
            let skill = found
                .skills
                .get(&name)
                .with_context(|| format!("no skill named {name} (see `sandbox skill list`)"))?;
            println!("{} — {}", skill.name, skill.description);
            println!("directory: {}", skill.dir.display());
            if let Some(main) = &skill.main {
                println!("main: {}", main.display());
            }
            println!(
                "permissions: {}",
                if skill.permissions.is_empty() {
                    "none".into()
                } else {
                    skill.permissions.join(", ")
                }
            );
            let refusal = match skill.execution_mode {
                ExecutionMode::Template => None,
                ExecutionMode::Direct => {
                    sandbox::skill::launch::served_policy(skill, &profile).err()
                }
            };
            println!(
                "profile: {} (within your profile {}: {})\n",
                skill.profile.as_deref().unwrap_or("none named, yours"),
                profile.name,
                if refusal.is_some() {
                    "no, refused"
                } else {
                    "yes"
                }
            );
            // A project's SKILL.md is the project author's text: shown on
            // the person's terminal line by line, its escapes escaped.
            for line in skill.instructions.lines() {
                println!("{}", sandbox::broker::prompt::escape(line));
            }
            if skill.execution_mode == ExecutionMode::Template {
                // Templates are never run: their files are shown as text.
                let mut files: Vec<PathBuf> = std::fs::read_dir(&skill.dir)?
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                files.sort();
                for file in files
                    .iter()
                    .filter(|f| f.is_file() && f.file_name().is_some_and(|n| n != "SKILL.md"))
                {
                    println!(
                        "\n--- {} ---",
                        file.strip_prefix(&skill.dir).unwrap_or(file).display()
                    );
                    print!("{}", String::from_utf8_lossy(&std::fs::read(file)?));
                }
            }
            for error in &shadowing {
                eprintln!("sandbox: error: {error}");
            }
            if let Some(refusal) = &refusal {
                eprintln!("sandbox: error: {refusal}");
            }
            Ok(if refusal.is_some() || !shadowing.is_empty() {
                EXIT_REFUSED
            } else {
                0
            })
        }
        SkillCommand::Run {
            name,
            params,
            json,
            grants,
            audit,
            non_interactive,
            roots,
        } => {
            for grant in &grants {
                super::run::check_grant(grant)?;
            }
            let params = match read_params(&params) {
                Ok(params) => params,
                Err(err) => {
                    eprintln!("sandbox: {err:#}");
                    return Ok(EXIT_BAD_PARAMS);
                }
            };
            let found = discover(&roots)?;
            report_problems(&found);
            let skill = found
                .skills
                .get(&name)
                .with_context(|| format!("no skill named {name} (see `sandbox skill list`)"))?;
            let (profile, _) = roots.profile()?;
            let launch = sandbox::skill::Launch {
                profile,
                project: project_of(&roots)?,
                grants,
                audit,
                interactive: !non_interactive,
                ask_client: false,
                question_timeout: sandbox::broker::prompt::DEFAULT_DEADLINE,
                // One invocation in this process: nothing to prepare ahead of.
                prepare_ahead: false,
            };
            run_skill(skill, &launch, params, json)
        }
        SkillCommand::Explain {
            name,
            roots,
            output,
        } => explain(&name, &roots, &output),
        SkillCommand::Check { dir, roots } => {
            let found = match dir {
                Some(dir) if dir.join("SKILL.md").is_file() => {
                    let mut found = manifest::Discovered::default();
                    match manifest::load(&dir) {
                        Ok(skill) => {
                            found.skills.insert(skill.name.clone(), skill);
                        }
                        Err(err) => found.invalid.push(err),
                    }
                    found
                }
                Some(dir) => manifest::discover(&[dir]),
                None => discover(&roots)?,
            };
            let (profile, _) = roots.profile()?;
            for err in &found.invalid {
                eprintln!("{err}");
            }
            let refused = refusals(&found, &profile);
            for skill in found.skills.values() {
                let manifest = skill.dir.join("SKILL.md");
                match refused.iter().find(|(name, _)| *name == skill.name) {
                    Some((_, refusal)) => eprintln!("{}: error: {refusal}", manifest.display()),
                    None => println!("{}: ok ({})", manifest.display(), skill.name),
                }
            }
            for (name, used, ignored) in &found.duplicates {
                eprintln!(
                    "skill {name} is defined twice: {} and {}",
                    used.display(),
                    ignored.display()
                );
            }
            for error in found.shadowing_errors() {
                eprintln!("error: {error}");
            }
            Ok(
                if found.invalid.is_empty()
                    && found.duplicates.is_empty()
                    && found.shadowed.is_empty()
                    && refused.is_empty()
                {
                    0
                } else {
                    2
                },
            )
        }
    }
}

/// `sandbox skill explain`: the policy a run of the skill gets (the one
/// `skill run` uses, `policy_for`), rated.
fn explain(name: &str, roots: &Roots, output: &crate::explain::OutputArgs) -> anyhow::Result<i32> {
    let found = discover(roots)?;
    let (profile, _) = roots.profile()?;
    let skill = found
        .skills
        .get(name)
        .with_context(|| format!("no skill named {name} (see `sandbox skill list`)"))?;
    if skill.execution_mode == ExecutionMode::Template {
        anyhow::bail!(crate::UsageError(format!(
            "skill {name} is a template: it is never run, so no sandbox is made for it to rate; `sandbox skill show {name}` prints its files"
        )));
    }
    let policy = match sandbox::skill::launch::policy_for(skill, &profile) {
        Ok(policy) => policy,
        Err(refusal) => {
            eprintln!("sandbox: error: {refusal}");
            return Ok(EXIT_REFUSED);
        }
    };
    let context = crate::explain::context(Some(&project_of(roots)?));
    let subject = sandbox::exposure::Subject::of_policy(&policy, &context);
    let assessment = sandbox::exposure::assess(
        sandbox::exposure::Rated {
            kind: "skill",
            name: skill.name.clone(),
            profile: Some(policy.name.clone()),
        },
        &subject,
        &context,
    );
    crate::explain::print(&assessment, output)
}
