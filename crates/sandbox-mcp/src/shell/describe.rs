//! What the tool tells an agent before it calls: the argument and result
//! schemas, and a description of the sandbox read from the profile.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::request::millis;
use super::ShellConfig;
use sandbox::profile::policy::{NetworkMode, ProjectAccess};
use sandbox::profile::size::{format_duration, format_size};

/// The JSON schema of the tool's arguments.
pub fn input_schema(config: &ShellConfig) -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {
                "type": "string",
                "minLength": 1,
                "description": "The command line, run by /bin/sh -c in the project directory, with no input (stdin is empty)."
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 1,
                "maximum": millis(config.timeout_ceiling()),
                "description": format!(
                    "Wall-clock limit in milliseconds (default {}): the command gets SIGTERM, then SIGKILL 2 s later.",
                    millis(config.effective_default_timeout())
                )
            },
            "review": {
                "type": "boolean",
                "description": "Keep every change the command makes to the project in a layer of its own instead of writing the project: the result summarizes them (review); the person applies them with sandbox apply."
            }
        },
        "required": ["command"],
        "additionalProperties": false
    })
}

/// The JSON schema of the tool's structured result ([`ShellOutcome::structured`](super::ShellOutcome::structured)).
pub fn output_schema() -> Value {
    let count =
        |description: &str| json!({"type": "integer", "minimum": 0, "description": description});
    json!({
        "type": "object",
        "properties": {
            "exit_code": {"type": ["integer", "null"], "description": "The command's exit code; null when a signal ended it or it never ran."},
            "signal": {"type": ["integer", "null"], "description": "The signal that ended the command, if one did."},
            "timed_out": {"type": "boolean", "description": "The timeout ended the command."},
            "timeout_ms": {"type": "integer", "minimum": 1, "description": "The timeout the command ran under."},
            "stdout": {"type": "string", "description": "The start of standard output (invalid UTF-8 replaced)."},
            "stderr": {"type": "string", "description": "The start of standard error (invalid UTF-8 replaced)."},
            "stdout_truncated": {"type": "boolean", "description": "stdout holds only the first stdout_shown_bytes of stdout_bytes."},
            "stderr_truncated": {"type": "boolean", "description": "stderr holds only the first stderr_shown_bytes of stderr_bytes."},
            "stdout_bytes": count("Bytes the command wrote to stdout in all."),
            "stderr_bytes": count("Bytes the command wrote to stderr in all."),
            "stdout_shown_bytes": count("Bytes of stdout returned."),
            "stderr_shown_bytes": count("Bytes of stderr returned."),
            "sandbox_error": {"type": ["string", "null"], "description": "Why the sandbox could not run the command; null when it ran."},
            "review": {"type": ["object", "null"], "description": "A review run's changes, read from the layer it wrote (never from its output): run id, counts (added, modified, deleted), a headline per path (listed, at most 100), and how to apply them; null when the run was not in review mode."}
        },
        "required": [
            "exit_code", "signal", "timed_out", "timeout_ms", "stdout", "stderr",
            "stdout_truncated", "stderr_truncated", "stdout_bytes", "stderr_bytes",
            "stdout_shown_bytes", "stderr_shown_bytes", "sandbox_error", "review"
        ],
        "additionalProperties": false
    })
}

