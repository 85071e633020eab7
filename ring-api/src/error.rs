//! Error types: completion error codes, entry validation errors, setup and interning errors.

use crate::cqe::{Cqe, ErrorClass};

/// Failure codes carried in [`Cqe::result`] as `-(code as i32)`.
///
/// Values are Linux errno numbers wherever one fits, so a C caller can pass them to
/// `strerror` and a Rust caller can map them to `std::io::Error::from_raw_os_error`.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorCode {
    /// No such key or bucket (HTTP 404), or a Cancel whose target is not in flight (`ENOENT`).
    #[error("object or cancel target not found")]
    NotFound = 2,
    /// Generic I/O failure with no better code (`EIO`).
    #[error("I/O error")]
    Io = 5,
    /// Unknown object id, buffer handle or upload handle (`EBADF`).
    #[error("unknown object, buffer or upload handle")]
    BadHandle = 9,
    /// Server asked us to slow down and retries were exhausted (`EAGAIN`).
    #[error("throttled by the server")]
    SlowDown = 11,
    /// Authentication or authorisation failed (HTTP 401/403) (`EACCES`).
    #[error("access denied")]
    AccessDenied = 13,
    /// The buffer range lies outside its registration (`EFAULT`).
    #[error("buffer range outside its registration")]
    BadAddress = 14,
    /// A resource is busy, e.g. a buffer being deregistered (`EBUSY`).
    #[error("resource busy")]
    Busy = 16,
    /// The entry failed validation (`EINVAL`).
    #[error("invalid submission entry")]
    InvalidArgument = 22,
    /// A length exceeds the protocol limit, the object does not fit the buffer, or an
    /// operation on GPU memory is longer than the engine's bounce pool (`EFBIG`).
    #[error("too large (for a protocol limit, the buffer, or the GPU bounce pool: split it)")]
    TooLarge = 27,
    /// The requested range is not satisfiable (HTTP 416) (`ERANGE`).
    #[error("range not satisfiable")]
    RangeNotSatisfiable = 34,
    /// The server's reply violated the protocol (`EPROTO`).
    #[error("protocol error")]
    Protocol = 71,
    /// Short body, checksum or byte-count mismatch (`EBADMSG`).
    #[error("integrity check failed")]
    Integrity = 74,
    /// Opcode not supported by this engine (`EOPNOTSUPP`).
    #[error("operation not supported")]
    Unsupported = 95,
    /// Connection reset or refused and retries exhausted (`ECONNRESET`).
    #[error("connection reset")]
    ConnectionReset = 104,
    /// The per-operation deadline passed (`ETIMEDOUT`).
    #[error("deadline exceeded")]
    TimedOut = 110,
    /// Cancel target is already completing and cannot be stopped (`EALREADY`).
    #[error("operation already completing")]
    AlreadyCompleting = 114,
    /// The server failed (HTTP 5xx) and retries were exhausted (`EREMOTEIO`).
    #[error("remote server error")]
    Remote = 121,
    /// The operation was cancelled (`ECANCELED`).
    #[error("cancelled")]
    Cancelled = 125,
}

impl ErrorCode {
    /// Every code, for probes and exhaustive tests.
    pub const ALL: [Self; 18] = [
        Self::NotFound,
        Self::Io,
        Self::BadHandle,
        Self::SlowDown,
        Self::AccessDenied,
        Self::BadAddress,
        Self::Busy,
        Self::InvalidArgument,
        Self::TooLarge,
        Self::RangeNotSatisfiable,
        Self::Protocol,
        Self::Integrity,
        Self::Unsupported,
        Self::ConnectionReset,
        Self::TimedOut,
        Self::AlreadyCompleting,
        Self::Remote,
        Self::Cancelled,
    ];
}

/// The value is not an errno this version names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown error code {0}")]
pub struct UnknownErrorCode(pub i32);

impl TryFrom<i32> for ErrorCode {
    type Error = UnknownErrorCode;

    /// Accepts the positive errno (not the negative `result`).
    fn try_from(v: i32) -> Result<Self, Self::Error> {
        Self::ALL
            .into_iter()
            .find(|c| *c as i32 == v)
            .ok_or(UnknownErrorCode(v))
    }
}

