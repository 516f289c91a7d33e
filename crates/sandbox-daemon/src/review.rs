//! Review runs through the daemon (docs/src/review.md, docs/src/daemon.md):
//! where a caller's kept changes live, and how they are listed, applied and
//! discarded.
//!
//! Each caller has a store of its own, `<socket dir>/review/<uid>/runs`,
//! owned by the caller: the run's supervisor, which runs as the caller,
//! writes it, and nothing of one caller's is in another's. Listing,
//! applying and discarding run `sandbox changes|apply|discard` (the same
//! code as the command line, from the daemon's own executable) as the
//! caller, with that store as its state directory: the project belongs to
//! the caller, so apply writes with the caller's rights and never the
//! daemon's. A root daemon would otherwise write where the caller cannot
//! (another user's directory inside the project), and the caller can
//! rewrite its own store, so root must not act on what is in it.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::AsyncReadExt;

use crate::error::ApiError;
use crate::resolve::Caller;

/// Most bytes of a helper's output the daemon reads (a listing of 10,000
/// changes is a few MiB; a rendered diff is bounded per file by the core).
const MOST_OUTPUT: u64 = 64 << 20;

/// Most bytes of a helper's stderr kept for an error's message.
const MOST_MESSAGE: usize = 4096;

/// Bytes one read takes from a helper's output.
const READ_SIZE: usize = 64 << 10;

/// Helpers (and the answers streamed from their output) under way, per
/// caller.
type Running = Arc<Mutex<HashMap<u32, usize>>>;

/// The callers' review stores.
#[derive(Debug)]
pub struct ReviewStores {
    program: PathBuf,
    root: PathBuf,
    scratch: PathBuf,
    running: Running,
}

/// Helpers one caller may have at once.
pub const MOST_HELPERS_PER_CALLER: usize = 2;

/// How long one listing, apply or discard may take (an apply of 10,000
/// files syncs each one).
pub const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// What a helper said.
#[derive(Debug)]
pub struct HelperOutput<T = Vec<u8>> {
    /// Its exit status (None: killed by a signal).
    pub status: Option<i32>,
    /// Its standard output: in memory, or (for an output that is streamed
    /// to the caller) in an unnamed file of the daemon's, read from its
    /// start.
    pub stdout: T,
    /// The end of its standard error, for messages.
    pub stderr: String,
}

/// Where a helper's standard output goes while it runs.
enum Sink {
    Memory(Vec<u8>),
    File(std::fs::File),
}

impl Sink {
    /// Append `bytes`; a file is written on a blocking thread, never on
    /// the runtime's.
    async fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::Memory(held) => {
                held.extend_from_slice(bytes);
                Ok(())
            }
            Sink::File(file) => {
                let mut file = file.try_clone()?;
                let bytes = bytes.to_vec();
                tokio::task::spawn_blocking(move || {
                    use std::io::Write;
                    file.write_all(&bytes)
                })
                .await
                .map_err(std::io::Error::other)?
            }
        }
    }
}

impl ReviewStores {
    /// Stores below `root` (beside the socket, which callers can reach);
    /// helpers are `program` (the daemon's own executable); outputs that
    /// are streamed are spooled in `scratch`, a directory of the daemon's
    /// own on its state's disk (not beside the socket: that is often a
    /// tmpfs, whose files are memory).
    pub fn new(program: PathBuf, root: PathBuf, scratch: PathBuf) -> ReviewStores {
        ReviewStores {
            program,
            root,
            scratch,
            running: Running::default(),
        }
    }

    /// The caller's state directory, made if missing: traversable, not
    /// listable, parent; a directory of the caller's own below, created
    /// and checked beneath open directories with no symlink followed (as
    /// the skills' state is: a `chown` by path would follow a planted
    /// link).
    pub fn caller_dir(&self, uid: u32) -> Result<PathBuf, ApiError> {
        let internal = |err: &dyn std::fmt::Display| {
            ApiError::internal(format!("the review store of uid {uid}: {err}"))
        };
        let parent = self.root.parent().unwrap_or(Path::new("/"));
        let parent = std::fs::File::open(parent).map_err(|err| internal(&err))?;
        let name = self
            .root
            .file_name()
            .map_or("review".into(), |name| name.to_string_lossy());
        let stores =
            sandbox::safe_file::private_dir(parent.as_fd(), &name, 0o711, None, &self.root)
                .map_err(|err| internal(&err))?;
        let dir = self.root.join(uid.to_string());
        let me = nix::unistd::geteuid().as_raw();
        sandbox::safe_file::private_dir(
            stores.as_fd(),
            &uid.to_string(),
            0o700,
            (uid != me).then_some(uid),
            &dir,
        )
        .map_err(|err| internal(&err))?;
        Ok(dir)
    }

