//! Every RDMA operation in both RC dialects, on both fabrics, through the engine and this
//! gateway: GET, RANGE_GET, PUT and UPLOAD_PART (+ complete), byte-exact, checksums compared,
//! each completion naming the path that carried the bytes.
//!
//! - `soft_*`: the soft fabric, in-process gateway (every CI run).
//! - `verbs_*` (`#[ignore]`d; hosts without an RDMA device cannot run them): libibverbs RC
//!   queue pairs on `ENGINE_TEST_NIC` (default `rxe0`), run by the Soft-RoCE VM lane
//!   (`benches/rxe/run-lane.sh`): with an in-process gateway on the same device (one VM), or
//!   against `hipobj serve --fabric verbs` in another VM named by `HIPOBJ_VERBS_GATEWAY`
//!   (`ip:port`; two VMs). `verbs_get_goodput` prints the GET rates the lane compares with
//!   `ib_write_bw`.

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;
#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::net::SocketAddr;
use std::time::Instant;

use engine::{Dialect, Engine, Fabric, RegisterOptions};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::{ACCESS, SECRET, call};
use rig::{WAIT, crc64, pattern, run_one};
use ring_api::opcode::{CompleteMultipart, CreateMultipart, Get, Put, RangeGet, UploadPart};
use ring_api::{BufSlice, DataPath};
use ring_api::{PartNumber, UploadHandle};

const MIB: u64 = 1 << 20;

fn nic() -> String {
    std::env::var("ENGINE_TEST_NIC").unwrap_or_else(|_| "rxe0".to_owned())
}

/// The gateway under test: in-process on `fabric`, or the remote one the two-VM lane names.
struct Under {
    addr: SocketAddr,
    _gw: Option<RunningGateway>,
    _dir: Option<tempfile::TempDir>,
    /// The real S3 store behind an `--upstream` gateway.
    upstream: Option<s3s_fs::S3sFs>,
}

impl Under {
    /// What the store holds under `bucket/key`: read from the upstream store's own files when
    /// there is one (not what the gateway says), else through the gateway over HTTP.
    fn stored(&self, bucket: &str, key: &str) -> Vec<u8> {
        match &self.upstream {
            Some(up) => std::fs::read(up.root.path().join(bucket).join(key)).unwrap(),
            None => get_http(self.addr, &format!("/{bucket}/{key}")),
        }
    }
}

/// The backend behind the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// `--root DIR`.
    Directory,
    /// `--upstream` to s3s-fs (a real S3 server, from .tools).
    Upstream,
}

fn gateway(fabric: Fabric) -> Under {
    gateway_on(fabric, Store::Directory)
}

fn gateway_on(fabric: Fabric, store: Store) -> Under {
    if fabric == Fabric::Verbs
        && let Ok(remote) = std::env::var("HIPOBJ_VERBS_GATEWAY")
    {
        let addr = remote
            .trim()
            .trim_start_matches("http://")
            .parse()
            .expect("HIPOBJ_VERBS_GATEWAY is ip:port");
        return Under {
            addr,
            _gw: None,
            _dir: None,
            upstream: None,
        };
    }
    let target = match fabric {
        Fabric::Verbs => RcTarget::start_verbs(Some(&nic()), RcLimits::default())
            .expect("a verbs target on the test NIC"),
        _ => RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap(),
    };
    let dir = tempfile::tempdir().unwrap();
    let builder = Gateway::builder()
        .listen("127.0.0.1:0")
        .credentials(ACCESS, SECRET)
        .rdma_target(target);
    let (builder, upstream) = match store {
        Store::Directory => (builder.root_dir(dir.path()), None),
        Store::Upstream => {
            let up = s3s_fs::S3sFs::start();
            let creds =
                s3_lite::credentials::Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY);
            (
                builder.upstream(up.endpoint_url(), creds, "us-east-1"),
                Some(up),
            )
        }
    };
    let gw = builder.start().unwrap();
    Under {
        addr: gw.local_addr(),
        _gw: Some(gw),
        _dir: Some(dir),
        upstream,
    }
}

fn engine_for(addr: SocketAddr, fabric: Fabric, dialect: Dialect) -> Engine {
    let mut b = rig::engine_builder(addr).fabric(fabric).dialect(dialect);
    if fabric == Fabric::Verbs {
        b = b.verbs_device(nic());
    }
    b.build().unwrap()
}

fn expected_path(fabric: Fabric) -> DataPath {
    if fabric == Fabric::Verbs {
        DataPath::RdmaVerbs
    } else {
        DataPath::RdmaSoft
    }
}

