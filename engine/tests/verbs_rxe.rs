//! Real verbs RC traffic on an RDMA device: Soft-RoCE (`rxe0`) inside the VM lane
//! (`benches/rxe/run-lane.sh`), or a NIC named by `ENGINE_TEST_NIC`. `#[ignore]`d: hosts
//! without RDMA (CI's own kernel) cannot run them; the lane runs them with `--ignored`.
//!
//! Two RC queue pairs on one device, connected to each other through RC tokens encoded to the
//! 88-hex wire form and back (as the dialects exchange them), move bytes with RDMA WRITE,
//! WRITE_WITH_IMM + RECV, READ and a batched WRITE, each checked byte-exact; then an rkey the
//! peer never granted must fail with REM_ACCESS_ERR. The goodput test prints the WRITE rate
//! the lane compares with `ib_write_bw`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::verbs::{
    Access, CompletionQueue, Context, Error, MemoryRegion, QpCaps, QpState, QueuePair, RecvWr,
    SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use s3_lite::rdma::RcToken;

const WAIT: Duration = Duration::from_secs(60);

fn device() -> String {
    std::env::var("ENGINE_TEST_NIC").unwrap_or_else(|_| "rxe0".to_string())
}

struct Side {
    qp: QueuePair,
    cq: Arc<CompletionQueue>,
}

fn full_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ
}

/// Two RC QPs on `ctx`, connected to each other with random PSNs through encoded tokens.
fn pair(ctx: &Arc<Context>, pd: &engine::verbs::ProtectionDomain, depth: u32) -> (Side, Side) {
    let caps = QpCaps {
        max_send_wr: depth,
        max_recv_wr: depth,
        port: 1,
        posts_reads: true,
    };
    let mk = || {
        let cq = ctx.create_cq(depth * 2).expect("create_cq");
        let qp = ctx.create_qp(pd, &cq, &cq, caps).expect("create_qp");
        assert_eq!(qp.state(), QpState::Reset);
        qp.modify_to_init(full_access()).expect("INIT");
        Side { qp, cq }
    };
    let (a, b) = (mk(), mk());
    let wire = |s: &Side| RcToken::decode(&s.qp.local_token(None).unwrap().encode()).unwrap();
    let (ta, tb) = (wire(&a), wire(&b));
    let psn_a = rand::random::<u32>() & 0x00ff_ffff;
    let psn_b = rand::random::<u32>() & 0x00ff_ffff;
    a.qp.connect(&tb, psn_b, psn_a).expect("connect a");
    b.qp.connect(&ta, psn_a, psn_b).expect("connect b");
    assert_eq!(a.qp.state(), QpState::Rts);
    assert_eq!(b.qp.query_state(), Some(QpState::Rts));
    (a, b)
}

