//! Which uid and gid the sandbox gets, from the user namespace the
//! supervisor itself runs in.
//!
//! Host root maps the sandbox to an unprivileged host id and idmaps the
//! trees it may write ("root mode"). Root inside a user namespace (rootless
//! Podman, `unshare -r`, a CI container with a mapped range) is a different
//! thing: only the ids in its own `/proc/self/uid_map` exist, `setgroups`
//! may already be `deny`, and the host's filesystems belong to an ancestor
//! namespace, so idmapping them needs privileges it does not have. Root mode
//! is used there only when everything it needs is there (a second mapped id,
//! setgroups allowed, and an idmapped mount of each writable tree actually
//! made once); otherwise the sandbox is mapped to the caller's own ids, as
//! for an unprivileged user.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use nix::sched::CloneFlags;

/// How uids and gids are mapped between the host and the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMapping {
    /// The supervisor is root with ids to spare (host root, or root of a
    /// user namespace with a wide enough range where idmapping was seen to
    /// work; see [`super::ids`]): the sandbox gets `host_uid` (never 0) and
    /// switches to it inside; writable trees are idmapped.
    pub root_mode: bool,
    /// uid (and gid) the sandboxed process has inside.
    pub inside_uid: u32,
    /// gid inside.
    pub inside_gid: u32,
    /// Host uid that `inside_uid` maps to.
    pub host_uid: u32,
    /// Host gid that `inside_gid` maps to.
    pub host_gid: u32,
}

/// Default host uid/gid for sandboxes started by root, when /etc/subuid has
/// no range for root: high enough to own nothing on a normal system, below
/// 2^31 because some tools still store ids in signed ints.
pub const DEFAULT_ROOT_HOST_ID: u32 = 2_000_000_000;

/// One line of a `uid_map` or `gid_map`: `count` ids from `inside` on, seen
/// as `outside` on in the parent namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// First id in this namespace.
    pub inside: u32,
    /// First id in the parent namespace.
    pub outside: u32,
    /// How many.
    pub count: u32,
}

impl IdRange {
    fn contains(&self, id: u32) -> bool {
        id >= self.inside && u64::from(id) < u64::from(self.inside) + u64::from(self.count)
    }

    fn last(&self) -> Option<u32> {
        let last = u64::from(self.inside) + u64::from(self.count);
        (self.count > 0).then(|| (last - 1).min(u64::from(u32::MAX)) as u32)
    }
}

/// Parse a `/proc/PID/uid_map` (or gid_map); lines that do not parse are
/// skipped (the kernel writes three decimal fields per line).
pub fn parse_map(text: &str) -> Vec<IdRange> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(str::parse::<u32>);
            match (fields.next(), fields.next(), fields.next()) {
                (Some(Ok(inside)), Some(Ok(outside)), Some(Ok(count))) => Some(IdRange {
                    inside,
                    outside,
                    count,
                }),
                _ => None,
            }
        })
        .collect()
}

fn mapped(map: &[IdRange], id: u32) -> bool {
    map.iter().any(|range| range.contains(id))
}

/// The initial user namespace maps every id to itself.
pub fn is_initial(map: &[IdRange]) -> bool {
    map == [IdRange {
        inside: 0,
        outside: 0,
        count: u32::MAX,
    }]
}

/// The overflow id (`nobody`): files owned by unmapped ids show as it, so
/// the sandbox must not be it.
const OVERFLOW_ID: u32 = 65_534;

/// An unprivileged id mapped in both maps for the sandbox of root inside a
/// user namespace: the highest one (a rootless container maps 0..65536, and
/// the top of the range owns nothing), never 0 and never `nobody`.
pub fn pick_nested_id(uid_map: &[IdRange], gid_map: &[IdRange]) -> Option<u32> {
    let mut tops: Vec<u32> = uid_map.iter().filter_map(IdRange::last).collect();
    tops.sort_unstable_by(|a, b| b.cmp(a));
    tops.into_iter()
        .flat_map(|top| [Some(top), top.checked_sub(1)])
        .flatten()
        .find(|id| {
            *id != 0
                && *id != OVERFLOW_ID
                && *id != u32::MAX
                && mapped(uid_map, *id)
                && mapped(gid_map, *id)
        })
}

/// Host uid/gid for sandboxes started by host root: the first range of
/// root's in /etc/subuid, or [`DEFAULT_ROOT_HOST_ID`].
fn root_host_id() -> u32 {
    if let Ok(text) = std::fs::read_to_string("/etc/subuid") {
        for line in text.lines() {
            let mut fields = line.split(':');
            if let (Some("root"), Some(start), Some(count)) =
                (fields.next(), fields.next(), fields.next())
            {
                if let (Ok(start), Ok(count)) = (start.parse::<u32>(), count.parse::<u32>()) {
                    if start > 0 && count > 0 {
                        return start;
                    }
                }
            }
        }
    }
    DEFAULT_ROOT_HOST_ID
}

