//! The GPUDirect tier end to end against our gateway (in process, soft RDMA target), on hosts
//! without a GPU: the test GPU runtime (`common::test_gpu`, memfd-backed) whose "VRAM" is a
//! sealed memfd mapped into this process (`HostDmabuf`) and whose dmabuf export hands back a udmabuf of it (`*_udmabuf` tests,
//! which need `/dev/udmabuf` and are ignored elsewhere) or the memfd itself (mapped by the soft
//! device exactly as a dmabuf; runs everywhere).
//!
//! - `rc-persistent` GETs and RangeGets into a direct registration land in the fake VRAM through
//!   the dmabuf window, byte exact, with no copy into the device (`gpu_staging` unchanged) and
//!   no bounce bytes touched; PUT from it stages (its CRC64NVME is computed on the host) and
//!   stores the device's bytes;
//! - `Require` fails with a typed error naming why (HTTP fabric, the runtime cannot export with
//!   the driver's error, the device refused the dmabuf with the errno); `Auto` stages, counted;
//!   `Off` always stages.
#![allow(unsafe_code)]

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::sync::Arc;

use common::test_gpu::{Export, TestGpu};
use engine::gpu::{DevicePtr, GpuDirect, GpuDirectError, GpuError, GpuRuntime, GpuTier};
use engine::soft::udmabuf::ExportKind;
use engine::{Dialect, EngineError, Fabric};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, DataPath};

