//! Skills: directories with a `SKILL.md` manifest ([`manifest`]), run one
//! sandboxed process each ([`launch`], [`host`]), and served to agent
//! hosts with lazy activation, crash recovery and hot reload ([`serve`]).
pub mod clients;
pub mod files;
pub mod host;
pub mod launch;
pub mod manifest;
pub mod params;
mod prepared;
mod schema_pointer;
pub mod serve;

use std::path::PathBuf;

pub use launch::SkillError;

/// How skills are started, beyond what their manifests say.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The person's profile: the most any skill may get (a skill's own
    /// `profile` only narrows it).
    pub profile: crate::Policy,
    /// The project root: the skill's working directory.
    pub project: PathBuf,
    /// Actions pre-approved for this run (`action` or `action:pattern`);
    /// still capped by what the skill declared.
    pub grants: Vec<String>,
    /// Audit log for broker decisions.
    pub audit: Option<PathBuf>,
    /// Whether "ask" may prompt on this terminal.
    pub interactive: bool,
    /// Whether "ask" goes to the peer of a host's control socket (`serve`,
    /// which asks its client): see [`host::ControlAsker`]. Only
    /// [`host_process`] has that socket; elsewhere an ask is denied.
    pub ask_client: bool,
    /// How long a question put to the control socket's peer waits.
    pub question_timeout: std::time::Duration,
    /// In [`host_process`] of an on-demand skill: prepare the sandbox
    /// before the call arrives (`serve`'s hosts kept ahead), see
    /// [`prepared`].
    pub prepare_ahead: bool,
}

/// Start `skill`'s runtime in its sandbox; its prints go to this
/// process's stderr.
pub fn start(skill: &manifest::Skill, launch: &Launch) -> Result<crate::Child, StartError> {
    spawn(skill, launch, None, None)
}

/// [`start`], with `asker` answering the broker's "ask" decisions; with
/// `warm`, the sandbox is prepared and waits on that socket for the go
/// ([`crate::Child::start_prepared`]).
fn spawn(
    skill: &manifest::Skill,
    launch: &Launch,
    asker: Option<Box<dyn crate::broker::prompt::Asker>>,
    warm: Option<std::os::fd::OwnedFd>,
) -> Result<crate::Child, StartError> {
    let mut policy = launch::policy_for(skill, &launch.profile)?;
    for grant in &launch.grants {
        policy
            .broker
            .rules
            .insert(grant.clone(), crate::profile::policy::Decision::Allow);
    }
    let mut command = launch::command(skill, policy, &launch.project)?;
    command.interactive(launch.interactive);
    if let Some(asker) = asker {
        command.asker(asker);
    }
    if let Some(audit) = &launch.audit {
        command.audit(audit);
    }
    if let Some(warm) = warm {
        command.warm_commit(warm);
    }
    Ok(command.spawn()?)
}

/// Why a skill's process could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The skill itself (template, profile, paths).
    #[error(transparent)]
    Skill(#[from] SkillError),
    /// The sandbox.
    #[error(transparent)]
    Spawn(#[from] crate::SpawnError),
}

/// Timeout of each invocation of `skill`.
pub fn invocation_timeout(skill: &manifest::Skill) -> std::time::Duration {
    skill.timeout.unwrap_or(host::DEFAULT_TIMEOUT)
}

/// Invoke `skill` once with `params` in a fresh process: check the params,
/// start it, send `skill.invoke`, wait for the answer and for the process
/// to end. The answer is `None` only when the run failed to start.
pub fn invoke_once(
    skill: &manifest::Skill,
    launch: &Launch,
    params: serde_json::Value,
) -> Result<Invoked, StartError> {
    launch::check_params(skill, &params)?;
    let child = start(skill, launch)?;
    let mut host = host::Host::new(&skill.name, invocation_timeout(skill), true);
    host.push(serde_json::Value::Null, params);
    let finished = child.wait_driven(&mut host);
    let answer = host.take_replies().into_iter().next().map(|(_, a)| a);
    Ok(Invoked {
        answer,
        timed_out: host.timed_out(),
        finished,
    })
}

/// What one invocation in a fresh process gave.
#[derive(Debug)]
pub struct Invoked {
    /// The skill's answer, or the error that stands for it.
    pub answer: Option<host::Answer>,
    /// Whether it timed out.
    pub timed_out: bool,
    /// The run's status and report.
    pub finished: crate::Finished,
}

/// The body of a skill host process (`sandbox serve` starts one per skill
/// process): invocations arrive on `control`, answers and events go back.
/// Returns the process's exit status.
pub fn host_process(
    skill: &manifest::Skill,
    launch: &Launch,
    control: std::os::unix::net::UnixStream,
) -> i32 {
    use serde_json::json;
    let once = skill.activation == manifest::Activation::OnDemand;
    let mut host =
        match host::Host::new(&skill.name, invocation_timeout(skill), once).with_control(control) {
            Ok(host) => host,
            Err(err) => {
                eprintln!(
                    "sandbox: skill {}: cannot duplicate its control socket: {err}",
                    skill.name
                );
                return 125;
            }
        };
    let asker = |host: &host::Host| {
        launch
            .ask_client
            .then(|| host.asker(launch.question_timeout))
            .flatten()
            .map(|asker| Box::new(asker) as Box<dyn crate::broker::prompt::Asker>)
    };
    let mut child = None;
    if once && launch.prepare_ahead {
        // A sandbox that cannot be prepared now is prepared when the call
        // comes, by the same code, which then reports why if it fails.
        let ready = prepared::Prepared::new(skill, launch, asker(&host)).ok();
        let Some(input) = host::Host::input_fd(&host) else {
            return 125;
        };
        if !prepared::wait_for_call(input) {
            // serve let this host go unused: dropping the sandbox ends it.
            return 0;
        }
        child = ready.and_then(|ready| ready.start(skill, launch));
        host.activation_starts_now(child.is_some());
    }
    let child = match child {
        Some(child) => child,
        None => match spawn(skill, launch, asker(&host), None) {
            Ok(child) => child,
            Err(err) => {
                host.event(json!({ "event": "failed", "error": err.to_string() }));
                return 125;
            }
        },
    };
    if child.reviews() && !once {
        // serve refuses this (launch::served_policy); a host started some
        // other way fails closed rather than mix invocations' changes.
        let err = SkillError::PersistentReview {
            name: skill.name.clone(),
            profile: launch.profile.name.clone(),
        };
        host.event(json!({ "event": "failed", "error": err.to_string() }));
        return 125;
    }
    if child.reviews() {
        // One invocation's changes, in a layer of this run's own: its
        // answer waits for them to be captured and carries their summary.
        host.defer_answers();
    }
    let finished = child.wait_driven(&mut host);
    host.release(finished.report.as_ref().and_then(|r| r.review.as_ref()));
    let event = match &finished.result {
        Ok(status) => json!({
            "event": "exited",
            "code": status.code(),
            "signal": status.signal(),
            "timed_out": host.timed_out(),
            "served": host.served(),
        }),
        Err(err) => json!({ "event": "failed", "error": err.to_string() }),
    };
    host.event(event);
    0
}
