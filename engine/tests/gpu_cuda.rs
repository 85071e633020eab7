//! The GPU backends against a real device. Every test needs a GPU runtime with a device, so
//! each is `#[ignore]`d (the runner reports them as ignored where there is none); the GPU lane
//! runs them with `--include-ignored` (benches/gpu/run_on_device.sh), where a missing GPU fails.

use std::sync::Arc;

use engine::gpu::coalesce::{self, CopyRange};
use engine::gpu::staging::{self, StagedCopier};
use engine::gpu::{self, DeviceBuffer, GpuEvent, GpuRuntime, GpuStream, PinnedBuffer, PointerKind};

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

#[test]
#[ignore = "needs a GPU (CUDA or HIP runtime and a device); benches/gpu/run_on_device.sh runs it"]
fn staged_copies_both_directions_are_exact() {
    let rt = runtime();
    let len = (10 << 20) + 12345; // not a multiple of the chunk
    let src = pattern(len, 3);
    let dev = DeviceBuffer::new(&rt, 0, len + 4096).unwrap();
    dev.write(0, &vec![0xeeu8; len + 4096]).unwrap();
    let mut c = StagedCopier::new(&rt, 0, 3, 1 << 20).unwrap();
    c.copy_to_device(&dev, 4096, len, |off, buf| {
        let o = off as usize;
        buf.copy_from_slice(&src[o..o + buf.len()]);
    })
    .unwrap();
    let mut back = vec![0u8; len + 4096];
    dev.read(0, &mut back).unwrap();
    assert!(
        back[..4096].iter().all(|&b| b == 0xee),
        "bytes before the target were touched"
    );
    assert!(back[4096..] == src[..], "staged H2D bytes differ");

    let mut got = vec![0u8; len];
    let mut seen = 0usize;
    c.copy_from_device(&dev, 4096, len, |off, bytes| {
        assert_eq!(off as usize, seen, "chunks out of order");
        got[seen..seen + bytes.len()].copy_from_slice(bytes);
        seen += bytes.len();
    })
    .unwrap();
    assert_eq!(seen, len);
    assert!(got == src, "staged D2H bytes differ");
    assert!(c.copy_to_device(&dev, 4097, len + 4096, |_, _| {}).is_err());
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
