//! Property tests of the RDMA header codecs: encode → decode is the identity on every valid
//! value, and no parser panics on arbitrary input.

use std::net::Ipv4Addr;

use proptest::prelude::*;
use s3_lite::rdma::v2::{self, Capabilities, Cookie, Op, Psn, SessionId, Target, TargetQuery};
use s3_lite::rdma::{
    self, AddrSize, BytesTransferred, DcDescriptor, DescriptorWithSuffix, OfiToken, RcShimToken,
    RcToken, Reply, TokenKind, TokenWithSuffix, Transport,
};

fn rc_token() -> impl Strategy<Value = RcToken> {
    (
        prop_oneof![Just(Transport::Dc), Just(Transport::Rc)],
        0u32..=0xff_ffff,
        any::<[u8; 16]>(),
        any::<u32>(),
        any::<u64>(),
        any::<u64>(),
        any::<u8>(),
        any::<u16>(),
    )
        .prop_map(
            |(transport, qpn, gid, rkey, addr, length, port, lid)| RcToken {
                transport,
                qpn,
                gid,
                rkey,
                addr,
                length,
                port,
                lid,
            },
        )
}

fn descriptor() -> impl Strategy<Value = DcDescriptor> {
    (
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        0u32..=0xff_ffff,
        any::<bool>(),
        any::<[u8; 16]>(),
    )
        .prop_map(
            |(addr, size, rkey, lid, dctn, gid_present, gid)| DcDescriptor {
                addr,
                size,
                rkey,
                lid,
                dctn,
                gid_present,
                gid,
            },
        )
}

fn suffix() -> impl Strategy<Value = Option<AddrSize>> {
    proptest::option::of(
        (any::<u64>(), any::<u64>()).prop_map(|(addr, size)| AddrSize { addr, size }),
    )
}

