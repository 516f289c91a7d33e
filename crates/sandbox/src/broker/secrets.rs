//! `secrets.get`: secrets come only from the person running the sandbox
//! (`--secret NAME=env:VAR` or `NAME=file:PATH`); the sandbox gets an
//! opaque handle, and the value only where the profile allows `secrets.read`.
//!
//! A secret may be bound to hosts (`--secret NAME=env:VAR@api.github.com`):
//! the broker's `net.http` then puts the value in place of the handle in a
//! request header, for those hosts only ([`super::http`]), so the sandbox can
//! use a token it never sees. Everything the broker sends back is redacted:
//! each occurrence of the value of any secret bound to a host, in any of
//! the forms [`super::redact`] knows, becomes its handle again, in the
//! answer to whichever request it comes back in (a host may store the
//! value and hand it out later, to a request that carries no handle).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::protocol::code;
use super::protocol::{fail, Failure};

/// `secrets.get` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretParams {
    /// The secret's name.
    pub name: String,
}

/// A secret as the person gave it: its name, its value and the hosts a
/// `net.http` request may carry it to (allowlist entries such as
/// `api.github.com`, `*.example.com:8443`; empty: none).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretSpec {
    /// The name `secrets.get` asks for.
    pub name: String,
    /// The value, read on the person's side.
    pub value: String,
    /// Allowlist entries the value may be sent to.
    #[serde(default)]
    pub hosts: Vec<String>,
}

impl SecretSpec {
    /// A secret bound to no host: `secrets.get` hands out its handle, and
    /// `net.http` refuses to send it anywhere.
    pub fn unbound(name: impl Into<String>, value: impl Into<String>) -> SecretSpec {
        SecretSpec {
            name: name.into(),
            value: value.into(),
            hosts: Vec::new(),
        }
    }
}

// The value stays out of every Debug output: runs and configurations are
// printed with `{:?}` in errors and `-v` output.
impl std::fmt::Debug for SecretSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSpec")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// One secret of a run.
pub struct Secret {
    name: String,
    handle: String,
    value: String,
    hosts: Vec<String>,
}

impl Secret {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The handle the sandbox holds in its place.
    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// The hosts it is bound to.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The value: only for putting it in the request the supervisor sends.
    pub(crate) fn value(&self) -> &str {
        &self.value
    }

    /// Whether its bindings cover `target` (`host:port`, `[v6]:port`).
    pub fn bound_to(&self, target: &str) -> bool {
        self.hosts.iter().any(|entry| binding_covers(entry, target))
    }

    /// Whether its bindings let the value go to `target` over plain http:
    /// only a binding with its port written (`api.test:80`, `api.test:*`)
    /// does. Over https the server's certificate proves the name the
    /// person bound; over http whoever answers for the name (a spoofed DNS
    /// answer) or sits on the path reads the value, so a binding without a
    /// port means https only.
    pub fn bound_to_in_clear(&self, target: &str) -> bool {
        self.hosts.iter().any(|entry| {
            entry
                .parse::<crate::net::allow::AllowEntry>()
                .is_ok_and(|parsed| parsed.port != crate::net::allow::PortPattern::Default)
                && binding_covers(entry, target)
        })
    }
}

/// The secrets of one run, by name.
#[derive(Default)]
pub struct Secrets {
    by_name: BTreeMap<String, Secret>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}

impl Secrets {
    /// Add secrets; each gets an opaque handle that identifies it without
    /// revealing it.
    pub fn add(&mut self, secrets: Vec<SecretSpec>) {
        for spec in secrets {
            let handle = format!("secret:{}:{}", spec.name, random_tag());
            self.by_name.insert(
                spec.name.clone(),
                Secret {
                    name: spec.name,
                    handle,
                    value: spec.value,
                    hosts: spec.hosts,
                },
            );
        }
    }

    /// The secret called `name`.
    pub fn named(&self, name: &str) -> Option<&Secret> {
        self.by_name.get(name)
    }

    /// `secrets.get`; the value only when `reveal`.
    pub fn get(&self, params: &SecretParams, reveal: bool) -> Result<Value, Failure> {
        let name = &params.name;
        let secret = self.by_name.get(name).ok_or_else(|| {
            fail(
                code::NOT_FOUND,
                format!("no secret {name:?} in this run (pass it with --secret {name}=env:VAR)"),
            )
        })?;
        if reveal {
            Ok(json!({ "name": name, "handle": secret.handle, "value": secret.value }))
        } else {
            Ok(json!({ "name": name, "handle": secret.handle }))
        }
    }

    /// The secrets whose handle occurs in `text`, each once, by name.
    pub fn find_handles_in(&self, text: &str) -> Vec<&Secret> {
        self.by_name
            .values()
            .filter(|secret| text.contains(&secret.handle))
            .collect()
    }

