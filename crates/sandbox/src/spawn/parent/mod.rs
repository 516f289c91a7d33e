//! P0: the supervisor's side of a run, in the order it happens: the plan
//! decided once ([`decide`]), the cgroup ([`cgroup`]), the start
//! ([`start`]: the broker and net process ([`broker`]), clone, id maps,
//! release, see [`launch`] and [`release`]), the supervision until every process of the
//! run is gone ([`supervise`]), and the outcome ([`outcome`]), with the
//! [`janitor`] and the [`sweep`] for what a run leaves behind.

mod broker;
mod cgroup;
mod decide;
mod janitor;
mod launch;
mod notes;
mod outcome;
mod release;
mod review;
mod running;
mod start;
mod supervise;
mod sweep;

use nix::errno::Errno;

pub use outcome::{CgroupUse, LimitHit, Outcome};
pub use running::Running;
pub use start::start;
pub use supervise::{Driver, Steer, Turn, TIMEOUT_GRACE};

use crate::spawn::measure::View;
use crate::spawn::prepare::{Prepared, StartInputs};
use crate::spawn::SpawnError;

pub(super) fn sys(op: impl Into<String>) -> impl FnOnce(Errno) -> SpawnError {
    let op = op.into();
    move |source| SpawnError::Sys { op, source }
}

/// Run a prepared sandbox to completion.
pub fn run(prepared: &mut Prepared, inputs: StartInputs) -> Result<Outcome, SpawnError> {
    run_measured(prepared, inputs).0
}

/// [`run`], with the payload's own view of its confinement when it got as
/// far as reading it (also when the run failed afterwards, at exec).
pub fn run_measured(
    prepared: &mut Prepared,
    inputs: StartInputs,
) -> (Result<Outcome, SpawnError>, Option<View>) {
    match start(prepared, inputs) {
        Ok(running) => running.wait_measured(prepared, None),
        Err(err) => (Err(err), None),
    }
}
