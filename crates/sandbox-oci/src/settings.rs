//! The runtime's own settings: `/etc/sandbox/oci.toml`, or the file
//! `SANDBOX_OCI_CONFIG` names. An engine starts its runtime by path with
//! no flags of ours, so this file is where an operator says which profile
//! containers get and which ones a container's annotation may choose.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::OciError;
use sandbox::profile::policy::Policy;

/// Where the settings are read from unless `SANDBOX_OCI_CONFIG` names a file.
pub const DEFAULT_PATH: &str = "/etc/sandbox/oci.toml";

/// The settings, defaults filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// runc (a path, or a name looked up on PATH).
    pub runc: PathBuf,
    /// The profile every container gets unless its annotation chooses another.
    pub profile: String,
    /// The profiles `run.sandbox.profile` may choose besides `profile`: who
    /// writes a pod or a `podman run` line must not be able to pick a
    /// looser one than the operator allowed.
    pub annotation_profiles: Vec<String>,
    /// Per-container records and the init binary.
    pub state_dir: PathBuf,
    /// Per-container audit logs (kept after the container is deleted).
    pub audit_dir: PathBuf,
    /// Where a CRI engine keeps each pod's own files (containerd's root and
    /// state, CRI-O's storage): a pod's container may bind-mount what lies
    /// there below its own pod's id (`crate::pod`).
    pub engine_dirs: Vec<PathBuf>,
    /// The kubelet's root: a pod's container may bind-mount what lies below
    /// `pods/<its pod's uid>` there (its volumes, its termination log).
    pub kubelet_dir: PathBuf,
    /// The host directories a pod's `hostPath` volumes may name, with
    /// everything below them. Empty by default: no pod mounts the host.
    pub host_paths: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    runc: Option<PathBuf>,
    profile: Option<String>,
    annotation_profiles: Option<Vec<String>>,
    state_dir: Option<PathBuf>,
    audit_dir: Option<PathBuf>,
    engine_dirs: Option<Vec<PathBuf>>,
    kubelet_dir: Option<PathBuf>,
    host_paths: Option<Vec<PathBuf>>,
}

/// containerd's and CRI-O's default roots and states.
const DEFAULT_ENGINE_DIRS: &[&str] = &[
    "/var/lib/containerd",
    "/run/containerd",
    "/var/lib/containers/storage",
    "/run/containers/storage",
];

fn default_dirs() -> (PathBuf, PathBuf) {
    if nix::unistd::geteuid().is_root() {
        return ("/run/sandbox-oci".into(), "/var/log/sandbox-oci".into());
    }
    // Rootless engines run their runtime as the user.
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("sandbox-oci-{}", nix::unistd::geteuid()))
        });
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| runtime.clone());
    (runtime.join("sandbox-oci"), state.join("sandbox/oci-audit"))
}

impl Settings {
    /// Read the settings file; a missing default file means the defaults,
    /// a missing file named by `SANDBOX_OCI_CONFIG` is an error.
    pub fn load() -> Result<Settings, OciError> {
        match std::env::var_os("SANDBOX_OCI_CONFIG") {
            Some(path) => Settings::read(Path::new(&path), true),
            None => Settings::read(Path::new(DEFAULT_PATH), false),
        }
    }

    fn read(path: &Path, must_exist: bool) -> Result<Settings, OciError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !must_exist => String::new(),
            Err(source) => {
                return Err(OciError::Io {
                    what: "reading the runtime's settings",
                    path: path.to_owned(),
                    source,
                })
            }
        };
        Settings::parse(&text, path)
    }

    /// Parse settings text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Settings, OciError> {
        let raw: RawSettings = toml::from_str(text)
            .map_err(|err| OciError::Settings(format!("{}: {err}", path.display())))?;
        let (state_dir, audit_dir) = default_dirs();
        let settings = Settings {
            runc: raw.runc.unwrap_or_else(|| "runc".into()),
            profile: raw.profile.unwrap_or_else(|| "strict".to_owned()),
            annotation_profiles: raw.annotation_profiles.unwrap_or_default(),
            state_dir: raw.state_dir.unwrap_or(state_dir),
            audit_dir: raw.audit_dir.unwrap_or(audit_dir),
            engine_dirs: raw
                .engine_dirs
                .unwrap_or_else(|| DEFAULT_ENGINE_DIRS.iter().map(PathBuf::from).collect()),
            kubelet_dir: raw.kubelet_dir.unwrap_or_else(|| "/var/lib/kubelet".into()),
            host_paths: raw.host_paths.unwrap_or_default(),
        };
        let dirs = [
            &settings.state_dir,
            &settings.audit_dir,
            &settings.kubelet_dir,
        ]
        .into_iter()
        .chain(&settings.engine_dirs)
        .chain(&settings.host_paths);
        for dir in dirs {
            if !dir.is_absolute() {
                return Err(OciError::Settings(format!(
                    "{}: {} is not an absolute path",
                    path.display(),
                    dir.display()
                )));
            }
        }
        Ok(settings)
    }

    /// The profile for a container whose annotation asks for `requested`.
    pub fn profile_for(&self, requested: Option<&str>) -> Result<Policy, OciError> {
        let name = match requested {
            None => self.profile.as_str(),
            Some(name)
                if name == self.profile || self.annotation_profiles.iter().any(|p| p == name) =>
            {
                name
            }
            Some(name) => {
                return Err(OciError::Refused(format!(
                    "the container's {} annotation asks for profile {name:?}, which the runtime's \
                     settings do not let an annotation choose (annotation_profiles = {:?}); add it \
                     there ({}), or remove the annotation to get {:?}",
                    super::spec::PROFILE_ANNOTATION,
                    self.annotation_profiles,
                    DEFAULT_PATH,
                    self.profile
                )))
            }
        };
        sandbox::profile::load(name).map_err(|err| OciError::Profile(format!("{name}: {err}")))
    }

    /// runc's path, which must not be this program (a `runc` link to it
    /// would run itself forever).
    pub fn runc(&self) -> Result<PathBuf, OciError> {
        let found = if self.runc.components().count() > 1 {
            self.runc.clone()
        } else {
            let path = std::env::var_os("PATH").unwrap_or_else(|| {
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()
            });
            std::env::split_paths(&path)
                .map(|dir| dir.join(&self.runc))
                .find(|candidate| candidate.is_file())
                .ok_or_else(|| {
                    OciError::Runc(format!(
                        "{} is not on PATH; install runc or set `runc = \"/path/to/runc\"` in {}",
                        self.runc.display(),
                        DEFAULT_PATH
                    ))
                })?
        };
        let ours = std::env::current_exe().and_then(std::fs::canonicalize).ok();
        if ours.is_some() && std::fs::canonicalize(&found).ok() == ours {
            return Err(OciError::Runc(format!(
                "{} is sandbox itself; set `runc` in {} to the real runc",
                found.display(),
                DEFAULT_PATH
            )));
        }
        Ok(found)
    }
}

