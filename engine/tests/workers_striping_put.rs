//! Striping a large PUT across the NICs a registration is bound to (engine/src/stripe/put.rs):
//! on the two-NIC fixture host, a 64 MiB PUT from a host buffer bound to both NICs becomes an
//! engine-driven multipart upload (Create, 13 UploadParts of ≤ 5 MiB on both NICs' workers over
//! the soft RDMA fabric, Complete) against the gateway in process, in both RDMA dialects; the
//! stored object is byte-exact with a multipart ETag, and no upload is left open. Below the
//! threshold and with `Stripe::Off` the PUT stays one request. A failing part, a failing
//! Create, a Cancel and a deadline each fail the operation once and leave neither an object
//! nor an open upload on the store. Against s3s-fs over HTTP the same upload is plain S3
//! multipart.

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
mod striping;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use engine::{Dialect, Engine, EngineBuilder, Fabric, Stripe};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use ring_api::opcode::{Cancel, Put};
use ring_api::{BufSlice, Cqe, DataPath, ErrorCode};
use s3_lite::credentials::Credentials;
use striping::{TwoNicSoft, bound_buffer, exactly, on_two_nics, two_nic_tree};

const MIB: u64 = 1 << 20;

/// The gateway in process with the soft RDMA target; `limit` caps both an RDMA PUT and a
/// request body (a part above it fails).
fn gateway(root: &std::path::Path, limit: Option<u64>) -> RunningGateway {
    let mut limits = RcLimits::default();
    if let Some(l) = limit {
        limits.max_put = l;
    }
    let target = RcTarget::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), limits).unwrap();
    let mut b = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(raw::ACCESS, raw::SECRET)
        .rdma_target(target);
    if let Some(l) = limit {
        b = b.max_object_size(l);
    }
    b.start().unwrap()
}

/// The gateway (see [`gateway`]) with bucket `stripe`, and an engine with one worker per NIC
/// of the two-NIC tree over it.
fn start_soft(
    dialect: Dialect,
    limit: Option<u64>,
    configure: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> TwoNicSoft {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), limit);
    TwoNicSoft::start(dir, gw, dialect, configure)
}

/// Multipart uploads open in bucket `stripe` (ListMultipartUploads).
fn open_uploads(addr: SocketAddr) -> usize {
    let r = raw::call(addr, "GET", "/stripe", "uploads", &[], b"");
    assert_eq!(r.status(), 200, "{}", r.text());
    r.text().matches("<Upload>").count()
}

/// A host buffer bound to both NICs holding `data`.
fn source(engine: &Engine, data: &[u8]) -> ring_api::BufHandle {
    let buf = bound_buffer(engine, data.len() as u64);
    engine.copy_in(buf, 0, data).unwrap();
    buf
}

/// Each worker's (ops, bytes) now.
fn counters(engine: &Engine) -> Vec<(u64, u64)> {
    engine.workers().iter().map(|w| (w.ops, w.bytes)).collect()
}

/// PUTs `len` bytes of `buf` as `stripe/key`; its completion and the change of each worker's
/// (ops, bytes).
fn one_put(
    engine: &Engine,
    buf: ring_api::BufHandle,
    key: &str,
    len: u64,
) -> (Cqe, Vec<(u64, u64)>) {
    let obj = engine.object("stripe", key).unwrap();
    let before = counters(engine);
    let mut q = engine.queue(8).unwrap();
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, len))
            .user_data(9)
            .build(),
    )
    .unwrap();
    let c = exactly(&mut q, 1, Duration::from_millis(100))[0];
    assert_eq!(c.user_data(), 9);
    let delta = counters(engine)
        .iter()
        .zip(&before)
        .map(|(a, b)| (a.0 - b.0, a.1 - b.1))
        .collect();
    (c, delta)
}

/// The stored object `stripe/key` and its ETag, or the status of the GET.
fn stored(addr: SocketAddr, key: &str) -> Result<(Vec<u8>, String), u16> {
    let r = raw::call(addr, "GET", &format!("/stripe/{key}"), "", &[], b"");
    if r.status() != 200 {
        return Err(r.status());
    }
    let etag = r.header("etag").unwrap_or_default().to_owned();
    Ok((r.body, etag))
}

