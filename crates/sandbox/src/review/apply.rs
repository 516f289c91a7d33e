//! Applying a kept run's changes: where the host's rules hold.
//!
//! Every selected change is checked before anything is written, and one
//! refusal or conflict applies nothing: each is named, with the flag that
//! allows it where one does. A conflict (the project changed there since
//! the run started) has no flag: it is never silently overwritten.
//!
//! Writing follows no link in the project: every parent directory is
//! opened beneath the project root with `RESOLVE_NO_SYMLINKS`. A file is
//! written as an unnamed temporary (`O_TMPFILE`) in its own directory,
//! synced, given a name and renamed over the old one, so an interrupted
//! apply leaves either the old file or the new one, never part of one.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;

use super::capture::{kind_of, list, open_dir_at, stat_at};
use super::{Change, ChangeKind, Entry, EntryKind, Refusal, ReviewError, Started, Store};
use crate::safe_file::{openat2_beneath, Beneath};

/// What the person allows beyond the defaults (each a flag of `sandbox
/// apply`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Allow {
    /// Protected entries: git hooks and config, agent and editor settings,
    /// `.sandbox/`, `.skills/`, shell start-up files (`--allow-protected`).
    pub protected: bool,
    /// CI definitions: `.github/workflows/`, `.gitlab-ci.yml` (`--allow-ci`).
    pub ci: bool,
    /// Files with the set-user-id or set-group-id bit (`--allow-setid`).
    pub setid: bool,
    /// Symlinks that point outside the project (`--allow-outside-links`).
    pub outside_links: bool,
    /// Files the run hard-linked together, written as separate files
    /// (`--allow-hardlinks`).
    pub hardlinks: bool,
    /// Names of secrets (`--allow-secrets`).
    pub secrets: bool,
    /// The changes of a run that filled its layer (`--allow-incomplete`).
    pub incomplete: bool,
}

/// What an apply did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Applied {
    /// The paths written or removed, in order.
    pub applied: Vec<String>,
    /// Changes the run still keeps (0: the run was removed from the store).
    pub remaining: usize,
}

/// What applying would do, worked out without writing anything: what a
/// person is shown before they accept (the MCP face's `apply_changes`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    /// The run.
    pub id: String,
    /// The project the run's changes go to.
    pub project: PathBuf,
    /// The changes that would be applied, in order.
    pub changes: Vec<Change>,
    /// Why they would not be (empty: apply would go ahead).
    pub refusals: Vec<Refusal>,
}

impl Plan {
    /// The paths it would write or remove, in order.
    pub fn paths(&self) -> Vec<&str> {
        self.changes.iter().map(|c| c.path.as_str()).collect()
    }
}

/// The changes of run `id` below `paths` (all when empty), and every
/// reason `apply` with `allow` would refuse them now.
pub fn plan(store: &Store, id: &str, paths: &[String], allow: Allow) -> Result<Plan, ReviewError> {
    let _lock = store.lock(id)?;
    let prepared = prepare(store, id, paths, allow)?;
    Ok(Plan {
        id: id.to_owned(),
        project: prepared.started.project.clone(),
        changes: prepared
            .selected
            .iter()
            .map(|&i| prepared.captured.changes[i].clone())
            .collect(),
        refusals: prepared.refusals,
    })
}

/// Apply the changes of run `id` below `paths` (all of them when empty).
pub fn apply(
    store: &Store,
    id: &str,
    paths: &[String],
    allow: Allow,
) -> Result<Applied, ReviewError> {
    let _lock = store.lock(id)?;
    write(store, id, prepare(store, id, paths, allow)?)
}

/// Apply exactly what `accepted` showed a person: checked again under the
/// run's lock, and refused whole if the changes it would write are no
/// longer the ones accepted (applied or discarded meanwhile, or a path
/// selection that now means more).
pub fn apply_plan(store: &Store, accepted: &Plan, allow: Allow) -> Result<Applied, ReviewError> {
    let _lock = store.lock(&accepted.id)?;
    let paths: Vec<String> = accepted.paths().iter().map(|p| (*p).to_owned()).collect();
    let prepared = prepare(store, &accepted.id, &paths, allow)?;
    let now: Vec<&Change> = prepared
        .selected
        .iter()
        .map(|&i| &prepared.captured.changes[i])
        .collect();
    let same = now.len() == accepted.changes.len()
        && now.iter().zip(&accepted.changes).all(|(a, b)| *a == b);
    if !same {
        return Err(ReviewError::Refused(vec![Refusal {
            path: None,
            reason: "the run's changes are no longer the ones accepted (applied, discarded or changed meanwhile); look at them again".into(),
            flag: None,
        }]));
    }
    write(store, &accepted.id, prepared)
}

