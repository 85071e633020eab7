//! The 32-byte completion queue entry and its result codes.
//!
//! A completion carries an io_uring-style `result: i32` (bytes on success, `-errno` on failure)
//! plus a full 64-bit byte count, because object transfers of 2 GiB and more are ordinary and
//! an `i32` cannot hold them. `flags` names the data path that carried the bytes and the class
//! of a failure, so callers can branch without parsing anything.

use std::mem::offset_of;

use crate::error::ErrorCode;

/// Which data path moved the bytes of an operation (bits 0–3 of [`Cqe::flags`]).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataPath {
    /// No payload moved (errors, Head, Nop, multipart control steps).
    None = 0,
    /// HTTP/1.1 body over TCP.
    Http = 1,
    /// RDMA over the software fabric (loopback / TCP emulation).
    RdmaSoft = 2,
    /// RDMA over libibverbs (RoCE, InfiniBand, Soft-RoCE).
    RdmaVerbs = 3,
}

impl DataPath {
    /// Decodes the 4-bit path field; unknown values yield `None` (the Rust `Option`).
    #[must_use]
    pub const fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            0 => Some(Self::None),
            1 => Some(Self::Http),
            2 => Some(Self::RdmaSoft),
            3 => Some(Self::RdmaVerbs),
            _ => None,
        }
    }
}

/// Which wire dialect carried an operation's payload (bits 16–19 of [`Cqe::flags`]): what
/// the engine negotiated with the endpoint for this op.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireDialect {
    /// Not recorded (errors, control steps without payload).
    None = 0,
    /// The HTTP body.
    Http = 1,
    /// `rc-persistent` (one pairing per worker, one HTTP round trip per op).
    RcPersistent = 2,
    /// `hipobj-rc-v2` (PREPARE / READY per op).
    RcV2 = 3,
    /// The cuObject single-request descriptor.
    CuObject = 4,
}

impl WireDialect {
    /// Decodes the 4-bit dialect field; unknown values yield `None`.
    #[must_use]
    pub const fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            0 => Some(Self::None),
            1 => Some(Self::Http),
            2 => Some(Self::RcPersistent),
            3 => Some(Self::RcV2),
            4 => Some(Self::CuObject),
            _ => None,
        }
    }

    /// The name `--json` and tables print: `http`, `rc-persistent`, `hipobj-rc-v2`, `cuobject`
    /// (`none` when not recorded).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Http => "http",
            Self::RcPersistent => "rc-persistent",
            Self::RcV2 => "hipobj-rc-v2",
            Self::CuObject => "cuobject",
        }
    }
}

/// Broad class of a failure (bits 8–15 of [`Cqe::flags`]), for callers that branch on "whose
/// fault" rather than on the precise [`ErrorCode`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorClass {
    /// Success.
    None = 0,
    /// The submission entry failed validation; nothing was sent.
    Invalid = 1,
    /// A local resource problem: unknown handle, buffer bounds, registration.
    Local = 2,
    /// Cancelled by a Cancel entry or by queue teardown.
    Cancelled = 3,
    /// The per-operation deadline passed.
    Deadline = 4,
    /// The server rejected the request (HTTP 4xx).
    Client = 5,
    /// The server failed (HTTP 5xx, SlowDown) and retries were exhausted or not allowed.
    Server = 6,
    /// The connection or fabric failed (reset, refused, RDMA error).
    Transport = 7,
    /// The reply was inconsistent: short body, checksum mismatch, malformed protocol.
    Integrity = 8,
}

impl ErrorClass {
    /// Decodes the class byte; unknown values yield `None`.
    #[must_use]
    pub const fn from_bits(bits: u8) -> Option<Self> {
        match bits {
            0 => Some(Self::None),
            1 => Some(Self::Invalid),
            2 => Some(Self::Local),
            3 => Some(Self::Cancelled),
            4 => Some(Self::Deadline),
            5 => Some(Self::Client),
            6 => Some(Self::Server),
            7 => Some(Self::Transport),
            8 => Some(Self::Integrity),
            _ => None,
        }
    }
}

