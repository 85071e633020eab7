//! Pairing and hipobj-rc-v2 exchanges are step machines on the worker, never blocking it: an
//! endpoint that accepts the pairing request (or a PREPARE) and never answers it does not hold
//! up the worker's other operations — neither its HTTP ops nor its other v2 exchanges, which
//! run to the end over RDMA meanwhile — and `Fabric::Auto` (the default) sends its ops over
//! HTTP after a short wait. Also: an op aborted at its deadline while its v2 exchange is
//! granted has its window closed, so the server's late RDMA WRITE is refused and no byte of
//! the buffer changes; and a soft GET answered early whose bytes never land waits for them,
//! never succeeding on the answer alone.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine::soft::{
    Access, QpCaps, RemoteAddr, RtrAttr, RtsAttr, SendOp, SendWr, Sge, SoftDevice, SoftPath,
    WcStatus, WorkCompletion,
};
use engine::{Dialect, Engine, EngineBuilder, Fabric, Placement, RegisterOptions, RetryPolicy};
use ring_api::opcode::{Head, Put, RangeGet};
use ring_api::{BufSlice, Cqe, DataPath, ErrorCode};
use s3_lite::credentials::Credentials;
use s3_lite::rdma::RcToken;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + (i >> 8)) as u8).collect()
}

/// One request head: the request line under `:line`, then lower-cased headers.
fn head_of(s: &mut TcpStream) -> Option<HashMap<String, String>> {
    let mut raw = Vec::new();
    let mut b = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).ok()? == 0 {
            return None;
        }
        raw.push(b[0]);
    }
    let text = String::from_utf8(raw).ok()?;
    let mut lines = text.split("\r\n");
    let mut h = HashMap::new();
    h.insert(":line".to_owned(), lines.next()?.to_owned());
    for l in lines.filter(|l| !l.is_empty()) {
        let (n, v) = l.split_once(':')?;
        h.insert(n.trim().to_ascii_lowercase(), v.trim().to_owned());
    }
    Some(h)
}

fn answer(s: &mut TcpStream, status: u16, headers: &[(&str, String)], body: &[u8]) {
    let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = s.write_all(out.as_bytes());
    let _ = s.write_all(body);
}

/// What the fake server saw.
#[derive(Default)]
struct Seen {
    /// Requests it holds without answering (pairing / stalled PREPARE).
    held: AtomicUsize,
    /// Held connections the client closed.
    held_closed: AtomicUsize,
    /// Objects stored by PUT.
    puts: Mutex<HashMap<String, Vec<u8>>>,
}

/// Pushes a RangeGet of the first `len` bytes of `stall` into `buf` (user_data 1, deadline
/// `deadline`) and waits until the stalling front holds its PREPARE; returns when it pushed.
fn push_held_prepare(
    q: &mut engine::Queue,
    stall: ring_api::ObjectId,
    buf: ring_api::BufHandle,
    len: u64,
    deadline: Duration,
    seen: &Seen,
) -> Instant {
    let t0 = Instant::now();
    q.push(
        &RangeGet::new(stall, 0, BufSlice::new(buf, 0, len))
            .user_data(1)
            .deadline_ns(deadline.as_nanos() as u64)
            .build(),
    )
    .unwrap();
    while seen.held.load(Ordering::SeqCst) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "PREPARE never came");
        std::thread::sleep(Duration::from_millis(2));
    }
    t0
}

/// Holds `s` without answering until the client closes it.
fn hold(mut s: TcpStream, seen: &Seen) {
    seen.held.fetch_add(1, Ordering::SeqCst);
    let mut b = [0u8; 64];
    while matches!(s.read(&mut b), Ok(n) if n > 0) {}
    seen.held_closed.fetch_add(1, Ordering::SeqCst);
}

/// A plain S3 answer for GET (with a range), HEAD and PUT.
fn plain(s: &mut TcpStream, h: &HashMap<String, String>, data: &[u8], seen: &Seen) -> bool {
    let line = &h[":line"];
    let path = line.split(' ').nth(1).unwrap_or("").to_owned();
    if line.starts_with("GET ") {
        let range = h.get("range").cloned().unwrap_or_default();
        let (a, b) = range.trim_start_matches("bytes=").split_once('-').unwrap();
        let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
        let cr = format!("bytes {a}-{b}/{}", data.len());
        answer(s, 206, &[("Content-Range", cr)], &data[a..=b]);
    } else if line.starts_with("HEAD ") {
        let out = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nETag: \"h\"\r\n\r\n",
            data.len()
        );
        let _ = s.write_all(out.as_bytes());
    } else if line.starts_with("PUT ") {
        let n: usize = h["content-length"].parse().unwrap();
        let mut body = vec![0u8; n];
        if s.read_exact(&mut body).is_err() {
            return false;
        }
        seen.puts.lock().unwrap().insert(path, body);
        answer(s, 200, &[("ETag", "\"p\"".to_owned())], b"");
    } else {
        answer(s, 400, &[], b"");
    }
    true
}

