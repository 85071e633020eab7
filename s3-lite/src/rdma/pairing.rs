//! The client side of `rc-persistent` pairing (docs/protocol.md, rc-persistent): the signed
//! `POST /.hipobj/rc/connect` ([`CONNECT_PATH`]) presents our RC token, PSN and QP fabric
//! ([`RDMA_FABRIC`]); a `200` answers with the server's token, PSN, session id and (soft
//! fabric) the address its QP listens on ([`RDMA_SOFT_ADDR`]). Pure: the request's headers and
//! the judgement of the answer.

use std::net::SocketAddr;

use crate::http::ResponseHead;
use crate::rdma::v2::Psn;
use crate::rdma::{RDMA_PSN, RDMA_REPLY, RDMA_SESSION, RDMA_TOKEN, RcToken, Reply};

/// The signed pairing route of `rc-persistent`.
pub const CONNECT_PATH: &str = "/.hipobj/rc/connect";
/// The capability route: a signed `GET` asking whether an endpoint carries payloads over RDMA.
pub const CAPABILITIES_PATH: &str = "/.hipobj/rc/capabilities";
/// Request and response header naming a QP's fabric ([`RcKind`]) on the connect route, the
/// capability route and hipobj-rc-v2 PREPARE.
pub const RDMA_FABRIC: &str = "x-amz-rdma-fabric";
/// Response header with the soft listener address (`ip:port`) a client's QP dials.
pub const RDMA_SOFT_ADDR: &str = "x-amz-rdma-soft-addr";
/// rc-persistent GET request header, value `1` (soft fabric): the client checks the bytes as
/// they land in its window (a running checksum of in-order WRITEs) and waits for them itself,
/// so the server may answer once its WRITEs are posted instead of after they complete. The
/// server echoes it (`1`) on an answer sent that early; without the echo every WRITE completed
/// before the answer, as the dialect otherwise promises.
pub const RDMA_EARLY_ANSWER: &str = "x-amz-rdma-early-answer";
/// rc-persistent GET request header, value [`FRAME_CHECK_LANDING`] (soft fabric): the client
/// compares its window's landing digest with the CRC-64/NVME the answer names for the whole
/// range and fails the GET when they differ or when none is named, so the server may send
/// the WRITEs' frames without their per-frame CRC-32C trailer (docs/soft-fabric.md,
/// "UNCHECKED"). A server that ignores it sends trailers, which the client checks as ever.
pub const RDMA_FRAME_CHECK: &str = "x-amz-rdma-frame-check";
/// [`RDMA_FRAME_CHECK`]'s value: checked end to end by the landing digest.
pub const FRAME_CHECK_LANDING: &str = "landing";
/// Connect request header (soft fabric): what the client's soft QP understands beyond the
/// base frame format, comma-separated. Today one feature, [`SOFT_ACK_LATER`]. A gateway that
/// does not know the header pairs as ever.
pub const RDMA_SOFT_FEATURES: &str = "x-amz-rdma-soft-features";
/// [`RDMA_SOFT_FEATURES`] item: the client's QP accepts WRITE frames flagged `ACK_LATER`
/// (docs/soft-fabric.md), so the gateway may set it on WRITEs it does not wait on.
pub const SOFT_ACK_LATER: &str = "ack-later";

/// Whether a [`RDMA_SOFT_FEATURES`] value names `feature` (items trimmed, case-sensitive).
#[must_use]
pub fn soft_features_name(value: &str, feature: &str) -> bool {
    value.split(',').any(|f| f.trim() == feature)
}

/// Capability answer: the pairing dialects a gateway serves, comma-separated.
pub const RDMA_DIALECTS: &str = "x-amz-rdma-dialects";
/// The `rc-persistent` dialect's name (`x-amz-rdma-protocol` on the capability answer).
pub const PROTOCOL: &str = "rc-persistent";

/// Where an RC queue pair lives: the fabric named by [`RDMA_FABRIC`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RcKind {
    /// RC emulated over TCP (the engine's soft fabric).
    Soft,
    /// libibverbs.
    Verbs,
}

impl RcKind {
    /// `soft` / `verbs`: the name in logs, the connect route and `--json` output.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Soft => "soft",
            Self::Verbs => "verbs",
        }
    }

    /// Parses [`RcKind::as_str`] (surrounding blanks ignored).
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim() {
            "soft" => Some(Self::Soft),
            "verbs" => Some(Self::Verbs),
            _ => None,
        }
    }
}

/// The connect request's RDMA headers for our token, PSN and fabric, and (soft) the soft QP's
/// features (all signed by the caller); `None` when `psn` does not fit 24 bits.
#[must_use]
pub fn connect_headers(token: &RcToken, psn: u32, fabric: RcKind) -> Option<Vec<(String, String)>> {
    let mut h = vec![
        (RDMA_TOKEN.to_owned(), token.encode()),
        (RDMA_PSN.to_owned(), Psn::new(psn).ok()?.encode()),
        (RDMA_FABRIC.to_owned(), fabric.as_str().to_owned()),
    ];
    if fabric == RcKind::Soft {
        h.push((RDMA_SOFT_FEATURES.to_owned(), SOFT_ACK_LATER.to_owned()));
    }
    Some(h)
}

