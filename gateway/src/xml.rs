//! XML in and out: escaping for the documents the gateway writes, and a bounded parser for
//! the documents it reads (`CompleteMultipartUpload`, `Delete`).

use quick_xml::Reader;
use quick_xml::events::Event;

use crate::error::ApiError;

/// Largest XML request body accepted (S3's own limit for Complete is about 1 MiB of parts).
pub const MAX_XML_BODY: usize = 2 << 20;

/// Escapes `s` for element text: `&`, `<`, `>`, `"`, and control characters other than LF and
/// TAB as character references (S3 does the same; clients that need exact control bytes ask for
/// `encoding-type=url`).
pub fn escape(s: &str, out: &mut String) {
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c if ((c as u32) < 0x20 && c != '\n' && c != '\t') || c == '\u{7f}' => {
                out.push_str(&format!("&#{};", c as u32))
            }
            c => out.push(c),
        }
    }
}

/// Appends `<name>escaped text</name>`.
pub fn element(out: &mut String, name: &str, text: &str) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    escape(text, out);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// One `<Part>` of a CompleteMultipartUpload request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestedPart {
    /// `<PartNumber>`.
    pub part_number: u32,
    /// `<ETag>` as sent (quotes optional).
    pub etag: String,
    /// `<ChecksumCRC64NVME>`, when sent.
    pub checksum_crc64nvme: Option<String>,
    /// `<ChecksumCRC32C>`, when sent.
    pub checksum_crc32c: Option<String>,
    /// `<ChecksumCRC32>`, when sent.
    pub checksum_crc32: Option<String>,
    /// `<ChecksumSHA1>`, when sent.
    pub checksum_sha1: Option<String>,
    /// `<ChecksumSHA256>`, when sent.
    pub checksum_sha256: Option<String>,
}

pub fn malformed(what: impl std::fmt::Display) -> ApiError {
    let mut m = what.to_string();
    // The message can quote the client's bytes: cut on a character boundary, never inside one.
    m.truncate(m.floor_char_boundary(200));
    ApiError::new(
        400,
        "MalformedXML",
        format!("The XML you provided was not well-formed: {m}"),
    )
}

/// What [`visit`] reports while walking a request document.
#[derive(Debug)]
pub enum Node<'a> {
    /// An element opened; `path` holds its ancestors (the root's is empty).
    Open { path: &'a [String], name: &'a str },
    /// An element closed with its text (entities resolved, untrimmed); `path` holds its
    /// ancestors.
    Close {
        path: &'a [String],
        name: &'a str,
        text: &'a str,
    },
}

