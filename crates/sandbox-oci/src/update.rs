//! `update`: runc changes a running container's cgroup limits. `create`
//! made the profile's limits ceilings; an update (`podman update`, a
//! Kubernetes in-place resize that a pod's author asks for) must not lift
//! them, so every limit it sets is checked against the container's profile
//! before runc sees it.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;

use serde_json::Value;

use super::{cli, OciError, Settings};
use sandbox::profile::policy::Limits;

/// The limits an update asks for (None: left as they are).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Requested {
    /// Memory limit in bytes; -1 lifts it, 0 leaves it.
    pub memory: Option<i64>,
    /// Task limit; negative lifts it, 0 leaves it.
    pub pids: Option<i64>,
    /// CFS quota in microseconds; -1 lifts it, 0 leaves it.
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds; 0 leaves it.
    pub cpu_period: Option<u64>,
    /// cgroup v2 files written as given (`unified`), by name.
    pub unified: Vec<String>,
}

/// cgroup v2 files that hold the limits a profile sets: written through
/// `unified`, they would replace the ceilings.
pub const LIMIT_FILES: &[&str] = &["memory.max", "memory.high", "pids.max", "cpu.max"];

/// What an update's resources document (`--resources FILE`, runc's
/// `LinuxResources` as JSON) asks for.
pub fn requested_by_document(resources: &Value) -> Result<Requested, OciError> {
    let int = |pointer: &str| -> Result<Option<i64>, OciError> {
        match resources.pointer(pointer) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => value.as_i64().map(Some).ok_or_else(|| {
                OciError::Spec(format!("update: resources {pointer} is not a number"))
            }),
        }
    };
    let cpu_period = match resources.pointer("/cpu/period") {
        None | Some(Value::Null) => None,
        Some(value) => Some(value.as_u64().ok_or_else(|| {
            OciError::Spec("update: resources /cpu/period is not a number".to_owned())
        })?),
    };
    let unified = resources
        .get("unified")
        .and_then(Value::as_object)
        .map(|files| files.keys().cloned().collect())
        .unwrap_or_default();
    Ok(Requested {
        memory: int("/memory/limit")?,
        pids: int("/pids/limit")?,
        cpu_quota: int("/cpu/quota")?,
        cpu_period,
        unified,
    })
}

/// Bytes as runc reads `--memory`: a number with an optional binary unit
/// (`512m`, `1GiB`, `2g`), or `-1`.
fn memory_flag(text: &str) -> Option<i64> {
    if text == "-1" {
        return Some(-1);
    }
    let text = text.trim();
    let digits = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: f64 = number.parse().ok()?;
    let unit = unit.trim_start().to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return None,
    };
    let bytes = number * (1_u64 << shift) as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < i64::MAX as f64).then_some(bytes as i64)
}

/// What an update's flags ask for (runc ignores them with `--resources`).
pub fn requested_by_flags(parsed: &cli::Parsed) -> Result<Requested, OciError> {
    let value = |name: &str| {
        parsed
            .value(&[name])
            .map(|v| v.to_string_lossy().into_owned())
    };
    let bad = |name: &str, text: &str| {
        OciError::Usage(format!(
            "update: --{name} {text:?} is not a number runc takes"
        ))
    };
    let int = |name: &str| -> Result<Option<i64>, OciError> {
        value(name)
            .map(|text| text.trim().parse::<i64>().map_err(|_| bad(name, &text)))
            .transpose()
    };
    Ok(Requested {
        memory: value("memory")
            .map(|text| memory_flag(&text).ok_or_else(|| bad("memory", &text)))
            .transpose()?,
        pids: int("pids-limit")?,
        cpu_quota: int("cpu-quota")?,
        cpu_period: value("cpu-period")
            .map(|text| {
                text.trim()
                    .parse::<u64>()
                    .map_err(|_| bad("cpu-period", &text))
            })
            .transpose()?,
        unified: Vec::new(),
    })
}

