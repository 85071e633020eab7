//! HIP / HSA C ABI, `sys` layer: types, constants and a function table filled by `dlopen`.
//!
//! Written by hand from the ROCm 5.2.3 headers (`hip/hip_runtime_api.h`, HIP_VERSION
//! 50221153, Debian package `libamdhip64-dev` 5.2.3-8) and checked against the ROCm 6.x
//! headers for what changed there (the `hipMemoryType` numbering and the first field's name
//! of `hipPointerAttribute_t`; its layout did not change; the IPC memory calls and
//! `hipIpcMemHandle_t` are the same in both). Symbols newer than 5.2
//! (`hipMemGetHandleForAddressRange`, `hsa_amd_portable_export_dmabuf`) are optional.
//!
//! `#[allow(unsafe_code)]`: resolving symbols with `libloading` is unsafe (the declared type
//! must match the C prototype); every prototype below is taken from the headers named above.
#![allow(unsafe_code)]
#![allow(non_camel_case_types, non_snake_case)]
// Table fields are named after, and documented by, the C symbols in the headers above.
#![allow(missing_docs)]

use std::ffi::{c_char, c_int, c_uint, c_void};

use libloading::Library;

use crate::gpu::{Backend, GpuError};

/// `hipError_t` (an `int`-sized C enum).
pub type hipError_t = c_int;
/// `hipStream_t`, `hipEvent_t`: opaque pointers.
pub type hipStream_t = *mut c_void;
/// See [`hipStream_t`].
pub type hipEvent_t = *mut c_void;
/// `hipDevice_t` is `int`.
pub type hipDevice_t = c_int;
/// `hsa_status_t` (an `int`-sized C enum).
pub type hsa_status_t = c_int;

/// `hipSuccess`.
pub const HIP_SUCCESS: hipError_t = 0;
/// `hipErrorInvalidValue`.
pub const HIP_ERROR_INVALID_VALUE: hipError_t = 1;
/// `hipErrorNoDevice`.
pub const HIP_ERROR_NO_DEVICE: hipError_t = 100;
/// `hipErrorNotReady`.
pub const HIP_ERROR_NOT_READY: hipError_t = 600;
/// `hsa_status_t` success.
pub const HSA_STATUS_SUCCESS: hsa_status_t = 0;

/// `hipMemcpyKind` values.
pub const HIP_MEMCPY_HOST_TO_DEVICE: c_int = 1;
/// See above.
pub const HIP_MEMCPY_DEVICE_TO_HOST: c_int = 2;
/// `hipStreamNonBlocking`.
pub const HIP_STREAM_NON_BLOCKING: c_uint = 0x1;
/// `hipEventDefault`.
pub const HIP_EVENT_DEFAULT: c_uint = 0x0;
/// `hipEventDisableTiming`.
pub const HIP_EVENT_DISABLE_TIMING: c_uint = 0x2;
/// `hipHostMallocPortable`.
pub const HIP_HOST_MALLOC_PORTABLE: c_uint = 0x1;
/// `hipMemRangeHandleTypeDmaBufFd` (ROCm 6.x).
pub const HIP_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 0x1;

/// `hipIpcMemLazyEnablePeerAccess` (the flag of `hipIpcOpenMemHandle`).
pub const HIP_IPC_MEM_LAZY_ENABLE_PEER_ACCESS: c_uint = 0x1;
/// `HIP_IPC_HANDLE_SIZE`.
pub const HIP_IPC_HANDLE_SIZE: usize = 64;

/// `hipIpcMemHandle_t` (`struct hipIpcMemHandle_st { char reserved[HIP_IPC_HANDLE_SIZE]; }`),
/// passed by value to `hipIpcOpenMemHandle`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hipIpcMemHandle_t {
    /// The runtime's opaque bytes.
    pub reserved: [c_char; HIP_IPC_HANDLE_SIZE],
}

