//! The allow/ask decision: a target the allowlist covers goes ahead, an
//! unlisted IP literal is refused, any other name is put to the [`Gate`];
//! then the proxy resolves the name itself and connects only to addresses
//! that passed the address checks. Every attempt ends in one record.

use std::time::Duration;

use tokio::net::TcpStream;

use super::{Proxy, Record, Target, ADDRESS_LITERAL_RULE};
use sandbox::net::allow::{Host, DEFAULT_PORTS};

/// How long connecting to one upstream address may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why no upstream connection was made.
pub(super) enum Failure {
    /// The policy refused (403, SOCKS 0x02).
    Refused(String),
    /// The name did not resolve (502, SOCKS 0x04).
    Unresolved(String),
    /// No address accepted the connection (502, SOCKS 0x05).
    Unreachable(String),
}

impl Proxy {
    /// Decides, resolves and connects; records the outcome.
    pub(super) async fn open(
        &self,
        host: Host,
        port: u16,
        requested: String,
    ) -> Result<TcpStream, Failure> {
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

    pub(super) fn record(
        &self,
        target: &Target,
        allowed: bool,
        rule: String,
        refusal: Option<String>,
    ) {
        self.gate.record(Record {
            target: target.host.with_port(target.port),
            host: target.host.to_string(),
            requested: target.requested.clone(),
            allowed,
            rule,
            refusal,
        });
    }

    pub(super) fn refuse_locally(&self, host: &Host, port: u16, requested: String, rule: String) {
        let target = Target {
            host: host.clone(),
            port,
            requested,
        };
        self.record(&target, false, rule, None);
    }
}

pub(super) fn one_target_rule(host: &Host, port: u16) -> String {
    format!(
        "network: one connection, one target (this connection goes to {})",
        host.with_port(port)
    )
}

/// What to tell a client whose target was refused, with the fix.
pub(super) fn refusal_message(target: &Target, rule: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Record, ADDRESS_LITERAL_RULE};

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
}
