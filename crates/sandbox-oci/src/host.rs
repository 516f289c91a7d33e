//! What of the host a container's spec may reach besides its network:
//! the host's pid, ipc and uts namespaces, and the host's devices.
//!
//! Every profile takes the container's capabilities away, but without a
//! user namespace the container's uid 0 is the host's uid 0, and equal
//! uids need no capability: to signal a process (`kill`), to attach to
//! System V memory of the same owner, or to open a device node owned by
//! root. What keeps those apart is the namespaces and the device rules the
//! engine writes into the spec, so a spec that gives them up is refused.

use std::path::Path;

use serde_json::Value;

use super::OciError;
use sandbox::profile::policy::Policy;

/// The namespaces a container must not share with the host, with what
/// sharing it gives and how an engine is told to make one of its own.
const PRIVATE_NAMESPACES: &[(&str, &str, &str)] = &[
    (
        "pid",
        "the host's processes, which its root can signal (kill) as their owner",
        "--pid host; Kubernetes: hostPID",
    ),
    (
        "ipc",
        "the host's System V shared memory, semaphores and message queues, which its root \
         can attach to as their owner",
        "--ipc host; Kubernetes: hostIPC",
    ),
    (
        "uts",
        "the host's host name and domain name",
        "--uts host; Kubernetes: hostNetwork",
    ),
];

/// Refuse a spec that shares the host's pid, ipc or uts namespace: one
/// whose `linux.namespaces` lacks the entry (the container stays in the
/// runtime's, the host's), or joins by `path` the namespace this runtime
/// is in. A path naming another namespace (a pod's, which sibling
/// containers join) is accepted; one that cannot be checked is refused.
pub fn refuse_host_namespaces(spec: &Value) -> Result<(), OciError> {
    let namespaces = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (kind, shares, engine_flag) in PRIVATE_NAMESPACES {
        let fix = format!(
            "give the container a {kind} namespace of its own (remove {engine_flag}; the spec \
             needs {{\"type\": \"{kind}\"}} without a path in linux.namespaces)"
        );
        let entry = namespaces
            .iter()
            .find(|ns| ns.get("type").and_then(Value::as_str) == Some(kind));
        let Some(entry) = entry else {
            return Err(OciError::Refused(format!(
                "config.json's linux.namespaces has no \"{kind}\" entry, so the container \
                 would share the host's {kind} namespace and with it {shares}; {fix}"
            )));
        };
        let Some(path) = entry
            .get("path")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
        else {
            continue;
        };
        match same_namespace(Path::new(path), kind) {
            Ok(false) => {}
            Ok(true) => {
                return Err(OciError::Refused(format!(
                    "config.json's linux.namespaces joins the {kind} namespace {path}, which is \
                     the host's, so the container would share {shares}; {fix}"
                )))
            }
            Err(err) => {
                return Err(OciError::Refused(format!(
                    "config.json's linux.namespaces joins the {kind} namespace {path}, which \
                     cannot be checked against the host's ({err}); name a namespace file that \
                     exists, or {fix}"
                )))
            }
        }
    }
    Ok(())
}

/// Whether `path` is the `kind` namespace this process is in.
fn same_namespace(path: &Path, kind: &str) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let joined = std::fs::metadata(path)?;
    let own = std::fs::metadata(format!("/proc/self/ns/{kind}"))?;
    Ok(joined.dev() == own.dev() && joined.ino() == own.ino())
}

/// The device nodes runc makes in every container (and lets the device
/// cgroup reach): `(path, major, minor)`, all character devices. An entry
/// of `linux.devices` naming one of them the same way adds nothing.
const ORDINARY_DEVICES: &[(&str, i64, i64)] = &[
    ("/dev/null", 1, 3),
    ("/dev/zero", 1, 5),
    ("/dev/full", 1, 7),
    ("/dev/random", 1, 8),
    ("/dev/urandom", 1, 9),
    ("/dev/tty", 5, 0),
];

/// What Landlock lets a container's processes write below `/dev`: the
/// ordinary character devices, the terminal (the console runc binds a pty
/// to, ptmx and /dev/pts). `/dev/shm` is scratch space, granted as such.
pub const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/console",
    "/dev/ptmx",
    "/dev/pts",
];