/// Serves `serve` on every connection of a fresh listener.
fn server(serve: impl Fn(TcpStream) + Send + Sync + 'static) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let f = Arc::clone(&serve);
            std::thread::spawn(move || f(s));
        }
    });
    a
}

/// A plain S3 server whose connect route accepts the pairing request and never answers.
fn black_hole_pairing(data: Arc<Vec<u8>>, seen: Arc<Seen>) -> SocketAddr {
    server(move |mut s| {
        while let Some(h) = head_of(&mut s) {
            if h[":line"].starts_with("POST /.hipobj/rc/connect") {
                hold(s, &seen);
                return;
            }
            if !plain(&mut s, &h, &data, &seen) {
                return;
            }
        }
    })
}

fn builder(addr: SocketAddr) -> EngineBuilder {
    Engine::builder()
        .endpoint_url(format!("http://{addr}"))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .connections_per_worker(4)
        .retry(RetryPolicy::new(
            1,
            Duration::from_millis(5),
            Duration::from_millis(20),
        ))
}

/// Waits for `n` completions (at most `limit`), returning them by `user_data`.
fn reap(q: &mut engine::Queue, n: usize, limit: Duration) -> HashMap<u64, Cqe> {
    let end = Instant::now() + limit;
    let mut got = HashMap::new();
    while got.len() < n && Instant::now() < end {
        q.wait(1, Some(Duration::from_millis(20)));
        for c in q.completion() {
            got.insert(c.user_data(), c);
        }
    }
    got
}

#[test]
fn auto_is_the_default() {
    assert_eq!(Fabric::default(), Fabric::Auto);
}

/// `Auto` (the default, not set here) against an endpoint whose pairing hangs: range-gets, a
/// PUT and a HEAD of the same worker all complete over HTTP well under a second, byte-exact,
/// while the pairing request is still held; a second batch does not wait at all.
#[test]
fn hanging_pairing_does_not_hold_up_http_ops() {
    let data = Arc::new(pattern(600_000));
    let seen = Arc::new(Seen::default());
    let addr = black_hole_pairing(Arc::clone(&data), Arc::clone(&seen));
    let engine = builder(addr).build().unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let src = engine
        .register_host(64 * 1024, RegisterOptions::pageable())
        .unwrap();
    let payload = pattern(50_000);
    engine.copy_in(src, 0, &payload).unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let out = engine.object("bkt", "new").unwrap();
    let mut q = engine.queue(16).unwrap();

    for round in 0..2u64 {
        let t = Instant::now();
        let base = round * 10;
        for i in 0..3u64 {
            let off = i * 100_000 + round * 7;
            q.push(
                &RangeGet::new(obj, off, BufSlice::new(buf, i * 100_000, 90_000))
                    .user_data(base + i)
                    .build(),
            )
            .unwrap();
        }
        q.push(
            &Put::new(out, BufSlice::new(src, 0, payload.len() as u64))
                .user_data(base + 3)
                .build(),
        )
        .unwrap();
        q.push(&Head::new(obj).user_data(base + 4).build()).unwrap();
        let got = reap(&mut q, 5, Duration::from_secs(10));
        let took = t.elapsed();
        assert_eq!(got.len(), 5, "round {round}: {got:?}");
        assert!(
            took < Duration::from_secs(1),
            "round {round}: ops took {took:?} while pairing hangs"
        );
        for i in 0..5 {
            let c = got[&(base + i)];
            assert!(c.is_ok(), "round {round} op {i}: {c:?}");
            assert_eq!(c.path(), Some(DataPath::Http), "round {round} op {i}");
        }
        for i in 0..3u64 {
            let off = (i * 100_000 + round * 7) as usize;
            let want = &data[off..off + 90_000];
            let start = i * 100_000;
            let have = engine.read(buf, start, 90_000).unwrap();
            assert!(*have == *want, "round {round} range {i} bytes");
        }
        assert_eq!(got[&(base + 4)].aux(), data.len() as u64, "HEAD size");
        assert_eq!(
            seen.puts.lock().unwrap().get("/bkt/new"),
            Some(&payload),
            "round {round}: stored object"
        );
    }
    // One pairing tried, still held (it is bounded by 5 s on its own thread).
    assert_eq!(seen.held.load(Ordering::SeqCst), 1);
    assert_eq!(seen.held_closed.load(Ordering::SeqCst), 0);
}

