//! Coalescing of many small host → device copies into few large ones.
//!
//! A batch of range-gets lands in pinned bounce memory one after another. Copying each range
//! with its own copy launch costs a few microseconds of launch and DMA setup per range, which
//! for 64 KiB ranges is as long as the transfer itself. When consecutive ranges are contiguous
//! both in the bounce buffer and at their device destination, one copy moves them all; this
//! module plans those merged copies. Ranges whose destinations are not contiguous stay
//! separate (moving them in one launch needs a scatter kernel or `cuMemcpyBatchAsync`).

/// One copy: `len` bytes from host offset `src` to device offset `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyRange {
    /// Offset in the source (host) buffer.
    pub src: u64,
    /// Offset in the destination (device) buffer.
    pub dst: u64,
    /// Bytes.
    pub len: u64,
}

/// Merges runs of `ranges` (in the given order) that are contiguous on both sides into copies
/// of at most `max_batch` bytes. A single range longer than `max_batch` is kept whole.
///
/// The output covers exactly the input bytes, in order: the sum of lengths is preserved and
/// every input range lies inside exactly one output range.
#[must_use]
pub fn plan(ranges: &[CopyRange], max_batch: u64) -> Vec<CopyRange> {
    let mut out: Vec<CopyRange> = Vec::new();
    for r in ranges.iter().filter(|r| r.len > 0) {
        if let Some(last) = out.last_mut() {
            let contiguous = last.src.checked_add(last.len) == Some(r.src)
                && last.dst.checked_add(last.len) == Some(r.dst);
            if contiguous && last.len.checked_add(r.len).is_some_and(|n| n <= max_batch) {
                last.len += r.len;
                continue;
            }
        }
        out.push(*r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(src: u64, dst: u64, len: u64) -> CopyRange {
        CopyRange { src, dst, len }
    }

    #[test]
    fn sixteen_64k_ranges_make_one_mebibyte() {
        let k = 64 * 1024;
        let v: Vec<_> = (0..10_000u64).map(|i| r(i * k, i * k, k)).collect();
        let p = plan(&v, 1 << 20);
        assert_eq!(p.len(), 625);
        assert!(p.iter().all(|b| b.len == 1 << 20));
        assert_eq!(p[1], r(1 << 20, 1 << 20, 1 << 20));
        assert_eq!(p.iter().map(|b| b.len).sum::<u64>(), 10_000 * k);
    }

    #[test]
    fn gaps_on_either_side_break_a_batch() {
        let p = plan(
            &[
                r(0, 0, 10),
                r(10, 10, 10),
                r(20, 40, 10),
                r(40, 50, 10),
                r(50, 60, 5),
            ],
            1000,
        );
        assert_eq!(p, vec![r(0, 0, 20), r(20, 40, 10), r(40, 50, 15)]);
    }

    #[test]
    fn long_ranges_and_empty_ranges() {
        let p = plan(&[r(0, 0, 0), r(0, 0, 5000), r(5000, 5000, 10)], 4096);
        assert_eq!(p, vec![r(0, 0, 5000), r(5000, 5000, 10)]);
        assert!(plan(&[], 4096).is_empty());
    }

    #[test]
    fn total_bytes_are_preserved_for_random_layouts() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..200 {
            let mut v = Vec::new();
            let (mut s, mut d) = (0u64, 0u64);
            for _ in 0..rng.random_range(0..50) {
                let len = rng.random_range(0..5000);
                v.push(r(s, d, len));
                s += len + if rng.random_bool(0.3) { 7 } else { 0 };
                d += len + if rng.random_bool(0.3) { 9 } else { 0 };
            }
            let p = plan(&v, 8192);
            assert_eq!(
                p.iter().map(|b| b.len).sum::<u64>(),
                v.iter().map(|b| b.len).sum::<u64>()
            );
            for x in v.iter().filter(|x| x.len > 0) {
                let n = p
                    .iter()
                    .filter(|b| {
                        b.src <= x.src
                            && x.src + x.len <= b.src + b.len
                            && b.dst + (x.src - b.src) == x.dst
                    })
                    .count();
                assert_eq!(n, 1, "{x:?} not covered once by {p:?}");
            }
        }
    }
}
