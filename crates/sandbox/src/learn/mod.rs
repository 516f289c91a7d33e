//! What a learning run (`sandbox learn`) observed: the host paths its
//! command looked for outside the view, the writes the view refused, and
//! the system calls the profile's filter refused.
//!
//! The mechanism, and why: Landlock's own denial records reach only a
//! reader of the audit log with CAP_AUDIT_READ in the initial namespace
//! (root), and turning the layers off to trace (what other sandboxes do)
//! runs untrusted code unconfined. Seccomp user notification works for an
//! ordinary user: the payload installs, in place of the policy's filter,
//! the same program with its refusals and its path-bearing calls sent to a
//! listener ([`crate::seccomp::learning`]), and hands the listener to the
//! supervisor. The supervisor answers each call as the policy's own
//! program does: a refused call gets exactly its errno (and is noted, with
//! whether a profile entry could lift it), an allowed one "continue" after
//! its path is read from the caller's memory. So the observer decides
//! nothing: the view and Landlock are BASE's (plus, in later passes, the
//! reads learned so far), the system calls are BASE's, and a learning run
//! is exactly as confined as a run of the profile it starts from; writes,
//! the network and capabilities are never widened.
//!
//! A path counts as needed when the call's path, resolved in the caller's
//! own root (`/proc/PID/root`, with symlinks kept inside it), is missing
//! there while it exists on the host. Paths nowhere on the host (the
//! interpreters' search paths) are not needs.

mod observer;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

pub(crate) use observer::Observer;

/// How a path was used, weakest first: a learned entry is the narrowest
/// that serves the strongest use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Use {
    /// Looked up only (stat, access, readlink).
    Lookup,
    /// Opened for reading.
    Read,
    /// Opened as a directory (listed).
    List,
    /// Executed.
    Exec,
    /// Created or opened for writing (only ever a refusal: never learned).
    Write,
}

impl Use {
    /// How the profile comment says it.
    pub fn verb(self) -> &'static str {
        match self {
            Use::Lookup => "looked up",
            Use::Read => "read",
            Use::List => "listed",
            Use::Exec => "executed",
            Use::Write => "written",
        }
    }
}

/// One path's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The strongest use.
    pub strongest: Use,
    /// How many calls named it.
    pub count: u64,
    /// The programs (their `comm`) that named it, at most a few.
    pub by: BTreeSet<String>,
    /// Whether it is a directory on the host.
    pub is_dir: bool,
}

/// Most program names kept per path.
const MAX_NAMES: usize = 4;

/// Most paths kept in each of [`Observations`]' lists: a command that
/// names a new path in every call would otherwise grow the supervisor
/// without end. Past it, calls are only counted in
/// [`Observations::unrecorded`].
pub const MAX_PATHS: usize = 4096;

impl Seen {
    fn add(&mut self, used: Use, by: &str) {
        self.strongest = self.strongest.max(used);
        self.count += 1;
        if self.by.len() < MAX_NAMES {
            self.by.insert(by.to_owned());
        }
    }
}

/// One system call the profile's filter refused while learning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedCall {
    /// The errno it was answered with (the profile's).
    pub errno: i32,
    /// How many times.
    pub count: u64,
    /// The programs (their `comm`) that made it, at most a few.
    pub by: BTreeSet<String>,
    /// Whether a profile entry ([`crate::seccomp::allowing`]) would have
    /// let some of these calls through; otherwise the built-in deny list
    /// or a rule on its arguments refused them, which no profile lifts.
    pub liftable: bool,
}

/// Everything one or more learning runs observed.
#[derive(Debug, Default, Clone)]
pub struct Observations {
    /// Host paths the command looked for that its view did not show.
    pub needed: BTreeMap<PathBuf, Seen>,
    /// Paths the command tried to create or open for writing outside what
    /// BASE lets it write: refused by the view and Landlock, never learned.
    pub writes_refused: BTreeMap<PathBuf, Seen>,
    /// Paths the profile hides (`[filesystem] hide`): they stay hidden.
    pub hidden: BTreeMap<PathBuf, Seen>,
    /// System calls the profile's filter refused, by name (`#NR` for a
    /// number this build has no name for).
    pub refused_calls: BTreeMap<String, RefusedCall>,
    /// Observed calls whose path could not be read or resolved.
    pub unresolved: u64,
    /// Calls naming a new path after a list held [`MAX_PATHS`].
    pub unrecorded: u64,
    /// Observed calls in all.
    pub calls: u64,
}

