//! runc's command line, as far as `sandbox oci` must understand it: the
//! global flags, the command, and of `create`, `run` and `exec` every flag,
//! so that the container id and the bundle are never mistaken for a flag's
//! value. An unknown flag of those commands is refused rather than guessed
//! at; every other command goes to runc as it came.

use std::ffi::{OsStr, OsString};

use super::OciError;

/// runc's global flags that take a value (urfave/cli accepts `-flag` and
/// `--flag`, with the value after `=` or as the next argument).
const GLOBAL_VALUES: &[&str] = &["root", "log", "log-format", "criu", "rootless"];

/// A command line split at the command.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// Global flags, as given.
    pub global: Vec<OsString>,
    /// `--root`, when given.
    pub root: Option<OsString>,
    /// `--log`: where runc writes its messages, and where an engine reads
    /// why a command failed (containerd's shim reads this, not stderr).
    pub log: Option<OsString>,
    /// `--log-format` (`text` or `json`).
    pub log_format: Option<OsString>,
    /// The command (`create`, `start`, ...); None for `--version` and the like.
    pub command: Option<String>,
    /// Everything after the command, as given.
    pub rest: Vec<OsString>,
}

/// The name of a flag argument (`--bundle=x` → `bundle`), None for an operand.
fn flag_name(arg: &OsStr) -> Option<(String, Option<OsString>)> {
    let text = arg.to_str()?;
    let name = text.strip_prefix("--").or_else(|| text.strip_prefix('-'))?;
    if name.is_empty() {
        return None;
    }
    match name.split_once('=') {
        Some((name, value)) => Some((name.to_owned(), Some(OsString::from(value)))),
        None => Some((name.to_owned(), None)),
    }
}

/// Split `args` (without the program name).
pub fn split(args: &[OsString]) -> Invocation {
    let mut global = Vec::new();
    let (mut root, mut log, mut log_format) = (None, None, None);
    let mut at = 0;
    while at < args.len() {
        let Some((name, inline)) = flag_name(&args[at]) else {
            break;
        };
        global.push(args[at].clone());
        at += 1;
        if GLOBAL_VALUES.contains(&name.as_str()) {
            let value = match inline {
                Some(value) => Some(value),
                None => {
                    let value = args.get(at).cloned();
                    if let Some(value) = &value {
                        global.push(value.clone());
                        at += 1;
                    }
                    value
                }
            };
            match name.as_str() {
                "root" => root = value,
                "log" => log = value,
                "log-format" => log_format = value,
                _ => {}
            }
        }
    }
    Invocation {
        global,
        root,
        log,
        log_format,
        command: args.get(at).map(|c| c.to_string_lossy().into_owned()),
        rest: args.get(at + 1..).unwrap_or_default().to_vec(),
    }
}

/// `update`'s flags, every one taking a value (runc 1.1).
const UPDATE_FLAGS: &[&str] = &[
    "resources",
    "r",
    "blkio-weight",
    "cpu-period",
    "cpu-quota",
    "cpu-share",
    "cpu-rt-period",
    "cpu-rt-runtime",
    "cpuset-cpus",
    "cpuset-mems",
    "kernel-memory",
    "kernel-memory-tcp",
    "memory",
    "memory-reservation",
    "memory-swap",
    "pids-limit",
    "l3-cache-schema",
    "mem-bw-schema",
];

/// The flags of `create`, `run` and `exec` that take a value, and those
/// that do not, in runc 1.1's spelling (short forms included).
fn takes_value(command: &str, name: &str) -> Option<bool> {
    let valued: &[&str] = match command {
        "create" | "run" => &["bundle", "b", "console-socket", "pid-file", "preserve-fds"],
        "exec" => &[
            "console-socket",
            "cwd",
            "env",
            "e",
            "user",
            "u",
            "additional-gids",
            "g",
            "process",
            "p",
            "pid-file",
            "process-label",
            "apparmor",
            "cap",
            "c",
            "preserve-fds",
            "cgroup",
        ],
        "update" => UPDATE_FLAGS,
        _ => &[],
    };
    let boolean: &[&str] = match command {
        "create" => &["no-pivot", "no-new-keyring"],
        "run" => &[
            "no-pivot",
            "no-new-keyring",
            "detach",
            "d",
            "keep",
            "no-subreaper",
        ],
        "exec" => &["tty", "t", "detach", "d", "no-new-privs", "ignore-paused"],
        _ => &[],
    };
    if valued.contains(&name) {
        Some(true)
    } else if boolean.contains(&name) {
        Some(false)
    } else {
        None
    }
}

/// One flag of a parsed command: where it stood and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Flag {
    /// Its name without dashes (`bundle`, `b`).
    pub name: String,
    /// Its value, for flags that take one.
    pub value: Option<OsString>,
}

/// `create`, `run` or `exec` with their flags and operands.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The flags in order.
    pub flags: Vec<Flag>,
    /// The container id.
    pub id: String,
    /// What followed the id (`exec`'s command, which `sandbox oci` refuses).
    pub trailing: Vec<OsString>,
}

impl Parsed {
    /// The value of the last flag named any of `names`.
    pub fn value(&self, names: &[&str]) -> Option<&OsStr> {
        self.flags
            .iter()
            .rev()
            .find(|f| names.contains(&f.name.as_str()))
            .and_then(|f| f.value.as_deref())
    }

