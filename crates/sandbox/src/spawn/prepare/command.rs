//! The run's command as the sandbox executes it: arguments, environment,
//! PATH lookup and working directory. One resolution shared by a cold plan
//! and a warm sandbox's commit (see [`crate::spawn::warm`]), so the two can
//! never disagree on what runs.

use std::ffi::{CString, OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::{cstring, SANDBOX_BIN_DIR};
use crate::profile::policy::{NetworkMode, Policy};
use crate::spawn::SpawnError;

const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A run's command as the sandbox will execute it: arguments, the
/// environment (the profile's, then the caller's changes, then the broker's
/// variables), the PATH lookup and the working directory (canonical, inside
/// the project). One resolution for a cold plan and a warm sandbox's commit,
/// so a warm run can never be resolved more loosely than a cold one.
pub(crate) struct CommandPlan {
    pub argv: Vec<CString>,
    pub envp: Vec<CString>,
    /// The same environment as pairs (the run's /etc files read it).
    pub env: Vec<(OsString, OsString)>,
    /// The program as the caller gave it, for messages.
    pub program: String,
    pub exec_candidates: Vec<CString>,
    pub cwd: PathBuf,
}

/// Resolve a command (see [`CommandPlan`]); `project` is canonical.
pub(crate) fn plan_command(
    policy: &Policy,
    program: &OsStr,
    args: &[OsString],
    env_changes: &[(OsString, Option<OsString>)],
    cwd: Option<&Path>,
    project: &Path,
) -> Result<CommandPlan, SpawnError> {
    let cwd = match cwd {
        Some(cwd) => {
            let cwd = std::fs::canonicalize(cwd).map_err(|source| SpawnError::Path {
                what: "working directory",
                path: cwd.to_path_buf(),
                source,
            })?;
            if !cwd.starts_with(project) {
                return Err(SpawnError::Invalid(format!(
                    "the working directory {} is outside the project root {}",
                    cwd.display(),
                    project.display()
                )));
            }
            cwd
        }
        None => project.to_path_buf(),
    };

    // Environment: exactly the profile's, then the caller's additions.
    let mut env: Vec<(OsString, OsString)> = policy.env.resolve(|name| std::env::var_os(name));
    for (name, value) in env_changes {
        env.retain(|(n, _)| n != name);
        if let Some(value) = value {
            env.push((name.clone(), value.clone()));
        }
    }
    // The broker channel is fd 3; Node programs get it as their IPC
    // channel too (process.send / process.on('message')).
    for (name, value) in [
        ("SANDBOX_IPC_FD", "3"),
        ("NODE_CHANNEL_FD", "3"),
        ("NODE_CHANNEL_SERIALIZATION_MODE", "json"),
    ] {
        env.retain(|(n, _)| n != name);
        env.push((OsString::from(name), OsString::from(value)));
    }
    // The proxy is the only way out: the run's own variables cannot point
    // clients anywhere else (nothing else would answer anyway).
    if policy.network.mode == NetworkMode::Allowlist {
        for (name, value) in crate::net::proxy_environment() {
            env.retain(|(n, _)| n != name);
            env.push((OsString::from(name), OsString::from(value)));
        }
    }
    if let Some((_, path)) = env.iter_mut().find(|(n, _)| n == "PATH") {
        path.push(":");
        path.push(SANDBOX_BIN_DIR);
    }
    let mut envp = Vec::with_capacity(env.len());
    for (name, value) in &env {
        if name.is_empty() || name.as_bytes().contains(&b'=') {
            return Err(SpawnError::Invalid(format!(
                "invalid environment variable name {name:?}"
            )));
        }
        let mut entry = name.as_bytes().to_vec();
        entry.push(b'=');
        entry.extend_from_slice(value.as_bytes());
        envp.push(cstring("environment variable", entry)?);
    }

    let program_name = program.to_string_lossy().into_owned();
    if program.is_empty() {
        return Err(SpawnError::Invalid("the command is empty".into()));
    }
    let mut argv = vec![cstring("argument", program.as_bytes())?];
    for arg in args {
        argv.push(cstring("argument", arg.as_bytes())?);
    }
    let exec_candidates = exec_candidates(program, &env)?;
    Ok(CommandPlan {
        argv,
        envp,
        env,
        program: program_name,
        exec_candidates,
        cwd,
    })
}

/// The paths execve tries: the program itself when it contains a slash,
/// otherwise each directory of the sandbox's own PATH (not the host's).
pub(crate) fn exec_candidates(
    program: &OsStr,
    env: &[(OsString, OsString)],
) -> Result<Vec<CString>, SpawnError> {
    if program.as_bytes().contains(&b'/') {
        return Ok(vec![cstring("program", program.as_bytes())?]);
    }
    let path = env
        .iter()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| OsString::from(DEFAULT_PATH));
    let mut candidates = Vec::new();
    for dir in path.as_bytes().split(|b| *b == b':') {
        // An empty PATH entry means the working directory, a classic way to
        // run a planted binary; skip it.
        if dir.is_empty() || dir[0] != b'/' {
            continue;
        }
        let mut full = dir.to_vec();
        if !full.ends_with(b"/") {
            full.push(b'/');
        }
        full.extend_from_slice(program.as_bytes());
        candidates.push(cstring("program", full)?);
    }
    Ok(candidates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lookup_uses_the_sandbox_path_and_skips_relative_entries() {
        let env = vec![(OsString::from("PATH"), OsString::from("/a::.:/b/"))];
        let got = exec_candidates(OsStr::new("tool"), &env).unwrap();
        assert_eq!(
            got,
            vec![
                CString::new("/a/tool").unwrap(),
                CString::new("/b/tool").unwrap()
            ]
        );
        let got = exec_candidates(OsStr::new("./x"), &env).unwrap();
        assert_eq!(got, vec![CString::new("./x").unwrap()]);
    }
}
