//! From a submitted request to the [`RunSpec`] the launcher gets: the named
//! profile, narrowed by the request, held to the caller's rule.
//!
//! Everything that names a file is resolved here, with the daemon's view of
//! the filesystem and checked against the caller's rule, so the launcher
//! and supervisor never look anything up by a name the caller chose.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::config::{Config, Rule};
use super::error::ApiError;
use sandbox::action::Permission;
use sandbox::launch::protocol::RunSpec;
use sandbox::profile::overrides::Overrides;
use sandbox::profile::policy::{NetworkPolicy, Policy};
use sandbox::profile::size;

/// Who is asking, as the kernel says (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Process id (at connect time).
    pub pid: i32,
}

/// Limits a request asks for (strings as the CLI flags take them).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLimits {
    /// Memory ("512MiB").
    pub memory: Option<String>,
    /// Tasks.
    pub pids: Option<u64>,
    /// CPU share in cores.
    pub cpus: Option<f64>,
    /// Wall-clock limit ("10m").
    pub timeout: Option<String>,
    /// Output cap ("1MiB").
    pub output: Option<String>,
}

/// A submitted secret: its value, or its value and the hosts `net.http`
/// may send it to (`{"value": "...", "hosts": ["api.example.com"]}`).
#[derive(Deserialize)]
#[serde(untagged)]
pub enum SubmittedSecret {
    /// Bound to no host.
    Value(String),
    /// Bound to hosts (allowlist entries).
    Bound {
        /// The value.
        value: String,
        /// The hosts.
        hosts: Vec<String>,
    },
}

// Requests are logged with `{:?}`: the value stays out.
impl std::fmt::Debug for SubmittedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmittedSecret::Value(_) => f.write_str("SubmittedSecret"),
            SubmittedSecret::Bound { hosts, .. } => f
                .debug_struct("SubmittedSecret")
                .field("hosts", hosts)
                .finish_non_exhaustive(),
        }
    }
}

/// `POST /v1/runs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Profile name (default `strict`).
    pub profile: Option<String>,
    /// Project root.
    pub project: PathBuf,
    /// Working directory inside the project.
    pub cwd: Option<PathBuf>,
    /// Environment of the command (on top of the profile's `env.set`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Network mode (default: the profile's).
    pub network: Option<String>,
    /// Limits, each at most the rule's.
    pub limits: Option<RequestLimits>,
    /// Pre-approved broker actions, each within the rule's.
    #[serde(default)]
    pub grants: Vec<String>,
    /// Secrets for the broker's `secrets.get` and `net.http`.
    #[serde(default)]
    pub secrets: BTreeMap<String, SubmittedSecret>,
    /// Text for stdin.
    pub stdin: Option<String>,
    /// Bytes for stdin, base64.
    pub stdin_b64: Option<String>,
    /// Answer when the run is over.
    #[serde(default)]
    pub wait: bool,
    /// Keep the run's changes for review instead of writing the project
    /// (as `sandbox run --review`; a profile with `review = true` always
    /// does).
    #[serde(default)]
    pub review: bool,
}

/// A request resolved into what the launcher gets, plus what the daemon
/// keeps for itself.
#[derive(Debug)]
pub struct Resolved {
    /// The spec (audit and stdin are filled in when the spool exists).
    pub spec: RunSpec,
    /// Profile name, for the record.
    pub profile: String,
    /// Bytes for stdin.
    pub stdin: Option<Vec<u8>>,
}

/// The default profile of a request.
pub const DEFAULT_PROFILE: &str = "strict";

