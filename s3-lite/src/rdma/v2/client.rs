//! The client half of `hipobj-rc-v2` (docs/protocol.md, hipobj-rc-v2), pure: the PREPARE /
//! READY / CANCEL header sets, and the judgement of the PREPARE answer and of the FINAL
//! (READY) answer. No I/O here, so every acceptance rule is unit-tested against hand-built
//! heads.

use std::net::SocketAddr;

use crate::http::ResponseHead;
use crate::rdma::pairing::{RDMA_FABRIC, RDMA_SOFT_ADDR, RcKind};
use crate::rdma::v2::{self, Cookie, Psn, RdmaChecksums, SessionId};
use crate::rdma::{
    RDMA_COOKIE, RDMA_ETAG, RDMA_MR_ADDR, RDMA_MR_RKEY, RDMA_OFFSET, RDMA_OP, RDMA_PROTOCOL,
    RDMA_PSN, RDMA_QPN, RDMA_REPLY, RDMA_SESSION, RDMA_SIZE, RDMA_TARGET, RDMA_TOKEN, RcToken,
    Reply, Transport,
};

fn h(n: &str, v: impl Into<String>) -> (String, String) {
    (n.to_owned(), v.into())
}

/// What one PREPARE asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    /// Our RC token (QPN, GID; no window).
    pub token: RcToken,
    pub psn: u32,
    pub cookie: u32,
    pub op: v2::Op,
    /// `crate::rdma::v2::Target::encode` of the object.
    pub target: String,
    pub size: u64,
    pub offset: u64,
    /// Our QP's fabric (`x-amz-rdma-fabric`; our gateway declines the other one).
    pub fabric: RcKind,
}

/// The PREPARE request's `x-amz-rdma-*` headers (all of them are signed by the caller).
pub fn prepare_headers(a: &Ask) -> Option<Vec<(String, String)>> {
    Some(vec![
        h(RDMA_PROTOCOL, v2::PROTOCOL),
        h(RDMA_TOKEN, a.token.encode()),
        h(RDMA_PSN, Psn::new(a.psn).ok()?.encode()),
        h(RDMA_COOKIE, Cookie(a.cookie).encode()),
        h(RDMA_OP, a.op.as_str()),
        h(RDMA_TARGET, a.target.clone()),
        h(RDMA_SIZE, a.size.to_string()),
        h(RDMA_OFFSET, a.offset.to_string()),
        h(RDMA_FABRIC, a.fabric.as_str()),
    ])
}

/// The READY request's headers; `window` = our buffer (GET only).
pub fn ready_headers(
    session: &str,
    cookie: u32,
    qpn: u32,
    window: Option<(u64, u32)>,
) -> Vec<(String, String)> {
    let mut v = vec![
        h(RDMA_PROTOCOL, v2::PROTOCOL),
        h(RDMA_SESSION, session),
        h(RDMA_COOKIE, Cookie(cookie).encode()),
        h(RDMA_QPN, v2::encode_hex(u64::from(qpn))),
    ];
    if let Some((addr, rkey)) = window {
        v.push(h(RDMA_MR_ADDR, v2::encode_hex(addr)));
        v.push(h(RDMA_MR_RKEY, v2::encode_hex(u64::from(rkey))));
    }
    v
}

/// The CANCEL request's headers.
pub fn cancel_headers(session: &str) -> Vec<(String, String)> {
    vec![h(RDMA_PROTOCOL, v2::PROTOCOL), h(RDMA_SESSION, session)]
}

/// A PREPARE the server granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub token: RcToken,
    pub session: String,
    pub psn: u32,
    /// The staging window (PUT): address and rkey.
    pub staging: Option<(u64, u32)>,
    /// Where to dial the server's QP over the soft fabric (`None` from a verbs server).
    pub soft_addr: Option<SocketAddr>,
}

/// What a PREPARE answer means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrepareAnswer {
    Granted(Granted),
    /// The server does not do v2 (for this request): send it over HTTP. `learn`: the endpoint
    /// as a whole does not (a `501`, or a plain S3 server's error without the protocol echo).
    Unsupported {
        learn: bool,
    },
    /// The server is at its session limit (`429`, `503`): this request may succeed once one
    /// of the client's own sessions there ends, or goes over HTTP.
    Busy,
    /// A `200` this client cannot use (malformed, or a hardware-only server without a soft
    /// address); `session` is set when a session id was published (it must be cancelled).
    Unusable {
        session: Option<String>,
        learn: bool,
    },
}

