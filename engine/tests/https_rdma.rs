//! The RDMA dialects on an `https://` endpoint: their control exchanges (the rc-persistent
//! pairing, hipobj-rc-v2's PREPARE / READY / CANCEL) speak TLS with the engine's TLS context,
//! while the payload moves over the soft fabric.
//!
//! The rig: our gateway in-process with the soft RDMA target, a TLS front (a test CA's
//! certificate) relaying to it, and in front of that a tap that records the first byte of
//! every TCP connection the engine opens to the endpoint. With the CA trusted, range-gets in
//! both dialects complete over `DataPath::RdmaSoft`, byte-exact, and every connection to the
//! endpoint opened with a TLS handshake record. With an unknown CA the pairing and the PREPARE
//! are refused: the op fails as the HTTP path fails (`AccessDenied`, class `Transport`, the
//! problem named) on that one connection, not sent another way, and no connection ever spoke
//! plaintext.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
#[path = "../../cli/tests/support/tls_front.rs"]
mod tls_front;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use engine::{Dialect, Engine, Fabric, RegisterOptions};
use raw::call;
use rig::{WAIT, pattern, soft_gateway};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, DataPath, ErrorClass, ErrorCode};
use s3_lite::net::tls::CertificateProblem;
use tls_front::TlsFront;

/// A plain TCP relay that records the first byte each connection sent (0x16: a TLS
/// handshake record; `b'P'`/`b'G'`: plaintext HTTP).
struct Tap {
    addr: SocketAddr,
    first_bytes: Arc<Mutex<Vec<u8>>>,
}

impl Tap {
    fn start(backend: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let first_bytes = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&first_bytes);
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let seen = Arc::clone(&seen);
                std::thread::spawn(move || relay(client, backend, &seen));
            }
        });
        Self { addr, first_bytes }
    }

    fn first_bytes(&self) -> Vec<u8> {
        self.first_bytes.lock().unwrap().clone()
    }
}

fn relay(client: TcpStream, backend: SocketAddr, seen: &Mutex<Vec<u8>>) {
    let mut first = [0u8; 1];
    if !matches!(client.peek(&mut first), Ok(1)) {
        return;
    }
    seen.lock().unwrap().push(first[0]);
    let Ok(upstream) = TcpStream::connect(backend) else {
        return;
    };
    let pipe = |mut from: TcpStream, mut to: TcpStream| {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    };
    let (c2, u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let back = std::thread::spawn(move || pipe(u2, c2));
    pipe(client, upstream);
    let _ = back.join();
}

/// Whom the engine trusts.
#[derive(Debug, Clone, Copy)]
enum Trust {
    /// The front's CA, as the CA bundle.
    FrontsCa,
    /// The built-in Mozilla roots, which do not know the test CA.
    BuiltInRoots,
    /// Any certificate (`insecure_skip_tls_verify`).
    SkipVerify,
}

/// The gateway with the soft target, an object on it, and the TLS front behind a tap.
struct Rig {
    _root: tempfile::TempDir,
    _gw: hipobj_gateway::RunningGateway,
    front: TlsFront,
    tap: Tap,
    data: Vec<u8>,
}

impl Rig {
    fn start() -> Self {
        let root = tempfile::tempdir().unwrap();
        let gw = soft_gateway(root.path());
        let data = pattern(3 * (1 << 20) + 777, 9);
        assert_eq!(
            call(gw.local_addr(), "PUT", "/tlsb", "", &[], b"").status(),
            200
        );
        let r = call(gw.local_addr(), "PUT", "/tlsb/obj.bin", "", &[], &data);
        assert_eq!(r.status(), 200, "{}", r.text());
        let front = TlsFront::start(gw.local_addr());
        let tap = Tap::start(SocketAddr::from(([127, 0, 0, 1], front.port)));
        Self {
            _root: root,
            _gw: gw,
            front,
            tap,
            data,
        }
    }

    /// An engine on the soft fabric in `dialect` for `https://` through the tap, trusting as
    /// `trust` says.
    fn engine(&self, dialect: Dialect, trust: Trust, dir: &std::path::Path) -> Engine {
        let b = rig::engine_builder(self.tap.addr)
            .endpoint_url(format!("https://{}", self.tap.addr))
            .fabric(Fabric::Soft)
            .dialect(dialect);
        match trust {
            Trust::FrontsCa => b.ca_bundle(self.front.write_ca(dir)),
            Trust::BuiltInRoots => b,
            Trust::SkipVerify => b.insecure_skip_tls_verify(true),
        }
        .build()
        .unwrap()
    }

    /// Every connection to the endpoint so far opened with a TLS handshake record; returns
    /// how many there were.
    fn all_tls(&self) -> usize {
        let firsts = self.tap.first_bytes();
        assert!(
            firsts.iter().all(|&b| b == 0x16),
            "a connection to the https endpoint spoke plaintext: first bytes {firsts:?}"
        );
        firsts.len()
    }
}

/// Range-gets (several at once, one crossing the object's end) in `dialect` complete over the
/// soft fabric, byte-exact, with the endpoint's certificate checked as `trust` says.
fn range_gets_over_rdma(dialect: Dialect, trust: Trust) {
    let rig = Rig::start();
    let dir = tempfile::tempdir().unwrap();
    let engine = rig.engine(dialect, trust, dir.path());
    let obj = engine.object("tlsb", "obj.bin").unwrap();
    let buf = engine
        .register_host(8 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(16).unwrap();
    let len = rig.data.len() as u64;
    let ranges: [(u64, u64); 4] = [
        (0, 4096),
        (1_000_003, 1_500_000),
        (1 << 20, 1 << 20),
        (len - 10_000, 10_000),
    ];
    let mut at = 0u64;
    let mut placed = Vec::new();
    for (i, &(off, n)) in ranges.iter().enumerate() {
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, at, n))
                .user_data(i as u64)
                .build(),
        )
        .unwrap();
        placed.push((at, off, n));
        at += n;
    }
    assert_eq!(q.wait(ranges.len(), Some(WAIT)), ranges.len());
    for c in q.completion() {
        assert!(
            c.is_ok(),
            "{dialect:?} range {} failed: {c:?} (tls: {:?})",
            c.user_data(),
            engine.tls_failure()
        );
        assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{dialect:?}: {c:?}");
        let (at, off, n) = placed[c.user_data() as usize];
        assert_eq!(c.bytes(), n);
        let off = off as usize;
        assert!(
            *engine.read(buf, at, n).unwrap() == rig.data[off..off + n as usize],
            "{dialect:?} range {} differs",
            c.user_data()
        );
    }
    assert_eq!(engine.tls_failure(), None);
    drop(engine);
    assert!(rig.all_tls() >= 1, "no connection reached the endpoint");
}

