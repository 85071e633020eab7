//! Pure checks of a response head against what the operation asked for.
//!
//! The rule: a success completion reports exactly the bytes asked for, or the whole object
//! for Get. A 206 whose `Content-Range` or `Content-Length` disagrees with the request, a body
//! longer than the destination, or a 200 answering a range that does not start at 0 completes
//! with a typed error instead of silently short or misplaced data.

use ring_api::{ErrorClass, ErrorCode, ObjectName};
use s3_lite::http::{BodyFraming, ResponseHead};
use s3_lite::s3::{
    ContentRange, ResponseError, parse_complete_multipart_upload, parse_initiate_multipart_upload,
};

use crate::fabric::{AUX_VERIFIED, Outcome, Retry};
use crate::inflight::{InFlight, MultipartOp, OpKind};
use crate::multipart::{ExpectedObject, UploadTable};
use s3_lite::checksum::{HEADER_CRC64NVME, encode_crc64nvme};

/// Largest XML answer (CreateMultipart, CompleteMultipart) read into memory. Both are a few
/// hundred bytes; Complete may be padded with keep-alive whitespace before its document.
pub(crate) const MAX_XML_ANSWER: usize = 256 * 1024;

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
    /// A 2xx whose XML body is the answer (multipart Create / Complete): collect at most
    /// [`MAX_XML_ANSWER`] bytes, then judge them with [`finish_multipart`].
    Collect,
}

const fn fail(code: ErrorCode, class: ErrorClass) -> Plan {
    Plan::Finish(Outcome::fail(code, class, Retry::No))
}

/// A RangeGet whose range ends past the object's end: the caller asked for bytes that do not
/// exist, the same failure as a `416` (`ERANGE`, class `Client`) on every path.
pub(crate) const fn past_end() -> Plan {
    fail(ErrorCode::RangeNotSatisfiable, ErrorClass::Client)
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

/// S3 error codes saying the request's bytes did not reach the server as sent: a
/// `Content-Md5` or `x-amz-checksum-*` that does not match the body (`BadDigest`), one that is
/// not a valid digest (`InvalidDigest`), a SigV4 payload hash that does not match the body
/// (`XAmzContentSHA256Mismatch`). Nothing was stored; the completion says `Integrity`, not
/// `InvalidArgument`.
pub(crate) fn is_integrity_code(code: &str) -> bool {
    matches!(
        code,
        "BadDigest" | "InvalidDigest" | "XAmzContentSHA256Mismatch"
    )
}

/// The outcome of an error answer read whole ([`Plan::Error`]): `by_status` (from
/// [`status_outcome`]), unless its `<Error>` body names an integrity code
/// ([`is_integrity_code`]), which completes `Integrity`/Integrity, not retried, whatever the
/// status. An unparseable or empty body (a HEAD answer) keeps `by_status`.
pub(crate) fn error_outcome(by_status: Outcome, body: &[u8]) -> Outcome {
    match s3_lite::s3::parse_error_xml(body) {
        Ok(doc) if is_integrity_code(&doc.code) => {
            Outcome::fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No)
        }
        _ => by_status,
    }
}

fn body_len(head: &ResponseHead) -> Option<u64> {
    match head.framing {
        BodyFraming::Length(n) => Some(n),
        BodyFraming::None => Some(0),
        _ => None,
    }
}

/// Decides how to treat the response to `op`.
pub(crate) fn plan_for(op: &InFlight, head: &ResponseHead) -> Plan {
    let echo = put_echo(op, head);
    // A PUT or UploadPart answer that echoes a CRC64NVME other than the one we sent: the
    // server holds other bytes than ours.
    if echo == Some(false) {
        return fail(ErrorCode::Integrity, ErrorClass::Integrity);
    }
    let plan = match &op.multipart {
        Some(step) => multipart_plan(step, op.buf_len(), head),
        None => plan(op.kind, op.buf_len(), head),
    };
    // The echo of our CRC64NVME proves the bytes the server received.
    match plan {
        Plan::Finish(Outcome::Done { bytes, aux }) if echo == Some(true) => {
            Plan::Finish(Outcome::Done {
                bytes,
                aux: aux | AUX_VERIFIED,
            })
        }
        p => p,
    }
}

