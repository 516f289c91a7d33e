//! A skill's sandbox prepared ahead of its call: `sandbox serve` keeps one
//! host per on-demand skill waiting with a warm sandbox
//! ([`crate::Command::warm_commit`]) whose payload has applied every layer
//! and waits for the go; the call only commits it, and the skill's runtime
//! starts at once.
//!
//! Measured (`scripts/bench-skills`): the sandbox's preparation (the host's
//! fork, the plan, the cgroup, the namespaces, the mounts, Landlock and
//! seccomp) was most of what an on-demand activation added to the bare
//! runtime's start; the runtime itself starts no slower under the layers
//! (the same system calls in the same time under `strace -f`).
//!
//! Never stale: each prepared sandbox runs one activation, and is
//! discarded (the call then runs in a sandbox prepared now) when anything
//! it was prepared from changed since: the project (watched like a warm
//! sandbox of the daemon's, [`Freshness`]), the skill's files, the grant
//! store, the installed profile the skill names, or the audit file.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{socketpair, AddressFamily, MsgFlags, SockFlag, SockType};

use super::manifest::Skill;
use super::Launch;
use crate::launch::warm::Freshness;
use crate::poll_set::PollSet;
use crate::profile::policy::ProjectAccess;

/// Projects with more directories and files than this get no prepared
/// sandbox for skills that see them (the daemon's pool has the same bound).
pub const WATCH_BUDGET: usize = 10_000;

/// What a sandbox is prepared from besides the project, the manifest and
/// the person's profile (both fixed for a host): the skill's files, the
/// files read when a run starts, and which audit file is open.
#[derive(Debug, PartialEq, Eq)]
struct Basis {
    skill_files: u64,
    /// The grant store and the installed profile the skill names.
    read_at_start: Vec<super::files::FileState>,
    /// Only which file: every activation appends to it.
    audit: Option<Option<(u64, u64)>>,
}

impl Basis {
    fn now(skill: &Skill, launch: &Launch) -> Basis {
        Basis::with_grants_at(skill, launch, &crate::broker::grants::default_path())
    }

    fn with_grants_at(skill: &Skill, launch: &Launch, grants: &Path) -> Basis {
        use std::os::unix::fs::MetadataExt;
        let mut read_at_start = vec![super::files::file_state(grants)];
        if let Some(profile) = &skill.profile {
            if !crate::profile::builtin_names().contains(&profile.as_str()) {
                let installed: Option<PathBuf> = super::manifest::installed_profiles()
                    .map(|dir| dir.join(format!("{profile}.toml")));
                read_at_start.push(installed.as_deref().and_then(super::files::file_state));
            }
        }
        Basis {
            skill_files: super::files::fingerprint(&skill.dir),
            read_at_start,
            audit: launch
                .audit
                .as_ref()
                .map(|audit| std::fs::metadata(audit).ok().map(|m| (m.dev(), m.ino()))),
        }
    }
}

/// A warm sandbox for one activation of a skill, waiting under every
/// layer for [`Prepared::start`].
pub(super) struct Prepared {
    child: crate::Child,
    commit: OwnedFd,
    fresh: Freshness,
    basis: Basis,
}

impl Prepared {
    /// Prepare `skill`'s sandbox as [`super::start`] would start it, up
    /// to its runtime's execve. The reason when it cannot be (the call
    /// then runs in a sandbox prepared when it comes, which reports the
    /// error if it is one).
    pub(super) fn new(
        skill: &Skill,
        launch: &Launch,
        asker: Option<Box<dyn crate::broker::prompt::Asker>>,
    ) -> Result<Prepared, String> {
        let basis = Basis::now(skill, launch);
        let policy =
            super::launch::policy_for(skill, &launch.profile).map_err(|e| e.to_string())?;
        let project = std::fs::canonicalize(&launch.project)
            .map_err(|err| format!("the project {}: {err}", launch.project.display()))?;
        // Before the sandbox's walk of the project, so that no change falls
        // between the two.
        let fresh = if policy.filesystem.project == ProjectAccess::Empty {
            Freshness::watch_root(&project)
        } else {
            Freshness::watch(&project, WATCH_BUDGET)
        }
        .map_err(|err| err.to_string())?;
        let (commit, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|errno| format!("socketpair(commit): {errno}"))?;
        let child = super::spawn(skill, launch, asker, Some(theirs)).map_err(|e| e.to_string())?;
        Ok(Prepared {
            child,
            commit,
            fresh,
            basis,
        })
    }

    /// The sandbox, now executing the skill's runtime; None when something
    /// it was prepared from changed (it is then gone, unused).
    pub(super) fn start(mut self, skill: &Skill, launch: &Launch) -> Option<crate::Child> {
        if self.fresh.changed() || Basis::now(skill, launch) != self.basis {
            return None;
        }
        self.child.start_prepared(self.commit.as_fd()).ok()?;
        Some(self.child)
    }
}

/// Wait until the control socket has a line for the host (true) or its
/// peer closed it (false), consuming nothing.
pub(super) fn wait_for_call(control: BorrowedFd<'_>) -> bool {
    loop {
        let mut set = PollSet::default();
        set.add(control, PollFlags::POLLIN);
        if set.wait([None]).is_err() {
            return false;
        }
        let mut byte = [0u8; 1];
        match nix::sys::socket::recv(
            control.as_raw_fd(),
            &mut byte,
            MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT,
        ) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_basis_changes_with_the_skill_the_grants_and_the_audit_file() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("s");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: s\ndescription: d\nruntime: sh\nmain: main.sh\n---\n",
        )
        .unwrap();
        std::fs::write(dir.join("main.sh"), "true\n").unwrap();
        let skill = super::super::manifest::load(&dir).unwrap();
        let audit = root.path().join("audit.jsonl");
        std::fs::write(&audit, "").unwrap();
        let launch = Launch {
            profile: crate::profile::load("strict").unwrap(),
            project: root.path().to_path_buf(),
            grants: Vec::new(),
            audit: Some(audit.clone()),
            interactive: false,
            ask_client: false,
            question_timeout: std::time::Duration::from_secs(1),
            prepare_ahead: true,
        };
        let grants = root.path().join("grants.json");
        let now = || Basis::with_grants_at(&skill, &launch, &grants);
        let first = now();
        assert_eq!(now(), first);
        // Appending to the audit is what every activation does.
        std::fs::write(&audit, "{}\n").unwrap();
        assert_eq!(now(), first);
        // A rotated audit file is another file.
        std::fs::rename(&audit, root.path().join("audit.old")).unwrap();
        std::fs::write(&audit, "").unwrap();
        let rotated = now();
        assert_ne!(rotated, first);
        // A grant stored or revoked since.
        std::fs::write(&grants, "[]").unwrap();
        let granted = now();
        assert_ne!(granted, rotated);
        std::fs::write(dir.join("main.sh"), "echo edited\n").unwrap();
        assert_ne!(now(), granted);
    }
}
