//! Attacks on the host through the kernel surface the seccomp filter leaves
//! open, each performed for real by a payload inside `sandbox run`.
//!
//! The payloads are Python programs making raw system calls through ctypes,
//! so every argument register is exactly what the test says, high bits
//! included (libc wrappers would truncate them). Each attack's outcome is
//! checked where it matters: a set-id file is looked for on the host after
//! the run, not only in what the payload reports.
#![cfg(target_arch = "x86_64")]

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use support::{assert_ok, identities, Project, Who, TEST_GID, TEST_UID};

/// The raw-syscall helper every payload starts with: `call(name, nr, *args)`
/// prints `name OK` or `name ERRNO` and returns the result.
const PRELUDE: &str = r#"
import ctypes, errno, os, stat, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
HIGH = 1 << 32
AT_FDCWD = -100 & 0xffffffffffffffff
def call(name, nr, *args):
    conv = [ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_ulong(a) for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    print(name, errno.errorcode.get(ctypes.get_errno(), "?") if r < 0 else "OK", flush=True)
    return r
"#;

/// Every way to give a file a set-id bit: chmod and its siblings, the mode
/// of every creating call (high bits in the registers too), O_TMPFILE then
/// a link into the project, and openat2, whose mode seccomp cannot read.
const SET_ID_ATTACK: &str = r#"
os.umask(0)
with open("victim", "w") as f:
    f.write("exec id\n")
call("chmod_plain", 90, b"victim", 0o755)
call("chmod_suid", 90, b"victim", 0o4755)
call("chmod_sgid", 90, b"victim", 0o2755)
call("chmod_suid_high", 90, b"victim", HIGH | 0o4755)
call("chmod_suid_umode_high", 90, b"victim", 0x10000 | 0o4755)
fd = os.open("victim", os.O_RDONLY)
call("fchmod_suid", 91, fd, 0o4755)
call("fchmodat_suid", 268, AT_FDCWD, b"victim", 0o4755)
call("fchmodat2_sgid", 452, AT_FDCWD, b"victim", 0o2755, 0)
call("open_plain", 2, b"open-plain", os.O_CREAT | os.O_WRONLY, 0o755)
call("open_creat_suid", 2, b"open-creat", os.O_CREAT | os.O_WRONLY, 0o4755)
call("openat_creat_sgid_high", 257, AT_FDCWD, b"openat-creat",
     HIGH | os.O_CREAT | os.O_WRONLY, HIGH | 0o2755)
call("creat_suid", 85, b"creat", 0o4755)
call("mknod_suid", 133, b"mknod", stat.S_IFREG | 0o4755, 0)
call("mknodat_sgid", 259, AT_FDCWD, b"mknodat", stat.S_IFREG | 0o2755, 0)
call("mkdir_sgid", 83, b"dir-sgid", 0o2755)
call("mkdirat_sgid", 258, AT_FDCWD, b"dirat-sgid", 0o2755)
tmp = call("open_tmpfile_suid", 257, AT_FDCWD, b".", os.O_TMPFILE | os.O_WRONLY, 0o4755)
if tmp >= 0:
    try:
        os.link("/proc/self/fd/%d" % tmp, "tmpfile-linked", follow_symlinks=True)
        print("tmpfile_linked OK")
    except OSError as e:
        print("tmpfile_linked", errno.errorcode.get(e.errno, "?"))
how = ctypes.create_string_buffer(struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0), 24)
call("openat2_creat_suid", 437, AT_FDCWD, b"openat2", ctypes.addressof(how), 24)
"#;

/// Results of the attempts the set-id payload must see refused.
const SET_ID_REFUSED: [(&str, &str); 15] = [
    ("chmod_suid", "EPERM"),
    ("chmod_sgid", "EPERM"),
    ("chmod_suid_high", "EPERM"),
    ("chmod_suid_umode_high", "EPERM"),
    ("fchmod_suid", "EPERM"),
    ("fchmodat_suid", "EPERM"),
    ("fchmodat2_sgid", "EPERM"),
    ("open_creat_suid", "EPERM"),
    ("openat_creat_sgid_high", "EPERM"),
    ("creat_suid", "EPERM"),
    ("mknod_suid", "EPERM"),
    ("mknodat_sgid", "EPERM"),
    ("mkdir_sgid", "EPERM"),
    ("mkdirat_sgid", "EPERM"),
    ("open_tmpfile_suid", "EPERM"),
];

