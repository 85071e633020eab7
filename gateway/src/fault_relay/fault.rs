//! Fault specifications (`KIND[=N][,times=K][,every=M]`) and their shared budgets.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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
    /// Lower the `Content-Length` a response names (a HEAD answer's object size too) by this
    /// much, when it names more; the body is still forwarded whole.
    LowerContentLength(u64),
    /// Replace the value of every response header field `name` (case-insensitive) with `value`.
    RewriteHeader {
        /// The field.
        name: String,
        /// Its new value.
        value: String,
    },
    /// Flip body byte `at` of every `every`-th response whose body is exactly `len` bytes
    /// (all connections counted together).
    FlipBodiesOfLength {
        /// The body length that matches.
        len: u64,
        /// The body offset flipped.
        at: u64,
        /// Flip every `every`-th matching body (1: each).
        every: u64,
    },
    /// Raw relay (no HTTP framing): flip byte N of a connection's server→client stream.
    FlipStream(u64),
}

/// A fault and how often it may apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// What it does.
    pub kind: FaultKind,
    /// Applies to the first `times` matches only (`None`: to all).
    pub times: Option<u64>,
    /// Applies to every `every`th match only (`None`: to each), counted over the relay's
    /// life: a low fault rate for soak runs. With `times`, the first `times` of those.
    pub every: Option<u64>,
}

impl Fault {
    /// A fault that applies to every match.
    pub fn always(kind: FaultKind) -> Self {
        Self {
            kind,
            times: None,
            every: None,
        }
    }

    /// A fault that applies to its first `times` matches.
    pub fn times(kind: FaultKind, times: u64) -> Self {
        Self {
            kind,
            times: Some(times),
            every: None,
        }
    }

    /// The same fault applied to every `n`th match only (`n` ≥ 1).
    #[must_use]
    pub fn every_nth(mut self, n: u64) -> Self {
        self.every = Some(n.max(1));
        self
    }

    /// Parses `KIND[=N][,times=K][,every=M]` (the options in either order).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (mut main, mut times, mut every) = (spec, None, None);
        // Options are taken from the end, so a value with commas (a rewritten header) stays.
        while let Some((head, opt)) = main.rsplit_once(',') {
            let slot = match opt.split_once('=') {
                Some(("times", _)) => &mut times,
                Some(("every", _)) => &mut every,
                _ => break,
            };
            let n = opt
                .split_once('=')
                .and_then(|(_, v)| v.parse::<u64>().ok())
                .ok_or_else(|| format!("fault {spec:?}: {opt} must be a number"))?;
            if slot.replace(n).is_some() {
                return Err(format!("fault {spec:?}: {opt} given twice"));
            }
            main = head;
        }
        if every == Some(0) {
            return Err(format!("fault {spec:?}: every must be at least 1"));
        }
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
            "lower-content-length" => FaultKind::LowerContentLength(number()?),
            "flip-stream" => FaultKind::FlipStream(number()?),
            "rewrite-header" => match arg.and_then(|a| a.split_once(':')) {
                Some((n, v)) if is_field_name(n) && is_field_value(v) => FaultKind::RewriteHeader {
                    name: n.to_owned(),
                    value: v.to_owned(),
                },
                _ => return Err(format!("fault {spec:?}: rewrite-header needs =NAME:VALUE")),
            },
            "flip-bodies-of-length" => {
                let parts: Vec<Option<u64>> = arg
                    .unwrap_or_default()
                    .split(':')
                    .map(|p| p.parse::<u64>().ok())
                    .collect();
                match parts.as_slice() {
                    [Some(len), Some(at), Some(every)] if at < len => {
                        FaultKind::FlipBodiesOfLength {
                            len: *len,
                            at: *at,
                            every: (*every).max(1),
                        }
                    }
                    _ => {
                        return Err(format!(
                            "fault {spec:?}: flip-bodies-of-length needs =LEN:AT:EVERY with AT < LEN"
                        ));
                    }
                }
            }
            "drop-header" => match arg {
                Some(n) if is_field_name(n) => FaultKind::DropHeader(n.to_owned()),
                _ => return Err(format!("fault {spec:?}: drop-header needs =NAME")),
            },
            _ => {
                return Err(format!(
                    "unknown fault {spec:?} (latency=MS, reset-after=N, truncate-after=N, \
                     stall-after=N, flip=N, flip-every=N, content-length-minus=K, slowdown, \
                     flip-request=N, drop-header=NAME, lower-content-length=K, \
                     rewrite-header=NAME:VALUE, flip-bodies-of-length=LEN:AT:EVERY, \
                     flip-stream=N; optional ,times=K and ,every=M)"
                ));
            }
        };
        Ok(Self { kind, times, every })
    }
}

/// A header field name a fault may name: visible ASCII without `:`.
fn is_field_name(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_graphic() && b != b':')
}

