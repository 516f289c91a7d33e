//! The caller's git identity (`user.name`, `user.email`) for commits made
//! inside a run, which cannot see `~/.gitconfig`.
//!
//! Only the two values leave the host, as `GIT_AUTHOR_*` and
//! `GIT_COMMITTER_*`: no file is shown and no other key (credential
//! helpers, URL rewrites with tokens, `core.sshCommand`) is read. They are
//! read by the host's own `git config --get`, which resolves includes and
//! `includeIf` as the person's commits would, and which reads files only:
//! `git config` starts no hook, fsmonitor, pager or helper. The `git`
//! program is looked up in absolute `PATH` entries outside the project (a
//! relative entry or one inside the project would run whatever a payload
//! left there), git is not started in the project (`-C`), and it gets a
//! deadline and a bound on what it prints.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::PollFlags;

use crate::poll_set::PollSet;

/// How long one `git config --get` may take.
const DEADLINE: Duration = Duration::from_secs(2);
/// The most bytes of a value read.
const MAX_OUTPUT: usize = 4096;
/// The longest name or e-mail passed.
const MAX_VALUE: usize = 256;

/// A person's git identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitIdentity {
    /// `user.name`.
    pub name: String,
    /// `user.email`.
    pub email: String,
}

impl GitIdentity {
    /// The variables git reads for a commit's author and committer.
    pub fn variables(&self) -> [(&'static str, &str); 4] {
        [
            ("GIT_AUTHOR_NAME", self.name.as_str()),
            ("GIT_AUTHOR_EMAIL", self.email.as_str()),
            ("GIT_COMMITTER_NAME", self.name.as_str()),
            ("GIT_COMMITTER_EMAIL", self.email.as_str()),
        ]
    }
}

/// Why no identity is passed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// No usable `git` on `PATH`.
    #[error("no git program in an absolute PATH directory outside the project")]
    NoGit,
    /// A key is not set (or git failed or took too long).
    #[error("git config has no usable {key} (set it with `git config --global {key} ...`)")]
    Missing {
        /// `user.name` or `user.email`.
        key: &'static str,
    },
}

/// The identity git would use for a commit in `project`, read as above.
pub fn read(project: &Path) -> Result<GitIdentity, IdentityError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let git = find_git(&path, project).ok_or(IdentityError::NoGit)?;
    let get =
        |key: &'static str| config_value(&git, project, key).ok_or(IdentityError::Missing { key });
    Ok(GitIdentity {
        name: get("user.name")?,
        email: get("user.email")?,
    })
}

/// `git` in the first absolute `PATH` directory outside `project` that has it.
fn find_git(path: &std::ffi::OsStr, project: &Path) -> Option<PathBuf> {
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute() && !dir.starts_with(project))
        .map(|dir| dir.join("git"))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// One value of `git config --get KEY` as git sees it for `project`; `None`
/// when unset, unusable, or git failed or overran its deadline.
fn config_value(git: &Path, project: &Path, key: &str) -> Option<String> {
    let mut child = Command::new(git)
        .arg("--no-pager")
        .arg("-C")
        .arg(project)
        .args(["config", "--get", key])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let output = child
        .stdout
        .take()
        .and_then(|stdout| read_until(stdout, Instant::now() + DEADLINE));
    // Ended or not, it is done with: a git still running past its deadline
    // is killed, and every child is reaped.
    let _ = child.kill();
    let status = child.wait().ok()?;
    if !status.success() {
        return None;
    }
    usable(&String::from_utf8(output?).ok()?)
}

/// What `stdout` gives until it closes, at most [`MAX_OUTPUT`] bytes, or
/// `None` when `deadline` passes first.
fn read_until(mut stdout: std::process::ChildStdout, deadline: Instant) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let ready = {
            let mut set = PollSet::default();
            let slot = set.add(stdout.as_fd(), PollFlags::POLLIN);
            set.wait([Some(deadline)]).ok()?;
            set.ready(Some(slot))
        };
        // Nothing ready: the deadline passed, or a signal cut the wait
        // short, which gives up as well.
        if !ready {
            return None;
        }
        let n = stdout.read(&mut chunk).ok()?;
        if n == 0 || out.len() >= MAX_OUTPUT {
            return Some(out);
        }
        out.extend_from_slice(&chunk[..n.min(MAX_OUTPUT - out.len())]);
    }
}

/// The value without its newline, when git itself would accept it in an
/// identity: not empty, one line, no NUL or `<>` (git strips those), not
/// longer than [`MAX_VALUE`].
fn usable(output: &str) -> Option<String> {
    let value = output.strip_suffix('\n').unwrap_or(output).trim();
    let plain = !value.is_empty()
        && value.chars().count() <= MAX_VALUE
        && !value
            .chars()
            .any(|c| c.is_control() || c == '<' || c == '>');
    plain.then(|| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_must_be_one_plain_line() {
        assert_eq!(usable("Ann Example\n").as_deref(), Some("Ann Example"));
        assert_eq!(
            usable("ann@example.org").as_deref(),
            Some("ann@example.org")
        );
        for bad in ["", "\n", "a\nb", "a\u{1b}[2J", "<x>", &"a".repeat(257)] {
            assert_eq!(usable(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn git_is_never_taken_from_a_relative_or_project_directory() {
        let project = tempfile::tempdir().unwrap();
        let bin = project.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let planted = bin.join("git");
        std::fs::write(&planted, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("bin"), &bin]).unwrap();
        assert_eq!(find_git(&path, project.path()), None);
        let elsewhere = tempfile::tempdir().unwrap();
        let path = std::env::join_paths([&bin, elsewhere.path()]).unwrap();
        let other = tempfile::tempdir().unwrap();
        assert_eq!(find_git(&path, other.path()), Some(planted));
    }
}