fn striped_put_lands_on_both_nics(dialect: Dialect) {
    let data = rig::pattern((64 * MIB) as usize, 11);
    let soft = start_soft(dialect, None, |b| b);
    let engine = soft.engine();
    let buf = source(engine, &data);
    // Parts go over hipobj-rc-v2 once the endpoint has advertised multipart (`mp`) on a v2
    // answer, and each worker pairs with the endpoint on its first RDMA op (an op waits
    // 150 ms for a pairing in progress, then goes over HTTP): a small PUT first. Under
    // rc-persistent a part can still go over HTTP while its worker pairs, and the operation
    // reports its first part's path: up to three tries for one whose first part went over
    // RDMA (under v2 there is no pairing: the first must).
    let (c, _) = one_put(engine, buf, "warm.bin", MIB);
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
    let mut tries = 0;
    let (c, delta) = loop {
        tries += 1;
        let (c, delta) = one_put(engine, buf, "big.bin", 64 * MIB);
        if c.path() == Some(DataPath::RdmaSoft) || tries == 3 {
            break (c, delta);
        }
    };
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.bytes(), 64 * MIB, "the total of every part");
    assert_eq!(
        c.path(),
        Some(DataPath::RdmaSoft),
        "{c:?} after {tries} tries"
    );
    // 13 parts (12 of 5 MiB, one of 4 MiB) alternating between the NICs, plus the control
    // steps (Create, Complete and perhaps the stored-object HEAD) on the queue's owner.
    let parts_bytes: u64 = delta.iter().map(|d| d.1).sum();
    assert_eq!(parts_bytes, 64 * MIB, "{delta:?}");
    assert!(
        delta.iter().all(|d| d.1 >= 24 * MIB),
        "parts on both NICs: {delta:?}"
    );
    let ops: u64 = delta.iter().map(|d| d.0).sum();
    assert!(
        (15..=16).contains(&ops),
        "13 parts + control steps: {delta:?}"
    );
    let per_nic = engine.nic_bytes();
    assert_eq!(per_nic.len(), 2, "{per_nic:?}");
    assert!(per_nic.iter().all(|(_, b)| *b >= 24 * MIB), "{per_nic:?}");
    // Over v2 the gateway's limit of 8 sessions per key is below the 13 parts: the parts it
    // refuses (503) wait for one of the client's own sessions to end, never go over HTTP.
    if dialect == Dialect::RcV2 {
        assert_eq!(tries, 1, "a v2 part went over HTTP");
    }
    if tries > 1 {
        eprintln!(
            "{dialect:?}: the first part of a striped PUT went over HTTP {} time(s)",
            tries - 1
        );
    }
    let (got, etag) = stored(soft.addr(), "big.bin").unwrap();
    assert!(got == data, "stored object differs");
    assert!(
        etag.trim_matches('"').ends_with("-13"),
        "multipart ETag: {etag}"
    );
    assert_eq!(open_uploads(soft.addr()), 0);
    // The source is free again.
    assert!(engine.read(buf, 0, 64 * MIB).is_ok());
}

#[test]
fn a_64_mib_put_on_two_nics_is_striped_rc_persistent() {
    striped_put_lands_on_both_nics(Dialect::RcPersistent);
}

#[test]
fn a_64_mib_put_on_two_nics_is_striped_rc_v2() {
    striped_put_lands_on_both_nics(Dialect::RcV2);
}

