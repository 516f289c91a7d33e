//! What a caller runs, hashed before it runs: stored grants are keyed by
//! this hash, so a grant given to one program does not carry over to a
//! changed one. It is taken in the supervisor before the sandbox is
//! created, from the files that will be executed: the program (and the
//! interpreters its `#!` line names), and for an interpreter the script it
//! is given (or the code on its command line);
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

/// How an interpreter reads its command line, as far as finding its script
/// needs: the options whose next argument is inline code, and the short
/// options that take no value (so that what follows them is the script,
/// not an option's value).
struct Syntax {
    code: &'static [&'static [u8]],
    flags: &'static [u8],
    /// `+o`-style options (the shells').
    plus_options: bool,
    /// The first operand is the program's text (awk), not a file.
    text_program: bool,
}

/// Programs that run the file (or code) named on their command line.
fn syntax(program: &Path) -> Option<Syntax> {
    let name = program.file_name()?.to_str()?;
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let syntax = |code, flags| Syntax {
        code,
        flags,
        plus_options: false,
        text_program: false,
    };
    Some(match base {
        "python" | "pypy" => syntax(&[b"-c", b"-m"], b"bBdEhiIOPqsSuvVx"),
        "node" | "nodejs" | "bun" => syntax(&[b"-e", b"--eval", b"-p", b"--print"], b""),
        // `deno run`: the subcommand is an operand that names no file.
        "deno" => syntax(&[], b""),
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "mksh" => Syntax {
            plus_options: true,
            ..syntax(&[b"-c"], b"abefhikmnprstuvxBCEHP")
        },
        "fish" => syntax(&[b"-c", b"--command"], b"ilnNP"),
        "perl" => syntax(&[b"-e", b"-E"], b"acilnpsStTuUwWX"),
        "ruby" => syntax(&[b"-e"], b"acdlnpsSvwW"),
        "php" => syntax(&[b"-r"], b"ahHilmqsvw"),
        "lua" | "luajit" => syntax(&[b"-e"], b"iEv"),
        "Rscript" => syntax(&[b"-e"], b""),
        "tclsh" => syntax(&[], b""),
        "awk" | "gawk" => Syntax {
            text_program: true,
            ..syntax(&[b"-e", b"--source"], b"")
        },
        _ => return None,
    })
}

impl Syntax {
    fn is_option(&self, arg: &[u8]) -> bool {
        arg.len() > 1 && (arg[0] == b'-' || (self.plus_options && arg[0] == b'+'))
    }

    /// Whether the option `arg` certainly does not take the next argument
    /// as its value.
    fn takes_no_value(&self, arg: &[u8]) -> bool {
        arg == b"--"
            || (arg.starts_with(b"--") && arg.contains(&b'='))
            || (!arg.starts_with(b"--") && arg[1..].iter().all(|c| self.flags.contains(c)))
    }
}

