//! `sandbox learn`: run a command under a base profile, record what it
//! looked for outside its view, and write the narrowest profile that
//! `extends` the base with exactly that (docs/src/learn.md).
//!
//! Each pass runs the command as confined as the profile it would write
//! (the base plus the reads learned so far; see `sandbox::learn` for the
//! mechanism): a program that stops at the first missing file shows the
//! next one only once that file is there, so passes repeat until one
//! learns nothing new.
//!
//! System calls the base's filter refuses are learned too, but never
//! given while learning: each is answered with the base's own errno (see
//! `sandbox::seccomp::learning`), and the profile written lists the
//! narrowest `[syscalls]` entry that lets it through, for a person to
//! review before any run has it.
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use sandbox::learn::{Learning, Observations, RefusedCall, Seen, Use};

use sandbox::seccomp::policy::SyscallPolicy;

use super::UsageError;

/// The first line of every profile `sandbox learn` writes: how it knows a
/// base is its own output, whose entries a new pass starts from.
const HEADER: &str = "# Learned by `sandbox learn`";

/// Arguments of `sandbox learn`.
#[derive(Debug, Args)]
pub struct LearnArgs {
    /// The profile to start from: a built-in name, or a path (a profile this
    /// command wrote starts from what it learned).
    #[arg(long, short = 'p', default_value = "strict", value_name = "NAME|PATH")]
    pub profile: String,
    /// Where to write the learned profile.
    #[arg(long, short = 'o', default_value = "learned.toml", value_name = "FILE")]
    pub out: PathBuf,
    /// The project root, writable inside and the working directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Set NAME=VALUE, or pass NAME from this environment (repeatable), as `sandbox run -e`.
    #[arg(long = "env", short = 'e', value_name = "NAME[=VALUE]")]
    pub env: Vec<OsString>,
    /// Most runs of the command: each runs with what the ones before learned.
    #[arg(long, default_value_t = 6, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=32))]
    pub passes: u32,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The base a learned profile extends, and what an earlier learn of it
/// already found.
struct Base {
    /// The `extends` value to write.
    extends: String,
    /// Its effective policy.
    policy: sandbox::profile::policy::Policy,
    /// Entries learned by the run that wrote the base, kept.
    earlier: BTreeSet<PathBuf>,
    /// System calls learned by the run that wrote the base, kept.
    earlier_calls: BTreeSet<String>,
}

/// What an earlier `sandbox learn` wrote into a profile.
#[derive(Debug, Default, PartialEq)]
struct Learned {
    extends: String,
    reads: Vec<PathBuf>,
    calls: Vec<String>,
}

fn usage(message: String) -> UsageError {
    UsageError(message)
}

/// `extends` and the learned entries of a profile this command wrote; None
/// when the text is not one.
fn parse_learned(text: &str) -> Option<Learned> {
    if !text.starts_with(HEADER) {
        return None;
    }
    let string = |value: &str| serde_json::from_str::<String>(value.trim()).ok();
    let mut extends = None;
    let mut learned = Learned::default();
    #[derive(PartialEq)]
    enum List {
        None,
        Reads,
        Calls,
    }
    let mut in_list = List::None;
    let mut section = "";
    for line in text.lines() {
        let code = line.split(" #").next().unwrap_or("").trim();
        if in_list == List::None && code.starts_with('[') && code.ends_with(']') {
            section = &code[1..code.len() - 1];
        } else if let Some(value) = code.strip_prefix("extends = ") {
            extends = string(value);
        } else if code.starts_with("read_if_exists_add = [") {
            in_list = if code.ends_with(']') {
                List::None
            } else {
                List::Reads
            };
        } else if code.starts_with("allow_add = [") || code.starts_with("deny_remove = [") {
            // Only `[syscalls]` lists: `[network] allow_add` lists
            // destinations, which are learned again from the audit.
            let calls = section == "syscalls";
            in_list = if code.ends_with(']') || !calls {
                List::None
            } else {
                List::Calls
            };
        } else if in_list != List::None && code == "]" {
            in_list = List::None;
        } else if in_list == List::Reads && !code.is_empty() {
            learned
                .reads
                .push(PathBuf::from(string(code.trim_end_matches(','))?));
        } else if in_list == List::Calls && !code.is_empty() {
            let name = string(code.trim_end_matches(','))?;
            if !learned.calls.contains(&name) {
                learned.calls.push(name);
            }
        }
    }
    learned.extends = extends?;
    Some(learned)
}

fn base(spec: &str, out: &Path) -> anyhow::Result<Base> {
    let is_path = spec.contains('/') || spec.ends_with(".toml");
    if !is_path {
        let policy =
            sandbox::profile::load(spec).with_context(|| usage(format!("--profile {spec}")))?;
        return Ok(Base {
            extends: spec.to_owned(),
            policy,
            earlier: BTreeSet::new(),
            earlier_calls: BTreeSet::new(),
        });
    }
    let path = std::fs::canonicalize(spec).with_context(|| usage(format!("--profile {spec}")))?;
    let text =
        std::fs::read_to_string(&path).with_context(|| usage(format!("--profile {spec}")))?;
    // A profile this command wrote: start from its own base and entries, so
    // that learning again into the same file never extends itself.
    if let Some(learned) = parse_learned(&text) {
        let dir = path.parent().unwrap_or(Path::new("/"));
        let extends = learned.extends;
        let parent = if extends.contains('/') || extends.ends_with(".toml") {
            dir.join(&extends).display().to_string()
        } else {
            extends
        };
        let mut inner = base(&parent, out)?;
        inner.earlier.extend(learned.reads);
        inner.earlier_calls.extend(learned.calls);
        return Ok(inner);
    }
    if std::fs::canonicalize(out).is_ok_and(|o| o == path) {
        return Err(usage(format!(
            "--out {} is the base profile itself, which `sandbox learn` did not write: write to another file",
            out.display()
        ))
        .into());
    }
    let policy =
        sandbox::profile::load_file(&path).with_context(|| usage(format!("--profile {spec}")))?;
    Ok(Base {
        extends: path.display().to_string(),
        policy,
        earlier: BTreeSet::new(),
        earlier_calls: BTreeSet::new(),
    })
}

/// The entries to learn from everything observed: the narrowest that
/// serve each use. A directory only looked up is kept only when nothing
/// beneath it is learned (the view makes the directories above any entry),
/// and nothing beneath a learned directory is repeated.
fn entries(observed: &Observations, base: &Base) -> BTreeMap<PathBuf, Option<Seen>> {
    let mut out: BTreeMap<PathBuf, Option<Seen>> =
        base.earlier.iter().map(|p| (p.clone(), None)).collect();
    let fs = &base.policy.filesystem;
    let shown = |path: &Path| {
        fs.read
            .iter()
            .chain(&fs.read_if_exists)
            .any(|r| path.starts_with(r))
    };
    for (path, seen) in &observed.needed {
        // The view recreates a link, it does not follow it: a path reached
        // through one (the link itself, or a directory above it) is learned
        // as that link, and what it leads to as its own entry.
        let ancestors: Vec<&Path> = path.ancestors().collect();
        let link = ancestors
            .into_iter()
            .rev()
            .find(|a| std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()));
        match link {
            None => {
                out.insert(path.clone(), Some(seen.clone()));
            }
            Some(link) => {
                out.entry(link.to_path_buf())
                    .or_insert_with(|| Some(seen.clone()));
                if let Ok(target) = std::fs::canonicalize(path) {
                    if !shown(&target) {
                        out.entry(target).or_insert_with(|| Some(seen.clone()));
                    }
                }
            }
        }
    }
    let paths: Vec<PathBuf> = out.keys().cloned().collect();
    let lookup_only_dir = |path: &Path, seen: &Option<Seen>| {
        seen.as_ref()
            .is_some_and(|s| s.is_dir && s.strongest == Use::Lookup)
            || (seen.is_none() && path.is_dir())
    };
    out.retain(|path, seen| {
        let below_learned_dir = paths.iter().any(|other| {
            other != path
                && path.starts_with(other)
                && other.is_dir()
                && !lookup_only(other, &observed.needed)
        });
        let above_learned = paths
            .iter()
            .any(|other| other != path && other.starts_with(&*path));
        !(below_learned_dir || (lookup_only_dir(path, seen) && above_learned))
    });
    out
}

