//! CUDA driver API, `result` layer: one function per driver call, status → [`GpuError`].
//!
//! The raw layer is `cudarc::driver::sys` (bindings for CUDA 13.0 whose symbols are resolved
//! from `libcuda.so` on first use). A missing symbol would make `cudarc` panic on first call,
//! so [`CudaLib::open`] checks every symbol this module calls before anything else runs.
//!
//! `#[allow(unsafe_code)]`: each block is one driver call on stack-owned out-parameters or
//! on pointers whose validity the caller's own `unsafe fn` contract provides.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};

use cudarc::driver::sys::{self, CUresult};

use crate::gpu::{Backend, GpuError};

/// Driver symbols every operation needs (loading fails without them).
pub const REQUIRED: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetPCIBusId",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuPointerGetAttribute",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemGetAddressRange_v2",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
];
/// `cuMemGetHandleForAddressRange` (CUDA 11.7+ drivers): dmabuf export.
pub const SYM_DMABUF: &str = "cuMemGetHandleForAddressRange";
/// `cuEventElapsedTime_v2` (CUDA 12.8+ drivers): event timing.
pub const SYM_ELAPSED: &str = "cuEventElapsedTime_v2";
/// The IPC memory calls (`cuIpcOpenMemHandle_v2`: CUDA 11+ drivers), all present or the
/// feature is off.
pub const SYMS_IPC: &[&str] = &[
    "cuIpcGetMemHandle",
    "cuIpcOpenMemHandle_v2",
    "cuIpcCloseMemHandle",
];

/// Proof that `libcuda` is loaded and has the [`REQUIRED`] symbols.
#[derive(Debug, Clone, Copy)]
pub struct CudaLib {
    /// `cuMemGetHandleForAddressRange` is present.
    pub has_dmabuf: bool,
    /// `cuEventElapsedTime_v2` is present.
    pub has_elapsed: bool,
    /// Every one of [`SYMS_IPC`] is present.
    pub has_ipc: bool,
}

fn has_symbol(name: &str) -> bool {
    // SAFETY: `culib()` is only reached after `is_culib_present()` returned true, so it loads
    // rather than panics; looking a symbol up as an untyped pointer calls nothing.
    unsafe { sys::culib().get::<*const c_void>(name.as_bytes()).is_ok() }
}

impl CudaLib {
    /// Opens `libcuda.so` (through `cudarc`) and checks its symbols.
    pub fn open() -> Result<CudaLib, GpuError> {
        // SAFETY: tries `dlopen` on the candidate names; no symbol is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::LibraryNotFound {
                backend: Backend::Cuda,
                detail: "libcuda.so / libcuda.so.1 not found (no NVIDIA driver)".into(),
            });
        }
        if let Some(missing) = REQUIRED.iter().find(|s| !has_symbol(s)) {
            return Err(GpuError::MissingSymbol {
                backend: Backend::Cuda,
                symbol: missing,
            });
        }
        Ok(CudaLib {
            has_dmabuf: has_symbol(SYM_DMABUF),
            has_elapsed: has_symbol(SYM_ELAPSED),
            has_ipc: SYMS_IPC.iter().all(|s| has_symbol(s)),
        })
    }
}

