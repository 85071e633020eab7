//! Reading a DLPack capsule (`obj.__dlpack__()`): the FFI view of `DLManagedTensor`
//! (DLPack 0.8, the "dltensor" capsule every producer still emits by default).
//!
//! The capsule is *not* consumed: its producer's destructor frees the tensor when the capsule
//! object dies, and the caller keeps the capsule and the exporting object alive for as long as
//! it uses the memory.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_void};

use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    #[allow(dead_code)] // laid out as DLPack defines it; only the size matters here
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `DLManagedTensor` (only its first member is read).
#[allow(dead_code)] // the producer's members, laid out but never touched
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

/// `kDLCPU`.
pub const DEVICE_CPU: i32 = 1;
/// `kDLCUDA`.
pub const DEVICE_CUDA: i32 = 2;
/// `kDLCUDAHost` (pinned host memory).
pub const DEVICE_CUDA_HOST: i32 = 3;
/// `kDLCUDAManaged`.
pub const DEVICE_CUDA_MANAGED: i32 = 13;

/// Largest rank accepted.
const MAX_NDIM: i32 = 64;

/// What a capsule describes: a contiguous span of `len` bytes at `addr` on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First byte (`data + byte_offset`).
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// `DLDeviceType`.
    pub device_type: i32,
    /// Device ordinal.
    pub device_id: i32,
}

/// Reads the tensor a "dltensor" capsule holds; refuses used capsules, non-contiguous
/// tensors and sub-byte element types.
pub fn describe(capsule: &Bound<'_, PyCapsule>) -> Result<Span, String> {
    let name: Option<&CStr> = capsule
        .name()
        .map_err(|e| format!("DLPack capsule: {e}"))?
        // SAFETY: the name pointer is owned by the capsule, which `capsule` keeps alive for
        // the rest of this function.
        .map(|n| unsafe { n.as_cstr() });
    if name != Some(c"dltensor") {
        return Err(format!(
            "__dlpack__ returned a capsule named {name:?}, not \"dltensor\" (already consumed?)"
        ));
    }
    let ptr = capsule
        .pointer_checked(Some(c"dltensor"))
        .map_err(|e| format!("DLPack capsule: {e}"))?
        .as_ptr()
        .cast::<DlManagedTensor>();
    // SAFETY: a "dltensor" capsule holds a valid `DLManagedTensor*` (DLPack's contract) that
    // stays valid while the capsule is alive and unconsumed; we only read it.
    let t = unsafe { &(*ptr).dl_tensor };
    if !(0..=MAX_NDIM).contains(&t.ndim) {
        return Err(format!("DLPack tensor of rank {}", t.ndim));
    }
    let ndim = t.ndim as usize;
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else if t.shape.is_null() {
        return Err("DLPack tensor without a shape".into());
    } else {
        // SAFETY: DLPack: `shape` points to `ndim` int64 values owned by the tensor.
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let strides: Option<&[i64]> = if ndim == 0 || t.strides.is_null() {
        None
    } else {
        // SAFETY: DLPack: non-null `strides` points to `ndim` int64 values.
        Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) })
    };
    let bits = u64::from(t.dtype.bits) * u64::from(t.dtype.lanes);
    if bits == 0 || bits % 8 != 0 {
        return Err(format!(
            "DLPack element type of {} bits x {} lanes is not whole bytes",
            t.dtype.bits, t.dtype.lanes
        ));
    }
    let mut elements: u64 = 1;
    for &d in shape {
        let d = u64::try_from(d).map_err(|_| format!("DLPack shape {shape:?}"))?;
        elements = elements
            .checked_mul(d)
            .ok_or_else(|| format!("DLPack shape {shape:?} overflows"))?;
    }
    if let Some(strides) = strides.filter(|_| elements > 0) {
        let mut expect: i64 = 1;
        for (&d, &s) in shape.iter().zip(strides).rev() {
            if d != 1 && s != expect {
                return Err(format!(
                    "the tensor is not contiguous (shape {shape:?}, strides {strides:?}): pass a contiguous one"
                ));
            }
            expect = expect.saturating_mul(d);
        }
    }
    let len = elements
        .checked_mul(bits / 8)
        .ok_or_else(|| "DLPack tensor size overflows".to_owned())?;
    let addr = (t.data as u64)
        .checked_add(t.byte_offset)
        .ok_or_else(|| "DLPack data pointer overflows".to_owned())?;
    Ok(Span {
        addr,
        len,
        device_type: t.device.device_type,
        device_id: t.device.device_id,
    })
}

const _: () = assert!(std::mem::size_of::<DlTensor>() == 48);
const _: () = assert!(std::mem::size_of::<DlManagedTensor>() == 64);
