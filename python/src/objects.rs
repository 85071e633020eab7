//! `Engine.list` / `head` / `delete` / `create_bucket`: the object API on the blocking S3
//! client (`hipobj_loader::client::S3Client`), with the engine's endpoint, identity and
//! timeouts; every request runs with the GIL released.

use hipobj_loader::client::{ClientError, S3Client};
use hipobj_loader::s3uri::S3Uri;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::client_error;
use crate::state::{State, invalid_url};

/// A blocking client for `state`'s endpoint.
fn client(py: Python<'_>, state: &State) -> PyResult<S3Client> {
    S3Client::new(state.settings.clone()).map_err(|e| client_error(py, state, &e, None, "client"))
}

fn bucket_only(py: Python<'_>, url: &str) -> PyResult<S3Uri> {
    let uri = S3Uri::parse(url).map_err(|e| invalid_url(py, url, e.reason))?;
    if !uri.key.trim_matches('/').is_empty() {
        return Err(invalid_url(
            py,
            url,
            "a bucket URL has no key (s3://BUCKET)",
        ));
    }
    Ok(uri)
}

/// ListObjectsV2 of `url` (`s3://BUCKET[/PREFIX]`), through every page: one dict per object
/// `{key, size, etag, last_modified}`; without `recursive`, the common prefixes under the
/// next `/` are entries too (key ending in `/`, size 0, etag and last_modified `None`).
pub fn list<'py>(
    py: Python<'py>,
    state: &State,
    url: &str,
    recursive: bool,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let uri = S3Uri::parse(url).map_err(|e| invalid_url(py, url, e.reason))?;
    let mut c = client(py, state)?;
    let prefix = (!uri.key.is_empty()).then_some(uri.key.as_str());
    let delimiter = (!recursive).then_some("/");
    let listing = py
        .detach(|| c.list(&uri.bucket, prefix, delimiter))
        .map_err(|e| client_error(py, state, &e, Some((&uri.bucket, &uri.key)), "LIST"))?;
    let mut out = Vec::with_capacity(listing.objects.len() + listing.common_prefixes.len());
    for o in &listing.objects {
        let d = PyDict::new(py);
        d.set_item("key", &o.key)?;
        d.set_item("size", o.size)?;
        d.set_item("etag", &o.etag)?;
        d.set_item("last_modified", &o.last_modified)?;
        out.push(d);
    }
    for p in &listing.common_prefixes {
        let d = PyDict::new(py);
        d.set_item("key", p)?;
        d.set_item("size", 0u64)?;
        d.set_item("etag", None::<String>)?;
        d.set_item("last_modified", None::<String>)?;
        out.push(d);
    }
    Ok(out)
}

/// HeadObject of `url` (asking for the stored checksum): `{size, etag, last_modified,
/// content_type, checksum_crc64nvme}` (`checksum_crc64nvme` only when the server keeps one).
pub fn head<'py>(py: Python<'py>, state: &State, url: &str) -> PyResult<Bound<'py, PyDict>> {
    let uri = S3Uri::parse_object(url).map_err(|e| invalid_url(py, url, e.reason))?;
    let mut c = client(py, state)?;
    let meta = py
        .detach(|| c.head_with(&uri.bucket, &uri.key, true))
        .map_err(|e| client_error(py, state, &e, Some((&uri.bucket, &uri.key)), "HEAD"))?;
    let d = PyDict::new(py);
    d.set_item("size", meta.content_length)?;
    d.set_item("etag", meta.etag)?;
    d.set_item("last_modified", meta.last_modified)?;
    d.set_item("content_type", meta.content_type)?;
    if let Some(crc) = meta.checksum_crc64nvme {
        d.set_item("checksum_crc64nvme", crc)?;
    }
    Ok(d)
}

/// DeleteObject of `url` (a missing key is no error, as on S3).
pub fn delete(py: Python<'_>, state: &State, url: &str) -> PyResult<()> {
    let uri = S3Uri::parse_object(url).map_err(|e| invalid_url(py, url, e.reason))?;
    let mut c = client(py, state)?;
    py.detach(|| c.delete(&uri.bucket, &uri.key))
        .map_err(|e| client_error(py, state, &e, Some((&uri.bucket, &uri.key)), "DELETE"))
}

/// CreateBucket of `url` (`s3://BUCKET`) in the engine's region; one these credentials
/// already own is no error.
pub fn create_bucket(py: Python<'_>, state: &State, url: &str) -> PyResult<()> {
    let uri = bucket_only(py, url)?;
    let mut c = client(py, state)?;
    match py.detach(|| c.create_bucket(&uri.bucket)) {
        Err(ClientError::S3(e)) if e.code == "BucketAlreadyOwnedByYou" => Ok(()),
        // Servers that do not tell owners apart (s3s-fs) refuse any existing bucket as
        // existing: it is ours when it is among the buckets these credentials list.
        Err(ClientError::S3(e)) if e.code == "BucketAlreadyExists" => {
            let ours = py
                .detach(|| c.list_buckets())
                .map(|all| all.iter().any(|b| b.name == uri.bucket))
                .unwrap_or(false);
            if ours {
                Ok(())
            } else {
                Err(client_error(
                    py,
                    state,
                    &ClientError::S3(e),
                    Some((&uri.bucket, "")),
                    "CREATE BUCKET",
                ))
            }
        }
        r => r.map_err(|e| client_error(py, state, &e, Some((&uri.bucket, "")), "CREATE BUCKET")),
    }
}