/// Refuse what would lift one of `limits` (the container's profile's).
pub fn within(limits: &Limits, requested: &Requested, profile: &str) -> Result<(), OciError> {
    let refuse = |what: String| {
        OciError::Refused(format!(
            "update: {what}, above the limit of the container's profile {profile:?}; ask for \
             no more than it (or give the container a profile with higher limits at create)"
        ))
    };
    if let (Some(ceiling), Some(memory)) = (limits.memory, requested.memory) {
        if memory < 0 || u64::try_from(memory).is_ok_and(|m| m > ceiling) {
            return Err(refuse(format!("memory {memory} (ceiling {ceiling} bytes)")));
        }
    }
    if let (Some(ceiling), Some(pids)) = (limits.pids, requested.pids) {
        if pids < 0 || u64::try_from(pids).is_ok_and(|p| p > ceiling) {
            return Err(refuse(format!("pids {pids} (ceiling {ceiling})")));
        }
    }
    if let Some(cores) = limits.cpu {
        let quota = requested.cpu_quota.filter(|q| *q != 0);
        let period = requested.cpu_period.filter(|p| *p != 0);
        match (quota, period) {
            (None, None) => {}
            // The other half stays as it is, which this runtime does not
            // know: a shorter period under the same quota is more cores.
            (Some(_), None) | (None, Some(_)) => {
                return Err(OciError::Refused(
                    "update: a CPU quota and period change together under a profile with a \
                     CPU limit; give both"
                        .to_owned(),
                ))
            }
            (Some(quota), Some(period)) => {
                if quota < 0 || quota as f64 / period as f64 > cores {
                    return Err(refuse(format!(
                        "CPU quota {quota} per period {period} ({cores} cores)"
                    )));
                }
            }
        }
    }
    let limited = limits.memory.is_some() || limits.pids.is_some() || limits.cpu.is_some();
    if let Some(file) = requested
        .unified
        .iter()
        .find(|f| limited && LIMIT_FILES.contains(&f.as_str()))
    {
        return Err(refuse(format!("cgroup file {file} set directly")));
    }
    Ok(())
}

/// Check `update`'s limits against the container's profile, then run runc
/// (with the checked resources document on its standard input).
pub fn update(settings: &Settings, invocation: &cli::Invocation) -> Result<i32, OciError> {
    let parsed = cli::parse("update", &invocation.rest)?;
    if !parsed.trailing.is_empty() {
        return Err(OciError::Usage(
            "update takes nothing after the container id".to_owned(),
        ));
    }
    let record = super::read_record(settings, invocation, &parsed.id, "update")?;
    let mut runc_args = invocation.global.clone();
    runc_args.push("update".into());
    runc_args.extend(parsed.arguments_without(&["resources", "r"]));
    let document =
        match parsed.value(&["resources", "r"]) {
            None => {
                within(
                    &record.policy.limits,
                    &requested_by_flags(&parsed)?,
                    &record.policy.name,
                )?;
                None
            }
            Some(source) => {
                let text = read_resources(Path::new(source))?;
                let resources: Value = serde_json::from_slice(&text).map_err(|err| {
                    OciError::Spec(format!("update: the resources are not JSON: {err}"))
                })?;
                super::keys::spelled_as_the_spec(&resources, "update's resources")?;
                within(
                    &record.policy.limits,
                    &requested_by_document(&resources)?,
                    &record.policy.name,
                )?;
                runc_args.push("--resources=-".into());
                // runc gets the document that was checked, not the bytes read:
                // of a key given twice, Go merges both values where serde_json
                // keeps the last (`{"pids":{"limit":-1},"pids":{}}` would reach
                // runc as a limit of -1).
                Some(serde_json::to_vec(&resources).map_err(|err| {
                    OciError::Spec(format!("update: writing the resources: {err}"))
                })?)
            }
        };
    runc_args.push(parsed.id.clone().into());
    run_with_input(settings, &runc_args, document.as_deref())
}

