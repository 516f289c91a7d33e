//! The net process's life: its start from the supervisor's first line,
//! its confinement, and the loop that serves the link (answers to the
//! proxy's questions, `net.http` requests) beside the proxy.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::socket::MsgFlags;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use sandbox::jsonl::{AsyncLines, Frame};
use sandbox::net::allow::{Allowlist, Host};
use sandbox::net::link::{
    FetchOutcome, FromNet, NetStart, ToNet, LINK_FD, LISTENER_SOURCE_FD, MAX_LINE,
};

use crate::proxy::{Gate, Record, Target, Verdict};
use crate::resolve::Resolver;

/// The net process: read what to serve from the link's first line, confine
/// this process, and serve until the link closes. Returns the exit status.
pub fn main() -> i32 {
    // The supervisor placed the link and the listener's source at fixed
    // numbers before executing this program.
    let Ok(link) = sandbox::os::adopt_inherited_socket(LINK_FD) else {
        return 1;
    };
    let _ = nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    if let Ok(null) = nix::fcntl::open(
        c"/dev/null",
        nix::fcntl::OFlag::O_RDWR,
        nix::sys::stat::Mode::empty(),
    ) {
        for fd in 0..3 {
            let _ = sandbox::os::redirect_standard_stream(std::os::fd::AsFd::as_fd(&null), fd);
        }
    }
    let Some(start) = read_start(&link) else {
        return 1;
    };
    // The supervisor armed the parent-death signal before executing this
    // program; a parent other than the supervisor means it died first.
    if nix::unistd::getppid().as_raw() != start.supervisor {
        return 1;
    }
    let listener_from = if start.proxy {
        match sandbox::os::adopt_inherited_socket(LISTENER_SOURCE_FD) {
            Ok(source) => Some(source),
            Err(_) => return 1,
        }
    } else {
        None
    };
    confine(start.syscalls.as_ref());
    // Profiles and flags checked every entry; one that does not parse here
    // means the two disagree, and nothing is let through.
    let Ok(allow) = Allowlist::parse(&start.allow) else {
        return 1;
    };
    // Name lookups are blocking calls on the runtime's pool: a bound keeps
    // a flood of names from costing the host a thread each.
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(16)
        .enable_all()
        .build()
    else {
        return 1;
    };
    // Confined and about to serve: the supervisor waits for this line
    // before the run goes on.
    if !say_ready(&link) {
        return 1;
    }
    runtime.block_on(serve(Arc::new(allow), start.pins, link, listener_from));
    0
}

