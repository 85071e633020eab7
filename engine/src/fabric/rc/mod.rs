//! `rc`: one reliable-connected (RC) interface over both RDMA fabrics, so the dialects
//! (`rc-persistent`, `hipobj-rc-v2`) on the client and on the gateway are written once.
//!
//! Public for RDMA targets (the gateway's `hipobj serve --fabric soft|verbs`) and tests;
//! applications moving objects never need it (docs/engine.md, "Public surface").
//!
//! - [`RcDevice::soft`]: the soft fabric (RC semantics emulated over TCP, `crate::soft`); the
//!   data path of hosts without an RDMA NIC, and the test double.
//! - [`RcDevice::open_verbs`]: libibverbs (`crate::verbs`) on a real NIC or Soft-RoCE.
//!
//! Each handle ([`RcPd`], [`RcMr`], [`RcCq`], [`RcQp`]) is an enum over the two fabrics' own
//! RAII types, with the methods the dialects use and nothing else. Work requests,
//! access rights and completions are one vocabulary ([`wr`]) that both devices speak.
//!
//! Where the fabrics differ, the difference is named here and nowhere else:
//! - connection set-up: the soft fabric needs a TCP path ([`SoftPath`]: dial the peer's
//!   listener, or accept on ours); verbs needs nothing beyond the peer's token (GID, QPN).
//! - waiting for completions: the soft CQ has a condition variable; a verbs CQ here has no
//!   completion channel, so [`RcCq::poll_wait`] polls with a short back-off.
//! - deregistration: the soft fabric's is a fence (it waits for an access in progress and
//!   refuses every later one); `ibv_dereg_mr` gives the same guarantee once it returns, but
//!   only when the last clone of the region is dropped — [`RcPd::deregister`] consumes the
//!   handle so callers never keep one.
//! - window bounds: the soft fabric checks every access against the exact registration; a
//!   NIC checks against the registration too, so both enforce a window exactly when each
//!   window is its own registration (what the client dialects do).

mod objects;
pub mod wr;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

pub use objects::{RcCq, RcMr, RcPd, RcQp, RcStaging};

pub use crate::fabric::soft::SoftPath;
pub use wr::{Access, RecvWr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion};

use crate::fabric::soft::SoftDevice;
use crate::verbs;

/// Which fabric a device is (the name the wire uses, `x-amz-rdma-fabric`, lives with the
/// protocol in `s3_lite::rdma::pairing`).
pub use s3_lite::rdma::pairing::RcKind;

/// Queue depths of a new QP (the fabric-specific rest keeps each fabric's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcCaps {
    /// Send work requests outstanding at once.
    pub max_send_wr: u32,
    /// RECVs posted at once.
    pub max_recv_wr: u32,
    /// The QP will post RDMA READs (verbs: it takes the vendor row's `read_timeout`,
    /// docs/verbs.md, RC parameters; the soft fabric has no ACK timeout).
    pub posts_reads: bool,
}

impl Default for RcCaps {
    /// 128 / 128 (hipObject's sizes; docs/verbs.md, RC parameters), no READs.
    fn default() -> Self {
        Self {
            max_send_wr: 128,
            max_recv_wr: 128,
            posts_reads: false,
        }
    }
}

