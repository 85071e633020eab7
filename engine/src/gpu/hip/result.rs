//! HIP `result` layer: one function per C call, status → [`GpuError`] in one place ([`Hip::check`]).
//!
//! `#[allow(unsafe_code)]`: each block is one call through the resolved function table, on
//! stack-owned out-parameters or on pointers covered by the caller's `unsafe fn` contract.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};

use super::decode;
use super::sys::{self, HipApi, HsaApi, hipEvent_t, hipStream_t};
use crate::gpu::{Backend, GpuError};

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: HIP/HSA return pointers to static NUL-terminated strings.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

fn from_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The loaded HIP runtime's calls.
#[derive(Debug)]
pub struct Hip {
    /// The resolved table (owns the library).
    pub api: HipApi,
}

impl Hip {
    /// Status → result, with the runtime's name and description of the status.
    pub fn check(&self, call: &'static str, r: c_int) -> Result<(), GpuError> {
        if r == sys::HIP_SUCCESS {
            return Ok(());
        }
        // SAFETY: both accept any code and return static strings (or NULL).
        let name = cstr(unsafe { (self.api.hipGetErrorName)(r) });
        // SAFETY: as above.
        let message = cstr(unsafe { (self.api.hipGetErrorString)(r) });
        Err(GpuError::Call {
            backend: Backend::Hip,
            call,
            code: r,
            name: name
                .or_else(|| decode::error_name(r).map(str::to_owned))
                .unwrap_or_else(|| "hipError?".into()),
            message: message.unwrap_or_else(|| "unknown error".into()),
        })
    }

    /// `hipInit(0)`.
    pub fn init(&self) -> Result<(), GpuError> {
        // SAFETY: no pointers.
        self.check("hipInit", unsafe { (self.api.hipInit)(0) })
    }

    /// `hipRuntimeGetVersion`.
    pub fn runtime_version(&self) -> Result<i32, GpuError> {
        let mut v: c_int = 0;
        // SAFETY: stack out-parameter.
        self.check("hipRuntimeGetVersion", unsafe {
            (self.api.hipRuntimeGetVersion)(&raw mut v)
        })?;
        Ok(v)
    }

    /// `hipGetDeviceCount`.
    pub fn device_count(&self) -> Result<i32, GpuError> {
        let mut n: c_int = 0;
        // SAFETY: stack out-parameter.
        self.check("hipGetDeviceCount", unsafe {
            (self.api.hipGetDeviceCount)(&raw mut n)
        })?;
        Ok(n)
    }

    /// `hipSetDevice` (HIP's current device is per thread).
    pub fn set_device(&self, ordinal: u32) -> Result<(), GpuError> {
        let o = c_int::try_from(ordinal)
            .map_err(|_| GpuError::InvalidArgument(format!("device {ordinal}")))?;
        // SAFETY: no pointers.
        self.check("hipSetDevice", unsafe { (self.api.hipSetDevice)(o) })
    }

    /// `hipDeviceGet` + `hipDeviceGetName`.
    pub fn device_name(&self, ordinal: c_int) -> Result<String, GpuError> {
        let mut dev: sys::hipDevice_t = 0;
        // SAFETY: stack out-parameter.
        self.check("hipDeviceGet", unsafe {
            (self.api.hipDeviceGet)(&raw mut dev, ordinal)
        })?;
        let mut buf = [0 as c_char; 256];
        // SAFETY: the runtime writes at most `len` bytes into the stack buffer.
        self.check("hipDeviceGetName", unsafe {
            (self.api.hipDeviceGetName)(buf.as_mut_ptr(), 256, dev)
        })?;
        Ok(from_buf(&buf))
    }

