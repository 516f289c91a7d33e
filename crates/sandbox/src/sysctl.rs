//! The sysctls that decide whether this host lets a process create a user
//! namespace. Read by both the probes (`sandbox doctor`) and the
//! environment detector behind every refusal, so it lives below both; what
//! they mean for a run is told in one place, the environment's
//! (`Environment::sysctl_blocker`).

use std::fs;
use std::path::Path;

use serde::Serialize;

/// The sysctls that decide whether user namespaces may be created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UsernsSysctls {
    /// `kernel.unprivileged_userns_clone` (Debian and Ubuntu kernels).
    pub unprivileged_userns_clone: Option<bool>,
    /// `user.max_user_namespaces` (per user namespace).
    pub max_user_namespaces: Option<u64>,
    /// `kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10+).
    pub apparmor_restrict_unprivileged_userns: Option<bool>,
}

impl UsernsSysctls {
    /// Read them from this host's /proc/sys.
    pub fn read() -> Self {
        Self::read_at(Path::new("/"))
    }

    /// Read them from `root`/proc/sys (`/` for this host; a faked tree in tests).
    pub fn read_at(root: &Path) -> Self {
        let sys = root.join("proc/sys");
        UsernsSysctls {
            unprivileged_userns_clone: read_bool(sys.join("kernel/unprivileged_userns_clone")),
            max_user_namespaces: read_trimmed(sys.join("user/max_user_namespaces"))
                .and_then(|s| s.parse().ok()),
            apparmor_restrict_unprivileged_userns: read_bool(
                sys.join("kernel/apparmor_restrict_unprivileged_userns"),
            ),
        }
    }
}

pub(crate) fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

pub(crate) fn read_bool(path: impl AsRef<Path>) -> Option<bool> {
    match read_trimmed(path)?.as_str() {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}
