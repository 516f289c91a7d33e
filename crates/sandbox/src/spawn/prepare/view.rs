//! The sandbox's view of the filesystem: which host paths appear, where,
//! how they are mounted (bound, handed over idmapped, hidden, pinned), the
//! Landlock rules that match them, and the `/etc` files init writes. Built
//! here, in the supervisor, so that init only executes the list.

use std::collections::HashMap;
use std::ffi::{CString, OsString};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::{path_cstring, prefixed, IdMapping, IdmappedTree, MountOp, NodeKind, SANDBOX_BIN_DIR};
use crate::landlock::LandlockAccess;
use crate::profile::policy::{NetworkMode, Policy, ProjectAccess};
use crate::spawn::SpawnError;

/// Lexically normalise an absolute path (no `..` may remain).
fn is_clean_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

struct Planner {
    dirs: Vec<PathBuf>,
    mounts: Vec<(PathBuf, MountOp)>,
    visible: Vec<PathBuf>,
    /// The profile's paths that are symlinks on the host, recreated as
    /// links inside: they get no Landlock rule of their own (see
    /// [`ViewPlan::add_read_paths`]).
    links: Vec<PathBuf>,
    /// The host's canonical form of each directory a path was planned in,
    /// and whether "other" may search each directory above one: found once
    /// per run, not once per path (strict's twenty-odd `/etc` files share
    /// `/etc`, which cost a `readlink` and two `stat`s each on every start).
    canonical_dirs: HashMap<PathBuf, PathBuf>,
    searchable_dirs: HashMap<PathBuf, bool>,
}

impl Planner {
    fn need_parent_dirs(&mut self, path: &Path) {
        let mut ancestors: Vec<&Path> = path.ancestors().skip(1).collect();
        ancestors.reverse();
        for dir in ancestors {
            if dir != Path::new("/") && !self.dirs.iter().any(|d| d == dir) {
                self.dirs.push(dir.to_path_buf());
            }
        }
    }

