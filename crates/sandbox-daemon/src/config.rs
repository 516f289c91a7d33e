//! The daemon's configuration file (`docs/src/daemon.md`, "Configuration"):
//! where it listens, how much it takes on, and one rule per group of
//! callers saying what they may ask for.
//!
//! Every value is checked when the file is read, so a typo stops the
//! daemon at start with the key and the file named, instead of surfacing as
//! a refused run hours later.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use sandbox::action::Permission;
use sandbox::profile::policy::NetworkMode;
use sandbox::profile::size;

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read the daemon configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or has an unknown or mistyped key.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (it names the key and line).
        message: String,
    },
    /// A key has a value that cannot be used.
    #[error("{path}: {key}: {message}")]
    Value {
        /// The file.
        path: PathBuf,
        /// The key, as `daemon.max_output` or `allow[2].limits.memory`.
        key: String,
        /// What is wrong and what is expected.
        message: String,
    },
}

/// The most a rule lets a run ask for; `None`: the profile's own value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleLimits {
    /// Memory in bytes.
    pub memory: Option<u64>,
    /// Tasks.
    pub pids: Option<u64>,
    /// CPU share in cores.
    pub cpu: Option<f64>,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Output cap in bytes.
    pub output: Option<u64>,
}

/// What callers matching one `[[allow]]` table may do.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Position in the file (for messages): `allow[N]`.
    pub index: usize,
    /// Matching uids (users resolved at load).
    pub uids: Vec<u32>,
    /// Matching gids (groups resolved at load).
    pub gids: Vec<u32>,
    /// Profile names the caller may use.
    pub profiles: Vec<String>,
    /// Roots a project must lie below.
    pub projects: Vec<PathBuf>,
    /// Projects owned by another uid are allowed too.
    pub any_owner: bool,
    /// The most a run may pre-approve.
    pub grants: Vec<Permission>,
    /// Network modes the caller may use.
    pub networks: Vec<NetworkMode>,
    /// Runs of one caller at once; `None`: only the daemon's bound.
    pub max_concurrent: Option<usize>,
    /// The caller sees and acts on every caller's runs.
    pub see_all: bool,
    /// Ceilings of the run's limits.
    pub limits: RuleLimits,
}

impl Rule {
    /// The rule's name in messages.
    pub fn name(&self) -> String {
        format!("allow[{}]", self.index)
    }

    /// Whether a caller with this uid and these groups matches.
    pub fn matches(&self, uid: u32, groups: &[u32]) -> bool {
        self.uids.contains(&uid) || groups.iter().any(|gid| self.gids.contains(gid))
    }
}

/// The daemon's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from (`None`: the built-in default).
    pub origin: Option<PathBuf>,
    /// Socket path from the file.
    pub socket: Option<PathBuf>,
    /// Permission bits of the socket.
    pub socket_mode: u32,
    /// Group of the socket (name and gid).
    pub socket_group: Option<(String, u32)>,
    /// Database and spool directory from the file.
    pub state_dir: Option<PathBuf>,
    /// Where profiles callers may name live.
    pub profiles_dir: Option<PathBuf>,
    /// Skill directories served through `/v1/skills` (besides a project's own).
    pub skills_dirs: Vec<PathBuf>,
    /// Runs at once.
    pub max_concurrent: usize,
    /// Runs waiting.
    pub max_queue: usize,
    /// Spool cap per run.
    pub max_output: u64,
    /// How long an ask waits.
    pub ask_deadline: Duration,
    /// SIGTERM to kill on cancel.
    pub cancel_grace: Duration,
    /// Finished runs kept.
    pub keep_runs: u64,
    /// Age past which finished runs are pruned.
    pub keep_for: Duration,
    /// Rules, in file order.
    pub rules: Vec<Rule>,
    /// The daemon's own files (state directory, socket): no project may
    /// contain them or lie inside them. Set at start, not read from the file.
    pub guarded: Vec<PathBuf>,
    /// Warm sandboxes (`[pool]`).
    pub pool: PoolConfig,
}

