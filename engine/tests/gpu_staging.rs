//! Engine-internal GPU staging, run on hosts without a GPU through a test double of the
//! runtime: `common::test_gpu::TestGpu::heap` implements `GpuRuntime` with host memory standing
//! in for device memory and a "copy engine" thread that executes each stream's queued copies in
//! order, slowly, and can be paused. That makes the properties of the staging observable:
//!
//! - a GET into device memory completes only after its bytes are in (test-double) VRAM;
//! - many adjacent range-gets are merged into few copy launches (and into one per range with
//!   `gpu_coalesce_limit(0)`);
//! - a completion is posted when its own copy has finished, not the last copy of its batch;
//! - PUT from device memory sends the device's bytes (copied out before the PUT starts);
//! - without a runtime, a device registration fails with a typed "no GPU runtime" error;
//! - the bounded bounce pool: registering device memory allocates no host memory, GETs and
//!   PUTs are byte-exact over HTTP and the soft fabric through a small pool, a batch larger
//!   than the pool waits and completes in order of arrival, an operation larger than the pool
//!   fails with `TooLarge`, waiting operations can be cancelled, expire, and hold off
//!   deregistration.
#![allow(unsafe_code)]

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::test_gpu::TestGpu;
use common::{S3sFs, builder, pattern, put_file};
use engine::EngineError;
use engine::gpu::{DevicePtr, GpuRuntime};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, Cqe};

const K64: usize = 64 * 1024;

/// Reaps `n` completions, calling `check` on each the moment it is reaped.
fn reap(q: &mut engine::Queue, n: usize, mut check: impl FnMut(Cqe)) {
    let limit = Instant::now() + Duration::from_secs(60);
    let mut got = 0;
    while got < n {
        assert!(Instant::now() < limit, "only {got} of {n} completions");
        q.wait(1, Some(Duration::from_millis(100)));
        for c in q.completion() {
            got += 1;
            check(c);
        }
    }
}

#[test]
fn range_gets_complete_only_after_their_copy_into_vram_and_are_coalesced() {
    let server = S3sFs::start();
    let n = 256usize;
    let data = pattern(n * K64, 11);
    put_file(&server, "bkt", "model.bin", &data);
    let gpu = TestGpu::heap(Duration::from_micros(300));
    let engine = builder(&server).gpu(gpu.as_dyn()).build().unwrap();
    let obj = engine.object("bkt", "model.bin").unwrap();
    let dev = gpu.alloc_device(0, n * K64).unwrap();
    // SAFETY: `dev` lives until the end of the test, after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, n * K64) }.unwrap();
    let mut q = engine.queue(512).unwrap();

    // Device paused: every range-get reaches bounce memory, none may complete.
    gpu.set_paused(true);
    for i in 0..n {
        let off = (i * K64) as u64;
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, off, K64 as u64))
                .user_data(i as u64)
                .build(),
        )
        .unwrap();
    }
    let t = Instant::now();
    while engine.gpu_staging().unwrap().ranges_to_device == 0 && t.elapsed().as_secs() < 30 {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        q.wait(1, Some(Duration::from_millis(200))),
        0,
        "a completion was posted while its copy into VRAM had not run"
    );
    assert!(gpu.device_bytes(dev, n * K64).iter().all(|&b| b == 0));

    gpu.set_paused(false);
    let mut seen = vec![false; n];
    reap(&mut q, n, |c| {
        assert!(c.is_ok(), "range-get failed: {:?}", c.error_code());
        assert_eq!(c.bytes(), K64 as u64);
        let i = c.user_data() as usize;
        assert!(!seen[i], "duplicate completion {i}");
        seen[i] = true;
        let dptr = dev.offset((i * K64) as u64).unwrap();
        assert!(
            gpu.device_bytes(dptr, K64) == data[i * K64..(i + 1) * K64],
            "range {i} completed before its bytes were in VRAM"
        );
    });
    assert_eq!(gpu.device_bytes(dev, n * K64), data);
    let st = engine.gpu_staging().unwrap();
    assert_eq!(st.ranges_to_device, n as u64);
    assert_eq!(st.bytes_to_device, (n * K64) as u64);
    assert_eq!(st.errors, 0);
    assert_eq!(st.copies_to_device, gpu.h2d_async());
    // Two batches may go out before the copy engine is seen busy (each at most the ranges one
    // turn landed, ≤ 32 connections); everything after them merges into contiguous runs split
    // at the 8 MiB limit.
    assert!(
        st.copies_to_device <= 2 * 32 + (2 * 32 + 1) + 2,
        "not coalesced: {st:?}"
    );
    eprintln!("{n} ranges of 64 KiB: {} copies", st.copies_to_device);
    drop(q);
    drop(engine);
    // SAFETY: the engine (and every copy it queued) is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

