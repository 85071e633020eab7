//! Fuzz bodies for the HTTP response decoder and the chunked-body decoder.
//!
//! Each input is decoded three ways — in one piece, byte by byte, and split at points derived
//! from the input itself — and the outcomes (heads, body bytes, trailers, final result) must be
//! identical, because every limit and every framing decision is taken byte by byte. Each call
//! also checks conservation: `consumed <= input.len()`, `NeedMore` consumes everything, body
//! slices are the tail of the consumed prefix, and no more body bytes come out than went in.
//! Then decode and encode must agree: every decoded head is written back with the server's
//! response encoder and decodes to the same head, and every accepted chunked body is written
//! back with the chunk encoder and decodes to the same bytes and trailers.

use crate::http::{
    BodyFraming, ChunkEvent, ChunkedDecoder, Event, HttpError, Limits, ResponseDecoder,
    ResponseHead, encode_chunk, encode_last_chunk, encode_response_head,
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
    let mut input = super::Pieces::new(data, pieces);
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
                // Input used up: the peer closed.
                if !input.next_into(&mut pending)
                    && let Err(e) = dec.finish_on_eof()
                {
                    out.result = Err(e);
                    return out;
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
                let more = !pending.is_empty() || !input.all_fed();
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
        for h in &whole.heads {
            check_head(h, &limits);
            round_trip_head(h, head);
        }
    }
}

/// What every decoded head satisfies, whatever the input.
fn check_head(h: &ResponseHead, limits: &Limits) {
    assert!((100..=999).contains(&h.status), "status {}", h.status);
    assert!(h.version_minor <= 1);
    assert!(
        h.headers.len() <= limits.max_headers,
        "more headers than the limit"
    );
    if let BodyFraming::Length(n) = h.framing {
        assert_eq!(
            h.content_length(),
            Some(n),
            "framing length is the header's"
        );
    }
    if h.framing == BodyFraming::Chunked {
        assert!(
            h.content_length().is_none(),
            "chunked with a Content-Length"
        );
    }
}

/// Writes `h` back with the server encoder (which owns `Transfer-Encoding`) and decodes it
/// again: status, reason, headers, framing and keep-alive must come back unchanged. Heads the
/// stricter encoder refuses, HTTP/1.0 heads and interim 1xx heads are not round-tripped.
fn round_trip_head(h: &ResponseHead, method_is_head: bool) {
    if h.version_minor != 1 || h.is_informational() {
        return;
    }
    let is_te = |n: &str| n.eq_ignore_ascii_case("transfer-encoding");
    let headers: Vec<(String, String)> = h
        .headers
        .iter()
        .filter(|(n, _)| !is_te(n))
        .cloned()
        .collect();
    if headers.len() != h.headers.len() && h.framing != BodyFraming::Chunked {
        return;
    }
    let mut wire = Vec::new();
    if encode_response_head(h.status, &h.reason, &headers, h.framing, &mut wire).is_err() {
        return;
    }
    let limits = Limits {
        max_head_bytes: wire.len().max(1),
        max_line_bytes: wire.len().max(1),
        max_headers: h.headers.len() + 1,
        ..Limits::default()
    };
    let mut dec = ResponseDecoder::new(limits, method_is_head);
    let again = match dec.decode(&wire) {
        Ok(d) => match d.event {
            Event::Head(again) => Ok(again),
            other => Err(format!("{other:?}")),
        },
        Err(e) => Err(e.to_string()),
    };
    assert!(
        again.is_ok(),
        "re-encoded head {:?} did not decode: {again:?}",
        String::from_utf8_lossy(&wire)
    );
    let Ok(again) = again else { return };
    let strip = |v: &[(String, String)]| -> Vec<(String, String)> {
        v.iter().filter(|(n, _)| !is_te(n)).cloned().collect()
    };
    assert_eq!(
        (
            again.status,
            &again.reason,
            strip(&again.headers),
            again.framing
        ),
        (h.status, &h.reason, headers, h.framing),
        "round trip changed the head"
    );
    assert_eq!(again.keep_alive, h.keep_alive, "keep-alive");
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
            round_trip_chunked(&whole, &splits);
        }
    }
}

/// Writes an accepted body back with the chunk encoder (in pieces of the derived sizes) and
/// decodes it again: the same bytes and trailers, ending exactly at the end of the encoding.
fn round_trip_chunked(decoded: &ChunkOutcome, splits: &[usize]) {
    let mut wire = Vec::new();
    let mut rest = decoded.body.as_slice();
    for &n in splits.iter().cycle().take(decoded.body.len()) {
        if rest.is_empty() {
            break;
        }
        let (piece, tail) = rest.split_at(n.min(rest.len()));
        encode_chunk(piece, &mut wire);
        rest = tail;
    }
    encode_chunk(rest, &mut wire);
    // The encoder refuses trailer values the decoder tolerates (e.g. blanks around them).
    if encode_last_chunk(&decoded.trailers, &mut wire).is_err() {
        return;
    }
    // Re-encoding may add a blank after each trailer name: room for it.
    let limits = Limits {
        max_trailer_bytes: wire.len().max(1),
        ..Limits::default()
    };
    let again = drive_chunked(&wire, &[wire.len()], limits);
    assert_eq!(
        (&again.body, &again.trailers, again.result),
        (&decoded.body, &decoded.trailers, Ok(Some(wire.len()))),
        "chunked round trip of {:?}",
        String::from_utf8_lossy(&wire)
    );
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
