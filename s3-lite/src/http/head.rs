//! The response head: an incremental scanner that finds its end under hard limits, and the
//! httparse-based parse of a complete head into [`ResponseHead`].
//!
//! The scanner looks at each byte once, in order, so every limit fires at the same byte however
//! the input is split across reads; httparse then only ever sees a complete head.

use super::error::{HttpError, Malformed};
use super::framing::{self, BodyFraming};
use super::limits::Limits;

/// A parsed response status line and header block.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// Status code, 100..=999 (httparse takes any three digits; below 100 is refused).
    pub status: u16,
    /// Reason phrase (may be empty; lossily decoded if it had non-UTF-8 bytes).
    pub reason: String,
    /// `0` for HTTP/1.0, `1` for HTTP/1.1.
    pub version_minor: u8,
    /// Header fields in wire order; names keep the server's case. Non-UTF-8 bytes in a value
    /// are replaced with U+FFFD.
    pub headers: Vec<(String, String)>,
    /// How the body is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may carry another request after this response ends.
    pub keep_alive: bool,
}

impl ResponseHead {
    /// First value of `name`, matched case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Content-Length` the server declared, also for HEAD responses whose framing is
    /// [`BodyFraming::None`] (that is where HeadObject reports the object size). The decoder
    /// has already rejected malformed or conflicting values.
    pub fn content_length(&self) -> Option<u64> {
        framing::content_length(&self.headers).ok().flatten()
    }

    /// Whether the status is 1xx (interim).
    pub fn is_informational(&self) -> bool {
        (100..200).contains(&self.status)
    }
}

/// Byte-at-a-time search for the end of a head, enforcing the head limits as it goes.
///
/// INVARIANT: `total <= limits.max_head_bytes` and `line_len <= limits.max_line_bytes` after
/// every successful `scan`.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeadScanner {
    /// Bytes of the head seen so far.
    total: usize,
    /// Bytes of the current line before its `\n`.
    line_len: usize,
    /// Whether the current line so far is exactly `\r`.
    line_is_cr: bool,
    /// Non-empty lines completed (status line + headers).
    lines: usize,
}

impl HeadScanner {
    /// Scans `input`; returns `Ok(Some(n))` when the head ends after `input[..n]`, `Ok(None)`
    /// when all of `input` belongs to a still-incomplete head.
    pub(crate) fn scan(
        &mut self,
        input: &[u8],
        limits: &Limits,
    ) -> Result<Option<usize>, HttpError> {
        // Line at a time: find the next LF (a tight loop the compiler vectorises), then apply
        // the limits to the whole line, so the cost is per line rather than per byte.
        let mut pos = 0;
        while pos < input.len() {
            let rest = input.get(pos..).unwrap_or_default();
            let (piece, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (rest.get(..i).unwrap_or_default(), true),
                None => (rest, false),
            };
            // The piece is this line's bytes plus its LF, if it came.
            let piece_total = piece.len() + usize::from(ends_line);
            self.check_limits(piece.len(), piece_total, limits)?;
            self.total += piece_total;
            if let Some(&first) = piece.first() {
                self.line_is_cr = self.line_len == 0 && first == b'\r' && piece.len() == 1;
                self.line_len += piece.len();
            }
            pos += piece_total;
            if !ends_line {
                break;
            }
            let empty = self.line_len == 0 || self.line_is_cr;
            self.line_len = 0;
            self.line_is_cr = false;
            if empty {
                // Empty lines before the status line are skipped (as httparse does).
                if self.lines > 0 {
                    return Ok(Some(pos));
                }
                continue;
            }
            self.lines += 1;
            if self.lines > limits.max_headers.saturating_add(1) {
                return Err(HttpError::TooManyHeaders {
                    limit: limits.max_headers,
                });
            }
        }
        Ok(None)
    }
}

