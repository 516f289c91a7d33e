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
//! assert_eq!(policy.network.mode, sandbox::profile::policy::NetworkMode::Loopback);
//! ```

use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

pub mod builtin;
mod error;
pub mod lint;
pub mod narrow;
pub mod overrides;
pub mod permission;
pub mod policy;
pub mod raw;
pub mod size;
pub mod tools;

pub use error::ProfileError;
pub use size::{format_duration, parse_duration, parse_size};

use policy::{Decision, NetworkMode, Policy, ProjectAccess, SyscallMode};
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
    // strict's file is what `defaults()` builds in code (a unit test keeps
    // the two equal), so the default profile costs no TOML parsing per run.
    if spec == "strict" {
        return Ok(builtin::defaults());
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
    resolve(file_unit(path)?)
}

fn file_unit(path: &Path) -> Result<Unit, ProfileError> {
    let text = read_profile(path).map_err(|source| ProfileError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(Unit::file(path.to_owned(), text))
}

/// A valid profile and what `sandbox profile check` warns about it.
#[derive(Debug)]
pub struct Checked {
    /// The effective profile, as [`load`] gives it.
    pub policy: Policy,
    /// Settings that are valid but almost certainly not meant, each a
    /// sentence naming the file, the key and the fix.
    pub warnings: Vec<String>,
}

/// [`load`], plus the warnings of [`Checked`].
pub fn check(spec: &str) -> Result<Checked, ProfileError> {
    if is_path(spec) {
        return check_file(Path::new(spec));
    }
    match builtin::source(spec) {
        Some(text) => checked(Unit::builtin(spec, text)),
        None => Err(ProfileError::UnknownProfile {
            name: spec.to_owned(),
        }),
    }
}

/// [`load_file`], plus the warnings of [`Checked`].
pub fn check_file(path: &Path) -> Result<Checked, ProfileError> {
    checked(file_unit(path)?)
}

fn checked(first: Unit) -> Result<Checked, ProfileError> {
    let (policy, replaced) = resolve_traced(first)?;
    let warnings = lint::startup_lists_replaced(&policy, &replaced);
    Ok(Checked { policy, warnings })
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
        ProjectAccess::Empty => "none",
    };
    line(&mut out, "project", quote(project));
    line(&mut out, "read", path_list(&fs.read));
    line(&mut out, "read_if_exists", path_list(&fs.read_if_exists));
    line(&mut out, "write", path_list(&fs.write));
    line(&mut out, "hide", path_list(&fs.hide));
    let strings = |list: &[String]| {
        let items: Vec<String> = list.iter().map(|s| quote(s)).collect();
        format!("[{}]", items.join(", "))
    };
    line(&mut out, "secrets", strings(&fs.secrets));
    line(&mut out, "protect", strings(&fs.protect));
    let hardlinks = match fs.hardlinks {
        crate::project::HardlinkPolicy::ReadOnly => "read-only",
        crate::project::HardlinkPolicy::Refuse => "refuse",
        crate::project::HardlinkPolicy::Allow => "allow",
    };
    line(&mut out, "hardlinks", quote(hardlinks));
    line(&mut out, "tmp", quote(&size::format_size(fs.tmp_size)));
    line(&mut out, "review", fs.review.to_string());
    line(
        &mut out,
        "review_size",
        quote(&size::format_size(fs.review_size)),
    );
    out.push_str("\n[network]\n");
    line(&mut out, "mode", quote(policy.network.mode.name()));
    if policy.network.mode == NetworkMode::Allowlist {
        line(&mut out, "allow", strings(&policy.network.allow));
        let pins: Vec<String> = policy
            .network
            .resolve
            .iter()
            .map(|(name, ip)| format!("{} = {}", quote(name), quote(&ip.to_string())))
            .collect();
        line(&mut out, "resolve", format!("{{ {} }}", pins.join(", ")));
    }
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
    line(
        &mut out,
        "git_identity",
        policy.env.git_identity.to_string(),
    );
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
        line(&mut out, key, quote(level.name()));
    }
    out.push_str("\n[tools]\n");
    line(&mut out, "expose", string_list(&policy.tools));
    out
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Ask => "ask",
        Decision::Deny => "deny",
    }
}

