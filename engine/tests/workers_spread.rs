//! Operations pushed into ONE queue run on every worker of the engine (each worker reports
//! the operations it ran in `Engine::workers()`), byte-exact over HTTP (s3s-fs) and over the
//! soft RDMA fabric (`rc-persistent` against the gateway in-process); and cancel, deadlines and
//! dropping the queue still work when the operation runs on another worker than the queue's
//! owner.

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{S3sFs, put_file};
use engine::{Dialect, Engine, Fabric, Placement, RegisterOptions};
use ring_api::opcode::{Cancel, RangeGet};
use ring_api::{BufSlice, Cqe, DataPath, ErrorClass, ErrorCode};
use s3_lite::credentials::Credentials;

const WORKERS: usize = 4;

/// `ops` range-gets through a fresh buffer (`common::range_gets_into`). Returns the path each
/// completion named.
fn range_gets(engine: &Engine, bucket: &str, key: &str, data: &[u8], ops: usize) -> Vec<DataPath> {
    let buf = engine
        .register_host(
            common::RANGE_GETS_DEPTH * common::RANGE_GET_LEN as usize,
            RegisterOptions::pageable(),
        )
        .unwrap();
    common::range_gets_into(engine, buf, bucket, key, data, ops)
}

/// Every worker ran some of the `ops` operations, and together exactly `ops`.
fn assert_every_worker_ran_ops(engine: &Engine, ops: usize) {
    let per: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
    assert_eq!(per.len(), WORKERS);
    assert_eq!(per.iter().sum::<u64>(), ops as u64, "{per:?}");
    assert!(
        per.iter().all(|&n| n > 0),
        "ops of one queue ran on only some workers: {per:?}"
    );
}

#[test]
fn one_queue_runs_on_every_worker_over_http() {
    let server = S3sFs::start();
    let data = common::pattern(1 << 20, 5);
    put_file(&server, "spread", "obj.bin", &data);
    let engine = common::builder(&server)
        .placement(Placement::Workers(WORKERS))
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    let paths = range_gets(&engine, "spread", "obj.bin", &data, 600);
    assert!(paths.iter().all(|p| *p == DataPath::Http));
    assert_every_worker_ran_ops(&engine, 600);
}

#[test]
fn one_queue_runs_on_every_worker_over_soft() {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let a = gw.local_addr();
    let data = rig::pattern(1 << 20, 9);
    assert_eq!(raw::call(a, "PUT", "/spread", "", &[], b"").status(), 200);
    assert_eq!(
        raw::call(a, "PUT", "/spread/obj.bin", "", &[], &data).status(),
        200
    );
    let engine = rig::engine_builder(a)
        .placement(Placement::Workers(WORKERS))
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcPersistent)
        .build()
        .unwrap();
    let paths = range_gets(&engine, "spread", "obj.bin", &data, 600);
    assert!(
        paths.iter().all(|p| *p == DataPath::RdmaSoft),
        "some ops fell back to HTTP"
    );
    assert_every_worker_ran_ops(&engine, 600);
    drop(engine);
    gw.shutdown();
}

/// An endpoint that accepts connections and never answers: operations stay on the wire.
fn black_hole() -> (TcpListener, Engine) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let engine = Engine::builder()
        .endpoint_url(format!("http://{}", listener.local_addr().unwrap()))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(WORKERS))
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    (listener, engine)
}

fn wait_for(q: &mut engine::Queue, n: usize) -> Vec<Cqe> {
    assert_eq!(q.wait(n, Some(Duration::from_secs(10))), n, "completions");
    let mut got: Vec<Cqe> = q.completion().collect();
    got.sort_by_key(|c| (c.user_data(), c.result()));
    got
}

/// `WORKERS` range-gets tagged `tags` into disjoint 100-byte ranges, pushed in one batch: the
/// owner keeps one and hands each other to an idle worker.
fn push_spread(q: &mut engine::Queue, engine: &Engine, buf: ring_api::BufHandle, tags: &[u64]) {
    let obj = engine.object("bkt", "k").unwrap();
    let before: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
    let sqes: Vec<_> = tags
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            RangeGet::new(obj, 0, BufSlice::new(buf, i as u64 * 100, 100))
                .user_data(t)
                .build()
        })
        .collect();
    q.push_multiple(&sqes).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let after: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
        let grew = before.iter().zip(&after).filter(|(b, a)| a > b).count();
        if grew == WORKERS {
            break;
        }
        assert!(
            Instant::now() < end,
            "ops did not reach every worker: {before:?} -> {after:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Every range is leased by an op on the wire.
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..tags.len() as u64 {
        assert!(matches!(
            engine.read(buf, i * 100, 100),
            Err(engine::EngineError::Busy)
        ));
    }
}