    /// Plan a host path. `handed_over`, in root mode: where a path that init
    /// could not reach goes, for the supervisor to open.
    fn add_host_path(
        &mut self,
        path: &Path,
        writable: bool,
        must_exist: bool,
        handed_over: Option<&mut Vec<IdmappedTree>>,
    ) -> Result<bool, SpawnError> {
        let meta = match std::fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(err) if !must_exist && err.kind() == std::io::ErrorKind::NotFound => {
                return Ok(false)
            }
            Err(source) => {
                return Err(SpawnError::Path {
                    what: if writable {
                        "writable path"
                    } else {
                        "read-only path"
                    },
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        self.need_parent_dirs(path);
        let target = prefixed("/newroot", path)?;
        let op = if meta.file_type().is_symlink() {
            let link = std::fs::read_link(path).map_err(|source| SpawnError::Path {
                what: "symlink",
                path: path.to_path_buf(),
                source,
            })?;
            self.links.push(path.to_path_buf());
            MountOp::Symlink {
                link: path_cstring(&link)?,
                target,
            }
        } else {
            let kind = NodeKind::of(&meta);
            match handed_over {
                // In root mode init runs as an unprivileged host id, which
                // cannot pass a parent such as /root (0700): the supervisor,
                // still host root, opens the tree and hands it over, with
                // the same read-only attributes a bind would get.
                Some(trees) if !writable && !self.reachable_by_others(path) => {
                    trees.push(IdmappedTree {
                        host_path: path_cstring(path)?,
                        writable: false,
                        idmap: false,
                        owner: None,
                    });
                    MountOp::Idmapped {
                        index: trees.len() - 1,
                        target,
                        kind,
                    }
                }
                _ => MountOp::Bind {
                    source: self.host_source(path)?,
                    target,
                    kind,
                    writable,
                },
            }
        };
        self.mounts.push((path.to_path_buf(), op));
        self.visible.push(path.to_path_buf());
        Ok(true)
    }
}

/// Where init finds the host's `path` below `/oldroot`: with the links on
/// the way resolved on the host (and the last component's too when
/// `follow_last`). Init resolves below `/oldroot` with the new root as
/// `/`, so an absolute link on the way (`~/.cache -> /data/cache`) would
/// lead into the new root, and a profile naming a path through it failed
/// to start with ENOENT. `canonical_dir` resolves the directory a
/// path is in (the planner's, which keeps each answer for the run).
fn host_source(
    path: &Path,
    follow_last: bool,
    canonical_dir: impl FnOnce(&Path) -> std::io::Result<PathBuf>,
) -> Result<CString, SpawnError> {
    let resolved = if follow_last {
        std::fs::canonicalize(path)
    } else {
        match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => canonical_dir(parent).map(|p| p.join(name)),
            _ => Ok(path.to_path_buf()),
        }
    };
    let resolved = resolved.map_err(|source| SpawnError::Path {
        what: "host path",
        path: path.to_path_buf(),
        source,
    })?;
    prefixed("/oldroot", &resolved)
}

impl Planner {
    /// [`host_source`] of a path whose last component is kept as it is.
    fn host_source(&mut self, path: &Path) -> Result<CString, SpawnError> {
        let known = &mut self.canonical_dirs;
        host_source(path, false, |dir| {
            if let Some(canonical) = known.get(dir) {
                return Ok(canonical.clone());
            }
            let canonical = std::fs::canonicalize(dir)?;
            known.insert(dir.to_path_buf(), canonical.clone());
            Ok(canonical)
        })
    }

    /// Whether a process that is neither owner nor group member of anything
    /// on the way (the sandbox of host root) can look `path` up: every
    /// directory above it lets "other" through.
    fn reachable_by_others(&mut self, path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        path.ancestors().skip(1).all(|dir| {
            if let Some(&searchable) = self.searchable_dirs.get(dir) {
                return searchable;
            }
            let searchable =
                std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o001 != 0);
            self.searchable_dirs.insert(dir.to_path_buf(), searchable);
            searchable
        })
    }
}

/// The directories a run may write: the profile's write paths and the
/// project when it is writable.
pub(super) fn writable_trees(policy: &Policy, project: &Path) -> Vec<PathBuf> {
    let mut trees: Vec<PathBuf> = policy
        .filesystem
        .write
        .iter()
        .filter(|p| p.as_path() != project)
        .cloned()
        .collect();
    if policy.filesystem.project == ProjectAccess::ReadWrite {
        trees.push(project.to_path_buf());
    }
    trees
}

impl NodeKind {
    fn of(meta: &std::fs::Metadata) -> NodeKind {
        if meta.is_dir() {
            NodeKind::Dir
        } else {
            NodeKind::File
        }
    }
}

/// The view as it is being planned, step by step in [`super::Prepared::new`]'s
/// order: the mount order, and which paths are visible when hidden paths
/// are checked, depend on it.
pub(super) struct ViewPlan {
    planner: Planner,
    landlock_rules: Vec<(CString, LandlockAccess)>,
    idmapped: Vec<IdmappedTree>,
    /// Root mode: init cannot reach every host path itself (see
    /// [`crate::spawn::ids`]).
    root_mode: bool,
}

/// The finished view, as [`super::ChildPlan`] holds it.
pub(super) struct View {
    pub mount_dirs: Vec<CString>,
    pub mounts: Vec<MountOp>,
    pub idmapped: Vec<IdmappedTree>,
    pub landlock_rules: Vec<(CString, LandlockAccess)>,
}

impl ViewPlan {
    pub(super) fn new(root_mode: bool) -> ViewPlan {
        ViewPlan {
            planner: Planner {
                dirs: Vec::new(),
                mounts: Vec::new(),
                visible: Vec::new(),
                links: Vec::new(),
                canonical_dirs: HashMap::new(),
                searchable_dirs: HashMap::new(),
            },
            landlock_rules: Vec::new(),
            idmapped: Vec::new(),
            root_mode,
        }
    }

    /// The profile's read-only paths, each readable and executable.
    pub(super) fn add_read_paths(&mut self, policy: &Policy) -> Result<(), SpawnError> {
        let root_mode = self.root_mode;
        for path in &policy.filesystem.read {
            self.planner.add_host_path(
                path,
                false,
                true,
                root_mode.then_some(&mut self.idmapped),
            )?;
        }
        for path in &policy.filesystem.read_if_exists {
            self.planner.add_host_path(
                path,
                false,
                false,
                root_mode.then_some(&mut self.idmapped),
            )?;
        }
        // A Landlock rule is made from an opened path, and opening a link
        // follows it: the rule would be its target's, which the view shows
        // (with a rule of its own) only when the profile shows the target
        // too. A link into what the view lacks (`/bin -> usr/bin` in a
        // profile whose `read` replaced strict's `/usr`) made every run fail
        // here with ENOENT naming the link, the wrong thing to fix; without
        // a rule it dangles, and [`ViewPlan::dangling_links`] says why.
        for path in self.planner.visible.clone() {
            if self.planner.links.contains(&path) {
                continue;
            }
            self.landlock_rules
                .push((path_cstring(&path)?, LandlockAccess::ReadExec));
        }
        Ok(())
    }

