//! An upstream response passed to the client unchanged: its status, its headers (less the
//! hop-by-hop ones, which belong to each connection) and its body bytes, streamed as they
//! arrive when the upstream announced a length, else collected (bounded) and sent with one.

use s3_lite::http::{BodyFraming, ResponseHead};

use crate::error::ApiError;
use crate::handler::Respond;

/// Largest response body collected when the upstream did not announce its length (chunked
/// or until-close answers: listings and other small documents in practice).
pub const MAX_UNSIZED_BODY: usize = 8 << 20;

/// Headers of one hop that are never relayed (RFC 9110 §7.6.1), and the framing headers the
/// client connection writes itself.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Whether a header of an upstream response is relayed to the client.
pub fn relayed_response_header(name: &str) -> bool {
    !HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// The upstream answer on its way to the client.
pub struct Relay<'o> {
    out: &'o mut dyn Respond,
    head_request: bool,
    /// A head held back until the body is complete (the upstream sent no length).
    held: Option<(u16, Vec<(String, String)>)>,
    collected: Vec<u8>,
}

impl<'o> Relay<'o> {
    /// Relays to `out`; `head_request` when the request was a HEAD (no body follows).
    pub fn new(out: &'o mut dyn Respond, head_request: bool) -> Self {
        Self {
            out,
            head_request,
            held: None,
            collected: Vec::new(),
        }
    }

    /// The upstream's head arrived.
    pub fn head(&mut self, h: &ResponseHead) -> Result<(), ApiError> {
        let headers: Vec<(String, String)> = h
            .headers
            .iter()
            .filter(|(n, _)| relayed_response_header(n))
            .cloned()
            .collect();
        let announced = h
            .header("content-length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        let framing = match h.framing {
            BodyFraming::Length(n) => BodyFraming::Length(n),
            // A HEAD (or 304) answer announces the length of the body it stands for; the
            // client connection writes that header for a HEAD request.
            BodyFraming::None if self.head_request => BodyFraming::Length(announced.unwrap_or(0)),
            BodyFraming::None => {
                let mut headers = headers;
                if let Some(n) = announced {
                    headers.push(("Content-Length".into(), n.to_string()));
                }
                self.out.head(h.status, headers, BodyFraming::None)?;
                return Ok(());
            }
            _ => {
                // Chunked or until-close: the length is known only at the end.
                self.held = Some((h.status, headers));
                return Ok(());
            }
        };
        self.out.head(h.status, headers, framing)?;
        Ok(())
    }

    /// Body bytes of the upstream answer, in order.
    pub fn data(&mut self, bytes: &[u8]) -> Result<(), ApiError> {
        if self.held.is_none() {
            self.out.body(bytes)?;
            return Ok(());
        }
        if self.collected.len() + bytes.len() > MAX_UNSIZED_BODY {
            return Err(ApiError::new(
                502,
                "BadGateway",
                format!(
                    "upstream S3 store: an answer without Content-Length exceeds {MAX_UNSIZED_BODY} bytes"
                ),
            ));
        }
        self.collected.extend_from_slice(bytes);
        Ok(())
    }

    /// The upstream answer ended: a held head goes out now with the collected body.
    pub fn end(&mut self) -> Result<(), ApiError> {
        if let Some((status, headers)) = self.held.take() {
            let body = std::mem::take(&mut self.collected);
            self.out
                .head(status, headers, BodyFraming::Length(body.len() as u64))?;
            self.out.body(&body)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay_behind() {
        assert!(!relayed_response_header("Transfer-Encoding"));
        assert!(!relayed_response_header("connection"));
        assert!(!relayed_response_header("Content-Length"));
        assert!(relayed_response_header("ETag"));
        assert!(relayed_response_header("x-amz-checksum-crc32"));
        assert!(relayed_response_header("Content-Type"));
    }
}
