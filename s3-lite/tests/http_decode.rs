//! Response decoding over whole streams: every split point, keep-alive, limits, smuggling, EOF.

use s3_lite::http::{BodyFraming, Event, HttpError, Limits, ResponseDecoder, ResponseHead};

#[derive(Debug, PartialEq)]
struct Decoded {
    heads: Vec<ResponseHead>,
    bodies: Vec<Vec<u8>>,
    trailers: Vec<Vec<(String, String)>>,
    error: Option<HttpError>,
}

/// Decodes `parts` as consecutive socket reads, following keep-alive, then signals EOF.
fn decode_parts(parts: &[&[u8]], limits: Limits, head: bool) -> Decoded {
    let mut dec = ResponseDecoder::new(limits, head);
    let mut out = Decoded {
        heads: vec![],
        bodies: vec![vec![]],
        trailers: vec![],
        error: None,
    };
    let mut pending = Vec::new();
    // A zero-byte read would be EOF on a socket; only non-empty reads are data.
    let parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    let mut reads = parts.iter();
    loop {
        let d = match dec.decode(&pending) {
            Ok(d) => d,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        assert!(d.consumed <= pending.len());
        match d.event {
            Event::NeedMore => {
                pending.clear();
                match reads.next() {
                    Some(p) => pending.extend_from_slice(p),
                    None => {
                        if let Err(e) = dec.finish_on_eof() {
                            out.error = Some(e);
                            return out;
                        }
                    }
                }
                continue;
            }
            Event::Head(h) => out.heads.push(h),
            Event::Body(b) => out.bodies.last_mut().unwrap().extend_from_slice(b),
            Event::End => {
                out.trailers.push(dec.trailers().to_vec());
                pending.drain(..d.consumed);
                if pending.is_empty() && reads.len() == 0 {
                    return out;
                }
                dec.reset_for_next(head).unwrap();
                out.bodies.push(vec![]);
                continue;
            }
        }
        pending.drain(..d.consumed);
    }
}

fn whole(wire: &[u8]) -> Decoded {
    decode_parts(&[wire], Limits::default(), false)
}

/// Decoding split at every single byte boundary (and byte by byte) equals decoding in one piece.
fn assert_split_invariant(wire: &[u8], head: bool) -> Decoded {
    let reference = decode_parts(&[wire], Limits::default(), head);
    for i in 0..=wire.len() {
        let (a, b) = wire.split_at(i);
        assert_eq!(
            decode_parts(&[a, b], Limits::default(), head),
            reference,
            "split at {i}"
        );
    }
    let bytes: Vec<&[u8]> = wire.chunks(1).collect();
    assert_eq!(
        decode_parts(&bytes, Limits::default(), head),
        reference,
        "byte by byte"
    );
    reference
}

#[test]
fn content_length_response_at_every_split() {
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\nETag: \"e\"\r\n\r\nhello world";
    let d = assert_split_invariant(wire, false);
    assert_eq!(d.error, None);
    assert_eq!(d.heads[0].status, 200);
    assert_eq!(d.heads[0].framing, BodyFraming::Length(11));
    assert!(d.heads[0].keep_alive);
    assert_eq!(d.bodies, vec![b"hello world".to_vec()]);
}

#[test]
fn chunked_with_extensions_and_trailers_at_every_split() {
    let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                 4;a=b\r\nWiki\r\n5 ;x\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0;z\r\n\
                 x-amz-checksum-crc64nvme: AAAAAAAAAAA=\r\n\r\n";
    let d = assert_split_invariant(wire, false);
    assert_eq!(d.error, None);
    assert_eq!(d.bodies, vec![b"Wikipedia in\r\n\r\nchunks.".to_vec()]);
    assert_eq!(
        d.trailers,
        vec![vec![(
            "x-amz-checksum-crc64nvme".to_owned(),
            "AAAAAAAAAAA=".to_owned()
        )]]
    );
}

#[test]
fn keep_alive_two_responses_in_one_buffer() {
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi\
                 HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
    let d = assert_split_invariant(wire, false);
    assert_eq!(d.error, None);
    assert_eq!(
        d.heads.iter().map(|h| h.status).collect::<Vec<_>>(),
        vec![200, 206]
    );
    assert_eq!(d.bodies, vec![b"hi".to_vec(), b"x".to_vec()]);
}

#[test]
fn end_is_reported_without_more_input() {
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
    let d = dec.decode(wire).unwrap();
    assert!(matches!(d.event, Event::Head(_)));
    let rest = &wire[d.consumed..];
    let d = dec.decode(rest).unwrap();
    assert_eq!((d.consumed, d.event), (2, Event::Body(b"hi")));
    assert_eq!(dec.decode(&[]).unwrap().event, Event::End);
    assert!(dec.is_reusable());
    dec.reset_for_next(true).unwrap();
    let d = dec
        .decode(b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n")
        .unwrap();
    match d.event {
        Event::Head(h) => {
            assert_eq!(h.framing, BodyFraming::None);
            assert_eq!(h.content_length(), Some(1234));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        dec.decode(b"HTTP/1.1").unwrap(),
        s3_lite::http::Decoded {
            consumed: 0,
            event: Event::End
        }
    );
}

#[test]
fn head_response_with_content_length_has_no_body() {
    let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\nETag: \"e\"\r\n\r\n";
    let d = assert_split_invariant(wire, true);
    assert_eq!(d.error, None);
    assert_eq!(d.heads[0].content_length(), Some(5000));
    assert_eq!(d.bodies, vec![Vec::<u8>::new()]);
}

#[test]
fn interim_100_is_skipped_and_101_rejected() {
    let d = assert_split_invariant(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
        false,
    );
    assert_eq!((d.heads.len(), d.heads[0].status, d.error), (1, 204, None));
    assert_eq!(
        whole(b"HTTP/1.1 101 Switching Protocols\r\n\r\n").error,
        Some(HttpError::SwitchingProtocols)
    );
}

#[test]
fn smuggling_patterns_are_rejected() {
    let te_cl =
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n";
    assert_eq!(whole(te_cl).error, Some(HttpError::ConflictingFraming));
    let cl_cl = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde";
    assert_eq!(whole(cl_cl).error, Some(HttpError::DuplicateContentLength));
    let gz = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_eq!(
        whole(gz).error,
        Some(HttpError::UnsupportedTransferEncoding)
    );
    let bad_cl = b"HTTP/1.1 200 OK\r\nContent-Length: +4\r\n\r\n";
    assert_eq!(whole(bad_cl).error, Some(HttpError::InvalidContentLength));
}

#[test]
fn oversized_heads_fail_at_the_limit() {
    let limits = Limits {
        max_head_bytes: 1024,
        ..Limits::default()
    };
    // No CRLFCRLF at all, fed in many reads: fails as soon as the limit is passed.
    let mut dec = ResponseDecoder::new(limits, false);
    let mut fed = 0;
    let line = b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    let first = b"HTTP/1.1 200 OK\r\n";
    let mut result = dec.decode(first);
    fed += first.len();
    while let Ok(d) = result {
        assert_eq!(d.event, Event::NeedMore);
        assert!(fed <= 1024, "kept accepting past the limit");
        result = dec.decode(line);
        fed += line.len();
    }
    assert_eq!(result, Err(HttpError::HeadTooLarge { limit: 1024 }));
    assert!(fed <= 1024 + line.len());
    // The error is sticky.
    assert_eq!(
        dec.decode(b"\r\n").unwrap_err(),
        HttpError::HeadTooLarge { limit: 1024 }
    );
    // One huge line without any CRLF.
    let huge = vec![b'a'; 20_000];
    assert_eq!(
        whole(&huge).error,
        Some(HttpError::LineTooLong { limit: 16 * 1024 })
    );
    // A complete head that is too large.
    let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
    for _ in 0..30 {
        big.extend_from_slice(line);
    }
    big.extend_from_slice(b"\r\n");
    assert_eq!(
        decode_parts(&[&big], limits, false).error,
        Some(HttpError::HeadTooLarge { limit: 1024 })
    );
}

#[test]
fn too_many_headers() {
    let mut wire = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..129 {
        wire.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    assert_eq!(
        whole(&wire).error,
        Some(HttpError::TooManyHeaders { limit: 128 }),
        "fails before the head ends"
    );
    wire.extend_from_slice(b"\r\n");
    assert_eq!(
        whole(&wire).error,
        Some(HttpError::TooManyHeaders { limit: 128 })
    );
}

#[test]
fn hostile_chunk_size() {
    let wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n";
    assert_eq!(whole(wire).error, Some(HttpError::ChunkSizeOverflow));
}

#[test]
fn eof_handling() {
    let mid_body = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    let d = assert_split_invariant(mid_body, false);
    assert_eq!(
        (d.bodies[0].as_slice(), d.error),
        (&b"abc"[..], Some(HttpError::UnexpectedEof))
    );
    let mid_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab";
    assert_eq!(whole(mid_chunk).error, Some(HttpError::UnexpectedEof));
    assert_eq!(
        whole(b"HTTP/1.1 200 OK\r\nContent-Le").error,
        Some(HttpError::UnexpectedEof)
    );
    assert_eq!(
        decode_parts(&[], Limits::default(), false).error,
        Some(HttpError::EmptyResponse)
    );
    let until_close = b"HTTP/1.0 200 OK\r\n\r\nall of it";
    let d = assert_split_invariant(until_close, false);
    assert_eq!((d.bodies[0].as_slice(), d.error), (&b"all of it"[..], None));
    assert_eq!(d.heads[0].framing, BodyFraming::UntilClose);
    assert!(!d.heads[0].keep_alive);
}

#[test]
fn connection_close_is_not_reusable() {
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    let wire = b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n";
    assert!(matches!(dec.decode(wire).unwrap().event, Event::Head(_)));
    assert_eq!(dec.decode(&[]).unwrap().event, Event::End);
    assert_eq!(dec.reset_for_next(false), Err(HttpError::NotReusable));
}

#[test]
fn malformed_heads() {
    assert!(matches!(
        whole(b"HTTP/1.1 2x0 OK\r\n\r\n").error,
        Some(HttpError::Malformed(_))
    ));
    assert!(matches!(
        whole(b"ICY 200 OK\r\n\r\n").error,
        Some(HttpError::Malformed(_))
    ));
    assert!(matches!(
        whole(b"HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n").error,
        Some(HttpError::Malformed(_))
    ));
}

/// A `Content-Length` body may be read by the caller straight into its destination: the
/// decoder says how much is left, takes the count, reports the end, and keeps the connection
/// reusable; placing more than is left fails the decoder for good.
#[test]
fn a_length_body_can_be_placed_by_the_caller() {
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    assert_eq!(dec.body_room(), None, "no head yet");
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab";
    let d = dec.decode(head).unwrap();
    assert!(matches!(d.event, Event::Head(_)));
    let rest = &head[d.consumed..];
    let d = dec.decode(rest).unwrap();
    assert!(matches!(d.event, Event::Body(b) if b == b"ab"));
    assert_eq!(dec.body_room(), Some(8));
    dec.body_placed(5).unwrap();
    assert_eq!(dec.body_room(), Some(3));
    assert!(matches!(dec.decode(&[]).unwrap().event, Event::NeedMore));
    dec.body_placed(3).unwrap();
    assert_eq!(dec.body_room(), None, "the body is complete");
    assert!(matches!(dec.decode(&[]).unwrap().event, Event::End));
    assert!(dec.is_reusable());

    let mut dec = ResponseDecoder::new(Limits::default(), false);
    dec.decode(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
        .unwrap();
    assert_eq!(dec.body_placed(5), Err(HttpError::PlacedPastBody));
    assert_eq!(
        dec.decode(b"abcd").unwrap_err(),
        HttpError::PlacedPastBody,
        "failed for good"
    );

    // Chunked bodies, and placing before a head, need the decoder.
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    assert_eq!(dec.body_placed(1), Err(HttpError::PlacedPastBody));
    let mut dec = ResponseDecoder::new(Limits::default(), false);
    dec.decode(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        .unwrap();
    assert_eq!(dec.body_room(), None);
}
