//! The request body of `POST /v1/runs` built from `sandbox run`'s flags:
//! a flag the API cannot carry is refused by name, never dropped.
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::Context;
use serde_json::{json, Map, Value};

use crate::run::RunArgs;
use crate::UsageError;

/// The most a request body may hold (the daemon answers `413` past it).
const MAX_BODY: usize = 1 << 20;

/// The request body of `POST /v1/runs` for these arguments, or the flag
/// that cannot be sent (exit 2). `lookup` reads this process's environment.
pub(super) fn run_request(
    args: &RunArgs,
    cwd: &Path,
    lookup: &dyn Fn(&OsStr) -> Option<OsString>,
    stdin: Option<Vec<u8>>,
) -> anyhow::Result<Value> {
    refuse_unsendable(args)?;
    let command = args
        .command
        .iter()
        .map(|arg| utf8(arg, "the command"))
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = std::fs::canonicalize(cwd).context("the current directory")?;
    let project = match &args.project {
        Some(project) => crate::run::absolute(project, "--project")?,
        None => cwd.clone(),
    };
    let mut body = Map::new();
    body.insert("command".into(), json!(command));
    body.insert("profile".into(), json!(args.profile));
    body.insert(
        "project".into(),
        json!(utf8(project.as_os_str(), "--project")?),
    );
    if cwd != project && cwd.starts_with(&project) {
        body.insert(
            "cwd".into(),
            json!(utf8(cwd.as_os_str(), "the current directory")?),
        );
    }
    body.insert("env".into(), Value::Object(environment(args, lookup)?));
    let mut limits = Map::new();
    if let Some(memory) = args.memory {
        limits.insert(
            "memory".into(),
            json!(sandbox::profile::size::format_size(memory)),
        );
    }
    if let Some(pids) = args.pids {
        limits.insert("pids".into(), json!(pids));
    }
    if let Some(cpus) = args.cpus {
        limits.insert("cpus".into(), json!(cpus));
    }
    if let Some(timeout) = args.timeout {
        limits.insert(
            "timeout".into(),
            json!(sandbox::profile::size::format_duration(timeout)),
        );
    }
    if let Some(output) = args.max_output {
        limits.insert(
            "output".into(),
            json!(sandbox::profile::size::format_size(output)),
        );
    }
    if !limits.is_empty() {
        body.insert("limits".into(), Value::Object(limits));
    }
    if let Some(net) = &args.net {
        let spec = match net.mode {
            sandbox::profile::policy::NetworkMode::Allowlist => {
                format!("allow:{}", net.allow.join(","))
            }
            mode => mode.name().to_string(),
        };
        body.insert("network".into(), json!(spec));
    }
    if !args.grants.is_empty() {
        for grant in &args.grants {
            crate::run::check_grant(grant)?;
        }
        body.insert("grants".into(), json!(args.grants));
    }
    if !args.secrets.is_empty() {
        let mut secrets = Map::new();
        for spec in &args.secrets {
            let secret = crate::run::resolve_secret(spec)?;
            let submitted = if secret.hosts.is_empty() {
                json!(secret.value)
            } else {
                json!({"value": secret.value, "hosts": secret.hosts})
            };
            secrets.insert(secret.name, submitted);
        }
        body.insert("secrets".into(), Value::Object(secrets));
    }
    if let Some(bytes) = stdin {
        match String::from_utf8(bytes) {
            Ok(text) => body.insert("stdin".into(), json!(text)),
            Err(err) => {
                use base64::Engine;
                let encoded = base64::engine::general_purpose::STANDARD.encode(err.into_bytes());
                body.insert("stdin_b64".into(), json!(encoded))
            }
        };
    }
    if args.review {
        body.insert("review".into(), json!(true));
    }
    body.insert("wait".into(), json!(false));
    let body = Value::Object(body);
    let size = serde_json::to_vec(&body)?.len();
    if size > MAX_BODY {
        return Err(UsageError(format!(
            "the run's request is {size} bytes (command, environment, secrets and stdin), over the \
             daemon's limit of {MAX_BODY}; pass large input as a file in the project instead of on stdin"
        ))
        .into());
    }
    Ok(body)
}