    /// The secrets whose handle occurs in `bytes` (a body that need not be
    /// text).
    pub fn find_handles_in_bytes(&self, bytes: &[u8]) -> Vec<&Secret> {
        self.by_name
            .values()
            .filter(|secret| contains(bytes, secret.handle.as_bytes()))
            .collect()
    }

    /// Whether the value of some secret may be sent to `target`: its host
    /// then holds the value and may give it back in any answer.
    pub fn any_bound_to(&self, target: &str) -> bool {
        self.by_name.values().any(|secret| secret.bound_to(target))
    }

    /// `bytes` with every occurrence of the value of every secret bound to
    /// a host replaced by its handle. A body cut at a size cap may end in
    /// the first bytes of a value: `cut` drops such a tail too, so not
    /// even a prefix of the value leaves.
    pub fn redact_bytes(&self, bytes: &[u8], cut: bool) -> Vec<u8> {
        super::redact::redact(bytes, &self.needles(), cut)
    }

    /// `text` with every occurrence of the value of every secret bound to
    /// a host replaced by its handle.
    pub fn redact_text(&self, text: &str) -> String {
        let redacted = self.redact_bytes(text.as_bytes(), false);
        String::from_utf8(redacted)
            .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned())
    }

    /// The values that can come back, with their handles. Only bound
    /// secrets: an unbound value never leaves the supervisor.
    fn needles(&self) -> Vec<super::redact::Needle<'_>> {
        self.by_name
            .values()
            .filter(|secret| !secret.hosts.is_empty())
            .map(|secret| super::redact::Needle {
                value: secret.value.as_bytes(),
                handle: &secret.handle,
            })
            .collect()
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// 128 random bits in hex. The handle is what lets a request use the
/// secret at its bound hosts, so it must not be guessable: when
/// /dev/urandom cannot be read, the fallback is std's hash keys, which the
/// standard library takes from getrandom(2), never the clock.
fn random_tag() -> String {
    let mut random = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .is_ok();
    if !filled {
        use std::hash::{BuildHasher, Hasher};
        for half in random.chunks_mut(8) {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u8(0);
            half.copy_from_slice(&hasher.finish().to_le_bytes());
        }
    }
    random.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a host binding was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not a host entry: {reason}")]
pub struct BindingError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Check a host binding written in allowlist-entry syntax (`host`,
/// `*.suffix`, `*`, an IP literal or CIDR, each with an optional `:PORT`
/// or `:*`) and give it back normalized (lower case, no trailing dot).
pub fn parse_binding(entry: &str) -> Result<String, BindingError> {
    entry
        .parse::<crate::net::allow::AllowEntry>()
        .map(|parsed| parsed.to_string())
        .map_err(|err| BindingError {
            entry: entry.to_owned(),
            reason: err.problem.to_string(),
        })
}

/// Whether the binding `entry` covers `target` (`host:port`): the
/// allowlist's own matching, so an entry without a port covers 443 and 80.
pub fn binding_covers(entry: &str, target: &str) -> bool {
    crate::net::allow::target_matches(entry, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(specs: &[(&str, &str, &[&str])]) -> Secrets {
        let mut secrets = Secrets::default();
        secrets.add(
            specs
                .iter()
                .map(|(name, value, hosts)| SecretSpec {
                    name: (*name).into(),
                    value: (*value).into(),
                    hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
                })
                .collect(),
        );
        secrets
    }

    #[test]
    fn get_gives_the_handle_and_the_value_only_when_revealed() {
        let s = secrets(&[("TOKEN", "hunter2", &[])]);
        let params = SecretParams {
            name: "TOKEN".into(),
        };
        let hidden = s.get(&params, false).unwrap();
        let handle = hidden["handle"].as_str().unwrap();
        assert!(handle.starts_with("secret:TOKEN:"));
        assert_eq!(handle.len(), "secret:TOKEN:".len() + 32);
        assert!(!hidden.to_string().contains("hunter2"));
        assert_eq!(s.get(&params, true).unwrap()["value"], "hunter2");
        let missing = s
            .get(
                &SecretParams {
                    name: "NOPE".into(),
                },
                false,
            )
            .unwrap_err();
        assert_eq!(missing.code, code::NOT_FOUND);
    }

    #[test]
    fn handles_are_found_in_text_and_bytes() {
        let s = secrets(&[("A", "va", &[]), ("B", "vb", &[])]);
        let a = s.named("A").unwrap().handle().to_owned();
        let found = s.find_handles_in(&format!("Bearer {a}"));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name(), "A");
        assert!(s.find_handles_in("secret:A:0000").is_empty());
        assert_eq!(
            s.find_handles_in_bytes(format!("\u{0}{a}\u{ff}").as_bytes())
                .len(),
            1
        );
    }

    #[test]
    fn redaction_replaces_bound_values_and_their_json_form_and_a_cut_tail() {
        let s = secrets(&[("Q", "to\"ken", &["api.test"]), ("OTHER", "keep", &[])]);
        let handle = s.named("Q").unwrap().handle().to_owned();
        let body = br#"{"auth": "to\"ken", "raw": to"ken, "other": "keep"}"#;
        let redacted = String::from_utf8(s.redact_bytes(body, false)).unwrap();
        assert!(!redacted.contains("to\"ken") && !redacted.contains("to\\\"ken"));
        assert_eq!(redacted.matches(&handle).count(), 2);
        assert!(
            redacted.contains("keep"),
            "an unbound value never leaves, so it is never looked for"
        );
        assert_eq!(s.redact_bytes(b"abc to\"k", true), b"abc ");
        assert_eq!(s.redact_bytes(b"abc to\"k", false), b"abc to\"k");
        assert_eq!(s.redact_text("x to\"ken"), format!("x {handle}"));
        assert!(s.any_bound_to("api.test:443"));
        assert!(!s.any_bound_to("other.test:443"));
    }

    #[test]
    fn bindings_are_parsed_and_normalized() {
        for (entry, normalized) in [
            ("API.GitHub.com.", "api.github.com"),
            ("*.Example.com:8443", "*.example.com:8443"),
            ("*", "*"),
            ("api.test:*", "api.test:*"),
            ("10.0.0.1:5432", "10.0.0.1:5432"),
            ("10.0.0.0/8", "10.0.0.0/8"),
            ("[::1]:8080", "[::1]:8080"),
            ("[fd00::/8]:443", "[fd00::/8]:443"),
        ] {
            assert_eq!(parse_binding(entry).as_deref(), Ok(normalized), "{entry}");
        }
        for (entry, reason) in [
            ("", "empty"),
            ("a..b", "empty label"),
            ("bad host", "whitespace"),
            ("bad!host", "letters, digits"),
            ("host:0", "port"),
            ("host:99999", "port"),
            ("host:http", "port"),
            ("ünïcode.de", "xn--"),
            ("0x7f.1", "address"),
            ("127.1", "address"),
            ("10.0.0.0/33", "range"),
            ("[::1", "brackets"),
        ] {
            let err = parse_binding(entry).unwrap_err();
            assert!(err.to_string().contains(reason), "{entry}: {err}");
        }
    }

    #[test]
    fn bindings_cover_hosts_and_ports_as_the_allowlist_does() {
        for (entry, target, covered) in [
            ("api.github.com", "api.github.com:443", true),
            ("api.github.com", "api.github.com:80", true),
            ("api.github.com", "api.github.com:8443", false),
            ("api.github.com", "evil.api.github.com:443", false),
            ("api.github.com", "github.com:443", false),
            ("api.test:8080", "api.test:8080", true),
            ("api.test:*", "api.test:1", true),
            ("*.example.com", "a.b.example.com:443", true),
            ("*.example.com", "example.com:443", false),
            ("*.example.com", "badexample.com:443", false),
            ("*", "anything.test:443", true),
            ("*", "127.0.0.1:443", false),
            ("127.0.0.1:8080", "127.0.0.1:8080", true),
            ("127.0.0.1", "127.0.0.2:443", false),
            ("10.0.0.0/8:5432", "10.9.8.7:5432", true),
            ("10.0.0.0/8:5432", "11.0.0.1:5432", false),
            ("[::1]:8080", "[::1]:8080", true),
            ("[fd00::/8]:443", "[fd12::1]:443", true),
            ("api.test", "api.test", false),
        ] {
            assert_eq!(binding_covers(entry, target), covered, "{entry} / {target}");
        }
    }

    #[test]
    fn debug_output_never_holds_a_value() {
        let spec = SecretSpec {
            name: "T".into(),
            value: "hunter2".into(),
            hosts: vec!["api.test".into()],
        };
        assert!(!format!("{spec:?}").contains("hunter2"));
        let mut s = Secrets::default();
        s.add(vec![spec]);
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn a_value_inside_another_is_redacted_without_leaving_the_longer_ones_rest() {
        let secrets = secrets(&[("A", "abc", &["a.test"]), ("B", "abcXYZ", &["b.test"])]);
        for out in [
            String::from_utf8(secrets.redact_bytes(b"x abcXYZ y abc", false)).unwrap(),
            secrets.redact_text("x abcXYZ y abc"),
        ] {
            assert!(!out.contains("XYZ"), "{out}");
            assert!(out.contains(secrets.named("B").unwrap().handle()), "{out}");
            assert!(out.contains(secrets.named("A").unwrap().handle()), "{out}");
        }
    }
}
