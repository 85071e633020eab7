//! `--fabric soft|verbs`: the gateway's RDMA target, written once over `engine::rc` — the soft
//! fabric (RC semantics over TCP) or libibverbs (a real NIC, or Soft-RoCE).
//!
//! The `rc-persistent` dialect: a client pairs one RC queue pair with the gateway once, through
//! the signed route `POST /.hipobj/rc/connect` ([`CONNECT_PATH`]): it presents its RC token
//! (QPN, GID), its PSN and its fabric ([`FABRIC_HEADER`]), and gets the gateway's token, PSN,
//! a connection id (`x-amz-rdma-session`) and, on the soft fabric, the listener address its QP
//! dials. A client of the other fabric is declined (`501`), so it falls back to HTTP instead of
//! timing out on a path that cannot exist. The connection is bound to the access key that
//! signed the connect request. Afterwards each GET / PUT / UploadPart is an ordinary S3 request
//! carrying `x-amz-rdma-token` (an 88-hex RC token naming the client's QPN, rkey, address and
//! length) and the session header; the gateway RDMA-WRITEs the object bytes into the window
//! (GET) or RDMA-READs the payload out of it (PUT) through its own staging buffers
//! (`gateway/src/rdma_target/transfer.rs`). The client's fabric checks rkey and bounds on every access (the soft
//! fabric per frame, a NIC per packet against the registration), so the gateway can never
//! touch a byte outside the granted window.
//!
//! Limits: connections overall and per principal, staging buffers overall (a spent pool is
//! `503 SlowDown`), a deadline on every transfer. A connection whose QP failed is dropped; the
//! next request naming it is declined (`501`), so the client falls back and pairs again.

mod transfer;
mod unsettled;
pub mod v2;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use engine::rc::{Access, RcCaps, RcDevice, RcKind, RcPd, RcQp, RcStaging, SoftPath};
use s3_lite::rdma::{RcToken, TokenKind, Transport};

use crate::error::ApiError;
use crate::rdma::{ConnectReply, ConnectRequest, DataPath, RdmaGrant, RdmaOp, RdmaTarget};

pub use transfer::CHUNK;
use transfer::{Demux, RcGet, RcPut};
use unsettled::{Reaped, Unsettled};

/// Request and response header naming the fabric of a QP (`soft` or `verbs`) on the connect
/// route and on hipobj-rc-v2 PREPARE. Absent: the peer did not say (third-party v2 clients),
/// and the gateway's own fabric is assumed.
use s3_lite::rdma::pairing::RDMA_FABRIC as FABRIC_HEADER;

/// Completion-queue entries of a paired connection (its send queue depth, with room).
const CQ_DEPTH: u32 = 256;

/// Declines a peer whose QP is on another fabric (`501` + `x-amz-rdma-reply: 501`).
pub(crate) fn check_fabric(ours: RcKind, theirs: Option<&str>) -> Result<(), ApiError> {
    let Some(theirs) = theirs else { return Ok(()) };
    if RcKind::parse(theirs) == Some(ours) {
        return Ok(());
    }
    let mut e = ApiError::not_implemented(format!(
        "this gateway's RDMA fabric is {}, the client's QP is {:?}; use plain HTTP",
        ours.as_str(),
        theirs.trim()
    ));
    e.headers
        .push((s3_lite::rdma::RDMA_REPLY.to_owned(), "501".to_owned()));
    // Names ours, so a client that can make QPs of either fabric pairs again with ours.
    e.headers
        .push((FABRIC_HEADER.to_owned(), ours.as_str().to_owned()));
    Err(e)
}

/// Bounds of an [`RcTarget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcLimits {
    /// Paired connections at once (a new connect beyond it is `503 SlowDown`).
    pub max_connections: usize,
    /// Paired connections per access key.
    pub max_per_principal: usize,
    /// Staging buffers of [`CHUNK`] bytes at once (each PUT in flight holds 1, each GET 1 to 4:
    /// buffers beyond the second only while fewer than half are in use).
    pub max_staging: usize,
    /// Largest PUT payload a token may announce.
    pub max_put: u64,
    /// Deadline of one transfer's completion waits.
    pub transfer_timeout: Duration,
    /// Bounds of the hipobj-rc-v2 sessions ([`v2`]).
    pub v2: v2::V2Limits,
}

