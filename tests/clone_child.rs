//! A panic in a cloned child ends that child with status 125 and never
//! unwinds through the frames it copied from its parent: they belong to the
//! parent, whose destructors (a run's `Drop`, which kills and sweeps) must
//! not run twice.
//!
//! The same holds for `fork_single_threaded` (the launcher's fork). Cloning
//! and forking are only sound from a single-threaded process and libtest
//! runs tests on threads, so this binary has no harness.

mod support;

use std::io::Read;
use std::os::fd::OwnedFd;
use std::time::Duration;

use nix::sched::CloneFlags;
use nix::sys::wait::{waitpid, WaitStatus};

/// Writes one line to `pipe` when dropped: a destructor of the parent's
/// frame that the child must not run.
struct ParentFrameGuard(std::fs::File);

impl Drop for ParentFrameGuard {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = writeln!(self.0, "dropped by {}", std::process::id());
    }
}

/// Runs `start_child` (which starts a child whose code panics and returns
/// its pid) inside a frame holding a [`ParentFrameGuard`], then checks the
/// child's status and that only this process ran the guard's destructor.
fn check_panicking_child(start_child: impl FnOnce() -> nix::unistd::Pid) {
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("pipe");
    let mut seen = std::fs::File::from(read_end);
    let status = {
        let _guard = ParentFrameGuard(std::fs::File::from(write_end));
        let pid = start_child();
        waitpid(pid, None).expect("waitpid")
    };
    assert!(
        matches!(status, WaitStatus::Exited(_, 125)),
        "the child's status: {status:?}"
    );
    let mut lines = String::new();
    seen.read_to_string(&mut lines).expect("read");
    assert_eq!(
        lines,
        format!("dropped by {}\n", std::process::id()),
        "only the parent runs its own destructors"
    );
}

fn a_panicking_child_exits_125_without_unwinding_its_parents_frames() {
    check_panicking_child(|| {
        let (pid, _pidfd) = sandbox::sys::clone::clone_into_namespaces(CloneFlags::empty(), |_| {
            // Quiet: the panic is the test's, not a failure to report.
            std::panic::set_hook(Box::new(|_| {}));
            panic!("a bug in the child")
        })
        .expect("clone");
        pid
    });
}

fn a_panicking_forked_child_exits_125_without_unwinding_its_parents_frames() {
    check_panicking_child(|| {
        sandbox::sys::fork::fork_single_threaded(|| {
            std::panic::set_hook(Box::new(|_| {}));
            panic!("a bug in the launcher's child")
        })
        .expect("fork")
    });
}

/// The parent goes on normally after its child panicked: it can clone again
/// and that child's status arrives as usual.
fn the_parent_clones_again_after_a_child_panicked() {
    a_panicking_child_exits_125_without_unwinding_its_parents_frames();
    let (pid, _pidfd) =
        sandbox::sys::clone::clone_into_namespaces(CloneFlags::empty(), |_| 7).expect("clone");
    let status = waitpid(pid, None).expect("waitpid");
    assert!(
        matches!(status, WaitStatus::Exited(_, 7)),
        "the second child's status: {status:?}"
    );
}

/// A raw clone from a process with a second thread is refused before the
/// copy is made: the child could inherit a lock that thread holds.
fn cloning_a_threaded_process_is_refused() {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _ = stop_rx.recv();
    });
    let cloned = sandbox::sys::clone::clone_into_namespaces(CloneFlags::empty(), |_| 0);
    let forked = sandbox::sys::fork::fork_single_threaded(|| 0);
    drop(stop_tx);
    thread.join().expect("join");
    assert!(
        matches!(cloned, Err(nix::errno::Errno::EDEADLK)),
        "clone with two threads: {cloned:?}"
    );
    assert!(
        matches!(forked, Err(sandbox::sys::fork::ForkError::Threaded(2))),
        "fork with two threads: {forked:?}"
    );
}

