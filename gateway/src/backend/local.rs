//! The local directory backend (the embedded default).
//!
//! Layout under the root (documented in `docs/gateway.md`):
//! ```text
//! ROOT/<bucket>/                       one directory per bucket (names validated: no traversal)
//! ROOT/<bucket>/<a~d>/<b~o>            data of key "a/b" (see keymap for the escaping)
//! ROOT/<bucket>/<a~d>/<b~m>            its metadata sidecar (JSON ObjectInfo)
//! ROOT/.hipobj/tmp/                    spooled bodies and temporaries (same file system → atomic rename)
//! ROOT/.hipobj/uploads/<id>/upload.json, part-00001, part-00001.json   multipart uploads
//! ```
//! Writes go to a temporary file first and are renamed into place under a per-key lock
//! stripe, data before sidecar; readers open the data file and read the sidecar under the
//! same stripe, so they see either the old pair or the new one.

use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use s3_lite::checksum::{Crc32c, Crc64Nvme, decode_crc64nvme, encode_crc32c, encode_crc64nvme};
use serde::{Deserialize, Serialize};

use super::composite::Algorithm;
use super::keymap::{self, DATA_TAG};
use super::list::paginate;
use super::{
    Backend, CompletePart, GetRequest, ListEntry, ListPage, ListQuery, ObjectInfo, ObjectSink,
    PartEntry, PutMeta, UploadEntry, check_if_match, etag_eq, resolve_range,
};
use crate::body::{Spooled, hex};
use crate::error::ApiError;
use crate::ops::conditions::Conditions;
use crate::time::{iso8601, now_secs};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

const STRIPES: usize = 64;
const IO_CHUNK: usize = 256 * 1024;

