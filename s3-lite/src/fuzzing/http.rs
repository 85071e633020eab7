//! Fuzz bodies for the HTTP response decoder and the chunked-body decoder.
//!
//! Each input is decoded three ways — in one piece, byte by byte, and split at points derived
//! from the input itself — and the outcomes (heads, body bytes, trailers, final result) must be
//! identical, because every limit and every framing decision is taken byte by byte. Each call
//! also checks conservation: `consumed <= input.len()`, `NeedMore` consumes everything, body
//! slices are the tail of the consumed prefix, and no more body bytes come out than went in.

use crate::http::{
    ChunkEvent, ChunkedDecoder, Event, HttpError, Limits, ResponseDecoder, ResponseHead,
};

/// Limits small enough for fuzzed inputs to hit them.
pub(crate) fn tight_limits() -> Limits {
    Limits {
        max_head_bytes: 512,
        max_headers: 8,
        max_line_bytes: 128,
        max_chunk_line_bytes: 32,
        max_trailer_bytes: 128,
    }
}

/// Split lengths derived from the data (FNV-1a seeded xorshift), 1..=17 bytes each.
pub(crate) fn derived_splits(data: &[u8]) -> Vec<usize> {
    let mut state = data.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut splits = Vec::new();
    let mut total = 0;
    while total < data.len() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let n = usize::try_from(state % 17).unwrap_or(0) + 1;
        splits.push(n);
        total += n;
    }
    splits
}

/// Everything observable about decoding a stream of (possibly several) responses.
#[derive(Debug, PartialEq)]
struct Outcome {
    heads: Vec<ResponseHead>,
    body: Vec<Vec<u8>>,
    trailers: Vec<Vec<(String, String)>>,
    result: Result<(), HttpError>,
}

/// Feeds `data` to a decoder in pieces of the given sizes, as a socket driver would: unconsumed
/// bytes are kept and re-offered with the next read; after `End` with a reusable connection the
/// decoder is reset for the next response.
fn drive_responses(data: &[u8], pieces: &[usize], limits: Limits, method_is_head: bool) -> Outcome {
    let mut dec = ResponseDecoder::new(limits, method_is_head);
    let mut out = Outcome {
        heads: Vec::new(),
        body: vec![Vec::new()],
        trailers: Vec::new(),
        result: Ok(()),
    };
    let mut pending: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut piece = pieces.iter();
    let mut body_total = 0usize;
    loop {
        let decoded = match dec.decode(&pending) {
            Ok(d) => d,
            Err(e) => {
                out.result = Err(e);
                return out;
            }
        };
        assert!(
            decoded.consumed <= pending.len(),
            "consumed more than offered"
        );
        match decoded.event {
            Event::NeedMore => {
                assert_eq!(
                    decoded.consumed,
                    pending.len(),
                    "NeedMore must consume everything"
                );
                pending.clear();
                match piece.next() {
                    Some(&n) if fed < data.len() => {
                        let end = fed.saturating_add(n).min(data.len());
                        pending.extend_from_slice(data.get(fed..end).unwrap_or_default());
                        fed = end;
                    }
                    _ => {
                        // EOF: the peer closed.
                        if let Err(e) = dec.finish_on_eof() {
                            out.result = Err(e);
                            return out;
                        }
                    }
                }
                continue;
            }
            Event::Head(h) => out.heads.push(h),
            Event::Body(b) => {
                assert!(!b.is_empty(), "empty Body events are never emitted");
                let start = decoded.consumed - b.len();
                assert_eq!(
                    pending.get(start..decoded.consumed),
                    Some(b),
                    "Body must be the tail of the consumed prefix"
                );
                body_total += b.len();
                assert!(body_total <= data.len(), "more body bytes than input bytes");
                if let Some(last) = out.body.last_mut() {
                    last.extend_from_slice(b);
                }
            }
            Event::End => {
                out.trailers.push(dec.trailers().to_vec());
                pending.drain(..decoded.consumed);
                let more = !pending.is_empty() || fed < data.len();
                if !more || dec.reset_for_next(method_is_head).is_err() {
                    return out;
                }
                out.body.push(Vec::new());
                continue;
            }
        }
        pending.drain(..decoded.consumed);
    }
}

