//! Faults of the engine's `rc-persistent` client (`Fabric::Soft`) against this gateway over the
//! soft fabric: the gateway shut down mid-batch, and a hand-rolled server whose replies lie
//! about the bytes transferred. (The operation matrix, both backends, is `rdma_matrix.rs`.)

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::soft::{Access, QpCaps, RtrAttr, RtsAttr, SoftDevice, SoftPath};
use engine::{Engine, Fabric, RegisterOptions, RetryPolicy};
use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use raw::{ACCESS, SECRET, call};
use rig::pattern;
use ring_api::opcode::{Get, RangeGet};
use ring_api::{BufSlice, ErrorClass};
use s3_lite::rdma::RcToken;

fn soft_target() -> Arc<RcTarget> {
    RcTarget::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        RcLimits::default(),
    )
    .unwrap()
}

fn engine_for(addr: SocketAddr, fabric: Fabric) -> Engine {
    rig::engine_builder(addr)
        .retry(RetryPolicy::new(
            3,
            Duration::from_millis(5),
            Duration::from_millis(50),
        ))
        .fabric(fabric)
        .build()
        .unwrap()
}

/// The gateway goes away mid-batch: every op completes within its deadline, each with
/// success (byte-exact) or a typed error.
#[test]
fn gateway_shut_down_mid_batch() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(ACCESS, SECRET)
        .rdma_target(soft_target())
        .start()
        .unwrap();
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let data = pattern(1 << 20, 3);
    assert_eq!(call(a, "PUT", "/bkt/o", "", &[], &data).status(), 200);
    let engine = engine_for(a, Fabric::Soft);
    let n = 200u64;
    let chunk = 64 * 1024u64;
    let buf = engine
        .register_host((n * chunk) as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(256).unwrap();
    let obj = engine.object("bkt", "o").unwrap();
    let deadline = Duration::from_secs(4);
    let t = Instant::now();
    for i in 0..n {
        let off = (i * 4099) % (data.len() as u64 - chunk);
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, i * chunk, chunk))
                .user_data(i)
                .deadline_ns(deadline.as_nanos() as u64)
                .build(),
        )
        .unwrap();
    }
    // Let some complete, then take the gateway away.
    let mut done = Vec::new();
    while done.len() < 10 && t.elapsed() < Duration::from_secs(20) {
        q.wait(1, Some(Duration::from_millis(100)));
        done.extend(q.completion());
    }
    gw.shutdown();
    while (done.len() as u64) < n && t.elapsed() < Duration::from_secs(30) {
        q.wait(1, Some(Duration::from_millis(200)));
        done.extend(q.completion());
    }
    assert_eq!(done.len() as u64, n, "every op completes");
    assert!(
        t.elapsed() < deadline + Duration::from_secs(3),
        "{:?}",
        t.elapsed()
    );
    let (mut ok, mut failed) = (0, 0);
    for c in done {
        let i = c.user_data();
        if c.is_ok() {
            ok += 1;
            let off = ((i * 4099) % (data.len() as u64 - chunk)) as usize;
            let got = engine.read(buf, i * chunk, chunk).unwrap().to_vec();
            assert!(got == data[off..off + chunk as usize], "op {i} bytes");
        } else {
            failed += 1;
            assert!(c.error_code().is_some(), "typed error: {c:?}");
            assert!(c.error_class().is_some(), "typed error: {c:?}");
        }
    }
    eprintln!("ok {ok}, failed {failed}");
    assert!(ok >= 10);
}

/// A server that pairs for real, then answers every GET with `x-amz-rdma-reply: 200` and a
/// byte count that is not the truth.
struct Liar {
    addr: SocketAddr,
}

fn read_head(s: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).ok()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

