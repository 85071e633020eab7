//! The HTTP fabric: S3 requests over a per-worker pool of keep-alive TCP connections.
//!
//! Bounded in-flight per connection: exactly one request at a time (no pipelining: S3 servers
//! differ in how they treat pipelined requests, and one broken response would poison every
//! request queued behind it). Concurrency comes from up to `connections_per_worker`
//! connections. Connections set `TCP_NODELAY` (a request head is one small write that must not
//! wait for an ACK). `https://` endpoints get TLS on every connection ([`tls`]), handshake and
//! records driven by the same readiness events.
//!
//! Parked slots: with an RDMA dialect, an op may wait for work running off the worker thread
//! (a pairing, its hipobj-rc-v2 exchange). It then holds a connection slot, marked `parked`
//! (readiness on it is ignored: nothing was sent), until the dialect reports through its
//! doorbell token ([`NOTIFY`]): the op's request is then built on that slot, or the op
//! completes and the slot returns to the idle pool. So such ops count against the
//! connection limit, which bounds how many exchange threads run at once.

mod conn;
mod request;
pub(crate) mod response;
pub(crate) mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use mio::{Interest, Token};
use ring_api::{DataPath, WireDialect};
use s3_lite::net::transport::Transport;
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::Signer;

use self::conn::{Conn, Step};
use self::request::DateCache;
use super::rdma::{Admit, Event, NOTIFY, RdmaClient};
use super::{Fabric, Finished, Outcome};
use crate::inflight::{InFlight, OpKey, OpKind, Phase, Slab};

/// Connection slot `i` uses `Token(i)`; the worker's waker uses a token above every slot.
#[derive(Debug)]
struct Slot {
    conn: Conn,
    op: Option<OpKey>,
    /// Reserved for `op`, which waits for off-loop work (nothing on the wire yet).
    parked: bool,
}

/// A worker's HTTP data path to one endpoint.
#[derive(Debug)]
pub(crate) struct HttpFabric {
    addr: SocketAddr,
    endpoint: Endpoint,
    /// TLS for an `https://` endpoint.
    tls: Option<Arc<tls::TlsContext>>,
    signer: Arc<Signer>,
    dates: DateCache,
    slots: Vec<Option<Slot>>,
    /// Slots holding an idle, kept-alive connection (most recently used last).
    idle: Vec<usize>,
    limit: usize,
    read_buffer: usize,
    quickack: bool,
    active: usize,
    /// The `rc-persistent` dialect (RDMA windows in the requests), when configured.
    rdma: Option<RdmaClient>,
}

impl HttpFabric {
    pub(crate) fn new(
        addr: SocketAddr,
        endpoint: Endpoint,
        signer: Arc<Signer>,
        limit: usize,
        read_buffer: usize,
        quickack: bool,
    ) -> Self {
        Self {
            addr,
            endpoint,
            tls: None,
            signer,
            dates: DateCache::default(),
            slots: Vec::new(),
            idle: Vec::new(),
            limit: limit.max(1),
            read_buffer: read_buffer.max(4096),
            quickack,
            active: 0,
            rdma: None,
        }
    }

