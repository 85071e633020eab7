//! The `soft` fabric: RDMA reliable-connected (RC) queue-pair semantics emulated in user space
//! over TCP.
//!
//! It is the test double for the verbs fabric and the data path of hosts without an RDMA NIC;
//! the client engine (initiator and responder) and the gateway's target role both use it. The
//! API is verbs-shaped so the verbs fabric can offer the same one: a [`SoftDevice`] creates
//! [`ProtectionDomain`]s (where [`MemoryRegion`]s get `lkey`/`rkey`), [`CompletionQueue`]s and
//! [`QueuePair`]s; QPs go `Reset → Init → Rtr → Rts` (or `Err`), take [`SendWr`]s (RDMA WRITE,
//! WRITE_WITH_IMM, READ, SEND) and [`RecvWr`]s, and report [`WorkCompletion`]s.
//!
//! Guarantees (see `docs/soft-fabric.md`):
//! - A responder touches only the exact range a current rkey grants, with the access flag the
//!   region and the QP allow, checked on every frame. A violation completes the initiator's
//!   request with `RemoteAccessError`, fails both QPs and flushes what is queued.
//! - [`ProtectionDomain::rekey`] returns only when no access with the old rkey is in progress;
//!   none succeeds afterwards.
//! - RC ordering: one TCP connection per QP pair, requests executed in PSN order, so a
//!   WRITE_WITH_IMM completion at the responder implies every earlier WRITE landed.
//! - Payload moves between the socket and registered memory with no intermediate copy.
//! - Every frame header is decoded by the pure [`frame::decode_header`] (fuzzed).
//! - A dmabuf is registered by mapping it ([`ProtectionDomain::register_dmabuf`], the soft
//!   `ibv_reg_dmabuf_mr`): exporters with `mmap` (udmabuf, `udmabuf::HostDmabuf` with `test-support`) work, others
//!   (CUDA's VRAM dmabufs) are refused with the errno.
//!
//! Threads: a device owns a fixed set of I/O threads (`soft-io-<device>-<i>`, a `mio` poll
//! each; [`default_io_threads`]), which serve every QP of the device and its pairing listener
//! with non-blocking, resumable steps; none is started per QP or per operation. A small
//! request posted to an idle QP is written by the posting thread (no hand-off; see
//! `docs/soft-fabric.md`, Threads). Completion waiting is `CompletionQueue::wait` or a
//! `mio::Waker` (`CompletionQueue::set_waker`).

mod cq;
mod device;
mod dial;
pub mod frame;
mod io;
mod landing;
mod mr;
// Loopback pairs and host dmabufs: test support (`crate::soft` re-exports them with it).
#[cfg(feature = "test-support")]
mod pair;
mod pairing;
mod qp;
mod raw;
mod rx;
mod shared;
mod tx;
#[cfg(feature = "test-support")]
pub mod udmabuf;
mod wr;

pub use cq::CompletionQueue;
pub use device::{MAX_HANDSHAKES, SoftDevice};
pub use io::{IoPlacement, MAX_IO_THREADS, default_io_threads};
pub use landing::{Landed, Landing};
pub use mr::{MemoryRegion, MrError, ProtectionDomain};
#[cfg(feature = "test-support")]
pub use pair::{Endpoint, loopback_pair};
pub use qp::{
    MAX_RD_ATOMIC, PostError, QpCaps, QpCounters, QpError, QpState, QueuePair, RtrAttr, RtsAttr,
    SoftPath,
};
pub use wr::{Access, RecvWr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};