const _: () = {
    assert!(std::mem::size_of::<hipIpcMemHandle_t>() == 64);
    assert!(std::mem::align_of::<hipIpcMemHandle_t>() == 1);
};

/// `hipPointerAttribute_t`. ROCm 5.x names the first field `memoryType`, ROCm 6.x `type`; the
/// layout is the same. Its values differ by version: see `decode::memory_kind`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hipPointerAttribute_t {
    /// `enum hipMemoryType`.
    pub memoryType: c_int,
    /// Device ordinal.
    pub device: c_int,
    /// Device address of the allocation.
    pub devicePointer: *mut c_void,
    /// Host address of the allocation (pinned / registered host memory).
    pub hostPointer: *mut c_void,
    /// Non-zero for managed memory.
    pub isManaged: c_int,
    /// Flags given at allocation.
    pub allocationFlags: c_uint,
}

impl Default for hipPointerAttribute_t {
    fn default() -> Self {
        hipPointerAttribute_t {
            memoryType: -1,
            device: -1,
            devicePointer: std::ptr::null_mut(),
            hostPointer: std::ptr::null_mut(),
            isManaged: 0,
            allocationFlags: 0,
        }
    }
}

// Layout pinned against the C header on LP64 (x86-64, aarch64 Linux).
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(std::mem::size_of::<hipPointerAttribute_t>() == 32);
    assert!(std::mem::align_of::<hipPointerAttribute_t>() == 8);
    assert!(std::mem::offset_of!(hipPointerAttribute_t, memoryType) == 0);
    assert!(std::mem::offset_of!(hipPointerAttribute_t, device) == 4);
    assert!(std::mem::offset_of!(hipPointerAttribute_t, devicePointer) == 8);
    assert!(std::mem::offset_of!(hipPointerAttribute_t, hostPointer) == 16);
    assert!(std::mem::offset_of!(hipPointerAttribute_t, isManaged) == 24);
    assert!(std::mem::offset_of!(hipPointerAttribute_t, allocationFlags) == 28);
};
#[cfg(not(target_pointer_width = "64"))]
compile_error!("the HIP bindings are written for 64-bit targets only");

