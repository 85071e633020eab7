//! GPU memory for `hipobj bench --embedded --memory cuda|hip|auto`.
//!
//! The staging itself is the engine's (`EngineBuilder::gpu`, `Engine::register_device`): the
//! VRAM image of the object is registered as device memory, each range-get lands in a range
//! of the engine's pinned bounce pool, the engine copies it into VRAM (at its object offset) on
//! its own stream (merging adjacent ranges) and posts the completion only when that copy has
//! finished. This module owns what the app still does with VRAM: reading the image back to
//! verify it ([`verify_image`]), and the PUT- and UploadPart-from-VRAM checks
//! ([`put_round_trip`], [`upload_parts_from_vram`], both through the engine's own ops).

use std::time::Instant;

use engine::gpu::{DeviceBuffer, GpuError};

pub use crate::bench::{memory_name, select_runtime};

/// Sorts `spans` (`(offset, len)`) and merges overlapping or touching ones.
#[must_use]
pub fn merge_spans(spans: &mut [(u64, u64)]) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for &(o, l) in spans.iter() {
        match merged.last_mut() {
            Some((mo, ml)) if o <= *mo + *ml => *ml = (*ml).max(o + l - *mo),
            _ => merged.push((o, l)),
        }
    }
    merged
}

/// Reads `image` back in 64 MiB pieces and checks every byte of `spans` with
/// `mismatch(offset, bytes)` (the index of the first wrong byte, if any). Returns the merged
/// `(offset, len)` spans that failed.
pub fn verify_image(
    image: &DeviceBuffer,
    spans: &mut [(u64, u64)],
    mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
) -> Result<Vec<(u64, u64)>, GpuError> {
    let merged = merge_spans(spans);
    let piece = 64usize << 20;
    let mut host = vec![0u8; piece];
    let mut failed = Vec::new();
    for (o, l) in merged {
        let mut at = o;
        while at < o + l {
            let n = usize::try_from((o + l - at).min(piece as u64)).unwrap_or(piece);
            let dst = host
                .get_mut(..n)
                .ok_or_else(|| GpuError::InvalidArgument("piece".into()))?;
            let off = usize::try_from(at)
                .map_err(|_| GpuError::InvalidArgument("offset too large".into()))?;
            image.read(off, dst)?;
            if mismatch(at, dst).is_some() {
                failed.push((o, l));
                break;
            }
            at += n as u64;
        }
    }
    Ok(failed)
}

/// What a from-VRAM check did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PutReport {
    /// Objects written (one per piece; one multipart object for UploadPart).
    pub objects: u64,
    /// UploadPart requests (0 for the PUT check).
    pub parts: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Bytes read back with GET and found equal to the source.
    pub verified: u64,
    /// Wall time of the whole check, seconds.
    pub elapsed_s: f64,
}

fn one(q: &mut engine::Queue, what: &str) -> Result<ring_api::Cqe, String> {
    if q.wait(1, Some(std::time::Duration::from_secs(60))) == 0 {
        return Err(format!("{what}: no completion within 60 s"));
    }
    q.completion()
        .next()
        .ok_or_else(|| format!("{what}: completion vanished"))
}

/// GETs `obj` (`len` bytes) through the engine into host registration `host` and compares
/// it with `mismatch(off, bytes)`.
fn get_back(
    engine: &engine::Engine,
    q: &mut engine::Queue,
    host: ring_api::BufHandle,
    obj: ring_api::ObjectId,
    off: u64,
    len: u64,
    mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
) -> Result<(), String> {
    use ring_api::BufSlice;
    use ring_api::opcode::Get;
    q.push(&Get::new(obj, BufSlice::new(host, 0, len)).build())
        .map_err(|e| e.to_string())?;
    let c = one(q, "GET")?;
    if !c.is_ok() || c.bytes() != len {
        return Err(format!(
            "GET back: {:?}, {} of {len} bytes",
            c.error_code(),
            c.bytes()
        ));
    }
    let view = engine.read(host, 0, len).map_err(|e| e.to_string())?;
    match mismatch(off, &view) {
        None => Ok(()),
        Some(at) => Err(format!("byte {at} differs from the object at {off}")),
    }
}

