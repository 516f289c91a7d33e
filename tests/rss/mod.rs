//! The supervisor's peak RSS, for tests that hold it to a bound.

/// The process's peak RSS (VmHWM, KiB), sampled until it exits.
pub fn peak_rss_until_exit(child: &mut std::process::Child) -> u64 {
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    while child.try_wait().unwrap().is_none() {
        if let Ok(text) = std::fs::read_to_string(&status) {
            if let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak_kib = peak_kib.max(kib);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    peak_kib
}
