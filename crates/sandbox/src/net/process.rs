//! The run's net process, seen from the supervisor: the proxy and
//! `net.http`'s client run outside the sandbox in a program of their own,
//! `sandbox-net` (crates/sandbox-net), which this module starts.
//!
//! A process of its own because the supervisor must stay single-threaded
//! (it clones the sandbox and nested runs) while the proxy needs a runtime
//! and threads, and because it parses everything the sandbox sends to the
//! proxy: a fault there ends that process, not the supervisor, whose
//! broker then refuses what would have needed it. A program of its own,
//! executed rather than forked, so that it holds nothing of the
//! supervisor's memory (the run's secrets, its other state) and so that
//! the supervisor links no HTTP client, TLS or async runtime. It dies with
//! the supervisor (parent-death signal) and when its link closes.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::{FcntlArg, FdFlag};
use nix::sys::signal::Signal;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;

use super::link::{NetStart, SupervisorEnd, LINK_FD, LISTENER_SOURCE_FD};

/// The net process's executable.
pub const PROGRAM: &str = "sandbox-net";

/// What of the supervisor's environment the net process gets: where the
/// system's TLS roots are (rustls-native-certs reads these two) and how
/// the C library resolves names. Nothing else: a secret offered to the run
/// from an environment variable (`--secret NAME=env:VAR`) stays in the
/// supervisor, as does the rest of the caller's environment.
pub const PASSED_ENVIRONMENT: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    "HOSTALIASES",
];

/// Why the net process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum NetProcessError {
    /// The executable is not where the installation keeps it.
    #[error("the run's network helper: {0}")]
    NotInstalled(#[from] crate::installed::NotInstalled),
    /// The executable's path cannot be passed to execve.
    #[error("the run's network helper's path {} holds a NUL byte", .0.display())]
    ProgramPath(std::path::PathBuf),
    /// A run's payload could have replaced the program by now (see
    /// `crate::broker::assemble::net_program_writable`).
    #[error("{0}")]
    Replaceable(String),
    /// The link's socket pair.
    #[error("creating the net process's link: {0}")]
    Link(#[source] nix::Error),
    /// The fork.
    #[error("forking the net process: {0}")]
    Fork(#[source] crate::sys::fork::ForkError),
    /// The program ended (or could not be executed) before it said it was
    /// ready: a run that needs it does not go on without it.
    #[error(
        "the run's network helper {} {how}; it must be the \
         sandbox-net built with this sandbox: reinstall the sandbox package, or run \
         `cargo build --release`, which builds every executable",
        program.display()
    )]
    NotReady {
        /// The program executed.
        program: std::path::PathBuf,
        /// How it ended.
        how: String,
    },
}

/// The status the forked child exits with when `execve` fails.
const EXEC_FAILED: i32 = 127;

/// The longest first line taken from the net process: it is only
/// [`FromNet::Ready`](super::link::FromNet::Ready).
const MAX_READY_LINE: usize = 1024;

/// A started net process, seen from the supervisor.
#[derive(Debug)]
pub struct NetProcess {
    /// Its pid (killed and reaped on drop).
    pub pid: Pid,
    /// The supervisor's end of the link.
    pub link: SupervisorEnd,
}

