//! The GPUDirect tier on real hardware. Both tests are `#[ignore]`d: the first needs a GPU
//! runtime with a device, the second also an RDMA NIC whose provider accepts dmabuf memory
//! regions (`ibv_reg_dmabuf_mr`: mlx5 and the like; rxe refuses them). Neither has run yet:
//! the development machine has neither, and the GPU lane's H200 has no RDMA device.
//!
//! - `a_real_vram_dmabuf_is_refused_by_the_soft_device`: a CUDA/HIP dmabuf of VRAM cannot be
//!   mapped, so the soft device refuses it: `Require` fails with `GpuDirectError::Refused` and
//!   its errno (or `Export` with the driver's error where the runtime cannot export), `Auto`
//!   stages. Run: `cargo test -p engine --test gpu_direct_device -- --ignored a_real_vram`.
//! - `direct_get_over_a_verbs_nic`: the engine's verbs path: `ibv_reg_dmabuf_mr` of the op's
//!   window, the gateway's RDMA WRITEs into VRAM, no staging copy. Run on a host with a GPU and
//!   such a NIC: `ENGINE_TEST_NIC=mlx5_0 cargo test -p engine --test gpu_direct_device --
//!   --ignored direct_get_over_a_verbs_nic`.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::sync::Arc;

use engine::gpu::{self, DeviceBuffer, GpuDirect, GpuDirectError, GpuRuntime, GpuTier};
use engine::{Dialect, EngineError, Fabric};
use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use ring_api::opcode::Get;
use ring_api::{BufSlice, DataPath};

fn runtime() -> Arc<dyn GpuRuntime> {
    gpu::try_detect().unwrap_or_else(|e| panic!("this test needs a GPU: {e}"))
}

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device)"]
fn a_real_vram_dmabuf_is_refused_by_the_soft_device() {
    let rt = runtime();
    let dev = DeviceBuffer::new(&rt, 0, 4 << 20).unwrap();
    // No connection is made: registration only.
    let build = |mode| {
        rig::engine_builder("127.0.0.1:9".parse().unwrap())
            .fabric(Fabric::Soft)
            .dialect(Dialect::RcPersistent)
            .gpu(Arc::clone(&rt))
            .gpu_direct(mode)
            .build()
            .unwrap()
    };
    let engine = build(GpuDirect::Require);
    // SAFETY: `dev` outlives the engine (dropped after it at the end of the test).
    let err = unsafe { engine.register_device(dev.ptr(), dev.len()) }.unwrap_err();
    eprintln!("Require on the soft device: {err}");
    match &err {
        EngineError::GpuDirect(GpuDirectError::Refused { errno, .. }) => {
            assert!(errno.is_some(), "{err}");
        }
        EngineError::GpuDirect(GpuDirectError::Export(_)) => {}
        other => panic!("{other:?}"),
    }
    drop(engine);
    let engine = build(GpuDirect::Auto);
    // SAFETY: as above.
    let h = unsafe { engine.register_device(dev.ptr(), dev.len()) }.unwrap();
    assert_eq!(engine.gpu_tier(h).unwrap(), Some(GpuTier::Staged));
    assert_eq!(engine.gpu_direct_stats().fallbacks, 1);
}

#[test]
#[ignore = "needs a GPU and an RDMA NIC that accepts dmabuf MRs (ENGINE_TEST_NIC)"]
fn direct_get_over_a_verbs_nic() {
    let rt = runtime();
    let nic = std::env::var("ENGINE_TEST_NIC").unwrap_or_else(|_| "mlx5_0".to_owned());
    let dir = tempfile::tempdir().unwrap();
    let target = RcTarget::start_verbs(Some(&nic), RcLimits::default()).unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(raw::ACCESS, raw::SECRET)
        .rdma_target(target)
        .start()
        .unwrap();
    let a = gw.local_addr();
    let data = rig::pattern(8 << 20, 3);
    assert_eq!(raw::call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    assert_eq!(raw::call(a, "PUT", "/bkt/o", "", &[], &data).status(), 200);
    let engine = rig::engine_builder(a)
        .fabric(Fabric::Verbs)
        .verbs_device(&nic)
        .dialect(Dialect::RcPersistent)
        .gpu(Arc::clone(&rt))
        .gpu_direct(GpuDirect::Require)
        .build()
        .unwrap();
    let dev = DeviceBuffer::new(&rt, 0, data.len() + 4096).unwrap();
    // A sub-allocation starting inside a page: the dmabuf offset matters.
    let ptr = dev.ptr_at(100, data.len()).unwrap();
    // SAFETY: `dev` outlives the engine.
    let h = unsafe { engine.register_device(ptr, data.len()) }.unwrap();
    assert_eq!(engine.gpu_tier(h).unwrap(), Some(GpuTier::Direct));
    let obj = engine.object("bkt", "o").unwrap();
    let mut q = engine.queue(4).unwrap();
    let c = rig::run_one(
        &mut q,
        Get::new(obj, BufSlice::new(h, 0, data.len() as u64)).build(),
    );
    assert!(c.is_ok(), "{:?}", c.error_code());
    assert_eq!(c.path(), Some(DataPath::RdmaVerbs));
    let mut back = vec![0u8; data.len()];
    dev.read(100, &mut back).unwrap();
    assert!(back == data, "VRAM differs from the object");
    assert_eq!(engine.gpu_staging().unwrap().ranges_to_device, 0);
    assert_eq!(engine.gpu_direct_stats().direct_ops, 1);
    drop(q);
    drop(engine);
    gw.shutdown();
}
