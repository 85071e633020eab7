//! Token-shape dispatch for `x-amz-rdma-token` (docs/rdma-headers.md, token-shape dispatch).
//!
//! One header name carries five token families. A multi-dialect gateway must tell them apart by
//! shape alone, in this order (after trimming one trailing `;`):
//! 1. `rc:` prefix → elbencho RC shim token (`tools/s3rdma/common/RdmaToken.h`);
//! 2. first field of 88 hex digits → hipObject RC token, optional `:addr:size`;
//! 3. six fields with field 3 == `ofi1` → libfabric window (mmgaggle/hipObject `src/ofi`,
//!    mmgaggle/ceph `ofi_rma.h`);
//! 4. seven (or nine) fields → cuObject DC descriptor (with suffix);
//! 5. anything else → [`DispatchError::Unrecognized`] (servers answer 400 without a reply header).
//!
//! Dell ObjectScale sends the cuObject descriptor in [`super::DELL_RDMA_INFO`] instead; parse that
//! value with [`DescriptorWithSuffix::parse`].

use thiserror::Error;

use super::descriptor::{DescriptorError, DescriptorWithSuffix, MAX_TOKEN_LEN};
use super::field::{self, Case, FieldError};
use super::token::{TOKEN_HEX_LEN, TokenError, TokenWithSuffix};

/// Literal tag in field 3 of a libfabric token.
pub const OFI_TAG: &str = "ofi1";
/// Prefix of elbencho's RC shim token.
pub const RC_SHIM_PREFIX: &str = "rc:";
/// elbencho's RC shim connect route.
pub const RC_SHIM_CONNECT_PATH: &str = "/.s3rdma-rc/connect";
/// elbencho's RC shim disconnect route.
pub const RC_SHIM_DISCONNECT_PATH: &str = "/.s3rdma-rc/disconnect";
/// Longest libfabric endpoint name in bytes.
pub const MAX_OFI_EP_NAME: usize = 192;
/// Longest libfabric provider (or wire) name.
pub const MAX_OFI_PROVIDER: usize = 64;

/// Why a token matched no family, or matched one but was malformed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// Empty header value.
    #[error("x-amz-rdma-token is empty")]
    Empty,
    /// Longer than any family allows (512, Ceph's cap).
    #[error("x-amz-rdma-token of {0} bytes exceeds 512")]
    TooLong(usize),
    /// Matches no family.
    #[error("x-amz-rdma-token matches no known token format")]
    Unrecognized,
    /// Looks like an RC shim token but a field is bad.
    #[error("RC shim token field {field}: {source}")]
    RcShim {
        /// `conn_id`, `addr`, `size` or `rkey`.
        field: &'static str,
        /// What was wrong.
        source: FieldError,
    },
    /// `rc:` followed by other than four `:`-separated fields.
    #[error("RC shim token: {0} fields after 'rc:', expected 4")]
    RcShimFieldCount(usize),
    /// Looks like a hipObject RC token but is malformed.
    #[error(transparent)]
    RcToken(#[from] TokenError),
    /// Looks like a libfabric token but a field is bad.
    #[error("ofi1 token field {field}: {source}")]
    Ofi {
        /// `base`, `size`, `provider`, `ep_name` or `key`.
        field: &'static str,
        /// What was wrong.
        source: FieldError,
    },
    /// Looks like a cuObject descriptor but is malformed.
    #[error(transparent)]
    Descriptor(#[from] DescriptorError),
}

/// elbencho's RC shim token `rc:<conn id 32 hex>:<addr hex>:<size hex>:<rkey hex>`, naming a
/// connection set up beforehand via `POST /.s3rdma-rc/connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RcShimToken {
    /// Connection id from `x-amz-rdma-session` of the connect answer.
    pub conn_id: [u8; 16],
    /// Client buffer address.
    pub addr: u64,
    /// Bytes to transfer.
    pub size: u64,
    /// Client buffer rkey.
    pub rkey: u32,
}

