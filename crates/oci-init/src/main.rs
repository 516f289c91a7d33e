//! `sandbox-oci-init PLAN`: the container's first program under
//! `sandbox oci`. runc has already made the namespaces, mounts, cgroup,
//! user, capabilities, no_new_privs and the engine's seccomp filter; this
//! adds what runc cannot: Landlock scoped to the container's writable
//! paths and the profile's seccomp filter on top of the engine's. Then it
//! executes the container's own process in its place (same pid, so the
//! engine's signals reach it).
//!
//! It is linked statically and started with the process's environment under
//! names of its own (`SANDBOX_PLAN_ENV_N`): nothing of the image (its
//! dynamic loader, `/etc/ld.so.preload`, `LD_PRELOAD`, `GLIBC_TUNABLES`)
//! runs or is read as a setting before the layers are in force.

use std::os::unix::process::CommandExt;

use landlock::{
    Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use sandbox_oci_init::{
    decode_program, Enforced, LandlockPlan, Plan, Report, SeccompPlan, ENV_PREFIX, REPORT_METHOD,
    SETUP_FAILED,
};

#[allow(unsafe_code)]
mod sys;

/// The rights asked for: ABI 5 has every filesystem right this init grants
/// (truncate from 3, device ioctls from 5).
const ABI_WANTED: ABI = ABI::V5;

/// Why the container's process was not started.
#[derive(Debug, thiserror::Error)]
enum InitError {
    #[error("usage: sandbox-oci-init PLAN ARGS... (started by `sandbox oci`, not by hand)")]
    Usage,
    #[error("the plan is not valid: {0}")]
    Plan(String),
    #[error("setting no_new_privs: {0}")]
    NoNewPrivs(std::io::Error),
    #[error("Landlock: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("Landlock: opening {path}: {source}")]
    LandlockPath {
        path: String,
        source: std::io::Error,
    },
    #[error("Landlock is required by the profile but this kernel enforces it {0}")]
    LandlockShort(&'static str),
    #[error("seccomp: installing program {index}: {source}")]
    Seccomp {
        index: usize,
        source: std::io::Error,
    },
    #[error(
        "the profile keeps the container off the network, but its network namespace has \
         {0} up besides loopback: the engine connected it after create (a hook does, as for \
         Docker's default bridge network); run the container with a network namespace of its \
         own and nothing in it (podman and docker: --network none), or choose a profile with \
         network mode \"host\" through the run.sandbox.profile annotation"
    )]
    Connected(String),
    #[error(
        "the profile keeps the container off the network, and its network namespace could not \
         be checked for interfaces: {0}"
    )]
    NetworkUnchecked(std::io::Error),
    #[error(
        "runc gave the process the supplementary groups {unexpected:?}, which its spec does \
         not ask for (process.user.additionalGids {asked:?}): runc first looks each of those \
         numbers up as a group *name* in the image's /etc/group, so a group there named after \
         one of them (a line such as \"{example}:x:0:\") hands the process its own gid \
         instead; rename that group in the image, or leave the number out of the container's \
         groups"
    )]
    Groups {
        unexpected: Vec<u32>,
        asked: Vec<u32>,
        example: u32,
    },
    #[error("reading the process's groups to check them against its spec: {0}")]
    GroupsUnchecked(std::io::Error),
    #[error("writing the report to the broker channel (fd {fd}): {source}")]
    Report { fd: i32, source: std::io::Error },
}

fn main() {
    std::process::exit(run());
}

fn run() -> i32 {
    let plan = match read_plan() {
        Ok(plan) => plan,
        Err(err) => return fail(&err),
    };
    let enforced = match apply(&plan) {
        Ok(enforced) => enforced,
        Err(err) => return fail(&err),
    };
    if let Some(fd) = plan.report_fd {
        let report = Report {
            method: REPORT_METHOD.to_owned(),
            params: enforced,
        };
        let mut line = serde_json::to_vec(&report).unwrap_or_default();
        line.push(b'\n');
        if let Err(source) = sys::write_all_to(fd, &line) {
            return fail(&InitError::Report { fd, source });
        }
    }
    exec(&plan)
}

