//! The proxy: the sandbox's only way out of its network namespace.
//!
//! One listening socket speaks three protocols, told apart by the first
//! byte a client sends: SOCKS5 (0x05), HTTP `CONNECT host:port` (a tunnel,
//! what HTTPS clients use), and plain HTTP forwarding (`GET http://host/`).
//!
//! Every connection goes to exactly one target, chosen by the name the
//! client asked for. Peers' allowlists were bypassed by a second CONNECT
//! inside an allowed tunnel, or by a kept-alive plain HTTP connection whose
//! next request named another host; here a tunnel's bytes are relayed to
//! its target and never parsed again, and every plain HTTP request is
//! parsed and must name the connection's target (URL and `Host` header
//! alike) or the connection is refused and closed.
//!
//! The decision, per target: a name or literal the allowlist covers is
//! allowed; an IP literal it does not cover is refused (an address skips
//! every name check); any other name is put to the [`Gate`] (the run's
//! broker: rules, grants, a person). Only then is the name resolved, by the
//! proxy itself ([`Resolver`]), and only the addresses that passed the
//! address checks are connected to. Each attempt ends in one
//! [`Gate::record`], for the audit and the report.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use super::allow::{split_target, Allowlist, Host, DEFAULT_PORTS};
use super::resolve::Resolver;

/// The largest request or response head read (request line or status line
/// and headers); the bound keeps a hostile client from growing memory.
const HEAD_LIMIT: usize = 64 * 1024;
/// The most header fields a head may have.
const MAX_HEADERS: usize = 128;
/// A client that has not sent a whole request head within this time (from
/// connecting, or from the end of the previous exchange) is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting to one upstream address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Relay buffer per direction: the benchmark allows the proxy 10%
/// of the bare throughput of a 100 MiB download, and tokio's default 8 KiB
/// copy buffer costs a pair of syscalls per 8 KiB.
const RELAY_BUFFER: usize = 256 * 1024;
/// The longest chunk-size line of a chunked body.
const CHUNK_LINE_LIMIT: usize = 4096;
/// How much of a plain HTTP request's URL the audit keeps.
const REQUESTED_LIMIT: usize = 256;
/// After a refusal, unread request bytes are drained this long before
/// closing, so that the kernel does not answer them with a reset that
/// destroys the refusal before the client reads it.
const LINGER: Duration = Duration::from_secs(2);

/// The most client connections the proxy serves at once. The net process
/// lives outside the run's cgroup, and each tunnel holds a relay buffer
/// each way: without a bound, a payload opening thousands of tunnels to a
/// listed host would spend the host's memory and descriptors, not its own.
/// Beyond it, connections wait in the listen queue until one ends.
pub const MAX_CONNECTIONS: usize = 256;

/// The rule an unlisted IP literal is refused under.
pub const ADDRESS_LITERAL_RULE: &str =
    "network: an address, not a name, and network.allow does not list it";

/// What a client asked to reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host as named (a name is normalized).
    pub host: Host,
    /// The port.
    pub port: u16,
    /// The request as the audit shows it: `CONNECT host:port`,
    /// `GET http://host/path`, `SOCKS5 host:port`.
    pub requested: String,
}

/// The gate's answer for a name the allowlist does not cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the connection may go ahead.
    pub allow: bool,
    /// The rule that decided, for the audit and the refusal message.
    pub rule: String,
}

/// One connection attempt's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `host:port` (IPv6 in brackets).
    pub target: String,
    /// The host alone.
    pub host: String,
    /// The request as the audit shows it.
    pub requested: String,
    /// Whether it was allowed.
    pub allowed: bool,
    /// The rule that decided.
    pub rule: String,
    /// What the client was told when the policy or the address checks
    /// refused it (the fix included); `None` when allowed, or refused for
    /// how the client used the proxy rather than for where it went.
    pub refusal: Option<String>,
}

/// The run's decisions and audit, as the proxy sees them.
pub trait Gate: Send + Sync + 'static {
    /// Decides a target the allowlist does not cover (never an IP literal).
    fn decide(&self, request: &Target) -> Pin<Box<dyn Future<Output = Verdict> + Send + '_>>;
    /// Records an attempt's outcome; called exactly once per attempt.
    fn record(&self, record: Record);
}

