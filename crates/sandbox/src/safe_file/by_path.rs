//! Files opened by their path where only the last name may have been
//! replaced (the daemon's spool, the OCI runtime's state, a skill's
//! manifest): no link at that name is followed, no FIFO can hang the
//! open, and only a regular file is used.

use std::fs::File;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::{open_error, regular_file, Links, SafeFileError};

/// Open `path` for reading: never through a symbolic link at its last
/// name, never hanging on a FIFO, and only if it is a regular file. For a
/// file a supervisor left in the daemon's spool (a run's log) or one a
/// sandboxed run may have planted (a skill's manifest).
pub fn open_read(path: &Path) -> Result<File, SafeFileError> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(path, flags, Mode::empty()).map_err(|e| open_error(e, path))?;
    regular_file(fd, path, Links::Any)
}

/// Open `path` for appending, created with `mode` when missing: never
/// through a symbolic link at its last name, never hanging on a FIFO, and
/// only if it is a regular file with one name. For logs the daemon and
/// the OCI supervisor keep (a run's log and audit, a container's audit).
pub fn open_append(path: &Path, mode: u32) -> Result<File, SafeFileError> {
    open_appending(path, OFlag::O_WRONLY, mode)
}

/// As [`open_append`], also readable (to look at what the log ends with
/// before adding to it).
pub fn open_read_append(path: &Path, mode: u32) -> Result<File, SafeFileError> {
    open_appending(path, OFlag::O_RDWR, mode)
}

fn open_appending(path: &Path, access: OFlag, mode: u32) -> Result<File, SafeFileError> {
    let flags = access
        | OFlag::O_APPEND
        | OFlag::O_CREAT
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(path, flags, Mode::from_bits_truncate(mode))
        .map_err(|e| open_error(e, path))?;
    regular_file(fd, path, Links::One)
}

/// Create the file `path` with `mode` for writing; anything already at
/// the name (a symbolic link, a FIFO, a file) is refused by `O_EXCL`,
/// never followed or opened. For files the daemon and the OCI runtime
/// create in their own state (a run's stdin, the container init).
pub fn create_new(path: &Path, mode: u32) -> Result<File, SafeFileError> {
    let flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_EXCL
        | OFlag::O_NOFOLLOW
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(path, flags, Mode::from_bits_truncate(mode)).map_err(|source| {
        SafeFileError::Io {
            op: "creating",
            path: path.to_path_buf(),
            source: source.into(),
        }
    })?;
    Ok(File::from(fd))
}

impl From<SafeFileError> for std::io::Error {
    /// For callers that speak `io::Error`: the kind of the failed call is
    /// kept (a missing file stays `NotFound`), the text names the path.
    fn from(err: SafeFileError) -> std::io::Error {
        let kind = match &err {
            SafeFileError::Io { source, .. } => source.kind(),
            _ => std::io::ErrorKind::InvalidInput,
        };
        std::io::Error::new(kind, err)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;

    use nix::sys::stat::Mode;

    use super::*;

    /// A planted link to a canary and a FIFO (which would hang a blocking
    /// open) at the name: each opener refuses both at once and leaves the
    /// canary as it was.
    fn plant_link_and_fifo() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("canary");
        std::fs::write(&canary, "canary").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&canary, &link).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        (dir, canary, link, fifo)
    }

    #[test]
    fn open_read_refuses_a_link_and_a_fifo_and_reads_a_plain_file() {
        let (dir, canary, link, fifo) = plant_link_and_fifo();
        let err = open_read(&link).unwrap_err();
        assert!(matches!(err, SafeFileError::Symlink { .. }), "{err}");
        let err = open_read(&fifo).unwrap_err();
        assert!(
            matches!(err, SafeFileError::NotRegular { kind: "a FIFO", .. }),
            "{err}"
        );
        let err = open_read(dir.path()).unwrap_err();
        assert!(matches!(err, SafeFileError::NotRegular { .. }), "{err}");
        let missing = std::io::Error::from(open_read(&dir.path().join("missing")).unwrap_err());
        assert_eq!(missing.kind(), std::io::ErrorKind::NotFound);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut open_read(&canary).unwrap(), &mut text).unwrap();
        assert_eq!(text, "canary");
    }

    #[test]
    fn open_append_refuses_a_link_a_fifo_and_a_hard_link_and_appends() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, canary, link, fifo) = plant_link_and_fifo();
        for open in [open_append, open_read_append] {
            let err = open(&link, 0o600).unwrap_err();
            assert!(matches!(err, SafeFileError::Symlink { .. }), "{err}");
            let err = open(&fifo, 0o600).unwrap_err();
            assert!(matches!(err, SafeFileError::NotRegular { .. }), "{err}");
            let hard = dir.path().join("hard");
            std::fs::hard_link(&canary, &hard).unwrap();
            let err = open(&hard, 0o600).unwrap_err();
            assert!(
                matches!(err, SafeFileError::HardLinked { links: 2, .. }),
                "{err}"
            );
            std::fs::remove_file(&hard).unwrap();
        }
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "canary");
        let log = dir.path().join("log");
        open_append(&log, 0o600).unwrap().write_all(b"a").unwrap();
        open_read_append(&log, 0o600)
            .unwrap()
            .write_all(b"b")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "ab");
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }

    #[test]
    fn create_new_refuses_a_link_a_fifo_and_an_existing_file() {
        let (dir, canary, link, fifo) = plant_link_and_fifo();
        for existing in [&link, &fifo, &canary] {
            let err = create_new(existing, 0o600).unwrap_err();
            assert!(
                matches!(&err, SafeFileError::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::AlreadyExists),
                "{err}"
            );
        }
        assert_eq!(std::fs::read_to_string(&canary).unwrap(), "canary");
        let fresh = dir.path().join("fresh");
        create_new(&fresh, 0o600)
            .unwrap()
            .write_all(b"new")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&fresh).unwrap(), "new");
    }
}
