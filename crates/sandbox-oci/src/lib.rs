//! `sandbox oci` (also run as `sandbox-runc`): an OCI runtime for Podman,
//! containerd, CRI-O and Docker that puts a profile's layers on every
//! container, by wrapping runc.
//!
//! runc makes the container: namespaces, mounts, cgroup, user, the
//! engine's seccomp filter. `sandbox oci` rewrites what runc gets, then
//! hands it over:
//!
//! - `create`/`run`: `config.json`'s process becomes our static init
//!   (bind-mounted read-only at [`sandbox_oci_init::INIT_PATH`]) with the
//!   real process in its plan; capabilities are emptied, no_new_privs set,
//!   the profile's limits become ceilings. The init applies Landlock and
//!   the profile's seccomp filter inside the container, reports on the
//!   broker channel, and executes the real process in its place.
//! - `exec --process`: the same init in front of the exec'd process, with
//!   the layers decided at `create`: an exec is no way around them.
//! - A per-container supervisor, forked before runc runs, serves the
//!   broker on the channel (fd 3 in the container, after any descriptors
//!   the engine preserves) and audits to the container's log.
//! - Every other command goes to runc unchanged; `delete` also removes
//!   the container's state, `features` adds this runtime's annotations.
#![deny(missing_docs)]

// The fuzz targets' entry points (fuzz/), not part of the documented API.
#[doc(hidden)]
pub mod fuzzing;

pub mod cli;
pub mod host;
pub mod keys;
pub mod payload;
pub mod pod;
pub mod settings;
pub mod spec;
pub mod supervisor;
pub mod update;

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use sandbox::profile::policy::Policy;
use settings::Settings;

/// Why `sandbox oci` did not hand the command to runc.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A command line it cannot check.
    #[error("{0}")]
    Usage(String),
    /// The runtime's own settings file.
    #[error("{0}")]
    Settings(String),
    /// The container's spec cannot be read or rewritten.
    #[error("config: {0}")]
    Spec(String),
    /// The profile cannot be loaded or compiled.
    #[error("profile: {0}")]
    Profile(String),
    /// The container asks for something its profile does not allow.
    #[error("refused: {0}")]
    Refused(String),
    /// A file of the runtime or of the bundle.
    #[error("{what} ({path}): {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The per-container supervisor could not be started.
    #[error("starting the container's supervisor: {0}")]
    Supervisor(String),
    /// runc could not be found or run.
    #[error("runc: {0}")]
    Runc(String),
}

/// Exit status of a refused command: 1, as runc exits on any error, so an
/// engine reports it as a failed create.
const EXIT_REFUSED: i32 = 1;

/// The largest `config.json` or process file read (a real one is a few KiB).
const SPEC_MAX: u64 = 16 << 20;

/// `sandbox oci ARGS` / `sandbox-runc ARGS`: returns the exit status when
/// runc was not executed in this process's place.
pub fn main(args: Vec<OsString>) -> i32 {
    match dispatch(&args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("sandbox oci: {err}");
            log_error(&cli::split(&args), &format!("sandbox oci: {err}"));
            EXIT_REFUSED
        }
    }
}

/// Append `message` to runc's `--log` file in its format, where an engine
/// that reads the log (containerd's shim) finds why the command failed.
fn log_error(invocation: &cli::Invocation, message: &str) {
    use std::io::Write;
    let Some(path) = &invocation.log else {
        return;
    };
    let line = if invocation.log_format.as_deref() == Some(OsStr::new("json")) {
        serde_json::json!({"level": "error", "msg": message}).to_string()
    } else {
        format!(
            "level=error msg={}",
            serde_json::Value::String(message.to_owned())
        )
    };
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
    {
        let _ = writeln!(file, "{line}");
    }
}

