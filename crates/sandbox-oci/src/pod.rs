//! What a Kubernetes pod's containers may mount from the host.
//!
//! Under the CRI, the kubelet turns every volume of a pod into a bind
//! mount of a host path: its own per-pod directories for `emptyDir`,
//! `secret`, `configMap`, projected tokens and the termination log, and
//! for a `hostPath` volume whatever path the pod's author wrote. The
//! engine adds its per-pod files (`/etc/hosts`, `/etc/resolv.conf`,
//! `/dev/shm`). Without a user namespace the container's root is the
//! host's root, so a `hostPath` of `/etc` or of another pod's
//! `/var/lib/kubelet/pods/<uid>/volumes` gives it the host's files or that
//! pod's secrets, capabilities or not. Landlock cannot help: the mount is
//! inside the container's view before the init runs.
//!
//! So a CRI container's bind mounts must come from its own pod's
//! directories (the kubelet's, below `pods/<the pod's uid>`; the engine's,
//! with the pod's sandbox id as a component) or from a directory the
//! operator listed in `host_paths`. Anything else is refused at `create`,
//! which the kubelet shows in the pod's events. Podman's and Docker's
//! volumes are left alone: there the one who writes `-v` is the one who
//! runs the engine, while in a cluster it is the pod's author.

use std::path::{Path, PathBuf};

use sandbox::mountinfo::Mount;
use serde_json::Value;

use super::settings::Settings;
use super::OciError;

/// The annotations an engine puts on a CRI container: its kind (the pod
/// sandbox or a container), its pod's sandbox id and its pod's uid.
/// containerd's first, then CRI-O's.
const CONTAINER_TYPE: &[&str] = &[
    "io.kubernetes.cri.container-type",
    "io.kubernetes.cri-o.ContainerType",
];
const SANDBOX_ID: &[&str] = &[
    "io.kubernetes.cri.sandbox-id",
    "io.kubernetes.cri-o.SandboxID",
];
const POD_UID: &[&str] = &["io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"];

/// Where an engine keeps a pod's or a container's own files, below one of
/// `engine_dirs`, each followed by the pod's sandbox id or the container's
/// id: containerd's CRI (`/etc/hosts`, `/etc/resolv.conf`, `/dev/shm` by
/// sandbox, an image's `VOLUME`s by container) and CRI-O's.
const ENGINE_LAYOUTS: &[&str] = &[
    "io.containerd.grpc.v1.cri/sandboxes",
    "io.containerd.grpc.v1.cri/containers",
    "overlay-containers",
];

/// Below a pod's kubelet directory, where the kubelet mounts a volume's
/// `subPath`: a bind of whatever directory the volume and the subPath
/// name, a `hostPath` of `/` included, so what is mounted there is judged
/// by where it comes from.
const KUBELET_SUBPATHS: &str = "volume-subpaths";

/// A container that came through a CRI engine, as its annotations say.
#[derive(Debug)]
struct Pod<'a> {
    sandbox_id: Option<String>,
    uid: Option<String>,
    /// The id `create` was given: this container's own.
    container_id: &'a str,
}

fn annotation(spec: &Value, names: &[&str]) -> Option<String> {
    let annotations = spec.get("annotations")?;
    names
        .iter()
        .find_map(|name| annotations.get(*name).and_then(Value::as_str))
        .filter(|value| is_plain_component(value))
        .map(str::to_owned)
}

/// An id that can only ever be one path component.
fn is_plain_component(value: &str) -> bool {
    !value.is_empty() && value != "." && value != ".." && !value.contains('/')
}

