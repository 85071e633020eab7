//! Per-operation timestamps (`QueueOptions::timestamps`) against the real gateway on
//! 127.0.0.1: each completion's `OpTimes` is its own (submitted inside the window in which the
//! test pushed that entry), ordered submitted ≤ started ≤ first byte ≤ completed ≤ reaped, over
//! HTTP and over the soft fabric with `rc-persistent` (and `hipobj-rc-v2`); a server that answers late shows up as
//! wire time, and entries that wait for a busy queue show up as queue time; a queue without
//! timestamps says so. With the `tokio` feature, `AsyncQueue` hands out the same records.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use engine::opcode::{Cancel, Head, RangeGet};
use engine::{
    BufHandle, BufSlice, Cqe, DataPath, Dialect, Engine, ErrorCode, Fabric, OpTimes, QueueOptions,
    RegisterOptions, TimestampsOff, monotonic_ns,
};
use raw::call;
use rig::{WAIT, pattern};

const OBJECT_LEN: usize = 64 * 1024;
const SLOT: u64 = 4096;

fn gateway_with_object() -> (tempfile::TempDir, hipobj_gateway::RunningGateway, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let addr = gw.local_addr();
    assert_eq!(call(addr, "PUT", "/times", "", &[], b"").status(), 200);
    let data = pattern(OBJECT_LEN, 9);
    let r = call(addr, "PUT", "/times/obj", "", &[], &data);
    assert_eq!(r.status(), 200, "{}", r.text());
    (dir, gw, data)
}

fn engine_at(addr: SocketAddr, fabric: Fabric, dialect: Dialect) -> Engine {
    rig::engine_builder(addr)
        .fabric(fabric)
        .dialect(dialect)
        .build()
        .unwrap()
}

fn timed(engine: &Engine, depth: u32) -> engine::Queue {
    let q = engine
        .queue_with(QueueOptions::new(depth).timestamps(true))
        .unwrap();
    assert!(q.timestamps());
    q
}

/// The order every record must keep, and that it was produced before `reaped`.
fn assert_ordered(what: &str, t: &OpTimes, reaped: u64) {
    let fb = t.first_byte_ns().unwrap_or(t.started_ns());
    assert!(
        t.submitted_ns() <= t.started_ns()
            && t.started_ns() <= fb
            && fb <= t.completed_ns()
            && t.completed_ns() <= reaped,
        "{what}: out of order {t:?} (reaped at {reaped})"
    );
    if let Some(fb) = t.first_byte_ns() {
        assert!(
            fb >= t.started_ns(),
            "{what}: first byte before start {t:?}"
        );
    }
}

/// Waits for and reaps `n` completions with their times; each pair comes with the clock
/// reading taken right after it was reaped.
fn reap_timed(q: &mut engine::Queue, n: usize) -> Vec<(Cqe, OpTimes, u64)> {
    let end = Instant::now() + WAIT;
    let mut out = Vec::new();
    let mut batch = [(Cqe::default(), OpTimes::default()); 8];
    while out.len() < n {
        assert!(Instant::now() < end, "{} of {n} completions", out.len());
        q.wait(1, Some(Duration::from_millis(200)));
        let k = q.reap_timed(&mut batch).unwrap();
        let reaped = monotonic_ns();
        out.extend(batch[..k].iter().map(|&(c, t)| (c, t, reaped)));
    }
    out
}

/// Pushes `sqe` and returns the clock window around the push (the entry is published inside
/// it, so its `submitted` must fall inside it).
fn push_in_window(q: &mut engine::Queue, sqe: &engine::Sqe) -> (u64, u64) {
    let before = monotonic_ns();
    q.push(sqe).unwrap();
    (before, monotonic_ns())
}

#[derive(Debug, Clone, Copy)]
struct Path {
    name: &'static str,
    fabric: Fabric,
    dialect: Dialect,
    moves_over: DataPath,
    /// Whether a data op's answer comes over the HTTP connection (so its first byte is known):
    /// hipobj-rc-v2 answers on its own exchange thread, and its records say `None`.
    first_byte: bool,
}

