//! Conformance of the engine's dialect negotiation and `mp` gating against small v2-only peers
//! (issue 12; docs/interop.md). Each peer is a proxy in front of our gateway (soft fabric,
//! in-process) that behaves like the third-party hipobj-rc-v2 server seen over Soft-RoCE
//! (elbencho's s3rdma server): the `rc-persistent` routes (`/.hipobj/rc/*`) answer `404`, and
//! - [`Peer::NoMp`]: `x-amz-rdma-capabilities` is removed from every answer and a PREPARE's
//!   `x-amz-rdma-target` loses its query (re-signed, so the gateway stores a part sent over v2
//!   as the whole object, as that server did); the engine must keep the upload intact (its
//!   parts go over HTTP);
//! - [`Peer::Mp`]: answers pass through (our gateway advertises `mp`): parts go over v2.
//!
//! Both run with the engine's defaults (`Dialect::Auto`), so they also check that an endpoint
//! refusing `rc-persistent` is spoken to in `hipobj-rc-v2` and that completions say so.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use engine::{Fabric, RegisterOptions};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::{ACCESS, SECRET, call, now, signer};
use rig::{crc64, pattern, run_one};
use ring_api::opcode::{CompleteMultipart, CreateMultipart, Get, Put, UploadPart};
use ring_api::{BufSlice, DataPath, PartNumber, UploadHandle, WireDialect};
use s3_lite::Request;
use s3_lite::sigv4::PayloadHash;

const MIB: u64 = 1 << 20;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Peer {
    NoMp,
    Mp,
}

/// What the peer saw.
#[derive(Default, Debug)]
struct Seen {
    /// `x-amz-rdma-target` of every PREPARE, as the client sent it.
    targets: Vec<String>,
    /// Requests to the rc-persistent routes.
    rc_persistent: usize,
}

fn gateway(root: &std::path::Path) -> RunningGateway {
    let t = RcTarget::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        RcLimits::default(),
    )
    .unwrap();
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .rdma_target(t)
        .start()
        .unwrap()
}

/// One request or response head: the first line and the headers, wire order.
struct Head {
    line: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, n: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str())
    }
    fn len(&self) -> usize {
        self.get("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }
    fn write(&self, s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
        let mut out = format!("{}\r\n", self.line);
        for (n, v) in &self.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        s.write_all(out.as_bytes())?;
        s.write_all(body)
    }
}

fn read_head(s: &mut TcpStream) -> Option<Head> {
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
    let line = lines.next()?.to_owned();
    let headers = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Some(Head { line, headers })
}

fn read_body(s: &mut TcpStream, n: usize) -> Option<Vec<u8>> {
    let mut body = vec![0u8; n];
    s.read_exact(&mut body).ok()?;
    Some(body)
}

/// The PREPARE with its target's query dropped, signed again with the test key (what a server
/// that ignores the query effectively serves).
fn drop_query(h: &Head, gw: SocketAddr) -> Head {
    let target = h.get("x-amz-rdma-target").unwrap_or_default();
    let bare = target.split('?').next().unwrap_or_default().to_owned();
    let mut r = Request::new("POST", "/.hipobj-rc/prepare");
    r.add_header("Host", gw.to_string());
    for (n, v) in &h.headers {
        let l = n.to_ascii_lowercase();
        if matches!(
            l.as_str(),
            "host" | "authorization" | "x-amz-date" | "x-amz-content-sha256"
        ) {
            continue;
        }
        let v = if l == "x-amz-rdma-target" { bare.clone() } else { v.clone() };
        r.add_header(n.as_str(), v);
    }
    signer(ACCESS, SECRET)
        .sign_headers(&mut r, &PayloadHash::Unsigned, now())
        .unwrap();
    Head {
        line: h.line.clone(),
        headers: r.headers.clone(),
    }
}

/// Serves one client connection: forwards to the gateway as the peer behaves.
fn serve(mut c: TcpStream, gw: SocketAddr, peer: Peer, seen: Arc<Mutex<Seen>>) {
    let Ok(mut up) = TcpStream::connect(gw) else {
        return;
    };
    while let Some(mut h) = read_head(&mut c) {
        let Some(body) = read_body(&mut c, h.len()) else {
            return;
        };
        let path = h.line.split(' ').nth(1).unwrap_or_default().to_owned();
        if path.starts_with("/.hipobj/rc/") {
            seen.lock().unwrap().rc_persistent += 1;
            let nf = Head {
                line: "HTTP/1.1 404 Not Found".into(),
                headers: vec![("Content-Length".into(), "0".into())],
            };
            if nf.write(&mut c, b"").is_err() {
                return;
            }
            continue;
        }
        if path.starts_with("/.hipobj-rc/prepare") {
            let target = h.get("x-amz-rdma-target").unwrap_or_default().to_owned();
            seen.lock().unwrap().targets.push(target.clone());
            if peer == Peer::NoMp && target.contains('?') {
                h = drop_query(&h, gw);
            }
        }
        let head_req = h.line.starts_with("HEAD ");
        if h.write(&mut up, &body).is_err() {
            return;
        }
        let Some(mut a) = read_head(&mut up) else {
            return;
        };
        let status: u16 = a
            .line
            .split(' ')
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let n = if head_req || status == 204 || status == 304 {
            0
        } else {
            a.len()
        };
        let Some(ab) = read_body(&mut up, n) else {
            return;
        };
        if peer == Peer::NoMp {
            a.headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case("x-amz-rdma-capabilities"));
        }
        if a.write(&mut c, &ab).is_err() {
            return;
        }
    }
}

