//! GPU memory: CUDA and HIP runtimes loaded at run time, behind one interface.
//!
//! One binary runs on NVIDIA, AMD and CPU-only hosts. [`detect()`] tries the CUDA driver
//! (`libcuda.so`, through the `cudarc` crate's dynamic loading), then HIP (`libamdhip64.so`
//! through `dlopen`), and answers `None` (logged once, typed as [`NoGpuRuntime`]) when neither
//! has a device.
//!
//! Layering (raw bindings, then a safe result layer, then the API):
//! - raw: `cudarc::driver::sys` for CUDA; [`hip::sys`] (a hand-written function table with
//!   layout asserts) for HIP and HSA;
//! - result: [`cuda::ffi`], [`hip::result`] — one function per C call, status → [`GpuError`];
//! - the [`GpuRuntime`] trait (object safe, `Arc<dyn GpuRuntime>`), implemented by
//!   [`cuda::CudaRuntime`] and [`hip::HipRuntime`];
//! - safe owners: [`DeviceBuffer`], [`PinnedBuffer`], [`GpuStream`], [`GpuEvent`]. The engine
//!   stages device registrations itself (the worker's stager and the bounce pool, see
//!   `crate::Engine::register_device`); its copy helpers (`coalesce::plan`,
//!   `staging::copy_ranges`, `dmabuf::window`) are public only with the `test-support`
//!   feature.
//!
//! Device memory is registered with a NIC through [`GpuRuntime::export_dmabuf`], which exports
//! the page-aligned enclosing range and reports the caller's offset in it (`dmabuf::window`);
//! `direct` decides per registration whether the engine uses it (the GPUDirect tier) or
//! stages through pinned host memory.
//!
//! Device memory of another process (issue 34's node daemon) arrives as an [`IpcExport`]:
//! [`GpuRuntime::ipc_export`] in the owner, [`GpuRuntime::ipc_open`] /
//! [`GpuRuntime::ipc_close`] in the process that uses it (see [`ipc`]).
//!
//! Unsafe code: the modules `runtime` (declares `unsafe fn`s), `handles`, `staging`,
//! `dmabuf::host_page_size`, `cuda`, `cuda::ffi`, `hip`, `hip::sys`, `hip::result` carry
//! `#[allow(unsafe_code)]`; every block has a `// SAFETY:` comment.

#[cfg(feature = "test-support")]
pub mod coalesce;
#[cfg(not(feature = "test-support"))]
pub(crate) mod coalesce;
#[cfg(feature = "cuda")]
pub mod cuda;
pub(crate) mod detect;
pub(crate) mod direct;
#[cfg(feature = "test-support")]
pub mod dmabuf;
#[cfg(not(feature = "test-support"))]
pub(crate) mod dmabuf;
mod error;
mod handles;
pub mod hip;
pub mod ipc;
mod runtime;
#[cfg(feature = "test-support")]
pub mod staging;
pub(crate) mod staging_stats;
mod types;

pub use detect::{NoGpuRuntime, detect, detect_error, try_detect};
pub use direct::{GpuDirect, GpuDirectCounters, GpuDirectError, GpuTier};
pub use dmabuf::DmabufRegion;
pub use error::{Backend, GpuError};
pub use handles::{DeviceBuffer, GpuEvent, GpuStream, PinnedBuffer};
pub use ipc::{IPC_EXPORT_BYTES, IPC_HANDLE_BYTES, IpcExport};
pub use runtime::GpuRuntime;
pub use staging_stats::StagingCounters;

/// Default upper bound of one merged host ↔ device copy of the engine's staging
/// (`EngineBuilder::gpu_coalesce_limit`): large enough for the copy engine's full rate
/// (≥ 4 MiB reached 96% of the pinned ceiling on the H200), small enough that the first
/// completions of a batch are not held back long.
pub const DEFAULT_COALESCE_LIMIT: u64 = 8 << 20;

/// Default upper bound of the worker's same-turn wait for small copies into VRAM
/// (`EngineBuilder::gpu_poll_spin`): none. On the H200 lane (docs/gpu.md, 2026-11-30) a 150 µs
/// spin gave no measurable gain for 64 KiB ranges over the soft fabric and cost throughput in
/// one run, so it is opt-in.
pub const DEFAULT_POLL_SPIN: std::time::Duration = std::time::Duration::ZERO;

/// Default capacity of the engine's pinned bounce pool (`EngineBuilder::gpu_bounce_bytes`):
/// the most page-locked host memory it pins, in [`BOUNCE_SEGMENT_BYTES`] segments as the
/// operations in flight need them. Every operation on device memory holds its range from its
/// start until its copy has finished, so the pool must cover what is in flight: over HTTP a
/// range-get holds its range for the whole exchange, and the loaders keep 8 workers × 32
/// range-gets of 8 MiB in flight (2 GiB). A pool of 256 MiB ran 32 of them at a time.
pub const DEFAULT_BOUNCE_BYTES: u64 = 2 << 30;

/// The bounce pool's unit of growth (and its first allocation): 256 MiB. An operation longer
/// than this gets a segment of its own length.
pub const BOUNCE_SEGMENT_BYTES: u64 = 256 << 20;
pub use types::{Capabilities, DevicePtr, PointerKind, RawEvent, RawStream};
