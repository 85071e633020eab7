//! Which tensors are complete as range-gets land: the bookkeeping behind streaming loads
//! (`hipobj.stream_safetensors`), where a caller takes each tensor as soon as every byte of it
//! is in its destination, while the rest of the model is still arriving.
//!
//! [`Readiness`] is told each range that landed (file, offset in the file's data section,
//! length) and answers the tensors that thereby became complete, each exactly once. Ranges may
//! land in any order and may cover several tensors (neighbours are coalesced) or part of one
//! (large tensors are split); bytes between tensors count for nothing.

use crate::model::Model;

/// A tensor that became complete: its file (index into [`Model::files`]) and its index in
/// that file's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ready {
    /// The file.
    pub file: usize,
    /// The tensor, in the file's header order.
    pub tensor: usize,
}

#[derive(Debug)]
struct FileState {
    /// `(begin, end, tensor index)` by `begin`; empty tensors are left out (ready at once).
    spans: Vec<(u64, u64, usize)>,
    /// Bytes still missing per tensor (header order).
    missing: Vec<u64>,
}

/// The tensors of a model, each waiting for its bytes.
#[derive(Debug)]
pub struct Readiness {
    files: Vec<FileState>,
    /// Tensors not yet reported.
    pending: usize,
}

impl Readiness {
    /// Every tensor of `model` waiting; [`Readiness::take_empty`] reports the empty ones.
    #[must_use]
    pub fn new(model: &Model) -> Self {
        let mut pending = 0;
        let files = model
            .files
            .iter()
            .map(|f| {
                let missing: Vec<u64> = f
                    .header
                    .tensors
                    .iter()
                    .map(|t| t.end.saturating_sub(t.begin))
                    .collect();
                let mut spans: Vec<(u64, u64, usize)> = f
                    .header
                    .tensors
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.end > t.begin)
                    .map(|(i, t)| (t.begin, t.end, i))
                    .collect();
                spans.sort_unstable();
                pending += missing.len();
                FileState { spans, missing }
            })
            .collect();
        Self { files, pending }
    }

    /// Tensors not yet reported.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// The empty tensors (no bytes to wait for), once.
    pub fn take_empty(&mut self) -> Vec<Ready> {
        let mut out = Vec::new();
        for (file, st) in self.files.iter_mut().enumerate() {
            for (tensor, m) in st.missing.iter_mut().enumerate() {
                if *m == 0 && !st.spans.iter().any(|s| s.2 == tensor) {
                    // Mark as reported: an empty tensor never appears in `spans`.
                    *m = u64::MAX;
                    out.push(Ready { file, tensor });
                }
            }
        }
        self.pending -= out.len();
        out
    }

    /// Bytes `offset..offset+len` of `file`'s data section landed: the tensors that are now
    /// complete. A range reported twice (or overlapping one reported before) must not be: the
    /// caller reports each successful range-get once, and the loader's reads never overlap.
    pub fn land(&mut self, file: usize, offset: u64, len: u64) -> Vec<Ready> {
        let mut out = Vec::new();
        let Some(st) = self.files.get_mut(file) else {
            return out;
        };
        let end = offset.saturating_add(len);
        // The first tensor that may overlap: the last one beginning at or before `offset`.
        let start = st
            .spans
            .partition_point(|s| s.0 <= offset)
            .saturating_sub(1);
        for &(b, e, i) in st.spans.iter().skip(start) {
            if b >= end {
                break;
            }
            let overlap = e.min(end).saturating_sub(b.max(offset));
            if overlap == 0 {
                continue;
            }
            if let Some(m) = st.missing.get_mut(i)
                && *m != u64::MAX
            {
                *m = m.saturating_sub(overlap);
                if *m == 0 {
                    *m = u64::MAX;
                    out.push(Ready { file, tensor: i });
                }
            }
        }
        self.pending -= out.len();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::model_of;

    #[test]
    fn a_tensor_is_ready_once_all_its_bytes_landed_in_any_order() {
        // File 0: a [0,100), b [100,100) (empty), c [100,350); file 1: d [0,40).
        let model = model_of(&[
            &[("a", 0, 100), ("b", 100, 100), ("c", 100, 350)],
            &[("d", 0, 40)],
        ]);
        let mut r = Readiness::new(&model);
        assert_eq!(r.pending(), 4);
        assert_eq!(r.take_empty(), vec![Ready { file: 0, tensor: 1 }]);
        assert_eq!(r.take_empty(), vec![], "reported once");
        // c arrives in two pieces, the second first; a and the start of c in one range.
        assert_eq!(r.land(0, 200, 150), vec![]);
        assert_eq!(
            r.land(0, 0, 200),
            vec![Ready { file: 0, tensor: 0 }, Ready { file: 0, tensor: 2 }]
        );
        assert_eq!(r.land(1, 0, 39), vec![]);
        assert_eq!(r.land(1, 39, 1), vec![Ready { file: 1, tensor: 0 }]);
        assert_eq!(r.pending(), 0);
        // Unknown files and ranges past every tensor change nothing.
        assert_eq!(r.land(7, 0, 10), vec![]);
        assert_eq!(r.land(0, 1000, 10), vec![]);
    }

    #[test]
    fn a_range_in_the_middle_of_a_long_run_finds_its_tensors() {
        let names: Vec<String> = (0..100).map(|i| format!("t{i}")).collect();
        let spec: Vec<(&str, u64, u64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i as u64 * 10, i as u64 * 10 + 10))
            .collect();
        let model = model_of(&[&spec]);
        let mut r = Readiness::new(&model);
        assert_eq!(
            r.land(0, 505, 20),
            vec![Ready {
                file: 0,
                tensor: 51
            }]
        );
        assert_eq!(
            r.land(0, 500, 5),
            vec![Ready {
                file: 0,
                tensor: 50
            }]
        );
        assert_eq!(
            r.land(0, 525, 5),
            vec![Ready {
                file: 0,
                tensor: 52
            }]
        );
        assert_eq!(r.pending(), 97);
    }
}
