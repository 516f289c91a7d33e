//! Starting a skill: its profile narrowed to what its manifest declares,
//! its runtime as the sandboxed command, its parameters checked first.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::manifest::{ExecutionMode, Runtime, Skill};
use crate::profile::policy::{NetworkMode, Policy, ProjectAccess};

/// Why a skill cannot be started or invoked.
#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    /// Templates are text for a model, never run.
    #[error("skill {name} is a template (execution-mode: template): it is never run; `sandbox skill show {name}` prints it")]
    Template {
        /// The skill.
        name: String,
    },
    /// The skill's profile does not load.
    #[error("skill {name}: profile {profile}: {source}")]
    Profile {
        /// The skill.
        name: String,
        /// The profile it names.
        profile: String,
        /// Why it does not load.
        source: Box<crate::profile::ProfileError>,
    },
    /// The skill names a profile that is neither built in nor installed.
    #[error("skill {name}: profile {profile}: neither a built-in profile ({builtins}) nor installed as {}; \
             install it there or change the manifest", installed.display())]
    UnknownProfile {
        /// The skill.
        name: String,
        /// The profile it names.
        profile: String,
        /// The built-in names.
        builtins: String,
        /// Where an installed profile of that name would be.
        installed: PathBuf,
    },
    /// The skill asks for more than the person's profile allows.
    #[error("skill {name} asks for more than your profile {allowed} allows, so it is refused \
             (run it with a profile that allows this, or change its manifest): {}", excess.join("; "))]
    Wider {
        /// The skill.
        name: String,
        /// The person's profile.
        allowed: String,
        /// Each thing it asks for beyond that profile.
        excess: Vec<String>,
    },
    /// A persistent skill whose profile asks for review mode: one
    /// long-lived process cannot keep each invocation's changes apart.
    #[error("skill {name} is persistent (activation: persistent) and profile {profile} runs it in review mode, which keeps each invocation's changes in a layer of their own until they are applied; a long-lived process would mix every invocation's changes in one layer, so it is refused: make it on-demand (remove `activation: persistent` from its SKILL.md), or serve it under a profile without `[filesystem] review`")]
    PersistentReview {
        /// The skill.
        name: String,
        /// The profile that asks for review mode.
        profile: String,
    },
    /// A path of the skill cannot be resolved.
    #[error("skill {name}: {what} {}: {source}", path.display())]
    Path {
        /// The skill.
        name: String,
        /// What the path is.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The parameters do not match the skill's input schema.
    #[error("skill {name}: invalid params at {field}: {message}")]
    Params {
        /// The skill.
        name: String,
        /// JSON pointer of the failing field (`/path`), or `(params)` for the whole object.
        field: String,
        /// What the schema wants.
        message: String,
    },
}

/// How a skill's runtime is started: the program, found in the sandbox's
/// PATH, and its arguments.
pub fn command_line(skill: &Skill, dir: &Path) -> Result<(PathBuf, Vec<PathBuf>), SkillError> {
    let (Some(runtime), Some(main)) = (skill.runtime, &skill.main) else {
        return Err(SkillError::Template {
            name: skill.name.clone(),
        });
    };
    let main = dir.join(main);
    Ok(match runtime {
        Runtime::Node => ("node".into(), vec![main]),
        // -u: unbuffered, so a skill's prints reach the log as they happen.
        Runtime::Python => ("python3".into(), vec!["-u".into(), main]),
        Runtime::Sh => ("sh".into(), vec![main]),
        Runtime::Exec => (main, Vec::new()),
    })
}

/// Whether the manifest declares `action` for every target (no pattern).
fn declares_all(skill: &Skill, action: &str) -> bool {
    skill
        .permissions
        .iter()
        .any(|p| p == action || p.strip_prefix(action) == Some(":**"))
}

/// Whether the manifest mentions `action` at all.
fn declares_any(skill: &Skill, action: &str) -> bool {
    skill
        .permissions
        .iter()
        .any(|p| p == action || p.starts_with(&format!("{action}:")))
}

