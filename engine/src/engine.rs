//! [`Engine`] and [`Queue`]: the application-facing handles.

use std::net::{SocketAddr, ToSocketAddrs};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use ring_api::{BufHandle, ObjectId, ObjectTable};
use s3_lite::credentials::{Overrides, ProcessEnvironment, resolve};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::Signer;

use crate::config::{EngineBuilder, RetryPolicy};
use crate::error::EngineError;
use crate::fabric::http::HttpFabric;
use crate::gpu::{DevicePtr, GpuRuntime, PointerKind, StagingCounters};
use crate::memory::raw::RawMem;
use crate::memory::{BufferView, DeviceMirror, RegisterOptions, Registry};
use crate::placement;
use crate::queue::{EventFd, Queue};
use crate::worker::stager::GpuStaging;
use crate::worker::{Crew, Prepared, WorkerHandle};

/// State shared by the engine handle and every worker.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) registry: Registry,
    pub(crate) objects: ObjectTable,
    pub(crate) retry: RetryPolicy,
    /// Retries of every worker draw on this one budget.
    pub(crate) retry_budget: crate::retry::RetryBudget,
    pub(crate) default_deadline: Option<Duration>,
    pub(crate) attempt_timeout: Duration,
    pub(crate) spin: Duration,
    /// GPU staging: the runtime, coalescing limit and counters (`None` without a runtime).
    pub(crate) gpu: Option<GpuStaging>,
}

/// A running engine: registered memory, interned objects and worker threads.
///
/// `Send + Sync`: share it by reference or `Arc`; each application thread takes its own
/// [`Queue`]. Dropping the engine stops the workers; operations still in flight are aborted
/// (their queues receive no further completions).
#[derive(Debug)]
pub struct Engine {
    shared: Arc<Shared>,
    workers: Vec<WorkerHandle>,
    crew: Arc<Crew>,
    next_worker: AtomicUsize,
    next_queue_id: AtomicU64,
    endpoint: Endpoint,
    /// TLS of an `https://` endpoint (shared with every worker's connections).
    tls: Option<Arc<crate::fabric::http::tls::TlsContext>>,
}

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
    /// Whether operations are handed to it (it serves the engine's RDMA device, or the engine
    /// has none that any worker serves).
    pub runs_ops: bool,
    /// Operations it has run so far, from any queue.
    pub ops: u64,
}

