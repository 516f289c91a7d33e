//! The run's net process is a program of its own, `sandbox-net`, which
//! the supervisor executes from beside its own binary
//! (crates/sandbox/src/net/process.rs). A program there that does not
//! serve (another build's, which reads another start; a truncated or
//! foreign file; none at all) must stop an allowlist run before the
//! sandbox exists, naming the program, instead of leaving the run a proxy
//! nobody answers and the report saying nothing.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::{Project, Who};

/// What the payload prints: seen on stdout only if the run went on.
const RAN: &str = "PAYLOAD-RAN-7d1e";

/// A directory holding `sandbox` and, if given, `net` as its `sandbox-net`.
fn installation(net: Option<&[u8]>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("net-process-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let sandbox = dir.path().join("sandbox");
    if std::fs::hard_link(support::sandbox_bin(), &sandbox).is_err() {
        std::fs::copy(support::sandbox_bin(), &sandbox).unwrap();
    }
    if let Some(content) = net {
        let path = dir.path().join("sandbox-net");
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, sandbox)
}

fn allowlist_run(sandbox: &Path, project: &Project) -> Output {
    Command::new(sandbox)
        .args(["run", "--net", "allow:example.com", "--", "/bin/echo", RAN])
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn an_allowlist_run_refuses_to_start_when_sandbox_net_does_not_serve() {
    if !support::require_root_sandbox(
        "an_allowlist_run_refuses_to_start_when_sandbox_net_does_not_serve",
    ) {
        return;
    }
    let project = Project::new(Who::Root);
    // The real one beside a copy of `sandbox`: the copy is a working
    // installation, so the refusals below are the substitute's doing.
    let real = std::fs::read(Path::new(support::sandbox_bin()).with_file_name("sandbox-net"))
        .expect("sandbox-net is built beside sandbox");
    let (_dir, sandbox) = installation(Some(&real));
    let out = allowlist_run(&sandbox, &project);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(RAN), "{stdout}{stderr}");

    for (content, how) in [
        (
            &b"#!/bin/sh\nexit 1\n"[..],
            "exited with status 1 before it was ready",
        ),
        (&b"not a program"[..], "could not be executed"),
        (
            &b"#!/bin/sh\necho '{\"kind\":\"closing\"}' >&3\nexec sleep 600\n"[..],
            "did not answer `ready` first",
        ),
    ] {
        let (_dir, sandbox) = installation(Some(content));
        let out = allowlist_run(&sandbox, &project);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(125), "{how}: {stdout}{stderr}");
        assert!(!stdout.contains(RAN), "{how}: the payload ran: {stdout}");
        let program = sandbox.with_file_name("sandbox-net");
        assert!(
            stderr.contains(&format!(
                "the run's network helper {} {how}",
                program.display()
            )),
            "{stderr}"
        );
        assert!(stderr.contains("reinstall the sandbox package"), "{stderr}");
    }
}

#[test]
fn an_allowlist_run_refuses_to_start_without_sandbox_net() {
    if !support::require_root_sandbox("an_allowlist_run_refuses_to_start_without_sandbox_net") {
        return;
    }
    let project = Project::new(Who::Root);
    let (_dir, sandbox) = installation(None);
    let out = allowlist_run(&sandbox, &project);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(125), "{stdout}{stderr}");
    assert!(!stdout.contains(RAN), "the payload ran: {stdout}");
    assert!(stderr.contains("sandbox-net is missing"), "{stderr}");
}

