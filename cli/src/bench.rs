//! `hipobj bench`: N range-gets of S bytes at random S-aligned offsets of one object, at most C
//! in flight, through the engine; prints ops/s, GB/s, latency percentiles and client CPU.
//!
//! Flags shared with the global set (`--endpoint-url`, `--region`, `--json`, `--no-progress`)
//! are not declared here, because clap refuses a subcommand argument with the name of a global
//! one: `main` copies the global values in with [`BenchArgs::with_global`].

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::gpu::{Backend, DeviceBuffer, GpuError, GpuRuntime};
use engine::{Engine, Placement, RegisterOptions, process_cpu_time};
use ring_api::opcode::{Head, RangeGet};
use ring_api::{BufSlice, Cqe, ErrorCode};

// `crate::paths` (the loader's), so engine/tests/bench_cli.rs can compile this file on its own.
pub use crate::paths::{add_path_bytes, dialect_name, parse_dialect, path_name};

/// Arguments of `hipobj bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// The object to read: s3://BUCKET/KEY (must exist and hold at least --size bytes).
    #[arg(required_unless_present = "embedded")]
    pub uri: Option<String>,
    /// Self-contained run: an in-process gateway over a temporary directory, a synthetic
    /// safetensors-style model uploaded to it, and a batch of mixed-size range-gets verified byte
    /// for byte (the README's main job). --ops defaults to 10,000; --size is not used.
    #[arg(long)]
    pub embedded: bool,
    /// Size of the synthetic model for --embedded.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub object_size: u64,
    /// Number of range-gets.
    #[arg(long, default_value_t = 10_000)]
    pub ops: u64,
    /// Bytes per range-get: a number with an optional unit (4KiB, 64KiB, 1MiB, 16MiB).
    #[arg(long, default_value = "64KiB", value_parser = parse_size)]
    pub size: u64,
    /// Range-gets in flight at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Seed of the offset sequence (same seed, same offsets).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Worker threads (default: the engine's `Placement::Auto`: per RDMA NIC, or per NUMA node,
    /// one worker per core the process may run on, up to 16 each). Every worker runs range-gets
    /// of the one queue; the report prints how many there were.
    #[arg(long)]
    pub workers: Option<usize>,
    /// Workers per RDMA NIC under the engine's `Placement::Auto` (`EngineBuilder::workers_per_nic`;
    /// default: the engine's). Not with --workers.
    #[arg(long, conflicts_with = "workers")]
    pub workers_per_nic: Option<usize>,
    /// Run as if this host had N RDMA NICs, one soft device each (`--fabric soft` only): the
    /// engine reads a synthesized topology (one NUMA node with this host's online CPUs and N
    /// NICs `softnic0..` behind one PCIe switch; `cli/src/soft_nics.rs`), plans workers per
    /// NIC (splitting the cores between them) and stripes range-gets of at least the striping
    /// threshold across the NICs. The report's `nics` gives the bytes each NIC's workers moved.
    /// Compare N = 1 and N = 2 with the same batch (benches/gpu/soft_nics_on_device.sh).
    #[arg(long, conflicts_with = "workers")]
    pub soft_nics: Option<usize>,
    /// Lock the destination buffer in RAM (mlock; falls back to pageable with a warning).
    #[arg(long)]
    pub pinned: bool,
    /// Untimed warm-up range-gets before the timed phase (default: 2 x --concurrency). They open
    /// the connections and warm caches, so the timed phase measures steady state like the peers
    /// of `benches/side_by_side.sh`; reported as `warmup_ops`.
    #[arg(long)]
    pub warmup: Option<u64>,
    /// Destination memory: `host` (registered host memory), `cuda` / `hip` (VRAM, staged by
    /// the engine through pinned bounce memory and async copies on its own stream, each
    /// completion posted after its copy into VRAM; fails with "no GPU runtime" on hosts
    /// without one), `auto` (the GPU when a runtime and a device are present, else host).
    #[arg(long, value_enum, default_value_t = MemoryKind::Host)]
    pub memory: MemoryKind,
    /// --embedded only: read the model front to back in ranges of exactly this size (the last
    /// one shorter), wrapping around until --ops, instead of the mixed whole-tensor/slice
    /// workload.
    #[arg(long, value_parser = parse_size)]
    pub range_size: Option<u64>,
    /// --embedded with host memory: copy each completed range into a host image of the object
    /// (the analogue of the copy into VRAM) and verify the image after the timed phase, as GPU
    /// memory does, instead of verifying every range inline. Needs --object-size of RAM.
    #[arg(long)]
    pub verify_after: bool,
    /// Compare every range's bytes with the object, even those a server checksum proved; a
    /// range that differs counts as an error (`mismatches` in the table and `--json`), and a
    /// run that cannot compare (GPU memory, an object over 4 GiB) is refused. By default a
    /// plain run already compares every range that no server checksum proved (servers that
    /// send none, such as s3s-fs, MinIO or AWS for ranges): it first reads the whole object
    /// once (one GET before the timed phase, host memory, objects up to 1 GiB) and compares
    /// such ranges as they complete (the time is reported as `verify_s`). `--embedded` always
    /// verifies (the synthetic model is known), with or without this flag.
    #[arg(long, conflicts_with = "no_verify")]
    pub verify: bool,
    /// Compare no range with the object (no reference GET): ranges no server checksum proved
    /// are counted as `unverified` in the table and `--json`, and a warning says how many.
    #[arg(long)]
    pub no_verify: bool,
    /// GPU memory: one host → device copy per range (`EngineBuilder::gpu_coalesce_limit(0)`),
    /// instead of the engine merging ranges adjacent in bounce memory and VRAM (comparison).
    #[arg(long)]
    pub no_coalesce: bool,
    /// GPU memory: microseconds a worker may wait in the same turn for small copies into VRAM
    /// to finish (`EngineBuilder::gpu_poll_spin`; default: the engine's, 0 = never).
    #[arg(long)]
    pub gpu_spin_us: Option<u64>,
    /// GPU memory: size of the engine's pinned bounce pool (`EngineBuilder::gpu_bounce_bytes`;
    /// default: the engine's). Every range-get in flight holds a range of it from its start.
    #[arg(long, value_parser = parse_size)]
    pub gpu_bounce: Option<u64>,
    /// GPU memory: the GPUDirect tier (`EngineBuilder::gpu_direct`): `auto` (default: RDMA
    /// GETs land in VRAM through a dmabuf window when the RDMA device accepts one, else
    /// staged), `require` (fail when it cannot), `off` (always staged). The table and `--json`
    /// name the tier the registration got (`gpu_tier`).
    #[arg(long, value_parser = parse_gpu_direct, default_value = "auto")]
    pub gpu_direct: engine::gpu::GpuDirect,
    /// Microseconds a worker keeps polling with operations in flight before it blocks
    /// (`EngineBuilder::spin`; default 0: lowest CPU per op on shared cores).
    #[arg(long, default_value_t = 0)]
    pub spin_us: u64,
    /// Data path of a plain run: `auto` (RDMA when the endpoint pairs: verbs with an RDMA
    /// device, else the soft fabric; HTTP against plain S3), `soft`, `verbs` or `http`.
    #[arg(long, value_enum, default_value_t = BenchFabric::Auto)]
    pub fabric: BenchFabric,
    /// The RDMA device of `--fabric verbs|auto` (default: the first one libibverbs lists).
    #[arg(long)]
    pub rdma_device: Option<String>,
    /// RDMA dialect: `auto` (default: rc-persistent, then hipobj-rc-v2, then HTTP, learned per
    /// endpoint), `rc-persistent`, `rc-v2` or `http`. The table and `--json` name the dialect
    /// that carried the bytes.
    #[arg(long, value_parser = parse_dialect, default_value = "auto")]
    pub dialect: engine::Dialect,
    /// S3 endpoint (copied from the global --endpoint-url).
    #[arg(skip)]
    pub endpoint_url: Option<String>,
    /// Signing region (copied from the global --region).
    #[arg(skip)]
    pub region: Option<String>,
    /// Print one JSON object instead of the table (copied from the global --json).
    #[arg(skip)]
    pub json: bool,
    /// Never draw a progress bar (copied from the global --no-progress).
    #[arg(skip)]
    pub no_progress: bool,
}

