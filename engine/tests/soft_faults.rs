//! Soft fabric faults and hostile peers: every refused access leaves memory outside the grant
//! untouched, fails the QP and flushes the rest; dead or stalled peers end in error
//! completions within the timeout, never a hang.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use engine::soft::frame::{
    CONNECT_PAYLOAD, HEADER_LEN, Header, NakCode, Opcode, TRAILER_LEN, decode_header, frame_crc,
    trailer,
};
use engine::soft::{
    Access, Endpoint, MemoryRegion, QpCaps, QpState, RecvWr, RemoteAddr, RtrAttr, RtsAttr, SendOp,
    SendWr, Sge, SoftDevice, SoftPath, WcStatus, WorkCompletion, loopback_pair,
};
use s3_lite::rdma::{RcToken, Transport};

fn reap(ep: &Endpoint, n: usize) -> Vec<WorkCompletion> {
    reap_cq(&ep.cq, n, Duration::from_secs(15))
}

fn reap_cq(cq: &engine::soft::CompletionQueue, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let end = Instant::now() + limit;
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while out.len() < n {
        assert!(
            Instant::now() < end,
            "timed out with {} of {n} completions: {out:?}",
            out.len()
        );
        cq.wait(Duration::from_millis(100));
        let k = cq.poll(&mut buf);
        out.extend_from_slice(&buf[..k]);
    }
    out
}

fn sge(mr: &MemoryRegion, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

fn wait_state(ep: &Endpoint, want: QpState) {
    let end = Instant::now() + Duration::from_secs(10);
    while ep.qp.state() != want {
        assert!(Instant::now() < end, "QP stuck in {:?}", ep.qp.state());
        std::thread::sleep(Duration::from_millis(10));
    }
}

const PAGE: usize = 4096;
const CANARY: u8 = 0xA5;

/// Three pages of canaries; the region registered over the middle one only.
struct Guarded {
    buf: Box<[u8]>,
    mr: MemoryRegion,
}

impl Guarded {
    fn new(ep: &Endpoint, access: Access) -> Self {
        let mut buf = vec![CANARY; 3 * PAGE].into_boxed_slice();
        let ptr = NonNull::new(buf.as_mut_ptr().wrapping_add(PAGE)).unwrap();
        // SAFETY: the middle page of `buf` stays allocated until `Drop` deregisters it, and
        // the test reads `buf` only through `check`, after the QPs failed (no access runs) or
        // through the region's gated accessor.
        let mr = unsafe { ep.pd.register_raw(ptr, PAGE, access) };
        Self { buf, mr }
    }

    fn remote(&self, off: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.mr.addr() + off,
            rkey: self.mr.rkey(),
        }
    }

    /// Every byte (inside and outside the region) is still the canary.
    fn untouched(&self, pd: &engine::soft::ProtectionDomain) {
        pd.deregister(&self.mr).unwrap(); // fence: no access is in progress or can start
        assert!(self.buf.iter().all(|&b| b == CANARY), "a byte changed");
    }
}

fn refused(op: impl Fn(&Guarded) -> SendOp, access: Access) {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let g = Guarded::new(&b, access);
    let src = a.pd.register_owned(2 * PAGE, Access::LOCAL_WRITE).unwrap();
    src.write(0, &vec![0x11; 2 * PAGE]).unwrap();
    // A good write first (to a scratch region), the bad one, then two that must be flushed.
    let ok = b.pd.register_owned(64, Access::REMOTE_WRITE).unwrap();
    let ok_r = RemoteAddr {
        addr: ok.addr(),
        rkey: ok.rkey(),
    };
    a.qp.post_send(&SendWr::new(1, SendOp::Write(ok_r), sge(&src, 0, 64)))
        .unwrap();
    a.qp.post_send(&SendWr::new(2, op(&g), sge(&src, 0, 32)))
        .unwrap();
    a.qp.post_send(&SendWr::new(3, SendOp::Write(ok_r), sge(&src, 0, 64)))
        .unwrap();
    a.qp.post_send(&SendWr::new(4, SendOp::Write(ok_r), sge(&src, 0, 64)))
        .unwrap();
    let wc = reap(&a, 4);
    let st: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        [
            (1, WcStatus::Success),
            (2, WcStatus::RemoteAccessError),
            (3, WcStatus::WrFlushError),
            (4, WcStatus::WrFlushError)
        ]
    );
    wait_state(&a, QpState::Err);
    wait_state(&b, QpState::Err);
    // Later work requests are flushed at once.
    a.qp.post_send(&SendWr::new(5, SendOp::Write(ok_r), sge(&src, 0, 1)))
        .unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::WrFlushError);
    g.untouched(&b.pd);
}

