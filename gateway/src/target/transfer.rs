//! One GET or PUT over a paired connection (either fabric): [`RcGet`] is the backend's
//! [`ObjectSink`] and RDMA-WRITEs what it receives into the client's window through two
//! staging buffers (filling one while the other is on the wire); [`RcPut`] is the body
//! source of a PUT and RDMA-READs the client's window chunk by chunk (the next READ runs while
//! the previous chunk is hashed and spooled). Completions of the connection's shared CQ are
//! routed to the waiting transfer by [`Demux`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use engine::rc::{RcCq, RcMr, RemoteAddr, SendOp, SendWr, Sge, WcStatus, WorkCompletion};

use super::{Conn, Pool};
use crate::backend::{ObjectInfo, ObjectSink};
use crate::body::BodySource;
use crate::error::ApiError;
use crate::rdma::DataPath;

/// Bytes per staging buffer and per work request.
pub const CHUNK: usize = 1 << 20;

static NEXT_WR: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Default)]
struct DemuxState {
    done: HashMap<u64, WcStatus>,
    polling: bool,
    /// The threads waiting, by the work request each waits for.
    waiting: HashMap<u64, Arc<Condvar>>,
}

/// Routes completions of one CQ to the threads waiting for them (several gateway threads
/// may run transfers on the same connection at once). One waiter polls; each other waiter
/// sleeps on a condvar of its own and is woken only when its completion is sorted (or to take
/// over polling), so a connection with many transfers in flight does not wake them all for
/// every completion.
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

    /// The status of `wr_id`, or `None` when `deadline` passes first.
    fn wait(&self, wr_id: u64, deadline: Instant) -> Option<WcStatus> {
        let cv = Arc::new(Condvar::new());
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        st.waiting.insert(wr_id, Arc::clone(&cv));
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
                st = cv
                    .wait_timeout(st, nap)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
                continue;
            }
            st.polling = true;
            drop(st);
            let mut buf = [WorkCompletion::default(); 32];
            let mut got = Vec::new();
            // A CQ that cannot be polled any more reads as "nothing yet": the waiters' own
            // deadlines end the transfer and fail the connection.
            let mut n = self.cq.poll_wait(&mut buf, nap).unwrap_or(0);
            while n > 0 {
                got.extend(buf.iter().take(n).map(|wc| (wc.wr_id, wc.status)));
                if n < buf.len() {
                    break;
                }
                n = self.cq.poll(&mut buf).unwrap_or(0);
            }
            st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            st.polling = false;
            for (id, status) in got {
                if let Some(w) = st.waiting.get(&id) {
                    w.notify_one();
                }
                st.done.insert(id, status);
            }
        };
        st.waiting.remove(&wr_id);
        // Leaving: if nobody polls, wake one waiter to take over.
        if !st.polling
            && let Some(w) = st.waiting.values().next()
        {
            w.notify_one();
        }
        status
    }
}

fn transfer_failed(what: impl std::fmt::Display) -> ApiError {
    ApiError::new(500, "RDMATransferFailed", what.to_string())
}

/// Posts `op` from/to `sge` and returns its `wr_id`.
fn post(conn: &Conn, op: SendOp, sge: Sge) -> Result<u64, ApiError> {
    let wr_id = NEXT_WR.fetch_add(1, Ordering::Relaxed);
    conn.qp
        .post_send(&SendWr::new(wr_id, op, sge))
        .map_err(|e| transfer_failed(format!("post: {e}")))?;
    Ok(wr_id)
}

