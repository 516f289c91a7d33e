//! Wall-clock time as the records and the wire protocols carry it.

/// Milliseconds since the Unix epoch: 0 for a clock set before it, and
/// saturated rather than wrapped past `u64`.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `secs` since the epoch as a UTC date and time, `YYYYMMDD` and `HHMMSS`
/// (names that sort in time order, such as review runs' ids).
pub fn utc_date_time(secs: u64) -> (String, String) {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    // Days to a civil date, counting in 400-year eras from 0000-03-01 so
    // that the leap day ends each year of the era.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}{month:02}{day:02}"),
        format!("{:02}{:02}{:02}", rest / 3600, rest % 3600 / 60, rest % 60),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates_match_known_days() {
        assert_eq!(
            super::utc_date_time(0),
            ("19700101".into(), "000000".into())
        );
        assert_eq!(
            super::utc_date_time(951_782_400),
            ("20000229".into(), "000000".into())
        );
        assert_eq!(
            super::utc_date_time(1_795_833_901),
            ("20261128".into(), "024501".into())
        );
    }
}