/// Resolve a request for a caller under its rule. Touches the filesystem
/// (canonicalizes paths, reads a profile): call it off the async runtime.
pub fn resolve(
    config: &Config,
    rule: &Rule,
    caller: Caller,
    request: SubmitRequest,
) -> Result<Resolved, ApiError> {
    if request.command.is_empty() || request.command[0].is_empty() {
        return Err(ApiError::bad_request(
            "command: is empty",
            "give the program and its arguments, e.g. [\"make\", \"test\"]",
        ));
    }
    for arg in &request.command {
        no_nul("command", arg)?;
    }
    let profile_name = request
        .profile
        .clone()
        .unwrap_or_else(|| DEFAULT_PROFILE.to_string());
    let mut policy = load_profile(config, rule, &profile_name)?;
    // A best-effort profile falls back to running without namespaces where
    // none can be made, as the supervisor's own user: for the daemon that
    // would be the caller's command running as the daemon's user (root, for
    // a system daemon), with its state directory in view. A daemon run has
    // its namespaces or does not start.
    policy.enforce.userns = sandbox::profile::policy::Enforcement::Required;
    let project = check_project(rule, caller, &request.project)?;
    check_guarded(config, &project)?;
    let cwd = match &request.cwd {
        None => None,
        Some(cwd) => Some(check_cwd(caller, &project, cwd)?),
    };
    // Everything the caller asks for is checked against its rule first;
    // the policy then changes in one place, as `sandbox run`'s flags do.
    let grants = grants_within(rule, &request.grants)?;
    let network = network_within(rule, &policy, request.network.as_deref())?;
    let limits = limits_within(config, rule, &policy, request.limits.unwrap_or_default())?;
    Overrides {
        grants,
        network,
        review: request.review,
        ..limits
    }
    .apply(&mut policy)
    .map_err(|err| ApiError::internal(format!("applying a checked request: {err}")))?;

    let mut env = Vec::new();
    for (name, value) in &request.env {
        check_env_name("env", name)?;
        no_nul(&format!("env.{name}"), value)?;
        env.push((name.clone(), value.clone()));
    }
    // `pass` would read the environment of whoever resolves it last: the
    // launcher's, which is the daemon's. The request's `env` is the
    // caller's environment, and all of it is already in `env`.
    policy.env.pass.clear();
    let mut secrets = Vec::new();
    for (name, secret) in request.secrets {
        check_env_name("secrets", &name)?;
        let (value, hosts) = match secret {
            SubmittedSecret::Value(value) => (value, Vec::new()),
            SubmittedSecret::Bound { value, hosts } => (value, hosts),
        };
        no_nul(&format!("secrets.{name}"), &value)?;
        let hosts = hosts
            .iter()
            .map(|host| sandbox::broker::secrets::parse_binding(host))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| {
                ApiError::bad_request(
                    format!("secrets.{name}.hosts: {err}"),
                    "list host entries such as api.example.com, *.example.com or host:8443",
                )
            })?;
        secrets.push(sandbox::broker::secrets::SecretSpec { name, value, hosts });
    }
    let stdin = match (request.stdin, request.stdin_b64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "stdin and stdin_b64 are both given",
                "send text as stdin or bytes as stdin_b64, not both",
            ))
        }
        (Some(text), None) => Some(text.into_bytes()),
        (None, Some(b64)) => {
            use base64::Engine;
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .map_err(|err| {
                        ApiError::bad_request(
                            format!("stdin_b64: not base64 ({err})"),
                            "encode the bytes in standard base64 with padding",
                        )
                    })?,
            )
        }
        (None, None) => None,
    };
    let spec = RunSpec {
        policy,
        argv: request.command,
        env,
        project,
        cwd,
        secrets,
        cgroup_parent: None,
        audit: None,
        grant_store: None,
        review_store: None,
        ask_deadline_ms: u64::try_from(config.ask_deadline.as_millis()).unwrap_or(u64::MAX),
        stdin: stdin.is_some(),
        run_as: None,
    };
    Ok(Resolved {
        spec,
        profile: profile_name,
        stdin,
    })
}

fn no_nul(field: &str, value: &str) -> Result<(), ApiError> {
    if value.contains('\0') {
        return Err(ApiError::bad_request(
            format!("{field}: contains a NUL byte"),
            "remove the NUL byte; the kernel cannot pass it to a program",
        ));
    }
    Ok(())
}

fn check_env_name(field: &str, name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return Err(ApiError::bad_request(
            format!("{field}: {name:?} is not a variable name"),
            "use a non-empty name without '=' or NUL",
        ));
    }
    Ok(())
}

