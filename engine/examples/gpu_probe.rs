//! GPU probe and copy benchmark: prints one JSON document (stdout, and `--out FILE`).
//!
//! What it measures (see docs/gpu.md): the runtime and device, pointer-kind detection, dmabuf
//! export of device memory (whole buffer and a sub-allocation), pinned and pageable
//! host → device bandwidth, pinned device → host bandwidth, and 10,000 × 64 KiB copies one
//! launch each versus coalesced into 1 MiB copies. The engine's own staging (the worker's
//! stager and its bounce pool) is measured end to end by `benches/gpu/run_lane.sh`.
//!
//! On a host without a GPU it prints `{"gpu": null, "reason": ...}` and exits 0.
//!
//! Usage: `gpu_probe [--out FILE] [--quick]` (`--quick` shrinks every size for a smoke run).

use std::io::{Seek, SeekFrom};
use std::sync::Arc;
use std::time::Instant;

use engine::gpu::coalesce::{self, CopyRange};
use engine::gpu::staging;
use engine::gpu::{self, DeviceBuffer, GpuError, GpuRuntime, GpuStream, PinnedBuffer, PointerKind};
use serde_json::{Value, json};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Deterministic, fast, non-zero pseudo-random bytes (splitmix64), so copies are checked on
/// data that is neither zero nor repetitive.
fn fill_random(buf: &mut [u8], seed: u64) {
    let mut s = seed;
    for chunk in buf.chunks_mut(8) {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let b = z.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn kind_str(k: Result<PointerKind, GpuError>) -> String {
    match k {
        Ok(PointerKind::Host) => "host".into(),
        Ok(PointerKind::Device { ordinal }) => format!("device:{ordinal}"),
        Ok(PointerKind::Managed) => "managed".into(),
        Ok(PointerKind::Unknown) => "unknown".into(),
        Ok(other) => format!("{other:?}"),
        Err(e) => format!("error: {e}"),
    }
}

fn pointer_kinds(rt: &Arc<dyn GpuRuntime>) -> Res<Value> {
    let dev = DeviceBuffer::new(rt, 0, 4 * MIB)?;
    let pinned = PinnedBuffer::new(rt, MIB)?;
    let pageable = vec![1u8; MIB];
    let stack = 7u64;
    Ok(json!({
        "device_alloc": kind_str(rt.pointer_kind(dev.ptr().addr)),
        "device_alloc_plus_1mib": kind_str(rt.pointer_kind(dev.ptr().addr + MIB as u64)),
        "pinned_host": kind_str(rt.pointer_kind(pinned.as_ptr() as u64)),
        "pageable_heap": kind_str(rt.pointer_kind(pageable.as_ptr() as u64)),
        "stack": kind_str(rt.pointer_kind(&raw const stack as u64)),
        "null": kind_str(rt.pointer_kind(0)),
    }))
}

fn dmabuf_one(dev: &DeviceBuffer, off: usize, len: usize) -> Value {
    match dev.export_dmabuf(off, len) {
        Ok(region) => {
            let raw = region.raw_fd();
            let link =
                std::fs::read_link(format!("/proc/self/fd/{raw}")).map(|p| p.display().to_string());
            let (offset, exported) = (region.offset, region.exported_size);
            let mut file = std::fs::File::from(region.fd);
            let size = file.seek(SeekFrom::End(0));
            json!({
                "ok": true,
                "request_offset": off,
                "request_len": len,
                "fd": raw,
                "fd_link": link.unwrap_or_else(|e| format!("error: {e}")),
                "dmabuf_offset": offset,
                "exported_size": exported,
                "fd_size_by_lseek": size.map(|s| json!(s)).unwrap_or_else(|e| json!(format!("error: {e}"))),
            })
        }
        Err(e) => {
            json!({"ok": false, "request_offset": off, "request_len": len, "error": e.to_string(), "code": e.code()})
        }
    }
}

fn dmabuf(rt: &Arc<dyn GpuRuntime>) -> Res<Value> {
    let dev = DeviceBuffer::new(rt, 0, 64 * MIB)?;
    Ok(json!({
        "capable": rt.capabilities().dmabuf_export,
        "alloc_bytes": 64 * MIB,
        "whole": dmabuf_one(&dev, 0, 64 * MIB),
        "sub_allocation": dmabuf_one(&dev, MIB + 100, 64 * KIB),
        "sub_allocation_page_aligned": dmabuf_one(&dev, 3 * MIB, 2 * MIB),
    }))
}

/// Pinned host → device: throughput of `reps` back-to-back async copies (median of trials) and
/// the median latency of one copy (queue + wait).
fn pinned_h2d(
    rt: &Arc<dyn GpuRuntime>,
    src: &PinnedBuffer,
    dst: &DeviceBuffer,
    size: usize,
    reps: usize,
) -> Res<Value> {
    let stream = GpuStream::new(rt, 0)?;
    let ranges: Vec<CopyRange> = (0..reps)
        .map(|_| CopyRange {
            src: 0,
            dst: 0,
            len: size as u64,
        })
        .collect();
    staging::copy_ranges(&stream, src, dst, &ranges[..1])?; // warm-up
    let mut trials = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        staging::copy_ranges(&stream, src, dst, &ranges)?;
        trials.push(gbps(size * reps, t.elapsed().as_secs_f64()));
    }
    let mut lat = Vec::new();
    for _ in 0..reps.min(200) {
        let t = Instant::now();
        staging::copy_ranges(&stream, src, dst, &ranges[..1])?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(
        json!({"bytes": size, "copies_per_trial": reps, "gbps": median(trials), "latency_us_median": median(lat)}),
    )
}

fn pageable_h2d(dst: &DeviceBuffer, src: &[u8], size: usize, reps: usize) -> Res<Value> {
    let part = src.get(..size).ok_or("pageable source too small")?;
    dst.write(0, part)?;
    let mut trials = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..reps {
            dst.write(0, part)?;
        }
        trials.push(gbps(size * reps, t.elapsed().as_secs_f64()));
    }
    Ok(json!({"bytes": size, "copies_per_trial": reps, "gbps": median(trials)}))
}

/// Pinned device → host: `reps` synchronous copies of `size` bytes into pinned memory
/// (median).
fn pinned_d2h(rt: &Arc<dyn GpuRuntime>, size: usize, reps: usize) -> Res<Value> {
    let dev = DeviceBuffer::new(rt, 0, size)?;
    let mut host = PinnedBuffer::new(rt, size)?;
    dev.read(0, host.as_mut_slice())?;
    let mut trials = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        dev.read(0, host.as_mut_slice())?;
        trials.push(gbps(size, t.elapsed().as_secs_f64()));
    }
    Ok(json!({"bytes": size, "gbps": median(trials)}))
}

