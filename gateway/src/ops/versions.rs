//! Versions of an unversioned bucket, as S3 shows them for a bucket that never had versioning:
//! every object has exactly one version, `null`, which is the latest. ListObjectVersions
//! (`GET /bucket?versions`) lists the current objects so; GET, HEAD and DELETE of an object
//! (and DeleteObjects) accept `versionId=null` and answer any other id as a version that does
//! not exist. Real tools need this (s3-tests' cleanup, rclone, terraform, `aws s3 rb --force`).

use crate::backend::Backend;
use crate::error::ApiError;
use crate::handler::{ListParams, Respond, S3_NS, xml_ok};
use crate::route::Query;
use crate::xml::element;

/// The one version id an object of an unversioned bucket has.
pub const NULL_VERSION: &str = "null";

/// 404 NoSuchVersion: `version` names no version of `key`.
pub fn no_such_version(key: &str, version: &str) -> ApiError {
    ApiError::new(
        404,
        "NoSuchVersion",
        "The specified version does not exist.",
    )
    .with_detail("Key", key)
    .with_detail("VersionId", version)
}

/// Checks an object call's `versionId`: `Ok(true)` when it is `null` (the current object),
/// `Ok(false)` when absent, 404 `NoSuchVersion` for any other id, 400 for an empty one.
pub fn object_version(query: &Query, key: &str) -> Result<bool, ApiError> {
    match query.get("versionId") {
        None => Ok(false),
        Some(NULL_VERSION) => Ok(true),
        Some("") => Err(ApiError::invalid_argument(
            "Version id cannot be the empty string",
        )),
        Some(other) => Err(no_such_version(key, other)),
    }
}

/// Serves ListObjectVersions on `bucket`: `prefix`, `delimiter`, `key-marker`,
/// `version-id-marker` (`null` or empty; only with a key marker), `max-keys` (≤ 1000),
/// `encoding-type=url`.
pub fn serve(
    backend: &dyn Backend,
    bucket: &str,
    query: &Query,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let params = ListParams::parse(query)?;
    let key_marker = query.get("key-marker").unwrap_or_default().to_owned();
    let version_marker = query.get("version-id-marker").unwrap_or_default();
    if !version_marker.is_empty() {
        if key_marker.is_empty() {
            return Err(ApiError::invalid_argument(
                "A version-id marker cannot be specified without a key marker.",
            )
            .with_detail("ArgumentName", "version-id-marker")
            .with_detail("ArgumentValue", version_marker));
        }
        if version_marker != NULL_VERSION {
            return Err(ApiError::invalid_argument("Invalid version id specified")
                .with_detail("ArgumentName", "version-id-marker")
                .with_detail("ArgumentValue", version_marker));
        }
    }
    // Each key has one version, so "after (key, null)" and "after key" are the same place.
    let q = params.after_marker(query, &key_marker);
    let page = backend.list_objects(bucket, &q)?;
    let enc = |s: &str| params.encode(s);
    let mut d = format!("<ListVersionsResult xmlns=\"{S3_NS}\">");
    element(&mut d, "Name", bucket);
    element(&mut d, "Prefix", &enc(&q.prefix));
    element(&mut d, "KeyMarker", &enc(&key_marker));
    element(&mut d, "VersionIdMarker", version_marker);
    // The next marker is the page's last entry, a key or a common prefix, whichever sorts
    // later (the backend's continuation token is its own: an upstream's is opaque).
    let last = page
        .contents
        .last()
        .map(|e| e.key.as_str())
        .max(page.common_prefixes.last().map(String::as_str));
    if page.is_truncated
        && let Some(next) = last
    {
        let next = next.to_owned();
        element(&mut d, "NextKeyMarker", &enc(&next));
        // Resuming after a common prefix needs only the key marker.
        if !page.common_prefixes.contains(&next) {
            element(&mut d, "NextVersionIdMarker", NULL_VERSION);
        }
    }
    element(&mut d, "MaxKeys", &q.max_keys.to_string());
    if let Some(x) = &q.delimiter {
        element(&mut d, "Delimiter", &enc(x));
    }
    element(
        &mut d,
        "IsTruncated",
        if page.is_truncated { "true" } else { "false" },
    );
    if params.url {
        element(&mut d, "EncodingType", "url");
    }
    for e in &page.contents {
        d.push_str("<Version>");
        element(&mut d, "Key", &enc(&e.key));
        element(&mut d, "VersionId", NULL_VERSION);
        element(&mut d, "IsLatest", "true");
        element(&mut d, "LastModified", &e.last_modified);
        element(&mut d, "ETag", &e.etag);
        element(&mut d, "Size", &e.size.to_string());
        element(&mut d, "StorageClass", "STANDARD");
        d.push_str("<Owner><ID>hipobj</ID><DisplayName>hipobj</DisplayName></Owner>");
        d.push_str("</Version>");
    }
    for p in &page.common_prefixes {
        d.push_str("<CommonPrefixes>");
        element(&mut d, "Prefix", &enc(p));
        d.push_str("</CommonPrefixes>");
    }
    d.push_str("</ListVersionsResult>");
    xml_ok(out, Vec::new(), d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ids_of_object_calls() {
        let q = |s: &str| Query::parse(s).unwrap();
        assert!(!object_version(&q(""), "k").unwrap());
        assert!(object_version(&q("versionId=null"), "k").unwrap());
        let e =
            object_version(&q("versionId=3HL4kqtJlcpXroDTDmJ%2BrmSpXd3dIbrHY"), "k").unwrap_err();
        assert_eq!((e.status, e.code.as_str()), (404, "NoSuchVersion"));
        assert_eq!(
            object_version(&q("versionId="), "k").unwrap_err().status,
            400
        );
    }
}
