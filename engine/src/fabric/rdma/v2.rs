//! The `hipobj-rc-v2` client exchange over either RC fabric (docs/protocol.md, hipobj-rc-v2),
//! as a state machine of the op, driven by the worker that owns it ([`V2Op`]). No other
//! thread touches the op.
//!
//! Per GET / RangeGet / PUT / UploadPart (a PUT whose target names the part, as versitygw
//! serves multipart over RC): a fresh QP (INIT) and CQ on the client's device, a random
//! 24-bit PSN and 32-bit cookie (both non-zero), the op's buffer range registered as the
//! window; signed `POST /.hipobj-rc/prepare`; the QP connected to the session's QP
//! (`rq_psn` = server PSN, `sq_psn` = ours); GET posts the RECV for the completing
//! WRITE_WITH_IMM before READY; signed `POST /.hipobj-rc/ready`; PUT then posts one
//! WRITE_WITH_IMM of the whole payload into the staging window (imm = cookie); the READY
//! answer (FINAL) is judged by `s3_lite::rdma::v2::client::judge_final`, our completion must
//! agree, and the checksums the FINAL carries (either generation) must match the bytes we hold.
//!
//! PUT grace: the hipObject client sleeps ~100 ms before its write because the ROCm reference
//! server posts its RECV only inside READY. Not needed here: our gateway (like Ceph) posts the
//! RECV at PREPARE, and a soft responder without a RECV waits up to its `rnr_wait` (2 s) for
//! one instead of failing, which covers a server posting it late.
//!
//! Steps ([`V2Op::start`], [`V2Op::on_ready`], [`V2Op::on_completion`]): PREPARE and READY
//! are requests on one non-blocking side connection (`ctrl`) registered with the worker's poll;
//! the QP connect and the posts are calls on the worker (the soft fabric's connect only hands
//! the dial of the session's listener to the device's I/O thread, bounded by [`CONNECT_LIMIT`]:
//! the RECV, READY and a PUT's write go out meanwhile, the write waiting in the send queue for
//! the connection; a failed dial fails the QP, rings the worker's waker and ends the op as a
//! transport failure, [`V2Op::watches_dial`]); the completion wakes the worker through
//! its poll (the soft CQ rings the worker's waker; a verbs CQ is polled on the worker's timer
//! tick). Deadlines: the op's own (worker timers), at most the engine's attempt timeout (the
//! dialect's timer; a v2 exchange gets as long as an HTTP attempt would). The checksum of a finished window runs on the worker in bounded parts
//! ([`SUM_PER_TURN`] per turn of its loop, about a quarter of a millisecond; docs/engine.md).
//!
//! The window: registered at start, deregistered when the op's state is dropped — at its end
//! (before its outcome is reported) or on abort (deadline, cancel, attempt timeout: the QP is
//! failed first, so an access in progress stops, then the deregistration, which on the soft
//! fabric waits for an access in progress and refuses every later one, and on verbs
//! invalidates the rkey before it returns). After abort no byte of the op's buffer is touched.
//! Any failure after a session id was published sends one CANCEL, bounded by
//! [`CANCEL_BUDGET`] and the remaining time (a side exchange of its own).

use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Token};
use ring_api::{ErrorClass, ErrorCode};
use s3_lite::Request;
use s3_lite::http::ResponseHead;
use s3_lite::rdma::v2::{self, Target};
use s3_lite::s3::Endpoint;
use s3_lite::sigv4::{AmzDate, PayloadHash, Signer};

use super::ctrl::{Ctrl, Step};
use super::learned::{self, Learned};
use crate::fabric::http::response::status_outcome;
use crate::fabric::http::tls::{CERTIFICATE_REFUSED, TlsContext};
use crate::fabric::rc::{
    Access, RcCaps, RcCq, RcDevice, RcError, RcKind, RcMr, RcPd, RcQp, RecvWr, RemoteAddr, SendOp,
    SendWr, Sge, SoftPath, WcOpcode, WcStatus, WorkCompletion,
};
use crate::fabric::{Outcome, Retry};
use crate::inflight::{InFlight, OpKind};
use s3_lite::rdma::v2::client::{self as v2_client, Ask, Final, FinalError, PrepareAnswer};

