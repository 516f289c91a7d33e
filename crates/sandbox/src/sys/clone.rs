//! `clone(2)` used like `fork(2)`: a new process with a copy of the address
//! space, entering new namespaces and returning a pidfd; and
//! [`clone_idle`], a child that shares it only to hold new namespaces.

use std::cell::Cell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

use super::stack::ChildStack;

/// Exit status of a cloned child whose code panicked: the status the CLI
/// gives a sandbox that failed to set up.
pub const CHILD_PANICKED: i32 = 125;

/// Clone a child that runs `child` in new namespaces and exits with its return
/// value (or [`CHILD_PANICKED`]). Returns the child's pid and a pidfd for it.
///
/// The raw system call (no stack argument) behaves like `fork`: the child
/// continues on a copy of the caller's stack. That is only sound when the
/// caller is single-threaded (another thread may hold the allocator's lock or
/// be half-way through a write), so it is checked here, at the call: a
/// process with more threads gets EDEADLK (the deadlock that is avoided) and
/// no child. glibc's fork handlers do not run and its cached thread id is
/// stale in the child, so `child` must not call `raise`, `abort` or pthread
/// functions; a panic in it ends the child at once with [`CHILD_PANICKED`].
pub fn clone_into_namespaces(
    flags: CloneFlags,
    child: impl FnOnce(&ClonedChild) -> i32,
) -> nix::Result<(Pid, OwnedFd)> {
    super::thread::require_single_thread().map_err(Errno::from)?;
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the process has one thread (checked just above; only this
    // thread could have started another since), and `pidfd` outlives the call.
    let ret = unsafe { clone_copy(flags, &mut pidfd) };
    after_clone(ret, pidfd, child)
}

/// The raw `clone` that copies this process as fork does; what it returns
/// as the system call does (-1 with errno, 0 in the child, the child's pid).
///
/// # Safety
///
/// The calling process must be single-threaded: the child continues on a
/// copy-on-write copy of this process's memory and stack, and a lock another
/// thread held at the copy (the allocator's) would stay held forever in the
/// child. The caller's code in the child must end by `execve` or `_exit`
/// without unwinding into the copied frames (see [`after_clone`]). `pidfd`
/// must stay valid for the call (CLONE_PIDFD writes one int there).
unsafe fn clone_copy(flags: CloneFlags, pidfd: &mut libc::c_int) -> libc::c_long {
    let raw_flags = flags.bits() as libc::c_ulong
        | libc::CLONE_PIDFD as libc::c_ulong
        | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: with a null stack the kernel gives the child a copy-on-write copy
    // of this process, as fork does; the caller guarantees a single thread
    // (this function's contract), so the copy holds no lock that a vanished
    // thread took. CLONE_PIDFD writes one int to `pidfd`, which outlives the
    // call; the child and parent tid pointers and tls are unused (0) because
    // CLONE_*TID and CLONE_SETTLS are not set.
    unsafe {
        libc::syscall(
            libc::SYS_clone,
            raw_flags,
            0usize,
            pidfd as *mut libc::c_int,
            0usize,
            0usize,
        )
    }
}

/// `clone3`'s argument block (`struct clone_args`, its Linux 5.7 size: up to
/// `cgroup`).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7), a `clone3`-only flag.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// [`clone_into_namespaces`], with the child created directly in the cgroup
/// v2 directory `cgroup` (`clone3` with `CLONE_INTO_CGROUP`): it is never
/// moved there, so it never waits for the lock a move takes (an RCU grace
/// period, 1 to 20 ms). Errors as `clone3` gives them: ENOSYS or E2BIG
/// where the kernel (before 5.7) or a seccomp filter (Docker's default
/// answers ENOSYS to make glibc fall back) refuses it, EBADF or EOPNOTSUPP
/// for a directory that is not a cgroup v2 one; the caller then clones with
/// [`clone_into_namespaces`] and moves the child.
pub fn clone_into_cgroup(
    flags: CloneFlags,
    cgroup: BorrowedFd<'_>,
    child: impl FnOnce(&ClonedChild) -> i32,
) -> nix::Result<(Pid, OwnedFd)> {
    super::thread::require_single_thread().map_err(Errno::from)?;
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: u64::from(flags.bits() as u32) | libc::CLONE_PIDFD as u64 | CLONE_INTO_CGROUP,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup.as_raw_fd() as u64,
    };
    // SAFETY: as in `clone_copy`: with no stack (0, size 0) the
    // child gets a copy-on-write copy of this single-threaded process, as
    // fork gives. `args` is a complete `struct clone_args` of the size
    // passed, alive for the call; CLONE_PIDFD writes one int to `pidfd`,
    // which outlives it; the tid pointers, tls and set_tid are unused (0)
    // because no flag asks for them; `cgroup` is a descriptor the caller
    // keeps open for the call (a borrow).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    after_clone(ret, pidfd, child)
}

