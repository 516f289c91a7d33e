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

/// A container that came through a CRI engine, as its annotations say.
#[derive(Debug)]
struct Pod {
    sandbox_id: Option<String>,
    uid: Option<String>,
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

impl Pod {
    fn of(spec: &Value) -> Option<Pod> {
        let annotations = spec.get("annotations")?;
        CONTAINER_TYPE
            .iter()
            .any(|name| annotations.get(*name).is_some())
            .then(|| Pod {
                sandbox_id: annotation(spec, SANDBOX_ID),
                uid: annotation(spec, POD_UID),
            })
    }

    /// Whether `source` (canonical) is one of this pod's own directories.
    fn owns(&self, source: &Path, settings: &Settings) -> bool {
        if let Some(uid) = &self.uid {
            let pod_dir = canonical_or_same(&settings.kubelet_dir)
                .join("pods")
                .join(uid);
            if source.starts_with(&pod_dir) {
                return true;
            }
        }
        let Some(sandbox_id) = &self.sandbox_id else {
            return false;
        };
        settings.engine_dirs.iter().any(|dir| {
            source
                .strip_prefix(canonical_or_same(dir))
                .is_ok_and(|below| below.iter().any(|c| c == sandbox_id.as_str()))
        })
    }
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
/// judged with its symbolic links resolved, as runc will mount it.
pub fn refuse_host_paths(spec: &Value, settings: &Settings) -> Result<(), OciError> {
    let Some(pod) = Pod::of(spec) else {
        return Ok(());
    };
    let mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for mount in mounts.iter().filter(|m| is_bind(m)) {
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
        let canonical = std::fs::canonicalize(source).map_err(|err| {
            OciError::Refused(format!(
                "the pod's container would mount the host's {source:?} at {destination}, which \
                 cannot be checked ({err}); {fix}"
            ))
        })?;
        let allowed = pod.owns(&canonical, settings)
            || settings
                .host_paths
                .iter()
                .any(|dir| canonical.starts_with(canonical_or_same(dir)));
        if !allowed {
            let resolved = if canonical.as_os_str() == source {
                String::new()
            } else {
                format!(" (which is {})", canonical.display())
            };
            return Err(OciError::Refused(format!(
                "the pod's container would mount the host's {source}{resolved} at \
                 {destination}: that is neither one of its pod's own directories nor below one \
                 of the runtime's host_paths, and without a user namespace the container's root \
                 is the host's root there; {fix}"
            )));
        }
    }
    Ok(())
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
            refuse_host_paths(&spec(allowed), &settings).expect("its own");
        }
        for refused in [
            Path::new("/etc"),
            &other_pod,
            &other_hosts,
            &dir.path().join("kubelet"),
        ] {
            let err = refuse_host_paths(&spec(refused), &settings).expect_err("the host's");
            assert!(err.to_string().contains("host_paths"), "{err}");
        }
        // A link from the pod's own directory out of it is judged by its target.
        let link = own_volume.join("escape");
        std::os::unix::fs::symlink("/etc", &link).expect("symlink");
        let err = refuse_host_paths(&spec(&link), &settings).expect_err("through a link");
        assert!(err.to_string().contains("which is /etc"), "{err}");
        // Neither a container outside the CRI nor a volume that is not a
        // bind mount is the business of this check.
        let mut podman = spec(Path::new("/etc"));
        podman["annotations"] = json!({});
        refuse_host_paths(&podman, &settings).expect("not a pod");
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
            assert!(refuse_host_paths(&spec, &settings).is_err(), "uid {uid:?}");
        }
    }
}
