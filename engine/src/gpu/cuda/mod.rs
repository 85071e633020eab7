//! The CUDA backend: the driver API through `cudarc`'s run-time loading of `libcuda.so`.
//!
//! One [`CudaRuntime`] retains every device's primary context (the one the CUDA runtime and
//! frameworks such as PyTorch share) and makes the right one current on the calling thread
//! before each call, so the object can be used from any thread.
//!
//! `#[allow(unsafe_code)]`: implements the trait's `unsafe fn`s by forwarding to [`ffi`].
#![allow(unsafe_code)]

pub mod ffi;

use std::os::fd::{FromRawFd, OwnedFd};

use cudarc::driver::sys;
use numa::{GpuVendor, PciAddr};

use super::dmabuf::{self, DmabufRegion};
use super::ipc::{self, IpcExport};
use super::{
    Backend, Capabilities, DevicePtr, GpuError, GpuRuntime, PointerKind, RawEvent, RawStream,
};

/// `CUmemorytype` values (`cuda.h`), kept as integers: the driver may return values newer
/// than any Rust enum.
const CU_MEMORYTYPE_HOST: u32 = 1;
const CU_MEMORYTYPE_DEVICE: u32 = 2;
const CU_MEMORYTYPE_ARRAY: u32 = 3;
const CU_MEMORYTYPE_UNIFIED: u32 = 4;

/// Classifies a pointer from its `CU_POINTER_ATTRIBUTE_{MEMORY_TYPE,IS_MANAGED,DEVICE_ORDINAL}`.
#[must_use]
pub fn classify(
    memory_type: Option<u32>,
    is_managed: Option<u32>,
    ordinal: Option<u32>,
) -> PointerKind {
    if is_managed.unwrap_or(0) != 0 {
        return PointerKind::Managed;
    }
    match memory_type {
        Some(CU_MEMORYTYPE_HOST) => PointerKind::Host,
        Some(CU_MEMORYTYPE_DEVICE | CU_MEMORYTYPE_ARRAY) => PointerKind::Device {
            ordinal: ordinal.unwrap_or(0),
        },
        Some(CU_MEMORYTYPE_UNIFIED) => PointerKind::Managed,
        _ => PointerKind::Unknown,
    }
}

/// Handles are raw driver pointers; the trait passes them as integers.
fn stream_of(s: RawStream) -> sys::CUstream {
    s.handle as sys::CUstream
}
fn event_of(e: RawEvent) -> sys::CUevent {
    e.handle as sys::CUevent
}

/// The loaded CUDA driver.
#[derive(Debug)]
pub struct CudaRuntime {
    lib: ffi::CudaLib,
    version: i32,
    /// INVARIANT: `devices[i]` is device ordinal `i`, `ctxs[i]` its retained primary context,
    /// released in `Drop`. Stored as integers so the struct is `Send + Sync`; the driver's
    /// contexts are usable from any thread.
    devices: Vec<sys::CUdevice>,
    ctxs: Vec<usize>,
}

impl CudaRuntime {
    /// Loads the driver, initialises it and retains every device's primary context.
    ///
    /// Errors: [`GpuError::LibraryNotFound`] without a driver, `cuInit`'s error
    /// (`CUDA_ERROR_NO_DEVICE`) without a GPU.
    pub fn load() -> Result<CudaRuntime, GpuError> {
        let lib = ffi::CudaLib::open()?;
        ffi::init()?;
        let version = ffi::driver_version()?;
        let n = ffi::device_count()?;
        let mut rt = CudaRuntime {
            lib,
            version,
            devices: Vec::new(),
            ctxs: Vec::new(),
        };
        for i in 0..n {
            let dev = ffi::device_get(i)?;
            let ctx = ffi::primary_ctx_retain(dev)?;
            rt.devices.push(dev);
            rt.ctxs.push(ctx as usize);
        }
        Ok(rt)
    }

    fn bind(&self, ordinal: u32) -> Result<(), GpuError> {
        let ctx = self
            .ctxs
            .get(ordinal as usize)
            .ok_or_else(|| GpuError::InvalidArgument(format!("no CUDA device {ordinal}")))?;
        // SAFETY: the INVARIANT on `ctxs`: retained until `Drop`.
        unsafe { ffi::ensure_current(*ctx as sys::CUcontext) }
    }

    fn require_ipc(&self, what: &'static str) -> Result<(), GpuError> {
        if self.lib.has_ipc {
            return Ok(());
        }
        Err(GpuError::Unsupported {
            backend: Backend::Cuda,
            what,
            why: format!("driver lacks one of {:?}", ffi::SYMS_IPC),
        })
    }

    fn device(&self, ordinal: u32) -> Result<sys::CUdevice, GpuError> {
        self.devices
            .get(ordinal as usize)
            .copied()
            .ok_or_else(|| GpuError::InvalidArgument(format!("no CUDA device {ordinal}")))
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        for dev in &self.devices {
            let _ = ffi::primary_ctx_release(*dev);
        }
    }
}

