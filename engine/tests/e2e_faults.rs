//! Deadlines, cancellation, invalid entries and a server restart in the middle of a batch.

mod common;

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{S3sFs, builder, pattern, put_file, s3s_fs};
use engine::{Engine, Placement, RegisterOptions, RetryPolicy};
use ring_api::opcode::{Cancel, Head, Nop, RangeGet};
use ring_api::{BufHandle, BufSlice, Cqe, ErrorClass, ErrorCode, ObjectId, Sqe};
use s3_lite::credentials::Credentials;

/// A server that accepts connections and never answers.
fn black_hole() -> (TcpListener, Engine) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let engine = Engine::builder()
        .endpoint_url(format!("http://{}", listener.local_addr().unwrap()))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .build()
        .unwrap();
    (listener, engine)
}

fn one(q: &mut engine::Queue) -> Cqe {
    assert_eq!(
        q.wait(1, Some(Duration::from_secs(10))),
        1,
        "no completion within 10 s"
    );
    q.completion().next().unwrap()
}

#[test]
fn short_deadline_completes_with_a_typed_timeout() {
    let (_listener, engine) = black_hole();
    let obj = engine.object("bkt", "k").unwrap();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    let t = Instant::now();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 100))
            .deadline_ns(50_000_000)
            .user_data(9)
            .build(),
    )
    .unwrap();
    let c = one(&mut q);
    let took = t.elapsed();
    assert_eq!(
        (c.user_data(), c.error_code(), c.error_class()),
        (9, Some(ErrorCode::TimedOut), Some(ErrorClass::Deadline))
    );
    assert!(
        took >= Duration::from_millis(45) && took < Duration::from_secs(2),
        "{took:?}"
    );
    // The buffer lease went with the operation.
    assert!(engine.read(buf, 0, 100).is_ok());
    // An absolute deadline already in the past expires without touching the wire.
    q.push(&Head::new(obj).deadline_at_ns(1).user_data(10).build())
        .unwrap();
    assert_eq!(one(&mut q).error_code(), Some(ErrorCode::TimedOut));
}

#[test]
fn cancel_stops_an_operation_on_the_wire() {
    let (_listener, engine) = black_hole();
    let obj = engine.object("bkt", "k").unwrap();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 100))
            .user_data(1)
            .build(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        matches!(engine.read(buf, 0, 100), Err(engine::EngineError::Busy)),
        "in flight: range leased"
    );
    q.push(&Cancel::new(1).user_data(2).build()).unwrap();
    q.push(&Cancel::new(77).user_data(3).build()).unwrap();
    assert_eq!(q.wait(3, Some(Duration::from_secs(10))), 3);
    let got: Vec<Cqe> = q.completion().collect();
    assert_eq!(got[0].user_data(), 1);
    assert_eq!(
        (got[0].error_code(), got[0].error_class()),
        (Some(ErrorCode::Cancelled), Some(ErrorClass::Cancelled))
    );
    assert_eq!((got[1].user_data(), got[1].result()), (2, 0));
    assert_eq!(
        (got[2].user_data(), got[2].error_code()),
        (3, Some(ErrorCode::NotFound))
    );
    assert!(
        engine.read(buf, 0, 100).is_ok(),
        "lease released by the cancel"
    );
}

