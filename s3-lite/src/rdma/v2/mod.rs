//! hipobj-rc-v2 header codecs (docs/rdma-headers.md, `rdma::v2`; the exchange: docs/protocol.md, hipobj-rc-v2).
//!
//! The two-phase RC protocol of ROCm/hipObject (`src/rdma/v2-wire.cpp`), mmgaggle/hipObject,
//! mmgaggle/ceph (`rgw_rdma_rc_wire.cc`), versitygw (`rdma/rcroutes`) and elbencho
//! (`HipObjV2Server.cpp`). No versioned spec exists; where the peers differ the parsers accept
//! what every sender writes and the encoders write what every receiver accepts (lower-case hex,
//! fixed widths where any peer requires them).
//!
//! Scalars are here; the target path is in [`target`], the checksum headers in [`checksum`].

pub mod checksum;
pub mod client;
pub mod target;

use thiserror::Error;

use super::field::{self, Case, FieldError};

pub use checksum::{RdmaChecksums, legacy_checksum_value, parse_legacy_checksum};
pub use target::{Target, TargetError, TargetQuery};

/// Value of `x-amz-rdma-protocol` for this protocol.
pub const PROTOCOL: &str = "hipobj-rc-v2";
/// What every v2 route starts with.
pub const ROUTE_PREFIX: &str = "/.hipobj-rc/";
/// PREPARE route.
pub const PREPARE_PATH: &str = "/.hipobj-rc/prepare";
/// READY route (its answer is the final outcome).
pub const READY_PATH: &str = "/.hipobj-rc/ready";
/// CANCEL route (idempotent).
pub const CANCEL_PATH: &str = "/.hipobj-rc/cancel";
/// Largest transfer of one session: 2^31 − 1 bytes.
pub const MAX_SIZE: u64 = 0x7fff_ffff;
/// Capability token announcing multipart (UploadPart) over RC (versitygw).
pub const CAPABILITY_MULTIPART: &str = "mp";

/// Why a v2 scalar header was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum V2Error {
    /// `x-amz-rdma-protocol` is missing or not `hipobj-rc-v2` (servers answer 501 + marker).
    #[error("x-amz-rdma-protocol {0:?} is not hipobj-rc-v2")]
    WrongProtocol(String),
    /// A malformed field.
    #[error("{header}: {source}")]
    Field {
        /// The header name.
        header: &'static str,
        /// What was wrong.
        source: FieldError,
    },
    /// A cookie of zero where the peer requires a non-zero one (Ceph, versitygw).
    #[error("x-amz-rdma-cookie must not be zero")]
    ZeroCookie,
    /// `x-amz-rdma-op` other than GET/PUT.
    #[error("x-amz-rdma-op {0:?} is neither GET nor PUT")]
    UnknownOp(String),
    /// `x-amz-rdma-size` above 2^31 − 1: a server answers 413.
    #[error("x-amz-rdma-size exceeds 2147483647 bytes")]
    TooLarge,
    /// Too many capability tokens.
    #[error("x-amz-rdma-capabilities has more than {0} entries")]
    TooManyCapabilities(usize),
}

fn err(header: &'static str) -> impl Fn(FieldError) -> V2Error {
    move |source| V2Error::Field { header, source }
}

/// Checks `x-amz-rdma-protocol` (exact match).
pub fn check_protocol(value: Option<&str>) -> Result<(), V2Error> {
    match value {
        Some(PROTOCOL) => Ok(()),
        other => Err(V2Error::WrongProtocol(
            other.unwrap_or_default().chars().take(64).collect(),
        )),
    }
}

/// `x-amz-rdma-session`: 128 random bits as 32 hex digits. Generating the bits is the caller's job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId(pub [u8; 16]);

impl SessionId {
    /// Parses exactly 32 hex digits (either case).
    pub fn parse(value: &str) -> Result<Self, V2Error> {
        field::hex_array::<16>(value, Case::Any)
            .map(SessionId)
            .map_err(err(super::RDMA_SESSION))
    }

    /// 32 lower-case hex digits.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(32);
        field::push_hex(&mut s, &self.0);
        s
    }
}

/// `x-amz-rdma-cookie`: the 32-bit client nonce that rides as the completing write's immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cookie(pub u32);

impl Cookie {
    /// Exactly 8 hex digits, zero allowed (ROCm reference parser).
    pub fn parse_lenient(value: &str) -> Result<Self, V2Error> {
        field::hex_u64(value, 8, 8, Case::Any)
            .and_then(|v| u32::try_from(v).map_err(|_| FieldError::Overflow))
            .map(Cookie)
            .map_err(err(super::RDMA_COOKIE))
    }

    /// Exactly 8 hex digits, non-zero (Ceph, versitygw; hipObject never generates 0).
    pub fn parse_strict(value: &str) -> Result<Self, V2Error> {
        match Self::parse_lenient(value)? {
            Cookie(0) => Err(V2Error::ZeroCookie),
            c => Ok(c),
        }
    }

