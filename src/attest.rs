//! `sandbox attest`: a signed in-toto statement of what a run enforced
//! (crates/sandbox/src/attest), for a kept review run or a report file,
//! and `sandbox attest verify`. `sandbox run --attest FILE` writes one for
//! the run it starts, with the project's state before and after
//! ([`Attesting`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use sandbox::attest::{self, key, ProjectState};

/// `sandbox attest`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AttestArgs {
    #[command(subcommand)]
    pub command: Option<AttestCommand>,
    /// A kept review run's id (`sandbox run --review`), or a report file
    /// (`sandbox run --report FILE`).
    pub run: Option<String>,
    /// Write the envelope to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Ask `sandbox daemon` to attest one of your runs there instead, signed
    /// with the daemon's key (--daemon=SOCKET, or a bare --daemon for
    /// $SANDBOX_DAEMON else the default socket): RUN is the daemon's run id.
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          default_missing_value = "", requires = "run")]
    pub daemon: Option<String>,
}

/// Subcommands of `sandbox attest`.
#[derive(Debug, Subcommand)]
pub enum AttestCommand {
    /// Check an attestation's signature and statement (exit 1 naming what fails).
    Verify(VerifyArgs),
    /// Write a daemon's public key (`ed25519.pub`'s form), for `verify --key`.
    Key(KeyArgs),
}

/// `sandbox attest key`.
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// The daemon whose key (--daemon=SOCKET, or a bare --daemon for
    /// $SANDBOX_DAEMON else the default socket).
    #[arg(long, value_name = "SOCKET", num_args = 0..=1, require_equals = true,
          default_missing_value = "", required = true)]
    pub daemon: Option<String>,
    /// Write it to FILE instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
}

/// `sandbox attest verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The attestation (a DSSE envelope, JSON).
    pub file: PathBuf,
    /// The signer's public key (`ed25519.pub`: 64 hex digits; a daemon's
    /// from `sandbox attest key --daemon`); without it, your own.
    #[arg(long, value_name = "PUB")]
    pub key: Option<PathBuf>,
    /// Print the result, and the statement, as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: AttestArgs) -> anyhow::Result<i32> {
    match (args.command, args.run) {
        (Some(AttestCommand::Verify(verify)), _) => verify_command(&verify),
        // Sent to the daemon's client before this
        // (`daemon_client::AttestRequest::of`).
        (Some(AttestCommand::Key(_)), _) => {
            Err(crate::UsageError("`sandbox attest key` needs --daemon".into()).into())
        }
        (None, Some(run)) => attest_command(&run, args.out.as_deref()),
        (None, None) => Err(crate::UsageError(
            "name a kept review run or a report file (`sandbox attest RUN`), or check one with \
             `sandbox attest verify FILE`"
                .into(),
        )
        .into()),
    }
}

/// The user's key, made on first use (said once on stderr).
fn user_key() -> anyhow::Result<key::SigningKey> {
    let dir = key::user_dir();
    let (key, made) = key::load_or_create(&dir).context("the attestation key")?;
    if made {
        eprintln!(
            "sandbox: made your attestation key {} (keyid {}); give others {} to check your attestations",
            key::private_path(&dir).display(),
            key::key_id(key.public()),
            key::public_path(&dir).display()
        );
    }
    Ok(key)
}

fn write_out(out: Option<&Path>, envelope: &attest::dsse::Envelope) -> anyhow::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(envelope)?;
    bytes.push(b'\n');
    crate::output::write_bytes(out, &bytes)
}

/// At most this much of a report is read.
const REPORT_MAX: u64 = 64 << 20;

