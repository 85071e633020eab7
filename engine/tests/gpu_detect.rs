//! On a CPU-only host, GPU detection answers "no GPU runtime" with a typed reason per backend
//! and does not panic; with a GPU it finds a runtime with devices.

use engine::gpu::{self, GpuError};

fn has_gpu_device_nodes() -> bool {
    ["/dev/nvidiactl", "/dev/kfd"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
}

#[test]
fn cpu_only_host_reports_no_gpu_runtime() {
    if has_gpu_device_nodes() {
        let rt = gpu::detect().expect("a GPU host must detect a runtime");
        assert!(rt.device_count() > 0);
        return;
    }
    assert!(gpu::detect().is_none());
    // Detection is cached: the second call gives the same answer without reloading.
    assert!(gpu::detect().is_none());
    let err = gpu::try_detect().expect_err("no GPU on this host");
    // CUDA: no driver library at all, or a driver without a device.
    assert!(
        matches!(
            err.cuda,
            GpuError::LibraryNotFound { .. } | GpuError::Call { .. } | GpuError::Unsupported { .. }
        ),
        "{:?}",
        err.cuda
    );
    assert!(
        matches!(
            err.hip,
            GpuError::LibraryNotFound { .. } | GpuError::Call { .. } | GpuError::Unsupported { .. }
        ),
        "{:?}",
        err.hip
    );
    let msg = err.to_string();
    assert!(msg.starts_with("no GPU runtime: cuda: "), "{msg}");
    assert!(msg.contains("; hip: "), "{msg}");
    assert_eq!(gpu::detect_error().map(|e| e.cuda), Some(err.cuda));
}
