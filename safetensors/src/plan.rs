//! Range planning: which range-gets fill a buffer that mirrors a span of a file.
//!
//! The loader gives each file one buffer holding its data section. Tensor spans are merged
//! when the gap between neighbours is at most `max_gap` bytes (small tensors travel together:
//! fetching a few gap bytes costs less than a request), and every merged run is cut into reads
//! of at most `max_read` bytes (a large tensor is fetched by several requests in parallel).

/// One range-get: `len` bytes at `file_offset` of the object into `buf_offset` of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRead {
    /// Offset in the object.
    pub file_offset: u64,
    /// Offset in the buffer.
    pub buf_offset: u64,
    /// Bytes (at least 1).
    pub len: u64,
}

/// Plans the reads that fill the buffer mirroring `[base, base + buf_len)` of a file, for
/// `spans` given relative to `base` (`(begin, end)`, any order, within `buf_len`; spans
/// outside it are clipped, empty spans skipped). The reads cover every span byte exactly once,
/// never overlap, stay inside the buffer, are sorted, and each is at most `max_read` bytes
/// (`max_read` 0 is taken as 1).
#[must_use]
pub fn plan_reads(
    base: u64,
    buf_len: u64,
    spans: &[(u64, u64)],
    max_gap: u64,
    max_read: u64,
) -> Vec<RangeRead> {
    let max_read = max_read.max(1);
    let mut sorted: Vec<(u64, u64)> = spans
        .iter()
        .map(|&(b, e)| (b.min(buf_len), e.min(buf_len)))
        .filter(|&(b, e)| b < e)
        .collect();
    sorted.sort_unstable();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for (b, e) in sorted {
        match runs.last_mut() {
            Some(last) if b <= last.1.saturating_add(max_gap) => last.1 = last.1.max(e),
            _ => runs.push((b, e)),
        }
    }
    let mut out = Vec::new();
    for (b, e) in runs {
        let mut at = b;
        while at < e {
            let len = max_read.min(e - at);
            out.push(RangeRead {
                file_offset: base.saturating_add(at),
                buf_offset: at,
                len,
            });
            at += len;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn coalesces_neighbours_and_splits_large_spans() {
        let reads = plan_reads(100, 1000, &[(0, 10), (12, 20), (500, 1000)], 4, 200);
        let got: Vec<_> = reads
            .iter()
            .map(|r| (r.file_offset, r.buf_offset, r.len))
            .collect();
        assert_eq!(
            got,
            [
                (100, 0, 20),
                (600, 500, 200),
                (800, 700, 200),
                (1000, 900, 100)
            ]
        );
        assert!(plan_reads(0, 10, &[(5, 5), (20, 30)], 0, 4).is_empty());
    }

    proptest! {
        #[test]
        fn reads_cover_every_span_byte_within_bounds(
            buf_len in 0u64..5000,
            spans in proptest::collection::vec((0u64..6000, 0u64..6000), 0..20),
            gap in 0u64..100,
            max_read in 0u64..700,
        ) {
            let reads = plan_reads(7, buf_len, &spans, gap, max_read);
            let mut covered = vec![false; buf_len as usize];
            let mut last_end = 0;
            for r in &reads {
                prop_assert!(r.len >= 1 && r.len <= max_read.max(1));
                prop_assert!(r.buf_offset >= last_end, "sorted, disjoint");
                prop_assert!(r.buf_offset + r.len <= buf_len);
                prop_assert_eq!(r.file_offset, r.buf_offset + 7);
                for i in r.buf_offset..r.buf_offset + r.len {
                    covered[i as usize] = true;
                }
                last_end = r.buf_offset + r.len;
            }
            for &(b, e) in &spans {
                for i in b.min(buf_len)..e.min(buf_len) {
                    prop_assert!(covered[i as usize], "byte {} of span ({}, {})", i, b, e);
                }
            }
        }
    }
}
