//! The `hipobj-rc-v2` client exchange over the soft fabric (protocols.md §4), blocking.
//!
//! Per GET / RangeGet / PUT: a fresh QP (INIT) and CQ on the client's soft device, a random
//! 24-bit PSN and 32-bit cookie (both non-zero), the op's buffer range registered as the
//! window; signed `POST /.hipobj-rc/prepare`; the QP connected to the session's QP
//! (`rq_psn` = server PSN, `sq_psn` = ours); GET posts the RECV for the completing
//! WRITE_WITH_IMM before READY; signed `POST /.hipobj-rc/ready`; PUT then posts one
//! WRITE_WITH_IMM of the whole payload into the staging window (imm = cookie); the READY
//! answer (FINAL) is judged by [`v2_wire::judge_final`], our completion must agree, and the
//! checksums the FINAL carries (either generation) must match the bytes we hold.
//!
//! PUT grace: the hipObject client sleeps ~100 ms before its write because the ROCm reference
//! server posts its RECV only inside READY. Not needed here: our gateway (like Ceph) posts the
//! RECV at PREPARE, and a soft responder without a RECV waits up to its `rnr_wait` (2 s) for
//! one instead of failing, which covers a server posting it late.
//!
//! Limitation: the two round trips run on the worker thread (like `rc-persistent` pairing), so
//! while one op's exchange runs, the worker's other ops wait. Everything is bounded by the op's
//! remaining deadline (at most [`LIMIT`] without one); any failure after a session id was
//! published sends one CANCEL, bounded by [`CANCEL_BUDGET`] and the remaining time.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::Request;
use s3_lite::http::{BodyFraming, ResponseHead, encode_request_head};
use s3_lite::rdma::v2::{self, Target};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

use super::connect::read_head_until;
use super::v2_wire::{self, Ask, FinalError, PrepareAnswer};
use crate::fabric::http::response::status_outcome;
use crate::fabric::soft::{
    Access, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QueuePair, RecvWr, RemoteAddr,
    RtrAttr, RtsAttr, SendOp, SendWr, Sge, SoftDevice, SoftPath, WcOpcode, WcStatus,
    WorkCompletion,
};
use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};

/// The longest one exchange may block its worker when the op has no deadline.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);
/// Below this much time left, an op does not try v2 (it goes over HTTP).
pub(crate) const MIN_LIMIT: Duration = Duration::from_millis(20);
/// The most one CANCEL may take (the hipObject client's 1 s).
pub(crate) const CANCEL_BUDGET: Duration = Duration::from_secs(1);

/// How an exchange ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// The bytes moved by RDMA and every check passed.
    Done { bytes: u64 },
    /// Send this request over HTTP; `learn`: the endpoint does not do v2 over this fabric.
    Fallback { learn: bool },
    /// The op failed (the outcome says how and whether to retry).
    Failed(Outcome),
}

/// The client's soft device and domain (one per worker and endpoint, made on first use).
#[derive(Debug)]
pub(crate) struct V2Device {
    pd: ProtectionDomain,
    device: SoftDevice,
}

impl V2Device {
    pub(crate) fn new(ip: std::net::Ipv4Addr) -> Self {
        let device = SoftDevice::new(ip);
        Self {
            pd: device.alloc_pd(),
            device,
        }
    }
}

/// Where and as whom the exchange runs.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    pub(crate) addr: SocketAddr,
    pub(crate) endpoint: &'a Endpoint,
    pub(crate) signer: &'a Signer,
    pub(crate) now: AmzDate,
    pub(crate) dev: &'a V2Device,
}

const fn fail(code: ErrorCode, class: ErrorClass, retry: Retry) -> Exchange {
    Exchange::Failed(Outcome::fail(code, class, retry))
}

const TRANSPORT: Exchange = Exchange::Failed(Outcome::transport(false));
const TIMED_OUT: Exchange = fail(ErrorCode::TimedOut, ErrorClass::Transport, Retry::Yes);

/// One op's QP, CQ and window; dropping it fails the QP (stopping any access in progress)
/// and deregisters the window (the fabric's fence: no later access can land).
struct Wire<'a> {
    qp: QueuePair,
    cq: std::sync::Arc<CompletionQueue>,
    mr: MemoryRegion,
    pd: &'a ProtectionDomain,
}

impl Drop for Wire<'_> {
    fn drop(&mut self) {
        self.qp.modify_to_err();
        let _ = self.pd.deregister(&self.mr);
    }
}

fn nonzero(mask: u32) -> u32 {
    loop {
        let v = rand::random::<u32>() & mask;
        if v != 0 {
            return v;
        }
    }
}

