//! What `sandbox oci` hands the init it puts in front of a container's
//! process, and what the init reports back.
//!
//! The runtime (on the host) decides everything: which paths are writable,
//! which filter to install, what to execute. The init (inside the
//! container, as the container's first program) only applies it. The plan
//! travels as one JSON argument, so both sides share these types.

use serde::{Deserialize, Serialize};

/// Where the runtime bind-mounts the init inside every container: below
/// the container's own `/dev` tmpfs, so the image's files are not touched.
pub const INIT_PATH: &str = "/dev/.sandbox-init";

/// The plan's format version; the init refuses any other.
pub const PLAN_VERSION: u32 = 1;

/// Exit status when the init could not apply a layer it was told to: the
/// container's process never ran. 125 is "the sandbox failed" across
/// `sandbox` (as `env`, `timeout` and container tools use it).
pub const SETUP_FAILED: i32 = 125;

/// Everything the init does, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Always [`PLAN_VERSION`].
    pub version: u32,
    /// The container's process: `args[0]` is looked up in the `PATH` of
    /// `env` when it has no `/`, as runc does.
    pub args: Vec<String>,
    /// The container's environment (`NAME=VALUE`). The init itself starts
    /// with an empty one, so the image cannot steer it.
    pub env: Vec<String>,
    /// Landlock rules; None when the profile turned Landlock off.
    pub landlock: Option<LandlockPlan>,
    /// Seccomp programs; None when the profile turned seccomp off.
    pub seccomp: Option<SeccompPlan>,
    /// The broker channel: the init writes its [`Report`] there as the
    /// first line, before the container's process can write anything.
    pub report_fd: Option<i32>,
    /// Refuse to start the process when an interface other than loopback
    /// is up in its network namespace (the profile's network mode is
    /// `none` or `loopback`). The spec shows a namespace the engine joined,
    /// not one it connects after `create` through a hook (Docker's bridge
    /// network); by the time the init runs, those hooks have run.
    #[serde(default)]
    pub loopback_only: bool,
}

/// Landlock rules inside the container.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockPlan {
    /// Fail unless every right is enforced (the profile's
    /// `enforce.landlock = "required"`); otherwise apply what the kernel
    /// has and report it.
    pub required: bool,
    /// Readable and executable beneath (normally `/`).
    pub read: Vec<String>,
    /// Writable beneath (volumes, `/tmp`, the working directory). Paths
    /// missing in the container are skipped: they hold nothing to write.
    pub write: Vec<String>,
    /// Device nodes readable and writable beneath (`/dev`: `/dev/null`,
    /// the terminal).
    pub devices: Vec<String>,
}

/// Seccomp programs, installed in order, after Landlock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeccompPlan {
    /// Fail when a program cannot be installed; otherwise report it.
    pub required: bool,
    /// Each program as [`encode_program`] writes it.
    pub programs: Vec<String>,
}

/// The first line the init writes to the broker channel: what is in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always `"sandbox.enforced"`.
    pub method: String,
    /// What was applied.
    pub params: Enforced,
}

/// What the init applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Enforced {
    /// `"full"`, `"partial"`, `"none"` (the kernel has none), or `"off"`.
    pub landlock: String,
    /// How many seccomp programs are installed (0: off).
    pub seccomp_programs: usize,
    /// no_new_privs is set.
    pub no_new_privs: bool,
    /// `"loopback-only"`: no interface but loopback was up when the
    /// process started; `"any"`: the profile allows a network, unchecked.
    pub network: String,
    /// The container's process, as executed.
    pub args: Vec<String>,
}

/// The method name of [`Report`].
pub const REPORT_METHOD: &str = "sandbox.enforced";

/// One BPF instruction as the kernel's `struct sock_filter` holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

impl From<libc::sock_filter> for Instruction {
    fn from(i: libc::sock_filter) -> Instruction {
        Instruction {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }
    }
}

impl From<Instruction> for libc::sock_filter {
    fn from(i: Instruction) -> libc::sock_filter {
        libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        }
    }
}

/// A program as text: 16 hex digits per instruction (code, jt, jf, k).
pub fn encode_program(program: &[Instruction]) -> String {
    program
        .iter()
        .map(|i| format!("{:04x}{:02x}{:02x}{:08x}", i.code, i.jt, i.jf, i.k))
        .collect()
}

/// The inverse of [`encode_program`]; None for anything it did not write.
pub fn decode_program(text: &str) -> Option<Vec<Instruction>> {
    if text.is_empty() || text.len() % 16 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let field = |at: usize, len: usize| u32::from_str_radix(text.get(at..at + len)?, 16).ok();
    (0..text.len() / 16)
        .map(|n| {
            let at = n * 16;
            Some(Instruction {
                code: u16::try_from(field(at, 4)?).ok()?,
                jt: u8::try_from(field(at + 4, 2)?).ok()?,
                jf: u8::try_from(field(at + 6, 2)?).ok()?,
                k: field(at + 8, 8)?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_survive_their_text_form() {
        let program = vec![
            Instruction {
                code: 0x20,
                jt: 0,
                jf: 0,
                k: 4,
            },
            Instruction {
                code: 0x15,
                jt: 1,
                jf: 255,
                k: 0xc000_003e,
            },
            Instruction {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: 0x7fff_0000,
            },
        ];
        let text = encode_program(&program);
        assert_eq!(text.len(), 48);
        assert_eq!(decode_program(&text), Some(program));
    }

    #[test]
    fn damaged_program_text_is_refused() {
        for bad in [
            "",
            "0020",
            "002000000000000g",
            "+02000000000000A",
            "ä0200000000000",
        ] {
            assert_eq!(decode_program(bad), None, "{bad:?}");
        }
    }
}
