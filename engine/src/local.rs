//! [`LocalEngine`]: the engine running in this process (workers, registrations, objects),
//! the backend of [`Engine`](crate::Engine) when no daemon is attached.

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
use crate::engine::{MemoryKind, WorkerInfo};
use crate::error::EngineError;
use crate::fabric::http::HttpFabric;
use crate::gpu::{DevicePtr, GpuRuntime, PointerKind, StagingCounters};
use crate::memory::raw::RawMem;
use crate::memory::{BufferView, RegisterOptions, Registry};
use crate::queue::{EventFd, Queue, QueueOptions};
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
    /// The GPUDirect tier's mode, probe device and counters (`gpu::direct`).
    pub(crate) gpu_direct: crate::gpu::direct::DirectConfig,
    /// The workers, the topology, and which NICs a registration binds to.
    pub(crate) placement: crate::nic_plan::PlacementPlan,
    /// This engine's open multipart uploads (handles name uploads of this engine only).
    pub(crate) uploads: Arc<crate::multipart::UploadTable>,
    /// Which operations are split across NICs, and in what chunks.
    pub(crate) stripe: crate::stripe::StripeConfig,
}

/// An engine running in this process: registered memory, interned objects and worker
/// threads (the [`Engine`](crate::Engine) backend of `EngineBuilder::build` without a daemon).
#[derive(Debug)]
pub(crate) struct LocalEngine {
    shared: Arc<Shared>,
    workers: Vec<WorkerHandle>,
    /// The verbs device each worker opened (`None`: soft fabric or HTTP).
    device_names: Vec<Option<String>>,
    crew: Arc<Crew>,
    next_worker: AtomicUsize,
    next_queue_id: AtomicU64,
    endpoint: Endpoint,
    /// TLS of an `https://` endpoint (shared with every worker's connections).
    tls: Option<Arc<crate::fabric::http::tls::TlsContext>>,
}

