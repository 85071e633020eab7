//! Host-staged delivery of range-gets into VRAM, for `hipobj bench --embedded --memory cuda|hip`.
//!
//! The engine writes each range into pinned host bounce memory (allocated by the GPU runtime so
//! the copy engine can DMA from it, and registered with the engine through `register_raw`).
//! When a batch of range-gets has completed, [`VramSink::push`] queues their host → device
//! copies on one dedicated stream — ranges adjacent both in the bounce buffer and in VRAM are
//! merged into one copy ([`engine::gpu::coalesce::plan`]), so many small ranges do not pay one
//! copy launch each — and records an event after them. A range counts as delivered only once
//! that event has completed ([`VramSink::poll`]); only then may its bounce slot be reused.
//!
//! The VRAM destination is an image of the whole object: a range lands at its object offset, so
//! after the batch every written byte can be read back and compared with the source
//! ([`VramSink::verify`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use engine::gpu::coalesce::{CopyRange, plan};
use engine::gpu::{Backend, DeviceBuffer, GpuError, GpuEvent, GpuRuntime, GpuStream, PinnedBuffer};

use crate::bench::MemoryKind;

/// Largest merged copy: big enough that the copy engine runs at its ceiling (≥ 4 MiB reached
/// 96% of it on the H200), small enough that the first bytes start moving early.
const MAX_COPY: u64 = 8 << 20;

/// The GPU runtime `--memory` asks for: `None` for host memory.
///
/// `cuda` / `hip` fail with a "no GPU runtime" message naming the reason when that runtime or a
/// device is missing; `auto` falls back to host memory then.
pub fn select_runtime(kind: MemoryKind) -> Result<Option<Arc<dyn GpuRuntime>>, String> {
    fn need(
        r: Result<Arc<dyn GpuRuntime>, GpuError>,
        flag: &str,
    ) -> Result<Option<Arc<dyn GpuRuntime>>, String> {
        match r {
            Ok(rt) if rt.device_count() > 0 => Ok(Some(rt)),
            Ok(rt) => Err(format!(
                "--memory {flag}: no GPU runtime: {} reports 0 devices",
                rt.name()
            )),
            Err(e) => Err(format!("--memory {flag}: no GPU runtime: {e}")),
        }
    }
    match kind {
        MemoryKind::Host => Ok(None),
        MemoryKind::Cuda => need(
            engine::gpu::cuda::CudaRuntime::load().map(|r| Arc::new(r) as Arc<dyn GpuRuntime>),
            "cuda",
        ),
        MemoryKind::Hip => need(
            engine::gpu::hip::HipRuntime::load().map(|r| Arc::new(r) as Arc<dyn GpuRuntime>),
            "hip",
        ),
        MemoryKind::Auto => Ok(engine::gpu::detect()),
    }
}

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

/// The `memory` name of a runtime in reports.
#[must_use]
pub fn memory_name(rt: &dyn GpuRuntime) -> &'static str {
    match rt.backend() {
        Backend::Cuda => "cuda",
        Backend::Hip => "hip",
        _ => "gpu",
    }
}

/// One completed range-get whose bytes sit in the bounce buffer.
#[derive(Debug, Clone, Copy)]
pub struct Landed {
    /// Caller's tag (the bounce slot).
    pub slot: u64,
    /// Offset of the bytes in the bounce buffer.
    pub bounce_off: u64,
    /// Offset of the bytes in the object, which is also their offset in the VRAM image.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// When the range-get was submitted (for latency).
    pub started: Instant,
}

struct Batch {
    event: GpuEvent,
    items: Vec<Landed>,
}

/// Pinned bounce memory, a VRAM image of the object, one copy stream and its in-flight batches.
///
/// Drop order matters to the caller: the engine that has the bounce memory registered must be
/// dropped (or the registration removed) before this value.
pub struct VramSink {
    rt: Arc<dyn GpuRuntime>,
    // Field order is drop order: the stream (synchronised in `Drop`) and events go first.
    stream: GpuStream,
    batches: VecDeque<Batch>,
    spare: Vec<GpuEvent>,
    image: DeviceBuffer,
    bounce: PinnedBuffer,
    coalesce: bool,
    /// Copy launches queued so far.
    pub copies: u64,
    /// Ranges handed to [`VramSink::push`] so far.
    pub ranges: u64,
}

impl VramSink {
    /// Allocates `bounce_len` bytes of pinned host memory and a zeroed `image_len`-byte VRAM
    /// image on device 0, and creates the copy stream.
    pub fn new(
        rt: &Arc<dyn GpuRuntime>,
        bounce_len: usize,
        image_len: usize,
        coalesce: bool,
    ) -> Result<Self, GpuError> {
        let image = DeviceBuffer::new(rt, 0, image_len)?;
        // Zero the image, so a copy that never happened cannot pass verification by accident.
        let zeros = vec![0u8; image_len.min(64 << 20)];
        let mut off = 0;
        while off < image_len {
            let n = zeros.len().min(image_len - off);
            image.write(off, &zeros[..n])?;
            off += n;
        }
        Ok(VramSink {
            rt: Arc::clone(rt),
            stream: GpuStream::new(rt, 0)?,
            batches: VecDeque::new(),
            spare: Vec::new(),
            image,
            bounce: PinnedBuffer::new(rt, bounce_len)?,
            coalesce,
            copies: 0,
            ranges: 0,
        })
    }

