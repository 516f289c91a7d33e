//! `sandbox oci` under containerd: `ctr run --runc-binary` pointed at the
//! build, through containerd's own runc shim (containerd-shim-runc-v2),
//! which drives its runtime with runc's whole command line (`--log` and
//! `--log-format json` on every call, `create --bundle --pid-file`,
//! `start`, `exec --process --detach --pid-file`, `ps --format json`,
//! `pause`, `resume`, `kill`, `delete [--force]`).
//!
//! Each test starts its own containerd on a socket in a temporary
//! directory, with the CRI plugin off, and never touches a system one: the
//! shim puts its socket in containerd's fixed /run/containerd/s, so the
//! daemon runs in a mount namespace of its own with a private /run. The
//! root filesystem is Debian's static busybox (no image registry is
//! reachable), given to ctr as `--rootfs`. Needs root, containerd, ctr,
//! runc, unshare, script and busybox-static (`.ci/run` installs them).

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use support::oci::{text, OciRuntime};

fn usable(test: &str) -> bool {
    support::oci::usable(
        test,
        &[
            "containerd",
            "containerd-shim-runc-v2",
            "ctr",
            "runc",
            "unshare",
            "script",
        ],
        "containerd runc busybox-static",
    )
}

/// One containerd of this test's own, a busybox root, and `sandbox oci`
/// behind a wrapper that names the runtime's settings and records every
/// command line the shim gives it.
struct Containerd {
    runtime: OciRuntime,
    daemon: Option<Child>,
}

impl std::ops::Deref for Containerd {
    type Target = OciRuntime;
    fn deref(&self) -> &OciRuntime {
        &self.runtime
    }
}

impl Containerd {
    fn start() -> Containerd {
        let mut containerd = Containerd {
            runtime: OciRuntime::new("sandbox-ctrd-", ""),
            daemon: None,
        };
        let path = containerd.path().to_owned();
        std::fs::write(
            path.join("config.toml"),
            format!(
                "version = 2\n\
                 root = \"{0}/root\"\n\
                 state = \"{0}/state\"\n\
                 disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{0}/containerd.sock\"\n\
                 [ttrpc]\n  address = \"{0}/containerd.sock.ttrpc\"\n\
                 [debug]\n  address = \"\"\n\
                 [metrics]\n  address = \"\"\n",
                path.display()
            ),
        )
        .expect("config.toml");
        let log = std::fs::File::create(path.join("containerd.log")).expect("containerd.log");
        // A private /run: the shims' sockets (containerd's fixed
        // /run/containerd/s) stay out of the host's, and go with the namespace.
        let daemon = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(
                "mount -t tmpfs -o mode=0755 sandbox-ctrd-run /run && \
                 exec containerd --root \"$1/root\" --state \"$1/state\" \
                 --address \"$1/containerd.sock\" --config \"$1/config.toml\"",
            )
            .arg("sh")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("containerd starts");
        containerd.daemon = Some(daemon);
        let answered = support::wait::holds_within(Duration::from_secs(30), || {
            path.join("containerd.sock").exists() && containerd.ctr(&["version"]).status.success()
        });
        assert!(
            answered,
            "containerd did not answer on its socket:\n{}",
            containerd.daemon_log()
        );
        containerd
    }

    fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.path().join("containerd.log")).unwrap_or_default()
    }

    fn ctr_command(&self) -> Command {
        let mut command = Command::new("ctr");
        command
            .arg("--address")
            .arg(self.path().join("containerd.sock"))
            .stdin(Stdio::null());
        command
    }

    fn ctr(&self, args: &[&str]) -> Output {
        self.ctr_command().args(args).output().expect("ctr runs")
    }

    /// `ctr run` with `runtime` (`None`: ours), its runc state and fifos
    /// in this directory, on the busybox root.
    fn run_args(
        &self,
        runtime: Option<&str>,
        options: &[&str],
        id: &str,
        script: &str,
    ) -> Vec<String> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut args: Vec<String> = vec!["run".into(), "--rootfs".into()];
        args.push("--runc-binary".into());
        args.push(runtime.map_or_else(|| path(self.wrapper()), str::to_owned));
        args.push("--runc-root".into());
        args.push(path(self.path().join("runc-root")));
        args.push("--fifo-dir".into());
        args.push(path(self.path().join("fifo")));
        args.extend(options.iter().map(|o| (*o).to_owned()));
        args.push(path(self.rootfs()));
        args.push(id.into());
        args.extend(["/bin/sh".into(), "-c".into(), script.into()]);
        args
    }

    /// `ctr task exec` of `script` in `id`, its fifos in this directory
    /// (ctr's default is the host's /run/containerd/fifo).
    fn exec_args(&self, options: &[&str], exec_id: &str, id: &str, script: &str) -> Vec<String> {
        let mut args: Vec<String> = vec!["task".into(), "exec".into(), "--fifo-dir".into()];
        args.push(self.path().join("fifo").to_string_lossy().into_owned());
        args.extend(options.iter().map(|o| (*o).to_owned()));
        args.extend(["--exec-id".into(), exec_id.into(), id.into()]);
        args.extend(["/bin/sh".into(), "-c".into(), script.into()]);
        args
    }

    fn run(&self, runtime: Option<&str>, options: &[&str], id: &str, script: &str) -> Output {
        self.ctr_command()
            .args(self.run_args(runtime, options, id, script))
            .output()
            .expect("ctr run")
    }

    /// `ctr ARGS` on a terminal of its own (ctr's `-t` needs one).
    fn ctr_on_a_terminal(&self, args: &[String]) -> Output {
        let mut line = format!(
            "ctr --address '{}'",
            self.path().join("containerd.sock").display()
        );
        for arg in args {
            line.push_str(&format!(" '{}'", arg.replace('\'', r"'\''")));
        }
        Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .stdin(Stdio::null())
            .output()
            .expect("script")
    }

    /// The status `ctr task ls` shows for `id`.
    fn task_status(&self, id: &str) -> String {
        text(&self.ctr(&["task", "ls"]).stdout)
            .lines()
            .find_map(|line| {
                let mut fields = line.split_whitespace();
                (fields.next() == Some(id)).then(|| fields.nth(1).unwrap_or("").to_owned())
            })
            .unwrap_or_default()
    }

    fn wait_for_status(&self, id: &str, wanted: &str) -> String {
        let mut status = String::new();
        support::wait::holds_within(Duration::from_secs(20), || {
            status = self.task_status(id);
            status == wanted
        });
        status
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // Whatever a failed test left: its tasks and containers first, so
        // the shims end with them, then the daemon and anything still
        // naming this directory (only the processes this test started).
        for task in text(&self.ctr(&["task", "ls", "-q"]).stdout).lines() {
            let _ = self.ctr(&["task", "delete", "--force", task]);
        }
        for container in text(&self.ctr(&["container", "ls", "-q"]).stdout).lines() {
            let _ = self.ctr(&["container", "delete", container]);
        }
        if let Some(mut daemon) = self.daemon.take() {
            let pid = nix::unistd::Pid::from_raw(daemon.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = daemon.wait();
        }
        let marker = self.path().to_string_lossy().into_owned();
        for pid in support::wait_until_gone(&marker, 5) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// What a process inside reports about itself and its writes.
const PROBE: &str = "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; \
    touch /etc/planted 2>/dev/null && echo etc=written || echo etc=denied; \
    touch /tmp/scratch && echo tmp=written || echo tmp=denied";

const CONFINED: [&str; 5] = [
    "CapEff:\t0000000000000000",
    "NoNewPrivs:\t1",
    "Seccomp:\t2",
    "etc=denied",
    "tmp=written",
];

#[test]
fn ctr_run_gets_the_layers_and_keeps_the_exit_code() {
    let test = "ctr_run_gets_the_layers_and_keeps_the_exit_code";
    if !usable(test) {
        return;
    }
    let containerd = Containerd::start();
    let id = format!("ctrd-{}", support::marker("run"));
    let out = containerd.run(None, &["--rm"], &id, &format!("{PROBE}; exit 7"));
    let stdout = text(&out.stdout);
    let calls = std::fs::read_to_string(containerd.calls()).unwrap_or_default();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{stdout}\n{}\nruntime calls:\n{calls}\n{}",
        text(&out.stderr),
        containerd.daemon_log()
    );
    for expected in CONFINED {
        assert!(stdout.contains(expected), "{expected}:\n{stdout}");
    }
    assert!(!containerd.rootfs().join("etc/planted").exists());
    // The shim's own command line went through sandbox oci, flags and all.
    assert!(
        calls.contains("--log-format json create --bundle"),
        "{calls}"
    );
    let enforced = containerd
        .audit()
        .into_iter()
        .find(|l| l["event"] == "enforced" && l["run"] == id.as_str())
        .expect("the init's report in the audit");
    assert_eq!(enforced["profile"], "strict");
    assert_eq!(enforced["enforced"]["landlock"], "full");
    assert_eq!(enforced["enforced"]["seccomp_programs"], 1);
    assert_eq!(containerd.container_dir(&id), None);

    // `ctr run -t`: create with the shim's --console-socket.
    let tty_id = format!("ctrd-{}", support::marker("tty"));
    let tty = containerd.ctr_on_a_terminal(&containerd.run_args(
        None,
        &["--rm", "-t"],
        &tty_id,
        "{ tty; grep NoNewPrivs /proc/self/status; } > /tmp/run-tty",
    ));
    // Into a file: ctr may leave before it has copied a quick process's
    // last output from the terminal.
    let tty_out =
        std::fs::read_to_string(containerd.rootfs().join("tmp/run-tty")).unwrap_or_default();
    assert!(
        tty_out.contains("/dev/pts/") && tty_out.contains("NoNewPrivs:\t1"),
        "{tty_out}\n{}",
        text(&tty.stderr)
    );

    // The same container under plain runc writes /etc: the denial above is
    // this runtime's.
    let plain_id = format!("ctrd-{}", support::marker("plain"));
    let plain = containerd.run(Some("runc"), &["--rm"], &plain_id, PROBE);
    let plain_stdout = text(&plain.stdout);
    assert!(
        plain_stdout.contains("etc=written"),
        "{plain_stdout}\n{}",
        text(&plain.stderr)
    );
    for id in [&id, &tty_id, &plain_id] {
        let left = support::wait_until_gone(id, 10);
        assert!(left.is_empty(), "{id}: processes left: {left:?}");
    }
}

#[test]
fn ctr_task_exec_is_confined_the_broker_answers_and_kill_leaves_nothing() {
    let test = "ctr_task_exec_is_confined_the_broker_answers_and_kill_leaves_nothing";
    if !usable(test) {
        return;
    }
    let containerd = Containerd::start();
    std::fs::write(
        containerd.rootfs().join("etc/motd"),
        "hello from the image\n",
    )
    .expect("motd");
    let id = format!("ctrd-{}", support::marker("exec"));
    let output = containerd.path().join("task.log");
    let log_uri = format!("file://{}", output.display());
    // The container's own process asks the broker once an exec has run, so
    // the channel is shown to outlive the execs beside it.
    let started = containerd.run(
        None,
        &["--detach", "--log-uri", &log_uri],
        &id,
        r#"trap 'echo got-term; exit 0' TERM
while [ ! -e /tmp/go ]; do sleep 0.1; done
echo "fd=$SANDBOX_IPC_FD"
echo '{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"etc/motd"}}' >&3
head -n 1 <&3
echo '{"jsonrpc":"2.0","id":2,"method":"fs.write","params":{"path":"etc/motd","content":"x"}}' >&3
head -n 1 <&3
while :; do sleep 0.1; done"#,
    );
    assert!(
        started.status.success(),
        "{}\n{}",
        text(&started.stderr),
        containerd.daemon_log()
    );
    assert_eq!(containerd.wait_for_status(&id, "RUNNING"), "RUNNING");
    assert!(containerd.container_dir(&id).is_some());

    // The container's supervisor (the `sandbox oci create` that forked
    // before runc) is confined too.
    let supervisors: Vec<u32> = support::host_pids_with(&id)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| text(&c).replace('\0', " ").contains(" oci "))
        })
        .collect();
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", supervisors[0])).unwrap();
    for expected in ["NoNewPrivs:\t1", "Seccomp:\t2"] {
        assert!(
            status.contains(expected),
            "supervisor: {expected}\n{status}"
        );
    }

    // `ctr task exec`: the shim's `exec --process F --detach --pid-file`.
    let exec = containerd
        .ctr_command()
        .args(containerd.exec_args(
            &[],
            "probe",
            &id,
            &format!("{PROBE}; echo fd=$SANDBOX_IPC_FD; touch /tmp/go"),
        ))
        .output()
        .expect("ctr task exec");
    let stdout = text(&exec.stdout);
    assert!(exec.status.success(), "{stdout}\n{}", text(&exec.stderr));
    for expected in CONFINED.iter().chain(&["fd=3"]) {
        assert!(stdout.contains(expected), "exec: {expected}:\n{stdout}");
    }
    // ... and with a terminal (`--console-socket`).
    let tty = containerd.ctr_on_a_terminal(&containerd.exec_args(
        &["-t"],
        "terminal",
        &id,
        "{ tty; grep Seccomp: /proc/self/status; } > /tmp/exec-tty",
    ));
    let tty_out =
        std::fs::read_to_string(containerd.rootfs().join("tmp/exec-tty")).unwrap_or_default();
    assert!(
        tty_out.contains("/dev/pts/") && tty_out.contains("Seccomp:\t2"),
        "{tty_out}\n{}",
        text(&tty.stderr)
    );

    // The container's process got its answers on fd 3.
    let mut answers = String::new();
    support::wait::holds_within(Duration::from_secs(20), || {
        answers = std::fs::read_to_string(&output).unwrap_or_default();
        answers.contains(r#""id":2"#)
    });
    let mut lines = answers.lines();
    assert_eq!(lines.next(), Some("fd=3"), "{answers}");
    let read: serde_json::Value =
        serde_json::from_str(lines.next().unwrap_or("")).expect("an answer");
    assert_eq!(read["id"], 1);
    assert_eq!(
        read["result"]["content"], "hello from the image\n",
        "{read}"
    );
    // strict puts writes to a person; a container has nobody to ask.
    let write: serde_json::Value =
        serde_json::from_str(lines.next().unwrap_or("")).expect("an answer");
    assert!(write["error"].is_object(), "{write}");
    assert_eq!(
        std::fs::read_to_string(containerd.rootfs().join("etc/motd")).unwrap(),
        "hello from the image\n"
    );
    let audit = containerd.audit();
    assert!(audit
        .iter()
        .any(|l| l["method"] == "fs.read" && l["decision"] == "allow"));
    let execs = audit
        .iter()
        .filter(|l| l["event"] == "enforced" && l["started_by"] == "exec")
        .count();
    assert_eq!(execs, 2, "every exec reports its layers: {audit:?}");

    // What the shim passes through unchanged still works: ps, pause, resume.
    let ps = containerd.ctr(&["task", "ps", &id]);
    assert!(ps.status.success(), "{}", text(&ps.stderr));
    assert!(containerd.ctr(&["task", "pause", &id]).status.success());
    assert_eq!(containerd.task_status(&id), "PAUSED");
    assert!(containerd.ctr(&["task", "resume", &id]).status.success());
    assert_eq!(containerd.task_status(&id), "RUNNING");

    // `ctr task kill` sends TERM, which reaches the container's process.
    let killed = containerd.ctr(&["task", "kill", &id]);
    assert!(killed.status.success(), "{}", text(&killed.stderr));
    assert_eq!(containerd.wait_for_status(&id, "STOPPED"), "STOPPED");
    assert!(std::fs::read_to_string(&output)
        .unwrap_or_default()
        .contains("got-term"));
    let deleted = containerd.ctr(&["task", "delete", &id]);
    assert!(deleted.status.success(), "{}", text(&deleted.stderr));
    let removed = containerd.ctr(&["container", "delete", &id]);
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    // No shim, supervisor, runc or container process names it any more,
    // and its state is gone.
    let left = support::wait_until_gone(&id, 10);
    assert!(left.is_empty(), "processes left: {left:?}");
    assert_eq!(containerd.container_dir(&id), None);
    assert!(!containerd
        .path()
        .join("runc-root/default")
        .join(&id)
        .exists());
}

#[test]
fn a_refusal_reaches_ctr_through_the_runtimes_log() {
    let test = "a_refusal_reaches_ctr_through_the_runtimes_log";
    if !usable(test) {
        return;
    }
    // The shim gives its runtime the container's stdio and reports the last
    // error of `--log`: the reason must be there, not only on stderr.
    let containerd = Containerd::start();
    let id = format!("ctrd-{}", support::marker("host"));
    let out = containerd.run(None, &["--rm", "--net-host"], &id, "echo ran");
    assert!(!out.status.success());
    assert!(!text(&out.stdout).contains("ran"));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("sandbox oci: refused") && stderr.contains("shares the host's network"),
        "{stderr}"
    );
    assert_eq!(containerd.container_dir(&id), None);
    let left = support::wait_until_gone(&id, 10);
    assert!(left.is_empty(), "processes left: {left:?}");
}
