//! Hostile `rc-persistent` requests, crafted by hand and signed with s3-lite's signer: tokens
//! reaching outside the client's registration, a wrong rkey, a session of another principal.
//! The registration sits in the middle of three pages of canaries, so "no byte outside the
//! window is touched" is checked on the bytes around it too. On the soft fabric (CI) the
//! client's fabric refuses the access; on verbs (`#[ignore]`d, the Soft-RoCE VM lane) the
//! device does.

#[path = "support/raw.rs"]
mod raw;

use std::net::{Ipv4Addr, SocketAddr};
use std::ptr::NonNull;

use engine::rc::{Access, RcCaps, RcCq, RcDevice, RcMr, RcPd, RcQp, SoftPath};
use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use raw::{ACCESS, SECRET, call, now, req, send, signer};
use s3_lite::rdma::{RcToken, Reply};
use s3_lite::sigv4::PayloadHash;

const PAGE: usize = 64 * 1024;
const CANARY: u8 = 0x5C;

fn signed(
    a: SocketAddr,
    method: &str,
    path: &str,
    h: &[(&str, String)],
    key: (&str, &str),
) -> raw::Response {
    let mut q = req(a, method, path, "");
    for (n, v) in h {
        q.add_header(*n, v.clone());
    }
    signer(key.0, key.1)
        .sign_headers(&mut q, &PayloadHash::Unsigned, now())
        .unwrap();
    send(a, &q, b"")
}

/// The client's device: the soft fabric, or verbs on `ENGINE_TEST_NIC` (default `rxe0`).
fn device(verbs: bool) -> RcDevice {
    if verbs {
        let nic = std::env::var("ENGINE_TEST_NIC").unwrap_or_else(|_| "rxe0".to_owned());
        RcDevice::open_verbs(Some(&nic)).expect("a verbs device")
    } else {
        RcDevice::soft(Ipv4Addr::LOCALHOST)
    }
}

/// A paired client whose registration is the middle page of three canary pages.
struct Guarded {
    // Drop order: the QP and the registration before the memory.
    qp: RcQp,
    _cq: RcCq,
    pd: RcPd,
    /// The registration until `check` ends it.
    mr: Option<RcMr>,
    /// Its address and rkey.
    keys: (u64, u32),
    session: String,
    _dev: RcDevice,
    buf: Box<[u8]>,
}

impl Guarded {
    fn pair(a: SocketAddr, verbs: bool) -> Self {
        let mut buf = vec![CANARY; 3 * PAGE].into_boxed_slice();
        let dev = device(verbs);
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(16).unwrap();
        let qp = dev.create_qp(&pd, &cq, &cq, RcCaps::default()).unwrap();
        let access = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE;
        qp.modify_to_init(access).unwrap();
        let ptr = NonNull::new(buf.as_mut_ptr().wrapping_add(PAGE)).unwrap();
        // SAFETY: the middle page of `buf` lives in this struct and outlives the registration
        // (deregistered in `check`, or dropped before `buf`); the test reads `buf` only after
        // the exchange that could access it has been answered (the gateway answers after its
        // transfer ended) and after deregistering in `check`.
        let mr = unsafe { pd.register_raw(ptr, PAGE, access) }.unwrap();
        let keys = (mr.addr(), mr.rkey());
        let psn = 0x777u32;
        let tok = qp.local_token(None).unwrap();
        let r = signed(
            a,
            "POST",
            "/.hipobj/rc/connect",
            &[
                ("x-amz-rdma-token", tok.encode()),
                ("x-amz-rdma-psn", format!("{psn:06x}")),
                ("x-amz-rdma-fabric", dev.kind().as_str().to_owned()),
            ],
            (ACCESS, SECRET),
        );
        assert_eq!(r.status(), 200, "{}", r.text());
        let server = match Reply::parse(r.header("x-amz-rdma-reply").unwrap()).unwrap() {
            Reply::Code {
                code: 200,
                peer_token: Some(t),
            } => t,
            other => panic!("{other:?}"),
        };
        let spsn = u32::from_str_radix(r.header("x-amz-rdma-psn").unwrap(), 16).unwrap();
        let path = r
            .header("x-amz-rdma-soft-addr")
            .map(|v| SoftPath::Connect(v.parse().unwrap()));
        qp.connect(&server, spsn, psn, path).unwrap();
        Self {
            qp,
            _cq: cq,
            pd,
            mr: Some(mr),
            keys,
            session: r.header("x-amz-rdma-session").unwrap().to_owned(),
            _dev: dev,
            buf,
        }
    }

