//! IPC memory handles (`GpuRuntime::ipc_export` / `ipc_open` / `ipc_close`) on hosts without a
//! GPU, through the test double (`common::test_gpu::TestGpu::heap`): two doubles in this
//! process stand for the client that owns the device memory and the node daemon that stages
//! downloads into it (issue 34). The fake's handles work within one process only; the real
//! cross-process check is `gpu_cuda.rs`'s `ipc_export_opens_in_another_process`.
//!
//! - an export of a pointer inside an allocation reports its offset and the allocation's
//!   length; ranges not inside one allocation are refused with a typed error;
//! - the export goes through its wire form, the "daemon" opens it, registers the mapping with
//!   an engine and range-gets land in the client's allocation (HTTP and the soft fabric,
//!   against our gateway in process), not a byte outside the target;
//! - close: the mapping is gone for the importer, a second close and a stale handle are
//!   refused, and the client can free its memory only once nothing has it open;
//! - forged, foreign or inconsistent exports are refused, never a panic.
#![allow(unsafe_code)]

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::time::Duration;

use common::test_gpu::TestGpu;
use engine::Fabric;
use engine::gpu::{DevicePtr, GpuError, GpuRuntime, IpcExport, PointerKind};
use ring_api::BufSlice;
use ring_api::opcode::{Put, RangeGet};

const MIB: usize = 1 << 20;

