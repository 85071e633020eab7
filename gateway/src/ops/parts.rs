//! What needs an object's metadata before its bytes: GET/HEAD `?partNumber=N` (the byte span
//! of part N of a multipart object) and GetObjectAttributes (`GET ?attributes`).

use s3_lite::s3::ByteRange;

use crate::backend::{Backend, GetRequest, ObjectInfo, ObjectSink};
use crate::error::ApiError;
use crate::handler::{Respond, S3_NS, xml_ok};
use crate::route::Query;
use crate::time::http_date;
use crate::xml::element;

struct Capture(Option<ObjectInfo>);

impl ObjectSink for Capture {
    fn begin(&mut self, info: &ObjectInfo, _span: Option<(u64, u64)>) -> std::io::Result<()> {
        self.0 = Some(info.clone());
        Ok(())
    }
    fn data(&mut self, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
}

/// The object's metadata (a HEAD through the backend).
pub fn stat(backend: &dyn Backend, bucket: &str, key: &str) -> Result<ObjectInfo, ApiError> {
    let mut c = Capture(None);
    let req = GetRequest {
        head_only: true,
        ..Default::default()
    };
    backend.get_object(bucket, key, &req, &mut c)?;
    c.0.ok_or_else(|| ApiError::internal("object without metadata"))
}

/// `partNumber` from the query: 1..=10000.
pub fn part_number(query: &Query) -> Result<Option<u32>, ApiError> {
    let Some(v) = query.get("partNumber") else {
        return Ok(None);
    };
    v.parse::<u32>()
        .ok()
        .filter(|n| (1..=s3_lite::s3::MAX_PARTS).contains(n))
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid_argument(
                "Part number must be an integer between 1 and 10000, inclusive",
            )
        })
}

/// The range of part `n` of `info`: `None` (the whole object) for part 1 of an object
/// uploaded in one piece; 400 `InvalidPart` past the last part (what S3-compatible stores and
/// ceph/s3-tests expect, for a single-part object as for a multipart one).
pub fn part_range(info: &ObjectInfo, n: u32) -> Result<Option<ByteRange>, ApiError> {
    let unsatisfiable = || {
        ApiError::new(
            400,
            "InvalidPart",
            "The requested partnumber is not satisfiable",
        )
        .with_detail("PartNumberRequested", n.to_string())
        .with_detail("ActualPartCount", info.parts.unwrap_or(1).to_string())
    };
    if info.part_sizes.is_empty() {
        return if n == 1 {
            Ok(None)
        } else {
            Err(unsatisfiable())
        };
    }
    let index = (n - 1) as usize;
    let size = *info.part_sizes.get(index).ok_or_else(unsatisfiable)?;
    let start: u64 = info.part_sizes.iter().take(index).sum();
    if size == 0 {
        return Err(unsatisfiable());
    }
    Ok(Some(ByteRange::Inclusive(start, start + size - 1)))
}

/// The checksum headers of part `n` of a multipart object: the part's own checksum
/// (`x-amz-checksum-<alg>`) and the object's `x-amz-checksum-type`. Empty when no part
/// checksum is recorded (an object stored before they were, or a single-part object).
pub fn part_checksum_headers(info: &ObjectInfo, n: u32) -> Vec<(String, String)> {
    let index = usize::try_from(n.saturating_sub(1)).unwrap_or(usize::MAX);
    let Some((alg, value)) = info.part_checksums.get(index) else {
        return Vec::new();
    };
    let mut h = vec![(
        format!("x-amz-checksum-{}", alg.to_ascii_lowercase()),
        value.clone(),
    )];
    if let Some(t) = &info.checksum_type {
        h.push(("x-amz-checksum-type".into(), t.clone()));
    }
    h
}

