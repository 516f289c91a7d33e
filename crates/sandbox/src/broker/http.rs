//! `net.http`: one HTTP request the supervisor makes for the sandbox.
//!
//! [`prepare`] turns the sandbox's parameters into a checked
//! [`FetchRequest`] and the `host:port` target the allowlist and the
//! broker decide on, putting secret values in place of their handles in
//! header values for the hosts each secret is bound to; the run's net
//! process performs it ([`crate::net::fetch`]); [`answer`] turns the
//! response into the result, with the value of every secret bound to a
//! host replaced by its handle, whichever request the answer is to (a
//! bound host may keep the value and return it to a later request that
//! carries no handle). A handle anywhere else (the URL, the body), or for
//! a host its secret is not bound to, refuses the request: the value is
//! never sent where the person did not say, and a binding without a port
//! sends it over https only (the certificate proves the name; plain http
//! needs the port bound, `api.test:80`). Redaction finds the value as sent
//! and in the encodings an echo uses ([`super::redact`]), not compressed,
//! so every request to a host a secret is bound to asks for its answer
//! unencoded and whole (`Accept-Encoding: identity`, no `Range`), and an
//! answer from such a host that is encoded all the same comes back without
//! its body (`body_withheld` says why).

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use super::protocol::code;
use super::protocol::{fail, Failure};
use super::secrets::{Secret, Secrets};
use crate::net::fetch::{FetchRequest, FetchResponse, Scheme};

/// Default time for the whole exchange.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Longest time a request may ask for.
pub const MAX_TIMEOUT_MS: u64 = 300_000;
/// Default cap on the response body.
pub const DEFAULT_MAX_BYTES: u64 = 512 << 10;
/// Largest cap a request may ask for: the answer is one line on the
/// broker channel, at most `transport::ANSWER_LIMIT` (1 MiB) encoded, and
/// 640 KiB of body is at most 854 KiB as base64, leaving room for the
/// headers. A larger download goes through the proxy (`--net allow:`).
pub const MAX_MAX_BYTES: u64 = 640 << 10;

/// Headers the broker sets itself or that belong to one connection
/// (RFC 9110 section 7.6.1): a request's own would frame the message
/// differently from what is sent (request smuggling) or name another host.
const REFUSED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// `net.http` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpParams {
    /// `http://` or `https://` URL.
    pub url: String,
    /// Method (default GET).
    pub method: Option<String>,
    /// Request headers; a value may hold secret handles.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Body as text.
    pub body: Option<String>,
    /// Body as base64 bytes.
    pub body_base64: Option<String>,
    /// Time for the whole exchange in milliseconds (default 30000, at most 300000).
    pub timeout_ms: Option<u64>,
    /// Cap on the response body in bytes (default 512 KiB, at most 640 KiB).
    pub max_bytes: Option<u64>,
}

/// A checked request, ready for the allowlist decision and the net process.
#[derive(Debug)]
pub struct Prepared {
    /// `host:port` (`[v6]:port`) as the allowlist and the broker's rules see it.
    pub target: String,
    /// The request, secret values in place.
    pub request: FetchRequest,
    /// Names of the secrets put into it.
    pub used_secrets: Vec<String>,
    /// Some secret is bound to the target, so its host may hold a value
    /// and echo it: [`answer`] withholds an encoded body.
    pub bound_host: bool,
}

