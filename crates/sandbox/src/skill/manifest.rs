//! `SKILL.md`: YAML front matter between `---` lines, then the instructions
//! in Markdown. The keys of the common Agent Skills format (`name`,
//! `description`, `license`, `allowed-tools`, `metadata`) are accepted so
//! existing skills load; ours are checked strictly, and every error names
//! the file, the line and the field, with the valid values.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::profile::size;

/// Largest SKILL.md read: front matter and instructions are text for a
/// person or a model, and a planted multi-gigabyte file must not be read
/// into memory.
const MAX_MANIFEST_SIZE: u64 = 1 << 20;

/// Read a SKILL.md that a sandboxed run may have planted: a regular file
/// only (a FIFO would block discovery, a device never ends), opened
/// without following a final symlink, and at most [`MAX_MANIFEST_SIZE`].
fn read_manifest(file: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let opened = crate::safe_file::open_read(file)?;
    let mut bytes = Vec::new();
    opened.take(MAX_MANIFEST_SIZE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_MANIFEST_SIZE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {MAX_MANIFEST_SIZE} bytes"),
        ));
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// A profile a manifest may name: a bare name, which resolves to a
/// built-in profile or a file in the person's profile directory, never a
/// path (a path would be resolved in the skill's own directory, or
/// anywhere the skill's author likes).
pub fn is_profile_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && !name.starts_with(['-', '_'])
}

/// The person's profile directory: `$XDG_CONFIG_HOME/sandbox/profiles`, or
/// `~/.config/sandbox/profiles`. Outside every project, so a sandboxed run
/// that can write its project cannot add a profile a skill then names.
pub fn installed_profiles() -> Option<PathBuf> {
    config_dir().map(|c| c.join("sandbox/profiles"))
}

fn installed_profiles_hint() -> String {
    installed_profiles().map_or_else(
        || "~/.config/sandbox/profiles".into(),
        |p| p.display().to_string(),
    )
}

fn config_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
}

/// How a skill's code is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// `node MAIN`
    Node,
    /// `python3 MAIN`
    Python,
    /// `sh MAIN`
    Sh,
    /// MAIN itself, executable.
    Exec,
}

/// Whether the skill runs at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ExecutionMode {
    /// Run it.
    #[default]
    Direct,
    /// Never run: its instructions and scripts are text for a model to adapt.
    Template,
}

/// When a skill's process exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// One process per invocation.
    #[default]
    OnDemand,
    /// One long-lived process serving many invocations.
    Persistent,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawManifest {
    name: String,
    description: String,
    // The common Agent Skills keys, kept for display only.
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    allowed_tools: Option<serde_norway::Value>,
    #[serde(default)]
    metadata: Option<BTreeMap<String, serde_norway::Value>>,
    // Ours.
    #[serde(default)]
    runtime: Option<Runtime>,
    #[serde(default)]
    main: Option<String>,
    #[serde(default)]
    permissions: Vec<String>,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    memory: Option<String>,
    #[serde(default)]
    execution_mode: ExecutionMode,
    #[serde(default)]
    activation: Activation,
    #[serde(default)]
    input_schema: Option<serde_json::Value>,
    #[serde(default)]
    output_schema: Option<serde_json::Value>,
}

/// A validated skill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Skill {
    /// Its name (lowercase letters, digits and dashes).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its directory.
    pub dir: PathBuf,
    /// How it runs (None for templates).
    pub runtime: Option<Runtime>,
    /// Its entry file, relative to `dir`.
    pub main: Option<PathBuf>,
    /// Declared permissions: `action` or `action:pattern`.
    pub permissions: Vec<String>,
    /// The profile it asks for: a built-in or installed profile's name
    /// (never a file), run within the person's own profile. None: the
    /// person's profile as it is.
    pub profile: Option<String>,
    /// Invocation timeout.
    pub timeout: Option<std::time::Duration>,
    /// Memory limit override in bytes.
    pub memory: Option<u64>,
    /// Direct or template.
    pub execution_mode: ExecutionMode,
    /// On-demand or persistent.
    pub activation: Activation,
    /// JSON Schema of the parameters.
    pub input_schema: Option<serde_json::Value>,
    /// JSON Schema of the result, for agent hosts (MCP's `outputSchema`);
    /// not checked against results.
    pub output_schema: Option<serde_json::Value>,
    /// `input_schema`, compiled once when the manifest loads.
    #[serde(skip)]
    pub params_validator: Option<ParamsValidator>,
    /// License, from the Agent Skills keys.
    pub license: Option<String>,
    /// The Markdown after the front matter.
    #[serde(skip)]
    pub instructions: String,
}

