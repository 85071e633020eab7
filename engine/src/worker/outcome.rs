//! Turning attempts into completions: starting ready operations, retries with backoff,
//! deadlines, attempt timeouts and cancellation.

use std::time::Instant;

use ring_api::{Cqe, ErrorClass, ErrorCode};

use super::event_loop::Worker;
use super::handoff::Msg;
use super::lost_complete;
use super::stager;
use crate::fabric::{AUX_VERIFIED, Outcome, Retry};
use crate::inflight::{InFlight, MultipartOp, OpKey, Phase, QueueRef};
use crate::memory::MemoryTier;
use crate::memory::bounce::{Acquire, BounceRange};
use crate::op_times::Stamps;
use crate::timers::TimerKind;

/// Immediate retries allowed after stale keep-alive connections, per operation.
const MAX_FREE_RETRIES: u8 = 3;
/// Uncounted waits after a refusal for load ([`Retry::Throttled`]), per operation; then such
/// refusals count as attempts like any other.
const MAX_THROTTLED_WAITS: u8 = 8;

impl Worker {
    /// Starts ready operations while the fabric has capacity.
    pub(super) fn start_ready(&mut self, now: Instant) -> bool {
        let mut started = self.admit_waiting();
        while let Some(&key) = self.ready.front() {
            let Some(op) = self.ops.get_mut(key) else {
                self.ready.pop_front();
                continue;
            };
            if op.phase != Phase::Ready {
                self.ready.pop_front();
                continue;
            }
            if op.deadline.is_some_and(|d| d <= now) {
                self.ready.pop_front();
                self.finish(
                    key,
                    Cqe::error(0, ErrorCode::TimedOut, ErrorClass::Deadline),
                );
                started = true;
                continue;
            }
            // Device memory: take the operation's bounce range first (or queue for one).
            if op.buf.as_ref().map(crate::memory::LeaseGuard::tier)
                == Some(MemoryTier::DeviceStaged { staged: false })
            {
                self.ready.pop_front();
                self.take_bounce(key);
                started = true;
                continue;
            }
            // A PUT from device memory: copy VRAM → bounce first (once per operation).
            if let Some(buf) = op.buf.as_ref()
                && !buf.is_exclusive()
                && !buf.is_staged_out()
                && let Some(span) = buf.device_span()
            {
                self.ready.pop_front();
                let lease = buf.share();
                match (self.shared.gpu.as_ref(), lease) {
                    (Some(gpu), Ok(lease)) => {
                        stager::with(gpu, |s| s.stage_out(key, span, lease));
                    }
                    (None, _) => self.finish(
                        key,
                        Cqe::error(0, ErrorCode::Unsupported, ErrorClass::Local),
                    ),
                    (_, Err(_)) => {
                        self.finish(key, Cqe::error(0, ErrorCode::Busy, ErrorClass::Local));
                    }
                }
                started = true;
                continue;
            }
            // The RDMA client marks an attempt whose window is a GPUDirect dmabuf.
            if let Some(buf) = op.buf.as_ref() {
                buf.set_landed_direct(false);
            }
            op.attempts += 1;
            op.landed_crc64.set(None);
            if let Some(t) = &op.times {
                t.new_attempt();
            }
            let attempt = op.attempts;
            if !self
                .fabric
                .start(key, op, self.poll.registry(), &mut self.done)
            {
                if let Some(op) = self.ops.get_mut(key) {
                    op.attempts -= 1;
                }
                break;
            }
            self.ready.pop_front();
            self.timers.push(
                now + self.shared.attempt_timeout,
                key,
                TimerKind::Attempt(attempt),
            );
            started = true;
        }
        if self.timers.len() > 4096 + 4 * self.ops.len() {
            let ops = &self.ops;
            self.timers.compact(|k| ops.get(k).is_some());
        }
        started
    }

