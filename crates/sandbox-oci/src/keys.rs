//! Keys as runc reads them.
//!
//! runc decodes `config.json`, `exec`'s process file and `update`'s
//! resources with Go's `encoding/json`, which matches an object's key to a
//! struct field case-insensitively and also folds `ſ` (U+017F) to `s` and
//! `K` (U+212A, the Kelvin sign) to `k`. A key spelled `proceſs`, `Args` or
//! `StartContainer` is, to runc, the spec's `process`, `args` or
//! `startContainer`; to this runtime, which reads keys exactly, it is an
//! unknown field passed through untouched. Left alone, it would let the
//! image's process run in place of the init, or a hook or a limit slip
//! past the checks. The spec spells every field one way, so any other
//! spelling of one is refused.

use serde_json::Value;

use super::OciError;

/// Every field name of the OCI runtime spec's configuration (its Go types,
/// `specs-go/config.go`, up to v1.2 and the fields added since): a superset
/// of the names runc 1.1's decoder knows. A name missing here that runc
/// knows would go unchecked, but this runtime reads no such field either.
const SPEC_FIELDS: &[&str] = &[
    "DNSSearchList",
    "access",
    "action",
    "additionalGids",
    "affinity",
    "allow",
    "allowUnqualifiedDNSQuery",
    "allowedAddress",
    "ambient",
    "anet",
    "annotations",
    "apparmorProfile",
    "architectures",
    "args",
    "blockIO",
    "bounding",
    "bps",
    "burst",
    "capabilities",
    "cappedCPU",
    "cappedMemory",
    "cgroupsPath",
    "checkBeforeUpdate",
    "chflags",
    "class",
    "classID",
    "closID",
    "commandLine",
    "configureAllowedAddress",
    "consoleSize",
    "containerID",
    "count",
    "cpu",
    "cpus",
    "createContainer",
    "createRuntime",
    "credentialSpec",
    "cwd",
    "deadline",
    "defaultAction",
    "defaultErrnoRet",
    "defrouter",
    "destination",
    "deviceTree",
    "devices",
    "disableOOMKiller",
    "domain",
    "domainname",
    "dtdevs",
    "effective",
    "enableMonitoring",
    "endpointList",
    "enforceStatfs",
    "env",
    "errnoRet",
    "execCPUAffinity",
    "fileMode",
    "final",
    "firstGFN",
    "firstMFN",
    "flags",
    "format",
    "freebsd",
    "gid",
    "gidMappings",
    "group",
    "hard",
    "hcaHandles",
    "hcaObjects",
    "height",
    "hooks",
    "host",
    "hostID",
    "hostname",
    "hugepageLimits",
    "hwconfig",
    "hyperv",
    "hypervisor",
    "id",
    "idType",
    "idle",
    "ignoreFlushesDuringBoot",
    "image",
    "index",
    "inheritable",
    "initial",
    "initrd",
    "intelRdt",
    "interface",
    "ioPriority",
    "iomems",
    "iops",
    "ip4",
    "ip4Addr",
    "ip6",
    "ip6Addr",
    "irqs",
    "jail",
    "kernel",
    "kernelTCP",
    "l3CacheSchema",
    "layerFolders",
    "leafWeight",
    "limit",
    "limitpriv",
    "linkProtection",
    "linkname",
    "linux",
    "listenerMetadata",
    "listenerPath",
    "lowerLink",
    "macAddress",
    "major",
    "mask",
    "maskedPaths",
    "maxShmMemory",
    "maximum",
    "memBwSchema",
    "memory",
    "memoryPolicy",
    "mems",
    "milestone",
    "minor",
    "mlock",
    "mode",
    "mount",
    "mountLabel",
    "mounts",
    "name",
    "names",
    "namespaces",
    "nanosecs",
    "ncpus",
    "netDevices",
    "network",
    "networkNamespace",
    "networkSharedContainerName",
    "nice",
    "noNewPrivileges",
    "nodes",
    "nrMFNs",
    "ociVersion",
    "oomScoreAdj",
    "op",
    "options",
    "pageSize",
    "parameters",
    "parent",
    "path",
    "period",
    "permitted",
    "personality",
    "physical",
    "pids",
    "policy",
    "poststart",
    "poststop",
    "prestart",
    "priorities",
    "priority",
    "process",
    "quota",
    "quotas",
    "rate",
    "rawSockets",
    "rdma",
    "readonly",
    "readonlyPaths",
    "realtimePeriod",
    "realtimeRuntime",
    "reservation",
    "reservedPorts",
    "resources",
    "rlimits",
    "root",
    "rootfsPropagation",
    "runtime",
    "sandboxSize",
    "scheduler",
    "schemata",
    "seccomp",
    "secs",
    "selinuxLabel",
    "servicing",
    "setHostname",
    "shares",
    "size",
    "socketAf",
    "soft",
    "solaris",
    "source",
    "startContainer",
    "storage",
    "suser",
    "swap",
    "swappiness",
    "syscalls",
    "sysctl",
    "sysvmsg",
    "sysvsem",
    "sysvshm",
    "terminal",
    "throttleReadBpsDevice",
    "throttleReadIOPSDevice",
    "throttleWriteBpsDevice",
    "throttleWriteIOPSDevice",
    "timeOffsets",
    "timeout",
    "type",
    "uid",
    "uidMappings",
    "umask",
    "unified",
    "user",
    "username",
    "utilityVMPath",
    "value",
    "valueTwo",
    "vcpus",
    "vm",
    "vnet",
    "vnetInterfaces",
    "weight",
    "weightDevice",
    "width",
    "windows",
    "zos",
];

