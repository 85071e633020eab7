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
//! Device registrations ([`crate::Engine::register_device`]): the region's memory is pinned
//! host memory from the GPU runtime, a *mirror* of a device range of the same length. The
//! fabrics see only the mirror; the worker's stager (`worker/stager.rs`) copies a completed GET's
//! bytes mirror → device before posting its completion, and a PUT's bytes device → mirror
//! before starting it. The lease protocol covers both copies because the stager holds the
//! operation (and so its lease) until the copy has finished.

pub(crate) mod raw;

use std::collections::HashMap;
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use ring_api::BufHandle;

use crate::error::EngineError;
use crate::gpu::DevicePtr;
use crate::nic_plan::NicAffinity;
use raw::RawMem;

/// The device range a device registration mirrors (byte `i` of the region ↔ `dev + i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DeviceMirror {
    /// Device address of the region's byte 0.
    pub(crate) dev: DevicePtr,
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
    mem: RawMem,
    handle: BufHandle,
    leases: Mutex<Leases>,
    drained: Condvar,
    closing: AtomicBool,
    device: Option<DeviceMirror>,
    /// The NICs (and workers) its operations run on, set once right after registration
    /// (`nic_plan`); unset: any worker.
    affinity: OnceLock<NicAffinity>,
}

impl Region {
    /// Size in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.mem.len() as u64
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
}

impl LeaseGuard {
    /// Where this range lives on the device, when the registration is a device mirror.
    pub(crate) fn device_span(&self) -> Option<DeviceSpan> {
        let mirror = self.region.device?;
        let (host, len) = self.raw_range()?;
        Some(DeviceSpan {
            handle: self.region.handle.0,
            off: self.off,
            len: len as u64,
            host,
            dev: mirror.dev.offset(self.off)?,
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

    /// Another shared lease on the same range (held by the stager while it copies device →
    /// bounce, so the bytes stay out of reach of writers even if the operation ends first).
    pub(crate) fn share(&self) -> Result<LeaseGuard, LeaseError> {
        self.region.lease(self.off, self.len, false)
    }

    /// Length of the leased range.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Writes `data` at `at` bytes into the leased range; `false` if it would leave the range.
    /// Only exclusive leases are ever used to write (see `memory::raw`).
    pub(crate) fn write(&self, at: u64, data: &[u8]) -> bool {
        let fits = at
            .checked_add(data.len() as u64)
            .is_some_and(|e| e <= self.len);
        let Some(abs) = self
            .off
            .checked_add(at)
            .and_then(|a| usize::try_from(a).ok())
        else {
            return false;
        };
        fits && self.region.mem.write(abs, data)
    }

    /// Address and length of the leased range, for registering it with an RDMA fabric for
    /// the life of one operation (the lease must outlive that registration).
    pub(crate) fn raw_range(&self) -> Option<(std::ptr::NonNull<u8>, usize)> {
        let off = usize::try_from(self.off).ok()?;
        let len = usize::try_from(self.len).ok()?;
        Some((self.region.mem.addr_of(off, len)?, len))
    }

    /// The leased bytes from `at` to the end of the lease.
    pub(crate) fn bytes_from(&self, at: u64) -> &[u8] {
        let Some(rest) = self.len.checked_sub(at) else {
            return &[];
        };
        let (Some(abs), Ok(n)) = (
            self.off
                .checked_add(at)
                .and_then(|a| usize::try_from(a).ok()),
            usize::try_from(rest),
        ) else {
            return &[];
        };
        self.region.mem.slice(abs, n).unwrap_or_default()
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
/// `EBUSY`, and `deregister` waits for it.
#[derive(Debug)]
pub struct BufferView {
    guard: LeaseGuard,
}

impl Deref for BufferView {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.guard.bytes_from(0)
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
        self.insert_with(mem, None)
    }

    /// Registers `mem` as the bounce mirror of the device range `mirror` (same length).
    pub(crate) fn insert_device(
        &self,
        mem: RawMem,
        mirror: DeviceMirror,
    ) -> Result<BufHandle, EngineError> {
        self.insert_with(mem, Some(mirror))
    }

    fn insert_with(
        &self,
        mem: RawMem,
        device: Option<DeviceMirror>,
    ) -> Result<BufHandle, EngineError> {
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
            device,
            affinity: OnceLock::new(),
        });
        self.map
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, region);
        Ok(handle)
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

    /// A shared-lease view of `offset..offset+len`.
    pub(crate) fn view(
        &self,
        handle: BufHandle,
        offset: u64,
        len: u64,
    ) -> Result<BufferView, EngineError> {
        let region = self.get(handle).ok_or(EngineError::BadHandle(handle))?;
        let guard = region
            .lease(offset, len, false)
            .map_err(|e| lease_error(e, offset, len, &region))?;
        Ok(BufferView { guard })
    }

    /// Copies `data` into the registration under a short exclusive lease.
    pub(crate) fn copy_in(
        &self,
        handle: BufHandle,
        offset: u64,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let region = self.get(handle).ok_or(EngineError::BadHandle(handle))?;
        let len = data.len() as u64;
        let guard = region
            .lease(offset, len, true)
            .map_err(|e| lease_error(e, offset, len, &region))?;
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
    fn views_see_copied_data_and_block_deregister() {
        let (r, h) = registry_with(64);
        r.copy_in(h, 8, b"hello").unwrap();
        let v = r.view(h, 8, 5).unwrap();
        assert_eq!(&*v, b"hello");
        assert!(matches!(r.copy_in(h, 10, b"x"), Err(EngineError::Busy)));
        assert!(matches!(
            r.deregister(h, Duration::from_millis(20)),
            Err(EngineError::BusyTimeout(_))
        ));
        assert!(
            r.view(h, 0, 1).is_ok(),
            "a timed-out deregister leaves the handle usable"
        );
        drop(v);
        r.deregister(h, Duration::from_millis(20)).unwrap();
        assert!(matches!(r.view(h, 0, 1), Err(EngineError::BadHandle(_))));
        assert!(matches!(
            r.copy_in(BufHandle(0), 0, b"x"),
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
