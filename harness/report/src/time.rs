//! Time as a report writes it: RFC 3339 in UTC with milliseconds, without a time crate.

/// Milliseconds since the epoch of an RFC 3339 UTC time as [`rfc3339`] writes it
/// (`YYYY-MM-DDTHH:MM:SS[.fff]Z`); None for anything else.
pub fn unix_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
    let millis: u64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Howard Hinnant's days-from-civil, the inverse of Civil::from_unix.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000) + millis)
}

/// A UTC calendar date and time, without a time crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
}

impl Civil {
    /// From seconds since the epoch (Howard Hinnant's days-to-civil algorithm).
    pub fn from_unix(secs: u64) -> Self {
        let z = (secs / 86_400) as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let rem = secs % 86_400;
        Self {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }
}

/// RFC 3339 (UTC, milliseconds) for a `SystemTime`.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    let d = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let c = Civil::from_unix(d.as_secs());
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year,
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_796_000_000_123);
        assert_eq!(rfc3339(t), "2026-11-30T00:53:20.123Z");
    }

    #[test]
    fn unix_ms_inverts_rfc3339() {
        for ms in [0, 951_782_400_000, 1_796_000_000_123, 4_102_444_799_999] {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            assert_eq!(unix_ms(&rfc3339(t)), Some(ms), "{}", rfc3339(t));
        }
        assert_eq!(unix_ms("2026-11-30T00:53:20Z"), Some(1_796_000_000_000));
        for bad in [
            "",
            "2026-11-30",
            "2026-13-01T00:00:00Z",
            "2026-11-30T00:53:20+01:00",
        ] {
            assert_eq!(unix_ms(bad), None, "{bad}");
        }
    }
}
