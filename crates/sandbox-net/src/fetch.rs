//! The broker's `net.http` request, performed by the run's net process.
//!
//! The supervisor's broker checks and decides the request
//! (`sandbox::broker::http`) and resolves and checks its addresses; the net
//! process gets the request and those addresses over its link and calls
//! [`fetch`], which connects only to them (it never resolves: a second
//! lookup could answer differently), speaks TLS with the system's roots for
//! `https`, sends one HTTP/1.1 request and reads the response up to a size
//! cap, all under one deadline. Redirects are answered, never followed:
//! the next location is a new target the broker has not decided on.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use sandbox::net::fetch::{FetchRequest, FetchResponse, Scheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// Why a fetch failed, by step.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The caller passed no address.
    #[error("no address to connect to for {host}: the name resolved to no address that passed the checks")]
    NoAddress {
        /// The request's host.
        host: String,
    },
    /// No address accepted the connection.
    #[error("connect to {addr}: {source}")]
    Connect {
        /// The last address tried.
        addr: SocketAddr,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The host is no valid TLS server name.
    #[error("{host:?} is not a valid TLS server name")]
    ServerName {
        /// The request's host.
        host: String,
    },
    /// The TLS handshake failed (an untrusted certificate, a name mismatch).
    #[error("TLS handshake with {host}: {source}")]
    Tls {
        /// The request's host.
        host: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The request cannot be expressed (a header hyper refuses).
    #[error("the request cannot be sent: {reason}")]
    BadRequest {
        /// What is wrong.
        reason: String,
    },
    /// The request names another host in its own Host header.
    #[error("the request's Host header {given:?} is not the URL's host {expected:?}: drop it, the Host header is set from the URL")]
    HostMismatch {
        /// The Host header given.
        given: String,
        /// The one the URL implies.
        expected: String,
    },
    /// The HTTP handshake or sending the request failed.
    #[error("sending the request to {host}: {source}")]
    Sending {
        /// The request's host.
        host: String,
        /// Why it failed.
        source: hyper::Error,
    },
    /// Reading the response body failed.
    #[error("reading the response from {host}: {source}")]
    Reading {
        /// The request's host.
        host: String,
        /// Why it failed.
        source: hyper::Error,
    },
    /// The whole exchange took longer than the request's timeout.
    #[error("timed out after {ms} ms: raise timeout_ms (at most 300000) or try again")]
    TimedOut {
        /// The timeout in milliseconds.
        ms: u128,
    },
    /// No trusted root certificate could be loaded.
    #[error("no TLS root certificates could be loaded from the system ({detail}): install the ca-certificates package, or point SSL_CERT_FILE at a PEM bundle")]
    NoRoots {
        /// What the loader reported.
        detail: String,
    },
    /// The TLS configuration could not be built.
    #[error("building the TLS configuration: {0}")]
    TlsConfig(#[source] rustls::Error),
}

impl FetchError {
    /// Whether the request ran out of time (the broker answers TIMEOUT).
    pub fn timed_out(&self) -> bool {
        matches!(self, FetchError::TimedOut { .. })
    }
}

/// The TLS configuration for `https` requests: the system's roots
/// (`/etc/ssl/certs` and the usual bundles; `SSL_CERT_FILE` and
/// `SSL_CERT_DIR` override them), TLS 1.2 and 1.3.
pub fn client_config() -> Result<Arc<rustls::ClientConfig>, FetchError> {
    let loaded = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (_, unparsable) = roots.add_parsable_certificates(loaded.certs);
    if roots.is_empty() {
        let mut causes: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
        if unparsable > 0 {
            causes.push(format!("{unparsable} certificates could not be parsed"));
        }
        if causes.is_empty() {
            causes.push("no certificate found".into());
        }
        return Err(FetchError::NoRoots {
            detail: causes.join("; "),
        });
    }
    client_config_with_roots(roots)
}

/// The TLS configuration with these roots (tests use their own CA).
pub fn client_config_with_roots(
    roots: rustls::RootCertStore,
) -> Result<Arc<rustls::ClientConfig>, FetchError> {
    // The provider is named, not taken from the process default: with two
    // providers compiled in, rustls' implicit choice panics.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(FetchError::TlsConfig)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Perform `request` against the first of `addrs` that accepts a
/// connection, under the request's timeout.
pub async fn fetch(
    request: &FetchRequest,
    addrs: &[SocketAddr],
    tls: Arc<rustls::ClientConfig>,
) -> Result<FetchResponse, FetchError> {
    match tokio::time::timeout(request.timeout, exchange(request, addrs, tls)).await {
        Ok(result) => result,
        Err(_) => Err(FetchError::TimedOut {
            ms: request.timeout.as_millis(),
        }),
    }
}

async fn exchange(
    request: &FetchRequest,
    addrs: &[SocketAddr],
    tls: Arc<rustls::ClientConfig>,
) -> Result<FetchResponse, FetchError> {
    // Build the request first: a bad one never opens a connection.
    let http_request = build(request)?;
    let stream = connect(&request.host, addrs).await?;
    match request.scheme {
        Scheme::Http => over(stream, http_request, request).await,
        Scheme::Https => {
            let server_name = rustls::pki_types::ServerName::try_from(request.host.clone())
                .map_err(|_| FetchError::ServerName {
                    host: request.host.clone(),
                })?;
            let stream = tokio_rustls::TlsConnector::from(tls)
                .connect(server_name, stream)
                .await
                .map_err(|source| FetchError::Tls {
                    host: request.host.clone(),
                    source,
                })?;
            over(stream, http_request, request).await
        }
    }
}

async fn connect(host: &str, addrs: &[SocketAddr]) -> Result<TcpStream, FetchError> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                // One request, written at once: Nagle would only hold the
                // body back behind the headers.
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(source) => {
                last = Some(FetchError::Connect {
                    addr: *addr,
                    source,
                })
            }
        }
    }
    Err(last.unwrap_or_else(|| FetchError::NoAddress {
        host: host.to_owned(),
    }))
}

