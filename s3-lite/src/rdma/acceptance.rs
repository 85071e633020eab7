//! The client's acceptance rules for an answer to a request that carried an RDMA token
//! (`rc-persistent`, cuObject, docs/protocol.md, Acceptance and fallback), pure.
//!
//! - GET / RangeGet: success only with `x-amz-rdma-reply` ∈ {200, 206}, an empty body, and
//!   `x-amz-rdma-bytes-transferred` (or `x-amz-rdma-bytes`) equal to the bytes asked for
//!   (RangeGet) or at most the destination (Get). A plain answer with the object in the body
//!   (reply `501`, or no reply header) is judged as an HTTP answer when its `Content-Range`
//!   proves it; a whole-object `200` body (no range asked, so nothing proves its length) is
//!   dropped and the GET resent over HTTP with `bytes=0-`.
//! - PUT: success only with reply ∈ {200, 204}, or a `200` whose `x-amz-checksum-crc64nvme`
//!   equals ours — never a bare `200`: a server that ignored the token stored 0 bytes, so the
//!   PUT is resent with its body (which also overwrites that empty object).
//! - Reply `501` or a reply-less answer: this request goes over HTTP (resent at once when no
//!   usable data came).
//!
//! [`judge`] names what to do ([`Acceptance`]) and what the answer says about the server's
//! dialect ([`Verdict`]); the caller maps the first onto its own transport's plan.

use crate::http::{BodyFraming, ResponseHead};
use crate::rdma::{RDMA_REPLY, Reply, ReplyClass};

/// The transfer a request asked for (the caller's operation kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// The whole object into a destination of the given length.
    Get,
    /// `len` bytes at `offset` (the destination's length).
    RangeGet {
        /// First object byte.
        offset: u64,
    },
    /// The source as the whole object.
    Put,
    /// The object's metadata only.
    Head,
}

/// What the answer means for the dialect (the caller learns from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
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

/// What to do with the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceptance {
    /// Done: `bytes` moved by RDMA; `object_size` when the answer named it (`N/total`).
    Moved {
        /// Bytes moved (the destination's or source's length for a PUT).
        bytes: u64,
        /// The object's size, when named.
        object_size: Option<u64>,
    },
    /// Judge it as a plain HTTP answer to the same request (the object is in the body, or
    /// the status stands on its own).
    AsHttp,
    /// Resend the request at once over HTTP (not counted as an attempt).
    Resend,
    /// The non-2xx status stands (the S3 error).
    Status(u16),
    /// Malformed or impossible answer: a protocol failure, never trust the data.
    Protocol,
    /// Short (or impossible) transfer, or a checksum mismatch: an integrity failure.
    Integrity,
    /// The object ends inside the asked range: the same failure as over HTTP.
    PastEnd,
}

/// The body length a head announces (`None` when not known up front).
#[must_use]
pub fn body_len(head: &ResponseHead) -> Option<u64> {
    match head.framing {
        BodyFraming::Length(n) => Some(n),
        BodyFraming::None => Some(0),
        _ => None,
    }
}

