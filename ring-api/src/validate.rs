//! Decoding raw submission entries into typed operations ("parse, don't validate").
//!
//! Entries are written by applications and are untrusted. [`Sqe::validate`] is total: any
//! 64 bytes yield either a [`ValidOp`] or an [`InvalidEntry`] the engine turns into an error
//! completion. It checks everything that needs no engine state (opcode, flags, reserved and
//! unused fields, lengths, part numbers, integer overflow); handles are checked by the engine.

use crate::error::InvalidEntry;
use crate::handle::{BufHandle, BufSlice, ObjectId, PartNumber, UploadHandle};
use crate::opcode;
use crate::sqe::{Sqe, sqe_flags};

/// Largest single PUT or part S3 accepts (5 GiB).
pub const MAX_PUT_LEN: u64 = 5 << 30;

/// When an operation must finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deadline {
    /// No deadline.
    None,
    /// Nanoseconds from when a worker takes the entry off the ring.
    Relative(u64),
    /// Absolute `CLOCK_MONOTONIC` nanoseconds.
    Absolute(u64),
}

/// A decoded operation with its typed arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// See [`opcode::Nop`].
    Nop,
    /// See [`opcode::Get`].
    Get {
        /// Object.
        object: ObjectId,
        /// Destination (capacity `dst.len`).
        dst: BufSlice,
    },
    /// See [`opcode::RangeGet`].
    RangeGet {
        /// Object.
        object: ObjectId,
        /// First byte of the range; `offset + dst.len` does not overflow.
        offset: u64,
        /// Destination; `dst.len > 0`.
        dst: BufSlice,
    },
    /// See [`opcode::Head`].
    Head {
        /// Object.
        object: ObjectId,
    },
    /// See [`opcode::Put`].
    Put {
        /// Object.
        object: ObjectId,
        /// Source, at most [`MAX_PUT_LEN`] bytes.
        src: BufSlice,
    },
    /// See [`opcode::CreateMultipart`].
    CreateMultipart {
        /// Object.
        object: ObjectId,
    },
    /// See [`opcode::UploadPart`].
    UploadPart {
        /// Object.
        object: ObjectId,
        /// Upload.
        upload: UploadHandle,
        /// Part number.
        part: PartNumber,
        /// Source, at most [`MAX_PUT_LEN`] bytes.
        src: BufSlice,
    },
    /// See [`opcode::CompleteMultipart`].
    CompleteMultipart {
        /// Object.
        object: ObjectId,
        /// Upload.
        upload: UploadHandle,
        /// Number of parts.
        parts: PartNumber,
    },
    /// See [`opcode::AbortMultipart`].
    AbortMultipart {
        /// Object.
        object: ObjectId,
        /// Upload.
        upload: UploadHandle,
    },
    /// See [`opcode::Cancel`].
    Cancel {
        /// `user_data` of the operation to cancel.
        target: u64,
    },
}

/// A validated submission: the operation plus the options common to all opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ValidOp {
    /// Caller's tag.
    pub user_data: u64,
    /// Deadline.
    pub deadline: Deadline,
    /// Retries forbidden by the caller.
    pub no_retry: bool,
    /// HTTP path forced by the caller.
    pub http_only: bool,
    /// Get/RangeGet: report the CRC-64/NVME of the bytes received ([`sqe_flags::CRC64`]).
    pub crc64: bool,
    /// The operation.
    pub op: Op,
}

/// Bit per optional field, in the order of [`FIELD_NAMES`]; an opcode's mask names the fields it
/// reads, all others must be zero.
const OBJECT: u8 = 1 << 0;
const OFF: u8 = 1 << 1;
const BUF: u8 = (1 << 2) | (1 << 3) | (1 << 4); // len, buf, buf_off travel together
const PART: u8 = 1 << 5;
const UPLOAD: u8 = 1 << 6;
const FIELD_NAMES: [&str; 7] = ["object", "off", "len", "buf", "buf_off", "part", "upload"];

impl Sqe {
    /// Decodes this entry. Never panics, whatever the bytes.
    #[inline]
    pub fn validate(&self) -> Result<ValidOp, InvalidEntry> {
        if self.flags & !sqe_flags::ALL != 0 {
            return Err(InvalidEntry::ReservedFlags(self.flags & !sqe_flags::ALL));
        }
        if self.rsvd0 != 0 {
            return Err(InvalidEntry::ReservedField("rsvd0"));
        }
        if self.rsvd1 != 0 {
            return Err(InvalidEntry::ReservedField("rsvd1"));
        }
        let absolute = self.flags & sqe_flags::DEADLINE_ABSOLUTE != 0;
        let deadline = match (self.deadline_ns, absolute) {
            (0, true) => return Err(InvalidEntry::AbsoluteWithoutDeadline),
            (0, false) => Deadline::None,
            (ns, true) => Deadline::Absolute(ns),
            (ns, false) => Deadline::Relative(ns),
        };
        let op = self.decode_op()?;
        Ok(ValidOp {
            user_data: self.user_data,
            deadline,
            no_retry: self.flags & sqe_flags::NO_RETRY != 0,
            http_only: self.flags & sqe_flags::HTTP_ONLY != 0,
            crc64: self.flags & sqe_flags::CRC64 != 0,
            op,
        })
    }

