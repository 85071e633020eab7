//! Fuzz bodies for the S3 XML parsers.
//!
//! Beyond "never panics", each body checks a round trip: whatever a parser accepts is written
//! back out with a tiny XML writer and must parse to the same value.

use crate::s3::{
    BucketEntry, ListObjectsV2Page, ParseError, parse_error, parse_error_xml, parse_list_buckets,
    parse_list_objects_v2,
};

/// A rejection's message is bounded (it may quote the body) and cut on a character boundary
/// (being a `String` it cannot be otherwise; cutting inside a character used to panic).
fn check_rejection(e: &ParseError) {
    if let ParseError::Malformed(m) = e {
        // `ParseError::Malformed` documents its message as truncated to 200 bytes.
        assert!(m.len() <= 200, "message of {} bytes", m.len());
    }
    assert!(!e.to_string().is_empty());
}

/// Escapes text so that it parses back to exactly `s` (control characters, `\r` included, as
/// character references).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("&#{};", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn element(out: &mut String, name: &str, text: Option<&str>) {
    if let Some(t) = text {
        out.push_str(&format!("<{name}>{}</{name}>", escape(t)));
    }
}

/// Writes a ListObjectsV2 page back as a `<ListBucketResult>` document.
fn write_list(page: &ListObjectsV2Page) -> String {
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult>");
    // XML cannot carry NUL even as a character reference; S3's answer is `EncodingType=url`.
    let url = page
        .contents
        .iter()
        .map(|c| c.key.as_str())
        .chain(page.common_prefixes.iter().map(String::as_str))
        .any(|t| t.contains('\0'));
    let name = |t: &str| {
        if url {
            crate::uri::encode_component(t)
        } else {
            t.to_owned()
        }
    };
    if url {
        element(&mut out, "EncodingType", Some("url"));
    }
    element(
        &mut out,
        "IsTruncated",
        Some(if page.is_truncated { "true" } else { "false" }),
    );
    element(
        &mut out,
        "NextContinuationToken",
        page.next_continuation_token.as_deref(),
    );
    element(
        &mut out,
        "KeyCount",
        page.key_count.map(|k| k.to_string()).as_deref(),
    );
    for c in &page.contents {
        out.push_str("<Contents>");
        element(&mut out, "Key", Some(&name(&c.key)));
        element(&mut out, "Size", Some(&c.size.to_string()));
        element(&mut out, "ETag", c.etag.as_deref());
        element(&mut out, "LastModified", c.last_modified.as_deref());
        out.push_str("</Contents>");
    }
    for p in &page.common_prefixes {
        out.push_str("<CommonPrefixes>");
        element(&mut out, "Prefix", Some(&name(p)));
        out.push_str("</CommonPrefixes>");
    }
    out.push_str("</ListBucketResult>");
    out
}

/// Fuzz body: S3 error XML. `parse_error` must never fail or panic and must print one line;
/// an accepted `<Error>` document must survive a write/re-parse round trip.
pub fn error_xml(data: &[u8]) {
    let status = 400 + u16::from(data.first().copied().unwrap_or(0) % 200);
    let e = parse_error(status, &[], data);
    assert!(!e.code.is_empty());
    assert_eq!(e.status, status);
    assert!(!e.to_string().is_empty());
    let parsed = parse_error_xml(data);
    if let Err(e) = &parsed {
        check_rejection(e);
    }
    if let Ok(doc) = parsed {
        let mut out = String::from("<Error>");
        element(&mut out, "Code", Some(&doc.code));
        element(&mut out, "Message", doc.message.as_deref());
        element(&mut out, "Resource", doc.resource.as_deref());
        element(&mut out, "RequestId", doc.request_id.as_deref());
        element(&mut out, "HostId", doc.host_id.as_deref());
        out.push_str("</Error>");
        assert_eq!(
            parse_error_xml(out.as_bytes()),
            Ok(doc.clone()),
            "round trip of {out}"
        );
        assert_eq!(e.code, doc.code);
    }
}

/// Fuzz body: ListObjectsV2 pages; accepted pages round-trip through the writer.
pub fn list_objects_v2(data: &[u8]) {
    let parsed = parse_list_objects_v2(data);
    if let Err(e) = &parsed {
        check_rejection(e);
    }
    if let Ok(page) = parsed {
        let out = write_list(&page);
        assert_eq!(
            parse_list_objects_v2(out.as_bytes()),
            Ok(page),
            "round trip of {out}"
        );
    }
}

/// Writes buckets back as a `<ListAllMyBucketsResult>` document.
fn write_buckets(buckets: &[BucketEntry]) -> String {
    let mut out = String::from("<ListAllMyBucketsResult><Buckets>");
    for b in buckets {
        out.push_str("<Bucket>");
        element(&mut out, "Name", Some(&b.name));
        element(&mut out, "CreationDate", b.creation_date.as_deref());
        out.push_str("</Bucket>");
    }
    out.push_str("</Buckets></ListAllMyBucketsResult>");
    out
}

/// Fuzz body: ListBuckets answers; accepted ones round-trip through the writer.
pub fn list_buckets(data: &[u8]) {
    if let Ok(buckets) = parse_list_buckets(data) {
        let out = write_buckets(&buckets);
        assert_eq!(
            parse_list_buckets(out.as_bytes()),
            Ok(buckets),
            "round trip of {out}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_xml_seeds() {
        let mut parsed = 0;
        for (name, data) in crate::fuzzing::seeds("error_xml", 3) {
            println!("{name}");
            error_xml(&data);
            parsed += usize::from(parse_error_xml(&data).is_ok());
        }
        assert!(parsed >= 3, "most error seeds are valid documents");
    }

    #[test]
    fn list_objects_v2_seeds() {
        let mut parsed = 0;
        for (name, data) in crate::fuzzing::seeds("list_objects_v2", 3) {
            println!("{name}");
            list_objects_v2(&data);
            parsed += usize::from(parse_list_objects_v2(&data).is_ok());
        }
        assert!(parsed >= 3, "most list seeds are valid pages");
    }

    #[test]
    fn list_buckets_seeds() {
        let mut parsed = 0;
        for (name, data) in crate::fuzzing::seeds("list_buckets", 2) {
            println!("{name}");
            list_buckets(&data);
            parsed += usize::from(parse_list_buckets(&data).is_ok());
        }
        assert!(parsed >= 2, "the bucket-list seeds are valid documents");
    }

    #[test]
    fn nul_in_a_url_encoded_key_round_trips() {
        // Found by the fuzzer: `%00` decodes to NUL, which plain XML cannot carry.
        list_objects_v2(
            b"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>ctl%00key</Key><Size>1</Size></Contents></ListBucketResult>",
        );
    }

    #[test]
    fn writer_round_trips_awkward_text() {
        let page = parse_list_objects_v2(
            b"<ListBucketResult><Contents><Key>a&#13;&#10;b &amp; &lt;c&gt; \xc3\xa9</Key><Size>1</Size></Contents></ListBucketResult>",
        )
        .unwrap();
        assert_eq!(page.contents[0].key, "a\r\nb & <c> é");
        list_objects_v2(write_list(&page).as_bytes());
    }
}
