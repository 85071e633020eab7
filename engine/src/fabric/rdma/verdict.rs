//! The client's acceptance rules for an `rc-persistent` answer (docs/protocol.md, Acceptance and fallback), pure.
//!
//! - GET / RangeGet: success only with `x-amz-rdma-reply` ∈ {200, 206}, an empty body, and
//!   `x-amz-rdma-bytes-transferred` (or `x-amz-rdma-bytes`) equal to the bytes asked for
//!   (RangeGet) or at most the destination (Get). A plain answer with the object in the body
//!   (reply `501`, or no reply header) is used as the HTTP fallback when its `Content-Range`
//!   proves it; a whole-object `200` body (no range asked, so nothing proves its length) is
//!   dropped and the GET resent over HTTP with `bytes=0-`.
//! - PUT: success only with reply ∈ {200, 204}, or a `200` whose `x-amz-checksum-crc64nvme`
//!   equals ours — never a bare `200`: a server that ignored the token stored 0 bytes, so the
//!   PUT is resent with its body (which also overwrites that empty object).
//! - Reply `501` or a reply-less answer: this request goes over HTTP (resent at once when no
//!   usable data came).

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::http::{BodyFraming, ResponseHead};
use s3_lite::rdma::{Reply, ReplyClass};

use crate::fabric::http::response::{Plan, plan as http_plan, status_outcome};
use crate::fabric::{Outcome, Retry};
use crate::inflight::OpKind;

/// What the answer means for the dialect (the fabric learns from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The bytes moved by RDMA.
    Rdma,
    /// Explicit `501`: the server declined this request.
    Declined,
    /// No reply header: the server does not speak RDMA (or ignored the token).
    Plain,
    /// An RDMA answer that failed (error status, bad counts); nothing to learn.
    Failed,
    /// The server refused this one transfer (a `400` to a whole-object GET: e.g. the object
    /// is larger than the token's window): resend it over HTTP, whose answer names the failure
    /// as it does on every path (`EFBIG` for a too-small buffer); nothing to learn.
    Refused,
}

const fn integrity(code: ErrorCode) -> Plan {
    Plan::Finish(Outcome::fail(code, ErrorClass::Integrity, Retry::No))
}

/// Resend at once over HTTP (not counted as an attempt).
const RESEND: Plan = Plan::Finish(Outcome::fail(
    ErrorCode::Unsupported,
    ErrorClass::Transport,
    Retry::Free,
));

fn body_len(head: &ResponseHead) -> Option<u64> {
    match head.framing {
        BodyFraming::Length(n) => Some(n),
        BodyFraming::None => Some(0),
        _ => None,
    }
}

/// Judges the head of an RDMA attempt of `kind` (destination/source of `buf_len` bytes;
/// `crc` = our base64 CRC64NVME for PUT).
pub(crate) fn judge(
    kind: OpKind,
    buf_len: u64,
    head: &ResponseHead,
    crc: Option<&str>,
) -> (Plan, Verdict) {
    let reply = head.header(s3_lite::rdma::RDMA_REPLY).map(Reply::parse);
    let class = match reply {
        None => None,
        Some(Ok(r)) => Some(r.classify()),
        // A malformed reply is not success; never trust the data.
        Some(Err(_)) => return (integrity(ErrorCode::Protocol), Verdict::Failed),
    };
    let ok2xx = (200..300).contains(&head.status);
    match kind {
        OpKind::Get | OpKind::RangeGet { .. } => match class {
            Some(ReplyClass::Success(code)) if code == 200 || code == 206 => {
                (get_success(kind, buf_len, head), Verdict::Rdma)
            }
            Some(ReplyClass::Declined) if ok2xx => {
                (fallback_get(kind, buf_len, head), Verdict::Declined)
            }
            Some(ReplyClass::Declined) => (RESEND, Verdict::Declined),
            None if ok2xx => (fallback_get(kind, buf_len, head), Verdict::Plain),
            // A plain server's error (404, 403...) stands on its own.
            // A 400 to a whole-object GET (our gateway: the object is larger than the token's
            // window): this one request goes over HTTP, which names the failure.
            _ if kind == OpKind::Get && head.status == 400 => (RESEND, Verdict::Refused),
            None => (http_plan(kind, buf_len, head), Verdict::Plain),
            Some(_) if !ok2xx => (Plan::Error(status_outcome(head.status)), Verdict::Failed),
            Some(_) => (integrity(ErrorCode::Protocol), Verdict::Failed),
        },
        OpKind::Put => {
            let echoed = head.header("x-amz-checksum-crc64nvme").map(str::trim);
            let proven_by_crc = head.status == 200 && crc.is_some() && echoed == crc;
            match class {
                Some(ReplyClass::Success(200 | 204)) if ok2xx => (
                    Plan::Finish(Outcome::Done {
                        bytes: buf_len,
                        aux: 0,
                    }),
                    Verdict::Rdma,
                ),
                Some(ReplyClass::Declined) => (RESEND, Verdict::Declined),
                Some(_) if !ok2xx => (Plan::Error(status_outcome(head.status)), Verdict::Failed),
                Some(_) => (integrity(ErrorCode::Protocol), Verdict::Failed),
                // Reply-less but the stored checksum is ours: the bytes did arrive.
                None if proven_by_crc => (
                    Plan::Finish(Outcome::Done {
                        bytes: buf_len,
                        aux: 0,
                    }),
                    Verdict::Rdma,
                ),
                // Reply-less: the server ignored the token (a 200 stored an empty object, a 400
                // BadDigest stored nothing). Resend with the body either way.
                None if ok2xx || head.status == 400 => (RESEND, Verdict::Plain),
                None => (Plan::Error(status_outcome(head.status)), Verdict::Plain),
            }
        }
        OpKind::Head => (http_plan(kind, buf_len, head), Verdict::Plain),
    }
}