/// The skill's profile narrowed to its declared permissions. The broker
/// refuses undeclared actions on its own; this narrows what the process
/// can do directly, without the broker:
/// - the project root is writable in place only with `fs.write`,
///   `fs.mkdir` and `fs.delete` all declared without a pattern, readable in
///   place only with `fs.read` declared without one, and otherwise an empty
///   directory (files then go through the broker, which checks patterns);
/// - the network is none unless `net.http` is declared; declared only
///   for hosts (`net.http:api.example.com`), a profile with a network
///   (the host's or an allowlist) gives the skill an allowlist of exactly
///   those hosts, and a profile without one stays without (the broker's
///   `net.http` can still reach them);
/// - `memory` from the manifest replaces the profile's; the run itself has
///   no wall-clock limit (a persistent skill lives long), each invocation
///   has the manifest's `timeout` instead.
pub fn narrowed_policy(skill: &Skill, mut policy: Policy) -> Policy {
    let writable = ["fs.write", "fs.mkdir", "fs.delete"]
        .iter()
        .all(|a| declares_all(skill, a));
    let readable = declares_all(skill, "fs.read");
    let most = if writable {
        ProjectAccess::ReadWrite
    } else if readable {
        ProjectAccess::ReadOnly
    } else {
        ProjectAccess::Empty
    };
    policy.filesystem.project = match (policy.filesystem.project, most) {
        (_, ProjectAccess::Empty) | (ProjectAccess::Empty, _) => ProjectAccess::Empty,
        (ProjectAccess::ReadOnly, _) | (_, ProjectAccess::ReadOnly) => ProjectAccess::ReadOnly,
        (ProjectAccess::ReadWrite, ProjectAccess::ReadWrite) => ProjectAccess::ReadWrite,
    };
    if !declares_any(skill, "net.http") {
        policy.network = crate::profile::policy::NetworkPolicy::of_mode(NetworkMode::None);
    } else if skill.permissions.iter().all(|p| p != "net.http")
        && matches!(
            policy.network.mode,
            NetworkMode::Host | NetworkMode::Allowlist
        )
    {
        policy.network.mode = NetworkMode::Allowlist;
        policy.network.allow = skill
            .permissions
            .iter()
            .filter_map(|p| p.strip_prefix("net.http:"))
            .map(str::to_string)
            .collect();
    }
    if let Some(memory) = skill.memory {
        policy.limits.memory = Some(memory);
    }
    policy.limits.timeout = None;
    policy
}

/// The profile a manifest names: a built-in one, else
/// `NAME.toml` in the person's profile directory
/// ([`super::manifest::installed_profiles`]). Never a path: the manifest
/// loader refuses those, and this refuses them again for skills built in
/// code.
pub fn named_profile(skill: &Skill, profile: &str) -> Result<Policy, SkillError> {
    let builtins = crate::profile::builtin_names();
    let installed = super::manifest::installed_profiles()
        .unwrap_or_default()
        .join(format!("{profile}.toml"));
    let unknown = || SkillError::UnknownProfile {
        name: skill.name.clone(),
        profile: profile.to_string(),
        builtins: builtins.join(", "),
        installed: installed.clone(),
    };
    if !super::manifest::is_profile_name(profile) {
        return Err(unknown());
    }
    let loaded = if builtins.contains(&profile) {
        crate::profile::load(profile)
    } else if installed.is_absolute() && installed.is_file() {
        crate::profile::load_file(&installed)
    } else {
        return Err(unknown());
    };
    loaded.map_err(|source| SkillError::Profile {
        name: skill.name.clone(),
        profile: profile.to_string(),
        source: Box::new(source),
    })
}

