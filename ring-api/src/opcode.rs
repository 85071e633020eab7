//! Opcode builders, in the style of io-uring's `opcode!`.
//!
//! Each operation is a struct: required fields are the arguments of `new`, optional fields have
//! defaults and chainable `const fn` setters, `CODE` is the opcode byte, and `build()` produces
//! an [`Sqe`]. Building is safe and cannot fail: everything an entry names (objects, buffers,
//! uploads) is a handle the engine checks when it executes the entry.
//!
//! ```
//! use ring_api::opcode::RangeGet;
//! use ring_api::{BufHandle, BufSlice, ObjectId};
//!
//! let sqe = RangeGet::new(ObjectId(3), 4096, BufSlice::new(BufHandle(1), 0, 65536))
//!     .deadline_ns(5_000_000)
//!     .user_data(42)
//!     .build();
//! assert_eq!(sqe.opcode(), RangeGet::CODE);
//! assert_eq!(sqe.user_data(), 42);
//! ```

use crate::handle::{BufSlice, ObjectId, PartNumber, UploadHandle};
use crate::sqe::{Sqe, sqe_flags};

/// Options every opcode accepts: caller tag, deadline and flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Common {
    user_data: u64,
    deadline_ns: u64,
    flags: u8,
}

impl Common {
    const fn new() -> Self {
        Self {
            user_data: 0,
            deadline_ns: 0,
            flags: 0,
        }
    }

    const fn sqe(self, opcode: u8) -> Sqe {
        Sqe {
            opcode,
            flags: self.flags,
            rsvd0: 0,
            object: 0,
            user_data: self.user_data,
            off: 0,
            len: 0,
            buf: 0,
            part: 0,
            buf_off: 0,
            deadline_ns: self.deadline_ns,
            upload: 0,
            rsvd1: 0,
        }
    }
}

/// Generates the optional setters shared by every builder.
macro_rules! common_setters {
    () => {
        /// Tag echoed in the completion (default 0).
        #[must_use]
        pub const fn user_data(mut self, user_data: u64) -> Self {
            self.common.user_data = user_data;
            self
        }

        /// Deadline in nanoseconds counted from when a worker takes the entry off the ring.
        /// `0` (the default) names none, so the engine's default applies (the `engine`
        /// crate: `EngineBuilder::default_deadline`, 60 s unless changed). Clears a previous
        /// [`Self::deadline_at_ns`].
        #[must_use]
        pub const fn deadline_ns(mut self, ns: u64) -> Self {
            self.common.deadline_ns = ns;
            self.common.flags &= !sqe_flags::DEADLINE_ABSOLUTE;
            self
        }

        /// Absolute deadline on the engine's monotonic clock (`CLOCK_MONOTONIC` ns).
        /// `0` names none (the engine's default deadline applies, as for
        /// [`Self::deadline_ns`]) and clears the absolute flag.
        #[must_use]
        pub const fn deadline_at_ns(mut self, ns: u64) -> Self {
            self.common.deadline_ns = ns;
            if ns == 0 {
                self.common.flags &= !sqe_flags::DEADLINE_ABSOLUTE;
            } else {
                self.common.flags |= sqe_flags::DEADLINE_ABSOLUTE;
            }
            self
        }

        /// Forbid retries for this operation.
        #[must_use]
        pub const fn no_retry(mut self) -> Self {
            self.common.flags |= sqe_flags::NO_RETRY;
            self
        }

        /// Force the HTTP data path.
        #[must_use]
        pub const fn http_only(mut self) -> Self {
            self.common.flags |= sqe_flags::HTTP_ONLY;
            self
        }

        /// Get/RangeGet: report the CRC-64/NVME of the bytes received
        /// ([`sqe_flags::CRC64`]).
        #[must_use]
        pub const fn crc64(mut self) -> Self {
            self.common.flags |= sqe_flags::CRC64;
            self
        }
    };
}

/// Declares a builder struct with its required fields plus the common options.
macro_rules! builder {
    ($(#[$m:meta])* $name:ident = $code:expr, { $($(#[$fm:meta])* $f:ident : $t:ty),* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $($(#[$fm])* $f: $t,)*
            common: Common,
        }

        impl $name {
            /// The opcode byte of this operation.
            pub const CODE: u8 = $code;

            /// Builder with the required fields; options default to none.
            #[must_use]
            pub const fn new($($f: $t),*) -> Self {
                Self { $($f,)* common: Common::new() }
            }

            common_setters!();
        }
    };
}

builder! {
    /// Does nothing and completes with `result = 0`; measures ring overhead.
    Nop = 0, {}
}

builder! {
    /// GET a whole object into `dst`; fails with `TooLarge` if the object exceeds `dst.len`.
    Get = 1, { object: ObjectId, dst: BufSlice }
}

builder! {
    /// GET `dst.len` bytes starting at `offset` of the object into `dst` (`dst.len > 0`).
    RangeGet = 2, { object: ObjectId, offset: u64, dst: BufSlice }
}

builder! {
    /// HEAD the object; the completion's `aux` holds its size.
    Head = 3, { object: ObjectId }
}

builder! {
    /// PUT `src.len` bytes (at most 5 GiB) from `src` as the whole object.
    Put = 4, { object: ObjectId, src: BufSlice }
}

