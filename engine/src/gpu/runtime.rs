//! The backend-neutral GPU runtime interface.
//!
//! This is the raw layer the engine talks to: one object per loaded runtime (CUDA or HIP),
//! shared as `Arc<dyn GpuRuntime>`. Methods that only take handles the runtime validates are
//! safe; methods whose correctness depends on the caller (a host pointer read later by a DMA
//! engine, a handle freed twice) are `unsafe fn` with the contract written on them. The RAII
//! types in [`super::handles`] wrap the latter so ordinary code never calls them directly.
//!
//! `#[allow(unsafe_code)]`: this module declares `unsafe fn`s; its one `unsafe` block, in the
//! tests, calls the IPC defaults (which touch nothing).
#![allow(unsafe_code)]

use std::fmt;

use numa::{GpuVendor, PciAddr};

use super::{
    Backend, Capabilities, DevicePtr, DmabufRegion, GpuError, IpcExport, PointerKind, RawEvent,
    RawStream,
};

/// The error of the IPC methods' default implementations.
fn ipc_unsupported(backend: Backend, what: &'static str) -> GpuError {
    GpuError::Unsupported {
        backend,
        what,
        why: "this runtime implements no IPC memory handles".into(),
    }
}

/// A GPU runtime loaded at run time (see [`super::detect()`]).
///
/// Implementations keep whatever per-thread state the runtime needs (CUDA's current context)
/// themselves: every method may be called from any thread.
pub trait GpuRuntime: Send + Sync + fmt::Debug {
    /// Which runtime this is.
    fn backend(&self) -> Backend;
    /// Human-readable runtime name and version, e.g. `"cuda driver 13.0"`.
    fn name(&self) -> String;
    /// GPU vendor.
    fn vendor(&self) -> GpuVendor;
    /// The runtime's own version number (`cuDriverGetVersion`, `hipRuntimeGetVersion`).
    fn version(&self) -> i32;
    /// Number of devices the runtime sees (0 is a valid answer only if the runtime says so
    /// without error; runtimes that fail with "no device" make [`super::detect()`] skip them).
    fn device_count(&self) -> u32;
    /// Optional features present in the loaded runtime.
    fn capabilities(&self) -> Capabilities;
    /// Marketing name of a device (`"NVIDIA H200"`).
    fn device_name(&self, ordinal: u32) -> Result<String, GpuError>;
    /// PCI address of a device, for choosing the closest NIC (`numa` placement).
    fn pci_bus_id(&self, ordinal: u32) -> Result<PciAddr, GpuError>;
    /// What `addr` points to. Pageable host memory and unknown addresses are
    /// [`PointerKind::Unknown`]; this never dereferences `addr`.
    fn pointer_kind(&self, addr: u64) -> Result<PointerKind, GpuError>;