fn read_json(path: &Path) -> anyhow::Result<serde_json::Value> {
    use std::io::Read;
    let file = sandbox::safe_file::open_read(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(REPORT_MAX + 1).read_to_end(&mut bytes)?;
    anyhow::ensure!(
        bytes.len() as u64 <= REPORT_MAX,
        "{} is larger than {} MiB: not a report",
        path.display(),
        REPORT_MAX >> 20
    );
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", path.display()))
}

fn attest_command(run: &str, out: Option<&Path>) -> anyhow::Result<i32> {
    let as_file = Path::new(run);
    let statement = if as_file.is_file() {
        let report = read_json(as_file)?;
        anyhow::ensure!(
            report.get("profile").is_some(),
            "{run} is not a run's report (it has no profile)"
        );
        attest::statement(&attest::Inputs {
            report: &report,
            policy: None,
            project: ProjectState {
                path: report["project"].as_str().unwrap_or_default().to_owned(),
                ..ProjectState::default()
            },
            review: None,
        })
    } else {
        let store = sandbox::review::Store::user();
        let dir = store.run_dir(run).map_err(|err| {
            crate::UsageError(format!(
                "{run}: neither a report file nor a kept run: {err}"
            ))
        })?;
        if !dir.is_dir() {
            return Err(crate::UsageError(format!(
                "{run}: neither a report file nor a kept review run (its id is what `sandbox run \
                 --review` printed when it ended)"
            ))
            .into());
        }
        let report_path = dir.join("report.json");
        let report = read_json(&report_path).with_context(|| {
            format!("run {run}: its report (kept runs are listed by `sandbox changes`)")
        })?;
        let started = store.started(run)?;
        let captured = store.changes(run)?;
        // Review mode never writes the project: until a change is
        // applied, the project now is the state the changes apply to.
        let now = attest::tree::digest(&started.project)?;
        let applied = captured.changes.iter().any(|c| c.applied);
        attest::statement(&attest::Inputs {
            report: &report,
            policy: None,
            project: ProjectState {
                path: started.project.display().to_string(),
                before: (!applied).then(|| now.clone()),
                after: applied.then_some(now),
            },
            review: Some((run, &captured)),
        })
    };
    let key = user_key()?;
    write_out(out, &attest::sign(&key, &statement))?;
    Ok(0)
}

fn verify_command(args: &VerifyArgs) -> anyhow::Result<i32> {
    use std::io::Read;
    let public_path = match &args.key {
        Some(path) => path.clone(),
        None => key::public_path(&key::user_dir()),
    };
    let public = key::read_public(&public_path).with_context(|| match &args.key {
        Some(_) => "--key".to_owned(),
        None => "no --key given, and your own public key".to_owned(),
    })?;
    let file = sandbox::safe_file::open_read(&args.file)
        .with_context(|| format!("opening the attestation {}", args.file.display()))?;
    let mut bytes = Vec::new();
    file.take(attest::ENVELOPE_MAX + 1)
        .read_to_end(&mut bytes)?;
    let result = if bytes.len() as u64 > attest::ENVELOPE_MAX {
        Err(attest::AttestError::NotEnvelope(format!(
            "larger than {} MiB",
            attest::ENVELOPE_MAX >> 20
        )))
    } else {
        attest::verify(&bytes, &public)
    };
    if args.json {
        let value = match &result {
            Ok(verified) => serde_json::json!({ "ok": true, "verified": verified }),
            Err(err) => serde_json::json!({ "ok": false, "error": err.to_string() }),
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        match &result {
            Ok(verified) => {
                println!("ok: signed by key {}", verified.keyid);
                println!("  profile: {}", shown(&verified.profile));
                println!("  command: {}", shown(&verified.command.join(" ")));
                for subject in &verified.subjects {
                    println!("  subject: {}", shown(subject));
                }
                if let Some(head) = &verified.audit_head {
                    println!("  audit head: {head}");
                }
            }
            Err(err) => println!(
                "refused: {}: {}",
                shown(&args.file.display().to_string()),
                shown(&err.to_string())
            ),
        }
    }
    Ok(if result.is_ok() { 0 } else { 1 })
}

fn shown(text: &str) -> String {
    crate::audit::shown(text)
}

/// `sandbox run --attest FILE`: the key and the project's digest taken
/// before the run, the statement signed after it.
pub struct Attesting {
    key: key::SigningKey,
    target: sandbox::safe_file::OutputTarget,
    project: PathBuf,
    before: String,
    policy: sandbox::profile::policy::Policy,
}

impl Attesting {
    /// Before the run: the key (made on first use), the output file
    /// opened, the project hashed.
    pub fn start(
        path: &Path,
        project: &Path,
        writable_roots: &[PathBuf],
        policy: &sandbox::profile::policy::Policy,
        quiet: bool,
    ) -> anyhow::Result<Attesting> {
        let key = user_key()?;
        let target = sandbox::safe_file::OutputTarget::prepare(path, writable_roots)
            .with_context(|| crate::UsageError("the attestation file (--attest)".into()))?;
        if let (Some(root), false) = (target.inside_writable(), quiet) {
            eprintln!(
                "sandbox: warning: {}",
                sandbox::safe_file::inside_warning("attestation", path, root)
            );
        }
        let project = std::fs::canonicalize(project)
            .with_context(|| format!("the project {}", project.display()))?;
        let before = attest::tree::digest(&project)?;
        Ok(Attesting {
            key,
            target,
            project,
            before,
            policy: policy.clone(),
        })
    }

    /// After the run: the statement of `report`, signed, written.
    pub fn finish(self, report: &serde_json::Value) -> anyhow::Result<()> {
        let after = attest::tree::digest(&self.project)?;
        // A review run's record is the report's `run`.
        let kept = report["run"]["id"].as_str().and_then(|id| {
            sandbox::review::Store::user()
                .changes(id)
                .ok()
                .map(|captured| (id.to_owned(), captured))
        });
        let statement = attest::statement(&attest::Inputs {
            report,
            policy: Some(&self.policy),
            project: ProjectState {
                path: self.project.display().to_string(),
                before: Some(self.before),
                after: Some(after),
            },
            review: kept.as_ref().map(|(id, captured)| (id.as_str(), captured)),
        });
        let mut bytes = serde_json::to_vec_pretty(&attest::sign(&self.key, &statement))?;
        bytes.push(b'\n');
        self.target
            .write_all(&bytes)
            .context("writing the attestation (--attest)")?;
        Ok(())
    }
}
