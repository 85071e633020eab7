//! The object commands (`put`, `get`, `head`, `ls`, `rm`, `mb`, `rb`): argument parsing, output
//! and exit codes. Each command returns a JSON value (printed with `--json`) and prints a human
//! summary otherwise; every failure becomes one line on stderr and exit code 1 (docs/cli.md).

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use s3_lite::checksum::encode_crc64nvme;
use s3_lite::credentials::{self, Overrides, ProcessEnvironment};
use s3_lite::s3::{AddressingStyle, ByteRange, Endpoint, ObjectMeta};
use serde_json::{Value, json};

use crate::bench::parse_size;
use crate::client::{ClientSettings, S3Client};
pub use crate::client_args::ClientArgs;
use crate::diagnose::{self, Asked};
use crate::fallback::{self, Carried};
use crate::net::tls::TlsOptions;
use crate::net::transport::Timeouts;
use crate::s3uri::S3Uri;
use crate::units::format_bytes;
use crate::upload_proof::{
    IntegrityMismatch, SourceDigest, judge_multipart_etag, judge_put, judge_stored, upload_verdict,
};
use engine_io::{EngineSite, EngineTarget, FabricChoice, Selection};

pub use crate::engine_io;

/// What a command needs: a connected client and how to print.
pub struct Context {
    /// The client.
    pub client: S3Client,
    /// `--json`.
    pub json: bool,
    /// Whether to draw progress bars.
    pub progress: bool,
    /// Set when object data went to stdout: the JSON result then goes to stderr.
    pub stdout_is_data: bool,
    /// The endpoint as the engine would reach it (`get`/`put` with `--fabric auto|soft|verbs`).
    pub site: EngineSite,
}

/// A command's failure: one line for stderr.
pub type CommandResult = Result<Value, String>;

fn build_context(global: &ClientArgs) -> Result<Context, String> {
    let overrides = Overrides {
        profile: global.profile.clone(),
        region: global.endpoint.region.clone(),
        endpoint_url: global.endpoint.endpoint_url.clone(),
        ..Default::default()
    };
    let resolved = credentials::resolve(&overrides, &ProcessEnvironment).map_err(|e| match e {
        credentials::CredentialsError::NoCredentials { .. } => format!(
            "{e}. Like the aws CLI, client commands take no key flags: export AWS_ACCESS_KEY_ID \
             and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), or name a profile of \
             ~/.aws/credentials with --profile NAME or AWS_PROFILE"
        ),
        other => other.to_string(),
    })?;
    let url = resolved
        .endpoint_url
        .clone()
        .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", resolved.region));
    let style = match global.addressing_style.as_deref().unwrap_or("auto") {
        "path" => AddressingStyle::Path,
        "virtual" => AddressingStyle::VirtualHost,
        _ => AddressingStyle::Auto,
    };
    let endpoint = Endpoint::parse(&url)
        .map_err(|e| format!("endpoint {url:?}: {e}"))?
        .with_style(style);
    if global.insecure_skip_tls_verify {
        eprintln!(
            "hipobj: warning: TLS certificate verification is disabled (--insecure-skip-tls-verify)"
        );
    }
    let settings = ClientSettings {
        endpoint,
        credentials: resolved.credentials,
        region: resolved.region,
        // `--ca-bundle`, else AWS_CA_BUNDLE, else the profile's `ca_bundle`.
        tls: TlsOptions {
            ca_bundle: global.ca_bundle.clone(),
            insecure_skip_verify: global.insecure_skip_tls_verify,
        }
        .with_aws_ca_bundle(resolved.ca_bundle.as_deref()),
        timeouts: Timeouts::default(),
    };
    let site = EngineSite {
        url: url.clone(),
        credentials: settings.credentials.clone(),
        region: settings.region.clone(),
    };
    let client = S3Client::new(settings).map_err(|e| e.to_string())?;
    let progress =
        !global.output.json && !global.output.no_progress && std::io::stderr().is_terminal();
    Ok(Context {
        client,
        json: global.output.json,
        progress,
        stdout_is_data: false,
        site,
    })
}

/// Builds the context, runs `command`, prints its result or its error; returns the exit code.
pub fn run(global: &ClientArgs, command: impl FnOnce(&mut Context) -> CommandResult) -> i32 {
    let result = build_context(global).and_then(|mut ctx| {
        let value = command(&mut ctx)?;
        if ctx.json && ctx.stdout_is_data {
            eprintln!("{value}");
        } else if ctx.json {
            println!("{value}");
        }
        Ok(())
    });
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("hipobj: error: {message}");
            1
        }
    }
}

fn progress_bar(ctx: &Context, len: u64, label: &str) -> Option<ProgressBar> {
    // Only long transfers get a bar; short ones finish before it would be readable.
    if !ctx.progress || len < 4 << 20 {
        return None;
    }
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
    )
    .map(|s| s.progress_chars("=> "))
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(label.to_owned());
    Some(bar)
}

fn summary(ctx: &Context, line: String) {
    if !ctx.json {
        eprintln!("{line}");
    }
}