/// A run's changes selected and checked, under its lock.
struct Prepared {
    started: Started,
    captured: super::Captured,
    selected: Vec<usize>,
    root: OwnedFd,
    refusals: Vec<Refusal>,
}

fn prepare(
    store: &Store,
    id: &str,
    paths: &[String],
    allow: Allow,
) -> Result<Prepared, ReviewError> {
    let started = store.started(id)?;
    let captured = store.changes(id)?;
    let selected = select(&captured.changes, paths)?;
    let root = super::changes::open_root(&started.project)?;
    let mut refusals = Vec::new();
    if captured.limit_reached && !allow.incomplete {
        refusals.push(Refusal {
            path: None,
            reason: format!(
                "the run filled its layer ({} bytes), so some of its writes failed and its changes may be partial",
                started.limit
            ),
            flag: Some("--allow-incomplete".into()),
        });
    }
    let rules = crate::project::Rules::new(&started.secrets, &started.protect).map_err(|err| {
        ReviewError::Refused(vec![Refusal {
            path: None,
            reason: format!("the run's profile patterns no longer parse: {err}"),
            flag: None,
        }])
    })?;
    // Every link the run would leave, applied now or later: a link's
    // target is judged through them as through the project's own.
    let pending_links: HashSet<&str> = captured
        .changes
        .iter()
        .filter(|c| !c.applied && matches!(c.after, Some(Entry::Symlink { .. })))
        .map(|c| c.path.as_str())
        .collect();
    for &index in &selected {
        check(
            &captured.changes[index],
            &started,
            (&rules, &pending_links),
            allow,
            root.as_fd(),
            &mut refusals,
        );
    }
    Ok(Prepared {
        started,
        captured,
        selected,
        root,
        refusals,
    })
}

/// Write what `prepared` selected, unless anything was refused.
fn write(store: &Store, id: &str, prepared: Prepared) -> Result<Applied, ReviewError> {
    let Prepared {
        mut captured,
        selected,
        root,
        refusals,
        ..
    } = prepared;
    if !refusals.is_empty() {
        return Err(ReviewError::Refused(refusals));
    }
    let layer = store.layer_dir(id)?;
    let layer = nix::fcntl::open(
        &layer,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|source| ReviewError::Layer {
        path: layer.clone(),
        source,
    })?;
    let mut applied = Applied::default();
    let mut result = Ok(());
    for &index in &selected {
        let change = &captured.changes[index];
        let written = kept_content(layer.as_fd(), change).and_then(|content| {
            write_change(root.as_fd(), content.as_deref(), change).map_err(|source| {
                ReviewError::Apply {
                    path: change.path.clone(),
                    source,
                }
            })
        });
        if let Err(err) = written {
            result = Err(err);
            break;
        }
        applied.applied.push(change.path.clone());
        captured.changes[index].applied = true;
    }
    applied.remaining = captured.changes.iter().filter(|c| !c.applied).count();
    if applied.remaining == 0 && result.is_ok() {
        store.remove(id)?;
    } else {
        store.save_changes(id, &captured)?;
    }
    result.map(|()| applied)
}

/// The indices of the pending changes at or below `paths`, with the new
/// directories they need; all pending changes when `paths` is empty.
fn select(changes: &[Change], paths: &[String]) -> Result<Vec<usize>, ReviewError> {
    let pending = |c: &&Change| !c.applied;
    if paths.is_empty() {
        return Ok((0..changes.len())
            .filter(|&i| pending(&&changes[i]))
            .collect());
    }
    let mut chosen = vec![false; changes.len()];
    for asked in paths {
        let asked = asked.trim_start_matches("./").trim_end_matches('/');
        let mut any = false;
        for (i, change) in changes.iter().enumerate().filter(|(_, c)| pending(c)) {
            let below = change.path == asked
                || change
                    .path
                    .strip_prefix(asked)
                    .is_some_and(|rest| rest.starts_with('/'))
                || asked.is_empty();
            if below {
                chosen[i] = true;
                any = true;
            }
        }
        if !any {
            return Err(ReviewError::NotAChange(asked.to_owned()));
        }
    }
    // A new file needs its new directories.
    for i in 0..changes.len() {
        if !chosen[i] {
            continue;
        }
        for ancestor in Path::new(&changes[i].path).ancestors().skip(1) {
            if let Some(j) = changes.iter().position(|c| {
                Path::new(&c.path) == ancestor && c.kind == ChangeKind::Added && !c.applied
            }) {
                chosen[j] = true;
            }
        }
    }
    Ok((0..changes.len()).filter(|&i| chosen[i]).collect())
}

