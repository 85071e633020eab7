//! The 64-byte submission queue entry.
//!
//! An [`Sqe`] is plain old data: every bit pattern is a valid `Sqe`, and nothing about it is
//! trusted until [`Sqe::validate`](crate::Sqe::validate) has decoded it into a
//! [`ValidOp`](crate::ValidOp). Fields are private so that code building entries goes through
//! the opcode builders in [`crate::opcode`]; raw access exists as [`Sqe::from_bytes`] /
//! [`Sqe::to_bytes`] for foreign producers (a C ABI, a fuzzer).

use std::mem::offset_of;

/// Submission-entry flag bits (the `flags` byte of an [`Sqe`]).
///
/// Bits not named here are reserved: an entry that sets one is rejected by validation, so a
/// future flag can never be silently ignored by an older engine.
pub mod sqe_flags {
    /// `deadline_ns` is an absolute time on the engine's monotonic clock (`CLOCK_MONOTONIC`
    /// nanoseconds) instead of a duration counted from the moment a worker takes the entry off
    /// the submission ring.
    pub const DEADLINE_ABSOLUTE: u8 = 1 << 0;
    /// Never retry this operation, even if it is idempotent and the failure is retryable.
    pub const NO_RETRY: u8 = 1 << 1;
    /// Use the HTTP data path even if an RDMA path to the endpoint exists.
    pub const HTTP_ONLY: u8 = 1 << 2;
    /// Get/RangeGet: compute the CRC-64/NVME of the bytes received while they are in host
    /// memory (the socket read, the bounce buffer) and report it in the completion's `aux`
    /// ([`cqe_flags::CRC64`](crate::cqe_flags::CRC64)). A caller that combines the ranges'
    /// values into a whole-object checksum never reads the destination back (VRAM). Ignored
    /// by other opcodes.
    pub const CRC64: u8 = 1 << 3;
    /// Every flag this version of the ABI defines.
    pub const ALL: u8 = DEADLINE_ABSOLUTE | NO_RETRY | HTTP_ONLY | CRC64;
}

/// A submission queue entry: one operation, fixed at 64 bytes (one cache line).
///
/// The layout is `#[repr(C)]` and pinned by compile-time assertions because it is shared with
/// other languages and, later, other processes. Field meaning depends on the opcode; see
/// `docs/ring-protocol.md` for the table. Fields an opcode does not use must be zero.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sqe {
    /// Operation code, one of the `CODE` constants in [`crate::opcode`].
    pub(crate) opcode: u8,
    /// [`sqe_flags`] bits.
    pub(crate) flags: u8,
    /// Reserved, must be zero.
    pub(crate) rsvd0: u16,
    /// Interned object name ([`crate::ObjectId`]).
    pub(crate) object: u32,
    /// Caller's tag, echoed in the completion.
    pub(crate) user_data: u64,
    /// Object offset (RangeGet) or target `user_data` (Cancel).
    pub(crate) off: u64,
    /// Length in bytes of the transfer / destination capacity.
    pub(crate) len: u64,
    /// Registered buffer handle ([`crate::BufHandle`]).
    pub(crate) buf: u32,
    /// Part number (UploadPart) or part count (CompleteMultipart).
    pub(crate) part: u32,
    /// Offset inside the registered buffer.
    pub(crate) buf_off: u64,
    /// Deadline in nanoseconds; 0 means none. Relative unless `DEADLINE_ABSOLUTE`.
    pub(crate) deadline_ns: u64,
    /// Multipart upload handle ([`crate::UploadHandle`]).
    pub(crate) upload: u32,
    /// Reserved, must be zero.
    pub(crate) rsvd1: u32,
}

