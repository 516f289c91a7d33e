//! What a caller runs, hashed before it runs: stored grants are keyed by
//! this hash, so a grant given to one program does not carry over to a
//! changed one. It is taken in the supervisor before the sandbox is
//! created, from the files that will be executed: the program, and for an
//! interpreter the script it is given (or the code on its command line);
//! for a skill, every file of its directory. Taken any later, the payload
//! could first rewrite its own script into the granted one.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use sha2::{Digest, Sha256};

/// Most files hashed for one skill directory, and most bytes in all.
const MAX_FILES: usize = 20_000;
const MAX_BYTES: u64 = 1 << 30;

/// What the caller runs.
#[derive(Debug, Clone)]
pub enum Program {
    /// A command: where the program may be (the first that is a regular
    /// file runs), its arguments, and its working directory on the host.
    Command {
        /// Candidate paths of the program, in lookup order.
        candidates: Vec<PathBuf>,
        /// Its arguments, without argv[0].
        args: Vec<OsString>,
        /// The working directory, for relative script paths.
        cwd: PathBuf,
    },
    /// A skill: its whole directory.
    Skill {
        /// The skill's directory.
        dir: PathBuf,
    },
}

/// Programs that run the file (or code) named by their first operand.
fn is_interpreter(program: &Path) -> bool {
    let Some(name) = program.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    matches!(
        base,
        "python"
            | "pypy"
            | "node"
            | "nodejs"
            | "deno"
            | "bun"
            | "sh"
            | "bash"
            | "dash"
            | "zsh"
            | "ksh"
            | "mksh"
            | "fish"
            | "perl"
            | "ruby"
            | "php"
            | "lua"
            | "luajit"
            | "Rscript"
            | "tclsh"
            | "awk"
            | "gawk"
    )
}

/// Open a regular file for hashing without blocking (a FIFO planted
/// where the script should be would otherwise hold the supervisor).
fn open_regular(path: &Path, follow: bool) -> Option<std::fs::File> {
    // O_PATH: no open() of a device or a FIFO runs before the type is known.
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let fd = nix::fcntl::open(path, flags, nix::sys::stat::Mode::empty()).ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return None;
    }
    let opened = nix::fcntl::open(
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)).as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    Some(std::fs::File::from(opened))
}

fn hash_file(hasher: &mut Sha256, file: std::fs::File, budget: &mut u64) -> Option<()> {
    let mut limited = file.take(*budget + 1);
    let copied = std::io::copy(&mut limited, hasher).ok()?;
    if copied > *budget {
        return None;
    }
    *budget -= copied;
    Some(())
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The hash of what `program` runs; None when it cannot be taken (no
/// regular file to run, or a skill directory over the bounds): then no
/// stored grant applies and none is stored.
pub fn hash(program: &Program) -> Option<String> {
    let mut hasher = Sha256::new();
    let mut budget = MAX_BYTES;
    match program {
        Program::Command {
            candidates,
            args,
            cwd,
        } => {
            let (path, file) = candidates
                .iter()
                .find_map(|p| open_regular(p, true).map(|f| (p, f)))?;
            hasher.update(b"program\0");
            hash_file(&mut hasher, file, &mut budget)?;
            if is_interpreter(path) {
                hash_operand(&mut hasher, args, cwd, &mut budget)?;
            }
        }
        Program::Skill { dir } => hash_dir(&mut hasher, dir, &mut budget)?,
    }
    Some(hex(&hasher.finalize()))
}

/// The script or inline code an interpreter is given: the first operand,
/// or the argument of `-c`/`-e`/`--eval` (whatever precedes it is hashed
/// too, as it changes what runs: `-m module`, `-r file`).
fn hash_operand(
    hasher: &mut Sha256,
    args: &[OsString],
    cwd: &Path,
    budget: &mut u64,
) -> Option<()> {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let bytes = arg.as_bytes();
        hasher.update(b"arg\0");
        hasher.update(bytes);
        hasher.update(b"\0");
        if matches!(
            bytes,
            b"-c" | b"-e" | b"--eval" | b"-E" | b"-m" | b"-p" | b"--print"
        ) {
            if let Some(code) = iter.next() {
                hasher.update(b"code\0");
                hasher.update(code.as_bytes());
                hasher.update(b"\0");
            }
            return Some(());
        }
        if bytes.starts_with(b"-") {
            continue;
        }
        let path = cwd.join(arg);
        if let Some(file) = open_regular(&path, true) {
            hasher.update(b"script\0");
            hash_file(hasher, file, budget)?;
        }
        return Some(());
    }
    Some(())
}

/// Every entry beneath `dir`, in name order, without following links.
fn hash_dir(hasher: &mut Sha256, dir: &Path, budget: &mut u64) -> Option<()> {
    let mut files = 0usize;
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(dir.join(&relative))
            .ok()?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(|e| e.file_name());
        // Pushed in reverse so that directories are walked in name order.
        let mut subdirs = Vec::new();
        for entry in entries {
            files += 1;
            if files > MAX_FILES {
                return None;
            }
            let path = relative.join(entry.file_name());
            let kind = entry.file_type().ok()?;
            if kind.is_dir() {
                hasher.update(b"dir\0");
                hasher.update(path.as_os_str().as_bytes());
                hasher.update(b"\0");
                subdirs.push(path);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(dir.join(&path)).ok()?;
                hasher.update(b"link\0");
                hasher.update(path.as_os_str().as_bytes());
                hasher.update(b"\0");
                hasher.update(target.as_os_str().as_bytes());
                hasher.update(b"\0");
            } else if kind.is_file() {
                let file = open_regular(&dir.join(&path), false)?;
                hasher.update(b"file\0");
                hasher.update(path.as_os_str().as_bytes());
                hasher.update(b"\0");
                hash_file(hasher, file, budget)?;
            } else {
                hasher.update(b"other\0");
                hasher.update(path.as_os_str().as_bytes());
                hasher.update(b"\0");
            }
        }
        stack.extend(subdirs.into_iter().rev());
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interpreter_is_hashed_with_its_script_and_a_skill_with_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.py"), "print(1)").unwrap();
        let python = dir.path().join("python3");
        std::fs::write(&python, "interpreter").unwrap();
        let command = |script: &str| Program::Command {
            candidates: vec![python.clone()],
            args: vec!["-u".into(), script.into()],
            cwd: dir.path().to_path_buf(),
        };
        let first = hash(&command("a.py")).unwrap();
        std::fs::write(dir.path().join("a.py"), "print(2)").unwrap();
        assert_ne!(hash(&command("a.py")), Some(first), "the script changed");
        nix::unistd::mkfifo(
            &dir.path().join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        assert!(
            hash(&command("fifo")).is_some(),
            "a FIFO neither blocks nor counts as a script"
        );
        let skill = Program::Skill {
            dir: dir.path().to_path_buf(),
        };
        let before = hash(&skill).unwrap();
        std::fs::write(dir.path().join("helper.sh"), "x").unwrap();
        assert_ne!(
            hash(&skill).unwrap(),
            before,
            "any file of the skill counts"
        );
    }
}
