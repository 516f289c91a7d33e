//! Profiles: TOML files (built in and user-written) parsed into a [`policy::Policy`].
//!
//! Loading is parse, then check, then resolve: each file in an `extends` chain
//! is parsed and checked on its own (so every error points at the file and line
//! that caused it), then the chain is applied over strict's values, root first.
//! Nothing here has side effects beyond reading profile files; whether the
//! paths exist is the spawn code's business.
//!
//! ```
//! let policy = sandbox::profile::load("strict").unwrap();
//! assert_eq!(policy.network.mode, sandbox::profile::policy::NetworkMode::None);
//! ```

use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

pub mod builtin;
mod error;
pub mod policy;
pub mod raw;
mod size;

pub use error::ProfileError;
pub use size::{parse_duration, parse_size};

use policy::{Decision, Enforcement, NetworkMode, Policy, ProjectAccess, SyscallMode};
use raw::{Layer, Source};

/// How many `extends` links a chain may have (`permissive` uses 2).
pub const MAX_EXTENDS_DEPTH: usize = 8;

/// Profile files are small; refusing big ones keeps `--profile /dev/zero` from
/// eating memory.
const MAX_FILE_SIZE: u64 = 1 << 20;

/// The built-in profile names, strictest first: `["strict", "standard", "permissive"]`.
pub fn builtin_names() -> &'static [&'static str] {
    builtin::names()
}

/// The TOML text of a built-in profile, as embedded in the binary.
pub fn builtin_source(name: &str) -> Option<&'static str> {
    builtin::source(name)
}

/// Whether `--profile SPEC` names a file rather than a built-in.
fn is_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".toml")
}

/// Load a profile named on the command line: a built-in name, or a path
/// (anything containing '/' or ending in ".toml").
pub fn load(spec: &str) -> Result<Policy, ProfileError> {
    if is_path(spec) {
        return load_file(Path::new(spec));
    }
    match builtin::source(spec) {
        Some(text) => resolve(Unit::builtin(spec, text)),
        None => Err(ProfileError::UnknownProfile {
            name: spec.to_owned(),
        }),
    }
}

/// Load a profile file; a relative `extends` is resolved against its directory.
pub fn load_file(path: &Path) -> Result<Policy, ProfileError> {
    let text = read_profile(path).map_err(|source| ProfileError::Read {
        path: path.to_owned(),
        source,
    })?;
    resolve(Unit::file(path.to_owned(), text))
}

/// Parse profile text. `origin` names it in messages and is its file name:
/// the profile is named after its stem, and a relative `extends` is resolved
/// against its directory.
pub fn parse(source: &str, origin: &str) -> Result<Policy, ProfileError> {
    resolve(Unit::file(PathBuf::from(origin), source.to_owned()))
}

/// The effective profile as TOML: every value explicit, no `extends`.
/// Parsing the output gives the same policy back (named after the new file).
pub fn to_toml(policy: &Policy) -> String {
    let mut out = String::new();
    let fs = &policy.filesystem;
    let limits = &policy.limits;
    let line = |out: &mut String, key: &str, value: String| {
        out.push_str(key);
        out.push_str(" = ");
        out.push_str(&value);
        out.push('\n');
    };
    out.push_str(&format!(
        "# Effective profile `{}`, with `extends` resolved.\nversion = 1\n\n[filesystem]\n",
        policy.name.escape_default()
    ));
    let project = match fs.project {
        ProjectAccess::ReadWrite => "rw",
        ProjectAccess::ReadOnly => "ro",
    };
    line(&mut out, "project", quote(project));
    line(&mut out, "read", path_list(&fs.read));
    line(&mut out, "read_if_exists", path_list(&fs.read_if_exists));
    line(&mut out, "write", path_list(&fs.write));
    line(&mut out, "hide", path_list(&fs.hide));
    line(&mut out, "tmp", quote(&size::format_size(fs.tmp_size)));
    out.push_str("\n[network]\n");
    let mode = match policy.network.mode {
        NetworkMode::None => "none",
        NetworkMode::Loopback => "loopback",
        NetworkMode::Host => "host",
    };
    line(&mut out, "mode", quote(mode));
    out.push_str("\n[limits]\n");
    let unlimited = || quote("unlimited");
    let size_or = |v: Option<u64>| v.map_or_else(unlimited, |b| quote(&size::format_size(b)));
    let count_or = |v: Option<u64>| v.map_or_else(unlimited, |n| n.to_string());
    line(&mut out, "memory", size_or(limits.memory));
    line(&mut out, "pids", count_or(limits.pids));
    // `{:?}` keeps the ".0" that makes 1.0 a TOML float.
    line(
        &mut out,
        "cpu",
        limits.cpu.map_or_else(unlimited, |c| format!("{c:?}")),
    );
    line(
        &mut out,
        "timeout",
        limits
            .timeout
            .map_or_else(unlimited, |t| quote(&size::format_duration(t))),
    );
    line(&mut out, "output", size_or(limits.output));
    line(&mut out, "nofile", count_or(limits.nofile));
    out.push_str("\n[syscalls]\n");
    let mode = match policy.syscalls.mode {
        SyscallMode::Allowlist => "allowlist",
        SyscallMode::Denylist => "denylist",
    };
    line(&mut out, "mode", quote(mode));
    line(&mut out, "allow", string_list(&policy.syscalls.allow));
    line(&mut out, "deny", string_list(&policy.syscalls.deny));
    out.push_str("\n[env]\n");
    line(&mut out, "pass", string_list(&policy.env.pass));
    out.push_str("\n[env.set]\n");
    for (name, value) in &policy.env.set {
        line(&mut out, &quote(name), quote(value));
    }
    out.push_str("\n[broker]\n");
    line(
        &mut out,
        "default",
        quote(decision_name(policy.broker.default)),
    );
    out.push_str("\n[broker.rules]\n");
    for (action, decision) in &policy.broker.rules {
        line(&mut out, &quote(action), quote(decision_name(*decision)));
    }
    out.push_str("\n[enforce]\n");
    let e = &policy.enforce;
    for (key, level) in [
        ("userns", e.userns),
        ("landlock", e.landlock),
        ("seccomp", e.seccomp),
        ("cgroups", e.cgroups),
    ] {
        line(&mut out, key, quote(enforcement_name(level)));
    }
    out
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Ask => "ask",
        Decision::Deny => "deny",
    }
}