/// hipobj-rc-v2: PREPAREs naming `stall` are held unanswered; the others are refused (`501`),
/// so those ops go over HTTP. A stalled PREPARE does not block the worker's other ops; at its
/// deadline the stalled op ends `TimedOut` and its exchange connection is closed.
#[test]
fn stalled_prepare_does_not_block_other_ops() {
    let data = Arc::new(pattern(400_000));
    let seen = Arc::new(Seen::default());
    let (d, sn) = (Arc::clone(&data), Arc::clone(&seen));
    let addr = server(move |mut s| {
        while let Some(h) = head_of(&mut s) {
            if h[":line"].starts_with("POST /.hipobj-rc/prepare") {
                if h.values().any(|v| v.contains("stall")) {
                    hold(s, &sn);
                    return;
                }
                answer(
                    &mut s,
                    501,
                    &[("X-Amz-Rdma-Protocol-Status", "unsupported".to_owned())],
                    b"",
                );
            } else if !plain(&mut s, &h, &d, &sn) {
                return;
            }
        }
    });
    let engine = builder(addr)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let stall = engine.object("bkt", "stall").unwrap();
    let fine = engine.object("bkt", "fine").unwrap();
    let mut q = engine.queue(16).unwrap();

    let t0 = push_held_prepare(&mut q, stall, buf, 100_000, Duration::from_secs(2), &seen);
    let t = Instant::now();
    for i in 0..3u64 {
        q.push(
            &RangeGet::new(
                fine,
                1000 * i,
                BufSlice::new(buf, 200_000 * (i + 1), 100_000),
            )
            .user_data(10 + i)
            .build(),
        )
        .unwrap();
    }
    q.push(&Head::new(fine).user_data(20).build()).unwrap();
    let got = reap(&mut q, 4, Duration::from_secs(10));
    let took = t.elapsed();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(!got.contains_key(&1), "the stalled op ended early: {got:?}");
    assert!(took < Duration::from_secs(1), "ops took {took:?}");
    for i in 0..3u64 {
        let c = got[&(10 + i)];
        assert!(c.is_ok(), "{c:?}");
        assert_eq!(c.path(), Some(DataPath::Http));
        let off = (1000 * i) as usize;
        let have = engine.read(buf, 200_000 * (i + 1), 100_000).unwrap();
        assert!(*have == data[off..off + 100_000], "range {i} bytes");
    }
    assert!(got[&20].is_ok());

    // The stalled op ends at its deadline; its exchange's connection is shut down.
    let got = reap(&mut q, 1, Duration::from_secs(10));
    let c = got[&1];
    assert_eq!(c.error_code(), Some(ErrorCode::TimedOut), "{c:?}");
    let waited = t0.elapsed();
    assert!(waited < Duration::from_secs(4), "deadline held: {waited:?}");
    let t = Instant::now();
    while seen.held_closed.load(Ordering::SeqCst) == 0 {
        assert!(t.elapsed() < Duration::from_secs(2), "exchange not closed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A v2 server grants PREPARE and takes READY, then stalls until the client's op has ended
/// (deadline), and only then RDMA-WRITEs the object into the window it was granted: the write
/// must be refused and the buffer left as it was.
#[test]
fn aborted_v2_window_refuses_a_late_write() {
    let data = Arc::new(pattern(200_000));
    let status: Arc<Mutex<Option<WcStatus>>> = Arc::new(Mutex::new(None));
    let ready = Arc::new(AtomicUsize::new(0));
    let go = Arc::new(AtomicUsize::new(0));
    let (d, st, rd, g) = (
        Arc::clone(&data),
        Arc::clone(&status),
        Arc::clone(&ready),
        Arc::clone(&go),
    );
    let addr = server(move |mut s| {
        let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
        let soft = dev
            .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        let pd = dev.alloc_pd();
        let cq = dev.create_cq();
        let qp = dev.create_qp(&pd, &cq, &cq, QpCaps::default());
        let mut staging = None;
        let mut cookie = 0u32;
        while let Some(h) = head_of(&mut s) {
            let line = h[":line"].clone();
            if line.starts_with("POST /.hipobj-rc/prepare") {
                let client = RcToken::decode(&h["x-amz-rdma-token"]).unwrap();
                let psn = u32::from_str_radix(&h["x-amz-rdma-psn"], 16).unwrap();
                cookie = u32::from_str_radix(&h["x-amz-rdma-cookie"], 16).unwrap();
                let size: usize = h["x-amz-rdma-size"].parse().unwrap();
                let off: usize = h["x-amz-rdma-offset"].parse().unwrap();
                qp.modify_to_init(Access::NONE).unwrap();
                let mr = pd.register_owned(size, Access::LOCAL_WRITE).unwrap();
                mr.write(0, &d[off..off + size]).unwrap();
                qp.modify_to_rtr(&RtrAttr::from_token(&client, psn, SoftPath::Accept))
                    .unwrap();
                qp.modify_to_rts(&RtsAttr::new(0x00_4242)).unwrap();
                let tok = qp.local_token(None).unwrap();
                let r = [
                    ("x-amz-rdma-protocol", "hipobj-rc-v2".to_owned()),
                    ("x-amz-rdma-reply", format!("200:{}", tok.encode())),
                    (
                        "x-amz-rdma-session",
                        "0123456789abcdef0123456789abcdef".to_owned(),
                    ),
                    ("x-amz-rdma-psn", "004242".to_owned()),
                    ("x-amz-rdma-qpn", format!("{:x}", tok.qpn)),
                    ("x-amz-rdma-soft-addr", soft.to_string()),
                ];
                answer(&mut s, 200, &r, b"");
                staging = Some(mr);
            } else if line.starts_with("POST /.hipobj-rc/ready") {
                rd.store(1, Ordering::SeqCst);
                // Stall until the test says the client has given up on this op.
                while g.load(Ordering::SeqCst) == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let mr = staging.as_ref().unwrap();
                let dst = RemoteAddr {
                    addr: u64::from_str_radix(&h["x-amz-rdma-mr-addr"], 16).unwrap(),
                    rkey: u32::from_str_radix(&h["x-amz-rdma-mr-rkey"], 16).unwrap(),
                };
                let sge = Sge {
                    addr: mr.addr(),
                    length: mr.len() as u32,
                    lkey: mr.lkey(),
                };
                let posted = qp.post_send(&SendWr::new(1, SendOp::WriteWithImm(dst, cookie), sge));
                let mut w = [WorkCompletion::default(); 1];
                let end = Instant::now() + Duration::from_secs(5);
                let got = if posted.is_ok() {
                    loop {
                        if cq.poll(&mut w) == 1 {
                            break Some(w[0].status);
                        }
                        if Instant::now() > end {
                            break None;
                        }
                        cq.wait(Duration::from_millis(50));
                    }
                } else {
                    Some(WcStatus::WrFlushError)
                };
                *st.lock().unwrap() = got;
                return;
            } else if line.starts_with("POST /.hipobj-rc/cancel") {
                answer(&mut s, 204, &[], b"");
            } else {
                answer(&mut s, 400, &[], b"");
            }
        }
    });
    let engine = builder(addr)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap();
    let len = 100_000usize;
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let marker = vec![0xA5u8; len];
    engine.copy_in(buf, 0, &marker).unwrap();
    let obj = engine.object("bkt", "k").unwrap();
    let mut q = engine.queue(4).unwrap();
    q.push(
        &RangeGet::new(obj, 1000, BufSlice::new(buf, 0, len as u64))
            .user_data(1)
            .deadline_ns(Duration::from_millis(600).as_nanos() as u64)
            .build(),
    )
    .unwrap();
    let got = reap(&mut q, 1, Duration::from_secs(10));
    let c = got[&1];
    assert_eq!(c.error_code(), Some(ErrorCode::TimedOut), "{c:?}");
    assert_eq!(ready.load(Ordering::SeqCst), 1, "READY reached the server");
    // The op is over; now the server writes into the window it was granted.
    go.store(1, Ordering::SeqCst);
    let t = Instant::now();
    let s = loop {
        if let Some(s) = *status.lock().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "server write never ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_ne!(s, WcStatus::Success, "a write after abort must be refused");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        *engine.read(buf, 0, len as u64).unwrap() == marker[..],
        "the aborted op's buffer changed"
    );
}

/// The bytes of one request head as they came (up to its blank line); `None` on EOF.
fn raw_head(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => return None,
        }
    }
    Some(head)
}

/// Forwards connection `s` to `upstream` both ways, `first` (already read from `s`) first.
fn forward(mut s: TcpStream, upstream: SocketAddr, first: &[u8]) {
    let Ok(mut up) = TcpStream::connect(upstream) else {
        return;
    };
    if up.write_all(first).is_err() {
        return;
    }
    let (mut up2, mut s2) = (up.try_clone().unwrap(), s.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut up2, &mut s2);
        let _ = s2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut s, &mut up);
    let _ = up.shutdown(std::net::Shutdown::Write);
}