impl GpuRuntime for CudaRuntime {
    fn backend(&self) -> Backend {
        Backend::Cuda
    }

    fn name(&self) -> String {
        format!(
            "cuda driver {}.{}",
            self.version / 1000,
            (self.version % 1000) / 10
        )
    }

    fn vendor(&self) -> GpuVendor {
        GpuVendor::Nvidia
    }

    fn version(&self) -> i32 {
        self.version
    }

    fn device_count(&self) -> u32 {
        self.devices.len() as u32
    }

    fn capabilities(&self) -> Capabilities {
        let mut missing = Vec::new();
        if !self.lib.has_dmabuf {
            missing.push(ffi::SYM_DMABUF);
        }
        if !self.lib.has_elapsed {
            missing.push(ffi::SYM_ELAPSED);
        }
        if !self.lib.has_ipc {
            missing.extend_from_slice(ffi::SYMS_IPC);
        }
        Capabilities {
            dmabuf_export: self.lib.has_dmabuf,
            ipc_memory: self.lib.has_ipc,
            missing_optional: missing,
        }
    }

    fn device_name(&self, ordinal: u32) -> Result<String, GpuError> {
        ffi::device_name(self.device(ordinal)?)
    }

    fn pci_bus_id(&self, ordinal: u32) -> Result<PciAddr, GpuError> {
        let s = ffi::device_pci_bus_id(self.device(ordinal)?)?;
        s.to_ascii_lowercase()
            .parse()
            .map_err(|e: String| GpuError::InvalidArgument(format!("cuDeviceGetPCIBusId: {e}")))
    }

    fn pointer_kind(&self, addr: u64) -> Result<PointerKind, GpuError> {
        if self.devices.is_empty() {
            return Ok(PointerKind::Unknown);
        }
        self.bind(0)?;
        use sys::CUpointer_attribute as A;
        let mt = ffi::pointer_attr_u32(A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr)?;
        if mt.is_none() {
            return Ok(PointerKind::Unknown);
        }
        let managed = ffi::pointer_attr_u32(A::CU_POINTER_ATTRIBUTE_IS_MANAGED, addr)?;
        let ordinal = ffi::pointer_attr_u32(A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr)?;
        Ok(classify(mt, managed, ordinal))
    }

