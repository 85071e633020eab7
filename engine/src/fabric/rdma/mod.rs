//! The RDMA dialects, client side, over the soft fabric: `rc-persistent` (below) and
//! `hipobj-rc-v2` ([`Dialect::RcV2`]: the per-op PREPARE / READY exchange in `v2`, its pure
//! rules in `v2_wire`, entered through [`RdmaClient::exchange`]), and the cuObject request
//! shape ([`Dialect::CuObject`]: a provider-minted DC descriptor per op, `cuobject`; no pairing,
//! same acceptance rules; DC itself never ran here — no hardware).
//!
//! Per worker and endpoint ([`RdmaClient`], owned by the worker's HTTP fabric): on first use a
//! soft QP is created and paired with the server through the signed connect route
//! ([`connect`]). Then each GET / RangeGet / PUT carries `x-amz-rdma-token` (an 88-hex RC
//! token naming our QPN and a window: the op's exact buffer range, registered with the soft
//! domain for this one operation) and `x-amz-rdma-session`; PUTs also carry the payload's
//! `x-amz-checksum-crc64nvme`. The server moves the bytes with RDMA WRITE / READ and answers
//! on the same HTTP exchange; [`verdict::judge`] applies the acceptance rules.
//!
//! Window lifetime: registered when the attempt starts, deregistered when it ends (success,
//! failure, abort). Deregistration is the soft fabric's fence (it waits for an access in
//! progress and refuses every later one), so a late write after a failed GET cannot land —
//! stronger than re-keying one long-lived registration, which would also break the other
//! operations in flight on it.
//!
//! Fallback and learning ([`Fabric`]): `Auto` pairs once; an endpoint that refuses the connect
//! route (a plain S3 server, a gateway without fabric) is remembered as HTTP-only, so it costs
//! one round trip per worker, ever. An explicit `501` on an object request sends that request
//! over HTTP and re-pairs on the next one; a reply-less answer marks the endpoint plain
//! (`Auto`). `Soft` never stops trying RDMA (but still falls back per request); `Http` never
//! tries.

pub(crate) mod connect;
pub(crate) mod cuobject;
mod v2;
mod v2_wire;
pub(crate) mod verdict;

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::Signer;

pub use self::cuobject::{DcOp, DcTokenError, DcTokenProvider};
use self::verdict::Verdict;
use crate::fabric::soft::{
    Access, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QpState, QueuePair,
    SoftDevice, SoftPath,
};
use crate::inflight::{InFlight, OpKey, OpKind};

/// Which data path the engine uses for payloads (`EngineBuilder::fabric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Fabric {
    /// RDMA (soft fabric, `rc-persistent`) when the endpoint pairs, learned once per worker
    /// and endpoint; HTTP otherwise. Not the default yet: pairing is a blocking signed request
    /// on the worker thread (bounded by 5 s), so against an unresponsive endpoint it would hold
    /// up every operation of that worker. It becomes the default once pairing runs through the
    /// worker's event loop.
    Auto,
    /// Always try the soft fabric first (per-request HTTP fallback still applies).
    Soft,
    /// Payloads in the HTTP body only (the default).
    #[default]
    Http,
}

/// Which RDMA dialect the soft fabric speaks (`EngineBuilder::dialect`), used when the fabric is
/// `Soft` or `Auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// `rc-persistent`: one signed pairing per worker, then one HTTP round trip per op (the
    /// default; our gateway's fast path).
    #[default]
    RcPersistent,
    /// `hipobj-rc-v2` (protocols.md §4): PREPARE / READY on `/.hipobj-rc/` per op, a fresh QP
    /// each time: what the Ceph fork, versitygw, elbencho and the ROCm reference serve. Two
    /// round trips per op, run on the worker thread (bounded by the op's deadline).
    RcV2,
    /// cuObject (protocols.md §1, §2): one request per op carrying a DC descriptor minted by
    /// the provider set with `EngineBuilder::dc_token_provider` (without one, ops go over
    /// HTTP). Needs mlx5 DC hardware and a cuObject server; never exercised here beyond the
    /// wire (docs/engine.md).
    CuObject,
}

