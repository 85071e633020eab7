//! The HIP backend: `libamdhip64.so` (and `libhsa-runtime64.so` for the dmabuf export) opened
//! with `dlopen` at run time through a hand-written function table ([`sys`]).
//!
//! **Not run on an AMD GPU.** No AMD GPU was available while this was written; what has run is
//! loading Debian's ROCm 5.2 runtime, resolving every symbol, reading the version and taking
//! the "no AMD device" path (`tests/gpu_hip_runtime.rs`). The device paths follow the HIP
//! headers and mirror the CUDA backend, which has run on an H200.
//!
//! `#[allow(unsafe_code)]`: implements the trait's `unsafe fn`s by forwarding to [`result`].
#![allow(unsafe_code)]

pub mod decode;
pub mod result;
pub mod sys;

use std::os::fd::{FromRawFd, OwnedFd};

use numa::{GpuVendor, PciAddr};

use self::decode::HipVersion;
use self::result::{Hip, Hsa};
use super::dmabuf::{self, DmabufRegion};
use super::ipc::{self, IpcExport};
use super::{
    Backend, Capabilities, DevicePtr, GpuError, GpuRuntime, PointerKind, RawEvent, RawStream,
};

/// What loading HIP showed, whether or not a device exists: for diagnostics and CI.
#[derive(Debug)]
pub struct HipProbe {
    /// `hipRuntimeGetVersion`, raw.
    pub version: Result<i32, GpuError>,
    /// `hipInit(0)`.
    pub init: Result<(), GpuError>,
    /// `hipGetDeviceCount` (`hipErrorNoDevice` on machines without an AMD GPU).
    pub device_count: Result<i32, GpuError>,
    /// Optional symbols absent from the loaded runtime.
    pub missing_optional: Vec<&'static str>,
    /// `libhsa-runtime64` status: `Ok(true)` with the dmabuf export, `Ok(false)` without.
    pub hsa_dmabuf: Result<bool, GpuError>,
}

/// Loads HIP and reports what it sees, without requiring a device.
pub fn probe() -> Result<HipProbe, GpuError> {
    let hip = Hip {
        api: sys::HipApi::load()?,
    };
    let mut missing = Vec::new();
    if hip.api.hipMemGetHandleForAddressRange.is_none() {
        missing.push("hipMemGetHandleForAddressRange");
    }
    let hsa = sys::HsaApi::load();
    if matches!(hsa, Ok(None)) {
        missing.push("hsa_amd_portable_export_dmabuf");
    }
    let version = hip.runtime_version();
    let init = hip.init();
    let device_count = hip.device_count();
    Ok(HipProbe {
        version,
        init,
        device_count,
        missing_optional: missing,
        hsa_dmabuf: hsa.map(|h| h.is_some()),
    })
}

fn stream_of(s: RawStream) -> sys::hipStream_t {
    s.handle as sys::hipStream_t
}
fn event_of(e: RawEvent) -> sys::hipEvent_t {
    e.handle as sys::hipEvent_t
}

/// The loaded HIP runtime with at least one device.
#[derive(Debug)]
pub struct HipRuntime {
    hip: Hip,
    /// `Some` when HSA has the dmabuf export and `hsa_init` succeeded (paired in `Drop`).
    hsa: Option<Hsa>,
    version: i32,
    major: u32,
    devices: u32,
}

impl HipRuntime {
    /// Loads HIP, initialises it and counts devices.
    ///
    /// Errors: [`GpuError::LibraryNotFound`] without ROCm; `hipErrorNoDevice` (100) from
    /// `hipInit`/`hipGetDeviceCount` without an AMD GPU.
    pub fn load() -> Result<HipRuntime, GpuError> {
        let hip = Hip {
            api: sys::HipApi::load()?,
        };
        let version = hip.runtime_version()?;
        // Without an AMD GPU, ROCm 5.2's hipInit says hipErrorInvalidDevice (101) and
        // hipGetDeviceCount hipErrorNoDevice (100); report the latter, which says what is wrong.
        let init = hip.init();
        let n = hip.device_count()?;
        init?;
        let devices = u32::try_from(n)
            .map_err(|_| GpuError::InvalidArgument(format!("hipGetDeviceCount = {n}")))?;
        let hsa = match sys::HsaApi::load() {
            Ok(Some(api)) => {
                let hsa = Hsa { api };
                hsa.init().ok().map(|()| hsa)
            }
            _ => None,
        };
        let major = HipVersion::from_raw(version).map_or(0, |v| v.major);
        Ok(HipRuntime {
            hip,
            hsa,
            version,
            major,
            devices,
        })
    }

    fn ordinal(&self, ordinal: u32) -> Result<i32, GpuError> {
        if ordinal >= self.devices {
            return Err(GpuError::InvalidArgument(format!(
                "no HIP device {ordinal}"
            )));
        }
        i32::try_from(ordinal)
            .map_err(|_| GpuError::InvalidArgument(format!("no HIP device {ordinal}")))
    }
}

