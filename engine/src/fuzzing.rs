//! Fuzz bodies (`fuzz/fuzz_targets/*` are one-liners into these). Not a stable API.

use crate::fabric::soft::frame::{
    CONNECT_PAYLOAD, HEADER_LEN, Opcode, TRAILER_LEN, decode_header, frame_crc, trailer,
};

/// The soft fabric's frame decoder on untrusted bytes: never panics, and a header that decodes
/// re-encodes to exactly the bytes it came from (the encoding is canonical). For pairing
/// frames, the RC token payload must round-trip through `s3_lite`'s codec too. For payload
/// frames whose payload and CRC-32C trailer are present, the trailer check accepts exactly
/// the frames whose trailer equals the checksum of header and payload, and any one changed
/// byte of header or payload (the position chosen by the input) changes that checksum, so the
/// receiver would refuse the frame.
pub fn soft_frame(data: &[u8]) {
    let Ok(h) = decode_header(data) else { return };
    let head = data.get(..HEADER_LEN).unwrap_or_default();
    assert_eq!(
        h.encode().as_slice(),
        head,
        "decode→encode must be the identity"
    );
    assert_eq!(decode_header(&h.encode()), Ok(h));
    if matches!(h.opcode, Opcode::Connect | Opcode::ConnectAck) {
        assert_eq!(h.len, CONNECT_PAYLOAD);
        let body = data
            .get(HEADER_LEN..HEADER_LEN + CONNECT_PAYLOAD as usize)
            .and_then(|b| <&[u8; 44]>::try_from(b).ok());
        if let Some(body) = body
            && let Ok(t) = s3_lite::rdma::RcToken::from_bytes(body)
        {
            assert_eq!(&t.to_bytes(), body, "token must round-trip");
        }
    }
    // Only WRITEs may go without their trailer (a receiver checks those end to end).
    assert!(
        !h.unchecked() || matches!(h.opcode, Opcode::Write | Opcode::WriteImm),
        "UNCHECKED on {:?}",
        h.opcode
    );
    // Only WRITEs may have their acknowledgement held back.
    assert!(
        !h.ack_later() || matches!(h.opcode, Opcode::Write | Opcode::WriteImm),
        "ACK_LATER on {:?}",
        h.opcode
    );
    if !h.has_trailer() {
        return;
    }
    let end = HEADER_LEN + h.len as usize;
    let (Some(frame), Some(got)) = (data.get(..end), data.get(end..end + TRAILER_LEN)) else {
        return;
    };
    let enc = h.encode();
    let sum = |bytes: &[u8]| {
        let mut c = frame_crc(&enc);
        c.update(bytes.get(HEADER_LEN..).unwrap_or_default());
        let mut whole = s3_lite::checksum::Crc32c::new();
        whole.update(bytes);
        (trailer(&c), trailer(&whole))
    };
    let (ours, whole) = sum(frame);
    assert_eq!(ours, whole, "header-seeded CRC equals the CRC of the frame");
    let accepted = got == ours;
    assert_eq!(accepted, got == trailer_of(frame), "one verdict per frame");
    // Change one byte of the payload (header changes are covered by decode + re-encode).
    if h.len > 0 {
        let at = HEADER_LEN + (usize::from(data.last().copied().unwrap_or(0)) % h.len as usize);
        let mut bad = frame.to_vec();
        if let Some(b) = bad.get_mut(at) {
            *b ^= 0x01;
        }
        assert_ne!(
            trailer_of(&bad),
            ours,
            "a flipped payload byte must be detected"
        );
    }
}

fn trailer_of(frame: &[u8]) -> [u8; TRAILER_LEN] {
    let mut c = s3_lite::checksum::Crc32c::new();
    c.update(frame);
    trailer(&c)
}

