//! Soft fabric: 64 × 1 MiB RDMA WRITEs over loopback against raw loopback TCP moving the same
//! bytes between the same kind of buffers (issue 4 goal: soft ≥ 90% of raw).
//!
//! Throughput is in bytes, so criterion reports GB/s for both; their ratio is the number
//! recorded in `docs/soft-fabric.md`. Each iteration ends with a round trip on both sides (the
//! last ACK; a one-byte reply), so neither measures data still sitting in socket buffers.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::soft::{
    Access, QpCaps, RemoteAddr, SendOp, SendWr, Sge, WcStatus, WorkCompletion, loopback_pair,
};

const MIB: usize = 1 << 20;
const WRITES: usize = 64;

fn soft_vs_raw(c: &mut Criterion) {
    let mut group = c.benchmark_group("soft_fabric_1MiB_writes");
    group.throughput(Throughput::Bytes((WRITES * MIB) as u64));
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(8));

    let (a, b) = loopback_pair(QpCaps::default()).expect("pair");
    let src =
        a.pd.register_owned(WRITES * MIB, Access::NONE)
            .expect("src");
    let dst =
        b.pd.register_owned(WRITES * MIB, Access::REMOTE_WRITE)
            .expect("dst");
    src.write(0, &vec![0x5a; WRITES * MIB]).expect("fill");
    group.bench_function("soft_rdma_write", |bench| {
        let mut wc = [WorkCompletion::default(); 64];
        bench.iter(|| {
            for i in 0..WRITES {
                let off = (i * MIB) as u64;
                let r = RemoteAddr {
                    addr: dst.addr() + off,
                    rkey: dst.rkey(),
                };
                let sge = Sge {
                    addr: src.addr() + off,
                    length: MIB as u32,
                    lkey: src.lkey(),
                };
                a.qp.post_send(&SendWr::new(i as u64, SendOp::Write(r), sge))
                    .expect("post");
            }
            let mut got = 0;
            while got < WRITES {
                a.cq.wait(Duration::from_secs(10));
                let n = a.cq.poll(&mut wc);
                assert!(wc[..n].iter().all(|w| w.status == WcStatus::Success));
                got += n;
            }
        });
    });

    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let addr = l.local_addr().expect("addr");
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let sink = std::thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = vec![0u8; WRITES * MIB];
        loop {
            for chunk in buf.chunks_mut(MIB) {
                if s.read_exact(chunk).is_err() {
                    return;
                }
            }
            if s.write_all(&[1]).is_err() || stop_rx.try_recv().is_ok() {
                return;
            }
        }
    });
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let data = vec![0x5au8; WRITES * MIB];
    group.bench_function("raw_tcp", |bench| {
        bench.iter(|| {
            for chunk in data.chunks(MIB) {
                s.write_all(chunk).expect("write");
            }
            let mut ack = [0u8; 1];
            s.read_exact(&mut ack).expect("ack");
        });
    });
    group.finish();
    let _ = stop_tx.send(());
    drop(s);
    let _ = sink.join();
}

criterion_group!(benches, soft_vs_raw);
criterion_main!(benches);