fn lookup_only(path: &Path, needed: &BTreeMap<PathBuf, Seen>) -> bool {
    needed.get(path).is_some_and(|s| s.strongest == Use::Lookup)
}

/// Directories learned so far only because they were looked up: the next
/// pass records every use beneath them (see `sandbox::learn::Learning`).
fn provisional(learned: &BTreeMap<PathBuf, Option<Seen>>, observed: &Observations) -> Vec<PathBuf> {
    learned
        .keys()
        .filter(|p| p.is_dir() && lookup_only(p, &observed.needed))
        .cloned()
        .collect()
}

fn quote(path: &Path) -> String {
    sandbox::profile::quote(&path.to_string_lossy())
}

fn said(seen: &Seen) -> String {
    format!(
        "{}{}",
        seen.strongest.verb(),
        by_and_times(&seen.by, seen.count)
    )
}

/// " by NAME, NAME N times": the programs (their names escaped, as the
/// payload chose them) and how often.
fn by_and_times<'a>(by: impl IntoIterator<Item = &'a String>, count: u64) -> String {
    let by: Vec<String> = by
        .into_iter()
        .filter(|b| !b.is_empty())
        // The payload before its exec still carries init's name.
        .map(|b| {
            if b == "sandbox-init" {
                "the sandbox starting the command".to_owned()
            } else {
                sandbox::broker::text::shown(b)
            }
        })
        .collect();
    let times = if count == 1 {
        "once".to_owned()
    } else {
        format!("{count} times")
    };
    if by.is_empty() {
        format!(" {times}")
    } else {
        format!(" by {} {times}", by.join(", "))
    }
}

