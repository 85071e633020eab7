//! `x-amz-rdma-bytes-transferred` and its alias `x-amz-rdma-bytes` (docs/rdma-headers.md, `rdma::bytes`).
//!
//! The aws-c-s3 spec, MinIO, Ceph, versitygw and elbencho send `x-amz-rdma-bytes-transferred`;
//! NooBaa and the aws-c-s3 cuObject plugin default send `x-amz-rdma-bytes`, and aws-c-s3 also
//! accepts the value form `N/total`. A client reads whichever is present; if a server sends both
//! (our gateway does) they must agree.

use thiserror::Error;

use super::field::{self, FieldError};
use super::{RDMA_BYTES, RDMA_BYTES_TRANSFERRED};

/// Digits of the largest `u64`.
const MAX_DIGITS: usize = 20;

/// Why a bytes header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BytesError {
    /// The count (before `/`) is malformed.
    #[error("RDMA byte count: {0}")]
    Count(FieldError),
    /// The total (after `/`) is malformed.
    #[error("RDMA byte total: {0}")]
    Total(FieldError),
    /// `N/total` with `N > total`.
    #[error("RDMA byte count {count} exceeds total {total}")]
    CountAboveTotal {
        /// Bytes transferred.
        count: u64,
        /// Claimed total.
        total: u64,
    },
    /// Both headers present with different counts or totals.
    #[error("x-amz-rdma-bytes-transferred ({transferred}) and x-amz-rdma-bytes ({bytes}) disagree")]
    Inconsistent {
        /// Value of `x-amz-rdma-bytes-transferred`.
        transferred: String,
        /// Value of `x-amz-rdma-bytes`.
        bytes: String,
    },
    /// The same header twice with different values.
    #[error("{0} repeated with different values")]
    Repeated(&'static str),
}

/// A parsed byte count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BytesTransferred {
    /// Bytes actually moved.
    pub count: u64,
    /// The `/total` part, when sent.
    pub total: Option<u64>,
}

impl BytesTransferred {
    /// A plain count (what our gateway sends).
    pub fn new(count: u64) -> Self {
        BytesTransferred { count, total: None }
    }

    /// Parses `N` or `N/total`: strict decimal, at most 20 digits each, fitting in `u64`.
    pub fn parse(value: &str) -> Result<Self, BytesError> {
        let (count, total) = match value.split_once('/') {
            Some((c, t)) => (c, Some(t)),
            None => (value, None),
        };
        let count = field::decimal_u64(count, MAX_DIGITS).map_err(BytesError::Count)?;
        let total = match total {
            None => None,
            Some(t) => {
                let total = field::decimal_u64(t, MAX_DIGITS).map_err(BytesError::Total)?;
                if count > total {
                    return Err(BytesError::CountAboveTotal { count, total });
                }
                Some(total)
            }
        };
        Ok(BytesTransferred { count, total })
    }

    /// The canonical value (`N` or `N/total`, no leading zeros).
    pub fn encode(&self) -> String {
        match self.total {
            Some(t) => format!("{}/{t}", self.count),
            None => self.count.to_string(),
        }
    }
}

/// Reads whichever of the two headers is present: `transferred` is the value of
/// `x-amz-rdma-bytes-transferred`, `bytes` that of `x-amz-rdma-bytes`. `Ok(None)` if neither is.
/// When both are present their counts must be equal and, where both carry a total, the totals too.
pub fn from_values(
    transferred: Option<&str>,
    bytes: Option<&str>,
) -> Result<Option<BytesTransferred>, BytesError> {
    let t = transferred.map(BytesTransferred::parse).transpose()?;
    let b = bytes.map(BytesTransferred::parse).transpose()?;
    match (t, b) {
        (Some(x), Some(y)) => {
            let totals_agree = match (x.total, y.total) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
            if x.count == y.count && totals_agree {
                Ok(Some(BytesTransferred {
                    count: x.count,
                    total: x.total.or(y.total),
                }))
            } else {
                Err(BytesError::Inconsistent {
                    transferred: transferred.unwrap_or_default().to_owned(),
                    bytes: bytes.unwrap_or_default().to_owned(),
                })
            }
        }
        (x, y) => Ok(x.or(y)),
    }
}

