//! The client commands of `sandbox daemon`: `run --daemon`, `ps`, `logs`,
//! `cancel` and `approvals` (API: `docs/src/daemon.md`).
//!
//! Exit statuses: a run exits with its command's status, as a local run
//! does. Every command exits 2 when the daemon refused the request itself
//! (400, 403, 404, 409, 413: nothing was run, like a usage error) and 125
//! when it could not be reached or could not take the request now
//! (connection failures, 429, 5xx).
use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use hyper::Method;
use serde_json::{json, Map, Value};
use tokio::signal::unix::Signal;

use super::client::{segment, Client, ClientError, EventFollower};
use super::run::limit_messages;
use super::run::RunArgs;
use super::UsageError;
use sandbox::launch::protocol::LogEvent;

/// The most a request body may hold (the daemon answers `413` past it).
const MAX_BODY: usize = 1 << 20;

/// How long a follower keeps trying to reconnect to a daemon that went
/// away (a restart takes well under this).
const RECONNECT_FOR: std::time::Duration = std::time::Duration::from_secs(15);

/// How long `run --daemon` keeps resubmitting while the daemon says it is
/// full (429/503 with `Retry-After`).
const BUSY_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// The socket option shared by the client commands.
#[derive(Debug, Args)]
pub struct SocketArg {
    /// The daemon's socket (default: $SANDBOX_DAEMON, else /run/sandbox/sandbox.sock for
    /// root and $XDG_RUNTIME_DIR/sandbox.sock for a user).
    #[arg(long = "daemon", value_name = "SOCKET", global = true)]
    pub daemon: Option<PathBuf>,
}

impl SocketArg {
    fn client(&self) -> Result<Client, ClientError> {
        Client::new(super::client::resolve_socket(self.daemon.as_deref())?)
    }
}

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

/// The daemon `sandbox run` sends its run to, if any: `--daemon[=SOCKET]`,
/// else `SANDBOX_DAEMON`.
pub fn daemon_of_run(args: &RunArgs) -> Result<Option<PathBuf>, ClientError> {
    match &args.daemon {
        Some(path) => super::client::resolve_socket(Some(Path::new(path))).map(Some),
        None => super::client::socket_from_env(),
    }
}

