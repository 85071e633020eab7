//! A small, bounded XML reader for S3 response bodies, on quick-xml.
//!
//! S3 bodies are small documents read once, so they are parsed into an owned tree and queried by
//! element name. Bounds: 1 MiB of input ([`MAX_XML_BYTES`]), 32 levels of nesting. Entity
//! references are resolved (the five predefined ones and character references); anything else —
//! a DOCTYPE, an unknown entity, mismatched tags, invalid UTF-8 — is a typed error, never a panic.
//! Namespaces are ignored: elements are matched by local name.

use quick_xml::events::Event;
use quick_xml::reader::Reader;

use super::error::ParseError;

/// Largest XML body accepted (S3's own documents are far smaller).
pub const MAX_XML_BYTES: usize = 1 << 20;

/// Longest parser message kept in [`ParseError::Malformed`] (it may quote the body).
const MAX_MESSAGE_BYTES: usize = 200;

/// Deepest element nesting accepted.
const MAX_DEPTH: usize = 32;

/// An element: local name, the concatenation of its own text (children's text excluded), and
/// its child elements in document order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Element {
    pub(crate) name: String,
    pub(crate) text: String,
    pub(crate) children: Vec<Element>,
}

impl Element {
    /// First child called `name`.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// Every child called `name`.
    pub(crate) fn children_named<'s>(
        &'s self,
        name: &'s str,
    ) -> impl Iterator<Item = &'s Element> + 's {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// Text of the first child called `name`.
    pub(crate) fn child_text(&self, name: &str) -> Option<&str> {
        self.child(name).map(|c| c.text.as_str())
    }
}

fn local_name(raw: &[u8]) -> Result<String, ParseError> {
    let local = match raw.iter().rposition(|&b| b == b':') {
        Some(i) => raw.get(i + 1..).unwrap_or_default(),
        None => raw,
    };
    std::str::from_utf8(local)
        .map(str::to_owned)
        .map_err(|_| ParseError::Malformed("element name is not UTF-8".into()))
}

fn malformed(e: impl std::fmt::Display) -> ParseError {
    let mut msg = e.to_string();
    // The message can quote the server's bytes: cut on a character boundary, never inside one.
    msg.truncate(msg.floor_char_boundary(MAX_MESSAGE_BYTES));
    ParseError::Malformed(msg)
}

/// Parses `body` into its root element. Leading whitespace (S3 pads long-running Complete
/// responses with it) is skipped.
pub(crate) fn parse(body: &[u8]) -> Result<Element, ParseError> {
    if body.len() > MAX_XML_BYTES {
        return Err(ParseError::TooLarge {
            limit: MAX_XML_BYTES,
            actual: body.len(),
        });
    }
    let start = body
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(body.len());
    let mut reader = Reader::from_reader(body.get(start..).unwrap_or_default());
    reader.config_mut().check_end_names = true;
    let mut stack: Vec<Element> = Vec::new();
    let mut root: Option<Element> = None;
    loop {
        let event = reader.read_event().map_err(malformed)?;
        match event {
            Event::Start(_) | Event::Empty(_) if root.is_some() && stack.is_empty() => {
                return Err(ParseError::Malformed("more than one root element".into()));
            }
            Event::Start(e) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(ParseError::TooDeep { limit: MAX_DEPTH });
                }
                stack.push(Element {
                    name: local_name(e.name().as_ref())?,
                    ..Element::default()
                });
            }
            Event::Empty(e) => {
                let element = Element {
                    name: local_name(e.name().as_ref())?,
                    ..Element::default()
                };
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            }
            Event::End(_) => {
                let element = stack
                    .pop()
                    .ok_or_else(|| ParseError::Malformed("unmatched end tag".into()))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => root = Some(element),
                }
            }
            Event::Text(t) => {
                let text = t.xml10_content().map_err(malformed)?;
                push_text(&mut stack, &text)?;
            }
            Event::CData(c) => {
                let text = c.decode().map_err(malformed)?;
                push_text(&mut stack, &text)?;
            }
            Event::GeneralRef(r) => {
                let resolved = match r.resolve_char_ref().map_err(malformed)? {
                    Some(ch) => ch.to_string(),
                    None => {
                        let name = r.decode().map_err(malformed)?;
                        quick_xml::escape::resolve_xml_entity(&name)
                            .ok_or_else(|| {
                                ParseError::Malformed("unknown entity reference".into())
                            })?
                            .to_owned()
                    }
                };
                push_text(&mut stack, &resolved)?;
            }
            Event::DocType(_) => {
                return Err(ParseError::Malformed("DOCTYPE is not accepted".into()));
            }
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    if !stack.is_empty() {
        return Err(ParseError::Malformed("unclosed element".into()));
    }
    root.ok_or_else(|| ParseError::Malformed("no root element".into()))
}

/// Appends text to the open element; non-whitespace text outside the root is an error.
fn push_text(stack: &mut [Element], text: &str) -> Result<(), ParseError> {
    // NUL is not an XML character in any form (quick-xml already refuses `&#0;`).
    if text.contains('\0') {
        return Err(ParseError::Malformed("NUL character in text".into()));
    }
    match stack.last_mut() {
        Some(e) => {
            e.text.push_str(text);
            Ok(())
        }
        None if text.trim().is_empty() => Ok(()),
        None => Err(ParseError::Malformed(
            "text outside the root element".into(),
        )),
    }
}

/// Escapes text for an XML element body (`&`, `<`, `>`, and control characters as character
/// references so they survive a round trip, `\r` included).
pub(crate) fn escape_text(s: &str, out: &mut String) {
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("&#{};", c as u32)),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_with_entities_cdata_and_namespaces() {
        let doc = br#"  <?xml version="1.0" encoding="UTF-8"?>
<s3:R xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/"><A>x &amp; y &lt;&#65;&#x42;&gt;</A><B/><A><![CDATA[<raw>]]></A><!-- c --></s3:R>"#;
        let root = parse(doc).unwrap();
        assert_eq!(root.name, "R");
        assert_eq!(root.child_text("A"), Some("x & y <AB>"));
        assert_eq!(root.children_named("A").nth(1).unwrap().text, "<raw>");
        assert_eq!(root.child_text("B"), Some(""));
    }

    #[test]
    fn malformed_inputs_are_typed_errors() {
        for bad in [
            &b"<a><b></a>"[..],
            b"<a>",
            b"",
            b"<a>&foo;</a>",
            b"<a>&#0;</a>",
            b"<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>",
            b"<a/><b/>",
            b"text<a/>",
            b"<a>\xff</a>",
            b"<a><![CDATA[\0]]></a>",
            b"<a>\0</a>",
            b"</a>",
        ] {
            assert!(
                matches!(parse(bad), Err(ParseError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = "<a>".repeat(40) + &"</a>".repeat(40);
        assert_eq!(
            parse(deep.as_bytes()),
            Err(ParseError::TooDeep { limit: MAX_DEPTH })
        );
        let big = vec![b' '; MAX_XML_BYTES + 1];
        assert_eq!(
            parse(&big),
            Err(ParseError::TooLarge {
                limit: MAX_XML_BYTES,
                actual: MAX_XML_BYTES + 1
            })
        );
    }

    #[test]
    fn escape_round_trips() {
        let s = "a&b<c>d\r\n\t\u{1}\"'é";
        let mut doc = String::from("<x>");
        escape_text(s, &mut doc);
        doc.push_str("</x>");
        assert_eq!(parse(doc.as_bytes()).unwrap().text, s);
    }
}