fn dispatch(args: &[OsString]) -> Result<i32, OciError> {
    let invocation = cli::split(args);
    let wants_version = invocation
        .global
        .iter()
        .any(|a| a == "--version" || a == "-v");
    if wants_version && invocation.command.is_none() {
        let settings = Settings::load()?;
        return version(&settings);
    }
    let Some(command) = invocation.command.clone() else {
        let settings = Settings::load()?;
        pass_through(&settings, args);
    };
    // Go's flag package ends runc's global flags at `--` and drops it, so
    // runc would read the word after it as the command: `-- exec` would be
    // an exec this runtime never saw, without the init.
    if command == "--" {
        return Err(OciError::Usage(
            "a \"--\" before the command is refused: runc would take the word after it as \
             its command, unchecked by sandbox oci; write the command without it"
                .to_owned(),
        ));
    }
    let settings = Settings::load()?;
    match command.as_str() {
        "create" | "run" => create(&settings, &invocation, &command),
        "exec" => exec(&settings, &invocation),
        "delete" => delete(&settings, &invocation, args),
        // runc made its copies of a pod's pinned sources at create.
        "start" => {
            if let Some(id) = command_id(&invocation) {
                pod::release_sources(&sources_dir(&settings, &invocation, &id));
            }
            pass_through(&settings, args)
        }
        "update" => update::update(&settings, &invocation),
        // CRIU restores no Landlock domain, and a checkpoint brings its own
        // config.json, which would start the container without the init.
        "restore" => Err(OciError::Refused(
            "restore: a container restored from a checkpoint would run without the init's \
             layers (CRIU does not restore Landlock); start it afresh instead"
                .to_owned(),
        )),
        "features" => features(&settings, args),
        _ => pass_through(&settings, args),
    }
}

fn read_json(path: &Path, what: &'static str) -> Result<serde_json::Value, OciError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|source| OciError::Io {
        what,
        path: path.to_owned(),
        source,
    })?;
    let mut text = Vec::new();
    file.take(SPEC_MAX + 1)
        .read_to_end(&mut text)
        .map_err(|source| OciError::Io {
            what,
            path: path.to_owned(),
            source,
        })?;
    if text.len() as u64 > SPEC_MAX {
        return Err(OciError::Spec(format!(
            "{} is larger than 16 MiB",
            path.display()
        )));
    }
    serde_json::from_slice(&text)
        .map_err(|err| OciError::Spec(format!("{} is not valid JSON: {err}", path.display())))
}

fn write_json(path: &Path, value: &serde_json::Value, what: &'static str) -> Result<(), OciError> {
    let text = serde_json::to_vec(value)
        .map_err(|err| OciError::Spec(format!("serializing {}: {err}", path.display())))?;
    sandbox::safe_file::replace(path, &text).map_err(|err| OciError::Io {
        what,
        path: path.to_owned(),
        source: std::io::Error::other(err.to_string()),
    })
}

/// What `create` decided for a container, kept for its `exec`s.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    policy: Policy,
    layers: spec::Layers,
    rootfs: PathBuf,
    /// How the container's ids are ids outside it, for each exec's user.
    #[serde(default)]
    ids: spec::IdMaps,
}

/// Container `id`'s state: below a directory for runc's `--root`, so two
/// engines with roots of their own (Podman's, containerd's) never mistake
/// each other's container of the same id for theirs.
fn container_dir(settings: &Settings, invocation: &cli::Invocation, id: &str) -> PathBuf {
    settings
        .state_dir
        .join("containers")
        .join(runc_root_key(invocation))
        .join(id)
}

/// Where a pod's container's mount sources are pinned until runc has
/// mounted them (`pod::pin_sources`): apart from the container's records,
/// which `delete` removes recursively, so that a removal never reaches
/// through a source still mounted there.
fn sources_dir(settings: &Settings, invocation: &cli::Invocation, id: &str) -> PathBuf {
    settings
        .state_dir
        .join("sources")
        .join(runc_root_key(invocation))
        .join(id)
}

