//! The compiled seccomp filters installed for real, in a child process.
//!
//! Installing a filter cannot be undone, so each check runs in a fresh copy
//! of this test binary: the parent re-executes itself with `CHILD_ENV` naming
//! a mode and `--exact child_entry_point`; the child installs the filters,
//! makes probe calls and prints one `probe NAME=RESULT` line per call.
//!
//! The probes (`sandbox::sys::seccomp::Probe`) are built to fail inside the
//! kernel with a known errno (EINVAL, EBADF, ESRCH...) when no filter is
//! installed, and the unfiltered run checks that; so an EPERM or ENOSYS in a
//! filtered run can only have come from the filter.

mod support;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use nix::errno::Errno;
use sandbox::profile::policy::{SyscallMode, SyscallPolicy};
use sandbox::seccomp::{compile, host_guard, SeccompError};
use sandbox::sys::seccomp::{install_filters, probe, ModeCall, Probe};

/// Selects the child's mode: `none`, `allowlist`, `denylist`, `guard` (the
/// set-id guard alone), or `x32-` and a filtered mode.
const CHILD_ENV: &str = "SANDBOX_SECCOMP_TEST_CHILD";
/// The child's exit status when installing the filters failed.
const EXIT_INSTALL_FAILED: i32 = 3;
/// The child's exit status when the filter could not be compiled.
const EXIT_COMPILE_FAILED: i32 = 4;

const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const TCGETS: u64 = 0x5401;

/// The namespace flags the deny filter refuses on `clone`.
const NAMESPACE_FLAGS: [(&str, libc::c_int); 7] = [
    ("newns", libc::CLONE_NEWNS),
    ("newuser", libc::CLONE_NEWUSER),
    ("newpid", libc::CLONE_NEWPID),
    ("newnet", libc::CLONE_NEWNET),
    ("newuts", libc::CLONE_NEWUTS),
    ("newipc", libc::CLONE_NEWIPC),
    ("newcgroup", libc::CLONE_NEWCGROUP),
];

// ---------------------------------------------------------------- child side

/// Does nothing in a normal test run; in a re-executed child it is the
/// child's whole life, and it ends the process itself.
#[test]
fn child_entry_point() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    std::process::exit(child(&mode));
}

fn policy(mode: SyscallMode) -> SyscallPolicy {
    SyscallPolicy {
        mode,
        allow: Vec::new(),
        deny: Vec::new(),
    }
}

fn child(mode: &str) -> i32 {
    // libtest has printed "test child_entry_point ... " without a newline;
    // the probe lines must each start a line of their own.
    println!();
    let (x32, filter_mode) = match mode.strip_prefix("x32-") {
        Some(rest) => (true, rest),
        None => (false, mode),
    };
    let syscall_mode = match filter_mode {
        "allowlist" => Some(SyscallMode::Allowlist),
        "denylist" => Some(SyscallMode::Denylist),
        _ => None,
    };
    let compiled = match (syscall_mode, filter_mode) {
        (Some(syscall_mode), _) => Some(compile(&policy(syscall_mode))),
        (None, "guard") => host_guard().transpose(),
        (None, _) => None,
    };
    if let Some(compiled) = compiled {
        let filter = match compiled {
            Ok(filter) => filter,
            Err(e) => {
                println!("compile={e}");
                return EXIT_COMPILE_FAILED;
            }
        };
        if let Err(errno) = install_filters(filter.programs()) {
            println!("install={errno:?}");
            return EXIT_INSTALL_FAILED;
        }
    }
    if x32 {
        // The filter kills the process with SIGSYS, which dumps core by
        // default; a test must not leave core files behind.
        let _ = nix::sys::prctl::set_dumpable(false);
        report("x32_getpid", probe(Probe::X32Getpid));
        return 0;
    }

    report("getpid", probe(Probe::Getpid));
    report("clone3", probe(Probe::Clone3));
    report("ptrace", probe(Probe::Ptrace));
    report("keyctl", probe(Probe::Keyctl));
    report("bpf", probe(Probe::Bpf));
    report("syslog", probe(Probe::Syslog));
    report("process_mrelease", probe(Probe::ProcessMrelease));
    report(
        "clone_plain",
        probe(Probe::CloneRefused {
            flags: libc::SIGCHLD as u64,
        }),
    );
    for (name, flag) in NAMESPACE_FLAGS {
        let flags = (flag | libc::SIGCHLD) as u64;
        report(
            &format!("clone_{name}"),
            probe(Probe::CloneRefused { flags }),
        );
    }
    for (name, cmd) in [
        ("ioctl_tiocsti", TIOCSTI),
        ("ioctl_tiocsti_high_bits", 0xffff_ffff_0000_0000 | TIOCSTI),
        ("ioctl_tioclinux", TIOCLINUX),
        ("ioctl_tcgets", TCGETS),
    ] {
        report(name, probe(Probe::IoctlBadFd { cmd }));
    }
    kernel_surface_probes();
    report(
        "mount",
        nix::mount::mount::<str, str, str, str>(
            Some("none"),
            "/nonexistent-sandbox-seccomp-test",
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None,
        )
        .map(|()| 0),
    );
    // Without a filter this really moves the child into a new user
    // namespace; the child exits right after, so nothing else sees it.
    report(
        "unshare",
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).map(|()| 0),
    );
    // Real work through libc: posix_spawn and pthread_create try clone3
    // first and must fall back to clone when it answers ENOSYS.
    let spawned = Command::new("true").status();
    println!(
        "probe spawn={}",
        match spawned {
            Ok(status) if status.success() => "ok".to_string(),
            Ok(status) => format!("{status}"),
            Err(e) => format!("error {e}"),
        }
    );
    let thread = std::thread::spawn(|| 7).join();
    println!(
        "probe thread={}",
        if matches!(thread, Ok(7)) {
            "ok"
        } else {
            "failed"
        }
    );
    0
}