    fn alloc_device(&self, ordinal: u32, len: usize) -> Result<DevicePtr, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument(
                "device allocation of 0 bytes".into(),
            ));
        }
        self.bind(ordinal)?;
        Ok(DevicePtr {
            addr: ffi::mem_alloc(len)?,
            ordinal,
        })
    }

    unsafe fn free_device(&self, ptr: DevicePtr) -> Result<(), GpuError> {
        self.bind(ptr.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::mem_free(ptr.addr) }
    }

    fn alloc_pinned(&self, len: usize) -> Result<*mut u8, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument(
                "pinned allocation of 0 bytes".into(),
            ));
        }
        self.bind(0)?;
        ffi::mem_host_alloc(len)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), GpuError> {
        self.bind(0)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::mem_free_host(ptr) }
    }

    fn create_stream(&self, ordinal: u32) -> Result<RawStream, GpuError> {
        self.bind(ordinal)?;
        Ok(RawStream {
            handle: ffi::stream_create()? as usize,
            ordinal,
        })
    }

    unsafe fn destroy_stream(&self, stream: RawStream) -> Result<(), GpuError> {
        self.bind(stream.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::stream_destroy(stream_of(stream)) }
    }

    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<(), GpuError> {
        self.bind(stream.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::stream_synchronize(stream_of(stream)) }
    }

    fn create_event(&self, ordinal: u32, timing: bool) -> Result<RawEvent, GpuError> {
        self.bind(ordinal)?;
        Ok(RawEvent {
            handle: ffi::event_create(timing)? as usize,
            ordinal,
        })
    }

    unsafe fn destroy_event(&self, event: RawEvent) -> Result<(), GpuError> {
        self.bind(event.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::event_destroy(event_of(event)) }
    }

    unsafe fn record_event(&self, event: RawEvent, stream: RawStream) -> Result<(), GpuError> {
        self.bind(stream.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::event_record(event_of(event), stream_of(stream)) }
    }

    unsafe fn event_query(&self, event: RawEvent) -> Result<bool, GpuError> {
        self.bind(event.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::event_query(event_of(event)) }
    }

    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<(), GpuError> {
        self.bind(event.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::event_synchronize(event_of(event)) }
    }

    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32, GpuError> {
        if !self.lib.has_elapsed {
            return Err(GpuError::Unsupported {
                backend: Backend::Cuda,
                what: "event timing",
                why: format!("driver lacks {}", ffi::SYM_ELAPSED),
            });
        }
        self.bind(end.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::event_elapsed(event_of(start), event_of(end)) }
    }

    unsafe fn memcpy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.bind(stream.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::memcpy_htod_async(dst.addr, src, len, stream_of(stream)) }
    }

    unsafe fn memcpy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        self.bind(stream.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::memcpy_dtoh_async(dst, src.addr, len, stream_of(stream)) }
    }

    unsafe fn memcpy_h2d(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        self.bind(dst.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::memcpy_htod(dst.addr, src, len) }
    }

    unsafe fn memcpy_d2h(&self, dst: *mut u8, src: DevicePtr, len: usize) -> Result<(), GpuError> {
        self.bind(src.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::memcpy_dtoh(dst, src.addr, len) }
    }

    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufRegion, GpuError> {
        if !self.lib.has_dmabuf {
            return Err(GpuError::Unsupported {
                backend: Backend::Cuda,
                what: "dmabuf export",
                why: format!("driver lacks {}", ffi::SYM_DMABUF),
            });
        }
        self.bind(ptr.ordinal)?;
        let (base, alloc_len) = ffi::mem_get_address_range(ptr.addr)?;
        // The driver documents host-page alignment; should it refuse a window, retry with the
        // GPU's 64 KiB and 2 MiB pages before giving up (the window stays inside the allocation).
        let mut last = None;
        let mut found = None;
        for page in [dmabuf::host_page_size(), 64 << 10, 2 << 20] {
            let w = dmabuf::window(ptr.addr, len as u64, page, base, alloc_len as u64)?;
            match ffi::mem_get_dmabuf_fd(w.start, w.size as usize) {
                Ok(fd) => {
                    found = Some((w, fd));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some((w, fd)) = found else {
            return Err(last.unwrap_or_else(|| GpuError::InvalidArgument("dmabuf export".into())));
        };
        if fd < 0 {
            return Err(GpuError::InvalidArgument(format!(
                "cuMemGetHandleForAddressRange returned fd {fd}"
            )));
        }
        // SAFETY: the driver just created this fd for us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(DmabufRegion {
            fd,
            offset: w.offset,
            len: len as u64,
            exported_size: w.size,
        })
    }

    fn ipc_export(&self, ptr: DevicePtr, len: usize) -> Result<IpcExport, GpuError> {
        self.require_ipc("IPC memory export")?;
        self.bind(ptr.ordinal)?;
        // Device memory of this ordinal only: host and managed memory have no IPC handle.
        match self.pointer_kind(ptr.addr)? {
            PointerKind::Device { ordinal } if ordinal == ptr.ordinal => {}
            other => {
                return Err(GpuError::InvalidArgument(format!(
                    "IPC export: {:#x} is not memory of CUDA device {} ({other:?})",
                    ptr.addr, ptr.ordinal
                )));
            }
        }
        self.bind(ptr.ordinal)?;
        let (base, alloc_len) = ffi::mem_get_address_range(ptr.addr)?;
        let offset = ipc::offset_in(ptr.addr, len as u64, base, alloc_len as u64)?;
        // The handle of the base: the driver documents the export of an allocation's base.
        let handle = ffi::ipc_get_mem_handle(base)?;
        Ok(IpcExport {
            handle,
            offset,
            alloc_len: alloc_len as u64,
            ordinal: ptr.ordinal,
        })
    }

    unsafe fn ipc_open(&self, export: &IpcExport) -> Result<DevicePtr, GpuError> {
        self.require_ipc("IPC memory open")?;
        export.check(1)?;
        self.bind(export.ordinal)?;
        // SAFETY: the caller's contract.
        let base = unsafe { ffi::ipc_open_mem_handle(&export.handle)? };
        let ptr = DevicePtr {
            addr: base,
            ordinal: export.ordinal,
        };
        let mapped = ffi::mem_get_address_range(base)
            .and_then(|(b, n)| ipc::check_mapping(export, base, b, n as u64));
        if let Err(e) = mapped {
            // SAFETY: opened just above, closed once here; nothing has used it.
            let _ = unsafe { ffi::ipc_close_mem_handle(base) };
            return Err(e);
        }
        Ok(ptr)
    }

    unsafe fn ipc_close(&self, base: DevicePtr) -> Result<(), GpuError> {
        self.require_ipc("IPC memory close")?;
        self.bind(base.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { ffi::ipc_close_mem_handle(base.addr) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_classification_follows_cuda_h() {
        assert_eq!(classify(Some(1), Some(0), Some(0)), PointerKind::Host);
        assert_eq!(
            classify(Some(2), Some(0), Some(3)),
            PointerKind::Device { ordinal: 3 }
        );
        assert_eq!(classify(Some(2), Some(1), Some(0)), PointerKind::Managed);
        assert_eq!(classify(Some(4), None, None), PointerKind::Managed);
        assert_eq!(classify(None, None, None), PointerKind::Unknown);
        assert_eq!(classify(Some(77), Some(0), None), PointerKind::Unknown);
    }
}
