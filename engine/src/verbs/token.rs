//! RC token (`s3_lite::rdma::token::RcToken`, docs/rdma-headers.md, RC token) ↔ the verbs fields it
//! carries. A token names a queue pair (QPN, GID, port, LID) and optionally a window of a
//! registered region (rkey, address, length); one registration serves any number of sub-range
//! tokens.

use s3_lite::rdma::token::{MAX_QPN, RcToken, Transport};

/// This side's QP address, as a token advertises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpAddress {
    /// QP number (24 bits).
    pub qpn: u32,
    /// Source GID chosen for the port.
    pub gid: [u8; 16],
    /// Port number (from 1).
    pub port: u8,
    /// LID (0 on RoCE).
    pub lid: u16,
}

/// A window of a registered region, as a token grants it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// Virtual address of the first byte (`mr.addr + offset`).
    pub addr: u64,
    /// The region's rkey.
    pub rkey: u32,
    /// Bytes.
    pub length: u64,
}

/// Why a peer's token cannot drive a verbs RC connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerTokenError {
    /// The all-zero loopback marker names no QP.
    #[error("RC token is the loopback marker, not a queue pair")]
    Loopback,
    /// A DC token needs a DC target, which this engine does not implement.
    #[error("RC token names a DC endpoint; only RC is supported")]
    NotRc,
    /// QPN 0 and 1 are the special QPs.
    #[error("RC token QPN {0} is a special QP (0/1)")]
    SpecialQpn(u32),
    /// QPN wider than 24 bits.
    #[error("RC token QPN {0:#x} is wider than 24 bits")]
    QpnRange(u32),
    /// A zero GID cannot address a RoCE peer.
    #[error("RC token carries an all-zero GID")]
    ZeroGid,
    /// Port 0 does not exist.
    #[error("RC token names port 0")]
    PortZero,
    /// `addr + length` overflows.
    #[error("RC token window wraps the address space")]
    WindowWraps,
}

/// Builds the token for `qp`, advertising `window` when given.
#[must_use]
pub fn to_token(qp: &QpAddress, window: Option<Window>) -> RcToken {
    let w = window.unwrap_or_default();
    RcToken {
        transport: Transport::Rc,
        qpn: qp.qpn,
        gid: qp.gid,
        rkey: w.rkey,
        addr: w.addr,
        length: w.length,
        port: qp.port,
        lid: qp.lid,
    }
}

/// Splits a peer's token into the QP address RTR needs and the window WRITE/READ target,
/// refusing tokens no RC QP can use. The window is `None` when the token grants no bytes.
pub fn from_token(t: &RcToken) -> Result<(QpAddress, Option<Window>), PeerTokenError> {
    if t.is_loopback() {
        return Err(PeerTokenError::Loopback);
    }
    if t.transport != Transport::Rc {
        return Err(PeerTokenError::NotRc);
    }
    if t.qpn > MAX_QPN {
        return Err(PeerTokenError::QpnRange(t.qpn));
    }
    if t.qpn < 2 {
        return Err(PeerTokenError::SpecialQpn(t.qpn));
    }
    if t.gid == [0; 16] {
        return Err(PeerTokenError::ZeroGid);
    }
    if t.port == 0 {
        return Err(PeerTokenError::PortZero);
    }
    if t.addr.checked_add(t.length).is_none() {
        return Err(PeerTokenError::WindowWraps);
    }
    let qp = QpAddress {
        qpn: t.qpn,
        gid: t.gid,
        port: t.port,
        lid: t.lid,
    };
    let window = (t.length > 0).then_some(Window {
        addr: t.addr,
        rkey: t.rkey,
        length: t.length,
    });
    Ok((qp, window))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp() -> QpAddress {
        QpAddress {
            qpn: 0x123,
            gid: s3_lite::rdma::gid_from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 5)),
            port: 1,
            lid: 0,
        }
    }

    #[test]
    fn matches_the_worked_example_of_rdma_headers_md() {
        let w = Window {
            addr: 0x7f00_0000_1000,
            rkey: 0x00ab_cdef,
            length: 4096,
        };
        let t = to_token(&qp(), Some(w));
        assert_eq!(
            t.encode(),
            "012301000000000000000000000000ffff0a000005efcdab0000100000007f00000010000000000000010000"
        );
        let back = RcToken::decode(&t.encode()).unwrap();
        assert_eq!(from_token(&back), Ok((qp(), Some(w))));
    }

    #[test]
    fn qp_only_token_round_trips_without_a_window() {
        let t = to_token(&qp(), None);
        assert_eq!(from_token(&t), Ok((qp(), None)));
    }

    #[test]
    fn unusable_tokens_are_refused() {
        let good = to_token(&qp(), None);
        assert_eq!(
            from_token(&RcToken::LOOPBACK),
            Err(PeerTokenError::Loopback)
        );
        let bad = |f: &dyn Fn(&mut RcToken)| {
            let mut t = good;
            f(&mut t);
            from_token(&t).unwrap_err()
        };
        assert_eq!(bad(&|t| t.transport = Transport::Dc), PeerTokenError::NotRc);
        assert_eq!(bad(&|t| t.qpn = 1), PeerTokenError::SpecialQpn(1));
        assert_eq!(
            bad(&|t| t.qpn = 0x0100_0000),
            PeerTokenError::QpnRange(0x0100_0000)
        );
        assert_eq!(bad(&|t| t.gid = [0; 16]), PeerTokenError::ZeroGid);
        assert_eq!(bad(&|t| t.port = 0), PeerTokenError::PortZero);
        assert_eq!(
            bad(&|t| {
                t.addr = u64::MAX;
                t.length = 2;
            }),
            PeerTokenError::WindowWraps
        );
    }
}
