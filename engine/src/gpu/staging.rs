//! The host-staged path: pinned bounce buffers and pipelined asynchronous copies.
//!
//! Used when device memory cannot be registered with the NIC (no dmabuf, no peer memory) or
//! when the bytes arrive over a path that cannot write VRAM (HTTP). Chunk `k` is copied to the
//! device on a dedicated stream while chunk `k + 1` is being filled on the host (by the NIC or
//! the CPU), so the slower of the two sets the pace instead of their sum.
//!
//! # Why this is sound
//! A bounce buffer is handed to the filler only after the event recorded behind its last copy
//! has completed, and every public method synchronises the stream before it returns (also on
//! error), so no DMA reads or writes host memory that Rust code can reach. `Drop` synchronises
//! too, before the buffers are freed.
//!
//! `#[allow(unsafe_code)]`: the asynchronous copies, justified as above.
#![allow(unsafe_code)]

use std::sync::Arc;

use super::coalesce::CopyRange;
use super::{DeviceBuffer, GpuError, GpuEvent, GpuRuntime, GpuStream, PinnedBuffer};

/// Most bounce buffers one copier keeps (each is pinned memory, a scarce resource).
pub const MAX_BOUNCE_BUFFERS: usize = 16;

/// A pipelined copier with `n` pinned bounce buffers of `chunk` bytes on its own stream.
#[derive(Debug)]
pub struct StagedCopier {
    // Field order matters for Drop: `Drop::drop` synchronises the stream first, then fields
    // drop in order (events, buffers, stream).
    events: Vec<GpuEvent>,
    bufs: Vec<PinnedBuffer>,
    /// INVARIANT: `busy[i]` is true iff a copy using `bufs[i]` may still be in flight, in which
    /// case `events[i]` was recorded after it.
    busy: Vec<bool>,
    stream: GpuStream,
    chunk: usize,
}

impl StagedCopier {
    /// Creates `n` (1..=16) bounce buffers of `chunk` bytes and a stream on device `ordinal`.
    pub fn new(
        rt: &Arc<dyn GpuRuntime>,
        ordinal: u32,
        n: usize,
        chunk: usize,
    ) -> Result<Self, GpuError> {
        if n == 0 || n > MAX_BOUNCE_BUFFERS || chunk == 0 {
            return Err(GpuError::InvalidArgument(format!(
                "staged copier with {n} buffers of {chunk} bytes (1..={MAX_BOUNCE_BUFFERS} non-empty buffers)"
            )));
        }
        let stream = GpuStream::new(rt, ordinal)?;
        let mut bufs = Vec::with_capacity(n);
        let mut events = Vec::with_capacity(n);
        for _ in 0..n {
            bufs.push(PinnedBuffer::new(rt, chunk)?);
            events.push(GpuEvent::new(rt, ordinal, false)?);
        }
        Ok(StagedCopier {
            events,
            bufs,
            busy: vec![false; n],
            stream,
            chunk,
        })
    }

    /// Bytes per bounce buffer.
    #[must_use]
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Number of bounce buffers.
    #[must_use]
    pub fn depth(&self) -> usize {
        self.bufs.len()
    }

    /// Waits until slot `i` is free for the host to touch.
    fn acquire(&mut self, i: usize) -> Result<(), GpuError> {
        if self.busy.get(i).copied().unwrap_or(false) {
            if let Some(ev) = self.events.get(i) {
                ev.synchronize()?;
            }
            if let Some(b) = self.busy.get_mut(i) {
                *b = false;
            }
        }
        Ok(())
    }

    /// Ends a batch: waits for the stream and marks every slot free.
    fn drain(&mut self) -> Result<(), GpuError> {
        let r = self.stream.synchronize();
        if r.is_ok() {
            self.busy.iter_mut().for_each(|b| *b = false);
        }
        r
    }

    /// Copies `len` bytes into `dst[dst_off..]`, chunk by chunk: `fill(offset, chunk)` writes
    /// the bytes of `[offset, offset + chunk.len())` into a bounce buffer, which is then queued
    /// for the device while the next one is filled. Returns when all bytes are on the device.
    pub fn copy_to_device<F>(
        &mut self,
        dst: &DeviceBuffer,
        dst_off: usize,
        len: usize,
        mut fill: F,
    ) -> Result<(), GpuError>
    where
        F: FnMut(u64, &mut [u8]),
    {
        dst.ptr_at(dst_off, len)?;
        let r = self.pipeline_h2d(dst, dst_off, len, &mut fill);
        let d = self.drain();
        r.and(d)
    }

