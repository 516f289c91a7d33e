//! One profile inside another: whether a profile allows nothing beyond
//! what a second one allows, and the policy both agree on.
//!
//! Skills use it: the profile a skill's manifest names runs only within
//! the profile the person chose for the run (`--profile`), so a skill can
//! make its sandbox tighter but never looser. Every difference that would
//! widen the sandbox is named, not just the first, so the person sees at
//! once what the skill asked for.

use std::path::{Path, PathBuf};

use super::policy::{Decision, Enforcement, NetworkMode, Policy, ProjectAccess, SyscallMode};
use super::size::{format_duration, format_size};

/// `inner` narrowed to `outer`: `inner`'s values, provided none of them
/// allows more than `outer`'s; otherwise every way it does, one line each
/// (`field: inner's value (your profile: outer's value)`).
///
/// Fields compared: the project access, read, read-if-exists and write
/// paths (each must lie within a path `outer` grants at least as much),
/// hidden paths (`outer`'s must stay hidden), `/tmp` size, network mode,
/// every limit, the syscall filter (mode and each named call), passed
/// environment variables, broker decisions (the default, every action and
/// every rule pattern of either profile) and each layer's enforcement.
/// Anything else, including fields this function does not know about, is
/// taken from `outer`, as are the fixed environment values.
pub fn within(outer: &Policy, inner: &Policy) -> Result<Policy, Vec<String>> {
    let mut excess = Vec::new();
    let mut over = |field: &str, asked: String, allowed: String| {
        excess.push(format!("{field} {asked} (your profile: {allowed})"));
    };

    let (fs, ofs) = (&inner.filesystem, &outer.filesystem);
    if project_rank(fs.project) > project_rank(ofs.project) {
        over(
            "filesystem.project",
            project_name(fs.project).into(),
            project_name(ofs.project).into(),
        );
    }
    let readable: Vec<PathBuf> = ofs
        .read
        .iter()
        .chain(&ofs.read_if_exists)
        .chain(&ofs.write)
        .cloned()
        .collect();
    for (field, paths) in [
        ("filesystem.read", &fs.read),
        ("filesystem.read_if_exists", &fs.read_if_exists),
    ] {
        for path in paths.iter().filter(|p| !covered(p, &readable)) {
            over(field, quoted(path), "not readable".into());
        }
    }
    for path in fs.write.iter().filter(|p| !covered(p, &ofs.write)) {
        over("filesystem.write", quoted(path), "not writable".into());
    }
    // A path the person hides must stay hidden wherever the skill's
    // profile would show it: in the project (relative paths), or inside or
    // around a host path it makes visible.
    let visible: Vec<&PathBuf> = fs
        .read
        .iter()
        .chain(&fs.read_if_exists)
        .chain(&fs.write)
        .collect();
    for hidden in ofs.hide.iter().filter(|h| !covered(h, &fs.hide)) {
        let shown = if hidden.is_absolute() {
            visible
                .iter()
                .any(|v| hidden.starts_with(v) || v.starts_with(hidden))
        } else {
            fs.project != ProjectAccess::Empty
        };
        if shown {
            over(
                "filesystem.hide",
                format!("leaves {} visible", quoted(hidden)),
                "hidden".into(),
            );
        }
    }
    if fs.tmp_size > ofs.tmp_size {
        over(
            "filesystem.tmp",
            format_size(fs.tmp_size),
            format_size(ofs.tmp_size),
        );
    }

    if network_rank(inner.network.mode) > network_rank(outer.network.mode) {
        over(
            "network.mode",
            inner.network.mode.name().into(),
            outer.network.mode.name().into(),
        );
    }
    if inner.network.mode == NetworkMode::Allowlist && outer.network.mode == NetworkMode::Allowlist
    {
        for entry in &inner.network.allow {
            if !crate::net::allow::entry_within(entry, &outer.network.allow) {
                over(
                    "network.allow",
                    format!("{entry:?}"),
                    format!("{:?}", outer.network.allow),
                );
            }
        }
    }
    // A pin decides where a name's connections (and the secrets bound to
    // that name) go: only the outer profile's own pins are taken.
    for (name, ip) in &inner.network.resolve {
        if outer.network.resolve.get(name) != Some(ip) {
            over(
                "network.resolve",
                format!("{name} = {ip}"),
                match outer.network.resolve.get(name) {
                    Some(theirs) => format!("{name} = {theirs}"),
                    None => format!("no pin for {name}"),
                },
            );
        }
    }

    let (l, ol) = (&inner.limits, &outer.limits);
    let size = |v: Option<u64>| v.map_or_else(|| "unlimited".into(), format_size);
    let count = |v: Option<u64>| v.map_or_else(|| "unlimited".into(), |n| n.to_string());
    for (field, asked, allowed, shown) in [
        ("limits.memory", l.memory, ol.memory, size(l.memory)),
        ("limits.pids", l.pids, ol.pids, count(l.pids)),
        ("limits.output", l.output, ol.output, size(l.output)),
        ("limits.nofile", l.nofile, ol.nofile, count(l.nofile)),
    ] {
        if !limit_within(asked, allowed) {
            let allowed_shown = if field.ends_with("memory") || field.ends_with("output") {
                size(allowed)
            } else {
                count(allowed)
            };
            over(field, shown, allowed_shown);
        }
    }
    if !limit_within(l.cpu, ol.cpu) {
        let cores = |c: Option<f64>| {
            c.map_or_else(
                || "unlimited".into(),
                |c| {
                    if c == 1.0 {
                        "1 core".into()
                    } else {
                        format!("{c} cores")
                    }
                },
            )
        };
        over("limits.cpu", cores(l.cpu), cores(ol.cpu));
    }
    if !limit_within(l.timeout, ol.timeout) {
        let time =
            |t: Option<std::time::Duration>| t.map_or_else(|| "unlimited".into(), format_duration);
        over("limits.timeout", time(l.timeout), time(ol.timeout));
    }

    if inner.syscalls.mode == SyscallMode::Denylist && outer.syscalls.mode == SyscallMode::Allowlist
    {
        over("syscalls.mode", "denylist".into(), "allowlist".into());
    } else {
        let mut names: Vec<&str> = crate::seccomp::ALLOWED
            .iter()
            .chain(crate::seccomp::DENIED)
            .copied()
            .chain(["clone3"])
            .chain(inner.syscalls.allow.iter().map(String::as_str))
            .chain(inner.syscalls.deny.iter().map(String::as_str))
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            if syscall_allowed(inner, name) && !syscall_allowed(outer, name) {
                over("syscalls", format!("allow {name}"), "denied".into());
            }
        }
    }

    for name in inner
        .env
        .pass
        .iter()
        .filter(|n| !outer.env.pass.contains(n))
    {
        over("env.pass", format!("passes {name}"), "not passed".into());
    }

    if inner.env.git_identity && !outer.env.git_identity {
        over(
            "env.git_identity",
            "passes your git name and e-mail".into(),
            "not passed".into(),
        );
    }

    if permissiveness(inner.broker.default) > permissiveness(outer.broker.default) {
        over(
            "broker.default",
            decision_name(inner.broker.default).into(),
            decision_name(outer.broker.default).into(),
        );
    }
    let mut keys: Vec<&str> = crate::action::Action::ALL
        .iter()
        .map(|a| a.as_str())
        .chain(inner.broker.rules.keys().map(String::as_str))
        .chain(outer.broker.rules.keys().map(String::as_str))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let (action, target) = match key.split_once(':') {
            Some((action, pattern)) => (action, Some(pattern)),
            None => (key, None),
        };
        let asked = super::permission::decide_for(&inner.broker, action, target).decision;
        let allowed = super::permission::decide_for(&outer.broker, action, target).decision;
        if permissiveness(asked) > permissiveness(allowed) {
            over(
                &format!("broker.rules.\"{key}\""),
                decision_name(asked).into(),
                decision_name(allowed).into(),
            );
        }
    }

    for (field, asked, allowed) in [
        ("enforce.userns", inner.enforce.userns, outer.enforce.userns),
        (
            "enforce.landlock",
            inner.enforce.landlock,
            outer.enforce.landlock,
        ),
        (
            "enforce.seccomp",
            inner.enforce.seccomp,
            outer.enforce.seccomp,
        ),
        (
            "enforce.cgroups",
            inner.enforce.cgroups,
            outer.enforce.cgroups,
        ),
    ] {
        if strictness(asked) < strictness(allowed) {
            over(field, asked.name().into(), allowed.name().into());
        }
    }

    for tool in inner.tools.iter().filter(|t| !outer.tools.contains(t)) {
        over(
            "tools.expose",
            format!("`{tool}`"),
            format!("[{}]", outer.tools.join(", ")),
        );
    }

    if !excess.is_empty() {
        return Err(excess);
    }
    // Field by field onto a copy of `outer`, so that a field added to the
    // policy later keeps the person's value until it is compared here.
    let mut narrowed = outer.clone();
    narrowed.name.clone_from(&inner.name);
    narrowed.filesystem.project = fs.project;
    narrowed.filesystem.read.clone_from(&fs.read);
    narrowed
        .filesystem
        .read_if_exists
        .clone_from(&fs.read_if_exists);
    narrowed.filesystem.write.clone_from(&fs.write);
    narrowed.filesystem.hide.clone_from(&fs.hide);
    narrowed.filesystem.tmp_size = fs.tmp_size;
    // Review mode only ever narrows what reaches the project.
    narrowed.filesystem.review = fs.review || outer.filesystem.review;
    narrowed.filesystem.review_size = fs.review_size;
    narrowed.network = inner.network.clone();
    narrowed.limits = inner.limits.clone();
    narrowed.syscalls = inner.syscalls.clone();
    narrowed.env.pass.clone_from(&inner.env.pass);
    narrowed.env.git_identity = inner.env.git_identity;
    narrowed.broker = inner.broker.clone();
    narrowed.enforce = inner.enforce.clone();
    narrowed.tools.clone_from(&inner.tools);
    Ok(narrowed)
}

