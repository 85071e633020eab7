//! The pairing of `rc-persistent`: a soft QP set up and paired with the server through one
//! signed `POST /.hipobj/rc/connect`.
//!
//! Runs once per worker and endpoint (and again after the connection failed) on a short-lived
//! pairing thread of its own (`RdmaClient` spawns it, `offload` carries the result back to the
//! worker's event loop), never on the worker thread: so a plain blocking socket with timeouts
//! is the simple choice here. [`pair`] is the one place the paired [`Link`] is built.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use s3_lite::Request;
use s3_lite::http::{
    BodyFraming, Event, Limits, ResponseDecoder, ResponseHead, encode_request_head,
};
use s3_lite::rdma::{RcToken, Reply, v2};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{PayloadHash, Signer};

use crate::fabric::soft::{
    Access, CompletionQueue, ProtectionDomain, QpCaps, QueuePair, SoftDevice, SoftPath,
};

/// The route (the gateway's `soft::CONNECT_PATH`).
pub(crate) const CONNECT_PATH: &str = "/.hipobj/rc/connect";

/// What the gateway answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paired {
    pub(crate) token: RcToken,
    pub(crate) psn: u32,
    pub(crate) session: String,
    pub(crate) soft_addr: SocketAddr,
}

/// Why pairing did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectError {
    /// The endpoint answered but does not pair (any status other than a well-formed 200):
    /// a plain S3 server, or a gateway without a fabric.
    Declined(u16),
    /// The endpoint could not be reached or the exchange broke (try again later).
    Transport,
}

/// The longest one pairing may take (on its own thread).
pub(crate) const LIMIT: Duration = Duration::from_secs(5);

/// A paired connection: our soft QP connected to the server's, and the session id the
/// requests name. `Send`: built on the pairing thread, used on the worker.
#[derive(Debug)]
pub(crate) struct Link {
    // Field order = drop order: the QP before the CQ and the device.
    pub(crate) qp: QueuePair,
    _cq: Arc<CompletionQueue>,
    pub(crate) pd: ProtectionDomain,
    _device: SoftDevice,
    pub(crate) session: String,
}

/// Where and as whom to pair (everything the pairing thread needs, owned).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) endpoint: Endpoint,
    pub(crate) signer: Arc<Signer>,
    /// The address our soft device advertises.
    pub(crate) local_ip: Ipv4Addr,
}

/// Builds a [`Link`]: a fresh soft device, domain, CQ and QP (INIT), the signed connect
/// exchange with the server (within `limit`), then the QP connected to the server's. Blocking:
/// runs on the pairing thread.
pub(crate) fn pair(
    target: &Target,
    now: s3_lite::sigv4::AmzDate,
    limit: Duration,
) -> Result<Link, ConnectError> {
    let device = SoftDevice::new(target.local_ip);
    let pd = device.alloc_pd();
    let cq = device.create_cq();
    let qp = device.create_qp(&pd, &cq, &cq, QpCaps::default());
    let t = ConnectError::Transport;
    qp.modify_to_init(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE)
        .map_err(|_| t.clone())?;
    let token = qp.local_token(None).map_err(|_| t.clone())?;
    let psn = loop {
        let p = rand::random::<u32>() & 0x00ff_ffff;
        if p != 0 {
            break p;
        }
    };
    let peer = exchange(
        target.addr,
        &target.endpoint,
        &target.signer,
        now,
        &token,
        psn,
        limit,
    )?;
    qp.connect(
        &peer.token,
        peer.psn,
        psn,
        SoftPath::Connect(peer.soft_addr),
    )
    .map_err(|_| t)?;
    Ok(Link {
        qp,
        _cq: cq,
        pd,
        _device: device,
        session: peer.session,
    })
}

