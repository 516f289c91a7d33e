//! The `fs.*` actions. A request's path is resolved once, beneath the
//! project root (openat2 `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`), into a
//! descriptor; the decision is then made on the path that descriptor
//! actually names, and the action works on the descriptor. Nothing here may
//! block the supervisor: objects are opened `O_NONBLOCK` (a FIFO without a
//! writer opens at once) or `O_PATH`, and their type is checked on the
//! descriptor before any I/O.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use serde::Deserialize;
use serde_json::{json, Value};

use super::protocol::code;
use super::protocol::{fail, Failure};

/// Largest file content `fs.read` returns in one answer.
pub const READ_LIMIT: usize = 512 << 10;
/// Most entries `fs.list` returns.
const LIST_LIMIT: usize = 10_000;

/// `fs.read` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// The file.
    pub path: String,
    /// Where to start.
    #[serde(default)]
    pub offset: u64,
    /// How many bytes at most.
    pub length: Option<u64>,
}

/// `fs.write` parameters.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteParams {
    /// The file.
    pub path: String,
    /// Its new content.
    pub content: String,
    /// `utf-8` (default) or `base64`.
    #[serde(default)]
    pub encoding: Encoding,
    /// Append instead of replacing.
    #[serde(default)]
    pub append: bool,
}

/// How `content` is encoded.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub enum Encoding {
    /// Text.
    #[default]
    #[serde(rename = "utf-8")]
    Utf8,
    /// Bytes.
    #[serde(rename = "base64")]
    Base64,
}

/// Parameters of the actions that take only a path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathParams {
    /// The object.
    pub path: String,
}

/// An object opened `O_PATH` beneath the project root.
#[derive(Debug)]
pub struct Resolved {
    /// The descriptor.
    pub fd: OwnedFd,
    /// Its path relative to the project root.
    pub relative: String,
}

/// A name in a directory opened `O_PATH` beneath the project root: for
/// actions that create or remove the name itself.
#[derive(Debug)]
pub struct ResolvedName {
    /// The directory.
    pub dir: OwnedFd,
    /// The last component.
    pub name: OsString,
    /// The whole path relative to the project root.
    pub relative: String,
}

/// Resolves paths beneath one project root.
#[derive(Debug)]
pub struct Resolver {
    project: OwnedFd,
    project_path: PathBuf,
    hidden: Vec<PathBuf>,
    rules: crate::project::Rules,
    /// Paths the view hides and makes read-only beyond what the patterns
    /// name (the targets of secret and protected symlinks), absolute.
    secret_paths: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    /// Whose file-system ids the write actions take (uid, gid): the
    /// project root's owner when root's supervisor serves it.
    owner: Option<(u32, u32)>,
}

