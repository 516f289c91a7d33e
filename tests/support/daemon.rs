//! The one driver of `sandbox daemon` in the tests: a real daemon on a
//! socket, state directory and config of its own in a temporary directory,
//! started the way systemd starts it (ready once it says `READY=1` on
//! `NOTIFY_SOCKET`), its stdout and stderr in a log, killed when dropped;
//! and the two clients the tests talk to it with (raw HTTP/1.1, and
//! `curl --unix-socket` as any uid).

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A daemon under test.
pub struct Daemon {
    dir: tempfile::TempDir,
    /// Its socket.
    pub socket: PathBuf,
    /// Its state directory (database and spool).
    pub state: PathBuf,
    /// Its config file.
    pub config: PathBuf,
    /// More arguments of `sandbox daemon` (`-v`).
    args: Vec<String>,
    child: Option<Child>,
}

/// `sandbox daemon --socket SOCKET --state-dir STATE [--config CONFIG]`
/// on `base` (the binary, as whoever runs it).
pub fn command(mut base: Command, socket: &Path, state: &Path, config: Option<&Path>) -> Command {
    base.arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--state-dir")
        .arg(state);
    if let Some(config) = config {
        base.arg("--config").arg(config);
    }
    base
}

impl Daemon {
    /// Start a daemon with this config (`[daemon]` and `[[allow]]` tables;
    /// the socket and state directory come from the command line; `{dir}`
    /// stands for the daemon's directory, [`Daemon::dir`]).
    pub fn start(config_toml: &str) -> Daemon {
        Daemon::start_with(config_toml, &[])
    }

    /// [`Daemon::start`] with more arguments of `sandbox daemon`.
    pub fn start_with(config_toml: &str, args: &[&str]) -> Daemon {
        let mut daemon = Daemon::stopped();
        daemon.args = args.iter().map(|a| a.to_string()).collect();
        daemon.launch(config_toml);
        daemon
    }

