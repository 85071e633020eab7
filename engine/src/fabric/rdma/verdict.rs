//! The RDMA acceptance rules (`s3_lite::rdma::acceptance`, docs/protocol.md, Acceptance and
//! fallback) mapped onto the HTTP transport's plan for the answer: what the protocol module
//! decides (moved, judge as HTTP, resend, an error) becomes a [`Plan`]. [`RdmaJudge`] is the
//! judge a tokened exchange hands the transport.

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::http::ResponseHead;
pub(crate) use s3_lite::rdma::acceptance::Verdict;
use s3_lite::rdma::acceptance::{self, Acceptance, Transfer};

use crate::fabric::http::ReplyJudge;
use crate::fabric::http::response::{
    Plan, named_size, plan as http_plan, put_echo, status_outcome,
};
use crate::fabric::soft::Landed;
use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};

/// The protocol module's name for an op's kind.
pub(crate) const fn transfer(kind: OpKind) -> Transfer {
    match kind {
        OpKind::Get => Transfer::Get,
        OpKind::RangeGet { offset } => Transfer::RangeGet { offset },
        OpKind::Put => Transfer::Put,
        OpKind::Head => Transfer::Head,
    }
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

/// Judges the head of an RDMA attempt of `kind` (destination/source of `buf_len` bytes;
/// `crc` = our base64 CRC64NVME for PUT).
pub(crate) fn judge(
    kind: OpKind,
    buf_len: u64,
    head: &ResponseHead,
    crc: Option<&str>,
) -> (Plan, Verdict) {
    let (acceptance, verdict) = acceptance::judge(transfer(kind), buf_len, head, crc);
    let plan = match acceptance {
        Acceptance::Moved { bytes, object_size } => {
            Plan::Finish(Outcome::got(bytes, object_size.unwrap_or(0), false))
        }
        Acceptance::AsHttp => http_plan(kind, buf_len, head),
        Acceptance::Resend => RESEND,
        Acceptance::Status(status) => Plan::Error(status_outcome(status)),
        Acceptance::Protocol => integrity(ErrorCode::Protocol),
        Acceptance::Integrity => integrity(ErrorCode::Integrity),
        Acceptance::PastEnd => crate::fabric::http::response::past_end(),
    };
    (plan, verdict)
}

/// What judging an RDMA answer teaches the dialects (the transport's note of the exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Judged {
    pub(crate) verdict: Verdict,
    /// The server answered before the bytes finished landing (a soft GET's early answer):
    /// the op completes only once its window's landing digest covers them.
    pub(crate) awaits: Option<Awaits>,
    /// The answer failed the op while its WRITEs may still be landing (an early answer that
    /// vouches for nothing): the link must stop before the window closes.
    pub(crate) writes_in_flight: bool,
}

/// The bytes an early-answered GET still waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Awaits {
    /// The window's first `bytes` must land, in order.
    pub(crate) bytes: u64,
    /// The CRC-64/NVME the answer named for them (an early answer that names none is refused).
    pub(crate) want: u64,
}

/// Judges the answer to a request that carried an RDMA token (`crc`: our base64 CRC64NVME of
/// a PUT's payload). An accepted RDMA GET's bytes are already in the destination: when the
/// server names a checksum of them, they are verified before the op completes
/// (`s3_lite::rdma::cuobject::check_destination_known`; a mismatch is an integrity failure),
/// except bytes a GPUDirect window put in VRAM, which the host cannot read. A soft window's
/// landing digest, when it covers exactly the bytes moved, stands in for reading them again.
///
/// An answer the server sent early (`x-amz-rdma-early-answer: 1`, which the soft client asks
/// for when its window tracks its landing) may come before the bytes finished landing: then
/// nothing of the window is read; the exchange ends holding the op ([`Judged::awaits`]), and
/// the dialects complete it once the landing digest covers the bytes and equals the checksum
/// the answer named (`RdmaClient::check_landings`). A digest that broke cannot say when the
/// bytes are done: that attempt fails as a transport failure (retried), never as a success.
#[derive(Debug)]
pub(crate) struct RdmaJudge {
    pub(crate) crc: Option<String>,
    pub(crate) landing: Option<crate::fabric::soft::Landing>,
    /// The request asked for an early answer (only then may one come), and told the server
    /// its frames need no checksums (`x-amz-rdma-frame-check: landing`): the answer must then
    /// prove the bytes (name the CRC-64/NVME the landing digest equals).
    pub(crate) early: bool,
}

const fn judged(verdict: Verdict) -> Judged {
    Judged {
        verdict,
        awaits: None,
        writes_in_flight: false,
    }
}

/// A failed early answer: its WRITEs may still be on the way.
const fn judged_early_failure(verdict: Verdict) -> Judged {
    Judged {
        writes_in_flight: true,
        ..judged(verdict)
    }
}

impl ReplyJudge for RdmaJudge {
    type Note = Judged;

    fn holds(note: &Judged) -> bool {
        note.awaits.is_some()
    }