#[test]
fn write_past_the_region_end_is_refused_and_touches_nothing() {
    refused(
        |g| SendOp::Write(g.remote(PAGE as u64 - 16)),
        Access::REMOTE_WRITE,
    );
}

#[test]
fn write_before_the_region_start_is_refused() {
    refused(
        |g| {
            SendOp::Write(RemoteAddr {
                addr: g.mr.addr() - 8,
                rkey: g.mr.rkey(),
            })
        },
        Access::REMOTE_WRITE,
    );
}

#[test]
fn wrong_rkey_is_refused() {
    refused(
        |g| {
            SendOp::Write(RemoteAddr {
                addr: g.mr.addr(),
                rkey: g.mr.rkey() ^ 0x5a5a,
            })
        },
        Access::REMOTE_WRITE,
    );
}

#[test]
fn write_without_remote_write_access_is_refused() {
    refused(|g| SendOp::Write(g.remote(0)), Access::REMOTE_READ);
}

#[test]
fn read_without_remote_read_access_is_refused() {
    refused(|g| SendOp::Read(g.remote(0)), Access::REMOTE_WRITE);
}

#[test]
fn write_with_imm_past_the_end_is_refused_before_any_rnr_wait() {
    refused(
        |g| SendOp::WriteWithImm(g.remote(PAGE as u64), 1),
        Access::REMOTE_WRITE,
    );
}

#[test]
fn rekey_makes_a_late_write_fail() {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let win = b.pd.register_owned(PAGE, Access::REMOTE_WRITE).unwrap();
    let src = a.pd.register_owned(PAGE, Access::NONE).unwrap();
    src.write(0, &[7; PAGE]).unwrap();
    let old = RemoteAddr {
        addr: win.addr(),
        rkey: win.rkey(),
    };
    a.qp.post_send(&SendWr::new(1, SendOp::Write(old), sge(&src, 0, 100)))
        .unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::Success);
    // The GET failed: re-key the window. A late write with the old key must not land.
    let new = b.pd.rekey(&win).unwrap();
    assert_ne!(new, old.rkey);
    assert_eq!(win.rkey(), new);
    a.qp.post_send(&SendWr::new(
        2,
        SendOp::Write(old),
        sge(&src, 0, PAGE as u32),
    ))
    .unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::RemoteAccessError);
    let mut want = vec![0u8; PAGE];
    want[..100].fill(7);
    assert_eq!(win.to_vec(0, PAGE).unwrap(), want);
}

#[test]
fn new_rkey_works_after_rekey_on_a_fresh_pair() {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let win = b.pd.register_owned(PAGE, Access::REMOTE_WRITE).unwrap();
    b.pd.rekey(&win).unwrap();
    let src = a.pd.register_owned(PAGE, Access::NONE).unwrap();
    src.write(0, &[3; 10]).unwrap();
    let r = RemoteAddr {
        addr: win.addr(),
        rkey: win.rkey(),
    };
    a.qp.post_send(&SendWr::new(1, SendOp::Write(r), sge(&src, 0, 10)))
        .unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::Success);
    assert_eq!(win.to_vec(0, 10).unwrap(), vec![3; 10]);
}