impl<'a> Pod<'a> {
    fn of(spec: &Value, container_id: &'a str) -> Option<Pod<'a>> {
        let annotations = spec.get("annotations")?;
        CONTAINER_TYPE
            .iter()
            .any(|name| annotations.get(*name).is_some())
            .then(|| Pod {
                sandbox_id: annotation(spec, SANDBOX_ID),
                uid: annotation(spec, POD_UID),
                container_id,
            })
    }

    /// The pod's directory below the kubelet's, when its uid is known.
    fn kubelet_pod_dir(&self, settings: &Settings) -> Option<PathBuf> {
        let uid = self.uid.as_ref()?;
        Some(
            canonical_or_same(&settings.kubelet_dir)
                .join("pods")
                .join(uid),
        )
    }

    /// Whether `source` (canonical) is one of this pod's own directories,
    /// or one of the operator's host paths; a subPath mount is judged by
    /// where its content comes from (`mounts`).
    fn owns(&self, source: &Path, settings: &Settings, mounts: &[Mount]) -> bool {
        if let Some(pod_dir) = self.kubelet_pod_dir(settings) {
            let subpaths = pod_dir.join(KUBELET_SUBPATHS);
            if source.starts_with(&subpaths) {
                return match subpath_origins(source, mounts, &subpaths) {
                    // Not below a subPath's mount: the kubelet's own directory.
                    None => true,
                    Some(origins) => origins
                        .iter()
                        .any(|origin| self.owns_by_name(origin, settings, &subpaths)),
                };
            }
        }
        self.owns_by_name(source, settings, Path::new("/nonexistent"))
    }

    /// `owns` by the path's name alone, nothing below `subpaths` counting.
    fn owns_by_name(&self, source: &Path, settings: &Settings, subpaths: &Path) -> bool {
        if let Some(pod_dir) = self.kubelet_pod_dir(settings) {
            if source.starts_with(&pod_dir) && !source.starts_with(subpaths) {
                return true;
            }
        }
        let ids: Vec<&str> = self
            .sandbox_id
            .as_deref()
            .into_iter()
            .chain([self.container_id])
            .filter(|id| is_plain_component(id))
            .collect();
        let in_engine_dirs = settings.engine_dirs.iter().any(|dir| {
            let dir = canonical_or_same(dir);
            ENGINE_LAYOUTS.iter().any(|layout| {
                ids.iter()
                    .any(|id| source.starts_with(dir.join(layout).join(id)))
            })
        });
        in_engine_dirs
            || settings
                .host_paths
                .iter()
                .any(|dir| source.starts_with(canonical_or_same(dir)))
    }
}

/// Where the content at `source` comes from when `source` lies in a mount
/// made below `subpaths` (a subPath): the same place as seen through every
/// other mount of its filesystem that shows it. None when `source` is not
/// in such a mount.
fn subpath_origins(source: &Path, mounts: &[Mount], subpaths: &Path) -> Option<Vec<PathBuf>> {
    // The deepest mount holding `source`; of several at one point, the
    // last, which covers the others.
    let holding = mounts
        .iter()
        .filter(|m| source.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.components().count())?;
    if !holding.mount_point.starts_with(subpaths) {
        return None;
    }
    let below = source.strip_prefix(&holding.mount_point).ok()?;
    let in_filesystem = Path::new(&holding.root).join(below);
    Some(
        mounts
            .iter()
            .filter(|m| m.device == holding.device && !m.mount_point.starts_with(subpaths))
            .filter_map(|m| {
                let rest = in_filesystem.strip_prefix(&m.root).ok()?;
                Some(m.mount_point.join(rest))
            })
            .collect(),
    )
}

/// `path` with its symbolic links resolved, or as written when it does
/// not exist (it then holds nothing a mount could come from).
fn canonical_or_same(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
}

fn is_bind(mount: &Value) -> bool {
    mount.get("type").and_then(Value::as_str) == Some("bind")
        || mount
            .get("options")
            .and_then(Value::as_array)
            .is_some_and(|options| {
                options
                    .iter()
                    .any(|o| o.as_str() == Some("bind") || o.as_str() == Some("rbind"))
            })
}

/// Refuse a CRI container's bind mount of a host path that is neither its
/// pod's own nor below one of the operator's `host_paths`. The source is
/// judged with its symbolic links resolved, as runc will mount it, and must
/// be absolute: runc joins a relative one to the bundle, while this runs
/// wherever the engine started it (the pod's first bundle, under
/// containerd), so the two would not be the same directory.
///
/// Returns each checked mount's index in `mounts` with the path it was
/// judged at, for [`pin_sources`].
pub fn refuse_host_paths(
    spec: &Value,
    settings: &Settings,
    container_id: &str,
) -> Result<Vec<(usize, PathBuf)>, OciError> {
    let Some(pod) = Pod::of(spec, container_id) else {
        return Ok(Vec::new());
    };
    let mut checked = Vec::new();
    let mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut mountinfo: Option<Vec<Mount>> = None;
    for (index, mount) in mounts.iter().enumerate().filter(|(_, m)| is_bind(m)) {
        let source = mount.get("source").and_then(Value::as_str).unwrap_or("");
        let destination = mount
            .get("destination")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let fix = format!(
            "remove the volume from the pod (a hostPath volume), or let pods mount this host \
             directory by listing it in host_paths in {}",
            super::settings::DEFAULT_PATH
        );
        if !Path::new(source).is_absolute() {
            return Err(OciError::Refused(format!(
                "the pod's container would mount {source:?} at {destination}, a relative \
                 path, which runc would find below the bundle: {fix}"
            )));
        }
        let canonical = std::fs::canonicalize(source).map_err(|err| {
            OciError::Refused(format!(
                "the pod's container would mount the host's {source:?} at {destination}, which \
                 cannot be checked ({err}); {fix}"
            ))
        })?;
        let mounts = match &mountinfo {
            Some(mounts) => mounts,
            None => mountinfo.insert(read_mountinfo()?),
        };
        if !pod.owns(&canonical, settings, mounts) {
            let resolved = if canonical.as_os_str() == source {
                String::new()
            } else {
                format!(" (which is {})", canonical.display())
            };
            return Err(OciError::Refused(format!(
                "the pod's container would mount the host's {source}{resolved} at \
                 {destination}: that is neither one of its pod's own directories (a subPath \
                 counts by where it comes from) nor below one of the runtime's host_paths, and \
                 without a user namespace the container's root is the host's root there; {fix}"
            )));
        }
        checked.push((index, canonical));
    }
    Ok(checked)
}

fn read_mountinfo() -> Result<Vec<Mount>, OciError> {
    let path = Path::new("/proc/self/mountinfo");
    let text = std::fs::read_to_string(path).map_err(|source| OciError::Io {
        what: "reading what is mounted where",
        path: path.to_owned(),
        source,
    })?;
    Ok(sandbox::mountinfo::parse_mountinfo(&text))
}

/// Make runc mount exactly what [`refuse_host_paths`] judged. Otherwise a
/// directory the pod can write in (its own volume, a shared host path)
/// could be swapped for a link to `/` between the check and runc's mount,
/// which a loop of `renameat2(RENAME_EXCHANGE)` wins within a few tries.
///
/// Each source is opened at the path it was judged at, refusing any
/// symbolic link on the way, and bind-mounted from that open file onto an
/// entry of `staging` (this runtime's own directory, 0700, which nothing
/// of the pod reaches); the spec then names the entry. The open file
/// cannot be handed to runc instead: runc's init mounts in a new mount
/// namespace, and the kernel binds only mounts of the caller's own
/// (EINVAL). [`release_sources`] detaches the entries once runc has made
/// its copies (at `start`, or at `delete` for a container never started).
pub fn pin_sources(
    spec: &mut Value,
    checked: &[(usize, PathBuf)],
    staging: &Path,
) -> Result<(), OciError> {
    use nix::fcntl::OFlag;
    use nix::mount::MsFlags;
    use sandbox::safe_file::{openat2_beneath, Beneath};
    if checked.is_empty() {
        return Ok(());
    }
    let io = |what: &'static str, path: &Path| {
        let path = path.to_owned();
        move |errno: nix::Error| OciError::Io {
            what,
            path,
            source: errno.into(),
        }
    };
    let root = nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(io("opening / to pin a pod's mount sources", Path::new("/")))?;
    super::settings::private_dir(staging)?;
    for (number, (index, path)) in checked.iter().enumerate() {
        let below_root = path.strip_prefix("/").unwrap_or(path);
        let fd = openat2_beneath(
            std::os::fd::AsFd::as_fd(&root),
            below_root,
            Beneath::new(OFlag::O_PATH | OFlag::O_CLOEXEC).no_symlinks(),
        )
        .map_err(|errno| {
            OciError::Refused(format!(
                "the pod's container mounts the host's {}, which changed while it was checked \
                 ({errno}): a link or a rename on the way; create it again",
                path.display()
            ))
        })?;
        let is_dir = nix::sys::stat::fstat(std::os::fd::AsFd::as_fd(&fd))
            .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map_err(io("looking at a pod's mount source", path))?;
        let entry = staging.join(number.to_string());
        if is_dir {
            std::fs::create_dir(&entry)
        } else {
            std::fs::File::create(&entry).map(drop)
        }
        .map_err(|source| OciError::Io {
            what: "making a pod's mount source's place",
            path: entry.clone(),
            source,
        })?;
        let from = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd));
        nix::mount::mount(
            Some(from.as_str()),
            &entry,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(io("binding a pod's mount source in place", path))?;
        // Nothing mounted below it later reaches the host's other copies.
        nix::mount::mount(
            None::<&str>,
            &entry,
            None::<&str>,
            MsFlags::MS_PRIVATE | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(io("making a pod's mount source private", &entry))?;
        if let Some(mount) = spec
            .get_mut("mounts")
            .and_then(Value::as_array_mut)
            .and_then(|mounts| mounts.get_mut(*index))
        {
            mount["source"] = Value::String(entry.to_string_lossy().into_owned());
        }
    }
    Ok(())
}

