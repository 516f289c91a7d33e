//! One run from its slot to its end: the launcher starts its supervisor,
//! and the run's task hears the supervisor over the events socket (the
//! caller's to hold, so untrusted) and the launcher's news of it, until
//! both are over.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::{blocking, store_error, Control, QueuedRun, Runs};
use crate::error::ApiError;
use crate::launcher::LauncherEvent;
use crate::store::Outcome;
use crate::verdict::{self, Claim, Observed};
use sandbox::jsonl::{AsyncLines, Frame};
use sandbox::launch::protocol::{
    FromLauncher, FromSupervisor, ToLauncher, ToSupervisor, MAX_MESSAGE,
};

/// How long a run waits for the second of its two ends (events socket
/// closed, supervisor reaped) once the first has come.
pub(super) const LINGER: Duration = Duration::from_secs(5);

/// Past a run's timeout, what its supervisor may still take before root
/// kills it: the supervisor's own SIGTERM-to-SIGKILL grace (2 s) and
/// its tear-down, with room for a loaded machine.
const TIMEOUT_BACKSTOP_SLACK: Duration = Duration::from_secs(10);

impl Runs {
    /// One run from slot to result.
    pub(super) async fn drive(
        self: &Arc<Self>,
        run: QueuedRun,
        mut controls: mpsc::UnboundedReceiver<Control>,
    ) -> Outcome {
        let failed = |state: &'static str, reason: String| Outcome {
            state,
            status: Some(125),
            reason: Some(reason),
            report: None,
            log_records: 0,
            finished_ms: 0,
        };
        let id = run.id.clone();
        let store = self.store.clone();
        let dir = self.run_dir(&id);
        let launcher = self.launcher.clone();
        let output_cap = run.spec.policy.limits.output;
        let timeout = run.spec.policy.limits.timeout;
        let launched = blocking(move || {
            store.set_running(&run.id).map_err(store_error)?;
            let (ours, theirs) = std::os::unix::net::UnixStream::pair()
                .map_err(|err| ApiError::internal(format!("events socket: {err}")))?;
            // The supervisor runs as the caller and may lose any of its
            // descriptors to the caller: it gets pipes the daemon reads
            // and a sealed copy of the caller's own stdin, never a file of
            // root's spool (`relay`).
            let relay_error = |err: crate::relay::RelayError| ApiError::internal(err.to_string());
            let (log_feed, log) =
                crate::relay::log_pipe(&dir.join("log.ndjson"), output_cap).map_err(relay_error)?;
            let mut feeds = vec![log_feed];
            let audit = match &run.spec.audit {
                Some(path) => {
                    let (feed, write) =
                        crate::relay::audit_pipe(path, output_cap).map_err(relay_error)?;
                    feeds.push(feed);
                    Some(write)
                }
                None => None,
            };
            let stdin = match run.spec.stdin {
                true => Some(sealed_copy(&dir.join("stdin"))?),
                false => None,
            };
            let theirs = OwnedFd::from(theirs);
            let mut fds = vec![theirs.as_fd(), log.as_fd()];
            if let Some(stdin) = &stdin {
                fds.push(stdin.as_fd());
            }
            if let Some(audit) = &audit {
                fds.push(audit.as_fd());
            }
            let request = ToLauncher::Spawn {
                run: run.id.clone(),
                spec: Box::new(run.spec),
                warm: run.warm,
            };
            let events = launcher
                .spawn(&request, &fds)
                .map_err(|err| ApiError::internal(err.to_string()))?;
            ours.set_nonblocking(true)
                .map_err(|err| ApiError::internal(format!("events socket: {err}")))?;
            Ok((ours, events, feeds))
        })
        .await;
        let (ours, mut launcher_events, feeds) = match launched {
            Ok(launched) => launched,
            Err(err) => {
                return failed(
                    "failed",
                    format!("the run could not be started: {}", err.message),
                )
            }
        };
        let relays = crate::relay::Relays::start(&id, feeds);
        let outcome = self
            .hear_supervisor(&id, ours, timeout, &mut launcher_events, &mut controls)
            .await;
        // Before the daemon's `end`: nothing of the supervisor's follows it.
        relays.finish(LINGER).await;
        outcome
    }

    /// The run's events socket and the launcher's news of its supervisor,
    /// until both are over; the run's end as [`verdict::judge`] finds it.
    async fn hear_supervisor(
        self: &Arc<Self>,
        id: &str,
        ours: std::os::unix::net::UnixStream,
        timeout: Option<Duration>,
        launcher_events: &mut mpsc::UnboundedReceiver<LauncherEvent>,
        controls: &mut mpsc::UnboundedReceiver<Control>,
    ) -> Outcome {
        let stream = match tokio::net::UnixStream::from_std(ours) {
            Ok(stream) => stream,
            Err(err) => {
                return verdict::judge(
                    None,
                    None,
                    Observed::Refused(format!("events socket: {err}")),
                )
            }
        };
        let (reader, mut writer) = stream.into_split();
        // The supervisor runs as the caller: its lines are bounded like any
        // untrusted peer's (the largest it sends is `finished` with its
        // report); a longer one is skipped without being held.
        let mut lines = AsyncLines::new(reader, MAX_MESSAGE);
        let mut too_large = 0u64;
        let mut claim: Option<Claim> = None;
        let mut started = false;
        let mut observed = Observed::Unknown;
        let mut events_open = true;
        let mut launcher_open = true;
        let mut cancelled: Option<&'static str> = None;
        let mut controls_open = true;
        let mut refused_questions = 0u64;
        // The supervisor (the launcher's word) and when root kills it: a
        // cancel the supervisor does not carry out (the caller stopped or
        // ptraced it) ends it all the same, `cancel_grace` and [`LINGER`]
        // later, and its janitor cleans up as for a killed `sandbox run`.
        let mut supervisor: Option<(i32, Option<u64>)> = None;
        let mut kill_at: Option<tokio::time::Instant> = None;
        // The run's timeout is the supervisor's to enforce, and the
        // supervisor is the caller's to stop: root ends it too, once the
        // timeout, the supervisor's own grace and a cancel's are all over
        // (counted from before the supervisor started, so never first).
        if let Some(timeout) = timeout {
            let backstop = timeout
                .checked_add(TIMEOUT_BACKSTOP_SLACK + self.config.cancel_grace + LINGER)
                .and_then(|after| tokio::time::Instant::now().checked_add(after));
            kill_at = backstop;
        }
        let grace_ms = u64::try_from(self.config.cancel_grace.as_millis()).unwrap_or(u64::MAX);
        let ask_deadline_ms =
            u64::try_from(self.config.ask_deadline.as_millis()).unwrap_or(u64::MAX);
        while events_open || launcher_open {
            tokio::select! {
                read = lines.next_frame(), if events_open => match read {
                    Ok(Some(Frame::TooLarge { bytes })) => {
                        too_large += 1;
                        // Once a run: each is the caller's to repeat.
                        if too_large == 1 {
                            tracing::warn!(run = %id, "ignoring an event of {bytes} bytes (at most {MAX_MESSAGE}) and any more like it");
                        }
                    }
                    Ok(Some(Frame::Line(line))) => {
                        let message = serde_json::from_slice::<FromSupervisor>(&line);
                        match message {
                            // Once: a copy of the socket in the caller's
                            // hands may repeat it, and each is a write.
                            Ok(FromSupervisor::Started { init_pid, init_start }) if !started => {
                                started = true;
                                let store = self.store.clone();
                                let run = id.to_string();
                                let _ = blocking(move || {
                                    store
                                        .set_started(&run, init_pid, init_start, sandbox::clock::unix_ms())
                                        .map_err(store_error)
                                })
                                .await;
                            }
                            Ok(FromSupervisor::Started { .. }) => {}
                            Ok(FromSupervisor::Ask { id: n, caller, action, target, deadline_ms }) => {
                                let kept = self.keep_question(id, n, caller, action, target, verdict::bounded_deadline(deadline_ms, sandbox::clock::unix_ms(), ask_deadline_ms));
                                if !kept {
                                    refused_questions += 1;
                                    if refused_questions == 1 {
                                        tracing::warn!(run = %id, "the run asked more than {} open questions; the excess is refused", verdict::MAX_OPEN_QUESTIONS);
                                    }
                                }
                            }
                            // The first: what comes later on a copy of the
                            // socket is not the supervisor's last word.
                            Ok(FromSupervisor::Finished { status, report, error }) if claim.is_none() => {
                                claim = Some(Claim { status, report, error });
                            }
                            Ok(FromSupervisor::Finished { .. }) => {}
                            Err(err) => tracing::debug!("run {id}: ignoring a malformed event: {err}"),
                        }
                    }
                    Ok(None) | Err(_) => events_open = false,
                },
                event = launcher_events.recv(), if launcher_open => match event {
                    Some(LauncherEvent::Message(FromLauncher::Started { pid, start, .. })) => {
                        supervisor = Some((pid, start));
                        let store = self.store.clone();
                        let run = id.to_string();
                        let _ = blocking(move || {
                            store.set_supervisor(&run, pid, start).map_err(store_error)
                        })
                        .await;
                    }
                    Some(LauncherEvent::Message(FromLauncher::Refused { error, .. })) => {
                        observed = Observed::Refused(error);
                        launcher_open = false;
                    }
                    Some(LauncherEvent::Message(FromLauncher::Exited { code, signal, .. })) => {
                        observed = Observed::Reaped { code, signal };
                        launcher_open = false;
                    }
                    Some(LauncherEvent::Message(FromLauncher::WarmReady { .. } | FromLauncher::WarmDiscarded { .. })) => {}
                    Some(LauncherEvent::Gone) | None => launcher_open = false,
                },
                // One side ended and the other has not followed: a closed
                // events socket is normally reported by the launcher at once,
                // and a reaped supervisor's socket closes at once unless a
                // copy leaked (or the caller keeps one). Neither may hold the
                // run's slot for ever.
                _ = tokio::time::sleep(LINGER), if events_open != launcher_open => {
                    events_open = false;
                    launcher_open = false;
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)), if kill_at.is_some() && launcher_open => {
                    kill_at = None;
                    if let Some((pid, start)) = supervisor {
                        if kill_if_same(pid, start) {
                            let missed = if cancelled.is_some() { "the cancel" } else { "its timeout" };
                            tracing::warn!(run = %id, pid, "the run's supervisor did not end on {missed}; killed");
                        }
                    }
                }
                control = controls.recv(), if controls_open => {
                    let message = match control {
                        Some(Control::Cancel(reason)) => {
                            cancelled = Some(reason);
                            let after_cancel =
                                tokio::time::Instant::now() + self.config.cancel_grace + LINGER;
                            kill_at = Some(kill_at.map_or(after_cancel, |at| at.min(after_cancel)));
                            ToSupervisor::Cancel { grace_ms }
                        }
                        Some(Control::Answer(n, answer)) => ToSupervisor::Answer { id: n, answer },
                        None => {
                            controls_open = false;
                            continue;
                        }
                    };
                    if events_open {
                        let mut line = serde_json::to_vec(&message).unwrap_or_default();
                        line.push(b'\n');
                        if writer.write_all(&line).await.is_err() {
                            events_open = false;
                        }
                    }
                }
            }
        }
        if refused_questions > 0 {
            tracing::warn!(run = %id, refused = refused_questions, "questions refused past the run's bound");
        }
        verdict::judge(cancelled, claim, observed)
    }
}

