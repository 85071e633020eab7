//! The RDMA token helpers of the hipObject API, as pure functions on
//! `s3_lite::rdma::{token, reply}` (docs/rdma-headers.md, RC token and `rdma::reply`). The `ffi` module only moves bytes
//! in and out of C memory.

use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};

use s3_lite::rdma::{RcToken, Reply, ReplyClass, TokenWithSuffix};

use crate::error::{Fail, OpError};

/// Longest token header value accepted by [`client_nic`] (88 hex + `:addr:size` + `;`).
pub const MAX_TOKEN_VALUE: usize = 88 + 2 * 17 + 1;

/// What `hipObjParseRdmaReply` reports: the code it writes and the call's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedReply {
    /// Value written to `*httpCode` (-1 for the legacy `err` tag, which has no code).
    pub http_code: i32,
    /// `Success` for 200/204/206 and 501 (declined: the caller falls back to HTTP, as the seed
    /// documents); `RdmaError` for any other code.
    pub result: OpError,
}

/// Parses an `x-amz-rdma-reply` value (trailing NUL/CR/LF trimmed, < 512 bytes).
pub fn parse_reply(value: &[u8]) -> Result<ParsedReply, Fail> {
    let reply = Reply::parse_bytes(value).map_err(|e| {
        Fail::new(
            OpError::InvalidValue,
            format!("{}: {e}", s3_lite::rdma::RDMA_REPLY),
        )
    })?;
    let code = reply.status().map_or(-1, i32::from);
    Ok(match reply.classify() {
        ReplyClass::Success(_) | ReplyClass::Declined => ParsedReply {
            http_code: code,
            result: OpError::Success,
        },
        _ => ParsedReply {
            http_code: code,
            result: OpError::RdmaError,
        },
    })
}

/// The client NIC's dotted-quad IPv4 address encoded in a token's GID (`::ffff:a.b.c.d`), or
/// the empty string when the GID is not IPv4-mapped. Accepts the bare 88-hex token and the
/// `:<addr>:<size>` suffixed form.
pub fn client_nic(value: &[u8]) -> Result<String, Fail> {
    if value.len() > MAX_TOKEN_VALUE {
        return Err(Fail::new(
            OpError::InvalidValue,
            format!("RDMA token of {} bytes is too long", value.len()),
        ));
    }
    let s = std::str::from_utf8(value)
        .map_err(|_| Fail::new(OpError::InvalidValue, "RDMA token is not ASCII hex"))?;
    let parsed = TokenWithSuffix::parse(s.trim_end_matches(['\r', '\n']))
        .map_err(|e| Fail::new(OpError::InvalidValue, format!("RDMA token: {e}")))?;
    Ok(parsed
        .token
        .nic_ipv4()
        .map(|ip| ip.to_string())
        .unwrap_or_default())
}

/// Tokens handed to C (`hipObjGetRdmaToken`) and not yet released (`hipObjPutRdmaToken`),
/// keyed by address. The set owns each string's bytes, so releasing is a removal: a pointer we
/// did not hand out, or one released twice, is an error instead of a double free, and no
/// `unsafe` is needed to take memory back.
#[derive(Debug, Default)]
pub struct Issued {
    live: Mutex<HashMap<usize, Vec<u8>>>,
}

impl Issued {
    /// Stores `token` as a NUL-terminated 88-hex string and returns a pointer to it, valid until
    /// [`Issued::reclaim`] (the caller may read and write its 89 bytes).
    pub fn issue(&self, token: &RcToken) -> *mut c_char {
        let mut bytes = token.encode().into_bytes();
        bytes.push(0);
        // The Vec's heap buffer does not move when the Vec is moved into the map.
        let ptr = bytes.as_mut_ptr().cast::<c_char>();
        self.lock().insert(ptr as usize, bytes);
        ptr
    }

    /// Releases a pointer this set issued and has not released yet.
    pub fn reclaim(&self, ptr: *mut c_char) -> Result<(), Fail> {
        if ptr.is_null() {
            return Err(Fail::new(OpError::InvalidValue, "token pointer is NULL"));
        }
        match self.lock().remove(&(ptr as usize)) {
            Some(_) => Ok(()),
            None => Err(Fail::new(
                OpError::InvalidValue,
                "pointer was not returned by hipObjGetRdmaToken, or was already released",
            )),
        }
    }

    /// The text of an outstanding token (tests and diagnostics).
    pub fn text(&self, ptr: *const c_char) -> Option<String> {
        self.lock()
            .get(&(ptr as usize))
            .map(|b| String::from_utf8_lossy(b.strip_suffix(&[0]).unwrap_or(b)).into_owned())
    }

