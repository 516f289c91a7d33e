//! What tells that files read earlier may have changed since: a skill's
//! whole directory ([`fingerprint`]) and a single file ([`file_state`]).
//! Used by `serve` (hot reload, the profile check) and by the hosts it
//! prepares ahead alike.

use std::hash::{Hash, Hasher};
use std::path::Path;

/// Identity of a skill's files: paths, sizes, times and inodes, so that an
/// edit, a replacement or a new file changes it. Bounded in depth and count.
pub fn fingerprint(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let mut pending = vec![(dir.to_path_buf(), 0usize)];
    let mut seen = 0usize;
    while let Some((path, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            seen += 1;
            if seen > 4096 {
                return hasher.finish();
            }
            let Ok(meta) = entry.metadata() else { continue };
            entry.path().hash(&mut hasher);
            (
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime_nsec(),
                meta.ino(),
                meta.mode(),
            )
                .hash(&mut hasher);
            if meta.is_dir() && depth < 4 {
                pending.push((entry.path(), depth + 1));
            }
        }
    }
    hasher.finish()
}

/// A file's identity and times, None when it is absent: what tells that a
/// file read earlier (grants, an installed profile) may have changed since.
pub type FileState = Option<(u64, u64, u64, i64, i64, i64, i64)>;

/// The [`FileState`] of `path` now.
pub fn file_state(path: &Path) -> FileState {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| {
        (
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ctime(),
            m.ctime_nsec(),
        )
    })
}