impl Resolver {
    /// A resolver for `project_path`; `hidden` and the secrets of `rules`
    /// are refused wherever a path leads, and its protected entries are
    /// never written: the broker must not do for the payload what its own
    /// view refuses it.
    pub fn new(
        project_path: &Path,
        hidden: &[PathBuf],
        rules: crate::project::Rules,
    ) -> std::io::Result<Resolver> {
        let project = nix::fcntl::open(
            project_path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(std::io::Error::from)?;
        let hidden = hidden
            .iter()
            .map(|h| {
                if h.is_absolute() {
                    h.clone()
                } else {
                    project_path.join(h)
                }
            })
            .collect();
        Ok(Resolver {
            project,
            project_path: project_path.to_path_buf(),
            hidden,
            rules,
            secret_paths: Vec::new(),
            read_only: Vec::new(),
            owner: None,
        })
    }

    /// Write, create and remove as the owner of the project root, as the
    /// sandbox does: root's sandbox writes its project through a mount
    /// idmapped to that owner, so what it creates is the owner's and what
    /// the owner may not touch it may not either. Without this, root's
    /// broker would leave root's files in someone else's project (which
    /// its owner then cannot change) and write what the owner may not.
    /// The owner is read from the root descriptor the resolver holds, the
    /// same directory the sandbox's idmapping takes it from.
    pub fn write_as_owner(&mut self) -> std::io::Result<()> {
        let st = nix::sys::stat::fstat(&self.project).map_err(std::io::Error::from)?;
        self.owner = Some((st.st_uid, st.st_gid));
        Ok(())
    }

    /// Take the owner's file-system ids on this thread until the guard is
    /// dropped (no-op when the writes are not the owner's). The resolution
    /// of a request's path runs under them as well as the action: the
    /// sandbox reads and looks up its project as the owner too, so root's
    /// 0600 file or 0700 directory in the project is no more the broker's
    /// to read, list or cross than the sandbox's. A new object is the
    /// owner's from its creation, so there is no later chown a swapped-in
    /// symlink could redirect.
    pub fn acting_as_owner(&self) -> Result<ActingAsOwner, Failure> {
        match self.owner {
            Some((uid, gid)) => ActingAsOwner::take(uid, gid),
            None => Ok(ActingAsOwner { previous: None }),
        }
    }

    /// The project root.
    pub fn project_path(&self) -> &Path {
        &self.project_path
    }

    /// The path relative to the project root that `path` (as asked) names
    /// before any resolution, for the decisions made before resolving.
    pub fn literal(&self, path: &str) -> String {
        let p = Path::new(path);
        p.strip_prefix(&self.project_path)
            .map(|r| r.to_string_lossy().into_owned())
            .unwrap_or_else(|_| path.to_owned())
    }

    /// Open `path` beneath the root with `flags`, refusing `..` escapes,
    /// absolute symlinks, magic links and hidden objects (by what was
    /// opened, not what was asked).
    pub fn object(&self, path: &str, flags: OFlag) -> Result<Resolved, Failure> {
        let (fd, real) = self.open_beneath(path, flags)?;
        Ok(Resolved {
            fd,
            relative: relative_display(&real, &self.project_path),
        })
    }

    /// Open the parent of `path` beneath the root; its last component must
    /// be a plain name. The action then works relative to the directory
    /// descriptor, so nothing can swap a symlink in between.
    pub fn name(&self, path: &str) -> Result<ResolvedName, Failure> {
        check_path(path)?;
        let requested = Path::new(path);
        let name = match requested.components().next_back() {
            Some(Component::Normal(name)) => name.to_os_string(),
            _ => {
                return Err(fail(
                    code::INVALID_PARAMS,
                    format!("{path}: the last component must be a name"),
                ))
            }
        };
        let parent = requested
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let parent = parent
            .to_str()
            .ok_or_else(|| fail(code::INVALID_PARAMS, "path is not UTF-8"))?;
        let (dir, real_dir) = self.open_beneath(parent, OFlag::O_PATH | OFlag::O_DIRECTORY)?;
        let real = real_dir.join(&name);
        self.refuse_hidden(&real, path)?;
        Ok(ResolvedName {
            dir,
            name,
            relative: relative_display(&real, &self.project_path),
        })
    }

    fn open_beneath(&self, path: &str, flags: OFlag) -> Result<(OwnedFd, PathBuf), Failure> {
        check_path(path)?;
        let requested = Path::new(path);
        let relative: &Path = if requested.is_absolute() {
            requested
                .strip_prefix(&self.project_path)
                .map_err(|_| denied_outside(path))?
        } else {
            requested
        };
        let relative = if relative.as_os_str().is_empty() {
            Path::new(".")
        } else {
            relative
        };
        // openat2 rejects flags O_PATH does not take (O_NOCTTY among them).
        let extra = if flags.contains(OFlag::O_PATH) {
            OFlag::O_CLOEXEC
        } else {
            OFlag::O_CLOEXEC | OFlag::O_NOCTTY
        };
        let how = crate::safe_file::Beneath::new(flags | extra);
        let opened = crate::safe_file::openat2_beneath(self.project.as_fd(), relative, how);
        let fd = opened.map_err(|errno| match errno {
            Errno::EXDEV | Errno::ELOOP => denied_outside(path),
            Errno::ENOENT | Errno::ENOTDIR => fail(
                code::NOT_FOUND,
                format!("{path}: no such file or directory"),
            ),
            Errno::EAGAIN => fail(
                code::RATE_LIMITED,
                format!("{path}: renames keep racing the lookup; try again"),
            ),
            other => fail(code::INTERNAL_ERROR, format!("{path}: {}", other.desc())),
        })?;
        // What was opened, not what was asked for: a symlink to a hidden file
        // must not reveal it.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| fail(code::INTERNAL_ERROR, format!("{path}: {e}")))?;
        self.refuse_hidden(&real, path)?;
        Ok((fd, real))
    }

    /// Refuse `real` (a resolved path) when the profile hides it.
    fn refuse_hidden(&self, real: &Path, path: &str) -> Result<(), Failure> {
        if let Some(hidden) = self.hidden.iter().find(|h| real.starts_with(h)) {
            let shown = hidden.strip_prefix(&self.project_path).unwrap_or(hidden);
            return Err(Failure {
                code: code::PERMISSION_DENIED,
                message: format!("{path} is hidden by the profile ({})", shown.display()),
                rule: Some("filesystem.hide".into()),
            });
        }
        if self.is_secret(real) {
            return Err(Failure {
                code: code::PERMISSION_DENIED,
                message: format!("{path} is a secret the profile hides"),
                rule: Some("filesystem.secrets".into()),
            });
        }
        Ok(())
    }

    fn is_secret(&self, real: &Path) -> bool {
        self.secret_paths.iter().any(|p| real.starts_with(p))
            || real
                .strip_prefix(&self.project_path)
                .is_ok_and(|rel| self.rules.secret_in(&rel.to_string_lossy()))
    }

    fn is_hidden(&self, real: &Path) -> bool {
        self.hidden.iter().any(|h| real.starts_with(h)) || self.is_secret(real)
    }

    /// Also hide these paths (below the project root) and refuse writes
    /// below those: what the scan of the project covered by following a
    /// symlink, which no pattern names.
    pub fn cover(&mut self, hidden: &[PathBuf], read_only: &[PathBuf]) {
        let absolute = |p: &PathBuf| self.project_path.join(p);
        let hidden: Vec<PathBuf> = hidden.iter().map(absolute).collect();
        let read_only: Vec<PathBuf> = read_only.iter().map(absolute).collect();
        self.secret_paths.extend(hidden);
        self.read_only.extend(read_only);
    }

    /// Refuse to create, change or remove `target` when it is, or is below,
    /// a protected entry (git hooks and config, editor settings, ...).
    pub fn refuse_protected(&self, target: &ResolvedName, path: &str) -> Result<(), Failure> {
        let real = self.project_path.join(&target.relative);
        if self.rules.protected_in(&target.relative)
            || self.read_only.iter().any(|p| real.starts_with(p))
        {
            return Err(Failure {
                code: code::PERMISSION_DENIED,
                message: format!(
                    "{path} is protected: the host acts on it later, so it is read-only for the sandbox"
                ),
                rule: Some("filesystem.protect".into()),
            });
        }
        Ok(())
    }

    /// The path shown for an object beneath the root.
    pub fn display(&self, real: &Path) -> String {
        relative_display(real, &self.project_path)
    }
}

/// The thread's file-system ids taken for the broker's file actions,
/// given back when dropped. setfsuid and setfsgid change the calling
/// thread only and report no error, so each is read back; leaving uid 0
/// drops the thread's file capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN,
/// CAP_FOWNER...), and returning to it restores them. They leave the
/// supplementary groups alone, and root's (group 0 from a login, a
/// service's SupplementaryGroups=) would still open a file those groups
/// may write: the thread drops them too, as the sandbox has none. And
/// on a project of root's the owner's uid is 0, where setfsuid drops
/// nothing, while the sandbox writes it as root without capabilities: the
/// thread's effective capabilities are cleared for the call as well.
#[derive(Debug)]
pub struct ActingAsOwner {
    previous: Option<Previous>,
}

/// What [`ActingAsOwner`] gives back.
#[derive(Debug)]
struct Previous {
    uid: nix::unistd::Uid,
    gid: nix::unistd::Gid,
    groups: Vec<nix::unistd::Gid>,
    effective: caps::CapsHashSet,
}

impl ActingAsOwner {
    fn take(uid: u32, gid: u32) -> Result<ActingAsOwner, Failure> {
        use nix::unistd::{setfsgid, setfsuid, Gid, Uid};
        let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
        let refused = |what: &str| {
            fail(
                code::INTERNAL_ERROR,
                format!(
                    "cannot take the project owner's {what} ({uid}:{gid}) for the write; \
                     run sandbox as the project's owner"
                ),
            )
        };
        let effective =
            caps::read(None, caps::CapSet::Effective).map_err(|_| refused("capabilities"))?;
        let groups = nix::unistd::getgroups().map_err(|_| refused("groups"))?;
        crate::sys::creds::set_thread_groups(&[]).map_err(|_| refused("groups"))?;
        let previous_gid = setfsgid(gid);
        if setfsgid(gid) != gid {
            setfsgid(previous_gid);
            let _ = crate::sys::creds::set_thread_groups(&groups);
            return Err(refused("group"));
        }
        let previous_uid = setfsuid(uid);
        if setfsuid(uid) != uid {
            setfsuid(previous_uid);
            setfsgid(previous_gid);
            let _ = crate::sys::creds::set_thread_groups(&groups);
            return Err(refused("user"));
        }
        let acting = ActingAsOwner {
            previous: Some(Previous {
                uid: previous_uid,
                gid: previous_gid,
                groups,
                effective,
            }),
        };
        // Last: the steps above need CAP_SETUID and CAP_SETGID. Should
        // this fail, dropping `acting` gives everything back.
        caps::clear(None, caps::CapSet::Effective).map_err(|_| refused("capabilities"))?;
        Ok(acting)
    }
}

impl Drop for ActingAsOwner {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            // First: setfsuid and setgroups need CAP_SETUID and CAP_SETGID.
            let _ = caps::set(None, caps::CapSet::Effective, &previous.effective);
            nix::unistd::setfsuid(previous.uid);
            nix::unistd::setfsgid(previous.gid);
            // Should this fail, the thread keeps fewer groups than it had:
            // less, never more, than root may.
            let _ = crate::sys::creds::set_thread_groups(&previous.groups);
        }
    }
}

