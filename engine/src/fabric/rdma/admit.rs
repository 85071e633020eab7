//! Admission of ops into the RDMA dialects, and the pairing's steps: `RdmaClient::admit`
//! decides, without blocking, whether an op waits (for a pairing, started here when due, or
//! for its hipobj-rc-v2 exchange, started here); the pairing's end (its answer, its timers)
//! decides the endpoint's state and resumes or re-admits its waiting ops, as per-op [`Event`]s
//! that `RdmaClient::drain` hands to the fabric. The module docs of `rdma` say why ops wait
//! for a pairing rather than go over HTTP at once.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Instant;

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

    /// Starts a pairing on the worker (and, under `Auto`, the timer that ends its ops'
    /// wait); the dialects' timer bounds it by `connect::LIMIT`.
    fn start_pairing(&mut self, now: s3_lite::sigv4::AmzDate, io: &mio::Registry) {
        self.epoch += 1;
        let epoch = self.epoch;
        let target = connect::Target {
            addr: self.addr,
            endpoint: self.endpoint.clone(),
            signer: Arc::clone(&self.signer),
            home: self.home.clone(),
            tls: self.tls.clone(),
        };
        let token = self.take_token();
        let p = match connect::Pairing::start(&target, now, token, self.waker.as_ref(), io) {
            Ok(p) => p,
            Err(e) => {
                self.state = State::Pairing { epoch, slow: true };
                self.paired(epoch, Err(e));
                return;
            }
        };
        let started = Instant::now();
        self.owners.insert(token, Owner::Pair);
        self.pairing = Some((epoch, Box::new(p)));
        self.timers
            .push(Reverse((started + connect::LIMIT, Due::PairEnd(epoch))));
        // After a pairing that could not reach the endpoint, later ones run without holding
        // ops (they go over HTTP until a link is up). Under Auto, ops wait at most
        // AUTO_PAIR_WAIT.
        let slow = !self.hold_ops;
        if !slow && self.mode == Fabric::Auto {
            self.timers
                .push(Reverse((started + AUTO_PAIR_WAIT, Due::PairWait(epoch))));
        }
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
            tracing::debug!(
                plain = matches!(self.state, State::Plain),
                "v2: op goes over HTTP (the endpoint is plain, or this op's last answer said so)"
            );
            return Admit::Now;
        }
        // UploadPart over v2 names the part in the target's query; a server that did not
        // advertise `mp` may ignore the query and store the part as the whole object.
        if op.part_target().is_some() && !self.learned.multipart() {
            return Admit::Now;
        }
        let limit = self.v2_limit;
        let left = op.deadline.map_or(limit, |d| {
            d.saturating_duration_since(Instant::now()).min(limit)
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
            v2::Launch::Http => {
                tracing::debug!("v2: op goes over HTTP (v2 does not apply to it)");
                Admit::Now
            }
            v2::Launch::Failed(o) => Admit::Failed(o),
            v2::Launch::Running(v2op) => {
                self.next_id += 1;
                let id = self.next_id;
                self.owners.insert(token, Owner::V2(key));
                let mut v2op = v2op;
                // A verbs CQ's completion wakes the worker through its channel's fd.
                let cq_token = self.take_token();
                if v2op.watch_cq(cq_token, io) {
                    self.owners.insert(cq_token, Owner::V2Cq(key));
                }
                self.timers.push(Reverse((end, Due::V2End(key, id))));
                self.running.insert(key, Running { id, op: v2op });
                Admit::Parked
            }
        }
    }

    /// The events the dialects' steps produced since the last call.
    pub(crate) fn drain(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// Readiness on the pairing's side connection.
    pub(super) fn on_pairing_ready(&mut self, io: &mio::Registry) {
        let Some((epoch, p)) = self.pairing.take() else {
            return;
        };
        let token = p.token();
        let started = p.started;
        match p.on_ready(io) {
            Err(p) => self.pairing = Some((epoch, p)),
            Ok(result) => {
                self.owners.remove(&token);
                tracing::debug!(
                    "rdma: pairing {epoch} with {} over {:?} ended after {:?}: {:?}",
                    self.addr,
                    self.home.kind(),
                    started.elapsed(),
                    result.as_ref().map(|_| "paired")
                );
                self.paired(epoch, result);
            }
        }
    }

    /// The pairing `epoch` has used its time: it ends as unreachable.
    pub(super) fn pairing_timed_out(&mut self, epoch: u64, io: &mio::Registry) {
        if let Some((e, p)) = self.pairing.take() {
            if e != epoch {
                self.pairing = Some((e, p));
                return;
            }
            self.owners.remove(&p.token());
            p.close(io);
            self.paired(epoch, Err(connect::ConnectError::Transport));
        }
    }

    /// A pairing ended: the state it leaves, and its waiting ops resumed or re-admitted.
    fn paired(&mut self, epoch: u64, result: Result<connect::Link, connect::ConnectError>) {
        if !matches!(self.state, State::Pairing { epoch: e, .. } if e == epoch) {
            return;
        }
        self.hold_ops = result.is_ok();
        // A refused certificate: the waiting ops fail as the HTTP path fails them over the
        // same TLS context (never sent another way); later ops meet it over HTTPS.
        if matches!(result, Err(connect::ConnectError::CertificateRefused)) {
            self.state = State::RetryAt(Instant::now() + RETRY_PAIR);
            let w: Vec<OpKey> = self.waiters.drain(..).collect();
            self.events.extend(
                w.into_iter()
                    .map(|k| Event::Complete(k, crate::fabric::http::tls::CERTIFICATE_REFUSED)),
            );
            return;
        }
        // Negotiating: an endpoint that does not know the pairing route (a v2-only or plain
        // S3 server: 400/404/405, a fabric-less gateway: 501) does not speak rc-persistent;
        // its waiting ops are admitted again (hipobj-rc-v2 next). Other refusals (403,
        // 503...) may pass and keep the old handling.
        if self.dialect == Dialect::Auto
            && matches!(
                result,
                Err(connect::ConnectError::Declined(400 | 404 | 405 | 501))
            )
        {
            self.learned.refuse_rc_persistent();
            self.state = State::Unpaired;
            let w: Vec<OpKey> = self.waiters.drain(..).collect();
            self.events.extend(w.into_iter().map(Event::Readmit));
            return;
        }
        self.state = match result {
            Ok(l) => State::Paired(Box::new(l)),
            // Auto on a verbs host against a soft gateway: pair again over the soft fabric
            // (the next op; this one's waiters go over HTTP).
            Err(connect::ConnectError::OtherFabric(RcKind::Soft))
                if self.mode == Fabric::Auto && self.home.kind() != RcKind::Soft =>
            {
                self.home = connect::Home::Soft(self.local_ip());
                self.v2 = None;
                State::Unpaired
            }
            Err(connect::ConnectError::Declined(_) | connect::ConnectError::OtherFabric(_))
                if self.mode == Fabric::Auto =>
            {
                State::Plain
            }
            Err(_) => State::RetryAt(Instant::now() + RETRY_PAIR),
        };
        let w: Vec<OpKey> = self.waiters.drain(..).collect();
        self.events.extend(w.into_iter().map(Event::Resume));
    }

    /// The pairing `epoch` has run longer than its ops wait for (`Auto`): they and later
    /// ones go over HTTP until it ends.
    pub(super) fn pairing_slow(&mut self, epoch: u64) {
        if let State::Pairing { epoch: e, slow } = &mut self.state
            && *e == epoch
        {
            *slow = true;
            tracing::debug!(
                "rdma: pairing {epoch} still running after {AUTO_PAIR_WAIT:?} (Auto): {} \
                 waiting op(s) and later ones go over HTTP until it ends",
                self.waiters.len()
            );
            let w: Vec<OpKey> = self.waiters.drain(..).collect();
            self.events.extend(w.into_iter().map(Event::Resume));
        }
    }
}