    /// `hipDeviceGetPCIBusId`.
    pub fn device_pci_bus_id(&self, ordinal: c_int) -> Result<String, GpuError> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: the runtime writes at most `len` bytes into the stack buffer.
        self.check("hipDeviceGetPCIBusId", unsafe {
            (self.api.hipDeviceGetPCIBusId)(buf.as_mut_ptr(), 64, ordinal)
        })?;
        Ok(from_buf(&buf))
    }

    /// `hipPointerGetAttributes`; `Ok(None)` for `hipErrorInvalidValue` (unknown host memory
    /// on ROCm 5).
    pub fn pointer_attributes(
        &self,
        addr: u64,
    ) -> Result<Option<sys::hipPointerAttribute_t>, GpuError> {
        let mut a = sys::hipPointerAttribute_t::default();
        // SAFETY: stack out-parameter of the header's layout (pinned by layout asserts); the
        // address is only looked up.
        let r = unsafe { (self.api.hipPointerGetAttributes)(&raw mut a, addr as *const c_void) };
        if r == sys::HIP_ERROR_INVALID_VALUE {
            return Ok(None);
        }
        self.check("hipPointerGetAttributes", r)?;
        Ok(Some(a))
    }

    /// `hipMalloc`.
    pub fn malloc(&self, len: usize) -> Result<u64, GpuError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: stack out-parameter.
        self.check("hipMalloc", unsafe {
            (self.api.hipMalloc)(&raw mut p, len)
        })?;
        Ok(p as u64)
    }

    /// `hipFree`.
    ///
    /// # Safety
    /// `p` came from [`Hip::malloc`], freed once, unused by queued work.
    pub unsafe fn free(&self, p: u64) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipFree", unsafe { (self.api.hipFree)(p as *mut c_void) })
    }

    /// `hipHostMalloc(Portable)`.
    pub fn host_malloc(&self, len: usize) -> Result<*mut u8, GpuError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: stack out-parameter.
        self.check("hipHostMalloc", unsafe {
            (self.api.hipHostMalloc)(&raw mut p, len, sys::HIP_HOST_MALLOC_PORTABLE)
        })?;
        Ok(p.cast())
    }

    /// `hipHostFree`.
    ///
    /// # Safety
    /// `p` came from [`Hip::host_malloc`], freed once, unused by queued copies.
    pub unsafe fn host_free(&self, p: *mut u8) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipHostFree", unsafe { (self.api.hipHostFree)(p.cast()) })
    }

    /// `hipMemGetAddressRange`: base and size of the allocation containing `p`.
    pub fn mem_get_address_range(&self, p: u64) -> Result<(u64, usize), GpuError> {
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: stack out-parameters; `p` is only looked up.
        self.check("hipMemGetAddressRange", unsafe {
            (self.api.hipMemGetAddressRange)(&raw mut base, &raw mut size, p as *mut c_void)
        })?;
        Ok((base as u64, size))
    }

    /// `hipIpcGetMemHandle`: the 64-byte handle of the allocation whose base is `base`.
    pub fn ipc_get_mem_handle(&self, base: u64) -> Result<[u8; 64], GpuError> {
        let mut h = sys::hipIpcMemHandle_t {
            reserved: [0; sys::HIP_IPC_HANDLE_SIZE],
        };
        // SAFETY: the out-parameter is a stack local of the header's layout (asserted in
        // `sys`); the address is looked up by the runtime, which refuses unknown pointers.
        self.check("hipIpcGetMemHandle", unsafe {
            (self.api.hipIpcGetMemHandle)(&raw mut h, base as *mut c_void)
        })?;
        Ok(h.reserved.map(|c| c as u8))
    }

    /// `hipIpcOpenMemHandle(hipIpcMemLazyEnablePeerAccess)` on the current device: the base of
    /// the mapped allocation.
    ///
    /// # Safety
    /// [`crate::gpu::GpuRuntime::ipc_open`]'s contract.
    pub unsafe fn ipc_open_mem_handle(&self, handle: &[u8; 64]) -> Result<u64, GpuError> {
        let h = sys::hipIpcMemHandle_t {
            reserved: handle.map(|b| b as c_char),
        };
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: the handle goes by value (the runtime validates its contents); the
        // out-parameter is a stack local.
        self.check("hipIpcOpenMemHandle", unsafe {
            (self.api.hipIpcOpenMemHandle)(&raw mut p, h, sys::HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        })?;
        Ok(p as u64)
    }

    /// `hipIpcCloseMemHandle`.
    ///
    /// # Safety
    /// [`crate::gpu::GpuRuntime::ipc_close`]'s contract: `base` came from
    /// [`Hip::ipc_open_mem_handle`], closed once, unused by queued work.
    pub unsafe fn ipc_close_mem_handle(&self, base: u64) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipIpcCloseMemHandle", unsafe {
            (self.api.hipIpcCloseMemHandle)(base as *mut c_void)
        })
    }

    /// `hipMemGetHandleForAddressRange(DmaBufFd)` when the runtime has it (ROCm 6.x).
    pub fn mem_get_dmabuf_fd(&self, start: u64, size: usize) -> Result<Option<c_int>, GpuError> {
        let Some(f) = self.api.hipMemGetHandleForAddressRange else {
            return Ok(None);
        };
        let mut fd: c_int = -1;
        // SAFETY: the handle out-parameter is an `int` for DmaBufFd, a stack local; the range
        // is validated by the runtime.
        self.check("hipMemGetHandleForAddressRange", unsafe {
            f(
                (&raw mut fd).cast(),
                start as *mut c_void,
                size,
                sys::HIP_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        Ok(Some(fd))
    }

    /// `hipStreamCreateWithFlags(NonBlocking)`.
    pub fn stream_create(&self) -> Result<hipStream_t, GpuError> {
        let mut s: hipStream_t = std::ptr::null_mut();
        // SAFETY: stack out-parameter.
        self.check("hipStreamCreateWithFlags", unsafe {
            (self.api.hipStreamCreateWithFlags)(&raw mut s, sys::HIP_STREAM_NON_BLOCKING)
        })?;
        Ok(s)
    }

    /// `hipStreamDestroy`.
    ///
    /// # Safety
    /// `s` is live, destroyed once.
    pub unsafe fn stream_destroy(&self, s: hipStream_t) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipStreamDestroy", unsafe {
            (self.api.hipStreamDestroy)(s)
        })
    }

    /// `hipStreamSynchronize`.
    ///
    /// # Safety
    /// `s` is live.
    pub unsafe fn stream_synchronize(&self, s: hipStream_t) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipStreamSynchronize", unsafe {
            (self.api.hipStreamSynchronize)(s)
        })
    }

    /// `hipEventCreateWithFlags`.
    pub fn event_create(&self, timing: bool) -> Result<hipEvent_t, GpuError> {
        let flags = if timing {
            sys::HIP_EVENT_DEFAULT
        } else {
            sys::HIP_EVENT_DISABLE_TIMING
        };
        let mut e: hipEvent_t = std::ptr::null_mut();
        // SAFETY: stack out-parameter.
        self.check("hipEventCreateWithFlags", unsafe {
            (self.api.hipEventCreateWithFlags)(&raw mut e, flags)
        })?;
        Ok(e)
    }

    /// `hipEventDestroy`.
    ///
    /// # Safety
    /// `e` is live, destroyed once.
    pub unsafe fn event_destroy(&self, e: hipEvent_t) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipEventDestroy", unsafe { (self.api.hipEventDestroy)(e) })
    }

    /// `hipEventRecord`.
    ///
    /// # Safety
    /// `e` and `s` are live.
    pub unsafe fn event_record(&self, e: hipEvent_t, s: hipStream_t) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipEventRecord", unsafe { (self.api.hipEventRecord)(e, s) })
    }

    /// `hipEventQuery`; `Ok(false)` for `hipErrorNotReady`.
    ///
    /// # Safety
    /// `e` is live.
    pub unsafe fn event_query(&self, e: hipEvent_t) -> Result<bool, GpuError> {
        // SAFETY: the caller's contract.
        let r = unsafe { (self.api.hipEventQuery)(e) };
        if r == sys::HIP_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("hipEventQuery", r).map(|()| true)
    }

    /// `hipEventSynchronize`.
    ///
    /// # Safety
    /// `e` is live.
    pub unsafe fn event_synchronize(&self, e: hipEvent_t) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipEventSynchronize", unsafe {
            (self.api.hipEventSynchronize)(e)
        })
    }

    /// `hipEventElapsedTime`.
    ///
    /// # Safety
    /// Both events are live.
    pub unsafe fn event_elapsed(&self, a: hipEvent_t, b: hipEvent_t) -> Result<f32, GpuError> {
        let mut ms = 0f32;
        // SAFETY: the caller's contract; stack out-parameter.
        self.check("hipEventElapsedTime", unsafe {
            (self.api.hipEventElapsedTime)(&raw mut ms, a, b)
        })?;
        Ok(ms)
    }

    /// `hipMemcpyAsync`.
    ///
    /// # Safety
    /// The trait's async-copy contract for `dst`/`src`; `s` is live.
    pub unsafe fn memcpy_async(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        kind: c_int,
        s: hipStream_t,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipMemcpyAsync", unsafe {
            (self.api.hipMemcpyAsync)(dst, src, len, kind, s)
        })
    }

    /// `hipMemcpy`.
    ///
    /// # Safety
    /// The trait's sync-copy contract for `dst`/`src`.
    pub unsafe fn memcpy(
        &self,
        dst: *mut c_void,
        src: *const c_void,
        len: usize,
        kind: c_int,
    ) -> Result<(), GpuError> {
        // SAFETY: the caller's contract.
        self.check("hipMemcpy", unsafe {
            (self.api.hipMemcpy)(dst, src, len, kind)
        })
    }
}