/// `[pool]`: warm sandboxes (see `docs/src/launcher.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// Keep a warm sandbox per key of recent runs.
    pub enabled: bool,
    /// A warm sandbox unused this long is discarded.
    pub idle: Duration,
    /// Projects with more directories and files than this are never
    /// pooled (one inotify watch each, from the caller's
    /// `max_user_watches`).
    pub budget: usize,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            enabled: false,
            idle: Duration::from_secs(60),
            budget: 10_000,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPool {
    enabled: Option<bool>,
    idle: Option<String>,
    budget: Option<usize>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    allow: Vec<RawRule>,
    #[serde(default)]
    pool: RawPool,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    socket: Option<PathBuf>,
    socket_mode: Option<String>,
    socket_group: Option<String>,
    state_dir: Option<PathBuf>,
    profiles_dir: Option<PathBuf>,
    #[serde(default)]
    skills_dirs: Vec<PathBuf>,
    max_concurrent: Option<usize>,
    max_queue: Option<usize>,
    max_output: Option<String>,
    ask_deadline: Option<String>,
    cancel_grace: Option<String>,
    keep_runs: Option<u64>,
    keep_for: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(default)]
    uids: Vec<u32>,
    #[serde(default)]
    gids: Vec<u32>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    profiles: Option<Vec<String>>,
    projects: Option<Vec<PathBuf>>,
    #[serde(default)]
    any_owner: bool,
    #[serde(default)]
    grants: Vec<String>,
    networks: Option<Vec<String>>,
    max_concurrent: Option<usize>,
    #[serde(default)]
    see_all: bool,
    limits: Option<RawLimits>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    memory: Option<String>,
    pids: Option<u64>,
    cpus: Option<f64>,
    timeout: Option<String>,
    output: Option<String>,
}

/// Default `max_queue`.
pub const DEFAULT_MAX_QUEUE: usize = 64;
/// Default `max_output`.
pub const DEFAULT_MAX_OUTPUT: u64 = 64 << 20;
/// Networks a rule allows when it names none.
const DEFAULT_NETWORKS: [NetworkMode; 2] = [NetworkMode::None, NetworkMode::Loopback];

/// Default `max_concurrent`: twice the cores, since most runs wait on I/O
/// or on their own children as much as they compute.
pub fn default_max_concurrent() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()) * 2
}

impl Config {
    /// The configuration used without a file: the daemon's own uid only,
    /// every built-in profile, projects it owns anywhere, no grants, `none`
    /// and `loopback`, the profiles' own limits.
    pub fn default_for(uid: u32) -> Config {
        let mut config = Config::base(None);
        config.rules.push(Rule {
            index: 0,
            uids: vec![uid],
            gids: Vec::new(),
            profiles: builtin_profiles(),
            projects: vec![PathBuf::from("/")],
            any_owner: false,
            grants: Vec::new(),
            networks: DEFAULT_NETWORKS.to_vec(),
            max_concurrent: None,
            see_all: false,
            limits: RuleLimits::default(),
        });
        config
    }

