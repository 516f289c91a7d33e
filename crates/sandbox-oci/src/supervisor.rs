//! The per-container supervisor: a process forked by `sandbox oci create`
//! (and by each `exec`) before runc runs, holding the host end of the
//! container's broker channel. It serves the broker to the container's
//! processes under the container's profile and ends when the last of them
//! closed the channel (when the container is gone).
//!
//! Its first line from the channel is the init's report of what it
//! applied, written before the container's process could write anything.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use nix::poll::PollFlags;
use serde::Serialize;

use super::OciError;
use sandbox::jsonl::{Frame, Framer};
use sandbox::poll_set::PollSet;
use sandbox::profile::policy::Policy;

/// The most audit lines one supervisor writes, in bytes. Each broker
/// request is a line on the host, with the path it asked for in it: a
/// container flooding its broker would otherwise fill the disk holding the
/// audit directory. Past this, the broker serves no more requests (none
/// goes unaudited) and the supervisor says why in the audit.
pub const AUDIT_LIMIT: u64 = 64 << 20;

/// The longest report line the init writes (its process's arguments are in
/// it); more is not a report.
const REPORT_MAX: usize = 1 << 20;

/// What a supervisor serves.
pub struct Serving<'a> {
    /// The container id, which names the run in the audit.
    pub id: &'a str,
    /// The container's profile.
    pub policy: &'a Policy,
    /// The container's root on the host: the broker's project.
    pub rootfs: &'a Path,
    /// Who the process on the channel is outside the container: the broker
    /// reaches its root with that user's file access, not the engine's.
    pub identity: &'a super::spec::Identity,
    /// Where the audit lines go (appended).
    pub audit: &'a Path,
    /// `create` or `exec`, for the audit.
    pub started_by: &'a str,
}

/// The most supervisors of one container's `exec`s alive at once. Each
/// lives as long as a process holds its channel, and a process the exec
/// leaves behind (`sleep 300 &` in a health check of the image's) holds it
/// past the exec: one exec probe every few seconds would otherwise pile up
/// host processes without end.
pub const EXEC_SUPERVISORS_MAX: usize = 32;

/// A slot for one `exec`'s supervisor among the container's: a file in its
/// state directory `dir`, locked for as long as the supervisor holding it
/// lives. Refused when [`EXEC_SUPERVISORS_MAX`] are alive; files no
/// supervisor holds any more are removed.
pub fn claim_exec_slot(dir: &Path) -> Result<OwnedFd, OciError> {
    use nix::fcntl::{Flock, FlockArg};
    use std::os::unix::fs::DirBuilderExt;
    let slots = dir.join("execs");
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| OciError::Io { what, path, source }
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&slots) {
        Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(io("creating the directory of exec supervisors", &slots)(
                err,
            ))
        }
        _ => {}
    }
    let mut alive = 0;
    let entries = std::fs::read_dir(&slots).map_err(io("listing the exec supervisors", &slots))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(file) = sandbox::safe_file::open_read(&path) else {
            continue;
        };
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            // Nobody holds it: its supervisor is gone.
            Ok(_unlocked_on_drop) => {
                let _ = std::fs::remove_file(&path);
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => alive += 1,
            Err(_) => {}
        }
    }
    if alive >= EXEC_SUPERVISORS_MAX {
        return Err(OciError::Refused(format!(
            "this container has {alive} exec supervisors alive, the most it may: each lives \
             while a process holds its exec's broker channel, and processes earlier execs left \
             running still hold theirs; end those processes (or restart the container) \
             before another exec"
        )));
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let path = slots.join(format!("{}-{nanos}", std::process::id()));
    let file = sandbox::safe_file::create_new(&path, 0o600)
        .map_err(|err| io("creating an exec supervisor's slot", &path)(err.into()))?;
    let held = file
        .try_clone()
        .map_err(io("creating an exec supervisor's slot", &path))?;
    let locked = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
        io("locking an exec supervisor's slot", &path)(std::io::Error::from(errno))
    })?;
    // The lock belongs to the open file, which `held` shares: it lasts as
    // long as the supervisor keeps `held`. Dropping `locked` would release
    // it; its descriptor is close-on-exec, so it goes when runc starts.
    std::mem::forget(locked);
    Ok(OwnedFd::from(held))
}