/// The policy `skill` runs under when the person allows `allowed`: the
/// profile its manifest names (or `allowed` itself), which must be within
/// `allowed` ([`crate::profile::narrow::within`]), with the manifest's
/// `memory` and `timeout` no larger than `allowed`'s limits; then narrowed
/// to its declared permissions ([`narrowed_policy`]). Anything wider is
/// refused, naming each excess.
pub fn policy_for(skill: &Skill, allowed: &Policy) -> Result<Policy, SkillError> {
    if skill.execution_mode == ExecutionMode::Template {
        return Err(SkillError::Template {
            name: skill.name.clone(),
        });
    }
    let mut asked = match &skill.profile {
        Some(profile) => named_profile(skill, profile)?,
        None => allowed.clone(),
    };
    // What the declarations take away is not asked for: a skill naming a
    // profile with the host network but declaring no net.http gets none.
    let declared = narrowed_policy(skill, asked.clone());
    asked.filesystem.project = declared.filesystem.project;
    asked.network = declared.network.clone();
    let mut excess = Vec::new();
    let policy = match crate::profile::narrow::within(allowed, &asked) {
        Ok(policy) => policy,
        Err(found) => {
            excess.extend(
                found
                    .into_iter()
                    .map(|e| format!("profile {}: {e}", asked.name)),
            );
            asked
        }
    };
    let size = |b: u64| crate::profile::size::format_size(b);
    if let (Some(memory), Some(limit)) = (skill.memory, allowed.limits.memory) {
        if memory > limit {
            excess.push(format!(
                "memory {} (your profile: limits.memory {})",
                size(memory),
                size(limit)
            ));
        }
    }
    if let (Some(timeout), Some(limit)) = (skill.timeout, allowed.limits.timeout) {
        if timeout > limit {
            excess.push(format!(
                "timeout {} (your profile: limits.timeout {})",
                crate::profile::format_duration(timeout),
                crate::profile::format_duration(limit)
            ));
        }
    }
    if !excess.is_empty() {
        return Err(SkillError::Wider {
            name: skill.name.clone(),
            allowed: allowed.name.clone(),
            excess,
        });
    }
    Ok(narrowed_policy(skill, policy))
}

/// [`policy_for`] of a skill served by long-lived hosts (`serve`): a
/// persistent skill may not run in review mode there, since its layer
/// would hold every invocation's changes at once and be captured only when
/// the process ends. `sandbox skill run` starts a process per call
/// whatever the activation, so it needs no such check.
pub fn served_policy(skill: &Skill, allowed: &Policy) -> Result<Policy, SkillError> {
    let policy = policy_for(skill, allowed)?;
    if policy.filesystem.review && skill.activation == super::manifest::Activation::Persistent {
        return Err(SkillError::PersistentReview {
            name: skill.name.clone(),
            profile: policy.name.clone(),
        });
    }
    Ok(policy)
}

/// Check `params` against the skill's input schema, naming the first
/// failing field.
pub fn check_params(skill: &Skill, params: &Value) -> Result<(), SkillError> {
    // Compiled once, when the manifest loaded (which refuses a bad schema).
    let Some(validator) = &skill.params_validator else {
        return Ok(());
    };
    validator
        .0
        .check(params)
        .map_err(|violation| SkillError::Params {
            name: skill.name.clone(),
            field: if violation.field.is_empty() {
                "(params)".into()
            } else {
                violation.field
            },
            message: violation.message,
        })
}

