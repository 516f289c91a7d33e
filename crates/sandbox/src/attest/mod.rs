//! Attestations: a signed statement of what a run enforced, in the in-toto
//! Statement v1 format a CI supply chain already reads, wrapped in a DSSE
//! envelope signed with Ed25519 ([`dsse`], [`key`]). The subject is the
//! project's state (a digest of its tree, [`tree`]) and, for a review
//! run, each changed file; the predicate says under what the run ran: the
//! profile and its digest, the layers the payload measured inside, the
//! command, the project's state before and after, the accepted changes
//! and the head of the run's audit chain (docs/src/audit.md).

pub mod dsse;
pub mod key;
pub mod tree;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The statement's `_type`.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// Our predicate's type: a run of `sandbox` and what it enforced, version 1.
///
/// in-toto asks only that a type URI be collision-resistant and stable
/// (RFC 3986); a reader finds what it means in docs/src/audit.md. An
/// `https` URL would tie every attestation ever signed to whoever hosts
/// the repository at the time (a fork, a move, a renamed owner changes
/// it), and an unregistered `urn:` namespace is not a valid URN. A UUID
/// URN (RFC 4122, a registered namespace) needs no authority, is unique
/// by construction and never changes; a new version of the predicate
/// gets a new UUID, and `verify` accepts only this one.
pub const PREDICATE_TYPE: &str = "urn:uuid:df38b087-616b-451b-9d66-31d908f714ae";

/// The project's state around the run.
#[derive(Debug, Clone, Default)]
pub struct ProjectState {
    /// The project root.
    pub path: String,
    /// Its tree's digest before the run (None: not taken, as for a run
    /// attested after the fact).
    pub before: Option<String>,
    /// Its tree's digest after the run (for a review run: the project as
    /// the changes would be applied to, when attested).
    pub after: Option<String>,
}

/// What a statement is made of.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    /// The run's report, as `Report::to_json` wrote it.
    pub report: &'a Value,
    /// SHA-256 of the profile as loaded (its canonical JSON), when the
    /// attester had it; otherwise the report's `enforced` is digested.
    pub policy: Option<&'a crate::profile::policy::Policy>,
    /// The project's state.
    pub project: ProjectState,
    /// A review run: its id and its changes (`changes.json`).
    pub review: Option<(&'a str, &'a crate::review::Captured)>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    crate::audit::chain::hex(&Sha256::digest(bytes).into())
}

/// The statement (its JSON value) for `inputs`.
pub fn statement(inputs: &Inputs<'_>) -> Value {
    let report = inputs.report;
    let (profile_digest, digest_of) = match inputs.policy {
        Some(policy) => (
            sha256_hex(&serde_json::to_vec(policy).unwrap_or_default()),
            "policy",
        ),
        None => (
            sha256_hex(&serde_json::to_vec(&report["enforced"]).unwrap_or_default()),
            "report.enforced",
        ),
    };
    let mut subject = Vec::new();
    let project = &inputs.project;
    if let Some(digest) = project.after.as_ref().or(project.before.as_ref()) {
        subject.push(json!({ "name": project.path, "digest": { "sha256": digest } }));
    }
    let review = inputs.review.map(|(id, captured)| {
        let changes: Vec<Value> = captured
            .changes
            .iter()
            .map(|change| {
                let mut value = serde_json::to_value(change).unwrap_or(Value::Null);
                if let Some(crate::review::Entry::File { sha256, .. }) = &change.after {
                    subject.push(json!({
                        "name": format!("{}/{}", project.path.trim_end_matches('/'), change.path),
                        "digest": { "sha256": sha256 },
                    }));
                    value["sha256"] = json!(sha256);
                }
                value
            })
            .collect();
        json!({ "id": id, "limit_reached": captured.limit_reached, "changes": changes })
    });
    if subject.is_empty() {
        // Nothing of the project was hashed: the statement is about the
        // report itself.
        let bytes = serde_json::to_vec(report).unwrap_or_default();
        subject.push(json!({ "name": "report.json", "digest": { "sha256": sha256_hex(&bytes) } }));
    }
    let broker = &report["broker"];
    let audit = match (
        broker["audit_chain"].as_str(),
        broker["audit_head"].as_str(),
    ) {
        (Some(chain), Some(head)) => json!({ "chain": chain, "head": head }),
        _ => Value::Null,
    };
    json!({
        "_type": STATEMENT_TYPE,
        "subject": subject,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "profile": {
                "name": report["profile"],
                "digest": { "sha256": profile_digest },
                "digest_of": digest_of,
            },
            "command": report["command"],
            "exit": report["exit"],
            "error": report["error"],
            "enforced": report["enforced"],
            "measured": report["measured"],
            "warnings": report["warnings"],
            "project": {
                "path": project.path,
                "before": project.before.as_ref().map(|d| json!({ "sha256": d })),
                "after": project.after.as_ref().map(|d| json!({ "sha256": d })),
            },
            "review": review,
            "audit": audit,
            "report": { "sha256": sha256_hex(&serde_json::to_vec(report).unwrap_or_default()) },
        },
    })
}

