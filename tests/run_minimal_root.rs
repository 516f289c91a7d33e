//! What ordinary programs find in a strict run's minimal root: the files
//! and devices they read at start-up are there (or written for the run),
//! and what is left out on purpose stays out. As root and unprivileged.

mod support;

use std::path::Path;

use support::{assert_ok, identities, Project, Who};

fn strict(project: &Project, script: &str) -> String {
    let out = project.run_with(&["--profile", "strict"], &["/bin/sh", "-c", script]);
    assert_ok(&out, script);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn python(project: &Project, extra: &[&str], script: &str) -> String {
    let mut args = vec!["--profile", "strict"];
    args.extend_from_slice(extra);
    let out = project.run_with(&args, &["python3", "-c", script]);
    assert_ok(&out, script);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Host accounts other than root and nobody: none may be listed inside.
fn other_host_accounts() -> Vec<String> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(':').next())
        .filter(|name| !name.is_empty() && *name != "root" && *name != "nobody")
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_sandbox_user_has_an_account_and_the_hosts_accounts_are_not_listed() {
    for who in identities("the_sandbox_user_has_an_account") {
        let project = Project::new(who);
        let out = strict(
            &project,
            "echo uid=$(id -u) name=$(id -un) group=$(id -gn); getent passwd $(id -u); \
             echo lines=$(wc -l < /etc/passwd) groups=$(wc -l < /etc/group); cat /etc/passwd /etc/group",
        );
        let uid: u32 = out
            .split("uid=")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|uid| uid.parse().ok())
            .unwrap_or_else(|| panic!("no uid in\n{out}"));
        // Unprivileged, the sandbox keeps the caller's uid, which (for the
        // tests' throwaway uid) has no host account: the fallback name.
        if who == Who::User && support::user_ids().0 == support::TEST_UID {
            assert!(
                out.contains("name=sandbox group=sandbox"),
                "{who:?}: a uid without a host account gets the fallback name:\n{out}"
            );
        }
        let entry = out
            .lines()
            .find(|line| line.split(':').nth(2) == Some(&uid.to_string()))
            .unwrap_or_else(|| panic!("{who:?}: getent passwd {uid} found nothing:\n{out}"));
        assert_eq!(
            entry.split(':').nth(5),
            Some("/tmp"),
            "{who:?}: its home is the run's HOME: {entry}"
        );
        assert!(
            out.contains("lines=2") || out.contains("lines=3"),
            "{who:?}: root, the sandbox's user and nobody only:\n{out}"
        );
        for name in other_host_accounts() {
            assert!(
                !out.lines().any(|l| l.starts_with(&format!("{name}:"))),
                "{who:?}: host account {name} listed inside:\n{out}"
            );
        }
    }
}

#[test]
fn localhost_and_the_sandbox_hostname_resolve_without_dns() {
    for who in identities("localhost_and_the_sandbox_hostname_resolve") {
        let project = Project::new(who);
        let out = python(
            &project,
            &[],
            "import socket\n\
             print(socket.gethostbyname('localhost'))\n\
             print(socket.getaddrinfo(socket.gethostname(), None)[0][4][0])\n\
             print(socket.getfqdn())",
        );
        assert_eq!(
            out, "127.0.0.1\n127.0.1.1\nsandbox.localdomain\n",
            "{who:?}"
        );
    }
}

#[test]
fn with_the_hosts_network_the_hosts_own_hosts_file_is_shown() {
    let Ok(host) = std::fs::read_to_string("/etc/hosts") else {
        support::require("with_the_hosts_network", "a host /etc/hosts", false);
        return;
    };
    for who in identities("with_the_hosts_network_the_hosts_own_hosts_file") {
        let project = Project::new(who);
        let out = project.run_with(
            &["--profile", "strict", "--net", "host"],
            &["/bin/cat", "/etc/hosts"],
        );
        assert_ok(&out, "cat /etc/hosts");
        assert_eq!(String::from_utf8_lossy(&out.stdout), host, "{who:?}");
    }
}