/// `fs.stat`.
pub fn stat(object: &Resolved) -> Result<Value, Failure> {
    let st = nix::sys::stat::fstat(&object.fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symlink",
        _ => "other",
    };
    Ok(json!({
        "path": object.relative,
        "type": kind,
        "size": st.st_size,
        "mode": st.st_mode & 0o7777,
        "modified": st.st_mtime,
    }))
}

/// How `fs.read` opens: never waiting (a FIFO without a writer would hold
/// the open, then the read), the type checked on the descriptor after.
pub const READ_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_NONBLOCK);
/// How `fs.list` opens (O_DIRECTORY fails on anything else before any open).
pub const LIST_FLAGS: OFlag = OFlag::O_RDONLY.union(OFlag::O_DIRECTORY);

/// `fs.read` on an object opened with [`READ_FLAGS`]: regular files only,
/// at most [`READ_LIMIT`] bytes.
pub fn read(object: &Resolved, params: &ReadParams) -> Result<Value, Failure> {
    use base64::Engine;
    let fd = &object.fd;
    let st = nix::sys::stat::fstat(fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(fail(
            code::INVALID_PARAMS,
            "fs.read reads regular files only",
        ));
    }
    let length = params
        .length
        .map_or(READ_LIMIT, |l| l.min(READ_LIMIT as u64) as usize);
    let offset = i64::try_from(params.offset)
        .map_err(|_| fail(code::INVALID_PARAMS, "offset is past any file"))?;
    let available = (st.st_size.max(0) as u64).saturating_sub(params.offset);
    let mut content = vec![0u8; length.min(available as usize)];
    let mut filled = 0;
    while filled < content.len() {
        match nix::sys::uio::pread(fd, &mut content[filled..], offset + filled as i64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => break,
            Err(e) => return Err(fail(code::INTERNAL_ERROR, e.desc())),
        }
    }
    content.truncate(filled);
    let truncated = params.offset + (filled as u64) < st.st_size as u64;
    // Text whose JSON escapes would outgrow base64 (control characters
    // become six bytes each) goes as base64: an answer's encoded size
    // stays within 4/3 of the bytes read.
    let (text, encoding) = match String::from_utf8(content) {
        Ok(text) if escaped_len(&text) <= text.len() / 3 * 4 + 4 => (text, "utf-8"),
        Ok(text) => (
            base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
            "base64",
        ),
        Err(e) => (
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            "base64",
        ),
    };
    Ok(json!({
        "path": object.relative,
        "content": text,
        "encoding": encoding,
        "size": st.st_size,
        "truncated": truncated,
    }))
}

