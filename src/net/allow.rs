//! (being written: the lead's temporary stand-ins until helper "proxy" lands)

/// Temporary.
pub fn check_entry(entry: &str) -> Result<(), String> {
    if entry.trim().is_empty() {
        return Err("an empty entry".into());
    }
    Ok(())
}

/// Temporary.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("an empty name".into());
    }
    Ok(())
}

/// Temporary.
pub fn entry_within(entry: &str, outer: &[String]) -> bool {
    outer.iter().any(|o| o == entry)
}