fn fail(err: &InitError) -> i32 {
    eprintln!("sandbox-oci-init: {err}; the container's process was not started");
    SETUP_FAILED
}

fn read_plan() -> Result<Plan, InitError> {
    let arguments = std::env::args_os()
        .skip(1)
        .map(|arg| arg.into_string().map_err(|_| InitError::Usage))
        .collect::<Result<Vec<String>, InitError>>()?;
    if arguments.is_empty() {
        return Err(InitError::Usage);
    }
    // The process's environment, under names of the plan's own; what else
    // is there (the HOME runc adds) is not the plan's, and may be anything.
    let mut environment = Vec::new();
    for (name, value) in std::env::vars_os() {
        let Some(name) = name.to_str().filter(|n| n.starts_with(ENV_PREFIX)) else {
            continue;
        };
        let value = value.into_string().map_err(|_| InitError::Usage)?;
        environment.push((name.to_owned(), value));
    }
    let plan = Plan::from_exec(arguments, environment).map_err(InitError::Plan)?;
    if plan.args.is_empty() {
        return Err(InitError::Plan("no process arguments".to_owned()));
    }
    if let Some(bad) = plan.env.iter().find(|e| !e.contains('=')) {
        return Err(InitError::Plan(format!(
            "environment entry {bad:?} has no '='"
        )));
    }
    Ok(plan)
}

fn apply(plan: &Plan) -> Result<Enforced, InitError> {
    sys::set_no_new_privs().map_err(InitError::NoNewPrivs)?;
    check_groups(&plan.groups)?;
    // Before the profile's filter, which may refuse the sockets this takes.
    let network = if plan.loopback_only {
        let up = sys::interfaces_up().map_err(InitError::NetworkUnchecked)?;
        if !up.is_empty() {
            return Err(InitError::Connected(up.join(", ")));
        }
        "loopback-only"
    } else {
        "any"
    };
    let (landlock, landlock_scopes) = match &plan.landlock {
        Some(rules) => restrict(rules)?,
        None => ("off", Vec::new()),
    };
    let seccomp_programs = match &plan.seccomp {
        Some(seccomp) => install(seccomp)?,
        None => 0,
    };
    Ok(Enforced {
        landlock: landlock.to_owned(),
        landlock_scopes,
        seccomp_programs,
        no_new_privs: true,
        network: network.to_owned(),
        args: plan.args.clone(),
    })
}

/// The group ids an unmapped group shows as in a user namespace.
const OVERFLOW_GID: u32 = 65_534;

/// The process's supplementary groups are the spec's. runc resolves each
/// of `process.user.additionalGids` through the image's `/etc/group`,
/// matching a group's *name* as well as its gid, and takes the first
/// line that matches: an image with a group named `10` of gid 0 gets an
/// engine's group 10 turned into root's group (the host's, without a user
/// namespace). Where runc could not set groups at all (a user namespace
/// with `setgroups` denied, as rootless engines make), it set none from
/// the image either, and what the process has is the engine's.
fn check_groups(asked: &[u32]) -> Result<(), InitError> {
    let denied =
        std::fs::read_to_string("/proc/self/setgroups").is_ok_and(|state| state.trim() == "deny");
    if denied {
        return Ok(());
    }
    let (effective, groups) = sys::groups().map_err(InitError::GroupsUnchecked)?;
    let mut unexpected: Vec<u32> = groups
        .into_iter()
        .filter(|g| *g != effective && *g != OVERFLOW_GID && !asked.contains(g))
        .collect();
    unexpected.sort_unstable();
    unexpected.dedup();
    match unexpected.first() {
        None => Ok(()),
        Some(_) => Err(InitError::Groups {
            example: asked.first().copied().unwrap_or_default(),
            unexpected,
            asked: asked.to_vec(),
        }),
    }
}

/// The first Landlock ABI with scopes (signals, abstract unix sockets).
const ABI_SCOPES: i64 = 6;

