//! Whether this process runs one thread: the condition for copying it with
//! fork or a raw clone.

use nix::errno::Errno;

/// Threads of this process, from the link count of `/proc/self/task`
/// (two plus one per thread): one `stat`, where reading `/proc/self/status`
/// would make the kernel format the whole file.
pub fn count() -> nix::Result<u64> {
    let task = nix::sys::stat::stat(c"/proc/self/task")?;
    Ok(task.st_nlink.saturating_sub(2))
}

/// Ok when this process has exactly one thread; EDEADLK otherwise (a copy
/// made now could inherit a lock another thread holds), or the errno of
/// reading the count.
///
/// A thread that was just joined wakes its joiner before the kernel takes it
/// off the count, so a second thread may be seen for a few microseconds:
/// look again briefly before refusing.
pub fn require_single_thread() -> nix::Result<()> {
    for attempt in 0..50 {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        if count()? == 1 {
            return Ok(());
        }
    }
    Err(Errno::EDEADLK)
}
