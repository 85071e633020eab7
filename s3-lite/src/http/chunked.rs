//! Incremental, zero-copy decoder for `Transfer-Encoding: chunked` bodies (RFC 9112 §7.1).
//!
//! Strict where leniency has caused smuggling bugs elsewhere: every line ends in CRLF (a bare LF
//! is an error), the size is hex without sign or prefix and must fit in 64 bits, extensions are
//! skipped but may not contain control bytes, and the size line and trailer section are bounded.
//! Data is never copied: [`ChunkEvent::Data`] borrows the caller's input.

use super::error::{HttpError, Malformed};
use super::limits::Limits;

/// What one call to [`ChunkedDecoder::decode`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkEvent<'a> {
    /// All input was consumed as framing (or buffered trailer bytes); feed more.
    NeedMore,
    /// Body bytes, a sub-slice of the input that ends the consumed prefix.
    Data(&'a [u8]),
    /// The last chunk and the trailer section are complete; [`ChunkedDecoder::trailers`] holds
    /// the trailer fields. Input after the consumed prefix belongs to the next message.
    End,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Inside a chunk-size line.
    Size {
        value: u64,
        digits: usize,
        after_size: bool,
        ext: bool,
        cr: bool,
    },
    /// Inside chunk data.
    Data {
        remaining: u64,
    },
    /// Expecting the CR after chunk data.
    DataCr,
    /// Expecting the LF after chunk data.
    DataLf,
    /// Inside the trailer section (bytes buffered in `trailer_buf`).
    Trailers {
        line_len: usize,
        cr: bool,
        lines: usize,
    },
    Done,
    Failed(HttpError),
}

const SIZE_START: State = State::Size {
    value: 0,
    digits: 0,
    after_size: false,
    ext: false,
    cr: false,
};