/// A path the command named, as a person (or a comment) shows it.
fn shown_path(path: &Path) -> String {
    sandbox::broker::text::shown(&path.to_string_lossy())
}

/// Where well-known tools keep their credentials, outside any project
/// (so outside what a profile's secrets list is written for): the
/// command names them in one pass and the next would be shown them.
const CREDENTIAL_STORES: &[&str] = &[
    ".config/gh/",
    ".config/hub",
    ".docker/config.json",
    ".kube/",
    ".gnupg/",
    ".config/gcloud/",
    ".azure/",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".terraform.d/",
    ".vault-token",
    ".password-store/",
    ".local/share/keyrings/",
    ".config/rclone/",
    ".pgpass",
    ".my.cnf",
    ".s3cfg",
    ".boto",
    ".gem/credentials",
    ".config/op/",
];

fn credential_stores() -> &'static sandbox::project::Rules {
    static RULES: std::sync::OnceLock<sandbox::project::Rules> = std::sync::OnceLock::new();
    RULES.get_or_init(|| {
        let patterns: Vec<String> = CREDENTIAL_STORES.iter().map(|p| (*p).to_owned()).collect();
        sandbox::project::Rules::new(&patterns, &[]).unwrap_or_else(|_| {
            // The list above is fixed and valid (a unit test parses it);
            // never reached, and if it were, everything is withheld.
            sandbox::project::Rules::new(&["*".to_owned()], &[]).unwrap_or_default()
        })
    })
}

/// Why a learned path is withheld from the learning runs (written to the
/// profile for a person to review, never shown while learning), if it is.
/// Each pass grants what the one before asked for, so without this an
/// untrusted command would be handed any file it names: a secret in a
/// home directory, or (when root learns, whose runs' read paths the
/// supervisor opens as root) a file below a directory only root enters.
fn withheld(path: &Path, secrets: &sandbox::project::Rules, root: bool) -> Option<&'static str> {
    let relative = path.to_string_lossy();
    let relative = relative.trim_start_matches('/');
    if secrets.secret_in(relative) {
        return Some("its name is in the profile's secrets list");
    }
    if credential_stores().secret_in(relative) {
        return Some("a well-known store of credentials");
    }
    if root && !reachable_by_others(path) {
        return Some("on the host only root reaches it, which the run's own identity could not");
    }
    holds_secrets(path, secrets)
}

