//! Striping: a large transfer on memory bound to several NICs, split into chunks that run on
//! workers of different NICs, joined back into one completion.
//!
//! RangeGet: the worker that drains a RangeGet of at least [`StripeConfig::threshold`] bytes
//! asks [`nic_groups`] which NICs it may spread over (policy [`Stripe`]); with two or more, it
//! [`split`]s the operation into consecutive chunks of [`StripeConfig::chunk`] bytes, each an
//! ordinary RangeGet with its own lease on its part of the destination, handed round robin to
//! a worker of each NIC. The chunks carry the parent's tag (a Cancel of the tag finds them),
//! deadline and retry flags. Their completions go back to the queue's owner, where [`Joins`]
//! counts them: the parent completes once, when the last chunk has landed, with the total
//! byte count, or with the error of the first chunk that failed (the others are waited for,
//! so no chunk still writes the buffer once the parent has completed).
//!
//! Whole-object GET ([`get`]): sized by a HEAD, then striped as a RangeGet of the whole
//! object. PUT ([`put`]): an engine-driven multipart upload whose parts are the chunks.
//! Multipart steps the application drives itself are not striped.

use std::collections::HashMap;

mod get;
mod put;
pub(crate) use get::{AfterHead, PendingGet, wants_get_split};
pub(crate) use put::{Next as PutNext, Place as PutPlace, StripedPut, wants_put_split};

use ring_api::{Cqe, ErrorClass, ErrorCode, cqe_flags};

use crate::inflight::{InFlight, OpKind};
use crate::nic_plan::PlacementPlan;

/// Default smallest transfer that is striped: 8 MiB.
pub const DEFAULT_STRIPE_THRESHOLD: u64 = 8 << 20;
/// Default chunk size: 4 MiB (large enough that a request's fixed cost is small next to its
/// transfer, small enough that a 64 MiB read keeps every NIC of an 8-rail tier busy).
pub const DEFAULT_STRIPE_CHUNK: u64 = 4 << 20;

/// Which NICs a large transfer is striped across ([`crate::EngineBuilder::stripe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Stripe {
    /// Never split an operation.
    Off,
    /// Across the NICs the registration is bound to: every usable NIC of its best PCIe
    /// distance tier (GPU memory) or of its NUMA node (host memory). Unbound memory and
    /// memory bound to one NIC are not split.
    #[default]
    BestTier,
    /// Across every NIC some worker of the engine serves, whatever the registration's
    /// binding (farther NICs included).
    All,
}

/// The engine's striping settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StripeConfig {
    pub(crate) policy: Stripe,
    /// Smallest transfer (bytes) that is split.
    pub(crate) threshold: u64,
    /// Bytes per chunk (the last may be shorter); at least 1.
    pub(crate) chunk: u64,
}

impl Default for StripeConfig {
    fn default() -> Self {
        Self {
            policy: Stripe::default(),
            threshold: DEFAULT_STRIPE_THRESHOLD,
            chunk: DEFAULT_STRIPE_CHUNK,
        }
    }
}

/// The workers of each NIC an operation on memory bound to workers `bound` may be striped
/// across (one group per NIC, in worker order); empty when it is not to be striped (policy
/// `Off`, fewer than two NICs).
pub(crate) fn nic_groups(
    cfg: &StripeConfig,
    bound: Option<&[usize]>,
    plan: &PlacementPlan,
    eligible: &[usize],
) -> Vec<Vec<usize>> {
    let among = match (cfg.policy, bound) {
        (Stripe::Off, _) | (Stripe::BestTier, None) => return Vec::new(),
        (Stripe::BestTier, Some(b)) => b,
        (Stripe::All, _) => eligible,
    };
    let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
    for &w in among {
        let Some(nic) = plan.workers().get(w).and_then(|p| p.nic.as_deref()) else {
            continue;
        };
        match groups.iter_mut().find(|(n, _)| *n == nic) {
            Some((_, ws)) => ws.push(w),
            None => groups.push((nic, vec![w])),
        }
    }
    if groups.len() < 2 {
        return Vec::new();
    }
    groups.into_iter().map(|(_, ws)| ws).collect()
}