/// Containers are runc's per state directory (`--root`): one name for each.
fn runc_root_key(invocation: &cli::Invocation) -> String {
    use sha2::Digest;
    match &invocation.root {
        None => "default".to_owned(),
        Some(root) => {
            let digest = sha2::Sha256::digest(root.as_bytes());
            let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
            format!("root-{hex}")
        }
    }
}

fn create(
    settings: &Settings,
    invocation: &cli::Invocation,
    command: &str,
) -> Result<i32, OciError> {
    let parsed = cli::parse(command, &invocation.rest)?;
    let bundle = match parsed.value(&["bundle", "b"]) {
        Some(bundle) => PathBuf::from(bundle),
        None => std::env::current_dir().map_err(|source| OciError::Io {
            what: "finding the bundle (the working directory)",
            path: ".".into(),
            source,
        })?,
    };
    let config_path = bundle.join("config.json");
    let mut spec = read_json(&config_path, "reading the bundle's config.json")?;
    keys::spelled_as_the_spec(&spec, "config.json")?;
    let policy = settings.profile_for(spec::requested_profile(&spec).as_deref())?;
    let layers = spec::layers(&spec, &policy)?;
    let checked_sources = pod::refuse_host_paths(&spec, settings, &parsed.id)?;
    let rootfs = spec::rootfs(&spec, &bundle)?;
    let ids = spec::id_maps_of(&spec)?;
    let identity = spec::identity(
        spec.get("process").unwrap_or(&serde_json::Value::Null),
        &ids,
    )?;
    let init = payload::materialize(&settings.state_dir)?;
    let broker_fd = 3 + parsed.preserved_fds()?;
    let original = spec.clone();
    spec::secure_config(&mut spec, &policy, &layers, &init, broker_fd)?;

    let dir = container_dir(settings, invocation, &parsed.id);
    claim_container_dir(settings, invocation, &parsed.id, &dir)?;
    let staging = sources_dir(settings, invocation, &parsed.id);
    // Whatever an earlier create of this id left (it failed before runc).
    pod::release_sources(&staging);
    pod::pin_sources(&mut spec, &checked_sources, &staging)?;
    write_json(
        &dir.join("config.original.json"),
        &original,
        "saving the original config.json",
    )?;
    let record = Record {
        policy,
        layers,
        rootfs,
        ids,
    };
    let record_json = serde_json::to_value(&record)
        .map_err(|err| OciError::Spec(format!("recording the container: {err}")))?;
    write_json(
        &dir.join("record.json"),
        &record_json,
        "recording the container",
    )?;
    write_json(&config_path, &spec, "writing the bundle's config.json")?;

    let mut runc_args = invocation.global.clone();
    runc_args.push(command.into());
    runc_args.extend(parsed.arguments_without(&["preserve-fds"]));
    runc_args.push(format!("--preserve-fds={}", broker_fd - 2).into());
    runc_args.push(parsed.id.clone().into());
    runc_args.extend(parsed.trailing.iter().cloned());
    start_with_supervisor(
        settings,
        &parsed.id,
        &record,
        Started {
            by: "create",
            identity: &identity,
            slot: None,
        },
        broker_fd,
        &runc_args,
        &[],
    )
}

