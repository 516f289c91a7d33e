//! The supervisor's side of a learning run: the seccomp listener the
//! payload hands over, and one handler per notified call, which answers
//! it as the profile's own filter would.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::poll::PollFlags;

use super::{Learning, Observations, Use};
use crate::profile::policy::{Enforcement, Policy, ProjectAccess};
use crate::seccomp::policy::SyscallPolicy;
use crate::seccomp::MappedIds;
use crate::sys::seccomp_notify::{self, Notification};

/// Longest path read from a caller (the kernel's PATH_MAX).
const PATH_MAX: usize = 4096;

/// Where an observed call keeps its path, and what it does with it.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// The argument holding a directory descriptor (None: relative to the cwd).
    dir: Option<usize>,
    /// The argument holding the path's address.
    path: usize,
    /// The argument holding open flags (an open), else the use is fixed.
    flags: Option<usize>,
    /// The use when there are no flags.
    fixed: Use,
}

/// A call's name, directory argument, path argument, flags argument and
/// use without flags.
type Row = (&'static str, Option<usize>, usize, Option<usize>, Use);

fn shapes() -> Vec<(i32, Shape)> {
    let table: [Row; 13] = [
        ("open", None, 0, Some(1), Use::Read),
        ("openat", Some(0), 1, Some(2), Use::Read),
        ("execve", None, 0, None, Use::Exec),
        ("execveat", Some(0), 1, None, Use::Exec),
        ("stat", None, 0, None, Use::Lookup),
        ("lstat", None, 0, None, Use::Lookup),
        ("newfstatat", Some(0), 1, None, Use::Lookup),
        ("statx", Some(0), 1, None, Use::Lookup),
        ("access", None, 0, None, Use::Lookup),
        ("faccessat", Some(0), 1, None, Use::Lookup),
        ("faccessat2", Some(0), 1, None, Use::Lookup),
        ("readlink", None, 0, None, Use::Lookup),
        ("readlinkat", Some(0), 1, None, Use::Lookup),
    ];
    table
        .iter()
        .filter_map(|(name, dir, path, flags, fixed)| {
            let nr = i32::try_from(crate::seccomp::syscall_number(name)?).ok()?;
            Some((
                nr,
                Shape {
                    dir: *dir,
                    path: *path,
                    flags: *flags,
                    fixed: *fixed,
                },
            ))
        })
        .collect()
}

/// What an open's flags ask for: None when it writes.
fn open_use(flags: u64) -> Option<Use> {
    let flags = flags as i32;
    let writes = flags & libc::O_ACCMODE != libc::O_RDONLY
        || flags & (libc::O_CREAT | libc::O_TRUNC) != 0
        || flags & libc::O_TMPFILE & !libc::O_DIRECTORY != 0;
    if writes {
        None
    } else if flags & libc::O_DIRECTORY != 0 {
        Some(Use::List)
    } else {
        Some(Use::Read)
    }
}

/// Lexically resolve `.` and `..` of an absolute path.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The supervisor's side of a learning run.
#[derive(Debug)]
pub(crate) struct Observer {
    /// The supervisor's end of the socket the payload sends its listener on.
    socket: OwnedFd,
    socket_done: Cell<bool>,
    listener: OnceCell<OwnedFd>,
    listener_done: Cell<bool>,
    shapes: Vec<(i32, Shape)>,
    /// What the run may write: a write elsewhere is a refusal.
    writable: Vec<PathBuf>,
    /// The profile's hidden paths (absolute).
    hidden: Vec<PathBuf>,
    /// The run's own trees, never the host's: nothing there is learned.
    own: Vec<PathBuf>,
    learning: Learning,
    /// The profile's own program, whose answer every notified call gets.
    profile: Vec<libc::sock_filter>,
    /// The profile's syscall policy (None: seccomp off, the set-id guard
    /// alone, which no profile entry lifts), for telling which refusals a
    /// profile could lift.
    syscalls: Option<SyscallPolicy>,
    ids: MappedIds,
    /// Per refused call number, the program of the profile widened for it
    /// (None: no profile entry allows it). At most one per known call.
    widened: RefCell<HashMap<i32, Option<Vec<libc::sock_filter>>>>,
}

/// What the profile's program makes of one notified call.
enum Answer {
    Continue,
    Fail(i32),
}

impl Observer {
    /// `profile` is the program the run would have installed without
    /// learning; `ids` what its user namespace maps.
    pub(crate) fn new(
        socket: OwnedFd,
        policy: &Policy,
        project: &Path,
        learning: Learning,
        profile: Vec<libc::sock_filter>,
        ids: MappedIds,
    ) -> Observer {
        let fs = &policy.filesystem;
        let mut writable = fs.write.clone();
        if fs.project == ProjectAccess::ReadWrite {
            writable.push(project.to_path_buf());
        }
        let own: Vec<PathBuf> = [
            "/tmp",
            "/dev",
            "/proc",
            crate::spawn::prepare::SANDBOX_BIN_DIR,
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        writable.extend(own.iter().cloned());
        let hidden = fs
            .hide
            .iter()
            .map(|h| normalize(&project.join(h)))
            .collect();
        Observer {
            socket,
            socket_done: Cell::new(false),
            listener: OnceCell::new(),
            listener_done: Cell::new(false),
            shapes: shapes(),
            writable,
            hidden,
            own,
            learning,
            profile,
            syscalls: (policy.enforce.seccomp != Enforcement::Off).then(|| policy.syscalls.clone()),
            ids,
            widened: RefCell::new(HashMap::new()),
        }
    }

    /// The profile's answer to `call`. Anything but ALLOW or ERRNO (which
    /// the learning program never sends here) or a program the
    /// interpreter cannot run is refused: the learning run is never wider
    /// than the profile.
    fn profile_answer(&self, call: &Notification) -> Answer {
        let action = crate::seccomp::profile_answer(&self.profile, call.arch, call.nr, call.args);
        match action {
            Some(action) if crate::seccomp::allows(action) => Answer::Continue,
            Some(action) => {
                Answer::Fail(crate::seccomp::refusal_errno(action).unwrap_or(libc::EPERM))
            }
            None => Answer::Fail(libc::EPERM),
        }
    }

    /// Whether the narrowest profile entry for `call`'s system call
    /// ([`crate::seccomp::allowing`]) would let this very call through.
    fn liftable(&self, name: Option<&str>, call: &Notification) -> bool {
        let (Some(name), Some(syscalls)) = (name, &self.syscalls) else {
            return false;
        };
        let mut cache = self.widened.borrow_mut();
        let program = cache.entry(call.nr).or_insert_with(|| {
            let wider = crate::seccomp::allowing(syscalls, name);
            crate::seccomp::compile_in_user_namespace(&wider, self.ids)
                .ok()
                .and_then(|filter| filter.programs().first().cloned())
        });
        program.as_ref().is_some_and(|program| {
            crate::seccomp::profile_answer(program, call.arch, call.nr, call.args)
                .is_some_and(crate::seccomp::allows)
        })
    }

    /// What to wait on: the socket until the listener came, then the listener.
    pub(crate) fn poll_fds(&self) -> (Option<BorrowedFd<'_>>, Option<BorrowedFd<'_>>) {
        let socket = (!self.socket_done.get()).then(|| self.socket.as_fd());
        let listener = self
            .listener
            .get()
            .filter(|_| !self.listener_done.get())
            .map(AsFd::as_fd);
        (socket, listener)
    }

    /// The payload sent its listener (or closed the socket without).
    pub(crate) fn on_socket(&self) {
        match crate::spawn::channel::recv_fd(self.socket.as_fd()) {
            Ok(Some(listener)) => {
                let _ = self.listener.set(listener);
                self.socket_done.set(true);
            }
            Ok(None) | Err(_) => self.socket_done.set(true),
        }
    }

    /// One observed call: record it, then let it go on.
    pub(crate) fn on_listener(&self, events: PollFlags) {
        let Some(listener) = self.listener.get() else {
            return;
        };
        if !events.contains(PollFlags::POLLIN) {
            // POLLHUP: no process uses the filter any more.
            if events.intersects(PollFlags::POLLHUP | PollFlags::POLLERR) {
                self.listener_done.set(true);
            }
            return;
        }
        let Ok(call) = seccomp_notify::receive(listener.as_fd()) else {
            return;
        };
        if let Answer::Fail(errno) = self.profile_answer(&call) {
            // Named while the caller still waits (its pid cannot be reused
            // yet), then refused as the profile refuses it: never let go on.
            let by = comm(call.pid);
            let _ = seccomp_notify::fail_call(listener.as_fd(), call.id, errno);
            let name = crate::seccomp::syscall_name(call.nr);
            let liftable = self.liftable(name, &call);
            let key = name.map_or_else(|| format!("#{}", call.nr), str::to_owned);
            let mut sink = self.sink();
            sink.calls += 1;
            if !sink.record_refusal(key, errno, liftable, &by) {
                sink.unrecorded += 1;
            }
            return;
        }
        let observed = self.observe(listener.as_fd(), &call);
        // The profile allows it: let it go on to Landlock and the view,
        // whatever was observed (see the module comment of `crate::learn`).
        let _ = seccomp_notify::continue_call(listener.as_fd(), call.id);
        let mut sink = self.sink();
        sink.calls += 1;
        match observed {
            Some(found) => found.record(&mut sink),
            None => sink.unresolved += 1,
        }
    }

    fn sink(&self) -> std::sync::MutexGuard<'_, Observations> {
        match self.learning.observed.lock() {
            Ok(sink) => sink,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn observe(&self, listener: BorrowedFd<'_>, call: &Notification) -> Option<Found> {
        let shape = self.shapes.iter().find(|(nr, _)| *nr == call.nr)?.1;
        let raw = seccomp_notify::read_string(call.pid, call.args[shape.path], PATH_MAX)?;
        // Read before the pid could have been reused: the call still waits.
        if !seccomp_notify::still_waiting(listener, call.id) {
            return None;
        }
        let used = match shape.flags {
            Some(index) => open_use(call.args[index]),
            None => Some(shape.fixed),
        };
        if raw.is_empty() {
            return Some(Found::Nothing); // AT_EMPTY_PATH: the descriptor itself
        }
        let raw = PathBuf::from(std::ffi::OsString::from(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&raw),
        ));
        let pid = call.pid;
        let path = if raw.is_absolute() {
            normalize(&raw)
        } else {
            let base = match shape.dir.map(|i| call.args[i] as i32) {
                Some(fd) if fd != libc::AT_FDCWD => {
                    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?
                }
                _ => std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?,
            };
            normalize(&base.join(raw))
        };
        let by = comm(pid);
        if self.own.iter().any(|own| path.starts_with(own)) {
            return Some(Found::Nothing);
        }
        let Some(used) = used else {
            if self.writable.iter().any(|w| path.starts_with(w)) {
                return Some(Found::Nothing);
            }
            return Some(Found::WriteRefused { path, by });
        };
        if self.hidden.iter().any(|h| path.starts_with(h)) {
            return Some(Found::Hidden { path, used, by });
        }
        let provisional = self
            .learning
            .provisional
            .iter()
            .any(|dir| path.starts_with(dir) && path != *dir);
        if !provisional && in_view(pid, &path) {
            return Some(Found::Nothing);
        }
        let meta = std::fs::symlink_metadata(&path).ok()?;
        Some(Found::Needed {
            is_dir: std::fs::metadata(&path).is_ok_and(|m| m.is_dir()) || meta.is_dir(),
            path,
            used,
            by,
        })
    }
}

/// The program name of process `pid` (empty when it is gone).
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_owned())
        .unwrap_or_default()
}