fn wait_one(cq: &CompletionQueue) -> WorkCompletion {
    let mut wc = [WorkCompletion::default(); 1];
    let n = cq.poll_wait(&mut wc, WAIT).expect("poll_cq");
    assert_eq!(n, 1, "no completion within {WAIT:?}");
    wc[0]
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn region(pd: &engine::verbs::ProtectionDomain, len: usize) -> MemoryRegion {
    pd.register_owned(len, full_access()).expect("reg_mr")
}

#[test]
#[ignore = "needs an RDMA device (run by benches/rxe/run-lane.sh inside the Soft-RoCE VM)"]
fn rc_write_write_imm_read_byte_exact() {
    const LEN: usize = 1 << 20;
    let ctx = Context::open(Some(&device())).expect("open device");
    let port = ctx.query_port(1).unwrap();
    println!(
        "device {} vendor {:?} port1 active={} active_mtu={} B gid {}",
        ctx.name(),
        ctx.vendor().vendor,
        port.active,
        port.path_mtu(None).bytes(),
        ctx.choose_gid(1).unwrap()
    );
    let pd = ctx.alloc_pd().unwrap();
    let (a, b) = pair(&ctx, &pd, 64);
    let src = region(&pd, LEN);
    // Relaxed ordering is an optional flag: registered through ibv_reg_mr_iova2, and a
    // provider without it (rxe) ignores it.
    let dst = pd
        .register_owned(LEN, full_access() | Access::RELAXED_ORDERING)
        .expect("reg_mr with relaxed ordering");
    let back = region(&pd, LEN);
    let data = pattern(LEN, 7);
    src.write(0, &data).unwrap();

    // RDMA WRITE, 1 MiB, A → B's region.
    let sge = src.sge(0, LEN as u32).unwrap();
    a.qp.post_send(&SendWr::new(1, SendOp::Write(dst.remote(0)), sge))
        .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert!(
        dst.to_vec(0, LEN).unwrap() == data,
        "RDMA WRITE bytes differ"
    );

    // WRITE_WITH_IMM + RECV: 64 KiB of a second pattern at offset 4096, immediate 0xC0FFEE.
    let data2 = pattern(65536, 99);
    src.write(0, &data2).unwrap();
    b.qp.post_recv(&RecvWr {
        wr_id: 77,
        sge: None,
    })
    .unwrap();
    let sge = src.sge(0, 65536).unwrap();
    a.qp.post_send(&SendWr::new(
        2,
        SendOp::WriteWithImm(dst.remote(4096), 0x00c0_ffee),
        sge,
    ))
    .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    let rc = wait_one(&b.cq);
    assert_eq!(rc.wr_id, 77);
    assert_eq!(rc.status, WcStatus::Success);
    assert_eq!(rc.opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(rc.imm_data, Some(0x00c0_ffee));
    assert_eq!(rc.byte_len, 65536);
    assert_eq!(rc.qp_num, b.qp.qpn());
    assert!(
        dst.to_vec(4096, 65536).unwrap() == data2,
        "WRITE_WITH_IMM bytes differ"
    );
    assert!(
        dst.to_vec(0, 4096).unwrap() == data[..4096],
        "bytes before the window changed"
    );

    // RDMA READ, 1 MiB: B reads A's `dst` into `back`.
    let want = dst.to_vec(0, LEN).unwrap();
    let sge = back.sge(0, LEN as u32).unwrap();
    b.qp.post_send(&SendWr::new(3, SendOp::Read(dst.remote(0)), sge))
        .unwrap();
    let wc = wait_one(&b.cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (3, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert!(
        back.to_vec(0, LEN).unwrap() == want,
        "RDMA READ bytes differ"
    );

    // One doorbell for four 256 KiB WRITEs; only the last is signaled (RC ordering: its
    // completion implies the earlier ones landed).
    let data3 = pattern(LEN, 201);
    src.write(0, &data3).unwrap();
    let mut qa = a.qp;
    {
        let mut batch = qa.batch();
        for i in 0..4u64 {
            let off = i * (LEN as u64 / 4);
            let mut wr = SendWr::new(
                10 + i,
                SendOp::Write(back.remote(off)),
                src.sge(off, (LEN / 4) as u32).unwrap(),
            );
            wr.signaled = i == 3;
            batch.push(&wr).unwrap();
        }
        assert_eq!(batch.len(), 4);
        batch.post().unwrap();
    }
    let wc = wait_one(&a.cq);
    assert_eq!((wc.wr_id, wc.status), (13, WcStatus::Success));
    assert!(
        back.to_vec(0, LEN).unwrap() == data3,
        "batched WRITE bytes differ"
    );

    // An rkey nobody granted: the responder refuses, the initiator sees REM_ACCESS_ERR and
    // the QP leaves RTS.
    let mut bogus = dst.remote(0);
    bogus.rkey ^= 0x5a5a_0000;
    qa.post_send(&SendWr::new(
        20,
        SendOp::Write(bogus),
        src.sge(0, 4096).unwrap(),
    ))
    .unwrap();
    let wc = wait_one(&a.cq);
    assert_eq!(wc.wr_id, 20);
    assert_eq!(wc.status, WcStatus::RemoteAccessError, "{wc:?}");
    assert_eq!(qa.query_state(), Some(QpState::Err));
    println!(
        "RC WRITE / WRITE_WITH_IMM+RECV / READ / batched WRITE verified byte-exact; bad rkey refused"
    );
}

#[test]
#[ignore = "needs an RDMA device (run by benches/rxe/run-lane.sh inside the Soft-RoCE VM)"]
fn modify_qp_errors_are_actionable() {
    let ctx = Context::open(Some(&device())).expect("open device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = ctx.create_qp(&pd, &cq, &cq, QpCaps::default()).unwrap();
    // Caught by the table before the kernel is called.
    let e = qp
        .modify_to_rts(&engine::verbs::RtsAttr::new(1))
        .unwrap_err();
    assert!(matches!(e, Error::Mask(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("cannot go from Reset to Rts (go through INIT first)"),
        "{e}"
    );
    // A value the device refuses: rxe allows 128 outstanding READs per QP (RXE_MAX_QP_RD_ATOM),
    // so max_rd_atomic 255 passes the mask table and gets EINVAL from the kernel. The QP is
    // connected to itself (its own token) only to reach RTR.
    qp.modify_to_init(full_access()).unwrap();
    let port = ctx.query_port(1).unwrap();
    let me = qp.local_token(None).unwrap();
    qp.modify_to_rtr(&engine::verbs::RtrAttr::from_token(&me, 0, &port).unwrap())
        .expect("RTR");
    let rts = engine::verbs::RtsAttr {
        max_rd_atomic: 255,
        ..engine::verbs::RtsAttr::new(0)
    };
    match qp.modify_to_rts(&rts) {
        Err(Error::ModifyQp {
            detail,
            from,
            to,
            source,
            ..
        }) => {
            println!("diagnosis: {detail}");
            assert_eq!((from, to), (QpState::Rtr, QpState::Rts));
            assert_eq!(source.raw_os_error(), Some(libc_einval()));
            assert!(detail.contains("the device refused a value"), "{detail}");
            assert!(detail.contains("max_rd_atomic"), "{detail}");
        }
        other => panic!("expected EINVAL from modify_qp, got {other:?}"),
    }
    assert_eq!(
        qp.state(),
        QpState::Rtr,
        "a refused transition leaves the state as it was"
    );
}

fn libc_einval() -> i32 {
    22
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// WRITE goodput at one message size: `iters` WRITEs A → B with up to `depth` outstanding,
/// every `signal`-th (and the last) signaled as perftest's `cq_mod` does, timed from the first
/// post to the last completion (what `ib_write_bw` reports). RC completes in order, so a
/// completion for WR `i` retires every WR up to `i`.
fn write_goodput(
    a: &Side,
    src: &MemoryRegion,
    dst: &MemoryRegion,
    size: usize,
    iters: usize,
    depth: usize,
    signal: usize,
) -> f64 {
    let sge = src.sge(0, size as u32).unwrap();
    let mut wcs = [WorkCompletion::default(); 32];
    let (mut posted, mut done) = (0usize, 0usize);
    let start = Instant::now();
    while done < iters {
        while posted < iters && posted - done < depth {
            let mut wr = SendWr::new(posted as u64, SendOp::Write(dst.remote(0)), sge);
            wr.signaled = (posted + 1) % signal == 0 || posted + 1 == iters;
            a.qp.post_send(&wr).expect("post WRITE");
            posted += 1;
        }
        let n = a.cq.poll(&mut wcs).expect("poll");
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            done = done.max(wc.wr_id as usize + 1);
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "goodput run stalled"
        );
    }
    let secs = start.elapsed().as_secs_f64();
    (size * iters) as f64 / secs / (1u64 << 20) as f64
}

#[test]
#[ignore = "needs an RDMA device (run by benches/rxe/run-lane.sh inside the Soft-RoCE VM)"]
fn rc_write_goodput() {
    // "size[:iterations],..."; iterations default to VERBS_BENCH_BYTES / size.
    let total = env_usize("VERBS_BENCH_BYTES", 64 << 20);
    let runs: Vec<(usize, usize)> = std::env::var("VERBS_BENCH_SIZES")
        .unwrap_or_else(|_| "65536,1048576".into())
        .split(',')
        .filter_map(|item| {
            let mut it = item.trim().splitn(2, ':');
            let size: usize = it.next()?.parse().ok().filter(|s| *s > 0)?;
            let iters = match it.next() {
                Some(n) => n.parse().ok()?,
                None => (total / size).max(1),
            };
            Some((size, iters))
        })
        .collect();
    let depth = env_usize("VERBS_BENCH_DEPTH", 128);
    let signal = env_usize("VERBS_BENCH_SIGNAL", 32).clamp(1, depth.max(1));
    let ctx = Context::open(Some(&device())).expect("open device");
    let pd = ctx.alloc_pd().unwrap();
    let (a, _b) = pair(&ctx, &pd, depth as u32);
    let max = runs.iter().map(|r| r.0).max().unwrap_or(1 << 20);
    let src = region(&pd, max);
    let dst = region(&pd, max);
    src.write(0, &pattern(max, 3)).unwrap();
    println!();
    for (size, iters) in runs {
        let depth = depth.min(iters);
        let mibps = write_goodput(&a, &src, &dst, size, iters, depth, signal.min(depth));
        assert!(dst.to_vec(0, size).unwrap() == src.to_vec(0, size).unwrap());
        // Parsed by benches/rxe/run-lane.sh (MiB/s, as ib_write_bw's "MB/sec").
        println!(
            "VERBS_WRITE_BW size={size} iters={iters} depth={depth} signal={} MiBps={mibps:.2}",
            signal.min(depth)
        );
    }
    // What a per-op window costs (the engine registers each op's exact range and deregisters
    // it when the op ends): ibv_reg_mr + ibv_dereg_mr of caller memory, per size.
    let mem = vec![0u8; max];
    for size in [65536usize, 1 << 20] {
        if size > max {
            continue;
        }
        let n = 200;
        let t = std::time::Instant::now();
        for _ in 0..n {
            let ptr = std::ptr::NonNull::new(mem.as_ptr().cast_mut()).unwrap();
            // SAFETY: `mem` outlives the region (dropped at the end of this iteration) and
            // nothing else accesses it meanwhile.
            #[allow(unsafe_code)]
            let mr = unsafe { pd.register_raw(ptr, size, full_access()) }.expect("reg_mr");
            drop(mr);
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        println!("VERBS_REG_DEREG size={size} us={us:.1}");
    }
}