#[test]
fn small_puts_and_stripe_off_stay_one_put() {
    let data = rig::pattern((16 * MIB) as usize, 12);
    let soft = start_soft(Dialect::RcPersistent, None, |b| b);
    let engine = soft.engine();
    let buf = source(engine, &data);
    // Below the 8 MiB threshold: one PUT on one worker, a plain ETag.
    let (c, delta) = one_put(engine, buf, "small.bin", 8 * MIB - 1);
    assert!(c.is_ok() && c.bytes() == 8 * MIB - 1, "{c:?}");
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 1, "{delta:?}");
    let (got, etag) = stored(soft.addr(), "small.bin").unwrap();
    assert!(got[..] == data[..(8 * MIB - 1) as usize]);
    assert!(!etag.contains('-'), "{etag}");
    // At the threshold: striped (two parts: 5 MiB and 3 MiB).
    let (c, delta) = one_put(engine, buf, "eight.bin", 8 * MIB);
    assert!(c.is_ok() && c.bytes() == 8 * MIB, "{c:?}");
    assert!(delta.iter().all(|d| d.1 > 0), "{delta:?}");
    let (got, etag) = stored(soft.addr(), "eight.bin").unwrap();
    assert!(got[..] == data[..(8 * MIB) as usize]);
    assert!(etag.trim_matches('"').ends_with("-2"), "{etag}");
    drop(soft);

    // Stripe::Off: the 16 MiB PUT is one request.
    let soft = start_soft(Dialect::RcPersistent, None, |b| b.stripe(Stripe::Off));
    let engine = soft.engine();
    let buf = source(engine, &data);
    let (c, delta) = one_put(engine, buf, "off.bin", 16 * MIB);
    assert!(c.is_ok() && c.bytes() == 16 * MIB, "{c:?}");
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 1, "{delta:?}");
    let (got, etag) = stored(soft.addr(), "off.bin").unwrap();
    assert!(got == data);
    assert!(!etag.contains('-'), "{etag}");
    assert_eq!(open_uploads(soft.addr()), 0);
}

#[test]
fn a_failing_part_or_create_leaves_nothing_behind() {
    // Requests above 4 MiB are refused: every 5 MiB part fails, the 4 MiB last one lands.
    let data = rig::pattern((24 * MIB) as usize, 13);
    let soft = start_soft(Dialect::RcPersistent, Some(4 * MIB), |b| b);
    let engine = soft.engine();
    let buf = source(engine, &data);
    let (c, delta) = one_put(engine, buf, "refused.bin", 24 * MIB);
    assert!(!c.is_ok(), "{c:?}");
    // The refused part's error (the gateway's 400), not the cancellation of the others.
    assert_eq!(
        c.error_code(),
        Some(ErrorCode::InvalidArgument),
        "the first part's error: {c:?}"
    );
    assert!(delta.iter().all(|d| d.0 > 0), "parts on both: {delta:?}");
    assert_eq!(stored(soft.addr(), "refused.bin").err(), Some(404));
    assert_eq!(open_uploads(soft.addr()), 0, "the upload was aborted");
    assert!(
        engine.read(buf, 0, 24 * MIB).is_ok(),
        "no part holds the source"
    );

    // No such bucket: the Create fails, nothing else runs.
    let obj = engine.object("no-such-bucket", "k").unwrap();
    let mut q = engine.queue(4).unwrap();
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, 24 * MIB))
            .user_data(3)
            .build(),
    )
    .unwrap();
    let c = exactly(&mut q, 1, Duration::from_millis(100))[0];
    assert_eq!(c.error_code(), Some(ErrorCode::NotFound), "{c:?}");
    assert_eq!(open_uploads(soft.addr()), 0);
}

#[test]
fn cancel_and_deadline_abort_the_upload_and_complete_once() {
    let data = rig::pattern((64 * MIB) as usize, 14);
    let soft = start_soft(Dialect::RcPersistent, None, |b| b);
    let engine = soft.engine();
    let buf = source(engine, &data);
    let obj = engine.object("stripe", "cancelled.bin").unwrap();
    let mut q = engine.queue(16).unwrap();

    // A Cancel right behind the PUT reaches it while its upload is being created: the
    // upload is aborted as soon as it exists.
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, 64 * MIB))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.push(&Cancel::new(1).user_data(2).build()).unwrap();
    let got = exactly(&mut q, 2, Duration::from_millis(300));
    assert_eq!(got[0].error_code(), Some(ErrorCode::Cancelled), "{got:?}");
    assert!(got[1].is_ok(), "the Cancel found it: {got:?}");
    assert_eq!(stored(soft.addr(), "cancelled.bin").err(), Some(404));
    assert_eq!(open_uploads(soft.addr()), 0);
    assert!(engine.read(buf, 0, 64 * MIB).is_ok());

    // A deadline that has passed by the time the upload exists: aborted, one TimedOut.
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, 64 * MIB))
            .deadline_ns(1_000_000)
            .user_data(3)
            .build(),
    )
    .unwrap();
    let got = exactly(&mut q, 1, Duration::from_millis(300));
    assert_eq!(got[0].error_code(), Some(ErrorCode::TimedOut), "{got:?}");
    assert_eq!(stored(soft.addr(), "cancelled.bin").err(), Some(404));
    assert_eq!(open_uploads(soft.addr()), 0);

    // A Cancel once parts run on both NICs: either it stops them (then nothing is stored)
    // or every part had landed (then the object is whole).
    let before = counters(engine);
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, 64 * MIB))
            .user_data(5)
            .build(),
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(30);
    while !counters(engine)
        .iter()
        .zip(&before)
        .all(|(a, b)| a.0 > b.0 + 1)
    {
        assert!(Instant::now() < end, "{:?}", engine.workers());
        std::thread::sleep(Duration::from_micros(200));
    }
    q.push(&Cancel::new(5).user_data(6).build()).unwrap();
    let got = exactly(&mut q, 2, Duration::from_millis(300));
    if got[1].is_ok() {
        assert_eq!(got[0].error_code(), Some(ErrorCode::Cancelled), "{got:?}");
        assert_eq!(stored(soft.addr(), "cancelled.bin").err(), Some(404));
    } else {
        assert_eq!(got[1].error_code(), Some(ErrorCode::NotFound), "{got:?}");
        assert!(got[0].is_ok(), "{got:?}");
        assert!(stored(soft.addr(), "cancelled.bin").unwrap().0 == data);
    }
    assert_eq!(open_uploads(soft.addr()), 0);
}

