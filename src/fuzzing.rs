//! Entry points for the coverage-guided fuzz targets in `fuzz/` (cargo-fuzz
//! and libFuzzer; `scripts/fuzz` runs them). Each takes the bytes an
//! untrusted peer controls and runs them through the same functions the
//! sandbox runs them through; anything but a panic or an abort is a pass.
//! Properties beyond "no panic" are asserted where the code promises them.
//!
//! Not a stable API: hidden from the documentation, and shaped by what the
//! targets need.

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;

use crate::profile::policy::Policy;

/// A profile's TOML text, as `--profile FILE` reads it. A profile that
/// parses prints as TOML that parses again to the same policy, as
/// [`crate::profile::to_toml`] promises.
pub fn profile(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    // No such directory: a relative `extends` names nothing.
    let origin = "/nonexistent-sandbox-fuzz/fuzz.toml";
    let Ok(policy) = crate::profile::parse(text, origin) else {
        return;
    };
    let printed = crate::profile::to_toml(&policy);
    let again = crate::profile::parse(&printed, origin).unwrap_or_else(|err| {
        panic!("to_toml printed a profile that does not parse: {err}\n{printed}")
    });
    assert_eq!(again, policy, "to_toml lost a value:\n{printed}");
}

/// A `SKILL.md`, as skill discovery reads it from a skill's directory.
pub fn skill_manifest(bytes: &[u8]) {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let _ = crate::skill::manifest::parse(Path::new("/nonexistent-sandbox-fuzz/skill"), text);
}

/// Bytes on a broker channel: split into lines by the code base's one framer (in
/// pieces whose sizes the input's first byte chooses, so that lines span
/// reads), each line parsed and its parameters decoded.
pub fn broker(bytes: &[u8]) {
    use crate::jsonl::{Frame, Framer};
    let Some((&step, stream)) = bytes.split_first() else {
        return;
    };
    // Small enough that the fuzzer reaches the over-long path too.
    const MAX: usize = 4096;
    let mut framer = Framer::new(MAX);
    let mut frames = Vec::new();
    let mut fed = 0;
    for piece in stream.chunks(usize::from(step).max(1)) {
        framer.push(piece, &mut frames);
        fed += piece.len();
        assert!(
            framer.pending() <= MAX,
            "the framer holds more than its limit"
        );
    }
    assert_eq!(fed, stream.len());
    // Every complete line comes out whole, or as its length when too long,
    // in order, whatever the pieces were.
    let complete = match stream.iter().rposition(|b| *b == b'\n') {
        Some(end) => stream[..end].split(|b| *b == b'\n').collect(),
        None => Vec::new(),
    };
    assert_eq!(frames.len(), complete.len(), "one frame per line");
    for (frame, expected) in frames.iter().zip(&complete) {
        match frame {
            Frame::Line(line) => assert_eq!(line, expected),
            Frame::TooLarge { bytes } => {
                assert!(expected.len() > MAX);
                assert_eq!(*bytes, expected.len());
            }
        }
    }
    for frame in frames {
        if let Frame::Line(line) = frame {
            crate::broker::server::fuzzing::message(&line);
        }
    }
}

/// One line as the broker's message parser gets it (no framing), so the
/// fuzzer spends its time on JSON-RPC and the parameters.
pub fn broker_message(bytes: &[u8]) {
    crate::broker::server::fuzzing::message(bytes);
}

fn builtin_policy(name: &str) -> Option<&'static Policy> {
    static POLICIES: OnceLock<Vec<(&'static str, Policy)>> = OnceLock::new();
    POLICIES
        .get_or_init(|| {
            crate::profile::builtin_names()
                .iter()
                .filter_map(|name| Some((*name, crate::profile::load(name).ok()?)))
                .collect()
        })
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, policy)| policy)
}

/// A bundle's `config.json`, as `sandbox-runc create` reads and rewrites it.
pub fn oci_config(bytes: &[u8]) {
    use crate::oci::{keys, spec};
    let Ok(mut config) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if keys::spelled_as_the_spec(&config, "config.json").is_err() {
        return;
    }
    // The runtime's settings choose among built-in profiles here.
    let requested = spec::requested_profile(&config);
    let Some(policy) = builtin_policy(requested.as_deref().unwrap_or("strict")) else {
        return;
    };
    let Ok(layers) = spec::layers(&config, policy) else {
        return;
    };
    let _ = spec::rootfs(&config, Path::new("/nonexistent-sandbox-fuzz/bundle"));
    let Ok(ids) = spec::id_maps_of(&config) else {
        return;
    };
    let _ = spec::identity(config.get("process").unwrap_or(&Value::Null), &ids);
    let _ = spec::secure_config(
        &mut config,
        policy,
        &layers,
        Path::new("/nonexistent-sandbox-fuzz/init"),
        3,
    );
}

