//! Multipart upload: Create, UploadPart, Complete, Abort builders and their response parsers.

use super::endpoint::{BuildError, Endpoint};
use super::error::{ParseError, ResponseError, error_document, parse_error};
use super::ops::{PutOptions, add_checksums, object_request, query};
use super::xml;
use crate::request::Request;

/// Highest part number S3 accepts (and the most parts an upload may have).
pub const MAX_PARTS: u32 = 10_000;

/// One uploaded part, as Complete lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletedPart {
    /// 1..=10000.
    pub part_number: u32,
    /// The part's `ETag` from its UploadPart response, quotes included.
    pub etag: String,
    /// The part's CRC64NVME (base64), when uploaded with one.
    pub checksum_crc64nvme: Option<String>,
    /// The part's CRC32C (base64), when uploaded with one.
    pub checksum_crc32c: Option<String>,
}

/// The answer to a successful CompleteMultipartUpload.
#[non_exhaustive]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompletedUpload {
    /// `<Location>`.
    pub location: Option<String>,
    /// `<Bucket>`.
    pub bucket: Option<String>,
    /// `<Key>`.
    pub key: Option<String>,
    /// `<ETag>` of the whole object (`"...-N"` for composite uploads).
    pub etag: Option<String>,
    /// `<ChecksumCRC64NVME>`.
    pub checksum_crc64nvme: Option<String>,
    /// `<ChecksumCRC32C>`.
    pub checksum_crc32c: Option<String>,
}

fn check_part_number(n: u32) -> Result<(), BuildError> {
    if (1..=MAX_PARTS).contains(&n) {
        Ok(())
    } else {
        Err(BuildError::InvalidPartNumber(n))
    }
}

/// CreateMultipartUpload: `POST /bucket/key?uploads=`. `opts.checksums` here names the
/// algorithm headers, e.g. `("x-amz-checksum-algorithm", "CRC64NVME")` and
/// `("x-amz-checksum-type", "FULL_OBJECT")`.
pub fn create_multipart_upload(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    opts: &PutOptions,
) -> Result<Request, BuildError> {
    let mut req = object_request(ep, "POST", bucket, key)?;
    req.query = query(&[("uploads", "")]);
    req.add_header("Content-Length", "0");
    if let Some(ct) = &opts.content_type {
        req.add_header("Content-Type", ct.clone());
    }
    add_checksums(&mut req, &opts.checksums)?;
    for (n, v) in &opts.extra_headers {
        req.add_header(n.clone(), v.clone());
    }
    Ok(req)
}

/// UploadPart: `PUT /bucket/key?partNumber=N&uploadId=ID` with `Content-Length`.
pub fn upload_part(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    upload_id: &str,
    part_number: u32,
    content_length: u64,
    checksums: &[(String, String)],
) -> Result<Request, BuildError> {
    check_part_number(part_number)?;
    if upload_id.is_empty() {
        return Err(BuildError::InvalidUploadId);
    }
    let mut req = object_request(ep, "PUT", bucket, key)?;
    req.query = query(&[
        ("partNumber", &part_number.to_string()),
        ("uploadId", upload_id),
    ]);
    req.add_header("Content-Length", content_length.to_string());
    add_checksums(&mut req, checksums)?;
    Ok(req)
}