/// A server's answer to each RDMA exchange, as the client judges it: the protocol module's
/// judgements first (`s3_lite::fuzzing::rdma_answers`: connect, PREPARE, FINAL, acceptance,
/// destination checksums), then what the engine adds: what dialect negotiation learns from it
/// (capabilities, a refused service), the `rc-persistent` connect answer as the pairing
/// sees it, and the acceptance verdict of every operation kind mapped onto the HTTP
/// transport's plan, which never finishes a GET claiming more bytes than the buffer holds.
pub fn rdma_answers(data: &[u8]) {
    use crate::fabric::rdma::{connect, verdict};
    use crate::inflight::OpKind;

    let Some((head, consumed)) = s3_lite::fuzzing::rdma_answers::rdma_answers(data) else {
        return;
    };
    let (seed, wire) = data.split_first().map_or((0, data), |(s, w)| (*s, w));
    if connect::parse(&head).is_ok() {
        assert_eq!(head.status, 200, "connect paired on a non-200");
    }
    // What the negotiation learns from any v2 answer (capabilities, a refused service).
    let learned = crate::fabric::rdma::learned::Learned::default();
    learned.note_capabilities(&head);
    let _ = learned.multipart();
    let _ = crate::fabric::rdma::learned::refuses_service(
        head.status,
        wire.get(consumed..).unwrap_or_default(),
    );
    let dest_len = (u64::from(seed) * 4099 + 1).min(64 * 1024);
    for kind in [
        OpKind::Get,
        OpKind::RangeGet { offset: 7 },
        OpKind::Put,
        OpKind::Head,
    ] {
        for crc in [None, Some("AAAAAAAAAAA=")] {
            let (plan, _) = verdict::judge(kind, dest_len, &head, crc);
            if let crate::fabric::http::response::Plan::Finish(crate::fabric::Outcome::Done {
                bytes,
                ..
            }) = plan
                && matches!(kind, OpKind::Get | OpKind::RangeGet { .. })
            {
                assert!(bytes <= dest_len, "a GET verdict claimed {bytes} bytes");
            }
        }
    }
}