/// A TCP front for `upstream` that holds (never answers, never forwards) every connection whose
/// first request names `stall` in its head, and forwards every other connection both ways.
fn stalling_front(upstream: SocketAddr, seen: Arc<Seen>) -> SocketAddr {
    server(move |mut s| {
        let Some(first) = raw_head(&mut s) else {
            return;
        };
        if first.windows(5).any(|w| w == b"stall") {
            hold(s, &seen);
            return;
        }
        forward(s, upstream, &first);
    })
}

/// hipobj-rc-v2 against our gateway behind a front that stalls one op's PREPARE: on the same
/// (single) worker, the other ops' whole v2 exchanges (PREPARE, QP connect, READY, the RDMA
/// WRITE, FINAL) complete over RDMA, byte-exact, while that PREPARE hangs; the stalled op ends
/// `TimedOut` at its deadline and its connection is closed.
#[test]
fn stalled_prepare_does_not_delay_other_v2_exchanges() {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let data = rig::pattern(300_000, 9);
    for (path, body) in [("/bkt", &b""[..]), ("/bkt/fine", &data[..])] {
        assert_eq!(
            raw::call(gw.local_addr(), "PUT", path, "", &[], body).status(),
            200
        );
    }
    let seen = Arc::new(Seen::default());
    let front = stalling_front(gw.local_addr(), Arc::clone(&seen));
    let engine = rig::engine_builder(front)
        .connections_per_worker(8)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let stall = engine.object("bkt", "stall").unwrap();
    let fine = engine.object("bkt", "fine").unwrap();
    let mut q = engine.queue(16).unwrap();
    let t0 = push_held_prepare(&mut q, stall, buf, 50_000, Duration::from_secs(3), &seen);
    // Rounds of 4 (the gateway's v2 sessions per principal: 8), all while the PREPARE hangs.
    let t = Instant::now();
    for round in 0..3u64 {
        for i in 0..4u64 {
            let off = 100_000 * (i + 1);
            q.push(
                &RangeGet::new(fine, 1000 * i + round, BufSlice::new(buf, off, 50_000))
                    .user_data(10 + i)
                    .build(),
            )
            .unwrap();
        }
        let got = reap(&mut q, 4, Duration::from_secs(10));
        assert_eq!(got.len(), 4, "round {round}: {got:?}");
        assert!(!got.contains_key(&1), "the stalled op ended early: {got:?}");
        for i in 0..4u64 {
            let c = got[&(10 + i)];
            assert!(c.is_ok(), "{c:?}");
            assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
            let start = (1000 * i + round) as usize;
            let have = engine.read(buf, 100_000 * (i + 1), 50_000).unwrap();
            assert!(
                *have == data[start..start + 50_000],
                "round {round} range {i}"
            );
        }
    }
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "12 v2 ops took {took:?}");
    let got = reap(&mut q, 1, Duration::from_secs(10));
    let c = got[&1];
    assert_eq!(c.error_code(), Some(ErrorCode::TimedOut), "{c:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "deadline held");
    let t = Instant::now();
    while seen.held_closed.load(Ordering::SeqCst) == 0 {
        assert!(t.elapsed() < Duration::from_secs(2), "exchange not closed");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A soft listener that accepts every pairing connection and never answers its `CONNECT`
/// (a gateway whose soft listener hangs); counts the connections it took and those the
/// dialer closed.
fn black_hole_soft_listener(seen: Arc<Seen>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || hold(s, &seen));
        }
    });
    a
}

