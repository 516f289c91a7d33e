//! A stack of its own for a child that shares this process's memory
//! (`CLONE_VM`, [`super::clone`]): mapped here with a guard page,
//! unmapped when dropped, which its owner does only once no child runs on
//! it.

use nix::errno::Errno;

/// The guard page at the bottom of a [`ChildStack`].
const GUARD_BYTES: usize = 4096;

/// A stack of its own for a child that shares this process's memory
/// (`CLONE_VM`), unmapped when dropped.
#[derive(Debug)]
pub struct ChildStack {
    base: std::ptr::NonNull<libc::c_void>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone; nothing in this
// process refers to it but the child that runs on it, and the value is
// only dropped (unmapped) once no child runs on it: once reaped
// (`super::reap`), or, for a child its parent waits for
// (`clone_sharing_memory`), once it has executed a program or exited.
unsafe impl Send for ChildStack {}

impl ChildStack {
    /// `len` bytes, the lowest page of which a guard (no access): code that
    /// overflows the stack faults there instead of writing over whatever
    /// this process mapped below it (Rust probes every page of a large
    /// frame, so no frame steps over the guard).
    pub(super) fn new(len: usize) -> nix::Result<ChildStack> {
        // SAFETY: a fresh private anonymous mapping at an address of the
        // kernel's choosing; no existing memory is touched. Pages are
        // allocated only as the child touches them.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let base = std::ptr::NonNull::new(base).ok_or(Errno::ENOMEM)?;
        let stack = ChildStack { base, len };
        // SAFETY: the first page of the mapping just made, which nothing
        // uses yet.
        if unsafe { libc::mprotect(base.as_ptr(), GUARD_BYTES, libc::PROT_NONE) } != 0 {
            return Err(Errno::last());
        }
        Ok(stack)
    }

    /// Its highest address: stacks grow down on every architecture Linux
    /// runs this on.
    pub(super) fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which `len` bytes long.
        unsafe { self.base.as_ptr().cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of this length, unmapped once;
        // no child runs on it any more (the owner's contract above).
        unsafe { libc::munmap(self.base.as_ptr(), self.len) };
    }
}