/// Sends the connect request and parses the answer, all within `limit`.
fn exchange(
    addr: SocketAddr,
    endpoint: &Endpoint,
    signer: &Signer,
    now: s3_lite::sigv4::AmzDate,
    client: &RcToken,
    psn: u32,
    limit: Duration,
) -> Result<Paired, ConnectError> {
    let end = Instant::now() + limit;
    let mut req = Request::new("POST", CONNECT_PATH);
    req.add_header("Host", endpoint.host_header(None));
    req.add_header(s3_lite::rdma::RDMA_TOKEN, client.encode());
    let psn_hex = v2::Psn::new(psn)
        .map_err(|_| ConnectError::Transport)?
        .encode();
    req.add_header(s3_lite::rdma::RDMA_PSN, psn_hex);
    req.add_header("Content-Length", "0");
    signer
        .sign_headers(&mut req, &PayloadHash::Unsigned, now)
        .map_err(|_| ConnectError::Transport)?;
    let mut wire = Vec::new();
    encode_request_head(&req, BodyFraming::None, &mut wire).map_err(|_| ConnectError::Transport)?;
    let mut s =
        TcpStream::connect_timeout(&addr, left(end)?).map_err(|_| ConnectError::Transport)?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(left(end)?))
        .map_err(|_| ConnectError::Transport)?;
    s.write_all(&wire).map_err(|_| ConnectError::Transport)?;
    let head = read_head(&mut s, end)?;
    parse(&head)
}

/// Time left until `end` (an error once spent: a zero timeout would mean "block forever").
fn left(end: Instant) -> Result<Duration, ConnectError> {
    let d = end.saturating_duration_since(Instant::now());
    if d.is_zero() {
        Err(ConnectError::Transport)
    } else {
        Ok(d)
    }
}

/// Reads one response head (a bounded body is read and dropped) before `end`.
fn read_head(s: &mut TcpStream, end: Instant) -> Result<ResponseHead, ConnectError> {
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let mut buf = vec![0u8; 16 * 1024];
    let mut pending: Vec<u8> = Vec::new();
    let mut head = None;
    let mut body = 0usize;
    loop {
        let d = dec.decode(&pending).map_err(|_| ConnectError::Transport)?;
        let consumed = d.consumed;
        match d.event {
            Event::Head(h) => head = Some(h),
            Event::Body(b) => {
                body += b.len();
                if body > 64 * 1024 {
                    break;
                }
            }
            Event::End => break,
            Event::NeedMore => {
                s.set_read_timeout(Some(left(end)?))
                    .map_err(|_| ConnectError::Transport)?;
                let n = s.read(&mut buf).map_err(|_| ConnectError::Transport)?;
                if n == 0 {
                    if dec.finish_on_eof().is_err() {
                        return Err(ConnectError::Transport);
                    }
                    continue;
                }
                pending.drain(..consumed.min(pending.len()));
                pending.extend_from_slice(buf.get(..n).unwrap_or_default());
                continue;
            }
        }
        pending.drain(..consumed.min(pending.len()));
    }
    head.ok_or(ConnectError::Transport)
}

/// The pure part: a 200 with `x-amz-rdma-reply: 200:<token>`, a PSN, a session id and the
/// soft listener address; anything else declines.
pub(crate) fn parse(head: &ResponseHead) -> Result<Paired, ConnectError> {
    let declined = ConnectError::Declined(head.status);
    if head.status != 200 {
        return Err(declined);
    }
    let token = match head.header(s3_lite::rdma::RDMA_REPLY).map(Reply::parse) {
        Some(Ok(Reply::Code {
            code: 200,
            peer_token: Some(t),
        })) => t,
        _ => return Err(declined),
    };
    let psn = head
        .header(s3_lite::rdma::RDMA_PSN)
        .and_then(|v| v2::Psn::parse(v.trim()).ok())
        .ok_or(declined.clone())?;
    let session = head
        .header(s3_lite::rdma::RDMA_SESSION)
        .map(str::trim)
        .filter(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or(declined.clone())?;
    let soft_addr = head
        .header("x-amz-rdma-soft-addr")
        .and_then(|v| v.trim().parse::<SocketAddr>().ok())
        .ok_or(declined)?;
    Ok(Paired {
        token,
        psn: psn.get(),
        session: session.to_owned(),
        soft_addr,
    })
}

/// [`read_head`] for the other blocking exchanges of this module's parent (hipobj-rc-v2).
pub(crate) fn read_head_until(s: &mut TcpStream, end: Instant) -> Result<ResponseHead, ()> {
    read_head(s, end).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    /// The pairing thread hands its link to the worker.
    #[test]
    fn link_is_send() {
        fn send<T: Send>() {}
        send::<super::Link>();
        send::<Result<super::Link, super::ConnectError>>();
    }
}