/// `sandbox run --daemon`: submit, stream the output, and end like the
/// local run would (report, messages, exit status).
pub fn run_remote(args: RunArgs, socket: PathBuf) -> anyhow::Result<i32> {
    let report_fd = args
        .report_fd
        .map(super::run::check_report_fd)
        .transpose()?;
    let cwd = std::env::current_dir().context("the current directory")?;
    let stdin = read_stdin()?;
    let request = run_request(&args, &cwd, &|name| std::env::var_os(name), stdin)?;
    let project = PathBuf::from(request["project"].as_str().unwrap_or_default());
    let report_target = match &args.report {
        Some(path) => Some(super::run::prepare_report(
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
        Value::Null => super::run::failure_report(
            &args.profile,
            reason
                .as_deref()
                .unwrap_or("the run ended without a report"),
        ),
        report => report.clone(),
    };
    if !args.quiet {
        // Said as `sandbox run` says them: the daemon's runs are on this
        // machine, so the cgroup v1 fallback is said once here too.
        let warnings: Vec<String> = report["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        super::run::print_warnings(&warnings);
    }
    let line = super::run::deliver_report(&report, report_target.as_ref(), report_fd)?;
    for message in limit_messages(&report) {
        eprintln!("sandbox: {message}");
    }
    if let Some(audit) = &args.audit {
        append_audit(&client, &id, audit)?;
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
            }) if super::client::is_busy(
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

/// Where the records of an event stream go.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sink {
    /// Output bytes to this process's stdout and stderr, as the run wrote them.
    Output,
    /// Every record as the daemon sent it, one per line on stdout.
    Raw,
}

/// One run's event stream, followed across dropped connections.
struct Follow<'a> {
    client: &'a Client,
    run: &'a str,
    follower: EventFollower,
    sink: Sink,
    /// SIGINT and SIGTERM, caught: they cancel the run (which keeps
    /// streaming to its end).
    signals: Option<(Signal, Signal)>,
    quiet: bool,
    /// The run's `end` record, once read: the run object's state, status,
    /// reason and report, so the end is known even if the daemon stops
    /// before it could be asked.
    end: Option<Value>,
}

impl Follow<'_> {
    /// Stream the records; with `follow`, until the run is over (then its
    /// run object, when one was read to check that).
    async fn run(&mut self, follow: bool) -> Result<Option<Value>, ClientError> {
        let (mut interrupt, mut terminate) = match self.signals.take() {
            Some((interrupt, terminate)) => (Some(interrupt), Some(terminate)),
            None => (None, None),
        };
        let mut out = Output::default();
        let mut broken_since: Option<std::time::Instant> = None;
        loop {
            let path = self.follower.path(self.run, follow);
            let body = match self.client.stream(&path).await {
                Ok(body) => body,
                Err(err @ (ClientError::Unreachable { .. } | ClientError::Http { .. }))
                    if follow && within(&mut broken_since) =>
                {
                    let _ = err;
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
                Err(err) => return Err(err),
            };
            let clean = self
                .drain(body, &mut out, &mut interrupt, &mut terminate)
                .await?;
            if !follow {
                return Ok(None);
            }
            if let Some(end) = self.end.take() {
                return Ok(Some(end));
            }
            if !clean {
                self.follower.disconnected();
                if within(&mut broken_since) {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
                return Err(self.client.bad(
                    &path,
                    "the event stream kept breaking off before the run ended".into(),
                ));
            }
            broken_since = None;
            // The stream ends when the run is over; a daemon that stopped
            // in between ends it too, and then the run is not over yet.
            let run_path = format!("/v1/runs/{}", segment(self.run));
            match self.client.json(Method::GET, &run_path, None).await {
                Ok(run) if !matches!(run["state"].as_str(), Some("queued" | "running")) => {
                    return Ok(Some(run));
                }
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
                Err(ClientError::Unreachable { .. } | ClientError::Http { .. })
                    if within(&mut broken_since) =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Read one response body to its end; `false` when it broke off.
    async fn drain(
        &mut self,
        mut body: hyper::body::Incoming,
        out: &mut Output,
        interrupt: &mut Option<Signal>,
        terminate: &mut Option<Signal>,
    ) -> Result<bool, ClientError> {
        use http_body_util::BodyExt;
        loop {
            let frame = tokio::select! {
                frame = body.frame() => frame,
                Some(()) = recv(interrupt) => { self.cancel().await; continue; }
                Some(()) = recv(terminate) => { self.cancel().await; continue; }
            };
            let frame = match frame {
                None => return Ok(true),
                Some(Err(_)) => return Ok(false),
                Some(Ok(frame)) => frame,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let lines = self
                .follower
                .push(&data)
                .map_err(|detail| self.client.bad("the event stream", detail))?;
            for line in lines {
                self.show(line, out);
            }
        }
    }

    fn show(&mut self, line: super::client::EventLine, out: &mut Output) {
        if let Some(LogEvent::End {
            state,
            status,
            reason,
            report,
        }) = line.record.as_ref().map(|record| &record.event)
        {
            self.end = Some(json!({
                "state": state, "status": status, "reason": reason, "report": report,
            }));
        }
        if self.sink == Sink::Raw {
            let mut raw = line.raw;
            raw.push(b'\n');
            out.write(1, &raw);
            return;
        }
        let Some(record) = line.record else {
            return;
        };
        match record.event {
            LogEvent::Stdout(chunk) => out.write(1, &chunk.bytes().unwrap_or_default()),
            LogEvent::Stderr(chunk) => out.write(2, &chunk.bytes().unwrap_or_default()),
            LogEvent::Ask { id, action, target } if !self.quiet => {
                let target = target.map(|t| format!(" {t}")).unwrap_or_default();
                out.write(
                    2,
                    format!(
                        "sandbox: the run asks for {action}{target}: answer with \
                         `sandbox approvals answer {}/{id} once|run|deny`\n",
                        self.run
                    )
                    .as_bytes(),
                );
            }
            _ => {}
        }
    }

    async fn cancel(&self) {
        let path = format!("/v1/runs/{}/cancel", segment(self.run));
        if !self.quiet {
            eprintln!("sandbox: cancelling run {}", self.run);
        }
        if let Err(err) = self.client.json(Method::POST, &path, None).await {
            eprintln!("sandbox: cancelling run {}: {err}", self.run);
        }
    }
}

async fn recv(signal: &mut Option<Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

/// Whether a broken connection is still worth retrying: the first break
/// starts the clock.
fn within(since: &mut Option<std::time::Instant>) -> bool {
    since.get_or_insert_with(std::time::Instant::now).elapsed() < RECONNECT_FOR
}

/// This process's stdout and stderr; a stream whose reader went away is
/// not written again (the run still goes on to its end and its status).
#[derive(Default)]
struct Output {
    closed: [bool; 3],
}

impl Output {
    fn write(&mut self, fd: usize, bytes: &[u8]) {
        if self.closed[fd] || bytes.is_empty() {
            return;
        }
        let result = if fd == 1 {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes).and_then(|()| out.flush())
        } else {
            std::io::stderr().lock().write_all(bytes)
        };
        if result.is_err() {
            self.closed[fd] = true;
        }
    }
}

/// The request body of `POST /v1/runs` for these arguments, or the flag
/// that cannot be sent (exit 2). `lookup` reads this process's environment.
fn run_request(
    args: &RunArgs,
    cwd: &Path,
    lookup: &dyn Fn(&OsStr) -> Option<OsString>,
    stdin: Option<Vec<u8>>,
) -> anyhow::Result<Value> {
    refuse_unsendable(args)?;
    let command = args
        .command
        .iter()
        .map(|arg| utf8(arg, "the command"))
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = std::fs::canonicalize(cwd).context("the current directory")?;
    let project = match &args.project {
        Some(project) => super::run::absolute(project, "--project")?,
        None => cwd.clone(),
    };
    let mut body = Map::new();
    body.insert("command".into(), json!(command));
    body.insert("profile".into(), json!(args.profile));
    body.insert(
        "project".into(),
        json!(utf8(project.as_os_str(), "--project")?),
    );
    if cwd != project && cwd.starts_with(&project) {
        body.insert(
            "cwd".into(),
            json!(utf8(cwd.as_os_str(), "the current directory")?),
        );
    }
    body.insert("env".into(), Value::Object(environment(args, lookup)?));
    let mut limits = Map::new();
    if let Some(memory) = args.memory {
        limits.insert(
            "memory".into(),
            json!(sandbox::profile::size::format_size(memory)),
        );
    }
    if let Some(pids) = args.pids {
        limits.insert("pids".into(), json!(pids));
    }
    if let Some(cpus) = args.cpus {
        limits.insert("cpus".into(), json!(cpus));
    }
    if let Some(timeout) = args.timeout {
        limits.insert(
            "timeout".into(),
            json!(sandbox::profile::size::format_duration(timeout)),
        );
    }
    if let Some(output) = args.max_output {
        limits.insert(
            "output".into(),
            json!(sandbox::profile::size::format_size(output)),
        );
    }
    if !limits.is_empty() {
        body.insert("limits".into(), Value::Object(limits));
    }
    if let Some(net) = &args.net {
        let spec = match net.mode {
            sandbox::profile::policy::NetworkMode::Allowlist => {
                format!("allow:{}", net.allow.join(","))
            }
            mode => mode.name().to_string(),
        };
        body.insert("network".into(), json!(spec));
    }
    if !args.grants.is_empty() {
        for grant in &args.grants {
            super::run::check_grant(grant)?;
        }
        body.insert("grants".into(), json!(args.grants));
    }
    if !args.secrets.is_empty() {
        let mut secrets = Map::new();
        for spec in &args.secrets {
            let secret = super::run::resolve_secret(spec)?;
            let submitted = if secret.hosts.is_empty() {
                json!(secret.value)
            } else {
                json!({"value": secret.value, "hosts": secret.hosts})
            };
            secrets.insert(secret.name, submitted);
        }
        body.insert("secrets".into(), Value::Object(secrets));
    }
    if let Some(bytes) = stdin {
        match String::from_utf8(bytes) {
            Ok(text) => body.insert("stdin".into(), json!(text)),
            Err(err) => {
                use base64::Engine;
                let encoded = base64::engine::general_purpose::STANDARD.encode(err.into_bytes());
                body.insert("stdin_b64".into(), json!(encoded))
            }
        };
    }
    body.insert("wait".into(), json!(false));
    let body = Value::Object(body);
    let size = serde_json::to_vec(&body)?.len();
    if size > MAX_BODY {
        return Err(UsageError(format!(
            "the run's request is {size} bytes (command, environment, secrets and stdin), over the \
             daemon's limit of {MAX_BODY}; pass large input as a file in the project instead of on stdin"
        ))
        .into());
    }
    Ok(body)
}

/// Flags the API has no field for: refused, never dropped, so a run never
/// gets less (or more) than its caller asked for.
fn refuse_unsendable(args: &RunArgs) -> Result<(), UsageError> {
    let fix = "put it in a profile in the daemon's profiles_dir, or run without --daemon";
    let mut refused = Vec::new();
    if !args.allow_read.is_empty() {
        refused.push("--allow-read");
    }
    if !args.allow_write.is_empty() {
        refused.push("--allow-write");
    }
    if !args.tools.is_empty() {
        refused.push("--tool");
    }
    if args.tmp_size.is_some() {
        refused.push("--tmp-size");
    }
    if args.cgroup_parent.is_some() {
        refused.push("--cgroup-parent");
    }
    if !args.resolve.is_empty() {
        refused.push("--resolve");
    }
    if let Some(flag) = refused.first() {
        return Err(UsageError(format!(
            "{flag} cannot be sent to the daemon: its API has no such field ({fix})"
        )));
    }
    if args.non_interactive {
        return Err(UsageError(
            "--non-interactive cannot be sent to the daemon: a daemon run's questions wait for \
             `sandbox approvals answer` until the daemon's ask_deadline, then are denied \
             (pre-approve with --grant, or run without --daemon)"
                .into(),
        ));
    }
    if args.verbose {
        return Err(UsageError(
            "--verbose cannot be sent to the daemon: the setup steps happen in its supervisor \
             (the report has what was enforced: --report FILE or --json)"
                .into(),
        ));
    }
    if args.profile.contains('/') || args.profile.ends_with(".toml") {
        return Err(UsageError(format!(
            "--profile {}: the daemon takes profile names, never paths (install the file in \
             the daemon's profiles_dir and name it, or run without --daemon)",
            args.profile
        )));
    }
    Ok(())
}

/// The variables a local run would take from this environment: the
/// profile's `env.pass` (when the profile is one this client knows too),
/// then the `-e` flags.
fn environment(
    args: &RunArgs,
    lookup: &dyn Fn(&OsStr) -> Option<OsString>,
) -> anyhow::Result<Map<String, Value>> {
    let profile = sandbox::profile::load(&args.profile).ok();
    let mut env = Map::new();
    for name in profile.iter().flat_map(|p| p.env.pass.iter()) {
        if let Some(value) = lookup(OsStr::new(name)) {
            env.insert(name.clone(), json!(utf8(&value, &format!("${name}"))?));
        }
    }
    for entry in &args.env {
        let bytes = entry.as_bytes();
        match bytes.iter().position(|b| *b == b'=') {
            Some(eq) => {
                let name = utf8(OsStr::from_bytes(&bytes[..eq]), "-e")?;
                let value = utf8(OsStr::from_bytes(&bytes[eq + 1..]), &format!("-e {name}"))?;
                env.insert(name, json!(value));
            }
            None => {
                let name = utf8(entry, "-e")?;
                match lookup(entry) {
                    Some(value) => {
                        env.insert(name.clone(), json!(utf8(&value, &format!("-e {name}"))?));
                    }
                    None => {
                        env.remove(&name);
                        if profile
                            .as_ref()
                            .is_some_and(|p| p.env.set.contains_key(&name))
                        {
                            return Err(UsageError(format!(
                                "-e {name}: {name} is not set here, and a daemon run cannot \
                                 remove a variable its profile sets (set it with -e {name}=VALUE)"
                            ))
                            .into());
                        }
                    }
                }
            }
        }
    }
    Ok(env)
}

fn utf8(text: &OsStr, what: &str) -> Result<String, UsageError> {
    text.to_str().map(str::to_string).ok_or_else(|| {
        UsageError(format!(
            "{what}: {} is not UTF-8, which the daemon's JSON API cannot carry (run without --daemon)",
            text.to_string_lossy()
        ))
    })
}

/// Standard input, when it is a pipe or a file: read whole (the API takes
/// it in the request). A terminal, /dev/null or a socket sends none.
fn read_stdin() -> anyhow::Result<Option<Vec<u8>>> {
    use nix::sys::stat::{fstat, SFlag};
    let Ok(stat) = fstat(std::io::stdin()) else {
        return Ok(None);
    };
    let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFREG {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut bytes)
        .context("reading standard input")?;
    if bytes.len() > MAX_BODY {
        return Err(UsageError(format!(
            "standard input is over {} MiB, the most a daemon run takes (pass it as a file in \
             the project, or run without --daemon)",
            MAX_BODY >> 20
        ))
        .into());
    }
    Ok(Some(bytes))
}

/// `--audit FILE` of a daemon run: the broker's lines, fetched when the run
/// is over and appended as the local broker would have.
fn append_audit(client: &Client, id: &str, file: &Path) -> anyhow::Result<()> {
    let path = format!("/v1/runs/{}/audit", segment(id));
    let answer = client.block_on(client.send(Method::GET, &path, None))?;
    client.check(&path, &answer)?;
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .with_context(|| format!("opening the audit file {}", file.display()))?;
    out.write_all(&answer.body)
        .with_context(|| format!("writing the audit file {}", file.display()))?;
    Ok(())
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

fn command_line(value: &Value) -> String {
    value
        .as_array()
        .map(|args| {
            args.iter()
                .map(|arg| {
                    let arg = text(arg);
                    if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || c == '\'') {
                        format!("'{}'", arg.replace('\'', "'\\''"))
                    } else {
                        arg
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| text(value))
}

fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        7200..=172_799 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

fn print_table<const N: usize>(rows: &[[String; N]]) {
    let mut widths = [0; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Wrapper {
        #[command(flatten)]
        run: RunArgs,
    }

    fn parse(argv: &[&str]) -> RunArgs {
        let mut full = vec!["sandbox"];
        full.extend_from_slice(argv);
        Wrapper::try_parse_from(full).expect("parses").run
    }

    fn request(argv: &[&str], env: &[(&str, &str)], stdin: Option<&[u8]>) -> anyhow::Result<Value> {
        let env: Vec<(OsString, OsString)> = env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        let lookup = move |name: &OsStr| {
            env.iter()
                .find(|(k, _)| k.as_os_str() == name)
                .map(|(_, v)| v.clone())
        };
        let dir = std::env::temp_dir();
        run_request(&parse(argv), &dir, &lookup, stdin.map(<[u8]>::to_vec))
    }

    fn usage_message(result: anyhow::Result<Value>) -> String {
        let err = result.expect_err("refused");
        assert!(
            err.downcast_ref::<UsageError>().is_some(),
            "a usage error (exit 2): {err:#}"
        );
        format!("{err:#}")
    }

    #[test]
    fn flags_map_onto_the_request() {
        let body = request(
            &[
                "--daemon",
                "--profile",
                "standard",
                "--memory",
                "512MiB",
                "--pids",
                "64",
                "--cpus",
                "1.5",
                "--timeout",
                "90s",
                "--max-output",
                "1536KiB",
                "--net",
                "loopback",
                "--grant",
                "fs.write",
                "-e",
                "A=1=2",
                "-e",
                "FROM_HERE",
                "-e",
                "NOT_SET",
                "--",
                "make",
                "test",
            ],
            &[("FROM_HERE", "x y")],
            Some(b"input\n"),
        )
        .unwrap();
        let project = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        assert_eq!(body["command"], json!(["make", "test"]));
        assert_eq!(body["profile"], "standard");
        assert_eq!(body["project"], project.to_str().unwrap());
        assert!(body.get("cwd").is_none(), "the project is the cwd");
        assert_eq!(body["env"]["A"], "1=2");
        assert_eq!(body["env"]["FROM_HERE"], "x y");
        assert!(body["env"].get("NOT_SET").is_none());
        assert_eq!(
            body["limits"],
            json!({"memory": "512MiB", "pids": 64, "cpus": 1.5, "timeout": "90s", "output": "1536KiB"})
        );
        assert_eq!(body["network"], "loopback");
        assert_eq!(body["grants"], json!(["fs.write"]));
        assert_eq!(body["stdin"], "input\n");
        assert_eq!(body["wait"], false);
    }

    #[test]
    fn binary_stdin_goes_as_base64_and_strict_sends_no_limits() {
        let body = request(&["--daemon", "--", "cat"], &[], Some(&[0xff, 0, 1])).unwrap();
        assert_eq!(body["stdin_b64"], "/wAB");
        assert!(body.get("stdin").is_none());
        assert_eq!(body["profile"], "strict");
        assert!(body.get("limits").is_none());
        assert!(body.get("grants").is_none());
    }

    #[test]
    fn flags_the_api_cannot_carry_are_refused_by_name() {
        for (flags, named) in [
            (&["--allow-read", "/etc"][..], "--allow-read"),
            (&["--allow-write", "/tmp"][..], "--allow-write"),
            (&["--tool", "rust"][..], "--tool"),
            (&["--tmp-size", "64MiB"][..], "--tmp-size"),
            (
                &["--cgroup-parent", "/sys/fs/cgroup"][..],
                "--cgroup-parent",
            ),
            (&["--non-interactive"][..], "--non-interactive"),
            (&["--verbose"][..], "--verbose"),
            (&["--profile", "./mine.toml"][..], "--profile ./mine.toml"),
            (&["--grant", "no.such.action"][..], "--grant"),
            (
                &["--secret", "T=env:SANDBOX_TEST_UNSET_VAR"][..],
                "--secret T",
            ),
        ] {
            let mut argv = vec!["--daemon"];
            argv.extend_from_slice(flags);
            argv.extend_from_slice(&["--", "true"]);
            let message = usage_message(request(&argv, &[], None));
            assert!(message.contains(named), "{flags:?}: {message}");
        }
    }

    #[test]
    fn secrets_are_resolved_here() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), "from-file\n").unwrap();
        let spec = format!("F=file:{}", file.path().display());
        let body = request(&["--daemon", "--secret", &spec, "--", "true"], &[], None).unwrap();
        assert_eq!(body["secrets"], json!({"F": "from-file"}));
        let bound = format!("{spec}@api.test");
        let body = request(&["--daemon", "--secret", &bound, "--", "true"], &[], None).unwrap();
        assert_eq!(
            body["secrets"],
            json!({"F": {"value": "from-file", "hosts": ["api.test"]}})
        );
    }

    #[test]
    fn non_utf8_and_oversized_requests_are_refused() {
        use std::os::unix::ffi::OsStringExt;
        let mut args = parse(&["--daemon", "--", "echo"]);
        args.command.push(OsString::from_vec(vec![0xff]));
        let message = usage_message(run_request(&args, &std::env::temp_dir(), &|_| None, None));
        assert!(message.contains("not UTF-8"), "{message}");
        let big = vec![b'x'; MAX_BODY];
        let message = usage_message(request(&["--daemon", "--", "cat"], &[], Some(&big)));
        assert!(message.contains("over the daemon's limit"), "{message}");
    }

    #[test]
    fn the_daemon_flag_takes_an_optional_socket() {
        assert_eq!(
            parse(&["--daemon", "--", "true"]).daemon.as_deref(),
            Some("")
        );
        assert_eq!(
            parse(&["--daemon=/tmp/d.sock", "--", "true"])
                .daemon
                .as_deref(),
            Some("/tmp/d.sock")
        );
        assert_eq!(parse(&["--", "true"]).daemon, None);
        // Without `=` the next word is the command, not a socket.
        let args = parse(&["--daemon", "true"]);
        assert_eq!(args.daemon.as_deref(), Some(""));
        assert_eq!(args.command, [OsString::from("true")]);
    }

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

    #[test]
    fn limit_messages_read_the_report() {
        let report = json!({
            "exit": {"signal": 9},
            "limits_hit": ["memory", "timeout", "output"],
            "enforced": {"timeout_s": 90.0, "cgroup": {"memory": 536870912}},
            "resources": {"oom_kills": 1},
        });
        let messages = limit_messages(&report);
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("killed: memory limit 512MiB exceeded"));
        assert!(messages[1].starts_with("killed: timeout 90s exceeded"));
    }

    #[test]
    fn tables_and_ages() {
        assert_eq!(age(5_000), "5s");
        assert_eq!(age(600_000), "10m");
        assert_eq!(age(3 * 86_400_000), "3d");
        assert_eq!(
            command_line(&json!(["sh", "-c", "exit 7"])),
            "sh -c 'exit 7'"
        );
    }
}
