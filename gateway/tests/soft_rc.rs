//! `--fabric soft`, the `rc-persistent` dialect, driven by a hand-built client (engine::soft +
//! signed raw requests): pairing, GET / RANGE_GET / PUT byte-exact, declines, principal
//! binding, and hostile tokens that must not touch a byte outside the granted window.

#[path = "support/raw.rs"]
mod raw;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::soft::{
    Access, CompletionQueue, MemoryRegion, ProtectionDomain, QpCaps, QueuePair, SoftDevice,
    SoftPath,
};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::*;
use s3_lite::checksum::{Checksum, ChecksumAlgorithm};
use s3_lite::rdma::{RcToken, Reply};
use s3_lite::sigv4::PayloadHash;

fn start_soft(root: &std::path::Path) -> RunningGateway {
    let t = RcTarget::start(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        RcLimits::default(),
    )
    .unwrap();
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .credentials("second-key", "second-secret")
        .rdma_target(t)
        .start()
        .unwrap()
}

/// A client side: one QP paired through the connect route, one registered window.
struct Client {
    qp: QueuePair,
    _cq: Arc<CompletionQueue>,
    pd: ProtectionDomain,
    mr: MemoryRegion,
    session: String,
    _dev: SoftDevice,
}

const WINDOW: usize = 4 << 20;

fn signed(
    a: SocketAddr,
    method: &str,
    path: &str,
    query: &str,
    headers: &[(&str, String)],
    access: (&str, &str),
) -> raw::Response {
    let mut q = req(a, method, path, query);
    for (n, v) in headers {
        q.add_header(*n, v.clone());
    }
    signer(access.0, access.1)
        .sign_headers(&mut q, &PayloadHash::Unsigned, now())
        .unwrap();
    send(a, &q, b"")
}

fn pair(a: SocketAddr, access: (&str, &str)) -> Client {
    pair_with(a, access, &[])
}

/// [`pair`], with `extra` headers on the connect request.
fn pair_with(a: SocketAddr, access: (&str, &str), extra: &[(&str, &str)]) -> Client {
    let dev = SoftDevice::new(Ipv4Addr::LOCALHOST);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq();
    let qp = dev.create_qp(&pd, &cq, &cq, QpCaps::default());
    qp.modify_to_init(Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE)
        .unwrap();
    let mr = pd
        .register_owned(
            WINDOW,
            Access::REMOTE_READ | Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        )
        .unwrap();
    let psn = 0x1234u32;
    let tok = qp.local_token(None).unwrap();
    let mut h = vec![
        ("x-amz-rdma-token", tok.encode()),
        ("x-amz-rdma-psn", format!("{psn:06x}")),
    ];
    h.extend(extra.iter().map(|(n, v)| (*n, (*v).to_owned())));
    let r = signed(a, "POST", "/.hipobj/rc/connect", "", &h, access);
    assert_eq!(r.status(), 200, "{}", r.text());
    let reply = Reply::parse(r.header("x-amz-rdma-reply").unwrap()).unwrap();
    let server: RcToken = match reply {
        Reply::Code {
            code: 200,
            peer_token: Some(t),
        } => t,
        other => panic!("{other:?}"),
    };
    let spsn = u32::from_str_radix(r.header("x-amz-rdma-psn").unwrap(), 16).unwrap();
    let soft: SocketAddr = r.header("x-amz-rdma-soft-addr").unwrap().parse().unwrap();
    qp.connect(&server, spsn, psn, SoftPath::Connect(soft))
        .unwrap();
    Client {
        qp,
        _cq: cq,
        pd,
        mr,
        session: r.header("x-amz-rdma-session").unwrap().to_owned(),
        _dev: dev,
    }
}

impl Client {
    fn token(&self, off: u64, len: u64) -> String {
        self.qp
            .local_token(Some((&self.mr, off, len)))
            .unwrap()
            .encode()
    }

