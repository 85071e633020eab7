//! The daemon against a real S3 server (s3s-fs on 127.0.0.1): attach, batches, status,
//! isolation between clients, bad input, a client killed mid-batch, fairness, thread count.

#[path = "../../cli/tests/support/s3s_fs.rs"]
mod s3s_fs;

use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engine::attach::wire::{Reply, Request};
use engine::attach::{SeqPacket, SharedMemory};
use engine::opcode::{Put, RangeGet};
use engine::{
    BufHandle, BufSlice, Credentials, Engine, ErrorCode, Fabric, ObjectId, Placement,
    RegisterOptions, RetryPolicy,
};
use hipobj_daemon::{DaemonConfig, DaemonHandle};
use s3s_fs::S3sFs;

const OBJECT_LEN: usize = 1 << 20;

/// The tests count threads and time latencies: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

struct Node {
    _server: S3sFs,
    _dir: tempfile::TempDir,
    daemon: Option<DaemonHandle>,
    socket: PathBuf,
    data: Vec<u8>,
}

impl Node {
    fn start(max_in_flight: u32) -> Self {
        let server = S3sFs::start();
        server.create_bucket_dir("bucket");
        let data = pattern(OBJECT_LEN, 7);
        server.put_file("bucket", "obj", &data);
        let engine = Engine::builder()
            .in_process()
            .endpoint_url(server.endpoint_url())
            .credentials(Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY))
            .region("us-east-1")
            .placement(Placement::Workers(2))
            .fabric(Fabric::Http)
            .retry(RetryPolicy::new(
                3,
                Duration::from_millis(5),
                Duration::from_millis(50),
            ))
            .build()
            .expect("daemon engine");
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("hipobj.sock");
        let config = DaemonConfig {
            socket: socket.clone(),
            max_in_flight,
            ..DaemonConfig::default()
        };
        let listener = hipobj_daemon::listen(&config).expect("listen");
        let daemon = hipobj_daemon::spawn(engine, config, listener).expect("spawn");
        Self {
            _server: server,
            _dir: dir,
            daemon: Some(daemon),
            socket,
            data,
        }
    }

    fn attach(&self) -> Engine {
        attach(&self.socket)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(d) = self.daemon.take() {
            d.stop().expect("daemon loop ended cleanly");
        }
    }
}

fn attach(socket: &Path) -> Engine {
    Engine::connect(socket).expect("attach")
}

/// `ops` range-gets of `len` bytes at varying offsets through one queue, `depth` in flight;
/// every byte checked against `data`.
fn batch(e: &Engine, data: &[u8], ops: usize, len: u64, depth: usize) {
    let slots = depth as u64;
    let buf = e
        .register_host((slots * len) as usize, RegisterOptions::pageable())
        .unwrap();
    let obj = e.object("bucket", "obj").unwrap();
    let mut q = e.queue(depth as u32).unwrap();
    let offset_of = |i: u64| (i * 4099 * 7) % (data.len() as u64 - len);
    let mut next = 0u64;
    let mut done = 0usize;
    let mut free: Vec<u64> = (0..slots).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while done < ops {
        while (next as usize) < ops {
            let Some(slot) = free.pop() else { break };
            let sqe = RangeGet::new(obj, offset_of(next), BufSlice::new(buf, slot * len, len))
                .user_data(next << 16 | slot)
                .build();
            q.push(&sqe).unwrap();
            next += 1;
        }
        q.wait(1, Some(Duration::from_secs(10)));
        let cqes: Vec<_> = q.completion().collect();
        assert!(
            Instant::now() < deadline && !q.is_closed(),
            "batch stalled at {done}/{ops}"
        );
        for cqe in cqes {
            let (i, slot) = (cqe.user_data() >> 16, cqe.user_data() & 0xffff);
            assert_eq!(cqe.into_result().expect("range-get"), len);
            let mut got = vec![0u8; len as usize];
            e.copy_out(buf, slot * len, &mut got).unwrap();
            let off = offset_of(i) as usize;
            assert!(got == data[off..off + len as usize], "op {i}: wrong bytes");
            free.push(slot);
            done += 1;
        }
    }
    e.deregister(buf, Duration::from_secs(5)).unwrap();
}

fn status(node: &Node) -> Vec<engine::attach::wire::ClientStatus> {
    hipobj_daemon::query_status(&node.socket).expect("status")
}

