//! The official MCP Python SDK as the suite's MCP client: a venv with the
//! pins of `tests/mcp/requirements.txt`, built once per requirements (and
//! Python) under `target/`, and `tests/mcp/driver.py`, which runs one
//! scenario against `sandbox serve --mcp` and prints what it saw as JSON.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The protocol era a client negotiates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// The `initialize` handshake, protocol 2025-11-25.
    Handshake,
    /// `server/discover` and per-request metadata, protocol 2026-07-28.
    Stateless,
}

impl Era {
    /// Both eras, for tests that run every scenario in each.
    pub const ALL: [Era; 2] = [Era::Handshake, Era::Stateless];

    /// The SDK's `Client(mode=...)`: the stateless era is reached the way a
    /// host reaches it, by probing with `server/discover` ("auto"); the test
    /// then checks which version was negotiated instead of forcing it.
    fn mode(self) -> &'static str {
        match self {
            Era::Handshake => "legacy",
            Era::Stateless => "auto",
        }
    }

    /// The protocol version the client must end up with.
    pub fn version(self) -> &'static str {
        match self {
            Era::Handshake => "2025-11-25",
            Era::Stateless => "2026-07-28",
        }
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Why there is no client: the machine lacks something (a loud skip, or a
/// failure under SANDBOX_TEST_REQUIRE=1), or the set-up itself is wrong (a
/// failure everywhere).
#[derive(Debug, Clone)]
enum Missing {
    Unavailable(String),
    Broken(String),
}

/// The venv's python, or None after a loud skip. Built at most once per
/// process; parallel test binaries share it through a lock file.
pub fn python(test: &str) -> Option<PathBuf> {
    static VENV: OnceLock<Result<PathBuf, Missing>> = OnceLock::new();
    match VENV.get_or_init(venv) {
        Ok(venv) => Some(venv.join("bin/python")),
        Err(Missing::Broken(why)) => panic!("{test}: the MCP Python client: {why}"),
        Err(Missing::Unavailable(what)) => {
            super::require(test, what, false);
            None
        }
    }
}

fn venv() -> Result<PathBuf, Missing> {
    let requirements = repo().join("tests/mcp/requirements.txt");
    let pins = std::fs::read(&requirements)
        .map_err(|e| Missing::Broken(format!("{}: {e}", requirements.display())))?;
    // A venv is bound to the interpreter it was made from: another Python
    // (an upgrade, another machine sharing target/) gets a venv of its own.
    let identity = Command::new("python3")
        .args([
            "-c",
            "import sys; print(sys.version); print(sys.base_prefix)",
        ])
        .stdin(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .ok_or_else(|| Missing::Unavailable("python3 (for the MCP Python SDK)".into()))?;
    let mut hash = Sha256::new();
    hash.update(&pins);
    hash.update(&identity.stdout);
    let short: String = hash
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    // target/, beside the tests' scratch directory: kept across runs.
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .to_path_buf();
    let dir = target.join(format!("mcp-venv-{short}"));
    if dir.join("bin/python").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&target).map_err(|e| Missing::Broken(format!("{target:?}: {e}")))?;
    let lock_path = target.join(format!("mcp-venv-{short}.lock"));
    let lock_file = File::create(&lock_path)
        .map_err(|e| Missing::Broken(format!("{}: {e}", lock_path.display())))?;
    let _lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| Missing::Broken(format!("locking {}: {e}", lock_path.display())))?;
    // Another process may have built it while this one waited for the lock.
    if dir.join("bin/python").exists() {
        return Ok(dir);
    }
    // Built aside and renamed into place, so that a venv at `dir` is always
    // complete (an interrupted build leaves only a stale .building-PID).
    let building = target.join(format!("mcp-venv-{short}.building-{}", std::process::id()));
    // Builds that died half-way: none can be running, this process holds the lock.
    let stale = format!("mcp-venv-{short}.building-");
    for entry in std::fs::read_dir(&target).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&stale) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&building)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Missing::Unavailable(format!("python3 -m venv ({e})")))?;
    if !made.status.success() {
        return Err(Missing::Unavailable(format!(
            "python3 -m venv ({})",
            String::from_utf8_lossy(&made.stderr).trim()
        )));
    }
    let python = building.join("bin/python");
    let installed = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            // Offline, give up in seconds rather than pip's minutes of retries.
            "--retries",
            "1",
            "--timeout",
            "20",
            "--require-hashes",
            "--no-deps",
            "--only-binary=:all:",
            "-r",
        ])
        .arg(&requirements)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Missing::Broken(format!("{}: {e}", python.display())))?;
    if !installed.status.success() {
        let _ = std::fs::remove_dir_all(&building);
        let stderr = String::from_utf8_lossy(&installed.stderr);
        // A file that does not match its hash, or a pin the index has no
        // file for while it lists others, is the requirements' fault; an
        // index pip cannot reach lists no versions at all.
        let pin_missing =
            stderr.contains("(from versions: ") && !stderr.contains("(from versions: none)");
        if stderr.contains("HASHES") || stderr.contains("Hashes are required") || pin_missing {
            return Err(Missing::Broken(format!(
                "pip install --require-hashes -r {}:\n{stderr}",
                requirements.display()
            )));
        }
        let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
        return Err(Missing::Unavailable(format!(
            "PyPI (pip install -r tests/mcp/requirements.txt: {})",
            last.unwrap_or("failed").trim()
        )));
    }
    let imports = Command::new(&python)
        .args(["-c", "import mcp.client, mcp.client.stdio, mcp_types"])
        .output()
        .map_err(|e| Missing::Broken(format!("{}: {e}", python.display())))?;
    if !imports.status.success() {
        return Err(Missing::Broken(format!(
            "the installed SDK does not import: {}",
            String::from_utf8_lossy(&imports.stderr)
        )));
    }
    std::fs::rename(&building, &dir).map_err(|e| {
        Missing::Broken(format!("{} -> {}: {e}", building.display(), dir.display()))
    })?;
    Ok(dir)
}

