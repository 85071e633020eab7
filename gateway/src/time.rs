//! Wall-clock helpers: the gateway is the I/O driver, so it owns the clock (s3-lite reads none).
//! Date formatting lives in `s3_lite::sigv4` with the rest of the calendar code.

use std::time::{SystemTime, UNIX_EPOCH};

pub use s3_lite::sigv4::{http_date, iso8601};

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Parses an HTTP date in the IMF-fixdate form (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110
/// §5.6.7) into Unix seconds; `None` for anything else (an invalid date is ignored, as RFC 9110
/// asks of conditional headers).
pub fn parse_http_date(value: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (_, rest) = value.trim().split_once(", ")?;
    let mut it = rest.split(' ');
    let (day, month, year, clock, zone) =
        (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
    if it.next().is_some() || zone != "GMT" || day.len() != 2 || year.len() != 4 || clock.len() != 8
    {
        return None;
    }
    let month = MONTHS.iter().position(|m| *m == month)? + 1;
    let hms: String = clock.split(':').collect();
    let text = format!("{year}{month:02}{day}T{hms}Z");
    s3_lite::sigv4::AmzDate::parse(&text)
        .ok()
        .map(|d| d.unix_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_round_trip_and_junk_is_none() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_http_date(&http_date(1_700_000_000)),
            Some(1_700_000_000)
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
        assert_eq!(parse_http_date("Sun, 31 Feb 1994 08:49:37 GMT"), None);
        assert_eq!(parse_http_date(""), None);
    }
}
