//! A run's broker, assembled in one call from the run's policy and what the
//! supervisor opened for it: the spawn path starts a run with one
//! [`assemble`] instead of setting each part itself.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::identity::Program;
use super::server::Broker;
use crate::profile::policy::{Enforcement, Policy, ProjectAccess};

/// Who the broker serves: the program whose requests it answers.
#[derive(Debug)]
pub enum Caller {
    /// A skill: served by name, never allowed more than it declared.
    Skill {
        /// The skill's name.
        name: String,
        /// Its directory on the host (hashed to key stored grants).
        dir: PathBuf,
        /// Its declared permissions.
        permissions: Vec<String>,
    },
    /// A command: the name the audit shows (`command:PROGRAM`) and what
    /// is hashed of it.
    Command {
        /// `command:PROGRAM`.
        name: String,
        /// The program and its arguments as the payload runs them.
        program: Program,
    },
}

/// Everything a run's broker is built from.
pub struct Inputs<'a> {
    /// The run's policy (broker rules, hidden paths, network, limits).
    pub policy: &'a Policy,
    /// The canonical project root.
    pub project: &'a Path,
    /// The project's secrets and protected entries.
    pub project_rules: crate::project::Rules,
    /// What the walk of the project found: its secrets are hidden from the
    /// broker's answers, its protected entries read-only.
    pub scan: Option<&'a crate::project::scan::Scan>,
    /// Where the broker writes one JSON line per request.
    pub audit: Option<std::fs::File>,
    /// The run's name in the audit.
    pub run_id: String,
    /// Root's supervisor on a project it may not own: the broker writes the
    /// project's files as its owner.
    pub write_as_project_owner: bool,
    /// Who the broker serves.
    pub caller: Caller,
    /// Secrets the broker may hand out.
    pub secrets: Vec<super::secrets::SecretSpec>,
    /// The allowlist's net process, when the run has one.
    pub net_process: Option<crate::net::process::NetProcess>,
    /// Who starts `terminal.run` commands.
    pub nested: Option<std::sync::Arc<dyn super::terminal::NestedRunner>>,
    /// Which stored grants apply.
    pub grant_store: &'a super::grants::StoreChoice,
    /// Who answers "ask" instead of the terminal.
    pub asker: Option<Box<dyn super::prompt::Asker>>,
    /// Whether "ask" may prompt on the supervisor's terminal.
    pub interactive: bool,
    /// The run's wall-clock limit, counted from now.
    pub timeout: Option<Duration>,
}