fn small_batch(rt: &Arc<dyn GpuRuntime>, n: usize, size: usize, batch: usize) -> Res<Value> {
    let total = n * size;
    let mut src = PinnedBuffer::new(rt, total)?;
    fill_random(src.as_mut_slice(), 42);
    let dst = DeviceBuffer::new(rt, 0, total)?;
    let stream = GpuStream::new(rt, 0)?;
    let ranges: Vec<CopyRange> = (0..n)
        .map(|i| CopyRange {
            src: (i * size) as u64,
            dst: (i * size) as u64,
            len: size as u64,
        })
        .collect();
    let planned = coalesce::plan(&ranges, batch as u64);
    let mut out = serde_json::Map::new();
    for (name, list) in [("one_copy_per_range", &ranges), ("coalesced", &planned)] {
        staging::copy_ranges(&stream, &src, &dst, list)?; // warm-up
        let mut trials = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            staging::copy_ranges(&stream, &src, &dst, list)?;
            trials.push(t.elapsed().as_secs_f64());
        }
        let secs = median(trials);
        let mut back = vec![0u8; total];
        dst.read(0, &mut back)?;
        out.insert(
            name.into(),
            json!({
                "copies": list.len(),
                "seconds": secs,
                "gbps": gbps(total, secs),
                "ranges_per_s": n as f64 / secs,
                "verified": back.as_slice() == src.as_slice(),
            }),
        );
        // Poison VRAM so the next variant's verification proves its own copy.
        dst.write(0, &vec![0xa5u8; total])?;
    }
    out.insert("ranges".into(), json!(n));
    out.insert("range_bytes".into(), json!(size));
    out.insert("batch_bytes".into(), json!(batch));
    Ok(Value::Object(out))
}

