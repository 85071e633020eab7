//! Fuzz bodies (hidden from docs). The cargo-fuzz target `fuzz/fuzz_targets/ring_ops.rs` is a
//! one-liner calling [`ops`]; `tests/model.rs` drives [`run`] from proptest.
//!
//! [`run`] applies a sequence of [`RingOp`]s to a real queue pair (both rings, all views open
//! at once, as a worker and an application would hold them) and to a `VecDeque` model, and
//! asserts after every step that they agree: which pushes succeed, which entries come out and
//! in what order, free space, readiness, and that nothing is lost at the end.

use std::collections::VecDeque;

use crate::cqe::Cqe;
use crate::error::PushError;
use crate::opcode::Nop;
use crate::queue::queue_pair;

/// One step of the stateful fuzz / property test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingOp {
    /// App stages one SQE.
    SqPush,
    /// App stages `n` SQEs all-or-nothing.
    SqPushMultiple(u8),
    /// App publishes staged SQEs.
    SqSync,
    /// Worker takes one SQE.
    SqPop,
    /// Worker returns consumed SQ slots.
    SqRelease,
    /// Worker posts a CQE with `try_push` (may come back).
    CqTryPush,
    /// Worker posts a CQE with `push` (pending list on overflow).
    CqPush,
    /// Worker flushes pending and publishes.
    CqSync,
    /// App reaps one CQE.
    CqPop,
    /// App reaps up to `n` CQEs with `fill`.
    CqFill(u8),
    /// App returns reaped CQ slots.
    CqRelease,
    /// Compare space/availability counters.
    Check,
}

/// Decodes fuzzer bytes into a capacity choice and an op sequence, then [`run`]s it.
pub fn ops(data: &[u8]) {
    let Some((&caps, rest)) = data.split_first() else {
        return;
    };
    let mut it = rest.iter().copied();
    let mut seq = Vec::with_capacity(rest.len());
    while let Some(b) = it.next() {
        seq.push(match b % 12 {
            0 => RingOp::SqPush,
            1 => RingOp::SqPushMultiple(it.next().unwrap_or(0) % 9),
            2 => RingOp::SqSync,
            3 => RingOp::SqPop,
            4 => RingOp::SqRelease,
            5 => RingOp::CqTryPush,
            6 => RingOp::CqPush,
            7 => RingOp::CqSync,
            8 => RingOp::CqPop,
            9 => RingOp::CqFill(it.next().unwrap_or(0) % 9),
            10 => RingOp::CqRelease,
            _ => RingOp::Check,
        });
    }
    run(caps & 3, (caps >> 2) & 3, &seq);
}

/// Model of one ring: staged (invisible), published (visible, unread), read-but-unreleased.
#[derive(Default)]
struct Model {
    cap: usize,
    staged: VecDeque<u64>,
    published: VecDeque<u64>,
    unreleased: usize,
}

impl Model {
    fn free(&self) -> usize {
        self.cap - self.staged.len() - self.published.len() - self.unreleased
    }
}

