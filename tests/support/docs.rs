//! The documents the docs tests read: the README front page, the pages
//! given, and every chapter of the book below docs/src.

use std::path::{Path, PathBuf};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, then `also` (paths from the repository's root), then every
/// Markdown file below docs/src in a stable order.
pub fn documents(also: &[&str]) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                out.push(path);
            }
        }
    }
    let root = repo_root();
    let mut out = vec![root.join("README.md")];
    out.extend(also.iter().map(|page| root.join(page)));
    walk(&root.join("docs/src"), &mut out);
    out
}
