//! The per-file checks that turn the TOML as written into a [`Layer`]:
//! paths, sizes, names and bounds, each error pointing at its value.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::layer::{Layer, ListEdit, Source};
use super::{
    Amount, RawDecision, RawEnforcement, RawLimits, RawNetwork, RawNetworkMode, RawProfile,
    RawProject, RawSyscallMode,
};
use crate::profile::error::ProfileError;
use crate::profile::policy::{Decision, Enforcement, NetworkMode, ProjectAccess, SyscallMode};
use crate::profile::size::{parse_duration, parse_size};

/// Largest private `/tmp`: it is RAM (tmpfs), so a bigger one is almost certainly a typo.
const MAX_TMP: u64 = 64 << 30;
/// Largest CPU share, in cores.
const MAX_CPU: f64 = 1024.0;
/// Smallest memory limit: below this even a static binary fails to start,
/// which would look like a sandbox bug rather than a limit.
const MIN_MEMORY: u64 = 1 << 20;

impl RawProfile {
    pub(super) fn check(self, src: &Source) -> Result<Layer, ProfileError> {
        let mut layer = Layer {
            extends: self.extends,
            ..Layer::default()
        };
        if let Some(fs) = self.filesystem {
            layer.project = fs.project.map(|p| match p {
                RawProject::Rw => ProjectAccess::ReadWrite,
                RawProject::Ro => ProjectAccess::ReadOnly,
                RawProject::None => ProjectAccess::Empty,
            });
            let paths = |key: &str, replace, add, remove| {
                list_edit(key, replace, add, remove, |s, key| host_path(src, s, key))
            };
            layer.read = paths("filesystem.read", fs.read, fs.read_add, fs.read_remove)?;
            layer.read_if_exists = paths(
                "filesystem.read_if_exists",
                fs.read_if_exists,
                fs.read_if_exists_add,
                fs.read_if_exists_remove,
            )?;
            layer.write = list_edit(
                "filesystem.write",
                fs.write,
                fs.write_add,
                fs.write_remove,
                |s, key| writable_path(src, s, key),
            )?;
            layer.hide = list_edit(
                "filesystem.hide",
                fs.hide,
                fs.hide_add,
                fs.hide_remove,
                |s, key| hide_path(src, s, key),
            )?;
            let patterns = |key: &str, replace, add, remove| {
                list_edit(key, replace, add, remove, |s, key| {
                    name_pattern(src, s, key)
                })
            };
            layer.secrets = patterns(
                "filesystem.secrets",
                fs.secrets,
                fs.secrets_add,
                fs.secrets_remove,
            )?;
            layer.protect = patterns(
                "filesystem.protect",
                fs.protect,
                fs.protect_add,
                fs.protect_remove,
            )?;
            layer.hardlinks = fs.hardlinks;
            if let Some(tmp) = fs.tmp {
                let size = size_value(src, &tmp, "filesystem.tmp", false)?.unwrap_or(0);
                if size == 0 || size > MAX_TMP {
                    return Err(src.error(
                        tmp.span(),
                        "`filesystem.tmp` must be more than 0 and at most 64GiB (it is held in memory)",
                    ));
                }
                layer.tmp_size = Some(size);
            }
            layer.review = fs.review;
            if let Some(limit) = fs.review_size {
                let size = size_value(src, &limit, "filesystem.review_size", false)?.unwrap_or(0);
                if size == 0 || size > MAX_TMP {
                    return Err(src.error(
                        limit.span(),
                        "`filesystem.review_size` must be more than 0 and at most 64GiB (the layer is held in memory while the run writes)",
                    ));
                }
                layer.review_size = Some(size);
            }
        }
        if let Some(net) = self.network {
            check_network(src, net, &mut layer)?;
        }
        if let Some(limits) = self.limits {
            check_limits(src, limits, &mut layer)?;
        }
        if let Some(sys) = self.syscalls {
            layer.syscall_mode = sys.mode.map(|m| match m {
                RawSyscallMode::Allowlist => SyscallMode::Allowlist,
                RawSyscallMode::Denylist => SyscallMode::Denylist,
            });
            let syscalls = |key: &str, replace, add, remove| {
                list_edit(key, replace, add, remove, |s, _| syscall_name(src, s))
            };
            layer.syscall_allow =
                syscalls("syscalls.allow", sys.allow, sys.allow_add, sys.allow_remove)?;
            layer.syscall_deny =
                syscalls("syscalls.deny", sys.deny, sys.deny_add, sys.deny_remove)?;
        }
        if let Some(env) = self.env {
            layer.env_pass = list_edit(
                "env.pass",
                env.pass,
                env.pass_add,
                env.pass_remove,
                |s, _| env_name(src, s),
            )?;
            layer.env_git_identity = env.git_identity;
            for (name, value) in env.set.unwrap_or_default() {
                let name = env_name(src, &name)?;
                if value.get_ref().contains('\0') {
                    return Err(src.error(value.span(), "environment values cannot contain NUL"));
                }
                layer.env_set.insert(name, value.into_inner());
            }
        }
        if let Some(broker) = self.broker {
            layer.broker_default = broker.default.map(decision);
            layer.broker_rules = broker
                .rules
                .unwrap_or_default()
                .into_iter()
                .map(|(key, d)| (key.to_string(), decision(d)))
                .collect();
        }
        if let Some(enforce) = self.enforce {
            // Below "required", a run where no user namespace can be made
            // goes on without namespaces (Landlock-only view, see
            // spawn::no_namespaces) instead of refusing.
            layer.userns = enforce.userns.map(|u| enforcement(u.into_inner()));
            layer.landlock = enforce.landlock.map(enforcement);
            layer.seccomp = enforce.seccomp.map(enforcement);
            layer.cgroups = enforce.cgroups.map(enforcement);
        }
        if let Some(tools) = self.tools {
            layer.tools = list_edit(
                "tools.expose",
                tools.expose,
                tools.expose_add,
                tools.expose_remove,
                |s, _| tool_name(src, s),
            )?;
        }
        Ok(layer)
    }
}

