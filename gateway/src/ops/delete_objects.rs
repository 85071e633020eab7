//! DeleteObjects (`POST /bucket?delete`): up to 1000 keys in one request, each deleted on its
//! own; the answer lists the deleted keys (none in Quiet mode) and a per-key `<Error>` for
//! each key that could not be deleted.

use s3_lite::sigv4::PayloadHash;

use crate::backend::Backend;
use crate::body::{self, BodySource, ReceiveOptions};
use crate::error::ApiError;
use crate::handler::{Respond, S3_NS, xml_ok};
use crate::ops::versions::{NULL_VERSION, no_such_version};
use crate::xml::{self, Node, element};

/// S3's limit on keys per DeleteObjects request.
pub const MAX_KEYS: usize = 1000;

/// A parsed `<Delete>` document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    /// `<Quiet>true</Quiet>`: only errors are reported.
    pub quiet: bool,
    /// The keys, in document order.
    pub keys: Vec<String>,
    /// Each key's `<VersionId>`, if given.
    /// INVARIANT: `versions.len() == keys.len()`.
    pub versions: Vec<Option<String>>,
}

/// Parses a `<Delete>` body (1..=1000 objects, each with a `<Key>`).
pub fn parse(body: &[u8]) -> Result<DeleteRequest, ApiError> {
    let mut req = DeleteRequest::default();
    let mut in_object = false;
    let mut key: Option<String> = None;
    let mut version: Option<String> = None;
    xml::visit(body, "Delete", |node| {
        match node {
            Node::Open { path, name } if path.len() == 1 && name == "Object" => {
                if req.keys.len() >= MAX_KEYS {
                    return Err(xml::malformed("more than 1000 objects"));
                }
                in_object = true;
                key = None;
                version = None;
            }
            Node::Close { path, name, text } if path.len() == 2 && in_object && name == "Key" => {
                key = Some(text.to_owned());
            }
            Node::Close { path, name, text }
                if path.len() == 2 && in_object && name == "VersionId" =>
            {
                version = Some(text.to_owned());
            }
            Node::Close { path, name, .. } if path.len() == 1 && name == "Object" => {
                in_object = false;
                let k = key
                    .take()
                    .ok_or_else(|| xml::malformed("an Object without a Key"))?;
                req.keys.push(k);
                req.versions.push(version.take());
            }
            Node::Close { path, name, text } if path.len() == 1 && name == "Quiet" => {
                req.quiet = match text.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(xml::malformed("Quiet must be true or false")),
                };
            }
            _ => {}
        }
        Ok(())
    })?;
    if req.keys.is_empty() {
        return Err(xml::malformed("no Object to delete"));
    }
    Ok(req)
}

/// Whether the request carries the integrity header S3 requires for DeleteObjects.
fn has_integrity_header(headers: &[(String, String)]) -> bool {
    headers.iter().any(|(n, _)| {
        let n = n.to_ascii_lowercase();
        n == "content-md5"
            || (n.starts_with("x-amz-checksum-") && n != "x-amz-checksum-mode")
            || n == "x-amz-trailer"
    })
}

/// Serves DeleteObjects on `bucket`.
#[allow(clippy::too_many_arguments)]
pub fn serve(
    backend: &dyn Backend,
    bucket: &str,
    headers: &[(String, String)],
    payload: &PayloadHash,
    max_len: u64,
    body: &mut dyn BodySource,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    backend.head_bucket(bucket)?;
    let opts = ReceiveOptions {
        aws_chunked: matches!(payload, PayloadHash::StreamingUnsignedTrailer),
        decoded_len: None,
        max_len: max_len.min(xml::MAX_XML_BODY as u64),
    };
    let spooled = body::receive(body, backend.spool_dir(), opts)?;
    body::verify(&spooled, headers, payload)?;
    if !has_integrity_header(headers) && spooled.trailers.is_empty() {
        return Err(ApiError::new(
            400,
            "InvalidRequest",
            "Missing required header for this request: Content-MD5 or x-amz-checksum-*",
        ));
    }
    let doc = std::fs::read(spooled.file.path())?;
    let req = parse(&doc)?;
    let mut out_doc = format!("<DeleteResult xmlns=\"{S3_NS}\">");
    for (key, version) in req.keys.iter().zip(&req.versions) {
        // An unversioned bucket's objects have one version, `null`: another id names a
        // version that does not exist, and the current object is left alone.
        let result = match version.as_deref() {
            None | Some(NULL_VERSION) => backend.delete_object(bucket, key),
            Some(other) => Err(no_such_version(key, other)),
        };
        match result {
            Ok(()) if req.quiet => {}
            Ok(()) => {
                out_doc.push_str("<Deleted>");
                element(&mut out_doc, "Key", key);
                if let Some(v) = version {
                    element(&mut out_doc, "VersionId", v);
                }
                out_doc.push_str("</Deleted>");
            }
            Err(e) => {
                out_doc.push_str("<Error>");
                element(&mut out_doc, "Key", key);
                if let Some(v) = version {
                    element(&mut out_doc, "VersionId", v);
                }
                element(&mut out_doc, "Code", &e.code);
                element(&mut out_doc, "Message", &e.message);
                out_doc.push_str("</Error>");
            }
        }
    }
    out_doc.push_str("</DeleteResult>");
    xml_ok(out, Vec::new(), out_doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_quiet_and_refuses_junk() {
        let r = parse(b"<Delete xmlns=\"x\"><Quiet>true</Quiet><Object><Key>a &amp; b</Key><VersionId>v</VersionId></Object><Object><Key> sp </Key></Object></Delete>").unwrap();
        assert!(r.quiet);
        assert_eq!(r.keys, vec!["a & b".to_owned(), " sp ".to_owned()]);
        assert_eq!(r.versions, vec![Some("v".to_owned()), None]);
        assert!(parse(b"<Delete></Delete>").is_err());
        assert!(parse(b"<Delete><Object></Object></Delete>").is_err());
        assert!(parse(b"<Other><Object><Key>a</Key></Object></Other>").is_err());
        let many = format!(
            "<Delete>{}</Delete>",
            "<Object><Key>k</Key></Object>".repeat(MAX_KEYS + 1)
        );
        assert!(parse(many.as_bytes()).is_err());
    }
}
