//! How a setup step in the sandbox's init or payload fails: a record of the
//! step, the errno and the path, with no allocation (it is built between
//! clone and exec, and crosses to the supervisor once, over the report pipe).

use nix::errno::Errno;

use super::Step;

/// A failed step: what, the errno, and the path or name involved.
pub struct Failed<'a> {
    /// The step.
    pub step: Step,
    /// The errno.
    pub errno: Errno,
    /// The path or name.
    pub detail: &'a [u8],
}

pub(crate) trait StepExt<T> {
    fn step<'a>(self, step: Step, detail: &'a [u8]) -> Result<T, Failed<'a>>;
}

impl<T> StepExt<T> for nix::Result<T> {
    fn step<'a>(self, step: Step, detail: &'a [u8]) -> Result<T, Failed<'a>> {
        self.map_err(|errno| Failed {
            step,
            errno,
            detail,
        })
    }
}

/// Exit status of init when its own setup failed (the record says why).
pub const SETUP_FAILED: i32 = 125;
