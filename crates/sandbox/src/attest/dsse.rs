//! The DSSE envelope (the in-toto attestation framework's signature
//! wrapper): the payload is signed through its pre-authentication
//! encoding (PAE), which binds the payload's type to its bytes so that a
//! signature over one kind of document never verifies as another.

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::key::{key_id, SigningKey};

/// The payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A signed envelope, as written to the file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// The statement's bytes, base64 (standard, padded).
    pub payload: String,
    /// What the payload is.
    pub payload_type: String,
    /// Its signatures (one: the user's or the daemon's key).
    pub signatures: Vec<Signature>,
}

/// One signature of an envelope.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Signature {
    /// SHA-256 (hex) of the raw public key that made it.
    #[serde(default)]
    pub keyid: String,
    /// The Ed25519 signature over the PAE, base64.
    pub sig: String,
}

/// `DSSEv1 LEN(type) type LEN(body) body`, lengths in ASCII decimal,
/// fields separated by one space.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// Sign `body` (an in-toto statement's JSON) with `key`.
pub fn sign(key: &SigningKey, body: &[u8]) -> Envelope {
    let signature = key.sign(&pae(PAYLOAD_TYPE, body));
    let engine = base64::engine::general_purpose::STANDARD;
    Envelope {
        payload: engine.encode(body),
        payload_type: PAYLOAD_TYPE.to_owned(),
        signatures: vec![Signature {
            keyid: key_id(key.public()),
            sig: engine.encode(signature),
        }],
    }
}

/// Why an envelope does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not an in-toto payload.
    #[error("payloadType is {0:?}, not {PAYLOAD_TYPE:?}")]
    PayloadType(String),
    /// The payload is not base64.
    #[error("the payload is not base64: {0}")]
    Payload(String),
    /// No signature made by the key.
    #[error(
        "no signature of the envelope verifies with key {keyid} ({signatures} signature(s): {why})"
    )]
    Signature {
        /// The key tried.
        keyid: String,
        /// Signatures in the envelope.
        signatures: usize,
        /// What was wrong with the closest one.
        why: &'static str,
    },
}

/// The payload's bytes, when one signature verifies with `public`.
pub fn open(envelope: &Envelope, public: &[u8; 32]) -> Result<Vec<u8>, EnvelopeError> {
    if envelope.payload_type != PAYLOAD_TYPE {
        return Err(EnvelopeError::PayloadType(envelope.payload_type.clone()));
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let body = engine
        .decode(&envelope.payload)
        .map_err(|err| EnvelopeError::Payload(err.to_string()))?;
    let message = pae(&envelope.payload_type, &body);
    let keyid = key_id(public);
    let mut why = "there is none";
    for signature in &envelope.signatures {
        let Ok(sig) = engine.decode(&signature.sig) else {
            why = "the signature is not base64";
            continue;
        };
        if super::key::verify(public, &message, &sig) {
            return Ok(body);
        }
        why = if signature.keyid.is_empty() || signature.keyid == keyid {
            "the signature does not match the payload: the payload or the signature was changed"
        } else {
            "it was made by another key"
        };
    }
    Err(EnvelopeError::Signature {
        keyid,
        signatures: envelope.signatures.len(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_is_the_specifications_encoding() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }
}