/// Runs `seq` against rings of `2^sq_log2` / `2^cq_log2` entries and a model; panics on any
/// divergence (that is the point).
///
/// # Panics
///
/// When the ring and the model disagree, or `*_log2 > 20`.
#[allow(clippy::too_many_lines)]
pub fn run(sq_log2: u8, cq_log2: u8, seq: &[RingOp]) {
    let (sq_cap, cq_cap) = (1u32 << sq_log2, 1u32 << cq_log2);
    let (mut app, mut worker) = queue_pair(sq_cap, cq_cap, None).expect("valid capacities");
    let mut sq_m = Model {
        cap: sq_cap as usize,
        ..Model::default()
    };
    let mut cq_m = Model {
        cap: cq_cap as usize,
        ..Model::default()
    };
    let mut pending: VecDeque<u64> = VecDeque::new();
    let mut next = 0u64;
    let mut cqe_val = 1u64 << 63;
    let mut cq_reaped: Vec<u64> = Vec::new();
    let mut cq_sent: Vec<u64> = Vec::new();
    {
        let (mut sq, mut cq) = app.split();
        let (mut rd, mut wr) = worker.split();
        let flush = |m: &mut Model, pending: &mut VecDeque<u64>| {
            while m.free() > 0 {
                match pending.pop_front() {
                    Some(v) => m.staged.push_back(v),
                    None => break,
                }
            }
        };
        for op in seq {
            match *op {
                RingOp::SqPush => {
                    let ok = sq.push(&Nop::new().user_data(next).build()).is_ok();
                    assert_eq!(ok, sq_m.free() > 0, "sq push");
                    if ok {
                        sq_m.staged.push_back(next);
                        next += 1;
                    }
                }
                RingOp::SqPushMultiple(n) => {
                    let batch: Vec<_> = (0..u64::from(n))
                        .map(|i| Nop::new().user_data(next + i).build())
                        .collect();
                    let r = sq.push_multiple(&batch);
                    assert_eq!(r.is_ok(), sq_m.free() >= batch.len(), "sq push_multiple");
                    if let Err(e) = r {
                        assert_eq!(
                            e,
                            PushError::Full {
                                needed: batch.len(),
                                available: sq_m.free()
                            }
                        );
                    } else {
                        sq_m.staged.extend(next..next + u64::from(n));
                        next += u64::from(n);
                    }
                }
                RingOp::SqSync => {
                    assert_eq!(sq.sync(), sq_m.staged.len());
                    sq_m.published.extend(sq_m.staged.drain(..));
                }
                RingOp::SqPop => {
                    let got = rd.next().map(|s| s.user_data());
                    let want = sq_m.published.pop_front();
                    assert_eq!(got, want, "sq pop");
                    sq_m.unreleased += usize::from(want.is_some());
                }
                RingOp::SqRelease => {
                    assert_eq!(rd.sync(), sq_m.unreleased);
                    sq_m.unreleased = 0;
                }
                RingOp::CqTryPush => {
                    let c = Cqe::from_raw(cqe_val, 0, 0, 0, 0);
                    let r = wr.try_push(c);
                    assert_eq!(r.is_ok(), cq_m.free() > 0, "cq try_push");
                    match r {
                        Ok(()) => {
                            cq_m.staged.push_back(cqe_val);
                            cq_sent.push(cqe_val);
                        }
                        Err(back) => assert_eq!(back, c, "rejected entry comes back"),
                    }
                    cqe_val += 1;
                }
                RingOp::CqPush => {
                    wr.push(Cqe::from_raw(cqe_val, 0, 0, 0, 0));
                    flush(&mut cq_m, &mut pending);
                    if pending.is_empty() && cq_m.free() > 0 {
                        cq_m.staged.push_back(cqe_val);
                    } else {
                        pending.push_back(cqe_val);
                    }
                    cq_sent.push(cqe_val);
                    cqe_val += 1;
                    assert_eq!(wr.pending_len(), pending.len(), "pending length");
                }
                RingOp::CqSync => {
                    flush(&mut cq_m, &mut pending);
                    assert_eq!(wr.sync(), cq_m.staged.len());
                    cq_m.published.extend(cq_m.staged.drain(..));
                    assert_eq!(wr.pending_len(), pending.len());
                }
                RingOp::CqPop => {
                    let got = cq.next().map(|c| c.user_data());
                    let want = cq_m.published.pop_front();
                    assert_eq!(got, want, "cq pop");
                    cq_reaped.extend(got);
                    cq_m.unreleased += usize::from(want.is_some());
                }
                RingOp::CqFill(n) => {
                    let mut out = [Cqe::default(); 8];
                    let k = cq.fill(out.get_mut(..usize::from(n)).unwrap_or(&mut []));
                    assert_eq!(k, cq_m.published.len().min(usize::from(n)), "fill count");
                    for c in out.iter().take(k) {
                        assert_eq!(
                            Some(c.user_data()),
                            cq_m.published.pop_front(),
                            "fill order"
                        );
                        cq_reaped.push(c.user_data());
                    }
                    cq_m.unreleased += k;
                }
                RingOp::CqRelease => {
                    assert_eq!(cq.sync(), cq_m.unreleased);
                    cq_m.unreleased = 0;
                }
                RingOp::Check => {
                    assert_eq!(sq.space(), sq_m.free(), "sq space");
                    assert_eq!(rd.available(), sq_m.published.len(), "sq available");
                    assert_eq!(wr.space(), cq_m.free(), "cq space");
                    assert_eq!(cq.available(), cq_m.published.len(), "cq available");
                    assert_eq!(sq.staged(), sq_m.staged.len(), "sq staged");
                }
            }
        }
    } // views drop: every side publishes, the writer flushes what fits.

    // Nothing staged or pending may be lost: drain both rings to the end.
    sq_m.published.extend(sq_m.staged.drain(..));
    let rest: Vec<u64> = worker.submissions().map(|s| s.user_data()).collect();
    assert_eq!(rest, Vec::from(sq_m.published), "sq leftovers");
    let mut rounds = 0;
    loop {
        cq_reaped.extend(app.completion().map(|c| c.user_data()));
        if !worker.backpressured() {
            break;
        }
        worker.completions().sync();
        rounds += 1;
        assert!(rounds <= cq_sent.len() + 1, "pending list never drains");
    }
    cq_reaped.extend(app.completion().map(|c| c.user_data()));
    assert_eq!(
        cq_reaped.len(),
        cq_sent.len(),
        "every completion delivered exactly once"
    );
    cq_reaped.sort_unstable();
    cq_sent.sort_unstable();
    assert_eq!(cq_reaped, cq_sent);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_sequences() {
        ops(&[]);
        ops(&[0]);
        ops(&[
            0b0101, 0, 0, 1, 8, 2, 3, 3, 4, 5, 5, 6, 6, 6, 7, 8, 9, 4, 10, 11, 6, 7, 11,
        ]);
        let long: Vec<u8> = (0..2000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        ops(&long);
    }
}
