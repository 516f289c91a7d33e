//! The CLI's HTTP/1.1 client of `sandbox daemon` (API: `docs/src/daemon.md`).
//!
//! One connection per request over the daemon's Unix socket, driven by a
//! current-thread tokio runtime that only the client commands build: a
//! local `sandbox run` must stay single-threaded and runtime-free, because
//! it clones its sandbox from its own main thread.
//!
//! Naming the socket ([`resolve_socket`], [`socket_from_env`]) touches
//! neither HTTP nor the runtime and fails with [`NoSocket`], not
//! [`ClientError`]: `sandbox` itself decides with it whether a run goes to
//! a daemon, and hands only a remote run to `sandbox-daemon`, which links
//! this client (src/faces.rs).
use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

use sandbox::jsonl::{Frame, Framer};
use sandbox::launch::protocol::LogRecord;

/// The environment variable that sends `sandbox run` to a daemon and names
/// its socket for every client command: a path, or `1` for the default.
pub const ENV_VAR: &str = "SANDBOX_DAEMON";

/// Largest NDJSON line the client holds while it waits for its end. A log
/// record carries at most one supervisor read of output (far below this);
/// a longer line means the other end is not the daemon.
const MAX_LINE: usize = 16 << 20;

/// Largest answer the client reads whole. An answer can carry what an
/// untrusted run produced (its output, audit, review diff, events), so a
/// daemon answer is bounded like any other input from the sandbox. The
/// largest answer the daemon gives whole, a review listing with its diff,
/// holds two helper outputs of at most 64 MiB each, JSON-escaped: this
/// leaves room for that, while the event stream, logs and a run's audit are
/// read line by line under [`MAX_LINE`] instead ([`copy_lines`]).
pub const MAX_ANSWER: usize = 256 << 20;

/// Why an answer's lines were not all copied (see [`copy_lines`]). The
/// whole lines before the failure are written; nothing of the line it
/// stopped in is.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// A line is longer than [`MAX_LINE`]: the copy stops before it,
    /// without holding it.
    #[error(
        "line {} of the daemon's answer is longer than {} MiB, more than the client holds \
         (the {lines} line(s) before it were written, nothing after)",
        lines + 1,
        MAX_LINE >> 20
    )]
    LineTooLong {
        /// Whole lines written before it.
        lines: u64,
    },
    /// The answer ended or broke off inside a line, or its connection
    /// failed between lines.
    #[error("the daemon's answer broke off after {lines} whole line(s){}", cut_detail(*.partial, .error.as_ref()))]
    CutOff {
        /// Whole lines written.
        lines: u64,
        /// Bytes of the unended line, left out.
        partial: usize,
        /// The connection's error, when it failed.
        error: Option<hyper::Error>,
    },
    /// Writing a line failed.
    #[error("writing after {lines} whole line(s)")]
    Write {
        /// Whole lines written before.
        lines: u64,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

fn cut_detail(partial: usize, error: Option<&hyper::Error>) -> String {
    let mut detail = String::new();
    if partial > 0 {
        detail.push_str(&format!(
            "; the {partial} byte(s) of the line it stopped in were left out"
        ));
    }
    if let Some(error) = error {
        detail.push_str(&format!(" ({error})"));
    }
    detail
}

/// What went wrong talking to the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers on the socket.
    // The cause is part of the message (not a `source`), so that it comes
    // before the fix instead of after it in `sandbox: {err:#}`.
    #[error(
        "no daemon answers on {socket}: {error} (start one with `sandbox daemon --socket {socket}`, \
         or name the running one's socket with --daemon=SOCKET or {ENV_VAR}=SOCKET)",
        socket = socket.display()
    )]
    Unreachable {
        /// The socket tried.
        socket: PathBuf,
        /// Why the connection failed.
        error: std::io::Error,
    },
    /// No socket can be named (no `$XDG_RUNTIME_DIR` for a user).
    #[error(transparent)]
    NoSocket(#[from] NoSocket),
    /// The HTTP exchange failed half-way.
    #[error("talking to the daemon at {socket} ({step}): {error} (is the daemon still running?)", socket = socket.display())]
    Http {
        /// The socket.
        socket: PathBuf,
        /// What the client was doing.
        step: &'static str,
        /// The HTTP error.
        error: hyper::Error,
    },
    /// The daemon refused the request with a JSON error.
    #[error("{message} ({fix})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The error's code (`profile_not_allowed`, `no_such_run`...).
        code: String,
        /// What is wrong.
        message: String,
        /// What to do about it.
        fix: String,
        /// Seconds to wait, from `Retry-After` (429 and 503).
        retry_after: Option<u64>,
    },
    /// The answer is not what the API describes.
    #[error("the daemon at {socket} answered {what} unreadably: {detail} (is it a `sandbox daemon` of the same version?)", socket = socket.display())]
    BadAnswer {
        /// The socket.
        socket: PathBuf,
        /// Which answer.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// An answer read whole is larger than [`MAX_ANSWER`].
    #[error(
        "the daemon at {socket} answered {path} with more than {} MiB, more than the client reads whole \
         (read it in pieces instead: the run's events with `sandbox logs`, its report with `--report FILE`)",
        MAX_ANSWER >> 20,
        socket = socket.display()
    )]
    TooLarge {
        /// The socket.
        socket: PathBuf,
        /// The request path.
        path: String,
    },
    /// The client's own runtime could not be built.
    #[error("building the client's runtime: {0}")]
    Runtime(std::io::Error),
}