builder! {
    /// Start a multipart upload; the completion's `aux` holds the new [`UploadHandle`].
    CreateMultipart = 5, { object: ObjectId }
}

builder! {
    /// Upload part `part` (1..=10000, at most 5 GiB) of `upload` from `src`.
    UploadPart = 6, { object: ObjectId, upload: UploadHandle, part: PartNumber, src: BufSlice }
}

builder! {
    /// Complete `upload` from its parts `1..=parts` (the engine recorded their ETags).
    CompleteMultipart = 7, { object: ObjectId, upload: UploadHandle, parts: PartNumber }
}

builder! {
    /// Abort `upload` and discard its parts.
    AbortMultipart = 8, { object: ObjectId, upload: UploadHandle }
}

builder! {
    /// Cancel the in-flight operation whose `user_data` is `target`. Completes with 0 (the
    /// target then completes with `Cancelled`) or `NotFound` (nothing with that tag in
    /// flight). `AlreadyCompleting` is reserved: this engine never produces it, because the
    /// worker that aborts an op is its only writer and aborting is synchronous.
    Cancel = 9, { target: u64 }
}

impl Default for Nop {
    fn default() -> Self {
        Self::new()
    }
}

impl Nop {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        self.common.sqe(Self::CODE)
    }
}

impl Get {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        with_buf(s, self.dst)
    }
}

impl RangeGet {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        s.off = self.offset;
        with_buf(s, self.dst)
    }
}

impl Head {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        s
    }
}

impl Put {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        with_buf(s, self.src)
    }
}

impl CreateMultipart {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        s
    }
}

impl UploadPart {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        s.upload = self.upload.0;
        s.part = self.part.get();
        with_buf(s, self.src)
    }
}

impl CompleteMultipart {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        s.upload = self.upload.0;
        s.part = self.parts.get();
        s
    }
}

impl AbortMultipart {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.object = self.object.0;
        s.upload = self.upload.0;
        s
    }
}

impl Cancel {
    /// The entry.
    #[must_use]
    pub const fn build(self) -> Sqe {
        let mut s = self.common.sqe(Self::CODE);
        s.off = self.target;
        s
    }
}

const fn with_buf(mut s: Sqe, b: BufSlice) -> Sqe {
    s.buf = b.buf.0;
    s.buf_off = b.offset;
    s.len = b.len;
    s
}

/// Opcodes this build understands, for a probe (ascending).
pub const SUPPORTED: [u8; 10] = [
    Nop::CODE,
    Get::CODE,
    RangeGet::CODE,
    Head::CODE,
    Put::CODE,
    CreateMultipart::CODE,
    UploadPart::CODE,
    CompleteMultipart::CODE,
    AbortMultipart::CODE,
    Cancel::CODE,
];

/// Human-readable name of an opcode, `None` if unknown.
#[must_use]
pub const fn name(code: u8) -> Option<&'static str> {
    Some(match code {
        Nop::CODE => "Nop",
        Get::CODE => "Get",
        RangeGet::CODE => "RangeGet",
        Head::CODE => "Head",
        Put::CODE => "Put",
        CreateMultipart::CODE => "CreateMultipart",
        UploadPart::CODE => "UploadPart",
        CompleteMultipart::CODE => "CompleteMultipart",
        AbortMultipart::CODE => "AbortMultipart",
        Cancel::CODE => "Cancel",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handle::BufHandle;

    #[test]
    fn range_get_fills_the_documented_fields() {
        let s = RangeGet::new(ObjectId(3), 4096, BufSlice::new(BufHandle(9), 128, 512))
            .user_data(7)
            .deadline_at_ns(1_000)
            .no_retry()
            .build();
        let b = s.to_bytes();
        assert_eq!(b[0], 2, "opcode");
        assert_eq!(b[1], sqe_flags::DEADLINE_ABSOLUTE | sqe_flags::NO_RETRY);
        assert_eq!(&b[4..8], &3u32.to_ne_bytes(), "object");
        assert_eq!(&b[8..16], &7u64.to_ne_bytes(), "user_data");
        assert_eq!(&b[16..24], &4096u64.to_ne_bytes(), "offset");
        assert_eq!(&b[24..32], &512u64.to_ne_bytes(), "len");
        assert_eq!(&b[32..36], &9u32.to_ne_bytes(), "buf");
        assert_eq!(&b[40..48], &128u64.to_ne_bytes(), "buf_off");
        assert_eq!(&b[48..56], &1_000u64.to_ne_bytes(), "deadline");
    }

    #[test]
    fn relative_deadline_clears_absolute_flag() {
        let s = Nop::new().deadline_at_ns(5).deadline_ns(6).build();
        assert_eq!(s.flags, 0);
        assert_eq!(s.deadline_ns, 6);
        assert_eq!(Nop::new().deadline_at_ns(0).build().flags, 0);
    }

    #[test]
    fn codes_are_distinct_and_named() {
        for (i, c) in SUPPORTED.iter().enumerate() {
            assert_eq!(usize::from(*c), i);
            assert!(name(*c).is_some());
        }
        assert_eq!(name(10), None);
        assert_eq!(name(255), None);
    }
}