    fn get(&self, a: SocketAddr, path: &str, tok: String, range: Option<&str>) -> raw::Response {
        let mut h = vec![
            ("x-amz-rdma-token", tok),
            ("x-amz-rdma-session", self.session.clone()),
        ];
        if let Some(r) = range {
            h.push(("Range", r.to_owned()));
        }
        signed(a, "GET", path, "", &h, (ACCESS, SECRET))
    }

    /// A GET of all `len` bytes of `path` into a fresh window (a region's landing digest breaks
    /// for good on a local write), whose landing is tracked when `tracked`, with `extra`
    /// request headers.
    fn get_into_fresh_window(
        &self,
        a: SocketAddr,
        path: &str,
        len: usize,
        tracked: bool,
        extra: &[(&'static str, &str)],
    ) -> (raw::Response, MemoryRegion, Option<engine::soft::Landing>) {
        let mr = self
            .pd
            .register_owned(len, Access::REMOTE_WRITE | Access::LOCAL_WRITE)
            .unwrap();
        let landing = tracked.then(|| mr.track_landing());
        let tok = self
            .qp
            .local_token(Some((&mr, 0, len as u64)))
            .unwrap()
            .encode();
        let mut h = vec![
            ("x-amz-rdma-token", tok),
            ("x-amz-rdma-session", self.session.clone()),
        ];
        h.extend(extra.iter().map(|(n, v)| (*n, (*v).to_owned())));
        let r = signed(a, "GET", path, "", &h, (ACCESS, SECRET));
        (r, mr, landing)
    }
}

/// The request header asking for an early answer, when `early`.
fn early_answer(early: bool) -> &'static [(&'static str, &'static str)] {
    if early {
        &[("x-amz-rdma-early-answer", "1")]
    } else {
        &[]
    }
}

/// Waits (20 s at most) until `landing`'s digest covers the first `len` bytes; their CRC-64.
fn landed(landing: &engine::soft::Landing, len: u64) -> u64 {
    let t = Instant::now();
    loop {
        match landing.state_of_first(len) {
            engine::soft::Landed::Covered(crc) => return crc,
            engine::soft::Landed::Pending if t.elapsed().as_secs() < 20 => {
                std::thread::sleep(Duration::from_millis(1));
            }
            other => panic!("the bytes did not land: {other:?}"),
        }
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn crc64(data: &[u8]) -> String {
    Checksum::compute(ChecksumAlgorithm::Crc64Nvme, data).to_base64()
}

#[test]
fn get_range_put_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_soft(dir.path());
    let a = gw.local_addr();
    assert_eq!(gw.fabric(), "soft");
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let data = pattern(3 * (1 << 20) + 12_345, 7);
    assert_eq!(call(a, "PUT", "/bkt/obj", "", &[], &data).status(), 200);
    let c = pair(a, (ACCESS, SECRET));

    // Whole object at offset 4096 of the window.
    let r = c.get(a, "/bkt/obj", c.token(4096, data.len() as u64), None);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("200"));
    let n = data.len().to_string();
    assert_eq!(r.header("x-amz-rdma-bytes-transferred"), Some(n.as_str()));
    assert_eq!(r.header("x-amz-rdma-bytes"), Some(n.as_str()));
    assert_eq!(r.header("content-length"), Some("0"));
    assert!(r.body.is_empty());
    assert_eq!(c.mr.to_vec(4096, data.len()).unwrap(), data);
    // Bytes around the landing zone untouched.
    assert!(c.mr.to_vec(0, 4096).unwrap().iter().all(|&b| b == 0));

    // Range into offset 0, window exactly the range.
    let r = c.get(
        a,
        "/bkt/obj",
        c.token(0, 1000),
        Some("bytes=1048000-1048999"),
    );
    assert_eq!(r.status(), 206, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("206"));
    assert_eq!(r.header("x-amz-rdma-bytes-transferred"), Some("1000"));
    assert_eq!(c.mr.to_vec(0, 1000).unwrap(), &data[1_048_000..1_049_000]);

    // Window smaller than the range: refused, nothing written beyond.
    c.mr.write(0, &[0xAA; 2000]).unwrap();
    let r = c.get(a, "/bkt/obj", c.token(0, 999), Some("bytes=0-999"));
    assert_eq!(r.status(), 400, "{}", r.text());
    assert!(c.mr.to_vec(999, 1001).unwrap().iter().all(|&b| b == 0xAA));

    // PUT: body-less, the gateway READs the window; checksum verified and echoed.
    let up = pattern(2 * (1 << 20) + 77, 99);
    c.mr.write(8192, &up).unwrap();
    let h = [
        ("x-amz-rdma-token", c.token(8192, up.len() as u64)),
        ("x-amz-rdma-session", c.session.clone()),
        ("x-amz-checksum-crc64nvme", crc64(&up)),
        ("Content-Length", "0".to_owned()),
    ];
    let r = signed(a, "PUT", "/bkt/up", "", &h, (ACCESS, SECRET));
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("200"));
    assert_eq!(
        r.header("x-amz-checksum-crc64nvme"),
        Some(crc64(&up).as_str())
    );
    assert!(r.header("etag").is_some());
    let g = call(a, "GET", "/bkt/up", "", &[], b"");
    assert_eq!(g.body, up);

