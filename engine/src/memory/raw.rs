//! Raw registered memory: the only place the engine dereferences registration pointers.
//!
//! A [`RawMem`] is either an engine-owned, page-aligned allocation (optionally `mlock`ed) or a
//! caller-owned range passed to `Engine::register_raw`. Every access is bounds-checked here;
//! *who* may access *which* bytes *when* is decided by the lease protocol in
//! [`super::Region`], whose invariant this module relies on:
//!
//! INVARIANT (leases): while a byte range is covered by an exclusive lease, only the lease
//! holder reads or writes it; while it is covered by shared leases, nobody writes it. The
//! engine's own code only calls [`RawMem::fill_with`] under an exclusive lease and
//! [`RawMem::slice`] under a shared one. The bounce pool's memory (`super::bounce`) is one
//! `RawMem` whose ranges are each owned by one operation at a time (the pool's allocator
//! never hands out overlapping ranges): the owner is the only one to touch its range, and
//! what it does with it is governed by its lease on the device registration exactly as above.
//!
//! Device registrations have no `RawMem`; [`copy_from_device`] and [`copy_to_device`] copy
//! their bytes synchronously through the GPU runtime for `Engine::read` / `Engine::copy_in`.
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::gpu::{GpuError, GpuRuntime};

/// Page size used to align engine-owned allocations (and what `mlock` works in).
pub(crate) const PAGE: usize = 4096;

/// A registered byte range.
#[derive(Debug)]
pub(crate) struct RawMem {
    /// INVARIANT: `ptr..ptr+len` is valid for reads and writes for the life of `self` (owned:
    /// we allocated it with `layout`; raw: the `register_raw` caller promised it).
    ptr: NonNull<u8>,
    len: usize,
    /// `Some` when we allocated the memory and must free it with this layout.
    layout: Option<Layout>,
    /// `Some` when the memory is pinned host memory from this GPU runtime
    /// (`GpuRuntime::alloc_pinned`), freed with `free_pinned` on drop.
    gpu: Option<Arc<dyn GpuRuntime>>,
    /// Whether `mlock` succeeded (so `munlock` on drop).
    locked: bool,
}

// SAFETY: RawMem is an address range, not thread-affine; concurrent access to the bytes is
// serialized by the lease protocol (module INVARIANT), so sharing the handle is sound.
unsafe impl Send for RawMem {}
// SAFETY: as above; `&RawMem` only exposes bounds-checked, lease-governed accessors.
unsafe impl Sync for RawMem {}

impl RawMem {
    /// Allocates `len` zeroed bytes aligned to [`PAGE`]; with `pinned`, also `mlock`s them.
    ///
    /// A failed `mlock` returns the memory unpinned plus the error, so the caller decides
    /// whether pinning was a requirement or a wish.
    pub(crate) fn alloc(len: usize, pinned: bool) -> Result<(Self, Option<io::Error>), usize> {
        let layout = Layout::from_size_align(len.max(1), PAGE).map_err(|_| len)?;
        // SAFETY: `layout` has a non-zero size (len.max(1)) and a valid power-of-two alignment.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(len)?;
        let mut mem = Self {
            ptr,
            len,
            layout: Some(layout),
            gpu: None,
            locked: false,
        };
        let mut warning = None;
        if pinned {
            // SAFETY: `ptr..ptr+len` is the allocation we just made; mlock only changes
            // residency, never contents.
            let rc = unsafe { libc::mlock(mem.ptr.as_ptr().cast(), len) };
            if rc == 0 {
                mem.locked = true;
            } else {
                warning = Some(io::Error::last_os_error());
            }
        }
        Ok((mem, warning))
    }

    /// Wraps caller-owned memory.
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must be valid for reads and writes until the registration is dropped
    /// (after `deregister` returns and every operation on it has completed), and the caller
    /// must not access bytes covered by an in-flight operation until its completion is reaped.
    pub(crate) unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Self {
        Self {
            ptr,
            len,
            layout: None,
            gpu: None,
            locked: false,
        }
    }

