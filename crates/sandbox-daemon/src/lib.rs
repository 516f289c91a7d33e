//! `sandbox daemon`: sandboxes for other processes of the host, over an
//! HTTP/JSON API on a Unix socket (`docs/src/daemon.md`).
//!
//! Start-up order matters and is fixed in [`run`]: everything that forks
//! or touches inherited descriptors (socket activation, the launcher, the
//! probes) happens while the process still has one thread; only then is
//! the tokio runtime built. The daemon itself never forks a sandbox: its
//! launcher (`docs/src/launcher.md`) does, from a process with one thread.
#![deny(missing_docs)]

// The fuzz targets' entry points (fuzz/), not part of the documented API.
#[doc(hidden)]
pub mod fuzzing;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub mod api;
pub mod budget;
pub mod config;
pub mod error;
pub mod journal;
pub mod launcher;
pub mod listener;
pub mod log;
pub mod quota;
pub mod relay;
pub mod resolve;
pub mod review;
pub mod runs;
pub mod skills;
pub mod store;
pub mod verdict;

use config::{Config, ConfigError};
use launcher::{Launcher, LauncherError};
use store::{Store, StoreError};

/// Command-line settings (they win over the file).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--config FILE`.
    pub config: Option<PathBuf>,
    /// `--socket PATH`.
    pub socket: Option<PathBuf>,
    /// `--state-dir DIR`.
    pub state_dir: Option<PathBuf>,
    /// `-v`: debug events in the daemon's log too.
    pub verbose: bool,
}

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A path default could not be found.
    #[error("{what}: {fix}")]
    NoDefault {
        /// What has no default.
        what: &'static str,
        /// What to pass instead.
        fix: &'static str,
    },
    /// The socket.
    #[error("the socket {path}: {step}: {source}")]
    Socket {
        /// Its path.
        path: PathBuf,
        /// What failed.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another daemon is there.
    #[error("the socket {path} is in use by a running daemon (something answered on it); stop that daemon or pass another --socket")]
    SocketLive {
        /// Its path.
        path: PathBuf,
    },
    /// Others can create names beside the socket.
    #[error(
        "the socket's directory {dir} can be written by others (mode {mode:o}, or owned by \
         another user): any user could \
         plant names there, among them the callers' skill state kept beside the socket; pass a \
         --socket in a directory only root can write, e.g. /run/sandbox/sandbox.sock"
    )]
    SocketDirShared {
        /// The directory.
        dir: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The path is something else than a socket.
    #[error("{path} exists and is not a socket; remove it or pass another --socket")]
    NotASocket {
        /// Its path.
        path: PathBuf,
    },
    /// Systemd's socket.
    #[error("the socket from systemd (LISTEN_FDS): {step}: {source}")]
    Activation {
        /// What failed.
        step: &'static str,
        /// Why.
        #[source]
        source: nix::errno::Errno,
    },
    /// The state directory.
    #[error("the state directory {path}: {source}")]
    StateDir {
        /// Its path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The launcher.
    #[error(transparent)]
    Launcher(#[from] LauncherError),
    /// The runtime or the server.
    #[error("{step}: {source}")]
    Runtime {
        /// What failed.
        step: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

fn home_dir(var: &str, below_home: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(below_home))
        })
}

fn load_config(options: &Options) -> Result<Config, DaemonError> {
    if let Some(path) = &options.config {
        return Ok(Config::load(path)?);
    }
    let default = if is_root() {
        Some(PathBuf::from("/etc/sandbox/daemon.toml"))
    } else {
        home_dir("XDG_CONFIG_HOME", ".config").map(|dir| dir.join("sandbox/daemon.toml"))
    };
    match default {
        Some(path) if path.exists() => Ok(Config::load(&path)?),
        _ => Ok(Config::default_for(nix::unistd::geteuid().as_raw())),
    }
}

/// Take the socket systemd passed (`LISTEN_FDS=1` for this pid), moved
/// off descriptor 3 (the broker's number inside a sandbox) to one above it
/// with close-on-exec, and the `LISTEN_*` variables removed so nothing
/// started later believes it was activated.
fn take_activated_socket() -> Result<Option<std::os::unix::net::UnixListener>, DaemonError> {
    let pid_matches = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|pid| pid.parse::<u32>().ok())
        == Some(std::process::id());
    let count = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok());
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    if !pid_matches || count.unwrap_or(0) == 0 {
        return Ok(None);
    }
    let activation = |step| move |source| DaemonError::Activation { step, source };
    let inherited = sandbox::os::adopt_inherited_socket(3).map_err(activation("descriptor 3"))?;
    let moved = sandbox::os::dup_at_or_above(std::os::fd::AsFd::as_fd(&inherited), 10)
        .map_err(activation("F_DUPFD_CLOEXEC"))?;
    drop(inherited);
    Ok(Some(std::os::unix::net::UnixListener::from(moved)))
}