    /// Start of the bounce memory, to register with the engine (`Engine::register_raw`).
    pub fn bounce_ptr(&mut self) -> *mut u8 {
        self.bounce.as_mut_ptr()
    }

    /// Length of the bounce memory.
    #[must_use]
    pub fn bounce_len(&self) -> usize {
        self.bounce.len()
    }

    /// Whether copies are still in flight.
    #[must_use]
    pub fn busy(&self) -> bool {
        !self.batches.is_empty()
    }

    /// Queues the copies of `items` into the VRAM image and records an event after them.
    ///
    /// The caller must not let the engine write any item's bounce bytes again until
    /// [`VramSink::poll`] has returned that item.
    pub fn push(&mut self, items: Vec<Landed>) -> Result<(), GpuError> {
        if items.is_empty() {
            return Ok(());
        }
        let mut ranges: Vec<CopyRange> = items
            .iter()
            .map(|l| CopyRange {
                src: l.bounce_off,
                dst: l.offset,
                len: l.len,
            })
            .collect();
        let copies = if self.coalesce {
            ranges.sort_unstable_by_key(|r| r.src);
            plan(&ranges, MAX_COPY)
        } else {
            ranges
        };
        for c in &copies {
            let (src_off, len) = (usize::try_from(c.src), usize::try_from(c.len));
            let (Ok(src_off), Ok(len)) = (src_off, len) else {
                return Err(GpuError::InvalidArgument(
                    "copy range exceeds the address space".into(),
                ));
            };
            if src_off
                .checked_add(len)
                .is_none_or(|end| end > self.bounce.len())
            {
                return Err(GpuError::InvalidArgument(format!(
                    "bounce range {src_off}+{len} out of bounds"
                )));
            }
            let dst = self.image.ptr_at(
                usize::try_from(c.dst)
                    .map_err(|_| GpuError::InvalidArgument("offset too large".into()))?,
                len,
            )?;
            // SAFETY: `src_off + len` lies inside the pinned bounce allocation (checked above),
            // which this value owns and frees only after `Drop` has synchronised the stream. The
            // caller's contract (above) keeps the engine from writing these bytes until `poll`
            // has seen this batch's event complete, i.e. until the copy has finished. `dst` was
            // bounds-checked by `ptr_at` against the VRAM image, which also outlives the stream.
            unsafe {
                self.stream
                    .copy_h2d_async(dst, self.bounce.as_ptr().add(src_off), len)?
            };
            self.copies += 1;
        }
        let event = match self.spare.pop() {
            Some(e) => e,
            None => GpuEvent::new(&self.rt, 0, false)?,
        };
        self.stream.record(&event)?;
        self.ranges += items.len() as u64;
        self.batches.push_back(Batch { event, items });
        Ok(())
    }

    /// Ranges whose copies have finished, oldest batch first. With `block`, waits for at least
    /// the oldest batch when one is in flight.
    pub fn poll(&mut self, block: bool, out: &mut Vec<Landed>) -> Result<(), GpuError> {
        let mut first = block;
        while let Some(b) = self.batches.front() {
            if first {
                b.event.synchronize()?;
                first = false;
            } else if !b.event.is_complete()? {
                break;
            }
            if let Some(b) = self.batches.pop_front() {
                out.extend_from_slice(&b.items);
                self.spare.push(b.event);
            }
        }
        Ok(())
    }

    /// Reads the image back in 64 MiB pieces and checks every byte of the given ranges with
    /// `mismatch(offset, bytes)` (the index of the first wrong byte, if any). Returns the
    /// merged `(offset, len)` spans that failed.
    pub fn verify(
        &mut self,
        spans: &mut [(u64, u64)],
        mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
    ) -> Result<Vec<(u64, u64)>, GpuError> {
        self.stream.synchronize()?;
        let merged = merge_spans(spans);
        let piece = 64usize << 20;
        let mut host = vec![0u8; piece];
        let mut failed = Vec::new();
        for (o, l) in merged {
            let mut at = o;
            while at < o + l {
                let n = usize::try_from((o + l - at).min(piece as u64)).unwrap_or(piece);
                let dst = &mut host[..n];
                self.image.read(
                    usize::try_from(at)
                        .map_err(|_| GpuError::InvalidArgument("offset too large".into()))?,
                    dst,
                )?;
                if mismatch(at, dst).is_some() {
                    failed.push((o, l));
                    break;
                }
                at += n as u64;
            }
        }
        Ok(failed)
    }
}