fn start_peer(gw: SocketAddr, peer: Peer) -> (SocketAddr, Arc<Mutex<Seen>>) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let a = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = Arc::clone(&seen);
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let s3 = Arc::clone(&s2);
            std::thread::spawn(move || serve(c, gw, peer, s3));
        }
    });
    (a, seen)
}

/// PUT and GET a small object, then a two-part upload (5 MiB + 1 MiB + 3); the stored object
/// must equal the parts; returns the completions of the two parts.
fn run(peer: Peer) -> (Vec<ring_api::Cqe>, Arc<Mutex<Seen>>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let g = gw.local_addr();
    assert_eq!(call(g, "PUT", "/peerb", "", &[], b"").status(), 200);
    let (p, seen) = start_peer(g, peer);
    // The engine's defaults (Dialect::Auto), soft fabric.
    let engine = rig::engine_builder(p).fabric(Fabric::Soft).build().unwrap();
    let buf = engine
        .register_host(24 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();

    // PUT then GET: negotiated to hipobj-rc-v2 (the peer refuses rc-persistent).
    let small = pattern(64 * 1024 + 5, 3);
    engine.copy_in(buf, 0, &small).unwrap();
    let obj = engine.object("peerb", "small").unwrap();
    let c = run_one(
        &mut q,
        Put::new(obj, BufSlice::new(buf, 0, small.len() as u64))
            .user_data(1)
            .build(),
    );
    assert!(c.is_ok(), "{peer:?} PUT: {c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{peer:?} PUT path");
    assert_eq!(c.dialect(), Some(WireDialect::RcV2), "{peer:?} PUT dialect");
    let c = run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, MIB, MIB))
            .user_data(2)
            .build(),
    );
    assert!(c.is_ok(), "{peer:?} GET: {c:?}");
    assert_eq!(c.dialect(), Some(WireDialect::RcV2), "{peer:?} GET dialect");
    let back = engine.read(buf, MIB, small.len() as u64).unwrap().to_vec();
    assert!(back == small, "{peer:?}: GET bytes");

    let parts = [pattern(5 * MIB as usize, 7), pattern(MIB as usize + 3, 8)];
    let mp = engine.object("peerb", "mp/obj").unwrap();
    let c = run_one(&mut q, CreateMultipart::new(mp).user_data(3).build());
    assert!(c.is_ok(), "{peer:?} Create: {c:?}");
    let upload = UploadHandle(u32::try_from(c.aux()).unwrap());
    let mut at = 2 * MIB;
    let mut done = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        engine.copy_in(buf, at, part).unwrap();
        let n = PartNumber::new(i as u32 + 1).unwrap();
        let c = run_one(
            &mut q,
            UploadPart::new(mp, upload, n, BufSlice::new(buf, at, part.len() as u64))
                .user_data(10 + i as u64)
                .build(),
        );
        assert!(c.is_ok(), "{peer:?} UploadPart {}: {c:?}", i + 1);
        done.push(c);
        at += 8 * MIB;
    }
    let c = run_one(
        &mut q,
        CompleteMultipart::new(mp, upload, PartNumber::new(2).unwrap())
            .user_data(20)
            .build(),
    );
    assert!(c.is_ok(), "{peer:?} Complete: {c:?}");
    let r = call(g, "GET", "/peerb/mp/obj", "", &[], b"");
    assert_eq!(r.status(), 200);
    let want = parts.concat();
    assert_eq!(r.body.len(), want.len(), "{peer:?}: stored size");
    assert_eq!(crc64(&r.body), crc64(&want), "{peer:?}: stored checksum");
    (done, seen)
}

/// A v2 server that never advertises `mp` and ignores the target's query: the parts go over
/// HTTP and the object is intact. Before issue 12 the engine did not speak v2 by default
/// (rc-persistent 404 → HTTP), and with `Dialect::RcV2` it sent the parts over v2, where this
/// peer overwrote the object with each part (the stored size check fails).
#[test]
fn v2_server_without_mp_gets_parts_over_http() {
    let (parts, seen) = run(Peer::NoMp);
    for c in &parts {
        assert_eq!(c.path(), Some(DataPath::Http), "part path: {c:?}");
        assert_eq!(c.dialect(), Some(WireDialect::Http));
    }
    let seen = seen.lock().unwrap();
    assert!(
        seen.targets.iter().all(|t| !t.contains('?')),
        "no part went over v2: {:?}",
        seen.targets
    );
    assert!(seen.rc_persistent >= 1, "rc-persistent was tried first");
}

/// A v2 server that advertises `mp` (our gateway's answers passed through): once learned (from
/// the PUT's PREPARE), parts go over v2 and the object is intact.
#[test]
fn v2_server_with_mp_gets_parts_over_v2() {
    let (parts, seen) = run(Peer::Mp);
    for c in &parts {
        assert_eq!(c.path(), Some(DataPath::RdmaSoft), "part path: {c:?}");
        assert_eq!(c.dialect(), Some(WireDialect::RcV2));
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.targets.iter().filter(|t| t.contains("partNumber=")).count(),
        2,
        "{:?}",
        seen.targets
    );
}
