//! [`Engine`]: the application's handle, over an engine in this process or one shared by
//! every process of the node (attached to `hipobj daemon`, [`crate::attach`]).

use std::sync::Arc;
use std::time::Duration;

use ring_api::{BufHandle, ObjectId};
use s3_lite::s3::Endpoint;

use crate::attach::client::Attached;
use crate::config::EngineBuilder;
use crate::error::EngineError;
use crate::gpu::{DevicePtr, GpuRuntime, StagingCounters};
use crate::local::LocalEngine;
use crate::memory::{BufferView, RegisterOptions};
use crate::queue::{Queue, QueueOptions};

/// One worker, as built, and what it has done.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerInfo {
    /// The core it was asked to run on.
    pub core: Option<usize>,
    /// Whether pinning succeeded (it may fail in VMs and restricted cgroups).
    pub pinned: bool,
    /// The RDMA device (libibverbs name) it serves, when the placement planned one.
    pub nic: Option<String>,
    /// The NUMA node of its NIC or core, when known.
    pub numa_node: Option<u32>,
    /// The verbs device it opened (its NIC's, one context per NIC shared by that NIC's
    /// workers; `None`: soft fabric or HTTP).
    pub rdma_device: Option<String>,
    /// Whether operations are handed to it (its verbs device opened, or no worker's did).
    pub runs_ops: bool,
    /// Operations it has run so far, from any queue.
    pub ops: u64,
    /// Bytes its successful operations moved so far (each chunk of a striped operation
    /// counts on the worker that ran it; [`Engine::nic_bytes`](crate::Engine::nic_bytes) sums them per NIC).
    pub bytes: u64,
}

/// What [`Engine::register_memory`](crate::Engine::register_memory) registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Host memory: the engine reads and writes it directly.
    Host,
    /// Device memory of GPU `ordinal`: staged by the engine through its pinned bounce pool, or
    /// written by the RDMA device directly ([`Engine::gpu_tier`](crate::Engine::gpu_tier)).
    Device {
        /// The device's index in its runtime.
        ordinal: u32,
    },
}

/// A running engine: registered memory, interned objects and worker threads — in this
/// process, or in the node daemon this process attached to ([`EngineBuilder::daemon`],
/// `HIPOBJ_DAEMON`), with the same ring API either way.
///
/// `Send + Sync`: share it by reference or `Arc`; each application thread takes its own
/// [`Queue`]. Dropping the engine stops the workers; operations still in flight are aborted
/// (their queues receive no further completions). Dropping an attached engine closes its
/// connection: the daemon cancels its operations and releases its registrations.
///
/// What an attached engine does differently is said on each method; in short: host memory is
/// registered with [`Engine::register_host`] only (a memfd the daemon maps), device memory
/// with [`Engine::register_device`] / [`Engine::register_memory`] (exported through the GPU
/// runtime's IPC handles), and the diagnostics of workers, NICs, retries and staging are the
/// daemon's (`hipobj daemon status`).
#[derive(Debug)]
pub struct Engine {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Local(LocalEngine),
    Attached(Attached),
}

impl Engine {
    pub(crate) fn local(engine: LocalEngine) -> Self {
        Self {
            backend: Backend::Local(engine),
        }
    }

    pub(crate) fn attached(engine: Attached) -> Self {
        Self {
            backend: Backend::Attached(engine),
        }
    }

    #[cfg(test)]
    pub(crate) fn into_local(self) -> Option<LocalEngine> {
        match self.backend {
            Backend::Local(e) => Some(e),
            Backend::Attached(_) => None,
        }
    }

    /// A builder with defaults (see [`EngineBuilder`]).
    #[must_use]
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Attaches to the node daemon listening at `socket` (`hipobj daemon`): the same as
    /// `Engine::builder().daemon(socket).build()`. Device memory needs
    /// [`EngineBuilder::gpu`] on the builder instead.
    pub fn connect(socket: impl Into<std::path::PathBuf>) -> Result<Self, EngineError> {
        Self::builder().daemon(socket).build()
    }

    /// `true` when this engine is attached to a node daemon.
    #[must_use]
    pub fn is_attached(&self) -> bool {
        matches!(self.backend, Backend::Attached(_))
    }