/// The gateway with `bkt/obj.bin` holding `data`.
fn gateway_with(data: &[u8]) -> (tempfile::TempDir, hipobj_gateway::RunningGateway) {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let a = gw.local_addr();
    assert_eq!(raw::call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    assert_eq!(
        raw::call(a, "PUT", "/bkt/obj.bin", "", &[], data).status(),
        200
    );
    (dir, gw)
}

const OBJ: usize = 3 << 20;
/// The registration starts this far into the allocation: not page aligned, so the dmabuf
/// offset and the window arithmetic matter.
const SKEW: u64 = 4096 + 333;

fn direct_get_and_put_over_soft(kind: ExportKind) {
    let data = rig::pattern(OBJ, 21);
    let (_dir, gw) = gateway_with(&data);
    let gpu = TestGpu::memfd(16 << 20, Export::Of(kind));
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .gpu(gpu.as_dyn())
        .gpu_direct(GpuDirect::Require)
        .build()
        .unwrap();
    let alloc = gpu.alloc_device(0, 8 << 20).unwrap();
    let dev = alloc.offset(SKEW).unwrap();
    let reg_len = OBJ + (256 << 10);
    // SAFETY: the fake VRAM lives as long as `gpu`, which outlives the engine.
    let buf = unsafe { engine.register_device(dev, reg_len) }.unwrap();
    assert_eq!(engine.gpu_tier(buf).unwrap(), Some(GpuTier::Direct));
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let mut q = engine.queue(8).unwrap();
    let staged0 = engine.gpu_staging().unwrap();

    // Whole-object GET into the registration's start.
    let c = rig::run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, 0, reg_len as u64))
            .user_data(1)
            .build(),
    );
    assert!(c.is_ok(), "GET failed: {:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    assert_eq!(c.bytes(), OBJ as u64);
    assert!(
        gpu.device_bytes(dev, OBJ) == data,
        "GET bytes in VRAM differ"
    );
    assert!(!c.verified(), "a direct GET cannot be checked on the host");

    // A RangeGet into an unaligned spot further in.
    let (off, len, at) = (1_000_003u64, 200_001u64, OBJ as u64 + 4099);
    let slot = BufSlice::new(buf, at, len);
    let c = rig::run_one(&mut q, RangeGet::new(obj, off, slot).user_data(2).build());
    assert!(c.is_ok(), "RangeGet failed: {:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    let got = gpu.device_bytes(dev.offset(at).unwrap(), len as usize);
    assert!(
        got == data[off as usize..(off + len) as usize],
        "RangeGet bytes differ"
    );

    let staged = engine.gpu_staging().unwrap();
    assert_eq!(
        staged.ranges_to_device, staged0.ranges_to_device,
        "a direct GET was staged"
    );
    assert_eq!(gpu.h2d_async(), 0, "a copy into VRAM ran");
    let st = engine.gpu_direct_stats();
    assert_eq!(
        (
            st.direct_registrations,
            st.staged_registrations,
            st.fallbacks
        ),
        (1, 0, 0)
    );
    assert_eq!((st.direct_ops, st.direct_bytes), (2, OBJ as u64 + len));

    // PUT from the registration: the device's bytes (changed after the GET) are stored.
    let new = rig::pattern(OBJ / 2, 77);
    gpu.fill(dev, &new);
    let put = engine.object("bkt", "back.bin").unwrap();
    let c = rig::run_one(
        &mut q,
        Put::new(put, BufSlice::new(buf, 0, new.len() as u64))
            .user_data(3)
            .build(),
    );
    assert!(c.is_ok(), "PUT failed: {:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    let stored = raw::call(gw.local_addr(), "GET", "/bkt/back.bin", "", &[], b"");
    assert_eq!(stored.status(), 200);
    assert!(
        stored.body == new,
        "stored object differs from the device bytes"
    );
    assert_eq!(
        engine.gpu_staging().unwrap().ranges_from_device,
        1,
        "PUTs stage"
    );
    assert!(gpu.exports() >= 1);
    drop(q);
    drop(engine);
    gw.shutdown();
}

#[test]
fn direct_get_and_put_over_soft_with_a_memfd_export() {
    direct_get_and_put_over_soft(ExportKind::Memfd);
}

#[test]
#[ignore = "needs /dev/udmabuf (CONFIG_UDMABUF); run with --ignored where it exists"]
fn direct_get_and_put_over_soft_with_a_udmabuf() {
    direct_get_and_put_over_soft(ExportKind::Udmabuf);
}

/// Builds an engine for `gw` with `mode` and `export`, registers 1 MiB of device memory and
/// returns the result (and the engine, for the counters).
fn register(
    gw: &hipobj_gateway::RunningGateway,
    fabric: Fabric,
    mode: GpuDirect,
    export: Export,
) -> (
    Result<(ring_api::BufHandle, GpuTier), EngineError>,
    engine::Engine,
    Arc<TestGpu>,
) {
    let gpu = TestGpu::memfd(4 << 20, export);
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(fabric)
        .dialect(Dialect::RcPersistent)
        .gpu(gpu.as_dyn())
        .gpu_direct(mode)
        .build()
        .unwrap();
    let dev = gpu.alloc_device(0, 1 << 20).unwrap();
    // SAFETY: the fake VRAM outlives the engine (returned together, engine dropped first).
    let r = unsafe { engine.register_device(dev, 1 << 20) }
        .map(|h| (h, engine.gpu_tier(h).unwrap().unwrap()));
    (r, engine, gpu)
}

#[test]
fn require_says_why_and_auto_falls_back_to_staging() {
    let data = rig::pattern(64 << 10, 5);
    let (_dir, gw) = gateway_with(&data);
    let memfd = Export::Of(ExportKind::Memfd);

    // No RDMA fabric.
    let (r, _e, _g) = register(&gw, Fabric::Http, GpuDirect::Require, memfd);
    match r {
        Err(EngineError::GpuDirect(GpuDirectError::NoRdmaFabric(why))) => {
            assert!(why.contains("HTTP"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // The runtime cannot export: the driver's error is kept.
    let (r, _e, _g) = register(&gw, Fabric::Soft, GpuDirect::Require, Export::Unsupported);
    match r {
        Err(EngineError::GpuDirect(GpuDirectError::Export(GpuError::Unsupported {
            why, ..
        }))) => {
            assert!(why.contains("cuMemGetHandleForAddressRange"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // The device refuses the dmabuf: the errno is kept.
    let (r, e, _g) = register(&gw, Fabric::Soft, GpuDirect::Require, Export::Unmappable);
    let err = r.unwrap_err();
    match &err {
        EngineError::GpuDirect(g @ GpuDirectError::Refused { device, .. }) => {
            assert_eq!(g.errno(), Some(libc::ESPIPE), "{err}");
            assert!(device.starts_with("soft:"), "{device}");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("refused the dmabuf"), "{err}");
    // A failed Require leaves nothing registered or counted as registered.
    assert_eq!(e.gpu_direct_stats().direct_registrations, 0);

    // Auto: each of those stages, counted, and GETs still land in VRAM (through the stager).
    for (fabric, export) in [
        (Fabric::Http, memfd),
        (Fabric::Soft, Export::Unsupported),
        (Fabric::Soft, Export::Unmappable),
    ] {
        let (r, e, g) = register(&gw, fabric, GpuDirect::Auto, export);
        assert_eq!(r.unwrap().1, GpuTier::Staged, "{fabric:?} {export:?}");
        let st = e.gpu_direct_stats();
        assert_eq!(
            (st.staged_registrations, st.fallbacks),
            (1, 1),
            "{fabric:?} {export:?}"
        );
        drop(e);
        drop(g);
    }
    // Off: staged without trying (no export asked for).
    let (r, e, g) = register(&gw, Fabric::Soft, GpuDirect::Off, memfd);
    assert_eq!(r.unwrap().1, GpuTier::Staged);
    assert_eq!(e.gpu_direct_stats().fallbacks, 0);
    assert_eq!(g.exports(), 0);
    drop(e);
    gw.shutdown();
}

#[test]
fn a_staged_fallback_still_lands_get_bytes_in_vram() {
    let data = rig::pattern(256 << 10, 8);
    let (_dir, gw) = gateway_with(&data);
    let (r, engine, gpu) = register(&gw, Fabric::Soft, GpuDirect::Auto, Export::Unmappable);
    let (buf, tier) = r.unwrap();
    assert_eq!(tier, GpuTier::Staged);
    // `register` registered the first MiB of the allocation.
    let dev = DevicePtr {
        addr: gpu.base(),
        ordinal: 0,
    };
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let mut q = engine.queue(4).unwrap();
    let c = rig::run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, 0, 1 << 20)).build(),
    );
    assert!(c.is_ok(), "{:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    assert!(gpu.device_bytes(dev, data.len()) == data);
    assert_eq!(engine.gpu_staging().unwrap().ranges_to_device, 1);
    assert_eq!(engine.gpu_direct_stats().direct_ops, 0);
    drop(q);
    drop(engine);
    gw.shutdown();
}
