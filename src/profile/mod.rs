//! Profiles: TOML files (built in and user-written) parsed into a [`policy::Policy`].
pub mod policy;

/// Temporary stand-in until the profile loader merges.
pub fn load(_spec: &str) -> Result<policy::Policy, std::io::Error> {
    use policy::*;
    use std::path::PathBuf;
    let p = |s: &str| PathBuf::from(s);
    Ok(Policy {
        name: "strict".into(),
        filesystem: FilesystemPolicy {
            project: ProjectAccess::ReadWrite,
            read: vec![p("/usr")],
            read_if_exists: [
                "/bin",
                "/sbin",
                "/lib",
                "/lib64",
                "/etc/ld.so.cache",
                "/etc/alternatives",
                "/etc/passwd",
                "/etc/group",
                "/etc/ssl/certs",
            ]
            .iter()
            .map(|s| p(s))
            .collect(),
            write: vec![],
            hide: vec![p(".git/hooks"), p(".env")],
            tmp_size: 128 << 20,
        },
        network: NetworkPolicy {
            mode: NetworkMode::None,
        },
        limits: Limits {
            memory: None,
            pids: None,
            cpu: None,
            timeout: None,
            output: None,
            nofile: Some(1024),
        },
        syscalls: SyscallPolicy {
            mode: SyscallMode::Allowlist,
            allow: vec![],
            deny: vec![],
        },
        env: EnvPolicy {
            pass: vec!["TERM".into()],
            set: [
                (
                    "PATH".to_string(),
                    "/usr/local/bin:/usr/bin:/bin".to_string(),
                ),
                ("HOME".to_string(), "/tmp".to_string()),
            ]
            .into_iter()
            .collect(),
        },
        broker: BrokerPolicy {
            default: Decision::Deny,
            rules: Default::default(),
        },
        enforce: EnforcePolicy {
            userns: Enforcement::Required,
            landlock: Enforcement::Required,
            seccomp: Enforcement::Required,
            cgroups: Enforcement::BestEffort,
        },
    })
}