thread_local! {
    /// The read buffer of [`LocalDir`]'s GETs on this thread.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A directory of buckets.
#[derive(Debug)]
pub struct LocalDir {
    root: PathBuf,
    tmp: PathBuf,
    uploads: PathBuf,
    locks: Vec<RwLock<()>>,
    min_part_size: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct UploadRecord {
    bucket: String,
    key: String,
    meta: PutMeta,
    initiated: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct PartRecord {
    size: u64,
    etag: String,
    md5: String,
    crc64nvme: u64,
    crc32c: u32,
    #[serde(default)]
    crc32: u32,
    /// Hex SHA-256 of the part.
    #[serde(default)]
    sha256: String,
    /// Hex SHA-1 of the part (computed for SHA1 uploads only).
    #[serde(default)]
    sha1: Option<String>,
}

impl PartRecord {
    /// The part's raw checksum of `alg` (for composites), if known.
    fn raw(&self, alg: Algorithm) -> Option<Vec<u8>> {
        match alg {
            Algorithm::Crc32 => Some(self.crc32.to_be_bytes().to_vec()),
            Algorithm::Crc32c => Some(self.crc32c.to_be_bytes().to_vec()),
            Algorithm::Sha256 => unhex(&self.sha256),
            Algorithm::Sha1 => self.sha1.as_deref().and_then(unhex),
        }
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

fn io_err(what: &str, e: std::io::Error) -> ApiError {
    ApiError::internal(format!("{what}: {}", e.kind()))
}

impl LocalDir {
    /// Opens (creating if needed) a root directory. `min_part_size` is S3's 5 MiB by default:
    /// every part but the last must be at least this large.
    pub fn open(root: impl Into<PathBuf>, min_part_size: u64) -> std::io::Result<Self> {
        let root = root.into();
        let tmp = root.join(".hipobj/tmp");
        let uploads = root.join(".hipobj/uploads");
        fs::create_dir_all(&tmp)?;
        fs::create_dir_all(&uploads)?;
        Ok(Self {
            root,
            tmp,
            uploads,
            locks: (0..STRIPES).map(|_| RwLock::new(())).collect(),
            min_part_size,
        })
    }

    fn stripe(&self, bucket: &str, key: &str) -> &RwLock<()> {
        let h = bucket
            .bytes()
            .chain([0])
            .chain(key.bytes())
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            });
        let i = (h % STRIPES as u64) as usize;
        self.locks
            .get(i)
            .or(self.locks.first())
            .unwrap_or_else(|| unreachable!("STRIPES > 0"))
    }

    fn bucket_dir(&self, bucket: &str) -> Result<PathBuf, ApiError> {
        s3_lite::s3::validate_bucket(bucket).map_err(|_| {
            ApiError::new(
                400,
                "InvalidBucketName",
                "The specified bucket is not valid.",
            )
        })?;
        Ok(self.root.join(bucket))
    }

    fn existing_bucket(&self, bucket: &str) -> Result<PathBuf, ApiError> {
        let dir = self.bucket_dir(bucket)?;
        if dir.is_dir() {
            Ok(dir)
        } else {
            Err(ApiError::no_such_bucket(bucket))
        }
    }

    fn upload_dir(&self, id: &str) -> Result<PathBuf, ApiError> {
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ApiError::no_such_upload(id));
        }
        Ok(self.uploads.join(id))
    }

    fn load_upload(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
    ) -> Result<(PathBuf, UploadRecord), ApiError> {
        let dir = self.upload_dir(id)?;
        let text = fs::read(dir.join("upload.json")).map_err(|_| ApiError::no_such_upload(id))?;
        let rec: UploadRecord = serde_json::from_slice(&text).map_err(ApiError::internal)?;
        if rec.bucket != bucket || rec.key != key {
            return Err(ApiError::no_such_upload(id));
        }
        Ok((dir, rec))
    }

    /// Writes `value` as JSON to a temporary file in the spool directory.
    fn temp_json<T: Serialize>(&self, value: &T) -> Result<tempfile::NamedTempFile, ApiError> {
        let mut f = tempfile::Builder::new()
            .prefix("meta-")
            .tempfile_in(&self.tmp)?;
        serde_json::to_writer(&mut f, value).map_err(ApiError::internal)?;
        Ok(f)
    }

    /// Renames a data file and its sidecar into place under the key's lock.
    fn install(
        &self,
        bucket: &str,
        key: &str,
        data: tempfile::NamedTempFile,
        info: &ObjectInfo,
        conditions: &Conditions,
    ) -> Result<(), ApiError> {
        let dir = self.existing_bucket(bucket)?;
        let (data_rel, meta_rel) = keymap::object_paths(key)?;
        let (data_path, meta_path) = (dir.join(data_rel), dir.join(meta_rel));
        if let Some(parent) = data_path.parent() {
            fs::create_dir_all(parent).map_err(|e| io_err("create key directory", e))?;
        }
        let meta = self.temp_json(info)?;
        let _guard = self
            .stripe(bucket, key)
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if !conditions.is_empty() {
            // Checked under the key's lock, so no other write slips in between.
            let existing = data_path
                .is_file()
                .then(|| self.read_info(&dir, key))
                .flatten();
            conditions.check_write(existing.as_ref(), key)?;
        }
        data.persist(&data_path)
            .map_err(|e| io_err("store object", e.error))?;
        meta.persist(&meta_path)
            .map_err(|e| io_err("store metadata", e.error))?;
        Ok(())
    }

    fn walk(
        &self,
        dir: &Path,
        key_prefix: &str,
        want: &str,
        out: &mut Vec<String>,
    ) -> std::io::Result<()> {
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let ty = entry.file_type()?;
            if ty.is_dir() {
                let Some(c) = keymap::dir_component(name) else {
                    continue;
                };
                let sub = format!("{key_prefix}{c}/");
                // Descend only where keys with the wanted prefix can be.
                if sub.starts_with(want) || want.starts_with(&sub) {
                    self.walk(&entry.path(), &sub, want, out)?;
                }
            } else if ty.is_file()
                && name.ends_with(DATA_TAG)
                && let Some(c) = keymap::data_component(name)
            {
                let key = format!("{key_prefix}{c}");
                if key.starts_with(want) {
                    out.push(key);
                }
            }
        }
        Ok(())
    }

    /// The object under `key` when upload `upload_id` made it (a retried Complete).
    fn completed_by(&self, bucket: &str, key: &str, upload_id: &str) -> Option<ObjectInfo> {
        let dir = self.existing_bucket(bucket).ok()?;
        let _guard = self
            .stripe(bucket, key)
            .read()
            .unwrap_or_else(|e| e.into_inner());
        self.read_info(&dir, key)
            .filter(|info| info.upload_id.as_deref() == Some(upload_id))
    }

    fn read_info(&self, bucket_dir: &Path, key: &str) -> Option<ObjectInfo> {
        let (_, meta_rel) = keymap::object_paths(key).ok()?;
        serde_json::from_slice(&fs::read(bucket_dir.join(meta_rel)).ok()?).ok()
    }
}

