//! What a program sees and may do inside `sandbox run --profile strict`,
//! checked from inside, as root and as an unprivileged user.

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

use support::{assert_ok, identities, Project, Who};

#[test]
fn status_shows_no_new_privs_seccomp_and_no_capabilities() {
    for who in identities("status_shows_no_new_privs_seccomp_and_no_capabilities") {
        let status = Project::new(who).sh_ok("cat /proc/self/status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(str::trim)
                .unwrap_or_else(|| panic!("{name} missing in\n{status}"))
                .to_string()
        };
        assert_eq!(field("NoNewPrivs"), "1", "{who:?}");
        assert_eq!(field("Seccomp"), "2", "{who:?}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert_eq!(field(set), "0000000000000000", "{set} as {who:?}");
        }
    }
}

#[test]
fn writes_succeed_inside_the_project_only_and_keep_the_callers_ownership() {
    for who in identities("writes_succeed_inside_the_project_only") {
        let project = Project::new(who);
        let out = project.sh_ok(
            "for p in /usr/planted /etc/planted /planted /tmp/../usr/x /proc/planted; do \
               if echo x > $p 2>/dev/null; then echo WROTE $p; fi; done; \
             echo inside > made-inside.txt && mkdir -p sub && echo y > sub/f && echo done",
        );
        assert!(
            !out.contains("WROTE"),
            "{who:?} wrote outside the project:\n{out}"
        );
        assert!(out.contains("done"));
        let made = project.path().join("made-inside.txt");
        assert_eq!(std::fs::read_to_string(&made).unwrap(), "inside\n");
        let owner = std::fs::metadata(&made).unwrap().uid();
        let expected = if who == Who::Root {
            0
        } else {
            support::user_ids().0
        };
        assert_eq!(
            owner, expected,
            "a file made inside belongs to the caller on the host ({who:?})"
        );
        assert!(!std::path::Path::new("/usr/planted").exists());
    }
}

#[test]
fn started_by_root_the_sandbox_is_never_host_root() {
    if !support::require(
        "started_by_root_the_sandbox_is_never_host_root",
        "root",
        nix::unistd::geteuid().is_root(),
    ) {
        return;
    }
    let project = Project::new(Who::Root);
    let marker = support::marker("uid");
    let mut child = project
        .command()
        .args([
            "run",
            "--report",
            "report.json",
            "--",
            "/bin/sleep",
            &marker,
        ])
        .spawn()
        .unwrap();
    let sleeper = support::wait::until(
        "the sandboxed sleep to appear",
        std::time::Duration::from_secs(60),
        || {
            // The sleep itself, not the supervisor whose argv also holds the marker.
            support::host_pids_with(&marker).into_iter().find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            })
        },
    );
    let status = std::fs::read_to_string(format!("/proc/{sleeper}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    let uids: Vec<u32> = uid_line
        .split_whitespace()
        .skip(1)
        .map(|u| u.parse().unwrap())
        .collect();
    assert!(
        uids.iter().all(|u| *u != 0),
        "the sandboxed process is host root: {uid_line}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    child.wait().unwrap();
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(project.path().join("report.json")).unwrap())
            .unwrap();
    assert_ne!(report["enforced"]["user"]["host_uid"], 0);
    assert_eq!(
        report["enforced"]["user"]["host_uid"]
            .as_u64()
            .map(|u| u as u32),
        Some(uids[0])
    );
}

#[test]
fn secrets_outside_the_view_are_unreadable() {
    let canary = support::HostCanary::new();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for who in identities("secrets_outside_the_view_are_unreadable") {
        canary.assert_readable_bare(who);
        let script = format!(
            "for p in /root {home} /etc/shadow /etc/ssh {canary}; do \
               if cat $p 2>/dev/null || ls $p 2>/dev/null | grep -q .; then echo VISIBLE $p; fi; done; echo checked",
            canary = canary.path().display()
        );
        let out = Project::new(who).sh_ok(&script);
        assert!(!out.contains("VISIBLE"), "{who:?}:\n{out}");
        // The host's /run (its sockets) is not there: only the sandbox's own binary directory.
        let run = Project::new(who).sh_ok("ls -A /run");
        assert_eq!(run, "sandbox\n", "{who:?}");
        assert!(!out.contains(canary.content()), "{who:?}:\n{out}");
        assert!(out.contains("checked"));
    }
}

const CONNECT: &str = "import socket, sys\n\
try:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n    print('CONNECTED')\n\
except OSError as e:\n    print('refused', e.errno)\n";

#[test]
fn only_loopback_exists_and_host_listeners_are_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    for who in identities("only_loopback_exists_and_host_listeners_are_unreachable") {
        let project = Project::new(who);
        let dev = project.sh_ok("cat /proc/net/dev");
        let interfaces: Vec<&str> = dev
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(interfaces, ["lo"], "{who:?}");
        for net in [&[][..], &["--net", "loopback"][..]] {
            let out = project.run_with(net, &["python3", "-c", CONNECT, &port]);
            assert_ok(&out, "python3 connect");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.starts_with("refused"), "{who:?} {net:?}: {text}");
        }
    }
}