impl Drop for HipRuntime {
    fn drop(&mut self) {
        if let Some(hsa) = &self.hsa {
            let _ = hsa.shut_down();
        }
    }
}

impl GpuRuntime for HipRuntime {
    fn backend(&self) -> Backend {
        Backend::Hip
    }

    fn name(&self) -> String {
        match HipVersion::from_raw(self.version) {
            Some(v) => format!("hip runtime {v}"),
            None => format!("hip runtime ({})", self.version),
        }
    }

    fn vendor(&self) -> GpuVendor {
        GpuVendor::Amd
    }

    fn version(&self) -> i32 {
        self.version
    }

    fn device_count(&self) -> u32 {
        self.devices
    }

    fn capabilities(&self) -> Capabilities {
        let hip_export = self.hip.api.hipMemGetHandleForAddressRange.is_some();
        let mut missing = Vec::new();
        if !hip_export {
            missing.push("hipMemGetHandleForAddressRange");
        }
        if self.hsa.is_none() {
            missing.push("hsa_amd_portable_export_dmabuf");
        }
        Capabilities {
            dmabuf_export: hip_export || self.hsa.is_some(),
            ipc_memory: true,
            missing_optional: missing,
        }
    }

    fn device_name(&self, ordinal: u32) -> Result<String, GpuError> {
        self.hip.device_name(self.ordinal(ordinal)?)
    }

    fn pci_bus_id(&self, ordinal: u32) -> Result<PciAddr, GpuError> {
        let s = self.hip.device_pci_bus_id(self.ordinal(ordinal)?)?;
        s.to_ascii_lowercase()
            .parse()
            .map_err(|e: String| GpuError::InvalidArgument(format!("hipDeviceGetPCIBusId: {e}")))
    }

    fn pointer_kind(&self, addr: u64) -> Result<PointerKind, GpuError> {
        Ok(match self.hip.pointer_attributes(addr)? {
            Some(a) => decode::pointer_kind(self.major, &a),
            None => PointerKind::Unknown,
        })
    }