fn load_profile(config: &Config, rule: &Rule, name: &str) -> Result<Policy, ApiError> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') || name.contains('\0') {
        return Err(ApiError::bad_request(
            format!("profile: {name:?} is not a profile name"),
            "name a profile (such as \"strict\"); a path is never accepted",
        ));
    }
    if !rule.profiles.iter().any(|allowed| allowed == name) {
        return Err(ApiError::forbidden(
            "profile_not_allowed",
            format!(
                "profile: {name:?} is not allowed for you (rule {})",
                rule.name()
            ),
            format!(
                "use one of {}, or ask the daemon's administrator to add it to {}.profiles",
                rule.profiles.join(", "),
                rule.name()
            ),
        ));
    }
    if sandbox::profile::builtin_names().contains(&name) {
        return sandbox::profile::load(name).map_err(|err| {
            ApiError::internal(format!(
                "profile {name}: the built-in profile failed: {err}"
            ))
        });
    }
    let Some(dir) = &config.profiles_dir else {
        return Err(ApiError::bad_request(
            format!(
                "profile: {name:?} is not a built-in profile and the daemon has no profiles_dir"
            ),
            "use a built-in profile, or set [daemon] profiles_dir and put the file there",
        ));
    };
    let path = dir.join(format!("{name}.toml"));
    if !path.is_file() {
        return Err(ApiError::bad_request(
            format!("profile: no profile {name:?} in {}", dir.display()),
            format!("create {} or use another profile", path.display()),
        ));
    }
    sandbox::profile::load_file(&path).map_err(|err| {
        ApiError::bad_request(
            format!("profile: {name:?} cannot be used: {err}"),
            format!("fix {}", path.display()),
        )
    })
}

