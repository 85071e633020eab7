//! The HTTP transport: S3 requests over a per-worker pool of keep-alive TCP connections.
//!
//! Bounded in-flight per connection: exactly one request at a time (no pipelining: S3 servers
//! differ in how they treat pipelined requests, and one broken response would poison every
//! request queued behind it). Concurrency comes from up to `connections_per_worker`
//! connections. Connections set `TCP_NODELAY` (a request head is one small write that must not
//! wait for an ACK). `https://` endpoints get TLS on every connection ([`tls`]), handshake and
//! records driven by the same readiness events.
//!
//! The transport knows no payload dialect. What a layer above it (the RDMA dialects,
//! `fabric/http_with_dialects.rs`) may ask of it, in its own neutral terms:
//! - [`HttpFabric::send`] an op's exchange with extra request headers and a [`ReplyJudge`]
//!   ([`Carried`]): the payload then moves outside the body, and the judge, not the HTTP
//!   rules, plans the answer;
//! - [`HttpFabric::park`] an op on a reserved connection (nothing sent; readiness ignored)
//!   and [`HttpFabric::unpark`] it later, to send or to [`HttpFabric::release`] the slot;
//! - [`HttpFabric::take_ended`]: every exchange's end, with what its judge noted.

mod conn;
mod request;
pub(crate) mod response;
pub(crate) mod tls;
mod window;

pub(crate) use conn::connect_finished;

use std::net::SocketAddr;
use std::sync::Arc;

use mio::{Interest, Token};
use s3_lite::net::transport::Transport;
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::Signer;

use self::conn::{Conn, Step};
use self::request::DateCache;
use self::response::Plan;
use self::window::ConnWindow;
use super::{Finished, Outcome, Retry};
use crate::inflight::{InFlight, OpKey, OpKind, Phase, Slab};
use ring_api::ErrorCode;

/// Judges the answer to an exchange whose payload moves outside the HTTP body (supplied with
/// the exchange by the layer that adds such exchanges; the transport only calls it).
pub(crate) trait ReplyJudge: std::fmt::Debug + Send {
    /// What a judgement teaches its caller, handed back when the exchange ends.
    type Note: std::fmt::Debug + Copy + Send;
    /// The plan for `head`, the answer to `op`'s request.
    fn judge(&self, op: &InFlight, head: &s3_lite::http::ResponseHead) -> (Plan, Self::Note);

    /// Whether an exchange that ended with `note` holds its op: its success is not final
    /// until the layer above says so (the op keeps its connection, parked, and completes
    /// through that layer; see [`Ended::held`]).
    fn holds(_note: &Self::Note) -> bool {
        false
    }
}

/// What an exchange carries beyond the op's own request: extra (signed) headers, and the
/// judge of its answer. The request then has no body (the payload moves elsewhere).
#[derive(Debug)]
pub(crate) struct Carried<J> {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) judge: J,
}

/// An exchange's end, reported to the layer above ([`HttpFabric::take_ended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ended<N> {
    pub(crate) key: OpKey,
    /// What the exchange's judge noted (`None`: no judge, or no answer head).
    pub(crate) note: Option<N>,
    /// Whether the attempt succeeded.
    pub(crate) success: bool,
    /// The outcome of an exchange its judge holds ([`ReplyJudge::holds`]): the op was not
    /// completed; its connection stays parked for it until the layer above completes it.
    pub(crate) held: Option<Outcome>,
}

/// A connection slot for a new op ([`HttpFabric::take_slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotGrant {
    /// Slot `idx` holds a connection for the op.
    Slot(usize),
    /// Every connection is busy: try again later.
    Busy,
    /// A new connection could not be opened.
    Broken,
}

/// Connection slot `i` uses `Token(i)`; the worker's waker uses a token above every slot.
#[derive(Debug)]
struct Slot<J: ReplyJudge> {
    conn: Conn<J>,
    op: Option<OpKey>,
    /// Reserved for `op`, which waits for work elsewhere (nothing on the wire yet).
    parked: bool,
    /// The connection window's epoch when the current request was sent.
    epoch: u64,
}