/// The submitted stdin as a sealed memfd: the caller's own bytes, which
/// the caller (holding the supervisor's descriptors) may read but neither
/// change nor use to reach the spool file they came from.
fn sealed_copy(path: &Path) -> Result<OwnedFd, ApiError> {
    use std::io::{Seek, Write};
    let fail = |err: std::io::Error| {
        ApiError::internal(format!("the run's stdin {}: {err}", path.display()))
    };
    let bytes = std::fs::read(path).map_err(fail)?;
    let memfd = nix::sys::memfd::memfd_create(
        c"sandbox-stdin",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
    )
    .map_err(|errno| fail(errno.into()))?;
    let mut file = std::fs::File::from(memfd);
    file.write_all(&bytes).map_err(fail)?;
    file.rewind().map_err(fail)?;
    use nix::fcntl::SealFlag;
    nix::fcntl::fcntl(
        &file,
        nix::fcntl::FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_WRITE
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_SEAL,
        ),
    )
    .map_err(|errno| fail(errno.into()))?;
    Ok(OwnedFd::from(file))
}

/// A process's start time in clock ticks since boot (`/proc/PID/stat`,
/// field 22): with the pid it names one process, where a pid alone may
/// have been reused by the time it is read again.
pub use sandbox::launch::protocol::process_start_time as proc_start_time;

