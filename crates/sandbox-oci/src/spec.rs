//! Rewriting a bundle's `config.json` (and `exec`'s process file) so that
//! runc starts our init in front of the container's process, with the
//! profile's layers on top of what the engine asked for.
//!
//! The spec is edited as JSON, not through typed structs: every field this
//! code does not touch reaches runc byte for byte, including ones newer
//! than this code.

use std::path::{Path, PathBuf};

use sandbox_oci_init::{LandlockPlan, Plan, SeccompPlan, INIT_PATH, PLAN_VERSION};
use serde_json::{json, Map, Value};

use super::OciError;
use sandbox::profile::policy::{Enforcement, NetworkMode, Policy, ProjectAccess};

/// The annotation that chooses a container's profile.
pub const PROFILE_ANNOTATION: &str = "run.sandbox.profile";
/// The annotation `sandbox oci` sets on a spec it rewrote (the profile's
/// name): a spec carrying it is not rewritten twice.
pub const ENFORCED_ANNOTATION: &str = "run.sandbox.enforced";

/// System calls the init makes that an engine's filter may refuse: they
/// only ever take rights away, so the engine's filter is made to allow
/// them (the profile's own filter, installed after them, decides for the
/// container's process).
const INIT_CALLS: &[&str] = &[
    "landlock_create_ruleset",
    "landlock_add_rule",
    "landlock_restrict_self",
    "seccomp",
];

/// The kernel's limit on one argument or environment string of an exec,
/// its terminating NUL included (`MAX_ARG_STRLEN`).
const ARGUMENT_MAX: usize = 128 << 10;

/// Always writable where the container has them: scratch space every
/// profile gives a run.
const SCRATCH: &[&str] = &["/tmp", "/var/tmp", "/dev/shm"];

/// Files the engine bind-mounts read-write for its own bookkeeping; a
/// container has no business writing them.
const ENGINE_FILES: &[&str] = &[
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/run/.containerenv",
    "/.dockerenv",
    "/dev/termination-log",
];

/// The layers a container's processes get, decided once at `create` and
/// reused by every `exec`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Layers {
    /// Landlock rules; None when the profile turned Landlock off.
    pub landlock: Option<LandlockPlan>,
    /// Seccomp programs; None when the profile turned seccomp off.
    pub seccomp: Option<SeccompPlan>,
    /// The process starts only without an interface up but loopback (the
    /// profile's network mode is `none` or `loopback`).
    #[serde(default)]
    pub loopback_only: bool,
}

fn field<'a>(value: &'a mut Value, name: &str) -> Result<&'a mut Map<String, Value>, OciError> {
    let object = value
        .as_object_mut()
        .ok_or_else(|| OciError::Spec(format!("expected an object holding \"{name}\"")))?;
    let entry = object
        .entry(name.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    entry
        .as_object_mut()
        .ok_or_else(|| OciError::Spec(format!("\"{name}\" is not an object")))
}

fn strings(value: Option<&Value>, what: &str) -> Result<Vec<String>, OciError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| OciError::Spec(format!("{what} holds a non-string")))
            })
            .collect(),
        Some(_) => Err(OciError::Spec(format!("{what} is not a list"))),
    }
}

/// The id the kernel shows for one that a user namespace does not map.
const OVERFLOW_ID: u32 = 65_534;

/// One range of `linux.uidMappings` or `gidMappings`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IdMap {
    /// The first id inside the container.
    pub inside: u32,
    /// The id it is outside.
    pub outside: u32,
    /// How many ids follow.
    pub size: u32,
}

/// How the container's ids are ids outside it: the same when it makes no
/// user namespace, its mappings when it makes one, unknown (every id the
/// overflow id) when it joins one.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IdMaps {
    /// Whether the container is in a user namespace.
    pub user_namespace: bool,
    /// `linux.uidMappings` (empty for a joined namespace).
    pub uid: Vec<IdMap>,
    /// `linux.gidMappings` (empty for a joined namespace).
    pub gid: Vec<IdMap>,
}

/// Who a container's process is outside it: the ids the supervisor takes
/// for the file access its broker does on the process's behalf.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    /// The file-system user id.
    pub uid: u32,
    /// The file-system group id.
    pub gid: u32,
    /// The supplementary groups.
    pub groups: Vec<u32>,
}

fn id_maps(list: Option<&Value>, what: &str) -> Result<Vec<IdMap>, OciError> {
    let Some(list) = list.filter(|l| !l.is_null()) else {
        return Ok(Vec::new());
    };
    let items = list
        .as_array()
        .ok_or_else(|| OciError::Spec(format!("{what} is not a list")))?;
    items
        .iter()
        .map(|item| {
            let number = |key: &str| {
                item.get(key)
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| OciError::Spec(format!("{what} holds a range without {key}")))
            };
            Ok(IdMap {
                inside: number("containerID")?,
                outside: number("hostID")?,
                size: number("size")?,
            })
        })
        .collect()
}