fn cstr_or(p: *const c_char, fallback: &str) -> String {
    if p.is_null() {
        return fallback.to_owned();
    }
    // SAFETY: the driver returns pointers to static NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Turns a driver status into `Ok` or a [`GpuError::Call`] with its name and description.
pub fn check(call: &'static str, r: CUresult) -> Result<(), GpuError> {
    if r == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const c_char = std::ptr::null();
    let mut msg: *const c_char = std::ptr::null();
    // SAFETY: out-parameters are stack locals; the driver tolerates unknown codes.
    let _ = unsafe { sys::cuGetErrorName(r, &raw mut name) };
    // SAFETY: as above.
    let _ = unsafe { sys::cuGetErrorString(r, &raw mut msg) };
    Err(GpuError::Call {
        backend: Backend::Cuda,
        call,
        code: r as i32,
        name: cstr_or(name, "CUDA_ERROR_?"),
        message: cstr_or(msg, "unknown error"),
    })
}

/// `cuInit(0)`.
pub fn init() -> Result<(), GpuError> {
    // SAFETY: plain call, no pointers.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// `cuDriverGetVersion`.
pub fn driver_version() -> Result<i32, GpuError> {
    let mut v: c_int = 0;
    // SAFETY: out-parameter is a stack local.
    check("cuDriverGetVersion", unsafe {
        sys::cuDriverGetVersion(&raw mut v)
    })?;
    Ok(v)
}

/// `cuDeviceGetCount`.
pub fn device_count() -> Result<i32, GpuError> {
    let mut n: c_int = 0;
    // SAFETY: out-parameter is a stack local.
    check("cuDeviceGetCount", unsafe {
        sys::cuDeviceGetCount(&raw mut n)
    })?;
    Ok(n)
}

/// `cuDeviceGet`.
pub fn device_get(ordinal: i32) -> Result<sys::CUdevice, GpuError> {
    let mut d: sys::CUdevice = 0;
    // SAFETY: out-parameter is a stack local.
    check("cuDeviceGet", unsafe {
        sys::cuDeviceGet(&raw mut d, ordinal)
    })?;
    Ok(d)
}

/// `cuDeviceGetName`.
pub fn device_name(dev: sys::CUdevice) -> Result<String, GpuError> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes including the NUL into the stack buffer.
    check("cuDeviceGetName", unsafe {
        sys::cuDeviceGetName(buf.as_mut_ptr(), 256, dev)
    })?;
    Ok(cstr_from_buf(&buf))
}

/// `cuDeviceGetPCIBusId` (`"0000:3b:00.0"`-style, 13+ chars).
pub fn device_pci_bus_id(dev: sys::CUdevice) -> Result<String, GpuError> {
    let mut buf = [0 as c_char; 64];
    // SAFETY: the driver writes at most `len` bytes including the NUL into the stack buffer.
    check("cuDeviceGetPCIBusId", unsafe {
        sys::cuDeviceGetPCIBusId(buf.as_mut_ptr(), 64, dev)
    })?;
    Ok(cstr_from_buf(&buf))
}

fn cstr_from_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `cuDevicePrimaryCtxRetain`.
pub fn primary_ctx_retain(dev: sys::CUdevice) -> Result<sys::CUcontext, GpuError> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: out-parameter is a stack local.
    check("cuDevicePrimaryCtxRetain", unsafe {
        sys::cuDevicePrimaryCtxRetain(&raw mut ctx, dev)
    })?;
    Ok(ctx)
}

/// `cuDevicePrimaryCtxRelease_v2`.
pub fn primary_ctx_release(dev: sys::CUdevice) -> Result<(), GpuError> {
    // SAFETY: plain call; the driver refcounts the primary context.
    check("cuDevicePrimaryCtxRelease_v2", unsafe {
        sys::cuDevicePrimaryCtxRelease_v2(dev)
    })
}

/// Makes `ctx` current on this thread unless it already is (`cuCtxGetCurrent` is a TLS read).
///
/// # Safety
/// `ctx` is a live context (a retained primary context).
pub unsafe fn ensure_current(ctx: sys::CUcontext) -> Result<(), GpuError> {
    let mut cur: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: out-parameter is a stack local.
    check("cuCtxGetCurrent", unsafe {
        sys::cuCtxGetCurrent(&raw mut cur)
    })?;
    if cur != ctx {
        // SAFETY: the caller's contract: `ctx` is live.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })?;
    }
    Ok(())
}

/// `cuPointerGetAttribute` for a 32-bit attribute. `Ok(None)` when the driver does not know
/// the address (`CUDA_ERROR_INVALID_VALUE`, the answer for pageable host memory).
pub fn pointer_attr_u32(attr: sys::CUpointer_attribute, ptr: u64) -> Result<Option<u32>, GpuError> {
    // Zeroed and 8 bytes wide: the attributes queried here are `int`, `unsigned int` or a
    // boolean; whichever width the driver writes, the low 32 bits (little-endian) hold it.
    let mut v: u64 = 0;
    // SAFETY: the out-parameter is a stack local at least as wide as any of these attributes.
    // The address is only looked up, not dereferenced.
    let r = unsafe { sys::cuPointerGetAttribute((&raw mut v).cast(), attr, ptr) };
    if r == CUresult::CUDA_ERROR_INVALID_VALUE {
        return Ok(None);
    }
    check("cuPointerGetAttribute", r)?;
    Ok(Some(v as u32))
}

/// `cuMemAlloc_v2`.
pub fn mem_alloc(len: usize) -> Result<u64, GpuError> {
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: out-parameter is a stack local.
    check("cuMemAlloc_v2", unsafe {
        sys::cuMemAlloc_v2(&raw mut p, len)
    })?;
    Ok(p)
}

