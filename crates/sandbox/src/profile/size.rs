//! Sizes ("512MiB") and durations ("10m"), shared by profiles and CLI flags.
//!
//! Only whole numbers are accepted: a limit is a security boundary, and
//! "0.1GiB" invites rounding questions that an exact "100MiB" does not.
//!
//! The bounds of each limit live here too, so that a profile value, a
//! command-line flag and a skill manifest are held to the same range and
//! say it in the same words (`check_*`, and the `*_flag` parsers clap uses).

use std::time::Duration;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;

/// Split "512MiB" into ("512", "MiB"); whitespace between the two is allowed.
fn split_number(s: &str) -> (&str, &str) {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    (&s[..end], s[end..].trim_start())
}

/// Parse a byte size: an integer with an optional unit.
///
/// Binary units: `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (powers of 1024, as
/// `ulimit` and Docker read them). Decimal units: `KB`, `MB`, `GB`, `TB` (powers
/// of 1000). `B` or no unit means bytes. Units are case-insensitive.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let (digits, unit) = split_number(text);
    let usage = "expected an integer with an optional unit (B, KiB, MiB, GiB, TiB; K, M, G, T are the same; KB, MB, GB, TB are powers of 1000), e.g. \"512MiB\"";
    if digits.is_empty() {
        return Err(format!("invalid size \"{s}\": {usage}"));
    }
    let multiplier = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => KIB,
        "m" | "mib" => MIB,
        "g" | "gib" => GIB,
        "t" | "tib" => TIB,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => {
            return Err(format!(
                "invalid size \"{s}\": unknown unit \"{unit}\"; {usage}"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("size \"{s}\" is too large"))
}

/// Parse a duration: one or more integer-unit pairs (`ms`, `s`, `m`, `h`, `d`),
/// e.g. "500ms", "30s", "10m", "1h30m". A bare integer means seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let usage =
        "expected an integer with a unit (ms, s, m, h, d), e.g. \"30s\", \"10m\" or \"1h30m\"";
    if text.is_empty() {
        return Err(format!("invalid duration \"{s}\": {usage}"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("duration \"{s}\" is too large"));
    }
    let too_large = || format!("duration \"{s}\" is too large");
    let mut rest = text;
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let (digits, after) = split_number(rest);
        if digits.is_empty() {
            return Err(format!("invalid duration \"{s}\": {usage}"));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let n: u64 = digits.parse().map_err(|_| too_large())?;
        let part = match unit {
            "ms" => Some(Duration::from_millis(n)),
            "s" => Some(Duration::from_secs(n)),
            "m" => n.checked_mul(60).map(Duration::from_secs),
            "h" => n.checked_mul(3_600).map(Duration::from_secs),
            "d" => n.checked_mul(86_400).map(Duration::from_secs),
            "" => {
                return Err(format!(
                    "invalid duration \"{s}\": a unit is missing after {digits}; {usage}"
                ))
            }
            _ => {
                return Err(format!(
                    "invalid duration \"{s}\": unknown unit \"{unit}\"; {usage}"
                ))
            }
        };
        total = part
            .and_then(|p| total.checked_add(p))
            .ok_or_else(too_large)?;
        rest = next.trim_start();
    }
    Ok(total)
}

/// Longest timeout anywhere (profile, `--timeout`, a skill's `timeout`).
/// Deadlines are `Instant::now() + timeout`, which panics past the end of
/// the monotonic clock's range (`--timeout 18446744073709551615` did); a
/// year is far beyond any run and far inside that range.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 86_400);
/// [`MAX_TIMEOUT`] as it is written in messages.
const MAX_TIMEOUT_TEXT: &str = "365d";
/// Smallest memory limit: below this even a static binary fails to start,
/// which would look like a sandbox bug rather than a limit.
pub const MIN_MEMORY: u64 = MIB;
/// Largest private `/tmp`: it is RAM (tmpfs), so a bigger one is almost
/// certainly a typo.
pub const MAX_TMP: u64 = 64 * GIB;
/// Largest CPU share, in cores.
pub const MAX_CPU: f64 = 1024.0;
/// Most tasks: the kernel's PID_MAX_LIMIT on 64-bit, above which `pids.max`
/// refuses the value (ERANGE) and the run fails in setup instead of here.
pub const MAX_PIDS: u64 = 4 << 20;

/// A timeout is more than 0 and at most [`MAX_TIMEOUT`].
pub fn check_timeout(timeout: Duration) -> Result<Duration, String> {
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        return Err(format!(
            "must be more than 0 and at most {MAX_TIMEOUT_TEXT}"
        ));
    }
    Ok(timeout)
}

/// A memory limit is at least [`MIN_MEMORY`].
pub fn check_memory(bytes: u64) -> Result<u64, String> {
    if bytes < MIN_MEMORY {
        return Err("must be at least 1MiB".into());
    }
    Ok(bytes)
}

/// A private `/tmp` is more than 0 and at most [`MAX_TMP`].
pub fn check_tmp(bytes: u64) -> Result<u64, String> {
    if bytes == 0 || bytes > MAX_TMP {
        return Err("must be more than 0 and at most 64GiB (it is held in memory)".into());
    }
    Ok(bytes)
}

