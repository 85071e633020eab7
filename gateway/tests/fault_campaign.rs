//! The engine↔gateway fault campaign of issue 17: every op (GET, RANGE_GET, HEAD, PUT,
//! multipart: create + parts + complete) × every dialect the gateway serves (HTTP,
//! rc-persistent and hipobj-rc-v2 over the soft fabric, and cuObject, which the gateway
//! declines so the engine falls back to HTTP) × the faults of the fault relay
//! (`hipobj_gateway::fault_relay`, docs/fault-relay.md). The engine talks to the gateway
//! through one relay for HTTP and, on the soft fabric, dials the data port through a second,
//! raw relay (the HTTP relay rewrites `x-amz-rdma-soft-addr` to it).
//!
//! Every cell must end in
//! - a success whose bytes are checked here (GET/RANGE_GET: the destination buffer; HEAD: the
//!   size; PUT/multipart: the object the gateway stores, read back without the relay), or
//! - a typed error (a named `ErrorCode`),
//!
//! never a false success or a corrupt stored object, always within the op's deadline (plus
//! slack for the test's own bookkeeping), and the same engine must then succeed, byte-exact,
//! once the relays are disarmed. A panic anywhere fails the test.
//!
//! `fault_campaign` runs the whole table (320 cells, six at a time, about 20 s on two
//! cores). Its one documented exception: a HEAD answered through
//! `lower-content-length` reports the lowered size — a HEAD has no body that could
//! contradict its `Content-Length`, so no client can detect that lie; the cell checks that
//! such a success is not claimed as verified.

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine::{Dialect, Engine, Fabric, RegisterOptions};
use hipobj_gateway::fault_relay::{Fault, Relay};
use hipobj_gateway::{Gateway, RcLimits, RcTarget, RunningGateway};
use raw::{ACCESS, SECRET, call};
use rig::pattern;
use ring_api::opcode::{CompleteMultipart, CreateMultipart, Get, Head, Put, RangeGet, UploadPart};
use ring_api::{BufHandle, BufSlice, Cqe, ObjectId, PartNumber, UploadHandle};

const BUCKET: &str = "campaign";
/// The seeded object every read op reads.
const OBJ_LEN: usize = 600_000;
/// RANGE_GET span.
const RANGE: (u64, u64) = (100_003, 300_000);
/// PUT size.
const PUT_LEN: usize = 400_000;
/// Multipart parts (the gateway's minimum part size is lowered to 64 KiB).
const PARTS: [usize; 2] = [200_000, 50_000];
/// Each op's deadline (`deadline_ns` of its entry).
const OP_DEADLINE: Duration = Duration::from_secs(6);
/// Bookkeeping slack on top of the deadline (a multipart cell is four ops in a row, each
/// with its own deadline; see `Cell::budget`).
const SLACK: Duration = Duration::from_secs(3);
/// Cells run at once.
const PARALLEL: usize = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Get,
    RangeGet,
    Head,
    Put,
    Multipart,
}

const OPS: [Op; 5] = [Op::Get, Op::RangeGet, Op::Head, Op::Put, Op::Multipart];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    Http,
    RcPersistent,
    RcV2,
    /// cuObject with a descriptor provider: the gateway declines it (501), so every op
    /// falls back to HTTP — the path an engine configured for cuObject takes here.
    CuObject,
}

const WIRES: [Wire; 4] = [Wire::Http, Wire::RcPersistent, Wire::RcV2, Wire::CuObject];

/// Which connection a fault is put on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// The S3 HTTP connections (every dialect has them).
    Http,
    /// The soft fabric's data port (raw bytes; soft dialects only).
    Data,
}