/// The RC token of a fresh soft QP (a server's answer naming a QP that never connects).
fn fresh_soft_token() -> RcToken {
    let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
    let qp = dev.create_qp(
        &dev.alloc_pd(),
        &dev.create_cq(),
        &dev.create_cq(),
        QpCaps::default(),
    );
    qp.local_token(None).unwrap()
}

/// Waits (5 s at most) until the engine's QP has dialled the black-hole listener; returns the
/// time since `t0`.
fn wait_dialled(dial_seen: &Seen, t0: Instant) -> Duration {
    while dial_seen.held.load(Ordering::SeqCst) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the QP never dialled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    t0.elapsed()
}

/// hipobj-rc-v2 over the soft fabric against a server that grants the PREPARE of `dial`
/// naming a soft listener that accepts the QP's dial but never answers its `CONNECT`, and
/// holds the READY (as a gateway waiting for that connection would); other PREPAREs are
/// refused (`501`), so those ops go over HTTP. While the dial hangs, 20 range-gets on the same
/// (single) worker each complete well under 100 ms (before the dial ran on the soft device's
/// I/O thread, the worker waited in it for `CONNECT_LIMIT`, 500 ms); the dialling op itself
/// fails as a transport failure once the dial's bound has passed (not at its 10 s deadline),
/// and its dial connection is closed.
#[test]
fn hanging_soft_dial_does_not_block_the_worker() {
    let data = Arc::new(pattern(400_000));
    let seen = Arc::new(Seen::default());
    let dial_seen = Arc::new(Seen::default());
    let soft = black_hole_soft_listener(Arc::clone(&dial_seen));
    let readies = Arc::new(AtomicUsize::new(0));
    let (d, sn, rd) = (Arc::clone(&data), Arc::clone(&seen), Arc::clone(&readies));
    let addr = server(move |mut s| {
        while let Some(h) = head_of(&mut s) {
            let line = h[":line"].clone();
            if line.starts_with("POST /.hipobj-rc/prepare") {
                if !h.values().any(|v| v.contains("dial")) {
                    answer(
                        &mut s,
                        501,
                        &[("X-Amz-Rdma-Protocol-Status", "unsupported".to_owned())],
                        b"",
                    );
                    continue;
                }
                // A real QP's token (its QPN and GID are what the client checks), never
                // paired: the dial goes to the black hole.
                let tok = fresh_soft_token();
                let r = [
                    ("x-amz-rdma-protocol", "hipobj-rc-v2".to_owned()),
                    ("x-amz-rdma-reply", format!("200:{}", tok.encode())),
                    (
                        "x-amz-rdma-session",
                        "0123456789abcdef0123456789abcdef".to_owned(),
                    ),
                    ("x-amz-rdma-psn", "004242".to_owned()),
                    ("x-amz-rdma-qpn", format!("{:x}", tok.qpn)),
                    ("x-amz-rdma-soft-addr", soft.to_string()),
                ];
                answer(&mut s, 200, &r, b"");
            } else if line.starts_with("POST /.hipobj-rc/ready") {
                rd.fetch_add(1, Ordering::SeqCst);
                hold(s, &sn);
                return;
            } else if line.starts_with("POST /.hipobj-rc/cancel") {
                answer(&mut s, 204, &[], b"");
            } else if !plain(&mut s, &h, &d, &sn) {
                return;
            }
        }
    });
    let engine = builder(addr)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let dial = engine.object("bkt", "dial").unwrap();
    let fine = engine.object("bkt", "fine").unwrap();
    let mut q = engine.queue(16).unwrap();

    let t0 = Instant::now();
    q.push(
        &RangeGet::new(dial, 0, BufSlice::new(buf, 0, 100_000))
            .user_data(1)
            .deadline_ns(Duration::from_secs(10).as_nanos() as u64)
            .build(),
    )
    .unwrap();
    let dialled = wait_dialled(&dial_seen, t0);
    // The dial hangs now: the worker's other ops run meanwhile, one at a time.
    let mut all: HashMap<u64, Cqe> = HashMap::new();
    let mut slowest = Duration::ZERO;
    for i in 0..20u64 {
        let t = Instant::now();
        let off = 1000 * i;
        q.push(
            &RangeGet::new(fine, off, BufSlice::new(buf, 200_000, 50_000))
                .user_data(10 + i)
                .build(),
        )
        .unwrap();
        while !all.contains_key(&(10 + i)) {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "range-get {i} never ended"
            );
            all.extend(reap(&mut q, 1, Duration::from_millis(100)));
        }
        let took = t.elapsed();
        slowest = slowest.max(took);
        let c = all[&(10 + i)];
        assert!(c.is_ok(), "range-get {i}: {c:?}");
        assert_eq!(c.path(), Some(DataPath::Http), "range-get {i}");
        let off = off as usize;
        let have = engine.read(buf, 200_000, 50_000).unwrap();
        assert!(*have == data[off..off + 50_000], "range-get {i} bytes");
        assert!(
            took < Duration::from_millis(100),
            "range-get {i} took {took:?} while the soft dial hangs"
        );
    }
    eprintln!(
        "dial began {dialled:?} after the push; 20 range-gets in {:?}, slowest {slowest:?}",
        t0.elapsed() - dialled
    );
    // The dialling op ends after the dial's bound (500 ms), well before its deadline.
    while !all.contains_key(&1) {
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "the dialling op never ended"
        );
        all.extend(reap(&mut q, 1, Duration::from_millis(50)));
    }
    let ended = t0.elapsed();
    let c = all[&1];
    eprintln!(
        "dialling op ended after {ended:?}: {c:?}; READYs {}",
        readies.load(Ordering::SeqCst)
    );
    assert!(!c.is_ok(), "{c:?}");
    assert_eq!(c.error_code(), Some(ErrorCode::ConnectionReset), "{c:?}");
    assert!(ended < Duration::from_secs(3), "dialling op took {ended:?}");
    let t = Instant::now();
    while dial_seen.held_closed.load(Ordering::SeqCst) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "dial connection not closed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// rc-persistent over the soft fabric against an endpoint that answers the pairing request