/// Detach and remove what [`pin_sources`] put in `staging`. Never deletes
/// through an entry: one still mounted (the detach failed) stays, and so
/// does the directory, rather than the host's files below it.
pub fn release_sources(staging: &Path) {
    let Ok(entries) = std::fs::read_dir(staging) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let _ = nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH);
        // rmdir and unlink refuse a mount point: what stayed mounted stays.
        let _ = std::fs::remove_dir(&path).or_else(|_| std::fs::remove_file(&path));
    }
    let _ = std::fs::remove_dir(staging);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(dir: &Path, host_paths: &[&Path]) -> Settings {
        let mut settings = Settings::parse("", Path::new("oci.toml")).expect("defaults");
        settings.engine_dirs = vec![dir.join("containerd")];
        settings.kubelet_dir = dir.join("kubelet");
        settings.host_paths = host_paths.iter().map(|p| p.to_path_buf()).collect();
        settings
    }

    fn spec(source: &Path) -> Value {
        json!({
            "annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.sandbox-id": "sid1",
                "io.kubernetes.cri.sandbox-uid": "uid1",
            },
            "mounts": [{"destination": "/data", "type": "bind", "source": source,
                        "options": ["rbind", "rw"]}],
        })
    }

    #[test]
    fn a_pod_mounts_its_own_directories_and_nothing_else_of_the_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        let own_volume = dir
            .path()
            .join("kubelet/pods/uid1/volumes/kubernetes.io~empty-dir/a");
        let other_pod = dir
            .path()
            .join("kubelet/pods/uid2/volumes/kubernetes.io~secret/s");
        let own_hosts = dir
            .path()
            .join("containerd/io.containerd.grpc.v1.cri/sandboxes/sid1");
        let other_hosts = dir
            .path()
            .join("containerd/io.containerd.grpc.v1.cri/sandboxes/sid2");
        let shared = dir.path().join("shared/data");
        for path in [&own_volume, &other_pod, &own_hosts, &other_hosts, &shared] {
            std::fs::create_dir_all(path).expect("mkdir");
        }
        let settings = settings(dir.path(), &[&dir.path().join("shared")]);
        for allowed in [&own_volume, &own_hosts, &shared] {
            refuse_host_paths(&spec(allowed), &settings, "cid1").expect("its own");
        }
        for refused in [
            Path::new("/etc"),
            &other_pod,
            &other_hosts,
            &dir.path().join("kubelet"),
        ] {
            let err = refuse_host_paths(&spec(refused), &settings, "cid1").expect_err("the host's");
            assert!(err.to_string().contains("host_paths"), "{err}");
        }
        // A link from the pod's own directory out of it is judged by its target.
        let link = own_volume.join("escape");
        std::os::unix::fs::symlink("/etc", &link).expect("symlink");
        let err = refuse_host_paths(&spec(&link), &settings, "cid1").expect_err("through a link");
        assert!(err.to_string().contains("which is /etc"), "{err}");
        // Neither a container outside the CRI nor a volume that is not a
        // bind mount is the business of this check.
        let mut podman = spec(Path::new("/etc"));
        podman["annotations"] = json!({});
        refuse_host_paths(&podman, &settings, "cid1").expect("not a pod");
    }

    #[test]
    fn ids_that_would_reach_across_pods_are_not_ids() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = settings(dir.path(), &[]);
        let volumes = dir.path().join("kubelet/pods/uid2/volumes");
        std::fs::create_dir_all(&volumes).expect("mkdir");
        let mut spec = spec(&volumes);
        // A uid of "." or ".." would make every pod's directory "its own".
        for uid in ["..", ".", "uid2/..", ""] {
            spec["annotations"]["io.kubernetes.cri.sandbox-uid"] = json!(uid);
            spec["mounts"][0]["source"] = json!(dir.path().join("kubelet/pods"));
            assert!(
                refuse_host_paths(&spec, &settings, "cid1").is_err(),
                "uid {uid:?}"
            );
        }
    }

    #[test]
    fn relative_sources_and_other_engine_paths_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = dir.path().join("containerd/io.containerd.grpc.v1.cri");
        let own_volume = engine.join("containers/cid1/volumes/v");
        let other_volume = engine.join("containers/cid2/volumes/v");
        // The sandbox id as a component, but not where the engine keeps
        // the pod's files.
        let elsewhere = dir
            .path()
            .join("containerd/io.containerd.runtime.v2.task/sid1");
        for path in [&own_volume, &other_volume, &elsewhere] {
            std::fs::create_dir_all(path).expect("mkdir");
        }
        let settings = settings(dir.path(), &[]);
        refuse_host_paths(&spec(&own_volume), &settings, "cid1").expect("its own VOLUME");
        for refused in [&other_volume, &elsewhere] {
            assert!(refuse_host_paths(&spec(refused), &settings, "cid1").is_err());
        }
        let mut relative = spec(Path::new("x"));
        relative["mounts"][0]["source"] = json!("rootfs/tmp");
        let err = refuse_host_paths(&relative, &settings, "cid1").expect_err("relative");
        assert!(err.to_string().contains("relative"), "{err}");
    }

    #[test]
    fn a_subpath_is_judged_by_where_it_comes_from() {
        let line = |dev: &str, root: &str, point: &str| {
            format!("1 1 {dev} {root} {point} rw - ext4 x rw\n")
        };
        let subpaths = Path::new("/k/pods/u/volume-subpaths");
        let mounts = sandbox::mountinfo::parse_mountinfo(
            &[
                line("8:1", "/", "/"),
                line("0:50", "/", "/k/pods/u/volumes/kubernetes.io~empty-dir/m"),
                // hostPath "/" with subPath "etc"
                line("8:1", "/etc", "/k/pods/u/volume-subpaths/host/c/0"),
                // an emptyDir on tmpfs with subPath "conf"
                line("0:50", "/conf", "/k/pods/u/volume-subpaths/m/c/1"),
            ]
            .concat(),
        );
        let origins = |p: &str| subpath_origins(Path::new(p), &mounts, subpaths);
        assert_eq!(
            origins("/k/pods/u/volume-subpaths/host/c/0"),
            Some(vec![PathBuf::from("/etc")])
        );
        assert_eq!(
            origins("/k/pods/u/volume-subpaths/host/c/0/ssl"),
            Some(vec![PathBuf::from("/etc/ssl")])
        );
        assert_eq!(
            origins("/k/pods/u/volume-subpaths/m/c/1"),
            Some(vec![PathBuf::from(
                "/k/pods/u/volumes/kubernetes.io~empty-dir/m/conf"
            )])
        );
        // A directory of the kubelet's there that no subPath is mounted on.
        assert_eq!(origins("/k/pods/u/volume-subpaths/m/c"), None);
    }
}