/// `--fabric` of a plain run: which data path the engine uses.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BenchFabric {
    /// RDMA when the endpoint pairs (verbs with an RDMA device, else the soft fabric), HTTP
    /// against a plain S3 server.
    #[default]
    Auto,
    /// The soft RDMA fabric first (per-request HTTP fallback).
    Soft,
    /// libibverbs (`--rdma-device`, else the first device); without one, HTTP.
    Verbs,
    /// HTTP bodies only.
    Http,
}

/// Where `--embedded` puts the bytes (`--memory`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// Registered host memory (the engine writes the final destination).
    Host,
    /// NVIDIA VRAM through the CUDA driver (host-staged).
    Cuda,
    /// AMD VRAM through HIP (host-staged).
    Hip,
    /// The GPU when a runtime with a device is present, else host.
    Auto,
}

/// The GPU runtime `--memory` asks for: `None` for host memory.
///
/// `cuda` / `hip` fail with a "no GPU runtime" message naming the reason when that runtime or a
/// device is missing; `auto` falls back to host memory then.
pub fn select_runtime(kind: MemoryKind) -> Result<Option<Arc<dyn GpuRuntime>>, String> {
    fn need(
        r: Result<Arc<dyn GpuRuntime>, GpuError>,
        flag: &str,
    ) -> Result<Option<Arc<dyn GpuRuntime>>, String> {
        match r {
            Ok(rt) if rt.device_count() > 0 => Ok(Some(rt)),
            Ok(rt) => Err(format!(
                "--memory {flag}: no GPU runtime: {} reports 0 devices",
                rt.name()
            )),
            Err(e) => Err(format!("--memory {flag}: no GPU runtime: {e}")),
        }
    }
    match kind {
        MemoryKind::Host => Ok(None),
        MemoryKind::Cuda => need(
            engine::gpu::cuda::CudaRuntime::load().map(|r| Arc::new(r) as Arc<dyn GpuRuntime>),
            "cuda",
        ),
        MemoryKind::Hip => need(
            engine::gpu::hip::HipRuntime::load().map(|r| Arc::new(r) as Arc<dyn GpuRuntime>),
            "hip",
        ),
        MemoryKind::Auto => Ok(engine::gpu::detect()),
    }
}

