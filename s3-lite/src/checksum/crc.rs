//! Streaming CRC-64/NVME and CRC-32C hashers and the CRC combine operation (parameters: docs/rdma-headers.md, `checksum`).
//!
//! The hashing is `crc-fast`'s (SIMD, carry-less multiply); this module fixes the two S3
//! algorithms, narrows CRC-32C to `u32`, and exposes the combine S3 needs for a full-object
//! CRC64NVME over multipart parts (our own table-driven GF(2) shift, see `combine.rs`).

use crc_fast::{CrcAlgorithm, Digest};

/// Streaming CRC-64/NVME (`x-amz-checksum-crc64nvme`): poly `0xAD93D23594C93659`, reflected,
/// init and xorout all ones. Chunked updates equal one shot: `crc(a‖b)` whatever the split.
#[derive(Clone, Copy, Debug)]
pub struct Crc64Nvme(Digest);

impl Default for Crc64Nvme {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc64Nvme {
    /// A hasher over the empty input.
    pub fn new() -> Self {
        Crc64Nvme(Digest::new(CrcAlgorithm::Crc64Nvme))
    }

    /// Feeds more bytes.
    pub fn update(&mut self, data: &[u8]) -> &mut Self {
        self.0.update(data);
        self
    }

    /// The CRC of everything fed so far (the hasher stays usable).
    pub fn finish(&self) -> u64 {
        self.0.finalize()
    }

    /// Number of bytes fed so far.
    pub fn len(&self) -> u64 {
        self.0.get_amount()
    }

    /// True before any byte was fed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One-shot CRC of `data`.
    pub fn checksum(data: &[u8]) -> u64 {
        crc_fast::checksum(CrcAlgorithm::Crc64Nvme, data)
    }

    /// `crc(a‖b)` from `crc(a)`, `crc(b)` and `b`'s length, without the data: a GF(2) shift of
    /// `crc_a` by `len_b` bytes (at most 65 polynomial multiplications, whatever `len_b`). This is how a full-object CRC64NVME is
    /// built from per-part CRCs of a multipart upload.
    pub fn combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
        super::combine::crc64nvme(crc_a, crc_b, len_b)
    }
}

/// Streaming CRC-32C (Castagnoli, iSCSI; `x-amz-checksum-crc32c`): init and xorout all ones.
#[derive(Clone, Copy, Debug)]
pub struct Crc32c(Digest);

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

/// CRC-32 results live in the low 32 bits of `crc-fast`'s `u64`.
fn low32(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}

impl Crc32c {
    /// A hasher over the empty input.
    pub fn new() -> Self {
        Crc32c(Digest::new(CrcAlgorithm::Crc32Iscsi))
    }

    /// Feeds more bytes.
    pub fn update(&mut self, data: &[u8]) -> &mut Self {
        self.0.update(data);
        self
    }

    /// The CRC of everything fed so far.
    pub fn finish(&self) -> u32 {
        low32(self.0.finalize())
    }

    /// Number of bytes fed so far.
    pub fn len(&self) -> u64 {
        self.0.get_amount()
    }

    /// True before any byte was fed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// One-shot CRC of `data`.
    pub fn checksum(data: &[u8]) -> u32 {
        low32(crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data))
    }

    /// `crc(a‖b)` from the parts' CRCs and `b`'s length.
    pub fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
        super::combine::crc32c(crc_a, crc_b, len_b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time reference CRC (reflected), independent of crc-fast.
    fn reference(poly_reflected: u64, width_mask: u64, data: &[u8]) -> u64 {
        let mut crc = width_mask;
        for &b in data {
            crc ^= u64::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ poly_reflected
                } else {
                    crc >> 1
                };
            }
        }
        crc ^ width_mask
    }

    #[test]
    fn check_values() {
        assert_eq!(Crc64Nvme::checksum(b"123456789"), 0xAE8B_1486_0A79_9888);
        assert_eq!(Crc64Nvme::checksum(b""), 0);
        assert_eq!(Crc32c::checksum(b"123456789"), 0xE306_9283);
        assert_eq!(Crc32c::checksum(b""), 0);
        let mut h = Crc64Nvme::new();
        h.update(b"1234").update(b"56789");
        assert_eq!((h.finish(), h.len()), (0xAE8B_1486_0A79_9888, 9));
        let mut c = Crc32c::default();
        assert!(c.is_empty());
        c.update(b"12345678").update(b"9");
        assert_eq!(c.finish(), 0xE306_9283);
    }

    #[test]
    fn matches_bitwise_reference() {
        let data: Vec<u8> = (0u32..1000)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0, 1, 7, 8, 15, 16, 63, 64, 255, 256, 999, 1000] {
            let d = &data[..len];
            assert_eq!(
                Crc64Nvme::checksum(d),
                reference(0x9A6C_9329_AC4B_C9B5, u64::MAX, d),
                "len {len}"
            );
            assert_eq!(
                u64::from(Crc32c::checksum(d)),
                reference(0x82F6_3B78, 0xffff_ffff, d),
                "len {len}"
            );
        }
    }

    #[test]
    fn combine_known_split() {
        let a = Crc64Nvme::checksum(b"1234");
        let b = Crc64Nvme::checksum(b"56789");
        assert_eq!(Crc64Nvme::combine(a, b, 5), 0xAE8B_1486_0A79_9888);
        assert_eq!(Crc64Nvme::combine(a, 0, 0), a);
        assert_eq!(Crc64Nvme::combine(0, b, 5), b);
        let a = Crc32c::checksum(b"12");
        let b = Crc32c::checksum(b"3456789");
        assert_eq!(Crc32c::combine(a, b, 7), 0xE306_9283);
    }
}