/// A TOML basic string: every control character escaped (TOML refuses
/// DEL and the C1 controls raw, which JSON's escaping leaves as they are).
pub fn quote(s: &str) -> String {
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
    resolve_traced(first).map(|(policy, _)| policy)
}

/// [`resolve`], and every `filesystem.read` or `read_if_exists` a profile in
/// the chain replaced rather than edited, with what it replaced.
fn resolve_traced(first: Unit) -> Result<(Policy, Vec<lint::Replaced>), ProfileError> {
    let name = first.name.clone();
    let mut chain: Vec<Unit> = Vec::new();
    let mut layers: Vec<(String, Layer)> = Vec::new();
    let mut current = first;
    loop {
        let source = Source {
            origin: &current.origin,
            text: &current.text,
        };
        let mut layer = Layer::parse(&source)?;
        let Some(extends) = layer.extends.take() else {
            layers.push((current.origin.clone(), layer));
            break;
        };
        let (line, column) = source.line_column(extends.span().start);
        let next = locate(&current, extends.get_ref(), extends.span(), &source)?;
        layers.push((current.origin.clone(), layer));
        // Built-in strict is what every chain is applied over (`defaults()`),
        // and extends nothing: parsing it again would change nothing.
        if next.identity == "builtin:strict" {
            break;
        }
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
    let mut replaced = Vec::new();
    for (origin, layer) in layers.into_iter().rev() {
        let fs = &policy.filesystem;
        for (key, inherited, edit) in [
            ("filesystem.read", &fs.read, &layer.read),
            (
                "filesystem.read_if_exists",
                &fs.read_if_exists,
                &layer.read_if_exists,
            ),
        ] {
            if let Some(written) = &edit.replace {
                replaced.push(lint::Replaced {
                    origin: origin.clone(),
                    key,
                    inherited: inherited.clone(),
                    written: written.clone(),
                });
            }
        }
        layer.apply(&mut policy);
    }
    policy.name = name;
    Ok((policy, replaced))
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
    // Dropping `.` keeps "./base.toml" readable in messages; `..` stays, it has meaning.
    let path = raw::normalize(&from.dir.join(target));
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

#[cfg(test)]
mod tests {
    use super::*;
    use policy::Enforcement;
    use std::time::Duration;

    fn err(text: &str) -> String {
        match parse(text, "p.toml") {
            Ok(p) => panic!("accepted: {text:?} -> {p:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn ok(text: &str) -> Policy {
        match parse(text, "dir/p.toml") {
            Ok(p) => p,
            Err(e) => panic!("rejected {text:?}: {e}"),
        }
    }

    #[test]
    fn every_builtin_parses_and_names_match() {
        for name in builtin_names() {
            let policy = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(policy.name, *name);
            assert!(builtin::description(name).is_some());
            assert!(builtin_source(name).is_some());
        }
        assert_eq!(builtin_names(), ["strict", "standard", "permissive"]);
    }

    #[test]
    fn strict_requires_every_layer_but_cgroups() {
        let strict = load("strict").unwrap();
        assert_eq!(strict.enforce.userns, Enforcement::Required);
        assert_eq!(strict.enforce.landlock, Enforcement::Required);
        assert_eq!(strict.enforce.seccomp, Enforcement::Required);
        assert_eq!(strict.enforce.cgroups, Enforcement::BestEffort);
        assert_eq!(strict.network.mode, NetworkMode::Loopback);
        assert_eq!(strict.syscalls.mode, SyscallMode::Allowlist);
        // The /etc allowlist must not grow into /etc itself.
        assert!(!strict.filesystem.read.contains(&PathBuf::from("/etc")));
        assert!(!strict
            .filesystem
            .read_if_exists
            .contains(&PathBuf::from("/etc")));
    }

    #[test]
    fn defaults_equal_strict_file() {
        // A profile without `extends` gets strict's values, whether they come
        // from the file or from the code.
        let strict_file = builtin::source("strict").unwrap();
        assert_eq!(
            resolve(Unit::builtin("strict", strict_file)).unwrap(),
            builtin::defaults()
        );
        assert_eq!(load("strict").unwrap(), builtin::defaults());
        let mut minimal = ok("version = 1");
        minimal.name = "strict".into();
        assert_eq!(minimal, builtin::defaults());
    }

    #[test]
    fn standard_and_permissive() {
        let standard = load("standard").unwrap();
        // An untrusted run does not learn the person's name and e-mail.
        assert!(!load("strict").unwrap().env.git_identity);
        assert!(standard.env.git_identity);
        assert!(load("permissive").unwrap().env.git_identity);
        assert!(
            !ok("version = 1\nextends = \"standard\"\n[env]\ngit_identity = false\n")
                .env
                .git_identity
        );
        assert_eq!(standard.network.mode, NetworkMode::Loopback);
        assert_eq!(standard.syscalls.mode, SyscallMode::Denylist);
        assert_eq!(standard.enforce.landlock, Enforcement::BestEffort);
        assert_eq!(standard.enforce.seccomp, Enforcement::Required);
        assert!(standard.filesystem.read.contains(&PathBuf::from("/etc")));
        assert!(standard
            .filesystem
            .hide
            .contains(&PathBuf::from("/etc/shadow")));
        assert!(standard.filesystem.secrets.contains(&".env".to_owned()));
        assert_eq!(standard.limits, load("strict").unwrap().limits);

        let permissive = load("permissive").unwrap();
        assert_eq!(permissive.network.mode, NetworkMode::Host);
        assert_eq!(permissive.limits.memory, Some(4 << 30));
        assert_eq!(permissive.limits.pids, Some(1024));
        assert_eq!(permissive.limits.cpu, None);
        assert_eq!(permissive.limits.timeout, Some(Duration::from_secs(3600)));
        assert_eq!(permissive.limits.output, Some(256 << 20));
        assert_eq!(permissive.limits.nofile, Some(1024));
        assert_eq!(permissive.enforce.seccomp, Enforcement::BestEffort);
        assert_eq!(permissive.enforce.userns, Enforcement::BestEffort);
        assert_eq!(standard.enforce.userns, Enforcement::BestEffort);
        assert_eq!(permissive.syscalls.mode, SyscallMode::Denylist);
    }

    #[test]
    fn to_toml_round_trips() {
        for name in builtin_names() {
            let policy = load(name).unwrap();
            let text = to_toml(&policy);
            let back =
                parse(&text, &format!("{name}.toml")).unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, policy, "{text}");
        }
        let mut odd = ok(r#"version = 1
            [env]
            set = { "A\"B" = "line\nbreak\u0001\\" }
            [limits]
            memory = 1048577
            timeout = "1500ms"
            cpu = 0.25
            [syscalls]
            allow = ["a"]"#);
        odd.name = "odd".into();
        assert_eq!(parse(&to_toml(&odd), "odd.toml").unwrap(), odd);
    }

    #[test]
    fn values_are_parsed() {
        let p = ok(r#"
            version = 1
            [filesystem]
            project = "ro"
            read = ["/usr/", "/opt/./x//y/"]
            write = ["/var/tmp/build"]
            hide = ["./secrets/", "/etc/shadow"]
            tmp = "1GiB"
            [limits]
            memory = "unlimited"
            pids = 7
            cpu = 2
            timeout = 90
            output = 4096
            nofile = "unlimited"
            [broker]
            default = "ask"
            rules = { "net.http" = "deny", "secrets.read" = "allow" }
        "#);
        assert_eq!(p.name, "p");
        assert_eq!(p.filesystem.project, ProjectAccess::ReadOnly);
        assert_eq!(
            p.filesystem.read,
            [PathBuf::from("/usr"), PathBuf::from("/opt/x/y")]
        );
        assert_eq!(
            p.filesystem.hide,
            [PathBuf::from("secrets"), PathBuf::from("/etc/shadow")]
        );
        assert_eq!(p.filesystem.tmp_size, 1 << 30);
        assert_eq!(p.limits.memory, None);
        assert_eq!(p.limits.pids, Some(7));
        assert_eq!(p.limits.cpu, Some(2.0));
        assert_eq!(p.limits.timeout, Some(Duration::from_secs(90)));
        assert_eq!(p.limits.output, Some(4096));
        assert_eq!(p.limits.nofile, None);
        // Unset keys in a present table keep strict's values.
        assert_eq!(p.network.mode, NetworkMode::Loopback);
        assert_eq!(p.broker.default, Decision::Ask);
        assert_eq!(p.broker.rules["net.http"], Decision::Deny);
        assert_eq!(p.broker.rules["secrets.read"], Decision::Allow);
        assert_eq!(p.broker.rules["fs.read"], Decision::Allow);
    }

    #[test]
    fn precise_messages() {
        let cases: &[(&str, &str)] = &[
            ("", "p.toml:1:1: `version` is missing: add `version = 1` as the first line"),
            ("version = 2", "p.toml:1:11: unsupported profile version 2: this sandbox reads version 1 only"),
            ("version = \"1\"", "p.toml:1:11: unsupported profile version \"1\": this sandbox reads version 1 only"),
            ("version = 1\ncolour = 1", "p.toml:2:1: unknown field `colour`, expected one of `version`, `extends`, `filesystem`, `network`, `limits`, `syscalls`, `env`, `broker`, `enforce`, `tools`"),
            ("version = 1\n[network]\nmode = \"host\"\nallow = [\"a.test\"]", "p.toml:4:10: `network.allow` goes with the proxy of mode \"allowlist\", not mode \"host\"; drop `mode` (a list implies the allowlist) or the list"),
            ("version = 1\n[network]\nresolve = { \"a.test\" = \"nowhere\" }", "p.toml:3:24: `network.resolve`: \"nowhere\" is not an IP address (write e.g. \"10.0.0.5\" or \"fd00::5\")"),
            ("version = 1\n[network]\nmode = \"wifi\"", "p.toml:3:8: unknown variant `wifi`, expected one of `none`, `loopback`, `allowlist`, `host`"),
            ("version = 1\n[filesystem]\nread = [\"usr\"]", "p.toml:3:9: `filesystem.read` paths must be absolute: \"usr\" does not start with '/'"),
            ("version = 1\n[filesystem]\nread_if_exists = [\"/a/../etc\"]", "p.toml:3:19: `filesystem.read_if_exists` paths cannot contain `..`: \"/a/../etc\""),
            ("version = 1\n[filesystem]\nwrite = [\"/proc/self/\"]", "p.toml:3:10: `filesystem.write` cannot contain \"/proc/self\": /proc and everything under it stay read-only"),
            ("version = 1\n[filesystem]\nwrite = [\"/./\"]", "p.toml:3:10: `filesystem.write` cannot contain \"/\": that would make the whole host writable"),
            ("version = 1\n[filesystem]\nwrite = [\"/dev\"]", "p.toml:3:10: `filesystem.write` cannot contain \"/dev\": /dev and everything under it stay read-only"),
            ("version = 1\n[filesystem]\nhide = [\"../x\"]", "p.toml:3:9: `filesystem.hide` paths cannot contain `..`: \"../x\""),
            ("version = 1\n[filesystem]\ntmp = \"0\"", "p.toml:3:7: `filesystem.tmp` must be more than 0 and at most 64GiB (it is held in memory)"),
            ("version = 1\n[filesystem]\ntmp = \"65GiB\"", "p.toml:3:7: `filesystem.tmp` must be more than 0 and at most 64GiB (it is held in memory)"),
            ("version = 1\n[limits]\ncpu = 0", "p.toml:3:7: `limits.cpu` must be more than 0 and at most 1024 cores"),
            ("version = 1\n[limits]\ncpu = nan", "p.toml:3:7: `limits.cpu` must be more than 0 and at most 1024 cores"),
            ("version = 1\n[limits]\ncpu = inf", "p.toml:3:7: `limits.cpu` must be more than 0 and at most 1024 cores"),
            ("version = 1\n[limits]\npids = 0", "p.toml:3:8: `limits.pids` must be at least 1"),
            ("version = 1\n[limits]\npids = -5", "p.toml:3:8: `limits.pids` must be at least 1"),
            ("version = 1\n[limits]\npids = 4194305", "p.toml:3:8: `limits.pids` must be at least 1 and at most 4194304"),
            ("version = 1\n[limits]\ntimeout = 9223372036854775807", "p.toml:3:11: `limits.timeout` must be more than 0 and at most 365d; use \"unlimited\" for no limit"),
            ("version = 1\n[limits]\ntimeout = \"366d\"", "p.toml:3:11: `limits.timeout` must be more than 0 and at most 365d; use \"unlimited\" for no limit"),
            ("version = 1\n[limits]\nmemory = \"1KiB\"", "p.toml:3:10: `limits.memory` must be at least 1MiB"),
            ("version = 1\n[limits]\nmemory = -1", "p.toml:3:10: `limits.memory` cannot be negative"),
            ("version = 1\n[limits]\ntimeout = \"0s\"", "p.toml:3:11: `limits.timeout` must be more than 0 and at most 365d; use \"unlimited\" for no limit"),
            ("version = 1\n[limits]\npids = true", "p.toml:3:8: invalid type: boolean `true`, expected a number or a string such as \"512MiB\", \"10m\" or \"unlimited\""),
            ("version = 1\n[broker]\nrules = { \"fs.raed\" = \"allow\" }", "p.toml:3:11: \"fs.raed\" is not a broker action (fs.read, fs.write, fs.list, fs.stat, fs.mkdir, fs.delete, terminal.run, net.http, secrets.get, secrets.read, log, permission.query)"),
            ("version = 1\n[syscalls]\nallow = [\"Open\"]", "p.toml:3:10: invalid system call name \"Open\": expected lowercase letters, digits and '_'"),
            ("version = 1\n[env]\npass = [\"A=B\"]", "p.toml:3:9: invalid environment variable name \"A=B\": it must be non-empty without '=' or NUL"),
            ("version = 1\n[enforce]\nlandlock = \"maybe\"", "p.toml:3:12: unknown variant `maybe`, expected one of `required`, `best-effort`, `off`"),
            ("version = 1\n[tools]\nexpose = [\"rust\", \"ruby\"]", "p.toml:3:19: unknown tool `ruby` in tools.expose: the known tools are rust, node, python"),
            ("version = 1\nextends = \"strcit\"", "p.toml:2:11: unknown built-in profile `strcit` in `extends`: valid choices are strict, standard, permissive, or a path to a file (containing '/' or ending in \".toml\")"),
        ];
        for (text, want) in cases {
            assert_eq!(&err(text), want, "for {text:?}");
        }
        for (text, want) in [
            ("best-effort", Enforcement::BestEffort),
            ("off", Enforcement::Off),
            ("required", Enforcement::Required),
        ] {
            let policy = ok(&format!("version = 1\n[enforce]\nuserns = \"{text}\""));
            assert_eq!(policy.enforce.userns, want);
        }
    }

    #[test]
    fn never_panics() {
        let fixed = [
            "",
            "\0\u{1}\u{ff}",
            "version",
            "version = ",
            "version = 1\n[limits]\nmemory = 99999999999999999999999",
            "version = 99999999999999999999",
            "version = -1",
            "version = 1.0",
            "version = [1]",
            "[[filesystem]]",
            "version = 1\n[limits]\ntimeout = \"99999999999999999999d\"",
            "version = 1\n[limits]\ntimeout = -3",
            "version = 1\n[limits]\ncpu = -1e308",
            "version = 1\n[limits]\noutput = 1.5",
            "version = 1\n[filesystem]\nread = \"/usr\"",
            "version = 1\n[filesystem]\nread = [\"/a\\u0000b\"]",
            "version = 1\n[filesystem]\nhide = [\"\"]",
            "version = 1\n[env]\nset = { A = 1 }",
            "version = 1\n[broker]\nrules = []",
            "version = 1\nfilesystem = 3",
            "version = 1\n[limits]\npids = \"ten\"",
            "version = 1\n[limits]\nmemory = \"\u{1F600}\"",
            "\u{1F600}\n\u{1F600} = 1",
        ];
        for text in fixed {
            let _ = parse(text, "p.toml");
        }
        // Cheap deterministic garbage: mutate the built-ins byte by byte.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        for name in builtin_names() {
            let original = builtin_source(name).unwrap().as_bytes().to_vec();
            for _ in 0..300 {
                let mut bytes = original.clone();
                for _ in 0..4 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let at = (state as usize) % bytes.len();
                    bytes[at] = (state >> 32) as u8;
                }
                let text = String::from_utf8_lossy(&bytes);
                if let Err(e) = parse(&text, "fuzz.toml") {
                    assert!(e.to_string().starts_with("fuzz.toml"), "{e}");
                }
            }
        }
    }

    #[test]
    fn extends_merges_lists_replace_maps_merge() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("base.toml");
        std::fs::write(
            &base,
            "version = 1\nextends = \"standard\"\n[env]\npass = [\"A\"]\nset = { X = \"1\", HOME = \"/h\" }\n",
        )
        .unwrap();
        let child = dir.path().join("child.toml");
        std::fs::write(
            &child,
            "version = 1\nextends = \"base.toml\"\n[env]\npass = [\"B\"]\nset = { Y = \"2\" }\n[broker]\nrules = { log = \"deny\" }\n",
        )
        .unwrap();
        let p = load(child.to_str().unwrap()).unwrap();
        assert_eq!(p.name, "child");
        assert_eq!(p.env.pass, ["B"]);
        assert_eq!(p.env.set["X"], "1");
        assert_eq!(p.env.set["Y"], "2");
        assert_eq!(p.env.set["HOME"], "/h");
        assert!(p.env.set.contains_key("PATH"));
        assert_eq!(p.broker.rules["log"], Decision::Deny);
        assert_eq!(p.broker.rules["fs.read"], Decision::Allow);
        assert_eq!(p.network.mode, NetworkMode::Loopback);
    }

    #[test]
    fn extends_cycles_depth_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n);
        std::fs::write(
            path("self.toml"),
            "version = 1\nextends = \"./self.toml\"\n",
        )
        .unwrap();
        let e = load_file(&path("self.toml")).unwrap_err().to_string();
        let d = dir.path().display();
        assert_eq!(
            e,
            format!("{d}/self.toml:2:11: `extends` cycle: {d}/self.toml -> {d}/self.toml")
        );

        for i in 0..=MAX_EXTENDS_DEPTH + 1 {
            let text = if i == MAX_EXTENDS_DEPTH + 1 {
                "version = 1\n".to_owned()
            } else {
                format!("version = 1\nextends = \"p{}.toml\"\n", i + 1)
            };
            std::fs::write(path(&format!("p{i}.toml")), text).unwrap();
        }
        // p1 has exactly MAX_EXTENDS_DEPTH links below it; p0 one more.
        assert!(load_file(&path("p1.toml")).is_ok());
        let e = load_file(&path("p0.toml")).unwrap_err();
        assert!(
            matches!(e, ProfileError::ExtendsTooDeep { max: 8, .. }),
            "{e}"
        );

        std::fs::write(
            path("orphan.toml"),
            "version = 1\nextends = \"gone.toml\"\n",
        )
        .unwrap();
        let e = load_file(&path("orphan.toml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{d}/orphan.toml:2:11: cannot read `{d}/gone.toml`, named by `extends`")
        );
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn every_list_key_has_add_and_remove_forms_that_edit_the_inherited_list() {
        let p = ok(r#"version = 1
extends = "standard"
[filesystem]
read_add = ["/srv/data"]
read_remove = ["/etc"]
read_if_exists_add = ["/etc/resolv.conf", "/lib"]
read_if_exists_remove = ["/opt"]
write_add = ["/var/cache/ci"]
hide_add = ["/etc/machine-id"]
hide_remove = ["/etc/sudoers"]
secrets_add = ["*.p12"]
secrets_remove = [".npmrc"]
protect_add = ["Makefile"]
protect_remove = [".idea/"]
[network]
allow_add = ["pypi.org"]
[syscalls]
allow_add = ["ptrace"]
deny_add = ["io_uring_setup"]
[env]
pass_add = ["CI"]
pass_remove = ["TZ"]
[tools]
expose_add = ["rust"]
"#);
        let fs = &p.filesystem;
        let paths = |list: &[PathBuf]| -> Vec<String> {
            list.iter().map(|p| p.display().to_string()).collect()
        };
        assert_eq!(paths(&fs.read), ["/usr", "/srv/data"]);
        let if_exists = paths(&fs.read_if_exists);
        assert_eq!(
            if_exists,
            [
                "/bin",
                "/sbin",
                "/lib",
                "/lib32",
                "/lib64",
                "/libx32",
                "/etc/resolv.conf"
            ]
        );
        assert_eq!(paths(&fs.write), ["/var/cache/ci"]);
        assert!(paths(&fs.hide).contains(&"/etc/machine-id".to_owned()));
        assert!(!paths(&fs.hide).contains(&"/etc/sudoers".to_owned()));
        assert!(paths(&fs.hide).contains(&"/etc/shadow".to_owned()));
        assert!(
            fs.secrets.contains(&"*.p12".to_owned()) && fs.secrets.contains(&".env".to_owned())
        );
        assert!(!fs.secrets.contains(&".npmrc".to_owned()));
        assert!(fs.protect.contains(&"Makefile".to_owned()));
        assert!(!fs.protect.contains(&".idea/".to_owned()));
        assert_eq!(p.network.mode, NetworkMode::Allowlist);
        assert_eq!(p.network.allow, ["pypi.org"]);
        assert_eq!(p.syscalls.allow, ["ptrace"]);
        assert_eq!(p.syscalls.deny, ["io_uring_setup"]);
        assert_eq!(p.env.pass, ["LANG", "LC_ALL", "LC_CTYPE", "TERM", "CI"]);
        assert_eq!(p.tools, ["rust"]);

        // Removing what was never there is not an error, and an entry is
        // checked in every form.
        assert_eq!(
            ok("version = 1
[env]
pass_remove = [\"NOPE\"]
")
            .env
            .pass
            .len(),
            5
        );
        let e = err("version = 1
[filesystem]
read_add = [\"relative\"]
");
        assert!(
            e.contains("`filesystem.read_add` paths must be absolute"),
            "{e}"
        );
        let e = err("version = 1
[filesystem]
write_add = [\"/proc/sys\"]
");
        assert!(e.contains("`filesystem.write_add` cannot contain"), "{e}");
        let e = err("version = 1
[network]
mode = \"none\"
allow_add = [\"x.org\"]
");
        assert!(e.contains("`network.allow_add` goes with the proxy"), "{e}");
        let e = err("version = 1
[tools]
expose_add = [\"cobol\"]
");
        assert!(e.contains("unknown tool `cobol`"), "{e}");
    }

    #[test]
    fn load_distinguishes_names_and_paths() {
        assert!(matches!(
            load("nope"),
            Err(ProfileError::UnknownProfile { .. })
        ));
        assert!(matches!(load("nope.toml"), Err(ProfileError::Read { .. })));
        assert!(matches!(
            load("/nonexistent/x"),
            Err(ProfileError::Read { .. })
        ));
        let e = load("nope").unwrap_err().to_string();
        assert!(e.contains("strict, standard, permissive"), "{e}");
    }

    #[test]
    fn non_utf8_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bin.toml");
        std::fs::write(&p, b"version = 1\n\xff\xfe").unwrap();
        assert!(matches!(load_file(&p), Err(ProfileError::Read { .. })));
    }

    #[test]
    fn a_network_list_implies_the_allowlist_and_a_child_without_a_proxy_drops_it() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("parent.toml");
        std::fs::write(
            &parent,
            "version = 1\n[network]\nallow = [\"registry.npmjs.org\", \"*.pythonhosted.org:443\"]\nresolve = { \"API.test\" = \"127.0.0.1\" }\n",
        )
        .unwrap();
        let p = load_file(&parent).unwrap();
        assert_eq!(p.network.mode, NetworkMode::Allowlist);
        assert_eq!(
            p.network.allow,
            ["registry.npmjs.org", "*.pythonhosted.org:443"]
        );
        assert_eq!(
            p.network.resolve.get("api.test"),
            Some(&"127.0.0.1".parse().unwrap())
        );
        let child = dir.path().join("child.toml");
        std::fs::write(
            &child,
            format!(
                "version = 1\nextends = {:?}\n[network]\nmode = \"none\"\n",
                parent.display().to_string()
            ),
        )
        .unwrap();
        let p = load_file(&child).unwrap();
        assert_eq!(p.network.mode, NetworkMode::None);
        assert!(p.network.allow.is_empty() && p.network.resolve.is_empty());
    }
}