/// Most entries looked at beneath one learned directory; past it the
/// directory is withheld, as it could not be checked.
const MAX_CHECKED: usize = 10_000;

/// Why a learned directory is withheld for what is beneath it: shown, it
/// would show every file in it, and a command that listed `~/.config` in
/// one pass read `~/.config/gh/hosts.yml` in the next.
fn holds_secrets(path: &Path, secrets: &sandbox::project::Rules) -> Option<&'static str> {
    let is_dir = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    if !is_dir(path) {
        return None;
    }
    let mut checked = 0usize;
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            checked += 1;
            if checked > MAX_CHECKED {
                return Some("a directory too large to check for secrets and credential stores");
            }
            let inner = entry.path();
            let relative = inner.to_string_lossy();
            let relative = relative.trim_start_matches('/');
            if secrets.secret_in(relative) {
                return Some(
                    "a directory holding a file whose name is in the profile's secrets list",
                );
            }
            if credential_stores().secret_in(relative) {
                return Some("a directory holding a well-known store of credentials");
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(inner);
            }
        }
    }
    None
}

/// Whether a user that owns nothing on the way could read `path`: every
/// directory above lets others through, and the path lets them read.
fn reachable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode());
    path.ancestors()
        .skip(1)
        .all(|dir| mode(dir).is_ok_and(|m| m & 0o001 != 0))
        && mode(path).is_ok_and(|m| m & 0o004 != 0)
}

/// Which `[syscalls]` lists let `name` through when BASE refuses it:
/// (`allow_add`, `deny_remove`), from the narrowest widening the profile
/// format has (`sandbox::seccomp::allowing`).
fn call_edit(policy: &SyscallPolicy, name: &str) -> (bool, bool) {
    let wider = sandbox::seccomp::allowing(policy, name);
    (
        wider.allow.len() > policy.allow.len(),
        wider.deny.len() < policy.deny.len(),
    )
}

/// The system calls to learn: the earlier run's, and those refused now
/// that a profile entry lets through.
fn learned_calls(observed: &Observations, base: &Base) -> BTreeMap<String, Option<RefusedCall>> {
    let mut out: BTreeMap<String, Option<RefusedCall>> = base
        .earlier_calls
        .iter()
        .map(|name| (name.clone(), None))
        .collect();
    for (name, call) in &observed.refused_calls {
        if call.liftable {
            out.insert(name.clone(), Some(call.clone()));
        }
    }
    out.retain(|name, _| call_edit(&base.policy.syscalls, name) != (false, false));
    out
}

fn errno_name(errno: i32) -> String {
    format!("{:?}", nix::errno::Errno::from_raw(errno))
}

fn said_call(call: &RefusedCall, base: &str) -> String {
    format!(
        "made{}; `{base}` answered {}",
        by_and_times(&call.by, call.count),
        errno_name(call.errno)
    )
}

/// What the passes found, as the profile says it.
struct Found<'a> {
    passes: u32,
    learned: &'a BTreeMap<PathBuf, Option<Seen>>,
    calls: &'a BTreeMap<String, Option<RefusedCall>>,
    observed: &'a Observations,
    withheld: &'a BTreeMap<PathBuf, &'static str>,
    destinations: &'a BTreeMap<String, u64>,
    local: &'a BTreeMap<String, u64>,
    actions: &'a BTreeMap<String, u64>,
}

