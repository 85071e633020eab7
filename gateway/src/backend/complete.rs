//! What a CompleteMultipartUpload is checked against besides its parts: the whole-object
//! checksum headers the client sent (`x-amz-checksum-<alg>`), and the part list's order
//! (a part number listed several times in a row counts once, by its last entry).

use super::{CompletePart, ObjectInfo};
use crate::error::ApiError;

/// The checksum algorithms whose `x-amz-checksum-<alg>` header names a whole object.
const ALGORITHMS: [&str; 5] = ["crc64nvme", "crc32c", "crc32", "sha1", "sha256"];

/// The whole-object checksums of a CompleteMultipartUpload request: `(algorithm, value)`,
/// algorithm lowercase (`sha256`), value trimmed.
pub fn whole_checksums(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter_map(|(n, v)| {
            let lower = n.to_ascii_lowercase();
            let alg = lower.strip_prefix("x-amz-checksum-")?;
            ALGORITHMS
                .contains(&alg)
                .then(|| (alg.to_owned(), v.trim().to_owned()))
        })
        .collect()
}

/// The object's stored value of `alg` (lowercase), if it has one.
fn stored<'i>(info: &'i ObjectInfo, alg: &str) -> Option<&'i str> {
    match alg {
        "crc64nvme" => info.crc64nvme.as_deref(),
        "crc32c" => info.crc32c.as_deref(),
        "crc32" => info.crc32.as_deref(),
        "sha1" => info.sha1.as_deref(),
        "sha256" => info.sha256.as_deref(),
        _ => None,
    }
}

/// Checks the client's whole-object checksums against the object the parts make: a value
/// must equal the computed one (a composite's with or without its `-N` suffix), else 400
/// `BadDigest`; an algorithm the object does not carry (not the upload's) is 400
/// `InvalidRequest`.
pub fn check_whole(info: &ObjectInfo, whole: &[(String, String)]) -> Result<(), ApiError> {
    for (alg, given) in whole {
        let Some(value) = stored(info, alg) else {
            return Err(ApiError::new(
                400,
                "InvalidRequest",
                format!(
                    "The upload was not created with the {} checksum algorithm; the complete request must use the upload's algorithm",
                    alg.to_ascii_uppercase()
                ),
            ));
        };
        let bare = value.split_once('-').map_or(value, |(v, _)| v);
        if given != value && given != bare {
            return Err(ApiError::new(
                400,
                "BadDigest",
                format!(
                    "The {} you specified did not match the calculated checksum.",
                    alg.to_ascii_uppercase()
                ),
            ));
        }
    }
    Ok(())
}

/// The parts that count: where a part number is listed several times in a row, only its
/// last entry (a part re-uploaded while the list was built names the data stored last, as
/// S3-compatible stores take it; ceph/s3-tests `test_multipart_resend_first_finishes_last`).
/// Numbers must not go down: 400 `InvalidPartOrder`.
pub fn effective_parts(parts: &[CompletePart]) -> Result<Vec<&CompletePart>, ApiError> {
    let mut out: Vec<&CompletePart> = Vec::with_capacity(parts.len());
    for p in parts {
        match out.last() {
            Some(last) if p.part_number < last.part_number => {
                return Err(ApiError::new(
                    400,
                    "InvalidPartOrder",
                    "The list of parts was not in ascending order. Parts must be ordered by part number.",
                ));
            }
            Some(last) if p.part_number == last.part_number => {
                out.pop();
            }
            _ => {}
        }
        out.push(p);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(n: u32, etag: &str) -> CompletePart {
        CompletePart {
            part_number: n,
            etag: etag.into(),
            ..Default::default()
        }
    }

    #[test]
    fn repeated_part_numbers_keep_the_last_entry() {
        let parts = [part(1, "a"), part(1, "b"), part(2, "c")];
        let eff = effective_parts(&parts).unwrap();
        let got: Vec<(u32, &str)> = eff
            .iter()
            .map(|p| (p.part_number, p.etag.as_str()))
            .collect();
        assert_eq!(got, vec![(1, "b"), (2, "c")]);
        let e = effective_parts(&[part(2, "a"), part(1, "b")]).unwrap_err();
        assert_eq!(e.code, "InvalidPartOrder");
    }

    #[test]
    fn whole_object_checksums() {
        let info = ObjectInfo {
            sha256: Some("Ok6Cs5b96ux6+MWQkJO7UBT5sKPBeXBLwvj/hK89smg=-1".into()),
            ..Default::default()
        };
        let h = |n: &str, v: &str| vec![(n.to_owned(), v.to_owned())];
        let w = whole_checksums(&h("X-Amz-Checksum-SHA256", " bad "));
        assert_eq!(w, vec![("sha256".to_owned(), "bad".to_owned())]);
        assert_eq!(check_whole(&info, &w).unwrap_err().code, "BadDigest");
        for ok in [
            "Ok6Cs5b96ux6+MWQkJO7UBT5sKPBeXBLwvj/hK89smg=-1",
            "Ok6Cs5b96ux6+MWQkJO7UBT5sKPBeXBLwvj/hK89smg=",
        ] {
            check_whole(&info, &whole_checksums(&h("x-amz-checksum-sha256", ok))).unwrap();
        }
        let other = whole_checksums(&h("x-amz-checksum-crc32", "AAAAAA=="));
        assert_eq!(
            check_whole(&info, &other).unwrap_err().code,
            "InvalidRequest"
        );
        // Not checksum values.
        assert!(whole_checksums(&h("x-amz-checksum-type", "COMPOSITE")).is_empty());
        assert!(whole_checksums(&h("x-amz-checksum-mode", "ENABLED")).is_empty());
    }
}
