//! The queue's completion-readiness fd (`Queue: AsFd`), watched with plain epoll against the
//! real gateway on 127.0.0.1: readable after completions and not before, silent while not
//! armed, no lost wakeup over 10,000 operations, readable when the engine shuts down — and
//! the engine pulls in tokio only with its `tokio` feature.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use engine::opcode::{Nop, RangeGet};
use engine::{BufSlice, Engine, Fabric, Queue, RegisterOptions};
use raw::call;
use rig::{WAIT, pattern};

/// One epoll instance watching one fd for input.
struct Epoll {
    ep: OwnedFd,
}

impl Epoll {
    fn watching(fd: RawFd) -> Self {
        // SAFETY: epoll_create1 takes no pointers.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(
            raw >= 0,
            "epoll_create1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `raw` is a new fd owned by nothing else.
        let ep = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        // SAFETY: `ev` is a valid epoll_event borrowed for the call; both fds are open.
        let rc = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &raw mut ev) };
        assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
        Self { ep }
    }

    /// Whether the fd is readable within `timeout` (level-triggered).
    fn readable(&self, timeout: Duration) -> bool {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        loop {
            // SAFETY: room for one event, exclusively borrowed for the call.
            let n = unsafe { libc::epoll_wait(self.ep.as_raw_fd(), &raw mut ev, 1, ms) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
            return n == 1;
        }
    }
}

const OBJECT_LEN: usize = 64 * 1024;

/// A gateway over a temp dir holding `async/obj` ([`OBJECT_LEN`] bytes of pattern 9).
fn gateway_with_object() -> (tempfile::TempDir, hipobj_gateway::RunningGateway, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let addr = gw.local_addr();
    assert_eq!(call(addr, "PUT", "/async", "", &[], b"").status(), 200);
    let data = pattern(OBJECT_LEN, 9);
    let r = call(addr, "PUT", "/async/obj", "", &[], &data);
    assert_eq!(r.status(), 200, "{}", r.text());
    (dir, gw, data)
}

fn http_engine(gw: &hipobj_gateway::RunningGateway) -> Engine {
    rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Http)
        .build()
        .unwrap()
}

fn reap_all(q: &mut Queue, seen: &mut Vec<u64>) {
    for cqe in q.completion() {
        assert!(
            cqe.is_ok(),
            "op {} failed: {:?}",
            cqe.user_data(),
            cqe.into_result()
        );
        seen.push(cqe.user_data());
    }
}

#[test]
fn fd_becomes_readable_after_completions_and_not_before() {
    let (_dir, gw, data) = gateway_with_object();
    let engine = http_engine(&gw);
    let obj = engine.object("async", "obj").unwrap();
    let buf = engine
        .register_host(8192, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    let ep = Epoll::watching(q.as_raw_fd());

    // Armed, nothing in flight: not readable.
    assert!(q.arm_completion_fd());
    assert!(
        !ep.readable(Duration::from_millis(200)),
        "readable with nothing posted"
    );

    // One range-get: readable once its completion is posted, and the completion is there.
    q.push(
        &RangeGet::new(obj, 100, BufSlice::new(buf, 0, 4096))
            .user_data(1)
            .build(),
    )
    .unwrap();
    assert!(ep.readable(WAIT), "no readiness within {WAIT:?}");
    q.clear_completion_fd();
    let got: Vec<_> = q.completion().collect();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].user_data(), got[0].into_result()), (1, Ok(4096)));
    assert_eq!(&engine.read(buf, 0, 4096).unwrap()[..], &data[100..4196]);
    assert!(!ep.readable(Duration::ZERO), "cleared fd still readable");
    let writes = q.completion_fd_writes();
    assert!(writes >= 1);

    // Not armed: completions are posted without a single write to the fd.
    for i in 0..4u64 {
        q.push(
            &RangeGet::new(obj, i * 1000, BufSlice::new(buf, 4096, 4096))
                .user_data(10 + i)
                .build(),
        )
        .unwrap();
        assert_eq!(q.wait(1, Some(WAIT)), 1);
        assert_eq!(q.completion().count(), 1);
    }
    assert!(
        !ep.readable(Duration::from_millis(100)),
        "readable while not armed"
    );
    assert_eq!(
        q.completion_fd_writes(),
        writes,
        "the worker wrote an unarmed fd"
    );

    // Completions already ready: arming refuses (reap instead of waiting).
    q.push(&Nop::new().user_data(99).build()).unwrap();
    assert_eq!(q.wait(1, Some(WAIT)), 1);
    assert!(
        !q.arm_completion_fd(),
        "armed although a completion was ready"
    );
    assert_eq!(q.completion().next().map(|c| c.user_data()), Some(99));
}