/// The cgroup v2 directory this process is in, when cgroup2 is mounted
/// (alone or beside v1 hierarchies) and root may create cgroups below it.
fn own_cgroup2_dir() -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next() == Some("cgroup2"))
            .then(|| before.split_whitespace().nth(4).map(str::to_owned))
            .flatten()
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    let dir = std::path::Path::new(&mount).join(path.trim_start_matches('/'));
    (nix::unistd::geteuid().is_root() && dir.join("cgroup.procs").exists()).then_some(dir)
}

/// A child cloned into a cgroup v2 directory starts there: its own
/// /proc/self/cgroup names that directory before it does anything, so no
/// move was needed (and none could have been missed).
fn a_child_cloned_into_a_cgroup_starts_in_it() {
    let parent = own_cgroup2_dir();
    if !support::require(
        "a_child_cloned_into_a_cgroup_starts_in_it",
        "a cgroup v2 directory root may create cgroups in",
        parent.is_some(),
    ) {
        return;
    }
    let Some(parent) = parent else { return };
    let name = format!("sandbox-clone-test-{}", std::process::id());
    let dir = parent.join(&name);
    std::fs::create_dir(&dir).expect("create the test cgroup");
    let target = std::fs::File::open(&dir).expect("open the test cgroup");
    let expected = format!("/{name}");
    let cloned = sandbox::sys::clone::clone_into_cgroup(
        CloneFlags::empty(),
        std::os::fd::AsFd::as_fd(&target),
        |_| {
            let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
            let here = own
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or("");
            if here.ends_with(&expected) {
                0
            } else {
                3
            }
        },
    );
    let status = cloned.map(|(pid, _pidfd)| waitpid(pid, None));
    let _ = std::fs::remove_dir(&dir);
    let status = status
        .expect("clone3 with CLONE_INTO_CGROUP")
        .expect("waitpid");
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "the child's status (3: not in the cgroup): {status:?}"
    );
}

/// A field of `/proc/PID/status` (`State`, `SigBlk`), trimmed.
fn status_field(pid: nix::unistd::Pid, field: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|value| value.trim().to_owned())
    })
}

/// Whether `pid` is gone: reaped, or a zombie left to whoever adopts it.
fn ended(pid: nix::unistd::Pid) -> bool {
    status_field(pid, "State").is_none_or(|state| state.starts_with('Z') || state.starts_with('X'))
}

fn user_namespaces_work(test: &str) -> bool {
    let probe = std::process::Command::new("unshare")
        .args(["--user", "true"])
        .status()
        .is_ok_and(|status| status.success());
    support::require(
        test,
        "unprivileged user namespaces (`unshare --user`)",
        probe,
    )
}

/// The holder of a mapping's user namespace (`clone_idle`, which shares
/// this process's memory): it holds the namespace with every signal blocked
/// (no handler of this process's can run in it) while its maps are written
/// and it is opened, from a process with a second thread too, and dropping
/// it kills it and hands it to be reaped without waiting; the descriptor
/// keeps the namespace.
fn an_idle_child_holds_its_namespace_until_dropped_then_is_reaped() {
    let test = "an_idle_child_holds_its_namespace_until_dropped_then_is_reaped";
    if !user_namespaces_work(test) {
        return;
    }
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _ = stop_rx.recv();
    });
    let holder = sandbox::sys::clone::clone_idle(CloneFlags::CLONE_NEWUSER).expect("clone_idle");
    let pid = holder.pid();
    let proc_dir = format!("/proc/{pid}");
    let euid = nix::unistd::geteuid();
    std::fs::write(format!("{proc_dir}/uid_map"), format!("0 {euid} 1\n")).expect("uid_map");
    assert_eq!(
        std::fs::read_to_string(format!("{proc_dir}/uid_map"))
            .expect("read uid_map")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["0", &euid.to_string(), "1"]
    );
    let namespace = std::fs::File::open(format!("{proc_dir}/ns/user")).expect("ns/user");
    let ours = std::fs::metadata("/proc/self/ns/user").expect("our ns");
    use std::os::unix::fs::MetadataExt;
    let held = namespace.metadata().expect("fstat the namespace");
    assert_ne!(held.ino(), ours.ino(), "a namespace of its own");
    support::wait::until_true("the holder sleeps", Duration::from_secs(30), || {
        status_field(pid, "State").is_some_and(|state| state.starts_with('S'))
    });
    let blocked = status_field(pid, "SigBlk").expect("SigBlk");
    let blocked = u64::from_str_radix(&blocked, 16).expect("a hex mask");
    for signal in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGCHLD,
        libc::SIGUSR1,
        libc::SIGRTMIN(),
    ] {
        assert_ne!(
            blocked & (1 << (signal - 1)),
            0,
            "signal {signal} blocked: {blocked:x}"
        );
    }
    drop(holder);
    sandbox::sys::reap::wait_for_prompt();
    assert!(
        std::fs::metadata(&proc_dir).is_err(),
        "reaped: {proc_dir} is gone"
    );
    assert_eq!(
        namespace
            .metadata()
            .expect("the namespace outlives its holder")
            .ino(),
        held.ino()
    );
    drop(stop_tx);
    thread.join().expect("join");
}

