//! Plain HTTP forwarding, and the splice that relays a tunnel.
//!
//! A forwarded connection goes to one target: every request on it is
//! checked (URL and `Host` alike) and must name that target, or the
//! connection is refused and closed. A tunnel's bytes are relayed and never
//! parsed again.

use std::io;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::gate::one_target_rule;
use super::http1::{
    absolute_uri, authority_parts, bad_request, copy_body, keeps_alive, read_request,
    relay_response, request_body, values, AbsoluteUri, Body, HeadError, HttpOutcome, RequestHead,
    ResponseError, HEAD_LIMIT, MAX_HEADERS,
};
use super::inbound::Inbound;
use super::{Proxy, HEAD_TIMEOUT};
use sandbox::net::allow::Host;

/// How much of a plain HTTP request's URL the audit keeps.
pub(super) const REQUESTED_LIMIT: usize = 256;

impl Proxy {
    /// Forwards plain HTTP requests on one connection to one target.
    pub(super) async fn forward(
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

/// Relays both ways between the client and its one target, starting with
/// what the client sent after its request.
pub(super) async fn relay(
    client: Inbound<OwnedReadHalf>,
    write: OwnedWriteHalf,
    mut upstream: TcpStream,
) -> io::Result<()> {
    let Inbound { io, buf } = client;
    if !buf.is_empty() {
        upstream.write_all(&buf).await?;
    }
    let client = io.reunite(write).map_err(io::Error::other)?;
    crate::splice::relay(&client, &upstream).await
}

/// A request refused by policy before any decision (403, audited).
pub(super) struct Forbidden {
    pub(super) rule: String,
    pub(super) message: String,
}

impl Forbidden {
    pub(super) fn outcome(&self) -> HttpOutcome {
        HttpOutcome::Answer("403 Forbidden", self.message.clone())
    }
}

/// A plain HTTP request checked for forwarding.
pub(super) struct Request {
    pub(super) head: RequestHead,
    pub(super) uri: AbsoluteUri,
    pub(super) body: Body,
    /// Set when policy refuses the request though it is well-formed.
    pub(super) forbidden: Option<Forbidden>,
}

impl Request {
    /// Checks a forwarded request's form: malformed ones are answered 400
    /// here; ones policy refuses carry `forbidden` so the caller can audit
    /// them against their target.
    pub(super) fn check(head: RequestHead) -> Result<Request, HttpOutcome> {
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

    pub(super) fn requested(&self) -> String {
        let mut text = format!("{} {}", self.head.method, self.head.target);
        if text.len() > REQUESTED_LIMIT {
            text.truncate(sandbox::text::floor_char_boundary(&text, REQUESTED_LIMIT));
            text.push_str("...");
        }
        text
    }

    /// The request in origin form, without the fields meant for the proxy.
    pub(super) fn origin_head(&self) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use super::super::http1::HttpOutcome;
    use super::super::http1::{parse_request, MAX_HEADERS};
    use super::super::testing::*;
    use super::Request;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpListener;

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
}