/// Open a regular file for hashing without blocking (a FIFO planted
/// where the script should be would otherwise hold the supervisor), and
/// through no `/proc` magic link: `/proc/self/cwd/...` names one file for
/// the supervisor and another for the payload, which reads it in its own
/// working directory, root and descriptors.
fn open_regular(path: &Path, follow: bool) -> Option<std::fs::File> {
    // O_PATH: no open() of a device or a FIFO runs before the type is known.
    let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
    if !follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let how = nix::fcntl::OpenHow::new()
        .flags(flags)
        .resolve(nix::fcntl::ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how).ok()?;
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

/// Where the walk of what runs goes: into the hash at once, or into a
/// [`Pinned`] identity whose hash is taken when first needed.
trait Sink {
    fn bytes(&mut self, bytes: &[u8]);
    /// A file's bytes, `None` past the budget or when it cannot be read.
    fn file(&mut self, file: std::fs::File, budget: &mut u64) -> Option<()>;
}

impl Sink for Sha256 {
    fn bytes(&mut self, bytes: &[u8]) {
        Digest::update(self, bytes);
    }

    fn file(&mut self, file: std::fs::File, budget: &mut u64) -> Option<()> {
        hash_file(self, file, budget)
    }
}

/// Most bytes a [`Pinned`] identity copies of the files the run could
/// change; past it the hash is taken at once.
const MAX_COPIED: u64 = 16 << 20;

enum Piece {
    Bytes(Vec<u8>),
    /// A file no sandbox of this caller can write, named by its real path
    /// and known by what `stat` said: opened and read when the hash is
    /// taken, and no hash at all if it is not the same file unchanged.
    /// Not held open: a daemon's caller may copy its supervisor's
    /// descriptors, and a supervisor holds no file of root's.
    Unwritable {
        path: PathBuf,
        seen: FileSeen,
    },
}

/// What identifies a file's content without reading it: the same inode,
/// with the same size and change times (a write or a rename sets the
/// change time, which no one can set back).
#[derive(PartialEq, Eq)]
struct FileSeen {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileSeen {
    fn of(meta: &std::fs::Metadata) -> FileSeen {
        use std::os::unix::fs::MetadataExt;
        FileSeen {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// What a caller runs, pinned before it starts, hashed when a grant, an
/// answer or the audit first needs it: the same hash as [`hash`]. Hashing
/// `/usr/bin/node` (99 MB) took about 60 ms of every run that could ask a
/// person, a daemon's runs included, and most never ask.
///
/// Files that no sandbox of this caller can write (root's, writable by
/// nobody else, the caller not root: no sandbox ever writes as host root
/// then) are read later, and give no hash if they changed meanwhile;
/// everything else (scripts, a
/// project's files, arguments) is copied now, as [`hash`] would read it
/// now. A skill's directory is hashed now.
pub struct Pinned {
    pieces: Vec<Piece>,
    budget: u64,
    copied: u64,
    caller_is_root: bool,
}

impl Sink for Pinned {
    fn bytes(&mut self, bytes: &[u8]) {
        match self.pieces.last_mut() {
            Some(Piece::Bytes(last)) => last.extend_from_slice(bytes),
            _ => self.pieces.push(Piece::Bytes(bytes.to_vec())),
        }
    }

    fn file(&mut self, file: std::fs::File, budget: &mut u64) -> Option<()> {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().ok()?;
        if meta.len() > *budget {
            return None;
        }
        *budget -= meta.len();
        if !self.caller_is_root && meta.uid() == 0 && meta.mode() & 0o022 == 0 {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
            if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{fd}")) {
                self.pieces.push(Piece::Unwritable {
                    path,
                    seen: FileSeen::of(&meta),
                });
                return Some(());
            }
        }
        let allowed = MAX_COPIED.saturating_sub(self.copied);
        // Read straight into the last piece, sized by what stat said: a
        // buffer of its own, grown by doubling and then copied over, was
        // three times the file's pages touched per run.
        if !matches!(self.pieces.last(), Some(Piece::Bytes(_))) {
            self.pieces.push(Piece::Bytes(Vec::new()));
        }
        let Some(Piece::Bytes(last)) = self.pieces.last_mut() else {
            return None;
        };
        let before = last.len();
        last.reserve(usize::try_from(meta.len().min(allowed)).unwrap_or(0) + 1);
        let read = file.take(allowed + 1).read_to_end(last);
        match read {
            Ok(read) if read as u64 <= allowed => {
                self.copied += read as u64;
                Some(())
            }
            _ => {
                last.truncate(before);
                // Too much to copy (or unreadable): the caller takes the
                // hash at once.
                if read.is_ok() {
                    self.copied = MAX_COPIED + 1;
                }
                None
            }
        }
    }
}

/// The identity of what `program` runs, pinned now (see [`Pinned`]); a
/// skill's directory, or files too large to copy, are hashed at once.
pub fn pin(program: &Program) -> CallerHash {
    pin_for(program, nix::unistd::geteuid().is_root())
}

fn pin_for(program: &Program, caller_is_root: bool) -> CallerHash {
    let Program::Command {
        candidates,
        args,
        cwd,
    } = program
    else {
        return CallerHash::taken(hash(program));
    };
    let mut pinned = Pinned {
        pieces: Vec::new(),
        budget: MAX_BYTES,
        copied: 0,
        caller_is_root,
    };
    let mut budget = pinned.budget;
    match walk_command(&mut pinned, candidates, args, cwd, &mut budget) {
        Some(()) => CallerHash {
            pinned: std::cell::RefCell::new(Some(pinned)),
            taken: std::cell::OnceCell::new(),
        },
        None if pinned.copied > MAX_COPIED => CallerHash::taken(hash(program)),
        None => CallerHash::taken(None),
    }
}

impl Pinned {
    fn hash(self) -> Option<String> {
        let mut hasher = Sha256::new();
        let mut budget = self.budget;
        for piece in self.pieces {
            match piece {
                Piece::Bytes(bytes) => Digest::update(&mut hasher, &bytes),
                Piece::Unwritable { path, seen } => {
                    let file = open_regular(&path, false)?;
                    if FileSeen::of(&file.metadata().ok()?) != seen {
                        return None;
                    }
                    hash_file(&mut hasher, file, &mut budget)?;
                }
            }
        }
        Some(hex(&hasher.finalize()))
    }
}

/// The caller's hash: none, pinned and not yet needed, or taken. Taken
/// at the first [`CallerHash::get`], which a decision made through a
/// shared borrow may make (hence the cells: the broker is one thread's).
#[derive(Default)]
pub struct CallerHash {
    pinned: std::cell::RefCell<Option<Pinned>>,
    taken: std::cell::OnceCell<Option<String>>,
}

impl CallerHash {
    /// A hash taken already (None: it could not be).
    pub fn taken(hash: Option<String>) -> CallerHash {
        CallerHash {
            pinned: std::cell::RefCell::new(None),
            taken: std::cell::OnceCell::from(hash),
        }
    }

    /// The hash, taken now if it was only pinned; None when it was not
    /// pinned (no grant could apply and nobody could be asked) or could
    /// not be taken.
    pub fn get(&self) -> Option<&str> {
        self.taken
            .get_or_init(|| self.pinned.borrow_mut().take().and_then(Pinned::hash))
            .as_deref()
    }
}

impl std::fmt::Debug for CallerHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.taken.get() {
            Some(hash) => write!(f, "{hash:?}"),
            None if self.pinned.borrow().is_some() => f.write_str("pinned"),
            None => f.write_str("None"),
        }
    }
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
        } => walk_command(&mut hasher, candidates, args, cwd, &mut budget)?,
        Program::Skill { dir } => hash_dir(&mut hasher, dir, &mut budget)?,
    }
    Some(hex(&hasher.finalize()))
}