/// Both sides of a fork-like clone: the child runs `child` and exits; the
/// parent adopts the pidfd.
fn after_clone(
    ret: libc::c_long,
    pidfd: libc::c_int,
    child: impl FnOnce(&ClonedChild) -> i32,
) -> nix::Result<(Pid, OwnedFd)> {
    match ret {
        -1 => Err(Errno::last()),
        0 => super::run_child_then_exit(|| child(&ClonedChild::new())),
        pid => {
            // SAFETY: the kernel just created this descriptor for us (CLONE_PIDFD);
            // nothing else owns it.
            let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
            Ok((Pid::from_raw(pid as libc::pid_t), pidfd))
        }
    }
}

/// What only the cloned child may do with its descriptor table: it is a copy
/// whose objects from the parent's frames are never dropped (the child ends
/// by `execve` or `_exit` inside [`clone_into_namespaces`]), so numbers their
/// owners hold may be replaced or closed under them without a destructor
/// ever closing what took their place.
///
/// What it cannot rule out is the closure itself using a descriptor it
/// captured from the parent after `place` or `close_from` took its number:
/// it then reaches another file or gets EBADF. The children keep what they
/// need through [`ClonedChild::place`] first and use only that afterwards.
#[derive(Debug)]
pub struct ClonedChild {
    /// The highest number [`ClonedChild::place`] filled (-1: none), which
    /// [`ClonedChild::close_from`] must leave open.
    highest_placed: Cell<RawFd>,
}

impl ClonedChild {
    /// The handle of a child that was just created by a fork-like copy of
    /// this process (clone here, `fork_single_threaded` beside).
    pub(super) fn new() -> ClonedChild {
        ClonedChild {
            highest_placed: Cell::new(-1),
        }
    }