#[test]
fn missing_recv_ends_in_rnr_error() {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let win = b.pd.register_owned(PAGE, Access::REMOTE_WRITE).unwrap();
    let src = a.pd.register_owned(PAGE, Access::NONE).unwrap();
    let r = RemoteAddr {
        addr: win.addr(),
        rkey: win.rkey(),
    };
    let t0 = Instant::now();
    a.qp.post_send(&SendWr::new(
        1,
        SendOp::WriteWithImm(r, 9),
        sge(&src, 0, 10),
    ))
    .unwrap();
    assert_eq!(reap(&a, 1)[0].status, WcStatus::RnrRetryExceeded);
    assert!(t0.elapsed() < Duration::from_secs(5));
    // A RECV posted on b while it was failing is flushed, never completed successfully.
    wait_state(&b, QpState::Err);
    b.qp.post_recv(&RecvWr {
        wr_id: 8,
        sge: None,
    })
    .unwrap();
    assert_eq!(reap(&b, 1)[0].status, WcStatus::WrFlushError);
}

#[test]
fn peer_killed_mid_transfer_ends_every_request_in_error() {
    let (a, b) = loopback_pair(QpCaps::default()).unwrap();
    let len = 8 << 20;
    let win = b.pd.register_owned(len, Access::REMOTE_WRITE).unwrap();
    let src = a.pd.register_owned(len, Access::NONE).unwrap();
    let r = RemoteAddr {
        addr: win.addr(),
        rkey: win.rkey(),
    };
    for i in 0..64 {
        a.qp.post_send(&SendWr::new(i, SendOp::Write(r), sge(&src, 0, len as u32)))
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    let t0 = Instant::now();
    drop(b); // the peer's QP and connection go away with data in flight
    let wc = reap(&a, 64);
    assert!(t0.elapsed() < Duration::from_secs(10));
    let failed = wc.iter().filter(|w| w.status != WcStatus::Success).count();
    assert!(failed > 0, "killing the peer must fail something");
    // Completions are in order: successes, then one RetryExceeded, then flushes.
    let first_bad = wc
        .iter()
        .position(|w| w.status != WcStatus::Success)
        .unwrap();
    assert_eq!(wc[first_bad].status, WcStatus::RetryExceeded);
    assert!(
        wc[first_bad + 1..]
            .iter()
            .all(|w| w.status == WcStatus::WrFlushError)
    );
    assert_eq!(a.qp.state(), QpState::Err);
}

/// An RC token naming `qpn` and nothing else.
fn rc(qpn: u32) -> RcToken {
    RcToken {
        transport: Transport::Rc,
        qpn,
        gid: [0; 16],
        rkey: 0,
        addr: 0,
        length: 0,
        port: 1,
        lid: 0,
    }
}

/// A fake peer device: accepts one dial, answers CONNECT_ACK for `qpn`, returns the socket.
fn fake_passive(qpn: u32) -> (SocketAddr, std::thread::JoinHandle<TcpStream>) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; HEADER_LEN + 44];
        s.read_exact(&mut buf).unwrap();
        let h = decode_header(&buf).unwrap();
        assert_eq!((h.opcode, h.aux), (Opcode::Connect, u64::from(qpn)));
        let tok = rc(qpn);
        let ack = Header {
            len: CONNECT_PAYLOAD,
            ..Header::new(Opcode::ConnectAck, 0)
        };
        s.write_all(&ack.encode()).unwrap();
        s.write_all(&tok.to_bytes()).unwrap();
        s
    });
    (addr, t)
}