/// The longest one exchange may run when the op has no deadline and the engine set no attempt
/// timeout of its own (`RdmaClient::with_attempt_timeout`, which the engine always calls).
pub(crate) const LIMIT: Duration = Duration::from_secs(30);
/// Below this much time left, an op does not try v2 (it goes over HTTP).
pub(crate) const MIN_LIMIT: Duration = Duration::from_millis(20);
/// The most one CANCEL may take (the hipObject client's 1 s).
pub(crate) const CANCEL_BUDGET: Duration = Duration::from_secs(1);
/// The longest the soft fabric's dial of a session's listener may take (the device's I/O
/// thread dials; the worker does not wait for it).
pub(crate) const CONNECT_LIMIT: Duration = Duration::from_millis(500);
/// Chunk in which the worker checksums the bytes through the window.
const SUM_CHUNK: usize = 256 * 1024;
/// Bytes checksummed per turn of the worker's loop (about a quarter of a millisecond of CPU
/// here), so a large window does not hold the worker's other ops.
const SUM_PER_TURN: u64 = 1 << 20;

/// How an exchange ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exchange {
    /// The bytes moved by RDMA and every check passed; `verified`: the FINAL carried a
    /// checksum of them, and it matched.
    Done { bytes: u64, verified: bool },
    /// Send this request over HTTP; `learn`: the endpoint does not do v2 over this fabric.
    Fallback { learn: bool },
    /// The server is at its session limit: try again when one of this worker's exchanges
    /// there ends, or over HTTP when none runs.
    Busy,
    /// The op failed (the outcome says how and whether to retry).
    Failed(Outcome),
}

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

/// Where and as whom the exchanges run (borrowed from the client for each step).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) endpoint: &'a Endpoint,
    pub(crate) signer: &'a Arc<Signer>,
    /// The same credentials scoped to service `hipobj` (for servers that refuse `s3`).
    pub(crate) hipobj_signer: Option<&'a Arc<Signer>>,
    /// What the engine learned about the endpoint (capabilities, service), updated here.
    pub(crate) learned: &'a Learned,
    /// TLS of an `https://` endpoint (PREPARE, READY and CANCEL are verified like any
    /// request).
    pub(crate) tls: Option<&'a Arc<TlsContext>>,
}

impl Ctx<'_> {
    /// The signer of the service the endpoint's v2 routes accept (learned).
    fn signer(&self) -> &Signer {
        match (self.hipobj_signer, self.learned.v2_service()) {
            (Some(h), learned::HIPOBJ_SERVICE) => h,
            _ => self.signer,
        }
    }

    /// One signed body-less POST of `headers` to `path`.
    fn request(&self, path: &str, headers: &[(String, String)], now: AmzDate) -> Option<Request> {
        let mut req = Request::new("POST", path);
        req.add_header("Host", self.endpoint.host_header(None));
        for (n, v) in headers {
            req.add_header(n.as_str(), v.clone());
        }
        req.add_header("Content-Length", "0");
        self.signer()
            .sign_headers(&mut req, &PayloadHash::Unsigned, now)
            .ok()?;
        Some(req)
    }
}

const fn fail(code: ErrorCode, class: ErrorClass, retry: Retry) -> Exchange {
    Exchange::Failed(Outcome::fail(code, class, retry))
}

const TRANSPORT: Exchange = Exchange::Failed(Outcome::transport(false));
pub(crate) const TIMED_OUT: Exchange = fail(ErrorCode::TimedOut, ErrorClass::Transport, Retry::Yes);
const INTEGRITY: Exchange = fail(ErrorCode::Integrity, ErrorClass::Integrity, Retry::No);

/// One op's QP, CQ and window; dropping it fails the QP (stopping any access in progress)
/// and deregisters the window (the fabric's fence: no later access can land).
#[derive(Debug)]
struct Wire {
    // Field order = drop order: the QP before its CQ.
    qp: RcQp,
    cq: RcCq,
    pd: RcPd,
    mr: Option<RcMr>,
    addr: u64,
    len: u64,
    lkey: u32,
    rkey: u32,
    /// The soft fabric needs the server's listener to dial; verbs only the token.
    kind: RcKind,
}

impl Wire {
    /// Fails the QP and deregisters the window (idempotent).
    fn close(&mut self) {
        self.qp.modify_to_err();
        if let Some(mr) = self.mr.take() {
            let _ = self.pd.deregister(mr);
        }
    }