    /// Put a copy of `fd` at `target` (not close-on-exec), replacing what was
    /// there; the copy stays open for as long as this child runs.
    pub fn place(&self, fd: BorrowedFd<'_>, target: RawFd) -> nix::Result<BorrowedFd<'_>> {
        if target < 0 {
            return Err(Errno::EBADF);
        }
        // SAFETY: in this child nothing from the parent's frames is ever
        // dropped, and close_from below never closes a placed number.
        unsafe { super::fd::dup_onto(fd, target) }?;
        self.highest_placed
            .set(self.highest_placed.get().max(target));
        // SAFETY: `target` is open now (dup2 succeeded) and stays open while
        // `self` lives: close_from refuses to close it, and `place` onto it
        // again keeps it open (a new file behind the same number).
        Ok(unsafe { BorrowedFd::borrow_raw(target) })
    }

    /// Close every descriptor from `first` up; EBADF, closing nothing, if
    /// that would close one that [`ClonedChild::place`] put there.
    pub fn close_from(&self, first: u32) -> nix::Result<()> {
        if i64::from(first) <= i64::from(self.highest_placed.get()) {
            return Err(Errno::EBADF);
        }
        // SAFETY: see the type: the parent's copied owners are never dropped
        // in this child, and no placed descriptor is at or above `first`.
        unsafe { super::fd::close_from(first) }
    }
}

/// Bytes of stack for a [`clone_idle`] child: it calls `prctl`, `getppid`
/// and `pause`, through the C library's `clone` wrapper, a few hundred
/// bytes deep (and a guard page).
const IDLE_STACK_BYTES: usize = 16 * 1024;

/// Bytes of stack for a [`clone_sharing_memory`] child: the payload's setup
/// (Landlock's rules, its own view of its confinement) runs there. Only
/// the pages it touches are allocated.
const SHARED_MEMORY_STACK_BYTES: usize = 2 * 1024 * 1024;

/// A child created in new namespaces (a user namespace for an idmapped
/// mount's mapping) only to hold them while this process writes its
/// `/proc` files and opens them: killed and reaped later when dropped.
#[derive(Debug)]
pub struct IdleChild {
    pid: Pid,
    ends: Option<(OwnedFd, ChildStack)>,
}

impl IdleChild {
    /// Its pid, for its `/proc` files.
    pub fn pid(&self) -> Pid {
        self.pid
    }
}

impl Drop for IdleChild {
    /// Kill it and reap it later; by pid where a filter refuses
    /// `pidfd_send_signal`. One that cannot be killed at all (it ignores
    /// nothing, so only a refusal of both calls) is left to die with its
    /// parent thread, and never waited for: it would never end.
    fn drop(&mut self) {
        if let Some((pidfd, stack)) = self.ends.take() {
            let killed = super::signal::pidfd_kill(pidfd.as_fd()).is_ok()
                || nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL).is_ok();
            super::reap::keep_with_stack(pidfd, stack, killed);
        }
    }
}

/// Clone a child into the namespaces `flags` creates that does nothing
/// until it is killed ([`IdleChild`]'s drop) or its parent thread ends.
///
/// Why it shares this process's memory (`CLONE_VM`, as `posix_spawn`
/// does) and descriptor table (`CLONE_FILES`: it holds no copy of any
/// descriptor, so no pipe's reader waits for it) instead of copying them
/// as fork would: a copy costs the page tables'
/// copy, then a copy-on-write fault for each page this process writes
/// next (the supervisor's heap after clone, 0.1 to 0.2 ms), for a child
/// that runs no code of ours. So the child runs only `hold_until_killed`,
/// on its own small stack, with every signal blocked (nothing can run a
/// handler of this process's in it) and nothing allocated: it never
/// writes this process's memory but that stack. Sound from any thread.
pub fn clone_idle(flags: CloneFlags) -> nix::Result<IdleChild> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let stack = ChildStack::new(IDLE_STACK_BYTES)?;
    let mut kept = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut kept),
    )?;
    let raw_flags =
        flags.bits() | libc::CLONE_VM | libc::CLONE_FILES | libc::CLONE_PIDFD | libc::SIGCHLD;
    let parent = std::process::id() as usize as *mut libc::c_void;
    let mut pidfd: libc::c_int = -1;
    // SAFETY: `hold_until_killed` touches no memory of this process but the
    // stack given, which stays mapped until the child is reaped (`ends`,
    // then `reap`); every signal is blocked in it (the mask it inherits), so
    // no handler of this process's runs on that stack. CLONE_PIDFD writes
    // one int to `pidfd` (the parent-tid argument), which outlives the call;
    // no flag asks for the tls or child tid arguments, so none is passed.
    let ret = unsafe {
        libc::clone(
            hold_until_killed,
            stack.top(),
            raw_flags,
            parent,
            &mut pidfd as *mut libc::c_int,
        )
    };
    let cloned = if ret < 0 { Err(Errno::last()) } else { Ok(ret) };
    // Restoring a mask that was just read cannot fail; were it to, the
    // child is made an IdleChild all the same, so that it is killed.
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&kept), None);
    let pid = cloned?;
    // SAFETY: the kernel just created this descriptor for us (CLONE_PIDFD);
    // nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(IdleChild {
        pid: Pid::from_raw(pid),
        ends: Some((pidfd, stack)),
    })
}