/// A compiled input schema. Equal whenever the schemas are (the `Skill`
/// comparing its `input_schema` decides), so it never makes two loads of
/// the same manifest differ.
#[derive(Clone)]
pub struct ParamsValidator(pub std::sync::Arc<super::params::ParamsSchema>);

impl PartialEq for ParamsValidator {
    fn eq(&self, _: &ParamsValidator) -> bool {
        true
    }
}

impl std::fmt::Debug for ParamsValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ParamsValidator")
    }
}

/// Why a manifest is invalid: the file, the line and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{}:{line}: {}",
    crate::broker::prompt::escape(&file.display().to_string()),
    crate::broker::prompt::escape(message)
)]
pub struct ManifestError {
    /// The SKILL.md.
    pub file: PathBuf,
    /// 1-based line in that file.
    pub line: usize,
    /// What is wrong, naming the field and the valid values.
    pub message: String,
}

/// Longest description, in characters: the Agent Skills format's own
/// bound, and what an agent host reads for every tool on every turn.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;

/// A manifest's free text as every listing shows it (MCP's `tools/list`,
/// serve's `skill.list`, the daemon's skills API, `sandbox skill list`):
/// one paragraph (YAML's folded and literal blocks become spaces, so the
/// skill's words cannot open a paragraph that reads as the sandbox's), with
/// controls, bidi overrides and invisible characters escaped by the same
/// escaper as the permission prompt. A project skill's manifest is written
/// by whoever wrote the project; escaped once here, it is safe everywhere.
fn shown_text(text: &str) -> String {
    let one_paragraph = text
        .split(['\n', '\r', '\t'])
        .filter(|l| !l.trim().is_empty());
    let joined: Vec<&str> = one_paragraph.map(str::trim).collect();
    crate::broker::prompt::escape(&joined.join(" "))
}

/// Split `---` front matter from the body; returns (yaml, its first line
/// number in the file, body).
fn front_matter(text: &str) -> Option<(&str, usize, &str)> {
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---").map(|i| (i, i + 4))?;
    let yaml = &rest[..end.0 + 1];
    let body = rest[end.1..].trim_start_matches(['\r', '\n']);
    Some((yaml, 2, body))
}

/// Line of `key:` in the front matter, for errors found after parsing.
fn line_of(yaml: &str, first_line: usize, key: &str) -> usize {
    yaml.lines()
        .position(|l| l.starts_with(&format!("{key}:")))
        .map_or(first_line, |i| first_line + i)
}

/// Parse and validate `dir/SKILL.md`.
pub fn load(dir: &Path) -> Result<Skill, ManifestError> {
    let file = dir.join("SKILL.md");
    let text = read_manifest(&file).map_err(|e| ManifestError {
        file: file.clone(),
        line: 0,
        message: format!("cannot read it: {e}"),
    })?;
    parse(dir, &text)
}