/// The tool's description: what the command may do in the sandbox, read
/// from the profile, so that an agent knows before it tries.
pub fn description(config: &ShellConfig) -> String {
    let policy = &config.policy;
    let fs = &policy.filesystem;
    let project = config.project.display();
    let mut out = format!(
        "Run a command line with /bin/sh -c inside a sandbox (profile \"{}\"), in the project directory {project}, and get its exit code, stdout and stderr. ",
        policy.name
    );
    out.push_str(match fs.project {
        ProjectAccess::ReadWrite => "The command can read and write the project",
        ProjectAccess::ReadOnly => "The command can read the project but not change it",
        ProjectAccess::Empty => {
            "The command cannot see the project's files (the directory is empty and read-only)"
        }
    });
    if fs.project != ProjectAccess::Empty && !fs.secrets.is_empty() {
        out.push_str(&format!(
            "; secret files in it read as empty ({})",
            pattern_list(&fs.secrets)
        ));
    }
    if fs.project == ProjectAccess::ReadWrite && !fs.protect.is_empty() {
        out.push_str(&format!(
            "; these stay read-only: {}",
            pattern_list(&fs.protect)
        ));
    }
    out.push_str(". ");
    let readable: Vec<&Path> = fs
        .read
        .iter()
        .chain(fs.read_if_exists.iter().filter(|path| path.exists()))
        .map(PathBuf::as_path)
        .collect();
    let readable = path_summary(&readable);
    if !readable.is_empty() {
        out.push_str(&format!(
            "Also readable, never writable: {}",
            readable.join(", ")
        ));
        if !fs.hide.is_empty() {
            let hidden: Vec<String> = fs.hide.iter().map(|p| p.display().to_string()).collect();
            out.push_str(&format!(" (except {})", hidden.join(", ")));
        }
        out.push_str(". ");
    }
    if !fs.write.is_empty() {
        let writable: Vec<String> = fs.write.iter().map(|p| p.display().to_string()).collect();
        out.push_str(&format!("Also writable: {}. ", writable.join(", ")));
    }
    out.push_str(&format!(
        "Nothing else of the host is visible; /tmp is private and empty ({}), and is gone after the call. ",
        format_size(fs.tmp_size)
    ));
    out.push_str(match policy.network.mode {
        NetworkMode::None => "No network at all. ",
        NetworkMode::Loopback => {
            "No network beyond the sandbox's own loopback (127.0.0.1 inside; nothing leaves the sandbox). "
        }
        NetworkMode::Allowlist => {
            "No network but a proxy (HTTP_PROXY, HTTPS_PROXY and ALL_PROXY are set) to the hosts the profile lists and those a person approves. "
        }
        NetworkMode::Host => "The host's network is available (no network isolation). ",
    });
    let mut env: Vec<&str> = policy.env.set.keys().map(String::as_str).collect();
    env.extend(policy.env.pass.iter().map(String::as_str));
    env.sort_unstable();
    env.dedup();
    // A profile may pass any variable of the host: the promise of no host
    // secrets holds only while every name it passes is of the kind that
    // never carries one.
    let passed_secrets: Vec<&str> = policy
        .env
        .pass
        .iter()
        .map(String::as_str)
        .filter(|name| !policy.env.set.contains_key(*name) && !is_harmless_variable(name))
        .collect();
    out.push_str(&format!("Environment: only {}", env.join(", ")));
    if passed_secrets.is_empty() {
        out.push_str(" (no host secrets, tokens or credentials). ");
    } else {
        out.push_str(&format!(
            " (the profile passes the host's {} as they are). ",
            passed_secrets.join(", ")
        ));
    }
    let mut limits = vec![format!(
        "timeout {} by default, at most {} with timeout_ms",
        format_duration(config.effective_default_timeout()),
        format_duration(config.timeout_ceiling())
    )];
    if let Some(memory) = policy.limits.memory {
        limits.push(format!("memory {}", format_size(memory)));
    }
    if let Some(pids) = policy.limits.pids {
        limits.push(format!("{pids} processes"));
    }
    if let Some(cpu) = policy.limits.cpu {
        limits.push(format!("{cpu} CPU"));
    }
    limits.push(format!(
        "stdout and stderr returned up to {} each (the rest is counted and said to be cut)",
        format_size(config.output_cap as u64)
    ));
    out.push_str(&format!("Limits: {}. ", limits.join("; ")));
    out.push_str("There is no input and no terminal; the command's processes end with the call.");
    out
}

/// Paths for a description: each one, except that many single entries
/// below one top directory (strict's files of /etc) are counted instead of
/// listed, which would cost an agent's context for little.
fn path_summary(paths: &[&Path]) -> Vec<String> {
    const LISTED_BELOW_ONE_TOP: usize = 3;
    let top = |path: &Path| -> Option<PathBuf> {
        let mut components = path.components();
        let root = components.next()?;
        let first = components.next()?;
        components.next()?;
        Some(Path::new(root.as_os_str()).join(first.as_os_str()))
    };
    let mut out = Vec::new();
    let mut counted: Vec<PathBuf> = Vec::new();
    for path in paths {
        match top(path) {
            Some(dir) if !paths.contains(&dir.as_path()) => {
                let below = paths
                    .iter()
                    .filter(|p| top(p).as_ref() == Some(&dir))
                    .count();
                if below <= LISTED_BELOW_ONE_TOP {
                    out.push(path.display().to_string());
                } else if !counted.contains(&dir) {
                    out.push(format!("{below} entries of {}", dir.display()));
                    counted.push(dir);
                }
            }
            // Already covered by its readable top directory.
            Some(_) => {}
            None => out.push(path.display().to_string()),
        }
    }
    out
}

/// Variables that say how to display text or where things are, never a credential.
fn is_harmless_variable(name: &str) -> bool {
    name.starts_with("LC_")
        || matches!(
            name,
            "LANG"
                | "LANGUAGE"
                | "TERM"
                | "COLORTERM"
                | "TZ"
                | "PATH"
                | "HOME"
                | "TMPDIR"
                | "USER"
                | "LOGNAME"
                | "SHELL"
        )
}

fn pattern_list(patterns: &[String]) -> String {
    const SHOWN: usize = 6;
    let kept: Vec<&str> = patterns
        .iter()
        .filter(|p| !p.starts_with('!'))
        .map(String::as_str)
        .collect();
    let mut out = kept
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if kept.len() > SHOWN {
        out.push_str(&format!(" and {} more", kept.len() - SHOWN));
    }
    out
}
