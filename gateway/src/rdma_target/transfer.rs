//! One GET or PUT over a paired connection (either fabric): [`RcGet`] is the backend's
//! [`ObjectSink`] and RDMA-WRITEs the span into the client's window through up to
//! [`GET_DEPTH`] staging buffers (the backend's file is read straight into them,
//! [`ObjectSink::data_from_file`]; other backends' bytes are copied in), filling some while
//! the others are on the wire; [`RcPut`] is the body source of a PUT and RDMA-READs the
//! client's window chunk by chunk (the next chunk's READs run while the previous chunk is
//! hashed and spooled; a chunk is one READ, or several of at most the QP's
//! [`engine::rc::RcQp::max_read_bytes`] where the device asks for that: rxe, docs/verbs.md). Completions of the connection's shared CQ are routed to the waiting transfer by
//! [`Demux`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use engine::rc::{
    RcCq, RcMr, RcStaging, RemoteAddr, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};

use super::unsettled::Unsettled;
use super::{Conn, Pool};
use crate::backend::{ObjectInfo, ObjectSink};
use crate::body::BodySource;
use crate::error::ApiError;
use crate::rdma::DataPath;

/// Bytes per staging buffer and per work request.
pub const CHUNK: usize = 1 << 20;

/// Staging buffers one GET keeps in flight at most. The first is required (`503 SlowDown`
/// when the pool is spent), the second is taken while the pool has one, the others only while
/// fewer than half of the pool is in use.
pub(crate) const GET_DEPTH: usize = 4;

/// Bytes read from the file per `pread(2)` into a staging buffer: each piece is checksummed
/// right after it lands, while it is still in the CPU's cache.
const FILE_PIECE: usize = 256 * 1024;

static NEXT_WR: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Default)]
struct DemuxState {
    /// Completions polled before their waiter took them (it had not come to wait yet), and
    /// those of the unsignaled work requests of a failed transfer (taken by it, or dropped
    /// with the connection, which a failed work request has failed).
    done: HashMap<u64, WcStatus>,
    /// Whether a waiter is polling the CQ now.
    polling: bool,
    /// The threads parked while another polls, by the work request each waits for. The
    /// oldest (lowest id: the next to complete, as an RC send queue completes in order) takes
    /// over polling when the poller leaves.
    parked: BTreeMap<u64, Thread>,
}

/// Routes completions of one CQ to the threads waiting for them (several gateway threads
/// may run transfers on the same connection at once). One waiter polls the CQ (sleeping in
/// its wait); the others park. The poller hands each completion it finds to its waiter with
/// one unpark (no syscall when that thread is not asleep yet; nobody else is woken), and when
/// its own completion arrives it leaves and unparks the oldest waiter to poll next, which is
/// the one whose completion comes next, so a completion usually wakes its own waiter
/// directly. Unpark before park is kept as a token, so no wake-up is lost.
#[derive(Debug)]
pub(crate) struct Demux {
    cq: RcCq,
    state: Mutex<DemuxState>,
}