impl IdMapping {
    /// `uid` and `gid` the same inside as outside: an unprivileged
    /// supervisor's sandbox, which can map nothing but its own ids.
    pub fn unprivileged(uid: u32, gid: u32) -> IdMapping {
        IdMapping {
            root_mode: false,
            inside_uid: uid,
            inside_gid: gid,
            host_uid: uid,
            host_gid: gid,
        }
    }
}

fn own_ids() -> IdMapping {
    IdMapping::unprivileged(
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

/// The mapping for a run whose writable trees are `writable` (directories)
/// and whose project is `project`. Second element: why root mode was not
/// used although the caller is root, for the report.
pub fn choose(writable: &[PathBuf], project: &Path) -> (IdMapping, Option<String>) {
    if !nix::unistd::geteuid().is_root() {
        return (own_ids(), None);
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let uid_map = parse_map(&read("/proc/self/uid_map"));
    let gid_map = parse_map(&read("/proc/self/gid_map"));
    if is_initial(&uid_map) && is_initial(&gid_map) {
        // Root in a container (Docker's, Podman's defaults) is uid 0 of the
        // initial namespace without CAP_SYS_ADMIN: it can neither idmap the
        // writable trees nor open_tree the ones init cannot reach, and
        // root mode failed there at open_tree with EPERM.
        // One capget, not the whole measured view (/proc/self/status and a
        // stat per namespace), which the start reads again anyway.
        let effective = caps::read(None, caps::CapSet::Effective)
            .ok()
            .map(|set| set.iter().fold(0, |mask, cap| mask | cap.bitmask()));
        if let Some(missing) = missing_root_mode_capability(effective) {
            return (
                own_ids(),
                Some(format!(
                    "root without {missing} (a container's default capabilities): the sandbox runs as the caller's own uid and gid (as for an unprivileged user)"
                )),
            );
        }
        let host = root_host_id();
        return (root_ids_for_project(host, project), None);
    }
    let setgroups = read("/proc/self/setgroups");
    let fallback = |why: String| {
        (
            own_ids(),
            Some(format!(
                "root inside a user namespace: {why}, so the sandbox runs as the caller's own uid and gid (as for an unprivileged user)"
            )),
        )
    };
    if setgroups.trim() != "allow" {
        return fallback("setgroups is denied in this namespace".into());
    }
    let Some(id) = pick_nested_id(&uid_map, &gid_map) else {
        return fallback("no unprivileged id besides root is mapped in it".into());
    };
    let trees: Vec<&Path> = if writable.is_empty() {
        vec![project]
    } else {
        writable.iter().map(PathBuf::as_path).collect()
    };
    match probe_idmap(id, &trees, !writable.is_empty()) {
        Ok(()) => (root_ids(id), None),
        Err(why) => fallback(why),
    }
}

/// The first capability root mode needs that the `effective` set (CapEff,
/// None when unreadable: no claim) lacks: CAP_SYS_ADMIN for open_tree and
/// idmapping, CAP_SETUID and CAP_SETGID for id maps that name another id.
pub fn missing_root_mode_capability(effective: Option<u64>) -> Option<&'static str> {
    let effective = effective?;
    [(21, "CAP_SYS_ADMIN"), (7, "CAP_SETUID"), (6, "CAP_SETGID")]
        .into_iter()
        .find(|(bit, _)| effective & (1u64 << bit) == 0)
        .map(|(_, name)| name)
}

/// Whether a process with the `effective` capability set (None when
/// unreadable: counts as yes, so nothing changes where it cannot be told)
/// may map its uid 0 into a child user namespace: since Linux 5.12 that
/// needs CAP_SETFCAP (bit 31) in its own namespace.
pub fn may_map_root(effective: Option<u64>) -> bool {
    const CAP_SETFCAP: u64 = 1 << 31;
    effective.is_none_or(|effective| effective & CAP_SETFCAP != 0)
}

/// The uid and gid inside of host root's sandbox on a project of root's.
/// Not 0: uid 0 without capabilities is neither root nor a user to the
/// programs that test for it (a suite that expects root to execute any
/// file with an `x` bit, npm switching users for scripts); 1000 is the
/// first regular user's id, which is what they expect of a CI job.
pub const ROOT_PROJECT_INSIDE_ID: u32 = 1000;

/// Host root's sandbox on `project`: inside, the uid and gid that own the
/// project (a CI workspace checked out by the runner user, then sandboxed
/// by root), so that its files are the sandbox's own, as bare they are
/// writable by their owner; for a project of root's,
/// [`ROOT_PROJECT_INSIDE_ID`]. The process is still `host` on the host
/// either way, which owns nothing.
fn root_ids_for_project(host: u32, project: &Path) -> IdMapping {
    use std::os::unix::fs::MetadataExt;
    let mut ids = root_ids(host);
    let owner = std::fs::metadata(project).map(|meta| (meta.uid(), meta.gid()));
    let (uid, gid) = owner
        .ok()
        .and_then(|(uid, gid)| inside_ids_for_owner(uid, gid))
        .unwrap_or((ROOT_PROJECT_INSIDE_ID, ROOT_PROJECT_INSIDE_ID));
    ids.inside_uid = uid;
    ids.inside_gid = gid;
    ids
}

/// The ids inside for a project owned by `uid`:`gid`, when they are not
/// root's: never the overflow id (that is how unmapped owners show, so a
/// sandbox that was `nobody` would seem to own every foreign file).
pub fn inside_ids_for_owner(uid: u32, gid: u32) -> Option<(u32, u32)> {
    let usable = |id: u32| id != OVERFLOW_ID && id != u32::MAX;
    (uid != 0 && usable(uid)).then(|| (uid, if usable(gid) { gid } else { uid }))
}

fn root_ids(host: u32) -> IdMapping {
    IdMapping {
        root_mode: true,
        inside_uid: 0,
        inside_gid: 0,
        host_uid: host,
        host_gid: host,
    }
}

/// A user namespace whose only mapping is `uid_line` and `gid_line`
/// (`INSIDE OUTSIDE COUNT`), held by a descriptor: what an idmapped mount
/// takes its mapping from. The process created to own it is killed before
/// this returns (and reaped later: nothing here waits for it); the
/// descriptor keeps the namespace alive.
pub fn mapping_namespace(uid_line: &str, gid_line: &str) -> Result<std::fs::File, String> {
    let holder = crate::sys::clone::clone_idle(CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("a user namespace cannot be created for an id mapping ({e})"))?;
    let proc_dir = PathBuf::from(format!("/proc/{}", holder.pid()));
    for (file, line) in [("uid_map", uid_line), ("gid_map", gid_line)] {
        std::fs::write(proc_dir.join(file), format!("{line}\n"))
            .map_err(|e| format!("writing {file} ({line:?}) failed ({e})"))?;
    }
    std::fs::File::open(proc_dir.join("ns/user"))
        .map_err(|e| format!("opening the mapping's user namespace failed ({e})"))
}

/// Make, once, what a root-mode run makes in release_init: a detached copy
/// of each tree, idmapped to a namespace that maps 0 to `id`. Either needs
/// privileges over the namespaces that own the mounts and the filesystems,
/// which only trying tells.
fn probe_idmap(id: u32, trees: &[&Path], idmap: bool) -> Result<(), String> {
    let userns = mapping_namespace(&format!("0 {id} 1"), &format!("0 {id} 1"))?;
    for tree in trees {
        let path = std::ffi::CString::new(tree.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{} contains a NUL byte", tree.display()))?;
        let fd = crate::sys::mount_api::clone_tree(&path).map_err(|e| {
            format!(
                "open_tree({}) is not permitted here ({e}; the mount namespace belongs to an ancestor user namespace)",
                tree.display()
            )
        })?;
        if idmap {
            crate::sys::mount_api::set_tree_idmap(fd.as_fd(), userns.as_fd()).map_err(|e| {
                format!(
                    "{} cannot be idmapped ({e}; its filesystem belongs to an ancestor user namespace)",
                    tree.display()
                )
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    #[test]
    fn root_mode_needs_sys_admin_setuid_and_setgid() {
        let status = |eff: &str| u64::from_str_radix(eff, 16).ok();
        assert_eq!(
            missing_root_mode_capability(status("000001ffffffffff")),
            None
        );
        // Podman's default set: no CAP_SYS_ADMIN.
        assert_eq!(
            missing_root_mode_capability(status("00000000800405fb")),
            Some("CAP_SYS_ADMIN")
        );
        assert_eq!(
            missing_root_mode_capability(status("0000000000200000")),
            Some("CAP_SETUID")
        );
        // Unreadable: no claim either way.
        assert_eq!(missing_root_mode_capability(None), None);
    }

    use super::*;

    fn map(text: &str) -> Vec<IdRange> {
        parse_map(text)
    }

    #[test]
    fn the_initial_namespace_is_the_identity_over_every_id() {
        assert!(is_initial(&map("         0          0 4294967295\n")));
        assert!(!is_initial(&map("0 0 1\n")));
        assert!(!is_initial(&map("0 1000 1\n1 100000 65536\n")));
    }

    #[test]
    fn a_single_mapping_leaves_no_unprivileged_id() {
        // `unshare -r`: only root is mapped.
        let single = map("0 1000 1\n");
        assert_eq!(pick_nested_id(&single, &single), None);
    }

    #[test]
    fn a_rootless_container_range_gives_its_top_id() {
        // Rootless Podman: 0 is the user, 1..65536 subordinate ids.
        let uids = map("0 1000 1\n1 100000 65536\n");
        assert_eq!(pick_nested_id(&uids, &uids), Some(65_536));
        // 0..65535 ends on nobody's neighbour: nobody itself is never picked.
        let short = map("0 100000 65535\n");
        assert_eq!(pick_nested_id(&short, &short), Some(65_533));
        // Only ids mapped for groups too.
        let gids = map("0 1000 1\n1 100000 1000\n");
        assert_eq!(pick_nested_id(&uids, &gids), None);
        assert_eq!(pick_nested_id(&gids, &gids), Some(1000));
    }

    #[test]
    fn malformed_lines_are_skipped() {
        assert_eq!(
            map("x y z\n0 5\n 7 8 9 \n"),
            vec![IdRange {
                inside: 7,
                outside: 8,
                count: 9
            }]
        );
    }
}
