//! A run's report read from a file for rating. The file is untrusted input
//! (a run may have written it into its own project): opened with the safe
//! opener (no FIFO hang, no device, no link at its last name), read up to
//! a bound, its version checked before its schema.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::spawn::Report;

/// The largest report read. A real one is a few kilobytes; secrets and
/// protected entries are listed by path, so a large project's is bigger.
pub const MAX_REPORT_BYTES: u64 = 16 << 20;

/// The report format this build reads.
const REPORT_VERSION: u64 = 1;

/// Why a report file cannot be rated.
#[derive(Debug, thiserror::Error)]
pub enum ReportFileError {
    /// It could not be opened as a regular file.
    #[error(
        "opening the report {path}: {source}; give the file `sandbox run --report FILE` wrote"
    )]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: crate::safe_file::SafeFileError,
    },
    /// Reading it failed.
    #[error(
        "reading the report {path}: {source}; give the file `sandbox run --report FILE` wrote"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is larger than any report.
    #[error("the report {path} is larger than {MAX_REPORT_BYTES} bytes, which no run writes; give the file `sandbox run --report FILE` wrote")]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// It is not JSON.
    #[error(
        "the report {path} is not JSON ({source}); give the file `sandbox run --report FILE` wrote"
    )]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A newer sandbox wrote it.
    #[error("the report {path} has format version {version}, newer than this sandbox reads ({REPORT_VERSION}); rate it with the sandbox that wrote it, or upgrade this one")]
    Newer {
        /// The file.
        path: PathBuf,
        /// Its version.
        version: u64,
    },
    /// It is JSON but not a report.
    #[error(
        "{path} is not a run's report: {source}; give the file `sandbox run --report FILE` wrote"
    )]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// What did not read.
        source: crate::spawn::report::UnreadableReport,
    },
}

/// Read the report at `path`.
pub fn read_report(path: &Path) -> Result<Report, ReportFileError> {
    let file = crate::safe_file::open_read(path).map_err(|source| ReportFileError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_REPORT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ReportFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > MAX_REPORT_BYTES {
        return Err(ReportFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    parse(path, &bytes)
}

/// A report from the bytes of `path`.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Report, ReportFileError> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|source| ReportFileError::NotJson {
            path: path.to_path_buf(),
            source,
        })?;
    if let Some(version) = value.get("version").and_then(serde_json::Value::as_u64) {
        if version > REPORT_VERSION {
            return Err(ReportFileError::Newer {
                path: path.to_path_buf(),
                version,
            });
        }
    }
    Report::read(&value).map_err(|source| ReportFileError::NotAReport {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_newer_and_foreign_reports_are_named_errors() {
        let path = Path::new("r.json");
        assert!(matches!(
            parse(path, b"\x00\xff not json"),
            Err(ReportFileError::NotJson { .. })
        ));
        assert!(matches!(
            parse(path, br#"{"version": 2, "anything": true}"#),
            Err(ReportFileError::Newer { version: 2, .. })
        ));
        assert!(matches!(
            parse(path, br#"{"version": 1}"#),
            Err(ReportFileError::NotAReport { .. })
        ));
        assert!(matches!(
            parse(path, b"[1, 2, 3]"),
            Err(ReportFileError::NotAReport { .. })
        ));
        let deep = "[".repeat(100_000);
        assert!(parse(path, deep.as_bytes()).is_err());
    }

    #[test]
    fn a_device_or_a_fifo_is_refused_without_hanging() {
        assert!(matches!(
            read_report(Path::new("/dev/zero")),
            Err(ReportFileError::Open { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(matches!(
            read_report(&fifo),
            Err(ReportFileError::Open { .. })
        ));
    }
}