/// Why an `rc` call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RcError {
    /// A soft-fabric queue-pair call.
    #[error("soft fabric: {0}")]
    SoftQp(#[from] crate::fabric::soft::QpError),
    /// A soft-fabric memory-region call.
    #[error("soft fabric: {0}")]
    SoftMr(#[from] crate::fabric::soft::MrError),
    /// A verbs call.
    #[error(transparent)]
    Verbs(#[from] verbs::Error),
    /// Handles of different fabrics were combined (a soft PD with a verbs CQ...).
    #[error("rc: {0} of the {1} fabric used with the {2} fabric")]
    Mixed(&'static str, &'static str, &'static str),
    /// The soft fabric was asked to connect without a TCP path.
    #[error("soft fabric: connecting needs a path (the peer's listener address, or accept)")]
    NoSoftPath,
    /// A verbs device has no usable IPv4 address for the listener-less soft role.
    #[error("rc: {0}")]
    Unsupported(&'static str),
}

impl RcError {
    /// The errno of a refused registration or verb, where the fabric reported one (a soft
    /// dmabuf that cannot be mapped; a verbs call's `source`).
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::SoftMr(e) => e.errno(),
            Self::Verbs(e) => std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .and_then(std::io::Error::raw_os_error),
            _ => None,
        }
    }

    /// Whether the error comes from the peer's token rather than from this host: no local GID
    /// of the peer's family, or a QP transition towards the peer's address refused (`RTR`).
    /// A server answers these with a 4xx naming the cause.
    #[must_use]
    pub fn is_peer_caused(&self) -> bool {
        match self {
            Self::Verbs(verbs::Error::NoGidForPeer { .. }) => true,
            Self::Verbs(verbs::Error::ModifyQp { to, .. }) => *to == verbs::QpState::Rtr,
            _ => false,
        }
    }
}

/// Why a post failed (nothing was queued).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RcPostError {
    /// The soft fabric refused it.
    #[error("soft fabric: {0}")]
    Soft(#[from] crate::fabric::soft::PostError),
    /// libibverbs refused it.
    #[error("verbs: {0}")]
    Verbs(#[from] verbs::PostError),
}

/// An RC device: where protection domains, CQs and QPs come from.
#[derive(Debug, Clone)]
pub enum RcDevice {
    /// The soft fabric on this IPv4 address (its GID is the IPv4-mapped address).
    Soft(SoftDevice),
    /// An open verbs device.
    Verbs(Arc<verbs::Context>),
}

impl RcDevice {
    /// A soft device on `ip`.
    #[must_use]
    pub fn soft(ip: Ipv4Addr) -> Self {
        Self::Soft(SoftDevice::new(ip))
    }

    /// Opens a verbs device (`name`, or the first one). Fails with the verbs layer's
    /// actionable error when libibverbs or a device is missing.
    pub fn open_verbs(name: Option<&str>) -> Result<Self, RcError> {
        Ok(Self::Verbs(verbs::Context::open(name)?))
    }

    /// Which fabric this is.
    #[must_use]
    pub fn kind(&self) -> RcKind {
        match self {
            Self::Soft(_) => RcKind::Soft,
            Self::Verbs(_) => RcKind::Verbs,
        }
    }

    /// A device name for logs (`soft:<ip>` or the verbs device name).
    #[must_use]
    pub fn name(&self) -> String {
        match self {
            Self::Soft(d) => format!(
                "soft:{}",
                d.local_addr()
                    .map_or_else(String::new, |a| a.ip().to_string())
            ),
            Self::Verbs(c) => c.name().to_owned(),
        }
    }

    /// Soft fabric only: starts the listener peers' QPs dial (`SoftPath::Accept` side).
    pub fn listen(&self, addr: SocketAddr) -> Result<SocketAddr, RcError> {
        match self {
            Self::Soft(d) => d.listen(addr).map_err(|e| {
                RcError::SoftQp(crate::fabric::soft::QpError::Connect(format!(
                    "listen on {addr}: {e}"
                )))
            }),
            Self::Verbs(_) => Err(RcError::Unsupported(
                "a verbs device has no listener (RC connections need only the peer's token)",
            )),
        }
    }

    /// A new protection domain.
    pub fn alloc_pd(&self) -> Result<RcPd, RcError> {
        Ok(match self {
            Self::Soft(d) => RcPd::Soft(d.alloc_pd()),
            Self::Verbs(c) => RcPd::Verbs(c.alloc_pd()?),
        })
    }

    /// A new completion queue with room for `cqe` completions (the soft CQ is unbounded).
    pub fn create_cq(&self, cqe: u32) -> Result<RcCq, RcError> {
        Ok(match self {
            Self::Soft(d) => RcCq::Soft(d.create_cq()),
            Self::Verbs(c) => RcCq::Verbs(c.create_cq(cqe)?),
        })
    }

    /// A new RC queue pair in `Reset` on `pd`, reporting to `send` / `recv`.
    pub fn create_qp(
        &self,
        pd: &RcPd,
        send: &RcCq,
        recv: &RcCq,
        caps: RcCaps,
    ) -> Result<RcQp, RcError> {
        self.create_qp_toward(pd, send, recv, caps, None)
    }

    /// [`Self::create_qp`] for pairing with a peer whose token names `peer_gid`: on verbs the
    /// source GID is one of the peer's family (docs/verbs.md, GID choice; none: `verbs::Error::
    /// NoGidForPeer`, see [`RcError::is_peer_caused`]); the soft fabric has one address per device.
    pub fn create_qp_toward(
        &self,
        pd: &RcPd,
        send: &RcCq,
        recv: &RcCq,
        caps: RcCaps,
        peer_gid: Option<&[u8; 16]>,
    ) -> Result<RcQp, RcError> {
        match (self, pd, send, recv) {
            (Self::Soft(d), RcPd::Soft(pd), RcCq::Soft(s), RcCq::Soft(r)) => {
                let c = crate::fabric::soft::QpCaps {
                    max_send_wr: caps.max_send_wr,
                    max_recv_wr: caps.max_recv_wr,
                    ..Default::default()
                };
                Ok(RcQp::Soft(d.create_qp(pd, s, r, c)))
            }
            (Self::Verbs(_), RcPd::Verbs(pd), RcCq::Verbs(s), RcCq::Verbs(r)) => {
                let c = verbs::QpCaps {
                    max_send_wr: caps.max_send_wr,
                    max_recv_wr: caps.max_recv_wr,
                    posts_reads: caps.posts_reads,
                    ..Default::default()
                };
                Ok(RcQp::Verbs(verbs::QueuePair::create_toward(
                    pd, s, r, c, peer_gid,
                )?))
            }
            _ => Err(RcError::Mixed("a PD or CQ", "other", self.kind().as_str())),
        }
    }
}

/// A random non-zero 24-bit PSN (first send PSN of a new QP).
#[must_use]
pub fn random_psn() -> u32 {
    loop {
        let p = rand::random::<u32>() & 0x00ff_ffff;
        if p != 0 {
            return p;
        }
    }
}