/// The faults of the campaign: where, and the relay spec (docs/fault-relay.md).
const FAULTS: &[(On, &str)] = &[
    (On::Http, ""),
    (On::Http, "latency=300"),
    (On::Http, "slowdown,times=1"),
    (On::Http, "slowdown"),
    (On::Http, "reset-after=0,times=1"),
    (On::Http, "reset-after=300,times=1"),
    (On::Http, "truncate-after=2000,times=1"),
    (On::Http, "stall-after=200,times=1"),
    (On::Http, "flip=1000"),
    (On::Http, "content-length-minus=100"),
    (On::Http, "lower-content-length=100"),
    (On::Http, "flip-request=1000"),
    (On::Http, "drop-header=ETag"),
    (On::Http, "drop-header=x-amz-checksum-crc64nvme"),
    (On::Data, "flip-stream=70000,times=1"),
    (On::Data, "reset-after=70000,times=1"),
    (On::Data, "truncate-after=70000,times=1"),
    (On::Data, "stall-after=70000,times=1"),
];

struct Shared {
    gw: RunningGateway,
    soft: SocketAddr,
    seeded: Vec<u8>,
    _root: tempfile::TempDir,
}

fn shared() -> Shared {
    let root = tempfile::tempdir().unwrap();
    let target = RcTarget::start("127.0.0.1:0".parse().unwrap(), RcLimits::default()).unwrap();
    let soft = target.soft_addr().expect("the soft fabric has a data port");
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
    let seeded = pattern(OBJ_LEN, 23);
    let r = call(a, "PUT", &format!("/{BUCKET}/seeded"), "", &[], &seeded);
    assert_eq!(r.status(), 200, "{}", r.text());
    Shared {
        gw,
        soft,
        seeded,
        _root: root,
    }
}

struct Cell {
    op: Op,
    wire: Wire,
    on: On,
    spec: &'static str,
    index: usize,
}

impl Cell {
    fn name(&self) -> String {
        format!(
            "{:?} × {:?} × {:?}:{}",
            self.op, self.wire, self.on, self.spec
        )
    }

    /// The longest the faulted op may take: one deadline per engine op, plus slack.
    fn budget(&self) -> Duration {
        let ops = if self.op == Op::Multipart { 4 } else { 1 };
        OP_DEADLINE * ops + SLACK
    }
}

fn cells() -> Vec<Cell> {
    let mut out = Vec::new();
    for &wire in &WIRES {
        for &(on, spec) in FAULTS {
            if on == On::Data && matches!(wire, Wire::Http | Wire::CuObject) {
                continue;
            }
            for &op in &OPS {
                let index = out.len();
                out.push(Cell {
                    op,
                    wire,
                    on,
                    spec,
                    index,
                });
            }
        }
    }
    out
}

/// What one run of an op came to.
enum Outcome {
    /// Succeeded; the check of its result (`None`: exact).
    Ok {
        wrong: Option<String>,
        verified: bool,
    },
    /// Failed with this completion.
    Failed(Cqe),
}

/// The engine, its buffer and queue for one cell.
struct Client {
    engine: Engine,
    buf: BufHandle,
    q: engine::Queue,
}

const BUF: u64 = 2 << 20;

impl Client {
    fn new(addr: SocketAddr, wire: Wire) -> Self {
        let b = rig::engine_builder(addr).attempt_timeout(Duration::from_secs(2));
        let b = match wire {
            Wire::Http => b.fabric(Fabric::Http),
            Wire::RcPersistent => b.fabric(Fabric::Soft).dialect(Dialect::RcPersistent),
            Wire::RcV2 => b.fabric(Fabric::Soft).dialect(Dialect::RcV2),
            Wire::CuObject => b
                .fabric(Fabric::Soft)
                .dialect(Dialect::CuObject)
                .dc_token_provider(std::sync::Arc::new(rig::FixedDc)),
        };
        let engine = b.build().unwrap();
        let buf = engine
            .register_host(BUF as usize, RegisterOptions::pageable())
            .unwrap();
        let q = engine.queue(8).unwrap();
        Self { engine, buf, q }
    }

    fn run(&mut self, sqe: ring_api::Sqe) -> Cqe {
        self.q.push(&sqe).unwrap();
        // The deadline is the engine's to keep; this wait only stops a hung test.
        let n = self.q.wait(1, Some(OP_DEADLINE + SLACK * 4));
        assert_eq!(n, 1, "no completion {:?} after its deadline", SLACK * 4);
        self.q.completion().next().unwrap()
    }

