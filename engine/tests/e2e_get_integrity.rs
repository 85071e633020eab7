//! A GET succeeds only when something proves its bytes (issue 19): a fault-injecting relay
//! between the engine and our gateway lowers a whole-object GET's `Content-Length`, flips a
//! byte of a ranged HTTP body, or flips a byte on the soft fabric's data port. Each must end
//! in an error, never in a success with short or wrong bytes; without the relay the same GETs
//! succeed, exact, and say they were verified (the gateway's range checksum, the
//! rc-persistent reply checksum).

#[path = "../../cli/tests/support/s3s_fs.rs"]
mod common_s3s;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::net::{Ipv4Addr, SocketAddr};

use engine::{Engine, Fabric, RegisterOptions};
use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::{ACCESS, SECRET, call};
use rig::{pattern, run_one};
use ring_api::opcode::{Get, RangeGet};
use ring_api::{BufSlice, Cqe, DataPath, ErrorCode};

const SIZE: usize = 600_000;

/// Our gateway over `root`, with the soft fabric when `soft` (then also its data port).
fn gateway(root: &std::path::Path, soft: bool) -> (RunningGateway, Option<SocketAddr>) {
    let mut b = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET);
    let mut port = None;
    if soft {
        let t = RcTarget::start(
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            RcLimits::default(),
        )
        .unwrap();
        port = t.soft_addr();
        b = b.rdma_target(t);
    }
    (b.start().unwrap(), port)
}

/// Stores the test object and returns its bytes.
fn object(gw: SocketAddr) -> Vec<u8> {
    let data = pattern(SIZE, 19);
    assert_eq!(call(gw, "PUT", "/getint", "", &[], b"").status(), 200);
    assert_eq!(call(gw, "PUT", "/getint/obj", "", &[], &data).status(), 200);
    data
}

/// Runs one GET (`range`: offset and length, else the whole object into a 1 MiB buffer)
/// without retries; returns the completion and the destination bytes.
fn get(engine: &Engine, range: Option<(u64, u64)>) -> (Cqe, Vec<u8>) {
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("getint", "obj").unwrap();
    let sqe = match range {
        Some((off, len)) => RangeGet::new(obj, off, BufSlice::new(buf, 0, len))
            .no_retry()
            .build(),
        None => Get::new(obj, BufSlice::new(buf, 0, 1 << 20))
            .no_retry()
            .build(),
    };
    let c = run_one(&mut q, sqe);
    let got = engine.read(buf, 0, c.bytes()).unwrap().to_vec();
    (c, got)
}

fn http_engine(addr: SocketAddr) -> Engine {
    rig::engine_builder(addr)
        .fabric(Fabric::Http)
        .build()
        .unwrap()
}

#[test]
fn a_whole_get_with_a_lowered_content_length_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _) = gateway(dir.path(), false);
    let data = object(gw.local_addr());

    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::times(FaultKind::LowerContentLength(1000), 1)],
    )
    .unwrap();
    let (c, got) = get(&http_engine(relay.addr()), None);
    assert!(
        relay.stats().faults() > 0,
        "the relay never lowered a Content-Length"
    );
    assert!(
        !c.is_ok(),
        "a whole-object GET 1000 bytes short was reported complete: {c:?} ({} bytes, exact: {})",
        got.len(),
        got == data
    );
    assert_eq!(c.error_code(), Some(ErrorCode::Integrity), "{c:?}");

    // Straight to the gateway: exact, the object's size named, the bytes proven.
    let (c, got) = get(&http_engine(gw.local_addr()), None);
    assert!(c.is_ok(), "{c:?}");
    assert!(got == data);
    assert_eq!(c.aux(), SIZE as u64, "{c:?}");
    assert!(
        c.verified(),
        "the gateway's range checksum was not checked: {c:?}"
    );
    gw.shutdown();
}

#[test]
fn a_ranged_http_get_with_a_flipped_body_byte_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _) = gateway(dir.path(), false);
    let data = object(gw.local_addr());
    let (off, len) = (100_003u64, 300_000u64);

    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::times(FaultKind::Flip(12_345), 1)],
    )
    .unwrap();
    let (c, _) = get(&http_engine(relay.addr()), Some((off, len)));
    assert!(relay.stats().flips() > 0, "the relay never flipped a byte");
    assert!(!c.is_ok(), "a damaged range was reported complete: {c:?}");
    assert_eq!(c.error_code(), Some(ErrorCode::Integrity), "{c:?}");

    let (c, got) = get(&http_engine(gw.local_addr()), Some((off, len)));
    assert!(c.is_ok(), "{c:?}");
    assert!(got == data[off as usize..(off + len) as usize]);
    assert!(c.verified(), "{c:?}");
    assert_eq!(c.aux(), SIZE as u64, "{c:?}");
    gw.shutdown();
}

