//! The soft fabric's wire format: a fixed 40-byte frame header, optionally followed by payload.
//!
//! Everything a peer sends is untrusted, so [`decode_header`] is a pure function with hard
//! limits: it rejects an unknown magic, version or opcode, reserved bits, a PSN wider than 24
//! bits, payloads above [`MAX_PAYLOAD`], and every field an opcode does not use unless it is
//! zero. The encoding is therefore canonical: a header that decodes re-encodes to exactly the
//! same 40 bytes (the fuzz target `soft_frame` checks this).
//!
//! Layout (big-endian, network order):
//!
//! | off | size | field | |
//! |---|---|---|---|
//! | 0 | 2 | magic | `"SF"` (0x5346) |
//! | 2 | 1 | version | [`VERSION`] |
//! | 3 | 1 | opcode | [`Opcode`] |
//! | 4 | 1 | flags | [`FIRST`] / [`LAST`] (multi-frame messages), [`UNCHECKED`] and [`ACK_LATER`] (WRITE*) |
//! | 5 | 3 | reserved | zero |
//! | 8 | 4 | psn | 24-bit packet sequence number |
//! | 12 | 4 | len | payload bytes after the header |
//! | 16 | 4 | rkey | remote key (WRITE*, READ_REQ) |
//! | 20 | 4 | imm | immediate data (WRITE_IMM, SEND_IMM) |
//! | 24 | 8 | addr | remote virtual address (WRITE*, READ_REQ) |
//! | 32 | 8 | aux | READ_REQ: read length; NAK: [`NakCode`]; CONNECT: destination QPN |
//!
//! Integrity: the soft fabric runs over plain TCP, whose 16-bit checksum lets corruption
//! through (and a relay or a bug can change bytes undetected), so every frame that carries
//! payload (WRITE, WRITE_IMM, SEND, SEND_IMM, READ_RESP; [`Opcode::has_trailer`]) ends in a
//! [`TRAILER_LEN`]-byte trailer: the CRC-32C (big-endian) of the 40 header bytes and the
//! payload ([`frame_crc`]). A receiver that computes another value refuses the frame as a
//! transport error (a request: NAK [`NakCode::Checksum`]; a READ response: the READ fails),
//! the QP goes to the error state and the operation fails, never completing with wrong bytes.
//! Header-only frames (ACK, NAK, READ_REQ, CONNECT*) carry no trailer: their fields are
//! validated exactly and every one of them is checked against local state.
//!
//! One exception, asked for by the receiver: a WRITE / WRITE_IMM frame flagged [`UNCHECKED`]
//! has no trailer ([`Header::has_trailer`]). A sender sets it only on a work request whose
//! receiver checks the bytes end to end (`SendWr::checked_end_to_end`: the engine's soft GET
//! windows, whose landing digest is compared with the checksum the server names for the whole
//! range), and a receiver accepts it only into a region whose landing digest it tracks (else
//! NAK [`NakCode::InvalidRequest`]). A byte changed on the way then fails the operation when
//! the digests disagree instead of failing the frame.
//!
//! Acknowledgements: a responder acknowledges what it executed at once, and an ACK covers every
//! request frame up to its PSN. A WRITE / WRITE_IMM frame flagged [`ACK_LATER`] is one its
//! sender does not wait on soon (`SendWr::ack_later`: a gateway's last WRITE of a GET it has
//! already answered); its receiver may hold the ACK back until a later ACK carries it, it
//! covers 8 messages, or 1 ms passed, as a NIC coalesces ACKs. A sender sets it only toward a
//! receiver that said it understands the flag (pairing, `x-amz-rdma-soft-features:
//! ack-later`), as an older receiver refuses an unknown flag.

use thiserror::Error;