/// Write [`FromNet::Ready`] on the link, whole, before the runtime owns it.
fn say_ready(link: &OwnedFd) -> bool {
    let Ok(mut line) = serde_json::to_vec(&FromNet::Ready) else {
        return false;
    };
    line.push(b'\n');
    let mut rest = line.as_slice();
    while !rest.is_empty() {
        match nix::unistd::write(link, rest) {
            Ok(0) => return false,
            Ok(n) => rest = rest.get(n..).unwrap_or_default(),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
    }
    true
}

/// The link's first line, read byte by byte so that nothing after it is
/// taken from the socket before the runtime's reader owns it.
fn read_start(link: &OwnedFd) -> Option<NetStart> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(link, &mut byte) {
            Ok(0) => return None,
            Ok(_) if byte[0] == b'\n' => break,
            Ok(_) => {
                line.push(byte[0]);
                if line.len() > MAX_LINE {
                    return None;
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
    serde_json::from_slice(&line).ok()
}

/// What the net process may touch of the host once it serves: it parses
/// everything the sandbox sends, so a fault there must not become the
/// supervisor's user (root, for a root run) with a free hand. No
/// capabilities and no_new_privs; files read-only, and only those name
/// resolution and TLS read (configuration, libraries for NSS, the
/// system's roots or the ones `SSL_CERT_FILE`/`SSL_CERT_DIR` name); the
/// run's own syscall filter, plus no exec. Each layer is applied where
/// the kernel allows: this process is a helper outside the sandbox, and
/// the sandbox's own layers do not depend on it.
fn confine(syscalls: Option<&sandbox::seccomp::policy::SyscallPolicy>) {
    let _ = nix::sys::prctl::set_no_new_privs();
    let _ = sandbox::caps::drop_all_available();
    let mut readable: Vec<std::path::PathBuf> =
        ["/etc", "/usr", "/lib", "/lib64", "/lib32", "/run"]
            .iter()
            .map(std::path::PathBuf::from)
            .collect();
    for name in ["SSL_CERT_FILE", "SSL_CERT_DIR"] {
        if let Some(value) = std::env::var_os(name) {
            readable.extend(std::env::split_paths(&value));
        }
    }
    let rules: Vec<(std::ffi::CString, sandbox::landlock::LandlockAccess)> = readable
        .into_iter()
        .filter(|path| path.is_absolute() && path.exists())
        .filter_map(|path| {
            std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).ok()
        })
        .map(|path| (path, sandbox::landlock::LandlockAccess::Read))
        .collect();
    let _ = sandbox::landlock::apply(&rules);
    if let Some(policy) = syscalls {
        let mut policy = policy.clone();
        policy
            .deny
            .extend(["execve".to_string(), "execveat".to_string()]);
        if let Ok(filter) = sandbox::seccomp::compile(&policy) {
            let _ = filter.install();
        }
    }
}

/// The decisions the proxy cannot take alone, asked of the broker over the
/// link, and the records it keeps.
struct LinkGate {
    to_broker: mpsc::UnboundedSender<FromNet>,
    asked: Mutex<HashMap<u64, oneshot::Sender<Verdict>>>,
    next: AtomicU64,
    /// The run ended: nothing is asked any more.
    closing: std::sync::atomic::AtomicBool,
}

/// Why a connection was refused once the run had ended.
const RUN_ENDED: &str = "the run ended before this was decided";

impl LinkGate {
    /// Refuse every question still waiting and any to come, so that each
    /// attempt is recorded before the process ends.
    fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let waiting: Vec<_> = match self.asked.lock() {
            Ok(mut asked) => asked.drain().map(|(_, answer)| answer).collect(),
            Err(_) => Vec::new(),
        };
        for answer in waiting {
            let _ = answer.send(Verdict {
                allow: false,
                rule: RUN_ENDED.into(),
            });
        }
    }
}

impl Gate for LinkGate {
    fn decide(
        &self,
        request: &Target,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Verdict> + Send + '_>> {
        if self.closing.load(Ordering::SeqCst) {
            return Box::pin(async {
                Verdict {
                    allow: false,
                    rule: RUN_ENDED.into(),
                }
            });
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        if let Ok(mut asked) = self.asked.lock() {
            asked.insert(id, answer);
        }
        let sent = self
            .to_broker
            .send(FromNet::Ask {
                id,
                target: request.host.with_port(request.port),
                requested: request.requested.clone(),
            })
            .is_ok();
        Box::pin(async move {
            let gone = Verdict {
                allow: false,
                rule: "the run's supervisor is gone".into(),
            };
            if !sent {
                return gone;
            }
            answered.await.unwrap_or(gone)
        })
    }

    fn record(&self, record: Record) {
        let _ = self.to_broker.send(FromNet::Connection {
            target: record.target,
            host: record.host,
            requested: record.requested,
            allowed: record.allowed,
            // Refused because the run ended: its advice to list the host
            // would be wrong, and nobody is waiting for it.
            refusal: record.refusal.filter(|_| record.rule != RUN_ENDED),
            rule: record.rule,
        });
    }
}

async fn serve(
    allow: Arc<Allowlist>,
    pins: BTreeMap<String, std::net::IpAddr>,
    link: OwnedFd,
    listener_from: Option<OwnedFd>,
) {
    let link = std::os::unix::net::UnixStream::from(link);
    if link.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(link) = tokio::net::UnixStream::from_std(link) else {
        return;
    };
    let (reader, mut writer) = link.into_split();
    let (to_broker, mut outgoing) = mpsc::unbounded_channel::<FromNet>();
    let written = tokio::spawn(async move {
        while let Some(message) = outgoing.recv().await {
            let last = matches!(message, FromNet::Closing);
            let Ok(mut line) = serde_json::to_vec(&message) else {
                continue;
            };
            line.push(b'\n');
            if writer.write_all(&line).await.is_err() || last {
                return;
            }
        }
    });
    // This host's own addresses, once: a name that resolves to one of
    // them would reach the host's services from inside.
    let own = crate::address::host_addresses().unwrap_or_default();
    let resolver = Arc::new(Resolver::new(Arc::clone(&allow), pins, own));
    let gate = Arc::new(LinkGate {
        to_broker: to_broker.clone(),
        asked: Mutex::new(HashMap::new()),
        next: AtomicU64::new(1),
        closing: std::sync::atomic::AtomicBool::new(false),
    });
    if let Some(source) = listener_from {
        let (allow, resolver, gate) = (Arc::clone(&allow), Arc::clone(&resolver), gate.clone());
        tokio::spawn(async move {
            let Ok(Some(listener)) =
                tokio::task::spawn_blocking(move || receive_listener(&source)).await
            else {
                return;
            };
            let listener = std::net::TcpListener::from(listener);
            if listener.set_nonblocking(true).is_err() {
                return;
            }
            if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
                crate::proxy::serve(listener, allow, resolver, gate).await;
            }
        });
    }
    let tls = Arc::new(TlsConfigs::default());
    // The broker's lines carry `net.http` requests the sandbox made, which
    // the broker bounded; the link's limit holds the rest.
    let mut lines = AsyncLines::new(reader, MAX_LINE);
    while let Ok(Some(frame)) = lines.next_frame().await {
        let Frame::Line(line) = frame else {
            continue;
        };
        match serde_json::from_slice::<ToNet>(&line) {
            Ok(ToNet::Answer { id, allow, rule }) => {
                let answer = gate.asked.lock().ok().and_then(|mut a| a.remove(&id));
                if let Some(answer) = answer {
                    let _ = answer.send(Verdict { allow, rule });
                }
            }
            Ok(ToNet::Fetch { id, request }) => {
                let (resolver, tls, to_broker) =
                    (Arc::clone(&resolver), Arc::clone(&tls), to_broker.clone());
                tokio::spawn(async move {
                    // Resolution counts against the request's own time, as
                    // the broker promised the sandbox.
                    let outcome = match tokio::time::timeout(
                        request.timeout,
                        fetch_one(&request, &resolver, &tls),
                    )
                    .await
                    {
                        Ok(outcome) => outcome,
                        Err(_) => FetchOutcome::Failed {
                            message: format!(
                                "timed out after {} ms (resolving, connecting and exchanging)",
                                request.timeout.as_millis()
                            ),
                            timed_out: true,
                        },
                    };
                    let _ = to_broker.send(FromNet::Fetched { id, outcome });
                });
            }
            // The broker is ours: a line it did not mean is a bug, and
            // ending here makes its requests fail instead of hang.
            Err(_) => break,
        }
    }
    // The run ended. Refused and waiting attempts are recorded before the
    // process goes: the connections' tasks get a few turns to report (an
    // attempt still connecting has sent nothing, and is not waited for).
    gate.close();
    for _ in 0..32 {
        tokio::task::yield_now().await;
    }
    let _ = to_broker.send(FromNet::Closing);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), written).await;
}