fn get_http(addr: SocketAddr, path: &str) -> Vec<u8> {
    let r = call(addr, "GET", path, "", &[], b"");
    assert_eq!(r.status(), 200, "GET {path}: {}", r.text());
    r.body
}

fn matrix(fabric: Fabric, dialect: Dialect) {
    matrix_on(fabric, dialect, Store::Directory);
}

fn matrix_on(fabric: Fabric, dialect: Dialect, store: Store) {
    let name = format!("{fabric:?}/{dialect:?}/{store:?}");
    let gw = gateway_on(fabric, store);
    let a = gw.addr;
    let bucket = format!("mtx-{}", format!("{dialect:?}").to_lowercase());
    let made = call(a, "PUT", &format!("/{bucket}"), "", &[], b"").status();
    assert!(made == 200 || made == 409, "{name}: create bucket: {made}");
    let path = expected_path(fabric);

    // 3 MiB + a ragged tail: several 1 MiB RDMA pieces.
    let data = pattern(3 * MIB as usize + 4321, 7);
    let r = call(a, "PUT", &format!("/{bucket}/obj.bin"), "", &[], &data);
    assert_eq!(r.status(), 200, "{name}: {}", r.text());

    let engine = engine_for(a, fabric, dialect);
    let buf = engine
        .register_host(32 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(16).unwrap();
    let obj = engine.object(&bucket, "obj.bin").unwrap();

    // GET (whole object).
    let c = run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, 0, 4 * MIB))
            .user_data(1)
            .build(),
    );
    assert!(c.is_ok(), "{name} GET: {c:?}");
    assert_eq!(c.path(), Some(path), "{name} GET path");
    assert_eq!(c.bytes(), data.len() as u64, "{name} GET bytes");
    let whole = engine.read(buf, 0, data.len() as u64).unwrap().to_vec();
    assert_eq!(crc64(&whole), crc64(&data), "{name}: GET checksum");
    assert!(whole == data, "{name}: GET bytes differ");

    // A GET of a missing key fails (over v2: refused at PREPARE) and leaves the dialect in
    // use: the RANGE_GET below must still travel over RDMA.
    let missing = engine.object(&bucket, "no/such.bin").unwrap();
    let c = run_one(
        &mut q,
        Get::new(missing, BufSlice::new(buf, 0, MIB))
            .user_data(5)
            .build(),
    );
    assert!(!c.is_ok(), "{name} GET of a missing key: {c:?}");

    // RANGE_GET at an unaligned offset.
    let (off, len) = (1_000_001u64, 1_500_000u64);
    let c = run_one(
        &mut q,
        RangeGet::new(obj, off, BufSlice::new(buf, 4 * MIB, len))
            .user_data(2)
            .build(),
    );
    assert!(c.is_ok(), "{name} RANGE_GET: {c:?}");
    assert_eq!(c.path(), Some(path), "{name} RANGE_GET path");
    let range = engine.read(buf, 4 * MIB, len).unwrap().to_vec();
    let want = &data[off as usize..(off + len) as usize];
    assert_eq!(crc64(&range), crc64(want), "{name}: RANGE_GET checksum");
    assert!(range == want, "{name}: RANGE_GET bytes differ");

    // PUT from registered memory, read back over HTTP.
    let fresh = pattern(2 * MIB as usize + 17, 91);
    engine.copy_in(buf, 8 * MIB, &fresh).unwrap();
    let put_obj = engine.object(&bucket, "put/new.bin").unwrap();
    let c = run_one(
        &mut q,
        Put::new(put_obj, BufSlice::new(buf, 8 * MIB, fresh.len() as u64))
            .user_data(3)
            .build(),
    );
    assert!(c.is_ok(), "{name} PUT: {c:?}");
    assert_eq!(c.path(), Some(path), "{name} PUT path");
    let back = gw.stored(&bucket, "put/new.bin");
    assert_eq!(back.len(), fresh.len(), "{name}: PUT stored length");
    assert_eq!(crc64(&back), crc64(&fresh), "{name}: PUT stored checksum");
    assert!(back == fresh, "{name}: PUT stored bytes differ");
    // The gateway's own record of the checksum agrees.
    let r = call(
        a,
        "HEAD",
        &format!("/{bucket}/put/new.bin"),
        "",
        &[("x-amz-checksum-mode", "ENABLED")],
        b"",
    );
    assert_eq!(r.status(), 200, "{name}: HEAD");
    if let Some(v) = r.header("x-amz-checksum-crc64nvme") {
        assert_eq!(v, crc64(&fresh), "{name}: gateway checksum");
    }

    // UPLOAD_PART: 5 MiB + a ragged last part, then complete; read back over HTTP.
    let parts = [pattern(5 * MIB as usize, 3), pattern(MIB as usize + 3, 4)];
    let mp_obj = engine.object(&bucket, "mp/parts.bin").unwrap();
    let c = run_one(&mut q, CreateMultipart::new(mp_obj).user_data(4).build());
    assert!(c.is_ok(), "{name} CreateMultipart: {c:?}");
    let upload = UploadHandle(u32::try_from(c.aux()).expect("handle fits u32"));
    let mut at = 12 * MIB;
    for (i, p) in parts.iter().enumerate() {
        engine.copy_in(buf, at, p).unwrap();
        let n = PartNumber::new(i as u32 + 1).unwrap();
        let c = run_one(
            &mut q,
            UploadPart::new(mp_obj, upload, n, BufSlice::new(buf, at, p.len() as u64))
                .user_data(10 + i as u64)
                .build(),
        );
        assert!(c.is_ok(), "{name} UploadPart {}: {c:?}", i + 1);
        assert_eq!(c.path(), Some(path), "{name} UploadPart {} path", i + 1);
        assert_eq!(c.bytes(), p.len() as u64);
        at += 8 * MIB;
    }
    let c = run_one(
        &mut q,
        CompleteMultipart::new(mp_obj, upload, PartNumber::new(2).unwrap())
            .user_data(20)
            .build(),
    );
    assert!(c.is_ok(), "{name} CompleteMultipart: {c:?}");
    let want: Vec<u8> = parts.concat();
    let back = gw.stored(&bucket, "mp/parts.bin");
    assert_eq!(
        crc64(&back),
        crc64(&want),
        "{name}: multipart stored checksum"
    );
    assert!(back == want, "{name}: multipart stored bytes differ");
}