    /// Read and check a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Check configuration text; `path` names it in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawFile = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            message: err.to_string().trim_end().to_string(),
        })?;
        Config::from_raw(raw, Some(path))
    }

    fn from_raw(raw: RawFile, origin: Option<&Path>) -> Result<Config, ConfigError> {
        let file = origin.map_or_else(|| PathBuf::from("(built-in)"), Path::to_path_buf);
        let bad = |key: &str, message: String| ConfigError::Value {
            path: file.clone(),
            key: key.to_string(),
            message,
        };
        let d = raw.daemon;
        let socket_mode = match &d.socket_mode {
            None => 0o600,
            Some(text) => parse_mode(text).map_err(|m| bad("daemon.socket_mode", m))?,
        };
        let socket_group = match &d.socket_group {
            None => None,
            Some(name) => Some((
                name.clone(),
                lookup_group(name).map_err(|m| bad("daemon.socket_group", m))?,
            )),
        };
        for (key, dir) in [
            ("daemon.socket", &d.socket),
            ("daemon.state_dir", &d.state_dir),
            ("daemon.profiles_dir", &d.profiles_dir),
        ] {
            if let Some(dir) = dir {
                if !dir.is_absolute() {
                    return Err(bad(
                        key,
                        format!("{} is relative; give an absolute path", dir.display()),
                    ));
                }
            }
        }
        if let Some(dir) = d.skills_dirs.iter().find(|dir| !dir.is_absolute()) {
            return Err(bad(
                "daemon.skills_dirs",
                format!("{} is relative; give absolute paths", dir.display()),
            ));
        }
        let positive = |key: &str, value: Option<usize>, default: usize| match value {
            Some(0) => Err(bad(key, "must be at least 1".into())),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let duration = |key: &str, value: &Option<String>, default: Duration| match value {
            None => Ok(default),
            Some(text) => size::parse_duration(text).map_err(|m| bad(key, m)),
        };
        let base = Config::base(origin);
        let mut config = Config {
            socket: d.socket.clone(),
            socket_mode,
            socket_group,
            state_dir: d.state_dir.clone(),
            profiles_dir: d.profiles_dir.clone(),
            skills_dirs: d.skills_dirs.clone(),
            max_concurrent: positive(
                "daemon.max_concurrent",
                d.max_concurrent,
                base.max_concurrent,
            )?,
            max_queue: positive("daemon.max_queue", d.max_queue, base.max_queue)?,
            max_output: match &d.max_output {
                None => base.max_output,
                Some(text) => size::output_flag(text).map_err(|m| bad("daemon.max_output", m))?,
            },
            ask_deadline: duration("daemon.ask_deadline", &d.ask_deadline, base.ask_deadline)?,
            cancel_grace: duration("daemon.cancel_grace", &d.cancel_grace, base.cancel_grace)?,
            keep_runs: d.keep_runs.unwrap_or(base.keep_runs),
            keep_for: duration("daemon.keep_for", &d.keep_for, base.keep_for)?,
            pool: PoolConfig {
                enabled: raw.pool.enabled.unwrap_or(base.pool.enabled),
                idle: duration("pool.idle", &raw.pool.idle, base.pool.idle)?,
                budget: positive("pool.budget", raw.pool.budget, base.pool.budget)?,
            },
            ..base
        };
        for (index, rule) in raw.allow.into_iter().enumerate() {
            config.rules.push(rule_from_raw(rule, index, &file)?);
        }
        Ok(config)
    }

    /// The first rule that names `uid`, or one of its groups, which
    /// `groups` gives (for a connected caller, NSS: the password and
    /// group databases, at every request so that a membership taken away
    /// counts at once). `groups` is called only when a rule that names
    /// groups comes before the first one naming the uid, and at most once.
    pub fn rule_for(&self, uid: u32, groups: impl FnOnce() -> Vec<u32>) -> Option<&Rule> {
        let mut groups = Some(groups);
        let mut known: Option<Vec<u32>> = None;
        self.rules.iter().find(|rule| {
            if rule.uids.contains(&uid) {
                return true;
            }
            if rule.gids.is_empty() {
                return false;
            }
            let groups = known.get_or_insert_with(|| groups.take().map_or_else(Vec::new, |f| f()));
            rule.matches(uid, groups)
        })
    }
}

impl Config {
    /// Every documented default, no rules.
    fn base(origin: Option<&Path>) -> Config {
        Config {
            origin: origin.map(Path::to_path_buf),
            socket: None,
            socket_mode: 0o600,
            socket_group: None,
            state_dir: None,
            profiles_dir: None,
            skills_dirs: Vec::new(),
            max_concurrent: default_max_concurrent(),
            max_queue: DEFAULT_MAX_QUEUE,
            max_output: DEFAULT_MAX_OUTPUT,
            ask_deadline: Duration::from_secs(300),
            cancel_grace: Duration::from_secs(2),
            keep_runs: 1000,
            keep_for: Duration::from_secs(7 * 86_400),
            rules: Vec::new(),
            guarded: Vec::new(),
            pool: PoolConfig::default(),
        }
    }
}

fn builtin_profiles() -> Vec<String> {
    sandbox::profile::builtin_names()
        .iter()
        .map(|name| name.to_string())
        .collect()
}