    fn object(&self, key: &str) -> ObjectId {
        self.engine.object(BUCKET, key).unwrap()
    }

    /// Runs `op` once; `key` names the object PUT and multipart write.
    fn op(&mut self, op: Op, key: &str, sh: &Shared) -> Outcome {
        let d = OP_DEADLINE.as_nanos() as u64;
        let gw = sh.gw.local_addr();
        match op {
            Op::Get => {
                let obj = self.object("seeded");
                let c = self.run(
                    Get::new(obj, BufSlice::new(self.buf, 0, BUF))
                        .deadline_ns(d)
                        .build(),
                );
                if !c.is_ok() {
                    return Outcome::Failed(c);
                }
                let got = self.engine.read(self.buf, 0, c.bytes()).unwrap().to_vec();
                let wrong = (got != sh.seeded)
                    .then(|| format!("GET gave {} bytes, exact: false", got.len()));
                Outcome::Ok {
                    wrong,
                    verified: c.verified(),
                }
            }
            Op::RangeGet => {
                let obj = self.object("seeded");
                let (off, len) = RANGE;
                let c = self.run(
                    RangeGet::new(obj, off, BufSlice::new(self.buf, 0, len))
                        .deadline_ns(d)
                        .build(),
                );
                if !c.is_ok() {
                    return Outcome::Failed(c);
                }
                let got = self.engine.read(self.buf, 0, c.bytes()).unwrap().to_vec();
                let want = &sh.seeded[off as usize..(off + len) as usize];
                let wrong = (got != want)
                    .then(|| format!("RANGE_GET gave {} bytes, exact: false", got.len()));
                Outcome::Ok {
                    wrong,
                    verified: c.verified(),
                }
            }
            Op::Head => {
                let obj = self.object("seeded");
                let c = self.run(Head::new(obj).deadline_ns(d).build());
                if !c.is_ok() {
                    return Outcome::Failed(c);
                }
                let wrong = (c.aux() != OBJ_LEN as u64)
                    .then(|| format!("HEAD said {} bytes, not {OBJ_LEN}", c.aux()));
                Outcome::Ok {
                    wrong,
                    verified: c.verified(),
                }
            }
            Op::Put => {
                let data = pattern(PUT_LEN, key.len() as u8);
                self.engine.copy_in(self.buf, 0, &data).unwrap();
                let obj = self.object(key);
                let c = self.run(
                    Put::new(obj, BufSlice::new(self.buf, 0, data.len() as u64))
                        .deadline_ns(d)
                        .build(),
                );
                let stored = stored(gw, key);
                if stored.as_ref().is_some_and(|s| *s != data) {
                    return Outcome::Ok {
                        wrong: Some("the gateway stores a corrupt object".into()),
                        verified: c.verified(),
                    };
                }
                if !c.is_ok() {
                    return Outcome::Failed(c);
                }
                let wrong = stored
                    .is_none()
                    .then(|| "PUT succeeded, nothing stored".into());
                Outcome::Ok {
                    wrong,
                    verified: c.verified(),
                }
            }
            Op::Multipart => self.multipart(key, d, gw),
        }
    }

    fn multipart(&mut self, key: &str, d: u64, gw: SocketAddr) -> Outcome {
        let parts: Vec<Vec<u8>> = PARTS
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(n, i as u8 + key.len() as u8))
            .collect();
        let obj = self.object(key);
        let c = self.run(CreateMultipart::new(obj).deadline_ns(d).build());
        if !c.is_ok() {
            return Outcome::Failed(c);
        }
        let upload = UploadHandle(u32::try_from(c.aux()).expect("handle fits u32"));
        let mut at = 0;
        for (i, p) in parts.iter().enumerate() {
            self.engine.copy_in(self.buf, at, p).unwrap();
            let n = PartNumber::new(i as u32 + 1).unwrap();
            let c = self.run(
                UploadPart::new(obj, upload, n, BufSlice::new(self.buf, at, p.len() as u64))
                    .deadline_ns(d)
                    .build(),
            );
            if !c.is_ok() {
                return Outcome::Failed(c);
            }
            at += p.len() as u64;
        }
        let n = PartNumber::new(parts.len() as u32).unwrap();
        let c = self.run(
            CompleteMultipart::new(obj, upload, n)
                .deadline_ns(d)
                .build(),
        );
        let want = parts.concat();
        let stored = stored(gw, key);
        if stored.as_ref().is_some_and(|s| *s != want) {
            return Outcome::Ok {
                wrong: Some("the gateway stores a corrupt multipart object".into()),
                verified: c.verified(),
            };
        }
        if !c.is_ok() {
            return Outcome::Failed(c);
        }
        let wrong = stored
            .is_none()
            .then(|| "Complete succeeded, nothing stored".into());
        Outcome::Ok {
            wrong,
            verified: c.verified(),
        }
    }
}