/// Validate the text of `dir/SKILL.md`; `dir` is where `main` must exist.
pub fn parse(dir: &Path, text: &str) -> Result<Skill, ManifestError> {
    let file = dir.join("SKILL.md");
    let err = |line: usize, message: String| ManifestError {
        file: file.clone(),
        line,
        message,
    };
    let (yaml, first, body) = front_matter(text).ok_or_else(|| {
        err(
            1,
            "no front matter: the file must start with a `---` line and close it with another"
                .into(),
        )
    })?;
    let raw: RawManifest = serde_norway::from_str(yaml).map_err(|e| {
        let line = e.location().map_or(first, |l| first + l.line() - 1);
        err(
            line,
            e.to_string()
                .split(" at line ")
                .next()
                .unwrap_or("invalid YAML")
                .to_string(),
        )
    })?;
    let at = |key: &str| line_of(yaml, first, key);

    if raw.name.is_empty()
        || raw.name.len() > 64
        || !raw
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(err(
            at("name"),
            format!(
                "name {:?}: use 1 to 64 lowercase letters, digits and dashes",
                raw.name
            ),
        ));
    }
    if raw.description.trim().is_empty() {
        return Err(err(
            at("description"),
            "description is empty: say what the skill does".into(),
        ));
    }
    let description_chars = raw.description.trim().chars().count();
    if description_chars > MAX_DESCRIPTION_CHARS {
        return Err(err(
            at("description"),
            format!(
                "description is {description_chars} characters, more than the \
                 {MAX_DESCRIPTION_CHARS} an agent host is shown: say briefly what the skill \
                 does and put the details in the body of SKILL.md"
            ),
        ));
    }
    let main = match (&raw.main, raw.execution_mode) {
        (Some(main), _) => {
            let path = PathBuf::from(main);
            if path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir)) {
                return Err(err(
                    at("main"),
                    format!("main {main:?} must be a path inside the skill's directory"),
                ));
            }
            if !dir.join(&path).is_file() {
                return Err(err(
                    at("main"),
                    format!("main {main:?}: no such file in {}", dir.display()),
                ));
            }
            Some(path)
        }
        (None, ExecutionMode::Direct) => return Err(err(
            first,
            "main is missing: a direct skill needs its entry file (or execution-mode: template)"
                .into(),
        )),
        (None, ExecutionMode::Template) => None,
    };
    if raw.execution_mode == ExecutionMode::Direct && raw.runtime.is_none() {
        return Err(err(
            first,
            "runtime is missing: one of node, python, sh, exec".into(),
        ));
    }
    for permission in &raw.permissions {
        if let Err(error) = permission.parse::<crate::action::Permission>() {
            return Err(err(at("permissions"), format!("permission {error}")));
        }
    }
    // The same ranges as a profile's and the command line's: a timeout
    // becomes a deadline (`Instant + timeout`), which must not overflow.
    let timeout = raw
        .timeout
        .as_deref()
        .map(|t| crate::profile::parse_duration(t).and_then(size::check_timeout))
        .transpose()
        .map_err(|e| err(at("timeout"), format!("timeout: {e}")))?;
    let memory = raw
        .memory
        .as_deref()
        .map(|m| crate::profile::parse_size(m).and_then(size::check_memory))
        .transpose()
        .map_err(|e| err(at("memory"), format!("memory: {e}")))?;
    if let Some(profile) = &raw.profile {
        if !is_profile_name(profile) {
            return Err(err(
                at("profile"),
                format!(
                    "profile {profile:?}: name a built-in profile ({}) or one installed in {}; \
                     a skill cannot bring its own profile file, it only narrows yours",
                    crate::profile::builtin_names().join(", "),
                    installed_profiles_hint()
                ),
            ));
        }
    }
    let mut params_validator = None;
    if let Some(schema) = &raw.input_schema {
        if !schema.is_object() {
            return Err(err(
                at("input-schema"),
                "input-schema must be a JSON Schema object".into(),
            ));
        }
        super::params::check_shown(schema)
            .map_err(|e| err(at("input-schema"), format!("input-schema: {e}")))?;
        match super::params::ParamsSchema::compile(schema) {
            Ok(compiled) => {
                params_validator = Some(ParamsValidator(std::sync::Arc::new(compiled)));
            }
            Err(e) => {
                return Err(err(
                    at("input-schema"),
                    format!("input-schema is not a valid JSON Schema for a skill: {e}"),
                ))
            }
        }
    }
    // MCP's structured results are objects, and so is the schema a host
    // checks them against.
    if let Some(schema) = &raw.output_schema {
        super::params::check_shown(schema)
            .map_err(|e| err(at("output-schema"), format!("output-schema: {e}")))?;
        if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
            return Err(err(
                at("output-schema"),
                "output-schema must be a JSON Schema object with `type: object` \
                 (agent hosts take structured results as objects)"
                    .into(),
            ));
        }
    }
    let _ = (&raw.allowed_tools, &raw.metadata);
    Ok(Skill {
        name: raw.name,
        description: shown_text(&raw.description),
        dir: dir.to_path_buf(),
        runtime: raw.runtime,
        main,
        permissions: raw.permissions,
        profile: raw.profile,
        timeout,
        memory,
        execution_mode: raw.execution_mode,
        activation: raw.activation,
        input_schema: raw.input_schema,
        output_schema: raw.output_schema,
        params_validator,
        license: raw.license.as_deref().map(shown_text),
        instructions: body.to_string(),
    })
}

