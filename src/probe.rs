//! Probes of what this kernel and environment support.

/// Temporary until the probe module lands.
pub fn userns_unavailable_reason() -> Option<String> {
    None
}
