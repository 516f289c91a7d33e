//! `sandbox ipc`: one broker request from a shell script inside a sandbox.
use std::io::Write;
use std::os::unix::net::UnixStream;

use anyhow::{bail, Context};
use clap::Args;
use sandbox::broker::transport::ANSWER_LIMIT;
use sandbox::jsonl::{Frame, Framer, Lines};

/// Longest invocation read from the channel: the host's control line
/// (1 MiB of params) wrapped in its `skill.invoke` request.
const INVOCATION_LIMIT: usize = 2 << 20;

/// Arguments of `sandbox ipc`.
#[derive(Debug, Args)]
pub struct IpcArgs {
    /// The method, e.g. fs.read, fs.write, permission.query.
    #[arg(required_unless_present_any = ["invocation", "result"])]
    pub method: Option<String>,
    /// In a skill: wait for the next invocation and print its params (JSON);
    /// exit status 1 when the channel closes (no more invocations).
    #[arg(long, conflicts_with_all = ["method", "result"])]
    pub invocation: bool,
    /// With --invocation: print only this parameter (a string as it is).
    #[arg(long, value_name = "NAME", requires = "invocation")]
    pub param: Option<String>,
    /// In a skill: answer the pending invocation with this JSON value.
    #[arg(long, value_name = "JSON", conflicts_with = "method")]
    pub result: Option<String>,
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
    let socket = sandbox::os::adopt_inherited_socket(fd)
        .with_context(|| format!("SANDBOX_IPC_FD={fd} is not an open socket"))?;
    if args.invocation {
        return next_invocation(&socket, args.param.as_deref());
    }
    if let Some(result) = &args.result {
        let value: serde_json::Value =
            serde_json::from_str(result).context("--result is not valid JSON")?;
        // A plain (non-JSON-RPC) message answers the pending invocation.
        let mut stream = UnixStream::from(socket);
        stream
            .write_all(format!("{value}\n").as_bytes())
            .context("sending the result")?;
        return Ok(0);
    }
    let method = args.method.clone().unwrap_or_default();
    let params: serde_json::Value = match &args.params {
        Some(text) => serde_json::from_str(text).context("the parameters are not valid JSON")?,
        None => serde_json::Value::Null,
    };
    let request =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let mut stream = UnixStream::from(socket);
    stream
        .write_all(format!("{request}\n").as_bytes())
        .context("sending the request")?;
    let line = match Lines::new(&stream, ANSWER_LIMIT)
        .next_frame()
        .context("reading the answer")?
    {
        Some(Frame::Line(line)) => line,
        Some(Frame::TooLarge { bytes }) => {
            bail!("the broker's answer is {bytes} bytes, more than the {ANSWER_LIMIT} it sends")
        }
        None => bail!("the broker closed the channel"),
    };
    let answer: serde_json::Value =
        serde_json::from_slice(&line).context("the broker's answer is not JSON")?;
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

/// Read exactly one line from the channel, leaving what follows it for the
/// next reader (a later `sandbox ipc` in the same skill): peek, then take
/// up to the newline.
fn read_line(socket: &std::os::fd::OwnedFd) -> anyhow::Result<Option<Vec<u8>>> {
    use nix::sys::socket::{recv, MsgFlags};
    use std::os::fd::AsRawFd;
    let mut framer = Framer::new(INVOCATION_LIMIT);
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = recv(socket.as_raw_fd(), &mut buf, MsgFlags::MSG_PEEK)
            .context("reading the channel")?;
        if n == 0 {
            return Ok(None);
        }
        // Only up to the newline: what follows is the next reader's.
        let take = buf[..n]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(n, |i| i + 1);
        let got = recv(socket.as_raw_fd(), &mut buf[..take], MsgFlags::empty())
            .context("reading the channel")?;
        framer.push(&buf[..got], &mut frames);
        match frames.pop() {
            Some(Frame::Line(line)) => return Ok(Some(line)),
            Some(Frame::TooLarge { bytes }) => bail!(
                "a message on the channel is {bytes} bytes, over the {INVOCATION_LIMIT} an invocation takes"
            ),
            None => {}
        }
    }
}

fn next_invocation(socket: &std::os::fd::OwnedFd, param: Option<&str>) -> anyhow::Result<i32> {
    while let Some(line) = read_line(socket)? {
        let Ok(message) = serde_json::from_slice::<serde_json::Value>(&line) else {
            continue;
        };
        if message["method"] == "skill.invoke" {
            let params = message.get("params").unwrap_or(&serde_json::Value::Null);
            match param.map(|name| &params[name]) {
                Some(serde_json::Value::String(text)) => println!("{text}"),
                Some(value) => println!("{value}"),
                None => println!("{params}"),
            }
            return Ok(0);
        }
    }
    Ok(1)
}
