//! GPU memory for `hipobj bench --embedded --memory cuda|hip|auto`.
//!
//! The staging itself is the engine's (`EngineBuilder::gpu`, `Engine::register_device`): the
//! VRAM image of the object is registered as device memory, each range-get lands in the
//! engine's pinned bounce mirror at its object offset, the engine copies it into VRAM on its
//! own stream (merging adjacent ranges) and posts the completion only when that copy has
//! finished. This module owns what the app still does with VRAM: reading the image back to
//! verify it ([`verify_image`]), and the PUT- and UploadPart-from-VRAM checks
//! ([`put_round_trip`], [`upload_parts_from_vram`]).

use std::io::{Read, Seek, SeekFrom};
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
/// it starts the PUT. The bounce mirror of the piece is zeroed first, so only bytes copied
/// out of VRAM can make the check pass. Each object is read back with a GET into the host
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
        let wipe = vec![0u8; usize::try_from(len).map_err(|_| "piece too large")?];
        engine.copy_in(dev, off, &wipe).map_err(|e| e.to_string())?;
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

/// `Read + Seek` over `len` bytes of a VRAM buffer from `base`: each read is a synchronous
/// device → host copy of the bytes asked for.
pub struct VramReader<'a> {
    image: &'a DeviceBuffer,
    base: u64,
    len: u64,
    pos: u64,
}

impl<'a> VramReader<'a> {
    /// A reader over `image[base..base + len]`.
    #[must_use]
    pub fn new(image: &'a DeviceBuffer, base: u64, len: u64) -> Self {
        Self {
            image,
            base,
            len,
            pos: 0,
        }
    }
}

impl Read for VramReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.len.saturating_sub(self.pos)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let off = usize::try_from(self.base + self.pos).map_err(std::io::Error::other)?;
        let dst = buf
            .get_mut(..n)
            .ok_or_else(|| std::io::Error::other("short buffer"))?;
        self.image.read(off, dst).map_err(std::io::Error::other)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for VramReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let next = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = next.ok_or_else(|| std::io::Error::other("seek out of range"))?;
        Ok(self.pos)
    }
}

/// UploadPart from VRAM, verified: `len` bytes of `image` from `off` become one multipart
/// object in parts of `part_size`, each part read out of VRAM (device → host copy) by the
/// control-plane client's UploadPart (this check predates the engine's own UploadPart op, which
/// stages device sources like PUT: `engine/tests/gpu_staging.rs`); then the object is read back
/// through the engine into `host` and compared.
#[allow(clippy::too_many_arguments)]
pub fn upload_parts_from_vram(
    engine: &engine::Engine,
    q: &mut engine::Queue,
    client: &mut crate::client::S3Client,
    image: &DeviceBuffer,
    host: ring_api::BufHandle,
    bucket: &str,
    key: &str,
    (off, len, part_size): (u64, u64, u64),
    mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
) -> Result<PutReport, String> {
    let t0 = Instant::now();
    let mut reader = VramReader::new(image, off, len);
    let r = client
        .put_multipart(bucket, key, &mut reader, len, part_size, &mut |_| {})
        .map_err(|e| format!("UploadPart from VRAM: {e}"))?;
    let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
    get_back(engine, q, host, obj, off, len, mismatch)?;
    Ok(PutReport {
        objects: 1,
        parts: u64::from(r.parts),
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