/// Walks a small request document whose root element must be `root`: at most 8 levels,
/// DOCTYPE refused, only the predefined entities and character references, element text at
/// most 4 KiB. Errors are S3's `MalformedXML`.
pub fn visit(
    body: &[u8],
    root: &str,
    mut on: impl FnMut(Node<'_>) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    if body.len() > MAX_XML_BODY {
        return Err(malformed("body too large"));
    }
    let mut reader = Reader::from_reader(body);
    reader.config_mut().check_end_names = true;
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut saw_root = false;
    loop {
        match reader.read_event().map_err(malformed)? {
            Event::Start(e) => {
                let raw = e.name();
                let name = String::from_utf8_lossy(raw.local_name().as_ref()).into_owned();
                if path.is_empty() {
                    if name != root || saw_root {
                        return Err(malformed(format!("root element must be {root}")));
                    }
                    saw_root = true;
                }
                if path.len() >= 8 {
                    return Err(malformed("too deep"));
                }
                on(Node::Open {
                    path: &path,
                    name: &name,
                })?;
                path.push(name);
                text.clear();
            }
            Event::Empty(e) => {
                let raw = e.name();
                let name = String::from_utf8_lossy(raw.local_name().as_ref()).into_owned();
                if path.is_empty() {
                    return Err(malformed("empty document"));
                }
                on(Node::Open {
                    path: &path,
                    name: &name,
                })?;
                on(Node::Close {
                    path: &path,
                    name: &name,
                    text: "",
                })?;
            }
            Event::End(_) => {
                let name = path.pop().unwrap_or_default();
                on(Node::Close {
                    path: &path,
                    name: &name,
                    text: &text,
                })?;
                text.clear();
            }
            Event::Text(t) => {
                let s = t.xml10_content().map_err(malformed)?;
                if text.len() + s.len() > 4096 {
                    return Err(malformed("element text too long"));
                }
                text.push_str(&s);
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref().map_err(malformed)? {
                    Some(ch) => ch.to_string(),
                    None => {
                        let name = r.decode().map_err(malformed)?;
                        quick_xml::escape::resolve_xml_entity(&name)
                            .ok_or_else(|| malformed("unknown entity"))?
                            .to_owned()
                    }
                };
                text.push_str(&resolved);
            }
            Event::CData(c) => text.push_str(&c.decode().map_err(malformed)?),
            Event::DocType(_) => return Err(malformed("DOCTYPE is not accepted")),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    if !saw_root || !path.is_empty() {
        return Err(malformed("incomplete document"));
    }
    Ok(())
}

/// Parses a `<CompleteMultipartUpload>` body into its parts, in document order. At most
/// 10 000 parts.
pub fn parse_complete(body: &[u8]) -> Result<Vec<RequestedPart>, ApiError> {
    let mut parts: Vec<RequestedPart> = Vec::new();
    visit(body, "CompleteMultipartUpload", |node| {
        match node {
            Node::Open { path, name } if path.len() == 1 && name == "Part" => {
                if parts.len() >= s3_lite::s3::MAX_PARTS as usize {
                    return Err(malformed("more than 10000 parts"));
                }
                parts.push(RequestedPart::default());
            }
            Node::Close { path, name, text }
                if path.len() == 2 && path.get(1).map(String::as_str) == Some("Part") =>
            {
                let value = text.trim().to_owned();
                if let Some(part) = parts.last_mut() {
                    match name {
                        "PartNumber" => {
                            part.part_number = value
                                .parse()
                                .map_err(|_| malformed("PartNumber is not a number"))?;
                        }
                        "ETag" => part.etag = value,
                        "ChecksumCRC64NVME" => part.checksum_crc64nvme = Some(value),
                        "ChecksumCRC32C" => part.checksum_crc32c = Some(value),
                        "ChecksumCRC32" => part.checksum_crc32 = Some(value),
                        "ChecksumSHA1" => part.checksum_sha1 = Some(value),
                        "ChecksumSHA256" => part.checksum_sha256 = Some(value),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_parts_and_refuses_junk() {
        let body = br#"<?xml version="1.0"?><CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>&quot;abc&quot;</ETag><PartNumber>1</PartNumber><ChecksumCRC64NVME>AAAAAAAAAAA=</ChecksumCRC64NVME></Part><Part><PartNumber>3</PartNumber><ETag>"d"</ETag></Part></CompleteMultipartUpload>"#;
        let parts = parse_complete(body).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].etag, "\"abc\"");
        assert_eq!(parts[0].checksum_crc64nvme.as_deref(), Some("AAAAAAAAAAA="));
        assert_eq!((parts[1].part_number, parts[1].etag.as_str()), (3, "\"d\""));
        assert!(parse_complete(b"<Other/>").is_err());
        assert!(parse_complete(b"<!DOCTYPE x><CompleteMultipartUpload/>").is_err());
        assert!(parse_complete(b"<CompleteMultipartUpload><Part>").is_err());
        let mut out = String::new();
        escape("a<&>\"\u{1}", &mut out);
        assert_eq!(out, "a&lt;&amp;&gt;&quot;&#1;");
    }

    /// A parser message that quotes multi-byte text is cut on a character boundary (cutting at
    /// byte 200 inside a character panicked: the s3-lite fuzz finding, same code here).
    #[test]
    fn long_multibyte_error_message_is_cut_on_a_char_boundary() {
        for pad in ["", "a"] {
            let name = format!("{pad}{}", "\u{e9}".repeat(150));
            let body = format!("<CompleteMultipartUpload><{name}></x></CompleteMultipartUpload>");
            let err = parse_complete(body.as_bytes()).unwrap_err();
            assert_eq!(err.status, 400);
        }
    }
}