    /// Gives the operation `key` (on device memory, without a bounce range) its range from
    /// the engine's pool and readies it again, or queues it for one (FIFO; the pool wakes
    /// this worker when it may retry), or fails it when it can never fit.
    fn take_bounce(&mut self, key: OpKey) {
        let Some(gpu) = self.shared.gpu.as_ref() else {
            self.finish(
                key,
                Cqe::error(0, ErrorCode::Unsupported, ErrorClass::Local),
            );
            return;
        };
        let Some(len) = self.ops.get(key).map(InFlight::buf_len) else {
            return;
        };
        // This worker's own waker (always present: the crew lists every worker).
        let Some(waker) = self
            .crew
            .peers
            .get(self.index)
            .map(|p| std::sync::Arc::clone(&p.waker))
        else {
            self.finish(key, Cqe::error(0, ErrorCode::Io, ErrorClass::Local));
            return;
        };
        match gpu.pool.acquire(len, &waker) {
            Acquire::Got(range) => self.attach_bounce(key, range, true),
            Acquire::Wait(ticket) => self.waiting.push_back((key, ticket)),
            Acquire::TooLarge => {
                self.finish(key, Cqe::error(0, ErrorCode::TooLarge, ErrorClass::Local));
            }
            Acquire::Failed(e) => {
                gpu.stats.error(e);
                self.finish(key, Cqe::error(0, ErrorCode::Io, ErrorClass::Local));
            }
        }
    }

    /// Hands `range` to operation `key` and readies it (at the front when `now`, so it starts
    /// in this pass of `start_ready`).
    fn attach_bounce(&mut self, key: OpKey, range: BounceRange, now: bool) {
        let attached = self
            .ops
            .get_mut(key)
            .and_then(|op| op.buf.as_mut())
            .map(|b| b.attach_bounce(range).is_ok());
        match attached {
            Some(true) if now => self.ready.push_front(key),
            Some(true) => self.ready.push_back(key),
            // Not a device lease without a range (impossible by construction): fail it rather
            // than run it without host memory.
            Some(false) => self.finish(key, Cqe::error(0, ErrorCode::Io, ErrorClass::Local)),
            None => {}
        }
    }

    /// Serves this worker's operations queued for bounce memory, oldest first, while the pool
    /// has room for the oldest ticket. Returns whether any was served.
    fn admit_waiting(&mut self) -> bool {
        if self.waiting.is_empty() {
            return false;
        }
        let Some(pool) = self
            .shared
            .gpu
            .as_ref()
            .map(|g| std::sync::Arc::clone(&g.pool))
        else {
            return false;
        };
        let mut any = false;
        while let Some((key, ticket)) = self.waiting.front_mut() {
            let key = *key;
            let Some(len) = self.ops.get(key).map(InFlight::buf_len) else {
                // Gone (its ticket leaves the queue as it drops).
                self.waiting.pop_front();
                continue;
            };
            let Some(range) = pool.retry(ticket, len) else {
                break;
            };
            self.waiting.pop_front();
            self.attach_bounce(key, range, false);
            any = true;
        }
        any
    }

    /// Drops `key`'s place in the bounce queue, if it has one (it completed or was aborted).
    pub(super) fn forget_wait(&mut self, key: OpKey) {
        if !self.waiting.is_empty() {
            self.waiting.retain(|(k, _)| *k != key);
        }
    }

    /// Applies the outcomes fabrics reported.
    ///
    /// Then drives the GPU stager: queues the copies of device operations that finished or
    /// are about to start this turn, posts the completions of GETs whose copy into VRAM has
    /// finished, and readies PUTs whose bytes have come out of VRAM.
    pub(super) fn settle_done(&mut self, now: Instant) -> bool {
        let mut progress = false;
        if !self.done.is_empty() {
            let done = std::mem::take(&mut self.done);
            for &(key, outcome) in &done {
                self.settle(key, outcome, now);
            }
            self.done = done;
            self.done.clear();
            progress = true;
        }
        progress | self.drive_stager()
    }