/// Fields whose value is a Go map: their keys are data (annotation names,
/// sysctls, cgroup files, devices), matched exactly, not field names.
const MAP_FIELDS: &[&str] = &[
    "annotations",
    "sysctl",
    "unified",
    "rdma",
    "netDevices",
    "timeOffsets",
];

/// A key as Go's decoder compares it with a field name: ASCII letters in
/// either case, and the two non-ASCII letters that fold to ASCII ones.
fn folded(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '\u{17F}' => 's',
            '\u{212A}' => 'k',
            c => c.to_ascii_lowercase(),
        })
        .collect()
}

/// The spec's spelling of the field runc would read `key` as, when that
/// is not `key` itself.
fn respelled(key: &str) -> Option<&'static str> {
    if SPEC_FIELDS.contains(&key) {
        return None;
    }
    let key = folded(key);
    SPEC_FIELDS
        .iter()
        .find(|field| field.to_ascii_lowercase() == key)
        .copied()
}

/// Refuse `document` (`what` names it) if any of its keys is a field of
/// the spec spelled differently from the spec.
pub fn spelled_as_the_spec(document: &Value, what: &str) -> Result<(), OciError> {
    let mut path = Vec::new();
    check(document, &mut path, what)
}

fn check<'a>(value: &'a Value, path: &mut Vec<&'a str>, what: &str) -> Result<(), OciError> {
    match value {
        Value::Array(items) => items.iter().try_for_each(|item| check(item, path, what)),
        Value::Object(object) => {
            let is_map = path.last().is_some_and(|field| MAP_FIELDS.contains(field));
            for (key, inner) in object {
                if !is_map {
                    if let Some(field) = respelled(key) {
                        let at = path.iter().map(|p| format!("{p}.")).collect::<String>();
                        return Err(OciError::Refused(format!(
                            "{what} has the key \"{at}{key}\", which runc reads as the spec's \
                             \"{at}{field}\" (Go matches keys case-insensitively, and `ſ` as `s`) \
                             while this runtime reads only \"{field}\": a field spelled \
                             otherwise than in the spec would escape its checks; spell it \
                             \"{field}\""
                        )));
                    }
                }
                path.push(key);
                let checked = check(inner, path, what);
                path.pop();
                checked?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refusal(document: &Value) -> String {
        match spelled_as_the_spec(document, "config.json") {
            Err(err) => err.to_string(),
            Ok(()) => panic!("accepted {document}"),
        }
    }

    #[test]
    fn the_specs_spelling_passes_and_data_keys_are_not_field_names() {
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["/bin/true"], "env": ["PATH=/bin"], "cwd": "/"},
            "annotations": {"Process": "x", "ARGS": "y"},
            "linux": {
                "sysctl": {"Limit": "1"},
                "resources": {"unified": {"Memory": "1"}, "pids": {"limit": 5}},
                "namespaces": [{"type": "pid"}],
            },
            "somethingNewer": {"Whatever": 1},
        });
        assert!(spelled_as_the_spec(&spec, "config.json").is_ok());
    }

    #[test]
    fn every_other_spelling_of_a_field_is_refused_with_the_specs() {
        let message = refusal(&json!({"proce\u{17F}s": {}}));
        assert!(message.contains("\"proceſs\""), "{message}");
        assert!(message.contains("\"process\""), "{message}");
        let message = refusal(&json!({"process": {"Args": []}}));
        assert!(message.contains("\"process.Args\""), "{message}");
        assert!(message.contains("\"process.args\""), "{message}");
        let message = refusal(&json!({"hooks": {"StartContainer": []}}));
        assert!(message.contains("hooks.startContainer"), "{message}");
        refusal(&json!({"linux": {"resources": {"memory": {"\u{212A}ernelTCP": 1}}}}));
        refusal(&json!({"mounts": [{"Destination": "/x"}]}));
        refusal(&json!({"linux": {"resources": {"rdma": {"mlx5": {"HcaHandles": 1}}}}}));
        refusal(&json!({"ANNOTATIONS": {}}));
    }
}
