//! Shared harness for the side-by-side peer clients (see
//! `benches/side_by_side.sh` and `docs/benchmarks-side-by-side.md`).
//!
//! Every peer program takes the same positional arguments, does the same
//! workload (N range-gets of S bytes at random S-aligned offsets, C in flight),
//! and prints one JSON line with the same fields, so the script can compare
//! them without knowing anything about the client inside. Only the part that
//! issues one ranged GET differs between peers; it is passed in as a closure.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Error type of the peers: a message is all the script needs (it goes to
/// stderr and the run exits non-zero).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Workload parameters, parsed from the command line.
#[derive(Debug, Clone)]
pub struct Args {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    /// Bucket name (path-style addressing is used by every peer).
    pub bucket: String,
    /// Object key.
    pub key: String,
    /// Size of the object in bytes; offsets are drawn below it.
    pub object_size: u64,
    /// Timed range-gets.
    pub ops: usize,
    /// Bytes per range-get.
    pub range_size: u64,
    /// Range-gets in flight.
    pub concurrency: usize,
    /// Seed of the offset generator (same seed = same offsets for every peer).
    pub seed: u64,
}

const USAGE: &str = "usage: PEER ENDPOINT BUCKET KEY OBJECT_SIZE OPS RANGE_SIZE CONCURRENCY SEED";

impl Args {
    /// Parse `ENDPOINT BUCKET KEY OBJECT_SIZE OPS RANGE_SIZE CONCURRENCY SEED`.
    pub fn from_env() -> Result<Self, BoxError> {
        let v: Vec<String> = std::env::args().skip(1).collect();
        if v.len() != 8 {
            return Err(format!("expected 8 arguments, got {}\n{USAGE}", v.len()).into());
        }
        let num = |i: usize, what: &str| -> Result<u64, BoxError> {
            v[i].parse::<u64>()
                .map_err(|e| format!("{what} {:?}: {e}\n{USAGE}", v[i]).into())
        };
        let a = Args {
            endpoint: v[0].clone(),
            bucket: v[1].clone(),
            key: v[2].clone(),
            object_size: num(3, "OBJECT_SIZE")?,
            ops: usize::try_from(num(4, "OPS")?)?,
            range_size: num(5, "RANGE_SIZE")?,
            concurrency: usize::try_from(num(6, "CONCURRENCY")?)?,
            seed: num(7, "SEED")?,
        };
        if a.range_size == 0 || a.range_size > a.object_size {
            return Err(format!("RANGE_SIZE must be in 1..=OBJECT_SIZE\n{USAGE}").into());
        }
        if a.ops == 0 || a.concurrency == 0 {
            return Err(format!("OPS and CONCURRENCY must be > 0\n{USAGE}").into());
        }
        Ok(a)
    }

    /// The S-aligned start offsets of `n` range-gets, from a splitmix64
    /// stream seeded with `seed` (identical across peers and languages:
    /// boto3_bench.py implements the same generator).
    pub fn offsets(&self, n: usize, seed: u64) -> Vec<u64> {
        let slots = self.object_size / self.range_size;
        let mut state = seed;
        (0..n)
            .map(|_| (splitmix64(&mut state) % slots) * self.range_size)
            .collect()
    }

    /// Access key and secret, from `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
    /// (the script exports the ones it started s3s-fs with).
    pub fn credentials() -> Result<(String, String), BoxError> {
        let k = std::env::var("AWS_ACCESS_KEY_ID").map_err(|_| "AWS_ACCESS_KEY_ID not set")?;
        let s =
            std::env::var("AWS_SECRET_ACCESS_KEY").map_err(|_| "AWS_SECRET_ACCESS_KEY not set")?;
        Ok((k, s))
    }
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, seedable, same in every language.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// User and system CPU seconds of this process so far (`getrusage(RUSAGE_SELF)`).
pub fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (f64::NAN, f64::NAN);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

/// Run `offsets.len()` range-gets with `concurrency` tasks in flight; each
/// task calls `get(offset)` which must return the number of body bytes it
/// received. Returns per-op latencies in microseconds. Fails on the first
/// error or short/long body.
async fn run_phase<F, Fut>(
    offsets: Arc<Vec<u64>>,
    concurrency: usize,
    range_size: u64,
    get: F,
) -> Result<Vec<u64>, BoxError>
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, BoxError>> + Send + 'static,
{
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency.min(offsets.len()) {
        let (offsets, next, get) = (offsets.clone(), next.clone(), get.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(offsets.len() / concurrency + 1);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&off) = offsets.get(i) else { break };
                let t0 = Instant::now();
                let got = get(off).await?;
                lat.push(t0.elapsed().as_micros() as u64);
                if got != range_size {
                    return Err::<Vec<u64>, BoxError>(
                        format!("offset {off}: got {got} bytes, expected {range_size}").into(),
                    );
                }
            }
            Ok(lat)
        }));
    }
    let mut all = Vec::with_capacity(offsets.len());
    for t in tasks {
        all.extend(t.await??);
    }
    Ok(all)
}

