//! How exposed a host path leaves the host when the sandbox can read or
//! write it: `/`, a home or what is above one, keys and start-up files in
//! a home, the system's directories, the rest.

use std::path::{Path, PathBuf};

/// Names below a home that hold keys, tokens, or what the person's shell
/// and tools run later.
const SENSITIVE_IN_HOME: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".docker",
    ".kube",
    ".git-credentials",
    ".config",
    ".local",
    ".bashrc",
    ".profile",
    ".zshrc",
    ".cargo",
];

/// System directories whose files every process runs or trusts.
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/boot", "/opt",
    "/var", "/root", "/srv",
];

/// Read-only system paths every profile needs (strict's own list).
pub(super) fn is_baseline_read(path: &Path) -> bool {
    [
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
    ]
    .iter()
    .any(|dir| path.starts_with(dir))
        || (path.starts_with("/etc") && path != Path::new("/etc")) && !is_secret_in_etc(path)
}

fn is_secret_in_etc(path: &Path) -> bool {
    [
        "/etc/shadow",
        "/etc/gshadow",
        "/etc/sudoers",
        "/etc/ssh",
        "/etc/ssl/private",
    ]
    .iter()
    .any(|secret| path.starts_with(secret))
}

/// Where `path` stands to the homes: one of them or above one (`/home`),
/// inside one, or neither.
enum Home<'a> {
    WholeOrAbove,
    Inside(&'a Path),
    Outside,
}

/// Whether `home` is a person's: /etc/passwd also names system accounts'
/// directories (`/usr/sbin`, `/var/lib/postgresql`, `/bin`), and those
/// are rated as the system directories they are.
fn is_persons_home(home: &Path) -> bool {
    !SYSTEM
        .iter()
        .chain(&["/proc", "/sys", "/dev", "/run", "/tmp"])
        .any(|dir| *dir != "/root" && home.starts_with(dir))
        && home != Path::new("/")
}

fn home_relation<'a>(path: &'a Path, homes: &[PathBuf]) -> Home<'a> {
    let homes: Vec<&PathBuf> = homes.iter().filter(|h| is_persons_home(h)).collect();
    if homes.iter().any(|home| home.starts_with(path))
        || path == Path::new("/home")
        || path == Path::new("/root")
    {
        return Home::WholeOrAbove;
    }
    for home in homes
        .iter()
        .map(|h| h.as_path())
        .chain([Path::new("/root")])
    {
        if let Ok(rest) = path.strip_prefix(home) {
            return Home::Inside(rest);
        }
    }
    // /home/NAME/... of an account not in the list.
    if let Ok(rest) = path.strip_prefix("/home") {
        let mut parts = rest.components();
        if parts.next().is_some() {
            return Home::Inside(parts.as_path());
        }
    }
    Home::Outside
}

fn sensitive_in_home(rest: &Path) -> bool {
    rest.components()
        .next()
        .is_some_and(|first| SENSITIVE_IN_HOME.iter().any(|s| first.as_os_str() == *s))
}

/// Exposure of one writable path, and why.
pub(super) fn write_exposure(path: &Path, homes: &[PathBuf]) -> (f64, &'static str) {
    if path == Path::new("/") {
        return (1.0, "the whole host is writable");
    }
    match home_relation(path, homes) {
        Home::WholeOrAbove => {
            return (
                1.0,
                "a writable home: keys, shell start-up files, every checkout",
            )
        }
        Home::Inside(rest) if sensitive_in_home(rest) => {
            return (1.0, "keys or files the person's shell and tools run later")
        }
        Home::Inside(_) => return (0.6, "part of a home is writable"),
        Home::Outside => {}
    }
    if SYSTEM.iter().any(|dir| path.starts_with(dir)) {
        return (
            1.0,
            "system files every process runs or trusts are writable",
        );
    }
    if ["/proc", "/sys", "/dev"]
        .iter()
        .any(|dir| path.starts_with(dir))
    {
        return (0.9, "kernel or device files are writable");
    }
    if ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .any(|dir| path.starts_with(dir))
    {
        return (
            0.4,
            "a directory shared with the host's other programs is writable",
        );
    }
    (0.4, "a host directory outside the project is writable")
}

/// Exposure of one readable path, and why.
pub(super) fn read_exposure(
    path: &Path,
    hide: &[PathBuf],
    homes: &[PathBuf],
) -> (f64, &'static str) {
    if path == Path::new("/") {
        return (1.0, "every host file is readable");
    }
    match home_relation(path, homes) {
        Home::WholeOrAbove => return (0.9, "a readable home: keys, tokens, every checkout"),
        Home::Inside(rest) if sensitive_in_home(rest) => {
            return (0.8, "keys or tokens below a home are readable")
        }
        Home::Inside(_) => return (0.3, "part of a home is readable"),
        Home::Outside => {}
    }
    if path == Path::new("/etc") {
        let hidden = ["/etc/shadow", "/etc/ssh", "/etc/ssl/private"]
            .iter()
            .all(|secret| hide.iter().any(|h| Path::new(secret).starts_with(h)));
        return if hidden {
            (0.2, "all of /etc, its secrets hidden")
        } else {
            (0.6, "all of /etc, with host keys or password hashes")
        };
    }
    if is_secret_in_etc(path) {
        return (0.8, "host keys or password hashes are readable");
    }
    if is_baseline_read(path) {
        return (0.0, "system files");
    }
    if ["/run", "/var/run"].iter().any(|dir| path.starts_with(dir)) {
        return (
            0.7,
            "runtime sockets (a container engine's is root on the host)",
        );
    }
    if ["/proc", "/sys", "/dev", "/var", "/srv", "/mnt", "/media"]
        .iter()
        .any(|dir| path.starts_with(dir))
    {
        return (0.4, "host state or data beyond the system files");
    }
    if ["/tmp", "/var/tmp"].iter().any(|dir| path.starts_with(dir)) {
        return (0.3, "other programs' temporary files");
    }
    (0.15, "a host path beyond the system files")
}

/// The worst of several paths, plus a little for each other one.
pub(super) fn combined(
    mut rated: Vec<(f64, &'static str, &Path)>,
    per_extra: f64,
) -> (f64, String) {
    rated.sort_by(|a, b| b.0.total_cmp(&a.0));
    match rated.first() {
        None => (0.0, String::new()),
        Some(&(worst, why, path)) => {
            let extra = rated.iter().skip(1).filter(|r| r.0 > 0.0).count() as f64;
            let exposure = if worst > 0.0 {
                worst + per_extra * extra
            } else {
                0.0
            };
            (exposure, format!("{why} ({})", path.display()))
        }
    }
}

pub(super) fn path_list(paths: &[PathBuf], most: usize) -> String {
    if paths.is_empty() {
        return "none".into();
    }
    let mut shown: Vec<String> = paths
        .iter()
        .take(most)
        .map(|p| p.display().to_string())
        .collect();
    if paths.len() > most {
        shown.push(format!("+{} more", paths.len() - most));
    }
    shown.join(", ")
}
