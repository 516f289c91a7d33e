//! The digest of a project's tree: one SHA-256 over every entry's path,
//! kind, permission bits and content (a file's SHA-256, a link's target),
//! in sorted order. One digest for the whole tree, never one per file in
//! the statement: a per-file digest of a short secret (`.env`) could be
//! guessed back from a published attestation.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Entries hashed at most: a larger tree is refused rather than hashed
/// for minutes.
pub const MAX_ENTRIES: u64 = 1_000_000;

/// Why the tree could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// Reading an entry.
    #[error("hashing the project: {op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The entry.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// More than [`MAX_ENTRIES`].
    #[error("the project {0} has more than {MAX_ENTRIES} entries: too many to hash for an attestation; attest a smaller project (--project)")]
    TooLarge(PathBuf),
}

/// The tree digest (hex) of `root`.
pub fn digest(root: &Path) -> Result<String, TreeError> {
    let mut hasher = Sha256::new();
    let mut count = 0u64;
    walk(root, Path::new(""), &mut hasher, &mut count)?;
    Ok(crate::audit::chain::hex(&hasher.finalize().into()))
}

fn walk(
    root: &Path,
    relative: &Path,
    hasher: &mut Sha256,
    count: &mut u64,
) -> Result<(), TreeError> {
    let dir = root.join(relative);
    let io = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| TreeError::Io { op, path, source }
    };
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map_err(io("listing", &dir))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io("listing", &dir))?;
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    for name in names {
        *count += 1;
        if *count > MAX_ENTRIES {
            return Err(TreeError::TooLarge(root.to_path_buf()));
        }
        let relative = relative.join(&name);
        let path = root.join(&relative);
        let meta = std::fs::symlink_metadata(&path).map_err(io("reading", &path))?;
        hasher.update(relative.as_os_str().as_bytes());
        hasher.update([0]);
        let mode = meta.mode() & 0o7777;
        let kind = meta.file_type();
        if kind.is_dir() {
            hasher.update(format!("d {mode:o}\n"));
            walk(root, &relative, hasher, count)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(io("reading", &path))?;
            hasher.update(b"l ");
            hasher.update(target.as_os_str().as_bytes());
            hasher.update(b"\n");
        } else if kind.is_file() {
            let content = file_digest(&path)?;
            hasher.update(format!("f {mode:o} {content}\n"));
        } else {
            hasher.update(format!("o {mode:o}\n"));
        }
    }
    Ok(())
}

fn file_digest(path: &Path) -> Result<String, TreeError> {
    let io = |op| {
        let path = path.to_path_buf();
        move |source| TreeError::Io { op, path, source }
    };
    // Never through a link put there since the walk looked, never hanging
    // on a FIFO.
    let mut file = crate::safe_file::open_read(path)
        .map_err(|err| io("opening")(std::io::Error::other(err.to_string())))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(io("reading")(err)),
        }
    }
    Ok(crate::audit::chain::hex(&hasher.finalize().into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_content_names_and_modes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), "1").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/b"), "2").unwrap();
        let first = digest(dir.path()).unwrap();
        assert_eq!(first, digest(dir.path()).unwrap());
        std::fs::write(dir.path().join("d/b"), "3").unwrap();
        let second = digest(dir.path()).unwrap();
        assert_ne!(first, second);
        std::os::unix::fs::symlink("a", dir.path().join("l")).unwrap();
        assert_ne!(second, digest(dir.path()).unwrap());
    }
}