/// The `memory` name of a runtime in reports.
#[must_use]
pub fn memory_name(rt: &dyn GpuRuntime) -> &'static str {
    match rt.backend() {
        Backend::Cuda => "cuda",
        Backend::Hip => "hip",
        _ => "gpu",
    }
}

impl BenchArgs {
    /// These arguments with the global flags filled in.
    #[must_use]
    pub fn with_global(
        mut self,
        endpoint_url: Option<String>,
        region: Option<String>,
        json: bool,
        no_progress: bool,
    ) -> Self {
        self.endpoint_url = endpoint_url;
        self.region = region;
        self.json = json;
        self.no_progress = no_progress;
        self
    }
}

/// Parses `4096`, `4KiB`, `64k`, `1MiB`, `16M`, `1GiB` (binary units; `KB`/`MB`/`GB` decimal).
pub fn parse_size(input: &str) -> Result<u64, String> {
    let s = input.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size {input:?} (expected e.g. 64KiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        other => return Err(format!("invalid size {input:?}: unknown unit {other:?}")),
    };
    match n.checked_mul(mult) {
        Some(0) | None => Err(format!(
            "invalid size {input:?}: must be between 1 byte and 2^64"
        )),
        Some(v) => Ok(v),
    }
}

/// Results of a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchReport {
    /// `s3://bucket/key`.
    pub uri: String,
    /// Object size from HEAD.
    pub object_size: u64,
    /// Bytes per range-get.
    pub size: u64,
    /// Operations completed (successes and errors).
    pub ops: u64,
    /// Operations that failed.
    pub errors: u64,
    /// Untimed warm-up operations run before the timed phase (not in any other field).
    pub warmup_ops: u64,
    /// In flight at once.
    pub concurrency: u32,
    /// Engine worker threads.
    pub workers: usize,
    /// Timed phase, seconds.
    pub elapsed_s: f64,
    /// Completed operations per second.
    pub ops_per_s: f64,
    /// Payload gigabytes (10^9 bytes) per second of successful operations.
    pub gb_per_s: f64,
    /// Latency percentiles, microseconds (submission to reaped completion).
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Process CPU (user + system) over the timed phase, seconds.
    pub cpu_s: f64,
    /// CPU per operation, microseconds.
    pub cpu_us_per_op: f64,
    /// Counts per error code (`EIO` style names; `Mismatch`: bytes that differ from the
    /// object under `--verify`).
    pub error_codes: Vec<(String, u64)>,
    /// Whether ranges were compared with the object (by default those no server checksum
    /// proved; with `--verify` all of them).
    pub verify: bool,
    /// What was compared: `all` (`--verify`), `unproven` (the default: ranges no server
    /// checksum proved), `off` (`--no-verify`, or the default where the object cannot be held
    /// in host memory: see `verify_off_reason`).
    pub verify_mode: &'static str,
    /// Why the default compared nothing (GPU memory, an object over the default's limit).
    pub verify_off_reason: Option<String>,
    /// Ranges whose bytes differed from the object (counted in `errors`).
    pub mismatches: u64,
    /// Successful ranges that nothing proved: no server checksum, no comparison.
    pub unverified: u64,
    /// Seconds of the timed phase spent comparing ranges with the object.
    pub verify_s: f64,
    /// Successful ranges the engine proved with a server checksum of exactly their bytes
    /// (our gateway's range or RDMA reply checksum; the completion's `VERIFIED` flag).
    pub checksum_verified: u64,
    /// Payload bytes per path that carried them (`http`, `rdma-soft`, `rdma-verbs`), timed
    /// phase. JSON `{"http": n, ...}`.
    #[serde(serialize_with = "crate::json_out::serialize_paths")]
    pub paths: Vec<(String, u64)>,
    /// Payload bytes per wire dialect that carried them (`http`, `rc-persistent`,
    /// `hipobj-rc-v2`, `cuobject`), timed phase.
    #[serde(serialize_with = "crate::json_out::serialize_paths")]
    pub dialects: Vec<(String, u64)>,
    /// Payload bytes per NIC whose workers moved them (RDMA device names; a striped range
    /// counts on each NIC that carried a chunk), timed phase; empty when no worker serves a
    /// NIC. JSON `{"mlx5_0": n, ...}`.
    #[serde(serialize_with = "crate::json_out::serialize_paths")]
    pub nics: Vec<(String, u64)>,
    /// Destination memory (`host`, `cuda`, `hip`).
    pub memory: &'static str,
    /// GPU memory: range-gets the engine copied into VRAM (timed phase).
    pub gpu_ranges: u64,
    /// GPU memory: host → device copy launches for them (fewer when coalesced).
    pub gpu_copies: u64,
    /// GPU memory: mean time (µs) from a range's bytes landing in the engine's bounce memory to
    /// its completion being posted (the copy into VRAM and the worker noticing it), and the
    /// longest such time (timed phase; the longest is over the engine's life).
    pub gpu_stage_us: (f64, f64),
    /// GPU memory: the registration's tier (`direct` / `staged`; `null` for host memory).
    pub gpu_tier: Option<&'static str>,
    /// GPU memory: range-gets the RDMA device wrote into VRAM directly (timed phase).
    pub gpu_direct_ops: u64,
    /// GPU memory: the bounce pool's size, the most of it held at once, and the range-gets
    /// that had to wait for room in it (timed phase).
    pub gpu_bounce: (u64, u64, u64),
}