/// The whole life of a [`clone_idle`] child: dies with its parent thread
/// (the parent-death signal, armed before checking that the parent whose
/// pid `parent` carries has not already gone), else sleeps until killed.
/// Every signal is blocked, so `pause` never returns and no errno is ever
/// written to the thread-local storage it shares with its parent's thread.
extern "C" fn hold_until_killed(parent: *mut libc::c_void) -> libc::c_int {
    // SAFETY: prctl with a valid option and signal cannot fail and touches
    // no memory; getppid and pause take no arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        if libc::getppid() as usize != parent as usize {
            return 0;
        }
        loop {
            libc::pause();
        }
    }
}

/// [`clone_into_namespaces`] without copying this process: the child runs
/// `child` on a stack of its own in this process's memory (`CLONE_VM`)
/// while this thread waits (`CLONE_VFORK`) until it executes a program or
/// exits, as `posix_spawn` does. For init's payload, whose setup ends in
/// execve and which init only waits for meanwhile.
///
/// Why: a copy costs the page tables' copy, a copy-on-write fault for
/// each page either process writes next, and tearing the copy down at
/// execve, for a child that keeps nothing of it.
///
/// What `child` may do, since its writes are this process's: allocate and
/// free (the allocator is consistent: the only thread that could use it
/// waits), and change its own descriptor table, signal dispositions,
/// credentials and limits (copied or its own: no `CLONE_FILES`,
/// `CLONE_SIGHAND` or `CLONE_THREAD`). What it must not do: drop or change
/// anything it borrows from the caller's frames, which the caller uses
/// again when it wakes. It ends by `execve` or `_exit` (a panic: status
/// [`CHILD_PANICKED`]), never by returning into the caller. Refused
/// unless this process has one thread: another could use the allocator
/// while the child does.
pub fn clone_sharing_memory<F: FnOnce(&ClonedChild) -> i32>(
    child: F,
) -> nix::Result<(Pid, OwnedFd)> {
    super::thread::require_single_thread().map_err(Errno::from)?;
    let stack = ChildStack::new(SHARED_MEMORY_STACK_BYTES)?;
    let mut slot = Some(child);
    let raw_flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD;
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the process has one thread (checked above), and this one is
    // suspended until the child has executed a program or exited
    // (CLONE_VFORK), so nothing else runs in the memory the child shares;
    // `slot` and `stack` outlive that (they are dropped after clone
    // returns, when the child no longer runs on this memory); the child
    // ends by execve or _exit in `run_shared_child`. CLONE_PIDFD writes one
    // int to `pidfd` (the parent-tid argument), which outlives the call.
    let ret = unsafe {
        libc::clone(
            run_shared_child::<F>,
            stack.top(),
            raw_flags,
            (&mut slot as *mut Option<F>).cast(),
            &mut pidfd as *mut libc::c_int,
        )
    };
    let cloned = if ret < 0 { Err(Errno::last()) } else { Ok(ret) };
    drop(stack);
    let pid = cloned?;
    // SAFETY: the kernel just created this descriptor for us (CLONE_PIDFD);
    // nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((Pid::from_raw(pid), pidfd))
}

/// The child's side of [`clone_sharing_memory`]: takes the closure from
/// the slot `slot` points to and runs it, then exits.
extern "C" fn run_shared_child<F: FnOnce(&ClonedChild) -> i32>(
    slot: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `slot` is the `Option<F>` of the suspended caller's frame,
    // alive until the child has exited or executed, and nothing else
    // touches it meanwhile.
    let slot = unsafe { &mut *slot.cast::<Option<F>>() };
    match slot.take() {
        Some(child) => super::run_child_then_exit(|| child(&ClonedChild::new())),
        None => super::exit_now(CHILD_PANICKED),
    }
}