/// CompleteMultipartUpload: `POST /bucket/key?uploadId=ID` with the part list as XML. Parts
/// must be 1..=10000 of them in strictly ascending part-number order. `checksums` are
/// whole-object headers (e.g. a full-object `x-amz-checksum-crc64nvme`). Returns the request
/// (with `Content-Length` set) and the body.
pub fn complete_multipart_upload(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    upload_id: &str,
    parts: &[CompletedPart],
    checksums: &[(String, String)],
) -> Result<(Request, Vec<u8>), BuildError> {
    if upload_id.is_empty() {
        return Err(BuildError::InvalidUploadId);
    }
    if parts.is_empty() || parts.len() > MAX_PARTS as usize {
        return Err(BuildError::InvalidPartList("need 1..=10000 parts"));
    }
    let mut body =
        String::from("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    let mut previous = 0;
    for part in parts {
        check_part_number(part.part_number)?;
        if part.part_number <= previous {
            return Err(BuildError::InvalidPartList(
                "part numbers must be strictly ascending",
            ));
        }
        previous = part.part_number;
        body.push_str("<Part>");
        if let Some(c) = &part.checksum_crc32c {
            element(&mut body, "ChecksumCRC32C", c);
        }
        if let Some(c) = &part.checksum_crc64nvme {
            element(&mut body, "ChecksumCRC64NVME", c);
        }
        element(&mut body, "ETag", &part.etag);
        element(&mut body, "PartNumber", &part.part_number.to_string());
        body.push_str("</Part>");
    }
    body.push_str("</CompleteMultipartUpload>");
    let mut req = object_request(ep, "POST", bucket, key)?;
    req.query = query(&[("uploadId", upload_id)]);
    req.add_header("Content-Length", body.len().to_string());
    req.add_header("Content-Type", "application/xml");
    add_checksums(&mut req, checksums)?;
    Ok((req, body.into_bytes()))
}

fn element(out: &mut String, name: &str, text: &str) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    xml::escape_text(text, out);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// AbortMultipartUpload: `DELETE /bucket/key?uploadId=ID`.
pub fn abort_multipart_upload(
    ep: &Endpoint,
    bucket: &str,
    key: &str,
    upload_id: &str,
) -> Result<Request, BuildError> {
    if upload_id.is_empty() {
        return Err(BuildError::InvalidUploadId);
    }
    let mut req = object_request(ep, "DELETE", bucket, key)?;
    req.query = query(&[("uploadId", upload_id)]);
    Ok(req)
}

/// Parses `<InitiateMultipartUploadResult>` and returns the (non-empty) upload id.
pub fn parse_initiate_multipart_upload(body: &[u8]) -> Result<String, ParseError> {
    let root = xml::parse(body)?;
    if root.name != "InitiateMultipartUploadResult" {
        return Err(ParseError::UnexpectedRoot {
            expected: "InitiateMultipartUploadResult",
            found: root.name.chars().take(64).collect(),
        });
    }
    root.child_text("UploadId")
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or(ParseError::MissingElement("UploadId"))
}

/// Interprets a CompleteMultipartUpload response. S3 may answer `200 OK` and still fail: it
/// sends the status early, keeps the connection alive with whitespace, then writes an `<Error>`
/// document. So a 200 body is checked for `<Error>` before it is trusted.
pub fn parse_complete_multipart_upload(
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<CompletedUpload, ResponseError> {
    if !(200..300).contains(&status) {
        return Err(ResponseError::S3(Box::new(parse_error(
            status, headers, body,
        ))));
    }
    let root = xml::parse(body)?;
    match root.name.as_str() {
        "CompleteMultipartUploadResult" => {}
        "Error" | "ErrorResponse" => {
            // Validate the document first so a broken <Error> is a parse error, not a guess.
            error_document(&root)?;
            return Err(ResponseError::S3(Box::new(parse_error(
                status, headers, body,
            ))));
        }
        other => {
            return Err(ResponseError::Parse(ParseError::UnexpectedRoot {
                expected: "CompleteMultipartUploadResult",
                found: other.chars().take(64).collect(),
            }));
        }
    }
    let text = |name: &str| root.child_text(name).map(str::to_owned);
    Ok(CompletedUpload {
        location: text("Location"),
        bucket: text("Bucket"),
        key: text("Key"),
        etag: text("ETag"),
        checksum_crc64nvme: text("ChecksumCRC64NVME"),
        checksum_crc32c: text("ChecksumCRC32C"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Endpoint {
        Endpoint::parse("http://127.0.0.1:9000").unwrap()
    }

    #[test]
    fn builders() {
        let r = create_multipart_upload(&local(), "bkt", "k", &PutOptions::default()).unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("POST", "/bkt/k", "uploads=")
        );
        let r = upload_part(&local(), "bkt", "k", "a/b=", 7, 5, &[]).unwrap();
        assert_eq!(r.query, "partNumber=7&uploadId=a%2Fb%3D");
        assert_eq!(r.header("content-length"), Some("5"));
        assert_eq!(
            upload_part(&local(), "bkt", "k", "id", 0, 5, &[]),
            Err(BuildError::InvalidPartNumber(0))
        );
        assert_eq!(
            upload_part(&local(), "bkt", "k", "id", 10_001, 5, &[]),
            Err(BuildError::InvalidPartNumber(10_001))
        );
        assert_eq!(
            upload_part(&local(), "bkt", "k", "", 1, 5, &[]),
            Err(BuildError::InvalidUploadId)
        );
        let r = abort_multipart_upload(&local(), "bkt", "k", "id").unwrap();
        assert_eq!(
            (r.method.as_str(), r.query.as_str()),
            ("DELETE", "uploadId=id")
        );
    }

    #[test]
    fn complete_body() {
        let parts = vec![
            CompletedPart {
                part_number: 1,
                etag: "\"a\"".into(),
                checksum_crc64nvme: Some("Q==".into()),
                checksum_crc32c: None,
            },
            CompletedPart {
                part_number: 3,
                etag: "\"b&c\"".into(),
                ..CompletedPart::default()
            },
        ];
        let (r, body) = complete_multipart_upload(&local(), "bkt", "k", "id", &parts, &[]).unwrap();
        assert_eq!(r.query, "uploadId=id");
        assert_eq!(
            r.header("content-length"),
            Some(body.len().to_string().as_str())
        );
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
             <Part><ChecksumCRC64NVME>Q==</ChecksumCRC64NVME><ETag>\"a\"</ETag><PartNumber>1</PartNumber></Part>\
             <Part><ETag>\"b&amp;c\"</ETag><PartNumber>3</PartNumber></Part></CompleteMultipartUpload>"
        );
        let unordered = vec![parts[1].clone(), parts[0].clone()];
        assert!(matches!(
            complete_multipart_upload(&local(), "bkt", "k", "id", &unordered, &[]),
            Err(BuildError::InvalidPartList(_))
        ));
        assert!(complete_multipart_upload(&local(), "bkt", "k", "id", &[], &[]).is_err());
    }

    #[test]
    fn parses_responses() {
        let init = b"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>VXBsb2FkIElE</UploadId></InitiateMultipartUploadResult>";
        assert_eq!(
            parse_initiate_multipart_upload(init).unwrap(),
            "VXBsb2FkIElE"
        );
        assert_eq!(
            parse_initiate_multipart_upload(
                b"<InitiateMultipartUploadResult><UploadId/></InitiateMultipartUploadResult>"
            ),
            Err(ParseError::MissingElement("UploadId"))
        );
        let ok = b"\n  \n<CompleteMultipartUploadResult><Location>http://h/b/k</Location><Bucket>b</Bucket><Key>k</Key><ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag></CompleteMultipartUploadResult>";
        let done = parse_complete_multipart_upload(200, &[], ok).unwrap();
        assert_eq!(
            done.etag.as_deref(),
            Some("\"3858f62230ac3c915f300c664312c11f-9\"")
        );
        let err200 = b"       <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message><RequestId>656c76696e6727732072657175657374</RequestId><HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId></Error>";
        match parse_complete_multipart_upload(200, &[], err200) {
            Err(ResponseError::S3(e)) => {
                assert_eq!((e.status, e.code.as_str()), (200, "InternalError"));
                assert_eq!(
                    e.request_id.as_deref(),
                    Some("656c76696e6727732072657175657374")
                );
            }
            other => panic!("{other:?}"),
        }
        match parse_complete_multipart_upload(400, &[], b"<Error><Code>InvalidPart</Code></Error>")
        {
            Err(ResponseError::S3(e)) => assert_eq!(e.code, "InvalidPart"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_complete_multipart_upload(200, &[], b"<x"),
            Err(ResponseError::Parse(_))
        ));
    }
}