#[test]
fn without_coalescing_every_range_is_its_own_copy() {
    let server = S3sFs::start();
    let n = 64usize;
    let data = pattern(n * K64, 5);
    put_file(&server, "bkt", "obj", &data);
    let gpu = TestGpu::heap(Duration::from_micros(50));
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_coalesce_limit(0)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let dev = gpu.alloc_device(0, n * K64).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, n * K64) }.unwrap();
    let mut q = engine.queue(128).unwrap();
    gpu.set_paused(true);
    for i in 0..n {
        let off = (i * K64) as u64;
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, off, K64 as u64))
                .user_data(i as u64)
                .build(),
        )
        .unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    gpu.set_paused(false);
    reap(&mut q, n, |c| assert!(c.is_ok()));
    assert_eq!(gpu.device_bytes(dev, n * K64), data);
    let st = engine.gpu_staging().unwrap();
    assert_eq!(
        (st.ranges_to_device, st.copies_to_device),
        (n as u64, n as u64)
    );
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// Large ranges (each longer than the coalescing limit, as 16 MiB ranges are with the default
/// 8 MiB) that land together form one batch of several copies. Each completion must be posted
/// when *its* copy has finished, not when the batch's last copy has: at every reap, at most
/// one range more than those completed may already be in VRAM (the copy engine takes 60 ms
/// per copy, the worker notices a finished copy within microseconds). With one event per
/// batch, a batch of k ranges shows k − 1 ranges in VRAM but not completed.
#[test]
fn each_large_range_completes_when_its_own_copy_has_finished() {
    const MIB: usize = 1 << 20;
    let server = S3sFs::start();
    let n = 16usize;
    let data = pattern(n * MIB, 23);
    put_file(&server, "bkt", "large.bin", &data);
    let gpu = TestGpu::heap(Duration::from_millis(60));
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_coalesce_limit((MIB / 2) as u64)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "large.bin").unwrap();
    let dev = gpu.alloc_device(0, n * MIB).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, n * MIB) }.unwrap();
    let mut q = engine.queue(64).unwrap();
    gpu.set_paused(true);
    for i in 0..n {
        let off = (i * MIB) as u64;
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, off, MIB as u64))
                .user_data(i as u64)
                .build(),
        )
        .unwrap();
    }
    // Let every range land in bounce memory while the copy engine is stopped.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(q.wait(1, Some(Duration::from_millis(1))), 0);
    gpu.set_paused(false);
    let in_vram = |i: usize| {
        gpu.device_bytes(dev.offset((i * MIB) as u64).unwrap(), MIB) == data[i * MIB..(i + 1) * MIB]
    };
    let mut done = 0usize;
    let mut worst_lag = 0usize;
    reap(&mut q, n, |c| {
        assert!(c.is_ok(), "range-get failed: {:?}", c.error_code());
        let i = c.user_data() as usize;
        assert!(
            in_vram(i),
            "range {i} completed before its bytes were in VRAM"
        );
        done += 1;
        let copied = (0..n).filter(|&j| in_vram(j)).count();
        worst_lag = worst_lag.max(copied.saturating_sub(done));
    });
    assert!(
        worst_lag <= 1,
        "completions held back behind later copies: {worst_lag} ranges were in VRAM but not completed"
    );
    let st = engine.gpu_staging().unwrap();
    assert_eq!(
        (st.ranges_to_device, st.copies_to_device),
        (n as u64, n as u64)
    );
    // The first ranges waited through the pause: the staging wait counter saw it.
    assert!(st.stage_wait_max_ns >= 200_000_000, "{st:?}");
    assert!(st.stage_wait_ns >= st.stage_wait_max_ns);
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

