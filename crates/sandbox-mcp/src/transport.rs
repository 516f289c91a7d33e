//! stdin and stdout as the MCP transport, without a thread.
//!
//! Hosts start servers with pipes (most) or a socketpair (libuv's
//! `stdio: 'pipe'`, so Node hosts). rmcp reads pipes on the I/O reactor but
//! sockets through Tokio's blocking stdin, whose reader thread would make
//! the engine execute every skill host instead of forking it (about 2 ms of
//! each activation). Sockets are read on the reactor here; anything else
//! (a terminal, a file) takes the blocking handles.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

/// The two ends, by kind.
pub enum Stdio {
    /// Pipes, through rmcp's non-blocking pipe transport.
    Pipes(rmcp::transport::StdioReader, rmcp::transport::StdioWriter),
    /// Sockets, on the reactor.
    Sockets(tokio::net::UnixStream, tokio::net::UnixStream),
    /// Anything else, through Tokio's blocking handles.
    Blocking(tokio::io::Stdin, tokio::io::Stdout),
}

/// stdin and stdout, read and written the cheapest way their kind allows.
pub fn stdio() -> Stdio {
    let input = std::io::stdin().as_fd().try_clone_to_owned();
    let output = std::io::stdout().as_fd().try_clone_to_owned();
    if let (Ok(input), Ok(output)) = (input, output) {
        let kind = |fd: &OwnedFd| {
            std::fs::File::from(fd.try_clone().ok()?)
                .metadata()
                .ok()
                .map(|m| m.file_type())
        };
        match (kind(&input), kind(&output)) {
            (Some(i), Some(o)) if i.is_fifo() && o.is_fifo() => {
                let (reader, writer) = rmcp::transport::stdio_pipes();
                return Stdio::Pipes(reader, writer);
            }
            (Some(i), Some(o)) if i.is_socket() && o.is_socket() => {
                if let (Ok(reader), Ok(writer)) = (socket(input), socket(output)) {
                    return Stdio::Sockets(reader, writer);
                }
            }
            _ => {}
        }
    }
    let (reader, writer) = rmcp::transport::stdio();
    Stdio::Blocking(reader, writer)
}

fn socket(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(stream)
}