/// Fork the supervisor for `serving` holding `host_end` (and `slot`, for as
/// long as it lives). The caller then hands the container end to runc.
pub fn start(
    serving: &Serving<'_>,
    host_end: OwnedFd,
    slot: Option<OwnedFd>,
) -> Result<nix::unistd::Pid, OciError> {
    let audit = open_audit(serving.audit)?;
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|source| OciError::Io {
            what: "opening /dev/null for the supervisor",
            path: "/dev/null".into(),
            source,
        })?;
    // The slot first: what is left of `fds` after the pops below, it stays
    // open until the supervisor returns.
    let mut keep: Vec<OwnedFd> = slot.into_iter().collect();
    keep.extend([host_end, OwnedFd::from(audit), OwnedFd::from(null)]);
    sandbox::os::fork_keeping_only(keep, |mut fds| {
        let (Some(null), Some(audit), Some(channel)) = (fds.pop(), fds.pop(), fds.pop()) else {
            return 1;
        };
        // The engine waits for its runtime's output to end (conmon reads
        // runc's stdout and stderr to EOF): the supervisor keeps none of it.
        for stream in 0..=2 {
            if sandbox::os::redirect_standard_stream(null.as_fd(), stream).is_err() {
                return 1;
            }
        }
        drop(null);
        let _ = nix::unistd::setsid();
        let audit = std::fs::File::from(audit);
        // The container's root is opened while the supervisor still reaches
        // it (its parents may be the engine's alone), then it becomes the
        // container's user for the files in it.
        let broker = open_broker(serving);
        let acting = confine(serving);
        serve(serving, channel, audit, broker, acting)
    })
    .map_err(|source| OciError::Supervisor(source.to_string()))
}

/// What the container talks to is this process: a flaw in the broker must
/// not be the host's. It reaches only the container's root (and, read-only,
/// the system files a `net.http` needs) with the file access of the
/// container's process and no capability, cannot execute anything, and runs
/// under the profile's system-call policy. Landlock and seccomp are best
/// effort, as for the net process: each narrows a process that works
/// without them. Taking the process's ids is not: an error says why the
/// broker must not serve.
fn confine(serving: &Serving<'_>) -> Result<(), String> {
    use sandbox::landlock::LandlockAccess;
    let _ = nix::sys::prctl::set_no_new_privs();
    let cstring = |path: &Path| {
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())).ok()
    };
    let mut rules = Vec::new();
    if let Some(root) = cstring(serving.rootfs) {
        rules.push((root, LandlockAccess::ReadWrite));
    }
    for system in ["/etc", "/usr", "/lib", "/lib64", "/lib32", "/run"] {
        let path = Path::new(system);
        if path.exists() {
            rules.extend(cstring(path).map(|p| (p, LandlockAccess::Read)));
        }
    }
    let _ = sandbox::landlock::apply(&rules);
    // Before the filter below, which may refuse these calls.
    let acting = act_as(serving.identity);
    for set in [
        caps::CapSet::Ambient,
        caps::CapSet::Inheritable,
        caps::CapSet::Effective,
        caps::CapSet::Permitted,
    ] {
        let _ = caps::clear(None, set);
    }
    if serving.policy.enforce.seccomp != sandbox::profile::policy::Enforcement::Off {
        let mut policy = serving.policy.syscalls.clone();
        policy
            .deny
            .extend(["execve".to_string(), "execveat".to_string()]);
        if let Ok(filter) = sandbox::seccomp::compile(&policy) {
            let _ = filter.install();
        }
    }
    acting
}