/// Size of every frame header.
pub const HEADER_LEN: usize = 40;
/// `"SF"`.
pub const MAGIC: u16 = 0x5346;
/// The only wire version spoken today (2: payload frames carry the CRC-32C trailer).
pub const VERSION: u8 = 2;
/// Bytes of the CRC-32C trailer after the payload of a frame that [`Opcode::has_trailer`].
pub const TRAILER_LEN: usize = 4;
/// Largest payload one frame may carry (16 MiB). Larger messages span several frames.
pub const MAX_PAYLOAD: u32 = 16 << 20;
/// PSNs are 24-bit, as in InfiniBand.
pub const PSN_MASK: u32 = 0x00ff_ffff;
/// Payload length of CONNECT / CONNECT_ACK: one hipObject RC token (44 bytes).
pub const CONNECT_PAYLOAD: u32 = s3_lite::rdma::token::TOKEN_BYTES as u32;
/// Flag: first frame of a message.
pub const FIRST: u8 = 1;
/// Flag: last frame of a message.
pub const LAST: u8 = 2;
/// Flag (WRITE / WRITE_IMM only): the frame carries no checksum trailer; its receiver checks
/// the bytes end to end (see the module docs).
pub const UNCHECKED: u8 = 4;
/// Flag (WRITE / WRITE_IMM only): the sender does not wait on this message's acknowledgement,
/// so the receiver may hold it back and send it with a later one (see the module docs).
pub const ACK_LATER: u8 = 8;

/// Frame opcodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Opcode {
    /// RDMA WRITE payload into `rkey`/`addr`.
    Write,
    /// Last frame of an RDMA WRITE_WITH_IMM: payload plus `imm`; consumes a RECV.
    WriteImm,
    /// SEND payload into the next posted RECV.
    Send,
    /// Last frame of a SEND with immediate.
    SendImm,
    /// RDMA READ request for `aux` bytes at `rkey`/`addr`.
    ReadReq,
    /// RDMA READ response payload; `psn` is the request's.
    ReadResp,
    /// Every request frame up to and including `psn` was executed.
    Ack,
    /// The request frame `psn` failed (`aux` = [`NakCode`]); the sender closes after it.
    Nak,
    /// Pairing: the active side names itself (payload: RC token) and the QPN it wants (`aux`).
    Connect,
    /// Pairing accepted (payload: the passive side's RC token).
    ConnectAck,
}

impl Opcode {
    /// Wire byte.
    #[must_use]
    pub const fn to_byte(self) -> u8 {
        match self {
            Opcode::Write => 1,
            Opcode::WriteImm => 2,
            Opcode::Send => 3,
            Opcode::SendImm => 4,
            Opcode::ReadReq => 5,
            Opcode::ReadResp => 6,
            Opcode::Ack => 7,
            Opcode::Nak => 8,
            Opcode::Connect => 9,
            Opcode::ConnectAck => 10,
        }
    }

    /// Whether frames of this opcode carry payload and so end in the CRC-32C trailer.
    #[must_use]
    pub const fn has_trailer(self) -> bool {
        matches!(
            self,
            Opcode::Write | Opcode::WriteImm | Opcode::Send | Opcode::SendImm | Opcode::ReadResp
        )
    }

    /// Parses the wire byte.
    #[must_use]
    pub const fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Opcode::Write,
            2 => Opcode::WriteImm,
            3 => Opcode::Send,
            4 => Opcode::SendImm,
            5 => Opcode::ReadReq,
            6 => Opcode::ReadResp,
            7 => Opcode::Ack,
            8 => Opcode::Nak,
            9 => Opcode::Connect,
            10 => Opcode::ConnectAck,
            _ => return None,
        })
    }
}

/// Why a responder refused a request frame (or a listener a CONNECT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NakCode {
    /// rkey unknown or re-keyed, range outside the region, or access flag missing.
    RemoteAccess,
    /// Malformed or out-of-protocol request (bad flags sequence, too many READs, SEND too long).
    InvalidRequest,
    /// PSN other than the expected one.
    Sequence,
    /// No RECV posted within the receiver-not-ready wait.
    RnrTimeout,
    /// The responder failed locally (its socket or memory).
    RemoteOperation,
    /// CONNECT refused: no such QP, wrong state, or already paired.
    ConnectRefused,
    /// The frame's CRC-32C trailer disagrees with its header and payload.
    Checksum,
}

