//! The built-in profiles, embedded in the binary so `--profile strict` works
//! without any file on the host.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::policy::{
    BrokerPolicy, Decision, EnforcePolicy, Enforcement, EnvPolicy, FilesystemPolicy, Limits,
    NetworkMode, NetworkPolicy, Policy, ProjectAccess, SyscallMode, SyscallPolicy,
};

/// Name, one-line description and TOML text of each built-in, strictest first.
const BUILTINS: &[(&str, &str, &str)] = &[
    (
        "strict",
        "Default for untrusted code: no network beyond its own loopback, minimal read-only system view, syscall allowlist, every layer required",
        include_str!("../../../../profiles/strict.toml"),
    ),
    (
        "standard",
        "Builds and tests of code you review: loopback network, /etc readable except its secrets, syscall denylist",
        include_str!("../../../../profiles/standard.toml"),
    ),
    (
        "permissive",
        "Code you mostly trust: host network, large limits, Landlock and seccomp best-effort",
        include_str!("../../../../profiles/permissive.toml"),
    ),
];

const NAMES: &[&str] = &["strict", "standard", "permissive"];

/// The built-in profile names, strictest first.
pub fn names() -> &'static [&'static str] {
    NAMES
}

/// The TOML text of a built-in profile.
pub fn source(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|b| b.0 == name).map(|b| b.2)
}

/// A one-line description of a built-in profile.
pub fn description(name: &str) -> Option<&'static str> {
    BUILTINS.iter().find(|b| b.0 == name).map(|b| b.1)
}

/// "strict, standard, permissive", for error messages.
pub(crate) fn choices() -> String {
    NAMES.join(", ")
}

fn paths(list: &[&str]) -> Vec<PathBuf> {
    list.iter().map(PathBuf::from).collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The values a profile gets for everything it (and its parents) leave unset:
/// exactly `strict`'s, so that forgetting a table never weakens a profile.
/// A unit test keeps this equal to `profiles/strict.toml`.
pub(crate) fn defaults() -> Policy {
    let set = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
    ];
    let rules = [
        ("fs.read", Decision::Allow),
        ("fs.list", Decision::Allow),
        ("fs.stat", Decision::Allow),
        ("fs.write", Decision::Ask),
        ("fs.mkdir", Decision::Ask),
        ("fs.delete", Decision::Ask),
        ("terminal.run", Decision::Ask),
        ("net.http", Decision::Ask),
        ("secrets.get", Decision::Ask),
        ("log", Decision::Allow),
        ("permission.query", Decision::Allow),
    ];
    Policy {
        name: "strict".to_owned(),
        filesystem: FilesystemPolicy {
            project: ProjectAccess::ReadWrite,
            read: paths(&["/usr"]),
            read_if_exists: paths(&[
                "/bin",
                "/sbin",
                "/lib",
                "/lib32",
                "/lib64",
                "/libx32",
                "/etc/ld.so.cache",
                "/etc/ld.so.conf",
                "/etc/ld.so.conf.d",
                "/etc/alternatives",
                "/etc/nsswitch.conf",
                "/etc/hosts",
                "/etc/services",
                "/etc/protocols",
                "/etc/localtime",
                "/etc/timezone",
                "/etc/locale.alias",
                "/etc/os-release",
                "/etc/bash.bashrc",
                "/etc/inputrc",
                "/etc/manpath.config",
                "/etc/ssl/certs",
                "/etc/ca-certificates",
                "/etc/mime.types",
                "/etc/gitconfig",
                "/etc/python3",
                "/etc/python3.11",
            ]),
            write: Vec::new(),
            hide: Vec::new(),
            secrets: strings(&[
                ".env",
                ".env.*",
                "!.env.example",
                "!.env.sample",
                ".aws/",
                ".ssh/",
                ".netrc",
                ".npmrc",
                ".pypirc",
                ".git-credentials",
                "*.pem",
                "*.key",
                "!cacert.pem",
                "!ca-bundle.pem",
            ]),
            protect: strings(&[
                ".git/**/hooks",
                ".git/**/config",
                ".git/**/commondir",
                ".git/**/config.worktree",
                ".gitmodules",
                // Hook managers whose files a repository carries: git runs
                // what they name once the manager is installed.
                ".husky/",
                ".pre-commit-config.yaml",
                "lefthook.yml",
                ".lefthook.yml",
                ".githooks/",
                ".vscode/",
                ".idea/",
                ".envrc",
                ".mcp.json",
                ".claude/",
                ".cursor/",
                ".codex/",
                ".gemini/",
                ".qwen/",
                ".continue/",
                ".zed/",
                ".roo/",
                ".roomodes",
                ".kiro/",
                ".amazonq/",
                ".opencode/",
                "opencode.json",
                "opencode.jsonc",
                "crush.json",
                ".crush.json",
                ".aider.conf.yml",
                ".aider.model.settings.yml",
                ".aider.model.metadata.json",
                ".devcontainer/",
                ".devcontainer.json",
                ".sandbox/",
                ".skills/",
                ".bashrc",
                ".bash_profile",
                ".bash_login",
                ".bash_logout",
                ".profile",
                ".zshrc",
                ".zshenv",
                ".zprofile",
                ".zlogin",
                ".zlogout",
                ".cshrc",
                ".tcshrc",
                ".kshrc",
            ]),
            hardlinks: crate::project::HardlinkPolicy::ReadOnly,
            tmp_size: 128 << 20,
            review: false,
            review_size: crate::review::DEFAULT_LAYER_SIZE,
        },
        network: NetworkPolicy::of_mode(NetworkMode::Loopback),
        limits: Limits {
            memory: Some(1 << 30),
            pids: Some(512),
            cpu: None,
            timeout: Some(Duration::from_secs(600)),
            output: Some(16 << 20),
            nofile: Some(1024),
        },
        syscalls: SyscallPolicy {
            mode: SyscallMode::Allowlist,
            allow: Vec::new(),
            deny: Vec::new(),
        },
        env: EnvPolicy {
            pass: strings(&["LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ"]),
            set: set
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            git_identity: false,
        },
        broker: BrokerPolicy {
            default: Decision::Deny,
            rules: rules.iter().map(|(k, d)| ((*k).to_owned(), *d)).collect(),
        },
        enforce: EnforcePolicy {
            userns: Enforcement::Required,
            landlock: Enforcement::Required,
            seccomp: Enforcement::Required,
            cgroups: Enforcement::BestEffort,
        },
        tools: Vec::new(),
    }
}