fn is_ci(path: &str) -> bool {
    path == ".gitlab-ci.yml"
        || path == ".github/workflows"
        || path.starts_with(".github/workflows/")
}

/// Every reason `change` may not be applied as it stands.
fn check(
    change: &Change,
    started: &Started,
    (rules, pending_links): (&crate::project::Rules, &HashSet<&str>),
    allow: Allow,
    root: BorrowedFd<'_>,
    refusals: &mut Vec<Refusal>,
) {
    let path = change.path.as_str();
    named_rules(path, rules, allow, refusals);
    match &change.after {
        Some(Entry::File { mode, links, .. }) => {
            if mode & 0o6000 != 0 && !allow.setid {
                refusals.push(Refusal::at(
                    path,
                    format!("a set-user-id or set-group-id file (mode {mode:04o})"),
                    Some("--allow-setid"),
                ));
            }
            if *links > 1 && !allow.hardlinks {
                refusals.push(Refusal::at(path, format!("one of {links} hard links the run made to one file (the flag writes each as a file of its own)"), Some("--allow-hardlinks")));
            }
        }
        Some(Entry::Symlink { target }) => {
            if !allow.outside_links && !link_stays_inside(path, target) {
                refusals.push(Refusal::at(
                    path,
                    format!("a symlink to {target}, outside the project"),
                    Some("--allow-outside-links"),
                ));
            } else if !allow.outside_links {
                if let Some(through) = link_on_the_way(path, target, pending_links, root) {
                    refusals.push(Refusal::at(
                        path,
                        format!("a symlink to {target}, which passes through the symlink {through}, so where it leads cannot be told from its text"),
                        Some("--allow-outside-links"),
                    ));
                }
            }
        }
        Some(Entry::Special { mode }) => refusals.push(Refusal::at(
            path,
            format!(
                "a device, FIFO, socket or unrepresentable name (mode {mode:o}): never applied"
            ),
            None,
        )),
        Some(Entry::Dir { .. }) | None => {}
    }
    conflicts(change, started, rules, allow, root, refusals);
}

fn named_rules(
    path: &str,
    rules: &crate::project::Rules,
    allow: Allow,
    refusals: &mut Vec<Refusal>,
) {
    if !allow.protected && rules.protected_in(path) {
        refusals.push(Refusal::at(
            path,
            "protected (the host runs or trusts it later)",
            Some("--allow-protected"),
        ));
    }
    if !allow.ci && is_ci(path) {
        refusals.push(Refusal::at(
            path,
            "a CI definition (it runs on the next push)",
            Some("--allow-ci"),
        ));
    }
    if !allow.secrets && rules.secret_in(path) {
        refusals.push(Refusal::at(
            path,
            "a secret's name (hidden from runs)",
            Some("--allow-secrets"),
        ));
    }
}

