//! cuObject's client-side check of an accepted DC GET (docs/protocol.md, cuObject descriptor).
//!
//! With DC the client cannot observe the server's write into its memory: acceptance relies on
//! the server's reply code and byte count (as NIXL and MinIO's clients do; docs/protocol.md,
//! Acceptance and fallback). The defence against a server that lies is checksum verification
//! of the destination ([`check_destination`]) whenever the answer carries a checksum that
//! covers it.

use crate::checksum::{Crc64Nvme, HEADER_CRC64NVME, decode_crc64nvme, encode_crc64nvme};
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

/// The base64 CRC-64/NVME values an answer names for the destination of an accepted RDMA GET:
/// `x-amz-rdma-checksum-crc64nvme` (the transferred bytes) and, for a whole-object 200
/// without `Content-Range`, `x-amz-checksum-crc64nvme` (the full object's).
fn named_checksums(kind: Transfer, head: &ResponseHead) -> [Option<&str>; 2] {
    let rdma = head.header(RDMA_CHECKSUM_CRC64NVME).map(str::trim);
    let whole =
        (kind == Transfer::Get && head.status == 200 && head.header("content-range").is_none())
            .then(|| head.header(HEADER_CRC64NVME).map(str::trim))
            .flatten();
    [rdma, whole]
}

/// [`check_destination`], with `known`: the CRC-64/NVME of `dest` when the caller already
/// has it (computed as the bytes landed), so they are not read again.
pub fn check_destination_known(
    kind: Transfer,
    head: &ResponseHead,
    dest: &[u8],
    known: Option<u64>,
) -> Result<bool, DestinationMismatch> {
    let named = named_checksums(kind, head);
    if named.iter().all(Option::is_none) {
        return Ok(false);
    }
    let ours = match known {
        Some(crc) => encode_crc64nvme(crc),
        None => crc_b64(dest),
    };
    for want in named.into_iter().flatten() {
        if want != ours {
            return Err(DestinationMismatch);
        }
    }
    Ok(true)
}

/// The CRC-64/NVME the answer names for the destination of an accepted RDMA GET (the same
/// checksums [`check_destination`] compares), for a caller that will compare it with bytes
/// still landing: `Ok(None)` when the answer names none; `Err` when a named value is not a
/// canonical checksum or two named values disagree (no destination can match both).
pub fn destination_crc64(
    kind: Transfer,
    head: &ResponseHead,
) -> Result<Option<u64>, DestinationMismatch> {
    let mut named = None;
    for value in named_checksums(kind, head).into_iter().flatten() {
        let crc = decode_crc64nvme(value).map_err(|_| DestinationMismatch)?;
        if named.is_some_and(|n| n != crc) {
            return Err(DestinationMismatch);
        }
        named = Some(crc);
    }
    Ok(named)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::test_head as head;

    #[test]
    fn the_named_checksum_is_decoded_once_and_must_agree() {
        let good = encode_crc64nvme(0xae8b_1486_0a79_9888);
        let other = encode_crc64nvme(7);
        let rg = Transfer::RangeGet { offset: 3 };
        let r = head(206, &[("x-amz-rdma-checksum-crc64nvme", &good)]);
        assert_eq!(destination_crc64(rg, &r), Ok(Some(0xae8b_1486_0a79_9888)));
        assert_eq!(destination_crc64(rg, &head(206, &[])), Ok(None));
        let both = head(
            200,
            &[
                ("x-amz-rdma-checksum-crc64nvme", &good),
                ("x-amz-checksum-crc64nvme", &other),
            ],
        );
        assert_eq!(
            destination_crc64(Transfer::Get, &both),
            Err(DestinationMismatch)
        );
        // A range is not judged by the whole object's checksum.
        assert_eq!(
            destination_crc64(rg, &both),
            Ok(Some(0xae8b_1486_0a79_9888))
        );
        let bad = head(206, &[("x-amz-rdma-checksum-crc64nvme", "not base64!")]);
        assert_eq!(destination_crc64(rg, &bad), Err(DestinationMismatch));
    }

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
