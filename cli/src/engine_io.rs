//! `hipobj get` / `hipobj put` on the engine (`--fabric auto|soft|verbs`).
//!
//! The engine moves payloads into and out of registered memory, over RDMA (the soft fabric or
//! verbs) when the endpoint pairs and over the HTTP body otherwise; each completion names the
//! path that carried its bytes, and the commands report them per path. The RDMA dialects need
//! an `http://` endpoint, so only those run here (`https://` keeps the blocking client). An
//! upload above `--multipart-threshold` is a multipart upload on the engine
//! ([`upload_multipart`]).
//!
//! `--fabric auto` (the default) asks the endpoint once per invocation, with one signed
//! `GET /.hipobj/rc/capabilities` on the blocking transport, whether it carries payloads over
//! RDMA. Only a `200` naming a fabric and the `rc-persistent` protocol selects the engine; any
//! other answer (a plain S3 server's 4xx, a fabric-less gateway's 501, no answer) keeps the
//! blocking client, whose TLS, multipart uploads and GET-checksum verification then apply as
//! if RDMA did not exist.

use std::io::{Read, Write};
use std::time::Duration;

use engine::{Dialect, Engine, Fabric, RegisterOptions};
use ring_api::opcode::{
    AbortMultipart, CompleteMultipart, CreateMultipart, Put, RangeGet, UploadPart,
};
use ring_api::{BufSlice, Cqe, ErrorCode, PartNumber, UploadHandle};
use s3_lite::checksum::Crc64Nvme;
use s3_lite::credentials::Credentials;

pub use crate::capability::{Capability, ProbeError, ProbeOutcome, probe};
use crate::upload_proof::SourceDigest;

/// Bytes per range-get of a download.
pub const CHUNK: u64 = 8 << 20;
/// Range-gets in flight at once.
pub const IN_FLIGHT: u64 = 4;
/// How long one wait for a completion may last before the transfer is declared stalled
/// (the engine's own per-attempt timeouts and retries run inside it).
const STALL: Duration = Duration::from_secs(300);
/// `--fabric`: which data path `get` and `put` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FabricChoice {
    /// The engine when the endpoint is `http://` and advertises RDMA (one capability probe),
    /// the blocking client otherwise.
    #[default]
    Auto,
    /// The engine, always trying the soft RDMA fabric first; per-request HTTP fallback applies.
    Soft,
    /// The engine over libibverbs (`--rdma-device`, else the first device); per-request HTTP
    /// fallback applies.
    Verbs,
    /// The blocking HTTP client (works with https://, multipart, any S3 server).
    Http,
}

impl FabricChoice {
    /// Parses `auto`, `soft`, `verbs` or `http`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "soft" => Ok(Self::Soft),
            "verbs" => Ok(Self::Verbs),
            "http" => Ok(Self::Http),
            other => Err(format!(
                "--fabric {other:?}: expected auto, soft, verbs or http"
            )),
        }
    }
}

/// The endpoint as the engine would reach it.
#[derive(Debug, Clone)]
pub struct EngineSite {
    /// The endpoint URL.
    pub url: String,
    /// Signing identity.
    pub credentials: Credentials,
    /// Signature scope region.
    pub region: String,
}

impl EngineSite {
    /// Whether the endpoint is `http://`: the RDMA dialects need it (their side exchanges have
    /// no TLS), so an `https://` endpoint keeps the blocking client, which speaks TLS too.
    #[must_use]
    pub fn is_plain_http(&self) -> bool {
        self.url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
    }
}

/// The chosen data path: the engine target, or `None` for the blocking client.
#[derive(Debug, Clone)]
pub struct Selection {
    /// Set when the engine carries the transfer.
    pub target: Option<EngineTarget>,
    /// What the capability probe said (`--fabric auto` against `http://` only).
    pub probe: Option<ProbeOutcome>,
}

impl Selection {
    /// The blocking client, no probe sent.
    #[must_use]
    pub fn blocking() -> Self {
        Self {
            target: None,
            probe: None,
        }
    }

    /// `"fabric_probe"` for `--json`: `null` when no probe was sent.
    #[must_use]
    pub fn probe_json(&self) -> serde_json::Value {
        self.probe
            .as_ref()
            .map_or(serde_json::Value::Null, ProbeOutcome::to_json)
    }
}

