//! `engine`: the poll-mode data-plane engine of hipObject.
//!
//! An application registers memory once, interns object names once, takes a [`Queue`] per
//! thread and then pushes fixed-size submission entries (`ring_api::opcode` builders) and
//! reaps completions, never blocking a worker and never being blocked by one.
//!
//! One dependency is enough: the ring types ([`Sqe`], [`Cqe`], [`BufSlice`], the
//! [`opcode`] builders, [`ErrorCode`]…) and [`Credentials`] are re-exported here.
//!
//! ```no_run
//! use engine::opcode::RangeGet;
//! use engine::{BufSlice, Credentials, Engine, ErrorClass, ErrorCode, Fabric, RegisterOptions};
//!
//! let engine = Engine::builder()
//!     .endpoint_url("http://127.0.0.1:9000")
//!     .credentials(Credentials::new("access-key", "secret-key"))
//!     .fabric(Fabric::Auto) // RDMA when the endpoint pairs, else HTTP
//!     .build()?;
//! let buf = engine.register_host(1 << 20, RegisterOptions::pinned())?;
//! let obj = engine.object("bucket", "model.safetensors")?;
//! let mut q = engine.queue(256)?;
//! q.push(&RangeGet::new(obj, 4096, BufSlice::new(buf, 0, 65536)).user_data(1).build())?;
//! q.wait(1, None);
//! // `wait` also returns (with nothing ready) once the engine is gone.
//! let cqe = q.completion().next().ok_or("engine shut down before completing")?;
//! match cqe.into_result() {
//!     Ok(bytes) => println!("{bytes} bytes: {:?}", &engine.read(buf, 0, bytes)?[..8]),
//!     Err(e) if e.code == Some(ErrorCode::NotFound) => println!("no such object"),
//!     Err(e) if e.class == Some(ErrorClass::Server) => println!("server trouble: {e}"),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Thread model
//! One worker thread per placement slot ([`Placement`]), pinned when possible. A worker polls
//! its rings and sockets while work moves and sleeps in `epoll_wait` otherwise; submitting
//! wakes it only when it announced it sleeps. An idle engine uses no CPU.
//!
//! # Memory and ownership
//! Registered memory belongs to the engine's registry. Each operation holds a lease on the
//! bytes it touches until it completes: [`Engine::read`] refuses ranges being written,
//! overlapping writes complete with `EBUSY`, and [`Engine::deregister`] waits for leases.
//!
//! # Safety model
//! `#![deny(unsafe_code)]`; the only modules allowed `unsafe` are `memory::raw` (pointer
//! access to registrations), `memory::shared` (sealed memfd mappings shared between
//! processes), `attach::sys` (the daemon socket: descriptor passing, peer credentials),
//! `queue::eventfd`, `sys` (clock, rusage, socket options, pread), `fabric::soft::raw` (the
//! soft fabric's access to registered ranges), the GPU FFI modules under `gpu` (CUDA, HIP) and
//! the verbs FFI under `verbs`, plus [`Engine::register_raw`], whose caller contract is
//! documented, and `rc::RcStaging::read_file_at` (a `pread(2)` straight into a registration that
//! owns its memory). `grep -rn "allow(unsafe_code)" engine/src` lists them. Completion entries and server responses are
//! untrusted: invalid entries complete with errors, never panics.
//!
//! # Public surface
//! The stable API is the top level: [`Engine`], [`EngineBuilder`], [`Queue`] (and
//! `AsyncQueue` with the `tokio` feature), the handles and views, the configuration enums, the
//! errors and the re-exported ring types; plus [`gpu`] (runtimes, device buffers, the
//! [`gpu::GpuRuntime`] trait) and [`verbs::probe()`]. [`rc`] and [`soft`] are the RDMA
//! emulator's API for gateways (the RDMA target of `hipobj serve`) and tests. The feature
//! `test-support` (off by default; this crate's tests, `benches/` and `fuzz/` turn it on)
//! additionally publishes what only tests need: the libibverbs objects in [`verbs`], the soft
//! fabric's frames, loopback pairs and host dmabufs, `gpu::{coalesce, staging, dmabuf}` and the
//! fuzz bodies (`fuzzing`). It is not a stable API.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod attach;
mod config;
mod dispatch;
mod engine;
mod error;
mod fabric;
/// Fuzz bodies (`fuzz/fuzz_targets/*` are one-liners into these): test support only.
#[cfg(feature = "test-support")]
pub mod fuzzing;
pub mod gpu;
mod inflight;
mod local;
mod memory;
mod mempolicy;
mod multipart;
mod nic_plan;
mod op_times;
mod placement;
mod queue;
pub mod retry;
mod stripe;
mod sys;
mod timers;
pub mod verbs;
mod worker;