#[test]
fn rc_persistent_range_gets_over_https_move_by_rdma() {
    range_gets_over_rdma(Dialect::RcPersistent, Trust::FrontsCa);
}

#[test]
fn rc_v2_range_gets_over_https_move_by_rdma() {
    range_gets_over_rdma(Dialect::RcV2, Trust::FrontsCa);
}

/// `insecure_skip_tls_verify` reaches the side exchanges too: an unknown CA is accepted.
#[test]
fn skipping_verification_lets_both_dialects_pair_with_an_unknown_ca() {
    range_gets_over_rdma(Dialect::RcPersistent, Trust::SkipVerify);
    range_gets_over_rdma(Dialect::RcV2, Trust::SkipVerify);
}

/// With an unknown CA, the dialect's control exchange is refused: the op fails with the
/// certificate problem named, exactly as an HTTP op does, and nothing went out in plaintext.
fn unknown_ca_is_refused(dialect: Dialect) {
    let rig = Rig::start();
    let dir = tempfile::tempdir().unwrap();
    let engine = rig.engine(dialect, Trust::BuiltInRoots, dir.path());
    let obj = engine.object("tlsb", "obj.bin").unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 65_536))
            .user_data(1)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert!(!c.is_ok(), "{dialect:?}: an unknown CA must be refused");
    assert_eq!(c.error_code(), Some(ErrorCode::AccessDenied), "{c:?}");
    assert_eq!(c.error_class(), Some(ErrorClass::Transport), "{c:?}");
    assert_eq!(
        engine.tls_failure(),
        Some(CertificateProblem::UnknownIssuer)
    );
    drop(engine);
    // One connection: the control exchange's, refused. The op was not sent another way (a
    // broken exchange would have resumed it over HTTP: a second connection).
    assert_eq!(rig.all_tls(), 1, "{dialect:?}: connections to the endpoint");
}

#[test]
fn rc_persistent_pairing_refuses_an_unknown_ca() {
    unknown_ca_is_refused(Dialect::RcPersistent);
}

#[test]
fn rc_v2_prepare_refuses_an_unknown_ca() {
    unknown_ca_is_refused(Dialect::RcV2);
}