/// Parses `--gpu-direct`.
pub fn parse_gpu_direct(s: &str) -> Result<engine::gpu::GpuDirect, String> {
    engine::gpu::GpuDirect::parse(s).ok_or_else(|| format!("{s:?}: expected auto, require or off"))
}

/// The tier name of registration `buf` (`None`: host memory).
pub fn tier_name(engine: &Engine, buf: ring_api::BufHandle) -> Option<&'static str> {
    engine
        .gpu_tier(buf)
        .ok()
        .flatten()
        .map(engine::gpu::GpuTier::as_str)
}

/// Mean and longest staging wait in µs between two snapshots of the engine's counters
/// (`(0, 0)` without GPU staging).
#[must_use]
pub fn stage_wait_us(
    before: &engine::gpu::StagingCounters,
    after: &engine::gpu::StagingCounters,
) -> (f64, f64) {
    let n = after
        .ranges_to_device
        .saturating_sub(before.ranges_to_device);
    let ns = after.stage_wait_ns.saturating_sub(before.stage_wait_ns);
    if n == 0 {
        return (0.0, 0.0);
    }
    (
        ns as f64 / n as f64 / 1e3,
        after.stage_wait_max_ns as f64 / 1e3,
    )
}

/// Runs the benchmark; returns the exit code (0: every operation succeeded).
pub fn run(args: &BenchArgs, stdout: &mut dyn Write, stderr: &mut dyn Write) -> i32 {
    match measure(args, stderr) {
        Ok(report) => {
            let printed = if args.json {
                print_json(&report, stdout)
            } else {
                print_table(&report, stdout)
            };
            if let Err(e) = printed {
                let _ = writeln!(stderr, "hipobj: error: writing the report: {e}");
                return 1;
            }
            i32::from(report.errors > 0)
        }
        Err(msg) => {
            let _ = writeln!(stderr, "hipobj: error: {msg}");
            1
        }
    }
}

fn split_uri(uri: &str) -> Result<(&str, &str), String> {
    let rest = uri
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{uri:?} is not an s3://BUCKET/KEY URI"))?;
    match rest.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() => Ok((b, k)),
        _ => Err(format!("{uri:?} must name an object: s3://BUCKET/KEY")),
    }
}

fn one(q: &mut engine::Queue, what: &str) -> Result<Cqe, String> {
    if q.wait(1, Some(Duration::from_secs(60))) == 0 {
        return Err(format!("{what}: no completion within 60 s"));
    }
    q.completion()
        .next()
        .ok_or_else(|| format!("{what}: completion vanished"))
}

fn code_name(c: &Cqe) -> String {
    c.error_code().map_or_else(
        || format!("errno {}", -c.result()),
        |e: ErrorCode| format!("{e:?}"),
    )
}