/// Values the kernel truncates to their low 32 bits, with junk above them.
const HIGH_BITS: [(&str, u64); 2] = [("", 0), ("_high", 0xffff_ffff_0000_0000)];
const S_ISUID: u64 = libc::S_ISUID as u64;
const S_ISGID: u64 = libc::S_ISGID as u64;
const READ_IMPLIES_EXEC: u64 = 0x040_0000;
const ADDR_NO_RANDOMIZE: u64 = 0x004_0000;
const NETLINK_AUDIT: u64 = 9;

/// The set-id guard, socket families, personas and openat2.
fn kernel_surface_probes() {
    let creating = (libc::O_CREAT | libc::O_WRONLY) as u64;
    let tmpfile = (libc::O_TMPFILE | libc::O_RDWR) as u64;
    for call in ModeCall::ALL {
        for (suffix, high) in HIGH_BITS {
            let flags = high | creating;
            for (bits, mode) in [
                ("suid", S_ISUID | 0o755),
                ("sgid", S_ISGID | 0o755),
                ("plain", 0o755),
            ] {
                let name = format!("mode_{call:?}_{bits}{suffix}");
                report(
                    &name,
                    probe(Probe::Mode {
                        call,
                        flags,
                        mode: high | mode,
                    }),
                );
            }
        }
    }
    for (label, flags) in [("tmpfile", tmpfile), ("rdonly", libc::O_RDONLY as u64)] {
        let mode = S_ISUID | 0o755;
        let name = format!("mode_Openat_{label}_suid");
        report(
            &name,
            probe(Probe::Mode {
                call: ModeCall::Openat,
                flags,
                mode,
            }),
        );
    }
    report("openat2", probe(Probe::Openat2));
    for (suffix, high) in HIGH_BITS {
        for (name, family, protocol) in [
            ("unix", libc::AF_UNIX, 0),
            ("inet6", libc::AF_INET6, 0),
            ("vsock", libc::AF_VSOCK, 0),
            ("packet", libc::AF_PACKET, 0),
            ("netlink_route", libc::AF_NETLINK, 0),
            ("netlink_audit", libc::AF_NETLINK, NETLINK_AUDIT),
        ] {
            let family = high | family as u64;
            let protocol = high | protocol;
            report(
                &format!("socket_{name}{suffix}"),
                probe(Probe::Socket { family, protocol }),
            );
        }
        for (name, family) in [
            ("unix", libc::AF_UNIX),
            ("vsock", libc::AF_VSOCK),
            ("inet", libc::AF_INET),
        ] {
            let family = high | family as u64;
            report(
                &format!("socketpair_{name}{suffix}"),
                probe(Probe::Socketpair { family }),
            );
        }
        for (name, persona) in [
            ("query", 0xffff_ffff),
            ("linux", 0),
            ("linux32", 8),
            ("read_implies_exec", READ_IMPLIES_EXEC),
            ("addr_no_randomize", ADDR_NO_RANDOMIZE),
        ] {
            let persona = high | persona;
            report(
                &format!("personality_{name}{suffix}"),
                probe(Probe::Personality { persona }),
            );
        }
    }
}