/// Runs the exchange for `op` before `end`. `None`: v2 does not apply to this op.
pub(crate) fn run(ctx: &Ctx<'_>, op: &InFlight, end: Instant) -> Option<Exchange> {
    let (v2op, offset, exact) = match op.kind {
        OpKind::Get => (v2::Op::Get, 0, false),
        OpKind::RangeGet { offset } => (v2::Op::Get, offset, true),
        OpKind::Put => (v2::Op::Put, 0, true),
        OpKind::Head => return None,
    };
    let lease = op.buf.as_ref()?;
    let size = lease.len();
    let (ptr, n) = lease.raw_range()?;
    if size == 0 || size > v2::MAX_SIZE || n as u64 != size {
        return None;
    }
    let (qp_access, mr_access) = match v2op {
        v2::Op::Get => (
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        ),
        v2::Op::Put => (Access::NONE, Access::LOCAL_WRITE),
    };
    let cq = ctx.dev.device.create_cq();
    let qp = ctx
        .dev
        .device
        .create_qp(&ctx.dev.pd, &cq, &cq, QpCaps::default());
    // SAFETY: `ptr..ptr+n` is the op's leased range of a live engine registration; the lease
    // (held by `op` for the whole synchronous call) keeps the memory alive and gives this op
    // exclusive (GET) or shared read-only (PUT) use of it. `Wire`'s drop deregisters the
    // window before this function returns, so the registration never outlives the lease, and
    // the engine touches the bytes (the checksum below) only after that.
    #[allow(unsafe_code)]
    let mr = unsafe { ctx.dev.pd.register_raw(ptr, n, mr_access) };
    let wire = Wire {
        qp,
        cq,
        mr,
        pd: &ctx.dev.pd,
    };
    if wire.qp.modify_to_init(qp_access).is_err() {
        return Some(TRANSPORT);
    }
    let token = match wire.qp.local_token(None) {
        Ok(t) => t,
        Err(_) => return Some(TRANSPORT),
    };
    let ask = Ask {
        token,
        psn: nonzero(0x00ff_ffff),
        cookie: nonzero(u32::MAX),
        op: v2op,
        target: Target::new(&*op.object.bucket, &*op.object.key).encode(),
        size,
        offset,
    };
    let out = exchange(ctx, &wire, &ask, exact, end);
    // Fence the window before anyone reads the buffer.
    drop(wire);
    Some(match out {
        Ok(Checked::Done {
            bytes,
            sums,
            session,
        }) => {
            let data = lease.bytes_from(0);
            let ok = usize::try_from(bytes)
                .ok()
                .and_then(|b| data.get(..b))
                .is_some_and(|d| v2_wire::checksums_match(&sums, d));
            if ok {
                Exchange::Done { bytes }
            } else {
                cancel(ctx, &session, end);
                fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No)
            }
        }
        Ok(Checked::Other(x)) => x,
        Err((x, session)) => {
            if let Some(s) = session {
                cancel(ctx, &s, end);
            }
            x
        }
    })
}

/// A successful FINAL (before the checksum check) or an outcome that needs no CANCEL.
enum Checked {
    Done {
        bytes: u64,
        sums: v2::RdmaChecksums,
        session: String,
    },
    Other(Exchange),
}

type Failure = (Exchange, Option<String>);

fn left(end: Instant) -> Option<Duration> {
    let d = end.saturating_duration_since(Instant::now());
    (!d.is_zero()).then_some(d)
}