#[test]
fn etc_files_programs_read_are_shown_and_host_secrets_and_identifiers_are_not() {
    let shown = [
        "/etc/nsswitch.conf",
        "/etc/services",
        "/etc/protocols",
        "/etc/localtime",
        "/etc/timezone",
        "/etc/os-release",
        "/etc/locale.alias",
        "/etc/ssl/certs",
        "/etc/ld.so.cache",
    ];
    // Absent on purpose: secrets, host identifiers, and the resolver
    // configuration of a network the run cannot reach.
    let absent = [
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/ssh",
        "/etc/ssl/private",
        "/etc/machine-id",
        "/etc/hostname",
        "/etc/resolv.conf",
        "/etc/subuid",
        "/var",
        "/home",
        "/root",
        "/sys",
        "/run/user",
    ];
    let mut script = String::new();
    for path in shown.iter().chain(absent.iter()) {
        script.push_str(&format!(
            "if [ -e {path} ] && [ -r {path} ]; then echo 'present {path}'; else echo 'absent {path}'; fi; "
        ));
    }
    // /etc/mtab is the run's own mount table, which df reads.
    script.push_str("echo mtab=$(readlink /etc/mtab); df /tmp > /dev/null && echo df-ok");
    for who in identities("etc_files_programs_read_are_shown") {
        let out = strict(&Project::new(who), &script);
        for path in shown {
            // Only what this host has can be shown.
            if Path::new(path).exists() {
                assert!(
                    out.contains(&format!("present {path}\n")),
                    "{who:?}: {path} missing:\n{out}"
                );
            }
        }
        for path in absent {
            assert!(
                out.contains(&format!("absent {path}\n")),
                "{who:?}: {path} visible:\n{out}"
            );
        }
        assert!(
            out.contains("mtab=../proc/self/mounts\n"),
            "{who:?}:\n{out}"
        );
        assert!(out.contains("df-ok"), "{who:?}:\n{out}");
    }
}

#[test]
fn tls_clients_find_the_ca_certificates() {
    if !Path::new("/etc/ssl/certs").is_dir() {
        support::require(
            "tls_clients_find_the_ca_certificates",
            "/etc/ssl/certs",
            false,
        );
        return;
    }
    for who in identities("tls_clients_find_the_ca_certificates") {
        let out = python(
            &Project::new(who),
            &[],
            "import ssl\nc = ssl.create_default_context()\nprint(len(c.get_ca_certs()) > 0)",
        );
        assert_eq!(out, "True\n", "{who:?}");
    }
}

#[test]
fn dev_tty_opens_only_a_terminal_of_the_runs_own() {
    for who in identities("dev_tty_opens_only_a_terminal_of_the_runs_own") {
        // The payload has no controlling terminal: ENXIO, as in CI. A child
        // on a pty of the run's own devpts opens that pty as /dev/tty.
        let out = python(
            &Project::new(who),
            &[],
            "import errno, os, pty\n\
             try:\n    os.open('/dev/tty', os.O_RDWR); print('payload opened')\n\
             except OSError as e:\n    print('payload', errno.errorcode[e.errno])\n\
             pid, fd = pty.fork()\n\
             if pid == 0:\n    t = os.open('/dev/tty', os.O_RDWR)\n    os.write(t, (os.ttyname(0) + ' via /dev/tty\\n').encode()); os._exit(0)\n\
             data = b''\n\
             while True:\n    try:\n        chunk = os.read(fd, 100)\n    except OSError:\n        break\n    if not chunk:\n        break\n    data += chunk\n\
             os.waitpid(pid, 0)\n\
             print('child', data.decode().strip())",
        );
        assert!(out.starts_with("payload ENXIO\n"), "{who:?}:\n{out}");
        assert!(
            out.contains("child /dev/pts/") && out.contains(" via /dev/tty"),
            "{who:?}: what the child writes to /dev/tty reaches its pty's master:\n{out}"
        );
    }
}

#[test]
fn standard_streams_fd_links_and_process_substitution_work() {
    for who in identities("standard_streams_fd_links_and_process_substitution") {
        let out = strict(
            &Project::new(who),
            "echo out > /dev/stdout; echo in | cat /dev/stdin; echo err > /dev/stderr; \
             ls /dev/fd/ > /dev/null && echo fd-ok; bash -c 'cat <(echo substituted)'",
        );
        assert_eq!(out, "out\nin\nfd-ok\nsubstituted\n", "{who:?}");
    }
}

#[test]
fn posix_shared_memory_and_semaphores_work_in_a_private_dev_shm() {
    for who in identities("posix_shared_memory_and_semaphores_work") {
        let project = Project::new(who);
        let out = python(
            &project,
            &["--tmp-size", "32MiB"],
            "import multiprocessing as mp, os\n\
             from multiprocessing import shared_memory\n\
             lock = mp.Lock(); lock.acquire(); lock.release()\n\
             q = mp.Queue(); q.put(7); print('queue', q.get(timeout=30))\n\
             s = shared_memory.SharedMemory(create=True, size=1 << 20); s.buf[0] = 1; s.close(); s.unlink()\n\
             print('shm ok')\n\
             shm, tmp = os.statvfs('/dev/shm'), os.statvfs('/tmp')\n\
             print('sizes', shm.f_blocks * shm.f_frsize >> 20, tmp.f_blocks * tmp.f_frsize >> 20)\n\
             print('same', os.stat('/dev/shm').st_dev == os.stat('/tmp').st_dev)",
        );
        // Its own tmpfs, as large as /tmp (`--tmp-size`), not the host's.
        assert_eq!(out, "queue 7\nshm ok\nsizes 32 32\nsame False\n", "{who:?}");
    }
}