    /// One warning naming the profile's paths that are links to host
    /// paths the view does not show, once every tree is planned: inside,
    /// they lead nowhere.
    pub(super) fn dangling_links(&self, warnings: &mut Vec<String>) {
        // The run's own /tmp, /dev and /proc stand in for the host's.
        let own = [Path::new("/tmp"), Path::new("/dev"), Path::new("/proc")];
        let planner = &self.planner;
        let dangling: Vec<String> = planner
            .links
            .iter()
            .filter_map(|link| {
                // A link dangling on the host as well is not the profile's doing.
                let target = std::fs::canonicalize(link).ok()?;
                let shown = planner
                    .visible
                    .iter()
                    .filter(|v| !planner.links.contains(v))
                    .map(PathBuf::as_path)
                    .chain(own)
                    .any(|v| target.starts_with(v));
                (!shown).then(|| format!("{} -> {}", link.display(), target.display()))
            })
            .collect();
        if !dangling.is_empty() {
            warnings.push(format!(
                "the profile shows links whose targets it does not show, so inside they lead nowhere: {}; \
                 add the targets with `[filesystem] read_add = [...]` (a list key such as `read = [...]` \
                 replaces the list it inherits; `sandbox profile check` names the key)",
                dangling.join(", ")
            ));
        }
    }

    /// The profile's writable paths, then the project.
    pub(super) fn add_trees(
        &mut self,
        policy: &Policy,
        project: &Path,
        ids: &IdMapping,
    ) -> Result<(), SpawnError> {
        let root_mode = self.root_mode;
        let mut writable_paths: Vec<PathBuf> = policy.filesystem.write.clone();
        let project_writable = policy.filesystem.project == ProjectAccess::ReadWrite;
        for path in &writable_paths {
            if !is_clean_absolute(path) {
                return Err(SpawnError::Invalid(format!(
                    "writable path {} must be absolute and normalised",
                    path.display()
                )));
            }
        }
        writable_paths.retain(|p| p != project);
        // The project last among binds so that it lands on top of read-only
        // system paths it may be nested in (a project under /usr/src).
        let mut trees: Vec<(PathBuf, bool)> =
            writable_paths.into_iter().map(|p| (p, true)).collect();
        if policy.filesystem.project == ProjectAccess::Empty {
            self.planner.need_parent_dirs(project);
            self.planner.dirs.push(project.to_path_buf());
        } else {
            trees.push((project.to_path_buf(), project_writable));
        }
        for (path, writable) in trees {
            let meta = std::fs::metadata(&path).map_err(|source| SpawnError::Path {
                what: "writable path",
                path: path.clone(),
                source,
            })?;
            self.planner.need_parent_dirs(&path);
            let target = prefixed("/newroot", &path)?;
            if root_mode && writable {
                if !meta.is_dir() {
                    return Err(SpawnError::Invalid(format!(
                        "writable path {} is not a directory (only directories can be idmapped)",
                        path.display()
                    )));
                }
                self.planner.mounts.push((
                    path.clone(),
                    MountOp::Idmapped {
                        index: self.idmapped.len(),
                        target,
                        kind: NodeKind::Dir,
                    },
                ));
                let owner = (meta.uid(), meta.gid());
                self.idmapped.push(IdmappedTree {
                    host_path: path_cstring(&path)?,
                    writable,
                    idmap: true,
                    owner: (owner.0 != ids.inside_uid).then_some(owner),
                });
            } else {
                let kind = NodeKind::of(&meta);
                self.planner.mounts.push((
                    path.clone(),
                    MountOp::Bind {
                        source: host_source(&path, true, |dir| std::fs::canonicalize(dir))?,
                        target,
                        kind,
                        writable,
                    },
                ));
            }
            self.planner.visible.push(path.clone());
            let access = if writable {
                LandlockAccess::ReadWrite
            } else {
                LandlockAccess::ReadExec
            };
            self.landlock_rules.push((path_cstring(&path)?, access));
        }
        Ok(())
    }

