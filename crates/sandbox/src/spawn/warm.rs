//! A warm sandbox's payload: every layer in force, waiting for its command.
//!
//! A warm run's P2 does everything a cold one does up to and including
//! seccomp (session, descriptors, limits, capabilities, Landlock, the
//! filter), then blocks on its commit socket. The supervisor sends one
//! [`Commit`]: argv, environment, the exec candidates and the working
//! directory, resolved on its side exactly as a cold run resolves them,
//! with the stdio descriptors beside it (`SCM_RIGHTS`). P2 moves them onto
//! 0, 1 and 2, checks the working directory lies in the project, changes
//! to it, and goes on to its measured view and execve like a cold run.
//! Nothing here runs before the layers: the command is only ever known to
//! a process that is already confined (`recvmsg` and `read` are in every
//! filter's allowlist).
//!
//! The commit socket is a `SOCK_STREAM` pair: a message of any size fits
//! (a `SOCK_SEQPACKET` message is bounded by the socket's send buffer),
//! framed as a header and a length-prefixed body.
//!
//! The child side runs between clone and exec: no unwrap, no panic.

use std::ffi::{CString, OsStr, OsString};
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, MsgFlags};

use super::failed::{Failed, StepExt};
use super::SpawnError;
use super::Step;
use crate::profile::policy::Policy;

const MAGIC: [u8; 4] = *b"WARM";
/// Magic, body length (u32), stdio mask (which of 0, 1, 2 travel).
const HEADER: usize = 4 + 4 + 1;
/// Largest body: the daemon's own request bound with room to spare.
pub const MAX_COMMIT: usize = 4 << 20;

/// The command a warm sandbox executes, resolved by the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    /// argv.
    pub argv: Vec<CString>,
    /// envp (`NAME=VALUE`).
    pub envp: Vec<CString>,
    /// The paths execve tries, in order.
    pub exec_candidates: Vec<CString>,
    /// The working directory (absolute, inside the project).
    pub cwd: CString,
}

/// What P2 executes: a cold run's command from its plan, a warm run's from
/// its commit.
pub struct PayloadCommand<'a> {
    /// argv.
    pub argv: &'a [CString],
    /// envp.
    pub envp: &'a [CString],
    /// The paths execve tries.
    pub exec_candidates: &'a [CString],
    /// What an exec failure names.
    pub program: &'a [u8],
}

impl super::prepare::ChildPlan {
    /// A cold run's command, from its plan.
    pub fn command(&self) -> PayloadCommand<'_> {
        PayloadCommand {
            argv: &self.argv,
            envp: &self.envp,
            exec_candidates: &self.exec_candidates,
            program: self.program.as_bytes(),
        }
    }
}