#[test]
fn put_from_vram_sends_the_device_bytes_and_a_whole_get_copies_only_what_arrived() {
    let server = S3sFs::start();
    server.create_bucket_dir("bkt");
    let gpu = TestGpu::heap(Duration::from_micros(200));
    let engine = builder(&server).gpu(gpu.as_dyn()).build().unwrap();
    let len = 3 << 20;
    let dev = gpu.alloc_device(0, len).unwrap();
    let data = pattern(len, 77);
    // SAFETY: synchronous copy into our own test-double allocation.
    unsafe { gpu.memcpy_h2d(dev, data.as_ptr(), len) }.unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, len) }.unwrap();
    let mut q = engine.queue(16).unwrap();
    // Two PUTs sharing bytes (overlapping shared leases) and one of a disjoint range.
    let parts = [(0usize, 2 << 20), (1 << 20, 1 << 20), (2 << 20, 1 << 20)];
    for (i, &(off, n)) in parts.iter().enumerate() {
        let obj = engine.object("bkt", &format!("from-vram/{i}")).unwrap();
        q.push(
            &Put::new(obj, BufSlice::new(buf, off as u64, n as u64))
                .user_data(i as u64)
                .build(),
        )
        .unwrap();
    }
    reap(&mut q, parts.len(), |c| {
        assert!(c.is_ok(), "put failed: {:?}", c.error_code());
    });
    for (i, &(off, n)) in parts.iter().enumerate() {
        let stored = std::fs::read(server.root.path().join(format!("bkt/from-vram/{i}"))).unwrap();
        assert!(stored == data[off..off + n], "object {i} differs from VRAM");
    }
    let st = engine.gpu_staging().unwrap();
    assert_eq!(st.ranges_from_device, 3);
    assert!(st.bytes_from_device >= len as u64 && st.bytes_from_device <= (len + (1 << 20)) as u64);
    assert_eq!(st.copies_from_device, gpu.d2h_async());

    // GET the 1 MiB object back whole into a 2 MiB device range: 1 MiB arrives and only that
    // is copied; the rest of the device range keeps its bytes.
    let dev2 = gpu.alloc_device(0, 2 << 20).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf2 = unsafe { engine.register_device(dev2, 2 << 20) }.unwrap();
    let before = engine.gpu_staging().unwrap().bytes_to_device;
    let obj = engine.object("bkt", "from-vram/2").unwrap();
    q.push(
        &Get::new(obj, BufSlice::new(buf2, 0, 2 << 20))
            .user_data(9)
            .build(),
    )
    .unwrap();
    reap(&mut q, 1, |c| {
        assert!(c.is_ok());
        assert_eq!(c.bytes(), 1 << 20);
        assert_eq!(c.user_data(), 9);
    });
    assert!(gpu.device_bytes(dev2, 1 << 20) == data[2 << 20..]);
    assert_eq!(
        engine.gpu_staging().unwrap().bytes_to_device - before,
        1 << 20
    );
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe {
        gpu.free_device(dev).unwrap();
        gpu.free_device(dev2).unwrap();
    }
}

#[test]
fn device_memory_without_a_runtime_or_outside_the_device_is_refused() {
    let server = S3sFs::start();
    let engine = builder(&server).build().unwrap();
    assert!(engine.gpu().is_none());
    assert!(engine.gpu_staging().is_none());
    let fake = DevicePtr {
        addr: 0x7000_0000,
        ordinal: 0,
    };
    // SAFETY: refused before anything touches the address.
    let err = unsafe { engine.register_device(fake, 4096) }.unwrap_err();
    assert!(matches!(err, EngineError::Unsupported(_)), "{err:?}");
    assert!(err.to_string().contains("no GPU runtime"), "{err}");

    let gpu = TestGpu::heap(Duration::ZERO);
    let engine = builder(&server).gpu(gpu.as_dyn()).build().unwrap();
    let dev = gpu.alloc_device(0, 4096).unwrap();
    // A range running past the allocation, and host memory, are not device memory.
    // SAFETY: refused before anything touches the addresses.
    let past = unsafe { engine.register_device(dev, 8192) }.unwrap_err();
    assert!(matches!(past, EngineError::Config(_)), "{past:?}");
    let host = [0u8; 16];
    let host_ptr = DevicePtr {
        addr: host.as_ptr() as u64,
        ordinal: 0,
    };
    // SAFETY: as above.
    let err = unsafe { engine.register_device(host_ptr, 16) }.unwrap_err();
    assert!(matches!(err, EngineError::Config(_)), "{err:?}");
    drop(engine);
    // SAFETY: never registered.
    unsafe { gpu.free_device(dev) }.unwrap();
}

