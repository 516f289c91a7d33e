//! A panic in a cloned child ends that child with status 125 and never
//! unwinds through the frames it copied from its parent: they belong to the
//! parent, whose destructors (a run's `Drop`, which kills and sweeps) must
//! not run twice.
//!
//! Cloning is only sound from a single-threaded process and libtest runs
//! tests on threads, so this binary has no harness.

use std::io::Read;
use std::os::fd::OwnedFd;

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

fn a_panicking_child_exits_125_without_unwinding_its_parents_frames() {
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().expect("pipe");
    let mut seen = std::fs::File::from(read_end);
    let status = {
        let _guard = ParentFrameGuard(std::fs::File::from(write_end));
        let (pid, _pidfd) = sandbox::sys::clone::clone_into_namespaces(CloneFlags::empty(), || {
            // Quiet: the panic is the test's, not a failure to report.
            std::panic::set_hook(Box::new(|_| {}));
            panic!("a bug in the child")
        })
        .expect("clone");
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

fn main() {
    let name = "a_panicking_child_exits_125_without_unwinding_its_parents_frames";
    let parent = std::process::id();
    let result =
        std::panic::catch_unwind(a_panicking_child_exits_125_without_unwinding_its_parents_frames);
    if std::process::id() != parent {
        // Only reached by a child that unwound out of the clone (the bug
        // under test): never report for it.
        std::process::exit(101);
    }
    match result {
        Ok(()) => println!("test {name} ... ok"),
        Err(_) => {
            println!("test {name} ... FAILED");
            std::process::exit(101);
        }
    }
}