/// The length of `text` as a JSON string body.
fn escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

/// `fs.list` on an object opened with [`LIST_FLAGS`]: at most
/// [`LIST_LIMIT`] entries, hidden ones left out.
pub fn list(resolver: &Resolver, object: Resolved) -> Result<Value, Failure> {
    let real = resolver.project_path().join(&object.relative);
    let mut dir =
        nix::dir::Dir::from_fd(object.fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
    let mut entries = Vec::new();
    for entry in dir.iter().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "." || name == ".." {
            continue;
        }
        if resolver.is_hidden(&real.join(&name)) {
            continue;
        }
        let kind = match entry.file_type() {
            Some(nix::dir::Type::Directory) => "directory",
            Some(nix::dir::Type::File) => "file",
            Some(nix::dir::Type::Symlink) => "symlink",
            _ => "other",
        };
        entries.push(json!({ "name": name, "type": kind }));
        if entries.len() >= LIST_LIMIT {
            break;
        }
    }
    Ok(json!({ "path": object.relative, "entries": entries }))
}

/// `fs.write`: a regular file with one link, never through a symlink.
pub fn write(target: &ResolvedName, params: &WriteParams) -> Result<Value, Failure> {
    use base64::Engine;
    let bytes = match params.encoding {
        Encoding::Utf8 => params.content.as_bytes().to_vec(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(&params.content)
            .map_err(|e| fail(code::INVALID_PARAMS, format!("content is not base64: {e}")))?,
    };
    // No O_TRUNC here: the link count is checked on the opened file first.
    // O_NONBLOCK: an existing FIFO with no reader fails at once (ENXIO)
    // instead of holding the supervisor until one comes.
    let mut flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY
        | OFlag::O_NONBLOCK;
    if params.append {
        flags |= OFlag::O_APPEND;
    }
    let fd = nix::fcntl::openat(
        &target.dir,
        target.name.as_os_str(),
        flags,
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .map_err(|e| match e {
        Errno::ELOOP => fail(
            code::PERMISSION_DENIED,
            "the target is a symlink; fs.write does not follow links",
        ),
        Errno::ENXIO | Errno::EISDIR => {
            fail(code::INVALID_PARAMS, "fs.write writes regular files only")
        }
        Errno::EACCES | Errno::EPERM => owner_may_not(target),
        other => fail(code::INTERNAL_ERROR, other.desc()),
    })?;
    let st = nix::sys::stat::fstat(&fd).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(fail(
            code::INVALID_PARAMS,
            "fs.write writes regular files only",
        ));
    }
    if st.st_nlink > 1 {
        // A hard link may lead to a file outside the project.
        return Err(Failure {
            code: code::PERMISSION_DENIED,
            message: "the target has more than one hard link; writing it could change a file outside the project".into(),
            rule: Some("hard links".into()),
        });
    }
    if !params.append {
        nix::unistd::ftruncate(&fd, 0).map_err(|e| fail(code::INTERNAL_ERROR, e.desc()))?;
    }
    let mut written = 0;
    while written < bytes.len() {
        match nix::unistd::write(&fd, &bytes[written..]) {
            Ok(n) => written += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(fail(code::INTERNAL_ERROR, e.desc())),
        }
    }
    Ok(json!({ "path": target.relative, "written": written }))
}

/// `fs.mkdir`.
pub fn mkdir(target: &ResolvedName) -> Result<Value, Failure> {
    nix::sys::stat::mkdirat(
        &target.dir,
        target.name.as_os_str(),
        nix::sys::stat::Mode::from_bits_truncate(0o755),
    )
    .map_err(|e| match e {
        Errno::EEXIST => fail(code::INVALID_PARAMS, "it already exists"),
        Errno::EACCES | Errno::EPERM => owner_may_not(target),
        other => fail(code::INTERNAL_ERROR, other.desc()),
    })?;
    Ok(json!({ "path": target.relative }))
}

/// `fs.delete`: a file, or an empty directory.
pub fn delete(target: &ResolvedName) -> Result<Value, Failure> {
    let flag = match nix::sys::stat::fstatat(
        &target.dir,
        target.name.as_os_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    ) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
            nix::unistd::UnlinkatFlags::RemoveDir
        }
        Ok(_) => nix::unistd::UnlinkatFlags::NoRemoveDir,
        Err(_) => return Err(fail(code::NOT_FOUND, "no such file or directory")),
    };
    nix::unistd::unlinkat(&target.dir, target.name.as_os_str(), flag).map_err(|e| match e {
        Errno::ENOTEMPTY => fail(
            code::INVALID_PARAMS,
            "the directory is not empty (fs.delete is not recursive)",
        ),
        Errno::EACCES | Errno::EPERM => owner_may_not(target),
        other => fail(code::INTERNAL_ERROR, other.desc()),
    })?;
    Ok(json!({ "path": target.relative }))
}

/// A path may not hold a NUL byte.
fn check_path(path: &str) -> Result<(), Failure> {
    if path.contains('\0') {
        return Err(fail(code::INVALID_PARAMS, "the path contains a NUL byte"));
    }
    Ok(())
}

/// The file permissions refused the write to whoever the broker writes as.
fn owner_may_not(target: &ResolvedName) -> Failure {
    Failure {
        code: code::PERMISSION_DENIED,
        message: format!(
            "{}: permission denied (the broker writes with the rights of the project's owner, as the sandbox does)",
            target.relative
        ),
        rule: Some("file permissions".into()),
    }
}

fn denied_outside(path: &str) -> Failure {
    Failure {
        code: code::PERMISSION_DENIED,
        message: format!("{path} is outside the project root"),
        rule: Some("project root".into()),
    }
}

fn relative_display(real: &Path, project: &Path) -> String {
    let relative = real.strip_prefix(project).unwrap_or(real);
    let shown: PathBuf = relative
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if shown.as_os_str().is_empty() {
        ".".into()
    } else {
        OsStr::from_bytes(shown.as_os_str().as_bytes())
            .to_string_lossy()
            .into_owned()
    }
}
