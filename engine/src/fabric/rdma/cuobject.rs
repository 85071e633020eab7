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
//! (`s3_lite::rdma::cuobject::check_destination`) whenever the answer carries a checksum that
//! covers it.

use s3_lite::rdma::descriptor::DescriptorWithSuffix;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