impl Default for RcLimits {
    fn default() -> Self {
        Self {
            max_connections: 256,
            max_per_principal: 64,
            max_staging: 128,
            max_put: 5 << 30,
            transfer_timeout: Duration::from_secs(30),
            v2: v2::V2Limits::default(),
        }
    }
}

/// One paired connection (a server QP bound to a principal and a client QPN).
#[derive(Debug)]
pub(crate) struct Conn {
    principal: String,
    client_qpn: u32,
    // Declared before the CQ it reports to (dropped first).
    pub(crate) qp: RcQp,
    pub(crate) demux: Demux,
    /// The client's soft QP takes WRITEs flagged `ACK_LATER` (its pairing named the feature).
    pub(crate) acks_later: bool,
}

impl Conn {
    fn dead(&self) -> bool {
        self.qp.is_failed()
    }
}

/// Staging buffers shared by all transfers (registered once, reused).
#[derive(Debug)]
pub(crate) struct Pool {
    pd: RcPd,
    /// Free buffers, and how many are registered in all.
    state: Mutex<(Vec<RcStaging>, usize)>,
    max: usize,
    /// Early-answered GETs whose WRITEs may still be in flight: their buffers come back when
    /// [`Pool::reap`] finds them completed (`gateway/src/rdma_target/unsettled.rs`).
    unsettled: Mutex<Vec<Unsettled>>,
    /// Parked transfers not settled yet, counting those another thread is checking or
    /// waiting for right now (out of `unsettled` meanwhile).
    parked_total: AtomicUsize,
}

impl Pool {
    fn new(pd: RcPd, max: usize) -> Self {
        Self {
            pd,
            state: Mutex::new((Vec::new(), 0)),
            max,
            unsettled: Mutex::new(Vec::new()),
            parked_total: AtomicUsize::new(0),
        }
    }

    /// A buffer, or `503 SlowDown` when `max` are in use and no parked early-answered GET
    /// frees one by its deadline.
    pub(crate) fn take(&self) -> Result<RcStaging, ApiError> {
        loop {
            if let Some(mr) = self.take_below(self.max)? {
                return Ok(mr);
            }
            if !self.settle_oldest() {
                return Err(ApiError::slow_down());
            }
        }
    }

    /// A buffer beyond the one a transfer needs (to keep more bytes in flight), only while
    /// fewer than `in_use_below` are in use, so extra buffers never starve other transfers of
    /// their first.
    pub(crate) fn take_extra(&self, in_use_below: usize) -> Option<RcStaging> {
        self.take_below(in_use_below.min(self.max)).ok().flatten()
    }

    /// Parks an early-answered GET's WRITEs until they complete.
    pub(crate) fn leave(&self, transfer: Unsettled) {
        self.parked_total.fetch_add(1, Ordering::AcqRel);
        self.parked().push(transfer);
    }

    /// Takes back the buffers of parked WRITEs that completed, and retires those of failed or
    /// overdue ones (failing their connections). Never waits.
    /// Checked in place, under the lock (a check never waits), so another thread never finds
    /// the list emptied by a check in progress.
    fn reap(&self) {
        let mut parked = self.parked();
        for transfer in std::mem::take(&mut *parked) {
            if let Some(t) = self.take_back(transfer.reap()) {
                parked.push(t);
            }
        }
    }