#[test]
fn a_striped_put_is_plain_s3_multipart_against_s3s_fs() {
    let server = common::S3sFs::start();
    server.create_bucket_dir("stripe");
    let tree = two_nic_tree();
    let b = common::builder(&server)
        .credentials(Credentials::new(
            common::s3s_fs::ACCESS_KEY,
            common::s3s_fs::SECRET_KEY,
        ))
        .fabric(Fabric::Http);
    let engine = on_two_nics(b, &tree).build().unwrap();
    let data = common::pattern((24 * MIB) as usize, 15);
    let buf = source(&engine, &data);
    let (c, delta) = one_put(&engine, buf, "plain.bin", 24 * MIB);
    assert!(c.is_ok() && c.bytes() == 24 * MIB, "{c:?}");
    assert_eq!(c.path(), Some(DataPath::Http));
    assert!(delta.iter().all(|d| d.1 > 0), "parts on both: {delta:?}");
    let on_disk = std::fs::read(server.root.path().join("stripe/plain.bin")).unwrap();
    assert!(on_disk == data, "stored object differs");
}

#[test]
fn a_queue_dropped_mid_upload_aborts_it() {
    let data = rig::pattern((64 * MIB) as usize, 16);
    let soft = start_soft(Dialect::RcPersistent, None, |b| b);
    let engine = soft.engine();
    let buf = source(engine, &data);
    let obj = engine.object("stripe", "dropped.bin").unwrap();
    let before = counters(engine);
    let mut q = engine.queue(4).unwrap();
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, 64 * MIB))
            .user_data(1)
            .build(),
    )
    .unwrap();
    // Parts run on both NICs: the upload is open.
    let end = Instant::now() + Duration::from_secs(30);
    while !counters(engine)
        .iter()
        .zip(&before)
        .all(|(a, b)| a.0 > b.0 + 1)
    {
        assert!(Instant::now() < end, "{:?}", engine.workers());
        std::thread::sleep(Duration::from_micros(200));
    }
    let landed_before_drop = q.completion().next();
    drop(q);
    if let Some(c) = landed_before_drop {
        // Every part had landed already: the object is whole.
        assert!(c.is_ok(), "{c:?}");
        assert!(stored(soft.addr(), "dropped.bin").unwrap().0 == data);
        return;
    }
    // The owner aborts the upload; the parts still running are stopped.
    let end = Instant::now() + Duration::from_secs(30);
    while open_uploads(soft.addr()) > 0 {
        assert!(Instant::now() < end, "the upload was never aborted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(stored(soft.addr(), "dropped.bin").err(), Some(404));
    // The source is released once the parts are gone.
    let end = Instant::now() + Duration::from_secs(30);
    while engine.read(buf, 0, 64 * MIB).is_err() {
        assert!(Instant::now() < end, "a part still holds the source");
        std::thread::sleep(Duration::from_millis(20));
    }
}
