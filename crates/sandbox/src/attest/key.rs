//! The signing key of attestations: an Ed25519 key per user (or per
//! daemon, in its own state directory), made on first use. The private
//! half is a 32-byte seed in hex in `STATE/attest/ed25519`, created with
//! `O_EXCL` beneath a private directory and mode 0600, and read only if
//! it is still a regular file of this user that no one else can read or
//! write; the public half is beside it in `ed25519.pub`, also in hex.

use std::io::Read;
use std::path::{Path, PathBuf};

use ring::signature::{Ed25519KeyPair, KeyPair};

/// Why the key could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Opening, creating or reading a key file (the error names it).
    #[error(transparent)]
    File(#[from] crate::safe_file::SafeFileError),
    /// Reading or writing a key file.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The private key file can be read or written by others.
    #[error("the attestation key {path} has mode {mode:o} or another owner: anyone who can read it can sign as you; remove it (a new key is made on the next use) or `chmod 600` it if you trust it")]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// Not a key.
    #[error("{path} does not hold an Ed25519 key (64 hex digits): {why}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// ring refused the seed (it checks only its length, which the type
    /// fixes).
    #[error("the Ed25519 library refused the key's seed")]
    Rejected,
    /// The system's random numbers.
    #[error("no random numbers for a new key from the system")]
    Random,
}

/// An Ed25519 private key and its public half.
pub struct SigningKey {
    pair: Ed25519KeyPair,
    public: [u8; 32],
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("keyid", &key_id(&self.public))
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The key of seed `seed`.
    pub fn from_seed(seed: &[u8; 32]) -> Result<SigningKey, KeyError> {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|_| KeyError::Rejected)?;
        let mut public = [0u8; 32];
        public.copy_from_slice(pair.public_key().as_ref());
        Ok(SigningKey { pair, public })
    }

    /// A new random key.
    pub fn generate() -> Result<([u8; 32], SigningKey), KeyError> {
        use ring::rand::SecureRandom;
        let mut seed = [0u8; 32];
        ring::rand::SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| KeyError::Random)?;
        let key = SigningKey::from_seed(&seed)?;
        Ok((seed, key))
    }

    /// The raw public key.
    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }

    /// The signature of `message`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair.sign(message).as_ref().to_vec()
    }
}

/// Whether `signature` is `public`'s over `message`.
pub fn verify(public: &[u8; 32], message: &[u8], signature: &[u8]) -> bool {
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
        .verify(message, signature)
        .is_ok()
}

/// SHA-256 (hex) of a raw public key: the envelope's `keyid`.
pub fn key_id(public: &[u8; 32]) -> String {
    use sha2::Digest;
    crate::audit::chain::hex(&sha2::Sha256::digest(public).into())
}

/// Where the user's key lives: `STATE/attest/`.
pub fn user_dir() -> PathBuf {
    crate::safe_file::state_dir().join("attest")
}

/// Where a daemon's key lives: `attest/` in its state directory, which
/// only the daemon's user may enter.
pub fn daemon_dir(state: &Path) -> PathBuf {
    state.join("attest")
}

/// The private key's file in `dir`.
pub fn private_path(dir: &Path) -> PathBuf {
    dir.join("ed25519")
}

/// The public key's file in `dir`.
pub fn public_path(dir: &Path) -> PathBuf {
    dir.join("ed25519.pub")
}

/// The key in `dir`, made there first if there is none: and whether it
/// was made now.
pub fn load_or_create(dir: &Path) -> Result<(SigningKey, bool), KeyError> {
    let private = private_path(dir);
    match crate::safe_file::open_read(&private) {
        Ok(file) => return read_private(file, &private).map(|key| (key, false)),
        Err(err) if err.is_not_found() => {}
        Err(err) => return Err(err.into()),
    }
    create_private_dir(dir)?;
    let (seed, key) = SigningKey::generate()?;
    let mut text = crate::audit::chain::hex(&seed);
    text.push('\n');
    // Written whole under another name, then named without replacing: of
    // two first uses at once one makes the key and the other reads it
    // below, never an empty or partial file (nor one a crash left).
    if !crate::safe_file::create_whole(&private, text.as_bytes())? {
        let file = crate::safe_file::open_read(&private)?;
        return read_private(file, &private).map(|key| (key, false));
    }
    let mut public = crate::audit::chain::hex(key.public());
    public.push('\n');
    crate::safe_file::replace(&public_path(dir), public.as_bytes())?;
    Ok((key, true))
}