    /// The endpoint requests go to (an attached engine's: the daemon's).
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        match &self.backend {
            Backend::Local(e) => e.endpoint(),
            Backend::Attached(a) => a.endpoint(),
        }
    }

    /// Why the `https://` endpoint's certificate was last refused (operations that met it
    /// completed with `AccessDenied` in class `Transport`); `None` for `http://` endpoints,
    /// while no certificate was refused, and on an attached engine.
    #[must_use]
    pub fn tls_failure(&self) -> Option<s3_lite::net::tls::CertificateProblem> {
        match &self.backend {
            Backend::Local(e) => e.tls_failure(),
            Backend::Attached(_) => None,
        }
    }

    /// The workers: where they run, which NIC they serve and how many operations each has
    /// run. An attached engine lists the daemon's workers by count only (no cores, NICs or
    /// counters: `hipobj daemon status` has those).
    #[must_use]
    pub fn workers(&self) -> Vec<WorkerInfo> {
        match &self.backend {
            Backend::Local(e) => e.workers(),
            Backend::Attached(a) => (0..a.worker_count())
                .map(|_| WorkerInfo {
                    core: None,
                    pinned: false,
                    nic: None,
                    numa_node: None,
                    rdma_device: None,
                    runs_ops: true,
                    ops: 0,
                    bytes: 0,
                })
                .collect(),
        }
    }

    /// Bytes moved so far per NIC (RDMA device name), summed over the NIC's workers, in
    /// worker order; workers without a NIC are left out. Empty on an attached engine.
    pub fn nic_bytes(&self) -> Vec<(String, u64)> {
        match &self.backend {
            Backend::Local(e) => e.nic_bytes(),
            Backend::Attached(_) => Vec::new(),
        }
    }

    /// Interns `(bucket, key)` once; submission entries then name the object by id (an
    /// attached engine's ids are its own: no other client can use them).
    pub fn object(&self, bucket: &str, key: &str) -> Result<ObjectId, EngineError> {
        match &self.backend {
            Backend::Local(e) => e.object(bucket, key),
            Backend::Attached(a) => a.object(bucket, key),
        }
    }

    /// Allocates `len` bytes of page-aligned, zeroed host memory and registers it.
    ///
    /// With [`RegisterOptions::pinned`] the pages are `mlock`ed; if that fails (usually
    /// `RLIMIT_MEMLOCK`), the memory stays pageable and a warning goes to stderr, unless
    /// [`RegisterOptions::require_pinned`] turns it into [`EngineError::Pin`]. On an attached
    /// engine the memory is a sealed memfd that this process and the daemon both map
    /// (`RegisterOptions` do not apply there).
    pub fn register_host(
        &self,
        len: usize,
        opts: RegisterOptions,
    ) -> Result<BufHandle, EngineError> {
        match &self.backend {
            Backend::Local(e) => e.register_host(len, opts),
            Backend::Attached(a) => a.register_host(len, opts),
        }
    }

    /// Registers caller-owned memory (the C ABI and GPU pointers go through here).
    ///
    /// An attached engine refuses ([`EngineError::Unsupported`]): the daemon cannot reach
    /// this process's memory; use [`Engine::register_host`].
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must be valid for reads and writes from any thread until
    /// [`Engine::deregister`] has returned `Ok` for the handle (or the engine is dropped), and
    /// the caller must not read or write bytes covered by an operation in flight until its
    /// completion has been reaped — exactly as with `ibv_reg_mr` memory, which must stay valid
    /// "until a work completion has been polled for the corresponding `wr_id`".
    #[allow(unsafe_code)]
    pub unsafe fn register_raw(&self, ptr: *mut u8, len: usize) -> Result<BufHandle, EngineError> {
        match &self.backend {
            // SAFETY: forwarded to our caller's contract.
            Backend::Local(e) => unsafe { e.register_raw(ptr, len) },
            Backend::Attached(_) => Err(Attached::register_raw_refused()),
        }
    }

    /// Registers caller memory of either kind: device memory of the engine's GPU runtime goes
    /// through [`Engine::register_device`] (staged inside the engine), anything else — host
    /// memory, managed memory, or any pointer when the engine has no GPU runtime — through
    /// [`Engine::register_raw`]. Returns the handle and which kind it was taken for.
    ///
    /// Errors: as the two calls; a range that starts in device memory and does not end in
    /// the same device's memory is [`EngineError::Config`].
    ///
    /// # Safety
    ///
    /// The contract of [`Engine::register_raw`] for host memory and of
    /// [`Engine::register_device`] for device memory.
    #[allow(unsafe_code)]
    pub unsafe fn register_memory(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<(BufHandle, MemoryKind), EngineError> {
        match &self.backend {
            // SAFETY: forwarded to our caller's contract.
            Backend::Local(e) => unsafe { e.register_memory(ptr, len) },
            Backend::Attached(a) => a.register_memory(ptr, len),
        }
    }

    /// Registers `len` bytes of device memory at `ptr` as a destination of GET / RangeGet and a
    /// source of PUT (see docs/gpu.md: staged through the engine's pinned bounce pool, or
    /// written by the RDMA device directly, [`Engine::gpu_tier`]).
    ///
    /// On an attached engine the allocation holding the range is exported through the GPU
    /// runtime's IPC memory handle; the daemon opens it and stages into it.
    ///
    /// Errors: [`EngineError::Unsupported`] "device memory: no GPU runtime" when the engine
    /// was built without [`EngineBuilder::gpu`]; [`EngineError::Config`] when the runtime does
    /// not see `ptr` as memory of device `ptr.ordinal`, or `len` is 0;
    /// [`EngineError::GpuDirect`] under [`crate::gpu::GpuDirect::Require`] when the range
    /// cannot have the GPUDirect tier.
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must lie inside one live device allocation of the engine's runtime until
    /// [`Engine::deregister`] has returned `Ok` for the handle (or the engine is dropped), and
    /// the caller must not use device bytes covered by an operation in flight until its
    /// completion has been reaped.
    #[allow(unsafe_code)]
    pub unsafe fn register_device(
        &self,
        ptr: DevicePtr,
        len: usize,
    ) -> Result<BufHandle, EngineError> {
        match &self.backend {
            // SAFETY: forwarded to our caller's contract.
            Backend::Local(e) => unsafe { e.register_device(ptr, len) },
            Backend::Attached(a) => a.register_device(ptr, len),
        }
    }

    /// The first byte of host registration `handle` made by [`Engine::register_host`], where
    /// this process can read and write it directly: the engine's allocation in process, or,
    /// attached, this process's mapping of the memfd it shares with the daemon (the way a
    /// C program gets host memory a daemon can reach, `hipObjBufAlloc`). `None` for device
    /// memory or an unknown handle.
    ///
    /// The pointer is valid for the registration's length until [`Engine::deregister`]
    /// returns `Ok` for it. Using it is the caller's `unsafe`, under the rules of
    /// [`Engine::register_raw`] memory: no access to bytes an operation in flight covers
    /// until its completion was reaped.
    pub fn host_base(&self, handle: BufHandle) -> Option<std::ptr::NonNull<u8>> {
        match &self.backend {
            Backend::Local(e) => e.host_base(handle),
            Backend::Attached(a) => a.host_base(handle),
        }
    }

    /// The GPU runtime given to [`EngineBuilder::gpu`], if any.
    #[must_use]
    pub fn gpu(&self) -> Option<&Arc<dyn GpuRuntime>> {
        match &self.backend {
            Backend::Local(e) => e.gpu(),
            Backend::Attached(a) => a.gpu(),
        }
    }

    /// Retries granted and refused (budget empty) so far, over every worker and queue (zeros
    /// on an attached engine: the daemon's budget is shared by all clients).
    #[must_use]
    pub fn retry_stats(&self) -> crate::retry::RetryStats {
        match &self.backend {
            Backend::Local(e) => e.retry_stats(),
            Backend::Attached(_) => crate::retry::RetryStats::default(),
        }
    }

    /// Counters of the GPU staging (copies, merged copies, bytes, failures, and the bounce
    /// pool: its pinned bytes, bytes in use, waits); `None` without a GPU runtime and on an
    /// attached engine.
    #[must_use]
    pub fn gpu_staging(&self) -> Option<StagingCounters> {
        match &self.backend {
            Backend::Local(e) => e.gpu_staging(),
            Backend::Attached(_) => None,
        }
    }

    /// Capacity in bytes of the bounce pool device operations are staged through (see
    /// [`EngineBuilder::gpu_bounce_bytes`]): the longest operation on device memory the engine
    /// accepts. `None` without a GPU runtime and on an attached engine.
    #[must_use]
    pub fn gpu_bounce_bytes(&self) -> Option<u64> {
        match &self.backend {
            Backend::Local(e) => e.gpu_bounce_bytes(),
            Backend::Attached(_) => None,
        }
    }

    /// The tier of a registration: `Some(Direct | Staged)` for device memory
    /// ([`EngineBuilder::gpu_direct`]), `None` for host memory (and any registration of an
    /// attached engine); [`EngineError::BadHandle`] when unknown.
    pub fn gpu_tier(&self, handle: BufHandle) -> Result<Option<crate::gpu::GpuTier>, EngineError> {
        match &self.backend {
            Backend::Local(e) => e.gpu_tier(handle),
            Backend::Attached(_) => Ok(None),
        }
    }

    /// What the GPUDirect tier has done: registrations per tier, `Auto` fallbacks, and the
    /// GETs (and bytes) the RDMA device wrote into VRAM directly (zeros when attached).
    #[must_use]
    pub fn gpu_direct_stats(&self) -> crate::gpu::GpuDirectCounters {
        match &self.backend {
            Backend::Local(e) => e.gpu_direct_stats(),
            Backend::Attached(_) => crate::gpu::GpuDirectCounters::default(),
        }
    }

    /// The NICs (and workers) operations on `handle` run on (`nic_plan` in the crate docs,
    /// docs/engine.md "Placement"). `None` when the registration is unbound, unknown, or the
    /// engine is attached.
    #[must_use]
    pub fn buffer_nics(&self, handle: BufHandle) -> Option<crate::nic_plan::NicAffinity> {
        match &self.backend {
            Backend::Local(e) => e.buffer_nics(handle),
            Backend::Attached(_) => None,
        }
    }

    /// The workers as planned and the topology they were planned from (for each GPU, the
    /// NICs its buffers would use: [`crate::PlacementPlan::for_gpu`]); empty when attached.
    #[must_use]
    pub fn placement(&self) -> &crate::nic_plan::PlacementPlan {
        match &self.backend {
            Backend::Local(e) => e.placement(),
            Backend::Attached(a) => a.placement(),
        }
    }

    /// Deregisters `handle`, waiting up to `timeout` for operations in flight on it and live
    /// [`BufferView`]s to finish. New operations on it fail with `EBUSY` meanwhile. On timeout
    /// it returns [`EngineError::BusyTimeout`] and the handle stays registered.
    pub fn deregister(&self, handle: BufHandle, timeout: Duration) -> Result<(), EngineError> {
        match &self.backend {
            Backend::Local(e) => e.deregister(handle, timeout),
            Backend::Attached(a) => a.deregister(handle, timeout),
        }
    }

    /// Read access to `len` bytes at `offset` of a registration; fails with
    /// [`EngineError::Busy`] if an operation in flight writes any of them.
    ///
    /// On a device registration the bytes are copied out of VRAM into host memory owned by
    /// the view, synchronously through the runtime. An attached engine copies host bytes out
    /// of the shared mapping without seeing the daemon's leases (do not read what an
    /// operation in flight writes) and refuses device registrations.
    pub fn read(
        &self,
        handle: BufHandle,
        offset: u64,
        len: u64,
    ) -> Result<BufferView, EngineError> {
        match &self.backend {
            Backend::Local(e) => e.read(handle, offset, len),
            Backend::Attached(a) => a.read(handle, offset, len),
        }
    }

    /// Copies registered bytes at `offset` into `out` (same rules as [`Engine::read`]).
    pub fn copy_out(
        &self,
        handle: BufHandle,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), EngineError> {
        match &self.backend {
            Backend::Local(e) => e.copy_out(handle, offset, out),
            Backend::Attached(a) => a.copy_out(handle, offset, out),
        }
    }

    /// Copies `data` into a registration at `offset` (e.g. a PUT source); fails with
    /// [`EngineError::Busy`] if an operation in flight reads or writes any of those bytes
    /// (an attached engine cannot tell: see [`Engine::read`]).
    pub fn copy_in(&self, handle: BufHandle, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        match &self.backend {
            Backend::Local(e) => e.copy_in(handle, offset, data),
            Backend::Attached(a) => a.copy_in(handle, offset, data),
        }
    }

    /// A new queue for the calling thread: `depth` submission slots and `2 * depth`
    /// completion slots (both rounded up to powers of two).
    ///
    /// One worker (chosen round-robin) owns the queue's rings: it drains the submissions and
    /// posts the completions. The operations themselves run on every worker eligible for them
    /// (the least loaded takes each), so one queue can use all the engine's workers. An
    /// attached engine's queue lives in memory shared with the daemon, which forwards its
    /// operations to its own engine (fairly between clients, docs/daemon.md).
    ///
    /// A `depth` of 0 is refused ([`EngineError::Config`]): a queue needs at least one slot.
    /// [`Engine::queue_with`] creates a queue with optional features (timestamps).
    pub fn queue(&self, depth: u32) -> Result<Queue, EngineError> {
        self.queue_with(QueueOptions::new(depth))
    }

    /// [`Engine::queue`] with [`QueueOptions`]: `QueueOptions::new(depth).timestamps(true)`
    /// pairs every completion with its [`OpTimes`](crate::OpTimes) (see
    /// [`Queue::completion_timed`]).
    pub fn queue_with(&self, options: QueueOptions) -> Result<Queue, EngineError> {
        match &self.backend {
            Backend::Local(e) => e.queue_with(options),
            Backend::Attached(a) => a.queue_with(options),
        }
    }
}
