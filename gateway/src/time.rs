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
