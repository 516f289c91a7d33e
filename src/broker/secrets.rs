//! `secrets.get`: secrets come only from the person running the sandbox
//! (`--secret NAME=env:VAR` or `NAME=file:PATH`); the sandbox gets an
//! opaque handle, and the value only where the profile allows `secrets.read`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
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

/// The secrets of one run, by name: (handle, value).
#[derive(Default)]
pub struct Secrets {
    by_name: BTreeMap<String, (String, String)>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}

impl Secrets {
    /// Add secrets; each gets an opaque handle that identifies it without
    /// revealing it.
    pub fn add(&mut self, secrets: Vec<(String, String)>) {
        for (name, value) in secrets {
            let mut random = [0u8; 16];
            let filled = std::fs::File::open("/dev/urandom")
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
                .is_ok();
            let tag: String = if filled {
                random.iter().map(|b| format!("{b:02x}")).collect()
            } else {
                format!(
                    "{:x}",
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or(0)
                )
            };
            let handle = format!("secret:{name}:{tag}");
            self.by_name.insert(name, (handle, value));
        }
    }

    /// `secrets.get`; the value only when `reveal`.
    pub fn get(&self, params: &SecretParams, reveal: bool) -> Result<Value, Failure> {
        let name = &params.name;
        let (handle, value) = self.by_name.get(name).ok_or_else(|| {
            fail(
                code::NOT_FOUND,
                format!("no secret {name:?} in this run (pass it with --secret {name}=env:VAR)"),
            )
        })?;
        if reveal {
            Ok(json!({ "name": name, "handle": handle, "value": value }))
        } else {
            Ok(json!({ "name": name, "handle": handle }))
        }
    }
}