impl HeadScanner {
    /// Applies the head-size and line-length limits to the next `piece_total` bytes, of which
    /// the first `line_bytes` extend the current line (the rest is its LF).
    ///
    /// The error is a function of the bytes alone, however they are split across reads: it is
    /// the limit crossed at the *earliest byte*, and where both are crossed at the same byte the
    /// head-size limit wins (as if each byte were checked on its own, head size first).
    fn check_limits(
        &self,
        line_bytes: usize,
        piece_total: usize,
        limits: &Limits,
    ) -> Result<(), HttpError> {
        // Index in the piece of the first byte over each limit, if any byte is.
        let head_room = limits.max_head_bytes.saturating_sub(self.total);
        let head_over = (piece_total > head_room).then_some(head_room);
        let line_room = limits.max_line_bytes.saturating_sub(self.line_len);
        let line_over = (line_bytes > line_room).then_some(line_room);
        match (head_over, line_over) {
            (Some(h), Some(l)) if l < h => Err(HttpError::LineTooLong {
                limit: limits.max_line_bytes,
            }),
            (Some(_), _) => Err(HttpError::HeadTooLarge {
                limit: limits.max_head_bytes,
            }),
            (None, Some(_)) => Err(HttpError::LineTooLong {
                limit: limits.max_line_bytes,
            }),
            (None, None) => Ok(()),
        }
    }
}

/// Runs `f` with `max` empty `httparse` header slots (for a request or a response head): on
/// the stack for the usual limit, on the heap only for larger configured limits.
pub(crate) fn with_header_slots<'b, R>(
    max: usize,
    f: impl FnOnce(&mut [httparse::Header<'b>]) -> R,
) -> R {
    let mut stack: [httparse::Header<'b>; 128] = [httparse::EMPTY_HEADER; 128];
    match stack.get_mut(..max) {
        Some(slots) => f(slots),
        None => f(&mut vec![httparse::EMPTY_HEADER; max]),
    }
}

/// Judges `httparse`'s result for a complete head of `len` bytes: it must be exactly one
/// complete head within the header limit.
pub(crate) fn check_parsed(
    parsed: httparse::Result<usize>,
    len: usize,
    limits: &Limits,
) -> Result<(), HttpError> {
    match parsed {
        Ok(httparse::Status::Complete(n)) if n == len => Ok(()),
        Ok(_) => Err(HttpError::Malformed(Malformed::Framing)),
        Err(httparse::Error::TooManyHeaders) => Err(HttpError::TooManyHeaders {
            limit: limits.max_headers,
        }),
        Err(e) => Err(HttpError::Malformed(e.into())),
    }
}

/// Header fields as owned `(name, value)` pairs (a non-UTF-8 value is kept lossily).
pub(crate) fn owned_headers(headers: &[httparse::Header<'_>]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            (
                h.name.to_owned(),
                String::from_utf8_lossy(h.value).into_owned(),
            )
        })
        .collect()
}

/// Parses a complete head (as delimited by [`HeadScanner`]) and derives its framing.
pub(crate) fn parse_head(
    buf: &[u8],
    limits: &Limits,
    method_is_head: bool,
) -> Result<ResponseHead, HttpError> {
    with_header_slots(limits.max_headers, |slots| {
        let mut resp = httparse::Response::new(slots);
        check_parsed(resp.parse(buf), buf.len(), limits)?;
        head_of(&resp, method_is_head)
    })
}

