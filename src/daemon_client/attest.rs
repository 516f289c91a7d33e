//! `sandbox attest RUN --daemon` and `sandbox attest key --daemon`: a
//! daemon run's statement, signed with the daemon's own key, and that
//! key's public half (`GET /v1/runs/ID/attestation`, `GET /v1/attest/key`).

use std::path::PathBuf;

use anyhow::Context;
use hyper::Method;

use crate::client::{segment, Client};

/// What is asked of the daemon.
#[derive(Debug)]
pub enum AttestRequest {
    /// The statement of one of the caller's runs.
    Statement {
        /// The daemon's run id.
        run: String,
        /// Where to write it (stdout: None).
        out: Option<PathBuf>,
        /// The daemon's socket.
        socket: PathBuf,
    },
    /// The daemon's public key.
    Key {
        /// Where to write it (stdout: None).
        out: Option<PathBuf>,
        /// The daemon's socket.
        socket: PathBuf,
    },
}

impl AttestRequest {
    /// What of `sandbox attest` a daemon answers, and its socket: None when
    /// it is local.
    pub fn of(args: &crate::attest::AttestArgs) -> anyhow::Result<Option<AttestRequest>> {
        use crate::attest::AttestCommand;
        let socket = |flag: &str| crate::client::resolve_socket(Some(std::path::Path::new(flag)));
        Ok(match (&args.command, &args.daemon, &args.run) {
            (Some(AttestCommand::Key(key)), _, _) => Some(AttestRequest::Key {
                out: key.out.clone(),
                socket: socket(key.daemon.as_deref().unwrap_or_default())?,
            }),
            (None, Some(flag), Some(run)) => Some(AttestRequest::Statement {
                run: run.clone(),
                out: args.out.clone(),
                socket: socket(flag)?,
            }),
            _ => None,
        })
    }

    /// Ask, and write the answer.
    pub fn run(self) -> anyhow::Result<i32> {
        match self {
            AttestRequest::Statement { run, out, socket } => {
                let client = Client::new(socket)?;
                let path = format!("/v1/runs/{}/attestation", segment(&run));
                let answer = client.block_on(client.json(Method::GET, &path, None))?;
                // The daemon's answer is read as an envelope before it is
                // written: what lands in the file is one, or nothing.
                let envelope: sandbox::attest::dsse::Envelope = serde_json::from_value(answer)
                    .context("the daemon's answer is not a DSSE envelope")?;
                let mut bytes = serde_json::to_vec_pretty(&envelope)?;
                bytes.push(b'\n');
                crate::output::write_bytes(out.as_deref(), &bytes)?;
            }
            AttestRequest::Key { out, socket } => {
                let client = Client::new(socket)?;
                let answer = client.block_on(client.json(Method::GET, "/v1/attest/key", None))?;
                let public = answer["public"]
                    .as_str()
                    .filter(|p| p.len() == 64 && p.bytes().all(|b| b.is_ascii_hexdigit()))
                    .context("the daemon's answer holds no Ed25519 public key")?;
                crate::output::write_bytes(out.as_deref(), format!("{public}\n").as_bytes())?;
                if let Some(keyid) = answer["keyid"].as_str() {
                    eprintln!(
                        "sandbox: the daemon's attestation key: keyid {}",
                        crate::audit::shown(keyid)
                    );
                }
            }
        }
        Ok(0)
    }
}