/// `cuMemFree_v2`.
///
/// # Safety
/// `p` is a live allocation from [`mem_alloc`], freed once, not in use by queued work.
pub unsafe fn mem_free(p: u64) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(p) })
}

/// `cuMemHostAlloc(PORTABLE)`: pinned host memory usable from every context.
pub fn mem_host_alloc(len: usize) -> Result<*mut u8, GpuError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: out-parameter is a stack local.
    check("cuMemHostAlloc", unsafe {
        sys::cuMemHostAlloc(&raw mut p, len, sys::CU_MEMHOSTALLOC_PORTABLE)
    })?;
    Ok(p.cast())
}

/// `cuMemFreeHost`.
///
/// # Safety
/// `p` came from [`mem_host_alloc`], freed once, not in use by queued copies.
pub unsafe fn mem_free_host(p: *mut u8) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p.cast()) })
}

/// `cuMemGetAddressRange_v2`: base and size of the allocation containing `p`.
pub fn mem_get_address_range(p: u64) -> Result<(u64, usize), GpuError> {
    let mut base: sys::CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: out-parameters are stack locals; `p` is only looked up.
    check("cuMemGetAddressRange_v2", unsafe {
        sys::cuMemGetAddressRange_v2(&raw mut base, &raw mut size, p)
    })?;
    Ok((base, size))
}

/// `cuMemGetHandleForAddressRange(DMA_BUF_FD)` on a page-aligned range. Returns the fd.
/// The caller must have checked [`CudaLib::has_dmabuf`].
pub fn mem_get_dmabuf_fd(start: u64, size: usize) -> Result<c_int, GpuError> {
    let mut fd: c_int = -1;
    // SAFETY: the handle out-parameter is an `int` for DMA_BUF_FD, a stack local; the range is
    // validated by the driver, which returns an error for ranges it does not own.
    check("cuMemGetHandleForAddressRange", unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&raw mut fd).cast(),
            start,
            size,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    })?;
    Ok(fd)
}

/// `cuIpcGetMemHandle`: the 64-byte handle of the allocation whose base is `base`. The
/// caller must have checked [`CudaLib::has_ipc`].
pub fn ipc_get_mem_handle(base: u64) -> Result<[u8; 64], GpuError> {
    let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
    // SAFETY: the out-parameter is a stack local of the header's type; the address is looked
    // up by the driver, which refuses pointers that are not allocation bases it can export.
    check("cuIpcGetMemHandle", unsafe {
        sys::cuIpcGetMemHandle(&raw mut h, base)
    })?;
    Ok(h.reserved.map(|c| c as u8))
}

/// `cuIpcOpenMemHandle_v2(LAZY_ENABLE_PEER_ACCESS)` in the current context: the base of the
/// mapped allocation. The caller must have checked [`CudaLib::has_ipc`].
///
/// # Safety
/// [`crate::gpu::GpuRuntime::ipc_open`]'s contract (the exporter keeps the allocation alive
/// until [`ipc_close_mem_handle`]).
pub unsafe fn ipc_open_mem_handle(handle: &[u8; 64]) -> Result<u64, GpuError> {
    let h = sys::CUipcMemHandle {
        reserved: handle.map(|b| b as c_char),
    };
    let mut p: sys::CUdeviceptr = 0;
    // SAFETY: the handle is passed by value (the driver validates its contents and refuses
    // foreign or stale ones); the out-parameter is a stack local.
    check("cuIpcOpenMemHandle_v2", unsafe {
        sys::cuIpcOpenMemHandle_v2(
            &raw mut p,
            h,
            sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as c_uint,
        )
    })?;
    Ok(p)
}

/// `cuIpcCloseMemHandle`. The caller must have checked [`CudaLib::has_ipc`].
///
/// # Safety
/// [`crate::gpu::GpuRuntime::ipc_close`]'s contract: `base` came from
/// [`ipc_open_mem_handle`], closed once, unused by queued work.
pub unsafe fn ipc_close_mem_handle(base: u64) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuIpcCloseMemHandle", unsafe {
        sys::cuIpcCloseMemHandle(base)
    })
}