fn enforcement_name(e: Enforcement) -> &'static str {
    match e {
        Enforcement::Required => "required",
        Enforcement::BestEffort => "best-effort",
        Enforcement::Off => "off",
    }
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn string_list<S: AsRef<str>>(items: &[S]) -> String {
    if items.len() <= 3 {
        let inner: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
        return format!("[{}]", inner.join(", "));
    }
    let mut out = String::from("[\n");
    for item in items {
        out.push_str("    ");
        out.push_str(&quote(item.as_ref()));
        out.push_str(",\n");
    }
    out.push(']');
    out
}

/// Paths that are not UTF-8 cannot come from a profile file; a policy built in
/// code could hold one, and is then shown lossily.
fn path_list(paths: &[PathBuf]) -> String {
    let items: Vec<Cow<str>> = paths.iter().map(|p| p.to_string_lossy()).collect();
    string_list(&items)
}

/// Read at most [`MAX_FILE_SIZE`] bytes of a profile file.
fn read_profile(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_SIZE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} bytes, too big for a profile", MAX_FILE_SIZE),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// One profile in an `extends` chain.
struct Unit {
    /// Its name in messages: the path as given, or the built-in's name.
    origin: String,
    /// What makes two units the same profile, for cycle detection.
    identity: String,
    /// Where a relative `extends` in it points from.
    dir: PathBuf,
    /// The name a policy resolved from it gets.
    name: String,
    text: Cow<'static, str>,
}

impl Unit {
    fn builtin(name: &str, text: &'static str) -> Unit {
        Unit {
            origin: name.to_owned(),
            identity: format!("builtin:{name}"),
            dir: PathBuf::new(),
            name: name.to_owned(),
            text: Cow::Borrowed(text),
        }
    }

    fn file(path: PathBuf, text: String) -> Unit {
        // Canonical, so "a.toml" and "./a.toml" are recognised as one file in a cycle.
        let identity = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Unit {
            origin: path.display().to_string(),
            identity: format!("file:{}", identity.display()),
            dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            name: path.file_stem().map_or_else(
                || path.display().to_string(),
                |s| s.to_string_lossy().into_owned(),
            ),
            text: Cow::Owned(text),
        }
    }
}

/// Parse every profile in the chain starting at `first`, then apply them over
/// strict's values, root first.
fn resolve(first: Unit) -> Result<Policy, ProfileError> {
    let name = first.name.clone();
    let mut chain: Vec<Unit> = Vec::new();
    let mut layers: Vec<Layer> = Vec::new();
    let mut current = first;
    loop {
        let source = Source {
            origin: &current.origin,
            text: &current.text,
        };
        let mut layer = Layer::parse(&source)?;
        let Some(extends) = layer.extends.take() else {
            layers.push(layer);
            break;
        };
        let (line, column) = source.line_column(extends.span().start);
        let next = locate(&current, extends.get_ref(), extends.span(), &source)?;
        layers.push(layer);
        chain.push(current);
        let origins = || -> Vec<String> { chain.iter().map(|u| u.origin.clone()).collect() };
        let here = chain.last().map(|u| u.origin.clone()).unwrap_or_default();
        if let Some(start) = chain.iter().position(|u| u.identity == next.identity) {
            let mut cycle: Vec<String> = origins().split_off(start);
            cycle.push(next.origin.clone());
            return Err(ProfileError::ExtendsCycle {
                origin: here,
                line,
                column,
                chain: cycle,
            });
        }
        if chain.len() > MAX_EXTENDS_DEPTH {
            let mut followed = origins();
            followed.push(next.origin.clone());
            return Err(ProfileError::ExtendsTooDeep {
                origin: here,
                line,
                column,
                max: MAX_EXTENDS_DEPTH,
                chain: followed,
            });
        }
        current = next;
    }
    let mut policy = builtin::defaults();
    for layer in layers.into_iter().rev() {
        layer.apply(&mut policy);
    }
    policy.name = name;
    Ok(policy)
}

/// The profile an `extends` value names, read but not yet parsed.
fn locate(
    from: &Unit,
    target: &str,
    span: std::ops::Range<usize>,
    source: &Source,
) -> Result<Unit, ProfileError> {
    if !is_path(target) {
        return match builtin::source(target) {
            Some(text) => Ok(Unit::builtin(target, text)),
            None => Err(source.error(
                span,
                format!(
                    "unknown built-in profile `{target}` in `extends`: valid choices are {}, or a path to a file (containing '/' or ending in \".toml\")",
                    builtin::choices()
                ),
            )),
        };
    }
    let path = from.dir.join(target);
    match read_profile(&path) {
        Ok(text) => Ok(Unit::file(path, text)),
        Err(err) => {
            let (line, column) = source.line_column(span.start);
            Err(ProfileError::ExtendsRead {
                origin: from.origin.clone(),
                line,
                column,
                path,
                source: err,
            })
        }
    }
}