#[test]
fn cancel_deadline_and_drop_follow_the_op_to_its_worker() {
    let (_listener, engine) = black_hole();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(16).unwrap();

    // Cancel: each op runs on its own worker, so three of the four cancels travel.
    let tags: Vec<u64> = (1..=WORKERS as u64).collect();
    push_spread(&mut q, &engine, buf, &tags);
    for &t in &tags {
        q.push(&Cancel::new(t).user_data(100 + t).build()).unwrap();
    }
    q.push(&Cancel::new(77).user_data(200).build()).unwrap();
    let got = wait_for(&mut q, 2 * WORKERS + 1);
    for (i, &t) in tags.iter().enumerate() {
        assert_eq!(
            (
                got[i].user_data(),
                got[i].error_code(),
                got[i].error_class()
            ),
            (t, Some(ErrorCode::Cancelled), Some(ErrorClass::Cancelled)),
        );
        assert_eq!(
            (got[WORKERS + i].user_data(), got[WORKERS + i].result()),
            (100 + t, 0)
        );
    }
    assert_eq!(
        (got[2 * WORKERS].user_data(), got[2 * WORKERS].error_code()),
        (200, Some(ErrorCode::NotFound))
    );
    assert!(
        engine.read(buf, 0, 400).is_ok(),
        "leases released by the cancels"
    );

    // One tag on every worker: each Cancel stops exactly one of them, then none is left.
    push_spread(&mut q, &engine, buf, &[5; WORKERS]);
    for i in 0..WORKERS as u64 {
        q.push(&Cancel::new(5).user_data(300 + i).build()).unwrap();
    }
    let got = wait_for(&mut q, 2 * WORKERS);
    let cancelled = got
        .iter()
        .filter(|c| c.user_data() == 5 && c.error_code() == Some(ErrorCode::Cancelled))
        .count();
    let ok = got
        .iter()
        .filter(|c| c.user_data() >= 300 && c.result() == 0)
        .count();
    assert_eq!((cancelled, ok), (WORKERS, WORKERS), "{got:?}");
    q.push(&Cancel::new(5).user_data(400).build()).unwrap();
    assert_eq!(
        wait_for(&mut q, 1)[0].error_code(),
        Some(ErrorCode::NotFound)
    );

    // Deadlines fire on the worker running the op.
    let obj = engine.object("bkt", "k").unwrap();
    let t0 = Instant::now();
    let sqes: Vec<_> = (0..WORKERS as u64)
        .map(|i| {
            RangeGet::new(obj, 0, BufSlice::new(buf, i * 100, 100))
                .deadline_ns(200_000_000)
                .user_data(10 + i)
                .build()
        })
        .collect();
    q.push_multiple(&sqes).unwrap();
    let got = wait_for(&mut q, WORKERS);
    assert!(
        t0.elapsed() >= Duration::from_millis(190),
        "{:?}",
        t0.elapsed()
    );
    for c in &got {
        assert_eq!(
            (c.error_code(), c.error_class()),
            (Some(ErrorCode::TimedOut), Some(ErrorClass::Deadline)),
            "{c:?}"
        );
    }
    assert!(engine.read(buf, 0, 400).is_ok());

    // Dropping the queue aborts its ops wherever they run: the leases go, so deregistering
    // the buffer succeeds.
    push_spread(&mut q, &engine, buf, &[21, 22, 23, 24]);
    drop(q);
    engine
        .deregister(buf, Duration::from_secs(5))
        .expect("ops of a dropped queue still hold the buffer");
}

/// The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status).
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim();
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

#[test]
fn auto_starts_one_pinned_worker_per_allowed_core() {
    let server = S3sFs::start();
    let allowed = allowed_cpus();
    let engine = common::builder(&server)
        .placement(Placement::Auto)
        .build()
        .unwrap();
    let w = engine.workers();
    let mut cores: Vec<usize> = w.iter().map(|w| w.core.expect("Auto pins")).collect();
    assert!(
        cores.iter().all(|c| allowed.contains(c)),
        "{w:?} vs {allowed:?}"
    );
    cores.sort_unstable();
    cores.dedup();
    assert_eq!(cores.len(), w.len(), "two workers on one core: {w:?}");
    let rdma_nics = std::fs::read_dir("/sys/class/infiniband").map_or(0, Iterator::count);
    if rdma_nics == 0 {
        // No NIC: every allowed core of every node, up to the cap per node.
        assert!(
            w.len() >= allowed.len().min(engine::DEFAULT_WORKERS_PER_NIC),
            "{w:?}"
        );
        assert!(w.iter().all(|w| w.nic.is_none() && w.runs_ops));
    }
    // The cap.
    let one = common::builder(&server)
        .placement(Placement::Auto)
        .workers_per_nic(1)
        .build()
        .unwrap();
    assert!(one.workers().len() <= w.len());
    assert!(
        common::builder(&server)
            .placement(Placement::Auto)
            .workers_per_nic(0)
            .build()
            .is_err()
    );
    eprintln!("Auto here: {w:?}");
}