impl NakCode {
    /// Wire value (in `aux`).
    #[must_use]
    pub const fn to_u64(self) -> u64 {
        match self {
            NakCode::RemoteAccess => 1,
            NakCode::InvalidRequest => 2,
            NakCode::Sequence => 3,
            NakCode::RnrTimeout => 4,
            NakCode::RemoteOperation => 5,
            NakCode::ConnectRefused => 6,
            NakCode::Checksum => 7,
        }
    }

    /// Parses the wire value.
    #[must_use]
    pub const fn from_u64(v: u64) -> Option<Self> {
        Some(match v {
            1 => NakCode::RemoteAccess,
            2 => NakCode::InvalidRequest,
            3 => NakCode::Sequence,
            4 => NakCode::RnrTimeout,
            5 => NakCode::RemoteOperation,
            6 => NakCode::ConnectRefused,
            7 => NakCode::Checksum,
            _ => return None,
        })
    }
}

/// Why a header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// Fewer than [`HEADER_LEN`] bytes.
    #[error("soft frame: header needs {HEADER_LEN} bytes, got {0}")]
    Truncated(usize),
    /// Not a soft-fabric frame.
    #[error("soft frame: bad magic {0:#06x}")]
    Magic(u16),
    /// A version this build does not speak.
    #[error("soft frame: unsupported version {0}")]
    Version(u8),
    /// Unknown opcode byte.
    #[error("soft frame: unknown opcode {0}")]
    Opcode(u8),
    /// Reserved bytes or flags not allowed for the opcode.
    #[error("soft frame: reserved bits or flags {flags:#04x} invalid for {opcode:?}")]
    Flags {
        /// The opcode.
        opcode: Opcode,
        /// The flags byte.
        flags: u8,
    },
    /// PSN with bits above 24.
    #[error("soft frame: PSN {0:#x} wider than 24 bits")]
    Psn(u32),
    /// Payload longer than the opcode allows (or than [`MAX_PAYLOAD`]).
    #[error("soft frame: payload of {len} bytes invalid for {opcode:?}")]
    Length {
        /// The opcode.
        opcode: Opcode,
        /// The announced payload length.
        len: u32,
    },
    /// A field the opcode does not use is non-zero, or a used one is out of range.
    #[error("soft frame: field {field} invalid for {opcode:?}")]
    Field {
        /// The opcode.
        opcode: Opcode,
        /// Field name.
        field: &'static str,
    },
}

/// A decoded (and validated) frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    /// What the frame is.
    pub opcode: Opcode,
    /// [`FIRST`] / [`LAST`], and [`UNCHECKED`] on a WRITE / WRITE_IMM.
    pub flags: u8,
    /// 24-bit PSN.
    pub psn: u32,
    /// Payload bytes following the header.
    pub len: u32,
    /// Remote key.
    pub rkey: u32,
    /// Immediate data.
    pub imm: u32,
    /// Remote virtual address.
    pub addr: u64,
    /// Opcode-specific (see the module table).
    pub aux: u64,
}

impl Header {
    /// A header with every optional field zero.
    #[must_use]
    pub const fn new(opcode: Opcode, psn: u32) -> Self {
        Self {
            opcode,
            flags: 0,
            psn,
            len: 0,
            rkey: 0,
            imm: 0,
            addr: 0,
            aux: 0,
        }
    }