/// Take the file-system ids and groups of the container's process: the
/// engine's user (root, with every capability) reads files the process
/// may not, such as its image's 0600 files under `USER app`. Checked by
/// reading them back, since setfsuid and setfsgid report no error.
fn act_as(identity: &super::spec::Identity) -> Result<(), String> {
    use nix::unistd::{setfsgid, setfsuid, Gid, Uid};
    let groups: Vec<Gid> = identity.groups.iter().copied().map(Gid::from_raw).collect();
    let (uid, gid) = (Uid::from_raw(identity.uid), Gid::from_raw(identity.gid));
    let failed = |what: &str| {
        format!(
            "cannot take the container's {what} (user {}, group {}, groups {:?}) for the \
             broker's file access; run the engine as root, or in a user namespace holding \
             the container's ids",
            identity.uid, identity.gid, identity.groups
        )
    };
    // setgroups needs CAP_SETGID even to keep the groups as they are: a
    // rootless engine's supervisor that is the container's user already
    // has nothing to change.
    let mut wanted = identity.groups.clone();
    wanted.sort_unstable();
    wanted.dedup();
    let mut current: Vec<u32> = nix::unistd::getgroups()
        .unwrap_or_default()
        .into_iter()
        .map(Gid::as_raw)
        .collect();
    current.sort_unstable();
    current.dedup();
    if current != wanted {
        nix::unistd::setgroups(&groups)
            .map_err(|errno| format!("{}: {errno}", failed("groups")))?;
    }
    setfsgid(gid);
    if setfsgid(gid) != gid {
        return Err(failed("group"));
    }
    setfsuid(uid);
    if setfsuid(uid) != uid {
        return Err(failed("user"));
    }
    Ok(())
}

fn open_audit(path: &Path) -> Result<std::fs::File, OciError> {
    sandbox::safe_file::open_append(path, 0o600).map_err(|err| OciError::Io {
        what: "opening the container's audit log",
        path: path.to_path_buf(),
        source: err.into(),
    })
}

#[derive(Serialize)]
struct Event<'a> {
    time: f64,
    run: &'a str,
    event: &'a str,
    started_by: &'a str,
    profile: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforced: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<&'a str>,
}