const PATHS: [Path; 3] = [
    Path {
        name: "http",
        fabric: Fabric::Http,
        dialect: Dialect::Http,
        moves_over: DataPath::Http,
        first_byte: true,
    },
    Path {
        name: "soft/rc-persistent",
        fabric: Fabric::Soft,
        dialect: Dialect::RcPersistent,
        moves_over: DataPath::RdmaSoft,
        first_byte: true,
    },
    Path {
        name: "soft/hipobj-rc-v2",
        fabric: Fabric::Soft,
        dialect: Dialect::RcV2,
        moves_over: DataPath::RdmaSoft,
        first_byte: false,
    },
];

/// Each entry is pushed in its own clock window (3 ms apart, so windows never overlap):
/// RangeGets, a HEAD, an entry the engine rejects (bad buffer handle) and a Cancel of a tag
/// nobody used. Every completion's record must fall in its own entry's window and keep the
/// order; answers over the HTTP connection carry a first byte, the rejected and cancel entries
/// none (nor hipobj-rc-v2's data ops, whose answers come over their own exchange).
#[test]
fn each_completion_carries_its_own_ordered_times_on_every_path() {
    let (_dir, gw, data) = gateway_with_object();
    for path in PATHS {
        let engine = engine_at(gw.local_addr(), path.fabric, path.dialect);
        let obj = engine.object("times", "obj").unwrap();
        let buf = engine
            .register_host(8 * SLOT as usize, RegisterOptions::pageable())
            .unwrap();
        let mut q = timed(&engine, 16);
        let mut windows = std::collections::HashMap::new();
        for i in 0..6u64 {
            let sqe = RangeGet::new(obj, i * 1000, BufSlice::new(buf, i * SLOT, SLOT))
                .user_data(i)
                .build();
            windows.insert(i, push_in_window(&mut q, &sqe));
            std::thread::sleep(Duration::from_millis(3));
        }
        let head = Head::new(obj).user_data(100).build();
        windows.insert(100, push_in_window(&mut q, &head));
        std::thread::sleep(Duration::from_millis(3));
        let bad = RangeGet::new(obj, 0, BufSlice::new(BufHandle(999_999), 0, SLOT))
            .user_data(101)
            .build();
        windows.insert(101, push_in_window(&mut q, &bad));
        std::thread::sleep(Duration::from_millis(3));
        let cancel = Cancel::new(12_345).user_data(102).build();
        windows.insert(102, push_in_window(&mut q, &cancel));

        let got = reap_timed(&mut q, windows.len());
        assert_eq!(got.len(), windows.len());
        for (cqe, t, reaped) in got {
            let ud = cqe.user_data();
            let what = format!("{} op {ud}", path.name);
            let (before, after) = windows.remove(&ud).unwrap_or_else(|| panic!("{what}: dup"));
            assert!(
                before <= t.submitted_ns() && t.submitted_ns() <= after,
                "{what}: submitted {} outside its push window {before}..={after}: \
                 the record belongs to another entry",
                t.submitted_ns()
            );
            assert_ordered(&what, &t, reaped);
            eprintln!(
                "{what}: queue {:?} ttfb {:?} service {:?}",
                t.queue_time(),
                t.time_to_first_byte(),
                t.service_time()
            );
            match ud {
                0..=5 => {
                    assert!(cqe.is_ok(), "{what}: {:?}", cqe.error_code());
                    assert_eq!(cqe.path(), Some(path.moves_over), "{what}");
                    let off = ud as usize * 1000;
                    assert!(
                        engine.read(buf, ud * SLOT, SLOT).unwrap()[..]
                            == data[off..off + SLOT as usize],
                        "{what}: wrong bytes"
                    );
                    assert_eq!(
                        t.first_byte_ns().is_some(),
                        path.first_byte,
                        "{what}: first byte {:?}",
                        t.first_byte_ns()
                    );
                }
                100 => {
                    // HEAD is plain HTTP on every dialect.
                    assert!(cqe.is_ok(), "{what}: {:?}", cqe.error_code());
                    assert!(t.first_byte_ns().is_some(), "{what}: no first byte");
                }
                101 => {
                    assert_eq!(cqe.error_code(), Some(ErrorCode::BadHandle), "{what}");
                    assert_eq!(t.first_byte_ns(), None, "{what}: never reached a server");
                }
                102 => {
                    assert_eq!(cqe.error_code(), Some(ErrorCode::NotFound), "{what}");
                    assert_eq!(t.first_byte_ns(), None, "{what}: never reached a server");
                }
                _ => panic!("{what}: unexpected tag"),
            }
        }
    }
}

