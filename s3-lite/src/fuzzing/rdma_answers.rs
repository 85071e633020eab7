//! A server's answer to each RDMA exchange, as a client judges it with the protocol module's
//! rules (`crate::rdma::{pairing, acceptance, cuobject, v2::client}`). The engine's
//! `rdma_answers` target runs this body, then its own learning from the same answer.

use crate::http::{Event, Limits, ResponseDecoder, ResponseHead};
use crate::rdma::acceptance::{self, Acceptance, Transfer, Verdict};
use crate::rdma::pairing::{self, RcKind};
use crate::rdma::v2::{self, client};

/// The bytes are decoded as a response head (first byte: a seed for sizes and cookies), then
/// judged as the `rc-persistent` connect answer, the hipobj-rc-v2 PREPARE answer (both
/// fabrics) and FINAL, and as the answer to a tokened request of every transfer kind (with and
/// without a PUT checksum, with a destination that named checksums are checked against); each
/// must end in a value, never a panic. Cross-checks (no false success): a paired connect, a
/// granted PREPARE and an accepted FINAL each need a 200 (FINAL: 204 for PUT too) and a
/// FINAL's byte count fits the transfer; an RDMA verdict needs a success reply (or, for a
/// PUT, a 200 echoing the checksum we sent); a GET accepted as moved never claims more bytes
/// than the buffer holds. Returns the decoded head (for callers that judge it further).
pub fn rdma_answers(data: &[u8]) -> Option<(ResponseHead, usize)> {
    let (seed, wire) = data.split_first().map_or((0, data), |(s, w)| (*s, w));
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let d = dec.decode(wire).ok()?;
    let Event::Head(head) = d.event else {
        return None;
    };
    if pairing::parse_answer(&head).is_ok() {
        assert_eq!(head.status, 200, "connect paired on a non-200");
    }
    for fabric in [RcKind::Soft, RcKind::Verbs] {
        for op in [v2::Op::Get, v2::Op::Put] {
            if let client::PrepareAnswer::Granted(_) = client::prepare_answer(&head, op, fabric) {
                assert_eq!(head.status, 200, "PREPARE granted on a non-200");
            }
        }
    }
    let size = u64::from(seed) * 4099 + 1;
    for (put, exact) in [(false, false), (false, true), (true, true)] {
        let judged = client::judge_final(&head, put, u32::from(seed) * 0x0101_0101, size, exact);
        if let Ok(f) = judged {
            assert!(
                head.status == 200 || (put && head.status == 204),
                "FINAL on {}",
                head.status
            );
            assert!(
                (1..=size).contains(&f.bytes),
                "FINAL claims {} of {size} bytes",
                f.bytes
            );
            assert!(
                !exact || f.bytes == size,
                "exact FINAL of {} bytes",
                f.bytes
            );
        }
    }
    let dest = vec![seed; usize::try_from(size).unwrap_or(usize::MAX).min(64 * 1024)];
    for kind in [
        Transfer::Get,
        Transfer::RangeGet { offset: 7 },
        Transfer::Put,
        Transfer::Head,
    ] {
        for crc in [None, Some("AAAAAAAAAAA=")] {
            let (acc, v) = acceptance::judge(kind, dest.len() as u64, &head, crc);
            if v == Verdict::Rdma {
                let reply = head
                    .header(crate::rdma::RDMA_REPLY)
                    .map(crate::rdma::Reply::parse);
                // The one reply-less proof: a PUT whose 200 echoes the checksum we sent.
                let echoed_ours = kind == Transfer::Put
                    && head.status == 200
                    && crc.is_some()
                    && head
                        .header(crate::checksum::HEADER_CRC64NVME)
                        .map(str::trim)
                        == crc;
                assert!(
                    echoed_ours
                        || matches!(reply, Some(Ok(r)) if matches!(r.classify(), crate::rdma::ReplyClass::Success(_))),
                    "an RDMA verdict without a success reply or our echoed checksum"
                );
            }
            if let Acceptance::Moved { bytes, .. } = acc
                && matches!(kind, Transfer::Get | Transfer::RangeGet { .. })
            {
                assert!(
                    bytes <= dest.len() as u64,
                    "a GET verdict claimed {bytes} bytes"
                );
            }
        }
        let plain = crate::rdma::cuobject::check_destination(kind, &head, &dest);
        // A checksum known from the landing must decide exactly as reading the bytes does.
        let known = crate::checksum::Crc64Nvme::checksum(&dest);
        assert_eq!(
            crate::rdma::cuobject::check_destination_known(kind, &head, &dest, Some(known)),
            plain,
            "a known checksum decided otherwise"
        );
        // The checksum a deferred check compares the landed bytes with (an early answer): the
        // same decision as reading them.
        let deferred = match crate::rdma::cuobject::destination_crc64(kind, &head) {
            Ok(None) => Ok(false),
            Ok(Some(want)) if want == known => Ok(true),
            Ok(Some(_)) | Err(_) => Err(()),
        };
        assert_eq!(
            deferred,
            plain.map_err(|_| ()),
            "a deferred check decided otherwise"
        );
    }
    Some((head, d.consumed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_replay() {
        for (_, bytes) in crate::fuzzing::seeds("rdma_answers", 3) {
            rdma_answers(&bytes);
        }
    }

    #[test]
    fn garbage_and_real_answers() {
        assert!(rdma_answers(&[]).is_none());
        assert!(rdma_answers(b"\x05HTTP/1.1 200 OK\r\n\r\n").is_some());
        let granted = "\x09HTTP/1.1 200 OK\r\nx-amz-rdma-protocol: hipobj-rc-v2\r\n\
            x-amz-rdma-reply: 200:xyz\r\nx-amz-rdma-session: 00112233445566778899aabbccddeeff\r\n\
            x-amz-rdma-psn: abcdef\r\nx-amz-rdma-qpn: 1234\r\nx-amz-rdma-bytes-transferred: 99999999\r\n\
            x-amz-rdma-fabric: verbs\r\nContent-Length: 0\r\n\r\n";
        assert!(rdma_answers(granted.as_bytes()).is_some());
    }
}