/// The resources document, from a file or `-` (standard input), read once.
fn read_resources(source: &Path) -> Result<Vec<u8>, OciError> {
    let mut text = Vec::new();
    let limit = super::SPEC_MAX + 1;
    let read = if source == Path::new("-") {
        std::io::stdin().take(limit).read_to_end(&mut text)
    } else {
        std::fs::File::open(source).and_then(|file| file.take(limit).read_to_end(&mut text))
    };
    read.map_err(|source_err| OciError::Io {
        what: "reading update's resources",
        path: source.to_owned(),
        source: source_err,
    })?;
    if text.len() as u64 > super::SPEC_MAX {
        return Err(OciError::Spec(
            "update: the resources are larger than 16 MiB".to_owned(),
        ));
    }
    Ok(text)
}

fn run_with_input(
    settings: &Settings,
    args: &[OsString],
    input: Option<&[u8]>,
) -> Result<i32, OciError> {
    let runc = settings.runc()?;
    let failed = |err: std::io::Error| OciError::Runc(format!("running {}: {err}", runc.display()));
    let mut command = std::process::Command::new(&runc);
    command.args(args);
    if input.is_some() {
        command.stdin(std::process::Stdio::piped());
    }
    let mut child = command.spawn().map_err(failed)?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(input).map_err(failed)?;
    }
    let status = child.wait().map_err(failed)?;
    Ok(status.code().unwrap_or(super::EXIT_REFUSED))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// strict's limits with a CPU ceiling of one core (strict itself sets
    /// no CPU quota), so that every kind of ceiling is exercised.
    fn limits() -> Limits {
        let mut limits = sandbox::profile::load("strict").unwrap().limits;
        limits.cpu = Some(1.0);
        limits
    }

    #[test]
    fn memory_flags_read_as_runc_reads_them() {
        assert_eq!(memory_flag("-1"), Some(-1));
        assert_eq!(memory_flag("1024"), Some(1024));
        assert_eq!(memory_flag("512m"), Some(512 << 20));
        assert_eq!(memory_flag("1GiB"), Some(1 << 30));
        assert_eq!(memory_flag("2g"), Some(2 << 30));
        assert_eq!(memory_flag("1.5k"), Some(1536));
        assert_eq!(memory_flag("lots"), None);
        assert_eq!(memory_flag("5x"), None);
    }

    #[test]
    fn updates_stay_under_the_profiles_ceilings() {
        let limits = limits();
        let ok = |r: Requested| within(&limits, &r, "strict").is_ok();
        assert!(ok(Requested::default()));
        assert!(ok(Requested {
            pids: Some(100),
            memory: Some(1 << 20),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            ..Requested::default()
        }));
        for lifting in [
            Requested {
                pids: Some(100_000),
                ..Requested::default()
            },
            Requested {
                pids: Some(-1),
                ..Requested::default()
            },
            Requested {
                memory: Some(-1),
                ..Requested::default()
            },
            Requested {
                memory: Some(4 << 30),
                ..Requested::default()
            },
            Requested {
                cpu_quota: Some(400_000),
                cpu_period: Some(100_000),
                ..Requested::default()
            },
            Requested {
                cpu_period: Some(10_000),
                ..Requested::default()
            },
            Requested {
                cpu_quota: Some(-1),
                cpu_period: Some(100_000),
                ..Requested::default()
            },
            Requested {
                unified: vec!["pids.max".to_owned()],
                ..Requested::default()
            },
        ] {
            assert!(!ok(lifting.clone()), "{lifting:?}");
        }
    }

    #[test]
    fn resources_documents_are_read_field_by_field() {
        let requested = requested_by_document(&json!({
            "memory": {"limit": -1, "swap": -1},
            "pids": {"limit": 7},
            "cpu": {"quota": 1000, "period": 100000, "shares": 2},
            "unified": {"pids.max": "max"}
        }))
        .unwrap();
        assert_eq!(requested.memory, Some(-1));
        assert_eq!(requested.pids, Some(7));
        assert_eq!(requested.cpu_quota, Some(1000));
        assert_eq!(requested.cpu_period, Some(100_000));
        assert_eq!(requested.unified, ["pids.max"]);
        assert!(requested_by_document(&json!({"pids": {"limit": "max"}})).is_err());
    }
}
