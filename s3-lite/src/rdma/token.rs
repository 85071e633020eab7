//! The 44-byte hipObject RC token and its 88-hex header form (docs/rdma-headers.md, RC token).
//!
//! AMD hipObject (ROCm/hipObject `src/rdma/token.cpp`) packs an RC endpoint into 44 bytes and
//! hex-encodes them; mmgaggle/ceph `rgw_rdma_rc_wire.cc` pins the multi-byte fields to
//! little-endian, which is what we write. The same token travels in `x-amz-rdma-token` (v1 and the
//! v2 PREPARE), in `x-amz-rdma-reply: 200:<token>` and in elbencho's `/.s3rdma-rc/connect`.
//!
//! Layout: transport(1) qpn(4, LE, 24 bits) gid(16, raw) rkey(4, LE) addr(8, LE) length(8, LE)
//! port(1) lid(2, LE).

use std::net::Ipv4Addr;

use thiserror::Error;

use super::field::{self, Case, FieldError};

/// Size of the binary token.
pub const TOKEN_BYTES: usize = 44;
/// Length of the hex form.
pub const TOKEN_HEX_LEN: usize = 2 * TOKEN_BYTES;
/// The all-zero token: v2's "same host, loopback" marker, also answered by control-plane-only
/// servers as `200:` followed by 88 zeros.
pub const LOOPBACK_HEX: &str =
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";
/// Largest queue pair number (QPNs are 24-bit).
pub const MAX_QPN: u32 = 0x00ff_ffff;

/// RDMA transport named by the token's first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// `0x00`: Dynamically Connected (only the all-zero loopback token uses it in practice).
    Dc,
    /// `0x01`: Reliable Connection (what hipObject always writes).
    Rc,
}

impl Transport {
    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Transport::Dc => 0,
            Transport::Rc => 1,
        }
    }

    /// Parses the wire byte.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Transport::Dc),
            1 => Some(Transport::Rc),
            _ => None,
        }
    }
}

/// Why an RC token (or its suffix form) was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The hex part is not exactly 88 hex digits.
    #[error("RC token: {0}")]
    Hex(FieldError),
    /// Transport byte other than 0 (DC) or 1 (RC).
    #[error("RC token: unknown transport byte {0:#04x}")]
    UnknownTransport(u8),
    /// QPN with bits above the 24 a queue pair number can have.
    #[error("RC token: QPN {0:#x} has more than 24 bits")]
    QpnOutOfRange(u32),
    /// The `:addr:size` suffix is malformed.
    #[error("RC token suffix {field}: {source}")]
    Suffix {
        /// `addr` or `size`.
        field: &'static str,
        /// What was wrong with it.
        source: FieldError,
    },
    /// Neither `<88 hex>` nor `<88 hex>:<addr>:<size>`.
    #[error("RC token: expected 1 or 3 ':'-separated fields, found {0}")]
    FieldCount(usize),
    /// The header value is longer than any valid form (before any parsing).
    #[error("RC token: header value of {0} bytes is too long")]
    TooLong(usize),
}

/// A decoded hipObject RC token. Every field is public because the wire layout is fixed and both
/// sides (client engine, test gateway) build tokens from their own QP and MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RcToken {
    /// Transport of the endpoint.
    pub transport: Transport,
    /// Queue pair number (≤ [`MAX_QPN`]).
    pub qpn: u32,
    /// Raw GID in GID-table order; IPv4-mapped (`::ffff:a.b.c.d`) on RoCEv2.
    pub gid: [u8; 16],
    /// Remote key of the advertised memory region.
    pub rkey: u32,
    /// Virtual address of the advertised window.
    pub addr: u64,
    /// Length of the advertised window.
    pub length: u64,
    /// IB port number (1 on every known peer).
    pub port: u8,
    /// LID (0 on RoCE).
    pub lid: u16,
}

impl RcToken {
    /// The all-zero loopback marker.
    pub const LOOPBACK: RcToken = RcToken {
        transport: Transport::Dc,
        qpn: 0,
        gid: [0; 16],
        rkey: 0,
        addr: 0,
        length: 0,
        port: 0,
        lid: 0,
    };