/// `exec --process FILE`'s process, checked against a container created
/// from a plain config under the strict profile.
pub fn oci_process(bytes: &[u8]) {
    use crate::oci::{keys, spec};
    static CONTAINER: OnceLock<Result<(spec::IdMaps, spec::Layers), String>> = OnceLock::new();
    let container = CONTAINER.get_or_init(|| {
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["/bin/sh"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": {
                "namespaces": [
                    {"type": "user"}, {"type": "mount"}, {"type": "pid"}, {"type": "network"},
                    {"type": "ipc"}, {"type": "uts"}, {"type": "cgroup"}
                ],
                "uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}],
                "gidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}]
            }
        });
        let strict = builtin_policy("strict").ok_or("no built-in strict")?;
        let layers = spec::layers(&config, strict).map_err(|err| err.to_string())?;
        let ids = spec::id_maps_of(&config).map_err(|err| err.to_string())?;
        Ok((ids, layers))
    });
    let (ids, layers) = match container {
        Ok(container) => container,
        Err(err) => panic!("the container of the oci_process target does not set up: {err}"),
    };
    let Ok(mut process) = serde_json::from_slice::<Value>(bytes) else {
        return;
    };
    if keys::spelled_as_the_spec(&process, "exec's process file").is_err() {
        return;
    }
    let _ = spec::identity(&process, ids);
    let _ = spec::secure_process(&mut process, layers, 3);
}

/// A client's request head and body at the allowlist proxy.
pub fn proxy_request(bytes: &[u8]) {
    crate::net::proxy::fuzzing::request(bytes);
}

/// An upstream's response as the proxy relays it.
pub fn proxy_response(bytes: &[u8]) {
    crate::net::proxy::fuzzing::response(bytes);
}

/// A chunked body as the proxy forwards it.
pub fn proxy_chunked(bytes: &[u8]) {
    crate::net::proxy::fuzzing::chunked(bytes);
}

/// A SOCKS5 greeting and request at the proxy.
pub fn proxy_socks5(bytes: &[u8]) {
    crate::net::proxy::fuzzing::socks5(bytes);
}

/// The daemon API's request bodies and query strings; a body that decodes
/// as `POST /v1/runs` is resolved against a rule for projects under /tmp.
pub fn daemon_request(bytes: &[u8]) {
    use crate::daemon::config::Config;
    use crate::daemon::resolve::{resolve, Caller, SubmitRequest};
    static CONFIG: OnceLock<Config> = OnceLock::new();
    crate::daemon::api::fuzzing::bodies(bytes);
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
    //! Every target replays its checked-in corpus (fuzz/corpus/TARGET, the
    //! seeds and the inputs that once crashed), so `cargo test` keeps what
    //! the fuzzers found fixed without a nightly toolchain.
    use std::path::PathBuf;

    fn replay(target: &str, run: fn(&[u8])) {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/corpus")
            .join(target);
        let mut count = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            let bytes = std::fs::read(&path).expect("a corpus file reads");
            eprintln!("{target}: {}", path.display());
            run(&bytes);
            count += 1;
        }
        assert!(count > 0, "{} holds no inputs", dir.display());
    }

    #[test]
    fn profile() {
        replay("profile", super::profile);
    }
    #[test]
    fn skill_manifest() {
        replay("skill_manifest", super::skill_manifest);
    }
    #[test]
    fn broker() {
        replay("broker", super::broker);
    }
    #[test]
    fn broker_message() {
        replay("broker_message", super::broker_message);
    }
    #[test]
    fn oci_config() {
        replay("oci_config", super::oci_config);
    }
    #[test]
    fn oci_process() {
        replay("oci_process", super::oci_process);
    }
    #[test]
    fn proxy_request() {
        replay("proxy_request", super::proxy_request);
    }
    #[test]
    fn proxy_response() {
        replay("proxy_response", super::proxy_response);
    }
    #[test]
    fn proxy_chunked() {
        replay("proxy_chunked", super::proxy_chunked);
    }
    #[test]
    fn proxy_socks5() {
        replay("proxy_socks5", super::proxy_socks5);
    }
    #[test]
    fn daemon_request() {
        replay("daemon_request", super::daemon_request);
    }
}