    /// Host paths the caller shows read-only at a path inside, and the
    /// supervisor's own binary.
    pub(super) fn add_handed_over(
        &mut self,
        read_only_extra: &[(PathBuf, PathBuf)],
        warnings: &mut Vec<String>,
    ) -> Result<(), SpawnError> {
        let root_mode = self.root_mode;
        // The supervisor's own binary, read-only, so scripts inside can call
        // `sandbox ipc`. Best effort: a binary replaced on disk since it
        // started (a rebuild) cannot be bound, which is said, not fatal.
        let mut handed_over: Vec<(PathBuf, PathBuf)> = read_only_extra.to_vec();
        match std::env::current_exe().and_then(std::fs::canonicalize) {
            Ok(exe) if exe.is_file() => {
                handed_over.push((exe, Path::new(SANDBOX_BIN_DIR).join("sandbox")));
            }
            _ => warnings.push(
                "the sandbox binary cannot be made available inside: `sandbox ipc` will be missing"
                    .into(),
            ),
        }
        // The net process's program beside it, where a supervisor inside
        // looks for it: a run inside starts its own allowlist proxy and
        // `net.http` client, and without it refuses to.
        if let Ok(net) = crate::installed::find(crate::net::process::PROGRAM) {
            handed_over.push((
                net,
                Path::new(SANDBOX_BIN_DIR).join(crate::net::process::PROGRAM),
            ));
        }
        for (host, target) in handed_over {
            let meta = std::fs::metadata(&host).map_err(|source| SpawnError::Path {
                what: "read-only path",
                path: host.clone(),
                source,
            })?;
            let kind = NodeKind::of(&meta);
            self.planner.need_parent_dirs(&target);
            let newroot_target = prefixed("/newroot", &target)?;
            let op = if root_mode {
                // Init runs as an unprivileged host id by the time it
                // mounts and may not be able to reach these (below /root,
                // or a 0700 CI checkout), so the supervisor clones the
                // trees itself and hands them over.
                let index = self.idmapped.len();
                self.idmapped.push(IdmappedTree {
                    host_path: path_cstring(&host)?,
                    writable: false,
                    idmap: false,
                    owner: None,
                });
                MountOp::Idmapped {
                    index,
                    target: newroot_target,
                    kind,
                }
            } else {
                MountOp::Bind {
                    source: prefixed("/oldroot", &host)?,
                    target: newroot_target,
                    kind,
                    writable: false,
                }
            };
            self.planner.mounts.push((target.clone(), op));
            self.planner.visible.push(target.clone());
            let rule_path = if kind == NodeKind::Dir {
                target.as_path()
            } else {
                target.parent().unwrap_or(Path::new("/"))
            };
            self.landlock_rules
                .push((path_cstring(rule_path)?, LandlockAccess::ReadExec));
        }
        Ok(())
    }

    /// Review mode: the project's overlay, right after the project's own
    /// mount, so that what is mounted below the project (a nested write
    /// path, the masks and read-only binds planned after this) lands on
    /// the merged directory, which an overlay does not look below.
    pub(super) fn review_layer(
        &mut self,
        policy: &Policy,
        project: &Path,
        stacked: Option<&Path>,
        inside_uid: u32,
    ) -> Result<(), SpawnError> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if policy.filesystem.project != ProjectAccess::ReadWrite {
            return Err(SpawnError::Invalid(format!(
                "review mode keeps a run's changes to the project, but profile `{}` does not let the run write the project (`[filesystem] project = \"rw\"` does)",
                policy.name
            )));
        }
        let text = project.as_os_str().to_string_lossy();
        let unsayable = |text: &str| text.chars().find(|c| matches!(c, ',' | ':' | '\\' | '\n'));
        if let Some(bad) = unsayable(&text) {
            return Err(SpawnError::Invalid(format!(
                "review mode cannot name the project {} to the overlay: its path contains {bad:?}, which overlayfs options cannot carry; move or link the project to a path without it",
                project.display()
            )));
        }
        // A recipe's accumulated layer, above the project. A run started by
        // root reaches host paths as an unprivileged id by the time it
        // mounts (the state directory may be below a 0700 /root), so the
        // supervisor hands the layer over as a tree, idmapped like the
        // project so that the sandbox may change what the steps before it
        // wrote; otherwise init reaches it through the host's tree.
        let mut lower_tree = None;
        let stacked = match stacked {
            Some(lower) if self.root_mode => {
                let meta = std::fs::metadata(lower).map_err(|source| SpawnError::Path {
                    what: "recipe layer",
                    path: lower.to_path_buf(),
                    source,
                })?;
                let owner = (meta.uid(), meta.gid());
                lower_tree = Some(self.idmapped.len());
                self.idmapped.push(IdmappedTree {
                    host_path: path_cstring(lower)?,
                    writable: false,
                    idmap: true,
                    owner: (owner.0 != inside_uid).then_some(owner),
                });
                format!("{}:", crate::review::stack::STAGED_LOWER)
            }
            Some(lower) => {
                let lower_text = lower.as_os_str().to_string_lossy();
                if let Some(bad) = unsayable(&lower_text) {
                    return Err(SpawnError::Invalid(format!(
                        "a recipe's layer {} cannot be named to the overlay: its path contains {bad:?}; set SANDBOX_STATE_DIR to a path without it",
                        lower.display()
                    )));
                }
                format!("/oldroot{lower_text}:")
            }
            None => String::new(),
        };
        let position = self
            .planner
            .mounts
            .iter()
            .position(|(path, _)| path == project)
            .ok_or_else(|| SpawnError::Invalid("review mode: the project is not mounted".into()))?;
        let mode = std::fs::metadata(project)
            .map_err(|source| SpawnError::Path {
                what: "project root",
                path: project.to_path_buf(),
                source,
            })?
            .permissions()
            .mode()
            & 0o7777;
        let target = prefixed("/newroot", project)?;
        let overlay_options = super::cstring(
            "overlay options",
            format!(
                "lowerdir={stacked}/newroot{},upperdir=/review/{},workdir=/review/{},userxattr",
                text,
                crate::review::capture::UPPER,
                crate::review::capture::WORK
            ),
        )?;
        let tmpfs_options = super::cstring(
            "layer options",
            format!(
                "size={},nr_inodes={},mode=0700",
                policy.filesystem.review_size,
                crate::review::LAYER_INODES
            ),
        )?;
        self.planner.mounts.insert(
            position + 1,
            (
                project.to_path_buf(),
                MountOp::ReviewLayer {
                    target,
                    tmpfs_options,
                    overlay_options,
                    mode,
                    lower_tree,
                },
            ),
        );
        Ok(())
    }

