//! Manual latency probe: `cargo run -p engine --example quick -- URL BUCKET KEY SIZE N C`.
use std::time::{Duration, Instant};

use engine::{Engine, Placement, RegisterOptions};
use ring_api::BufSlice;
use ring_api::opcode::RangeGet;
use s3_lite::credentials::Credentials;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (url, bucket, key) = (&a[1], &a[2], &a[3]);
    let size: u64 = a[4].parse().unwrap();
    let n: usize = a[5].parse().unwrap();
    let c: usize = a[6].parse().unwrap();
    let e = Engine::builder()
        .endpoint_url(url)
        .credentials(Credentials::new(
            "hipobjtestkey",
            "hipobjtestsecret/1234567890abcdef",
        ))
        .placement(Placement::Workers(1))
        .build()
        .unwrap();
    let obj = e.object(bucket, key).unwrap();
    let buf = e
        .register_host(c * size as usize, RegisterOptions::pageable())
        .unwrap();
    let mut q = e.queue(c as u32).unwrap();
    let t = Instant::now();
    let (mut sub, mut done) = (0, 0);
    let mut lat = Vec::new();
    let mut started = vec![Instant::now(); c];
    let mut free: Vec<usize> = (0..c).collect();
    while done < n {
        while sub < n {
            let Some(s) = free.pop() else { break };
            started[s] = Instant::now();
            q.push(
                &RangeGet::new(obj, 0, BufSlice::new(buf, s as u64 * size, size))
                    .user_data(s as u64)
                    .build(),
            )
            .unwrap();
            sub += 1;
        }
        q.wait(1, Some(Duration::from_secs(10)));
        for cqe in q.completion() {
            assert!(cqe.is_ok(), "{:?}", cqe.error_code());
            lat.push(started[cqe.user_data() as usize].elapsed());
            free.push(cqe.user_data() as usize);
            done += 1;
        }
    }
    lat.sort();
    println!(
        "{n} ops in {:?}; p50 {:?} p99 {:?}",
        t.elapsed(),
        lat[lat.len() / 2],
        lat[lat.len() * 99 / 100]
    );
}
