//! The engine's `hipobj-rc-v2` client against a hand-rolled v2 server that does the data phase
//! for real over the soft fabric, then lies in its FINAL answer (short byte count, wrong
//! cookie echo, wrong checksum, no protocol echo): every such op fails with a typed integrity
//! error and the client sends its CANCEL. And a PREPARE grant this fabric cannot use (no soft
//! address, as a verbs-only server answers) is cancelled and the op falls back to HTTP.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engine::soft::{
    Access, QpCaps, RemoteAddr, RtrAttr, RtsAttr, SendOp, SendWr, Sge, SoftDevice, SoftPath,
    WcStatus, WorkCompletion,
};
use engine::{Dialect, Engine, Fabric, Placement, RegisterOptions, RetryPolicy};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, DataPath, ErrorCode};
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};
use s3_lite::credentials::Credentials;
use s3_lite::rdma::RcToken;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lie {
    ShortCount,
    WrongCookie,
    WrongChecksum,
    NoProtocol,
    Truth,
    /// PREPARE granted without `x-amz-rdma-soft-addr`; plain GETs answered with the body.
    NoSoftAddr,
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + (i >> 9)) as u8).collect()
}

fn head_of(s: &mut TcpStream) -> Option<Vec<(String, String)>> {
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
    let first = lines.next()?.to_owned();
    let mut h = vec![(":line".to_owned(), first)];
    for l in lines.filter(|l| !l.is_empty()) {
        let (n, v) = l.split_once(':')?;
        h.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    Some(h)
}

fn get<'a>(h: &'a [(String, String)], n: &str) -> &'a str {
    h.iter()
        .find(|(k, _)| k == n)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

fn answer(s: &mut TcpStream, status: u16, headers: &[(String, String)], body: &[u8]) {
    let mut out = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = s.write_all(out.as_bytes());
    let _ = s.write_all(body);
}

fn hh(n: &str, v: impl Into<String>) -> (String, String) {
    (n.to_owned(), v.into())
}

/// Serves one connection of the fake v2 server.
fn serve(mut s: TcpStream, lie: Lie, data: Arc<Vec<u8>>, cancels: Arc<AtomicUsize>) {
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
        let line = get(&h, ":line").to_owned();
        if line.starts_with("POST /.hipobj-rc/prepare") {
            let client = RcToken::decode(get(&h, "x-amz-rdma-token")).unwrap();
            let psn = u32::from_str_radix(get(&h, "x-amz-rdma-psn"), 16).unwrap();
            cookie = u32::from_str_radix(get(&h, "x-amz-rdma-cookie"), 16).unwrap();
            let size: usize = get(&h, "x-amz-rdma-size").parse().unwrap();
            let off: usize = get(&h, "x-amz-rdma-offset").parse().unwrap();
            qp.modify_to_init(Access::NONE).unwrap();
            let mr = pd.register_owned(size, Access::LOCAL_WRITE).unwrap();
            mr.write(0, &data[off..off + size]).unwrap();
            qp.modify_to_rtr(&RtrAttr::from_token(&client, psn, SoftPath::Accept))
                .unwrap();
            qp.modify_to_rts(&RtsAttr::new(0x00_4242)).unwrap();
            let tok = qp.local_token(None).unwrap();
            let mut r = vec![
                hh("x-amz-rdma-protocol", "hipobj-rc-v2"),
                hh("x-amz-rdma-reply", format!("200:{}", tok.encode())),
                hh("x-amz-rdma-session", "0123456789abcdef0123456789abcdef"),
                hh("x-amz-rdma-psn", "004242"),
                hh("x-amz-rdma-qpn", format!("{:x}", tok.qpn)),
            ];
            if lie != Lie::NoSoftAddr {
                r.push(hh("x-amz-rdma-soft-addr", soft.to_string()));
            }
            answer(&mut s, 200, &r, b"");
            staging = Some(mr);
        } else if line.starts_with("POST /.hipobj-rc/ready") {
            let mr = staging.as_ref().unwrap();
            let dst = RemoteAddr {
                addr: u64::from_str_radix(get(&h, "x-amz-rdma-mr-addr"), 16).unwrap(),
                rkey: u32::from_str_radix(get(&h, "x-amz-rdma-mr-rkey"), 16).unwrap(),
            };
            let sge = Sge {
                addr: mr.addr(),
                length: mr.len() as u32,
                lkey: mr.lkey(),
            };
            qp.post_send(&SendWr::new(1, SendOp::WriteWithImm(dst, cookie), sge))
                .unwrap();
            let mut w = [WorkCompletion::default(); 1];
            while cq.poll(&mut w) == 0 {
                cq.wait(Duration::from_millis(50));
            }
            assert_eq!(w[0].status, WcStatus::Success);
            let sent = mr.to_vec(0, mr.len() as usize).unwrap();
            let mut c = Crc64Nvme::new();
            c.update(&sent);
            let mut crc = encode_crc64nvme(c.finish());
            let mut n = sent.len();
            let mut echo = cookie;
            let mut proto = "hipobj-rc-v2";
            match lie {
                Lie::ShortCount => n -= 1,
                Lie::WrongCookie => echo ^= 0x10,
                Lie::WrongChecksum => crc = encode_crc64nvme(c.finish() ^ 1),
                Lie::NoProtocol => proto = "hipobj-rc-v1",
                Lie::NoSoftAddr | Lie::Truth => {}
            }
            let r = vec![
                hh("x-amz-rdma-protocol", proto),
                hh("x-amz-rdma-cookie", format!("{echo:08x}")),
                hh("x-amz-rdma-bytes-transferred", n.to_string()),
                hh("x-amz-rdma-checksum-crc64nvme", crc),
            ];
            answer(&mut s, 200, &r, b"");
        } else if line.starts_with("POST /.hipobj-rc/cancel") {
            cancels.fetch_add(1, Ordering::SeqCst);
            answer(&mut s, 204, &[], b"");
        } else if line.starts_with("GET ") {
            // A plain answer for the HTTP fallback: honour the Range header.
            let range = get(&h, "range").trim_start_matches("bytes=").to_owned();
            let (a, b) = range.split_once('-').unwrap();
            let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
            let r = vec![hh("Content-Range", format!("bytes {a}-{b}/{}", data.len()))];
            answer(&mut s, 206, &r, &data[a..=b]);
        } else {
            answer(&mut s, 400, &[], b"");
        }
    }
}

