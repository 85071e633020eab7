//! `x-amz-rdma-reply` in every form seen in the wild (docs/rdma-headers.md, `rdma::reply`).
//!
//! * decimal HTTP-like code — aws-c-s3 `RDMA_PROTOCOL_SPEC.md`, NIXL `rdma_protocol.h`, MinIO,
//!   Ceph, versitygw, NooBaa, elbencho: 200 / 204 / 206 success, 501 declined;
//! * `<code>:<88-hex peer token>` — hipObject v1 test server and every hipobj-rc-v2 PREPARE;
//! * legacy `ok…` / `err…` tags — ROCm/hipObject `token.cpp` (prefix match).
//!
//! Parsing follows hipObject (trailing NUL/CR/LF trimmed, < 512 bytes) and NIXL (strict
//! whole-string decimal, no sign, no space, 100..=599).

use thiserror::Error;

use super::field::{self, FieldError};
use super::token::{RcToken, TOKEN_HEX_LEN, TokenError};

/// Header values of this length or more are rejected (hipObject's bound).
pub const MAX_REPLY_LEN: usize = 512;
/// The code a server answers when it declines RDMA for this request.
pub const DECLINED: u16 = 501;

/// Why an `x-amz-rdma-reply` value was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// Empty after trimming. (NIXL treats an empty header like `501`; callers that want that
    /// must map this error themselves.)
    #[error("x-amz-rdma-reply is empty")]
    Empty,
    /// Too long.
    #[error("x-amz-rdma-reply of {0} bytes exceeds the 511-byte limit")]
    TooLong(usize),
    /// The code is not a strict decimal number.
    #[error("x-amz-rdma-reply code: {0}")]
    Code(FieldError),
    /// A code outside 100..=599.
    #[error("x-amz-rdma-reply code {0} outside 100..=599")]
    OutOfRange(u64),
    /// Text after `<code>:` that is not an 88-hex token.
    #[error("x-amz-rdma-reply: {0} characters after ':' where an 88-hex peer token is required")]
    BadTail(usize),
    /// An 88-hex tail that does not decode as a token.
    #[error("x-amz-rdma-reply peer token: {0}")]
    PeerToken(TokenError),
}

/// A parsed reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reply {
    /// Legacy `ok…` tag (means 200).
    LegacyOk,
    /// Legacy `err…` tag (a failure without a code).
    LegacyErr,
    /// A numeric code (100..=599 when parsed), optionally with the peer's RC token.
    Code {
        /// The code.
        code: u16,
        /// The server token of `200:<token>` replies.
        peer_token: Option<RcToken>,
    },
}

/// What a client should make of a reply (hipObject `token.cpp` mapping, NIXL rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplyClass {
    /// 200, 204 or 206 (legacy `ok` counts as 200): the data moved over RDMA.
    Success(u16),
    /// 501: the server declined RDMA; retry over HTTP (PUT with a body, without the token).
    Declined,
    /// Anything else; `None` for the legacy `err` tag.
    Failure(Option<u16>),
}

impl Reply {
    /// A plain numeric reply, range-checked.
    pub fn code(code: u16) -> Result<Self, ReplyError> {
        check_range(u64::from(code))?;
        Ok(Reply::Code {
            code,
            peer_token: None,
        })
    }

    /// `200` — full transfer.
    pub const OK: Reply = Reply::Code {
        code: 200,
        peer_token: None,
    };
    /// `206` — ranged or per-part transfer (MinIO style).
    pub const PARTIAL: Reply = Reply::Code {
        code: 206,
        peer_token: None,
    };
    /// `501` — RDMA declined.
    pub const DECLINED: Reply = Reply::Code {
        code: DECLINED,
        peer_token: None,
    };

    /// `200:<token>` — the v1 test server's and the v2 PREPARE's answer.
    pub fn ok_with_token(token: RcToken) -> Self {
        Reply::Code {
            code: 200,
            peer_token: Some(token),
        }
    }

    /// Parses a header value.
    pub fn parse(value: &str) -> Result<Self, ReplyError> {
        Self::parse_bytes(value.as_bytes())
    }