pub(crate) fn build(b: EngineBuilder) -> Result<Engine, EngineError> {
    if b.inflight_per_connection != 1 {
        return Err(EngineError::Unsupported(
            "HTTP pipelining: inflight_per_connection must be 1 (one request per connection at a time)",
        ));
    }
    if b.connections_per_worker == Some(0) {
        return Err(EngineError::Config(
            "connections_per_worker must be at least 1".into(),
        ));
    }
    let mut overrides = Overrides {
        endpoint_url: b.endpoint_url.clone(),
        region: b.region.clone(),
        ..Overrides::default()
    };
    if let Some(c) = &b.credentials {
        overrides.access_key_id = Some(c.access_key_id.clone());
        overrides.secret_access_key = Some(c.secret_access_key.clone());
        overrides.session_token = c.session_token.clone();
    }
    let resolved = resolve(&overrides, &ProcessEnvironment).map_err(EngineError::Credentials)?;
    let url = resolved
        .endpoint_url
        .clone()
        .ok_or(EngineError::NoEndpoint)?;
    let endpoint = Endpoint::parse(&url).map_err(EngineError::Endpoint)?;
    let (tls, rdma_fabric) = crate::fabric::http::tls::for_endpoint(&endpoint, &b, &resolved)?;
    let addr = resolve_addr(&endpoint)?;
    let signer = Arc::new(
        Signer::new(resolved.credentials.clone(), resolved.region.clone(), "s3")
            .map_err(EngineError::Signing)?,
    );
    let slots = placement::plan(&b.placement, b.workers_per_nic)?;
    let shared = Arc::new(Shared {
        registry: Registry::new(),
        objects: ObjectTable::new(),
        retry: b.retry,
        retry_budget: crate::retry::RetryBudget::default(),
        default_deadline: b.default_deadline,
        attempt_timeout: b.attempt_timeout,
        spin: b.spin,
        gpu: b.gpu.map(|rt| GpuStaging {
            rt,
            coalesce_limit: b.gpu_coalesce_limit,
            poll_spin: b.gpu_poll_spin,
            stats: Default::default(),
        }),
    });
    // The same credentials scoped to service `hipobj`, for v2 servers that refuse `s3`.
    let hipobj_signer = Signer::new(
        resolved.credentials.clone(),
        resolved.region.clone(),
        crate::fabric::rdma::learned::HIPOBJ_SERVICE,
    )
    .ok()
    .map(Arc::new);
    // What the engine learns about its endpoint (dialects refused, `mp`, service), shared by
    // every worker for the engine's life.
    let learned = Arc::new(crate::fabric::rdma::learned::Learned::default());
    // One verbs device for the engine (each worker's client makes its own QPs on it).
    let verbs = crate::fabric::rdma::open_verbs(rdma_fabric, b.verbs_device.as_deref());
    let mut prepared = Vec::with_capacity(slots.len());
    for _ in &slots {
        prepared.push(Prepared::new()?);
    }
    let crew = Arc::new(Crew {
        peers: prepared.iter().map(|p| p.peer.clone()).collect(),
        eligible: eligible_workers(&slots, verbs.as_ref().map(|d| d.name()).as_deref()),
    });
    let connections_per_worker = b.connections_per_worker.unwrap_or_else(|| {
        crate::config::DEFAULT_CONNECTIONS
            .div_ceil(slots.len().max(1))
            .max(2)
    });
    let mut workers = Vec::with_capacity(slots.len());
    for (i, (slot, prep)) in slots.into_iter().zip(prepared).enumerate() {
        let mut fabric = HttpFabric::new(
            addr,
            endpoint.clone(),
            Arc::clone(&signer),
            connections_per_worker,
            b.read_buffer,
            b.quickack,
        );
        if let Some(t) = &tls {
            fabric = fabric.with_tls(Arc::clone(t));
        }
        let fabric = fabric.with_rdma(
            crate::fabric::rdma::RdmaClient::new(
                rdma_fabric,
                verbs.clone(),
                addr,
                endpoint.clone(),
                Arc::clone(&signer),
            )
            .with_dialect(b.dialect)
            .with_learned(Arc::clone(&learned), hipobj_signer.clone())
            .with_dc_provider(b.dc_provider.clone()),
        );
        match WorkerHandle::spawn(
            i,
            slot,
            prep,
            Arc::clone(&crew),
            Arc::clone(&shared),
            Box::new(fabric),
        ) {
            Ok(w) => workers.push(w),
            Err(e) => {
                stop_all(&mut workers);
                return Err(e);
            }
        }
    }
    Ok(Engine {
        shared,
        workers,
        crew,
        next_worker: AtomicUsize::new(0),
        next_queue_id: AtomicU64::new(1),
        endpoint,
        tls,
    })
}

/// Which workers run operations: those serving the engine's RDMA device `nic` when any does,
/// else every worker (HTTP and the soft fabric use no NIC of their own).
fn eligible_workers(slots: &[placement::Slot], nic: Option<&str>) -> Vec<usize> {
    let all = 0..slots.len();
    let on_nic: Vec<usize> = all
        .clone()
        .filter(|&i| nic.is_some() && slots.get(i).and_then(|s| s.nic.as_deref()) == nic)
        .collect();
    if on_nic.is_empty() {
        all.collect()
    } else {
        on_nic
    }
}

