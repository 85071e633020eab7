//! How many connections a worker keeps open to its endpoint right now: an additive-increase,
//! multiplicative-decrease window under the configured limit (`connections_per_worker`).
//!
//! A server that throttles (`503 SlowDown`, `429`) or drops a brand-new connection before it
//! answered is telling the client it holds more connections than it can serve. Retrying the
//! same number of requests at once only repeats the refusal: with eight engines of 64
//! connections against a gateway of 256, ops ran out of attempts. So a refusal while several
//! requests were in flight halves the window from what was in use, idle connections above it
//! are closed, and ops beyond it wait for a connection instead of being refused again. One
//! overload reaches every request sent before the client reacted, so, as TCP does once per
//! round trip, only a refusal of a request sent after the last halving halves again: each
//! request carries the window's epoch at sending. Each window's worth of successes adds one
//! connection back, up to the limit.
//!
//! A refusal is *absorbed* (the refused op waits and queues again without spending an
//! attempt) only while the window cut what was in flight: the load that caused it was this
//! client's concurrency, which the window now limits. A refusal while no more requests were
//! in flight than the window allows (a single request, say) is the server's load alone and
//! counts as an ordinary attempt.
//!
//! Pure: no clock, no I/O.

/// The connection window of one worker's HTTP transport.
#[derive(Debug, Clone)]
pub(crate) struct ConnWindow {
    limit: usize,
    current: usize,
    /// Successes since the window last grew.
    successes: usize,
    /// Halvings so far; a request sent at an older epoch cannot halve the window again.
    epoch: u64,
}

impl ConnWindow {
    /// A window open to `limit` (at least 1) connections.
    pub(crate) fn new(limit: usize) -> Self {
        let limit = limit.max(1);
        Self {
            limit,
            current: limit,
            successes: 0,
            epoch: 0,
        }
    }

    /// Connections that may be open now.
    pub(crate) fn current(&self) -> usize {
        self.current
    }

    /// The epoch a request sent now carries.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The server refused a request sent at `sent_epoch` while `in_use` requests (this one
    /// included) held connections: halves the window from what was in use, unless it was
    /// halved since that request was sent. Whether the refusal is absorbed: more requests
    /// were in flight than the window now allows.
    pub(crate) fn on_throttle(&mut self, sent_epoch: u64, in_use: usize) -> bool {
        if in_use < 2 {
            return false;
        }
        if sent_epoch >= self.epoch {
            self.epoch += 1;
            self.successes = 0;
            self.current = (self.current.min(in_use) / 2).max(1);
        }
        in_use > self.current
    }

    /// A request succeeded: one window's worth of successes adds a connection.
    pub(crate) fn on_success(&mut self) {
        if self.current >= self.limit {
            return;
        }
        self.successes += 1;
        if self.successes >= self.current {
            self.successes = 0;
            self.current += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_halves_what_was_in_use_once_per_overload() {
        let mut w = ConnWindow::new(64);
        let sent = w.epoch();
        assert!(w.on_throttle(sent, 40), "40 in flight, now 20 allowed");
        assert_eq!(w.current(), 20);
        // The same overload reaches every request sent before it: one halving, and those
        // refusals are absorbed too while more are in flight than allowed.
        assert!(w.on_throttle(sent, 39));
        assert_eq!(w.current(), 20);
        assert!(!w.on_throttle(sent, 15), "15 in flight fit the window");
        // A request sent after the halving is refused too: halve again.
        assert!(w.on_throttle(w.epoch(), 20));
        assert_eq!(w.current(), 10);
        for _ in 0..10 {
            w.on_throttle(w.epoch(), 64);
        }
        assert_eq!(w.current(), 1, "never below one connection");
    }

    #[test]
    fn a_single_request_refused_counts_as_an_attempt_and_keeps_the_window() {
        let mut w = ConnWindow::new(64);
        assert!(!w.on_throttle(w.epoch(), 1));
        assert_eq!(w.current(), 64);
        // Once no more are in flight than the window allows, refusals are the server's load
        // alone.
        let mut w = ConnWindow::new(4);
        assert!(w.on_throttle(w.epoch(), 4));
        assert_eq!(w.current(), 2);
        assert!(w.on_throttle(w.epoch(), 2));
        assert_eq!(w.current(), 1);
        assert!(!w.on_throttle(w.epoch(), 1));
        assert_eq!(w.current(), 1);
    }

    #[test]
    fn successes_grow_the_window_back_to_the_limit_and_no_further() {
        let mut w = ConnWindow::new(8);
        w.on_throttle(0, 8);
        assert_eq!(w.current(), 4);
        for _ in 0..3 {
            w.on_success();
        }
        assert_eq!(
            w.current(),
            4,
            "a window's worth of successes per connection"
        );
        w.on_success();
        assert_eq!(w.current(), 5);
        for _ in 0..1000 {
            w.on_success();
        }
        assert_eq!(w.current(), 8);
    }

    #[test]
    fn a_limit_of_zero_is_one() {
        assert_eq!(ConnWindow::new(0).current(), 1);
    }
}