    /// Allocates `len` (> 0) bytes of pinned host memory from `rt` (page-locked and mapped
    /// for DMA by the GPU's copy engines): the engine's bounce pool. Not zeroed (the runtime's
    /// pages come from the kernel, zero-filled; every bounce range is written — by a fabric or
    /// a copy from VRAM — before its bytes are read).
    pub(crate) fn alloc_gpu_pinned(rt: &Arc<dyn GpuRuntime>, len: usize) -> Result<Self, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument("pinned buffer of 0 bytes".into()));
        }
        let raw = rt.alloc_pinned(len)?;
        let ptr = NonNull::new(raw).ok_or_else(|| {
            GpuError::InvalidArgument("runtime returned a null pinned buffer".into())
        })?;
        Ok(Self {
            ptr,
            len,
            layout: None,
            gpu: Some(Arc::clone(rt)),
            locked: false,
        })
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the pages are locked in RAM.
    #[cfg(test)]
    pub(crate) fn is_locked(&self) -> bool {
        self.locked
    }

    /// `Some((start, end))` if `off..off+len` lies inside the registration.
    fn span(&self, off: usize, len: usize) -> Option<usize> {
        let end = off.checked_add(len)?;
        (end <= self.len).then_some(off)
    }

    /// Runs `f` on the bytes `off..off+len` as a mutable slice (a socket read straight into
    /// registered memory), or returns `None` when out of bounds.
    ///
    /// Callers hold an exclusive lease over the range (module INVARIANT); the slice lives
    /// only for the call.
    pub(crate) fn fill_with<R>(
        &self,
        off: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        let off = self.span(off, len)?;
        // SAFETY: in bounds of the live registration (checked above, field INVARIANT); the
        // exclusive lease guarantees no other access to these bytes while the slice lives,
        // which is the duration of `f` only. Bytes have no invalid values, so whatever `f`
        // leaves there is a valid `u8` sequence.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(off), len) };
        Some(f(dst))
    }

    /// The address of `off..off+len` for a fabric registration (`engine::soft`
    /// `register_raw`), or `None` when out of bounds. Safe: no access happens here; whoever
    /// registers it takes over the lease rules (module INVARIANT).
    pub(crate) fn addr_of(&self, off: usize, len: usize) -> Option<NonNull<u8>> {
        let off = self.span(off, len)?;
        NonNull::new(self.ptr.as_ptr().wrapping_add(off))
    }

    /// The bytes at `off..off+len`, or `None` when out of bounds.
    ///
    /// Callers hold a shared lease over the range for as long as the slice lives (module
    /// INVARIANT), so nobody writes these bytes meanwhile.
    pub(crate) fn slice(&self, off: usize, len: usize) -> Option<&[u8]> {
        let off = self.span(off, len)?;
        // SAFETY: in bounds of the live registration (checked above, field INVARIANT), and the
        // shared lease excludes writers for the slice's lifetime, which `&self` bounds.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(off), len) })
    }
}

/// Copies `out.len()` bytes of device memory at `src` into `out`, synchronously.
///
/// The caller holds a lease over the device bytes (so no operation writes them meanwhile) of
/// a device registration, whose registrant promised `src..src+len` lies in a live allocation
/// of `rt` (`Engine::register_device`'s contract; the lease checked the bounds).
pub(crate) fn copy_from_device(
    rt: &Arc<dyn GpuRuntime>,
    out: &mut [u8],
    src: crate::gpu::DevicePtr,
) -> Result<(), GpuError> {
    if out.is_empty() {
        return Ok(());
    }
    // SAFETY: `out` is an exclusive borrow of `out.len()` writable bytes for the duration of
    // the call; the device range is valid by the caller's contract above.
    unsafe { rt.memcpy_d2h(out.as_mut_ptr(), src, out.len()) }
}

/// Copies `data` into device memory at `dst`, synchronously (same contract as
/// [`copy_from_device`], with an exclusive lease).
pub(crate) fn copy_to_device(
    rt: &Arc<dyn GpuRuntime>,
    dst: crate::gpu::DevicePtr,
    data: &[u8],
) -> Result<(), GpuError> {
    if data.is_empty() {
        return Ok(());
    }
    // SAFETY: `data` is readable for the call; the device range is valid and leased
    // exclusively by the caller (contract above).
    unsafe { rt.memcpy_h2d(dst, data.as_ptr(), data.len()) }
}

impl Drop for RawMem {
    fn drop(&mut self) {
        if self.locked {
            // SAFETY: the range was locked by `alloc` and is still allocated.
            unsafe { libc::munlock(self.ptr.as_ptr().cast(), self.len) };
        }
        if let Some(layout) = self.layout {
            // SAFETY: allocated by `alloc_zeroed` with exactly this layout, freed once.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
        if let Some(rt) = self.gpu.take() {
            // SAFETY: allocated by `rt.alloc_pinned` in `alloc_gpu_pinned`, freed once here;
            // this is the bounce pool's memory, dropped with the pool after its last range
            // (each range holds the pool), and the worker's stager waits for every copy from or
            // into a range before it drops the operation (and range) it holds.
            let _ = unsafe { rt.free_pinned(self.ptr.as_ptr()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_is_page_aligned_zeroed_and_bounds_checked() {
        let (m, _) = RawMem::alloc(10_000, false).unwrap();
        assert_eq!(m.ptr.as_ptr() as usize % PAGE, 0);
        assert_eq!(m.slice(0, 10_000).unwrap().iter().copied().max(), Some(0));
        assert!(
            m.fill_with(9_998, 2, |d| d.copy_from_slice(b"ab"))
                .is_some()
        );
        assert!(m.fill_with(9_999, 2, |_| ()).is_none());
        assert!(m.fill_with(usize::MAX, 1, |_| ()).is_none());
        assert_eq!(m.slice(9_998, 2).unwrap(), b"ab");
        assert!(m.slice(9_999, 2).is_none());
        assert!(m.slice(usize::MAX, 2).is_none());
    }

    #[test]
    fn pinned_alloc_locks_or_reports() {
        let (m, warn) = RawMem::alloc(PAGE * 4, true).unwrap();
        assert_eq!(m.is_locked(), warn.is_none());
    }
}