impl RcShimToken {
    /// Parses the token (no `;` handling; [`classify`] does that).
    pub fn parse(value: &str) -> Result<Self, DispatchError> {
        let rest = value
            .strip_prefix(RC_SHIM_PREFIX)
            .ok_or(DispatchError::Unrecognized)?;
        let e = |field| move |source| DispatchError::RcShim { field, source };
        let count = rest.split(':').count();
        let mut it = rest.split(':');
        match (it.next(), it.next(), it.next(), it.next(), count) {
            (Some(id), Some(addr), Some(size), Some(rkey), 4) => Ok(RcShimToken {
                conn_id: field::hex_array::<16>(id, Case::Any).map_err(e("conn_id"))?,
                addr: field::hex_u64(addr, 1, 16, Case::Any).map_err(e("addr"))?,
                size: field::hex_u64(size, 1, 16, Case::Any).map_err(e("size"))?,
                rkey: field::hex_u32(rkey, 1, 8, Case::Any, u32::MAX).map_err(e("rkey"))?,
            }),
            _ => Err(DispatchError::RcShimFieldCount(count)),
        }
    }

    /// The canonical token: lower-case, unpadded numbers.
    pub fn encode(&self) -> String {
        let mut s = String::with_capacity(80);
        s.push_str(RC_SHIM_PREFIX);
        field::push_hex(&mut s, &self.conn_id);
        s.push_str(&format!(":{:x}:{:x}:{:x}", self.addr, self.size, self.rkey));
        s
    }
}

/// A libfabric window `<base>:<size>:ofi1:<provider>:<ep name hex>:<key>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OfiToken {
    /// Remote address of window byte 0 as the owner's provider sees it.
    pub base: u64,
    /// Window length.
    pub size: u64,
    /// `fi_info` provider name (`tcp`, `verbs;ofi_rxm`, …) or, in newer hipObject, a wire id
    /// (`rxm.1`, `uet.<ver>`): 1–64 of `[A-Za-z0-9;_.-]`.
    pub provider: String,
    /// Raw `fi_getname()` bytes (≤ 192).
    pub ep_name: Vec<u8>,
    /// `fi_mr_key` (≤ 8 bytes).
    pub key: u64,
}

impl OfiToken {
    /// Parses a six-field token whose third field is `ofi1`.
    pub fn parse(value: &str) -> Result<Self, DispatchError> {
        let mut f = [""; 6];
        let mut n = 0usize;
        for part in value.split(':') {
            if let Some(slot) = f.get_mut(n) {
                *slot = part;
            }
            n += 1;
        }
        let [base, size, tag, provider, ep, key] = f;
        if n != 6 || tag != OFI_TAG {
            return Err(DispatchError::Unrecognized);
        }
        let e = |field| move |source| DispatchError::Ofi { field, source };
        if provider.is_empty() {
            return Err(e("provider")(FieldError::Empty));
        }
        if provider.len() > MAX_OFI_PROVIDER {
            return Err(e("provider")(FieldError::TooLong {
                max: MAX_OFI_PROVIDER,
                found: provider.len(),
            }));
        }
        if let Some(offset) = provider
            .bytes()
            .position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b';' | b'_' | b'.' | b'-')))
        {
            return Err(e("provider")(FieldError::NotHex { offset }));
        }
        Ok(OfiToken {
            base: field::hex_u64(base, 1, 16, Case::Any).map_err(e("base"))?,
            size: field::hex_u64(size, 1, 16, Case::Any).map_err(e("size"))?,
            provider: provider.to_owned(),
            ep_name: field::hex_vec(ep, MAX_OFI_EP_NAME, Case::Any).map_err(e("ep_name"))?,
            key: field::hex_u64(key, 1, 16, Case::Any).map_err(e("key"))?,
        })
    }

    /// The canonical token (`%llx` numbers, lower-case endpoint name).
    pub fn encode(&self) -> String {
        let mut s = format!(
            "{:x}:{:x}:{OFI_TAG}:{}:",
            self.base, self.size, self.provider
        );
        field::push_hex(&mut s, &self.ep_name);
        s.push_str(&format!(":{:x}", self.key));
        s
    }
}