/// The value the Host header must have: `host[:port]`, the port only when
/// it is not the scheme's own (RFC 9110 section 7.2).
fn host_header(request: &FetchRequest) -> String {
    let host = if request.host.contains(':') {
        format!("[{}]", request.host)
    } else {
        request.host.clone()
    };
    if request.port == request.scheme.default_port() {
        host
    } else {
        format!("{host}:{}", request.port)
    }
}

fn build(request: &FetchRequest) -> Result<hyper::Request<Full<Bytes>>, FetchError> {
    let bad = |reason: String| FetchError::BadRequest { reason };
    let method = hyper::Method::from_bytes(request.method.as_bytes())
        .map_err(|_| bad(format!("method {:?} is not a token", request.method)))?;
    if method == hyper::Method::CONNECT {
        return Err(bad("CONNECT opens a tunnel, not a request".into()));
    }
    let uri: hyper::Uri = request.path_and_query.parse().map_err(|_| {
        bad(format!(
            "{:?} is not a path and query",
            request.path_and_query
        ))
    })?;
    if uri.scheme().is_some() || uri.authority().is_some() {
        return Err(bad("the path must be in origin form (/path?query)".into()));
    }
    let expected_host = host_header(request);
    let mut builder = hyper::Request::builder().method(method).uri(uri);
    let mut has_host = false;
    for (name, value) in &request.headers {
        let name = hyper::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(format!("header name {name:?} is not a token")))?;
        if name == hyper::header::HOST {
            // Compared, not trusted: a Host that names another site would
            // send this request to it through a shared front end.
            if !value.eq_ignore_ascii_case(&expected_host) {
                return Err(FetchError::HostMismatch {
                    given: value.clone(),
                    expected: expected_host,
                });
            }
            has_host = true;
        }
        // The value is not echoed: it may be a secret's. Bytes above 0x7f
        // pass (obs-text): a JSON string's UTF-8 goes out as curl sends it.
        let value = hyper::header::HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
            bad(format!(
                "header {name}'s value has a byte headers cannot carry"
            ))
        })?;
        builder = builder.header(name, value);
    }
    if !has_host {
        builder = builder.header(hyper::header::HOST, expected_host);
    }
    builder
        .body(Full::new(Bytes::from(request.body.clone())))
        .map_err(|err| bad(err.to_string()))
}

async fn over<IO>(
    io: IO,
    http_request: hyper::Request<Full<Bytes>>,
    request: &FetchRequest,
) -> Result<FetchResponse, FetchError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let sending = |source| FetchError::Sending {
        host: request.host.clone(),
        source,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(sending)?;
    // The connection is driven here, not spawned: when the exchange ends
    // or times out, dropping it closes the socket at once.
    let exchange = async {
        let response = sender.send_request(http_request).await.map_err(sending)?;
        read(response, request).await
    };
    tokio::pin!(connection);
    tokio::pin!(exchange);
    tokio::select! {
        result = &mut exchange => result,
        // The connection ended first (the server closed it): what was
        // received is still delivered to, or failed in, the exchange.
        _ = &mut connection => exchange.await,
    }
}