/// The container's id mappings, from its spec.
pub fn id_maps_of(spec: &Value) -> Result<IdMaps, OciError> {
    let user = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .and_then(|list| {
            list.iter()
                .find(|ns| ns.get("type").and_then(Value::as_str) == Some("user"))
        });
    let Some(user) = user else {
        return Ok(IdMaps::default());
    };
    let joined = user
        .get("path")
        .and_then(Value::as_str)
        .is_some_and(|p| !p.is_empty());
    if joined {
        return Ok(IdMaps {
            user_namespace: true,
            ..IdMaps::default()
        });
    }
    Ok(IdMaps {
        user_namespace: true,
        uid: id_maps(spec.pointer("/linux/uidMappings"), "linux.uidMappings")?,
        gid: id_maps(spec.pointer("/linux/gidMappings"), "linux.gidMappings")?,
    })
}

fn outside(id: u32, maps: &[IdMap], user_namespace: bool) -> u32 {
    if !user_namespace {
        return id;
    }
    maps.iter()
        .find(|m| id >= m.inside && id - m.inside < m.size)
        .and_then(|m| m.outside.checked_add(id - m.inside))
        .unwrap_or(OVERFLOW_ID)
}

/// `process.user.additionalGids`: the supplementary groups, as ids inside
/// the container.
fn additional_gids(process: &Value) -> Result<Vec<u32>, OciError> {
    match process.pointer("/user/additionalGids") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|g| {
                g.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        OciError::Spec("process.user.additionalGids holds a non-id".to_owned())
                    })
            })
            .collect(),
        Some(_) => Err(OciError::Spec(
            "process.user.additionalGids is not a list".to_owned(),
        )),
    }
}

/// Who `process` (`config.json`'s or `exec`'s) runs as outside the
/// container.
pub fn identity(process: &Value, maps: &IdMaps) -> Result<Identity, OciError> {
    let id = |key: &str| -> Result<u32, OciError> {
        match process.pointer(&format!("/user/{key}")) {
            None | Some(Value::Null) => Ok(0),
            Some(value) => value
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| OciError::Spec(format!("process.user.{key} is not an id"))),
        }
    };
    let groups = additional_gids(process)?;
    Ok(Identity {
        uid: outside(id("uid")?, &maps.uid, maps.user_namespace),
        gid: outside(id("gid")?, &maps.gid, maps.user_namespace),
        groups: groups
            .into_iter()
            .map(|g| outside(g, &maps.gid, maps.user_namespace))
            .collect(),
    })
}

/// The profile a spec asks for through [`PROFILE_ANNOTATION`], if any.
pub fn requested_profile(spec: &Value) -> Option<String> {
    spec.pointer(&format!(
        "/annotations/{}",
        PROFILE_ANNOTATION.replace('/', "~1")
    ))
    .and_then(Value::as_str)
    .map(str::to_owned)
}

/// Decide the layers for a container of `spec` under `policy`, checking
/// that what the spec asks for can be kept to the profile.
pub fn layers(spec: &Value, policy: &Policy) -> Result<Layers, OciError> {
    check_network(spec, policy)?;
    super::host::refuse_host_namespaces(spec)?;
    super::host::refuse_host_devices(spec, policy)?;
    let landlock = match policy.enforce.landlock {
        Enforcement::Off => None,
        level => Some(LandlockPlan {
            required: level == Enforcement::Required,
            read: vec!["/".to_owned()],
            write: writable_paths(spec, policy)?,
            devices: super::host::WRITABLE_DEVICES
                .iter()
                .map(|p| (*p).to_owned())
                .collect(),
        }),
    };
    let seccomp = match policy.enforce.seccomp {
        Enforcement::Off => None,
        level => {
            let compiled = sandbox::seccomp::compile(&policy.syscalls)
                .map_err(|err| OciError::Profile(format!("compiling its seccomp filter: {err}")))?;
            Some(SeccompPlan {
                required: level == Enforcement::Required,
                programs: compiled
                    .programs()
                    .iter()
                    .map(|program| {
                        let program: Vec<sandbox_oci_init::Instruction> =
                            program.iter().copied().map(Into::into).collect();
                        sandbox_oci_init::encode_program(&program)
                    })
                    .collect(),
            })
        }
    };
    // check_network saw the namespace as the spec names it; a hook may
    // still connect a fresh one before `start`, which the init checks.
    let loopback_only = matches!(
        policy.network.mode,
        NetworkMode::None | NetworkMode::Loopback
    );
    Ok(Layers {
        landlock,
        seccomp,
        loopback_only,
    })
}

