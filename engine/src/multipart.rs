//! The table of open multipart uploads.
//!
//! Applications name an upload by a small [`UploadHandle`] (the completion `aux` of
//! CreateMultipart); the S3 upload id, the object it belongs to and the ETags of its uploaded
//! parts stay here, so CompleteMultipart can list the parts without the application ever
//! handling server strings. Each engine has its own table (in its shared state, dropped with
//! it): a handle names an upload of the engine that issued it and of no other. Every worker of
//! the engine reads and writes the table (a part may be uploaded by any worker), and each
//! multipart operation carries the table from dispatch, so it sits behind one mutex: each operation touches it a
//! couple of times per request, which is nothing next to the request itself.
//!
//! Everything is bounded: at most [`MAX_OPEN_UPLOADS`] uploads, part numbers
//! `1..=`[`MAX_PARTS`], ETags of at most [`MAX_ETAG_LEN`] bytes (a server chooses them).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use ring_api::{ErrorCode, ObjectName, UploadHandle};
use s3_lite::s3::{CompletedPart, MAX_PARTS};

/// Most uploads open at once in one table (a CreateMultipart past it fails with `Busy`).
pub(crate) const MAX_OPEN_UPLOADS: usize = 4096;

/// Longest ETag (or upload id) kept from a server; S3's are a few dozen bytes.
pub(crate) const MAX_ETAG_LEN: usize = 1024;

/// Why a table operation failed.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UploadError {
    /// [`MAX_OPEN_UPLOADS`] uploads are open.
    #[error("too many multipart uploads open")]
    Full,
    /// No open upload has this handle (never issued, completed or aborted).
    #[error("unknown or finished upload handle")]
    Unknown,
    /// The entry names another object than the upload was created for.
    #[error("upload belongs to another object")]
    WrongObject,
    /// A part number outside `1..=10000`.
    #[error("part number {0} outside 1..=10000")]
    PartNumber(u32),
    /// CompleteMultipart of parts `1..=n` but this one was never uploaded.
    #[error("part {0} was never uploaded")]
    MissingPart(u32),
    /// A server string (ETag, upload id) that is empty or longer than [`MAX_ETAG_LEN`].
    #[error("server string empty or too long")]
    BadServerString,
}

impl UploadError {
    /// The completion code this error reports.
    pub(crate) const fn code(self) -> ErrorCode {
        match self {
            Self::Full => ErrorCode::Busy,
            Self::Unknown => ErrorCode::BadHandle,
            Self::WrongObject | Self::PartNumber(_) | Self::MissingPart(_) => {
                ErrorCode::InvalidArgument
            }
            Self::BadServerString => ErrorCode::Protocol,
        }
    }
}

/// One open upload.
#[derive(Debug)]
struct Upload {
    object: Arc<ObjectName>,
    upload_id: Arc<str>,
    /// ETag (quotes included, as the server sent it) by part number.
    parts: BTreeMap<u32, String>,
    /// `(length, CRC64NVME)` of the bytes we sent as each part (last successful upload), so
    /// the completed object can be checked against them whatever path moved the parts.
    sources: BTreeMap<u32, (u64, u64)>,
}

/// What a completed upload must be: the length and full-object CRC64NVME of its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExpectedObject {
    /// Bytes.
    pub(crate) len: u64,
    /// CRC64NVME of all of them.
    pub(crate) crc64nvme: u64,
}

/// Upload handle -> open upload.
#[derive(Debug)]
pub(crate) struct UploadTable {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Next handle to try; handles count up (skipping 0 and live ones) so a finished handle
    /// is not reissued until the counter wraps.
    next: u32,
    uploads: HashMap<u32, Upload>,
}

impl Default for UploadTable {
    fn default() -> Self {
        Self::new()
    }
}

fn valid_server_string(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_ETAG_LEN
}

