//! `clone(2)` used like `fork(2)`: a new process with a copy of the address
//! space, entering new namespaces and returning a pidfd.

use std::cell::Cell;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

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
    super::thread::require_single_thread()?;
    let mut pidfd: libc::c_int = -1;
    let raw_flags = flags.bits() as libc::c_ulong
        | libc::CLONE_PIDFD as libc::c_ulong
        | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: with a null stack the kernel gives the child a copy-on-write copy
    // of this process, as fork does; the process has one thread (checked just
    // above; only this thread could have started another since), so the copy
    // holds no lock that a vanished thread took. CLONE_PIDFD writes one int to
    // `pidfd`, which outlives the call; the child and parent tid pointers and
    // tls are unused (0) because CLONE_*TID and CLONE_SETTLS are not set.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            raw_flags,
            0usize,
            &mut pidfd as *mut libc::c_int,
            0usize,
            0usize,
        )
    };
    match ret {
        -1 => Err(Errno::last()),
        0 => super::run_child_then_exit(|| {
            child(&ClonedChild {
                highest_placed: Cell::new(-1),
            })
        }),
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
