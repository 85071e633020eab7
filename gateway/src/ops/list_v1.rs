//! ListObjects (version 1: `GET /bucket` without `list-type=2`): `marker` resumes after a
//! key, and `NextMarker` is given when the page is truncated and a delimiter was used (S3
//! omits it otherwise; clients resume from the last key).

use crate::backend::Backend;
use crate::backend::list::decode_token;
use crate::error::ApiError;
use crate::handler::{ListParams, Respond, S3_NS, render_list_entries, xml_ok};
use crate::route::Query;
use crate::xml::element;

/// Serves ListObjects v1 on `bucket`.
pub fn serve(
    backend: &dyn Backend,
    bucket: &str,
    query: &Query,
    out: &mut dyn Respond,
) -> Result<(), ApiError> {
    let params = ListParams::parse(query)?;
    let marker = query.get("marker").unwrap_or_default().to_owned();
    let q = params.after_marker(query, &marker);
    let page = backend.list_objects(bucket, &q)?;
    let enc = |s: &str| params.encode(s);
    let mut d = format!("<ListBucketResult xmlns=\"{S3_NS}\">");
    element(&mut d, "Name", bucket);
    // S3 does not encode a v1 listing's Prefix, even with `encoding-type=url` (clients, e.g.
    // botocore, decode Delimiter, Marker, NextMarker and keys only).
    element(&mut d, "Prefix", &q.prefix);
    element(&mut d, "Marker", &enc(&marker));
    if page.is_truncated
        && q.delimiter.is_some()
        && let Some(t) = &page.next_continuation_token
    {
        element(&mut d, "NextMarker", &enc(&decode_token(t)?));
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
    render_list_entries(&mut d, &page, enc);
    xml_ok(out, Vec::new(), d)
}
