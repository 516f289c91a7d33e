//! Dropping every capability of the payload.
//!
//! Order matters: the bounding set can only be reduced while CAP_SETPCAP is
//! still effective, and securebits must be locked before that too; only then
//! are the ambient, inheritable, effective and permitted sets cleared.

use caps::CapSet;

/// Which part of dropping failed.
#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    /// Locking securebits failed.
    #[error("locking securebits: {0}")]
    Securebits(nix::errno::Errno),
    /// Clearing a capability set failed.
    #[error("clearing the {set:?} capability set: {source}")]
    Clear {
        /// The set.
        set: CapSet,
        /// The error from the caps crate.
        source: caps::errors::CapsError,
    },
}

/// Lock securebits and clear every capability set, bounding set first.
/// After this, neither execve of a setuid binary nor uid 0 can bring back a
/// capability.
pub fn drop_all() -> Result<(), CapsError> {
    crate::sys::fd::lock_securebits().map_err(CapsError::Securebits)?;
    for set in [
        CapSet::Bounding,
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|source| CapsError::Clear { set, source })?;
    }
    Ok(())
}