/// Signals every worker to stop, then joins them (so none waits on another's shutdown).
fn stop_all(workers: &mut [WorkerHandle]) {
    for w in workers.iter() {
        w.signal_stop();
    }
    for w in workers.iter_mut() {
        w.stop();
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        stop_all(&mut self.workers);
    }
}

fn resolve_addr(ep: &Endpoint) -> Result<SocketAddr, EngineError> {
    let host = ep.host.trim_start_matches('[').trim_end_matches(']');
    let err = |source| EngineError::Resolve {
        host: ep.host.clone(),
        source,
    };
    (host, ep.port)
        .to_socket_addrs()
        .map_err(err)?
        .next()
        .ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no address",
            ))
        })
}

impl Engine {
    /// A builder with defaults (see [`EngineBuilder`]).
    #[must_use]
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// The endpoint requests go to.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Why the `https://` endpoint's certificate was last refused (operations that met it
    /// completed with `AccessDenied` in class `Transport`); `None` for `http://` endpoints
    /// and while no certificate was refused.
    #[must_use]
    pub fn tls_failure(&self) -> Option<s3_lite::net::tls::CertificateProblem> {
        self.tls.as_ref().and_then(|t| t.last_failure())
    }

    /// The workers: where they run, which NIC they serve and how many operations each has
    /// run.
    #[must_use]
    pub fn workers(&self) -> Vec<WorkerInfo> {
        self.workers
            .iter()
            .enumerate()
            .map(|(i, w)| WorkerInfo {
                core: w.slot.core,
                pinned: w.pinned(),
                nic: w.slot.nic.clone(),
                numa_node: w.slot.numa_node,
                runs_ops: self.crew.eligible.contains(&i),
                ops: w.executed(),
            })
            .collect()
    }

    /// Interns `(bucket, key)` once; submission entries then name the object by id.
    pub fn object(&self, bucket: &str, key: &str) -> Result<ObjectId, EngineError> {
        self.shared
            .objects
            .intern(bucket, key)
            .map_err(EngineError::Intern)
    }

    /// Allocates `len` bytes of page-aligned, zeroed host memory and registers it.
    ///
    /// With [`RegisterOptions::pinned`] the pages are `mlock`ed; if that fails (usually
    /// `RLIMIT_MEMLOCK`), the memory stays pageable and a warning goes to stderr, unless
    /// [`RegisterOptions::require_pinned`] turns it into [`EngineError::Pin`].
    pub fn register_host(
        &self,
        len: usize,
        opts: RegisterOptions,
    ) -> Result<BufHandle, EngineError> {
        if len == 0 {
            return Err(EngineError::Config(
                "cannot register an empty buffer".into(),
            ));
        }
        let (mem, warning) =
            RawMem::alloc(len, opts.pinned).map_err(|len| EngineError::Alloc { len })?;
        if let Some(source) = warning {
            if opts.require_pinned {
                return Err(EngineError::Pin { len, source });
            }
            tracing::warn!("mlock of {len} bytes failed ({source}); using pageable memory");
        }
        self.shared.registry.insert(mem)
    }