/// The node daemon's control messages (`attach::wire`) on untrusted bytes, both as a request
/// (what a daemon reads from a client) and as a reply (what a client reads from a daemon),
/// each on the input itself and on the input behind the magic `HOD1` (so that the fuzzer
/// reaches the fields without having to find the magic). Decoding never panics; no bytes are
/// both a request and a reply; whatever decodes re-encodes to exactly those bytes (the codec
/// is canonical), decodes again to the same value, fits the receiver's buffer
/// (`MAX_REQUEST`, `MAX_REPLY`), and is refused when cut short or followed by one more byte
/// (each message is exactly one packet).
pub fn daemon_wire(data: &[u8]) {
    use crate::attach::wire::{MAGIC, MAX_REPLY, MAX_REQUEST, Reply, Request, WireError};

    let behind_magic = [MAGIC.as_slice(), data].concat();
    for msg in [data, behind_magic.as_slice()] {
        let req = Request::decode(msg);
        let reply = Reply::decode(msg);
        assert!(
            req.is_err() || reply.is_err(),
            "both a request and a reply: {req:?} / {reply:?}"
        );
        // Where to cut an accepted message short: chosen by the input's last byte.
        let cut = usize::from(msg.last().copied().unwrap_or(0)) % msg.len().max(1);
        if let Ok(r) = req {
            assert!(msg.len() <= MAX_REQUEST, "{} bytes accepted", msg.len());
            let enc = r.encode();
            assert_eq!(
                enc.as_slice(),
                msg,
                "request decode→encode must be the identity"
            );
            assert_eq!(Request::decode(&enc).as_ref(), Ok(&r));
            assert!(
                Request::decode(&msg[..cut]).is_err(),
                "prefix of {cut} bytes"
            );
            assert!(Request::decode(&msg[..msg.len() - 1]).is_err());
            let longer = [msg, &[0]].concat();
            assert_eq!(Request::decode(&longer), Err(WireError::Trailing(1)));
        }
        if let Ok(r) = reply {
            assert!(msg.len() <= MAX_REPLY, "{} bytes accepted", msg.len());
            let enc = r.encode();
            assert_eq!(
                enc.as_slice(),
                msg,
                "reply decode→encode must be the identity"
            );
            assert_eq!(Reply::decode(&enc).as_ref(), Ok(&r));
            assert!(Reply::decode(&msg[..cut]).is_err(), "prefix of {cut} bytes");
            assert!(Reply::decode(&msg[..msg.len() - 1]).is_err());
            let longer = [msg, &[0]].concat();
            assert_eq!(Reply::decode(&longer), Err(WireError::Trailing(1)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::soft::frame::Header;

    #[test]
    fn rdma_answers_put_proven_by_an_echoed_checksum_alone() {
        // Found by a 10-minute libFuzzer run: a reply-less 200 echoing the PUT's checksum is
        // the documented proof of an RDMA PUT, which the body's cross-check used to reject.
        rdma_answers(include_bytes!(
            "../../fuzz/seeds/rdma_answers/regression-crc-echo-on-unparsed-head.bin"
        ));
    }

    #[test]
    fn rdma_answers_take_garbage_and_real_answers() {
        rdma_answers(&[]);
        rdma_answers(b"\x05HTTP/1.1 200 OK\r\n\r\n");
        let granted = "\x09HTTP/1.1 200 OK\r\nx-amz-rdma-protocol: hipobj-rc-v2\r\n\
            x-amz-rdma-reply: 200:xyz\r\nx-amz-rdma-session: 00112233445566778899aabbccddeeff\r\n\
            x-amz-rdma-psn: abcdef\r\nx-amz-rdma-qpn: 1234\r\nx-amz-rdma-bytes-transferred: 99999999\r\n\
            x-amz-rdma-fabric: verbs\r\nContent-Length: 0\r\n\r\n";
        rdma_answers(granted.as_bytes());
        let declined = "\x01HTTP/1.1 501 Not Implemented\r\nx-amz-rdma-reply: 501\r\n\
            x-amz-rdma-fabric: soft\r\nContent-Length: 0\r\n\r\n";
        rdma_answers(declined.as_bytes());
    }

    #[test]
    fn daemon_wire_seeds_replay() {
        use crate::attach::wire::{MAGIC, Reply, Request};
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/daemon_wire");
        let (mut n, mut requests, mut replies) = (0, 0, 0);
        for e in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            daemon_wire(&data);
            let behind_magic = [MAGIC.as_slice(), &data].concat();
            for msg in [&data, &behind_magic] {
                requests += usize::from(Request::decode(msg).is_ok());
                replies += usize::from(Reply::decode(msg).is_ok());
            }
            n += 1;
        }
        // The seeds are real messages of both directions (and one rejection), not noise.
        assert!(n >= 6, "{n} seeds");
        assert!(
            requests >= 4 && replies >= 3,
            "{requests} requests, {replies} replies"
        );
        assert!(requests + replies < n, "no seed is a rejection");
    }

    #[test]
    fn daemon_wire_takes_garbage_and_every_message() {
        use crate::attach::wire::{ClientStatus, ErrorKind, Reply, Request};
        daemon_wire(&[]);
        daemon_wire(b"HOD1");
        daemon_wire(&[0xff; 300]);
        let msgs = [
            Request::Status.encode(),
            Request::RegisterHost { len: u64::MAX }.encode(),
            Request::Deregister {
                buf: 3,
                timeout_ms: 5000,
            }
            .encode(),
            Reply::Done.encode(),
            Reply::Object { id: 1 }.encode(),
            Reply::Buffer { id: u32::MAX }.encode(),
            Reply::Queue {
                sq_entries: 64,
                cq_entries: 128,
                timestamps: false,
            }
            .encode(),
            Reply::Status(vec![ClientStatus::default(); 3]).encode(),
            Reply::Error {
                kind: ErrorKind::Other(0),
                message: "é".into(),
            }
            .encode(),
        ];
        for m in msgs {
            daemon_wire(&m);
            // Every single-byte change is either refused or canonical again.
            for i in 0..m.len() {
                let mut w = m.clone();
                w[i] ^= 0x81;
                daemon_wire(&w);
            }
        }
    }

    #[test]
    fn soft_frame_seeds_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/soft_frame");
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            soft_frame(&std::fs::read(e.unwrap().path()).unwrap());
            n += 1;
        }
        assert!(n >= 16, "{n} seeds");
    }

    #[test]
    fn soft_frame_accepts_garbage_and_valid_frames() {
        soft_frame(&[]);
        soft_frame(&[0xff; 100]);
        let mut h = Header::new(Opcode::Connect, 0);
        h.len = CONNECT_PAYLOAD;
        h.aux = 5;
        let mut v = h.encode().to_vec();
        v.push(1);
        v.extend_from_slice(&[0; 43]);
        soft_frame(&v);
        for i in 0..HEADER_LEN {
            let mut w = v.clone();
            w[i] ^= 0x5a;
            soft_frame(&w);
        }
        // A WRITE frame with its trailer, then with a wrong trailer.
        let mut w = Header::new(Opcode::Write, 1);
        w.flags = crate::fabric::soft::frame::FIRST | crate::fabric::soft::frame::LAST;
        w.len = 5;
        w.rkey = 9;
        w.addr = 0x1000;
        let mut f = w.encode().to_vec();
        f.extend_from_slice(b"hello");
        let t = trailer_of(&f);
        f.extend_from_slice(&t);
        soft_frame(&f);
        let n = f.len();
        f[n - 1] ^= 1;
        soft_frame(&f);
    }
}
