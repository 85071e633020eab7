//! The pairing of `rc-persistent`: an RC QP (soft fabric or verbs, [`Home`]) set up and paired
//! with the server through one signed `POST /.hipobj/rc/connect`, which names our fabric in
//! `x-amz-rdma-fabric` (a gateway of the other fabric declines, naming its own).
//!
//! Runs once per worker and endpoint (and again after the connection failed) on a short-lived
//! pairing thread of its own (`RdmaClient` spawns it, `offload` carries the result back to the
//! worker's event loop), never on the worker thread: so a plain blocking socket with timeouts
//! is the simple choice here. [`pair`] is the one place the paired [`Link`] is built.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};

use crate::fabric::rc::{Access, RcCaps, RcCq, RcDevice, RcKind, RcPd, RcQp, SoftPath};
use std::sync::Arc;
use std::time::{Duration, Instant};

use s3_lite::Request;
use s3_lite::http::{Exchange as HttpExchange, Limits, ResponseHead};
use s3_lite::net::blocking::until;
use s3_lite::rdma::RcToken;
use s3_lite::rdma::pairing::{self, Paired};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{PayloadHash, Signer};

/// Where a client's QPs live.
#[derive(Debug, Clone)]
pub(crate) enum Home {
    /// The soft fabric, a device on this IPv4 address (fresh per pairing).
    Soft(Ipv4Addr),
    /// A verbs device, opened once for the engine.
    Verbs(RcDevice),
}

impl Home {
    /// The device to make QPs on.
    pub(crate) fn device(&self) -> RcDevice {
        match self {
            Self::Soft(ip) => RcDevice::soft(*ip),
            Self::Verbs(d) => d.clone(),
        }
    }

    /// Which fabric.
    pub(crate) fn kind(&self) -> RcKind {
        match self {
            Self::Soft(_) => RcKind::Soft,
            Self::Verbs(_) => RcKind::Verbs,
        }
    }
}

/// Why pairing did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ConnectError {
    /// The endpoint answered but does not pair (any status other than a well-formed 200):
    /// a plain S3 server, or a gateway without a fabric.
    Declined(u16),
    /// The gateway pairs, but only QPs of this other fabric.
    OtherFabric(RcKind),
    /// The endpoint could not be reached or the exchange broke (try again later).
    Transport,
}

/// The longest one pairing may take (on its own thread).
pub(crate) const LIMIT: Duration = Duration::from_secs(5);

/// A paired connection: our QP connected to the server's, and the session id the requests
/// name. `Send`: built on the pairing thread, used on the worker.
#[derive(Debug)]
pub(crate) struct Link {
    // Field order = drop order: the QP before the CQ and the device.
    pub(crate) qp: RcQp,
    _cq: RcCq,
    pub(crate) pd: RcPd,
    _device: RcDevice,
    pub(crate) session: String,
}

/// Where and as whom to pair (everything the pairing thread needs, owned).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) endpoint: Endpoint,
    pub(crate) signer: Arc<Signer>,
    /// Where our QP lives.
    pub(crate) home: Home,
}

/// Completion-queue entries of a paired QP (the client posts nothing on it; room for the
/// flush of an error).
const CQ_DEPTH: u32 = 16;

/// Builds a [`Link`]: a domain, CQ and QP (INIT) on the home device, the signed connect
/// exchange with the server (within `limit`), then the QP connected to the server's. Blocking:
/// runs on the pairing thread.
pub(crate) fn pair(
    target: &Target,
    now: s3_lite::sigv4::AmzDate,
    limit: Duration,
) -> Result<Link, ConnectError> {
    let t = ConnectError::Transport;
    let device = target.home.device();
    let pd = device.alloc_pd().map_err(|_| t.clone())?;
    let cq = device.create_cq(CQ_DEPTH).map_err(|_| t.clone())?;
    let qp = device
        .create_qp(&pd, &cq, &cq, RcCaps::default())
        .map_err(|_| t.clone())?;
    qp.modify_to_init(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE)
        .map_err(|_| t.clone())?;
    let token = qp.local_token(None).map_err(|_| t.clone())?;
    let psn = crate::fabric::rc::random_psn();
    let peer = exchange(
        target.addr,
        &target.endpoint,
        &target.signer,
        now,
        (&token, psn, device.kind()),
        limit,
    )?;
    // Soft: our QP dials the gateway's listener; verbs: the token's GID is the path.
    let path = match device.kind() {
        RcKind::Soft => Some(SoftPath::Connect(peer.soft_addr.ok_or(t.clone())?)),
        _ => None,
    };
    qp.connect(&peer.token, peer.psn, psn, path)
        .map_err(|_| t)?;
    Ok(Link {
        qp,
        _cq: cq,
        pd,
        _device: device,
        session: peer.session,
    })
}

/// Sends the connect request for `(our token, our PSN, our fabric)` and parses the answer,
/// all within `limit`.
fn exchange(
    addr: SocketAddr,
    endpoint: &Endpoint,
    signer: &Signer,
    now: s3_lite::sigv4::AmzDate,
    (client, psn, fabric): (&RcToken, u32, RcKind),
    limit: Duration,
) -> Result<Paired, ConnectError> {
    let end = Instant::now() + limit;
    let mut req = Request::new("POST", pairing::CONNECT_PATH);
    req.add_header("Host", endpoint.host_header(None));
    for (n, v) in pairing::connect_headers(client, psn, fabric).ok_or(ConnectError::Transport)? {
        req.add_header(n, v);
    }
    req.add_header("Content-Length", "0");
    signer
        .sign_headers(&mut req, &PayloadHash::Unsigned, now)
        .map_err(|_| ConnectError::Transport)?;
    let mut s =
        TcpStream::connect_timeout(&addr, left(end)?).map_err(|_| ConnectError::Transport)?;
    let _ = s.set_nodelay(true);
    let mut ex = HttpExchange::new(Limits::default());
    until::send(&mut s, &mut ex, &req, end).map_err(|_| ConnectError::Transport)?;
    let head = read_head_until(&mut s, &mut ex, end).map_err(|()| ConnectError::Transport)?;
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

/// The connect answer judged by the protocol module (`s3_lite::rdma::pairing`).
pub(crate) fn parse(head: &ResponseHead) -> Result<Paired, ConnectError> {
    pairing::parse_answer(head).map_err(|r| match r {
        pairing::Refusal::OtherFabric(k) => ConnectError::OtherFabric(k),
        pairing::Refusal::Declined(status) => ConnectError::Declined(status),
    })
}

/// Largest answer body read (an error document); a longer one is not read further.
const MAX_ANSWER_BODY: usize = 64 * 1024;

/// Reads the answer to the request started on `ex` (a bounded body is read and dropped) before
/// `end`, with the blocking driver of `s3_lite::net` (also for hipobj-rc-v2's exchanges).
pub(crate) fn read_head_until(
    s: &mut TcpStream,
    ex: &mut HttpExchange,
    end: Instant,
) -> Result<ResponseHead, ()> {
    read_answer_until(s, ex, end).map(|(head, _)| head)
}

/// [`read_head_until`], also returning the answer's body (at most 64 KiB: an error document).
pub(crate) fn read_answer_until(
    s: &mut TcpStream,
    ex: &mut HttpExchange,
    end: Instant,
) -> Result<(ResponseHead, Vec<u8>), ()> {
    until::read(s, ex, end, MAX_ANSWER_BODY).map_err(|_| ())
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