/// Serves GetObjectAttributes: the attributes named in `x-amz-object-attributes`
/// (`ETag`, `Checksum`, `ObjectParts`, `StorageClass`, `ObjectSize`).
pub fn attributes(
    backend: &dyn Backend,
    bucket: &str,
    key: &str,
    header: &dyn Fn(&str) -> Option<String>,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let wanted: Vec<String> = header("x-amz-object-attributes")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    const KNOWN: [&str; 5] = [
        "ETag",
        "Checksum",
        "ObjectParts",
        "StorageClass",
        "ObjectSize",
    ];
    if wanted.is_empty() {
        return Err(ApiError::new(
            400,
            "InvalidRequest",
            "The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty",
        ));
    }
    if let Some(bad) = wanted.iter().find(|w| !KNOWN.contains(&w.as_str())) {
        return Err(ApiError::invalid_argument(format!(
            "Invalid attribute name specified: {bad}"
        )));
    }
    let info = stat(backend, bucket, key)?;
    let want = |a: &str| wanted.iter().any(|w| w == a);
    let mut d = format!("<GetObjectAttributesResponse xmlns=\"{S3_NS}\">");
    if want("ETag") {
        element(&mut d, "ETag", info.etag.trim_matches('"'));
    }
    if want("Checksum") {
        let mut c = String::new();
        for (name, value) in [
            ("ChecksumCRC64NVME", &info.crc64nvme),
            ("ChecksumCRC32C", &info.crc32c),
            ("ChecksumCRC32", &info.crc32),
            ("ChecksumSHA1", &info.sha1),
            ("ChecksumSHA256", &info.sha256),
        ] {
            if let Some(v) = value {
                element(&mut c, name, v);
            }
        }
        if !c.is_empty() {
            d.push_str("<Checksum>");
            d.push_str(&c);
            if let Some(t) = &info.checksum_type {
                element(&mut d, "ChecksumType", t);
            }
            d.push_str("</Checksum>");
        }
    }
    if want("ObjectParts") && !info.part_sizes.is_empty() {
        let max: usize = header("x-amz-max-parts")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1000)
            .min(1000);
        let marker: usize = header("x-amz-part-number-marker")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let total = info.part_sizes.len();
        let shown: Vec<usize> = (marker..total).take(max).collect();
        let truncated = shown.last().is_some_and(|last| last + 1 < total);
        d.push_str("<ObjectParts>");
        // `PartsCount`, as S3 and the SDKs' models name it (the API reference's prose says
        // TotalPartsCount; botocore and s3-tests read PartsCount).
        element(&mut d, "PartsCount", &total.to_string());
        element(&mut d, "PartNumberMarker", &marker.to_string());
        if let Some(last) = shown.last() {
            element(&mut d, "NextPartNumberMarker", &(last + 1).to_string());
        }
        element(&mut d, "MaxParts", &max.to_string());
        element(
            &mut d,
            "IsTruncated",
            if truncated { "true" } else { "false" },
        );
        for i in shown {
            d.push_str("<Part>");
            element(&mut d, "PartNumber", &(i + 1).to_string());
            element(
                &mut d,
                "Size",
                &info.part_sizes.get(i).copied().unwrap_or(0).to_string(),
            );
            if let Some((alg, v)) = info.part_checksums.get(i) {
                element(&mut d, &format!("Checksum{alg}"), v);
            }
            d.push_str("</Part>");
        }
        d.push_str("</ObjectParts>");
    }
    if want("StorageClass") {
        element(&mut d, "StorageClass", "STANDARD");
    }
    if want("ObjectSize") {
        element(&mut d, "ObjectSize", &info.size.to_string());
    }
    d.push_str("</GetObjectAttributesResponse>");
    xml_ok(
        out,
        vec![("Last-Modified".into(), http_date(info.last_modified))],
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn part_spans() {
        let mp = ObjectInfo {
            size: 25,
            parts: Some(3),
            part_sizes: vec![10, 10, 5],
            ..Default::default()
        };
        assert_eq!(
            part_range(&mp, 1).unwrap(),
            Some(ByteRange::Inclusive(0, 9))
        );
        assert_eq!(
            part_range(&mp, 3).unwrap(),
            Some(ByteRange::Inclusive(20, 24))
        );
        assert_eq!(part_range(&mp, 4).unwrap_err().code, "InvalidPart");
        let single = ObjectInfo {
            size: 7,
            ..Default::default()
        };
        assert_eq!(part_range(&single, 1).unwrap(), None);
        assert_eq!(part_range(&single, 2).unwrap_err().status, 400);
    }
}
