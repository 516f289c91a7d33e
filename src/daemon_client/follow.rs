//! A run's event stream (`logs`, `run --daemon`), followed across
//! dropped connections and daemon restarts, written out as the run wrote
//! it; SIGINT and SIGTERM cancel the run.
use std::io::Write;

use hyper::Method;
use serde_json::{json, Value};
use tokio::signal::unix::Signal;

use crate::client::{segment, Client, ClientError, EventFollower};
use sandbox::launch::protocol::LogEvent;

/// How long a follower keeps trying to reconnect to a daemon that went
/// away (a restart takes well under this).
const RECONNECT_FOR: std::time::Duration = std::time::Duration::from_secs(15);

/// Where the records of an event stream go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Sink {
    /// Output bytes to this process's stdout and stderr, as the run wrote them.
    Output,
    /// Every record as the daemon sent it, one per line on stdout.
    Raw,
}

/// One run's event stream, followed across dropped connections.
pub(super) struct Follow<'a> {
    pub(super) client: &'a Client,
    pub(super) run: &'a str,
    pub(super) follower: EventFollower,
    pub(super) sink: Sink,
    /// SIGINT and SIGTERM, caught: they cancel the run (which keeps
    /// streaming to its end).
    pub(super) signals: Option<(Signal, Signal)>,
    pub(super) quiet: bool,
    /// The run's `end` record, once read: the run object's state, status,
    /// reason and report, so the end is known even if the daemon stops
    /// before it could be asked.
    pub(super) end: Option<Value>,
}

impl Follow<'_> {
    /// Stream the records; with `follow`, until the run is over (then its
    /// run object, when one was read to check that).
    pub(super) async fn run(&mut self, follow: bool) -> Result<Option<Value>, ClientError> {
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

    fn show(&mut self, line: crate::client::EventLine, out: &mut Output) {
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
