//! What the proxy's tests share: a gate that keeps what it saw, a proxy
//! serving on loopback, and servers and a client to talk to it.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::{serve, Gate, Record, Target, Verdict};
use crate::resolve::Resolver;
use sandbox::net::allow::Allowlist;

/// Allows the names it lists, refuses the others; keeps what it saw.
#[derive(Default)]
pub(super) struct TestGate {
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
    pub(super) fn records(&self) -> Vec<Record> {
        self.records.lock().unwrap().clone()
    }
    pub(super) fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

pub(super) async fn start_proxy(
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
pub(super) async fn echo_server() -> u16 {
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
pub(super) fn silent_server() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

pub(super) fn reached(listener: &std::net::TcpListener) -> bool {
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

/// A keep-alive HTTP server answering "hello PORT PATH"; it keeps each
/// request head it got.
pub(super) async fn http_server() -> (u16, Arc<Mutex<Vec<String>>>) {
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

pub(super) struct Client {
    pub(super) stream: BufReader<TcpStream>,
}

impl Client {
    pub(super) async fn connect(proxy: SocketAddr) -> Client {
        Client {
            stream: BufReader::new(TcpStream::connect(proxy).await.unwrap()),
        }
    }

    pub(super) async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.unwrap();
    }

    /// Status and body of one response (Content-Length framed, or
    /// until close).
    pub(super) async fn response(&mut self) -> (u16, String) {
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

    pub(super) async fn is_closed(&mut self) -> bool {
        let mut rest = Vec::new();
        self.stream
            .read_to_end(&mut rest)
            .await
            .map(|_| rest.is_empty())
            .unwrap_or(true)
    }

    pub(super) async fn echo(&mut self, text: &str) -> String {
        self.send(text.as_bytes()).await;
        let mut back = vec![0; text.len()];
        self.stream.read_exact(&mut back).await.unwrap();
        String::from_utf8(back).unwrap()
    }
}