fn fake(lie: Lie, data: Arc<Vec<u8>>, cancels: Arc<AtomicUsize>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let (d, c) = (Arc::clone(&data), Arc::clone(&cancels));
            std::thread::spawn(move || serve(s, lie, d, c));
        }
    });
    a
}

fn engine_for(addr: SocketAddr) -> Engine {
    Engine::builder()
        .endpoint_url(format!("http://{addr}"))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .retry(RetryPolicy::new(
            1,
            Duration::from_millis(5),
            Duration::from_millis(20),
        ))
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap()
}

fn range_get(lie: Lie) -> (ring_api::Cqe, Vec<u8>, Vec<u8>, usize) {
    let data = Arc::new(pattern(300_000));
    let cancels = Arc::new(AtomicUsize::new(0));
    let a = fake(lie, Arc::clone(&data), Arc::clone(&cancels));
    let engine = engine_for(a);
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("bkt", "k").unwrap();
    q.push(
        &RangeGet::new(obj, 1234, BufSlice::new(buf, 0, 100_000))
            .user_data(1)
            .deadline_ns(Duration::from_secs(10).as_nanos() as u64)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(20))), 1);
    let c = q.completion().next().unwrap();
    let got = engine.read(buf, 0, 100_000).unwrap().to_vec();
    (
        c,
        got,
        data[1234..101_234].to_vec(),
        cancels.load(Ordering::SeqCst),
    )
}

#[test]
fn lying_finals_fail_typed_and_cancel() {
    for (lie, code) in [
        (Lie::ShortCount, ErrorCode::Integrity),
        (Lie::WrongCookie, ErrorCode::Integrity),
        (Lie::WrongChecksum, ErrorCode::Integrity),
        (Lie::NoProtocol, ErrorCode::Protocol),
    ] {
        let (c, _, _, cancels) = range_get(lie);
        assert!(!c.is_ok(), "{lie:?}: {c:?}");
        assert_eq!(c.error_code(), Some(code), "{lie:?}: {c:?}");
        assert_eq!(cancels, 1, "{lie:?}: one CANCEL");
    }
}

#[test]
fn unusable_grant_is_cancelled_and_falls_back_to_http() {
    let (c, got, want, cancels) = range_get(Lie::NoSoftAddr);
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::Http), "{c:?}");
    assert_eq!(c.bytes(), 100_000);
    assert!(got == want, "fallback bytes");
    assert_eq!(cancels, 1);
}

/// Control: the same server telling the truth is accepted, over RDMA, byte-exact.
#[test]
fn truthful_final_is_accepted() {
    let (c, got, want, cancels) = range_get(Lie::Truth);
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
    assert_eq!(c.bytes(), 100_000);
    assert!(got == want, "bytes");
    assert_eq!(cancels, 0);
}