/// What [`split`] made of an operation.
// Moved straight out of `split` once per large RangeGet (as `dispatch::Dispatch` is per
// operation); boxing the whole operation would allocate for every one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Split {
    /// Not to be split: the operation as it was.
    Whole(InFlight),
    /// Its chunks, in order (their `stripe` still unset).
    Chunks(Vec<InFlight>),
}

/// Whether `op` is one [`split`] would cut: a RangeGet (not a multipart step) of at least
/// `cfg.threshold` bytes and more than one chunk, with striping on. Cheap: the worker asks it
/// before looking for NICs.
pub(crate) fn wants_split(op: &InFlight, cfg: &StripeConfig) -> bool {
    let len = op.buf_len();
    cfg.policy != Stripe::Off
        && matches!(op.kind, OpKind::RangeGet { .. })
        && op.multipart.is_none()
        && len >= cfg.threshold
        && len > cfg.chunk.max(1)
}

/// Splits `op` into chunks when it is a RangeGet of at least `cfg.threshold` bytes longer
/// than one chunk; otherwise (or when its lease cannot be split) hands it back whole.
pub(crate) fn split(op: InFlight, cfg: &StripeConfig) -> Split {
    let OpKind::RangeGet { offset } = op.kind else {
        return Split::Whole(op);
    };
    if !wants_split(&op, cfg) {
        return Split::Whole(op);
    }
    let chunk = cfg.chunk.max(1);
    let mut op = op;
    let Some(lease) = op.buf.take() else {
        return Split::Whole(op);
    };
    let parts = match lease.split(chunk) {
        Ok(parts) => parts,
        Err(lease) => {
            op.buf = Some(lease);
            return Split::Whole(op);
        }
    };
    let mut at = 0;
    let mut chunks = Vec::with_capacity(parts.len());
    for part in parts {
        let chunk_offset = offset.saturating_add(at);
        at += part.len();
        let kind = OpKind::RangeGet {
            offset: chunk_offset,
        };
        chunks.push(InFlight {
            buf: Some(part),
            deadline: op.deadline,
            may_retry: op.may_retry,
            phase: op.phase,
            // The operation's submission and start; each chunk records its own first byte.
            times: op.times.clone(),
            ..InFlight::fresh(
                op.queue,
                op.user_data,
                kind,
                std::sync::Arc::clone(&op.object),
            )
        });
    }
    Split::Chunks(chunks)
}

/// Names a striped operation's join on its queue's owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct JoinId(u64);

/// One striped operation waiting for its chunks.
#[derive(Debug)]
struct Join {
    /// Engine-wide id of its queue.
    queue: u64,
    user_data: u64,
    /// Chunks still to complete.
    left: usize,
    /// Bytes landed so far.
    bytes: u64,
    /// The success whose path and dialect are the parent's ([`reporting`]).
    first: Option<Cqe>,
    /// The first object size a chunk reported (chunks over hipobj-rc-v2 report none).
    seen_size: Option<u64>,
    /// The object size every chunk must report (a whole-object GET's, from its HEAD).
    size: Option<u64>,
    /// Every chunk so far was proven by a server checksum.
    verified: bool,
    /// Some chunk was retried.
    retried: bool,
    /// The first failure.
    error: Option<Cqe>,
    /// The chunks' times merged so far (timed queues only; see `Joins::merge_times`).
    times: Option<ring_api::OpTimes>,
}

/// What a chunk's completion did to its join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Landed {
    /// Other chunks are still running.
    Waiting,
    /// This chunk failed first and others are still running: the parent will fail with its
    /// error, so the others should be stopped.
    FirstFailure,
    /// That was the last chunk: the parent's completion.
    Done(Cqe),
}

/// The striped operations of one worker's queues.
#[derive(Debug, Default)]
pub(crate) struct Joins {
    next: u64,
    open: HashMap<JoinId, Join>,
    /// Striped PUTs (engine-driven multipart uploads, [`put`]).
    puts: HashMap<JoinId, StripedPut>,
    /// Whole-object GETs waiting for the HEAD that sizes them ([`get`]).
    gets: HashMap<JoinId, PendingGet>,
}

impl Joins {
    fn next_id(&mut self) -> JoinId {
        self.next = self.next.wrapping_add(1);
        JoinId(self.next)
    }

    /// Keeps a striped PUT under a new id (which its steps carry).
    pub(crate) fn open_put(&mut self, put: StripedPut) -> JoinId {
        let id = self.next_id();
        self.puts.insert(id, put);
        id
    }