/// Judges a PREPARE answer for `op` from a client whose QP is on `fabric`.
pub fn prepare_answer(head: &ResponseHead, op: v2::Op, fabric: RcKind) -> PrepareAnswer {
    if matches!(head.status, 429 | 503) {
        return PrepareAnswer::Busy;
    }
    if head.status != 200 {
        let echoed = head.header(RDMA_PROTOCOL).is_some();
        // 501 (ROCm reference, Ceph, elbencho, our gateway without fabric, versitygw stub):
        // the endpoint does not serve v2. A plain S3 server answers the unknown route with a
        // 4xx of its own and no protocol echo. 403 (auth) and 413 (size) concern this
        // request only.
        let learn = head.status == 501 || (!echoed && matches!(head.status, 400 | 404 | 405 | 501));
        return PrepareAnswer::Unsupported { learn };
    }
    let session = head
        .header(RDMA_SESSION)
        .and_then(|s| SessionId::parse(s.trim()).ok())
        .map(|s| s.encode());
    let unusable = |learn| PrepareAnswer::Unusable {
        session: session.clone(),
        learn,
    };
    if head.header(RDMA_PROTOCOL).map(str::trim) != Some(v2::PROTOCOL) {
        return unusable(false);
    }
    let token = match head.header(RDMA_REPLY).map(Reply::parse) {
        Some(Ok(Reply::Code {
            code: 200,
            peer_token: Some(t),
        })) if t.transport == Transport::Rc && t.gid != [0; 16] && t.qpn != 0 => t,
        _ => return unusable(false),
    };
    let psn = head
        .header(RDMA_PSN)
        .and_then(|v| Psn::parse(v.trim()).ok());
    let qpn = head
        .header(RDMA_QPN)
        .and_then(|v| v2::parse_qpn(v.trim()).ok());
    let (Some(sid), Some(psn), Some(qpn)) = (session.clone(), psn, qpn) else {
        return unusable(false);
    };
    if qpn != token.qpn {
        return unusable(false);
    }
    let staging = match (
        head.header(RDMA_MR_ADDR)
            .and_then(|v| v2::parse_mr_addr(v.trim()).ok()),
        head.header(RDMA_MR_RKEY)
            .and_then(|v| v2::parse_mr_rkey(v.trim()).ok()),
    ) {
        (Some(a), Some(k)) if a != 0 && k != 0 => Some((a, k)),
        _ => None,
    };
    if op == v2::Op::Put && staging.is_none() {
        return unusable(false);
    }
    // A server on real verbs publishes no soft address: unreachable from the soft fabric.
    let soft_addr = head
        .header(RDMA_SOFT_ADDR)
        .and_then(|v| v.trim().parse::<SocketAddr>().ok());
    if fabric == RcKind::Soft && soft_addr.is_none() {
        return unusable(true);
    }
    PrepareAnswer::Granted(Granted {
        token,
        session: sid,
        psn: psn.get(),
        staging,
        soft_addr,
    })
}

/// Why a FINAL answer is not success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalError {
    /// A non-2xx status (the S3 / v2 error stands).
    Status(u16),
    /// Missing protocol echo, cookie echo, or byte count; unparsable checksum headers.
    Protocol,
    /// Wrong cookie, short (or long) transfer, checksum mismatch.
    Integrity,
}

/// A FINAL answer's claims: bytes moved and the checksums to compare with ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Final {
    pub bytes: u64,
    pub sums: RdmaChecksums,
    /// The stored object's or part's ETag (`ETag`, else `x-amz-rdma-etag`), when named.
    pub etag: Option<String>,
}

/// Judges a FINAL: 200 (204 for PUT), protocol echo, cookie echo equal to ours, and
/// `x-amz-rdma-bytes-transferred` equal to `size`, or within `1..=size` when `exact` is
/// false (a whole-object GET into a larger buffer: the server clamps the count to the object).
pub fn judge_final(
    head: &ResponseHead,
    put: bool,
    cookie: u32,
    size: u64,
    exact: bool,
) -> Result<Final, FinalError> {
    let ok = head.status == 200 || (put && head.status == 204);
    if !ok {
        return Err(FinalError::Status(head.status));
    }
    if head.header(RDMA_PROTOCOL).map(str::trim) != Some(v2::PROTOCOL) {
        return Err(FinalError::Protocol);
    }
    let echo = head
        .header(RDMA_COOKIE)
        .and_then(|v| Cookie::parse_lenient(v.trim()).ok())
        .ok_or(FinalError::Protocol)?;
    if echo.0 != cookie {
        return Err(FinalError::Integrity);
    }
    let pairs = head.headers.iter().map(|(n, v)| (n.as_str(), v.as_str()));
    let bytes = match crate::rdma::bytes::from_headers(pairs) {
        Ok(Some(b)) => b.count,
        _ => return Err(FinalError::Protocol),
    };
    let fits = if exact {
        bytes == size
    } else {
        bytes >= 1 && bytes <= size
    };
    if !fits {
        return Err(FinalError::Integrity);
    }
    let pairs = head.headers.iter().map(|(n, v)| (n.as_str(), v.trim()));
    let sums = RdmaChecksums::from_headers(pairs).map_err(|_| FinalError::Protocol)?;
    let etag = head
        .header("etag")
        .or_else(|| head.header(RDMA_ETAG))
        .map(|e| e.trim().to_owned())
        .filter(|e| !e.is_empty() && e.len() <= 1024);
    Ok(Final { bytes, sums, etag })
}