    /// A daemon's directory, with nothing running yet (for a test that
    /// prepares its state directory first): [`Daemon::launch`] starts it.
    pub fn stopped() -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sandbox-daemon-test-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        // Other users (the peer-auth tests, projects below it) reach the
        // socket through it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        Daemon {
            socket: dir.path().join("sandbox.sock"),
            state: dir.path().join("state"),
            config: dir.path().join("daemon.toml"),
            dir,
            args: Vec::new(),
            child: None,
        }
    }

    /// Write `config_toml` (`{dir}` replaced) and start the daemon on it.
    pub fn launch(&mut self, config_toml: &str) {
        let text = config_toml.replace("{dir}", &self.dir.path().display().to_string());
        std::fs::write(&self.config, text).expect("config");
        self.spawn();
    }

    /// A daemon started by `command` (see [`command`]; another identity's,
    /// another environment) on `socket`, its files in `dir`; waited for
    /// like every other.
    pub fn adopt(dir: tempfile::TempDir, socket: PathBuf, command: Command) -> Daemon {
        let mut daemon = Daemon {
            state: dir.path().join("state"),
            config: dir.path().join("daemon.toml"),
            socket,
            dir,
            args: Vec::new(),
            child: None,
        };
        daemon.spawn_command(command);
        daemon
    }

    /// The temporary directory the daemon's files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A project directory `name` below [`Daemon::dir`], owned by `owner`
    /// (uid and gid) when given.
    pub fn project(&self, name: &str, owner: Option<u32>) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).expect("project");
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&path, Some(uid), Some(uid)).expect("chown");
        }
        path
    }

    fn spawn(&mut self) {
        let mut command = command(
            Command::new(super::sandbox_bin()),
            &self.socket,
            &self.state,
            Some(&self.config),
        );
        command.args(&self.args);
        self.spawn_command(command);
    }

    fn spawn_command(&mut self, mut command: Command) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("daemon.log"))
            .expect("daemon log");
        let notify_path = self
            .dir
            .path()
            .join(format!("notify-{}", super::marker("n")));
        let notify = UnixDatagram::bind(&notify_path).expect("notify socket");
        // A daemon of another user says READY=1 on it too.
        std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o777))
            .expect("chmod");
        notify.set_nonblocking(true).expect("nonblocking");
        let child = command
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("sandbox daemon starts");
        self.child = Some(child);
        self.wait_ready(&notify);
        let _ = std::fs::remove_file(&notify_path);
    }

    /// Ready is what systemd waits for: `READY=1` (the daemon sends it once
    /// its socket listens and the API is served).
    fn wait_ready(&mut self, notify: &UnixDatagram) {
        let mut said = None;
        let ready = super::wait::holds_within(Duration::from_secs(60), || {
            let mut buffer = [0u8; 64];
            if let Ok(n) = notify.recv(&mut buffer) {
                said = Some(buffer[..n].to_vec());
                return true;
            }
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "the daemon exited ({status}) before it was ready:\n{}",
                        self.log()
                    );
                }
            }
            false
        });
        assert!(
            ready,
            "the daemon on {} never said READY=1 on NOTIFY_SOCKET:\n{}",
            self.socket.display(),
            self.log()
        );
        assert_eq!(
            said.as_deref(),
            Some(&b"READY=1"[..]),
            "the daemon's first word on NOTIFY_SOCKET:\n{}",
            self.log()
        );
    }

    /// What the daemon wrote on stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL the daemon (its runs' processes are what the test checks).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM the daemon, as systemd stops it, and wait for its exit
    /// (its runs have at most their cancel grace and a few seconds).
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("SIGTERM");
        match super::wait::exit_within(&mut child, Duration::from_secs(120)) {
            Some(status) => status,
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not stop on SIGTERM:\n{}", self.log());
            }
        }
    }

    /// Start it again on the same socket, state directory and config.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The daemon's process, left to the caller (which signals and reaps
    /// it itself).
    pub fn take_child(&mut self) -> Child {
        self.child.take().expect("running")
    }

    /// `curl` to this daemon as the test's own user (`as_uid` None) or
    /// another uid: see [`curl`].
    pub fn curl(
        &self,
        as_uid: Option<u32>,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        curl(&self.socket, as_uid, method, path, body)
    }

    /// [`Daemon::curl`] of a JSON answer: see [`curl_json`].
    pub fn json(
        &self,
        as_uid: Option<u32>,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, Value) {
        curl_json(&self.socket, as_uid, method, path, body)
    }

    /// `sandbox ARGS` talking to this daemon (through the environment
    /// variable, so `run` goes to the daemon too), run by root.
    pub fn cli(&self) -> Command {
        let mut cmd = Command::new(super::sandbox_bin());
        cmd.env("SANDBOX_DAEMON", &self.socket).stdin(Stdio::null());
        cmd
    }

    /// `sandbox ARGS` run by the throwaway unprivileged user, in `cwd`.
    pub fn cli_as_user(&self, cwd: &Path) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(super::binary_for_test_user());
        cmd.env("SANDBOX_DAEMON", &self.socket)
            .env_remove("XDG_RUNTIME_DIR")
            .current_dir(cwd)
            .stdin(Stdio::null())
            .uid(super::TEST_UID)
            .gid(super::TEST_GID);
        cmd
    }

    /// One request over the socket (HTTP/1.1, one connection): the status
    /// and the body, parsed as JSON when it is JSON.
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        self.try_request(method, path, body)
            .unwrap_or_else(|err| panic!("{method} {path}: {err}\n{}", self.log()))
    }

    /// The body of a request, whole, as bytes (the NDJSON of events).
    pub fn request_bytes(&self, method: &str, path: &str) -> (u16, Vec<u8>) {
        raw_request(&self.socket, method, path, None)
            .unwrap_or_else(|err| panic!("{method} {path}: {err}\n{}", self.log()))
    }

    fn try_request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> std::io::Result<(u16, Value)> {
        let (status, bytes) = raw_request(&self.socket, method, path, body)?;
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, value))
    }

    /// A run's object, polled until it is over.
    pub fn wait_finished(&self, id: &str) -> Value {
        self.poll_until_over(id, || self.request("GET", &format!("/v1/runs/{id}"), None))
    }

    /// [`Daemon::wait_finished`], asked with `curl` as `as_uid` (None:
    /// the test's own user).
    pub fn wait_finished_as(&self, as_uid: Option<u32>, id: &str) -> Value {
        self.poll_until_over(id, || {
            self.json(as_uid, "GET", &format!("/v1/runs/{id}"), None)
        })
    }

    fn poll_until_over(&self, id: &str, fetch: impl Fn() -> (u16, Value)) -> Value {
        let mut last = Value::Null;
        super::wait::within(Duration::from_secs(120), || {
            let (status, run) = fetch();
            assert_eq!(status, 200, "run {id}: {run}");
            let over = !matches!(run["state"].as_str(), Some("queued" | "running"));
            last = run;
            over.then_some(())
        })
        .unwrap_or_else(|| panic!("run {id} never ended: {last}"));
        last
    }

    /// The output bytes of a finished run (stdout, stderr), from its log.
    pub fn output(&self, id: &str) -> (Vec<u8>, Vec<u8>, Vec<Value>) {
        let (status, body) = self.request_bytes("GET", &format!("/v1/runs/{id}/events?since=0"));
        assert_eq!(status, 200, "events of {id}");
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut records = Vec::new();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let record: Value = serde_json::from_slice(line).expect("one JSON record per line");
            let bytes = chunk_bytes(&record);
            match record["type"].as_str() {
                Some("stdout") => stdout.extend(bytes),
                Some("stderr") => stderr.extend(bytes),
                _ => {}
            }
            records.push(record);
        }
        (stdout, stderr, records)
    }

    /// The id of the newest run whose command line contains `marker`
    /// (polled until there is one).
    pub fn find_run(&self, marker: &str) -> Value {
        let mut last = Value::Null;
        super::wait::within(Duration::from_secs(60), || {
            let (_, list) = self.request("GET", "/v1/runs?limit=1000", None);
            let found = list["runs"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|run| run["command"].to_string().contains(marker))
                .cloned();
            last = list;
            found
        })
        .unwrap_or_else(|| panic!("no run with {marker} appeared: {last}"))
    }

    /// The launcher process (`sandbox __launch`), the daemon's child.
    pub fn launcher_pid(&self) -> Option<u32> {
        super::children_of(self.pid())
            .into_iter()
            .find(|pid| cmdline(*pid).contains("__launch"))
    }
}