/// What the engine needs to reach the endpoint.
#[derive(Debug, Clone)]
pub struct EngineTarget {
    /// `http://host:port`.
    pub url: String,
    /// Signing identity.
    pub credentials: Credentials,
    /// Signature scope region.
    pub region: String,
    /// Engine fabric (`Auto`, `Soft` or `Verbs`).
    pub fabric: Fabric,
    /// `--rdma-device`: the verbs device to open (`Verbs`, `Auto`).
    pub verbs_device: Option<String>,
    /// `--dialect`: the RDMA dialect (`Auto`: negotiated per endpoint).
    pub dialect: Dialect,
}

impl EngineTarget {
    /// Chooses the data path for `choice`. `http` and any endpoint but `http://` (the RDMA
    /// dialects need plain HTTP) keep the blocking client without a probe; `soft` and `verbs` run the engine
    /// without one; `auto` calls `probe` once and runs the engine only when the endpoint
    /// advertises RDMA. `verbs_device` (`--rdma-device`) is refused with `soft` and `http`.
    pub fn select(
        choice: FabricChoice,
        site: &EngineSite,
        verbs_device: Option<&str>,
        probe: impl FnOnce(&EngineSite) -> Result<Capability, ProbeError>,
    ) -> Result<Selection, String> {
        let fabric = match (choice, verbs_device) {
            (FabricChoice::Soft | FabricChoice::Http, Some(_)) => {
                return Err(
                    "--rdma-device applies to --fabric verbs or auto (the verbs fabric)".into(),
                );
            }
            (FabricChoice::Http, None) => return Ok(Selection::blocking()),
            (FabricChoice::Auto, _) => Fabric::Auto,
            (FabricChoice::Soft, None) => Fabric::Soft,
            (FabricChoice::Verbs, _) => Fabric::Verbs,
        };
        if !site.is_plain_http() {
            return Ok(Selection::blocking());
        }
        let target = Self {
            url: site.url.clone(),
            credentials: site.credentials.clone(),
            region: site.region.clone(),
            fabric,
            verbs_device: verbs_device.map(str::to_owned),
            dialect: Dialect::Auto,
        };
        if choice != FabricChoice::Auto {
            return Ok(Selection {
                target: Some(target),
                probe: None,
            });
        }
        let outcome = match probe(site) {
            Ok(c) => ProbeOutcome::Answered(c),
            Err(e) => ProbeOutcome::Failed(e),
        };
        let advertised = matches!(outcome, ProbeOutcome::Answered(Capability::Rdma { .. }));
        Ok(Selection {
            target: advertised.then_some(target),
            probe: Some(outcome),
        })
    }

    fn engine(&self, connections: usize) -> Result<Engine, String> {
        let mut b = Engine::builder()
            .endpoint_url(&self.url)
            .credentials(self.credentials.clone())
            .region(&self.region)
            .connections_per_worker(connections)
            .fabric(self.fabric)
            .dialect(self.dialect);
        if let Some(name) = &self.verbs_device {
            b = b.verbs_device(name.clone());
        }
        b.build().map_err(|e| match e {
            // Named as the user asked for it, with the ways out.
            engine::EngineError::VerbsUnavailable { .. } => format!(
                "--fabric verbs: {e}; use --fabric auto (RDMA when possible) or --fabric http"
            ),
            e => format!("engine: {e}"),
        })
    }
}

pub use crate::bench::{dialect_name, parse_dialect, path_name};
pub use crate::paths::PathBytes;

/// A failed transfer on the engine: the message, and the completion's code when a completion
/// failed (so the caller can ask the server or the socket for a better name:
/// [`crate::diagnose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferError {
    /// What failed, for the user.
    pub message: String,
    /// The failed completion's code; `None` for failures before or after the engine's answer.
    pub code: Option<ErrorCode>,
}

impl std::fmt::Display for TransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<String> for TransferError {
    fn from(message: String) -> Self {
        Self {
            message,
            code: None,
        }
    }
}

