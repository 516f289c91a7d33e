//! The one writer's half of the hash chain: it seals each audit line
//! with the chain's name, the line's number in the chain and the SHA-256
//! of the chain's previous line, exactly as that line was written
//! (without its newline). Every audit file of the code base (a run's
//! broker, an OCI container's supervisor, the daemon's spool) goes
//! through [`Chain::seal`], so one verifier ([`super::verify`]) checks
//! them all.
//!
//! The fields are added at the end of the object the line already was,
//! so every reader that parsed the line before still finds what it read.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// The field naming the chain a line belongs to.
pub const CHAIN_FIELD: &str = "chain";
/// The field holding the line's number in its chain, from 1.
pub const SEQ_FIELD: &str = "seq";
/// The field holding the SHA-256 (hex) of the chain's previous line.
pub const PREV_FIELD: &str = "prev";

/// What the first line of a chain carries as `prev`: a hash of the
/// chain's name, so a chain's first line names its chain twice and a line
/// from another chain cannot pose as this one's start.
pub fn genesis(name: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"sandbox audit chain v1\n");
    hasher.update(name.as_bytes());
    hasher.finalize().into()
}

/// SHA-256 of one line's bytes (without its newline).
pub fn line_hash(line: &[u8]) -> [u8; 32] {
    Sha256::digest(line).into()
}

/// Lower-case hex of a digest.
pub fn hex(digest: &[u8; 32]) -> String {
    use std::fmt::Write;
    digest.iter().fold(String::with_capacity(64), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// One chain being written: its name, the last line's number and hash.
#[derive(Debug, Clone)]
pub struct Chain {
    name: String,
    /// The name as a JSON string, escaped once.
    name_json: Vec<u8>,
    seq: u64,
    prev: [u8; 32],
}

impl Chain {
    /// A chain named `name` (for instance `run:1234-0`), before its first
    /// line.
    pub fn new(name: impl Into<String>) -> Chain {
        let name = name.into();
        let name_json = crate::broker::audit::to_line(&name);
        let prev = genesis(&name);
        Chain {
            name,
            name_json,
            seq: 0,
            prev,
        }
    }

    /// A chain for `kind` (`run`, `container`, `daemon`) and `id`, with 64
    /// random bits after the id: two runs of one id (a process id reused,
    /// two daemons' run 1) appending to one file still make two chains,
    /// and neither can be passed off as the other's.
    pub fn unique(kind: &str, id: &str) -> Chain {
        Chain::new(format!("{kind}:{id}:{}", random_hex()))
    }

    /// The chain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lines sealed so far.
    pub fn len(&self) -> u64 {
        self.seq
    }

    /// Whether no line was sealed yet.
    pub fn is_empty(&self) -> bool {
        self.seq == 0
    }

    /// The hash of the last line sealed (hex), the value to keep as an
    /// anchor; None before the first line.
    pub fn head(&self) -> Option<String> {
        (self.seq > 0).then(|| hex(&self.prev))
    }

    /// `value` (an object; anything else is kept under `value`) as the
    /// chain's next line, without a newline: the line must be written
    /// exactly as returned, or the next line's `prev` will not match.
    pub fn seal<T: Serialize>(&mut self, value: &T) -> Vec<u8> {
        let object = crate::broker::audit::to_line(value);
        self.seal_object(object)
    }

    /// Seal a line already written as one JSON object by
    /// [`crate::broker::audit::to_line`].
    pub fn seal_object(&mut self, object: Vec<u8>) -> Vec<u8> {
        let mut line = if object.first() == Some(&b'{') && object.last() == Some(&b'}') {
            object
        } else {
            let mut wrapped = b"{\"value\":".to_vec();
            wrapped.extend_from_slice(&object);
            wrapped.push(b'}');
            wrapped
        };
        line.pop();
        if line.len() > 1 {
            line.push(b',');
        }
        self.seq += 1;
        line.extend_from_slice(b"\"chain\":");
        line.extend_from_slice(&self.name_json);
        line.extend_from_slice(format!(",\"seq\":{},\"prev\":\"", self.seq).as_bytes());
        line.extend_from_slice(hex(&self.prev).as_bytes());
        line.extend_from_slice(b"\"}");
        self.prev = line_hash(&line);
        line
    }
}

/// 64 random bits in hex, from the kernel's generator (std's hash keys,
/// which std takes from getrandom(2), when /dev/urandom cannot be read).
fn random_hex() -> String {
    let mut random = [0u8; 8];
    let filled = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .is_ok();
    if !filled {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(0);
        random = hasher.finish().to_le_bytes();
    }
    random.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_line_is_the_object_with_three_fields_more() {
        let mut chain = Chain::new("run:7");
        let first = chain.seal(&serde_json::json!({ "method": "fs.read" }));
        let value: serde_json::Value = serde_json::from_slice(&first).unwrap();
        assert_eq!(value["method"], "fs.read");
        assert_eq!(value["chain"], "run:7");
        assert_eq!(value["seq"], 1);
        assert_eq!(value["prev"], hex(&genesis("run:7")));
        assert_eq!(chain.head(), Some(hex(&line_hash(&first))));
        let second = chain.seal(&serde_json::json!({}));
        let value: serde_json::Value = serde_json::from_slice(&second).unwrap();
        assert_eq!(value["seq"], 2);
        assert_eq!(value["prev"], hex(&line_hash(&first)));
        let third = chain.seal(&"not an object");
        let value: serde_json::Value = serde_json::from_slice(&third).unwrap();
        assert_eq!(value["value"], "not an object");
    }

    #[test]
    fn a_hostile_chain_name_stays_on_one_line() {
        let mut chain = Chain::new("container:a\nb\u{1b}[2J");
        let line = chain.seal(&serde_json::json!({ "a": 1 }));
        assert!(!line.contains(&b'\n') && !line.contains(&0x1b));
        let value: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(value["chain"], "container:a\nb\u{1b}[2J");
    }

    #[test]
    fn unique_chains_differ() {
        assert_ne!(
            Chain::unique("run", "1").name(),
            Chain::unique("run", "1").name()
        );
    }
}
