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
//! `HIPOBJ_EMBEDDED_FABRIC=http` forces the HTTP body path (for comparison).
//!
//! Every range-get lands at its object offset in an image of the object. `--memory
//! cuda|hip|auto` makes that image VRAM, registered with `Engine::register_device`: the engine
//! stages each range through its pinned bounce pool, copies it into VRAM on its own stream
//! (coalescing adjacent ranges) and posts the completion only after that copy has finished.
//! After the batch every written VRAM byte is read back and compared with the model; then 16
//! pieces are PUT from VRAM through the engine ([`vram::put_round_trip`]) and a multipart
//! object is uploaded with the engine's UploadPart from the device registration
//! ([`vram::upload_parts_from_vram`]), both read back and compared.

use crate::vram;

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use engine::{Engine, RegisterOptions, process_cpu_time};
use hipobj_gateway::{Gateway, RcLimits, RcTarget};
use rand::{Rng, SeedableRng};
use ring_api::opcode::RangeGet;
use ring_api::{BufSlice, Cqe};
use s3_lite::credentials::Credentials;
use s3_lite::s3::Endpoint;

use crate::bench::BenchArgs;
use crate::client::{ClientSettings, S3Client};
use crate::net::tls::TlsOptions;
use crate::net::transport::Timeouts;
use crate::synthetic::SyntheticModel;
use crate::units::format_bytes;