impl Commit {
    /// The command this commit executes.
    pub fn command(&self) -> PayloadCommand<'_> {
        PayloadCommand {
            argv: &self.argv,
            envp: &self.envp,
            exec_candidates: &self.exec_candidates,
            program: self.argv.first().map_or(b"", |p| p.to_bytes()),
        }
    }

    /// Resolve `argv`, `env` and `cwd` for a sandbox of `policy` whose
    /// (canonical) project is `project`, as a cold run's plan does: the
    /// profile's `[env]` first, the caller's variables over it, the broker
    /// channel's variables, the sandbox's own bin directory appended to
    /// PATH; exec candidates from the sandbox's PATH, never the host's; the
    /// working directory canonical and inside the project.
    pub fn resolve(
        policy: &Policy,
        argv: &[String],
        env: &[(String, String)],
        cwd: Option<&Path>,
        project: &Path,
    ) -> Result<Commit, SpawnError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(SpawnError::Invalid("the command is empty".into()));
        };
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        let env: Vec<(OsString, Option<OsString>)> = env
            .iter()
            .map(|(name, value)| (name.into(), Some(value.into())))
            .collect();
        let plan =
            super::prepare::plan_command(policy, OsStr::new(program), &args, &env, cwd, project)?;
        Ok(Commit {
            argv: plan.argv,
            envp: plan.envp,
            exec_candidates: plan.exec_candidates,
            cwd: c_string(
                "working directory",
                plan.cwd.as_os_str().as_bytes().to_vec(),
            )?,
        })
    }

    /// The command line as the report shows it.
    pub fn command_line(&self) -> Vec<String> {
        self.argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// The program as an exec failure names it.
    pub fn program(&self) -> String {
        self.argv
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for list in [
            &self.argv[..],
            &self.envp[..],
            &self.exec_candidates[..],
            std::slice::from_ref(&self.cwd),
        ] {
            body.extend_from_slice(&(list.len() as u32).to_le_bytes());
            for item in list {
                body.extend_from_slice(&(item.as_bytes().len() as u32).to_le_bytes());
                body.extend_from_slice(item.as_bytes());
            }
        }
        body
    }

    /// The inverse of `encode`; `None` for anything malformed. Runs in the
    /// child: no panic on any input.
    fn decode(body: &[u8]) -> Option<Commit> {
        let mut rest = body;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = (rest.get(..n)?, rest.get(n..)?);
            rest = tail;
            Some(head)
        };
        let mut lists: [Vec<CString>; 4] = Default::default();
        for list in lists.iter_mut() {
            let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
            for _ in 0..count {
                let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
                list.push(CString::new(take(len)?).ok()?);
            }
        }
        let [argv, envp, exec_candidates, mut cwd] = lists;
        let cwd = cwd.pop().filter(|_| cwd.is_empty())?;
        (!argv.is_empty()).then_some(Commit {
            argv,
            envp,
            exec_candidates,
            cwd,
        })
    }

    /// Supervisor side: hand the commit and the stdio descriptors that
    /// replace the waiting payload's (`stdio[i]` goes onto fd `i`).
    pub fn send(
        &self,
        sock: BorrowedFd<'_>,
        stdio: [Option<BorrowedFd<'_>>; 3],
    ) -> Result<(), SpawnError> {
        let body = self.encode();
        if body.len() > MAX_COMMIT {
            return Err(SpawnError::Invalid(format!(
                "the command and its environment take {} bytes (at most {MAX_COMMIT})",
                body.len()
            )));
        }
        let mut mask = 0u8;
        let mut raw: Vec<RawFd> = Vec::new();
        for (target, fd) in stdio.iter().enumerate() {
            if let Some(fd) = fd {
                mask |= 1 << target;
                raw.push(fd.as_raw_fd());
            }
        }
        let mut message = Vec::with_capacity(HEADER + body.len());
        message.extend_from_slice(&MAGIC);
        message.extend_from_slice(&(body.len() as u32).to_le_bytes());
        message.push(mask);
        message.extend_from_slice(&body);
        let sys = |op: &'static str| {
            move |source| SpawnError::Sys {
                op: op.into(),
                source,
            }
        };
        let rights = [ControlMessage::ScmRights(&raw)];
        let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &rights };
        // The descriptors ride on the first byte; the rest may take more
        // writes on a stream socket.
        let mut sent = loop {
            match sendmsg::<()>(
                sock.as_raw_fd(),
                &[IoSlice::new(&message)],
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Err(Errno::EINTR) => continue,
                other => break other.map_err(sys("sendmsg(commit)"))?,
            }
        };
        while sent < message.len() {
            match nix::sys::socket::send(sock.as_raw_fd(), &message[sent..], MsgFlags::MSG_NOSIGNAL)
            {
                Ok(n) => sent += n,
                Err(Errno::EINTR) => {}
                Err(source) => return Err(sys("send(commit)")(source)),
            }
        }
        Ok(())
    }
}

fn c_string(what: &'static str, bytes: Vec<u8>) -> Result<CString, SpawnError> {
    CString::new(bytes).map_err(|_| SpawnError::Invalid(format!("{what} contains a NUL byte")))
}

