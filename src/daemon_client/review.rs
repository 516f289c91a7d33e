//! `sandbox changes`, `apply` and `discard` with `--daemon`: a daemon run's
//! kept changes, through the daemon's review endpoints (the daemon lists
//! and applies them as the caller, and only for the run's owner). Printed
//! as the local commands print a local run's.

use hyper::Method;
use serde_json::{json, Value};

use crate::client::{segment, Client};
use crate::review::{print_applied, print_refused, ApplyArgs, ChangesArgs, DiscardArgs};
use crate::UsageError;

/// A review command sent to a daemon.
#[derive(Debug)]
pub enum ReviewCommand {
    /// `sandbox changes --daemon`.
    Changes(ChangesArgs, std::path::PathBuf),
    /// `sandbox apply --daemon`.
    Apply(ApplyArgs, std::path::PathBuf),
    /// `sandbox discard --daemon`.
    Discard(DiscardArgs, std::path::PathBuf),
}

impl ReviewCommand {
    /// Run it.
    pub fn run(self) -> anyhow::Result<i32> {
        match self {
            ReviewCommand::Changes(args, socket) => changes(args, socket),
            ReviewCommand::Apply(args, socket) => apply(args, socket),
            ReviewCommand::Discard(args, socket) => discard(args, socket),
        }
    }
}

/// The daemon's run id: `last` names a local store's run, not one of the
/// daemon's.
fn run_id(asked: &str) -> anyhow::Result<&str> {
    if asked == "last" {
        return Err(UsageError(
            "`last` names the newest run of this user's own store; give the daemon's run id (`sandbox ps --all-states` lists them)".into(),
        )
        .into());
    }
    Ok(asked)
}

fn changes(args: ChangesArgs, socket: std::path::PathBuf) -> anyhow::Result<i32> {
    let id = run_id(args.run.as_deref().unwrap_or_default())?;
    let client = Client::new(socket)?;
    let diff = if args.json { "" } else { "?diff=true" };
    let path = format!("/v1/runs/{}/changes{diff}", segment(id));
    let answer = client.block_on(client.json(Method::GET, &path, None))?;
    if args.json {
        println!("{answer}");
    } else {
        print!("{}", answer["diff"].as_str().unwrap_or_default());
    }
    Ok(0)
}

fn apply(args: ApplyArgs, socket: std::path::PathBuf) -> anyhow::Result<i32> {
    let id = run_id(&args.run)?.to_owned();
    let allow = args.allow();
    let body = json!({
        "paths": args.paths,
        "allow": {
            "protected": allow.protected,
            "ci": allow.ci,
            "setid": allow.setid,
            "outside_links": allow.outside_links,
            "hardlinks": allow.hardlinks,
            "secrets": allow.secrets,
            "incomplete": allow.incomplete,
        },
    });
    let client = Client::new(socket)?;
    let path = format!("/v1/runs/{}/apply", segment(&id));
    let answer = client.block_on(client.send(Method::POST, &path, Some(&body)))?;
    let parsed: Option<Value> = serde_json::from_slice(&answer.body).ok();
    match (answer.status, parsed) {
        (200, Some(applied)) => {
            if args.json {
                println!("{applied}");
                return Ok(0);
            }
            let paths: Vec<String> = strings(&applied["applied"]);
            let remaining = applied["remaining"].as_u64().unwrap_or(0);
            print_applied(
                &id,
                &paths,
                usize::try_from(remaining).unwrap_or(usize::MAX),
            );
            Ok(0)
        }
        (409, Some(refused)) if refused["refused"].is_array() => {
            if args.json {
                println!("{refused}");
            }
            let reasons = refused["refused"]
                .as_array()
                .into_iter()
                .flatten()
                .map(refusal_line);
            print_refused(&id, reasons);
            Ok(1)
        }
        _ => {
            client.check(&path, &answer)?;
            Err(client
                .bad(
                    &path,
                    format!("status {} without an apply's answer", answer.status),
                )
                .into())
        }
    }
}

fn discard(args: DiscardArgs, socket: std::path::PathBuf) -> anyhow::Result<i32> {
    let id = run_id(&args.run)?;
    let client = Client::new(socket)?;
    let path = format!("/v1/runs/{}/discard", segment(id));
    client.block_on(client.json(Method::POST, &path, None))?;
    println!("run {id}: changes discarded");
    Ok(0)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// A refusal as `sandbox apply` words it (review::Refusal's Display).
fn refusal_line(refusal: &Value) -> String {
    let mut line = String::new();
    if let Some(path) = refusal["path"].as_str() {
        line.push_str(path);
        line.push_str(": ");
    }
    line.push_str(refusal["reason"].as_str().unwrap_or_default());
    if let Some(flag) = refusal["flag"].as_str() {
        line.push_str(": pass ");
        line.push_str(flag);
    }
    line
}
