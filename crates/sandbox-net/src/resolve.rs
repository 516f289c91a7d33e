//! Resolving an allowed name into addresses the run may connect to.
//!
//! Only names that were already allowed come here: resolving a refused name
//! would itself tell its DNS server about it. The resolver answers with the
//! addresses that passed the address checks ([`crate::address`]), and
//! the caller connects to exactly those: resolving again at connect time
//! would let a DNS server that answers differently the second time (DNS
//! rebinding) choose an address nobody checked.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;

use crate::address::{classify, AddressClass};
use sandbox::net::allow::{Allowlist, Host};

/// How long the system resolver may take for one name; getaddrinfo itself
/// may retry for much longer when no DNS server answers.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(15);

/// Why a name leads nowhere the run may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The rule, for the audit.
    pub rule: String,
    /// The reason and the fix, for the client.
    pub message: String,
    /// Whether the name did not resolve at all (an upstream failure, not a
    /// policy decision).
    pub unresolved: bool,
}

/// Resolves names with the run's pins, else the system resolver, and keeps
/// only the addresses the allowlist lets a name lead to.
#[derive(Debug, Clone)]
pub struct Resolver {
    allow: Arc<Allowlist>,
    pins: BTreeMap<String, IpAddr>,
    own: Vec<IpAddr>,
}

impl Resolver {
    /// `pins` map names to the one address they resolve to (like curl's
    /// `--resolve`), `own` are this host's interface addresses
    /// ([`crate::address::host_addresses`]).
    pub fn new(allow: Arc<Allowlist>, pins: BTreeMap<String, IpAddr>, own: Vec<IpAddr>) -> Self {
        let pins = pins
            .into_iter()
            .map(|(name, ip)| match Host::parse(&name) {
                Ok(Host::Name(normalized)) => (normalized, ip),
                _ => (name.to_ascii_lowercase(), ip),
            })
            .collect();
        Resolver { allow, pins, own }
    }

    /// The addresses `host` may be reached at on `port`, in resolver
    /// order; a refusal when none may.
    pub async fn resolve(&self, host: &Host, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
        let candidates: Vec<IpAddr> = match host {
            Host::Ip(ip) => vec![*ip],
            Host::Name(name) => match self.pins.get(name) {
                Some(ip) => vec![*ip],
                None => self.lookup(name, port).await?,
            },
        };
        let mut passed: Vec<SocketAddr> = Vec::new();
        let mut first_refused: Option<(IpAddr, AddressClass)> = None;
        for ip in candidates {
            let class = classify(ip, &self.own);
            if class.is_public() || self.allow.address_rule(ip, port).is_some() {
                let address = SocketAddr::new(ip, port);
                if !passed.contains(&address) {
                    passed.push(address);
                }
            } else if first_refused.is_none() {
                first_refused = Some((ip, class));
            }
        }
        match (passed.is_empty(), first_refused) {
            (false, _) => Ok(passed),
            (true, Some((ip, class))) => Err(address_refusal(host, port, ip, class)),
            (true, None) => Err(unresolved(host, "no addresses".into())),
        }
    }

    async fn lookup(&self, name: &str, port: u16) -> Result<Vec<IpAddr>, Refusal> {
        let host = Host::Name(name.to_string());
        match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((name, port))).await {
            Ok(Ok(addresses)) => Ok(addresses.map(|a| a.ip()).collect()),
            Ok(Err(error)) => Err(unresolved(&host, error.to_string())),
            Err(_) => Err(unresolved(
                &host,
                format!("no answer within {} s", LOOKUP_TIMEOUT.as_secs()),
            )),
        }
    }

    /// Connects to the first of `addrs` that accepts within `timeout`
    /// (each address gets the whole timeout); the last error otherwise.
    pub async fn connect(&self, addrs: &[SocketAddr], timeout: Duration) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
        for address in addrs {
            match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
                Ok(Ok(stream)) => {
                    // Small requests and answers must not wait for Nagle.
                    stream.set_nodelay(true)?;
                    return Ok(stream);
                }
                Ok(Err(error)) => {
                    last = io::Error::new(error.kind(), format!("{address}: {error}"));
                }
                Err(_) => {
                    last = io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{address}: no answer within {} s", timeout.as_secs_f32()),
                    );
                }
            }
        }
        Err(last)
    }
}

fn address_refusal(host: &Host, port: u16, ip: IpAddr, class: AddressClass) -> Refusal {
    let listed = match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    let what = match host {
        Host::Ip(_) => format!("{ip} is a {class} address"),
        Host::Name(name) => format!("{name} resolves to {ip}, a {class} address"),
    };
    Refusal {
        rule: format!(
            "network: resolved address {ip} is {class} and network.allow does not list it"
        ),
        message: format!(
            "{what}, which a name may not lead to; if that is intended, list the address \
             or its range in --net allow:... or [network] allow (e.g. \"{listed}\")"
        ),
        unresolved: false,
    }
}