/// Accepts connections on `listener` forever, each in a task of its own.
pub async fn serve(
    listener: TcpListener,
    allow: Arc<Allowlist>,
    resolver: Arc<Resolver>,
    gate: Arc<dyn Gate>,
) {
    let proxy = Arc::new(Proxy {
        allow,
        resolver,
        gate,
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let proxy = Arc::clone(&proxy);
                tokio::spawn(async move {
                    let _slot = slot;
                    // A connection's errors end that connection only; the
                    // client has had its answer or lost its peer.
                    let _ = proxy.connection(stream).await;
                });
            }
            // Out of descriptors or memory: accepting again at once would
            // spin; connections that end free what the next accept needs.
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

struct Proxy {
    allow: Arc<Allowlist>,
    resolver: Arc<Resolver>,
    gate: Arc<dyn Gate>,
}

/// Why no upstream connection was made.
enum Failure {
    /// The policy refused (403, SOCKS 0x02).
    Refused(String),
    /// The name did not resolve (502, SOCKS 0x04).
    Unresolved(String),
    /// No address accepted the connection (502, SOCKS 0x05).
    Unreachable(String),
}

impl Proxy {
    async fn connection(&self, stream: TcpStream) -> io::Result<()> {
        stream.set_nodelay(true)?;
        let (read, mut write) = stream.into_split();
        let mut client = Inbound::new(read);
        let deadline = Instant::now() + HEAD_TIMEOUT;
        match tokio::time::timeout_at(deadline, client.fill()).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Ok(()),
        }
        if client.buf.first() == Some(&SOCKS_VERSION) {
            self.socks(client, write, deadline).await
        } else {
            let outcome = self.http(&mut client, &mut write, deadline).await?;
            match outcome {
                HttpOutcome::Done => Ok(()),
                HttpOutcome::Answer(status, message) => {
                    answer_and_close(&mut client, &mut write, status, &message).await
                }
                HttpOutcome::Tunnel(upstream) => relay(client, write, upstream).await,
            }
        }
    }

    /// Decides, resolves and connects; records the outcome.
    async fn open(&self, host: Host, port: u16, requested: String) -> Result<TcpStream, Failure> {
        let target = Target {
            host,
            port,
            requested,
        };
        let (allowed, rule) = if let Some(entry) = self.allow.name_rule(&target.host, port) {
            (true, format!("network.allow \"{entry}\""))
        } else if let Host::Ip(_) = target.host {
            (false, ADDRESS_LITERAL_RULE.to_string())
        } else {
            let verdict = self.gate.decide(&target).await;
            (verdict.allow, verdict.rule)
        };
        if !allowed {
            let message = refusal_message(&target, &rule);
            self.record(&target, false, rule, Some(message.clone()));
            return Err(Failure::Refused(message));
        }
        let addresses = match self.resolver.resolve(&target.host, port).await {
            Ok(addresses) => addresses,
            Err(refusal) => {
                self.record(&target, false, refusal.rule, Some(refusal.message.clone()));
                return Err(if refusal.unresolved {
                    Failure::Unresolved(refusal.message)
                } else {
                    Failure::Refused(refusal.message)
                });
            }
        };
        let connected = self.resolver.connect(&addresses, CONNECT_TIMEOUT).await;
        let shown = target.host.with_port(port);
        self.record(&target, true, rule, None);
        connected
            .map_err(|error| Failure::Unreachable(format!("connecting to {shown} failed: {error}")))
    }

    fn record(&self, target: &Target, allowed: bool, rule: String, refusal: Option<String>) {
        self.gate.record(Record {
            target: target.host.with_port(target.port),
            host: target.host.to_string(),
            requested: target.requested.clone(),
            allowed,
            rule,
            refusal,
        });
    }

    fn refuse_locally(&self, host: &Host, port: u16, requested: String, rule: String) {
        let target = Target {
            host: host.clone(),
            port,
            requested,
        };
        self.record(&target, false, rule, None);
    }

    // ---- SOCKS5 (RFC 1928) ----

    async fn socks(
        &self,
        mut client: Inbound<OwnedReadHalf>,
        mut write: OwnedWriteHalf,
        deadline: Instant,
    ) -> io::Result<()> {
        if !socks_greeting(&mut client, deadline).await? {
            // Credentials would only name the client, which is the sandbox.
            return write.write_all(&[SOCKS_VERSION, 0xff]).await;
        }
        write.write_all(&[SOCKS_VERSION, SOCKS_NO_AUTH]).await?;
        let (host, port) = match socks_request(&mut client, deadline).await? {
            SocksRequest::WrongVersion => return Ok(()),
            SocksRequest::Refused(code) => return socks_reply(&mut write, code).await,
            SocksRequest::Connect(host, port) => (host, port),
        };
        let requested = format!("SOCKS5 {}", host.with_port(port));
        match self.open(host, port, requested).await {
            Ok(upstream) => {
                // The bound address would tell the sandbox the host's
                // address; clients do not need it.
                socks_reply(&mut write, SOCKS_SUCCEEDED).await?;
                relay(client, write, upstream).await
            }
            Err(Failure::Refused(_)) => socks_reply(&mut write, SOCKS_NOT_ALLOWED).await,
            Err(Failure::Unresolved(_)) => socks_reply(&mut write, SOCKS_HOST_UNREACHABLE).await,
            Err(Failure::Unreachable(_)) => socks_reply(&mut write, SOCKS_REFUSED).await,
        }
    }

    // ---- HTTP ----

    async fn http(
        &self,
        client: &mut Inbound<OwnedReadHalf>,
        write: &mut OwnedWriteHalf,
        deadline: Instant,
    ) -> io::Result<HttpOutcome> {
        let head = match read_request(client, deadline).await {
            Ok(head) => head,
            Err(error) => return Ok(error.outcome()),
        };
        if head.method == "CONNECT" {
            let Some((host, port)) = split_target(&head.target) else {
                return Ok(bad_request(format!(
                    "CONNECT {:?}: the target must be host:port (IPv6 as [address]:port)",
                    head.target
                )));
            };
            client.consume(head.len);
            let requested = format!("CONNECT {}", host.with_port(port));
            return Ok(match self.open(host, port, requested).await {
                Ok(upstream) => {
                    write
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await?;
                    HttpOutcome::Tunnel(upstream)
                }
                Err(failure) => failure_outcome(failure),
            });
        }
        let request = match Request::check(head) {
            Ok(request) => request,
            Err(outcome) => return Ok(outcome),
        };
        if let Some(forbidden) = &request.forbidden {
            self.refuse_locally(
                &request.uri.host,
                request.uri.port,
                request.requested(),
                forbidden.rule.clone(),
            );
            return Ok(forbidden.outcome());
        }
        let upstream = match self
            .open(
                request.uri.host.clone(),
                request.uri.port,
                request.requested(),
            )
            .await
        {
            Ok(upstream) => upstream,
            Err(failure) => return Ok(failure_outcome(failure)),
        };
        self.forward(client, write, upstream, request).await
    }

    /// Forwards plain HTTP requests on one connection to one target.
    async fn forward(
        &self,
        client: &mut Inbound<OwnedReadHalf>,
        write: &mut OwnedWriteHalf,
        upstream: TcpStream,
        first: Request,
    ) -> io::Result<HttpOutcome> {
        let (upstream_read, mut upstream_write) = upstream.into_split();
        let mut upstream = Inbound::new(upstream_read);
        let (host, port) = (first.uri.host.clone(), first.uri.port);
        let mut request = first;
        let mut to_upstream = Vec::new();
        let mut to_client = Vec::new();
        loop {
            upstream_write.write_all(&request.origin_head()).await?;
            client.consume(request.head.len);
            let head_only = request.head.method == "HEAD";
            let client_keeps = keeps_alive(request.head.minor, &request.head.headers);
            let (sent, answered) = {
                let send = copy_body(client, &mut upstream_write, request.body, &mut to_upstream);
                let answer = relay_response(&mut upstream, write, head_only, &mut to_client);
                tokio::pin!(send, answer);
                let mut sent = None;
                loop {
                    tokio::select! {
                        // The request side first: a bodiless request is
                        // sent before its answer can be seen as early.
                        biased;
                        result = &mut send, if sent.is_none() => sent = Some(result),
                        answered = &mut answer => break (sent, answered),
                    }
                }
            };
            let upstream_keeps = match answered {
                Ok(keeps) => keeps,
                Err(ResponseError::NoHead(reason)) => {
                    return Ok(HttpOutcome::Answer(
                        "502 Bad Gateway",
                        format!(
                            "{} answered no valid HTTP response: {reason}",
                            host.with_port(port)
                        ),
                    ))
                }
                Err(ResponseError::Broken) => return Ok(HttpOutcome::Done),
            };
            // A response that came before the whole request body leaves the
            // connection out of step: close it.
            let in_step = matches!(sent, Some(Ok(())));
            if !(in_step && client_keeps && upstream_keeps) {
                let _ = write.shutdown().await;
                return Ok(HttpOutcome::Done);
            }
            let head = match read_request(client, Instant::now() + HEAD_TIMEOUT).await {
                Ok(head) => head,
                Err(error) => return Ok(error.outcome()),
            };
            if head.method == "CONNECT" {
                let requested = format!("CONNECT {}", head.target);
                let rule = one_target_rule(&host, port);
                self.refuse_locally(&host, port, requested, rule.clone());
                return Ok(Forbidden {
                    rule,
                    message: format!(
                        "a CONNECT on a connection that already forwards plain HTTP to {}; \
                         open a new connection for it",
                        host.with_port(port)
                    ),
                }
                .outcome());
            }
            request = match Request::check(head) {
                Ok(request) => request,
                Err(outcome) => return Ok(outcome),
            };
            if request.uri.host != host || request.uri.port != port {
                let rule = one_target_rule(&host, port);
                let asked = request.uri.host.with_port(request.uri.port);
                self.refuse_locally(
                    &request.uri.host,
                    request.uri.port,
                    request.requested(),
                    rule.clone(),
                );
                return Ok(Forbidden {
                    rule,
                    message: format!(
                        "this connection goes to {}, not {asked}; open a new connection for {asked}",
                        host.with_port(port)
                    ),
                }
                .outcome());
            }
            if let Some(forbidden) = &request.forbidden {
                self.refuse_locally(&host, port, request.requested(), forbidden.rule.clone());
                return Ok(forbidden.outcome());
            }
        }
    }
}

fn one_target_rule(host: &Host, port: u16) -> String {
    format!(
        "network: one connection, one target (this connection goes to {})",
        host.with_port(port)
    )
}

/// What to tell a client whose target was refused, with the fix.
fn refusal_message(target: &Target, rule: &str) -> String {
    let shown = target.host.with_port(target.port);
    match &target.host {
        Host::Ip(_) => format!(
            "{shown} is an address, not a name, and network.allow does not list it; \
             connect by name, or add \"{shown}\" to --net allow:... or [network] allow"
        ),
        Host::Name(name) => {
            let entry = if DEFAULT_PORTS.contains(&target.port) {
                name.clone()
            } else {
                shown.clone()
            };
            format!(
                "{shown} is not allowed ({rule}); add {entry} to --net allow:... or [network] allow"
            )
        }
    }
}

fn failure_outcome(failure: Failure) -> HttpOutcome {
    match failure {
        Failure::Refused(message) => HttpOutcome::Answer("403 Forbidden", message),
        Failure::Unresolved(message) | Failure::Unreachable(message) => {
            HttpOutcome::Answer("502 Bad Gateway", message)
        }
    }
}

fn bad_request(message: String) -> HttpOutcome {
    HttpOutcome::Answer("400 Bad Request", message)
}

/// How an HTTP connection's handling ends.
enum HttpOutcome {
    /// Nothing more to say.
    Done,
    /// A status line and a reason, then close.
    Answer(&'static str, String),
    /// Relay both ways to the upstream.
    Tunnel(TcpStream),
}

/// A request refused by policy before any decision (403, audited).
struct Forbidden {
    rule: String,
    message: String,
}

impl Forbidden {
    fn outcome(&self) -> HttpOutcome {
        HttpOutcome::Answer("403 Forbidden", self.message.clone())
    }
}

/// Writes a text/plain answer and closes the connection.
async fn answer_and_close(
    client: &mut Inbound<OwnedReadHalf>,
    write: &mut OwnedWriteHalf,
    status: &str,
    message: &str,
) -> io::Result<()> {
    let body = format!("sandbox proxy: {message}\n");
    let answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    write.write_all(answer.as_bytes()).await?;
    write.shutdown().await?;
    // Unread request bytes at close make the kernel send a reset, which
    // can discard the answer before the client reads it.
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        let mut drained = 0usize;
        while drained < HEAD_LIMIT * 16 {
            match client.io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    })
    .await;
    Ok(())
}

/// Relays both ways between the client and its one target, starting with
/// what the client sent after its request.
async fn relay(
    client: Inbound<OwnedReadHalf>,
    write: OwnedWriteHalf,
    mut upstream: TcpStream,
) -> io::Result<()> {
    let Inbound { io, buf } = client;
    if !buf.is_empty() {
        upstream.write_all(&buf).await?;
    }
    let client = io.reunite(write).map_err(io::Error::other)?;
    super::splice::relay(&client, &upstream).await
}

// ---- SOCKS constants ----

const SOCKS_VERSION: u8 = 5;
const SOCKS_NO_AUTH: u8 = 0;
const SOCKS_CONNECT: u8 = 1;
const SOCKS_SUCCEEDED: u8 = 0;
const SOCKS_GENERAL_FAILURE: u8 = 1;
const SOCKS_NOT_ALLOWED: u8 = 2;
const SOCKS_HOST_UNREACHABLE: u8 = 4;
const SOCKS_REFUSED: u8 = 5;
const SOCKS_COMMAND_UNSUPPORTED: u8 = 7;
const SOCKS_ADDRESS_TYPE_UNSUPPORTED: u8 = 8;

/// Reads a SOCKS5 greeting; whether the client offers "no authentication".
async fn socks_greeting<R: AsyncRead + Unpin>(
    client: &mut Inbound<R>,
    deadline: Instant,
) -> io::Result<bool> {
    client.need(2, deadline).await?;
    let methods = usize::from(client.buf[1]);
    client.need(2 + methods, deadline).await?;
    let no_auth = client.buf[2..2 + methods].contains(&SOCKS_NO_AUTH);
    client.consume(2 + methods);
    Ok(no_auth)
}

/// What a SOCKS5 request (after the greeting) asks for.
#[derive(Debug, PartialEq)]
enum SocksRequest {
    /// Not SOCKS version 5: the connection is closed unanswered.
    WrongVersion,
    /// Answered with this reply code and closed.
    Refused(u8),
    /// A CONNECT to a target the allowlist decides on.
    Connect(Host, u16),
}

async fn socks_request<R: AsyncRead + Unpin>(
    client: &mut Inbound<R>,
    deadline: Instant,
) -> io::Result<SocksRequest> {
    client.need(4, deadline).await?;
    let (version, command, address_type) = (client.buf[0], client.buf[1], client.buf[3]);
    if version != SOCKS_VERSION {
        return Ok(SocksRequest::WrongVersion);
    }
    let (host, address_len) = match address_type {
        1 => {
            client.need(4 + 4 + 2, deadline).await?;
            let octets: [u8; 4] = client.buf[4..8].try_into().map_err(io::Error::other)?;
            (Some(Host::Ip(octets.into())), 4)
        }
        3 => {
            client.need(5, deadline).await?;
            let len = usize::from(client.buf[4]);
            client.need(5 + len + 2, deadline).await?;
            let host = std::str::from_utf8(&client.buf[5..5 + len])
                .ok()
                .and_then(|name| Host::parse(name).ok());
            (host, 1 + len)
        }
        4 => {
            client.need(4 + 16 + 2, deadline).await?;
            let octets: [u8; 16] = client.buf[4..20].try_into().map_err(io::Error::other)?;
            (Some(Host::Ip(octets.into())), 16)
        }
        _ => return Ok(SocksRequest::Refused(SOCKS_ADDRESS_TYPE_UNSUPPORTED)),
    };
    let port_at = 4 + address_len;
    let port = u16::from_be_bytes([client.buf[port_at], client.buf[port_at + 1]]);
    client.consume(port_at + 2);
    if command != SOCKS_CONNECT {
        // BIND and UDP ASSOCIATE would open ways in and out the
        // allowlist cannot see.
        return Ok(SocksRequest::Refused(SOCKS_COMMAND_UNSUPPORTED));
    }
    Ok(match host.filter(|_| port != 0) {
        Some(host) => SocksRequest::Connect(host, port),
        None => SocksRequest::Refused(SOCKS_GENERAL_FAILURE),
    })
}

async fn socks_reply(write: &mut OwnedWriteHalf, code: u8) -> io::Result<()> {
    write
        .write_all(&[SOCKS_VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0])
        .await
}

// ---- Buffered reading ----

/// A reader with the bytes read but not yet consumed.
struct Inbound<R> {
    io: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Inbound<R> {
    fn new(io: R) -> Self {
        Inbound {
            io,
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Reads more; 0 at end of stream.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        self.io.read_buf(&mut self.buf).await
    }

    fn consume(&mut self, n: usize) {
        self.buf.drain(..n.min(self.buf.len()));
    }

    /// Reads until at least `n` bytes are buffered.
    async fn need(&mut self, n: usize, deadline: Instant) -> io::Result<()> {
        while self.buf.len() < n {
            let read = tokio::time::timeout_at(deadline, self.fill())
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "the client went silent"))??;
            if read == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok(())
    }

    /// Takes one line (with its line ending) of at most `limit` bytes.
    async fn line(&mut self, limit: usize) -> io::Result<Vec<u8>> {
        loop {
            if let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
                if end >= limit {
                    break;
                }
                return Ok(self.buf.drain(..=end).collect());
            }
            if self.buf.len() >= limit {
                break;
            }
            if self.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed in the middle of a chunked body",
                ));
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a line of a chunked body is too long",
        ))
    }
}

