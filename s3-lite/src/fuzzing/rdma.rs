//! Fuzz bodies for the RDMA header codecs and the checksum wire forms.
//!
//! Each body takes arbitrary bytes and asserts properties, not just "no panic":
//! - decode → encode → decode gives the same value (the encoder's output is accepted);
//! - the encoder's output is canonical (re-encoding it is the identity; where the format is
//!   fixed-width lower-case, the canonical form equals the lower-cased input);
//! - related parsers agree (dispatch vs the family parser, streaming vs one-shot CRC).
//!
//! The `fuzz/` targets call these; the unit test below runs every body over `fuzz/seeds/<target>`.

use crate::checksum::{self, Crc32c, Crc64Nvme};
use crate::rdma::v2::{self, Capabilities, Cookie, Op, Psn, RdmaChecksums, SessionId, Target};
use crate::rdma::{
    self, BytesTransferred, DcDescriptor, DescriptorWithSuffix, RcToken, Reply, TokenWithSuffix,
};

/// `x-amz-rdma-token` as a hipObject RC token (hex form, suffix form, and the binary layout).
pub fn rc_token(data: &[u8]) {
    let _ = rc_token_checked(data);
}

/// `x-amz-rdma-token` as a cuObject DC descriptor.
pub fn dc_descriptor(data: &[u8]) {
    let _ = dc_descriptor_checked(data);
}

/// `x-amz-rdma-reply`.
pub fn rdma_reply(data: &[u8]) {
    let _ = rdma_reply_checked(data);
}

/// `x-amz-rdma-bytes-transferred` / `x-amz-rdma-bytes` (input: one value, or two separated by
/// `\n` for the consistency helper).
pub fn rdma_bytes(data: &[u8]) {
    let _ = rdma_bytes_checked(data);
}

/// hipobj-rc-v2 scalar headers: the first byte picks the header (`a` session, `b` strict cookie,
/// `c` lenient cookie, `d` PSN, `e` QPN, `f` mr-addr, `g` mr-rkey, `h` op, `i` size, `j` offset,
/// `k` capabilities, `l` old checksum, `m` header block of `name: value` lines for the checksum
/// collector); the rest is the value.
pub fn v2_headers(data: &[u8]) {
    let _ = v2_headers_checked(data);
}

/// `x-amz-rdma-target`: the first byte's low bit picks the op (even GET, odd PUT).
pub fn v2_target(data: &[u8]) {
    let _ = v2_target_checked(data);
}

/// `x-amz-rdma-token` shape dispatch.
pub fn token_dispatch(data: &[u8]) {
    let _ = token_dispatch_checked(data);
}

/// Checksum base64 parsers, plus streaming/one-shot/combine agreement over the raw bytes.
pub fn checksum_base64(data: &[u8]) {
    let _ = checksum_base64_checked(data);
}

// The `_checked` variants return whether the main parser accepted the input, so the seed test can
// make sure every corpus holds both accepted and rejected inputs.

fn rc_token_checked(data: &[u8]) -> bool {
    if let Some(bytes) = data.first_chunk::<{ rdma::token::TOKEN_BYTES }>()
        && let Ok(t) = RcToken::from_bytes(bytes)
    {
        assert_eq!(&t.to_bytes(), bytes, "binary round trip");
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return false;
    };
    if let Ok(t) = RcToken::decode(s) {
        let enc = t.encode();
        assert_eq!(
            enc,
            s.to_ascii_lowercase(),
            "88-hex form is canonical lower case"
        );
        check_gid(&t.gid);
    }
    let Ok(t) = TokenWithSuffix::parse(s) else {
        return false;
    };
    let enc = t.encode();
    assert_eq!(
        TokenWithSuffix::parse(&enc),
        Ok(t),
        "suffix form round trip"
    );
    assert_eq!(enc.len(), if t.suffix.is_some() { 88 + 34 } else { 88 });
    assert_eq!(
        TokenWithSuffix::parse(&enc).map(|x| x.encode()),
        Ok(enc.clone()),
        "canonical"
    );
    true
}

