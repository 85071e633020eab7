//! `AmzDate`: the SigV4 timestamp (`YYYYMMDDTHHMMSSZ`, UTC), built from unix seconds.
//!
//! s3-lite reads no clock: drivers pass `now` in. Conversion uses the proleptic Gregorian
//! days-from-civil arithmetic (no calendar crate), restricted to years 1970..=9999 because the
//! wire format has four year digits and unix time starts in 1970.

use std::fmt;

use super::error::SigningError;

const SECS_PER_DAY: u64 = 86_400;
/// 9999-12-31T23:59:59Z, the last instant `YYYYMMDDTHHMMSSZ` can express.
const MAX_UNIX_SECS: u64 = 253_402_300_799;

/// A UTC instant with one-second resolution, kept both as unix seconds (for skew and expiry
/// arithmetic) and in its 16-byte wire form (so signing never re-formats it).
///
/// INVARIANT: `text` is ASCII `YYYYMMDDTHHMMSSZ` and denotes exactly `unix`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AmzDate {
    unix: u64,
    text: [u8; 16],
}

impl AmzDate {
    /// The instant `unix_secs` seconds after 1970-01-01T00:00:00Z.
    pub fn from_unix_secs(unix_secs: u64) -> Result<Self, SigningError> {
        if unix_secs > MAX_UNIX_SECS {
            return Err(SigningError::InvalidDate("after 9999-12-31T23:59:59Z"));
        }
        let days = unix_secs / SECS_PER_DAY;
        let rem = unix_secs % SECS_PER_DAY;
        let (year, month, day) = civil_from_days(days);
        let (h, m, s) = (rem / 3600, rem / 60 % 60, rem % 60);
        let mut text = [0u8; 16];
        put_digits(&mut text[0..4], year);
        put_digits(&mut text[4..6], month);
        put_digits(&mut text[6..8], day);
        text[8] = b'T';
        put_digits(&mut text[9..11], h);
        put_digits(&mut text[11..13], m);
        put_digits(&mut text[13..15], s);
        text[15] = b'Z';
        Ok(Self {
            unix: unix_secs,
            text,
        })
    }

    /// Parses `YYYYMMDDTHHMMSSZ` strictly: digits where digits belong, a real calendar date,
    /// hours < 24, minutes and seconds < 60 (no leap seconds).
    pub fn parse(s: &str) -> Result<Self, SigningError> {
        let b = s.as_bytes();
        let Ok(text) = <[u8; 16]>::try_from(b) else {
            return Err(SigningError::InvalidDate(
                "expected 16 characters YYYYMMDDTHHMMSSZ",
            ));
        };
        if text[8] != b'T' || text[15] != b'Z' {
            return Err(SigningError::InvalidDate("expected YYYYMMDDTHHMMSSZ"));
        }
        let num = |r: std::ops::Range<usize>| -> Result<u64, SigningError> {
            let mut v = 0u64;
            for &c in text.get(r).unwrap_or(&[]) {
                if !c.is_ascii_digit() {
                    return Err(SigningError::InvalidDate("non-digit in date"));
                }
                v = v * 10 + u64::from(c - b'0');
            }
            Ok(v)
        };
        let (year, month, day) = (num(0..4)?, num(4..6)?, num(6..8)?);
        let (h, m, sec) = (num(9..11)?, num(11..13)?, num(13..15)?);
        if year < 1970 {
            return Err(SigningError::InvalidDate("year before 1970"));
        }
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return Err(SigningError::InvalidDate("no such calendar day"));
        }
        if h > 23 || m > 59 || sec > 59 {
            return Err(SigningError::InvalidDate("no such time of day"));
        }
        let unix = days_from_civil(year, month, day) * SECS_PER_DAY + h * 3600 + m * 60 + sec;
        Ok(Self { unix, text })
    }

    /// Seconds since the unix epoch.
    pub fn unix_secs(&self) -> u64 {
        self.unix
    }

    /// The wire form `YYYYMMDDTHHMMSSZ`.
    pub fn as_str(&self) -> &str {
        // The invariant says ASCII; fall back to an empty string rather than panic.
        std::str::from_utf8(&self.text).unwrap_or("")
    }

    /// The credential-scope date `YYYYMMDD`.
    pub fn date_stamp(&self) -> &str {
        self.as_str().get(..8).unwrap_or("")
    }
}