/// A QP on `dev` dialled to a fake peer that completes the handshake and then never reads or
/// answers; returns the QP (in `Rts` with `timeout`), its CQ and domain, and the peer's socket
/// (held open by the caller).
fn dial_stalled_peer(
    dev: &SoftDevice,
    timeout: Duration,
) -> (
    engine::soft::QueuePair,
    std::sync::Arc<engine::soft::CompletionQueue>,
    engine::soft::ProtectionDomain,
    TcpStream,
) {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq();
    let qp = dev.create_qp(&pd, &cq, &cq, QpCaps::default());
    qp.modify_to_init(Access::REMOTE_WRITE).unwrap();
    let (addr, peer) = fake_passive(0x1234);
    let mut rtr = RtrAttr::from_token(
        &RcToken {
            qpn: 0x1234,
            gid: [0; 16],
            ..qp.local_token(None).unwrap()
        },
        1,
        SoftPath::Connect(addr),
    );
    rtr.connect_timeout = Duration::from_secs(5);
    qp.modify_to_rtr(&rtr).unwrap();
    qp.modify_to_rts(&RtsAttr { sq_psn: 1, timeout }).unwrap();
    let held = peer.join().unwrap();
    (qp, cq, pd, held)
}

/// Posts `n` WRITEs of 32 MiB each from a fresh region of `pd` to a remote address the fake
/// peer never checks.
fn post_big_writes(qp: &engine::soft::QueuePair, pd: &engine::soft::ProtectionDomain, n: u64) {
    let src = pd.register_owned(32 << 20, Access::NONE).unwrap();
    let r = RemoteAddr {
        addr: 0x1000,
        rkey: 1,
    };
    for i in 0..n {
        qp.post_send(&SendWr::new(
            i,
            SendOp::Write(r),
            Sge {
                addr: src.addr(),
                length: 32 << 20,
                lkey: src.lkey(),
            },
        ))
        .unwrap();
    }
}