/// Refuse the host's devices in a spec (`--privileged` gives a container
/// every one of them, `--device` one): device nodes in `linux.devices`
/// beyond the ordinary ones, `linux.resources.devices` rules letting it
/// read or write every device (`a`) or block devices, and bind mounts of a
/// block device. Without a user namespace the container's root opens a
/// host disk (root:disk 0660) with no capability. A device whose path the
/// profile's `filesystem.write` names is the operator's choice and passes,
/// as does a block-device rule for exactly such a device.
pub fn refuse_host_devices(spec: &Value, policy: &Policy) -> Result<(), OciError> {
    let named = |path: &str| {
        policy
            .filesystem
            .write
            .iter()
            .any(|p| p.to_str() == Some(path))
    };
    let fix = |what: &str| {
        format!(
            "remove {what} from the container (podman and docker: drop --privileged and \
             --device), or, to give it this device on purpose, name its path in the profile's \
             filesystem.write (profile {:?})",
            policy.name
        )
    };
    let mut named_block_devices = Vec::new();
    let devices = spec
        .pointer("/linux/devices")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for device in devices {
        let path = device.get("path").and_then(Value::as_str).unwrap_or("?");
        let kind = device.get("type").and_then(Value::as_str).unwrap_or("?");
        let major = device.get("major").and_then(Value::as_i64);
        let minor = device.get("minor").and_then(Value::as_i64);
        let ordinary = kind == "c"
            && ORDINARY_DEVICES
                .iter()
                .any(|(p, ma, mi)| *p == path && major == Some(*ma) && minor == Some(*mi));
        if ordinary {
            continue;
        }
        if named(path) {
            // The profile names the host's node at that path: the spec
            // chooses the numbers, and must not make a named /dev/fuse a disk.
            if host_device(Path::new(path)) != Some((kind.to_owned(), major, minor)) {
                return Err(OciError::Refused(format!(
                    "config.json's linux.devices gives the container {path} as type {kind} \
                     {}:{}, which is not the host's {path}, the device the profile's \
                     filesystem.write names; give the container the host's own {path}",
                    major.unwrap_or(-1),
                    minor.unwrap_or(-1)
                )));
            }
            if kind == "b" {
                named_block_devices.extend(major.zip(minor));
            }
            continue;
        }
        let number = match (major, minor) {
            (Some(major), Some(minor)) => format!(" {major}:{minor}"),
            _ => String::new(),
        };
        return Err(OciError::Refused(format!(
            "config.json's linux.devices gives the container the host's device {path} (type \
             {kind}{number}), which its root opens as the host's root; {}",
            fix(&format!("the device {path}"))
        )));
    }
    let rules = spec
        .pointer("/linux/resources/devices")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for rule in rules {
        if rule.get("allow").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let access = rule.get("access").and_then(Value::as_str).unwrap_or("rwm");
        if !access.contains('r') && !access.contains('w') {
            // Only mknod, which needs CAP_MKNOD, which no profile gives.
            continue;
        }
        let kind = rule.get("type").and_then(Value::as_str).unwrap_or("a");
        let major = rule.get("major").and_then(Value::as_i64);
        let minor = rule.get("minor").and_then(Value::as_i64);
        let for_a_named_device = kind == "b"
            && major
                .zip(minor)
                .is_some_and(|number| named_block_devices.contains(&number));
        if (kind == "a" || kind == "b") && !for_a_named_device {
            let number = |n: Option<i64>| n.map_or("*".to_owned(), |n| n.to_string());
            return Err(OciError::Refused(format!(
                "config.json's linux.resources.devices lets the container {access:?} {} \
                 ({kind} {}:{}), the host's disks among them; {}",
                if kind == "a" {
                    "every device"
                } else {
                    "block devices"
                },
                number(major),
                number(minor),
                fix("the rule (and the devices it is for)")
            )));
        }
    }
    let mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for mount in mounts {
        let Some(source) = mount.get("source").and_then(Value::as_str) else {
            continue;
        };
        let destination = mount
            .get("destination")
            .and_then(Value::as_str)
            .unwrap_or("?");
        if is_block_device(Path::new(source)) && !named(destination) {
            return Err(OciError::Refused(format!(
                "config.json's mounts bind the host's block device {source} at {destination}; \
                 {}",
                fix(&format!("the mount of {source}"))
            )));
        }
    }
    Ok(())
}

/// The host's device node at `path`: its type as the spec writes it
/// (`b` or `c`), major and minor.
fn host_device(path: &Path) -> Option<(String, Option<i64>, Option<i64>)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let metadata = std::fs::metadata(path).ok()?;
    let kind = if metadata.file_type().is_block_device() {
        "b"
    } else if metadata.file_type().is_char_device() {
        "c"
    } else {
        return None;
    };
    let rdev = metadata.rdev();
    let major = i64::try_from(nix::sys::stat::major(rdev)).ok();
    let minor = i64::try_from(nix::sys::stat::minor(rdev)).ok();
    Some((kind.to_owned(), major, minor))
}

fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(namespaces: Value) -> Value {
        json!({"linux": {"namespaces": namespaces}})
    }

    #[test]
    fn the_hosts_pid_ipc_and_uts_namespaces_are_refused_by_field() {
        let own = json!([{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]);
        assert!(refuse_host_namespaces(&spec(own)).is_ok());
        for kind in ["pid", "ipc", "uts"] {
            let without: Vec<Value> = ["pid", "ipc", "uts"]
                .iter()
                .filter(|k| **k != kind)
                .map(|k| json!({"type": k}))
                .collect();
            let err = refuse_host_namespaces(&spec(json!(without)))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("linux.namespaces")
                    && err.contains(&format!("no \"{kind}\" entry"))
                    && err.contains(&format!("--{kind} host")),
                "{err}"
            );
            // The runtime's own namespace is the host's.
            let mut joined = vec![json!({"type": kind, "path": format!("/proc/self/ns/{kind}")})];
            joined.extend(without.clone());
            let err = refuse_host_namespaces(&spec(json!(joined)))
                .unwrap_err()
                .to_string();
            assert!(err.contains("which is the host's"), "{err}");
            let mut missing = vec![json!({"type": kind, "path": "/nonexistent/ns"})];
            missing.extend(without);
            let err = refuse_host_namespaces(&spec(json!(missing)))
                .unwrap_err()
                .to_string();
            assert!(err.contains("cannot be checked"), "{err}");
        }
    }

    #[test]
    fn privileged_modes_devices_are_refused_unless_the_profile_names_them() {
        let mut policy = sandbox::profile::load("strict").unwrap();
        let ordinary = json!({"linux": {
            "devices": [{"path": "/dev/null", "type": "c", "major": 1, "minor": 3}],
            "resources": {"devices": [
                {"allow": false, "access": "rwm"},
                {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
                {"allow": true, "type": "b", "access": "m"}
            ]}
        }});
        assert!(refuse_host_devices(&ordinary, &policy).is_ok());
        let disguised = json!({"linux": {
            "devices": [{"path": "/dev/null", "type": "b", "major": 8, "minor": 0}]
        }});
        let err = refuse_host_devices(&disguised, &policy)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("linux.devices") && err.contains("/dev/null") && err.contains("8:0"),
            "{err}"
        );
        let every =
            json!({"linux": {"resources": {"devices": [{"allow": true, "access": "rwm"}]}}});
        let err = refuse_host_devices(&every, &policy)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("linux.resources.devices") && err.contains("every device"),
            "{err}"
        );
        let disk = json!({"linux": {
            "devices": [{"path": "/dev/sdz", "type": "b", "major": 8, "minor": 0}],
            "resources": {"devices": [
                {"allow": true, "type": "b", "major": 8, "minor": 0, "access": "rw"}
            ]}
        }});
        let err = refuse_host_devices(&disk, &policy).unwrap_err().to_string();
        assert!(
            err.contains("/dev/sdz") && err.contains("filesystem.write"),
            "{err}"
        );
        // Named, it is the host's node at that path, numbers and all.
        policy.filesystem.write.push("/dev/sdz".into());
        let err = refuse_host_devices(&disk, &policy).unwrap_err().to_string();
        assert!(err.contains("not the host's /dev/sdz"), "{err}");
        policy.filesystem.write.push("/dev/full".into());
        let full = json!({"linux": {
            "devices": [{"path": "/dev/full", "type": "c", "major": 1, "minor": 7}]
        }});
        assert!(refuse_host_devices(&full, &policy).is_ok());
        let full_as_disk = json!({"linux": {
            "devices": [{"path": "/dev/full", "type": "b", "major": 8, "minor": 0}],
            "resources": {"devices": [
                {"allow": true, "type": "b", "major": 8, "minor": 0, "access": "rw"}
            ]}
        }});
        assert!(refuse_host_devices(&full_as_disk, &policy).is_err());
        // Naming a device lets no rule reach the others.
        let more = json!({"linux": {
            "devices": [{"path": "/dev/full", "type": "c", "major": 1, "minor": 7}],
            "resources": {"devices": [{"allow": true, "type": "b", "access": "rw"}]}
        }});
        assert!(refuse_host_devices(&more, &policy).is_err());
    }
}