fn create_private_dir(dir: &Path) -> Result<(), KeyError> {
    use std::os::unix::fs::DirBuilderExt;
    let io = |source| KeyError::Io {
        op: "creating the directory",
        path: dir.to_path_buf(),
        source,
    };
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => Ok(()),
        Err(source) => Err(io(source)),
    }
}

/// At most this much of a key file is read.
const KEY_FILE_MAX: u64 = 4096;

fn read_private(file: std::fs::File, path: &Path) -> Result<SigningKey, KeyError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|source| KeyError::Io {
        op: "reading",
        path: path.to_path_buf(),
        source,
    })?;
    if meta.mode() & 0o077 != 0 || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(KeyError::Exposed {
            path: path.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    let seed = read_hex_key(file, path)?;
    SigningKey::from_seed(&seed)
}

/// A public key from a file: 64 hex digits (`ed25519.pub`), or the
/// private key's file, whose public half is taken.
pub fn read_public(path: &Path) -> Result<[u8; 32], KeyError> {
    let file = crate::safe_file::open_read(path)?;
    let bytes = read_hex_key(file, path)?;
    if path.extension().is_some_and(|e| e == "pub") {
        return Ok(bytes);
    }
    // A file of 64 hex digits is either half; the private one's name is
    // ours (`ed25519`), anything else is taken as a public key.
    if path.file_name().is_some_and(|n| n == "ed25519") {
        return Ok(*SigningKey::from_seed(&bytes)?.public());
    }
    Ok(bytes)
}

fn read_hex_key(file: std::fs::File, path: &Path) -> Result<[u8; 32], KeyError> {
    let mut text = String::new();
    file.take(KEY_FILE_MAX)
        .read_to_string(&mut text)
        .map_err(|source| KeyError::Io {
            op: "reading",
            path: path.to_path_buf(),
            source,
        })?;
    let malformed = |why| KeyError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    let digits = text.trim();
    if digits.len() != 64 {
        return Err(malformed("not 64 characters"));
    }
    let mut out = [0u8; 32];
    for (i, pair) in digits.as_bytes().chunks(2).enumerate() {
        let pair = std::str::from_utf8(pair).map_err(|_| malformed("not hex"))?;
        out[i] = u8::from_str_radix(pair, 16).map_err(|_| malformed("not hex"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_made_once_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("attest");
        let (key, made) = load_or_create(&home).unwrap();
        assert!(made);
        let mode = std::fs::metadata(private_path(&home))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, made) = load_or_create(&home).unwrap();
        assert!(!made);
        assert_eq!(key.public(), again.public());
        assert_eq!(&read_public(&public_path(&home)).unwrap(), key.public());
        assert_eq!(&read_public(&private_path(&home)).unwrap(), key.public());
        let signature = key.sign(b"m");
        assert!(verify(key.public(), b"m", &signature));
        assert!(!verify(key.public(), b"n", &signature));
    }

    /// The daemon makes its key on the first request that needs it, and
    /// two requests may come at once: the one that loses the race read a
    /// key file still empty and failed (and a daemon that stopped between
    /// making the file and writing it would have kept an empty key).
    #[test]
    fn first_uses_at_once_all_get_the_one_key() {
        for _ in 0..50 {
            let dir = tempfile::tempdir().unwrap();
            let home = dir.path().join("attest");
            let start = std::sync::Arc::new(std::sync::Barrier::new(4));
            let keys: Vec<_> = (0..4)
                .map(|_| {
                    let (home, start) = (home.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        load_or_create(&home).map(|(key, _)| *key.public())
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| t.join().unwrap().expect("every first use gets the key"))
                .collect();
            assert!(keys.windows(2).all(|w| w[0] == w[1]));
        }
    }

    #[test]
    fn a_key_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("attest");
        load_or_create(&home).unwrap();
        std::fs::set_permissions(private_path(&home), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        let err = load_or_create(&home).unwrap_err();
        assert!(matches!(err, KeyError::Exposed { .. }), "{err}");
    }

    #[test]
    fn a_link_at_the_keys_name_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("attest");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(dir.path().join("planted"), "00".repeat(32)).unwrap();
        std::os::unix::fs::symlink(dir.path().join("planted"), private_path(&home)).unwrap();
        assert!(load_or_create(&home).is_err());
    }
}