/// Sign `statement` with `key`.
pub fn sign(key: &key::SigningKey, statement: &Value) -> dsse::Envelope {
    dsse::sign(key, &serde_json::to_vec(statement).unwrap_or_default())
}

/// The longest envelope read.
pub const ENVELOPE_MAX: u64 = 64 << 20;

/// Why an attestation is refused.
#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    /// Not a DSSE envelope.
    #[error("not a DSSE envelope: {0}")]
    NotEnvelope(String),
    /// The envelope's check failed.
    #[error(transparent)]
    Envelope(#[from] dsse::EnvelopeError),
    /// The signed payload is not our statement.
    #[error("the signed statement is not one of ours: {0}")]
    Shape(String),
}

/// What a verified attestation says, in brief.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verified {
    /// The key that signed it.
    pub keyid: String,
    /// The profile's name.
    pub profile: String,
    /// The command.
    pub command: Vec<String>,
    /// The subjects' names.
    pub subjects: Vec<String>,
    /// The audit chain's head it anchors, if any.
    pub audit_head: Option<String>,
    /// The whole statement.
    pub statement: Value,
}

/// Check `bytes` (an envelope's JSON) against `public`: the signature,
/// then the statement's shape.
pub fn verify(bytes: &[u8], public: &[u8; 32]) -> Result<Verified, AttestError> {
    let envelope: dsse::Envelope =
        serde_json::from_slice(bytes).map_err(|err| AttestError::NotEnvelope(err.to_string()))?;
    let payload = dsse::open(&envelope, public)?;
    let statement: Value = serde_json::from_slice(&payload)
        .map_err(|err| AttestError::Shape(format!("the payload is not JSON: {err}")))?;
    let shape = |what: String| AttestError::Shape(what);
    if statement["_type"] != STATEMENT_TYPE {
        return Err(shape(format!(
            "_type is {}, not {STATEMENT_TYPE}",
            statement["_type"]
        )));
    }
    if statement["predicateType"] != PREDICATE_TYPE {
        return Err(shape(format!(
            "predicateType is {}, not {PREDICATE_TYPE}",
            statement["predicateType"]
        )));
    }
    let subjects = statement["subject"]
        .as_array()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| shape("subject is not a non-empty list".into()))?;
    let mut names = Vec::new();
    for subject in subjects {
        let name = subject["name"]
            .as_str()
            .ok_or_else(|| shape("a subject has no name".into()))?;
        if !is_sha256(&subject["digest"]["sha256"]) {
            return Err(shape(format!("subject {name:?} has no sha256 digest")));
        }
        names.push(name.to_owned());
    }
    let predicate = &statement["predicate"];
    let profile = predicate["profile"]["name"]
        .as_str()
        .ok_or_else(|| shape("predicate.profile.name is missing".into()))?
        .to_owned();
    if !is_sha256(&predicate["profile"]["digest"]["sha256"]) {
        return Err(shape("predicate.profile.digest.sha256 is missing".into()));
    }
    let command = match &predicate["command"] {
        Value::Array(words) => words
            .iter()
            .map(|w| w.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| shape("predicate.command is not a list of strings".into()))?,
        Value::Null => Vec::new(),
        _ => return Err(shape("predicate.command is not a list".into())),
    };
    if predicate.get("measured").is_none() || predicate.get("project").is_none() {
        return Err(shape(
            "predicate.measured or predicate.project is missing".into(),
        ));
    }
    let audit_head = match &predicate["audit"] {
        Value::Null => None,
        audit if is_sha256(&audit["head"]) => audit["head"].as_str().map(str::to_owned),
        _ => return Err(shape("predicate.audit.head is not a SHA-256".into())),
    };
    Ok(Verified {
        keyid: key::key_id(public),
        profile,
        command,
        subjects: names,
        audit_head,
        statement,
    })
}

