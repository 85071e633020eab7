//! The worker's fabric: the HTTP transport ([`HttpFabric`]) composed with the RDMA dialects
//! ([`RdmaClient`]). Neither knows the other; this layer sits above both and decides, per op:
//!
//! 1. a connection slot from the transport ([`HttpFabric::take_slot`]);
//! 2. the dialect's admission ([`RdmaClient::admit`]): send now, park the op on its reserved
//!    connection while work runs elsewhere (a pairing, a hipobj-rc-v2 exchange), or fail;
//! 3. the exchange: the dialect's headers and [`RdmaJudge`] when an RDMA attempt applies
//!    ([`RdmaClient::prepare`]), else the plain HTTP request ([`HttpFabric::send`]);
//! 4. every exchange's end goes back to the dialect ([`RdmaClient::finish`]: what the answer
//!    taught, the window released); readiness of the dialects' side connections and the
//!    worker's tick (their timers, their completions) produce events that resume, re-admit
//!    or complete parked ops.

use mio::Token;
use ring_api::{DataPath, WireDialect};

use super::http::{Carried, HttpFabric, SlotGrant};
use super::rdma::verdict::RdmaJudge;
use super::rdma::{Admit, Event, RdmaClient, ctrl};
use super::{Fabric, Finished, Outcome};
use crate::inflight::{InFlight, OpKey, Slab};

/// A worker's data path to its endpoint: HTTP exchanges, with RDMA dialects when configured.
#[derive(Debug)]
pub(crate) struct HttpWithDialects {
    http: HttpFabric<RdmaJudge>,
    rdma: RdmaClient,
}

impl HttpFabric<RdmaJudge> {
    /// Composes this transport with the RDMA dialects of `rdma`.
    pub(crate) fn with_rdma(self, rdma: RdmaClient) -> HttpWithDialects {
        HttpWithDialects { http: self, rdma }
    }
}

impl HttpWithDialects {
    /// Hands every ended exchange back to the dialects.
    fn report_ends(&mut self) {
        for e in self.http.take_ended() {
            self.rdma.finish(e.key, e.note, e.success, e.held);
        }
    }

    /// Builds `op`'s exchange on slot `idx`: with the dialect's headers and judge when an RDMA
    /// attempt applies, else plain HTTP.
    fn send(
        &mut self,
        idx: usize,
        key: OpKey,
        op: &mut InFlight,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        let carried = self.rdma.prepare(key, op).map(|p| Carried {
            headers: p.headers,
            judge: RdmaJudge {
                crc: p.crc,
                landing: p.landing,
                early: p.early,
            },
        });
        self.http.send(idx, key, op, carried, io, done);
        self.report_ends();
    }

    /// Lets the dialects admit `op` on slot `idx` (they may park it while work runs
    /// elsewhere), then sends its exchange unless parked or failed.
    fn admit_and_send(
        &mut self,
        idx: usize,
        key: OpKey,
        op: &mut InFlight,
        io: &mio::Registry,
        done: &mut Finished,
    ) {
        if let Some(now) = self.http.now() {
            match self.rdma.admit(key, op, now, io) {
                Admit::Now => {}
                Admit::Parked => {
                    if !self.http.park(idx, key, op) {
                        self.rdma.abort(key, io);
                        done.push((key, Outcome::transport(false)));
                    }
                    return;
                }
                Admit::Failed(outcome) => {
                    self.http.pool(idx);
                    done.push((key, outcome));
                    return;
                }
            }
        }
        self.send(idx, key, op, io, done);
    }

    /// Takes the dialects' events: resume, re-admit or complete the parked ops they name.
    fn on_doorbell(&mut self, ops: &mut Slab, io: &mio::Registry, done: &mut Finished) {
        for ev in self.rdma.drain() {
            match ev {
                Event::Resume(key) => {
                    let Some(op) = ops.get_mut(key) else {
                        continue;
                    };
                    if let Some(idx) = self.http.unpark(key, op) {
                        self.send(idx, key, op, io, done);
                    }
                }
                Event::Readmit(key) => {
                    let Some(op) = ops.get_mut(key) else {
                        continue;
                    };
                    if let Some(idx) = self.http.unpark(key, op) {
                        self.admit_and_send(idx, key, op, io, done);
                    }
                }
                Event::Complete(key, outcome) => {
                    let Some(op) = ops.get(key) else {
                        continue;
                    };
                    if let Some(idx) = self.http.unpark(key, op) {
                        self.http.release(idx, io);
                        done.push((key, outcome));
                    }
                }
            }
        }
    }
}

impl Fabric for HttpWithDialects {
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
        match self.http.take_slot(io) {
            SlotGrant::Slot(idx) => self.admit_and_send(idx, key, op, io, done),
            SlotGrant::Busy => return false,
            SlotGrant::Broken => done.push((key, Outcome::transport(false))),
        }
        true
    }

    fn path_of(&mut self, key: OpKey) -> (DataPath, WireDialect) {
        match self.rdma.took_rdma(key) {
            Some(dialect) => (self.rdma.rdma_path(), dialect),
            None => (DataPath::Http, WireDialect::Http),
        }
    }

    fn on_ready(&mut self, token: Token, ops: &mut Slab, io: &mio::Registry, done: &mut Finished) {
        if ctrl::is_ctrl(token) {
            self.rdma.on_ready(token, io);
            self.on_doorbell(ops, io, done);
            return;
        }
        self.http.on_ready(token, ops, io, done);
        self.report_ends();
    }

    fn abort(&mut self, op: &InFlight, io: &mio::Registry) {
        if let Some(key) = self.http.abort(op, io) {
            self.rdma.abort(key, io);
        }
    }

    fn active(&self) -> usize {
        self.http.active()
    }

    fn bind_waker(&mut self, waker: std::sync::Arc<mio::Waker>) {
        self.rdma.bind_waker(waker);
    }

    fn next_timer(&self) -> Option<std::time::Instant> {
        self.rdma.next_timer()
    }

    fn tick(
        &mut self,
        now: std::time::Instant,
        ops: &mut Slab,
        io: &mio::Registry,
        done: &mut Finished,
    ) -> bool {
        self.rdma.tick(now, io);
        if !self.rdma.has_events() {
            return false;
        }
        self.on_doorbell(ops, io, done);
        true
    }
}