/// Completion flag bits other than the path and class fields.
pub mod cqe_flags {
    /// Mask of the [`DataPath`](super::DataPath) field.
    pub const PATH_MASK: u32 = 0x0000_000F;
    /// The operation was retried at least once before this outcome.
    pub const RETRIED: u32 = 1 << 4;
    /// A successful transfer whose bytes a checksum the server computed proved. Get/RangeGet:
    /// a checksum over exactly the bytes received (or over the whole object, for a
    /// whole-object Get) matched them. Put/UploadPart: the answer echoed the CRC64NVME of the
    /// bytes we sent (or named a checksum of them that matched). CompleteMultipart: the
    /// object's full-object CRC64NVME (in the Complete answer, or in the HEAD after it) is that
    /// of the parts we sent. Clear on a success: nothing proved the bytes beyond their count
    /// (the caller's policy decides: docs/protocol.md, "What proves a PUT").
    pub const VERIFIED: u32 = 1 << 5;
    /// A successful Get/RangeGet submitted with [`sqe_flags::CRC64`](crate::sqe_flags::CRC64)
    /// whose bytes passed through host memory: `aux` holds the CRC-64/NVME of exactly the
    /// bytes delivered, computed as they arrived (not the object size). Clear: `aux` has its
    /// usual meaning (e.g. the bytes were written into VRAM by the NIC and never seen).
    pub const CRC64: u32 = 1 << 6;
    /// Shift of the [`ErrorClass`](super::ErrorClass) field.
    pub const CLASS_SHIFT: u32 = 8;
    /// Mask of the [`ErrorClass`](super::ErrorClass) field.
    pub const CLASS_MASK: u32 = 0x0000_FF00;
    /// Shift of the [`WireDialect`](super::WireDialect) field.
    pub const DIALECT_SHIFT: u32 = 16;
    /// Mask of the [`WireDialect`](super::WireDialect) field.
    pub const DIALECT_MASK: u32 = 0x000F_0000;
}

/// A completion queue entry, fixed at 32 bytes (two per cache line).
///
/// Layout: `user_data: u64 @0, result: i32 @8, flags: u32 @12, bytes: u64 @16, aux: u64 @24`
/// (`result` and `flags` are stored as one word; see the field docs). `aux` is
/// operation-specific: the object size for Head, the new upload handle for CreateMultipart,
/// the object size the server named for Get and RangeGet (`Content-Range` total or the RDMA
/// byte count's `/total`; 0 when it named none), zero otherwise.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Cqe {
    user_data: u64,
    /// `result: i32` at byte 8 and `flags: u32` at byte 12, held as one native word (see
    /// [`pack`]). Keeping every field word-sized means a `Cqe` is always written and read as
    /// four aligned `u64`s; with separate 4-byte fields the compiler merged the two loads into
    /// one 8-byte load of two 4-byte stores, a store-forwarding stall that cost more than the
    /// whole ring round trip (measured with `perf annotate` on the `ring` bench).
    result_flags: u64,
    bytes: u64,
    aux: u64,
}

/// Packs `result` and `flags` so their bytes land at offsets 8 and 12 of the entry.
#[cfg(target_endian = "little")]
const fn pack(result: i32, flags: u32) -> u64 {
    result as u32 as u64 | (flags as u64) << 32
}

/// Packs `result` and `flags` so their bytes land at offsets 8 and 12 of the entry.
#[cfg(target_endian = "big")]
const fn pack(result: i32, flags: u32) -> u64 {
    (result as u32 as u64) << 32 | flags as u64
}

/// Inverse of [`pack`].
#[allow(clippy::cast_possible_truncation)] // truncation selects the packed halves
const fn unpack(w: u64) -> (i32, u32) {
    if cfg!(target_endian = "little") {
        (w as u32 as i32, (w >> 32) as u32)
    } else {
        ((w >> 32) as u32 as i32, w as u32)
    }
}

const _: () = assert!(size_of::<Cqe>() == 32);
const _: () = assert!(align_of::<Cqe>() == 8);
const _: () = assert!(offset_of!(Cqe, user_data) == 0);
const _: () = assert!(offset_of!(Cqe, result_flags) == 8); // result @8, flags @12
const _: () = assert!(offset_of!(Cqe, bytes) == 16);
const _: () = assert!(offset_of!(Cqe, aux) == 24);

impl std::fmt::Debug for Cqe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cqe")
            .field("user_data", &self.user_data)
            .field("result", &self.result())
            .field("flags", &format_args!("{:#x}", self.flags()))
            .field("bytes", &self.bytes)
            .field("aux", &self.aux)
            .finish()
    }
}

impl Cqe {
    /// Size of an entry in bytes.
    pub const SIZE: usize = 32;

    /// A successful completion that moved `bytes` bytes over `path`.
    ///
    /// `result` is `bytes` saturated to `i32::MAX`; [`Cqe::bytes`] is always exact.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // bounded by the comparison
    pub const fn success(user_data: u64, bytes: u64, path: DataPath) -> Self {
        let result = if bytes > i32::MAX as u64 {
            i32::MAX
        } else {
            bytes as i32
        };
        Self {
            user_data,
            result_flags: pack(result, path as u32),
            bytes,
            aux: 0,
        }
    }

