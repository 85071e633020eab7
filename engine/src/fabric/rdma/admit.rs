//! Admission of ops into the RDMA dialects, and the results of the work they run off the
//! worker thread: `RdmaClient::admit` decides, without blocking, whether an op waits (for a
//! pairing, started here when due, or for its hipobj-rc-v2 exchange, launched here), and
//! `RdmaClient::drain` turns what the pairing and exchange threads reported through `offload`
//! into per-op [`Event`]s for the fabric. The module docs of `rdma` say why ops wait for a
//! pairing rather than go over HTTP at once.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Instant;

use super::offload::{Mailbox, Msg, Poster};
use super::{
    AUTO_PAIR_WAIT, Admit, Dialect, Due, Event, Fabric, MIN_WAIT, Owner, RETRY_PAIR, RdmaClient,
    Running, State, connect, rc_eligible, v2,
};
use ring_api::WireDialect;

use crate::fabric::rc::RcKind;
use crate::inflight::{InFlight, OpKey};

impl RdmaClient {
    /// Decides, before its request is built, whether `op` waits for off-loop work: a pairing
    /// (started here if due) or its hipobj-rc-v2 exchange (launched here). Never blocks.
    pub(crate) fn admit(
        &mut self,
        key: OpKey,
        op: &InFlight,
        now: s3_lite::sigv4::AmzDate,
        io: &mio::Registry,
    ) -> Admit {
        match self.active() {
            WireDialect::RcPersistent => self.admit_rc(key, op, now, io),
            WireDialect::RcV2 => self.admit_v2(key, op, now, io),
            _ => Admit::Now,
        }
    }

    fn admit_rc(
        &mut self,
        key: OpKey,
        op: &InFlight,
        now: s3_lite::sigv4::AmzDate,
        io: &mio::Registry,
    ) -> Admit {
        if self.http_next.contains(&key) || !rc_eligible(op) {
            return Admit::Now;
        }
        if let State::Paired(l) = &self.state
            && l.qp.is_failed()
        {
            self.state = State::Unpaired;
        }
        if let State::RetryAt(t) = self.state
            && Instant::now() >= t
        {
            self.state = State::Unpaired;
        }
        if matches!(self.state, State::Unpaired) {
            self.start_pairing(now, io);
        }
        let wait = op
            .deadline
            .is_none_or(|d| d.saturating_duration_since(Instant::now()) >= MIN_WAIT);
        match self.state {
            State::Pairing { slow: false, .. } if wait => {
                self.waiters.push(key);
                Admit::Parked
            }
            _ => Admit::Now,
        }
    }

    /// The doorbell's sending half (the mailbox is made and registered on first use).
    fn poster(&mut self, io: &mio::Registry) -> Option<Poster> {
        if self.mailbox.is_none() {
            self.mailbox = Mailbox::new(io).ok();
        }
        self.mailbox.as_ref().map(Mailbox::poster)
    }

    /// Starts a pairing thread (and, under `Auto`, the timer that ends its ops' wait).
    fn start_pairing(&mut self, now: s3_lite::sigv4::AmzDate, io: &mio::Registry) {
        let retry = State::RetryAt(Instant::now() + RETRY_PAIR);
        let Some(post) = self.poster(io) else {
            self.state = retry;
            return;
        };
        self.epoch += 1;
        let epoch = self.epoch;
        let target = connect::Target {
            addr: self.addr,
            endpoint: self.endpoint.clone(),
            signer: Arc::clone(&self.signer),
            home: self.home.clone(),
        };
        let p = post.clone();
        let spawned = std::thread::Builder::new()
            .name("hipobj-rc-pair".to_owned())
            .spawn(move || {
                let started = Instant::now();
                let result = connect::pair(&target, now, connect::LIMIT);
                tracing::debug!(
                    "rdma: pairing {epoch} with {} over {:?} ended after {:?}: {:?}",
                    target.addr,
                    target.home.kind(),
                    started.elapsed(),
                    result.as_ref().map(|_| "paired")
                );
                p.post(Msg::Paired { epoch, result });
            });
        if spawned.is_err() {
            self.state = retry;
            return;
        }
        // After a pairing that could not reach the endpoint, later ones run without holding
        // ops (they go over HTTP until a link is up). Without the timer, Auto's ops do not
        // wait at all.
        let slow = !self.hold_ops
            || (self.mode == Fabric::Auto
                && std::thread::Builder::new()
                    .name("hipobj-rc-pair-wait".to_owned())
                    .spawn(move || {
                        std::thread::sleep(AUTO_PAIR_WAIT);
                        post.post(Msg::PairSlow { epoch });
                    })
                    .is_err());
        self.state = State::Pairing { epoch, slow };
    }

