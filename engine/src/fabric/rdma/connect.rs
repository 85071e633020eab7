//! The pairing of `rc-persistent`: an RC QP (soft fabric or verbs, [`Home`]) set up and paired
//! with the server through one signed `POST /.hipobj/rc/connect`, which names our fabric in
//! `x-amz-rdma-fabric` (a gateway of the other fabric declines, naming its own).
//!
//! Runs once per worker and endpoint (and again after the connection failed) as a step
//! machine on the worker ([`Pairing`]): the QP is made at the start, the connect request is a
//! non-blocking side exchange (`ctrl`) driven by the worker's poll, and the answer connects
//! the QP (the soft fabric's I/O thread dials the gateway's listener, bounded by
//! `v2::CONNECT_LIMIT`; the worker does not wait: the pairing ends when the dial does, which
//! rings the worker's waker through the QP's CQ). The dialects' timers bound the whole pairing
//! by [`LIMIT`]. [`Pairing::on_ready`] is the one
//! place the paired [`Link`] is built.

use std::net::{Ipv4Addr, SocketAddr};

use crate::fabric::rc::{Access, RcCaps, RcCq, RcDevice, RcKind, RcPd, RcQp, SoftPath};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::Token;
use s3_lite::Request;
use s3_lite::http::ResponseHead;
use s3_lite::rdma::pairing::{self, Paired};

use super::ctrl::{Ctrl, Step};
use crate::fabric::http::tls::TlsContext;
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{PayloadHash, Signer};

/// Where a client's QPs live.
#[derive(Debug, Clone)]
pub(crate) enum Home {
    /// The soft fabric: the process's shared device on this IPv4 address
    /// (`SoftDevice::shared`: one fixed set of soft I/O threads, not a set per worker or op).
    Soft(Ipv4Addr),
    /// A verbs device, opened once for the engine.
    Verbs(RcDevice),
}