/// No socket can be named (no `$XDG_RUNTIME_DIR` for a user): a usage
/// error (exit 2). Its own type, free of HTTP, so that `sandbox`, which
/// names the socket of a run before handing it over, links no client.
#[derive(Debug, thiserror::Error)]
#[error("no daemon socket: {0} (pass --daemon=SOCKET or set {ENV_VAR}=SOCKET)")]
pub struct NoSocket(String);

impl ClientError {
    /// The exit status of a client command that failed this way: 2 when
    /// the daemon refused the request itself (4xx but 429: nothing was run,
    /// like a usage error), 125 when the daemon could not be reached or
    /// could not take the request (connection, 429, 5xx).
    pub fn exit_status(&self) -> i32 {
        match self {
            ClientError::Api { status, .. } if (400..500).contains(status) && *status != 429 => {
                super::EXIT_USAGE
            }
            ClientError::NoSocket(_) => super::EXIT_USAGE,
            _ => 125,
        }
    }
}

/// The daemon's default socket: `/run/sandbox/sandbox.sock` for root,
/// `$XDG_RUNTIME_DIR/sandbox.sock` for anyone else.
pub fn default_socket() -> Result<PathBuf, NoSocket> {
    if nix::unistd::geteuid().is_root() {
        return Ok(PathBuf::from("/run/sandbox/sandbox.sock"));
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => Ok(PathBuf::from(dir).join("sandbox.sock")),
        _ => Err(NoSocket(
            "XDG_RUNTIME_DIR is not set, so there is no default socket".into(),
        )),
    }
}

/// What `SANDBOX_DAEMON` asks for: `None` when unset, empty or `0`, the
/// default socket for `1`, else the path it names.
pub fn socket_from_env() -> Result<Option<PathBuf>, NoSocket> {
    socket_from_value(std::env::var_os(ENV_VAR).as_deref())
}

fn socket_from_value(value: Option<&std::ffi::OsStr>) -> Result<Option<PathBuf>, NoSocket> {
    match value {
        None => Ok(None),
        Some(v) if v.is_empty() || v == "0" => Ok(None),
        Some(v) if v == "1" => default_socket().map(Some),
        Some(v) => Ok(Some(PathBuf::from(v))),
    }
}

/// The socket of a command that only talks to the daemon: the flag's
/// path, else the environment variable, else the default. A bare
/// `--daemon` (an empty path) names no socket, so the variable still
/// decides: an integrator sets `SANDBOX_DAEMON` once and passes the flag
/// everywhere.
pub fn resolve_socket(flag: Option<&Path>) -> Result<PathBuf, NoSocket> {
    if let Some(path) = flag.filter(|path| !path.as_os_str().is_empty()) {
        return Ok(path.to_path_buf());
    }
    match socket_from_env()? {
        Some(path) => Ok(path),
        None => default_socket(),
    }
}

/// Percent-encode one path segment, so an id typed on the command line
/// can never add a segment, a query or a `..` to the request's path.
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A complete answer.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// `Retry-After`, in seconds.
    pub retry_after: Option<u64>,
    /// The body.
    pub body: Vec<u8>,
}

