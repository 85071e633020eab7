//! The `hipobj-rc-v2` client exchange over either RC fabric (docs/protocol.md, hipobj-rc-v2), on an exchange
//! thread of its own per op (never the worker thread).
//!
//! Per GET / RangeGet / PUT / UploadPart (a PUT whose target names the part, as versitygw
//! serves multipart over RC): a fresh QP (INIT) and CQ on the client's device, a random
//! 24-bit PSN and 32-bit cookie (both non-zero), the op's buffer range registered as the
//! window; signed `POST /.hipobj-rc/prepare`; the QP connected to the session's QP
//! (`rq_psn` = server PSN, `sq_psn` = ours); GET posts the RECV for the completing
//! WRITE_WITH_IMM before READY; signed `POST /.hipobj-rc/ready`; PUT then posts one
//! WRITE_WITH_IMM of the whole payload into the staging window (imm = cookie); the READY
//! answer (FINAL) is judged by `s3_lite::rdma::v2::client::judge_final`, our completion must agree, and the
//! checksums the FINAL carries (either generation) must match the bytes we hold.
//!
//! PUT grace: the hipObject client sleeps ~100 ms before its write because the ROCm reference
//! server posts its RECV only inside READY. Not needed here: our gateway (like Ceph) posts the
//! RECV at PREPARE, and a soft responder without a RECV waits up to its `rnr_wait` (2 s) for
//! one instead of failing, which covers a server posting it late.
//!
//! Threads and the window ([`launch`]): the QP, CQ and window are made on the worker, which
//! keeps a [`Fence`] on them; everything that blocks (the two round trips, the data phase, the
//! checksum of the bytes through the window, a CANCEL) runs on the exchange thread, which
//! deregisters the window before it reports ([`Finished`], through `offload`). An abort
//! (deadline, cancel, attempt timeout) closes the fence on the worker: the window is
//! deregistered — which waits for an access in progress and refuses every later one — and the
//! exchange's socket is shut down, so after `abort` returns no byte of the op's buffer is
//! touched, and the thread ends at its next step. Everything is bounded by the op's remaining
//! deadline (at most [`LIMIT`] without one); any failure after a session id was published
//! sends one CANCEL, bounded by [`CANCEL_BUDGET`] and the remaining time.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ring_api::{ErrorClass, ErrorCode};
use s3_lite::Request;
use s3_lite::http::{Exchange as HttpExchange, Limits, ResponseHead};
use s3_lite::net::blocking::until;
use s3_lite::rdma::v2::{self, Target};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

use super::connect::{read_answer_until, read_head_until};
use super::learned::{self, Learned};
use crate::fabric::http::response::status_outcome;
use crate::fabric::rc::{
    Access, RcCaps, RcCq, RcDevice, RcError, RcKind, RcMr, RcPd, RcQp, RecvWr, RemoteAddr, SendOp,
    SendWr, Sge, SoftPath, WcOpcode, WcStatus, WorkCompletion,
};
use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};
use s3_lite::rdma::v2::client::{self as v2_client, Ask, FinalError, PrepareAnswer};

/// The longest one exchange may run when the op has no deadline.
pub(crate) const LIMIT: Duration = Duration::from_secs(30);
/// Below this much time left, an op does not try v2 (it goes over HTTP).
pub(crate) const MIN_LIMIT: Duration = Duration::from_millis(20);
/// The most one CANCEL may take (the hipObject client's 1 s).
pub(crate) const CANCEL_BUDGET: Duration = Duration::from_secs(1);
/// Chunk in which the exchange thread checksums the bytes through the window.
const SUM_CHUNK: usize = 256 * 1024;

/// How an exchange ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// The bytes moved by RDMA and every check passed; `verified`: the FINAL carried a
    /// checksum of them, and it matched.
    Done { bytes: u64, verified: bool },
    /// Send this request over HTTP; `learn`: the endpoint does not do v2 over this fabric.
    Fallback { learn: bool },
    /// The op failed (the outcome says how and whether to retry).
    Failed(Outcome),
}

/// What the exchange thread reports (the window is already deregistered).
pub(crate) type Finished = Exchange;

/// The client's device and domain (one per worker and endpoint, made on first use).
#[derive(Debug)]
pub(crate) struct V2Device {
    pd: RcPd,
    device: RcDevice,
}

