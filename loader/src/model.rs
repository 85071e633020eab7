//! A safetensors model from S3 into caller-provided registered memory.
//!
//! 1. [`open`]: finds the files (a `.safetensors` key, an index `.json`, or a prefix holding
//!    `model.safetensors.index.json` or `model.safetensors`), HEADs them, reads each header
//!    with one range-get of its first [`HEADER_PROBE`] bytes (a second one only when the header
//!    is longer) and validates every header before any tensor byte moves: a corrupt header
//!    fails the whole load with nothing allocated.
//! 2. The caller allocates one registration per file of [`ModelFile::data_len`] bytes (host
//!    memory, a numpy array, a CUDA tensor registered with `Engine::register_device`).
//! 3. [`fetch`]: range-gets planned by `hipobj_safetensors::plan_reads` (neighbours coalesced,
//!    large tensors split) land straight in those registrations, every queue of the engine
//!    busy at once; every answer must name the size the HEAD said. Then each file is verified:
//!    by the engine's per-range checksums when the server sent them (our gateway does), else
//!    against the object's stored full-object CRC64NVME when the server keeps one (HEAD with
//!    `x-amz-checksum-mode`), else it is reported unverified.

use std::collections::BTreeMap;
use std::time::Duration;

use engine::Engine;
use hipobj_safetensors::header::{self, Header, HeaderError};
use hipobj_safetensors::index::{INDEX_NAME, IndexError, MAX_INDEX_LEN, SINGLE_NAME, ShardIndex};
use hipobj_safetensors::plan_reads;
use ring_api::{BufHandle, ErrorCode, ObjectId};
use s3_lite::checksum::{Crc64Nvme, encode_crc64nvme};

use crate::batch::{self, BatchOptions, Op, OpDone, OpFailure, OpKind};
use crate::client::S3Client;
use crate::paths::PathBytes;

/// Bytes of a file read to find its header (most headers fit; longer ones take a second read).
pub const HEADER_PROBE: u64 = 256 << 10;
/// Largest single range-get of tensor data.
pub const DEFAULT_READ: u64 = 8 << 20;
/// Neighbouring tensors closer than this are fetched by one request.
pub const DEFAULT_GAP: u64 = 64 << 10;

/// One safetensors file of a model.
#[derive(Debug, Clone)]
pub struct ModelFile {
    /// Its key.
    pub key: String,
    /// Object size (HEAD).
    pub size: u64,
    /// The validated header.
    pub header: Header,
    /// The file's first `header.data_start` bytes (length prefix and JSON), for the checksum.
    pub head_bytes: Vec<u8>,
    object: ObjectId,
}

impl ModelFile {
    /// Bytes of its data section: the size of the registration it needs (0: none).
    #[must_use]
    pub fn data_len(&self) -> u64 {
        self.header.data_len
    }
}

/// The files of a model, headers read and checked.
#[derive(Debug, Clone)]
pub struct Model {
    /// The bucket.
    pub bucket: String,
    /// Its files, in load order.
    pub files: Vec<ModelFile>,
}

impl Model {
    /// Tensors over all files.
    #[must_use]
    pub fn tensor_count(&self) -> usize {
        self.files.iter().map(|f| f.header.tensors.len()).sum()
    }

    /// Tensor bytes over all files.
    #[must_use]
    pub fn data_bytes(&self) -> u64 {
        self.files.iter().map(ModelFile::data_len).sum()
    }
}

/// How a file's bytes were proven.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// Every range-get carried a server checksum of exactly its bytes, and it matched.
    RangeChecksums,
    /// The whole file matched the object's stored CRC64NVME.
    ObjectChecksum,
    /// The server keeps no checksum we could compare (only sizes were checked).
    Unverified,
}

impl Verification {
    /// `range-checksums`, `object-checksum`, `unverified`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::RangeChecksums => "range-checksums",
            Self::ObjectChecksum => "object-checksum",
            Self::Unverified => "unverified",
        }
    }
}

/// What [`fetch`] did.
#[derive(Debug, Clone, Default)]
pub struct FetchReport {
    /// Range-gets sent.
    pub requests: usize,
    /// Bytes moved.
    pub bytes: u64,
    /// Per file, in [`Model::files`] order.
    pub verification: Vec<Option<Verification>>,
    /// Bytes per data path and per wire dialect (the shape `get` and `put` report).
    pub paths: PathBytes,
}

