//! cgroups: which hierarchy this host uses and where this process's own cgroups are.
//!
//! [`detect`] finds the layout, [`predict`] decides where a run's cgroup goes
//! (and `doctor` shows that same decision), [`RunCgroup`] creates it, and
//! [`scope`] gets an unprivileged supervisor a delegated cgroup from the
//! user's systemd first.
use std::path::PathBuf;

use serde::Serialize;

pub(crate) mod detect;

pub use detect::{detect, detect_from, detect_in};

mod run;
pub use run::{
    predict, predict_with, run_cgroup_name, run_cgroup_owner, supervisor_leaf_name, CgroupError,
    CgroupLimits, CgroupOps, CgroupStats, FixContext, KernelOps, Placement, RunCgroup,
};

pub mod notice;
pub mod scope;
pub use scope::scope_note;

/// The reason in a refusal of a run that requires cgroups: the cause, then
/// the fix for this environment (root is never told to run as root).
pub fn refusal(err: &CgroupError, context: FixContext) -> String {
    format!("cannot be set up: {err}. Fix: {}", err.fix(context))
}

/// The controllers the sandbox uses for its limits, in report order.
pub const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// How cgroups are mounted on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CgroupMode {
    /// Only the unified (cgroup2) hierarchy: most current distributions.
    V2,
    /// Only legacy per-controller hierarchies.
    V1,
    /// Legacy controller hierarchies plus a cgroup2 mount (usually `/sys/fs/cgroup/unified`).
    /// Controllers bound to a v1 hierarchy are not available in cgroup2.
    Hybrid,
    /// No cgroup filesystem mounted (or it could not be read).
    None,
}

/// The cgroup layout seen by this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupInfo {
    /// How cgroups are mounted.
    pub mode: CgroupMode,
    /// The controllers in [`CONTROLLERS`] that this process can see, in that order.
    /// A controller that is not listed is not usable here.
    pub controllers: Vec<ControllerInfo>,
    /// Where the cgroup2 hierarchy is mounted, if anywhere.
    pub unified_mount: Option<PathBuf>,
}

/// One controller and this process's cgroup in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControllerInfo {
    /// `memory`, `pids` or `cpu`.
    pub name: String,
    /// 1 for a legacy hierarchy, 2 for the unified one.
    pub version: u8,
    /// Absolute directory of this process's cgroup for this controller.
    pub own_cgroup: PathBuf,
    /// Whether this user may create a child cgroup there (write access to the
    /// directory). Nothing is created to find out.
    pub writable: bool,
    /// The hierarchy is mounted read-only here (`ro` in mountinfo, or EROFS):
    /// no permission fixes that, only a writable mount does.
    pub read_only: bool,
}

impl CgroupInfo {
    /// The entry for a controller, if this process can see it.
    pub fn controller(&self, name: &str) -> Option<&ControllerInfo> {
        self.controllers.iter().find(|c| c.name == name)
    }
}