impl V2Device {
    pub(crate) fn new(device: RcDevice) -> Result<Self, RcError> {
        Ok(Self {
            pd: device.alloc_pd()?,
            device,
        })
    }
}

/// Completion-queue entries of one exchange's QP (one RECV or one WRITE_WITH_IMM, and the
/// flush of an error).
const CQ_DEPTH: u32 = 16;

/// Where and as whom the exchange runs (owned: it travels to the exchange thread).
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) addr: SocketAddr,
    pub(crate) endpoint: Endpoint,
    pub(crate) signer: Arc<Signer>,
    /// The same credentials scoped to service `hipobj` (for servers that refuse `s3`).
    pub(crate) hipobj_signer: Option<Arc<Signer>>,
    /// What the engine learned about the endpoint (capabilities, service), updated here.
    pub(crate) learned: Arc<Learned>,
    pub(crate) now: AmzDate,
}

impl Job {
    /// The signer of the service the endpoint's v2 routes accept (learned).
    fn signer(&self) -> &Signer {
        match (&self.hipobj_signer, self.learned.v2_service()) {
            (Some(h), learned::HIPOBJ_SERVICE) => h,
            _ => &self.signer,
        }
    }
}

const fn fail(code: ErrorCode, class: ErrorClass, retry: Retry) -> Exchange {
    Exchange::Failed(Outcome::fail(code, class, retry))
}

const TRANSPORT: Exchange = Exchange::Failed(Outcome::transport(false));
const TIMED_OUT: Exchange = fail(ErrorCode::TimedOut, ErrorClass::Transport, Retry::Yes);

/// The window's fixed fields (read without the lock).
#[derive(Debug, Clone, Copy)]
struct WindowKeys {
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
}

#[derive(Debug)]
struct FenceInner {
    pd: RcPd,
    /// The window while registered; `None` once deregistered. Reads through it hold the lock,
    /// so deregistration waits for a read in progress (the fence).
    mr: Mutex<Option<RcMr>>,
    keys: WindowKeys,
    aborted: AtomicBool,
    /// The exchange's control connection, shut down on abort to end a blocked read at once.
    stream: Mutex<Option<TcpStream>>,
}

/// The worker's hold on a running exchange's window.
#[derive(Debug)]
pub(crate) struct Fence(Arc<FenceInner>);

impl Fence {
    /// Ends the exchange's access to the op's buffer: when this returns no access is in
    /// progress and none can start (the window is deregistered); the thread's socket is shut
    /// down so it stops soon. Idempotent.
    pub(crate) fn close(&self) {
        let f = &self.0;
        f.aborted.store(true, Ordering::Release);
        if let Some(s) = f
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        f.deregister();
    }
}

impl FenceInner {
    /// Deregisters the window (idempotent).
    fn deregister(&self) {
        let mr = self
            .mr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mr) = mr {
            let _ = self.pd.deregister(mr);
        }
    }

    /// Copies window bytes at `off` into `dst`; `false` once deregistered.
    fn read(&self, off: u64, dst: &mut [u8]) -> bool {
        let g = self.mr.lock().unwrap_or_else(PoisonError::into_inner);
        g.as_ref().is_some_and(|mr| mr.read(off, dst).is_ok())
    }
}

/// One op's QP, CQ and window; dropping it fails the QP (stopping any access in progress)
/// and deregisters the window (the fabric's fence: no later access can land).
struct Wire {
    qp: RcQp,
    cq: RcCq,
    fence: Arc<FenceInner>,
    /// The soft fabric needs the server's listener to dial; verbs only the token.
    kind: RcKind,
}

impl Wire {
    fn keys(&self) -> WindowKeys {
        self.fence.keys
    }

    fn aborted(&self) -> bool {
        self.fence.aborted.load(Ordering::Acquire)
    }