/// Whether `pid` is a process whose files in /proc belong to `uid` (its
/// owner, while it is dumpable, as a sandbox's init of that caller is).
pub fn owned_by(pid: Option<i32>, uid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    pid.filter(|pid| *pid > 1)
        .and_then(|pid| std::fs::metadata(format!("/proc/{pid}")).ok())
        .is_some_and(|meta| meta.uid() == uid)
}

/// Kill a process recorded by an earlier daemon if it is still the same
/// process (same start time).
pub fn kill_if_same(pid: i32, start: Option<u64>) -> bool {
    let Some(start) = start else { return false };
    if pid <= 1 || proc_start_time(pid) != Some(start) {
        return false;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_names_one_process() {
        let own = std::process::id() as i32;
        let start = proc_start_time(own).unwrap();
        assert!(start > 0);
        assert_eq!(proc_start_time(own), Some(start));
        assert!(
            !kill_if_same(own, Some(start + 1)),
            "a different start time is another process"
        );
        assert!(!kill_if_same(own, None));
        let mut child = std::process::Command::new("/bin/sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(owned_by(Some(pid), 0));
        assert!(
            !owned_by(Some(pid), 61_234),
            "root's process is not a caller's init"
        );
        assert!(kill_if_same(pid, proc_start_time(pid)));
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
    }
}