fn render(base: &Base, command: &[OsString], found: &Found<'_>) -> String {
    let Found {
        passes,
        learned,
        calls,
        observed,
        withheld,
        destinations,
        local,
        actions,
    } = *found;
    let shown: Vec<String> = command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let network = if destinations.is_empty() {
        "the network, "
    } else {
        ""
    };
    let mut out = format!(
        "{HEADER} from {passes} run(s) of: {}\n\
         # While learning, the command had `{}`'s confinement plus the reads below as they were\n\
         # found; system calls (each one its filter refused was answered with its errno), writes,\n\
         # {network}capabilities and the rest stayed `{}`'s.\n\
         version = 1\nextends = {}\n\n[filesystem]\nread_if_exists_add = [\n",
        sandbox::broker::text::shown(&shown.join(" ")),
        base.extends,
        base.extends,
        sandbox::profile::quote(&base.extends)
    );
    for (path, seen) in learned {
        let why = match seen {
            Some(seen) => said(seen),
            None => "learned by an earlier run".to_owned(),
        };
        let warn = match withheld.get(path) {
            Some(reason) => format!("; REVIEW, not shown while learning: {reason}"),
            None => String::new(),
        };
        out.push_str(&format!("    {},  # {why}{warn}\n", quote(path)));
    }
    out.push_str("]\n");
    if !destinations.is_empty() {
        out.push_str("\n[network]\nallow_add = [\n");
        for (target, count) in destinations {
            let times = if *count == 1 {
                "once".to_owned()
            } else {
                format!("{count} times")
            };
            out.push_str(&format!(
                "    {},  # refused by the allowlist's proxy {times}\n",
                sandbox::profile::quote(target)
            ));
        }
        out.push_str("]\n");
    }
    let call_list = |out: &mut String, key: &str, which: fn((bool, bool)) -> bool| {
        let names: Vec<(&String, &Option<RefusedCall>)> = calls
            .iter()
            .filter(|(name, _)| which(call_edit(&base.policy.syscalls, name)))
            .collect();
        if names.is_empty() {
            return;
        }
        out.push_str(&format!("{key} = [\n"));
        for (name, call) in names {
            let why = match call {
                Some(call) => format!("refused while learning: {}", said_call(call, &base.extends)),
                None => "learned by an earlier run".to_owned(),
            };
            out.push_str(&format!(
                "    {},  # {why}\n",
                sandbox::profile::quote(name)
            ));
        }
        out.push_str("]\n");
    };
    if !calls.is_empty() {
        out.push_str("\n[syscalls]\n");
        call_list(&mut out, "allow_add", |(allow, _)| allow);
        call_list(&mut out, "deny_remove", |(_, undeny)| undeny);
    }
    let fixed: Vec<(&String, &RefusedCall)> = observed
        .refused_calls
        .iter()
        .filter(|(name, call)| !call.liftable && !calls.contains_key(*name))
        .collect();
    if !fixed.is_empty() {
        out.push_str(
            "\n# System calls refused while learning, and not learned: the filter refuses them whatever a\n\
             # profile says (the built-in deny list, the ENOSYS that sends libc back to a call the filter\n\
             # can check, or a rule on their arguments):\n",
        );
        for (name, call) in fixed {
            out.push_str(&format!(
                "#   {name}  ({})\n",
                said_call(call, &base.extends)
            ));
        }
    }
    let mut notes = |title: &str, map: &BTreeMap<PathBuf, Seen>| {
        if map.is_empty() {
            return;
        }
        out.push_str(&format!("\n# {title}\n"));
        for (path, seen) in map {
            out.push_str(&format!("#   {}  ({})\n", shown_path(path), said(seen)));
        }
    };
    notes(
        "Writes refused while learning, and not learned (a write is given only by hand: `write_add`):",
        &observed.writes_refused,
    );
    notes("Hidden by the profile, and left hidden:", &observed.hidden);
    counted_notes(
        &mut out,
        "Destinations refused while learning, and not learned (an address of this host or a local network: added only by hand):",
        local,
    );
    counted_notes(
        &mut out,
        "Broker actions refused while learning, and not learned (a rule that allows one is a person's decision):",
        actions,
    );
    out
}

