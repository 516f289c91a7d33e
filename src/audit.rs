//! `sandbox audit verify`: check an audit file's hash chains
//! (crates/sandbox/src/audit), with an anchor when one was kept.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use sandbox::audit::verify::{verify, Broken, Verified};

/// Subcommands of `sandbox audit`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check that no line of an audit file was edited, removed, reordered
    /// or inserted (exit 1 naming the first bad line).
    Verify(VerifyArgs),
}

/// `sandbox audit verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The audit file (`--audit` of `run` or `serve`, a daemon run's
    /// audit.ndjson, a container's); `-` reads stdin.
    pub file: PathBuf,
    /// A head kept elsewhere (a report's `broker.audit_head`, an
    /// attestation's): the file must hold a chain ending exactly there,
    /// which also finds lines cut from the end.
    #[arg(long, value_name = "HASH")]
    pub head: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Exit status when the file does not verify.
pub const EXIT_BROKEN: i32 = 1;

pub fn run(cmd: AuditCommand) -> anyhow::Result<i32> {
    match cmd {
        AuditCommand::Verify(args) => verify_command(&args),
    }
}

fn verify_command(args: &VerifyArgs) -> anyhow::Result<i32> {
    let result = if args.file.as_os_str() == "-" {
        verify(std::io::stdin().lock(), args.head.as_deref())
    } else {
        let file = sandbox::safe_file::open_read(&args.file)
            .with_context(|| format!("opening the audit file {}", args.file.display()))?;
        verify(file, args.head.as_deref())
    };
    if args.json {
        let value = match &result {
            Ok(verified) => serde_json::json!({ "ok": true, "verified": verified }),
            Err(broken) => serde_json::json!({ "ok": false, "broken": broken }),
        };
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        match &result {
            Ok(verified) => print_verified(verified),
            Err(broken) => print_broken(&args.file, broken),
        }
    }
    Ok(if result.is_ok() { 0 } else { EXIT_BROKEN })
}

fn print_verified(verified: &Verified) {
    println!(
        "ok: {} line(s) in {} chain(s), none edited, removed, reordered or inserted{}",
        verified.lines,
        verified.chains.len(),
        if verified.anchored {
            ", and one ends at the anchored head"
        } else {
            ""
        }
    );
    for chain in &verified.chains {
        println!(
            "  {}: {} line(s), head {}",
            shown(&chain.name),
            chain.lines,
            chain.head
        );
    }
    if !verified.anchored {
        println!(
            "  without --head, lines cut from a chain's end and a rewritten chain are not detectable"
        );
    }
}

fn print_broken(file: &std::path::Path, broken: &Broken) {
    println!(
        "refused: {}: {}",
        shown(&file.display().to_string()),
        shown(&broken.to_string())
    );
    if let Some(chain) = &broken.chain {
        println!("  chain: {}", shown(chain));
    }
}

/// Text from the file (a chain's name, a parser's quote of a line) with
/// every character that could drive a terminal escaped.
pub(crate) fn shown(text: &str) -> String {
    sandbox::broker::text::shown(text)
}