/// The family a token belongs to, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenKind {
    /// elbencho RC shim (connection-bound).
    RcShim(RcShimToken),
    /// hipObject RC token: v1 one-shot on object requests (answer 501 + marker), v2 inside PREPARE.
    HipObjectRc(TokenWithSuffix),
    /// libfabric window.
    Ofi(OfiToken),
    /// cuObject DC descriptor.
    CuObject(DescriptorWithSuffix),
}

impl TokenKind {
    /// The canonical header value of the parsed token.
    pub fn encode(&self) -> String {
        match self {
            TokenKind::RcShim(t) => t.encode(),
            TokenKind::HipObjectRc(t) => t.encode(),
            TokenKind::Ofi(t) => t.encode(),
            TokenKind::CuObject(t) => t.format(),
        }
    }
}

/// Classifies and parses an `x-amz-rdma-token` value.
///
/// Exactly one trailing `;` is allowed. The family is chosen on the value without it; the
/// hipObject RC and cuObject families are then parsed from the value *as given* by their own
/// parsers ([`TokenWithSuffix::parse`], [`DescriptorWithSuffix::parse`]), which own that rule,
/// so `classify` accepts exactly what they accept (a second `;` is not stripped twice).
pub fn classify(value: &str) -> Result<TokenKind, DispatchError> {
    if value.len() > MAX_TOKEN_LEN {
        return Err(DispatchError::TooLong(value.len()));
    }
    let v = value.strip_suffix(';').unwrap_or(value);
    if v.is_empty() {
        return Err(DispatchError::Empty);
    }
    if v.starts_with(RC_SHIM_PREFIX) {
        return RcShimToken::parse(v).map(TokenKind::RcShim);
    }
    let first = v.split(':').next().unwrap_or_default();
    if first.len() == TOKEN_HEX_LEN && field::is_hex(first) {
        return Ok(TokenKind::HipObjectRc(TokenWithSuffix::parse(value)?));
    }
    let fields = v.split(':').count();
    if fields == 6 && v.split(':').nth(2) == Some(OFI_TAG) {
        return OfiToken::parse(v).map(TokenKind::Ofi);
    }
    if fields == 7 || fields == 9 {
        return Ok(TokenKind::CuObject(DescriptorWithSuffix::parse(value)?));
    }
    Err(DispatchError::Unrecognized)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::token::LOOPBACK_HEX;

    const RC: &str =
        "012301000000000000000000000000ffff0a000005efcdab0000100000007f00000010000000000000010000";
    const DC: &str =
        "00007f7c12340000:00800000:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005";

    #[test]
    fn each_family() {
        let shim = classify("rc:00112233445566778899aabbccddeeff:7f0000001000:1000:abcd;").unwrap();
        let TokenKind::RcShim(s) = shim else {
            panic!("{shim:?}")
        };
        assert_eq!(
            (s.conn_id[0], s.addr, s.size, s.rkey),
            (0, 0x7f00_0000_1000, 0x1000, 0xabcd)
        );
        assert_eq!(
            s.encode(),
            "rc:00112233445566778899aabbccddeeff:7f0000001000:1000:abcd"
        );

        assert!(matches!(
            classify(RC),
            Ok(TokenKind::HipObjectRc(TokenWithSuffix { suffix: None, .. }))
        ));
        assert!(matches!(
            classify(&format!("{RC}:1:2")),
            Ok(TokenKind::HipObjectRc(TokenWithSuffix {
                suffix: Some(_),
                ..
            }))
        ));
        assert!(
            matches!(classify(LOOPBACK_HEX), Ok(TokenKind::HipObjectRc(t)) if t.token.is_loopback())
        );

        let ofi = classify("7f00a000:100000:ofi1:verbs;ofi_rxm:0200115c0a000005:1f").unwrap();
        let TokenKind::Ofi(o) = &ofi else {
            panic!("{ofi:?}")
        };
        assert_eq!(
            (o.base, o.size, o.provider.as_str(), o.key),
            (0x7f00_a000, 0x10_0000, "verbs;ofi_rxm", 0x1f)
        );
        assert_eq!(o.ep_name, [0x02, 0x00, 0x11, 0x5c, 0x0a, 0x00, 0x00, 0x05]);
        assert_eq!(
            ofi.encode(),
            "7f00a000:100000:ofi1:verbs;ofi_rxm:0200115c0a000005:1f"
        );

        assert!(matches!(classify(DC), Ok(TokenKind::CuObject(d)) if d.suffix.is_none()));
        let with = format!("{DC}:00007f7c12340000:0000000000001000;");
        assert!(matches!(classify(&with), Ok(TokenKind::CuObject(d)) if d.size() == 0x1000));
    }

    #[test]
    fn errors_name_the_family() {
        assert_eq!(classify(""), Err(DispatchError::Empty));
        assert_eq!(classify(";"), Err(DispatchError::Empty));
        assert_eq!(classify("hello"), Err(DispatchError::Unrecognized));
        assert_eq!(classify("a:b:c"), Err(DispatchError::Unrecognized));
        assert_eq!(classify(&"0".repeat(513)), Err(DispatchError::TooLong(513)));
        assert!(matches!(
            classify("rc:0011:1:2:3"),
            Err(DispatchError::RcShim {
                field: "conn_id",
                ..
            })
        ));
        assert!(matches!(
            classify("rc:00112233445566778899aabbccddeeff:1:2"),
            Err(DispatchError::RcShimFieldCount(3))
        ));
        assert!(matches!(
            classify(&format!("{RC}:1")),
            Err(DispatchError::RcToken(TokenError::FieldCount(2)))
        ));
        assert!(matches!(
            classify(&format!("02{}", &RC[2..])),
            Err(DispatchError::RcToken(TokenError::UnknownTransport(2)))
        ));
        assert!(matches!(
            classify("1:2:ofi1:tcp:abc:1"),
            Err(DispatchError::Ofi {
                field: "ep_name",
                ..
            })
        ));
        assert!(matches!(
            classify("1:2:ofi1:t c:ab:1"),
            Err(DispatchError::Ofi {
                field: "provider",
                ..
            })
        ));
        assert!(matches!(
            classify("1:2:ofi1::ab:1"),
            Err(DispatchError::Ofi {
                field: "provider",
                ..
            })
        ));
        assert!(matches!(
            classify("1:2:ofi1:tcp:ab:12345678901234567"),
            Err(DispatchError::Ofi { field: "key", .. })
        ));
        assert!(matches!(
            classify(&DC.replace(":1:", ":7:")),
            Err(DispatchError::Descriptor(_))
        ));
        assert!(matches!(
            classify("1:2:3:4:5:6:7"),
            Err(DispatchError::Descriptor(_))
        ));
    }

    /// Found by the fuzzer (`fuzz/seeds/token_dispatch/regression-rc-suffix-two-semicolons`):
    /// `classify` stripped one `;` and the family parser another, so `…:0:00;;` was accepted as
    /// an RC token with a suffix while `TokenWithSuffix::parse` (and `DescriptorWithSuffix::parse`)
    /// rejected it. One trailing `;` is allowed, never two, whoever parses.
    #[test]
    fn one_trailing_semicolon_in_every_family() {
        let rc = format!("{RC}:0:00");
        let dc = format!("{DC}:00007f7c12340000:0000000000001000");
        let shim = "rc:00112233445566778899aabbccddeeff:7f0000001000:1000:abcd";
        let ofi = "7f00a000:100000:ofi1:tcp:0200115c0a000005:1f";
        for v in [&rc, &dc, shim, ofi, RC, DC] {
            assert!(classify(v).is_ok(), "{v}");
            assert!(classify(&format!("{v};")).is_ok(), "{v};");
            assert!(classify(&format!("{v};;")).is_err(), "{v};;");
        }
        assert!(TokenWithSuffix::parse(&format!("{rc};;")).is_err());
        assert!(DescriptorWithSuffix::parse(&format!("{dc};;")).is_err());
    }
}