/// What the client knows about the endpoint.
#[derive(Debug)]
enum State {
    /// Not tried yet (or the pairing failed and may be retried).
    Unpaired,
    /// A paired connection.
    Paired(Box<Link>),
    /// The endpoint does not pair (Auto: for good).
    Plain,
    /// Unreachable on the last try: try again after this.
    RetryAt(Instant),
}

#[derive(Debug)]
struct Link {
    // Field order = drop order: the QP before the CQ and the device.
    qp: QueuePair,
    _cq: Arc<CompletionQueue>,
    pd: ProtectionDomain,
    _device: SoftDevice,
    session: String,
}

/// One operation's RDMA attempt.
#[derive(Debug)]
struct Attempt {
    /// The soft window (`None` for cuObject: the provider owns the registration).
    mr: Option<MemoryRegion>,
}

/// Headers to add to an attempt's request.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) headers: Vec<(String, String)>,
    /// The base64 CRC64NVME a PUT's answer is checked against.
    pub(crate) crc: Option<String>,
}

/// Client side of `rc-persistent` for one worker and endpoint.
#[derive(Debug)]
pub(crate) struct RdmaClient {
    mode: Fabric,
    addr: SocketAddr,
    endpoint: Endpoint,
    signer: Arc<Signer>,
    state: State,
    /// Attempts on the wire with an RDMA window.
    attempts: HashMap<OpKey, Attempt>,
    /// Ops whose next attempt must go over HTTP (after a decline).
    http_next: HashSet<OpKey>,
    /// Ops whose last attempt moved the bytes by RDMA (read by the completion path flag).
    moved: HashSet<OpKey>,
    /// Consecutive declines after (re-)pairing; beyond a few, Auto stops trying.
    declines: u32,
    dialect: Dialect,
    /// The hipobj-rc-v2 client's soft device (made on first use).
    v2: Option<v2::V2Device>,
    /// Mints cuObject descriptors (dialect `CuObject`).
    dc: Option<Arc<dyn cuobject::DcTokenProvider>>,
}

const MAX_DECLINES: u32 = 3;

impl RdmaClient {
    pub(crate) fn new(
        mode: Fabric,
        addr: SocketAddr,
        endpoint: Endpoint,
        signer: Arc<Signer>,
    ) -> Self {
        Self {
            mode,
            addr,
            endpoint,
            signer,
            state: if mode == Fabric::Http {
                State::Plain
            } else {
                State::Unpaired
            },
            attempts: HashMap::new(),
            http_next: HashSet::new(),
            moved: HashSet::new(),
            declines: 0,
            dialect: Dialect::RcPersistent,
            v2: None,
            dc: None,
        }
    }

    /// Speaks `dialect` instead of `rc-persistent`.
    pub(crate) fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The cuObject descriptor provider (dialect `CuObject`).
    pub(crate) fn with_dc_provider(
        mut self,
        dc: Option<Arc<dyn cuobject::DcTokenProvider>>,
    ) -> Self {
        self.dc = dc;
        self
    }

    fn local_ip(&self) -> Ipv4Addr {
        match self.addr.ip() {
            std::net::IpAddr::V4(ip) => ip,
            std::net::IpAddr::V6(_) => Ipv4Addr::LOCALHOST,
        }
    }

    /// Runs the whole hipobj-rc-v2 exchange for `op` (dialect `RcV2`), blocking the worker
    /// for at most the op's remaining time. `Some(outcome)`: the op ended (the bytes moved
    /// by RDMA, or it failed); `None`: send it over HTTP (another dialect, a non-data op, a
    /// server that declined v2, too little time left).
    pub(crate) fn exchange(
        &mut self,
        key: OpKey,
        op: &InFlight,
        now: s3_lite::sigv4::AmzDate,
    ) -> Option<super::Outcome> {
        self.moved.remove(&key);
        if self.dialect != Dialect::RcV2 || matches!(self.state, State::Plain) {
            return None;
        }
        if self.http_next.remove(&key) {
            return None;
        }
        let left = op.deadline.map_or(v2::LIMIT, |d| {
            d.saturating_duration_since(Instant::now()).min(v2::LIMIT)
        });
        if left < v2::MIN_LIMIT {
            return None;
        }
        let ip = self.local_ip();
        let dev = self.v2.get_or_insert_with(|| v2::V2Device::new(ip));
        let ctx = v2::Ctx {
            addr: self.addr,
            endpoint: &self.endpoint,
            signer: &self.signer,
            now,
            dev,
        };
        match v2::run(&ctx, op, Instant::now() + left)? {
            v2::Exchange::Done { bytes } => {
                self.moved.insert(key);
                Some(super::Outcome::Done { bytes, aux: 0 })
            }
            v2::Exchange::Fallback { learn } => {
                if learn && self.mode == Fabric::Auto {
                    self.state = State::Plain;
                }
                None
            }
            v2::Exchange::Failed(o) => Some(o),
        }
    }