/// Whether a 2xx answer to a PUT or UploadPart echoes the CRC64NVME we sent (`None`: it
/// echoes none, or the op sent none).
pub(crate) fn put_echo(op: &InFlight, head: &ResponseHead) -> Option<bool> {
    if op.kind != OpKind::Put || !(200..300).contains(&head.status) {
        return None;
    }
    let echoed = head.header(HEADER_CRC64NVME)?;
    Some(echoed.trim() == op.source_crc64()?)
}

/// Judges the HEAD after a CompleteMultipart ([`MultipartOp::VerifyStored`]): the stored
/// size must be what we sent, and so must the stored full-object CRC64NVME when the server
/// names one (a composite value proves nothing and is not compared). A matching CRC64NVME
/// proves the object (`AUX_VERIFIED`); the size alone does not.
fn verify_stored_plan(expect: ExpectedObject, head: &ResponseHead) -> Plan {
    if head.content_length() != Some(expect.len) {
        return fail(ErrorCode::Integrity, ErrorClass::Integrity);
    }
    let composite = head
        .header("x-amz-checksum-type")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("COMPOSITE"));
    let stored = head
        .header(HEADER_CRC64NVME)
        .map(str::trim)
        .filter(|c| !composite && !c.contains('-'));
    match stored {
        Some(c) if c != encode_crc64nvme(expect.crc64nvme) => {
            fail(ErrorCode::Integrity, ErrorClass::Integrity)
        }
        Some(_) => Plan::Finish(Outcome::Done {
            bytes: 0,
            aux: AUX_VERIFIED,
        }),
        None => Plan::Finish(Outcome::Done { bytes: 0, aux: 0 }),
    }
}

/// Whether a CompleteMultipart answer must be followed by a HEAD: it succeeded, we know what
/// the object must be, and the answer named no full-object CRC64NVME (a named one was
/// compared by [`finish_multipart`]).
pub(crate) fn needs_stored_check(
    step: &MultipartOp,
    outcome: Outcome,
    body: &[u8],
) -> Option<ExpectedObject> {
    let MultipartOp::Complete {
        expect: Some(expect),
        ..
    } = step
    else {
        return None;
    };
    if !matches!(outcome, Outcome::Done { .. }) {
        return None;
    }
    let named = parse_complete_multipart_upload(200, &[], body)
        .ok()
        .and_then(|d| d.checksum_crc64nvme)
        .is_some_and(|c| !c.contains('-'));
    (!named).then_some(*expect)
}

/// The plan for the response to a multipart step.
fn multipart_plan(step: &MultipartOp, buf_len: u64, head: &ResponseHead) -> Plan {
    if !(200..300).contains(&head.status) {
        return Plan::Error(status_outcome(head.status));
    }
    match step {
        MultipartOp::Create | MultipartOp::Complete { .. } => Plan::Collect,
        MultipartOp::Part { .. } => Plan::Finish(Outcome::Done {
            bytes: buf_len,
            aux: 0,
        }),
        MultipartOp::Abort { .. } => Plan::Finish(Outcome::Done { bytes: 0, aux: 0 }),
        MultipartOp::VerifyStored { expect, .. } => verify_stored_plan(*expect, head),
    }
}

/// The outcome of an S3 `<Error>` inside a 200 CompleteMultipart answer.
fn complete_error(code: &str, retryable: bool) -> Outcome {
    match code {
        "NoSuchUpload" => Outcome::fail(ErrorCode::NotFound, ErrorClass::Client, Retry::No),
        "AccessDenied" => Outcome::fail(ErrorCode::AccessDenied, ErrorClass::Client, Retry::No),
        "SlowDown" => Outcome::fail(ErrorCode::SlowDown, ErrorClass::Server, Retry::Yes),
        c if is_integrity_code(c) => {
            Outcome::fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No)
        }
        _ if retryable => Outcome::fail(ErrorCode::Remote, ErrorClass::Server, Retry::Yes),
        // InvalidPart, InvalidPartOrder, EntityTooSmall, ...
        _ => Outcome::fail(ErrorCode::InvalidArgument, ErrorClass::Client, Retry::No),
    }
}