    /// The striped PUT `id`, if it is one still in progress.
    pub(crate) fn put_mut(&mut self, id: JoinId) -> Option<&mut StripedPut> {
        self.puts.get_mut(&id)
    }

    /// Whether `id` names a striped PUT (rather than a chunk join).
    pub(crate) fn is_put(&self, id: JoinId) -> bool {
        self.puts.contains_key(&id)
    }

    /// Keeps a whole-object GET waiting for its HEAD under a new id (which the HEAD carries).
    pub(crate) fn open_get(&mut self, get: PendingGet) -> JoinId {
        let id = self.next_id();
        self.gets.insert(id, get);
        id
    }

    /// Whether `id` names a GET waiting for its HEAD.
    pub(crate) fn is_get(&self, id: JoinId) -> bool {
        self.gets.contains_key(&id)
    }

    /// Takes the GET waiting under `id` (its HEAD completed).
    pub(crate) fn take_get(&mut self, id: JoinId) -> Option<PendingGet> {
        self.gets.remove(&id)
    }

    /// Forgets the finished striped PUT `id`.
    pub(crate) fn close_put(&mut self, id: JoinId) {
        self.puts.remove(&id);
    }

    /// Starts a join of `chunks` chunks for the operation `user_data` of queue `queue`.
    #[cfg(test)]
    pub(crate) fn open(&mut self, queue: u64, user_data: u64, chunks: usize) -> JoinId {
        self.open_sized(queue, user_data, chunks, None)
    }

    /// As [`Joins::open`], every chunk to report object size `size` when it is `Some`.
    pub(crate) fn open_sized(
        &mut self,
        queue: u64,
        user_data: u64,
        chunks: usize,
        size: Option<u64>,
    ) -> JoinId {
        let id = self.next_id();
        self.open.insert(
            id,
            Join {
                queue,
                user_data,
                left: chunks,
                bytes: 0,
                first: None,
                seen_size: None,
                size,
                verified: true,
                retried: false,
                error: None,
                times: None,
            },
        );
        id
    }

    /// Records a chunk's completion (of a join that is gone: [`Landed::Waiting`]).
    pub(crate) fn land(&mut self, id: JoinId, cqe: Cqe) -> Landed {
        let Some(j) = self.open.get_mut(&id) else {
            return Landed::Waiting;
        };
        let failed_before = j.error.is_some();
        j.left = j.left.saturating_sub(1);
        j.retried |= cqe.retried();
        if cqe.is_ok() {
            j.bytes = j.bytes.saturating_add(cqe.bytes());
            j.verified &= cqe.verified();
            // The object size a chunk reports (`aux`; 0 where its path names none, as
            // hipobj-rc-v2 does) must agree with the HEAD's and with every other chunk's:
            // otherwise the object changed while it was read, and the buffer may hold bytes
            // of two versions.
            let reported = cqe.aux();
            if reported != 0 {
                if j.size.or(j.seen_size).is_some_and(|s| s != reported) && j.error.is_none() {
                    j.error = Some(Cqe::error(
                        j.user_data,
                        ErrorCode::Integrity,
                        ErrorClass::Integrity,
                    ));
                }
                j.seen_size.get_or_insert(reported);
            }
            reporting(&mut j.first, cqe);
        } else if j.error.is_none() {
            j.error = Some(cqe);
        }
        if j.left > 0 {
            return if j.error.is_some() && !failed_before {
                Landed::FirstFailure
            } else {
                Landed::Waiting
            };
        }
        let Some(j) = self.open.remove(&id) else {
            return Landed::Waiting;
        };
        let cqe = match (j.error, j.first) {
            (Some(e), _) => e,
            (None, Some(f)) => {
                let mut flags = f.flags() & !cqe_flags::VERIFIED;
                if j.verified {
                    flags |= cqe_flags::VERIFIED;
                }
                let ok = Cqe::success(j.user_data, j.bytes, ring_api::DataPath::None);
                let size = j.size.or(j.seen_size).unwrap_or(f.aux());
                Cqe::from_raw(j.user_data, ok.result(), flags, j.bytes, size)
            }
            (None, None) => Cqe::error(j.user_data, ErrorCode::Io, ErrorClass::Local),
        };
        Landed::Done(if j.retried { cqe.with_retried() } else { cqe })
    }