#[test]
fn soft_rc_persistent_all_ops() {
    matrix(Fabric::Soft, Dialect::RcPersistent);
}

#[test]
fn soft_rc_v2_all_ops() {
    matrix(Fabric::Soft, Dialect::RcV2);
}

/// The same operations with the gateway bridging to a real S3 server (s3s-fs), checked
/// against the files that server stores.
#[test]
fn soft_rc_persistent_all_ops_upstream() {
    matrix_on(Fabric::Soft, Dialect::RcPersistent, Store::Upstream);
}

#[test]
fn soft_rc_v2_all_ops_upstream() {
    matrix_on(Fabric::Soft, Dialect::RcV2, Store::Upstream);
}

#[test]
#[ignore = "needs an RDMA device (Soft-RoCE VM lane: benches/rxe/run-lane.sh)"]
fn verbs_rc_persistent_all_ops() {
    matrix(Fabric::Verbs, Dialect::RcPersistent);
}

#[test]
#[ignore = "needs an RDMA device (Soft-RoCE VM lane: benches/rxe/run-lane.sh)"]
fn verbs_rc_v2_all_ops() {
    matrix(Fabric::Verbs, Dialect::RcV2);
}

/// RANGE_GET goodput over verbs (`rc-persistent`), 64 KiB and 1 MiB ranges, 32 in flight
/// (`VERBS_GET_DEPTH`):
/// `VERBS_GET_BW size=… iters=… MiBps=…` lines for the lane (sizes and counts from
/// `VERBS_BENCH_SIZES=size:count,…`).
#[test]
#[ignore = "needs an RDMA device (Soft-RoCE VM lane: benches/rxe/run-lane.sh)"]
fn verbs_get_goodput() {
    let sizes =
        std::env::var("VERBS_BENCH_SIZES").unwrap_or_else(|_| "65536:1000,1048576:128".into());
    goodput(Fabric::Verbs, &sizes, "VERBS_GET_BW");
}

/// The goodput loop itself, on the soft fabric with a few ranges (it must stay correct for
/// the lane's numbers to mean anything).
#[test]
fn soft_get_goodput_loop() {
    let sizes = std::env::var("SOFT_BENCH_SIZES").unwrap_or_else(|_| "65536:64,1048576:16".into());
    goodput(Fabric::Soft, &sizes, "SOFT_GET_BW");
}

