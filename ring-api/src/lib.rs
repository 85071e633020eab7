//! `ring-api`: io_uring-style submission and completion rings for the hipObject engine.
//!
//! An application thread describes S3 operations as fixed-size 64-byte [`Sqe`]s (built with
//! the [`opcode`] builders), pushes them in batches into its own submission ring and reaps
//! 32-byte [`Cqe`]s from its own completion ring. A pinned engine worker on the other side
//! drains the submission ring, [validates](Sqe::validate) each entry and posts completions.
//! Nothing here blocks or allocates per entry.
//!
//! # Quick start
//!
//! ```
//! use ring_api::opcode::Nop;
//! use ring_api::{Cqe, DataPath, queue_pair};
//!
//! let (mut app, mut worker) = queue_pair(64, 128, None)?;
//! {
//!     let mut sq = app.submission();
//!     for i in 0..32 {
//!         sq.push(&Nop::new().user_data(i).build())?;
//!     }
//! } // dropping the view publishes the batch (one Release store)
//!
//! // worker side (normally another thread)
//! let (sqes, mut cqes) = worker.split();
//! for sqe in sqes {
//!     let op = sqe.validate().expect("valid");
//!     cqes.push(Cqe::success(op.user_data, 0, DataPath::None));
//! }
//! drop(cqes);
//!
//! assert_eq!(app.completion().count(), 32);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Pieces
//!
//! - [`Sqe`] / [`Cqe`]: `#[repr(C)]`, sizes and offsets pinned by `const` assertions;
//!   [`Cqe::into_result`] turns a completion into `Result<bytes, OpError>`.
//! - [`opcode`]: one builder per operation; [`Sqe::validate`] decodes untrusted entries into
//!   [`ValidOp`] or an [`InvalidEntry`] that becomes an error completion.
//! - [`ObjectTable`], [`ObjectId`], [`BufHandle`], [`UploadHandle`]: names and buffers as ids,
//!   so entries stay fixed-size.
//! - [`queue_pair`] → ([`AppQueue`], [`WorkerQueue`]): the two SPSC rings with cached indices,
//!   Release/Acquire publication and batch views ([`SubmissionQueue`], [`CompletionQueue`],
//!   [`SubmissionReader`], [`CompletionWriter`]).
//! - [`wakeup`]: the `need_wakeup` park protocol and the [`Doorbell`] trait.
//! - [`queue_pair_timed`]: the same rings with per-operation timestamps ([`OpTimes`]) in a
//!   companion slot at each entry's index, read with [`AppQueue::completion_timed`].
//! - [`RingMemory`], [`QueueLayout`], [`app_queue_in`], [`worker_queue_in`]: the same queue in
//!   memory shared between two processes (the node daemon and its clients); a peer writing
//!   impossible indices is detected ([`WorkerQueue::peer_corrupt`]), never trusted.
//!
//! # Thread safety
//!
//! Each half is `Send` but not `Sync` or `Clone`; views borrow the half mutably. One producer
//! and one consumer per ring is therefore a compile-time fact (`tests/compile_fail/`).
//!
//! # Safety model
//!
//! The crate contains no `unsafe` code (`#![deny(unsafe_code)]`, and no module opts out):
//! ring slots are arrays of `AtomicU64` written and read with `Relaxed` operations and ordered
//! by the Release/Acquire publication of the indices (see `slot.rs`). A bug in the index
//! protocol could at worst deliver a stale entry, never cause undefined behaviour. Entries from
//! applications are untrusted: validation is total and never panics.
//!
//! The long-form protocol description is `docs/ring-protocol.md`.
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![warn(missing_debug_implementations)]
#![cfg_attr(
    not(test),
    warn(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic
    )
)]

mod cqe;
mod error;
mod handle;
mod memory;
mod object_table;
mod op_error;
pub mod opcode;
mod pending;
mod queue;
mod slot;
mod spsc;
mod sqe;
mod times;
mod validate;
pub mod wakeup;

#[doc(hidden)]
#[allow(clippy::expect_used, clippy::panic)]
pub mod fuzzing;

pub use cqe::{Cqe, DataPath, ErrorClass, WireDialect, cqe_flags};
pub use error::{
    ErrorCode, InternError, InvalidEntry, PushError, SetupError, TimestampsOff, UnknownErrorCode,
};
pub use handle::{BufHandle, BufSlice, ObjectId, PartNumber, UploadHandle};
pub use memory::{QueueLayout, RingMemory};
pub use object_table::{MAX_BUCKET_LEN, MAX_KEY_LEN, ObjectName, ObjectTable};
pub use op_error::OpError;
pub use pending::PendingCompletions;
pub use queue::{
    AppQueue, CompletionQueue, CompletionWriter, SubmissionQueue, SubmissionReader,
    TimedCompletionQueue, WorkerQueue, app_queue_in, queue_pair, queue_pair_timed,
    queue_pair_with_completion_bell, worker_queue_in,
};
pub use spsc::MAX_ENTRIES;
pub use sqe::{Sqe, sqe_flags};
pub use times::OpTimes;
pub use validate::{Deadline, MAX_PUT_LEN, Op, ValidOp};
pub use wakeup::{CompletionWaiter, Doorbell, ParkDoorbell, ParkWaiter};

/// Version of the entry layouts ([`Sqe`], [`Cqe`]) and their field meanings. Bumped on any
/// incompatible change; new opcodes and flags are compatible additions because older engines
/// reject what they do not know.
pub const ABI_VERSION: u32 = 1;