/// Why a load failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A header is corrupt.
    #[error("s3://{bucket}/{key}: {source}")]
    Header {
        /// The bucket.
        bucket: String,
        /// The file.
        key: String,
        /// What is wrong.
        source: HeaderError,
    },
    /// The index is corrupt.
    #[error("s3://{bucket}/{key}: {source}")]
    Index {
        /// The bucket.
        bucket: String,
        /// The index file.
        key: String,
        /// What is wrong.
        source: IndexError,
    },
    /// An engine operation failed.
    #[error("s3://{bucket}/{key}: {what}: {failure}", failure = failure.message)]
    Op {
        /// The bucket.
        bucket: String,
        /// The object.
        key: String,
        /// What was being done.
        what: String,
        /// The engine's answer.
        failure: OpFailure,
    },
    /// Neither an index nor a single file under a prefix.
    #[error("s3://{bucket}/{prefix}: no {INDEX_NAME} or {SINGLE_NAME} there")]
    NoModel {
        /// The bucket.
        bucket: String,
        /// The prefix.
        prefix: String,
    },
    /// Bytes disagree with what the server says about them.
    #[error("s3://{bucket}/{key}: integrity: {detail}")]
    Integrity {
        /// The bucket.
        bucket: String,
        /// The object.
        key: String,
        /// What disagreed.
        detail: String,
    },
    /// The index and the shards disagree (missing or duplicate tensors).
    #[error("{0}")]
    Inconsistent(String),
    /// Local setup failed (registration, engine).
    #[error("{0}")]
    Local(String),
}