    /// A failed completion: `result = -(code as i32)`, class recorded in the flags.
    #[must_use]
    pub const fn error(user_data: u64, code: ErrorCode, class: ErrorClass) -> Self {
        Self {
            user_data,
            result_flags: pack(-(code as i32), (class as u32) << cqe_flags::CLASS_SHIFT),
            bytes: 0,
            aux: 0,
        }
    }

    /// Sets the operation-specific auxiliary value.
    #[must_use]
    pub const fn with_aux(mut self, aux: u64) -> Self {
        self.aux = aux;
        self
    }

    /// Sets the data path field.
    #[must_use]
    pub const fn with_path(mut self, path: DataPath) -> Self {
        let (result, flags) = unpack(self.result_flags);
        self.result_flags = pack(result, (flags & !cqe_flags::PATH_MASK) | path as u32);
        self
    }

    /// Sets the wire dialect field.
    #[must_use]
    pub const fn with_dialect(mut self, dialect: WireDialect) -> Self {
        let (result, flags) = unpack(self.result_flags);
        self.result_flags = pack(
            result,
            (flags & !cqe_flags::DIALECT_MASK) | (dialect as u32) << cqe_flags::DIALECT_SHIFT,
        );
        self
    }

    /// Marks the completion as the outcome of a retried operation.
    #[must_use]
    pub const fn with_retried(mut self) -> Self {
        let (result, flags) = unpack(self.result_flags);
        self.result_flags = pack(result, flags | cqe_flags::RETRIED);
        self
    }

    /// Marks the completion's bytes as proven by a server checksum ([`cqe_flags::VERIFIED`]).
    #[must_use]
    pub const fn with_verified(mut self) -> Self {
        let (result, flags) = unpack(self.result_flags);
        self.result_flags = pack(result, flags | cqe_flags::VERIFIED);
        self
    }

    /// Whether a server checksum over exactly the bytes moved was compared and matched.
    #[must_use]
    pub const fn verified(&self) -> bool {
        self.flags() & cqe_flags::VERIFIED != 0
    }

    /// Reports `crc` (the CRC-64/NVME of the bytes delivered) in `aux` and sets
    /// [`cqe_flags::CRC64`].
    #[must_use]
    pub const fn with_crc64(mut self, crc: u64) -> Self {
        let (result, flags) = unpack(self.result_flags);
        self.result_flags = pack(result, flags | cqe_flags::CRC64);
        self.aux = crc;
        self
    }

    /// The CRC-64/NVME of the bytes delivered, when the completion carries one
    /// ([`cqe_flags::CRC64`]).
    #[must_use]
    pub const fn crc64(&self) -> Option<u64> {
        if self.flags() & cqe_flags::CRC64 != 0 {
            Some(self.aux)
        } else {
            None
        }
    }

    /// Builds a completion from raw fields (e.g. read from a foreign ring).
    #[must_use]
    pub const fn from_raw(user_data: u64, result: i32, flags: u32, bytes: u64, aux: u64) -> Self {
        Self {
            user_data,
            result_flags: pack(result, flags),
            bytes,
            aux,
        }
    }

    /// The tag of the submission this completes.
    #[must_use]
    pub const fn user_data(&self) -> u64 {
        self.user_data
    }

    /// Bytes moved (saturated at `i32::MAX`) when `>= 0`, else `-errno` ([`ErrorCode`]).
    #[must_use]
    pub const fn result(&self) -> i32 {
        unpack(self.result_flags).0
    }

    /// Raw flag word; see [`cqe_flags`].
    #[must_use]
    pub const fn flags(&self) -> u32 {
        unpack(self.result_flags).1
    }

    /// Exact number of bytes moved.
    #[must_use]
    pub const fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Operation-specific value (see the type docs).
    #[must_use]
    pub const fn aux(&self) -> u64 {
        self.aux
    }

    /// `true` when `result >= 0`.
    #[must_use]
    pub const fn is_ok(&self) -> bool {
        self.result() >= 0
    }

    /// The error code of a failed completion; `None` on success or for an errno this version
    /// does not name.
    #[must_use]
    pub fn error_code(&self) -> Option<ErrorCode> {
        let r = self.result();
        if r >= 0 {
            return None;
        }
        r.checked_neg().and_then(|e| ErrorCode::try_from(e).ok())
    }

    /// The data path field, `None` if it holds a value this version does not name.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // masked to 4 bits
    pub const fn path(&self) -> Option<DataPath> {
        DataPath::from_bits((self.flags() & cqe_flags::PATH_MASK) as u8)
    }

    /// The wire dialect field, `None` if it holds a value this version does not name.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // masked to 4 bits
    pub const fn dialect(&self) -> Option<WireDialect> {
        WireDialect::from_bits(
            ((self.flags() & cqe_flags::DIALECT_MASK) >> cqe_flags::DIALECT_SHIFT) as u8,
        )
    }

