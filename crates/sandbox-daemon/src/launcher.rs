//! The daemon's side of the launcher (`docs/src/launcher.md`): the process is
//! started before the runtime exists, and afterwards only this module talks
//! to it, over one `SOCK_SEQPACKET` socket.
//!
//! Sending blocks (a spawn request may be most of a megabyte): callers are
//! on `spawn_blocking`. One plain thread receives, since `wire::receive`
//! blocks too, and routes each message to the task of the run it names.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use tokio::sync::mpsc;

use sandbox::launch::protocol::{FromLauncher, ToLauncher};
use sandbox::launch::wire::{self, WireError};

/// What a run's task hears about its supervisor from the launcher.
#[derive(Debug, Clone, PartialEq)]
pub enum LauncherEvent {
    /// A message about this run.
    Message(FromLauncher),
    /// The launcher is gone; nothing more will come about this run.
    Gone,
}

/// Why the launcher could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    /// A system call on the way failed.
    #[error("starting the launcher: {step}: {source}")]
    Start {
        /// The step.
        step: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The launcher is not running.
    #[error("the launcher is not running")]
    Down,
    /// The request could not be sent.
    #[error("sending the run to the launcher: {0}")]
    Send(#[source] WireError),
}

/// A running launcher process and the daemon's end of its socket.
pub struct LauncherProcess {
    /// The daemon's end.
    pub socket: OwnedFd,
    /// The process (`None` for one the daemon did not start, in tests).
    pub child: Option<Child>,
}

/// Environment of the launcher: nothing of the daemon's, since every run
/// descends from it.
const LAUNCHER_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// Fork and exec `exe __launch --fd N`. Call it before any thread exists
/// (the first time): the child end is inheritable while `spawn` runs, and
/// any other fork in that window would inherit it too.
pub fn start(exe: &std::path::Path) -> Result<LauncherProcess, LauncherError> {
    let io = |step| {
        move |errno: nix::errno::Errno| LauncherError::Start {
            step,
            source: std::io::Error::from(errno),
        }
    };
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io("socketpair"))?;
    // Above the numbers that mean something in a run (0-2 stdio, 3 the
    // broker): the launcher's forks start from its descriptor table.
    let theirs = sandbox::os::dup_at_or_above(theirs.as_fd(), 10).map_err(io("F_DUPFD_CLOEXEC"))?;
    fcntl(&theirs, FcntlArg::F_SETFD(FdFlag::empty())).map_err(io("clearing close-on-exec"))?;
    let child = std::process::Command::new(exe)
        .arg("__launch")
        .arg("--fd")
        .arg(theirs.as_raw_fd().to_string())
        .env_clear()
        .env("PATH", LAUNCHER_PATH)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|source| LauncherError::Start {
            step: "exec",
            source,
        })?;
    drop(theirs);
    Ok(LauncherProcess {
        socket: ours,
        child: Some(child),
    })
}

type Routes = HashMap<String, mpsc::UnboundedSender<LauncherEvent>>;

/// How a dead launcher is replaced (once).
pub type Restart = Box<dyn Fn() -> Result<LauncherProcess, LauncherError> + Send + Sync>;