fn socket_path(options: &Options, config: &Config) -> Result<PathBuf, DaemonError> {
    if let Some(path) = options.socket.clone().or_else(|| config.socket.clone()) {
        return Ok(path);
    }
    if is_root() {
        return Ok(PathBuf::from("/run/sandbox/sandbox.sock"));
    }
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => Ok(dir.join("sandbox.sock")),
        _ => Err(DaemonError::NoDefault {
            what: "no socket path (XDG_RUNTIME_DIR is not set)",
            fix: "pass --socket PATH or set [daemon] socket",
        }),
    }
}

/// Bind the socket with its mode from the start: the umask is set so the
/// file is created with exactly `mode`, so there is no moment at which it
/// is wider. A stale socket (nothing answers) is replaced; a live one or
/// another kind of file is not.
fn bind_socket(
    path: &Path,
    config: &Config,
) -> Result<std::os::unix::net::UnixListener, DaemonError> {
    let fail = |step| {
        let path = path.to_path_buf();
        move |source| DaemonError::Socket { path, step, source }
    };
    if path == Path::new("/run/sandbox/sandbox.sock") && !Path::new("/run/sandbox").exists() {
        std::fs::DirBuilder::new()
            .mode(0o755)
            .create("/run/sandbox")
            .map_err(fail("creating /run/sandbox"))?;
    }
    // Sticky /tmp included: the sticky bit stops others removing names,
    // not creating them first.
    let dir = path.parent().unwrap_or(Path::new("/"));
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if let Ok(meta) = std::fs::metadata(dir) {
        use std::os::unix::fs::MetadataExt;
        let mode = meta.mode() & 0o7777;
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if mode & 0o022 != 0 || !owner_ok {
            return Err(DaemonError::SocketDirShared {
                dir: dir.to_path_buf(),
                mode,
            });
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(DaemonError::NotASocket { path: path.into() });
            }
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(DaemonError::SocketLive { path: path.into() }),
                Err(_) => std::fs::remove_file(path).map_err(fail("removing the stale socket"))?,
            }
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(fail("stat")(err)),
    }
    let mode = config.socket_mode;
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(!mode & 0o777));
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(fail("bind"))?;
    if let Some((_, gid)) = &config.socket_group {
        std::os::unix::fs::chown(path, None, Some(*gid)).map_err(fail("chown to socket_group"))?;
    }
    // The umask cannot add bits (a mode such as 0666 under umask 022).
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(fail("chmod to socket_mode"))?;
    Ok(listener)
}

fn state_dir(options: &Options, config: &Config) -> Result<PathBuf, DaemonError> {
    let dir = match options
        .state_dir
        .clone()
        .or_else(|| config.state_dir.clone())
    {
        Some(dir) => dir,
        None if is_root() => PathBuf::from("/var/lib/sandbox"),
        None => home_dir("XDG_STATE_HOME", ".local/state")
            .map(|dir| dir.join("sandbox/daemon"))
            .ok_or(DaemonError::NoDefault {
                what: "no state directory (neither XDG_STATE_HOME nor HOME is set)",
                fix: "pass --state-dir DIR or set [daemon] state_dir",
            })?,
    };
    let fail = |source| DaemonError::StateDir {
        path: dir.clone(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir.join("spool"))
        .map_err(fail)?;
    // The spool holds every caller's output: only the daemon's user.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    // Absolute: spool paths travel to supervisors that run elsewhere.
    std::fs::canonicalize(&dir).map_err(fail)
}

/// Runs a previous daemon left in flight are lost: what survived of them
/// is killed (only if the pid is still the same process) and their logs
/// say why.
fn recover(store: &Store, spool: &Path) -> Result<(), DaemonError> {
    for run in store.recover(sandbox::clock::unix_ms())? {
        // The sandbox's init pid came from the supervisor, which is the
        // caller's to speak for: only a process of the run's caller is
        // killed by it, never one of root's or another user's the caller
        // named. The supervisor's pid is the launcher's (root's) word.
        if let (Some(pid), true) = (run.init_pid, runs::owned_by(run.init_pid, run.uid)) {
            runs::kill_if_same(pid, run.init_start);
        }
        if let Some(pid) = run.supervisor_pid {
            runs::kill_if_same(pid, run.supervisor_start);
        }
        let reason = format!("the daemon stopped while the run was {}", run.state);
        tracing::warn!(run = %run.id, "run lost: {reason}");
        if runs::is_run_id(&run.id) {
            let log = spool.join(&run.id).join("log.ndjson");
            if let Err(err) = log::append_lost(&log, &reason, sandbox::clock::unix_ms()) {
                tracing::warn!("run {}: appending to its log: {err}", run.id);
            }
        }
    }
    Ok(())
}

fn prune(store: &Store, spool: &Path, config: &Config) {
    let keep_for = u64::try_from(config.keep_for.as_millis()).unwrap_or(u64::MAX);
    match store.prune(sandbox::clock::unix_ms(), config.keep_runs, keep_for) {
        Ok(ids) => {
            for id in ids.iter().filter(|id| runs::is_run_id(id)) {
                let _ = std::fs::remove_dir_all(spool.join(id));
            }
        }
        Err(err) => tracing::warn!("pruning old runs: {err}"),
    }
}

/// Tell systemd the daemon is ready (`Type=notify`): one datagram to
/// `$NOTIFY_SOCKET` (a path, or an abstract name written with `@`).
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = target.as_bytes();
    let address = match bytes.strip_prefix(b"@") {
        Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name),
        None => std::os::unix::net::SocketAddr::from_pathname(Path::new(&target)),
    };
    let sent = std::os::unix::net::UnixDatagram::unbound()
        .and_then(|socket| address.and_then(|addr| socket.send_to_addr(b"READY=1", &addr)));
    if let Err(err) = sent {
        tracing::warn!("telling systemd it is ready: {err}");
    }
}

