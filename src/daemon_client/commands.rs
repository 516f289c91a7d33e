//! `sandbox ps`, `logs`, `cancel` and `approvals`: one request each (a
//! followed log aside), printed as a table or the daemon's JSON.
use clap::{Args, Subcommand, ValueEnum};
use hyper::Method;
use serde_json::{json, Value};

use super::follow::{Follow, Sink};
use super::render::{age, command_line, print_table, text};
use super::SocketArg;
use crate::client::{segment, EventFollower};
use crate::UsageError;

/// Arguments of `sandbox ps`.
#[derive(Debug, Args)]
pub struct PsArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Show finished runs too (default: queued and running only).
    #[arg(long = "all-states", short = 'a', conflicts_with = "state")]
    all_states: bool,
    /// Only runs in this state.
    #[arg(long, value_enum)]
    state: Option<RunState>,
    /// At most this many runs, newest first.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Print the daemon's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
}

/// A run's state, as the API names it.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum RunState {
    Queued,
    Running,
    Exited,
    Failed,
    Cancelled,
    Lost,
}

impl RunState {
    fn name(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Running => "running",
            RunState::Exited => "exited",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
            RunState::Lost => "lost",
        }
    }
}

/// Arguments of `sandbox logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The run's id.
    id: String,
    /// Keep following until the run is over.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only records after this sequence number.
    #[arg(long, default_value_t = 0, value_name = "SEQ")]
    since: u64,
    /// Print the log records (NDJSON) instead of the output bytes.
    #[arg(long)]
    json: bool,
}

/// Arguments of `sandbox cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// The run's id.
    id: String,
}

/// Arguments of `sandbox approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    #[command(flatten)]
    socket: SocketArg,
    /// Print the daemon's JSON answer instead of a table.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    action: Option<ApprovalsAction>,
}

#[derive(Debug, Subcommand)]
enum ApprovalsAction {
    /// Answer one open question.
    Answer {
        /// The question's id (`RUN/N`, as `sandbox approvals` lists it).
        id: String,
        /// once: this request; run: every such request of the run; deny: no.
        answer: AnswerArg,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum AnswerArg {
    Once,
    Run,
    Deny,
}

/// `sandbox ps`.
pub fn ps(args: PsArgs) -> anyhow::Result<i32> {
    let client = args.socket.client()?;
    let states: Vec<Option<&str>> = match (args.state, args.all_states) {
        (Some(state), _) => vec![Some(state.name())],
        (None, true) => vec![None],
        (None, false) => vec![Some("running"), Some("queued")],
    };
    let mut runs = Vec::new();
    for state in states {
        let path = match state {
            Some(state) => format!("/v1/runs?state={state}&limit={}", args.limit),
            None => format!("/v1/runs?limit={}", args.limit),
        };
        let answer = client.block_on(client.json(Method::GET, &path, None))?;
        let list = answer
            .get("runs")
            .and_then(Value::as_array)
            .ok_or_else(|| client.bad(&path, "no \"runs\" list".into()))?;
        runs.extend(list.iter().cloned());
    }
    runs.sort_by_key(|run| std::cmp::Reverse(run["created_ms"].as_u64().unwrap_or(0)));
    runs.truncate(args.limit as usize);
    if args.json {
        println!("{}", json!({ "runs": runs }));
        return Ok(0);
    }
    let now = sandbox::clock::unix_ms();
    let mut rows = vec![[
        "ID".to_string(),
        "STATE".into(),
        "STATUS".into(),
        "AGE".into(),
        "COMMAND".into(),
    ]];
    for run in &runs {
        rows.push([
            text(&run["id"]),
            text(&run["state"]),
            match &run["status"] {
                Value::Null => "-".into(),
                status => status.to_string(),
            },
            age(now.saturating_sub(run["created_ms"].as_u64().unwrap_or(now))),
            command_line(&run["command"]),
        ]);
    }
    print_table(&rows);
    Ok(0)
}

/// `sandbox logs`.
pub fn logs(args: LogsArgs) -> anyhow::Result<i32> {
    let client = args.socket.client()?;
    let sink = if args.json { Sink::Raw } else { Sink::Output };
    let mut follow = Follow {
        client: &client,
        run: &args.id,
        follower: EventFollower::after(args.since),
        sink,
        signals: None,
        quiet: true,
        end: None,
    };
    client.block_on(follow.run(args.follow))?;
    Ok(0)
}

/// `sandbox cancel`.
pub fn cancel(args: CancelArgs) -> anyhow::Result<i32> {
    let client = args.socket.client()?;
    let path = format!("/v1/runs/{}/cancel", segment(&args.id));
    let answer = client.block_on(client.json(Method::POST, &path, None))?;
    println!("{} {}", text(&answer["id"]), text(&answer["state"]));
    Ok(0)
}

/// `sandbox approvals` and `sandbox approvals answer`.
pub fn approvals(args: ApprovalsArgs) -> anyhow::Result<i32> {
    if let Some(ApprovalsAction::Answer { id, answer }) = args.action {
        let client = args.socket.client()?;
        let (run, number) = id.rsplit_once('/').ok_or_else(|| {
            UsageError(format!(
                "{id}: an approval id is RUN/N, as `sandbox approvals` lists it"
            ))
        })?;
        let answer = match answer {
            AnswerArg::Once => "once",
            AnswerArg::Run => "run",
            AnswerArg::Deny => "deny",
        };
        let path = format!("/v1/approvals/{}/{}", segment(run), segment(number));
        let body = json!({ "answer": answer });
        let reply = client.block_on(client.json(Method::POST, &path, Some(&body)))?;
        println!("{} {}", text(&reply["id"]), text(&reply["answer"]));
        return Ok(0);
    }
    let client = args.socket.client()?;
    let answer = client.block_on(client.json(Method::GET, "/v1/approvals", None))?;
    if args.json {
        println!("{answer}");
        return Ok(0);
    }
    let list = answer
        .get("approvals")
        .and_then(Value::as_array)
        .ok_or_else(|| client.bad("/v1/approvals", "no \"approvals\" list".into()))?;
    let now = sandbox::clock::unix_ms();
    let mut rows = vec![[
        "ID".to_string(),
        "ACTION".into(),
        "TARGET".into(),
        "CALLER".into(),
        "DENIED IN".into(),
    ]];
    for item in list {
        rows.push([
            text(&item["id"]),
            text(&item["action"]),
            text(&item["target"]),
            text(&item["caller"]),
            age(item["deadline_ms"]
                .as_u64()
                .unwrap_or(now)
                .saturating_sub(now)),
        ]);
    }
    print_table(&rows);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::path::PathBuf;

    #[test]
    fn approvals_take_the_socket_before_or_after_answer() {
        #[derive(Debug, Parser)]
        struct Approvals {
            #[command(flatten)]
            args: ApprovalsArgs,
        }
        for argv in [
            &["x", "--daemon", "/d.sock", "answer", "r/1", "once"][..],
            &["x", "answer", "r/1", "deny", "--daemon", "/d.sock"][..],
        ] {
            let parsed = Approvals::try_parse_from(argv).expect("parses").args;
            assert_eq!(
                parsed.socket.daemon,
                Some(PathBuf::from("/d.sock")),
                "{argv:?}"
            );
            assert!(matches!(
                parsed.action,
                Some(ApprovalsAction::Answer { .. })
            ));
        }
    }
}
