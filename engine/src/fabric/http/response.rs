//! Pure checks of a response head against what the operation asked for.
//!
//! The rule: a success completion reports exactly the bytes asked for, or the whole object
//! for Get. A 206 whose `Content-Range` or `Content-Length` disagrees with the request, a body
//! longer than the destination, or a 200 answering a range that does not start at 0 completes
//! with a typed error instead of silently short or misplaced data.

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::http::{BodyFraming, ResponseHead};
use s3_lite::s3::ContentRange;

use crate::fabric::{Outcome, Retry};
use crate::inflight::OpKind;

/// What to do with the body that follows a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Copy the body into the destination from offset 0; `expected` bytes must arrive
    /// (`None`: unknown length, at most `cap`).
    Payload {
        /// Exact body length, when framed by Content-Length.
        expected: Option<u64>,
        /// Destination capacity.
        cap: u64,
    },
    /// Discard any body; succeed with this outcome at the end.
    Finish(Outcome),
    /// An error status: collect (a bounded prefix of) the body, then fail with this outcome.
    Error(Outcome),
}

const fn fail(code: ErrorCode, class: ErrorClass) -> Plan {
    Plan::Finish(Outcome::fail(code, class, Retry::No))
}

/// The outcome of an error status (4xx/5xx, or any non-2xx we cannot use).
pub(crate) fn status_outcome(status: u16) -> Outcome {
    let (code, class, retry) = match status {
        401 | 403 => (ErrorCode::AccessDenied, ErrorClass::Client, Retry::No),
        404 => (ErrorCode::NotFound, ErrorClass::Client, Retry::No),
        416 => (
            ErrorCode::RangeNotSatisfiable,
            ErrorClass::Client,
            Retry::No,
        ),
        429 | 503 => (ErrorCode::SlowDown, ErrorClass::Server, Retry::Yes),
        500..=599 => (ErrorCode::Remote, ErrorClass::Server, Retry::Yes),
        400..=499 => (ErrorCode::InvalidArgument, ErrorClass::Client, Retry::No),
        _ => (ErrorCode::Protocol, ErrorClass::Integrity, Retry::No),
    };
    Outcome::fail(code, class, retry)
}

fn body_len(head: &ResponseHead) -> Option<u64> {
    match head.framing {
        BodyFraming::Length(n) => Some(n),
        BodyFraming::None => Some(0),
        _ => None,
    }
}

/// Decides how to treat the response to `kind` whose registered range is `buf_len` bytes.
pub(crate) fn plan(kind: OpKind, buf_len: u64, head: &ResponseHead) -> Plan {
    if !(200..300).contains(&head.status) {
        return Plan::Error(status_outcome(head.status));
    }
    let len = body_len(head);
    match kind {
        OpKind::Head => match head.content_length() {
            Some(size) => Plan::Finish(Outcome::Done {
                bytes: 0,
                aux: size,
            }),
            None => fail(ErrorCode::Protocol, ErrorClass::Integrity),
        },
        OpKind::Put => Plan::Finish(Outcome::Done {
            bytes: buf_len,
            aux: 0,
        }),
        OpKind::Get => match len {
            Some(n) if n > buf_len => fail(ErrorCode::TooLarge, ErrorClass::Local),
            expected => Plan::Payload {
                expected,
                cap: buf_len,
            },
        },
        OpKind::RangeGet { offset } => range_plan(offset, buf_len, head, len),
    }
}