fn is_sha256(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(key: &key::SigningKey) -> (Value, Vec<u8>) {
        let report = json!({
            "version": 1,
            "profile": "strict",
            "command": ["/bin/true"],
            "exit": { "code": 0 },
            "enforced": { "landlock": true },
            "measured": { "no_new_privs": true },
            "broker": { "audit_chain": "run:1:ab", "audit_head": "a".repeat(64) },
        });
        let statement = statement(&Inputs {
            report: &report,
            policy: None,
            project: ProjectState {
                path: "/p".into(),
                before: Some("b".repeat(64)),
                after: Some("c".repeat(64)),
            },
            review: None,
        });
        let bytes = serde_json::to_vec(&sign(key, &statement)).unwrap();
        (statement, bytes)
    }

    #[test]
    fn a_signed_statement_verifies() {
        let key = key::SigningKey::from_seed(&[7; 32]).unwrap();
        let (statement, bytes) = signed(&key);
        let verified = verify(&bytes, key.public()).unwrap();
        assert_eq!(verified.statement, statement);
        assert_eq!(verified.profile, "strict");
        assert_eq!(verified.subjects, ["/p"]);
        assert_eq!(verified.audit_head, Some("a".repeat(64)));
    }

    #[test]
    fn tampering_and_another_key_are_refused() {
        let key = key::SigningKey::from_seed(&[7; 32]).unwrap();
        let (_, bytes) = signed(&key);
        let envelope: dsse::Envelope = serde_json::from_slice(&bytes).unwrap();
        let engine = base64::engine::general_purpose::STANDARD;
        use base64::Engine;

        // A flipped byte of the payload.
        let mut payload = engine.decode(&envelope.payload).unwrap();
        payload[10] ^= 1;
        let mut changed = envelope.clone();
        changed.payload = engine.encode(&payload);
        let err = verify(&serde_json::to_vec(&changed).unwrap(), key.public()).unwrap_err();
        assert!(
            err.to_string().contains("does not match the payload"),
            "{err}"
        );

        // A flipped byte of the signature.
        let mut sig = engine.decode(&envelope.signatures[0].sig).unwrap();
        sig[5] ^= 0x80;
        let mut changed = envelope.clone();
        changed.signatures[0].sig = engine.encode(&sig);
        assert!(verify(&serde_json::to_vec(&changed).unwrap(), key.public()).is_err());

        // An edited predicate, the payload re-encoded.
        let mut statement: Value =
            serde_json::from_slice(&engine.decode(&envelope.payload).unwrap()).unwrap();
        statement["predicate"]["profile"]["name"] = json!("permissive-was-strict");
        let mut changed = envelope.clone();
        changed.payload = engine.encode(serde_json::to_vec(&statement).unwrap());
        assert!(verify(&serde_json::to_vec(&changed).unwrap(), key.public()).is_err());

        // Another key.
        let other = key::SigningKey::from_seed(&[8; 32]).unwrap();
        let err = verify(&bytes, other.public()).unwrap_err();
        assert!(err.to_string().contains("another key"), "{err}");

        // A signature over another payload type.
        let mut changed = envelope.clone();
        changed.payload_type = "application/json".into();
        assert!(verify(&serde_json::to_vec(&changed).unwrap(), key.public()).is_err());

        // Garbage.
        for junk in [&b""[..], b"{}", b"[1]", b"{\"payload\":\"!!\",\"payloadType\":\"application/vnd.in-toto+json\",\"signatures\":[]}"] {
            assert!(verify(junk, key.public()).is_err());
        }
    }

    #[test]
    fn a_well_signed_statement_of_another_shape_is_refused() {
        let key = key::SigningKey::from_seed(&[7; 32]).unwrap();
        let other = json!({ "_type": STATEMENT_TYPE, "subject": [], "predicateType": PREDICATE_TYPE, "predicate": {} });
        let bytes = serde_json::to_vec(&sign(&key, &other)).unwrap();
        let err = verify(&bytes, key.public()).unwrap_err();
        assert!(matches!(err, AttestError::Shape(_)), "{err}");
    }

    #[test]
    fn only_our_predicate_type_is_accepted() {
        let key = key::SigningKey::from_seed(&[7; 32]).unwrap();
        let (mut statement, _) = signed(&key);
        assert!(PREDICATE_TYPE.starts_with("urn:uuid:") && PREDICATE_TYPE.len() == 45);
        for other in [
            "https://github.com/OWNER/sandbox/blob/main/docs/src/audit.md#run-predicate-v1",
            "https://slsa.dev/provenance/v1",
        ] {
            statement["predicateType"] = json!(other);
            let bytes = serde_json::to_vec(&sign(&key, &statement)).unwrap();
            let err = verify(&bytes, key.public()).unwrap_err();
            assert!(err.to_string().contains("predicateType"), "{err}");
        }
    }
}