/// What the driver saw, and the server's stderr (which it passes through).
#[derive(Debug)]
pub struct Observed {
    /// The driver's JSON object.
    pub json: Value,
    /// The driver's and the server's stderr.
    pub stderr: String,
}

impl Observed {
    /// For assertion messages: the object and the logs.
    pub fn context(&self) -> String {
        let mut json = self.json.clone();
        let error = json
            .as_object_mut()
            .and_then(|object| object.remove("error"))
            .and_then(|error| error.as_str().map(|e| format!("--- driver error ---\n{e}")))
            .unwrap_or_default();
        format!(
            "{}\n{error}--- stderr ---\n{}",
            serde_json::to_string_pretty(&json).unwrap_or_default(),
            self.stderr
        )
    }
}

/// Run `scenario` of `tests/mcp/driver.py` with `spec` against
/// `sandbox serve --mcp SERVE_ARGS...`, started the way an agent host
/// starts a server: from `cwd`, with nothing of this process's environment
/// but PATH, and HOME set to `home` (where the grant store lives).
pub fn run_scenario(
    python: &Path,
    era: Era,
    scenario: &str,
    spec: &Value,
    cwd: &Path,
    home: &Path,
    serve_args: &[&str],
) -> Observed {
    let mut command = Command::new(python);
    command
        .arg(repo().join("tests/mcp/driver.py"))
        .arg(scenario)
        .args(["--mode", era.mode()])
        .arg("--cwd")
        .arg(cwd)
        .arg("--spec")
        .arg(spec.to_string())
        .arg("--limit-scale")
        .arg(super::wait::scale().to_string())
        .arg("--")
        .arg(super::sandbox_bin())
        .args(["serve", "--mcp"])
        .args(serve_args)
        // The SDK passes HOME, LOGNAME, PATH, SHELL, TERM and USER on from
        // its own environment, and nothing else: hosts do the same.
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .stdin(Stdio::null());
    let out = command.output().expect("the MCP driver starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or_else(|| {
            panic!("{scenario} ({era:?}): no JSON from the driver\nstdout:\n{stdout}\nstderr:\n{stderr}")
        });
    Observed { json, stderr }
}
