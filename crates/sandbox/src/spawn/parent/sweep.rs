//! The sweep after a run: protected entries the run created are moved
//! aside, and a run without namespaces gets its snapshot back.

use std::path::PathBuf;

use crate::spawn::prepare::Prepared;

/// What the sweep after a run needs: it runs once every process of the run
/// is gone, from [`Running::wait`], from dropping a [`Running`], or from the
/// janitor when the supervisor itself was killed.
#[derive(Debug, Clone)]
pub(super) struct SweepPlan {
    root: std::path::PathBuf,
    rules: crate::project::Rules,
    before: std::collections::HashMap<std::path::PathBuf, crate::project::scan::Identity>,
    /// The directories the scan listed, which the sweep need not list
    /// again while they are unchanged.
    listed: std::collections::HashMap<std::path::PathBuf, crate::project::scan::ListedDir>,
    run: String,
    /// The project's watcher that answered for the walk: when it saw no
    /// change at all since, the run made no name the sweep could find.
    watched: Option<crate::project::scan::Answered>,
    /// Without namespaces: the protected entries to put back.
    restore: Option<std::sync::Arc<crate::project::quarantine::Snapshot>>,
    /// Without namespaces: the private temporary directory to remove.
    private_tmp: Option<PathBuf>,
}

impl SweepPlan {
    pub(super) fn for_run(prepared: &Prepared) -> Option<SweepPlan> {
        let without = prepared.started.no_namespaces.as_ref();
        // A review run writes nothing into the project (its changes are in
        // its layer), so what appears there meanwhile is the host's own,
        // which the sweep must not move aside.
        if prepared.config.policy.filesystem.review && without.is_none() {
            return None;
        }
        let scan = prepared.config.scan.as_ref();
        let writable = prepared.config.policy.filesystem.project
            == crate::profile::policy::ProjectAccess::ReadWrite;
        if without.is_none() && !(writable && scan.is_some()) {
            return None;
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        Some(SweepPlan {
            root: prepared.planned.project.clone(),
            rules: prepared.config.project_rules.clone(),
            before: scan
                .filter(|_| writable)
                .map(|s| s.protected_before.clone())
                .unwrap_or_default(),
            listed: scan
                .filter(|_| writable)
                .map(|s| s.listed_dirs.clone())
                .unwrap_or_default(),
            run: format!("{:x}-{}", stamp, std::process::id()),
            watched: scan.and_then(|s| s.watcher),
            restore: without.and_then(|w| w.snapshot.clone()),
            private_tmp: without.map(|w| w.private_tmp.clone()),
        })
    }

    pub(super) fn run(&self) -> crate::project::quarantine::Sweep {
        use crate::project::quarantine::{self, Sweep};
        use crate::project::watcher::{changed_since, Since};
        let writable = !self.before.is_empty() || self.restore.is_some();
        // Every process of the run is gone, so every change it made is an
        // event the watcher has queued: none means no new or swapped name,
        // and where there were some, the watcher says where.
        let since = || {
            self.watched.map_or(Since::Anything, |answered| {
                changed_since(&self.root, &answered)
            })
        };
        let swept = if !writable && self.private_tmp.is_some() {
            Ok(Sweep::default())
        } else if self.restore.is_some() {
            quarantine::sweep(
                &self.root,
                &self.rules,
                &self.before,
                &self.listed,
                &self.run,
            )
        } else {
            match since() {
                Since::Nothing => Ok(Sweep::default()),
                Since::Only(changes) => quarantine::sweep_changes(
                    &self.root,
                    &self.rules,
                    &self.before,
                    &changes,
                    &self.run,
                ),
                Since::Anything => quarantine::sweep(
                    &self.root,
                    &self.rules,
                    &self.before,
                    &self.listed,
                    &self.run,
                ),
            }
        };
        let mut sweep = swept.unwrap_or_else(|err| Sweep {
            failed: vec![(std::path::PathBuf::new(), err.to_string())],
            ..Default::default()
        });
        // After the sweep, which moves aside what is no longer the object
        // the scan saw: the snapshot then fills those places again, and
        // also catches what was changed in place.
        if let Some(snapshot) = &self.restore {
            crate::project::quarantine::restore(&self.root, snapshot, &self.run, &mut sweep);
        }
        if let Some(dir) = &self.private_tmp {
            let _ = std::fs::remove_dir_all(dir);
        }
        sweep
    }
}