    /// Feeds window bytes `off..end` to `check` in chunks; `false` if the window cannot be
    /// read (deregistered, or out of its bounds).
    fn sum_range(&self, check: &mut v2_client::SumCheck, off: u64, end: u64) -> bool {
        let Some(mr) = self.mr.as_ref() else {
            return false;
        };
        if end > self.len {
            return false;
        }
        let mut chunk = vec![0u8; SUM_CHUNK.min(usize::try_from(end - off).unwrap_or(SUM_CHUNK))];
        let mut at = off;
        while at < end {
            let n = usize::try_from((end - at).min(SUM_CHUNK as u64)).unwrap_or(SUM_CHUNK);
            let Some(buf) = chunk.get_mut(..n) else {
                return false;
            };
            if mr.read(at, buf).is_err() {
                return false;
            }
            check.update(buf);
            at += n as u64;
        }
        true
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.close();
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

/// Where the op's exchange stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// PREPARE sent (or its connection still opening); waiting for its answer.
    Prepare,
    /// READY sent; waiting for the FINAL.
    Ready,
    /// FINAL judged; waiting for our completion (the GET's IMM, the PUT's write).
    Completion,
    /// Checking the FINAL's checksums against the window, [`SUM_PER_TURN`] bytes per turn.
    Summing,
}

/// An UploadPart's handle and number, with its engine's upload table (the ETag is recorded
/// there from the FINAL, as the HTTP path does from its answer).
type PartOf = (
    (ring_api::UploadHandle, u32),
    Arc<crate::multipart::UploadTable>,
);

/// One op's hipobj-rc-v2 exchange, owned by its worker.
#[derive(Debug)]
pub(crate) struct V2Op {
    wire: Wire,
    ask: Ask,
    exact: bool,
    /// The exchange ends by then (the op's deadline, at most the engine's attempt timeout from
    /// its start).
    pub(crate) end: Instant,
    part_of: Option<PartOf>,
    now: AmzDate,
    ctrl: Option<Ctrl>,
    phase: Phase,
    /// The PREPARE was re-signed for the other service once already.
    switched: bool,
    /// The session the server published (to cancel after a failure).
    session: Option<String>,
    fin: Option<Final>,
    /// The checksums of the window so far, and how far they got (phase `Summing`).
    sum: (v2_client::SumCheck, u64),
    /// A soft GET window's landing digest (`soft::Landing`): the checksum of what landed.
    landing: Option<crate::fabric::soft::Landing>,
    /// A verbs CQ's completion channel, registered on the worker's poll under this token.
    cq_watch: Option<Token>,
    /// The channel is armed and no event was taken since: wait for readiness.
    cq_armed: bool,
}

/// What a step of the exchange produced.
#[derive(Debug)]
pub(crate) enum Progress {
    /// Waiting (for readiness, a completion or a timer).
    Pending,
    /// Waiting for the op's completion: poll its CQ when the worker wakes.
    AwaitCompletion,
    /// More of the window to checksum: call [`V2Op::on_completion`] on the next turn.
    Summing,
    /// The exchange ended (the window is already deregistered); `cancel`: a session to
    /// cancel.
    Ended(Exchange, Option<String>),
}

/// How [`V2Op::start`] went.
#[derive(Debug)]
pub(crate) enum Launch {
    /// v2 does not apply to this op (or its connection could not be opened): send it over
    /// HTTP.
    Http,
    /// The op failed before anything went on the wire.
    Failed(Outcome),
    /// The exchange runs (PREPARE on its way).
    Running(Box<V2Op>),
}

impl V2Op {
    /// Sets up the exchange for `op` (to end before `end`): QP, CQ and window, then PREPARE on
    /// a side connection registered under `token`. `waker`: the worker's waker, which the
    /// soft CQ rings on a completion.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        ctx: Ctx<'_>,
        dev: &V2Device,
        op: &InFlight,
        end: Instant,
        now: AmzDate,
        token: Token,
        waker: Option<&Arc<mio::Waker>>,
        io: &mio::Registry,
    ) -> Launch {
        let (v2op, offset, exact) = match op.kind {
            OpKind::Get => (v2::Op::Get, 0, false),
            OpKind::RangeGet { offset } => (v2::Op::Get, offset, true),
            OpKind::Put => (v2::Op::Put, 0, true),
            OpKind::Head => return Launch::Http,
        };
        let mut target = Target::new(&*op.object.bucket, &*op.object.key);
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
        // (held by `op` until the worker completes it) keeps the memory alive and gives this
        // op exclusive (GET) or shared read-only (PUT) use of it. The registration lives in
        // this op's `Wire`, which the worker drops (deregistering it) before it completes or
        // retries the op, and on abort, so no access through it outlives the lease.
        #[allow(unsafe_code)]
        let Ok(mr) = (unsafe { dev.pd.register_raw(ptr, n, mr_access) }) else {
            return Launch::Http;
        };
        let landing = match v2op {
            v2::Op::Get => mr.track_landing(),
            v2::Op::Put => None,
        };
        let wire = Wire {
            addr: mr.addr(),
            len: mr.len(),
            lkey: mr.lkey(),
            rkey: mr.rkey(),
            qp,
            cq,
            pd: dev.pd.clone(),
            mr: Some(mr),
            kind: dev.device.kind(),
        };
        if wire.qp.modify_to_init(qp_access).is_err() {
            return Launch::Failed(Outcome::transport(false));
        }
        let Ok(token_rc) = wire.qp.local_token(None) else {
            return Launch::Failed(Outcome::transport(false));
        };
        let _ = wire.cq.notify_to(waker.cloned());
        let ask = Ask {
            token: token_rc,
            psn: nonzero(0x00ff_ffff),
            cookie: nonzero(u32::MAX),
            op: v2op,
            target: target.encode(),
            size,
            offset,
            fabric: wire.kind,
        };
        let mut me = Box::new(Self {
            wire,
            ask,
            exact,
            end,
            part_of,
            now,
            ctrl: None,
            phase: Phase::Prepare,
            switched: false,
            session: None,
            fin: None,
            sum: (v2_client::SumCheck::default(), 0),
            landing,
            cq_watch: None,
            cq_armed: false,
        });
        match me.send_prepare(ctx, token, io) {
            Some(Step::Broken) | None => Launch::Http,
            Some(Step::Refused) => Launch::Failed(CERTIFICATE_REFUSED),
            Some(_) => Launch::Running(me),
        }
    }