fn rate(bytes: u64, started: Instant) -> String {
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    format!("{}/s", format_bytes((bytes as f64 / secs) as u64))
}

/// `--verify` / `--no-verify` of `put`, the same rule as `get`'s (docs/protocol.md, "What
/// proves a PUT / multipart upload").
///
/// A proven mismatch fails either way. An upload whose bytes nothing proved (the server echoed
/// no checksum, its ETag is no MD5, a HEAD afterwards named neither) succeeds by default with
/// `hipobj: warning: unverified: …` on stderr and `"verified": false` in `--json`; `--verify`
/// makes it an error (exit 1); `--no-verify` accepts it without the warning.
#[derive(Args, Debug, Clone, Copy, Default)]
pub struct VerifyArgs {
    /// Require a proof that the server holds exactly our bytes: an upload nothing proved is
    /// an error (exit 1). Default: it succeeds with an `unverified` warning.
    #[arg(long, overrides_with = "no_verify")]
    pub verify: bool,
    /// Accept an upload that could not be proven without the `unverified` warning (a proven
    /// mismatch is still an error).
    #[arg(long, overrides_with = "verify")]
    pub no_verify: bool,
}

impl VerifyArgs {
    /// Whether an unproven transfer is an error (`--verify`).
    pub fn required(&self) -> bool {
        self.verify
    }

    /// On stderr (even with `--json`) when an upload succeeded unproven and neither flag was
    /// given: the exit status alone must not read as verified.
    fn warn_unverified(&self, dest: &S3Uri, len: u64, reason: Option<&str>) {
        if !self.verify && !self.no_verify {
            eprintln!(
                "hipobj: warning: unverified: {len} bytes uploaded to {dest}, but {} (pass --verify to fail instead, --no-verify to silence this)",
                reason.unwrap_or("the server's answers proved nothing")
            );
        }
    }
}

/// Adds the fields of `extra` (an object) to `value` (an object).
fn merge(mut value: Value, extra: Value) -> Value {
    if let (Some(v), Value::Object(e)) = (value.as_object_mut(), extra) {
        v.extend(e);
    }
    value
}

/// `hipobj put FILE s3://BUCKET/KEY`.
#[derive(Args, Debug, Clone)]
pub struct PutArgs {
    /// Local file to upload (with --recursive: a directory).
    pub file: PathBuf,
    /// Upload every regular file under the directory FILE to DEST + its relative path (the aws
    /// CLI's `cp --recursive`); symbolic links are skipped.
    #[arg(long)]
    pub recursive: bool,
    /// Destination, s3://BUCKET/KEY; s3://BUCKET/PREFIX/ or s3://BUCKET appends the file's name.
    pub dest: String,
    /// Files larger than this are uploaded in parts.
    #[arg(long, default_value = "16MiB", value_parser = parse_size)]
    pub multipart_threshold: u64,
    /// Part size of multipart uploads (5MiB..=5GiB, at most 10000 parts).
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub part_size: u64,
    /// Data path: `auto` (default: one signed capability probe; the engine over RDMA when an
    /// http:// endpoint advertises it, else the blocking client), `soft` (the engine over the
    /// soft RDMA fabric, HTTP fallback per request), `verbs` (the engine over libibverbs) or
    /// `http` (the blocking client). The engine speaks only http:// endpoints: https:// keeps
    /// the blocking client.
    #[arg(long, value_parser = FabricChoice::parse, default_value = "auto")]
    pub fabric: FabricChoice,
    /// RDMA device for the verbs fabric (e.g. mlx5_0; default: the first with an active port).
    /// Applies to `--fabric verbs` and `auto`.
    #[arg(long)]
    pub rdma_device: Option<String>,
    #[command(flatten)]
    pub verify: VerifyArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    /// RDMA dialect of the engine: `auto` (default: rc-persistent, then hipobj-rc-v2, then
    /// HTTP, learned per endpoint), `rc-persistent`, `rc-v2` or `http`. `--json` names the
    /// dialect that carried the bytes (`"dialect"`).
    #[arg(long, value_parser = engine_io::parse_dialect, default_value = "auto")]
    pub dialect: engine::Dialect,
}

/// Chooses the data path of `get`/`put` (`--fabric auto` probes the endpoint's capabilities
/// once, on the blocking transport).
fn select(ctx: &Context, choice: FabricChoice, device: Option<&str>) -> Result<Selection, String> {
    let endpoint = ctx.client.endpoint().clone();
    let selection = EngineTarget::select(choice, &ctx.site, device, |site| {
        engine_io::probe(&endpoint, site)
    })?;
    tracing::info!(
        "data path: --fabric {choice:?} -> {} client (capability probe: {})",
        if selection.target.is_some() {
            "engine"
        } else {
            "blocking HTTP"
        },
        selection.probe_json()
    );
    Ok(selection)
}

/// Why a forced fabric left the bytes to the blocking client, other than an empty upload:
/// [`EngineTarget::select`] keeps it for every endpoint but `http://`.
const NO_TLS_ENGINE: &str = "the engine speaks only http:// endpoints (the RDMA dialects' side \
                             exchanges have no TLS)";