    /// Waits for the oldest parked transfer to complete (its deadline at most) and takes its
    /// buffers back; `false` when none is parked. When every parked transfer is being waited
    /// for by another thread, yields briefly instead: those free their buffers soon, and a
    /// `503` meanwhile would send the client's op over HTTP.
    fn settle_oldest(&self) -> bool {
        let oldest = {
            let mut parked = self.parked();
            if parked.is_empty() {
                drop(parked);
                if self.parked_total.load(Ordering::Acquire) == 0 {
                    return false;
                }
                std::thread::sleep(Duration::from_micros(50));
                return true;
            }
            parked.remove(0)
        };
        if let Some(t) = self.take_back(oldest.wait()) {
            // Not complete by its deadline is failed, so this is not reached; kept parked
            // rather than dropped should it be.
            self.parked().push(t);
        }
        true
    }

    /// Gives back or retires the buffers `reaped` names; the transfer if it is still pending.
    fn take_back(&self, reaped: Reaped) -> Option<Unsettled> {
        match reaped {
            Reaped::Done(free) => {
                free.into_iter().for_each(|mr| self.give(mr));
                self.parked_total.fetch_sub(1, Ordering::AcqRel);
                None
            }
            Reaped::Failed { free, retire } => {
                free.into_iter().for_each(|mr| self.give(mr));
                retire.into_iter().for_each(|mr| self.retire(mr));
                self.parked_total.fetch_sub(1, Ordering::AcqRel);
                None
            }
            Reaped::Pending(transfer, free) => {
                free.into_iter().for_each(|mr| self.give(mr));
                Some(transfer)
            }
        }
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<Unsettled>> {
        self.unsettled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Parked transfers (tests).
    #[cfg(test)]
    pub(crate) fn unsettled(&self) -> usize {
        self.parked().len()
    }

    fn take_below(&self, limit: usize) -> Result<Option<RcStaging>, ApiError> {
        if let Some(mr) = self.take_free(limit) {
            return Ok(Some(mr));
        }
        // None free (or the limit reached): first take back what parked WRITEs released.
        self.reap();
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if in_use(&g) >= limit {
            return Ok(None);
        }
        if let Some(mr) = g.0.pop() {
            return Ok(Some(mr));
        }
        // Local access only: the client never learns these keys, and nothing remote may touch
        // the gateway's memory (LOCAL_WRITE: RDMA READ destinations).
        let mr = self
            .pd
            .register_staging(CHUNK, Access::LOCAL_WRITE)
            .map_err(ApiError::internal)?;
        g.1 += 1;
        Ok(Some(mr))
    }

    /// A free buffer while fewer than `limit` are in use.
    fn take_free(&self, limit: usize) -> Option<RcStaging> {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if in_use(&g) >= limit {
            return None;
        }
        g.0.pop()
    }

    /// Returns a buffer no work request uses any more.
    pub(crate) fn give(&self, mr: RcStaging) {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        g.0.push(mr);
    }

    /// Retires a buffer a failed work request may still reference (deregistered: the fabric
    /// finishes any access first and refuses later ones).
    pub(crate) fn retire(&self, mr: RcStaging) {
        let _ = self.pd.deregister(mr.into_mr());
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        g.1 = g.1.saturating_sub(1);
    }

    /// The most buffers in use at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// Buffers in use: registered (`state.1`) less free (`state.0`).
fn in_use(state: &(Vec<RcStaging>, usize)) -> usize {
    state.1.saturating_sub(state.0.len())
}

/// The RDMA target side of either fabric (see the module docs).
#[derive(Debug)]
pub struct RcTarget {
    // Connections (their QPs) go before the device that owns the QPNs.
    conns: Mutex<HashMap<String, Arc<Conn>>>,
    pool: Arc<Pool>,
    device: RcDevice,
    /// The soft listener (soft fabric only).
    addr: Option<SocketAddr>,
    limits: RcLimits,
    v2: v2::RcV2,
}

impl RcTarget {
    /// Starts the soft listener on `listen` (port 0 picks one). Its address is advertised in
    /// connect replies, so it must be reachable by clients (not `0.0.0.0`).
    pub fn start(listen: SocketAddr, limits: RcLimits) -> std::io::Result<Arc<Self>> {
        let ip = match listen.ip() {
            std::net::IpAddr::V4(ip) if !ip.is_unspecified() => ip,
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "the soft fabric listens on a specific IPv4 address (its GID is IPv4-mapped)",
                ));
            }
        };
        let device = RcDevice::soft(ip);
        let addr = device.listen(listen).map_err(std::io::Error::other)?;
        Self::with_device(device, Some(addr), limits).map_err(std::io::Error::other)
    }

