//! The seccomp filter. (Interface stub; replaced by the real compiler at merge.)
use crate::profile::policy::{SyscallMode, SyscallPolicy};

/// Errors compiling a filter.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// Placeholder.
    #[error("seccomp not built yet")]
    NotBuilt,
}

/// Compiled programs.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    programs: Vec<Vec<libc::sock_filter>>,
    mode: SyscallMode,
}

impl CompiledFilter {
    /// Programs in install order.
    pub fn programs(&self) -> &[Vec<libc::sock_filter>] {
        &self.programs
    }
    /// Hash.
    pub fn sha256(&self) -> &str {
        "stub"
    }
    /// Mode.
    pub fn mode(&self) -> SyscallMode {
        self.mode
    }
    /// Count.
    pub fn instruction_count(&self) -> usize {
        0
    }
}

/// Compile.
pub fn compile(policy: &SyscallPolicy) -> Result<CompiledFilter, SeccompError> {
    Ok(CompiledFilter {
        programs: vec![],
        mode: policy.mode,
    })
}
