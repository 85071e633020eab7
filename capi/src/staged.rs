//! Device memory registered through a host bounce buffer (the host-staged path).
//!
//! `hipObjBufRegister` on a CUDA/HIP device pointer (recognised with the runtime's
//! `pointer_kind`, so only when `gpuDevice >= 0` found a runtime) allocates a pinned host buffer
//! of the same size and registers *that* with the engine: the engine's HTTP data path reads and
//! writes memory with the CPU and must never be handed a VRAM address. Byte `i` of the device
//! range corresponds to byte `i` of the bounce buffer, so a caller pointer anywhere inside the
//! device range maps to the same offset in both.
//!
//! `hipObjGet` lands the bytes in the bounce range, then [`Staged::to_device`] copies them to
//! VRAM (async copy on this registration's stream, then a stream synchronize) before the call
//! returns; `hipObjPut` first copies VRAM → bounce ([`Staged::from_device`]). This is staging,
//! not dmabuf/GPUDirect: every byte crosses host memory once more.
#![allow(unsafe_code)]

use std::sync::{Arc, Mutex, PoisonError};

use engine::gpu::{DevicePtr, GpuError, GpuRuntime, GpuStream, PinnedBuffer};

use crate::error::{CResult, Fail, OpError};

/// A device range and the pinned bounce buffer standing in for it in the engine.
#[derive(Debug)]
pub struct Staged {
    device: DevicePtr,
    len: usize,
    /// Start of `bounce`, taken once at construction (the engine writes through it).
    bounce_ptr: usize,
    /// INVARIANT: freed only when this value drops, which the library lets happen only after the
    /// engine deregistered `bounce_ptr` (or never, when that timed out).
    bounce: PinnedBuffer,
    /// One stream per registration; the mutex serialises copy + synchronize pairs.
    stream: Mutex<GpuStream>,
}

/// A GPU runtime failure as a C error: `InternalError` with the runtime's code in `hipError`.
pub fn gpu_fail(what: &str, e: &GpuError) -> Fail {
    let code = match e {
        GpuError::Call { code, .. } => *code,
        _ => 0,
    };
    Fail {
        op: OpError::InternalError,
        gpu: code,
        message: format!("{what}: {e}"),
    }
}

impl Staged {
    /// Allocates the bounce buffer (`len` pinned bytes) and a stream on the device's ordinal.
    pub fn new(rt: &Arc<dyn GpuRuntime>, device: DevicePtr, len: usize) -> CResult<Staged> {
        let mut bounce = PinnedBuffer::new(rt, len)
            .map_err(|e| gpu_fail("allocating the pinned bounce buffer", &e))?;
        let stream = GpuStream::new(rt, device.ordinal)
            .map_err(|e| gpu_fail("creating the staging stream", &e))?;
        Ok(Staged {
            device,
            len,
            bounce_ptr: bounce.as_mut_ptr() as usize,
            bounce,
            stream: Mutex::new(stream),
        })
    }

    /// Start of the bounce buffer, to register with the engine.
    #[must_use]
    pub fn bounce_ptr(&self) -> *mut u8 {
        self.bounce_ptr as *mut u8
    }

    /// Device address of the first byte.
    #[must_use]
    pub fn device(&self) -> DevicePtr {
        self.device
    }

    fn span(&self, off: u64, len: u64) -> CResult<(DevicePtr, usize, usize)> {
        let bad = || {
            Fail::new(
                OpError::SizeTooLarge,
                format!("staged range {off}+{len} outside {} bytes", self.len),
            )
        };
        let o = usize::try_from(off).map_err(|_| bad())?;
        let n = usize::try_from(len).map_err(|_| bad())?;
        if o.checked_add(n).is_none_or(|end| end > self.len) {
            return Err(bad());
        }
        let dev = self.device.offset(off).ok_or_else(bad)?;
        Ok((dev, o, n))
    }

    /// Copies bounce `[off, off+len)` to the same range of device memory and waits for it.
    pub fn to_device(&self, off: u64, len: u64) -> CResult<()> {
        let (dev, o, n) = self.span(off, len)?;
        let stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: `o + n <= len` (span), inside the live pinned allocation (INVARIANT on
        // `bounce`); the engine finished writing these bytes (its completion was reaped) and the
        // caller does not start another operation on them until this call returns, which is
        // after the synchronize below. `dev..dev+n` lies in the device range that
        // `hipObjBufRegister` checked, valid until deregistration per the header's contract.
        unsafe { stream.copy_h2d_async(dev, self.bounce.as_ptr().add(o), n) }
            .map_err(|e| gpu_fail("copying bounce buffer → device", &e))?;
        stream
            .synchronize()
            .map_err(|e| gpu_fail("waiting for the copy to the device", &e))
    }

    /// Copies device `[off, off+len)` into the same bounce range and waits for it.
    pub fn from_device(&self, off: u64, len: u64) -> CResult<()> {
        let (dev, o, n) = self.span(off, len)?;
        let stream = self.stream.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: as in `to_device`; the engine is not using these bounce bytes (the PUT that
        // reads them is submitted only after this returns), and the stream is synchronised
        // before anyone reads them.
        unsafe { stream.copy_d2h_async(self.bounce_ptr().add(o), dev, n) }
            .map_err(|e| gpu_fail("copying device → bounce buffer", &e))?;
        stream
            .synchronize()
            .map_err(|e| gpu_fail("waiting for the copy from the device", &e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::gpu::Backend;

    #[test]
    fn gpu_failures_carry_the_runtime_code() {
        let e = GpuError::Call {
            backend: Backend::Cuda,
            call: "cuMemcpyHtoDAsync_v2",
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            message: "an illegal memory access was encountered".into(),
        };
        let f = gpu_fail("copying bounce buffer → device", &e);
        assert_eq!((f.op, f.gpu), (OpError::InternalError, 700));
        assert!(
            f.message
                .starts_with("copying bounce buffer → device: cuda cuMemcpyHtoDAsync_v2"),
            "{}",
            f.message
        );
        let g = gpu_fail("x", &GpuError::InvalidArgument("zero".into()));
        assert_eq!((g.op, g.gpu), (OpError::InternalError, 0));
    }
}
