//! The memory registry: registrations, bounds checks and leases.
//!
//! Every registration is a [`Region`] behind an `Arc`. The registry maps [`BufHandle`]s to
//! regions; an operation in flight and a [`BufferView`] each hold an `Arc` plus a *lease* on
//! the byte range they touch, so memory is freed only after the last user is gone
//! (ownership passes through in-flight operations, monoio style).
//!
//! Leases: an operation that writes registered memory (GET, RangeGet) takes an *exclusive*
//! lease on its destination range; one that reads it (PUT, UploadPart) and a [`BufferView`]
//! take *shared* leases. A lease that conflicts with one already held is refused: an
//! operation then completes with `EBUSY`, a view request returns [`EngineError::Busy`].
//! That is what makes [`crate::Engine::read`] safe: it can never observe bytes a worker is
//! writing. Conflict checks scan the region's lease list, whose length is bounded by the
//! operations in flight on that region.
//!
//! Device registrations ([`crate::Engine::register_device`]): the region is a device range and
//! owns no host memory. An operation on it is given a [`bounce::BounceRange`] of its own
//! length from the engine's bounce pool when it starts ([`LeaseGuard::attach_bounce`]); from
//! then on every host address the lease resolves ([`LeaseGuard::write`],
//! [`LeaseGuard::bytes_from`], [`LeaseGuard::raw_range`], [`LeaseGuard::device_span`]) is in
//! that range, and before it none is (they write nothing, read nothing, return `None`). The
//! worker's stager (`worker/stager.rs`) copies a completed GET's bytes bounce → device before
//! posting its completion, and a PUT's bytes device → bounce before starting it. The lease
//! protocol covers both copies because the stager holds the operation (and so its lease and
//! bounce range) until the copy has finished. [`LeaseGuard::tier`] says which kind of memory an
//! operation moves (the hook for a direct, dmabuf-registered tier).
//!
//! A device registration of the GPUDirect tier (`gpu::direct`) also keeps the dmabuf of its
//! device range ([`Registry::set_direct`]); an RDMA GET may then register its window from it
//! ([`LeaseGuard::dmabuf_span`]) and mark the lease ([`LeaseGuard::set_landed_direct`]), so
//! the worker completes it without a copy into VRAM. Such an operation still takes its bounce
//! range when it starts (an attempt that cannot go direct — HTTP, another dialect — is staged
//! through it); the range is released unused when the bytes landed directly.

pub(crate) mod bounce;
pub(crate) mod raw;
pub(crate) mod shared;

pub use shared::SharedMemory;

use std::collections::HashMap;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ring_api::BufHandle;

use crate::error::EngineError;
use crate::gpu::direct::{DirectSource, DmabufSpan};
use crate::gpu::{DevicePtr, GpuRuntime};
use crate::nic_plan::NicAffinity;
use bounce::BounceRange;
use raw::RawMem;

/// What a registration is.
#[derive(Debug)]
pub(crate) enum Backing {
    /// Host memory the fabrics read and write directly.
    Host(RawMem),
    /// `len` bytes of device memory at `dev` (byte `i` of the region ↔ `dev + i`), staged
    /// through the bounce pool; no host memory of its own.
    Device {
        /// Device address of the region's byte 0.
        dev: DevicePtr,
        /// Bytes.
        len: u64,
    },
}

/// Which memory an operation's bytes move through (see [`LeaseGuard::tier`]).
///
/// A GPUDirect-tier registration is `DeviceStaged` too: its operations take a bounce range
/// like any device operation, and an RDMA GET whose window was registered from the dmabuf
/// marks its lease ([`LeaseGuard::set_landed_direct`]) so the stager skips its copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MemoryTier {
    /// Host memory: the fabrics use the registration itself.
    Host,
    /// Device memory staged through a bounce range; `staged` once the range is attached.
    DeviceStaged {
        /// Whether the operation holds its bounce range.
        staged: bool,
    },
}