fn report(name: &str, result: Result<i64, Errno>) {
    match result {
        Ok(_) => println!("probe {name}=ok"),
        Err(errno) => println!("probe {name}={errno:?}"),
    }
}

// --------------------------------------------------------------- parent side

struct ChildRun {
    status: ExitStatus,
    probes: BTreeMap<String, String>,
    stdout: String,
    stderr: String,
}

fn run_child(mode: &str) -> ChildRun {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "child_entry_point",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let probes = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("probe "))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    ChildRun {
        status: out.status,
        probes,
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Compile in the parent first so that an unsupported architecture or a
/// kernel without seccomp filters is a loud skip, not a failure.
fn filters_usable(test: &str) -> bool {
    match compile(&policy(SyscallMode::Denylist)) {
        Err(SeccompError::UnsupportedArch(arch)) => {
            return support::require(test, &format!("seccomp filters on {arch}"), false)
        }
        Err(e) => panic!("compiling the denylist filter: {e}"),
        Ok(_) => {}
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    support::require(
        test,
        "seccomp (no Seccomp: line in /proc/self/status)",
        status.lines().any(|l| l.starts_with("Seccomp:")),
    )
}

/// Run the child; None (after a loud skip) when the kernel refused the
/// filter because seccomp filtering is not available.
fn filtered_child(test: &str, mode: &str) -> Option<ChildRun> {
    if !filters_usable(test) {
        return None;
    }
    let run = run_child(mode);
    if run.status.code() == Some(EXIT_INSTALL_FAILED) {
        let unavailable = ["install=EINVAL", "install=ENOSYS"]
            .iter()
            .any(|s| run.stdout.contains(s));
        assert!(
            unavailable,
            "installing the filters failed: {}{}",
            run.stdout, run.stderr
        );
        support::require(test, "SECCOMP_SET_MODE_FILTER", false);
        return None;
    }
    Some(run)
}

fn expect(run: &ChildRun, name: &str, want: &str, why: &str) {
    assert_eq!(
        run.probes.get(name).map(String::as_str),
        Some(want),
        "{name}: {why}\nchild status {:?}\nstdout:\n{}\nstderr:\n{}",
        run.status,
        run.stdout,
        run.stderr
    );
}

/// What both filtered modes must answer.
fn expect_common(run: &ChildRun) {
    assert_eq!(
        run.status.code(),
        Some(0),
        "the filtered child must finish normally\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    for name in ["mount", "unshare", "ptrace", "keyctl", "bpf", "syslog"] {
        expect(run, name, "EPERM", "on the deny list");
    }
    expect(
        run,
        "clone3",
        "ENOSYS",
        "clone3 must answer ENOSYS so libc falls back to clone",
    );
    for (name, _) in NAMESPACE_FLAGS {
        expect(
            run,
            &format!("clone_{name}"),
            "EPERM",
            "clone with a namespace flag",
        );
    }
    expect(
        run,
        "clone_plain",
        "EINVAL",
        "clone without namespace flags reaches the kernel",
    );
    expect(
        run,
        "ioctl_tiocsti",
        "EPERM",
        "TIOCSTI injects terminal input",
    );
    expect(
        run,
        "ioctl_tiocsti_high_bits",
        "EPERM",
        "the kernel truncates ioctl commands to 32 bits (CVE-2019-10063)",
    );
    expect(
        run,
        "ioctl_tioclinux",
        "EPERM",
        "TIOCLINUX can paste into a console",
    );
    expect(
        run,
        "ioctl_tcgets",
        "EBADF",
        "other ioctls reach the kernel",
    );
    expect_set_id_guard(run);
    expect(run, "getpid", "ok", "getpid is always allowed");
    expect(
        run,
        "spawn",
        "ok",
        "posix_spawn falls back from clone3 to clone",
    );
    expect(
        run,
        "thread",
        "ok",
        "pthread_create falls back from clone3 to clone",
    );
}

/// What the kernel answers a mode probe without a filter.
fn unfiltered_mode_errno(name: &str) -> &'static str {
    if name.starts_with("mode_Fchmod_") {
        "EBADF"
    } else {
        "EFAULT"
    }
}

fn mode_probe_names() -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for call in ModeCall::ALL {
        for (suffix, _) in HIGH_BITS {
            for (bits, set_id) in [("suid", true), ("sgid", true), ("plain", false)] {
                out.push((format!("mode_{call:?}_{bits}{suffix}"), set_id));
            }
        }
    }
    out.push(("mode_Openat_tmpfile_suid".into(), true));
    out.push(("mode_Openat_rdonly_suid".into(), false));
    out
}