/// A container shares what its network namespace reaches; a profile that
/// keeps runs off the network accepts only a fresh, empty one.
fn check_network(spec: &Value, policy: &Policy) -> Result<(), OciError> {
    let mode = policy.network.mode;
    let namespaces = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let network = namespaces
        .iter()
        .find(|ns| ns.get("type").and_then(Value::as_str) == Some("network"));
    let joined = network
        .and_then(|ns| ns.get("path"))
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty());
    let fix = format!(
        "run it with a network namespace of its own and nothing in it (podman and docker: \
         --network none), or choose a profile with network mode \"host\" through the \
         {PROFILE_ANNOTATION} annotation"
    );
    match mode {
        NetworkMode::Host => Ok(()),
        NetworkMode::Allowlist => Err(OciError::Refused(format!(
            "profile {:?} has a network allowlist, which containers cannot have yet (the \
             proxy needs the sandbox's own loopback); choose a profile with network mode \
             \"none\", \"loopback\" or \"host\"",
            policy.name
        ))),
        NetworkMode::None | NetworkMode::Loopback => match (network, joined) {
            (Some(_), None) => Ok(()),
            (Some(_), Some(path)) => Err(OciError::Refused(format!(
                "profile {:?} keeps containers off the network (network mode {:?}), but this \
                 container joins the network namespace {path}, which the engine connected: {fix}",
                policy.name,
                mode.name()
            ))),
            (None, _) => Err(OciError::Refused(format!(
                "profile {:?} keeps containers off the network (network mode {:?}), but this \
                 container shares the host's network: {fix}",
                policy.name,
                mode.name()
            ))),
        },
    }
}

/// What the container's processes may write: its read-write volumes and
/// tmpfs mounts (not the engine's bookkeeping files, /proc, /sys or /dev),
/// scratch directories, the working directory when the profile's project is
/// writable, and the profile's own `write` list read as container paths
/// (`/` there makes the image's files writable too).
fn writable_paths(spec: &Value, policy: &Policy) -> Result<Vec<String>, OciError> {
    let mut write: Vec<String> = SCRATCH.iter().map(|p| (*p).to_owned()).collect();
    let mounts = spec
        .get("mounts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for mount in &mounts {
        let Some(destination) = mount
            .get("destination")
            .and_then(Value::as_str)
            .and_then(normalized)
        else {
            continue;
        };
        let destination = destination.as_str();
        let options = strings(mount.get("options"), "a mount's options")?;
        let read_only = options.iter().any(|o| o == "ro" || o == "rro");
        let kind = mount.get("type").and_then(Value::as_str).unwrap_or("");
        let system = ["proc", "sysfs", "cgroup", "cgroup2", "mqueue", "devpts"].contains(&kind)
            || never_writable(destination);
        if !read_only && !system && destination != "/" {
            write.push(destination.to_owned());
        }
    }
    if policy.filesystem.project == ProjectAccess::ReadWrite {
        if let Some(cwd) = spec
            .pointer("/process/cwd")
            .and_then(Value::as_str)
            .and_then(normalized)
        {
            // The image names it (WORKDIR): not /, nor what no mount may
            // make writable, nor a directory holding an engine's file.
            let holds_engine_file = ENGINE_FILES
                .iter()
                .any(|file| under(file, &cwd) && mounted(&mounts, file));
            if cwd != "/" && !never_writable(&cwd) && !holds_engine_file {
                write.push(cwd);
            }
        }
    }
    for path in &policy.filesystem.write {
        write.push(path.to_string_lossy().into_owned());
    }
    write.sort();
    write.dedup();
    Ok(write)
}

/// /proc, /sys, /dev (but /dev/shm) and the engine's files: a volume or a
/// working directory there is never made writable. Below /proc/sys, root
/// without capabilities writes the host's sysctls when the engine leaves
/// it writable (kernel.core_pattern runs a program on the host).
fn never_writable(path: &str) -> bool {
    under(path, "/proc")
        || under(path, "/sys")
        || (under(path, "/dev") && !under(path, "/dev/shm"))
        || ENGINE_FILES.contains(&path)
}

/// Whether a mount of `mounts` is at `destination`.
fn mounted(mounts: &[Value], destination: &str) -> bool {
    mounts.iter().any(|mount| {
        mount
            .get("destination")
            .and_then(Value::as_str)
            .and_then(normalized)
            .is_some_and(|d| d == destination)
    })
}

/// `path` as the init resolves it (empty and `.` components dropped), so
/// that the checks above see what it will grant: `//` and `/.` are the
/// image's root, `//proc` is /proc. None for a relative path or one with
/// `..`, which the init would not grant anyway.
fn normalized(path: &str) -> Option<String> {
    let rest = path.strip_prefix('/')?;
    let mut clean = String::new();
    for component in rest.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if component == ".." {
            return None;
        }
        clean.push('/');
        clean.push_str(component);
    }
    if clean.is_empty() {
        clean.push('/');
    }
    Some(clean)
}