/// A leased range of a device registration: where its bounce bytes are and where they go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceSpan {
    /// The registration (copies never merge across registrations).
    pub(crate) handle: u32,
    /// Offset of the range in the registration.
    pub(crate) off: u64,
    /// Bytes.
    pub(crate) len: u64,
    /// Host (bounce) address of the range's first byte.
    pub(crate) host: NonNull<u8>,
    /// Device address of the range's first byte.
    pub(crate) dev: DevicePtr,
}

/// How [`crate::Engine::register_host`] allocates.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegisterOptions {
    /// Lock the pages in RAM (`mlock`). Best effort unless [`RegisterOptions::require_pinned`].
    pub pinned: bool,
    /// Fail with [`EngineError::Pin`] instead of falling back to pageable memory.
    pub require_pinned: bool,
}

impl RegisterOptions {
    /// Pageable memory.
    #[must_use]
    pub fn pageable() -> Self {
        Self::default()
    }

    /// Pinned memory, falling back to pageable (with a warning on stderr) if `mlock` fails.
    #[must_use]
    pub fn pinned() -> Self {
        Self {
            pinned: true,
            require_pinned: false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Lease {
    id: u64,
    start: u64,
    end: u64,
    exclusive: bool,
}

#[derive(Debug, Default)]
struct Leases {
    list: Vec<Lease>,
    next_id: u64,
}

/// Why a lease was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseError {
    /// Outside the registration or overflowing.
    Bounds,
    /// Conflicts with a held lease.
    Busy,
    /// The registration is being deregistered.
    Closing,
}

/// One registration.
#[derive(Debug)]
pub(crate) struct Region {
    mem: Backing,
    handle: BufHandle,
    leases: Mutex<Leases>,
    drained: Condvar,
    closing: AtomicBool,
    /// The dmabuf of a GPUDirect-tier device registration.
    direct: OnceLock<DirectSource>,
    /// The NICs (and workers) its operations run on, set once right after registration
    /// (`nic_plan`); unset: any worker.
    affinity: OnceLock<NicAffinity>,
}

impl Region {
    /// Size in bytes.
    pub(crate) fn len(&self) -> u64 {
        match &self.mem {
            Backing::Host(m) => m.len() as u64,
            Backing::Device { len, .. } => *len,
        }
    }

    /// The first byte of a host registration (`None`: device memory).
    pub(crate) fn host_base(&self) -> Option<std::ptr::NonNull<u8>> {
        match &self.mem {
            Backing::Host(m) => m.addr_of(0, 1),
            Backing::Device { .. } => None,
        }
    }

    /// The device range of a device registration.
    fn device(&self) -> Option<DevicePtr> {
        match &self.mem {
            Backing::Host(_) => None,
            Backing::Device { dev, .. } => Some(*dev),
        }
    }

    /// Takes a lease on `off..off+len` (see the module docs).
    pub(crate) fn lease(
        self: &Arc<Self>,
        off: u64,
        len: u64,
        exclusive: bool,
    ) -> Result<LeaseGuard, LeaseError> {
        let end = off.checked_add(len).ok_or(LeaseError::Bounds)?;
        if end > self.len() {
            return Err(LeaseError::Bounds);
        }
        if self.closing.load(Ordering::Acquire) {
            return Err(LeaseError::Closing);
        }
        let mut l = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        let conflict = len > 0
            && l.list
                .iter()
                .any(|h| (exclusive || h.exclusive) && h.start < end && off < h.end);
        if conflict {
            return Err(LeaseError::Busy);
        }
        l.next_id = l.next_id.wrapping_add(1);
        let id = l.next_id;
        l.list.push(Lease {
            id,
            start: off,
            end,
            exclusive,
        });
        Ok(LeaseGuard {
            region: Arc::clone(self),
            id,
            off,
            len,
            exclusive,
            staged_out: AtomicBool::new(false),
            bounce: None,
            landed_direct: AtomicBool::new(false),
        })
    }

    fn release(&self, id: u64) {
        let mut l = self.leases.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = l.list.iter().position(|h| h.id == id) {
            l.list.swap_remove(i);
        }
        if l.list.is_empty() {
            self.drained.notify_all();
        }
    }
}

/// A held lease; released on drop. Owns an `Arc` of its region, so the memory outlives it.
#[derive(Debug)]
pub(crate) struct LeaseGuard {
    region: Arc<Region>,
    id: u64,
    /// INVARIANT: `off + len <= region.len()` (checked by `Region::lease`).
    off: u64,
    len: u64,
    /// Whether the lease is exclusive (the operation writes the range: GET, RangeGet).
    exclusive: bool,
    /// Device registrations: the range's bytes have been copied device → bounce for this
    /// operation (a PUT retried after a failed attempt is not copied again).
    staged_out: AtomicBool,
    /// Device registrations: the operation's bounce range (shared with the stager while a
    /// copy into it is in flight), once attached.
    bounce: Option<Arc<BounceRange>>,
    /// The current attempt's RDMA window is the dmabuf of the device range (GPUDirect): the
    /// bytes land in VRAM, not in bounce memory.
    landed_direct: AtomicBool,
}

/// Where a lease's bytes are on the host: the registration's memory at an offset, or a
/// bounce range.
enum HostBytes<'a> {
    Host(&'a RawMem, u64),
    Bounce(&'a BounceRange),
}

impl LeaseGuard {
    /// The dmabuf arguments of this range, when the registration has the GPUDirect tier.
    pub(crate) fn dmabuf_span(&self) -> Option<DmabufSpan<'_>> {
        self.region.direct.get()?.span(self.off, self.len)
    }

    /// Whether the current attempt's RDMA window is the dmabuf (set per attempt by the RDMA
    /// client; cleared by the worker before each attempt).
    pub(crate) fn landed_direct(&self) -> bool {
        self.landed_direct.load(Ordering::Relaxed)
    }

    /// Records whether the current attempt's RDMA window is the dmabuf.
    pub(crate) fn set_landed_direct(&self, direct: bool) {
        self.landed_direct.store(direct, Ordering::Relaxed);
    }

    /// Which memory the operation's bytes move through.
    pub(crate) fn tier(&self) -> MemoryTier {
        match self.region.mem {
            Backing::Host(_) => MemoryTier::Host,
            Backing::Device { .. } => MemoryTier::DeviceStaged {
                staged: self.bounce.is_some(),
            },
        }
    }

    /// Gives a device lease its bounce range (of at least the lease's length). Refused
    /// (handing the range back) for host leases, leases that already have one, and ranges
    /// shorter than the lease.
    pub(crate) fn attach_bounce(&mut self, range: BounceRange) -> Result<(), BounceRange> {
        let fits = range.len() >= self.len;
        if self.tier() != (MemoryTier::DeviceStaged { staged: false }) || !fits {
            return Err(range);
        }
        self.bounce = Some(Arc::new(range));
        Ok(())
    }

    fn host_bytes(&self) -> Option<HostBytes<'_>> {
        match &self.region.mem {
            Backing::Host(m) => Some(HostBytes::Host(m, self.off)),
            Backing::Device { .. } => self.bounce.as_deref().map(HostBytes::Bounce),
        }
    }

    /// Where this range lives on the device and in its bounce range, for a device registration
    /// whose operation holds its bounce range.
    pub(crate) fn device_span(&self) -> Option<DeviceSpan> {
        let dev = self.region.device()?;
        let (host, len) = self.bounce.as_ref()?.raw_range()?;
        Some(DeviceSpan {
            handle: self.region.handle.0,
            off: self.off,
            len: (len as u64).min(self.len),
            host,
            dev: dev.offset(self.off)?,
        })
    }

    /// The workers operations on this registration run on; `None`: any worker.
    pub(crate) fn workers(&self) -> Option<&[usize]> {
        self.region.affinity.get().map(|a| a.workers.as_slice())
    }

    /// Whether the operation holding this lease writes the range.
    pub(crate) fn is_exclusive(&self) -> bool {
        self.exclusive
    }

    /// Whether the device → bounce copy for this operation has completed.
    pub(crate) fn is_staged_out(&self) -> bool {
        self.staged_out.load(Ordering::Relaxed)
    }

    /// Records that the device → bounce copy for this operation has completed.
    pub(crate) fn mark_staged_out(&self) {
        self.staged_out.store(true, Ordering::Relaxed);
    }

    /// Another shared lease on the same range, with the same bounce range (held by the stager
    /// while it copies device → bounce, so the device bytes stay out of reach of writers and
    /// the bounce range stays allocated even if the operation ends first).
    pub(crate) fn share(&self) -> Result<LeaseGuard, LeaseError> {
        let mut g = self.region.lease(self.off, self.len, false)?;
        g.bounce = self.bounce.clone();
        Ok(g)
    }

    /// Splits the lease into consecutive leases of `chunk` bytes each (the last shorter),
    /// of the same kind, in order. The region's lease list trades this lease for the parts
    /// under one lock, so no other operation can take the range in between. A lease that
    /// already has a bounce range, an empty one and `chunk == 0` are handed back.
    pub(crate) fn split(self, chunk: u64) -> Result<Vec<LeaseGuard>, LeaseGuard> {
        if chunk == 0 || self.len == 0 || self.bounce.is_some() {
            return Err(self);
        }
        let mut parts = Vec::new();
        {
            let mut l = self
                .region
                .leases
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let Some(i) = l.list.iter().position(|h| h.id == self.id) else {
                drop(l);
                return Err(self);
            };
            l.list.swap_remove(i);
            let mut at = 0;
            while at < self.len {
                let len = chunk.min(self.len - at);
                l.next_id = l.next_id.wrapping_add(1);
                let id = l.next_id;
                let off = self.off + at;
                l.list.push(Lease {
                    id,
                    start: off,
                    end: off + len,
                    exclusive: self.exclusive,
                });
                parts.push(LeaseGuard {
                    region: Arc::clone(&self.region),
                    id,
                    off,
                    len,
                    exclusive: self.exclusive,
                    staged_out: AtomicBool::new(false),
                    bounce: None,
                    landed_direct: AtomicBool::new(false),
                });
                at += len;
            }
        }
        // Its entry is gone from the list: dropping it releases nothing.
        drop(self);
        Ok(parts)
    }

    /// Length of the leased range.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Writes `data` at `at` bytes into the leased range; `false` if it would leave the range.
    /// Only exclusive leases are ever used to write (see `memory::raw`).
    /// Device registrations write into the operation's bounce range, and nothing before it
    /// has one (`false`).
    pub(crate) fn write(&self, at: u64, data: &[u8]) -> bool {
        self.fill_with(at, data.len(), |dst| dst.copy_from_slice(data))
            .is_some()
    }

    /// Runs `f` on `len` bytes at `at` of the leased range as a mutable slice, so a socket
    /// read lands straight in the destination (the same rules as [`Self::write`]); `None` when
    /// they would leave the range or the range has no host bytes yet.
    pub(crate) fn fill_with<R>(
        &self,
        at: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        let fits = at.checked_add(len as u64).is_some_and(|e| e <= self.len);
        if !fits {
            return None;
        }
        match self.host_bytes()? {
            HostBytes::Host(mem, off) => {
                let abs = usize::try_from(off.checked_add(at)?).ok()?;
                mem.fill_with(abs, len, f)
            }
            HostBytes::Bounce(b) => b.fill_with(at, len, f),
        }
    }

    /// Address and length of the leased range on the host (a device registration's bounce
    /// range; `None` before it has one), for registering it with an RDMA fabric for the life
    /// of one operation (the lease must outlive that registration).
    pub(crate) fn raw_range(&self) -> Option<(std::ptr::NonNull<u8>, usize)> {
        let len = usize::try_from(self.len).ok()?;
        match self.host_bytes()? {
            HostBytes::Host(mem, off) => Some((mem.addr_of(usize::try_from(off).ok()?, len)?, len)),
            HostBytes::Bounce(b) => {
                let (ptr, n) = b.raw_range()?;
                (n >= len).then_some((ptr, len))
            }
        }
    }

    /// The leased bytes from `at` to the end of the lease (empty for a device registration
    /// without its bounce range).
    pub(crate) fn bytes_from(&self, at: u64) -> &[u8] {
        let Some(rest) = self.len.checked_sub(at) else {
            return &[];
        };
        match self.host_bytes() {
            Some(HostBytes::Host(mem, off)) => {
                let (Some(abs), Ok(n)) = (
                    off.checked_add(at).and_then(|a| usize::try_from(a).ok()),
                    usize::try_from(rest),
                ) else {
                    return &[];
                };
                mem.slice(abs, n).unwrap_or_default()
            }
            Some(HostBytes::Bounce(b)) => b
                .bytes_from(at)
                .get(..usize::try_from(rest).unwrap_or(usize::MAX))
                .unwrap_or_default(),
            None => &[],
        }
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.region.release(self.id);
    }
}

/// Read-only access to completed data in a registration (from [`crate::Engine::read`]).
///
/// Holds a shared lease: while it lives, operations that would write this range complete with
/// `EBUSY`, and `deregister` waits for it. For host memory it dereferences to the registered
/// bytes themselves; for a device registration to a host copy of the device bytes made when
/// the view was taken.
#[derive(Debug)]
pub struct BufferView {
    /// The lease on the registered bytes (`None`: a copy that holds no lease).
    guard: Option<LeaseGuard>,
    /// The device bytes, copied out (device registrations only).
    copied: Option<Vec<u8>>,
}

impl BufferView {
    /// A view of bytes already copied out (an attached engine's read of a shared mapping).
    pub(crate) fn owned(bytes: Vec<u8>) -> Self {
        Self {
            guard: None,
            copied: Some(bytes),
        }
    }
}

impl Deref for BufferView {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match (&self.copied, &self.guard) {
            (Some(v), _) => v,
            (None, Some(g)) => g.bytes_from(0),
            (None, None) => &[],
        }
    }
}

