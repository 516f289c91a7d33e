//! The sandbox's init is a clone of the supervisor, not a new program, so
//! its `/proc/1/cmdline` and `/proc/1/environ` show the supervisor's argv
//! and environment (secret file paths, the audit path, the person's
//! variables) to everything inside. Init overwrites both areas in its own
//! copy of memory; the kernel reports the areas' bounds in /proc/self/stat,
//! which the supervisor reads before clone (the clone has the same layout).

use std::sync::OnceLock;

/// `[arg_start, arg_end)` and `[env_start, env_end)` of this process.
#[derive(Debug, Clone, Copy)]
struct Areas {
    args: (usize, usize),
    env: (usize, usize),
}

static AREAS: OnceLock<Option<Areas>> = OnceLock::new();

/// The name init shows instead of the supervisor's command line.
const NAME: &[u8] = b"sandbox-init\0";

fn read_areas() -> Option<Areas> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces and parentheses);
    // the first one after it is field 3 of proc(5).
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<usize> = after
        .split_whitespace()
        .skip(45)
        .take(4)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    match fields[..] {
        [arg_start, arg_end, env_start, env_end]
            if arg_start > 0 && arg_start <= arg_end && env_start <= env_end =>
        {
            Some(Areas {
                args: (arg_start, arg_end),
                env: (env_start, env_end),
            })
        }
        _ => None,
    }
}

/// Read the bounds now, in the supervisor, before cloning init.
pub fn remember() {
    AREAS.get_or_init(read_areas);
}

/// In init: replace the command line by "sandbox-init" and blank the
/// environment area, and rename the process. Best effort: without known
/// bounds, or in a process with more than one thread (which could be
/// reading its environment meanwhile), nothing is written.
pub fn conceal() {
    let _ = nix::sys::prctl::set_name(c"sandbox-init");
    let Some(Some(areas)) = AREAS.get().copied() else {
        return;
    };
    if super::thread::require_single_thread().is_err() {
        return;
    }
    // SAFETY: the areas were read by `remember` in this process image (a
    // clone of the supervisor has its memory layout, and an exec would
    // have replaced AREAS with the image), and the process has one thread
    // (checked just above; only this thread could start another).
    unsafe { blank(areas) }
}

/// Write the name over the argv area and zeros over the environment area.
///
/// # Safety
///
/// `areas` must be the bounds the kernel reports (/proc/self/stat) for this
/// process image, and no other thread may run: another thread reading argv
/// or the environment while it is written would be a data race.
unsafe fn blank(areas: Areas) {
    let (arg_start, arg_end) = areas.args;
    let name = NAME.len().min(arg_end - arg_start);
    // SAFETY: the kernel reported these ranges for this process image (the
    // caller's contract): the argv and environment strings on the initial
    // stack, mapped writable, and unchanged by clone. No other thread runs
    // (the contract again). Nothing in init reads argv or the environment
    // afterwards (the payload's environment comes from the prepared plan),
    // and a libc `environ` entry pointing at zeroed bytes reads as an empty
    // string.
    unsafe {
        std::ptr::copy_nonoverlapping(NAME.as_ptr(), arg_start as *mut u8, name);
        std::ptr::write_bytes((arg_start + name) as *mut u8, 0, arg_end - arg_start - name);
        let (env_start, env_end) = areas.env;
        std::ptr::write_bytes(env_start as *mut u8, 0, env_end - env_start);
    }
}