fn complete(conn: &Conn, wr_id: u64, deadline: Instant) -> Result<(), ApiError> {
    match conn.demux.wait(wr_id, deadline) {
        Some(WcStatus::Success) => Ok(()),
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

/// GET: object bytes → staging → RDMA WRITE into the client's window.
pub(crate) struct RcGet {
    conn: Arc<Conn>,
    pool: Arc<Pool>,
    remote: RemoteAddr,
    window: u64,
    posted: u64,
    bufs: [Option<RcMr>; 2],
    pending: [Option<u64>; 2],
    cur: usize,
    fill: usize,
    deadline: Instant,
    error: Option<ApiError>,
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
            posted: 0,
            bufs: [None, None],
            pending: [None, None],
            cur: 0,
            fill: 0,
            deadline,
            error: None,
        }
    }

    fn fail(&mut self, e: ApiError) -> std::io::Error {
        let msg = e.message.clone();
        self.error.get_or_insert(e);
        std::io::Error::other(msg)
    }

    /// Waits for buffer `i`'s write, if any.
    fn settle(&mut self, i: usize) -> Result<(), ApiError> {
        if let Some(id) = self.pending.get_mut(i).and_then(Option::take) {
            complete(&self.conn, id, self.deadline)?;
        }
        Ok(())
    }

    /// Posts the current buffer's bytes and switches to the other buffer.
    fn flush(&mut self) -> Result<(), ApiError> {
        if self.fill == 0 {
            return Ok(());
        }
        let i = self.cur;
        let Some(mr) = self.bufs.get(i).and_then(Option::as_ref) else {
            return Err(ApiError::internal("staging buffer missing"));
        };
        let at = RemoteAddr {
            addr: self
                .remote
                .addr
                .checked_add(self.posted)
                .ok_or_else(|| ApiError::invalid_argument("RDMA window address overflows"))?,
            rkey: self.remote.rkey,
        };
        let id = post(&self.conn, SendOp::Write(at), sge(mr, self.fill))?;
        if let Some(p) = self.pending.get_mut(i) {
            *p = Some(id);
        }
        self.posted += self.fill as u64;
        self.fill = 0;
        self.cur ^= 1;
        self.settle(self.cur)
    }

    fn push(&mut self, mut bytes: &[u8]) -> Result<(), ApiError> {
        let end = self.posted + (self.fill + bytes.len()) as u64;
        if end > self.window {
            return Err(ApiError::invalid_argument(format!(
                "the object range is larger than the RDMA window of {}",
                s3_lite::rdma::RDMA_TOKEN
            )));
        }
        while !bytes.is_empty() {
            let i = self.cur;
            if self.bufs.get(i).is_some_and(Option::is_none) {
                let mr = self.pool.take()?;
                if let Some(b) = self.bufs.get_mut(i) {
                    *b = Some(mr);
                }
            }
            let Some(mr) = self.bufs.get(i).and_then(Option::as_ref) else {
                return Err(ApiError::internal("staging buffer missing"));
            };
            let n = bytes.len().min(CHUNK - self.fill);
            let (head, rest) = bytes.split_at(n);
            mr.write(self.fill as u64, head)
                .map_err(ApiError::internal)?;
            self.fill += n;
            bytes = rest;
            if self.fill == CHUNK {
                self.flush()?;
            }
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
        Ok(())
    }

    fn data(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.error.is_some() {
            return Err(std::io::Error::other("RDMA transfer failed"));
        }
        self.push(bytes).map_err(|e| self.fail(e))
    }
}

impl BodySource for RcGet {
    fn next_chunk(&mut self) -> std::io::Result<Option<&[u8]>> {
        Ok(None)
    }
}

impl DataPath for RcGet {
    fn finish(&mut self) -> Result<u64, ApiError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.flush()?;
        self.settle(0)?;
        self.settle(1)?;
        Ok(self.posted)
    }

    fn take_error(&mut self) -> Option<ApiError> {
        self.error.take()
    }
}

impl Drop for RcGet {
    fn drop(&mut self) {
        for (b, p) in self.bufs.iter_mut().zip(self.pending.iter()) {
            if let Some(mr) = b.take() {
                if p.is_some() {
                    // A write may still read it: fail the connection first (its QP stops
                    // using the buffer), then retire the buffer.
                    self.conn.qp.modify_to_err();
                    self.pool.retire(mr);
                } else {
                    self.pool.give(mr);
                }
            }
        }
    }
}

/// PUT / UploadPart: RDMA READ of the client's window → staging → the spool.
pub(crate) struct RcPut {
    conn: Arc<Conn>,
    pool: Arc<Pool>,
    remote: RemoteAddr,
    total: u64,
    posted: u64,
    received: u64,
    buf: Option<RcMr>,
    pending: Option<(u64, usize)>,
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
        Ok(Self {
            conn,
            pool,
            remote,
            total,
            posted: 0,
            received: 0,
            buf,
            pending: None,
            out: Vec::new(),
            deadline,
            error: None,
        })
    }

    fn post_next(&mut self) -> Result<(), ApiError> {
        if self.posted >= self.total {
            return Ok(());
        }
        let Some(mr) = self.buf.as_ref() else {
            return Err(ApiError::internal("staging buffer missing"));
        };
        let n = usize::try_from(self.total - self.posted).map_or(CHUNK, |r| r.min(CHUNK));
        let at = RemoteAddr {
            addr: self
                .remote
                .addr
                .checked_add(self.posted)
                .ok_or_else(|| ApiError::invalid_argument("RDMA window address overflows"))?,
            rkey: self.remote.rkey,
        };
        let id = post(&self.conn, SendOp::Read(at), sge(mr, n))?;
        self.pending = Some((id, n));
        self.posted += n as u64;
        Ok(())
    }

    fn next(&mut self) -> Result<Option<&[u8]>, ApiError> {
        if self.pending.is_none() {
            self.post_next()?;
        }
        let Some((id, n)) = self.pending else {
            return Ok(None);
        };
        complete(&self.conn, id, self.deadline)?;
        self.pending = None;
        let Some(mr) = self.buf.as_ref() else {
            return Err(ApiError::internal("staging buffer missing"));
        };
        self.out.resize(n, 0);
        mr.read(0, &mut self.out).map_err(ApiError::internal)?;
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