    #[inline]
    fn decode_op(&self) -> Result<Op, InvalidEntry> {
        let object = ObjectId(self.object);
        let upload = UploadHandle(self.upload);
        let buf = || BufSlice::new(BufHandle(self.buf), self.buf_off, self.len);
        Ok(match self.opcode {
            opcode::Nop::CODE => {
                self.unused(0)?;
                Op::Nop
            }
            opcode::Get::CODE => {
                self.unused(OBJECT | BUF)?;
                Op::Get {
                    object,
                    dst: self.slice(buf())?,
                }
            }
            opcode::RangeGet::CODE => {
                self.unused(OBJECT | OFF | BUF)?;
                let dst = self.slice(buf())?;
                if dst.len == 0 {
                    return Err(InvalidEntry::ZeroLength);
                }
                self.off
                    .checked_add(dst.len)
                    .ok_or(InvalidEntry::RangeOverflow)?;
                Op::RangeGet {
                    object,
                    offset: self.off,
                    dst,
                }
            }
            opcode::Head::CODE => {
                self.unused(OBJECT)?;
                Op::Head { object }
            }
            opcode::Put::CODE => {
                self.unused(OBJECT | BUF)?;
                Op::Put {
                    object,
                    src: limit(self.slice(buf())?)?,
                }
            }
            opcode::CreateMultipart::CODE => {
                self.unused(OBJECT)?;
                Op::CreateMultipart { object }
            }
            opcode::UploadPart::CODE => {
                self.unused(OBJECT | BUF | PART | UPLOAD)?;
                let part = PartNumber::new(self.part).ok_or(InvalidEntry::PartNumber(self.part))?;
                Op::UploadPart {
                    object,
                    upload,
                    part,
                    src: limit(self.slice(buf())?)?,
                }
            }
            opcode::CompleteMultipart::CODE => {
                self.unused(OBJECT | PART | UPLOAD)?;
                let parts = PartNumber::new(self.part).ok_or(InvalidEntry::PartCount(self.part))?;
                Op::CompleteMultipart {
                    object,
                    upload,
                    parts,
                }
            }
            opcode::AbortMultipart::CODE => {
                self.unused(OBJECT | UPLOAD)?;
                Op::AbortMultipart { object, upload }
            }
            opcode::Cancel::CODE => {
                self.unused(OFF)?;
                Op::Cancel { target: self.off }
            }
            other => return Err(InvalidEntry::UnknownOpcode(other)),
        })
    }

    fn slice(&self, s: BufSlice) -> Result<BufSlice, InvalidEntry> {
        s.end().map(|_| s).ok_or(InvalidEntry::BufferOverflow)
    }

    /// Rejects non-zero fields outside `allowed` (branch-free on the success path).
    #[inline]
    fn unused(&self, allowed: u8) -> Result<(), InvalidEntry> {
        let set = u8::from(self.object != 0)
            | u8::from(self.off != 0) << 1
            | u8::from(self.len != 0) << 2
            | u8::from(self.buf != 0) << 3
            | u8::from(self.buf_off != 0) << 4
            | u8::from(self.part != 0) << 5
            | u8::from(self.upload != 0) << 6;
        let stray = set & !allowed;
        if stray == 0 {
            return Ok(());
        }
        Err(InvalidEntry::UnusedField {
            op: opcode::name(self.opcode).unwrap_or("?"),
            field: FIELD_NAMES
                .get(stray.trailing_zeros() as usize)
                .copied()
                .unwrap_or("?"),
        })
    }
}