    /// One non-blocking round of the GPU stager (nothing to do, and no cost beyond a
    /// thread-local lookup, when no device operation has been seen on this worker).
    ///
    /// While copies are in flight the worker keeps turning to query their events
    /// ([`Worker::stager_pending`] makes the event loop poll without sleeping).
    fn drive_stager(&mut self) -> bool {
        let Some(gpu) = self.shared.gpu.as_ref() else {
            return false;
        };
        let mut fin = stager::Finished::default();
        let state = stager::with_existing(|s| {
            s.flush(&gpu.stats, &mut fin.done);
            s.poll_briefly(&gpu.stats, &mut fin);
            // A batch that finished frees room for GETs that waited.
            s.flush(&gpu.stats, &mut fin.done);
        });
        if state.is_none() {
            return false;
        }
        let progress = !fin.is_empty();
        for (op, cqe) in fin.done {
            // The lease (and with it the bounce range) is released before the completion is
            // visible, as in `finish`.
            self.complete_op(op, cqe);
        }
        for key in fin.staged_out {
            if let Some(op) = self.ops.get(key)
                && op.phase == Phase::Ready
            {
                if let Some(buf) = op.buf.as_ref() {
                    buf.mark_staged_out();
                }
                self.ready.push_back(key);
            }
        }
        for key in fin.failed_out {
            self.finish(key, Cqe::error(0, ErrorCode::Io, ErrorClass::Local));
        }
        progress
    }

    /// Whether the GPU stager has copies in flight (the event loop then polls instead of
    /// sleeping, so their completions are posted as soon as the copies finish).
    pub(super) fn stager_pending(&self) -> bool {
        self.shared.gpu.is_some() && stager::with_existing(|s| s.pending()).unwrap_or(false)
    }

    /// A GET into device memory whose bytes are in bounce memory: instead of completing it,
    /// hand it to the stager, which completes it once the copy into VRAM has finished.
    /// Returns the operation back when it is not such a GET.
    fn stage_in(&mut self, key: OpKey, cqe: Cqe) -> Option<Cqe> {
        let buf = self.ops.get(key).and_then(|op| op.buf.as_ref());
        // GPUDirect: the RDMA device wrote the bytes into VRAM; nothing to copy.
        let rdma = matches!(
            cqe.path(),
            Some(ring_api::DataPath::RdmaSoft | ring_api::DataPath::RdmaVerbs)
        );
        if rdma && buf.is_some_and(|b| b.landed_direct()) {
            self.shared.gpu_direct.stats.landed(cqe.bytes());
            return Some(cqe);
        }
        let span = buf
            .filter(|b| b.is_exclusive())
            .and_then(|b| b.device_span());
        let Some(mut span) = span else {
            return Some(cqe);
        };
        let Some(gpu) = self.shared.gpu.as_ref() else {
            return Some(Cqe::error(0, ErrorCode::Unsupported, ErrorClass::Local));
        };
        let op = self.ops.remove(key)?;
        // Only the bytes received are copied (a whole-object GET may fill less than its buffer).
        span.len = span.len.min(cqe.bytes());
        let cqe = final_cqe(&op, cqe);
        stager::with(gpu, |s| s.land(span, op, cqe));
        None
    }