fn under(path: &str, dir: &str) -> bool {
    path == dir
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Rewrite a container's `config.json`: our init in front of its process,
/// mounted from `init` on the host; the profile's capabilities (none),
/// no_new_privs and limits; the engine's filter letting the init restrict
/// itself. The broker channel is at `broker_fd` in the container.
pub fn secure_config(
    spec: &mut Value,
    policy: &Policy,
    layers: &Layers,
    init: &Path,
    broker_fd: i32,
) -> Result<(), OciError> {
    if spec
        .pointer(&format!("/annotations/{ENFORCED_ANNOTATION}"))
        .is_some()
    {
        return Err(OciError::Spec(format!(
            "this config.json was already rewritten by sandbox oci (it has the \
             {ENFORCED_ANNOTATION} annotation); the engine must write a fresh one"
        )));
    }
    refuse_container_hooks(spec)?;
    refuse_criu_configuration(spec)?;
    refuse_unit_properties(spec)?;
    let process = spec
        .get_mut("process")
        .ok_or_else(|| OciError::Spec("config.json has no \"process\"".to_owned()))?;
    secure_process(process, layers, broker_fd)?;
    field(spec, "annotations")?.insert(
        ENFORCED_ANNOTATION.to_owned(),
        Value::String(policy.name.clone()),
    );
    let mounts = spec
        .as_object_mut()
        .ok_or_else(|| OciError::Spec("config.json is not an object".to_owned()))?
        .entry("mounts")
        .or_insert_with(|| Value::Array(Vec::new()));
    let mounts = mounts
        .as_array_mut()
        .ok_or_else(|| OciError::Spec("\"mounts\" is not a list".to_owned()))?;
    mounts.push(json!({
        "destination": INIT_PATH,
        "type": "bind",
        "source": init,
        "options": ["bind", "ro", "nosuid", "nodev"],
    }));
    let linux = field(spec, "linux")?;
    if let Some(seccomp) = linux.get_mut("seccomp").filter(|s| !s.is_null()) {
        let_the_init_restrict_itself(seccomp)?;
    }
    limit_resources(linux, policy)?;
    Ok(())
}

/// startContainer hooks are programs resolved in the container's root and
/// run in it by runc after `start`, before the process: image code with
/// none of the init's layers (a daemon it forks keeps none), holding the
/// broker channel before the init wrote its report, so it could forge it.
/// The other hooks run host programs the operator installed.
fn refuse_container_hooks(spec: &Value) -> Result<(), OciError> {
    let hooks = spec
        .pointer("/hooks/startContainer")
        .and_then(Value::as_array)
        .filter(|hooks| !hooks.is_empty());
    match hooks {
        None => Ok(()),
        Some(hooks) => {
            let paths: Vec<&str> = hooks
                .iter()
                .map(|hook| hook.get("path").and_then(Value::as_str).unwrap_or("?"))
                .collect();
            Err(OciError::Refused(format!(
                "config.json has startContainer hooks ({}): they run programs of the \
                 container's image before its layers are in force; remove them from the \
                 engine's hooks (an OCI hooks directory or the pod's annotations), or use a \
                 createContainer hook, which runs a host program",
                paths.join(", ")
            )))
        }
    }
}

/// The annotation runc's `checkpoint` reads a CRIU configuration file's
/// path from.
const CRIU_CONFIG_ANNOTATION: &str = "org.criu.config";

/// runc hands the file an `org.criu.config` annotation names to CRIU, which
/// it runs as root on the host at `checkpoint`: a configuration there can
/// make CRIU truncate and write any host file (`log-file`) or run programs
/// (`action-script`). Whoever writes annotations (under Podman, the image
/// too) must not choose one. runc reads annotations back from `key=value`
/// labels split at the first `=`, so a key holding `=` counts as the part
/// before it, with the rest of the label as its value.
fn refuse_criu_configuration(spec: &Value) -> Result<(), OciError> {
    let Some(annotations) = spec.get("annotations").and_then(Value::as_object) else {
        return Ok(());
    };
    for (key, value) in annotations {
        let label = format!("{key}={}", value.as_str().unwrap_or_default());
        let Some((name, named)) = label.split_once('=') else {
            continue;
        };
        if name == CRIU_CONFIG_ANNOTATION && !named.is_empty() {
            return Err(OciError::Refused(format!(
                "config.json has the annotation {key:?} = {value}: runc's checkpoint would give \
                 CRIU, which runs as root on the host, the configuration file {named:?}, and a \
                 configuration can make CRIU write host files and run programs; remove the \
                 annotation (Podman copies an image's own annotations into its containers), or \
                 put CRIU's settings in the host's /etc/criu/runc.conf"
            )));
        }
    }
    Ok(())
}

/// The prefix of the annotations runc turns into properties of the
/// container's systemd unit (with `--systemd-cgroup`).
const UNIT_PROPERTY_PREFIX: &str = "org.systemd.property.";

/// Unit properties an engine sets that change nothing a profile limits:
/// how long systemd waits for a stop (Podman's `--stop-timeout` under the
/// systemd cgroup manager) and when it forgets a failed unit.
const HARMLESS_UNIT_PROPERTIES: &[&str] = &["TimeoutStopUSec", "TimeoutStopSec", "CollectMode"];

/// runc gives systemd, when it manages the cgroup, every
/// `org.systemd.property.NAME` annotation as a property of the container's
/// unit, after its own: `TasksMax`, `MemoryMax`, `DeviceAllow`,
/// `BPFProgram` or `Delegate` there would set what the profile's ceilings
/// and runc's device rules decide, and whoever writes annotations (under
/// Podman, the image too) must not. Only properties that touch none of it
/// pass.
fn refuse_unit_properties(spec: &Value) -> Result<(), OciError> {
    let Some(annotations) = spec.get("annotations").and_then(Value::as_object) else {
        return Ok(());
    };
    for key in annotations.keys() {
        let Some(property) = key.strip_prefix(UNIT_PROPERTY_PREFIX) else {
            continue;
        };
        if !HARMLESS_UNIT_PROPERTIES.contains(&property) {
            return Err(OciError::Refused(format!(
                "config.json has the annotation {key:?}: runc would make {property} a property \
                 of the container's systemd unit, beside the limits and device rules the profile \
                 and runc set; remove the annotation (Podman copies an image's own annotations \
                 into its containers). Only {} pass",
                HARMLESS_UNIT_PROPERTIES.join(", ")
            )));
        }
    }
    Ok(())
}

/// Put the init in front of one process (`config.json`'s or `exec`'s).
pub fn secure_process(
    process: &mut Value,
    layers: &Layers,
    broker_fd: i32,
) -> Result<(), OciError> {
    let args = strings(process.get("args"), "process.args")?;
    if args.is_empty() {
        return Err(OciError::Spec(
            "the process has no \"args\" (a command line is required)".to_owned(),
        ));
    }
    if process.get("commandLine").is_some() {
        return Err(OciError::Spec(
            "process.commandLine (Windows) is not supported".to_owned(),
        ));
    }
    let ipc = format!("SANDBOX_IPC_FD={broker_fd}");
    let mut env: Vec<String> = strings(process.get("env"), "process.env")?
        .into_iter()
        .filter(|e| !e.starts_with("SANDBOX_IPC_FD="))
        .collect();
    env.push(ipc);
    let plan = Plan {
        version: PLAN_VERSION,
        args,
        env,
        landlock: layers.landlock.clone(),
        seccomp: layers.seccomp.clone(),
        report_fd: Some(broker_fd),
        loopback_only: layers.loopback_only,
        groups: additional_gids(process)?,
    };
    let (arguments, environment) = plan
        .to_exec()
        .map_err(|err| OciError::Spec(format!("writing the init's plan: {err}")))?;
    // The entries as the init receives them, each one string of its exec.
    if let Some((entry, received)) = plan
        .env
        .iter()
        .zip(&environment)
        .find(|(_, received)| received.len() >= ARGUMENT_MAX)
    {
        let name = entry
            .split_once('=')
            .map_or(entry.as_str(), |(name, _)| name);
        return Err(OciError::Spec(format!(
            "process.env entry {name:?} is {} bytes; the init receives it behind a {}-byte \
             name, which takes it past the kernel's limit of {ARGUMENT_MAX} bytes on one \
             string of an exec; shorten it (or pass the value in a file)",
            entry.len(),
            received.len() - entry.len(),
        )));
    }
    let mut init_args = vec![INIT_PATH.to_owned()];
    init_args.extend(arguments);
    let object = process
        .as_object_mut()
        .ok_or_else(|| OciError::Spec("\"process\" is not an object".to_owned()))?;
    object.insert("args".to_owned(), json!(init_args));
    // The init gets the process's environment under names of the plan's
    // own, which it gives back to the process as they were: LD_PRELOAD or
    // GLIBC_TUNABLES under their own names would be read by the C library
    // (this one is static), and in the arguments, /proc/PID/cmdline would
    // show them to the container's other users.
    object.insert("env".to_owned(), json!(environment));
    object.insert("noNewPrivileges".to_owned(), Value::Bool(true));
    let none: Vec<String> = Vec::new();
    object.insert(
        "capabilities".to_owned(),
        json!({
            "bounding": none,
            "effective": none,
            "inheritable": none,
            "permitted": none,
            "ambient": none,
        }),
    );
    Ok(())
}

fn let_the_init_restrict_itself(seccomp: &mut Value) -> Result<(), OciError> {
    let default = seccomp
        .get("defaultAction")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let object = seccomp
        .as_object_mut()
        .ok_or_else(|| OciError::Spec("linux.seccomp is not an object".to_owned()))?;
    let rules = object
        .entry("syscalls")
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or_else(|| OciError::Spec("linux.seccomp.syscalls is not a list".to_owned()))?;
    for rule in rules.iter_mut() {
        if let Some(names) = rule.get_mut("names").and_then(Value::as_array_mut) {
            names.retain(|name| !name.as_str().is_some_and(|n| INIT_CALLS.contains(&n)));
        }
    }
    rules.retain(|rule| {
        rule.get("names")
            .and_then(Value::as_array)
            .is_none_or(|names| !names.is_empty())
    });
    if default != "SCMP_ACT_ALLOW" {
        rules.push(json!({ "names": INIT_CALLS, "action": "SCMP_ACT_ALLOW" }));
    }
    Ok(())
}

/// The profile's limits as ceilings on the spec's: a container gets the
/// lower of the two.
fn limit_resources(linux: &mut Map<String, Value>, policy: &Policy) -> Result<(), OciError> {
    let limits = &policy.limits;
    let resources = linux
        .entry("resources")
        .or_insert_with(|| Value::Object(Map::new()));
    // cgroup v2 files named in `unified` are written after the typed
    // limits: pids.max = "max" there would lift the ceilings below.
    let limited = limits.memory.is_some() || limits.pids.is_some() || limits.cpu.is_some();
    if let Some(file) = resources
        .get("unified")
        .and_then(Value::as_object)
        .and_then(|files| {
            files
                .keys()
                .find(|f| super::update::LIMIT_FILES.contains(&f.as_str()))
        })
        .filter(|_| limited)
    {
        return Err(OciError::Refused(format!(
            "linux.resources.unified sets {file}, which would replace the limits of profile \
             {:?}; set the limit through linux.resources (memory, pids, cpu) instead",
            policy.name
        )));
    }
    if let Some(memory) = limits.memory {
        let current = resources.pointer("/memory/limit").and_then(Value::as_i64);
        let ceiling = i64::try_from(memory).unwrap_or(i64::MAX);
        if current.is_none_or(|c| c <= 0 || c > ceiling) {
            field(resources, "memory")?.insert("limit".to_owned(), json!(ceiling));
        }
    }
    if let Some(pids) = limits.pids {
        let current = resources.pointer("/pids/limit").and_then(Value::as_i64);
        let ceiling = i64::try_from(pids).unwrap_or(i64::MAX);
        if current.is_none_or(|c| c <= 0 || c > ceiling) {
            field(resources, "pids")?.insert("limit".to_owned(), json!(ceiling));
        }
    }
    if let Some(cores) = limits.cpu {
        let quota = resources.pointer("/cpu/quota").and_then(Value::as_i64);
        let period = resources.pointer("/cpu/period").and_then(Value::as_u64);
        let current = match (quota, period) {
            (Some(q), Some(p)) if q > 0 && p > 0 => Some(q as f64 / p as f64),
            _ => None,
        };
        if current.is_none_or(|c| c > cores) {
            let period: u64 = 100_000;
            let cpu = field(resources, "cpu")?;
            cpu.insert("period".to_owned(), json!(period));
            cpu.insert(
                "quota".to_owned(),
                json!(((cores * period as f64) as i64).max(1000)),
            );
        }
    }
    Ok(())
}

/// The container's root on the host: `root.path`, relative to the bundle.
pub fn rootfs(spec: &Value, bundle: &Path) -> Result<PathBuf, OciError> {
    let path = spec
        .pointer("/root/path")
        .and_then(Value::as_str)
        .ok_or_else(|| OciError::Spec("config.json has no root.path".to_owned()))?;
    Ok(bundle.join(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Value {
        json!({
            "ociVersion": "1.0.2",
            "process": {
                "args": ["/bin/sh", "-c", "true"],
                "env": ["PATH=/bin", "LD_PRELOAD=/evil.so", "SANDBOX_IPC_FD=9"],
                "cwd": "/work",
                "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]},
                "noNewPrivileges": false,
                "futureField": 7
            },
            "root": {"path": "rootfs"},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid"]},
                {"destination": "/data", "type": "bind", "source": "/srv/data", "options": ["rbind", "rw"]},
                {"destination": "/ro", "type": "bind", "source": "/srv/ro", "options": ["rbind", "ro"]},
                {"destination": "/etc/hosts", "type": "bind", "source": "/x/hosts", "options": ["rbind"]}
            ],
            "linux": {
                "namespaces": [{"type": "network"}, {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}],
                "resources": {"memory": {"limit": 8_000_000_000_i64}, "pids": {"limit": 100}},
                "seccomp": {
                    "defaultAction": "SCMP_ACT_ERRNO",
                    "syscalls": [
                        {"names": ["read", "seccomp"], "action": "SCMP_ACT_ALLOW"},
                        {"names": ["landlock_create_ruleset"], "action": "SCMP_ACT_ERRNO"}
                    ]
                }
            }
        })
    }

    #[test]
    fn the_init_goes_in_front_with_the_process_in_its_plan() {
        let mut policy = sandbox::profile::load("strict").unwrap();
        // strict sets no CPU quota; one core shows a ceiling applied.
        policy.limits.cpu = Some(1.0);
        let mut spec = spec();
        let layers = layers(&spec, &policy).unwrap();
        secure_config(&mut spec, &policy, &layers, Path::new("/host/init"), 3).unwrap();
        let args = spec.pointer("/process/args").unwrap().as_array().unwrap();
        assert_eq!(args[0], INIT_PATH);
        let plan_args = args[1..].iter().map(|a| a.as_str().unwrap().to_owned());
        let environment = spec.pointer("/process/env").unwrap().as_array().unwrap();
        let environment = environment.iter().map(|e| {
            let (name, value) = e.as_str().unwrap().split_once('=').unwrap();
            (name.to_owned(), value.to_owned())
        });
        let plan = Plan::from_exec(plan_args.collect(), environment.collect()).unwrap();
        // The environment is in no argument (/proc/PID/cmdline would show
        // it to every user of the container).
        assert!(!args.iter().any(|a| a.as_str().unwrap().contains("PATH=")));
        assert_eq!(plan.args, ["/bin/sh", "-c", "true"]);
        assert_eq!(
            plan.env,
            ["PATH=/bin", "LD_PRELOAD=/evil.so", "SANDBOX_IPC_FD=3"]
        );
        assert_eq!(plan.report_fd, Some(3));
        // strict keeps containers off the network: the init checks it.
        assert!(plan.loopback_only);
        let landlock = plan.landlock.unwrap();
        assert!(landlock.required);
        assert_eq!(
            landlock.write,
            ["/data", "/dev/shm", "/tmp", "/var/tmp", "/work"]
        );
        assert!(!plan.seccomp.unwrap().programs.is_empty());
        // The init's own environment is the process's under other names;
        // the rest of the process stays.
        assert_eq!(
            spec.pointer("/process/env"),
            Some(&json!([
                "SANDBOX_PLAN_ENV_0=PATH=/bin",
                "SANDBOX_PLAN_ENV_1=LD_PRELOAD=/evil.so",
                "SANDBOX_PLAN_ENV_2=SANDBOX_IPC_FD=3"
            ]))
        );
        assert_eq!(spec.pointer("/process/futureField"), Some(&json!(7)));
        assert_eq!(spec.pointer("/process/noNewPrivileges"), Some(&json!(true)));
        assert_eq!(
            spec.pointer("/process/capabilities/bounding"),
            Some(&json!([]))
        );
        let mount = spec.pointer("/mounts/5").unwrap();
        assert_eq!(mount["destination"], INIT_PATH);
        assert_eq!(mount["source"], "/host/init");
        // The profile's ceilings: 1 GiB and 512 tasks, one core.
        assert_eq!(
            spec.pointer("/linux/resources/memory/limit"),
            Some(&json!(1_i64 << 30))
        );
        assert_eq!(
            spec.pointer("/linux/resources/pids/limit"),
            Some(&json!(100))
        );
        assert_eq!(
            spec.pointer("/linux/resources/cpu/quota"),
            Some(&json!(100_000))
        );
        let rules = spec.pointer("/linux/seccomp/syscalls").unwrap();
        assert_eq!(
            rules,
            &json!([
                {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                {"names": INIT_CALLS, "action": "SCMP_ACT_ALLOW"}
            ])
        );
        assert_eq!(
            spec.pointer("/annotations/run.sandbox.enforced"),
            Some(&json!("strict"))
        );
        let again = secure_config(&mut spec, &policy, &layers, Path::new("/host/init"), 3);
        assert!(matches!(again, Err(OciError::Spec(_))));
    }

    #[test]
    fn the_root_and_system_paths_are_not_granted_however_spelled() {
        let policy = sandbox::profile::load("strict").unwrap();
        for cwd in [
            "//",
            "/.",
            "/./",
            "/",
            "/tmp/..",
            "relative",
            "/proc/sys/kernel",
            "//sys",
            "/dev",
            "/dev/pts",
            "/etc",
        ] {
            let mut spec = spec();
            spec["process"]["cwd"] = cwd.into();
            spec["mounts"] = json!([
                {"destination": "//", "type": "tmpfs", "source": "tmpfs"},
                {"destination": "//proc/sys", "type": "bind", "source": "/x", "options": ["rw"]},
                {"destination": "/./etc/hosts", "type": "bind", "source": "/x", "options": ["rw"]},
                {"destination": "/data/./", "type": "bind", "source": "/x", "options": ["rw"]}
            ]);
            let write = layers(&spec, &policy).unwrap().landlock.unwrap().write;
            assert_eq!(write, ["/data", "/dev/shm", "/tmp", "/var/tmp"], "{cwd}");
        }
    }

    #[test]
    fn what_runs_or_writes_around_the_layers_is_refused() {
        let policy = sandbox::profile::load("strict").unwrap();
        let mut hooked = spec();
        hooked["hooks"] =
            json!({"startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "x"]}]});
        let layers = layers(&hooked, &policy).unwrap();
        let err = secure_config(&mut hooked, &policy, &layers, Path::new("/i"), 3)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("startContainer") && err.contains("/bin/sh"),
            "{err}"
        );
        let mut host_hooks = spec();
        host_hooks["hooks"] = json!({"createRuntime": [{"path": "/usr/bin/x"}]});
        assert!(secure_config(&mut host_hooks, &policy, &layers, Path::new("/i"), 3).is_ok());
        for annotations in [
            json!({"org.criu.config": "/x/criu.conf"}),
            json!({"org.criu.config=/x/criu.conf": ""}),
        ] {
            let mut criu = spec();
            criu["annotations"] = annotations;
            let err = secure_config(&mut criu, &policy, &layers, Path::new("/i"), 3)
                .unwrap_err()
                .to_string();
            assert!(err.contains("/x/criu.conf"), "{err}");
        }
        for property in ["TasksMax", "DeviceAllow", "MemoryMax", "BPFProgram"] {
            let key = format!("org.systemd.property.{property}");
            let mut unit = spec();
            unit["annotations"] = json!({ key.clone(): "uint64 18446744073709551615" });
            let err = secure_config(&mut unit, &policy, &layers, Path::new("/i"), 3)
                .unwrap_err()
                .to_string();
            assert!(err.contains(&key), "{err}");
        }
        let mut stop_timeout = spec();
        stop_timeout["annotations"] =
            json!({"org.systemd.property.TimeoutStopUSec": "uint64 10000000"});
        assert!(secure_config(&mut stop_timeout, &policy, &layers, Path::new("/i"), 3).is_ok());
        let mut no_file = spec();
        no_file["annotations"] = json!({"org.criu.config": ""});
        assert!(secure_config(&mut no_file, &policy, &layers, Path::new("/i"), 3).is_ok());
        let mut unified = spec();
        unified["linux"]["resources"]["unified"] = json!({"pids.max": "max"});
        let err = secure_config(&mut unified, &policy, &layers, Path::new("/i"), 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("pids.max"), "{err}");
    }

    #[test]
    fn the_process_is_who_its_user_namespace_maps_it_to() {
        let mut spec = spec();
        spec["process"]["user"] = json!({"uid": 1000, "gid": 100, "additionalGids": [10, 70000]});
        let who = |spec: &Value| identity(&spec["process"], &id_maps_of(spec).unwrap()).unwrap();
        let expect = |uid, gid, groups: &[u32]| Identity {
            uid,
            gid,
            groups: groups.to_vec(),
        };
        assert_eq!(who(&spec), expect(1000, 100, &[10, 70000]));
        spec["linux"]["namespaces"] = json!([{"type": "network"}, {"type": "user"}]);
        spec["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
        spec["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": 200000, "size": 65536}]);
        assert_eq!(who(&spec), expect(101000, 200100, &[200010, 65534]));
        // A namespace joined by path maps ids nobody here knows: nobody's.
        spec["linux"]["namespaces"] = json!([{"type": "user", "path": "/proc/1/ns/user"}]);
        assert_eq!(who(&spec), expect(65534, 65534, &[65534, 65534]));
        spec["process"]["user"] = json!({"uid": -1});
        assert!(identity(&spec["process"], &IdMaps::default()).is_err());
    }

    #[test]
    fn a_profile_off_the_network_refuses_the_engines_network() {
        let policy = sandbox::profile::load("strict").unwrap();
        let mut joined = spec();
        joined["linux"]["namespaces"] = json!([{"type": "network", "path": "/run/netns/cni-1"}]);
        let err = layers(&joined, &policy).unwrap_err().to_string();
        assert!(
            err.contains("/run/netns/cni-1") && err.contains("--network none"),
            "{err}"
        );
        let mut host = spec();
        host["linux"]["namespaces"] = json!([{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}]);
        let err = layers(&host, &policy).unwrap_err().to_string();
        assert!(err.contains("shares the host's network"), "{err}");
        let mut permissive = sandbox::profile::load("permissive").unwrap();
        permissive.network.mode = NetworkMode::Host;
        assert!(layers(&host, &permissive).is_ok());
    }

    #[test]
    fn an_environment_entry_too_long_for_the_init_is_refused_by_name() {
        let policy = sandbox::profile::load("strict").unwrap();
        let layers = layers(&spec(), &policy).unwrap();
        let mut fits = spec();
        fits["process"]["env"] = json!([format!("FITS={}", "x".repeat(100_000))]);
        assert!(secure_config(&mut fits, &policy, &layers, Path::new("/i"), 3).is_ok());
        let mut long = spec();
        long["process"]["env"] = json!([format!("LONG={}", "x".repeat(ARGUMENT_MAX - 10))]);
        let err = secure_config(&mut long, &policy, &layers, Path::new("/i"), 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"LONG\"") && err.contains("shorten"), "{err}");
    }
}
