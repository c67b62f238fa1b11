//! A process's own wall clock, read from the outside: the `Date` header of
//! its HTTP answers (hyper writes it from the process's clock). A test that
//! runs a process with its clock off (libfaketime) checks the skew here
//! before it counts the fault as injected: a preload that did not take
//! (a missing library, a static binary, a clock read libfaketime does not
//! wrap) would otherwise pass as a skew that changed nothing.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime};

/// How far a measured offset may be from the one asked for: the `Date`
/// header has whole seconds and the answer takes a moment; the offsets the
/// tests use are hours.
pub const SKEW_TOLERANCE_SECS: i64 = 60;

/// The seconds of a libfaketime offset such as `+2h`, `-3h`, `+90m`, `+30s`
/// or `+1d`; `None` for anything else (an absolute date, say).
pub fn faketime_offset_secs(offset: &str) -> Option<i64> {
    let (sign, rest) = match offset.as_bytes().first()? {
        b'+' => (1, &offset[1..]),
        b'-' => (-1, &offset[1..]),
        _ => return None,
    };
    let unit_at = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let n: i64 = rest[..unit_at].parse().ok()?;
    let unit = match &rest[unit_at..] {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    Some(sign * n * unit)
}

/// The wall clock of the HTTP server at `addr` (`host:port`, or a base URL
/// `http://host:port`) minus this process's, in seconds: the `Date` header
/// of its answer to `GET /` (any status carries one).
pub fn clock_offset_secs(addr: &str) -> io::Result<i64> {
    let addr = addr
        .strip_prefix("http://")
        .unwrap_or(addr)
        .trim_end_matches('/');
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    stream.set_write_timeout(Some(Duration::from_secs(20)))?;
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let ours = SystemTime::now();
    let head = String::from_utf8_lossy(&head);
    let date = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("date").then(|| value.trim())
        })
        .ok_or_else(|| io::Error::other(format!("no Date header from {addr}: {head}")))?;
    let theirs = httpdate::parse_http_date(date)
        .map_err(|e| io::Error::other(format!("Date {date:?} from {addr}: {e}")))?;
    let secs = |t: SystemTime| match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    };
    Ok(secs(theirs) - secs(ours))
}

/// Checks that the server at `addr` runs with its clock off by `offset`
/// (libfaketime's syntax, e.g. `+2h`): `Ok` with the measured offset in
/// seconds, or `Err` saying what was measured instead.
pub fn check_clock_skew(addr: &str, offset: &str) -> Result<i64, String> {
    let want = faketime_offset_secs(offset)
        .ok_or_else(|| format!("{offset:?} is not a relative libfaketime offset"))?;
    let got = clock_offset_secs(addr).map_err(|e| format!("clock of {addr}: {e}"))?;
    if (got - want).abs() > SKEW_TOLERANCE_SECS {
        return Err(format!(
            "the clock of {addr} is {got:+} s from ours, not the {want:+} s ({offset}) it was \
             started with: the skew did not take effect"
        ));
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::faketime_offset_secs;

    #[test]
    fn offsets_in_libfaketime_syntax() {
        assert_eq!(faketime_offset_secs("+2h"), Some(7_200));
        assert_eq!(faketime_offset_secs("-3h"), Some(-10_800));
        assert_eq!(faketime_offset_secs("+90m"), Some(5_400));
        assert_eq!(faketime_offset_secs("-30"), Some(-30));
        assert_eq!(faketime_offset_secs("+1d"), Some(86_400));
        assert_eq!(faketime_offset_secs("@2026-01-01 00:00:00"), None);
        assert_eq!(faketime_offset_secs("+2x"), None);
    }
}
