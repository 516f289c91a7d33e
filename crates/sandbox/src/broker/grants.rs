//! Stored grants ("always for this project"): a JSON file under the user's
//! state directory, keyed by project, caller and the caller's content hash,
//! so a grant given to one version of a program does not carry over to a
//! changed one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::profile::policy::Decision;

/// Why the grant store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// Reading or writing the file failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Writing the file failed (or it was a link, refused).
    #[error("saving the grants: {0}")]
    Write(#[source] crate::safe_file::SafeFileError),
    /// The file is not a grant list.
    #[error("{path} is not a grant list ({source}); fix or delete it")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
}

/// One decision a person made to keep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    /// Canonical project root.
    pub project: PathBuf,
    /// Who asked: `command:<program>` or `skill:<name>`.
    pub caller: String,
    /// SHA-256 of the caller's program (or skill) at the time.
    pub hash: String,
    /// The action.
    pub action: String,
    /// The targets it covers (a pattern as in profile rules): the target
    /// that was shown to the person, escaped; `*` for an action without one.
    pub pattern: String,
    /// allow or deny.
    pub decision: Decision,
    /// Seconds since the epoch.
    pub time: u64,
    /// Whether a person decided (as opposed to a flag).
    pub by_person: bool,
}

/// The grants of this user.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GrantStore {
    path: PathBuf,
    grants: Vec<Grant>,
}

/// Which grant store a run uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreChoice {
    /// The supervisor user's ([`default_path`]).
    #[default]
    Default,
    /// None: no stored grant applies and "always" stores nothing (a daemon
    /// running other users' runs must not use its own user's grants).
    Without,
    /// This file.
    At(PathBuf),
}

/// `$SANDBOX_STATE_DIR/grants.json`, else `$XDG_STATE_HOME/sandbox/grants.json`,
/// else `~/.local/state/sandbox/grants.json`.
pub fn default_path() -> PathBuf {
    crate::safe_file::state_dir().join("grants.json")
}

impl GrantStore {
    /// Load the store at `path`; a missing file is an empty store.
    pub fn load(path: &Path) -> Result<GrantStore, GrantError> {
        let grants = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| GrantError::Corrupt {
                path: path.to_path_buf(),
                source,
            })?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(GrantError::Io {
                    op: "reading",
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Ok(GrantStore {
            path: path.to_path_buf(),
            grants,
        })
    }

    /// Write the store (to a temporary file renamed over the old one, so a
    /// crash never leaves half a file).
    pub fn save(&self) -> Result<(), GrantError> {
        let io = |op, source| GrantError::Io {
            op,
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("creating the directory of", e))?;
        }
        let json = serde_json::to_vec_pretty(&self.grants).map_err(|e| io("encoding", e.into()))?;
        crate::safe_file::replace(&self.path, &json).map_err(GrantError::Write)
    }

    /// Every grant, in the order given.
    pub fn list(&self) -> &[Grant] {
        &self.grants
    }

    /// Add a grant (replacing one for the same project, caller, hash,
    /// action and pattern).
    pub fn add(&mut self, grant: Grant) {
        self.grants.retain(|g| {
            !(g.project == grant.project
                && g.caller == grant.caller
                && g.hash == grant.hash
                && g.action == grant.action
                && g.pattern == grant.pattern)
        });
        self.grants.push(grant);
    }

    /// Remove grant number `index` (as listed, from 1).
    pub fn revoke(&mut self, index: usize) -> Option<Grant> {
        (index >= 1 && index <= self.grants.len()).then(|| self.grants.remove(index - 1))
    }

    /// Whether any grant names this project and caller (whatever the hash
    /// and action): only then is what the caller runs worth hashing.
    pub fn may_apply(&self, project: &Path, caller: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.project == project && g.caller == caller)
    }

    /// The grant that applies to `action` on `target`, with its number: the
    /// same project, caller and content, and a pattern covering the target
    /// (a target-less request only by `*`).
    pub fn find(
        &self,
        project: &Path,
        caller: &str,
        hash: &str,
        action: &str,
        target: Option<&str>,
    ) -> Option<(usize, &Grant)> {
        self.grants
            .iter()
            .enumerate()
            .find(|(_, g)| {
                g.project == project
                    && g.caller == caller
                    && g.hash == hash
                    && g.action == action
                    && match target {
                        Some(target) => {
                            crate::action::pattern_matches_named(action, &g.pattern, target)
                        }
                        None => g.pattern == "*",
                    }
            })
            .map(|(i, g)| (i + 1, g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(action: &str, hash: &str) -> Grant {
        Grant {
            project: "/src/app".into(),
            caller: "command:make".into(),
            hash: hash.into(),
            action: action.into(),
            pattern: "dist/app.js".into(),
            decision: Decision::Allow,
            time: 1,
            by_person: true,
        }
    }

    #[test]
    fn grants_persist_match_only_the_same_content_and_revoke() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/grants.json");
        let mut store = GrantStore::load(&path).unwrap();
        assert!(store.list().is_empty());
        store.add(grant("fs.write", "aaa"));
        store.add(grant("fs.write", "aaa"));
        store.add(grant("fs.delete", "aaa"));
        store.save().unwrap();
        let mut loaded = GrantStore::load(&path).unwrap();
        assert_eq!(loaded.list().len(), 2, "the same grant twice is kept once");
        assert_eq!(
            loaded
                .find(
                    Path::new("/src/app"),
                    "command:make",
                    "aaa",
                    "fs.write",
                    Some("dist/app.js")
                )
                .map(|(i, _)| i),
            Some(1)
        );
        assert!(
            loaded
                .find(
                    Path::new("/src/app"),
                    "command:make",
                    "aaa",
                    "fs.write",
                    Some("src/main.rs")
                )
                .is_none(),
            "a target other than the one shown"
        );
        assert!(
            loaded
                .find(
                    Path::new("/src/app"),
                    "command:make",
                    "bbb",
                    "fs.write",
                    Some("dist/app.js")
                )
                .is_none(),
            "changed program"
        );
        assert!(
            loaded
                .find(
                    Path::new("/src/other"),
                    "command:make",
                    "aaa",
                    "fs.write",
                    Some("dist/app.js")
                )
                .is_none(),
            "other project"
        );
        assert_eq!(loaded.revoke(1).map(|g| g.action), Some("fs.write".into()));
        assert!(loaded.revoke(5).is_none());
    }

    #[test]
    fn a_corrupt_store_is_a_precise_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grants.json");
        std::fs::write(&path, "{ not a list").unwrap();
        let err = GrantStore::load(&path).unwrap_err();
        assert!(err.to_string().contains("is not a grant list"), "{err}");
        assert!(err.to_string().ends_with("fix or delete it"), "{err}");
    }
}
