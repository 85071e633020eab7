//! Striping a large RangeGet across the NICs a registration is bound to (engine/src/stripe.rs):
//! on a fixture host with two NICs on one NUMA node, a host buffer is bound to both; a 64 MiB
//! RangeGet into it is split into 4 MiB chunks that run on both NICs' workers over the soft
//! RDMA fabric (`rc-persistent` against the gateway in-process), byte-exact, with the bytes
//! counted per NIC. Below the threshold and with `Stripe::Off` nothing is split; a failing
//! chunk fails the operation once with its error; a Cancel or a deadline stops every chunk
//! and the operation completes once.

mod common;
#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
mod striping;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use engine::{Dialect, Engine, EngineBuilder, Fabric, Stripe};
use ring_api::opcode::{Cancel, Get, RangeGet};
use ring_api::{BufSlice, Cqe, DataPath, ErrorCode};
use s3_lite::credentials::Credentials;
use striping::{TwoNicSoft, bound_buffer, exactly, on_two_nics, two_nic_tree};

const MIB: u64 = 1 << 20;

/// The soft gateway with `stripe/obj.bin` = `data`, and an engine on both NICs over it
/// (`rc-persistent` unless `configure` says otherwise).
fn start_soft(data: &[u8], configure: impl FnOnce(EngineBuilder) -> EngineBuilder) -> TwoNicSoft {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let soft = TwoNicSoft::start(dir, gw, Dialect::RcPersistent, configure);
    assert_eq!(
        raw::call(soft.addr(), "PUT", "/stripe/obj.bin", "", &[], data).status(),
        200
    );
    let nics: Vec<Option<String>> = soft.engine().workers().into_iter().map(|w| w.nic).collect();
    assert_eq!(
        nics,
        [Some("mlx5_0".to_string()), Some("mlx5_1".to_string())]
    );
    soft
}

/// Runs one RangeGet of `len` bytes at `offset` into `buf` at 0, returning its completion and
/// the change of each worker's (ops, bytes).
fn one_range_get(
    engine: &Engine,
    buf: ring_api::BufHandle,
    key: &str,
    offset: u64,
    len: u64,
) -> (Cqe, Vec<(u64, u64)>) {
    let obj = engine.object("stripe", key).unwrap();
    let sqe = RangeGet::new(obj, offset, BufSlice::new(buf, 0, len))
        .user_data(7)
        .build();
    one_op(engine, &sqe)
}

/// Runs `sqe` alone on a fresh queue: its one completion (checked to be `sqe`'s) and the
/// change of each worker's (ops, bytes).
fn one_op(engine: &Engine, sqe: &ring_api::Sqe) -> (Cqe, Vec<(u64, u64)>) {
    let before: Vec<(u64, u64)> = engine.workers().iter().map(|w| (w.ops, w.bytes)).collect();
    let mut q = engine.queue(8).unwrap();
    q.push(sqe).unwrap();
    let c = exactly(&mut q, 1, Duration::from_millis(100))[0];
    assert_eq!(c.user_data(), sqe.user_data());
    let delta = engine
        .workers()
        .iter()
        .zip(&before)
        .map(|(w, b)| (w.ops - b.0, w.bytes - b.1))
        .collect();
    (c, delta)
}

#[test]
fn a_64_mib_range_get_on_two_nics_carries_bytes_on_both() {
    let data = rig::pattern((65 * MIB) as usize, 5);
    let soft = start_soft(&data, |b| b);
    let engine = soft.engine();
    let buf = bound_buffer(engine, 64 * MIB);
    // An odd offset: every chunk lands at its own place, none aligned to the object.
    let offset = MIB - 3;
    let (c, delta) = one_range_get(engine, buf, "obj.bin", offset, 64 * MIB);
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.bytes(), 64 * MIB);
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    // 16 chunks of 4 MiB, alternating between the NICs.
    assert_eq!(
        delta,
        [(8, 32 * MIB), (8, 32 * MIB)],
        "per worker (ops, bytes)"
    );
    let per_nic = engine.nic_bytes();
    assert_eq!(per_nic.len(), 2);
    assert!(per_nic.iter().all(|(_, b)| *b > 0), "{per_nic:?}");
    assert_eq!(per_nic.iter().map(|(_, b)| b).sum::<u64>(), 64 * MIB);
    let got = engine.read(buf, 0, 64 * MIB).unwrap();
    let want = &data[offset as usize..(offset + 64 * MIB) as usize];
    assert!(&got[..] == want, "striped bytes differ");
}

