//! Fault specifications (`KIND[=N][,times=K]`) and their shared budgets.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::RelayStats;

/// One kind of fault; see the module documentation for the spec syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultKind {
    /// Delay every response head.
    Latency(Duration),
    /// Reset the connection after this many response bytes.
    ResetAfter(u64),
    /// Close the connection (FIN) after this many response bytes.
    TruncateAfter(u64),
    /// Stop forwarding responses after this many bytes (the connection stays open).
    StallAfter(u64),
    /// Flip the body byte at this offset of a response.
    Flip(u64),
    /// Flip the first body byte of every Nth response that has a body.
    FlipEvery(u64),
    /// Lower a response's `Content-Length` by this much (and send only that many bytes).
    ContentLengthMinus(u64),
    /// Answer a request with `503 SlowDown` instead of forwarding it.
    SlowDown,
    /// Flip the body byte at this offset of a request.
    FlipRequest(u64),
    /// Remove every field of this name (case-insensitive) from response heads.
    DropHeader(String),
}

/// A fault and how often it may apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What it does.
    pub kind: FaultKind,
    /// Applies to the first `times` matches only (`None`: to all).
    pub times: Option<u64>,
}

impl Fault {
    /// A fault that applies to every match.
    pub fn always(kind: FaultKind) -> Self {
        Self { kind, times: None }
    }

    /// A fault that applies to its first `times` matches.
    pub fn times(kind: FaultKind, times: u64) -> Self {
        Self {
            kind,
            times: Some(times),
        }
    }

    /// Parses `KIND[=N][,times=K]`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (main, times) = match spec.split_once(",times=") {
            Some((m, t)) => (
                m,
                Some(
                    t.parse::<u64>()
                        .map_err(|_| format!("fault {spec:?}: times must be a number"))?,
                ),
            ),
            None => (spec, None),
        };
        let (name, arg) = match main.split_once('=') {
            Some((n, a)) => (n, Some(a)),
            None => (main, None),
        };
        let number = || -> Result<u64, String> {
            arg.ok_or_else(|| format!("fault {name:?} needs =N"))?
                .parse::<u64>()
                .map_err(|_| format!("fault {spec:?}: N must be a non-negative integer"))
        };
        let kind = match name {
            "latency" => FaultKind::Latency(Duration::from_millis(number()?)),
            "reset-after" => FaultKind::ResetAfter(number()?),
            "truncate-after" => FaultKind::TruncateAfter(number()?),
            "stall-after" => FaultKind::StallAfter(number()?),
            "flip" => FaultKind::Flip(number()?),
            "flip-every" => FaultKind::FlipEvery(number()?.max(1)),
            "content-length-minus" => FaultKind::ContentLengthMinus(number()?),
            "slowdown" if arg.is_none() => FaultKind::SlowDown,
            "flip-request" => FaultKind::FlipRequest(number()?),
            "drop-header" => match arg {
                Some(n)
                    if !n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic() && b != b':') =>
                {
                    FaultKind::DropHeader(n.to_owned())
                }
                _ => return Err(format!("fault {spec:?}: drop-header needs =NAME")),
            },
            _ => {
                return Err(format!(
                    "unknown fault {spec:?} (latency=MS, reset-after=N, truncate-after=N, \
                     stall-after=N, flip=N, flip-every=N, content-length-minus=K, slowdown, \
                     flip-request=N, drop-header=NAME; optional ,times=K)"
                ));
            }
        };
        Ok(Self { kind, times })
    }
}

/// The faults with their remaining budgets, shared by every connection.
#[derive(Debug)]
pub(crate) struct Faults {
    pub(crate) list: Vec<(FaultKind, Option<AtomicU64>)>,
    pub(crate) responses_with_body: AtomicU64,
    pub(crate) stats: Arc<RelayStats>,
}

impl Faults {
    /// Takes one application of `left` (a fault's remaining budget; `None`: unlimited).
    fn grant(&self, left: Option<&AtomicU64>) -> bool {
        let granted = left.is_none_or(|left| {
            left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        });
        if granted {
            self.stats.faults_applied.fetch_add(1, Ordering::SeqCst);
        }
        granted
    }

    /// Takes one application of the first fault matching `pick` that has budget left.
    pub(crate) fn take<T>(&self, pick: impl Fn(&FaultKind) -> Option<T>) -> Option<T> {
        self.list
            .iter()
            .find_map(|(kind, left)| pick(kind).filter(|_| self.grant(left.as_ref())))
    }

    /// One application of every fault matching `pick` that has budget left.
    pub(crate) fn take_each<T>(&self, pick: impl Fn(&FaultKind) -> Option<T>) -> Vec<T> {
        self.list
            .iter()
            .filter_map(|(kind, left)| pick(kind).filter(|_| self.grant(left.as_ref())))
            .collect()
    }
}