/// A connection factory for one daemon socket, with the runtime that
/// drives it.
pub struct Client {
    socket: PathBuf,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    /// A client of the daemon at `socket` (nothing is connected yet).
    pub fn new(socket: PathBuf) -> Result<Client, ClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(ClientError::Runtime)?;
        Ok(Client { socket, runtime })
    }

    /// Run a future on the client's runtime.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Send one request and read the whole answer, whatever its status.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<Answer, ClientError> {
        let response = self.open(method, path, body).await?;
        self.read_whole(path, response).await
    }

    /// Read an answer's whole body, at most [`MAX_ANSWER`] bytes of it.
    async fn read_whole(
        &self,
        path: &str,
        response: hyper::Response<Incoming>,
    ) -> Result<Answer, ClientError> {
        let status = response.status().as_u16();
        let retry_after = retry_after(&response);
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|error| match error.downcast::<hyper::Error>() {
                Ok(error) => self.http("reading the answer", *error),
                Err(error) if error.is::<LengthLimitError>() => ClientError::TooLarge {
                    socket: self.socket.clone(),
                    path: path.to_string(),
                },
                Err(error) => self.bad(path, error.to_string()),
            })?
            .to_bytes()
            .to_vec();
        Ok(Answer {
            status,
            retry_after,
            body,
        })
    }

    /// Send one request; a 2xx answer's JSON body (`null` when empty), or
    /// the daemon's error.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<serde_json::Value, ClientError> {
        let answer = self.send(method, path, body).await?;
        self.check(path, &answer)?;
        if answer.body.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&answer.body).map_err(|err| self.bad(path, err.to_string()))
    }

    /// Open a request whose body is read as it arrives (the NDJSON event
    /// stream). A non-2xx answer is read whole and returned as the error.
    pub async fn stream(&self, path: &str) -> Result<Incoming, ClientError> {
        let response = self.open(Method::GET, path, None).await?;
        if response.status().is_success() {
            return Ok(response.into_body());
        }
        let answer = self.read_whole(path, response).await?;
        match self.check(path, &answer) {
            Err(err) => Err(err),
            Ok(()) => Err(self.bad(path, format!("status {}", answer.status))),
        }
    }

    /// The daemon's error for a non-2xx answer.
    pub fn check(&self, path: &str, answer: &Answer) -> Result<(), ClientError> {
        if (200..300).contains(&answer.status) {
            return Ok(());
        }
        Err(api_error(answer).unwrap_or_else(|| {
            self.bad(
                path,
                format!(
                    "status {} without a JSON error: {}",
                    answer.status,
                    String::from_utf8_lossy(&answer.body[..answer.body.len().min(200)])
                ),
            )
        }))
    }

    async fn open(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<hyper::Response<Incoming>, ClientError> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|error| ClientError::Unreachable {
                socket: self.socket.clone(),
                error,
            })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|source| self.http("starting HTTP", source))?;
        // The connection is driven beside the request; it ends with it.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let bytes = match body {
            Some(value) => serde_json::to_vec(value).unwrap_or_default(),
            None => Vec::new(),
        };
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, "sandbox");
        if body.is_some() {
            request = request.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(bytes)))
            .map_err(|err| self.bad(path, format!("the request cannot be built: {err}")))?;
        sender
            .send_request(request)
            .await
            .map_err(|source| self.http("sending the request", source))
    }

    fn http(&self, step: &'static str, error: hyper::Error) -> ClientError {
        ClientError::Http {
            socket: self.socket.clone(),
            step,
            error,
        }
    }

    /// An answer to `what` that does not follow the API.
    pub fn bad(&self, what: &str, detail: String) -> ClientError {
        ClientError::BadAnswer {
            socket: self.socket.clone(),
            what: what.to_string(),
            detail,
        }
    }
}

/// Copy an answer of JSON lines (a body from [`Client::stream`]) to `out`
/// as it arrives, one whole line at a time, each at most [`MAX_LINE`]: an
/// answer larger than [`MAX_ANSWER`] (a run's audit) is never held, and a
/// line cut off by a broken connection never reaches `out` in part. The
/// number of lines written; `out` is flushed however the copy ends.
pub async fn copy_lines(body: Incoming, out: &mut impl std::io::Write) -> Result<u64, CopyError> {
    let mut written = 0;
    let copied = copy_body(body, &mut Framer::new(MAX_LINE), out, &mut written).await;
    let flushed = out.flush().map_err(|source| CopyError::Write {
        lines: written,
        source,
    });
    copied.and(flushed).map(|()| written)
}