/// ctypes over glibc's mq_* (no module of Python's covers them): opens a
/// queue by name, and prints the errno name when that fails.
const MQ_PRELUDE: &str = "import ctypes, errno, os\n\
    libc = ctypes.CDLL('libc.so.6', use_errno=True)\n\
    class Attr(ctypes.Structure):\n\
    \x20   _fields_ = [('flags', ctypes.c_long), ('maxmsg', ctypes.c_long), ('msgsize', ctypes.c_long), ('curmsgs', ctypes.c_long), ('pad', ctypes.c_long * 4)]\n\
    def mq_open(name, flags, mode=0o600):\n\
    \x20   attr = Attr(0, 4, 64, 0)\n\
    \x20   q = libc.mq_open(name.encode(), flags, mode, ctypes.byref(attr))\n\
    \x20   return q if q >= 0 else errno.errorcode[ctypes.get_errno()]\n";

/// POSIX message queues (the nix crate's and many C suites' tests) work:
/// the run mounts the mqueue filesystem of its own IPC namespace at
/// /dev/mqueue, so a queue the host made is not there, and one the run
/// makes vanishes with it.
#[test]
fn posix_message_queues_work_and_are_the_runs_own() {
    let host_queue = format!("/{}", support::marker("mq"));
    // Created bare, readable and writable by everyone: were the host's
    // queues visible inside, opening it would succeed (or fail with
    // EACCES), not fail with ENOENT.
    let make = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "{MQ_PRELUDE}os.umask(0)\nq = mq_open('{host_queue}', os.O_CREAT | os.O_RDWR, 0o666)\nassert isinstance(q, int), q\nlibc.mq_send(q, b'host', 4, 0)"
        ))
        .output()
        .expect("python3");
    assert!(
        make.status.success(),
        "{}",
        String::from_utf8_lossy(&make.stderr)
    );
    let script = format!(
        "{MQ_PRELUDE}\
         q = mq_open('/sandbox-queue', os.O_CREAT | os.O_RDWR)\n\
         assert isinstance(q, int), q\n\
         assert libc.mq_send(q, b'hello', 5, 0) == 0, errno.errorcode[ctypes.get_errno()]\n\
         buf = ctypes.create_string_buffer(64)\n\
         n = libc.mq_receive(q, buf, 64, None)\n\
         print('received', buf.raw[:n].decode())\n\
         print('listed', sorted(os.listdir('/dev/mqueue')))\n\
         flags = os.statvfs('/dev/mqueue').f_flag\n\
         print('nosuid nodev noexec', all(flags & f for f in (os.ST_NOSUID, os.ST_NODEV, os.ST_NOEXEC)))\n\
         print('host queue', mq_open('{host_queue}', os.O_RDWR))\n\
         print('unlink', libc.mq_unlink(b'/sandbox-queue'))\n"
    );
    let mut seen = Vec::new();
    for who in identities("posix_message_queues_work_and_are_the_runs_own") {
        let project = Project::new(who);
        seen.push((who, python(&project, &[], &script)));
    }
    let removed = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "{MQ_PRELUDE}assert libc.mq_unlink(b'{host_queue}') == 0"
        ))
        .output()
        .expect("python3");
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    for (who, out) in seen {
        assert_eq!(
            out,
            "received hello\nlisted ['sandbox-queue']\nnosuid nodev noexec True\nhost queue ENOENT\nunlink 0\n",
            "{who:?}"
        );
    }
}