    /// 8 lower-case hex digits.
    pub fn encode(&self) -> String {
        format!("{:08x}", self.0)
    }
}

/// `x-amz-rdma-psn`: a 24-bit non-zero packet sequence number, exactly 6 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Psn(u32);

impl Psn {
    /// A PSN from a value in 1..=0xFFFFFF.
    pub fn new(value: u32) -> Result<Self, V2Error> {
        field::in_range(u64::from(value), 1, 0xff_ffff).map_err(err(super::RDMA_PSN))?;
        Ok(Psn(value))
    }

    /// The value.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Exactly 6 hex digits (either case: Ceph writes upper case), value 1..=0xFFFFFF.
    pub fn parse(value: &str) -> Result<Self, V2Error> {
        let v = field::hex_u64(value, 6, 6, Case::Any).map_err(err(super::RDMA_PSN))?;
        let v = field::in_range(v, 1, 0xff_ffff).map_err(err(super::RDMA_PSN))?;
        Ok(Psn(
            u32::try_from(v).map_err(|_| err(super::RDMA_PSN)(FieldError::Overflow))?
        ))
    }

    /// 6 lower-case hex digits.
    pub fn encode(&self) -> String {
        format!("{:06x}", self.0)
    }
}

/// `x-amz-rdma-qpn`: bare hex, at most 8 digits, value 1..=0xFFFFFF (QPN 0 is the SMI, never RC).
pub fn parse_qpn(value: &str) -> Result<u32, V2Error> {
    let v = field::hex_u64(value, 1, 8, Case::Any).map_err(err(super::RDMA_QPN))?;
    let v = field::in_range(v, 1, 0xff_ffff).map_err(err(super::RDMA_QPN))?;
    u32::try_from(v).map_err(|_| err(super::RDMA_QPN)(FieldError::Overflow))
}

/// `x-amz-rdma-mr-addr`: bare hex, at most 16 digits, no `0x`.
pub fn parse_mr_addr(value: &str) -> Result<u64, V2Error> {
    field::hex_u64(value, 1, 16, Case::Any).map_err(err(super::RDMA_MR_ADDR))
}

/// `x-amz-rdma-mr-rkey`: bare hex, at most 8 digits.
pub fn parse_mr_rkey(value: &str) -> Result<u32, V2Error> {
    field::hex_u32(value, 1, 8, Case::Any, u32::MAX).map_err(err(super::RDMA_MR_RKEY))
}

/// Bare lower-case hex, the form of `x-amz-rdma-qpn`, `-mr-addr` and `-mr-rkey`.
pub fn encode_hex(value: u64) -> String {
    format!("{value:x}")
}

/// `x-amz-rdma-op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Server writes into the client.
    Get,
    /// Client writes into server staging.
    Put,
}

impl Op {
    /// Case-insensitive (Ceph and versitygw upper-case it first).
    pub fn parse(value: &str) -> Result<Self, V2Error> {
        if value.eq_ignore_ascii_case("GET") {
            Ok(Op::Get)
        } else if value.eq_ignore_ascii_case("PUT") {
            Ok(Op::Put)
        } else {
            Err(V2Error::UnknownOp(value.chars().take(16).collect()))
        }
    }

    /// `GET` / `PUT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Put => "PUT",
        }
    }
}

/// `x-amz-rdma-size`: decimal, at most 20 digits, 1..=2^31−1. Above the limit (including values
/// that overflow 64 bits) → [`V2Error::TooLarge`] so a server can answer 413.
pub fn parse_size(value: &str) -> Result<u64, V2Error> {
    match field::decimal_u64(value, 20) {
        Ok(0) => Err(err(super::RDMA_SIZE)(FieldError::OutOfRange {
            value: 0,
            min: 1,
            max: MAX_SIZE,
        })),
        Ok(v) if v > MAX_SIZE => Err(V2Error::TooLarge),
        Ok(v) => Ok(v),
        Err(FieldError::Overflow) => Err(V2Error::TooLarge),
        Err(e) => Err(err(super::RDMA_SIZE)(e)),
    }
}

/// `x-amz-rdma-offset`: optional decimal (≤ 20 digits), default 0.
pub fn parse_offset(value: Option<&str>) -> Result<u64, V2Error> {
    value.map_or(Ok(0), |v| {
        field::decimal_u64(v, 20).map_err(err(super::RDMA_OFFSET))
    })
}

/// Parsed `x-amz-rdma-capabilities` (comma list; versitygw sends `mp`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capabilities {
    /// Tokens in order, lower-cased, empty items dropped.
    pub tokens: Vec<String>,
}

/// Most capability tokens kept.
const MAX_CAPABILITIES: usize = 32;

impl Capabilities {
    /// Parses `a, b,c`: items trimmed of spaces/tabs, lower-cased, empties skipped; at most 32.
    pub fn parse(value: &str) -> Result<Self, V2Error> {
        let mut tokens = Vec::new();
        for item in value
            .split(',')
            .map(|s| s.trim_matches([' ', '\t']))
            .filter(|s| !s.is_empty())
        {
            if tokens.len() == MAX_CAPABILITIES {
                return Err(V2Error::TooManyCapabilities(MAX_CAPABILITIES));
            }
            tokens.push(item.to_ascii_lowercase());
        }
        Ok(Capabilities { tokens })
    }