    /// Speaks TLS on every connection (an `https://` endpoint).
    pub(crate) fn with_tls(mut self, tls: Arc<tls::TlsContext>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Adds the `rc-persistent` dialect.
    pub(crate) fn with_rdma(mut self, rdma: RdmaClient) -> Self {
        self.rdma = Some(rdma);
        self
    }

    /// Opens a connection in a free slot; `None` when at the limit or the connect failed.
    fn open(&mut self, io: &mio::Registry) -> Option<Result<usize, ()>> {
        let open = self.slots.iter().filter(|s| s.is_some()).count();
        if open >= self.limit {
            return None;
        }
        let Ok(stream) = mio::net::TcpStream::connect(self.addr) else {
            return Some(Err(()));
        };
        let _ = stream.set_nodelay(true);
        let mut stream = match &self.tls {
            None => Transport::plain(stream),
            Some(t) => match Transport::tls(stream, &t.config, &t.server_name) {
                Ok(s) => s,
                Err(_) => return Some(Err(())),
            },
        };
        let idx = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        if io
            .register(
                stream.socket_mut(),
                Token(idx),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            return Some(Err(()));
        }
        if let Some(slot) = self.slots.get_mut(idx) {
            *slot = Some(Slot {
                conn: Conn::new(stream, self.tls.clone(), self.read_buffer, self.quickack),
                op: None,
                parked: false,
            });
        }
        Some(Ok(idx))
    }

    /// The most recently used idle connection that is still fit to carry a request. Each one
    /// popped is probed first ([`Conn::idle_is_healthy`]): one the server closed, or that holds
    /// bytes nobody asked for, is closed here, so it costs the op no attempt (readiness on an
    /// idle connection may not have been seen yet when the next op starts).
    fn healthy_idle(&mut self, io: &mio::Registry) -> Option<usize> {
        while let Some(idx) = self.idle.pop() {
            let healthy = self
                .slots
                .get_mut(idx)
                .and_then(Option::as_mut)
                .is_some_and(|s| s.conn.idle_is_healthy());
            if healthy {
                return Some(idx);
            }
            self.close(idx, io);
        }
        None
    }

    fn close(&mut self, idx: usize, io: &mio::Registry) {
        if let Some(mut slot) = self.slots.get_mut(idx).and_then(Option::take) {
            let _ = io.deregister(slot.conn.stream.socket_mut());
            if slot.op.is_some() {
                self.active -= 1;
            }
        }
        self.idle.retain(|&i| i != idx);
    }

    /// Applies a driven step: completion, connection reuse or close.
    fn settle(
        &mut self,
        idx: usize,
        key: OpKey,
        step: Step,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        let Step::Finished { outcome, reusable } = step else {
            return;
        };
        if let Some(r) = self.rdma.as_mut() {
            let verdict = self
                .slots
                .get_mut(idx)
                .and_then(Option::as_mut)
                .and_then(|s| s.conn.verdict.take());
            r.finish(key, verdict, matches!(outcome, Outcome::Done { .. }));
        }
        done.push((key, outcome));
        if reusable {
            if let Some(Some(slot)) = self.slots.get_mut(idx) {
                slot.op = None;
                self.active -= 1;
                self.idle.push(idx);
            }
        } else {
            self.close(idx, io);
        }
    }

    /// Builds `op`'s request on slot `idx` (free, or just un-parked) and drives it.
    fn launch(
        &mut self,
        idx: usize,
        key: OpKey,
        op: &mut InFlight,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        let prepared = self.rdma.as_mut().and_then(|r| r.prepare(key, op));
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            if let Some(r) = self.rdma.as_mut() {
                r.finish(key, None, false);
            }
            done.push((key, Outcome::transport(false)));
            return;
        };
        let body = if op.kind == OpKind::Put && prepared.is_none() {
            op.buf_len()
        } else {
            0
        };
        let extra = prepared.as_ref().map(|p| p.headers.as_slice());
        let encoded = match slot.conn.head_buf(op, body) {
            Some(head) => request::encode(
                &self.endpoint,
                &self.signer,
                &mut self.dates,
                op,
                extra,
                head,
            ),
            // Only a connection whose last exchange ended reusably is pooled; never here.
            None => Err(Outcome::transport(false)),
        };
        if let Err(outcome) = encoded {
            if slot.conn.unsent() {
                self.idle.push(idx);
            } else {
                self.close(idx, io);
            }
            if let Some(r) = self.rdma.as_mut() {
                r.finish(key, None, false);
            }
            done.push((key, outcome));
            return;
        }
        slot.conn.begin(prepared.map(|p| p.crc));
        slot.op = Some(key);
        self.active += 1;
        op.phase = Phase::Active { conn: idx };
        let step = slot.conn.drive(op, true);
        self.settle(idx, key, step, io, done);
    }

    /// The slot `key` holds parked, un-parked and released (`None` if it holds none).
    fn unpark(&mut self, key: OpKey, op: &InFlight) -> Option<usize> {
        let Phase::Active { conn: idx } = op.phase else {
            return None;
        };
        let slot = self.slots.get_mut(idx)?.as_mut()?;
        if slot.op != Some(key) || !slot.parked {
            return None;
        }
        slot.parked = false;
        slot.op = None;
        self.active -= 1;
        Some(idx)
    }