const _: () = assert!(size_of::<Sqe>() == 64);
const _: () = assert!(align_of::<Sqe>() == 8);
const _: () = assert!(offset_of!(Sqe, opcode) == 0);
const _: () = assert!(offset_of!(Sqe, flags) == 1);
const _: () = assert!(offset_of!(Sqe, rsvd0) == 2);
const _: () = assert!(offset_of!(Sqe, object) == 4);
const _: () = assert!(offset_of!(Sqe, user_data) == 8);
const _: () = assert!(offset_of!(Sqe, off) == 16);
const _: () = assert!(offset_of!(Sqe, len) == 24);
const _: () = assert!(offset_of!(Sqe, buf) == 32);
const _: () = assert!(offset_of!(Sqe, part) == 36);
const _: () = assert!(offset_of!(Sqe, buf_off) == 40);
const _: () = assert!(offset_of!(Sqe, deadline_ns) == 48);
const _: () = assert!(offset_of!(Sqe, upload) == 56);
const _: () = assert!(offset_of!(Sqe, rsvd1) == 60);

/// Copies `N` bytes at `at` out of an entry image (callers pass in-range constants; an
/// out-of-range request would yield zeros rather than panic).
fn take<const N: usize>(b: &[u8; 64], at: usize) -> [u8; N] {
    at.checked_add(N)
        .and_then(|end| b.get(at..end))
        .and_then(|s| <[u8; N]>::try_from(s).ok())
        .unwrap_or([0; N])
}

impl Sqe {
    /// Size of an entry in bytes.
    pub const SIZE: usize = 64;

    /// Decodes the in-memory image of an entry (native endianness, `#[repr(C)]` offsets).
    ///
    /// Total: any 64 bytes form an `Sqe`; whether it is a meaningful one is decided by
    /// [`Sqe::validate`](crate::Sqe::validate).
    #[must_use]
    pub fn from_bytes(b: &[u8; 64]) -> Self {
        Self {
            opcode: b[0],
            flags: b[1],
            rsvd0: u16::from_ne_bytes(take(b, 2)),
            object: u32::from_ne_bytes(take(b, 4)),
            user_data: u64::from_ne_bytes(take(b, 8)),
            off: u64::from_ne_bytes(take(b, 16)),
            len: u64::from_ne_bytes(take(b, 24)),
            buf: u32::from_ne_bytes(take(b, 32)),
            part: u32::from_ne_bytes(take(b, 36)),
            buf_off: u64::from_ne_bytes(take(b, 40)),
            deadline_ns: u64::from_ne_bytes(take(b, 48)),
            upload: u32::from_ne_bytes(take(b, 56)),
            rsvd1: u32::from_ne_bytes(take(b, 60)),
        }
    }