/// A holder whose parent dies before dropping it dies too (its parent-death
/// signal): it would otherwise sleep forever, holding a user namespace and
/// the memory it shared.
fn an_idle_child_dies_with_its_parent() {
    let test = "an_idle_child_dies_with_its_parent";
    if !user_namespaces_work(test) {
        return;
    }
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("pipe");
    let parent = sandbox::sys::fork::fork_single_threaded(|| {
        let Ok(holder) = sandbox::sys::clone::clone_idle(CloneFlags::CLONE_NEWUSER) else {
            return 3;
        };
        let _ = nix::unistd::write(&write_end, &holder.pid().as_raw().to_ne_bytes());
        // Ends without dropping the holder, as a killed supervisor would.
        sandbox::sys::exit_now(0)
    })
    .expect("fork");
    drop(write_end);
    let status = waitpid(parent, None).expect("waitpid");
    assert!(matches!(status, WaitStatus::Exited(_, 0)), "{status:?}");
    let mut bytes = [0u8; 4];
    std::fs::File::from(read_end)
        .read_exact(&mut bytes)
        .expect("the holder's pid");
    let pid = nix::unistd::Pid::from_raw(i32::from_ne_bytes(bytes));
    // A SIGKILL's delivery: far less than the limit even on a loaded machine.
    support::wait::until_true("the orphaned holder dies", Duration::from_secs(30), || {
        ended(pid)
    });
}

/// Set by a child that shares this process's memory, read by the parent.
static WRITTEN_BY_CHILD: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A child started by `clone_sharing_memory` (init's payload) writes this
/// process's own memory, and its parent goes on only once it has exited:
/// what it wrote is there when clone returns.
fn a_child_sharing_memory_runs_before_its_parent_goes_on() {
    use std::sync::atomic::Ordering;
    WRITTEN_BY_CHILD.store(0, Ordering::SeqCst);
    let (pid, _pidfd) = sandbox::sys::clone::clone_sharing_memory(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        WRITTEN_BY_CHILD.store(41, Ordering::SeqCst);
        7
    })
    .expect("clone_sharing_memory");
    assert_eq!(
        WRITTEN_BY_CHILD.load(Ordering::SeqCst),
        41,
        "the parent waited for the child, whose write it sees"
    );
    let status = waitpid(pid, None).expect("waitpid");
    assert!(matches!(status, WaitStatus::Exited(_, 7)), "{status:?}");
}

fn a_panicking_child_sharing_memory_exits_125_without_unwinding_its_parents_frames() {
    check_panicking_child(|| {
        let (pid, _pidfd) = sandbox::sys::clone::clone_sharing_memory(|_| {
            std::panic::set_hook(Box::new(|_| {}));
            panic!("a bug in the payload's setup")
        })
        .expect("clone_sharing_memory");
        pid
    });
}

