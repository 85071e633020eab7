//! Fuzz bodies (`fuzz/fuzz_targets/*` are one-liners into these). Not a stable API.

use crate::fabric::soft::frame::{CONNECT_PAYLOAD, HEADER_LEN, Opcode, decode_header};

/// The soft fabric's frame decoder on untrusted bytes: never panics, and a header that decodes
/// re-encodes to exactly the bytes it came from (the encoding is canonical). For pairing
/// frames, the RC token payload must round-trip through `s3_lite`'s codec too.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::soft::frame::Header;

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
    }
}