const SYSCALLS: &str = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
    print(name, errno.errorcode.get(ctypes.get_errno(), "OK") if r < 0 else "OK", flush=True)
call("ptrace", 101, 0, 0, 0, 0)                 # PTRACE_TRACEME
call("mount", 165, 0, 0, 0, 0, 0)
call("unshare", 272, 0x10000000)               # CLONE_NEWUSER
call("setns", 308, 0, 0)
call("keyctl", 250, 0, 0)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, 0, 0, 0)
call("userfaultfd", 323, 0)
call("io_uring_setup", 425, 1, 0)
call("clone3", 435, 0, 0)
call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("tiocsti", 16, 0, 0x5412, 0)
call("tiocsti_high_bits", 16, 0, 0xffffffff00005412, 0)
call("tioclinux", 16, 0, 0x541C, 0)
"#;

#[cfg(target_arch = "x86_64")]
#[test]
fn dangerous_system_calls_are_refused() {
    for who in identities("dangerous_system_calls_are_refused") {
        let project = Project::new(who);
        let out = project.run(&["python3", "-c", SYSCALLS]);
        assert_ok(&out, "syscall probe");
        let results: BTreeMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        for name in [
            "ptrace",
            "mount",
            "unshare",
            "setns",
            "keyctl",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "clone_newuser",
            "tiocsti",
            "tiocsti_high_bits",
            "tioclinux",
        ] {
            assert_eq!(
                results.get(name).map(String::as_str),
                Some("EPERM"),
                "{name} as {who:?}: {results:?}"
            );
        }
        assert_eq!(
            results.get("clone3").map(String::as_str),
            Some("ENOSYS"),
            "{who:?}"
        );
    }
}

#[test]
fn tiocsti_cannot_push_input_into_a_real_terminal() {
    use nix::pty::openpty;
    let pty = openpty(None, None).unwrap();
    for who in identities("tiocsti_cannot_push_input_into_a_real_terminal") {
        let project = Project::new(who);
        let script = "import fcntl, termios, errno\n\
try:\n    fcntl.ioctl(0, termios.TIOCSTI, b'x')\n    print('INJECTED')\n\
except OSError as e:\n    print(errno.errorcode[e.errno])\n";
        let out = project
            .command()
            .args(["run", "--", "python3", "-c", script])
            .stdin(std::fs::File::from(pty.slave.try_clone().unwrap()))
            .output()
            .unwrap();
        assert_ok(&out, "TIOCSTI on a pty");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "EPERM",
            "{who:?}"
        );
    }
}

#[test]
fn pid_one_is_the_sandbox_init_and_host_processes_are_invisible() {
    for who in identities("pid_one_is_the_sandbox_init_and_host_processes_are_invisible") {
        let out = Project::new(who)
            .sh_ok("tr '\\0' ' ' < /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'");
        let mut lines = out.lines();
        let init = lines.next().unwrap();
        // Init's command line is concealed: it would show the supervisor's.
        assert_eq!(init.trim(), "sandbox-init", "PID 1 ({who:?})");
        let count: u32 = lines.next().unwrap().trim().parse().unwrap();
        assert!(count <= 5, "{count} processes visible inside ({who:?})");
        let me = std::process::id();
        let own = Project::new(who).sh_ok(&format!(
            "test -e /proc/{me}/cmdline && cat /proc/{me}/cmdline || echo none"
        ));
        assert!(
            own.trim() == "none" || !own.contains("run_isolation"),
            "{own}"
        );
    }
}

#[test]
fn only_the_standard_descriptors_reach_the_command() {
    use std::os::fd::AsRawFd;
    // A descriptor the supervisor's parent leaks to it (no CLOEXEC).
    let leaked = std::fs::File::open("/etc/hostname").unwrap();
    let raw = leaked.as_raw_fd();
    nix::fcntl::fcntl(
        &leaked,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    for who in identities("only_the_standard_descriptors_reach_the_command") {
        let out = Project::new(who).run(&[
            "python3",
            "-c",
            "import os, stat; fds = sorted(int(f) for f in os.listdir('/proc/self/fd')); \
             print(fds, stat.S_ISSOCK(os.fstat(3).st_mode))",
        ]);
        assert_ok(&out, "fd listing");
        // 3 is the broker channel; the listing itself holds the highest one.
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.trim(),
            "[0, 1, 2, 3, 4] True",
            "{who:?} (leaked fd was {raw})"
        );
    }
    drop(leaked);
}