/// Handle → region map.
#[derive(Debug)]
pub(crate) struct Registry {
    map: RwLock<HashMap<u32, Arc<Region>>>,
    next: AtomicU32,
}

impl Registry {
    pub(crate) fn new() -> Self {
        // Handle 0 is never issued, so a zeroed entry never names a registration by accident.
        Self {
            map: RwLock::new(HashMap::new()),
            next: AtomicU32::new(1),
        }
    }

    pub(crate) fn insert(&self, mem: RawMem) -> Result<BufHandle, EngineError> {
        self.insert_with(Backing::Host(mem))
    }

    /// Registers the device range `dev..dev+len` (checked by the caller); no host memory.
    pub(crate) fn insert_device(&self, dev: DevicePtr, len: u64) -> Result<BufHandle, EngineError> {
        self.insert_with(Backing::Device { dev, len })
    }

    fn insert_with(&self, mem: Backing) -> Result<BufHandle, EngineError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if id == 0 || id == u32::MAX {
            return Err(EngineError::Config("buffer handle space exhausted".into()));
        }
        let handle = BufHandle(id);
        let region = Arc::new(Region {
            mem,
            handle,
            leases: Mutex::new(Leases::default()),
            drained: Condvar::new(),
            closing: AtomicBool::new(false),
            direct: OnceLock::new(),
            affinity: OnceLock::new(),
        });
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, region);
        Ok(handle)
    }

    /// Gives the device registration `handle` the GPUDirect tier (its dmabuf). `false` when the
    /// handle is unknown, not a device registration, or already has one.
    pub(crate) fn set_direct(&self, handle: BufHandle, src: DirectSource) -> bool {
        self.get(handle)
            .is_some_and(|r| r.device().is_some() && r.direct.set(src).is_ok())
    }

    /// The tier of a device registration (`None`: a host registration); `BadHandle` when
    /// unknown.
    pub(crate) fn tier(
        &self,
        handle: BufHandle,
    ) -> Result<Option<crate::gpu::GpuTier>, EngineError> {
        let r = self.get(handle).ok_or(EngineError::BadHandle(handle))?;
        Ok(r.device().map(|_| {
            if r.direct.get().is_some() {
                crate::gpu::GpuTier::Direct
            } else {
                crate::gpu::GpuTier::Staged
            }
        }))
    }

    /// Binds a registration to NICs (once; later calls are ignored).
    pub(crate) fn set_affinity(&self, handle: BufHandle, affinity: NicAffinity) {
        if let Some(r) = self.get(handle) {
            let _ = r.affinity.set(affinity);
        }
    }

    /// The NICs a registration is bound to, if any.
    pub(crate) fn affinity(&self, handle: BufHandle) -> Option<NicAffinity> {
        self.get(handle).and_then(|r| r.affinity.get().cloned())
    }

    pub(crate) fn get(&self, handle: BufHandle) -> Option<Arc<Region>> {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&handle.0)
            .cloned()
    }

    /// A shared-lease view of `offset..offset+len`. A device registration's bytes are copied
    /// out of VRAM with `rt` (synchronously) while the lease keeps every writer away.
    pub(crate) fn view(
        &self,
        handle: BufHandle,
        offset: u64,
        len: u64,
        rt: Option<&Arc<dyn GpuRuntime>>,
    ) -> Result<BufferView, EngineError> {
        let region = self.get(handle).ok_or(EngineError::BadHandle(handle))?;
        let guard = region
            .lease(offset, len, false)
            .map_err(|e| lease_error(e, offset, len, &region))?;
        let copied = match region.device() {
            None => None,
            Some(dev) => {
                let (rt, at) = device_access(rt, dev, offset)?;
                let n = usize::try_from(len).map_err(|_| EngineError::Alloc { len: usize::MAX })?;
                let mut out = vec![0u8; n];
                raw::copy_from_device(rt, &mut out, at).map_err(EngineError::Gpu)?;
                Some(out)
            }
        };
        Ok(BufferView {
            guard: Some(guard),
            copied,
        })
    }

    /// Copies `data` into the registration under a short exclusive lease (into VRAM with
    /// `rt`, synchronously, for a device registration).
    pub(crate) fn copy_in(
        &self,
        handle: BufHandle,
        offset: u64,
        data: &[u8],
        rt: Option<&Arc<dyn GpuRuntime>>,
    ) -> Result<(), EngineError> {
        let region = self.get(handle).ok_or(EngineError::BadHandle(handle))?;
        let len = data.len() as u64;
        let guard = region
            .lease(offset, len, true)
            .map_err(|e| lease_error(e, offset, len, &region))?;
        if let Some(dev) = region.device() {
            let (rt, at) = device_access(rt, dev, offset)?;
            raw::copy_to_device(rt, at, data).map_err(EngineError::Gpu)?;
            drop(guard);
            return Ok(());
        }
        if guard.write(0, data) {
            Ok(())
        } else {
            Err(EngineError::OutOfBounds {
                offset,
                len,
                size: region.len(),
            })
        }
    }

    /// Removes `handle` once no lease is held on it, waiting at most `timeout`.
    ///
    /// New operations on the handle are refused (`EBUSY`) while waiting. On timeout the
    /// registration stays usable and [`EngineError::BusyTimeout`] is returned.
    pub(crate) fn deregister(
        &self,
        handle: BufHandle,
        timeout: Duration,
    ) -> Result<(), EngineError> {
        let region = self.get(handle).ok_or(EngineError::BadHandle(handle))?;
        region.closing.store(true, Ordering::Release);
        let limit = Instant::now() + timeout;
        let mut l = region.leases.lock().unwrap_or_else(PoisonError::into_inner);
        while !l.list.is_empty() {
            let left = limit.saturating_duration_since(Instant::now());
            if left.is_zero() {
                region.closing.store(false, Ordering::Release);
                return Err(EngineError::BusyTimeout(timeout));
            }
            l = region
                .drained
                .wait_timeout(l, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(l);
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&region.handle.0);
        Ok(())
    }
}