fn unresolved(host: &Host, why: String) -> Refusal {
    Refusal {
        rule: format!("network: {host} did not resolve"),
        message: format!(
            "{host} could not be resolved ({why}); check the name, or pin it with --resolve {host}=ADDRESS"
        ),
        unresolved: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(allow: &[&str], pins: &[(&str, &str)], own: &[&str]) -> Resolver {
        Resolver::new(
            Arc::new(Allowlist::parse(allow).unwrap()),
            pins.iter()
                .map(|(n, a)| (n.to_string(), a.parse().unwrap()))
                .collect(),
            own.iter().map(|a| a.parse().unwrap()).collect(),
        )
    }

    fn name(text: &str) -> Host {
        Host::Name(text.into())
    }

    #[tokio::test]
    async fn pins_resolve_and_public_addresses_pass() {
        let r = resolver(&[], &[("API.test.", "93.184.216.34")], &[]);
        let addrs = r.resolve(&name("api.test"), 443).await.unwrap();
        assert_eq!(addrs, vec!["93.184.216.34:443".parse().unwrap()]);
    }

    #[tokio::test]
    async fn loopback_pin_is_refused_naming_the_address_and_fix() {
        let r = resolver(&["api.test"], &[("api.test", "127.0.0.1")], &[]);
        let refusal = r.resolve(&name("api.test"), 443).await.unwrap_err();
        assert!(!refusal.unresolved);
        assert!(
            refusal.rule.contains("127.0.0.1 is loopback"),
            "{}",
            refusal.rule
        );
        assert!(
            refusal.message.contains("api.test resolves to 127.0.0.1"),
            "{}",
            refusal.message
        );
        assert!(
            refusal.message.contains("\"127.0.0.1:443\""),
            "{}",
            refusal.message
        );
    }

    #[tokio::test]
    async fn metadata_address_is_refused() {
        let r = resolver(&["meta.test"], &[("meta.test", "169.254.169.254")], &[]);
        let refusal = r.resolve(&name("meta.test"), 80).await.unwrap_err();
        assert!(
            refusal.message.contains("link-local"),
            "{}",
            refusal.message
        );
        let literal = Host::Ip("169.254.169.254".parse().unwrap());
        assert!(r.resolve(&literal, 80).await.is_err());
    }

    #[tokio::test]
    async fn a_covering_range_lets_a_private_address_through_on_its_port() {
        let r = resolver(
            &["10.0.0.0/8:5432"],
            &[("db.test", "10.1.2.3"), ("v6.test", "::ffff:10.1.2.3")],
            &[],
        );
        assert!(r.resolve(&name("db.test"), 5432).await.is_ok());
        assert!(r.resolve(&name("v6.test"), 5432).await.is_ok());
        assert!(r.resolve(&name("db.test"), 5433).await.is_err());
    }

    #[tokio::test]
    async fn own_addresses_are_refused() {
        let r = resolver(&[], &[("me.test", "93.184.216.34")], &["93.184.216.34"]);
        let refusal = r.resolve(&name("me.test"), 443).await.unwrap_err();
        assert!(
            refusal.message.contains("this host's own address"),
            "{}",
            refusal.message
        );
    }

    #[tokio::test]
    async fn system_resolver_answers_are_checked_too() {
        // localhost resolves through /etc/hosts, without DNS.
        let r = resolver(&[], &[], &[]);
        let refusal = r.resolve(&name("localhost"), 443).await.unwrap_err();
        assert!(!refusal.unresolved);
        assert!(refusal.rule.contains("loopback"), "{}", refusal.rule);
        let listed = resolver(&["127.0.0.1:443", "[::1]:443"], &[], &[]);
        let addrs = listed.resolve(&name("localhost"), 443).await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }

    #[tokio::test]
    async fn unresolvable_names_say_so() {
        let r = resolver(&[], &[], &[]);
        // .invalid never resolves (RFC 6761).
        let refusal = r.resolve(&name("nothing.invalid"), 443).await.unwrap_err();
        assert!(refusal.unresolved);
        assert!(refusal.message.contains("--resolve"), "{}", refusal.message);
    }

    #[tokio::test]
    async fn connect_tries_addresses_in_order() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let good = listener.local_addr().unwrap();
        let closed = {
            let spare = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            spare.local_addr().unwrap()
        };
        let r = resolver(&[], &[], &[]);
        let stream = r
            .connect(&[closed, good], Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(stream.peer_addr().unwrap(), good);
        let error = r
            .connect(&[closed], Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused);
        assert!(error.to_string().contains(&closed.to_string()), "{error}");
    }
}