#[test]
fn the_environment_is_exactly_the_profiles() {
    for who in identities("the_environment_is_exactly_the_profiles") {
        let project = Project::new(who);
        let out = project
            .command()
            .env_clear()
            .env("TERM", "xterm-test")
            .env("SECRET_TOKEN", "hunter2")
            .env("PATH", "/usr/bin:/bin")
            .args(["run", "--env", "FOO=bar", "--", "/usr/bin/env", "-0"])
            .output()
            .unwrap();
        assert_ok(&out, "env");
        let env: BTreeMap<String, String> = out
            .stdout
            .split(|b| *b == 0)
            .filter(|e| !e.is_empty())
            .map(|e| {
                let e = String::from_utf8_lossy(e);
                let (k, v) = e.split_once('=').unwrap();
                (k.to_string(), v.to_string())
            })
            .collect();
        let expected: BTreeMap<String, String> = [
            ("FOO", "bar"),
            ("HOME", "/tmp"),
            ("NODE_CHANNEL_FD", "3"),
            ("NODE_CHANNEL_SERIALIZATION_MODE", "json"),
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/sandbox/bin",
            ),
            ("SANDBOX_IPC_FD", "3"),
            ("TERM", "xterm-test"),
            ("TMPDIR", "/tmp"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(env, expected, "{who:?}");
    }
}

#[test]
fn hidden_paths_are_masked() {
    for who in identities("hidden_paths_are_masked") {
        let project = Project::new(who);
        project.write(".env", "API_KEY=SECRET\n");
        project.write(".git/hooks/pre-commit", "#!/bin/sh\n");
        let out = project.sh_ok(
            "cat .env 2>/dev/null && echo READ-ENV; \
             touch .git/hooks/post-checkout 2>/dev/null && echo PLANTED; echo checked",
        );
        assert!(
            !out.contains("SECRET") && !out.contains("READ-ENV"),
            "{who:?}: {out}"
        );
        assert!(!out.contains("PLANTED"), "{who:?}: {out}");
        assert!(!project.path().join(".git/hooks/post-checkout").exists());
        assert_eq!(
            std::fs::read_to_string(project.path().join(".env")).unwrap(),
            "API_KEY=SECRET\n"
        );
    }
}

#[test]
fn the_report_says_what_was_enforced() {
    for who in identities("the_report_says_what_was_enforced") {
        let project = Project::new(who);
        let out = project.run_with(&["--report", "report.json"], &["/bin/true"]);
        assert_ok(&out, "report run");
        let report: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(project.path().join("report.json")).unwrap(),
        )
        .unwrap();
        let enforced = &report["enforced"];
        for ns in ["user", "mount", "pid", "net", "ipc", "uts", "cgroup"] {
            assert_eq!(enforced["namespaces"][ns], true, "{ns}");
        }
        assert_eq!(enforced["landlock"]["status"], "fully-enforced");
        assert!(enforced["landlock"]["abi"].as_u64().unwrap() >= 6);
        assert_eq!(enforced["seccomp"]["status"], "installed");
        assert_eq!(enforced["seccomp"]["mode"], "allowlist");
        let hash = enforced["seccomp"]["filter_sha256"].as_str().unwrap();
        assert!(
            hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
            "{hash}"
        );
        assert_eq!(enforced["no_new_privs"], true);
        assert_eq!(enforced["capabilities"], serde_json::json!([]));
        assert_eq!(report["exit"]["code"], 0);
        assert_eq!(report["profile"], "strict");
    }
}

/// Init is a copy of the supervisor and holds the host's whole environment.
/// Even with Landlock (and its ptrace rule) off, /proc/1/environ and
/// /proc/1/mem stay closed: init keeps capabilities the payload lacks, and
/// it is non-dumpable.
#[test]
fn init_does_not_leak_the_host_environment_even_without_landlock() {
    for who in identities("init_does_not_leak_the_host_environment_even_without_landlock") {
        let project = Project::new(who);
        let profile = project.write(
            "no-landlock.toml",
            "version = 1\nextends = \"strict\"\n[enforce]\nlandlock = \"off\"\n",
        );
        let out = project
            .command()
            .env("SANDBOX_TEST_SECRET", "hunter2-do-not-leak")
            .args(["run", "--profile", profile.to_str().unwrap(), "--"])
            .args([
                "/bin/sh",
                "-c",
                "cat /proc/1/environ; head -c 64 /proc/1/mem; echo checked",
            ])
            .output()
            .unwrap();
        assert_ok(&out, "reading /proc/1");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains("hunter2"),
            "{who:?} read init's environment: {stdout}"
        );
        assert!(stdout.contains("checked"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("/proc/1/environ: Permission denied"),
            "{who:?}: {stderr}"
        );
    }
}