// ---- Request heads ----

/// A parsed request head, owned.
struct RequestHead {
    method: String,
    target: String,
    minor: u8,
    headers: Vec<(String, Vec<u8>)>,
    /// Its length in the buffer.
    len: usize,
}

enum HeadError {
    /// The client closed or went silent between requests.
    Gone,
    TooLarge,
    Malformed(String),
}

impl HeadError {
    fn outcome(self) -> HttpOutcome {
        match self {
            HeadError::Gone => HttpOutcome::Done,
            HeadError::TooLarge => HttpOutcome::Answer(
                "431 Request Header Fields Too Large",
                format!(
                    "the request head is larger than {} KiB or has more than {MAX_HEADERS} fields",
                    HEAD_LIMIT / 1024
                ),
            ),
            HeadError::Malformed(reason) => bad_request(format!("malformed request: {reason}")),
        }
    }
}

async fn read_request(
    client: &mut Inbound<OwnedReadHalf>,
    deadline: Instant,
) -> Result<RequestHead, HeadError> {
    loop {
        if !client.buf.is_empty() {
            if let Some(head) = parse_request(&client.buf)? {
                return Ok(head);
            }
            if client.buf.len() >= HEAD_LIMIT {
                return Err(HeadError::TooLarge);
            }
        }
        match tokio::time::timeout_at(deadline, client.fill()).await {
            Ok(Ok(0)) if client.buf.is_empty() => return Err(HeadError::Gone),
            Ok(Ok(0)) => {
                return Err(HeadError::Malformed(
                    "the connection closed in the middle of the request head".into(),
                ))
            }
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => return Err(HeadError::Gone),
        }
    }
}

fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut fields);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len > HEAD_LIMIT => Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(len)) => Ok(Some(RequestHead {
            method: request.method.unwrap_or_default().to_string(),
            target: request.path.unwrap_or_default().to_string(),
            minor: request.version.unwrap_or(1),
            headers: owned_headers(request.headers),
            len,
        })),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(error) => Err(HeadError::Malformed(error.to_string())),
    }
}