/// The daemon's handle on its launcher.
pub struct Launcher {
    socket: Mutex<Option<Arc<OwnedFd>>>,
    /// Where news of warm sandboxes goes (the run manager's pool).
    pool: Mutex<Option<mpsc::UnboundedSender<FromLauncher>>>,
    routes: Arc<Mutex<Routes>>,
    up: AtomicBool,
    restart: Mutex<Option<Restart>>,
    /// True once the serving thread is done with every launcher.
    ended: Arc<(Mutex<bool>, std::sync::Condvar)>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Launcher {
    /// Take over a started launcher; `restart` replaces it once if it dies.
    pub fn new(process: LauncherProcess, restart: Option<Restart>) -> Arc<Launcher> {
        let launcher = Arc::new(Launcher {
            socket: Mutex::new(None),
            pool: Mutex::new(None),
            routes: Arc::new(Mutex::new(HashMap::new())),
            up: AtomicBool::new(false),
            restart: Mutex::new(restart),
            ended: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
        });
        launcher.adopt(process);
        launcher
    }

    /// Make the launcher the one runs are sent to.
    fn install(&self, process: LauncherProcess) -> (Arc<OwnedFd>, Option<Child>) {
        let socket = Arc::new(process.socket);
        *lock(&self.socket) = Some(socket.clone());
        self.up.store(true, Ordering::SeqCst);
        (socket, process.child)
    }

    fn adopt(self: &Arc<Self>, process: LauncherProcess) {
        let (socket, child) = self.install(process);
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("launcher-rx".into())
            .spawn(move || this.serve(socket, child));
        if let Err(err) = spawned {
            tracing::warn!("no thread to hear the launcher: {err}");
            self.up.store(false, Ordering::SeqCst);
            self.mark_ended();
        }
    }

    fn mark_ended(&self) {
        let (ended, wake) = &*self.ended;
        *lock(ended) = true;
        wake.notify_all();
    }

    /// The daemon stops: the launcher is not restarted, ends every
    /// supervisor (warm ones too), waits for their janitors, removes their
    /// delegated cgroups and exits; this waits for that, at most `wait`.
    /// Blocks.
    pub fn stop(&self, wait: std::time::Duration) {
        lock(&self.restart).take();
        if self.send(&ToLauncher::Stop).is_err() {
            return;
        }
        let (ended, wake) = &*self.ended;
        let guard = lock(ended);
        let (_guard, timeout) = wake
            .wait_timeout_while(guard, wait, |ended| !*ended)
            .unwrap_or_else(PoisonError::into_inner);
        if timeout.timed_out() {
            tracing::warn!(
                "the launcher did not end within {} s of the stop",
                wait.as_secs()
            );
        }
    }

    /// Hear one launcher until it dies, then replace it from this same
    /// thread: the launcher's parent-death signal fires when the thread
    /// that forked it ends, so a launcher must be forked by a thread that
    /// lives as long as it does.
    fn serve(self: &Arc<Self>, socket: Arc<OwnedFd>, mut child: Option<Child>) {
        self.receive_until_closed(socket.as_fd());
        if let Some(child) = child.as_mut() {
            let _ = child.kill();
            let status = child.wait();
            tracing::error!("the launcher ended ({status:?})");
        }
        self.up.store(false, Ordering::SeqCst);
        *lock(&self.socket) = None;
        for (_, route) in lock(&self.routes).drain() {
            let _ = route.send(LauncherEvent::Gone);
        }
        let restart = lock(&self.restart).take();
        if let Some(restart) = restart {
            match restart() {
                Ok(process) => {
                    tracing::info!("the launcher was restarted");
                    let (socket, child) = self.install(process);
                    self.serve(socket, child);
                }
                Err(err) => tracing::error!("restarting the launcher failed: {err}"),
            }
        }
        self.mark_ended();
    }

    fn receive_until_closed(&self, socket: BorrowedFd<'_>) {
        loop {
            match wire::receive::<FromLauncher>(socket) {
                Ok((
                    message @ (FromLauncher::WarmReady { .. } | FromLauncher::WarmDiscarded { .. }),
                    _,
                )) => {
                    if let Some(pool) = lock(&self.pool).as_ref() {
                        let _ = pool.send(message);
                    }
                }
                Ok((message, _fds)) => {
                    let run = match &message {
                        FromLauncher::Started { run, .. }
                        | FromLauncher::Refused { run, .. }
                        | FromLauncher::Exited { run, .. } => run.clone(),
                        FromLauncher::WarmReady { .. } | FromLauncher::WarmDiscarded { .. } => {
                            continue
                        }
                    };
                    let last = matches!(
                        message,
                        FromLauncher::Exited { .. } | FromLauncher::Refused { .. }
                    );
                    let mut routes = lock(&self.routes);
                    if let Some(route) = routes.get(&run) {
                        let _ = route.send(LauncherEvent::Message(message));
                    }
                    if last {
                        routes.remove(&run);
                    }
                }
                Err(WireError::Malformed(message)) => {
                    tracing::warn!("ignoring a malformed launcher message: {message}");
                }
                Err(err) => {
                    tracing::warn!("the launcher socket closed: {err}");
                    return;
                }
            }
        }
    }

    /// Whether runs can be started.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    /// Send a spawn request with its descriptors; the launcher's messages
    /// about the run come on the returned channel. Blocks.
    pub fn spawn(
        &self,
        request: &ToLauncher,
        fds: &[BorrowedFd<'_>],
    ) -> Result<mpsc::UnboundedReceiver<LauncherEvent>, LauncherError> {
        let ToLauncher::Spawn { run, .. } = request else {
            return Err(LauncherError::Send(WireError::Malformed(
                "only a spawn request starts a run".into(),
            )));
        };
        let socket = lock(&self.socket).clone().ok_or(LauncherError::Down)?;
        let (sender, receiver) = mpsc::unbounded_channel();
        lock(&self.routes).insert(run.clone(), sender);
        if let Err(err) = wire::send(socket.as_fd(), request, fds) {
            lock(&self.routes).remove(run);
            return Err(match err {
                WireError::Closed => LauncherError::Down,
                other => LauncherError::Send(other),
            });
        }
        Ok(receiver)
    }

    /// Where [`FromLauncher::WarmReady`] and [`FromLauncher::WarmDiscarded`]
    /// go from now on.
    pub fn pool_events(&self) -> mpsc::UnboundedReceiver<FromLauncher> {
        let (sender, receiver) = mpsc::unbounded_channel();
        *lock(&self.pool) = Some(sender);
        receiver
    }

    /// Send a pool request (`warm`, `drain`). Blocks.
    pub fn send(&self, request: &ToLauncher) -> Result<(), LauncherError> {
        let socket = lock(&self.socket).clone().ok_or(LauncherError::Down)?;
        wire::send(socket.as_fd(), request, &[]).map_err(|err| match err {
            WireError::Closed => LauncherError::Down,
            other => LauncherError::Send(other),
        })
    }
}
