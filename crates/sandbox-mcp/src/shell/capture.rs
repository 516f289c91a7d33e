//! The command's output, read from both pipes at once and capped.

use tokio::io::AsyncReadExt;

use super::outcome::CapturedOutput;

/// Reads one pipe, keeping the first `cap` bytes.
pub(super) struct Capture {
    kept: Vec<u8>,
    total: u64,
    cap: usize,
}

impl Capture {
    pub(super) fn new(cap: usize) -> Capture {
        Capture {
            kept: Vec::new(),
            total: 0,
            cap,
        }
    }

    /// Read to end of file. Partial progress stays in `self` when the
    /// future is dropped.
    pub(super) async fn read_from(&mut self, pipe: Option<impl tokio::io::AsyncRead + Unpin>) {
        let Some(mut pipe) = pipe else { return };
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buffer).await {
                Ok(0) => return,
                Ok(n) => {
                    self.total += n as u64;
                    let room = self.cap.saturating_sub(self.kept.len());
                    self.kept.extend_from_slice(&buffer[..n.min(room)]);
                }
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                // A pipe that fails to read has nothing more to give; what
                // was read stays, and the byte count says how much that was.
                Err(_) => return,
            }
        }
    }

    pub(super) fn finish(self) -> CapturedOutput {
        let truncated = self.total > self.kept.len() as u64;
        let kept = if truncated {
            cut_to_char_boundary(&self.kept)
        } else {
            &self.kept[..]
        };
        CapturedOutput {
            text: String::from_utf8_lossy(kept).into_owned(),
            shown_bytes: kept.len() as u64,
            total_bytes: self.total,
            truncated,
        }
    }
}

/// `bytes` without a UTF-8 sequence the cap cut in two at its end, so the
/// text does not end in a replacement character that the command never wrote.
fn cut_to_char_boundary(bytes: &[u8]) -> &[u8] {
    // A sequence is at most 4 bytes: look back at most 3 for its lead byte.
    for back in 1..=bytes.len().min(4) {
        let at = bytes.len() - back;
        let byte = bytes[at];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue;
        }
        let needed = match byte {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return bytes,
        };
        return if needed > back { &bytes[..at] } else { bytes };
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_multibyte_character_is_dropped_whole() {
        let text = "aé€😀";
        let bytes = text.as_bytes();
        // Cutting inside each sequence drops just that character.
        assert_eq!(cut_to_char_boundary(&bytes[..2]), b"a");
        assert_eq!(cut_to_char_boundary(&bytes[..3]), "aé".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..4]), "aé".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..5]), "aé".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..6]), "aé€".as_bytes());
        assert_eq!(cut_to_char_boundary(&bytes[..9]), "aé€".as_bytes());
        assert_eq!(cut_to_char_boundary(bytes), bytes);
        assert_eq!(cut_to_char_boundary(b""), b"");
    }
}
