//! A long batch of small range-gets through the engine's rings against `hipobj serve` (a
//! separate process on loopback, so this process holds only the client) completes with
//! bounded memory (issue 17), over HTTP and over the soft fabric (`rc-persistent`).
//!
//! The bound on this process's peak RSS (`VmHWM`, /proc/self/status) above its RSS before
//! the engine was built:
//!
//! ```text
//! registered buffer                     depth × 4 KiB (touched by every range landing in it)
//! + connections × (read buffer + CONN_STATE)   min(depth, connections per worker) connections,
//!                                       each with its read buffer (256 KiB, the engine
//!                                       default) and CONN_STATE for its write buffer,
//!                                       decoder and socket state
//! + depth × OP_STATE                    each op in flight: its slab entry, signed request
//!                                       head, response head, timers
//! + ENGINE_FIXED                        worker and exchange threads' stacks as touched,
//!                                       allocator arenas of the new threads, the soft
//!                                       fabric's QP and frame buffers, the endpoint's
//!                                       signing state
//! ```
//!
//! and, separately, no growth with the op count: RSS after the batch may exceed RSS after
//! a warm-up of `WARMUP` ops by at most `LEAK_SLACK` — for the 1,000,000-op batch that is
//! under 3 bytes per op, so any per-op leak shows. The measured numbers are printed
//! (`RSS ...` lines).
//!
//! `range_gets_25k_per_fabric_bounded_rss` (50,000 ops in all) runs in the test command;
//! `range_gets_1m_bounded_rss` is `#[ignore]`d (minutes on a small machine) and run by
//! `benches/scripts/range-get-rss.sh`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use engine::{Dialect, Engine, Fabric, Placement, RegisterOptions};
use ring_api::opcode::{Put, RangeGet};
use ring_api::{BufSlice, DataPath};
use s3_lite::credentials::Credentials;

const ACCESS: &str = "rss-key";
const SECRET: &str = "rss-secret";
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
/// Each range.
const RANGE: u64 = 4 * KIB;
/// Ops in flight (one queue).
const DEPTH: u64 = 64;
/// The object ranges are read from.
const OBJECT: u64 = MIB;
/// The engine's per-connection read buffer (its default, `EngineBuilder::read_buffer`).
const READ_BUFFER: u64 = 256 * KIB;
/// Connections a worker may open (the engine default, `connections_per_worker`).
const CONNECTIONS: u64 = 32;
/// Per connection beyond its read buffer: write buffer, decoder, socket bookkeeping.
const CONN_STATE: u64 = 64 * KIB;
/// Per op in flight: slab entry, signed head, response head, timer entries.
const OP_STATE: u64 = 16 * KIB;
/// Threads, arenas and fabric state the engine sets up once.
const ENGINE_FIXED: u64 = 24 * MIB;
/// Ops run before the no-growth baseline is taken (connections, arenas and buffers reach
/// their working size).
const WARMUP: u64 = 20_000;
/// RSS growth allowed from after the warm-up to the end.
const LEAK_SLACK: u64 = 2 * MIB;

/// `field` (`VmRSS`, `VmHWM`) of this process, in bytes.
fn status(field: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kb| kb * KIB)
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// `hipobj serve` in its own process, killed on drop.
struct Serve {
    child: Child,
    url: String,
    _root: tempfile::TempDir,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(fabric: &str) -> Serve {
    let root = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["serve", "--listen", "127.0.0.1:0", "--fabric", fabric])
        .arg("--root")
        .arg(root.path())
        .args(["--access-key", ACCESS, "--secret-key", SECRET])
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("serve printed {line:?}"))
        .to_owned();
    Serve {
        child,
        url,
        _root: root,
    }
}

fn pattern(n: u64) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