/// Prints [`fallback::warning`] on stderr (even with `--json`: a forced fabric that was not
/// used must not pass unnoticed), and logs it for `-v`.
fn warn_fallback(choice: FabricChoice, dialect: engine::Dialect, carried: Carried<'_>) {
    if let Some(w) = fallback::warning(choice, dialect, carried) {
        tracing::info!("data path: {w}");
        eprintln!("hipobj: warning: {w}");
    }
}

/// Runs `put`.
pub fn put(ctx: &mut Context, args: &PutArgs) -> CommandResult {
    if args.recursive {
        return crate::recursive::put_tree(ctx, args);
    }
    if args.file.is_dir() {
        return Err(format!(
            "{}: is a directory; put uploads one file (name a file in it, or pass --recursive)",
            args.file.display()
        ));
    }
    let dest = S3Uri::parse_upload_dest(&args.dest, &args.file).map_err(|e| e.to_string())?;
    if !(5 << 20..=5 << 30).contains(&args.part_size) {
        return Err(format!(
            "--part-size {} is outside S3's 5 MiB..5 GiB",
            args.part_size
        ));
    }
    let mut file = File::open(&args.file).map_err(|e| format!("{}: {e}", args.file.display()))?;
    let len = file
        .metadata()
        .map_err(|e| format!("{}: {e}", args.file.display()))?
        .len();
    let started = Instant::now();
    let multipart = len > args.multipart_threshold;
    // `auto` sends no probe for an upload the engine could not carry anyway.
    let selection = if args.fabric == FabricChoice::Auto && len == 0 {
        Selection::blocking()
    } else {
        select(ctx, args.fabric, args.rdma_device.as_deref())?
    };
    let engine = selection.target.clone().map(|mut t| {
        t.dialect = args.dialect;
        t
    });
    if let (Some(target), true, true) = (&engine, multipart, len > 0) {
        return put_multipart_on_engine(
            ctx, args, target, &dest, &mut file, len, started, &selection,
        );
    }
    if let (Some(target), false, true) = (&engine, multipart, len > 0) {
        // One PUT from registered memory: the whole file fits under the multipart threshold.
        let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.read_to_end(&mut data)
            .map_err(|e| format!("{}: {e}", args.file.display()))?;
        if data.len() as u64 != len {
            return Err(format!(
                "{}: changed size while being read",
                args.file.display()
            ));
        }
        let up = engine_io::upload(target, &dest.bucket, &dest.key, &data).map_err(|e| {
            diagnose::transfer_error(&mut ctx.client, e, &dest.bucket, &dest.key, Asked::Write)
        })?;
        let digest = SourceDigest::of(&data);
        let sent = EngineUpload {
            parts: 1,
            crc64nvme: digest.crc64nvme,
            paths: up.paths,
            retries: up.retries,
        };
        return report_engine_upload(
            ctx,
            args,
            &dest,
            (len, started, &selection),
            sent,
            |etag| judge_put("PUT", &digest, None, etag),
            "HEAD after the PUT named no CRC64NVME and no MD5 ETag",
        );
    }
    let bar = progress_bar(ctx, len, "put");
    let mut on_bytes = |n: u64| {
        if let Some(bar) = &bar {
            bar.inc(n)
        }
    };
    let result = if multipart {
        ctx.client.put_multipart(
            &dest.bucket,
            &dest.key,
            &mut file,
            len,
            args.part_size,
            &mut on_bytes,
        )
    } else {
        ctx.client
            .put_single(&dest.bucket, &dest.key, &mut file, len, &mut on_bytes)
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let result = result.map_err(|e| e.to_string())?;
    let verdict = upload_verdict(
        args.verify.required(),
        result.verified_by.as_deref(),
        result.unverified.as_deref(),
    )?;
    if result.verified_by.is_none() {
        args.verify
            .warn_unverified(&dest, len, result.unverified.as_deref());
    }
    summary(
        ctx,
        format!(
            "upload: {} -> {dest} ({}, {} part{}, {}, sent crc64nvme {}, {})",
            args.file.display(),
            format_bytes(len),
            result.parts,
            if result.parts == 1 { "" } else { "s" },
            rate(len, started),
            result.sent_crc64nvme,
            result
                .verified_by
                .as_deref()
                .map_or("UNVERIFIED".to_owned(), |p| format!("verified by {p}")),
        ),
    );
    let note = engine
        .as_ref()
        .map(|_| "the engine cannot PUT an empty object: it went through the HTTP client");
    warn_fallback(
        args.fabric,
        args.dialect,
        Carried::Blocking(note.unwrap_or(NO_TLS_ENGINE)),
    );
    let retries = ctx.client.retry_stats();
    Ok(merge(
        json!({
            "op": "put", "bucket": dest.bucket, "key": dest.key, "bytes": len, "parts": result.parts,
            "etag": result.etag, "sent_crc64nvme": result.sent_crc64nvme,
            "seconds": started.elapsed().as_secs_f64(), "path": "http", "dialect": "http", "paths": {"http": len}, "note": note, "client": "blocking",
            "fabric_probe": selection.probe_json(),
            "retries": retries.retries, "retries_refused_by_budget": retries.refused_by_budget,
        }),
        verdict,
    ))
}

/// `put` of a file above `--multipart-threshold` on the engine: a multipart upload whose parts
/// move over RDMA where the endpoint pairs. The engine checks the assembled object against the
/// parts; the report's HEAD compares the stored size and full-object CRC64NVME with the file's,
/// or the multipart ETag with the parts' MD5s.
#[allow(clippy::too_many_arguments)]
fn put_multipart_on_engine(
    ctx: &mut Context,
    args: &PutArgs,
    target: &engine_io::EngineTarget,
    dest: &S3Uri,
    file: &mut File,
    len: u64,
    started: Instant,
    selection: &Selection,
) -> CommandResult {
    let bar = progress_bar(ctx, len, "put");
    let mut on_bytes = |n: u64| {
        if let Some(bar) = &bar {
            bar.inc(n)
        }
    };
    let up = engine_io::upload_multipart(
        target,
        &dest.bucket,
        &dest.key,
        file,
        len,
        args.part_size,
        &mut on_bytes,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let up = up.map_err(|e| {
        let e = diagnose::transfer_error(&mut ctx.client, e, &dest.bucket, &dest.key, Asked::Write);
        format!("{}: {e}", args.file.display())
    })?;
    let part_md5s = up.part_md5s;
    let sent = EngineUpload {
        parts: up.parts,
        crc64nvme: up.crc64nvme,
        paths: up.paths,
        retries: up.retries,
    };
    report_engine_upload(
        ctx,
        args,
        dest,
        (len, started, selection),
        sent,
        |etag| judge_multipart_etag(&part_md5s, etag),
        "HEAD after the multipart upload named no full-object CRC64NVME and no multipart MD5 \
         ETag",
    )
}

/// What an upload on the engine sent, for its report.
struct EngineUpload {
    parts: u64,
    /// CRC64NVME of the bytes sent.
    crc64nvme: u64,
    paths: engine_io::PathBytes,
    retries: u64,
}

/// Reports an upload the engine completed: a HEAD says what the server holds, proven by the
/// stored size and full-object CRC64NVME, else by what `by_etag` makes of the stored ETag
/// (`unproven` says why when neither proves anything); then the summary line and `--json`.
fn report_engine_upload(
    ctx: &mut Context,
    args: &PutArgs,
    dest: &S3Uri,
    (len, started, selection): (u64, Instant, &Selection),
    sent: EngineUpload,
    by_etag: impl FnOnce(Option<&str>) -> Result<Option<crate::upload_proof::Proof>, IntegrityMismatch>,
    unproven: &str,
) -> CommandResult {
    let meta = ctx
        .client
        .head_with(&dest.bucket, &dest.key, true)
        .map_err(|e| e.to_string())?;
    let stored = judge_stored(
        len,
        sent.crc64nvme,
        meta.content_length,
        meta.checksum_crc64nvme.as_deref(),
        meta.checksum_type.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let by_etag = by_etag(meta.etag.as_deref()).map_err(|e| e.to_string())?;
    let proof = stored.or(by_etag).map(|p| p.name());
    let verdict = upload_verdict(args.verify.required(), proof, Some(unproven))?;
    if proof.is_none() {
        args.verify.warn_unverified(dest, len, Some(unproven));
    }
    let sent_crc64nvme = s3_lite::checksum::encode_crc64nvme(sent.crc64nvme);
    warn_fallback(args.fabric, args.dialect, Carried::Engine(&sent.paths));
    summary(
        ctx,
        format!(
            "upload: {} -> {dest} ({}, {} part{}, {}, sent crc64nvme {}, {}, path {})",
            args.file.display(),
            format_bytes(len),
            sent.parts,
            if sent.parts == 1 { "" } else { "s" },
            rate(len, started),
            sent_crc64nvme,
            proof.map_or("UNVERIFIED".to_owned(), |p| format!("verified by {p}")),
            sent.paths.summary()
        ),
    );
    Ok(merge(
        json!({
            "op": "put", "bucket": dest.bucket, "key": dest.key, "bytes": len, "parts": sent.parts,
            "etag": meta.etag, "sent_crc64nvme": sent_crc64nvme,
            "seconds": started.elapsed().as_secs_f64(), "path": sent.paths.summary(),
            "dialect": sent.paths.dialect(), "client": "engine", "paths": sent.paths.to_json(),
            "fabric_probe": selection.probe_json(), "retries": sent.retries,
        }),
        verdict,
    ))
}

/// `hipobj get s3://BUCKET/KEY [FILE|-] [--range A-B]`.
#[derive(Args, Debug, Clone)]
pub struct GetArgs {
    /// Source, s3://BUCKET/KEY (with --recursive: s3://BUCKET/PREFIX/).
    pub src: String,
    /// Download every object under the prefix SRC into the directory DEST (default `.`) at its
    /// key's path below the prefix (the aws CLI's `cp --recursive`). Keys that would leave the
    /// directory (`..`, empty or absolute segments) are refused.
    #[arg(long)]
    pub recursive: bool,
    /// Destination file, a directory (an existing one, or any path ending in `/`: writes
    /// DIR/NAME, NAME being the key's last path segment), or `-` for stdout (default: ./NAME).
    pub dest: Option<String>,
    /// Only these bytes: A-B (inclusive), A- (to the end) or -N (the last N bytes); the HTTP
    /// form `bytes=A-B` (aws s3api's `--range`) is accepted too.
    #[arg(long, allow_hyphen_values = true, value_parser = parse_range)]
    pub range: Option<ByteRange>,
    /// Data path: `auto` (default: one signed capability probe; the engine over RDMA when an
    /// http:// endpoint advertises it, else the blocking client), `soft` (the engine over the
    /// soft RDMA fabric, HTTP fallback per request), `verbs` (the engine over libibverbs) or
    /// `http` (the blocking client). The engine speaks only http:// endpoints: https:// keeps
    /// the blocking client.
    #[arg(long, value_parser = FabricChoice::parse, default_value = "auto")]
    pub fabric: FabricChoice,
    /// RDMA device for the verbs fabric (e.g. mlx5_0; default: the first with an active port).
    /// Applies to `--fabric verbs` and `auto`.
    #[arg(long)]
    pub rdma_device: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
    /// RDMA dialect of the engine: `auto` (default: rc-persistent, then hipobj-rc-v2, then
    /// HTTP, learned per endpoint), `rc-persistent`, `rc-v2` or `http`. `--json` names the
    /// dialect that carried the bytes (`"dialect"`).
    #[arg(long, value_parser = engine_io::parse_dialect, default_value = "auto")]
    pub dialect: engine::Dialect,
    /// Require proof: fail (exit 1, nothing kept under the destination name) unless a server
    /// checksum over the bytes matched. Default: a checksum the server offers is always
    /// compared, and a download nothing proves succeeds with `unverified` on stderr.
    #[arg(long, conflicts_with = "no_verify")]
    pub verify: bool,
    /// Accept a download no checksum proves without the `unverified` warning (a checksum the
    /// server sends is still compared: wrong bytes are never accepted).
    #[arg(long)]
    pub no_verify: bool,
}

/// `--range`: `A-B`, `A-`, `-N`, or the same after `bytes=` (as `aws s3api get-object --range`).
fn parse_range(s: &str) -> Result<ByteRange, String> {
    ByteRange::parse_cli(s.strip_prefix("bytes=").unwrap_or(s)).map_err(|e| e.to_string())
}

/// How `get` treats a download that no checksum proves (`--verify` / `--no-verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    /// Default: succeed, saying `unverified` on stderr.
    Warn,
    /// `--verify`: fail.
    Require,
    /// `--no-verify`: succeed quietly.
    Accept,
}

impl Proof {
    fn of(args: &GetArgs) -> Self {
        match (args.verify, args.no_verify) {
            (true, _) => Proof::Require,
            (_, true) => Proof::Accept,
            _ => Proof::Warn,
        }
    }
}

/// What a download did, whichever path carried it.
struct Fetched {
    bytes: u64,
    etag: Option<String>,
    checksum_verified: bool,
    paths: engine_io::PathBytes,
    note: Option<&'static str>,
    /// `engine` or `blocking`: which client moved the bytes.
    client: &'static str,
}

/// The bytes a download will deliver, when known before it starts (for the progress bar).
fn expected_len(
    ctx: &mut Context,
    engine: Option<&EngineTarget>,
    src: &S3Uri,
    range: Option<ByteRange>,
) -> Result<(u64, Option<ObjectMeta>), String> {
    if engine.is_none() {
        let n = match range {
            Some(ByteRange::Inclusive(a, b)) => b.saturating_sub(a) + 1,
            _ => 0,
        };
        return Ok((n, None));
    }
    // Whole-object downloads ask for the stored CRC64NVME, to verify the bytes the engine wrote.
    // A HEAD answer has no body: a 4xx is named by the server's error document for a GET.
    let meta = ctx
        .client
        .head_with(&src.bucket, &src.key, range.is_none())
        .map_err(|e| diagnose::head_error(&mut ctx.client, &src.bucket, &src.key, e).to_string())?;
    let size = meta
        .content_length
        .ok_or("HEAD answered without Content-Length")?;
    let n = match range {
        None => size,
        Some(r) => {
            let (a, b) = r.resolve(size).ok_or_else(|| {
                format!(
                    "range {} is not satisfiable: the object has {size} bytes",
                    r.to_header()
                )
            })?;
            b - a + 1
        }
    };
    Ok((n, Some(meta)))
}

/// Runs the download into `out` on the engine (when `meta` came from its HEAD) or the blocking client.
fn fetch(
    ctx: &mut Context,
    engine: Option<&EngineTarget>,
    src: &S3Uri,
    range: Option<ByteRange>,
    meta: Option<ObjectMeta>,
    out: &mut dyn Write,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<Fetched, String> {
    let (Some(target), Some(meta)) = (engine, meta) else {
        let r = ctx
            .client
            .get(&src.bucket, &src.key, range, out, on_bytes)
            .map_err(|e| e.to_string())?;
        let mut paths = engine_io::PathBytes::default();
        paths.0.push(("http", r.bytes));
        paths.1.push(("http", r.bytes));
        return Ok(Fetched {
            bytes: r.bytes,
            etag: r.meta.etag,
            checksum_verified: r.checksum_verified,
            paths,
            note: None,
            client: "blocking",
        });
    };
    let size = meta.content_length.unwrap_or(0);
    let (first, len) = match range.map(|r| r.resolve(size)) {
        None => (0, size),
        Some(Some((a, b))) => (a, b - a + 1),
        Some(None) => {
            return Err(format!(
                "range is not satisfiable: the object has {size} bytes"
            ));
        }
    };
    let got = engine_io::download(
        target,
        &src.bucket,
        &src.key,
        first,
        len,
        size,
        out,
        on_bytes,
    )
    .map_err(|e| {
        diagnose::transfer_error(&mut ctx.client, e, &src.bucket, &src.key, Asked::Read)
    })?;
    let (paths, crc) = (got.paths, got.crc);
    let stored = meta.checksum_crc64nvme.as_deref().filter(|c| {
        !c.contains('-')
            && !meta
                .checksum_type
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case("COMPOSITE"))
    });
    let (checksum_verified, note) = match (range, stored) {
        (None, Some(expected)) => {
            let actual = encode_crc64nvme(crc);
            if actual != expected {
                return Err(format!(
                    "CRC64NVME mismatch: the server stores {expected}, the bytes received hash to {actual}"
                ));
            }
            (true, None)
        }
        // Every range the engine moved was checked against the server's checksum of it.
        _ if got.ranges_verified => (true, None),
        (None, None) => (
            false,
            Some("HEAD named no full-object CRC64NVME: the download was not checksum-verified"),
        ),
        (Some(_), _) => (false, None),
    };
    Ok(Fetched {
        bytes: len,
        etag: meta.etag,
        checksum_verified,
        paths,
        note,
        client: "engine",
    })
}

/// Where `get` writes, named as `aws s3 cp` names it: no destination is `./NAME`, a directory
/// (existing, or any path ending in `/`) is `DIR/NAME`, NAME being the key's last path segment
/// (`download` for a key ending in `/`; `get` creates a missing `DIR/`); `-` and any other path
/// are used as given.
fn local_destination(dest: Option<&str>, key: &str) -> String {
    let name = key
        .rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or("download");
    match dest {
        None => name.to_owned(),
        Some("-") => "-".to_owned(),
        Some(d) if d.ends_with('/') || std::path::Path::new(d).is_dir() => std::path::Path::new(d)
            .join(name)
            .to_string_lossy()
            .into_owned(),
        Some(d) => d.to_owned(),
    }
}

/// Runs `get`.
pub fn get(ctx: &mut Context, args: &GetArgs) -> CommandResult {
    if args.recursive {
        return crate::recursive::get_tree(ctx, args);
    }
    let src = S3Uri::parse_object(&args.src).map_err(|e| e.to_string())?;
    let dest = local_destination(args.dest.as_deref(), &src.key);
    if let Some(dir) = args.dest.as_deref().filter(|d| d.ends_with('/')) {
        // `aws s3 cp s3://b/k new/` creates `new/`.
        std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
    }
    let started = Instant::now();
    let proof = Proof::of(args);
    let selection = select(ctx, args.fabric, args.rdma_device.as_deref())?;
    let engine = selection.target.clone().map(|mut t| {
        t.dialect = args.dialect;
        t
    });
    let (expected, meta) = expected_len(ctx, engine.as_ref(), &src, args.range)?;
    // `--verify`: a download nothing proves is a failure (decided before the rename).
    let proven = |r: Result<Fetched, String>| match r {
        Ok(f) if proof == Proof::Require && !f.checksum_verified => Err(format!(
            "unverified: no server checksum covered the {} bytes received (--verify); the server sent none for this object or range",
            f.bytes
        )),
        r => r,
    };
    let (result, written_to) = if dest == "-" {
        ctx.stdout_is_data = true;
        let mut out = std::io::stdout().lock();
        let r = proven(fetch(
            ctx,
            engine.as_ref(),
            &src,
            args.range,
            meta,
            &mut out,
            &mut |_| {},
        ));
        out.flush().map_err(|e| format!("stdout: {e}"))?;
        (r, "stdout".to_owned())
    } else {
        // Write to a temporary file next to the destination and rename on success, so a failed
        // download never leaves a truncated file under the final name.
        let dest_path = PathBuf::from(&dest);
        let tmp_path = dest_path.with_file_name(format!(
            ".{}.hipobj-partial",
            dest_path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        // Removed on failure, on drop and on SIGINT/SIGTERM (crate::interrupt).
        let (partial, file) = crate::interrupt::PartialFile::create(tmp_path.clone())
            .map_err(|e| format!("{}: {e}", tmp_path.display()))?;
        let mut writer = std::io::BufWriter::with_capacity(1 << 20, file);
        let bar = progress_bar(ctx, expected.max(1), "get");
        let r = proven(fetch(
            ctx,
            engine.as_ref(),
            &src,
            args.range,
            meta,
            &mut writer,
            &mut |n| {
                if let Some(bar) = &bar {
                    bar.inc(n)
                }
            },
        ));
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
        let flushed = writer
            .into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all());
        match (&r, flushed) {
            (Ok(_), Ok(())) => partial
                .persist(&dest_path)
                .map_err(|e| format!("{}: {e}", dest_path.display()))?,
            (_, flush_result) => {
                drop(partial);
                flush_result.map_err(|e| format!("{}: {e}", tmp_path.display()))?;
            }
        }
        (r, dest.clone())
    };
    let result = result?;
    let carried = if result.client == "engine" {
        Carried::Engine(&result.paths)
    } else {
        Carried::Blocking(NO_TLS_ENGINE)
    };
    warn_fallback(args.fabric, args.dialect, carried);
    if !result.checksum_verified && proof == Proof::Warn {
        // On stderr even with --json: the status must not read as verified.
        eprintln!(
            "hipobj: warning: unverified: no server checksum covered the {} bytes of s3://{}/{} (pass --verify to fail instead, --no-verify to silence this)",
            result.bytes, src.bucket, src.key
        );
    }
    summary(
        ctx,
        format!(
            "download: s3://{}/{} -> {written_to} ({}, {}{}, path {})",
            src.bucket,
            src.key,
            format_bytes(result.bytes),
            rate(result.bytes, started),
            if result.checksum_verified {
                ", crc64nvme verified"
            } else {
                ", unverified"
            },
            result.paths.summary()
        ),
    );
    Ok(json!({
        "op": "get", "bucket": src.bucket, "key": src.key, "bytes": result.bytes, "dest": written_to,
        "range": args.range.map(|r| r.to_header()), "etag": result.etag,
        "checksum_verified": result.checksum_verified, "seconds": started.elapsed().as_secs_f64(),
        "path": result.paths.summary(), "dialect": result.paths.dialect(), "paths": result.paths.to_json(), "note": result.note, "client": result.client,
        "fabric_probe": selection.probe_json(),
        // The blocking client's retries (the engine's downloads do not report theirs yet).
        "retries": (result.client == "blocking").then(|| ctx.client.retry_stats().retries),
    }))
}

/// `hipobj head s3://BUCKET/KEY`.
#[derive(Args, Debug)]
pub struct HeadArgs {
    /// The object, s3://BUCKET/KEY.
    pub src: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `head`.
pub fn head(ctx: &mut Context, args: &HeadArgs) -> CommandResult {
    let src = S3Uri::parse_object(&args.src).map_err(|e| e.to_string())?;
    // `x-amz-checksum-mode: ENABLED`: servers name the stored checksum only when asked.
    let meta = ctx
        .client
        .head_with(&src.bucket, &src.key, true)
        .map_err(|e| diagnose::head_error(&mut ctx.client, &src.bucket, &src.key, e).to_string())?;
    let value = json!({
        "op": "head", "bucket": src.bucket, "key": src.key, "content_length": meta.content_length,
        "etag": meta.etag, "last_modified": meta.last_modified, "content_type": meta.content_type,
        "checksum_crc64nvme": meta.checksum_crc64nvme, "checksum_type": meta.checksum_type,
        "version_id": meta.version_id,
    });
    if !ctx.json {
        print_fields(&value);
    }
    Ok(value)
}

/// Prints a JSON object's fields as `name: value` lines (strings unquoted, nulls left out, `op`
/// omitted): the human form of a command's result.
fn print_fields(value: &Value) {
    let Some(fields) = value.as_object() else {
        return;
    };
    let mut out = std::io::stdout().lock();
    for (name, v) in fields {
        let text = match v {
            Value::Null => continue,
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if name != "op" {
            let _ = writeln!(out, "{name}: {text}");
        }
    }
}

/// `hipobj ls [s3://[BUCKET[/PREFIX]]]`.
#[derive(Args, Debug)]
pub struct LsArgs {
    /// s3://BUCKET or s3://BUCKET/PREFIX; none (or `s3://`) lists the buckets.
    pub target: Option<String>,
    /// List every key under the prefix instead of rolling up at `/`.
    #[arg(long, short = 'r')]
    pub recursive: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `hipobj ls` or `hipobj ls s3://`: the buckets, as `aws s3 ls` prints them.
fn ls_buckets(ctx: &mut Context) -> CommandResult {
    let buckets = ctx.client.list_buckets().map_err(|e| e.to_string())?;
    if !ctx.json {
        let mut out = std::io::stdout().lock();
        for b in &buckets {
            let _ = writeln!(
                out,
                "{:>30}  {}",
                b.creation_date.as_deref().unwrap_or("-"),
                b.name
            );
        }
    }
    let buckets: Vec<Value> = buckets
        .iter()
        .map(|b| json!({"name": b.name, "creation_date": b.creation_date}))
        .collect();
    Ok(json!({"op": "ls", "buckets": buckets}))
}

/// Runs `ls`.
pub fn ls(ctx: &mut Context, args: &LsArgs) -> CommandResult {
    let Some(arg) = args.target.as_deref().filter(|t| *t != "s3://") else {
        return ls_buckets(ctx);
    };
    let target = S3Uri::parse(arg).map_err(|e| e.to_string())?;
    let prefix = (!target.key.is_empty()).then_some(target.key.as_str());
    let delimiter = (!args.recursive).then_some("/");
    let listing = ctx
        .client
        .list(&target.bucket, prefix, delimiter)
        .map_err(|e| e.to_string())?;
    if !ctx.json {
        let mut out = std::io::stdout().lock();
        for p in &listing.common_prefixes {
            let _ = writeln!(out, "{:>30} {:>12}  {p}", "", "PRE");
        }
        for o in &listing.objects {
            let _ = writeln!(
                out,
                "{:>30} {:>12}  {}",
                o.last_modified.as_deref().unwrap_or("-"),
                o.size,
                o.key
            );
        }
    }
    let objects: Vec<Value> = listing
        .objects
        .iter()
        .map(|o| json!({"key": o.key, "size": o.size, "etag": o.etag, "last_modified": o.last_modified}))
        .collect();
    Ok(
        json!({"op": "ls", "bucket": target.bucket, "prefix": prefix, "objects": objects,
              "common_prefixes": listing.common_prefixes, "pages": listing.pages}),
    )
}

/// `hipobj rm s3://BUCKET/KEY`.
#[derive(Args, Debug)]
pub struct RmArgs {
    /// The object, s3://BUCKET/KEY.
    pub target: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `rm`.
pub fn rm(ctx: &mut Context, args: &RmArgs) -> CommandResult {
    let target = S3Uri::parse_object(&args.target).map_err(|e| e.to_string())?;
    ctx.client
        .delete(&target.bucket, &target.key)
        .map_err(|e| e.to_string())?;
    summary(ctx, format!("delete: {target}"));
    Ok(json!({"op": "rm", "bucket": target.bucket, "key": target.key}))
}

/// `hipobj mb s3://BUCKET`.
#[derive(Args, Debug)]
pub struct MbArgs {
    /// The bucket, s3://BUCKET.
    pub target: String,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `mb`.
pub fn mb(ctx: &mut Context, args: &MbArgs) -> CommandResult {
    let target = S3Uri::parse(&args.target).map_err(|e| e.to_string())?;
    if !target.key.is_empty() {
        return Err(format!(
            "mb takes s3://BUCKET, not an object key ({})",
            args.target
        ));
    }
    ctx.client
        .create_bucket(&target.bucket)
        .map_err(|e| e.to_string())?;
    summary(ctx, format!("make_bucket: {}", target.bucket));
    Ok(json!({"op": "mb", "bucket": target.bucket}))
}

/// `hipobj rb s3://BUCKET [--force]`.
#[derive(Args, Debug)]
pub struct RbArgs {
    /// The bucket, s3://BUCKET.
    pub target: String,
    /// Delete every object in the bucket first (otherwise a bucket that is not empty is refused).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Runs `rb`.
pub fn rb(ctx: &mut Context, args: &RbArgs) -> CommandResult {
    let target = S3Uri::parse(&args.target).map_err(|e| e.to_string())?;
    if !target.key.is_empty() {
        return Err(format!(
            "rb takes s3://BUCKET, not an object key ({})",
            args.target
        ));
    }
    // Checked here too: not every server refuses to delete a bucket that holds objects
    // (s3s-fs 0.14 deletes it with them).
    let listing = ctx
        .client
        .list(&target.bucket, None, None)
        .map_err(|e| e.to_string())?;
    if !args.force && !listing.objects.is_empty() {
        return Err(format!(
            "s3://{} is not empty ({} objects): `hipobj rb --force` deletes them first",
            target.bucket,
            listing.objects.len()
        ));
    }
    let mut deleted = 0u64;
    if args.force {
        for o in &listing.objects {
            ctx.client
                .delete(&target.bucket, &o.key)
                .map_err(|e| format!("s3://{}/{}: {e}", target.bucket, o.key))?;
            summary(ctx, format!("delete: s3://{}/{}", target.bucket, o.key));
            deleted += 1;
        }
    }
    ctx.client.delete_bucket(&target.bucket).map_err(|e| {
        let e = e.to_string();
        if e.contains("BucketNotEmpty") {
            format!("{e} (`hipobj rb --force` deletes its objects first)")
        } else {
            e
        }
    })?;
    summary(ctx, format!("remove_bucket: {}", target.bucket));
    Ok(json!({"op": "rb", "bucket": target.bucket, "objects_deleted": deleted}))
}
