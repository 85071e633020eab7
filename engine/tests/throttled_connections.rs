//! Several engines against one gateway that holds fewer connections than they open together
//! (eight ranks, each with its own engine, against one `hipobj serve`): the gateway answers
//! `503 SlowDown` to connections beyond its limit. Every op must still succeed with its own
//! bytes: each worker narrows its connection window while the server throttles
//! (`engine/src/fabric/http/window.rs`), so ops wait for a connection instead of spending
//! their attempts on refusals.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use std::sync::{Arc, Barrier};

use engine::opcode::RangeGet;
use engine::{BufSlice, Engine, Fabric, Placement, RegisterOptions, RetryPolicy};
use raw::call;
use rig::{WAIT, pattern};

const ENGINES: usize = 4;
const OPS: u64 = 300;
const LEN: u64 = 64 * 1024;
const DEPTH: u64 = 32;
const OBJECT_LEN: usize = 4 << 20;

#[test]
fn engines_that_open_more_connections_than_the_gateway_holds_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    // 16 connections held; the engines open up to 4 × 2 workers × 8 = 64.
    let gw = hipobj_gateway::Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(raw::ACCESS, raw::SECRET)
        .threads(4)
        .max_connections(16)
        .start()
        .unwrap();
    let addr = gw.local_addr();
    assert_eq!(call(addr, "PUT", "/ranks", "", &[], b"").status(), 200);
    let data = Arc::new(pattern(OBJECT_LEN, 9));
    assert_eq!(
        call(addr, "PUT", "/ranks/shard", "", &[], &data).status(),
        200
    );

    let start = Arc::new(Barrier::new(ENGINES));
    let ranks: Vec<_> = (0..ENGINES)
        .map(|rank| {
            let (start, data) = (Arc::clone(&start), Arc::clone(&data));
            std::thread::spawn(move || {
                let eng = rig::engine_builder(addr)
                    .fabric(Fabric::Http)
                    .placement(Placement::Workers(2))
                    .connections_per_worker(8)
                    // What a user gets: the default retries.
                    .retry(RetryPolicy::default())
                    .build()
                    .unwrap();
                start.wait();
                load(&eng, rank, &data)
            })
        })
        .collect();
    let failures: Vec<String> = ranks.into_iter().flat_map(|r| r.join().unwrap()).collect();
    assert!(
        failures.is_empty(),
        "{} of {} ops failed, first: {:?}",
        failures.len(),
        ENGINES as u64 * OPS,
        failures.first()
    );
}

/// `OPS` range-gets with `DEPTH` in flight; the failures, each described.
fn load(eng: &Engine, rank: usize, data: &[u8]) -> Vec<String> {
    let obj = eng.object("ranks", "shard").unwrap();
    let buf = eng
        .register_host((DEPTH * LEN) as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = eng.queue(DEPTH as u32).unwrap();
    let offset_of = |i: u64| (i * 7919 * 64 + rank as u64 * 4096) % (OBJECT_LEN as u64 - LEN);
    let mut slot_op: Vec<Option<u64>> = vec![None; DEPTH as usize];
    let (mut next, mut done, mut failures) = (0u64, 0u64, Vec::new());
    while done < OPS {
        for (slot, held) in slot_op.iter_mut().enumerate() {
            if held.is_none() && next < OPS {
                let dst = BufSlice::new(buf, slot as u64 * LEN, LEN);
                let sqe = RangeGet::new(obj, offset_of(next), dst)
                    .user_data(slot as u64)
                    .build();
                q.push(&sqe).unwrap();
                *held = Some(next);
                next += 1;
            }
        }
        assert!(
            q.wait(1, Some(WAIT)) >= 1,
            "rank {rank}: no completion within {WAIT:?}"
        );
        let cqes: Vec<_> = q.completion().collect();
        for c in cqes {
            let slot = c.user_data() as usize;
            let i = slot_op[slot].take().unwrap();
            done += 1;
            if c.result() < 0 || c.bytes() != LEN {
                failures.push(format!("rank {rank} op {i}: {c:?}"));
                continue;
            }
            let got = eng.read(buf, slot as u64 * LEN, LEN).unwrap();
            let off = offset_of(i) as usize;
            assert!(
                got[..] == data[off..off + LEN as usize],
                "rank {rank} op {i}: wrong bytes"
            );
        }
    }
    failures
}
