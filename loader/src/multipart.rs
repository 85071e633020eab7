//! The operations of a multipart upload for [`crate::batch`]: how large a source's parts are,
//! and the CreateMultipart, UploadPart, CompleteMultipart and AbortMultipart entries.
//!
//! The Python package's `put_from` of a source above 5 GiB, or with `part_size`, runs them in
//! three batches (`python/src/transfer.rs`): CreateMultipart for every such item; then its
//! parts, in the batch with every other item's operations; then CompleteMultipart, or
//! AbortMultipart for an item a part of which failed (and for every created upload when the
//! batch is interrupted), so no parts stay behind. The engine checks a completed object
//! against the parts it sent (the Complete answer's full-object CRC64NVME, or a HEAD's).

use ring_api::{BufHandle, ObjectId, PartNumber, UploadHandle};

use crate::batch::{Op, OpKind};

/// Largest single PUT (S3's limit).
pub const MAX_PUT: u64 = 5 << 30;
/// Smallest part S3 takes (but the last).
pub const MIN_PART: u64 = 5 << 20;
/// Largest part S3 takes.
pub const MAX_PART: u64 = 5 << 30;
/// Most parts of one upload.
pub const MAX_PARTS: u64 = 10_000;
/// The part size of a source above [`MAX_PUT`] when the caller names none (or larger, to keep
/// to [`MAX_PARTS`]).
pub const AUTO_PART: u64 = 64 << 20;

/// How a put of `len` bytes goes: `Ok(None)`, one PUT; `Ok(Some(size))`, parts of `size`.
/// `asked` is the caller's `part_size`: checked against S3's bounds. With none, a source above
/// 5 GiB goes in parts of [`AUTO_PART`], or of the smallest whole MiB that keeps to 10,000.
pub fn part_size(len: u64, asked: Option<u64>) -> Result<Option<u64>, String> {
    let size = match asked {
        Some(p) if !(MIN_PART..=MAX_PART).contains(&p) => {
            return Err(format!("part_size {p} is outside S3's 5 MiB..5 GiB"));
        }
        Some(p) => p,
        None if len <= MAX_PUT => return Ok(None),
        None => AUTO_PART.max(len.div_ceil(MAX_PARTS).div_ceil(1 << 20) << 20),
    };
    let parts = len.div_ceil(size);
    if parts > MAX_PARTS || size > MAX_PART {
        return Err(format!(
            "{len} bytes in parts of {size} make {parts} parts; S3 takes at most 10,000 of at \
             most 5 GiB (raise part_size)"
        ));
    }
    Ok(Some(size))
}

/// The CreateMultipart of `object`.
pub fn create(object: ObjectId) -> Op {
    no_bytes(OpKind::CreateMultipart, object)
}

/// The UploadPart operations of the `len` bytes of `buf` in parts of `size`.
pub fn parts(
    object: ObjectId,
    upload: UploadHandle,
    buf: BufHandle,
    len: u64,
    size: u64,
) -> Vec<Op> {
    (0..len.div_ceil(size))
        .filter_map(|i| {
            let part = PartNumber::new(u32::try_from(i + 1).ok()?)?;
            Some(Op {
                kind: OpKind::UploadPart { upload, part },
                object,
                buf,
                buf_offset: i * size,
                len: size.min(len - i * size),
            })
        })
        .collect()
}

/// The CompleteMultipart of `upload` from its parts of `size` covering `len` bytes.
pub fn complete(object: ObjectId, upload: UploadHandle, len: u64, size: u64) -> Option<Op> {
    let parts = PartNumber::new(u32::try_from(len.div_ceil(size)).ok()?)?;
    Some(no_bytes(
        OpKind::CompleteMultipart { upload, parts },
        object,
    ))
}

/// The AbortMultipart of `upload`.
pub fn abort(object: ObjectId, upload: UploadHandle) -> Op {
    no_bytes(OpKind::AbortMultipart { upload }, object)
}

/// What an operation is, for error messages.
pub fn describe(kind: OpKind, len: u64) -> String {
    match kind {
        OpKind::RangeGet { offset } => format!("range-get {offset}+{len}"),
        OpKind::Put => "PUT".into(),
        OpKind::Head => "HEAD".into(),
        OpKind::CreateMultipart => "CreateMultipart".into(),
        OpKind::UploadPart { part, .. } => format!("UploadPart {}", part.get()),
        OpKind::CompleteMultipart { .. } => "CompleteMultipart".into(),
        OpKind::AbortMultipart { .. } => "AbortMultipart".into(),
    }
}

fn no_bytes(kind: OpKind, object: ObjectId) -> Op {
    Op {
        kind,
        object,
        buf: BufHandle(0),
        buf_offset: 0,
        len: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_sizes_follow_s3_bounds() {
        assert_eq!(part_size(MAX_PUT, None), Ok(None));
        assert_eq!(part_size(MAX_PUT + 1, None), Ok(Some(AUTO_PART)));
        // 1 TiB: 64 MiB parts would be 16,384; the next whole MiB that fits 10,000 is 105 MiB.
        assert_eq!(part_size(1 << 40, None), Ok(Some(105 << 20)));
        assert_eq!(part_size(12 << 20, Some(5 << 20)), Ok(Some(5 << 20)));
        assert!(part_size(12 << 20, Some(1 << 20)).is_err());
        assert!(part_size(12 << 20, Some(6 << 30)).is_err());
        assert!(part_size(10_001 * (5 << 20), Some(5 << 20)).is_err());
        // Past 10,000 parts of 5 GiB: nothing fits.
        assert!(part_size(10_001 * (5 << 30), None).is_err());
    }

    #[test]
    fn parts_cover_the_source_once() {
        let ops = parts(
            ObjectId(1),
            UploadHandle(7),
            BufHandle(3),
            (12 << 20) + 1,
            5 << 20,
        );
        let spans: Vec<_> = ops.iter().map(|o| (o.buf_offset, o.len)).collect();
        assert_eq!(
            spans,
            [(0, 5 << 20), (5 << 20, 5 << 20), (10 << 20, (2 << 20) + 1)]
        );
        assert_eq!(
            ops[2].kind,
            OpKind::UploadPart {
                upload: UploadHandle(7),
                part: PartNumber::new(3).unwrap()
            }
        );
        let done = complete(ObjectId(1), UploadHandle(7), (12 << 20) + 1, 5 << 20).unwrap();
        assert_eq!(
            done.kind,
            OpKind::CompleteMultipart {
                upload: UploadHandle(7),
                parts: PartNumber::new(3).unwrap()
            }
        );
    }
}
