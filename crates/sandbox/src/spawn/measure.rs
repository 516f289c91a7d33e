//! The payload's own view of its confinement, read just before execve.
//!
//! The report would otherwise say what the supervisor meant to apply. The
//! kernel's answer is in the process itself: `/proc/self/status` (NoNewPrivs,
//! the five capability sets, the seccomp mode and filter count) and the
//! inode of each `/proc/self/ns/*` link, compared with the supervisor's own
//! to tell a new namespace from a shared one. The payload sends the view
//! over the report pipe; exec then closes that pipe.
//!
//! The reading runs between clone and exec: no allocation, no panic, and a
//! read that fails leaves the field unmeasured instead of failing the run.

use std::ffi::CStr;

use serde::Serialize;

/// The namespaces, in the order of [`View::namespaces`].
pub const NAMESPACES: [(&str, &CStr); 7] = [
    ("user", c"/proc/self/ns/user"),
    ("mount", c"/proc/self/ns/mnt"),
    ("pid", c"/proc/self/ns/pid"),
    ("net", c"/proc/self/ns/net"),
    ("ipc", c"/proc/self/ns/ipc"),
    ("uts", c"/proc/self/ns/uts"),
    ("cgroup", c"/proc/self/ns/cgroup"),
];

/// The capability sets, in the order of [`View::capabilities`].
pub const CAPABILITY_SETS: [&str; 5] = ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"];

/// One process's view of itself; `None` is a field that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct View {
    /// `NoNewPrivs` (0 or 1).
    pub no_new_privs: Option<u64>,
    /// The capability sets as bitmasks, in the order of [`CAPABILITY_SETS`].
    pub capabilities: [Option<u64>; 5],
    /// `Seccomp`: 0 off, 1 strict, 2 filter.
    pub seccomp_mode: Option<u64>,
    /// `Seccomp_filters`: filters attached, inherited ones included.
    pub seccomp_filters: Option<u64>,
    /// Effective uid.
    pub uid: Option<u64>,
    /// Effective gid.
    pub gid: Option<u64>,
    /// Namespace inodes, in the order of [`NAMESPACES`].
    pub namespaces: [Option<u64>; 7],
}

const SLOTS: usize = 17;
/// Size of an encoded view (each slot: a presence byte and 8 bytes).
pub const ENCODED_SIZE: usize = SLOTS * 9;

impl View {
    fn slots(&self) -> [Option<u64>; SLOTS] {
        let mut slots = [None; SLOTS];
        slots[0] = self.no_new_privs;
        slots[1..6].copy_from_slice(&self.capabilities);
        slots[6] = self.seccomp_mode;
        slots[7] = self.seccomp_filters;
        slots[8] = self.uid;
        slots[9] = self.gid;
        slots[10..17].copy_from_slice(&self.namespaces);
        slots
    }

    /// Fixed-size encoding for the report pipe, built without allocation.
    pub fn encode(&self) -> [u8; ENCODED_SIZE] {
        let mut out = [0u8; ENCODED_SIZE];
        for (i, slot) in self.slots().iter().enumerate() {
            if let Some(value) = slot {
                out[i * 9] = 1;
                out[i * 9 + 1..i * 9 + 9].copy_from_slice(&value.to_le_bytes());
            }
        }
        out
    }

    /// The inverse of [`View::encode`]; `None` for a record of another size.
    pub fn decode(bytes: &[u8]) -> Option<View> {
        if bytes.len() != ENCODED_SIZE {
            return None;
        }
        let mut slots = [None; SLOTS];
        for (i, slot) in slots.iter_mut().enumerate() {
            let chunk = &bytes[i * 9..i * 9 + 9];
            if chunk[0] == 1 {
                let mut value = [0u8; 8];
                value.copy_from_slice(&chunk[1..]);
                *slot = Some(u64::from_le_bytes(value));
            }
        }
        let mut view = View {
            no_new_privs: slots[0],
            seccomp_mode: slots[6],
            seccomp_filters: slots[7],
            uid: slots[8],
            gid: slots[9],
            ..View::default()
        };
        view.capabilities.copy_from_slice(&slots[1..6]);
        view.namespaces.copy_from_slice(&slots[10..17]);
        Some(view)
    }
}