    fn alloc_device(&self, ordinal: u32, len: usize) -> Result<DevicePtr, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument(
                "device allocation of 0 bytes".into(),
            ));
        }
        self.ordinal(ordinal)?;
        self.hip.set_device(ordinal)?;
        Ok(DevicePtr {
            addr: self.hip.malloc(len)?,
            ordinal,
        })
    }

    unsafe fn free_device(&self, ptr: DevicePtr) -> Result<(), GpuError> {
        self.hip.set_device(ptr.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { self.hip.free(ptr.addr) }
    }

    fn alloc_pinned(&self, len: usize) -> Result<*mut u8, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument(
                "pinned allocation of 0 bytes".into(),
            ));
        }
        self.hip.host_malloc(len)
    }

    unsafe fn free_pinned(&self, ptr: *mut u8) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.host_free(ptr) }
    }

    fn create_stream(&self, ordinal: u32) -> Result<RawStream, GpuError> {
        self.ordinal(ordinal)?;
        self.hip.set_device(ordinal)?;
        Ok(RawStream {
            handle: self.hip.stream_create()? as usize,
            ordinal,
        })
    }

    unsafe fn destroy_stream(&self, stream: RawStream) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.stream_destroy(stream_of(stream)) }
    }

    unsafe fn stream_synchronize(&self, stream: RawStream) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.stream_synchronize(stream_of(stream)) }
    }

    fn create_event(&self, ordinal: u32, timing: bool) -> Result<RawEvent, GpuError> {
        self.ordinal(ordinal)?;
        self.hip.set_device(ordinal)?;
        Ok(RawEvent {
            handle: self.hip.event_create(timing)? as usize,
            ordinal,
        })
    }

    unsafe fn destroy_event(&self, event: RawEvent) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.event_destroy(event_of(event)) }
    }

    unsafe fn record_event(&self, event: RawEvent, stream: RawStream) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.event_record(event_of(event), stream_of(stream)) }
    }

    unsafe fn event_query(&self, event: RawEvent) -> Result<bool, GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.event_query(event_of(event)) }
    }

    unsafe fn event_synchronize(&self, event: RawEvent) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.event_synchronize(event_of(event)) }
    }

    unsafe fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32, GpuError> {
        // SAFETY: the caller's contract.
        unsafe { self.hip.event_elapsed(event_of(start), event_of(end)) }
    }

    unsafe fn memcpy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe {
            self.hip.memcpy_async(
                dst.addr as *mut _,
                src.cast(),
                len,
                sys::HIP_MEMCPY_HOST_TO_DEVICE,
                stream_of(stream),
            )
        }
    }

    unsafe fn memcpy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        len: usize,
        stream: RawStream,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe {
            self.hip.memcpy_async(
                dst.cast(),
                src.addr as *const _,
                len,
                sys::HIP_MEMCPY_DEVICE_TO_HOST,
                stream_of(stream),
            )
        }
    }

    unsafe fn memcpy_h2d(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe {
            self.hip.memcpy(
                dst.addr as *mut _,
                src.cast(),
                len,
                sys::HIP_MEMCPY_HOST_TO_DEVICE,
            )
        }
    }

    unsafe fn memcpy_d2h(&self, dst: *mut u8, src: DevicePtr, len: usize) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        unsafe {
            self.hip.memcpy(
                dst.cast(),
                src.addr as *const _,
                len,
                sys::HIP_MEMCPY_DEVICE_TO_HOST,
            )
        }
    }

    fn export_dmabuf(&self, ptr: DevicePtr, len: usize) -> Result<DmabufRegion, GpuError> {
        if len == 0 {
            return Err(GpuError::InvalidArgument("dmabuf export of 0 bytes".into()));
        }
        self.hip.set_device(ptr.ordinal)?;
        // Preferred: hipMemGetHandleForAddressRange on the page-aligned enclosing range.
        if self.hip.api.hipMemGetHandleForAddressRange.is_some() {
            let (base, alloc_len) = self.hip.mem_get_address_range(ptr.addr)?;
            let w = dmabuf::window(
                ptr.addr,
                len as u64,
                dmabuf::host_page_size(),
                base,
                alloc_len as u64,
            )?;
            if let Some(fd) = self.hip.mem_get_dmabuf_fd(w.start, w.size as usize)? {
                return owned(fd, w.offset, len, w.size);
            }
        }
        // Fallback: the HSA export, which reports the offset itself.
        if let Some(hsa) = &self.hsa {
            let (fd, offset) = hsa.export_dmabuf(ptr.addr, len)?;
            // The HSA export covers the whole allocation.
            let fd = owned(fd, offset, len, 0)?;
            let (_, alloc_len) = self.hip.mem_get_address_range(ptr.addr)?;
            return Ok(DmabufRegion {
                exported_size: alloc_len as u64,
                ..fd
            });
        }
        Err(GpuError::Unsupported {
            backend: Backend::Hip,
            what: "dmabuf export",
            why: "runtime lacks hipMemGetHandleForAddressRange and hsa_amd_portable_export_dmabuf"
                .into(),
        })
    }

    fn ipc_export(&self, ptr: DevicePtr, len: usize) -> Result<IpcExport, GpuError> {
        self.ordinal(ptr.ordinal)?;
        match self.pointer_kind(ptr.addr)? {
            PointerKind::Device { ordinal } if ordinal == ptr.ordinal => {}
            other => {
                return Err(GpuError::InvalidArgument(format!(
                    "IPC export: {:#x} is not memory of HIP device {} ({other:?})",
                    ptr.addr, ptr.ordinal
                )));
            }
        }
        self.hip.set_device(ptr.ordinal)?;
        let (base, alloc_len) = self.hip.mem_get_address_range(ptr.addr)?;
        let offset = ipc::offset_in(ptr.addr, len as u64, base, alloc_len as u64)?;
        // The handle of the base, so that opening returns the base as CUDA's does, whatever a
        // ROCm version makes of a handle taken on an interior pointer.
        let handle = self.hip.ipc_get_mem_handle(base)?;
        Ok(IpcExport {
            handle,
            offset,
            alloc_len: alloc_len as u64,
            ordinal: ptr.ordinal,
        })
    }

    unsafe fn ipc_open(&self, export: &IpcExport) -> Result<DevicePtr, GpuError> {
        export.check(1)?;
        self.ordinal(export.ordinal)?;
        self.hip.set_device(export.ordinal)?;
        // SAFETY: the caller's contract.
        let base = unsafe { self.hip.ipc_open_mem_handle(&export.handle)? };
        let mapped = self
            .hip
            .mem_get_address_range(base)
            .and_then(|(b, n)| ipc::check_mapping(export, base, b, n as u64));
        if let Err(e) = mapped {
            // SAFETY: opened just above, closed once here; nothing has used it.
            let _ = unsafe { self.hip.ipc_close_mem_handle(base) };
            return Err(e);
        }
        Ok(DevicePtr {
            addr: base,
            ordinal: export.ordinal,
        })
    }

    unsafe fn ipc_close(&self, base: DevicePtr) -> Result<(), GpuError> {
        self.ordinal(base.ordinal)?;
        self.hip.set_device(base.ordinal)?;
        // SAFETY: the caller's contract.
        unsafe { self.hip.ipc_close_mem_handle(base.addr) }
    }
}

fn owned(fd: i32, offset: u64, len: usize, exported_size: u64) -> Result<DmabufRegion, GpuError> {
    if fd < 0 {
        return Err(GpuError::InvalidArgument(format!(
            "dmabuf export returned fd {fd}"
        )));
    }
    // SAFETY: the runtime just created this fd for us; nothing else owns it. Dropping closes
    // it with close(2), which is all ROCr's `hsa_amd_portable_close_dmabuf` does.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(DmabufRegion {
        fd,
        offset,
        len: len as u64,
        exported_size,
    })
}