#[test]
fn attached_engines_run_batches_and_show_in_status() {
    let _one = serial();
    let node = Node::start(64);
    let a = node.attach();
    let b = node.attach();
    assert!(a.is_attached());
    assert_eq!(a.workers().len(), 2, "the daemon's workers");
    std::thread::scope(|s| {
        s.spawn(|| batch(&a, &node.data, 400, 8192, 32));
        s.spawn(|| batch(&b, &node.data, 400, 8192, 32));
    });
    let keep = a.register_host(4096, RegisterOptions::pageable()).unwrap();
    let clients = status(&node);
    let me = std::process::id() as i32;
    let ours: Vec<_> = clients
        .iter()
        .filter(|c| c.pid == me && c.ops > 0)
        .collect();
    assert_eq!(ours.len(), 2, "{clients:?}");
    assert!(ours.iter().all(|c| c.ops == 400 && c.bytes == 400 * 8192));
    assert_eq!(ours.iter().map(|c| c.registrations).sum::<u32>(), 1);
    a.deregister(keep, Duration::from_secs(1)).unwrap();
    assert!(matches!(
        a.deregister(keep, Duration::from_secs(1)),
        Err(engine::EngineError::BadHandle(_))
    ));
}

/// An attached engine's host registration is the length asked for, not its memfd's whole
/// pages: reads and writes past it are refused as in a process's own engine.
#[test]
fn attached_host_buffers_are_bounded_by_their_registered_length() {
    let _one = serial();
    let node = Node::start(64);
    let e = node.attach();
    let buf = e.register_host(5000, RegisterOptions::pageable()).unwrap();
    e.copy_in(buf, 4990, &[7; 10]).unwrap();
    assert_eq!(&e.read(buf, 4990, 10).unwrap()[..], &[7; 10]);
    for (offset, len) in [(4991u64, 10usize), (5000, 1), (u64::MAX, 1)] {
        assert!(matches!(
            e.copy_out(buf, offset, &mut vec![0; len]),
            Err(engine::EngineError::OutOfBounds { size: 5000, .. })
        ));
        assert!(matches!(
            e.read(buf, offset, len as u64),
            Err(engine::EngineError::OutOfBounds { .. })
        ));
    }
    assert!(matches!(
        e.copy_in(buf, 4096, &[0; 1000]),
        Err(engine::EngineError::OutOfBounds { .. })
    ));
    assert!(matches!(
        e.read(buf, 0, u64::MAX),
        Err(engine::EngineError::OutOfBounds { .. })
    ));
}

#[test]
fn a_put_and_a_get_round_trip_through_the_daemon() {
    let _one = serial();
    let node = Node::start(64);
    let e = node.attach();
    let payload = pattern(100_000, 99);
    let src = e
        .register_host(payload.len(), RegisterOptions::pageable())
        .unwrap();
    e.copy_in(src, 0, &payload).unwrap();
    let obj = e.object("bucket", "written").unwrap();
    let mut q = e.queue(8).unwrap();
    q.push(
        &Put::new(obj, BufSlice::new(src, 0, payload.len() as u64))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.wait(1, Some(Duration::from_secs(30)));
    let c = q.completion().next().expect("put completion");
    assert!(c.into_result().is_ok());
    let dst = e
        .register_host(payload.len(), RegisterOptions::pageable())
        .unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(dst, 0, payload.len() as u64))
            .user_data(2)
            .build(),
    )
    .unwrap();
    q.wait(1, Some(Duration::from_secs(30)));
    let c = q.completion().next().expect("get completion");
    assert_eq!(c.into_result().unwrap(), payload.len() as u64);
    assert!(e.read(dst, 0, payload.len() as u64).unwrap()[..] == payload[..]);
}

#[test]
fn a_client_cannot_name_another_clients_buffers_or_objects() {
    let _one = serial();
    let node = Node::start(64);
    let a = node.attach();
    let b = node.attach();
    let secret = a.register_host(8192, RegisterOptions::pageable()).unwrap();
    a.copy_in(secret, 0, &[0xAB; 8192]).unwrap();
    let a_obj = a.object("bucket", "obj").unwrap();
    // B has interned and registered nothing: A's ids mean nothing in B's tables.
    let mut q = b.queue(8).unwrap();
    let target = b.object("bucket", "leak").unwrap();
    q.push(
        &Put::new(target, BufSlice::new(secret, 0, 8192))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.push(
        &RangeGet::new(ObjectId(a_obj.0 + 1), 0, BufSlice::new(BufHandle(0), 0, 8))
            .user_data(2)
            .build(),
    )
    .unwrap();
    let mut seen = 0;
    while seen < 2 {
        q.wait(1, Some(Duration::from_secs(10)));
        for c in q.completion() {
            assert_eq!(c.error_code(), Some(ErrorCode::BadHandle), "{c:?}");
            seen += 1;
        }
    }
    // B's own buffer 0 is its own: a GET lands there and A's bytes stay as they were.
    let mine = b.register_host(8192, RegisterOptions::pageable()).unwrap();
    assert_eq!(mine, secret, "ids are per client, so they coincide");
    let obj = b.object("bucket", "obj").unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(mine, 0, 8192))
            .user_data(3)
            .build(),
    )
    .unwrap();
    q.wait(1, Some(Duration::from_secs(10)));
    assert!(q.completion().next().unwrap().into_result().is_ok());
    assert!(b.read(mine, 0, 8192).unwrap()[..] == node.data[..8192]);
    assert!(a.read(secret, 0, 8192).unwrap().iter().all(|&x| x == 0xAB));
}