/// Read this process's own view. Allocation-free; never fails (an
/// unreadable field stays `None`).
pub fn read_own_view() -> View {
    let mut view = View {
        uid: Some(u64::from(nix::unistd::geteuid().as_raw())),
        gid: Some(u64::from(nix::unistd::getegid().as_raw())),
        ..View::default()
    };
    // 4 KiB holds the whole file for a process with few supplementary
    // groups, which the sandbox's processes have; the fields wanted come
    // before the long Cpus_allowed/Mems_allowed lines anyway.
    let mut buf = [0u8; 4096];
    if let Some(len) = read_status(&mut buf) {
        parse_status(&buf[..len], &mut view);
    }
    for (slot, (_, path)) in view.namespaces.iter_mut().zip(NAMESPACES) {
        *slot = nix::sys::stat::stat(path).ok().map(|st| st.st_ino);
    }
    view
}

fn read_status(buf: &mut [u8]) -> Option<usize> {
    use nix::fcntl::{open, OFlag};
    let fd = open(
        c"/proc/self/status",
        OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let mut filled = 0;
    while filled < buf.len() {
        match nix::unistd::read(&fd, &mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    }
    Some(filled)
}

fn parse_status(text: &[u8], view: &mut View) {
    for line in text.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (key, value) = (&line[..colon], trim(&line[colon + 1..]));
        match key {
            b"NoNewPrivs" => view.no_new_privs = parse_number(value, 10),
            b"Seccomp" => view.seccomp_mode = parse_number(value, 10),
            b"Seccomp_filters" => view.seccomp_filters = parse_number(value, 10),
            _ => {
                if let Some(i) = CAPABILITY_SETS.iter().position(|k| k.as_bytes() == key) {
                    view.capabilities[i] = parse_number(value, 16);
                }
            }
        }
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end.max(start)]
}

fn parse_number(digits: &[u8], radix: u32) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for b in digits {
        let digit = char::from(*b).to_digit(radix)?;
        value = value
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(digit))?;
    }
    Some(value)
}

/// What the payload must see before it is allowed to exec: the layers
/// every run requires, plus the namespaces it was cloned into and the
/// seccomp filters it installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Expected {
    /// The supervisor's own view (namespace inodes, inherited filters),
    /// read before clone; `None` when it could not be read.
    pub host: Option<View>,
    /// Which namespaces must differ from the supervisor's, in the order of
    /// [`NAMESPACES`].
    pub new_namespaces: [bool; 7],
    /// Filters this run installed on top of the inherited ones (0: none).
    pub seccomp_programs: u64,
    /// Whether the payload's bounding set must be empty.
    pub bounding_set_cleared: bool,
}

/// A measured value that contradicts what the run requires. Names the layer
/// and what was seen; static text so the child can send it without
/// allocating.
pub fn contradiction(view: &View, expected: &Expected) -> Option<&'static str> {
    if view.no_new_privs == Some(0) {
        return Some("no_new_privs: the payload's NoNewPrivs is 0");
    }
    for (i, set) in view.capabilities.iter().enumerate() {
        let bounding = i == 3;
        if set.is_some_and(|bits| bits != 0) && (!bounding || expected.bounding_set_cleared) {
            return Some(
                [
                    "capabilities: the payload's CapInh is not empty",
                    "capabilities: the payload's CapPrm is not empty",
                    "capabilities: the payload's CapEff is not empty",
                    "capabilities: the payload's CapBnd is not empty",
                    "capabilities: the payload's CapAmb is not empty",
                ][i],
            );
        }
    }
    if expected.seccomp_programs > 0 {
        if view.seccomp_mode.is_some_and(|mode| mode != 2) {
            return Some("seccomp: the payload's Seccomp mode is not 2 (filter)");
        }
        let inherited = expected.host.and_then(|h| h.seccomp_filters).unwrap_or(0);
        if view
            .seccomp_filters
            .is_some_and(|n| n < inherited + expected.seccomp_programs)
        {
            return Some("seccomp: the payload has fewer filters than were installed");
        }
    }
    let host = expected.host.map(|h| h.namespaces).unwrap_or_default();
    for (i, (mine, theirs)) in view.namespaces.iter().zip(host).enumerate() {
        if expected.new_namespaces[i] && mine.is_some() && *mine == theirs {
            return Some(
                [
                    "namespaces: the payload shares the supervisor's user namespace",
                    "namespaces: the payload shares the supervisor's mount namespace",
                    "namespaces: the payload shares the supervisor's pid namespace",
                    "namespaces: the payload shares the supervisor's network namespace",
                    "namespaces: the payload shares the supervisor's ipc namespace",
                    "namespaces: the payload shares the supervisor's uts namespace",
                    "namespaces: the payload shares the supervisor's cgroup namespace",
                ][i],
            );
        }
    }
    None
}