/// Check `params` and build the request.
pub fn prepare(params: Value, secrets: &Secrets) -> Result<Prepared, Failure> {
    let params: HttpParams = serde_json::from_value(params)
        .map_err(|err| fail(code::INVALID_PARAMS, format!("net.http: {err}")))?;
    let url = parse_url(&params.url)?;
    let target = url.target();

    let method = params.method.unwrap_or_else(|| "GET".to_owned());
    if method.is_empty() || method.len() > 32 || !method.bytes().all(is_token_byte) {
        return Err(invalid(format!(
            "method {method:?} is not an HTTP method token (e.g. GET, POST)"
        )));
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        return Err(invalid(
            "CONNECT opens a tunnel, not a request: net.http makes one request \
             (for a tunnel, use the proxy at HTTPS_PROXY)",
        ));
    }

    let body = match (params.body, params.body_base64) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "body and body_base64 are both given: send text as body or bytes as body_base64",
            ))
        }
        (Some(text), None) => text.into_bytes(),
        (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|err| {
                invalid(format!(
                    "body_base64 is not base64 ({err}): encode the bytes in standard base64 with padding"
                ))
            })?,
        (None, None) => Vec::new(),
    };

    let timeout_ms = params.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
    if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
        return Err(invalid(format!(
            "timeout_ms {timeout_ms} is out of range: give 1 to {MAX_TIMEOUT_MS}"
        )));
    }
    let max_bytes = params.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    if max_bytes > MAX_MAX_BYTES {
        return Err(invalid(format!(
            "max_bytes {max_bytes} is over the limit of {MAX_MAX_BYTES} (640 KiB: the answer is one line of at most 1 MiB; download more through the proxy, --net allow:HOST)"
        )));
    }

    // Handles go in header values only: a URL ends up in logs, the
    // audit and Referer headers, and a body is often echoed back whole.
    if let Some(secret) = secrets.find_handles_in(&params.url).first() {
        return Err(misplaced(secret, "the URL"));
    }
    if let Some(secret) = secrets.find_handles_in_bytes(&body).first() {
        return Err(misplaced(secret, "the body"));
    }

    let mut headers = Vec::with_capacity(params.headers.len());
    let mut used_secrets: Vec<String> = Vec::new();
    for (name, value) in params.headers {
        if let Some(secret) = secrets.find_handles_in(&name).first() {
            return Err(misplaced(secret, "a header name"));
        }
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(invalid(format!(
                "header name {name:?} is not an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
            )));
        }
        if REFUSED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(invalid(format!(
                "header {name} is set by the broker from the URL and the body: leave it out"
            )));
        }
        if let Some(bad) = value.bytes().find(|b| matches!(b, b'\r' | b'\n' | 0)) {
            return Err(invalid(format!(
                "header {name}'s value holds byte {bad:#04x}: header values have no CR, LF or NUL"
            )));
        }
        let mut value = value;
        for secret in secrets.find_handles_in(&value) {
            if !secret.bound_to(&target) {
                return Err(not_bound(secret, &target));
            }
            if url.scheme == Scheme::Http && !secret.bound_to_in_clear(&target) {
                return Err(not_in_clear(secret, &target));
            }
            if secret
                .value()
                .bytes()
                .any(|b| matches!(b, b'\r' | b'\n' | 0))
            {
                return Err(fail(
                    code::PERMISSION_DENIED,
                    format!(
                        "secret {} holds a line break or NUL, which a header value cannot carry: \
                         give the secret without it",
                        secret.name()
                    ),
                ));
            }
            value = value.replace(secret.handle(), secret.value());
            if !used_secrets.iter().any(|used| used == secret.name()) {
                used_secrets.push(secret.name().to_owned());
            }
        }
        headers.push((name, value));
    }
    // The host may hold a value from an earlier request of this run even
    // when this one carries no handle.
    let bound_host = secrets.any_bound_to(&target);
    if bound_host {
        guard_echoes(&mut headers)?;
    }

    Ok(Prepared {
        target,
        request: FetchRequest {
            method,
            scheme: url.scheme,
            host: url.host,
            port: url.port,
            path_and_query: url.path_and_query,
            headers,
            body,
            timeout: Duration::from_millis(timeout_ms),
            max_bytes,
        },
        used_secrets,
        bound_host,
    })
}

/// Headers that make a server send back a transformed or partial copy of
/// what it received: a secret's value echoed compressed or in slices would
/// pass the literal redaction of [`answer`] and be decoded in the sandbox.
const TRANSFORMING_HEADERS: &[&str] = &["range", "if-range"];

