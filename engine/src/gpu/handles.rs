//! RAII owners of runtime resources: device buffers, pinned host buffers, streams, events.
//!
//! Each holds an `Arc` of its runtime, so the runtime (and its loaded library) outlives every
//! resource made from it, and frees its resource exactly once on drop. Synchronous copies are
//! safe methods; asynchronous ones stay `unsafe` (the borrow checker cannot see when a DMA
//! engine stops reading a buffer) and are used by [`super::staging`], which proves their
//! contract by synchronising before it hands buffers back.
//!
//! `#[allow(unsafe_code)]`: the `unsafe` blocks here call the runtime's `unsafe fn`s on
//! handles this module owns, and build slices over pinned allocations this module owns.
#![allow(unsafe_code)]

use std::sync::Arc;

use super::{DevicePtr, DmabufRegion, GpuError, GpuRuntime, RawEvent, RawStream};

fn range_check(what: &str, off: usize, len: usize, cap: usize) -> Result<(), GpuError> {
    match off.checked_add(len) {
        Some(end) if end <= cap => Ok(()),
        _ => Err(GpuError::InvalidArgument(format!(
            "{what}: {len} bytes at offset {off} exceed the {cap}-byte buffer"
        ))),
    }
}

/// Device memory owned by this value.
#[derive(Debug)]
pub struct DeviceBuffer {
    rt: Arc<dyn GpuRuntime>,
    /// INVARIANT: allocated by `rt.alloc_device(ptr.ordinal, len)`, freed only in `Drop`.
    ptr: DevicePtr,
    len: usize,
}

impl DeviceBuffer {
    /// Allocates `len` bytes on device `ordinal`.
    pub fn new(rt: &Arc<dyn GpuRuntime>, ordinal: u32, len: usize) -> Result<Self, GpuError> {
        let ptr = rt.alloc_device(ordinal, len)?;
        Ok(DeviceBuffer {
            rt: Arc::clone(rt),
            ptr,
            len,
        })
    }

    /// The device address of byte 0.
    #[must_use]
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The device address of byte `off`, checked against the length.
    pub fn ptr_at(&self, off: usize, len: usize) -> Result<DevicePtr, GpuError> {
        range_check("device buffer", off, len, self.len)?;
        self.ptr
            .offset(off as u64)
            .ok_or_else(|| GpuError::InvalidArgument("device address overflows".into()))
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runtime that owns the memory.
    #[must_use]
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.rt
    }

    /// Copies `src` to bytes `off..off + src.len()` and waits for the copy.
    pub fn write(&self, off: usize, src: &[u8]) -> Result<(), GpuError> {
        let dst = self.ptr_at(off, src.len())?;
        // SAFETY: `src` is borrowed for the whole (synchronous) call; `dst..+len` was checked
        // to lie inside this live allocation.
        unsafe { self.rt.memcpy_h2d(dst, src.as_ptr(), src.len()) }
    }

    /// Copies bytes `off..off + dst.len()` into `dst` and waits for the copy.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), GpuError> {
        let src = self.ptr_at(off, dst.len())?;
        // SAFETY: `dst` is mutably borrowed for the whole (synchronous) call; `src..+len` was
        // checked to lie inside this live allocation.
        unsafe { self.rt.memcpy_d2h(dst.as_mut_ptr(), src, dst.len()) }
    }

    /// Exports bytes `off..off + len` as a dmabuf (see [`GpuRuntime::export_dmabuf`]).
    pub fn export_dmabuf(&self, off: usize, len: usize) -> Result<DmabufRegion, GpuError> {
        let p = self.ptr_at(off, len)?;
        self.rt.export_dmabuf(p, len)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: the INVARIANT on `ptr`: allocated by this runtime and freed only here. Any
        // async copy that used it was synchronised by its user (unsafe contract of the copy).
        let _ = unsafe { self.rt.free_device(self.ptr) };
    }
}

/// Page-locked host memory owned by this value, readable and writable as a byte slice.
#[derive(Debug)]
pub struct PinnedBuffer {
    rt: Arc<dyn GpuRuntime>,
    /// INVARIANT: `len` bytes from `rt.alloc_pinned(len)`, non-null, freed only in `Drop`.
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned uniquely by this value; the runtime handle is
// Send + Sync. Access goes through &self / &mut self like a Vec<u8>.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocates `len` (> 0) pinned bytes, zero-filled.
    pub fn new(rt: &Arc<dyn GpuRuntime>, len: usize) -> Result<Self, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument("pinned buffer of 0 bytes".into()));
        }
        let ptr = rt.alloc_pinned(len)?;
        if ptr.is_null() {
            return Err(GpuError::InvalidArgument(
                "runtime returned a null pinned buffer".into(),
            ));
        }
        // SAFETY: `ptr` is a fresh, exclusively owned allocation of `len` writable bytes.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(PinnedBuffer {
            rt: Arc::clone(rt),
            ptr,
            len,
        })
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty (never: construction refuses 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address (for registration with a NIC and for async copies).
    #[must_use]
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// Mutable start address.
    #[must_use]
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// The bytes.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the INVARIANT on `ptr`; `&self` excludes writers through this value.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, mutably.
    #[must_use]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the INVARIANT on `ptr`; `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: the INVARIANT on `ptr`; users of async copies synchronised before dropping.
        let _ = unsafe { self.rt.free_pinned(self.ptr) };
    }
}