    fn pipeline_h2d<F: FnMut(u64, &mut [u8])>(
        &mut self,
        dst: &DeviceBuffer,
        dst_off: usize,
        len: usize,
        fill: &mut F,
    ) -> Result<(), GpuError> {
        let n = self.bufs.len();
        let mut done = 0usize;
        let mut k = 0usize;
        while done < len {
            let slot = k % n;
            let clen = self.chunk.min(len - done);
            self.acquire(slot)?;
            let buf = self
                .bufs
                .get_mut(slot)
                .ok_or_else(|| GpuError::InvalidArgument("slot".into()))?;
            let bytes = buf
                .as_mut_slice()
                .get_mut(..clen)
                .ok_or_else(|| GpuError::InvalidArgument("chunk".into()))?;
            fill(done as u64, bytes);
            let to = dst.ptr_at(dst_off + done, clen)?;
            // SAFETY: `buf` is a live pinned buffer of >= clen bytes; the slot is marked busy
            // below and not touched by the host again until its event (recorded after this
            // copy) completes or the stream is drained. `to..+clen` lies in `dst`, which is
            // borrowed until `copy_to_device` has drained the stream.
            unsafe { self.stream.copy_h2d_async(to, buf.as_ptr(), clen)? };
            if let Some(b) = self.busy.get_mut(slot) {
                *b = true;
            }
            if let Some(ev) = self.events.get(slot) {
                self.stream.record(ev)?;
            }
            done += clen;
            k += 1;
        }
        Ok(())
    }

    /// Copies `len` bytes from `src[src_off..]` to the host chunk by chunk (the PUT direction):
    /// each chunk lands in a bounce buffer and is handed to `consume(offset, bytes)` while the
    /// next chunk is being copied.
    pub fn copy_from_device<F>(
        &mut self,
        src: &DeviceBuffer,
        src_off: usize,
        len: usize,
        mut consume: F,
    ) -> Result<(), GpuError>
    where
        F: FnMut(u64, &[u8]),
    {
        src.ptr_at(src_off, len)?;
        let r = self.pipeline_d2h(src, src_off, len, &mut consume);
        let d = self.drain();
        r.and(d)
    }

    fn pipeline_d2h<F: FnMut(u64, &[u8])>(
        &mut self,
        src: &DeviceBuffer,
        src_off: usize,
        len: usize,
        consume: &mut F,
    ) -> Result<(), GpuError> {
        let n = self.bufs.len();
        let chunks = len.div_ceil(self.chunk);
        // Queue up to `n` chunks ahead, consume in order.
        let mut queued = 0usize;
        for k in 0..chunks {
            while queued < chunks && queued < k + n {
                let slot = queued % n;
                let off = queued * self.chunk;
                let clen = self.chunk.min(len - off);
                self.acquire(slot)?;
                let from = src.ptr_at(src_off + off, clen)?;
                let buf = self
                    .bufs
                    .get_mut(slot)
                    .ok_or_else(|| GpuError::InvalidArgument("slot".into()))?;
                // SAFETY: the slot is free (acquired) and marked busy until its event, recorded
                // right after, has completed; the host reads it only after that. `from..+clen`
                // lies in `src`, borrowed until the stream is drained.
                unsafe { self.stream.copy_d2h_async(buf.as_mut_ptr(), from, clen)? };
                if let Some(b) = self.busy.get_mut(slot) {
                    *b = true;
                }
                if let Some(ev) = self.events.get(slot) {
                    self.stream.record(ev)?;
                }
                queued += 1;
            }
            let slot = k % n;
            let off = k * self.chunk;
            let clen = self.chunk.min(len - off);
            self.acquire(slot)?;
            let bytes = self
                .bufs
                .get(slot)
                .and_then(|b| b.as_slice().get(..clen))
                .ok_or_else(|| GpuError::InvalidArgument("chunk".into()))?;
            consume(off as u64, bytes);
        }
        Ok(())
    }
}

impl Drop for StagedCopier {
    fn drop(&mut self) {
        // No copy may outlive the bounce buffers freed right after this.
        let _ = self.stream.synchronize();
    }
}

/// Queues one copy per entry of `ranges` (offsets into `src` and `dst`) on `stream` and waits
/// for all of them: the small-range path, used with [`super::coalesce::plan`] to merge ranges.
///
/// All ranges are checked before any copy is queued.
pub fn copy_ranges(
    stream: &GpuStream,
    src: &PinnedBuffer,
    dst: &DeviceBuffer,
    ranges: &[CopyRange],
) -> Result<(), GpuError> {
    let mut checked = Vec::with_capacity(ranges.len());
    for r in ranges {
        let (s, d, l) = (
            usize::try_from(r.src),
            usize::try_from(r.dst),
            usize::try_from(r.len),
        );
        let (Ok(s), Ok(d), Ok(l)) = (s, d, l) else {
            return Err(GpuError::InvalidArgument(format!(
                "{r:?} does not fit in usize"
            )));
        };
        let host = src.as_slice().get(s..s.saturating_add(l)).ok_or_else(|| {
            GpuError::InvalidArgument(format!(
                "{r:?} outside the {}-byte pinned buffer",
                src.len()
            ))
        })?;
        checked.push((host.as_ptr(), dst.ptr_at(d, l)?, l));
    }
    let mut result = Ok(());
    for (h, d, l) in checked {
        // SAFETY: `h..h+l` lies in `src` and `d..d+l` in `dst` (checked above); both stay
        // borrowed until the stream is synchronised below, before this function returns.
        if let Err(e) = unsafe { stream.copy_h2d_async(d, h, l) } {
            result = Err(e);
            break;
        }
    }
    let s = stream.synchronize();
    result.and(s)
}