    /// True for the all-zero loopback marker.
    pub fn is_loopback(&self) -> bool {
        *self == Self::LOOPBACK
    }

    /// The 44 wire bytes.
    pub fn to_bytes(&self) -> [u8; TOKEN_BYTES] {
        let mut out = [0u8; TOKEN_BYTES];
        let mut w = Writer {
            out: &mut out,
            pos: 0,
        };
        w.put(&[self.transport.to_byte()]);
        w.put(&self.qpn.to_le_bytes());
        w.put(&self.gid);
        w.put(&self.rkey.to_le_bytes());
        w.put(&self.addr.to_le_bytes());
        w.put(&self.length.to_le_bytes());
        w.put(&[self.port]);
        w.put(&self.lid.to_le_bytes());
        out
    }

    /// Decodes the 44 wire bytes, rejecting an unknown transport or a QPN wider than 24 bits.
    pub fn from_bytes(bytes: &[u8; TOKEN_BYTES]) -> Result<Self, TokenError> {
        let mut r = Reader { bytes, pos: 0 };
        let [t] = r.take::<1>();
        let transport = Transport::from_byte(t).ok_or(TokenError::UnknownTransport(t))?;
        let qpn = u32::from_le_bytes(r.take());
        if qpn > MAX_QPN {
            return Err(TokenError::QpnOutOfRange(qpn));
        }
        let gid = r.take::<16>();
        let rkey = u32::from_le_bytes(r.take());
        let addr = u64::from_le_bytes(r.take());
        let length = u64::from_le_bytes(r.take());
        let [port] = r.take::<1>();
        let lid = u16::from_le_bytes(r.take());
        Ok(RcToken {
            transport,
            qpn,
            gid,
            rkey,
            addr,
            length,
            port,
            lid,
        })
    }

    /// The 88-character lower-case hex form.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(TOKEN_HEX_LEN);
        field::push_hex(&mut s, &self.to_bytes());
        s
    }

    /// Decodes exactly 88 hex digits (either case).
    pub fn decode(hex: &str) -> Result<Self, TokenError> {
        let bytes = field::hex_array::<TOKEN_BYTES>(hex, Case::Any).map_err(TokenError::Hex)?;
        Self::from_bytes(&bytes)
    }

    /// The client NIC's IPv4 address when the GID is IPv4-mapped (see [`client_nic_ipv4`]).
    pub fn nic_ipv4(&self) -> Option<Ipv4Addr> {
        client_nic_ipv4(&self.gid)
    }
}

impl std::fmt::Display for RcToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.encode())
    }
}

/// Sequential writer over the fixed token array; the layout constants guarantee the fit.
struct Writer<'a> {
    out: &'a mut [u8; TOKEN_BYTES],
    pos: usize,
}

impl Writer<'_> {
    fn put(&mut self, src: &[u8]) {
        let end = self.pos + src.len();
        if let Some(dst) = self.out.get_mut(self.pos..end) {
            dst.copy_from_slice(src);
        }
        self.pos = end;
    }
}

/// Sequential reader over the fixed token array.
struct Reader<'a> {
    bytes: &'a [u8; TOKEN_BYTES],
    pos: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        if let Some(src) = self.bytes.get(self.pos..self.pos + N) {
            out.copy_from_slice(src);
        }
        self.pos += N;
        out
    }
}

/// The client NIC's IPv4 address from a GID, as hipObject's `hipObjTokenClientNic` does it: if
/// bytes 10–11 are `ff ff` the last four bytes are the address, otherwise there is none. minio-cpp
/// binds its HTTP socket to this address so HTTP and RDMA leave through the same NIC.
pub fn client_nic_ipv4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    match gid {
        [_, _, _, _, _, _, _, _, _, _, 0xff, 0xff, a, b, c, d] => {
            Some(Ipv4Addr::new(*a, *b, *c, *d))
        }
        _ => None,
    }
}