#[test]
fn stalled_peer_times_out_with_retry_exceeded() {
    let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
    let (qp, cq, pd, _held) = dial_stalled_peer(&dev, Duration::from_secs(1));
    let t0 = Instant::now();
    post_big_writes(&qp, &pd, 4);
    let wc = reap_cq(&cq, 4, Duration::from_secs(10));
    assert!(
        t0.elapsed() < Duration::from_secs(6),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(wc[0].status, WcStatus::RetryExceeded);
    assert!(wc[1..].iter().all(|w| w.status == WcStatus::WrFlushError));
    assert_eq!(qp.state(), QpState::Err);
}

/// A responder QP on `device` (which listens) in `Rts`, waiting for `qpn_peer` to dial.
fn responder_on(device: &SoftDevice, qpn_peer: u32, psn: u32) -> Endpoint {
    let pd = device.alloc_pd();
    let cq = device.create_cq();
    let qp = device.create_qp(&pd, &cq, &cq, QpCaps::default());
    qp.modify_to_init(Access::REMOTE_WRITE | Access::REMOTE_READ)
        .unwrap();
    let peer = RcToken {
        qpn: qpn_peer,
        gid: [0; 16],
        ..qp.local_token(None).unwrap()
    };
    qp.connect(&peer, psn, 1, SoftPath::Accept).unwrap();
    Endpoint {
        qp,
        cq,
        pd,
        device: device.clone(),
    }
}

/// A hostile initiator that sends a 1 MiB WRITE header into `win` and only the first 1,000
/// bytes of its payload, then stalls (the responder is mid-frame).
fn stall_mid_frame(dev: &SoftDevice, b: &Endpoint, win: &MemoryRegion, psn: u32) -> TcpStream {
    let mut s = hostile_initiator(dev, b.qp.qpn());
    let h = Header {
        flags: 3,
        len: 1 << 20,
        rkey: win.rkey(),
        addr: win.addr(),
        ..Header::new(Opcode::Write, psn)
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&[0xEE; 1000]).unwrap();
    s
}

/// Every QP of a device is served by its I/O threads, here one: peers that stall (one never
/// reads the 4 × 32 MiB our QP writes to it, one stops mid-frame of its own WRITE, one dialer
/// sends half a CONNECT) hold only their own QP's state, never the thread. A healthy QP on the
/// same thread completes 50 WRITE round trips meanwhile (in milliseconds; the bound leaves room
/// for a loaded machine), and the stalled QPs are still waiting for their 30 s timeout. (A
/// thread that blocked on one peer, as a shared pool of blocking per-QP loops would, holds the
/// healthy QP until that timeout: the test fails then.)
#[test]
fn a_stalled_peer_does_not_delay_another_qp_on_the_same_io_thread() {
    let a = SoftDevice::with_io_threads(Ipv4Addr::LOCALHOST, 1);
    let a_addr = a
        .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    // Half a CONNECT, then nothing: the listener serves the next dialer anyway.
    let mut half = TcpStream::connect(a_addr).unwrap();
    half.write_all(&Header::new(Opcode::Connect, 0).encode()[..7])
        .unwrap();
    // Our writes to a peer that never reads: the socket's buffers fill, the frame waits.
    let (qp1, cq1, pd1, _held) = dial_stalled_peer(&a, Duration::from_secs(30));
    post_big_writes(&qp1, &pd1, 4);
    // A peer stopping mid-frame of its WRITE to our responder.
    let b3 = responder_on(&a, 0x777, 100);
    let win3 = b3.pd.register_owned(1 << 20, Access::REMOTE_WRITE).unwrap();
    let _mid = stall_mid_frame(&a, &b3, &win3, 100);
    // A healthy pair: QP2 on the same device (so the same thread) and a peer device.
    let peer = SoftDevice::new(Ipv4Addr::LOCALHOST);
    let peer_addr = peer
        .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    let pd2 = a.alloc_pd();
    let cq2 = a.create_cq();
    let qp2 = a.create_qp(&pd2, &cq2, &cq2, QpCaps::default());
    qp2.modify_to_init(Access::NONE).unwrap();
    let pdb = peer.alloc_pd();
    let cqb = peer.create_cq();
    let qpb = peer.create_qp(&pdb, &cqb, &cqb, QpCaps::default());
    qpb.modify_to_init(Access::REMOTE_WRITE).unwrap();
    qpb.connect(&qp2.local_token(None).unwrap(), 7, 9, SoftPath::Accept)
        .unwrap();
    qp2.connect(
        &qpb.local_token(None).unwrap(),
        9,
        7,
        SoftPath::Connect(peer_addr),
    )
    .unwrap();
    let src = pd2.register_owned(64 << 10, Access::NONE).unwrap();
    src.write(0, &[0x5A; 64 << 10]).unwrap();
    let dst = pdb.register_owned(64 << 10, Access::REMOTE_WRITE).unwrap();
    let t0 = Instant::now();
    for i in 0..50 {
        let r = RemoteAddr {
            addr: dst.addr(),
            rkey: dst.rkey(),
        };
        qp2.post_send(&SendWr::new(i, SendOp::Write(r), sge(&src, 0, 64 << 10)))
            .unwrap();
        let wc = reap_cq(&cq2, 1, Duration::from_secs(15));
        assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "50 round trips beside stalled peers took {took:?}"
    );
    assert_eq!(dst.to_vec(0, 16).unwrap(), vec![0x5A; 16]);
    // The stalled QPs still wait: the healthy one did not wait for them.
    assert!(cq1.is_empty(), "the stalled QP completed early");
    assert_eq!(qp1.state(), QpState::Rts);
    assert_eq!(b3.qp.state(), QpState::Rts);
}

/// Destroying a QP whose peer stalls returns within the teardown's bound (the answers' drain,
/// 250 ms, and the I/O thread's acknowledgement, 2 s, at most; at once here), with every posted WRITE
/// flushed; a responder stopped mid-frame likewise, and after it nothing more lands in its
/// window.
#[test]
fn teardown_while_a_peer_stalls_returns_within_its_bound() {
    let a = SoftDevice::with_io_threads(Ipv4Addr::LOCALHOST, 1);
    a.listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    let (qp, cq, pd, _held) = dial_stalled_peer(&a, Duration::from_secs(30));
    post_big_writes(&qp, &pd, 4);
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    drop(qp);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(2), "teardown took {took:?}");
    let wc = reap_cq(&cq, 4, Duration::from_secs(2));
    assert!(
        wc.iter().all(|w| w.status == WcStatus::WrFlushError),
        "{wc:?}"
    );

    let b = responder_on(&a, 0x777, 100);
    let win = b.pd.register_owned(1 << 20, Access::REMOTE_WRITE).unwrap();
    let mut s = stall_mid_frame(&a, &b, &win, 100);
    std::thread::sleep(Duration::from_millis(200));
    let (pd_b, qp_b) = (b.pd.clone(), b.qp);
    let t0 = Instant::now();
    drop(qp_b);
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(2), "teardown took {took:?}");
    // The rest of the frame, after the teardown: the socket is closed, nothing lands.
    let _ = s.write_all(&[0xEE; 64 << 10]);
    std::thread::sleep(Duration::from_millis(100));
    let rest = win.to_vec(1000, (1 << 20) - 1000).unwrap();
    assert!(rest.iter().all(|&b| b == 0), "bytes landed after teardown");
    pd_b.deregister(&win).unwrap();
}