fn check_network(src: &Source, net: RawNetwork, layer: &mut Layer) -> Result<(), ProfileError> {
    let mode = net.mode.map(|m| match m {
        RawNetworkMode::None => NetworkMode::None,
        RawNetworkMode::Loopback => NetworkMode::Loopback,
        RawNetworkMode::Allowlist => NetworkMode::Allowlist,
        RawNetworkMode::Host => NetworkMode::Host,
    });
    // `allow_add` asks for the proxy as plainly as `allow` does; `allow_remove`
    // only edits an inherited list and implies nothing.
    let listed = net.allow.is_some() || net.allow_add.is_some() || net.resolve.is_some();
    if let (Some(mode), true) = (mode, listed) {
        if mode != NetworkMode::Allowlist {
            let (key, span) = match (&net.allow, &net.allow_add, &net.resolve) {
                (Some(allow), _, _) => ("allow", allow.first().map(|a| a.span())),
                (None, Some(add), _) => ("allow_add", add.first().map(|a| a.span())),
                (None, None, Some(resolve)) => ("resolve", resolve.keys().next().map(|k| k.span())),
                (None, None, None) => ("allow", None),
            };
            return Err(src.error(
                span.unwrap_or(0..0),
                format!(
                    "`network.{key}` goes with the proxy of mode \"allowlist\", not mode \"{}\"; \
                     drop `mode` (a list implies the allowlist) or the list",
                    mode.name()
                ),
            ));
        }
    }
    layer.network = match (mode, listed) {
        (None, true) => Some(NetworkMode::Allowlist),
        (mode, _) => mode,
    };
    layer.network_allow = list_edit(
        "network.allow",
        net.allow,
        net.allow_add,
        net.allow_remove,
        |entry, key| {
            crate::net::allow::check_entry(entry.get_ref())
                .map(|()| entry.get_ref().trim().to_string())
                .map_err(|err| src.error(entry.span(), format!("`{key}`: {err}")))
        },
    )?;
    if let Some(resolve) = net.resolve {
        let mut pins = BTreeMap::new();
        for (name, address) in resolve {
            crate::net::allow::check_name(name.get_ref())
                .map_err(|err| src.error(name.span(), format!("`network.resolve`: {err}")))?;
            let ip = address.get_ref().parse::<std::net::IpAddr>().map_err(|_| {
                src.error(
                    address.span(),
                    format!(
                        "`network.resolve`: {:?} is not an IP address (write e.g. \"10.0.0.5\" or \"fd00::5\")",
                        address.get_ref()
                    ),
                )
            })?;
            pins.insert(name.get_ref().to_ascii_lowercase(), ip);
        }
        layer.network_resolve = Some(pins);
    }
    Ok(())
}

fn decision(d: RawDecision) -> Decision {
    match d {
        RawDecision::Deny => Decision::Deny,
        RawDecision::Ask => Decision::Ask,
        RawDecision::Allow => Decision::Allow,
    }
}

fn enforcement(e: RawEnforcement) -> Enforcement {
    match e {
        RawEnforcement::Required => Enforcement::Required,
        RawEnforcement::BestEffort => Enforcement::BestEffort,
        RawEnforcement::Off => Enforcement::Off,
    }
}