/// The waiter thread owns the queue and sleeps only in epoll, following the documented
/// protocol; a lost wakeup shows as a 10 s epoll timeout with operations still in flight.
#[test]
fn no_lost_wakeup_over_10000_ops() {
    const OPS: u64 = 10_000;
    let (_dir, gw, data) = gateway_with_object();
    let engine = http_engine(&gw);
    let obj = engine.object("async", "obj").unwrap();
    let buf = engine
        .register_host(64 * 512, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(64).unwrap();
    let started = Instant::now();
    let (seen, waits, timeouts, writes) = std::thread::scope(|s| {
        s.spawn(|| {
            let ep = Epoll::watching(q.as_raw_fd());
            let mut seen = Vec::with_capacity(OPS as usize);
            let (mut next, mut waits, mut timeouts) = (0u64, 0u64, 0u64);
            while (seen.len() as u64) < OPS {
                // A window of 1..=8 entries: every fourth a 512-byte range-get over HTTP,
                // the rest Nops (completed by the worker on the turn it takes them, the
                // tightest race with the arm below).
                let window = (next % 8 + 1).min(OPS - next);
                let mut sq = q.submission();
                for _ in 0..window {
                    let sqe = if next % 4 == 0 {
                        let slot = (next / 4) % 64 * 512;
                        RangeGet::new(obj, next % 1000, BufSlice::new(buf, slot, 512))
                            .user_data(next)
                            .build()
                    } else {
                        Nop::new().user_data(next).build()
                    };
                    sq.push(&sqe).unwrap();
                    next += 1;
                }
                drop(sq);
                let target = next as usize;
                loop {
                    reap_all(&mut q, &mut seen);
                    if seen.len() >= target {
                        break;
                    }
                    // The application's own work between reaping and waiting (0-40 µs):
                    // completions posted meanwhile must be caught by the arm's re-check.
                    let work = Instant::now();
                    while work.elapsed() < Duration::from_micros(next % 41) {
                        std::hint::spin_loop();
                    }
                    if !q.arm_completion_fd() {
                        continue;
                    }
                    waits += 1;
                    if !ep.readable(Duration::from_secs(10)) {
                        timeouts += 1;
                        eprintln!("lost wakeup: {} of {target} reaped", seen.len());
                    }
                    q.clear_completion_fd();
                }
            }
            (seen, waits, timeouts, q.completion_fd_writes())
        })
        .join()
        .unwrap()
    });
    let took = started.elapsed();
    eprintln!(
        "{OPS} ops in {took:?}: {waits} epoll waits, {writes} eventfd writes, {timeouts} timeouts"
    );
    assert_eq!(timeouts, 0, "lost wakeups");
    let unique: HashSet<u64> = seen.iter().copied().collect();
    assert_eq!(
        unique.len(),
        OPS as usize,
        "duplicate or missing completions"
    );
    assert_eq!(unique, (0..OPS).collect());
    // At most one write per published batch, and a batch holds at least one completion.
    assert!(writes <= OPS, "{writes} writes for {OPS} completions");
    // The last range-gets' bytes landed where asked.
    let last = (OPS - 1) / 4 * 4;
    let slot = (last / 4) % 64 * 512;
    let off = (last % 1000) as usize;
    assert_eq!(
        &engine.read(buf, slot, 512).unwrap()[..],
        &data[off..off + 512]
    );
}

#[test]
fn engine_drop_makes_an_armed_fd_readable() {
    let (_dir, gw, _) = gateway_with_object();
    let engine = http_engine(&gw);
    let mut q = engine.queue(4).unwrap();
    let ep = Epoll::watching(q.as_raw_fd());
    assert!(q.arm_completion_fd());
    let dropper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        drop(engine);
    });
    let t = Instant::now();
    assert!(
        ep.readable(Duration::from_secs(30)),
        "shutdown did not signal the fd"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    dropper.join().unwrap();
    q.clear_completion_fd();
    assert!(q.is_closed());
    assert!(!q.arm_completion_fd(), "armed on a closed queue");
}

/// `tokio` is an optional dependency: the default build of the engine does not link it
/// (the assertion on the feature build shows that the probe can see it).
#[test]
fn tokio_is_linked_only_with_the_tokio_feature() {
    let tree = |features: &[&str]| -> String {
        let out = std::process::Command::new(env!("CARGO"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "tree",
                "-p",
                "engine",
                "-e",
                "normal",
                "--prefix",
                "none",
                "--offline",
            ])
            .args(features)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let has_tokio = |t: &str| t.lines().any(|l| l.starts_with("tokio v"));
    assert!(!has_tokio(&tree(&[])), "default features pull in tokio");
    assert!(!has_tokio(&tree(&["--no-default-features"])));
    assert!(has_tokio(&tree(&["--features", "tokio"])));
}