/// The sandboxed command for `skill` under `policy`, rooted at `project`.
/// Its stdout and stderr go to the supervisor's stderr (the log): the
/// result travels over the channel, never mixed with the skill's prints.
pub fn command(
    skill: &Skill,
    policy: Policy,
    project: &Path,
) -> Result<crate::Command, SkillError> {
    let dir = std::fs::canonicalize(&skill.dir).map_err(|source| SkillError::Path {
        name: skill.name.clone(),
        what: "directory",
        path: skill.dir.clone(),
        source,
    })?;
    let (program, args) = command_line(skill, &dir)?;
    let main = skill
        .main
        .as_ref()
        .map(|m| dir.join(m))
        .unwrap_or_else(|| dir.clone());
    let mut command = crate::Command::new(program, policy);
    command
        .args(args)
        .project(project)
        .read_only(&dir, &dir)
        .env("SKILL_DIR", &dir)
        .env("SKILL_NAME", &skill.name)
        .stdin(crate::Stdio::Null)
        .stdout(crate::Stdio::SupervisorStderr)
        .stderr(crate::Stdio::SupervisorStderr)
        .skill(crate::spawn::prepare::SkillCaller {
            name: skill.name.clone(),
            permissions: skill.permissions.clone(),
            main,
            dir: dir.clone(),
        });
    match super::clients::on_host() {
        Ok(lib) => {
            command.read_only(lib, super::clients::INSIDE);
            for (name, value) in super::clients::ENV {
                command.env(name, value);
            }
        }
        // Skills that bring their own client still run.
        Err(err) => eprintln!(
            "sandbox: warning: the client libraries cannot be offered at {}: {err}",
            super::clients::INSIDE
        ),
    }
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(permissions: &[&str]) -> Skill {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
            "required": ["path"]
        });
        Skill {
            name: "t".into(),
            description: "d".into(),
            dir: "/skills/t".into(),
            runtime: Some(Runtime::Node),
            main: Some("index.js".into()),
            permissions: permissions.iter().map(|p| p.to_string()).collect(),
            profile: Some("permissive".into()),
            timeout: None,
            memory: Some(64 << 20),
            execution_mode: ExecutionMode::Direct,
            activation: Default::default(),
            input_schema: Some(schema.clone()),
            output_schema: None,
            params_validator: Some(super::super::manifest::ParamsValidator(
                std::sync::Arc::new(super::super::params::ParamsSchema::compile(&schema).unwrap()),
            )),
            license: None,
            instructions: String::new(),
        }
    }

    #[test]
    fn the_project_is_only_as_open_as_the_declarations() {
        let base = crate::profile::load("permissive").unwrap();
        assert_eq!(base.filesystem.project, ProjectAccess::ReadWrite);
        let cases: [(&[&str], ProjectAccess); 5] = [
            (&[], ProjectAccess::Empty),
            (&["fs.read:docs/**"], ProjectAccess::Empty),
            (&["fs.read", "fs.write"], ProjectAccess::ReadOnly),
            (
                &["fs.read", "fs.write", "fs.mkdir", "fs.delete:tmp/**"],
                ProjectAccess::ReadOnly,
            ),
            (
                &["fs.write", "fs.mkdir:**", "fs.delete"],
                ProjectAccess::ReadWrite,
            ),
        ];
        for (permissions, want) in cases {
            let policy = narrowed_policy(&skill(permissions), base.clone());
            assert_eq!(policy.filesystem.project, want, "{permissions:?}");
        }
        let strict = crate::profile::load("strict").unwrap();
        let mut ro = strict.clone();
        ro.filesystem.project = ProjectAccess::ReadOnly;
        let policy = narrowed_policy(&skill(&["fs.write", "fs.mkdir", "fs.delete"]), ro);
        assert_eq!(
            policy.filesystem.project,
            ProjectAccess::ReadOnly,
            "a declaration never widens the profile"
        );
    }

    #[test]
    fn network_memory_and_the_skill_directory_follow_the_manifest() {
        let base = crate::profile::load("permissive").unwrap();
        let policy = narrowed_policy(&skill(&["fs.read"]), base.clone());
        assert_eq!(policy.network.mode, NetworkMode::None);
        assert_eq!(policy.limits.memory, Some(64 << 20));
        assert_eq!(policy.limits.timeout, None);
        // Hosts declared: exactly those, through the proxy.
        let policy = narrowed_policy(&skill(&["net.http:api.example.com"]), base.clone());
        assert_eq!(policy.network.mode, NetworkMode::Allowlist);
        assert_eq!(policy.network.allow, ["api.example.com"]);
        // Any host declared: the profile's network.
        let policy = narrowed_policy(&skill(&["net.http"]), base.clone());
        assert_eq!(policy.network.mode, base.network.mode);
        // A profile without a network gives none, whatever is declared.
        let strict = crate::profile::load("strict").unwrap();
        let policy = narrowed_policy(&skill(&["net.http:api.example.com"]), strict.clone());
        assert_eq!(policy.network.mode, strict.network.mode);
        assert!(policy.network.allow.is_empty());
    }

    #[test]
    fn a_persistent_skill_is_served_in_review_mode_never() {
        let mut allowed = crate::profile::load("strict").unwrap();
        allowed.filesystem.review = true;
        let mut on_demand = skill(&["fs.read", "fs.write", "fs.mkdir", "fs.delete"]);
        on_demand.profile = None;
        assert!(
            served_policy(&on_demand, &allowed)
                .unwrap()
                .filesystem
                .review
        );
        let mut persistent = on_demand.clone();
        persistent.activation = super::super::manifest::Activation::Persistent;
        match served_policy(&persistent, &allowed) {
            Err(err @ SkillError::PersistentReview { .. }) => {
                let said = err.to_string();
                assert!(
                    said.contains(&format!("skill {}", persistent.name)),
                    "{said}"
                );
                assert!(said.contains("activation: persistent"), "{said}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Outside review mode it is served as before.
        allowed.filesystem.review = false;
        assert!(served_policy(&persistent, &allowed).is_ok());
    }

    #[test]
    fn a_declared_host_outside_the_persons_allowlist_is_refused() {
        let mut allowed = crate::profile::load("strict").unwrap();
        allowed.network =
            crate::profile::policy::NetworkPolicy::from_spec("allow:api.example.com").unwrap();
        let mut inside = skill(&["net.http:api.example.com"]);
        inside.profile = None;
        let policy = policy_for(&inside, &allowed).unwrap();
        assert_eq!(policy.network.allow, ["api.example.com"]);
        let mut outside = skill(&["net.http:evil.example.net"]);
        outside.profile = None;
        match policy_for(&outside, &allowed) {
            Err(SkillError::Wider { excess, .. }) => assert!(
                excess.iter().any(|e| e.contains("evil.example.net")),
                "{excess:?}"
            ),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_skill_gets_at_most_the_persons_profile() {
        let strict = crate::profile::load("strict").unwrap();
        let permissive = crate::profile::load("permissive").unwrap();
        // `skill()` names permissive: refused within strict, naming why.
        match policy_for(&skill(&["fs.read", "net.http"]), &strict) {
            Err(SkillError::Wider {
                allowed, excess, ..
            }) => {
                assert_eq!(allowed, "strict");
                assert!(
                    excess
                        .iter()
                        .any(|e| e
                            == "profile permissive: network.mode host (your profile: loopback)"),
                    "{excess:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(policy_for(&skill(&["fs.read"]), &permissive).is_ok());
        // No profile named: the person's, narrowed to the declarations.
        let mut own = skill(&["fs.read"]);
        own.profile = None;
        let policy = policy_for(&own, &strict).unwrap();
        assert_eq!(policy.name, "strict");
        assert_eq!(policy.filesystem.project, ProjectAccess::ReadOnly);
        // The manifest's own limits stay within the person's.
        own.memory = Some(8 << 30);
        own.timeout = Some(std::time::Duration::from_secs(3600));
        match policy_for(&own, &strict) {
            Err(SkillError::Wider { excess, .. }) => assert_eq!(
                excess,
                [
                    "memory 8GiB (your profile: limits.memory 1GiB)",
                    "timeout 1h (your profile: limits.timeout 10m)"
                ]
            ),
            other => panic!("{other:?}"),
        }
        // A path is never a profile name, even for a skill built in code.
        own.memory = None;
        own.timeout = None;
        own.profile = Some("../../etc/evil.toml".into());
        assert!(matches!(
            policy_for(&own, &strict),
            Err(SkillError::UnknownProfile { .. })
        ));
    }

    #[test]
    fn params_are_checked_against_the_schema_naming_the_field() {
        let s = skill(&[]);
        check_params(&s, &serde_json::json!({"path": "a", "count": 2})).unwrap();
        match check_params(&s, &serde_json::json!({"path": 3})) {
            Err(SkillError::Params { field, message, .. }) => {
                assert_eq!(field, "/path");
                assert!(message.contains("string"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        match check_params(&s, &serde_json::json!({"count": 0, "path": "x"})) {
            Err(SkillError::Params { field, .. }) => assert_eq!(field, "/count"),
            other => panic!("{other:?}"),
        }
        match check_params(&s, &serde_json::json!({})) {
            Err(SkillError::Params { field, message, .. }) => {
                assert_eq!(field, "(params)");
                assert!(message.contains("\"path\""), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