/// A list key and its `_add` and `_remove` forms, each entry checked by
/// `check`, which is given the key as written (for its messages).
fn list_edit<T>(
    key: &str,
    replace: Option<Vec<Spanned<String>>>,
    add: Option<Vec<Spanned<String>>>,
    remove: Option<Vec<Spanned<String>>>,
    check: impl Fn(&Spanned<String>, &str) -> Result<T, ProfileError>,
) -> Result<ListEdit<T>, ProfileError> {
    let checked = |items: Option<Vec<Spanned<String>>>, key: &str| {
        items
            .unwrap_or_default()
            .iter()
            .map(|item| check(item, key))
            .collect::<Result<Vec<T>, ProfileError>>()
    };
    Ok(ListEdit {
        replace: replace.map(|items| checked(Some(items), key)).transpose()?,
        add: checked(add, &format!("{key}_add"))?,
        remove: checked(remove, &format!("{key}_remove"))?,
    })
}

/// `.` components and trailing slashes dropped; `..` kept (callers reject it).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

fn has_parent_dir(path: &Path) -> bool {
    path.components().any(|c| matches!(c, Component::ParentDir))
}

fn host_path(src: &Source, s: &Spanned<String>, field: &str) -> Result<PathBuf, ProfileError> {
    let text = s.get_ref();
    if text.contains('\0') {
        return Err(src.error(s.span(), format!("`{field}` paths cannot contain NUL")));
    }
    let path = Path::new(text);
    if !path.is_absolute() {
        return Err(src.error(
            s.span(),
            format!("`{field}` paths must be absolute: \"{text}\" does not start with '/'"),
        ));
    }
    // `..` would make the path's meaning depend on symlinks resolved at mount
    // time, so what the profile shows is not what the sandbox gets.
    if has_parent_dir(path) {
        return Err(src.error(
            s.span(),
            format!("`{field}` paths cannot contain `..`: \"{text}\""),
        ));
    }
    Ok(normalize(path))
}

fn writable_path(src: &Source, s: &Spanned<String>, field: &str) -> Result<PathBuf, ProfileError> {
    let path = host_path(src, s, field)?;
    // Writing to these is writing to the kernel or to every device: no
    // filesystem-level sandbox survives it.
    for forbidden in ["/proc", "/sys", "/dev"] {
        if path.starts_with(forbidden) {
            return Err(src.error(
                s.span(),
                format!(
                    "`{field}` cannot contain \"{}\": {forbidden} and everything under it stay read-only",
                    path.display()
                ),
            ));
        }
    }
    if path == Path::new("/") {
        return Err(src.error(
            s.span(),
            format!("`{field}` cannot contain \"/\": that would make the whole host writable"),
        ));
    }
    Ok(path)
}

fn hide_path(src: &Source, s: &Spanned<String>, field: &str) -> Result<PathBuf, ProfileError> {
    let text = s.get_ref();
    if text.contains('\0') {
        return Err(src.error(s.span(), format!("`{field}` paths cannot contain NUL")));
    }
    let path = Path::new(text);
    // A relative `..` would reach outside the project root.
    if has_parent_dir(path) {
        return Err(src.error(
            s.span(),
            format!("`{field}` paths cannot contain `..`: \"{text}\""),
        ));
    }
    let path = normalize(path);
    if path.as_os_str().is_empty() || path == Path::new("/") {
        return Err(src.error(
            s.span(),
            format!("`{field}` entry \"{text}\" would hide the whole project or filesystem"),
        ));
    }
    Ok(path)
}

/// A `secrets`/`protect` pattern: kept as written, compiled once to check it.
fn name_pattern(src: &Source, s: &Spanned<String>, key: &str) -> Result<String, ProfileError> {
    crate::project::Pattern::parse(s.get_ref())
        .map(|_| s.get_ref().clone())
        .map_err(|err| src.error(s.span(), format!("`{key}`: {err}")))
}

fn syscall_name(src: &Source, s: &Spanned<String>) -> Result<String, ProfileError> {
    let name = s.get_ref();
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(src.error(
            s.span(),
            format!(
                "invalid system call name \"{}\": expected lowercase letters, digits and '_'",
                name.escape_default()
            ),
        ));
    }
    Ok(name.clone())
}

fn tool_name(src: &Source, s: &Spanned<String>) -> Result<String, ProfileError> {
    match crate::profile::tools::find(s.get_ref()) {
        Some(tool) => Ok(tool.name.to_string()),
        None => Err(src.error(
            s.span(),
            format!(
                "unknown tool `{}` in tools.expose: the known tools are {}",
                s.get_ref(),
                crate::profile::tools::known_names()
            ),
        )),
    }
}

fn env_name(src: &Source, s: &Spanned<String>) -> Result<String, ProfileError> {
    let name = s.get_ref();
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(src.error(
            s.span(),
            format!(
                "invalid environment variable name \"{}\": it must be non-empty without '=' or NUL",
                name.escape_default()
            ),
        ));
    }
    Ok(name.clone())
}