proptest! {
    #[test]
    fn rc_token_round_trips(t in rc_token(), sfx in suffix()) {
        let hex = t.encode();
        prop_assert_eq!(hex.len(), 88);
        prop_assert!(hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        prop_assert_eq!(RcToken::decode(&hex), Ok(t));
        prop_assert_eq!(RcToken::decode(&hex.to_uppercase()), Ok(t));
        prop_assert_eq!(RcToken::from_bytes(&t.to_bytes()), Ok(t));
        let full = TokenWithSuffix { token: t, suffix: sfx };
        prop_assert_eq!(TokenWithSuffix::parse(&full.encode()), Ok(full));
        prop_assert_eq!(TokenWithSuffix::parse(&format!("{};", full.encode())), Ok(full));
        prop_assert_eq!(rdma::classify(&full.encode()), Ok(TokenKind::HipObjectRc(full)));
        let reply = Reply::ok_with_token(t);
        prop_assert_eq!(Reply::parse(&reply.encode()), Ok(reply));
    }

    #[test]
    fn gid_ipv4_mapping(ip in any::<u32>()) {
        let ip = Ipv4Addr::from(ip);
        prop_assert_eq!(rdma::client_nic_ipv4(&rdma::gid_from_ipv4(ip)), Some(ip));
    }

    #[test]
    fn descriptor_round_trips(d in descriptor(), sfx in suffix()) {
        let s = d.format();
        prop_assert_eq!(s.len(), 81);
        prop_assert_eq!(DcDescriptor::parse(&s), Ok(d));
        let full = DescriptorWithSuffix { descriptor: d, suffix: sfx };
        prop_assert_eq!(DescriptorWithSuffix::parse(&full.format()), Ok(full));
        prop_assert_eq!(rdma::classify(&format!("{};", full.format())), Ok(TokenKind::CuObject(full)));
    }

    #[test]
    fn reply_codes(code in 100u16..=599) {
        let r = Reply::code(code).unwrap();
        prop_assert_eq!(Reply::parse(&r.encode()), Ok(r));
        prop_assert_eq!(Reply::parse(&format!("{code}\r\n")), Ok(r));
        let class = r.classify();
        match code {
            200 | 204 | 206 => prop_assert_eq!(class, rdma::ReplyClass::Success(code)),
            501 => prop_assert_eq!(class, rdma::ReplyClass::Declined),
            _ => prop_assert_eq!(class, rdma::ReplyClass::Failure(Some(code))),
        }
    }

    #[test]
    fn reply_out_of_range(code in prop_oneof![0u64..100, 600u64..u64::MAX]) {
        prop_assert!(Reply::parse(&code.to_string()).is_err());
    }

    #[test]
    fn bytes_round_trip(count in any::<u64>(), extra in proptest::option::of(any::<u64>())) {
        let total = extra.map(|e| count.saturating_add(e));
        let b = BytesTransferred { count, total };
        prop_assert_eq!(BytesTransferred::parse(&b.encode()), Ok(b));
        let enc = b.encode();
        prop_assert_eq!(rdma::bytes::from_values(Some(&enc), Some(&count.to_string())), Ok(Some(b)));
    }

    #[test]
    fn v2_scalars_round_trip(session in any::<[u8; 16]>(), cookie in 1u32.., psn in 1u32..=0xff_ffff,
                             qpn in 1u32..=0xff_ffff, addr in any::<u64>(), rkey in any::<u32>(),
                             size in 1u64..=v2::MAX_SIZE, offset in any::<u64>()) {
        let s = SessionId(session);
        prop_assert_eq!(SessionId::parse(&s.encode()), Ok(s));
        prop_assert_eq!(Cookie::parse_strict(&Cookie(cookie).encode()), Ok(Cookie(cookie)));
        let p = Psn::new(psn).unwrap();
        prop_assert_eq!(Psn::parse(&p.encode()), Ok(p));
        prop_assert_eq!(Psn::parse(&p.encode().to_uppercase()), Ok(p));
        prop_assert_eq!(v2::parse_qpn(&v2::encode_hex(qpn.into())), Ok(qpn));
        prop_assert_eq!(v2::parse_mr_addr(&v2::encode_hex(addr)), Ok(addr));
        prop_assert_eq!(v2::parse_mr_rkey(&v2::encode_hex(rkey.into())), Ok(rkey));
        prop_assert_eq!(v2::parse_size(&size.to_string()), Ok(size));
        prop_assert_eq!(v2::parse_size(&(size + v2::MAX_SIZE).to_string()), Err(v2::V2Error::TooLarge));
        prop_assert_eq!(v2::parse_offset(Some(&offset.to_string())), Ok(offset));
    }

    #[test]
    fn target_round_trips(bucket in "[a-z0-9.-]{1,63}", key in "\\PC{1,200}", version in "\\PC{1,40}",
                          upload in "\\PC{1,60}", part in 1u16..=10_000) {
        let plain = Target::new(bucket.clone(), key.clone());
        prop_assert_eq!(Target::parse(Op::Get, &plain.encode()), Ok(plain.clone()));
        prop_assert_eq!(Target::parse(Op::Put, &plain.encode()), Ok(plain));
        let ver = Target { bucket: bucket.clone(), key: key.clone(), query: TargetQuery::VersionId(version) };
        prop_assert_eq!(Target::parse(Op::Get, &ver.encode()), Ok(ver.clone()));
        prop_assert!(Target::parse(Op::Put, &ver.encode()).is_err());
        let part = Target { bucket, key, query: TargetQuery::Part { upload_id: upload, part_number: part } };
        prop_assert_eq!(Target::parse(Op::Put, &part.encode()), Ok(part.clone()));
        prop_assert!(Target::parse(Op::Get, &part.encode()).is_err());
        // Only unreserved characters, '/', '%', '?', '&', '=' appear in an encoded target.
        prop_assert!(part.encode().bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.~/%?&=".contains(&b)));
    }

    #[test]
    fn shim_and_ofi_round_trip(id in any::<[u8; 16]>(), addr in any::<u64>(), size in any::<u64>(), rkey in any::<u32>(),
                               provider in "[A-Za-z0-9;_.-]{1,64}", ep in proptest::collection::vec(any::<u8>(), 1..=192),
                               key in any::<u64>()) {
        let shim = RcShimToken { conn_id: id, addr, size, rkey };
        prop_assert_eq!(rdma::classify(&shim.encode()), Ok(TokenKind::RcShim(shim)));
        let ofi = OfiToken { base: addr, size, provider, ep_name: ep, key };
        prop_assert!(ofi.encode().len() <= 512);
        prop_assert_eq!(rdma::classify(&ofi.encode()), Ok(TokenKind::Ofi(ofi)));
    }

    /// Arbitrary strings never panic any parser, and dispatch never accepts what its family
    /// parser rejects.
    #[test]
    fn no_parser_panics(s in "\\PC{0,200}|[0-9a-fA-F:;]{0,140}|[0-9/\\r\\n]{0,30}") {
        let _ = RcToken::decode(&s);
        let _ = TokenWithSuffix::parse(&s);
        let _ = DcDescriptor::parse(&s);
        let _ = Reply::parse(&s);
        let _ = BytesTransferred::parse(&s);
        let _ = SessionId::parse(&s);
        let _ = Cookie::parse_lenient(&s);
        let _ = Psn::parse(&s);
        let _ = v2::parse_qpn(&s);
        let _ = v2::parse_size(&s);
        let _ = Capabilities::parse(&s);
        let _ = v2::parse_legacy_checksum(&s);
        let _ = Target::parse(Op::Get, &s);
        let _ = Target::parse(Op::Put, &s);
        if let Ok(TokenKind::CuObject(d)) = rdma::classify(&s) {
            prop_assert_eq!(DescriptorWithSuffix::parse(&s), Ok(d));
        }
    }
}