    /// Opens a fresh side connection under `token` and starts PREPARE on it. A step
    /// (`Pending`, or an answer that arrived at once) is left for the next readiness edge:
    /// the connect is still in progress here, so nothing can have been answered yet.
    fn send_prepare(&mut self, ctx: Ctx<'_>, token: Token, io: &mio::Registry) -> Option<Step> {
        let headers = v2_client::prepare_headers(&self.ask)?;
        let req = ctx.request(v2::PREPARE_PATH, &headers, self.now)?;
        if let Some(old) = self.ctrl.take() {
            old.close(io);
        }
        let mut c = Ctrl::open(ctx.addr, ctx.tls, token, io).ok()?;
        let step = c.request(&req);
        self.ctrl = Some(c);
        Some(step)
    }

    /// Readiness on the op's side connection.
    pub(crate) fn on_ready(&mut self, ctx: Ctx<'_>, io: &mio::Registry) -> Progress {
        let Some(c) = self.ctrl.as_mut() else {
            return Progress::Pending;
        };
        let step = c.drive();
        self.advance(ctx, step, io)
    }

    /// Applies a step of the side connection to the exchange.
    fn advance(&mut self, ctx: Ctx<'_>, step: Step, io: &mio::Registry) -> Progress {
        match (self.phase, step) {
            (_, Step::Pending) | (Phase::Completion | Phase::Summing, _) => Progress::Pending,
            (_, Step::Broken) => self.end_with(TRANSPORT),
            (_, Step::Refused) => self.end_with(Exchange::Failed(CERTIFICATE_REFUSED)),
            (Phase::Prepare, Step::Answer(head, body)) => self.on_prepare(ctx, &head, &body, io),
            (Phase::Ready, Step::Answer(head, _)) => self.on_final(ctx, &head),
        }
    }