/// Whether `path` is one of `by` or below one.
fn covered(path: &Path, by: &[PathBuf]) -> bool {
    by.iter().any(|b| path.starts_with(b))
}

fn quoted(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

/// `None` is no limit, the widest.
fn limit_within<T: PartialOrd>(asked: Option<T>, allowed: Option<T>) -> bool {
    match (asked, allowed) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(asked), Some(allowed)) => asked <= allowed,
    }
}

/// Whether the filter of `policy` lets `name` through (argument checks
/// are the same in both modes).
fn syscall_allowed(policy: &Policy, name: &str) -> bool {
    let listed = |list: &[String]| list.iter().any(|n| n == name);
    let denied = crate::seccomp::DENIED.contains(&name) || listed(&policy.syscalls.deny);
    match policy.syscalls.mode {
        SyscallMode::Allowlist => {
            !denied && (crate::seccomp::ALLOWED.contains(&name) || listed(&policy.syscalls.allow))
        }
        // The denylist filter answers clone3 with ENOSYS: its flags live in
        // memory a filter cannot read.
        SyscallMode::Denylist => !denied && name != "clone3",
    }
}

fn project_rank(access: ProjectAccess) -> u8 {
    match access {
        ProjectAccess::Empty => 0,
        ProjectAccess::ReadOnly => 1,
        ProjectAccess::ReadWrite => 2,
    }
}