    fn settle(&mut self, key: OpKey, outcome: Outcome, now: Instant) {
        let Some(op) = self.ops.get_mut(key) else {
            return;
        };
        match outcome {
            Outcome::Done { bytes, aux } => {
                self.shared.retry_budget.on_success();
                // What we sent as an UploadPart, whatever path moved it: Complete checks
                // the object against it.
                if let Some((upload, part)) = op.part_handle()
                    && let Some(crc) = op.source_crc64().and_then(decode_crc64nvme)
                {
                    let _ = self
                        .shared
                        .uploads
                        .record_part_source(upload, part, op.buf_len(), crc);
                }
                // A CompleteMultipart whose answer named no checksum: HEAD the object.
                if let Some(expect) = op.verify_stored.take() {
                    op.multipart = Some(MultipartOp::VerifyStored { expect, lost: None });
                    op.phase = Phase::Ready;
                    self.ready.push_front(key);
                    return;
                }
                lost_complete::completed(op);
                let (path, dialect) = self.fabric.path_of(key);
                // The proof bit travels in `aux` inside the engine; transfers and Complete
                // report it.
                let mut cqe = Cqe::success(0, bytes, path)
                    .with_aux(aux & !AUX_VERIFIED)
                    .with_dialect(dialect);
                if aux & AUX_VERIFIED != 0 && op.reports_proof() {
                    cqe = cqe.with_verified();
                }
                if let Some(crc) = op.take_crc64(bytes, cqe.verified()) {
                    cqe = cqe.with_crc64(crc);
                }
                if let Some(cqe) = self.stage_in(key, cqe) {
                    self.finish(key, cqe);
                }
            }
            Outcome::Failed { code, class, retry } => {
                op.phase = Phase::Backoff;
                if retry == Retry::Free && op.may_retry && op.free_retries < MAX_FREE_RETRIES {
                    op.free_retries += 1;
                    op.attempts = op.attempts.saturating_sub(1);
                    op.phase = Phase::Ready;
                    self.ready.push_front(key);
                    return;
                }
                // Refused for load: the transport narrowed its window; wait (backoff, no
                // attempt or budget spent) and queue for a connection again.
                if retry == Retry::Throttled
                    && op.may_retry
                    && op.throttled_waits < MAX_THROTTLED_WAITS
                {
                    let wait = self
                        .shared
                        .retry
                        .jittered(u32::from(op.throttled_waits) + 1, rand::random::<f64>());
                    if op.deadline.is_none_or(|d| now + wait < d) {
                        op.throttled_waits += 1;
                        op.retried = true;
                        op.attempts = op.attempts.saturating_sub(1);
                        let next = op.attempts + 1;
                        self.timers.push(now + wait, key, TimerKind::Backoff(next));
                        return;
                    }
                }
                if retry != Retry::No && op.may_retry {
                    let granted = self.shared.retry_budget.next_retry(
                        &self.shared.retry,
                        op.attempts,
                        class == ErrorClass::Transport,
                        rand::random::<f64>(),
                        op.deadline.map(|d| d.saturating_duration_since(now)),
                    );
                    if let Ok(wait) = granted {
                        op.retried = true;
                        let next = op.attempts + 1;
                        self.timers.push(now + wait, key, TimerKind::Backoff(next));
                        return;
                    }
                }
                // A Complete whose answer was lost: ask the server before failing it.
                if let Some(head) = lost_complete::head_instead(op, code, class) {
                    op.multipart = Some(head);
                    op.phase = Phase::Ready;
                    self.ready.push_front(key);
                    return;
                }
                let (code, class) = lost_complete::failure(op, code, class);
                self.finish(key, Cqe::error(0, code, class));
            }
        }
    }

    /// Fires due timers.
    pub(super) fn fire_timers(&mut self, now: Instant) -> bool {
        let mut fired = false;
        while let Some((key, kind)) = self.timers.pop_due(now) {
            let Some(op) = self.ops.get_mut(key) else {
                continue;
            };
            match kind {
                TimerKind::Deadline => {
                    if op.deadline.is_some_and(|d| d <= now) {
                        self.fabric.abort(op, self.poll.registry());
                        self.finish(
                            key,
                            Cqe::error(0, ErrorCode::TimedOut, ErrorClass::Deadline),
                        );
                        fired = true;
                    }
                }
                TimerKind::Attempt(n) => {
                    if op.attempts == n && matches!(op.phase, Phase::Active { .. }) {
                        self.fabric.abort(op, self.poll.registry());
                        let timeout =
                            Outcome::fail(ErrorCode::TimedOut, ErrorClass::Transport, Retry::Yes);
                        self.settle(key, timeout, now);
                        fired = true;
                    }
                }
                TimerKind::Backoff(n) => {
                    if op.phase == Phase::Backoff && op.attempts + 1 == n {
                        op.phase = Phase::Ready;
                        self.ready.push_back(key);
                        fired = true;
                    }
                }
            }
        }
        fired
    }