/// A checksum the upload supplied (and the gateway verified), by header name.
fn supplied(meta: &PutMeta, name: &str) -> Option<String> {
    meta.checksums
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// The listing view of an upload record.
fn upload_entry(id: &str, rec: UploadRecord) -> UploadEntry {
    let alg = rec.meta.checksum_algorithm;
    let checksum_type = rec.meta.checksum_type.or_else(|| {
        let a = alg.as_deref()?;
        Some(match Algorithm::parse(a) {
            Some(x) if x.is_composite(None) => "COMPOSITE".to_owned(),
            _ => "FULL_OBJECT".to_owned(),
        })
    });
    UploadEntry {
        key: rec.key,
        upload_id: id.to_owned(),
        initiated: rec.initiated,
        checksum_algorithm: alg,
        checksum_type,
    }
}

fn new_upload_id() -> String {
    let bytes: [u8; 16] = rand::random();
    hex(&bytes)
}

impl Backend for LocalDir {
    fn spool_dir(&self) -> &Path {
        &self.tmp
    }

    fn create_bucket(&self, bucket: &str) -> Result<(), ApiError> {
        let dir = self.bucket_dir(bucket)?;
        match fs::create_dir(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(ApiError::new(
                409,
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own it.",
            )
            .with_detail("BucketName", bucket)),
            Err(e) => Err(io_err("create bucket", e)),
        }
    }

    fn head_bucket(&self, bucket: &str) -> Result<(), ApiError> {
        self.existing_bucket(bucket).map(|_| ())
    }

    fn delete_bucket(&self, bucket: &str) -> Result<(), ApiError> {
        let dir = self.existing_bucket(bucket)?;
        let mut keys = Vec::new();
        self.walk(&dir, "", "", &mut keys)
            .map_err(|e| io_err("list bucket", e))?;
        if !keys.is_empty() {
            return Err(ApiError::new(
                409,
                "BucketNotEmpty",
                "The bucket you tried to delete is not empty",
            )
            .with_detail("BucketName", bucket));
        }
        fs::remove_dir_all(&dir).map_err(|e| io_err("delete bucket", e))
    }

    fn list_buckets(&self) -> Result<Vec<String>, ApiError> {
        let mut names: Vec<String> = fs::read_dir(&self.root)
            .map_err(|e| io_err("list buckets", e))?
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| s3_lite::s3::validate_bucket(n).is_ok())
            .collect();
        names.sort();
        Ok(names)
    }

    fn bucket_created(&self, bucket: &str) -> Option<u64> {
        // The directory's birth time where the file system keeps one, else its last change
        // of entries (never later than now, never the epoch for a bucket made today).
        let meta = fs::metadata(self.bucket_dir(bucket).ok()?).ok()?;
        let t = meta.created().or_else(|_| meta.modified()).ok()?;
        t.duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs())
    }

    fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Spooled,
        meta: &PutMeta,
    ) -> Result<ObjectInfo, ApiError> {
        keymap::components(key)?;
        self.existing_bucket(bucket)?;
        let info = ObjectInfo {
            size: body.len,
            etag: body.etag(),
            last_modified: now_secs(),
            content_type: meta.content_type.clone(),
            crc64nvme: Some(encode_crc64nvme(body.crc64nvme)),
            crc32c: Some(encode_crc32c(body.crc32c)),
            crc32: Some(base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                body.crc32.to_be_bytes(),
            )),
            checksum_type: Some("FULL_OBJECT".into()),
            parts: None,
            sha1: supplied(meta, "x-amz-checksum-sha1"),
            sha256: supplied(meta, "x-amz-checksum-sha256"),
            headers: meta.headers.clone(),
            ..Default::default()
        };
        self.install(bucket, key, body.file, &info, &meta.conditions)?;
        Ok(info)
    }

    fn get_object(
        &self,
        bucket: &str,
        key: &str,
        req: &GetRequest,
        sink: &mut dyn ObjectSink,
    ) -> Result<(), ApiError> {
        let dir = self.existing_bucket(bucket)?;
        let (data_rel, _) = keymap::object_paths(key)?;
        let (mut file, info) = {
            let _guard = self
                .stripe(bucket, key)
                .read()
                .unwrap_or_else(|e| e.into_inner());
            let file =
                fs::File::open(dir.join(data_rel)).map_err(|_| ApiError::no_such_key(key))?;
            let info = self
                .read_info(&dir, key)
                .ok_or_else(|| ApiError::no_such_key(key))?;
            (file, info)
        };
        check_if_match(req.if_match.as_deref(), &info.etag)?;
        let span = resolve_range(req.range, info.size)?;
        sink.begin(&info, span)?;
        if req.head_only {
            return Ok(());
        }
        let (start, end) = span.unwrap_or((0, info.size.saturating_sub(1)));
        let mut left = if info.size == 0 { 0 } else { end - start + 1 };
        if left > 0
            && let Some(done) = sink.data_from_file(&file, start, left, &mut |_| {})
        {
            // The sink read the file into its own memory (RDMA staging): no copy here.
            return done.map_err(ApiError::from);
        }
        file.seek(SeekFrom::Start(start))?;
        READ_BUF.with_borrow_mut(|buf| {
            // One buffer per gateway thread, reused: a fresh 256 KiB per GET costs an mmap, its
            // page faults and a munmap (what small range-gets paid for most).
            buf.resize(IO_CHUNK, 0);
            while left > 0 {
                let want = usize::try_from(left.min(IO_CHUNK as u64)).unwrap_or(IO_CHUNK);
                let piece = buf.get_mut(..want).unwrap_or_default();
                let n = file.read(piece)?;
                if n == 0 {
                    return Err(ApiError::internal("object shorter than its metadata"));
                }
                sink.data(piece.get(..n).unwrap_or_default())?;
                left -= n as u64;
            }
            Ok(())
        })
    }

    fn delete_object(&self, bucket: &str, key: &str) -> Result<(), ApiError> {
        let dir = self.existing_bucket(bucket)?;
        let (data_rel, meta_rel) = keymap::object_paths(key)?;
        let _guard = self
            .stripe(bucket, key)
            .write()
            .unwrap_or_else(|e| e.into_inner());
        for p in [dir.join(data_rel), dir.join(meta_rel)] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("delete object", e)),
            }
        }
        Ok(())
    }

    fn list_objects(&self, bucket: &str, query: &ListQuery) -> Result<ListPage, ApiError> {
        let dir = self.existing_bucket(bucket)?;
        let mut keys = Vec::new();
        self.walk(&dir, "", &query.prefix, &mut keys)
            .map_err(|e| io_err("list bucket", e))?;
        keys.sort_unstable();
        paginate(keys.iter().map(String::as_str), query, |key| {
            let info = self.read_info(&dir, key)?;
            Some(ListEntry {
                key: key.to_owned(),
                size: info.size,
                etag: info.etag,
                last_modified: iso8601(info.last_modified),
            })
        })
    }

    fn create_multipart(
        &self,
        bucket: &str,
        key: &str,
        meta: &PutMeta,
    ) -> Result<String, ApiError> {
        keymap::components(key)?;
        self.existing_bucket(bucket)?;
        let id = new_upload_id();
        let dir = self.uploads.join(&id);
        fs::create_dir(&dir).map_err(|e| io_err("create upload", e))?;
        let rec = UploadRecord {
            bucket: bucket.into(),
            key: key.into(),
            meta: meta.clone(),
            initiated: now_secs(),
        };
        self.temp_json(&rec)?
            .persist(dir.join("upload.json"))
            .map_err(|e| io_err("create upload", e.error))?;
        Ok(id)
    }

    fn upload_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part_number: u32,
        body: Spooled,
    ) -> Result<ObjectInfo, ApiError> {
        let (dir, upload) = self.load_upload(bucket, key, upload_id)?;
        let sha1 = match upload
            .meta
            .checksum_algorithm
            .as_deref()
            .and_then(Algorithm::parse)
        {
            Some(Algorithm::Sha1) => Some(hex(&crate::ops::checksums::sha1_of(&body)?)),
            _ => None,
        };
        let rec = PartRecord {
            size: body.len,
            etag: body.etag(),
            md5: hex(&body.md5),
            crc64nvme: body.crc64nvme,
            crc32c: body.crc32c,
            crc32: body.crc32,
            sha256: hex(&body.sha256),
            sha1,
        };
        let meta = self.temp_json(&rec)?;
        body.file
            .persist(dir.join(format!("part-{part_number:05}")))
            .map_err(|e| io_err("store part", e.error))?;
        meta.persist(dir.join(format!("part-{part_number:05}.json")))
            .map_err(|e| io_err("store part", e.error))?;
        Ok(ObjectInfo {
            size: rec.size,
            etag: rec.etag,
            crc64nvme: Some(encode_crc64nvme(rec.crc64nvme)),
            crc32c: Some(encode_crc32c(rec.crc32c)),
            ..Default::default()
        })
    }

    fn complete_multipart(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletePart],
        whole: &[(String, String)],
    ) -> Result<ObjectInfo, ApiError> {
        self.complete_multipart_if(bucket, key, upload_id, parts, whole, &Conditions::default())
    }

    fn complete_multipart_if(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[CompletePart],
        whole: &[(String, String)],
        conditions: &Conditions,
    ) -> Result<ObjectInfo, ApiError> {
        let (dir, rec) = match self.load_upload(bucket, key, upload_id) {
            Ok(found) => found,
            // Completed already: a retry gets the object that upload made, while it is the
            // one under the key.
            Err(e) => return self.completed_by(bucket, key, upload_id).ok_or(e),
        };
        if parts.is_empty() {
            return Err(ApiError::new(
                400,
                "MalformedXML",
                "You must specify at least one part",
            ));
        }
        let invalid_part = |n: u32, why: &str| {
            ApiError::new(
                400,
                "InvalidPart",
                format!(
                    "One or more of the specified parts could not be found or did not match: part {n}: {why}"
                ),
            )
        };
        let parts = super::complete::effective_parts(parts)?;
        let mut records = Vec::with_capacity(parts.len());
        for (i, p) in parts.iter().enumerate() {
            let text = fs::read(dir.join(format!("part-{:05}.json", p.part_number)))
                .map_err(|_| invalid_part(p.part_number, "not uploaded"))?;
            let r: PartRecord = serde_json::from_slice(&text).map_err(ApiError::internal)?;
            if !etag_eq(&p.etag, &r.etag) {
                return Err(invalid_part(p.part_number, "ETag differs"));
            }
            if let Some(c) = &p.crc64nvme
                && decode_crc64nvme(c).ok() != Some(r.crc64nvme)
            {
                return Err(invalid_part(p.part_number, "ChecksumCRC64NVME differs"));
            }
            for (name, given) in &p.checksums {
                let Some(alg) = Algorithm::parse(name) else {
                    continue;
                };
                let actual = r.raw(alg).map(|b| STANDARD.encode(b));
                if actual.as_deref() != Some(given.trim()) {
                    return Err(invalid_part(
                        p.part_number,
                        &format!("Checksum{} differs", alg.name()),
                    ));
                }
            }
            if i + 1 < parts.len() && r.size < self.min_part_size {
                return Err(ApiError::new(
                    400,
                    "EntityTooSmall",
                    "Your proposed upload is smaller than the minimum allowed object size.",
                )
                .with_detail("PartNumber", p.part_number.to_string())
                .with_detail("MinSizeAllowed", self.min_part_size.to_string()));
            }
            records.push((p.part_number, r));
        }
        // Full-object checksums by combining the parts' CRCs (no second pass over the data).
        let mut crc64 = 0u64;
        let mut crc32c = 0u32;
        let mut size = 0u64;
        let mut md5s = Vec::with_capacity(records.len() * 16);
        for (i, (_, r)) in records.iter().enumerate() {
            crc64 = if i == 0 {
                r.crc64nvme
            } else {
                Crc64Nvme::combine(crc64, r.crc64nvme, r.size)
            };
            crc32c = if i == 0 {
                r.crc32c
            } else {
                Crc32c::combine(crc32c, r.crc32c, r.size)
            };
            size += r.size;
            for k in 0..16 {
                md5s.push(
                    u8::from_str_radix(r.md5.get(2 * k..2 * k + 2).unwrap_or("00"), 16)
                        .unwrap_or(0),
                );
            }
        }
        let crc64_b64 = encode_crc64nvme(crc64);
        let md5 = {
            use md5::Digest as _;
            hex(&md5::Md5::digest(&md5s))
        };
        let mut info = ObjectInfo {
            size,
            etag: format!("\"{md5}-{}\"", records.len()),
            last_modified: now_secs(),
            content_type: rec.meta.content_type.clone(),
            crc64nvme: Some(crc64_b64),
            crc32c: Some(encode_crc32c(crc32c)),
            crc32: None,
            checksum_type: Some("FULL_OBJECT".into()),
            parts: Some(records.len() as u32),
            headers: rec.meta.headers.clone(),
            part_sizes: records.iter().map(|(_, r)| r.size).collect(),
            upload_id: Some(upload_id.to_owned()),
            ..Default::default()
        };
        let alg = rec
            .meta
            .checksum_algorithm
            .as_deref()
            .and_then(Algorithm::parse);
        match alg {
            Some(alg) if alg.is_composite(rec.meta.checksum_type.as_deref()) => {
                let raw: Vec<Vec<u8>> = records
                    .iter()
                    .map(|(n, r)| {
                        r.raw(alg).ok_or_else(|| {
                            invalid_part(*n, &format!("no {} checksum recorded", alg.name()))
                        })
                    })
                    .collect::<Result<_, _>>()?;
                let value = alg.composite(&raw);
                info.part_checksums = raw
                    .iter()
                    .map(|r| (alg.name().to_owned(), STANDARD.encode(r)))
                    .collect();
                // S3 keeps the upload's own algorithm only.
                info.crc64nvme = None;
                info.crc32c = None;
                match alg {
                    Algorithm::Crc32 => info.crc32 = Some(value),
                    Algorithm::Crc32c => info.crc32c = Some(value),
                    Algorithm::Sha1 => info.sha1 = Some(value),
                    Algorithm::Sha256 => info.sha256 = Some(value),
                }
                info.checksum_type = Some("COMPOSITE".into());
            }
            Some(Algorithm::Crc32) => {
                // FULL_OBJECT CRC32: combined from the parts like the CRC64NVME.
                let mut crc = 0u64;
                for (i, (_, r)) in records.iter().enumerate() {
                    crc = if i == 0 {
                        u64::from(r.crc32)
                    } else {
                        crc_fast::checksum_combine(
                            crc_fast::CrcAlgorithm::Crc32IsoHdlc,
                            crc,
                            u64::from(r.crc32),
                            r.size,
                        )
                    };
                }
                info.crc32 = Some(STANDARD.encode((crc as u32).to_be_bytes()));
            }
            _ => {}
        }
        if info.part_checksums.is_empty() {
            // A full-object upload: each part's checksum of the upload's algorithm
            // (CRC64NVME when it named none), served with a GET of `?partNumber=`.
            info.part_checksums = match alg {
                Some(a) => records
                    .iter()
                    .map(|(_, r)| Some((a.name().to_owned(), STANDARD.encode(r.raw(a)?))))
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default(),
                None => records
                    .iter()
                    .map(|(_, r)| ("CRC64NVME".to_owned(), encode_crc64nvme(r.crc64nvme)))
                    .collect(),
            };
        }
        super::complete::check_whole(&info, whole)?;
        // Concatenate into one temporary file, then install it like a PutObject.
        let mut out = tempfile::Builder::new()
            .prefix("complete-")
            .tempfile_in(&self.tmp)?;
        for (n, _) in &records {
            let mut f = fs::File::open(dir.join(format!("part-{n:05}")))
                .map_err(|_| invalid_part(*n, "data missing"))?;
            std::io::copy(&mut f, &mut out)?;
        }
        // A failed condition returns here, before the upload is removed: it stays open.
        self.install(bucket, key, out, &info, conditions)?;
        let _ = fs::remove_dir_all(&dir);
        Ok(info)
    }

    fn abort_multipart(&self, bucket: &str, key: &str, upload_id: &str) -> Result<(), ApiError> {
        let (dir, _) = self.load_upload(bucket, key, upload_id)?;
        fs::remove_dir_all(dir).map_err(|e| io_err("abort upload", e))
    }

    fn list_parts(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(UploadEntry, Vec<PartEntry>), ApiError> {
        self.existing_bucket(bucket)?;
        let (dir, rec) = self.load_upload(bucket, key, upload_id)?;
        let alg = rec.meta.checksum_algorithm.clone();
        let mut parts = Vec::new();
        for entry in fs::read_dir(&dir).map_err(|_| ApiError::no_such_upload(upload_id))? {
            let entry = entry.map_err(|e| io_err("list parts", e))?;
            let name = entry.file_name();
            let Some(n) = name
                .to_str()
                .and_then(|n| n.strip_prefix("part-")?.strip_suffix(".json"))
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // A part being replaced concurrently may be momentarily unreadable: skipped.
            let Some(r) = fs::read(entry.path())
                .ok()
                .and_then(|t| serde_json::from_slice::<PartRecord>(&t).ok())
            else {
                continue;
            };
            let last_modified = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(rec.initiated, |d| d.as_secs());
            let checksum = match alg.as_deref() {
                Some(a) if a.eq_ignore_ascii_case("CRC64NVME") => {
                    Some(("CRC64NVME".to_owned(), encode_crc64nvme(r.crc64nvme)))
                }
                Some(a) => Algorithm::parse(a)
                    .and_then(|alg| Some((alg.name().to_owned(), STANDARD.encode(r.raw(alg)?)))),
                None => None,
            };
            parts.push(PartEntry {
                part_number: n,
                size: r.size,
                etag: r.etag,
                last_modified,
                checksum,
            });
        }
        parts.sort_by_key(|p| p.part_number);
        Ok((upload_entry(upload_id, rec), parts))
    }

    fn list_uploads(&self, bucket: &str) -> Result<Vec<UploadEntry>, ApiError> {
        self.existing_bucket(bucket)?;
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.uploads).map_err(|e| io_err("list uploads", e))? {
            let entry = entry.map_err(|e| io_err("list uploads", e))?;
            let name = entry.file_name();
            let Some(id) = name.to_str() else { continue };
            // An upload being created or completed concurrently may be half there: skipped.
            let Some(rec) = fs::read(entry.path().join("upload.json"))
                .ok()
                .and_then(|t| serde_json::from_slice::<UploadRecord>(&t).ok())
            else {
                continue;
            };
            if rec.bucket == bucket {
                out.push(upload_entry(id, rec));
            }
        }
        Ok(out)
    }
}