#[test]
fn small_ops_and_stripe_off_are_not_split() {
    let data = rig::pattern((24 * MIB) as usize, 6);
    // Below the 8 MiB threshold: one op on one worker.
    let soft = start_soft(&data, |b| b);
    let engine = soft.engine();
    let buf = bound_buffer(engine, 16 * MIB);
    let (c, delta) = one_range_get(engine, buf, "obj.bin", 0, 8 * MIB - 1);
    assert!(c.is_ok() && c.bytes() == 8 * MIB - 1, "{c:?}");
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 1, "{delta:?}");
    assert_eq!(delta.iter().filter(|d| d.1 > 0).count(), 1, "{delta:?}");
    // At the threshold: split.
    let (c, delta) = one_range_get(engine, buf, "obj.bin", 0, 16 * MIB);
    assert!(c.is_ok() && c.bytes() == 16 * MIB, "{c:?}");
    assert_eq!(delta, [(2, 8 * MIB), (2, 8 * MIB)]);
    drop(soft);

    // Stripe::Off: the same 16 MiB read is one op.
    let soft = start_soft(&data, |b| b.stripe(Stripe::Off));
    let engine = soft.engine();
    let buf = bound_buffer(engine, 16 * MIB);
    let (c, delta) = one_range_get(engine, buf, "obj.bin", MIB, 16 * MIB);
    assert!(c.is_ok() && c.bytes() == 16 * MIB, "{c:?}");
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 1, "{delta:?}");
    assert_eq!(delta.iter().filter(|d| d.1 > 0).count(), 1, "{delta:?}");
    let got = engine.read(buf, 0, 16 * MIB).unwrap();
    assert!(got[..] == data[MIB as usize..(17 * MIB) as usize]);
}

#[test]
fn a_failing_chunk_fails_the_operation_once_with_its_code() {
    let data = rig::pattern((40 * MIB) as usize, 7);
    let soft = start_soft(&data, |b| b);
    let engine = soft.engine();
    let buf = bound_buffer(engine, 48 * MIB);
    // 48 MiB of a 40 MiB object: the last two chunks are past its end.
    let (c, delta) = one_range_get(engine, buf, "obj.bin", 0, 48 * MIB);
    assert_eq!(
        c.error_code(),
        Some(ErrorCode::RangeNotSatisfiable),
        "{c:?}"
    );
    assert!(delta.iter().all(|d| d.0 > 0), "not striped: {delta:?}");
    // A missing key: every chunk fails, the operation once.
    let (c, _) = one_range_get(engine, buf, "missing.bin", 0, 48 * MIB);
    assert_eq!(c.error_code(), Some(ErrorCode::NotFound), "{c:?}");
    // The buffer is free again (no chunk still holds a lease).
    assert!(engine.read(buf, 0, 48 * MIB).is_ok());
}

/// An endpoint that accepts connections and never answers, and an engine on both NICs of the
/// two-NIC tree over HTTP: every chunk stays on the wire.
fn black_hole(tree: &tempfile::TempDir) -> (TcpListener, Engine) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let b = Engine::builder()
        .endpoint_url(format!("http://{}", listener.local_addr().unwrap()))
        .credentials(Credentials::new("k", "s"))
        .region("us-east-1")
        .fabric(Fabric::Http);
    let engine = on_two_nics(b, tree).build().unwrap();
    (listener, engine)
}

/// Waits until both workers run chunks of the striped operation.
fn wait_striped(engine: &Engine) {
    let end = Instant::now() + Duration::from_secs(5);
    while !engine.workers().iter().all(|w| w.ops > 0) {
        assert!(Instant::now() < end, "{:?}", engine.workers());
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
}

#[test]
fn cancel_and_deadline_stop_every_chunk_and_complete_once() {
    let tree = two_nic_tree();
    let (_listener, engine) = black_hole(&tree);
    let buf = bound_buffer(&engine, 32 * MIB);
    let obj = engine.object("stripe", "obj.bin").unwrap();
    let mut q = engine.queue(16).unwrap();

    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 32 * MIB))
            .user_data(1)
            .build(),
    )
    .unwrap();
    wait_striped(&engine);
    assert!(matches!(
        engine.read(buf, 0, 4096),
        Err(engine::EngineError::Busy)
    ));
    q.push(&Cancel::new(1).user_data(2).build()).unwrap();
    let got = exactly(&mut q, 2, Duration::from_millis(300));
    assert_eq!(got[0].error_code(), Some(ErrorCode::Cancelled), "{got:?}");
    assert!(got[1].is_ok(), "the Cancel found it: {got:?}");
    // Every chunk's lease is gone with the operation's completion.
    assert!(engine.read(buf, 0, 32 * MIB).is_ok());

    // A deadline applies to every chunk: one TimedOut.
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 32 * MIB))
            .deadline_ns(300_000_000)
            .user_data(3)
            .build(),
    )
    .unwrap();
    let got = exactly(&mut q, 1, Duration::from_millis(300));
    assert_eq!(got[0].user_data(), 3);
    assert_eq!(got[0].error_code(), Some(ErrorCode::TimedOut), "{got:?}");
    assert!(engine.read(buf, 0, 32 * MIB).is_ok());
    let ops: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
    assert_eq!(ops, [8, 8], "two striped ops of 8 chunks");
}