    fn on_prepare(
        &mut self,
        ctx: Ctx<'_>,
        head: &ResponseHead,
        body: &[u8],
        io: &mio::Registry,
    ) -> Progress {
        ctx.learned.note_capabilities(head);
        // A server that refuses our credential scope's service (`AuthorizationHeaderMalformed`
        // naming it: the ROCm reference verifier wants `hipobj`) gets one more PREPARE signed
        // for the other service, which the engine then keeps using for this endpoint.
        if !self.switched
            && ctx.hipobj_signer.is_some()
            && learned::refuses_service(head.status, body)
            && ctx.learned.switch_service(ctx.signer().service())
        {
            self.switched = true;
            let Some(token) = self.ctrl.as_ref().map(|c| c.token) else {
                return self.end_with(TRANSPORT);
            };
            return match self.send_prepare(ctx, token, io) {
                Some(Step::Broken) | None => self.end_with(TRANSPORT),
                Some(Step::Refused) => self.end_with(Exchange::Failed(CERTIFICATE_REFUSED)),
                Some(step) => self.advance(ctx, step, io),
            };
        }
        let answer = v2_client::prepare_answer(head, self.ask.op, self.wire.kind);
        if !matches!(answer, PrepareAnswer::Granted(_)) {
            tracing::debug!(
                status = head.status,
                reply = head.header(s3_lite::rdma::RDMA_REPLY),
                "v2: PREPARE not granted: {answer:?}"
            );
        }
        let g = match answer {
            PrepareAnswer::Granted(g) => g,
            PrepareAnswer::Unsupported { learn } => {
                return self.end_with(Exchange::Fallback { learn });
            }
            PrepareAnswer::Busy => return self.end_with(Exchange::Busy),
            PrepareAnswer::Unusable { session, learn } => {
                self.session = session;
                self.wire.close();
                return Progress::Ended(Exchange::Fallback { learn }, self.session.take());
            }
        };
        self.session = Some(g.session.clone());
        let Some(t) = left(self.end) else {
            return self.end_with(TIMED_OUT);
        };
        // Soft: our QP's I/O thread dials the session's listener (bounded; this does not
        // wait, a failed dial is noticed in `on_completion`); verbs: the token's GID is
        // the path.
        let path = g.soft_addr.map(SoftPath::Connect);
        let w = &self.wire;
        if w.qp
            .connect_within(&g.token, g.psn, self.ask.psn, path, t.min(CONNECT_LIMIT))
            .is_err()
        {
            return self.end_with(TRANSPORT);
        }
        let window = match self.ask.op {
            v2::Op::Get => {
                if w.qp
                    .post_recv(&RecvWr {
                        wr_id: 1,
                        sge: None,
                    })
                    .is_err()
                {
                    return self.end_with(TRANSPORT);
                }
                Some((w.addr, w.rkey))
            }
            v2::Op::Put => None,
        };
        let ready =
            v2_client::ready_headers(&g.session, self.ask.cookie, self.ask.token.qpn, window);
        let Some(req) = ctx.request(v2::READY_PATH, &ready, self.now) else {
            return self.end_with(TRANSPORT);
        };
        self.phase = Phase::Ready;
        let Some(c) = self.ctrl.as_mut() else {
            return self.end_with(TRANSPORT);
        };
        let step = c.request(&req);
        if self.ask.op == v2::Op::Put {
            let (Some((addr, rkey)), Ok(len)) = (g.staging, u32::try_from(self.ask.size)) else {
                return self.end_with(TRANSPORT);
            };
            let sge = Sge {
                addr: self.wire.addr,
                length: len,
                lkey: self.wire.lkey,
            };
            let wr = SendWr::new(
                1,
                SendOp::WriteWithImm(RemoteAddr { addr, rkey }, self.ask.cookie),
                sge,
            );
            if self.wire.qp.post_send(&wr).is_err() {
                return self.end_with(TRANSPORT);
            }
        }
        self.advance(ctx, step, io)
    }

    fn on_final(&mut self, ctx: Ctx<'_>, head: &ResponseHead) -> Progress {
        ctx.learned.note_capabilities(head);
        let put = self.ask.op == v2::Op::Put;
        match v2_client::judge_final(head, put, self.ask.cookie, self.ask.size, self.exact) {
            Ok(f) => self.fin = Some(f),
            Err(e) => return self.end_with(final_failure(&e)),
        }
        self.phase = Phase::Completion;
        self.on_completion()
    }

