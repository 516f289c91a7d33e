//! The client libraries, embedded in the binary and shown to skills
//! read-only at [`INSIDE`]: a Node skill can `require('sandbox-ipc')` and a
//! Python one `import sandbox_ipc` without vendoring them.

use std::path::PathBuf;

/// Where skills see the libraries.
pub const INSIDE: &str = "/run/sandbox/lib";

const FILES: [(&str, &str); 2] = [
    (
        "node/sandbox-ipc/index.js",
        include_str!("../../../../clients/node/index.js"),
    ),
    (
        "python/sandbox_ipc.py",
        include_str!("../../../../clients/python/sandbox_ipc.py"),
    ),
];

/// Environment that points the runtimes at the libraries.
pub const ENV: [(&str, &str); 2] = [
    ("NODE_PATH", "/run/sandbox/lib/node"),
    ("PYTHONPATH", "/run/sandbox/lib/python"),
];

/// The libraries on the host, written once per version into the user's
/// cache directory (named by their content's hash, so an upgrade gets a
/// new directory and a half-written one is never used).
pub fn on_host() -> std::io::Result<PathBuf> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (path, text) in FILES {
        hasher.update(path);
        hasher.update(text);
    }
    let tag: String = hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .ok_or_else(|| std::io::Error::other("neither XDG_CACHE_HOME nor HOME is set"))?
        .join("sandbox");
    let dir = cache.join(format!("lib-{tag}"));
    if dir.is_dir() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&cache)?;
    let staging = tempfile_dir(&cache)?;
    for (path, text) in FILES {
        let file = staging.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file, text)?;
    }
    match std::fs::rename(&staging, &dir) {
        Ok(()) => Ok(dir),
        // Another process won the race: use its copy.
        Err(_) if dir.is_dir() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(dir)
        }
        Err(err) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(err)
        }
    }
}

fn tempfile_dir(parent: &std::path::Path) -> std::io::Result<PathBuf> {
    for attempt in 0..100u32 {
        let dir = parent.join(format!(".lib-staging-{}-{attempt}", std::process::id()));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("cannot create a staging directory"))
}