/// On a queue with timestamps a striped RangeGet completes once with one record: the
/// operation's submission (inside the push window) and start, the earliest chunk's first byte,
/// the last chunk's completion, in order, all before it was reaped.
#[test]
fn a_striped_operation_has_one_ordered_record() {
    let data = rig::pattern((9 * MIB) as usize, 11);
    let soft = start_soft(&data, |b| b.stripe_threshold(2 * MIB).stripe_chunk(MIB));
    let engine = soft.engine();
    let buf = bound_buffer(engine, 8 * MIB);
    let obj = engine.object("stripe", "obj.bin").unwrap();
    let before: Vec<u64> = engine.workers().iter().map(|w| w.ops).collect();
    let mut q = engine
        .queue_with(engine::QueueOptions::new(8).timestamps(true))
        .unwrap();
    let pushed_from = engine::monotonic_ns();
    q.push(
        &RangeGet::new(obj, 5, BufSlice::new(buf, 0, 8 * MIB))
            .user_data(9)
            .build(),
    )
    .unwrap();
    let pushed_to = engine::monotonic_ns();
    assert_eq!(q.wait(1, Some(Duration::from_secs(60))), 1);
    let mut out = [(Cqe::default(), engine::OpTimes::default()); 4];
    let n = q.reap_timed(&mut out).unwrap();
    let reaped = engine::monotonic_ns();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        n + q.reap_timed(&mut out[n..]).unwrap(),
        1,
        "one completion"
    );
    let (c, t) = out[0];
    assert!(c.is_ok() && c.bytes() == 8 * MIB, "{c:?}");
    let ops: u64 = engine
        .workers()
        .iter()
        .zip(&before)
        .map(|(w, b)| w.ops - b)
        .sum();
    assert_eq!(ops, 8, "8 chunks of 1 MiB ran");
    let fb = t.first_byte_ns().expect("chunks answered over HTTP");
    assert!(
        pushed_from <= t.submitted_ns()
            && t.submitted_ns() <= pushed_to
            && t.submitted_ns() <= t.started_ns()
            && t.started_ns() <= fb
            && fb <= t.completed_ns()
            && t.completed_ns() <= reaped,
        "{t:?} pushed {pushed_from}..={pushed_to} reaped {reaped}"
    );
    assert!(engine.read(buf, 0, 8 * MIB).unwrap()[..] == data[5..5 + 8 * MIB as usize]);
}

/// Runs one whole-object GET of `key` into the first `cap` bytes of `buf`: its completion and
/// the change of each worker's (ops, bytes).
fn one_get(
    engine: &Engine,
    buf: ring_api::BufHandle,
    key: &str,
    cap: u64,
) -> (Cqe, Vec<(u64, u64)>) {
    let obj = engine.object("stripe", key).unwrap();
    let sqe = Get::new(obj, BufSlice::new(buf, 0, cap))
        .user_data(8)
        .build();
    one_op(engine, &sqe)
}

/// The same whole-object GET over hipobj-rc-v2, whose chunks name no object size (`aux` 0):
/// the HEAD's size stands, and the GET completes whole and exact (the VM lane caught an
/// `EBADMSG` here when every chunk had to repeat the HEAD's size).
#[test]
fn a_whole_object_get_over_v2_is_striped_and_exact() {
    let size = 40 * MIB + 5;
    let data = rig::pattern(size as usize, 12);
    let soft = start_soft(&data, |b| b.dialect(Dialect::RcV2));
    let engine = soft.engine();
    let buf = bound_buffer(engine, 64 * MIB);
    let (c, delta) = one_get(engine, buf, "obj.bin", 64 * MIB);
    assert!(c.is_ok(), "{c:?}");
    assert_eq!((c.bytes(), c.aux()), (size, size), "{c:?}");
    assert_eq!(delta.iter().map(|d| d.1).sum::<u64>(), size, "{delta:?}");
    assert!(
        delta.iter().all(|d| d.1 >= 16 * MIB),
        "both NICs: {delta:?}"
    );
    let got = engine.read(buf, 0, size).unwrap();
    assert!(got[..] == data[..], "striped v2 GET bytes differ");
}