fn rule_from_raw(raw: RawRule, index: usize, file: &Path) -> Result<Rule, ConfigError> {
    let bad = |key: &str, message: String| ConfigError::Value {
        path: file.to_owned(),
        key: format!("allow[{index}].{key}"),
        message,
    };
    if raw.uids.is_empty() && raw.gids.is_empty() && raw.users.is_empty() && raw.groups.is_empty() {
        return Err(bad(
            "uids",
            "the rule matches nobody; name uids, gids, users or groups".into(),
        ));
    }
    let mut uids = raw.uids;
    for name in &raw.users {
        uids.push(lookup_user(name).map_err(|m| bad("users", m))?);
    }
    let mut gids = raw.gids;
    for name in &raw.groups {
        gids.push(lookup_group(name).map_err(|m| bad("groups", m))?);
    }
    let profiles = raw.profiles.unwrap_or_else(builtin_profiles);
    for name in &profiles {
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(bad(
                "profiles",
                format!("{name:?} is not a profile name (a name, never a path: put the file in daemon.profiles_dir)"),
            ));
        }
    }
    let mut projects = raw.projects.unwrap_or_else(|| vec![PathBuf::from("/")]);
    for root in &mut projects {
        if !root.is_absolute() {
            return Err(bad(
                "projects",
                format!("{} is relative; give an absolute path", root.display()),
            ));
        }
        // Requested projects are compared after canonicalization, so a
        // root is too (a /home that is a symlink would refuse every run).
        if let Ok(resolved) = std::fs::canonicalize(&*root) {
            *root = resolved;
        }
    }
    let mut grants = Vec::new();
    for grant in &raw.grants {
        grants.push(
            grant
                .parse::<Permission>()
                .map_err(|err| bad("grants", err.to_string()))?,
        );
    }
    let networks = match raw.networks {
        None => DEFAULT_NETWORKS.to_vec(),
        Some(names) => names
            .iter()
            .map(|name| {
                NetworkMode::from_name(name).ok_or_else(|| {
                    bad(
                        "networks",
                        format!("{name:?} is not a network mode (none, loopback, allowlist, host)"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if raw.max_concurrent == Some(0) {
        return Err(bad("max_concurrent", "must be at least 1".into()));
    }
    let limits = match raw.limits {
        None => RuleLimits::default(),
        Some(l) => RuleLimits {
            memory: l
                .memory
                .as_deref()
                .map(size::memory_flag)
                .transpose()
                .map_err(|m| bad("limits.memory", m))?,
            pids: l
                .pids
                .map(size::check_pids)
                .transpose()
                .map_err(|m| bad("limits.pids", m))?,
            cpu: l
                .cpus
                .map(size::check_cpu)
                .transpose()
                .map_err(|m| bad("limits.cpus", m))?,
            timeout: l
                .timeout
                .as_deref()
                .map(size::timeout_flag)
                .transpose()
                .map_err(|m| bad("limits.timeout", m))?,
            output: l
                .output
                .as_deref()
                .map(size::output_flag)
                .transpose()
                .map_err(|m| bad("limits.output", m))?,
        },
    };
    Ok(Rule {
        index,
        uids,
        gids,
        profiles,
        projects,
        any_owner: raw.any_owner,
        grants,
        networks,
        max_concurrent: raw.max_concurrent,
        see_all: raw.see_all,
        limits,
    })
}

fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 && !digits.is_empty() => Ok(mode),
        _ => Err(format!(
            "{text:?} is not a permission mode; write octal digits such as \"0600\" or \"0660\""
        )),
    }
}

fn lookup_user(name: &str) -> Result<u32, String> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        Ok(None) => Err(format!("no user named {name:?} on this host")),
        Err(err) => Err(format!("looking up user {name:?}: {}", err.desc())),
    }
}

fn lookup_group(name: &str) -> Result<u32, String> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(format!("no group named {name:?} on this host")),
        Err(err) => Err(format!("looking up group {name:?}: {}", err.desc())),
    }
}