/// The HSA calls used for the dmabuf export.
#[derive(Debug)]
pub struct Hsa {
    /// The resolved table.
    pub api: HsaApi,
}

impl Hsa {
    /// Status → result with `hsa_status_string`'s description.
    pub fn check(&self, call: &'static str, r: c_int) -> Result<(), GpuError> {
        if r == sys::HSA_STATUS_SUCCESS {
            return Ok(());
        }
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: stack out-parameter; HSA returns a static string.
        let _ = unsafe { (self.api.hsa_status_string)(r, &raw mut s) };
        let message = cstr(s).unwrap_or_else(|| "unknown status".into());
        Err(GpuError::Call {
            backend: Backend::Hsa,
            call,
            code: r,
            name: format!("hsa_status_t({r:#x})"),
            message,
        })
    }

    /// `hsa_init` (reference counted: HIP already holds one).
    pub fn init(&self) -> Result<(), GpuError> {
        // SAFETY: no pointers.
        self.check("hsa_init", unsafe { (self.api.hsa_init)() })
    }

    /// `hsa_shut_down`, pairing [`Hsa::init`].
    pub fn shut_down(&self) -> Result<(), GpuError> {
        // SAFETY: no pointers; pairs a successful `hsa_init`.
        self.check("hsa_shut_down", unsafe { (self.api.hsa_shut_down)() })
    }

    /// `hsa_amd_portable_export_dmabuf`: fd and offset of `ptr` within it.
    pub fn export_dmabuf(&self, ptr: u64, len: usize) -> Result<(c_int, u64), GpuError> {
        let mut fd: c_int = -1;
        let mut off: u64 = 0;
        // SAFETY: stack out-parameters; the runtime validates `ptr..ptr+len`.
        self.check("hsa_amd_portable_export_dmabuf", unsafe {
            (self.api.hsa_amd_portable_export_dmabuf)(
                ptr as *const c_void,
                len,
                &raw mut fd,
                &raw mut off,
            )
        })?;
        Ok((fd, off))
    }
}