fn range_plan(offset: u64, want: u64, head: &ResponseHead, len: Option<u64>) -> Plan {
    let Some(last) = offset.checked_add(want).and_then(|e| e.checked_sub(1)) else {
        return fail(ErrorCode::InvalidArgument, ErrorClass::Invalid);
    };
    match head.status {
        206 => {
            let Some(cr) = head
                .header("content-range")
                .and_then(|v| ContentRange::parse(v).ok())
            else {
                return fail(ErrorCode::Protocol, ErrorClass::Integrity);
            };
            match cr {
                ContentRange::Bytes { first, last: l, .. }
                    if first == offset && l == last && len == Some(want) =>
                {
                    Plan::Payload {
                        expected: Some(want),
                        cap: want,
                    }
                }
                // The object ends inside the requested range: the server (correctly) sent less.
                ContentRange::Bytes {
                    first,
                    last: l,
                    total: Some(t),
                } if first == offset && l < last && l + 1 == t => {
                    fail(ErrorCode::RangeNotSatisfiable, ErrorClass::Integrity)
                }
                _ => fail(ErrorCode::Integrity, ErrorClass::Integrity),
            }
        }
        // A server that ignores Range sends the whole object: usable only if that is exactly
        // the range asked for.
        200 if offset == 0 && len == Some(want) => Plan::Payload {
            expected: Some(want),
            cap: want,
        },
        200 if offset == 0 && len.is_some_and(|n| n < want) => {
            fail(ErrorCode::RangeNotSatisfiable, ErrorClass::Integrity)
        }
        _ => fail(ErrorCode::Integrity, ErrorClass::Integrity),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fabric::test_head as head;

    const RG: OpKind = OpKind::RangeGet { offset: 100 };

    #[test]
    fn exact_range_is_accepted() {
        let h = head(
            206,
            &[
                ("Content-Range", "bytes 100-149/1000"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(
            plan(RG, 50, &h),
            Plan::Payload {
                expected: Some(50),
                cap: 50
            }
        );
    }

    #[test]
    fn wrong_or_short_ranges_are_typed_errors() {
        let shifted = head(
            206,
            &[
                ("Content-Range", "bytes 101-150/1000"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(
            plan(RG, 50, &shifted),
            fail(ErrorCode::Integrity, ErrorClass::Integrity)
        );
        let lying_length = head(
            206,
            &[
                ("Content-Range", "bytes 100-149/1000"),
                ("Content-Length", "49"),
            ],
        );
        assert_eq!(
            plan(RG, 50, &lying_length),
            fail(ErrorCode::Integrity, ErrorClass::Integrity)
        );
        let past_eof = head(
            206,
            &[
                ("Content-Range", "bytes 100-119/120"),
                ("Content-Length", "20"),
            ],
        );
        assert_eq!(
            plan(RG, 50, &past_eof),
            fail(ErrorCode::RangeNotSatisfiable, ErrorClass::Integrity)
        );
        let no_range = head(206, &[("Content-Length", "50")]);
        assert_eq!(
            plan(RG, 50, &no_range),
            fail(ErrorCode::Protocol, ErrorClass::Integrity)
        );
        let whole = head(200, &[("Content-Length", "1000")]);
        assert_eq!(
            plan(RG, 50, &whole),
            fail(ErrorCode::Integrity, ErrorClass::Integrity)
        );
        let whole_from_zero = head(200, &[("Content-Length", "50")]);
        assert_eq!(
            plan(OpKind::RangeGet { offset: 0 }, 50, &whole_from_zero),
            Plan::Payload {
                expected: Some(50),
                cap: 50
            }
        );
    }

    #[test]
    fn statuses_map_to_codes_and_retryability() {
        let p = |s| plan(OpKind::Get, 10, &head(s, &[("Content-Length", "0")]));
        assert_eq!(
            p(404),
            Plan::Error(Outcome::fail(
                ErrorCode::NotFound,
                ErrorClass::Client,
                Retry::No
            ))
        );
        assert_eq!(
            p(403),
            Plan::Error(Outcome::fail(
                ErrorCode::AccessDenied,
                ErrorClass::Client,
                Retry::No
            ))
        );
        assert_eq!(
            p(503),
            Plan::Error(Outcome::fail(
                ErrorCode::SlowDown,
                ErrorClass::Server,
                Retry::Yes
            ))
        );
        assert_eq!(
            p(429),
            Plan::Error(Outcome::fail(
                ErrorCode::SlowDown,
                ErrorClass::Server,
                Retry::Yes
            ))
        );
        assert_eq!(
            p(500),
            Plan::Error(Outcome::fail(
                ErrorCode::Remote,
                ErrorClass::Server,
                Retry::Yes
            ))
        );
        assert_eq!(
            p(416),
            Plan::Error(Outcome::fail(
                ErrorCode::RangeNotSatisfiable,
                ErrorClass::Client,
                Retry::No
            ))
        );
    }

    #[test]
    fn get_head_put() {
        let big = head(200, &[("Content-Length", "11")]);
        assert_eq!(
            plan(OpKind::Get, 10, &big),
            fail(ErrorCode::TooLarge, ErrorClass::Local)
        );
        assert_eq!(
            plan(OpKind::Get, 11, &big),
            Plan::Payload {
                expected: Some(11),
                cap: 11
            }
        );
        assert_eq!(
            plan(OpKind::Head, 0, &big),
            Plan::Finish(Outcome::Done { bytes: 0, aux: 11 })
        );
        let ok = head(200, &[("Content-Length", "0")]);
        assert_eq!(
            plan(OpKind::Put, 7, &ok),
            Plan::Finish(Outcome::Done { bytes: 7, aux: 0 })
        );
    }
}