    fn admit_v2(
        &mut self,
        key: OpKey,
        op: &InFlight,
        now: s3_lite::sigv4::AmzDate,
        io: &mio::Registry,
    ) -> Admit {
        self.moved.remove(&key);
        if matches!(self.state, State::Plain) || self.http_next.remove(&key) {
            return Admit::Now;
        }
        // UploadPart over v2 names the part in the target's query; a server that did not
        // advertise `mp` may ignore the query and store the part as the whole object.
        if op.part_target().is_some() && !self.learned.multipart() {
            return Admit::Now;
        }
        let left = op.deadline.map_or(v2::LIMIT, |d| {
            d.saturating_duration_since(Instant::now()).min(v2::LIMIT)
        });
        if left < v2::MIN_LIMIT {
            return Admit::Now;
        }
        self.now = Some(now);
        if self.v2.is_none() {
            match v2::V2Device::new(self.home.device()) {
                Ok(d) => self.v2 = Some(d),
                Err(_) => return Admit::Now,
            }
        }
        let token = self.take_token();
        let Some(dev) = self.v2.as_ref() else {
            return Admit::Now;
        };
        let end = Instant::now() + left;
        match v2::V2Op::start(
            self.ctx(),
            dev,
            op,
            end,
            now,
            token,
            self.waker.as_ref(),
            io,
        ) {
            v2::Launch::Http => Admit::Now,
            v2::Launch::Failed(o) => Admit::Failed(o),
            v2::Launch::Running(v2op) => {
                self.next_id += 1;
                let id = self.next_id;
                self.owners.insert(token, Owner::V2(key));
                self.timers.push(Reverse((end, Due::V2End(key, id))));
                self.running.insert(key, Running { id, op: v2op });
                Admit::Parked
            }
        }
    }

    /// Takes what off-loop work reported (on the doorbell's readiness) and turns it into
    /// per-op events.
    pub(crate) fn drain(&mut self) -> Vec<Event> {
        let mut events = std::mem::take(&mut self.events);
        let Some(mb) = self.mailbox.as_mut() else {
            return events;
        };
        for m in mb.drain() {
            match m {
                Msg::Paired { epoch, result } => {
                    if !matches!(self.state, State::Pairing { epoch: e, .. } if e == epoch) {
                        continue;
                    }
                    self.hold_ops = result.is_ok();
                    // Negotiating: an endpoint that does not know the pairing route (a v2-only
                    // or plain S3 server: 400/404/405, a fabric-less gateway: 501) does not
                    // speak rc-persistent; its waiting ops are admitted again (hipobj-rc-v2
                    // next). Other refusals (403, 503...) may pass and keep the old handling.
                    if self.dialect == Dialect::Auto
                        && matches!(
                            result,
                            Err(connect::ConnectError::Declined(400 | 404 | 405 | 501))
                        )
                    {
                        self.learned.refuse_rc_persistent();
                        self.state = State::Unpaired;
                        events.extend(self.waiters.drain(..).map(Event::Readmit));
                        continue;
                    }
                    self.state = match result {
                        Ok(l) => State::Paired(Box::new(l)),
                        // Auto on a verbs host against a soft gateway: pair again over the
                        // soft fabric (the next op; this one's waiters go over HTTP).
                        Err(connect::ConnectError::OtherFabric(RcKind::Soft))
                            if self.mode == Fabric::Auto && self.home.kind() != RcKind::Soft =>
                        {
                            self.home = connect::Home::Soft(self.local_ip());
                            self.v2 = None;
                            State::Unpaired
                        }
                        Err(
                            connect::ConnectError::Declined(_)
                            | connect::ConnectError::OtherFabric(_),
                        ) if self.mode == Fabric::Auto => State::Plain,
                        Err(_) => State::RetryAt(Instant::now() + RETRY_PAIR),
                    };
                    events.extend(self.waiters.drain(..).map(Event::Resume));
                }
                Msg::PairSlow { epoch } => {
                    if let State::Pairing { epoch: e, slow } = &mut self.state
                        && *e == epoch
                    {
                        *slow = true;
                        tracing::debug!(
                            "rdma: pairing {epoch} still running after {AUTO_PAIR_WAIT:?} \
                             (Auto): {} waiting op(s) and later ones go over HTTP until it ends",
                            self.waiters.len()
                        );
                        events.extend(self.waiters.drain(..).map(Event::Resume));
                    }
                }
            }
        }
        events
    }
}