/// A request to a host a secret is bound to asks for its answer unencoded
/// (`Accept-Encoding: identity` in place of the sandbox's own) and may not
/// ask for a part of it.
fn guard_echoes(headers: &mut Vec<(String, String)>) -> Result<(), Failure> {
    if let Some((name, _)) = headers
        .iter()
        .find(|(name, _)| TRANSFORMING_HEADERS.contains(&name.to_ascii_lowercase().as_str()))
    {
        return Err(invalid(format!(
            "header {name} asks for a part of the answer, which could cut an echoed secret \
             into pieces that are no longer recognized and replaced: a request to a host a \
             secret is bound to gets whole answers only, so leave {name} out"
        )));
    }
    headers.retain(|(name, _)| !name.eq_ignore_ascii_case("accept-encoding"));
    headers.push(("Accept-Encoding".to_owned(), "identity".to_owned()));
    Ok(())
}

/// The coding of a response body other than identity and chunked (which
/// the client removes), when it has one: `Content-Encoding: gzip`, or a
/// `Transfer-Encoding` naming another coding.
fn body_coding(headers: &[(String, String)]) -> Option<String> {
    headers
        .iter()
        .filter(|(name, _)| {
            name.eq_ignore_ascii_case("content-encoding")
                || name.eq_ignore_ascii_case("transfer-encoding")
        })
        .flat_map(|(name, value)| {
            value
                .split(',')
                .map(|coding| coding.trim().to_ascii_lowercase())
                .filter(|coding| !coding.is_empty())
                .filter(move |coding| {
                    coding != "identity"
                        && !(name.eq_ignore_ascii_case("transfer-encoding") && coding == "chunked")
                })
                .collect::<Vec<_>>()
        })
        .next()
}

/// The `net.http` result for `response`: `status`, `headers` as
/// `[name, value]` pairs, `body` (text) or `body_base64` (bytes that are
/// not UTF-8), `truncated` when cut at the cap; every occurrence of the
/// value of a secret bound to a host replaced by its handle. `bound_host`:
/// the answer comes from a host a secret is bound to ([`Prepared`]).
pub fn answer(response: FetchResponse, secrets: &Secrets, bound_host: bool) -> Value {
    let headers: Vec<Value> = response
        .headers
        .iter()
        .map(|(name, value)| json!([secrets.redact_text(name), secrets.redact_text(value)]))
        .collect();
    let mut result = json!({ "status": response.status, "headers": headers });
    // A request to a bound host asked for identity; a server that still
    // encodes its answer may hold the value compressed, where no search
    // finds it. Decoding here instead would need a codec per coding (and a
    // bound on decompression bombs) and still fail open on a coding it
    // does not know, so the body is withheld.
    if bound_host {
        if let Some(coding) = body_coding(&response.headers) {
            result["body"] = json!("");
            result["body_withheld"] = json!(format!(
                "the server answered with the coding {coding} although the request asked for \
                 identity; a secret's value cannot be found and replaced in an encoded body, so \
                 an answer from a host a secret is bound to comes back only unencoded"
            ));
            return result;
        }
    }
    // Redact the bytes before choosing text or base64: a value inside
    // base64 would no longer be found.
    let body = secrets.redact_bytes(&response.body, response.truncated);
    // Text whose JSON escapes would outgrow base64 (control characters
    // take six bytes each) goes as base64, so that a body under the cap
    // always fits the answer.
    let as_base64 = |bytes: Vec<u8>| json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    match String::from_utf8(body) {
        Ok(text) if json!(text).to_string().len() <= text.len().div_ceil(3) * 4 + 2 => {
            result["body"] = json!(text)
        }
        Ok(text) => result["body_base64"] = as_base64(text.into_bytes()),
        Err(err) => result["body_base64"] = as_base64(err.into_bytes()),
    }
    if response.truncated {
        result["truncated"] = json!(true);
    }
    result
}

