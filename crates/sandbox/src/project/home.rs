//! Whether a project root is a place no run should write to by default: `/`,
//! a home directory, or a directory that contains one (`/home`).
//!
//! Running from `~` without `--project` would otherwise make the whole home
//! (SSH keys, shell start-up files, every other checkout) the writable project.

use std::path::{Path, PathBuf};

/// Home directories of every account in `/etc/passwd`, plus `$HOME`.
pub fn home_directories() -> Vec<PathBuf> {
    let mut homes = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/etc/passwd") {
        for line in text.lines() {
            if let Some(home) = line.split(':').nth(5) {
                if home.starts_with('/') && home != "/" {
                    homes.push(PathBuf::from(home));
                }
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        if home.is_absolute() && home != Path::new("/") {
            homes.push(home);
        }
    }
    // Compare real paths: /home may be a symlink to /usr/home. Accounts
    // share homes (/nonexistent, /bin), and resolving costs a readlink per
    // component: the same path is resolved once.
    homes.sort();
    homes.dedup();
    let mut real: Vec<PathBuf> = homes
        .into_iter()
        .filter_map(|h| std::fs::canonicalize(h).ok())
        .collect();
    real.sort();
    real.dedup();
    real
}

/// The home directory of the account with this uid in `/etc/passwd` (the
/// first entry for it, as `getpwuid` answers from files), read without
/// the C library's NSS: the shipped `sandbox` is linked static, and a
/// static program that loads NSS modules (sssd, LDAP, systemd's) of
/// another glibc than its own may crash. An account that only a network
/// directory knows has none here.
pub fn home_of_uid(uid: u32) -> Option<PathBuf> {
    home_of_uid_in(&std::fs::read_to_string("/etc/passwd").ok()?, uid)
}

fn home_of_uid_in(passwd: &str, uid: u32) -> Option<PathBuf> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields.as_slice() {
            [_, _, id, _, _, home, ..] if id.parse() == Ok(uid) && home.starts_with('/') => {
                Some(PathBuf::from(home))
            }
            _ => None,
        }
    })
}

/// Why `project` (canonical) is too broad to be an implicit project root,
/// or None when it is fine.
pub fn too_broad(project: &Path, homes: &[PathBuf]) -> Option<String> {
    if project == Path::new("/") {
        return Some("it is the root directory".into());
    }
    if let Some(home) = homes.iter().find(|h| h.as_path() == project) {
        return Some(format!("it is a home directory ({})", home.display()));
    }
    homes
        .iter()
        .find(|h| h.starts_with(project))
        .map(|home| format!("it contains the home directory {}", home.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_passwd_entry_of_a_uid_names_its_home() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      # a comment\n\
                      short:x:1000\n\
                      alice:x:1000:1000:Alice:/home/alice:/bin/sh\n\
                      again:x:1000:1000::/home/again:/bin/sh\n\
                      relative:x:1001:1001::home/rel:/bin/sh\n";
        assert_eq!(home_of_uid_in(passwd, 0), Some(PathBuf::from("/root")));
        assert_eq!(
            home_of_uid_in(passwd, 1000),
            Some(PathBuf::from("/home/alice"))
        );
        assert_eq!(home_of_uid_in(passwd, 1001), None);
        assert_eq!(home_of_uid_in(passwd, 4242), None);
    }

    #[test]
    fn homes_and_their_ancestors_are_too_broad() {
        let homes = vec![PathBuf::from("/home/alice"), PathBuf::from("/root")];
        assert!(too_broad(Path::new("/"), &homes).is_some());
        assert!(too_broad(Path::new("/home/alice"), &homes)
            .unwrap()
            .contains("is a home directory"));
        assert!(too_broad(Path::new("/home"), &homes)
            .unwrap()
            .contains("contains the home directory /home/alice"));
        assert!(too_broad(Path::new("/home/alice/src/app"), &homes).is_none());
        assert!(too_broad(Path::new("/srv/app"), &homes).is_none());
    }
}