fn invalid(r: Result<IpcExport, GpuError>) -> String {
    match r {
        Err(GpuError::InvalidArgument(why)) => why,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn export_inside_an_allocation_reports_offset_and_allocation_length() {
    let gpu = TestGpu::heap(Duration::ZERO);
    assert!(gpu.capabilities().ipc_memory);
    let dev = gpu.alloc_device(0, MIB).unwrap();
    let mid = gpu.ipc_export(dev.offset(4103).unwrap(), 1000).unwrap();
    assert_eq!(
        (mid.offset, mid.alloc_len, mid.ordinal),
        (4103, MIB as u64, 0)
    );
    let whole = gpu.ipc_export(dev, MIB).unwrap();
    assert_eq!((whole.offset, whole.alloc_len), (0, MIB as u64));
    // One allocation, one handle, wherever in it the pointer lies.
    assert_eq!(whole.handle, mid.handle);
    let last = gpu
        .ipc_export(dev.offset(MIB as u64 - 1).unwrap(), 1)
        .unwrap();
    assert_eq!(last.offset, MIB as u64 - 1);
    // Another allocation has another handle.
    let other = gpu.alloc_device(0, 4096).unwrap();
    let o = gpu.ipc_export(other.offset(10).unwrap(), 4086).unwrap();
    assert_eq!((o.offset, o.alloc_len), (10, 4096));
    assert_ne!(o.handle, whole.handle);
    // SAFETY: our own allocations, nothing has them open.
    unsafe {
        gpu.free_device(dev).unwrap();
        gpu.free_device(other).unwrap();
    }
}

#[test]
fn ranges_not_inside_one_allocation_are_refused() {
    let gpu = TestGpu::heap(Duration::ZERO);
    let dev = gpu.alloc_device(0, MIB).unwrap();
    let why = invalid(gpu.ipc_export(dev.offset(MIB as u64 - 10).unwrap(), 11));
    assert!(why.contains("not inside one allocation"), "{why}");
    invalid(gpu.ipc_export(dev, MIB + 1));
    invalid(gpu.ipc_export(dev, usize::MAX));
    invalid(gpu.ipc_export(dev, 0));
    // Before the allocation, far outside any, at the top of the address space.
    invalid(gpu.ipc_export(
        DevicePtr {
            addr: dev.addr - 1,
            ordinal: 0,
        },
        2,
    ));
    invalid(gpu.ipc_export(
        DevicePtr {
            addr: u64::MAX - 1,
            ordinal: 0,
        },
        8,
    ));
    invalid(gpu.ipc_export(
        DevicePtr {
            addr: dev.addr,
            ordinal: 1,
        },
        8,
    ));
    // A double without device memory has no IPC: typed as unsupported.
    let none = TestGpu::pci_only(Vec::new());
    assert!(!none.capabilities().ipc_memory);
    assert!(
        matches!(none.ipc_export(dev, 8), Err(GpuError::Unsupported { .. })),
        "{:?}",
        none.ipc_export(dev, 8)
    );
    // SAFETY: our own allocation, nothing has it open.
    unsafe { gpu.free_device(dev).unwrap() };
}

/// The issue-34 flow: the client exports a slice of its allocation, the export crosses the
/// "socket" in its wire form, the daemon opens it, registers the mapping with its engine and
/// range-gets land in the client's bytes.
#[test]
fn an_opened_export_receives_range_gets_into_the_exporters_allocation() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bkt")).unwrap();
    let gw = rig::soft_gateway(root.path());
    let client = TestGpu::heap(Duration::from_micros(20));
    let daemon = TestGpu::heap(Duration::from_micros(20));
    let len = 300_000usize;
    let piece = 64 << 10;
    let pad = 4096 + 123;
    let data = common::pattern(len, 34);
    let alloc = client.alloc_device(0, len + 2 * pad).unwrap();
    let target = alloc.offset(pad as u64).unwrap();

    let export = client.ipc_export(target, len).unwrap();
    let export = IpcExport::from_bytes(&export.to_bytes()).unwrap();
    // SAFETY: the client frees `alloc` only after the daemon's close below.
    let base = unsafe { daemon.ipc_open(&export) }.unwrap();
    let ptr = export.locate(base, len as u64).unwrap();
    // One address space: the fake maps the allocation where the client has it.
    assert_eq!((base.addr, ptr.addr), (alloc.addr, target.addr));
    assert_eq!(
        daemon.pointer_kind(ptr.addr).unwrap(),
        PointerKind::Device { ordinal: 0 }
    );

    for (i, fabric) in [Fabric::Http, Fabric::Soft].into_iter().enumerate() {
        client.fill(alloc, &vec![0xee; len + 2 * pad]);
        let engine = rig::engine_builder(gw.local_addr())
            .fabric(fabric)
            .gpu(daemon.as_dyn())
            .build()
            .unwrap();
        let obj = engine.object("bkt", &format!("shard-{i}")).unwrap();
        let host = engine
            .register_host(len, engine::RegisterOptions::pageable())
            .unwrap();
        engine.copy_in(host, 0, &data).unwrap();
        let mut q = engine.queue(16).unwrap();
        let c = rig::run_one(
            &mut q,
            Put::new(obj, BufSlice::new(host, 0, len as u64)).build(),
        );
        assert!(c.is_ok(), "{fabric:?} PUT: {:?}", c.error_code());

        // SAFETY: the mapping stays open until after this engine is dropped.
        let buf = unsafe { engine.register_device(ptr, len) }.unwrap();
        let ranges: Vec<(usize, usize)> = (0..len)
            .step_by(piece)
            .map(|o| (o, piece.min(len - o)))
            .collect();
        for (k, &(o, n)) in ranges.iter().enumerate() {
            q.push(
                &RangeGet::new(obj, o as u64, BufSlice::new(buf, o as u64, n as u64))
                    .user_data(k as u64)
                    .build(),
            )
            .unwrap();
        }
        for _ in &ranges {
            assert!(q.wait(1, Some(rig::WAIT)) >= 1, "{fabric:?}: no completion");
            let c = q.completion().next().unwrap();
            assert!(
                c.is_ok(),
                "{fabric:?} GET {}: {:?}",
                c.user_data(),
                c.error_code()
            );
        }
        // The bytes are in the client's allocation, and only where it asked for them.
        let back = client.device_bytes(alloc, len + 2 * pad);
        assert!(back[..pad].iter().all(|&b| b == 0xee), "{fabric:?}: before");
        assert!(
            back[pad + len..].iter().all(|&b| b == 0xee),
            "{fabric:?}: after"
        );
        assert!(back[pad..pad + len] == data[..], "{fabric:?}: bytes differ");
        drop(q);
        engine.deregister(buf, Duration::from_secs(5)).unwrap();
        engine.deregister(host, Duration::from_secs(5)).unwrap();
    }

    // Open elsewhere: the client may not free it yet.
    // SAFETY: refused by the double (nothing is freed).
    assert!(unsafe { client.free_device(alloc) }.is_err());
    // SAFETY: opened above; both engines are gone.
    unsafe { daemon.ipc_close(base) }.unwrap();
    assert_eq!(daemon.pointer_kind(ptr.addr).unwrap(), PointerKind::Unknown);
    // SAFETY: refused by the double: not open any more.
    assert!(unsafe { daemon.ipc_close(base) }.is_err());
    // SAFETY: nothing has it open now.
    unsafe { client.free_device(alloc) }.unwrap();
    // The handle of freed memory is stale.
    // SAFETY: refused by the double (nothing is mapped).
    let stale = unsafe { daemon.ipc_open(&export) };
    assert!(
        matches!(stale, Err(GpuError::InvalidArgument(_))),
        "{stale:?}"
    );
    gw.shutdown();
}

#[test]
fn forged_foreign_or_inconsistent_exports_are_refused() {
    let client = TestGpu::heap(Duration::ZERO);
    let daemon = TestGpu::heap(Duration::ZERO);
    let alloc = client.alloc_device(0, MIB).unwrap();
    let good = client.ipc_export(alloc.offset(100).unwrap(), 1000).unwrap();
    let open = |e: &IpcExport| {
        // SAFETY: the client's allocation outlives every open that succeeds; none should.
        unsafe { daemon.ipc_open(e) }
    };

    // The exporter itself (CUDA refuses a process's own handles).
    // SAFETY: refused (nothing is mapped).
    assert!(unsafe { client.ipc_open(&good) }.is_err());
    let mut bad = Vec::new();
    let mut e = good;
    e.handle[20] ^= 1; // the check value
    bad.push(e);
    let mut e = good;
    e.handle[0] = b'X'; // the magic
    bad.push(e);
    let mut e = good;
    e.handle[63] = 1; // the reserved tail
    bad.push(e);
    let mut e = good;
    e.handle[12] ^= 0x40; // another export id
    bad.push(e);
    let mut e = good;
    e.alloc_len = 2 * MIB as u64; // more than was shared
    bad.push(e);
    let mut e = good;
    e.offset = e.alloc_len; // past the end
    bad.push(e);
    let mut e = good;
    e.alloc_len = 0;
    bad.push(e);
    let mut e = good;
    e.ordinal = 7;
    bad.push(e);
    let mut e = good;
    e.handle = [0xff; 64];
    bad.push(e);
    for (i, e) in bad.iter().enumerate() {
        let r = open(e);
        assert!(
            matches!(r, Err(GpuError::InvalidArgument(_))),
            "forged export {i} opened: {r:?}"
        );
    }
    // Another process's handle: the fake says it cannot cross processes.
    let mut e = good;
    e.handle[8..12].copy_from_slice(&(std::process::id() ^ 1).to_le_bytes());
    assert!(
        matches!(open(&e), Err(GpuError::Unsupported { .. })),
        "{:?}",
        open(&e)
    );
    // Truncated or oversized wire forms.
    let wire = good.to_bytes();
    assert!(IpcExport::from_bytes(&wire[..wire.len() - 1]).is_err());
    assert!(IpcExport::from_bytes(&[wire.as_slice(), &[0]].concat()).is_err());

    // Nothing was opened: the client frees its memory, the daemon sees none of it.
    assert_eq!(
        daemon.pointer_kind(alloc.addr).unwrap(),
        PointerKind::Unknown
    );
    // SAFETY: nothing has it open.
    unsafe { client.free_device(alloc) }.unwrap();
    // The same export opens fine when genuine (a fresh allocation), and closes.
    let alloc = client.alloc_device(0, 4096).unwrap();
    let good = client.ipc_export(alloc, 4096).unwrap();
    let base = open(&good).unwrap();
    // SAFETY: opened just above, nothing uses it.
    unsafe { daemon.ipc_close(base) }.unwrap();
    // SAFETY: nothing has it open.
    unsafe { client.free_device(alloc) }.unwrap();
}
