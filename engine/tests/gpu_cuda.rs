//! The GPU backends against a real device. Every test needs a GPU runtime with a device, so
//! each is `#[ignore]`d (the runner reports them as ignored where there is none); the GPU lane
//! runs them with `--include-ignored` (benches/gpu/run_on_device.sh), where a missing GPU fails.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use engine::Fabric;
use engine::gpu::coalesce::{self, CopyRange};
use engine::gpu::staging;
use engine::gpu::{
    self, DeviceBuffer, DevicePtr, GpuError, GpuEvent, GpuRuntime, GpuStream, IpcExport,
    PinnedBuffer, PointerKind,
};
use ring_api::BufSlice;
use ring_api::opcode::{Put, RangeGet};

fn runtime() -> Arc<dyn GpuRuntime> {
    gpu::try_detect()
        .unwrap_or_else(|e| panic!("this test needs a GPU (benches/gpu/run_on_device.sh): {e}"))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn device_info_and_pointer_kinds() {
    let rt = runtime();
    assert!(rt.device_count() >= 1);
    assert!(!rt.device_name(0).unwrap().is_empty());
    let pci = rt.pci_bus_id(0).unwrap();
    // The address parses back from its own sysfs spelling (feeds numa's closest-NIC choice).
    assert_eq!(pci.to_string().parse::<numa::PciAddr>().unwrap(), pci);
    assert!(rt.device_name(rt.device_count()).is_err());

    let dev = DeviceBuffer::new(&rt, 0, 1 << 20).unwrap();
    let pinned = PinnedBuffer::new(&rt, 4096).unwrap();
    let heap = vec![0u8; 4096];
    assert_eq!(
        rt.pointer_kind(dev.ptr().addr).unwrap(),
        PointerKind::Device { ordinal: 0 }
    );
    assert_eq!(
        rt.pointer_kind(dev.ptr().addr + 4096).unwrap(),
        PointerKind::Device { ordinal: 0 }
    );
    assert_eq!(
        rt.pointer_kind(pinned.as_ptr() as u64).unwrap(),
        PointerKind::Host
    );
    // Pageable memory is unknown to the runtime, or plain host memory where the driver tracks
    // system allocations (HMM); never device memory.
    let heap_kind = rt.pointer_kind(heap.as_ptr() as u64).unwrap();
    eprintln!("pageable heap pointer kind: {heap_kind:?}");
    assert!(
        matches!(heap_kind, PointerKind::Unknown | PointerKind::Host),
        "{heap_kind:?}"
    );
}

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn sync_round_trip_and_bounds() {
    let rt = runtime();
    let dev = DeviceBuffer::new(&rt, 0, 3 << 20).unwrap();
    let data = pattern(3 << 20, 9);
    dev.write(0, &data).unwrap();
    let mut back = vec![0u8; 1 << 20];
    dev.read(1 << 20, &mut back).unwrap();
    assert_eq!(back.as_slice(), &data[1 << 20..2 << 20]);
    assert!(dev.write(3 << 20, &[1]).is_err());
    assert!(dev.read(usize::MAX, &mut [0u8; 2]).is_err());
}

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn dmabuf_export_reports_sub_allocation_offset() {
    let rt = runtime();
    assert!(
        rt.capabilities().dmabuf_export,
        "this test needs a runtime with dmabuf export: {:?}",
        rt.capabilities()
    );
    let dev = DeviceBuffer::new(&rt, 0, 8 << 20).unwrap();
    let page = engine::gpu::dmabuf::host_page_size();
    let whole = dev.export_dmabuf(0, 8 << 20).unwrap();
    assert_eq!((whole.offset, whole.exported_size), (0, 8 << 20));
    let off = (1 << 20) + 100;
    let sub = dev.export_dmabuf(off, 4096).unwrap();
    assert!(sub.raw_fd() >= 0);
    assert_eq!(sub.offset, 100 % page + ((1 << 20) % page));
    assert_eq!(sub.exported_size % page, 0);
    assert!(sub.exported_size >= sub.offset + 4096);
    let link = std::fs::read_link(format!("/proc/self/fd/{}", sub.raw_fd())).unwrap();
    assert!(link.to_string_lossy().contains("dmabuf"), "{link:?}");
}

/// The engine's staging against the real runtime, over HTTP and the soft RDMA fabric (our
/// gateway in process): 10 MiB + 12345 bytes PUT from VRAM in 1 MiB pieces through a 4 MiB
/// bounce pool (so operations wait for pool memory), then read back with range-gets into
/// another VRAM buffer at an offset; every byte equal, the bytes around the target untouched,
/// and registering the VRAM pinned no host memory.
#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn engine_staging_through_a_small_bounce_pool_is_exact_both_ways() {
    let rt = runtime();
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("gpu")).unwrap();
    let gw = rig::soft_gateway(root.path());
    let len = (10 << 20) + 12345;
    let piece = 1usize << 20;
    let src = pattern(len, 3);
    let from = DeviceBuffer::new(&rt, 0, len).unwrap();
    from.write(0, &src).unwrap();
    let to = DeviceBuffer::new(&rt, 0, len + 8192).unwrap();
    for (i, fabric) in [Fabric::Http, Fabric::Soft].into_iter().enumerate() {
        to.write(0, &vec![0xeeu8; len + 8192]).unwrap();
        let engine = rig::engine_builder(gw.local_addr())
            .fabric(fabric)
            .gpu(Arc::clone(&rt))
            .gpu_bounce_bytes(4 << 20)
            .build()
            .unwrap();
        // SAFETY: both buffers outlive the engine (dropped at the end of this iteration).
        let (hf, ht) = unsafe {
            (
                engine.register_device(from.ptr(), len).unwrap(),
                engine.register_device(to.ptr(), len + 8192).unwrap(),
            )
        };
        assert_eq!(engine.gpu_staging().unwrap().bounce_pinned_bytes, 0);
        let mut q = engine.queue(64).unwrap();
        let pieces: Vec<(usize, usize)> = (0..len)
            .step_by(piece)
            .map(|o| (o, piece.min(len - o)))
            .collect();
        // One PUT of the whole range would not fit the pool: PUT the pieces as objects.
        for (k, &(o, n)) in pieces.iter().enumerate() {
            let part = engine.object("gpu", &format!("obj-{i}/{k}")).unwrap();
            q.push(
                &Put::new(part, BufSlice::new(hf, o as u64, n as u64))
                    .user_data(k as u64)
                    .build(),
            )
            .unwrap();
        }
        for _ in &pieces {
            assert!(
                q.wait(1, Some(rig::WAIT)) >= 1,
                "{fabric:?}: no completion in time"
            );
            let c = q.completion().next().unwrap();
            assert!(
                c.is_ok(),
                "{fabric:?} PUT {}: {:?}",
                c.user_data(),
                c.error_code()
            );
        }
        for (k, &(o, n)) in pieces.iter().enumerate() {
            let part = engine.object("gpu", &format!("obj-{i}/{k}")).unwrap();
            q.push(
                &RangeGet::new(part, 0, BufSlice::new(ht, 4096 + o as u64, n as u64))
                    .user_data(k as u64)
                    .build(),
            )
            .unwrap();
        }
        for _ in &pieces {
            assert!(
                q.wait(1, Some(rig::WAIT)) >= 1,
                "{fabric:?}: no completion in time"
            );
            let c = q.completion().next().unwrap();
            assert!(
                c.is_ok(),
                "{fabric:?} GET {}: {:?}",
                c.user_data(),
                c.error_code()
            );
        }
        let mut back = vec![0u8; len + 8192];
        to.read(0, &mut back).unwrap();
        assert!(
            back[..4096].iter().all(|&b| b == 0xee),
            "{fabric:?}: bytes before touched"
        );
        assert!(
            back[4096 + len..].iter().all(|&b| b == 0xee),
            "{fabric:?}: bytes after touched"
        );
        assert!(
            back[4096..4096 + len] == src[..],
            "{fabric:?}: staged bytes differ"
        );
        let st = engine.gpu_staging().unwrap();
        assert_eq!(st.bounce_pinned_bytes, 4 << 20, "{st:?}");
        assert!(st.bounce_peak_bytes <= 4 << 20, "{st:?}");
        assert_eq!(st.errors, 0, "{st:?}");
        drop(q);
        engine.deregister(hf, Duration::from_secs(5)).unwrap();
        engine.deregister(ht, Duration::from_secs(5)).unwrap();
    }
    gw.shutdown();
}

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn coalesced_and_single_range_copies_land_identically() {
    let rt = runtime();
    let (n, size) = (300usize, 64 << 10);
    let mut src = PinnedBuffer::new(&rt, n * size).unwrap();
    src.as_mut_slice().copy_from_slice(&pattern(n * size, 5));
    let dev = DeviceBuffer::new(&rt, 0, n * size).unwrap();
    let stream = GpuStream::new(&rt, 0).unwrap();
    // Reverse order within each group of 4 so some ranges are not mergeable.
    let ranges: Vec<CopyRange> = (0..n)
        .map(|i| {
            let j = (i / 4) * 4 + (3 - i % 4);
            let j = if j < n { j } else { i };
            CopyRange {
                src: (j * size) as u64,
                dst: (j * size) as u64,
                len: size as u64,
            }
        })
        .collect();
    let planned = coalesce::plan(&ranges, 1 << 20);
    for list in [&ranges, &planned] {
        dev.write(0, &vec![0u8; n * size]).unwrap();
        staging::copy_ranges(&stream, &src, &dev, list).unwrap();
        let mut back = vec![0u8; n * size];
        dev.read(0, &mut back).unwrap();
        assert!(back.as_slice() == src.as_slice());
    }
    let bad = [CopyRange {
        src: (n * size) as u64,
        dst: 0,
        len: 1,
    }];
    assert!(staging::copy_ranges(&stream, &src, &dev, &bad).is_err());
}

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn events_time_and_complete() {
    let rt = runtime();
    let stream = GpuStream::new(&rt, 0).unwrap();
    let (a, b) = (
        GpuEvent::new(&rt, 0, true).unwrap(),
        GpuEvent::new(&rt, 0, true).unwrap(),
    );
    let src = PinnedBuffer::new(&rt, 32 << 20).unwrap();
    let dev = DeviceBuffer::new(&rt, 0, 32 << 20).unwrap();
    stream.record(&a).unwrap();
    staging::copy_ranges(
        &stream,
        &src,
        &dev,
        &[CopyRange {
            src: 0,
            dst: 0,
            len: 32 << 20,
        }],
    )
    .unwrap();
    stream.record(&b).unwrap();
    b.synchronize().unwrap();
    assert!(b.is_complete().unwrap());
    let ms = b.elapsed_ms_since(&a).unwrap();
    assert!(ms > 0.0 && ms < 10_000.0, "{ms} ms for 32 MiB");
}

