//! `sandbox run --daemon`: the run submitted (waiting while the daemon is
//! full), its output streamed, and its end told as a local run tells it.
use std::path::{Path, PathBuf};

use anyhow::Context;
use hyper::Method;
use serde_json::Value;

use super::follow::{Follow, Sink};
use super::request::{read_stdin, run_request};
use crate::client::{segment, Client, ClientError, EventFollower, NoSocket};
use crate::run::limit_messages;
use crate::run::RunArgs;
use sandbox::Report;

/// How long `run --daemon` keeps resubmitting while the daemon says it is
/// full (429/503 with `Retry-After`).
const BUSY_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// The daemon `sandbox run` sends its run to, if any: `--daemon[=SOCKET]`,
/// else `SANDBOX_DAEMON`. Decided in `sandbox` itself, before a remote run
/// is handed to `sandbox-daemon` (src/faces.rs): it links no client.
pub fn daemon_of_run(args: &RunArgs) -> Result<Option<PathBuf>, NoSocket> {
    match &args.daemon {
        Some(path) => crate::client::resolve_socket(Some(Path::new(path))).map(Some),
        None => crate::client::socket_from_env(),
    }
}

/// `sandbox run --daemon`: submit, stream the output, and end like the
/// local run would (report, messages, exit status).
pub fn run_remote(args: RunArgs, socket: PathBuf) -> anyhow::Result<i32> {
    let report_fd = args
        .report_fd
        .map(crate::run::check_report_fd)
        .transpose()?;
    let cwd = std::env::current_dir().context("the current directory")?;
    let stdin = read_stdin()?;
    let request = run_request(&args, &cwd, &|name| std::env::var_os(name), stdin)?;
    let project = PathBuf::from(request["project"].as_str().unwrap_or_default());
    let report_target = match &args.report {
        Some(path) => Some(crate::run::prepare_report(
            path,
            std::slice::from_ref(&project),
            args.quiet,
        )?),
        None => None,
    };
    let client = Client::new(socket)?;
    // Caught from before the submission, so a Ctrl-C that comes before the
    // stream is open still cancels the run instead of orphaning it.
    let signals = client.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        Ok::<_, std::io::Error>((
            signal(SignalKind::interrupt())?,
            signal(SignalKind::terminate())?,
        ))
    });
    let signals = Some(signals.map_err(ClientError::Runtime)?);
    let id = client.block_on(submit(&client, &request, args.quiet))?;
    let mut follow = Follow {
        client: &client,
        run: &id,
        follower: EventFollower::default(),
        sink: Sink::Output,
        signals,
        quiet: args.quiet,
        end: None,
    };
    let run = client.block_on(follow.run(true))?;
    let run = match run {
        Some(run) => run,
        None => client.block_on(client.json(
            Method::GET,
            &format!("/v1/runs/{}", segment(&id)),
            None,
        ))?,
    };
    let state = run["state"].as_str().unwrap_or("");
    let reason = run["reason"].as_str().map(str::to_string);
    let report = match &run["report"] {
        Value::Null => Report::refused(
            &args.profile,
            reason
                .as_deref()
                .unwrap_or("the run ended without a report"),
        )
        .to_json(),
        report => report.clone(),
    };
    // The supervisor ran as this caller and its report is its claim (the
    // daemon labels it `reported_by`): read against the schema, and an
    // unreadable one is said, not trusted. The file gets it as the daemon
    // keeps it.
    let typed = match Report::read(&report) {
        Ok(typed) => Some(typed),
        Err(err) => {
            if !args.quiet {
                eprintln!("sandbox: warning: {err}");
            }
            None
        }
    };
    if let (Some(typed), false) = (&typed, args.quiet) {
        // Said as `sandbox run` says them: the daemon's runs are on this
        // machine, so the cgroup v1 fallback is said once here too.
        crate::run::print_warnings(typed.warnings());
    }
    let line = crate::run::deliver_report(&report, report_target.as_ref(), report_fd)?;
    for message in typed.iter().flat_map(limit_messages) {
        eprintln!("sandbox: {message}");
    }
    if let Some(audit) = &args.audit {
        append_audit(&client, &id, audit)?;
    }
    // The daemon keeps a review run's changes under the daemon's run id,
    // in a store of the caller's that `sandbox changes` here does not
    // read: name the endpoints.
    if let Some(kept) = typed.as_ref().and_then(|r| r.review.as_ref()) {
        if kept.error.is_some() || (kept.changes == 0 && !kept.limit_reached) {
            eprintln!("{}", kept.notice());
        } else {
            eprintln!(
                "sandbox: run {id}: {} change(s) kept for review by the daemon: GET /v1/runs/{id}/changes, then POST /v1/runs/{id}/apply or /v1/runs/{id}/discard",
                kept.changes
            );
        }
    }
    let status = match run["status"].as_i64() {
        Some(status) if state != "lost" => {
            if let (Some(reason), false) = (&reason, args.quiet || state != "cancelled") {
                eprintln!("sandbox: run {id} {state}: {reason}");
            }
            status as i32
        }
        _ => {
            eprintln!(
                "sandbox: run {id} {}: {}",
                if state.is_empty() { "ended" } else { state },
                reason.as_deref().unwrap_or("no reason given")
            );
            125
        }
    };
    if args.json {
        eprintln!("{line}");
    }
    Ok(status)
}