/// A hostile initiator speaking the wire directly to a real responder QP.
fn hostile_initiator(b: &SoftDevice, b_qpn: u32) -> TcpStream {
    let mut s = TcpStream::connect(b.local_addr().unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let me = rc(0x777);
    let h = Header {
        len: CONNECT_PAYLOAD,
        aux: u64::from(b_qpn),
        ..Header::new(Opcode::Connect, 0)
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&me.to_bytes()).unwrap();
    let mut buf = [0u8; HEADER_LEN + 44];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(decode_header(&buf).unwrap().opcode, Opcode::ConnectAck);
    s
}

fn responder(qpn_peer: u32, psn: u32) -> (SoftDevice, Endpoint) {
    let device = SoftDevice::new(Ipv4Addr::LOCALHOST);
    device
        .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .unwrap();
    let ep = responder_on(&device, qpn_peer, psn);
    (device, ep)
}

fn expect_nak(s: &mut TcpStream, code: NakCode) {
    let mut buf = [0u8; HEADER_LEN];
    s.read_exact(&mut buf).unwrap();
    let h = decode_header(&buf).unwrap();
    assert_eq!(
        (h.opcode, NakCode::from_u64(h.aux)),
        (Opcode::Nak, Some(code))
    );
}

#[test]
fn hostile_write_frame_outside_the_grant_is_nakked_and_drained() {
    let (dev, b) = responder(0x777, 100);
    let g = Guarded::new(&b, Access::REMOTE_WRITE);
    let mut s = hostile_initiator(&dev, b.qp.qpn());
    // 4 KiB claimed at the region's last byte: the header is refused, the payload drained.
    let h = Header {
        flags: 3,
        len: PAGE as u32,
        rkey: g.mr.rkey(),
        addr: g.mr.addr() + PAGE as u64 - 1,
        ..Header::new(Opcode::Write, 100)
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&[0xEE; PAGE]).unwrap();
    expect_nak(&mut s, NakCode::RemoteAccess);
    drop(s);
    wait_state(&b, QpState::Err);
    g.untouched(&b.pd);
}

#[test]
fn hostile_frames_wrong_psn_and_garbage_are_nakked() {
    let (dev, b) = responder(0x777, 100);
    let g = Guarded::new(&b, Access::REMOTE_WRITE);
    let mut s = hostile_initiator(&dev, b.qp.qpn());
    let h = Header {
        flags: 3,
        len: 8,
        rkey: g.mr.rkey(),
        addr: g.mr.addr(),
        ..Header::new(Opcode::Write, 101)
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&[0xEE; 8]).unwrap();
    expect_nak(&mut s, NakCode::Sequence);
    drop(s);
    wait_state(&b, QpState::Err);

    let (dev, b2) = responder(0x777, 5);
    let g2 = Guarded::new(&b2, Access::REMOTE_WRITE);
    let mut s = hostile_initiator(&dev, b2.qp.qpn());
    s.write_all(&[0xFF; HEADER_LEN]).unwrap();
    expect_nak(&mut s, NakCode::InvalidRequest);
    drop(s);
    wait_state(&b2, QpState::Err);
    g.untouched(&b.pd);
    g2.untouched(&b2.pd);
}

#[test]
fn connect_to_unknown_or_wrong_peer_is_refused() {
    let (dev, b) = responder(0x999, 1); // expects QPN 0x999, the hostile one says 0x777
    let mut s = TcpStream::connect(dev.local_addr().unwrap()).unwrap();
    let me = rc(0x777);
    let h = Header {
        len: CONNECT_PAYLOAD,
        aux: u64::from(b.qp.qpn()),
        ..Header::new(Opcode::Connect, 0)
    };
    s.write_all(&h.encode()).unwrap();
    s.write_all(&me.to_bytes()).unwrap();
    expect_nak(&mut s, NakCode::ConnectRefused);
    assert_eq!(
        b.qp.state(),
        QpState::Rts,
        "a refused dial must not disturb the QP"
    );
}

/// Posts one signalled 4 KiB WRITE per `ids` from a fresh region of `pd`.
fn post_small_writes(
    qp: &engine::soft::QueuePair,
    pd: &engine::soft::ProtectionDomain,
    ids: &[u64],
) {
    let src = pd.register_owned(4096, Access::NONE).unwrap();
    for &id in ids {
        qp.post_send(&SendWr::new(
            id,
            SendOp::Write(RemoteAddr {
                addr: 0x1000,
                rkey: 1,
            }),
            sge(&src, 0, 4096),
        ))
        .unwrap();
    }
}

/// `modify_to_rtr` with `SoftPath::Connect` returns at once whatever the peer does (the
/// device's I/O thread dials); sends posted meanwhile wait, and a dial that fails flushes them
/// and leaves the QP in `Err` with the error `modify_to_rtr` used to return: a listener that
/// accepts and never answers `CONNECT` (`Connect`, after `connect_timeout`), a device that
/// has no such QP (`Refused`), an address where nothing listens (`Connect`).
#[test]
fn a_failed_dial_fails_the_qp_and_flushes_what_was_posted() {
    use engine::soft::QpError;
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_addr = hole.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in hole.incoming().flatten() {
            held.push(s);
        }
    });
    let other = SoftDevice::new(Ipv4Addr::LOCALHOST);
    let other_addr = other.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let bound = Duration::from_millis(300);
    let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
    for (addr, want_refused, least) in [
        (hole_addr, false, bound),
        (other_addr, true, Duration::ZERO),
        (closed, false, Duration::ZERO),
    ] {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq();
        let qp = dev.create_qp(&pd, &cq, &cq, QpCaps::default());
        qp.modify_to_init(Access::NONE).unwrap();
        let mut rtr = RtrAttr::from_token(&rc(0x4321), 1, SoftPath::Connect(addr));
        rtr.connect_timeout = bound;
        let t = Instant::now();
        qp.modify_to_rtr(&rtr).unwrap();
        // A dial that fails at once (nothing listens; the peer refuses) may have moved the QP
        // to `Err` already, and RTS from `Err` is refused; posts in `Err` flush all the same.
        // The listener that never answers holds the dial for `bound`: RTS comes first there.
        match qp.modify_to_rts(&RtsAttr::new(1)) {
            Ok(()) => {}
            Err(QpError::InvalidTransition {
                from: QpState::Err, ..
            }) if least.is_zero() => {}
            Err(e) => panic!("{addr}: RTS: {e:?}"),
        }
        post_small_writes(&qp, &pd, &[1, 2]);
        let returned = t.elapsed();
        assert!(
            returned < Duration::from_millis(100),
            "{addr}: RTR, RTS and the posts took {returned:?}"
        );
        let wcs = reap_cq(&cq, 2, Duration::from_secs(5));
        let failed = t.elapsed();
        assert!(
            wcs.iter().all(|w| w.status == WcStatus::WrFlushError),
            "{addr}: {wcs:?}"
        );
        assert_eq!(qp.state(), QpState::Err, "{addr}");
        assert!(!qp.is_connecting(), "{addr}");
        match qp.connect_error() {
            Some(QpError::Refused) => assert!(want_refused, "{addr}: refused"),
            Some(QpError::Connect(e)) => assert!(!want_refused, "{addr}: {e}"),
            e => panic!("{addr}: {e:?}"),
        }
        assert!(
            failed >= least && failed < least + Duration::from_secs(1),
            "{addr}: the dial failed after {failed:?}"
        );
    }
}