/// Make the state directory of a new container `id`, refusing an id runc
/// already has: runc refuses a second create only after this runtime ran,
/// and that create's record must not become the layers of the running
/// container's `exec`s. A directory runc knows nothing of is left from a
/// create that failed, and is replaced.
fn claim_container_dir(
    settings: &Settings,
    invocation: &cli::Invocation,
    id: &str,
    dir: &Path,
) -> Result<(), OciError> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir.parent() {
        settings::private_dir(parent)?;
    }
    let create = || std::fs::DirBuilder::new().mode(0o700).create(dir);
    let exists = |err: &std::io::Error| err.kind() == std::io::ErrorKind::AlreadyExists;
    let io = |source| OciError::Io {
        what: "creating the container's state directory",
        path: dir.to_owned(),
        source,
    };
    match create() {
        Ok(()) => return Ok(()),
        Err(err) if !exists(&err) => return Err(io(err)),
        Err(_) => {}
    }
    let mut state = invocation.global.clone();
    state.extend(["state".into(), id.into()]);
    let refused = || {
        OciError::Refused(format!(
            "a container with id {id} exists already; delete it first (`delete --force {id}`)"
        ))
    };
    if run_runc(settings, &state)?.status.success() {
        return Err(refused());
    }
    std::fs::remove_dir_all(dir).map_err(io)?;
    // Lost to a create of the same id running at this moment.
    create().map_err(|err| if exists(&err) { refused() } else { io(err) })
}

fn exec(settings: &Settings, invocation: &cli::Invocation) -> Result<i32, OciError> {
    let parsed = cli::parse("exec", &invocation.rest)?;
    let Some(process_file) = parsed.value(&["process", "p"]) else {
        return Err(OciError::Usage(
            "exec needs --process FILE (the process as JSON, as engines pass it); a command \
             line after the id is not checked, so it is refused"
                .to_owned(),
        ));
    };
    if !parsed.trailing.is_empty() {
        return Err(OciError::Usage(
            "exec with --process takes no command after the id".to_owned(),
        ));
    }
    let record = read_record(settings, invocation, &parsed.id, "exec into it")?;
    let mut process = read_json(Path::new(process_file), "reading exec's process file")?;
    keys::spelled_as_the_spec(&process, "exec's process file")?;
    let identity = spec::identity(&process, &record.ids)?;
    let broker_fd = 3 + parsed.preserved_fds()?;
    spec::secure_process(&mut process, &record.layers, broker_fd)?;
    // runc reads the rewritten process from a memory file it inherits just
    // above the broker channel: nothing is left on disk per exec (a
    // Kubernetes exec probe runs one every few seconds), and runc marks it
    // close-on-exec for the container, as it does every descriptor beyond
    // the preserved ones.
    let rewritten = memory_file(&process)?;
    let process_fd = broker_fd + 1;
    let slot = supervisor::claim_exec_slot(&container_dir(settings, invocation, &parsed.id))?;

    let mut runc_args = invocation.global.clone();
    runc_args.push("exec".into());
    runc_args.extend(parsed.arguments_without(&["process", "p", "preserve-fds"]));
    runc_args.push(format!("--process=/proc/self/fd/{process_fd}").into());
    runc_args.push(format!("--preserve-fds={}", broker_fd - 2).into());
    runc_args.push(parsed.id.clone().into());
    start_with_supervisor(
        settings,
        &parsed.id,
        &record,
        Started {
            by: "exec",
            identity: &identity,
            slot: Some(slot),
        },
        broker_fd,
        &runc_args,
        &[(rewritten.as_fd(), process_fd)],
    )
}

