//! The project tree as the payload will see it, and what it may leave behind.
//!
//! Before a run one walk of the project finds what a writable view must not
//! expose as it is on disk:
//! - secrets at any depth (`.env`, keys, cloud credentials), masked;
//! - files that make the host run code later (git hooks and config, editor
//!   and agent settings, shell start-up files), made read-only, with every
//!   ancestor pinned so that renaming an ancestor cannot put a writable copy
//!   in their place;
//! - hard links to files outside the project, made read-only, because a
//!   write through one changes the outside file.
//!
//! After a run, a second, cheaper walk moves protected entries the run
//! created (which no mount could cover: they did not exist) out of the way.

pub mod git_identity;
pub mod home;
pub mod patterns;
pub mod quarantine;
pub mod scan;
pub mod watch;
pub mod watcher;

use serde::Serialize;

pub use patterns::{Pattern, PatternError, PatternList};

/// What to do about files hard-linked to a file outside the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HardlinkPolicy {
    /// Mount them read-only in the view (writes fail with EROFS).
    ReadOnly,
    /// Refuse to start, naming them.
    Refuse,
    /// Leave them writable: a write changes the file outside the project.
    Allow,
}

/// The compiled `[filesystem]` lists a scan applies.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Hidden at any depth.
    pub secrets: PatternList,
    /// Read-only at any depth (when the project is writable).
    pub protect: PatternList,
}

impl Rules {
    /// Compile a profile's `secrets` and `protect` lists (already checked
    /// when the profile loaded).
    pub fn new(secrets: &[String], protect: &[String]) -> Result<Rules, PatternError> {
        Ok(Rules {
            secrets: PatternList::parse(secrets)?,
            protect: PatternList::parse(protect)?,
        })
    }

    /// Whether the entry at `path` (components below the project root) is
    /// protected: a protect pattern matches, or it is a `.git` that is not a
    /// directory (a gitdir pointer decides where git finds its hooks and
    /// config, so it is protected whatever the list says).
    pub fn is_protected<C: AsRef<[u8]>>(&self, path: &[C], is_dir: bool) -> bool {
        (!is_dir && path.last().is_some_and(|n| n.as_ref() == b".git"))
            || self.protect.matching(path, is_dir).is_some()
    }

    /// Whether `relative` (a path below the project, `/`-separated) or any of
    /// its ancestors is a secret. For the broker, which acts on paths the
    /// payload names.
    pub fn secret_in(&self, relative: &str) -> bool {
        any_prefix(relative, |parts, is_dir| {
            self.secrets.matching(parts, is_dir).is_some()
        })
    }

    /// Whether `relative` or any of its ancestors is protected. For the
    /// broker, which must not write where the payload itself cannot.
    pub fn protected_in(&self, relative: &str) -> bool {
        any_prefix(relative, |parts, is_dir| self.is_protected(parts, is_dir))
    }
}

/// Whether `test` holds for `relative` or one of its ancestors. Ancestors are
/// directories; the path itself is tried as both kinds, since a request may
/// name something that does not exist yet.
fn any_prefix(relative: &str, test: impl Fn(&[&[u8]], bool) -> bool) -> bool {
    let parts: Vec<&[u8]> = relative
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::as_bytes)
        .collect();
    (1..=parts.len()).any(|n| {
        let is_dir = n < parts.len();
        test(&parts[..n], is_dir) || (!is_dir && test(&parts[..n], true))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_checks_cover_ancestors_and_either_kind_at_the_leaf() {
        let rules = Rules {
            secrets: PatternList::parse(&[".ssh/", ".env"]).unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".vscode/"]).unwrap(),
        };
        assert!(rules.secret_in("home/.ssh/id_rsa"));
        assert!(rules.secret_in("home/.ssh"));
        assert!(rules.secret_in("a/.env"));
        assert!(!rules.secret_in("a/env"));
        assert!(rules.protected_in(".git/hooks/pre-commit"));
        assert!(rules.protected_in(".vscode"));
        assert!(rules.protected_in("x/.vscode/tasks.json"));
        assert!(
            rules.protected_in("sub/.git"),
            "a .git file may be a pointer"
        );
        assert!(!rules.protected_in(".git/objects/ab/cdef"));
    }
}
