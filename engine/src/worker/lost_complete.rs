//! A CompleteMultipart whose answer was lost or could not be read is not a failure yet.
//!
//! The server may have completed the upload although we never read its answer: the
//! connection failed after the request went out (every retry included), the `200` answer
//! was cut short or garbled, or a repeated Complete found the upload gone (`NoSuchUpload`:
//! the first attempt completed it). Before such a failure is reported, the worker turns the
//! operation into a `HEAD` of the object ([`MultipartOp::VerifyStored`], with
//! `x-amz-checksum-mode: ENABLED`), judged as after any Complete: the stored size must be
//! ours, and a stored full-object CRC64NVME, when the server keeps one, must be ours too (it
//! then proves the object: `VERIFIED`). A matching size alone is a success without
//! `VERIFIED`. No object (or any other failure of the HEAD) reports the Complete's own
//! failure; another size or checksum is `Integrity`. docs/protocol.md, "What proves a PUT".

use ring_api::{ErrorClass, ErrorCode};

use crate::inflight::{InFlight, LostAnswer, MultipartOp};

/// Whether the failure `code`/`class` of `op` leaves open that the server completed it:
/// `op` is a CompleteMultipart whose object we know, and its answer was unreadable
/// (`Protocol`), lost (a transport failure after the retries), or, on a repeat, named the
/// upload unknown. Returns the HEAD to send instead of failing.
pub(super) fn head_instead(
    op: &InFlight,
    code: ErrorCode,
    class: ErrorClass,
) -> Option<MultipartOp> {
    let Some(MultipartOp::Complete {
        upload,
        expect: Some(expect),
        ..
    }) = &op.multipart
    else {
        return None;
    };
    let unreadable = code == ErrorCode::Protocol;
    let lost = class == ErrorClass::Transport;
    // Sent before (a counted retry, or a free one after a stale keep-alive connection).
    let done_before = code == ErrorCode::NotFound && (op.retried || op.free_retries > 0);
    (unreadable || lost || done_before).then_some(MultipartOp::VerifyStored {
        expect: *expect,
        lost: Some(LostAnswer {
            upload: *upload,
            code,
            class,
        }),
    })
}

/// The failure to report for `op` that failed with `code`/`class`: for the HEAD after a lost
/// Complete answer, `Integrity` (the stored object is not ours) stands, and anything else
/// (no such object, the HEAD itself failed) is the Complete's own failure.
pub(super) fn failure(
    op: &InFlight,
    code: ErrorCode,
    class: ErrorClass,
) -> (ErrorCode, ErrorClass) {
    match &op.multipart {
        Some(MultipartOp::VerifyStored {
            lost: Some(lost), ..
        }) if code != ErrorCode::Integrity => (lost.code, lost.class),
        _ => (code, class),
    }
}

/// After a successful HEAD that followed a lost Complete answer: the upload is completed,
/// so its handle is forgotten.
pub(super) fn completed(op: &InFlight) {
    if let (
        Some(MultipartOp::VerifyStored {
            lost: Some(lost), ..
        }),
        Some(table),
    ) = (&op.multipart, op.uploads.as_deref())
    {
        table.remove(lost.upload);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    use ring_api::{ObjectName, UploadHandle};

    use crate::inflight::{OpKind, QueueRef};
    use crate::multipart::ExpectedObject;

    const EXPECT: ExpectedObject = ExpectedObject {
        len: 10,
        crc64nvme: 7,
    };

    fn complete(expect: Option<ExpectedObject>, retried: bool) -> InFlight {
        let object = Arc::new(ObjectName {
            bucket: "b".into(),
            key: "k".into(),
        });
        InFlight {
            retried,
            multipart: Some(MultipartOp::Complete {
                upload: UploadHandle(3),
                upload_id: Arc::from("id"),
                parts: Arc::from(Vec::new()),
                expect,
            }),
            ..InFlight::fresh(QueueRef::default(), 1, OpKind::Head, object)
        }
    }

    #[test]
    fn only_failures_that_leave_the_outcome_open_ask_the_server() {
        let op = complete(Some(EXPECT), false);
        let asks = |op: &InFlight, code, class| head_instead(op, code, class).is_some();
        assert!(asks(&op, ErrorCode::Protocol, ErrorClass::Integrity));
        assert!(asks(&op, ErrorCode::ConnectionReset, ErrorClass::Transport));
        assert!(asks(&op, ErrorCode::TimedOut, ErrorClass::Transport));
        // A first Complete refused as unknown never ran; a repeat may find it done.
        assert!(!asks(&op, ErrorCode::NotFound, ErrorClass::Client));
        assert!(asks(
            &complete(Some(EXPECT), true),
            ErrorCode::NotFound,
            ErrorClass::Client
        ));
        // A proven mismatch or a refusal is the answer.
        assert!(!asks(&op, ErrorCode::Integrity, ErrorClass::Integrity));
        assert!(!asks(&op, ErrorCode::InvalidArgument, ErrorClass::Client));
        assert!(!asks(&op, ErrorCode::Remote, ErrorClass::Server));
        // Without knowing what the object must be, a HEAD proves nothing.
        assert!(!asks(
            &complete(None, true),
            ErrorCode::Protocol,
            ErrorClass::Integrity
        ));
    }

    #[test]
    fn the_head_reports_the_complete_failure_unless_the_object_differs() {
        let op = complete(Some(EXPECT), false);
        let head = head_instead(&op, ErrorCode::Protocol, ErrorClass::Integrity).unwrap();
        let op = InFlight {
            multipart: Some(head),
            ..op
        };
        assert_eq!(
            failure(&op, ErrorCode::NotFound, ErrorClass::Client),
            (ErrorCode::Protocol, ErrorClass::Integrity)
        );
        assert_eq!(
            failure(&op, ErrorCode::Integrity, ErrorClass::Integrity),
            (ErrorCode::Integrity, ErrorClass::Integrity)
        );
        // Any other operation's failure is its own.
        let plain = complete(Some(EXPECT), false);
        assert_eq!(
            failure(&plain, ErrorCode::NotFound, ErrorClass::Client),
            (ErrorCode::NotFound, ErrorClass::Client)
        );
    }
}
