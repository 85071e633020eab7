//! hipobj-rc-v2 over either fabric (`engine::rc`; docs/protocol.md, hipobj-rc-v2): `POST /.hipobj-rc/prepare
//! | ready | cancel`.
//!
//! PREPARE creates a single-use session owned by the signing access key: its own protection
//! domain, QP and a staging region of exactly `size` bytes (so no other session can ever reach
//! it, closing the risk of a staging region pooled across sessions). The gateway's QP is taken to RTS at PREPARE
//! towards the QPN in the client's token (on the soft fabric the client dials
//! `x-amz-rdma-soft-addr` when it takes its own QP to RTR; on verbs the token's GID is the
//! path); READY must name that same QPN. A PREPARE naming the other fabric in
//! `x-amz-rdma-fabric` is declined `501` (unsupported). GET: at READY the object range is read
//! into staging, then RDMA-WRITTEN to the client's `mr-addr`/`mr-rkey` in ≤ 1 MiB pieces, the
//! last one a WRITE_WITH_IMM carrying the cookie. PUT: a RECV is posted at PREPARE (as Ceph
//! does), READY waits for the client's WRITE_WITH_IMM into staging (IMM = cookie, length =
//! size), then stores the bytes through the normal PUT pipeline (spool, digests, backend).
//! READY is answered only after the data phase (the FINAL answer); the session ends either way.
//! PREPARE and FINAL answers carry `x-amz-rdma-capabilities: mp` (multipart over v2 served).
//!
//! Status codes: wrong/missing protocol on PREPARE → 501 + `X-Amz-Rdma-Protocol-Status:
//! unsupported`; malformed → 400; a token this device cannot pair with (no local GID of the
//! token GID's family, RTR towards it refused) → 400 naming the cause; unknown session, another principal's session or a wrong
//! cookie → 404 `NoSuchRdmaSession` (nothing touched); READY while a transfer runs → 409
//! `RdmaTransferInProgress`; size above the limit → 413; full → 503 `SlowDown`; transfer
//! timeout → 408; wire failure → 500. CANCEL always answers 204 and acts only for the owner: it
//! ends a prepared session, and stops the data phase of one whose READY is being served (that
//! READY answers 409 `RdmaSessionCancelled` and frees the session's place at once, instead of
//! waiting out the transfer bound for a client that has gone).

mod data;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use engine::rc::{Access, RcCaps, RcCq, RcDevice, RcMr, RcPd, RcQp, RecvWr, RemoteAddr, SoftPath};
use s3_lite::checksum::encode_crc64nvme;
use s3_lite::http::BodyFraming;
use s3_lite::http::server::RequestHead;
use s3_lite::rdma::v2::{self, Cookie, Op, Psn, SessionId, Target, TargetQuery, V2Error};
use s3_lite::rdma::{RcToken, Transport};

use crate::backend::Backend;
use crate::error::ApiError;
use crate::handler::Respond;

/// Bounds of the v2 service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V2Limits {
    /// Sessions at once (prepared or transferring).
    pub max_sessions: usize,
    /// Sessions at once per access key.
    pub max_per_principal: usize,
    /// Largest `x-amz-rdma-size`. Each session's staging is allocated at PREPARE at its
    /// exact size, so `max_sessions × max_size` bounds the staging memory (2 GiB by default,
    /// touched only as far as transfers actually write).
    pub max_size: u64,
    /// A prepared session not made READY within this is dropped.
    pub prepare_ttl: Duration,
    /// The data phase of one READY.
    pub transfer: Duration,
}