    /// Allocates `len` bytes of device memory on `ordinal`.
    fn alloc_device(&self, ordinal: u32, len: usize) -> Result<DevicePtr, GpuError>;
    /// Frees device memory.
    ///
    /// # Safety
    /// `ptr` came from [`GpuRuntime::alloc_device`] of this runtime, is freed once, and no
    /// copy or registration still uses it.
    unsafe fn free_device(&self, ptr: DevicePtr) -> Result<(), GpuError>;
    /// Allocates `len` bytes of page-locked host memory, mapped for DMA by every device.
    fn alloc_pinned(&self, len: usize) -> Result<*mut u8, GpuError>;
    /// Frees pinned host memory.
    ///
    /// # Safety
    /// `ptr` came from [`GpuRuntime::alloc_pinned`] of this runtime, is freed once, and no
    /// reference to or copy from/into it is outstanding.
    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), GpuError>;

    /// Creates a non-blocking stream on `ordinal` (it does not synchronise with stream 0).
    fn create_stream(&self, ordinal: u32) -> Result<RawStream, GpuError>;
    /// Destroys a stream (pending work still completes).
    ///
    /// # Safety
    /// `stream` came from this runtime and is destroyed once; no other use follows.
    unsafe fn destroy_stream(&self, stream: RawStream) -> Result<(), GpuError>;
    /// Blocks until all work queued on `stream` has finished.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime.
    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<(), GpuError>;
    /// Creates an event; `timing` enables [`GpuRuntime::event_elapsed_ms`].
    fn create_event(&self, ordinal: u32, timing: bool) -> Result<RawEvent, GpuError>;
    /// Destroys an event.
    ///
    /// # Safety
    /// `event` came from this runtime and is destroyed once; no other use follows.
    unsafe fn destroy_event(&self, event: RawEvent) -> Result<(), GpuError>;
    /// Records `event` on `stream`: it completes when the work queued before it has.
    ///
    /// # Safety
    /// Both handles are live handles of this runtime on the same device.
    unsafe fn record_event(&self, event: RawEvent, stream: RawStream) -> Result<(), GpuError>;
    /// Whether the work before the last record of `event` has completed.
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    unsafe fn event_query(&self, event: RawEvent) -> Result<bool, GpuError>;
    /// Blocks until `event` has completed.
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<(), GpuError>;
    /// Milliseconds between two completed timing events.
    ///
    /// # Safety
    /// Both are live timing events of this runtime, recorded and completed.
    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32, GpuError>;

    /// Queues a host → device copy of `len` bytes on `stream`.
    ///
    /// # Safety
    /// `src..src+len` is readable host memory that stays valid and unmodified until the copy
    /// has completed (observed through the stream or an event recorded after it); for truly
    /// asynchronous behaviour it must be pinned. `dst..dst+len` lies inside one device
    /// allocation of this runtime that outlives the copy. `stream` is live.
    unsafe fn memcpy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError>;
    /// Queues a device → host copy of `len` bytes on `stream`.
    ///
    /// # Safety
    /// As [`GpuRuntime::memcpy_h2d_async`] with the roles swapped: `dst..dst+len` is writable
    /// host memory that nothing else reads or writes until the copy has completed.
    unsafe fn memcpy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError>;
    /// Synchronous host → device copy.
    ///
    /// # Safety
    /// `src..src+len` is readable for the duration of the call; `dst..dst+len` lies inside one
    /// live device allocation of this runtime.
    unsafe fn memcpy_h2d(&self, dst: DevicePtr, src: *const u8, len: usize)
    -> Result<(), GpuError>;
    /// Synchronous device → host copy.
    ///
    /// # Safety
    /// `dst..dst+len` is writable and unaliased for the duration of the call; `src..src+len`
    /// lies inside one live device allocation of this runtime.
    unsafe fn memcpy_d2h(&self, dst: *mut u8, src: DevicePtr, len: usize) -> Result<(), GpuError>;

    /// Exports device memory `[ptr, ptr + len)` as a dmabuf for `ibv_reg_dmabuf_mr`.
    ///
    /// The page-aligned range enclosing the bytes is exported; [`DmabufRegion::offset`] says
    /// where `ptr` lies in it. [`GpuError::Unsupported`] when the runtime lacks the export.
    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufRegion, GpuError>;

    /// Exports the device allocation holding `[ptr, ptr + len)` for another process
    /// (`cuIpcGetMemHandle`, `hipIpcGetMemHandle` on the allocation's base).
    ///
    /// The handle names the whole allocation; [`IpcExport::offset`] says where `ptr` lies in
    /// it and [`IpcExport::alloc_len`] how long it is (`cuMemGetAddressRange`,
    /// `hipMemGetAddressRange`). Nothing is mapped or pinned by exporting; the exporter must
    /// keep the allocation alive (not free it) while any importer has it open.
    ///
    /// Errors: [`GpuError::InvalidArgument`] when `len` is 0 or `ptr..ptr+len` is not inside
    /// one allocation of this runtime's device memory; the runtime's error for memory it
    /// cannot export (CUDA refuses `cuMemCreate` / stream-ordered pool memory);
    /// [`GpuError::Unsupported`] from runtimes without IPC (the default implementation).
    fn ipc_export(&self, ptr: DevicePtr, len: usize) -> Result<IpcExport, GpuError> {
        let _ = (ptr, len);
        Err(ipc_unsupported(self.backend(), "IPC memory export"))
    }

    /// Opens an allocation exported by another process, mapping it into this one on device
    /// `export.ordinal` (lazily enabling peer access when the memory is on another device),
    /// and returns the **base** of the mapping: the exported bytes start at
    /// [`IpcExport::locate`]`(base, len)` (base + offset).
    ///
    /// `export` may come from an untrusted process: its offset is checked against its
    /// `alloc_len`, and `alloc_len` against the size of the allocation actually mapped (a
    /// mismatch closes the mapping again and is an [`GpuError::InvalidArgument`]). A forged
    /// or stale handle is refused by the runtime. CUDA refuses to open a handle in the
    /// process that exported it.
    ///
    /// # Safety
    /// - The exporting process keeps the allocation alive (does not free it, and does not
    ///   exit) until [`GpuRuntime::ipc_close`] of the returned base has returned here: the
    ///   runtimes leave the importer's accesses after the exporter's free undefined.
    /// - Every successful open is closed exactly once with [`GpuRuntime::ipc_close`] of this
    ///   runtime, after the last copy or registration using the mapping has finished.
    /// - Bytes read or written through the mapping are shared with the exporter: the caller
    ///   coordinates with it (no concurrent writes to the same bytes).
    unsafe fn ipc_open(&self, export: &IpcExport) -> Result<DevicePtr, GpuError> {
        let _ = export;
        Err(ipc_unsupported(self.backend(), "IPC memory open"))
    }

    /// Unmaps an allocation opened with [`GpuRuntime::ipc_open`] (`cuIpcCloseMemHandle`,
    /// `hipIpcCloseMemHandle`); the exporter's allocation is not freed.
    ///
    /// # Safety
    /// `base` is the pointer a successful [`GpuRuntime::ipc_open`] of this runtime returned,
    /// closed once; no queued copy, registration or other use of the mapping remains.
    unsafe fn ipc_close(&self, base: DevicePtr) -> Result<(), GpuError> {
        let _ = base;
        Err(ipc_unsupported(self.backend(), "IPC memory close"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime that implements only the required methods (all failing), to see the
    /// defaults of the optional ones.
    #[derive(Debug)]
    struct Bare;

    fn no() -> GpuError {
        GpuError::InvalidArgument("bare runtime".into())
    }

    impl GpuRuntime for Bare {
        fn backend(&self) -> Backend {
            Backend::Hip
        }
        fn name(&self) -> String {
            "bare".into()
        }
        fn vendor(&self) -> GpuVendor {
            GpuVendor::Amd
        }
        fn version(&self) -> i32 {
            0
        }
        fn device_count(&self) -> u32 {
            0
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::default()
        }
        fn device_name(&self, _: u32) -> Result<String, GpuError> {
            Err(no())
        }
        fn pci_bus_id(&self, _: u32) -> Result<PciAddr, GpuError> {
            Err(no())
        }
        fn pointer_kind(&self, _: u64) -> Result<PointerKind, GpuError> {
            Err(no())
        }
        fn alloc_device(&self, _: u32, _: usize) -> Result<DevicePtr, GpuError> {
            Err(no())
        }
        unsafe fn free_device(&self, _: DevicePtr) -> Result<(), GpuError> {
            Err(no())
        }
        fn alloc_pinned(&self, _: usize) -> Result<*mut u8, GpuError> {
            Err(no())
        }
        unsafe fn free_pinned(&self, _: *mut u8) -> Result<(), GpuError> {
            Err(no())
        }
        fn create_stream(&self, _: u32) -> Result<RawStream, GpuError> {
            Err(no())
        }
        unsafe fn destroy_stream(&self, _: RawStream) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn stream_synchronize(&self, _: RawStream) -> Result<(), GpuError> {
            Err(no())
        }
        fn create_event(&self, _: u32, _: bool) -> Result<RawEvent, GpuError> {
            Err(no())
        }
        unsafe fn destroy_event(&self, _: RawEvent) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn record_event(&self, _: RawEvent, _: RawStream) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn event_query(&self, _: RawEvent) -> Result<bool, GpuError> {
            Err(no())
        }
        unsafe fn event_synchronize(&self, _: RawEvent) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn event_elapsed_ms(&self, _: RawEvent, _: RawEvent) -> Result<f32, GpuError> {
            Err(no())
        }
        unsafe fn memcpy_h2d_async(
            &self,
            _: DevicePtr,
            _: *const u8,
            _: usize,
            _: RawStream,
        ) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn memcpy_d2h_async(
            &self,
            _: *mut u8,
            _: DevicePtr,
            _: usize,
            _: RawStream,
        ) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn memcpy_h2d(&self, _: DevicePtr, _: *const u8, _: usize) -> Result<(), GpuError> {
            Err(no())
        }
        unsafe fn memcpy_d2h(&self, _: *mut u8, _: DevicePtr, _: usize) -> Result<(), GpuError> {
            Err(no())
        }
        fn export_dmabuf(&self, _: DevicePtr, _: usize) -> Result<DmabufRegion, GpuError> {
            Err(no())
        }
    }

    #[test]
    fn ipc_defaults_are_typed_unsupported_for_the_runtimes_backend() {
        let rt: &dyn GpuRuntime = &Bare;
        let ptr = DevicePtr {
            addr: 0x1000,
            ordinal: 0,
        };
        let export = IpcExport {
            handle: [0; 64],
            offset: 0,
            alloc_len: 4096,
            ordinal: 0,
        };
        // SAFETY: the defaults touch nothing.
        let (open, close) = unsafe { (rt.ipc_open(&export), rt.ipc_close(ptr)) };
        let errs = [rt.ipc_export(ptr, 8).err(), open.err(), close.err()];
        for e in errs {
            match e {
                Some(GpuError::Unsupported {
                    backend: Backend::Hip,
                    what,
                    ..
                }) => assert!(what.starts_with("IPC memory"), "{what}"),
                other => panic!("expected Unsupported, got {other:?}"),
            }
        }
    }
}
