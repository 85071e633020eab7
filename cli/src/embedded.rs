//! `hipobj bench --embedded`: the main job, self-contained on one machine.
//!
//! Starts the gateway in this process on 127.0.0.1 over a temporary directory, uploads a
//! synthetic safetensors-style model (≥ 1 GiB by default) through the S3 API, then runs a batch
//! of range-gets of mixed sizes (whole tensors and slices of tensors) through the engine into
//! registered memory, verifies every byte of every range, and prints a results table that names
//! the path that carried the bytes.
//!
//! The bytes move over the soft RDMA fabric (`path: rdma-soft`): the gateway runs the soft
//! target (`rc-persistent` dialect) and the engine pairs with it once per worker; every
//! range-get is one HTTP request whose bytes are RDMA-written into registered memory.
//! `HIPOBJ_EMBEDDED_FABRIC=http` forces the HTTP body path (for comparison). GPU memory comes
//! with the GPU issue (`memory: cuda|hip`).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use engine::{Engine, RegisterOptions, process_cpu_time};
use hipobj_gateway::{Gateway, SoftLimits, SoftTarget};
use rand::{Rng, SeedableRng};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, Cqe, DataPath};
use s3_lite::credentials::Credentials;
use s3_lite::s3::Endpoint;

use crate::bench::BenchArgs;
use crate::client::{ClientSettings, S3Client};
use crate::net::tls::TlsOptions;
use crate::net::transport::Timeouts;
use crate::synthetic::SyntheticModel;
use crate::units::format_bytes;

/// Largest single range-get: one registered slot per in-flight operation.
const SLOT: u64 = 4 << 20;
const BUCKET: &str = "models";
const KEY: &str = "synthetic/model.safetensors";

/// Results of the embedded run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EmbeddedReport {
    /// Object size in bytes.
    pub object_size: u64,
    /// Tensors in the object.
    pub tensors: usize,
    /// Upload time (multipart PUT through the gateway), seconds.
    pub upload_s: f64,
    /// Range-gets completed.
    pub ops: u64,
    /// Range-gets that failed (any error, including a byte mismatch).
    pub errors: u64,
    /// Bytes read and verified.
    pub bytes_verified: u64,
    /// In flight at once.
    pub concurrency: u32,
    /// Timed phase, seconds.
    pub elapsed_s: f64,
    /// Range-gets per second.
    pub ops_per_s: f64,
    /// Payload GB (10^9 bytes) per second.
    pub gb_per_s: f64,
    /// Latency percentiles, microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Client process CPU over the timed phase (gateway threads included: same process), seconds.
    pub cpu_s: f64,
    /// Destination memory kind.
    pub memory: &'static str,
    /// Bytes carried per path (`http`, `rdma-soft`, `rdma-verbs`).
    pub paths: Vec<(&'static str, u64)>,
}

fn path_name(p: Option<DataPath>) -> &'static str {
    match p {
        Some(DataPath::Http) => "http",
        Some(DataPath::RdmaSoft) => "rdma-soft",
        Some(DataPath::RdmaVerbs) => "rdma-verbs",
        _ => "none",
    }
}

fn bar(len: u64, template: &str, show: bool) -> Option<indicatif::ProgressBar> {
    show.then(|| {
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    })
}

/// Runs the embedded main job; returns the exit code (0: every range arrived and verified).
pub fn run(args: &BenchArgs, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    match measure(args, stderr) {
        Ok(report) => {
            let printed = if args.json { print_json(&report, stdout) } else { print_table(&report, stdout) };
            if let Err(e) = printed {
                let _ = writeln!(stderr, "hipobj bench --embedded: writing the report: {e}");
                return 1;
            }
            i32::from(report.errors > 0)
        }
        Err(msg) => {
            let _ = writeln!(stderr, "hipobj bench --embedded: {msg}");
            1
        }
    }
}

/// One range-get of the workload: a whole tensor (when it fits a slot) or a slice of one.
fn pick_range(model: &SyntheticModel, rng: &mut rand::rngs::StdRng) -> (u64, u64) {
    let t = &model.tensors[rng.random_range(0..model.tensors.len())];
    if t.len <= SLOT && rng.random_bool(0.5) {
        return (t.offset, t.len);
    }
    // A slice: 1 byte .. min(tensor, slot), anywhere inside the tensor.
    let max = t.len.min(SLOT);
    let len = match rng.random_range(0..4) {
        0 => rng.random_range(1..=4096.min(max)),
        1 => rng.random_range(1..=(64 << 10).min(max)),
        _ => rng.random_range(1..=max),
    };
    (t.offset + rng.random_range(0..=t.len - len), len)
}