/// The net process gets the environment it reads (the TLS roots' and the
/// resolver's variables) and nothing else: a secret offered to the run
/// from an environment variable stays in the supervisor. A stand-in
/// `sandbox-net` writes down the environment it was executed with, then
/// executes the real one, so the run goes on as usual.
#[test]
fn the_net_process_gets_no_secret_from_the_supervisor_s_environment() {
    if !support::require_root_sandbox(
        "the_net_process_gets_no_secret_from_the_supervisor_s_environment",
    ) {
        return;
    }
    const SECRET: &str = "env-secret-4b1f9c";
    let project = Project::new(Who::Root);
    let (dir, sandbox) = installation(None);
    let real = Path::new(support::sandbox_bin()).with_file_name("sandbox-net");
    std::fs::copy(&real, dir.path().join("real-sandbox-net")).unwrap();
    let seen = dir.path().join("environment");
    let stand_in = format!(
        "#!/bin/sh\n/usr/bin/env > '{}'\nexec '{}'\n",
        seen.display(),
        dir.path().join("real-sandbox-net").display()
    );
    let path = dir.path().join("sandbox-net");
    std::fs::write(&path, stand_in).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(&sandbox)
        .args([
            "run",
            "--net",
            "allow:example.com",
            "--secret",
            "TOKEN=env:SANDBOX_TEST_TOKEN@example.com",
            "--",
            "/bin/echo",
            RAN,
        ])
        .env("SANDBOX_TEST_TOKEN", SECRET)
        .env("SSL_CERT_DIR", "/etc/ssl/certs")
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains(RAN), "{stdout}{stderr}");
    let environment = std::fs::read_to_string(&seen).expect("the stand-in wrote its environment");
    // The variable it may read arrived: the stand-in is what ran.
    assert!(
        environment.contains("SSL_CERT_DIR=/etc/ssl/certs"),
        "{environment}"
    );
    assert!(!environment.contains(SECRET), "{environment}");
    for line in environment.lines() {
        let name = line.split('=').next().unwrap_or_default();
        // /bin/sh sets PWD (and may set SHLVL, _) on its own.
        assert!(
            [
                "SSL_CERT_FILE",
                "SSL_CERT_DIR",
                "LOCALDOMAIN",
                "RES_OPTIONS",
                "HOSTALIASES",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(&name),
            "the net process got {name}: {environment}"
        );
    }
}

/// A `sandbox` unpacked inside the project, whose payload replaces
/// `tools/sandbox-net` with its own program and then makes the supervisor
/// start a net process with `method`/`params` under the run flags `args`.
/// Whether the program ran (outside the sandbox), and the streams.
fn plant_then(args: &[&str], method: &str, params: &str) -> (bool, String) {
    let project = Project::new(Who::Root);
    let tools = project.path().join("tools");
    std::fs::create_dir(&tools).unwrap();
    let sandbox = tools.join("sandbox");
    std::fs::copy(support::sandbox_bin(), &sandbox).unwrap();
    std::fs::copy(
        Path::new(support::sandbox_bin()).with_file_name("sandbox-net"),
        tools.join("sandbox-net"),
    )
    .unwrap();
    let outside = tempfile::Builder::new()
        .prefix("planted-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let escaped = outside.path().join("escaped");
    let planted = format!("#!/bin/sh\nid > {}\nexit 1\n", escaped.display());
    let script = format!(
        "rm -f tools/sandbox-net && printf '%s' '{planted}' > tools/sandbox-net && \
         chmod 755 tools/sandbox-net && sandbox ipc {method} '{params}'"
    );
    let out = Command::new(&sandbox)
        .args(["run", "--non-interactive"])
        .args(args)
        .args(["--", "/bin/sh", "-c"])
        .arg(&script)
        .current_dir(project.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let streams = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The payload did plant it: a refusal is the supervisor's.
    let written = std::fs::read_to_string(tools.join("sandbox-net")).unwrap_or_default();
    assert!(written.contains("escaped"), "{streams}");
    let place = format!(
        "the supervisor would execute {}, which is inside",
        tools.join("sandbox-net").display()
    );
    assert!(
        escaped.exists() || streams.contains(&place),
        "no refusal naming the place: {streams}"
    );
    (escaped.exists(), streams)
}

/// The net process for `net.http` is started when first needed, after the
/// payload has run: the supervisor executed the payload's program outside
/// the sandbox, as root with every capability.
#[test]
fn the_payload_cannot_plant_the_net_process_net_http_starts() {
    if !support::require_root_sandbox("the_payload_cannot_plant_the_net_process_net_http_starts") {
        return;
    }
    let (ran, streams) = plant_then(
        &["--net", "loopback", "--grant", "net.http:example.com:80"],
        "net.http",
        r#"{"url": "http://example.com/"}"#,
    );
    assert!(
        !ran,
        "the payload's program ran outside the sandbox: {streams}"
    );
    assert!(
        streams.contains("net.http cannot be used in this run"),
        "{streams}"
    );
}

/// `terminal.run` starts a nested run of the run's own allowlist policy,
/// and with it a net process, from the supervisor after the payload ran.
#[test]
fn the_payload_cannot_plant_the_net_process_a_nested_run_starts() {
    if !support::require_root_sandbox(
        "the_payload_cannot_plant_the_net_process_a_nested_run_starts",
    ) {
        return;
    }
    let (ran, streams) = plant_then(
        &["--net", "allow:example.com", "--grant", "terminal.run"],
        "terminal.run",
        r#"{"argv": ["/bin/true"]}"#,
    );
    assert!(
        !ran,
        "the payload's program ran outside the sandbox: {streams}"
    );
    assert!(streams.contains("the allowlist's proxy"), "{streams}");
}