impl<'a> Event<'a> {
    fn of(
        serving: &'a Serving<'a>,
        event: &'a str,
        enforced: Option<&'a serde_json::Value>,
        problem: Option<&'a str>,
    ) -> Event<'a> {
        Event {
            time: now(),
            run: serving.id,
            event,
            started_by: serving.started_by,
            profile: &serving.policy.name,
            enforced,
            problem,
        }
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The broker for the container's root, opened before the supervisor
/// takes the container's ids.
fn open_broker(serving: &Serving<'_>) -> Result<sandbox::broker::server::Broker, String> {
    // No audit yet: the broker writes to the container's one chain,
    // handed over in `serve` after the init's report is its first line.
    sandbox::broker::server::Broker::new(
        serving.policy.broker.clone(),
        serving.rootfs,
        &[],
        sandbox::project::Rules::default(),
        None,
        serving.id.to_owned(),
    )
    .map_err(|err| format!("opening the container's root: {err}"))
}

fn serve(
    serving: &Serving<'_>,
    channel: OwnedFd,
    audit: std::fs::File,
    broker: Result<sandbox::broker::server::Broker, String>,
    acting: Result<(), String>,
) -> i32 {
    // The audit file as the broker's lines grow it (the same open file).
    let probe = audit.try_clone();
    let size = |probe: &std::io::Result<std::fs::File>| {
        probe
            .as_ref()
            .ok()
            .and_then(|file| file.metadata().ok())
            .map(|meta| meta.len())
    };
    let start = size(&probe);
    // One chain for the container: its events and its broker's requests.
    let mut audit = sandbox::broker::audit::Audit::new(
        audit,
        sandbox::audit::Chain::unique("container", serving.id),
    );
    let own_event = |audit: &mut sandbox::broker::audit::Audit, value: Event<'_>| {
        audit.record(&value);
        audit.flush();
    };
    match read_report(&channel) {
        Ok(Some(report)) => own_event(
            &mut audit,
            Event::of(serving, "enforced", Some(&report), None),
        ),
        // The process never started (deleted before `start`, or the init
        // failed and said why on the container's stderr).
        Ok(None) => {
            own_event(
                &mut audit,
                Event::of(
                    serving,
                    "ended",
                    None,
                    Some("the channel closed before the init reported"),
                ),
            );
            return 0;
        }
        Err(problem) => {
            own_event(
                &mut audit,
                Event::of(serving, "refused", None, Some(&problem)),
            );
            return 1;
        }
    }
    let mut broker = match (broker, acting) {
        (Ok(broker), Ok(())) => broker,
        (Err(problem), _) | (_, Err(problem)) => {
            own_event(
                &mut audit,
                Event::of(serving, "ended", None, Some(&problem)),
            );
            return 1;
        }
    };
    broker.use_audit_chain(audit);
    let mut network = sandbox::broker::network::Network::new(serving.policy.network.clone(), None);
    if serving.policy.enforce.seccomp != sandbox::profile::policy::Enforcement::Off {
        network.confine_to(Some(serving.policy.syscalls.clone()));
    }
    broker.use_network(network);
    let Some(start) = start else {
        broker.audit_record(&Event::of(
            serving,
            "ended",
            None,
            Some("the audit file's size cannot be read, so its limit cannot be kept"),
        ));
        return 1;
    };
    broker.set_rate_limit(
        sandbox::broker::server::RATE_LIMIT.0,
        sandbox::broker::server::RATE_LIMIT.1,
    );
    loop {
        let mut events = PollFlags::POLLIN;
        if broker.wants_output() {
            events |= PollFlags::POLLOUT;
        }
        let mut set = PollSet::default();
        let slot = set.add(channel.as_fd(), events);
        if set.wait([broker.deadline()]).is_err() {
            break;
        }
        let revents = set.events(Some(slot));
        if revents.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            && !broker.on_readable(channel.as_fd())
        {
            break;
        }
        if broker.step() && !broker.on_writable(channel.as_fd()) {
            break;
        }
        if broker.wants_output()
            && revents.contains(PollFlags::POLLOUT)
            && !broker.on_writable(channel.as_fd())
        {
            break;
        }
        if size(&probe).is_none_or(|now| now.saturating_sub(start) > AUDIT_LIMIT) {
            broker.end_network();
            broker.audit_record(&Event::of(
                serving,
                "ended",
                None,
                Some(&format!(
                    "the container's broker requests wrote more than {} MiB of audit lines; it \
                     serves no more, so that the audit cannot fill the host's disk (the \
                     container keeps running; its broker channel is closed)",
                    AUDIT_LIMIT >> 20
                )),
            ));
            return 1;
        }
    }
    broker.drain(channel.as_fd());
    broker.end_network();
    broker.audit_record(&Event::of(serving, "ended", None, None));
    0
}

/// The init's first line, parsed; None when the channel closed first.
fn read_report(channel: &OwnedFd) -> Result<Option<serde_json::Value>, String> {
    let mut framer = Framer::new(REPORT_MAX);
    let mut frames = Vec::with_capacity(1);
    let mut byte = [0u8; 1];
    let line = loop {
        // One byte at a time: what follows the report is the broker's, and
        // must stay in the channel for it.
        match nix::unistd::read(channel.as_fd(), &mut byte) {
            Ok(0) => return Ok(None),
            Ok(_) => framer.push(&byte, &mut frames),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(errno) => return Err(format!("reading the init's report: {errno}")),
        }
        if let Some(Frame::Line(line)) = frames.pop() {
            break line;
        }
        // Refused as soon as it passes the limit (a line over it is never
        // a frame before that).
        if framer.skipping().is_some() {
            return Err("the init's report is longer than 1 MiB".to_owned());
        }
    };
    let report: sandbox_oci_init::Report = serde_json::from_slice(&line)
        .map_err(|err| format!("the init's report is not one: {err}"))?;
    if report.method != sandbox_oci_init::REPORT_METHOD {
        return Err(format!("the init's report has method {:?}", report.method));
    }
    serde_json::to_value(report.params)
        .map_err(|err| err.to_string())
        .map(Some)
}
