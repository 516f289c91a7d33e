//! The `/etc` files a namespaced run gets written for it rather than bound
//! from the host: `passwd`, `group` and, with a network namespace of its
//! own, `hosts`.
//!
//! Bound from the host, `passwd` and `group` listed every account of the
//! machine (names, home directories, service users: what runs there) and
//! still had no entry for the sandbox's uid whenever that uid has no host
//! account (a CI runner's numeric uid, the id host root maps its sandbox
//! to), so `whoami`, `getpass.getuser()`, `os.userInfo()` and git failed
//! inside although they work bare. The written files hold three accounts:
//! root, the uid the sandbox runs as (its host name when it has one, else
//! [`FALLBACK_NAME`], with the run's `HOME`), and nobody, which is what
//! files owned by unmapped ids show as.
//!
//! The host's `hosts` maps names of its own network, none of which a run
//! with a network namespace of its own can reach, and does not name the
//! sandbox's hostname, so `getaddrinfo(gethostname())` (Java's
//! `getLocalHost`, git's default e-mail domain, many test servers) failed
//! after a DNS timeout. The written one names localhost and the sandbox's
//! hostname on loopback.
//!
//! The names are read in the supervisor, before clone, from the host's
//! files (not through NSS: an NSS module loaded into the supervisor could
//! start threads, and a raw clone needs a single-threaded process); the
//! files are rendered there too, from the ids the run gets; init only
//! writes them.

use std::ffi::{CStr, CString};

use super::ids::IdMapping;

/// The name of the sandbox's uid (and gid) when the host has none for it.
pub const FALLBACK_NAME: &str = "sandbox";

/// The overflow id: files owned by ids the run does not map show as it.
const NOBODY: u32 = 65_534;

/// The hostname init gives a run with a uts namespace of its own.
pub const HOSTNAME: &str = "sandbox";

/// What the written files need from the host and the profile.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EtcPlan {
    /// Host account names by uid (from the host's `/etc/passwd`): only the
    /// sandbox's own ids, never the whole file.
    pub user_names: Vec<(u32, String)>,
    /// Host group names by gid (from the host's `/etc/group`), likewise.
    pub group_names: Vec<(u32, String)>,
    /// The run's `HOME` (the home directory of the sandbox's account).
    pub home: String,
    /// Write `/etc/hosts` too (the run has a network namespace of its own).
    pub hosts: bool,
}

impl EtcPlan {
    /// Names of `uids` and `gids` from the host's files, for a run whose
    /// `HOME` is `home`. A file that cannot be read gives no names (the
    /// fallback name is used), never an error: a name is cosmetic.
    pub fn new(uids: &[u32], gids: &[u32], home: &str, hosts: bool) -> EtcPlan {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        EtcPlan {
            user_names: names_in(&read("/etc/passwd"), uids),
            group_names: names_in(&read("/etc/group"), gids),
            home: home.to_owned(),
            hosts,
        }
    }
}

/// `name:x:id:...` lines of `text` whose id is in `ids`, as (id, name).
/// The first entry for an id wins, as it does for getpwuid.
fn names_in(text: &str, ids: &[u32]) -> Vec<(u32, String)> {
    let mut found: Vec<(u32, String)> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split(':');
        let (Some(name), Some(_), Some(id)) = (fields.next(), fields.next(), fields.next()) else {
            continue;
        };
        let Ok(id) = id.parse::<u32>() else {
            continue;
        };
        if usable_name(name) && ids.contains(&id) && !found.iter().any(|(i, _)| *i == id) {
            found.push((id, name.to_owned()));
        }
    }
    found
}

/// A name that cannot break the line format it is written into.
fn usable_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'$'))
        && !name.starts_with(['-', '+'])
}

fn name_of(names: &[(u32, String)], id: u32, fallback: &str) -> String {
    names
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| fallback.to_owned())
}

/// A `HOME` that cannot break the line format: `/` otherwise.
fn usable_home(home: &str) -> &str {
    if home.starts_with('/') && !home.contains([':', '\n']) {
        home
    } else {
        "/"
    }
}

/// `/etc/passwd` for a run with `ids`.
pub fn passwd(plan: &EtcPlan, ids: &IdMapping) -> String {
    let uid = ids.inside_uid;
    let gid = ids.inside_gid;
    let home = usable_home(&plan.home);
    let mut text = String::new();
    if uid != 0 {
        text.push_str("root:x:0:0:root:/root:/bin/sh\n");
    }
    if uid != NOBODY {
        let name = match uid {
            0 => "root".to_owned(),
            _ => name_of(&plan.user_names, uid, FALLBACK_NAME),
        };
        text.push_str(&format!("{name}:x:{uid}:{gid}:{name}:{home}:/bin/sh\n"));
    }
    let nobody_home = if uid == NOBODY { home } else { "/nonexistent" };
    text.push_str(&format!(
        "nobody:x:{NOBODY}:{NOBODY}:nobody:{nobody_home}:/usr/sbin/nologin\n"
    ));
    text
}