/// Flags the API has no field for: refused, never dropped, so a run never
/// gets less (or more) than its caller asked for.
fn refuse_unsendable(args: &RunArgs) -> Result<(), UsageError> {
    let fix = "put it in a profile in the daemon's profiles_dir, or run without --daemon";
    let mut refused = Vec::new();
    if !args.allow_read.is_empty() {
        refused.push("--allow-read");
    }
    if !args.allow_write.is_empty() {
        refused.push("--allow-write");
    }
    if !args.tools.is_empty() {
        refused.push("--tool");
    }
    if args.tmp_size.is_some() {
        refused.push("--tmp-size");
    }
    if args.attest.is_some() {
        refused.push("--attest");
    }
    if args.cgroup_parent.is_some() {
        refused.push("--cgroup-parent");
    }
    if !args.resolve.is_empty() {
        refused.push("--resolve");
    }
    if let Some(flag) = refused.first() {
        return Err(UsageError(format!(
            "{flag} cannot be sent to the daemon: its API has no such field ({fix})"
        )));
    }
    if args.non_interactive {
        return Err(UsageError(
            "--non-interactive cannot be sent to the daemon: a daemon run's questions wait for \
             `sandbox approvals answer` until the daemon's ask_deadline, then are denied \
             (pre-approve with --grant, or run without --daemon)"
                .into(),
        ));
    }
    if args.verbose {
        return Err(UsageError(
            "--verbose cannot be sent to the daemon: the setup steps happen in its supervisor \
             (the report has what was enforced: --report FILE or --json)"
                .into(),
        ));
    }
    if args.profile.contains('/') || args.profile.ends_with(".toml") {
        return Err(UsageError(format!(
            "--profile {}: the daemon takes profile names, never paths (install the file in \
             the daemon's profiles_dir and name it, or run without --daemon)",
            args.profile
        )));
    }
    Ok(())
}

/// The variables a local run would take from this environment: the
/// profile's `env.pass` (when the profile is one this client knows too),
/// then the `-e` flags.
fn environment(
    args: &RunArgs,
    lookup: &dyn Fn(&OsStr) -> Option<OsString>,
) -> anyhow::Result<Map<String, Value>> {
    let profile = sandbox::profile::load(&args.profile).ok();
    let mut env = Map::new();
    for name in profile.iter().flat_map(|p| p.env.pass.iter()) {
        if let Some(value) = lookup(OsStr::new(name)) {
            env.insert(name.clone(), json!(utf8(&value, &format!("${name}"))?));
        }
    }
    for entry in &args.env {
        let bytes = entry.as_bytes();
        match bytes.iter().position(|b| *b == b'=') {
            Some(eq) => {
                let name = utf8(OsStr::from_bytes(&bytes[..eq]), "-e")?;
                let value = utf8(OsStr::from_bytes(&bytes[eq + 1..]), &format!("-e {name}"))?;
                env.insert(name, json!(value));
            }
            None => {
                let name = utf8(entry, "-e")?;
                match lookup(entry) {
                    Some(value) => {
                        env.insert(name.clone(), json!(utf8(&value, &format!("-e {name}"))?));
                    }
                    None => {
                        env.remove(&name);
                        if profile
                            .as_ref()
                            .is_some_and(|p| p.env.set.contains_key(&name))
                        {
                            return Err(UsageError(format!(
                                "-e {name}: {name} is not set here, and a daemon run cannot \
                                 remove a variable its profile sets (set it with -e {name}=VALUE)"
                            ))
                            .into());
                        }
                    }
                }
            }
        }
    }
    Ok(env)
}

fn utf8(text: &OsStr, what: &str) -> Result<String, UsageError> {
    text.to_str().map(str::to_string).ok_or_else(|| {
        UsageError(format!(
            "{what}: {} is not UTF-8, which the daemon's JSON API cannot carry (run without --daemon)",
            text.to_string_lossy()
        ))
    })
}