#[test]
fn upload_part_from_vram_sends_the_device_bytes() {
    use ring_api::opcode::{CompleteMultipart, CreateMultipart, UploadPart};
    use ring_api::{PartNumber, UploadHandle};
    let server = S3sFs::start();
    server.create_bucket_dir("bkt");
    let gpu = TestGpu::heap(Duration::from_micros(200));
    let engine = builder(&server).gpu(gpu.as_dyn()).build().unwrap();
    let parts = [5usize << 20, 1_234_567];
    let len: usize = parts.iter().sum();
    let dev = gpu.alloc_device(0, len).unwrap();
    let data = pattern(len, 31);
    // SAFETY: synchronous copy into our own test-double allocation.
    unsafe { gpu.memcpy_h2d(dev, data.as_ptr(), len) }.unwrap();
    // SAFETY: freed after the engine is dropped. The data reaches VRAM without passing through
    // the bounce pool, so only bytes copied out of VRAM can make the stored object equal it.
    let buf = unsafe { engine.register_device(dev, len) }.unwrap();
    let obj = engine.object("bkt", "mp/from-vram").unwrap();
    let mut q = engine.queue(16).unwrap();
    q.push(&CreateMultipart::new(obj).user_data(100).build())
        .unwrap();
    let mut handle = 0;
    reap(&mut q, 1, |c| {
        assert!(
            c.is_ok(),
            "create: {:?} {:?}",
            c.error_code(),
            c.error_class()
        );
        handle = u32::try_from(c.aux()).unwrap();
    });
    let h = UploadHandle(handle);
    let mut off = 0u64;
    for (i, &n) in parts.iter().enumerate() {
        let pn = PartNumber::new(i as u32 + 1).unwrap();
        q.push(
            &UploadPart::new(obj, h, pn, BufSlice::new(buf, off, n as u64))
                .user_data(i as u64 + 1)
                .build(),
        )
        .unwrap();
        off += n as u64;
    }
    reap(&mut q, parts.len(), |c| {
        assert!(c.is_ok(), "part {}: {:?}", c.user_data(), c.error_code());
    });
    let last = PartNumber::new(parts.len() as u32).unwrap();
    q.push(&CompleteMultipart::new(obj, h, last).user_data(200).build())
        .unwrap();
    reap(&mut q, 1, |c| {
        assert!(c.is_ok(), "complete: {:?}", c.error_code())
    });
    let stored = std::fs::read(server.root.path().join("bkt/mp/from-vram")).unwrap();
    assert!(stored == data, "multipart object differs from VRAM");
    let st = engine.gpu_staging().unwrap();
    assert_eq!(st.ranges_from_device, parts.len() as u64);
    assert_eq!(st.bytes_from_device, len as u64);
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// Pushes `sqes` and collects one completion each (in the order they were reaped).
fn run_all(q: &mut engine::Queue, sqes: &[ring_api::Sqe]) -> Vec<Cqe> {
    for sqe in sqes {
        q.push(sqe).unwrap();
    }
    let mut out = Vec::new();
    reap(q, sqes.len(), |c| out.push(c));
    out
}

/// Registering 4 GiB of device memory pins no host memory (the runtime's pinned allocations
/// stay empty and the pool reports nothing allocated); the first device operation allocates
/// the pool once, at its configured size, however much VRAM is registered.
#[test]
fn registering_device_memory_allocates_no_host_memory() {
    let server = S3sFs::start();
    let data = pattern(K64, 4);
    put_file(&server, "bkt", "small", &data);
    let gpu = TestGpu::heap(Duration::ZERO);
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_bounce_bytes(1 << 20)
        .build()
        .unwrap();
    let big = 4usize << 30;
    // The test double's "VRAM" is calloc'ed host memory: untouched pages cost nothing.
    let dev = gpu.alloc_device(0, big).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, big) }.unwrap();
    assert_eq!(
        gpu.pinned_bytes(),
        0,
        "registration allocated pinned memory"
    );
    let st = engine.gpu_staging().unwrap();
    assert_eq!((st.bounce_pinned_bytes, st.bounce_capacity), (0, 1 << 20));
    assert_eq!(engine.gpu_bounce_bytes(), Some(1 << 20));

    let obj = engine.object("bkt", "small").unwrap();
    let mut q = engine.queue(4).unwrap();
    let at = (3u64 << 30) + 12345;
    let c = run_all(
        &mut q,
        &[RangeGet::new(obj, 0, BufSlice::new(buf, at, K64 as u64)).build()],
    );
    assert!(c[0].is_ok(), "{:?}", c[0].error_code());
    assert!(gpu.device_bytes(dev.offset(at).unwrap(), K64) == data);
    assert_eq!(gpu.pinned_bytes(), 1 << 20, "the pool, once");
    let st = engine.gpu_staging().unwrap();
    assert_eq!((st.bounce_pinned_bytes, st.bounce_acquired), (1 << 20, 1));
    assert_eq!(st.bounce_in_use_bytes, 0, "released after the copy");
    drop(q);
    drop(engine);
    assert_eq!(gpu.pinned_bytes(), 0, "the pool is freed with the engine");
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// PUTs from VRAM and range-gets back into VRAM through a 256 KiB pool, over HTTP and over the
/// soft RDMA fabric (our gateway in process): odd sizes and offsets, more bytes in flight than
/// the pool holds; every byte lands where it belongs and nothing around it is touched.
#[test]
fn device_gets_and_puts_through_a_small_pool_are_exact_over_http_and_soft() {
    use engine::Fabric;
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bkt")).unwrap();
    let gw = rig::soft_gateway(root.path());
    let gpu = TestGpu::heap(Duration::from_micros(100));
    let sizes = [1usize, 4095, 4096, 65_537, 200_000, 262_144, 100_003];
    let total: usize = sizes.iter().sum();
    let data = pattern(total, 9);
    let src = gpu.alloc_device(0, total).unwrap();
    // SAFETY: synchronous copy into our own test-double allocation (never through the pool).
    unsafe { gpu.memcpy_h2d(src, data.as_ptr(), total) }.unwrap();
    let pad = 5000usize;
    let dst = gpu.alloc_device(0, total + 2 * pad).unwrap();
    for fabric in [Fabric::Http, Fabric::Soft] {
        let fill = vec![0xeeu8; total + 2 * pad];
        // SAFETY: our own allocation, no engine operation on it in flight.
        unsafe { gpu.memcpy_h2d(dst, fill.as_ptr(), fill.len()) }.unwrap();
        let engine = rig::engine_builder(gw.local_addr())
            .fabric(fabric)
            .gpu(gpu.as_dyn())
            .gpu_bounce_bytes(256 << 10)
            .build()
            .unwrap();
        // SAFETY: both allocations outlive the engine.
        let (hs, hd) = unsafe {
            (
                engine.register_device(src, total).unwrap(),
                engine.register_device(dst, total + 2 * pad).unwrap(),
            )
        };
        let mut q = engine.queue(32).unwrap();
        let mut puts = Vec::new();
        let mut gets = Vec::new();
        let mut off = 0usize;
        for (i, &n) in sizes.iter().enumerate() {
            let obj = engine.object("bkt", &format!("{fabric:?}/{i}")).unwrap();
            puts.push(
                Put::new(obj, BufSlice::new(hs, off as u64, n as u64))
                    .user_data(i as u64)
                    .build(),
            );
            gets.push(
                RangeGet::new(obj, 0, BufSlice::new(hd, (pad + off) as u64, n as u64))
                    .user_data(i as u64)
                    .build(),
            );
            off += n;
        }
        for c in run_all(&mut q, &puts) {
            assert!(
                c.is_ok(),
                "{fabric:?} PUT {}: {:?}",
                c.user_data(),
                c.error_code()
            );
        }
        let mut off = 0usize;
        for (i, &n) in sizes.iter().enumerate() {
            let r = raw::call(
                gw.local_addr(),
                "GET",
                &format!("/bkt/{fabric:?}/{i}"),
                "",
                &[],
                b"",
            );
            assert_eq!(r.status(), 200, "{fabric:?}: object {i}");
            let stored = r.body;
            assert!(
                stored == data[off..off + n],
                "{fabric:?}: object {i} differs from VRAM"
            );
            off += n;
        }
        for c in run_all(&mut q, &gets) {
            assert!(
                c.is_ok(),
                "{fabric:?} GET {}: {:?}",
                c.user_data(),
                c.error_code()
            );
            if fabric == Fabric::Soft {
                assert_eq!(c.path(), Some(ring_api::DataPath::RdmaSoft), "{fabric:?}");
            }
        }
        let back = gpu.device_bytes(dst, total + 2 * pad);
        assert!(
            back[..pad].iter().all(|&b| b == 0xee),
            "{fabric:?}: bytes before touched"
        );
        assert!(
            back[pad + total..].iter().all(|&b| b == 0xee),
            "{fabric:?}: bytes after"
        );
        assert!(
            back[pad..pad + total] == data[..],
            "{fabric:?}: GET bytes differ"
        );
        let st = engine.gpu_staging().unwrap();
        assert_eq!(
            st.bounce_acquired,
            2 * sizes.len() as u64,
            "{fabric:?}: {st:?}"
        );
        assert!(st.bounce_peak_bytes <= 256 << 10, "{fabric:?}: {st:?}");
        assert!(st.bounce_waits > 0, "{fabric:?}: nothing waited: {st:?}");
        assert_eq!(
            (st.bounce_in_use_bytes, st.errors),
            (0, 0),
            "{fabric:?}: {st:?}"
        );
        drop(q);
        drop(engine);
    }
    gw.shutdown();
    // SAFETY: the engines are gone.
    unsafe {
        gpu.free_device(src).unwrap();
        gpu.free_device(dst).unwrap();
    }
}