/// Set in the child process of [`ipc_export_opens_in_another_process`]: the export's wire
/// form in hex. The child also reads [`IPC_LEN_ENV`] and [`IPC_GW_ENV`].
const IPC_CHILD_ENV: &str = "HIPOBJ_TEST_IPC_EXPORT";
/// The exported length, in the child.
const IPC_LEN_ENV: &str = "HIPOBJ_TEST_IPC_LEN";
/// The parent's gateway, in the child.
const IPC_GW_ENV: &str = "HIPOBJ_TEST_IPC_GATEWAY";
/// What the child prints when it has staged the object, so the parent knows it ran.
const IPC_CHILD_DONE: &str = "ipc child: staged and closed";
/// The parent's fill of its allocation (the child checks it sees these bytes).
const IPC_FILL_SEED: u8 = 41;
/// The object the child stages into the parent's memory.
const IPC_DATA_SEED: u8 = 43;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Issue 34's flow on a real device, across two processes: this test (the client) allocates
/// device memory and exports a slice of it at an offset; it re-runs its own binary, filtered
/// to this test, as the "daemon", which opens the export, checks that it sees the client's
/// bytes, refuses a copy of the export that claims a longer allocation, registers the mapping
/// with an engine and range-gets an object from the client's gateway into it (one half over
/// HTTP, one over the soft fabric), and closes. The client then finds the object's bytes in
/// its slice and its other bytes untouched. (CUDA does not open a process's own handles,
/// hence the second process.)
#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn ipc_export_opens_in_another_process() {
    if let Ok(wire) = std::env::var(IPC_CHILD_ENV) {
        ipc_child(&wire);
        return;
    }
    let rt = runtime();
    assert!(
        rt.capabilities().ipc_memory,
        "this test needs a runtime with IPC memory handles: {:?}",
        rt.capabilities()
    );
    let alloc_len = 4usize << 20;
    let off = (1usize << 20) + 4096 + 123;
    let len = (1usize << 20) + 777;
    let dev = DeviceBuffer::new(&rt, 0, alloc_len).unwrap();
    let before = pattern(alloc_len, IPC_FILL_SEED);
    dev.write(0, &before).unwrap();

    let export = rt
        .ipc_export(dev.ptr().offset(off as u64).unwrap(), len)
        .unwrap();
    assert_eq!(
        (export.offset, export.alloc_len, export.ordinal),
        (off as u64, alloc_len as u64, 0),
        "{export:?}"
    );
    let whole = rt.ipc_export(dev.ptr(), alloc_len).unwrap();
    assert_eq!((whole.offset, whole.alloc_len), (0, alloc_len as u64));
    let crossing = rt.ipc_export(dev.ptr().offset(alloc_len as u64 - 10).unwrap(), 11);
    assert!(
        matches!(crossing, Err(GpuError::InvalidArgument(_))),
        "{crossing:?}"
    );
    let heap = vec![0u8; 4096];
    let host = rt.ipc_export(
        DevicePtr {
            addr: heap.as_ptr() as u64,
            ordinal: 0,
        },
        4096,
    );
    assert!(host.is_err(), "pageable host memory exported: {host:?}");

    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("gpu")).unwrap();
    let gw = rig::soft_gateway(root.path());
    let data = pattern(len, IPC_DATA_SEED);
    {
        let engine = rig::engine_builder(gw.local_addr()).build().unwrap();
        let h = engine
            .register_host(len, engine::RegisterOptions::pageable())
            .unwrap();
        engine.copy_in(h, 0, &data).unwrap();
        let mut q = engine.queue(4).unwrap();
        let obj = engine.object("gpu", "ipc-shard").unwrap();
        let c = rig::run_one(
            &mut q,
            Put::new(obj, BufSlice::new(h, 0, len as u64)).build(),
        );
        assert!(c.is_ok(), "PUT: {:?}", c.error_code());
    }

    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "ipc_export_opens_in_another_process",
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(IPC_CHILD_ENV, hex(&export.to_bytes()))
        .env(IPC_LEN_ENV, len.to_string())
        .env(IPC_GW_ENV, gw.local_addr().to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains(IPC_CHILD_DONE),
        "child {}:\n{stdout}\n{stderr}",
        out.status
    );

    let mut back = vec![0u8; alloc_len];
    dev.read(0, &mut back).unwrap();
    assert!(
        back[..off] == before[..off],
        "bytes before the slice changed"
    );
    assert!(
        back[off + len..] == before[off + len..],
        "bytes after the slice changed"
    );
    assert!(back[off..off + len] == data[..], "staged bytes differ");
    gw.shutdown();
}

