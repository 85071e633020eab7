//! A connected queue pair in one process, for tests, benchmarks and the embedded gateway.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use s3_lite::rdma::RcToken;

use super::cq::CompletionQueue;
use super::device::SoftDevice;
use super::mr::ProtectionDomain;
use super::wr::Access;
use super::qp::{QpCaps, QpError, QueuePair, SoftPath};

/// One side of a [`loopback_pair`]: a device, a domain, one CQ (send and receive) and the QP.
#[derive(Debug)]
pub struct Endpoint {
    /// The QP (declared first: dropped before the device that owns its QPN).
    pub qp: QueuePair,
    /// Completions of both queues.
    pub cq: Arc<CompletionQueue>,
    /// Regions for this side are registered here.
    pub pd: ProtectionDomain,
    /// The device.
    pub device: SoftDevice,
}

/// Two RC queue pairs connected over loopback TCP, both in `Rts`, with remote READ and WRITE
/// allowed: `a` dialled `b`'s device. PSNs are random; the pairing goes through RC tokens
/// encoded to the 88-hex header form and decoded back, as the dialects exchange them.
pub fn loopback_pair(caps: QpCaps) -> Result<(Endpoint, Endpoint), QpError> {
    let io = |e: std::io::Error| QpError::Connect(e.to_string());
    let make = |ip: Ipv4Addr| {
        let device = SoftDevice::new(ip);
        let pd = device.alloc_pd();
        let cq = device.create_cq();
        let qp = device.create_qp(&pd, &cq, &cq, caps);
        qp.modify_to_init(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE)?;
        Ok::<_, QpError>(Endpoint { qp, cq, pd, device })
    };
    let a = make(Ipv4Addr::LOCALHOST)?;
    let b = make(Ipv4Addr::LOCALHOST)?;
    let b_addr = b
        .device
        .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .map_err(io)?;
    let tok = |e: &Endpoint| -> Result<RcToken, QpError> {
        let t =
            e.qp.local_token(None)
                .map_err(|e| QpError::Connect(e.to_string()))?;
        RcToken::decode(&t.encode()).map_err(|e| QpError::Connect(e.to_string()))
    };
    let (ta, tb) = (tok(&a)?, tok(&b)?);
    let psn_a = rand::random::<u32>() & super::frame::PSN_MASK;
    let psn_b = rand::random::<u32>() & super::frame::PSN_MASK;
    // b first (it waits for the dial), then a dials; either order works.
    b.qp.connect(&ta, psn_a, psn_b, SoftPath::Accept)?;
    a.qp.connect(&tb, psn_b, psn_a, SoftPath::Connect(b_addr))?;
    Ok((a, b))
}