async fn read(
    response: hyper::Response<hyper::body::Incoming>,
    request: &FetchRequest,
) -> Result<FetchResponse, FetchError> {
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let cap = usize::try_from(request.max_bytes).unwrap_or(usize::MAX);
    let mut body: Vec<u8> = Vec::new();
    let mut truncated = false;
    let mut incoming = response.into_body();
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|source| FetchError::Reading {
            host: request.host.clone(),
            source,
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let room = cap - body.len();
        if data.len() > room {
            body.extend_from_slice(&data[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&data);
    }
    Ok(FetchResponse {
        status,
        headers,
        body,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn request(scheme: Scheme, host: &str, port: u16) -> FetchRequest {
        FetchRequest {
            method: "GET".into(),
            scheme,
            host: host.into(),
            port,
            path_and_query: "/path?q=1".into(),
            headers: vec![("X-Test".into(), "yes".into())],
            body: Vec::new(),
            timeout: Duration::from_secs(20),
            max_bytes: 1 << 20,
        }
    }

    /// Read one request's head and body (Content-Length framed).
    async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> String {
        let mut received = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&received).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if received.len() >= end + 4 + length {
                    break;
                }
            }
        }
        String::from_utf8_lossy(&received).into_owned()
    }

    /// A server answering each connection's first request with `reply`;
    /// the requests it saw come back on the channel.
    async fn serve(reply: Vec<u8>) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, requests) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen.clone();
                let reply = reply.clone();
                tokio::spawn(async move {
                    let received = read_request(&mut stream).await;
                    let _ = seen.send(received);
                    let _ = stream.write_all(&reply).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (addr, requests)
    }

    #[tokio::test]
    async fn plain_http_sends_the_request_and_reads_the_response() {
        let (addr, mut requests) =
            serve(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Reply: \xffok\r\n\r\nhello".to_vec())
                .await;
        let mut req = request(Scheme::Http, "api.test", addr.port());
        req.method = "POST".into();
        req.body = b"payload".to_vec();
        let unanswering: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let tls = client_config_with_roots(rustls::RootCertStore::empty()).unwrap();
        let response = fetch(&req, &[unanswering, addr], tls).await.unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.body, b"hello");
        assert!(!response.truncated);
        assert!(response
            .headers
            .contains(&("x-reply".to_owned(), "\u{fffd}ok".to_owned())));
        let seen = requests.recv().await.unwrap();
        assert!(seen.starts_with("POST /path?q=1 HTTP/1.1\r\n"), "{seen}");
        let lower = seen.to_ascii_lowercase();
        assert!(
            lower.contains(&format!("\r\nhost: api.test:{}\r\n", addr.port())),
            "{seen}"
        );
        assert!(lower.contains("\r\nx-test: yes\r\n"), "{seen}");
        assert!(lower.contains("\r\ncontent-length: 7\r\n"), "{seen}");
        assert!(seen.ends_with("\r\n\r\npayload"), "{seen}");
    }

    #[tokio::test]
    async fn a_host_header_naming_another_host_is_refused_before_connecting() {
        let (addr, mut requests) =
            serve(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec()).await;
        let tls = client_config_with_roots(rustls::RootCertStore::empty()).unwrap();
        let mut req = request(Scheme::Http, "api.test", addr.port());
        req.headers.push(("Host".into(), "internal.test".into()));
        let err = fetch(&req, &[addr], tls.clone()).await.unwrap_err();
        assert!(matches!(err, FetchError::HostMismatch { .. }), "{err}");
        // The same host is accepted, whatever its case.
        req.headers.pop();
        req.headers
            .push(("host".into(), format!("API.test:{}", addr.port())));
        assert_eq!(fetch(&req, &[addr], tls).await.unwrap().status, 200);
        assert_eq!(
            requests.recv().await.map(|r| r.matches("ost:").count()),
            Some(1)
        );
    }

    #[tokio::test]
    async fn the_body_is_cut_at_max_bytes() {
        let body = vec![b'x'; 100_000];
        let mut reply =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
        reply.extend_from_slice(&body);
        let (addr, _requests) = serve(reply).await;
        let tls = client_config_with_roots(rustls::RootCertStore::empty()).unwrap();
        let mut req = request(Scheme::Http, "api.test", addr.port());
        req.max_bytes = 1000;
        let response = fetch(&req, &[addr], tls.clone()).await.unwrap();
        assert_eq!(response.body.len(), 1000);
        assert!(response.truncated);
        req.max_bytes = 100_000;
        let response = fetch(&req, &[addr], tls).await.unwrap();
        assert_eq!(response.body.len(), 100_000);
        assert!(!response.truncated, "a body exactly at the cap is whole");
    }

    #[tokio::test]
    async fn a_server_that_never_answers_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(stream);
        });
        let tls = client_config_with_roots(rustls::RootCertStore::empty()).unwrap();
        let mut req = request(Scheme::Http, "api.test", addr.port());
        req.timeout = Duration::from_millis(200);
        let err = fetch(&req, &[addr], tls).await.unwrap_err();
        assert!(matches!(err, FetchError::TimedOut { ms: 200 }), "{err}");
        assert!(err.to_string().contains("timed out after 200 ms"));
        held.abort();
    }

    #[tokio::test]
    async fn a_redirect_is_answered_not_followed() {
        let (addr, mut requests) = serve(
            b"HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/\r\nContent-Length: 0\r\n\r\n"
                .to_vec(),
        )
        .await;
        let tls = client_config_with_roots(rustls::RootCertStore::empty()).unwrap();
        let response = fetch(
            &request(Scheme::Http, "api.test", addr.port()),
            &[addr],
            tls,
        )
        .await
        .unwrap();
        assert_eq!(response.status, 302);
        assert!(requests.recv().await.is_some());
        assert!(
            requests.try_recv().is_err(),
            "only the one request was made"
        );
    }

    #[tokio::test]
    async fn no_address_or_a_refused_one_is_an_error_naming_it() {
        let tls = client_config_with_roots(rustls::RootCertStore::empty()).unwrap();
        let req = request(Scheme::Http, "api.test", 80);
        let err = fetch(&req, &[], tls.clone()).await.unwrap_err();
        assert!(matches!(err, FetchError::NoAddress { .. }), "{err}");
        let closed: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let err = fetch(&req, &[closed], tls).await.unwrap_err();
        assert!(
            err.to_string().starts_with("connect to 127.0.0.1:1:"),
            "{err}"
        );
    }

    struct TestCa {
        roots: rustls::RootCertStore,
        server: Arc<rustls::ServerConfig>,
    }

    /// A CA and a server certificate for `localhost` and 127.0.0.1.
    fn test_ca() -> TestCa {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_cert =
            rcgen::CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .unwrap()
                .signed_by(&server_key, &ca)
                .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.der().clone()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(server_key.serialize_der().into());
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![server_cert.der().clone()], key)
        .unwrap();
        TestCa {
            roots,
            server: Arc::new(server),
        }
    }

    /// An HTTPS server answering one request per connection; the SNI name
    /// each connection sent comes back on the channel.
    async fn serve_tls(
        config: Arc<rustls::ServerConfig>,
    ) -> (
        SocketAddr,
        tokio::sync::mpsc::UnboundedReceiver<Option<String>>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (seen, names) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let _ = seen.send(tls.get_ref().1.server_name().map(str::to_owned));
                    read_request(&mut tls).await;
                    let _ = tls
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecure")
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        (addr, names)
    }

    #[tokio::test]
    async fn https_verifies_the_server_against_the_roots_and_sends_sni() {
        let ca = test_ca();
        let (addr, mut names) = serve_tls(ca.server.clone()).await;
        let tls = client_config_with_roots(ca.roots.clone()).unwrap();

        let response = fetch(
            &request(Scheme::Https, "localhost", addr.port()),
            &[addr],
            tls.clone(),
        )
        .await
        .unwrap();
        assert_eq!(
            (response.status, response.body.as_slice()),
            (200, &b"secure"[..])
        );
        assert_eq!(names.recv().await, Some(Some("localhost".to_owned())));

        // An IP literal host is verified against the certificate's IP
        // address, and sends no SNI (RFC 6066 allows names only).
        let response = fetch(
            &request(Scheme::Https, "127.0.0.1", addr.port()),
            &[addr],
            tls.clone(),
        )
        .await
        .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(names.recv().await, Some(None));

        // A name the certificate does not hold fails the handshake.
        let err = fetch(
            &request(Scheme::Https, "other.test", addr.port()),
            &[addr],
            tls,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, FetchError::Tls { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("TLS handshake with other.test:"),
            "{err}"
        );

        // A server whose CA is not among the roots fails it too.
        let stranger = client_config_with_roots(test_ca().roots).unwrap();
        let err = fetch(
            &request(Scheme::Https, "localhost", addr.port()),
            &[addr],
            stranger,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, FetchError::Tls { .. }), "{err}");
    }

    #[test]
    fn the_system_roots_load_or_the_error_says_how_to_fix_it() {
        match client_config() {
            Ok(config) => assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]),
            Err(err) => {
                assert!(matches!(err, FetchError::NoRoots { .. }), "{err}");
                assert!(err.to_string().contains("SSL_CERT_FILE"), "{err}");
                assert!(
                    !std::path::Path::new("/etc/ssl/certs/ca-certificates.crt").exists(),
                    "the bundle exists but did not load: {err}"
                );
            }
        }
    }
}