    fn token(&self, addr: u64, len: u64, rkey: u32) -> String {
        let mut t: RcToken = self.qp.local_token(None).unwrap();
        t.addr = addr;
        t.length = len;
        t.rkey = rkey;
        t.encode()
    }

    /// Ends the registration (the fence: no access can run after it) and checks every
    /// byte of the three pages; `window` = bytes expected in the middle page.
    fn check(mut self, window: Option<&[u8]>) {
        if let Some(mr) = self.mr.take() {
            self.pd.deregister(mr).unwrap();
        }
        let (before, rest) = self.buf.split_at(PAGE);
        let (mid, after) = rest.split_at(PAGE);
        assert!(before.iter().all(|&b| b == CANARY), "page before touched");
        assert!(after.iter().all(|&b| b == CANARY), "page after touched");
        match window {
            None => assert!(mid.iter().all(|&b| b == CANARY), "window touched"),
            Some(w) => {
                assert_eq!(&mid[..w.len()], w);
                assert!(mid[w.len()..].iter().all(|&b| b == CANARY));
            }
        }
    }
}

#[test]
fn hostile_tokens_and_foreign_sessions_touch_nothing() {
    hostile(false);
}

#[test]
#[ignore = "needs an RDMA device (Soft-RoCE VM lane: benches/rxe/run-lane.sh)"]
fn verbs_hostile_tokens_and_foreign_sessions_touch_nothing() {
    hostile(true);
}