/// The failure for a fetch that failed in the net process with `message`
/// (a [`crate::net::fetch::FetchError`]'s text): TIMEOUT when it ran out
/// of time, else INTERNAL_ERROR; any bound secret's value in the text (a
/// server's error echoing a header) replaced by its handle.
pub fn fetch_failure(message: &str, timed_out: bool, secrets: &Secrets) -> Failure {
    let code = if timed_out {
        code::TIMEOUT
    } else {
        code::INTERNAL_ERROR
    };
    fail(code, format!("net.http: {}", secrets.redact_text(message)))
}

/// A parsed `net.http` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Url {
    scheme: Scheme,
    /// A normalized name, or an IP address's text (IPv6 without brackets).
    host: String,
    port: u16,
    path_and_query: String,
}

impl Url {
    fn target(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn parse_url(url: &str) -> Result<Url, Failure> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        invalid(format!(
            "url {url:?} is not absolute: write https://HOST/PATH"
        ))
    })?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        _ => {
            return Err(invalid(format!(
                "url scheme {scheme:?} is not http or https"
            )))
        }
    };
    // The fragment stays with the client; it is never sent.
    let rest = rest.split('#').next().unwrap_or_default();
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(invalid(
            "url holds a user name or password (user@host): put credentials in a header, \
             e.g. Authorization with a secret handle",
        ));
    }
    if let Some(bad) = path_and_query.bytes().find(|b| !(0x21..=0x7e).contains(b)) {
        return Err(invalid(format!(
            "url path holds byte {bad:#04x}: percent-encode spaces, controls and non-ASCII"
        )));
    }
    let (host_text, port_text) = if let Some(inner) = authority.strip_prefix('[') {
        let (host, after) = inner
            .split_once(']')
            .ok_or_else(|| invalid("url host [IPv6 lacks its closing ]"))?;
        match after {
            "" => (host, None),
            _ => (
                host,
                Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| invalid("url: after [IPv6] comes :PORT or the path"))?,
                ),
            ),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port_text {
        None | Some("") => match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        },
        Some(text) => match text.parse::<u16>() {
            Ok(port) if port != 0 && text.bytes().all(|b| b.is_ascii_digit()) => port,
            _ => return Err(invalid(format!("url port {text:?} is not 1 to 65535"))),
        },
    };
    let host = normalize_host(host_text, authority.starts_with('['))?;
    let path_and_query = if path_and_query.starts_with('/') {
        path_and_query.to_owned()
    } else {
        format!("/{path_and_query}")
    };
    Ok(Url {
        scheme,
        host,
        port,
        path_and_query,
    })
}