    // A wrong checksum: BadDigest, nothing stored.
    let h = [
        ("x-amz-rdma-token", c.token(8192, up.len() as u64)),
        ("x-amz-rdma-session", c.session.clone()),
        ("x-amz-checksum-crc64nvme", crc64(b"other")),
        ("Content-Length", "0".to_owned()),
    ];
    let r = signed(a, "PUT", "/bkt/up2", "", &h, (ACCESS, SECRET));
    assert_eq!((r.status(), r.code().as_str()), (400, "BadDigest"));
    assert_eq!(call(a, "GET", "/bkt/up2", "", &[], b"").status(), 404);
    gw.shutdown();
}

/// `x-amz-rdma-early-answer: 1` (a client that sees its bytes land): the gateway answers once
/// its WRITEs are posted and says so; the bytes then finish landing in the window, in order,
/// with the checksum the answer named. Without the header the answer comes after every WRITE
/// completed: the window's landing digest already covers the bytes when it arrives.
#[test]
fn an_early_answer_is_echoed_and_the_bytes_still_land_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_soft(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let data = pattern(3 * (1 << 20) + 12_345, 5);
    assert_eq!(call(a, "PUT", "/bkt/obj", "", &[], &data).status(), 200);
    let c = pair(a, (ACCESS, SECRET));
    let len = data.len() as u64;
    for early in [false, true] {
        let (r, mr, landing) =
            c.get_into_fresh_window(a, "/bkt/obj", data.len(), true, early_answer(early));
        let landing = landing.unwrap();
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(r.header("x-amz-rdma-reply"), Some("200"));
        let named = r
            .header("x-amz-rdma-checksum-crc64nvme")
            .unwrap()
            .to_owned();
        assert_eq!(named, crc64(&data));
        let state = landing.state_of_first(len);
        if early {
            assert_eq!(r.header("x-amz-rdma-early-answer"), Some("1"));
        } else {
            assert_eq!(r.header("x-amz-rdma-early-answer"), None);
            assert!(
                matches!(state, engine::soft::Landed::Covered(_)),
                "answered before the bytes landed: {state:?}"
            );
        }
        let crc = landed(&landing, len);
        assert_eq!(s3_lite::checksum::encode_crc64nvme(crc), named);
        assert_eq!(mr.to_vec(0, data.len()).unwrap(), data);
    }
    gw.shutdown();
}