/// Create `dir` (and its parents) if missing; the last component is made
/// private to this user (0700): it holds containers' records and logs.
pub fn private_dir(dir: &Path) -> Result<(), OciError> {
    use std::os::unix::fs::DirBuilderExt;
    let io = |what, source| OciError::Io {
        what,
        path: dir.to_owned(),
        source,
    };
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(|e| io("creating a state directory", e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(io("creating a state directory", err)),
    }
    check_private(dir)
}

/// Refuse `dir` unless it is this user's own directory and nobody else can
/// replace it or anything on the way to it: whoever can rename an entry of
/// a directory on the path can put a record of their own (and with it the
/// layers of every `exec`) or an init of their own in its place. Checked
/// along the path as written and as resolved, so a link on the way is
/// covered as well as what it points at.
pub fn check_private(dir: &Path) -> Result<(), OciError> {
    use std::os::unix::fs::MetadataExt;
    let io = |what, source| OciError::Io {
        what,
        path: dir.to_owned(),
        source,
    };
    let euid = nix::unistd::geteuid().as_raw();
    let metadata =
        std::fs::symlink_metadata(dir).map_err(|e| io("checking a state directory", e))?;
    if !metadata.is_dir() || metadata.uid() != euid || metadata.mode() & 0o022 != 0 {
        return Err(OciError::Settings(format!(
            "{} is not a directory of this user's that only it can write: refusing to keep \
             container state in it (chown it to uid {euid} and chmod 700, or remove it)",
            dir.display()
        )));
    }
    let resolved = std::fs::canonicalize(dir).map_err(|e| io("resolving a state directory", e))?;
    for path in [dir, resolved.as_path()] {
        for ancestor in path.ancestors().skip(1) {
            let metadata = std::fs::symlink_metadata(ancestor)
                .map_err(|e| io("checking a state directory's parents", e))?;
            if metadata.file_type().is_symlink() {
                continue;
            }
            let owner_trusted = metadata.uid() == 0 || metadata.uid() == euid;
            // A sticky directory (/tmp) lets others add entries, not
            // rename or remove this user's.
            let others_write = metadata.mode() & 0o022 != 0 && metadata.mode() & 0o1000 == 0;
            if !owner_trusted || others_write {
                return Err(OciError::Settings(format!(
                    "{} is below {}, which another user can write (owner uid {}, mode {:o}): \
                     they could replace the containers' records and init; choose a state_dir \
                     and audit_dir below directories only root can write",
                    dir.display(),
                    ancestor.display(),
                    metadata.uid(),
                    metadata.mode() & 0o7777
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_choose_only_what_the_operator_listed() {
        let settings = Settings::parse(
            "profile = \"strict\"\nannotation_profiles = [\"standard\"]\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(settings.profile_for(None).unwrap().name, "strict");
        assert_eq!(
            settings.profile_for(Some("standard")).unwrap().name,
            "standard"
        );
        let err = settings
            .profile_for(Some("permissive"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("permissive") && err.contains("annotation_profiles"),
            "{err}"
        );
    }

    #[test]
    fn state_below_a_directory_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let open = base.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&open.join("state")).unwrap_err().to_string();
        assert!(err.contains("another user can write"), "{err}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&open.join("state")).unwrap();
        std::fs::set_permissions(open.join("state"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let err = private_dir(&open.join("state")).unwrap_err().to_string();
        assert!(err.contains("only it can write"), "{err}");
    }

    #[test]
    fn broken_settings_name_the_file_and_the_field() {
        let err = Settings::parse("profle = \"x\"\n", Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/etc/x.toml") && err.contains("profle"),
            "{err}"
        );
        let err = Settings::parse("state_dir = \"rel\"\n", Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an absolute path"), "{err}");
    }
}