fn measure(args: &BenchArgs, stderr: &mut dyn Write) -> Result<BenchReport, String> {
    let uri = args
        .uri
        .as_deref()
        .ok_or("an s3://BUCKET/KEY URI is required without --embedded")?;
    let (bucket, key) = split_uri(uri)?;
    let (size, conc) = (args.size, u64::from(args.concurrency.max(1)));
    let gpu = select_runtime(args.memory)?;
    let total = conc
        .checked_mul(size)
        .and_then(|t| usize::try_from(t).ok())
        .ok_or("--concurrency x --size too large")?;
    // GPU memory: one VRAM slot per operation in flight. Declared before the engine, so it is
    // freed after the engine (and every copy it queued) is gone.
    let image = match &gpu {
        Some(rt) => {
            Some(DeviceBuffer::new(rt, 0, total).map_err(|e| format!("allocating VRAM: {e}"))?)
        }
        None => None,
    };
    let mut builder = Engine::builder()
        .connections_per_worker(conc as usize)
        .spin(Duration::from_micros(args.spin_us))
        .fabric(match args.fabric {
            BenchFabric::Auto => engine::Fabric::Auto,
            BenchFabric::Soft => engine::Fabric::Soft,
            BenchFabric::Verbs => engine::Fabric::Verbs,
            BenchFabric::Http => engine::Fabric::Http,
        })
        .dialect(args.dialect);
    if let Some(d) = &args.rdma_device {
        builder = builder.verbs_device(d.clone());
    }
    if let Some(rt) = &gpu {
        builder = builder.gpu(Arc::clone(rt)).gpu_direct(args.gpu_direct);
        if args.no_coalesce {
            builder = builder.gpu_coalesce_limit(0);
        }
        if let Some(us) = args.gpu_spin_us {
            builder = builder.gpu_poll_spin(Duration::from_micros(us));
        }
        if let Some(b) = args.gpu_bounce {
            builder = builder.gpu_bounce_bytes(b);
        }
    }
    if let Some(url) = &args.endpoint_url {
        builder = builder.endpoint_url(url);
    }
    if let Some(r) = &args.region {
        builder = builder.region(r);
    }
    if let Some(n) = args.workers {
        builder = builder.placement(Placement::Workers(n));
    }
    if let Some(n) = args.workers_per_nic {
        builder = builder.workers_per_nic(n);
    }
    // Declared before the engine: the tree outlives every read of it.
    let soft_nics = match args.soft_nics {
        Some(n) => {
            if args.fabric != BenchFabric::Soft {
                return Err("--soft-nics needs --fabric soft (each NIC is a soft device)".into());
            }
            Some(crate::soft_nics::SoftNicTopology::for_this_host(n)?)
        }
        None => None,
    };
    if let Some(t) = &soft_nics {
        builder = builder
            .placement(Placement::Auto)
            .sysfs_root(t.root())
            .nics(t.names());
    }
    let engine = builder.build().map_err(|e| e.to_string())?;
    let workers = engine.workers().len();
    let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
    let opts = if args.pinned {
        RegisterOptions::pinned()
    } else {
        RegisterOptions::pageable()
    };
    let buf = match &image {
        // SAFETY: `image` is a live allocation of the engine's runtime, `total` bytes long,
        // declared before `engine` and so freed only after the engine is dropped; the app
        // never touches the VRAM while range-gets into it are in flight.
        Some(img) => unsafe { engine.register_device(img.ptr(), total) },
        None => engine.register_host(total, opts),
    }
    .map_err(|e| e.to_string())?;
    // Fault the pages in before the timed phase, so it measures transfers, not page faults
    // (host memory only: VRAM has no pages to fault, and the bounce pool is pinned).
    if image.is_none() {
        let zeros = vec![0u8; total.min(16 << 20)];
        for start in (0..total).step_by(zeros.len().max(1)) {
            let n = zeros.len().min(total - start);
            engine
                .copy_in(buf, start as u64, &zeros[..n])
                .map_err(|e| e.to_string())?;
        }
    }
    let depth = u32::try_from(conc).unwrap_or(u32::MAX);
    let mut q = engine.queue(depth).map_err(|e| e.to_string())?;
    q.push(&Head::new(obj).build()).map_err(|e| e.to_string())?;
    let head = one(&mut q, "HEAD")?;
    if !head.is_ok() {
        // An https:// endpoint whose certificate was refused says why.
        let tls = engine
            .tls_failure()
            .map(|p| format!(" (TLS: {p})"))
            .unwrap_or_default();
        // The engine completes a refused connection as ConnectionReset: say which it was.
        let refused = (head.error_code() == Some(ErrorCode::ConnectionReset))
            .then(|| s3_lite::net::stream::connection_refused(engine.endpoint()))
            .flatten();
        let code = refused.unwrap_or_else(|| code_name(&head));
        return Err(format!("HEAD {uri}: {code}{tls}"));
    }
    let object_size = head.aux();
    let slots = object_size / size;
    if slots == 0 {
        return Err(format!(
            "object is {object_size} bytes, smaller than --size {size}"
        ));
    }
    let (mode, verify_off_reason) = match (args.verify, args.no_verify) {
        (true, _) => (VerifyMode::All, None),
        (_, true) => (VerifyMode::Off, None),
        _ if gpu.is_some() => (
            VerifyMode::Off,
            Some("GPU memory: ranges are compared in host memory only (--memory host)".to_owned()),
        ),
        _ if object_size > DEFAULT_REFERENCE => (
            VerifyMode::Off,
            Some(format!(
                "the object ({object_size} bytes) is over the {DEFAULT_REFERENCE}-byte reference the default reads first (--verify reads up to {MAX_REFERENCE})"
            )),
        ),
        _ => (VerifyMode::Unproven, None),
    };
    let reference = match mode {
        VerifyMode::All if gpu.is_some() => {
            return Err("--verify compares ranges in host memory: use --memory host".into());
        }
        VerifyMode::All | VerifyMode::Unproven => {
            Some(fetch_reference(&engine, &mut q, obj, object_size)?)
        }
        VerifyMode::Off => None,
    };
    let ctx = Phase {
        obj,
        buf,
        size,
        slots,
        conc,
        engine: &engine,
        reference: reference.as_deref(),
        mode,
    };
    let warmup = args.warmup.unwrap_or(2 * conc);
    if warmup > 0 {
        let mut state = args.seed ^ WARMUP_SEED_XOR;
        let w = run_phase(&mut q, &ctx, warmup, &mut state, None)?;
        if w.errors.iter().map(|(_, k)| k).sum::<u64>() > 0 {
            return Err(format!("warm-up failed: {:?}", w.errors));
        }
    }
    let bar = (!args.json && !args.no_progress && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(args.ops);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} ops {per_sec} eta {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let mut state = args.seed;
    let staged0 = engine.gpu_staging().unwrap_or_default();
    let direct0 = engine.gpu_direct_stats();
    let nics0 = engine.nic_bytes();
    let cpu0 = process_cpu_time();
    let t0 = Instant::now();
    let mut timed = run_phase(&mut q, &ctx, args.ops, &mut state, bar.as_ref())?;
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = (process_cpu_time().saturating_sub(cpu0)).as_secs_f64();
    let staged = engine.gpu_staging().unwrap_or_default();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let _ = stderr.flush();
    let (done, ok_bytes, errors) = (timed.done, timed.ok_bytes, timed.errors);
    let (mismatches, verify_s, checksum_verified, unverified) = (
        timed.mismatches,
        timed.verify_s,
        timed.checksum_verified,
        timed.unverified,
    );
    if unverified > 0 {
        // On stderr even with --json: a run whose bytes nothing proved must not read as clean.
        let _ = writeln!(
            stderr,
            "hipobj: warning: bench: {unverified} of {done} ranges unverified: no server checksum and no comparison with the object ({})",
            verify_off_reason
                .as_deref()
                .unwrap_or("--no-verify; drop it, or pass --verify, to compare them")
        );
    }
    let paths = timed
        .paths
        .iter()
        .map(|(p, b)| ((*p).to_owned(), *b))
        .collect();
    let dialects = timed
        .dialects
        .iter()
        .map(|(d, b)| ((*d).to_owned(), *b))
        .collect();
    let lat_ns = &mut timed.lat_ns;
    lat_ns.sort_unstable();
    let pct = |p: f64| -> f64 {
        let i = ((lat_ns.len() as f64 * p).ceil() as usize).saturating_sub(1);
        lat_ns
            .get(i.min(lat_ns.len().saturating_sub(1)))
            .map_or(0.0, |&ns| ns as f64 / 1000.0)
    };
    let error_count = errors.iter().map(|(_, k)| k).sum();
    Ok(BenchReport {
        uri: uri.to_owned(),
        object_size,
        size,
        ops: done,
        errors: error_count,
        warmup_ops: warmup,
        concurrency: args.concurrency,
        workers,
        elapsed_s: elapsed,
        ops_per_s: done as f64 / elapsed.max(1e-9),
        gb_per_s: ok_bytes as f64 / 1e9 / elapsed.max(1e-9),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        p999_us: pct(0.999),
        cpu_s: cpu,
        cpu_us_per_op: cpu * 1e6 / (done.max(1) as f64),
        error_codes: errors,
        verify: mode != VerifyMode::Off,
        verify_mode: mode.name(),
        verify_off_reason,
        mismatches,
        unverified,
        verify_s,
        checksum_verified,
        paths,
        dialects,
        memory: gpu.as_deref().map_or("host", memory_name),
        gpu_ranges: staged.ranges_to_device - staged0.ranges_to_device,
        gpu_copies: staged.copies_to_device - staged0.copies_to_device,
        gpu_stage_us: stage_wait_us(&staged0, &staged),
        gpu_tier: tier_name(&engine, buf),
        gpu_direct_ops: engine.gpu_direct_stats().direct_ops - direct0.direct_ops,
        gpu_bounce: (
            staged.bounce_capacity,
            staged.bounce_peak_bytes,
            staged.bounce_waits.saturating_sub(staged0.bounce_waits),
        ),
        nics: engine
            .nic_bytes()
            .into_iter()
            .zip(nics0)
            .map(|((nic, b), (_, b0))| (nic, b.saturating_sub(b0)))
            .collect(),
    })
}

/// XOR-ed into `--seed` for the warm-up offsets (the peers' harness does the same, so warm-up
/// and timed offsets differ and every client sees the same timed sequence).
const WARMUP_SEED_XOR: u64 = 0x5741_524D;

/// splitmix64 (Steele, Lea, Flood 2014): the offset generator of the peers' harness
/// (`benches/peers/src/lib.rs`), so hipobj reads the same offsets as aws-sdk-s3 and object_store.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Largest object `--verify` reads into memory as its reference.
const MAX_REFERENCE: u64 = 4 << 30;

/// Largest object a run without `--verify`/`--no-verify` reads as its reference (a larger one
/// runs with only the server's checksums, and says how many ranges nothing proved).
const DEFAULT_REFERENCE: u64 = 1 << 30;

/// Which ranges are compared with the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VerifyMode {
    /// `--verify`: every range.
    All,
    /// The default: ranges no server checksum proved.
    Unproven,
    /// `--no-verify`, or a default run that cannot hold the object: none.
    Off,
}