/// The groups of a caller: its primary gid and, when its uid has a user
/// entry, every group the user is a member of (`SO_PEERCRED` carries only
/// the primary one).
pub fn caller_groups(uid: u32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        if let Ok(name) = std::ffi::CString::new(user.name) {
            if let Ok(list) = nix::unistd::getgrouplist(&name, nix::unistd::Gid::from_raw(gid)) {
                groups.extend(list.into_iter().map(|g| g.as_raw()));
            }
        }
    }
    groups.sort_unstable();
    groups.dedup();
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/sandbox/daemon.toml"))
    }

    #[test]
    fn the_documented_example_parses() {
        let config = parse(
            r#"
[daemon]
socket_mode = "0660"
state_dir = "/var/lib/sandbox"
profiles_dir = "/etc/sandbox/profiles"
max_concurrent = 4
max_queue = 64
max_output = "64MiB"
ask_deadline = "5m"
cancel_grace = "2s"
keep_runs = 1000
keep_for = "7d"

[[allow]]
uids = [1000]
profiles = ["strict", "standard"]
projects = ["/home/alice", "/srv/ci"]
any_owner = false
grants = ["fs.read", "net.http"]
networks = ["none", "loopback"]
max_concurrent = 2
see_all = false
[allow.limits]
memory = "2GiB"
pids = 1024
cpus = 2.0
timeout = "1h"
output = "16MiB"
"#,
        )
        .unwrap();
        assert_eq!(config.socket_mode, 0o660);
        assert_eq!(config.max_concurrent, 4);
        assert_eq!(config.cancel_grace, Duration::from_secs(2));
        let rule = &config.rules[0];
        assert_eq!(rule.uids, vec![1000]);
        assert_eq!(rule.limits.memory, Some(2 << 30));
        assert_eq!(rule.limits.timeout, Some(Duration::from_secs(3600)));
        assert_eq!(rule.limits.output, Some(16 << 20));
        assert_eq!(rule.max_concurrent, Some(2));
        assert!(rule.matches(1000, &[]));
        assert!(!rule.matches(1001, &[1000]));
    }

    #[test]
    fn defaults_follow_the_documentation() {
        let config = parse("").unwrap();
        assert_eq!(config.socket_mode, 0o600);
        assert_eq!(config.max_concurrent, default_max_concurrent());
        assert_eq!(config.max_queue, DEFAULT_MAX_QUEUE);
        assert_eq!(config.ask_deadline, Duration::from_secs(300));
        assert_eq!(config.keep_runs, 1000);
        assert!(
            config.rules.is_empty(),
            "a file without rules allows nobody"
        );
        let own = Config::default_for(4242);
        let rule = own.rule_for(4242, Vec::new).unwrap();
        assert_eq!(rule.profiles, builtin_profiles());
        assert_eq!(rule.networks, DEFAULT_NETWORKS.to_vec());
        assert!(rule.grants.is_empty());
        assert!(!rule.any_owner);
        assert!(own.rule_for(4243, || vec![4242]).is_none());
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse("[daemon]\nmax_concurent = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_concurent"), "{err}");
        assert!(err.contains("/etc/sandbox/daemon.toml"), "{err}");
        let err = parse("[[allow]]\nuids = [1]\nprofile = [\"strict\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("profile"), "{err}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases = [
            ("[daemon]\nmax_output = \"lots\"\n", "daemon.max_output"),
            ("[daemon]\nsocket_mode = \"rw\"\n", "daemon.socket_mode"),
            ("[daemon]\nkeep_for = \"7 weeks\"\n", "daemon.keep_for"),
            ("[daemon]\nmax_queue = 0\n", "daemon.max_queue"),
            ("[daemon]\nstate_dir = \"var\"\n", "daemon.state_dir"),
            ("[[allow]]\nprofiles = [\"strict\"]\n", "allow[0].uids"),
            (
                "[[allow]]\nuids = [1]\ngrants = [\"fs.fly\"]\n",
                "allow[0].grants",
            ),
            (
                "[[allow]]\nuids = [1]\nnetworks = [\"wifi\"]\n",
                "allow[0].networks",
            ),
            (
                "[[allow]]\nuids = [1]\nprofiles = [\"../x\"]\n",
                "allow[0].profiles",
            ),
            (
                "[[allow]]\nuids = [1]\nprojects = [\"srv\"]\n",
                "allow[0].projects",
            ),
            (
                "[[allow]]\nuids = [1]\n[allow.limits]\nmemory = \"1KiB\"\n",
                "allow[0].limits.memory",
            ),
            (
                "[[allow]]\nuids = [1]\n[allow.limits]\npids = 0\n",
                "allow[0].limits.pids",
            ),
            (
                "[[allow]]\nuids = [1]\nusers = [\"no-such-user-here\"]\n",
                "allow[0].users",
            ),
        ];
        for (text, key) in cases {
            match parse(text) {
                Err(ConfigError::Value { key: got, .. }) => assert_eq!(got, key, "{text}"),
                other => panic!("{text}: expected an error on {key}, got {other:?}"),
            }
        }
    }

    #[test]
    fn first_matching_rule_wins_and_groups_match() {
        let config =
            parse("[[allow]]\ngids = [50]\nsee_all = true\n[[allow]]\nuids = [7]\n").unwrap();
        assert_eq!(config.rule_for(7, || vec![7, 50]).unwrap().index, 0);
        assert_eq!(config.rule_for(7, || vec![7]).unwrap().index, 1);
        assert!(config.rule_for(8, || vec![8]).is_none());
        // A uid with no account: its groups are its primary gid alone.
        let config =
            parse("[[allow]]\ngids = [4000050]\nsee_all = true\n[[allow]]\nuids = [4000007]\n")
                .unwrap();
        assert_eq!(
            config
                .rule_for(4000007, || caller_groups(4000007, 4000050))
                .unwrap()
                .index,
            0
        );
        assert_eq!(
            config
                .rule_for(4000007, || caller_groups(4000007, 4000007))
                .unwrap()
                .index,
            1
        );
        assert_eq!(
            config
                .rule_for(4000008, || caller_groups(4000008, 4000050))
                .unwrap()
                .index,
            0
        );
        assert!(config
            .rule_for(4000008, || caller_groups(4000008, 4000008))
            .is_none());
    }
}