/// Why [`Sqe::validate`](crate::Sqe::validate) rejected an entry.
///
/// Each maps to an [`ErrorCode`] via [`InvalidEntry::code`] so the engine can complete the
/// entry with an error instead of dropping it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidEntry {
    /// The opcode byte names no operation.
    #[error("unknown opcode {0}")]
    UnknownOpcode(u8),
    /// Flag bits outside `sqe_flags::ALL` are set.
    #[error("reserved flag bits set: {0:#04x}")]
    ReservedFlags(u8),
    /// A reserved field (`rsvd0`, `rsvd1`) is not zero.
    #[error("reserved field {0} is not zero")]
    ReservedField(&'static str),
    /// A field the opcode does not use is not zero.
    #[error("field {field} is not used by {op} and must be zero")]
    UnusedField {
        /// Operation name.
        op: &'static str,
        /// Field name.
        field: &'static str,
    },
    /// The operation requires a non-zero length.
    #[error("length must not be zero")]
    ZeroLength,
    /// UploadPart part number outside `1..=10000`.
    #[error("part number {0} outside 1..=10000")]
    PartNumber(u32),
    /// CompleteMultipart part count outside `1..=10000`.
    #[error("part count {0} outside 1..=10000")]
    PartCount(u32),
    /// `off + len` overflows `u64`.
    #[error("object range offset + length overflows")]
    RangeOverflow,
    /// `buf_off + len` overflows `u64`.
    #[error("buffer offset + length overflows")]
    BufferOverflow,
    /// A length above the S3 limit for this operation.
    #[error("length {len} exceeds the limit {max}")]
    TooLarge {
        /// Requested length.
        len: u64,
        /// Limit for the operation.
        max: u64,
    },
    /// `DEADLINE_ABSOLUTE` set without a deadline.
    #[error("DEADLINE_ABSOLUTE set but deadline_ns is zero")]
    AbsoluteWithoutDeadline,
}

impl InvalidEntry {
    /// The completion error code for this rejection.
    #[must_use]
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::UnknownOpcode(_) => ErrorCode::Unsupported,
            Self::TooLarge { .. } => ErrorCode::TooLarge,
            _ => ErrorCode::InvalidArgument,
        }
    }

    /// The completion the engine posts for a rejected entry.
    #[must_use]
    pub const fn to_cqe(&self, user_data: u64) -> Cqe {
        Cqe::error(user_data, self.code(), ErrorClass::Invalid)
    }
}

/// Ring construction failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// Capacity must be a power of two in `1..=MAX_ENTRIES`.
    #[error("ring capacity {requested} must be a power of two in 1..={max}")]
    Capacity {
        /// What was asked for.
        requested: u32,
        /// [`crate::MAX_ENTRIES`].
        max: u32,
    },
    /// The [`RingMemory`](crate::RingMemory) given is smaller than the queue's layout.
    #[error("ring memory of {got} bytes is smaller than the {needed} bytes the queue needs")]
    Memory {
        /// Bytes the layout needs.
        needed: usize,
        /// Bytes the memory has.
        got: usize,
    },
}

/// A push was refused; nothing was pushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The batch did not fit: reap completions (so the worker can take submissions) and retry.
    #[error("ring full: {needed} entries needed, {available} free")]
    Full {
        /// Entries in the rejected batch.
        needed: usize,
        /// Free slots at the time of the attempt.
        available: usize,
    },
    /// The consuming side (the engine's worker) is gone — the engine was shut down. Nothing
    /// will ever take entries from this ring again; retrying cannot succeed.
    #[error("ring closed: the worker side is gone (engine shut down)")]
    Closed,
}

/// Interning an object name failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InternError {
    /// Bucket name empty, longer than 255 bytes, or containing `/`.
    #[error("invalid bucket name")]
    Bucket,
    /// Key empty or longer than 1024 bytes (the S3 limit).
    #[error("invalid object key")]
    Key,
    /// The table holds its maximum number of names.
    #[error("object table full ({0} names)")]
    Full(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_linux_errno_values() {
        assert_eq!(ErrorCode::NotFound as i32, 2);
        assert_eq!(ErrorCode::InvalidArgument as i32, 22);
        assert_eq!(ErrorCode::Unsupported as i32, 95);
        assert_eq!(ErrorCode::TimedOut as i32, 110);
        assert_eq!(ErrorCode::Cancelled as i32, 125);
    }

    #[test]
    fn try_from_round_trips_every_code() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::try_from(c as i32), Ok(c));
        }
        assert_eq!(ErrorCode::try_from(1), Err(UnknownErrorCode(1)));
        assert_eq!(ErrorCode::try_from(-22), Err(UnknownErrorCode(-22)));
    }

    #[test]
    fn invalid_entry_becomes_error_cqe() {
        let c = InvalidEntry::UnknownOpcode(200).to_cqe(77);
        assert_eq!(c.user_data(), 77);
        assert_eq!(c.result(), -95);
        assert_eq!(c.error_class(), Some(ErrorClass::Invalid));
        assert_eq!(InvalidEntry::ZeroLength.to_cqe(1).result(), -22);
    }
}

/// The queue was created without per-operation timestamps, so there are none to read (ask for
/// them when creating the queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("this queue was created without per-operation timestamps")]
pub struct TimestampsOff;