fn malformed(detail: &'static [u8]) -> Failed<'static> {
    Failed {
        step: Step::WaitForCommand,
        errno: Errno::EPROTO,
        detail,
    }
}

/// P2 of a warm run: wait for the commit under every layer, put its stdio
/// in place and change to its working directory. The commit lives until
/// execve replaces the process (or it exits), so it is leaked rather than
/// freed: nothing of P2's memory outlives that.
pub fn wait_for_commit(
    sock: BorrowedFd<'_>,
    project: &Path,
) -> Result<&'static Commit, Failed<'static>> {
    let mut header = [0u8; HEADER];
    let mut cmsg_space = nix::cmsg_space!([RawFd; 3]);
    let mut received: Vec<std::os::fd::OwnedFd> = Vec::new();
    let got = {
        let mut iov = [IoSliceMut::new(&mut header)];
        let msg = loop {
            match recvmsg::<()>(
                sock.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg_space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Err(Errno::EINTR) => continue,
                other => break other.step(Step::WaitForCommand, b"recvmsg")?,
            }
        };
        let bytes = msg.bytes;
        crate::sys::fd::for_each_received_fd(msg, |fd| received.push(fd));
        bytes
    };
    if got == 0 {
        // The supervisor let the warm sandbox go without a command.
        return Err(Failed {
            step: Step::WaitForCommand,
            errno: Errno::ECONNRESET,
            detail: b"",
        });
    }
    read_exact(sock, header.get_mut(got..).unwrap_or_default())?;
    let (magic, rest) = header.split_at(4);
    let len = rest
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(malformed(b"header"))? as usize;
    let mask = rest.get(4).copied().unwrap_or(0);
    if magic != MAGIC || len > MAX_COMMIT || mask > 0b111 {
        return Err(malformed(b"header"));
    }
    let mut body = vec![0u8; len];
    read_exact(sock, &mut body)?;
    let commit = Commit::decode(&body).ok_or(malformed(b"body"))?;
    if received.len() != mask.count_ones() as usize {
        return Err(malformed(b"descriptors"));
    }
    let mut fds = received.iter();
    for target in 0..3 {
        if mask & (1 << target) != 0 {
            let fd = fds.next().ok_or(malformed(b"descriptors"))?;
            crate::sys::fd::redirect_standard_stream(std::os::fd::AsFd::as_fd(fd), target)
                .step(Step::CloseDescriptors, b"stdio")?;
        }
    }
    drop(received);
    let commit: &'static Commit = Box::leak(Box::new(commit));
    // The supervisor checked it on the host; checked again here against
    // the sandbox's own view, where `..` and links resolve inside.
    let cwd = Path::new(OsStr::from_bytes(commit.cwd.to_bytes()));
    if !cwd.is_absolute() || !cwd.starts_with(project) {
        return Err(Failed {
            step: Step::Chdir,
            errno: Errno::EPERM,
            detail: commit.cwd.to_bytes(),
        });
    }
    nix::unistd::chdir(commit.cwd.as_c_str()).step(Step::Chdir, commit.cwd.to_bytes())?;
    Ok(commit)
}

fn read_exact(sock: BorrowedFd<'_>, mut buf: &mut [u8]) -> Result<(), Failed<'static>> {
    while !buf.is_empty() {
        match nix::unistd::read(sock, buf) {
            Ok(0) => return Err(malformed(b"short message")),
            Ok(n) => buf = buf.get_mut(n..).unwrap_or_default(),
            Err(Errno::EINTR) => {}
            Err(errno) => {
                return Err(Failed {
                    step: Step::WaitForCommand,
                    errno,
                    detail: b"read",
                })
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn commit() -> Commit {
        Commit {
            argv: vec![c"/bin/echo".into(), c"a b".into()],
            envp: vec![c"A=1".into()],
            exec_candidates: vec![c"/bin/echo".into()],
            cwd: c"/tmp".into(),
        }
    }

    #[test]
    fn a_commit_crosses_with_its_stdin() {
        let (a, b) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::Stream,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        let sent = commit();
        let body = sent.encode();
        assert_eq!(Commit::decode(&body), Some(sent.clone()));
        // Every truncation is refused, never a panic.
        for cut in 0..body.len() {
            assert_eq!(Commit::decode(&body[..cut]), None, "{cut}");
        }
        let file = std::fs::File::open("/dev/null").unwrap();
        sent.send(a.as_fd(), [Some(file.as_fd()), None, None])
            .unwrap();
        let mut header = [0u8; HEADER];
        nix::unistd::read(b.as_fd(), &mut header).unwrap();
        assert_eq!(&header[..4], b"WARM");
        assert_eq!(header[8], 0b001);
    }

    #[test]
    fn resolve_matches_a_cold_plan() {
        let policy = crate::profile::load("strict").unwrap();
        // A project of its own: the walk of all of /tmp met other tests'
        // temporary directories vanishing under it (ENOENT, now and then).
        let dir = tempfile::tempdir().unwrap();
        let project = std::fs::canonicalize(dir.path()).unwrap();
        let commit = Commit::resolve(
            &policy,
            &["ls".into(), "-l".into()],
            &[("CI".into(), "1".into())],
            None,
            &project,
        )
        .unwrap();
        let spec = super::super::SpawnSpec {
            program: "ls".into(),
            args: vec!["-l".into()],
            project: project.clone(),
            project_explicit: true,
            cwd: None,
            env: vec![("CI".into(), Some("1".into()))],
            dry_run: false,
            read_only_extra: vec![],
            review_stack: None,
        };
        let cold = super::super::Prepared::new(&policy, spec, Default::default())
            .unwrap()
            .planned;
        assert_eq!(commit.argv, cold.argv);
        assert_eq!(commit.envp, cold.envp);
        assert_eq!(commit.exec_candidates, cold.exec_candidates);
        assert_eq!(commit.cwd, cold.cwd);
        let outside = Commit::resolve(&policy, &["ls".into()], &[], Some(Path::new("/")), &project);
        assert!(outside.is_err());
    }
}