/// A TCP relay in front of `upstream` that holds every response until `delay` after the last
/// request bytes it forwarded on that connection: a server that thinks for `delay`.
fn delaying_relay(upstream: SocketAddr, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { break };
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            let asked = Arc::new(Mutex::new(Instant::now()));
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let asked_in = Arc::clone(&asked);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = c_in.read(&mut buf) {
                    *asked_in.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s_out.shutdown(Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = s_in.read(&mut buf) {
                    let at = *asked.lock().unwrap_or_else(PoisonError::into_inner) + delay;
                    std::thread::sleep(at.saturating_duration_since(Instant::now()));
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(Shutdown::Both);
            });
        }
    });
    addr
}

/// Pushes `sqe`, retrying while the submission ring is full.
fn push_when_room(q: &mut engine::Queue, sqe: &engine::Sqe) {
    let end = Instant::now() + WAIT;
    loop {
        match q.push(sqe) {
            Ok(()) => return,
            Err(engine::PushError::Full { .. }) if Instant::now() < end => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("push: {e}"),
        }
    }
}

/// The server answers `DELAY` late. A queue of depth 1 (completion ring 2) lets the worker
/// take two operations (A, B); a third (C) waits in the submission ring until one of them
/// completes. A and B must show the delay as wire time (time to first byte ≥ `DELAY`) with
/// little queue time; C must show the wait as queue time (≥ `DELAY / 2`), start only after A
/// or B completed, and then pay the delay again as wire time.
#[test]
fn late_server_is_wire_time_and_a_busy_queue_is_queue_time() {
    const DELAY: Duration = Duration::from_millis(300);
    let (_dir, gw, _) = gateway_with_object();
    let relay = delaying_relay(gw.local_addr(), DELAY);
    let engine = engine_at(relay, Fabric::Http, Dialect::Http);
    let obj = engine.object("times", "obj").unwrap();
    let buf = engine
        .register_host(4 * SLOT as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = timed(&engine, 1);
    assert_eq!((q.sq_capacity(), q.cq_capacity()), (1, 2));
    for i in 0..3u64 {
        let sqe = RangeGet::new(obj, i * 100, BufSlice::new(buf, i * SLOT, SLOT))
            .user_data(i)
            .build();
        push_when_room(&mut q, &sqe);
    }
    let mut got = reap_timed(&mut q, 3);
    got.sort_by_key(|(c, _, _)| c.user_data());
    for (cqe, t, reaped) in &got {
        let what = format!("op {}", cqe.user_data());
        assert!(cqe.is_ok(), "{what}: {:?}", cqe.error_code());
        assert_ordered(&what, t, *reaped);
        eprintln!(
            "{what}: queue {:?} ttfb {:?} service {:?}",
            t.queue_time(),
            t.time_to_first_byte(),
            t.service_time()
        );
        let ttfb = t.time_to_first_byte().expect("first byte over HTTP");
        assert!(ttfb >= DELAY, "{what}: the late answer is wire time: {t:?}");
    }
    let (a, b, c) = (got[0].1, got[1].1, got[2].1);
    for (name, t) in [("A", a), ("B", b)] {
        assert!(
            t.queue_time() < DELAY / 2,
            "{name} was taken at once: {t:?}"
        );
    }
    assert!(
        c.started_ns() >= a.completed_ns().min(b.completed_ns()),
        "C started before the worker had room: {c:?} vs {a:?} {b:?}"
    );
    assert!(
        c.queue_time() >= DELAY / 2,
        "C waited for a busy queue: that is queue time: {c:?}"
    );
}

/// Without `timestamps(true)` the timed readers say so, and the queue works as before.
#[test]
fn a_queue_without_timestamps_says_so() {
    let (_dir, gw, _) = gateway_with_object();
    let engine = engine_at(gw.local_addr(), Fabric::Http, Dialect::Http);
    let obj = engine.object("times", "obj").unwrap();
    let mut q = engine.queue(4).unwrap();
    assert!(!q.timestamps());
    let cqe = rig::run_one(&mut q, Head::new(obj).user_data(5).build());
    assert!(cqe.is_ok());
    let mut out = [(Cqe::default(), OpTimes::default()); 1];
    assert_eq!(q.reap_timed(&mut out), Err(TimestampsOff));
    assert!(matches!(q.completion_timed(), Err(TimestampsOff)));
    // Explicitly off is the same.
    let q = engine
        .queue_with(QueueOptions::new(4).timestamps(false))
        .unwrap();
    assert!(!q.timestamps());
}

#[cfg(feature = "tokio")]
mod tokio_queue {
    use super::*;
    use engine::AsyncQueue;

    /// Forty futures on one timed `AsyncQueue` over soft `rc-persistent`: each resolves with
    /// its own result and an ordered record whose `submitted` lies inside the window in which
    /// its task submitted it; an untracked push comes back with its record through
    /// `next_completion_timed`; a queue without timestamps refuses both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn async_queue_hands_out_each_ops_own_times() {
        const TASKS: u64 = 40;
        let (_dir, gw, data) = gateway_with_object();
        let eng = Arc::new(engine_at(
            gw.local_addr(),
            Fabric::Soft,
            Dialect::RcPersistent,
        ));
        let obj = eng.object("times", "obj").unwrap();
        let buf = eng
            .register_host((TASKS * SLOT) as usize, RegisterOptions::pageable())
            .unwrap();
        let q = AsyncQueue::new(timed(&eng, 8)).unwrap();
        assert!(q.timestamps());
        let mut tasks = Vec::new();
        for i in 0..TASKS {
            let (q, eng, data) = (q.clone(), Arc::clone(&eng), data.clone());
            tasks.push(tokio::spawn(async move {
                let off = (i * 1531) % (OBJECT_LEN as u64 - SLOT);
                let sqe = RangeGet::new(obj, off, BufSlice::new(buf, i * SLOT, SLOT))
                    .user_data(500 + i)
                    .build();
                let before = monotonic_ns();
                let fut = q.submit_timed(sqe).unwrap();
                let (res, times) = fut.await;
                let reaped = monotonic_ns();
                assert_eq!(res, Ok(SLOT), "op {i}");
                let got = eng.read(buf, i * SLOT, SLOT).unwrap();
                assert!(
                    got[..] == data[off as usize..(off + SLOT) as usize],
                    "op {i}: wrong bytes"
                );
                let t = times.expect("a completed op has times");
                // The push may wait for ring space inside the future; the entry is
                // published no earlier than `before` and no later than its completion.
                assert!(t.submitted_ns() >= before, "op {i}: {t:?} before {before}");
                assert_ordered(&format!("async op {i}"), &t, reaped);
                assert!(t.first_byte_ns().is_some(), "op {i}: no first byte");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }

        let before = monotonic_ns();
        q.push(&Head::new(obj).user_data(7).build()).unwrap();
        let after = monotonic_ns();
        let (cqe, t) = tokio::time::timeout(WAIT, q.next_completion_timed().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cqe.user_data(), 7);
        assert!(cqe.is_ok());
        assert!(
            before <= t.submitted_ns() && t.submitted_ns() <= after,
            "{t:?}"
        );
        assert_ordered("untracked head", &t, monotonic_ns());

        let plain = AsyncQueue::new(eng.queue(4).unwrap()).unwrap();
        assert!(!plain.timestamps());
        assert!(matches!(
            plain.submit_timed(Head::new(obj).build()),
            Err(TimestampsOff)
        ));
        assert!(matches!(plain.next_completion_timed(), Err(TimestampsOff)));
    }
}
