//! The engine as a `hipobj-rc-v2` client (`Dialect::RcV2`) against the real gateway started
//! in-process: over the soft fabric, GET, RANGE_GET at an offset and PUT (read back over
//! HTTP) are byte-exact and report `DataPath::RdmaSoft`; against a gateway without a fabric
//! (PREPARE → `501` + `X-Amz-Rdma-Protocol-Status: unsupported`) the same ops fall back to
//! HTTP, byte-exact, and report `DataPath::Http`.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use engine::{Dialect, Engine, Fabric, RegisterOptions};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::{ACCESS, SECRET, call};
use rig::{crc64, pattern};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, DataPath};

fn gateway(root: &std::path::Path, soft: bool) -> RunningGateway {
    gateway_with(root, soft.then(RcLimits::default))
}

/// The gateway, with the soft RDMA target under `limits` when given.
fn gateway_with(root: &std::path::Path, limits: Option<RcLimits>) -> RunningGateway {
    let mut b = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET);
    if let Some(limits) = limits {
        let t = RcTarget::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), limits).unwrap();
        b = b.rdma_target(t);
    }
    b.start().unwrap()
}

fn engine_for(addr: SocketAddr, fabric: Fabric) -> Engine {
    rig::engine_builder(addr)
        .fabric(fabric)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap()
}

/// GET (whole object into a larger buffer), RANGE_GET at an odd offset, PUT read back over
/// HTTP; every completion must name `path`.
fn matrix(gw: SocketAddr, fabric: Fabric, path: DataPath) {
    let data = pattern(3 * (1 << 20) + 4321, 7);
    assert_eq!(call(gw, "PUT", "/v2b", "", &[], b"").status(), 200);
    let r = call(gw, "PUT", "/v2b/dir/obj.bin", "", &[], &data);
    assert_eq!(r.status(), 200, "{}", r.text());

    let engine = engine_for(gw, fabric);
    let buf = engine
        .register_host(16 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(16).unwrap();
    let obj = engine.object("v2b", "dir/obj.bin").unwrap();
    q.push(
        &Get::new(obj, BufSlice::new(buf, 0, 4 << 20))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.push(
        &RangeGet::new(obj, 1_000_003, BufSlice::new(buf, 4 << 20, 1_500_000))
            .user_data(2)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(2, Some(Duration::from_secs(30))), 2);
    let mut got: Vec<_> = q.completion().collect();
    got.sort_by_key(|c| c.user_data());
    for c in &got {
        assert!(c.is_ok(), "{c:?}");
        assert!(c.verified(), "the FINAL's checksum was not checked: {c:?}");
        assert_eq!(c.path(), Some(path), "{c:?}");
    }
    assert_eq!(got[0].bytes(), data.len() as u64);
    assert_eq!(got[1].bytes(), 1_500_000);
    let whole = engine.read(buf, 0, data.len() as u64).unwrap().to_vec();
    assert_eq!(crc64(&whole), crc64(&data), "GET checksum");
    assert!(whole == data, "GET bytes");
    let range = engine.read(buf, 4 << 20, 1_500_000).unwrap().to_vec();
    let want = &data[1_000_003..2_500_003];
    assert_eq!(crc64(&range), crc64(want), "RANGE_GET checksum");
    assert!(range == want, "RANGE_GET bytes");

    let fresh = pattern(2 * (1 << 20) + 17, 91);
    engine.copy_in(buf, 8 << 20, &fresh).unwrap();
    let put_obj = engine.object("v2b", "put/new obj.bin").unwrap();
    q.push(
        &Put::new(put_obj, BufSlice::new(buf, 8 << 20, fresh.len() as u64))
            .user_data(3)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert!(c.is_ok(), "put: {c:?}");
    assert_eq!(c.path(), Some(path), "put");
    assert_eq!(c.bytes(), fresh.len() as u64);
    let back = call(gw, "GET", "/v2b/put/new%20obj.bin", "", &[], b"");
    assert_eq!(back.status(), 200);
    assert_eq!(back.body.len(), fresh.len(), "stored length");
    assert_eq!(crc64(&back.body), crc64(&fresh), "stored checksum");
    assert!(back.body == fresh, "stored bytes");
}

#[test]
fn v2_get_range_put_over_soft_fabric() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), true);
    matrix(gw.local_addr(), Fabric::Soft, DataPath::RdmaSoft);
    gw.shutdown();
}