/// Apply `plan`; returns how fully it is enforced and the scopes in force.
///
/// The scopes are added where the kernel has them (ABI 6, Linux 6.12):
/// without them, a container sharing a pid namespace or a network
/// namespace with others signals their processes (equal uids need no
/// capability, and the profile's filter allows kill) and connects to their
/// abstract sockets. On an older kernel the ruleset is what it was, so a
/// profile requiring Landlock still starts there; the report says which.
fn restrict(plan: &LandlockPlan) -> Result<(&'static str, Vec<String>), InitError> {
    let level = if plan.required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let read = AccessFs::from_read(ABI_WANTED);
    let write = AccessFs::from_all(ABI_WANTED);
    let devices = AccessFs::ReadFile
        | AccessFs::WriteFile
        | AccessFs::Truncate
        | AccessFs::IoctlDev
        | AccessFs::ReadDir;
    let scoped = sys::landlock_abi() >= ABI_SCOPES;
    let mut unscoped = Ruleset::default()
        .set_compatibility(level)
        .handle_access(write)?;
    if scoped {
        unscoped = unscoped.scope(Scope::from_all(ABI::V6))?;
    }
    let mut ruleset = unscoped.create()?;
    let granted = [
        (read, &plan.read),
        (write, &plan.write),
        (devices, &plan.devices),
    ];
    for (rights, paths) in granted {
        for path in paths.iter() {
            let Some(rule) = rule(path, rights)? else {
                continue;
            };
            ruleset = ruleset.add_rule(rule)?;
        }
    }
    let status = ruleset.restrict_self()?;
    let name = match status.ruleset {
        RulesetStatus::FullyEnforced => "full",
        RulesetStatus::PartiallyEnforced => "partial",
        RulesetStatus::NotEnforced => "none",
    };
    if plan.required && name != "full" {
        return Err(InitError::LandlockShort(if name == "none" {
            "not at all"
        } else {
            "only partially"
        }));
    }
    let scopes = if scoped && name != "none" {
        vec!["signal".to_owned(), "abstract-unix-socket".to_owned()]
    } else {
        Vec::new()
    };
    Ok((name, scopes))
}

/// The rule for `path`, with the rights a file can carry when it is not a
/// directory; None when the container has no such path or reaches it
/// through a symbolic link (see [`sys::open_without_links`]).
fn rule(
    path: &str,
    rights: BitFlags<AccessFs>,
) -> Result<Option<PathBeneath<std::os::fd::OwnedFd>>, InitError> {
    let opened = |source| InitError::LandlockPath {
        path: path.to_owned(),
        source,
    };
    let Some(fd) = sys::open_without_links(path).map_err(opened)? else {
        return Ok(None);
    };
    let file = std::fs::File::from(fd);
    let rights = if file.metadata().map_err(opened)?.is_dir() {
        rights
    } else {
        rights & AccessFs::from_file(ABI_WANTED)
    };
    Ok(Some(PathBeneath::new(
        std::os::fd::OwnedFd::from(file),
        rights,
    )))
}

fn install(plan: &SeccompPlan) -> Result<usize, InitError> {
    let mut installed = 0;
    for (index, text) in plan.programs.iter().enumerate() {
        let program = decode_program(text)
            .ok_or_else(|| InitError::Plan(format!("seccomp program {index} is damaged")))?;
        match sys::install_filter(&program) {
            Ok(()) => installed += 1,
            Err(source) if plan.required => return Err(InitError::Seccomp { index, source }),
            Err(_) => {}
        }
    }
    Ok(installed)
}

/// Execute the container's process; returns only when that failed, with
/// the status a shell gives (127 not found, 126 not executable).
fn exec(plan: &Plan) -> i32 {
    let program = &plan.args[0];
    let mut command = std::process::Command::new(program);
    command.arg0(program).args(&plan.args[1..]).env_clear();
    for entry in &plan.env {
        if let Some((name, value)) = entry.split_once('=') {
            command.env(name, value);
        }
    }
    // runc gives a process without HOME the user's home directory: it gave
    // it to this init, whose environment is otherwise empty.
    if !plan.env.iter().any(|e| e.starts_with("HOME=")) {
        if let Some(home) = std::env::var_os("HOME") {
            command.env("HOME", home);
        }
    }
    let err = command.exec();
    eprintln!("sandbox-oci-init: cannot execute {program:?}: {err}");
    if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}