impl From<&str> for TransferError {
    fn from(message: &str) -> Self {
        message.to_owned().into()
    }
}

impl From<TransferError> for String {
    fn from(e: TransferError) -> Self {
        e.message
    }
}

fn failure(what: &str, c: &Cqe) -> TransferError {
    let code = c
        .error_code()
        .map_or_else(|| format!("result {}", c.result()), |e| format!("{e:?}"));
    let class = c
        .error_class()
        .map_or_else(String::new, |k| format!(" ({k:?})"));
    TransferError {
        message: format!("{what} failed: {code}{class}"),
        code: c.error_code(),
    }
}

/// The engine of one transfer of an object, with a registered ring of slots and a queue as
/// deep as the ring (the queue must go before the engine).
struct Ring {
    q: engine::Queue,
    buf: ring_api::BufHandle,
    obj: ring_api::ObjectId,
    engine: Engine,
}

impl Ring {
    /// `depth` slots of `slot_len` bytes for `bucket/key`.
    fn open(
        target: &EngineTarget,
        bucket: &str,
        key: &str,
        depth: u64,
        slot_len: u64,
    ) -> Result<Self, String> {
        let engine = target.engine(usize::try_from(depth).unwrap_or(1))?;
        let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
        let ring_len = usize::try_from(depth * slot_len)
            .map_err(|_| "transfer ring too large for this host")?;
        let buf = engine
            .register_host(ring_len, RegisterOptions::pageable())
            .map_err(|e| e.to_string())?;
        let q = engine
            .queue(u32::try_from(depth).unwrap_or(1))
            .map_err(|e| e.to_string())?;
        Ok(Self {
            q,
            buf,
            obj,
            engine,
        })
    }
}

/// What a download moved and what proved it.
#[derive(Debug, Clone, Default)]
pub struct Downloaded {
    /// Bytes per path.
    pub paths: PathBytes,
    /// CRC64NVME of everything written.
    pub crc: u64,
    /// Every range's bytes were compared with a server checksum of exactly them (the engine's
    /// `VERIFIED` completion flag: our gateway's range or RDMA reply checksum).
    pub ranges_verified: bool,
}

