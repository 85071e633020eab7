//! `Fabric::Soft` against a server that knows nothing of RDMA (s3s-fs): pairing is refused,
//! GETs fall back to the HTTP body byte-exact, and a PUT is never reported stored unless the
//! object on disk holds exactly our bytes (no 0-byte object left behind). Also: pairing against
//! a black-hole endpoint honours the op's deadline.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::{S3sFs, builder, pattern, put_file};
use engine::{Engine, Fabric, Placement, RegisterOptions, RetryPolicy};
use ring_api::opcode::{Get, Put, RangeGet};
use ring_api::{BufSlice, DataPath, ErrorCode};
use s3_lite::credentials::Credentials;

#[test]
fn soft_against_plain_s3_falls_back_and_never_lies() {
    let server = S3sFs::start();
    let data = pattern(700_000, 11);
    put_file(&server, "bkt", "obj.bin", &data);
    let buf_len = 4 << 20;
    let mut results = Vec::new();
    for fabric in [Fabric::Soft, Fabric::Http] {
        let engine = builder(&server).fabric(fabric).build().unwrap();
        let buf = engine
            .register_host(buf_len, RegisterOptions::pageable())
            .unwrap();
        let mut q = engine.queue(16).unwrap();
        let obj = engine.object("bkt", "obj.bin").unwrap();
        q.push(
            &Get::new(obj, BufSlice::new(buf, 0, 1 << 20))
                .user_data(1)
                .build(),
        )
        .unwrap();
        q.push(
            &RangeGet::new(obj, 12_345, BufSlice::new(buf, 1 << 20, 77_777))
                .user_data(2)
                .build(),
        )
        .unwrap();
        assert_eq!(q.wait(2, Some(Duration::from_secs(30))), 2);
        let mut got: Vec<_> = q.completion().collect();
        got.sort_by_key(|c| c.user_data());
        for c in &got {
            assert!(c.is_ok(), "{fabric:?}: {c:?}");
            assert_eq!(c.path(), Some(DataPath::Http), "{fabric:?}");
        }
        assert_eq!(got[0].bytes(), data.len() as u64);
        assert_eq!(got[1].bytes(), 77_777);
        let whole = engine.read(buf, 0, data.len() as u64).unwrap().to_vec();
        let range = engine.read(buf, 1 << 20, 77_777).unwrap().to_vec();
        assert_eq!(whole, data);
        assert_eq!(range, &data[12_345..12_345 + 77_777]);
        results.push((whole, range));

        // PUT: the server ignores the token; the engine must end with exactly our bytes
        // stored (or an error), never a 0-byte object reported as stored.
        let fresh = pattern(300_001, 40 + fabric as u64);
        engine.copy_in(buf, 2 << 20, &fresh).unwrap();
        let key = format!("put/{fabric:?}.bin");
        let put_obj = engine.object("bkt", &key).unwrap();
        q.push(
            &Put::new(put_obj, BufSlice::new(buf, 2 << 20, fresh.len() as u64))
                .user_data(3)
                .build(),
        )
        .unwrap();
        assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
        let c = q.completion().next().unwrap();
        assert!(c.is_ok(), "{fabric:?} put: {c:?}");
        assert_eq!(c.path(), Some(DataPath::Http), "{fabric:?}");
        assert_eq!(c.bytes(), fresh.len() as u64);
        let on_disk = std::fs::read(server.root.path().join("bkt").join(&key)).unwrap();
        assert_eq!(on_disk.len(), fresh.len(), "{fabric:?}: stored length");
        assert!(on_disk == fresh, "{fabric:?}: stored bytes differ");
    }
    assert_eq!(
        results[0], results[1],
        "Soft and Http deliver the same bytes"
    );
}

/// An endpoint that accepts TCP connections and never answers: the first op's pairing must
/// not hold the op past its deadline.
#[test]
fn pairing_against_a_black_hole_honours_the_deadline() {
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = hole.local_addr().unwrap();
    // Keep accepted sockets open (never read, never answer).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let keeper = std::thread::spawn(move || {
        let mut held = Vec::new();
        hole.set_nonblocking(true).unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(15)
            && !stop2.load(std::sync::atomic::Ordering::Relaxed)
        {
            if let Ok((s, _)) = hole.accept() {
                held.push(s);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let engine = Engine::builder()
        .endpoint_url(format!("http://{addr}"))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .retry(RetryPolicy::new(
            1,
            Duration::from_millis(5),
            Duration::from_millis(5),
        ))
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 16, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("bkt", "k").unwrap();
    let t = Instant::now();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096))
            .user_data(9)
            .deadline_ns(700_000_000)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(10))), 1);
    let took = t.elapsed();
    let c = q.completion().next().unwrap();
    assert_eq!(c.error_code(), Some(ErrorCode::TimedOut), "{c:?}");
    assert!(
        took < Duration::from_millis(2_000),
        "700 ms deadline honoured late: {took:?}"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(q);
    drop(engine);
    let _ = keeper.join();
}

/// `Fabric::Verbs` naming a device that no host has: `build` fails with the typed
/// `VerbsUnavailable` (the device named, the reason given) rather than building an engine that
/// carries every payload over HTTP; `Fabric::Auto` with the same name still builds (it falls
/// back quietly). `build` sends nothing, so no server is needed. (On the old code `build`
/// succeeded with a WARN event.)
#[test]
fn verbs_without_its_device_fails_build_and_auto_falls_back() {
    let builder = |fabric| {
        Engine::builder()
            .endpoint_url("http://127.0.0.1:9")
            .credentials(Credentials::new("k", "s"))
            .placement(Placement::Workers(1))
            .fabric(fabric)
            .verbs_device("hipobj-no-such-verbs-dev")
    };
    match builder(Fabric::Verbs).build() {
        Err(engine::EngineError::VerbsUnavailable { device, reason, .. }) => {
            assert_eq!(device.as_deref(), Some("hipobj-no-such-verbs-dev"));
            assert!(!reason.is_empty());
        }
        Err(e) => panic!("expected VerbsUnavailable, got {e}"),
        Ok(_) => panic!("Fabric::Verbs built without its device"),
    }
    let e = builder(Fabric::Verbs).build().err().unwrap().to_string();
    assert!(
        e.contains("Fabric::Verbs") && e.contains("hipobj-no-such-verbs-dev"),
        "{e}"
    );
    if !engine::verbs::probe().is_available() {
        // No libibverbs device at all: the reason says what is missing on this host.
        assert!(
            e.contains("RDMA verbs unavailable") || e.contains("/sys/class/infiniband"),
            "{e}"
        );
    }
    builder(Fabric::Auto).build().unwrap();
}
