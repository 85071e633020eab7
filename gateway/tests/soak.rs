//! Soak (issue 17): mixed engine ops (RANGE_GET, GET, HEAD, PUT, multipart) over HTTP and
//! over the soft fabric (`rc-persistent`) against an in-process gateway, for minutes, with
//! the fault relay injecting faults at a low rate (`every=M`, docs/fault-relay.md) on the S3
//! connections and on the soft data port. Every success is checked byte for byte (reads
//! against the source, writes against what the gateway stores, read without the relay).
//!
//! It prints a line every `SAMPLE` (ops, errors, RSS, open fds) and a summary (ops, errors by
//! class, RSS and fd series), and fails on any false success, any panic, or growth past the
//! bounds: RSS (`VmRSS`) at the end may exceed RSS after the warm-up (the first quarter) by
//! at most `RSS_GROWTH`, and the open fds by at most `FD_GROWTH`.
//!
//! `soak_short` (10 s, no growth check: too short to mean anything) runs in the test command;
//! `soak_long` is `#[ignore]`d and run by `benches/scripts/soak.sh` (`SOAK_SECS`, default 600).

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use engine::{Dialect, Engine, Fabric, RegisterOptions};
use hipobj_gateway::fault_relay::{Fault, Relay};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::{ACCESS, SECRET, call};
use rig::pattern;
use ring_api::opcode::{
    AbortMultipart, CompleteMultipart, CreateMultipart, Get, Head, Put, RangeGet, UploadPart,
};
use ring_api::{BufSlice, Cqe, PartNumber, UploadHandle};

const BUCKET: &str = "soak";
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// The seeded object reads come from.
const OBJECT: u64 = 4 * MIB;
/// Each op's deadline.
const OP_DEADLINE: Duration = Duration::from_secs(10);
/// Client threads per fabric.
const THREADS: usize = 2;
/// How often RSS and fds are sampled.
const SAMPLE: Duration = Duration::from_secs(10);
/// RSS growth allowed from the end of the warm-up to the end: allocator arenas and caches
/// settling, the gateway's spool and read buffers at their working size. A per-op leak of a
/// few hundred bytes over a 10-minute run exceeds it.
const RSS_GROWTH: u64 = 32 * MIB;
/// Open-fd growth allowed (connections being replaced at the moment of sampling).
const FD_GROWTH: u64 = 32;

/// Faults on the S3 connections: each on every Mth match (docs/fault-relay.md).
const HTTP_FAULTS: &[&str] = &[
    "slowdown,every=97",
    "reset-after=0,every=61",
    "truncate-after=3000,every=53",
    "stall-after=200,every=211",
    "flip=500,every=89",
    "content-length-minus=64,every=101",
    "flip-request=100,every=71",
    "latency=20,every=31",
];
/// Faults on the soft data port, per connection (the pairing's long-lived stream).
const DATA_FAULTS: &[&str] = &["flip-stream=100000000", "reset-after=200000000"];

fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kb| kb * KIB)
        .unwrap()
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64
}

/// What every client thread reports into.
#[derive(Default)]
struct Tally {
    ops: AtomicU64,
    ok: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    false_successes: Mutex<Vec<String>>,
}

impl Tally {
    fn error(&self, label: &str, c: &Cqe) {
        let key = format!("{label} {:?}/{:?}", c.error_class(), c.error_code());
        *self.errors.lock().unwrap().entry(key).or_default() += 1;
    }
    fn wrong(&self, what: String) {
        self.false_successes.lock().unwrap().push(what);
    }
}

struct Rig {
    gw: RunningGateway,
    http_relay: Relay,
    front: Relay,
    data_relay: Relay,
    seeded: Vec<u8>,
    _root: tempfile::TempDir,
}

fn rig() -> Rig {
    let root = tempfile::tempdir().unwrap();
    let target = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    let soft = target.soft_addr().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root.path())
        .credentials(ACCESS, SECRET)
        .min_part_size(64 * 1024)
        .rdma_target(target)
        .start()
        .unwrap();
    let a = gw.local_addr();
    assert_eq!(
        call(a, "PUT", &format!("/{BUCKET}"), "", &[], b"").status(),
        200
    );
    let seeded = pattern(OBJECT as usize, 31);
    assert_eq!(
        call(a, "PUT", &format!("/{BUCKET}/seeded"), "", &[], &seeded).status(),
        200
    );
    let parse =
        |specs: &[&str]| -> Vec<Fault> { specs.iter().map(|s| Fault::parse(s).unwrap()).collect() };
    let data_relay =
        Relay::start_raw("127.0.0.1:0", &soft.to_string(), parse(DATA_FAULTS)).unwrap();
    let http_relay = Relay::start("127.0.0.1:0", &a.to_string(), parse(HTTP_FAULTS)).unwrap();
    let rewrite = Fault::parse(&format!(
        "rewrite-header=x-amz-rdma-soft-addr:{}",
        data_relay.addr()
    ))
    .unwrap();
    let front = Relay::start("127.0.0.1:0", &http_relay.addr().to_string(), vec![rewrite]).unwrap();
    Rig {
        gw,
        http_relay,
        front,
        data_relay,
        seeded,
        _root: root,
    }
}