impl Demux {
    pub(crate) fn new(cq: RcCq) -> Self {
        Self {
            cq,
            state: Mutex::new(DemuxState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DemuxState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The status of `wr_id`, or `None` when `deadline` passes first.
    pub(crate) fn wait(&self, wr_id: u64, deadline: Instant) -> Option<WcStatus> {
        let mut st = self.lock();
        let status = loop {
            if let Some(s) = st.done.remove(&wr_id) {
                break Some(s);
            }
            let now = Instant::now();
            if now >= deadline {
                break None;
            }
            let nap = (deadline - now).min(Duration::from_millis(100));
            if st.polling {
                st.parked.insert(wr_id, std::thread::current());
                drop(st);
                std::thread::park_timeout(nap);
                st = self.lock();
                st.parked.remove(&wr_id);
                continue;
            }
            st.polling = true;
            drop(st);
            let mut buf = [WorkCompletion::default(); 32];
            // A CQ that cannot be polled any more reads as "nothing yet": the waiters' own
            // deadlines end the transfer and fail the connection.
            let n = self.cq.poll_wait(&mut buf, nap).unwrap_or(0);
            st = self.lock();
            st.polling = false;
            self.file(&mut st, &mut buf, n);
        };
        // Leaving: if nobody polls, the oldest waiter takes over.
        if !st.polling
            && let Some((_, t)) = st.parked.first_key_value()
        {
            t.unpark();
        }
        status
    }

    /// The status of `wr_id` if it has completed, without waiting: when nobody is polling the
    /// CQ, polls it once (handing what it finds to parked waiters, as [`Demux::wait`] does).
    pub(crate) fn try_take(&self, wr_id: u64) -> Option<WcStatus> {
        let mut st = self.lock();
        if !st.done.contains_key(&wr_id) && !st.polling {
            let mut buf = [WorkCompletion::default(); 32];
            let n = self.cq.poll(&mut buf).unwrap_or(0);
            self.file(&mut st, &mut buf, n);
        }
        st.done.remove(&wr_id)
    }

    /// Files the `n` completions in `buf`, and every further one the CQ holds (polled without
    /// waiting), unparking the thread that waits for each (a poller is never among the
    /// parked, so it does not unpark itself).
    fn file(&self, st: &mut DemuxState, buf: &mut [WorkCompletion; 32], mut n: usize) {
        loop {
            for wc in buf.iter().take(n) {
                st.done.insert(wc.wr_id, wc.status);
                if let Some(t) = st.parked.get(&wc.wr_id) {
                    t.unpark();
                }
            }
            if n < buf.len() {
                break;
            }
            n = self.cq.poll(buf).unwrap_or(0);
        }
    }

    /// Takes the first completion, in `ids` order, that did not succeed among those polled
    /// already (the unsignaled work requests of a transfer, whose error names the cause
    /// better than the flush of the signaled one after them). The others are dropped.
    pub(crate) fn take_failure(&self, ids: &[u64]) -> Option<WcStatus> {
        let mut st = self.lock();
        let mut first = None;
        for id in ids {
            if let Some(s) = st.done.remove(id)
                && s != WcStatus::Success
            {
                first.get_or_insert(s);
            }
        }
        first
    }

    /// Completions polled and not taken yet (tests).
    #[cfg(test)]
    fn unclaimed(&self) -> usize {
        self.lock().done.len()
    }
}

fn transfer_failed(what: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "RDMATransferFailed", what.to_string())
}

/// Posts `wr` under a fresh `wr_id` and returns that id.
fn post(conn: &Conn, mut wr: SendWr) -> Result<u64, ApiError> {
    wr.wr_id = NEXT_WR.fetch_add(1, Ordering::Relaxed);
    conn.qp
        .post_send(&wr)
        .map_err(|e| transfer_failed(format!("post: {e}")))?;
    Ok(wr.wr_id)
}

/// Waits for the signaled `wr_id`; `unsignaled` are the transfer's work requests posted
/// before it without a completion of their own (an RC send queue completes in order, so its
/// success covers them; on failure one of them may carry the cause).
fn complete(
    conn: &Conn,
    wr_id: u64,
    unsignaled: &[u64],
    deadline: Instant,
) -> Result<(), ApiError> {
    let status = match conn.demux.wait(wr_id, deadline) {
        Some(WcStatus::Success) => return Ok(()),
        Some(s) => Some(conn.demux.take_failure(unsignaled).unwrap_or(s)),
        None => None,
    };
    match status {
        Some(WcStatus::RemoteAccessError) => {
            // The client's fabric refused the access (rkey or bounds): its token is bad. An
            // RC error completion has failed the QP (mirrored for verbs' cached state).
            conn.qp.modify_to_err();
            Err(ApiError::new(
                400,
                "InvalidArgument",
                format!(
                    "the client refused the RDMA access ({} rkey or range not granted)",
                    s3_lite::rdma::RDMA_TOKEN
                ),
            ))
        }
        Some(s) => {
            conn.qp.modify_to_err();
            Err(transfer_failed(format!("completion {s:?}")))
        }
        None => {
            // Nothing may land later: fail the connection (flushes and closes it).
            conn.qp.modify_to_err();
            Err(ApiError::new(
                408,
                "RequestTimeout",
                "the RDMA transfer did not complete in time",
            ))
        }
    }
}

fn sge(mr: &RcMr, len: usize) -> Sge {
    Sge {
        addr: mr.addr(),
        length: u32::try_from(len).unwrap_or(u32::MAX),
        lkey: mr.lkey(),
    }
}

/// Buffers posted together: the last work request of the group is signaled, and its
/// completion releases them all.
#[derive(Debug, Default)]
pub(crate) struct Group {
    pub(crate) bufs: Vec<RcStaging>,
    /// The signaled work request (`None` while the group is still open).
    pub(crate) signaled: Option<u64>,
    /// The group's other work requests, in post order.
    pub(crate) unsignaled: Vec<u64>,
}

/// The largest GET whose last WRITE may be acknowledged later ([`SendWr::ack_later`]): the
/// held acknowledgement keeps the GET's staging buffer out of the pool until it comes, which
/// the saved wake-up pays for on small GETs and not on large ones. Measured on the 16-core
/// machine (docs/benchmarks.md, 2026-12-06 09:08 UTC): flagging every size took 64 KiB GETs
/// from 85.9 to 81.2 µs of gateway CPU but 1 MiB GETs from 363.5 to 376.0.
pub(crate) const ACK_LATER_MAX: u64 = 256 << 10;

/// GET: object bytes → staging → RDMA WRITE into the client's window.
pub(crate) struct RcGet {
    conn: Arc<Conn>,
    pool: Arc<Pool>,
    remote: RemoteAddr,
    window: u64,
    /// Bytes of the span the backend announced (`begin`); until then every WRITE is signaled.
    expected: Option<u64>,
    /// Bytes posted so far.
    posted: u64,
    /// Buffers held and not covered by a work request.
    free: Vec<RcStaging>,
    /// Buffers held in all (a group closes after half of them, so one group is always on the
    /// wire while the other fills).
    held: usize,
    /// The buffer being filled, and its bytes so far.
    cur: Option<RcStaging>,
    fill: usize,
    /// Posted groups, oldest first; the last may be open.
    flight: VecDeque<Group>,
    deadline: Instant,
    error: Option<ApiError>,
    /// The client checks the bytes end to end ([`SendWr::checked_end_to_end`]).
    checked_end_to_end: bool,
    /// The GET is answered before its WRITEs complete and the client's QP takes `ACK_LATER`:
    /// its last WRITE lets the client acknowledge it later ([`SendWr::ack_later`]).
    ack_last_later: bool,
}

impl RcGet {
    pub(crate) fn new(
        conn: Arc<Conn>,
        pool: Arc<Pool>,
        remote: RemoteAddr,
        window: u64,
        deadline: Instant,
    ) -> Self {
        Self {
            conn,
            pool,
            remote,
            window,
            expected: None,
            posted: 0,
            free: Vec::new(),
            held: 0,
            cur: None,
            fill: 0,
            flight: VecDeque::new(),
            deadline,
            error: None,
            checked_end_to_end: false,
            ack_last_later: false,
        }
    }

    /// Marks the WRITEs as checked end to end by the client (`x-amz-rdma-frame-check`).
    pub(crate) fn checked_end_to_end(mut self, yes: bool) -> Self {
        self.checked_end_to_end = yes;
        self
    }

    /// Lets the client acknowledge the last WRITE later: the GET is answered early and the
    /// client's QP understands `ACK_LATER` (pairing, `x-amz-rdma-soft-features`).
    pub(crate) fn ack_last_later(mut self, yes: bool) -> Self {
        self.ack_last_later = yes;
        self
    }

    fn fail(&mut self, e: ApiError) -> std::io::Error {
        let msg = e.message.clone();
        self.error.get_or_insert(e);
        std::io::Error::other(msg)
    }

    /// Takes the buffers a span of `len` bytes can use: the first from the pool (`503` when
    /// it is spent), more while the pool has spare ones.
    fn reserve(&mut self, len: u64) -> Result<(), ApiError> {
        let want = usize::try_from(len.div_ceil(CHUNK as u64))
            .unwrap_or(GET_DEPTH)
            .clamp(1, GET_DEPTH);
        while self.held < want {
            let extra = match self.held {
                0 => Some(self.pool.take()?),
                1 => self.pool.take_extra(self.pool.max()),
                _ => self.pool.take_extra(self.pool.max() / 2),
            };
            let Some(b) = extra else { break };
            self.free.push(b);
            self.held += 1;
        }
        Ok(())
    }

    /// Waits for the oldest group's signaled WRITE and frees its buffers.
    fn settle_oldest(&mut self) -> Result<(), ApiError> {
        let Some(g) = self.flight.front() else {
            return Ok(());
        };
        let Some(id) = g.signaled else {
            return Err(ApiError::internal(
                "an open RDMA WRITE group has no completion",
            ));
        };
        complete(&self.conn, id, &g.unsignaled, self.deadline)?;
        if let Some(g) = self.flight.pop_front() {
            self.free.extend(g.bufs);
        }
        Ok(())
    }

    /// The buffer to fill: the current one, a free one, or the oldest group's once its WRITEs
    /// completed.
    fn current(&mut self) -> Result<&RcStaging, ApiError> {
        if self.cur.is_none() {
            if self.free.is_empty() {
                if self.held == 0 {
                    // No `begin` (or a zero-length one): one buffer at a time.
                    self.reserve(1)?;
                } else {
                    self.settle_oldest()?;
                }
            }
            self.cur = self.free.pop();
            self.fill = 0;
        }
        self.cur
            .as_ref()
            .ok_or_else(|| ApiError::internal("staging buffer missing"))
    }

    /// Refuses `len` more bytes beyond the window (before any of them moves).
    fn check_window(&self, len: u64) -> Result<(), ApiError> {
        let end = self.posted + self.fill as u64 + len;
        if end > self.window {
            return Err(ApiError::invalid_argument(format!(
                "the object range is larger than the RDMA window of {}",
                s3_lite::rdma::RDMA_TOKEN
            )));
        }
        Ok(())
    }

    /// Posts the current buffer's bytes. Its WRITE is signaled when it closes its group (half
    /// the buffers held) or ends the span.
    fn flush(&mut self) -> Result<(), ApiError> {
        if self.fill == 0 {
            return Ok(());
        }
        let Some(mr) = self.cur.take() else {
            return Err(ApiError::internal("staging buffer missing"));
        };
        let len = self.fill;
        self.fill = 0;
        let at = RemoteAddr {
            addr: self
                .remote
                .addr
                .checked_add(self.posted)
                .ok_or_else(|| ApiError::invalid_argument("RDMA window address overflows"))?,
            rkey: self.remote.rkey,
        };
        let wr_sge = sge(mr.mr(), len);
        if self.flight.back().is_none_or(|g| g.signaled.is_some()) {
            self.flight.push_back(Group::default());
        }
        let group_size = (self.held / 2).max(1);
        let last = self.expected.is_none_or(|e| self.posted + len as u64 >= e);
        let Some(g) = self.flight.back_mut() else {
            return Err(ApiError::internal("no RDMA WRITE group"));
        };
        // Held before posting: on failure the buffer is retired with the group's others.
        g.bufs.push(mr);
        let mut wr = SendWr::new(0, SendOp::Write(at), wr_sge);
        wr.signaled = last || g.bufs.len() >= group_size;
        wr.checked_end_to_end = self.checked_end_to_end;
        // Known to be the span's last (not merely the first before `begin`): nobody waits on
        // it once the GET is answered. Small spans only (ACK_LATER_MAX).
        wr.ack_later = self.ack_last_later
            && self
                .expected
                .is_some_and(|e| e <= ACK_LATER_MAX && self.posted + len as u64 >= e);
        let signaled = wr.signaled;
        let id = post(&self.conn, wr)?;
        if signaled {
            g.signaled = Some(id);
        } else {
            g.unsignaled.push(id);
        }
        self.posted += len as u64;
        Ok(())
    }

    /// Lands up to `max` more bytes in the buffer being filled: `land(buffer, offset, room)`
    /// places at most `room` bytes at `offset` and returns how many it placed. The buffer is
    /// posted once full. Returns the bytes landed.
    fn land_next(
        &mut self,
        max: usize,
        land: impl FnOnce(&RcStaging, usize, usize) -> Result<usize, ApiError>,
    ) -> Result<usize, ApiError> {
        let fill = self.fill;
        let buf = self.current()?;
        let n = land(buf, fill, max.min(CHUNK - fill))?;
        self.fill += n;
        if self.fill == CHUNK {
            self.flush()?;
        }
        Ok(n)
    }

    fn push(&mut self, mut bytes: &[u8]) -> Result<(), ApiError> {
        self.check_window(bytes.len() as u64)?;
        while !bytes.is_empty() {
            let n = self.land_next(bytes.len(), |buf, at, room| {
                let (head, _) = bytes.split_at(room);
                buf.mr()
                    .write(at as u64, head)
                    .map_err(ApiError::internal)?;
                Ok(room)
            })?;
            bytes = bytes.split_at(n).1;
        }
        Ok(())
    }

    /// `len` bytes at `at` of `file` into the staging buffers (never beyond them: each read
    /// is bounded by the current buffer's room), each piece shown to `seen` once it landed.
    fn push_file(
        &mut self,
        file: &std::fs::File,
        mut at: u64,
        len: u64,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Result<(), ApiError> {
        self.check_window(len)?;
        let mut left = len;
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(usize::MAX).min(FILE_PIECE);
            let got = self.land_next(want, |buf, off, room| {
                let got = buf
                    .read_file_at(off as u64, room, file, at)
                    .map_err(ApiError::internal)?;
                if got == 0 {
                    return Err(ApiError::internal("object shorter than its metadata"));
                }
                buf.inspect(off as u64, got, seen)
                    .map_err(ApiError::internal)?;
                Ok(got)
            })?;
            at += got as u64;
            left -= got as u64;
        }
        Ok(())
    }
}

impl ObjectSink for RcGet {
    fn begin(&mut self, info: &ObjectInfo, span: Option<(u64, u64)>) -> std::io::Result<()> {
        let len = match span {
            Some((a, b)) => b - a + 1,
            None => info.size,
        };
        if len > self.window {
            return Err(self.fail(ApiError::invalid_argument(format!(
                "the object range ({len} bytes) is larger than the RDMA window of {} ({} bytes)",
                s3_lite::rdma::RDMA_TOKEN,
                self.window
            ))));
        }
        self.expected = Some(len);
        if len > 0 {
            self.reserve(len).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.error.is_some() {
            return Err(std::io::Error::other("RDMA transfer failed"));
        }
        self.push(bytes).map_err(|e| self.fail(e))
    }

    fn data_from_file(
        &mut self,
        file: &std::fs::File,
        at: u64,
        len: u64,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Option<std::io::Result<()>> {
        if self.error.is_some() {
            return Some(Err(std::io::Error::other("RDMA transfer failed")));
        }
        Some(
            self.push_file(file, at, len, seen)
                .map_err(|e| self.fail(e)),
        )
    }
}

impl BodySource for RcGet {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        Ok(None)
    }
}

impl DataPath for RcGet {
    fn finish(&mut self) -> Result<u64, ApiError> {
        let n = self.post_all()?;
        while !self.flight.is_empty() {
            self.settle_oldest()?;
        }
        Ok(n)
    }

    fn answers_early(&self) -> bool {
        self.conn.qp.kind() == engine::rc::RcKind::Soft
    }

    fn leave_in_flight(&mut self) {
        if !self.flight.is_empty() {
            let groups = std::mem::take(&mut self.flight);
            self.pool.leave(Unsettled::new(
                Arc::clone(&self.conn),
                groups,
                self.deadline,
            ));
        }
    }

    fn post_all(&mut self) -> Result<u64, ApiError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self
            .expected
            .is_some_and(|e| self.posted + self.fill as u64 != e)
        {
            return Err(transfer_failed(format!(
                "the backend produced {} of {} bytes",
                self.posted + self.fill as u64,
                self.expected.unwrap_or_default()
            )));
        }
        self.flush()?;
        Ok(self.posted)
    }

    fn take_error(&mut self) -> Option<ApiError> {
        self.error.take()
    }
}

impl Drop for RcGet {
    fn drop(&mut self) {
        if !self.flight.is_empty() {
            // A write may still read these: fail the connection first (its QP stops using
            // the buffers), then retire them.
            self.conn.qp.modify_to_err();
            for g in self.flight.drain(..) {
                for mr in g.bufs {
                    self.pool.retire(mr);
                }
            }
        }
        for mr in self.cur.take().into_iter().chain(self.free.drain(..)) {
            self.pool.give(mr);
        }
    }
}

/// The READs of one staging buffer's chunk: the last is signaled, the others are not (an RC
/// send queue completes in order, so its completion covers them).
#[derive(Debug, Default)]
struct ReadChunk {
    /// Bytes of the chunk.
    len: usize,
    /// The signaled READ (`None` until the last piece is posted).
    signaled: Option<u64>,
    /// The READs before it, in post order.
    unsignaled: Vec<u64>,
}

/// The pieces `(offset, len)` one chunk of `len` bytes is read in: one READ, or READs of at
/// most `max` bytes where the device asks for that ([`engine::rc::RcQp::max_read_bytes`]).
fn read_pieces(len: usize, max: Option<u32>) -> impl Iterator<Item = (usize, usize)> {
    let step = max
        .and_then(|m| usize::try_from(m).ok())
        .filter(|&m| m > 0)
        .unwrap_or(len)
        .max(1);
    (0..len)
        .step_by(step)
        .map(move |at| (at, step.min(len - at)))
}

/// PUT / UploadPart: RDMA READ of the client's window → staging → the spool.
pub(crate) struct RcPut {
    conn: Arc<Conn>,
    pool: Arc<Pool>,
    remote: RemoteAddr,
    total: u64,
    posted: u64,
    received: u64,
    buf: Option<RcStaging>,
    /// The chunk being read (some of its READs may be posted even when posting failed).
    pending: Option<ReadChunk>,
    /// The most bytes one READ asks for (`None`: a whole chunk per READ).
    read_max: Option<u32>,
    out: Vec<u8>,
    deadline: Instant,
    error: Option<ApiError>,
}

impl RcPut {
    pub(crate) fn new(
        conn: Arc<Conn>,
        pool: Arc<Pool>,
        remote: RemoteAddr,
        total: u64,
        deadline: Instant,
    ) -> Result<Self, ApiError> {
        let buf = if total > 0 { Some(pool.take()?) } else { None };
        let read_max = conn.qp.max_read_bytes();
        Ok(Self {
            conn,
            pool,
            remote,
            total,
            posted: 0,
            received: 0,
            buf,
            pending: None,
            read_max,
            out: Vec::new(),
            deadline,
            error: None,
        })
    }

    /// Sets how many bytes one READ asks for at most (tests; the QP's own limit otherwise).
    #[cfg(test)]
    fn read_max(mut self, max: Option<u32>) -> Self {
        self.read_max = max;
        self
    }

    /// Posts the READs of the next chunk into the staging buffer.
    fn post_next(&mut self) -> Result<(), ApiError> {
        if self.posted >= self.total {
            return Ok(());
        }
        let Some(mr) = self.buf.as_ref() else {
            return Err(ApiError::internal("staging buffer missing"));
        };
        let n = usize::try_from(self.total - self.posted).map_or(CHUNK, |r| r.min(CHUNK));
        let base = self
            .remote
            .addr
            .checked_add(self.posted)
            .filter(|b| b.checked_add(n as u64).is_some())
            .ok_or_else(|| ApiError::invalid_argument("RDMA window address overflows"))?;
        let mut chunk = ReadChunk {
            len: n,
            ..ReadChunk::default()
        };
        for (off, len) in read_pieces(n, self.read_max) {
            let at = RemoteAddr {
                addr: base + off as u64,
                rkey: self.remote.rkey,
            };
            let local = Sge {
                addr: mr.mr().addr() + off as u64,
                length: u32::try_from(len).unwrap_or(u32::MAX),
                lkey: mr.mr().lkey(),
            };
            let mut wr = SendWr::new(0, SendOp::Read(at), local);
            let last = off + len == n;
            wr.signaled = last;
            let id = match post(&self.conn, wr) {
                Ok(id) => id,
                Err(e) => {
                    // The READs posted before this one still land in the buffer: pending,
                    // so that dropping the transfer fails the connection first (`Drop`).
                    if !chunk.unsignaled.is_empty() {
                        self.pending = Some(chunk);
                    }
                    return Err(e);
                }
            };
            if last {
                chunk.signaled = Some(id);
            } else {
                chunk.unsignaled.push(id);
            }
        }
        self.pending = Some(chunk);
        self.posted += n as u64;
        Ok(())
    }

    fn next(&mut self) -> Result<Option<&[u8]>, ApiError> {
        if self.pending.is_none() {
            self.post_next()?;
        }
        let Some(chunk) = self.pending.as_ref() else {
            return Ok(None);
        };
        let (Some(id), n) = (chunk.signaled, chunk.len) else {
            return Err(ApiError::internal("an RDMA READ chunk has no completion"));
        };
        complete(&self.conn, id, &chunk.unsignaled, self.deadline)?;
        self.pending = None;
        let Some(mr) = self.buf.as_ref() else {
            return Err(ApiError::internal("staging buffer missing"));
        };
        self.out.resize(n, 0);
        mr.mr().read(0, &mut self.out).map_err(ApiError::internal)?;
        self.received += n as u64;
        // The next READ overlaps hashing and spooling of this chunk.
        self.post_next()?;
        Ok(Some(&self.out))
    }
}

impl BodySource for RcPut {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        // `body::receive` maps an I/O error to IncompleteBody; the real cause is kept for
        // `take_error`, which the handler prefers.
        match self.next() {
            Ok(Some(_)) => Ok(Some(&self.out)),
            Ok(None) => Ok(None),
            Err(e) => {
                let io = std::io::Error::other(e.message.clone());
                self.error.get_or_insert(e);
                Err(io)
            }
        }
    }
}

impl ObjectSink for RcPut {
    fn begin(&mut self, _info: &ObjectInfo, _span: Option<(u64, u64)>) -> std::io::Result<()> {
        Err(std::io::Error::other("not a GET transfer"))
    }