    /// Where the supervisor of a review run of `uid` keeps its changes.
    pub fn store_of(&self, uid: u32) -> Result<PathBuf, ApiError> {
        Ok(self.caller_dir(uid)?.join("runs"))
    }

    /// Run `sandbox ARGS` as the caller, against the caller's store: at
    /// most [`MOST_HELPERS_PER_CALLER`] at once per caller, each killed
    /// past [`HELPER_TIMEOUT`]. The store is the caller's to change (a
    /// FIFO planted in it would block a read for ever), so a helper holds
    /// no thread of the daemon while it waits, and a caller cannot hold
    /// more than its share.
    pub async fn helper(&self, caller: Caller, args: &[String]) -> Result<HelperOutput, ApiError> {
        let _slot = self.slot(caller.uid)?;
        let (status, sink, stderr) = self.run(caller, args, Sink::Memory(Vec::new())).await?;
        let Sink::Memory(stdout) = sink else {
            return Err(ApiError::internal("the review helper's output went astray"));
        };
        Ok(HelperOutput {
            status,
            stdout,
            stderr,
        })
    }

    /// [`ReviewStores::helper`] with its output kept in an unnamed file
    /// (`O_TMPFILE` in the daemon's spool directory, gone when closed) to
    /// be streamed from, within a [`Slot`] the caller of this took and
    /// keeps while it streams: a listing and its diff may each be 64 MiB,
    /// and held in memory with the answer built from them they made the
    /// daemon grow by twice the diff per request
    /// (tests/daemon_review_memory.rs).
    pub async fn helper_spooled(
        &self,
        _slot: &Slot,
        caller: Caller,
        args: &[String],
    ) -> Result<HelperOutput<std::fs::File>, ApiError> {
        let scratch = self.scratch.clone();
        let file = crate::error::blocking(move || {
            let fd = nix::fcntl::open(
                &scratch,
                nix::fcntl::OFlag::O_TMPFILE
                    | nix::fcntl::OFlag::O_RDWR
                    | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
            )
            .map_err(|errno| {
                ApiError::internal(format!(
                    "a file for the review helper's output in {}: {errno}",
                    scratch.display()
                ))
            })?;
            Ok(std::fs::File::from(fd))
        })
        .await?;
        let (status, sink, stderr) = self.run(caller, args, Sink::File(file)).await?;
        let Sink::File(mut file) = sink else {
            return Err(ApiError::internal("the review helper's output went astray"));
        };
        let file = crate::error::blocking(move || {
            use std::io::Seek;
            file.rewind().map_err(|err| {
                ApiError::internal(format!("spooling the review helper's output: {err}"))
            })?;
            Ok(file)
        })
        .await?;
        Ok(HelperOutput {
            status,
            stdout: file,
            stderr,
        })
    }