pub(crate) fn build(b: EngineBuilder) -> Result<LocalEngine, EngineError> {
    if b.stripe.chunk == 0 {
        return Err(EngineError::Config(
            "stripe_chunk must be at least 1 byte".into(),
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
    if b.gpu_bounce_bytes < crate::memory::bounce::GRANULE {
        return Err(EngineError::Config(format!(
            "gpu_bounce_bytes must be at least {} (got {})",
            crate::memory::bounce::GRANULE,
            b.gpu_bounce_bytes
        )));
    }
    let (mut plan, forced_device) = crate::nic_plan::plan_for_builder(&b)?;
    let slots = plan.workers().to_vec();
    // One verbs context per NIC, shared by that NIC's workers (each worker's client makes its
    // own QPs on it); workers without a NIC of their own share the default device.
    let devices = crate::nic_plan::open_devices(rdma_fabric, &slots, forced_device.as_deref(), &b)?;
    let eligible =
        crate::nic_plan::eligible_workers(&devices.iter().map(Option::is_some).collect::<Vec<_>>());
    plan.set_eligible(eligible.clone());
    let shared = Arc::new(Shared {
        registry: Registry::new(),
        objects: ObjectTable::new(),
        retry: b.retry,
        retry_budget: crate::retry::RetryBudget::default(),
        uploads: Arc::default(),
        default_deadline: b.default_deadline,
        attempt_timeout: b.attempt_timeout,
        spin: b.spin,
        gpu: b.gpu.map(|rt| GpuStaging {
            pool: crate::memory::bounce::BouncePool::new(
                Arc::clone(&rt),
                b.gpu_bounce_bytes,
                b.gpu_bounce_segment_bytes,
            ),
            rt,
            coalesce_limit: b.gpu_coalesce_limit,
            poll_spin: b.gpu_poll_spin,
            stats: Default::default(),
        }),
        gpu_direct: crate::gpu::direct::DirectConfig::new(
            b.gpu_direct,
            crate::gpu::direct::rdma_device_for_direct(
                rdma_fabric,
                b.dialect,
                devices.iter().flatten().next(),
            ),
        ),
        placement: plan,
        stripe: b.stripe,
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
    let mut prepared = Vec::with_capacity(slots.len());
    for _ in &slots {
        prepared.push(Prepared::new()?);
    }
    let crew = Arc::new(Crew {
        peers: prepared.iter().map(|p| p.peer.clone()).collect(),
        eligible,
    });
    let connections_per_worker = b.connections_per_worker.unwrap_or_else(|| {
        crate::config::DEFAULT_CONNECTIONS
            .div_ceil(slots.len().max(1))
            .max(2)
    });
    let device_names: Vec<Option<String>> = devices
        .iter()
        .map(|d| d.as_ref().map(crate::fabric::rc::RcDevice::name))
        .collect();
    let mut workers = Vec::with_capacity(slots.len());
    for (i, ((slot, prep), verbs)) in slots.into_iter().zip(prepared).zip(devices).enumerate() {
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
                verbs,
                addr,
                endpoint.clone(),
                Arc::clone(&signer),
            )
            .with_dialect(b.dialect)
            .with_attempt_timeout(b.attempt_timeout)
            .with_learned(Arc::clone(&learned), hipobj_signer.clone())
            .with_dc_provider(b.dc_provider.clone())
            .with_tls(tls.clone()),
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
    Ok(LocalEngine {
        shared,
        workers,
        device_names,
        crew,
        next_worker: AtomicUsize::new(0),
        next_queue_id: AtomicU64::new(1),
        endpoint,
        tls,
    })
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

impl Drop for LocalEngine {
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

impl LocalEngine {
    /// [`Engine::endpoint`](crate::Engine::endpoint) on an engine in this process.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// [`Engine::tls_failure`](crate::Engine::tls_failure) on an engine in this process.
    #[must_use]
    pub fn tls_failure(&self) -> Option<s3_lite::net::tls::CertificateProblem> {
        self.tls.as_ref().and_then(|t| t.last_failure())
    }

    /// [`Engine::workers`](crate::Engine::workers) on an engine in this process.
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
                rdma_device: self.device_names.get(i).cloned().flatten(),
                runs_ops: self.crew.eligible.contains(&i),
                ops: w.executed(),
                bytes: w.bytes(),
            })
            .collect()
    }

    /// [`Engine::nic_bytes`](crate::Engine::nic_bytes) on an engine in this process.
    pub fn nic_bytes(&self) -> Vec<(String, u64)> {
        let mut out: Vec<(String, u64)> = Vec::new();
        for w in &self.workers {
            let Some(nic) = w.slot.nic.as_deref() else {
                continue;
            };
            match out.iter_mut().find(|(n, _)| n == nic) {
                Some((_, b)) => *b += w.bytes(),
                None => out.push((nic.to_owned(), w.bytes())),
            }
        }
        out
    }

    /// [`Engine::object`](crate::Engine::object) on an engine in this process.
    pub fn object(&self, bucket: &str, key: &str) -> Result<ObjectId, EngineError> {
        self.shared
            .objects
            .intern(bucket, key)
            .map_err(EngineError::Intern)
    }

    /// [`Engine::register_host`](crate::Engine::register_host) on an engine in this process.
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
        let addr = mem
            .addr_of(0, 1)
            .map_or(std::ptr::null(), |p| p.as_ptr().cast_const());
        let h = self.shared.registry.insert(mem)?;
        bind_host(&self.shared, h, addr);
        Ok(h)
    }

    /// [`Engine::host_base`](crate::Engine::host_base) on an engine in this process.
    pub fn host_base(&self, handle: BufHandle) -> Option<NonNull<u8>> {
        self.shared.registry.get(handle)?.host_base()
    }

    /// [`Engine::register_raw`](crate::Engine::register_raw) on an engine in this process.
    ///
    /// # Safety
    ///
    /// The contract of [`Engine::register_raw`](crate::Engine::register_raw).
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
        let h = self.shared.registry.insert(mem)?;
        bind_host(&self.shared, h, ptr.as_ptr());
        Ok(h)
    }

    /// [`Engine::register_memory`](crate::Engine::register_memory) on an engine in this process.
    ///
    /// # Safety
    ///
    /// The contract of [`Engine::register_memory`](crate::Engine::register_memory).
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

    /// [`Engine::gpu`](crate::Engine::gpu) on an engine in this process.
    #[must_use]
    pub fn gpu(&self) -> Option<&Arc<dyn GpuRuntime>> {
        self.shared.gpu.as_ref().map(|g| &g.rt)
    }

    /// [`Engine::retry_stats`](crate::Engine::retry_stats) on an engine in this process.
    #[must_use]
    pub fn retry_stats(&self) -> crate::retry::RetryStats {
        self.shared.retry_budget.stats()
    }

    /// [`Engine::gpu_staging`](crate::Engine::gpu_staging) on an engine in this process.
    #[must_use]
    pub fn gpu_staging(&self) -> Option<StagingCounters> {
        self.shared.gpu.as_ref().map(GpuStaging::counters)
    }

    /// [`Engine::gpu_bounce_bytes`](crate::Engine::gpu_bounce_bytes) on an engine in this process.
    #[must_use]
    pub fn gpu_bounce_bytes(&self) -> Option<u64> {
        self.shared.gpu.as_ref().map(|g| g.pool.capacity())
    }

    /// [`Engine::register_device`](crate::Engine::register_device) on an engine in this process.
    ///
    /// # Safety
    ///
    /// The contract of [`Engine::register_device`](crate::Engine::register_device).
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
        let handle = self.shared.registry.insert_device(ptr, len as u64)?;
        bind_device(&self.shared, handle, ptr.ordinal);
        // GPUDirect hook (gpu/direct.rs): the registration's tier.
        self.attach_gpu_direct(&gpu.rt, handle, ptr, len)?;
        Ok(handle)
    }

    /// Decides the GPUDirect tier of the new device registration `handle` (see
    /// [`crate::gpu::direct`]); under `Require`, a registration that cannot have it is removed
    /// again and the reason returned.
    fn attach_gpu_direct(
        &self,
        rt: &Arc<dyn GpuRuntime>,
        handle: BufHandle,
        ptr: DevicePtr,
        len: usize,
    ) -> Result<(), EngineError> {
        match self.shared.gpu_direct.decide(rt, ptr, len) {
            Ok(Some(src)) => {
                self.shared.registry.set_direct(handle, src);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => {
                let _ = self.shared.registry.deregister(handle, Duration::ZERO);
                Err(EngineError::GpuDirect(e))
            }
        }
    }

    /// [`Engine::gpu_tier`](crate::Engine::gpu_tier) on an engine in this process.
    pub fn gpu_tier(&self, handle: BufHandle) -> Result<Option<crate::gpu::GpuTier>, EngineError> {
        self.shared.registry.tier(handle)
    }

    /// [`Engine::gpu_direct_stats`](crate::Engine::gpu_direct_stats) on an engine in this process.
    #[must_use]
    pub fn gpu_direct_stats(&self) -> crate::gpu::GpuDirectCounters {
        self.shared.gpu_direct.stats.snapshot()
    }

    /// [`Engine::buffer_nics`](crate::Engine::buffer_nics) on an engine in this process.
    #[must_use]
    pub fn buffer_nics(&self, handle: BufHandle) -> Option<crate::NicAffinity> {
        self.shared.registry.affinity(handle)
    }

    /// [`Engine::placement`](crate::Engine::placement) on an engine in this process.
    #[must_use]
    pub fn placement(&self) -> &crate::PlacementPlan {
        &self.shared.placement
    }

    /// [`Engine::deregister`](crate::Engine::deregister) on an engine in this process.
    pub fn deregister(&self, handle: BufHandle, timeout: Duration) -> Result<(), EngineError> {
        self.shared.registry.deregister(handle, timeout)
    }

    /// [`Engine::read`](crate::Engine::read) on an engine in this process.
    pub fn read(
        &self,
        handle: BufHandle,
        offset: u64,
        len: u64,
    ) -> Result<BufferView, EngineError> {
        self.shared
            .registry
            .view(handle, offset, len, self.shared.gpu.as_ref().map(|g| &g.rt))
    }

    /// [`Engine::copy_out`](crate::Engine::copy_out) on an engine in this process.
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

    /// [`Engine::copy_in`](crate::Engine::copy_in) on an engine in this process.
    pub fn copy_in(&self, handle: BufHandle, offset: u64, data: &[u8]) -> Result<(), EngineError> {
        self.shared.registry.copy_in(
            handle,
            offset,
            data,
            self.shared.gpu.as_ref().map(|g| &g.rt),
        )
    }

    /// [`Engine::queue_with`](crate::Engine::queue_with) on an engine in this process.
    pub fn queue_with(&self, options: QueueOptions) -> Result<Queue, EngineError> {
        let depth = options.depth;
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
        let completion_bell = Some(Arc::clone(&ready_fd) as Arc<dyn ring_api::Doorbell>);
        let (app, wq) = if options.timestamps {
            ring_api::queue_pair_timed(
                sq,
                cq,
                Some(worker.bell()),
                completion_bell,
                crate::sys::monotonic_ns,
            )
        } else {
            ring_api::queue_pair_with_completion_bell(sq, cq, Some(worker.bell()), completion_bell)
        }
        .map_err(EngineError::Ring)?;
        let id = self.next_queue_id.fetch_add(1, Ordering::Relaxed);
        worker.attach(wq, cq as usize, id);
        Ok(Queue::new(app, ready_fd, worker.bell()))
    }
}

/// Binds device registration `handle` (memory of GPU `ordinal`) to the NICs nearest that
/// GPU. A runtime that cannot say where the GPU is leaves it unbound (logged at debug level).
fn bind_device(shared: &Shared, handle: ring_api::BufHandle, ordinal: u32) {
    if !shared.placement.binds() {
        return;
    }
    let Some(gpu) = shared.gpu.as_ref() else {
        return;
    };
    match gpu.rt.pci_bus_id(ordinal) {
        Ok(pci) => {
            if let Some(a) = shared.placement.for_gpu(pci) {
                shared.registry.set_affinity(handle, a);
            }
        }
        Err(e) => tracing::debug!("GPU {ordinal}: no PCI address ({e}); buffer not bound to a NIC"),
    }
}

/// Binds host registration `handle` at `addr` to the NICs of the NUMA node of its first page.
fn bind_host(shared: &Shared, handle: ring_api::BufHandle, addr: *const u8) {
    if !shared.placement.binds() {
        return;
    }
    if let Some(node) = crate::mempolicy::node_of(addr)
        && let Some(a) = shared.placement.for_node(node)
    {
        shared.registry.set_affinity(handle, a);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upload table is the engine's: each engine has its own, and dropping the engine
    /// (its workers joined) frees it.
    #[test]
    fn each_engine_owns_its_upload_table() {
        let build = || {
            crate::Engine::builder()
                .endpoint_url("http://127.0.0.1:9")
                .credentials(crate::Credentials::new("k", "s"))
                .region("us-east-1")
                .placement(crate::Placement::Workers(1))
                .fabric(crate::Fabric::Http)
                .build()
                .unwrap()
        };
        let (a, b) = (build().into_local().unwrap(), build().into_local().unwrap());
        assert!(!Arc::ptr_eq(&a.shared.uploads, &b.shared.uploads));
        let table = Arc::downgrade(&a.shared.uploads);
        drop(a);
        assert!(table.upgrade().is_none(), "the table outlived its engine");
        drop(b);
    }
}