    /// Hands the control connection to the fence; `false` once aborted.
    fn keep(&self, s: &TcpStream) -> bool {
        let mut slot = self
            .fence
            .stream
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.aborted() {
            return false;
        }
        *slot = s.try_clone().ok();
        true
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.qp.modify_to_err();
        self.fence.deregister();
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

/// How [`launch`] went.
#[derive(Debug)]
pub(crate) enum Launch {
    /// v2 does not apply to this op (or no thread could be started): send it over HTTP.
    Http,
    /// The op failed before anything went on the wire.
    Failed(Outcome),
    /// The exchange runs; `done` will be called once with its end.
    Running(Fence),
}

/// Starts the exchange for `op` (to end before `end`) on a thread of its own; `done` receives
/// its outcome there. The window is registered here, on the caller's thread, so the returned
/// [`Fence`] covers it from the start.
pub(crate) fn launch<F>(job: Job, dev: &V2Device, op: &InFlight, end: Instant, done: F) -> Launch
where
    F: FnOnce(Finished) + Send + 'static,
{
    let (v2op, offset, exact) = match op.kind {
        OpKind::Get => (v2::Op::Get, 0, false),
        OpKind::RangeGet { offset } => (v2::Op::Get, offset, true),
        OpKind::Put => (v2::Op::Put, 0, true),
        OpKind::Head => return Launch::Http,
    };
    let mut target = Target::new(&*op.object.bucket, &*op.object.key);
    // An UploadPart's ETag is recorded in the upload table of the op's engine.
    let part_of = op.part_handle().zip(op.uploads.clone());
    if let Some((upload_id, part)) = op.part_target() {
        let Ok(part_number) = u16::try_from(part) else {
            return Launch::Http;
        };
        target.query = v2::TargetQuery::Part {
            upload_id: upload_id.to_owned(),
            part_number,
        };
    }
    let Some(lease) = op.buf.as_ref() else {
        return Launch::Http;
    };
    let size = lease.len();
    let Some((ptr, n)) = lease.raw_range() else {
        return Launch::Http;
    };
    if size == 0 || size > v2::MAX_SIZE || n as u64 != size {
        return Launch::Http;
    }
    let (qp_access, mr_access) = match v2op {
        v2::Op::Get => (
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
            Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        ),
        v2::Op::Put => (Access::NONE, Access::LOCAL_WRITE),
    };
    let Ok(cq) = dev.device.create_cq(CQ_DEPTH) else {
        return Launch::Http;
    };
    let Ok(qp) = dev.device.create_qp(&dev.pd, &cq, &cq, RcCaps::default()) else {
        return Launch::Http;
    };
    // SAFETY: `ptr..ptr+n` is the op's leased range of a live engine registration (of a
    // device registration: the op's bounce range, which the lease owns); the lease
    // (held by `op` until the worker completes it) keeps the memory alive and gives this op
    // exclusive (GET) or shared read-only (PUT) use of it. The worker completes the op only
    // after the exchange thread reported (it deregisters the window first, `Wire`'s drop) or
    // after closing the returned fence (`Fence::close` deregisters it), so no access through
    // the registration outlives the lease.
    #[allow(unsafe_code)]
    let Ok(mr) = (unsafe { dev.pd.register_raw(ptr, n, mr_access) }) else {
        return Launch::Http;
    };
    let keys = WindowKeys {
        addr: mr.addr(),
        len: mr.len(),
        lkey: mr.lkey(),
        rkey: mr.rkey(),
    };
    let fence = Arc::new(FenceInner {
        pd: dev.pd.clone(),
        mr: Mutex::new(Some(mr)),
        keys,
        aborted: AtomicBool::new(false),
        stream: Mutex::new(None),
    });
    let wire = Wire {
        qp,
        cq,
        fence: Arc::clone(&fence),
        kind: dev.device.kind(),
    };
    if wire.qp.modify_to_init(qp_access).is_err() {
        return Launch::Failed(Outcome::transport(false));
    }
    let Ok(token) = wire.qp.local_token(None) else {
        return Launch::Failed(Outcome::transport(false));
    };
    let ask = Ask {
        token,
        psn: nonzero(0x00ff_ffff),
        cookie: nonzero(u32::MAX),
        op: v2op,
        target: target.encode(),
        size,
        offset,
        fabric: wire.kind,
    };
    let spawned = std::thread::Builder::new()
        .name("hipobj-rc-v2".to_owned())
        .spawn(move || done(run(&job, wire, &ask, exact, end, part_of)));
    match spawned {
        Ok(_) => Launch::Running(Fence(fence)),
        // The closure (and with it the wire) is gone: the window is deregistered.
        Err(_) => Launch::Http,
    }
}

/// The exchange thread's whole job: PREPARE … FINAL, the checksum check through the window,
/// the window closed, then (after a failure with a session) one CANCEL. An UploadPart
/// (`part`: its upload and number) records the part's ETag from the FINAL, as the HTTP path
/// does from its answer.
fn run(
    job: &Job,
    wire: Wire,
    ask: &Ask,
    exact: bool,
    end: Instant,
    part: Option<(
        (ring_api::UploadHandle, u32),
        Arc<crate::multipart::UploadTable>,
    )>,
) -> Finished {
    let out = exchange(job, &wire, ask, exact, end);
    let out = match out {
        Ok(Checked::Done {
            bytes,
            sums,
            session,
            etag,
        }) => {
            let recorded = match (part, etag) {
                (None, _) => true,
                (Some(((h, n), table)), Some(e)) => table.record_part(h, n, &e).is_ok(),
                (Some(_), None) => false,
            };
            if !recorded {
                Err((
                    fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No),
                    None,
                ))
            } else if sums_match(&wire.fence, bytes, &sums) {
                let verified = sums.crc64nvme.is_some() || sums.crc32c.is_some();
                Ok(Exchange::Done { bytes, verified })
            } else {
                Err((
                    fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No),
                    Some(session),
                ))
            }
        }
        Ok(Checked::Other(x)) => Ok(x),
        Err(f) => Err(f),
    };
    // Fence the window before anything else.
    drop(wire);
    match out {
        Ok(x) => x,
        Err((x, session)) => {
            if let Some(s) = session {
                cancel(job, &s, end);
            }
            x
        }
    }
}