impl UploadTable {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                next: 1,
                uploads: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-updated (every update is
        // one insert or remove), so a poisoned lock is still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a new upload of `object` with the server's `upload_id`.
    pub(crate) fn open(
        &self,
        object: Arc<ObjectName>,
        upload_id: &str,
    ) -> Result<UploadHandle, UploadError> {
        if !valid_server_string(upload_id) {
            return Err(UploadError::BadServerString);
        }
        let mut t = self.lock();
        if t.uploads.len() >= MAX_OPEN_UPLOADS {
            return Err(UploadError::Full);
        }
        // At most MAX_OPEN_UPLOADS handles are live, so this finds a free one quickly.
        let mut h = t.next;
        while h == 0 || t.uploads.contains_key(&h) {
            h = h.wrapping_add(1);
        }
        t.next = h.wrapping_add(1);
        t.uploads.insert(
            h,
            Upload {
                object,
                upload_id: Arc::from(upload_id),
                parts: BTreeMap::new(),
                sources: BTreeMap::new(),
            },
        );
        Ok(UploadHandle(h))
    }

    /// The S3 upload id of `h`, checking it belongs to `object`.
    pub(crate) fn upload_id(
        &self,
        h: UploadHandle,
        object: &ObjectName,
    ) -> Result<Arc<str>, UploadError> {
        let t = self.lock();
        let u = t.uploads.get(&h.0).ok_or(UploadError::Unknown)?;
        if *u.object != *object {
            return Err(UploadError::WrongObject);
        }
        Ok(Arc::clone(&u.upload_id))
    }

    /// Records the ETag of part `part` of `h` (a re-upload of a part replaces it, as in S3).
    pub(crate) fn record_part(
        &self,
        h: UploadHandle,
        part: u32,
        etag: &str,
    ) -> Result<(), UploadError> {
        if !(1..=MAX_PARTS).contains(&part) {
            return Err(UploadError::PartNumber(part));
        }
        if !valid_server_string(etag) {
            return Err(UploadError::BadServerString);
        }
        let mut t = self.lock();
        let u = t.uploads.get_mut(&h.0).ok_or(UploadError::Unknown)?;
        u.parts.insert(part, etag.to_owned());
        Ok(())
    }

    /// Records what we sent as part `part` of `h`: its length and CRC64NVME.
    pub(crate) fn record_part_source(
        &self,
        h: UploadHandle,
        part: u32,
        len: u64,
        crc64nvme: u64,
    ) -> Result<(), UploadError> {
        if !(1..=MAX_PARTS).contains(&part) {
            return Err(UploadError::PartNumber(part));
        }
        let mut t = self.lock();
        let u = t.uploads.get_mut(&h.0).ok_or(UploadError::Unknown)?;
        u.sources.insert(part, (len, crc64nvme));
        Ok(())
    }

    /// The object parts `1..=parts` of `h` make: their total length and combined CRC64NVME;
    /// `None` when the source of a part was not recorded.
    pub(crate) fn expected_object(&self, h: UploadHandle, parts: u32) -> Option<ExpectedObject> {
        let t = self.lock();
        let u = t.uploads.get(&h.0)?;
        let mut acc: Option<ExpectedObject> = None;
        for n in 1..=parts {
            let &(len, crc) = u.sources.get(&n)?;
            acc = Some(match acc {
                None => ExpectedObject {
                    len,
                    crc64nvme: crc,
                },
                Some(a) => ExpectedObject {
                    len: a.len.checked_add(len)?,
                    crc64nvme: s3_lite::checksum::Crc64Nvme::combine(a.crc64nvme, crc, len),
                },
            });
        }
        acc
    }

    /// The upload id and the part list `1..=parts` of `h` for CompleteMultipart; fails with
    /// the first missing part.
    pub(crate) fn completion(
        &self,
        h: UploadHandle,
        object: &ObjectName,
        parts: u32,
    ) -> Result<(Arc<str>, Vec<CompletedPart>), UploadError> {
        if !(1..=MAX_PARTS).contains(&parts) {
            return Err(UploadError::PartNumber(parts));
        }
        let t = self.lock();
        let u = t.uploads.get(&h.0).ok_or(UploadError::Unknown)?;
        if *u.object != *object {
            return Err(UploadError::WrongObject);
        }
        let mut list = Vec::with_capacity(parts as usize);
        for n in 1..=parts {
            let etag = u.parts.get(&n).ok_or(UploadError::MissingPart(n))?;
            list.push(CompletedPart {
                part_number: n,
                etag: etag.clone(),
                ..CompletedPart::default()
            });
        }
        Ok((Arc::clone(&u.upload_id), list))
    }

    /// Forgets `h` (completed or aborted); `false` if it was not open.
    pub(crate) fn remove(&self, h: UploadHandle) -> bool {
        self.lock().uploads.remove(&h.0).is_some()
    }

    /// Uploads open now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().uploads.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(key: &str) -> Arc<ObjectName> {
        Arc::new(ObjectName {
            bucket: "b".into(),
            key: key.into(),
        })
    }