    fn link(&mut self, now: s3_lite::sigv4::AmzDate, deadline: Option<Instant>) -> Option<&Link> {
        if let State::Paired(l) = &self.state
            && l.qp.state() == QpState::Err
        {
            self.state = State::Unpaired;
        }
        if let State::RetryAt(t) = self.state
            && Instant::now() >= t
        {
            self.state = State::Unpaired;
        }
        if matches!(self.state, State::Unpaired) {
            // Pairing blocks this worker: never longer than the op's remaining time (an op
            // with too little left goes over HTTP and keeps its deadline; pairing waits for a
            // later op).
            let limit = match deadline {
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(connect::LIMIT),
                None => connect::LIMIT,
            };
            if limit < connect::MIN_LIMIT {
                return None;
            }
            self.state = match self.pair(now, limit) {
                Ok(l) => State::Paired(Box::new(l)),
                Err(connect::ConnectError::Declined(_)) if self.mode == Fabric::Auto => {
                    State::Plain
                }
                Err(_) => State::RetryAt(Instant::now() + Duration::from_secs(5)),
            };
        }
        match &self.state {
            State::Paired(l) => Some(l),
            _ => None,
        }
    }

    fn pair(
        &self,
        now: s3_lite::sigv4::AmzDate,
        limit: Duration,
    ) -> Result<Link, connect::ConnectError> {
        let device = SoftDevice::new(self.local_ip());
        let pd = device.alloc_pd();
        let cq = device.create_cq();
        let qp = device.create_qp(&pd, &cq, &cq, QpCaps::default());
        let t = connect::ConnectError::Transport;
        qp.modify_to_init(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .map_err(|_| t.clone())?;
        let token = qp.local_token(None).map_err(|_| t.clone())?;
        let psn = loop {
            let p = rand::random::<u32>() & 0x00ff_ffff;
            if p != 0 {
                break p;
            }
        };
        let peer = connect::pair(
            self.addr,
            &self.endpoint,
            &self.signer,
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

    /// Sets up an RDMA attempt for `op` if the dialect applies: registers the op's buffer
    /// range as the window and returns the headers. `None`: send it over HTTP.
    pub(crate) fn prepare(
        &mut self,
        key: OpKey,
        op: &InFlight,
        now: s3_lite::sigv4::AmzDate,
    ) -> Option<Prepared> {
        self.moved.remove(&key);
        if !matches!(self.dialect, Dialect::RcPersistent | Dialect::CuObject) {
            return None;
        }
        if self.http_next.remove(&key) || matches!(self.state, State::Plain) {
            return None;
        }
        if !matches!(op.kind, OpKind::Get | OpKind::RangeGet { .. } | OpKind::Put) {
            return None;
        }
        if self.dialect == Dialect::CuObject {
            return self.prepare_dc(key, op);
        }
        let lease = op.buf.as_ref()?;
        let len = lease.len();
        let (ptr, n) = lease.raw_range()?;
        if n == 0 {
            return None;
        }
        let access = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        let link = self.link(now, op.deadline)?;
        // SAFETY: `ptr..ptr+n` is the op's leased range of a live engine registration: the
        // lease (held by `op` until its completion is staged) keeps the region's memory alive
        // and gives this op exclusive (GET) or shared read-only (PUT) use of the range; the
        // soft registration is deregistered in `finish` / `abort`, before the lease can be
        // released, so it never outlives the memory. The engine touches the bytes only
        // through the lease after completion.
        #[allow(unsafe_code)]
        let mr = unsafe { link.pd.register_raw(ptr, n, access) };
        let token = link.qp.local_token(Some((&mr, 0, len))).ok()?;
        let mut headers = vec![
            (s3_lite::rdma::RDMA_TOKEN.to_owned(), token.encode()),
            (s3_lite::rdma::RDMA_SESSION.to_owned(), link.session.clone()),
        ];
        let crc = (op.kind == OpKind::Put).then(|| {
            let mut c = Crc64Nvme::new();
            c.update(lease.bytes_from(0));
            encode_crc64nvme(c.finish())
        });
        if let Some(c) = &crc {
            headers.push(("x-amz-checksum-crc64nvme".to_owned(), c.clone()));
        }
        self.attempts.insert(key, Attempt { mr: Some(mr) });
        Some(Prepared { headers, crc })
    }

    /// cuObject: the provider's descriptor for the op's buffer range, as the standard
    /// single-request protocol's `x-amz-rdma-token` (PUTs add their CRC64NVME). No pairing:
    /// the descriptor names our DC target.
    fn prepare_dc(&mut self, key: OpKey, op: &InFlight) -> Option<Prepared> {
        let provider = self.dc.as_ref()?;
        let lease = op.buf.as_ref()?;
        let (ptr, n) = lease.raw_range()?;
        let len = u64::try_from(n).ok().filter(|&l| l > 0)?;
        let dir = if op.kind == OpKind::Put {
            cuobject::DcOp::Put
        } else {
            cuobject::DcOp::Get
        };
        let token =
            cuobject::mint_checked(provider.as_ref(), ptr.as_ptr().addr() as u64, len, dir).ok()?;
        let mut headers = vec![(s3_lite::rdma::RDMA_TOKEN.to_owned(), token)];
        let crc = (op.kind == OpKind::Put).then(|| {
            let mut c = Crc64Nvme::new();
            c.update(lease.bytes_from(0));
            encode_crc64nvme(c.finish())
        });
        if let Some(c) = &crc {
            headers.push(("x-amz-checksum-crc64nvme".to_owned(), c.clone()));
        }
        self.attempts.insert(key, Attempt { mr: None });
        Some(Prepared { headers, crc })
    }

    /// Learns from an attempt's verdict and ends its window. Called when the attempt ends.
    pub(crate) fn finish(&mut self, key: OpKey, verdict: Option<Verdict>, success: bool) {
        let Some(a) = self.attempts.remove(&key) else {
            return;
        };
        self.end_window(&a);
        match verdict {
            Some(Verdict::Rdma) if success => {
                self.moved.insert(key);
                self.declines = 0;
            }
            Some(Verdict::Declined) => {
                self.http_next.insert(key);
                self.declines += 1;
                // The server lost our connection (restart, failure): pair again next time,
                // unless it keeps declining.
                self.state = if self.mode == Fabric::Auto && self.declines > MAX_DECLINES {
                    State::Plain
                } else {
                    State::Unpaired
                };
            }
            Some(Verdict::Plain) => {
                self.http_next.insert(key);
                if self.mode == Fabric::Auto {
                    self.state = State::Plain;
                }
            }
            _ => {}
        }
        // Bounded by the ops in flight: stale entries of completed ops are dropped with them.
        if self.http_next.len() > 4096 {
            self.http_next.clear();
        }
    }

    /// Ends the window of an attempt being aborted (deadline, cancel): the connection is
    /// failed first, so an access in progress stops at once, then the window is closed.
    pub(crate) fn abort(&mut self, key: OpKey) {
        if let Some(a) = self.attempts.remove(&key) {
            if let State::Paired(l) = &self.state {
                l.qp.modify_to_err();
            }
            self.end_window(&a);
        }
    }

    fn end_window(&self, a: &Attempt) {
        let Some(mr) = &a.mr else {
            return;
        };
        if let State::Paired(l) = &self.state {
            let _ = l.pd.deregister(mr);
        } else {
            // The domain is gone with its link; deregistering through the region's own domain
            // handle is not possible then, but the link's QP (the only way in) is gone too.
            let _ = mr;
        }
    }

    /// Whether the op's last attempt moved its bytes by RDMA (consumes the mark).
    pub(crate) fn took_rdma(&mut self, key: OpKey) -> bool {
        self.moved.remove(&key)
    }
}