    /// Cancels the operation of `queue` tagged `target` if it runs here, then completes the
    /// Cancel itself; when it does not and `hops > 1`, passes the Cancel on to the next
    /// eligible worker (which completes it).
    pub(super) fn cancel(
        &mut self,
        queue: QueueRef,
        user_data: u64,
        target: u64,
        hops: usize,
        stamps: Option<Stamps>,
    ) {
        let found = self
            .ops
            .keys_where(|o| o.queue == queue && o.user_data == target)
            .into_iter()
            .next();
        match found {
            Some(key) => {
                let control = self
                    .ops
                    .get(key)
                    .is_some_and(super::striped_put::is_put_control_step);
                match self.ops.get(key).and_then(|op| op.stripe) {
                    // A control step of a striped PUT (on the queue's owner, here): the upload
                    // is aborted at its next step.
                    Some(join) if control => self.cancel_put(join),
                    // A chunk or part: the whole striped operation stops, on every worker.
                    Some(join) => self.stop_chunks(queue, join),
                    None => {
                        if let Some(op) = self.ops.get(key) {
                            self.fabric.abort(op, self.poll.registry());
                        }
                        self.finish(
                            key,
                            Cqe::error(0, ErrorCode::Cancelled, ErrorClass::Cancelled),
                        );
                    }
                }
                let times = stamps.as_ref().map(Stamps::complete);
                self.post(
                    queue,
                    Cqe::success(user_data, 0, ring_api::DataPath::None),
                    times,
                );
            }
            None if hops > 1 => {
                let eligible = &self.crew.eligible;
                let at = eligible.iter().position(|&w| w == self.index).unwrap_or(0);
                let next = eligible
                    .get((at + 1) % eligible.len().max(1))
                    .copied()
                    .unwrap_or(self.index);
                if next == self.index {
                    self.cancel(queue, user_data, target, 1, stamps);
                } else {
                    let msg = Msg::Cancel {
                        queue,
                        user_data,
                        target,
                        hops: hops - 1,
                        stamps,
                    };
                    self.outbox.push(next, msg);
                }
            }
            None => self.post(
                queue,
                Cqe::error(user_data, ErrorCode::NotFound, ErrorClass::Local),
                stamps.as_ref().map(Stamps::complete),
            ),
        }
    }

    /// Completes the chunks (or parts) of striped operation `join` of `queue` that run here
    /// with `ECANCELED` (into their join; see [`crate::stripe`]). The control steps of a striped
    /// PUT run on (the upload they open is always aborted).
    pub(super) fn cancel_chunks(&mut self, queue: QueueRef, join: crate::stripe::JoinId) {
        for key in self.ops.keys_where(|o| {
            o.queue == queue
                && o.stripe == Some(join)
                && !super::striped_put::is_put_control_step(o)
        }) {
            if let Some(op) = self.ops.get(key) {
                self.fabric.abort(op, self.poll.registry());
            }
            self.finish(
                key,
                Cqe::error(0, ErrorCode::Cancelled, ErrorClass::Cancelled),
            );
        }
    }

    /// Removes `key` (releasing its buffer lease before the completion becomes visible) and
    /// stages `cqe` with the operation's tag and retry flag for its queue.
    pub(super) fn finish(&mut self, key: OpKey, cqe: Cqe) {
        self.forget_wait(key);
        let Some(op) = self.ops.remove(key) else {
            return;
        };
        let cqe = final_cqe(&op, cqe);
        self.complete_op(op, cqe);
    }
}

/// `cqe` with the operation's tag and retry flag.
fn final_cqe(op: &InFlight, cqe: Cqe) -> Cqe {
    let cqe = Cqe::from_raw(
        op.user_data,
        cqe.result(),
        cqe.flags(),
        cqe.bytes(),
        cqe.aux(),
    );
    if op.retried { cqe.with_retried() } else { cqe }
}

/// The CRC64NVME in a base64 checksum value.
fn decode_crc64nvme(b64: &str) -> Option<u64> {
    match s3_lite::checksum::Checksum::from_base64(
        s3_lite::checksum::ChecksumAlgorithm::Crc64Nvme,
        b64,
    ) {
        Ok(s3_lite::checksum::Checksum::Crc64Nvme(v)) => Some(v),
        _ => None,
    }
}