/// A CPU share is more than 0 and at most [`MAX_CPU`] cores.
pub fn check_cpu(cores: f64) -> Result<f64, String> {
    // Negated so that NaN fails it too.
    if !(cores > 0.0 && cores <= MAX_CPU) {
        return Err("must be more than 0 and at most 1024 cores".into());
    }
    Ok(cores)
}

/// A task count is at least 1 and at most [`MAX_PIDS`].
pub fn check_pids(count: u64) -> Result<u64, String> {
    if count == 0 || count > MAX_PIDS {
        return Err(format!("must be at least 1 and at most {MAX_PIDS}"));
    }
    Ok(count)
}

/// `--timeout`: a duration within [`check_timeout`]'s range.
pub fn timeout_flag(s: &str) -> Result<Duration, String> {
    parse_duration(s).and_then(check_timeout)
}

/// `--memory`: a size within [`check_memory`]'s range.
pub fn memory_flag(s: &str) -> Result<u64, String> {
    parse_size(s).and_then(check_memory)
}

/// `--tmp-size`: a size within [`check_tmp`]'s range.
pub fn tmp_flag(s: &str) -> Result<u64, String> {
    parse_size(s).and_then(check_tmp)
}

/// `--max-output`: any size (0 drops all output, as in a profile).
pub fn output_flag(s: &str) -> Result<u64, String> {
    parse_size(s)
}

/// `--pids`: a whole number within [`check_pids`]'s range.
pub fn pids_flag(s: &str) -> Result<u64, String> {
    let text = s.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid count \"{s}\": expected a whole number from 1 to {MAX_PIDS}"
        ));
    }
    text.parse::<u64>()
        .map_err(|_| format!("count \"{s}\" is too large"))
        .and_then(check_pids)
}

/// `--cpus`: a number of cores within [`check_cpu`]'s range.
pub fn cpus_flag(s: &str) -> Result<f64, String> {
    let cores: f64 = s.trim().parse().map_err(|_| {
        format!("invalid number of cores \"{s}\": expected a number such as 0.5 or 2")
    })?;
    check_cpu(cores)
}

/// The shortest exact spelling of `bytes` that [`parse_size`] reads back.
pub fn format_size(bytes: u64) -> String {
    for (unit, size) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes != 0 && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    format!("{bytes}B")
}

/// The shortest exact spelling of `d` (to the millisecond) that [`parse_duration`] reads back.
pub fn format_duration(d: Duration) -> String {
    let millis = d.as_millis();
    if millis % 1_000 != 0 {
        return format!("{millis}ms");
    }
    let secs = d.as_secs();
    if secs != 0 && secs % 3_600 == 0 {
        format!("{}h", secs / 3_600)
    } else if secs != 0 && secs % 60 == 0 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512MiB"), Ok(512 * MIB));
        assert_eq!(parse_size("64M"), Ok(64 * MIB));
        assert_eq!(parse_size("1GiB"), Ok(GIB));
        assert_eq!(parse_size("1 gib"), Ok(GIB));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("7B"), Ok(7));
    }

    #[test]
    fn bad_sizes() {
        for bad in [
            "",
            "MiB",
            "-1",
            "1.5GiB",
            "12 parsecs",
            "99999999999999999999",
            "16777216TiB",
            "1MiB2",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
    }

    #[test]
    fn bad_durations() {
        for bad in [
            "",
            "s",
            "10x",
            "-5s",
            "1.5h",
            "99999999999999999999s",
            "18446744073709551615d",
            "1h30",
            "ms5",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn bounds_are_the_same_for_every_source() {
        assert_eq!(parse_duration(MAX_TIMEOUT_TEXT), Ok(MAX_TIMEOUT));
        assert_eq!(timeout_flag("365d"), Ok(MAX_TIMEOUT));
        assert_eq!(timeout_flag("1ms"), Ok(Duration::from_millis(1)));
        for bad in ["0", "0s", "0ms", "366d", "18446744073709551615", "-1", "x"] {
            assert!(timeout_flag(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(
            timeout_flag("0s"),
            Err("must be more than 0 and at most 365d".into())
        );
        assert_eq!(memory_flag("1MiB"), Ok(MIB));
        assert!(memory_flag("1023KiB").is_err());
        assert_eq!(tmp_flag("64GiB"), Ok(64 * GIB));
        assert!(tmp_flag("0").is_err() && tmp_flag("65GiB").is_err());
        assert_eq!(pids_flag("4194304"), Ok(4_194_304));
        for bad in ["0", "4194305", "-1", "", "1.5", "18446744073709551616", "x"] {
            assert!(pids_flag(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(cpus_flag("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf", "1025", "1e308", "x"] {
            assert!(cpus_flag(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn formatting_round_trips() {
        for bytes in [0, 1, 4096, 512 * MIB, 3 * GIB, 5 * TIB, 1_000_000] {
            assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }
        assert_eq!(format_size(512 * MIB), "512MiB");
        for d in [0, 1, 500, 30_000, 600_000, 3_600_000, 5_400_000, 90_061_001] {
            let d = Duration::from_millis(d);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_secs(3600)), "1h");
    }
}