/// Judges the head of an RDMA attempt of `kind` (destination/source of `buf_len` bytes;
/// `crc` = our base64 CRC64NVME for PUT).
#[must_use]
pub fn judge(
    kind: Transfer,
    buf_len: u64,
    head: &ResponseHead,
    crc: Option<&str>,
) -> (Acceptance, Verdict) {
    let reply = head.header(RDMA_REPLY).map(Reply::parse);
    let class = match reply {
        None => None,
        Some(Ok(r)) => Some(r.classify()),
        // A malformed reply is not success; never trust the data.
        Some(Err(_)) => return (Acceptance::Protocol, Verdict::Failed),
    };
    let ok2xx = (200..300).contains(&head.status);
    match kind {
        Transfer::Get | Transfer::RangeGet { .. } => match class {
            Some(ReplyClass::Success(code)) if code == 200 || code == 206 => {
                (get_success(kind, buf_len, head), Verdict::Rdma)
            }
            Some(ReplyClass::Declined) if ok2xx => (fallback_get(kind, head), Verdict::Declined),
            Some(ReplyClass::Declined) => (Acceptance::Resend, Verdict::Declined),
            None if ok2xx => (fallback_get(kind, head), Verdict::Plain),
            // A plain server's error (404, 403...) stands on its own.
            // A 400 to a whole-object GET (our gateway: the object is larger than the token's
            // window): this one request goes over HTTP, which names the failure.
            _ if kind == Transfer::Get && head.status == 400 => {
                (Acceptance::Resend, Verdict::Refused)
            }
            None => (Acceptance::AsHttp, Verdict::Plain),
            Some(_) if !ok2xx => (Acceptance::Status(head.status), Verdict::Failed),
            Some(_) => (Acceptance::Protocol, Verdict::Failed),
        },
        Transfer::Put => {
            let echoed = head
                .header(crate::checksum::HEADER_CRC64NVME)
                .map(str::trim);
            let proven_by_crc = head.status == 200 && crc.is_some() && echoed == crc;
            let moved = Acceptance::Moved {
                bytes: buf_len,
                object_size: None,
            };
            match class {
                Some(ReplyClass::Success(200 | 204)) if ok2xx => (moved, Verdict::Rdma),
                Some(ReplyClass::Declined) => (Acceptance::Resend, Verdict::Declined),
                Some(_) if !ok2xx => (Acceptance::Status(head.status), Verdict::Failed),
                Some(_) => (Acceptance::Protocol, Verdict::Failed),
                // Reply-less but the stored checksum is ours: the bytes did arrive.
                None if proven_by_crc => (moved, Verdict::Rdma),
                // Reply-less: the server ignored the token (a 200 stored an empty object, a 400
                // BadDigest stored nothing). Resend with the body either way.
                None if ok2xx || head.status == 400 => (Acceptance::Resend, Verdict::Plain),
                None => (Acceptance::Status(head.status), Verdict::Plain),
            }
        }
        Transfer::Head => (Acceptance::AsHttp, Verdict::Plain),
    }
}

/// A declined (or plain) 2xx answer to a GET that carried a token, with the object in its
/// body. A whole-object GET sent with a token asks for no `Range`, so a `200` body's length
/// is named by `Content-Length` alone, which a faulty hop can lower (or a body it cut short
/// can match): nothing proves it. Such a body is dropped (the connection with it) and the GET
/// resent over HTTP, where `bytes=0-` makes the answer commit to the object's size. Ranged
/// answers are judged as HTTP answers are (their `Content-Range` must match).
fn fallback_get(kind: Transfer, head: &ResponseHead) -> Acceptance {
    if kind == Transfer::Get && head.status == 200 {
        return Acceptance::Resend;
    }
    Acceptance::AsHttp
}