/// The object under `key` as the gateway stores it (read without any relay).
fn stored(gw: SocketAddr, key: &str) -> Option<Vec<u8>> {
    let r = call(gw, "GET", &format!("/{BUCKET}/{key}"), "", &[], b"");
    match r.status() {
        200 => Some(r.body),
        404 => None,
        s => panic!("reading back {key}: {s} {}", r.text()),
    }
}

/// One row of the campaign's printed table.
struct Row {
    name: String,
    result: String,
    fault_applied: bool,
    took: Duration,
    violation: Option<String>,
    /// A clean op after the fault failed before the engine recovered.
    recovery: Option<String>,
}

/// A typed error: a named code whose class is not the engine refusing the entry itself
/// (`Invalid`/`Local` would mean the test built a bad entry, not that the wire failed).
fn is_typed(c: &Cqe) -> bool {
    c.error_code().is_some()
        && !matches!(
            c.error_class(),
            Some(ring_api::ErrorClass::Invalid | ring_api::ErrorClass::Local) | None
        )
}

/// How many clean runs of the op the engine gets to recover after a fault. A failed first
/// clean run is a finding (printed); `strict` campaigns make it a violation.
const RECOVERY_RUNS: usize = 3;

fn run_cell(cell: &Cell, sh: &Shared, strict: bool) -> Row {
    let gw = sh.gw.local_addr().to_string();
    let fault = (!cell.spec.is_empty()).then(|| Fault::parse(cell.spec).unwrap());
    let data_relay = Relay::start_raw(
        "127.0.0.1:0",
        &sh.soft.to_string(),
        fault
            .iter()
            .filter(|_| cell.on == On::Data)
            .cloned()
            .collect(),
    )
    .unwrap();
    let http_relay = Relay::start(
        "127.0.0.1:0",
        &gw,
        fault
            .iter()
            .filter(|_| cell.on == On::Http)
            .cloned()
            .collect(),
    )
    .unwrap();
    // In front: only the rewrite of the data port's address (so the fault relay's counters
    // count the cell's fault alone).
    let rewrite = Fault::parse(&format!(
        "rewrite-header=x-amz-rdma-soft-addr:{}",
        data_relay.addr()
    ))
    .unwrap();
    let front = Relay::start("127.0.0.1:0", &http_relay.addr().to_string(), vec![rewrite]).unwrap();
    let mut client = Client::new(front.addr(), cell.wire);
    let key = format!("c{}/obj", cell.index);
    let started = Instant::now();
    let outcome = client.op(cell.op, &key, sh);
    let took = started.elapsed();
    let applied = match cell.on {
        On::Http => http_relay.stats().faults() > 0,
        On::Data => data_relay.stats().faults() > 0,
    };
    let mut violation = None;
    let result = match &outcome {
        Outcome::Ok {
            wrong: None,
            verified,
        } => format!("ok{}", if *verified { " (verified)" } else { "" }),
        Outcome::Ok {
            wrong: Some(w),
            verified,
        } => {
            let head_lie = cell.op == Op::Head && cell.spec.starts_with("lower-content-length");
            if head_lie && !verified {
                "ok, HEAD size lowered by the relay (undetectable, not claimed verified)".into()
            } else {
                violation = Some(format!("false success: {w}"));
                format!("FALSE SUCCESS: {w}")
            }
        }
        Outcome::Failed(c) if is_typed(c) => {
            format!("{:?} ({:?})", c.error_code().unwrap(), c.error_class())
        }
        Outcome::Failed(c) => {
            violation = Some(format!("untyped error {c:?}"));
            format!("UNTYPED {c:?}")
        }
    };
    if took > cell.budget() {
        violation.get_or_insert(format!("took {took:?}, over {:?}", cell.budget()));
    }
    // The engine keeps working: with both relays faithful the same op succeeds, exact.
    let mut recovery = None;
    if violation.is_none() {
        http_relay.disarm();
        data_relay.disarm();
        let mut failed = Vec::new();
        for run in 0..RECOVERY_RUNS {
            match client.op(cell.op, &format!("{key}.again{run}"), sh) {
                Outcome::Ok { wrong: None, .. } => break,
                Outcome::Ok { wrong: Some(w), .. } => {
                    violation = Some(format!("after the fault: false success: {w}"));
                    break;
                }
                Outcome::Failed(c) => failed.push(format!("{:?}", c.error_code())),
            }
        }
        if failed.len() == RECOVERY_RUNS {
            violation = Some(format!("the engine did not recover: {}", failed.join(", ")));
        } else if !failed.is_empty() {
            let note = format!(
                "the first clean op after the fault failed ({}); recovered on run {}",
                failed.join(", "),
                failed.len() + 1
            );
            if strict {
                violation = Some(note.clone());
            }
            recovery = Some(note);
        }
    }
    Row {
        name: cell.name(),
        result,
        fault_applied: applied,
        took,
        violation,
        recovery,
    }
}