/// Why no broker could be built.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    /// The project root could not be opened.
    #[error("opening the project root for the broker: {0}")]
    OpenRoot(#[source] std::io::Error),
    /// The owner of the project root could not be read.
    #[error("reading the owner of the project root for the broker: {0}")]
    ReadOwner(#[source] std::io::Error),
}

/// The broker of one run, every part in place and its caller bound (what
/// the payload runs is hashed now, before it exists). What is weaker than
/// asked (stored grants that cannot be used) goes to `warnings`.
pub fn assemble(inputs: Inputs<'_>, warnings: &mut Vec<String>) -> Result<Broker, AssembleError> {
    let Inputs {
        policy,
        project,
        project_rules,
        scan,
        audit,
        run_id,
        write_as_project_owner,
        caller,
        secrets,
        net_process,
        nested,
        grant_store,
        asker,
        interactive,
        timeout,
    } = inputs;
    let mut broker = Broker::new(
        policy.broker.clone(),
        project,
        &policy.filesystem.hide,
        project_rules,
        audit,
        run_id,
    )
    .map_err(AssembleError::OpenRoot)?;
    if write_as_project_owner {
        broker
            .write_as_project_owner()
            .map_err(AssembleError::ReadOwner)?;
    }
    if policy.filesystem.review {
        broker.refuse_project_writes_for_review();
    }
    match caller {
        Caller::Skill {
            name,
            dir,
            permissions,
        } => {
            broker.set_caller(format!("skill:{name}"), Program::Skill { dir });
            broker.restrict_to_declared(permissions);
            broker.show_logs(format!("skill {name}"));
        }
        Caller::Command { name, program } => broker.set_caller(name, program),
    }
    broker.use_secrets(secrets);
    let mut network = super::network::Network::new(policy.network.clone(), net_process);
    network.confine_to(syscalls_for_helpers(policy).cloned());
    if let Some(reason) = net_program_writable(policy, project) {
        network.never_start(format!("net.http cannot be used in this run: {reason}"));
    }
    broker.use_network(network);
    if let Some(runner) = nested {
        broker.use_nested_runner(runner);
    }
    // Far above any real client, low enough that a flooding sandbox cannot
    // keep the supervisor's core busy for free.
    broker.set_rate_limit(super::server::RATE_LIMIT.0, super::server::RATE_LIMIT.1);
    if let Some(scan) = scan {
        let paths = |found: &[crate::project::scan::Found]| -> Vec<PathBuf> {
            found.iter().map(|f| f.path.clone()).collect()
        };
        broker.cover(&paths(&scan.secrets), &paths(&scan.protected));
    }
    let store = match grant_store {
        super::grants::StoreChoice::Default => Some(super::grants::default_path()),
        super::grants::StoreChoice::Without => None,
        super::grants::StoreChoice::At(path) => Some(path.clone()),
    };
    match store
        .as_ref()
        .map(|store| (store, writable_tree_holding(policy, project, store)))
    {
        None => {}
        // The payload could plant grants there for a later run.
        Some((store, Some(tree))) => warnings.push(format!(
            "stored grants are not used: the grant store {} is inside {}, which the sandboxed command can write; set SANDBOX_STATE_DIR or XDG_STATE_HOME to a directory outside it",
            store.display(),
            tree.display()
        )),
        Some((store, None)) => match super::grants::GrantStore::load(store) {
            Ok(store) => broker.use_grants(store),
            Err(err) => warnings.push(format!("stored grants are not used: {err}")),
        },
    }
    if let Some(asker) = asker {
        broker.use_asker(asker);
    } else if interactive {
        if let Some(prompter) = super::prompt::Prompter::open() {
            broker.use_prompter(prompter);
        }
    }
    // Before the clone: what the payload runs is hashed before it exists.
    broker.bind_caller();
    broker.set_deadline(timeout.map(|t| Instant::now() + t));
    Ok(broker)
}

/// The syscall filter the run's helpers outside the sandbox (its net
/// process) run under: the run's own, unless the profile turned it off.
pub fn syscalls_for_helpers(policy: &Policy) -> Option<&crate::seccomp::policy::SyscallPolicy> {
    (policy.enforce.seccomp != Enforcement::Off).then_some(&policy.syscalls)
}

/// Why no net process may be started once the payload runs: a place
/// where the supervisor looks for `sandbox-net` is in a tree the payload
/// can write, so the file it would execute then, outside the sandbox and
/// as the supervisor's user, could be the payload's own (a `sandbox`
/// unpacked or built inside the project). None when every place is out of
/// its reach.
pub(crate) fn net_program_writable(policy: &Policy, project: &Path) -> Option<String> {
    let program = crate::net::process::PROGRAM;
    let places = crate::installed::places(program).ok()?;
    places.iter().find_map(|place| {
        writable_tree_holding(policy, project, place).map(|tree| {
            format!(
                "the supervisor would execute {}, which is inside {}, where a \
                 sandboxed command can write; run a sandbox installed outside the \
                 trees the run can write (the package, or `cargo install`)",
                place.display(),
                tree.display()
            )
        })
    })
}

/// The tree the payload can write (the project, a profile write path) that
/// holds `path`, judged by the real path of its nearest existing ancestor.
pub(crate) fn writable_tree_holding(
    policy: &Policy,
    project: &Path,
    path: &Path,
) -> Option<PathBuf> {
    let real = path
        .ancestors()
        .find_map(|a| std::fs::canonicalize(a).ok())?;
    let project_writable = policy.filesystem.project == ProjectAccess::ReadWrite;
    std::iter::once(project)
        .filter(|_| project_writable)
        .chain(policy.filesystem.write.iter().map(PathBuf::as_path))
        .find(|tree| std::fs::canonicalize(tree).is_ok_and(|tree| real.starts_with(tree)))
        .map(Path::to_path_buf)
}