/// `cuStreamCreate(NON_BLOCKING)`.
pub fn stream_create() -> Result<sys::CUstream, GpuError> {
    let mut s: sys::CUstream = std::ptr::null_mut();
    // SAFETY: out-parameter is a stack local.
    check("cuStreamCreate", unsafe {
        sys::cuStreamCreate(
            &raw mut s,
            sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint,
        )
    })?;
    Ok(s)
}

/// `cuStreamDestroy_v2`.
///
/// # Safety
/// `s` is a live stream, destroyed once.
pub unsafe fn stream_destroy(s: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuStreamDestroy_v2", unsafe { sys::cuStreamDestroy_v2(s) })
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// `s` is a live stream.
pub unsafe fn stream_synchronize(s: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuStreamSynchronize", unsafe {
        sys::cuStreamSynchronize(s)
    })
}

/// `cuEventCreate`.
pub fn event_create(timing: bool) -> Result<sys::CUevent, GpuError> {
    let flags = if timing {
        0
    } else {
        sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint
    };
    let mut e: sys::CUevent = std::ptr::null_mut();
    // SAFETY: out-parameter is a stack local.
    check("cuEventCreate", unsafe {
        sys::cuEventCreate(&raw mut e, flags)
    })?;
    Ok(e)
}

/// `cuEventDestroy_v2`.
///
/// # Safety
/// `e` is a live event, destroyed once.
pub unsafe fn event_destroy(e: sys::CUevent) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuEventDestroy_v2", unsafe { sys::cuEventDestroy_v2(e) })
}

/// `cuEventRecord`.
///
/// # Safety
/// `e` and `s` are live.
pub unsafe fn event_record(e: sys::CUevent, s: sys::CUstream) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuEventRecord", unsafe { sys::cuEventRecord(e, s) })
}

/// `cuEventQuery`: `Ok(false)` for `CUDA_ERROR_NOT_READY`.
///
/// # Safety
/// `e` is live.
pub unsafe fn event_query(e: sys::CUevent) -> Result<bool, GpuError> {
    // SAFETY: the caller's contract.
    let r = unsafe { sys::cuEventQuery(e) };
    if r == CUresult::CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check("cuEventQuery", r).map(|()| true)
}

/// `cuEventSynchronize`.
///
/// # Safety
/// `e` is live.
pub unsafe fn event_synchronize(e: sys::CUevent) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(e) })
}

/// `cuEventElapsedTime_v2`. The caller must have checked [`CudaLib::has_elapsed`].
///
/// # Safety
/// Both events are live.
pub unsafe fn event_elapsed(a: sys::CUevent, b: sys::CUevent) -> Result<f32, GpuError> {
    let mut ms = 0f32;
    // SAFETY: the caller's contract; out-parameter is a stack local.
    check("cuEventElapsedTime_v2", unsafe {
        sys::cuEventElapsedTime_v2(&raw mut ms, a, b)
    })?;
    Ok(ms)
}

/// `cuMemcpyHtoDAsync_v2`.
///
/// # Safety
/// [`crate::gpu::GpuRuntime::memcpy_h2d_async`]'s contract.
pub unsafe fn memcpy_htod_async(
    dst: u64,
    src: *const u8,
    len: usize,
    s: sys::CUstream,
) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuMemcpyHtoDAsync_v2", unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, s)
    })
}

/// `cuMemcpyDtoHAsync_v2`.
///
/// # Safety
/// [`crate::gpu::GpuRuntime::memcpy_d2h_async`]'s contract.
pub unsafe fn memcpy_dtoh_async(
    dst: *mut u8,
    src: u64,
    len: usize,
    s: sys::CUstream,
) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuMemcpyDtoHAsync_v2", unsafe {
        sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, s)
    })
}

/// `cuMemcpyHtoD_v2`.
///
/// # Safety
/// [`crate::gpu::GpuRuntime::memcpy_h2d`]'s contract.
pub unsafe fn memcpy_htod(dst: u64, src: *const u8, len: usize) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuMemcpyHtoD_v2", unsafe {
        sys::cuMemcpyHtoD_v2(dst, src.cast(), len)
    })
}

/// `cuMemcpyDtoH_v2`.
///
/// # Safety
/// [`crate::gpu::GpuRuntime::memcpy_d2h`]'s contract.
pub unsafe fn memcpy_dtoh(dst: *mut u8, src: u64, len: usize) -> Result<(), GpuError> {
    // SAFETY: the caller's contract.
    check("cuMemcpyDtoH_v2", unsafe {
        sys::cuMemcpyDtoH_v2(dst.cast(), src, len)
    })
}