/// An id the run does not map answers as bare for an unprivileged user:
/// EPERM (libuv's `fs_chown`, `spawn_setuid_fails`), not the kernel's
/// EINVAL for an id without a mapping; the run's own ids and "unchanged"
/// still reach the kernel. Both filter modes.
#[test]
fn setuid_setgid_and_chown_to_foreign_ids_fail_with_eperm_as_bare() {
    let script = "import errno, os\n\
        def attempt(call, *args):\n\
        \x20   try:\n\
        \x20       call(*args)\n\
        \x20       return 'ok'\n\
        \x20   except OSError as e:\n\
        \x20       return errno.errorcode[e.errno]\n\
        open('owned', 'w').close()\n\
        uid, gid = os.getuid(), os.getgid()\n\
        print('setuid(0)', attempt(os.setuid, 0))\n\
        print('setgid(0)', attempt(os.setgid, 0))\n\
        print('chown(0, 0)', attempt(os.chown, 'owned', 0, 0))\n\
        print('chown(-1, 0)', attempt(os.chown, 'owned', -1, 0))\n\
        print('setresuid(-1, 0, -1)', attempt(os.setresuid, -1, 0, -1))\n\
        print('setuid(own)', attempt(os.setuid, uid))\n\
        print('setgid(own)', attempt(os.setgid, gid))\n\
        print('chown(own)', attempt(os.chown, 'owned', uid, gid))\n\
        print('chown(-1, -1)', attempt(os.chown, 'owned', -1, -1))\n\
        print('setuid(-1)', attempt(os.setuid, -1))\n";
    let want = "setuid(0) EPERM\nsetgid(0) EPERM\nchown(0, 0) EPERM\nchown(-1, 0) EPERM\n\
                setresuid(-1, 0, -1) EPERM\nsetuid(own) ok\nsetgid(own) ok\nchown(own) ok\n\
                chown(-1, -1) ok\nsetuid(-1) EINVAL\n";
    for who in identities("setuid_setgid_and_chown_to_foreign_ids_fail_with_eperm") {
        for profile in ["strict", "standard"] {
            let project = Project::new(who);
            let out = project.run_with(&["--profile", profile], &["python3", "-c", script]);
            assert_ok(&out, profile);
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                want,
                "{who:?} {profile}"
            );
        }
    }
}

#[test]
fn proc_files_runtimes_read_at_start_up_are_readable() {
    let files = [
        "/proc/self/status",
        "/proc/self/maps",
        "/proc/self/mountinfo",
        "/proc/self/cgroup",
        "/proc/self/limits",
        "/proc/meminfo",
        "/proc/cpuinfo",
        "/proc/stat",
        "/proc/uptime",
        "/proc/loadavg",
        "/proc/filesystems",
        "/proc/sys/kernel/osrelease",
        "/proc/sys/kernel/pid_max",
        "/proc/sys/vm/overcommit_memory",
    ];
    let script: String = files
        .iter()
        .map(|f| format!("head -c1 {f} > /dev/null && echo 'read {f}'; "))
        .collect();
    for who in identities("proc_files_runtimes_read_at_start_up") {
        let out = strict(&Project::new(who), &script);
        for file in files {
            assert!(
                out.contains(&format!("read {file}\n")),
                "{who:?}: {file}:\n{out}"
            );
        }
    }
}

/// Review finding: a run's message queues are charged to the host uid the
/// run maps (RLIMIT_MSGQUEUE is counted per user up the user-namespace
/// chain), so since the run got an mqueue of its own one payload can spend
/// the whole allowance while it runs: every other run of the same caller
/// (and, unprivileged, the caller's own programs) then fails mq_open with
/// EMFILE until it ends. Another run must still get a small queue.
#[test]
fn one_run_cannot_spend_the_message_queue_allowance_of_every_other_run() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::Stdio;
    let hog = format!(
        "{MQ_PRELUDE}\
         made = 0\n\
         for size in (8192, 1024, 64, 1):\n\
         \x20   while True:\n\
         \x20       attr = Attr(0, 10 if size > 1 else 1, size, 0)\n\
         \x20       q = libc.mq_open(('/hog%d' % made).encode(), os.O_CREAT | os.O_RDWR, 0o600, ctypes.byref(attr))\n\
         \x20       if q < 0:\n\
         \x20           break\n\
         \x20       made += 1\n\
         print('held', made, errno.errorcode[ctypes.get_errno()], flush=True)\n\
         import sys; sys.stdin.read()\n"
    );
    let probe =
        format!("{MQ_PRELUDE}print('other run', mq_open('/mine', os.O_CREAT | os.O_RDWR))\n");
    for who in identities("one_run_cannot_spend_the_message_queue_allowance") {
        let project = Project::new(who);
        let mut holder = project
            .command()
            .args(["run", "--profile", "strict", "--", "python3", "-c", &hog])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sandbox starts");
        let mut line = String::new();
        BufReader::new(holder.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the hog's line");
        assert!(line.starts_with("held "), "{who:?}: {line}");
        let other = python(&Project::new(who), &[], &probe);
        let _ = holder.stdin.take().map(|mut stdin| stdin.flush());
        let _ = holder.wait();
        assert!(
            other.starts_with("other run ") && !other.contains("EMFILE"),
            "{who:?}: while one run holds {line} another run gets: {other}"
        );
    }
}