impl Observations {
    /// False when the list is full and `path` is not in it.
    fn record(
        map: &mut BTreeMap<PathBuf, Seen>,
        path: PathBuf,
        used: Use,
        by: &str,
        is_dir: bool,
    ) -> bool {
        if map.len() >= MAX_PATHS && !map.contains_key(&path) {
            return false;
        }
        map.entry(path)
            .or_insert_with(|| Seen {
                strongest: used,
                count: 0,
                by: BTreeSet::new(),
                is_dir,
            })
            .add(used, by);
        true
    }

    /// Note one refused call; false when the list is full and `name` is
    /// not in it.
    pub(crate) fn record_refusal(
        &mut self,
        name: String,
        errno: i32,
        liftable: bool,
        by: &str,
    ) -> bool {
        let map = &mut self.refused_calls;
        if map.len() >= MAX_PATHS && !map.contains_key(&name) {
            return false;
        }
        let entry = map.entry(name).or_insert_with(|| RefusedCall {
            errno,
            count: 0,
            by: BTreeSet::new(),
            liftable,
        });
        entry.count += 1;
        entry.liftable |= liftable;
        if entry.by.len() < MAX_NAMES {
            entry.by.insert(by.to_owned());
        }
        true
    }

    /// Fold `other` (a later pass) into these.
    pub fn merge(&mut self, other: Observations) {
        let mut unrecorded = 0;
        for (target, source) in [
            (&mut self.needed, other.needed),
            (&mut self.writes_refused, other.writes_refused),
            (&mut self.hidden, other.hidden),
        ] {
            for (path, seen) in source {
                let full = target.len() >= MAX_PATHS;
                match target.get_mut(&path) {
                    Some(mine) => {
                        mine.strongest = mine.strongest.max(seen.strongest);
                        mine.count += seen.count;
                        for name in seen.by {
                            if mine.by.len() < MAX_NAMES {
                                mine.by.insert(name);
                            }
                        }
                    }
                    None if full => unrecorded += seen.count,
                    None => {
                        target.insert(path, seen);
                    }
                }
            }
        }
        for (name, call) in other.refused_calls {
            if let Some(mine) = self.refused_calls.get_mut(&name) {
                mine.count += call.count;
                mine.liftable |= call.liftable;
                for by in call.by {
                    if mine.by.len() < MAX_NAMES {
                        mine.by.insert(by);
                    }
                }
            } else if self.refused_calls.len() >= MAX_PATHS {
                unrecorded += call.count;
            } else {
                self.refused_calls.insert(name, call);
            }
        }
        self.unrecorded += unrecorded;
        self.unresolved += other.unresolved;
        self.unrecorded += other.unrecorded;
        self.calls += other.calls;
    }
}

/// What the caller of a learning run hands the supervisor: where to put
/// what it observes, and the directories learned so far only because they
/// were looked up, beneath which every use is recorded though the view now
/// shows it (so that the narrower entries replace them).
#[derive(Debug, Clone, Default)]
pub struct Learning {
    /// Filled by the supervisor as the run goes.
    pub observed: std::sync::Arc<std::sync::Mutex<Observations>>,
    /// Directories shown for now, whose uses are still recorded.
    pub provisional: Vec<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_command_naming_endless_paths_grows_no_list_past_its_bound() {
        let mut observed = Observations::default();
        for n in 0..=MAX_PATHS {
            let path = PathBuf::from(format!("/x/{n}"));
            let kept =
                Observations::record(&mut observed.writes_refused, path, Use::Write, "sh", false);
            assert_eq!(kept, n < MAX_PATHS);
        }
        assert_eq!(observed.writes_refused.len(), MAX_PATHS);
        // A path already kept is still counted.
        assert!(Observations::record(
            &mut observed.writes_refused,
            PathBuf::from("/x/0"),
            Use::Write,
            "sh",
            false
        ));
        assert_eq!(observed.writes_refused[Path::new("/x/0")].count, 2);
        let mut more = Observations::default();
        Observations::record(
            &mut more.writes_refused,
            PathBuf::from("/y"),
            Use::Write,
            "sh",
            false,
        );
        observed.merge(more);
        assert_eq!(observed.writes_refused.len(), MAX_PATHS);
        assert_eq!(observed.unrecorded, 1);
    }
}