    /// The 40 wire bytes.
    #[must_use]
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        put(&mut b, 0, &MAGIC.to_be_bytes());
        put(&mut b, 2, &[VERSION, self.opcode.to_byte(), self.flags]);
        put(&mut b, 8, &self.psn.to_be_bytes());
        put(&mut b, 12, &self.len.to_be_bytes());
        put(&mut b, 16, &self.rkey.to_be_bytes());
        put(&mut b, 20, &self.imm.to_be_bytes());
        put(&mut b, 24, &self.addr.to_be_bytes());
        put(&mut b, 32, &self.aux.to_be_bytes());
        b
    }

    /// Whether [`FIRST`] is set.
    #[must_use]
    pub const fn first(&self) -> bool {
        self.flags & FIRST != 0
    }

    /// Whether [`LAST`] is set.
    #[must_use]
    pub const fn last(&self) -> bool {
        self.flags & LAST != 0
    }

    /// Whether [`UNCHECKED`] is set.
    #[must_use]
    pub const fn unchecked(&self) -> bool {
        self.flags & UNCHECKED != 0
    }

    /// Whether [`ACK_LATER`] is set.
    #[must_use]
    pub const fn ack_later(&self) -> bool {
        self.flags & ACK_LATER != 0
    }

    /// Whether a [`TRAILER_LEN`]-byte checksum trailer follows this frame's payload: its
    /// opcode carries one ([`Opcode::has_trailer`]) and it is not [`UNCHECKED`].
    #[must_use]
    pub const fn has_trailer(&self) -> bool {
        self.opcode.has_trailer() && !self.unchecked()
    }
}

/// The checksum of a trailer-carrying frame, started over its encoded header: feed the
/// payload, then compare [`trailer`] of the result with the received trailer.
#[must_use]
pub fn frame_crc(header: &[u8; HEADER_LEN]) -> s3_lite::checksum::Crc32c {
    let mut c = s3_lite::checksum::Crc32c::new();
    c.update(header);
    c
}

/// The trailer bytes of a frame whose checksum is `crc` (header and payload fed).
#[must_use]
pub fn trailer(crc: &s3_lite::checksum::Crc32c) -> [u8; TRAILER_LEN] {
    crc.finish().to_be_bytes()
}

/// Copies `src` to `at` (offsets are the layout constants above, always in range).
fn put(b: &mut [u8; HEADER_LEN], at: usize, src: &[u8]) {
    if let Some(d) = b.get_mut(at..at + src.len()) {
        d.copy_from_slice(src);
    }
}

fn be32(b: &[u8; HEADER_LEN], at: usize) -> u32 {
    let mut v = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        v.copy_from_slice(s);
    }
    u32::from_be_bytes(v)
}

fn be64(b: &[u8; HEADER_LEN], at: usize) -> u64 {
    let mut v = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        v.copy_from_slice(s);
    }
    u64::from_be_bytes(v)
}

/// Decodes and validates the first [`HEADER_LEN`] bytes of `data` (the rest is ignored).
pub fn decode_header(data: &[u8]) -> Result<Header, FrameError> {
    let b: &[u8; HEADER_LEN] = data
        .get(..HEADER_LEN)
        .and_then(|s| s.try_into().ok())
        .ok_or(FrameError::Truncated(data.len()))?;
    let magic = u16::from_be_bytes([b[0], b[1]]);
    if magic != MAGIC {
        return Err(FrameError::Magic(magic));
    }
    if b[2] != VERSION {
        return Err(FrameError::Version(b[2]));
    }
    let opcode = Opcode::from_byte(b[3]).ok_or(FrameError::Opcode(b[3]))?;
    let h = Header {
        opcode,
        flags: b[4],
        psn: be32(b, 8),
        len: be32(b, 12),
        rkey: be32(b, 16),
        imm: be32(b, 20),
        addr: be64(b, 24),
        aux: be64(b, 32),
    };
    if b[5..8] != [0, 0, 0] {
        return Err(FrameError::Flags {
            opcode,
            flags: h.flags,
        });
    }
    validate(&h)?;
    Ok(h)
}

