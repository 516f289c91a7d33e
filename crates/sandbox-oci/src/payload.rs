//! The static init, embedded deflated in this binary at build time (see
//! build.rs) and written once per version into the state directory, from
//! where every container bind-mounts it read-only.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::OciError;

/// The init program, deflated.
static INIT_DEFLATED: &[u8] = include_bytes!(env!("SANDBOX_OCI_INIT_DEFLATE"));
/// Its size once inflated.
const INIT_LEN: &str = env!("SANDBOX_OCI_INIT_LEN");
/// A digest of it, naming its version.
const INIT_DIGEST: &str = env!("SANDBOX_OCI_INIT_DIGEST");

/// The init's path under `state_dir`, written there if it is not yet.
///
/// Named by the build's digest, so a newer build never runs an older init.
/// Found already there, it is trusted by where it is, not by its content:
/// `state_dir` is checked to be this user's alone along its whole path
/// (see [`super::settings::private_dir`]), so only this user could have
/// written the file, and reading 1 MiB back on every `create` would cost
/// each container milliseconds for nothing.
pub fn materialize(state_dir: &Path) -> Result<PathBuf, OciError> {
    super::settings::private_dir(state_dir)?;
    let path = state_dir.join(format!("init-{INIT_DIGEST}"));
    let io = |what, source| OciError::Io {
        what,
        path: path.clone(),
        source,
    };
    let expected_len = INIT_LEN.parse::<u64>().unwrap_or(0);
    if let Ok(metadata) = std::fs::symlink_metadata(&path) {
        let ours = metadata.is_file()
            && metadata.uid() == nix::unistd::geteuid().as_raw()
            && metadata.mode() & 0o7777 == 0o555
            && metadata.len() == expected_len;
        if ours {
            return Ok(path);
        }
    }
    let init =
        miniz_oxide::inflate::decompress_to_vec_with_limit(INIT_DEFLATED, expected_len as usize)
            .map_err(|err| {
                io(
                    "inflating the embedded container init",
                    std::io::Error::other(format!("{err:?}")),
                )
            })?;
    let temporary = state_dir.join(format!(".init-{INIT_DIGEST}.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let mut file = sandbox::safe_file::create_new(&temporary, 0o600)
        .map_err(|e| io("writing the container init", e.into()))?;
    file.write_all(&init)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(0o555)))
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing the container init", e))?;
    std::fs::rename(&temporary, &path).map_err(|e| io("installing the container init", e))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_init_inflates_to_its_recorded_size() {
        let len: usize = super::INIT_LEN.parse().unwrap();
        let init =
            miniz_oxide::inflate::decompress_to_vec_with_limit(super::INIT_DEFLATED, len).unwrap();
        assert_eq!(init.len(), len);
        assert_eq!(&init[..4], b"\x7fELF");
    }
}