/// The engine talks HTTP to `http` and, on the soft fabric, dials the data port the gateway
/// names — here rewritten to a relay that flips one byte of the gateway → client stream.
#[test]
fn a_ranged_soft_get_with_a_flipped_data_port_byte_never_succeeds_with_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, soft) = gateway(dir.path(), true);
    let data = object(gw.local_addr());
    let soft = soft.expect("the gateway runs the soft fabric");
    // Past the pairing frames, inside the first WRITE of the range.
    let data_relay = Relay::start(
        "127.0.0.1:0",
        &soft.to_string(),
        vec![Fault::times(FaultKind::FlipStream(70_000), 1)],
    )
    .unwrap();
    let http_relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::always(FaultKind::RewriteHeader {
            name: "x-amz-rdma-soft-addr".into(),
            value: data_relay.addr().to_string(),
        })],
    )
    .unwrap();
    let (off, len) = (4_096u64, 500_000u64);
    let engine = rig::engine_builder(http_relay.addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let (c, got) = get(&engine, Some((off, len)));
    assert!(
        http_relay.stats().faults() > 0,
        "the connect reply named no soft address"
    );
    assert!(
        data_relay.stats().flips() > 0,
        "the data port relay never flipped a byte"
    );
    let exact = &data[off as usize..(off + len) as usize];
    assert!(
        !c.is_ok(),
        "a range damaged on the soft data port was reported complete: {c:?} (exact: {})",
        got == exact
    );

    // Without the data-port fault the same GET moves by RDMA, exact and verified.
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let (c, got) = get(&engine, Some((off, len)));
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
    assert!(got == exact);
    assert!(
        c.verified(),
        "the rc-persistent reply checksum was not checked: {c:?}"
    );
    assert_eq!(
        c.aux(),
        SIZE as u64,
        "the reply's Content-Range names the size: {c:?}"
    );
    gw.shutdown();
}

/// The soft client checks an RDMA range against the reply's checksum with the digest its
/// window computed as the bytes landed (docs/soft-fabric.md, Landing digests): a reply whose
/// `x-amz-rdma-checksum-crc64nvme` names other bytes than those that landed still fails
/// `Integrity`, never a success.
#[test]
fn a_soft_range_whose_reply_names_another_checksum_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _soft) = gateway(dir.path(), true);
    let data = object(gw.local_addr());
    let (off, len) = (4_096u64, 500_000u64);
    let other = &data[off as usize + 1..(off + len) as usize + 1];
    let lie = s3_lite::checksum::encode_crc64nvme(s3_lite::checksum::Crc64Nvme::checksum(other));
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::always(FaultKind::RewriteHeader {
            name: "x-amz-rdma-checksum-crc64nvme".into(),
            value: lie,
        })],
    )
    .unwrap();
    let engine = rig::engine_builder(relay.addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let (c, _) = get(&engine, Some((off, len)));
    assert!(
        relay.stats().faults() > 0,
        "no reply named a range checksum"
    );
    assert!(
        !c.is_ok(),
        "a range under a wrong checksum was reported complete: {c:?}"
    );
    assert_eq!(c.error_code(), Some(ErrorCode::Integrity), "{c:?}");
    gw.shutdown();
}

/// The soft client asks for its GET's frames to come without their own checksums
/// (`x-amz-rdma-frame-check: landing`), so the checksum the reply names is all that vouches
/// for the bytes: a reply that names none fails `Integrity`, never a success. A small range's
/// bytes have usually landed when the reply comes; a 12 MiB one's last WRITEs are still on the
/// way (the gateway answers once they are posted), so both ways of judging are covered: at
/// the reply, and when the landing digest catches up.
#[test]
fn a_soft_range_whose_reply_names_no_checksum_fails() {
    const BIG: usize = 12 << 20;
    let dir = tempfile::tempdir().unwrap();
    let (gw, _soft) = gateway(dir.path(), true);
    let _data = object(gw.local_addr());
    let big = pattern(BIG, 23);
    assert_eq!(
        call(gw.local_addr(), "PUT", "/getint/big", "", &[], &big).status(),
        200
    );
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::always(FaultKind::DropHeader(
            "x-amz-rdma-checksum-crc64nvme".into(),
        ))],
    )
    .unwrap();
    let engine = rig::engine_builder(relay.addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let (c, _) = get(&engine, Some((4_096, 500_000)));
    assert!(
        relay.stats().faults() > 0,
        "no reply named a range checksum"
    );
    assert!(
        !c.is_ok(),
        "an unvouched range was reported complete: {c:?}"
    );
    assert_eq!(c.error_code(), Some(ErrorCode::Integrity), "{c:?}");

    let buf = engine
        .register_host(BIG, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("getint", "big").unwrap();
    // Three times: the bytes usually land after the reply, not always.
    for _ in 0..3 {
        let c = run_one(
            &mut q,
            RangeGet::new(obj, 0, BufSlice::new(buf, 0, BIG as u64))
                .no_retry()
                .build(),
        );
        assert!(
            !c.is_ok(),
            "an unvouched 12 MiB range was reported complete: {c:?}"
        );
        assert_eq!(c.error_code(), Some(ErrorCode::Integrity), "{c:?}");
    }
    gw.shutdown();
}

/// `bytes=0-` of an empty object is not satisfiable (416): the whole-object GET completes
/// with 0 bytes, from our gateway and from s3s-fs.
#[test]
fn a_whole_get_of_an_empty_object_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (gw, _) = gateway(dir.path(), false);
    assert_eq!(
        call(gw.local_addr(), "PUT", "/getint", "", &[], b"").status(),
        200
    );
    assert_eq!(
        call(gw.local_addr(), "PUT", "/getint/obj", "", &[], b"").status(),
        200
    );
    let (c, got) = get(&http_engine(gw.local_addr()), None);
    assert!(c.is_ok(), "{c:?}");
    assert!(got.is_empty());
    gw.shutdown();

    let server = common_s3s::S3sFs::start();
    server.create_bucket_dir("getint");
    server.put_file("getint", "obj", b"");
    let engine = rig::engine_builder(s3s_addr(&server))
        .credentials(s3_lite::credentials::Credentials::new(
            common_s3s::ACCESS_KEY,
            common_s3s::SECRET_KEY,
        ))
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    let (c, got) = get(&engine, None);
    assert!(c.is_ok(), "{c:?}");
    assert!(got.is_empty());
}

fn s3s_addr(server: &common_s3s::S3sFs) -> SocketAddr {
    server
        .endpoint_url()
        .trim_start_matches("http://")
        .parse()
        .unwrap()
}