#[test]
fn v2_falls_back_to_http_without_fabric() {
    for fabric in [Fabric::Soft, Fabric::Auto] {
        let dir = tempfile::tempdir().unwrap();
        let gw = gateway(dir.path(), false);
        matrix(gw.local_addr(), fabric, DataPath::Http);
        gw.shutdown();
    }
}

#[test]
fn v2_missing_object_is_not_found_over_rdma() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), true);
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/v2b", "", &[], b"").status(), 200);
    let engine = engine_for(a, Fabric::Soft);
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("v2b", "absent").unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096))
            .user_data(1)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert!(!c.is_ok(), "{c:?}");
    assert_eq!(c.error_code(), Some(ring_api::ErrorCode::NotFound), "{c:?}");
    gw.shutdown();
}

/// A range larger than one checksum part (the worker checks the FINAL's sums 1 MiB per turn
/// of its loop): 3.5 MiB over v2 arrive byte-exact and verified; a range-get beside it, on the
/// same worker, completes too.
#[test]
fn v2_large_range_is_checked_in_parts_and_verified() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path(), true);
    let a = gw.local_addr();
    let data = pattern(4 << 20, 5);
    assert_eq!(call(a, "PUT", "/v2b", "", &[], b"").status(), 200);
    assert_eq!(call(a, "PUT", "/v2b/big", "", &[], &data).status(), 200);
    let engine = engine_for(a, Fabric::Soft);
    let len = (7 << 20) / 2;
    let buf = engine
        .register_host(len + 4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("v2b", "big").unwrap();
    q.push(
        &RangeGet::new(obj, 333, BufSlice::new(buf, 0, len as u64))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.push(
        &RangeGet::new(obj, 5, BufSlice::new(buf, len as u64, 4096))
            .user_data(2)
            .build(),
    )
    .unwrap();
    let mut got = std::collections::HashMap::new();
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while got.len() < 2 && std::time::Instant::now() < end {
        q.wait(1, Some(Duration::from_millis(50)));
        for c in q.completion() {
            got.insert(c.user_data(), c);
        }
    }
    let c = got[&1];
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
    assert_eq!(c.bytes(), len as u64);
    assert!(c.verified(), "{c:?}");
    let have = engine.read(buf, 0, len as u64).unwrap();
    assert!(*have == data[333..333 + len], "bytes");
    let c = got[&2];
    assert!(c.is_ok(), "{c:?}");
    let have = engine.read(buf, len as u64, 4096).unwrap();
    assert!(*have == data[5..5 + 4096], "small range");
    gw.shutdown();
}

/// A batch above the gateway's session limit (2 per key here): the PREPAREs it refuses
/// `503 SlowDown` wait for one of the engine's own sessions there to end, then go over RDMA —
/// none goes over HTTP, every byte exact.
#[test]
fn v2_ops_above_the_session_limit_wait_for_a_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut limits = RcLimits::default();
    limits.v2.max_per_principal = 2;
    let gw = gateway_with(dir.path(), Some(limits));
    let a = gw.local_addr();
    const MIB: u64 = 1 << 20;
    const OPS: u64 = 12;
    let data = pattern((2 * MIB) as usize, 29);
    assert_eq!(call(a, "PUT", "/v2b", "", &[], b"").status(), 200);
    assert_eq!(call(a, "PUT", "/v2b/o", "", &[], &data).status(), 200);
    let engine = engine_for(a, Fabric::Soft);
    let buf = engine
        .register_host((OPS * MIB) as usize, RegisterOptions::pageable())
        .unwrap();
    let obj = engine.object("v2b", "o").unwrap();
    let mut q = engine.queue(32).unwrap();
    // Every op is pushed before the first completes: the worker sends all their PREPAREs at
    // once, and the gateway grants two.
    for i in 0..OPS {
        let sqe = RangeGet::new(obj, i * 4096, BufSlice::new(buf, i * MIB, MIB))
            .user_data(i)
            .build();
        q.push(&sqe).unwrap();
    }
    assert_eq!(
        q.wait(OPS as usize, Some(Duration::from_secs(60))),
        OPS as usize
    );
    for c in q.completion() {
        assert!(c.is_ok(), "{c:?}");
        assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
        let i = c.user_data();
        let got = engine.read(buf, i * MIB, MIB).unwrap().to_vec();
        let at = (i * 4096) as usize;
        assert!(got == data[at..at + MIB as usize], "op {i}: bytes");
    }
    gw.shutdown();
}