impl VramSink {
    /// Copies `len` bytes of the VRAM image at `image_off` into the bounce buffer at
    /// `bounce_off` and waits for the copy (the first half of a PUT from VRAM).
    ///
    /// The caller must have no engine operation in flight on those bounce bytes.
    pub fn copy_out(&mut self, image_off: u64, bounce_off: u64, len: u64) -> Result<(), GpuError> {
        let big = |_| GpuError::InvalidArgument("range exceeds the address space".into());
        let (image_off, bounce_off, len) = (
            usize::try_from(image_off).map_err(big)?,
            usize::try_from(bounce_off).map_err(big)?,
            usize::try_from(len).map_err(big)?,
        );
        if bounce_off
            .checked_add(len)
            .is_none_or(|end| end > self.bounce.len())
        {
            return Err(GpuError::InvalidArgument(format!(
                "bounce range {bounce_off}+{len} out of bounds"
            )));
        }
        let src = self.image.ptr_at(image_off, len)?;
        // SAFETY: the destination lies inside the pinned bounce allocation (checked above),
        // which nothing else reads or writes meanwhile (the caller's contract: no engine op on
        // it), and the stream is synchronised before this returns, so the copy has finished
        // before anyone can look at the bytes; `src` was bounds-checked against the image.
        unsafe {
            self.stream
                .copy_d2h_async(self.bounce.as_mut_ptr().add(bounce_off), src, len)?
        };
        self.stream.synchronize()
    }
}

/// What the PUT-from-VRAM check did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PutReport {
    /// Objects PUT (one per piece).
    pub objects: u64,
    /// Bytes PUT.
    pub bytes: u64,
    /// Bytes read back with GET and found equal to the source.
    pub verified: u64,
    /// Wall time of the whole check (sequential: copy out, PUT, GET back, compare), seconds.
    pub elapsed_s: f64,
}

/// PUT from VRAM, verified: each `(offset, len)` piece of the VRAM image (bytes the GET phase
/// put there and verified) is copied into bounce slot 0, PUT as its own object
/// `{prefix}{i}` from that registered memory, the slot is wiped, the object is read back with a
/// GET into the same slot and compared with `mismatch(offset, bytes)`. Sequential: a
/// functional check of the path, not a throughput figure. No operation may be in flight on
/// `buf` when it is called.
#[allow(clippy::too_many_arguments)]
pub fn put_round_trip(
    engine: &engine::Engine,
    q: &mut engine::Queue,
    buf: ring_api::BufHandle,
    sink: &mut VramSink,
    bucket: &str,
    prefix: &str,
    pieces: &[(u64, u64)],
    mismatch: &dyn Fn(u64, &[u8]) -> Option<usize>,
) -> Result<PutReport, String> {
    use ring_api::opcode::{Get, Put};
    use ring_api::{BufSlice, Cqe};
    fn one(q: &mut engine::Queue, what: &str) -> Result<Cqe, String> {
        if q.wait(1, Some(std::time::Duration::from_secs(60))) == 0 {
            return Err(format!("{what}: no completion within 60 s"));
        }
        q.completion()
            .next()
            .ok_or_else(|| format!("{what}: completion vanished"))
    }
    let t0 = Instant::now();
    let mut report = PutReport {
        objects: 0,
        bytes: 0,
        verified: 0,
        elapsed_s: 0.0,
    };
    for (i, &(off, len)) in pieces.iter().enumerate() {
        let key = format!("{prefix}{i}");
        let obj = engine.object(bucket, &key).map_err(|e| e.to_string())?;
        sink.copy_out(off, 0, len)
            .map_err(|e| format!("copy out of VRAM: {e}"))?;
        q.push(&Put::new(obj, BufSlice::new(buf, 0, len)).build())
            .map_err(|e| e.to_string())?;
        let c = one(q, "PUT")?;
        if !c.is_ok() {
            return Err(format!("PUT {key} from VRAM failed: {:?}", c.error_code()));
        }
        report.objects += 1;
        report.bytes += len;
        let wipe = vec![0u8; usize::try_from(len).map_err(|_| "piece too large")?];
        engine.copy_in(buf, 0, &wipe).map_err(|e| e.to_string())?;
        q.push(&Get::new(obj, BufSlice::new(buf, 0, len)).build())
            .map_err(|e| e.to_string())?;
        let c = one(q, "GET")?;
        if !c.is_ok() || c.bytes() != len {
            return Err(format!(
                "GET {key} back: {:?}, {} of {len} bytes",
                c.error_code(),
                c.bytes()
            ));
        }
        let view = engine.read(buf, 0, len).map_err(|e| e.to_string())?;
        match mismatch(off, &view) {
            None => report.verified += len,
            Some(at) => return Err(format!("{key}: byte {at} differs from the object at {off}")),
        }
    }
    report.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(report)
}

impl Drop for VramSink {
    fn drop(&mut self) {
        // Copies still queued read the bounce memory: wait for them before it is freed.
        let _ = self.stream.synchronize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