async fn copy_body(
    mut body: Incoming,
    lines: &mut Framer,
    out: &mut impl std::io::Write,
    written: &mut u64,
) -> Result<(), CopyError> {
    let mut frames = Vec::new();
    loop {
        let data = match body.frame().await {
            None => break,
            Some(Err(error)) => {
                return Err(CopyError::CutOff {
                    lines: *written,
                    partial: lines.skipping().unwrap_or(lines.pending()),
                    error: Some(error),
                })
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        lines.push(&data, &mut frames);
        for frame in frames.drain(..) {
            let Frame::Line(mut line) = frame else {
                return Err(CopyError::LineTooLong { lines: *written });
            };
            line.push(b'\n');
            out.write_all(&line).map_err(|source| CopyError::Write {
                lines: *written,
                source,
            })?;
            *written += 1;
        }
        // Said as soon as the line passes the bound, not after reading
        // the rest of it, which may never end.
        if lines.skipping().is_some() {
            return Err(CopyError::LineTooLong { lines: *written });
        }
    }
    match lines.finish() {
        None => Ok(()),
        Some(Frame::TooLarge { .. }) => Err(CopyError::LineTooLong { lines: *written }),
        Some(Frame::Line(partial)) => Err(CopyError::CutOff {
            lines: *written,
            partial: partial.len(),
            error: None,
        }),
    }
}

fn retry_after<B>(response: &hyper::Response<B>) -> Option<u64> {
    response
        .headers()
        .get(hyper::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The `{"error": {"code", "message", "fix"}}` of an answer.
fn api_error(answer: &Answer) -> Option<ClientError> {
    let value: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
    let error = value.get("error")?;
    let text = |key: &str| error.get(key).and_then(|v| v.as_str()).map(str::to_string);
    Some(ClientError::Api {
        status: answer.status,
        code: text("code")?,
        message: text("message")?,
        fix: text("fix").unwrap_or_else(|| "no fix given".into()),
        retry_after: answer.retry_after,
    })
}

/// Whether the status is the daemon saying "not now" (`429`, `503`).
pub fn is_busy(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE
}

/// One line of the event stream, read.
#[derive(Debug, Clone, PartialEq)]
pub struct EventLine {
    /// Its sequence number.
    pub seq: u64,
    /// The record, when its type is one this client knows.
    pub record: Option<LogRecord>,
    /// The line as the daemon sent it.
    pub raw: Vec<u8>,
}

/// Tracks the last record seen on a run's event stream, so a dropped
/// connection resumes with `since=` and nothing is shown twice.
#[derive(Debug)]
pub struct EventFollower {
    lines: Framer,
    /// The highest sequence number handed out so far.
    pub last_seq: u64,
}

impl Default for EventFollower {
    fn default() -> EventFollower {
        EventFollower::after(0)
    }
}

impl EventFollower {
    /// Starting after `since`.
    pub fn after(since: u64) -> EventFollower {
        EventFollower {
            lines: Framer::new(MAX_LINE),
            last_seq: since,
        }
    }

    /// Feed bytes of the stream; the new records they complete, in order.
    /// Records at or below the last one seen (a resumed stream's overlap)
    /// are skipped.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<EventLine>, String> {
        let mut out = Vec::new();
        let mut frames = Vec::new();
        self.lines.push(bytes, &mut frames);
        let too_long = || format!("a line longer than {} MiB", MAX_LINE >> 20);
        if self.lines.skipping().is_some() {
            return Err(format!("{} without its end", too_long()));
        }
        for frame in frames {
            let Frame::Line(line) = frame else {
                return Err(too_long());
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let value: serde_json::Value = serde_json::from_slice(&line)
                .map_err(|err| format!("an event line is not JSON ({err})"))?;
            let seq = value
                .get("seq")
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| "an event line has no \"seq\"".to_string())?;
            if seq <= self.last_seq {
                continue;
            }
            self.last_seq = seq;
            out.push(EventLine {
                seq,
                record: serde_json::from_value(value).ok(),
                raw: line,
            });
        }
        Ok(out)
    }

    /// The connection ended: forget a partial line.
    pub fn disconnected(&mut self) {
        self.lines = Framer::new(MAX_LINE);
    }

    /// The path that resumes the stream of `run` after the last record.
    pub fn path(&self, run: &str, follow: bool) -> String {
        format!(
            "/v1/runs/{}/events?since={}&follow={follow}",
            segment(run),
            self.last_seq
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandbox::launch::protocol::{Chunk, LogEvent};

    fn record(seq: u64, event: LogEvent) -> Vec<u8> {
        let mut line = serde_json::to_vec(&LogRecord {
            seq,
            time_ms: 1,
            event,
        })
        .unwrap();
        line.push(b'\n');
        line
    }

    #[test]
    fn lines_split_anywhere_come_out_whole() {
        let mut stream = Vec::new();
        stream.extend(record(1, LogEvent::Stdout(Chunk::new(b"hello\n"))));
        stream.extend(record(2, LogEvent::Stderr(Chunk::new(&[0xff, 0x00, 0x80]))));
        stream.extend(record(3, LogEvent::Exit { status: 7 }));
        for cut in 0..stream.len() {
            let mut follower = EventFollower::default();
            let mut got = follower.push(&stream[..cut]).unwrap();
            got.extend(follower.push(&stream[cut..]).unwrap());
            let seqs: Vec<u64> = got.iter().map(|line| line.seq).collect();
            assert_eq!(seqs, [1, 2, 3], "cut at {cut}");
            match &got[1].record.as_ref().unwrap().event {
                LogEvent::Stderr(chunk) => assert_eq!(chunk.bytes().unwrap(), [0xff, 0x00, 0x80]),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_resumed_stream_skips_what_was_seen_and_the_broken_line() {
        let mut follower = EventFollower::default();
        let first = record(1, LogEvent::Stdout(Chunk::new(b"a")));
        let second = record(2, LogEvent::Stdout(Chunk::new(b"b")));
        let mut piece = first.clone();
        piece.extend_from_slice(&second[..5]);
        assert_eq!(follower.push(&piece).unwrap().len(), 1);
        follower.disconnected();
        assert_eq!(
            follower.path("r1", true),
            "/v1/runs/r1/events?since=1&follow=true"
        );
        // A server that resends from an earlier point is not shown twice.
        let mut again = first.clone();
        again.extend(second.clone());
        let got = follower.push(&again).unwrap();
        assert_eq!(got.iter().map(|l| l.seq).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn unknown_record_types_are_kept_raw() {
        let mut follower = EventFollower::default();
        let got = follower
            .push(b"{\"seq\":1,\"time_ms\":2,\"type\":\"future_thing\"}\n")
            .unwrap();
        assert_eq!(got[0].seq, 1);
        assert!(got[0].record.is_none());
        assert!(follower.push(b"{\"type\":\"stdout\"}\n").is_err(), "no seq");
        assert!(follower.push(b"not json\n").is_err());
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut follower = EventFollower::default();
        assert!(follower.push(&vec![b'x'; MAX_LINE + 1]).is_err());
        let mut follower = EventFollower::default();
        assert!(follower.push(&vec![b'x'; MAX_LINE / 2]).unwrap().is_empty());
        let mut line = vec![b'x'; MAX_LINE];
        line.push(b'\n');
        assert!(follower.push(&line).is_err(), "split across pushes");
    }

    #[test]
    fn ids_cannot_leave_their_segment() {
        assert_eq!(segment("abc-1_2"), "abc-1_2");
        assert_eq!(segment("../x?y=1"), "%2E%2E%2Fx%3Fy%3D1");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn the_environment_variable_names_a_socket_or_the_default() {
        use std::ffi::OsStr;
        assert_eq!(socket_from_value(None).unwrap(), None);
        assert_eq!(socket_from_value(Some(OsStr::new(""))).unwrap(), None);
        assert_eq!(socket_from_value(Some(OsStr::new("0"))).unwrap(), None);
        assert_eq!(
            socket_from_value(Some(OsStr::new("/tmp/d.sock"))).unwrap(),
            Some(PathBuf::from("/tmp/d.sock"))
        );
        if nix::unistd::geteuid().is_root() {
            assert_eq!(
                socket_from_value(Some(OsStr::new("1"))).unwrap(),
                Some(PathBuf::from("/run/sandbox/sandbox.sock"))
            );
        }
    }

    #[test]
    fn refusals_exit_2_and_outages_125() {
        let api = |status| ClientError::Api {
            status,
            code: "x".into(),
            message: "m".into(),
            fix: "f".into(),
            retry_after: None,
        };
        assert_eq!(api(403).exit_status(), 2);
        assert_eq!(api(404).exit_status(), 2);
        assert_eq!(api(429).exit_status(), 125);
        assert_eq!(api(503).exit_status(), 125);
        assert_eq!(api(403).to_string(), "m (f)");
        let down = ClientError::Unreachable {
            socket: "/x.sock".into(),
            error: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(down.exit_status(), 125);
        assert!(down.to_string().contains("/x.sock"));
        assert!(down.to_string().contains("sandbox daemon"));
    }
}