/// A small xorshift, seeded per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the gateway stores under `key` (read without any relay).
fn stored(gw: SocketAddr, key: &str) -> Option<Vec<u8>> {
    let r = call(gw, "GET", &format!("/{BUCKET}/{key}"), "", &[], b"");
    (r.status() == 200).then_some(r.body)
}

fn client(rig: &Rig, soft: bool, thread: usize, stop: &AtomicBool, tally: &Tally) {
    let label = if soft { "soft" } else { "http" };
    let addr = if soft {
        rig.front.addr()
    } else {
        rig.http_relay.addr()
    };
    let b = rig::engine_builder(addr)
        .attempt_timeout(Duration::from_secs(2))
        .default_deadline(Some(OP_DEADLINE));
    let engine: Engine = if soft {
        b.fabric(Fabric::Soft).dialect(Dialect::RcPersistent)
    } else {
        b.fabric(Fabric::Http)
    }
    .build()
    .unwrap();
    let buf = engine
        .register_host(OBJECT as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let gw = rig.gw.local_addr();
    let seeded_obj = engine.object(BUCKET, "seeded").unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((thread as u64 + 1) * 7919 + u64::from(soft)));
    // The last bytes each write slot stored, so a failed overwrite can be judged.
    let mut slots: Vec<Option<Vec<u8>>> = vec![None; 8];
    let mut run = |sqe: ring_api::Sqe| -> Cqe {
        q.push(&sqe).unwrap();
        assert_eq!(
            q.wait(1, Some(OP_DEADLINE * 3)),
            1,
            "{label}: no completion long after the op's deadline"
        );
        q.completion().next().unwrap()
    };
    while !stop.load(Ordering::SeqCst) {
        let pick = rng.below(100);
        let ok = if pick < 60 {
            let len = [4 * KIB, 64 * KIB, MIB][rng.below(3) as usize];
            let off = rng.below(OBJECT - len);
            let c = run(RangeGet::new(seeded_obj, off, BufSlice::new(buf, 0, len)).build());
            if c.is_ok() {
                let got = engine.read(buf, 0, c.bytes()).unwrap();
                if got[..] != rig.seeded[off as usize..(off + len) as usize] {
                    tally.wrong(format!("{label} RANGE_GET {off}+{len}: wrong bytes"));
                }
            } else {
                tally.error(label, &c);
            }
            c.is_ok()
        } else if pick < 70 {
            let c = run(Get::new(seeded_obj, BufSlice::new(buf, 0, OBJECT)).build());
            if c.is_ok() {
                if engine.read(buf, 0, c.bytes()).unwrap()[..] != rig.seeded[..] {
                    tally.wrong(format!("{label} GET: wrong bytes ({})", c.bytes()));
                }
            } else {
                tally.error(label, &c);
            }
            c.is_ok()
        } else if pick < 75 {
            let c = run(Head::new(seeded_obj).build());
            if c.is_ok() && c.aux() != OBJECT {
                tally.wrong(format!("{label} HEAD: size {}", c.aux()));
            } else if !c.is_ok() {
                tally.error(label, &c);
            }
            c.is_ok()
        } else {
            let slot = rng.below(slots.len() as u64) as usize;
            let key = format!("w/{label}{thread}/{slot}");
            let obj = engine.object(BUCKET, &key).unwrap();
            let len = 64 * KIB + rng.below(MIB);
            let data = pattern(len as usize, rng.next() as u8);
            engine.copy_in(buf, 0, &data).unwrap();
            let c = if pick < 92 {
                run(Put::new(obj, BufSlice::new(buf, 0, len)).build())
            } else {
                multipart(&mut run, obj, buf, len)
            };
            let now = stored(gw, &key);
            if c.is_ok() {
                if now.as_deref() != Some(&data[..]) {
                    tally.wrong(format!("{label} write {key}: stored object differs"));
                }
                slots[slot] = Some(data);
            } else {
                tally.error(label, &c);
                // Failed: the key holds the previous object or the new one, never a mix.
                if now.is_some() && now != slots[slot] && now.as_deref() != Some(&data[..]) {
                    tally.wrong(format!("{label} failed write {key}: stored object corrupt"));
                }
                if now.as_deref() == Some(&data[..]) {
                    slots[slot] = Some(data);
                }
            }
            c.is_ok()
        };
        // `ok` first, so a sample never counts a success as an error.
        if ok {
            tally.ok.fetch_add(1, Ordering::Relaxed);
        }
        tally.ops.fetch_add(1, Ordering::Relaxed);
    }
}