    /// Polls the op's CQ (after the FINAL), then checksums the window a part per call: ends
    /// the exchange once our completion is there and the sums are checked.
    pub(crate) fn on_completion(&mut self) -> Progress {
        match self.phase {
            Phase::Completion => {}
            Phase::Summing => return self.sum_step(),
            // The soft dial failed: our RECV or write was flushed, and the FINAL would only
            // come after the server's own wait for a connection that will never be.
            Phase::Ready if self.wire.qp.dial_failed() => return self.end_with(TRANSPORT),
            Phase::Prepare | Phase::Ready => return Progress::Pending,
        }
        let mut wc = [WorkCompletion::default(); 1];
        match self.wire.cq.poll(&mut wc) {
            Ok(1) => {}
            Ok(_) => return Progress::AwaitCompletion,
            Err(_) => return self.end_with(TRANSPORT),
        }
        let [wc] = wc;
        // Our side must agree: the completing write's IMM (GET) or our write's success (PUT).
        let ours = wc.status == WcStatus::Success
            && match self.ask.op {
                v2::Op::Get => {
                    wc.opcode == WcOpcode::RecvRdmaWithImm && wc.imm_data == Some(self.ask.cookie)
                }
                v2::Op::Put => true,
            };
        if !ours {
            return self.end_with(INTEGRITY);
        }
        let Some(fin) = self.fin.as_mut() else {
            return self.end_with(TRANSPORT);
        };
        // A whole-object GET that filled the window may have been cut at it: v2 names no
        // object size, so only an answer shorter than the window proves the object ended.
        // Resend it over HTTP (`bytes=0-` commits to the size): the object arrives whole, or
        // the op fails with `EFBIG` as on every path — never a silently truncated success.
        // The session ended with this READY.
        if self.ask.op == v2::Op::Get && !self.exact && fin.bytes == self.ask.size {
            self.session = None;
            return self.end_with(Exchange::Fallback { learn: false });
        }
        let recorded = match (self.part_of.take(), fin.etag.take()) {
            (None, _) => true,
            (Some(((h, n), table)), Some(e)) => table.record_part(h, n, &e).is_ok(),
            (Some(_), None) => false,
        };
        if !recorded {
            self.session = None;
            return self.end_with(fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No));
        }
        self.phase = Phase::Summing;
        self.sum_step()
    }

    /// Checksums the next [`SUM_PER_TURN`] bytes of the window; at the end, compares them
    /// with the FINAL's and ends the exchange.
    fn sum_step(&mut self) -> Progress {
        let Some((bytes, sums)) = self.fin.as_ref().map(|f| (f.bytes, f.sums)) else {
            return self.end_with(TRANSPORT);
        };
        let verified = sums.crc64nvme.is_some() || sums.crc32c.is_some();
        // A soft GET window's landing digest covering exactly the bytes moved stands in for
        // reading them again, when the FINAL names only a CRC64NVME.
        let known = match (&self.landing, sums.crc64nvme, sums.crc32c) {
            (Some(l), Some(want), None) => l.crc64_of_first(bytes).map(|got| got == want),
            _ => None,
        };
        if let Some(same) = known {
            if !same {
                return self.end_with(INTEGRITY);
            }
        } else if verified {
            let (mut check, off) = std::mem::take(&mut self.sum);
            let to = bytes.min(off.saturating_add(SUM_PER_TURN));
            if bytes > self.wire.len || !self.wire.sum_range(&mut check, off, to) {
                return self.end_with(INTEGRITY);
            }
            if to < bytes {
                self.sum = (check, to);
                return Progress::Summing;
            }
            if !check.matches(&sums) {
                return self.end_with(INTEGRITY);
            }
        }
        self.session = None;
        self.end_with(Exchange::Done { bytes, verified })
    }

    /// Ends the exchange with `x`: the window is closed first; a failure names the session
    /// to cancel.
    #[track_caller]
    fn end_with(&mut self, x: Exchange) -> Progress {
        if !matches!(x, Exchange::Done { .. }) {
            tracing::debug!(
                phase = ?self.phase,
                at = std::panic::Location::caller().line(),
                "v2: exchange ends {x:?}"
            );
        }
        self.wire.close();
        let cancel = match x {
            Exchange::Failed(_) => self.session.take(),
            _ => None,
        };
        Progress::Ended(x, cancel)
    }

    /// Ends the op's exchange where it stands (abort, or after it ended): the window is
    /// closed, its connection deregistered; returns the session to cancel, if one is open.
    pub(crate) fn close(mut self: Box<Self>, io: &mio::Registry) -> Option<String> {
        self.unwatch_cq(io);
        self.wire.close();
        if let Some(c) = self.ctrl.take() {
            c.close(io);
        }
        self.session.take()
    }

    /// Whether the op waits for its soft QP's dial (after READY): the worker then calls
    /// [`V2Op::on_completion`] when it wakes (the dial's end rings its waker), which ends the
    /// op if the dial failed.
    pub(crate) fn watches_dial(&self) -> bool {
        self.phase == Phase::Ready && (self.wire.qp.is_connecting() || self.wire.qp.dial_failed())
    }

    /// The op's side connection's token.
    pub(crate) fn token(&self) -> Option<Token> {
        self.ctrl.as_ref().map(|c| c.token)
    }

    /// Registers the op's CQ's completion channel (verbs) on the worker's poll under `token`;
    /// `false` when the CQ has none (it is then polled on a timer).
    pub(crate) fn watch_cq(&mut self, token: Token, io: &mio::Registry) -> bool {
        let Some(fd) = self.wire.cq.event_fd() else {
            return false;
        };
        let ok = io
            .register(&mut SourceFd(&fd), token, Interest::READABLE)
            .is_ok();
        if ok {
            self.cq_watch = Some(token);
        }
        ok
    }

    /// The token the op's completion channel is registered under.
    pub(crate) fn cq_token(&self) -> Option<Token> {
        self.cq_watch
    }

    /// Arms the watched completion channel for the op's completion, once per wait: `true`
    /// when it was armed just now (poll once more: a completion that came first raises no
    /// event), `false` when it already was (wait for readiness) or cannot be.
    pub(crate) fn arm_cq(&mut self) -> bool {
        if self.cq_watch.is_none() || self.cq_armed {
            return false;
        }
        self.cq_armed = self.wire.cq.arm();
        self.cq_armed
    }

    /// Whether the op waits for its completion through the channel (no timer needed).
    pub(crate) fn cq_is_armed(&self) -> bool {
        self.cq_armed
    }

    /// The channel turned readable: takes its events; the next wait arms it again.
    pub(crate) fn cq_event(&mut self) {
        self.wire.cq.take_events();
        self.cq_armed = false;
    }

    /// Takes the channel off the worker's poll (before the CQ and its channel are destroyed).
    fn unwatch_cq(&mut self, io: &mio::Registry) {
        if self.cq_watch.take().is_some()
            && let Some(fd) = self.wire.cq.event_fd()
        {
            let _ = io.deregister(&mut SourceFd(&fd));
        }
    }
}