    /// Parents before children, for the mounts planned so far.
    pub(super) fn order_parents_first(&mut self) {
        // Parents before children: a stable sort by depth keeps the project
        // (pushed last) after system paths of equal depth.
        self.planner
            .mounts
            .sort_by_key(|(path, _)| path.components().count());
    }

    /// The profile's hidden paths, among those the view shows.
    pub(super) fn hide(
        &mut self,
        policy: &Policy,
        project: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<(), SpawnError> {
        for hidden in &policy.filesystem.hide {
            let path = if hidden.is_absolute() {
                hidden.clone()
            } else {
                project.join(hidden)
            };
            if !is_clean_absolute(&path) {
                return Err(SpawnError::Invalid(format!(
                    "hidden path {} must not contain `..`",
                    hidden.display()
                )));
            }
            if !self.planner.visible.iter().any(|v| path.starts_with(v)) {
                continue; // not visible in the sandbox at all
            }
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(_) => continue,
            };
            if meta.file_type().is_symlink() {
                // Mounting over a symlink would follow it; the link itself
                // stays visible, so say so rather than pretend it is hidden.
                warnings.push(format!("not hiding {}: it is a symlink", path.display()));
                continue;
            }
            let target = prefixed("/newroot", &path)?;
            let op = if meta.is_dir() {
                MountOp::HideDir { target }
            } else {
                MountOp::HideFile { target }
            };
            self.planner.mounts.push((path, op));
        }
        Ok(())
    }

    /// The project's secrets and protected entries, found by a walk of the
    /// project and carried out by mounts (None: the project is not visible).
    pub(super) fn scan_project(
        &mut self,
        policy: &Policy,
        project: &Path,
        warnings: &mut Vec<String>,
    ) -> Result<(crate::project::Rules, Option<crate::project::scan::Scan>), SpawnError> {
        let project_writable = policy.filesystem.project == ProjectAccess::ReadWrite;
        let project_rules =
            crate::project::Rules::new(&policy.filesystem.secrets, &policy.filesystem.protect)
                .map_err(|err| SpawnError::Invalid(format!("profile `{}`: {err}", policy.name)))?;
        let scan = if policy.filesystem.project == ProjectAccess::Empty {
            None
        } else {
            let scan = match asked_watcher(policy, project, warnings) {
                Some(scan) => scan,
                None => crate::project::scan::scan(
                    project,
                    &project_rules,
                    project_writable,
                    policy.filesystem.hardlinks,
                )?,
            };
            self.planner
                .mounts
                .extend(scan_mounts(project, &scan, policy.filesystem.review)?);
            Some(scan)
        };
        Ok((project_rules, scan))
    }

