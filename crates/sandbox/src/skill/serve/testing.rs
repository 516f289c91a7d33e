//! What the serve tests share: a server over skills in a temporary root
//! whose messages to the client are kept, and hosts that are sockets, not
//! processes (these tests never start one).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use serde_json::Value;

use super::hosts::HostProc;
use super::{manifest, Call, ServeOptions, Server};
use crate::broker::protocol::Id;

/// The client's side of the output: every line the server wrote.
#[derive(Clone, Default)]
pub(super) struct Output(Arc<Mutex<Vec<u8>>>);

impl Write for Output {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Output {
    /// The messages written since the last call, parsed.
    pub(super) fn take(&self) -> Vec<Value> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

/// Skill `name` in `root`: a shell skill with `extra` manifest lines.
pub(super) fn write_skill(root: &Path, name: &str, extra: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!(
            "---\nname: {name}\ndescription: test skill {name}\nruntime: sh\nmain: main.sh\n\
             {extra}---\nTest.\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("main.sh"), "true\n").unwrap();
}

/// A server over the skills in `root`, putting questions to the client
/// when `ask_client`.
pub(super) fn server(root: &Path, ask_client: bool) -> (Server, Output) {
    let options = ServeOptions {
        roots: manifest::Roots {
            user: vec![root.to_path_buf()],
            project: None,
        },
        profile: crate::profile::load("permissive").unwrap(),
        profile_spec: "permissive".into(),
        project: root.to_path_buf(),
        grants: Vec::new(),
        audit: None,
        // Never run: a test that started a host would fail on it.
        host_program: "/nonexistent/sandbox".into(),
        ask_client,
        question_timeout: Duration::from_secs(60),
        prepare_ahead: false,
    };
    let output = Output::default();
    let server = Server::writing_to(options, Box::new(output.clone()));
    (server, output)
}

/// A host that is only its control socket; the other end is returned. Its
/// pid is beyond any pid_max (2^22), so that a kill reaches nobody.
pub(super) fn fake_host(serial: u64) -> (HostProc, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    theirs.set_nonblocking(true).unwrap();
    let mut host = HostProc::new(Pid::from_raw(i32::MAX), ours);
    host.serial = serial;
    (host, theirs)
}

/// The lines the host got on its control socket so far.
pub(super) fn host_got(peer: &mut UnixStream) -> Vec<Value> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match peer.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("reading the host's socket: {e}"),
        }
    }
    String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A JSON-RPC request line.
pub(super) fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

/// Skill `name` of `server` running call `call` on a fake host of serial
/// 1; the host's end of its socket is returned.
pub(super) fn running(server: &mut Server, name: &str, call: u64) -> UnixStream {
    let (host, peer) = fake_host(1);
    let slot = server.slots.get_mut(name).unwrap();
    slot.host = Some(host);
    slot.inflight = Some(Call {
        id: Id::Number(call.into()),
        params: serde_json::json!({}),
    });
    peer
}
