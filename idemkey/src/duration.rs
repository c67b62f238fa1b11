//! Durations as settings take them: `500ms`, `2s`, `15m`, `24h`, `30d`,
//! parsed with an upper bound and written back the same way, and the bounds
//! every setting of the library and its applications shares.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idemkey_core::UnixMillis;

/// The longest duration any option takes (3650 days): replay windows,
/// tombstone and Redis retention. Far from where `Instant`, tokio's timers
/// or a PostgreSQL interval would overflow, so no setting can panic or
/// fail a statement later.
pub const MAX_DURATION: Duration = Duration::from_secs(3_650 * 86_400);

/// The longest wait or timeout (1 hour): `--pool-wait`, `--lock-timeout`,
/// `--statement-timeout` (PostgreSQL takes these two in milliseconds as a
/// 32-bit integer, at most about 24 days), `--body-read-timeout`,
/// `--shutdown-grace`, `--auth-cache-ttl` (the longest a revoked token can
/// replay from a cache) and `--redis-wait-timeout`.
pub const MAX_WAIT: Duration = Duration::from_secs(3_600);

/// The longest period of background work or claim (1 day):
/// `--trim-interval`, `--token-last-used-interval`, the fixture's `--lease`.
pub const MAX_INTERVAL: Duration = Duration::from_secs(86_400);

/// Parses `500ms`, `2s`, `15m`, `24h` or `30d` (a whole number and a unit),
/// at most [`MAX_DURATION`]: the parser of every duration option without a
/// tighter bound of its own ([`duration_at_most`]).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_at_most(s, MAX_DURATION)
}

/// The parser of a duration option that takes at most `max`; clap's error
/// then names the option, and this message the bound.
pub fn duration_at_most(
    max: Duration,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| parse_at_most(s, max)
}

fn parse_at_most(s: &str, max: Duration) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{s:?} needs a unit: ms, s, m, h or d (e.g. 24h)"))?;
    let (number, unit) = s.split_at(split);
    let too_long = || {
        format!(
            "{s:?} is longer than this option's upper bound of {}",
            human_duration(max)
        )
    };
    let n: u64 = match number.parse() {
        Ok(n) => n,
        // All digits but too many for a u64: longer than any bound.
        Err(_) if !number.is_empty() => return Err(too_long()),
        Err(_) => return Err(format!("{s:?} must start with a whole number (e.g. 15m)")),
    };
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => return Err(format!("unknown unit {other:?}: use ms, s, m, h or d")),
    };
    n.checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .filter(|d| *d <= max)
        .ok_or_else(too_long)
}

/// `2s`, `15m`, `24h`, `30d` or milliseconds, as the command line reads them.
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    for (unit, len) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if secs.is_multiple_of(len) {
            return format!("{}{unit}", secs / len);
        }
    }
    format!("{secs}s")
}

/// RFC 3339 in UTC with milliseconds, e.g. `2026-12-02T17:49:54.123Z`.
/// Written here (the proleptic Gregorian calendar from days since the
/// epoch) rather than taken from a date crate: this is the library's only
/// date, and a dependency would cost every user five crates.
pub fn rfc3339(t: idemkey_core::UnixMillis) -> String {
    // Past year 9999 RFC 3339 has no form: clamp to its last instant.
    const MAX_MILLIS: u64 = 253_402_300_799_999;
    let millis = t.0.min(MAX_MILLIS);
    let (days, in_day) = (millis / 86_400_000, millis % 86_400_000);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1_000 % 60,
        in_day % 1_000
    )
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`,
/// for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Milliseconds since the epoch as a [`SystemTime`].
pub fn to_system_time(t: UnixMillis) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t.0)
}

/// A [`SystemTime`] as milliseconds since the epoch (0 before the epoch).
pub fn from_system_time(t: SystemTime) -> UnixMillis {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    UnixMillis(ms)
}

/// A duration in whole milliseconds, as statements take it (saturating).
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip_through_their_text() {
        for text in ["500ms", "2s", "15m", "36h", "30d"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(human_duration(d), text);
        }
        assert!(parse_duration("3651d").is_err());
        assert!(duration_at_most(MAX_WAIT)("2h").is_err());
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("5w").is_err());
    }

    #[test]
    fn time_round_trips_through_system_time() {
        let t = UnixMillis(1_764_700_000_123);
        assert_eq!(from_system_time(to_system_time(t)), t);
    }

    #[test]
    fn rfc3339_has_millis_and_utc() {
        assert_eq!(rfc3339(UnixMillis(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UnixMillis(1_764_700_000_123)),
            "2025-12-02T18:26:40.123Z"
        );
    }

    #[test]
    fn rfc3339_knows_leap_days_and_clamps_past_year_9999() {
        // Expected values from `date -u -d @SECONDS`.
        for (secs, text) in [
            (951_782_400, "2000-02-29T00:00:00.000Z"),
            (1_709_164_800, "2024-02-29T00:00:00.000Z"),
            (4_107_542_399, "2100-02-28T23:59:59.000Z"),
            (253_402_300_799, "9999-12-31T23:59:59.000Z"),
        ] {
            assert_eq!(rfc3339(UnixMillis(secs * 1_000)), text, "{secs}");
        }
        assert_eq!(rfc3339(UnixMillis(u64::MAX)), "9999-12-31T23:59:59.999Z");
    }
}