    /// Registers caller-owned memory (the C ABI and GPU pointers go through here).
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
        let ptr = NonNull::new(ptr).ok_or_else(|| EngineError::Config("null pointer".into()))?;
        if len == 0 {
            return Err(EngineError::Config(
                "cannot register an empty buffer".into(),
            ));
        }
        // SAFETY: forwarded to our caller's contract above.
        let mem = unsafe { RawMem::from_raw(ptr, len) };
        self.shared.registry.insert(mem)
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
        let addr = ptr as u64;
        let device = self
            .shared
            .gpu
            .as_ref()
            .and_then(|g| match g.rt.pointer_kind(addr) {
                Ok(PointerKind::Device { ordinal }) => Some(ordinal),
                _ => None,
            });
        match device {
            Some(ordinal) => {
                // SAFETY: forwarded to our caller's contract (device memory of `ordinal`).
                let h = unsafe { self.register_device(DevicePtr { addr, ordinal }, len) }?;
                Ok((h, MemoryKind::Device { ordinal }))
            }
            None => {
                // SAFETY: forwarded to our caller's contract (host memory).
                let h = unsafe { self.register_raw(ptr, len) }?;
                Ok((h, MemoryKind::Host))
            }
        }
    }

    /// The GPU runtime given to [`EngineBuilder::gpu`], if any.
    #[must_use]
    pub fn gpu(&self) -> Option<&Arc<dyn GpuRuntime>> {
        self.shared.gpu.as_ref().map(|g| &g.rt)
    }

    /// Retries granted and refused (budget empty) so far, over every worker and queue.
    #[must_use]
    pub fn retry_stats(&self) -> crate::retry::RetryStats {
        self.shared.retry_budget.stats()
    }

    /// Counters of the GPU staging (copies, merged copies, bytes, failures); `None` without a
    /// GPU runtime.
    #[must_use]
    pub fn gpu_staging(&self) -> Option<StagingCounters> {
        self.shared.gpu.as_ref().map(|g| g.stats.snapshot())
    }

    /// Registers `len` bytes of device memory at `ptr` as a destination of GET / RangeGet and a
    /// source of PUT.
    ///
    /// The engine allocates `len` bytes of pinned host memory from the GPU runtime as the
    /// registration's bounce mirror (byte `i` ↔ `ptr + i`); the fabric moves bytes into and
    /// out of the mirror, and the worker copies them to VRAM on its own stream (merging
    /// adjacent ranges) and posts a GET's completion only after that copy has finished; a
    /// PUT's bytes are copied from VRAM before it starts. [`Engine::read`] and
    /// [`Engine::copy_in`] on the handle see the mirror, not VRAM.
    ///
    /// Errors: [`EngineError::Unsupported`] "device memory: no GPU runtime" when the engine
    /// was built without [`EngineBuilder::gpu`]; [`EngineError::Config`] when the runtime does
    /// not see `ptr` as memory of device `ptr.ordinal`, or `len` is 0;
    /// [`EngineError::Alloc`] when the pinned mirror cannot be allocated.
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
        let gpu = self.shared.gpu.as_ref().ok_or(EngineError::Unsupported(
            "device memory: no GPU runtime (build the engine with EngineBuilder::gpu)",
        ))?;
        if len == 0 {
            return Err(EngineError::Config(
                "cannot register an empty buffer".into(),
            ));
        }
        let last = ptr
            .offset(len as u64 - 1)
            .ok_or_else(|| EngineError::Config("device range overflows".into()))?;
        for p in [ptr, last] {
            match gpu.rt.pointer_kind(p.addr) {
                Ok(PointerKind::Device { ordinal }) if ordinal == ptr.ordinal => {}
                other => {
                    return Err(EngineError::Config(format!(
                        "{:#x} is not memory of device {} ({other:?})",
                        p.addr, ptr.ordinal
                    )));
                }
            }
        }
        let mem = RawMem::alloc_gpu_pinned(&gpu.rt, len).map_err(|_| EngineError::Alloc { len })?;
        self.shared
            .registry
            .insert_device(mem, DeviceMirror { dev: ptr })
    }

    /// Deregisters `handle`, waiting up to `timeout` for operations in flight on it and live
    /// [`BufferView`]s to finish. New operations on it fail with `EBUSY` meanwhile. On timeout
    /// it returns [`EngineError::BusyTimeout`] and the handle stays registered.
    pub fn deregister(&self, handle: BufHandle, timeout: Duration) -> Result<(), EngineError> {
        self.shared.registry.deregister(handle, timeout)
    }

    /// Read access to `len` bytes at `offset` of a registration; fails with
    /// [`EngineError::Busy`] if an operation in flight writes any of them.
    pub fn read(
        &self,
        handle: BufHandle,
        offset: u64,
        len: u64,
    ) -> Result<BufferView, EngineError> {
        self.shared.registry.view(handle, offset, len)
    }

    /// Copies registered bytes at `offset` into `out` (same rules as [`Engine::read`]).
    pub fn copy_out(
        &self,
        handle: BufHandle,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), EngineError> {
        let view = self.read(handle, offset, out.len() as u64)?;
        out.copy_from_slice(&view);
        Ok(())
    }

    /// Copies `data` into a registration at `offset` (e.g. a PUT source); fails with
    /// [`EngineError::Busy`] if an operation in flight reads or writes any of those bytes.
    pub fn copy_in(&self, handle: BufHandle, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        self.shared.registry.copy_in(handle, offset, data)
    }

    /// A new queue for the calling thread: `depth` submission slots and `2 * depth`
    /// completion slots (both rounded up to powers of two).
    ///
    /// One worker (chosen round-robin) owns the queue's rings: it drains the submissions and
    /// posts the completions. The operations themselves run on every worker eligible for them
    /// (the least loaded takes each), so one queue can use all the engine's workers.
    ///
    /// A `depth` of 0 is refused ([`EngineError::Config`]): a queue needs at least one slot.
    pub fn queue(&self, depth: u32) -> Result<Queue, EngineError> {
        if depth == 0 {
            return Err(EngineError::Config(
                "Engine::queue depth must be at least 1 (got 0)".to_owned(),
            ));
        }
        let sq = depth.checked_next_power_of_two().ok_or(EngineError::Ring(
            ring_api::SetupError::Capacity {
                requested: depth,
                max: ring_api::MAX_ENTRIES,
            },
        ))?;
        let cq = sq.saturating_mul(2);
        let eligible = &self.crew.eligible;
        let n = self.next_worker.fetch_add(1, Ordering::Relaxed) % eligible.len().max(1);
        let i = eligible.get(n).copied().ok_or(EngineError::Shutdown)?;
        let worker = self.workers.get(i).ok_or(EngineError::Shutdown)?;
        // The completion-readiness fd (Queue's AsFd): rung by the owner only while armed.
        let ready_fd = Arc::new(EventFd::new().map_err(EngineError::Poller)?);
        let (app, wq) = ring_api::queue_pair_with_completion_bell(
            sq,
            cq,
            Some(worker.bell()),
            Some(Arc::clone(&ready_fd) as Arc<dyn ring_api::Doorbell>),
        )
        .map_err(EngineError::Ring)?;
        let id = self.next_queue_id.fetch_add(1, Ordering::Relaxed);
        worker.attach(wq, cq as usize, id);
        Ok(Queue::new(app, ready_fd, Arc::clone(&worker.waker)))
    }
}

/// What [`Engine::register_memory`] registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Host memory: the engine reads and writes it directly.
    Host,
    /// Device memory of GPU `ordinal`, staged by the engine through pinned host memory.
    Device {
        /// The device's index in its runtime.
        ordinal: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(nic: Option<&str>) -> placement::Slot {
        placement::Slot {
            core: None,
            nic: nic.map(str::to_owned),
            numa_node: None,
        }
    }

    #[test]
    fn ops_go_only_to_workers_of_the_engines_nic() {
        let slots = [
            slot(Some("mlx5_0")),
            slot(Some("mlx5_1")),
            slot(Some("mlx5_0")),
        ];
        assert_eq!(eligible_workers(&slots, Some("mlx5_0")), vec![0, 2]);
        assert_eq!(eligible_workers(&slots, Some("mlx5_1")), vec![1]);
        // No RDMA device (HTTP, soft) or one no worker serves: every worker.
        assert_eq!(eligible_workers(&slots, None), vec![0, 1, 2]);
        assert_eq!(eligible_workers(&slots, Some("rxe0")), vec![0, 1, 2]);
        assert_eq!(
            eligible_workers(&[slot(None), slot(None)], None),
            vec![0, 1]
        );
    }
}