/// Like [`from_values`], looking the headers up (case-insensitively) in `(name, value)` pairs.
/// A header repeated with different values is an error; identical repeats are tolerated.
pub fn from_headers<'a, I>(headers: I) -> Result<Option<BytesTransferred>, BytesError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let mut transferred: Option<&str> = None;
    let mut bytes: Option<&str> = None;
    for (name, value) in headers {
        let (slot, canonical) = if name.eq_ignore_ascii_case(RDMA_BYTES_TRANSFERRED) {
            (&mut transferred, RDMA_BYTES_TRANSFERRED)
        } else if name.eq_ignore_ascii_case(RDMA_BYTES) {
            (&mut bytes, RDMA_BYTES)
        } else {
            continue;
        };
        match slot {
            Some(prev) if *prev != value => return Err(BytesError::Repeated(canonical)),
            _ => *slot = Some(value),
        }
    }
    from_values(transferred, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_forms() {
        assert_eq!(
            BytesTransferred::parse("4096"),
            Ok(BytesTransferred::new(4096))
        );
        assert_eq!(BytesTransferred::parse("0"), Ok(BytesTransferred::new(0)));
        assert_eq!(
            BytesTransferred::parse("1024/4096"),
            Ok(BytesTransferred {
                count: 1024,
                total: Some(4096)
            })
        );
        assert_eq!(
            BytesTransferred::parse("18446744073709551615").map(|b| b.count),
            Ok(u64::MAX)
        );
        assert_eq!(
            BytesTransferred {
                count: 5,
                total: Some(7)
            }
            .encode(),
            "5/7"
        );
        assert_eq!(
            BytesTransferred::parse("007").map(|b| b.encode()),
            Ok("7".to_owned())
        );
    }

    #[test]
    fn strict() {
        assert_eq!(
            BytesTransferred::parse(""),
            Err(BytesError::Count(FieldError::Empty))
        );
        assert_eq!(
            BytesTransferred::parse("-1"),
            Err(BytesError::Count(FieldError::NotDecimal { offset: 0 }))
        );
        assert_eq!(
            BytesTransferred::parse(" 1"),
            Err(BytesError::Count(FieldError::NotDecimal { offset: 0 }))
        );
        assert_eq!(
            BytesTransferred::parse("1/"),
            Err(BytesError::Total(FieldError::Empty))
        );
        assert_eq!(
            BytesTransferred::parse("1/2/3"),
            Err(BytesError::Total(FieldError::NotDecimal { offset: 1 }))
        );
        assert_eq!(
            BytesTransferred::parse("18446744073709551616"),
            Err(BytesError::Count(FieldError::Overflow))
        );
        assert_eq!(
            BytesTransferred::parse("5/4"),
            Err(BytesError::CountAboveTotal { count: 5, total: 4 })
        );
        assert!(matches!(
            BytesTransferred::parse(&"1".repeat(21)),
            Err(BytesError::Count(FieldError::TooLong { .. }))
        ));
    }

    #[test]
    fn either_header_and_consistency() {
        assert_eq!(from_values(None, None), Ok(None));
        assert_eq!(
            from_values(Some("10"), None),
            Ok(Some(BytesTransferred::new(10)))
        );
        assert_eq!(
            from_values(None, Some("10/20")),
            Ok(Some(BytesTransferred {
                count: 10,
                total: Some(20)
            }))
        );
        assert_eq!(
            from_values(Some("10"), Some("10/20")),
            Ok(Some(BytesTransferred {
                count: 10,
                total: Some(20)
            }))
        );
        assert!(matches!(
            from_values(Some("10"), Some("11")),
            Err(BytesError::Inconsistent { .. })
        ));
        assert!(matches!(
            from_values(Some("10/20"), Some("10/21")),
            Err(BytesError::Inconsistent { .. })
        ));
        assert!(matches!(
            from_values(Some("x"), Some("10")),
            Err(BytesError::Count(_))
        ));
    }

    #[test]
    fn header_lookup() {
        let h = [
            ("Content-Length", "0"),
            ("X-Amz-Rdma-Bytes-Transferred", "42"),
            ("x-amz-rdma-bytes", "42"),
        ];
        assert_eq!(from_headers(h), Ok(Some(BytesTransferred::new(42))));
        let only_legacy = [("X-AMZ-RDMA-BYTES", "7/9")];
        assert_eq!(
            from_headers(only_legacy),
            Ok(Some(BytesTransferred {
                count: 7,
                total: Some(9)
            }))
        );
        let repeated = [("x-amz-rdma-bytes", "1"), ("x-amz-rdma-bytes", "2")];
        assert_eq!(
            from_headers(repeated),
            Err(BytesError::Repeated(RDMA_BYTES))
        );
        let same_twice = [("x-amz-rdma-bytes", "1"), ("x-amz-rdma-bytes", "1")];
        assert_eq!(from_headers(same_twice), Ok(Some(BytesTransferred::new(1))));
        assert_eq!(from_headers([("etag", "\"x\"")]), Ok(None));
    }
}