/// Sends raw bytes (and descriptors) as a client would and returns whether the daemon kept
/// the connection (answered) or dropped it.
fn raw_exchange(
    socket: &Path,
    hello: bool,
    bytes: &[u8],
    fds: &[std::os::fd::BorrowedFd<'_>],
) -> bool {
    let conn = SeqPacket::connect(socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 65536];
    if hello {
        conn.send(&Request::Hello { name: "raw".into() }.encode(), &[])
            .unwrap();
        let (n, _) = conn.recv(&mut buf).unwrap();
        assert!(matches!(
            Reply::decode(&buf[..n]),
            Ok(Reply::Welcome { .. })
        ));
    }
    conn.send(bytes, fds).unwrap();
    match conn.recv(&mut buf) {
        Ok((0, _)) => false,
        Ok((n, _)) => {
            assert!(Reply::decode(&buf[..n]).is_ok());
            true
        }
        Err(_) => false,
    }
}

#[test]
fn malformed_messages_and_foreign_descriptors_drop_only_that_client() {
    let _one = serial();
    let node = Node::start(64);
    let good = node.attach();
    let s = &node.socket;
    // Garbage, a request before Hello, a truncated request.
    assert!(!raw_exchange(s, false, b"GET / HTTP/1.1\r\n\r\n", &[]));
    assert!(!raw_exchange(s, false, &Request::Status.encode(), &[]));
    let reg = Request::RegisterHost { len: 4096 }.encode();
    assert!(!raw_exchange(s, true, &reg[..reg.len() - 1], &[]));
    // A registration without its descriptor, and one whose descriptor is not a memfd.
    assert!(!raw_exchange(s, true, &reg, &[]));
    let file = tempfile::tempfile().unwrap();
    file.set_len(4096).unwrap();
    assert!(!raw_exchange(s, true, &reg, &[file.as_fd()]));
    // A memfd shorter than claimed.
    let small = SharedMemory::create("t", 4096).unwrap();
    let big = Request::RegisterHost { len: 1 << 20 }.encode();
    assert!(!raw_exchange(s, true, &big, &[small.fd()]));
    // A descriptor on a request that takes none.
    assert!(!raw_exchange(
        s,
        true,
        &Request::Status.encode(),
        &[small.fd()]
    ));
    // Refusals a client can recover from are answers, not drops.
    let bad_queue = Request::OpenQueue {
        sq_entries: 3,
        cq_entries: 8,
        timestamps: false,
    };
    assert!(raw_exchange(s, true, &bad_queue.encode(), &[]));
    let unknown = Request::Deregister {
        buf: 77,
        timeout_ms: 0,
    };
    assert!(raw_exchange(s, true, &unknown.encode(), &[]));
    // The daemon and its other client are unaffected.
    batch(&good, &node.data, 50, 4096, 8);
    let others: Vec<_> = status(&node)
        .into_iter()
        .filter(|c| c.name == "raw")
        .collect();
    assert!(
        others.is_empty(),
        "dropped clients still listed: {others:?}"
    );
}

/// The child side of `a_client_killed_mid_batch_leaves_the_daemon_and_others_working`.
fn child_batch(socket: &Path) -> ! {
    let e = attach(socket);
    let buf = e
        .register_host(64 * 4096, RegisterOptions::pageable())
        .unwrap();
    let obj = e.object("bucket", "obj").unwrap();
    let mut q = e.queue(64).unwrap();
    let mut announced = false;
    for i in 0..10_000u64 {
        loop {
            let sqe = RangeGet::new(
                obj,
                (i * 4096) % (OBJECT_LEN as u64 - 4096),
                BufSlice::new(buf, (i % 64) * 4096, 4096),
            )
            .user_data(i)
            .build();
            if q.push(&sqe).is_ok() {
                break;
            }
            q.wait(1, Some(Duration::from_secs(5)));
            let n = q.completion().count();
            if n > 0 && !announced {
                println!("child-running");
                announced = true;
            }
        }
    }
    // Not reached in the test: the parent kills us first.
    std::thread::sleep(Duration::from_secs(60));
    std::process::exit(0)
}

#[test]
fn a_client_killed_mid_batch_leaves_the_daemon_and_others_working() {
    let _one = serial();
    if let Ok(socket) = std::env::var("HIPOBJ_DAEMON_TEST_CHILD") {
        child_batch(Path::new(&socket));
    }
    let node = Node::start(64);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_client_killed_mid_batch_leaves_the_daemon_and_others_working",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HIPOBJ_DAEMON_TEST_CHILD", &node.socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines.any(|l| l.is_ok_and(|l| l.contains("child-running")));
    assert!(started, "the child never ran its batch");
    let before = status(&node);
    let c = before
        .iter()
        .find(|c| c.pid == pid)
        .expect("child attached");
    assert_eq!(c.registrations, 1);
    assert!(c.in_flight > 0, "{c:?}");
    // SIGKILL: the child gets no chance to close anything.
    child.kill().unwrap();
    child.wait().unwrap();
    // Another client's batch completes meanwhile.
    let other = node.attach();
    batch(&other, &node.data, 300, 4096, 16);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = status(&node);
        if now.iter().all(|c| c.pid != pid) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dead client is still listed: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn attaching_clients_adds_no_threads() {
    let _one = serial();
    let node = Node::start(64);
    let first = node.attach();
    let _q = first.queue(8).unwrap();
    let base = threads();
    let clients: Vec<Engine> = (0..8).map(|_| node.attach()).collect();
    let queues: Vec<_> = clients.iter().map(|e| e.queue(16).unwrap()).collect();
    assert_eq!(
        threads(),
        base,
        "attached engines or their queues started threads"
    );
    drop(queues);
    drop(clients);
}

/// Median of one client's single 4 KiB range-get, `n` times.
fn single_get_latency(e: &Engine, n: usize) -> Duration {
    let buf = e.register_host(4096, RegisterOptions::pageable()).unwrap();
    let obj = e.object("bucket", "obj").unwrap();
    let mut q = e.queue(4).unwrap();
    let mut times = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        q.push(
            &RangeGet::new(obj, 4096 * (i % 64), BufSlice::new(buf, 0, 4096))
                .user_data(i)
                .build(),
        )
        .unwrap();
        q.wait(1, Some(Duration::from_secs(10)));
        let c = q.completion().next().expect("completion");
        assert!(c.into_result().is_ok());
        times.push(t.elapsed());
    }
    e.deregister(buf, Duration::from_secs(1)).unwrap();
    times.sort();
    times[n / 2]
}

/// A client's single GETs while another client runs a 10,000-op batch through the same
/// daemon; `None` when the batch ended before the measurement did (too fast to measure).
fn latency_beside_batch(max_in_flight: u32) -> (Duration, Option<Duration>) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let node = Node::start(max_in_flight);
    let small = node.attach();
    let idle = single_get_latency(&small, 30);
    let big = node.attach();
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let loaded = std::thread::scope(|s| {
        let worker = s.spawn(|| {
            // 10,000 range-gets of 16 KiB, the ring kept full.
            let buf = big
                .register_host(256 * 16384, RegisterOptions::pageable())
                .unwrap();
            let obj = big.object("bucket", "obj").unwrap();
            let mut q = big.queue(256).unwrap();
            let mut sent = 0u64;
            while done.load(Ordering::Relaxed) < 10_000 && !stop.load(Ordering::Relaxed) {
                while sent < 10_000 && sent - done.load(Ordering::Relaxed) < 256 {
                    let at = (sent * 16384) % (OBJECT_LEN as u64 - 16384);
                    let slot = BufSlice::new(buf, (sent % 256) * 16384, 16384);
                    if q.push(&RangeGet::new(obj, at, slot).user_data(sent).build())
                        .is_err()
                    {
                        break;
                    }
                    sent += 1;
                }
                q.wait(1, Some(Duration::from_secs(10)));
                done.fetch_add(q.completion().count() as u64, Ordering::Relaxed);
            }
        });
        while done.load(Ordering::Relaxed) < 256 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let loaded = single_get_latency(&small, 30);
        let still_running = done.load(Ordering::Relaxed) < 10_000;
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        still_running.then_some(loaded)
    });
    (idle, loaded)
}

#[test]
fn a_single_get_is_not_starved_by_another_clients_big_batch() {
    let _one = serial();
    let (idle, loaded) = latency_beside_batch(8);
    eprintln!("single 4 KiB GET median: idle {idle:?}, beside a 10,000-op batch {loaded:?}");
    let loaded = loaded.expect("the batch ended before the single GETs did");
    assert!(
        loaded <= idle * 3,
        "a single GET took {loaded:?} beside another client's batch, {idle:?} idle"
    );
}
