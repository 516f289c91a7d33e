//! `sandbox ipc`: one broker request from a shell script inside a sandbox.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use anyhow::{bail, Context};
use clap::Args;

/// Arguments of `sandbox ipc`.
#[derive(Debug, Args)]
pub struct IpcArgs {
    /// The method, e.g. fs.read, fs.write, permission.query.
    pub method: String,
    /// Parameters as a JSON object, e.g. '{"path": "README.md"}'.
    pub params: Option<String>,
    /// Print a result's "content" (decoded) instead of the JSON result.
    #[arg(long)]
    pub raw: bool,
}

pub fn run(args: IpcArgs) -> anyhow::Result<i32> {
    use base64::Engine;
    let fd: i32 = std::env::var("SANDBOX_IPC_FD")
        .context("SANDBOX_IPC_FD is not set: `sandbox ipc` works inside a sandbox run")?
        .parse()
        .context("SANDBOX_IPC_FD is not a number")?;
    let socket = sandbox::sys::fd::adopt_inherited_socket(fd)
        .with_context(|| format!("SANDBOX_IPC_FD={fd} is not an open socket"))?;
    let params: serde_json::Value = match &args.params {
        Some(text) => serde_json::from_str(text).context("the parameters are not valid JSON")?,
        None => serde_json::Value::Null,
    };
    let request =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": args.method, "params": params});
    let mut stream = UnixStream::from(socket);
    stream
        .write_all(format!("{request}\n").as_bytes())
        .context("sending the request")?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .context("reading the answer")?;
    if line.is_empty() {
        bail!("the broker closed the channel");
    }
    let answer: serde_json::Value =
        serde_json::from_str(&line).context("the broker's answer is not JSON")?;
    if let Some(error) = answer.get("error") {
        eprintln!(
            "sandbox ipc: {} (code {})",
            error["message"].as_str().unwrap_or("error"),
            error["code"].as_i64().unwrap_or(0)
        );
        return Ok(1);
    }
    let result = &answer["result"];
    let mut out = std::io::stdout().lock();
    match (args.raw, result.get("content").and_then(|c| c.as_str())) {
        (true, Some(content)) if result["encoding"] == "base64" => {
            out.write_all(&base64::engine::general_purpose::STANDARD.decode(content)?)?
        }
        (true, Some(content)) => out.write_all(content.as_bytes())?,
        _ => writeln!(out, "{result}")?,
    }
    Ok(0)
}
