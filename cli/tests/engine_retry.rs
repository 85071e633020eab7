//! The engine's retries through `hipobj debug relay` to s3s-fs: one `503 SlowDown` costs one
//! retry and the operation succeeds (flagged retried, counted in `Engine::retry_stats`); a
//! storm of them ends with `SlowDown` after the policy's attempts, well inside the deadline;
//! an empty retry budget stops retrying at once.

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::time::{Duration, Instant};

use engine::{Engine, Fabric, Placement, RegisterOptions, RetryPolicy};
use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
use ring_api::opcode::{Get, Put};
use ring_api::{BufSlice, Cqe, ErrorCode};
use s3_lite::credentials::Credentials;
use s3s_fs::{ACCESS_KEY, S3sFs, SECRET_KEY};

const BUCKET: &str = "engine-retry";
const LEN: usize = 1 << 20;

fn engine(url: &str) -> Engine {
    Engine::builder()
        .endpoint_url(url)
        .credentials(Credentials::new(ACCESS_KEY, SECRET_KEY))
        .region("us-east-1")
        .placement(Placement::Workers(1))
        .fabric(Fabric::Http)
        .retry(RetryPolicy::new(
            4,
            Duration::from_millis(10),
            Duration::from_millis(100),
        ))
        .build()
        .unwrap()
}

fn rig(faults: Vec<Fault>) -> (S3sFs, Relay, Vec<u8>) {
    let server = S3sFs::start();
    server.create_bucket_dir(BUCKET);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
    server.put_file(BUCKET, "obj", &data);
    let to = server
        .endpoint_url()
        .trim_start_matches("http://")
        .to_owned();
    let relay = Relay::start("127.0.0.1:0", &to, faults).unwrap();
    (server, relay, data)
}

fn one(e: &Engine, sqe: ring_api::Sqe) -> Cqe {
    let mut q = e.queue(4).unwrap();
    q.push(&sqe).unwrap();
    assert!(
        q.wait(1, Some(Duration::from_secs(30))) > 0,
        "no completion"
    );
    q.completion().next().unwrap()
}

fn get(e: &Engine) -> (Cqe, Vec<u8>) {
    let buf = e.register_host(LEN, RegisterOptions::pageable()).unwrap();
    let obj = e.object(BUCKET, "obj").unwrap();
    let c = one(e, Get::new(obj, BufSlice::new(buf, 0, LEN as u64)).build());
    (c, e.read(buf, 0, LEN as u64).unwrap().to_vec())
}

fn put(e: &Engine, data: &[u8]) -> Cqe {
    let buf = e
        .register_host(data.len(), RegisterOptions::pageable())
        .unwrap();
    e.copy_in(buf, 0, data).unwrap();
    let obj = e.object(BUCKET, "up").unwrap();
    one(
        e,
        Put::new(obj, BufSlice::new(buf, 0, data.len() as u64)).build(),
    )
}

#[test]
fn one_slowdown_costs_one_retry() {
    let (_server, relay, data) = rig(vec![Fault::times(FaultKind::SlowDown, 1)]);
    let e = engine(&relay.url());
    let (c, got) = get(&e);
    assert!(c.is_ok(), "{:?}", c.error_code());
    assert!(c.retried());
    assert_eq!(got, data);
    assert_eq!(e.retry_stats().retries, 1);

    let (_server, relay, data) = rig(vec![Fault::times(FaultKind::SlowDown, 1)]);
    let e = engine(&relay.url());
    let c = put(&e, &data);
    assert!(c.is_ok(), "{:?}", c.error_code());
    assert_eq!(e.retry_stats().retries, 1);
}

#[test]
fn a_storm_of_slowdowns_ends_with_slowdown() {
    let (_server, relay, _data) = rig(vec![Fault::always(FaultKind::SlowDown)]);
    let e = engine(&relay.url());
    let started = Instant::now();
    let (c, _) = get(&e);
    assert_eq!(c.error_code(), Some(ErrorCode::SlowDown));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Four attempts: three retries, all answered by the relay.
    assert_eq!(e.retry_stats().retries, 3);
    assert_eq!(
        relay
            .stats()
            .slowdowns
            .load(std::sync::atomic::Ordering::SeqCst),
        4
    );
}

#[test]
fn the_budget_stops_a_storm_across_operations() {
    let (_server, relay, _data) = rig(vec![Fault::always(FaultKind::SlowDown)]);
    let e = engine(&relay.url());
    // 500 tokens at 5 per retry: 100 retries in all, then every failure is final.
    let mut last = None;
    for _ in 0..60 {
        let (c, _) = get(&e);
        assert_eq!(c.error_code(), Some(ErrorCode::SlowDown));
        last = Some(e.retry_stats());
    }
    let stats = last.unwrap();
    assert_eq!(stats.retries, 100, "{stats:?}");
    // 33 operations take 3 retries each, the 34th takes one and is refused its second; each later
    // one is refused its first.
    assert_eq!(stats.refused_by_budget, 60 - 33, "{stats:?}");
    assert_eq!(stats.tokens, 0);
}