/// Skills found under the roots, and what went wrong finding them.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Valid skills by name.
    pub skills: BTreeMap<String, Skill>,
    /// Manifests that did not load.
    pub invalid: Vec<ManifestError>,
    /// Names defined more than once among the person's own roots: (name,
    /// the one used, the one ignored).
    pub duplicates: Vec<(String, PathBuf, PathBuf)>,
    /// Skills of the project's `.skills/` named like one of the person's
    /// own: (name, the person's skill, which is used; the project's, which
    /// is never run). A sandboxed run can write its project, so this is
    /// what planting a look-alike skill looks like.
    pub shadowed: Vec<(String, PathBuf, PathBuf)>,
}

impl Discovered {
    /// One line per shadowing attempt, naming both directories.
    pub fn shadowing_errors(&self) -> Vec<String> {
        self.shadowed
            .iter()
            .map(|(name, user, project)| {
                format!(
                    "the project's skill {} is named {name} like your skill {}; yours is used and the project's is \
                     ignored (rename or remove one of them)",
                    project.display(),
                    user.display()
                )
            })
            .collect()
    }
}

/// Where skills come from: the person's own roots, then the project's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots {
    /// `--skills-dir` ones, then `$XDG_CONFIG_HOME/sandbox/skills` (or
    /// `~/.config/sandbox/skills`), highest priority first.
    pub user: Vec<PathBuf>,
    /// The project's `.skills/`: it never replaces a skill of `user`.
    pub project: Option<PathBuf>,
}

impl Roots {
    /// Every root, the person's first.
    pub fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.user.iter().chain(&self.project)
    }
}

/// The skill directories (those holding SKILL.md) directly below `root`.
fn skill_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("SKILL.md").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// Every directory [`discover_roots`] would read a skill from, in no
/// particular order (a caller fingerprints them before they are read).
pub(crate) fn candidate_dirs(roots: &Roots) -> Vec<PathBuf> {
    roots
        .user
        .iter()
        .chain(roots.project.iter())
        .flat_map(|root| skill_dirs(root))
        .collect()
}

/// Every skill directory directly below each of `roots`, all trusted
/// alike: a name defined again later is reported and the first one wins.
pub fn discover(roots: &[PathBuf]) -> Discovered {
    discover_roots(&Roots {
        user: roots.to_vec(),
        project: None,
    })
}