fn bench(rt: &Arc<dyn GpuRuntime>, quick: bool) -> Res<Value> {
    let s = |full: usize, q: usize| if quick { q } else { full };
    let big = s(256 * MIB, 16 * MIB);
    let mut pinned = PinnedBuffer::new(rt, big)?;
    fill_random(pinned.as_mut_slice(), 1);
    let dev = DeviceBuffer::new(rt, 0, s(1024 * MIB, 64 * MIB))?;
    let mut pageable = vec![0u8; s(1024 * MIB, 64 * MIB)];
    fill_random(&mut pageable, 2);

    let sizes = [(64 * KIB, 2000), (MIB, 500), (16 * MIB, 40), (256 * MIB, 6)];
    let mut ceiling_rows = Vec::new();
    let mut ceiling: f64 = 0.0;
    for (size, reps) in sizes {
        if size > big {
            continue;
        }
        let row = pinned_h2d(rt, &pinned, &dev, size, s(reps, reps.min(20)))?;
        if size >= 16 * MIB {
            ceiling = ceiling.max(row["gbps"].as_f64().unwrap_or(0.0));
        }
        ceiling_rows.push(row);
    }
    if ceiling == 0.0 {
        ceiling = ceiling_rows
            .last()
            .and_then(|r| r["gbps"].as_f64())
            .unwrap_or(f64::NAN);
    }
    let mut pageable_rows = Vec::new();
    for (size, reps) in [(64 * KIB, 500), (MIB, 200), (16 * MIB, 20), (256 * MIB, 4)] {
        if size <= pageable.len() {
            pageable_rows.push(pageable_h2d(&dev, &pageable, size, s(reps, reps.min(10)))?);
        }
    }
    let d2h = pinned_d2h(rt, big, 5)?;

    let small = small_batch(rt, s(10_000, 1000), 64 * KIB, MIB)?;
    Ok(json!({
        "ceiling_gbps": ceiling,
        "pinned_h2d": ceiling_rows,
        "pageable_h2d": pageable_rows,
        "pinned_d2h": d2h,
        "small_ranges": small,
    }))
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let started = Instant::now();
    let doc = match gpu::try_detect() {
        Err(e) => json!({"gpu": null, "reason": e.to_string()}),
        Ok(rt) => {
            let caps = rt.capabilities();
            let mut doc = json!({
                "gpu": {
                    "backend": rt.backend().to_string(),
                    "runtime": rt.name(),
                    "version": rt.version(),
                    "device_count": rt.device_count(),
                    "device_name": rt.device_name(0).map_err(|e| e.to_string()),
                    "pci_bus_id": rt.pci_bus_id(0).map(|p| p.to_string()).map_err(|e| e.to_string()),
                    "dmabuf_export": caps.dmabuf_export,
                    "ipc_memory": caps.ipc_memory,
                    "missing_optional": caps.missing_optional,
                },
                "quick": quick,
            });
            doc["pointer_kinds"] = pointer_kinds(&rt)?;
            doc["dmabuf"] = dmabuf(&rt)?;
            doc["bench"] = bench(&rt, quick)?;
            doc
        }
    };
    let mut doc = doc;
    doc["elapsed_s"] = json!(started.elapsed().as_secs_f64());
    let text = serde_json::to_string_pretty(&doc)?;
    println!("{text}");
    if let Some(path) = out {
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}