    /// Starts a target on the verbs device `name` (or the first one): `--fabric verbs`.
    /// Fails with the verbs layer's actionable error when there is no libibverbs, no device
    /// or no active port.
    pub fn start_verbs(
        name: Option<&str>,
        limits: RcLimits,
    ) -> Result<Arc<Self>, engine::rc::RcError> {
        let device = RcDevice::open_verbs(name)?;
        Self::with_device(device, None, limits)
    }

    fn with_device(
        device: RcDevice,
        addr: Option<SocketAddr>,
        limits: RcLimits,
    ) -> Result<Arc<Self>, engine::rc::RcError> {
        let pd = device.alloc_pd()?;
        Ok(Arc::new(Self {
            conns: Mutex::new(HashMap::new()),
            pool: Arc::new(Pool::new(pd, limits.max_staging)),
            v2: v2::RcV2::new(device.clone(), addr, limits.v2),
            device,
            addr,
            limits,
        }))
    }

    /// The soft listener address clients' QPs dial (soft fabric only).
    pub fn soft_addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The fabric this target runs on.
    pub fn kind(&self) -> RcKind {
        self.device.kind()
    }

    /// The device name (`soft:<ip>` or the verbs device, e.g. `rxe0`).
    pub fn device_name(&self) -> String {
        self.device.name()
    }

    /// Paired connections alive now.
    pub fn connections(&self) -> usize {
        self.conns().values().filter(|c| !c.dead()).count()
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Looks up the connection a token names, bound to `principal`.
    /// `Ok(None)`: unknown or failed connection (the request is declined, 501).
    fn lookup(
        &self,
        session: Option<&str>,
        principal: &str,
        client_qpn: u32,
    ) -> Result<Option<Arc<Conn>>, ApiError> {
        let Some(id) = session else { return Ok(None) };
        let mut conns = self.conns();
        let Some(c) = conns.get(id.trim()).cloned() else {
            return Ok(None);
        };
        if c.principal != principal {
            // Never usable by another key; same answer whether it exists or not for them.
            return Err(no_such_session());
        }
        if c.dead() {
            conns.remove(id.trim());
            return Ok(None);
        }
        if c.client_qpn != client_qpn {
            return Err(ApiError::invalid_argument(format!(
                "{} names a QPN other than the one paired with this session",
                s3_lite::rdma::RDMA_TOKEN
            )));
        }
        Ok(Some(c))
    }
}

fn no_such_session() -> ApiError {
    ApiError::new(
        404,
        "NoSuchRdmaSession",
        "The RDMA session does not exist or belongs to another principal",
    )
}

impl RdmaTarget for RcTarget {
    fn fabric(&self) -> &'static str {
        self.device.kind().as_str()
    }

    fn rc_v2(&self) -> Option<&v2::RcV2> {
        Some(&self.v2)
    }