fn batch(soft: bool, ops: u64) {
    let label = if soft { "soft" } else { "http" };
    let server = serve(if soft { "soft" } else { "none" });
    let data = pattern(OBJECT);
    let rss_before = status("VmRSS");
    let mut b = Engine::builder()
        .endpoint_url(&server.url)
        .credentials(Credentials::new(ACCESS, SECRET))
        .region("us-east-1")
        .placement(Placement::Workers(1));
    b = if soft {
        b.fabric(Fabric::Soft).dialect(Dialect::RcPersistent)
    } else {
        b.fabric(Fabric::Http)
    };
    let engine = b.build().unwrap();
    let buf = engine
        .register_host(
            (DEPTH * RANGE).max(OBJECT) as usize,
            RegisterOptions::pageable(),
        )
        .unwrap();
    let registered = (DEPTH * RANGE).max(OBJECT);
    let mut q = engine.queue(DEPTH as u32 * 2).unwrap();
    // The bucket and the object (stored through the engine too).
    let mk = Command::new(env!("CARGO_BIN_EXE_hipobj"))
        .args(["mb", "s3://rss"])
        .env_clear()
        .env("HOME", "/nonexistent-home-for-tests")
        .env("AWS_ACCESS_KEY_ID", ACCESS)
        .env("AWS_SECRET_ACCESS_KEY", SECRET)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", &server.url)
        .output()
        .unwrap();
    assert!(
        mk.status.success(),
        "{}",
        String::from_utf8_lossy(&mk.stderr)
    );
    let obj = engine.object("rss", "src.bin").unwrap();
    engine.copy_in(buf, 0, &data).unwrap();
    q.push(&Put::new(obj, BufSlice::new(buf, 0, OBJECT)).build())
        .unwrap();
    assert_eq!(q.wait(1, Some(std::time::Duration::from_secs(60))), 1);
    let c = q.completion().next().unwrap();
    assert!(c.is_ok(), "PUT {c:?}");

    let range_at = |i: u64| (i.wrapping_mul(7919) * 512) % (OBJECT - RANGE);
    let want_path = if soft {
        DataPath::RdmaSoft
    } else {
        DataPath::Http
    };
    let mut free: Vec<u64> = (0..DEPTH).collect();
    let (mut sent, mut done, mut checked) = (0u64, 0u64, 0u64);
    let mut rss_warm = 0;
    let mut samples = Vec::new();
    let t = Instant::now();
    while done < ops {
        while sent < ops
            && let Some(slot) = free.pop()
        {
            let sqe = RangeGet::new(obj, range_at(sent), BufSlice::new(buf, slot * RANGE, RANGE))
                .user_data(sent << 8 | slot)
                .build();
            q.push(&sqe).unwrap();
            sent += 1;
        }
        assert!(
            q.wait(1, Some(std::time::Duration::from_secs(60))) >= 1,
            "{label}: no completion within 60 s"
        );
        let mut finished = Vec::new();
        for c in q.completion() {
            assert!(
                c.is_ok(),
                "{label}: op {} failed: {c:?}",
                c.user_data() >> 8
            );
            assert_eq!(c.bytes(), RANGE, "{label}: {c:?}");
            assert_eq!(c.path(), Some(want_path), "{label}: {c:?}");
            finished.push(c.user_data());
        }
        for ud in finished {
            let (i, slot) = (ud >> 8, ud & 0xff);
            // Every 97th range is compared with the source, byte for byte.
            if i % 97 == 0 {
                let got = engine.read(buf, slot * RANGE, RANGE).unwrap().to_vec();
                let at = range_at(i) as usize;
                assert!(
                    got == data[at..at + RANGE as usize],
                    "{label}: range {i} differs"
                );
                checked += 1;
            }
            free.push(slot);
            done += 1;
            if done == WARMUP.min(ops / 2) {
                rss_warm = status("VmRSS");
            }
            if done % (ops / 10).max(1) == 0 {
                samples.push(status("VmRSS") / KIB);
                println!(
                    "RSS {label} progress: {done} ops, {:.0} s, VmRSS {} KiB",
                    t.elapsed().as_secs_f64(),
                    status("VmRSS") / KIB
                );
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let (rss_end, hwm) = (status("VmRSS"), status("VmHWM"));
    let conns = DEPTH.min(CONNECTIONS);
    let bound = registered + conns * (READ_BUFFER + CONN_STATE) + DEPTH * OP_STATE + ENGINE_FIXED;
    println!(
        "RSS {label}: {ops} range-gets of {RANGE} B, depth {DEPTH}, {:.0} ops/s, {checked} compared; \
         RSS before engine {} KiB, after warm-up {} KiB, end {} KiB, peak (VmHWM) {} KiB; \
         peak above start {} KiB (bound {} KiB); growth after warm-up {} KiB (bound {} KiB); \
         RSS KiB at each tenth: {samples:?}",
        ops as f64 / secs,
        rss_before / KIB,
        rss_warm / KIB,
        rss_end / KIB,
        hwm / KIB,
        hwm.saturating_sub(rss_before) / KIB,
        bound / KIB,
        rss_end.saturating_sub(rss_warm) as i64 / KIB as i64,
        LEAK_SLACK / KIB,
    );
    assert!(
        hwm.saturating_sub(rss_before) <= bound,
        "{label}: peak RSS {} KiB above the start, bound {} KiB",
        hwm.saturating_sub(rss_before) / KIB,
        bound / KIB
    );
    assert!(
        rss_end.saturating_sub(rss_warm) <= LEAK_SLACK,
        "{label}: RSS grew {} KiB after the warm-up (bound {} KiB)",
        rss_end.saturating_sub(rss_warm) / KIB,
        LEAK_SLACK / KIB
    );
}

/// Both fabrics one after the other in one test (tests of one binary share the process, so
/// two batches at once would mix their RSS); the peak is reset before each batch
/// (`/proc/self/clear_refs` ← 5).
fn both(ops: u64) {
    for soft in [false, true] {
        std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM");
        batch(soft, ops);
    }
}

#[test]
fn range_gets_25k_per_fabric_bounded_rss() {
    both(25_000);
}

#[test]
#[ignore = "1,000,000 ops per fabric take minutes here; run by benches/scripts/range-get-rss.sh"]
fn range_gets_1m_bounded_rss() {
    both(1_000_000);
}
