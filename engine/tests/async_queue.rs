//! `AsyncQueue` (feature `tokio`) against the real gateway on 127.0.0.1: many futures on one
//! queue resolve with their own results, untracked pushes come through `next_completion`,
//! dropping the engine resolves pending futures with `Shutdown`, and the tokio_server
//! example serves concurrent clients.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
#[path = "../examples/tokio_server/serve.rs"]
mod serve;

use std::sync::Arc;
use std::time::Duration;

use engine::opcode::{Nop, RangeGet};
use engine::{AsyncError, AsyncQueue, BufSlice, Engine, ErrorCode, Fabric, RegisterOptions};
use raw::call;
use rig::{WAIT, pattern};
use tokio::io::BufReader;

const OBJECT_LEN: usize = 256 * 1024;

fn gateway_with_object() -> (tempfile::TempDir, hipobj_gateway::RunningGateway, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let addr = gw.local_addr();
    assert_eq!(call(addr, "PUT", "/async", "", &[], b"").status(), 200);
    let data = pattern(OBJECT_LEN, 5);
    let r = call(addr, "PUT", "/async/obj", "", &[], &data);
    assert_eq!(r.status(), 200, "{}", r.text());
    (dir, gw, data)
}

fn engine(gw: &hipobj_gateway::RunningGateway, fabric: Fabric, workers: usize) -> Engine {
    rig::engine_builder(gw.local_addr())
        .fabric(fabric)
        .placement(engine::Placement::Workers(workers))
        .build()
        .unwrap()
}

/// 400 tasks share one queue of depth 16 (so submissions also wait for ring space); each op
/// has its own range, slot and tag, every tenth names a missing key. Each future must resolve
/// to its own op: the right byte count and bytes, or a NotFound naming its own tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn futures_resolve_with_their_own_results_under_concurrency() {
    const TASKS: u64 = 400;
    const SLOT: u64 = 4096;
    let (_dir, gw, data) = gateway_with_object();
    let eng = Arc::new(engine(&gw, Fabric::Soft, 2));
    let obj = eng.object("async", "obj").unwrap();
    let missing = eng.object("async", "missing").unwrap();
    let buf = eng
        .register_host((TASKS * SLOT) as usize, RegisterOptions::pageable())
        .unwrap();
    let q = AsyncQueue::new(eng.queue(16).unwrap()).unwrap();
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (q, eng, data) = (q.clone(), Arc::clone(&eng), data.clone());
        tasks.push(tokio::spawn(async move {
            let len = 512 + (i * 37) % 3584;
            let off = (i * 7919) % (OBJECT_LEN as u64 - len);
            let target = if i % 10 == 3 { missing } else { obj };
            let sqe = RangeGet::new(target, off, BufSlice::new(buf, i * SLOT, len))
                .user_data(1000 + i)
                .build();
            // No per-op timeout: a timer would poll the future and mask a stalled queue.
            let res = q.submit(sqe).await;
            if i % 10 == 3 {
                let Err(AsyncError::Op(e)) = res else {
                    panic!("op {i}: {res:?}")
                };
                assert_eq!((e.user_data, e.code), (1000 + i, Some(ErrorCode::NotFound)));
            } else {
                assert_eq!(res, Ok(len), "op {i}");
                let got = eng.read(buf, i * SLOT, len).unwrap();
                assert!(
                    got[..] == data[off as usize..(off + len) as usize],
                    "op {i}: wrong bytes"
                );
            }
        }));
    }
    let all = async {
        for t in tasks {
            t.await.unwrap();
        }
    };
    // Only the test's own task has a timer: if no future watched the fd, nothing would poll.
    tokio::time::timeout(WAIT, all)
        .await
        .expect("futures stalled");
    eprintln!(
        "{TASKS} ops: {} completion-fd writes",
        q.completion_fd_writes()
    );
}

#[tokio::test]
async fn duplicate_tags_are_refused_and_untracked_pushes_reach_next_completion() {
    let (_dir, gw, _) = gateway_with_object();
    let eng = engine(&gw, Fabric::Http, 1);
    let obj = eng.object("async", "obj").unwrap();
    let buf = eng
        .register_host(8192, RegisterOptions::pageable())
        .unwrap();
    let q = AsyncQueue::new(eng.queue(8).unwrap()).unwrap();
    let first = q.submit(
        RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096))
            .user_data(7)
            .build(),
    );
    let dup = q.submit(
        RangeGet::new(obj, 0, BufSlice::new(buf, 4096, 4096))
            .user_data(7)
            .build(),
    );
    assert_eq!(dup.await, Err(AsyncError::DuplicateUserData(7)));
    q.push(&Nop::new().user_data(8).build()).unwrap();
    let next = tokio::time::timeout(WAIT, q.next_completion())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.user_data(), next.into_result()), (8, Ok(0)));
    assert_eq!(tokio::time::timeout(WAIT, first).await.unwrap(), Ok(4096));
    // Tag 7 is free again once its future resolved.
    let again = q.submit(
        RangeGet::new(obj, 1, BufSlice::new(buf, 0, 10))
            .user_data(7)
            .build(),
    );
    assert_eq!(tokio::time::timeout(WAIT, again).await.unwrap(), Ok(10));
}

