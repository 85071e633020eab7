//! The retry decision shared by the engine's workers and the CLI's blocking client: capped
//! exponential backoff with full jitter ([`RetryPolicy`]), bounded by the operation's deadline
//! and by a [`RetryBudget`] shared by every operation of one engine or client, so a storm of
//! `503 SlowDown` cannot multiply the load on a struggling server.
//!
//! Pure: the caller passes the random unit and the time left; nothing here sleeps or reads a
//! clock.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::config::RetryPolicy;

/// Tokens a budget starts with (the AWS SDKs' "standard" retry quota).
pub const BUDGET_CAPACITY: u32 = 500;
/// Tokens a retry after a server error (5xx, 429, SlowDown) costs.
pub const RETRY_COST: u32 = 5;
/// Tokens a retry after a connection failure or timeout costs.
pub const TRANSPORT_RETRY_COST: u32 = 10;
/// Tokens an operation that succeeds gives back.
pub const SUCCESS_REFUND: u32 = 1;

/// A token bucket of retries: each retry takes [`RETRY_COST`] (or [`TRANSPORT_RETRY_COST`])
/// tokens, each success returns [`SUCCESS_REFUND`]. When it is empty, failures are final
/// until successes refill it. Also counts retries and refusals (for stats).
#[derive(Debug)]
pub struct RetryBudget {
    tokens: AtomicU32,
    capacity: u32,
    retries: AtomicU64,
    refused: AtomicU64,
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::new(BUDGET_CAPACITY)
    }
}

/// Why a failed attempt is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRetry {
    /// The policy's attempts are used up.
    Attempts,
    /// The backoff would end after the operation's deadline.
    Deadline,
    /// The budget is empty (a storm of failures).
    Budget,
}

/// Counters of a [`RetryBudget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryStats {
    /// Retries granted.
    pub retries: u64,
    /// Retries refused because the budget was empty.
    pub refused_by_budget: u64,
    /// Tokens left.
    pub tokens: u32,
}

impl RetryBudget {
    /// A full budget of `capacity` tokens.
    pub fn new(capacity: u32) -> Self {
        Self {
            tokens: AtomicU32::new(capacity),
            capacity,
            retries: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Takes `cost` tokens if there are that many.
    fn try_take(&self, cost: u32) -> bool {
        self.tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| t.checked_sub(cost))
            .is_ok()
    }

    /// A success: returns [`SUCCESS_REFUND`] tokens (up to the capacity).
    pub fn on_success(&self) {
        let cap = self.capacity;
        let _ = self
            .tokens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(SUCCESS_REFUND).min(cap))
            });
    }

    /// The counters.
    pub fn stats(&self) -> RetryStats {
        RetryStats {
            retries: self.retries.load(Ordering::SeqCst),
            refused_by_budget: self.refused.load(Ordering::SeqCst),
            tokens: self.tokens.load(Ordering::SeqCst),
        }
    }

    /// Decides whether attempt number `attempts` (1 = the first) that failed may be followed
    /// by another, and after how long. `transport`: the failure was a connection failure or a
    /// timeout (costs more); `unit`: a uniform random number in `[0, 1)` for the jitter;
    /// `time_left`: until the operation's deadline (`None`: no deadline). A granted retry is
    /// paid for and counted.
    pub fn next_retry(
        &self,
        policy: &RetryPolicy,
        attempts: u32,
        transport: bool,
        unit: f64,
        time_left: Option<Duration>,
    ) -> Result<Duration, NoRetry> {
        if attempts >= policy.max_attempts {
            return Err(NoRetry::Attempts);
        }
        let wait = policy.jittered(attempts, unit);
        if time_left.is_some_and(|left| wait >= left) {
            return Err(NoRetry::Deadline);
        }
        let cost = if transport {
            TRANSPORT_RETRY_COST
        } else {
            RETRY_COST
        };
        if !self.try_take(cost) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(NoRetry::Budget);
        }
        self.retries.fetch_add(1, Ordering::SeqCst);
        Ok(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_bound_the_retries() {
        let b = RetryBudget::default();
        let p = RetryPolicy::new(3, Duration::from_millis(10), Duration::from_secs(1));
        assert!(b.next_retry(&p, 1, false, 0.5, None).is_ok());
        assert!(b.next_retry(&p, 2, false, 0.5, None).is_ok());
        assert_eq!(
            b.next_retry(&p, 3, false, 0.5, None),
            Err(NoRetry::Attempts)
        );
        assert_eq!(b.stats().retries, 2);
    }

    #[test]
    fn backoff_is_full_jitter_of_the_capped_exponential() {
        let b = RetryBudget::default();
        let p = RetryPolicy::new(10, Duration::from_millis(100), Duration::from_millis(300));
        assert_eq!(
            b.next_retry(&p, 1, false, 0.5, None),
            Ok(Duration::from_millis(50))
        );
        assert_eq!(
            b.next_retry(&p, 2, false, 0.999_999, None)
                .map(|d| d.as_millis()),
            Ok(199)
        );
        // Capped at 300 ms from the third retry on.
        assert_eq!(
            b.next_retry(&p, 5, false, 0.5, None),
            Ok(Duration::from_millis(150))
        );
        assert_eq!(b.next_retry(&p, 1, false, 0.0, None), Ok(Duration::ZERO));
    }

    #[test]
    fn a_backoff_past_the_deadline_is_refused_and_costs_nothing() {
        let b = RetryBudget::new(5);
        let p = RetryPolicy::new(4, Duration::from_millis(100), Duration::from_secs(1));
        assert_eq!(
            b.next_retry(&p, 1, false, 0.9, Some(Duration::from_millis(50))),
            Err(NoRetry::Deadline)
        );
        assert_eq!(b.stats().tokens, 5);
    }

    #[test]
    fn an_empty_budget_stops_a_storm_until_successes_refill_it() {
        let b = RetryBudget::new(20);
        let p = RetryPolicy::new(100, Duration::ZERO, Duration::ZERO);
        let granted = (1..=50)
            .filter(|&n| b.next_retry(&p, n, false, 0.5, None).is_ok())
            .count();
        assert_eq!(granted, 4, "20 tokens pay for 4 retries of cost 5");
        assert_eq!(b.next_retry(&p, 1, true, 0.5, None), Err(NoRetry::Budget));
        assert_eq!(b.stats().refused_by_budget, 47);
        for _ in 0..5 {
            b.on_success();
        }
        assert!(b.next_retry(&p, 1, false, 0.5, None).is_ok());
        assert_eq!(b.stats().tokens, 0);
        // Refunds never exceed the capacity.
        for _ in 0..100 {
            b.on_success();
        }
        assert_eq!(b.stats().tokens, 20);
    }
}