impl LoadError {
    /// The engine failure inside, if this is one.
    #[must_use]
    pub fn op_failure(&self) -> Option<&OpFailure> {
        match self {
            Self::Op { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

fn op_err(bucket: &str, key: &str, what: impl Into<String>, failure: OpFailure) -> LoadError {
    LoadError::Op {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        what: what.into(),
        failure,
    }
}

fn local(e: impl std::fmt::Display) -> LoadError {
    LoadError::Local(e.to_string())
}

/// Per read: the engine's outcome, and the bytes read.
type ReadOutcomes = (Vec<Result<OpDone, OpFailure>>, Vec<Vec<u8>>);

/// Small reads of whole objects or ranges into one scratch registration (headers, index).
fn read_ranges(
    engine: &Engine,
    reads: &[(ObjectId, u64, u64)],
    stop: &mut dyn FnMut() -> bool,
) -> Result<ReadOutcomes, LoadError> {
    let total: u64 = reads.iter().map(|r| r.2).sum();
    if total == 0 {
        // Nothing to read (empty objects): every read succeeds with no bytes.
        let done = reads.iter().map(|_| Ok(OpDone::empty())).collect();
        return Ok((done, vec![Vec::new(); reads.len()]));
    }
    let len = usize::try_from(total).map_err(local)?;
    let buf = engine
        .register_host(len, engine::RegisterOptions::pageable())
        .map_err(local)?;
    let mut ops = Vec::with_capacity(reads.len());
    let mut at = 0;
    for &(object, offset, n) in reads {
        ops.push(Op {
            kind: OpKind::RangeGet { offset },
            object,
            buf,
            buf_offset: at,
            len: n.max(1),
        });
        at += n;
    }
    // Zero-length reads never reach the engine.
    let (real, skipped): (Vec<usize>, Vec<usize>) = (0..ops.len()).partition(|&i| reads[i].2 > 0);
    let real_ops: Vec<Op> = real.iter().map(|&i| ops[i]).collect();
    let outcomes = batch::run(
        engine,
        &real_ops,
        BatchOptions {
            queues: engine.workers().len(),
            ..BatchOptions::default()
        },
        stop,
    );
    let mut results: Vec<Result<OpDone, OpFailure>> = reads
        .iter()
        .map(|_| Err(OpFailure::local_msg("not run")))
        .collect();
    for (&i, r) in real.iter().zip(outcomes) {
        results[i] = r;
    }
    for i in skipped {
        results[i] = Ok(OpDone::empty());
    }
    let mut bytes = Vec::with_capacity(reads.len());
    for (op, &(_, _, n)) in ops.iter().zip(reads) {
        let data = if n == 0 {
            Vec::new()
        } else {
            engine.read(buf, op.buf_offset, n).map_err(local)?.to_vec()
        };
        bytes.push(data);
    }
    engine
        .deregister(buf, Duration::from_secs(30))
        .map_err(local)?;
    Ok((results, bytes))
}

fn heads(
    engine: &Engine,
    objects: &[ObjectId],
    stop: &mut dyn FnMut() -> bool,
) -> Vec<Result<OpDone, OpFailure>> {
    let ops: Vec<Op> = objects
        .iter()
        .map(|&object| Op {
            kind: OpKind::Head,
            object,
            buf: BufHandle(0),
            buf_offset: 0,
            len: 0,
        })
        .collect();
    batch::run(
        engine,
        &ops,
        BatchOptions {
            queues: engine.workers().len(),
            ..BatchOptions::default()
        },
        stop,
    )
}

fn is_not_found(r: &Result<OpDone, OpFailure>) -> bool {
    matches!(r, Err(f) if f.code == Some(ErrorCode::NotFound))
}

/// A model's file keys, and its index with the directory it sits in (sharded models).
type Resolved = (Vec<String>, Option<(ShardIndex, String)>);

/// Which keys hold the model named by `key` (see the module doc) and the index, if any.
fn resolve(
    engine: &Engine,
    bucket: &str,
    key: &str,
    stop: &mut dyn FnMut() -> bool,
) -> Result<Resolved, LoadError> {
    let index_key = if key.ends_with(".safetensors") {
        return Ok((vec![key.to_owned()], None));
    } else if key.ends_with(".json") {
        key.to_owned()
    } else {
        let prefix = if key.is_empty() || key.ends_with('/') {
            key.to_owned()
        } else {
            format!("{key}/")
        };
        let index_key = format!("{prefix}{INDEX_NAME}");
        let single_key = format!("{prefix}{SINGLE_NAME}");
        let ids = [
            engine.object(bucket, &index_key).map_err(local)?,
            engine.object(bucket, &single_key).map_err(local)?,
        ];
        let found = heads(engine, &ids, stop);
        match (&found[0], &found[1]) {
            (Ok(_), _) => index_key,
            (a @ Err(f), _) if !is_not_found(a) => {
                return Err(op_err(bucket, &index_key, "HEAD", f.clone()));
            }
            (_, Ok(_)) => return Ok((vec![single_key], None)),
            (_, b @ Err(f)) if !is_not_found(b) => {
                return Err(op_err(bucket, &single_key, "HEAD", f.clone()));
            }
            _ => {
                return Err(LoadError::NoModel {
                    bucket: bucket.to_owned(),
                    prefix,
                });
            }
        }
    };
    let id = engine.object(bucket, &index_key).map_err(local)?;
    let size = match heads(engine, &[id], stop).remove(0) {
        Ok(d) => d.object_size,
        Err(f) => return Err(op_err(bucket, &index_key, "HEAD", f)),
    };
    let index_err = |source| LoadError::Index {
        bucket: bucket.to_owned(),
        key: index_key.clone(),
        source,
    };
    if size > MAX_INDEX_LEN {
        return Err(index_err(IndexError::Json(format!(
            "{size} bytes, over the {MAX_INDEX_LEN}-byte limit"
        ))));
    }
    let (mut r, mut bytes) = read_ranges(engine, &[(id, 0, size)], stop)?;
    if let Err(f) = r.remove(0) {
        return Err(op_err(bucket, &index_key, "GET", f));
    }
    let index = ShardIndex::parse(&bytes.remove(0)).map_err(index_err)?;
    let dir = index_key.rsplit_once('/').map_or("", |(d, _)| d);
    let keys = index.shards.iter().map(|s| shard_key(dir, s)).collect();
    Ok((keys, Some((index, dir.to_owned()))))
}

/// Finds the model's files and reads and validates all their headers (nothing else moves).
/// `stop` as in [`batch::run`].
pub fn open(
    engine: &Engine,
    bucket: &str,
    key: &str,
    stop: &mut dyn FnMut() -> bool,
) -> Result<Model, LoadError> {
    let (keys, index) = resolve(engine, bucket, key, stop)?;
    let ids = keys
        .iter()
        .map(|k| engine.object(bucket, k).map_err(local))
        .collect::<Result<Vec<_>, _>>()?;
    let mut sizes = Vec::with_capacity(keys.len());
    for (k, r) in keys.iter().zip(heads(engine, &ids, stop)) {
        sizes.push(r.map_err(|f| op_err(bucket, k, "HEAD", f))?.object_size);
    }
    let header_err = |k: &str, source| LoadError::Header {
        bucket: bucket.to_owned(),
        key: k.to_owned(),
        source,
    };
    // First read: the length prefix and, usually, the whole header.
    let probes: Vec<(ObjectId, u64, u64)> = ids
        .iter()
        .zip(&sizes)
        .map(|(&id, &size)| (id, 0, size.min(HEADER_PROBE)))
        .collect();
    let (results, mut firsts) = read_ranges(engine, &probes, stop)?;
    let mut lens = Vec::with_capacity(keys.len());
    for (i, r) in results.into_iter().enumerate() {
        let done = r.map_err(|f| op_err(bucket, &keys[i], "reading the header", f))?;
        check_size(bucket, &keys[i], &done, sizes[i])?;
        lens.push(header::header_len(&firsts[i], sizes[i]).map_err(|e| header_err(&keys[i], e))?);
    }
    // Second read, only for headers longer than the probe.
    let rest: Vec<(ObjectId, u64, u64)> = (0..keys.len())
        .map(|i| {
            let have = firsts[i].len() as u64;
            let need = header::LEN_PREFIX + lens[i];
            (ids[i], have, need.saturating_sub(have))
        })
        .collect();
    if rest.iter().any(|r| r.2 > 0) {
        let (results, more) = read_ranges(engine, &rest, stop)?;
        for (i, (r, more)) in results.into_iter().zip(more).enumerate() {
            let done = r.map_err(|f| op_err(bucket, &keys[i], "reading the header", f))?;
            check_size(bucket, &keys[i], &done, sizes[i])?;
            firsts[i].extend_from_slice(&more);
        }
    }
    let mut files = Vec::with_capacity(keys.len());
    for (i, mut head_bytes) in firsts.into_iter().enumerate() {
        let data_start = usize::try_from(header::LEN_PREFIX + lens[i]).map_err(local)?;
        head_bytes.truncate(data_start);
        let json = head_bytes.get(header::LEN_PREFIX as usize..).unwrap_or(&[]);
        let header = header::parse(json, sizes[i]).map_err(|e| header_err(&keys[i], e))?;
        files.push(ModelFile {
            key: keys[i].clone(),
            size: sizes[i],
            header,
            head_bytes,
            object: ids[i],
        });
    }
    if let Some((index, dir)) = index {
        check_index(&index, &dir, &files)?;
    } else {
        check_unique(&files)?;
    }
    Ok(Model {
        bucket: bucket.to_owned(),
        files,
    })
}

fn check_unique(files: &[ModelFile]) -> Result<BTreeMap<&str, &str>, LoadError> {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for f in files {
        for t in &f.header.tensors {
            if let Some(other) = seen.insert(&t.name, &f.key) {
                return Err(LoadError::Inconsistent(format!(
                    "tensor {:?} is in both {other} and {}",
                    t.name, f.key
                )));
            }
        }
    }
    Ok(seen)
}

/// The key of `shard` named by an index in `dir`.
fn shard_key(dir: &str, shard: &str) -> String {
    if dir.is_empty() {
        shard.to_owned()
    } else {
        format!("{dir}/{shard}")
    }
}

fn check_index(index: &ShardIndex, dir: &str, files: &[ModelFile]) -> Result<(), LoadError> {
    let seen = check_unique(files)?;
    for (tensor, shard) in &index.weight_map {
        let found = seen.get(tensor.as_str());
        if found.is_none_or(|k| *k != shard_key(dir, shard)) {
            return Err(LoadError::Inconsistent(format!(
                "{INDEX_NAME} puts tensor {tensor:?} in {shard}, but {}",
                found.map_or_else(|| "no shard holds it".to_owned(), |k| format!("{k} does"))
            )));
        }
    }
    if seen.len() != index.weight_map.len() {
        return Err(LoadError::Inconsistent(format!(
            "the shards hold {} tensors, {INDEX_NAME} names {}",
            seen.len(),
            index.weight_map.len()
        )));
    }
    Ok(())
}

fn check_size(bucket: &str, key: &str, done: &OpDone, size: u64) -> Result<(), LoadError> {
    if done.object_size != 0 && done.object_size != size {
        return Err(LoadError::Integrity {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            detail: format!(
                "the server names an object of {} bytes, HEAD said {size}",
                done.object_size
            ),
        });
    }
    Ok(())
}

/// How [`fetch`] runs.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Largest range-get.
    pub max_read: u64,
    /// Coalescing gap.
    pub max_gap: u64,
    /// The batch (queues, depth, stall).
    pub batch: BatchOptions,
}

impl FetchOptions {
    /// Defaults for `engine`: one queue per worker, 32 range-gets in flight on each. An
    /// engine attached to a daemon gets one queue of 64: the daemon forwards every queue
    /// through one loop, so more queues would only add this process's threads and wake-ups.
    #[must_use]
    pub fn for_engine(engine: &Engine) -> Self {
        let (queues, depth) = if engine.is_attached() {
            (1, 64)
        } else {
            (engine.workers().len().max(1), 32)
        };
        Self {
            max_read: DEFAULT_READ,
            max_gap: DEFAULT_GAP,
            batch: BatchOptions {
                queues,
                depth,
                stall: Duration::from_secs(300),
                range_crc64: true,
                deadline: None,
            },
        }
    }
}

/// Fetches every file's data section into `bufs[i]` (a registration of at least
/// `model.files[i].data_len()` bytes; `None` for files without data), then verifies each
/// file; `checksums` is asked for a stored checksum (HEAD with `x-amz-checksum-mode`) of each
/// file whose ranges carried none (`None`: such files are reported unverified). `stop` as in
/// [`batch::run`].
pub fn fetch(
    engine: &Engine,
    model: &Model,
    bufs: &[Option<BufHandle>],
    opts: &FetchOptions,
    checksums: Option<&mut S3Client>,
    stop: &mut dyn FnMut() -> bool,
) -> Result<FetchReport, LoadError> {
    fetch_observed(engine, model, bufs, opts, checksums, stop, &|_| {})
}

/// A range-get of a load that delivered all its bytes, as the batch reaps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Landed {
    /// The file (index into [`Model::files`]).
    pub file: usize,
    /// Offset of its first byte in the file's data section (and in the file's buffer).
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// A server checksum of exactly these bytes matched.
    pub verified: bool,
}

/// [`fetch`], calling `on_landed` from the batch's threads as each range-get completes with
/// all its bytes in the destination (in VRAM, for a device registration): what a streaming
/// load needs to hand out tensors before the whole model has arrived. Files are verified as
/// a whole only after the last range, as in [`fetch`].
pub fn fetch_observed(
    engine: &Engine,
    model: &Model,
    bufs: &[Option<BufHandle>],
    opts: &FetchOptions,
    mut checksums: Option<&mut S3Client>,
    stop: &mut dyn FnMut() -> bool,
    on_landed: &(dyn Fn(Landed) + Sync),
) -> Result<FetchReport, LoadError> {
    if bufs.len() != model.files.len() {
        return Err(local("one buffer per file"));
    }
    let mut ops = Vec::new();
    let mut owner = Vec::new();
    for (i, (f, buf)) in model.files.iter().zip(bufs).enumerate() {
        let spans: Vec<(u64, u64)> = f.header.tensors.iter().map(|t| (t.begin, t.end)).collect();
        let reads = plan_reads(
            f.header.data_start,
            f.data_len(),
            &spans,
            opts.max_gap,
            opts.max_read,
        );
        if reads.is_empty() {
            continue;
        }
        let buf = buf.ok_or_else(|| local(format!("no buffer for {}", f.key)))?;
        for r in reads {
            ops.push(Op {
                kind: OpKind::RangeGet {
                    offset: r.file_offset,
                },
                object: f.object,
                buf,
                buf_offset: r.buf_offset,
                len: r.len,
            });
            owner.push(i);
        }
    }
    // Every range-get reports the CRC of its bytes: the whole file is then proven from them
    // (combined), never by reading the destination (VRAM) back.
    let batch_opts = BatchOptions {
        range_crc64: true,
        ..opts.batch
    };
    let observe = |i: usize, r: &Result<OpDone, OpFailure>| {
        if let (Ok(done), Some(op), Some(&file)) = (r, ops.get(i), owner.get(i))
            && done.bytes == op.len
        {
            on_landed(Landed {
                file,
                offset: op.buf_offset,
                len: op.len,
                verified: done.verified,
            });
        }
    };
    let outcomes = batch::run_observed(engine, &ops, batch_opts, stop, &observe);
    let mut report = FetchReport {
        requests: ops.len(),
        verification: vec![None; model.files.len()],
        ..FetchReport::default()
    };
    let mut all_verified = vec![true; model.files.len()];
    let mut crcs: Vec<Vec<RangeCrc>> = vec![Vec::new(); model.files.len()];
    for ((op, &i), r) in ops.iter().zip(&owner).zip(outcomes) {
        let f = &model.files[i];
        let (what, offset) = match op.kind {
            OpKind::RangeGet { offset } => (format!("range-get {offset}+{}", op.len), offset),
            _ => ("operation".to_owned(), 0),
        };
        let done = r.map_err(|e| op_err(&model.bucket, &f.key, what, e))?;
        check_size(&model.bucket, &f.key, &done, f.size)?;
        all_verified[i] &= done.verified;
        crcs[i].push(RangeCrc {
            offset,
            len: done.bytes,
            crc: done.crc64,
        });
        report.bytes += done.bytes;
        crate::paths::add_path_bytes(&mut report.paths.0, done.path, done.bytes);
        crate::paths::add_path_bytes(&mut report.paths.1, done.dialect, done.bytes);
    }
    for (i, f) in model.files.iter().enumerate() {
        let v = match checksums.as_deref_mut() {
            _ if all_verified[i] && f.data_len() > 0 => Verification::RangeChecksums,
            Some(client) => verify_whole(model, f, &mut crcs[i], client)?,
            None => Verification::Unverified,
        };
        report.verification[i] = Some(v);
    }
    Ok(report)
}

/// A range-get's place in its file and the CRC of the bytes it delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeCrc {
    /// File offset of its first byte.
    pub offset: u64,
    /// Bytes delivered.
    pub len: u64,
    /// Their CRC-64/NVME (`None`: the engine could not compute it).
    pub crc: Option<u64>,
}

/// The CRC-64/NVME of a whole file from the CRC of its first `head.len()` bytes (the header,
/// held in memory) and the CRCs of `ranges` (sorted here), when they tile the rest of the file
/// exactly (`size` bytes in all) and every one has a CRC; else `None`.
#[must_use]
pub fn combine_file_crc(head: &[u8], ranges: &mut [RangeCrc], size: u64) -> Option<u64> {
    ranges.sort_by_key(|r| r.offset);
    let mut c = Crc64Nvme::new();
    c.update(head);
    let mut crc = c.finish();
    let mut at = head.len() as u64;
    for r in ranges.iter() {
        if r.offset != at {
            return None;
        }
        crc = Crc64Nvme::combine(crc, r.crc?, r.len);
        at = at.checked_add(r.len)?;
    }
    (at == size).then_some(crc)
}

/// Compares the file (`head_bytes` + its ranges, by their CRCs combined) with the object's
/// stored full-object CRC64NVME. The destination is never read back.
fn verify_whole(
    model: &Model,
    f: &ModelFile,
    ranges: &mut [RangeCrc],
    client: &mut S3Client,
) -> Result<Verification, LoadError> {
    let meta = client.head_with(&model.bucket, &f.key, true).map_err(|e| {
        local(format!(
            "s3://{}/{}: HEAD for its checksum: {e}",
            model.bucket, f.key
        ))
    })?;
    let composite = meta
        .checksum_type
        .as_deref()
        .is_some_and(|t| !t.eq_ignore_ascii_case("FULL_OBJECT"));
    let (Some(expected), false) = (meta.checksum_crc64nvme, composite) else {
        return Ok(Verification::Unverified);
    };
    // Ranges without a CRC (landed in VRAM by the NIC) or not tiling the file: nothing to
    // compare without reading VRAM back, which the loader never does.
    let Some(crc) = combine_file_crc(&f.head_bytes, ranges, f.size) else {
        return Ok(Verification::Unverified);
    };
    let actual = encode_crc64nvme(crc);
    if actual != expected {
        return Err(LoadError::Integrity {
            bucket: model.bucket.clone(),
            key: f.key.clone(),
            detail: format!(
                "the object's stored CRC64NVME is {expected}, the bytes loaded give {actual}"
            ),
        });
    }
    Ok(Verification::ObjectChecksum)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A model of one file per entry, each holding U8 tensors `(name, begin, end)` (offsets in
    /// the data section; they must tile it).
    pub(crate) fn model_of(files: &[&[(&str, u64, u64)]]) -> Model {
        let files = files
            .iter()
            .enumerate()
            .map(|(i, tensors)| {
                let entries: Vec<String> = tensors
                    .iter()
                    .map(|(n, b, e)| {
                        format!(
                            r#""{n}":{{"dtype":"U8","shape":[{}],"data_offsets":[{b},{e}]}}"#,
                            e - b
                        )
                    })
                    .collect();
                let json = format!("{{{}}}", entries.join(","));
                let data = tensors.iter().map(|t| t.2).max().unwrap_or(0);
                let size = 8 + json.len() as u64 + data;
                ModelFile {
                    key: format!("f{i}.safetensors"),
                    size,
                    header: header::parse(json.as_bytes(), size).unwrap(),
                    head_bytes: Vec::new(),
                    object: ObjectId(0),
                }
            })
            .collect();
        Model {
            bucket: "b".into(),
            files,
        }
    }

    /// A file `key` holding 4-byte tensors `names`, back to back.
    fn file(key: &str, names: &[&str]) -> ModelFile {
        let entries: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    r#""{n}":{{"dtype":"F32","shape":[1],"data_offsets":[{},{}]}}"#,
                    4 * i,
                    4 * (i + 1)
                )
            })
            .collect();
        let json = format!("{{{}}}", entries.join(","));
        let size = 8 + json.len() as u64 + 4 * names.len() as u64;
        ModelFile {
            key: key.to_owned(),
            size,
            header: header::parse(json.as_bytes(), size).unwrap(),
            head_bytes: Vec::new(),
            object: ObjectId(0),
        }
    }

    fn index(json: &str) -> ShardIndex {
        ShardIndex::parse(json.as_bytes()).unwrap()
    }

    #[test]
    fn verification_names_are_the_reported_ones() {
        assert_eq!(Verification::RangeChecksums.name(), "range-checksums");
        assert_eq!(Verification::ObjectChecksum.name(), "object-checksum");
        assert_eq!(Verification::Unverified.name(), "unverified");
    }

    #[test]
    fn fetch_options_default_to_one_queue_per_worker() {
        let engine = Engine::builder()
            .endpoint_url("http://127.0.0.1:9")
            .credentials(engine::Credentials::new("k", "s"))
            .region("us-east-1")
            .placement(engine::Placement::Workers(2))
            .fabric(engine::Fabric::Http)
            .build()
            .unwrap();
        let o = FetchOptions::for_engine(&engine);
        assert_eq!(o.max_read, DEFAULT_READ);
        assert_eq!(o.max_gap, DEFAULT_GAP);
        assert_eq!(o.batch.queues, 2);
        assert_eq!(o.batch.depth, 32);
        assert_eq!(o.batch.stall, Duration::from_secs(300));
    }

    #[test]
    fn a_model_sums_its_files() {
        let model = Model {
            bucket: "b".into(),
            files: vec![file("m-1", &["a", "b"]), file("m-2", &["c"])],
        };
        assert_eq!(model.tensor_count(), 3);
        assert_eq!(model.data_bytes(), 12);
        assert_eq!(model.files[0].data_len(), 8);
    }

    #[test]
    fn shard_keys_are_relative_to_the_index() {
        assert_eq!(shard_key("", "m-1.safetensors"), "m-1.safetensors");
        assert_eq!(
            shard_key("llama/7b", "m-1.safetensors"),
            "llama/7b/m-1.safetensors"
        );
    }

    #[test]
    fn a_tensor_in_two_files_is_refused() {
        let files = [file("m-1", &["a", "b"]), file("m-2", &["c"])];
        let seen = check_unique(&files).unwrap();
        assert_eq!(seen["b"], "m-1");
        assert_eq!(seen["c"], "m-2");
        let files = [file("m-1", &["a", "b"]), file("m-2", &["b"])];
        let Err(LoadError::Inconsistent(msg)) = check_unique(&files) else {
            panic!("a duplicate tensor was accepted");
        };
        assert!(
            msg.contains("\"b\"") && msg.contains("m-1") && msg.contains("m-2"),
            "{msg}"
        );
    }

    #[test]
    fn the_index_must_match_the_shards() {
        let files = [file("d/m-1", &["a", "b"]), file("d/m-2", &["c"])];
        let good = index(r#"{"weight_map":{"a":"m-1","b":"m-1","c":"m-2"}}"#);
        check_index(&good, "d", &files).unwrap();
        // The same index one directory up names other keys.
        assert!(matches!(
            check_index(&good, "", &files),
            Err(LoadError::Inconsistent(_))
        ));
        let misplaced = index(r#"{"weight_map":{"a":"m-1","b":"m-2","c":"m-2"}}"#);
        let Err(LoadError::Inconsistent(msg)) = check_index(&misplaced, "d", &files) else {
            panic!("a misplaced tensor was accepted");
        };
        assert!(msg.contains("d/m-1 does"), "{msg}");
        let missing = index(r#"{"weight_map":{"a":"m-1","b":"m-1","c":"m-2","z":"m-2"}}"#);
        let Err(LoadError::Inconsistent(msg)) = check_index(&missing, "d", &files) else {
            panic!("a tensor no shard holds was accepted");
        };
        assert!(msg.contains("no shard holds it"), "{msg}");
        let short = index(r#"{"weight_map":{"a":"m-1","b":"m-1"}}"#);
        let Err(LoadError::Inconsistent(msg)) = check_index(&short, "d", &files) else {
            panic!("a shard tensor the index does not name was accepted");
        };
        assert!(
            msg.contains("hold 3 tensors") && msg.contains("names 2"),
            "{msg}"
        );
    }

    #[test]
    fn an_answer_naming_another_size_is_an_integrity_error() {
        let mut done = OpDone::empty();
        check_size("b", "k", &done, 100).unwrap();
        done.object_size = 100;
        check_size("b", "k", &done, 100).unwrap();
        done.object_size = 99;
        assert!(matches!(
            check_size("b", "k", &done, 100),
            Err(LoadError::Integrity { .. })
        ));
    }

    #[test]
    fn a_file_crc_combines_from_its_header_and_ranges_in_any_order() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = {
            let mut c = Crc64Nvme::new();
            c.update(&data);
            c.finish()
        };
        let crc = |a: usize, b: usize| {
            let mut c = Crc64Nvme::new();
            c.update(&data[a..b]);
            Some(c.finish())
        };
        let range = |a: usize, b: usize| RangeCrc {
            offset: a as u64,
            len: (b - a) as u64,
            crc: crc(a, b),
        };
        let head = &data[..1000];
        let mut ranges = vec![
            range(60_000, 100_000),
            range(1000, 1001),
            range(1001, 60_000),
        ];
        assert_eq!(combine_file_crc(head, &mut ranges, 100_000), Some(whole));
        // A gap, an overlap, a missing CRC or a short tiling prove nothing.
        let mut gap = vec![range(1000, 5000), range(5001, 100_000)];
        assert_eq!(combine_file_crc(head, &mut gap, 100_000), None);
        let mut overlap = vec![range(1000, 5000), range(4999, 100_000)];
        assert_eq!(combine_file_crc(head, &mut overlap, 100_000), None);
        let mut unknown = vec![
            range(1000, 5000),
            RangeCrc {
                crc: None,
                ..range(5000, 100_000)
            },
        ];
        assert_eq!(combine_file_crc(head, &mut unknown, 100_000), None);
        let mut short = vec![range(1000, 99_999)];
        assert_eq!(combine_file_crc(head, &mut short, 100_000), None);
        // A flipped byte in one range changes the result.
        let mut flipped = data.clone();
        flipped[70_000] ^= 1;
        let mut c = Crc64Nvme::new();
        c.update(&flipped[60_000..]);
        let mut bad = vec![
            range(1000, 60_000),
            RangeCrc {
                crc: Some(c.finish()),
                ..range(60_000, 100_000)
            },
        ];
        assert_ne!(combine_file_crc(head, &mut bad, 100_000), Some(whole));
    }
}