    /// Parses raw header bytes (header values need not be UTF-8).
    pub fn parse_bytes(value: &[u8]) -> Result<Self, ReplyError> {
        if value.len() >= MAX_REPLY_LEN {
            return Err(ReplyError::TooLong(value.len()));
        }
        let mut v = value;
        while let [rest @ .., b'\0' | b'\r' | b'\n'] = v {
            v = rest;
        }
        if v.is_empty() {
            return Err(ReplyError::Empty);
        }
        if v.starts_with(b"ok") {
            return Ok(Reply::LegacyOk);
        }
        if v.starts_with(b"err") {
            return Ok(Reply::LegacyErr);
        }
        let (code_part, tail) = match v.iter().position(|&b| b == b':') {
            Some(i) => (v.get(..i).unwrap_or_default(), v.get(i + 1..)),
            None => (v, None),
        };
        let code_str = std::str::from_utf8(code_part).map_err(|e| {
            ReplyError::Code(FieldError::NotDecimal {
                offset: e.valid_up_to(),
            })
        })?;
        let code = field::decimal_u64(code_str, 20).map_err(ReplyError::Code)?;
        let code = check_range(code)?;
        let peer_token = match tail {
            None => None,
            Some(t) if t.len() == TOKEN_HEX_LEN => {
                let hex = std::str::from_utf8(t).map_err(|_| ReplyError::BadTail(t.len()))?;
                Some(RcToken::decode(hex).map_err(ReplyError::PeerToken)?)
            }
            Some(t) => return Err(ReplyError::BadTail(t.len())),
        };
        Ok(Reply::Code { code, peer_token })
    }

    /// The canonical header value (`ok`, `err`, `200`, `200:<token>`).
    pub fn encode(&self) -> String {
        match self {
            Reply::LegacyOk => "ok".to_owned(),
            Reply::LegacyErr => "err".to_owned(),
            Reply::Code {
                code,
                peer_token: None,
            } => code.to_string(),
            Reply::Code {
                code,
                peer_token: Some(t),
            } => format!("{code}:{}", t.encode()),
        }
    }

    /// The numeric code, with legacy `ok` as 200 and `err` as none.
    pub fn status(&self) -> Option<u16> {
        match self {
            Reply::LegacyOk => Some(200),
            Reply::LegacyErr => None,
            Reply::Code { code, .. } => Some(*code),
        }
    }

    /// The peer token of a `<code>:<token>` reply.
    pub fn peer_token(&self) -> Option<&RcToken> {
        match self {
            Reply::Code {
                peer_token: Some(t),
                ..
            } => Some(t),
            _ => None,
        }
    }

    /// Success / declined / failure.
    pub fn classify(&self) -> ReplyClass {
        match self.status() {
            Some(c @ (200 | 204 | 206)) => ReplyClass::Success(c),
            Some(DECLINED) => ReplyClass::Declined,
            other => ReplyClass::Failure(other),
        }
    }
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.encode())
    }
}

