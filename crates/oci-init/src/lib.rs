//! What `sandbox oci` hands the init it puts in front of a container's
//! process, and what the init reports back.
//!
//! The runtime (on the host) decides everything: which paths are writable,
//! which filter to install, what to execute. The init (inside the
//! container, as the container's first program) only applies it. The plan
//! travels as the init's arguments and environment ([`Plan::to_exec`]), so
//! both sides share these types.

use serde::{Deserialize, Serialize};

/// Where the runtime bind-mounts the init inside every container: below
/// the container's own `/dev` tmpfs, so the image's files are not touched.
pub const INIT_PATH: &str = "/dev/.sandbox-init";

/// The plan's format version; the init refuses any other.
pub const PLAN_VERSION: u32 = 4;

/// Exit status when the init could not apply a layer it was told to: the
/// container's process never ran. 125 is "the sandbox failed" across
/// `sandbox` (as `env`, `timeout` and container tools use it).
pub const SETUP_FAILED: i32 = 125;

/// Everything the init does, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Always [`PLAN_VERSION`].
    pub version: u32,
    /// The container's process: `args[0]` is looked up in the `PATH` of
    /// `env` when it has no `/`, as runc does.
    pub args: Vec<String>,
    /// The container's environment (`NAME=VALUE`). It reaches the init
    /// under names of its own ([`ENV_PREFIX`]), which neither the C library
    /// nor the init reads as settings, so the image cannot steer the init.
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
    pub loopback_only: bool,
    /// The supplementary groups the spec gives the process
    /// (`process.user.additionalGids`, as ids inside the container): the
    /// init refuses to start it with any other that runc set.
    pub groups: Vec<u32>,
}

/// The names the process's environment entries have in the init's own
/// environment: `SANDBOX_PLAN_ENV_0=PATH=/bin`, in order.
pub const ENV_PREFIX: &str = "SANDBOX_PLAN_ENV_";

/// The plan's first argument: everything but the process's arguments,
/// which follow it one string each, and its environment.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    version: u32,
    /// How many entries of the process's environment the init's own
    /// environment holds under [`ENV_PREFIX`].
    env: usize,
    landlock: Option<LandlockPlan>,
    seccomp: Option<SeccompPlan>,
    report_fd: Option<i32>,
    loopback_only: bool,
    groups: Vec<u32>,
}

impl Plan {
    /// The init's arguments (after its path) and environment. The
    /// arguments are the plan's header as JSON, then each of the process's
    /// arguments; the environment is each of the process's entries, named
    /// [`ENV_PREFIX`] and its position.
    ///
    /// The environment does not travel in the arguments: everyone in the
    /// container's pid namespace reads a process's arguments in
    /// `/proc/PID/cmdline`, while `/proc/PID/environ` is its user's alone.
    /// An `exec` run as root with a secret in its environment would show it
    /// to the container's other users for as long as the init runs. Each
    /// string is its own (the kernel takes at most 128 KiB in one), so the
    /// init's limits are the process's own exec's.
    pub fn to_exec(&self) -> Result<(Vec<String>, Vec<String>), serde_json::Error> {
        let header = serde_json::to_string(&Header {
            version: self.version,
            env: self.env.len(),
            landlock: self.landlock.clone(),
            seccomp: self.seccomp.clone(),
            report_fd: self.report_fd,
            loopback_only: self.loopback_only,
            groups: self.groups.clone(),
        })?;
        let mut arguments = Vec::with_capacity(1 + self.args.len());
        arguments.push(header);
        arguments.extend(self.args.iter().cloned());
        let environment = self
            .env
            .iter()
            .enumerate()
            .map(|(n, entry)| format!("{ENV_PREFIX}{n}={entry}"))
            .collect();
        Ok((arguments, environment))
    }