fn check_project(rule: &Rule, caller: Caller, requested: &Path) -> Result<PathBuf, ApiError> {
    if !requested.is_absolute() {
        return Err(ApiError::bad_request(
            format!("project: {} is relative", requested.display()),
            "give the project's absolute path",
        ));
    }
    let (project, meta) = as_caller(caller, || {
        let project = std::fs::canonicalize(requested)?;
        let meta = std::fs::metadata(&project)?;
        Ok((project, meta))
    })
    .map_err(|err| {
        ApiError::bad_request(
            format!("project: {}: {err}", requested.display()),
            "give an existing directory you can reach",
        )
    })?;
    if !meta.is_dir() {
        return Err(ApiError::bad_request(
            format!("project: {} is not a directory", project.display()),
            "give the project's root directory",
        ));
    }
    // Compared after canonicalization, component by component, so neither
    // `..` nor a symlink nor `/srv/ci-other` passes for `/srv/ci`.
    if !rule.projects.iter().any(|root| project.starts_with(root)) {
        return Err(ApiError::forbidden(
            "project_not_allowed",
            format!(
                "project: {} is not below a project root you may use (rule {})",
                project.display(),
                rule.name()
            ),
            format!(
                "use a project below {}",
                rule.projects
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    if !rule.any_owner && meta.uid() != caller.uid {
        return Err(ApiError::forbidden(
            "project_not_allowed",
            format!(
                "project: {} belongs to uid {}, not to you (uid {})",
                project.display(),
                meta.uid(),
                caller.uid
            ),
            format!(
                "use a project you own, or ask for any_owner = true in {}",
                rule.name()
            ),
        ));
    }
    Ok(project)
}

/// Look at a caller's path with the caller's rights: as root the daemon
/// would resolve it through directories the caller may not search, and
/// its answer ("no such file" or a rule's refusal naming the resolved
/// path) would tell the caller what exists there. On a thread of its own
/// with the caller's filesystem uid, gid and groups (`sys::fs_identity`);
/// a daemon of the caller's own uid looks directly.
fn as_caller<T: Send>(
    caller: Caller,
    look: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    if caller.uid == nix::unistd::geteuid().as_raw() {
        return look();
    }
    let groups = super::config::caller_groups(caller.uid, caller.gid);
    sandbox::os::with_fs_identity(caller.uid, caller.gid, &groups, look).map_err(|errno| {
        std::io::Error::other(format!(
            "the daemon cannot take your identity to look at it ({errno})"
        ))
    })?
}

/// A project that holds the daemon's database, spool or socket (or lies
/// inside them) would hand a run every caller's output and the records.
fn check_guarded(config: &Config, project: &Path) -> Result<(), ApiError> {
    for guarded in &config.guarded {
        if guarded.starts_with(project) || project.starts_with(guarded) {
            return Err(ApiError::forbidden(
                "project_not_allowed",
                format!(
                    "project: {} overlaps the daemon's own files ({})",
                    project.display(),
                    guarded.display()
                ),
                "use a project directory that neither contains nor lies inside the daemon's state directory or socket",
            ));
        }
    }
    Ok(())
}

fn check_cwd(caller: Caller, project: &Path, requested: &Path) -> Result<PathBuf, ApiError> {
    let joined = project.join(requested);
    let (cwd, is_dir) = as_caller(caller, || {
        let cwd = std::fs::canonicalize(&joined)?;
        let is_dir = cwd.is_dir();
        Ok((cwd, is_dir))
    })
    .map_err(|err| {
        ApiError::bad_request(
            format!("cwd: {}: {err}", joined.display()),
            "give an existing directory inside the project",
        )
    })?;
    if !cwd.starts_with(project) || !is_dir {
        return Err(ApiError::forbidden(
            "project_not_allowed",
            format!(
                "cwd: {} is not a directory inside the project {}",
                cwd.display(),
                project.display()
            ),
            "give a working directory inside the project",
        ));
    }
    Ok(cwd)
}

fn grant_within(rule_grants: &[Permission], wanted: &Permission) -> bool {
    rule_grants.iter().any(|allowed| {
        allowed.action == wanted.action
            && (allowed.pattern.is_none() || allowed.pattern == wanted.pattern)
    })
}

/// The grants, each within the rule's.
fn grants_within(rule: &Rule, grants: &[String]) -> Result<Vec<String>, ApiError> {
    for grant in grants {
        let wanted: Permission = grant.parse().map_err(|err| {
            ApiError::bad_request(
                format!("grants: {err}"),
                "name a broker action, optionally with a pattern: \"fs.write:dist/**\"",
            )
        })?;
        if !grant_within(&rule.grants, &wanted) {
            let allowed: Vec<String> = rule.grants.iter().map(permission_text).collect();
            return Err(ApiError::forbidden(
                "grant_not_allowed",
                format!(
                    "grants: {grant:?} is more than you may grant (rule {})",
                    rule.name()
                ),
                if allowed.is_empty() {
                    "remove the grant; your rule allows none (the run can still ask)".to_string()
                } else {
                    format!("grant at most {}", allowed.join(", "))
                },
            ));
        }
    }
    Ok(grants.to_vec())
}

fn permission_text(permission: &Permission) -> String {
    match &permission.pattern {
        Some(pattern) => format!("{}:{pattern}", permission.action),
        None => permission.action.to_string(),
    }
}

/// The network a request asks for (None: the profile's), when it is one
/// the rule allows and, for an allowlist, within the profile's own list.
fn network_within(
    rule: &Rule,
    policy: &Policy,
    requested: Option<&str>,
) -> Result<Option<NetworkPolicy>, ApiError> {
    let mut network = None;
    if let Some(spec) = requested {
        let profile_list = (policy.network.mode
            == sandbox::profile::policy::NetworkMode::Allowlist)
            .then(|| policy.network.allow.clone());
        let asked = NetworkPolicy::from_spec(spec).map_err(|err| {
            ApiError::bad_request(
                format!("network: {err}"),
                "use none, loopback, host or allow:HOST[,HOST...]",
            )
        })?;
        if asked.mode == sandbox::profile::policy::NetworkMode::Allowlist {
            // A profile's own list is the most its runs may name: the
            // rule's "allowlist" lets a caller narrow it, not replace it.
            if let Some(list) = profile_list {
                if let Some(entry) = asked
                    .allow
                    .iter()
                    .find(|entry| !sandbox::net::allow::entry_within(entry, &list))
                {
                    return Err(ApiError::forbidden(
                        "network_not_allowed",
                        format!(
                            "network: {entry} is not within the profile's allowlist ({})",
                            list.join(", ")
                        ),
                        "name hosts the profile lists, or use a profile that lists this one",
                    ));
                }
            }
        }
        network = Some(asked);
    }
    let mode = network.as_ref().unwrap_or(&policy.network).mode;
    if !rule.networks.contains(&mode) {
        let allowed: Vec<&str> = rule.networks.iter().map(|m| m.name()).collect();
        return Err(ApiError::forbidden(
            "network_not_allowed",
            format!(
                "network: {} is not allowed for you (rule {}){}",
                mode.name(),
                rule.name(),
                if requested.is_none() {
                    ", and it is the profile's default"
                } else {
                    ""
                }
            ),
            format!("ask for network {}", allowed.join(" or ")),
        ));
    }
    Ok(network)
}

fn too_high(field: &str, asked: String, most: String, rule: &Rule) -> ApiError {
    ApiError::forbidden(
        "limit_too_high",
        format!(
            "limits.{field}: {asked} is above your most, {most} (rule {})",
            rule.name()
        ),
        format!("ask for at most {most}, or leave limits.{field} out to get {most}"),
    )
}

fn bad_limit(field: &str, message: String) -> ApiError {
    ApiError::bad_request(
        format!("limits.{field}: {message}"),
        "see docs/src/daemon.md, POST /v1/runs",
    )
}

/// A request's limit, checked against the rule's ceiling; then the ceiling
/// replaces a profile value that is unset or above it.
fn clamp<T: PartialOrd + Copy>(
    field: &str,
    requested: Option<T>,
    ceiling: Option<T>,
    profile: Option<T>,
    rule: &Rule,
    show: impl Fn(T) -> String,
) -> Result<Option<T>, ApiError> {
    let mut value = profile;
    if let Some(asked) = requested {
        if let Some(most) = ceiling {
            if asked > most {
                return Err(too_high(field, show(asked), show(most), rule));
            }
        }
        value = Some(asked);
    }
    if let Some(most) = ceiling {
        if value.is_none_or(|value| value > most) {
            value = Some(most);
        }
    }
    Ok(value)
}

/// The run's limits: the request's, each at most the rule's, and the
/// rule's ceiling where the profile has none or a higher one.
fn limits_within(
    config: &Config,
    rule: &Rule,
    policy: &Policy,
    asked: RequestLimits,
) -> Result<Overrides, ApiError> {
    let memory = asked
        .memory
        .as_deref()
        .map(size::memory_flag)
        .transpose()
        .map_err(|m| bad_limit("memory", m))?;
    let pids = asked
        .pids
        .map(size::check_pids)
        .transpose()
        .map_err(|m| bad_limit("pids", m))?;
    let cpu = asked
        .cpus
        .map(size::check_cpu)
        .transpose()
        .map_err(|m| bad_limit("cpus", m))?;
    let timeout = asked
        .timeout
        .as_deref()
        .map(size::timeout_flag)
        .transpose()
        .map_err(|m| bad_limit("timeout", m))?;
    let output = asked
        .output
        .as_deref()
        .map(size::output_flag)
        .transpose()
        .map_err(|m| bad_limit("output", m))?;
    let limits = &policy.limits;
    let memory = clamp(
        "memory",
        memory,
        rule.limits.memory,
        limits.memory,
        rule,
        size::format_size,
    )?;
    let pids = clamp("pids", pids, rule.limits.pids, limits.pids, rule, |n| {
        n.to_string()
    })?;
    let cpu = clamp("cpus", cpu, rule.limits.cpu, limits.cpu, rule, |n| {
        n.to_string()
    })?;
    let timeout = clamp(
        "timeout",
        timeout,
        rule.limits.timeout,
        limits.timeout,
        rule,
        size::format_duration,
    )?;
    // The spool cap is the daemon's, whatever the rule says: output is
    // disk the daemon pays for.
    let output_ceiling = Some(
        rule.limits
            .output
            .map_or(config.max_output, |most| most.min(config.max_output)),
    );
    let output = clamp(
        "output",
        output,
        output_ceiling,
        limits.output,
        rule,
        size::format_size,
    )?;
    Ok(Overrides {
        memory,
        pids,
        cpu,
        timeout,
        output,
        ..Overrides::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::profile::policy::Decision;
    use std::time::Duration;

    fn caller() -> Caller {
        let uid = nix::unistd::geteuid().as_raw();
        Caller {
            uid,
            gid: 0,
            pid: 1,
        }
    }

    fn config_for(project_root: &Path, extra: &str) -> Config {
        let text = format!(
            "[daemon]\nmax_output = \"8MiB\"\n[[allow]]\nuids = [{}]\nprojects = [{:?}]\ngrants = [\"fs.read\", \"fs.write:dist/**\"]\n{extra}\n[allow.limits]\nmemory = \"1GiB\"\ntimeout = \"10m\"\npids = 100\n",
            caller().uid,
            project_root.display().to_string()
        );
        Config::parse(&text, Path::new("test.toml")).unwrap()
    }

    fn request(project: &Path) -> SubmitRequest {
        SubmitRequest {
            command: vec!["/bin/echo".into(), "hi".into()],
            project: project.to_path_buf(),
            ..SubmitRequest::default()
        }
    }

    fn refused(config: &Config, req: SubmitRequest) -> ApiError {
        let rule = &config.rules[0];
        resolve(config, rule, caller(), req).unwrap_err()
    }

    #[test]
    fn a_plain_request_gets_the_rule_ceilings() {
        let dir = tempfile::tempdir().unwrap();
        let config = config_for(dir.path(), "");
        let mut req = request(dir.path());
        req.env.insert("CI".into(), "1".into());
        req.grants = vec!["fs.read".into(), "fs.write:dist/**".into()];
        let resolved = resolve(&config, &config.rules[0], caller(), req).unwrap();
        let policy = &resolved.spec.policy;
        assert_eq!(policy.limits.memory, Some(1 << 30));
        assert_eq!(policy.limits.pids, Some(100));
        assert_eq!(policy.limits.timeout, Some(Duration::from_secs(600)));
        assert!(policy.limits.output.is_some_and(|o| o <= 8 << 20));
        assert!(
            policy.env.pass.is_empty(),
            "pass would read the launcher's environment"
        );
        assert_eq!(
            policy.broker.rules.get("fs.write:dist/**"),
            Some(&Decision::Allow)
        );
        assert_eq!(resolved.spec.env, vec![("CI".to_string(), "1".to_string())]);
        assert_eq!(
            resolved.spec.project,
            std::fs::canonicalize(dir.path()).unwrap()
        );
        assert!(resolved.spec.grant_store.is_none());
        assert!(resolved.spec.cgroup_parent.is_none());
    }

    #[test]
    fn secrets_arrive_plain_or_bound_to_checked_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let config = config_for(dir.path(), "");
        let mut req = request(dir.path());
        req.secrets = serde_json::from_value(serde_json::json!({
            "PLAIN": "v1",
            "BOUND": {"value": "v2", "hosts": ["API.GitHub.com", "*.example.com:8443"]},
        }))
        .unwrap();
        let resolved = resolve(&config, &config.rules[0], caller(), req).unwrap();
        let secrets = &resolved.spec.secrets;
        assert_eq!(secrets.len(), 2);
        assert_eq!(
            (secrets[0].name.as_str(), secrets[0].value.as_str()),
            ("BOUND", "v2")
        );
        assert_eq!(secrets[0].hosts, ["api.github.com", "*.example.com:8443"]);
        assert_eq!(
            (secrets[1].name.as_str(), secrets[1].value.as_str()),
            ("PLAIN", "v1")
        );
        assert!(secrets[1].hosts.is_empty());

        let mut req = request(dir.path());
        req.secrets =
            serde_json::from_value(serde_json::json!({"T": {"value": "v", "hosts": ["bad host"]}}))
                .unwrap();
        let err = refused(&config, req);
        assert!(format!("{err:?}").contains("secrets.T.hosts"), "{err:?}");
    }

    #[test]
    fn no_daemon_run_falls_back_to_running_without_namespaces() {
        let dir = tempfile::tempdir().unwrap();
        let config = config_for(dir.path(), "profiles = [\"standard\", \"permissive\"]");
        for profile in ["standard", "permissive"] {
            assert_eq!(
                sandbox::profile::load(profile).unwrap().enforce.userns,
                sandbox::profile::policy::Enforcement::BestEffort,
                "the profile alone would fall back"
            );
            let mut req = request(dir.path());
            req.profile = Some(profile.into());
            req.network = Some("none".into());
            let resolved = resolve(&config, &config.rules[0], caller(), req).unwrap();
            assert_eq!(
                resolved.spec.policy.enforce.userns,
                sandbox::profile::policy::Enforcement::Required,
                "{profile}"
            );
        }
    }

    #[test]
    fn every_refusal_has_its_code() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("allowed");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let outside = dir.path().join("allowed-not");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let config = config_for(&root, "profiles = [\"strict\", \"standard\"]");

        let mut req = request(&root);
        req.profile = Some("permissive".into());
        assert_eq!(refused(&config, req).code, "profile_not_allowed");
        let mut req = request(&root);
        req.profile = Some("../strict".into());
        assert_eq!(refused(&config, req).code, "bad_request");
        let mut req = request(&root);
        req.profile = Some("/etc/passwd".into());
        assert_eq!(refused(&config, req).code, "bad_request");

        assert_eq!(
            refused(&config, request(&outside)).code,
            "project_not_allowed"
        );
        let err = refused(&config, request(&root.join("link")));
        assert_eq!(
            err.code, "project_not_allowed",
            "a symlink out of the root: {err:?}"
        );
        assert_eq!(
            refused(&config, request(&root.join("sub/../../allowed-not"))).code,
            "project_not_allowed"
        );
        let mut req = request(&root);
        req.cwd = Some(PathBuf::from("../allowed-not"));
        assert_eq!(refused(&config, req).code, "project_not_allowed");
        assert_eq!(
            refused(&config, request(Path::new("relative"))).code,
            "bad_request"
        );

        let mut req = request(&root);
        req.grants = vec!["fs.write".into()];
        let err = refused(&config, req);
        assert_eq!(err.code, "grant_not_allowed");
        assert!(err.fix.contains("fs.write:dist/**"), "{err:?}");
        let mut req = request(&root);
        req.grants = vec!["fs.fly".into()];
        assert_eq!(refused(&config, req).code, "bad_request");

        let mut req = request(&root);
        req.network = Some("host".into());
        assert_eq!(refused(&config, req).code, "network_not_allowed");
        let mut req = request(&root);
        req.network = Some("wifi".into());
        assert_eq!(refused(&config, req).code, "bad_request");
        // An allowlist is a network the rule must list like any other.
        let mut req = request(&root);
        req.network = Some("allow:api.example.com".into());
        assert_eq!(refused(&config, req).code, "network_not_allowed");
        let mut req = request(&root);
        req.network = Some("allow:api example".into());
        assert_eq!(refused(&config, req).code, "bad_request");

        for limits in [
            RequestLimits {
                memory: Some("2GiB".into()),
                ..Default::default()
            },
            RequestLimits {
                pids: Some(101),
                ..Default::default()
            },
            RequestLimits {
                timeout: Some("1h".into()),
                ..Default::default()
            },
            RequestLimits {
                output: Some("9MiB".into()),
                ..Default::default()
            },
        ] {
            let mut req = request(&root);
            req.limits = Some(limits);
            let err = refused(&config, req);
            assert_eq!(err.code, "limit_too_high", "{err:?}");
            assert_eq!(err.status, 403);
        }
        let mut req = request(&root);
        req.limits = Some(RequestLimits {
            memory: Some("lots".into()),
            ..Default::default()
        });
        let err = refused(&config, req);
        assert_eq!(err.code, "bad_request");
        assert!(err.message.starts_with("limits.memory"), "{err:?}");

        let mut req = request(&root);
        req.command = Vec::new();
        assert_eq!(refused(&config, req).code, "bad_request");
        let mut req = request(&root);
        req.stdin = Some("a".into());
        req.stdin_b64 = Some("YQ==".into());
        assert_eq!(refused(&config, req).code, "bad_request");
        let mut req = request(&root);
        req.env.insert("A=B".into(), "1".into());
        assert_eq!(refused(&config, req).code, "bad_request");
    }

    #[test]
    fn a_project_around_or_inside_the_daemons_files_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let state = root.join("state");
        std::fs::create_dir_all(state.join("spool")).unwrap();
        let mut config = config_for(&root, "");
        config.guarded = vec![state.clone()];
        for project in [root.clone(), state.clone(), state.join("spool")] {
            let err = refused(&config, request(&project));
            assert_eq!(err.code, "project_not_allowed", "{}", project.display());
        }
        std::fs::create_dir(root.join("job")).unwrap();
        assert!(resolve(
            &config,
            &config.rules[0],
            caller(),
            request(&root.join("job"))
        )
        .is_ok());
    }

    #[test]
    fn someone_elses_project_is_refused_unless_any_owner() {
        let dir = tempfile::tempdir().unwrap();
        let config = config_for(dir.path(), "");
        let stranger = Caller {
            uid: caller().uid + 1,
            gid: 0,
            pid: 1,
        };
        let err = resolve(&config, &config.rules[0], stranger, request(dir.path())).unwrap_err();
        assert_eq!(err.code, "project_not_allowed");
        assert!(err.message.contains("belongs to uid"), "{err:?}");
        let config = config_for(dir.path(), "any_owner = true");
        assert!(resolve(&config, &config.rules[0], stranger, request(dir.path())).is_ok());
    }

    #[test]
    fn a_profile_from_profiles_dir_by_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let profiles = dir.path().join("profiles");
        std::fs::create_dir(&profiles).unwrap();
        std::fs::write(
            profiles.join("ci.toml"),
            "version = 1\nextends = \"strict\"\n",
        )
        .unwrap();
        let text = format!(
            "[daemon]\nprofiles_dir = {:?}\n[[allow]]\nuids = [{}]\nprofiles = [\"ci\", \"gone\"]\n",
            profiles.display().to_string(),
            caller().uid
        );
        let config = Config::parse(&text, Path::new("test.toml")).unwrap();
        let mut req = request(dir.path());
        req.profile = Some("ci".into());
        let resolved = resolve(&config, &config.rules[0], caller(), req).unwrap();
        assert_eq!(resolved.profile, "ci");
        let mut req = request(dir.path());
        req.profile = Some("gone".into());
        assert_eq!(refused(&config, req).code, "bad_request");
    }
    #[test]
    fn a_requested_allowlist_stays_within_the_profiles_own() {
        let dir = tempfile::tempdir().unwrap();
        let config = config_for(dir.path(), "networks = [\"allowlist\"]");
        let rule = &config.rules[0];
        let mut policy = sandbox::profile::load("strict").unwrap();
        policy.network =
            sandbox::profile::policy::NetworkPolicy::from_spec("allow:registry.npmjs.org").unwrap();
        let apply_network = |policy: &mut Policy, requested| {
            let network = network_within(rule, policy, requested)?;
            Overrides {
                network,
                ..Overrides::default()
            }
            .apply(policy)
            .map_err(|err| ApiError::internal(err.to_string()))
        };
        let mut narrowed = policy.clone();
        apply_network(&mut narrowed, Some("allow:registry.npmjs.org:443")).unwrap();
        assert_eq!(narrowed.network.allow, ["registry.npmjs.org:443"]);
        let mut widened = policy.clone();
        let err = apply_network(&mut widened, Some("allow:*")).unwrap_err();
        assert_eq!(err.code, "network_not_allowed", "{err:?}");
        // A profile without a list: the rule's "allowlist" lets the caller name hosts.
        let mut open = sandbox::profile::load("strict").unwrap();
        apply_network(&mut open, Some("allow:api.example.com")).unwrap();
        assert_eq!(open.network.allow, ["api.example.com"]);
    }
}

/// What a caller's skill server is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillServer {
    /// The project the skills run in.
    pub project: PathBuf,
    /// The ceiling profile as `sandbox serve --profile` takes it: a
    /// built-in name, or the absolute path of a file in `profiles_dir`.
    pub profile: String,
}

/// Resolve where a caller's skills run: the project and the profile go
/// through the same checks as a run's, and the profile, which is the most
/// any skill gets, must lie within the rule (network and limits), since a
/// skill has no request of its own to narrow it.
pub fn resolve_skills(
    config: &Config,
    rule: &Rule,
    caller: Caller,
    project: &Path,
    profile: Option<&str>,
) -> Result<SkillServer, ApiError> {
    let name = profile.unwrap_or(DEFAULT_PROFILE);
    let policy = load_profile(config, rule, name)?;
    let project = check_project(rule, caller, project)?;
    check_guarded(config, &project)?;
    network_within(rule, &policy, None)?;
    let limits = &policy.limits;
    let most = &rule.limits;
    let over = |field: &str,
                asked: Option<String>,
                ceiling: Option<String>|
     -> Result<(), ApiError> {
        let (Some(most), asked) = (ceiling, asked.unwrap_or_else(|| "unlimited".into())) else {
            return Ok(());
        };
        Err(ApiError::forbidden(
            "limit_too_high",
            format!(
                "profile {name:?}: its [limits] {field} ({asked}) is above your most, {most} (rule {}); a skill runs under its profile's limits",
                rule.name()
            ),
            format!(
                "name a profile whose limits lie within your rule, or ask the daemon's administrator to raise {}.limits.{field}",
                rule.name()
            ),
        ))
    };
    let size = sandbox::profile::size::format_size;
    if most
        .memory
        .is_some_and(|m| limits.memory.is_none_or(|l| l > m))
    {
        over("memory", limits.memory.map(size), most.memory.map(size))?;
    }
    if most.pids.is_some_and(|m| limits.pids.is_none_or(|l| l > m)) {
        over(
            "pids",
            limits.pids.map(|p| p.to_string()),
            most.pids.map(|p| p.to_string()),
        )?;
    }
    if most.cpu.is_some_and(|m| limits.cpu.is_none_or(|l| l > m)) {
        over(
            "cpus",
            limits.cpu.map(|c| c.to_string()),
            most.cpu.map(|c| c.to_string()),
        )?;
    }
    let duration = sandbox::profile::format_duration;
    if most
        .timeout
        .is_some_and(|m| limits.timeout.is_none_or(|l| l > m))
    {
        over(
            "timeout",
            limits.timeout.map(duration),
            most.timeout.map(duration),
        )?;
    }
    let profile = if sandbox::profile::builtin_names().contains(&name) {
        name.to_string()
    } else {
        match &config.profiles_dir {
            Some(dir) => dir
                .join(format!("{name}.toml"))
                .to_string_lossy()
                .into_owned(),
            None => name.to_string(),
        }
    };
    Ok(SkillServer { project, profile })
}
