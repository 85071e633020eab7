//! Slow and idle clients cannot starve the gateway: a half-sent head holds no worker and
//! misses its deadline (408), a trickled body fails its progress check, and at capacity a
//! waiting connection is evicted for a new one (503 only when every connection is inside a
//! request).

#[path = "support/raw.rs"]
mod raw;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use raw::*;

fn gateway(
    root: &std::path::Path,
    threads: usize,
    max_connections: usize,
) -> hipobj_gateway::RunningGateway {
    hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .threads(threads)
        .max_connections(max_connections)
        .head_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(1))
        .min_body_progress(100)
        .start()
        .expect("gateway starts")
}

/// A signed call on its own thread; `None` if it took longer than `limit`.
fn call_within(
    a: SocketAddr,
    method: &'static str,
    path: &'static str,
    limit: Duration,
) -> Option<u16> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(call(a, method, path, "", &[], b"").status());
    });
    rx.recv_timeout(limit).ok()
}

/// The attack from the issue: connections that send part of a head and then one byte now and
/// then. Each trickles until `stop`; returns whatever the gateway answered it.
fn slowloris(a: SocketAddr, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let _ = s.write_all(b"GET / HTTP/1.1\r\nx: ");
        let mut got = Vec::new();
        while !stop.load(Ordering::Acquire) {
            if s.write_all(b"a").is_err() {
                break;
            }
            let mut buf = [0u8; 1024];
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        String::from_utf8_lossy(&got).into_owned()
    })
}

#[test]
fn half_sent_heads_hold_no_worker_and_miss_their_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 4, 64);
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/slow-bkt", "", &[], b"").status(), 200);
    let stop = Arc::new(AtomicBool::new(false));
    // Twice as many slow clients as worker threads.
    let slow: Vec<_> = (0..8).map(|_| slowloris(a, stop.clone())).collect();
    std::thread::sleep(Duration::from_millis(300));
    // Everyone else is still served at once.
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(
            call_within(a, "HEAD", "/slow-bkt", Duration::from_secs(3)),
            Some(200),
            "a normal request is answered while slow clients trickle their heads"
        );
        assert!(t.elapsed() < Duration::from_secs(3));
    }
    // The slow heads get 408 RequestTimeout at their 2 s deadline and are closed.
    std::thread::sleep(Duration::from_millis(2500));
    stop.store(true, Ordering::Release);
    for h in slow {
        let answer = h.join().unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 408"),
            "slow client got: {answer:?}"
        );
        assert!(answer.contains("<Code>RequestTimeout</Code>"), "{answer}");
    }
    gw.shutdown();
}

#[test]
fn a_trickled_body_fails_its_progress_check() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 2, 16);
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/slow-bkt", "", &[], b"").status(), 200);
    // A signed PUT of 1000 bytes whose body arrives a byte every 200 ms (5 B/s; the gateway
    // wants 100 bytes per 1 s window).
    let body = vec![7u8; 1000];
    let r = sign(req(a, "PUT", "/slow-bkt/slow", ""), &body, None);
    let mut head = Vec::new();
    s3_lite::http::encode_request_head(&r, s3_lite::http::BodyFraming::Length(1000), &mut head)
        .unwrap();
    let mut s = TcpStream::connect(a).unwrap();
    s.write_all(&head).unwrap();
    let started = Instant::now();
    let mut closed = false;
    for b in &body {
        if s.write_all(std::slice::from_ref(b)).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(
        closed || (out.starts_with("HTTP/1.1 400") && out.contains("<Code>RequestTimeout</Code>")),
        "the gateway gave up on the trickled body: {out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "within a few windows"
    );
    // Nothing was stored.
    assert_eq!(
        call(a, "HEAD", "/slow-bkt/slow", "", &[], b"").status(),
        404
    );
    gw.shutdown();
}

#[test]
fn at_capacity_a_waiting_connection_is_evicted_and_busy_ones_get_503() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), 1, 1);
    let a = gw.local_addr();
    // A half-sent head holds the only slot: a new client evicts it (503 to the half-sent one).
    let mut half = TcpStream::connect(a).unwrap();
    half.write_all(b"PUT /b/k HTTP/1.1\r\nHost: h\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        call_within(a, "PUT", "/slow-bkt", Duration::from_secs(3)),
        Some(200)
    );
    half.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut out = String::new();
    let _ = half.read_to_string(&mut out);
    assert!(
        out.starts_with("HTTP/1.1 503"),
        "evicted half-sent head: {out:?}"
    );

    // A request inside its body holds the slot for real: a new client gets 503 SlowDown.
    let r = sign(req(a, "PUT", "/slow-bkt/big", ""), &[1u8; 4096], None);
    let mut head = Vec::new();
    s3_lite::http::encode_request_head(&r, s3_lite::http::BodyFraming::Length(4096), &mut head)
        .unwrap();
    // The previous connection's slot frees once the gateway has seen it close: retry the
    // admission until it is in (a refusal is answered at once with 503).
    let mut busy = None;
    for _ in 0..100 {
        let mut s = TcpStream::connect(a).unwrap();
        s.write_all(&head).unwrap();
        s.write_all(&[1u8; 100]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        s.set_read_timeout(Some(Duration::from_millis(10))).unwrap();
        let mut early = [0u8; 512];
        match s.read(&mut early) {
            Ok(n) if String::from_utf8_lossy(&early[..n]).starts_with("HTTP/1.1 503") => continue,
            Ok(n) => panic!(
                "busy request answered early: {}",
                String::from_utf8_lossy(&early[..n])
            ),
            Err(_) => {
                busy = Some(s);
                break;
            }
        }
    }
    let mut busy = busy.expect("the request got the slot");
    let r = call(a, "GET", "/slow-bkt", "list-type=2", &[], b"");
    assert_eq!((r.status(), r.code().as_str()), (503, "SlowDown"));
    busy.write_all(&[1u8; 3996]).unwrap();
    let resp = read_response(&mut busy, false);
    assert_eq!(resp.status(), 200, "{}", resp.text());
    drop(busy);
    // Once the slot is free again, requests are served.
    let mut ok = false;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(50));
        if call(a, "GET", "/slow-bkt/big", "", &[], b"").status() == 200 {
            ok = true;
            break;
        }
    }
    assert!(ok, "slot was released");
    gw.shutdown();
}
