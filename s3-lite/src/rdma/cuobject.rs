//! cuObject's client-side check of an accepted DC GET (docs/protocol.md, cuObject descriptor).
//!
//! With DC the client cannot observe the server's write into its memory: acceptance relies on
//! the server's reply code and byte count (as NIXL and MinIO's clients do; docs/protocol.md,
//! Acceptance and fallback). The defence against a server that lies is checksum verification
//! of the destination ([`check_destination`]) whenever the answer carries a checksum that
//! covers it.

use crate::checksum::{Crc64Nvme, HEADER_CRC64NVME, encode_crc64nvme};
use crate::http::ResponseHead;
use crate::rdma::RDMA_CHECKSUM_CRC64NVME;
use crate::rdma::acceptance::Transfer;

/// A checksum the answer named differs from the destination's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the destination's bytes do not match the checksum the server named")]
pub struct DestinationMismatch;

fn crc_b64(data: &[u8]) -> String {
    let mut c = Crc64Nvme::new();
    c.update(data);
    encode_crc64nvme(c.finish())
}

/// Verifies the destination of an accepted RDMA GET (`dest` = the bytes the server says it
/// wrote). Compared when present: `x-amz-rdma-checksum-crc64nvme` (covers the transferred
/// bytes) and, for a whole-object GET answered 200 without `Content-Range`,
/// `x-amz-checksum-crc64nvme` (the full object's). Answers without a covering checksum are
/// accepted on the reply and count alone: `Ok(true)` says a checksum was compared (the bytes
/// are proven), `Ok(false)` that none was.
pub fn check_destination(
    kind: Transfer,
    head: &ResponseHead,
    dest: &[u8],
) -> Result<bool, DestinationMismatch> {
    check_destination_known(kind, head, dest, None)
}

/// [`check_destination`], with `known`: the CRC-64/NVME of `dest` when the caller already
/// has it (computed as the bytes landed), so they are not read again.
pub fn check_destination_known(
    kind: Transfer,
    head: &ResponseHead,
    dest: &[u8],
    known: Option<u64>,
) -> Result<bool, DestinationMismatch> {
    let rdma = head.header(RDMA_CHECKSUM_CRC64NVME).map(str::trim);
    let whole =
        (kind == Transfer::Get && head.status == 200 && head.header("content-range").is_none())
            .then(|| head.header(HEADER_CRC64NVME).map(str::trim))
            .flatten();
    if rdma.is_none() && whole.is_none() {
        return Ok(false);
    }
    let ours = match known {
        Some(crc) => encode_crc64nvme(crc),
        None => crc_b64(dest),
    };
    for want in [rdma, whole].into_iter().flatten() {
        if want != ours {
            return Err(DestinationMismatch);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::test_head as head;

    #[test]
    fn destination_checksum_mismatch_is_refused() {
        let data = b"123456789";
        // CRC-64/NVME check value of "123456789" is 0xae8b14860a799888.
        let good = encode_crc64nvme(0xae8b_1486_0a79_9888);
        assert_eq!(crc_b64(data), good);
        let h = head(200, &[("x-amz-checksum-crc64nvme", &good)]);
        assert_eq!(check_destination(Transfer::Get, &h, data), Ok(true));
        assert_eq!(
            check_destination(Transfer::Get, &h, b"12345678X"),
            Err(DestinationMismatch)
        );
        let r = head(206, &[("x-amz-rdma-checksum-crc64nvme", &good)]);
        let rg = Transfer::RangeGet { offset: 3 };
        assert_eq!(
            check_destination(rg, &r, b"000000000"),
            Err(DestinationMismatch)
        );
        assert_eq!(check_destination(rg, &r, data), Ok(true));
        // A full-object checksum says nothing about a range.
        let whole_on_range = head(206, &[("x-amz-checksum-crc64nvme", &good)]);
        assert_eq!(check_destination(rg, &whole_on_range, b"000"), Ok(false));
        assert_eq!(
            check_destination(Transfer::Get, &head(200, &[]), b"x"),
            Ok(false)
        );
    }
}