impl VerifyMode {
    fn name(self) -> &'static str {
        match self {
            VerifyMode::All => "all",
            VerifyMode::Unproven => "unproven",
            VerifyMode::Off => "off",
        }
    }
}

/// `--verify`: the whole object, read once with one GET (whose length the server's
/// `Content-Range` proves) into registered host memory, then copied out.
fn fetch_reference(
    engine: &Engine,
    q: &mut engine::Queue,
    obj: ring_api::ObjectId,
    object_size: u64,
) -> Result<Vec<u8>, String> {
    if object_size > MAX_REFERENCE {
        return Err(format!(
            "--verify reads the object into memory first: {object_size} bytes is over the {MAX_REFERENCE}-byte limit"
        ));
    }
    let len = usize::try_from(object_size).map_err(|_| "object too large for this host")?;
    let buf = engine
        .register_host(len.max(1), RegisterOptions::pageable())
        .map_err(|e| e.to_string())?;
    q.push(&ring_api::opcode::Get::new(obj, BufSlice::new(buf, 0, object_size)).build())
        .map_err(|e| e.to_string())?;
    let c = one(q, "--verify reference GET")?;
    if !c.is_ok() || c.bytes() != object_size {
        return Err(format!(
            "--verify reference GET: {} ({} of {object_size} bytes)",
            if c.is_ok() {
                "short".into()
            } else {
                code_name(&c)
            },
            c.bytes()
        ));
    }
    let view = engine
        .read(buf, 0, object_size)
        .map_err(|e| e.to_string())?;
    Ok(view.to_vec())
}

