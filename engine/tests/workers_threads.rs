//! The engine's threads during a 10,000-op batch: its workers plus the documented device
//! threads, and nothing per operation — over the soft fabric and over HTTP.
//!
//! Then `hipobj-rc-v2` over the soft fabric (2,000 ops: each op dials a fresh TCP connection,
//! and 10,000 would crowd the ephemeral ports with TIME_WAIT): v2 makes a fresh QP per op, and
//! its exchanges run on the workers.
//!
//! `soft_threads_are_a_fixed_device_set_none_per_qp` holds the soft fabric to issue #13 item 3:
//! under both dialects the threads beyond the workers are one fixed set of named soft device
//! I/O threads (`soft-io-<device>-<i>`, at most `engine::soft::default_io_threads()` of the one
//! soft device the engine dials from), the same set in every sample, none per QP or per op. It
//! prints the most soft threads a sample held.
//!
//! `verbs_threads_are_workers_nothing_per_op` (ignored here: it needs an RDMA device; the
//! Soft-RoCE VM lane runs it, `benches/rxe/guest.sh`) holds the verbs fabric to the same rule
//! against a gateway on the same device: both dialects, and the threads beyond the workers are
//! none at all (the engine's verbs path has no device threads; a verbs CQ wakes its worker
//! through its completion channel).
//!
//! The gateway runs in a child process (this test binary re-run as the `gateway_child`
//! helper) so that only the engine's threads live in this process. Run one test of this file
//! at a time (`--exact`): another test's threads would count.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::{Dialect, Engine, Fabric, Placement, RegisterOptions};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, Cqe, DataPath};

const WORKERS: usize = 3;
const OPS: usize = 10_000;
const CHILD_ENV: &str = "HIPOBJ_THREADS_TEST_GATEWAY_ROOT";
/// Set (to the verbs device's name) when the gateway child is to serve over verbs.
const CHILD_VERBS_ENV: &str = "HIPOBJ_THREADS_TEST_GATEWAY_VERBS";

/// Run by the tests below in a child process: a gateway with a soft RDMA target (or a verbs
/// one on the device `CHILD_VERBS_ENV` names) over the directory in `CHILD_ENV`; prints
/// `ADDR <addr>`, serves until stdin closes.
#[test]
#[ignore = "helper, not a test: the thread-count test runs it as its gateway process"]
fn gateway_child() {
    let root = std::env::var(CHILD_ENV).expect("run by workers_threads' test only");
    let root = std::path::Path::new(&root);
    let gw = match std::env::var(CHILD_VERBS_ENV) {
        Ok(nic) => {
            let target = hipobj_gateway::RcTarget::start_verbs(
                Some(&nic),
                hipobj_gateway::RcLimits::default(),
            )
            .expect("a verbs target on the test NIC");
            rig::gateway_over(root, target)
        }
        Err(_) => rig::soft_gateway(root),
    };
    println!("ADDR {}", gw.local_addr());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    gw.shutdown();
}