/// The owned head of a parsed response, with its framing.
fn head_of(
    resp: &httparse::Response<'_, '_>,
    method_is_head: bool,
) -> Result<ResponseHead, HttpError> {
    let (Some(status), Some(version_minor)) = (resp.code, resp.version) else {
        return Err(HttpError::Malformed(Malformed::Status));
    };
    // httparse takes any three digits; a status below 100 (`000`, `099`) has no class.
    if status < 100 {
        return Err(HttpError::Malformed(Malformed::Status));
    }
    let reason = resp.reason.unwrap_or_default().to_owned();
    let headers = owned_headers(resp.headers);
    if status == 101 {
        return Err(HttpError::SwitchingProtocols);
    }
    let framing = framing::response_framing(status, method_is_head, &headers)?;
    let keep_alive = framing::keep_alive(version_minor, framing, &headers);
    Ok(ResponseHead {
        status,
        reason,
        version_minor,
        headers,
        framing,
        keep_alive,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanner_finds_end_and_skips_leading_empty_lines() {
        let l = Limits::default();
        let mut s = HeadScanner::default();
        assert_eq!(
            s.scan(b"\r\n\nHTTP/1.1 200 OK\r\nA: b\r\n\r\nbody", &l),
            Ok(Some(28))
        );
        let mut s = HeadScanner::default();
        assert_eq!(s.scan(b"HTTP/1.1 200 OK\n\nx", &l), Ok(Some(17)));
        let mut s = HeadScanner::default();
        assert_eq!(s.scan(b"HTTP/1.1 200 OK\r\n\r", &l), Ok(None));
        assert_eq!(s.scan(b"\n", &l), Ok(Some(1)));
    }

    #[test]
    fn scanner_limits() {
        let l = Limits {
            max_head_bytes: 40,
            max_line_bytes: 20,
            max_headers: 2,
            ..Limits::default()
        };
        let mut s = HeadScanner::default();
        assert_eq!(
            s.scan(&[b'a'; 21], &l),
            Err(HttpError::LineTooLong { limit: 20 })
        );
        let mut s = HeadScanner::default();
        assert_eq!(
            s.scan(b"a\nb\nc\nd\n", &l),
            Err(HttpError::TooManyHeaders { limit: 2 })
        );
        let mut s = HeadScanner::default();
        assert_eq!(s.scan(b"a\nb\nc\nd", &l), Ok(None));
        assert_eq!(
            s.scan(b"\n", &l),
            Err(HttpError::TooManyHeaders { limit: 2 })
        );
        let mut s = HeadScanner::default();
        assert_eq!(
            s.scan(&b"\r\n".repeat(21), &l),
            Err(HttpError::HeadTooLarge { limit: 40 })
        );
    }

    /// Found by the fuzzer (`fuzz/seeds/*_head/regression-head-limit-vs-line-limit.bin`): a
    /// long line that crosses the line limit before the head limit was reported as
    /// `HeadTooLarge` when it arrived in one read and as `LineTooLong` byte by byte.
    #[test]
    fn limit_errors_do_not_depend_on_the_split() {
        let l = Limits {
            max_head_bytes: 40,
            max_line_bytes: 20,
            ..Limits::default()
        };
        let scan_in = |input: &[u8], piece: usize| {
            let mut s = HeadScanner::default();
            for p in input.chunks(piece) {
                match s.scan(p, &l) {
                    Ok(None) => {}
                    other => return other,
                }
            }
            Ok(None)
        };
        let cases: [(&[u8], HttpError); 4] = [
            // 10 + 25 bytes: the line limit is crossed at byte 32, the head limit never.
            (
                b"HTTP/1.1\r\nxxxxxxxxxxxxxxxxxxxxxxxxx",
                HttpError::LineTooLong { limit: 20 },
            ),
            // 33 + 25: head limit crossed at byte 41, line limit only at byte 54.
            (
                b"HTTP/1.1\r\nA: b\r\nC: d\r\nE: ffffff\r\nxxxxxxxxxxxxxxxxxxxxxxxxx",
                HttpError::HeadTooLarge { limit: 40 },
            ),
            // 20 + 30: both limits crossed at byte 41: the head-size limit wins.
            (
                b"HTTP/1.1\r\nA: bbbbb\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                HttpError::HeadTooLarge { limit: 40 },
            ),
            // 19 + 30: line limit crossed at byte 40, head limit at byte 41.
            (
                b"HTTP/1.1\r\nA: bbbb\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                HttpError::LineTooLong { limit: 20 },
            ),
        ];
        for (input, want) in cases {
            for piece in [input.len(), 1, 3, 7] {
                assert_eq!(
                    scan_in(input, piece),
                    Err(want.clone()),
                    "{} in pieces of {piece}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn parses_head() {
        let head = parse_head(
            b"HTTP/1.1 206 Partial Content\r\nContent-Length: 3\r\nETag: \"x\"\r\n\r\n",
            &Limits::default(),
            false,
        )
        .unwrap();
        assert_eq!(head.status, 206);
        assert_eq!(head.reason, "Partial Content");
        assert_eq!(head.header("etag"), Some("\"x\""));
        assert_eq!(head.content_length(), Some(3));
        assert_eq!(head.framing, BodyFraming::Length(3));
        assert!(head.keep_alive);
        assert_eq!(
            parse_head(b"HTTP/2.0 200 OK\r\n\r\n", &Limits::default(), false),
            Err(HttpError::Malformed(Malformed::Version))
        );
        assert_eq!(
            parse_head(b"HTTP/1.1 101 Switching\r\n\r\n", &Limits::default(), false),
            Err(HttpError::SwitchingProtocols)
        );
        // Found by the fuzzer (`fuzz/seeds/response_head/regression-status-below-100.bin`).
        for head in [&b"HTTP/1.1 000\n\n"[..], b"HTTP/1.1 099 OK\r\n\r\n"] {
            assert_eq!(
                parse_head(head, &Limits::default(), false),
                Err(HttpError::Malformed(Malformed::Status))
            );
        }
    }
}
