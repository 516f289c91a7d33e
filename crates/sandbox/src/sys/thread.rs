//! Whether this process runs one thread: the condition for copying it with
//! fork or a raw clone. The one check every copy (clone, fork, the forking
//! probes) and every overwrite of memory other threads could read makes.

use nix::errno::Errno;

/// Why this process may not be copied now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotSingleThreaded {
    /// It runs this many threads, and kept running more than one for the
    /// whole check.
    #[error("this process has {0} threads; only a single-threaded process may be copied")]
    Threads(u64),
    /// The count could not be read (`/proc/self/task`).
    #[error("reading the thread count (/proc/self/task): {0}")]
    Unreadable(Errno),
}

impl From<NotSingleThreaded> for Errno {
    /// EDEADLK for a second thread: a copy made now could inherit a lock
    /// that thread holds (the deadlock that is avoided).
    fn from(refusal: NotSingleThreaded) -> Errno {
        match refusal {
            NotSingleThreaded::Threads(_) => Errno::EDEADLK,
            NotSingleThreaded::Unreadable(errno) => errno,
        }
    }
}

/// Threads of this process, from the link count of `/proc/self/task`
/// (two plus one per thread): one `stat`, where reading `/proc/self/status`
/// would make the kernel format the whole file.
pub fn count() -> nix::Result<u64> {
    let task = nix::sys::stat::stat(c"/proc/self/task")?;
    Ok(task.st_nlink.saturating_sub(2))
}

/// Ok when this process has exactly one thread.
///
/// A thread that was just joined wakes its joiner before the kernel takes it
/// off the count, so a second thread may be seen for a few microseconds:
/// look again briefly (5 ms in all) before refusing.
pub fn require_single_thread() -> Result<(), NotSingleThreaded> {
    let mut threads = 0;
    for attempt in 0..50 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        threads = count().map_err(NotSingleThreaded::Unreadable)?;
        if threads == 1 {
            return Ok(());
        }
    }
    Err(NotSingleThreaded::Threads(threads))
}