    /// The view in the form init executes.
    pub(super) fn finish(self) -> Result<View, SpawnError> {
        let mut mount_dirs = Vec::new();
        for dir in &self.planner.dirs {
            mount_dirs.push(prefixed("/newroot", dir)?);
        }
        let mounts = self.planner.mounts.into_iter().map(|(_, op)| op).collect();
        Ok(View {
            mount_dirs,
            mounts,
            idmapped: self.idmapped,
            landlock_rules: self.landlock_rules,
        })
    }
}

/// The walk the project's watcher (`sandbox watch`) keeps current, when one
/// runs for it and the kernel says it may be trusted; None: this run walks.
fn asked_watcher(
    policy: &Policy,
    project: &Path,
    warnings: &mut Vec<String>,
) -> Option<crate::project::scan::Scan> {
    use crate::project::watcher::{self, AskError};
    let rules = policy.scan_rules()?;
    match watcher::ask(project, &rules) {
        Ok(scan) => scan,
        // The run's own walk fails the same way and says why.
        Err(AskError::Failed(_)) => None,
        Err(err) => {
            warnings.push(format!("{err}; this run walked the project itself"));
            None
        }
    }
}

/// The run's `/etc/passwd`, `/etc/group` and `/etc/hosts`, rendered here
/// so that init only writes them. A name is taken from the host's files
/// only for ids that are that host account's: the caller's own (an
/// unprivileged supervisor), or the project owner's that root's sandbox
/// takes; an id chosen for the sandbox
/// ([`crate::spawn::ids::ROOT_PROJECT_INSIDE_ID`]) is not the account that may
/// happen to have that number. No network of its own: the host's `hosts`.
pub(super) fn etc_files(
    ids: &IdMapping,
    project: &Path,
    env: &[(OsString, OsString)],
    network: NetworkMode,
) -> Vec<crate::spawn::etc::EtcFile> {
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(project).ok();
    let host_account =
        |inside: u32, owner_id: Option<u32>| !ids.root_mode || owner_id == Some(inside);
    let mut uids = Vec::new();
    let mut gids = vec![65_534];
    if host_account(ids.inside_uid, owner.as_ref().map(MetadataExt::uid)) {
        uids.push(ids.inside_uid);
    }
    if host_account(ids.inside_gid, owner.as_ref().map(MetadataExt::gid)) {
        gids.push(ids.inside_gid);
    }
    let home = env
        .iter()
        .find(|(name, _)| name == "HOME")
        .and_then(|(_, value)| value.to_str())
        .unwrap_or("/");
    let plan = crate::spawn::etc::EtcPlan::new(&uids, &gids, home, network != NetworkMode::Host);
    crate::spawn::etc::files(&plan, ids)
}

/// The mounts that carry out a scan, parents before children: pins, then
/// what they keep in place. In review mode a file hard-linked outside the
/// project stays writable: a write copies it up into the run's layer, so
/// it never reaches the outside file (and apply writes a file of its own).
fn scan_mounts(
    project: &Path,
    scan: &crate::project::scan::Scan,
    review: bool,
) -> Result<Vec<(PathBuf, MountOp)>, SpawnError> {
    let mut ops = Vec::with_capacity(scan.mounts());
    let target = |relative: &Path| prefixed("/newroot", &project.join(relative));
    for pin in &scan.pins {
        ops.push((
            pin.clone(),
            MountOp::Rebind {
                target: target(pin)?,
                read_only: false,
            },
        ));
    }
    for found in &scan.protected {
        let op = MountOp::Rebind {
            target: target(&found.path)?,
            read_only: true,
        };
        ops.push((found.path.clone(), op));
    }
    for path in scan.outside_links.iter().filter(|_| !review) {
        ops.push((
            path.clone(),
            MountOp::Rebind {
                target: target(path)?,
                read_only: true,
            },
        ));
    }
    for found in &scan.secrets {
        let target = target(&found.path)?;
        let op = if found.is_dir {
            MountOp::HideDir { target }
        } else {
            MountOp::HideFile { target }
        };
        ops.push((found.path.clone(), op));
    }
    ops.sort_by_key(|(path, _)| path.components().count());
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_absolute_paths() {
        assert!(is_clean_absolute(Path::new("/usr/lib")));
        assert!(!is_clean_absolute(Path::new("/usr/../etc")));
        assert!(!is_clean_absolute(Path::new("usr")));
    }
}