impl Drop for NetProcess {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// Start the net process for the allowlist `allow` (entries as a profile
/// writes them) with the names `pins` fixes. `listener_from` is the socket
/// on which init hands over the proxy's listening socket (allowlist mode);
/// without it, the process serves `net.http` alone. `cgroup_tasks`: the
/// run's cgroup v1 `tasks` files, which the child writes `0` into before
/// it executes, still single-threaded (see
/// [`RunCgroup::open_tasks_for_self_move`](crate::cgroup::RunCgroup::open_tasks_for_self_move));
/// whether it got there is the caller's to check.
pub fn start(
    allow: &[String],
    pins: &BTreeMap<String, std::net::IpAddr>,
    syscalls: Option<&crate::seccomp::policy::SyscallPolicy>,
    listener_from: Option<OwnedFd>,
    cgroup_tasks: Vec<OwnedFd>,
) -> Result<NetProcess, NetProcessError> {
    let path = crate::installed::find(PROGRAM)?;
    // Made before the fork: the child only executes.
    let program = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| NetProcessError::ProgramPath(path.clone()))?;
    let argv = [CString::from(c"sandbox-net")];
    let environment: Vec<CString> = PASSED_ENVIRONMENT
        .iter()
        .filter_map(|name| {
            let value = std::env::var_os(name)?;
            let mut entry = name.as_bytes().to_vec();
            entry.push(b'=');
            entry.extend_from_slice(value.as_bytes());
            CString::new(entry).ok()
        })
        .collect();
    let (supervisor_end, net_end) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(NetProcessError::Link)?;
    let supervisor = nix::unistd::getpid();
    let start = NetStart {
        supervisor: supervisor.as_raw(),
        allow: allow.to_vec(),
        pins: pins.clone(),
        syscalls: syscalls.cloned(),
        proxy: listener_from.is_some(),
    };
    let mut keep = vec![net_end];
    keep.extend(listener_from);
    let placed = keep.len();
    keep.extend(cgroup_tasks);
    // The link lands at LINK_FD and the listener's source at
    // LISTENER_SOURCE_FD: fork_keeping_only places what it keeps from 3 up.
    const _: () = assert!(LINK_FD == 3 && LISTENER_SOURCE_FD == 4);
    let pid = crate::sys::fork::fork_keeping_only(keep, move |mut kept| {
        for tasks in kept.split_off(placed) {
            // A failure leaves it where it is, which the caller sees.
            let _ = nix::unistd::write(&tasks, b"0");
        }
        exec_net_process(supervisor, &program, &argv, &environment, &kept)
    })
    .map_err(NetProcessError::Fork)?;
    let mut link = SupervisorEnd::new(supervisor_end);
    link.send_start(&start);
    // A program that could not be executed, or ended at once (another
    // build's, which reads another start), would otherwise leave the run
    // a proxy that refuses every connection and a `net.http` that fails,
    // with nothing saying why. Before its first line it has read nothing
    // but the start the supervisor wrote, so waiting on it is safe.
    let how = match wait_ready(&mut link) {
        FirstLine::Ready => return Ok(NetProcess { pid, link }),
        // It closed its end, which it does only on its way out.
        FirstLine::Closed => ended(pid),
        FirstLine::Other => {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(pid, None);
            "did not answer `ready` first".to_string()
        }
    };
    Err(NetProcessError::NotReady { program: path, how })
}

/// What the net process said first.
enum FirstLine {
    /// [`FromNet::Ready`](super::link::FromNet::Ready).
    Ready,
    /// Nothing: end of file, or reset by its end.
    Closed,
    /// Anything else, or the link failed.
    Other,
}

/// The net process's first line. Writes the rest of the start while it
/// waits (the socket may not have taken all of it at once).
fn wait_ready(link: &mut SupervisorEnd) -> FirstLine {
    use nix::poll::PollFlags;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let mut events = PollFlags::POLLIN;
        if link.wants_output() {
            events |= PollFlags::POLLOUT;
        }
        let mut set = crate::poll_set::PollSet::default();
        let slot = set.add(link.fd(), events);
        if set.wait_for(None).is_err() {
            return FirstLine::Other;
        }
        let ready = set.events(Some(slot));
        drop(set);
        if ready.contains(PollFlags::POLLOUT) {
            link.flush();
        }
        if !ready.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            continue;
        }
        match nix::unistd::read(link.fd(), &mut byte) {
            // ECONNRESET: it ended without reading all of the start.
            Ok(0) | Err(nix::errno::Errno::ECONNRESET) => return FirstLine::Closed,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) if line.len() < MAX_READY_LINE => line.push(byte[0]),
            Ok(_) => return FirstLine::Other,
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(_) => return FirstLine::Other,
        }
    }
    match serde_json::from_slice::<super::link::FromNet>(&line) {
        Ok(super::link::FromNet::Ready) => FirstLine::Ready,
        _ => FirstLine::Other,
    }
}

/// Reap the net process, which is ending; how it ended, for the message.
fn ended(pid: Pid) -> String {
    match nix::sys::wait::waitpid(pid, None) {
        Ok(WaitStatus::Exited(_, EXEC_FAILED)) => "could not be executed (execve failed)".into(),
        Ok(WaitStatus::Exited(_, code)) => format!("exited with status {code} before it was ready"),
        Ok(WaitStatus::Signaled(_, signal, _)) => {
            format!("was killed by {signal} before it was ready")
        }
        Ok(other) => format!("ended before it was ready ({other:?})"),
        Err(errno) => format!("ended before it was ready (waitpid: {errno})"),
    }
}

/// In the forked child: arm the parent-death signal while the supervisor
/// is known to be the parent (it survives the exec), leave the terminal's
/// process group (a ^C is the supervisor's to forward to the run, and the
/// run's connections need this process until the run has ended), and
/// execute the net process with the kept descriptors open across the exec
/// and only `environment`. Returns only on failure, with the status the
/// child exits with.
fn exec_net_process(
    supervisor: Pid,
    program: &CString,
    argv: &[CString],
    environment: &[CString],
    kept: &[OwnedFd],
) -> i32 {
    if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
        || nix::unistd::getppid() != supervisor
    {
        return 1;
    }
    let _ = nix::unistd::setsid();
    for fd in kept {
        if nix::fcntl::fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).is_err() {
            return 1;
        }
    }
    let _ = nix::unistd::execve(program, argv, environment);
    EXEC_FAILED
}
