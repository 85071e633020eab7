//! Soft fabric faults and hostile peers: every refused access leaves memory outside the grant
//! untouched, fails the QP and flushes the rest; dead or stalled peers end in error
//! completions within the timeout, never a hang.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use engine::soft::frame::{CONNECT_PAYLOAD, HEADER_LEN, Header, NakCode, Opcode, decode_header};
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

#[test]
fn stalled_peer_times_out_with_retry_exceeded() {
    let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
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
    qp.modify_to_rts(&RtsAttr {
        sq_psn: 1,
        timeout: Duration::from_secs(1),
    })
    .unwrap();
    let _held = peer.join().unwrap(); // never reads, never answers
    let src = pd.register_owned(32 << 20, Access::NONE).unwrap();
    let r = RemoteAddr {
        addr: 0x1000,
        rkey: 1,
    };
    let t0 = Instant::now();
    for i in 0..4 {
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
    (device.clone(), Endpoint { qp, cq, pd, device })
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