/// Whether the checksums a FINAL carries match the first `bytes` bytes of the window (read
/// through the registration, in chunks: a deregistered window reads as a mismatch).
fn sums_match(window: &FenceInner, bytes: u64, sums: &v2::RdmaChecksums) -> bool {
    if sums.crc64nvme.is_none() && sums.crc32c.is_none() {
        return true;
    }
    if bytes > window.keys.len {
        return false;
    }
    let mut check = v2_client::SumCheck::default();
    let mut chunk = vec![0u8; SUM_CHUNK];
    let mut off = 0u64;
    while off < bytes {
        let n = usize::try_from((bytes - off).min(SUM_CHUNK as u64)).unwrap_or(SUM_CHUNK);
        let Some(buf) = chunk.get_mut(..n) else {
            return false;
        };
        if !window.read(off, buf) {
            return false;
        }
        check.update(buf);
        off += n as u64;
    }
    check.matches(sums)
}

/// A successful FINAL (before the checksum check) or an outcome that needs no CANCEL.
enum Checked {
    Done {
        bytes: u64,
        sums: v2::RdmaChecksums,
        session: String,
        etag: Option<String>,
    },
    Other(Exchange),
}

type Failure = (Exchange, Option<String>);

fn left(end: Instant) -> Option<Duration> {
    let d = end.saturating_duration_since(Instant::now());
    (!d.is_zero()).then_some(d)
}