/// Warm sandboxes: the daemon with `[pool] enabled` and a rule for the
/// caller over projects below /tmp.
pub fn pooled_daemon() -> Daemon {
    Daemon::start(&format!(
        "[daemon]\nmax_concurrent = 4\n[pool]\nenabled = true\nidle = \"60s\"\n[[allow]]\nuids = [{}]\nprojects = [\"/tmp\"]\n",
        nix::unistd::geteuid().as_raw()
    ))
}

/// Submit `command` in `project`, wait for the end, and return (run
/// object, stdout, stderr).
pub fn run_to_end(daemon: &Daemon, project: &Path, command: &[&str]) -> (Value, String, String) {
    let body = serde_json::json!({"command": command, "project": project});
    let (status, answer) = daemon.request("POST", "/v1/runs", Some(&body));
    assert_eq!(status, 202, "{answer}\n{}", daemon.log());
    let id = answer["id"].as_str().expect("run id").to_string();
    let finished = daemon.wait_finished(&id);
    let (stdout, stderr, _) = daemon.output(&id);
    (
        finished,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Every warm sandbox of the caller's the daemon prepares is ready, and
/// there is one: the daemon says so in `/v1/info` (`pool.ready`,
/// `pool.preparing`, counted over every key of the caller's) once the
/// launcher reported them built. Waiting for `ready` alone would take a
/// sandbox warm for another profile for the one the next run needs.
pub fn wait_for_warm_sandbox(daemon: &Daemon) {
    let ready = super::wait::holds_within(Duration::from_secs(60), || {
        let (_, info) = daemon.request("GET", "/v1/info", None);
        info["pool"]["ready"].as_u64().unwrap_or(0) > 0
            && info["pool"]["preparing"].as_u64() == Some(0)
    });
    assert!(ready, "no warm sandbox was prepared:\n{}", daemon.log());
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let launcher = self.child.as_ref().and_then(|_| self.launcher_pid());
        self.kill();
        if let Some(pid) = launcher {
            // The launcher ends its runs and removes their cgroups once the
            // daemon is gone (at most 15 s): given that time, a test leaves
            // no cgroup behind. Tests must not leave a launcher behind if
            // the daemon's death did not end it (that failure is asserted
            // where it matters).
            super::wait::holds_within(Duration::from_secs(20), || {
                !Path::new(&format!("/proc/{pid}/exe")).exists()
            });
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The bytes of a `stdout`/`stderr` record.
pub fn chunk_bytes(record: &Value) -> Vec<u8> {
    use base64::Engine;
    if let Some(text) = record["data"].as_str() {
        return text.as_bytes().to_vec();
    }
    if let Some(b64) = record["data_b64"].as_str() {
        return base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("data_b64 is base64");
    }
    Vec::new()
}

/// A process's command line, NULs as spaces ("" when it is gone).
pub fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
        .unwrap_or_default()
}

/// Whether `curl` with `--unix-socket` is there.
pub fn have_curl() -> bool {
    super::commands_exist(&["curl"])
}

/// `curl` on `socket` (a real client of the API) as the test's own user
/// (`as_uid` None) or another uid: the HTTP status and the body.
pub fn curl(
    socket: &Path,
    as_uid: Option<u32>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new("curl");
    command
        .args([
            "-s",
            "-S",
            "--max-time",
            "30",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-X",
            method,
        ])
        .arg("--unix-socket")
        .arg(socket)
        .arg(format!("http://daemon{path}"));
    if body.is_some() {
        command.args([
            "-H",
            "content-type: application/json",
            "--data-binary",
            "@-",
        ]);
    }
    if let Some(uid) = as_uid {
        command.uid(uid).gid(uid);
    }
    command.stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = command.spawn().expect("curl starts");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        if let Some(body) = body {
            stdin.write_all(body.as_bytes()).expect("curl's stdin");
        }
    }
    let out = child.wait_with_output().expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// [`curl`] of an answer that must be JSON.
pub fn curl_json(
    socket: &Path,
    as_uid: Option<u32>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, Value) {
    let (code, text) = curl(socket, as_uid, method, path, body);
    let value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{method} {path}: {code} {text:?} is not JSON: {err}"));
    (code, value)
}

/// One HTTP/1.1 exchange on a fresh connection, read to its end.
pub fn raw_request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(super::wait::limit(Duration::from_secs(300))))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: sandbox\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&answer[..end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let mut body = answer[end + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok((status, body))
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}

/// The host processes of `uid` named `comm` (`sandbox-run`: a caller's run
/// supervisors; `sandbox-warm`: warm ones).
pub fn processes_named(comm: &str, uid: u32) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if entry.metadata().map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let name = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if name.trim_end() == comm {
            out.push(pid);
        }
    }
    out
}

/// What a caller does to its run's supervisor, a process of its own uid:
/// copy every descriptor it holds (pidfd_open, pidfd_getfd) and write into
/// each. Modes: `end` (a forged `end` record saying exited 0), `flood` (12
/// MiB of forged stdout records, and the forged `end`), `finished` (a
/// forged `finished` saying status 0 on every socket, then SIGKILL to the
/// supervisor), `asks` (50,000 forged questions with far deadlines on
/// every socket, then waiting until the daemon has read them all, at most
/// argv[3] seconds: 10 scaled by the load). Prints one JSON object: what it
/// copied and where its writes went through.
pub const STEAL_AND_WRITE: &str = r#"
import ctypes, fcntl, json, os, signal, stat, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pid, mode, limit = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
def timeout(*_):
    raise TimeoutError()
signal.signal(signal.SIGALRM, timeout)
END = b'\n{"seq":99,"time_ms":0,"type":"end","state":"exited","status":0,"reason":null,"report":null}\n'
FIN = b'\n{"type":"finished","status":0,"report":{"version":1,"forged":true,"profile":"forged-profile","command":["forged-command"]},"error":null}\n'
LINE = b'{"seq":1,"time_ms":0,"type":"stdout","data":"' + b'x' * 4000 + b'"}\n'
def ask(n):
    return b'{"type":"ask","id":%d,"caller":"command:forged","action":"fs.write","target":"/forged/%d","deadline_ms":18446744073709551615}\n' % (n, n)
def write_all(fd, data, idle=5):
    # Gives up on a descriptor nobody reads (a broker socket the payload
    # never serves): no piece of 4 KiB went through in `idle` seconds.
    view = memoryview(data)
    try:
        while view:
            signal.setitimer(signal.ITIMER_REAL, idle)
            try:
                view = view[os.write(fd, view[:4096]):]
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        return True
    except (TimeoutError, OSError):
        return False
pidfd = libc.syscall(434, pid, 0)
out = {"pidfd": pidfd >= 0, "copied": {}, "refused": 0, "written": []}
try:
    numbers = sorted(int(n) for n in os.listdir('/proc/%d/fd' % pid))
except OSError:
    numbers = list(range(64))
copies = {}
for n in numbers:
    fd = libc.syscall(438, pidfd, n, 0) if pidfd >= 0 else -1
    if fd < 0:
        out["refused"] += 1
        continue
    mode_bits = os.fstat(fd).st_mode
    kind = "sock" if stat.S_ISSOCK(mode_bits) else "fifo" if stat.S_ISFIFO(mode_bits) else "reg" if stat.S_ISREG(mode_bits) else "other"
    copies[n] = (fd, kind)
    out["copied"][str(n)] = kind
for n, (fd, kind) in copies.items():
    if mode in ("end", "flood") and kind in ("fifo", "reg", "sock"):
        data = END
        if mode == "flood":
            data = LINE * (12 * 1024 * 1024 // len(LINE)) + END
        if write_all(fd, data):
            out["written"].append(n)
    elif mode == "finished" and kind == "sock":
        if write_all(fd, FIN):
            out["written"].append(n)
    elif mode == "asks" and kind == "sock":
        if write_all(fd, b"".join(ask(i) for i in range(1, 50001))):
            out["written"].append(n)
            started = time.monotonic()
            buf = bytearray(4)
            while time.monotonic() < started + limit:
                fcntl.ioctl(fd, 0x5411, buf)
                if struct.unpack("i", buf)[0] == 0:
                    break
                time.sleep(0.05)
            out["unread_%d" % n] = struct.unpack("i", buf)[0]
            out["waited_%d" % n] = time.monotonic() - started
if mode == "finished":
    os.kill(pid, signal.SIGKILL)
print(json.dumps(out))
"#;

/// Run [`STEAL_AND_WRITE`] as the test user against `pid`.
pub fn steal_and_write(pid: u32, mode: &str) -> Value {
    use std::os::unix::process::CommandExt;
    let out = Command::new("python3")
        .args(["-c", STEAL_AND_WRITE, &pid.to_string(), mode])
        .arg(super::wait::seconds(Duration::from_secs(10)).to_string())
        .uid(super::TEST_UID)
        .gid(super::TEST_GID)
        .stdin(Stdio::null())
        .output()
        .expect("python3 runs");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "the attacker printed no JSON: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The supervisor of the test user's one running run, once its sandbox
/// exists (its log has a `started` record): (run id, its log, the pid).
pub fn caller_run_supervisor(daemon: &Daemon) -> (String, PathBuf, u32) {
    let spool = daemon.state.join("spool");
    let mut last = String::new();
    super::wait::within(Duration::from_secs(60), || {
        let log = std::fs::read_dir(&spool)
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("log.ndjson"))
            .find(|log| {
                std::fs::read_to_string(log).is_ok_and(|text| text.contains("\"type\":\"started\""))
            })?;
        // The launcher's child: what the supervisor forks is named the
        // same until it executes something else (the run's janitor).
        let launcher = daemon.launcher_pid()?;
        let pids: Vec<u32> = processes_named("sandbox-run", super::TEST_UID)
            .into_iter()
            .filter(|pid| super::children_of(launcher).contains(pid))
            .collect();
        last = format!("{} supervisors: {pids:?}", log.display());
        let pid = *pids.first()?;
        let id = log.parent()?.file_name()?.to_string_lossy().into_owned();
        Some((id, log.clone(), pid))
    })
    .unwrap_or_else(|| panic!("no run of the caller started ({last}):\n{}", daemon.log()))
}

/// The daemon's peak resident set (VmHWM, KiB).
pub fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