fn left(end: Instant) -> Option<Duration> {
    let d = end.saturating_duration_since(Instant::now());
    (!d.is_zero()).then_some(d)
}

fn final_failure(e: &FinalError) -> Exchange {
    match e {
        FinalError::Status(s) => Exchange::Failed(status_outcome(*s)),
        FinalError::Protocol => fail(ErrorCode::Protocol, ErrorClass::Integrity, Retry::No),
        FinalError::Integrity => INTEGRITY,
    }
}

/// One CANCEL on a side connection of its own (the exchange's may be mid-answer), bounded
/// by [`CANCEL_BUDGET`] and the op's end (its owner's timer); its outcome does not matter
/// (the session also expires).
#[derive(Debug)]
pub(crate) struct Cancel {
    ctrl: Ctrl,
    pub(crate) end: Instant,
}

impl Cancel {
    /// Starts the CANCEL of `session` under `token`; `None` if no connection could be opened.
    pub(crate) fn start(
        ctx: Ctx<'_>,
        session: &str,
        now: AmzDate,
        end: Instant,
        token: Token,
        io: &mio::Registry,
    ) -> Option<Self> {
        let end = end.min(Instant::now() + CANCEL_BUDGET);
        left(end)?;
        let req = ctx.request(v2::CANCEL_PATH, &v2_client::cancel_headers(session), now)?;
        let mut ctrl = Ctrl::open(ctx.addr, ctx.tls, token, io).ok()?;
        match ctrl.request(&req) {
            Step::Pending => Some(Self { ctrl, end }),
            _ => {
                ctrl.close(io);
                None
            }
        }
    }

    /// Readiness: `true` once the CANCEL is answered or its connection broke.
    pub(crate) fn on_ready(&mut self) -> bool {
        !matches!(self.ctrl.drive(), Step::Pending)
    }

    pub(crate) fn close(self, io: &mio::Registry) {
        self.ctrl.close(io);
    }
}