    /// Tokens outstanding.
    pub fn outstanding(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<usize, Vec<u8>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Why no token is handed to the caller: the engine pairs its own queue pairs and mints a
/// token per operation inside hipObjGet/hipObjPut and batch entries; none is exported.
pub fn no_fabric() -> Fail {
    Fail::new(
        OpError::RdmaError,
        "no RDMA token for the caller: the engine mints its tokens per operation itself \
         (hipObjGet/hipObjPut and batch entries move bytes over RDMA when the endpoint pairs); \
         none is exported to C",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/rdma-headers.md, RC token, worked example: RC, qpn 0x123, GID ::ffff:10.0.0.5, rkey 0xabcdef,
    /// addr 0x7f0000001000, length 4096, port 1, lid 0.
    const EXAMPLE: &str =
        "012301000000000000000000000000ffff0a000005efcdab0000100000007f00000010000000000000010000";

    #[test]
    fn nic_from_the_worked_example() {
        assert_eq!(EXAMPLE.len(), 88);
        assert_eq!(client_nic(EXAMPLE.as_bytes()).unwrap(), "10.0.0.5");
        let upper = EXAMPLE.to_ascii_uppercase();
        assert_eq!(client_nic(upper.as_bytes()).unwrap(), "10.0.0.5");
        let suffixed = format!("{EXAMPLE}:00007f0000001000:0000000000001000");
        assert_eq!(client_nic(suffixed.as_bytes()).unwrap(), "10.0.0.5");
        // A link-local (non-mapped) GID has no address.
        let ll = format!("{}fe80{}", &EXAMPLE[..10], &EXAMPLE[14..]);
        let ll = ll.replacen("ffff0a000005", "000000000005", 1);
        assert_eq!(client_nic(ll.as_bytes()).unwrap(), "");
    }

    #[test]
    fn nic_rejects_malformed_tokens() {
        for bad in [
            &EXAMPLE[..87],
            "zz",
            "",
            &format!("{EXAMPLE}:1"),
            &format!("05{}", &EXAMPLE[2..]), // unknown transport byte
        ] {
            assert_eq!(
                client_nic(bad.as_bytes()).unwrap_err().op,
                OpError::InvalidValue,
                "{bad}"
            );
        }
        assert_eq!(
            client_nic(&[b'a'; 200]).unwrap_err().op,
            OpError::InvalidValue
        );
    }

    #[test]
    fn replies_as_the_seed_maps_them() {
        let p = |s: &str| parse_reply(s.as_bytes()).unwrap();
        assert_eq!(
            p("200"),
            ParsedReply {
                http_code: 200,
                result: OpError::Success
            }
        );
        assert_eq!(
            p("206\r\n"),
            ParsedReply {
                http_code: 206,
                result: OpError::Success
            }
        );
        assert_eq!(
            p("204\0"),
            ParsedReply {
                http_code: 204,
                result: OpError::Success
            }
        );
        assert_eq!(
            p("501"),
            ParsedReply {
                http_code: 501,
                result: OpError::Success
            }
        );
        assert_eq!(
            p("ok"),
            ParsedReply {
                http_code: 200,
                result: OpError::Success
            }
        );
        assert_eq!(
            p("err"),
            ParsedReply {
                http_code: -1,
                result: OpError::RdmaError
            }
        );
        assert_eq!(
            p("500"),
            ParsedReply {
                http_code: 500,
                result: OpError::RdmaError
            }
        );
        assert_eq!(
            p(&format!("200:{EXAMPLE}")),
            ParsedReply {
                http_code: 200,
                result: OpError::Success
            }
        );
        for bad in ["", "abc", "99", "600", "200:xyz", "-1"] {
            assert_eq!(
                parse_reply(bad.as_bytes()).unwrap_err().op,
                OpError::InvalidValue,
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_reply(&[b'2'; 512]).unwrap_err().op,
            OpError::InvalidValue
        );
    }

    #[test]
    fn issued_tokens_are_released_once() {
        let set = Issued::default();
        let t = RcToken::decode(EXAMPLE).unwrap();
        let p = set.issue(&t);
        assert_eq!(set.outstanding(), 1);
        assert_eq!(set.text(p).unwrap(), EXAMPLE);
        set.reclaim(p).unwrap();
        assert_eq!(set.text(p), None);
        assert_eq!(set.reclaim(p).unwrap_err().op, OpError::InvalidValue);
        assert_eq!(
            set.reclaim(std::ptr::null_mut()).unwrap_err().op,
            OpError::InvalidValue
        );
        let mut foreign = [0 as c_char; 4];
        assert_eq!(
            set.reclaim(foreign.as_mut_ptr()).unwrap_err().op,
            OpError::InvalidValue
        );
        assert_eq!(set.outstanding(), 0);
    }
}