impl Default for V2Limits {
    fn default() -> Self {
        Self {
            max_sessions: 32,
            max_per_principal: 8,
            max_size: 64 << 20,
            prepare_ttl: Duration::from_secs(10),
            transfer: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Prepared,
    Busy,
}

#[derive(Debug)]
struct Session {
    // Drop order: the QP before its CQ, the staging region before its domain.
    qp: RcQp,
    cq: RcCq,
    /// Always `Some` until `Drop` deregisters it.
    staging: Option<RcMr>,
    pd: RcPd,
    principal: String,
    cookie: u32,
    op: Op,
    bucket: String,
    key: String,
    /// `(upload id, part number)` of an UploadPart PUT.
    part: Option<(String, u32)>,
    size: u64,
    offset: u64,
    client_qpn: u32,
    created: Instant,
    phase: Mutex<Phase>,
    /// The owner cancelled the session while its READY was being served: the data phase
    /// stops at its next turn (a PUT no longer waits for a write its client abandoned).
    cancelled: AtomicBool,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.qp.modify_to_err();
        if let Some(mr) = self.staging.take() {
            let _ = self.pd.deregister(mr);
        }
    }
}

impl Session {
    fn staging(&self) -> Result<&RcMr, ApiError> {
        self.staging
            .as_ref()
            .ok_or_else(|| ApiError::internal("session staging already released"))
    }
}

/// The v2 session table of an RDMA target.
#[derive(Debug)]
pub struct RcV2 {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    device: RcDevice,
    /// The soft listener clients dial (soft fabric only).
    soft_addr: Option<SocketAddr>,
    limits: V2Limits,
}

use s3_lite::rdma::RDMA_PROTOCOL as PROTO;
use s3_lite::rdma::{
    RDMA_CHECKSUM, RDMA_CHECKSUM_CRC64NVME, RDMA_COOKIE, RDMA_ETAG, RDMA_MR_ADDR, RDMA_MR_RKEY,
    RDMA_OFFSET, RDMA_OP, RDMA_SIZE, RDMA_TARGET,
};
/// Completion-queue entries of a session (≤ 64 one-MiB WRITEs of a GET, or one RECV).
const CQ_DEPTH: u32 = 128;

fn unsupported(why: impl Into<String>) -> ApiError {
    let mut e = ApiError::not_implemented(why);
    e.headers.push((
        s3_lite::rdma::RDMA_PROTOCOL_STATUS.to_owned(),
        s3_lite::rdma::PROTOCOL_STATUS_UNSUPPORTED.to_owned(),
    ));
    e
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(400, "InvalidArgument", e.to_string())
}

fn no_session() -> ApiError {
    ApiError::new(
        404,
        "NoSuchRdmaSession",
        "The RDMA session does not exist or has ended.",
    )
}

fn field<'a>(head: &'a RequestHead, name: &str) -> Result<&'a str, ApiError> {
    head.header(name)
        .map(str::trim)
        .ok_or_else(|| bad(format!("{name} is required")))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RcV2 {
    /// A v2 service whose sessions' QPs live on `device` (soft clients dial `soft_addr`).
    pub fn new(device: RcDevice, soft_addr: Option<SocketAddr>, limits: V2Limits) -> Self {
        Self {
            sessions: Mutex::new(HashMap::new()),
            device,
            soft_addr,
            limits,
        }
    }

    /// Sessions alive (for tests and metrics).
    pub fn sessions(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// Serves one request on a `/.hipobj-rc/` route (already authenticated as `principal`).
    pub fn handle(
        &self,
        backend: &dyn Backend,
        head: &RequestHead,
        principal: &str,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        if head.method != "POST" {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "The specified method is not allowed against this resource.",
            ));
        }
        match head.path.as_str() {
            v2::PREPARE_PATH => self.prepare(backend, head, principal, out),
            v2::READY_PATH => self.ready(backend, head, principal, out),
            v2::CANCEL_PATH => self.cancel(head, principal, out),
            _ => Err(ApiError::new(404, "NoSuchKey", "Unknown hipobj-rc route.")),
        }
    }

    fn prepare(
        &self,
        backend: &dyn Backend,
        head: &RequestHead,
        principal: &str,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        v2::check_protocol(head.header(PROTO).map(str::trim)).map_err(unsupported_of)?;
        if let Some(theirs) = head.header(super::FABRIC_HEADER)
            && engine::rc::RcKind::parse(theirs) != Some(self.device.kind())
        {
            return Err(unsupported(format!(
                "this gateway's RDMA fabric is {}, the client's QP is {:?}",
                self.device.kind().as_str(),
                theirs.trim()
            )));
        }
        let tok = field(head, s3_lite::rdma::RDMA_TOKEN)?;
        let client = RcToken::decode(tok.split(':').next().unwrap_or_default()).map_err(bad)?;
        if client.transport != Transport::Rc || client.qpn == 0 || client.gid == [0; 16] {
            return Err(bad(format!(
                "{} must be an RC token with a QPN and a GID",
                s3_lite::rdma::RDMA_TOKEN
            )));
        }
        let client_psn = Psn::parse(field(head, s3_lite::rdma::RDMA_PSN)?).map_err(bad)?;
        let cookie = Cookie::parse_strict(field(head, RDMA_COOKIE)?).map_err(bad)?;
        let op = Op::parse(field(head, RDMA_OP)?).map_err(bad)?;
        let target = Target::parse(op, field(head, RDMA_TARGET)?).map_err(bad)?;
        // Multipart over RC as versitygw serves it: a PUT target may name one part.
        let part = match &target.query {
            TargetQuery::None => None,
            TargetQuery::Part {
                upload_id,
                part_number,
            } if op == Op::Put => Some((upload_id.clone(), u32::from(*part_number))),
            _ => {
                return Err(unsupported(
                    "versioned GETs are not served over hipobj-rc-v2 here",
                ));
            }
        };
        let size = match v2::parse_size(field(head, RDMA_SIZE)?) {
            Ok(n) => n,
            Err(V2Error::TooLarge) => return Err(too_large()),
            Err(e) => return Err(bad(e)),
        };
        if size > self.limits.max_size {
            return Err(too_large());
        }
        let offset = v2::parse_offset(head.header(RDMA_OFFSET).map(str::trim)).map_err(bad)?;
        if op == Op::Put && offset != 0 {
            return Err(bad(format!("{RDMA_OFFSET} must be 0 for PUT")));
        }
        offset
            .checked_add(size)
            .ok_or_else(|| bad(format!("{RDMA_OFFSET} + size overflows")))?;
        if op == Op::Get {
            // A GET of what is not there is refused now (404 NoSuchKey / NoSuchBucket, as
            // third-party v2 servers do), before a session, QP or registration is made; the
            // READY reads the object again, so one replaced in between is still served whole.
            // The protocol echo says "this server speaks v2, this object is missing": a client
            // must not take the 404 for a server without the routes (and stop trying v2).
            crate::ops::parts::stat(backend, &target.bucket, &target.key)
                .map_err(|e| e.with_header(PROTO, v2::PROTOCOL))?;
        }
        {
            let mut s = lock(&self.sessions);
            let ttl = self.limits.prepare_ttl;
            s.retain(|_, x| *lock(&x.phase) == Phase::Busy || x.created.elapsed() < ttl);
            if s.len() >= self.limits.max_sessions
                || s.values().filter(|x| x.principal == principal).count()
                    >= self.limits.max_per_principal
            {
                return Err(ApiError::slow_down());
            }
        }
        let fail = |e: engine::rc::RcError| super::qp_failure(&e);
        let pd = self.device.alloc_pd().map_err(fail)?;
        let cq = self.device.create_cq(CQ_DEPTH).map_err(fail)?;
        // The source GID is chosen per peer: one of the family of the client's token GID
        // (docs/verbs.md, GID choice), so a link-local client pairs with a link-local GID.
        let qp = self
            .device
            .create_qp_toward(&pd, &cq, &cq, RcCaps::default(), Some(&client.gid))
            .map_err(fail)?;
        let (qp_access, mr_access) = match op {
            Op::Get => (Access::NONE, Access::LOCAL_WRITE),
            Op::Put => (
                Access::REMOTE_WRITE,
                Access::REMOTE_WRITE | Access::LOCAL_WRITE,
            ),
        };
        qp.modify_to_init(qp_access).map_err(fail)?;
        let len = usize::try_from(size).map_err(|_| too_large())?;
        let staging = pd.register_owned(len.max(1), mr_access).map_err(fail)?;
        if op == Op::Put {
            qp.post_recv(&RecvWr {
                wr_id: 1,
                sge: None,
            })
            .map_err(|e| ApiError::internal(format!("RECV: {e}")))?;
        }
        let psn = engine::rc::random_psn();
        // Soft: the client dials our listener (within the default 10 s); verbs: the token's
        // GID is the path.
        let path = self.soft_addr.map(|_| SoftPath::Accept);
        qp.connect(&client, client_psn.get(), psn, path)
            .map_err(fail)?;
        let window = (op == Op::Put).then_some((&staging, 0, size));
        let token = qp.local_token(window).map_err(fail)?;
        let id = SessionId(rand::random::<[u8; 16]>()).encode();
        let mut headers = vec![
            (PROTO.to_owned(), v2::PROTOCOL.to_owned()),
            (
                s3_lite::rdma::RDMA_REPLY.to_owned(),
                format!("200:{}", token.encode()),
            ),
            (s3_lite::rdma::RDMA_SESSION.to_owned(), id.clone()),
            (
                s3_lite::rdma::RDMA_PSN.to_owned(),
                Psn::new(psn).map_err(ApiError::internal)?.encode(),
            ),
            (
                s3_lite::rdma::RDMA_QPN.to_owned(),
                v2::encode_hex(u64::from(token.qpn)),
            ),
            (
                super::FABRIC_HEADER.to_owned(),
                self.device.kind().as_str().to_owned(),
            ),
            capabilities(),
        ];
        if let Some(a) = self.soft_addr {
            headers.push((
                s3_lite::rdma::pairing::RDMA_SOFT_ADDR.to_owned(),
                a.to_string(),
            ));
        }
        if op == Op::Put {
            headers.push((RDMA_MR_ADDR.into(), v2::encode_hex(staging.addr())));
            headers.push((
                RDMA_MR_RKEY.into(),
                v2::encode_hex(u64::from(staging.rkey())),
            ));
        }
        let session = Arc::new(Session {
            qp,
            cq,
            staging: Some(staging),
            pd,
            principal: principal.to_owned(),
            cookie: cookie.0,
            op,
            bucket: target.bucket,
            key: target.key,
            part,
            size,
            offset,
            client_qpn: client.qpn,
            created: Instant::now(),
            phase: Mutex::new(Phase::Prepared),
            cancelled: AtomicBool::new(false),
        });
        lock(&self.sessions).insert(id, session);
        out.head(200, headers, BodyFraming::Length(0))?;
        Ok(())
    }

    /// The caller's session named by the request (another principal's is "no such session").
    fn lookup(
        &self,
        head: &RequestHead,
        principal: &str,
    ) -> Result<(String, Arc<Session>), ApiError> {
        let id = SessionId::parse(field(head, s3_lite::rdma::RDMA_SESSION)?)
            .map_err(bad)?
            .encode();
        let s = lock(&self.sessions)
            .get(&id)
            .cloned()
            .ok_or_else(no_session)?;
        if s.principal != principal {
            return Err(no_session());
        }
        Ok((id, s))
    }

    fn ready(
        &self,
        backend: &dyn Backend,
        head: &RequestHead,
        principal: &str,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        v2::check_protocol(head.header(PROTO).map(str::trim)).map_err(bad)?;
        let (id, s) = self.lookup(head, principal)?;
        let cookie = Cookie::parse_lenient(field(head, RDMA_COOKIE)?).map_err(bad)?;
        if cookie.0 != s.cookie {
            return Err(no_session());
        }
        let qpn = v2::parse_qpn(field(head, s3_lite::rdma::RDMA_QPN)?).map_err(bad)?;
        if qpn != s.client_qpn {
            return Err(bad(format!(
                "{} differs from the PREPARE token's QPN",
                s3_lite::rdma::RDMA_QPN
            )));
        }
        let remote = match s.op {
            Op::Get => Some(RemoteAddr {
                addr: v2::parse_mr_addr(field(head, RDMA_MR_ADDR)?).map_err(bad)?,
                rkey: v2::parse_mr_rkey(field(head, RDMA_MR_RKEY)?).map_err(bad)?,
            }),
            Op::Put => None,
        };
        {
            let mut p = lock(&s.phase);
            if *p == Phase::Busy {
                return Err(ApiError::new(
                    409,
                    "RdmaTransferInProgress",
                    "A READY for this session is already being served.",
                ));
            }
            *p = Phase::Busy;
        }
        // Single use: the session ends with this READY, whatever its outcome.
        let result = match remote {
            Some(r) => self.ready_get(backend, &s, r),
            None => self.ready_put(backend, &s),
        };
        lock(&self.sessions).remove(&id);
        let (n, crc, etag) = result?;
        let crc = encode_crc64nvme(crc);
        let headers = vec![
            (PROTO.to_owned(), v2::PROTOCOL.to_owned()),
            (RDMA_COOKIE.to_owned(), Cookie(s.cookie).encode()),
            (
                s3_lite::rdma::RDMA_BYTES_TRANSFERRED.to_owned(),
                n.to_string(),
            ),
            (RDMA_CHECKSUM_CRC64NVME.to_owned(), crc.clone()),
            (RDMA_CHECKSUM.to_owned(), format!("CRC64NVME {crc}")),
            (RDMA_ETAG.to_owned(), etag.clone()),
            ("ETag".to_owned(), etag),
            capabilities(),
        ];
        out.head(200, headers, BodyFraming::Length(0))?;
        Ok(())
    }

    fn cancel(
        &self,
        head: &RequestHead,
        principal: &str,
        out: &mut dyn Respond,
    ) -> Result<(), ApiError> {
        v2::check_protocol(head.header(PROTO).map(str::trim)).map_err(bad)?;
        // Idempotent and not a probe: 204 whatever the session; only the owner's session is
        // actually ended. An idle one ends here; one whose READY is being served stops its data
        // phase at the next turn (its client gave up on it: a PUT's write will not come, a GET's
        // window is gone), and its READY then frees its place.
        if let Ok((id, s)) = self.lookup(head, principal) {
            if *lock(&s.phase) == Phase::Prepared {
                lock(&self.sessions).remove(&id);
            } else {
                s.cancelled.store(true, Ordering::Release);
            }
        }
        out.head(204, Vec::new(), BodyFraming::None)?;
        Ok(())
    }
}

/// `x-amz-rdma-capabilities: mp`: this gateway serves UploadPart over v2 (a PUT target naming
/// `?uploadId=…&partNumber=N`), sent on PREPARE and FINAL answers (versitygw sends it on FINAL
/// only; a client must not send parts over v2 to a server that never says it).
pub fn capabilities() -> (String, String) {
    (
        s3_lite::rdma::RDMA_CAPABILITIES.to_owned(),
        v2::CAPABILITY_MULTIPART.to_owned(),
    )
}

fn too_large() -> ApiError {
    ApiError::new(
        413,
        "EntityTooLarge",
        format!("{RDMA_SIZE} exceeds this gateway's session limit"),
    )
}

fn unsupported_of(e: V2Error) -> ApiError {
    unsupported(e.to_string())
}