    #[test]
    fn parts_are_listed_in_order_and_gaps_are_typed() {
        let t = UploadTable::new();
        let o = name("k");
        let h = t.open(Arc::clone(&o), "id-1").unwrap();
        assert_eq!(h, UploadHandle(1));
        t.record_part(h, 2, "\"b\"").unwrap();
        t.record_part(h, 1, "\"a\"").unwrap();
        assert_eq!(t.completion(h, &o, 3), Err(UploadError::MissingPart(3)));
        t.record_part(h, 3, "\"c\"").unwrap();
        t.record_part(h, 2, "\"b2\"").unwrap();
        let (id, parts) = t.completion(h, &o, 3).unwrap();
        assert_eq!(&*id, "id-1");
        let got: Vec<(u32, &str)> = parts
            .iter()
            .map(|p| (p.part_number, p.etag.as_str()))
            .collect();
        assert_eq!(got, vec![(1, "\"a\""), (2, "\"b2\""), (3, "\"c\"")]);
        assert_eq!(
            t.completion(h, &name("other"), 3),
            Err(UploadError::WrongObject)
        );
        assert_eq!(
            t.upload_id(h, &name("other")),
            Err(UploadError::WrongObject)
        );
    }

    #[test]
    fn bounds_and_unknown_handles() {
        let t = UploadTable::new();
        let o = name("k");
        assert_eq!(
            t.open(Arc::clone(&o), ""),
            Err(UploadError::BadServerString)
        );
        let long = "x".repeat(MAX_ETAG_LEN + 1);
        assert_eq!(
            t.open(Arc::clone(&o), &long),
            Err(UploadError::BadServerString)
        );
        let h = t.open(Arc::clone(&o), "id").unwrap();
        assert_eq!(t.record_part(h, 0, "e"), Err(UploadError::PartNumber(0)));
        assert_eq!(
            t.record_part(h, 10_001, "e"),
            Err(UploadError::PartNumber(10_001))
        );
        assert_eq!(t.record_part(h, 1, ""), Err(UploadError::BadServerString));
        assert_eq!(t.completion(h, &o, 0), Err(UploadError::PartNumber(0)));
        assert!(t.remove(h));
        assert!(!t.remove(h));
        assert_eq!(t.record_part(h, 1, "e"), Err(UploadError::Unknown));
        assert_eq!(t.upload_id(h, &o), Err(UploadError::Unknown));
        assert_eq!(UploadError::Unknown.code(), ErrorCode::BadHandle);
        assert_eq!(
            UploadError::MissingPart(2).code(),
            ErrorCode::InvalidArgument
        );
        // A finished handle is not reissued right away.
        assert_eq!(t.open(Arc::clone(&o), "id2").unwrap(), UploadHandle(2));
    }

    #[test]
    fn the_table_is_bounded() {
        let t = UploadTable::new();
        for i in 0..MAX_OPEN_UPLOADS {
            t.open(name("k"), &format!("id{i}")).unwrap();
        }
        assert_eq!(t.open(name("k"), "more"), Err(UploadError::Full));
        assert_eq!(t.len(), MAX_OPEN_UPLOADS);
        assert!(t.remove(UploadHandle(7)));
        assert_eq!(t.open(name("k"), "more"), Ok(UploadHandle(4097)));
    }
}
