//! Fuzz body for the server-side request decoder.
//!
//! Each input is decoded as a stream of pipelined requests three ways — in one piece, byte by
//! byte, and split at points derived from the input — and the outcomes must be identical,
//! because every limit and framing decision is taken byte by byte. Conservation is checked on
//! every call (`consumed <= input.len()`, `NeedMore` consumes everything, body slices are the
//! tail of the consumed prefix, no more body bytes out than in). Every decoded head is then
//! re-encoded with the client-side encoder and decoded again: the round trip must give back
//! the same method, target, headers and framing.

use super::http::{derived_splits, tight_limits};
use crate::Request;
use crate::http::server::{RequestDecoder, RequestError, RequestEvent, RequestHead};
use crate::http::{BodyFraming, Limits, encode_request_head};

#[derive(Debug, PartialEq)]
struct Outcome {
    heads: Vec<RequestHead>,
    bodies: Vec<Vec<u8>>,
    trailers: Vec<Vec<(String, String)>>,
    result: Result<(), RequestError>,
}

fn drive(data: &[u8], pieces: &[usize], limits: Limits) -> Outcome {
    let mut dec = RequestDecoder::new(limits);
    let mut out = Outcome {
        heads: Vec::new(),
        bodies: Vec::new(),
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
            RequestEvent::NeedMore => {
                assert_eq!(decoded.consumed, pending.len(), "NeedMore consumes all");
                pending.clear();
                match piece.next() {
                    Some(&n) if fed < data.len() => {
                        let end = fed.saturating_add(n).min(data.len());
                        pending.extend_from_slice(data.get(fed..end).unwrap_or_default());
                        fed = end;
                    }
                    _ => {
                        out.result = dec.finish_on_eof();
                        return out;
                    }
                }
                continue;
            }
            RequestEvent::Head(h) => {
                out.heads.push(h);
                out.bodies.push(Vec::new());
            }
            RequestEvent::Body(b) => {
                assert!(!b.is_empty(), "empty Body events are never emitted");
                let start = decoded.consumed - b.len();
                assert_eq!(
                    pending.get(start..decoded.consumed),
                    Some(b),
                    "zero-copy tail"
                );
                body_total += b.len();
                assert!(body_total <= data.len(), "more body bytes than input bytes");
                if let Some(last) = out.bodies.last_mut() {
                    last.extend_from_slice(b);
                }
            }
            RequestEvent::End => {
                out.trailers.push(dec.trailers().to_vec());
                pending.drain(..decoded.consumed);
                let more = !pending.is_empty() || fed < data.len();
                if !more || dec.reset_for_next().is_err() {
                    return out;
                }
                continue;
            }
        }
        pending.drain(..decoded.consumed);
    }
}

/// Re-encodes a decoded head with the client encoder and decodes it again.
fn round_trip(head: &RequestHead) {
    if head.version_minor != 1 {
        return;
    }
    let req = Request {
        method: head.method.clone(),
        path: head.path.clone(),
        query: head.query.clone(),
        headers: head.headers.clone(),
    };
    let mut wire = Vec::new();
    // The client encoder is stricter (e.g. no leading/trailing blanks in values); heads it
    // refuses are not round-tripped.
    if encode_request_head(&req, head.framing, &mut wire).is_err() {
        return;
    }
    let mut dec = RequestDecoder::new(Limits {
        max_head_bytes: wire.len().max(1),
        max_line_bytes: wire.len().max(1),
        max_headers: head.headers.len().max(1) + 1,
        ..Limits::default()
    });
    let decoded = dec.decode(&wire);
    assert!(decoded.is_ok(), "re-encoded head refused: {decoded:?}");
    let Ok(d) = decoded else { return };
    let consumed = d.consumed;
    let again = match d.event {
        RequestEvent::Head(h) => Some(h),
        _ => None,
    };
    assert!(again.is_some(), "re-encoded head did not decode as a head");
    let Some(again) = again else { return };
    assert_eq!(consumed, wire.len(), "whole head consumed");
    assert_eq!(
        (&again.method, &again.path, &again.query, &again.headers),
        (&head.method, &head.path, &head.query, &head.headers),
        "round trip changed the head"
    );
    assert_eq!(again.framing, head.framing);
    assert_eq!(again.keep_alive, head.keep_alive);
}

/// Fuzz body: request heads (and whatever bodies follow), default and tight limits.
pub fn request_head(data: &[u8]) {
    let splits = derived_splits(data);
    for limits in [Limits::default(), tight_limits()] {
        let whole = drive(data, &[data.len().max(1)], limits);
        let bytewise = drive(data, &vec![1; data.len()], limits);
        let split = drive(data, &splits, limits);
        assert_eq!(whole, bytewise, "one piece vs byte by byte");
        assert_eq!(whole, split, "one piece vs derived splits");
        for head in &whole.heads {
            assert!(head.path.starts_with('/') || (head.path == "*" && head.method == "OPTIONS"));
            assert_ne!(head.framing, BodyFraming::UntilClose);
            round_trip(head);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_head_seeds() {
        for (name, data) in crate::fuzzing::seeds("request_head", 5) {
            println!("{name}");
            request_head(&data);
        }
    }

    #[test]
    fn seeds_decode_as_expected() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/request_head");
        let read = |n: &str| std::fs::read(dir.join(n)).unwrap();
        let put = drive(&read("put_content_length.bin"), &[1000], Limits::default());
        assert_eq!(
            (put.heads.len(), put.bodies[0].as_slice(), &put.result),
            (1, &b"hello"[..], &Ok(()))
        );
        let smuggle = drive(&read("smuggle_te_cl.bin"), &[1000], Limits::default());
        assert!(smuggle.result.is_err(), "{smuggle:?}");
        let piped = drive(&read("pipelined_keepalive.bin"), &[1000], Limits::default());
        assert_eq!(piped.heads.len(), 2);
        let chunked = drive(&read("aws_chunked_trailer.bin"), &[1000], Limits::default());
        assert_eq!(chunked.result, Ok(()));
        assert_eq!(chunked.trailers[0].len(), 1);
    }
}