/// What every phase of a run shares.
struct Phase<'e> {
    obj: ring_api::ObjectId,
    buf: ring_api::BufHandle,
    size: u64,
    /// Aligned offsets in the object (`object_size / size`, > 0).
    slots: u64,
    conc: u64,
    engine: &'e Engine,
    /// The object's bytes, which ranges are compared with (see `mode`).
    reference: Option<&'e [u8]>,
    /// Which ranges are compared.
    mode: VerifyMode,
}

/// Results of one phase.
struct PhaseResult {
    done: u64,
    ok_bytes: u64,
    paths: Vec<(&'static str, u64)>,
    dialects: Vec<(&'static str, u64)>,
    errors: Vec<(String, u64)>,
    lat_ns: Vec<u64>,
    mismatches: u64,
    verify_s: f64,
    checksum_verified: u64,
    unverified: u64,
}

/// Adds one error of `name` to the per-code counts.
fn count_error(errors: &mut Vec<(String, u64)>, name: String) {
    match errors.iter_mut().find(|(n, _)| *n == name) {
        Some((_, k)) => *k += 1,
        None => errors.push((name, 1)),
    }
}

/// Whether the range at `offset` that landed in `slot` differs from the reference.
fn differs(ctx: &Phase<'_>, reference: &[u8], slot: u64, offset: u64) -> Result<bool, String> {
    let view = ctx
        .engine
        .read(ctx.buf, slot * ctx.size, ctx.size)
        .map_err(|e| e.to_string())?;
    let want = usize::try_from(offset)
        .ok()
        .and_then(|o| reference.get(o..o + view.len()));
    Ok(want != Some(&view[..]))
}

/// Runs `ops` range-gets with at most `ctx.conc` in flight. Each turn pushes every free slot in
/// one batch (one publish), then reaps every ready completion at once.
fn run_phase(
    q: &mut engine::Queue,
    ctx: &Phase<'_>,
    ops: u64,
    state: &mut u64,
    bar: Option<&indicatif::ProgressBar>,
) -> Result<PhaseResult, String> {
    let conc = ctx.conc;
    let mut started = vec![Instant::now(); conc as usize];
    let mut offsets = vec![0u64; conc as usize];
    let (mut mismatches, mut verifying, mut checksum_verified) = (0u64, Duration::ZERO, 0u64);
    let mut unverified = 0u64;
    let mut free: Vec<u64> = (0..conc).rev().collect();
    let mut lat_ns: Vec<u64> = Vec::with_capacity(usize::try_from(ops).unwrap_or(0));
    let mut cqes = vec![Cqe::default(); conc as usize];
    let (mut submitted, mut done, mut ok_bytes) = (0u64, 0u64, 0u64);
    let mut paths: Vec<(&'static str, u64)> = Vec::new();
    let mut dialects: Vec<(&'static str, u64)> = Vec::new();
    let mut errors: Vec<(String, u64)> = Vec::new();
    while done < ops {
        if submitted < ops && !free.is_empty() {
            let mut sq = q.submission();
            let now = Instant::now();
            while submitted < ops {
                let Some(slot) = free.pop() else { break };
                let off = (splitmix64(state) % ctx.slots) * ctx.size;
                let sqe = RangeGet::new(
                    ctx.obj,
                    off,
                    BufSlice::new(ctx.buf, slot * ctx.size, ctx.size),
                )
                .user_data(slot)
                .build();
                if sq.push(&sqe).is_err() {
                    free.push(slot);
                    break;
                }
                if let Some(t) = started.get_mut(slot as usize) {
                    *t = now;
                }
                if let Some(o) = offsets.get_mut(slot as usize) {
                    *o = off;
                }
                submitted += 1;
            }
        }
        if q.wait(1, Some(Duration::from_secs(120))) == 0 {
            return Err(format!("no completion within 120 s ({done} of {ops} done)"));
        }
        let n = q.reap(&mut cqes);
        let now = Instant::now();
        for c in cqes.iter().take(n) {
            let slot = c.user_data();
            let at = started.get(slot as usize).copied().unwrap_or(now);
            lat_ns.push(u64::try_from(now.duration_since(at).as_nanos()).unwrap_or(u64::MAX));
            free.push(slot);
            done += 1;
            if !c.is_ok() {
                count_error(&mut errors, code_name(c));
                continue;
            }
            let compare = match ctx.mode {
                VerifyMode::All => true,
                VerifyMode::Unproven => !c.verified(),
                VerifyMode::Off => false,
            };
            if let (true, Some(reference)) = (compare, ctx.reference) {
                let tv = Instant::now();
                let off = offsets.get(slot as usize).copied().unwrap_or(u64::MAX);
                let bad = c.bytes() != ctx.size || differs(ctx, reference, slot, off)?;
                verifying += tv.elapsed();
                if bad {
                    mismatches += 1;
                    count_error(&mut errors, "Mismatch".to_owned());
                    continue;
                }
            }
            checksum_verified += u64::from(c.verified());
            let compared = compare && ctx.reference.is_some();
            unverified += u64::from(!(c.verified() || compared));
            ok_bytes += c.bytes();
            add_path_bytes(&mut paths, path_name(c.path()), c.bytes());
            add_path_bytes(&mut dialects, dialect_name(c.dialect()), c.bytes());
        }
        if let Some(b) = bar {
            b.set_position(done);
        }
    }
    Ok(PhaseResult {
        done,
        ok_bytes,
        paths,
        dialects,
        errors,
        lat_ns,
        mismatches,
        verify_s: verifying.as_secs_f64(),
        checksum_verified,
        unverified,
    })
}

fn print_json(r: &BenchReport, out: &mut dyn Write) -> std::io::Result<()> {
    let text = serde_json::to_string(r).map_err(std::io::Error::other)?;
    writeln!(out, "{text}")
}

fn human_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

fn print_table(r: &BenchReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "hipobj bench  {}  ({} bytes)", r.uri, r.object_size)?;
    writeln!(
        out,
        "  size {} B, concurrency {}, workers {}",
        r.size, r.concurrency, r.workers
    )?;
    writeln!(out, "{:<12} {:>14}", "metric", "value")?;
    writeln!(out, "{:<12} {:>14}", "ops", r.ops)?;
    writeln!(out, "{:<12} {:>14}", "errors", r.errors)?;
    writeln!(out, "{:<12} {:>14}", "verify", r.verify_mode)?;
    if r.verify {
        writeln!(out, "{:<12} {:>14}", "mismatches", r.mismatches)?;
        writeln!(out, "{:<12} {:>14.3}", "verify s", r.verify_s)?;
    }
    writeln!(out, "{:<12} {:>14}", "crc proven", r.checksum_verified)?;
    writeln!(out, "{:<12} {:>14}", "unverified", r.unverified)?;
    writeln!(out, "{:<12} {:>14.3}", "elapsed s", r.elapsed_s)?;
    writeln!(out, "{:<12} {:>14.1}", "ops/s", r.ops_per_s)?;
    writeln!(out, "{:<12} {:>14.3}", "GB/s", r.gb_per_s)?;
    writeln!(out, "{:<12} {:>14}", "p50", human_us(r.p50_us))?;
    writeln!(out, "{:<12} {:>14}", "p99", human_us(r.p99_us))?;
    writeln!(out, "{:<12} {:>14}", "p999", human_us(r.p999_us))?;
    writeln!(out, "{:<12} {:>14.3}", "cpu s", r.cpu_s)?;
    writeln!(out, "{:<12} {:>14}", "cpu/op", human_us(r.cpu_us_per_op))?;
    writeln!(out, "{:<12} {:>14}", "memory", r.memory)?;
    for (path, bytes) in &r.paths {
        writeln!(
            out,
            "{:<12} {:>14}",
            format!("path {path}"),
            format!("{bytes} B")
        )?;
    }
    for (dialect, bytes) in &r.dialects {
        writeln!(
            out,
            "{:<12} {:>14}",
            format!("dialect {dialect}"),
            format!("{bytes} B")
        )?;
    }
    for (nic, bytes) in &r.nics {
        writeln!(
            out,
            "{:<12} {:>14}",
            format!("nic {nic}"),
            format!("{bytes} B")
        )?;
    }
    if r.memory != "host" {
        writeln!(out, "{:<12} {:>14}", "gpu copies", r.gpu_copies)?;
        writeln!(out, "{:<12} {:>14}", "gpu tier", r.gpu_tier.unwrap_or("-"))?;
        writeln!(out, "{:<12} {:>14}", "gpu direct", r.gpu_direct_ops)?;
    }
    for (name, n) in &r.error_codes {
        writeln!(out, "  error {name}: {n}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12XB").is_err());
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("99999999999GiB").is_err());
    }

    #[test]
    fn splitmix64_matches_the_published_sequence() {
        // Reference outputs for seed 0 (Vigna's splitmix64.c); the peers' harness and
        // boto3_bench.py produce the same stream, so every client reads the same offsets.
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(&mut s), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn uris_split_into_bucket_and_key() {
        assert_eq!(split_uri("s3://b/k/x"), Ok(("b", "k/x")));
        assert!(split_uri("s3://b").is_err());
        assert!(split_uri("s3://b/").is_err());
        assert!(split_uri("http://b/k").is_err());
    }
}