/// Standard input, when it is a pipe or a file: read whole (the API takes
/// it in the request). A terminal, /dev/null or a socket sends none.
pub(super) fn read_stdin() -> anyhow::Result<Option<Vec<u8>>> {
    use nix::sys::stat::{fstat, SFlag};
    let Ok(stat) = fstat(std::io::stdin()) else {
        return Ok(None);
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFREG {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut bytes)
        .context("reading standard input")?;
    if bytes.len() > MAX_BODY {
        return Err(UsageError(format!(
            "standard input is over {} MiB, the most a daemon run takes (pass it as a file in \
             the project, or run without --daemon)",
            MAX_BODY >> 20
        ))
        .into());
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(argv: &[&str]) -> RunArgs {
        let mut full = vec!["sandbox"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full).expect("parses").run
    }

    fn request(argv: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> anyhow::Result<Value> {
        let env: Vec<(OsString, OsString)> = env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let lookup = move |name: &OsStr| {
            env.iter()
                .find(|(k, _)| k.as_os_str() == name)
                .map(|(_, v)| v.clone())
        };
        let dir = std::env::temp_dir();
        run_request(&parse(argv), &dir, &lookup, stdin.map(<[u8]>::to_vec))
    }

    fn usage_message(result: anyhow::Result<Value>) -> String {
        let err = result.expect_err("refused");
        assert!(
            err.downcast_ref::<UsageError>().is_some(),
            "a usage error (exit 2): {err:#}"
        );
        format!("{err:#}")
    }

    #[test]
    fn flags_map_onto_the_request() {
        let body = request(
            &[
                "--daemon",
                "--profile",
                "standard",
                "--memory",
                "512MiB",
                "--pids",
                "64",
                "--cpus",
                "1.5",
                "--timeout",
                "90s",
                "--max-output",
                "1536KiB",
                "--net",
                "loopback",
                "--grant",
                "fs.write",
                "-e",
                "A=1=2",
                "-e",
                "FROM_HERE",
                "-e",
                "NOT_SET",
                "--",
                "make",
                "test",
            ],
            &[("FROM_HERE", "x y")],
            Some(b"input\n"),
        )
        .unwrap();
        let project = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        assert_eq!(body["command"], json!(["make", "test"]));
        assert_eq!(body["profile"], "standard");
        assert_eq!(body["project"], project.to_str().unwrap());
        assert!(body.get("cwd").is_none(), "the project is the cwd");
        assert_eq!(body["env"]["A"], "1=2");
        assert_eq!(body["env"]["FROM_HERE"], "x y");
        assert!(body["env"].get("NOT_SET").is_none());
        assert_eq!(
            body["limits"],
            json!({"memory": "512MiB", "pids": 64, "cpus": 1.5, "timeout": "90s", "output": "1536KiB"})
        );
        assert_eq!(body["network"], "loopback");
        assert_eq!(body["grants"], json!(["fs.write"]));
        assert_eq!(body["stdin"], "input\n");
        assert_eq!(body["wait"], false);
    }

    #[test]
    fn binary_stdin_goes_as_base64_and_strict_sends_no_limits() {
        let body = request(&["--daemon", "--", "cat"], &[], Some(&[0xff, 0, 1])).unwrap();
        assert_eq!(body["stdin_b64"], "/wAB");
        assert!(body.get("stdin").is_none());
        assert_eq!(body["profile"], "strict");
        assert!(body.get("limits").is_none());
        assert!(body.get("grants").is_none());
    }

    #[test]
    fn flags_the_api_cannot_carry_are_refused_by_name() {
        for (flags, named) in [
            (&["--allow-read", "/etc"][..], "--allow-read"),
            (&["--allow-write", "/tmp"][..], "--allow-write"),
            (&["--tool", "rust"][..], "--tool"),
            (&["--tmp-size", "64MiB"][..], "--tmp-size"),
            (
                &["--cgroup-parent", "/sys/fs/cgroup"][..],
                "--cgroup-parent",
            ),
            (&["--non-interactive"][..], "--non-interactive"),
            (&["--verbose"][..], "--verbose"),
            (&["--profile", "./mine.toml"][..], "--profile ./mine.toml"),
            (&["--grant", "no.such.action"][..], "--grant"),
            (
                &["--secret", "T=env:SANDBOX_TEST_UNSET_VAR"][..],
                "--secret T",
            ),
        ] {
            let mut argv = vec!["--daemon"];
            argv.extend_from_slice(flags);
            argv.extend_from_slice(&["--", "true"]);
            let message = usage_message(request(&argv, &[], None));
            assert!(message.contains(named), "{flags:?}: {message}");
        }
    }

    #[test]
    fn secrets_are_resolved_here() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "from-file\n").unwrap();
        let spec = format!("F=file:{}", file.path().display());
        let body = request(&["--daemon", "--secret", &spec, "--", "true"], &[], None).unwrap();
        assert_eq!(body["secrets"], json!({"F": "from-file"}));
        let bound = format!("{spec}@api.test");
        let body = request(&["--daemon", "--secret", &bound, "--", "true"], &[], None).unwrap();
        assert_eq!(
            body["secrets"],
            json!({"F": {"value": "from-file", "hosts": ["api.test"]}})
        );
    }

    #[test]
    fn non_utf8_and_oversized_requests_are_refused() {
        use std::os::unix::ffi::OsStringExt;
        let mut args = parse(&["--daemon", "--", "echo"]);
        args.command.push(OsString::from_vec(vec![0xff]));
        let message = usage_message(run_request(&args, &std::env::temp_dir(), &|_| None, None));
        assert!(message.contains("not UTF-8"), "{message}");
        let big = vec![b'x'; MAX_BODY];
        let message = usage_message(request(&["--daemon", "--", "cat"], &[], Some(&big)));
        assert!(message.contains("over the daemon's limit"), "{message}");
    }

    #[test]
    fn the_daemon_flag_takes_an_optional_socket() {
        assert_eq!(
            parse(&["--daemon", "--", "true"]).daemon.as_deref(),
            Some("")
        );
        assert_eq!(
            parse(&["--daemon=/tmp/d.sock", "--", "true"])
                .daemon
                .as_deref(),
            Some("/tmp/d.sock")
        );
        assert_eq!(parse(&["--", "true"]).daemon, None);
        // Without `=` the next word is the command, not a socket.
        let args = parse(&["--daemon", "true"]);
        assert_eq!(args.daemon.as_deref(), Some(""));
        assert_eq!(args.command, [OsString::from("true")]);
    }
}
