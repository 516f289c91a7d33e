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

/// What a library directory holds beyond [`FILES`]: version 2 adds the
/// Python client's bytecode.
const LAYOUT: &str = "layout 2: python bytecode";

/// The libraries on the host, written once per version into the user's
/// cache directory (named by their content's hash, so an upgrade gets a
/// new directory and a half-written one is never used).
pub fn on_host() -> std::io::Result<PathBuf> {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    // The layout's version is hashed too: a directory written before the
    // bytecode was is replaced, not kept without it.
    hasher.update(LAYOUT);
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
    compile_python(&staging.join("python"));
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

/// The interpreter that compiles the Python client: the system's, by path.
const SYSTEM_PYTHON: &str = "/usr/bin/python3";

/// Compiles the Python client with the host's `python3` into the staging
/// directory's `__pycache__`. Skills see the directory read-only, so
/// without this every call of a Python skill compiled the client again
/// (about 2 ms; the bare runtime reuses its cached bytecode). The bytecode
/// is written here, by the host, from the embedded source, before the
/// directory is published; no skill can write it, so none can poison what
/// another reads. A Python whose version differs finds no bytecode under
/// its own cache tag and compiles, as before. Best effort: without the
/// system's Python the libraries are offered as source alone. Never a
/// `python3` found through `PATH`: that may be a project's (a virtualenv's
/// `bin` first in it), and this runs outside any sandbox. `-I` and an empty
/// environment keep the caller's variables (`PYTHONPYCACHEPREFIX`,
/// `PYTHONDONTWRITEBYTECODE`, `LD_PRELOAD`) out of it.
fn compile_python(dir: &std::path::Path) {
    let status = std::process::Command::new(SYSTEM_PYTHON)
        .env_clear()
        .args(["-I", "-m", "compileall", "-q"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        // A partial cache would only be ignored by Python; remove it so
        // the directory says plainly that there is no bytecode.
        let _ = std::fs::remove_dir_all(dir.join("__pycache__"));
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