/// The "daemon" side of [`ipc_export_opens_in_another_process`].
fn ipc_child(wire: &str) {
    let rt = runtime();
    let export = IpcExport::from_bytes(&unhex(wire)).unwrap();
    let len: usize = std::env::var(IPC_LEN_ENV).unwrap().parse().unwrap();
    let gw: SocketAddr = std::env::var(IPC_GW_ENV).unwrap().parse().unwrap();
    let off = export.offset as usize;

    // An export that claims more than was shared is refused (and its mapping closed again).
    let mut big = export;
    big.alloc_len += 2 << 20;
    // SAFETY: the parent keeps the allocation until this process has exited.
    let r = unsafe { rt.ipc_open(&big) };
    assert!(matches!(r, Err(GpuError::InvalidArgument(_))), "{r:?}");

    // SAFETY: as above; closed below, after the last engine using it is gone.
    let base = unsafe { rt.ipc_open(&export) }.unwrap();
    let ptr = export.locate(base, len as u64).unwrap();
    let mut seen = vec![0u8; len];
    // SAFETY: `ptr..ptr+len` lies inside the opened allocation (located above).
    unsafe { rt.memcpy_d2h(seen.as_mut_ptr(), ptr, len) }.unwrap();
    let fill = pattern(export.alloc_len as usize, IPC_FILL_SEED);
    assert!(
        seen[..] == fill[off..off + len],
        "the child does not see the parent's bytes"
    );

    let half = len / 2;
    for (fabric, o, n) in [(Fabric::Http, 0, half), (Fabric::Soft, half, len - half)] {
        let engine = rig::engine_builder(gw)
            .fabric(fabric)
            .gpu(Arc::clone(&rt))
            .build()
            .unwrap();
        // SAFETY: the mapping stays open until after this engine is dropped.
        let buf = unsafe { engine.register_device(ptr, len) }.unwrap();
        let obj = engine.object("gpu", "ipc-shard").unwrap();
        let mut q = engine.queue(4).unwrap();
        let c = rig::run_one(
            &mut q,
            RangeGet::new(obj, o as u64, BufSlice::new(buf, o as u64, n as u64)).build(),
        );
        assert!(c.is_ok(), "{fabric:?} GET: {:?}", c.error_code());
        drop(q);
        engine.deregister(buf, Duration::from_secs(5)).unwrap();
    }
    // SAFETY: opened above; the engines are gone.
    unsafe { rt.ipc_close(base) }.unwrap();
    println!("{IPC_CHILD_DONE}");
}