    /// Run the helper, its output into `sink`: its status, the sink, and
    /// the end of its stderr.
    async fn run(
        &self,
        caller: Caller,
        args: &[String],
        mut sink: Sink,
    ) -> Result<(Option<i32>, Sink, String), ApiError> {
        let dir = {
            let stores = self.clone_paths();
            let uid = caller.uid;
            crate::error::blocking(move || stores.caller_dir(uid)).await?
        };
        let mut command = tokio::process::Command::new(&self.program);
        command.args(args);
        // As the caller, whose project it is; its supplementary groups
        // are dropped with it (std clears them), so a project writable
        // only through a group is refused rather than written as root.
        if caller.uid != nix::unistd::geteuid().as_raw() {
            command.uid(caller.uid).gid(caller.gid);
        }
        let mut child = command
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("SANDBOX_STATE_DIR", &dir)
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| {
                ApiError::internal(format!("starting {}: {err}", self.program.display()))
            })?;
        let (Some(mut out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ApiError::internal("the review helper has no pipes"));
        };
        // stderr on a task of its own: a helper past the stdout cap is
        // killed, and its stderr then ends too.
        // Only its end is kept: a message is its last MOST_MESSAGE bytes,
        // and a helper writing megabytes there must not make the daemon
        // hold them.
        let errors = tokio::spawn(async move {
            let mut err = err.take(MOST_OUTPUT);
            let mut stderr = Vec::new();
            let mut buffer = vec![0u8; 8192];
            while let Ok(n @ 1..) = err.read(&mut buffer).await {
                stderr.extend_from_slice(&buffer[..n]);
                if stderr.len() > 4 * MOST_MESSAGE {
                    stderr.drain(..stderr.len() - 2 * MOST_MESSAGE);
                }
            }
            stderr
        });
        let mut total: u64 = 0;
        let work = async {
            let mut buffer = vec![0u8; READ_SIZE];
            let read = async {
                loop {
                    let n = out.read(&mut buffer).await?;
                    if n == 0 {
                        return Ok::<_, std::io::Error>(());
                    }
                    total += n as u64;
                    if total > MOST_OUTPUT {
                        let _ = child.start_kill();
                        return Ok(());
                    }
                    sink.write(&buffer[..n]).await?;
                }
            }
            .await;
            let status = child.wait().await;
            (read, status)
        };
        let (read, status) = match tokio::time::timeout(HELPER_TIMEOUT, work).await {
            Ok(done) => done,
            Err(_) => {
                return Err(ApiError::new(
                    504,
                    "review_timeout",
                    format!(
                        "listing, applying or discarding took more than {} s and was stopped",
                        HELPER_TIMEOUT.as_secs()
                    ),
                    "look at the run on the host with `sandbox changes`; what was applied before stays, each file whole",
                ))
            }
        };
        read.map_err(|err| ApiError::internal(format!("reading the review helper: {err}")))?;
        let status = status
            .map_err(|err| ApiError::internal(format!("waiting for the review helper: {err}")))?;
        if total > MOST_OUTPUT {
            return Err(ApiError::new(
                413,
                "too_large",
                format!("the run's changes take more than {MOST_OUTPUT} bytes to list"),
                "list them without the diff, or on the host with `sandbox changes`",
            ));
        }
        let stderr = errors.await.unwrap_or_default();
        let stderr = String::from_utf8_lossy(&stderr);
        let tail = stderr.trim_end();
        let start = tail.len().saturating_sub(MOST_MESSAGE);
        let start = (start..=tail.len())
            .find(|&i| tail.is_char_boundary(i))
            .unwrap_or(tail.len());
        Ok((status.code(), sink, tail[start..].to_owned()))
    }

    fn clone_paths(&self) -> ReviewStores {
        ReviewStores::new(
            self.program.clone(),
            self.root.clone(),
            self.scratch.clone(),
        )
    }

    /// One of the caller's [`MOST_HELPERS_PER_CALLER`] places, or 429.
    pub fn slot(&self, uid: u32) -> Result<Slot, ApiError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let count = running.entry(uid).or_default();
        if *count >= MOST_HELPERS_PER_CALLER {
            return Err(ApiError::new(
                429,
                "quota_full",
                format!("{MOST_HELPERS_PER_CALLER} listings, applies or discards of yours are under way"),
                "wait for them to end, then ask again",
            )
            .retry_after(1));
        }
        *count += 1;
        Ok(Slot {
            running: self.running.clone(),
            uid,
        })
    }
}

/// One helper's place in its caller's share, given back when dropped. A
/// listing streamed from spooled output keeps it until the answer is sent,
/// so a caller holds at most its share of spooled files.
#[derive(Debug)]
pub struct Slot {
    running: Running,
    uid: u32,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = running.get_mut(&self.uid) {
            *count -= 1;
            if *count == 0 {
                running.remove(&self.uid);
            }
        }
    }
}

/// What `POST /v1/runs/ID/apply` takes: the paths (none: all) and the
/// flags of `sandbox apply`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyRequest {
    /// Project paths; a directory names everything below it.
    #[serde(default)]
    pub paths: Vec<String>,
    /// What to allow beyond the defaults.
    #[serde(default)]
    pub allow: AllowFlags,
}