fn check_range(code: u64) -> Result<u16, ReplyError> {
    match u16::try_from(code) {
        Ok(c) if (100..=599).contains(&c) => Ok(c),
        _ => Err(ReplyError::OutOfRange(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::token::LOOPBACK_HEX;

    const WORKED: &str =
        "012301000000000000000000000000ffff0a000005efcdab0000100000007f00000010000000000000010000";

    #[test]
    fn numeric_forms() {
        assert_eq!(Reply::parse("200"), Ok(Reply::OK));
        assert_eq!(Reply::parse("206\r\n"), Ok(Reply::PARTIAL));
        assert_eq!(Reply::parse_bytes(b"501\0"), Ok(Reply::DECLINED));
        assert_eq!(Reply::parse("0204").map(|r| r.status()), Ok(Some(204)));
        assert_eq!(
            Reply::parse("200").unwrap().classify(),
            ReplyClass::Success(200)
        );
        assert_eq!(
            Reply::parse("204").unwrap().classify(),
            ReplyClass::Success(204)
        );
        assert_eq!(
            Reply::parse("206").unwrap().classify(),
            ReplyClass::Success(206)
        );
        assert_eq!(
            Reply::parse("501").unwrap().classify(),
            ReplyClass::Declined
        );
        assert_eq!(
            Reply::parse("500").unwrap().classify(),
            ReplyClass::Failure(Some(500))
        );
        assert_eq!(
            Reply::parse("201").unwrap().classify(),
            ReplyClass::Failure(Some(201))
        );
    }

    #[test]
    fn rejects_junk() {
        assert_eq!(Reply::parse(""), Err(ReplyError::Empty));
        assert_eq!(Reply::parse("\r\n"), Err(ReplyError::Empty));
        assert_eq!(
            Reply::parse(" 200"),
            Err(ReplyError::Code(FieldError::NotDecimal { offset: 0 }))
        );
        assert_eq!(
            Reply::parse("200 "),
            Err(ReplyError::Code(FieldError::NotDecimal { offset: 3 }))
        );
        assert_eq!(
            Reply::parse("+200"),
            Err(ReplyError::Code(FieldError::NotDecimal { offset: 0 }))
        );
        assert_eq!(
            Reply::parse("-1"),
            Err(ReplyError::Code(FieldError::NotDecimal { offset: 0 }))
        );
        assert_eq!(Reply::parse("99"), Err(ReplyError::OutOfRange(99)));
        assert_eq!(Reply::parse("600"), Err(ReplyError::OutOfRange(600)));
        assert_eq!(Reply::parse("70000"), Err(ReplyError::OutOfRange(70000)));
        assert_eq!(
            Reply::parse("99999999999999999999"),
            Err(ReplyError::Code(FieldError::Overflow))
        );
        assert_eq!(Reply::parse("200:abc"), Err(ReplyError::BadTail(3)));
        assert_eq!(Reply::parse("200:"), Err(ReplyError::BadTail(0)));
        assert_eq!(
            Reply::parse(&"2".repeat(512)),
            Err(ReplyError::TooLong(512))
        );
        assert_eq!(
            Reply::parse_bytes(b"2\xff0"),
            Err(ReplyError::Code(FieldError::NotDecimal { offset: 1 }))
        );
        assert!(matches!(
            Reply::parse(&format!("200:02{}", &WORKED[2..])),
            Err(ReplyError::PeerToken(TokenError::UnknownTransport(2)))
        ));
    }

    #[test]
    fn token_form() {
        let r = Reply::parse(&format!("200:{WORKED}\r\n")).unwrap();
        assert_eq!(r.status(), Some(200));
        assert_eq!(r.peer_token().map(|t| t.qpn), Some(0x123));
        assert_eq!(r.encode(), format!("200:{WORKED}"));
        assert_eq!(r.classify(), ReplyClass::Success(200));
        let zero = Reply::parse(&format!("200:{LOOPBACK_HEX}")).unwrap();
        assert!(zero.peer_token().is_some_and(RcToken::is_loopback));
        assert_eq!(
            Reply::ok_with_token(RcToken::LOOPBACK).encode(),
            format!("200:{LOOPBACK_HEX}")
        );
    }

    #[test]
    fn legacy_tags() {
        assert_eq!(Reply::parse("ok"), Ok(Reply::LegacyOk));
        assert_eq!(Reply::parse("okay"), Ok(Reply::LegacyOk));
        assert_eq!(Reply::parse("err: no buffer"), Ok(Reply::LegacyErr));
        assert_eq!(Reply::LegacyOk.classify(), ReplyClass::Success(200));
        assert_eq!(Reply::LegacyErr.classify(), ReplyClass::Failure(None));
        assert_eq!(Reply::LegacyOk.encode(), "ok");
        assert_eq!(Reply::LegacyErr.encode(), "err");
    }

    #[test]
    fn encoder_forms() {
        assert_eq!(Reply::OK.encode(), "200");
        assert_eq!(Reply::PARTIAL.encode(), "206");
        assert_eq!(Reply::DECLINED.encode(), "501");
        assert_eq!(Reply::code(204).map(|r| r.encode()), Ok("204".to_owned()));
        assert_eq!(Reply::code(42), Err(ReplyError::OutOfRange(42)));
    }
}