    /// The in-memory image of this entry, as another process or a C caller would see it.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        let parts: [(usize, &[u8]); 13] = [
            (0, &[self.opcode]),
            (1, &[self.flags]),
            (2, &self.rsvd0.to_ne_bytes()),
            (4, &self.object.to_ne_bytes()),
            (8, &self.user_data.to_ne_bytes()),
            (16, &self.off.to_ne_bytes()),
            (24, &self.len.to_ne_bytes()),
            (32, &self.buf.to_ne_bytes()),
            (36, &self.part.to_ne_bytes()),
            (40, &self.buf_off.to_ne_bytes()),
            (48, &self.deadline_ns.to_ne_bytes()),
            (56, &self.upload.to_ne_bytes()),
            (60, &self.rsvd1.to_ne_bytes()),
        ];
        for (at, bytes) in parts {
            if let Some(dst) = out.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
        }
        out
    }

    /// The operation code byte (not yet validated).
    #[must_use]
    pub const fn opcode(&self) -> u8 {
        self.opcode
    }

    /// The caller's tag; available even for entries that fail validation, so the error
    /// completion can carry it.
    #[must_use]
    pub const fn user_data(&self) -> u64 {
        self.user_data
    }

    /// Returns the entry with its `user_data` replaced.
    #[must_use]
    pub const fn with_user_data(mut self, user_data: u64) -> Self {
        self.user_data = user_data;
        self
    }

    /// Returns the entry naming `object` instead (a daemon translating a client's ids into
    /// its engine's; only for an opcode that names an object, as validation reports).
    #[must_use]
    pub const fn with_object(mut self, object: crate::ObjectId) -> Self {
        self.object = object.0;
        self
    }

    /// Returns the entry naming buffer `buf` instead (same use as [`Sqe::with_object`]).
    #[must_use]
    pub const fn with_buf(mut self, buf: crate::BufHandle) -> Self {
        self.buf = buf.0;
        self
    }

    /// Returns the entry naming upload `upload` instead (same use as [`Sqe::with_object`]).
    #[must_use]
    pub const fn with_upload(mut self, upload: crate::UploadHandle) -> Self {
        self.upload = upload.0;
        self
    }

    /// Packs the entry into the eight words a ring slot stores. On little-endian targets the
    /// words' little-endian bytes are exactly [`Sqe::to_bytes`].
    #[inline(always)]
    pub(crate) const fn to_words(self) -> [u64; 8] {
        [
            self.opcode as u64
                | (self.flags as u64) << 8
                | (self.rsvd0 as u64) << 16
                | (self.object as u64) << 32,
            self.user_data,
            self.off,
            self.len,
            self.buf as u64 | (self.part as u64) << 32,
            self.buf_off,
            self.deadline_ns,
            self.upload as u64 | (self.rsvd1 as u64) << 32,
        ]
    }

    /// Inverse of [`Sqe::to_words`].
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // truncation selects the packed sub-fields
    pub(crate) const fn from_words(w: [u64; 8]) -> Self {
        Self {
            opcode: w[0] as u8,
            flags: (w[0] >> 8) as u8,
            rsvd0: (w[0] >> 16) as u16,
            object: (w[0] >> 32) as u32,
            user_data: w[1],
            off: w[2],
            len: w[3],
            buf: w[4] as u32,
            part: (w[4] >> 32) as u32,
            buf_off: w[5],
            deadline_ns: w[6],
            upload: w[7] as u32,
            rsvd1: (w[7] >> 32) as u32,
        }
    }
}

impl std::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqe")
            .field("opcode", &crate::opcode::name(self.opcode).unwrap_or("?"))
            .field("code", &self.opcode)
            .field("flags", &format_args!("{:#04x}", self.flags))
            .field("object", &self.object)
            .field("user_data", &self.user_data)
            .field("off", &self.off)
            .field("len", &self.len)
            .field("buf", &self.buf)
            .field("buf_off", &self.buf_off)
            .field("part", &self.part)
            .field("upload", &self.upload)
            .field("deadline_ns", &self.deadline_ns)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sqe {
        Sqe {
            opcode: 2,
            flags: 0x05,
            rsvd0: 0xBEEF,
            object: 0x0102_0304,
            user_data: 0x1122_3344_5566_7788,
            off: 9,
            len: 10,
            buf: 11,
            part: 12,
            buf_off: 13,
            deadline_ns: 14,
            upload: 15,
            rsvd1: 0xCAFE_F00D,
        }
    }

    #[test]
    fn bytes_round_trip() {
        let s = sample();
        assert_eq!(Sqe::from_bytes(&s.to_bytes()), s);
    }

    #[test]
    fn words_round_trip() {
        let s = sample();
        assert_eq!(Sqe::from_words(s.to_words()), s);
    }

    #[test]
    fn byte_offsets_match_hand_computed_image() {
        let b = sample().to_bytes();
        assert_eq!(b[0], 2);
        assert_eq!(b[1], 0x05);
        assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(&b[60..64], &0xCAFE_F00Du32.to_ne_bytes());
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn ring_words_are_the_memory_image_on_little_endian() {
        let s = sample();
        let mut image = [0u8; 64];
        for (i, w) in s.to_words().iter().enumerate() {
            image[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        assert_eq!(image, s.to_bytes());
    }
}
