//! The cgroup fallback an unprivileged user on cgroup v1 meets on every run.
//!
//! cgroup v1 has no delegation: such a user never gets a cgroup, whatever
//! the run, so the fallback to rlimits is a property of the machine, not of
//! the run. Repeating its explanation (some 270 characters) on every run
//! teaches people to skip the warnings that matter, so the command line
//! says it once per machine and user; every report still carries it, and
//! `sandbox doctor` shows it. A fallback any other setup could avoid (a
//! read-only cgroupfs, cgroup v2 without delegation) is said every time.

use std::path::{Path, PathBuf};

use super::CgroupInfo;

const FALLBACK_START: &str = "no cgroup for this run (";
const FALLBACK_MIDDLE: &str = "); falling back to rlimits: ";

/// The fallback's warning: why there is no cgroup, and which limits became
/// which rlimits. Written here so that [`is_fallback`] knows its shape.
pub fn fallback_warning(why: std::fmt::Arguments<'_>, applied: &str) -> String {
    format!("{FALLBACK_START}{why}{FALLBACK_MIDDLE}{applied}")
}

/// Whether `warning` is the fallback to rlimits.
pub fn is_fallback(warning: &str) -> bool {
    warning.starts_with(FALLBACK_START) && warning.contains(FALLBACK_MIDDLE)
}

/// Whether a limit controller sits on a v1 hierarchy this process may not
/// write, and it is not root: no setting gives it a cgroup.
pub fn kept_out_by_v1(info: &CgroupInfo, root: bool) -> bool {
    !root
        && info
            .controllers
            .iter()
            .any(|c| c.version == 1 && !c.writable && !c.read_only)
}

/// The marker that says the fallback was explained on this machine, in the
/// user's state directory (which may be shared between machines, hence
/// the machine's id in its name).
pub fn marker(state_dir: &Path) -> PathBuf {
    state_dir
        .join("notices")
        .join(format!("cgroup-v1-fallback-{}", machine_id()))
}

/// `/etc/machine-id`, else the host name, as a file name; "unknown" when
/// neither can be read.
fn machine_id() -> String {
    let from_file = std::fs::read("/etc/machine-id").ok().map(|bytes| {
        bytes
            .into_iter()
            .take(64)
            .map(char::from)
            .collect::<String>()
    });
    let from_host = || {
        nix::unistd::gethostname()
            .ok()
            .map(|name| name.to_string_lossy().into_owned())
    };
    let clean = |text: String| -> Option<String> {
        let kept: String = text
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
            .take(64)
            .collect();
        let kept = kept.trim_start_matches('.').to_owned();
        (!kept.is_empty()).then_some(kept)
    };
    from_file
        .and_then(clean)
        .or_else(|| from_host().and_then(clean))
        .unwrap_or_else(|| "unknown".into())
}

/// Whether to print `warning` on the command line now, and with which
/// note: the fallback of a user cgroup v1 keeps out is said the first time
/// on this machine only (`None` afterwards); when the marker cannot be
/// made, it is said every time rather than never.
pub fn to_print(warning: &str, info: &CgroupInfo, root: bool, state_dir: &Path) -> Option<String> {
    if !(is_fallback(warning) && kept_out_by_v1(info, root)) {
        return Some(warning.to_owned());
    }
    match crate::safe_file::create_marker(&marker(state_dir)) {
        Ok(true) => Some(format!(
            "{warning}. cgroup v1 gives a user other than root no cgroup on any run, so this is \
             said once on this machine; every run's report keeps it in `warnings`"
        )),
        Ok(false) => None,
        Err(_) => Some(warning.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::{CgroupMode, ControllerInfo};

    fn info(version: u8, writable: bool, read_only: bool) -> CgroupInfo {
        CgroupInfo {
            mode: if version == 1 {
                CgroupMode::Hybrid
            } else {
                CgroupMode::V2
            },
            controllers: vec![ControllerInfo {
                name: "memory".into(),
                version,
                own_cgroup: PathBuf::from("/sys/fs/cgroup/memory/user.slice"),
                writable,
                read_only,
            }],
            unified_mount: None,
        }
    }

    const FALLBACK: &str = "no cgroup for this run (no write access to the cgroup \
                            /sys/fs/cgroup/memory/x); falling back to rlimits: memory as RLIMIT_DATA";

    #[test]
    fn the_v1_fallback_is_said_once_per_machine_and_others_every_time() {
        let state = tempfile::tempdir().unwrap();
        let v1 = info(1, false, false);
        let first = to_print(FALLBACK, &v1, false, state.path()).expect("said the first time");
        assert!(first.starts_with(FALLBACK) && first.contains("said once on this machine"));
        assert_eq!(to_print(FALLBACK, &v1, false, state.path()), None);
        assert!(marker(state.path()).exists());

        let other = "Landlock: ABI 3 of 6";
        assert_eq!(
            to_print(other, &v1, false, state.path()).as_deref(),
            Some(other)
        );
        // Root, a read-only cgroupfs and cgroup v2 are not machine-wide
        // facts for this user: said every time.
        for (info, root) in [
            (info(1, false, false), true),
            (info(1, false, true), false),
            (info(2, false, false), false),
        ] {
            for _ in 0..2 {
                assert_eq!(
                    to_print(FALLBACK, &info, root, state.path()).as_deref(),
                    Some(FALLBACK)
                );
            }
        }
        // Without a usable state directory it is said every time, plainly.
        let blocked = state.path().join("file");
        std::fs::write(&blocked, "").unwrap();
        for _ in 0..2 {
            assert_eq!(
                to_print(FALLBACK, &v1, false, &blocked).as_deref(),
                Some(FALLBACK)
            );
        }
    }

    #[test]
    fn the_marker_name_is_a_plain_file_name() {
        let name = marker(Path::new("/s"));
        let file = name.file_name().unwrap().to_str().unwrap();
        assert!(
            file.starts_with("cgroup-v1-fallback-") && file.len() > 19,
            "{file}"
        );
        assert_eq!(name.parent(), Some(Path::new("/s/notices")));
    }
}