/// How long open requests (event streams, `wait` submissions, skill
/// calls) may take to finish once a stopping daemon closed its listener.
const DRAIN: Duration = Duration::from_secs(5);

/// How long a stopping daemon waits for its launcher to end its
/// supervisors and remove their cgroups (its own bound is 15 s).
const LAUNCHER_STOP: Duration = Duration::from_secs(20);

/// How often old runs are pruned while the daemon runs.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Start the daemon and serve until SIGTERM or SIGINT.
pub fn run(options: Options) -> Result<(), DaemonError> {
    journal::init(options.verbose);
    // With one thread, in this order: nothing below may run after a thread
    // or the runtime exists.
    let mut config = load_config(&options)?;
    let activated = take_activated_socket()?;
    // Whatever the daemon's own parent left open (a shell's, a CI agent's)
    // must not reach the launcher, the supervisors or `serve`.
    if let Err(err) = sandbox::os::cloexec_from(3) {
        tracing::warn!("inherited descriptors stay open in children: close_range: {err}");
    }
    let exe = PathBuf::from("/proc/self/exe");
    let first = launcher::start(&exe)?;
    let (listener, owned_path) = match activated {
        Some(listener) => (listener, None),
        None => {
            let path = socket_path(&options, &config)?;
            (bind_socket(&path, &config)?, Some(path))
        }
    };
    let state = state_dir(&options, &config)?;
    let socket_shown = match &owned_path {
        Some(path) => path.display().to_string(),
        None => "the socket systemd passed".to_string(),
    };
    let state_shown = state.display().to_string();
    // Beside the socket, which callers reach; the state directory is the
    // daemon's alone.
    let skills_state = socket_path(&options, &config)
        .ok()
        .and_then(|socket| socket.parent().map(|dir| dir.join("skills")))
        .unwrap_or_else(|| state.join("skills"));
    // Compared with canonical project paths: a state directory or socket
    // reached through a link must still be recognised.
    let canonical =
        |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    config.guarded.push(canonical(&state));
    if let Some(path) = &owned_path {
        config.guarded.push(canonical(path));
    }
    // The socket directory holds the callers' skill state.
    config.guarded.push(canonical(&skills_state));
    // And their review runs' changes, which their supervisors write.
    let review_state = skills_state
        .parent()
        .map_or_else(|| state.join("review"), |dir| dir.join("review"));
    config.guarded.push(canonical(&review_state));
    let config = Arc::new(config);
    let spool = state.join("spool");
    let store = Arc::new(Store::open(&state.join("sandbox.db"))?);
    recover(&store, &spool)?;
    prune(&store, &spool, &config);
    let doctor = doctor_verdict(&exe);

    // Connections are capped per uid (`listener`), but the daemon's own
    // budget is the soft limit: take the hard one.
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, hard, hard);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .thread_keep_alive(Duration::from_secs(5))
        .enable_all()
        .build()
        .map_err(|source| DaemonError::Runtime {
            step: "building the runtime",
            source,
        })?;
    let result = runtime.block_on(async move {
        let restart: launcher::Restart = Box::new(move || launcher::start(&exe));
        let launcher = Launcher::new(first, Some(restart));
        let runs = runs::Runs::new(
            config.clone(),
            store.clone(),
            spool.clone(),
            launcher.clone(),
            Arc::new(review::ReviewStores::new(
                PathBuf::from("/proc/self/exe"),
                review_state,
                spool.clone(),
            )),
        );
        let skills = Arc::new(skills::SkillHosts::new(
            PathBuf::from("/proc/self/exe"),
            config.skills_dirs.clone(),
            skills_state,
        ));
        let app = Arc::new(api::App {
            config: config.clone(),
            runs: runs.clone(),
            doctor,
            skills,
            streams: Arc::default(),
            attest_dir: sandbox::attest::key::daemon_dir(&state),
        });
        listener
            .set_nonblocking(true)
            .map_err(|source| DaemonError::Runtime {
                step: "the socket",
                source,
            })?;
        let listener = tokio::net::UnixListener::from_std(listener).map_err(|source| {
            DaemonError::Runtime {
                step: "the socket",
                source,
            }
        })?;
        {
            let store = store.clone();
            let config = config.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(PRUNE_EVERY);
                every.tick().await;
                loop {
                    every.tick().await;
                    let (store, spool, config) = (store.clone(), spool.clone(), config.clone());
                    let _ =
                        tokio::task::spawn_blocking(move || prune(&store, &spool, &config)).await;
                }
            });
        }
        let signal = |kind| {
            tokio::signal::unix::signal(kind).map_err(|source| DaemonError::Runtime {
                step: "installing a signal handler",
                source,
            })
        };
        let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
        let service = api::router(app).into_make_service_with_connect_info::<api::Peer>();
        // The server keeps answering while runs are stopped, so attached
        // clients read each run's end from its stream; it closes after.
        let (stop_serving, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = axum::serve(listener::CappedListener::new(listener), service)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
        let mut server = tokio::spawn(std::future::IntoFuture::into_future(server));
        notify_ready();
        tracing::info!(
            socket = %socket_shown,
            state_dir = %state_shown,
            max_concurrent = config.max_concurrent,
            pool = config.pool.enabled,
            pid = std::process::id(),
            "listening"
        );
        let signal = tokio::select! {
            served = &mut server => {
                let served = served.map_err(|err| DaemonError::Runtime {
                    step: "serving",
                    source: std::io::Error::other(err),
                })?;
                served.map_err(|source| DaemonError::Runtime { step: "serving", source })?;
                "none (the server ended)"
            }
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        let load = runs.load();
        tracing::info!(
            signal = %signal,
            running = load.running,
            queued = load.queued,
            "stopping"
        );
        // New runs are refused from here (503); runs in flight are
        // cancelled and recorded, their logs ended with their `end`
        // record, which their followers' streams carry to them. Then the
        // listener closes and open requests get a bounded time to finish
        // (a skill call that hangs does not hold the stop).
        runs.shut_down().await;
        // Then the launcher, with what is left (warm sandboxes, runs not
        // over within the stop's grace), while the daemon still lives: its
        // death would kill the launcher before it cleaned up.
        let _ = tokio::task::spawn_blocking(move || launcher.stop(LAUNCHER_STOP)).await;
        let _ = stop_serving.send(());
        if tokio::time::timeout(DRAIN, &mut server).await.is_err() {
            tracing::warn!(
                "requests still open {} s after the stop are cut off",
                DRAIN.as_secs()
            );
        }
        Ok(())
    });
    if let Some(path) = owned_path {
        let _ = std::fs::remove_file(path);
    }
    runtime.shutdown_timeout(Duration::from_millis(100));
    match &result {
        Ok(()) => tracing::info!("stopped"),
        Err(err) => tracing::error!("stopped: {err}"),
    }
    result
}

/// `sandbox doctor --json` of this binary, run once at start: the probes
/// and, for each built-in profile, whether a run can start here and what
/// it would enforce, exactly as doctor reports them. Executed (not forked
/// from this process) with the launcher's clean environment, before the
/// runtime exists; if it fails, the probes alone, with the reason.
fn doctor_verdict(exe: &Path) -> serde_json::Value {
    let output = std::process::Command::new(exe)
        .args(["doctor", "--json"])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    // doctor exits 1 when the default profile cannot run: still a verdict.
    match output.map(|out| serde_json::from_slice::<serde_json::Value>(&out.stdout)) {
        Ok(Ok(verdict)) => verdict,
        failed => serde_json::json!({
            "probes": sandbox::probe::probe(),
            "error": match failed {
                Ok(Err(err)) => format!("sandbox doctor --json printed no JSON: {err}"),
                Err(err) => format!("sandbox doctor --json did not run: {err}"),
                Ok(Ok(_)) => String::new(),
            },
        }),
    }
}