/// The set-id guard, in every filtered mode (the guard alone included).
fn expect_set_id_guard(run: &ChildRun) {
    for (name, set_id) in mode_probe_names() {
        if set_id {
            expect(
                run,
                &name,
                "EPERM",
                "a set-id mode is refused, whatever the high bits",
            );
        } else {
            expect(
                run,
                &name,
                unfiltered_mode_errno(&name),
                "a plain mode (or a mode the kernel ignores without O_CREAT) reaches the kernel",
            );
        }
    }
    expect(
        run,
        "openat2",
        "ENOSYS",
        "openat2's mode is out of the filter's sight: programs must fall back to openat",
    );
}

/// Socket and persona probes as the kernel answers them unfiltered.
fn expect_sockets_and_personas_unfiltered(run: &ChildRun, except: &[&str]) {
    for (name, want) in run.probes.clone() {
        if except.contains(&name.as_str()) {
            continue;
        }
        let expected = if name.starts_with("socket_") {
            "EINVAL"
        } else if name.starts_with("socketpair_") {
            "EFAULT"
        } else if name.starts_with("personality_") {
            "ok"
        } else {
            continue;
        };
        assert_eq!(want, expected, "{name} reaches the kernel\n{}", run.stdout);
    }
}

#[test]
fn without_a_filter_the_probes_fail_in_the_kernel_with_other_errnos() {
    let run = run_child("none");
    assert_eq!(run.status.code(), Some(0), "{}{}", run.stdout, run.stderr);
    expect(&run, "clone3", "EINVAL", "a NULL clone_args of size 0");
    expect(
        &run,
        "clone_plain",
        "EINVAL",
        "CLONE_SIGHAND without CLONE_VM",
    );
    for (name, _) in NAMESPACE_FLAGS {
        expect(
            &run,
            &format!("clone_{name}"),
            "EINVAL",
            "CLONE_SIGHAND without CLONE_VM",
        );
    }
    for name in [
        "ioctl_tiocsti",
        "ioctl_tiocsti_high_bits",
        "ioctl_tioclinux",
        "ioctl_tcgets",
    ] {
        expect(&run, name, "EBADF", "ioctl on fd -1");
    }
    expect(&run, "ptrace", "ESRCH", "pid 0 is nobody's tracee");
    expect(&run, "process_mrelease", "EBADF", "an invalid pidfd");
    let keyctl = run.probes.get("keyctl").map(String::as_str);
    assert!(
        matches!(keyctl, Some("EOPNOTSUPP") | Some("ENOSYS")),
        "keyctl with an unknown operation: {keyctl:?}"
    );
    for (name, _) in mode_probe_names() {
        expect(
            &run,
            &name,
            unfiltered_mode_errno(&name),
            "the mode is never looked at",
        );
    }
    expect(&run, "openat2", "EINVAL", "a size below OPEN_HOW_SIZE_VER0");
    expect_sockets_and_personas_unfiltered(&run, &[]);
    expect(&run, "getpid", "ok", "getpid");
    expect(&run, "spawn", "ok", "spawning a process");
    expect(&run, "thread", "ok", "starting a thread");
}