fn get_success(kind: Transfer, buf_len: u64, head: &ResponseHead) -> Acceptance {
    if body_len(head) != Some(0) {
        return Acceptance::Protocol;
    }
    let pairs = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let (moved, total) = match crate::rdma::bytes::from_headers(pairs) {
        Ok(Some(b)) => (b.count, b.total),
        _ => return Acceptance::Protocol,
    };
    // The object's size, from `N/total` or else the answer's `Content-Range`.
    let size = total.or_else(|| {
        match head
            .header("content-range")
            .and_then(|v| crate::s3::ContentRange::parse(v).ok())
        {
            Some(crate::s3::ContentRange::Bytes { total, .. }) => total,
            _ => None,
        }
    });
    if let Transfer::RangeGet { offset } = kind
        && moved < buf_len
        && size.is_some_and(|t| offset.checked_add(moved) == Some(t))
    {
        // The object ends inside the asked range: the same failure as HTTP's.
        return Acceptance::PastEnd;
    }
    let ok = match kind {
        Transfer::RangeGet { .. } => moved == buf_len,
        // A whole-object GET whose `N/total` says part of the object is missing is short.
        _ => moved <= buf_len && total.is_none_or(|t| t == moved),
    };
    if !ok {
        // Short (or impossible) transfers are errors, never success.
        return Acceptance::Integrity;
    }
    // The object size the answer named (`N/total`), reported with the completion.
    Acceptance::Moved {
        bytes: moved,
        object_size: total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::rdma::test_head as head;

    const RG: Transfer = Transfer::RangeGet { offset: 10 };

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
                Acceptance::Moved {
                    bytes: 50,
                    object_size: None
                },
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
            judge(Transfer::Get, 64, &part, None).0,
            Acceptance::Integrity
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
            judge(Transfer::Get, 64, &full, None).0,
            Acceptance::Moved {
                bytes: 50,
                object_size: Some(50)
            }
        );
        let short = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "49"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(judge(RG, 50, &short, None).0, Acceptance::Integrity);
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
        assert_eq!(judge(RG, 50, &past_end, None).0, Acceptance::PastEnd);
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
        assert_eq!(judge(RG, 50, &lying, None).0, Acceptance::Integrity);
        let no_count = head(206, &[("x-amz-rdma-reply", "206"), ("Content-Length", "0")]);
        assert_eq!(judge(RG, 50, &no_count, None).0, Acceptance::Protocol);
        let body = head(
            206,
            &[
                ("x-amz-rdma-reply", "206"),
                ("x-amz-rdma-bytes-transferred", "50"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(judge(RG, 50, &body, None).0, Acceptance::Protocol);
        let garbage = head(200, &[("x-amz-rdma-reply", "2OO"), ("Content-Length", "0")]);
        assert_eq!(judge(Transfer::Get, 50, &garbage, None).1, Verdict::Failed);
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
            (Acceptance::AsHttp, Verdict::Declined)
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
        assert_eq!(
            judge(RG, 50, &minio, None),
            (Acceptance::Resend, Verdict::Declined)
        );
    }

    /// A whole-object fallback body names its length by `Content-Length` only (the tokened
    /// GET asked for no range): it is never used, the GET is resent over HTTP (`bytes=0-`).
    #[test]
    fn an_unproven_whole_object_fallback_body_is_resent() {
        for reply in [Some("501"), None] {
            let mut h = vec![("Content-Length", "599900")];
            h.extend(reply.map(|r| ("x-amz-rdma-reply", r)));
            let (plan, _) = judge(Transfer::Get, 1 << 20, &head(200, &h), None);
            assert_eq!(plan, Acceptance::Resend, "reply {reply:?}");
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
            judge(Transfer::Get, 1 << 20, &whole, None).0,
            Acceptance::AsHttp
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
            judge(Transfer::Put, 9, &bare, Some(crc)),
            (Acceptance::Resend, Verdict::Plain)
        );
        let empty_crc = head(
            200,
            &[
                ("x-amz-checksum-crc64nvme", "AAAAAAAAAAA="),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(Transfer::Put, 9, &empty_crc, Some(crc)),
            (Acceptance::Resend, Verdict::Plain)
        );
        let bad_digest = head(400, &[("Content-Length", "0")]);
        assert_eq!(
            judge(Transfer::Put, 9, &bad_digest, Some(crc)),
            (Acceptance::Resend, Verdict::Plain)
        );
        let proven = head(
            200,
            &[("x-amz-checksum-crc64nvme", crc), ("Content-Length", "0")],
        );
        assert_eq!(
            judge(Transfer::Put, 9, &proven, Some(crc)),
            (
                Acceptance::Moved {
                    bytes: 9,
                    object_size: None
                },
                Verdict::Rdma
            )
        );
        let replied = head(200, &[("x-amz-rdma-reply", "200"), ("Content-Length", "0")]);
        assert_eq!(
            judge(Transfer::Put, 9, &replied, Some(crc)).1,
            Verdict::Rdma
        );
        let declined = head(501, &[("x-amz-rdma-reply", "501"), ("Content-Length", "0")]);
        assert_eq!(
            judge(Transfer::Put, 9, &declined, Some(crc)),
            (Acceptance::Resend, Verdict::Declined)
        );
        let failed = head(500, &[("Content-Length", "0"), ("x-amz-rdma-reply", "500")]);
        assert_eq!(
            judge(Transfer::Put, 9, &failed, Some(crc)).1,
            Verdict::Failed
        );
    }
}