fn measure(args: &BenchArgs, stderr: &mut dyn Write) -> Result<EmbeddedReport, String> {
    let show = !args.json && !args.no_progress && std::io::stderr().is_terminal();
    let dir = tempfile::Builder::new().prefix("hipobj-embedded-").tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let access = "hipobj-embedded";
    let secret: String = {
        let mut rng = rand::rng();
        (0..32).map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)])).collect()
    };
    let http_only = std::env::var("HIPOBJ_EMBEDDED_FABRIC").is_ok_and(|v| v.eq_ignore_ascii_case("http"));
    let soft = SoftTarget::start("127.0.0.1:0".parse().map_err(|e| format!("{e}"))?, SoftLimits::default())
        .map_err(|e| format!("starting the soft fabric: {e}"))?;
    let gateway = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(access, secret.clone())
        .rdma_target(soft)
        .start()
        .map_err(|e| format!("starting the embedded gateway: {e}"))?;
    let url = format!("http://{}", gateway.local_addr());
    let credentials = Credentials::new(access, secret);

    // The model object, uploaded through the S3 API (multipart, CRC64NVME per part).
    let model = SyntheticModel::new(args.object_size, args.seed);
    let _ = writeln!(
        stderr,
        "embedded gateway on {url}; uploading a {} synthetic model ({} tensors)",
        format_bytes(model.size),
        model.tensors.len()
    );
    let mut client = S3Client::new(ClientSettings {
        endpoint: Endpoint::parse(&url).map_err(|e| e.to_string())?,
        credentials: credentials.clone(),
        region: "us-east-1".into(),
        tls: TlsOptions::default(),
        timeouts: Timeouts { connect: Duration::from_secs(5), io: Duration::from_secs(120) },
    })
    .map_err(|e| e.to_string())?;
    client.create_bucket(BUCKET).map_err(|e| format!("create bucket: {e}"))?;
    let upload_bar = bar(model.size, "upload   [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}", show);
    let t_up = Instant::now();
    client
        .put_multipart(BUCKET, KEY, &mut model.reader(), model.size, 64 << 20, &mut |n| {
            if let Some(b) = &upload_bar {
                b.inc(n);
            }
        })
        .map_err(|e| format!("uploading the model: {e}"))?;
    let upload_s = t_up.elapsed().as_secs_f64();
    if let Some(b) = upload_bar {
        b.finish_and_clear();
    }

    // The engine, pointed at the gateway, one registered slot per operation in flight.
    let conc = u64::from(args.concurrency.max(1));
    let engine = Engine::builder()
        .endpoint_url(&url)
        .credentials(credentials)
        .region("us-east-1")
        .connections_per_worker(conc as usize)
        .fabric(if http_only { engine::Fabric::Http } else { engine::Fabric::Soft })
        .build()
        .map_err(|e| e.to_string())?;
    let obj = engine.object(BUCKET, KEY).map_err(|e| e.to_string())?;
    let total = usize::try_from(conc * SLOT).map_err(|_| "--concurrency too large")?;
    let opts = if args.pinned { RegisterOptions::pinned() } else { RegisterOptions::pageable() };
    let buf = engine.register_host(total, opts).map_err(|e| e.to_string())?;
    let mut q = engine.queue(u32::try_from(conc).unwrap_or(u32::MAX)).map_err(|e| e.to_string())?;

    let ops_bar = bar(args.ops, "range-gets [{bar:40}] {pos}/{len} {per_sec} eta {eta}", show);
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut slots: Vec<Option<(u64, u64, Instant)>> = vec![None; conc as usize];
    let mut free: Vec<u64> = (0..conc).rev().collect();
    let mut cqes = vec![Cqe::default(); conc as usize];
    let mut lat_ns = Vec::with_capacity(usize::try_from(args.ops).unwrap_or(0));
    let (mut submitted, mut done, mut errors, mut verified) = (0u64, 0u64, 0u64, 0u64);
    let mut paths: Vec<(&'static str, u64)> = Vec::new();
    let cpu0 = process_cpu_time();
    let t0 = Instant::now();
    while done < args.ops {
        {
            let mut sq = q.submission();
            while submitted < args.ops {
                let Some(slot) = free.pop() else { break };
                let (offset, len) = pick_range(&model, &mut rng);
                let sqe = RangeGet::new(obj, offset, BufSlice::new(buf, slot * SLOT, len)).user_data(slot).build();
                if sq.push(&sqe).is_err() {
                    free.push(slot);
                    break;
                }
                slots[slot as usize] = Some((offset, len, Instant::now()));
                submitted += 1;
            }
        }
        if q.wait(1, Some(Duration::from_secs(120))) == 0 {
            return Err(format!("no completion within 120 s ({done} of {} done)", args.ops));
        }
        let n = q.reap(&mut cqes);
        let now = Instant::now();
        for c in cqes.iter().take(n) {
            let slot = c.user_data();
            let Some((offset, len, started)) = slots.get_mut(slot as usize).and_then(Option::take) else {
                return Err(format!("completion for unknown slot {slot}"));
            };
            lat_ns.push(now.duration_since(started).as_nanos() as u64);
            done += 1;
            let good = c.is_ok() && c.bytes() == len && {
                let view = engine.read(buf, slot * SLOT, len).map_err(|e| e.to_string())?;
                match model.first_mismatch(offset, &view) {
                    None => true,
                    Some(i) => {
                        let _ = writeln!(stderr, "byte mismatch at object offset {}", offset + i as u64);
                        false
                    }
                }
            };
            if good {
                verified += len;
                let name = path_name(c.path());
                match paths.iter_mut().find(|(p, _)| *p == name) {
                    Some((_, b)) => *b += len,
                    None => paths.push((name, len)),
                }
            } else {
                errors += 1;
                if !c.is_ok() {
                    let _ = writeln!(stderr, "range-get {offset}+{len} failed: {:?}", c.error_code());
                }
            }
            free.push(slot);
        }
        if let Some(b) = &ops_bar {
            b.set_position(done);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu_s = process_cpu_time().saturating_sub(cpu0).as_secs_f64();
    if let Some(b) = ops_bar {
        b.finish_and_clear();
    }
    drop(q);
    drop(engine);
    gateway.shutdown();
    lat_ns.sort_unstable();
    let pct = |p: f64| {
        let i = ((lat_ns.len() as f64 * p).ceil() as usize).saturating_sub(1);
        lat_ns.get(i.min(lat_ns.len().saturating_sub(1))).map_or(0.0, |&ns| ns as f64 / 1000.0)
    };
    Ok(EmbeddedReport {
        object_size: model.size,
        tensors: model.tensors.len(),
        upload_s,
        ops: done,
        errors,
        bytes_verified: verified,
        concurrency: args.concurrency,
        elapsed_s: elapsed,
        ops_per_s: done as f64 / elapsed.max(1e-9),
        gb_per_s: verified as f64 / 1e9 / elapsed.max(1e-9),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        cpu_s,
        memory: "host",
        paths,
    })
}

fn print_json(r: &EmbeddedReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "{}", serde_json::to_string(r).map_err(std::io::Error::other)?)
}

fn ms(us: f64) -> String {
    if us >= 1000.0 { format!("{:.2} ms", us / 1000.0) } else { format!("{us:.1} µs") }
}

fn print_table(r: &EmbeddedReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(out, "hipobj bench --embedded: {} range-gets of a {} model ({} tensors)", r.ops, format_bytes(r.object_size), r.tensors)?;
    writeln!(out, "  {:<22} {:>16}", "metric", "value")?;
    let rows: Vec<(&str, String)> = vec![
        ("upload (multipart)", format!("{:.2} s", r.upload_s)),
        ("range-gets", r.ops.to_string()),
        ("errors", r.errors.to_string()),
        ("bytes verified", format_bytes(r.bytes_verified)),
        ("concurrency", r.concurrency.to_string()),
        ("elapsed", format!("{:.2} s", r.elapsed_s)),
        ("ops/s", format!("{:.0}", r.ops_per_s)),
        ("GB/s", format!("{:.3}", r.gb_per_s)),
        ("p50 latency", ms(r.p50_us)),
        ("p99 latency", ms(r.p99_us)),
        ("CPU (client+gateway)", format!("{:.2} s", r.cpu_s)),
        ("memory", r.memory.to_string()),
    ];
    for (k, v) in rows {
        writeln!(out, "  {k:<22} {v:>16}")?;
    }
    for (path, bytes) in &r.paths {
        writeln!(out, "  {:<22} {:>16}", format!("path {path}"), format_bytes(*bytes))?;
    }
    Ok(())
}
