//! Byte ranges: the `Range` request header and the `Content-Range` response header.

use thiserror::Error;

/// A byte range of an object, as a GetObject `Range` header names it (RFC 9110 §14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// Bytes `a..=b`.
    Inclusive(u64, u64),
    /// Bytes from `a` to the end.
    From(u64),
    /// The last `n` bytes.
    Suffix(u64),
}

/// A range or `Content-Range` that does not parse.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RangeError {
    /// Not `A-B`, `A-` or `-N` with decimal numbers.
    #[error("invalid range {0:?} (expected A-B, A- or -N)")]
    Syntax(String),
    /// `A-B` with `A > B`.
    #[error("range start {0} is after its end {1}")]
    Reversed(u64, u64),
    /// `-0` names no bytes.
    #[error("a suffix range must name at least one byte")]
    EmptySuffix,
    /// A `Content-Range` header that is malformed or inconsistent.
    #[error("invalid Content-Range header")]
    ContentRange,
}

fn parse_u64(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl ByteRange {
    /// The `Range` header value: `bytes=a-b`, `bytes=a-` or `bytes=-n`.
    pub fn to_header(&self) -> String {
        match self {
            Self::Inclusive(a, b) => format!("bytes={a}-{b}"),
            Self::From(a) => format!("bytes={a}-"),
            Self::Suffix(n) => format!("bytes=-{n}"),
        }
    }

    /// Parses the CLI form `A-B`, `A-` or `-N` (what `hipobj get --range` takes).
    pub fn parse_cli(s: &str) -> Result<Self, RangeError> {
        let syntax = || RangeError::Syntax(s.chars().take(64).collect());
        let (a, b) = s.split_once('-').ok_or_else(syntax)?;
        match (a.is_empty(), b.is_empty()) {
            (true, true) => Err(syntax()),
            (true, false) => match parse_u64(b).ok_or_else(syntax)? {
                0 => Err(RangeError::EmptySuffix),
                n => Ok(Self::Suffix(n)),
            },
            (false, true) => Ok(Self::From(parse_u64(a).ok_or_else(syntax)?)),
            (false, false) => {
                let (a, b) = (
                    parse_u64(a).ok_or_else(syntax)?,
                    parse_u64(b).ok_or_else(syntax)?,
                );
                if a > b {
                    Err(RangeError::Reversed(a, b))
                } else {
                    Ok(Self::Inclusive(a, b))
                }
            }
        }
    }

    /// The inclusive byte span this range selects in an object of `size` bytes, as a server
    /// would serve it (end clamped to the object); `None` when unsatisfiable (416).
    pub fn resolve(&self, size: u64) -> Option<(u64, u64)> {
        let last = size.checked_sub(1)?;
        match *self {
            Self::Inclusive(a, b) if a <= last => Some((a, b.min(last))),
            Self::From(a) if a <= last => Some((a, last)),
            Self::Suffix(n) if n > 0 => Some((size.saturating_sub(n), last)),
            _ => None,
        }
    }
}

/// A parsed `Content-Range` response header (RFC 9110 §14.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentRange {
    /// `bytes first-last/total` (`total` is `None` for `*`).
    Bytes {
        /// First byte served.
        first: u64,
        /// Last byte served (inclusive).
        last: u64,
        /// Complete object length, when known.
        total: Option<u64>,
    },
    /// `bytes */total`, sent with 416.
    Unsatisfied {
        /// Complete object length.
        total: u64,
    },
}

impl ContentRange {
    /// Parses `bytes a-b/total`, `bytes a-b/*` or `bytes */total`, checking `a <= b < total`.
    pub fn parse(value: &str) -> Result<Self, RangeError> {
        let bad = || RangeError::ContentRange;
        let rest = value
            .trim()
            .strip_prefix("bytes ")
            .ok_or_else(bad)?
            .trim_start();
        let (span, total) = rest.split_once('/').ok_or_else(bad)?;
        if span == "*" {
            return Ok(Self::Unsatisfied {
                total: parse_u64(total).ok_or_else(bad)?,
            });
        }
        let (a, b) = span.split_once('-').ok_or_else(bad)?;
        let (first, last) = (parse_u64(a).ok_or_else(bad)?, parse_u64(b).ok_or_else(bad)?);
        let total = if total == "*" {
            None
        } else {
            Some(parse_u64(total).ok_or_else(bad)?)
        };
        if first > last || total.is_some_and(|t| last >= t) {
            return Err(bad());
        }
        Ok(Self::Bytes { first, last, total })
    }

    /// Bytes in the served span (`0` for an unsatisfied range).
    pub fn len(&self) -> u64 {
        match *self {
            Self::Bytes { first, last, .. } => {
                last.checked_sub(first).map_or(0, |d| d.saturating_add(1))
            }
            Self::Unsatisfied { .. } => 0,
        }
    }

    /// Whether no bytes are served.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_cli() {
        assert_eq!(
            ByteRange::parse_cli("0-99").unwrap().to_header(),
            "bytes=0-99"
        );
        assert_eq!(
            ByteRange::parse_cli("100-").unwrap().to_header(),
            "bytes=100-"
        );
        assert_eq!(ByteRange::parse_cli("-5").unwrap().to_header(), "bytes=-5");
        assert_eq!(ByteRange::parse_cli("7-7"), Ok(ByteRange::Inclusive(7, 7)));
        assert_eq!(ByteRange::parse_cli("9-3"), Err(RangeError::Reversed(9, 3)));
        assert_eq!(ByteRange::parse_cli("-0"), Err(RangeError::EmptySuffix));
        for bad in [
            "",
            "-",
            "5",
            "a-b",
            "1-2-3",
            "+1-2",
            " 1-2",
            "99999999999999999999999-",
        ] {
            assert!(
                matches!(ByteRange::parse_cli(bad), Err(RangeError::Syntax(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn resolve_against_size() {
        assert_eq!(ByteRange::Inclusive(10, 1000).resolve(100), Some((10, 99)));
        assert_eq!(ByteRange::Inclusive(100, 1000).resolve(100), None);
        assert_eq!(ByteRange::From(99).resolve(100), Some((99, 99)));
        assert_eq!(ByteRange::Suffix(30).resolve(100), Some((70, 99)));
        assert_eq!(ByteRange::Suffix(300).resolve(100), Some((0, 99)));
        assert_eq!(ByteRange::Suffix(1).resolve(0), None);
    }

    #[test]
    fn content_range() {
        assert_eq!(
            ContentRange::parse("bytes 0-99/1000"),
            Ok(ContentRange::Bytes {
                first: 0,
                last: 99,
                total: Some(1000)
            })
        );
        assert_eq!(ContentRange::parse("bytes 5-5/*").unwrap().len(), 1);
        assert_eq!(
            ContentRange::parse("bytes */1000"),
            Ok(ContentRange::Unsatisfied { total: 1000 })
        );
        for bad in [
            "bytes 5-4/10",
            "bytes 0-10/10",
            "bytes 0-1",
            "items 0-1/2",
            "bytes -1-2/3",
            "bytes */*",
        ] {
            assert_eq!(
                ContentRange::parse(bad),
                Err(RangeError::ContentRange),
                "{bad}"
            );
        }
    }
}
