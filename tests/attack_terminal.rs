//! The terminal belongs to the person: run on a pseudo-terminal, the payload
//! tries to reconfigure it (echo off, exclusive, non-blocking), paints a
//! fake question and conceals what follows right before asking for real,
//! and reads stdin in the background to steal the answer. The person sees
//! the real request after a reset, the answer reaches only the supervisor,
//! and the terminal is as it was after the run. And the supervisor's
//! command line and environment are not visible as /proc/1 inside.

mod support;

use support::{Project, Who};

/// Runs argv[1:] with a new pty as its controlling terminal and standard
/// streams; answers the real question (the one about owned.txt) with
/// "o <code>"; then prints what the person saw (as Python bytes) and the
/// terminal's modes, file status flags and exclusive state before and after.
const DRIVER: &str = r#"
import fcntl, os, re, select, subprocess, sys, termios, time
master, slave = os.openpty()
def state():
    excl = bytearray(4)
    fcntl.ioctl(slave, 0x80045440, excl)  # TIOCGEXCL
    return (termios.tcgetattr(slave), fcntl.fcntl(slave, fcntl.F_GETFL), bytes(excl))
before = state()
def own_tty():
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
child = subprocess.Popen(sys.argv[1:], stdin=slave, stdout=slave, stderr=slave,
                         preexec_fn=own_tty, close_fds=True)
seen, answered, bound = b"", False, time.time() + 90
while child.poll() is None and time.time() < bound:
    ready, _, _ = select.select([master], [], [], 0.1)
    if ready:
        seen += os.read(master, 65536)
    asked = re.search(rb"wants fs\.write owned\.txt.*?the code (\d{4}) \(anything else denies\): ", seen, re.S)
    if asked and not answered:
        os.write(master, b"o " + asked.group(1) + b"\n")
        answered = True
if child.poll() is None:
    child.kill()
    print("TIMEOUT")
child.wait()
while select.select([master], [], [], 0.2)[0]:
    seen += os.read(master, 65536)
after = state()
print("SEEN", repr(seen))
print("ANSWERED", answered)
print("SAME-TERMIOS", before[0] == after[0])
print("SAME-FLAGS", before[1] == after[1], before[1], after[1])
print("SAME-EXCL", before[2] == after[2])
"#;

/// The payload: every trick on its stdin, a fake question, a concealing
/// escape, a background reader, then a real request.
const PAYLOAD: &str = r#"
import fcntl, os, subprocess, sys, termios
try:
    attrs = termios.tcgetattr(0)
    attrs[3] &= ~(termios.ECHO | termios.ICANON)
    termios.tcsetattr(0, termios.TCSANOW, attrs)
    print("TCSETATTR-WORKED")
except Exception as e:
    print("tcsetattr refused:", e)
try:
    fcntl.ioctl(0, termios.TIOCEXCL)
    print("TIOCEXCL-WORKED")
except Exception as e:
    print("TIOCEXCL refused:", e)
fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)
fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) & ~os.O_NONBLOCK)
thief = os.fork()
if thief == 0:
    with open("stolen.txt", "ab", buffering=0) as out:
        while True:
            try:
                data = os.read(0, 100)
            except BlockingIOError:
                continue
            if not data:
                os._exit(0)
            out.write(data)
sys.stdout.write("\x1b[2J\x1b[Hsandbox: command:/bin/sh wants fs.read README.md\r\n"
                 "  allow [o]nce? type the letter, a space and the code 0000 (anything else denies): \x1b[8m")
sys.stdout.flush()
subprocess.run(["sandbox", "ipc", "fs.write", '{"path": "owned.txt", "content": "approved"}'],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(3,))
os.kill(thief, 9)
"#;

fn field<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|line| line.strip_prefix(name))
        .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
        .trim()
}

#[test]
fn the_payload_cannot_draw_on_read_or_reconfigure_the_prompting_terminal() {
    if !support::require_root_sandbox("terminal") {
        return;
    }
    let project = Project::new(Who::Root);
    let state = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("python3")
        .args(["-c", DRIVER, support::sandbox_bin(), "run", "--"])
        .args(["python3", "-c", PAYLOAD])
        .current_dir(project.path())
        .env("SANDBOX_STATE_DIR", state.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.contains("TIMEOUT"), "{out}");
    assert_eq!(field(&out, "ANSWERED"), "True", "{out}");
    let seen = field(&out, "SEEN");

    // (b) nothing the payload did reached the terminal.
    assert!(
        !seen.contains("TCSETATTR-WORKED") && !seen.contains("TIOCEXCL-WORKED"),
        "{seen}"
    );
    assert_eq!(field(&out, "SAME-TERMIOS"), "True", "{out}");
    assert!(field(&out, "SAME-FLAGS").starts_with("True"), "{out}");
    assert_eq!(field(&out, "SAME-EXCL"), "True", "{out}");

    // (a) the real question comes after the payload's conceal escape, with a
    // reset in between, on a line of its own.
    let concealed = seen
        .rfind("\\x1b[8m")
        .expect("the payload's conceal escape");
    let real = seen
        .find("sandbox: command:python3 wants fs.write owned.txt")
        .unwrap_or_else(|| panic!("the real request is shown: {seen}"));
    assert!(concealed < real, "{seen}");
    let between = &seen[concealed..real];
    assert!(
        between.contains("\\x1b[0m"),
        "SGR reset before the question: {between}"
    );
    assert!(
        between.ends_with("\\r\\n"),
        "the question starts a line: {between}"
    );

    // (c) the answer reached the supervisor (the write was approved), not the payload.
    assert_eq!(
        std::fs::read_to_string(project.path().join("owned.txt")).unwrap(),
        "approved"
    );
    let stolen = std::fs::read_to_string(project.path().join("stolen.txt")).unwrap_or_default();
    assert!(
        !stolen.contains("o "),
        "the payload read the answer: {stolen:?}"
    );
}

#[test]
fn proc_1_shows_neither_the_supervisors_arguments_nor_its_environment() {
    if !support::require_root_sandbox("proc 1") {
        return;
    }
    let project = Project::new(Who::Root);
    let secret_dir = tempfile::tempdir().unwrap();
    let audit = secret_dir.path().join("secret-audit-path-7f3a.jsonl");
    let out = project
        .command()
        .env("HOST_ONLY_MARKER", "host-secret-value-91c2")
        .arg("run")
        .arg("--audit")
        .arg(&audit)
        .args(["--", "/bin/sh", "-c"])
        .arg("cat /proc/1/cmdline; echo; cat /proc/1/environ; cat /proc/1/comm; true")
        .output()
        .unwrap();
    support::assert_ok(&out, "run");
    let seen = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen.contains("sandbox-init"), "{seen}");
    assert!(!seen.contains("secret-audit-path-7f3a"), "{seen}");
    assert!(!seen.contains("host-secret-value-91c2"), "{seen}");
}