const LOCAL_SERVER: &str = r#"
import os, socket, sys, threading, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
def serve():
    while True:
        conn, _ = server.accept()
        conn.sendall(b"inside-server:" + conn.recv(64))
        conn.close()
threading.Thread(target=serve, daemon=True).start()
print(server.getsockname()[1], flush=True)
# A limit that ends a hung test, however slow the host's probe is.
deadline = time.time() + 600
while not os.path.exists("probed") and time.time() < deadline:
    time.sleep(0.02)
client = socket.create_connection(("127.0.0.1", server.getsockname()[1]), timeout=5)
client.sendall(b"ping")
print(client.recv(64).decode(), flush=True)
"#;

/// strict brings up the loopback of its own network namespace: a test
/// server on 127.0.0.1 answers a client in the same run, and the host's
/// 127.0.0.1 at that port is not it.
#[test]
fn a_server_on_loopback_answers_inside_strict_and_is_unreachable_from_outside() {
    use std::io::{BufRead, Read, Write};
    for who in
        identities("a_server_on_loopback_answers_inside_strict_and_is_unreachable_from_outside")
    {
        let project = Project::new(who);
        let mut child = project
            .command()
            .args([
                "run",
                "--profile",
                "strict",
                "--",
                "python3",
                "-c",
                LOCAL_SERVER,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sandbox starts");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the port");
        let port: u16 = line.trim().parse().unwrap_or_else(|_| {
            let mut err = String::new();
            let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
            panic!("{who:?}: no port from inside: {line:?} {err}")
        });
        // From the host, that port on 127.0.0.1 is not the run's server.
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
            let _ = stream.write_all(b"host");
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            assert!(
                !answer.contains("inside-server"),
                "{who:?}: the host reached the run's server"
            );
        }
        std::fs::write(project.path().join("probed"), "").expect("signal the run");
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).expect("output");
        let status = child.wait().expect("wait");
        let mut err = String::new();
        let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
        assert!(status.success(), "{who:?}: {status:?} {err}");
        assert_eq!(rest.trim(), "inside-server:ping", "{who:?}: {err}");
    }
}

const TCGETS: &str = r#"
import errno, fcntl, termios
for dev in ("/dev/null", "/dev/zero", "/dev/urandom"):
    try:
        fcntl.ioctl(open(dev, "rb"), termios.TCGETS, bytes(64))
        print(dev, "OK")
    except OSError as e:
        print(dev, errno.errorcode[e.errno])
"#;

/// The devices of the minimal /dev answer ioctls as they do bare:
/// `isatty`-style probes get ENOTTY, not Landlock's EACCES.
#[test]
fn a_terminal_ioctl_on_dev_null_gives_enotty_inside_strict() {
    for who in identities("a_terminal_ioctl_on_dev_null_gives_enotty_inside_strict") {
        let project = Project::new(who);
        let out = project.run(&["python3", "-c", TCGETS]);
        assert_ok(&out, "python3 ioctl");
        let inside = String::from_utf8_lossy(&out.stdout).into_owned();
        // The same probe bare: each device answers as its driver does
        // (ENOTTY for null and zero, EINVAL for urandom), never EACCES.
        let bare = std::process::Command::new("python3")
            .args(["-c", TCGETS])
            .output()
            .expect("python3");
        let bare = String::from_utf8_lossy(&bare.stdout).into_owned();
        assert_eq!(inside, bare, "{who:?}");
        assert!(inside.contains("/dev/null ENOTTY"), "{who:?}: {inside}");
        assert!(!inside.contains("EACCES"), "{who:?}: {inside}");
    }
}

const PTY: &str = r#"
import os, pty
before = sorted(os.listdir("/dev/pts"))
master, slave = pty.openpty()
os.write(master, b"ping\n")
print("slave read", os.read(slave, 64))
print("name", os.ttyname(slave))
print("before", before)
"#;

/// Every run has a devpts instance of its own: a pty opens and round-trips
/// inside strict, and /dev/pts shows none of the host's terminals.
#[test]
fn a_pty_opens_and_round_trips_inside_strict_on_a_private_devpts() {
    for who in identities("a_pty_opens_and_round_trips_inside_strict_on_a_private_devpts") {
        let project = Project::new(who);
        let out = project.run_with(&["--profile", "strict"], &["python3", "-c", PTY]);
        assert_ok(&out, "pty inside strict");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("slave read b'ping\\n'"), "{who:?}: {text}");
        assert!(text.contains("name /dev/pts/0"), "{who:?}: {text}");
        assert!(text.contains("before ['ptmx']"), "{who:?}: {text}");
    }
}