/// The checksums of the bytes we hold, fed in pieces (the worker reads its window in
/// chunks), compared with the FINAL's (either generation, when present).
#[derive(Debug, Default)]
pub struct SumCheck {
    crc64: crate::checksum::Crc64Nvme,
    crc32: crate::checksum::Crc32c,
}

impl SumCheck {
    pub fn update(&mut self, data: &[u8]) {
        self.crc64.update(data);
        self.crc32.update(data);
    }

    /// Whether every checksum the FINAL carries equals ours.
    pub fn matches(&self, sums: &RdmaChecksums) -> bool {
        sums.crc64nvme.is_none_or(|v| v == self.crc64.finish())
            && sums.crc32c.is_none_or(|v| v == self.crc32.finish())
    }
}

/// Whether the FINAL's checksums match `data` (one piece).
#[cfg(test)]
pub(crate) fn checksums_match(sums: &RdmaChecksums, data: &[u8]) -> bool {
    let mut c = SumCheck::default();
    c.update(data);
    c.matches(sums)
}

#[cfg(test)]
mod tests {
    const SOFT: RcKind = RcKind::Soft;
    use super::*;
    use crate::checksum::{encode_crc32c, encode_crc64nvme};
    use crate::rdma::test_head as head;

    fn server_token() -> RcToken {
        let mut t = RcToken::decode(&"0".repeat(88)).unwrap();
        t.transport = Transport::Rc;
        t.qpn = 0x1234;
        t.gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
        t
    }

    fn granted_head(put: bool) -> ResponseHead {
        let reply = format!("200:{}", server_token().encode());
        let mut h = vec![
            ("x-amz-rdma-protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-reply", reply.as_str()),
            ("x-amz-rdma-session", "00112233445566778899aabbccddeeff"),
            ("x-amz-rdma-psn", "ABCDEF"),
            ("x-amz-rdma-qpn", "1234"),
            ("x-amz-rdma-soft-addr", "127.0.0.1:4242"),
            ("Content-Length", "0"),
        ];
        if put {
            h.push(("x-amz-rdma-mr-addr", "7f0000001000"));
            h.push(("x-amz-rdma-mr-rkey", "55"));
        }
        let owned: Vec<(String, String)> = h
            .into_iter()
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let refs: Vec<(&str, &str)> = owned
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        head(200, &refs)
    }

    #[test]
    fn prepare_granted_parses_every_field() {
        let PrepareAnswer::Granted(g) = prepare_answer(&granted_head(true), v2::Op::Put, SOFT)
        else {
            panic!("not granted");
        };
        assert_eq!(g.psn, 0xABCDEF);
        assert_eq!(g.session, "00112233445566778899aabbccddeeff");
        assert_eq!(g.staging, Some((0x7f00_0000_1000, 0x55)));
        assert_eq!(g.soft_addr, Some("127.0.0.1:4242".parse().unwrap()));
        assert_eq!(g.token.qpn, 0x1234);
    }

    #[test]
    fn prepare_refusals_and_unusable_grants() {
        let marker = head(
            501,
            &[
                ("x-amz-rdma-protocol-status", "unsupported"),
                ("Content-Length", "0"),
            ],
        );
        assert_eq!(
            prepare_answer(&marker, v2::Op::Get, SOFT),
            PrepareAnswer::Unsupported { learn: true }
        );
        // Capacity (Ceph's and our 503 SlowDown, versitygw's 429) concerns this request only.
        for status in [429, 503] {
            let busy = head(status, &[("Content-Length", "0")]);
            assert_eq!(
                prepare_answer(&busy, v2::Op::Get, SOFT),
                PrepareAnswer::Busy
            );
        }
        // A PUT grant without staging, and a grant without the soft address (a verbs server).
        assert!(matches!(
            prepare_answer(&granted_head(false), v2::Op::Put, SOFT),
            PrepareAnswer::Unusable {
                session: Some(_),
                learn: false
            }
        ));
        let mut g = granted_head(false);
        g.headers.retain(|(n, _)| n != "x-amz-rdma-soft-addr");
        assert!(matches!(
            prepare_answer(&g, v2::Op::Get, SOFT),
            PrepareAnswer::Unusable {
                session: Some(_),
                learn: true
            }
        ));
        // The same grant is what a verbs client needs (its path is the token's GID).
        assert!(matches!(
            prepare_answer(&g, v2::Op::Get, RcKind::Verbs),
            PrepareAnswer::Granted(Granted {
                soft_addr: None,
                ..
            })
        ));
        // QPN header disagreeing with the token.
        let mut g = granted_head(false);
        for (n, v) in &mut g.headers {
            if n == "x-amz-rdma-qpn" {
                *v = "1235".into();
            }
        }
        assert!(matches!(
            prepare_answer(&g, v2::Op::Get, SOFT),
            PrepareAnswer::Unusable { .. }
        ));
    }