/// The runtime and device address of byte `offset` of a device registration at `dev` (the
/// lease taken by the caller has checked the bounds).
fn device_access(
    rt: Option<&Arc<dyn GpuRuntime>>,
    dev: DevicePtr,
    offset: u64,
) -> Result<(&Arc<dyn GpuRuntime>, DevicePtr), EngineError> {
    let rt = rt.ok_or(EngineError::Unsupported(
        "device memory: no GPU runtime (build the engine with EngineBuilder::gpu)",
    ))?;
    let at = dev
        .offset(offset)
        .ok_or_else(|| EngineError::Config("device range overflows".into()))?;
    Ok((rt, at))
}

fn lease_error(e: LeaseError, offset: u64, len: u64, region: &Region) -> EngineError {
    match e {
        LeaseError::Bounds => EngineError::OutOfBounds {
            offset,
            len,
            size: region.len(),
        },
        LeaseError::Busy | LeaseError::Closing => EngineError::Busy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_with(len: usize) -> (Registry, BufHandle) {
        let r = Registry::new();
        let (mem, _) = RawMem::alloc(len, false).unwrap();
        let h = r.insert(mem).unwrap();
        (r, h)
    }

    #[test]
    fn leases_conflict_only_when_a_writer_overlaps() {
        let (r, h) = registry_with(100);
        let region = r.get(h).unwrap();
        let w = region.lease(10, 10, true).unwrap();
        assert_eq!(region.lease(19, 1, false).unwrap_err(), LeaseError::Busy);
        assert_eq!(region.lease(0, 11, true).unwrap_err(), LeaseError::Busy);
        let _adjacent = region.lease(20, 5, true).unwrap();
        let _before = region.lease(0, 10, false).unwrap();
        let _shared_too = region.lease(0, 10, false).unwrap();
        assert_eq!(region.lease(95, 6, false).unwrap_err(), LeaseError::Bounds);
        assert_eq!(
            region.lease(u64::MAX, 2, false).unwrap_err(),
            LeaseError::Bounds
        );
        drop(w);
        let _now_free = region.lease(10, 10, false).unwrap();
    }

    #[test]
    fn a_split_lease_holds_its_range_in_parts_that_release_one_by_one() {
        let (r, h) = registry_with(100);
        let region = r.get(h).unwrap();
        let w = region.lease(10, 10, true).unwrap();
        let parts = w.split(4).unwrap();
        let spans: Vec<(u64, u64)> = parts.iter().map(|p| (p.off, p.len())).collect();
        assert_eq!(spans, [(10, 4), (14, 4), (18, 2)]);
        assert!(parts.iter().all(LeaseGuard::is_exclusive));
        assert!(parts[0].write(0, b"abcd") && !parts[0].write(1, b"abcd"));
        // Each part still holds its bytes; released, they are free again.
        let [a, b, c] = <[LeaseGuard; 3]>::try_from(parts).unwrap();
        assert_eq!(region.lease(19, 1, false).unwrap_err(), LeaseError::Busy);
        drop(c);
        let _free = region.lease(18, 2, false).unwrap();
        assert_eq!(region.lease(10, 1, false).unwrap_err(), LeaseError::Busy);
        drop((a, b));
        assert_eq!(
            &region.lease(10, 4, false).unwrap().bytes_from(0)[..4],
            b"abcd"
        );
        // Nothing to split: handed back.
        assert!(region.lease(0, 0, true).unwrap().split(4).is_err());
        assert!(region.lease(0, 5, true).unwrap().split(0).is_err());
    }

    #[test]
    fn views_see_copied_data_and_block_deregister() {
        let (r, h) = registry_with(64);
        r.copy_in(h, 8, b"hello", None).unwrap();
        let v = r.view(h, 8, 5, None).unwrap();
        assert_eq!(&*v, b"hello");
        assert!(matches!(
            r.copy_in(h, 10, b"x", None),
            Err(EngineError::Busy)
        ));
        assert!(matches!(
            r.deregister(h, Duration::from_millis(20)),
            Err(EngineError::BusyTimeout(_))
        ));
        assert!(
            r.view(h, 0, 1, None).is_ok(),
            "a timed-out deregister leaves the handle usable"
        );
        drop(v);
        r.deregister(h, Duration::from_millis(20)).unwrap();
        assert!(matches!(
            r.view(h, 0, 1, None),
            Err(EngineError::BadHandle(_))
        ));
        assert!(matches!(
            r.copy_in(BufHandle(0), 0, b"x", None),
            Err(EngineError::BadHandle(_))
        ));
    }

    #[test]
    fn deregister_waits_for_a_lease_released_by_another_thread() {
        let (r, h) = registry_with(64);
        let guard = r.get(h).unwrap().lease(0, 64, true).unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            drop(guard);
        });
        r.deregister(h, Duration::from_secs(5)).unwrap();
        t.join().unwrap();
    }
}