/// A directory outside the project that `who` can write (reports) and read
/// (profiles).
fn side_dir(who: Who) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sandbox-attack-side-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    if who == Who::User && nix::unistd::geteuid().is_root() {
        std::os::unix::fs::chown(dir.path(), Some(TEST_UID), Some(TEST_GID)).expect("chown");
    }
    dir
}

fn results(stdout: &[u8]) -> BTreeMap<String, String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn expect_results(got: &BTreeMap<String, String>, want: &[(&str, &str)], what: &str) {
    for (name, errno) in want {
        assert_eq!(
            got.get(*name).map(String::as_str),
            Some(*errno),
            "{what}: {name}\nall results: {got:?}"
        );
    }
}

/// Every path under `root` (itself included) whose mode has a set-id bit.
fn set_id_files(root: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            found.push((path.clone(), mode));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir").flatten() {
                stack.push(entry.path());
            }
        }
    }
    found
}

#[test]
fn no_set_id_file_can_be_planted_in_the_project_in_any_seccomp_mode() {
    let test = "no_set_id_file_can_be_planted_in_the_project_in_any_seccomp_mode";
    let script = format!("{PRELUDE}{SET_ID_ATTACK}");
    for who in identities(test) {
        let side = side_dir(who);
        let off = side.path().join("seccomp-off.toml");
        std::fs::write(
            &off,
            "version = 1\nextends = \"strict\"\n[enforce]\nseccomp = \"off\"\n",
        )
        .expect("profile");
        std::fs::set_permissions(&off, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let off = off.to_str().expect("UTF-8 temp path");
        for profile in ["strict", "standard", "permissive", off] {
            let project = Project::new(who);
            let report = side.path().join("report.json");
            let _ = std::fs::remove_file(&report);
            let report_arg = report.to_str().expect("UTF-8 temp path");
            let out = project.run_with(
                &["--profile", profile, "--report", report_arg],
                &["python3", "-c", &script],
            );
            let what = format!("{profile} as {who:?}");
            assert_ok(&out, &what);
            let got = results(&out.stdout);
            // The damage first: what a local user of the host would find.
            let planted = set_id_files(project.path());
            assert!(
                planted.is_empty(),
                "{what}: set-id files left on the host: {planted:?}\npayload: {got:?}"
            );
            expect_results(&got, &SET_ID_REFUSED, &what);
            expect_results(
                &got,
                &[
                    ("chmod_plain", "OK"),
                    ("open_plain", "OK"),
                    ("openat2_creat_suid", "ENOSYS"),
                ],
                &what,
            );
            if profile == off {
                let report: serde_json::Value =
                    serde_json::from_str(&std::fs::read_to_string(&report).expect("report"))
                        .expect("report JSON");
                let seccomp = &report["enforced"]["seccomp"];
                assert_eq!(seccomp["requested"], "off", "{seccomp}");
                assert_eq!(seccomp["status"], "set-id-guard", "{seccomp}");
                assert_eq!(seccomp["mode"], serde_json::Value::Null, "{seccomp}");
            }
        }
    }
}

#[test]
fn the_project_is_mounted_nosuid_and_nodev_inside() {
    let test = "the_project_is_mounted_nosuid_and_nodev_inside";
    for who in identities(test) {
        let project = Project::new(who);
        let root = std::fs::canonicalize(project.path()).expect("canonical project");
        let root = root.to_str().expect("UTF-8 temp path");
        for profile in ["strict", "standard"] {
            let out = project.run_with(&["--profile", profile], &["cat", "/proc/self/mountinfo"]);
            let what = format!("{profile} as {who:?}");
            assert_ok(&out, &what);
            let mountinfo = String::from_utf8_lossy(&out.stdout);
            let mut project_mounts = 0;
            for line in mountinfo.lines() {
                let fields: Vec<&str> = line.split(' ').collect();
                let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) else {
                    continue;
                };
                let inside = *point == root || point.starts_with(&format!("{root}/"));
                if !inside {
                    continue;
                }
                project_mounts += usize::from(*point == root);
                let options: Vec<&str> = options.split(',').collect();
                assert!(
                    options.contains(&"nosuid") && options.contains(&"nodev"),
                    "{what}: {point} is mounted without nosuid,nodev: {line}"
                );
            }
            assert!(
                project_mounts >= 1,
                "{what}: no mount at the project root {root}\n{mountinfo}"
            );
        }
    }
}

