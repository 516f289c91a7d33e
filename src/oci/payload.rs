//! The static init, embedded in this binary at build time (see build.rs)
//! and written once per version into the state directory, from where
//! every container bind-mounts it read-only.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::Digest;

use super::OciError;

/// The init program's bytes.
static INIT: &[u8] = include_bytes!(env!("SANDBOX_OCI_INIT"));

/// The init's path under `state_dir`, written there if it is not yet: named
/// by its digest, so a newer build never runs an older init, and checked
/// byte for byte when found, so a file someone else put there is replaced.
pub fn materialize(state_dir: &Path) -> Result<PathBuf, OciError> {
    super::settings::private_dir(state_dir)?;
    let digest = hex(&sha2::Sha256::digest(INIT));
    let path = state_dir.join(format!("init-{}", &digest[..16]));
    let io = |what, source| OciError::Io {
        what,
        path: path.clone(),
        source,
    };
    if let Ok(metadata) = std::fs::symlink_metadata(&path) {
        let ours = metadata.is_file()
            && metadata.uid() == nix::unistd::geteuid().as_raw()
            && metadata.mode() & 0o7777 == 0o555
            && std::fs::read(&path).is_ok_and(|bytes| bytes == INIT);
        if ours {
            return Ok(path);
        }
    }
    let temporary = state_dir.join(format!(".init-{}.{}", &digest[..16], std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&temporary)
        .map_err(|e| io("writing the container init", e))?;
    file.write_all(INIT)
        .and_then(|()| file.set_permissions(std::fs::Permissions::from_mode(0o555)))
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing the container init", e))?;
    std::fs::rename(&temporary, &path).map_err(|e| io("installing the container init", e))?;
    Ok(path)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