/// Applies the end of a multipart exchange to the upload table and returns the operation's
/// outcome. `outcome` is what the HTTP exchange produced, `etag` the response's `ETag`
/// header, `body` the collected answer of a [`Plan::Collect`].
///
/// - Create: the answer's upload id opens a handle, reported in `aux`.
/// - UploadPart: the part's ETag is recorded (a 2xx without one is a protocol error: the part
///   could never be completed).
/// - Complete: a 200 whose body is an `<Error>` fails (typed by its S3 code); success forgets
///   the handle.
/// - Abort: success forgets the handle, and so does a 404 (the server no longer knows it).
pub(crate) fn finish_multipart(
    table: &UploadTable,
    object: &std::sync::Arc<ObjectName>,
    step: &MultipartOp,
    outcome: Outcome,
    etag: Option<&str>,
    body: &[u8],
) -> Outcome {
    let protocol = Outcome::fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No);
    let Outcome::Done { bytes, aux } = outcome else {
        if let (MultipartOp::Abort { upload, .. }, Outcome::Failed { code, .. }) = (step, outcome)
            && code == ErrorCode::NotFound
        {
            table.remove(*upload);
        }
        return outcome;
    };
    match step {
        MultipartOp::Create => match parse_initiate_multipart_upload(body) {
            Ok(id) => match table.open(std::sync::Arc::clone(object), &id) {
                Ok(h) => Outcome::Done {
                    bytes: 0,
                    aux: u64::from(h.0),
                },
                Err(e) => Outcome::fail(e.code(), ErrorClass::Local, Retry::No),
            },
            Err(_) => protocol,
        },
        MultipartOp::Part { upload, part, .. } => {
            let Some(etag) = etag.map(str::trim).filter(|e| !e.is_empty()) else {
                return protocol;
            };
            match table.record_part(*upload, *part, etag) {
                // `aux` carries only the proof bit of an echoed CRC64NVME here.
                Ok(()) => Outcome::Done {
                    bytes,
                    aux: aux & AUX_VERIFIED,
                },
                Err(e) => Outcome::fail(e.code(), ErrorClass::Local, Retry::No),
            }
        }
        MultipartOp::Complete { upload, expect, .. } => {
            match parse_complete_multipart_upload(200, &[], body) {
                Ok(done) => {
                    table.remove(*upload);
                    // The server's full-object CRC64NVME must be that of the parts we sent;
                    // when it is, it proves the object.
                    match (expect, done.checksum_crc64nvme.as_deref().map(str::trim)) {
                        (Some(e), Some(c)) if !c.contains('-') => {
                            if c == encode_crc64nvme(e.crc64nvme) {
                                Outcome::Done {
                                    bytes: 0,
                                    aux: AUX_VERIFIED,
                                }
                            } else {
                                Outcome::fail(
                                    ErrorCode::Integrity,
                                    ErrorClass::Integrity,
                                    Retry::No,
                                )
                            }
                        }
                        _ => Outcome::Done { bytes: 0, aux: 0 },
                    }
                }
                Err(ResponseError::S3(e)) => complete_error(&e.code, e.is_retryable()),
                Err(_) => protocol,
            }
        }
        MultipartOp::Abort { upload, .. } => {
            table.remove(*upload);
            Outcome::Done { bytes: 0, aux: 0 }
        }
        MultipartOp::VerifyStored { .. } => outcome,
    }
}

/// Decides how to treat the response to `kind` whose registered range is `buf_len` bytes.
pub(crate) fn plan(kind: OpKind, buf_len: u64, head: &ResponseHead) -> Plan {
    // A whole-object GET asks for `bytes=0-` (so the answer commits to the object's size in
    // `Content-Range`): a 416 says the object has no byte 0, i.e. it is empty.
    if kind == OpKind::Get && head.status == 416 {
        return Plan::Finish(Outcome::got(0, 0, false));
    }
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
        OpKind::Get if head.status == 206 => whole_range_plan(buf_len, head, len),
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

/// The 206 answer to a whole-object GET (`Range: bytes=0-`): it must name every byte of the
/// object (`bytes 0-(t-1)/t`), and exactly `t` bytes must arrive, whatever `Content-Length`
/// says, so a shortened length cannot end in success.
fn whole_range_plan(buf_len: u64, head: &ResponseHead, len: Option<u64>) -> Plan {
    let range = head
        .header("content-range")
        .and_then(|v| ContentRange::parse(v).ok());
    match range {
        Some(ContentRange::Bytes {
            first: 0,
            last,
            total: Some(t),
        }) if last.checked_add(1) == Some(t) => {
            if t > buf_len {
                fail(ErrorCode::TooLarge, ErrorClass::Local)
            } else if len.is_some_and(|n| n != t) {
                fail(ErrorCode::Integrity, ErrorClass::Integrity)
            } else {
                Plan::Payload {
                    expected: Some(t),
                    cap: t,
                }
            }
        }
        Some(_) => fail(ErrorCode::Integrity, ErrorClass::Integrity),
        None => fail(ErrorCode::Protocol, ErrorClass::Integrity),
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
                } if first == offset && l < last && l + 1 == t => past_end(),
                _ => fail(ErrorCode::Integrity, ErrorClass::Integrity),
            }
        }
        // A server that ignores Range sends the whole object: usable only if that is exactly
        // the range asked for.
        200 if offset == 0 && len == Some(want) => Plan::Payload {
            expected: Some(want),
            cap: want,
        },
        200 if offset == 0 && len.is_some_and(|n| n < want) => past_end(),
        _ => fail(ErrorCode::Integrity, ErrorClass::Integrity),
    }
}

