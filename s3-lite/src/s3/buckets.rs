//! ListBuckets response parsing (`<ListAllMyBucketsResult>`).

use super::error::ParseError;
use super::xml;

/// One bucket of a ListBuckets answer.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketEntry {
    /// The bucket's name, as the server sent it.
    pub name: String,
    /// `CreationDate` (ISO 8601, unparsed).
    pub creation_date: Option<String>,
}

impl BucketEntry {
    /// An entry with a name and an optional creation date.
    pub fn new(name: impl Into<String>, creation_date: Option<String>) -> Self {
        Self {
            name: name.into(),
            creation_date,
        }
    }
}

/// Parses a `<ListAllMyBucketsResult>` body into its buckets, in the server's order. Every
/// `<Bucket>` needs a non-empty `<Name>`.
pub fn parse_list_buckets(body: &[u8]) -> Result<Vec<BucketEntry>, ParseError> {
    let root = xml::parse(body)?;
    if root.name != "ListAllMyBucketsResult" {
        return Err(ParseError::UnexpectedRoot {
            expected: "ListAllMyBucketsResult",
            found: root.name.chars().take(64).collect(),
        });
    }
    let Some(buckets) = root.child("Buckets") else {
        return Ok(Vec::new());
    };
    buckets
        .children_named("Bucket")
        .map(|b| {
            let name = b
                .child_text("Name")
                .filter(|n| !n.is_empty())
                .ok_or(ParseError::MissingElement("Name"))?;
            Ok(BucketEntry {
                name: name.to_owned(),
                creation_date: b.child_text("CreationDate").map(str::to_owned),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_buckets_in_order() {
        let body = br#"<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Owner><ID>o</ID></Owner>
<Buckets><Bucket><Name>b-two</Name><CreationDate>2026-01-02T00:00:00.000Z</CreationDate></Bucket>
<Bucket><Name>a-one</Name></Bucket></Buckets></ListAllMyBucketsResult>"#;
        let got = parse_list_buckets(body).unwrap();
        assert_eq!(
            got,
            vec![
                BucketEntry::new("b-two", Some("2026-01-02T00:00:00.000Z".into())),
                BucketEntry::new("a-one", None),
            ]
        );
    }

    #[test]
    fn empty_missing_and_wrong_documents() {
        assert_eq!(
            parse_list_buckets(b"<ListAllMyBucketsResult><Buckets/></ListAllMyBucketsResult>"),
            Ok(Vec::new())
        );
        assert_eq!(
            parse_list_buckets(b"<ListAllMyBucketsResult></ListAllMyBucketsResult>"),
            Ok(Vec::new())
        );
        assert_eq!(
            parse_list_buckets(
                b"<ListAllMyBucketsResult><Buckets><Bucket><Name></Name></Bucket></Buckets></ListAllMyBucketsResult>"
            ),
            Err(ParseError::MissingElement("Name"))
        );
        assert!(matches!(
            parse_list_buckets(b"<ListBucketResult/>"),
            Err(ParseError::UnexpectedRoot { .. })
        ));
        assert!(parse_list_buckets(b"not xml").is_err());
    }
}