/// PREPARE … FINAL. An `Err` names the session to cancel.
fn exchange(
    ctx: &Ctx<'_>,
    w: &Wire<'_>,
    ask: &Ask,
    exact: bool,
    end: Instant,
) -> Result<Checked, Failure> {
    let Some(headers) = v2_wire::prepare_headers(ask) else {
        return Err((TRANSPORT, None));
    };
    let Some(t) = left(end) else {
        return Err((TIMED_OUT, None));
    };
    let mut s = TcpStream::connect_timeout(&ctx.addr, t).map_err(|_| (TRANSPORT, None))?;
    let _ = s.set_nodelay(true);
    let head = call(ctx, &mut s, v2::PREPARE_PATH, &headers, end).map_err(|x| (x, None))?;
    let g = match v2_wire::prepare_answer(&head, ask.op) {
        PrepareAnswer::Granted(g) => g,
        PrepareAnswer::Unsupported { learn } => {
            return Ok(Checked::Other(Exchange::Fallback { learn }));
        }
        PrepareAnswer::Unusable { session, learn } => {
            if let Some(sid) = session {
                cancel(ctx, &sid, end);
            }
            return Ok(Checked::Other(Exchange::Fallback { learn }));
        }
    };
    let sid = Some(g.session.clone());
    let Some(t) = left(end) else {
        return Err((TIMED_OUT, sid));
    };
    let mut rtr = RtrAttr::from_token(&g.token, g.psn, SoftPath::Connect(g.soft_addr));
    rtr.connect_timeout = t;
    if w.qp.modify_to_rtr(&rtr).is_err() || w.qp.modify_to_rts(&RtsAttr::new(ask.psn)).is_err() {
        return Err((TRANSPORT, sid));
    }
    let window = match ask.op {
        v2::Op::Get => {
            if w.qp
                .post_recv(&RecvWr {
                    wr_id: 1,
                    sge: None,
                })
                .is_err()
            {
                return Err((TRANSPORT, sid));
            }
            Some((w.mr.addr(), w.mr.rkey()))
        }
        v2::Op::Put => None,
    };
    let ready = v2_wire::ready_headers(&g.session, ask.cookie, ask.token.qpn, window);
    send(ctx, &mut s, v2::READY_PATH, &ready, end).map_err(|x| (x, sid.clone()))?;
    if ask.op == v2::Op::Put {
        let (Some((addr, rkey)), Ok(len)) = (g.staging, u32::try_from(ask.size)) else {
            return Err((TRANSPORT, sid));
        };
        let sge = Sge {
            addr: w.mr.addr(),
            length: len,
            lkey: w.mr.lkey(),
        };
        let wr = SendWr::new(
            1,
            SendOp::WriteWithImm(RemoteAddr { addr, rkey }, ask.cookie),
            sge,
        );
        if w.qp.post_send(&wr).is_err() {
            return Err((TRANSPORT, sid));
        }
    }
    let head = read_head_until(&mut s, end).map_err(|()| (timed_or_transport(end), sid.clone()))?;
    let fin = match v2_wire::judge_final(&head, ask.op == v2::Op::Put, ask.cookie, ask.size, exact)
    {
        Ok(f) => f,
        Err(e) => return Err((final_failure(&e), sid)),
    };
    // Our side must agree: the completing write's IMM (GET) or our write's success (PUT).
    let wc = wait_one(&w.cq, end).ok_or((timed_or_transport(end), sid.clone()))?;
    let ours = wc.status == WcStatus::Success
        && match ask.op {
            v2::Op::Get => {
                wc.opcode == WcOpcode::RecvRdmaWithImm && wc.imm_data == Some(ask.cookie)
            }
            v2::Op::Put => true,
        };
    if !ours {
        return Err((
            fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No),
            sid,
        ));
    }
    Ok(Checked::Done {
        bytes: fin.bytes,
        sums: fin.sums,
        session: g.session,
    })
}

fn timed_or_transport(end: Instant) -> Exchange {
    if left(end).is_none() {
        TIMED_OUT
    } else {
        TRANSPORT
    }
}

fn final_failure(e: &FinalError) -> Exchange {
    match e {
        FinalError::Status(s) => Exchange::Failed(status_outcome(*s)),
        FinalError::Protocol => fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No),
        FinalError::Integrity => fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No),
    }
}

/// Waits for one completion before `end`.
fn wait_one(cq: &CompletionQueue, end: Instant) -> Option<WorkCompletion> {
    let mut w = [WorkCompletion::default(); 1];
    loop {
        if cq.poll(&mut w) == 1 {
            return w.first().copied();
        }
        let t = left(end)?;
        cq.wait(t.min(Duration::from_millis(50)));
    }
}

/// Signs and writes one body-less POST on `s`.
fn send(
    ctx: &Ctx<'_>,
    s: &mut TcpStream,
    path: &str,
    headers: &[(String, String)],
    end: Instant,
) -> Result<(), Exchange> {
    let mut req = Request::new("POST", path);
    req.add_header("Host", ctx.endpoint.host_header(None));
    for (n, v) in headers {
        req.add_header(n.as_str(), v.clone());
    }
    req.add_header("Content-Length", "0");
    ctx.signer
        .sign_headers(&mut req, &PayloadHash::Unsigned, ctx.now)
        .map_err(|_| TRANSPORT)?;
    let mut wire = Vec::new();
    encode_request_head(&req, BodyFraming::None, &mut wire).map_err(|_| TRANSPORT)?;
    let t = left(end).ok_or(TIMED_OUT)?;
    s.set_write_timeout(Some(t)).map_err(|_| TRANSPORT)?;
    s.write_all(&wire).map_err(|_| timed_or_transport(end))
}

/// [`send`], then reads the answer's head.
fn call(
    ctx: &Ctx<'_>,
    s: &mut TcpStream,
    path: &str,
    headers: &[(String, String)],
    end: Instant,
) -> Result<ResponseHead, Exchange> {
    send(ctx, s, path, headers, end)?;
    read_head_until(s, end).map_err(|()| timed_or_transport(end))
}

/// One CANCEL on a fresh connection (the exchange's may be mid-answer), bounded by
/// [`CANCEL_BUDGET`] and `end`; its outcome does not matter (the session also expires).
fn cancel(ctx: &Ctx<'_>, session: &str, end: Instant) {
    let end = end.min(Instant::now() + CANCEL_BUDGET);
    let Some(t) = left(end) else {
        return;
    };
    if let Ok(mut s) = TcpStream::connect_timeout(&ctx.addr, t) {
        let _ = s.set_nodelay(true);
        let _ = call(
            ctx,
            &mut s,
            v2::CANCEL_PATH,
            &v2_wire::cancel_headers(session),
            end,
        );
    }
}
