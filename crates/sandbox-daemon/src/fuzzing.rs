//! Entry points for the coverage-guided fuzz targets in `fuzz/` that read
//! this face's untrusted input (see the core's `sandbox::fuzzing`). Not a
//! stable API: hidden from the documentation, shaped by the targets.

use std::path::Path;
use std::sync::OnceLock;

/// The daemon API's request bodies and query strings; a body that decodes
/// as `POST /v1/runs` is resolved against a rule for projects under /tmp.
pub fn daemon_request(bytes: &[u8]) {
    use crate::config::Config;
    use crate::resolve::{resolve, Caller, SubmitRequest};
    static CONFIG: OnceLock<Config> = OnceLock::new();
    crate::api::fuzzing::bodies(bytes);
    let Ok(request) = serde_json::from_slice::<SubmitRequest>(bytes) else {
        return;
    };
    let caller = Caller {
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
        pid: 1,
    };
    let config = CONFIG.get_or_init(|| {
        let text = format!(
            "[daemon]\nmax_output = \"8MiB\"\n\
             [[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\nany_owner = true\n\
             grants = [\"fs.read\", \"fs.write:dist/**\", \"net.http:example.com\"]\n\
             networks = [\"none\", \"allowlist\"]\n\
             [allow.limits]\nmemory = \"1GiB\"\ntimeout = \"10m\"\npids = 100\n",
            caller.uid
        );
        Config::parse(&text, Path::new("/nonexistent-sandbox-fuzz/daemon.toml"))
            .unwrap_or_else(|err| panic!("the daemon target's config does not parse: {err}"))
    });
    let Ok(resolved) = resolve(config, &config.rules[0], caller, request) else {
        return;
    };
    // Whatever was asked, the run stays inside the rule.
    let spec = &resolved.spec;
    let limits = &spec.policy.limits;
    assert!(limits.memory.is_some_and(|m| m <= 1 << 30), "{limits:?}");
    assert!(limits.pids.is_some_and(|p| p <= 100), "{limits:?}");
    assert!(
        limits
            .timeout
            .is_some_and(|t| t <= std::time::Duration::from_secs(600)),
        "{limits:?}"
    );
    assert!(spec.project.starts_with("/tmp"), "{:?}", spec.project);
    if let Some(cwd) = &spec.cwd {
        assert!(cwd.starts_with(&spec.project), "{cwd:?}");
    }
    assert!(spec.policy.env.pass.is_empty());
}

#[cfg(test)]
mod tests {
    //! The checked-in corpus (fuzz/corpus/TARGET) replays under `cargo test`.
    #[test]
    fn daemon_request() {
        sandbox::fuzzing::replay("daemon_request", super::daemon_request);
    }
}