/// (200, a token, a session) naming a soft listener that accepts the QP's dial but never
/// answers its `CONNECT`. While the dial hangs, HEADs on the same (single) worker (HTTP ops
/// the pairing does not hold) each complete well under 100 ms (before the dial ran on the
/// soft device's I/O thread, the worker waited in it for `CONNECT_LIMIT`, 500 ms); the pairing
/// then ends as it always did when its dial failed (unreachable): the range-get it held goes
/// over HTTP, byte-exact, and the dial connection is closed.
#[test]
fn hanging_soft_dial_of_a_pairing_does_not_block_the_worker() {
    let data = Arc::new(pattern(400_000));
    let seen = Arc::new(Seen::default());
    let dial_seen = Arc::new(Seen::default());
    let soft = black_hole_soft_listener(Arc::clone(&dial_seen));
    let (d, sn) = (Arc::clone(&data), Arc::clone(&seen));
    let addr = server(move |mut s| {
        while let Some(h) = head_of(&mut s) {
            if h[":line"].starts_with("POST /.hipobj/rc/connect") {
                let tok = fresh_soft_token();
                let r = [
                    ("x-amz-rdma-reply", format!("200:{}", tok.encode())),
                    ("x-amz-rdma-psn", "004242".to_owned()),
                    (
                        "x-amz-rdma-session",
                        "0123456789abcdef0123456789abcdef".to_owned(),
                    ),
                    ("x-amz-rdma-soft-addr", soft.to_string()),
                ];
                answer(&mut s, 200, &r, b"");
            } else if !plain(&mut s, &h, &d, &sn) {
                return;
            }
        }
    });
    let engine = builder(addr)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let mut q = engine.queue(16).unwrap();
    let t0 = Instant::now();
    q.push(
        &RangeGet::new(obj, 777, BufSlice::new(buf, 0, 100_000))
            .user_data(1)
            .build(),
    )
    .unwrap();
    let dialled = wait_dialled(&dial_seen, t0);
    let mut all: HashMap<u64, Cqe> = HashMap::new();
    let mut slowest = Duration::ZERO;
    for i in 0..10u64 {
        let t = Instant::now();
        q.push(&Head::new(obj).user_data(10 + i).build()).unwrap();
        while !all.contains_key(&(10 + i)) {
            assert!(t.elapsed() < Duration::from_secs(5), "HEAD {i} never ended");
            all.extend(reap(&mut q, 1, Duration::from_millis(100)));
        }
        let took = t.elapsed();
        slowest = slowest.max(took);
        let c = all[&(10 + i)];
        assert!(c.is_ok(), "HEAD {i}: {c:?}");
        assert_eq!(c.aux(), data.len() as u64, "HEAD {i} size");
        assert!(
            took < Duration::from_millis(100),
            "HEAD {i} took {took:?} while the pairing's soft dial hangs"
        );
    }
    eprintln!("dial began {dialled:?} after the push; slowest HEAD {slowest:?}");
    while !all.contains_key(&1) {
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "the range-get never ended"
        );
        all.extend(reap(&mut q, 1, Duration::from_millis(50)));
    }
    let ended = t0.elapsed();
    let c = all[&1];
    eprintln!("range-get ended after {ended:?}: {c:?}");
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::Http));
    let have = engine.read(buf, 0, 100_000).unwrap();
    assert!(*have == data[777..777 + 100_000], "range-get bytes");
    assert!(
        ended >= Duration::from_millis(450) && ended < Duration::from_secs(3),
        "the range-get waited {ended:?} for a pairing whose dial is bounded by 500 ms"
    );
    let t = Instant::now();
    while dial_seen.held_closed.load(Ordering::SeqCst) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "dial connection not closed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A TCP front for `upstream` that answers every GET asking for an early answer itself, as a