/// `sandbox apply`'s `--allow-*` flags.
#[derive(Debug, Default, Clone, Copy, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowFlags {
    /// `--allow-protected`.
    #[serde(default)]
    pub protected: bool,
    /// `--allow-ci`.
    #[serde(default)]
    pub ci: bool,
    /// `--allow-setid`.
    #[serde(default)]
    pub setid: bool,
    /// `--allow-outside-links`.
    #[serde(default)]
    pub outside_links: bool,
    /// `--allow-hardlinks`.
    #[serde(default)]
    pub hardlinks: bool,
    /// `--allow-secrets`.
    #[serde(default)]
    pub secrets: bool,
    /// `--allow-incomplete`.
    #[serde(default)]
    pub incomplete: bool,
}

/// Most paths one apply names.
const MOST_PATHS: usize = 10_000;

impl ApplyRequest {
    /// `sandbox apply`'s arguments for run `id`: flags first, then `--`,
    /// so that no path is taken for a flag.
    pub fn arguments(&self, id: &str) -> Result<Vec<String>, ApiError> {
        if self.paths.len() > MOST_PATHS {
            return Err(ApiError::bad_request(
                format!("paths: {} paths, more than {MOST_PATHS}", self.paths.len()),
                "name a directory to apply everything below it",
            ));
        }
        for path in &self.paths {
            if path.is_empty() || path.len() > 4096 || path.contains('\0') {
                return Err(ApiError::bad_request(
                    format!("paths: {path:?} is not a project path"),
                    "name paths below the project root, such as src/main.rs",
                ));
            }
        }
        let a = self.allow;
        let mut args = vec!["apply".to_owned(), "--json".to_owned()];
        for (on, flag) in [
            (a.protected, "--allow-protected"),
            (a.ci, "--allow-ci"),
            (a.setid, "--allow-setid"),
            (a.outside_links, "--allow-outside-links"),
            (a.hardlinks, "--allow-hardlinks"),
            (a.secrets, "--allow-secrets"),
            (a.incomplete, "--allow-incomplete"),
        ] {
            if on {
                args.push(flag.to_owned());
            }
        }
        args.push("--".to_owned());
        args.push(id.to_owned());
        args.extend(self.paths.iter().cloned());
        Ok(args)
    }
}

/// The review id a finished run's report names (its `run`), when it kept
/// changes.
pub fn review_id(report: Option<&serde_json::Value>) -> Option<String> {
    let review = report?.get("run")?;
    let kept = review.get("changes")?.as_u64()? > 0 || review.get("limit_reached")?.as_bool()?;
    let id = review.get("id")?.as_str()?;
    // The report comes from the caller's supervisor: an id is only ever
    // a name inside the caller's own store.
    let plain = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('-')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    (kept && plain && review.get("error").is_none_or(serde_json::Value::is_null))
        .then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_never_become_flags() {
        let request = ApplyRequest {
            paths: vec!["--allow-protected".into(), "a.txt".into()],
            allow: AllowFlags {
                ci: true,
                ..AllowFlags::default()
            },
        };
        let args = request.arguments("20261128-030301-be28").unwrap();
        let end = args.iter().position(|a| a == "--").unwrap();
        assert_eq!(&args[..end], ["apply", "--json", "--allow-ci"]);
        assert_eq!(
            &args[end + 1..],
            ["20261128-030301-be28", "--allow-protected", "a.txt"]
        );
        let bad = ApplyRequest {
            paths: vec!["a\0b".into()],
            ..ApplyRequest::default()
        };
        assert!(bad.arguments("x").is_err());
    }

    #[test]
    fn only_a_plain_id_of_a_run_that_kept_changes() {
        let report = |review: serde_json::Value| serde_json::json!({ "run": review });
        let kept = report(
            serde_json::json!({"id": "20261128-030301-be28", "changes": 2, "limit_reached": false, "error": null}),
        );
        assert_eq!(
            review_id(Some(&kept)).as_deref(),
            Some("20261128-030301-be28")
        );
        for bad in [
            serde_json::json!({"id": "../other", "changes": 2, "limit_reached": false, "error": null}),
            serde_json::json!({"id": "-x", "changes": 2, "limit_reached": false, "error": null}),
            serde_json::json!({"id": "a", "changes": 0, "limit_reached": false, "error": null}),
            serde_json::json!({"id": "a", "changes": 1, "limit_reached": false, "error": "lost"}),
        ] {
            assert_eq!(review_id(Some(&report(bad.clone()))), None, "{bad}");
        }
        assert_eq!(review_id(None), None);
    }
}