impl Liar {
    /// `bytes(requested)` is the count the liar claims for a GET of `requested` bytes.
    fn start(bytes: fn(u64) -> String) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
        let soft = dev
            .listen(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .unwrap();
        let qps = Arc::new(std::sync::Mutex::new(Vec::new()));
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let (dev, qps) = (dev.clone(), qps.clone());
                std::thread::spawn(move || {
                    while let Some(head) = read_head(&mut s) {
                        let line = head.lines().next().unwrap_or_default().to_owned();
                        let answer = if line.starts_with("POST /.hipobj/rc/connect") {
                            let tok = RcToken::decode(header(&head, "x-amz-rdma-token").unwrap())
                                .unwrap();
                            let psn =
                                u32::from_str_radix(header(&head, "x-amz-rdma-psn").unwrap(), 16)
                                    .unwrap();
                            let pd = dev.alloc_pd();
                            let cq = dev.create_cq();
                            let qp = dev.create_qp(&pd, &cq, &cq, QpCaps::default());
                            qp.modify_to_init(Access::NONE).unwrap();
                            qp.modify_to_rtr(&RtrAttr::from_token(&tok, psn, SoftPath::Accept))
                                .unwrap();
                            qp.modify_to_rts(&RtsAttr::new(0x42)).unwrap();
                            let mine = qp.local_token(None).unwrap();
                            qps.lock().unwrap().push((qp, cq, pd));
                            format!(
                                "HTTP/1.1 200 OK\r\nx-amz-rdma-reply: 200:{}\r\n\
                             x-amz-rdma-psn: 000042\r\nx-amz-rdma-session: {}\r\n\
                             x-amz-rdma-soft-addr: {soft}\r\nContent-Length: 0\r\n\r\n",
                                mine.encode(),
                                "ab".repeat(16)
                            )
                        } else {
                            // Claim a transfer that did not happen as said.
                            let tok = header(&head, "x-amz-rdma-token")
                                .and_then(|t| RcToken::decode(t.get(..88)?).ok());
                            let n = tok.map_or(0, |t| t.length);
                            format!(
                                "HTTP/1.1 200 OK\r\nx-amz-rdma-reply: 200\r\n\
                             x-amz-rdma-bytes-transferred: {}\r\nETag: \"x\"\r\n\
                             Content-Length: 0\r\n\r\n",
                                bytes(n)
                            )
                        };
                        if s.write_all(answer.as_bytes()).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Liar { addr }
    }
}

fn lying_get(bytes: fn(u64) -> String, whole_get_too: bool) {
    let liar = Liar::start(bytes);
    let engine = engine_for(liar.addr, Fabric::Soft);
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    engine.copy_in(buf, 0, &[0xEE; 8192]).unwrap();
    let mut q = engine.queue(8).unwrap();
    let obj = engine.object("bkt", "o").unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096))
            .user_data(1)
            .deadline_ns(5_000_000_000)
            .build(),
    )
    .unwrap();
    let n = if whole_get_too {
        q.push(
            &Get::new(obj, BufSlice::new(buf, 4096, 4096))
                .user_data(2)
                .deadline_ns(5_000_000_000)
                .build(),
        )
        .unwrap();
        2
    } else {
        1
    };
    assert_eq!(q.wait(n, Some(Duration::from_secs(10))), n);
    for c in q.completion() {
        assert!(!c.is_ok(), "a lie taken as success: {c:?}");
        assert_eq!(
            c.error_class(),
            Some(ErrorClass::Integrity),
            "{c:?} {:?} {:?}",
            c.error_code(),
            c.error_class()
        );
    }
    // Nothing was written: the canaries in both windows are intact.
    let after = engine.read(buf, 0, 8192).unwrap().to_vec();
    assert!(after.iter().all(|&b| b == 0xEE));
}

#[test]
fn replies_lying_short_are_integrity_errors() {
    // A RangeGet asked for exactly 4096 bytes: 4095 is a short transfer. (For a whole-object
    // Get a smaller count is indistinguishable from a smaller object, so only the RangeGet.)
    lying_get(|n| (n - 1).to_string(), false);
}

#[test]
fn replies_lying_long_are_integrity_errors() {
    lying_get(|n| format!("{}", n + 1), true);
}

#[test]
fn replies_with_garbage_counts_are_integrity_errors() {
    lying_get(|_| "lots".into(), true);
}
