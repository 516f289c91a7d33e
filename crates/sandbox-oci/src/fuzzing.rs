//! Entry points for the coverage-guided fuzz targets in `fuzz/` that read
//! this face's untrusted input (see the core's `sandbox::fuzzing`). Not a
//! stable API: hidden from the documentation, shaped by the targets.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use sandbox::fuzzing::builtin_policy;

/// A bundle's `config.json`, as `sandbox-runc create` reads and rewrites it.
pub fn oci_config(bytes: &[u8]) {
    use crate::{keys, spec};
    let Ok(mut config) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if keys::spelled_as_the_spec(&config, "config.json").is_err() {
        return;
    }
    // The runtime's settings choose among built-in profiles here.
    let requested = spec::requested_profile(&config);
    let Some(policy) = builtin_policy(requested.as_deref().unwrap_or("strict")) else {
        return;
    };
    let Ok(layers) = spec::layers(&config, policy) else {
        return;
    };
    let _ = spec::rootfs(&config, Path::new("/nonexistent-sandbox-fuzz/bundle"));
    let Ok(ids) = spec::id_maps_of(&config) else {
        return;
    };
    let _ = spec::identity(config.get("process").unwrap_or(&Value::Null), &ids);
    let _ = spec::secure_config(
        &mut config,
        policy,
        &layers,
        Path::new("/nonexistent-sandbox-fuzz/init"),
        3,
    );
}

/// `exec --process FILE`'s process, checked against a container created
/// from a plain config under the strict profile.
pub fn oci_process(bytes: &[u8]) {
    use crate::{keys, spec};
    static CONTAINER: OnceLock<Result<(spec::IdMaps, spec::Layers), String>> = OnceLock::new();
    let container = CONTAINER.get_or_init(|| {
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["/bin/sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": {
                "namespaces": [
                    {"type": "user"}, {"type": "mount"}, {"type": "pid"}, {"type": "network"},
                    {"type": "ipc"}, {"type": "uts"}, {"type": "cgroup"}
                ],
                "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}],
                "gidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}]
            }
        });
        let strict = builtin_policy("strict").ok_or("no built-in strict")?;
        let layers = spec::layers(&config, strict).map_err(|err| err.to_string())?;
        let ids = spec::id_maps_of(&config).map_err(|err| err.to_string())?;
        Ok((ids, layers))
    });
    let (ids, layers) = match container {
        Ok(container) => container,
        Err(err) => panic!("the container of the oci_process target does not set up: {err}"),
    };
    let Ok(mut process) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if keys::spelled_as_the_spec(&process, "exec's process file").is_err() {
        return;
    }
    let _ = spec::identity(&process, ids);
    let _ = spec::secure_process(&mut process, layers, 3);
}

#[cfg(test)]
mod tests {
    //! The checked-in corpus (fuzz/corpus/TARGET) replays under `cargo test`.
    #[test]
    fn oci_config() {
        sandbox::fuzzing::replay("oci_config", super::oci_config);
    }
    #[test]
    fn oci_process() {
        sandbox::fuzzing::replay("oci_process", super::oci_process);
    }
}
