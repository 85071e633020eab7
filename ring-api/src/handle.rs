//! Small fixed-size handles that keep submission entries fixed-size: interned object names,
//! registered buffers and multipart uploads are all named by `u32` ids into engine tables.

/// An interned `(bucket, key)` pair; see [`crate::ObjectTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectId(pub u32);

/// A registered memory region, issued by the engine's `register` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BufHandle(pub u32);

/// An open multipart upload, issued by the engine on CreateMultipart (returned in the
/// completion's `aux`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct UploadHandle(pub u32);

/// `len` bytes at `offset` inside the registered buffer `buf`.
///
/// Bounds against the registration are checked by the engine (it owns the registry);
/// validation only rejects `offset + len` overflowing `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct BufSlice {
    /// The registration.
    pub buf: BufHandle,
    /// Byte offset inside it.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl BufSlice {
    /// Names `len` bytes at `offset` in `buf`.
    #[must_use]
    pub const fn new(buf: BufHandle, offset: u64, len: u64) -> Self {
        Self { buf, offset, len }
    }

    /// One past the last byte, or `None` on overflow.
    #[must_use]
    pub const fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.len)
    }
}

/// An S3 part number, guaranteed to be in `1..=10000`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartNumber(u32);

impl PartNumber {
    /// Smallest part number S3 accepts.
    pub const MIN: u32 = 1;
    /// Largest part number S3 accepts (also the maximum part count).
    pub const MAX: u32 = 10_000;

    /// `Some` when `n` is in `1..=10000`.
    #[must_use]
    pub const fn new(n: u32) -> Option<Self> {
        if n >= Self::MIN && n <= Self::MAX {
            Some(Self(n))
        } else {
            None
        }
    }

    /// The number.
    #[must_use]
    pub const fn get(self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_number_bounds() {
        assert_eq!(PartNumber::new(0), None);
        assert_eq!(PartNumber::new(1).map(PartNumber::get), Some(1));
        assert_eq!(PartNumber::new(10_000).map(PartNumber::get), Some(10_000));
        assert_eq!(PartNumber::new(10_001), None);
    }

    #[test]
    fn buf_slice_end_overflow() {
        assert_eq!(BufSlice::new(BufHandle(1), 10, 5).end(), Some(15));
        assert_eq!(BufSlice::new(BufHandle(1), u64::MAX, 1).end(), None);
    }
}