/// Submit the run, waiting while the daemon says it is full.
async fn submit(client: &Client, request: &Value, quiet: bool) -> Result<String, ClientError> {
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        let answer = client.send(Method::POST, "/v1/runs", Some(request)).await?;
        match client.check("/v1/runs", &answer) {
            Ok(()) => {
                let value: Value = serde_json::from_slice(&answer.body)
                    .map_err(|err| client.bad("/v1/runs", err.to_string()))?;
                return value["id"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| client.bad("/v1/runs", "no \"id\"".into()));
            }
            Err(ClientError::Api {
                status,
                retry_after: Some(wait),
                message,
                ..
            }) if crate::client::is_busy(
                hyper::StatusCode::from_u16(status).unwrap_or_default(),
            ) && started.elapsed() < BUSY_FOR =>
            {
                if !quiet && !told {
                    eprintln!(
                        "sandbox: {message}; waiting for room (the daemon asks for {wait} s)"
                    );
                    told = true;
                }
                tokio::time::sleep(std::time::Duration::from_secs(wait.clamp(1, 5))).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// `--audit FILE` of a daemon run: the broker's lines, fetched when the run
/// is over and appended as the local broker would have. Streamed line by
/// line: an audit may be larger than any answer the client reads whole.
fn append_audit(client: &Client, id: &str, file: &Path) -> anyhow::Result<()> {
    let path = format!("/v1/runs/{}/audit", segment(id));
    // A refused request writes nothing, and leaves no file behind.
    let body = client.block_on(client.stream(&path))?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .with_context(|| format!("opening the audit file {}", file.display()))?;
    let mut out = std::io::BufWriter::new(out);
    client
        .block_on(crate::client::copy_lines(body, &mut out))
        .with_context(|| {
            format!(
                "run {id}: the audit appended to {} is incomplete",
                file.display()
            )
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limit_messages_read_the_report() {
        use sandbox::spawn::parent::LimitHit::{Memory, Output, Timeout};
        let mut report = Report::refused("strict", "none");
        report.exit = Some(sandbox::spawn::ExitInfo {
            code: None,
            signal: Some(9),
            status: 137,
        });
        let mut with_enforced = report.to_json();
        with_enforced["enforced"] = json!({
            "timeout_s": 90.0,
            "cgroup": {"version": 1, "controllers": [], "paths": [], "memory": 536870912, "pids": null, "cpu": null},
            "landlock": {"requested": "off", "abi": null, "status": "off", "rules": 0},
            "seccomp": {"requested": "off", "mode": null, "filter_sha256": null, "instructions": 0, "status": "off"},
        });
        let mut report = Report::read(&with_enforced).unwrap();
        report.run = Some(sandbox::spawn::report::RunDetails {
            limits_hit: vec![Memory, Timeout, Output],
            resources: Some(sandbox::spawn::report::Resources {
                cpu_user_ms: 0.0,
                cpu_system_ms: 0.0,
                memory_peak: None,
                oom_kills: 1,
                pids_limit_hits: 0,
                pids_peak: None,
            }),
            ..Default::default()
        });
        let messages = limit_messages(&report);
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("killed: memory limit 512MiB exceeded"));
        assert!(messages[1].starts_with("killed: timeout 90s exceeded"));
    }
}