/// A comment listing what was refused while learning, with counts. The
/// payload chose each entry (a destination, a broker request's method and
/// target), so each goes through `shown`: a newline in one would end the
/// comment and write the rest as the profile's own settings.
fn counted_notes(out: &mut String, title: &str, counts: &BTreeMap<String, u64>) {
    if counts.is_empty() {
        return;
    }
    out.push_str(&format!("\n# {title}\n"));
    for (entry, count) in counts {
        let entry = sandbox::broker::text::shown(entry);
        out.push_str(&format!("#   {entry}  ({count} time(s))\n"));
    }
}

/// An unnamed file for one pass's audit, gone when closed: no name in a
/// shared directory that another user could have put a link at.
fn scratch_audit() -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(std::env::temp_dir())
        .context("an unnamed file for the learning run's audit in the temporary directory")
}

/// What a pass's audit (one JSON line per broker request and proxied
/// connection) shows refused: destinations the allowlist's proxy refused,
/// as `host:port`, into `destinations`; broker actions, as `ACTION TARGET`,
/// into `actions` (reported, never learned: a broker rule that allows is a
/// person's decision, and `fs.write` would widen writes).
fn refused_in_audit(
    audit: &mut std::fs::File,
    destinations: &mut BTreeMap<String, u64>,
    actions: &mut BTreeMap<String, u64>,
) {
    use std::io::{BufRead, Seek};
    if audit.rewind().is_err() {
        return;
    }
    for line in std::io::BufReader::new(&*audit).lines() {
        let Ok(line) = line else { break };
        let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if entry["decision"] != "deny" {
            continue;
        }
        let target = entry["target"].as_str().unwrap_or("");
        match entry["method"].as_str() {
            Some("net.connect") if !target.is_empty() => {
                *destinations.entry(target.to_owned()).or_default() += 1;
            }
            Some(method) => {
                let key = format!("{method} {target}").trim_end().to_owned();
                *actions.entry(key).or_default() += 1;
            }
            None => {}
        }
    }
}

/// Whether a refused destination (`host:port`) names an address that is
/// not public: this host (`0.0.0.0` and `::` reach its loopback), its
/// networks or the cloud metadata endpoint. The next pass would be given
/// it (each is given what the one before was refused), so the command
/// would reach the host's own services by asking once; a person adds such
/// an entry by hand. A name that resolves there is refused by the proxy's
/// address check whatever is learned.
fn local_address(target: &str, own: &[std::net::IpAddr]) -> bool {
    let host = target.rsplit_once(':').map_or(target, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| !sandbox_net::address::classify(ip, own).is_public())
}