/// Socket families and netlink protocols, with and without junk in the
/// upper halves of the int registers.
const SOCKET_ATTACK: &str = r#"
def sock(name, family, type_, proto):
    fd = call(name, 41, family, type_, proto)
    if fd >= 0:
        os.close(fd)
def pair(name, family):
    fds = (ctypes.c_int * 2)()
    if call(name, 53, family, socket_stream, 0, ctypes.addressof(fds)) >= 0:
        os.close(fds[0]); os.close(fds[1])
socket_stream, socket_dgram, socket_raw, socket_seqpacket = 1, 2, 3, 5
sock("unix", 1, socket_stream, 0)
sock("inet", 2, socket_dgram, 0)
sock("netlink_route", 16, socket_raw, 0)
sock("netlink_route_high", HIGH | 16, socket_raw, HIGH | 0)
sock("vsock", 40, socket_stream, 0)
sock("vsock_high", HIGH | 40, socket_stream, 0)
sock("alg", 38, socket_seqpacket, 0)
sock("packet", 17, socket_raw, 0)
sock("netlink_sock_diag", 16, socket_raw, 4)
sock("netlink_audit", 16, socket_raw, 9)
sock("netlink_audit_high", HIGH | 16, socket_raw, HIGH | 9)
sock("netlink_uevent", 16, socket_raw, 15)
pair("pair_unix", 1)
pair("pair_vsock", 40)
pair("pair_vsock_high", HIGH | 40)
pair("pair_inet", 2)
# A type with a flag bit the kernel rejects (EINVAL) before it looks at the
# family: the filter, which looks at the family only, answers EAFNOSUPPORT
# first. EAFNOSUPPORT alone would also be a kernel without the module.
bad_type = socket_stream | 0x10
call("vsock_bad_type", 41, 40, bad_type, 0)
call("alg_bad_type", 41, 38, bad_type, 0)
fds = (ctypes.c_int * 2)()
call("pair_vsock_bad_type", 53, 40, bad_type, 0, ctypes.addressof(fds))
"#;

/// What the kernel answers the bad-type probes of [`SOCKET_ATTACK`] with no
/// filter: EINVAL, so an EAFNOSUPPORT from them inside is the filter's.
fn socket_bad_type_control() {
    expect_results(
        &bare_python(&format!("{PRELUDE}{SOCKET_ATTACK}")),
        &[
            ("vsock_bad_type", "EINVAL"),
            ("alg_bad_type", "EINVAL"),
            ("pair_vsock_bad_type", "EINVAL"),
        ],
        "bare control: the kernel checks the type before the family",
    );
}