/// server that says its WRITEs are posted and never sends them: `206` with the byte count and
/// checksum of `data`'s first `len` bytes, and the early echo. Every other connection (the
/// pairing, plain requests) is forwarded both ways.
fn lying_early_front(upstream: SocketAddr, data: Arc<Vec<u8>>, len: usize) -> SocketAddr {
    server(move |mut s| {
        let Some(first) = raw_head(&mut s) else {
            return;
        };
        let text = String::from_utf8_lossy(&first).to_ascii_lowercase();
        if text.starts_with("get ") && text.contains("x-amz-rdma-early-answer: 1") {
            let mut crc = s3_lite::checksum::Crc64Nvme::new();
            crc.update(&data[..len]);
            let crc = s3_lite::checksum::encode_crc64nvme(crc.finish());
            loop {
                let n = len.to_string();
                answer(
                    &mut s,
                    206,
                    &[
                        (
                            "Content-Range",
                            format!("bytes 0-{}/{}", len - 1, data.len()),
                        ),
                        ("x-amz-rdma-reply", "206".to_owned()),
                        ("x-amz-rdma-bytes-transferred", n.clone()),
                        ("x-amz-rdma-bytes", n),
                        ("x-amz-rdma-checksum-crc64nvme", crc.clone()),
                        ("x-amz-rdma-early-answer", "1".to_owned()),
                    ],
                    b"",
                );
                if head_of(&mut s).is_none() {
                    return;
                }
            }
        }
        forward(s, upstream, &first);
    })
}