/// `x-amz-rdma-frame-check: landing` makes the gateway send the GET's WRITEs without their
/// frame checksums; the client's fabric accepts such frames only into a window whose landing
/// it tracks. So: asked with a tracked window, the bytes land exactly and the digest covers
/// them; not asked, an untracked window is served as ever; asked with an untracked window,
/// the client's fabric refuses the first frame, the GET fails and nothing lands.
#[test]
fn frames_go_without_checksums_only_when_the_client_asks() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_soft(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let data = pattern(2 * (1 << 20) + 999, 9);
    assert_eq!(call(a, "PUT", "/bkt/obj", "", &[], &data).status(), 200);
    let c = pair(a, (ACCESS, SECRET));
    let len = data.len() as u64;
    let get = |tracked: bool, ask: bool| {
        let h: &[_] = if ask {
            &[("x-amz-rdma-frame-check", "landing")]
        } else {
            &[]
        };
        c.get_into_fresh_window(a, "/bkt/obj", data.len(), tracked, h)
    };
    let (r, mr, landing) = get(true, true);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(mr.to_vec(0, data.len()).unwrap(), data);
    let Some(engine::soft::Landed::Covered(crc)) = landing.map(|l| l.state_of_first(len)) else {
        panic!("the digest does not cover the bytes");
    };
    assert_eq!(s3_lite::checksum::encode_crc64nvme(crc), crc64(&data));

    let (r, mr, _) = get(false, false);
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(mr.to_vec(0, data.len()).unwrap(), data);

    let (r, mr, _) = get(false, true);
    assert_eq!(r.status(), 500, "{}", r.text());
    assert!(
        mr.to_vec(0, data.len()).unwrap().iter().all(|&b| b == 0),
        "an unchecked frame landed in an untracked window"
    );
    assert_eq!(
        c.qp.state(),
        engine::soft::QpState::Err,
        "the refusal failed the QP"
    );
    gw.shutdown();
}

/// A client whose pairing names the soft feature `ack-later` may acknowledge the last WRITE of
/// a small GET answered early later (the frame carries `ACK_LATER`). A GET not answered early,
/// a large one (its held staging buffer would cost more than the acknowledgement saves), or
/// a client paired without the feature (an older one, which would refuse the flag) gets no
/// such frame.
#[test]
fn the_last_write_of_a_small_early_answer_is_acked_later_when_the_client_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_soft(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let small = pattern(200_000, 4);
    let large = pattern(3 * (1 << 20) + 5, 5);
    assert_eq!(call(a, "PUT", "/bkt/small", "", &[], &small).status(), 200);
    assert_eq!(call(a, "PUT", "/bkt/large", "", &[], &large).status(), 200);
    let newer = pair_with(
        a,
        (ACCESS, SECRET),
        &[("x-amz-rdma-soft-features", "ack-later")],
    );
    let older = pair(a, (ACCESS, SECRET));
    // A GET into a tracked window, answered early or not; its bytes all landed on return.
    let get = |c: &Client, path: &str, data: &[u8], early: bool| {
        let (r, mr, landing) =
            c.get_into_fresh_window(a, path, data.len(), true, early_answer(early));
        assert_eq!(r.status(), 200, "{}", r.text());
        assert_eq!(r.header("x-amz-rdma-early-answer").is_some(), early);
        landed(&landing.unwrap(), data.len() as u64);
        assert_eq!(mr.to_vec(0, data.len()).unwrap(), data);
    };
    // The count follows the digest by a moment (the frame executes after it joins).
    let acked_later = |c: &Client, want: u64| {
        let end = Instant::now() + Duration::from_secs(2);
        while c.qp.counters().frames_acked_later < want && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        c.qp.counters().frames_acked_later
    };
    get(&newer, "/bkt/small", &small, true);
    assert_eq!(acked_later(&newer, 1), 1);
    get(&newer, "/bkt/small", &small, false);
    get(&newer, "/bkt/large", &large, true);
    get(&newer, "/bkt/small", &small, true);
    assert_eq!(acked_later(&newer, 2), 2, "only the small early answers");
    get(&older, "/bkt/small", &small, true);
    get(&older, "/bkt/small", &small, false);
    assert_eq!(acked_later(&older, 0), 0);
    // A PUT right behind a small early answer: the gateway's READ follows the WRITE whose ACK
    // the client may still hold. The ACK goes first, so the PUT goes over RDMA and the QP
    // stays up (both once failed here: the next op was declined and went over HTTP).
    let up = &small[..3000];
    newer.mr.write(0, up).unwrap();
    for i in 0..10 {
        get(&newer, "/bkt/small", &small, true);
        let h = [
            ("x-amz-rdma-token", newer.token(0, up.len() as u64)),
            ("x-amz-rdma-session", newer.session.clone()),
            ("x-amz-checksum-crc64nvme", crc64(up)),
            ("Content-Length", "0".to_owned()),
        ];
        let r = signed(a, "PUT", &format!("/bkt/up{i}"), "", &h, (ACCESS, SECRET));
        assert_eq!(
            (r.status(), r.header("x-amz-rdma-reply")),
            (200, Some("200")),
            "PUT {i}: {}",
            r.text()
        );
    }
    assert_eq!(newer.qp.state(), engine::soft::QpState::Rts);
    assert_eq!(older.qp.state(), engine::soft::QpState::Rts);
    gw.shutdown();
}