/// The gateway child; killed on drop.
struct GatewayProcess {
    child: Child,
    addr: SocketAddr,
    /// The child's stdout, kept open: its test harness writes to it later (e.g. "running
    /// for over 60 seconds"), and a closed pipe would end the child on `EPIPE`.
    _stdout: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl GatewayProcess {
    /// A soft gateway over `root`, or a verbs one on device `verbs`.
    fn start(root: &std::path::Path, verbs: Option<&str>) -> Self {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "gateway_child", "--ignored", "--nocapture"])
            .env(CHILD_ENV, root);
        if let Some(nic) = verbs {
            cmd.env(CHILD_VERBS_ENV, nic);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addr = loop {
            let line = lines
                .next()
                .expect("gateway child exited before naming its address")
                .unwrap();
            if let Some(a) = line.strip_prefix("ADDR ") {
                break a.trim().parse().unwrap();
            }
        };
        Self {
            child,
            addr,
            _stdout: lines,
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `(tid, name)` of every thread of this process.
fn threads() -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        out.push((tid, name.trim().to_owned()));
    }
    out
}

/// Names of the threads not in `before`, sorted. `before` is taken once, before the first
/// engine: the soft device the engine dials from lives as long as the process
/// (`SoftDevice::shared`), so its I/O threads, once started, count in every later sample.
/// The names are read 10 ms after the threads are listed (of those still alive then): a
/// thread being spawned carries its parent's name until it sets its own.
fn new_threads(before: &BTreeSet<u32>) -> Vec<String> {
    let tids: Vec<u32> = threads()
        .into_iter()
        .map(|(t, _)| t)
        .filter(|t| !before.contains(t))
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    let mut names: Vec<String> = tids
        .into_iter()
        .filter_map(|t| std::fs::read_to_string(format!("/proc/self/task/{t}/comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect();
    names.sort();
    names
}

/// Runs `ops` 4 KiB range-gets through one queue (`depth` in flight) and samples the engine's
/// threads every `ops / 20` completions after the first tenth (every 500 after 1,000 for
/// 10,000). Returns the samples; every completion must name `path`.
fn batch(
    engine: &Engine,
    before: &BTreeSet<u32>,
    path: DataPath,
    ops: usize,
    depth: u64,
) -> Vec<Vec<String>> {
    const LEN: u64 = 4096;
    let obj = engine.object("thr", "obj.bin").unwrap();
    let buf = engine
        .register_host((depth * LEN) as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(depth as u32).unwrap();
    let mut free: Vec<u64> = (0..depth).collect();
    let (mut submitted, mut done) = (0, 0);
    let mut samples = Vec::new();
    let mut cqes = vec![Cqe::default(); depth as usize];
    let end = Instant::now() + Duration::from_secs(300);
    while done < ops {
        assert!(Instant::now() < end, "{done} of {ops} in 300 s");
        {
            let mut sq = q.submission();
            while submitted < ops
                && let Some(slot) = free.pop()
            {
                let dst = BufSlice::new(buf, slot * LEN, LEN);
                sq.push(
                    &RangeGet::new(obj, (submitted as u64 * 4099) % (1 << 20), dst)
                        .user_data(slot)
                        .build(),
                )
                .unwrap();
                submitted += 1;
            }
        }
        q.wait(1, Some(Duration::from_secs(5)));
        let n = q.reap(&mut cqes);
        for c in &cqes[..n] {
            assert!(c.is_ok(), "{c:?}");
            assert_eq!(c.path(), Some(path), "{c:?}");
            free.push(c.user_data());
            done += 1;
            // After the first tenth (set-up is over), a sample every twentieth.
            if done >= ops / 10 && done % (ops / 20).max(1) == 0 {
                samples.push(new_threads(before));
            }
        }
    }
    samples
}

fn expected() -> Vec<String> {
    let mut want: Vec<String> = (0..WORKERS).map(|i| format!("hipobj-worker-{i}")).collect();
    want.sort();
    want
}

/// Issue #13 item 3: over the soft fabric the threads beyond the workers are the soft device's
/// own I/O threads, named `soft-io-<device>-<i>`, at most [`device_threads_max`], the same set
/// in every sample under both dialects: none per QP, none per op. (Before the device had its
/// I/O threads it failed: two `soft-qp<qpn>-rx`/`-tx` threads per QP, 6 under rc-persistent
/// with 3 workers, up to 12 under hipobj-rc-v2 at 6 ops in flight.) Over HTTP: the workers
/// and nothing else beyond the soft device's threads.
#[test]
fn soft_threads_are_a_fixed_device_set_none_per_qp() {
    run();
}

/// The soft device threads the engine process may hold: the engine dials from one shared
/// soft device per address (one here), which runs `default_io_threads()`.
fn device_threads_max() -> usize {
    engine::soft::default_io_threads()
}

/// `samples` (of both dialects) each hold the workers plus one same set of at most
/// [`device_threads_max`] `soft-io-*` threads, and no other soft thread. With `fixed` unset,
/// the set seen first becomes the one every later sample must hold.
fn assert_fixed(label: &str, samples: &[Vec<String>], fixed: &mut Option<Vec<String>>) {
    let workers = expected();
    for s in samples {
        let (dev, other): (Vec<String>, Vec<String>) =
            s.iter().cloned().partition(|n| n.starts_with("soft-"));
        assert_eq!(
            other, workers,
            "{label}: threads beyond workers and soft device: {s:?}"
        );
        assert!(
            dev.iter().all(|n| n.starts_with("soft-io-")) && dev.len() <= device_threads_max(),
            "{label}: soft threads other than the device's I/O threads, or more than {}: {dev:?}",
            device_threads_max()
        );
        let want = fixed.get_or_insert_with(|| dev.clone());
        assert_eq!(
            &dev, want,
            "{label}: the soft device's threads changed during the batch"
        );
    }
}

/// Prints the most `soft-*` threads any sample of `label` held (the test's measurement).
fn report_soft(label: &str, samples: &[Vec<String>]) {
    let most = samples
        .iter()
        .map(|s| s.iter().filter(|n| n.starts_with("soft-")).count())
        .max()
        .unwrap_or(0);
    eprintln!(
        "{label}: at most {most} soft threads beside {WORKERS} workers in {} samples",
        samples.len()
    );
}

fn run() {
    let dir = tempfile::tempdir().unwrap();
    let gw = GatewayProcess::start(dir.path(), None);
    put_object(gw.addr);
    let mut fixed = None;
    let before: BTreeSet<u32> = threads().into_iter().map(|(t, _)| t).collect();
    for (fabric, path) in [
        (Fabric::Soft, DataPath::RdmaSoft),
        (Fabric::Http, DataPath::Http),
    ] {
        let engine = rig::engine_builder(gw.addr)
            .placement(Placement::Workers(WORKERS))
            .fabric(fabric)
            .dialect(Dialect::RcPersistent)
            .build()
            .unwrap();
        let samples = batch(&engine, &before, path, OPS, 32);
        assert!(samples.len() >= 10, "{fabric:?}: {} samples", samples.len());
        report_soft(&format!("{fabric:?}"), &samples);
        // Over HTTP the soft device's threads (started by the soft batch) stay, idle.
        assert_fixed(&format!("rc-persistent, {fabric:?}"), &samples, &mut fixed);
        assert!(
            engine.workers().iter().all(|w| w.ops > 0),
            "{fabric:?}: {:?}",
            engine.workers()
        );
        drop(engine);
    }
    v2_batch(gw.addr, &before, &mut fixed);
}

/// Ops of the hipobj-rc-v2 batch.
const V2_OPS: usize = 2_000;
/// Its ops in flight: below the gateway's v2 sessions per principal (8), which refuses more
/// (the op then goes over HTTP, which the batch counts as a failure).
const V2_DEPTH: u64 = 6;

/// `hipobj-rc-v2` over the soft fabric: besides the workers, only the same soft device
/// threads as under rc-persistent, whatever the QPs per op.
fn v2_batch(gw: SocketAddr, before: &BTreeSet<u32>, fixed: &mut Option<Vec<String>>) {
    let engine = rig::engine_builder(gw)
        .placement(Placement::Workers(WORKERS))
        .fabric(Fabric::Soft)
        .dialect(Dialect::RcV2)
        .build()
        .unwrap();
    let samples = batch(&engine, before, DataPath::RdmaSoft, V2_OPS, V2_DEPTH);
    assert!(samples.len() >= 2, "v2: {} samples", samples.len());
    report_soft("hipobj-rc-v2", &samples);
    assert_fixed("hipobj-rc-v2", &samples, fixed);
    drop(engine);
}

/// Bytes past 1 MiB so every range of the batch lies inside the object.
const LEN_PAD: usize = 4096;

/// Creates the bucket and the object the batches read.
fn put_object(gw: SocketAddr) {
    let data = rig::pattern((1 << 20) + LEN_PAD, 3);
    assert_eq!(raw::call(gw, "PUT", "/thr", "", &[], b"").status(), 200);
    assert_eq!(
        raw::call(gw, "PUT", "/thr/obj.bin", "", &[], &data).status(),
        200
    );
}

/// Ops of the hipobj-rc-v2 batch over verbs: each creates, connects and destroys a QP
/// through the kernel, slow under the lane's emulated CPU (~0.1 s per op).
const VERBS_V2_OPS: usize = 200;

/// The verbs device the VM lane tests on.
fn verbs_nic() -> String {
    std::env::var("ENGINE_TEST_NIC").unwrap_or_else(|_| "rxe0".to_owned())
}

/// Over verbs (the Soft-RoCE VM lane), against a gateway child on the same device: a
/// 10,000-op `rc-persistent` batch and a 200-op `hipobj-rc-v2` batch (a fresh QP per op),
/// and in every sample the threads beyond this process's start are exactly the workers —
/// the verbs fabric has no device threads, pairing and PREPARE/READY run on the workers,
/// and nothing is made per QP or per op.
#[test]
#[ignore = "needs an RDMA device (ENGINE_TEST_NIC, default rxe0): the Soft-RoCE VM lane runs it"]
fn verbs_threads_are_workers_nothing_per_op() {
    let nic = verbs_nic();
    let dir = tempfile::tempdir().unwrap();
    let gw = GatewayProcess::start(dir.path(), Some(&nic));
    put_object(gw.addr);
    let workers = expected();
    for (dialect, ops, depth) in [
        (Dialect::RcPersistent, OPS, 32),
        (Dialect::RcV2, VERBS_V2_OPS, V2_DEPTH),
    ] {
        let started = Instant::now();
        let before: BTreeSet<u32> = threads().into_iter().map(|(t, _)| t).collect();
        let engine = rig::engine_builder(gw.addr)
            .placement(Placement::Workers(WORKERS))
            .fabric(Fabric::Verbs)
            .verbs_device(nic.clone())
            .dialect(dialect)
            .build()
            .unwrap();
        let samples = batch(&engine, &before, DataPath::RdmaVerbs, ops, depth);
        assert!(samples.len() >= 2, "{dialect:?}: {} samples", samples.len());
        for s in &samples {
            assert_eq!(
                s, &workers,
                "{dialect:?} over verbs: threads beyond the workers"
            );
        }
        eprintln!(
            "VERBS_THREADS {dialect:?}: {ops} ops in {:.1} s, {} samples, each exactly the \
             {WORKERS} workers",
            started.elapsed().as_secs_f64(),
            samples.len()
        );
        drop(engine);
    }
}