/// A namespace as measured from inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamespaceState {
    /// Its inode differs from the supervisor's.
    New,
    /// The supervisor's own.
    Shared,
    /// Could not be read (inside, or the supervisor's).
    Unmeasured,
}

/// The `measured` section of the report: the payload's view as it read it
/// just before exec. `null` fields could not be read.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Measured {
    /// NoNewPrivs.
    pub no_new_privs: Option<bool>,
    /// Capability sets as the kernel prints them (16 hex digits), by name.
    pub capabilities: std::collections::BTreeMap<String, Option<String>>,
    /// Seccomp mode: 0 off, 1 strict, 2 filter.
    pub seccomp_mode: Option<u64>,
    /// Seccomp filters attached, including any the supervisor itself had.
    pub seccomp_filters: Option<u64>,
    /// Seccomp filters the supervisor already had (inherited by every run).
    pub seccomp_filters_inherited: Option<u64>,
    /// Effective uid inside.
    pub uid: Option<u64>,
    /// Effective gid inside.
    pub gid: Option<u64>,
    /// Each namespace: new, shared with the supervisor, or unmeasured.
    pub namespaces: std::collections::BTreeMap<String, NamespaceState>,
}

impl Measured {
    /// The report's form of a payload's view, compared with the supervisor's.
    pub fn new(view: &View, host: Option<&View>) -> Measured {
        let capabilities = CAPABILITY_SETS
            .iter()
            .zip(view.capabilities)
            .map(|(name, bits)| (name.to_string(), bits.map(|b| format!("{b:016x}"))))
            .collect();
        let namespaces = NAMESPACES
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                let theirs = host.and_then(|h| h.namespaces[i]);
                let state = match (view.namespaces[i], theirs) {
                    (Some(mine), Some(theirs)) if mine == theirs => NamespaceState::Shared,
                    (Some(_), Some(_)) => NamespaceState::New,
                    _ => NamespaceState::Unmeasured,
                };
                (name.to_string(), state)
            })
            .collect();
        Measured {
            no_new_privs: view.no_new_privs.map(|v| v == 1),
            capabilities,
            seccomp_mode: view.seccomp_mode,
            seccomp_filters: view.seccomp_filters,
            seccomp_filters_inherited: host.and_then(|h| h.seccomp_filters),
            uid: view.uid,
            gid: view.gid,
            namespaces,
        }
    }

    /// Every capability left in any set, by name (`None`: a set was not read).
    pub fn capability_names(view: &View) -> Option<Vec<String>> {
        let mut union = 0u64;
        for set in view.capabilities {
            union |= set?;
        }
        let mut names: Vec<(u8, String)> = caps::all()
            .into_iter()
            .filter(|cap| union & cap.bitmask() != 0)
            .map(|cap| (cap.index(), cap.to_string()))
            .collect();
        names.sort();
        // Bits the caps crate has no name for yet (a newer kernel's).
        let known = caps::all()
            .iter()
            .fold(0u64, |acc, cap| acc | cap.bitmask());
        for bit in 0..64u8 {
            if union & !known & (1u64 << bit) != 0 {
                names.push((bit, format!("cap_{bit}")));
            }
        }
        Some(names.into_iter().map(|(_, name)| name).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_round_trips_through_its_encoding() {
        let view = View {
            no_new_privs: Some(1),
            capabilities: [Some(0), None, Some(0x1ff_ffff_ffff), Some(0), Some(0)],
            seccomp_mode: Some(2),
            seccomp_filters: Some(3),
            uid: Some(1000),
            gid: None,
            namespaces: [
                Some(4026531837),
                None,
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(5),
            ],
        };
        assert_eq!(View::decode(&view.encode()), Some(view));
        assert_eq!(View::decode(&[0u8; 3]), None);
    }

    #[test]
    fn the_status_file_is_parsed_field_by_field() {
        let text = b"Name:\tsh\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\n\
CapEff:\t000001ffffffffff\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n\
NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t4\nSpeculation_Store_Bypass:\tthread vulnerable\n";
        let mut view = View::default();
        parse_status(text, &mut view);
        assert_eq!(view.no_new_privs, Some(1));
        assert_eq!(view.capabilities[2], Some(0x1ff_ffff_ffff));
        assert_eq!(view.capabilities[0], Some(0));
        assert_eq!(view.seccomp_mode, Some(2));
        assert_eq!(view.seccomp_filters, Some(4));
        // A truncated or garbled value is unmeasured, not zero.
        let mut view = View::default();
        parse_status(b"NoNewPrivs:\t\nCapEff:\t00zz\nSeccomp", &mut view);
        assert_eq!(view, View::default());
    }

    #[test]
    fn this_process_can_read_its_own_view() {
        let view = read_own_view();
        assert!(view.no_new_privs.is_some());
        assert!(view.capabilities.iter().all(Option::is_some));
        assert!(view.namespaces.iter().all(Option::is_some));
    }

    fn confined() -> View {
        View {
            no_new_privs: Some(1),
            capabilities: [Some(0); 5],
            seccomp_mode: Some(2),
            seccomp_filters: Some(2),
            uid: Some(1000),
            gid: Some(1000),
            namespaces: [
                Some(10),
                Some(11),
                Some(12),
                Some(13),
                Some(14),
                Some(15),
                Some(16),
            ],
        }
    }

    fn expected() -> Expected {
        Expected {
            host: Some(View {
                seccomp_filters: Some(0),
                namespaces: [
                    Some(1),
                    Some(2),
                    Some(3),
                    Some(4),
                    Some(5),
                    Some(6),
                    Some(7),
                ],
                ..View::default()
            }),
            new_namespaces: [true; 7],
            seccomp_programs: 2,
            bounding_set_cleared: true,
        }
    }

    #[test]
    fn a_confined_view_passes_and_each_gap_is_named() {
        assert_eq!(contradiction(&confined(), &expected()), None);
        let mut view = confined();
        view.no_new_privs = Some(0);
        assert!(contradiction(&view, &expected()).is_some_and(|m| m.starts_with("no_new_privs")));
        let mut view = confined();
        view.capabilities[3] = Some(1 << 21);
        assert!(contradiction(&view, &expected()).is_some_and(|m| m.contains("CapBnd")));
        let mut view = confined();
        view.seccomp_mode = Some(0);
        assert!(contradiction(&view, &expected()).is_some_and(|m| m.starts_with("seccomp")));
        let mut view = confined();
        view.seccomp_filters = Some(1);
        assert!(contradiction(&view, &expected()).is_some_and(|m| m.contains("fewer filters")));
        let mut view = confined();
        view.namespaces[3] = Some(4);
        assert!(contradiction(&view, &expected()).is_some_and(|m| m.contains("network")));
        // A namespace the run did not ask for may be shared (--net host).
        let mut expected = expected();
        expected.new_namespaces[3] = false;
        assert_eq!(contradiction(&view, &expected), None);
    }

    #[test]
    fn an_unreadable_field_is_never_a_contradiction() {
        assert_eq!(contradiction(&View::default(), &expected()), None);
    }

    #[test]
    fn the_report_names_capabilities_and_tells_new_from_shared() {
        let mut view = confined();
        view.capabilities[2] = Some((1 << 0) | (1 << 21));
        assert_eq!(
            Measured::capability_names(&view).unwrap(),
            ["CAP_CHOWN", "CAP_SYS_ADMIN"]
        );
        view.capabilities[0] = None;
        assert_eq!(Measured::capability_names(&view), None);
        let mut view = confined();
        view.namespaces[3] = Some(4);
        view.namespaces[4] = None;
        let measured = Measured::new(&view, expected().host.as_ref());
        assert_eq!(measured.namespaces["pid"], NamespaceState::New);
        assert_eq!(measured.namespaces["net"], NamespaceState::Shared);
        assert_eq!(measured.namespaces["ipc"], NamespaceState::Unmeasured);
        assert_eq!(
            measured.capabilities["CapEff"].as_deref(),
            Some("0000000000000000")
        );
    }
}
