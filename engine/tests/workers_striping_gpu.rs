//! Striping on device memory (engine/src/stripe.rs, engine/src/stripe/put.rs): a GPU on the
//! two-NIC fixture's PCIe switch (the heap-backed `common::test_gpu::TestGpu` at that PCI address) has its
//! registrations bound to both NICs; a 64 MiB RangeGet into it and a 64 MiB PUT from it are
//! striped over both NICs' workers through the bounce pool (each chunk or part stages its own
//! range), byte-exact, over the soft RDMA fabric against the gateway in process.

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
mod striping;

use std::time::Duration;

use common::test_gpu::{Backing, Copies, Export, TestGpu, TestGpuConfig};
use engine::gpu::GpuRuntime;
use engine::{Dialect, Fabric};
use ring_api::opcode::{Put, RangeGet};
use ring_api::{BufSlice, DataPath};
use striping::{GPU_PCI, exactly, on_two_nics, two_nic_tree_with_gpu};

const MIB: u64 = 1 << 20;

fn counters(engine: &engine::Engine) -> Vec<(u64, u64)> {
    engine.workers().iter().map(|w| (w.ops, w.bytes)).collect()
}

fn delta(engine: &engine::Engine, before: &[(u64, u64)]) -> Vec<(u64, u64)> {
    counters(engine)
        .iter()
        .zip(before)
        .map(|(a, b)| (a.0 - b.0, a.1 - b.1))
        .collect()
}

#[test]
fn device_memory_on_two_nics_is_striped_both_ways() {
    let data = rig::pattern((64 * MIB) as usize, 21);
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let a = gw.local_addr();
    assert_eq!(raw::call(a, "PUT", "/stripe", "", &[], b"").status(), 200);
    assert_eq!(
        raw::call(a, "PUT", "/stripe/obj.bin", "", &[], &data).status(),
        200
    );
    let tree = two_nic_tree_with_gpu();
    let gpu = TestGpu::new(TestGpuConfig {
        backing: Backing::Heap,
        copies: Copies::Engine {
            per_copy: Duration::ZERO,
        },
        export: Export::Refused,
        pci: vec![GPU_PCI.parse().unwrap()],
        name: "host-backed test double on the fixture's switch",
    });
    let engine = on_two_nics(rig::engine_builder(a), &tree)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .gpu(gpu.as_dyn())
        .build()
        .unwrap();
    let len = (64 * MIB) as usize;
    let dev = gpu.alloc_device(0, len).unwrap();
    // SAFETY: `dev` lives until the end of the test, after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, len) }.unwrap();
    let nics = engine
        .buffer_nics(buf)
        .expect("bound by the GPU's PCI address");
    assert_eq!(nics.nics, ["mlx5_0", "mlx5_1"], "{nics:?}");
    let obj = engine.object("stripe", "obj.bin").unwrap();
    let mut q = engine.queue(8).unwrap();

    // GET: 16 chunks of 4 MiB, each staged into VRAM by the worker that ran it.
    let before = counters(&engine);
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 64 * MIB))
            .user_data(1)
            .build(),
    )
    .unwrap();
    let c = exactly(&mut q, 1, Duration::from_millis(100))[0];
    assert!(c.is_ok() && c.bytes() == 64 * MIB, "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    let d = delta(&engine, &before);
    assert_eq!(d, [(8, 32 * MIB), (8, 32 * MIB)], "per worker (ops, bytes)");
    assert!(gpu.device_bytes(dev, len) == data, "bytes in VRAM differ");

    // PUT of other bytes from VRAM: 13 parts of a multipart upload, on both NICs.
    let fresh = rig::pattern(len, 22);
    // SAFETY: `dev` is `len` bytes of (host-backed) device memory; no op uses it now.
    unsafe { gpu.memcpy_h2d(dev, fresh.as_ptr(), len) }.unwrap();
    let put = engine.object("stripe", "from-gpu.bin").unwrap();
    let before = counters(&engine);
    q.push(
        &Put::new(put, BufSlice::new(buf, 0, 64 * MIB))
            .user_data(2)
            .build(),
    )
    .unwrap();
    let c = exactly(&mut q, 1, Duration::from_millis(100))[0];
    assert!(c.is_ok() && c.bytes() == 64 * MIB, "{c:?}");
    let d = delta(&engine, &before);
    assert_eq!(d.iter().map(|x| x.1).sum::<u64>(), 64 * MIB, "{d:?}");
    assert!(
        d.iter().all(|x| x.1 >= 24 * MIB),
        "parts on both NICs: {d:?}"
    );
    let r = raw::call(a, "GET", "/stripe/from-gpu.bin", "", &[], b"");
    assert_eq!(r.status(), 200);
    assert!(r.body == fresh, "stored object differs from VRAM");
    assert!(
        r.header("etag")
            .unwrap_or_default()
            .trim_matches('"')
            .ends_with("-13"),
        "{:?}",
        r.header("etag")
    );
    drop(q);
    drop(engine);
    gw.shutdown();
    // SAFETY: the engine that used it is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}