/// `/etc/group` for a run with `ids`.
pub fn group(plan: &EtcPlan, ids: &IdMapping) -> String {
    let gid = ids.inside_gid;
    let nogroup = name_of(&plan.group_names, NOBODY, "nogroup");
    let mut text = String::new();
    if gid != 0 {
        text.push_str("root:x:0:\n");
    }
    if gid != NOBODY {
        let name = match gid {
            0 => "root".to_owned(),
            _ => name_of(&plan.group_names, gid, FALLBACK_NAME),
        };
        text.push_str(&format!("{name}:x:{gid}:\n"));
    }
    text.push_str(&format!("{nogroup}:x:{NOBODY}:\n"));
    text
}

/// `/etc/hosts` for a run with a network namespace of its own. The
/// hostname gets a dotted name first, as Debian's installer writes it, so
/// that programs asking for a fully qualified name (git's default e-mail
/// address) find one without DNS.
pub fn hosts() -> String {
    format!(
        "127.0.0.1\tlocalhost\n::1\tip6-localhost ip6-loopback\n127.0.1.1\t{HOSTNAME}.localdomain {HOSTNAME}\n"
    )
}

/// One written file: where init stages it and where it appears.
#[derive(Debug)]
pub struct EtcFile {
    /// Path in the staging tmpfs.
    pub staged: &'static CStr,
    /// `/newroot` + its path inside.
    pub target: &'static CStr,
    /// Its content.
    pub content: CString,
}

/// The files to write for `plan` and `ids`. A content holding a NUL byte
/// (impossible: names and home are checked) is left out.
pub fn files(plan: &EtcPlan, ids: &IdMapping) -> Vec<EtcFile> {
    let mut out = Vec::with_capacity(3);
    let mut add = |staged, target, text: String| {
        if let Ok(content) = CString::new(text) {
            out.push(EtcFile {
                staged,
                target,
                content,
            });
        }
    };
    add(c"/passwd", c"/newroot/etc/passwd", passwd(plan, ids));
    add(c"/group", c"/newroot/etc/group", group(plan, ids));
    if plan.hosts {
        add(c"/hosts", c"/newroot/etc/hosts", hosts());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(uid: u32, gid: u32) -> IdMapping {
        IdMapping::unprivileged(uid, gid)
    }

    const HOST_PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\nci:x:1001:1001:CI runner,,,:/home/ci:/bin/bash\nbad:name:x:7:7::/:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

    #[test]
    fn only_the_requested_ids_are_taken_from_the_host() {
        let names = names_in(HOST_PASSWD, &[1001, 4242]);
        assert_eq!(names, vec![(1001, "ci".to_owned())]);
    }

    #[test]
    fn the_sandbox_user_has_its_host_name_and_the_runs_home() {
        let plan = EtcPlan {
            user_names: names_in(HOST_PASSWD, &[1001]),
            group_names: vec![(1001, "ci".into()), (NOBODY, "nogroup".into())],
            home: "/tmp".into(),
            hosts: true,
        };
        assert_eq!(
            passwd(&plan, &ids(1001, 1001)),
            "root:x:0:0:root:/root:/bin/sh\nci:x:1001:1001:ci:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        );
        assert_eq!(
            group(&plan, &ids(1001, 1001)),
            "root:x:0:\nci:x:1001:\nnogroup:x:65534:\n"
        );
    }

    #[test]
    fn an_id_without_a_host_name_gets_the_fallback_and_root_is_not_doubled() {
        let plan = EtcPlan {
            home: "/tmp".into(),
            ..EtcPlan::default()
        };
        let text = passwd(&plan, &ids(61_234, 61_234));
        assert!(text.contains("sandbox:x:61234:61234:sandbox:/tmp:/bin/sh\n"));
        let text = passwd(&plan, &ids(0, 0));
        assert_eq!(text.matches(":x:0:").count(), 1);
        assert!(text.starts_with("root:x:0:0:root:/tmp:"));
    }

    #[test]
    fn a_home_that_would_break_the_format_is_replaced() {
        let plan = EtcPlan {
            home: "/a:b".into(),
            ..EtcPlan::default()
        };
        assert!(passwd(&plan, &ids(5, 5)).contains(":5:5:sandbox:/:/bin/sh\n"));
    }
}