/// PREPARE … FINAL. An `Err` names the session to cancel.
fn exchange(ctx: &Job, w: &Wire, ask: &Ask, exact: bool, end: Instant) -> Result<Checked, Failure> {
    let Some(headers) = v2_client::prepare_headers(ask) else {
        return Err((TRANSPORT, None));
    };
    let (mut s, head) = prepare_call(ctx, w, &headers, end)?;
    let g = match v2_client::prepare_answer(&head, ask.op, w.kind) {
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
    // Soft: our QP dials the session's listener within the time left; verbs: the token's
    // GID is the path.
    let path = g.soft_addr.map(SoftPath::Connect);
    let connected =
        w.qp.connect_within(&g.token, g.psn, ask.psn, path, t)
            .is_ok();
    if !connected {
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
            Some((w.keys().addr, w.keys().rkey))
        }
        v2::Op::Put => None,
    };
    let ready = v2_client::ready_headers(&g.session, ask.cookie, ask.token.qpn, window);
    let mut ready_ex =
        send(ctx, &mut s, v2::READY_PATH, &ready, end).map_err(|x| (x, sid.clone()))?;
    if ask.op == v2::Op::Put {
        let (Some((addr, rkey)), Ok(len)) = (g.staging, u32::try_from(ask.size)) else {
            return Err((TRANSPORT, sid));
        };
        let sge = Sge {
            addr: w.keys().addr,
            length: len,
            lkey: w.keys().lkey,
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
    let head = read_head_until(&mut s, &mut ready_ex, end)
        .map_err(|()| (timed_or_transport(end), sid.clone()))?;
    ctx.learned.note_capabilities(&head);
    let fin =
        match v2_client::judge_final(&head, ask.op == v2::Op::Put, ask.cookie, ask.size, exact) {
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
    // A whole-object GET that filled the window may have been cut at it: v2 names no object
    // size, so only an answer shorter than the window proves the object ended. Resend it over
    // HTTP (`bytes=0-` commits to the size): the object arrives whole, or the op fails with
    // `EFBIG` as on every path — never a silently truncated success. The session ended with
    // this READY.
    if ask.op == v2::Op::Get && !exact && fin.bytes == ask.size {
        return Ok(Checked::Other(Exchange::Fallback { learn: false }));
    }
    Ok(Checked::Done {
        bytes: fin.bytes,
        sums: fin.sums,
        session: g.session,
        etag: fin.etag,
    })
}

/// Sends PREPARE on a fresh connection and reads the answer (whose capabilities are noted).
/// A server that refuses our credential scope's service (`AuthorizationHeaderMalformed` naming
/// it: the ROCm reference verifier wants `hipobj`) gets one more PREPARE signed for the other
/// service, which the engine then keeps using for this endpoint.
fn prepare_call(
    ctx: &Job,
    w: &Wire,
    headers: &[(String, String)],
    end: Instant,
) -> Result<(TcpStream, ResponseHead), Failure> {
    let mut switched = false;
    loop {
        let Some(t) = left(end) else {
            return Err((TIMED_OUT, None));
        };
        let mut s = TcpStream::connect_timeout(&ctx.addr, t).map_err(|_| (TRANSPORT, None))?;
        let _ = s.set_nodelay(true);
        if !w.keep(&s) {
            return Err((TRANSPORT, None));
        }
        let mut ex = send(ctx, &mut s, v2::PREPARE_PATH, headers, end).map_err(|x| (x, None))?;
        let (head, body) = read_answer_until(&mut s, &mut ex, end)
            .map_err(|()| (timed_or_transport(end), None))?;
        ctx.learned.note_capabilities(&head);
        if !switched
            && ctx.hipobj_signer.is_some()
            && learned::refuses_service(head.status, &body)
            && ctx.learned.switch_service(ctx.signer().service())
        {
            switched = true;
            continue;
        }
        return Ok((s, head));
    }
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
fn wait_one(cq: &RcCq, end: Instant) -> Option<WorkCompletion> {
    let mut w = [WorkCompletion::default(); 1];
    loop {
        let t = left(end)?;
        if cq
            .poll_wait(&mut w, t.min(Duration::from_millis(50)))
            .ok()?
            == 1
        {
            return w.first().copied();
        }
    }
}

/// Signs and writes one body-less POST on `s`; the returned exchange reads its answer.
fn send(
    ctx: &Job,
    s: &mut TcpStream,
    path: &str,
    headers: &[(String, String)],
    end: Instant,
) -> Result<HttpExchange, Exchange> {
    let mut req = Request::new("POST", path);
    req.add_header("Host", ctx.endpoint.host_header(None));
    for (n, v) in headers {
        req.add_header(n.as_str(), v.clone());
    }
    req.add_header("Content-Length", "0");
    ctx.signer()
        .sign_headers(&mut req, &PayloadHash::Unsigned, ctx.now)
        .map_err(|_| TRANSPORT)?;
    left(end).ok_or(TIMED_OUT)?;
    let mut ex = HttpExchange::new(Limits::default());
    until::send(s, &mut ex, &req, end).map_err(|_| timed_or_transport(end))?;
    Ok(ex)
}

/// [`send`], then reads the answer's head.
fn call(
    ctx: &Job,
    s: &mut TcpStream,
    path: &str,
    headers: &[(String, String)],
    end: Instant,
) -> Result<ResponseHead, Exchange> {
    let mut ex = send(ctx, s, path, headers, end)?;
    read_head_until(s, &mut ex, end).map_err(|()| timed_or_transport(end))
}

/// One CANCEL on a fresh connection (the exchange's may be mid-answer), bounded by
/// [`CANCEL_BUDGET`] and `end`; its outcome does not matter (the session also expires).
fn cancel(ctx: &Job, session: &str, end: Instant) {
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
            &v2_client::cancel_headers(session),
            end,
        );
    }
}
