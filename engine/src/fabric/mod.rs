//! Fabrics: how the bytes of an operation move.
//!
//! A worker hands each started operation to a [`Fabric`] and learns about progress through
//! readiness events on tokens the fabric registered with the worker's `mio` poller. The one
//! `Fabric` is [`http_with_dialects::HttpWithDialects`]: the HTTP transport ([`http`], which
//! knows no dialect) composed with the RDMA dialects ([`rdma`], over [`rc`]: the soft fabric
//! or verbs). Every operation is an S3 request; when a dialect applies, the request carries a
//! token and the payload moves by RDMA instead of in the body. Completions name the path in their
//! [`DataPath`] flag (`Http`, `RdmaSoft`, `RdmaVerbs`), so callers never change with it.

pub(crate) mod http;
pub(crate) mod http_with_dialects;
pub mod rc;
pub mod rdma;
pub mod soft;

use mio::Token;
use ring_api::{DataPath, ErrorClass, ErrorCode};

use crate::inflight::{InFlight, OpKey, Slab};

/// Whether a failed attempt may be repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Final: complete with the error.
    No,
    /// Transient: retry after backoff if attempts and the deadline allow.
    Yes,
    /// A kept-alive connection turned out to be closed before any response byte: retry at once
    /// on a fresh connection without counting an attempt (the request never reached a server
    /// that answered it).
    Free,
    /// The server refused the attempt for load (`503 SlowDown`, `429`, or a new connection
    /// dropped before any answer) while more requests were in flight than the transport's
    /// narrowed connection window now allows: wait for a connection again without counting
    /// an attempt or spending the retry budget (bounded per operation; the window, not the
    /// retry, limits the load).
    Throttled,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Success: `bytes` moved; `aux` is operation-specific (object size for HEAD).
    Done {
        /// Payload bytes moved.
        bytes: u64,
        /// Completion `aux`.
        aux: u64,
    },
    /// Failure.
    Failed {
        /// Completion code.
        code: ErrorCode,
        /// Completion class.
        class: ErrorClass,
        /// Whether to retry.
        retry: Retry,
    },
}

/// Inside the engine, bit 63 of a Get/RangeGet success's `aux` says the bytes were proven by a
/// server checksum; the worker moves it to [`ring_api::cqe_flags::VERIFIED`] (object sizes
/// never reach 2^63).
pub(crate) const AUX_VERIFIED: u64 = 1 << 63;

impl Outcome {
    /// A GET's success: `bytes` landed, the server named the object's `size` (0: it named
    /// none), and `verified` says a server checksum over the bytes matched.
    pub(crate) const fn got(bytes: u64, size: u64, verified: bool) -> Self {
        let aux = size & !AUX_VERIFIED;
        Self::Done {
            bytes,
            aux: if verified { aux | AUX_VERIFIED } else { aux },
        }
    }

    pub(crate) const fn fail(code: ErrorCode, class: ErrorClass, retry: Retry) -> Self {
        Self::Failed { code, class, retry }
    }

    /// A transport failure (refused, reset, EOF mid-response): retryable.
    pub(crate) const fn transport(free: bool) -> Self {
        Self::fail(
            ErrorCode::ConnectionReset,
            ErrorClass::Transport,
            if free { Retry::Free } else { Retry::Yes },
        )
    }
}

/// Finished attempts reported by a fabric.
pub(crate) type Finished = Vec<(OpKey, Outcome)>;

/// A data path a worker drives. Mechanism only: retries, deadlines and completions are the
/// worker's business.
pub(crate) trait Fabric: Send + std::fmt::Debug {
    /// The flag completions carry when this fabric moved the bytes.
    fn path(&self) -> DataPath;

    /// The flags of `key`'s completion: the path and the wire dialect that carried the bytes (a
    /// fabric with a per-request fallback, such as the RDMA dialects, says which). Called once
    /// per success.
    fn path_of(&mut self, _key: OpKey) -> (DataPath, ring_api::WireDialect) {
        let path = self.path();
        let dialect = if path == DataPath::Http {
            ring_api::WireDialect::Http
        } else {
            ring_api::WireDialect::None
        };
        (path, dialect)
    }

    /// Starts an attempt of `op` if a connection is free or may be opened. Returns `false`
    /// when at capacity (the worker keeps `op` ready and tries again after a completion).
    /// An attempt that fails or finishes at once is reported in `done`.
    fn start(
        &mut self,
        key: OpKey,
        op: &mut InFlight,
        io: &mio::Registry,
        done: &mut Finished,
    ) -> bool;

    /// Handles readiness of `token` (a token this fabric registered).
    fn on_ready(&mut self, token: Token, ops: &mut Slab, io: &mio::Registry, done: &mut Finished);

    /// Stops the attempt `op` has on the wire, if any (cancel, deadline, attempt timeout).
    /// No byte of `op`'s buffer is touched after this returns.
    fn abort(&mut self, op: &InFlight, io: &mio::Registry);

    /// Attempts on the wire.
    fn active(&self) -> usize;

    /// Hands the fabric its worker's waker (a device may ring it when work completes).
    fn bind_waker(&mut self, _waker: std::sync::Arc<mio::Waker>) {}

    /// The earliest timer of the fabric's own (its dialects' steps), if any.
    fn next_timer(&self) -> Option<std::time::Instant> {
        None
    }

    /// Called on every turn of the worker's loop: fires the fabric's timers due by `now` and
    /// takes the completions its devices reported. Returns whether anything moved.
    fn tick(
        &mut self,
        _now: std::time::Instant,
        _ops: &mut Slab,
        _io: &mio::Registry,
        _done: &mut Finished,
    ) -> bool {
        false
    }
}

/// A response head parsed from a status and header list (unit tests of response checks).
#[cfg(test)]
pub(crate) fn test_head(status: u16, headers: &[(&str, &str)]) -> s3_lite::http::ResponseHead {
    let mut wire = format!("HTTP/1.1 {status} X\r\n");
    for (n, v) in headers {
        wire.push_str(&format!("{n}: {v}\r\n"));
    }
    wire.push_str("\r\n");
    let mut d = s3_lite::http::ResponseDecoder::new(Default::default(), false);
    match d.decode(wire.as_bytes()).unwrap().event {
        s3_lite::http::Event::Head(h) => h,
        other => panic!("{other:?}"),
    }
}
