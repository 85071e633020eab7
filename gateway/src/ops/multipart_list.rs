//! ListParts (`GET /bucket/key?uploadId=`) and ListMultipartUploads (`GET /bucket?uploads`)
//! with S3's pagination: `max-parts` + `part-number-marker`; `max-uploads` + `key-marker` +
//! `upload-id-marker`, `prefix`, `delimiter` (common prefixes count towards `max-uploads`)
//! and `encoding-type=url`. The backend lists everything; the page is cut here.

use crate::backend::{Backend, PartEntry, UploadEntry};
use crate::error::ApiError;
use crate::handler::{Respond, S3_NS, xml_ok};
use crate::route::Query;
use crate::time::iso8601;
use crate::xml::element;

/// The most entries one page holds (S3's limit for both listings).
const MAX_PAGE: u32 = 1000;

/// A non-negative integer query value (`max-parts`, `part-number-marker`, `max-uploads`),
/// `default` when absent; S3's `InvalidArgument` otherwise.
fn count(query: &Query, name: &str, default: u32) -> Result<u32, ApiError> {
    match query.get(name) {
        None => Ok(default),
        Some(v) => v.trim().parse::<u32>().map_err(|_| {
            ApiError::invalid_argument(format!(
                "Provided {name} not an integer or within integer range"
            ))
            .with_detail("ArgumentName", name.to_owned())
            .with_detail("ArgumentValue", v.to_owned())
        }),
    }
}

fn owner(d: &mut String, tag: &str) {
    d.push('<');
    d.push_str(tag);
    d.push('>');
    element(d, "ID", "hipobj");
    element(d, "DisplayName", "hipobj");
    d.push_str("</");
    d.push_str(tag);
    d.push('>');
}

fn bool_text(b: bool) -> &'static str {
    if b { "true" } else { "false" }
}

/// The part page after `marker` holding at most `max` parts (`parts` sorted), and whether
/// more follow.
pub fn part_page(parts: &[PartEntry], marker: u32, max: u32) -> (&[PartEntry], bool) {
    let start = parts.partition_point(|p| p.part_number <= marker);
    let rest = parts.get(start..).unwrap_or_default();
    let n = rest.len().min(max as usize);
    (rest.get(..n).unwrap_or_default(), n < rest.len() && n > 0)
}

/// ListParts' `max-parts` (default and cap 1000) and `part-number-marker` (default 0).
pub fn part_params(query: &Query) -> Result<(u32, u32), ApiError> {
    Ok((
        count(query, "max-parts", MAX_PAGE)?.min(MAX_PAGE),
        count(query, "part-number-marker", 0)?,
    ))
}

/// Serves ListParts.
pub fn list_parts(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    upload_id: &str,
    query: &Query,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let (max, marker) = part_params(query)?;
    let (upload, parts) = backend.list_parts(bucket, key, upload_id)?;
    let (page, truncated) = part_page(&parts, marker, max);
    let mut d = format!("<ListPartsResult xmlns=\"{S3_NS}\">");
    element(&mut d, "Bucket", bucket);
    element(&mut d, "Key", key);
    element(&mut d, "UploadId", upload_id);
    owner(&mut d, "Initiator");
    owner(&mut d, "Owner");
    element(&mut d, "StorageClass", "STANDARD");
    element(&mut d, "PartNumberMarker", &marker.to_string());
    if let Some(last) = page.last() {
        element(
            &mut d,
            "NextPartNumberMarker",
            &last.part_number.to_string(),
        );
    }
    element(&mut d, "MaxParts", &max.to_string());
    element(&mut d, "IsTruncated", bool_text(truncated));
    if let Some(a) = &upload.checksum_algorithm {
        element(&mut d, "ChecksumAlgorithm", a);
    }
    if let Some(t) = &upload.checksum_type {
        element(&mut d, "ChecksumType", t);
    }
    for p in page {
        d.push_str("<Part>");
        element(&mut d, "PartNumber", &p.part_number.to_string());
        element(&mut d, "LastModified", &iso8601(p.last_modified));
        element(&mut d, "ETag", &p.etag);
        element(&mut d, "Size", &p.size.to_string());
        if let Some((alg, v)) = &p.checksum {
            element(&mut d, &format!("Checksum{alg}"), v);
        }
        d.push_str("</Part>");
    }
    d.push_str("</ListPartsResult>");
    xml_ok(out, Vec::new(), d)
}

/// What ListMultipartUploads asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadQuery {
    /// Only keys starting with this.
    pub prefix: String,
    /// Roll keys up at the first occurrence after the prefix.
    pub delimiter: Option<String>,
    /// Resume after this key (or, with `upload_id_marker`, within it).
    pub key_marker: String,
    /// Resume after this upload of `key_marker` (ignored without a key marker, as in S3).
    pub upload_id_marker: Option<String>,
    /// 0..=1000.
    pub max_uploads: u32,
}

