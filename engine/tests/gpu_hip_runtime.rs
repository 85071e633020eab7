//! Loads the real HIP runtime (Debian's `libamdhip64-5`, ROCm 5.2) on a machine without an AMD
//! GPU: every required symbol resolves, the version reads, optional symbols newer than the
//! runtime are reported, and the "no AMD device" path yields a typed error.
//!
//! `#[ignore]`d, so the runner reports it as ignored where the library may be missing; run with
//! `--ignored`. `benches/scripts/test.sh` runs it when `HIPOBJ_REQUIRE_HIP=1`, which `.ci/run`
//! sets after `apt-get install libamdhip64-5`; a missing library then fails it.

use engine::gpu::hip::{self, HipRuntime, decode::HipVersion};
use engine::gpu::{Backend, GpuError};

fn has_amd_gpu() -> bool {
    std::path::Path::new("/dev/kfd").exists()
}

#[test]
#[ignore = "needs libamdhip64 (apt-get install libamdhip64-5); test.sh runs it with HIPOBJ_REQUIRE_HIP=1"]
fn real_hip_runtime_loads_and_reports_no_device() {
    let probe = hip::probe().unwrap_or_else(|e| {
        panic!("loading libamdhip64 failed (apt-get install libamdhip64-5): {e}")
    });
    eprintln!("{probe:#?}");

    // Version: HIP_VERSION encoding, ROCm 5 or newer.
    let raw = probe.version.clone().expect("hipRuntimeGetVersion");
    let v = HipVersion::from_raw(raw).expect("non-negative version");
    assert!(v.major >= 5, "HIP version {v} ({raw})");

    // dmabuf export symbols: absent from ROCm 5.2, present in 6.x; either way reported.
    if v.major == 5 && v.minor <= 2 {
        assert!(
            probe
                .missing_optional
                .contains(&"hipMemGetHandleForAddressRange"),
            "{probe:?}"
        );
        assert!(
            probe
                .missing_optional
                .contains(&"hsa_amd_portable_export_dmabuf"),
            "{probe:?}"
        );
        assert_eq!(probe.hsa_dmabuf, Ok(false));
    }

    if has_amd_gpu() {
        return;
    }
    // No AMD GPU: hipGetDeviceCount fails with hipErrorNoDevice (100), named by the runtime.
    // (hipInit fails too: ROCm 5.2 says hipErrorInvalidDevice (101) there.)
    let e = probe.device_count.as_ref().expect_err("no AMD device here");
    let GpuError::Call {
        backend,
        call,
        code,
        name,
        ..
    } = e
    else {
        panic!("untyped error {e:?}")
    };
    assert_eq!(
        (*backend, *call, *code, name.as_str()),
        (Backend::Hip, "hipGetDeviceCount", 100, "hipErrorNoDevice")
    );
    assert!(probe.init.is_err() || probe.device_count.is_err());
    let err = HipRuntime::load().expect_err("no AMD device here");
    assert_eq!(err.backend(), Some(Backend::Hip));
    assert_eq!(err.code(), Some(100), "{err}");
}