/// The per-opcode rules (also applied by the sender in debug builds via tests).
fn validate(h: &Header) -> Result<(), FrameError> {
    use Opcode as O;
    let op = h.opcode;
    if h.psn > PSN_MASK {
        return Err(FrameError::Psn(h.psn));
    }
    let flags_ok = match op {
        O::Write => h.flags & !(FIRST | LAST | UNCHECKED | ACK_LATER) == 0,
        O::Send | O::ReadResp => h.flags & !(FIRST | LAST) == 0,
        O::WriteImm => h.flags & !(FIRST | LAST | UNCHECKED | ACK_LATER) == 0 && h.last(),
        O::SendImm => h.flags & !(FIRST | LAST) == 0 && h.last(),
        _ => h.flags == 0,
    };
    if !flags_ok {
        return Err(FrameError::Flags {
            opcode: op,
            flags: h.flags,
        });
    }
    let len_ok = match op {
        O::Write | O::WriteImm | O::Send | O::SendImm | O::ReadResp => h.len <= MAX_PAYLOAD,
        O::Connect | O::ConnectAck => h.len == CONNECT_PAYLOAD,
        O::ReadReq | O::Ack | O::Nak => h.len == 0,
    };
    if !len_ok {
        return Err(FrameError::Length {
            opcode: op,
            len: h.len,
        });
    }
    let zero = |field: &'static str, v: u64| {
        if v == 0 {
            Ok(())
        } else {
            Err(FrameError::Field { opcode: op, field })
        }
    };
    let uses_remote = matches!(op, O::Write | O::WriteImm | O::ReadReq);
    let uses_imm = matches!(op, O::WriteImm | O::SendImm);
    if !uses_remote {
        zero("rkey", u64::from(h.rkey))?;
        zero("addr", h.addr)?;
    }
    if !uses_imm {
        zero("imm", u64::from(h.imm))?;
    }
    match op {
        O::ReadReq if h.aux > u64::from(u32::MAX) => Err(FrameError::Field {
            opcode: op,
            field: "aux",
        }),
        O::ReadReq => Ok(()),
        O::Nak if NakCode::from_u64(h.aux).is_none() => Err(FrameError::Field {
            opcode: op,
            field: "aux",
        }),
        O::Nak => Ok(()),
        O::Connect if h.aux > u64::from(PSN_MASK) => Err(FrameError::Field {
            opcode: op,
            field: "aux",
        }),
        O::Connect => zero("psn", u64::from(h.psn)),
        O::ConnectAck => {
            zero("psn", u64::from(h.psn))?;
            zero("aux", h.aux)
        }
        _ => zero("aux", h.aux),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(psn: u32, len: u32) -> Header {
        Header {
            flags: FIRST | LAST,
            len,
            rkey: 0xabcd_ef01,
            addr: 0x7f00_0000_1000,
            ..Header::new(Opcode::Write, psn)
        }
    }

    #[test]
    fn known_bytes() {
        let h = write(0x12_3456, 4096);
        let b = h.encode();
        let want: [u8; HEADER_LEN] = [
            0x53, 0x46, 2, 1, 3, 0, 0, 0, 0, 0x12, 0x34, 0x56, 0, 0, 0x10, 0, 0xab, 0xcd, 0xef,
            0x01, 0, 0, 0, 0, 0, 0, 0x7f, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(b, want);
        assert_eq!(decode_header(&b), Ok(h));
    }

    #[test]
    fn rejects_hostile_headers() {
        let good = write(1, 10).encode();
        let mut b = good;
        b[0] = 0;
        assert!(matches!(decode_header(&b), Err(FrameError::Magic(_))));
        let mut b = good;
        b[2] = 1;
        assert_eq!(decode_header(&b), Err(FrameError::Version(1)));
        let mut b = good;
        b[3] = 99;
        assert_eq!(decode_header(&b), Err(FrameError::Opcode(99)));
        let mut b = good;
        b[6] = 1;
        assert!(matches!(decode_header(&b), Err(FrameError::Flags { .. })));
        let mut b = good;
        b[8] = 1;
        assert_eq!(decode_header(&b), Err(FrameError::Psn(0x0100_0001)));
        let big = write(1, MAX_PAYLOAD + 1).encode();
        assert!(matches!(
            decode_header(&big),
            Err(FrameError::Length { .. })
        ));
        assert_eq!(decode_header(&good[..39]), Err(FrameError::Truncated(39)));
        // An ACK may not carry a key, a READ_REQ may not ask for more than 4 GiB.
        let ack = Header {
            rkey: 1,
            ..Header::new(Opcode::Ack, 3)
        };
        assert!(matches!(
            decode_header(&ack.encode()),
            Err(FrameError::Field { .. })
        ));
        let rr = Header {
            aux: 1 << 32,
            ..Header::new(Opcode::ReadReq, 3)
        };
        assert!(matches!(
            decode_header(&rr.encode()),
            Err(FrameError::Field { .. })
        ));
        let wi = Header {
            flags: FIRST,
            ..Header::new(Opcode::WriteImm, 3)
        };
        assert!(matches!(
            decode_header(&wi.encode()),
            Err(FrameError::Flags { .. })
        ));
        let nak = Header {
            aux: 77,
            ..Header::new(Opcode::Nak, 3)
        };
        assert!(matches!(
            decode_header(&nak.encode()),
            Err(FrameError::Field { .. })
        ));
    }

    #[test]
    fn trailer_covers_header_and_payload() {
        let h = write(5, 3).encode();
        let mut c = frame_crc(&h);
        c.update(b"abc");
        let t = trailer(&c);
        let mut again = frame_crc(&h);
        again.update(b"abc");
        assert_eq!(trailer(&again), t);
        let mut flipped = frame_crc(&h);
        flipped.update(b"abd");
        assert_ne!(trailer(&flipped), t);
        let mut h2 = h;
        h2[27] ^= 1;
        let mut other = frame_crc(&h2);
        other.update(b"abc");
        assert_ne!(trailer(&other), t);
        assert!(Opcode::ReadResp.has_trailer() && !Opcode::Ack.has_trailer());
        let mut w = write(5, 3);
        assert!(w.has_trailer());
        w.flags |= UNCHECKED;
        assert!(!w.has_trailer());
        assert_eq!(decode_header(&w.encode()), Ok(w));
        w.flags |= ACK_LATER;
        assert!(w.ack_later() && !w.has_trailer());
        assert_eq!(decode_header(&w.encode()), Ok(w));
        // Only a WRITE may go unchecked or be acknowledged later: a READ response or a SEND
        // never.
        for op in [Opcode::ReadResp, Opcode::Send] {
            for flag in [UNCHECKED, ACK_LATER] {
                let h = Header {
                    flags: FIRST | LAST | flag,
                    len: 3,
                    ..Header::new(op, 3)
                };
                assert!(
                    matches!(decode_header(&h.encode()), Err(FrameError::Flags { .. })),
                    "{op:?} {flag}"
                );
            }
        }
    }

    #[test]
    fn every_opcode_round_trips() {
        for b in 1..=10u8 {
            let op = Opcode::from_byte(b).unwrap();
            assert_eq!(op.to_byte(), b);
            let mut h = Header::new(op, 7);
            match op {
                Opcode::WriteImm | Opcode::SendImm => {
                    h.flags = LAST;
                    h.imm = 0xdead_beef;
                }
                Opcode::Nak => h.aux = NakCode::Sequence.to_u64(),
                Opcode::Connect => {
                    h.psn = 0;
                    h.len = CONNECT_PAYLOAD;
                    h.aux = 0x42;
                }
                Opcode::ConnectAck => {
                    h.psn = 0;
                    h.len = CONNECT_PAYLOAD;
                }
                _ => {}
            }
            assert_eq!(decode_header(&h.encode()), Ok(h), "{op:?}");
        }
    }
}
