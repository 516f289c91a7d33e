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

/// [`drop_all`] where CAP_SETPCAP allows it; otherwise (an unprivileged
/// caller without a user namespace, root in a container that lacks it)
/// clear what any process may clear: the ambient, inheritable, effective
/// and permitted sets. The bounding set and securebits then stay as they
/// are, which gives nothing back: with `no_new_privs` an execve, even as
/// uid 0, never adds to the permitted set. Returns whether the bounding
/// set was cleared too.
pub fn drop_all_available() -> Result<bool, CapsError> {
    let can_setpcap =
        caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).unwrap_or(false);
    if can_setpcap {
        drop_all()?;
        return Ok(true);
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set).map_err(|source| CapsError::Clear { set, source })?;
    }
    Ok(false)
}
