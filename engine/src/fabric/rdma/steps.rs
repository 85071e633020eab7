//! The dialects' work on the worker between admission and the end of an op: readiness of
//! their side connections ([`RdmaClient::on_ready`]), their timers and the completions they
//! wait for ([`RdmaClient::tick`]), each turned into per-op [`Event`]s for the fabric.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;
use ring_api::WireDialect;

use super::{Dialect, Due, Event, Fabric, Owner, RdmaClient, Running, State, v2};
use crate::fabric::soft::Landed;
use crate::fabric::{AUX_VERIFIED, Outcome, Retry};
use crate::inflight::OpKey;
use ring_api::{ErrorClass, ErrorCode};

/// How often a completion a verbs CQ owes is polled for when the CQ has no completion
/// channel (a verbs CQ with one wakes the worker through its fd instead).
const CQ_POLL: Duration = Duration::from_millis(1);

impl RdmaClient {
    /// Where and as whom the side exchanges run.
    pub(super) fn ctx(&self) -> v2::Ctx<'_> {
        v2::Ctx {
            addr: self.addr,
            endpoint: &self.endpoint,
            signer: &self.signer,
            hipobj_signer: self.hipobj_signer.as_ref(),
            learned: &self.learned,
            tls: self.tls.as_ref(),
        }
    }

    /// A fresh token for a side connection.
    pub(super) fn take_token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token += 1;
        if !super::ctrl::is_ctrl(Token(self.next_token)) {
            self.next_token = super::ctrl::CTRL_BASE;
        }
        t
    }

    /// The worker's waker, rung by a soft CQ when a completion arrives.
    pub(crate) fn bind_waker(&mut self, waker: Arc<mio::Waker>) {
        self.waker = Some(waker);
    }

    /// The earliest of the dialects' timers.
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Readiness on a side connection.
    pub(crate) fn on_ready(&mut self, token: Token, io: &mio::Registry) {
        match self.owners.get(&token).copied() {
            Some(Owner::V2(key)) => {
                let Some(mut r) = self.running.remove(&key) else {
                    return;
                };
                let progress = r.op.on_ready(self.ctx(), io);
                self.progress(key, r, progress, io);
            }
            Some(Owner::V2Cq(key)) => {
                let Some(mut r) = self.running.remove(&key) else {
                    return;
                };
                r.op.cq_event();
                let progress = r.op.on_completion();
                self.progress(key, r, progress, io);
            }
            Some(Owner::Pair) => self.on_pairing_ready(io),
            Some(Owner::Cancel)
                if self
                    .cancels
                    .get_mut(&token)
                    .is_some_and(|(c, _)| c.on_ready()) =>
            {
                self.end_cancel(token, io);
            }
            Some(Owner::Cancel) | None => {}
        }
    }

    /// Completes the early-answered GETs whose bytes have landed, or never will: covered and
    /// equal to the checksum the answer named, a success (verified when it named one); a
    /// different checksum, an integrity failure; a broken digest, a transport failure (retried);
    /// a failed link, a transport failure retried free (one fault for every op on the link).
    /// Still landing: left for the landing's watch to wake the worker.
    fn check_landings(&mut self) {
        if self.landing.is_empty() {
            return;
        }
        let link_up = matches!(&self.state, State::Paired(l) if !l.qp.is_failed());
        let keys: Vec<OpKey> = self.landing.keys().copied().collect();
        for key in keys {
            let Some(w) = self.landing.get(&key) else {
                continue;
            };
            let state = w
                .attempt
                .landing
                .as_ref()
                .map_or(Landed::Broken, |l| l.state_of_first(w.awaits.bytes));
            let outcome = match (state, w.awaits.want) {
                (Landed::Pending, _) if link_up => continue,
                // The shared link failed under every op landing on it (a stall past the
                // QP's timeout, a reset): one fault, so these retries are free (immediate,
                // bounded per op) instead of each being charged to the retry budget, which
                // a drop at concurrency 256 emptied (issue 33: ConnectionReset failures).
                (Landed::Pending | Landed::Broken, _) if !link_up => Outcome::transport(true),
                (Landed::Pending | Landed::Broken, _) => Outcome::transport(false),
                (Landed::Covered(crc), want) if crc != want => {
                    Outcome::fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No)
                }
                (Landed::Covered(_), _) => match w.outcome {
                    Outcome::Done { bytes, aux } => Outcome::got(bytes, aux & !AUX_VERIFIED, true),
                    failed => failed,
                },
            };
            let Some(w) = self.landing.remove(&key) else {
                continue;
            };
            let dialect = w.attempt.dialect;
            Self::end_window(w.attempt);
            if matches!(outcome, Outcome::Done { .. }) {
                self.moved.insert(key, dialect);
                self.declines = 0;
            }
            self.events.push(Event::Complete(key, outcome));
        }
        // Without a waker for the landings' watches, poll them on the timer until they end.
        if !self.landing.is_empty() && self.waker.is_none() {
            self.timers
                .push(Reverse((Instant::now() + super::MIN_WAIT, Due::CqPoll)));
        }
    }

    /// Fires the dialects' timers due by `now` and polls the completions exchanges wait for.
    pub(crate) fn tick(&mut self, now: Instant, io: &mio::Registry) {
        self.check_landings();
        while let Some(Reverse((t, due))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            match due {
                Due::V2End(key, id) => {
                    if self.running.get(&key).is_some_and(|r| r.id == id)
                        && let Some(r) = self.running.remove(&key)
                    {
                        self.end_v2(key, r, io);
                        self.ended(key, v2::TIMED_OUT);
                    }
                }
                Due::CancelEnd(token) => self.end_cancel(token, io),
                Due::CqPoll => {}
                Due::PairWait(epoch) => self.pairing_slow(epoch),
                Due::PairEnd(epoch) => self.pairing_timed_out(epoch, io),
            }
        }
        // A pairing whose answer is in waits for its soft QP's dial, whose end rang the waker.
        if self.pairing.as_ref().is_some_and(|(_, p)| p.dialing()) {
            self.on_pairing_ready(io);
        }
        if self.awaiting.is_empty() {
            return;
        }
        for key in std::mem::take(&mut self.awaiting) {
            let Some(mut r) = self.running.remove(&key) else {
                continue;
            };
            let progress = r.op.on_completion();
            self.progress(key, r, progress, io);
        }
        if self.polled_awaiting() {
            self.timers.push(Reverse((now + CQ_POLL, Due::CqPoll)));
        }
    }

    /// Whether an op awaiting its completion has only the timer to wake it.
    fn polled_awaiting(&self) -> bool {
        self.awaiting
            .iter()
            .any(|k| self.running.get(k).is_some_and(|r| self.polled(&r.op)))
    }

    /// Whether `op`'s completion is found only by polling on a timer: a verbs CQ without an
    /// armed completion channel (a soft CQ rings the worker's waker).
    fn polled(&self, op: &v2::V2Op) -> bool {
        self.home.kind() != crate::fabric::rc::RcKind::Soft && !op.cq_is_armed()
    }

    /// Applies what a step of `key`'s exchange produced.
    fn progress(&mut self, key: OpKey, r: Running, progress: v2::Progress, io: &mio::Registry) {
        match progress {
            v2::Progress::Pending => {
                // A soft QP still dialling: its end (a ring of the waker) is checked on the
                // next tick, so a failed dial ends the op at once, not at its FINAL or deadline.
                if r.op.watches_dial() && !self.awaiting.contains(&key) {
                    self.awaiting.push(key);
                }
                self.running.insert(key, r);
            }
            v2::Progress::Summing => {
                if !self.awaiting.contains(&key) {
                    self.awaiting.push(key);
                }
                // Due at once: the worker's loop does not sleep before the next part.
                self.timers.push(Reverse((Instant::now(), Due::CqPoll)));
                self.running.insert(key, r);
            }
            v2::Progress::AwaitCompletion => {
                if !self.awaiting.contains(&key) {
                    self.awaiting.push(key);
                }
                let mut r = r;
                if r.op.arm_cq() {
                    // Armed just now: poll once more at once, for a completion that came
                    // before the arm (it raised no event); after that the fd wakes us.
                    self.timers.push(Reverse((Instant::now(), Due::CqPoll)));
                } else if self.polled(&r.op) {
                    // A verbs CQ without a completion channel: poll it on a timer.
                    self.timers
                        .push(Reverse((Instant::now() + CQ_POLL, Due::CqPoll)));
                }
                self.running.insert(key, r);
            }
            v2::Progress::Ended(x, cancel) => {
                let end = r.op.end;
                for t in [r.op.token(), r.op.cq_token()].into_iter().flatten() {
                    self.owners.remove(&t);
                }
                // Nothing to cancel left in the op: its session, if any, is in `cancel`.
                let _ = r.op.close(io);
                // The op's end is reported once its CANCEL is answered (or its budget spent),
                // as a server may count on.
                let x = match cancel {
                    Some(session) => self.start_cancel(&session, end, io, Some((key, x))),
                    None => Some((key, x)),
                };
                if let Some((key, x)) = x {
                    self.ended(key, x);
                }
            }
        }
    }

    /// Ends `key`'s exchange where it stands (abort or timer): window deregistered,
    /// connection closed, a CANCEL sent for an open session.
    pub(super) fn end_v2(&mut self, key: OpKey, r: Running, io: &mio::Registry) {
        self.awaiting.retain(|&k| k != key);
        let end = r.op.end;
        for t in [r.op.token(), r.op.cq_token()].into_iter().flatten() {
            self.owners.remove(&t);
        }
        if let Some(session) = r.op.close(io) {
            let _ = self.start_cancel(&session, end, io, None);
        }
        self.admit_one_waiting();
    }

    /// One CANCEL of `session`, within [`v2::CANCEL_BUDGET`] and `end`; `then`: the op's
    /// end, reported when the CANCEL ends. Returns `then` if no CANCEL could be started.
    fn start_cancel(
        &mut self,
        session: &str,
        end: Instant,
        io: &mio::Registry,
        then: Option<(OpKey, v2::Exchange)>,
    ) -> Option<(OpKey, v2::Exchange)> {
        let Some(now) = self.now else {
            return then;
        };
        let token = self.take_token();
        match v2::Cancel::start(self.ctx(), session, now, end, token, io) {
            Some(c) => {
                self.timers.push(Reverse((c.end, Due::CancelEnd(token))));
                self.owners.insert(token, Owner::Cancel);
                self.cancels.insert(token, (c, then));
                None
            }
            None => then,
        }
    }

    fn end_cancel(&mut self, token: Token, io: &mio::Registry) {
        self.owners.remove(&token);
        if let Some((c, then)) = self.cancels.remove(&token) {
            c.close(io);
            if let Some((key, x)) = then {
                self.ended(key, x);
            }
        }
    }

    /// Reports the end of `key`'s exchange as an event for the fabric.
    fn ended(&mut self, key: OpKey, x: v2::Exchange) {
        let ev = match x {
            v2::Exchange::Done { bytes, verified } => {
                self.moved.insert(key, WireDialect::RcV2);
                // PUTs ignore the flag (it is moved to the CQE for GETs only).
                Event::Complete(key, Outcome::got(bytes, 0, verified))
            }
            v2::Exchange::Fallback { learn } => {
                if learn && self.dialect == Dialect::Auto {
                    // Negotiating: v2 refused for good; cuObject (with a provider) or HTTP
                    // next, for this op too.
                    self.learned.refuse_rc_v2();
                } else if learn && self.mode == Fabric::Auto {
                    self.state = State::Plain;
                }
                Event::Resume(key)
            }
            v2::Exchange::Busy if !self.running.is_empty() => {
                // Our own sessions hold the server's places: wait for one of them to end.
                self.v2_full.push_back(key);
                return;
            }
            v2::Exchange::Busy => {
                tracing::debug!("v2: the server is full and none of its sessions is ours: HTTP");
                Event::Resume(key)
            }
            v2::Exchange::Failed(o) => Event::Complete(key, o),
        };
        self.events.push(ev);
        self.admit_one_waiting();
    }

    /// One exchange ended: the longest-waiting op refused for capacity tries v2 again.
    pub(super) fn admit_one_waiting(&mut self) {
        if let Some(k) = self.v2_full.pop_front() {
            self.events.push(Event::Readmit(k));
        }
    }

    /// Whether events wait to be taken.
    pub(crate) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }
}