    fn data(&mut self, _bytes: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other("not a GET transfer"))
    }
}

impl DataPath for RcPut {
    fn finish(&mut self) -> Result<u64, ApiError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        if self.received != self.total {
            return Err(transfer_failed(format!(
                "read {} of {} bytes",
                self.received, self.total
            )));
        }
        Ok(self.received)
    }

    fn take_error(&mut self) -> Option<ApiError> {
        self.error.take()
    }
}

impl Drop for RcPut {
    fn drop(&mut self) {
        if let Some(mr) = self.buf.take() {
            if self.pending.is_some() {
                self.conn.qp.modify_to_err();
                self.pool.retire(mr);
            } else {
                self.pool.give(mr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{Ipv4Addr, SocketAddr};

    use engine::rc::{Access, RcCaps, RcDevice, RcQp, SoftPath, random_psn};

    use super::*;

    /// A paired soft connection: the gateway's side as the target builds it (QP, CQ, Demux,
    /// staging pool) and a client QP with a registered window.
    struct Rig {
        conn: Arc<Conn>,
        pool: Arc<Pool>,
        client_mr: RcMr,
        _client_qp: RcQp,
        _devices: (RcDevice, RcDevice),
    }

    fn rig(window: usize, max_staging: usize) -> Rig {
        rig_paired(window, max_staging, true)
    }

    /// `paired: false`: the client never dials, so nothing posted ever completes.
    fn rig_paired(window: usize, max_staging: usize, paired: bool) -> Rig {
        let sdev = RcDevice::soft(Ipv4Addr::LOCALHOST);
        let addr = sdev
            .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        let spd = sdev.alloc_pd().unwrap();
        let scq = sdev.create_cq(256).unwrap();
        let sqp = sdev.create_qp(&spd, &scq, &scq, RcCaps::default()).unwrap();
        sqp.modify_to_init(Access::NONE).unwrap();
        let cdev = RcDevice::soft(Ipv4Addr::LOCALHOST);
        let cpd = cdev.alloc_pd().unwrap();
        let ccq = cdev.create_cq(256).unwrap();
        let cqp = cdev.create_qp(&cpd, &ccq, &ccq, RcCaps::default()).unwrap();
        let remote = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::LOCAL_WRITE;
        cqp.modify_to_init(remote).unwrap();
        let client_mr = cpd.register_owned(window, remote).unwrap();
        let (spsn, cpsn) = (random_psn(), random_psn());
        let stok = sqp.local_token(None).unwrap();
        let ctok = cqp.local_token(None).unwrap();
        sqp.connect(&ctok, cpsn, spsn, Some(SoftPath::Accept))
            .unwrap();
        if paired {
            cqp.connect(&stok, spsn, cpsn, Some(SoftPath::Connect(addr)))
                .unwrap();
        }
        Rig {
            conn: Arc::new(Conn {
                principal: "test".into(),
                client_qpn: ctok.qpn,
                qp: sqp,
                demux: Demux::new(scq),
                acks_later: false,
            }),
            pool: Arc::new(Pool::new(spd, max_staging)),
            client_mr,
            _client_qp: cqp,
            _devices: (sdev, cdev),
        }
    }

    impl Rig {
        fn get(&self, off: u64, window: u64) -> RcGet {
            let remote = RemoteAddr {
                addr: self.client_mr.addr() + off,
                rkey: self.client_mr.rkey(),
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            RcGet::new(
                Arc::clone(&self.conn),
                Arc::clone(&self.pool),
                remote,
                window,
                deadline,
            )
        }

        fn client_bytes(&self, off: u64, len: usize) -> Vec<u8> {
            let mut v = vec![0u8; len];
            self.client_mr.read(off, &mut v).unwrap();
            v
        }

        fn in_use(&self) -> usize {
            let g = self.pool.state.lock().unwrap();
            g.1 - g.0.len()
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 11) as u8)
            .collect()
    }

    fn file_of(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    fn info(size: u64) -> ObjectInfo {
        ObjectInfo {
            size,
            ..Default::default()
        }
    }

    #[test]
    fn file_range_across_staging_buffers_lands_byte_exact_with_several_in_flight() {
        let object = pattern(9 * CHUNK + 777, 5);
        let f = file_of(&object);
        let r = rig(8 * CHUNK, 16);
        // Starts mid-buffer, spans 6+ buffers, ends mid-buffer.
        let (a, b) = (123_457u64, 123_457 + 6 * CHUNK as u64 + 54_321);
        let len = b - a + 1;
        let mut get = r.get(4096, len);
        get.begin(&info(object.len() as u64), Some((a, b))).unwrap();
        assert_eq!(get.held, GET_DEPTH, "more than two buffers in flight");
        let mut seen = Vec::new();
        get.data_from_file(&f, a, len, &mut |bytes| seen.extend_from_slice(bytes))
            .unwrap()
            .unwrap();
        assert_eq!(get.finish().unwrap(), len);
        drop(get);
        let want = &object[a as usize..=b as usize];
        assert_eq!(seen, want, "the checksum pass saw exactly the bytes moved");
        assert_eq!(r.client_bytes(4096, len as usize), want);
        assert!(r.client_bytes(0, 4096).iter().all(|&x| x == 0));
        let after = 4096 + len;
        let rest = 8 * CHUNK - after as usize;
        assert!(r.client_bytes(after, rest).iter().all(|&x| x == 0));
        assert_eq!(r.in_use(), 0, "every staging buffer went back to the pool");
    }

    #[test]
    fn copied_range_of_whole_buffers_lands_byte_exact() {
        // The copy path (backends without a file), odd piece sizes, a span of exactly four
        // buffers: the last WRITE is posted when its buffer fills and must be the signaled one.
        let object = pattern(4 * CHUNK, 9);
        let r = rig(4 * CHUNK, 16);
        let mut get = r.get(0, object.len() as u64);
        get.begin(&info(object.len() as u64), None).unwrap();
        for piece in object.chunks(100_003) {
            get.data(piece).unwrap();
        }
        assert_eq!(get.finish().unwrap(), object.len() as u64);
        drop(get);
        assert_eq!(r.client_bytes(0, object.len()), object);
        assert_eq!(r.in_use(), 0);
    }

    #[test]
    fn a_spent_pool_still_serves_with_one_buffer() {
        let object = pattern(3 * CHUNK + 5, 1);
        let f = file_of(&object);
        let r = rig(4 * CHUNK, 1);
        let mut get = r.get(0, object.len() as u64);
        get.begin(&info(object.len() as u64), None).unwrap();
        assert_eq!(get.held, 1);
        let n = object.len() as u64;
        get.data_from_file(&f, 0, n, &mut |_| {}).unwrap().unwrap();
        assert_eq!(get.finish().unwrap(), n);
        drop(get);
        assert_eq!(r.client_bytes(0, object.len()), object);
        // And a second GET meanwhile would be refused with SlowDown, not wait.
        let mut one = r.get(0, 10);
        let mut two = r.get(0, 10);
        one.begin(&info(10), None).unwrap();
        assert!(two.begin(&info(10), None).is_err());
        assert_eq!(two.take_error().map(|e| e.status), Some(503));
    }

    #[test]
    fn file_reads_never_land_beyond_the_window_or_the_buffer() {
        let object = pattern(3 * CHUNK, 3);
        let f = file_of(&object);
        let r = rig(4 * CHUNK, 16);
        let sentinel = vec![0xEEu8; 4 * CHUNK];
        r.client_mr.write(0, &sentinel).unwrap();
        // A window one byte short of the span: refused before any byte moves.
        let len = 2 * CHUNK as u64 + 10;
        let mut get = r.get(0, len - 1);
        assert!(
            get.begin(&info(object.len() as u64), Some((0, len - 1)))
                .is_err()
        );
        let res = get.data_from_file(&f, 0, len, &mut |_| {}).unwrap();
        assert!(res.is_err());
        drop(get);
        assert_eq!(r.client_bytes(0, 4 * CHUNK), sentinel);
        // A file shorter than announced: an error, and nothing lands past the file's bytes.
        let short = file_of(&object[..CHUNK + 100]);
        let mut get = r.get(0, len);
        get.begin(&info(len), None).unwrap();
        let err = get
            .data_from_file(&short, 0, len, &mut |_| {})
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("shorter"), "{err}");
        assert!(get.take_error().is_some());
        drop(get);
        let tail = r.client_bytes(CHUNK as u64 + 100, 3 * CHUNK - 100);
        assert!(
            tail.iter().all(|&x| x == 0xEE),
            "nothing past the file's bytes"
        );
        // The failed GET left its WRITEs' buffers retired or returned, none leaked.
        assert_eq!(r.in_use(), 0);
    }

    /// Runs an early-answered GET of `object` into the client's window at `off` up to the
    /// answer: every WRITE posted, the transfer left in flight, the GET dropped.
    fn answer_early(r: &Rig, object: &[u8], off: u64, deadline: Instant) {
        let f = file_of(object);
        let n = object.len() as u64;
        let mut get = r.get(off, n);
        get.deadline = deadline;
        get.begin(&info(n), None).unwrap();
        get.data_from_file(&f, 0, n, &mut |_| {}).unwrap().unwrap();
        assert_eq!(get.post_all().unwrap(), n);
        get.leave_in_flight();
        drop(get);
    }

    /// Calls `reap` until nothing is parked (10 s at most).
    fn reap_all(r: &Rig) {
        let t0 = Instant::now();
        while r.pool.unsettled() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "never settled");
            r.pool.reap();
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn an_early_answered_get_gives_its_buffers_back_once_its_writes_complete() {
        let object = pattern(3 * CHUNK + 99, 7);
        let r = rig(4 * CHUNK, 16);
        answer_early(&r, &object, 0, Instant::now() + Duration::from_secs(20));
        // The request thread did not wait: the buffers are still held, parked in the pool.
        assert_eq!(r.pool.unsettled(), 1);
        assert_eq!(r.in_use(), 4);
        reap_all(&r);
        assert_eq!(r.in_use(), 0, "every buffer came back");
        assert_eq!(r.client_bytes(0, object.len()), object);
        assert!(!r.conn.dead());
        // A pool with no free buffer reaps before it registers another: a second early GET's
        // buffers are reused by the next transfer.
        answer_early(
            &r,
            &object[..100],
            0,
            Instant::now() + Duration::from_secs(20),
        );
        let registered = r.pool.state.lock().unwrap().1;
        assert_eq!(r.in_use(), 1);
        // Wait for its completion (polled into the demux, not taken: no work request has id
        // `u64::MAX`).
        let t0 = Instant::now();
        while r.conn.demux.lock().done.is_empty() {
            assert!(t0.elapsed() < Duration::from_secs(10), "no completion");
            assert_eq!(r.conn.demux.try_take(u64::MAX), None);
            std::thread::sleep(Duration::from_millis(1));
        }
        let held: Vec<_> = (0..registered).map(|_| r.pool.take().unwrap()).collect();
        assert_eq!(
            r.pool.state.lock().unwrap().1,
            registered,
            "no new registration"
        );
        assert_eq!(r.pool.unsettled(), 0);
        held.into_iter().for_each(|mr| r.pool.give(mr));
    }

    #[test]
    fn an_early_answered_get_whose_write_fails_fails_its_connection_and_retires_its_buffers() {
        // The window the client granted ends 10 bytes into the span: its fabric refuses the
        // WRITE (RemoteAccessError) after the answer went out.
        let object = pattern(2 * CHUNK, 3);
        let r = rig(2 * CHUNK, 16);
        answer_early(&r, &object, 10, Instant::now() + Duration::from_secs(20));
        reap_all(&r);
        assert!(r.conn.dead(), "the connection is failed");
        assert_eq!(r.in_use(), 0, "nothing leaked");
        // Two buffers, one WRITE each: the first (inside the window) completed and its buffer
        // is free again, the refused one's was retired.
        assert_eq!(
            r.pool.state.lock().unwrap().1,
            1,
            "the failed WRITE's buffer was retired"
        );
    }

    #[test]
    fn an_early_answered_get_whose_writes_never_complete_fails_at_its_deadline() {
        let r = rig_paired(CHUNK, 16, false);
        let deadline = Instant::now() + Duration::from_millis(200);
        answer_early(&r, &pattern(1000, 1), 0, deadline);
        r.pool.reap();
        assert_eq!(r.pool.unsettled(), 1, "still waiting before the deadline");
        assert!(!r.conn.dead());
        std::thread::sleep(Duration::from_millis(250));
        r.pool.reap();
        assert_eq!(r.pool.unsettled(), 0);
        assert!(r.conn.dead(), "an overdue transfer fails its connection");
        assert_eq!(r.in_use(), 0);
    }

    #[test]
    fn a_spent_pool_waits_for_a_parked_get_before_it_refuses() {
        // One buffer, held by an early-answered GET whose WRITE is still in flight: the next
        // transfer's first buffer waits for that WRITE's completion instead of a 503.
        let r = rig(CHUNK, 1);
        answer_early(
            &r,
            &pattern(4096, 2),
            0,
            Instant::now() + Duration::from_secs(20),
        );
        let mr = r.pool.take().expect("the parked GET's buffer");
        assert_eq!(r.pool.unsettled(), 0);
        assert_eq!(r.pool.state.lock().unwrap().1, 1, "no second registration");
        assert!(!r.conn.dead());
        r.pool.give(mr);
        // A WRITE that never completes: the wait ends at that transfer's deadline, which
        // fails its connection and retires its buffer, so the pool has room again.
        let r = rig_paired(CHUNK, 1, false);
        let t0 = Instant::now();
        answer_early(&r, &pattern(4096, 2), 0, t0 + Duration::from_millis(300));
        let mr = r.pool.take().expect("room once the overdue GET failed");
        assert!(
            t0.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t0.elapsed()
        );
        assert!(r.conn.dead());
        assert_eq!(r.pool.state.lock().unwrap().1, 1);
        r.pool.give(mr);
    }

    #[test]
    fn demux_hands_each_completion_to_its_own_waiter() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 40;
        const SLOT: usize = 4096;
        let r = rig(THREADS * SLOT, 16);
        let r = &r;
        // One staging region, one slot per thread.
        let staging = r.pool.take().unwrap();
        let staging = &staging;
        // A waiter for a work request that never completes ends at its deadline, while the
        // others keep completing.
        let t0 = Instant::now();
        let lonely = std::thread::scope(|s| {
            let lonely = s.spawn(|| {
                let t0 = Instant::now();
                let got = r.conn.demux.wait(u64::MAX, t0 + Duration::from_millis(300));
                (got, t0.elapsed())
            });
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    s.spawn(move || {
                        for round in 0..ROUNDS {
                            let bytes = vec![(t * ROUNDS + round) as u8; SLOT];
                            let off = (t * SLOT) as u64;
                            staging.mr().write(off, &bytes).unwrap();
                            let at = RemoteAddr {
                                addr: r.client_mr.addr() + off,
                                rkey: r.client_mr.rkey(),
                            };
                            let sge = Sge {
                                addr: staging.mr().addr() + off,
                                length: SLOT as u32,
                                lkey: staging.mr().lkey(),
                            };
                            let id = post(&r.conn, SendWr::new(0, SendOp::Write(at), sge)).unwrap();
                            let deadline = Instant::now() + Duration::from_secs(20);
                            assert_eq!(
                                r.conn.demux.wait(id, deadline),
                                Some(WcStatus::Success),
                                "thread {t} round {round}"
                            );
                            assert_eq!(r.client_bytes(off, SLOT), bytes);
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            lonely.join().unwrap()
        });
        // A completion left for its waiter's own 100 ms nap to find (a lost hand-off) would
        // cost 320 x 100 ms here.
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(15),
            "{took:?}: completions were not handed over"
        );
        assert_eq!(lonely.0, None);
        assert!(lonely.1 >= Duration::from_millis(300), "{:?}", lonely.1);
        assert!(lonely.1 < Duration::from_secs(5), "{:?}", lonely.1);
        assert_eq!(r.conn.demux.unclaimed(), 0, "every completion was taken");
        assert!(r.conn.demux.lock().parked.is_empty());
    }

    #[test]
    fn read_pieces_cut_a_chunk_into_reads_of_at_most_the_limit() {
        let cut = |len, max| read_pieces(len, max).collect::<Vec<_>>();
        // rxe: 128 packets of its 1024-byte MTU; a 1 MiB chunk is eight READs, back to back.
        let rxe = cut(CHUNK, Some(128 * 1024));
        assert_eq!(rxe.len(), 8);
        assert!(rxe.iter().all(|&(_, n)| n == 128 * 1024));
        assert!(rxe.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0), "{rxe:?}");
        assert_eq!(
            cut(CHUNK, None),
            [(0, CHUNK)],
            "no limit: one READ per chunk"
        );
        assert_eq!(cut(CHUNK, Some(4 << 20)), [(0, CHUNK)]);
        assert_eq!(
            cut(1000, Some(300)),
            [(0, 300), (300, 300), (600, 300), (900, 100)]
        );
        assert_eq!(cut(1000, Some(0)), [(0, 1000)], "a zero limit is no limit");
        assert!(cut(0, Some(300)).is_empty());
    }

    impl Rig {
        fn put(&self, total: u64, read_max: Option<u32>) -> RcPut {
            let remote = RemoteAddr {
                addr: self.client_mr.addr(),
                rkey: self.client_mr.rkey(),
            };
            let deadline = Instant::now() + Duration::from_secs(20);
            RcPut::new(
                Arc::clone(&self.conn),
                Arc::clone(&self.pool),
                remote,
                total,
                deadline,
            )
            .unwrap()
            .read_max(read_max)
        }
    }

    /// Every chunk the PUT hands on, and its error, if any.
    fn drain(put: &mut RcPut) -> (Vec<u8>, Option<std::io::Error>) {
        let mut got = Vec::new();
        loop {
            match put.next_chunk() {
                Ok(Some(c)) => got.extend_from_slice(c),
                Ok(None) => return (got, None),
                Err(e) => return (got, Some(e)),
            }
        }
    }

    #[test]
    fn a_put_read_in_pieces_lands_byte_exact() {
        let payload = pattern(2 * CHUNK + 777, 3);
        for read_max in [None, Some(128 * 1024), Some(100_003)] {
            let r = rig(payload.len(), 4);
            r.client_mr.write(0, &payload).unwrap();
            let mut put = r.put(payload.len() as u64, read_max);
            let (got, err) = drain(&mut put);
            assert!(err.is_none(), "{read_max:?}: {err:?}");
            assert!(got == payload, "{read_max:?}: bytes differ");
            assert_eq!(put.finish().unwrap(), payload.len() as u64);
            drop(put);
            assert_eq!(r.in_use(), 0, "{read_max:?}: the staging buffer went back");
            assert!(!r.conn.dead(), "{read_max:?}");
        }
    }

    #[test]
    fn a_put_posts_a_chunk_as_reads_of_at_most_the_limit_with_only_the_last_signaled() {
        let r = rig(CHUNK, 4);
        let mut put = r.put(CHUNK as u64, Some(128 * 1024));
        put.post_next().unwrap();
        let chunk = put.pending.as_ref().unwrap();
        assert_eq!(chunk.len, CHUNK);
        assert_eq!(chunk.unsignaled.len(), 7, "eight READs, seven unsignaled");
        assert!(chunk.signaled.is_some());
        let (got, err) = drain(&mut put);
        assert!(err.is_none(), "{err:?}");
        assert_eq!(got.len(), CHUNK);
        assert_eq!(
            r.conn.demux.unclaimed(),
            0,
            "unsignaled READs left no completion"
        );
    }

    #[test]
    fn a_refused_unsignaled_read_fails_the_put_with_its_own_cause() {
        // The client's window is 300,000 bytes, the token claims 500,000: the second
        // READ of 200,000 bytes (unsignaled) is refused by the client's fabric. The signaled
        // one after it is flushed; the PUT reports the refusal (a bad token: 400), not the
        // flush, and fails the connection.
        let r = rig(300_000, 4);
        let mut put = r.put(500_000, Some(200_000));
        let (got, err) = drain(&mut put);
        assert!(got.is_empty());
        assert!(err.is_some());
        let e = put.take_error().expect("the cause is kept");
        assert_eq!(e.status, 400, "{e:?}");
        assert_eq!(e.code, "InvalidArgument", "{e:?}");
        drop(put);
        assert!(r.conn.dead());
    }
}