    fn judge(&self, op: &InFlight, head: &ResponseHead) -> (Plan, Judged) {
        let (plan, verdict) = judge(op.kind, op.buf_len(), head, self.crc.as_deref());
        let (Plan::Finish(Outcome::Done { bytes, aux }), Some(buf)) = (plan, op.buf.as_ref())
        else {
            return (plan, judged(verdict));
        };
        let early = head
            .header(s3_lite::rdma::pairing::RDMA_EARLY_ANSWER)
            .map(str::trim)
            == Some("1");
        if early && !self.early {
            // An answer that did not wait for its WRITEs, which we did not ask for: nothing
            // says the bytes are there.
            return (
                integrity(ErrorCode::Protocol),
                judged_early_failure(verdict),
            );
        }
        let landed_now = self.landing.as_ref().map(|l| l.state_of_first(bytes));
        if early {
            match landed_now {
                Some(Landed::Pending) => {
                    let size = if aux == 0 { named_size(head) } else { aux };
                    return match s3_lite::rdma::cuobject::destination_crc64(transfer(op.kind), head)
                    {
                        // The frames may have come unchecked (`x-amz-rdma-frame-check`): an
                        // answer that names no checksum vouches for nothing.
                        Ok(Some(want)) => (
                            Plan::Finish(Outcome::got(bytes, size, false)),
                            Judged {
                                awaits: Some(Awaits { bytes, want }),
                                ..judged(verdict)
                            },
                        ),
                        Ok(None) | Err(_) => (
                            integrity(ErrorCode::Integrity),
                            judged_early_failure(verdict),
                        ),
                    };
                }
                Some(Landed::Covered(_)) => {}
                // The bytes may still be landing, and nothing can tell when they are done.
                Some(Landed::Broken) | None => {
                    return (
                        Plan::Finish(Outcome::transport(false)),
                        judged_early_failure(verdict),
                    );
                }
            }
        }
        let landed = buf.bytes_from(0);
        let landed = landed
            .get(..usize::try_from(bytes).unwrap_or(usize::MAX))
            .unwrap_or(landed);
        // A GPUDirect window put the bytes in VRAM, out of the host's reach: not checked here
        // (docs/gpu.md).
        let checked = if buf.landed_direct() {
            Ok(false)
        } else {
            let known = match landed_now {
                Some(Landed::Covered(crc)) if landed.len() as u64 == bytes => Some(crc),
                _ => None,
            };
            s3_lite::rdma::cuobject::check_destination_known(transfer(op.kind), head, landed, known)
        };
        let plan = match checked {
            // The frames may have come unchecked: only the named checksum vouches for them.
            Ok(false) if self.early => integrity(ErrorCode::Integrity),
            Ok(proven) if op.kind != OpKind::Put => {
                // The size: the byte count's `/total`, else the reply's `Content-Range` total.
                let size = if aux == 0 { named_size(head) } else { aux };
                Plan::Finish(Outcome::got(bytes, size, proven))
            }
            // A PUT (or UploadPart): the echo of our CRC64NVME, like a checksum of the
            // source, proves what the server received; another value is a mismatch.
            Ok(proven) => match put_echo(op, head) {
                Some(false) => integrity(ErrorCode::Integrity),
                echo => Plan::Finish(Outcome::got(bytes, aux, proven || echo == Some(true))),
            },
            Err(_mismatch) => integrity(ErrorCode::Integrity),
        };
        (plan, judged(verdict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::fabric::test_head as head;

    /// Each acceptance lands on the plan the HTTP path would reach for the same failure
    /// (the rules themselves are tested in `s3_lite::rdma::acceptance`).
    #[test]
    fn acceptances_map_onto_plans() {
        let declined = head(
            206,
            &[
                (s3_lite::rdma::RDMA_REPLY, "501"),
                ("Content-Range", "bytes 10-59/100"),
                ("Content-Length", "50"),
            ],
        );
        let rg = OpKind::RangeGet { offset: 10 };
        assert_eq!(
            judge(rg, 50, &declined, None),
            (
                Plan::Payload {
                    expected: Some(50),
                    cap: 50
                },
                Verdict::Declined
            )
        );
        let moved = head(
            200,
            &[
                (s3_lite::rdma::RDMA_REPLY, "200"),
                (s3_lite::rdma::RDMA_BYTES_TRANSFERRED, "50/50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(OpKind::Get, 64, &moved, None).0,
            Plan::Finish(Outcome::Done { bytes: 50, aux: 50 })
        );
        let put = head(
            200,
            &[(s3_lite::rdma::RDMA_REPLY, "204"), ("Content-Length", "0")],
        );
        assert_eq!(
            judge(OpKind::Put, 9, &put, None).0,
            Plan::Finish(Outcome::Done { bytes: 9, aux: 0 })
        );
        let minio = head(
            501,
            &[(s3_lite::rdma::RDMA_REPLY, "501"), ("Content-Length", "0")],
        );
        assert_eq!(judge(rg, 50, &minio, None), (RESEND, Verdict::Declined));
        let failed = head(
            500,
            &[(s3_lite::rdma::RDMA_REPLY, "500"), ("Content-Length", "0")],
        );
        assert_eq!(
            judge(OpKind::Put, 9, &failed, None).0,
            Plan::Error(status_outcome(500))
        );
        let short = head(
            206,
            &[
                (s3_lite::rdma::RDMA_REPLY, "206"),
                (s3_lite::rdma::RDMA_BYTES_TRANSFERRED, "49"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(rg, 50, &short, None).0,
            integrity(ErrorCode::Integrity)
        );
        let past_end = head(
            206,
            &[
                (s3_lite::rdma::RDMA_REPLY, "206"),
                (s3_lite::rdma::RDMA_BYTES_TRANSFERRED, "40"),
                ("Content-Range", "bytes 10-49/50"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            judge(rg, 50, &past_end, None).0,
            crate::fabric::http::response::past_end()
        );
    }
}