/// An early answer (`x-amz-rdma-early-answer: 1`) is a promise that the bytes are on their
/// way; a server that makes it and never writes them gets no success: the op waits for its
/// landing digest, each attempt times out, and it fails `TimedOut` with its buffer untouched.
/// The same engine then reads the object from the real gateway, early-answered, byte-exact.
#[test]
fn an_early_answer_whose_bytes_never_land_never_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let data = Arc::new(rig::pattern(300_000, 4));
    for (path, body) in [("/bkt", &b""[..]), ("/bkt/obj", &data[..])] {
        assert_eq!(
            raw::call(gw.local_addr(), "PUT", path, "", &[], body).status(),
            200
        );
    }
    let len = 100_000usize;
    let front = lying_early_front(gw.local_addr(), Arc::clone(&data), len);
    let engine = rig::engine_builder(front)
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    engine.copy_in(buf, 0, &vec![0xEE; len]).unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let mut q = engine.queue(4).unwrap();
    let t0 = Instant::now();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, len as u64))
            .user_data(1)
            .build(),
    )
    .unwrap();
    let got = reap(&mut q, 1, Duration::from_secs(20));
    let c = got[&1];
    assert!(
        !c.is_ok(),
        "an early answer without its bytes succeeded: {c:?}"
    );
    assert_eq!(c.error_code(), Some(ErrorCode::TimedOut), "{c:?}");
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t0.elapsed()
    );
    let have = engine.read(buf, 0, len as u64).unwrap();
    assert!(have.iter().all(|&b| b == 0xEE), "the buffer changed");
    drop(q);
    drop(engine);

    // The real gateway keeps the promise.
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let obj = engine.object("bkt", "obj").unwrap();
    let mut q = engine.queue(4).unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, len as u64))
            .user_data(2)
            .build(),
    )
    .unwrap();
    let c = reap(&mut q, 1, Duration::from_secs(20))[&2];
    assert!(c.is_ok() && c.verified(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
    assert!(*engine.read(buf, 0, len as u64).unwrap() == data[..len]);
}