#[test]
fn strict_sockets_are_unix_inet_and_netlink_route_only_whatever_the_high_bits() {
    let test = "strict_sockets_are_unix_inet_and_netlink_route_only_whatever_the_high_bits";
    socket_bad_type_control();
    let script = format!("{PRELUDE}{SOCKET_ATTACK}");
    for who in identities(test) {
        let project = Project::new(who);
        let out = project.run_with(&["--profile", "strict"], &["python3", "-c", &script]);
        let what = format!("strict as {who:?}");
        assert_ok(&out, &what);
        expect_results(
            &results(&out.stdout),
            &[
                ("unix", "OK"),
                ("inet", "OK"),
                ("netlink_route", "OK"),
                ("netlink_route_high", "OK"),
                ("vsock", "EAFNOSUPPORT"),
                ("vsock_high", "EAFNOSUPPORT"),
                ("alg", "EAFNOSUPPORT"),
                // Without the filter the kernel answers EPERM (no CAP_NET_RAW).
                ("packet", "EAFNOSUPPORT"),
                ("netlink_sock_diag", "EPROTONOSUPPORT"),
                ("netlink_audit", "EPROTONOSUPPORT"),
                ("netlink_audit_high", "EPROTONOSUPPORT"),
                ("netlink_uevent", "EPROTONOSUPPORT"),
                ("pair_unix", "OK"),
                ("pair_vsock", "EAFNOSUPPORT"),
                ("pair_vsock_high", "EAFNOSUPPORT"),
                ("pair_inet", "EAFNOSUPPORT"),
                ("vsock_bad_type", "EAFNOSUPPORT"),
                ("alg_bad_type", "EAFNOSUPPORT"),
                ("pair_vsock_bad_type", "EAFNOSUPPORT"),
            ],
            &what,
        );
    }
}

#[test]
fn vsock_is_refused_under_standard_and_permissive_too() {
    let test = "vsock_is_refused_under_standard_and_permissive_too";
    socket_bad_type_control();
    let script = format!("{PRELUDE}{SOCKET_ATTACK}");
    for who in identities(test) {
        let project = Project::new(who);
        for profile in ["standard", "permissive"] {
            let out = project.run_with(&["--profile", profile], &["python3", "-c", &script]);
            let what = format!("{profile} as {who:?}");
            assert_ok(&out, &what);
            expect_results(
                &results(&out.stdout),
                &[
                    ("unix", "OK"),
                    ("netlink_route", "OK"),
                    ("vsock", "EAFNOSUPPORT"),
                    ("vsock_high", "EAFNOSUPPORT"),
                    ("pair_unix", "OK"),
                    ("pair_vsock", "EAFNOSUPPORT"),
                    ("pair_vsock_high", "EAFNOSUPPORT"),
                    ("vsock_bad_type", "EAFNOSUPPORT"),
                    ("pair_vsock_bad_type", "EAFNOSUPPORT"),
                    // AF_ALG is not on the standard deny list: the kernel's own answer.
                    ("alg_bad_type", "EINVAL"),
                ],
                &what,
            );
        }
    }
}

/// `script` run by python3 on the host, outside any sandbox: the control
/// that shows what the kernel itself answers.
fn bare_python(script: &str) -> BTreeMap<String, String> {
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3 runs");
    assert_ok(&out, "the bare control");
    results(&out.stdout)
}

