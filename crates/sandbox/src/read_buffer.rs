//! The buffer a loop's reads land in, kept between reads.

/// Most bytes one read asks for: a pipe's or a socket's usual burst, and
/// small enough that the buffer is no memory worth counting.
pub(crate) const READ_SIZE: usize = 64 * 1024;

/// Bytes the first read asks for: one page.
pub(crate) const FIRST_READ_SIZE: usize = 4 * 1024;

/// Starts at a page and doubles, up to [`READ_SIZE`], each time a read
/// fills it. Zeroing 64 KiB up front touched 16 pages per reader for
/// messages of a few hundred bytes: a page fault each, and in a supervisor
/// forked from the daemon's launcher a copy of the launcher's page each (a
/// profile put the JSON-lines framers' alone at a tenth of the
/// supervisor's faults).
#[derive(Debug, Default)]
pub(crate) struct ReadBuffer(Vec<u8>);

impl ReadBuffer {
    /// The buffer to read into; give it back with [`ReadBuffer::put_back`].
    /// Dropped instead (a cancelled read), the next starts from a page.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        let mut buf = std::mem::take(&mut self.0);
        if buf.is_empty() {
            buf.resize(FIRST_READ_SIZE, 0);
        }
        buf
    }

    /// Keep `buf` for the next read, larger if `read` bytes filled it.
    pub(crate) fn put_back(&mut self, mut buf: Vec<u8>, read: usize) {
        if read == buf.len() && read < READ_SIZE {
            buf.resize((read * 2).min(READ_SIZE), 0);
        }
        self.0 = buf;
    }

    /// Its size now (0 before the first read).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}