#[test]
fn fault_campaign() {
    campaign(false);
}

/// The same table, where the first clean op after every fault must already succeed: after a
/// response with more bytes than its `Content-Length` (`lower-content-length`), one cut short
/// (`content-length-minus`) or a connection the peer closed mid-flow (`truncate-after`), the
/// next op must not meet the damaged keep-alive connection (the engine pools a connection
/// only after a clean exchange and probes an idle one before reusing it,
/// `engine/src/fabric/http`), and a CreateMultipart that meets a stale connection is retried.
/// Failed on the engine before those fixes (9 multipart cells: `Protocol`, `ConnectionReset`,
/// `TimedOut` on the first clean op).
#[test]
fn fault_campaign_strict_recovery() {
    campaign(true);
}

/// One engine (HTTP) behind one relay with `spec`; the relay's counters tell whether it hit.
fn faulted_client(sh: &Shared, spec: &str) -> (Client, Relay) {
    let gw = sh.gw.local_addr().to_string();
    let relay = Relay::start("127.0.0.1:0", &gw, vec![Fault::parse(spec).unwrap()]).unwrap();
    let client = Client::new(relay.addr(), Wire::Http);
    (client, relay)
}

/// CreateMultipartUpload is retried after a transient failure (a `503 SlowDown`, a reset
/// before any answer): the op succeeds, flagged retried, and the upload it names works. Before
/// the fix Create was never retried and completed `SlowDown` / `ConnectionReset`.
#[test]
fn create_multipart_is_retried_after_a_transient_failure() {
    let sh = shared();
    for spec in ["slowdown,times=1", "reset-after=0,times=1"] {
        let (mut client, relay) = faulted_client(&sh, spec);
        let key = format!("create-retry/{}", spec.replace([',', '='], "_"));
        let obj = client.object(&key);
        let d = OP_DEADLINE.as_nanos() as u64;
        let c = client.run(CreateMultipart::new(obj).deadline_ns(d).build());
        assert!(relay.stats().faults() > 0, "{spec}: the fault was not hit");
        assert!(
            c.is_ok(),
            "{spec}: Create failed: {:?} ({:?})",
            c.error_code(),
            c.error_class()
        );
        assert!(c.retried(), "{spec}: Create succeeded without a retry");
        // The handle names a live upload: one part and Complete store the object.
        let upload = UploadHandle(u32::try_from(c.aux()).unwrap());
        let part = pattern(PARTS[0], 7);
        client.engine.copy_in(client.buf, 0, &part).unwrap();
        let n = PartNumber::new(1).unwrap();
        let c = client.run(
            UploadPart::new(
                obj,
                upload,
                n,
                BufSlice::new(client.buf, 0, part.len() as u64),
            )
            .deadline_ns(d)
            .build(),
        );
        assert!(c.is_ok(), "{spec}: part: {:?}", c.error_code());
        let c = client.run(
            CompleteMultipart::new(obj, upload, n)
                .deadline_ns(d)
                .build(),
        );
        assert!(c.is_ok(), "{spec}: complete: {:?}", c.error_code());
        assert_eq!(stored(sh.gw.local_addr(), &key), Some(part), "{spec}");
    }
    sh.gw.shutdown();
}