fn owned_headers(fields: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    fields
        .iter()
        .map(|field| (field.name.to_string(), field.value.to_vec()))
        .collect()
}

fn values<'a>(headers: &'a [(String, Vec<u8>)], name: &'a str) -> impl Iterator<Item = &'a [u8]> {
    headers
        .iter()
        .filter(move |(field, _)| field.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_slice())
}

/// The comma-separated tokens of every field called `name`, lower-cased.
fn tokens(headers: &[(String, Vec<u8>)], name: &str) -> Vec<String> {
    values(headers, name)
        .flat_map(|value| {
            String::from_utf8_lossy(value)
                .split(',')
                .map(|token| token.trim().to_ascii_lowercase())
                .filter(|token| !token.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn keeps_alive(minor: u8, headers: &[(String, Vec<u8>)]) -> bool {
    let connection = tokens(headers, "connection");
    if connection.iter().any(|t| t == "close") {
        false
    } else {
        minor >= 1 || connection.iter().any(|t| t == "keep-alive")
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Empty,
    Length(u64),
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

fn content_length(headers: &[(String, Vec<u8>)]) -> Result<Option<u64>, String> {
    let mut length = None;
    for value in values(headers, "content-length") {
        for part in String::from_utf8_lossy(value).split(',') {
            let part = part.trim();
            let parsed = part
                .parse::<u64>()
                .ok()
                .filter(|_| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("Content-Length {part:?} is not a number"))?;
            if length.is_some_and(|seen| seen != parsed) {
                return Err("Content-Length fields disagree".into());
            }
            length = Some(parsed);
        }
    }
    Ok(length)
}

fn request_body(headers: &[(String, Vec<u8>)]) -> Result<Body, String> {
    let codings = tokens(headers, "transfer-encoding");
    let length = content_length(headers)?;
    if !codings.is_empty() {
        // Both at once is how requests are smuggled past a proxy that
        // frames them differently from the server.
        if length.is_some() {
            return Err("both Transfer-Encoding and Content-Length".into());
        }
        if codings.last().map(String::as_str) != Some("chunked") {
            return Err("a Transfer-Encoding that does not end in chunked".into());
        }
        return Ok(Body::Chunked);
    }
    Ok(match length {
        None | Some(0) => Body::Empty,
        Some(n) => Body::Length(n),
    })
}

fn response_body(
    status: u16,
    head_only: bool,
    headers: &[(String, Vec<u8>)],
) -> Result<Body, String> {
    if head_only || (100..200).contains(&status) || status == 204 || status == 304 {
        return Ok(Body::Empty);
    }
    let codings = tokens(headers, "transfer-encoding");
    if !codings.is_empty() {
        return Ok(if codings.last().map(String::as_str) == Some("chunked") {
            Body::Chunked
        } else {
            Body::UntilClose
        });
    }
    Ok(match content_length(headers)? {
        Some(0) => Body::Empty,
        Some(n) => Body::Length(n),
        None => Body::UntilClose,
    })
}

/// `http://host[:port]/path` of a request line.
#[derive(Debug)]
struct AbsoluteUri {
    host: Host,
    port: u16,
    /// Path and query, for the origin-form request line.
    path: String,
}

fn absolute_uri(target: &str) -> Result<AbsoluteUri, String> {
    if target.starts_with('/') || target == "*" {
        return Err(format!(
            "{target:?}: this is a proxy; send the whole URL (GET http://host/path) \
             or CONNECT host:port"
        ));
    }
    let scheme_end = target
        .find("://")
        .ok_or_else(|| format!("{target:?} is no http:// URL"))?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "{scheme}:// URLs are not forwarded; clients reach https:// and other protocols \
             through CONNECT host:port"
        ));
    }
    let rest = &target[scheme_end + 3..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(
            "credentials in the URL are not forwarded; send an Authorization header".into(),
        );
    }
    let tail = tail.split('#').next().unwrap_or_default();
    let path = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    let (host, port) = authority_parts(authority)?;
    Ok(AbsoluteUri { host, port, path })
}

/// `host[:port]` (default 80) of a URL or a Host header.
fn authority_parts(authority: &str) -> Result<(Host, u16), String> {
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(close) => authority.split_at(close + 1),
            None => (authority, ""),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => {
                return Err(format!("{authority:?}: an IPv6 address needs brackets"))
            }
            Some((host, _)) => (host, &authority[host.len()..]),
            None => (authority, ""),
        }
    };
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => 80,
        Some("") => 80,
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => digits
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{authority:?}: the port is out of range"))?,
        _ => return Err(format!("{authority:?} is no host[:port]")),
    };
    let host = Host::parse(host).map_err(|error| error.to_string())?;
    Ok((host, port))
}

/// A plain HTTP request checked for forwarding.
struct Request {
    head: RequestHead,
    uri: AbsoluteUri,
    body: Body,
    /// Set when policy refuses the request though it is well-formed.
    forbidden: Option<Forbidden>,
}

impl Request {
    /// Checks a forwarded request's form: malformed ones are answered 400
    /// here; ones policy refuses carry `forbidden` so the caller can audit
    /// them against their target.
    fn check(head: RequestHead) -> Result<Request, HttpOutcome> {
        let uri = absolute_uri(&head.target).map_err(bad_request)?;
        let body = request_body(&head.headers).map_err(bad_request)?;
        let hosts: Vec<&[u8]> = values(&head.headers, "host").collect();
        let forbidden = match hosts.as_slice() {
            [] => None,
            [value] => {
                let text = std::str::from_utf8(value)
                    .map_err(|_| bad_request("the Host header is not ASCII".into()))?;
                let (host, port) = authority_parts(text.trim())
                    .map_err(|reason| bad_request(format!("Host header: {reason}")))?;
                if host != uri.host || port != uri.port {
                    Some(Forbidden {
                        rule: format!(
                            "network: the Host header names {} but the URL names {}",
                            host.with_port(port),
                            uri.host.with_port(uri.port)
                        ),
                        message: format!(
                            "the Host header ({}) and the URL ({}) name different targets; \
                             a request must name one",
                            host.with_port(port),
                            uri.host.with_port(uri.port)
                        ),
                    })
                } else {
                    None
                }
            }
            _ => return Err(bad_request("more than one Host header".into())),
        };
        let forbidden = forbidden.or_else(|| {
            values(&head.headers, "upgrade").next().map(|_| Forbidden {
                rule: "network: a protocol upgrade over plain HTTP".into(),
                message: "protocol upgrades (WebSocket, h2c) over plain http:// are refused, \
                          since the proxy could no longer hold the connection to one target; \
                          use https:// (wss://), which goes through CONNECT"
                    .into(),
            })
        });
        let request = Request {
            head,
            uri,
            body,
            forbidden,
        };
        // The origin gets the head in origin form, with a Host field added
        // when the client sent none: it must fit the limits this proxy
        // holds its clients to, or the proxy would send a head it refuses
        // itself (128 fields and no Host became 129, found by fuzzing).
        let origin = request.origin_head();
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        match httparse::Request::new(&mut fields).parse(&origin) {
            Ok(httparse::Status::Complete(len)) if len <= HEAD_LIMIT => Ok(request),
            _ => Err(HeadError::TooLarge.outcome()),
        }
    }

    fn requested(&self) -> String {
        let mut text = format!("{} {}", self.head.method, self.head.target);
        if text.len() > REQUESTED_LIMIT {
            let mut cut = REQUESTED_LIMIT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push_str("...");
        }
        text
    }

