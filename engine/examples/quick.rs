//! Manual latency probe: `cargo run -p engine --example quick -- URL BUCKET KEY SIZE N C`.
//!
//! Runs N range-gets of SIZE bytes at offset 0 of `s3://BUCKET/KEY`, C at a time, and prints
//! p50/p99 latency. Credentials and region come from the environment or the `~/.aws` profile,
//! as for the `hipobj` CLI (`AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, …).
use std::process::ExitCode;
use std::time::{Duration, Instant};

use engine::{Engine, Placement, RegisterOptions};
use ring_api::BufSlice;
use ring_api::opcode::RangeGet;

const USAGE: &str = "usage: quick URL BUCKET KEY SIZE N C
  URL     S3 endpoint, e.g. http://127.0.0.1:9000
  SIZE    bytes per range-get, from offset 0 (the object must be at least this large)
  N       range-gets in all
  C       range-gets in flight at once
credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, or AWS_PROFILE / ~/.aws (as the hipobj CLI)";

/// The probe's arguments.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    url: String,
    bucket: String,
    key: String,
    size: u64,
    ops: usize,
    concurrency: usize,
}

/// Parses `URL BUCKET KEY SIZE N C` (without the program name).
fn parse_args(a: &[String]) -> Result<Args, String> {
    let [url, bucket, key, size, ops, concurrency] = a else {
        return Err(format!("expected 6 arguments, got {}", a.len()));
    };
    let positive = |name: &str, v: &str| -> Result<u64, String> {
        match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{name} must be a positive integer, got {v:?}")),
        }
    };
    let size = positive("SIZE", size)?;
    let ops = usize::try_from(positive("N", ops)?).map_err(|e| e.to_string())?;
    let concurrency = positive("C", concurrency)?;
    let concurrency = u32::try_from(concurrency)
        .map_err(|_| format!("C must fit in 32 bits, got {concurrency}"))?
        as usize;
    Ok(Args {
        url: url.clone(),
        bucket: bucket.clone(),
        key: key.clone(),
        size,
        ops,
        concurrency,
    })
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("quick: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("quick: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), String> {
    let (size, n, c) = (a.size, a.ops, a.concurrency);
    let e = Engine::builder()
        .endpoint_url(&a.url)
        .placement(Placement::Workers(1))
        .build()
        .map_err(|e| e.to_string())?;
    let obj = e.object(&a.bucket, &a.key).map_err(|e| e.to_string())?;
    let total = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_mul(c))
        .ok_or("SIZE × C does not fit in memory")?;
    let buf = e
        .register_host(total, RegisterOptions::pageable())
        .map_err(|e| e.to_string())?;
    let mut q = e.queue(c as u32).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let (mut sub, mut done) = (0, 0);
    let mut lat = Vec::with_capacity(n);
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
            .map_err(|e| format!("submitting: {e:?}"))?;
            sub += 1;
        }
        q.wait(1, Some(Duration::from_secs(10)));
        for cqe in q.completion() {
            if !cqe.is_ok() {
                return Err(format!("range-get failed: {:?}", cqe.error_code()));
            }
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn no_arguments_is_a_usage_error_not_a_panic() {
        let e = parse_args(&[]).unwrap_err();
        assert!(e.contains("expected 6 arguments, got 0"), "{e}");
    }

    #[test]
    fn bad_numbers_are_named() {
        let e = parse_args(&strings(&["http://h:1", "b", "k", "4k", "10", "2"])).unwrap_err();
        assert!(e.contains("SIZE"), "{e}");
        let e = parse_args(&strings(&["http://h:1", "b", "k", "4096", "10", "0"])).unwrap_err();
        assert!(e.contains("C must be"), "{e}");
    }

    #[test]
    fn six_arguments_parse() {
        let a = parse_args(&strings(&["http://h:1", "b", "k/x", "4096", "10", "2"])).unwrap();
        assert_eq!((a.size, a.ops, a.concurrency), (4096, 10, 2));
        assert_eq!((a.bucket.as_str(), a.key.as_str()), ("b", "k/x"));
    }

    #[test]
    fn the_source_holds_no_keys() {
        // Keys come from the environment or a profile, never from this file.
        let src = include_str!("quick.rs");
        let banned = ["hipobj", "testkey"].concat();
        assert!(!src.contains(&banned));
        assert!(!src.contains(&["Credentials", "::new"].concat()));
    }
}