/// A PUT whose body is damaged on the way is refused by the gateway with `400 BadDigest`
/// (it checks the `x-amz-checksum-crc64nvme` the engine sends); the engine completes it
/// `Integrity`/Integrity, not `InvalidArgument`/Client as it did before, and nothing is stored.
#[test]
fn bad_digest_completes_integrity() {
    let sh = shared();
    let (mut client, relay) = faulted_client(&sh, "flip-request=1000");
    let data = pattern(PUT_LEN, 9);
    client.engine.copy_in(client.buf, 0, &data).unwrap();
    let obj = client.object("bad-digest");
    let c = client.run(
        Put::new(obj, BufSlice::new(client.buf, 0, data.len() as u64))
            .deadline_ns(OP_DEADLINE.as_nanos() as u64)
            .build(),
    );
    assert!(
        relay.stats().faults() > 0,
        "the request body was not flipped"
    );
    assert_eq!(
        (c.error_code(), c.error_class()),
        (
            Some(ring_api::ErrorCode::Integrity),
            Some(ring_api::ErrorClass::Integrity)
        )
    );
    assert_eq!(stored(sh.gw.local_addr(), "bad-digest"), None);
    sh.gw.shutdown();
}

fn campaign(strict: bool) {
    let sh = shared();
    // `CAMPAIGN_CELLS=substring`: only the cells whose name contains it (for a rerun).
    let only = std::env::var("CAMPAIGN_CELLS").unwrap_or_default();
    let cells: Vec<Cell> = cells()
        .into_iter()
        .filter(|c| c.name().contains(&only))
        .collect();
    let next = AtomicUsize::new(0);
    let rows: Mutex<Vec<(usize, Row)>> = Mutex::new(Vec::new());
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..PARALLEL {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(cell) = cells.get(i) else { break };
                    let row = run_cell(cell, &sh, strict);
                    rows.lock().unwrap().push((i, row));
                }
            });
        }
    });
    let mut rows = rows.into_inner().unwrap();
    rows.sort_by_key(|(i, _)| *i);
    let mut violations = Vec::new();
    let (mut applied, mut errors, mut recoveries) = (0, 0, 0);
    for (_, r) in &rows {
        applied += usize::from(r.fault_applied);
        errors += usize::from(!r.result.starts_with("ok"));
        recoveries += usize::from(r.recovery.is_some());
        println!(
            "{:<60} {:>6} ms  fault {:<8} {}{}",
            r.name,
            r.took.as_millis(),
            if r.fault_applied {
                "applied"
            } else {
                "not hit"
            },
            r.result,
            r.recovery
                .as_deref()
                .map(|n| format!("  [finding: {n}]"))
                .unwrap_or_default()
        );
        if let Some(v) = &r.violation {
            violations.push(format!("{}: {v}", r.name));
        }
    }
    println!(
        "{} cells: {} with the fault applied, {} typed errors, {} successes checked exact, \
         {} slow recoveries, {} violations, in {:?}",
        rows.len(),
        applied,
        errors,
        rows.len() - errors,
        recoveries,
        violations.len(),
        t.elapsed()
    );
    assert_eq!(rows.len(), cells.len());
    assert!(
        violations.is_empty(),
        "violations:\n{}",
        violations.join("\n")
    );
    sh.gw.shutdown();
}
