//! `sandbox serve --mcp`: skills as Model Context Protocol tools for agent
//! hosts (and, with `--shell`, a sandboxed shell tool), over stdio.
//!
//! Two processes. The engine is `serve --stdio`'s loop ([`crate::skill::serve`]),
//! forked before anything else starts so that it stays single-threaded
//! and can fork a host per skill: lazy activation, crash back-off,
//! disabling, timeouts and hot reload are exactly serve's. The front (this
//! module) runs the MCP SDK (`rmcp`) on a Tokio runtime and translates:
//! `tools/list` and `tools/call` into `skill.list` and `skill.invoke`, a
//! client's cancellation into `skill.cancel`, the engine's `skill.ask`
//! into elicitation, its `skill.listChanged` into list-changed
//! notifications. stdout carries only protocol messages; every log line
//! goes to stderr.
//!
//! The handshake never waits for skills: the engine discovers them while
//! the front answers `initialize` or `server/discover`.

pub mod engine;
pub mod server;
pub mod shell;
pub mod tools;

use std::os::fd::OwnedFd;

use nix::sys::signal::Signal;

use crate::skill::serve::{self, ServeOptions};

/// Name of the shell tool.
pub const SHELL_TOOL: &str = shell::TOOL_NAME;

/// The shell tool as offered: how it runs and how it is listed.
#[derive(Debug)]
pub struct ShellTool {
    /// How commands run.
    pub config: shell::ShellConfig,
    /// Its `tools/list` entry.
    pub tool: serde_json::Value,
}

impl ShellTool {
    /// The shell tool for runs under the profile `profile_spec` (each run
    /// loads it again) in `project`.
    pub fn new(profile_spec: &str, project: &std::path::Path) -> Result<ShellTool, shell::ShellError> {
        let config = shell::ShellConfig::new("/proc/self/exe", profile_spec, project)?;
        let network_is_open =
            config.policy.network.mode == crate::profile::policy::NetworkMode::Host;
        let tool = serde_json::json!({
            "name": SHELL_TOOL,
            "title": "Sandboxed shell",
            "description": shell::description(&config),
            "inputSchema": shell::input_schema(&config),
            "outputSchema": shell::output_schema(),
            "annotations": {
                "title": "Sandboxed shell",
                "readOnlyHint": false,
                "destructiveHint": true,
                "openWorldHint": network_is_open,
            },
        });
        Ok(ShellTool { config, tool })
    }
}

/// Why `serve --mcp` could not run.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The socket between front and engine.
    #[error("creating the engine's socket: {0}")]
    Socket(std::io::Error),
    /// The engine could not be forked.
    #[error("starting the skill engine: {0}")]
    Fork(#[from] crate::sys::fork::ForkError),
    /// The async runtime.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    /// Talking to the engine.
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    /// The MCP session could not start (the client closed stdin, or sent
    /// no valid first message).
    #[error("the MCP session did not start: {0}")]
    Session(String),
}

/// Serve `options`' skills (and the shell tool when given) as MCP tools on
/// stdin and stdout until the client closes stdin.
pub fn serve(options: ServeOptions, shell: Option<ShellTool>) -> Result<(), McpError> {
    let summary = tools::SandboxSummary::of(&options.profile, &options.project);
    let (front, engine_end) = std::os::unix::net::UnixStream::pair().map_err(McpError::Socket)?;
    start_engine(options, OwnedFd::from(engine_end))?;
    // Threads exist only from here on: the engine is already forked.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(McpError::Runtime)?;
    runtime.block_on(async move {
        let engine = engine::Engine::start(OwnedFd::from(front))?;
        let server = server::McpServer::new(engine, summary, shell);
        server.announce_list_changes();
        let running = rmcp::ServiceExt::serve(server, rmcp::transport::stdio_pipes())
            .await
            .map_err(|err| McpError::Session(err.to_string()))?;
        let _ = running.waiting().await;
        Ok(())
    })
}

/// Fork the engine: serve's loop on `socket`, with nothing else of this
/// process but stderr, dying with it.
fn start_engine(mut options: ServeOptions, socket: OwnedFd) -> Result<(), McpError> {
    options.ask_client = true;
    let parent = nix::unistd::getpid();
    crate::sys::fork::fork_keeping_only(vec![socket], move |kept| {
        if nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).is_err()
            || nix::unistd::getppid() != parent
        {
            return 125;
        }
        // stdout is the protocol's: the engine and its hosts never write it.
        let Ok(null) = std::fs::File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
        else {
            return 125;
        };
        if nix::unistd::dup2_stdin(&null).is_err() || nix::unistd::dup2_stdout(&null).is_err() {
            return 125;
        }
        drop(null);
        let Some(socket) = kept.into_iter().next() else {
            return 125;
        };
        let Ok(output) = socket.try_clone() else {
            return 125;
        };
        match serve::Server::new(options, output).run(socket) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("sandbox serve --mcp: the skill engine stopped: {err}");
                1
            }
        }
    })?;
    Ok(())
}