/// Downloads bytes `first..first+len` of an object of `object_size` bytes (its HEAD) with
/// parallel range-gets of [`CHUNK`] ([`IN_FLIGHT`] at once) into one registered ring of
/// slots, and writes them to `out` in order. Each answer that names the object's size must
/// name `object_size` (a shortened HEAD cannot shorten the download unnoticed).
#[allow(clippy::too_many_arguments)]
pub fn download(
    target: &EngineTarget,
    bucket: &str,
    key: &str,
    first: u64,
    len: u64,
    object_size: u64,
    out: &mut dyn Write,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<Downloaded, TransferError> {
    let mut crc = Crc64Nvme::new();
    let mut paths = PathBytes::default();
    let mut ranges_verified = true;
    if len == 0 {
        return Ok(Downloaded {
            paths,
            crc: crc.finish(),
            ranges_verified: false,
        });
    }
    let chunks = len.div_ceil(CHUNK);
    let depth = IN_FLIGHT.min(chunks);
    let slot_len = CHUNK.min(len);
    // Bound in this order so the queue drops before the engine (reverse order of declaration).
    let Ring {
        engine,
        obj,
        buf,
        mut q,
    } = Ring::open(target, bucket, key, depth, slot_len)?;
    let chunk_len = |i: u64| CHUNK.min(len - i * CHUNK);
    // Chunk i lives in slot i % depth; it is submitted only once chunk i - depth is written, so
    // completions may arrive in any order and are still written in order.
    let mut done = vec![false; usize::try_from(depth).unwrap_or(1)];
    let mut cqes = vec![Cqe::default(); usize::try_from(depth * 2).unwrap_or(2)];
    let (mut next_submit, mut next_write) = (0u64, 0u64);
    while next_write < chunks {
        while next_submit < chunks && next_submit < next_write + depth {
            let slot = next_submit % depth;
            let sqe = RangeGet::new(
                obj,
                first + next_submit * CHUNK,
                BufSlice::new(buf, slot * slot_len, chunk_len(next_submit)),
            )
            .user_data(next_submit)
            .build();
            if q.push(&sqe).is_err() {
                break;
            }
            next_submit += 1;
        }
        if q.wait(1, Some(STALL)) == 0 {
            return Err(format!("download stalled: no completion in {} s", STALL.as_secs()).into());
        }
        let n = q.reap(&mut cqes);
        for c in cqes.iter().take(n) {
            let i = c.user_data();
            if i < next_write || i >= next_submit {
                return Err(format!("completion for unknown chunk {i}").into());
            }
            let want = chunk_len(i);
            if !c.is_ok() {
                return Err(failure(
                    &format!("range-get {}+{want}", first + i * CHUNK),
                    c,
                ));
            }
            if c.bytes() != want {
                return Err(format!(
                    "range-get {}+{want}: {} bytes arrived",
                    first + i * CHUNK,
                    c.bytes()
                )
                .into());
            }
            if c.aux() != 0 && c.aux() != object_size {
                return Err(format!(
                    "integrity: range-get {}+{want}: the server names an object of {} bytes, HEAD said {object_size}",
                    first + i * CHUNK,
                    c.aux()
                ).into());
            }
            ranges_verified &= c.verified();
            paths.add_completion(c, want);
            if let Some(d) = done.get_mut(usize::try_from(i % depth).unwrap_or(0)) {
                *d = true;
            }
        }
        // Write every chunk that is next in order.
        while next_write < chunks {
            let slot = next_write % depth;
            let Some(d) = done.get_mut(usize::try_from(slot).unwrap_or(0)) else {
                break;
            };
            if !*d {
                break;
            }
            *d = false;
            let want = chunk_len(next_write);
            let view = engine
                .read(buf, slot * slot_len, want)
                .map_err(|e| e.to_string())?;
            crc.update(&view);
            out.write_all(&view)
                .map_err(|e| format!("writing the download: {e}"))?;
            drop(view);
            on_bytes(want);
            next_write += 1;
        }
    }
    Ok(Downloaded {
        paths,
        crc: crc.finish(),
        ranges_verified,
    })
}

/// What a single-request upload on the engine did.
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// Bytes per path.
    pub paths: PathBytes,
    /// Retries the engine made (`Engine::retry_stats`).
    pub retries: u64,
}

/// Uploads `data` (non-empty) with one engine PUT from registered memory.
pub fn upload(
    target: &EngineTarget,
    bucket: &str,
    key: &str,
    data: &[u8],
) -> Result<Uploaded, TransferError> {
    if data.is_empty() {
        return Err("the engine cannot PUT an empty buffer".into());
    }
    let engine = target.engine(1)?;
    let obj = engine.object(bucket, key).map_err(|e| e.to_string())?;
    let buf = engine
        .register_host(data.len(), RegisterOptions::pageable())
        .map_err(|e| e.to_string())?;
    engine.copy_in(buf, 0, data).map_err(|e| e.to_string())?;
    let mut q = engine.queue(1).map_err(|e| e.to_string())?;
    let len = data.len() as u64;
    q.push(
        &Put::new(obj, BufSlice::new(buf, 0, len))
            .user_data(1)
            .build(),
    )
    .map_err(|e| format!("queueing the PUT: {e:?}"))?;
    if q.wait(1, Some(STALL)) == 0 {
        return Err(format!("upload stalled: no completion in {} s", STALL.as_secs()).into());
    }
    let mut cqes = [Cqe::default()];
    if q.reap(&mut cqes) != 1 {
        return Err("upload: no completion".into());
    }
    let [c] = cqes;
    if !c.is_ok() {
        return Err(failure("PUT", &c));
    }
    let mut paths = PathBytes::default();
    paths.add_completion(&c, len);
    Ok(Uploaded {
        paths,
        retries: engine.retry_stats().retries,
    })
}

/// Most bytes of parts held in registered memory at once: [`IN_FLIGHT`] parts, fewer when
/// parts are large (at least one).
const PART_MEMORY: u64 = 256 << 20;

