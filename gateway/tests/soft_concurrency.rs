//! Issue 33 item 4: the soft fabric at concurrency 256. 4 KiB range-gets keep 256 in flight on
//! one worker (one shared RC connection); the soft data port goes through a raw relay that
//! resets the connection once, mid-batch, as a stalled or overloaded link ends. Every op must
//! succeed, checksum-verified, and nearly all bytes must travel over `rdma-soft`: the ops the dropped
//! link failed at once are retried over a new pairing, not charged one by one to the engine's
//! retry budget (which turned a single drop into `ConnectionReset` failures).

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;

use std::time::{Duration, Instant};

use engine::{Fabric, RegisterOptions};
use hipobj_gateway::RcTarget;
use hipobj_gateway::fault_relay::{Fault, Relay};
use raw::call;
use rig::pattern;
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, DataPath};

const CONCURRENCY: u64 = 256;
const SIZE: u64 = 4096;

fn run(ops: u64, data_fault: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let target = RcTarget::start(
        std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)),
        hipobj_gateway::RcLimits::default(),
    )
    .unwrap();
    let soft = target.soft_addr().expect("a soft data port");
    let gw = rig::gateway_over(dir.path(), target);
    let a = gw.local_addr();
    let data = pattern(4 << 20, 9);
    assert_eq!(call(a, "PUT", "/conc", "", &[], b"").status(), 200);
    assert_eq!(call(a, "PUT", "/conc/obj", "", &[], &data).status(), 200);
    // The data port through a raw relay (with the fault); the HTTP side through a relay that
    // points the client's QP at it.
    let faults = data_fault
        .map(|f| vec![Fault::parse(f).unwrap()])
        .unwrap_or_default();
    let data_relay = Relay::start_raw("127.0.0.1:0", &soft.to_string(), faults).unwrap();
    let rewrite = Fault::parse(&format!(
        "rewrite-header=x-amz-rdma-soft-addr:{}",
        data_relay.addr()
    ))
    .unwrap();
    let front = Relay::start("127.0.0.1:0", &a.to_string(), vec![rewrite]).unwrap();
    let engine = rig::engine_builder(front.addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let buf = engine
        .register_host((CONCURRENCY * SIZE) as usize, RegisterOptions::pageable())
        .unwrap();
    let obj = engine.object("conc", "obj").unwrap();
    let mut q = engine.queue(CONCURRENCY as u32).unwrap();
    let slots = (data.len() as u64 - SIZE) / 512;
    let offset = |i: u64| (i.wrapping_mul(2_654_435_761) % slots) * 512;
    // Op `i` lands in buffer slot `slot` (user data: i << 16 | slot); the next op takes the
    // slot of the one that completed.
    let push = |q: &mut engine::Queue, i: u64, slot: u64| {
        q.push(
            &RangeGet::new(obj, offset(i), BufSlice::new(buf, slot * SIZE, SIZE))
                .user_data(i << 16 | slot)
                .build(),
        )
        .unwrap();
    };
    let started = Instant::now();
    let mut next = 0u64;
    while next < CONCURRENCY.min(ops) {
        push(&mut q, next, next);
        next += 1;
    }
    let (mut done, mut failed, mut over_rdma) = (0u64, Vec::new(), 0u64);
    while done < ops {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{done} of {ops} done"
        );
        q.wait(1, Some(Duration::from_secs(1)));
        let batch: Vec<_> = q.completion().collect();
        for c in batch {
            done += 1;
            let (i, slot) = (c.user_data() >> 16, c.user_data() & 0xffff);
            if c.is_ok() {
                // The buffer is busy with the ops in flight: the proof is the CRC-64/NVME the
                // gateway named, checked against the landing digest or the bytes.
                assert!(c.verified(), "op {i}: not checksum-verified: {c:?}");
                if c.path() == Some(DataPath::RdmaSoft) {
                    over_rdma += 1;
                }
            } else {
                failed.push((i, c.error_code(), c.error_class()));
            }
            if next < ops {
                push(&mut q, next, slot);
                next += 1;
            }
        }
    }
    eprintln!(
        "{ops} ops at concurrency {CONCURRENCY}: {} failed, {over_rdma} over rdma-soft, \
         {:.1} s, fault applied: {}, retries {:?}",
        failed.len(),
        started.elapsed().as_secs_f64(),
        data_relay.stats().faults(),
        engine.retry_stats()
    );
    assert!(
        failed.is_empty(),
        "{} ops failed, e.g. {:?}",
        failed.len(),
        failed.first()
    );
    assert!(
        over_rdma * 100 >= ops * 95,
        "only {over_rdma} of {ops} over rdma-soft"
    );
    if data_fault.is_some() {
        assert!(data_relay.stats().faults() > 0, "the link was reset");
    }
    gw.shutdown();
}

/// One drop of the shared link mid-batch (its data stream reset after 20 MB).
#[test]
fn a_dropped_soft_link_at_concurrency_256_fails_no_op() {
    run(30_000, Some("stall-after=20000000,times=1"));
}

/// The scale: 100,000 range-gets at concurrency 256, 0 errors, over rdma-soft.
#[test]
fn one_hundred_thousand_range_gets_at_concurrency_256() {
    run(100_000, None);
}