/// What the server answered to a pairing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paired {
    /// The server QP's token.
    pub token: RcToken,
    /// The server QP's PSN.
    pub psn: u32,
    /// The session id later requests name (32 hex).
    pub session: String,
    /// Where our QP dials (soft fabric only).
    pub soft_addr: Option<SocketAddr>,
}

/// Why an answer does not pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Any status other than a well-formed 200: a plain S3 server, a gateway without a fabric.
    Declined(u16),
    /// The gateway pairs, but only QPs of this other fabric.
    OtherFabric(RcKind),
}

/// Judges a connect answer: a 200 with `x-amz-rdma-reply: 200:<token>`, a PSN, a session id
/// and (soft fabric) the listener address; a decline naming another fabric is
/// [`Refusal::OtherFabric`]; anything else declines.
pub fn parse_answer(head: &ResponseHead) -> Result<Paired, Refusal> {
    let declined = Refusal::Declined(head.status);
    if head.status != 200 {
        if let Some(k) = head.header(RDMA_FABRIC).and_then(RcKind::parse) {
            return Err(Refusal::OtherFabric(k));
        }
        return Err(declined);
    }
    let token = match head.header(RDMA_REPLY).map(Reply::parse) {
        Some(Ok(Reply::Code {
            code: 200,
            peer_token: Some(t),
        })) => t,
        _ => return Err(declined),
    };
    let psn = head
        .header(RDMA_PSN)
        .and_then(|v| Psn::parse(v.trim()).ok())
        .ok_or(declined.clone())?;
    let session = head
        .header(RDMA_SESSION)
        .map(str::trim)
        .filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or(declined.clone())?;
    let soft_addr = match head.header(RDMA_SOFT_ADDR) {
        Some(v) => Some(v.trim().parse::<SocketAddr>().map_err(|_| declined)?),
        None => None,
    };
    Ok(Paired {
        token,
        psn: psn.get(),
        session: session.to_owned(),
        soft_addr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::test_head as head;

    fn token() -> RcToken {
        let mut t = RcToken::decode(&"0".repeat(88)).unwrap();
        t.qpn = 7;
        t
    }

    #[test]
    fn fabric_names_round_trip() {
        for k in [RcKind::Soft, RcKind::Verbs] {
            assert_eq!(RcKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(RcKind::parse(" soft "), Some(RcKind::Soft));
        assert_eq!(RcKind::parse("rxe"), None);
    }

    #[test]
    fn connect_request_names_token_psn_and_fabric() {
        let h = connect_headers(&token(), 0xabc, RcKind::Verbs).unwrap();
        assert!(h.contains(&(RDMA_PSN.into(), "000abc".into())));
        assert!(h.contains(&(RDMA_FABRIC.into(), "verbs".into())));
        assert!(!h.iter().any(|(n, _)| n == RDMA_SOFT_FEATURES));
        let soft = connect_headers(&token(), 0xabc, RcKind::Soft).unwrap();
        assert!(soft.contains(&(RDMA_SOFT_FEATURES.into(), SOFT_ACK_LATER.into())));
        assert!(h.contains(&(RDMA_TOKEN.into(), token().encode())));
        assert!(connect_headers(&token(), 1 << 24, RcKind::Soft).is_none());
    }

    #[test]
    fn soft_features_are_matched_by_item() {
        assert!(soft_features_name("ack-later", SOFT_ACK_LATER));
        assert!(soft_features_name(" other , ack-later ", SOFT_ACK_LATER));
        assert!(!soft_features_name("ack-later-v2", SOFT_ACK_LATER));
        assert!(!soft_features_name("", SOFT_ACK_LATER));
    }

    #[test]
    fn connect_answer_needs_every_field() {
        let reply = format!("200:{}", token().encode());
        let good = [
            ("x-amz-rdma-reply", reply.as_str()),
            ("x-amz-rdma-psn", "00000a"),
            ("x-amz-rdma-session", "00112233445566778899aabbccddeeff"),
            ("x-amz-rdma-soft-addr", "127.0.0.1:9"),
        ];
        let p = parse_answer(&head(200, &good)).unwrap();
        assert_eq!((p.psn, p.token.qpn), (10, 7));
        assert_eq!(p.soft_addr, Some("127.0.0.1:9".parse().unwrap()));
        for skip in 0..3 {
            let some: Vec<_> = good
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != skip)
                .map(|(_, h)| *h)
                .collect();
            assert_eq!(parse_answer(&head(200, &some)), Err(Refusal::Declined(200)));
        }
        let mut bad_addr = good;
        bad_addr[3].1 = "nowhere";
        assert_eq!(
            parse_answer(&head(200, &bad_addr)),
            Err(Refusal::Declined(200))
        );
        assert_eq!(
            parse_answer(&head(501, &[("x-amz-rdma-fabric", "verbs")])),
            Err(Refusal::OtherFabric(RcKind::Verbs))
        );
        assert_eq!(parse_answer(&head(404, &[])), Err(Refusal::Declined(404)));
    }
}