/// A worker's HTTP transport to one endpoint; `J` judges the answers of carried exchanges.
#[derive(Debug)]
pub(crate) struct HttpFabric<J: ReplyJudge> {
    addr: SocketAddr,
    endpoint: Endpoint,
    /// TLS for an `https://` endpoint.
    tls: Option<Arc<tls::TlsContext>>,
    signer: Arc<Signer>,
    dates: DateCache,
    slots: Vec<Option<Slot<J>>>,
    /// Slots holding an idle, kept-alive connection (most recently used last).
    idle: Vec<usize>,
    /// How many connections may be open now: `connections_per_worker`, narrowed while the
    /// server throttles ([`window`]).
    window: ConnWindow,
    read_buffer: usize,
    quickack: bool,
    active: usize,
    /// Exchanges that ended since the last [`HttpFabric::take_ended`].
    ended: Vec<Ended<J::Note>>,
}

impl<J: ReplyJudge> HttpFabric<J> {
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
            window: ConnWindow::new(limit),
            read_buffer: read_buffer.max(4096),
            quickack,
            active: 0,
            ended: Vec::new(),
        }
    }

    /// Speaks TLS on every connection (an `https://` endpoint).
    pub(crate) fn with_tls(mut self, tls: Arc<tls::TlsContext>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The current request date (`None` if the clock is unusable).
    pub(crate) fn now(&mut self) -> Option<s3_lite::sigv4::AmzDate> {
        self.dates.now()
    }

    /// Every exchange end since the last call (oldest first).
    pub(crate) fn take_ended(&mut self) -> Vec<Ended<J::Note>> {
        std::mem::take(&mut self.ended)
    }

    fn end(&mut self, key: OpKey, note: Option<J::Note>, success: bool) {
        self.ended.push(Ended {
            key,
            note,
            success,
            held: None,
        });
    }

    /// A connection for a new op: the most recent healthy idle one, else a new one.
    pub(crate) fn take_slot(&mut self, io: &mio::Registry) -> SlotGrant {
        match self.healthy_idle(io) {
            Some(i) => SlotGrant::Slot(i),
            None => match self.open(io) {
                None => SlotGrant::Busy,
                Some(Ok(i)) => SlotGrant::Slot(i),
                Some(Err(())) => SlotGrant::Broken,
            },
        }
    }

    /// Returns slot `idx` (holding no op) to the idle pool unused.
    pub(crate) fn pool(&mut self, idx: usize) {
        self.idle.push(idx);
    }

    /// Opens a connection in a free slot; `None` when the window is full.
    fn open(&mut self, io: &mio::Registry) -> Option<Result<usize, ()>> {
        if self.open_count() >= self.window.current() {
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
                epoch: self.window.epoch(),
            });
        }
        Some(Ok(idx))
    }

    fn open_count(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Teaches the window what an attempt's end says about the server's load: a refusal for
    /// load (`503 SlowDown`, `429`, or a new connection dropped before any answer) while
    /// several requests held connections narrows it, and idle connections above it are closed
    /// (the server counts them too); a success widens it. A refusal the window absorbed
    /// ([`ConnWindow::on_throttle`]) becomes [`Retry::Throttled`].
    fn learn(&mut self, idx: usize, outcome: Outcome, io: &mio::Registry) -> Outcome {
        let Some(slot) = self.slots.get(idx).and_then(Option::as_ref) else {
            return outcome;
        };
        let (code, class) = match outcome {
            Outcome::Done { .. } => {
                self.window.on_success();
                return outcome;
            }
            Outcome::Failed {
                code,
                class,
                retry: Retry::Yes,
            } if code == ErrorCode::SlowDown
                || (code == ErrorCode::ConnectionReset && slot.conn.dropped_unanswered()) =>
            {
                (code, class)
            }
            Outcome::Failed { .. } => return outcome,
        };
        let absorbed = self.window.on_throttle(slot.epoch, self.active);
        let excess = self.open_count().saturating_sub(self.window.current());
        for _ in 0..excess {
            let Some(&oldest) = self.idle.first() else {
                break;
            };
            self.close(oldest, io);
        }
        if absorbed {
            Outcome::fail(code, class, Retry::Throttled)
        } else {
            outcome
        }
    }

    /// The most recently used idle connection that is still fit to carry a request. Each one
    /// popped is probed first ([`Conn::idle_is_healthy`]): one the server closed, or that holds
    /// bytes nobody asked for, is closed here, so it costs the op no attempt (readiness on an
    /// idle connection may not have been seen yet when the next op starts).
    fn healthy_idle(&mut self, io: &mio::Registry) -> Option<usize> {
        while let Some(idx) = self.idle.pop() {
            if self.is_healthy(idx) {
                return Some(idx);
            }
            self.close(idx, io);
        }
        None
    }

    /// Whether slot `idx` holds a connection still fit to carry a request
    /// ([`Conn::idle_is_healthy`]).
    fn is_healthy(&mut self, idx: usize) -> bool {
        self.slots
            .get_mut(idx)
            .and_then(Option::as_mut)
            .is_some_and(|s| s.conn.idle_is_healthy())
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
        let outcome = self.learn(idx, outcome, io);
        let note = self
            .slots
            .get_mut(idx)
            .and_then(Option::as_mut)
            .and_then(|s| s.conn.note.take());
        let success = matches!(outcome, Outcome::Done { .. });
        if success && note.as_ref().is_some_and(J::holds) {
            // The judge holds the op (its bytes still land): it keeps this connection,
            // parked, until the layer above completes it. A connection that cannot be kept
            // fails the attempt instead (retried): no success without the bytes.
            if reusable && let Some(Some(slot)) = self.slots.get_mut(idx) {
                slot.parked = true;
                self.ended.push(Ended {
                    key,
                    note,
                    success,
                    held: Some(outcome),
                });
                return;
            }
            self.end(key, note, false);
            done.push((key, Outcome::transport(false)));
            self.close(idx, io);
            return;
        }
        self.end(key, note, success);
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

    /// Builds `op`'s request on slot `idx` (free, or just un-parked), with what `carried`
    /// adds, and drives it.
    pub(crate) fn send(
        &mut self,
        idx: usize,
        key: OpKey,
        op: &mut InFlight,
        carried: Option<Carried<J>>,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            self.end(key, None, false);
            done.push((key, Outcome::transport(false)));
            return;
        };
        let body = if op.kind == OpKind::Put && carried.is_none() {
            op.buf_len()
        } else {
            0
        };
        let extra = carried.as_ref().map(|c| c.headers.as_slice());
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
            self.end(key, None, false);
            done.push((key, outcome));
            return;
        }
        slot.conn.begin(carried.map(|c| c.judge));
        slot.op = Some(key);
        slot.epoch = self.window.epoch();
        self.active += 1;
        op.phase = Phase::Active { conn: idx };
        let step = slot.conn.drive(op, true);
        self.settle(idx, key, step, io, done);
    }

    /// Reserves slot `idx` for `op`, which waits for work elsewhere: nothing is sent, and
    /// readiness on it is ignored until [`HttpFabric::unpark`]. `false` if the slot is gone.
    pub(crate) fn park(&mut self, idx: usize, key: OpKey, op: &mut InFlight) -> bool {
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return false;
        };
        slot.op = Some(key);
        slot.parked = true;
        self.active += 1;
        op.phase = Phase::Active { conn: idx };
        true
    }

    /// Returns an un-parked slot that will carry no request: to the idle pool when its
    /// connection is still fit (readiness was ignored while parked, so it is probed), else
    /// closed.
    pub(crate) fn release(&mut self, idx: usize, io: &mio::Registry) {
        if self.is_healthy(idx) {
            self.idle.push(idx);
        } else {
            self.close(idx, io);
        }
    }

    /// The slot `key` holds parked, un-parked and released (`None` if it holds none).
    pub(crate) fn unpark(&mut self, key: OpKey, op: &InFlight) -> Option<usize> {
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

    /// Readiness on connection `token`: drives the exchange on it.
    pub(crate) fn on_ready(
        &mut self,
        token: Token,
        ops: &mut Slab,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        let idx = token.0;
        let Some(Some(slot)) = self.slots.get_mut(idx) else {
            return;
        };
        if slot.parked {
            // Nothing sent yet; `send` checks the connection when it writes.
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

    /// Drops `op`'s connection (its exchange or reservation); the op it held, if any.
    pub(crate) fn abort(&mut self, op: &InFlight, io: &mio::Registry) -> Option<OpKey> {
        let Phase::Active { conn } = op.phase else {
            return None;
        };
        let key = self
            .slots
            .get(conn)
            .and_then(Option::as_ref)
            .and_then(|s| s.op);
        self.close(conn, io);
        key
    }

    /// Ops holding a connection (sending, or parked).
    pub(crate) fn active(&self) -> usize {
        self.active
    }
}