/// What a multipart upload on the engine did.
#[derive(Debug, Clone)]
pub struct UploadedParts {
    /// Bytes per path.
    pub paths: PathBytes,
    /// Parts uploaded.
    pub parts: u64,
    /// CRC64NVME of all the bytes read from the source.
    pub crc64nvme: u64,
    /// MD5 of each part, in part order (a multipart ETag is the MD5 of them).
    pub part_md5s: Vec<[u8; 16]>,
    /// Retries the engine made (`Engine::retry_stats`).
    pub retries: u64,
}

/// Uploads the `len` bytes (non-zero) that `source` yields as one multipart upload in parts of
/// `part_size`, on the engine: CreateMultipart, then up to [`IN_FLIGHT`] parts at once from a
/// registered ring of slots (over RDMA where the endpoint pairs: the server READs each part
/// from its slot), then CompleteMultipart, after which the engine checks the object the server
/// assembled against the parts it sent (the Complete answer's full-object CRC64NVME, or a
/// HEAD's). On any failure the upload is aborted, so no parts stay behind, and the first error
/// is returned.
pub fn upload_multipart(
    target: &EngineTarget,
    bucket: &str,
    key: &str,
    source: &mut dyn Read,
    len: u64,
    part_size: u64,
    on_bytes: &mut dyn FnMut(u64),
) -> Result<UploadedParts, TransferError> {
    let parts = len.div_ceil(part_size.max(1));
    let Some(last) = u32::try_from(parts).ok().and_then(PartNumber::new) else {
        return Err(format!(
            "a multipart upload of {len} bytes in parts of {part_size} needs {parts} parts; \
             S3 takes 1..=10000: raise --part-size"
        )
        .into());
    };
    let slot_len = part_size.min(len);
    let depth = IN_FLIGHT.min(parts).min((PART_MEMORY / slot_len).max(1));
    // Bound in this order so the queue drops before the engine (reverse order of declaration).
    let Ring {
        engine,
        obj,
        buf,
        mut q,
    } = Ring::open(target, bucket, key, depth, slot_len)?;
    let created = one(&mut q, CreateMultipart::new(obj).build(), "CreateMultipart")?;
    let upload = u32::try_from(created.aux())
        .map(UploadHandle)
        .map_err(|_| format!("CreateMultipart: the engine named upload {}", created.aux()))?;
    let mut parts_ring = PartRing {
        engine: &engine,
        q: &mut q,
        obj,
        upload,
        buf,
        slot_len,
        depth,
        len,
        part_size,
    };
    let sent = parts_ring.send_all(source, on_bytes);
    let outcome = sent.and_then(|sent| {
        one(
            &mut q,
            CompleteMultipart::new(obj, upload, last).build(),
            "CompleteMultipart",
        )?;
        Ok(sent)
    });
    match outcome {
        Ok(Sent {
            paths,
            crc64nvme,
            part_md5s,
        }) => Ok(UploadedParts {
            paths,
            parts,
            crc64nvme,
            part_md5s,
            retries: engine.retry_stats().retries,
        }),
        Err(e) => {
            // Best effort: the first error is what the user needs to see.
            let _ = one(
                &mut q,
                AbortMultipart::new(obj, upload).build(),
                "AbortMultipart",
            );
            Err(e)
        }
    }
}

/// `user_data` of the single-step entries of a multipart upload (parts carry their index).
const STEP: u64 = u64::MAX;

/// Submits `sqe` as the one step in flight and waits for its successful completion;
/// completions of anything else still in flight (parts, after a failure) are passed over.
fn one(q: &mut engine::Queue, sqe: ring_api::Sqe, what: &str) -> Result<Cqe, TransferError> {
    q.push(&sqe.with_user_data(STEP))
        .map_err(|e| format!("queueing the {what}: {e:?}"))?;
    let mut cqes = [Cqe::default(); 8];
    loop {
        if q.wait(1, Some(STALL)) == 0 {
            return Err(format!("{what} stalled: no completion in {} s", STALL.as_secs()).into());
        }
        let n = q.reap(&mut cqes);
        if let Some(c) = cqes.iter().take(n).find(|c| c.user_data() == STEP) {
            return if c.is_ok() {
                Ok(*c)
            } else {
                Err(failure(what, c))
            };
        }
    }
}