/// The RoCEv2 GID of an IPv4 address: `::ffff:a.b.c.d`.
pub fn gid_from_ipv4(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// The `:<addr>:<size>` pair some clients append to a token (hipObject curl example, minio-cpp
/// bridge, NIXL ≤ Jul 2026): the remote buffer start and the transfer size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AddrSize {
    /// Remote buffer address.
    pub addr: u64,
    /// Size in bytes.
    pub size: u64,
}

impl AddrSize {
    /// Appends `:<addr 16 hex>:<size 16 hex>` (`%016lx`, what every sender writes).
    pub fn push_suffix(&self, out: &mut String) {
        out.push(':');
        field::push_hex(out, &self.addr.to_be_bytes());
        out.push(':');
        field::push_hex(out, &self.size.to_be_bytes());
    }
}

/// `<88 hex>` or `<88 hex>:<addr hex 1–16>:<size hex 1–16>`, one trailing `;` tolerated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenWithSuffix {
    /// The token.
    pub token: RcToken,
    /// The optional suffix; when present it overrides the token's addr/length on the test server.
    pub suffix: Option<AddrSize>,
}

/// No valid suffix form is longer than this (88 + 2 × 17 + `;`).
const MAX_SUFFIX_FORM_LEN: usize = TOKEN_HEX_LEN + 2 * 17 + 1;

impl TokenWithSuffix {
    /// Parses the header value.
    pub fn parse(value: &str) -> Result<Self, TokenError> {
        if value.len() > MAX_SUFFIX_FORM_LEN {
            return Err(TokenError::TooLong(value.len()));
        }
        let value = value.strip_suffix(';').unwrap_or(value);
        let mut parts = value.split(':');
        let (hex, addr, size) = (parts.next(), parts.next(), parts.next());
        let extra = parts.count();
        let token = RcToken::decode(hex.unwrap_or(""))?;
        match (addr, size, extra) {
            (None, None, 0) => Ok(TokenWithSuffix {
                token,
                suffix: None,
            }),
            (Some(addr), Some(size), 0) => {
                let suffix_field = |field, s| {
                    field::hex_u64(s, 1, 16, Case::Any)
                        .map_err(|source| TokenError::Suffix { field, source })
                };
                let suffix = AddrSize {
                    addr: suffix_field("addr", addr)?,
                    size: suffix_field("size", size)?,
                };
                Ok(TokenWithSuffix {
                    token,
                    suffix: Some(suffix),
                })
            }
            _ => Err(TokenError::FieldCount(
                1 + usize::from(addr.is_some()) + usize::from(size.is_some()) + extra,
            )),
        }
    }

    /// The canonical header value: lower-case token, 16-digit suffix fields, no `;`.
    pub fn encode(&self) -> String {
        let mut s = self.token.encode();
        if let Some(sfx) = &self.suffix {
            sfx.push_suffix(&mut s);
        }
        s
    }

    /// Remote buffer address: the suffix's if present, else the token's.
    pub fn remote_addr(&self) -> u64 {
        self.suffix.map_or(self.token.addr, |s| s.addr)
    }