pub use config::{DEFAULT_CONNECTIONS, EngineBuilder, Placement, RetryPolicy};
pub use engine::{Engine, MemoryKind, WorkerInfo};
pub use error::EngineError;
/// The RC interface over both RDMA fabrics (soft and verbs): the API the gateway's RDMA target
/// (`hipobj serve --fabric soft|verbs`) is written against, and the emulator's for tests.
/// Applications moving objects never need it.
#[doc(inline)]
pub use fabric::rc;
pub use fabric::rdma::{DcOp, DcTokenError, DcTokenProvider, Dialect, Fabric};
pub use memory::{BufferView, RegisterOptions};
pub use nic_plan::{Locality, NicAffinity, PlacementPlan};
pub use placement::{DEFAULT_WORKERS_PER_NIC, PlannedWorker};
#[cfg(feature = "tokio")]
pub use queue::{
    AsyncError, AsyncQueue, NextCompletion, NextTimedCompletion, OpFuture, TimedOpFuture,
};
pub use queue::{Queue, QueueOptions};
pub use stripe::{DEFAULT_STRIPE_CHUNK, DEFAULT_STRIPE_THRESHOLD, Stripe};
/// The clock [`OpTimes`] are read from (CLOCK_MONOTONIC, ns): compare a record with it.
pub use sys::monotonic_ns;
pub use sys::process_cpu_time;

// What an application needs besides the engine itself, so `engine` is its one dependency and
// rustdoc links these types.
pub use ring_api::{
    BufHandle, BufSlice, CompletionQueue, Cqe, DataPath, ErrorClass, ErrorCode, ObjectId, OpError,
    PartNumber, PushError, Sqe, SubmissionQueue, UploadHandle, WireDialect, cqe_flags, opcode,
    sqe_flags,
};
// Per-operation timestamps (`QueueOptions::timestamps`).
pub use ring_api::{OpTimes, TimedCompletionQueue, TimestampsOff};
pub use s3_lite::credentials::Credentials;

/// The soft RDMA fabric: RC queue-pair semantics emulated in user space over TCP (the
/// emulator docs/soft-fabric.md describes), with a verbs-shaped API.
///
/// This is the emulator's API for gateways and tests: `hipobj serve --fabric soft` (the
/// gateway's RDMA target, through [`rc`]) drives it directly. Applications that only move
/// objects never need it: [`Fabric::Soft`] / [`Fabric::Auto`] select it for the engine. The
/// wire frames, host dmabufs and loopback pairs the engine's tests and benches use are
/// test support (feature `test-support`).
pub mod soft {
    pub use crate::fabric::soft::{
        Access, CompletionQueue, IoPlacement, Landed, Landing, MAX_HANDSHAKES, MAX_IO_THREADS,
        MAX_RD_ATOMIC, MemoryRegion, MrError, PostError, ProtectionDomain, QpCaps, QpCounters,
        QpError, QpState, QueuePair, RecvWr, RemoteAddr, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
        SoftDevice, SoftPath, WcOpcode, WcStatus, WorkCompletion, default_io_threads,
    };
    #[cfg(feature = "test-support")]
    pub use crate::fabric::soft::{Endpoint, frame, loopback_pair, udmabuf};
}
