//! The HTTP front door: a request head is read, a `CONNECT host:port`
//! becomes a tunnel to its one target, any other request goes to
//! forwarding; and the plain-text answers an HTTP client gets when it
//! cannot have what it asked for.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use super::forward::Request;
use super::gate::Failure;
use super::http1::{bad_request, HttpOutcome};
use super::http1::{read_request, HEAD_LIMIT};
use super::inbound::Inbound;
use super::Proxy;
use sandbox::net::allow::split_target;

/// After a refusal, unread request bytes are drained this long before
/// closing, so that the kernel does not answer them with a reset that
/// destroys the refusal before the client reads it.
pub(super) const LINGER: Duration = Duration::from_secs(2);

impl Proxy {
    pub(super) async fn http(
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
}

pub(super) fn failure_outcome(failure: Failure) -> HttpOutcome {
    match failure {
        Failure::Refused(message) => HttpOutcome::Answer("403 Forbidden", message),
        Failure::Unresolved(message) | Failure::Unreachable(message) => {
            HttpOutcome::Answer("502 Bad Gateway", message)
        }
    }
}

/// Writes a text/plain answer and closes the connection.
pub(super) async fn answer_and_close(
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

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
}