    /// Transfer size: the suffix's if present, else the token's length.
    pub fn size(&self) -> u64 {
        self.suffix.map_or(self.token.length, |s| s.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKED: &str =
        "012301000000000000000000000000ffff0a000005efcdab0000100000007f00000010000000000000010000";

    fn worked() -> RcToken {
        RcToken {
            transport: Transport::Rc,
            qpn: 0x123,
            gid: gid_from_ipv4(Ipv4Addr::new(10, 0, 0, 5)),
            rkey: 0x00ab_cdef,
            addr: 0x7f00_0000_1000,
            length: 4096,
            port: 1,
            lid: 0,
        }
    }

    #[test]
    fn worked_example_round_trips() {
        assert_eq!(WORKED.len(), TOKEN_HEX_LEN);
        assert_eq!(worked().encode(), WORKED);
        assert_eq!(RcToken::decode(WORKED), Ok(worked()));
        assert_eq!(RcToken::decode(&WORKED.to_uppercase()), Ok(worked()));
        assert_eq!(worked().nic_ipv4(), Some(Ipv4Addr::new(10, 0, 0, 5)));
    }

    #[test]
    fn loopback_marker() {
        assert_eq!(LOOPBACK_HEX.len(), TOKEN_HEX_LEN);
        let t = RcToken::decode(LOOPBACK_HEX).unwrap();
        assert!(t.is_loopback());
        assert_eq!(RcToken::LOOPBACK.encode(), LOOPBACK_HEX);
        assert!(!worked().is_loopback());
        assert_eq!(t.nic_ipv4(), None);
    }

    #[test]
    fn rejects_bad_tokens() {
        assert!(matches!(
            RcToken::decode(&WORKED[..86]),
            Err(TokenError::Hex(FieldError::WrongLength { .. }))
        ));
        let bad_hex = format!("{}g", &WORKED[..87]);
        assert_eq!(
            RcToken::decode(&bad_hex),
            Err(TokenError::Hex(FieldError::NotHex { offset: 87 }))
        );
        let bad_transport = format!("02{}", &WORKED[2..]);
        assert_eq!(
            RcToken::decode(&bad_transport),
            Err(TokenError::UnknownTransport(2))
        );
        // qpn bytes 23 01 00 01 → 0x01000123: more than 24 bits.
        let wide_qpn = format!("0123010001{}", &WORKED[10..]);
        assert_eq!(
            RcToken::decode(&wide_qpn),
            Err(TokenError::QpnOutOfRange(0x0100_0123))
        );
    }

    #[test]
    fn suffix_form() {
        let v = format!("{WORKED}:00007f0000002000:0000000000000100;");
        let p = TokenWithSuffix::parse(&v).unwrap();
        assert_eq!(p.token, worked());
        assert_eq!(
            p.suffix,
            Some(AddrSize {
                addr: 0x7f00_0000_2000,
                size: 0x100
            })
        );
        assert_eq!(p.remote_addr(), 0x7f00_0000_2000);
        assert_eq!(p.size(), 0x100);
        assert_eq!(p.encode(), v.trim_end_matches(';'));
        let short = TokenWithSuffix::parse(&format!("{WORKED}:1:A")).unwrap();
        assert_eq!(short.suffix, Some(AddrSize { addr: 1, size: 10 }));
        assert_eq!(
            short.encode(),
            format!("{WORKED}:0000000000000001:000000000000000a")
        );
        let bare = TokenWithSuffix::parse(WORKED).unwrap();
        assert_eq!(
            (bare.suffix, bare.remote_addr(), bare.size()),
            (None, 0x7f00_0000_1000, 4096)
        );
    }

    #[test]
    fn suffix_errors() {
        assert_eq!(
            TokenWithSuffix::parse(&format!("{WORKED}:1")),
            Err(TokenError::FieldCount(2))
        );
        assert_eq!(
            TokenWithSuffix::parse(&format!("{WORKED}:1:2:3")),
            Err(TokenError::FieldCount(4))
        );
        assert_eq!(
            TokenWithSuffix::parse(&format!("{WORKED}:1:")),
            Err(TokenError::Suffix {
                field: "size",
                source: FieldError::Empty
            })
        );
        assert_eq!(
            TokenWithSuffix::parse(&format!("{WORKED}:0x1:2")),
            Err(TokenError::Suffix {
                field: "addr",
                source: FieldError::NotHex { offset: 1 }
            })
        );
        assert!(matches!(
            TokenWithSuffix::parse(&format!("{WORKED}:12345678901234567:2")),
            Err(TokenError::Suffix {
                field: "addr",
                source: FieldError::TooLong { .. }
            })
        ));
        assert!(matches!(
            TokenWithSuffix::parse(&format!("{WORKED};;")),
            Err(TokenError::Hex(_))
        ));
        assert_eq!(
            TokenWithSuffix::parse(&"0".repeat(200)),
            Err(TokenError::TooLong(200))
        );
    }

    #[test]
    fn ipv4_mapping() {
        let gid = gid_from_ipv4(Ipv4Addr::new(192, 168, 1, 2));
        assert_eq!(
            gid,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2]
        );
        assert_eq!(client_nic_ipv4(&gid), Some(Ipv4Addr::new(192, 168, 1, 2)));
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        assert_eq!(client_nic_ipv4(&link_local), None);
    }
}