/// TLS configurations, made when first needed: reading the system's roots
/// takes milliseconds that a run without `https` should not pay.
#[derive(Default)]
struct TlsConfigs {
    system: tokio::sync::OnceCell<Result<Arc<rustls::ClientConfig>, String>>,
}

async fn fetch_one(
    request: &sandbox::net::fetch::FetchRequest,
    resolver: &Resolver,
    tls: &TlsConfigs,
) -> FetchOutcome {
    let host = match Host::parse(&request.host) {
        Ok(host) => host,
        Err(err) => {
            return FetchOutcome::Failed {
                message: err.to_string(),
                timed_out: false,
            }
        }
    };
    let addrs = match resolver.resolve(&host, request.port).await {
        Ok(addrs) => addrs,
        Err(refusal) if refusal.unresolved => {
            return FetchOutcome::Failed {
                message: refusal.message,
                timed_out: false,
            }
        }
        Err(refusal) => {
            return FetchOutcome::Refused {
                rule: refusal.rule,
                message: refusal.message,
            }
        }
    };
    let config = tls
        .system
        .get_or_init(|| async {
            tokio::task::spawn_blocking(|| {
                crate::fetch::client_config().map_err(|err| err.to_string())
            })
            .await
            .unwrap_or_else(|err| Err(err.to_string()))
        })
        .await;
    let config = match config {
        Ok(config) => Arc::clone(config),
        Err(message) if request.scheme == sandbox::net::fetch::Scheme::Https => {
            return FetchOutcome::Failed {
                message: message.clone(),
                timed_out: false,
            }
        }
        // Plain HTTP needs no roots; any configuration does.
        Err(_) => match crate::fetch::client_config_with_roots(rustls::RootCertStore::empty()) {
            Ok(config) => config,
            Err(err) => {
                return FetchOutcome::Failed {
                    message: err.to_string(),
                    timed_out: false,
                }
            }
        },
    };
    match crate::fetch::fetch(request, &addrs, config).await {
        Ok(response) => FetchOutcome::Response { response },
        Err(err) => FetchOutcome::Failed {
            message: err.to_string(),
            timed_out: err.timed_out(),
        },
    }
}

/// Wait for init's listening socket on `source` (blocking: a thread of
/// the runtime's pool waits).
fn receive_listener(source: &OwnedFd) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let message = loop {
        match nix::sys::socket::recvmsg::<()>(
            source.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
            Ok(message) => break message,
        }
    };
    let mut received = None;
    sandbox::os::for_each_received_fd(message, |fd| {
        if received.is_none() {
            received = Some(fd);
        }
    });
    received
}
