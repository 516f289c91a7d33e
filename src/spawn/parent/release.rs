//! Releasing init: its id maps written and the writable trees idmapped
//! (root supervisor) before it goes on.

use std::os::fd::{AsFd, OwnedFd};

use nix::unistd::Pid;

use crate::spawn::channel::{self};
use crate::spawn::prepare::ChildPlan;
use crate::spawn::SpawnError;
use crate::sys::mount_api::{self, MountAttrs};

use super::sys;

/// Why uid 0 without CAP_SETFCAP gets no user namespace. Since Linux 5.12
/// mapping uid 0 of the parent namespace into a child needs CAP_SETFCAP
/// there (so that the child's root cannot write file capabilities the
/// parent honours); root of a namespace whose creator dropped every
/// capability (bubblewrap's `--uid 0`, `setpriv --bounding-set=-all`) has
/// only its uid 0 to map.
pub(super) const CANNOT_MAP_ROOT: &str = "this is uid 0 of a user namespace without CAP_SETFCAP, and the kernel (5.12+) lets only a holder of CAP_SETFCAP map uid 0 into a child user namespace";

/// Write the id maps, idmap the writable trees (root supervisor), and tell
/// init to go on.
/// `supervisor_capabilities`: see [`supervisor_effective_capabilities`].
pub(super) fn release_init(
    plan: &ChildPlan,
    supervisor_capabilities: Option<u64>,
    init_pid: Pid,
    sync: &OwnedFd,
) -> Result<(), SpawnError> {
    let ids = plan.ids;
    let proc_dir = std::path::PathBuf::from(format!("/proc/{init_pid}"));
    let write = |name: &str, data: String| -> Result<(), SpawnError> {
        let path = proc_dir.join(name);
        std::fs::write(&path, data.as_bytes()).map_err(|source| {
            if source.raw_os_error() == Some(libc::EPERM)
                && !ids.root_mode
                && ids.host_uid == 0
                && !crate::spawn::ids::may_map_root(supervisor_capabilities)
            {
                return SpawnError::LayerUnavailable {
                    layer: "userns",
                    reason: format!(
                        "{CANNOT_MAP_ROOT} (writing {}). Fix: start sandbox as a regular uid \
                         there (bubblewrap without `--uid 0`), keep CAP_SETFCAP for it, or run \
                         without namespaces with a profile whose enforce.userns is \
                         \"best-effort\" (`--profile standard`)",
                        path.display()
                    ),
                };
            }
            SpawnError::IdMap { path, data, source }
        })
    };
    // Unprivileged writers must deny setgroups before writing gid_map
    // (CVE-2014-8989: dropping groups could bypass negative group ACLs). Root
    // keeps it allowed so init can shed host root's supplementary groups.
    if !plan
        .clone_flags
        .contains(nix::sched::CloneFlags::CLONE_NEWUSER)
    {
        // No user namespace: no maps to write, nothing to idmap.
        channel::send_go(sync.as_fd(), &[])?;
        return Ok(());
    }
    write(
        "setgroups",
        if ids.root_mode {
            "allow".into()
        } else {
            "deny".into()
        },
    )?;
    write(
        "uid_map",
        format!("{} {} 1\n", ids.inside_uid, ids.host_uid),
    )?;
    write(
        "gid_map",
        format!("{} {} 1\n", ids.inside_gid, ids.host_gid),
    )?;

    let mut trees = Vec::with_capacity(plan.idmapped.len());
    if !plan.idmapped.is_empty() {
        let userns_path = proc_dir.join("ns/user");
        let userns = std::fs::File::open(&userns_path).map_err(|source| SpawnError::Path {
            what: "opening",
            path: userns_path,
            source,
        })?;
        // A writable tree whose owner is not the sandbox's uid inside gets
        // a namespace of its own mapping that owner to the sandbox's host
        // id, so the sandbox may do to it what its owner may, as in every
        // other writable tree; one namespace per distinct owner.
        let mut owner_namespaces: Vec<((u32, u32), std::fs::File)> = Vec::new();
        for (uid, gid) in plan.idmapped.iter().filter_map(|tree| tree.owner) {
            if owner_namespaces
                .iter()
                .any(|(owner, _)| *owner == (uid, gid))
            {
                continue;
            }
            let namespace = crate::spawn::ids::mapping_namespace(
                &format!("{uid} {} 1", ids.host_uid),
                &format!("{gid} {} 1", ids.host_gid),
            )
            .map_err(|reason| SpawnError::LayerUnavailable {
                layer: "userns",
                reason: format!(
                    "idmapping a writable tree owned by {uid}:{gid} to the sandbox's uid: {reason}"
                ),
            })?;
            owner_namespaces.push(((uid, gid), namespace));
        }
        for tree in &plan.idmapped {
            let path = tree.host_path.to_string_lossy().into_owned();
            let fd = mount_api::clone_tree(&tree.host_path)
                .map_err(sys(format!("open_tree({path})")))?;
            // Files on disk owned by the tree's owner (the project's owner is
            // the sandbox's inside uid) appear owned by the sandbox, and what
            // the sandbox creates belongs to that owner on the host, while
            // the process itself is never host root nor the owner.
            if tree.idmap {
                let mapping = tree
                    .owner
                    .and_then(|owner| owner_namespaces.iter().find(|(o, _)| *o == owner))
                    .map_or(&userns, |(_, namespace)| namespace);
                mount_api::set_tree_idmap(fd.as_fd(), mapping.as_fd())
                .map_err(sys(format!(
                    "idmapping {path} for a sandbox started by root (mount_setattr MOUNT_ATTR_IDMAP needs Linux 5.12+ \
                     and a filesystem with idmapped-mount support such as ext4, xfs, btrfs or tmpfs; \
                     or run sandbox as a regular user, which needs no idmapping)"
                )))?;
            }
            let attrs = MountAttrs {
                read_only: !tree.writable,
                nosuid: true,
                nodev: true,
                noexec: false,
            };
            mount_api::set_tree_attrs(fd.as_fd(), attrs)
                .map_err(sys(format!("mount_setattr({path})")))?;
            trees.push(fd);
        }
    }
    channel::send_go(sync.as_fd(), &trees)?;
    Ok(())
}