/// What the parts of a multipart upload carried, and their digests.
struct Sent {
    paths: PathBytes,
    /// CRC64NVME of all the parts.
    crc64nvme: u64,
    /// MD5 of each part, in part order.
    part_md5s: Vec<[u8; 16]>,
}

/// The parts of one multipart upload in flight: each part is read from the source into a slot
/// no part in flight holds (parts may complete in any order, and a slot is reused only once
/// the server has its bytes).
struct PartRing<'a> {
    engine: &'a Engine,
    q: &'a mut engine::Queue,
    obj: ring_api::ObjectId,
    upload: UploadHandle,
    buf: ring_api::BufHandle,
    slot_len: u64,
    depth: u64,
    len: u64,
    part_size: u64,
}

impl PartRing<'_> {
    fn part_len(&self, i: u64) -> u64 {
        self.part_size.min(self.len - i * self.part_size)
    }

    /// Uploads every part, in order from the source; returns the bytes per path and the parts'
    /// digests. After a failure it waits for the parts still in flight (their
    /// slots are being read) before it returns the failure.
    fn send_all(
        &mut self,
        source: &mut dyn Read,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<Sent, TransferError> {
        let parts = self.len.div_ceil(self.part_size);
        let mut digests = Vec::new();
        let mut paths = PathBytes::default();
        let mut part = vec![0u8; usize::try_from(self.slot_len).unwrap_or(0)];
        let mut cqes = vec![Cqe::default(); usize::try_from(self.depth * 2).unwrap_or(2)];
        // The part each slot's bytes belong to while it is in flight.
        let mut holder: Vec<Option<u64>> = vec![None; usize::try_from(self.depth).unwrap_or(1)];
        let mut next = 0u64;
        let mut failed: Option<TransferError> = None;
        loop {
            while failed.is_none() && next < parts {
                let Some(slot) = holder.iter().position(Option::is_none) else {
                    break;
                };
                match self.submit(next, slot as u64, source, &mut part) {
                    Ok(d) => digests.push(d),
                    Err(e) => {
                        failed = Some(e.into());
                        break;
                    }
                }
                holder[slot] = Some(next);
                next += 1;
            }
            if holder.iter().all(Option::is_none) {
                break;
            }
            if self.q.wait(1, Some(STALL)) == 0 {
                return Err(
                    format!("upload stalled: no part completed in {} s", STALL.as_secs()).into(),
                );
            }
            let n = self.q.reap(&mut cqes);
            for c in cqes.iter().take(n) {
                let i = c.user_data();
                let Some(slot) = holder.iter().position(|h| *h == Some(i)) else {
                    failed.get_or_insert(format!("completion for unknown part {}", i + 1).into());
                    continue;
                };
                holder[slot] = None;
                if c.is_ok() {
                    let len = self.part_len(i);
                    paths.add_completion(c, len);
                    on_bytes(len);
                } else {
                    failed.get_or_insert(failure(&format!("UploadPart {}", i + 1), c));
                }
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
        let mut crc64nvme = 0;
        for (i, d) in digests.iter().enumerate() {
            crc64nvme = if i == 0 {
                d.crc64nvme
            } else {
                Crc64Nvme::combine(crc64nvme, d.crc64nvme, self.part_len(i as u64))
            };
        }
        Ok(Sent {
            paths,
            crc64nvme,
            part_md5s: digests.iter().map(|d| d.md5).collect(),
        })
    }

    /// Reads part `i` from the source into slot `slot` and submits it; returns its digests.
    fn submit(
        &mut self,
        i: u64,
        slot: u64,
        source: &mut dyn Read,
        part: &mut [u8],
    ) -> Result<SourceDigest, String> {
        let want = self.part_len(i);
        let bytes = part
            .get_mut(..usize::try_from(want).unwrap_or(usize::MAX))
            .ok_or("a part larger than its slot")?;
        source
            .read_exact(bytes)
            .map_err(|e| format!("reading part {}: {e}", i + 1))?;
        let digest = SourceDigest::of(bytes);
        let slot = slot * self.slot_len;
        self.engine
            .copy_in(self.buf, slot, bytes)
            .map_err(|e| e.to_string())?;
        let number = u32::try_from(i + 1)
            .ok()
            .and_then(PartNumber::new)
            .ok_or("part number past 10000")?;
        let sqe = UploadPart::new(
            self.obj,
            self.upload,
            number,
            BufSlice::new(self.buf, slot, want),
        )
        .user_data(i)
        .build();
        self.q
            .push(&sqe)
            .map_err(|e| format!("queueing part {}: {e:?}", i + 1))?;
        Ok(digest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(url: &str) -> EngineSite {
        EngineSite {
            url: url.into(),
            credentials: Credentials::new("a", "b"),
            region: "r".into(),
        }
    }

    fn soft_gateway(_: &EngineSite) -> Result<Capability, ProbeError> {
        Ok(Capability::Rdma {
            fabric: "soft".into(),
        })
    }

    fn never(_: &EngineSite) -> Result<Capability, ProbeError> {
        panic!("no probe may be sent for this choice")
    }

    fn fabric(sel: &Selection) -> Option<Fabric> {
        sel.target.as_ref().map(|t| t.fabric)
    }

    #[test]
    fn auto_runs_the_engine_only_on_plain_http_that_advertises_rdma() {
        let plain = site("http://127.0.0.1:9000");
        let sel = EngineTarget::select(FabricChoice::Auto, &plain, None, soft_gateway).unwrap();
        assert_eq!(fabric(&sel), Some(Fabric::Auto));
        assert_eq!(
            sel.probe_json(),
            serde_json::json!({"status": 200, "fabric": "soft"})
        );
        // A plain S3 server: the probe's 404 keeps the blocking client.
        let sel = EngineTarget::select(FabricChoice::Auto, &site("HTTP://h"), None, |_| {
            Ok(Capability::NotAdvertised { status: 404 })
        })
        .unwrap();
        assert_eq!(fabric(&sel), None);
        assert_eq!(sel.probe_json(), serde_json::json!({"status": 404}));
        // No answer at all: the blocking client, which then reports the real failure.
        let sel = EngineTarget::select(FabricChoice::Auto, &plain, None, |_| {
            Err(ProbeError::Exchange("refused".into()))
        })
        .unwrap();
        assert_eq!(fabric(&sel), None);
        assert_eq!(
            sel.probe_json(),
            serde_json::json!({"error": "capability probe: refused"})
        );
        // https:// is never probed (the RDMA dialects need plain HTTP).
        let tls = site("https://s3.amazonaws.com");
        let sel = EngineTarget::select(FabricChoice::Auto, &tls, None, never).unwrap();
        assert!(sel.target.is_none() && sel.probe.is_none());
    }

    #[test]
    fn explicit_choices_skip_the_probe() {
        let plain = site("http://127.0.0.1:9000");
        let soft = EngineTarget::select(FabricChoice::Soft, &plain, None, never).unwrap();
        assert_eq!(fabric(&soft), Some(Fabric::Soft));
        let verbs = EngineTarget::select(FabricChoice::Verbs, &plain, Some("mlx5_0"), never)
            .unwrap()
            .target
            .unwrap();
        assert_eq!(
            (verbs.fabric, verbs.verbs_device.as_deref()),
            (Fabric::Verbs, Some("mlx5_0"))
        );
        let http = EngineTarget::select(FabricChoice::Http, &plain, None, never).unwrap();
        assert!(http.target.is_none() && http.probe.is_none());
        let tls = site("https://s3.amazonaws.com");
        assert!(
            EngineTarget::select(FabricChoice::Soft, &tls, None, never)
                .unwrap()
                .target
                .is_none()
        );
        assert!(EngineTarget::select(FabricChoice::Soft, &plain, Some("mlx5_0"), never).is_err());
        assert!(EngineTarget::select(FabricChoice::Http, &plain, Some("mlx5_0"), never).is_err());
    }

    #[test]
    fn fabric_choice_parses() {
        assert_eq!(FabricChoice::parse("soft"), Ok(FabricChoice::Soft));
        assert_eq!(FabricChoice::parse("verbs"), Ok(FabricChoice::Verbs));
        assert_eq!(FabricChoice::default(), FabricChoice::Auto);
        assert!(FabricChoice::parse("rdma").is_err());
    }
}