#[test]
fn strict_refuses_per_linux32_which_the_kernel_grants_bare() {
    let script = format!(
        "{PRELUDE}
call(\"persona_query\", 135, 0xffffffff)
call(\"persona_linux32\", 135, 8)
print(\"persona_now\", open(\"/proc/self/personality\").read().strip())
"
    );
    expect_results(
        &bare_python(&script),
        &[
            ("persona_query", "OK"),
            ("persona_linux32", "OK"),
            ("persona_now", "00000008"),
        ],
        "bare control: the kernel grants PER_LINUX32",
    );
    let test = "strict_refuses_per_linux32_which_the_kernel_grants_bare";
    for who in identities(test) {
        let project = Project::new(who);
        let out = project.run_with(&["--profile", "strict"], &["python3", "-c", &script]);
        let what = format!("strict as {who:?}");
        assert_ok(&out, &what);
        expect_results(
            &results(&out.stdout),
            &[
                ("persona_query", "OK"),
                ("persona_linux32", "EPERM"),
                ("persona_now", "00000000"),
            ],
            &what,
        );
    }
}

/// Personas that weaken the process, and the NUMA policy calls.
const PERSONA_AND_NUMA_ATTACK: &str = r#"
READ_IMPLIES_EXEC, ADDR_NO_RANDOMIZE, UNAME26 = 0x0400000, 0x0040000, 0x0020000
call("persona_query", 135, 0xffffffff)
call("persona_query_high", 135, HIGH | 0xffffffff)
call("persona_linux32", 135, 8)
call("persona_linux", 135, 0)
call("persona_read_implies_exec", 135, READ_IMPLIES_EXEC)
call("persona_read_implies_exec_high", 135, HIGH | READ_IMPLIES_EXEC)
call("persona_addr_no_randomize", 135, ADDR_NO_RANDOMIZE)
call("persona_addr_no_randomize_high", 135, 0xffffffff00000000 | ADDR_NO_RANDOMIZE)
call("persona_uname26", 135, UNAME26)
print("persona_now", open("/proc/self/personality").read().strip())
call("set_mempolicy", 238, 0, 0, 0)
call("mbind", 237, 0, 0, 0, 0, 0, 0)
call("get_mempolicy", 239, 0, 0, 0, 0, 0)
call("migrate_pages", 256, 0, 0, 0, 0)
call("move_pages", 279, 0, 0, 0, 0, 0, 0)
call("set_mempolicy_home_node", 450, 0, 0, 0, 0)
"#;

#[test]
fn strict_keeps_the_plain_persona_and_refuses_numa_policy() {
    let test = "strict_keeps_the_plain_persona_and_refuses_numa_policy";
    let script = format!("{PRELUDE}{PERSONA_AND_NUMA_ATTACK}");
    for who in identities(test) {
        let project = Project::new(who);
        let out = project.run_with(&["--profile", "strict"], &["python3", "-c", &script]);
        let what = format!("strict as {who:?}");
        assert_ok(&out, &what);
        expect_results(
            &results(&out.stdout),
            &[
                ("persona_query", "OK"),
                ("persona_query_high", "OK"),
                // Only the query and the plain persona (issue 10): the
                // filter's EPERM, where the kernel itself grants it
                // (strict_refuses_per_linux32_which_the_kernel_grants_bare).
                ("persona_linux32", "EPERM"),
                ("persona_linux", "OK"),
                ("persona_read_implies_exec", "EPERM"),
                ("persona_read_implies_exec_high", "EPERM"),
                ("persona_addr_no_randomize", "EPERM"),
                ("persona_addr_no_randomize_high", "EPERM"),
                ("persona_uname26", "EPERM"),
                ("persona_now", "00000000"),
                ("set_mempolicy", "ENOSYS"),
                ("mbind", "ENOSYS"),
                ("get_mempolicy", "ENOSYS"),
                ("migrate_pages", "ENOSYS"),
                ("move_pages", "ENOSYS"),
                ("set_mempolicy_home_node", "ENOSYS"),
            ],
            &what,
        );
    }
}

/// `[syscalls] deny` refuses the calls it names, in either mode: getppid,
/// which both modes otherwise let through (the control), answers EPERM.
#[test]
fn a_profile_deny_list_refuses_its_calls_in_both_modes() {
    let test = "a_profile_deny_list_refuses_its_calls_in_both_modes";
    let script = format!("{PRELUDE}call(\"getppid\", 110)\ncall(\"getpid\", 39)\n");
    for who in identities(test) {
        let project = Project::new(who);
        for parent in ["strict", "standard"] {
            let control = project.run_with(&["--profile", parent], &["python3", "-c", &script]);
            let what = format!("{parent} as {who:?}, control");
            assert_ok(&control, &what);
            expect_results(
                &results(&control.stdout),
                &[("getppid", "OK"), ("getpid", "OK")],
                &what,
            );
            let profile =
                format!("version = 1\nextends = \"{parent}\"\n[syscalls]\ndeny = [\"getppid\"]\n");
            let out = project.run_with_profile(&profile, &[], &["python3", "-c", &script]);
            let what = format!("{parent} with deny = [getppid] as {who:?}");
            assert_ok(&out, &what);
            expect_results(
                &results(&out.stdout),
                &[("getppid", "EPERM"), ("getpid", "OK")],
                &what,
            );
        }
    }
}