/// Whether `target`, read from the link at `path`, names something below
/// the project root (judged by its text: `..` may not climb out).
fn link_stays_inside(path: &str, target: &str) -> bool {
    if target.starts_with('/') {
        return false;
    }
    let mut depth: i64 = Path::new(path)
        .parent()
        .map_or(0, |p| p.components().count() as i64);
    for component in Path::new(target).components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

/// The first symlink that resolving `target` from the link at `path`
/// passes through: one the run would leave, or one the project has. Its
/// text alone then says nothing about where the link leads: a run's
/// `r -> ../..` ahead of `k -> r/../../etc/passwd` makes two links that
/// each read as inside the project and together lead to /etc/passwd.
fn link_on_the_way(
    path: &str,
    target: &str,
    pending_links: &HashSet<&str>,
    root: BorrowedFd<'_>,
) -> Option<String> {
    let mut at: Vec<String> = Path::new(path)
        .parent()
        .map(|p| p.iter().map(|c| c.to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    for component in Path::new(target).components() {
        match component {
            Component::ParentDir => {
                at.pop();
            }
            Component::Normal(name) => {
                at.push(name.to_string_lossy().into_owned());
                let prefix = at.join("/");
                if pending_links.contains(prefix.as_str()) {
                    return Some(prefix);
                }
                match lstat_beneath(root, &prefix) {
                    Ok(Some(stat)) if kind_of(&stat) == EntryKind::Symlink => return Some(prefix),
                    // A directory on the way is a link in the project.
                    Err(Errno::ELOOP) => return Some(prefix),
                    _ => {}
                }
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    None
}

/// Conflicts: what the project has at `change.path` now differs from what
/// the run saw (kind, or changed at or after the run's start).
fn conflicts(
    change: &Change,
    started: &Started,
    rules: &crate::project::Rules,
    allow: Allow,
    root: BorrowedFd<'_>,
    refusals: &mut Vec<Refusal>,
) {
    let path = change.path.as_str();
    let now = match lstat_beneath(root, path) {
        Ok(now) => now,
        Err(Errno::ELOOP) => {
            refusals.push(Refusal::at(
                path,
                "conflict: a directory on its way is now a symlink in the project",
                None,
            ));
            return;
        }
        Err(errno) => {
            refusals.push(Refusal::at(
                path,
                format!("cannot be looked at in the project: {errno}"),
                None,
            ));
            return;
        }
    };
    match (change.before, now) {
        (None, None) => {}
        (None, Some(_)) => refusals.push(Refusal::at(
            path,
            "conflict: the project has it now, and had none when the run ended",
            None,
        )),
        (Some(_), None) => refusals.push(Refusal::at(
            path,
            "conflict: removed from the project since the run started",
            None,
        )),
        (Some(kind), Some(stat)) => {
            if kind_of(&stat) != kind {
                refusals.push(Refusal::at(
                    path,
                    "conflict: its kind changed in the project",
                    None,
                ));
            } else if changed_since(&stat, started)
                && !(kind == EntryKind::Dir && change.kind != ChangeKind::Deleted)
            {
                refusals.push(Refusal::at(
                    path,
                    "conflict: changed in the project since the run started",
                    None,
                ));
            }
            // A directory the run removed, or replaced by a file or a
            // link: apply removes everything in it, so everything in it
            // is checked as a deletion.
            if kind == EntryKind::Dir && !matches!(change.after, Some(Entry::Dir { .. })) {
                subtree(root, path, started, rules, allow, refusals);
            }
        }
    }
}

/// A directory the run deleted: nothing in it may have changed since the
/// run started, nor be protected, a CI definition or a secret.
fn subtree(
    root: BorrowedFd<'_>,
    path: &str,
    started: &Started,
    rules: &crate::project::Rules,
    allow: Allow,
    refusals: &mut Vec<Refusal>,
) {
    let spec = Beneath::new(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC).no_symlinks();
    let Ok(dir) = openat2_beneath(root, Path::new(path), spec) else {
        refusals.push(Refusal::at(path, "cannot be opened in the project", None));
        return;
    };
    for name in list(dir.as_fd()).unwrap_or_default() {
        let child = format!("{path}/{}", name.to_string_lossy());
        named_rules(&child, rules, allow, refusals);
        let Some(stat) = stat_at(dir.as_fd(), &name) else {
            continue;
        };
        if changed_since(&stat, started) {
            refusals.push(Refusal::at(
                &child,
                "conflict: changed in the project since the run started",
                None,
            ));
        }
        if kind_of(&stat) == EntryKind::Dir {
            subtree(root, &child, started, rules, allow, refusals);
        }
    }
}

fn changed_since(stat: &FileStat, started: &Started) -> bool {
    let ctime = i128::from(stat.st_ctime) * 1_000_000_000 + i128::from(stat.st_ctime_nsec);
    ctime >= started.started_ns
}

/// The project's entry at `relative`, no link followed on the way.
fn lstat_beneath(root: BorrowedFd<'_>, relative: &str) -> Result<Option<FileStat>, Errno> {
    let (parent, name) = split(relative);
    let dir = match open_parent(root, &parent) {
        Ok(dir) => dir,
        Err(Errno::ENOENT) => return Ok(None),
        Err(errno) => return Err(errno),
    };
    Ok(stat_at(dir.as_fd(), &name))
}

fn split(relative: &str) -> (PathBuf, OsString) {
    let path = Path::new(relative);
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let name = path
        .file_name()
        .map(OsStr::to_os_string)
        .unwrap_or_default();
    (parent, name)
}

fn open_parent(root: BorrowedFd<'_>, parent: &Path) -> Result<OwnedFd, Errno> {
    let spec = Beneath::new(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC).no_symlinks();
    if parent.as_os_str().is_empty() {
        return openat2_beneath(root, Path::new("."), spec);
    }
    openat2_beneath(root, parent, spec)
}

/// The content the store keeps for a file `change`, checked against the
/// record: opened beneath the run's layer following no link, a plain
/// file of exactly the recorded size and SHA-256. What a person saw in
/// `sandbox changes` is what is written, even if someone changed the
/// store since. None for a change that is not a file.
fn kept_content(layer: BorrowedFd<'_>, change: &Change) -> Result<Option<Vec<u8>>, ReviewError> {
    let Some(Entry::File { size, sha256, .. }) = &change.after else {
        return Ok(None);
    };
    let tampered = |why: String| ReviewError::Tampered {
        path: change.path.clone(),
        why,
    };
    let spec =
        Beneath::new(OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK)
            .no_symlinks();
    let fd = openat2_beneath(layer, Path::new(&change.path), spec)
        .map_err(|errno| tampered(format!("it cannot be opened as a plain file: {errno}")))?;
    let stat = nix::sys::stat::fstat(&fd).map_err(|errno| tampered(errno.to_string()))?;
    if SFlag::from_bits_truncate(stat.st_mode & libc::S_IFMT) != SFlag::S_IFREG {
        return Err(tampered("it is no longer a plain file".into()));
    }
    let mut content = Vec::new();
    std::io::Read::take(std::fs::File::from(fd), size.saturating_add(1))
        .read_to_end(&mut content)
        .map_err(|err| tampered(err.to_string()))?;
    if content.len() as u64 != *size {
        return Err(tampered(format!(
            "{} bytes, recorded {size}",
            content.len()
        )));
    }
    let digest = super::capture::hex(&<sha2::Sha256 as sha2::Digest>::digest(&content));
    if &digest != sha256 {
        return Err(tampered(format!(
            "sha256 {}, recorded {}",
            &digest[..16],
            &sha256[..16.min(sha256.len())]
        )));
    }
    Ok(Some(content))
}

/// Write one change into the project (`content`: a file's, checked).
fn write_change(
    root: BorrowedFd<'_>,
    content: Option<&[u8]>,
    change: &Change,
) -> Result<(), Errno> {
    let (parent, name) = split(&change.path);
    let dir = open_parent(root, &parent)?;
    let existing = stat_at(dir.as_fd(), &name);
    let existing_kind = existing.as_ref().map(kind_of);
    let dir_stat = nix::sys::stat::fstat(&dir)?;
    match &change.after {
        None => remove(dir.as_fd(), &name, existing_kind),
        Some(Entry::Dir { mode, .. }) => {
            if existing_kind.is_some_and(|k| k != EntryKind::Dir) {
                remove(dir.as_fd(), &name, existing_kind)?;
            }
            match nix::sys::stat::mkdirat(
                dir.as_fd(),
                name.as_os_str(),
                Mode::from_bits_truncate(0o700),
            ) {
                Ok(()) => {
                    let made = open_dir_at(dir.as_fd(), &name)?;
                    keep_owner(made.as_fd(), &dir_stat)?;
                    nix::sys::stat::fchmod(&made, Mode::from_bits_truncate(mode & 0o7777))
                }
                Err(Errno::EEXIST) => {
                    let made = open_dir_at(dir.as_fd(), &name)?;
                    nix::sys::stat::fchmod(&made, Mode::from_bits_truncate(mode & 0o7777))
                }
                Err(errno) => Err(errno),
            }
        }
        Some(Entry::File { mode, .. }) => {
            if existing_kind == Some(EntryKind::Dir) {
                remove(dir.as_fd(), &name, existing_kind)?;
            }
            let owner = match (&existing, existing_kind) {
                (Some(stat), Some(EntryKind::File)) => stat,
                _ => &dir_stat,
            };
            let content = content.ok_or(Errno::EINVAL)?;
            write_file(dir.as_fd(), &name, content, *mode, owner)
        }
        Some(Entry::Symlink { target }) => {
            if existing_kind == Some(EntryKind::Dir) {
                remove(dir.as_fd(), &name, existing_kind)?;
            }
            let temporary = temporary_name(&name);
            let _ = nix::unistd::unlinkat(
                dir.as_fd(),
                temporary.as_os_str(),
                UnlinkatFlags::NoRemoveDir,
            );
            nix::unistd::symlinkat(target.as_str(), dir.as_fd(), temporary.as_os_str())?;
            if nix::unistd::geteuid().is_root() {
                nix::unistd::fchownat(
                    dir.as_fd(),
                    temporary.as_os_str(),
                    Some(nix::unistd::Uid::from_raw(dir_stat.st_uid)),
                    Some(nix::unistd::Gid::from_raw(dir_stat.st_gid)),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )?;
            }
            nix::fcntl::renameat(
                dir.as_fd(),
                temporary.as_os_str(),
                dir.as_fd(),
                name.as_os_str(),
            )?;
            nix::unistd::fsync(&dir)
        }
        Some(Entry::Special { .. }) => Err(Errno::EPERM),
    }
}

/// Write `content` as `name` in `dir`: an unnamed file, synced, then
/// named and renamed over the old one.
fn write_file(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    mode: u32,
    owner: &FileStat,
) -> Result<(), Errno> {
    let fd = nix::fcntl::openat(
        dir,
        ".",
        OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    keep_owner(fd.as_fd(), owner)?;
    let mut file = std::fs::File::from(fd);
    file.write_all(content)
        .and_then(|()| file.sync_all())
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
    nix::sys::stat::fchmod(&file, Mode::from_bits_truncate(mode & 0o7777))?;
    let temporary = temporary_name(name);
    let _ = nix::unistd::unlinkat(dir, temporary.as_os_str(), UnlinkatFlags::NoRemoveDir);
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    nix::unistd::linkat(
        nix::fcntl::AT_FDCWD,
        proc_path.as_str(),
        dir,
        temporary.as_os_str(),
        AtFlags::AT_SYMLINK_FOLLOW,
    )?;
    if let Err(errno) = nix::fcntl::renameat(dir, temporary.as_os_str(), dir, name) {
        let _ = nix::unistd::unlinkat(dir, temporary.as_os_str(), UnlinkatFlags::NoRemoveDir);
        return Err(errno);
    }
    nix::unistd::fsync(dir)
}

fn temporary_name(name: &OsStr) -> OsString {
    let mut temporary = OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".sandbox-apply-{}", std::process::id()));
    temporary
}

/// A root apply gives what it writes to the owner of what it replaces (or
/// of the directory it lands in); an unprivileged one writes as its user,
/// the project owner's when they run it.
fn keep_owner(fd: BorrowedFd<'_>, owner: &FileStat) -> Result<(), Errno> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    nix::unistd::fchown(
        fd,
        Some(nix::unistd::Uid::from_raw(owner.st_uid)),
        Some(nix::unistd::Gid::from_raw(owner.st_gid)),
    )
}

/// Remove `name` from `dir`: a directory with everything in it, never
/// following a link.
fn remove(dir: BorrowedFd<'_>, name: &OsStr, kind: Option<EntryKind>) -> Result<(), Errno> {
    match kind {
        None => Ok(()),
        Some(EntryKind::Dir) => {
            let inner = open_dir_at(dir, name)?;
            for child in list(inner.as_fd())? {
                let child_kind = stat_at(inner.as_fd(), &child).map(|s| kind_of(&s));
                remove(inner.as_fd(), &child, child_kind)?;
            }
            nix::unistd::unlinkat(dir, name, UnlinkatFlags::RemoveDir)
        }
        Some(_) => nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_judged_by_where_their_text_leads() {
        assert!(link_stays_inside("a/b", "c"));
        assert!(link_stays_inside("a/b", "../c"));
        assert!(!link_stays_inside("a/b", "../../c"));
        assert!(!link_stays_inside("b", "../x"));
        assert!(!link_stays_inside("b", "/etc/passwd"));
        assert!(!link_stays_inside("a/b", "x/../../../y"));
    }

    #[test]
    fn ci_definitions() {
        assert!(is_ci(".github/workflows/ci.yml"));
        assert!(is_ci(".gitlab-ci.yml"));
        assert!(!is_ci("docs/.gitlab-ci.yml.txt"));
    }
}