/// Warm up, run the timed phase, and print the result line. `client` names
/// the peer in the JSON. `get(offset)` does one ranged GET of
/// `args.range_size` bytes and returns the body length it read.
pub async fn bench<F, Fut>(client: &str, args: &Args, get: F) -> Result<(), BoxError>
where
    F: Fn(u64) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Result<u64, BoxError>> + Send + 'static,
{
    // Warm-up: one op per task, all in flight at once, so the C connections
    // are open and code paths faulted in before timing; not timed.
    let warm = Arc::new(args.offsets(warmup_ops(args), args.seed ^ 0x5741_524D));
    run_phase(warm, args.concurrency, args.range_size, get.clone()).await?;

    let offsets = Arc::new(args.offsets(args.ops, args.seed));
    let (u0, s0) = cpu_times();
    let t0 = Instant::now();
    let mut lat = run_phase(offsets, args.concurrency, args.range_size, get).await?;
    let secs = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu_times();
    lat.sort_unstable();
    println!(
        "{}",
        result_json(client, args, secs, u1 - u0, s1 - s0, &lat)
    );
    Ok(())
}

/// Untimed warm-up range-gets before the timed phase (one per in-flight slot).
pub fn warmup_ops(args: &Args) -> usize {
    args.concurrency
}

/// Nearest-rank percentile of sorted `v` (`p` in 0..=100).
pub fn percentile(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The one JSON line every peer prints (GB = 1e9 bytes).
pub fn result_json(client: &str, a: &Args, secs: f64, user: f64, sys: f64, lat: &[u64]) -> String {
    let ops = a.ops as f64;
    let bytes = ops * a.range_size as f64;
    let cpu = user + sys;
    let mut s = String::new();
    let _ = write!(
        s,
        "{{\"client\":\"{client}\",\"size\":{},\"object_size\":{},\"ops\":{},\"concurrency\":{},\
         \"seconds\":{secs:.6},\"ops_per_s\":{:.1},\"gb_per_s\":{:.4},\"cpu_user_s\":{user:.4},\
         \"cpu_sys_s\":{sys:.4},\"cpu_s_per_op\":{:.9},\"cpu_s_per_gb\":{:.4},\"p50_us\":{},\
         \"p99_us\":{},\"p999_us\":{},\"warmup_ops\":{}}}",
        a.range_size,
        a.object_size,
        a.ops,
        a.concurrency,
        ops / secs,
        bytes / secs / 1e9,
        cpu / ops,
        cpu / (bytes / 1e9),
        percentile(lat, 50.0),
        percentile(lat, 99.0),
        percentile(lat, 99.9),
        warmup_ops(a),
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_reference_vector() {
        // Reference values of splitmix64 seeded with 0 (Vigna's splitmix64.c).
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(&mut s), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(splitmix64(&mut s), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn offsets_are_aligned_and_in_bounds() {
        let a = Args {
            endpoint: String::new(),
            bucket: String::new(),
            key: String::new(),
            object_size: 10 * 4096 + 17,
            ops: 1000,
            range_size: 4096,
            concurrency: 1,
            seed: 7,
        };
        for off in a.offsets(1000, 7) {
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= a.object_size);
        }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[5], 99.9), 5);
    }
}