    /// Folds a chunk's times into its join's (call before [`Joins::land`]) and returns the
    /// merge so far: the operation's submission and start, the earliest first byte, the latest
    /// completion. A join that is gone gives `t` back.
    pub(crate) fn merge_times(&mut self, id: JoinId, t: ring_api::OpTimes) -> ring_api::OpTimes {
        let Some(j) = self.open.get_mut(&id) else {
            return t;
        };
        let merged = crate::op_times::merge_chunk(j.times, t);
        j.times = Some(merged);
        merged
    }

    /// Forgets the joins of the queue with id `queue` (it is gone), returning the uploads its
    /// striped PUTs had open (to be aborted).
    pub(crate) fn forget_queue(
        &mut self,
        queue: u64,
    ) -> Vec<(
        crate::inflight::QueueRef,
        std::sync::Arc<ring_api::ObjectName>,
        ring_api::UploadHandle,
        std::sync::Arc<str>,
    )> {
        self.open.retain(|_, j| j.queue != queue);
        self.gets.retain(|_, g| g.queue().id != queue);
        let mut open = Vec::new();
        self.puts.retain(|_, p| {
            if p.queue.id != queue {
                return true;
            }
            if let Some((o, h, id)) = p.open_upload() {
                open.push((p.queue, o, h, id));
            }
            false
        });
        open
    }
}