    /// The request in origin form, without the fields meant for the proxy.
    fn origin_head(&self) -> Vec<u8> {
        let head = &self.head;
        let mut out = Vec::with_capacity(head.len + 64);
        out.extend_from_slice(
            format!(
                "{} {} HTTP/1.{}\r\n",
                head.method, self.uri.path, head.minor
            )
            .as_bytes(),
        );
        let mut has_host = false;
        for (name, value) in &head.headers {
            if name
                .get(..6)
                .is_some_and(|p| p.eq_ignore_ascii_case("proxy-"))
            {
                continue;
            }
            has_host |= name.eq_ignore_ascii_case("host");
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        if !has_host {
            let host = match self.uri.port {
                80 => match &self.uri.host {
                    Host::Ip(std::net::IpAddr::V6(ip)) => format!("[{ip}]"),
                    other => other.to_string(),
                },
                port => self.uri.host.with_port(port),
            };
            out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

// ---- Responses and bodies ----

enum ResponseError {
    /// No (valid) response head arrived; the client has been sent nothing.
    NoHead(String),
    /// The exchange broke after the client got part of it.
    Broken,
}

/// Relays one response (with any 1xx before it); whether the upstream
/// connection can carry another request.
async fn relay_response<R, W>(
    upstream: &mut Inbound<R>,
    client: &mut W,
    head_only: bool,
    scratch: &mut Vec<u8>,
) -> Result<bool, ResponseError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut forwarded = false;
    let fail = |forwarded: bool, reason: String| {
        if forwarded {
            ResponseError::Broken
        } else {
            ResponseError::NoHead(reason)
        }
    };
    loop {
        let (status, minor, headers, len) = loop {
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut response = httparse::Response::new(&mut fields);
            match response.parse(&upstream.buf) {
                Ok(httparse::Status::Complete(len)) => {
                    break (
                        response.code.unwrap_or_default(),
                        response.version.unwrap_or(1),
                        owned_headers(response.headers),
                        len,
                    )
                }
                Ok(httparse::Status::Partial) if upstream.buf.len() < HEAD_LIMIT => {}
                Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => {
                    return Err(fail(forwarded, "the response head is too large".into()))
                }
                Err(error) => return Err(fail(forwarded, error.to_string())),
            }
            match upstream.fill().await {
                Ok(0) => {
                    return Err(fail(
                        forwarded,
                        "the server closed the connection without a complete answer".into(),
                    ))
                }
                Ok(_) => {}
                Err(error) => return Err(fail(forwarded, error.to_string())),
            }
        };
        if status == 101 {
            // Upgrades are refused before forwarding, so this server
            // switched protocols unasked.
            return Err(fail(
                forwarded,
                "the server switched protocols unasked".into(),
            ));
        }
        let body = response_body(status, head_only, &headers).map_err(|r| fail(forwarded, r))?;
        client
            .write_all(&upstream.buf[..len])
            .await
            .map_err(|_| ResponseError::Broken)?;
        upstream.consume(len);
        forwarded = true;
        if (100..200).contains(&status) {
            continue;
        }
        copy_body(upstream, client, body, scratch)
            .await
            .map_err(|_| ResponseError::Broken)?;
        return Ok(body != Body::UntilClose && keeps_alive(minor, &headers));
    }
}

async fn copy_body<R, W>(
    from: &mut Inbound<R>,
    to: &mut W,
    body: Body,
    scratch: &mut Vec<u8>,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match body {
        Body::Empty => Ok(()),
        Body::Length(n) => copy_exact(from, to, n, scratch).await,
        Body::Chunked => copy_chunked(from, to, scratch).await,
        Body::UntilClose => {
            to.write_all(&from.buf).await?;
            from.buf.clear();
            grow(scratch);
            loop {
                let n = from.io.read(scratch).await?;
                if n == 0 {
                    return to.flush().await;
                }
                to.write_all(&scratch[..n]).await?;
            }
        }
    }
}

fn grow(scratch: &mut Vec<u8>) {
    if scratch.len() < RELAY_BUFFER {
        scratch.resize(RELAY_BUFFER, 0);
    }
}

async fn copy_exact<R, W>(
    from: &mut Inbound<R>,
    to: &mut W,
    mut remaining: u64,
    scratch: &mut Vec<u8>,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let buffered = usize::try_from(remaining).map_or(from.buf.len(), |r| r.min(from.buf.len()));
    if buffered > 0 {
        to.write_all(&from.buf[..buffered]).await?;
        from.consume(buffered);
        remaining -= buffered as u64;
    }
    if remaining > 0 {
        grow(scratch);
    }
    while remaining > 0 {
        let want = usize::try_from(remaining).map_or(scratch.len(), |r| r.min(scratch.len()));
        let n = from.io.read(&mut scratch[..want]).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed before the end of the body",
            ));
        }
        to.write_all(&scratch[..n]).await?;
        remaining -= n as u64;
    }
    Ok(())
}

async fn copy_chunked<R, W>(
    from: &mut Inbound<R>,
    to: &mut W,
    scratch: &mut Vec<u8>,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    loop {
        let line = from.line(CHUNK_LINE_LIMIT).await?;
        let size = chunk_size(&line).ok_or_else(|| invalid("a chunk size is not hexadecimal"))?;
        to.write_all(&line).await?;
        if size == 0 {
            let mut trailers = 0usize;
            loop {
                let line = from.line(CHUNK_LINE_LIMIT).await?;
                trailers += line.len();
                if trailers > HEAD_LIMIT {
                    return Err(invalid("the chunked body's trailers are too large"));
                }
                to.write_all(&line).await?;
                if line == b"\r\n" || line == b"\n" {
                    return Ok(());
                }
            }
        }
        copy_exact(from, to, size, scratch).await?;
        let end = from.line(3).await?;
        if end != b"\r\n" && end != b"\n" {
            return Err(invalid("a chunk does not end where its size says"));
        }
        to.write_all(&end).await?;
    }
}

