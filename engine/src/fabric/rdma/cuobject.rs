//! The cuObject client dialect ([`super::Dialect::CuObject`]): each GET / RangeGet / PUT is
//! one signed HTTP request carrying a DC descriptor in `x-amz-rdma-token` (docs/protocol.md,
//! cuObject descriptor); the server moves the bytes by RDMA over mlx5 Dynamically Connected transport and
//! answers on the same exchange. The descriptor comes from a [`DcTokenProvider`] — on real
//! hardware a wrapper around cuObject's `cuMemObjGetRDMAToken`; no DC hardware exists in this
//! project, so only the wire side (request shape, acceptance, fallback) is exercised here.
//!
//! With DC the client cannot observe the server's write into its memory: acceptance relies on
//! the server's reply code and byte count (as NIXL and MinIO's clients do; docs/protocol.md, Acceptance and fallback). The defence
//! against a server that lies is checksum verification of the destination
//! ([`check_destination`]) whenever the answer carries a checksum that covers it.

use ring_api::ErrorCode;
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::http::ResponseHead;
use s3_lite::rdma::descriptor::DescriptorWithSuffix;

use crate::inflight::OpKind;

/// Direction of the transfer a descriptor is minted for (cuObject's `op` argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DcOp {
    /// The server writes into the buffer (GET, RangeGet).
    Get,
    /// The server reads from the buffer (PUT).
    Put,
}

/// Why a provider could not mint a descriptor (the op then goes over HTTP).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DcTokenError {
    /// The provider cannot serve this buffer (not registered, too large, no DC device...).
    #[error("DC token unavailable: {0}")]
    Unavailable(String),
    /// The provider's output is not a descriptor for the range asked.
    #[error("DC token malformed: {0}")]
    Malformed(String),
}

/// Mints cuObject DC descriptors, what `cuMemObjGetRDMAToken(ptr, size, 0, op, &desc)` does on
/// real hardware. Called on the worker thread once per RDMA attempt; must be cheap.
pub trait DcTokenProvider: Send + Sync + std::fmt::Debug {
    /// The descriptor for `len` bytes at `addr` (the op's buffer range, a process virtual
    /// address): 81 characters (`%016x:%08x:%08x:%04x:%06x:%1x:%032x`), optionally followed by
    /// `:<addr 16 hex>:<size 16 hex>`.
    fn mint(&self, addr: u64, len: u64, op: DcOp) -> Result<String, DcTokenError>;
}

/// Mints through `p` and checks the result: it must parse as a descriptor (with or without
/// suffix) naming exactly `addr` and at least `len` bytes, so a faulty provider never sends
/// the server a window other than the op's.
pub(crate) fn mint_checked(
    p: &dyn DcTokenProvider,
    addr: u64,
    len: u64,
    op: DcOp,
) -> Result<String, DcTokenError> {
    let s = p.mint(addr, len, op)?;
    let d = DescriptorWithSuffix::parse(&s).map_err(|e| DcTokenError::Malformed(e.to_string()))?;
    if d.remote_addr() != addr || d.size() < len {
        return Err(DcTokenError::Malformed(format!(
            "descriptor names {:#x}+{} for {addr:#x}+{len}",
            d.remote_addr(),
            d.size()
        )));
    }
    Ok(s)
}

fn crc_b64(data: &[u8]) -> String {
    let mut c = Crc64Nvme::new();
    c.update(data);
    encode_crc64nvme(c.finish())
}

/// Verifies the destination of an accepted DC GET (`dest` = the bytes the server says it
/// wrote). Compared when present: `x-amz-rdma-checksum-crc64nvme` (covers the transferred
/// bytes) and, for a whole-object GET answered 200 without `Content-Range`,
/// `x-amz-checksum-crc64nvme` (the full object's). A mismatch is `ErrorCode::Integrity`.
/// Answers without a covering checksum are accepted on the reply and count alone:
/// `Ok(true)` says a checksum was compared (the bytes are proven), `Ok(false)` that none was.
///
/// Called by the connection (`fabric/http/conn.rs`) right after `verdict::judge` accepts an
/// RDMA GET (any dialect carried over HTTP), before the operation completes.
pub(crate) fn check_destination(
    kind: OpKind,
    head: &ResponseHead,
    dest: &[u8],
) -> Result<bool, ErrorCode> {
    let rdma = head.header("x-amz-rdma-checksum-crc64nvme").map(str::trim);
    let whole =
        (kind == OpKind::Get && head.status == 200 && head.header("content-range").is_none())
            .then(|| head.header("x-amz-checksum-crc64nvme").map(str::trim))
            .flatten();
    if rdma.is_none() && whole.is_none() {
        return Ok(false);
    }
    let ours = crc_b64(dest);
    for want in [rdma, whole].into_iter().flatten() {
        if want != ours {
            return Err(ErrorCode::Integrity);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::test_head as head;

    #[derive(Debug)]
    struct Fixed(String);
    impl DcTokenProvider for Fixed {
        fn mint(&self, _: u64, _: u64, _: DcOp) -> Result<String, DcTokenError> {
            Ok(self.0.clone())
        }
    }

    const D: &str =
        "00007f7c12340000:00800000:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005";

    #[test]
    fn minted_descriptor_must_name_the_range() {
        let p = Fixed(D.to_owned());
        assert_eq!(
            mint_checked(&p, 0x7f7c_1234_0000, 0x80_0000, DcOp::Get).as_deref(),
            Ok(D)
        );
        assert!(matches!(
            mint_checked(&p, 0x7f7c_1234_0001, 16, DcOp::Get),
            Err(DcTokenError::Malformed(_))
        ));
        assert!(matches!(
            mint_checked(&p, 0x7f7c_1234_0000, 0x80_0001, DcOp::Put),
            Err(DcTokenError::Malformed(_))
        ));
        let bad = Fixed(D.to_uppercase());
        assert!(matches!(
            mint_checked(&bad, 0x7f7c_1234_0000, 1, DcOp::Get),
            Err(DcTokenError::Malformed(_))
        ));
    }

    #[test]
    fn destination_checksum_mismatch_is_integrity() {
        let data = b"123456789";
        // CRC-64/NVME check value of "123456789" is 0xae8b14860a799888.
        let good = encode_crc64nvme(0xae8b_1486_0a79_9888);
        assert_eq!(crc_b64(data), good);
        let h = head(200, &[("x-amz-checksum-crc64nvme", &good)]);
        assert_eq!(check_destination(OpKind::Get, &h, data), Ok(true));
        assert_eq!(
            check_destination(OpKind::Get, &h, b"12345678X"),
            Err(ErrorCode::Integrity)
        );
        let r = head(206, &[("x-amz-rdma-checksum-crc64nvme", &good)]);
        let rg = OpKind::RangeGet { offset: 3 };
        assert_eq!(
            check_destination(rg, &r, b"000000000"),
            Err(ErrorCode::Integrity)
        );
        // A full-object checksum says nothing about a range.
        let whole_on_range = head(206, &[("x-amz-checksum-crc64nvme", &good)]);
        assert_eq!(check_destination(rg, &whole_on_range, b"000"), Ok(false));
        assert_eq!(
            check_destination(OpKind::Get, &head(200, &[]), b"x"),
            Ok(false)
        );
    }
}