fn goodput(fabric: Fabric, sizes: &str, label: &str) {
    let gw = gateway(fabric);
    let a = gw.addr;
    let made = call(a, "PUT", "/bench", "", &[], b"").status();
    assert!(made == 200 || made == 409);
    let data = pattern(16 * MIB as usize, 5);
    assert_eq!(
        call(a, "PUT", "/bench/src.bin", "", &[], &data).status(),
        200
    );
    // `VERBS_GET_WORKERS`: engine workers (each pairs its own QP with the gateway).
    let workers = std::env::var("VERBS_GET_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut b = rig::engine_builder(a)
        .placement(engine::Placement::Workers(workers))
        .fabric(fabric)
        .dialect(Dialect::RcPersistent);
    if fabric == Fabric::Verbs {
        b = b.verbs_device(nic());
    }
    let engine = b.build().unwrap();
    let depth: u64 = std::env::var("VERBS_GET_DEPTH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let buf = engine
        .register_host((depth * MIB) as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(64).unwrap();
    let obj = engine.object("bench", "src.bin").unwrap();
    for spec in sizes.split(',') {
        let (size, iters) = spec.split_once(':').expect("size:count");
        let (size, iters): (u64, u64) = (size.parse().unwrap(), iters.parse().unwrap());
        let slots = depth.min(iters);
        let range_at = |i: u64| (i * size) % (data.len() as u64 - size);
        let t = Instant::now();
        let (mut sent, mut done) = (0u64, 0u64);
        // Completions may come back out of order: a slot is reused only once its op is done.
        let mut free: Vec<u64> = (0..slots).collect();
        let mut last_in_slot = vec![None::<u64>; slots as usize];
        while done < iters {
            while sent < iters
                && let Some(slot) = free.pop()
            {
                let sqe = RangeGet::new(obj, range_at(sent), BufSlice::new(buf, slot * MIB, size))
                    .user_data(sent << 8 | slot)
                    .build();
                q.push(&sqe).unwrap();
                sent += 1;
            }
            assert!(q.wait(1, Some(WAIT)) >= 1, "goodput: no completion");
            for c in q.completion() {
                assert!(c.is_ok(), "goodput: {c:?}");
                assert_eq!(c.path(), Some(expected_path(fabric)), "goodput path");
                let slot = c.user_data() & 0xff;
                last_in_slot[slot as usize] = Some(c.user_data() >> 8);
                free.push(slot);
                done += 1;
            }
        }
        let secs = t.elapsed().as_secs_f64();
        // Check the last range each slot received against the source.
        for (slot, i) in last_in_slot.iter().enumerate() {
            let Some(i) = *i else { continue };
            let got = engine.read(buf, slot as u64 * MIB, size).unwrap().to_vec();
            let at = range_at(i) as usize;
            assert!(
                got == data[at..at + size as usize],
                "goodput: range {i} differs"
            );
        }
        let mibps = (size * iters) as f64 / secs / MIB as f64;
        println!("{label} size={size} iters={iters} depth={slots} MiBps={mibps:.1}");
    }
}

/// `Fabric::Verbs` on a host without libibverbs or without an RDMA device (CI, the dev host):
/// `build` fails with `EngineError::VerbsUnavailable` saying what is missing, instead of an
/// engine that carries every op over HTTP unasked; `Fabric::Auto` against the same gateway
/// still moves the bytes. (On a host with a device this test has
/// nothing to show and returns.)
#[test]
fn verbs_without_a_device_fails_build_and_auto_still_works() {
    if engine::verbs::probe().is_available() {
        eprintln!("an RDMA device is present: nothing to refuse");
        return;
    }
    let gw = gateway(Fabric::Soft);
    let a = gw.addr;
    assert_eq!(call(a, "PUT", "/nodev", "", &[], b"").status(), 200);
    let data = pattern(300_000, 9);
    assert_eq!(call(a, "PUT", "/nodev/o", "", &[], &data).status(), 200);
    let refused = rig::engine_builder(a)
        .fabric(Fabric::Verbs)
        .dialect(Dialect::RcPersistent)
        .build();
    match refused {
        Err(engine::EngineError::VerbsUnavailable { device, reason, .. }) => {
            assert_eq!(device, None);
            assert!(
                reason.contains("RDMA verbs unavailable")
                    || reason.contains("/sys/class/infiniband"),
                "{reason}"
            );
        }
        Err(e) => panic!("expected VerbsUnavailable, got {e}"),
        Ok(_) => panic!("Fabric::Verbs built without a verbs device"),
    }
    let engine = engine_for(a, Fabric::Auto, Dialect::RcPersistent);
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("nodev", "o").unwrap();
    let c = run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, 0, 1 << 20)).build(),
    );
    assert!(c.is_ok(), "{c:?}");
    assert!(engine.read(buf, 0, data.len() as u64).unwrap().to_vec() == data);
}