/// Create, two parts (the first 64 KiB, the rest), complete; the first failure's completion.
fn multipart(
    run: &mut impl FnMut(ring_api::Sqe) -> Cqe,
    obj: ring_api::ObjectId,
    buf: ring_api::BufHandle,
    len: u64,
) -> Cqe {
    let c = run(CreateMultipart::new(obj).build());
    if !c.is_ok() {
        return c;
    }
    let upload = UploadHandle(u32::try_from(c.aux()).unwrap());
    for (n, (at, size)) in [(0, 64 * KIB), (64 * KIB, len - 64 * KIB)]
        .into_iter()
        .enumerate()
    {
        let part = PartNumber::new(n as u32 + 1).unwrap();
        let c = run(UploadPart::new(obj, upload, part, BufSlice::new(buf, at, size)).build());
        if !c.is_ok() {
            // Abandoned uploads are aborted (best effort), so none pile up in the engine's
            // upload table or the gateway's directory over a long run.
            let _ = run(AbortMultipart::new(obj, upload).build());
            return c;
        }
    }
    let c = run(CompleteMultipart::new(obj, upload, PartNumber::new(2).unwrap()).build());
    if !c.is_ok() {
        let _ = run(AbortMultipart::new(obj, upload).build());
    }
    c
}

fn soak(secs: u64, check_growth: bool) {
    let rig = rig();
    let tally = Tally::default();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mut samples: Vec<(u64, u64, u64, u64)> = Vec::new();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for soft in [false, true] {
            for thread in 0..THREADS {
                let (rig, stop, tally) = (&rig, &stop, &tally);
                handles.push(s.spawn(move || client(rig, soft, thread, stop, tally)));
            }
        }
        let end = t0 + Duration::from_secs(secs);
        let sample = SAMPLE.min(Duration::from_secs(secs.div_ceil(4).max(1)));
        while Instant::now() < end {
            std::thread::sleep(sample.min(end.saturating_duration_since(Instant::now())));
            let (rss, fds) = (status("VmRSS"), open_fds());
            let (ops, ok) = (
                tally.ops.load(Ordering::Relaxed),
                tally.ok.load(Ordering::Relaxed),
            );
            let t = t0.elapsed().as_secs();
            println!(
                "soak t={t:>4}s ops={ops} errors={} rss={} KiB fds={fds} http-faults={} data-faults={}",
                ops.saturating_sub(ok),
                rss / KIB,
                rig.http_relay.stats().faults(),
                rig.data_relay.stats().faults()
            );
            samples.push((t, ops, rss, fds));
        }
        stop.store(true, Ordering::SeqCst);
        for h in handles {
            if let Err(p) = h.join() {
                std::panic::resume_unwind(p);
            }
        }
    });
    let ops = tally.ops.load(Ordering::Relaxed);
    let ok = tally.ok.load(Ordering::Relaxed);
    let errors = tally.errors.lock().unwrap().clone();
    let wrong = tally.false_successes.lock().unwrap().clone();
    let hwm = status("VmHWM");
    println!(
        "soak summary: {secs} s, {ops} ops ({:.0}/s), {ok} ok, {} errors, {} false successes, \
         faults applied: http {} data {}, peak RSS {} KiB",
        ops as f64 / t0.elapsed().as_secs_f64(),
        ops - ok,
        wrong.len(),
        rig.http_relay.stats().faults(),
        rig.data_relay.stats().faults(),
        hwm / KIB
    );
    for (k, n) in &errors {
        println!("soak errors: {k}: {n}");
    }
    println!(
        "soak RSS KiB over time: {:?}",
        samples.iter().map(|s| (s.0, s.2 / KIB)).collect::<Vec<_>>()
    );
    println!(
        "soak fds over time: {:?}",
        samples.iter().map(|s| (s.0, s.3)).collect::<Vec<_>>()
    );
    assert!(wrong.is_empty(), "false successes:\n{}", wrong.join("\n"));
    assert!(ok > 0, "nothing succeeded");
    if check_growth {
        // The warm-up ends at the first sample past a quarter of the run.
        let warm = samples
            .iter()
            .find(|s| s.0 >= secs / 4)
            .copied()
            .expect("samples after the warm-up");
        let last = *samples.last().unwrap();
        let rss_growth = last.2.saturating_sub(warm.2);
        let fd_growth = last.3.saturating_sub(warm.3);
        println!(
            "soak growth after the warm-up (t={}s): RSS {} KiB (bound {} KiB), fds {fd_growth} (bound {FD_GROWTH})",
            warm.0,
            rss_growth / KIB,
            RSS_GROWTH / KIB
        );
        assert!(
            rss_growth <= RSS_GROWTH,
            "RSS grew {} KiB",
            rss_growth / KIB
        );
        assert!(fd_growth <= FD_GROWTH, "fds grew by {fd_growth}");
    }
    rig.gw.shutdown();
}

#[test]
fn soak_short() {
    soak(10, false);
}

#[test]
#[ignore = "minutes long; run by benches/scripts/soak.sh (SOAK_SECS, default 600)"]
fn soak_long() {
    let secs = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    soak(secs, true);
}