    /// The RDMA dialect's doorbell rang: resume or complete the parked ops it names.
    fn on_offload(&mut self, ops: &mut Slab, io: &mio::Registry, done: &mut Finished) {
        let Some(r) = self.rdma.as_mut() else {
            return;
        };
        for ev in r.drain() {
            match ev {
                Event::Resume(key) => {
                    let Some(op) = ops.get_mut(key) else {
                        continue;
                    };
                    if let Some(idx) = self.unpark(key, op) {
                        self.launch(idx, key, op, io, done);
                    }
                }
                Event::Readmit(key) => {
                    let Some(op) = ops.get_mut(key) else {
                        continue;
                    };
                    if let Some(idx) = self.unpark(key, op) {
                        self.admit_and_launch(idx, key, op, io, done);
                    }
                }
                Event::Complete(key, outcome) => {
                    let Some(op) = ops.get(key) else {
                        continue;
                    };
                    if let Some(idx) = self.unpark(key, op) {
                        // Readiness was ignored while parked: probe before pooling it.
                        let healthy = self
                            .slots
                            .get_mut(idx)
                            .and_then(Option::as_mut)
                            .is_some_and(|s| s.conn.idle_is_healthy());
                        if healthy {
                            self.idle.push(idx);
                        } else {
                            self.close(idx, io);
                        }
                        done.push((key, outcome));
                    }
                }
            }
        }
    }
    /// Lets the RDMA dialect admit `op` on slot `idx` (it may park it for off-loop work), then
    /// builds and drives its request unless parked or failed.
    fn admit_and_launch(
        &mut self,
        idx: usize,
        key: OpKey,
        op: &mut InFlight,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        // An RDMA dialect may need work off this thread first (pairing, a v2 exchange).
        if let (Some(r), Some(now)) = (self.rdma.as_mut(), self.dates.now()) {
            match r.admit(key, op, now, io) {
                Admit::Now => {}
                Admit::Parked => {
                    if let Some(Some(slot)) = self.slots.get_mut(idx) {
                        slot.op = Some(key);
                        slot.parked = true;
                        self.active += 1;
                        op.phase = Phase::Active { conn: idx };
                    } else {
                        r.abort(key);
                        done.push((key, Outcome::transport(false)));
                    }
                    return;
                }
                Admit::Failed(outcome) => {
                    self.idle.push(idx);
                    done.push((key, outcome));
                    return;
                }
            }
        }
        self.launch(idx, key, op, io, done);
    }
}

impl Fabric for HttpFabric {
    fn path(&self) -> DataPath {
        DataPath::Http
    }

    fn start(
        &mut self,
        key: OpKey,
        op: &mut InFlight,
        io: &mio::Registry,
        done: &mut Finished,
    ) -> bool {
        let idx = match self.healthy_idle(io) {
            Some(i) => i,
            None => match self.open(io) {
                None => return false,
                Some(Ok(i)) => i,
                Some(Err(())) => {
                    done.push((key, Outcome::transport(false)));
                    return true;
                }
            },
        };
        self.admit_and_launch(idx, key, op, io, done);
        true
    }

    fn path_of(&mut self, key: OpKey) -> (DataPath, WireDialect) {
        match self
            .rdma
            .as_mut()
            .map(|r| (r.took_rdma(key), r.rdma_path()))
        {
            Some((Some(dialect), path)) => (path, dialect),
            _ => (DataPath::Http, WireDialect::Http),
        }
    }

    fn on_ready(&mut self, token: Token, ops: &mut Slab, io: &mio::Registry, done: &mut Finished) {
        if token == NOTIFY {
            self.on_offload(ops, io, done);
            return;
        }
        let idx = token.0;
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        if slot.parked {
            // Nothing sent yet; `launch` checks the connection when it writes.
            return;
        }
        let Some(key) = slot.op else {
            // An idle connection reported readiness: fine if nothing is there (a stale edge);
            // if the server closed it or sent bytes nobody asked for, it cannot be reused.
            if !slot.conn.idle_is_healthy() {
                self.close(idx, io);
            }
            return;
        };
        let Some(op) = ops.get(key) else {
            self.close(idx, io);
            return;
        };
        let step = slot.conn.drive(op, false);
        self.settle(idx, key, step, io, done);
    }

    fn abort(&mut self, op: &InFlight, io: &mio::Registry) {
        if let Phase::Active { conn } = op.phase {
            let key = self
                .slots
                .get(conn)
                .and_then(Option::as_ref)
                .and_then(|s| s.op);
            self.close(conn, io);
            if let (Some(r), Some(key)) = (self.rdma.as_mut(), key) {
                r.abort(key);
            }
        }
    }

    fn active(&self) -> usize {
        self.active
    }
}
