//! Releasing init: its id maps written and the writable trees idmapped
//! (root supervisor) before it goes on.

use std::os::fd::{AsFd, OwnedFd};

use nix::unistd::Pid;

use crate::spawn::channel::{self};
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
    ids: crate::spawn::ids::IdMapping,
    clone_flags: nix::sched::CloneFlags,
    idmapped: &[crate::spawn::prepare::IdmappedTree],
    supervisor_capabilities: Option<u64>,
    init_pid: Pid,
    calls: &mut dyn ReleaseCalls,
) -> Result<(), SpawnError> {
    let proc_dir = std::path::PathBuf::from(format!("/proc/{init_pid}"));
    let write = |calls: &mut dyn ReleaseCalls, name: &str, data: String| {
        write_id_file(
            calls,
            proc_dir.join(name),
            data,
            ids,
            supervisor_capabilities,
        )
    };
    // Unprivileged writers must deny setgroups before writing gid_map
    // (CVE-2014-8989: dropping groups could bypass negative group ACLs). Root
    // keeps it allowed so init can shed host root's supplementary groups.
    if !clone_flags.contains(nix::sched::CloneFlags::CLONE_NEWUSER) {
        // No user namespace: no maps to write, nothing to idmap.
        calls.send_go(&[])?;
        return Ok(());
    }
    write(
        calls,
        "setgroups",
        if ids.root_mode {
            "allow".into()
        } else {
            "deny".into()
        },
    )?;
    write(
        calls,
        "uid_map",
        format!("{} {} 1\n", ids.inside_uid, ids.host_uid),
    )?;
    write(
        calls,
        "gid_map",
        format!("{} {} 1\n", ids.inside_gid, ids.host_gid),
    )?;

    let mut trees = Vec::with_capacity(idmapped.len());
    if !idmapped.is_empty() {
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
        for (uid, gid) in idmapped.iter().filter_map(|tree| tree.owner) {
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
        for tree in idmapped {
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
    calls.send_go(&trees)?;
    Ok(())
}

/// Write one of init's id files (`setgroups`, `uid_map`, `gid_map`); a
/// refusal names the file and, for root without CAP_SETFCAP, why.
fn write_id_file(
    calls: &mut dyn ReleaseCalls,
    path: std::path::PathBuf,
    data: String,
    ids: crate::spawn::ids::IdMapping,
    supervisor_capabilities: Option<u64>,
) -> Result<(), SpawnError> {
    calls.write_proc(&path, data.as_bytes()).map_err(|source| {
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
}

/// The calls that release init, whose order the kernel imposes (the id
/// maps before init goes on, setgroups before gid_map): the seam a unit
/// test replaces with a recording double.
pub(super) trait ReleaseCalls {
    /// Write `data` to `path`, a file of init's /proc directory.
    fn write_proc(&mut self, path: &std::path::Path, data: &[u8]) -> std::io::Result<()>;
    /// Tell init to go on, passing it the idmapped trees.
    fn send_go(&mut self, trees: &[OwnedFd]) -> Result<(), channel::ChannelError>;
}

/// The real calls: the files written, the go sent on init's sync socket.
pub(super) struct Kernel<'a> {
    /// The supervisor's end of init's sync socket.
    pub(super) sync: std::os::fd::BorrowedFd<'a>,
}

impl ReleaseCalls for Kernel<'_> {
    fn write_proc(&mut self, path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
        std::fs::write(path, data)
    }

    fn send_go(&mut self, trees: &[OwnedFd]) -> Result<(), channel::ChannelError> {
        channel::send_go(self.sync, trees)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recording double of the calls: what was done, in order; a write
    /// to `refuse` fails with EPERM.
    #[derive(Default)]
    struct Recorder {
        calls: Vec<String>,
        refuse: Option<&'static str>,
    }

    impl ReleaseCalls for Recorder {
        fn write_proc(&mut self, path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            self.calls.push(format!(
                "write {name} {}",
                String::from_utf8_lossy(data).trim_end()
            ));
            if self.refuse == Some(name.as_str()) {
                return Err(std::io::Error::from_raw_os_error(libc::EPERM));
            }
            Ok(())
        }

        fn send_go(&mut self, trees: &[OwnedFd]) -> Result<(), channel::ChannelError> {
            self.calls.push(format!("go with {} trees", trees.len()));
            Ok(())
        }
    }

    fn ids() -> crate::spawn::ids::IdMapping {
        crate::spawn::ids::IdMapping {
            root_mode: false,
            inside_uid: 1000,
            inside_gid: 1000,
            host_uid: 1234,
            host_gid: 1234,
        }
    }

    #[test]
    fn the_id_maps_are_written_before_init_is_released() {
        let mut recorder = Recorder::default();
        let flags = nix::sched::CloneFlags::CLONE_NEWUSER | nix::sched::CloneFlags::CLONE_NEWNS;
        release_init(ids(), flags, &[], None, Pid::from_raw(42), &mut recorder).expect("released");
        assert_eq!(
            recorder.calls,
            [
                // setgroups is denied before gid_map (CVE-2014-8989).
                "write setgroups deny",
                "write uid_map 1000 1234 1",
                "write gid_map 1000 1234 1",
                "go with 0 trees",
            ]
        );
    }

    #[test]
    fn init_is_never_released_when_an_id_map_is_refused() {
        let mut recorder = Recorder {
            refuse: Some("uid_map"),
            ..Recorder::default()
        };
        let flags = nix::sched::CloneFlags::CLONE_NEWUSER;
        let released = release_init(ids(), flags, &[], None, Pid::from_raw(42), &mut recorder);
        assert!(
            matches!(released, Err(SpawnError::IdMap { ref path, .. }) if path.ends_with("uid_map")),
            "{released:?}"
        );
        assert_eq!(
            recorder.calls,
            ["write setgroups deny", "write uid_map 1000 1234 1"]
        );
    }

    #[test]
    fn without_a_user_namespace_init_is_released_with_no_maps() {
        let mut recorder = Recorder::default();
        release_init(
            ids(),
            nix::sched::CloneFlags::empty(),
            &[],
            None,
            Pid::from_raw(42),
            &mut recorder,
        )
        .expect("released");
        assert_eq!(recorder.calls, ["go with 0 trees"]);
    }
}