/// The object size an answer names: the `Content-Range` total, else a 200's body length.
pub(crate) fn named_size(head: &s3_lite::http::ResponseHead) -> u64 {
    match head
        .header("content-range")
        .map(s3_lite::s3::ContentRange::parse)
    {
        Some(Ok(s3_lite::s3::ContentRange::Bytes { total: Some(t), .. })) => t,
        Some(_) => 0,
        None if head.status == 200 => head.content_length().unwrap_or(0),
        None => 0,
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
            fail(ErrorCode::RangeNotSatisfiable, ErrorClass::Client)
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
        let ranged = |s| {
            plan(
                OpKind::RangeGet { offset: 0 },
                10,
                &head(s, &[("Content-Length", "0")]),
            )
        };
        assert_eq!(
            ranged(416),
            Plan::Error(Outcome::fail(
                ErrorCode::RangeNotSatisfiable,
                ErrorClass::Client,
                Retry::No
            ))
        );
    }

    #[test]
    fn integrity_error_codes_complete_integrity_not_invalid_argument() {
        let doc = |code: &str| {
            format!("<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>m</Message></Error>")
        };
        let integrity = Outcome::fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No);
        for code in ["BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch"] {
            assert_eq!(
                error_outcome(status_outcome(400), doc(code).as_bytes()),
                integrity,
                "{code}"
            );
        }
        // Other 400s stay InvalidArgument; a body that does not parse keeps the status' meaning.
        let invalid = Outcome::fail(ErrorCode::InvalidArgument, ErrorClass::Client, Retry::No);
        assert_eq!(
            error_outcome(status_outcome(400), doc("InvalidRequest").as_bytes()),
            invalid
        );
        assert_eq!(error_outcome(status_outcome(400), b""), invalid);
        assert_eq!(error_outcome(status_outcome(400), b"<Error>"), invalid);
        assert_eq!(
            error_outcome(status_outcome(503), doc("SlowDown").as_bytes()),
            status_outcome(503)
        );
        // Inside a 200 CompleteMultipart answer too.
        assert_eq!(complete_error("BadDigest", false), integrity);
    }

    fn name() -> std::sync::Arc<ObjectName> {
        std::sync::Arc::new(ObjectName {
            bucket: "b".into(),
            key: "k".into(),
        })
    }

    #[test]
    fn multipart_answers_update_the_table() {
        use ring_api::UploadHandle;
        let t = UploadTable::new();
        let o = name();
        let ok = Outcome::Done { bytes: 0, aux: 0 };
        let create = finish_multipart(
            &t,
            &o,
            &MultipartOp::Create,
            ok,
            None,
            b"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>\
              <UploadId>up-1</UploadId></InitiateMultipartUploadResult>",
        );
        assert_eq!(create, Outcome::Done { bytes: 0, aux: 1 });
        let h = UploadHandle(1);
        let id: std::sync::Arc<str> = t.upload_id(h, &o).unwrap();
        assert_eq!(&*id, "up-1");
        let part = MultipartOp::Part {
            upload: h,
            part: 1,
            upload_id: id.clone(),
        };
        let sent = Outcome::Done { bytes: 5, aux: 0 };
        assert_eq!(
            finish_multipart(&t, &o, &part, sent, None, b""),
            Outcome::fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No),
            "a part without an ETag cannot be completed"
        );
        assert_eq!(
            finish_multipart(&t, &o, &part, sent, Some("\"e1\""), b""),
            sent
        );
        let (_, parts) = t.completion(h, &o, 1).unwrap();
        let complete = MultipartOp::Complete {
            upload: h,
            upload_id: id.clone(),
            parts: parts.into(),
            expect: None,
        };
        // 200 and then an <Error> document: a failure, and the handle stays open.
        let in_band = b"\n\n<Error><Code>InvalidPart</Code><Message>m</Message></Error>";
        assert_eq!(
            finish_multipart(&t, &o, &complete, ok, None, in_band),
            Outcome::fail(ErrorCode::InvalidArgument, ErrorClass::Client, Retry::No)
        );
        let internal = b"<Error><Code>InternalError</Code><Message>m</Message></Error>";
        assert_eq!(
            finish_multipart(&t, &o, &complete, ok, None, internal),
            Outcome::fail(ErrorCode::Remote, ErrorClass::Server, Retry::Yes)
        );
        assert_eq!(
            finish_multipart(&t, &o, &complete, ok, None, b"<Bogus/>"),
            Outcome::fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No)
        );
        assert!(t.upload_id(h, &o).is_ok());
        let done = b"<CompleteMultipartUploadResult><ETag>\"x-1\"</ETag>\
                     </CompleteMultipartUploadResult>";
        assert_eq!(finish_multipart(&t, &o, &complete, ok, None, done), ok);
        assert!(
            t.upload_id(h, &o).is_err(),
            "completed handles are forgotten"
        );
        // Abort answered 404: the server forgot it, so do we.
        let h2 = t.open(o.clone(), "up-2").unwrap();
        let abort = MultipartOp::Abort {
            upload: h2,
            upload_id: "up-2".into(),
        };
        let gone = Outcome::fail(ErrorCode::NotFound, ErrorClass::Client, Retry::No);
        assert_eq!(finish_multipart(&t, &o, &abort, gone, None, b""), gone);
        assert_eq!(t.len(), 0);
        // A part recorded after its upload was aborted is a typed error.
        assert_eq!(
            finish_multipart(&t, &o, &part, sent, Some("\"e\""), b""),
            Outcome::fail(ErrorCode::BadHandle, ErrorClass::Local, Retry::No)
        );
    }

    #[test]
    fn multipart_heads_plan_by_step() {
        let ok = head(200, &[("Content-Length", "120")]);
        assert_eq!(multipart_plan(&MultipartOp::Create, 0, &ok), Plan::Collect);
        let abort = MultipartOp::Abort {
            upload: ring_api::UploadHandle(1),
            upload_id: "u".into(),
        };
        assert_eq!(
            multipart_plan(&abort, 0, &head(204, &[])),
            Plan::Finish(Outcome::Done { bytes: 0, aux: 0 })
        );
        assert_eq!(
            multipart_plan(&abort, 0, &head(404, &[("Content-Length", "0")])),
            Plan::Error(Outcome::fail(
                ErrorCode::NotFound,
                ErrorClass::Client,
                Retry::No
            ))
        );
    }

    #[test]
    fn whole_get_answered_206_must_name_the_whole_object() {
        let ok = head(
            206,
            &[
                ("Content-Range", "bytes 0-99/100"),
                ("Content-Length", "100"),
            ],
        );
        assert_eq!(
            plan(OpKind::Get, 128, &ok),
            Plan::Payload {
                expected: Some(100),
                cap: 100
            }
        );
        // A relay lowered Content-Length: the range still names 100 bytes.
        let short = head(
            206,
            &[
                ("Content-Range", "bytes 0-99/100"),
                ("Content-Length", "90"),
            ],
        );
        assert_eq!(
            plan(OpKind::Get, 128, &short),
            fail(ErrorCode::Integrity, ErrorClass::Integrity)
        );
        let part = head(
            206,
            &[
                ("Content-Range", "bytes 0-49/100"),
                ("Content-Length", "50"),
            ],
        );
        assert_eq!(
            plan(OpKind::Get, 128, &part),
            fail(ErrorCode::Integrity, ErrorClass::Integrity)
        );
        assert_eq!(
            plan(OpKind::Get, 64, &ok),
            fail(ErrorCode::TooLarge, ErrorClass::Local)
        );
        // `bytes=0-` of an empty object is not satisfiable: the object is empty.
        assert_eq!(
            plan(OpKind::Get, 64, &head(416, &[("Content-Length", "0")])),
            Plan::Finish(Outcome::got(0, 0, false))
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