/// A peer that accepts connections and never answers: operations through it stay in flight.
fn silent_peer() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let mut held = Vec::new();
        l.set_nonblocking(true).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while std::time::Instant::now() < until {
            match l.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
            if held.len() > 64 {
                break;
            }
        }
    });
    (addr, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_drop_resolves_pending_futures_with_shutdown() {
    let (addr, _peer) = silent_peer();
    let eng = rig::engine_builder(addr)
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    let obj = eng.object("silent", "obj").unwrap();
    let buf = eng
        .register_host(8 * 4096, RegisterOptions::pageable())
        .unwrap();
    let q = AsyncQueue::new(eng.queue(8).unwrap()).unwrap();
    let mut pending = Vec::new();
    for i in 0..8u64 {
        let sqe = RangeGet::new(obj, 0, BufSlice::new(buf, i * 4096, 4096))
            .user_data(i)
            .build();
        pending.push(tokio::spawn(q.submit(sqe)));
    }
    let next = tokio::spawn({
        let q = q.clone();
        async move { q.next_completion().await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(t) = pending.iter_mut().find(|t| t.is_finished()) {
        panic!("an op finished against a silent peer: {:?}", t.await);
    }
    tokio::task::spawn_blocking(move || drop(eng))
        .await
        .unwrap();
    for t in pending {
        let res = tokio::time::timeout(Duration::from_secs(10), t)
            .await
            .expect("a pending future hung after engine drop")
            .unwrap();
        assert_eq!(res, Err(AsyncError::Shutdown));
    }
    let n = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .unwrap()
        .unwrap();
    assert!(n.is_none(), "next_completion after shutdown: {n:?}");
    assert!(q.is_closed());
    let late = q.submit(Nop::new().user_data(99).build());
    assert_eq!(late.await, Err(AsyncError::Shutdown));
}

/// The example's server core against the gateway: 16 clients, 8 requests each, all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokio_server_example_serves_concurrent_clients() {
    let (_dir, gw, data) = gateway_with_object();
    let eng = Arc::new(engine(&gw, Fabric::Soft, 2));
    let server = Arc::new(serve::RangeServer::new(Arc::clone(&eng), 8, 64 * 1024).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let srv = tokio::spawn(Arc::clone(&server).serve(listener));
    let mut clients = Vec::new();
    for c in 0..16u64 {
        let data = data.clone();
        clients.push(tokio::spawn(async move {
            let sock = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut conn = BufReader::new(sock);
            for r in 0..8u64 {
                let len = 1000 + (c * 8 + r) * 311 % 60_000;
                let off = (c * 104_729 + r * 7_919) % (OBJECT_LEN as u64 - len);
                let got = serve::request(&mut conn, "async", "obj", off, len)
                    .await
                    .unwrap();
                let got = got.unwrap_or_else(|e| panic!("client {c} request {r}: ERR {e}"));
                assert!(
                    got == data[off as usize..(off + len) as usize],
                    "client {c} request {r}"
                );
            }
            let miss = serve::request(&mut conn, "async", "nope", 0, 10)
                .await
                .unwrap();
            assert!(miss.unwrap_err().contains("not found"), "client {c}");
        }));
    }
    for c in clients {
        tokio::time::timeout(WAIT, c)
            .await
            .expect("client hung")
            .unwrap();
    }
    srv.abort();
    eprintln!(
        "server queue: {} completion-fd writes",
        server.queue().completion_fd_writes()
    );
}

/// Outside a tokio runtime `AsyncQueue::new` is an error, not a panic.
#[test]
fn async_queue_outside_a_runtime_is_an_error() {
    let (_dir, gw, _) = gateway_with_object();
    let eng = engine(&gw, Fabric::Http, 1);
    let err = AsyncQueue::new(eng.queue(4).unwrap()).unwrap_err();
    assert!(err.to_string().contains("runtime"), "{err}");
}
