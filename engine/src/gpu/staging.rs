//! A synchronous helper for many host → device copies: [`copy_ranges`] queues a list of
//! copies on a stream and waits for them (used by the GPU probe and tests, with
//! [`super::coalesce::plan`] to merge ranges).
//!
//! The engine's own staging of device registrations is the worker's stager
//! (`engine/src/worker/stager.rs`) through the bounce pool (`engine/src/memory/bounce.rs`);
//! it is the only stager (the pipelined `StagedCopier` that lived here was removed with the
//! bounded pool).
//!
//! `#[allow(unsafe_code)]`: the asynchronous copies; the function synchronises the stream
//! before it returns, so no copy outlives the borrows it was given.
#![allow(unsafe_code)]

use super::coalesce::CopyRange;
use super::{DeviceBuffer, GpuError, GpuStream, PinnedBuffer};

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
