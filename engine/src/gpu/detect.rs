//! Choosing a GPU runtime at run time: CUDA first, then HIP, else a typed "no GPU runtime".

use std::sync::{Arc, OnceLock};

use super::hip::HipRuntime;
use super::{GpuError, GpuRuntime};

/// Why no GPU runtime is usable: what each backend said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no GPU runtime: cuda: {cuda}; hip: {hip}")]
pub struct NoGpuRuntime {
    /// Why CUDA was not used (library missing, `CUDA_ERROR_NO_DEVICE`, zero devices).
    pub cuda: GpuError,
    /// Why HIP was not used (library missing, `hipErrorNoDevice`, zero devices).
    pub hip: GpuError,
}

fn with_devices<R: GpuRuntime + 'static>(
    r: Result<R, GpuError>,
    what: &'static str,
) -> Result<Arc<dyn GpuRuntime>, GpuError> {
    let rt = r?;
    if rt.device_count() == 0 {
        return Err(GpuError::Unsupported {
            backend: rt.backend(),
            what,
            why: "the runtime reports 0 devices".into(),
        });
    }
    Ok(Arc::new(rt))
}

#[cfg(feature = "cuda")]
fn load_cuda() -> Result<Arc<dyn GpuRuntime>, GpuError> {
    with_devices(super::cuda::CudaRuntime::load(), "cuda devices")
}

/// Built without the `cuda` feature: CUDA is reported unsupported, HIP is still tried.
#[cfg(not(feature = "cuda"))]
fn load_cuda() -> Result<Arc<dyn GpuRuntime>, GpuError> {
    Err(GpuError::Unsupported {
        backend: super::Backend::Cuda,
        what: "cuda devices",
        why: "built without the engine's `cuda` feature".into(),
    })
}

/// Loads the first runtime that has a device: CUDA (`libcuda.so`), then HIP (`libamdhip64.so`).
///
/// Not cached: each call loads afresh (the libraries themselves stay loaded by the process).
#[allow(clippy::result_large_err)] // once per process, on a cold path; the detail is the point
pub fn try_detect() -> Result<Arc<dyn GpuRuntime>, NoGpuRuntime> {
    let cuda = match load_cuda() {
        Ok(rt) => return Ok(rt),
        Err(e) => e,
    };
    let hip = match with_devices(HipRuntime::load(), "hip devices") {
        Ok(rt) => return Ok(rt),
        Err(e) => e,
    };
    Err(NoGpuRuntime { cuda, hip })
}

/// The process-wide GPU runtime, detected once; `None` on CPU-only hosts.
///
/// The outcome is logged once, on the first call, as a `tracing` event (INFO when a runtime is
/// found, WARN when none is).
#[allow(clippy::result_large_err)] // see `try_detect`
pub fn detect() -> Option<Arc<dyn GpuRuntime>> {
    static RUNTIME: OnceLock<Result<Arc<dyn GpuRuntime>, NoGpuRuntime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let r = try_detect();
            match &r {
                Ok(rt) => tracing::info!(
                    "gpu: using {} with {} device(s)",
                    rt.name(),
                    rt.device_count()
                ),
                Err(e) => {
                    tracing::warn!("gpu: {e}; GPU memory is unavailable, host memory only")
                }
            }
            r
        })
        .as_ref()
        .ok()
        .cloned()
}

/// The reason [`detect`] found nothing (`None` when it found a runtime).
pub fn detect_error() -> Option<NoGpuRuntime> {
    if detect().is_some() {
        return None;
    }
    try_detect().err()
}

// The build without `cuda` is checked by `cargo check -p engine --no-default-features`; its
// tests cannot run inside this workspace, where the gateway dev-dependency turns `cuda` on.
#[cfg(all(test, feature = "cuda"))]
mod tests {
    /// With `cuda`, detection tries the real library: whatever it says, it is not the
    /// missing-feature message.
    #[test]
    fn cuda_with_the_feature_is_loaded() {
        if let Err(e) = super::load_cuda() {
            assert!(!e.to_string().contains("`cuda` feature"), "{e}");
        }
    }
}
