//! CRC-32C (Castagnoli) of soft frames: the running register ([`FrameCrc`]) and the tables that
//! join interleaved streams.
//!
//! The payload's checksum is taken straight from registered memory (`raw::crc32c_ptr`), with no
//! bounce copy: on x86-64 with SSE4.2, three streams of the `crc32` instruction run side by
//! side over three stripes of a block, and the tables here join their registers (processing
//! `n` zero bytes multiplies a register by `x^(8n)` modulo the polynomial, a linear map, so it is
//! four byte-indexed lookups). Elsewhere the bytes go through a bounce buffer to `crc-fast`.

use std::sync::OnceLock;

/// CRC-32C's polynomial, bit-reflected.
const POLY: u32 = 0x82f6_3b78;

/// Bytes per stream per block of the three-way loop: long blocks for bulk payload, short ones
/// for what is left.
pub(crate) const LONG: usize = 8192;
pub(crate) const SHORT: usize = 256;

/// A frame's running CRC-32C: feed the encoded header, then the payload ([`super::frame::frame_crc`],
/// [`super::frame::trailer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCrc {
    /// The register: all ones before any byte, not yet inverted.
    pub(crate) reg: u32,
}

impl Default for FrameCrc {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameCrc {
    /// The CRC of no bytes yet.
    #[must_use]
    pub fn new() -> Self {
        Self { reg: !0 }
    }

    /// Feeds `data`.
    pub fn update(&mut self, data: &[u8]) -> &mut Self {
        self.reg = super::raw::crc32c_slice(self.reg, data);
        self
    }

    /// The CRC-32C of everything fed.
    #[must_use]
    pub fn finish(&self) -> u32 {
        !self.reg
    }
}

/// `a·b` modulo the polynomial (both bit-reflected).
fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `x^(8n)` modulo the polynomial (bit-reflected): the register `x^0` after `n` zero bytes.
fn x8nmodp(n: usize) -> u32 {
    let mut p: u32 = 1 << 31;
    for _ in 0..n * 8 {
        p = if p & 1 != 0 { (p >> 1) ^ POLY } else { p >> 1 };
    }
    p
}

/// The map "process `n` zero bytes" on a register, one table per register byte.
pub(crate) struct Shift([[u32; 256]; 4]);

impl Shift {
    fn new(n: usize) -> Self {
        let k = x8nmodp(n);
        let mut t = [[0u32; 256]; 4];
        for (j, row) in t.iter_mut().enumerate() {
            for (i, v) in row.iter_mut().enumerate() {
                *v = multmodp(k, (i as u32) << (8 * j));
            }
        }
        Self(t)
    }

    /// `reg` after `n` zero bytes (the `n` this table was made for).
    pub(crate) fn apply(&self, reg: u32) -> u32 {
        let [a, b, c, d] = reg.to_le_bytes();
        let [t0, t1, t2, t3] = &self.0;
        t0[usize::from(a)] ^ t1[usize::from(b)] ^ t2[usize::from(c)] ^ t3[usize::from(d)]
    }
}

/// The tables for [`LONG`] and [`SHORT`] bytes, made on first use.
pub(crate) fn shifts() -> &'static (Shift, Shift) {
    static T: OnceLock<(Shift, Shift)> = OnceLock::new();
    T.get_or_init(|| (Shift::new(LONG), Shift::new(SHORT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Every length around the block sizes, and random splits of one buffer, give crc-fast's
    /// CRC-32C (the fallback path too).
    #[test]
    fn matches_crc_fast_at_every_edge_and_split() {
        let data = noise(3 * LONG * 2 + 3 * SHORT * 3 + 77, 7);
        let mut lens: Vec<usize> = (0..80).collect();
        for base in [3 * SHORT, 3 * LONG, 6 * LONG, 3 * LONG + 3 * SHORT] {
            lens.extend(base.saturating_sub(9)..base + 9);
        }
        lens.push(data.len());
        for &n in &lens {
            let want = s3_lite::checksum::Crc32c::checksum(&data[..n]);
            let mut c = FrameCrc::new();
            c.update(&data[..n]);
            assert_eq!(c.finish(), want, "len {n}");
            assert_eq!(
                !super::super::raw::crc32c_fallback(!0, &data[..n]),
                want,
                "fallback, len {n}"
            );
            // Unaligned starts.
            if n > 3 {
                let want = s3_lite::checksum::Crc32c::checksum(&data[3..n]);
                assert_eq!(
                    FrameCrc::new().update(&data[3..n]).finish(),
                    want,
                    "len {n} at 3"
                );
            }
        }
        let mut x = 12345usize;
        for _ in 0..50 {
            let mut c = FrameCrc::new();
            let mut at = 0;
            while at < data.len() {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let n = (x >> 33) % (4 * LONG);
                let end = (at + n).min(data.len());
                c.update(&data[at..end]);
                at = end;
            }
            assert_eq!(c.finish(), s3_lite::checksum::Crc32c::checksum(&data));
        }
    }

    #[test]
    fn shift_is_processing_zero_bytes() {
        let (long, short) = shifts();
        for reg in [1u32, 0xdead_beef, !0, 0x8000_0000] {
            let zeros = vec![0u8; SHORT];
            let direct = !FrameCrc { reg }.update(&zeros).finish();
            assert_eq!(short.apply(reg), !!direct);
            let zeros = vec![0u8; LONG];
            assert_eq!(long.apply(reg), FrameCrc { reg }.update(&zeros).reg);
        }
    }
}