fn check_gid(gid: &[u8; 16]) {
    if let Some(ip) = rdma::client_nic_ipv4(gid) {
        let mapped = rdma::gid_from_ipv4(ip);
        assert_eq!(mapped.get(10..), gid.get(10..), "IPv4 part of the GID");
        assert_eq!(rdma::client_nic_ipv4(&mapped), Some(ip));
    } else {
        assert_ne!(gid.get(10..12), Some(&[0xff, 0xff][..]));
    }
}

fn dc_descriptor_checked(data: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(data) else {
        return false;
    };
    if let Ok(d) = DcDescriptor::parse(s) {
        assert_eq!(d.format(), s, "bare descriptor formats back to its input");
        if let Some(ip) = d.nic_ipv4() {
            assert_eq!(rdma::gid_from_ipv4(ip).get(10..), d.gid.get(10..));
        }
    }
    let Ok(d) = DescriptorWithSuffix::parse(s) else {
        return false;
    };
    let enc = d.format();
    assert_eq!(DescriptorWithSuffix::parse(&enc), Ok(d), "round trip");
    assert_eq!(enc.len(), if d.suffix.is_some() { 81 + 34 } else { 81 });
    assert!(
        enc.bytes()
            .all(|b| b == b':' || b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    true
}

fn rdma_reply_checked(data: &[u8]) -> bool {
    let Ok(r) = Reply::parse_bytes(data) else {
        return false;
    };
    let enc = r.encode();
    assert_eq!(Reply::parse(&enc), Ok(r), "reply round trip");
    assert_eq!(Reply::parse(&enc).map(|x| x.encode()), Ok(enc), "canonical");
    if let Reply::Code { code, .. } = r {
        assert!((100..=599).contains(&code));
    }
    let (class, status) = (r.classify(), r.status());
    let consistent = match class {
        rdma::ReplyClass::Success(c) => status == Some(c) && matches!(c, 200 | 204 | 206),
        rdma::ReplyClass::Declined => status == Some(501),
        rdma::ReplyClass::Failure(c) => c == status && !matches!(c, Some(200 | 204 | 206 | 501)),
    };
    assert!(
        consistent,
        "inconsistent classification {class:?} for {status:?}"
    );
    true
}

fn rdma_bytes_checked(data: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(data) else {
        return false;
    };
    if let Some((a, b)) = s.split_once('\n') {
        let both = rdma::bytes::from_values(Some(a), Some(b));
        if let Ok(Some(v)) = &both {
            let (pa, pb) = (BytesTransferred::parse(a), BytesTransferred::parse(b));
            assert_eq!(pa.as_ref().map(|x| x.count), Ok(v.count));
            assert_eq!(pb.as_ref().map(|x| x.count), Ok(v.count));
        }
        let pairs = [(rdma::RDMA_BYTES_TRANSFERRED, a), ("X-Amz-Rdma-Bytes", b)];
        assert_eq!(
            rdma::bytes::from_headers(pairs),
            both,
            "pair lookup equals value lookup"
        );
        return matches!(both, Ok(Some(_)));
    }
    let Ok(v) = BytesTransferred::parse(s) else {
        return false;
    };
    let enc = v.encode();
    assert_eq!(BytesTransferred::parse(&enc), Ok(v), "bytes round trip");
    if !s.starts_with('0') && !s.contains("/0") {
        assert_eq!(enc, s, "no leading zeros → identical");
    }
    true
}

fn v2_headers_checked(data: &[u8]) -> bool {
    let Some((&sel, rest)) = data.split_first() else {
        return false;
    };
    let Ok(s) = std::str::from_utf8(rest) else {
        return false;
    };
    match sel.wrapping_sub(b'a') % 13 {
        0 => SessionId::parse(s).map(|v| {
            assert_eq!(v.encode(), s.to_ascii_lowercase());
        }),
        1 => Cookie::parse_strict(s).map(|v| {
            assert_ne!(v.0, 0);
            assert_eq!(Cookie::parse_strict(&v.encode()), Ok(v));
            assert_eq!(v.encode(), s.to_ascii_lowercase());
        }),
        2 => Cookie::parse_lenient(s).map(|v| {
            assert_eq!(Cookie::parse_lenient(&v.encode()), Ok(v));
            assert_eq!(Cookie::parse_strict(s).is_ok(), v.0 != 0);
        }),
        3 => Psn::parse(s).map(|v| {
            assert!((1..=0xff_ffff).contains(&v.get()));
            assert_eq!(v.encode(), s.to_ascii_lowercase());
            assert_eq!(Psn::new(v.get()), Ok(v));
        }),
        4 => v2::parse_qpn(s).map(|v| {
            assert!((1..=0xff_ffff).contains(&v));
            assert_eq!(v2::parse_qpn(&v2::encode_hex(u64::from(v))), Ok(v));
        }),
        5 => v2::parse_mr_addr(s).map(|v| assert_eq!(v2::parse_mr_addr(&v2::encode_hex(v)), Ok(v))),
        6 => v2::parse_mr_rkey(s)
            .map(|v| assert_eq!(v2::parse_mr_rkey(&v2::encode_hex(u64::from(v))), Ok(v))),
        7 => Op::parse(s).map(|v| {
            assert_eq!(Op::parse(v.as_str()), Ok(v));
            assert!(v.as_str().eq_ignore_ascii_case(s));
        }),
        8 => v2::parse_size(s).map(|v| {
            assert!((1..=v2::MAX_SIZE).contains(&v));
            assert_eq!(v2::parse_size(&v.to_string()), Ok(v));
        }),
        9 => v2::parse_offset(Some(s))
            .map(|v| assert_eq!(v2::parse_offset(Some(&v.to_string())), Ok(v))),
        10 => Capabilities::parse(s).map(|v| {
            let enc = v.encode();
            assert_eq!(Capabilities::parse(&enc).as_ref(), Ok(&v));
            assert!(v.tokens.iter().all(|t| !t.is_empty() && !t.contains(',')));
        }),
        11 => {
            return v2::parse_legacy_checksum(s).is_ok_and(|c| {
                let enc = v2::legacy_checksum_value(&c);
                assert_eq!(v2::parse_legacy_checksum(&enc), Ok(c));
                true
            });
        }
        _ => {
            let pairs = s.lines().filter_map(|l| l.split_once(": "));
            return RdmaChecksums::from_headers(pairs).is_ok_and(|c| {
                let h = c.headers();
                let back = RdmaChecksums::from_headers(h.iter().map(|(n, v)| (*n, v.as_str())));
                assert_eq!(back, Ok(c), "emitted headers (both generations) read back");
                true
            });
        }
    }
    .is_ok()
}

fn v2_target_checked(data: &[u8]) -> bool {
    let Some((&sel, rest)) = data.split_first() else {
        return false;
    };
    let op = if sel & 1 == 0 { Op::Get } else { Op::Put };
    let Ok(s) = std::str::from_utf8(rest) else {
        return false;
    };
    let Ok(t) = Target::parse(op, s) else {
        return false;
    };
    let enc = t.encode();
    assert_eq!(
        Target::parse(op, &enc).as_ref(),
        Ok(&t),
        "target round trip"
    );
    assert_eq!(
        Target::parse(op, &enc).map(|x| x.encode()),
        Ok(enc),
        "canonical"
    );
    true
}

fn token_dispatch_checked(data: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(data) else {
        return false;
    };
    let classified = rdma::classify(s);
    // Each family parser that accepts the value must be the one dispatch picks, with the same
    // value: one header, one parse, whoever reads it.
    let unterminated = s.strip_suffix(';').unwrap_or(s);
    let family = [
        TokenWithSuffix::parse(s)
            .ok()
            .map(rdma::TokenKind::HipObjectRc),
        DescriptorWithSuffix::parse(s)
            .ok()
            .map(rdma::TokenKind::CuObject),
        rdma::OfiToken::parse(unterminated)
            .ok()
            .map(rdma::TokenKind::Ofi),
        rdma::RcShimToken::parse(unterminated)
            .ok()
            .map(rdma::TokenKind::RcShim),
    ];
    for kind in family.into_iter().flatten() {
        assert_eq!(
            classified.as_ref(),
            Ok(&kind),
            "a family parser accepts what dispatch does not pick"
        );
    }
    let Ok(kind) = classified else {
        return false;
    };
    let enc = kind.encode();
    assert_eq!(
        rdma::classify(&enc).as_ref(),
        Ok(&kind),
        "dispatch round trip"
    );
    match &kind {
        rdma::TokenKind::HipObjectRc(t) => assert_eq!(TokenWithSuffix::parse(s).as_ref(), Ok(t)),
        rdma::TokenKind::CuObject(d) => assert_eq!(DescriptorWithSuffix::parse(s).as_ref(), Ok(d)),
        rdma::TokenKind::Ofi(o) => assert_eq!(
            rdma::OfiToken::parse(s.strip_suffix(';').unwrap_or(s)).as_ref(),
            Ok(o)
        ),
        rdma::TokenKind::RcShim(r) => assert_eq!(
            rdma::RcShimToken::parse(s.strip_suffix(';').unwrap_or(s)).as_ref(),
            Ok(r)
        ),
    }
    true
}

fn checksum_base64_checked(data: &[u8]) -> bool {
    // Streaming vs one-shot vs combine, split at a data-chosen point.
    let split = data
        .first()
        .map_or(0, |&b| usize::from(b) % (data.len() + 1));
    let (a, b) = data.split_at(split.min(data.len()));
    let whole64 = Crc64Nvme::checksum(data);
    let mut h = Crc64Nvme::new();
    h.update(a).update(b);
    assert_eq!(h.finish(), whole64, "chunked CRC64NVME");
    let len_b = u64::try_from(b.len()).unwrap_or(u64::MAX);
    assert_eq!(
        Crc64Nvme::combine(Crc64Nvme::checksum(a), Crc64Nvme::checksum(b), len_b),
        whole64
    );
    let whole32 = Crc32c::checksum(data);
    let mut h = Crc32c::new();
    h.update(a).update(b);
    assert_eq!(h.finish(), whole32, "chunked CRC32C");
    assert_eq!(
        Crc32c::combine(Crc32c::checksum(a), Crc32c::checksum(b), len_b),
        whole32
    );
    assert_eq!(
        checksum::decode_crc64nvme(&checksum::encode_crc64nvme(whole64)),
        Ok(whole64)
    );
    assert_eq!(
        checksum::decode_crc32c(&checksum::encode_crc32c(whole32)),
        Ok(whole32)
    );

    // Strict parsers: anything accepted is exactly the canonical encoding.
    let Ok(s) = std::str::from_utf8(data) else {
        return false;
    };
    let v64 =
        checksum::decode_crc64nvme(s).inspect(|v| assert_eq!(checksum::encode_crc64nvme(*v), s));
    let v32 = checksum::decode_crc32c(s).inspect(|v| assert_eq!(checksum::encode_crc32c(*v), s));
    v64.is_ok() || v32.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Checked = fn(&[u8]) -> bool;

    const TARGETS: [(&str, Checked); 8] = [
        ("rc_token", rc_token_checked),
        ("dc_descriptor", dc_descriptor_checked),
        ("rdma_reply", rdma_reply_checked),
        ("rdma_bytes", rdma_bytes_checked),
        ("v2_headers", v2_headers_checked),
        ("v2_target", v2_target_checked),
        ("token_dispatch", token_dispatch_checked),
        ("checksum_base64", checksum_base64_checked),
    ];

    /// Runs every body over its committed seeds; each corpus must hold accepted and rejected inputs.
    #[test]
    fn bodies_pass_on_seed_corpora() {
        for (name, body) in TARGETS {
            let dir = format!("{}/../fuzz/seeds/{name}", env!("CARGO_MANIFEST_DIR"));
            let mut entries: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{dir}: {e}"))
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            assert!(entries.len() >= 3, "{name}: only {} seeds", entries.len());
            let (mut accepted, mut rejected) = (0, 0);
            for path in entries {
                let data = std::fs::read(&path).unwrap();
                if body(&data) {
                    accepted += 1
                } else {
                    rejected += 1
                }
            }
            assert!(accepted > 0, "{name}: no seed is accepted by the parser");
            assert!(rejected > 0, "{name}: no seed exercises a rejection");
        }
    }

    /// The public one-liner entry points are the checked bodies.
    #[test]
    fn public_bodies_run() {
        for f in [
            rc_token,
            dc_descriptor,
            rdma_reply,
            rdma_bytes,
            v2_headers,
            v2_target,
            token_dispatch,
            checksum_base64,
        ] {
            f(b"");
            f(b"\xff\xfe");
            f(b"200:");
        }
    }
}