#[test]
fn a_whole_object_get_is_sized_by_a_head_then_striped() {
    let size = 40 * MIB + 5;
    let data = rig::pattern(size as usize, 8);
    let soft = start_soft(&data, |b| b);
    let engine = soft.engine();
    let a = soft.addr();
    let small = rig::pattern((6 * MIB) as usize, 9);
    assert_eq!(
        raw::call(a, "PUT", "/stripe/small.bin", "", &[], &small).status(),
        200
    );
    let buf = bound_buffer(engine, 64 * MIB);

    // A 64 MiB destination, a 40 MiB + 5 object: one HEAD, then 11 chunks over both NICs.
    let (c, delta) = one_get(engine, buf, "obj.bin", 64 * MIB);
    assert!(c.is_ok(), "{c:?}");
    assert_eq!((c.bytes(), c.aux()), (size, size), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft));
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 12, "{delta:?}");
    assert_eq!(delta.iter().map(|d| d.1).sum::<u64>(), size, "{delta:?}");
    assert!(
        delta.iter().all(|d| d.1 >= 16 * MIB),
        "both NICs: {delta:?}"
    );
    // (A view holds a lease on what it shows: dropped before the next GET.)
    let got = engine.read(buf, 0, size).unwrap();
    assert!(got[..] == data[..], "striped GET bytes differ");
    drop(got);

    // An object too small to split: the HEAD, then one ordinary GET.
    let (c, delta) = one_get(engine, buf, "small.bin", 64 * MIB);
    assert!(c.is_ok() && c.bytes() == 6 * MIB, "{c:?}");
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 2, "{delta:?}");
    assert_eq!(delta.iter().filter(|d| d.1 > 0).count(), 1, "{delta:?}");
    assert!(engine.read(buf, 0, 6 * MIB).unwrap()[..] == small[..]);

    // Larger than the destination: TooLarge, as an unstriped GET; missing: NotFound.
    let (c, _) = one_get(engine, buf, "obj.bin", 16 * MIB);
    assert_eq!(c.error_code(), Some(ErrorCode::TooLarge), "{c:?}");
    let (c, _) = one_get(engine, buf, "missing.bin", 16 * MIB);
    assert_eq!(c.error_code(), Some(ErrorCode::NotFound), "{c:?}");
    assert!(engine.read(buf, 0, 64 * MIB).is_ok(), "no lease left");
    drop(soft);

    // Stripe::Off: one GET, no HEAD.
    let soft = start_soft(&data, |b| b.stripe(Stripe::Off));
    let engine = soft.engine();
    let buf = bound_buffer(engine, 64 * MIB);
    let (c, delta) = one_get(engine, buf, "obj.bin", 64 * MIB);
    assert!(c.is_ok() && c.bytes() == size, "{c:?}");
    assert_eq!(delta.iter().map(|d| d.0).sum::<u64>(), 1, "{delta:?}");
    assert!(engine.read(buf, 0, size).unwrap()[..] == data[..]);
}

#[test]
fn a_whole_object_get_is_cancelled_or_times_out_while_sized() {
    let tree = two_nic_tree();
    let (_listener, engine) = black_hole(&tree);
    let buf = bound_buffer(&engine, 32 * MIB);
    let obj = engine.object("stripe", "obj.bin").unwrap();
    let mut q = engine.queue(16).unwrap();
    q.push(
        &Get::new(obj, BufSlice::new(buf, 0, 32 * MIB))
            .user_data(1)
            .build(),
    )
    .unwrap();
    // The HEAD is on the wire; the destination is held.
    let end = Instant::now() + Duration::from_secs(5);
    while engine.workers().iter().map(|w| w.ops).sum::<u64>() == 0 {
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(matches!(
        engine.read(buf, 0, 4096),
        Err(engine::EngineError::Busy)
    ));
    q.push(&Cancel::new(1).user_data(2).build()).unwrap();
    let got = exactly(&mut q, 2, Duration::from_millis(300));
    assert_eq!(got[0].error_code(), Some(ErrorCode::Cancelled), "{got:?}");
    assert!(got[1].is_ok(), "the Cancel found it: {got:?}");
    assert!(engine.read(buf, 0, 32 * MIB).is_ok());
    q.push(
        &Get::new(obj, BufSlice::new(buf, 0, 32 * MIB))
            .deadline_ns(300_000_000)
            .user_data(3)
            .build(),
    )
    .unwrap();
    let got = exactly(&mut q, 1, Duration::from_millis(300));
    assert_eq!(got[0].error_code(), Some(ErrorCode::TimedOut), "{got:?}");
    assert!(engine.read(buf, 0, 32 * MIB).is_ok());
}