/// A stream owned by this value.
#[derive(Debug)]
pub struct GpuStream {
    rt: Arc<dyn GpuRuntime>,
    /// INVARIANT: created by `rt.create_stream`, destroyed only in `Drop`.
    raw: RawStream,
}

impl GpuStream {
    /// Creates a non-blocking stream on device `ordinal`.
    pub fn new(rt: &Arc<dyn GpuRuntime>, ordinal: u32) -> Result<Self, GpuError> {
        let raw = rt.create_stream(ordinal)?;
        Ok(GpuStream {
            rt: Arc::clone(rt),
            raw,
        })
    }

    /// The raw handle, valid while `self` lives.
    #[must_use]
    pub fn raw(&self) -> RawStream {
        self.raw
    }

    /// Waits for all queued work.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: the INVARIANT on `raw`.
        unsafe { self.rt.stream_synchronize(self.raw) }
    }

    /// Records `event` on this stream.
    pub fn record(&self, event: &GpuEvent) -> Result<(), GpuError> {
        // SAFETY: both handles are live (their owners' invariants); a cross-device pair is
        // rejected by the runtime with an error.
        unsafe { self.rt.record_event(event.raw, self.raw) }
    }

    /// Queues `len` bytes host → device on this stream.
    ///
    /// # Safety
    /// [`GpuRuntime::memcpy_h2d_async`]'s contract for `src`: readable, unmodified and alive
    /// until the copy is known complete. `dst` must lie in a live device allocation.
    pub unsafe fn copy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        // SAFETY: forwarded to the caller; the stream is live (INVARIANT on `raw`).
        unsafe { self.rt.memcpy_h2d_async(dst, src, len, self.raw) }
    }

    /// Queues `len` bytes device → host on this stream.
    ///
    /// # Safety
    /// [`GpuRuntime::memcpy_d2h_async`]'s contract for `dst`.
    pub unsafe fn copy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
    ) -> Result<(), GpuError> {
        // SAFETY: forwarded to the caller; the stream is live (INVARIANT on `raw`).
        unsafe { self.rt.memcpy_d2h_async(dst, src, len, self.raw) }
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        // SAFETY: the INVARIANT on `raw`.
        let _ = unsafe { self.rt.destroy_stream(self.raw) };
    }
}

/// An event owned by this value.
#[derive(Debug)]
pub struct GpuEvent {
    rt: Arc<dyn GpuRuntime>,
    /// INVARIANT: created by `rt.create_event`, destroyed only in `Drop`.
    raw: RawEvent,
}

impl GpuEvent {
    /// Creates an event on device `ordinal`; `timing` enables [`GpuEvent::elapsed_ms_since`].
    pub fn new(rt: &Arc<dyn GpuRuntime>, ordinal: u32, timing: bool) -> Result<Self, GpuError> {
        let raw = rt.create_event(ordinal, timing)?;
        Ok(GpuEvent {
            rt: Arc::clone(rt),
            raw,
        })
    }

    /// Whether the recorded work has completed.
    pub fn is_complete(&self) -> Result<bool, GpuError> {
        // SAFETY: the INVARIANT on `raw`.
        unsafe { self.rt.event_query(self.raw) }
    }

    /// Blocks until the recorded work has completed.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        // SAFETY: the INVARIANT on `raw`.
        unsafe { self.rt.event_synchronize(self.raw) }
    }

    /// Milliseconds from `start` to `self` (both timing events, recorded and complete).
    pub fn elapsed_ms_since(&self, start: &GpuEvent) -> Result<f32, GpuError> {
        // SAFETY: both handles are live (owners' invariants); the runtime reports an error for
        // events that are not complete or not timing events.
        unsafe { self.rt.event_elapsed_ms(start.raw, self.raw) }
    }
}

impl Drop for GpuEvent {
    fn drop(&mut self) {
        // SAFETY: the INVARIANT on `raw`.
        let _ = unsafe { self.rt.destroy_event(self.raw) };
    }
}