/// `sandbox learn`.
pub fn run(args: LearnArgs) -> anyhow::Result<i32> {
    let base = base(&args.profile, &args.out)?;
    let (program, rest) = args.command.split_first().context("no command given")?;
    let secrets = sandbox::project::Rules::new(&base.policy.filesystem.secrets, &[])
        .map_err(|err| usage(err.to_string()))?;
    let root = nix::unistd::geteuid().is_root();
    // Destinations are learned where the base has the allowlist's proxy,
    // whose audit names each refused one; a base without it (strict's own
    // loopback) keeps its network, and nothing about it is learned.
    let proxied = base.policy.network.mode == sandbox::profile::policy::NetworkMode::Allowlist;
    let mut destinations: BTreeMap<String, u64> = BTreeMap::new();
    // Destinations naming an address that is not public: never learned.
    let mut local: BTreeMap<String, u64> = BTreeMap::new();
    let own = sandbox_net::address::host_addresses().unwrap_or_default();
    let mut actions: BTreeMap<String, u64> = BTreeMap::new();
    let mut observed = Observations::default();
    let mut learned = entries(&observed, &base);
    let mut status = 0;
    let mut passes = 0;
    for pass in 1..=args.passes {
        passes = pass;
        let mut policy = base.policy.clone();
        for path in learned.keys() {
            let reviewed = base.earlier.contains(path);
            if !reviewed && withheld(path, &secrets, root).is_some() {
                continue;
            }
            if !policy.filesystem.read_if_exists.contains(path) {
                policy.filesystem.read_if_exists.push(path.clone());
            }
        }
        // Calls an earlier learn found, which a person has had the profile
        // to review: the profile passed gives them, so the runs do too.
        for name in &base.earlier_calls {
            policy.syscalls = sandbox::seccomp::allowing(&policy.syscalls, name);
        }
        let learning = Learning {
            provisional: provisional(&learned, &observed),
            ..Learning::default()
        };
        for target in destinations.keys() {
            if !policy.network.allow.contains(target) {
                policy.network.allow.push(target.clone());
            }
        }
        let mut command = sandbox::Command::new(program, policy);
        command
            .args(rest)
            .interactive(false)
            .learn(learning.clone());
        let mut audit = scratch_audit()?;
        command.audit_file(audit.try_clone()?);
        super::run::project_and_env(&mut command, args.project.as_ref(), &args.env)?;
        let finished = command.run();
        status = match &finished.result {
            Ok(exit) => exit.as_shell_status(),
            // The program itself outside the view: its exec was observed
            // like any other call, and the next pass has it.
            Err(err @ sandbox::spawn::SpawnError::Exec { .. }) => {
                eprintln!("sandbox learn: pass {pass}: {err}");
                err.exit_status()
            }
            Err(err) => {
                eprintln!("sandbox learn: pass {pass}: {err}");
                return Ok(err.exit_status());
            }
        };
        let this_pass = match learning.observed.lock() {
            Ok(o) => o.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let calls = this_pass.calls;
        let calls_before: BTreeSet<String> = observed.refused_calls.keys().cloned().collect();
        observed.merge(this_pass);
        let next = entries(&observed, &base);
        let mut new: Vec<String> = next
            .keys()
            .filter(|p| !learned.contains_key(*p))
            .map(|p| shown_path(p))
            .collect();
        let before: BTreeSet<String> = destinations.keys().cloned().collect();
        let mut refused = BTreeMap::new();
        refused_in_audit(&mut audit, &mut refused, &mut actions);
        // Only the proxy refuses destinations; without it there are none.
        if proxied {
            for (target, count) in refused {
                let kept = if local_address(&target, &own) {
                    &mut local
                } else {
                    &mut destinations
                };
                *kept.entry(target).or_default() += count;
            }
        }
        new.extend(
            destinations
                .keys()
                .filter(|d| !before.contains(*d))
                .cloned(),
        );
        // Reported as found, but no reason for another pass: the next one
        // is refused them the same way.
        let new_calls: Vec<String> = observed
            .refused_calls
            .keys()
            .filter(|name| !calls_before.contains(*name))
            .map(|name| format!("refused system call {name}"))
            .collect();
        let shown: Vec<&String> = new.iter().chain(&new_calls).collect();
        eprintln!(
            "sandbox learn: pass {pass}: exit {status}, {calls} call(s) observed, {} new need(s){}",
            shown.len(),
            if shown.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}",
                    shown
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        let done = new.is_empty() && next.len() == learned.len();
        learned = next;
        if done {
            break;
        }
    }
    let withheld: BTreeMap<PathBuf, &'static str> = learned
        .keys()
        .filter(|p| !base.earlier.contains(*p))
        .filter_map(|p| Some((p.clone(), withheld(p, &secrets, root)?)))
        .collect();
    let calls = learned_calls(&observed, &base);
    let found = Found {
        passes,
        learned: &learned,
        calls: &calls,
        observed: &observed,
        withheld: &withheld,
        destinations: &destinations,
        local: &local,
        actions: &actions,
    };
    let text = render(&base, &args.command, &found);
    std::fs::write(&args.out, &text).with_context(|| format!("writing {}", args.out.display()))?;
    if let Err(err) = sandbox::profile::load_file(&args.out) {
        anyhow::bail!(
            "the learned profile {} does not load ({err}); this is a bug of `sandbox learn`",
            args.out.display()
        );
    }
    eprintln!(
        "sandbox learn: wrote {} ({} read path(s){}{} beyond `{}`); the learning runs were allowed nothing \
         else beyond it: no system call its filter refuses (each was answered with its errno), no write, \
         no other network destination, no capability",
        args.out.display(),
        learned.len(),
        if calls.is_empty() {
            String::new()
        } else {
            format!(", {} system call(s)", calls.len())
        },
        if destinations.is_empty() {
            String::new()
        } else {
            format!(" and {} destination(s)", destinations.len())
        },
        base.extends
    );
    for (name, call) in &observed.refused_calls {
        if !call.liftable && !calls.contains_key(name) {
            eprintln!(
                "sandbox learn: refused and not learned: system call {name} ({}), which no profile entry allows",
                said_call(call, &base.extends)
            );
        }
    }
    for (path, reason) in &withheld {
        eprintln!(
            "sandbox learn: review {}: {reason}, so the learning runs were not shown it; the learned profile lets the command read it",
            shown_path(path)
        );
    }
    if observed.unrecorded > 0 {
        eprintln!(
            "sandbox learn: {} call(s) named paths past the first {} of a list, which were not kept: \
             the profile may lack what those needed",
            observed.unrecorded,
            sandbox::learn::MAX_PATHS
        );
    }
    for (target, count) in &local {
        eprintln!(
            "sandbox learn: refused by the allowlist's proxy and not learned: {} ({count} time(s)), an address of this host or a local network",
            sandbox::broker::text::shown(target)
        );
    }
    for (action, count) in &actions {
        eprintln!(
            "sandbox learn: refused by the broker and not learned: {} ({count} time(s))",
            sandbox::broker::text::shown(action)
        );
    }
    for (path, seen) in &observed.writes_refused {
        eprintln!(
            "sandbox learn: refused and not learned: write to {} ({})",
            shown_path(path),
            said(seen)
        );
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_that_are_not_public_are_local() {
        for target in [
            "0.0.0.0:443",
            "[::]:80",
            "127.0.0.1:22",
            "169.254.169.254:80",
            "[::ffff:10.0.0.1]:5432",
        ] {
            assert!(local_address(target, &[]), "{target}");
        }
        for target in [
            "registry.npmjs.org:443",
            "1.1.1.1:443",
            "[2606:4700::1111]:443",
        ] {
            assert!(!local_address(target, &[]), "{target}");
        }
    }

    #[test]
    fn credential_stores_are_found_at_any_depth() {
        let rules = credential_stores();
        assert!(rules.secret_in("home/u/.config/gh/hosts.yml"));
        assert!(rules.secret_in("root/.docker/config.json"));
        assert!(rules.secret_in("home/u/.gnupg/private-keys-v1.d/x.key"));
        assert!(!rules.secret_in("home/u/.config/git/config"));
        assert!(!rules.secret_in("home/u/.docker/cli-plugins/docker-buildx"));
    }

    #[test]
    fn a_learned_profile_is_read_back() {
        let text = format!(
            "{HEADER} from 1 run(s) of: x\nversion = 1\nextends = \"strict\"\n\n[filesystem]\nread_if_exists_add = [\n    \"/a b/c\",  # read once\n]\n"
        );
        let learned = parse_learned(&text).unwrap();
        assert_eq!(learned.extends, "strict");
        assert_eq!(learned.reads, vec![PathBuf::from("/a b/c")]);
        assert!(learned.calls.is_empty());
        assert!(parse_learned("version = 1\n").is_none());
    }

    #[test]
    fn learned_system_calls_are_read_back_and_destinations_are_not() {
        let text = format!(
            "{HEADER} from 1 run(s) of: x\nversion = 1\nextends = \"strict\"\n\n[filesystem]\nread_if_exists_add = [\n]\n\n\
             [network]\nallow_add = [\n    \"example.org:443\",  # refused\n]\n\n\
             [syscalls]\nallow_add = [\n    \"get_mempolicy\",  # refused\n]\ndeny_remove = [\n    \"mbind\",\n]\n"
        );
        let learned = parse_learned(&text).unwrap();
        assert_eq!(learned.calls, ["get_mempolicy", "mbind"]);
        assert!(learned.reads.is_empty());
    }
}