    /// The error class field, `None` if it holds a value this version does not name.
    #[must_use]
    #[allow(clippy::cast_possible_truncation)] // masked to 8 bits
    pub const fn error_class(&self) -> Option<ErrorClass> {
        let class = (self.flags() & cqe_flags::CLASS_MASK) >> cqe_flags::CLASS_SHIFT;
        ErrorClass::from_bits(class as u8)
    }

    /// `true` if the operation was retried before this outcome.
    #[must_use]
    pub const fn retried(&self) -> bool {
        self.flags() & cqe_flags::RETRIED != 0
    }

    /// The entry's in-memory image (native endianness), as a C caller sees it.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for (chunk, w) in out.chunks_exact_mut(8).zip(self.to_words()) {
            chunk.copy_from_slice(&w.to_ne_bytes());
        }
        out
    }

    /// The four native words a ring slot stores; their bytes are the entry's memory image.
    #[inline(always)]
    pub(crate) const fn to_words(self) -> [u64; 4] {
        [self.user_data, self.result_flags, self.bytes, self.aux]
    }

    /// Inverse of [`Cqe::to_words`].
    #[inline(always)]
    pub(crate) const fn from_words(w: [u64; 4]) -> Self {
        Self {
            user_data: w[0],
            result_flags: w[1],
            bytes: w[2],
            aux: w[3],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_saturates_result_but_keeps_exact_bytes() {
        let c = Cqe::success(7, 5 << 30, DataPath::RdmaVerbs);
        assert_eq!(c.result(), i32::MAX);
        assert_eq!(c.bytes(), 5 << 30);
        assert_eq!(c.path(), Some(DataPath::RdmaVerbs));
        assert_eq!(c.error_class(), Some(ErrorClass::None));
        assert!(c.is_ok());
        let small = Cqe::success(7, 4096, DataPath::Http);
        assert_eq!(small.result(), 4096);
    }

    #[test]
    fn error_is_negative_errno_with_class() {
        let c = Cqe::error(9, ErrorCode::TimedOut, ErrorClass::Deadline);
        assert_eq!(c.result(), -110);
        assert_eq!(c.error_code(), Some(ErrorCode::TimedOut));
        assert_eq!(c.error_class(), Some(ErrorClass::Deadline));
        assert_eq!(c.flags(), 4 << 8);
        assert!(!c.is_ok());
    }

    #[test]
    fn i32_min_result_does_not_panic() {
        let c = Cqe::from_raw(0, i32::MIN, u32::MAX, 0, 0);
        assert_eq!(c.error_code(), None);
        assert_eq!(c.path(), None);
        assert_eq!(c.error_class(), None);
    }

    #[test]
    fn memory_image_has_result_at_8_and_flags_at_12() {
        let c = Cqe::from_raw(0x0102_0304_0506_0708, -22, 0xA0B0_C0D0, 5, 6);
        let b = c.to_bytes();
        assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(&b[8..12], &(-22i32).to_ne_bytes());
        assert_eq!(&b[12..16], &0xA0B0_C0D0u32.to_ne_bytes());
        assert_eq!(&b[16..24], &5u64.to_ne_bytes());
        assert_eq!(&b[24..32], &6u64.to_ne_bytes());
    }

    #[test]
    fn setters_keep_other_fields() {
        let d = Cqe::success(3, 9, DataPath::RdmaVerbs).with_dialect(WireDialect::RcV2);
        assert_eq!(d.dialect(), Some(WireDialect::RcV2));
        assert_eq!(d.path(), Some(DataPath::RdmaVerbs));
        assert_eq!(
            d.with_dialect(WireDialect::Http).dialect(),
            Some(WireDialect::Http)
        );
        assert_eq!(
            Cqe::success(3, 9, DataPath::Http).dialect(),
            Some(WireDialect::None)
        );
        let c = Cqe::error(1, ErrorCode::Io, ErrorClass::Transport).with_path(DataPath::Http);
        assert!(!c.verified());
        let c = c.with_retried().with_aux(9).with_verified();
        assert_eq!(c.crc64(), None);
        let k = c.with_crc64(u64::MAX - 1);
        assert_eq!(
            (k.crc64(), k.aux(), k.verified()),
            (Some(u64::MAX - 1), u64::MAX - 1, true)
        );
        assert!(c.verified());
        assert_eq!(c.result(), -5);
        assert_eq!(c.path(), Some(DataPath::Http));
        assert_eq!(c.error_class(), Some(ErrorClass::Transport));
        assert!(c.retried());
        assert_eq!(c.aux(), 9);
    }

    #[test]
    fn words_round_trip() {
        let c = Cqe::from_raw(1, -22, 0xDEAD_BEEF, 3, 4);
        assert_eq!(Cqe::from_words(c.to_words()), c);
    }
}