/// Decodes one chunked body. Feed it input with [`decode`](Self::decode) until
/// [`ChunkEvent::End`]; errors are sticky.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    limits: Limits,
    state: State,
    /// Bytes of the current chunk-size line seen so far.
    /// INVARIANT: `line_len <= limits.max_chunk_line_bytes`.
    line_len: usize,
    /// The raw trailer section. INVARIANT: `trailer_buf.len() <= limits.max_trailer_bytes`.
    trailer_buf: Vec<u8>,
    trailers: Vec<(String, String)>,
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: SIZE_START,
            line_len: 0,
            trailer_buf: Vec::new(),
            trailers: Vec::new(),
        }
    }

    /// Trailer fields, available once [`ChunkEvent::End`] was returned (S3 sends
    /// `x-amz-checksum-*` here on some streaming responses).
    pub fn trailers(&self) -> &[(String, String)] {
        &self.trailers
    }

    /// Moves the trailer fields out.
    pub fn take_trailers(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.trailers)
    }

    /// Whether the whole body, trailers included, has been decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes a prefix of `input`; returns its length and what it meant.
    ///
    /// Guarantees: `consumed <= input.len()`; `NeedMore` means `consumed == input.len()`;
    /// `Data(d)` means `d == &input[consumed - d.len()..consumed]`; partial input is never an
    /// error.
    pub fn decode<'a>(&mut self, input: &'a [u8]) -> Result<(usize, ChunkEvent<'a>), HttpError> {
        match self.step(input) {
            Ok(r) => Ok(r),
            Err(e) => {
                self.state = State::Failed(e.clone());
                Err(e)
            }
        }
    }

    fn step<'a>(&mut self, input: &'a [u8]) -> Result<(usize, ChunkEvent<'a>), HttpError> {
        let mut pos = 0;
        loop {
            if let State::Data { remaining } = &mut self.state {
                let rest = input.get(pos..).unwrap_or_default();
                if rest.is_empty() {
                    return Ok((pos, ChunkEvent::NeedMore));
                }
                let take = usize::try_from(*remaining).map_or(rest.len(), |r| r.min(rest.len()));
                let data = rest.get(..take).unwrap_or_default();
                // `take <= *remaining` by construction, so this cannot underflow.
                *remaining = remaining.saturating_sub(take as u64);
                if *remaining == 0 {
                    self.state = State::DataCr;
                }
                return Ok((pos + take, ChunkEvent::Data(data)));
            }
            match &self.state {
                State::Done => return Ok((pos, ChunkEvent::End)),
                State::Failed(e) => return Err(e.clone()),
                _ => {}
            }
            let Some(&b) = input.get(pos) else {
                return Ok((pos, ChunkEvent::NeedMore));
            };
            pos += 1;
            self.framing_byte(b)?;
            if self.state == State::Done {
                return Ok((pos, ChunkEvent::End));
            }
        }
    }

    /// Advances the state machine by one framing (non-data) byte.
    fn framing_byte(&mut self, b: u8) -> Result<(), HttpError> {
        match &mut self.state {
            State::Size {
                value,
                digits,
                after_size,
                ext,
                cr,
            } => {
                self.line_len += 1;
                if self.line_len > self.limits.max_chunk_line_bytes {
                    return Err(HttpError::ChunkLineTooLong {
                        limit: self.limits.max_chunk_line_bytes,
                    });
                }
                if *cr {
                    if b != b'\n' {
                        return Err(HttpError::BadChunk(
                            "CR not followed by LF in chunk-size line",
                        ));
                    }
                    if *digits == 0 {
                        return Err(HttpError::BadChunk("missing chunk size"));
                    }
                    let size = *value;
                    self.line_len = 0;
                    self.state = if size == 0 {
                        State::Trailers {
                            line_len: 0,
                            cr: false,
                            lines: 0,
                        }
                    } else {
                        State::Data { remaining: size }
                    };
                    return Ok(());
                }
                match b {
                    b'\r' => *cr = true,
                    b'\n' => return Err(HttpError::BadChunk("bare LF in chunk-size line")),
                    _ if *ext => {
                        if b != b'\t' && (b < 0x20 || b == 0x7f) {
                            return Err(HttpError::BadChunk("control byte in chunk extension"));
                        }
                    }
                    b';' if *digits > 0 => *ext = true,
                    b' ' | b'\t' if *digits > 0 => *after_size = true,
                    _ if !*after_size => {
                        let d = hex_digit(b).ok_or(HttpError::BadChunk("invalid chunk size"))?;
                        *value = value
                            .checked_mul(16)
                            .and_then(|v| v.checked_add(u64::from(d)))
                            .ok_or(HttpError::ChunkSizeOverflow)?;
                        *digits += 1;
                    }
                    _ => return Err(HttpError::BadChunk("invalid byte after chunk size")),
                }
                Ok(())
            }
            State::DataCr if b == b'\r' => {
                self.state = State::DataLf;
                Ok(())
            }
            State::DataLf if b == b'\n' => {
                self.state = SIZE_START;
                Ok(())
            }
            State::DataCr | State::DataLf => {
                Err(HttpError::BadChunk("chunk data not followed by CRLF"))
            }
            State::Trailers {
                line_len,
                cr,
                lines,
            } => {
                if self.trailer_buf.len() >= self.limits.max_trailer_bytes {
                    return Err(HttpError::TrailersTooLarge {
                        limit: self.limits.max_trailer_bytes,
                    });
                }
                self.trailer_buf.push(b);
                if *cr {
                    if b != b'\n' {
                        return Err(HttpError::BadChunk(
                            "CR not followed by LF in trailer section",
                        ));
                    }
                    if *line_len == 0 {
                        self.finish_trailers()?;
                        self.state = State::Done;
                        return Ok(());
                    }
                    *lines += 1;
                    if *lines > self.limits.max_headers {
                        return Err(HttpError::TooManyHeaders {
                            limit: self.limits.max_headers,
                        });
                    }
                    *line_len = 0;
                    *cr = false;
                } else if b == b'\r' {
                    *cr = true;
                } else if b == b'\n' {
                    return Err(HttpError::BadChunk("bare LF in trailer section"));
                } else {
                    *line_len += 1;
                }
                Ok(())
            }
            // Data, Done and Failed are handled by `step` before any byte is read.
            State::Data { .. } | State::Done | State::Failed(_) => Ok(()),
        }
    }

    /// Parses the buffered trailer section (which ends in an empty line) into fields.
    fn finish_trailers(&mut self) -> Result<(), HttpError> {
        let buf = std::mem::take(&mut self.trailer_buf);
        if buf.as_slice() == b"\r\n" {
            return Ok(());
        }
        let mut slots = vec![httparse::EMPTY_HEADER; self.limits.max_headers];
        match httparse::parse_headers(&buf, &mut slots) {
            Ok(httparse::Status::Complete((n, fields))) if n == buf.len() => {
                self.trailers = fields
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_owned(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect();
                Ok(())
            }
            Ok(_) => Err(HttpError::MalformedTrailers(Malformed::Framing)),
            Err(e) => Err(HttpError::MalformedTrailers(e.into())),
        }
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` in one piece, collecting body and the final outcome.
    #[allow(
        clippy::type_complexity,
        reason = "test helper returning a plain tuple"
    )]
    fn run(
        input: &[u8],
        limits: Limits,
    ) -> (Vec<u8>, Result<usize, HttpError>, Vec<(String, String)>) {
        let mut d = ChunkedDecoder::new(limits);
        let mut body = Vec::new();
        let mut pos = 0;
        loop {
            match d.decode(&input[pos..]) {
                Ok((n, ev)) => {
                    assert!(n <= input.len() - pos);
                    pos += n;
                    match ev {
                        ChunkEvent::Data(x) => body.extend_from_slice(x),
                        ChunkEvent::End => return (body, Ok(pos), d.take_trailers()),
                        ChunkEvent::NeedMore => return (body, Ok(usize::MAX), Vec::new()),
                    }
                }
                Err(e) => return (body, Err(e), Vec::new()),
            }
        }
    }

    #[test]
    fn decodes_with_extensions_and_trailers() {
        let input = b"5;name=\"v\"\r\nhello\r\n6 ; x\r\n world\r\n0\r\nx-amz-checksum-crc32c: AAAAAA==\r\nX-B: 2\r\n\r\nNEXT";
        let (body, end, trailers) = run(input, Limits::default());
        assert_eq!(body, b"hello world");
        assert_eq!(end, Ok(input.len() - 4));
        assert_eq!(
            trailers,
            vec![
                ("x-amz-checksum-crc32c".to_owned(), "AAAAAA==".to_owned()),
                ("X-B".to_owned(), "2".to_owned())
            ]
        );
    }

    #[test]
    fn hostile_sizes_and_framing() {
        let l = Limits::default();
        assert_eq!(
            run(b"ffffffffffffffffff\r\n", l).1,
            Err(HttpError::ChunkSizeOverflow)
        );
        assert_eq!(
            run(b"ffffffffffffffff\r\n", l).1,
            Ok(usize::MAX),
            "u64::MAX itself is only partial"
        );
        assert_eq!(
            run(b"0000000000000000000000000003\r\nabc\r\n0\r\n\r\n", l).0,
            b"abc"
        );
        assert_eq!(
            run(b"-1\r\n", l).1,
            Err(HttpError::BadChunk("invalid chunk size"))
        );
        assert_eq!(
            run(b"0x3\r\n", l).1,
            Err(HttpError::BadChunk("invalid chunk size"))
        );
        assert_eq!(
            run(b"\r\n", l).1,
            Err(HttpError::BadChunk("missing chunk size"))
        );
        assert_eq!(
            run(b"3\nabc", l).1,
            Err(HttpError::BadChunk("bare LF in chunk-size line"))
        );
        assert_eq!(
            run(b"3\r\nabcX", l).1,
            Err(HttpError::BadChunk("chunk data not followed by CRLF"))
        );
        assert_eq!(
            run(b"3;a\x01\r\n", l).1,
            Err(HttpError::BadChunk("control byte in chunk extension"))
        );
        assert_eq!(
            run(b"3 4\r\n", l).1,
            Err(HttpError::BadChunk("invalid byte after chunk size"))
        );
        assert_eq!(
            run(b"0\r\nA: b\n", l).1,
            Err(HttpError::BadChunk("bare LF in trailer section"))
        );
        assert_eq!(
            run(b"0\r\nbad header\r\n\r\n", l).1,
            Err(HttpError::MalformedTrailers(Malformed::HeaderName))
        );
        let small = Limits {
            max_chunk_line_bytes: 8,
            max_trailer_bytes: 10,
            ..l
        };
        assert_eq!(
            run(b"1;aaaaaaaa", small).1,
            Err(HttpError::ChunkLineTooLong { limit: 8 })
        );
        assert_eq!(
            run(b"0\r\nA: 0123456789", small).1,
            Err(HttpError::TrailersTooLarge { limit: 10 })
        );
        let few = Limits {
            max_headers: 1,
            ..l
        };
        assert_eq!(
            run(b"0\r\nA: 1\r\nB: 2\r\n", few).1,
            Err(HttpError::TooManyHeaders { limit: 1 })
        );
    }

    #[test]
    fn errors_are_sticky_and_data_is_zero_copy() {
        let mut d = ChunkedDecoder::new(Limits::default());
        let input = b"4\r\nwxyz\r\n";
        let (n, ev) = d.decode(input).unwrap();
        assert_eq!((n, ev), (7, ChunkEvent::Data(&input[3..7])));
        assert!(std::ptr::eq(
            input[3..7].as_ptr(),
            match ev {
                ChunkEvent::Data(x) => x.as_ptr(),
                _ => unreachable!(),
            }
        ));
        assert_eq!(d.decode(&input[7..]).unwrap(), (2, ChunkEvent::NeedMore));
        assert!(d.decode(b"zz").is_err());
        assert_eq!(
            d.decode(b"0\r\n\r\n"),
            Err(HttpError::BadChunk("invalid chunk size"))
        );
    }
}
