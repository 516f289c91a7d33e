//! The faces: `sandbox daemon`, `sandbox serve --mcp` and `sandbox oci`
//! (`sandbox-runc`) run from executables of their own, installed beside
//! `sandbox` (`sandbox-daemon`, `sandbox-mcp`, `sandbox-oci`), so that the
//! binary every cold `sandbox run` maps, relocates and starts does not carry
//! an HTTP server, SQLite or the MCP SDK (issue 31; scripts/bench-size).
//! The daemon's client commands (`sandbox ps`, `logs`, `cancel`,
//! `approvals`, and a run sent to a daemon with `--daemon` or
//! `SANDBOX_DAEMON`) run from `sandbox-daemon` too, so that `sandbox` links
//! no HTTP client or async runtime either: it only names the socket of a
//! run to tell a remote run from a local one (src/daemon_client).
//!
//! Each executable is this same command line (src/bin/*.rs call this crate's
//! `main`)
//! with its own face linked in: `main` is generic over [`Linked`], and a
//! face the executable does not link is a default method that execs the
//! executable which does, with the command line unchanged. The linker then
//! drops from each binary the code its `Linked` never names. The exec keeps
//! the pid, the environment and every descriptor not marked close-on-exec
//! (standard streams, `--report-fd N`, a systemd socket), so the face sees
//! the process its caller started.
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::{daemon::DaemonArgs, daemon_client::ClientCommand, serve::ServeArgs};

/// A command whose code lives in its own executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    Daemon,
    /// A client command of the daemon (`sandbox ps`...), named for messages.
    DaemonClient(&'static str),
    Mcp,
    Oci,
}

impl Face {
    /// The executable's file name.
    pub fn program(self) -> &'static str {
        match self {
            Face::Daemon | Face::DaemonClient(_) => "sandbox-daemon",
            Face::Mcp => "sandbox-mcp",
            Face::Oci => "sandbox-oci",
        }
    }

    fn command(self) -> &'static str {
        match self {
            Face::Daemon => "sandbox daemon",
            Face::DaemonClient(command) => command,
            Face::Mcp => "sandbox serve --mcp",
            Face::Oci => "sandbox oci",
        }
    }
}

/// The faces an executable runs in its own process; every other one is
/// handed to its executable by `exec`.
pub trait Linked {
    fn daemon(_args: DaemonArgs) -> anyhow::Result<i32> {
        Err(exec(Face::Daemon).into())
    }

    /// `sandbox ps`, `logs`, `cancel`, `approvals` and a run sent to a
    /// daemon: the daemon's client.
    fn daemon_client(command: ClientCommand) -> anyhow::Result<i32> {
        Err(exec(Face::DaemonClient(command.name())).into())
    }

    fn serve_mcp(_args: ServeArgs) -> anyhow::Result<i32> {
        Err(exec(Face::Mcp).into())
    }

    fn oci(_args: Vec<OsString>) -> i32 {
        eprintln!("sandbox: {:#}", anyhow::Error::from(exec(Face::Oci)));
        super::EXIT_SANDBOX_FAILED
    }
}

/// Why a face could not be executed.
#[derive(Debug, thiserror::Error)]
pub enum FaceError {
    #[error(
        "`{command}`: cannot find this executable (/proc/self/exe) to look beside it: {source}"
    )]
    OwnPath {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "`{command}` runs {program}, which is missing (looked for {tried}); \
         reinstall the sandbox package, or run `cargo build --release`, which builds every executable"
    )]
    Missing {
        command: &'static str,
        program: &'static str,
        tried: String,
    },
    #[error("`{command}`: executing {path}: {source}")]
    Exec {
        command: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Replace this process by `face`'s executable with the same arguments,
/// environment and descriptors (a systemd socket's LISTEN_FDS and
/// LISTEN_PID stay true: the pid does not change). Returns only on failure.
pub fn exec(face: Face) -> FaceError {
    use std::os::unix::process::CommandExt;
    let own = match std::fs::read_link("/proc/self/exe") {
        Ok(own) => own,
        Err(source) => {
            return FaceError::OwnPath {
                command: face.command(),
                source,
            }
        }
    };
    let candidates = candidates(&own, face);
    let Some(path) = candidates.iter().find(|path| path.is_file()) else {
        return FaceError::Missing {
            command: face.command(),
            program: face.program(),
            tried: candidates
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(" and "),
        };
    };
    let mut args = std::env::args_os();
    // argv[0] as given: `sandbox-runc` is recognised by it.
    let argv0 = args.next().unwrap_or_else(|| OsString::from("sandbox"));
    let source = std::process::Command::new(path)
        .arg0(&argv0)
        .args(args)
        .exec();
    FaceError::Exec {
        command: face.command(),
        path: path.clone(),
        source,
    }
}

/// Where `face`'s executable is looked for, in order: where the core looks
/// for the programs of this installation (`sandbox::installed`: beside the
/// running binary, then its prefix's libexec, never from PATH).
fn candidates(own: &Path, face: Face) -> Vec<PathBuf> {
    sandbox::installed::candidates(own, face.program())
}

/// Whether this program was started as `sandbox-runc` (a link to it), in
/// which case its whole command line is runc's.
pub fn started_as_runtime(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .is_some_and(|name| name == "sandbox-runc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faces_are_looked_for_beside_the_binary_then_in_its_libexec() {
        assert_eq!(
            candidates(Path::new("/usr/bin/sandbox"), Face::Daemon),
            [
                PathBuf::from("/usr/bin/sandbox-daemon"),
                PathBuf::from("/usr/libexec/sandbox/sandbox-daemon")
            ]
        );
        assert_eq!(
            candidates(Path::new("/usr/local/bin/sandbox"), Face::Oci),
            [
                PathBuf::from("/usr/local/bin/sandbox-oci"),
                PathBuf::from("/usr/local/libexec/sandbox/sandbox-oci")
            ]
        );
    }

    #[test]
    fn the_daemons_client_commands_run_from_the_daemons_executable() {
        let face = Face::DaemonClient("sandbox ps");
        assert_eq!(face.program(), Face::Daemon.program());
        assert_eq!(face.command(), "sandbox ps");
    }

    #[test]
    fn a_missing_face_names_where_it_looked_and_the_fix() {
        let err = FaceError::Missing {
            command: Face::Mcp.command(),
            program: Face::Mcp.program(),
            tried: "/a/sandbox-mcp and /libexec/sandbox/sandbox-mcp".into(),
        };
        let text = err.to_string();
        assert!(text.contains("/a/sandbox-mcp"), "{text}");
        assert!(text.contains("reinstall"), "{text}");
        assert!(text.contains("cargo build --release"), "{text}");
    }
}