#[test]
fn strict_allowlist_refuses_dangerous_calls_and_answers_enosys_for_unlisted_ones() {
    let test = "strict_allowlist_refuses_dangerous_calls_and_answers_enosys_for_unlisted_ones";
    let Some(run) = filtered_child(test, "allowlist") else {
        return;
    };
    expect_common(&run);
    expect(
        &run,
        "process_mrelease",
        "ENOSYS",
        "not on the allowlist: ENOSYS so programs take their fallback",
    );
    for (suffix, _) in HIGH_BITS {
        for name in ["unix", "inet6", "netlink_route"] {
            expect(
                &run,
                &format!("socket_{name}{suffix}"),
                "EINVAL",
                "an allowed family",
            );
        }
        for name in ["vsock", "packet"] {
            let why = "not AF_UNIX, AF_INET, AF_INET6 or AF_NETLINK";
            expect(&run, &format!("socket_{name}{suffix}"), "EAFNOSUPPORT", why);
        }
        let why = "netlink other than NETLINK_ROUTE";
        expect(
            &run,
            &format!("socket_netlink_audit{suffix}"),
            "EPROTONOSUPPORT",
            why,
        );
        expect(
            &run,
            &format!("socketpair_unix{suffix}"),
            "EFAULT",
            "AF_UNIX pairs",
        );
        for name in ["vsock", "inet"] {
            let why = "socketpair is AF_UNIX only";
            expect(
                &run,
                &format!("socketpair_{name}{suffix}"),
                "EAFNOSUPPORT",
                why,
            );
        }
        for name in ["query", "linux"] {
            expect(
                &run,
                &format!("personality_{name}{suffix}"),
                "ok",
                "a plain persona",
            );
        }
        for name in ["linux32", "read_implies_exec", "addr_no_randomize"] {
            let why = "only the query and the plain persona are allowed";
            expect(&run, &format!("personality_{name}{suffix}"), "EPERM", why);
        }
    }
}

#[test]
fn standard_denylist_refuses_dangerous_calls_and_lets_the_rest_through() {
    let test = "standard_denylist_refuses_dangerous_calls_and_lets_the_rest_through";
    let Some(run) = filtered_child(test, "denylist") else {
        return;
    };
    expect_common(&run);
    expect(
        &run,
        "process_mrelease",
        "EBADF",
        "not on the deny list: reaches the kernel",
    );
    let vsock = [
        "socket_vsock",
        "socket_vsock_high",
        "socketpair_vsock",
        "socketpair_vsock_high",
    ];
    for name in vsock {
        expect(
            &run,
            name,
            "EAFNOSUPPORT",
            "vsock bypasses the network namespace",
        );
    }
    expect_sockets_and_personas_unfiltered(&run, &vsock);
}

#[test]
fn the_set_id_guard_alone_refuses_set_id_modes_and_nothing_else() {
    let test = "the_set_id_guard_alone_refuses_set_id_modes_and_nothing_else";
    let Some(run) = filtered_child(test, "guard") else {
        return;
    };
    assert_eq!(run.status.code(), Some(0), "{}{}", run.stdout, run.stderr);
    expect_set_id_guard(&run);
    expect_sockets_and_personas_unfiltered(&run, &[]);
    expect(
        &run,
        "ptrace",
        "ESRCH",
        "no syscall policy: reaches the kernel",
    );
    expect(
        &run,
        "clone_newuser",
        "EINVAL",
        "no syscall policy: reaches the kernel",
    );
    expect(
        &run,
        "clone3",
        "EINVAL",
        "no syscall policy: reaches the kernel",
    );
    expect(&run, "spawn", "ok", "spawning a process");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn an_x32_system_call_kills_the_process_in_both_modes() {
    let test = "an_x32_system_call_kills_the_process_in_both_modes";
    for mode in ["x32-allowlist", "x32-denylist"] {
        let Some(run) = filtered_child(test, mode) else {
            return;
        };
        assert_eq!(
            run.status.signal(),
            Some(libc::SIGSYS),
            "{mode}: x32 numbers share x86_64's audit arch and must be killed, got {:?}\n{}{}",
            run.status,
            run.stdout,
            run.stderr
        );
        assert!(
            !run.probes.contains_key("x32_getpid"),
            "{mode}: the x32 call returned"
        );
    }
}