impl UploadQuery {
    /// From ListMultipartUploads' query (`prefix`, `delimiter`, `key-marker`,
    /// `upload-id-marker`, `max-uploads`).
    pub fn parse(query: &Query) -> Result<Self, ApiError> {
        Ok(Self {
            prefix: query.get("prefix").unwrap_or_default().to_owned(),
            delimiter: query
                .get("delimiter")
                .filter(|d| !d.is_empty())
                .map(str::to_owned),
            key_marker: query.get("key-marker").unwrap_or_default().to_owned(),
            upload_id_marker: query
                .get("upload-id-marker")
                .filter(|m| !m.is_empty())
                .map(str::to_owned),
            max_uploads: count(query, "max-uploads", MAX_PAGE)?.min(MAX_PAGE),
        })
    }
}

/// One entry of an uploads page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listed<'u> {
    /// An open upload.
    Upload(&'u UploadEntry),
    /// A common prefix.
    Prefix(String),
}

/// A page of uploads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UploadPage<'u> {
    /// Entries in order.
    pub entries: Vec<Listed<'u>>,
    /// Whether more follow.
    pub truncated: bool,
}

/// Sorts uploads as S3 lists them: by key, then by initiation time (the id breaks ties).
pub fn sort_uploads(uploads: &mut [UploadEntry]) {
    uploads.sort_by(|a, b| {
        (a.key.as_str(), a.initiated, a.upload_id.as_str()).cmp(&(
            b.key.as_str(),
            b.initiated,
            b.upload_id.as_str(),
        ))
    });
}

/// Cuts one page from `uploads` (sorted by [`sort_uploads`]).
pub fn upload_page<'u>(uploads: &'u [UploadEntry], q: &UploadQuery) -> UploadPage<'u> {
    let mut page = UploadPage::default();
    if q.max_uploads == 0 {
        return page;
    }
    let delim = q.delimiter.as_deref().filter(|d| !d.is_empty());
    let marker = Some(q.key_marker.as_str()).filter(|m| !m.is_empty());
    // With an upload-id marker, uploads of the marker key after that upload (by the listing
    // order when the id is known, else by id) are still to come.
    let id_marker = marker.and(q.upload_id_marker.as_deref());
    let marker_pos = id_marker.and_then(|id| {
        uploads
            .iter()
            .position(|u| Some(u.key.as_str()) == marker && u.upload_id == id)
    });
    let mut count = 0u32;
    for (i, u) in uploads.iter().enumerate() {
        if !u.key.starts_with(q.prefix.as_str()) {
            continue;
        }
        if let Some(m) = marker {
            let after = match (u.key.as_str().cmp(m), id_marker) {
                (std::cmp::Ordering::Greater, _) => true,
                (std::cmp::Ordering::Equal, Some(id)) => match marker_pos {
                    Some(p) => i > p,
                    None => u.upload_id.as_str() > id,
                },
                _ => false,
            };
            if !after {
                continue;
            }
        }
        let rolled = delim.and_then(|d| {
            let rest = u.key.get(q.prefix.len()..)?;
            let at = rest.find(d)?;
            u.key
                .get(..q.prefix.len() + at + d.len())
                .map(str::to_owned)
        });
        if let Some(cp) = &rolled {
            let seen = matches!(page.entries.last(), Some(Listed::Prefix(p)) if p == cp);
            // A prefix at or before the key marker was returned by an earlier page.
            if seen || marker.is_some_and(|m| cp.as_str() <= m) {
                continue;
            }
        }
        if count >= q.max_uploads {
            page.truncated = true;
            break;
        }
        page.entries.push(match rolled {
            Some(cp) => Listed::Prefix(cp),
            None => Listed::Upload(u),
        });
        count += 1;
    }
    page
}