fn hostile(verbs: bool) {
    let dir = tempfile::tempdir().unwrap();
    let target = if verbs {
        let nic = std::env::var("ENGINE_TEST_NIC").unwrap_or_else(|_| "rxe0".to_owned());
        RcTarget::start_verbs(Some(&nic), RcLimits::default()).unwrap()
    } else {
        RcTarget::start(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            RcLimits::default(),
        )
        .unwrap()
    };
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(ACCESS, SECRET)
        .credentials("other-key", "other-secret")
        .rdma_target(target)
        .start()
        .unwrap();
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let data: Vec<u8> = (0..PAGE / 2).map(|i| (i * 7 + 1) as u8).collect();
    assert_eq!(call(a, "PUT", "/bkt/obj", "", &[], &data).status(), 200);
    let n = data.len() as u64;

    // GET tokens: (start, rkey tweak) relative to the registration.
    // (registration address, rkey) → (token address, length, rkey).
    type Case = (&'static str, fn((u64, u32)) -> (u64, u64, u32));
    let cases: [Case; 5] = [
        ("straddles the start", |(at, rkey)| {
            (at - 4096, n_of(), rkey)
        }),
        ("straddles the end", |(at, rkey)| {
            (at + PAGE as u64 - 100, n_of(), rkey)
        }),
        ("entirely after", |(at, rkey)| {
            (at + PAGE as u64 + 8, n_of(), rkey)
        }),
        ("entirely before", |(at, rkey)| {
            (at - PAGE as u64, n_of(), rkey)
        }),
        ("wrong rkey", |(at, rkey)| (at, n_of(), rkey ^ 0x0101)),
    ];
    fn n_of() -> u64 {
        (PAGE / 2) as u64
    }
    for (what, f) in cases {
        let c = Guarded::pair(a, verbs);
        let (addr, len, rkey) = f(c.keys);
        assert_eq!(len, n);
        let h = [
            ("x-amz-rdma-token", c.token(addr, len, rkey)),
            ("x-amz-rdma-session", c.session.clone()),
        ];
        let r = signed(a, "GET", "/bkt/obj", &h, (ACCESS, SECRET));
        assert!(r.status() >= 400, "{what}: {}", r.status());
        assert_ne!(r.header("x-amz-rdma-reply"), Some("200"), "{what}");
        c.check(None);
    }

    // PUT reading from outside the registration: refused, nothing stored.
    let c = Guarded::pair(a, verbs);
    let h = [
        ("x-amz-rdma-token", c.token(c.keys.0 - 4096, 8192, c.keys.1)),
        ("x-amz-rdma-session", c.session.clone()),
        ("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=".to_owned()),
        ("Content-Length", "0".to_owned()),
    ];
    let r = signed(a, "PUT", "/bkt/evil", &h, (ACCESS, SECRET));
    assert!(r.status() >= 400, "{}", r.status());
    assert_eq!(call(a, "GET", "/bkt/evil", "", &[], b"").status(), 404);
    c.check(None);

    // Another principal presenting this client's session: refused like an unknown session,
    // nothing written; the owner's connection still works afterwards.
    let c = Guarded::pair(a, verbs);
    let h = [
        ("x-amz-rdma-token", c.token(c.keys.0, n, c.keys.1)),
        ("x-amz-rdma-session", c.session.clone()),
    ];
    let r = signed(a, "GET", "/bkt/obj", &h, ("other-key", "other-secret"));
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchRdmaSession"));
    let h2 = [
        ("x-amz-rdma-token", c.token(c.keys.0, n, c.keys.1)),
        ("x-amz-rdma-session", c.session.clone()),
        ("Content-Length", "0".to_owned()),
    ];
    let r = signed(a, "PUT", "/bkt/stolen", &h2, ("other-key", "other-secret"));
    assert_eq!(r.status(), 404, "{}", r.text());
    assert_eq!(call(a, "GET", "/bkt/stolen", "", &[], b"").status(), 404);
    // The owner: an exact in-bounds GET lands in the window, nowhere else.
    let r = signed(a, "GET", "/bkt/obj", &h, (ACCESS, SECRET));
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("200"));
    c.check(Some(&data));
    gw.shutdown();
}

/// The hipobj-rc-v2 routes are not served yet: a signed PREPARE gets what a v2 server with RC
/// disabled answers (501 + `X-Amz-Rdma-Protocol-Status: unsupported`), so a v2 client falls
/// back to HTTP; unsigned it is refused first.
#[test]
fn v2_prepare_is_declined_with_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let gw = raw::start(dir.path());
    let a = gw.local_addr();
    let h = [
        ("x-amz-rdma-protocol", "hipobj-rc-v2".to_owned()),
        ("x-amz-rdma-token", "0".repeat(88)),
        ("x-amz-rdma-psn", "000001".to_owned()),
        ("x-amz-rdma-cookie", "0000abcd".to_owned()),
        ("x-amz-rdma-op", "GET".to_owned()),
        ("x-amz-rdma-target", "/bkt/obj".to_owned()),
        ("x-amz-rdma-size", "4096".to_owned()),
    ];
    for route in [
        "/.hipobj-rc/prepare",
        "/.hipobj-rc/ready",
        "/.hipobj-rc/cancel",
    ] {
        let r = signed(a, "POST", route, &h, (ACCESS, SECRET));
        assert_eq!(r.status(), 501, "{route}: {}", r.text());
        assert_eq!(r.header("x-amz-rdma-protocol-status"), Some("unsupported"));
    }
    let q = req(a, "POST", "/.hipobj-rc/prepare", "");
    assert_eq!(send(a, &q, b"").status(), 403);
    gw.shutdown();
}