/// The host of a URL as the allowlist compares it: a normalized name, or an
/// address's text (IPv6 without brackets).
fn normalize_host(host: &str, bracketed: bool) -> Result<String, Failure> {
    let text = if bracketed {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    crate::net::allow::Host::parse(&text)
        .map(|host| host.to_string())
        .map_err(|err| invalid(format!("url {err}")))
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn invalid(message: impl Into<String>) -> Failure {
    fail(
        code::INVALID_PARAMS,
        format!("net.http: {}", message.into()),
    )
}

fn misplaced(secret: &Secret, place: &str) -> Failure {
    fail(
        code::PERMISSION_DENIED,
        format!(
            "net.http: the handle of secret {name} is in {place}; a secret is sent only in a \
             header value (e.g. \"Authorization\": \"Bearer <handle>\") to a host it is bound to \
             (--secret {name}=env:VAR@HOST)",
            name = secret.name()
        ),
    )
}

fn not_in_clear(secret: &Secret, target: &str) -> Failure {
    let name = secret.name();
    fail(
        code::PERMISSION_DENIED,
        format!(
            "net.http: secret {name} is bound to {} without a port, which sends it over https \
             only: over plain http anyone on the path, or whoever answers for the name, reads \
             it; use an https:// URL, or bind the port to allow plain http \
             (--secret {name}=env:VAR@{target})",
            secret.hosts().join(", ")
        ),
    )
}

fn not_bound(secret: &Secret, target: &str) -> Failure {
    let name = secret.name();
    let host = target
        .rsplit_once(':')
        .map_or(target, |(host, _)| host)
        .to_owned();
    let message = if secret.hosts().is_empty() {
        format!(
            "net.http: secret {name} is bound to no host, so it is sent nowhere: \
             pass it as --secret {name}=env:VAR@{host}"
        )
    } else {
        format!(
            "net.http: secret {name} is bound to {}, not to {target}: add the host to its \
             binding, --secret {name}=env:VAR@{host}",
            secret.hosts().join(", ")
        )
    };
    fail(code::PERMISSION_DENIED, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::secrets::SecretSpec;

    const VALUE: &str = "tok-3f9a-VALUE";

    fn secrets() -> Secrets {
        let mut secrets = Secrets::default();
        secrets.add(vec![
            SecretSpec {
                name: "GH".into(),
                value: VALUE.into(),
                hosts: vec!["api.github.com".into(), "*.api.test:8443".into()],
            },
            SecretSpec::unbound("LOOSE", "loose-value"),
        ]);
        secrets
    }

    fn handle(secrets: &Secrets, name: &str) -> String {
        secrets.named(name).unwrap().handle().to_owned()
    }

    fn refused(params: Value, secrets: &Secrets) -> Failure {
        let failure = prepare(params, secrets).expect_err("refused");
        assert!(
            !failure.message.contains(VALUE) && !failure.message.contains("loose-value"),
            "a failure never holds a value: {}",
            failure.message
        );
        failure
    }

    #[test]
    fn a_plain_get_gets_defaults() {
        let p = prepare(
            json!({"url": "https://API.Example.com./v1?q=1#frag"}),
            &secrets(),
        )
        .unwrap();
        assert_eq!(p.target, "api.example.com:443");
        assert_eq!(p.request.method, "GET");
        assert_eq!(p.request.scheme, Scheme::Https);
        assert_eq!(p.request.host, "api.example.com");
        assert_eq!(p.request.port, 443);
        assert_eq!(p.request.path_and_query, "/v1?q=1");
        assert_eq!(p.request.timeout, Duration::from_millis(DEFAULT_TIMEOUT_MS));
        assert_eq!(p.request.max_bytes, DEFAULT_MAX_BYTES);
        assert!(p.used_secrets.is_empty());
    }

    #[test]
    fn urls_are_parsed_into_targets() {
        for (url, target, path) in [
            ("http://h.test", "h.test:80", "/"),
            ("http://h.test:8080?x", "h.test:8080", "/?x"),
            ("https://127.0.0.1:8443/a", "127.0.0.1:8443", "/a"),
            ("https://[::1]/", "[::1]:443", "/"),
            ("https://[0:0::1]:9/p", "[::1]:9", "/p"),
        ] {
            let p = prepare(json!({ "url": url }), &secrets()).unwrap();
            assert_eq!(p.target, target, "{url}");
            assert_eq!(p.request.path_and_query, path, "{url}");
        }
        for (url, why) in [
            ("ftp://h.test/", "not http or https"),
            ("h.test/x", "not absolute"),
            ("https://user:pw@h.test/", "user name"),
            ("https://h.test:0/", "port"),
            ("https://h.test:99999/", "port"),
            ("https://h.test:+80/", "port"),
            ("https://h.test/a b", "percent-encode"),
            ("https://bad_host!/", "letters, digits"),
            ("https://0x7f.1/", "address"),
            ("https://[::1/", "closing"),
            ("https:///path", "empty"),
        ] {
            let failure = refused(json!({ "url": url }), &secrets());
            assert_eq!(failure.code, code::INVALID_PARAMS, "{url}");
            assert!(failure.message.contains(why), "{url}: {}", failure.message);
        }
    }

    #[test]
    fn params_are_checked() {
        let s = secrets();
        for (params, why) in [
            (
                json!({"url": "https://h.test/", "nope": 1}),
                "unknown field",
            ),
            (
                json!({"url": "https://h.test/", "method": "GE T"}),
                "method",
            ),
            (
                json!({"url": "https://h.test/", "method": "CONNECT"}),
                "tunnel",
            ),
            (
                json!({"url": "https://h.test/", "body": "a", "body_base64": "YQ=="}),
                "both",
            ),
            (
                json!({"url": "https://h.test/", "body_base64": "%%%"}),
                "not base64",
            ),
            (
                json!({"url": "https://h.test/", "timeout_ms": 0}),
                "timeout_ms",
            ),
            (
                json!({"url": "https://h.test/", "timeout_ms": 300_001}),
                "timeout_ms",
            ),
            (
                json!({"url": "https://h.test/", "max_bytes": (32u64 << 20) + 1}),
                "max_bytes",
            ),
            (
                json!({"url": "https://h.test/", "headers": {"Host": "other.test"}}),
                "set by the broker",
            ),
            (
                json!({"url": "https://h.test/", "headers": {"transfer-encoding": "chunked"}}),
                "set by the broker",
            ),
            (
                json!({"url": "https://h.test/", "headers": {"Content-Length": "5"}}),
                "set by the broker",
            ),
            (
                json!({"url": "https://h.test/", "headers": {"X-A": "a\r\nHost: evil"}}),
                "CR, LF or NUL",
            ),
            (
                json!({"url": "https://h.test/", "headers": {"X A": "a"}}),
                "token",
            ),
        ] {
            let failure = refused(params.clone(), &s);
            assert_eq!(failure.code, code::INVALID_PARAMS, "{params}");
            assert!(
                failure.message.contains(why),
                "{params}: {}",
                failure.message
            );
        }
        let p = prepare(
            json!({"url": "http://h.test/", "method": "POST", "body_base64": "AP8=",
                   "timeout_ms": 5, "max_bytes": 0}),
            &s,
        )
        .unwrap();
        assert_eq!(p.request.body, vec![0, 255]);
        assert_eq!(p.request.timeout, Duration::from_millis(5));
        assert_eq!(p.request.max_bytes, 0);
    }

    #[test]
    fn a_handle_in_a_header_for_a_bound_host_is_replaced_by_the_value() {
        let s = secrets();
        let gh = handle(&s, "GH");
        let p = prepare(
            json!({"url": "https://api.github.com/user",
                   "headers": {"Authorization": format!("Bearer {gh}"), "X-Twice": format!("{gh}/{gh}")}}),
            &s,
        )
        .unwrap();
        assert_eq!(p.used_secrets, vec!["GH".to_owned()]);
        let headers: BTreeMap<_, _> = p.request.headers.iter().cloned().collect();
        assert_eq!(headers["Authorization"], format!("Bearer {VALUE}"));
        assert_eq!(headers["X-Twice"], format!("{VALUE}/{VALUE}"));
        // A port-bound wildcard binding: that port, names below the suffix.
        let p = prepare(
            json!({"url": "https://x.api.test:8443/", "headers": {"A": gh}}),
            &s,
        )
        .unwrap();
        assert_eq!(p.request.headers[0].1, VALUE);
    }

    #[test]
    fn a_handle_for_another_host_or_port_is_refused() {
        let s = secrets();
        let gh = handle(&s, "GH");
        for url in [
            "https://evil.test/",
            "https://api.github.com:8443/",
            "https://api.github.com.evil.test/",
            "https://x.api.test/",
            "https://api.test:8443/",
            "https://140.82.112.6/",
        ] {
            let failure = refused(
                json!({"url": url, "headers": {"Authorization": format!("Bearer {gh}")}}),
                &s,
            );
            assert_eq!(failure.code, code::PERMISSION_DENIED, "{url}");
            assert!(
                failure
                    .message
                    .contains("secret GH is bound to api.github.com"),
                "{}",
                failure.message
            );
            assert!(
                failure.message.contains("--secret GH=env:VAR@"),
                "{}",
                failure.message
            );
        }
    }

    #[test]
    fn a_binding_without_a_port_sends_the_value_over_https_only() {
        let mut s = Secrets::default();
        s.add(vec![SecretSpec {
            name: "GH".into(),
            value: VALUE.into(),
            hosts: vec![
                "api.github.com".into(),
                "plain.test:80".into(),
                "any.test:*".into(),
            ],
        }]);
        let gh = handle(&s, "GH");
        for url in [
            "https://api.github.com/",
            "https://api.github.com:80/",
            "http://plain.test/",
            "http://any.test:8080/",
        ] {
            let p = prepare(json!({"url": url, "headers": {"A": gh.clone()}}), &s).unwrap();
            assert_eq!(p.used_secrets, vec!["GH".to_owned()], "{url}");
        }
        let failure = refused(
            json!({"url": "http://api.github.com/", "headers": {"A": gh}}),
            &s,
        );
        assert_eq!(failure.code, code::PERMISSION_DENIED);
        assert!(
            failure.message.contains("https only")
                && failure
                    .message
                    .contains("--secret GH=env:VAR@api.github.com:80"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn an_unbound_secret_is_sent_nowhere() {
        let s = secrets();
        let loose = handle(&s, "LOOSE");
        let failure = refused(
            json!({"url": "https://api.github.com/", "headers": {"X-Key": loose}}),
            &s,
        );
        assert_eq!(failure.code, code::PERMISSION_DENIED);
        assert!(
            failure.message.contains("secret LOOSE is bound to no host")
                && failure
                    .message
                    .contains("--secret LOOSE=env:VAR@api.github.com"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn a_handle_in_the_url_or_body_is_refused_even_for_a_bound_host() {
        let s = secrets();
        let gh = handle(&s, "GH");
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("x{gh}"));
        for (params, place) in [
            (
                json!({"url": format!("https://api.github.com/?token={gh}")}),
                "the URL",
            ),
            (
                json!({"url": "https://api.github.com/", "method": "POST", "body": format!("t={gh}")}),
                "the body",
            ),
            (
                json!({"url": "https://api.github.com/", "method": "POST", "body_base64": encoded}),
                "the body",
            ),
        ] {
            let failure = refused(params, &s);
            assert_eq!(failure.code, code::PERMISSION_DENIED);
            assert!(
                failure
                    .message
                    .contains(&format!("secret GH is in {place}"))
                    && failure.message.contains("--secret GH=env:VAR@HOST"),
                "{}",
                failure.message
            );
        }
    }

    #[test]
    fn a_value_with_a_line_break_is_never_put_in_a_header() {
        let mut s = Secrets::default();
        s.add(vec![SecretSpec {
            name: "NL".into(),
            value: "abc\r\nX-Injected: 1".into(),
            hosts: vec!["api.test".into()],
        }]);
        let h = handle(&s, "NL");
        let failure =
            prepare(json!({"url": "https://api.test/", "headers": {"A": h}}), &s).unwrap_err();
        assert_eq!(failure.code, code::PERMISSION_DENIED);
        assert!(
            !failure.message.contains("X-Injected"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn the_answer_redacts_used_values_in_headers_and_body() {
        let s = secrets();
        let gh = handle(&s, "GH");
        let echoed = FetchResponse {
            status: 200,
            headers: vec![
                ("x-echo".into(), format!("Bearer {VALUE}")),
                ("content-type".into(), "application/json".into()),
            ],
            body: format!(r#"{{"headers": {{"Authorization": "Bearer {VALUE}"}}}}"#).into_bytes(),
            truncated: false,
        };
        let result = answer(echoed, &s, true);
        let text = result.to_string();
        assert!(!text.contains(VALUE), "{text}");
        assert_eq!(result["status"], 200);
        assert_eq!(
            result["headers"][0],
            json!(["x-echo", format!("Bearer {gh}")])
        );
        assert!(result["body"]
            .as_str()
            .unwrap()
            .contains(&format!("Bearer {gh}")));
        assert!(result.get("truncated").is_none());

        // Bytes that are not UTF-8 come back as base64, redacted before encoding.
        let mut body = vec![0xff, 0xfe];
        body.extend_from_slice(VALUE.as_bytes());
        let result = answer(
            FetchResponse {
                status: 201,
                headers: vec![],
                body,
                truncated: true,
            },
            &s,
            true,
        );
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(result["body_base64"].as_str().unwrap())
            .unwrap();
        let mut expected = vec![0xff, 0xfe];
        expected.extend_from_slice(gh.as_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(result["truncated"], true);
        assert!(result.get("body").is_none());
    }

    #[test]
    fn a_fetch_failure_is_redacted_and_a_timeout_keeps_its_code() {
        let s = secrets();
        let gh = handle(&s, "GH");
        let failure = fetch_failure(&format!("reading: bad header {VALUE}"), false, &s);
        assert_eq!(failure.code, code::INTERNAL_ERROR);
        assert_eq!(
            failure.message,
            format!("net.http: reading: bad header {gh}")
        );
        assert_eq!(fetch_failure("timed out", true, &s).code, code::TIMEOUT);
    }

    #[test]
    fn a_request_with_a_secret_asks_for_identity_and_an_encoded_answer_is_withheld() {
        let s = secrets();
        let gh = handle(&s, "GH");
        let p = prepare(
            json!({"url": "https://api.github.com/",
                   "headers": {"Authorization": gh.clone(), "accept-ENCODING": "gzip, br"}}),
            &s,
        )
        .unwrap();
        let codings: Vec<_> = p
            .request
            .headers
            .iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case("accept-encoding"))
            .collect();
        assert_eq!(
            codings,
            vec![&("Accept-Encoding".to_owned(), "identity".to_owned())]
        );
        let failure = refused(
            json!({"url": "https://api.github.com/",
                   "headers": {"Authorization": gh.clone(), "Range": "bytes=0-3"}}),
            &s,
        );
        assert!(failure.message.contains("Range"), "{}", failure.message);
        // A bound host may hold the value from an earlier request: a
        // request to it without a handle is guarded all the same.
        let p = prepare(
            json!({"url": "https://api.github.com/", "headers": {"Accept-Encoding": "gzip"}}),
            &s,
        )
        .unwrap();
        assert!(p.used_secrets.is_empty() && p.bound_host);
        assert_eq!(
            p.request.headers,
            vec![("Accept-Encoding".to_owned(), "identity".to_owned())]
        );
        // To a host no secret is bound to, the sandbox's own encoding and range stand.
        let p = prepare(
            json!({"url": "https://other.test/",
                   "headers": {"Accept-Encoding": "gzip", "Range": "bytes=0-3"}}),
            &s,
        )
        .unwrap();
        assert!(!p.bound_host);
        assert!(p
            .request
            .headers
            .contains(&("Accept-Encoding".into(), "gzip".into())));

        for (name, value) in [
            ("content-encoding", "gzip"),
            ("content-encoding", "identity, br"),
            ("transfer-encoding", "gzip, chunked"),
        ] {
            let result = answer(
                FetchResponse {
                    status: 200,
                    headers: vec![(name.into(), value.into())],
                    body: b"\x1f\x8b compressed".to_vec(),
                    truncated: false,
                },
                &s,
                true,
            );
            assert_eq!(result["body"], "", "{name}: {value}");
            assert!(result["body_withheld"].is_string(), "{name}: {value}");
        }
        for headers in [
            vec![],
            vec![("content-encoding".into(), "identity".into())],
            vec![("transfer-encoding".into(), "chunked".into())],
        ] {
            let result = answer(
                FetchResponse {
                    status: 200,
                    headers,
                    body: b"plain".to_vec(),
                    truncated: false,
                },
                &s,
                true,
            );
            assert_eq!(result["body"], "plain");
        }
    }

    #[test]
    fn a_body_cut_inside_a_value_does_not_leak_its_start() {
        let s = secrets();
        let result = answer(
            FetchResponse {
                status: 200,
                headers: vec![],
                body: format!("token={}", &VALUE[..6]).into_bytes(),
                truncated: true,
            },
            &s,
            true,
        );
        assert_eq!(result["body"], "token=");
    }
}
