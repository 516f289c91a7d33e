//! `sandbox serve --mcp`: skills as Model Context Protocol tools for agent
//! hosts (and, with `--shell`, a sandboxed shell tool), over stdio.
//!
//! The engine is `serve --stdio`'s server ([`sandbox::skill::serve`]), driven
//! in this process ([`engine`]): lazy activation, crash back-off,
//! disabling, timeouts and hot reload are exactly serve's. The front (this
//! module and [`server`]) runs the MCP SDK (`rmcp`) on a single-threaded
//! Tokio runtime and translates: `tools/list` and `tools/call` into
//! `skill.list` and `skill.invoke`, a client's cancellation into
//! `skill.cancel`, the engine's `skill.ask` into elicitation, its
//! `skill.listChanged` into list-changed notifications. stdout carries only
//! protocol messages (each skill host's stdout is /dev/null); every log
//! line goes to stderr.
//!
//! Skills are discovered (manifests read, schemas compiled) before the
//! first message is read: the handshake is answered about 2 ms after start
//! with the example skills; hosts start only on a skill's first call.
#![deny(missing_docs)]

pub mod changes;
pub mod engine;
pub mod server;
pub mod shell;
pub mod tools;
pub mod transport;

use sandbox::skill::serve::ServeOptions;

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
    /// The shell tool for runs under `profile`, loaded from `profile_spec`
    /// (each run loads it again), in `project`.
    pub fn new(
        profile: &sandbox::Policy,
        profile_spec: &str,
        project: &std::path::Path,
    ) -> Result<ShellTool, shell::ShellError> {
        let config = shell::ShellConfig::for_loaded(
            "/proc/self/exe",
            profile_spec.to_string(),
            profile.clone(),
            project,
        )?;
        let network_is_open =
            config.policy.network.mode == sandbox::profile::policy::NetworkMode::Host;
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
    /// The async runtime.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
    /// The MCP session could not start (the client closed stdin, or sent
    /// no valid first message).
    #[error("the MCP session did not start: {0}")]
    Session(String),
}

/// Serve `options`' skills (and the shell tool when given) as MCP tools on
/// stdin and stdout until the client closes stdin.
pub fn serve(mut options: ServeOptions, shell: Option<ShellTool>) -> Result<(), McpError> {
    options.ask_client = true;
    let question_timeout = options.question_timeout;
    let summary = tools::SandboxSummary::of(&options.profile, &options.project);
    let project = options.project.clone();
    // Single-threaded, and its transports start no thread: the engine
    // forks a host per skill from this thread (see engine's module docs).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(McpError::Runtime)?;
    let result = runtime.block_on(async move {
        let engine = engine::Engine::start(options);
        let server =
            server::McpServer::new(engine.clone(), summary, shell, &project, question_timeout);
        server.announce_list_changes();
        let session = match transport::stdio() {
            transport::Stdio::Pipes(reader, writer) => {
                rmcp::ServiceExt::serve(server, (reader, writer)).await
            }
            transport::Stdio::Sockets(reader, writer) => {
                rmcp::ServiceExt::serve(server, (reader, writer)).await
            }
            transport::Stdio::Blocking(reader, writer) => {
                rmcp::ServiceExt::serve(server, (reader, writer)).await
            }
        };
        let result = match session {
            Ok(running) => {
                // Hosts stop servers with SIGTERM (or SIGINT, SIGHUP): end
                // as when stdin closes, so skills and shell commands are
                // killed and their files removed by this process.
                tokio::select! {
                    _ = running.waiting() => {}
                    () = stop_signal() => {}
                }
                Ok(())
            }
            Err(err) => Err(McpError::Session(err.to_string())),
        };
        engine.shutdown();
        result
    });
    // A terminal's stdin is read by a blocking thread that a signal leaves
    // in read(2): the runtime does not wait for it.
    runtime.shutdown_background();
    result
}

/// The first of SIGTERM, SIGINT and SIGHUP (never, if they cannot be
/// watched: the default action then ends the process, and the skills'
/// parent-death signals end them).
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut interrupt), Ok(mut hangup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = interrupt.recv() => {}
        _ = hangup.recv() => {}
    }
}
