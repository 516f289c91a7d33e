//! The run's broker side, set up before the clone: the audit, the
//! allowlist's net process, and the broker assembled for the command or
//! skill the run serves.

use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::sys;
use crate::spawn::prepare::Prepared;
use crate::spawn::SpawnError;

/// The run's broker, and for an allowlist its net process: the
/// supervisor's end of the listener's handover and the process's pid.
pub(super) struct BrokerSide {
    pub(super) broker: crate::broker::server::Broker,
    pub(super) net_handover: Option<OwnedFd>,
    pub(super) net_pid: Option<nix::unistd::Pid>,
}

/// Whether a run's broker was set up in this process before: its payload
/// has run since, and whatever it could write may have changed.
static RUN_ASSEMBLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Open the audit, start the allowlist's net process, and assemble the
/// broker ([`crate::broker::assemble`]): all before the clone, so that
/// what the payload runs is hashed before it exists.
pub(super) fn open_broker(
    prepared: &mut Prepared,
    asker: Option<Box<dyn crate::broker::prompt::Asker>>,
    audit_file: Option<std::fs::File>,
    run_id: String,
    cgroup: Option<&crate::cgroup::RunCgroup>,
) -> Result<BrokerSide, SpawnError> {
    let config = &prepared.config;
    let project = &prepared.planned.project;
    let warnings = &mut prepared.started.warnings;
    let audit = match (audit_file, &config.supervision.audit) {
        (Some(file), _) => Some(file),
        (None, Some(path)) => Some(crate::safe_file::open_audit(
            path,
            project,
            &config.policy.filesystem.write,
            warnings,
        )?),
        (None, None) => None,
    };
    let caller = match &config.supervision.skill {
        Some(skill) => crate::broker::assemble::Caller::Skill {
            name: skill.name.clone(),
            dir: skill.dir.clone(),
            permissions: skill.permissions.clone(),
        },
        None => {
            // The plan so far: a profile without namespaces has its own.
            let plan = match &prepared.started.no_namespaces {
                Some(without) => &without.plan,
                None => &prepared.planned,
            };
            let (name, program) = command_caller(plan.command(), &plan.cwd);
            crate::broker::assemble::Caller::Command { name, program }
        }
    };
    // The allowlist's proxy: init hands its listening socket to the net
    // process over `handover`. Without namespaces there is no sandbox
    // loopback to listen on; net.http still works, through a net process
    // started when first needed.
    let proxied = config.policy.network.mode == crate::profile::policy::NetworkMode::Allowlist
        && prepared.started.no_namespaces.is_none();
    // A run started by this process before (the run whose broker starts
    // this one for `terminal.run`, or a library caller's earlier run) had
    // a payload that may have replaced the program by now.
    let earlier_run = RUN_ASSEMBLED.swap(true, std::sync::atomic::Ordering::SeqCst);
    let (net_process, handover) = if proxied {
        if earlier_run {
            if let Some(reason) =
                crate::broker::assemble::net_program_writable(&config.policy, project)
            {
                return Err(crate::net::process::NetProcessError::Replaceable(reason).into());
            }
        }
        let (send, receive) =
            crate::broker::network::listener_handover().map_err(sys("socketpair(proxy)"))?;
        let network = &config.policy.network;
        let process = crate::net::process::start(
            &network.allow,
            &network.resolve,
            crate::broker::assemble::syscalls_for_helpers(&config.policy),
            Some(receive),
            cgroup
                .and_then(crate::cgroup::RunCgroup::open_tasks_for_self_move)
                .unwrap_or_default(),
        )?;
        (Some(process), Some(send))
    } else {
        (None, None)
    };
    let net_pid = net_process.as_ref().map(|process| process.pid);
    let timeout = config.policy.limits.timeout;
    let broker = crate::broker::assemble::assemble(
        crate::broker::assemble::Inputs {
            policy: &config.policy,
            project,
            project_rules: config.project_rules.clone(),
            scan: config.scan.as_ref(),
            audit,
            run_id,
            write_as_project_owner: prepared.planned.ids.root_mode,
            caller,
            secrets: config.supervision.secrets.clone(),
            net_process,
            nested: config.supervision.nested.clone(),
            grant_store: &config.supervision.grant_store,
            asker,
            interactive: config.supervision.interactive,
            timeout,
        },
        warnings,
    )
    .map_err(|err| broker_refused(err, project))?;
    Ok(BrokerSide {
        broker,
        net_handover: handover,
        net_pid,
    })
}

/// The broker's caller is the command the payload runs: its name in the
/// audit (`command:PROGRAM`) and what is hashed of it.
pub(super) fn command_caller(
    command: crate::spawn::warm::PayloadCommand<'_>,
    cwd: &std::ffi::CStr,
) -> (String, crate::broker::identity::Program) {
    let cwd = PathBuf::from(std::ffi::OsStr::from_bytes(cwd.to_bytes()));
    let program = crate::broker::identity::Program::Command {
        // Relative programs (./tool) run from the working directory.
        candidates: command
            .exec_candidates
            .iter()
            .map(|c| cwd.join(std::ffi::OsStr::from_bytes(c.to_bytes())))
            .collect(),
        args: command
            .argv
            .iter()
            .skip(1)
            .map(|a| std::ffi::OsStr::from_bytes(a.to_bytes()).to_os_string())
            .collect(),
        cwd,
    };
    (
        format!("command:{}", String::from_utf8_lossy(command.program)),
        program,
    )
}

/// The broker's refusal as the run's error, naming the project root.
pub(super) fn broker_refused(
    err: crate::broker::assemble::AssembleError,
    project: &std::path::Path,
) -> SpawnError {
    use crate::broker::assemble::AssembleError;
    let (what, source) = match err {
        AssembleError::OpenRoot(source) => ("opening the project root for the broker", source),
        AssembleError::ReadOwner(source) => (
            "reading the owner of the project root for the broker",
            source,
        ),
    };
    SpawnError::Path {
        what,
        path: project.to_path_buf(),
        source,
    }
}