    fn open(&self, grant: &RdmaGrant<'_>) -> Result<Option<Box<dyn DataPath>>, ApiError> {
        let TokenKind::HipObjectRc(tok) = grant.token else {
            return Ok(None);
        };
        if tok.token.transport != Transport::Rc {
            return Ok(None);
        }
        let Some(conn) = self.lookup(grant.session, grant.principal, tok.token.qpn)? else {
            return Ok(None);
        };
        let remote = engine::rc::RemoteAddr {
            addr: tok.remote_addr(),
            rkey: tok.token.rkey,
        };
        let len = tok.size();
        let deadline = std::time::Instant::now() + self.limits.transfer_timeout;
        let path: Box<dyn DataPath> = match grant.op {
            RdmaOp::Get => {
                let ack_last_later = grant.early_answer && conn.acks_later;
                Box::new(
                    RcGet::new(conn, Arc::clone(&self.pool), remote, len, deadline)
                        .checked_end_to_end(grant.checked_end_to_end)
                        .ack_last_later(ack_last_later),
                )
            }
            _ => {
                if len > self.limits.max_put {
                    return Err(ApiError::new(
                        400,
                        "EntityTooLarge",
                        "Your proposed upload exceeds the maximum allowed size",
                    ));
                }
                Box::new(RcPut::new(
                    conn,
                    Arc::clone(&self.pool),
                    remote,
                    len,
                    deadline,
                )?)
            }
        };
        Ok(Some(path))
    }

    fn connect(&self, req: &ConnectRequest<'_>) -> Result<Option<ConnectReply>, ApiError> {
        let client = req.token;
        if client.transport != Transport::Rc || client.qpn == 0 || client.gid == [0; 16] {
            return Err(ApiError::invalid_argument(format!(
                "{} must be an RC token with a QPN and a GID",
                s3_lite::rdma::RDMA_TOKEN
            )));
        }
        check_fabric(self.device.kind(), req.fabric)?;
        {
            let mut conns = self.conns();
            conns.retain(|_, c| !c.dead());
            if conns.len() >= self.limits.max_connections
                || conns
                    .values()
                    .filter(|c| c.principal == req.principal)
                    .count()
                    >= self.limits.max_per_principal
            {
                return Err(ApiError::slow_down());
            }
        }
        let fail = |e: engine::rc::RcError| qp_failure(&e);
        let cq = self.device.create_cq(CQ_DEPTH).map_err(fail)?;
        // Source GID per peer: one of the client's token GID's family (docs/verbs.md, GID choice).
        let qp = self
            .device
            .create_qp_toward(
                &self.pool.pd,
                &cq,
                &cq,
                // It READs PUT payloads (verbs: the vendor row's READ timeout).
                RcCaps {
                    posts_reads: true,
                    ..RcCaps::default()
                },
                Some(&client.gid),
            )
            .map_err(fail)?;
        // The gateway's QP grants no remote access: it only initiates WRITE and READ.
        qp.modify_to_init(Access::NONE).map_err(fail)?;
        let psn = engine::rc::random_psn();
        // Soft: the client dials our listener (10 s); verbs: the path is the client's GID.
        let path = self.addr.map(|_| SoftPath::Accept);
        qp.connect(client, req.psn, psn, path).map_err(fail)?;
        let token: RcToken = qp.local_token(None).map_err(fail)?;
        let session = format!("{:032x}", rand::random::<u128>());
        let conn = Arc::new(Conn {
            principal: req.principal.to_owned(),
            client_qpn: client.qpn,
            qp,
            demux: Demux::new(cq),
            acks_later: self.device.kind() == RcKind::Soft
                && req.soft_features.is_some_and(|f| {
                    s3_lite::rdma::pairing::soft_features_name(
                        f,
                        s3_lite::rdma::pairing::SOFT_ACK_LATER,
                    )
                }),
        });
        self.conns().insert(session.clone(), conn);
        Ok(Some(ConnectReply {
            token,
            psn,
            session,
            soft_addr: self.addr,
            fabric: self.device.kind(),
        }))
    }
}

/// A queue-pair failure while pairing with a client (connect route, v2 PREPARE): one the client's token caused (no local GID of its family,
/// RTR towards its address refused) is a 400 naming the cause; anything else is ours (500).
pub(crate) fn qp_failure(e: &engine::rc::RcError) -> ApiError {
    if e.is_peer_caused() {
        ApiError::new(
            400,
            "InvalidArgument",
            format!("{} cannot be paired here: {e}", s3_lite::rdma::RDMA_TOKEN),
        )
    } else {
        ApiError::internal(format!("RC queue pair: {e}"))
    }
}