    #[test]
    fn final_needs_protocol_cookie_count_and_matching_checksums() {
        let data = b"hello, rc-v2 world";
        let c64 = encode_crc64nvme(crate::checksum::Crc64Nvme::checksum(data));
        let c32 = encode_crc32c(crate::checksum::Crc32c::checksum(data));
        let legacy = format!("CRC64NVME {c64}");
        let good = head(
            200,
            &[
                ("x-amz-rdma-protocol", "hipobj-rc-v2"),
                ("x-amz-rdma-cookie", "0badcafe"),
                ("x-amz-rdma-bytes-transferred", "18"),
                ("x-amz-rdma-checksum", legacy.as_str()),
                ("x-amz-rdma-checksum-crc32c", c32.as_str()),
            ],
        );
        let f = judge_final(&good, false, 0x0bad_cafe, 18, true).unwrap();
        assert_eq!(f.bytes, 18);
        assert!(checksums_match(&f.sums, data));
        assert!(!checksums_match(&f.sums, b"hello, rc-v2 worle"));
        // In pieces: the same verdicts.
        let mut c = SumCheck::default();
        c.update(&data[..5]);
        c.update(&data[5..]);
        assert!(c.matches(&f.sums));
        let mut c = SumCheck::default();
        c.update(b"hello, rc-v2 worl");
        c.update(b"e");
        assert!(!c.matches(&f.sums));
        assert_eq!(
            judge_final(&good, false, 0x0bad_cafd, 18, true),
            Err(FinalError::Integrity)
        );
        assert_eq!(
            judge_final(&good, false, 0x0bad_cafe, 19, true),
            Err(FinalError::Integrity)
        );
        // A whole-object GET into a larger buffer accepts a clamped count.
        assert!(judge_final(&good, false, 0x0bad_cafe, 19, false).is_ok());
        let no_proto = head(
            200,
            &[
                ("x-amz-rdma-cookie", "0badcafe"),
                ("x-amz-rdma-bytes-transferred", "18"),
            ],
        );
        assert_eq!(
            judge_final(&no_proto, false, 0x0bad_cafe, 18, true),
            Err(FinalError::Protocol)
        );
        let nf = head(404, &[("Content-Length", "0")]);
        assert_eq!(
            judge_final(&nf, false, 1, 18, true),
            Err(FinalError::Status(404))
        );
        let put204 = head(
            204,
            &[
                ("x-amz-rdma-protocol", "hipobj-rc-v2"),
                ("x-amz-rdma-cookie", "00000001"),
                ("x-amz-rdma-bytes-transferred", "5"),
            ],
        );
        assert!(judge_final(&put204, true, 1, 5, true).is_ok());
        assert_eq!(
            judge_final(&put204, false, 1, 5, true),
            Err(FinalError::Status(204))
        );
    }

    #[test]
    fn request_headers_are_canonical() {
        let a = Ask {
            token: server_token(),
            psn: 0x00_0abc,
            cookie: 0xC00C_1E01,
            op: v2::Op::Get,
            target: "/b/k".into(),
            size: 77,
            offset: 5,
            fabric: RcKind::Verbs,
        };
        let p = prepare_headers(&a).unwrap();
        let get = |n: &str| p.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("x-amz-rdma-psn"), Some("000abc"));
        assert_eq!(get("x-amz-rdma-cookie"), Some("c00c1e01"));
        assert_eq!(get("x-amz-rdma-op"), Some("GET"));
        assert_eq!(get("x-amz-rdma-size"), Some("77"));
        assert_eq!(get("x-amz-rdma-offset"), Some("5"));
        assert_eq!(get("x-amz-rdma-fabric"), Some("verbs"));
        let r = ready_headers("s", 1, 0x2a, Some((0x1000, 0x9)));
        assert!(r.contains(&("x-amz-rdma-qpn".into(), "2a".into())));
        assert!(r.contains(&("x-amz-rdma-mr-addr".into(), "1000".into())));
        assert!(r.contains(&("x-amz-rdma-mr-rkey".into(), "9".into())));
    }
}