fn walk_command(
    sink: &mut impl Sink,
    candidates: &[PathBuf],
    args: &[OsString],
    cwd: &Path,
    budget: &mut u64,
) -> Option<()> {
    // The first that exists is what runs: one that cannot be hashed as a
    // regular file gives no hash, rather than the hash of the next.
    let path = candidates
        .iter()
        .find(|p| std::fs::symlink_metadata(p).is_ok())?;
    let file = open_regular(path, true)?;
    sink.bytes(b"program\0");
    let mut interpreter = shebang(&file, cwd);
    sink.file(file, budget)?;
    // A script run by its `#!` line runs its interpreter, which may be the
    // project's to change (a virtualenv's `python`): hashed too, and its
    // own, as far as the kernel follows them.
    for _ in 0..MAX_SHEBANGS {
        let Some(path) = interpreter else { break };
        let file = open_regular(&path, true)?;
        sink.bytes(b"interpreter\0");
        interpreter = shebang(&file, cwd);
        sink.file(file, budget)?;
    }
    if interpreter.is_some() {
        return None;
    }
    if let Some(syntax) = syntax(path) {
        hash_operand(sink, &syntax, args, cwd, budget)?;
    }
    Some(())
}

/// How many `#!` interpreters in a chain the kernel runs (its
/// `MAX_BINPRM_DEPTH`, less the script itself).
const MAX_SHEBANGS: usize = 4;

/// The interpreter a `#!` line names (a relative one from the working
/// directory, where the kernel looks for it): the first word after `#!`
/// in the kernel's first 256 bytes.
fn shebang(file: &std::fs::File, cwd: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 256];
    let read = file.read_at(&mut head, 0).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = line.split(|&b| b == b'\n').next()?;
    let name = line
        .split(|&b| b == b' ' || b == b'\t')
        .find(|word| !word.is_empty())?;
    Some(cwd.join(std::ffi::OsStr::from_bytes(name)))
}