/// `value` as JSON in an anonymous memory file.
fn memory_file(value: &serde_json::Value) -> Result<std::os::fd::OwnedFd, OciError> {
    use std::io::Write;
    let failed = |source: std::io::Error| OciError::Io {
        what: "writing exec's process to a memory file",
        path: "memfd:sandbox-oci-exec".into(),
        source,
    };
    let text = serde_json::to_vec(value)
        .map_err(|err| OciError::Spec(format!("serializing exec's process: {err}")))?;
    let fd =
        nix::sys::memfd::memfd_create(c"sandbox-oci-exec", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|errno| failed(errno.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(&text).map_err(failed)?;
    Ok(std::os::fd::OwnedFd::from(file))
}

/// What `create` recorded for container `id`; refused (naming `doing`)
/// for a container this runtime did not create, whose layers are unknown.
fn read_record(
    settings: &Settings,
    invocation: &cli::Invocation,
    id: &str,
    doing: &str,
) -> Result<Record, OciError> {
    let dir = container_dir(settings, invocation, id);
    let record_path = dir.join("record.json");
    if !record_path.exists() {
        return Err(OciError::Refused(format!(
            "container {id} was not created by sandbox oci ({} is missing), so its layers are \
             unknown; refusing to {doing}",
            record_path.display()
        )));
    }
    settings::check_private(&dir)?;
    serde_json::from_value(read_json(&record_path, "reading the container's record")?)
        .map_err(|err| OciError::Spec(format!("{}: {err}", record_path.display())))
}

/// Which command starts a process on the channel, and who the process is.
struct Started<'a> {
    /// `create` or `exec`.
    by: &'a str,
    /// Its user outside the container.
    identity: &'a spec::Identity,
    /// An exec's slot among the container's live supervisors.
    slot: Option<std::os::fd::OwnedFd>,
}

/// Fork the supervisor, then become runc with the channel at `broker_fd`.
fn start_with_supervisor(
    settings: &Settings,
    id: &str,
    record: &Record,
    started: Started<'_>,
    broker_fd: i32,
    runc_args: &[OsString],
    also_placed: &[(std::os::fd::BorrowedFd<'_>, i32)],
) -> Result<i32, OciError> {
    let runc = settings.runc()?;
    let (host_end, container_end) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|errno| OciError::Supervisor(format!("socketpair: {errno}")))?;
    settings::private_dir(&settings.audit_dir)?;
    let audit = settings.audit_dir.join(format!("{id}.jsonl"));
    supervisor::start(
        &supervisor::Serving {
            id,
            policy: &record.policy,
            rootfs: &record.rootfs,
            identity: started.identity,
            audit: &audit,
            started_by: started.by,
        },
        host_end,
        started.slot,
    )?;
    let argv = argv(&runc, runc_args)?;
    let mut placed = vec![(container_end.as_fd(), broker_fd)];
    placed.extend_from_slice(also_placed);
    sandbox::os::exec_with_placed(&argv[0], &argv, &placed)
}

fn argv(runc: &Path, args: &[OsString]) -> Result<Vec<CString>, OciError> {
    std::iter::once(runc.as_os_str())
        .chain(args.iter().map(OsString::as_os_str))
        .map(|arg| {
            CString::new(arg.as_bytes())
                .map_err(|_| OciError::Usage(format!("argument {arg:?} holds a NUL byte")))
        })
        .collect()
}

fn pass_through(settings: &Settings, args: &[OsString]) -> ! {
    let argv = match settings.runc().and_then(|runc| argv(&runc, args)) {
        Ok(argv) => argv,
        Err(err) => {
            eprintln!("sandbox oci: {err}");
            std::process::exit(EXIT_REFUSED);
        }
    };
    sandbox::os::exec_with_placed(&argv[0], &argv, &[])
}

fn run_runc(settings: &Settings, args: &[OsString]) -> Result<std::process::Output, OciError> {
    let runc = settings.runc()?;
    std::process::Command::new(&runc)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|err| OciError::Runc(format!("running {}: {err}", runc.display())))
}

/// The container id a command names: its last word that is not a flag.
fn command_id(invocation: &cli::Invocation) -> Option<String> {
    invocation
        .rest
        .iter()
        .rev()
        .find(|a| !a.as_bytes().starts_with(b"-"))
        .and_then(|id| cli::checked_id(id).ok())
}

fn delete(
    settings: &Settings,
    invocation: &cli::Invocation,
    args: &[OsString],
) -> Result<i32, OciError> {
    let runc = settings.runc()?;
    let status = std::process::Command::new(&runc)
        .args(args)
        .status()
        .map_err(|err| OciError::Runc(format!("running {}: {err}", runc.display())))?;
    if let Some(id) = command_id(invocation) {
        pod::release_sources(&sources_dir(settings, invocation, &id));
    }
    if status.success() {
        if let Some(id) = command_id(invocation) {
            let dir = container_dir(settings, invocation, &id);
            if let Err(err) = std::fs::remove_dir_all(&dir) {
                if err.kind() != std::io::ErrorKind::NotFound {
                    eprintln!("sandbox oci: removing {}: {err}", dir.display());
                }
            }
        }
    }
    Ok(status.code().unwrap_or(EXIT_REFUSED))
}

/// `features`: runc's document, corrected where this runtime does less
/// than runc, and saying what it adds. Engines read it to decide what to
/// ask for (containerd 2's CRI reports a handler's user-namespace support
/// to the kubelet from `linux.mountExtensions.idmap`, passed on as runc
/// says it).
fn features(settings: &Settings, args: &[OsString]) -> Result<i32, OciError> {
    use serde_json::Value;
    let output = run_runc(settings, args)?;
    if !output.status.success() {
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        return Ok(output.status.code().unwrap_or(EXIT_REFUSED));
    }
    let mut features: Value = serde_json::from_slice(&output.stdout)
        .map_err(|err| OciError::Runc(format!("`runc features` printed no JSON: {err}")))?;
    let object = features
        .as_object_mut()
        .ok_or_else(|| OciError::Runc("`runc features` printed no object".to_owned()))?;
    // startContainer hooks run the image's code in the container before
    // the init: refused at create.
    if let Some(hooks) = object.get_mut("hooks").and_then(Value::as_array_mut) {
        hooks.retain(|hook| hook != "startContainer");
    }
    // The profile's annotation changes what the runtime does: engines
    // that filter such annotations (the spec's
    // potentiallyUnsafeConfigAnnotations) must see it as one.
    let unsafe_annotations = object
        .entry("potentiallyUnsafeConfigAnnotations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = unsafe_annotations.as_array_mut() {
        list.push(Value::String(spec::PROFILE_ANNOTATION.to_owned()));
    }
    let user_namespaces = object
        .get("linux")
        .and_then(|linux| linux.get("namespaces"))
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|ns| ns == "user"));
    let annotations = object
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(annotations) = annotations.as_object_mut() {
        // Restoring a checkpoint is refused (its image is the container's
        // memory as it was, layers or not), so checkpoints are no use.
        if annotations.contains_key("org.opencontainers.runc.checkpoint.enabled") {
            annotations.insert(
                "org.opencontainers.runc.checkpoint.enabled".to_owned(),
                Value::String("false".to_owned()),
            );
        }
        for (key, value) in [
            ("run.sandbox.version", env!("CARGO_PKG_VERSION").to_owned()),
            ("run.sandbox.profile.default", settings.profile.clone()),
            (
                "run.sandbox.profile.annotation",
                spec::PROFILE_ANNOTATION.to_owned(),
            ),
            (
                "run.sandbox.profile.choices",
                settings.annotation_profiles.join(","),
            ),
            // Whatever the spec asks for, every capability is dropped.
            ("run.sandbox.capabilities", "none".to_owned()),
            // A spec's user namespace and its id maps reach runc as they
            // are, and the init's layers apply inside it.
            (
                "run.sandbox.user-namespaces",
                if user_namespaces { "true" } else { "false" }.to_owned(),
            ),
        ] {
            annotations.insert(key.to_owned(), Value::String(value));
        }
    }
    let text =
        serde_json::to_string_pretty(&features).map_err(|err| OciError::Runc(err.to_string()))?;
    println!("{text}");
    Ok(0)
}

fn version(settings: &Settings) -> Result<i32, OciError> {
    println!(
        "sandbox-runc version {} (sandbox oci)",
        env!("CARGO_PKG_VERSION")
    );
    let output = run_runc(settings, &[OsString::from("--version")])?;
    print!("{}", String::from_utf8_lossy(&output.stdout));
    Ok(output.status.code().unwrap_or(EXIT_REFUSED))
}