/// Whether `path` exists in the root of process `pid`, resolved as that
/// process would: symlinks and `..` stay inside its root.
fn in_view(pid: u32, path: &Path) -> bool {
    use nix::fcntl::{open, openat2, OFlag, OpenHow, ResolveFlag};
    let Ok(root) = open(
        format!("/proc/{pid}/root").as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        // Cannot tell: count it as shown, so nothing is learned on a guess.
        return true;
    };
    let relative = path.strip_prefix("/").unwrap_or(path);
    if relative.as_os_str().is_empty() {
        return true;
    }
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match openat2(root, relative, how) {
        Ok(_) => true,
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => false,
        Err(_) => true,
    }
}

/// What one call showed.
enum Found {
    /// Inside the view, or the run's own trees.
    Nothing,
    Needed {
        path: PathBuf,
        used: Use,
        by: String,
        is_dir: bool,
    },
    WriteRefused {
        path: PathBuf,
        by: String,
    },
    Hidden {
        path: PathBuf,
        used: Use,
        by: String,
    },
}

impl Found {
    fn record(self, sink: &mut Observations) {
        let kept = match self {
            Found::Nothing => true,
            Found::Needed {
                path,
                used,
                by,
                is_dir,
            } => Observations::record(&mut sink.needed, path, used, &by, is_dir),
            Found::WriteRefused { path, by } => {
                let is_dir = path.is_dir();
                Observations::record(&mut sink.writes_refused, path, Use::Write, &by, is_dir)
            }
            Found::Hidden { path, used, by } => {
                Observations::record(&mut sink.hidden, path, used, &by, false)
            }
        };
        if !kept {
            sink.unrecorded += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flags_tell_reads_from_writes() {
        assert_eq!(open_use(libc::O_RDONLY as u64), Some(Use::Read));
        assert_eq!(
            open_use((libc::O_RDONLY | libc::O_DIRECTORY) as u64),
            Some(Use::List)
        );
        assert_eq!(open_use(libc::O_WRONLY as u64), None);
        assert_eq!(open_use((libc::O_RDONLY | libc::O_CREAT) as u64), None);
        assert_eq!(open_use(libc::O_RDWR as u64), None);
        assert_eq!(open_use((libc::O_TMPFILE | libc::O_RDWR) as u64), None);
    }

    #[test]
    fn paths_are_resolved_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../../etc")), PathBuf::from("/etc"));
    }
}