fn is_unlimited(amount: &Amount) -> bool {
    matches!(amount, Amount::Text(t) if t == "unlimited")
}

/// A size in bytes; `None` for "unlimited" when `unlimited_ok`.
fn size_value(
    src: &Source,
    value: &Spanned<Amount>,
    field: &str,
    unlimited_ok: bool,
) -> Result<Option<u64>, ProfileError> {
    let hint = if unlimited_ok {
        ", or \"unlimited\""
    } else {
        ""
    };
    match value.get_ref() {
        Amount::Text(_) if unlimited_ok && is_unlimited(value.get_ref()) => Ok(None),
        Amount::Text(t) => parse_size(t)
            .map(Some)
            .map_err(|e| src.error(value.span(), format!("`{field}`: {e}{hint}"))),
        Amount::Int(n) => u64::try_from(*n)
            .map(Some)
            .map_err(|_| src.error(value.span(), format!("`{field}` cannot be negative"))),
        Amount::Float(_) => Err(src.error(
            value.span(),
            format!("`{field}` must be a whole number of bytes or a size such as \"512MiB\"{hint}"),
        )),
    }
}

/// A count; `None` for "unlimited".
fn count_value(
    src: &Source,
    value: &Spanned<Amount>,
    field: &str,
) -> Result<Option<u64>, ProfileError> {
    match value.get_ref() {
        a if is_unlimited(a) => Ok(None),
        Amount::Int(n) if *n >= 1 => Ok(u64::try_from(*n).ok()),
        Amount::Int(_) => Err(src.error(value.span(), format!("`{field}` must be at least 1"))),
        _ => Err(src.error(
            value.span(),
            format!("`{field}` must be an integer or \"unlimited\""),
        )),
    }
}

fn check_limits(src: &Source, limits: RawLimits, layer: &mut Layer) -> Result<(), ProfileError> {
    if let Some(v) = limits.memory {
        let memory = size_value(src, &v, "limits.memory", true)?;
        if memory.is_some_and(|m| m < MIN_MEMORY) {
            return Err(src.error(v.span(), "`limits.memory` must be at least 1MiB"));
        }
        layer.memory = Some(memory);
    }
    if let Some(v) = limits.output {
        layer.output = Some(size_value(src, &v, "limits.output", true)?);
    }
    if let Some(v) = limits.pids {
        let pids = count_value(src, &v, "limits.pids")?;
        if let Some(Err(e)) = pids.map(crate::profile::size::check_pids) {
            return Err(src.error(v.span(), format!("`limits.pids` {e}")));
        }
        layer.pids = Some(pids);
    }
    if let Some(v) = limits.nofile {
        layer.nofile = Some(count_value(src, &v, "limits.nofile")?);
    }
    if let Some(v) = limits.cpu {
        let cores =
            match v.get_ref() {
                a if is_unlimited(a) => None,
                // Cores are small integers: an i64 converts to f64 exactly in range.
                #[allow(clippy::cast_precision_loss)]
                Amount::Int(n) => Some(*n as f64),
                Amount::Float(f) => Some(*f),
                Amount::Text(_) => return Err(src.error(
                    v.span(),
                    "`limits.cpu` must be a number of cores (such as 0.5 or 2) or \"unlimited\"",
                )),
            };
        // Written as a negated range check so that NaN (valid TOML) fails it too.
        if let Some(c) = cores {
            if !(c > 0.0 && c <= MAX_CPU) {
                return Err(src.error(
                    v.span(),
                    "`limits.cpu` must be more than 0 and at most 1024 cores",
                ));
            }
        }
        layer.cpu = Some(cores);
    }
    if let Some(v) = limits.timeout {
        let timeout = match v.get_ref() {
            a if is_unlimited(a) => None,
            Amount::Text(t) => Some(
                parse_duration(t)
                    .map_err(|e| src.error(v.span(), format!("`limits.timeout`: {e}, or \"unlimited\"")))?,
            ),
            Amount::Int(n) => Some(Duration::from_secs(u64::try_from(*n).map_err(|_| {
                src.error(v.span(), "`limits.timeout` cannot be negative")
            })?)),
            Amount::Float(_) => {
                return Err(src.error(
                    v.span(),
                    "`limits.timeout` must be a duration such as \"10m\", an integer number of seconds, or \"unlimited\"",
                ))
            }
        };
        if let Some(Err(e)) = timeout.map(crate::profile::size::check_timeout) {
            return Err(src.error(
                v.span(),
                format!("`limits.timeout` {e}; use \"unlimited\" for no limit"),
            ));
        }
        layer.timeout = Some(timeout);
    }
    Ok(())
}