    /// The flags back as arguments, leaving out those named `without`.
    pub fn arguments_without(&self, without: &[&str]) -> Vec<OsString> {
        let mut args = Vec::new();
        for flag in &self.flags {
            if without.contains(&flag.name.as_str()) {
                continue;
            }
            let mut arg = OsString::from("--");
            arg.push(&flag.name);
            if let Some(value) = &flag.value {
                arg.push("=");
                arg.push(value);
            }
            args.push(arg);
        }
        args
    }

    /// `--preserve-fds`: how many descriptors after 2 go to the container.
    pub fn preserved_fds(&self) -> Result<i32, OciError> {
        match self.value(&["preserve-fds"]) {
            None => Ok(0),
            Some(value) => value
                .to_str()
                .and_then(|v| v.parse::<i32>().ok())
                .filter(|n| (0..=1000).contains(n))
                .ok_or_else(|| {
                    OciError::Usage(format!(
                        "--preserve-fds {value:?} is not a number of descriptors"
                    ))
                }),
        }
    }
}

/// Parse the arguments of `create`, `run` or `exec` after the command.
pub fn parse(command: &str, rest: &[OsString]) -> Result<Parsed, OciError> {
    let mut flags = Vec::new();
    let mut at = 0;
    let mut operands = Vec::new();
    while at < rest.len() {
        let arg = &rest[at];
        at += 1;
        if arg == "--" {
            operands.extend(rest[at..].iter().cloned());
            break;
        }
        let Some((name, inline)) = flag_name(arg) else {
            operands.push(arg.clone());
            // Everything after exec's id is its command, flags included.
            if command == "exec" {
                operands.extend(rest[at..].iter().cloned());
                break;
            }
            continue;
        };
        let value = match takes_value(command, &name) {
            None => {
                return Err(OciError::Usage(format!(
                    "`{command}` flag {arg:?} is not one sandbox oci knows; it refuses \
                     what it cannot check rather than pass it to runc unread"
                )))
            }
            Some(false) => {
                if inline.is_some() {
                    return Err(OciError::Usage(format!(
                        "`{command}` flag {name} takes no value"
                    )));
                }
                None
            }
            Some(true) => match inline {
                Some(value) => Some(value),
                None => {
                    let Some(value) = rest.get(at) else {
                        return Err(OciError::Usage(format!(
                            "`{command}` flag {name} needs a value"
                        )));
                    };
                    at += 1;
                    Some(value.clone())
                }
            },
        };
        flags.push(Flag { name, value });
    }
    let mut operands = operands.into_iter();
    let Some(id) = operands.next() else {
        return Err(OciError::Usage(format!("`{command}` needs a container id")));
    };
    let id = checked_id(&id)?;
    Ok(Parsed {
        flags,
        id,
        trailing: operands.collect(),
    })
}

/// A container id usable as a file name: runc's own rule (letters, digits,
/// `_ + - .`), and not `.` or `..`.
pub fn checked_id(id: &OsStr) -> Result<String, OciError> {
    let text = id.to_str().unwrap_or_default();
    let valid = !text.is_empty()
        && text != "."
        && text != ".."
        && text.len() <= 1024
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_+-.".contains(&b));
    if valid {
        Ok(text.to_owned())
    } else {
        Err(OciError::Usage(format!(
            "container id {id:?} is not valid: letters, digits, '_', '+', '-' and '.' only"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn global_flags_end_at_the_command() {
        let split = split(&os(&[
            "--root",
            "/run/x",
            "--log=/l",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/b",
            "id",
        ]));
        assert_eq!(split.root, Some(OsString::from("/run/x")));
        assert_eq!(split.log, Some(OsString::from("/l")));
        assert_eq!(split.command.as_deref(), Some("create"));
        assert_eq!(split.global.len(), 4);
        assert_eq!(split.rest, os(&["--bundle", "/b", "id"]));
    }

    #[test]
    fn create_flags_in_every_spelling_leave_the_id() {
        let parsed = parse(
            "create",
            &os(&["-b", "/b", "--pid-file=/p", "--no-pivot", "c1"]),
        )
        .unwrap();
        assert_eq!(parsed.id, "c1");
        assert_eq!(parsed.value(&["bundle", "b"]), Some(OsStr::new("/b")));
        assert_eq!(parsed.value(&["pid-file"]), Some(OsStr::new("/p")));
        assert_eq!(
            parsed.arguments_without(&["bundle", "b"]),
            os(&["--pid-file=/p", "--no-pivot"])
        );
    }

    #[test]
    fn exec_keeps_what_follows_the_id() {
        let parsed = parse(
            "exec",
            &os(&["--process", "/p.json", "c1", "sh", "-c", "x"]),
        )
        .unwrap();
        assert_eq!(parsed.id, "c1");
        assert_eq!(parsed.trailing, os(&["sh", "-c", "x"]));
    }

    #[test]
    fn unknown_flags_and_hostile_ids_are_refused() {
        for (command, args) in [
            ("create", vec!["--bundle-dir", "/b", "c1"]),
            ("create", vec!["--bundle", "/b", "../../etc"]),
            ("create", vec!["--bundle", "/b", ".."]),
            ("create", vec!["--bundle", "/b", "a/b"]),
            ("create", vec!["--bundle"]),
            ("create", vec!["--no-pivot=1", "c1"]),
            ("exec", vec!["--preserve-fds", "1"]),
        ] {
            assert!(parse(command, &os(&args)).is_err(), "{command} {args:?}");
        }
        let parsed = parse("create", &os(&["--preserve-fds", "-1", "c1"])).unwrap();
        assert!(parsed.preserved_fds().is_err());
    }
}