/// The script or inline code an interpreter is given, and every argument
/// before it (they change what runs: `-m module`, `-r file`). The script
/// is the first operand, but an operand right after an option that may
/// take a value (`-W ignore`, `-r ./preload.js`, `-o pipefail`) may be
/// that value instead: every file named up to the first certain operand is
/// hashed. Taking the first operand alone, a grant stayed with `python3
/// -W ignore tool.py` whatever `tool.py` became. A name that is there but
/// is no regular file reached without a magic link (a directory as in
/// `node .`, a FIFO, a link through `/proc/self`) gives no hash: what it
/// runs is not known here, and a hash without it would let a grant apply
/// whatever it runs.
fn hash_operand(
    hasher: &mut impl Sink,
    syntax: &Syntax,
    args: &[OsString],
    cwd: &Path,
    budget: &mut u64,
) -> Option<()> {
    let mut maybe_value = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let bytes = arg.as_bytes();
        hasher.bytes(b"arg\0");
        hasher.bytes(bytes);
        hasher.bytes(b"\0");
        if syntax.code.contains(&bytes) {
            if let Some(code) = iter.next() {
                hasher.bytes(b"code\0");
                hasher.bytes(code.as_bytes());
                hasher.bytes(b"\0");
            }
            return Some(());
        }
        if syntax.is_option(bytes) {
            maybe_value = !syntax.takes_no_value(bytes);
            continue;
        }
        let operand = !std::mem::replace(&mut maybe_value, false);
        let path = cwd.join(arg);
        match open_regular(&path, true) {
            Some(file) => {
                hasher.bytes(b"script\0");
                hasher.file(file, budget)?;
                if operand {
                    return Some(());
                }
            }
            None if operand && syntax.text_program => return Some(()),
            None if std::fs::symlink_metadata(&path).is_ok() => return None,
            None => {}
        }
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

    /// A payload that rewrites its script (or a program it can write) once
    /// it runs must not change the identity pinned before it started, and
    /// the pinned identity hashes exactly as `hash` did then.
    #[test]
    fn a_pinned_identity_is_what_ran_not_what_the_payload_rewrote() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let python = dir.path().join("python3");
        std::fs::write(&python, "interpreter").unwrap();
        std::fs::write(dir.path().join("a.py"), "print(1)").unwrap();
        let command = Program::Command {
            candidates: vec![python.clone()],
            args: vec!["-u".into(), "a.py".into()],
            cwd: dir.path().to_path_buf(),
        };
        let root = nix::unistd::geteuid().is_root();
        for (mode, owner, read_later) in [
            // Root's and writable by nobody else: read later.
            (0o755, 0, true),
            // Group-writable: copied now.
            (0o775, 0, false),
            // Another uid's: copied now.
            (0o755, 65_534, false),
        ] {
            if owner != 0 && !root {
                let why = "SKIP part of the test: chown needs root";
                assert!(std::env::var_os("SANDBOX_TEST_REQUIRE").is_none(), "{why}");
                eprintln!("{why}");
                continue;
            }
            std::fs::write(&python, "interpreter").unwrap();
            std::fs::write(dir.path().join("a.py"), "print(1)").unwrap();
            std::fs::set_permissions(&python, std::fs::Permissions::from_mode(mode)).unwrap();
            if root {
                std::os::unix::fs::chown(&python, Some(owner), None).unwrap();
                // The caller's own script.
                std::os::unix::fs::chown(dir.path().join("a.py"), Some(65_534), None).unwrap();
            }
            let before = hash(&command).unwrap();
            let pinned = pin_for(&command, false);
            let copied = pinned.pinned.borrow().as_ref().unwrap().copied;
            let read_later_here = root && owner == 0 && read_later;
            let expected = if read_later_here { 8 } else { 8 + 11 };
            assert_eq!(copied, expected, "mode {mode:o} owner {owner}");
            std::fs::write(dir.path().join("a.py"), "print(2)").unwrap();
            if !read_later_here {
                std::fs::write(&python, "rewritten!!").unwrap();
            }
            assert_eq!(
                pinned.get(),
                Some(before.as_str()),
                "mode {mode:o} owner {owner}"
            );
            if read_later_here {
                // Changed after all (only root could): no hash, so no grant.
                let pinned = pin_for(&command, false);
                std::fs::write(&python, "replaced by root").unwrap();
                assert_eq!(pinned.get(), None);
            }
        }
        // As root every file is copied: a sandbox of root may write as host
        // root through its idmapped trees.
        if root {
            std::os::unix::fs::chown(&python, Some(0), None).unwrap();
            std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::write(&python, "interpreter").unwrap();
            let pinned = pin_for(&command, true);
            assert_eq!(pinned.pinned.borrow().as_ref().unwrap().copied, 8 + 11);
        }
    }

    /// Found by an attacker: the script behind an option (`-E` taken for
    /// inline code, `-W ignore` for the script) was never hashed, so a
    /// grant outlived any rewrite of it.
    #[test]
    fn the_script_behind_an_option_is_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let hash_of = |program: &str, args: &[&str]| {
            let path = dir.path().join(program);
            std::fs::write(&path, "interpreter").unwrap();
            hash(&Program::Command {
                candidates: vec![path],
                args: args.iter().map(Into::into).collect(),
                cwd: dir.path().to_path_buf(),
            })
        };
        let cases: &[(&str, &[&str])] = &[
            ("python3", &["-E", "s"]),
            ("python3", &["-W", "ignore", "s"]),
            ("python3", &["-uW", "ignore", "s"]),
            ("python3", &["-X", "dev", "s", "arg"]),
            ("bash", &["-e", "s"]),
            ("bash", &["-p", "s"]),
            ("sh", &["-o", "errexit", "s"]),
            ("bash", &["+o", "posix", "s"]),
            ("node", &["-r", "pre.js", "s"]),
            ("node", &["--require", "pre.js", "s", "x"]),
            ("node", &["--no-warnings", "s"]),
            ("deno", &["run", "-A", "s"]),
            ("ruby", &["-I", "lib", "s"]),
            ("php", &["-c", "php.ini", "s"]),
        ];
        std::fs::write(dir.path().join("pre.js"), "preload").unwrap();
        for (program, args) in cases {
            std::fs::write(dir.path().join("s"), "granted").unwrap();
            let granted = hash_of(program, args);
            assert!(granted.is_some(), "{program} {args:?}");
            std::fs::write(dir.path().join("s"), "rewritten").unwrap();
            assert_ne!(hash_of(program, args), granted, "{program} {args:?}");
        }
        // A certain operand ends the walk: the script's own arguments do not
        // bind the grant.
        std::fs::write(dir.path().join("s"), "granted").unwrap();
        for (program, args) in [
            ("python3", &["-u", "s", "pre.js"][..]),
            ("bash", &["-ex", "s", "pre.js"]),
            ("node", &["s", "pre.js"]),
        ] {
            let granted = hash_of(program, args);
            std::fs::write(dir.path().join("pre.js"), "changed").unwrap();
            assert_eq!(hash_of(program, args), granted, "{program} {args:?}");
        }
        // `node .` runs what the directory names: not known here, no hash;
        // nor for a script reached through the supervisor's own `/proc`.
        assert_eq!(hash_of("node", &["."]), None);
        std::os::unix::fs::symlink("/proc/self/cwd/s", dir.path().join("link")).unwrap();
        assert_eq!(hash_of("python3", &["link"]), None);
        assert_eq!(hash_of("python3", &["-X", "dev", "link"]), None);
    }

    /// Found by an attacker: a `#!` script's interpreter was not hashed, so
    /// a grant given to the script went to whatever the project's
    /// interpreter (a virtualenv's `python`) became.
    #[test]
    fn a_scripts_interpreter_is_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let interpreter = dir.path().join("venv-python");
        let tool = dir.path().join("tool");
        std::fs::write(&interpreter, "interpreter").unwrap();
        std::fs::write(&tool, format!("#!{} -u\nprint(1)\n", interpreter.display())).unwrap();
        let command = |name: &Path| Program::Command {
            candidates: vec![name.to_path_buf()],
            args: vec![],
            cwd: dir.path().to_path_buf(),
        };
        let granted = hash(&command(&tool)).unwrap();
        std::fs::write(&interpreter, "impostor!!!").unwrap();
        assert_ne!(hash(&command(&tool)).unwrap(), granted);
        // Relative to the working directory, as the kernel finds it.
        std::fs::write(&tool, "#!venv-python\nprint(1)\n").unwrap();
        let granted = hash(&command(&tool)).unwrap();
        std::fs::write(&interpreter, "interpreter").unwrap();
        assert_ne!(hash(&command(&tool)).unwrap(), granted);
        // No interpreter there, or a chain longer than the kernel runs: no hash.
        std::fs::write(&tool, "#!missing\n").unwrap();
        assert_eq!(hash(&command(&tool)), None);
        std::fs::write(&tool, "#!tool\n").unwrap();
        assert_eq!(hash(&command(&tool)), None);
    }

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
        assert_eq!(
            hash(&command("fifo")),
            None,
            "a FIFO neither blocks nor gives a hash without its content"
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