/// Largest single range-get of the mixed workload (and largest piece of the PUT-from-VRAM check).
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
    /// Range-gets whose bytes differed from the model (counted in `errors`): every range is
    /// compared, as `hipobj bench --verify` does (always on here).
    pub mismatches: u64,
    /// Successful range-gets the engine proved with the gateway's checksum of exactly their
    /// bytes (the completion's `VERIFIED` flag), before the app's own comparison.
    pub checksum_verified: u64,
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
    /// Destination memory kind (`host`, `cuda`, `hip`).
    pub memory: &'static str,
    /// Workload: `mixed` (whole tensors and slices) or `sequential` (--range-size).
    pub workload: &'static str,
    /// Seconds of the timed phase the app thread spent verifying bytes inline (host memory;
    /// GPU memory verifies after the timed phase, in `verify_s`).
    pub inline_verify_s: f64,
    /// GB/s over the timed phase minus `inline_verify_s`: the transfer rate without the
    /// app's own verification, comparable between host and GPU memory.
    pub transfer_gb_per_s: f64,
    /// GPU memory: host → device copy launches the engine made in the timed phase (fewer than
    /// `ops` when ranges were coalesced).
    pub gpu_copies: u64,
    /// GPU memory: mean time (µs) from a range's bytes landing in the engine's bounce memory to
    /// its completion being posted (the copy into VRAM and the worker noticing it), and the
    /// longest such time (timed phase; the longest is over the engine's life).
    pub gpu_stage_us: (f64, f64),
    /// GPU memory: whether adjacent ranges were merged into one copy.
    pub coalesce: bool,
    /// GPU memory: the registration's tier (`direct` / `staged`; `null` for host memory).
    pub gpu_tier: Option<&'static str>,
    /// GPU memory or --verify-after: seconds spent comparing the image (VRAM read back, or
    /// the registered host image) after the timed phase.
    pub verify_s: f64,
    /// GPU memory: the PUT-from-VRAM check (pieces of the VRAM image PUT through the engine,
    /// which copies them out of VRAM, and read back).
    pub put_from_vram: Option<vram::PutReport>,
    /// GPU memory: the UploadPart-from-VRAM check (a multipart object whose parts were read out
    /// of VRAM, read back).
    pub upload_part_from_vram: Option<vram::PutReport>,
    /// Bytes carried per path (`http`, `rdma-soft`, `rdma-verbs`); JSON `{"http": n, ...}`.
    #[serde(serialize_with = "crate::json_out::serialize_paths")]
    pub paths: Vec<(&'static str, u64)>,
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

/// Whether `(offset, len)` overlaps a range-get in flight.
fn overlaps_in_flight(slots: &[Option<(u64, u64, Instant)>], (o, l): (u64, u64)) -> bool {
    slots
        .iter()
        .flatten()
        .any(|&(so, sl, _)| o < so + sl && so < o + l)
}

/// The next range-get: sequential ranges of `--range-size`, else [`pick_range`].
fn next_range(
    model: &SyntheticModel,
    rng: &mut rand::rngs::StdRng,
    range: Option<u64>,
    k: u64,
) -> (u64, u64) {
    match range {
        Some(rs) => {
            let n = model.size.div_ceil(rs).max(1);
            let off = (k % n) * rs;
            (off, rs.min(model.size - off))
        }
        None => pick_range(model, rng),
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
    let gpu = vram::select_runtime(args.memory)?;
    let show = !args.json && !args.no_progress && std::io::stderr().is_terminal();
    let dir = tempfile::Builder::new()
        .prefix("hipobj-embedded-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    let access = "hipobj-embedded";
    let secret: String = {
        let mut rng = rand::rng();
        (0..32)
            .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
            .collect()
    };
    let http_only =
        std::env::var("HIPOBJ_EMBEDDED_FABRIC").is_ok_and(|v| v.eq_ignore_ascii_case("http"));
    let soft = RcTarget::start(
        "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
        RcLimits::default(),
    )
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
    let model = SyntheticModel::new(args.object_size, args.seed)?;
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
        timeouts: Timeouts {
            connect: Duration::from_secs(5),
            io: Duration::from_secs(120),
            expect_continue: Duration::from_secs(1),
        },
    })
    .map_err(|e| e.to_string())?;
    client
        .create_bucket(BUCKET)
        .map_err(|e| format!("create bucket: {e}"))?;
    let upload_bar = bar(
        model.size,
        "upload   [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}",
        show,
    );
    let t_up = Instant::now();
    client
        .put_multipart(
            BUCKET,
            KEY,
            &mut model.reader(),
            model.size,
            64 << 20,
            &mut |n| {
                if let Some(b) = &upload_bar {
                    b.inc(n);
                }
            },
        )
        .map_err(|e| format!("uploading the model: {e}"))?;
    let upload_s = t_up.elapsed().as_secs_f64();
    if let Some(b) = upload_bar {
        b.finish_and_clear();
    }

    // The destination: an image of the whole object, a range landing at its object offset —
    // VRAM registered as device memory (the engine stages it through pinned bounce memory and
    // posts each completion after its copy into VRAM), or registered host memory.
    let conc = u64::from(args.concurrency.max(1));
    let image_len = usize::try_from(model.size).map_err(|_| "model too large for this host")?;
    // Declared before the engine, so VRAM is freed only after the engine is gone.
    let image = match &gpu {
        Some(rt) => {
            let img = engine::gpu::DeviceBuffer::new(rt, 0, image_len)
                .map_err(|e| format!("allocating VRAM: {e}"))?;
            let _ = writeln!(
                stderr,
                "GPU memory: {} ({}), VRAM image {} (engine-staged through its pinned bounce pool)",
                rt.device_name(0).unwrap_or_default(),
                rt.name(),
                format_bytes(model.size),
            );
            Some(img)
        }
        None => None,
    };
    let mut builder = Engine::builder()
        .endpoint_url(&url)
        .credentials(credentials)
        .region("us-east-1")
        .connections_per_worker(conc as usize)
        .fabric(if http_only {
            engine::Fabric::Http
        } else {
            engine::Fabric::Soft
        });
    if let Some(rt) = &gpu {
        builder = builder
            .gpu(std::sync::Arc::clone(rt))
            .gpu_direct(args.gpu_direct);
        if args.no_coalesce {
            builder = builder.gpu_coalesce_limit(0);
        }
        if let Some(us) = args.gpu_spin_us {
            builder = builder.gpu_poll_spin(Duration::from_micros(us));
        }
    }
    let engine = builder.build().map_err(|e| e.to_string())?;
    let obj = engine.object(BUCKET, KEY).map_err(|e| e.to_string())?;
    let buf = match &image {
        // SAFETY: `image` is a live VRAM allocation of the engine's runtime, `image_len` bytes,
        // declared before `engine` and so freed after it on every path; the app reads VRAM only
        // after every range-get into it has completed.
        Some(img) => unsafe { engine.register_device(img.ptr(), image_len) },
        None => {
            let opts = if args.pinned {
                RegisterOptions::pinned()
            } else {
                RegisterOptions::pageable()
            };
            engine.register_host(image_len, opts)
        }
    }
    .map_err(|e| e.to_string())?;
    let gpu_tier = crate::bench::tier_name(&engine, buf);
    if image.is_none() {
        // Fault the host pages in before the timed phase (the GPU bounce pool is pinned).
        let zeros = vec![0u8; image_len.min(16 << 20)];
        for start in (0..image_len).step_by(zeros.len().max(1)) {
            let n = zeros.len().min(image_len - start);
            engine
                .copy_in(buf, start as u64, &zeros[..n])
                .map_err(|e| e.to_string())?;
        }
    }
    let mut q = engine
        .queue(u32::try_from(conc).unwrap_or(u32::MAX))
        .map_err(|e| e.to_string())?;

    let ops_bar = bar(
        args.ops,
        "range-gets [{bar:40}] {pos}/{len} {per_sec} eta {eta}",
        show,
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let mut slots: Vec<Option<(u64, u64, Instant)>> = vec![None; conc as usize];
    let mut free: Vec<u64> = (0..conc).rev().collect();
    let mut cqes = vec![Cqe::default(); conc as usize];
    let mut lat_ns = Vec::with_capacity(usize::try_from(args.ops).unwrap_or(0));
    let (mut submitted, mut done, mut errors, mut verified) = (0u64, 0u64, 0u64, 0u64);
    let (mut mismatches, mut checksum_verified) = (0u64, 0u64);
    let mut paths: Vec<(&'static str, u64)> = Vec::new();
    let mut spans: Vec<(u64, u64)> = Vec::new();
    let mut inline_verify = Duration::ZERO;
    // Verify after the timed phase: always for VRAM (it must be read back), on request for host.
    let verify_after = image.is_some() || args.verify_after;
    let staged0 = engine.gpu_staging().unwrap_or_default();
    let mut pending: Option<(u64, u64)> = None;
    let cpu0 = process_cpu_time();
    let t0 = Instant::now();
    while done < args.ops {
        {
            let mut sq = q.submission();
            while submitted < args.ops {
                let Some(slot) = free.pop() else { break };
                // Ranges in flight must not overlap (each holds an exclusive lease on its
                // image bytes): re-pick a few times, else wait for completions.
                let mut pick = pending
                    .take()
                    .unwrap_or_else(|| next_range(&model, &mut rng, args.range_size, submitted));
                let mut tries = 0;
                while overlaps_in_flight(&slots, pick) && tries < 16 {
                    pick = next_range(&model, &mut rng, args.range_size, submitted);
                    tries += 1;
                }
                if overlaps_in_flight(&slots, pick) {
                    pending = Some(pick);
                    free.push(slot);
                    break;
                }
                let (offset, len) = pick;
                let sqe = RangeGet::new(obj, offset, BufSlice::new(buf, offset, len))
                    .user_data(slot)
                    .build();
                if sq.push(&sqe).is_err() {
                    pending = Some(pick);
                    free.push(slot);
                    break;
                }
                slots[slot as usize] = Some((offset, len, Instant::now()));
                submitted += 1;
            }
        }
        if q.wait(1, Some(Duration::from_secs(120))) == 0 {
            return Err(format!(
                "no completion within 120 s ({done} of {} done)",
                args.ops
            ));
        }
        let n = q.reap(&mut cqes);
        let now = Instant::now();
        for c in cqes.iter().take(n) {
            let slot = c.user_data();
            let Some((offset, len, started)) = slots.get_mut(slot as usize).and_then(Option::take)
            else {
                return Err(format!("completion for unknown slot {slot}"));
            };
            lat_ns.push(now.duration_since(started).as_nanos() as u64);
            done += 1;
            free.push(slot);
            if !(c.is_ok() && c.bytes() == len) {
                if !c.is_ok() {
                    let _ = writeln!(
                        stderr,
                        "range-get {offset}+{len} failed: {:?}",
                        c.error_code()
                    );
                }
                errors += 1;
                continue;
            }
            crate::bench::add_path_bytes(&mut paths, crate::bench::path_name(c.path()), len);
            checksum_verified += u64::from(c.verified());
            if verify_after {
                spans.push((offset, len));
                continue;
            }
            let tv = Instant::now();
            let view = engine.read(buf, offset, len).map_err(|e| e.to_string())?;
            match model.first_mismatch(offset, &view) {
                None => verified += len,
                Some(i) => {
                    let _ = writeln!(
                        stderr,
                        "byte mismatch at object offset {}",
                        offset + i as u64
                    );
                    errors += 1;
                    mismatches += 1;
                }
            }
            drop(view);
            inline_verify += tv.elapsed();
        }
        // Hand slots out in ascending order (tags only; the image offset is the object offset).
        free.sort_unstable_by(|a, b| b.cmp(a));
        if let Some(b) = &ops_bar {
            b.set_position(done);
        }
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu_s = process_cpu_time().saturating_sub(cpu0).as_secs_f64();
    let staged = engine.gpu_staging().unwrap_or_default();
    let gpu_copies = staged.copies_to_device - staged0.copies_to_device;
    let gpu_stage_us = crate::bench::stage_wait_us(&staged0, &staged);
    if let Some(b) = ops_bar {
        b.finish_and_clear();
    }
    // Verify what the timed phase wrote: VRAM read back, or the registered host image.
    let mut verify_s = 0.0;
    if verify_after {
        let tv = Instant::now();
        let check = |off: u64, bytes: &[u8]| model.first_mismatch(off, bytes);
        let failed = match &image {
            Some(img) => vram::verify_image(img, &mut spans.clone(), &check)
                .map_err(|e| format!("reading VRAM back: {e}"))?,
            None => {
                let mut failed = Vec::new();
                for (o, l) in vram::merge_spans(&mut spans.clone()) {
                    let view = engine.read(buf, o, l).map_err(|e| e.to_string())?;
                    if check(o, &view).is_some() {
                        failed.push((o, l));
                    }
                }
                failed
            }
        };
        verify_s = tv.elapsed().as_secs_f64();
        for &(o, l) in &spans {
            if failed.iter().any(|&(fo, fl)| o < fo + fl && fo < o + l) {
                errors += 1;
                mismatches += 1;
            } else {
                verified += l;
            }
        }
        for (o, l) in &failed {
            let _ = writeln!(stderr, "image mismatch in object bytes {o}..{}", o + l);
        }
    }
    // From VRAM (GPU memory only): 16 pieces of what the GET phase put into VRAM PUT through
    // the engine (which copies them out of VRAM first), and a multipart object uploaded with
    // the engine's UploadPart from the device registration; both read back and compared.
    let (mut put_from_vram, mut upload_part_from_vram) = (None, None);
    if let Some(img) = &image {
        let piece_max = args.range_size.unwrap_or(SLOT);
        let mut pieces = Vec::new();
        for (o, l) in vram::merge_spans(&mut spans.clone()) {
            let mut at = o;
            // At most 16, and no more than the queue holds (they are submitted at once).
            while at < o + l && (pieces.len() as u64) < conc.min(16) {
                let n = (o + l - at).min(piece_max);
                pieces.push((at, n));
                at += n;
            }
        }
        let up_len = model.size.min(20 << 20);
        let scratch_len = usize::try_from(piece_max.max(up_len)).map_err(|_| "piece too large")?;
        let scratch = engine
            .register_host(scratch_len, RegisterOptions::pageable())
            .map_err(|e| e.to_string())?;
        let check = |off: u64, b: &[u8]| model.first_mismatch(off, b);
        let r = vram::put_round_trip(
            &engine,
            &mut q,
            buf,
            scratch,
            BUCKET,
            "from-vram/",
            &pieces,
            &check,
        )?;
        let _ = writeln!(
            stderr,
            "PUT from VRAM: {} objects, {} PUT and read back equal in {:.2} s",
            r.objects,
            format_bytes(r.verified),
            r.elapsed_s
        );
        put_from_vram = Some(r);
        // The first `up_len` bytes of the model into VRAM (after the GET verification, which
        // they cannot influence), then UploadPart from there in 8 MiB parts.
        let mut head = vec![0u8; usize::try_from(up_len).map_err(|_| "too large")?];
        model.fill(0, &mut head);
        img.write(0, &head)
            .map_err(|e| format!("writing VRAM for UploadPart: {e}"))?;
        let r = vram::upload_parts_from_vram(
            &engine,
            &mut q,
            buf,
            scratch,
            BUCKET,
            "from-vram/multipart",
            // 8 MiB parts, fewer when the queue holds fewer entries (all are in flight at once).
            (0, up_len, (8u64 << 20).max(up_len.div_ceil(conc.max(1)))),
            &check,
        )?;
        let _ = writeln!(
            stderr,
            "UploadPart from VRAM: {} parts, {} read back equal in {:.2} s",
            r.parts,
            format_bytes(r.verified),
            r.elapsed_s
        );
        upload_part_from_vram = Some(r);
    }
    drop(q);
    drop(engine);
    drop(image);
    gateway.shutdown();
    lat_ns.sort_unstable();
    let pct = |p: f64| {
        let i = ((lat_ns.len() as f64 * p).ceil() as usize).saturating_sub(1);
        lat_ns
            .get(i.min(lat_ns.len().saturating_sub(1)))
            .map_or(0.0, |&ns| ns as f64 / 1000.0)
    };
    let inline_verify_s = inline_verify.as_secs_f64();
    Ok(EmbeddedReport {
        object_size: model.size,
        tensors: model.tensors.len(),
        upload_s,
        ops: done,
        errors,
        mismatches,
        checksum_verified,
        bytes_verified: verified,
        concurrency: args.concurrency,
        elapsed_s: elapsed,
        ops_per_s: done as f64 / elapsed.max(1e-9),
        gb_per_s: verified as f64 / 1e9 / elapsed.max(1e-9),
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        cpu_s,
        memory: gpu.as_deref().map_or("host", vram::memory_name),
        paths,
        workload: if args.range_size.is_some() {
            "sequential"
        } else {
            "mixed"
        },
        inline_verify_s,
        transfer_gb_per_s: verified as f64 / 1e9 / (elapsed - inline_verify_s).max(1e-9),
        gpu_copies,
        gpu_stage_us,
        coalesce: gpu.is_some() && !args.no_coalesce,
        gpu_tier,
        verify_s,
        put_from_vram,
        upload_part_from_vram,
    })
}

fn print_json(r: &EmbeddedReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::to_string(r).map_err(std::io::Error::other)?
    )
}

fn ms(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

/// The results table's first line: what ran, and — only when some range-gets failed — how
/// many (the exit code says the same). A success is never titled as an error.
fn table_title(ops: u64, errors: u64, object_size: u64, tensors: usize) -> String {
    let what = format!(
        "{ops} range-gets of a {} model ({tensors} tensors)",
        format_bytes(object_size)
    );
    if errors == 0 {
        format!("hipobj bench --embedded: {what}, every byte verified")
    } else {
        format!("hipobj bench --embedded: FAILED: {errors} of {what} failed")
    }
}

fn print_table(r: &EmbeddedReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "{}",
        table_title(r.ops, r.errors, r.object_size, r.tensors)
    )?;
    writeln!(out, "  {:<22} {:>16}", "metric", "value")?;
    let rows: Vec<(&str, String)> = vec![
        ("upload (multipart)", format!("{:.2} s", r.upload_s)),
        ("range-gets", r.ops.to_string()),
        ("errors", r.errors.to_string()),
        ("mismatches", r.mismatches.to_string()),
        ("bytes verified", format_bytes(r.bytes_verified)),
        ("crc proven ranges", r.checksum_verified.to_string()),
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
    if let Some(p) = &r.put_from_vram {
        let v = format!("{} obj, {} ok", p.objects, format_bytes(p.verified));
        writeln!(out, "  {:<22} {:>16}", "PUT from VRAM", v)?;
    }
    if let Some(p) = &r.upload_part_from_vram {
        let v = format!("{} parts, {} ok", p.parts, format_bytes(p.verified));
        writeln!(out, "  {:<22} {:>16}", "UploadPart from VRAM", v)?;
    }
    if r.memory != "host" {
        let v = format!(
            "{} ({})",
            r.gpu_copies,
            if r.coalesce {
                "coalesced"
            } else {
                "one per range"
            }
        );
        writeln!(out, "  {:<22} {:>16}", "copies into VRAM", v)?;
    }
    for (path, bytes) in &r.paths {
        writeln!(
            out,
            "  {:<22} {:>16}",
            format!("path {path}"),
            format_bytes(*bytes)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::table_title;

    #[test]
    fn a_success_is_not_titled_as_an_error() {
        let t = table_title(10_000, 0, 1 << 30, 352);
        assert_eq!(
            t,
            "hipobj bench --embedded: 10000 range-gets of a 1.0 GiB model (352 tensors), every \
             byte verified"
        );
        assert!(!t.to_lowercase().contains("error"), "{t}");
    }

    #[test]
    fn failures_are_counted_in_the_title() {
        let t = table_title(1000, 3, 24 << 20, 40);
        assert!(t.contains("FAILED: 3 of 1000 range-gets"), "{t}");
    }
}