/// Every skill of `roots`: the person's roots first (a name defined again
/// later among them is reported, the first wins), then the project's,
/// whose skills never replace one of the person's (see
/// [`Discovered::shadowed`]).
pub fn discover_roots(roots: &Roots) -> Discovered {
    let mut found = Discovered::default();
    // The project's root may be one of the person's too (`--skills-dir
    // .skills`): then its skills were found as theirs.
    let project = roots
        .project
        .as_ref()
        .filter(|p| !roots.user.iter().any(|u| same_dir(u, p)));
    let sources = roots
        .user
        .iter()
        .map(|root| (root, false))
        .chain(project.map(|root| (root, true)));
    // Names the project itself defined first: a second one there is a plain
    // duplicate, not a shadowing attempt.
    let mut planted = std::collections::BTreeSet::new();
    for (root, in_project) in sources {
        for dir in skill_dirs(root) {
            match load(&dir) {
                Ok(skill) => match found.skills.get(&skill.name) {
                    Some(first) => {
                        let clash = (skill.name.clone(), first.dir.clone(), dir);
                        if in_project && !planted.contains(&skill.name) {
                            found.shadowed.push(clash);
                        } else {
                            found.duplicates.push(clash);
                        }
                    }
                    None => {
                        if in_project {
                            planted.insert(skill.name.clone());
                        }
                        found.skills.insert(skill.name.clone(), skill);
                    }
                },
                Err(e) => found.invalid.push(e),
            }
        }
    }
    found
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The skill roots: the person's (`--skills-dir` ones, then
/// `$XDG_CONFIG_HOME/sandbox/skills` or `~/.config/sandbox/skills`), and
/// the project's `.skills/`.
pub fn roots(extra: &[PathBuf], project: &Path) -> Roots {
    let mut user = extra.to_vec();
    if let Some(config) = config_dir() {
        user.push(config.join("sandbox/skills"));
    }
    Roots {
        user,
        project: Some(project.join(".skills")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(dir: &Path, name: &str, manifest: &str) -> PathBuf {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("SKILL.md"), manifest).unwrap();
        std::fs::write(d.join("index.js"), "").unwrap();
        d
    }

    const GOOD: &str = "---\nname: file-tool\ndescription: Reads and writes files\nruntime: node\nmain: index.js\n\
permissions: [fs.read, \"fs.write:dist/**\"]\nactivation: persistent\ntimeout: 5s\n\
input-schema: {type: object, properties: {path: {type: string}}, required: [path]}\n---\n# How to use\nCall it.\n";

    #[test]
    fn a_valid_manifest_loads() {
        let root = tempfile::tempdir().unwrap();
        let s = load(&skill(root.path(), "a", GOOD)).unwrap();
        assert_eq!(s.name, "file-tool");
        assert_eq!(s.runtime, Some(Runtime::Node));
        assert_eq!(s.permissions, vec!["fs.read", "fs.write:dist/**"]);
        assert_eq!(s.activation, Activation::Persistent);
        assert_eq!(s.timeout, Some(std::time::Duration::from_secs(5)));
        assert_eq!(s.profile, None);
        assert_eq!(s.instructions, "# How to use\nCall it.\n");
        assert_eq!(s.input_schema.unwrap()["required"][0], "path");
        assert_eq!(s.output_schema, None);
        let with_output = GOOD.replacen(
            "---\n# How",
            "output-schema: {type: object, properties: {n: {type: integer}}}\n---\n# How",
            1,
        );
        let s = load(&skill(root.path(), "b", &with_output)).unwrap();
        assert_eq!(
            s.output_schema.unwrap()["properties"]["n"]["type"],
            "integer"
        );
    }

    #[test]
    fn an_agent_skills_manifest_loads_as_a_template() {
        let root = tempfile::tempdir().unwrap();
        let text = "---\nname: pdf\ndescription: Fill PDF forms\nlicense: Apache-2.0\nallowed-tools: [Bash]\n\
metadata: {version: 1}\nexecution-mode: template\n---\nSteps...\n";
        let s = load(&skill(root.path(), "pdf", text)).unwrap();
        assert_eq!(s.execution_mode, ExecutionMode::Template);
        assert_eq!(s.license.as_deref(), Some("Apache-2.0"));
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_valid_values() {
        let root = tempfile::tempdir().unwrap();
        let cases = [
            (
                "runtime: ruby",
                4,
                "unknown variant `ruby`, expected one of `node`, `python`, `sh`, `exec`",
            ),
            (
                "activation: always",
                4,
                "unknown variant `always`, expected `on-demand` or `persistent`",
            ),
            ("colour: blue", 4, "unknown field `colour`"),
            (
                "permissions: [fs.writ]",
                4,
                "\"fs.writ\" is not a broker action",
            ),
            ("timeout: soon", 4, "timeout:"),
            (
                "input-schema: {type: 12}",
                4,
                "input-schema is not a valid JSON Schema",
            ),
            (
                "output-schema: [1]",
                4,
                "output-schema must be a JSON Schema object with `type: object`",
            ),
            (
                "output-schema: {type: string}",
                4,
                "output-schema must be a JSON Schema object with `type: object`",
            ),
        ];
        for (i, (line, at, message)) in cases.iter().enumerate() {
            let text = format!(
                "---\nname: x\ndescription: y\n{line}\nruntime: node\nmain: index.js\n---\n"
            );
            let text = if line.starts_with("runtime") {
                text.replacen("\nruntime: node", "", 1)
            } else {
                text
            };
            let dir = skill(root.path(), &format!("s{i}"), &text);
            let err = load(&dir).unwrap_err();
            assert_eq!(err.line, *at, "{line}: {err}");
            assert!(err.message.contains(message), "{line}: {err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("{}:{at}:", dir.join("SKILL.md").display())),
                "{err}"
            );
        }
        let no_front = skill(root.path(), "nf", "# just markdown\n");
        assert!(load(&no_front)
            .unwrap_err()
            .message
            .starts_with("no front matter"));
        let outside = skill(
            root.path(),
            "out",
            "---\nname: o\ndescription: d\nruntime: sh\nmain: ../x.sh\n---\n",
        );
        assert_eq!(load(&outside).unwrap_err().line, 5);
    }

    #[test]
    fn a_manifest_names_a_profile_never_a_file() {
        let root = tempfile::tempdir().unwrap();
        for (i, profile) in ["own.toml", "./own", "/etc/p.toml", "../x", "", "Strict"]
            .iter()
            .enumerate()
        {
            let text = format!(
                "---\nname: p{i}\ndescription: d\nruntime: node\nmain: index.js\nprofile: \"{profile}\"\n---\n"
            );
            let err = load(&skill(root.path(), &format!("p{i}"), &text)).unwrap_err();
            assert_eq!(err.line, 6, "{profile}: {err}");
            assert!(
                err.message.contains("cannot bring its own profile file"),
                "{profile}: {err}"
            );
        }
        let text = "---\nname: ok\ndescription: d\nruntime: node\nmain: index.js\nprofile: my-team_1\n---\n";
        let s = load(&skill(root.path(), "ok", text)).unwrap();
        assert_eq!(s.profile.as_deref(), Some("my-team_1"));
    }

    #[test]
    fn a_project_skill_never_replaces_one_of_the_persons() {
        let own = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let mine = skill(own.path(), "mine", GOOD);
        let planted = skill(project.path(), "planted", GOOD);
        let other = GOOD.replace("name: file-tool", "name: other");
        skill(project.path(), "other", &other);
        let found = discover_roots(&Roots {
            user: vec![own.path().to_path_buf()],
            project: Some(project.path().to_path_buf()),
        });
        assert_eq!(found.skills["file-tool"].dir, mine);
        assert!(found.skills.contains_key("other"));
        assert_eq!(
            found.shadowed,
            [("file-tool".to_string(), mine.clone(), planted.clone())]
        );
        let error = &found.shadowing_errors()[0];
        assert!(
            error.contains(&mine.display().to_string())
                && error.contains(&planted.display().to_string()),
            "{error}"
        );
        // The project's root given as one of the person's own is theirs.
        let found = discover_roots(&Roots {
            user: vec![project.path().to_path_buf()],
            project: Some(project.path().to_path_buf()),
        });
        assert!(found.shadowed.is_empty() && found.duplicates.is_empty());
    }

    #[test]
    fn a_manifest_that_is_no_regular_file_or_too_big_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let fifo = root.path().join("fifo");
        std::fs::create_dir_all(&fifo).unwrap();
        nix::unistd::mkfifo(&fifo.join("SKILL.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(load(&fifo)
            .unwrap_err()
            .message
            .contains("not a regular file"));
        let big = root.path().join("big");
        std::fs::create_dir_all(&big).unwrap();
        std::fs::write(
            big.join("SKILL.md"),
            vec![b'-'; (MAX_MANIFEST_SIZE + 1) as usize],
        )
        .unwrap();
        assert!(load(&big).unwrap_err().message.contains("larger than"));
    }

    #[test]
    fn discovery_skips_invalid_skills_and_reports_duplicates() {
        let root_a = tempfile::tempdir().unwrap();
        let root_b = tempfile::tempdir().unwrap();
        skill(root_a.path(), "one", GOOD);
        skill(
            root_a.path(),
            "broken",
            "---\nname: Bad Name\ndescription: d\n---\n",
        );
        skill(root_b.path(), "again", GOOD);
        let found = discover(&[root_a.path().to_path_buf(), root_b.path().to_path_buf()]);
        assert_eq!(found.skills.len(), 1);
        assert_eq!(found.invalid.len(), 1);
        assert!(
            found.invalid[0].message.contains("lowercase letters"),
            "{:?}",
            found.invalid
        );
        assert_eq!(found.duplicates.len(), 1);
        assert!(
            found.duplicates[0].1.starts_with(root_a.path()),
            "the first root wins"
        );
    }
}
