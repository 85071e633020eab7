//! `verbs`: RDMA through libibverbs, loaded at run time, for RC queue pairs on real NICs
//! (Broadcom bnxt_re, AMD ionic, NVIDIA mlx5) and on Soft-RoCE (rxe).
//!
//! Layering (see `docs/verbs.md`):
//! - `sys`: hand-written `repr(C)` structs of rdma-core 44.0's `verbs.h`, layout-asserted at
//!   compile time against `sys_layout.rs` (generated from the header by `regen-bindings.sh`),
//!   and a function table filled by `dlopen("libibverbs.so.1")`. Nothing is needed to build.
//! - `result`: one function per C call, status → `Result`; the `static inline` data-path calls
//!   (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`) go through `context->ops`.
//! - safe RAII types: `Context` → `ProtectionDomain` → `MemoryRegion` /
//!   `CompletionQueue` / `QueuePair`; children hold `Arc`s to their parents. The engine's `rc`
//!   layer uses them; outside the crate they are public only with the `test-support` feature
//!   (docs/engine.md, "Public surface").
//! - pure parts, tested everywhere: the QP state table ([`qp_state`]), GID choice from sysfs
//!   ([`gid`]), path MTU ([`port`]), the vendor table ([`vendor`]), token ↔ fields (`token`).
//!
//! Stable API: [`probe()`] and its answer ([`Probe`], [`DeviceSummary`], [`Unavailable`]), the
//! verbs [`Error`] the `rc` layer reports, and the pure modules above.
//!
//! The API is shaped like the soft fabric's (`crate::soft`): same method names, and the
//! work-request types are the soft fabric's own, so one trait can later cover both.
//! Without libibverbs or without a device, [`probe()`] answers [`Probe::Unavailable`].
//!
//! `unsafe` is confined to `sys`, `result`, `context`, `mr`, `cq`, `qp` and `post` in this directory,
//! each block with a SAFETY comment.

mod context;
mod cq;
mod error;
pub mod gid;
mod mr;
pub mod port;
mod post;
mod probe;
mod qp;
pub mod qp_state;
mod result;
mod sys;
#[cfg(feature = "test-support")]
pub mod token;
#[cfg(not(feature = "test-support"))]
pub(crate) mod token;
pub mod vendor;

// The stable part: "is there RDMA here?" ([`probe()`]) and the types of its answer and of the
// verbs errors the `rc` layer reports.
pub use error::{Error, PostError, Unavailable};
pub use probe::{DeviceSummary, Probe, probe, report_once};
pub use qp_state::QpState;

// The libibverbs objects themselves: the engine's `rc` layer uses them; outside the crate
// they are test support (the rxe tests and the `verbs_rc_peer` example).
#[cfg(feature = "test-support")]
pub use crate::fabric::rc::wr::{
    RecvWr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
#[cfg(not(feature = "test-support"))]
pub(crate) use context::Context;
#[cfg(feature = "test-support")]
pub use context::{Context, api_available};
#[cfg(feature = "test-support")]
pub use cq::CompletionQueue;
#[cfg(not(feature = "test-support"))]
pub(crate) use cq::CompletionQueue;
#[cfg(feature = "test-support")]
pub use mr::{Access, MemoryRegion, ProtectionDomain};
#[cfg(not(feature = "test-support"))]
pub(crate) use mr::{MemoryRegion, ProtectionDomain};
#[cfg(feature = "test-support")]
pub use post::PostBatch;
#[cfg(not(feature = "test-support"))]
pub(crate) use qp::{QpCaps, QueuePair};
#[cfg(feature = "test-support")]
pub use qp::{QpCaps, QueuePair, RtrAttr, RtsAttr};

impl Context {
    /// A new protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(self: &std::sync::Arc<Self>) -> Result<ProtectionDomain, Error> {
        ProtectionDomain::new(self)
    }

    /// A new completion queue with room for `cqe` completions (`ibv_create_cq`).
    pub fn create_cq(
        self: &std::sync::Arc<Self>,
        cqe: u32,
    ) -> Result<std::sync::Arc<CompletionQueue>, Error> {
        CompletionQueue::new(self, cqe)
    }

    /// An RC queue pair in `Reset` (the soft fabric's `SoftDevice::create_qp` shape).
    pub fn create_qp(
        &self,
        pd: &ProtectionDomain,
        send_cq: &std::sync::Arc<CompletionQueue>,
        recv_cq: &std::sync::Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> Result<QueuePair, Error> {
        QueuePair::create(pd, send_cq, recv_cq, caps)
    }
}