    /// The plan [`Plan::to_exec`] wrote, from the init's arguments and its
    /// environment as `(name, value)` pairs (entries of other names, such
    /// as the `HOME` runc adds, are left out); the error says what is wrong.
    pub fn from_exec(
        mut arguments: Vec<String>,
        environment: Vec<(String, String)>,
    ) -> Result<Plan, String> {
        if arguments.is_empty() {
            return Err("no plan".to_owned());
        }
        let args = arguments.split_off(1);
        let header: Header =
            serde_json::from_str(&arguments[0]).map_err(|err| format!("its header: {err}"))?;
        if header.version != PLAN_VERSION {
            return Err(format!(
                "version {} (this init reads {PLAN_VERSION})",
                header.version
            ));
        }
        let mut env: Vec<Option<String>> = vec![None; header.env];
        for (name, value) in environment {
            let Some(position) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let slot = position
                .parse::<usize>()
                .ok()
                .filter(|n| n.to_string() == position)
                .and_then(|n| env.get_mut(n))
                .ok_or_else(|| {
                    format!(
                        "environment entry {name} is not one of the {} announced",
                        header.env
                    )
                })?;
            if slot.replace(value).is_some() {
                return Err(format!("environment entry {name} is given twice"));
            }
        }
        let env = env
            .into_iter()
            .enumerate()
            .map(|(n, entry)| {
                entry.ok_or_else(|| format!("environment entry {ENV_PREFIX}{n} is missing"))
            })
            .collect::<Result<Vec<String>, String>>()?;
        Ok(Plan {
            version: header.version,
            args,
            env,
            landlock: header.landlock,
            seccomp: header.seccomp,
            report_fd: header.report_fd,
            loopback_only: header.loopback_only,
            groups: header.groups,
        })
    }
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
    /// Device nodes readable and writable beneath: the ordinary character
    /// devices and the terminal (`/dev/null`, `/dev/pts`), never all of
    /// `/dev`, where a privileged engine leaves the host's disks.
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
    /// The Landlock scopes in force (`"signal"`, `"abstract-unix-socket"`:
    /// kernels with Landlock ABI 6 or later): the process signals, and
    /// connects to abstract sockets of, only processes of its own domain.
    #[serde(default)]
    pub landlock_scopes: Vec<String>,
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

    /// `environment` as the init reads its own: split at the first `=`.
    fn as_read(environment: &[String]) -> Vec<(String, String)> {
        environment
            .iter()
            .map(|e| {
                let (name, value) = e.split_once('=').unwrap();
                (name.to_owned(), value.to_owned())
            })
            .collect()
    }

    #[test]
    fn a_plan_survives_its_arguments_and_environment_and_a_damaged_one_is_refused() {
        let plan = Plan {
            version: PLAN_VERSION,
            args: vec!["/bin/sh".into(), "-c".into(), "{\"not\": json}".into()],
            env: vec![
                "PATH=/bin".into(),
                "BIG=".to_owned() + &"x".repeat(200_000),
                "PATH=/usr/bin".into(),
            ],
            landlock: None,
            seccomp: None,
            report_fd: Some(3),
            loopback_only: true,
            groups: vec![10, 2000],
        };
        let (arguments, environment) = plan.to_exec().unwrap();
        assert_eq!(arguments.len(), 4);
        // The environment is in no argument, and no argument is longer
        // than the process's own longest string.
        assert!(
            arguments.iter().all(|a| !a.contains("PATH")),
            "{arguments:?}"
        );
        assert!(arguments[0].len() < 1000, "{}", arguments[0]);
        assert_eq!(environment[0], "SANDBOX_PLAN_ENV_0=PATH=/bin");
        // runc adds HOME; the order the entries come in does not matter.
        let mut read = as_read(&environment);
        read.reverse();
        read.push(("HOME".into(), "/root".into()));
        assert_eq!(Plan::from_exec(arguments.clone(), read), Ok(plan.clone()));
        let no_env = Plan {
            env: Vec::new(),
            ..plan.clone()
        };
        let (bare, none) = no_env.to_exec().unwrap();
        assert!(none.is_empty());
        assert_eq!(Plan::from_exec(bare, Vec::new()), Ok(no_env));
        let refused = |environment: Vec<(String, String)>| {
            Plan::from_exec(arguments.clone(), environment).unwrap_err()
        };
        let mut missing = as_read(&environment);
        missing.remove(1);
        assert!(refused(missing).contains("SANDBOX_PLAN_ENV_1 is missing"));
        for extra in [
            "SANDBOX_PLAN_ENV_3",
            "SANDBOX_PLAN_ENV_01",
            "SANDBOX_PLAN_ENV_x",
        ] {
            let mut more = as_read(&environment);
            more.push((extra.into(), "A=1".into()));
            assert!(refused(more).contains(extra), "{extra}");
        }
        let mut twice = as_read(&environment);
        twice.push(("SANDBOX_PLAN_ENV_0".into(), "A=1".into()));
        assert!(refused(twice).contains("twice"));
        let mut old = arguments;
        old[0] = old[0].replace("\"version\":4", "\"version\":3");
        assert!(Plan::from_exec(old, Vec::new())
            .unwrap_err()
            .contains("version 3"));
        assert!(Plan::from_exec(Vec::new(), Vec::new()).is_err());
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