impl Home {
    /// The device to make QPs on.
    pub(crate) fn device(&self) -> RcDevice {
        match self {
            Self::Soft(ip) => RcDevice::Soft(crate::fabric::soft::SoftDevice::shared(*ip)),
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
    /// The `https://` endpoint's certificate was refused: its waiting ops fail as the HTTP
    /// path fails them (they are never sent another way).
    CertificateRefused,
}

/// The longest one pairing may take (the dialects' timer ends it then).
pub(crate) const LIMIT: Duration = Duration::from_secs(5);

/// A paired connection: our QP connected to the server's, and the session id the requests
/// name.
#[derive(Debug)]
pub(crate) struct Link {
    // Field order = drop order: the QP before the CQ and the device.
    pub(crate) qp: RcQp,
    _cq: RcCq,
    pub(crate) pd: RcPd,
    _device: RcDevice,
    pub(crate) session: String,
}

/// Where and as whom to pair.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: SocketAddr,
    pub(crate) endpoint: Endpoint,
    pub(crate) signer: Arc<Signer>,
    /// Where our QP lives.
    pub(crate) home: Home,
    /// TLS of an `https://` endpoint: the connect request is verified like any request.
    pub(crate) tls: Option<Arc<TlsContext>>,
}

/// Completion-queue entries of a paired QP (the client posts nothing on it; room for the
/// flush of an error).
const CQ_DEPTH: u32 = 16;

/// A pairing in progress: our QP (INIT) and the connect request on its side connection;
/// once answered, our (soft) QP's dial of the gateway's listener.
#[derive(Debug)]
pub(crate) struct Pairing {
    // Field order = drop order: the QP before the CQ and the device.
    qp: RcQp,
    cq: RcCq,
    pd: RcPd,
    device: RcDevice,
    psn: u32,
    /// The connect request's side connection (`None` once answered).
    ctrl: Option<Ctrl>,
    token: Token,
    /// The session the answer named: our QP is connected (soft: dialling).
    session: Option<String>,
    pub(crate) started: Instant,
}

impl Pairing {
    /// Makes the domain, CQ and QP (INIT) on the home device and starts the signed connect
    /// request on a side connection registered under `token`. `waker`: the worker's, rung
    /// (through the soft CQ) when the QP's dial ends.
    pub(crate) fn start(
        target: &Target,
        now: s3_lite::sigv4::AmzDate,
        token: Token,
        waker: Option<&Arc<mio::Waker>>,
        io: &mio::Registry,
    ) -> Result<Self, ConnectError> {
        let t = ConnectError::Transport;
        let device = target.home.device();
        let pd = device.alloc_pd().map_err(|_| t.clone())?;
        let cq = device.create_cq(CQ_DEPTH).map_err(|_| t.clone())?;
        let qp = device
            .create_qp(&pd, &cq, &cq, RcCaps::default())
            .map_err(|_| t.clone())?;
        let _ = cq.notify_to(waker.cloned());
        qp.modify_to_init(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .map_err(|_| t.clone())?;
        let token_rc = qp.local_token(None).map_err(|_| t.clone())?;
        let psn = crate::fabric::rc::random_psn();
        let mut req = Request::new("POST", pairing::CONNECT_PATH);
        req.add_header("Host", target.endpoint.host_header(None));
        for (n, v) in pairing::connect_headers(&token_rc, psn, device.kind()).ok_or(t.clone())? {
            req.add_header(n, v);
        }
        req.add_header("Content-Length", "0");
        target
            .signer
            .sign_headers(&mut req, &PayloadHash::Unsigned, now)
            .map_err(|_| t.clone())?;
        let mut ctrl =
            Ctrl::open(target.addr, target.tls.as_ref(), token, io).map_err(|_| t.clone())?;
        match ctrl.request(&req) {
            Step::Pending | Step::Answer(..) => {}
            Step::Broken => {
                ctrl.close(io);
                return Err(t);
            }
            Step::Refused => {
                ctrl.close(io);
                return Err(ConnectError::CertificateRefused);
            }
        }
        Ok(Self {
            qp,
            cq,
            pd,
            device,
            psn,
            ctrl: Some(ctrl),
            token,
            session: None,
            started: Instant::now(),
        })
    }

    /// The side connection's token.
    pub(crate) fn token(&self) -> Token {
        self.token
    }

    /// The answer is in and our QP dials the gateway's listener: the worker checks the
    /// pairing ([`Pairing::on_ready`]) when it wakes.
    pub(crate) fn dialing(&self) -> bool {
        self.session.is_some()
    }

    /// Readiness on the side connection (or, once answered, a wake while our QP dials):
    /// `Err(self)` while the answer or the dial is on its way; else the pairing's end (the
    /// connection is closed), with our QP connected to the server's on success.
    pub(crate) fn on_ready(
        mut self: Box<Self>,
        io: &mio::Registry,
    ) -> Result<Result<Link, ConnectError>, Box<Self>> {
        if self.session.is_none() {
            let Some(ctrl) = self.ctrl.as_mut() else {
                return Ok(Err(ConnectError::Transport));
            };
            let head = match ctrl.drive() {
                Step::Pending => return Err(self),
                Step::Broken => {
                    self.close(io);
                    return Ok(Err(ConnectError::Transport));
                }
                Step::Refused => {
                    self.close(io);
                    return Ok(Err(ConnectError::CertificateRefused));
                }
                Step::Answer(head, _) => head,
            };
            if let Some(c) = self.ctrl.take() {
                c.close(io);
            }
            let peer = match parse(&head) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            // Soft: our QP dials the gateway's listener; verbs: the token's GID is the path.
            let path = match self.device.kind() {
                RcKind::Soft => match peer.soft_addr {
                    Some(a) => Some(SoftPath::Connect(a)),
                    None => return Ok(Err(ConnectError::Transport)),
                },
                _ => None,
            };
            let within = LIMIT
                .saturating_sub(self.started.elapsed())
                .min(super::v2::CONNECT_LIMIT);
            if within.is_zero()
                || self
                    .qp
                    .connect_within(&peer.token, peer.psn, self.psn, path, within)
                    .is_err()
            {
                return Ok(Err(ConnectError::Transport));
            }
            self.session = Some(peer.session);
        }
        // The soft dial runs on the device's I/O thread; its end rings the worker's waker.
        if self.qp.is_connecting() {
            return Err(self);
        }
        if self.qp.is_failed() {
            return Ok(Err(ConnectError::Transport));
        }
        let Self {
            qp,
            cq,
            pd,
            device,
            session,
            ..
        } = *self;
        let Some(session) = session else {
            return Ok(Err(ConnectError::Transport));
        };
        Ok(Ok(Link {
            qp,
            _cq: cq,
            pd,
            _device: device,
            session,
        }))
    }

    /// Gives the pairing up (its time ran out): the connection is closed, the QP dropped.
    pub(crate) fn close(mut self: Box<Self>, io: &mio::Registry) {
        if let Some(c) = self.ctrl.take() {
            c.close(io);
        }
    }
}

/// The connect answer judged by the protocol module (`s3_lite::rdma::pairing`).
pub(crate) fn parse(head: &ResponseHead) -> Result<Paired, ConnectError> {
    pairing::parse_answer(head).map_err(|r| match r {
        pairing::Refusal::OtherFabric(k) => ConnectError::OtherFabric(k),
        pairing::Refusal::Declined(status) => ConnectError::Declined(status),
    })
}