/// A header field value a fault may write: no control characters (so no CR or LF).
fn is_field_value(v: &str) -> bool {
    v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// A fault with its remaining budget and, for [`FaultKind::FlipBodiesOfLength`], the
/// matching bodies seen so far.
#[derive(Debug)]
pub(crate) struct Armed {
    pub(crate) kind: FaultKind,
    left: Option<AtomicU64>,
    matches: AtomicU64,
    every: Option<u64>,
    /// Matches seen, for `every`.
    seen: AtomicU64,
}

impl Armed {
    pub(crate) fn new(f: Fault) -> Self {
        Self {
            kind: f.kind,
            left: f.times.map(AtomicU64::new),
            matches: AtomicU64::new(0),
            every: f.every,
            seen: AtomicU64::new(0),
        }
    }
}

/// The faults with their remaining budgets, shared by every connection.
#[derive(Debug)]
pub(crate) struct Faults {
    pub(crate) list: Vec<Armed>,
    pub(crate) responses_with_body: AtomicU64,
    pub(crate) stats: Arc<RelayStats>,
    /// Relay raw bytes even without a `flip-stream` fault ([`super::Relay::start_raw`]).
    pub(crate) raw_mode: bool,
    /// Set by [`super::Relay::disarm`]: no fault applies any more.
    pub(crate) disarmed: AtomicBool,
}

impl Faults {
    /// Takes one application of `a`: every `every`th match, while its budget (`times`) lasts.
    fn grant(&self, a: &Armed) -> bool {
        if self.disarmed.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(every) = a.every {
            let nth = a.seen.fetch_add(1, Ordering::SeqCst) + 1;
            if !nth.is_multiple_of(every) {
                return false;
            }
        }
        let granted = a.left.as_ref().is_none_or(|left| {
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
            .find_map(|a| pick(&a.kind).filter(|_| self.grant(a)))
    }

    /// One application of every fault matching `pick` that has budget left.
    pub(crate) fn take_each<T>(&self, pick: impl Fn(&FaultKind) -> Option<T>) -> Vec<T> {
        self.list
            .iter()
            .filter_map(|a| pick(&a.kind).filter(|_| self.grant(a)))
            .collect()
    }

    /// Counts a response body of `len` bytes against every `flip-bodies-of-length` fault of
    /// that length; returns the offset to flip when one of them is due (and has budget left).
    pub(crate) fn body_of_length(&self, len: u64) -> Option<u64> {
        let mut due = None;
        for a in &self.list {
            if let FaultKind::FlipBodiesOfLength {
                len: want,
                at,
                every,
            } = a.kind
                && want == len
            {
                let nth = a.matches.fetch_add(1, Ordering::SeqCst) + 1;
                if due.is_none() && nth.is_multiple_of(every.max(1)) && self.grant(a) {
                    due = Some(at);
                }
            }
        }
        due
    }

    /// Whether the relay frames nothing (a `flip-stream` fault: raw bytes both ways).
    pub(crate) fn raw(&self) -> bool {
        self.raw_mode
            || self
                .list
                .iter()
                .any(|a| matches!(a.kind, FaultKind::FlipStream(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_in_either_order_and_values_keep_their_commas() {
        let f = Fault::parse("slowdown,every=50,times=3").unwrap();
        assert_eq!(
            (f.kind, f.times, f.every),
            (FaultKind::SlowDown, Some(3), Some(50))
        );
        let f = Fault::parse("reset-after=10,times=2").unwrap();
        assert_eq!((f.times, f.every), (Some(2), None));
        let f = Fault::parse("rewrite-header=x-a:1,2").unwrap();
        assert_eq!(
            f.kind,
            FaultKind::RewriteHeader {
                name: "x-a".into(),
                value: "1,2".into()
            }
        );
        assert!(Fault::parse("slowdown,every=0").is_err());
        assert!(Fault::parse("slowdown,every=x").is_err());
        assert!(Fault::parse("slowdown,times=1,times=2").is_err());
    }

    #[test]
    fn every_nth_match_is_granted() {
        let stats = Arc::new(RelayStats::default());
        let faults = Faults {
            list: vec![Armed::new(Fault::always(FaultKind::SlowDown).every_nth(3))],
            responses_with_body: AtomicU64::new(0),
            stats,
            raw_mode: false,
            disarmed: AtomicBool::new(false),
        };
        let pick = |k: &FaultKind| (*k == FaultKind::SlowDown).then_some(());
        let got: Vec<bool> = (0..9).map(|_| faults.take(pick).is_some()).collect();
        assert_eq!(
            got,
            [false, false, true, false, false, true, false, false, true]
        );
        faults.disarmed.store(true, Ordering::SeqCst);
        assert!((0..6).all(|_| faults.take(pick).is_none()));
    }
}
