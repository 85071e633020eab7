//! ListObjectsV2 response parsing.

use super::error::ParseError;
use super::xml::{self, Element};
use crate::uri;

/// One object of a listing.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectEntry {
    /// The key (URL-decoded when the server used `EncodingType=url`).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// `ETag`, quotes included as sent.
    pub etag: Option<String>,
    /// `LastModified` (ISO 8601, unparsed).
    pub last_modified: Option<String>,
}

impl ObjectEntry {
    /// An entry with just a key and size.
    pub fn new(key: impl Into<String>, size: u64) -> Self {
        Self {
            key: key.into(),
            size,
            etag: None,
            last_modified: None,
        }
    }
}

/// One page of a ListObjectsV2 answer.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListObjectsV2Page {
    /// Objects, in the server's (lexicographic) order.
    pub contents: Vec<ObjectEntry>,
    /// Prefixes rolled up by the delimiter.
    pub common_prefixes: Vec<String>,
    /// Whether another page follows.
    pub is_truncated: bool,
    /// Token for the next page; always present when `is_truncated`.
    pub next_continuation_token: Option<String>,
    /// `KeyCount`, when sent.
    pub key_count: Option<u64>,
}

fn parse_u64(element: &'static str, s: &str) -> Result<u64, ParseError> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::InvalidValue(element));
    }
    s.parse().map_err(|_| ParseError::InvalidValue(element))
}

fn parse_bool(element: &'static str, s: &str) -> Result<bool, ParseError> {
    match s.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ParseError::InvalidValue(element)),
    }
}

/// Parses a `<ListBucketResult>` body. Keys and prefixes are URL-decoded only when the document
/// says `<EncodingType>url</EncodingType>`. A truncated page without a continuation token is an
/// error: following it would loop forever.
pub fn parse_list_objects_v2(body: &[u8]) -> Result<ListObjectsV2Page, ParseError> {
    let root = xml::parse(body)?;
    if root.name != "ListBucketResult" {
        return Err(ParseError::UnexpectedRoot {
            expected: "ListBucketResult",
            found: root.name.chars().take(64).collect(),
        });
    }
    let url_encoded = root
        .child_text("EncodingType")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("url"));
    let decode = |element: &'static str, s: &str| -> Result<String, ParseError> {
        if url_encoded {
            uri::decode_utf8(s).map_err(|_| ParseError::InvalidValue(element))
        } else {
            Ok(s.to_owned())
        }
    };
    let contents = root
        .children_named("Contents")
        .map(|c: &Element| {
            let key = c
                .child_text("Key")
                .ok_or(ParseError::MissingElement("Key"))?;
            Ok(ObjectEntry {
                key: decode("Key", key)?,
                size: match c.child_text("Size") {
                    Some(s) => parse_u64("Size", s)?,
                    None => return Err(ParseError::MissingElement("Size")),
                },
                etag: c.child_text("ETag").map(str::to_owned),
                last_modified: c.child_text("LastModified").map(str::to_owned),
            })
        })
        .collect::<Result<Vec<_>, ParseError>>()?;
    let common_prefixes = root
        .children_named("CommonPrefixes")
        .filter_map(|p| p.child_text("Prefix"))
        .map(|p| decode("Prefix", p))
        .collect::<Result<Vec<_>, ParseError>>()?;
    let is_truncated = match root.child_text("IsTruncated") {
        Some(t) => parse_bool("IsTruncated", t)?,
        None => false,
    };
    let next_continuation_token = root
        .child_text("NextContinuationToken")
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    if is_truncated && next_continuation_token.is_none() {
        return Err(ParseError::MissingElement("NextContinuationToken"));
    }
    let key_count = root
        .child_text("KeyCount")
        .map(|k| parse_u64("KeyCount", k))
        .transpose()?;
    Ok(ListObjectsV2Page {
        contents,
        common_prefixes,
        is_truncated,
        next_continuation_token,
        key_count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_page_with_continuation() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bkt</Name><Prefix>p/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys>
  <IsTruncated>true</IsTruncated><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <Contents><Key>p/a &amp; b.txt</Key><LastModified>2009-10-12T17:50:30.000Z</LastModified><ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag><Size>434234</Size><StorageClass>STANDARD</StorageClass></Contents>
  <Contents><Key>p/c</Key><Size>0</Size></Contents>
  <CommonPrefixes><Prefix>p/d/</Prefix></CommonPrefixes>
</ListBucketResult>"#;
        let page = parse_list_objects_v2(body).unwrap();
        assert_eq!(page.contents.len(), 2);
        assert_eq!(page.contents[0].key, "p/a & b.txt");
        assert_eq!(page.contents[0].size, 434_234);
        assert_eq!(
            page.contents[0].etag.as_deref(),
            Some("\"fba9dede5f27731c9771645a39863328\"")
        );
        assert_eq!(
            page.contents[0].last_modified.as_deref(),
            Some("2009-10-12T17:50:30.000Z")
        );
        assert_eq!(page.contents[1], ObjectEntry::new("p/c", 0));
        assert_eq!(page.common_prefixes, vec!["p/d/".to_owned()]);
        assert!(page.is_truncated);
        assert_eq!(
            page.next_continuation_token.as_deref(),
            Some("1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=")
        );
        assert_eq!(page.key_count, Some(2));
    }

    #[test]
    fn url_encoding_and_errors() {
        let body = b"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>a%20b%2Fc</Key><Size>1</Size></Contents><CommonPrefixes><Prefix>x%2B/</Prefix></CommonPrefixes><IsTruncated>false</IsTruncated></ListBucketResult>";
        let page = parse_list_objects_v2(body).unwrap();
        assert_eq!(page.contents[0].key, "a b/c");
        assert_eq!(page.common_prefixes, vec!["x+/".to_owned()]);
        let empty =
            parse_list_objects_v2(b"<ListBucketResult><KeyCount>0</KeyCount></ListBucketResult>")
                .unwrap();
        assert_eq!(
            empty,
            ListObjectsV2Page {
                key_count: Some(0),
                ..ListObjectsV2Page::default()
            }
        );
        for (bad, want) in [
            (&b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>"[..], ParseError::MissingElement("NextContinuationToken")),
            (b"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>", ParseError::InvalidValue("IsTruncated")),
            (b"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", ParseError::MissingElement("Key")),
            (b"<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>", ParseError::InvalidValue("Size")),
            (b"<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>", ParseError::MissingElement("Size")),
            (b"<ListBucketResult><EncodingType>url</EncodingType><Contents><Key>%zz</Key><Size>1</Size></Contents></ListBucketResult>", ParseError::InvalidValue("Key")),
        ] {
            assert_eq!(parse_list_objects_v2(bad), Err(want));
        }
        assert!(matches!(
            parse_list_objects_v2(b"<Error><Code>X</Code></Error>"),
            Err(ParseError::UnexpectedRoot { .. })
        ));
    }
}