fn limit(s: BufSlice) -> Result<BufSlice, InvalidEntry> {
    if s.len > MAX_PUT_LEN {
        return Err(InvalidEntry::TooLarge {
            len: s.len,
            max: MAX_PUT_LEN,
        });
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::*;

    const B: BufSlice = BufSlice::new(BufHandle(2), 64, 4096);

    #[test]
    fn every_builder_round_trips_through_validate() {
        let part = PartNumber::new(7).unwrap();
        let up = UploadHandle(5);
        let o = ObjectId(11);
        let cases: [(Sqe, Op); 10] = [
            (Nop::new().build(), Op::Nop),
            (Get::new(o, B).build(), Op::Get { object: o, dst: B }),
            (
                RangeGet::new(o, 9, B).build(),
                Op::RangeGet {
                    object: o,
                    offset: 9,
                    dst: B,
                },
            ),
            (Head::new(o).build(), Op::Head { object: o }),
            (Put::new(o, B).build(), Op::Put { object: o, src: B }),
            (
                CreateMultipart::new(o).build(),
                Op::CreateMultipart { object: o },
            ),
            (
                UploadPart::new(o, up, part, B).build(),
                Op::UploadPart {
                    object: o,
                    upload: up,
                    part,
                    src: B,
                },
            ),
            (
                CompleteMultipart::new(o, up, part).build(),
                Op::CompleteMultipart {
                    object: o,
                    upload: up,
                    parts: part,
                },
            ),
            (
                AbortMultipart::new(o, up).build(),
                Op::AbortMultipart {
                    object: o,
                    upload: up,
                },
            ),
            (Cancel::new(0xABCD).build(), Op::Cancel { target: 0xABCD }),
        ];
        for (sqe, op) in cases {
            let v = sqe.with_user_data(99).validate().unwrap();
            assert_eq!(v.op, op);
            assert_eq!(v.user_data, 99);
            assert_eq!(v.deadline, Deadline::None);
        }
    }

    #[test]
    fn options_decode() {
        let v = Head::new(ObjectId(1))
            .deadline_ns(10)
            .http_only()
            .build()
            .validate()
            .unwrap();
        assert_eq!(v.deadline, Deadline::Relative(10));
        assert!(v.http_only && !v.no_retry);
        let v = Head::new(ObjectId(1))
            .deadline_at_ns(10)
            .no_retry()
            .build()
            .validate()
            .unwrap();
        assert_eq!(v.deadline, Deadline::Absolute(10));
        assert!(v.no_retry && !v.http_only);
    }

    fn raw(f: impl FnOnce(&mut Sqe)) -> Result<ValidOp, InvalidEntry> {
        let mut s = RangeGet::new(ObjectId(1), 0, B).build();
        f(&mut s);
        s.validate()
    }

    #[test]
    fn rejections() {
        assert_eq!(raw(|s| s.opcode = 10), Err(InvalidEntry::UnknownOpcode(10)));
        assert_eq!(
            raw(|s| s.opcode = 255),
            Err(InvalidEntry::UnknownOpcode(255))
        );
        assert_eq!(
            raw(|s| s.flags = 0x98),
            Err(InvalidEntry::ReservedFlags(0x90))
        );
        assert_eq!(
            raw(|s| s.rsvd0 = 1),
            Err(InvalidEntry::ReservedField("rsvd0"))
        );
        assert_eq!(
            raw(|s| s.rsvd1 = 1),
            Err(InvalidEntry::ReservedField("rsvd1"))
        );
        assert_eq!(raw(|s| s.len = 0), Err(InvalidEntry::ZeroLength));
        assert_eq!(
            raw(|s| s.off = u64::MAX - 4095),
            Err(InvalidEntry::RangeOverflow)
        );
        assert!(
            raw(|s| s.off = u64::MAX - 4096).is_ok(),
            "exactly reaching u64::MAX is fine"
        );
        assert_eq!(
            raw(|s| s.buf_off = u64::MAX),
            Err(InvalidEntry::BufferOverflow)
        );
        assert_eq!(
            raw(|s| s.part = 3),
            Err(InvalidEntry::UnusedField {
                op: "RangeGet",
                field: "part"
            })
        );
        assert_eq!(
            raw(|s| s.flags = sqe_flags::DEADLINE_ABSOLUTE),
            Err(InvalidEntry::AbsoluteWithoutDeadline)
        );
    }

    #[test]
    fn part_numbers_and_limits() {
        let up = UploadHandle(1);
        let mut s = UploadPart::new(ObjectId(1), up, PartNumber::new(1).unwrap(), B).build();
        s.part = 0;
        assert_eq!(s.validate(), Err(InvalidEntry::PartNumber(0)));
        s.part = 10_001;
        assert_eq!(s.validate(), Err(InvalidEntry::PartNumber(10_001)));
        s.part = 10_000;
        assert!(s.validate().is_ok());
        s.len = MAX_PUT_LEN + 1;
        assert_eq!(
            s.validate(),
            Err(InvalidEntry::TooLarge {
                len: MAX_PUT_LEN + 1,
                max: MAX_PUT_LEN
            })
        );
        let mut c = CompleteMultipart::new(ObjectId(1), up, PartNumber::new(1).unwrap()).build();
        c.part = 0;
        assert_eq!(c.validate(), Err(InvalidEntry::PartCount(0)));
        let put = Put::new(ObjectId(1), BufSlice::new(BufHandle(0), 0, 0)).build();
        assert!(
            put.validate().is_ok(),
            "empty PUT is a legitimate S3 request"
        );
    }

    #[test]
    fn nop_and_cancel_reject_stray_fields() {
        let mut n = Nop::new().build();
        n.object = 1;
        assert_eq!(
            n.validate(),
            Err(InvalidEntry::UnusedField {
                op: "Nop",
                field: "object"
            })
        );
        let mut c = Cancel::new(5).build();
        c.len = 1;
        assert_eq!(
            c.validate(),
            Err(InvalidEntry::UnusedField {
                op: "Cancel",
                field: "len"
            })
        );
    }
}