fn chunk_size(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?;
    let digits = text
        .split(';')
        .next()?
        .trim_matches([' ', '\t', '\r', '\n']);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// The proxy's readers over bytes in memory, for the fuzz targets
/// (`crate::fuzzing`): the same functions a connection runs, fed from a
/// slice instead of a socket.
pub(crate) mod fuzzing {
    use super::*;

    fn block_on<F: Future>(future: F) -> F::Output {
        thread_local! {
            static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a current-thread runtime builds");
        }
        RUNTIME.with(|runtime| runtime.block_on(future))
    }

    fn deadline() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    /// A client's request head, then its body as the head frames it.
    pub fn request(bytes: &[u8]) {
        let head = match parse_request(bytes) {
            Ok(Some(head)) => head,
            Ok(None) | Err(_) => return,
        };
        let rest = &bytes[head.len.min(bytes.len())..];
        if head.method == "CONNECT" {
            let _ = split_target(&head.target);
            return;
        }
        let _ = keeps_alive(head.minor, &head.headers);
        let Ok(request) = Request::check(head) else {
            return;
        };
        let _ = request.requested();
        // What the origin server gets must read as the request the proxy
        // checked: one complete head, for the same target, whose body is
        // framed the same way (anything else is request smuggling).
        let origin = request.origin_head();
        match parse_request(&origin) {
            Ok(Some(forwarded)) => {
                assert_eq!(forwarded.len, origin.len(), "the head ends where it should");
                assert_eq!(forwarded.method, request.head.method);
                assert_eq!(forwarded.target, request.uri.path);
                assert_eq!(request_body(&forwarded.headers), Ok(request.body));
                let hosts: Vec<&[u8]> = values(&forwarded.headers, "host").collect();
                assert_eq!(hosts.len(), 1, "one Host header names the target");
                assert!(
                    !forwarded.headers.iter().any(|(name, _)| name
                        .get(..6)
                        .is_some_and(|p| p.eq_ignore_ascii_case("proxy-"))),
                    "Proxy-* fields are the proxy's"
                );
            }
            Ok(None) | Err(_) => panic!(
                "the forwarded head does not parse: {:?}",
                String::from_utf8_lossy(&origin)
            ),
        }
        let mut client = Inbound::new(rest);
        let mut sink = Vec::new();
        let _ = block_on(copy_body(
            &mut client,
            &mut sink,
            request.body,
            &mut Vec::new(),
        ));
        // A body is forwarded as it came, never rewritten.
        assert_eq!(sink, rest[..sink.len()]);
    }

    /// An upstream's answer as relayed to the client; the first byte says
    /// whether the request was a HEAD.
    pub fn response(bytes: &[u8]) {
        let Some((&flags, rest)) = bytes.split_first() else {
            return;
        };
        let mut upstream = Inbound::new(rest);
        let mut client = Vec::new();
        let _ = block_on(relay_response(
            &mut upstream,
            &mut client,
            flags & 1 == 1,
            &mut Vec::new(),
        ));
        // A response is relayed as it came, never rewritten.
        assert_eq!(client, rest[..client.len()]);
    }

    /// A chunked body on its own.
    pub fn chunked(bytes: &[u8]) {
        let mut from = Inbound::new(bytes);
        let mut to = Vec::new();
        if block_on(copy_chunked(&mut from, &mut to, &mut Vec::new())).is_ok() {
            // What was forwarded is exactly what was read: the proxy never
            // rewrites a body.
            assert_eq!(to, bytes[..to.len()]);
        }
    }

    /// A SOCKS5 greeting and request (the byte that picked SOCKS included).
    pub fn socks5(bytes: &[u8]) {
        let mut client = Inbound::new(bytes);
        let _ = block_on(async {
            if socks_greeting(&mut client, deadline()).await? {
                if let SocksRequest::Connect(host, port) =
                    socks_request(&mut client, deadline()).await?
                {
                    assert_ne!(port, 0);
                    let _ = format!("SOCKS5 {}", host.with_port(port));
                }
            }
            io::Result::Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::sync::Mutex;
    use tokio::io::{AsyncBufReadExt, BufReader};

    /// Allows the names it lists, refuses the others; keeps what it saw.
    #[derive(Default)]
    struct TestGate {
        allows: Vec<String>,
        asked: Mutex<Vec<String>>,
        records: Mutex<Vec<Record>>,
    }

    impl Gate for TestGate {
        fn decide(&self, request: &Target) -> Pin<Box<dyn Future<Output = Verdict> + Send + '_>> {
            let target = request.host.with_port(request.port);
            self.asked.lock().unwrap().push(target);
            let allow = self.allows.contains(&request.host.to_string());
            Box::pin(std::future::ready(Verdict {
                allow,
                rule: if allow {
                    "test gate: yes"
                } else {
                    "test gate: no"
                }
                .into(),
            }))
        }

        fn record(&self, record: Record) {
            self.records.lock().unwrap().push(record);
        }
    }

    impl TestGate {
        fn records(&self) -> Vec<Record> {
            self.records.lock().unwrap().clone()
        }
        fn asked(&self) -> Vec<String> {
            self.asked.lock().unwrap().clone()
        }
    }

    async fn start_proxy(
        allow: &[String],
        pins: &[(&str, &str)],
        gate_allows: &[&str],
    ) -> (SocketAddr, Arc<TestGate>) {
        let allow = Arc::new(Allowlist::parse(allow).unwrap());
        let pins: BTreeMap<String, std::net::IpAddr> = pins
            .iter()
            .map(|(name, ip)| (name.to_string(), ip.parse().unwrap()))
            .collect();
        let resolver = Arc::new(Resolver::new(Arc::clone(&allow), pins, Vec::new()));
        let gate = Arc::new(TestGate {
            allows: gate_allows.iter().map(|s| s.to_string()).collect(),
            ..TestGate::default()
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let dyn_gate: Arc<dyn Gate> = gate.clone();
        tokio::spawn(serve(listener, allow, resolver, dyn_gate));
        (address, gate)
    }

    /// Echoes every connection's bytes back.
    async fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = stream.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    /// A listener nobody accepts on: whether a connection reached it shows
    /// without waiting (a completed handshake is queued at once).
    fn silent_server() -> (std::net::TcpListener, u16) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        (listener, port)
    }

    fn reached(listener: &std::net::TcpListener) -> bool {
        match listener.accept() {
            Ok(_) => true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("accept: {e}"),
        }
    }

    /// A keep-alive HTTP server answering "hello PORT PATH"; it keeps each
    /// request head it got.
    async fn http_server() -> (u16, Arc<Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let heads = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let heads = Arc::clone(&heads);
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    loop {
                        let mut head = String::new();
                        loop {
                            let mut line = String::new();
                            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            head.push_str(&line);
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let path = head.split(' ').nth(1).unwrap_or_default().to_string();
                        heads.lock().unwrap().push(head);
                        let body = format!("hello {port} {path}");
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, seen)
    }

    struct Client {
        stream: BufReader<TcpStream>,
    }

    impl Client {
        async fn connect(proxy: SocketAddr) -> Client {
            Client {
                stream: BufReader::new(TcpStream::connect(proxy).await.unwrap()),
            }
        }

        async fn send(&mut self, bytes: &[u8]) {
            self.stream.get_mut().write_all(bytes).await.unwrap();
        }

        /// Status and body of one response (Content-Length framed, or
        /// until close).
        async fn response(&mut self) -> (u16, String) {
            let mut status_line = String::new();
            self.stream.read_line(&mut status_line).await.unwrap();
            let status = status_line
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no status line: {status_line:?}"));
            let mut length = None;
            loop {
                let mut line = String::new();
                self.stream.read_line(&mut line).await.unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse::<usize>().ok();
                    }
                }
            }
            let mut body = vec![0; length.unwrap_or(0)];
            self.stream.read_exact(&mut body).await.unwrap();
            (status, String::from_utf8_lossy(&body).into_owned())
        }

        async fn is_closed(&mut self) -> bool {
            let mut rest = Vec::new();
            self.stream
                .read_to_end(&mut rest)
                .await
                .map(|_| rest.is_empty())
                .unwrap_or(true)
        }

        async fn echo(&mut self, text: &str) -> String {
            self.send(text.as_bytes()).await;
            let mut back = vec![0; text.len()];
            self.stream.read_exact(&mut back).await.unwrap();
            String::from_utf8(back).unwrap()
        }
    }

    #[tokio::test]
    async fn connect_to_a_listed_name_is_relayed_and_recorded() {
        let port = echo_server().await;
        let allow = [format!("allowed.test:{port}"), format!("127.0.0.1:{port}")];
        let (proxy, gate) = start_proxy(&allow, &[("allowed.test", "127.0.0.1")], &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(
                format!(
                    "CONNECT allowed.test:{port} HTTP/1.1\r\nHost: allowed.test:{port}\r\n\r\n"
                )
                .as_bytes(),
            )
            .await;
        assert_eq!(client.response().await.0, 200);
        assert_eq!(
            client.echo("ping through the tunnel").await,
            "ping through the tunnel"
        );
        assert!(gate.asked().is_empty(), "a listed name needs no gate");
        assert_eq!(
            gate.records(),
            vec![Record {
                target: format!("allowed.test:{port}"),
                host: "allowed.test".into(),
                requested: format!("CONNECT allowed.test:{port}"),
                allowed: true,
                rule: format!("network.allow \"allowed.test:{port}\""),
                refusal: None,
            }]
        );
    }

    #[tokio::test]
    async fn an_unlisted_name_the_gate_refuses_gets_403_and_is_never_resolved() {
        let (listener, port) = silent_server();
        let allow = [format!("127.0.0.1:{port}")];
        // The pin would lead to the server: the refusal must come first.
        let (proxy, gate) = start_proxy(&allow, &[("other.test", "127.0.0.1")], &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT other.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(body.contains("other.test"), "{body}");
        assert!(body.contains("test gate: no"), "{body}");
        assert!(
            body.contains(&format!("add other.test:{port} to --net allow:")),
            "{body}"
        );
        assert!(!reached(&listener));
        assert_eq!(gate.asked(), vec![format!("other.test:{port}")]);
        let records = gate.records();
        assert_eq!(records.len(), 1);
        assert!(!records[0].allowed);
        assert_eq!(records[0].rule, "test gate: no");
        let refusal = records[0].refusal.as_deref().unwrap_or_default();
        assert!(
            refusal.contains("add other.test") && body.contains(refusal),
            "{refusal:?} {body}"
        );
    }

    #[tokio::test]
    async fn an_unlisted_name_the_gate_allows_is_relayed() {
        let port = echo_server().await;
        let allow = [format!("127.0.0.1:{port}")];
        let (proxy, gate) =
            start_proxy(&allow, &[("gated.test", "127.0.0.1")], &["gated.test"]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT gated.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert_eq!(client.response().await.0, 200);
        assert_eq!(client.echo("hi").await, "hi");
        let records = gate.records();
        assert_eq!(records.len(), 1);
        assert!(records[0].allowed);
        assert_eq!(records[0].rule, "test gate: yes");
    }

    #[tokio::test]
    async fn raw_addresses_are_refused_unless_listed_and_never_asked() {
        let (listener, port) = silent_server();
        let listed = echo_server().await;
        let allow = [format!("127.0.0.1:{listed}"), "*:*".to_string()];
        let (proxy, gate) = start_proxy(&allow, &[], &["127.0.0.1"]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(body.contains("an address, not a name"), "{body}");
        assert!(!reached(&listener));
        assert!(
            gate.asked().is_empty(),
            "an address is never put to the gate"
        );
        assert_eq!(gate.records()[0].rule, ADDRESS_LITERAL_RULE);

        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT 127.0.0.1:{listed} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert_eq!(client.response().await.0, 200);
        assert_eq!(client.echo("listed").await, "listed");
    }

    #[tokio::test]
    async fn a_listed_name_resolving_to_loopback_is_refused() {
        let (listener, port) = silent_server();
        let allow = [format!("pinned.test:{port}")];
        let (proxy, gate) = start_proxy(&allow, &[("pinned.test", "127.0.0.1")], &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT pinned.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(
            body.contains("pinned.test resolves to 127.0.0.1, a loopback address"),
            "{body}"
        );
        assert!(!reached(&listener));
        let records = gate.records();
        assert_eq!(records.len(), 1);
        assert!(!records[0].allowed);
        assert!(
            records[0].rule.contains("127.0.0.1 is loopback"),
            "{}",
            records[0].rule
        );
    }

    #[tokio::test]
    async fn cloud_metadata_is_refused_by_name_and_by_address() {
        let allow = ["meta.test".to_string()];
        let (proxy, gate) = start_proxy(&allow, &[("meta.test", "169.254.169.254")], &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(b"GET http://meta.test/latest/meta-data/ HTTP/1.1\r\nHost: meta.test\r\n\r\n")
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(body.contains("link-local"), "{body}");
        let mut client = Client::connect(proxy).await;
        client
            .send(b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
            .await;
        assert_eq!(client.response().await.0, 403);
        let records = gate.records();
        assert_eq!(records.len(), 2);
        assert!(records.iter().all(|r| !r.allowed));
        assert_eq!(
            records[0].requested,
            "GET http://meta.test/latest/meta-data/"
        );
    }

    #[tokio::test]
    async fn a_second_connect_inside_a_tunnel_reaches_only_the_first_target() {
        let first = echo_server().await;
        let (other, other_port) = silent_server();
        let allow = [
            format!("a.test:{first}"),
            format!("b.test:{other_port}"),
            "127.0.0.0/8:*".to_string(),
        ];
        let pins = [("a.test", "127.0.0.1"), ("b.test", "127.0.0.1")];
        let (proxy, gate) = start_proxy(&allow, &pins, &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT a.test:{first} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert_eq!(client.response().await.0, 200);
        let second = format!("CONNECT b.test:{other_port} HTTP/1.1\r\n\r\n");
        // The echo server got the second CONNECT as plain bytes.
        assert_eq!(client.echo(&second).await, second);
        assert!(!reached(&other));
        assert_eq!(gate.records().len(), 1);
    }

    #[tokio::test]
    async fn plain_http_is_forwarded_in_origin_form_and_kept_to_one_target() {
        let (port, seen) = http_server().await;
        let (other, other_seen) = http_server().await;
        let allow = [
            format!("a.test:{port}"),
            format!("b.test:{other}"),
            "127.0.0.0/8:*".to_string(),
        ];
        let pins = [("a.test", "127.0.0.1"), ("b.test", "127.0.0.1")];
        let (proxy, gate) = start_proxy(&allow, &pins, &[]).await;
        let mut client = Client::connect(proxy).await;
        for path in ["/one", "/two?q=1"] {
            client
                .send(
                    format!(
                        "GET http://A.test:{port}{path} HTTP/1.1\r\nHost: a.test:{port}\r\n\
                         Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n\r\n"
                    )
                    .as_bytes(),
                )
                .await;
            assert_eq!(
                client.response().await,
                (200, format!("hello {port} {path}"))
            );
        }
        {
            let heads = seen.lock().unwrap();
            assert_eq!(heads.len(), 2);
            assert!(
                heads[0].starts_with("GET /one HTTP/1.1\r\n"),
                "{}",
                heads[0]
            );
            assert!(
                !heads[0].to_ascii_lowercase().contains("proxy-"),
                "{}",
                heads[0]
            );
        }
        // The same connection, now naming another allowed host.
        client
            .send(
                format!("GET http://b.test:{other}/ HTTP/1.1\r\nHost: b.test:{other}\r\n\r\n")
                    .as_bytes(),
            )
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(body.contains("open a new connection"), "{body}");
        assert!(client.is_closed().await);
        assert!(other_seen.lock().unwrap().is_empty());
        let records = gate.records();
        assert_eq!(records.len(), 2);
        assert!(records[0].allowed);
        assert!(!records[1].allowed);
        assert_eq!(records[1].target, format!("b.test:{other}"));
        assert!(
            records[1].rule.contains("one connection, one target"),
            "{}",
            records[1].rule
        );
    }

    #[tokio::test]
    async fn a_host_header_switched_on_a_kept_alive_connection_is_refused() {
        let (port, seen) = http_server().await;
        let (other, other_seen) = http_server().await;
        let allow = [
            format!("a.test:{port}"),
            format!("b.test:{other}"),
            "127.0.0.0/8:*".to_string(),
        ];
        let pins = [("a.test", "127.0.0.1"), ("b.test", "127.0.0.1")];
        let (proxy, gate) = start_proxy(&allow, &pins, &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(
                format!("GET http://a.test:{port}/ HTTP/1.1\r\nHost: a.test:{port}\r\n\r\n")
                    .as_bytes(),
            )
            .await;
        assert_eq!(client.response().await.0, 200);
        client
            .send(
                format!("GET http://a.test:{port}/ HTTP/1.1\r\nHost: b.test:{other}\r\n\r\n")
                    .as_bytes(),
            )
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(body.contains("name different targets"), "{body}");
        assert!(client.is_closed().await);
        assert_eq!(seen.lock().unwrap().len(), 1);
        assert!(other_seen.lock().unwrap().is_empty());
        assert_eq!(gate.records().len(), 2);
    }

    #[tokio::test]
    async fn upgrades_over_plain_http_are_refused() {
        let (port, seen) = http_server().await;
        let allow = [format!("a.test:{port}"), format!("127.0.0.1:{port}")];
        let (proxy, gate) = start_proxy(&allow, &[("a.test", "127.0.0.1")], &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(
                format!(
                    "GET http://a.test:{port}/ws HTTP/1.1\r\nHost: a.test:{port}\r\n\
                     Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
                )
                .as_bytes(),
            )
            .await;
        let (status, body) = client.response().await;
        assert_eq!(status, 403);
        assert!(body.contains("https://"), "{body}");
        assert!(seen.lock().unwrap().is_empty());
        assert!(!gate.records()[0].allowed);
    }

    #[tokio::test]
    async fn chunked_and_head_responses_keep_the_connection_in_step() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = BufReader::new(stream);
            let mut requests = Vec::new();
            // Request 1: POST with a chunked body, answered chunked.
            // Request 2: HEAD, answered with a length but no body.
            for _ in 0..2 {
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    stream.read_line(&mut line).await.unwrap();
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                requests.push(head);
                if requests.len() == 1 {
                    let mut body = String::new();
                    while !body.ends_with("0\r\n\r\n") {
                        let mut line = String::new();
                        stream.read_line(&mut line).await.unwrap();
                        body.push_str(&line);
                    }
                    assert_eq!(body, "5\r\nhello\r\n0\r\n\r\n");
                    stream
                        .get_mut()
                        .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n")
                        .await
                        .unwrap();
                } else {
                    stream
                        .get_mut()
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                        .await
                        .unwrap();
                }
            }
        });
        let allow = [format!("c.test:{port}"), format!("127.0.0.1:{port}")];
        let (proxy, _gate) = start_proxy(&allow, &[("c.test", "127.0.0.1")], &[]).await;
        let mut client = Client::connect(proxy).await;
        client
            .send(
                format!(
                    "POST http://c.test:{port}/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\
                     5\r\nhello\r\n0\r\n\r\n"
                )
                .as_bytes(),
            )
            .await;
        let mut raw = Vec::new();
        let expected = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n";
        raw.resize(expected.len(), 0);
        client.stream.read_exact(&mut raw).await.unwrap();
        assert_eq!(raw, expected);
        client
            .send(format!("HEAD http://c.test:{port}/ HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        let mut line = String::new();
        client.stream.read_line(&mut line).await.unwrap();
        assert_eq!(line, "HTTP/1.1 200 OK\r\n");
    }

    #[tokio::test]
    async fn socks5_connects_listed_names_and_refuses_others() {
        let port = echo_server().await;
        let allow = [format!("s.test:{port}"), format!("127.0.0.1:{port}")];
        let (proxy, gate) = start_proxy(
            &allow,
            &[("s.test", "127.0.0.1"), ("x.test", "127.0.0.1")],
            &[],
        )
        .await;

        async fn socks_connect(proxy: SocketAddr, name: &str, port: u16) -> (Client, u8) {
            let mut client = Client::connect(proxy).await;
            client.send(&[5, 2, 2, 0]).await;
            let mut choice = [0; 2];
            client.stream.read_exact(&mut choice).await.unwrap();
            assert_eq!(choice, [5, 0]);
            let mut request = vec![5, 1, 0, 3, name.len() as u8];
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(&port.to_be_bytes());
            client.send(&request).await;
            let mut reply = [0; 10];
            client.stream.read_exact(&mut reply).await.unwrap();
            (client, reply[1])
        }

        let (mut client, code) = socks_connect(proxy, "s.test", port).await;
        assert_eq!(code, 0);
        assert_eq!(client.echo("over socks").await, "over socks");
        let (_, code) = socks_connect(proxy, "x.test", port).await;
        assert_eq!(code, SOCKS_NOT_ALLOWED);
        let records = gate.records();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].requested, format!("SOCKS5 s.test:{port}"));
        assert!(records[0].allowed);
        assert!(!records[1].allowed);

        // BIND and UDP ASSOCIATE are refused outright.
        for command in [2u8, 3] {
            let mut client = Client::connect(proxy).await;
            client.send(&[5, 1, 0]).await;
            let mut choice = [0; 2];
            client.stream.read_exact(&mut choice).await.unwrap();
            client.send(&[5, command, 0, 1, 127, 0, 0, 1, 0, 80]).await;
            let mut reply = [0; 10];
            client.stream.read_exact(&mut reply).await.unwrap();
            assert_eq!(reply[1], SOCKS_COMMAND_UNSUPPORTED);
        }
        // Only "no authentication" is offered.
        let mut client = Client::connect(proxy).await;
        client.send(&[5, 1, 2]).await;
        let mut choice = [0; 2];
        client.stream.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, 0xff]);
    }

    #[tokio::test]
    async fn malformed_and_hostile_requests_are_answered_without_harm() {
        let port = echo_server().await;
        let allow = [format!("ok.test:{port}"), format!("127.0.0.1:{port}")];
        let (proxy, gate) = start_proxy(&allow, &[("ok.test", "127.0.0.1")], &[]).await;
        for (request, status) in [
            (b"GARBAGE\0\xff\r\n\r\n".to_vec(), 400),
            (b"GET / HTTP/1.1\r\nHost: ok.test\r\n\r\n".to_vec(), 400),
            (b"GET https://ok.test/ HTTP/1.1\r\n\r\n".to_vec(), 400),
            (b"GET http://user:pw@ok.test/ HTTP/1.1\r\n\r\n".to_vec(), 400),
            (b"GET http://ok.test:99999/ HTTP/1.1\r\n\r\n".to_vec(), 400),
            (b"GET http://ok..test/ HTTP/1.1\r\n\r\n".to_vec(), 400),
            (b"CONNECT ok.test HTTP/1.1\r\n\r\n".to_vec(), 400),
            (b"CONNECT [::1:80 HTTP/1.1\r\n\r\n".to_vec(), 400),
            (
                b"POST http://ok.test/ HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
                400,
            ),
            (b"GET http://ok.test/ HTTP/1.1\r\nContent-Length: x\r\n\r\n".to_vec(), 400),
            (b"GET http://ok.test/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(), 400),
            (
                [b"GET http://ok.test/ HTTP/1.1\r\nX: ".to_vec(), vec![b'a'; 70 * 1024]].concat(),
                431,
            ),
        ] {
            let mut client = Client::connect(proxy).await;
            client.send(&request).await;
            let (got, body) = client.response().await;
            assert_eq!(got, status, "{:?}: {body}", String::from_utf8_lossy(&request[..40.min(request.len())]));
        }
        // Truncated or nonsensical SOCKS: the connection just ends.
        for request in [
            vec![5u8],
            vec![5, 0],
            vec![5, 1, 0, 5, 1, 0, 9],
            vec![5, 1, 0, 5, 1, 0, 3, 0, 0, 0],
        ] {
            let mut client = Client::connect(proxy).await;
            client.send(&request).await;
            client.stream.get_mut().shutdown().await.unwrap();
            let mut rest = Vec::new();
            let _ = client.stream.read_to_end(&mut rest).await;
        }
        assert!(gate.records().is_empty(), "no target, no record");
        // The proxy still serves.
        let mut client = Client::connect(proxy).await;
        client
            .send(format!("CONNECT ok.test:{port} HTTP/1.1\r\n\r\n").as_bytes())
            .await;
        assert_eq!(client.response().await.0, 200);
        assert_eq!(client.echo("alive").await, "alive");
    }

    #[test]
    fn a_head_the_origin_form_would_take_past_the_limits_is_refused() {
        // Found by the proxy_request fuzz target: 128 fields (the most a
        // client may send) and no Host, to which the forwarded head adds one.
        let mut text = String::from("GET http://example.com/ HTTP/1.1\r\n");
        for i in 0..MAX_HEADERS {
            text.push_str(&format!("X-{i}: v\r\n"));
        }
        text.push_str("\r\n");
        let head = match parse_request(text.as_bytes()) {
            Ok(Some(head)) => head,
            _ => panic!("a head of {MAX_HEADERS} fields parses"),
        };
        assert!(matches!(
            Request::check(head),
            Err(HttpOutcome::Answer(status, _)) if status.starts_with("431")
        ));
        // One field fewer leaves room for the Host the proxy adds.
        let text = text.replacen("X-0: v\r\n", "", 1);
        let head = match parse_request(text.as_bytes()) {
            Ok(Some(head)) => head,
            _ => panic!("a head of {} fields parses", MAX_HEADERS - 1),
        };
        let request = Request::check(head).unwrap_or_else(|_| panic!("127 fields and a Host fit"));
        assert!(
            String::from_utf8_lossy(&request.origin_head()).contains("\r\nHost: example.com\r\n")
        );
    }

    #[test]
    fn uris_and_authorities_parse_strictly() {
        let uri = absolute_uri("HTTP://Example.COM:8080/a?b#frag").unwrap();
        assert_eq!(uri.host, Host::Name("example.com".into()));
        assert_eq!(uri.port, 8080);
        assert_eq!(uri.path, "/a?b");
        let uri = absolute_uri("http://[::1]?x").unwrap();
        assert_eq!(uri.port, 80);
        assert_eq!(uri.path, "/?x");
        assert!(absolute_uri("http://::1/").is_err());
        assert!(absolute_uri("http:///").is_err());
        assert!(absolute_uri("ftp://a.test/").is_err());
        assert_eq!(authority_parts("a.test:").unwrap().1, 80);
        assert!(authority_parts("a.test:0").is_err());
        assert!(authority_parts("[::1]x").is_err());
        assert_eq!(chunk_size(b"1f ; ext=1\r\n"), Some(31));
        assert_eq!(chunk_size(b"\r\n"), None);
        assert_eq!(chunk_size(b"-1\r\n"), None);
        assert_eq!(chunk_size(b"fffffffffffffffff\r\n"), None);
    }
}