fn project_name(access: ProjectAccess) -> &'static str {
    match access {
        ProjectAccess::Empty => "none",
        ProjectAccess::ReadOnly => "ro",
        ProjectAccess::ReadWrite => "rw",
    }
}

fn network_rank(mode: NetworkMode) -> u8 {
    match mode {
        NetworkMode::None => 0,
        NetworkMode::Loopback => 1,
        NetworkMode::Allowlist => 2,
        NetworkMode::Host => 3,
    }
}

fn permissiveness(decision: Decision) -> u8 {
    match decision {
        Decision::Deny => 0,
        Decision::Ask => 1,
        Decision::Allow => 2,
    }
}

fn decision_name(decision: Decision) -> &'static str {
    match decision {
        Decision::Deny => "deny",
        Decision::Ask => "ask",
        Decision::Allow => "allow",
    }
}

fn strictness(level: Enforcement) -> u8 {
    match level {
        Enforcement::Off => 0,
        Enforcement::BestEffort => 1,
        Enforcement::Required => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{load, parse};

    fn excess(outer: &Policy, inner: &Policy) -> Vec<String> {
        within(outer, inner).err().unwrap_or_default()
    }

    #[test]
    fn a_profile_is_within_itself_and_the_builtins_nest() {
        let names = crate::profile::builtin_names();
        for (i, wide) in names.iter().enumerate() {
            let wide = load(wide).unwrap();
            assert_eq!(within(&wide, &wide).unwrap(), wide);
            for narrow in &names[..i] {
                let narrow = load(narrow).unwrap();
                assert!(
                    within(&wide, &narrow).is_ok(),
                    "{} in {}: {:?}",
                    narrow.name,
                    wide.name,
                    excess(&wide, &narrow)
                );
            }
        }
    }

    #[test]
    fn permissive_is_refused_within_strict_naming_each_widening() {
        let strict = load("strict").unwrap();
        let permissive = load("permissive").unwrap();
        let found = excess(&strict, &permissive);
        for expected in [
            "network.mode host (your profile: loopback)",
            "enforce.seccomp best-effort (your profile: required)",
            "syscalls.mode denylist (your profile: allowlist)",
        ] {
            assert!(
                found.iter().any(|e| e == expected),
                "{expected} not in {found:#?}"
            );
        }
    }

    #[test]
    fn a_profile_that_turns_layers_off_and_writes_the_host_is_refused() {
        let strict = load("strict").unwrap();
        let evil = parse(
            "version = 1\n[filesystem]\nwrite = [\"/home\"]\nread = [\"/root\"]\nhide = []\n\
             [enforce]\nlandlock = \"off\"\nseccomp = \"off\"\n[syscalls]\nallow = [\"sethostname\"]\n\
             [env]\npass = [\"SSH_AUTH_SOCK\"]\ngit_identity = true\n[limits]\nmemory = \"unlimited\"\ntimeout = \"1d\"\n\
             [broker]\ndefault = \"allow\"\nrules = { \"secrets.read\" = \"allow\" }\n",
            "evil.toml",
        )
        .unwrap();
        let found = excess(&strict, &evil);
        for expected in [
            "filesystem.write \"/home\" (your profile: not writable)",
            "filesystem.read \"/root\" (your profile: not readable)",
            "enforce.landlock off (your profile: required)",
            "enforce.seccomp off (your profile: required)",
            "syscalls allow sethostname (your profile: denied)",
            "env.pass passes SSH_AUTH_SOCK (your profile: not passed)",
            "env.git_identity passes your git name and e-mail (your profile: not passed)",
            "limits.memory unlimited (your profile: 1GiB)",
            "limits.timeout 24h (your profile: 10m)",
            "broker.default allow (your profile: deny)",
            "broker.rules.\"secrets.read\" allow (your profile: ask)",
        ] {
            assert!(
                found.iter().any(|e| e == expected),
                "{expected} not in {found:#?}"
            );
        }
    }

    #[test]
    fn the_persons_secrets_protected_paths_and_hard_link_rule_always_stay() {
        let strict = load("strict").unwrap();
        let bare = parse(
            "version = 1\n[filesystem]\nsecrets = []\nprotect = []\nhardlinks = \"allow\"\n",
            "bare.toml",
        )
        .unwrap();
        let narrowed = within(&strict, &bare).unwrap();
        assert_eq!(narrowed.filesystem.secrets, strict.filesystem.secrets);
        assert_eq!(narrowed.filesystem.protect, strict.filesystem.protect);
        assert_eq!(narrowed.filesystem.hardlinks, strict.filesystem.hardlinks);
    }

    #[test]
    fn narrower_values_are_taken_and_unknown_fields_stay_the_persons() {
        let strict = load("strict").unwrap();
        let tight = parse(
            "version = 1\n[filesystem]\nproject = \"ro\"\n[limits]\nmemory = \"256MiB\"\n\
             [broker]\nrules = { \"fs.read:secret/**\" = \"deny\" }\n",
            "tight.toml",
        )
        .unwrap();
        let mut outer = strict.clone();
        outer.env.set.insert("MARK".into(), "person".into());
        let narrowed = within(&outer, &tight).unwrap();
        assert_eq!(narrowed.filesystem.project, ProjectAccess::ReadOnly);
        assert_eq!(narrowed.limits.memory, Some(256 << 20));
        assert_eq!(narrowed.env.set["MARK"], "person");
        // A deny pattern of the person's profile must survive.
        let mut guarded = strict.clone();
        guarded
            .broker
            .rules
            .insert("fs.write:.git/**".into(), Decision::Deny);
        guarded
            .broker
            .rules
            .insert("fs.write".into(), Decision::Allow);
        let mut open = strict.clone();
        open.broker.rules.insert("fs.write".into(), Decision::Allow);
        assert_eq!(
            excess(&guarded, &open),
            ["broker.rules.\"fs.write:.git/**\" allow (your profile: deny)"]
        );
    }
}