#[test]
fn declines_and_principal_binding() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_soft(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    assert_eq!(
        call(a, "PUT", "/bkt/k", "", &[], b"hello soft").status(),
        200
    );
    let c = pair(a, (ACCESS, SECRET));

    // No session: GET falls back in the body with reply 501.
    let h = [("x-amz-rdma-token", c.token(0, 10))];
    let r = signed(a, "GET", "/bkt/k", "", &h, (ACCESS, SECRET));
    assert_eq!(r.header("x-amz-rdma-reply"), Some("501"));
    assert_eq!(r.body, b"hello soft");
    let h = [
        ("x-amz-rdma-token", c.token(0, 10)),
        ("x-amz-rdma-session", "0".repeat(32)),
        ("Content-Length", "0".to_owned()),
    ];
    let r = signed(a, "PUT", "/bkt/k2", "", &h, (ACCESS, SECRET));
    assert_eq!(r.status(), 501);
    assert_eq!(r.header("x-amz-rdma-reply"), Some("501"));
    assert_eq!(call(a, "GET", "/bkt/k2", "", &[], b"").status(), 404);

    // Another principal presenting this session: refused, the window untouched.
    c.mr.write(0, &[0x55; 16]).unwrap();
    let h = [
        ("x-amz-rdma-token", c.token(0, 10)),
        ("x-amz-rdma-session", c.session.clone()),
    ];
    let r = signed(a, "GET", "/bkt/k", "", &h, ("second-key", "second-secret"));
    assert_eq!((r.status(), r.code().as_str()), (404, "NoSuchRdmaSession"));
    assert_eq!(c.mr.to_vec(0, 16).unwrap(), vec![0x55; 16]);

    // An unsigned session header: 403.
    let mut q = req(a, "GET", "/bkt/k", "");
    q.add_header("x-amz-rdma-token", c.token(0, 10));
    let mut q = sign(q, b"", None);
    q.add_header("x-amz-rdma-session", c.session.clone());
    assert_eq!(send(a, &q, b"").status(), 403);

    // Connect route without a fabric: 501 + reply 501.
    let plain = start(dir.path());
    let r = signed(
        plain.local_addr(),
        "POST",
        "/.hipobj/rc/connect",
        "",
        &[
            ("x-amz-rdma-token", c.token(0, 0)),
            ("x-amz-rdma-psn", "000001".into()),
        ],
        (ACCESS, SECRET),
    );
    assert_eq!(r.status(), 501);
    assert_eq!(r.header("x-amz-rdma-reply"), Some("501"));
    plain.shutdown();

    // A QP of the other fabric (verbs) cannot pair with the soft target: 501 + reply 501, so
    // the client falls back instead of timing out on a path that cannot exist. Its own fabric
    // named explicitly pairs, and the reply names the fabric.
    let pair_as = |fabric: &str| {
        signed(
            a,
            "POST",
            "/.hipobj/rc/connect",
            "",
            &[
                ("x-amz-rdma-token", c.token(0, 0)),
                ("x-amz-rdma-psn", "000001".into()),
                ("x-amz-rdma-fabric", fabric.into()),
            ],
            (ACCESS, SECRET),
        )
    };
    let r = pair_as("verbs");
    assert_eq!(r.status(), 501, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-reply"), Some("501"));
    let r = pair_as("soft");
    assert_eq!(r.status(), 200, "{}", r.text());
    assert_eq!(r.header("x-amz-rdma-fabric"), Some("soft"));
    gw.shutdown();
}

#[test]
fn hostile_tokens_touch_nothing_outside_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let gw = start_soft(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/bkt", "", &[], b"").status(), 200);
    let data = pattern(64 * 1024, 3);
    assert_eq!(call(a, "PUT", "/bkt/obj", "", &[], &data).status(), 200);

    // Wrong rkey: the client's fabric refuses the WRITE; nothing lands anywhere.
    let c = pair(a, (ACCESS, SECRET));
    c.mr.write(0, &vec![0xC3; WINDOW]).unwrap();
    let mut t =
        c.qp.local_token(Some((&c.mr, 0, data.len() as u64)))
            .unwrap();
    t.rkey ^= 0x5a5a;
    let r = c.get(a, "/bkt/obj", t.encode(), None);
    assert!(r.status() >= 400, "{}", r.status());
    assert!(r.header("x-amz-rdma-reply").is_none_or(|v| v != "200"));
    assert!(c.mr.to_vec(0, WINDOW).unwrap().iter().all(|&b| b == 0xC3));

    // A token reaching past the end of the registration (a fresh pairing: the last one failed).
    let c = pair(a, (ACCESS, SECRET));
    c.mr.write(0, &vec![0xC3; WINDOW]).unwrap();
    let mut t = c.qp.local_token(Some((&c.mr, 0, 16))).unwrap();
    t.addr = c.mr.addr() + WINDOW as u64 - 1024;
    t.length = data.len() as u64;
    let r = c.get(a, "/bkt/obj", t.encode(), None);
    assert!(r.status() >= 400, "{}", r.status());
    assert!(c.mr.to_vec(0, WINDOW).unwrap().iter().all(|&b| b == 0xC3));

    // Before the start of the registration, for a PUT (READ): refused, nothing stored.
    let c = pair(a, (ACCESS, SECRET));
    let mut t = c.qp.local_token(Some((&c.mr, 0, 16))).unwrap();
    t.addr = c.mr.addr() - 4096;
    t.length = 8192;
    let h = [
        ("x-amz-rdma-token", t.encode()),
        ("x-amz-rdma-session", c.session.clone()),
        ("Content-Length", "0".to_owned()),
    ];
    let r = signed(a, "PUT", "/bkt/evil", "", &h, (ACCESS, SECRET));
    assert!(r.status() >= 400, "{}", r.status());
    assert_eq!(call(a, "GET", "/bkt/evil", "", &[], b"").status(), 404);

    // After a failure the connection is gone: the next use is declined (501), so a client
    // re-pairs; the fabric keeps serving new pairings.
    let r = c.get(a, "/bkt/obj", c.token(0, data.len() as u64), None);
    assert_eq!(r.header("x-amz-rdma-reply"), Some("501"));
    let c = pair(a, (ACCESS, SECRET));
    let r = c.get(a, "/bkt/obj", c.token(0, data.len() as u64), None);
    assert_eq!(r.header("x-amz-rdma-reply"), Some("200"));
    assert_eq!(c.mr.to_vec(0, data.len()).unwrap(), data);
    let _ = &c.pd;
    gw.shutdown();
}