#[test]
fn invalid_entries_complete_with_errors() {
    let (_listener, engine) = black_hole();
    let obj = engine.object("bkt", "k").unwrap();
    let buf = engine
        .register_host(4096, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(16).unwrap();
    let mut unknown = Nop::new().user_data(1).build().to_bytes();
    unknown[0] = 200;
    let mut reserved = Nop::new().user_data(2).build().to_bytes();
    reserved[1] = 0x80;
    let entries: Vec<(Sqe, i32, ErrorClass)> = vec![
        (Sqe::from_bytes(&unknown), -95, ErrorClass::Invalid),
        (Sqe::from_bytes(&reserved), -22, ErrorClass::Invalid),
        (
            RangeGet::new(obj, 0, BufSlice::new(buf, 4000, 97))
                .user_data(3)
                .build(),
            -14,
            ErrorClass::Local,
        ),
        (
            RangeGet::new(obj, 0, BufSlice::new(buf, u64::MAX, 1))
                .user_data(4)
                .build(),
            -22,
            ErrorClass::Invalid,
        ),
        (
            RangeGet::new(obj, 0, BufSlice::new(BufHandle(999), 0, 1))
                .user_data(5)
                .build(),
            -9,
            ErrorClass::Local,
        ),
        (
            Head::new(ObjectId(12345)).user_data(6).build(),
            -9,
            ErrorClass::Local,
        ),
        // All ones: reserved flag bits are rejected before the opcode is looked at.
        (
            Sqe::from_bytes(&[0xFF; 64]).with_user_data(7),
            -22,
            ErrorClass::Invalid,
        ),
    ];
    for (sqe, _, _) in &entries {
        q.push(sqe).unwrap();
    }
    q.push(&Nop::new().user_data(8).build()).unwrap();
    assert_eq!(q.wait(8, Some(Duration::from_secs(10))), 8);
    let got: Vec<Cqe> = q.completion().collect();
    for ((sqe, result, class), c) in entries.iter().zip(&got) {
        assert_eq!(
            (c.user_data(), c.result(), c.error_class()),
            (sqe.user_data(), *result, Some(*class))
        );
    }
    assert_eq!((got[7].user_data(), got[7].result()), (8, 0));
}

fn restart(server: &S3sFs) -> std::process::Child {
    let port = server.addr.port().to_string();
    let child = Command::new(s3s_fs::binary())
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port,
            "--access-key",
            s3s_fs::ACCESS_KEY,
        ])
        .args(["--secret-key", s3s_fs::SECRET_KEY])
        .arg(server.root.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(server.addr).is_err()
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn server_restart_mid_batch_completes_every_operation() {
    const OPS: u64 = 1500;
    const C: u64 = 32;
    const LEN: u64 = 2048;
    let mut server = S3sFs::start();
    let data = pattern(256 << 10, 3);
    put_file(&server, "restart", "obj", &data);
    let retry = RetryPolicy::new(8, Duration::from_millis(20), Duration::from_millis(300));
    let engine = builder(&server)
        .retry(retry)
        .connections_per_worker(C as usize)
        .build()
        .unwrap();
    let obj = engine.object("restart", "obj").unwrap();
    let buf = engine
        .register_host((C * LEN) as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(C as u32).unwrap();
    let (mut next, mut done, mut ok, mut ok_after, mut errors) =
        (0u64, 0u64, 0u64, 0u64, Vec::new());
    let mut offsets = vec![0u64; C as usize];
    let mut free: Vec<u64> = (0..C).collect();
    let mut child = None;
    let mut restarted = false;
    while done < OPS {
        while next < OPS {
            let Some(slot) = free.pop() else { break };
            let off = (next * 997) % (data.len() as u64 - LEN);
            offsets[slot as usize] = off;
            q.push(
                &RangeGet::new(obj, off, BufSlice::new(buf, slot * LEN, LEN))
                    .user_data(slot)
                    .build(),
            )
            .unwrap();
            next += 1;
        }
        assert!(
            q.wait(1, Some(Duration::from_secs(20))) > 0,
            "stalled at {done}/{OPS}"
        );
        for c in q.completion().collect::<Vec<_>>() {
            let slot = c.user_data();
            free.push(slot);
            done += 1;
            if c.is_ok() {
                assert_eq!(c.bytes(), LEN, "never silently short");
                let off = offsets[slot as usize] as usize;
                assert!(
                    *engine.read(buf, slot * LEN, LEN).unwrap() == data[off..off + LEN as usize]
                );
                ok += 1;
                ok_after += u64::from(restarted);
            } else {
                let class = c.error_class().expect("typed error class");
                assert!(
                    matches!(
                        class,
                        ErrorClass::Transport | ErrorClass::Server | ErrorClass::Integrity
                    ),
                    "{c:?}"
                );
                errors.push(c.error_code());
            }
        }
        if done >= 300 && child.is_none() {
            server.kill();
            std::thread::sleep(Duration::from_millis(150));
            child = Some(restart(&server));
            restarted = true;
        }
    }
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
    eprintln!(
        "restart: {ok} ok ({ok_after} after restart), {} errors: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(done, OPS);
    assert!(ok_after > 0, "the engine reconnected after the restart");
}