/// Sixteen range-gets of 256 KiB through a pool of exactly 256 KiB: each must wait for the one
/// before it to be copied into VRAM and release its range, so they complete one at a time, in
/// the order they were submitted, every byte right.
#[test]
fn a_batch_larger_than_the_pool_waits_and_completes_in_order_of_arrival() {
    let server = S3sFs::start();
    let (n, size) = (16usize, 256usize << 10);
    let data = pattern(n * size, 17);
    put_file(&server, "bkt", "batch", &data);
    let gpu = TestGpu::heap(Duration::from_micros(300));
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_bounce_bytes(size as u64)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "batch").unwrap();
    let dev = gpu.alloc_device(0, n * size).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, n * size) }.unwrap();
    let mut q = engine.queue(32).unwrap();
    let sqes: Vec<_> = (0..n)
        .map(|i| {
            let off = (i * size) as u64;
            RangeGet::new(obj, off, BufSlice::new(buf, off, size as u64))
                .user_data(i as u64)
                .build()
        })
        .collect();
    let done = run_all(&mut q, &sqes);
    let order: Vec<u64> = done.iter().map(Cqe::user_data).collect();
    assert_eq!(
        order,
        (0..n as u64).collect::<Vec<_>>(),
        "not in order of arrival"
    );
    assert!(done.iter().all(Cqe::is_ok));
    assert_eq!(gpu.device_bytes(dev, n * size), data);
    let st = engine.gpu_staging().unwrap();
    assert_eq!(st.bounce_peak_bytes, size as u64, "{st:?}");
    assert!(st.bounce_waits >= n as u64 - 1, "{st:?}");
    assert_eq!(
        (st.bounce_waiting, st.bounce_in_use_bytes),
        (0, 0),
        "{st:?}"
    );
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// The pool pins a segment at a time, only as operations in flight need room: four ranges
/// held in bounce memory at once (copy engine paused) pin four segments and none waits; the
/// fifth waits at capacity. Afterwards an operation longer than a segment unpins the idle
/// segments and gets one of its own length.
#[test]
fn the_pool_grows_by_segments_up_to_its_capacity() {
    let server = S3sFs::start();
    let seg = 256usize << 10;
    let data = pattern(5 * seg, 29);
    put_file(&server, "bkt", "grow", &data);
    let gpu = TestGpu::heap(Duration::ZERO);
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_bounce_bytes(4 * seg as u64)
        .gpu_bounce_segment_bytes(seg as u64)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "grow").unwrap();
    let dev = gpu.alloc_device(0, 5 * seg).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, 5 * seg) }.unwrap();
    let mut q = engine.queue(8).unwrap();
    gpu.set_paused(true);
    for i in 0..5u64 {
        let off = i * seg as u64;
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, off, seg as u64))
                .user_data(i)
                .build(),
        )
        .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while engine.gpu_staging().unwrap().bounce_waiting < 1 {
        assert!(std::time::Instant::now() < deadline, "nothing waited");
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = engine.gpu_staging().unwrap();
    assert_eq!(
        (st.bounce_segments, st.bounce_pinned_bytes, st.bounce_waits),
        (4, 4 * seg as u64, 1),
        "{st:?}"
    );
    gpu.set_paused(false);
    reap(&mut q, 5, |c| assert!(c.is_ok(), "{c:?}"));
    // Longer than a segment: the idle segments go, one of the whole capacity comes.
    let done = run_all(
        &mut q,
        &[RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4 * seg as u64)).build()],
    );
    assert!(done.iter().all(Cqe::is_ok), "{done:?}");
    assert_eq!(gpu.device_bytes(dev, 5 * seg), data);
    let st = engine.gpu_staging().unwrap();
    assert_eq!(
        (
            st.bounce_segments,
            st.bounce_pinned_bytes,
            st.bounce_in_use_bytes
        ),
        (5, 4 * seg as u64, 0),
        "{st:?}"
    );
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// A GET or PUT longer than the whole pool completes at once with `TooLarge` (class `Local`),
/// pins nothing, and leaves the pool usable.
#[test]
fn an_operation_larger_than_the_pool_is_refused_with_too_large() {
    let server = S3sFs::start();
    let data = pattern(3 * K64, 21);
    put_file(&server, "bkt", "obj", &data);
    let gpu = TestGpu::heap(Duration::ZERO);
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_bounce_bytes(2 * K64 as u64)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let dev = gpu.alloc_device(0, 3 * K64).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, 3 * K64) }.unwrap();
    let mut q = engine.queue(8).unwrap();
    let out = engine.object("bkt", "out").unwrap();
    let mut done = run_all(
        &mut q,
        &[RangeGet::new(obj, 0, BufSlice::new(buf, 0, 3 * K64 as u64))
            .user_data(1)
            .build()],
    );
    done.extend(run_all(
        &mut q,
        &[Put::new(out, BufSlice::new(buf, 0, 2 * K64 as u64 + 1))
            .user_data(2)
            .build()],
    ));
    for c in &done {
        assert_eq!(c.error_code(), Some(ring_api::ErrorCode::TooLarge), "{c:?}");
        assert_eq!(c.error_class(), Some(ring_api::ErrorClass::Local), "{c:?}");
    }
    let st = engine.gpu_staging().unwrap();
    assert_eq!(
        (st.bounce_too_large, st.bounce_pinned_bytes),
        (2, 0),
        "{st:?}"
    );
    // Split into pieces that fit, the same bytes arrive.
    let done = run_all(
        &mut q,
        &[
            RangeGet::new(obj, 0, BufSlice::new(buf, 0, 2 * K64 as u64)).build(),
            RangeGet::new(
                obj,
                2 * K64 as u64,
                BufSlice::new(buf, 2 * K64 as u64, K64 as u64),
            )
            .build(),
        ],
    );
    assert!(done.iter().all(Cqe::is_ok), "{done:?}");
    assert_eq!(gpu.device_bytes(dev, 3 * K64), data);
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// With the copy engine paused, a GET that landed holds the whole pool; the operations behind
/// it wait. A Cancel completes a waiting one at once, a deadline expires another, and a
/// deregistration of a handle whose operations wait times out (they hold it) and leaves it
/// usable. Unpaused, everything else completes with the right bytes and the pool is empty.
#[test]
fn waiting_operations_can_be_cancelled_expire_and_hold_off_deregistration() {
    use ring_api::opcode::Cancel;
    let server = S3sFs::start();
    let data = pattern(4 * K64, 33);
    put_file(&server, "bkt", "obj", &data);
    let gpu = TestGpu::heap(Duration::from_micros(100));
    let engine = builder(&server)
        .gpu(gpu.as_dyn())
        .gpu_bounce_bytes(K64 as u64)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let dev1 = gpu.alloc_device(0, K64).unwrap();
    let dev2 = gpu.alloc_device(0, 3 * K64).unwrap();
    // SAFETY: freed after the engine is dropped.
    let (h1, h2) = unsafe {
        (
            engine.register_device(dev1, K64).unwrap(),
            engine.register_device(dev2, 3 * K64).unwrap(),
        )
    };
    let mut q = engine.queue(16).unwrap();
    gpu.set_paused(true);
    let get = |h, at: usize, off: usize| {
        RangeGet::new(obj, off as u64, BufSlice::new(h, at as u64, K64 as u64))
    };
    q.push(&get(h1, 0, 0).user_data(1).build()).unwrap();
    // Wait until it landed (its range stays held: its copy cannot run).
    let t = Instant::now();
    while engine.gpu_staging().unwrap().ranges_to_device == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the first GET never landed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for (i, sqe) in [
        get(h2, 0, K64).user_data(2).build(),
        get(h2, K64, 2 * K64).user_data(3).build(),
        get(h2, 2 * K64, 3 * K64)
            .user_data(4)
            .deadline_ns(300_000_000)
            .build(),
    ]
    .iter()
    .enumerate()
    {
        q.push(sqe).unwrap();
        let t = Instant::now();
        while engine.gpu_staging().unwrap().bounce_waiting < i as u64 + 1 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "op {} never queued",
                i + 2
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Their leases hold h2: a deregistration times out and leaves it registered.
    let err = engine
        .deregister(h2, Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(err, EngineError::BusyTimeout(_)), "{err:?}");
    // Cancel op 3 while it waits.
    q.push(&Cancel::new(3).user_data(100).build()).unwrap();
    // The Cancel, the cancelled op and (its deadline passing while it waits) op 4, in
    // whatever order.
    let mut got = HashMap::new();
    reap(&mut q, 3, |c| {
        got.insert(c.user_data(), c);
    });
    assert!(got[&100].is_ok(), "the Cancel itself: {:?}", got[&100]);
    assert_eq!(got[&3].error_code(), Some(ring_api::ErrorCode::Cancelled));
    assert_eq!(
        got[&4].error_code(),
        Some(ring_api::ErrorCode::TimedOut),
        "{:?}",
        got[&4]
    );
    assert_eq!(
        engine.gpu_staging().unwrap().bounce_waiting,
        1,
        "only op 2 still waits"
    );
    assert!(
        q.wait(1, Some(Duration::from_millis(100))) == 0,
        "nothing else may complete"
    );
    gpu.set_paused(false);
    let mut ok = Vec::new();
    reap(&mut q, 2, |c| {
        assert!(c.is_ok(), "{c:?}");
        ok.push(c.user_data());
    });
    ok.sort_unstable();
    assert_eq!(ok, vec![1, 2]);
    assert!(gpu.device_bytes(dev1, K64) == data[..K64]);
    assert!(gpu.device_bytes(dev2, K64) == data[K64..2 * K64]);
    let st = engine.gpu_staging().unwrap();
    assert_eq!(
        (st.bounce_waiting, st.bounce_in_use_bytes),
        (0, 0),
        "{st:?}"
    );
    engine.deregister(h2, Duration::from_secs(5)).unwrap();
    engine.deregister(h1, Duration::from_secs(5)).unwrap();
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe {
        gpu.free_device(dev1).unwrap();
        gpu.free_device(dev2).unwrap();
    }
}

/// `Engine::read`, `copy_out` and `copy_in` on a device registration go to VRAM (there is no
/// host copy of it): written bytes are in VRAM, read bytes come from VRAM.
#[test]
fn read_and_copy_in_on_a_device_registration_reach_vram() {
    let server = S3sFs::start();
    let gpu = TestGpu::heap(Duration::ZERO);
    let engine = builder(&server).gpu(gpu.as_dyn()).build().unwrap();
    let dev = gpu.alloc_device(0, 3 * K64).unwrap();
    // SAFETY: freed after the engine is dropped.
    let buf = unsafe { engine.register_device(dev, 3 * K64) }.unwrap();
    let data = pattern(K64 + 7, 41);
    engine.copy_in(buf, 1000, &data).unwrap();
    assert!(gpu.device_bytes(dev.offset(1000).unwrap(), data.len()) == data);
    let direct = pattern(100, 42);
    // SAFETY: our own allocation, no operation in flight.
    unsafe { gpu.memcpy_h2d(dev.offset(5).unwrap(), direct.as_ptr(), 100) }.unwrap();
    assert_eq!(&*engine.read(buf, 5, 100).unwrap(), &direct[..]);
    let mut out = vec![0u8; data.len()];
    engine.copy_out(buf, 1000, &mut out).unwrap();
    assert_eq!(out, data);
    assert!(matches!(
        engine.read(buf, 3 * K64 as u64 - 1, 2),
        Err(EngineError::OutOfBounds { .. })
    ));
    assert_eq!(gpu.pinned_bytes(), 0, "no host memory for any of it");
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

fn crc64(bytes: &[u8]) -> u64 {
    let mut c = s3_lite::checksum::Crc64Nvme::new();
    c.update(bytes);
    c.finish()
}

/// `sqe_flags::CRC64`: a range-get reports the CRC-64/NVME of exactly the bytes it delivered,
/// computed in host memory, into host memory and into (test-double) VRAM through the bounce
/// pool, from a server that sends no range checksum (s3s-fs); without the flag `aux` keeps the
/// object size. No read of the destination is needed to know the value.
#[test]
fn a_range_get_asked_for_its_crc_reports_the_crc_of_its_bytes() {
    let server = S3sFs::start();
    let n = 300_001usize;
    let data = pattern(n, 31);
    put_file(&server, "bkt", "crc", &data);
    let gpu = TestGpu::heap(Duration::ZERO);
    let engine = builder(&server).gpu(gpu.as_dyn()).build().unwrap();
    let obj = engine.object("bkt", "crc").unwrap();
    let host = engine
        .register_host(n, engine::RegisterOptions::pageable())
        .unwrap();
    let dev = gpu.alloc_device(0, n).unwrap();
    // SAFETY: freed after the engine is dropped.
    let vram = unsafe { engine.register_device(dev, n) }.unwrap();
    let cuts = [
        (0usize, 1usize),
        (1, 65_536),
        (65_537, 200_000),
        (265_537, 34_464),
    ];
    let mut q = engine.queue(32).unwrap();
    for (buf, tag) in [(host, 0u64), (vram, 100)] {
        let sqes: Vec<_> = cuts
            .iter()
            .enumerate()
            .map(|(i, &(at, len))| {
                RangeGet::new(obj, at as u64, BufSlice::new(buf, at as u64, len as u64))
                    .user_data(tag + i as u64)
                    .crc64()
                    .build()
            })
            .collect();
        for c in run_all(&mut q, &sqes) {
            assert!(c.is_ok(), "{c:?}");
            let (at, len) = cuts[(c.user_data() % 100) as usize];
            assert_eq!(c.crc64(), Some(crc64(&data[at..at + len])), "{c:?}");
            assert!(!c.verified(), "s3s-fs sends no range checksum: {c:?}");
        }
    }
    assert_eq!(gpu.device_bytes(dev, n), data);
    // Without the flag: no CRC, aux is the object size the server named.
    let c = run_all(
        &mut q,
        &[RangeGet::new(obj, 5, BufSlice::new(host, 5, 10)).build()],
    )
    .remove(0);
    assert_eq!((c.crc64(), c.aux()), (None, n as u64), "{c:?}");
    drop(q);
    drop(engine);
    // SAFETY: the engine is gone.
    unsafe { gpu.free_device(dev) }.unwrap();
}

/// Our gateway: over HTTP a range-get is verified by the gateway's range checksum and carries
/// the CRC as well (the same pass over the bytes); over the soft fabric the landing digest
/// verifies it and no second pass is made for a CRC.
#[test]
fn range_crcs_from_the_gateway_over_http_and_soft() {
    use engine::Fabric;
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bkt")).unwrap();
    let n = 1usize << 20;
    let data = pattern(n, 33);
    let gw = rig::soft_gateway(root.path());
    for fabric in [Fabric::Http, Fabric::Soft] {
        let engine = rig::engine_builder(gw.local_addr())
            .fabric(fabric)
            .build()
            .unwrap();
        let obj = engine.object("bkt", "o").unwrap();
        let buf = engine
            .register_host(n, engine::RegisterOptions::pageable())
            .unwrap();
        engine.copy_in(buf, 0, &data).unwrap();
        let mut q = engine.queue(8).unwrap();
        let put = run_all(
            &mut q,
            &[Put::new(obj, BufSlice::new(buf, 0, n as u64)).build()],
        );
        assert!(put[0].is_ok(), "{put:?}");
        engine.copy_in(buf, 0, &vec![0u8; n]).unwrap();
        let c = run_all(
            &mut q,
            &[RangeGet::new(obj, 7, BufSlice::new(buf, 7, 500_000))
                .crc64()
                .build()],
        )
        .remove(0);
        assert!(c.is_ok() && c.verified(), "{fabric:?}: {c:?}");
        match fabric {
            Fabric::Http => assert_eq!(c.crc64(), Some(crc64(&data[7..500_007])), "{c:?}"),
            _ => assert_eq!(c.crc64(), None, "{fabric:?}: {c:?}"),
        }
    }
}
