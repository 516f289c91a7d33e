//! `/proc/PID/mountinfo`, read once for every part that needs to know what
//! is mounted where: cgroup detection, the project watcher, and the OCI
//! runtime judging where a container's bind mount really comes from.

use std::path::PathBuf;

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, PartialEq, Eq)]
pub struct Mount {
    /// The filesystem's device, `major:minor` as mountinfo writes it.
    pub device: String,
    /// The path inside the filesystem that is mounted (not `/` for a bind mount
    /// or a cgroup mount made inside a container without a cgroup namespace).
    pub root: String,
    /// Where it is mounted, in the reader's mount namespace.
    pub mount_point: PathBuf,
    /// The filesystem's type (`ext4`, `tmpfs`, `cgroup2`).
    pub fstype: String,
    /// The super block's options (for cgroup v1, its controllers).
    pub super_options: Vec<String>,
    /// `ro` among the per-mount options: a read-only bind or mount of the
    /// hierarchy (the super block itself may still be read-write elsewhere).
    pub read_only: bool,
}

/// This process's `/proc/self/mountinfo` (empty where it cannot be read).
pub fn read_own() -> String {
    use std::io::Read;
    // A /proc file reports size 0, so `fs::read_to_string` starts with a
    // 32-byte probe and doubles: nine reads for this host's mountinfo on
    // every run. Room for a typical table takes it in two.
    let mut text = String::with_capacity(16 * 1024);
    match std::fs::File::open("/proc/self/mountinfo").and_then(|mut f| f.read_to_string(&mut text))
    {
        Ok(_) => text,
        Err(_) => String::new(),
    }
}

/// Every mount of a `/proc/PID/mountinfo` text, in its order (a later
/// mount at the same point covers an earlier one).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_mount_line).collect()
}

fn parse_mount_line(line: &str) -> Option<Mount> {
    // The optional fields vary in number and end at a lone "-".
    let (before, after) = line.split_once(" - ")?;
    let mut pre = before.split_whitespace();
    let device = pre.nth(2)?.to_owned();
    let root = unescape(pre.next()?);
    let mount_point = PathBuf::from(unescape(pre.next()?));
    let read_only = pre.next().is_some_and(|o| o.split(',').any(|o| o == "ro"));
    let mut post = after.split_whitespace();
    let fstype = post.next()?.to_owned();
    let _source = post.next();
    let super_options = post
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_owned)
        .collect();
    Some(Mount {
        device,
        root,
        mount_point,
        fstype,
        super_options,
        read_only,
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            if s.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                u8::from_str_radix(s, 8).ok()
            } else {
                None
            }
        });
        match (bytes.get(i), octal) {
            (Some(b'\\'), Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (Some(&b), _) => {
                out.push(b);
                i += 1;
            }
            (None, _) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_escapes_are_read() {
        let mounts = parse_mountinfo(
            "29 1 8:1 /var/lib/x /mnt/a\\040b rw,relatime shared:1 - ext4 /dev/vda1 rw\n\
             garbage\n",
        );
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].device, "8:1");
        assert_eq!(mounts[0].root, "/var/lib/x");
        assert_eq!(mounts[0].mount_point, PathBuf::from("/mnt/a b"));
        assert_eq!(mounts[0].fstype, "ext4");
        assert_eq!(unescape("a\\134b\\"), "a\\b\\");
        assert_eq!(unescape("\\04"), "\\04");
    }
}
