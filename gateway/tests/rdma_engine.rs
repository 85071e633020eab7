//! The engine's `rc-persistent` client (`Fabric::Soft`) against this gateway over the soft
//! fabric: the matrix (GET, RANGE_GET, PUT × directory backend, upstream bridge in front of
//! s3s-fs), byte-exact with checksums compared and the path named `RdmaSoft`; and faults: the
//! gateway shut down mid-batch, and a hand-rolled server whose replies lie about the bytes
//! transferred.

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;
#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::soft::{Access, QpCaps, RtrAttr, RtsAttr, SoftDevice, SoftPath};
use engine::{Engine, Fabric, RegisterOptions, RetryPolicy};
use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use raw::{ACCESS, SECRET, call};
use rig::{crc64, pattern};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, DataPath, ErrorClass};
use s3_lite::credentials::Credentials;
use s3_lite::rdma::RcToken;
use s3s_fs::S3sFs;

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

/// GET / RANGE_GET / PUT through `gw` with the engine on the soft fabric; `stored` reads the
/// object as the backend holds it (to check what a PUT left there).
fn run_matrix(name: &str, gw: SocketAddr, stored: &dyn Fn(&str) -> Vec<u8>) {
    // 3 MiB + a ragged tail: several soft frames (1 MiB each).
    let data = pattern(3 * (1 << 20) + 4321, 7);
    let r = call(gw, "PUT", "/mtx/obj.bin", "", &[], &data);
    assert_eq!(r.status(), 200, "{name}: {}", r.text());
    let engine = engine_for(gw, Fabric::Soft);
    let buf = engine
        .register_host(16 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(16).unwrap();
    let obj = engine.object("mtx", "obj.bin").unwrap();
    q.push(
        &Get::new(obj, BufSlice::new(buf, 0, 4 << 20))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.push(
        &RangeGet::new(obj, 1_000_001, BufSlice::new(buf, 4 << 20, 1_500_000))
            .user_data(2)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(2, Some(Duration::from_secs(30))), 2);
    let mut got: Vec<_> = q.completion().collect();
    got.sort_by_key(|c| c.user_data());
    for c in &got {
        assert!(c.is_ok(), "{name}: {c:?}");
        assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{name}: {c:?}");
    }
    assert_eq!(got[0].bytes(), data.len() as u64);
    assert_eq!(got[1].bytes(), 1_500_000);
    let whole = engine.read(buf, 0, data.len() as u64).unwrap().to_vec();
    assert_eq!(crc64(&whole), crc64(&data), "{name}: GET checksum");
    assert!(whole == data, "{name}: GET bytes");
    let range = engine.read(buf, 4 << 20, 1_500_000).unwrap().to_vec();
    let want = &data[1_000_001..2_500_001];
    assert_eq!(crc64(&range), crc64(want), "{name}: RANGE_GET checksum");
    assert!(range == want, "{name}: RANGE_GET bytes");

    // PUT from registered memory: stored byte-exact, with our CRC64NVME.
    let fresh = pattern(2 * (1 << 20) + 17, 91);
    engine.copy_in(buf, 8 << 20, &fresh).unwrap();
    let put_obj = engine.object("mtx", "put/new.bin").unwrap();
    q.push(
        &Put::new(put_obj, BufSlice::new(buf, 8 << 20, fresh.len() as u64))
            .user_data(3)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert!(c.is_ok(), "{name} put: {c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{name} put");
    assert_eq!(c.bytes(), fresh.len() as u64);
    let back = stored("put/new.bin");
    assert_eq!(back.len(), fresh.len(), "{name}: stored length");
    assert_eq!(crc64(&back), crc64(&fresh), "{name}: stored checksum");
    assert!(back == fresh, "{name}: stored bytes");
    // The gateway's own record of the checksum agrees.
    let r = call(
        gw,
        "HEAD",
        "/mtx/put/new.bin",
        "",
        &[("x-amz-checksum-mode", "ENABLED")],
        b"",
    );
    assert_eq!(r.status(), 200, "{name}");
    if let Some(v) = r.header("x-amz-checksum-crc64nvme") {
        assert_eq!(v, crc64(&fresh), "{name}: gateway checksum");
    }
}

#[test]
fn matrix_directory_backend() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(ACCESS, SECRET)
        .rdma_target(soft_target())
        .start()
        .unwrap();
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/mtx", "", &[], b"").status(), 200);
    run_matrix("directory", a, &|key| {
        let r = call(a, "GET", &format!("/mtx/{key}"), "", &[], b"");
        assert_eq!(r.status(), 200);
        r.body
    });
    gw.shutdown();
}

#[test]
fn matrix_upstream_s3s_fs_backend() {
    let up = S3sFs::start();
    up.create_bucket_dir("mtx");
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .upstream(
            up.endpoint_url(),
            Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY),
            "us-east-1",
        )
        .credentials(ACCESS, SECRET)
        .rdma_target(soft_target())
        .start()
        .unwrap();
    let a = gw.local_addr();
    let root = up.root.path().to_owned();
    // What the upstream store itself holds (not what the gateway says).
    run_matrix("upstream", a, &|key| {
        std::fs::read(root.join("mtx").join(key)).unwrap()
    });
    gw.shutdown();
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
