//! What a profile asks of the seccomp filter: the input of
//! [`super::compile`], defined beside it so that the compiler depends on
//! nothing above it (a profile's policy names these types).

use serde::Serialize;

/// The shape of the seccomp filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyscallMode {
    /// Only the listed system calls are allowed; anything else fails with ENOSYS.
    Allowlist,
    /// Everything is allowed except a list of dangerous calls, which fail with EPERM.
    Denylist,
}

/// The seccomp filter.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct SyscallPolicy {
    /// Allowlist or denylist.
    pub mode: SyscallMode,
    /// Extra system call names to allow (allowlist mode) on top of the built-in list.
    pub allow: Vec<String>,
    /// Extra system call names to refuse with EPERM, in either mode.
    pub deny: Vec<String>,
}