/// Recurses with a page-sized frame until the stack runs out.
fn deeper(depth: u64) -> u64 {
    let frame = std::hint::black_box([depth as u8; 4096]);
    if depth == u64::MAX {
        return 0;
    }
    deeper(depth + 1) + u64::from(frame[0])
}

/// A region of `/proc/self/maps`: start, end, permissions.
type Region = (usize, usize, String);

/// The region of `/proc/self/maps` holding `address`, and the one just
/// below it.
fn mapping_and_below(address: usize) -> Option<(Region, Region)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let regions: Vec<Region> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            Some((
                usize::from_str_radix(start, 16).ok()?,
                usize::from_str_radix(end, 16).ok()?,
                fields.next()?.to_owned(),
            ))
        })
        .collect();
    let at = regions
        .iter()
        .position(|r| r.0 <= address && address < r.1)?;
    Some((
        regions[at].clone(),
        regions.get(at.checked_sub(1)?)?.clone(),
    ))
}

/// A child sharing this process's memory runs on a stack whose lowest page
/// is a guard (no access, adjoining it), so an overflow faults there
/// instead of writing over the parent's memory below; it dies of it, and
/// its parent goes on and clones again.
fn a_stack_overflow_in_a_child_sharing_memory_stops_at_its_guard() {
    let (pid, _pidfd) = sandbox::sys::clone::clone_sharing_memory(|_| {
        let here = 0u8;
        match mapping_and_below(std::hint::black_box(&here) as *const u8 as usize) {
            Some((stack, guard)) if guard.1 == stack.0 && guard.2 == "---p" => 0,
            _ => 3,
        }
    })
    .expect("clone");
    let status = waitpid(pid, None).expect("waitpid");
    assert!(
        matches!(status, WaitStatus::Exited(_, 0)),
        "the child's stack has a guard page below it (3: none): {status:?}"
    );
    let (pid, _pidfd) =
        sandbox::sys::clone::clone_sharing_memory(|_| deeper(0) as i32).expect("clone");
    let status = waitpid(pid, None).expect("waitpid");
    assert!(
        matches!(
            status,
            WaitStatus::Signaled(_, nix::sys::signal::Signal::SIGSEGV, _)
        ),
        "{status:?}"
    );
    a_child_sharing_memory_runs_before_its_parent_goes_on();
}

fn main() {
    let tests: [(&str, fn()); 10] = [
        (
            "a_child_cloned_into_a_cgroup_starts_in_it",
            a_child_cloned_into_a_cgroup_starts_in_it,
        ),
        (
            "a_panicking_child_exits_125_without_unwinding_its_parents_frames",
            a_panicking_child_exits_125_without_unwinding_its_parents_frames,
        ),
        (
            "a_panicking_forked_child_exits_125_without_unwinding_its_parents_frames",
            a_panicking_forked_child_exits_125_without_unwinding_its_parents_frames,
        ),
        (
            "the_parent_clones_again_after_a_child_panicked",
            the_parent_clones_again_after_a_child_panicked,
        ),
        (
            "cloning_a_threaded_process_is_refused",
            cloning_a_threaded_process_is_refused,
        ),
        (
            "an_idle_child_holds_its_namespace_until_dropped_then_is_reaped",
            an_idle_child_holds_its_namespace_until_dropped_then_is_reaped,
        ),
        (
            "an_idle_child_dies_with_its_parent",
            an_idle_child_dies_with_its_parent,
        ),
        (
            "a_child_sharing_memory_runs_before_its_parent_goes_on",
            a_child_sharing_memory_runs_before_its_parent_goes_on,
        ),
        (
            "a_panicking_child_sharing_memory_exits_125_without_unwinding_its_parents_frames",
            a_panicking_child_sharing_memory_exits_125_without_unwinding_its_parents_frames,
        ),
        (
            "a_stack_overflow_in_a_child_sharing_memory_stops_at_its_guard",
            a_stack_overflow_in_a_child_sharing_memory_stops_at_its_guard,
        ),
    ];
    support::harness::run("clone_child", &tests);
}
