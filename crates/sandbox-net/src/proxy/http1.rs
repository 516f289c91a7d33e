//! HTTP/1 framing: request and response heads (bounded), how a body is
//! delimited (length, chunked, until close; never both length and
//! chunked), absolute URIs and authorities, the body copies that relay
//! bytes exactly as they came, and how an HTTP exchange ends
//! ([`HttpOutcome`]).

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::inbound::Inbound;
use sandbox::net::allow::Host;

pub(super) fn bad_request(message: String) -> HttpOutcome {
    HttpOutcome::Answer("400 Bad Request", message)
}

/// How an HTTP connection's handling ends.
pub(super) enum HttpOutcome {
    /// Nothing more to say.
    Done,
    /// A status line and a reason, then close.
    Answer(&'static str, String),
    /// Relay both ways to the upstream.
    Tunnel(TcpStream),
}

/// The largest request or response head read (request line or status line
/// and headers); the bound keeps a hostile client from growing memory.
pub(super) const HEAD_LIMIT: usize = 64 * 1024;
/// The most header fields a head may have.
pub(super) const MAX_HEADERS: usize = 128;
/// Relay buffer per direction: the benchmark allows the proxy 10%
/// of the bare throughput of a 100 MiB download, and tokio's default 8 KiB
/// copy buffer costs a pair of syscalls per 8 KiB.
pub(super) const RELAY_BUFFER: usize = 256 * 1024;
/// The longest chunk-size line of a chunked body.
pub(super) const CHUNK_LINE_LIMIT: usize = 4096;

/// A parsed request head, owned.
pub(super) struct RequestHead {
    pub(super) method: String,
    pub(super) target: String,
    pub(super) minor: u8,
    pub(super) headers: Vec<(String, Vec<u8>)>,
    /// Its length in the buffer.
    pub(super) len: usize,
}

pub(super) enum HeadError {
    /// The client closed or went silent between requests.
    Gone,
    TooLarge,
    Malformed(String),
}

impl HeadError {
    pub(super) fn outcome(self) -> HttpOutcome {
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

pub(super) async fn read_request(
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

pub(super) fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, HeadError> {
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

pub(super) fn owned_headers(fields: &[httparse::Header<'_>]) -> Vec<(String, Vec<u8>)> {
    fields
        .iter()
        .map(|field| (field.name.to_string(), field.value.to_vec()))
        .collect()
}

pub(super) fn values<'a>(
    headers: &'a [(String, Vec<u8>)],
    name: &'a str,
) -> impl Iterator<Item = &'a [u8]> {
    headers
        .iter()
        .filter(move |(field, _)| field.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_slice())
}

/// The comma-separated tokens of every field called `name`, lower-cased.
pub(super) fn tokens(headers: &[(String, Vec<u8>)], name: &str) -> Vec<String> {
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

pub(super) fn keeps_alive(minor: u8, headers: &[(String, Vec<u8>)]) -> bool {
    let connection = tokens(headers, "connection");
    if connection.iter().any(|t| t == "close") {
        false
    } else {
        minor >= 1 || connection.iter().any(|t| t == "keep-alive")
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    Empty,
    Length(u64),
    Chunked,
    /// Until the sender closes (responses only).
    UntilClose,
}

pub(super) fn content_length(headers: &[(String, Vec<u8>)]) -> Result<Option<u64>, String> {
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

pub(super) fn request_body(headers: &[(String, Vec<u8>)]) -> Result<Body, String> {
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

pub(super) fn response_body(
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
pub(super) struct AbsoluteUri {
    pub(super) host: Host,
    pub(super) port: u16,
    /// Path and query, for the origin-form request line.
    pub(super) path: String,
}

pub(super) fn absolute_uri(target: &str) -> Result<AbsoluteUri, String> {
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
pub(super) fn authority_parts(authority: &str) -> Result<(Host, u16), String> {
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

pub(super) enum ResponseError {
    /// No (valid) response head arrived; the client has been sent nothing.
    NoHead(String),
    /// The exchange broke after the client got part of it.
    Broken,
}

/// Relays one response (with any 1xx before it); whether the upstream
/// connection can carry another request.
pub(super) async fn relay_response<R, W>(
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

pub(super) async fn copy_body<R, W>(
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

pub(super) fn grow(scratch: &mut Vec<u8>) {
    if scratch.len() < RELAY_BUFFER {
        scratch.resize(RELAY_BUFFER, 0);
    }
}

pub(super) async fn copy_exact<R, W>(
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

pub(super) async fn copy_chunked<R, W>(
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

pub(super) fn chunk_size(line: &[u8]) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