/// The HIP entry points we call, resolved once. Field names are the C symbols.
#[derive(Debug)]
pub struct HipApi {
    pub hipInit: unsafe extern "C" fn(c_uint) -> hipError_t,
    pub hipRuntimeGetVersion: unsafe extern "C" fn(*mut c_int) -> hipError_t,
    pub hipGetErrorName: unsafe extern "C" fn(hipError_t) -> *const c_char,
    pub hipGetErrorString: unsafe extern "C" fn(hipError_t) -> *const c_char,
    pub hipGetDeviceCount: unsafe extern "C" fn(*mut c_int) -> hipError_t,
    pub hipSetDevice: unsafe extern "C" fn(c_int) -> hipError_t,
    pub hipDeviceGet: unsafe extern "C" fn(*mut hipDevice_t, c_int) -> hipError_t,
    pub hipDeviceGetName: unsafe extern "C" fn(*mut c_char, c_int, hipDevice_t) -> hipError_t,
    pub hipDeviceGetPCIBusId: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> hipError_t,
    pub hipPointerGetAttributes:
        unsafe extern "C" fn(*mut hipPointerAttribute_t, *const c_void) -> hipError_t,
    pub hipMalloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> hipError_t,
    pub hipFree: unsafe extern "C" fn(*mut c_void) -> hipError_t,
    pub hipHostMalloc: unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> hipError_t,
    pub hipHostFree: unsafe extern "C" fn(*mut c_void) -> hipError_t,
    pub hipMemGetAddressRange:
        unsafe extern "C" fn(*mut *mut c_void, *mut usize, *mut c_void) -> hipError_t,
    pub hipStreamCreateWithFlags: unsafe extern "C" fn(*mut hipStream_t, c_uint) -> hipError_t,
    pub hipStreamDestroy: unsafe extern "C" fn(hipStream_t) -> hipError_t,
    pub hipStreamSynchronize: unsafe extern "C" fn(hipStream_t) -> hipError_t,
    pub hipEventCreateWithFlags: unsafe extern "C" fn(*mut hipEvent_t, c_uint) -> hipError_t,
    pub hipEventDestroy: unsafe extern "C" fn(hipEvent_t) -> hipError_t,
    pub hipEventRecord: unsafe extern "C" fn(hipEvent_t, hipStream_t) -> hipError_t,
    pub hipEventQuery: unsafe extern "C" fn(hipEvent_t) -> hipError_t,
    pub hipEventSynchronize: unsafe extern "C" fn(hipEvent_t) -> hipError_t,
    pub hipEventElapsedTime: unsafe extern "C" fn(*mut f32, hipEvent_t, hipEvent_t) -> hipError_t,
    pub hipMemcpyAsync:
        unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, hipStream_t) -> hipError_t,
    pub hipMemcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> hipError_t,
    /// `(hipIpcMemHandle_t* handle, void* devPtr)`.
    pub hipIpcGetMemHandle: unsafe extern "C" fn(*mut hipIpcMemHandle_t, *mut c_void) -> hipError_t,
    /// `(void** devPtr, hipIpcMemHandle_t handle, unsigned int flags)`: the handle by value.
    pub hipIpcOpenMemHandle:
        unsafe extern "C" fn(*mut *mut c_void, hipIpcMemHandle_t, c_uint) -> hipError_t,
    /// `(void* devPtr)`.
    pub hipIpcCloseMemHandle: unsafe extern "C" fn(*mut c_void) -> hipError_t,
    /// ROCm 6.x: `(void* handle, hipDeviceptr_t dptr, size_t size, hipMemRangeHandleType, unsigned long long flags)`.
    pub hipMemGetHandleForAddressRange:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, u64) -> hipError_t>,
    /// INVARIANT: the library the pointers above point into; dropped last (after them).
    pub _lib: Library,
}

/// The HSA entry points for the dmabuf export (`libhsa-runtime64.so`), all present or none.
#[derive(Debug)]
pub struct HsaApi {
    pub hsa_init: unsafe extern "C" fn() -> hsa_status_t,
    pub hsa_shut_down: unsafe extern "C" fn() -> hsa_status_t,
    pub hsa_status_string: unsafe extern "C" fn(hsa_status_t, *mut *const c_char) -> hsa_status_t,
    /// `(const void* ptr, size_t size, int* dmabuf, uint64_t* offset)`.
    pub hsa_amd_portable_export_dmabuf:
        unsafe extern "C" fn(*const c_void, usize, *mut c_int, *mut u64) -> hsa_status_t,
    /// INVARIANT: as [`HipApi::_lib`].
    pub _lib: Library,
}

/// The file names tried for HIP, most specific last-resort first.
pub const HIP_LIB_NAMES: &[&str] = &["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"];
/// The file names tried for HSA.
pub const HSA_LIB_NAMES: &[&str] = &["libhsa-runtime64.so", "libhsa-runtime64.so.1"];

fn open_any(backend: Backend, names: &[&str]) -> Result<Library, GpuError> {
    let mut last = String::new();
    for name in names {
        // SAFETY: loading the vendor's runtime runs its initialisers, which is what using it
        // requires; the names are the vendor's sonames.
        match unsafe { Library::new(*name) } {
            Ok(lib) => return Ok(lib),
            Err(e) => last = e.to_string(),
        }
    }
    Err(GpuError::LibraryNotFound {
        backend,
        detail: format!("tried {names:?}: {last}"),
    })
}

macro_rules! required {
    ($lib:expr, $backend:expr, $name:ident) => {{
        // SAFETY: the field's type is the C prototype of `$name` from the headers named in
        // the module docs; the symbol stays valid while `_lib` (stored alongside) lives.
        match unsafe { $lib.get(concat!(stringify!($name), "\0").as_bytes()) } {
            Ok(sym) => *sym,
            Err(_) => {
                return Err(GpuError::MissingSymbol {
                    backend: $backend,
                    symbol: stringify!($name),
                });
            }
        }
    }};
}