/// Keeps in `first` the success a striped read or PUT reports its path and dialect from: the
/// first chunk's (part's), unless one went over HTTP (a per-request fallback): the first such
/// one is then reported, so a fallback is never hidden behind an RDMA chunk that landed first.
fn reporting(first: &mut Option<Cqe>, cqe: Cqe) {
    if cqe.path() == Some(ring_api::DataPath::Http) && first.is_none_or(|f| f.path() != cqe.path())
    {
        *first = Some(cqe);
    } else {
        first.get_or_insert(cqe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring_api::DataPath;

    fn done(l: Landed) -> Cqe {
        match l {
            Landed::Done(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn policies_choose_the_bound_nics_every_nic_or_none() {
        // Two sockets, one NIC each: one worker per NIC.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../numa/fixtures/two-socket-2nic");
        let t = numa::Topology::from_root(root).unwrap();
        let allowed: Vec<u32> = t.online_cpus.iter().collect();
        let plan = PlacementPlan::new(Some(t), &crate::Placement::Auto, 1, &[], &allowed).unwrap();
        let nics: Vec<_> = plan.workers().iter().map(|w| w.nic.is_some()).collect();
        assert_eq!(nics, [true, true]);
        let all = [0, 1];
        let cfg = |policy| StripeConfig {
            policy,
            ..StripeConfig::default()
        };
        // Bound to one NIC: nothing to stripe across, except under `All`.
        assert!(nic_groups(&cfg(Stripe::BestTier), Some(&[1]), &plan, &all).is_empty());
        assert_eq!(
            nic_groups(&cfg(Stripe::All), Some(&[1]), &plan, &all),
            [vec![0], vec![1]]
        );
        // Bound to both: one group per NIC; unbound memory is not striped by `BestTier`.
        assert_eq!(
            nic_groups(&cfg(Stripe::BestTier), Some(&[0, 1]), &plan, &all),
            [vec![0], vec![1]]
        );
        assert!(nic_groups(&cfg(Stripe::BestTier), None, &plan, &all).is_empty());
        assert!(nic_groups(&cfg(Stripe::Off), Some(&[0, 1]), &plan, &all).is_empty());
    }

    #[test]
    fn the_parent_completes_once_with_the_total_or_the_first_error() {
        let mut j = Joins::default();
        let id = j.open(7, 42, 3);
        let ok = |n| {
            Cqe::success(42, n, DataPath::Http)
                .with_aux(100)
                .with_verified()
        };
        assert_eq!(j.land(id, ok(40)), Landed::Waiting);
        assert_eq!(j.land(id, ok(40)), Landed::Waiting);
        let c = done(j.land(id, ok(20)));
        assert!(c.is_ok() && c.verified());
        assert_eq!((c.user_data(), c.bytes(), c.aux()), (42, 100, 100));
        assert_eq!(c.path(), Some(DataPath::Http));
        assert_eq!(
            j.land(id, ok(1)),
            Landed::Waiting,
            "a finished join completes nothing"
        );

        // The first failure asks for the others to stop, once; the parent carries it.
        let id = j.open(7, 43, 3);
        let err = Cqe::error(43, ErrorCode::RangeNotSatisfiable, ErrorClass::Client);
        assert_eq!(j.land(id, err), Landed::FirstFailure);
        let cancelled = Cqe::error(43, ErrorCode::Cancelled, ErrorClass::Cancelled);
        assert_eq!(j.land(id, cancelled), Landed::Waiting);
        let c = done(j.land(id, ok(1)));
        assert_eq!(c.error_code(), Some(ErrorCode::RangeNotSatisfiable));
        assert_eq!(c.user_data(), 43);

        // One chunk unverified: the parent is not verified. Sizes differ: integrity error.
        let id = j.open(7, 44, 2);
        j.land(id, ok(1));
        let c = done(j.land(id, Cqe::success(42, 1, DataPath::Http).with_aux(100)));
        assert!(c.is_ok() && !c.verified());
        let id = j.open(7, 45, 2);
        j.land(id, ok(1));
        let c = done(j.land(id, ok(1).with_aux(200)));
        assert_eq!(c.error_code(), Some(ErrorCode::Integrity));

        let id = j.open(9, 46, 2);
        j.forget_queue(9);
        assert_eq!(j.land(id, ok(1)), Landed::Waiting);
    }

    /// A chunk that fell back to HTTP is what the parent reports, even when an RDMA chunk
    /// landed first: a fallback is never hidden.
    #[test]
    fn a_chunk_over_http_is_the_parents_path() {
        let mut j = Joins::default();
        let id = j.open(7, 50, 3);
        let over = |path| Cqe::success(50, 10, path).with_aux(100);
        assert_eq!(j.land(id, over(DataPath::RdmaVerbs)), Landed::Waiting);
        assert_eq!(j.land(id, over(DataPath::Http)), Landed::Waiting);
        let c = done(j.land(id, over(DataPath::RdmaVerbs)));
        assert!(c.is_ok());
        assert_eq!(c.path(), Some(DataPath::Http));
        let id = j.open(7, 51, 2);
        j.land(id, over(DataPath::RdmaVerbs));
        let c = done(j.land(id, over(DataPath::RdmaVerbs)));
        assert_eq!(c.path(), Some(DataPath::RdmaVerbs));
    }

    /// Of several chunks (or PUT parts) over HTTP the first is reported, by reads and PUTs
    /// alike; without one, the first to land.
    #[test]
    fn the_first_fallback_is_reported() {
        let mut first = None;
        for (ud, path) in [
            (1, DataPath::RdmaSoft),
            (2, DataPath::Http),
            (3, DataPath::Http),
            (4, DataPath::RdmaSoft),
        ] {
            reporting(&mut first, Cqe::success(ud, 10, path));
        }
        assert_eq!(first.map(|c| c.user_data()), Some(2));
        let mut first = None;
        for ud in [5, 6] {
            reporting(&mut first, Cqe::success(ud, 10, DataPath::RdmaVerbs));
        }
        assert_eq!(first.map(|c| c.user_data()), Some(5));
    }

    /// Chunks whose path names no object size (hipobj-rc-v2: `aux` 0) do not fail the size
    /// checks; a chunk that names one is still held to the others' and the HEAD's.
    #[test]
    fn chunks_without_a_size_pass_and_sizes_that_differ_fail() {
        let mut j = Joins::default();
        let v2 = Cqe::success(60, 10, DataPath::RdmaVerbs);
        let http = |size| Cqe::success(60, 10, DataPath::Http).with_aux(size);
        let id = j.open_sized(7, 60, 3, Some(100));
        j.land(id, v2);
        j.land(id, http(100));
        let c = done(j.land(id, v2));
        assert!(c.is_ok(), "{c:?}");
        assert_eq!(c.aux(), 100, "the HEAD's size");
        let id = j.open_sized(7, 61, 2, Some(100));
        j.land(id, v2);
        let c = done(j.land(id, http(200)));
        assert_eq!(c.error_code(), Some(ErrorCode::Integrity));
        let id = j.open(7, 62, 3);
        j.land(id, http(100));
        j.land(id, v2);
        let c = done(j.land(id, http(200)));
        assert_eq!(c.error_code(), Some(ErrorCode::Integrity));
    }
}