/// PUT from VRAM through the engine, verified: each `(offset, len)` piece of the device
/// registration `dev` (bytes the GET phase put into VRAM) is PUT as its own object
/// `{prefix}{i}` with the registration as the source — the engine copies VRAM → bounce before
/// it starts the PUT, into a bounce range of its own (a device registration has no host copy:
/// the PUT can only send what the stager copied out of VRAM). Each object is read back with a
/// GET into the host
/// registration `host` (≥ the largest piece) and compared with `mismatch(offset, bytes)`.
/// All PUTs run at once; no other operation may be in flight on `dev` meanwhile.
#[allow(clippy::too_many_arguments)]
pub fn put_round_trip(
    engine: &engine::Engine,
    q: &mut engine::Queue,
    dev: ring_api::BufHandle,
    host: ring_api::BufHandle,
    bucket: &str,
    prefix: &str,
    pieces: &[(u64, u64)],
    mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
) -> Result<PutReport, String> {
    use ring_api::BufSlice;
    use ring_api::opcode::Put;
    let t0 = Instant::now();
    let mut objs = Vec::with_capacity(pieces.len());
    for (i, &(off, len)) in pieces.iter().enumerate() {
        let obj = engine
            .object(bucket, &format!("{prefix}{i}"))
            .map_err(|e| e.to_string())?;
        objs.push(obj);
        q.push(
            &Put::new(obj, BufSlice::new(dev, off, len))
                .user_data(i as u64)
                .build(),
        )
        .map_err(|e| e.to_string())?;
    }
    for _ in pieces {
        let c = one(q, "PUT")?;
        if !c.is_ok() {
            return Err(format!(
                "PUT {prefix}{} from VRAM failed: {:?}",
                c.user_data(),
                c.error_code()
            ));
        }
    }
    let mut report = PutReport {
        objects: 0,
        parts: 0,
        bytes: 0,
        verified: 0,
        elapsed_s: 0.0,
    };
    for (&(off, len), &obj) in pieces.iter().zip(&objs) {
        report.objects += 1;
        report.bytes += len;
        get_back(engine, q, host, obj, off, len, mismatch)?;
        report.verified += len;
    }
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// UploadPart from VRAM through the engine's own multipart ops, verified: `len` bytes of the
/// device registration `dev` from `off` become one multipart object `key` — CreateMultipart,
/// then one UploadPart per `part_size` piece (the last may be shorter) whose source is the
/// device registration itself (the engine copies each part VRAM → bounce before it sends it,
/// as for PUT, each part into a bounce range of its own), all parts in flight at once, then
/// CompleteMultipart.
/// The object is read back through the engine into `host` (≥ `len`) and compared with
/// `mismatch(offset, bytes)`. No other operation may be in flight on `dev` meanwhile, and the
/// queue must hold `len / part_size + 1` entries.
#[allow(clippy::too_many_arguments)]
pub fn upload_parts_from_vram(
    engine: &engine::Engine,
    q: &mut engine::Queue,
    dev: ring_api::BufHandle,
    host: ring_api::BufHandle,
    bucket: &str,
    key: &str,
    (off, len, part_size): (u64, u64, u64),
    mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
) -> Result<PutReport, String> {
    use ring_api::opcode::{AbortMultipart, CompleteMultipart, CreateMultipart, UploadPart};
    use ring_api::{BufSlice, PartNumber, UploadHandle};
    if part_size == 0 || len == 0 {
        return Err("UploadPart from VRAM: empty part size or length".into());
    }
    let t0 = Instant::now();
    let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
    q.push(&CreateMultipart::new(obj).build())
        .map_err(|e| e.to_string())?;
    let c = one(q, "CreateMultipart")?;
    if !c.is_ok() {
        return Err(format!("CreateMultipart: {:?}", c.error_code()));
    }
    let handle = UploadHandle(
        u32::try_from(c.aux()).map_err(|_| format!("CreateMultipart: handle {}", c.aux()))?,
    );
    let parts = len.div_ceil(part_size);
    let result = (|| {
        let mut sizes = Vec::new();
        for i in 0..parts {
            let at = i * part_size;
            let n = part_size.min(len - at);
            let number = u32::try_from(i + 1)
                .ok()
                .and_then(PartNumber::new)
                .ok_or_else(|| format!("part {} out of range", i + 1))?;
            q.push(
                &UploadPart::new(obj, handle, number, BufSlice::new(dev, off + at, n))
                    .user_data(i + 1)
                    .build(),
            )
            .map_err(|e| e.to_string())?;
            sizes.push(n);
        }
        for _ in 0..parts {
            let c = one(q, "UploadPart")?;
            let want = usize::try_from(c.user_data())
                .ok()
                .and_then(|i| sizes.get(i.wrapping_sub(1)).copied());
            if !c.is_ok() || Some(c.bytes()) != want {
                return Err(format!(
                    "UploadPart {} from VRAM: {:?}, {} bytes (want {want:?})",
                    c.user_data(),
                    c.error_code(),
                    c.bytes()
                ));
            }
        }
        let last = u32::try_from(parts)
            .ok()
            .and_then(PartNumber::new)
            .ok_or("too many parts")?;
        q.push(&CompleteMultipart::new(obj, handle, last).build())
            .map_err(|e| e.to_string())?;
        let c = one(q, "CompleteMultipart")?;
        if !c.is_ok() {
            return Err(format!("CompleteMultipart: {:?}", c.error_code()));
        }
        Ok(())
    })();
    if let Err(e) = result {
        // Best effort: do not leave the upload's parts on the server.
        if q.push(&AbortMultipart::new(obj, handle).build()).is_ok() {
            let _ = one(q, "AbortMultipart");
        }
        return Err(e);
    }
    get_back(engine, q, host, obj, off, len, mismatch)?;
    Ok(PutReport {
        objects: 1,
        parts,
        bytes: len,
        verified: len,
        elapsed_s: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::MemoryKind;
    use engine::gpu::GpuRuntime;

    #[test]
    fn spans_merge_when_they_overlap_or_touch() {
        let mut v = vec![(100, 10), (0, 10), (10, 5), (105, 20), (200, 1)];
        assert_eq!(merge_spans(&mut v), vec![(0, 15), (100, 25), (200, 1)]);
    }

    #[test]
    fn host_memory_needs_no_runtime() {
        assert!(matches!(select_runtime(MemoryKind::Host), Ok(None)));
    }

    #[test]
    fn cuda_without_a_gpu_says_no_gpu_runtime() {
        // On a machine with an NVIDIA GPU this test has nothing to check.
        if engine::gpu::cuda::CudaRuntime::load().is_ok_and(|r| r.device_count() > 0) {
            return;
        }
        let err = select_runtime(MemoryKind::Cuda).err().unwrap_or_default();
        assert!(err.starts_with("--memory cuda: no GPU runtime: "), "{err}");
    }

    #[test]
    fn auto_without_a_gpu_falls_back_to_host() {
        if engine::gpu::detect().is_some() {
            return;
        }
        assert!(matches!(select_runtime(MemoryKind::Auto), Ok(None)));
    }
}
