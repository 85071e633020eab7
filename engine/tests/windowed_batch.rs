//! The windowed_batch example's core against the real gateway on 127.0.0.1 (soft RDMA
//! target): an object ten times the registered buffer is read range by range through one
//! `AsyncQueue`, slots reused as completions free them; every op must have gone over
//! `rdma-soft` and every byte must match what was uploaded.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
#[path = "../examples/windowed_batch/window.rs"]
mod window;

use std::collections::BTreeSet;
use std::time::Duration;

use engine::{DataPath, Engine, Fabric, WireDialect};
use raw::call;
use rig::{WAIT, pattern};
use window::{BatchReport, Window, read_windowed};

const SLOTS: usize = 4;
const SLOT_LEN: u64 = 16 * 1024;
/// Ten buffers' worth plus a short tail, so the last range is shorter than a slot.
const OBJECT_LEN: usize = 10 * SLOTS * SLOT_LEN as usize + 1234;

fn gateway_with_object() -> (tempfile::TempDir, hipobj_gateway::RunningGateway, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    let addr = gw.local_addr();
    assert_eq!(call(addr, "PUT", "/win", "", &[], b"").status(), 200);
    let data = pattern(OBJECT_LEN, 9);
    let r = call(addr, "PUT", "/win/obj", "", &[], &data);
    assert_eq!(r.status(), 200, "{}", r.text());
    (dir, gw, data)
}

fn window() -> Window {
    Window {
        bucket: "win".into(),
        key: "obj".into(),
        slots: SLOTS,
        slot_len: SLOT_LEN,
        deadline: Duration::from_secs(60),
    }
}

/// Runs the batch, checking each range against `expected` as it completes; returns the
/// report and the set of offsets whose bytes were checked.
async fn run(eng: &Engine, expected: &[u8]) -> Result<(BatchReport, BTreeSet<u64>), String> {
    let mut checked = BTreeSet::new();
    let report = tokio::time::timeout(
        WAIT,
        read_windowed(eng, &window(), |offset, bytes| {
            let want = &expected[offset as usize..offset as usize + bytes.len()];
            if bytes != want {
                return Err(format!("range at {offset}: wrong bytes"));
            }
            checked.insert(offset);
            Ok(())
        }),
    )
    .await
    .map_err(|_| "batch stalled".to_owned())??;
    Ok((report, checked))
}

/// Every op completed over rdma-soft, each range of the object read exactly once with exact
/// bytes, and the four slots were each reused about ten times.
fn assert_whole_object_over_soft(report: &BatchReport, checked: &BTreeSet<u64>) {
    let ranges = (OBJECT_LEN as u64).div_ceil(SLOT_LEN);
    assert_eq!(report.object_len, OBJECT_LEN as u64);
    assert_eq!(report.ops.len() as u64, ranges);
    assert!(ranges >= 10 * SLOTS as u64, "batch must be 10x the buffer");
    let expected_offsets: BTreeSet<u64> = (0..ranges).map(|i| i * SLOT_LEN).collect();
    assert_eq!(*checked, expected_offsets, "every range checked once");
    let total: u64 = report.ops.iter().map(|o| o.len).sum();
    assert_eq!(total, OBJECT_LEN as u64);
    for op in &report.ops {
        assert_eq!(
            op.path,
            Some(DataPath::RdmaSoft),
            "op at {}: {op:?}",
            op.offset
        );
        assert_ne!(op.dialect, Some(WireDialect::Http), "op at {}", op.offset);
        assert!(op.slot < SLOTS as u64);
    }
    for slot in 0..SLOTS as u64 {
        let uses = report.ops.iter().filter(|o| o.slot == slot).count();
        assert!(
            uses >= 2,
            "slot {slot} used {uses} times: slots were not reused"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_ten_times_the_buffer_reads_every_byte_over_rdma_soft() {
    let (_dir, gw, data) = gateway_with_object();
    // `Soft`, not `Auto`: Auto sends ops over HTTP while a pairing takes longer than its
    // 150 ms wait, which a loaded CI machine can exceed; the path check would then fail.
    let eng = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .placement(engine::Placement::Workers(2))
        .build()
        .unwrap();
    let (report, checked) = run(&eng, &data).await.unwrap();
    eprintln!("{} ops, paths {:?}", report.ops.len(), report.by_path());
    assert_whole_object_over_soft(&report, &checked);
}

/// The checks catch what they claim to: a pattern that differs in one byte fails the batch,
/// and an engine on the HTTP fabric fails the path check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bytes_and_wrong_path_are_caught() {
    let (_dir, gw, mut data) = gateway_with_object();
    let soft = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    data[OBJECT_LEN - 7] ^= 1;
    let err = run(&soft, &data).await.unwrap_err();
    assert!(err.contains("wrong bytes"), "{err}");
    data[OBJECT_LEN - 7] ^= 1;

    let http = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    let (report, checked) = run(&http, &data).await.unwrap();
    let caught = std::panic::catch_unwind(|| assert_whole_object_over_soft(&report, &checked));
    assert!(
        caught.is_err(),
        "an all-HTTP batch passed the rdma-soft check"
    );
    assert!(report.ops.iter().all(|o| o.path == Some(DataPath::Http)));
}

/// A missing key ends the batch with the decoded NotFound, not a hang or a panic.
#[tokio::test]
async fn missing_object_is_a_clear_error() {
    let (_dir, gw, _) = gateway_with_object();
    let eng = rig::engine_builder(gw.local_addr()).build().unwrap();
    let mut w = window();
    w.key = "nope".into();
    let err = tokio::time::timeout(WAIT, read_windowed(&eng, &w, |_, _| Ok(())))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.to_lowercase().contains("not found"), "{err}");
}