/// Serves ListMultipartUploads.
pub fn list_uploads(
    backend: &dyn Backend,
    bucket: &str,
    query: &Query,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let url = match query.get("encoding-type") {
        None => false,
        Some("url") => true,
        Some(_) => {
            return Err(ApiError::invalid_argument(
                "Invalid Encoding Method specified in Request",
            ));
        }
    };
    let enc = |s: &str| {
        if url {
            s3_lite::uri::encode_path(s)
        } else {
            s.to_owned()
        }
    };
    let q = UploadQuery::parse(query)?;
    let mut uploads = backend.list_uploads(bucket)?;
    sort_uploads(&mut uploads);
    let page = upload_page(&uploads, &q);
    let mut d = format!("<ListMultipartUploadsResult xmlns=\"{S3_NS}\">");
    element(&mut d, "Bucket", bucket);
    element(&mut d, "KeyMarker", &enc(&q.key_marker));
    element(
        &mut d,
        "UploadIdMarker",
        q.upload_id_marker.as_deref().unwrap_or_default(),
    );
    if page.truncated {
        match page.entries.last() {
            Some(Listed::Upload(u)) => {
                element(&mut d, "NextKeyMarker", &enc(&u.key));
                element(&mut d, "NextUploadIdMarker", &u.upload_id);
            }
            Some(Listed::Prefix(p)) => {
                element(&mut d, "NextKeyMarker", &enc(p));
                element(&mut d, "NextUploadIdMarker", "");
            }
            None => {}
        }
    }
    element(&mut d, "Prefix", &enc(&q.prefix));
    if let Some(x) = &q.delimiter {
        element(&mut d, "Delimiter", &enc(x));
    }
    element(&mut d, "MaxUploads", &q.max_uploads.to_string());
    element(&mut d, "IsTruncated", bool_text(page.truncated));
    if url {
        element(&mut d, "EncodingType", "url");
    }
    for e in &page.entries {
        if let Listed::Upload(u) = e {
            d.push_str("<Upload>");
            element(&mut d, "Key", &enc(&u.key));
            element(&mut d, "UploadId", &u.upload_id);
            owner(&mut d, "Initiator");
            owner(&mut d, "Owner");
            element(&mut d, "StorageClass", "STANDARD");
            element(&mut d, "Initiated", &iso8601(u.initiated));
            if let Some(a) = &u.checksum_algorithm {
                element(&mut d, "ChecksumAlgorithm", a);
            }
            if let Some(t) = &u.checksum_type {
                element(&mut d, "ChecksumType", t);
            }
            d.push_str("</Upload>");
        }
    }
    for e in &page.entries {
        if let Listed::Prefix(p) = e {
            d.push_str("<CommonPrefixes>");
            element(&mut d, "Prefix", &enc(p));
            d.push_str("</CommonPrefixes>");
        }
    }
    d.push_str("</ListMultipartUploadsResult>");
    xml_ok(out, Vec::new(), d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(key: &str, id: &str, t: u64) -> UploadEntry {
        UploadEntry {
            key: key.into(),
            upload_id: id.into(),
            initiated: t,
            ..Default::default()
        }
    }

    fn names(p: &UploadPage) -> Vec<String> {
        p.entries
            .iter()
            .map(|e| match e {
                Listed::Upload(u) => format!("{}:{}", u.key, u.upload_id),
                Listed::Prefix(p) => format!("[{p}]"),
            })
            .collect()
    }

    #[test]
    fn uploads_page_through_key_and_id_markers() {
        let mut all = vec![
            up("b", "z1", 1),
            up("a", "y", 5),
            up("a", "x", 9),
            up("c", "w", 1),
        ];
        sort_uploads(&mut all);
        let mut q = UploadQuery {
            max_uploads: 2,
            ..Default::default()
        };
        let p = upload_page(&all, &q);
        assert_eq!(names(&p), ["a:y", "a:x"]);
        assert!(p.truncated);
        q.key_marker = "a".into();
        q.upload_id_marker = Some("y".into());
        let p = upload_page(&all, &q);
        assert_eq!(names(&p), ["a:x", "b:z1"]);
        assert!(p.truncated);
        q.upload_id_marker = None;
        let p = upload_page(&all, &q);
        assert_eq!(names(&p), ["b:z1", "c:w"]);
        assert!(!p.truncated);
        q.max_uploads = 0;
        assert_eq!(upload_page(&all, &q), UploadPage::default());
    }

    #[test]
    fn uploads_roll_up_under_a_delimiter() {
        let mut all = vec![
            up("d/1", "a", 1),
            up("d/2", "b", 1),
            up("e", "c", 1),
            up("f/x", "d", 1),
        ];
        sort_uploads(&mut all);
        let mut q = UploadQuery {
            delimiter: Some("/".into()),
            max_uploads: 2,
            ..Default::default()
        };
        let p = upload_page(&all, &q);
        assert_eq!(names(&p), ["[d/]", "e:c"]);
        assert!(p.truncated);
        q.key_marker = "e".into();
        let p = upload_page(&all, &q);
        assert_eq!(names(&p), ["[f/]"]);
        assert!(!p.truncated);
        q.key_marker = "d/".into();
        assert_eq!(names(&upload_page(&all, &q)), ["e:c", "[f/]"]);
    }

    #[test]
    fn parts_page_after_the_marker() {
        let parts: Vec<PartEntry> = [1, 2, 5, 7]
            .iter()
            .map(|&n| PartEntry {
                part_number: n,
                ..Default::default()
            })
            .collect();
        let nums = |s: &[PartEntry]| s.iter().map(|p| p.part_number).collect::<Vec<_>>();
        let (p, t) = part_page(&parts, 0, 2);
        assert_eq!((nums(p), t), (vec![1, 2], true));
        let (p, t) = part_page(&parts, 2, 2);
        assert_eq!((nums(p), t), (vec![5, 7], false));
        let (p, t) = part_page(&parts, 7, 2);
        assert_eq!((nums(p), t), (vec![], false));
        let (p, t) = part_page(&parts, 0, 0);
        assert_eq!((nums(p), t), (vec![], false));
    }
}
