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
//!
//! One file per job: `gate` (the decision, resolving and connecting),
//! `socks` (SOCKS5), `connect` (the HTTP front door and CONNECT tunnels),
//! `forward` (plain HTTP forwarding and the tunnel splice), `http1` (heads
//! and bodies), `inbound` (buffered reading), `fuzzing` (the readers fed
//! from memory for the fuzz targets).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::resolve::Resolver;
use sandbox::net::allow::{Allowlist, Host};

mod connect;
mod forward;
pub(crate) mod fuzzing;
mod gate;
mod http1;
mod inbound;
mod socks;
#[cfg(test)]
mod testing;

use connect::answer_and_close;
use forward::relay;
use http1::HttpOutcome;
use inbound::Inbound;
use socks::SOCKS_VERSION;

/// A client that has not sent a whole request head within this time (from
/// connecting, or from the end of the previous exchange) is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// The most client connections the proxy serves at once. The net process
/// lives outside the run's cgroup, and each tunnel holds a relay buffer
/// each way: without a bound, a payload opening thousands of tunnels to a
/// listed host would spend the host's memory and descriptors, not its own.
/// Beyond it, connections wait in the listen queue until one ends.
pub const MAX_CONNECTIONS: usize = 256;

pub use sandbox::net::ADDRESS_LITERAL_RULE;

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
}