/// Reads one request frame (header, payload, trailer) a requester QP sent the fake peer.
fn read_request(s: &mut TcpStream) -> Header {
    let mut buf = [0u8; HEADER_LEN];
    s.read_exact(&mut buf).unwrap();
    let h = decode_header(&buf).unwrap();
    let rest = h.len as usize + if h.has_trailer() { TRAILER_LEN } else { 0 };
    let mut payload = vec![0u8; rest];
    s.read_exact(&mut payload).unwrap();
    h
}

/// A requester takes a peer's answers as an RC requester does: a READ response acknowledges
/// the WRITE before it (its ACK never sent), and an ACK that comes after for that WRITE, a
/// duplicate, is dropped; an ACK for a PSN never sent still fails the QP.
#[test]
fn a_read_response_acknowledges_the_write_before_it_and_a_late_ack_is_dropped() {
    let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
    let (qp, cq, pd, mut peer) = dial_stalled_peer(&dev, Duration::from_secs(5));
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let src = pd.register_owned(PAGE, Access::NONE).unwrap();
    let back = pd.register_owned(PAGE, Access::LOCAL_WRITE).unwrap();
    let far = RemoteAddr {
        addr: 0x1000,
        rkey: 1,
    };
    qp.post_send(&SendWr::new(1, SendOp::Write(far), sge(&src, 0, 512)))
        .unwrap();
    qp.post_send(&SendWr::new(2, SendOp::Read(far), sge(&back, 0, 8)))
        .unwrap();
    let write = read_request(&mut peer);
    let read = read_request(&mut peer);
    assert_eq!(
        (write.opcode, read.opcode),
        (Opcode::Write, Opcode::ReadReq)
    );

    // The READ's answer alone: both complete, in order.
    let resp = Header {
        flags: 3,
        len: 8,
        ..Header::new(Opcode::ReadResp, read.psn)
    };
    let head = resp.encode();
    let mut crc = frame_crc(&head);
    crc.update(b"answered");
    peer.write_all(&head).unwrap();
    peer.write_all(b"answered").unwrap();
    peer.write_all(&trailer(&crc)).unwrap();
    let wc = reap_cq(&cq, 2, Duration::from_secs(10));
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(back.to_vec(0, 8).unwrap(), b"answered");

    // The WRITE's ACK, late: dropped, the QP carries on.
    peer.write_all(&Header::new(Opcode::Ack, write.psn).encode())
        .unwrap();
    qp.post_send(&SendWr::new(3, SendOp::Write(far), sge(&src, 0, 64)))
        .unwrap();
    let third = read_request(&mut peer);
    peer.write_all(&Header::new(Opcode::Ack, third.psn).encode())
        .unwrap();
    let wc = reap_cq(&cq, 1, Duration::from_secs(10));
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
    assert_eq!(qp.state(), QpState::Rts);

    // An ACK for a PSN not sent yet: a broken peer, the QP fails.
    qp.post_send(&SendWr::new(4, SendOp::Write(far), sge(&src, 0, 64)))
        .unwrap();
    let fourth = read_request(&mut peer);
    peer.write_all(&Header::new(Opcode::Ack, fourth.psn + 5).encode())
        .unwrap();
    let wc = reap_cq(&cq, 1, Duration::from_secs(10));
    assert_eq!((wc[0].wr_id, wc[0].status), (4, WcStatus::BadResponse));
    assert_eq!(qp.state(), QpState::Err);
}