macro_rules! optional {
    ($lib:expr, $name:ident) => {{
        // SAFETY: as in `required!`.
        unsafe { $lib.get(concat!(stringify!($name), "\0").as_bytes()) }
            .ok()
            .map(|sym| *sym)
    }};
}

impl HipApi {
    /// Opens `libamdhip64.so` and resolves the table.
    pub fn load() -> Result<HipApi, GpuError> {
        let lib = open_any(Backend::Hip, HIP_LIB_NAMES)?;
        let b = Backend::Hip;
        Ok(HipApi {
            hipInit: required!(lib, b, hipInit),
            hipRuntimeGetVersion: required!(lib, b, hipRuntimeGetVersion),
            hipGetErrorName: required!(lib, b, hipGetErrorName),
            hipGetErrorString: required!(lib, b, hipGetErrorString),
            hipGetDeviceCount: required!(lib, b, hipGetDeviceCount),
            hipSetDevice: required!(lib, b, hipSetDevice),
            hipDeviceGet: required!(lib, b, hipDeviceGet),
            hipDeviceGetName: required!(lib, b, hipDeviceGetName),
            hipDeviceGetPCIBusId: required!(lib, b, hipDeviceGetPCIBusId),
            hipPointerGetAttributes: required!(lib, b, hipPointerGetAttributes),
            hipMalloc: required!(lib, b, hipMalloc),
            hipFree: required!(lib, b, hipFree),
            hipHostMalloc: required!(lib, b, hipHostMalloc),
            hipHostFree: required!(lib, b, hipHostFree),
            hipMemGetAddressRange: required!(lib, b, hipMemGetAddressRange),
            hipStreamCreateWithFlags: required!(lib, b, hipStreamCreateWithFlags),
            hipStreamDestroy: required!(lib, b, hipStreamDestroy),
            hipStreamSynchronize: required!(lib, b, hipStreamSynchronize),
            hipEventCreateWithFlags: required!(lib, b, hipEventCreateWithFlags),
            hipEventDestroy: required!(lib, b, hipEventDestroy),
            hipEventRecord: required!(lib, b, hipEventRecord),
            hipEventQuery: required!(lib, b, hipEventQuery),
            hipEventSynchronize: required!(lib, b, hipEventSynchronize),
            hipEventElapsedTime: required!(lib, b, hipEventElapsedTime),
            hipMemcpyAsync: required!(lib, b, hipMemcpyAsync),
            hipMemcpy: required!(lib, b, hipMemcpy),
            hipIpcGetMemHandle: required!(lib, b, hipIpcGetMemHandle),
            hipIpcOpenMemHandle: required!(lib, b, hipIpcOpenMemHandle),
            hipIpcCloseMemHandle: required!(lib, b, hipIpcCloseMemHandle),
            hipMemGetHandleForAddressRange: optional!(lib, hipMemGetHandleForAddressRange),
            _lib: lib,
        })
    }
}

impl HsaApi {
    /// Opens `libhsa-runtime64.so`; `Ok(None)` when it lacks the dmabuf export (ROCm 5.2 does).
    pub fn load() -> Result<Option<HsaApi>, GpuError> {
        let lib = open_any(Backend::Hsa, HSA_LIB_NAMES)?;
        let b = Backend::Hsa;
        let Some(export) = optional!(lib, hsa_amd_portable_export_dmabuf) else {
            return Ok(None);
        };
        Ok(Some(HsaApi {
            hsa_init: required!(lib, b, hsa_init),
            hsa_shut_down: required!(lib, b, hsa_shut_down),
            hsa_status_string: required!(lib, b, hsa_status_string),
            hsa_amd_portable_export_dmabuf: export,
            _lib: lib,
        }))
    }
}