impl fmt::Display for AmzDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for AmzDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AmzDate({})", self.as_str())
    }
}

fn put_digits(out: &mut [u8], mut v: u64) {
    for slot in out.iter_mut().rev() {
        // `v % 10` < 10, so the cast cannot truncate.
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

fn is_leap(y: u64) -> bool {
    (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400)
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a civil date (year >= 1970). Eras of 400 years repeat exactly, so
/// the count is: whole eras, then whole years, then days of the year counted from March (which
/// puts the leap day last).
fn days_from_civil(y: u64, m: u64, d: u64) -> u64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12; // March = 0
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    // 719468 = days from 0000-03-01 to 1970-01-01.
    era * 146_097 + doe - 719_468
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian; inverse of
/// `days_from_civil`.
pub fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

/// RFC 9110 IMF-fixdate of a Unix time: `Sun, 06 Nov 1994 08:49:37 GMT` (`Date`,
/// `Last-Modified`).
pub fn http_date(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS.get((days % 7) as usize).copied().unwrap_or("Thu");
    let month = MONTHS
        .get((m as usize).saturating_sub(1))
        .copied()
        .unwrap_or("Jan");
    format!(
        "{weekday}, {d:02} {month} {y:04} {:02}:{:02}:{:02} GMT",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// ISO 8601 with milliseconds, as S3 listings write `LastModified`: `2024-02-29T23:59:59.000Z`.
pub fn iso8601(unix_secs: u64) -> String {
    let (y, m, d) = civil_from_days(unix_secs / 86_400);
    let rem = unix_secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_and_iso_dates() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(1_709_251_199), "2024-02-29T23:59:59.000Z");
    }

    #[test]
    fn known_instants() {
        let d = AmzDate::from_unix_secs(1_369_353_600).unwrap();
        assert_eq!(d.as_str(), "20130524T000000Z");
        assert_eq!(d.date_stamp(), "20130524");
        assert_eq!(
            AmzDate::from_unix_secs(0).unwrap().as_str(),
            "19700101T000000Z"
        );
        // 2000-02-29 (leap year divisible by 400) and 2100-03-01 (2100 not leap).
        assert_eq!(
            AmzDate::from_unix_secs(951_782_400).unwrap().as_str(),
            "20000229T000000Z"
        );
        assert_eq!(
            AmzDate::from_unix_secs(4_107_542_400).unwrap().as_str(),
            "21000301T000000Z"
        );
        assert_eq!(
            AmzDate::from_unix_secs(MAX_UNIX_SECS).unwrap().as_str(),
            "99991231T235959Z"
        );
        assert!(AmzDate::from_unix_secs(MAX_UNIX_SECS + 1).is_err());
    }

    #[test]
    fn parse_round_trips_every_day_of_a_leap_cycle() {
        let mut t = 946_684_800 + 12 * 3600 + 34 * 60 + 56; // 2000-01-01T12:34:56Z
        for _ in 0..(4 * 366) {
            let d = AmzDate::from_unix_secs(t).unwrap();
            assert_eq!(AmzDate::parse(d.as_str()).unwrap(), d);
            t += SECS_PER_DAY;
        }
    }

    #[test]
    fn parse_rejects_malformed() {
        for bad in [
            "",
            "20130524T000000",
            "20130524 000000Z",
            "2013052AT000000Z",
            "20130230T000000Z",
            "21000229T000000Z",
            "20131324T000000Z",
            "20130524T240000Z",
            "20130524T236000Z",
            "19691231T235959Z",
            "20130524T000000Z ",
            "２0130524T000000Z",
        ] {
            assert!(AmzDate::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            AmzDate::parse("20240229T235959Z").unwrap().unix_secs(),
            1_709_251_199
        );
    }
}