    /// Whether multipart over RC (`mp`) is offered.
    pub fn multipart(&self) -> bool {
        self.tokens.iter().any(|t| t == CAPABILITY_MULTIPART)
    }

    /// `a,b` form.
    pub fn encode(&self) -> String {
        self.tokens.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_marker() {
        assert_eq!(check_protocol(Some("hipobj-rc-v2")), Ok(()));
        assert_eq!(
            check_protocol(Some("hipobj-rc-v1")),
            Err(V2Error::WrongProtocol("hipobj-rc-v1".into()))
        );
        assert_eq!(
            check_protocol(None),
            Err(V2Error::WrongProtocol(String::new()))
        );
    }

    #[test]
    fn session_cookie_psn() {
        let s = SessionId::parse("00112233445566778899AABBCCDDEEFF").unwrap();
        assert_eq!(s.0[15], 0xff);
        assert_eq!(s.encode(), "00112233445566778899aabbccddeeff");
        assert!(SessionId::parse("0011").is_err());
        assert_eq!(Cookie::parse_strict("DEADBEEF"), Ok(Cookie(0xdead_beef)));
        assert_eq!(Cookie(0x1f).encode(), "0000001f");
        assert_eq!(Cookie::parse_strict("00000000"), Err(V2Error::ZeroCookie));
        assert_eq!(Cookie::parse_lenient("00000000"), Ok(Cookie(0)));
        assert!(matches!(
            Cookie::parse_lenient("1f"),
            Err(V2Error::Field { .. })
        ));
        assert_eq!(Psn::parse("00ABCD").map(Psn::get), Ok(0xabcd));
        assert_eq!(
            Psn::parse("000001").map(|p| p.encode()),
            Ok("000001".to_owned())
        );
        assert!(Psn::parse("000000").is_err());
        assert!(Psn::parse("1").is_err());
        assert!(Psn::parse("1000000").is_err());
        assert!(Psn::new(0x100_0000).is_err());
        assert_eq!(
            Psn::new(0xff_ffff).map(|p| p.encode()),
            Ok("ffffff".to_owned())
        );
    }

    #[test]
    fn qpn_and_mr() {
        assert_eq!(parse_qpn("123"), Ok(0x123));
        assert_eq!(parse_qpn("00FFFFFF"), Ok(0xff_ffff));
        assert!(parse_qpn("01000000").is_err());
        assert!(parse_qpn("0").is_err());
        assert!(parse_qpn("000000001").is_err());
        assert!(parse_qpn("0x12").is_err());
        assert_eq!(parse_mr_addr("7f0000001000"), Ok(0x7f00_0000_1000));
        assert!(parse_mr_addr("0x7f").is_err());
        assert!(parse_mr_addr("10000000000000000").is_err());
        assert_eq!(parse_mr_rkey("abcdef"), Ok(0xab_cdef));
        assert!(parse_mr_rkey("100000000").is_err());
        assert_eq!(encode_hex(0x7f00_0000_1000), "7f0000001000");
    }

    #[test]
    fn op_size_offset() {
        assert_eq!(Op::parse("get"), Ok(Op::Get));
        assert_eq!(Op::parse("PUT"), Ok(Op::Put));
        assert_eq!(Op::parse("POST"), Err(V2Error::UnknownOp("POST".into())));
        assert_eq!(Op::Put.as_str(), "PUT");
        assert_eq!(parse_size("1"), Ok(1));
        assert_eq!(parse_size("2147483647"), Ok(MAX_SIZE));
        assert_eq!(parse_size("2147483648"), Err(V2Error::TooLarge));
        assert_eq!(parse_size("99999999999999999999"), Err(V2Error::TooLarge));
        assert!(matches!(
            parse_size("999999999999999999999"),
            Err(V2Error::Field { .. })
        ));
        assert!(matches!(parse_size("0"), Err(V2Error::Field { .. })));
        assert!(matches!(parse_size("-1"), Err(V2Error::Field { .. })));
        assert!(matches!(parse_size(" 1"), Err(V2Error::Field { .. })));
        assert_eq!(parse_offset(None), Ok(0));
        assert_eq!(parse_offset(Some("4096")), Ok(4096));
        assert!(parse_offset(Some("")).is_err());
    }

    #[test]
    fn capabilities() {
        let c = Capabilities::parse("mp").unwrap();
        assert!(c.multipart());
        let c = Capabilities::parse(" MP , pull,, ").unwrap();
        assert_eq!(c.tokens, ["mp", "pull"]);
        assert_eq!(c.encode(), "mp,pull");
        assert!(!Capabilities::parse("").unwrap().multipart());
        assert!(Capabilities::parse(&"a,".repeat(33)).is_err());
    }
}