/// A declined (or plain) 2xx answer to a GET that carried a token, with the object in its
/// body. A whole-object GET sent with a token asks for no `Range`, so a `200` body's length
/// is named by `Content-Length` alone, which a faulty hop can lower (or a body it cut short
/// can match): nothing proves it. Such a body is dropped (the connection with it) and the GET
/// resent over HTTP, where `bytes=0-` makes the answer commit to the object's size. Ranged
/// answers are judged as HTTP answers are (their `Content-Range` must match).
fn fallback_get(kind: OpKind, buf_len: u64, head: &ResponseHead) -> Plan {
    if kind == OpKind::Get && head.status == 200 {
        return RESEND;
    }
    http_plan(kind, buf_len, head)
}

fn get_success(kind: OpKind, buf_len: u64, head: &ResponseHead) -> Plan {
    if body_len(head) != Some(0) {
        return integrity(ErrorCode::Protocol);
    }
    let pairs = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let (moved, total) = match s3_lite::rdma::bytes::from_headers(pairs) {
        Ok(Some(b)) => (b.count, b.total),
        _ => return integrity(ErrorCode::Protocol),
    };
    // The object's size, from `N/total` or else the answer's `Content-Range`.
    let size = total.or_else(|| {
        match head
            .header("content-range")
            .and_then(|v| s3_lite::s3::ContentRange::parse(v).ok())
        {
            Some(s3_lite::s3::ContentRange::Bytes { total, .. }) => total,
            _ => None,
        }
    });
    if let OpKind::RangeGet { offset } = kind
        && moved < buf_len
        && size.is_some_and(|t| offset.checked_add(moved) == Some(t))
    {
        // The object ends inside the asked range: the same failure as HTTP's.
        return crate::fabric::http::response::past_end();
    }
    let ok = match kind {
        OpKind::RangeGet { .. } => moved == buf_len,
        // A whole-object GET whose `N/total` says part of the object is missing is short.
        _ => moved <= buf_len && total.is_none_or(|t| t == moved),
    };
    if !ok {
        // Short (or impossible) transfers are errors, never success.
        return integrity(ErrorCode::Integrity);
    }
    // The object size the answer named (`N/total`), reported with the completion.
    Plan::Finish(Outcome::got(moved, total.unwrap_or(0), false))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fabric::test_head as head;

    const RG: OpKind = OpKind::RangeGet { offset: 10 };

    #[test]
    fn get_success_needs_reply_empty_body_and_exact_count() {
        let ok = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(RG, 50, &ok, None),
            (
                Plan::Finish(Outcome::Done { bytes: 50, aux: 0 }),
                Verdict::Rdma
            )
        );
        // Ceph pairs HTTP 206 with reply 200; `x-amz-rdma-bytes` alone is accepted.
        let ceph = head(
            206,
            &[
                ("x-amz-rdma-reply", "200"),
                ("x-amz-rdma-bytes", "50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(judge(RG, 50, &ceph, None).1, Verdict::Rdma);
        // A whole-object GET: `N/total` must be complete (N == total), N ≤ destination.
        let part = head(
            200,
            &[
                ("x-amz-rdma-reply", "200"),
                ("x-amz-rdma-bytes-transferred", "40/50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(OpKind::Get, 64, &part, None).0,
            integrity(ErrorCode::Integrity)
        );
        let full = head(
            200,
            &[
                ("x-amz-rdma-reply", "200"),
                ("x-amz-rdma-bytes-transferred", "50/50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(OpKind::Get, 64, &full, None).0,
            Plan::Finish(Outcome::Done { bytes: 50, aux: 50 })
        );
        let short = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "49"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(RG, 50, &short, None).0,
            integrity(ErrorCode::Integrity)
        );
        // The object ends inside the range, as Content-Range says: the HTTP path's error.
        let past_end = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "40"),
                ("Content-Range", "bytes 10-49/50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(RG, 50, &past_end, None).0,
            crate::fabric::http::response::past_end()
        );
        // A count that disagrees with Content-Range stays an integrity failure.
        let lying = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "39"),
                ("Content-Range", "bytes 10-49/50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(RG, 50, &lying, None).0,
            integrity(ErrorCode::Integrity)
        );
        let no_count = head(206, &[("x-amz-rdma-reply", "206"), ("Content-Length", "0")]);
        assert_eq!(
            judge(RG, 50, &no_count, None).0,
            integrity(ErrorCode::Protocol)
        );
        let body = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "50"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(judge(RG, 50, &body, None).0, integrity(ErrorCode::Protocol));
        let garbage = head(200, &[("x-amz-rdma-reply", "2OO"), ("Content-Length", "0")]);
        assert_eq!(judge(OpKind::Get, 50, &garbage, None).1, Verdict::Failed);
    }

    #[test]
    fn get_fallbacks_use_the_body() {
        let declined = head(
            206,
            &[
                ("x-amz-rdma-reply", "501"),
                ("Content-Range", "bytes 10-59/100"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(
            judge(RG, 50, &declined, None),
            (
                Plan::Payload {
                    expected: Some(50),
                    cap: 50
                },
                Verdict::Declined
            )
        );
        let plain = head(
            206,
            &[
                ("Content-Range", "bytes 10-59/100"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(judge(RG, 50, &plain, None).1, Verdict::Plain);
        let minio = head(501, &[("x-amz-rdma-reply", "501"), ("Content-Length", "0")]);
        assert_eq!(judge(RG, 50, &minio, None), (RESEND, Verdict::Declined));
    }

    /// A whole-object fallback body names its length by `Content-Length` only (the tokened
    /// GET asked for no range): it is never used, the GET is resent over HTTP (`bytes=0-`).
    #[test]
    fn an_unproven_whole_object_fallback_body_is_resent() {
        for reply in [Some("501"), None] {
            let mut h = vec![("Content-Length", "599900")];
            h.extend(reply.map(|r| ("x-amz-rdma-reply", r)));
            let (plan, _) = judge(OpKind::Get, 1 << 20, &head(200, &h), None);
            assert_eq!(plan, RESEND, "reply {reply:?}");
        }
        // A 206 with the whole object's Content-Range proves it and is used.
        let whole = head(
            206,
            &[
                ("x-amz-rdma-reply", "501"),
                ("Content-Range", "bytes 0-99/100"),
                ("Content-Length", "100"),
            ],
        );
        assert_eq!(
            judge(OpKind::Get, 1 << 20, &whole, None).0,
            Plan::Payload {
                expected: Some(100),
                cap: 100
            }
        );
    }

    #[test]
    fn put_is_never_accepted_on_a_bare_200() {
        let crc = "rosUhgp5mIg=";
        let bare = head(
            200,
            &[
                ("ETag", "\"d41d8cd98f00b204e9800998ecf8427e\""),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(OpKind::Put, 9, &bare, Some(crc)),
            (RESEND, Verdict::Plain)
        );
        let empty_crc = head(
            200,
            &[
                ("x-amz-checksum-crc64nvme", "AAAAAAAAAAA="),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(OpKind::Put, 9, &empty_crc, Some(crc)),
            (RESEND, Verdict::Plain)
        );
        let bad_digest = head(400, &[("Content-Length", "0")]);
        assert_eq!(
            judge(OpKind::Put, 9, &bad_digest, Some(crc)),
            (RESEND, Verdict::Plain)
        );
        let proven = head(
            200,
            &[("x-amz-checksum-crc64nvme", crc), ("Content-Length", "0")],
        );
        assert_eq!(
            judge(OpKind::Put, 9, &proven, Some(crc)),
            (
                Plan::Finish(Outcome::Done { bytes: 9, aux: 0 }),
                Verdict::Rdma
            )
        );
        let replied = head(200, &[("x-amz-rdma-reply", "200"), ("Content-Length", "0")]);
        assert_eq!(judge(OpKind::Put, 9, &replied, Some(crc)).1, Verdict::Rdma);
        let declined = head(501, &[("x-amz-rdma-reply", "501"), ("Content-Length", "0")]);
        assert_eq!(
            judge(OpKind::Put, 9, &declined, Some(crc)),
            (RESEND, Verdict::Declined)
        );
        let failed = head(500, &[("Content-Length", "0"), ("x-amz-rdma-reply", "500")]);
        assert_eq!(judge(OpKind::Put, 9, &failed, Some(crc)).1, Verdict::Failed);
    }
}