/// Fuzz body: response heads (and whatever bodies follow), with default and tight limits,
/// for GET and HEAD requests.
pub fn response_head(data: &[u8]) {
    let splits = derived_splits(data);
    for (limits, head) in [
        (Limits::default(), false),
        (Limits::default(), true),
        (tight_limits(), false),
    ] {
        let whole = drive_responses(data, &[data.len().max(1)], limits, head);
        let bytewise = drive_responses(data, &vec![1; data.len()], limits, head);
        let split = drive_responses(data, &splits, limits, head);
        assert_eq!(whole, bytewise, "one piece vs byte by byte");
        assert_eq!(whole, split, "one piece vs derived splits");
    }
}

#[derive(Debug, PartialEq)]
struct ChunkOutcome {
    body: Vec<u8>,
    trailers: Vec<(String, String)>,
    /// Bytes consumed when `End` came, or the error.
    result: Result<Option<usize>, HttpError>,
}

fn drive_chunked(data: &[u8], pieces: &[usize], limits: Limits) -> ChunkOutcome {
    let mut dec = ChunkedDecoder::new(limits);
    let mut out = ChunkOutcome {
        body: Vec::new(),
        trailers: Vec::new(),
        result: Ok(None),
    };
    let mut pos: usize = 0;
    for &n in pieces {
        let end = pos.saturating_add(n).min(data.len());
        let mut chunk = data.get(pos..end).unwrap_or_default();
        pos = end;
        loop {
            match dec.decode(chunk) {
                Err(e) => {
                    out.result = Err(e);
                    return out;
                }
                Ok((consumed, ev)) => {
                    assert!(consumed <= chunk.len());
                    match ev {
                        ChunkEvent::NeedMore => {
                            assert_eq!(consumed, chunk.len());
                            break;
                        }
                        ChunkEvent::Data(d) => {
                            assert!(!d.is_empty());
                            assert_eq!(chunk.get(consumed - d.len()..consumed), Some(d));
                            out.body.extend_from_slice(d);
                            assert!(out.body.len() <= data.len());
                        }
                        ChunkEvent::End => {
                            out.trailers = dec.take_trailers();
                            out.result = Ok(Some(pos - chunk.len() + consumed));
                            return out;
                        }
                    }
                    chunk = chunk.get(consumed..).unwrap_or_default();
                }
            }
        }
    }
    out
}

/// Fuzz body: a chunked body on its own (data is the body after the head).
pub fn chunked_body(data: &[u8]) {
    let splits = derived_splits(data);
    for limits in [Limits::default(), tight_limits()] {
        let whole = drive_chunked(data, &[data.len()], limits);
        let bytewise = drive_chunked(data, &vec![1; data.len()], limits);
        let split = drive_chunked(data, &splits, limits);
        assert_eq!(whole, bytewise, "one piece vs byte by byte");
        assert_eq!(whole, split, "one piece vs derived splits");
        if let Ok(Some(end)) = whole.result {
            assert!(
                whole.body.len() < end,
                "framing takes at least one byte per body"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_head_seeds() {
        for (name, data) in crate::fuzzing::seeds("response_head", 3) {
            println!("{name}");
            response_head(&data);
        }
    }

    #[test]
    fn chunked_body_seeds() {
        for (name, data) in crate::fuzzing::seeds("chunked_body", 3) {
            println!("{name}");
            chunked_body(&data);
        }
    }

    #[test]
    fn seeds_decode_as_expected() {
        // The seeds are meaningful: the OK ones decode to End, the hostile ones to their error.
        let ok = drive_responses(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
            &[100],
            Limits::default(),
            false,
        );
        assert_eq!(
            (ok.heads.len(), ok.body[0].as_slice(), ok.result),
            (1, &b"hi"[..], Ok(()))
        );
        let c = drive_chunked(b"2\r\nhi\r\n0\r\n\r\n", &[3, 100], Limits::default());
        assert_eq!((c.body.as_slice(), c.result), (&b"hi"[..], Ok(Some(12))));
    }
}
