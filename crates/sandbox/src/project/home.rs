//! Whether a project root is a place no run should write to by default: `/`,
//! a home directory, or a directory that contains one (`/home`).
//!
//! Running from `~` without `--project` would otherwise make the whole home
//! (SSH keys, shell start-up files, every other checkout) the writable project.

use std::path::{Path, PathBuf};

/// Home directories of every account in `/etc/passwd`, plus `$HOME`.
pub fn home_directories() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/etc/passwd") {
        for line in text.lines() {
            if let Some(home) = line.split(':').nth(5) {
                if home.starts_with('/') && home != "/" {
                    homes.push(PathBuf::from(home));
                }
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        if home.is_absolute() && home != Path::new("/") {
            homes.push(home);
        }
    }
    // Compare real paths: /home may be a symlink to /usr/home.
    let mut real: Vec<PathBuf> = homes
        .into_iter()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .collect();
    real.sort();
    real.dedup();
    real
}

/// Why `project` (canonical) is too broad to be an implicit project root,
/// or None when it is fine.
pub fn too_broad(project: &Path, homes: &[PathBuf]) -> Option<String> {
    if project == Path::new("/") {
        return Some("it is the root directory".into());
    }
    if let Some(home) = homes.iter().find(|h| h.as_path() == project) {
        return Some(format!("it is a home directory ({})", home.display()));
    }
    homes
        .iter()
        .find(|h| h.starts_with(project))
        .map(|home| format!("it contains the home directory {}", home.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_and_their_ancestors_are_too_broad() {
        let homes = vec![PathBuf::from("/home/alice"), PathBuf::from("/root")];
        assert!(too_broad(Path::new("/"), &homes).is_some());
        assert!(too_broad(Path::new("/home/alice"), &homes)
            .unwrap()
            .contains("is a home directory"));
        assert!(too_broad(Path::new("/home"), &homes)
            .unwrap()
            .contains("contains the home directory /home/alice"));
        assert!(too_broad(Path::new("/home/alice/src/app"), &homes).is_none());
        assert!(too_broad(Path::new("/srv/app"), &homes).is_none());
    }
}
