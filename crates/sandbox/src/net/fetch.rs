//! The broker's `net.http` request and its response, as they cross the
//! link between the run's broker (which checks and decides the request,
//! [`crate::broker::http`]) and its net process (the `sandbox-net`
//! executable, which performs it): the types alone, so that the core
//! links no HTTP client or TLS.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

impl Scheme {
    /// The port a URL of this scheme means when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// One request, checked by the broker.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchRequest {
    /// Method token.
    pub method: String,
    /// `http` or `https`.
    pub scheme: Scheme,
    /// A normalized name or an IP address's text (IPv6 without brackets):
    /// the TLS server name and the Host header.
    pub host: String,
    /// The port.
    pub port: u16,
    /// Origin form: `/path?query`.
    pub path_and_query: String,
    /// Headers, secret values already in place.
    pub headers: Vec<(String, String)>,
    /// The body.
    #[serde(with = "base64_bytes")]
    pub body: Vec<u8>,
    /// Time for the whole exchange, from the first connect to the last byte.
    #[serde(with = "millis")]
    pub timeout: Duration,
    /// Most bytes of the response body kept.
    pub max_bytes: u64,
}

// Headers hold secret values once the broker has put them in: they stay
// out of every Debug output.
impl std::fmt::Debug for FetchRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("FetchRequest")
            .field("method", &self.method)
            .field("scheme", &self.scheme)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path_and_query", &self.path_and_query)
            .field("header_names", &header_names)
            .field("body_bytes", &self.body.len())
            .field("timeout", &self.timeout)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

/// The response as read.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchResponse {
    /// Status code.
    pub status: u16,
    /// Headers in the order received; values as lossy UTF-8.
    pub headers: Vec<(String, String)>,
    /// The body, at most `max_bytes`.
    #[serde(with = "base64_bytes")]
    pub body: Vec<u8>,
    /// The body was longer than `max_bytes` and was cut there.
    pub truncated: bool,
}

// Before the broker redacts it, a response may echo a secret's value.
impl std::fmt::Debug for FetchResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("FetchResponse")
            .field("status", &self.status)
            .field("header_names", &header_names)
            .field("body_bytes", &self.body.len())
            .field("truncated", &self.truncated)
            .finish()
    }
}

mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(deserializer)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn requests_and_responses_cross_a_socket_as_json() {
        let mut req = request(Scheme::Https, "api.test", 443);
        req.body = vec![0, 159, 146, 150];
        req.timeout = Duration::from_millis(1500);
        let line = serde_json::to_value(&req).unwrap();
        assert_eq!(line["scheme"], "https");
        assert_eq!(line["timeout"], 1500);
        assert_eq!(line["body"], "AJ+Slg==");
        let back: FetchRequest = serde_json::from_value(line).unwrap();
        assert_eq!(back, req);
        let response = FetchResponse {
            status: 200,
            headers: vec![("a".into(), "b".into())],
            body: vec![255],
            truncated: true,
        };
        let back: FetchResponse =
            serde_json::from_str(&serde_json::to_string(&response).unwrap()).unwrap();
        assert_eq!(back, response);
    }

    #[test]
    fn debug_output_holds_no_header_value() {
        let mut req = request(Scheme::Https, "api.test", 443);
        req.headers
            .push(("Authorization".into(), "Bearer hunter2".into()));
        let shown = format!("{req:?}");
        assert!(
            shown.contains("Authorization") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
