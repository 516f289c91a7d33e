//! Wall-clock time as the records and the wire protocols carry it.

/// Milliseconds since the Unix epoch: 0 for a clock set before it, and
/// saturated rather than wrapped past `u64`.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
