//! End-to-end use of the header codecs the way a client and a gateway use them together:
//! a hipobj-rc-v2 PREPARE/READY exchange and a one-shot cuObject response (docs/protocol.md, hipobj-rc-v2; docs/rdma-headers.md, token-shape dispatch).

use std::net::Ipv4Addr;

use s3_lite::checksum::Crc64Nvme;
use s3_lite::rdma::v2::{self, Cookie, Op, Psn, RdmaChecksums, SessionId, Target, TargetQuery};
use s3_lite::rdma::{self, BytesTransferred, RcToken, Reply, ReplyClass, TokenKind, Transport};

fn header<'a>(headers: &'a [(&'static str, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
fn v2_prepare_ready_exchange() {
    // Client side: PREPARE for part 2 of a multipart upload.
    let client_token = RcToken {
        transport: Transport::Rc,
        qpn: 0x11,
        gid: rdma::gid_from_ipv4(Ipv4Addr::new(10, 0, 0, 7)),
        rkey: 0,
        addr: 0,
        length: 0,
        port: 1,
        lid: 0,
    };
    let target = Target {
        query: TargetQuery::Part {
            upload_id: "2~abc/def".into(),
            part_number: 2,
        },
        ..Target::new("bucket", "dir/obj 1")
    };
    let prepare = vec![
        (rdma::RDMA_PROTOCOL, v2::PROTOCOL.to_owned()),
        (rdma::RDMA_TOKEN, client_token.encode()),
        (rdma::RDMA_PSN, Psn::new(0x00c0de).unwrap().encode()),
        (rdma::RDMA_COOKIE, Cookie(0x5eed_f00d).encode()),
        (rdma::RDMA_OP, Op::Put.as_str().to_owned()),
        (rdma::RDMA_TARGET, target.encode()),
        (rdma::RDMA_SIZE, "4096".to_owned()),
    ];
    assert!(prepare.iter().all(|(n, _)| rdma::is_rdma_header(n)));
    assert_eq!(
        header(&prepare, rdma::RDMA_TARGET),
        Some("/bucket/dir/obj%201?uploadId=2~abc%2Fdef&partNumber=2")
    );

    // Gateway side: parse every header.
    v2::check_protocol(header(&prepare, rdma::RDMA_PROTOCOL)).unwrap();
    let op = Op::parse(header(&prepare, rdma::RDMA_OP).unwrap()).unwrap();
    let TokenKind::HipObjectRc(tok) =
        rdma::classify(header(&prepare, rdma::RDMA_TOKEN).unwrap()).unwrap()
    else {
        panic!("not an RC token")
    };
    assert_eq!(tok.token.nic_ipv4(), Some(Ipv4Addr::new(10, 0, 0, 7)));
    assert_eq!(
        Psn::parse(header(&prepare, rdma::RDMA_PSN).unwrap())
            .unwrap()
            .get(),
        0xc0de
    );
    let cookie = Cookie::parse_strict(header(&prepare, rdma::RDMA_COOKIE).unwrap()).unwrap();
    assert_eq!(
        Target::parse(op, header(&prepare, rdma::RDMA_TARGET).unwrap()),
        Ok(target)
    );
    assert_eq!(
        v2::parse_size(header(&prepare, rdma::RDMA_SIZE).unwrap()),
        Ok(4096)
    );
    assert_eq!(v2::parse_offset(header(&prepare, rdma::RDMA_OFFSET)), Ok(0));

    // Gateway answers PREPARE with its token; client checks the reply form v2 requires.
    let server_token = RcToken {
        qpn: 0x22,
        rkey: 0xabc,
        addr: 0x7f00_0000_0000,
        length: 4096,
        ..client_token
    };
    let reply = Reply::parse(&Reply::ok_with_token(server_token).encode()).unwrap();
    assert_eq!(
        (reply.classify(), reply.peer_token()),
        (ReplyClass::Success(200), Some(&server_token))
    );
    let session = SessionId([0x5a; 16]);
    assert_eq!(SessionId::parse(&session.encode()), Ok(session));

    // FINAL: cookie echo, bytes, both checksum generations.
    let data = vec![7u8; 4096];
    let sums = RdmaChecksums {
        crc64nvme: Some(Crc64Nvme::checksum(&data)),
        crc32c: None,
    };
    let mut fin: Vec<(&'static str, String)> = vec![
        (rdma::RDMA_PROTOCOL, v2::PROTOCOL.to_owned()),
        (rdma::RDMA_COOKIE, cookie.encode()),
        (
            rdma::RDMA_BYTES_TRANSFERRED,
            BytesTransferred::new(4096).encode(),
        ),
        (rdma::RDMA_CAPABILITIES, "mp".to_owned()),
    ];
    fin.extend(sums.headers());
    let pairs: Vec<(&str, &str)> = fin.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(
        Cookie::parse_strict(header(&fin, rdma::RDMA_COOKIE).unwrap()),
        Ok(cookie)
    );
    assert_eq!(
        rdma::bytes::from_headers(pairs.iter().copied()),
        Ok(Some(BytesTransferred::new(4096)))
    );
    assert_eq!(RdmaChecksums::from_headers(pairs.iter().copied()), Ok(sums));
    assert!(
        v2::Capabilities::parse(header(&fin, rdma::RDMA_CAPABILITIES).unwrap())
            .unwrap()
            .multipart()
    );
    // An old-generation-only client reads the same CRC.
    let old = v2::parse_legacy_checksum(header(&fin, rdma::RDMA_CHECKSUM).unwrap()).unwrap();
    assert_eq!(
        old.to_base64(),
        header(&fin, rdma::RDMA_CHECKSUM_CRC64NVME).unwrap()
    );
}

#[test]
fn one_shot_cuobject_response() {
    // Our gateway's reply strategy: reply 206 for a range, both byte-count headers.
    let desc = "00007f7c12340000:00800000:001a2b3c:0000:00abcd:1:00000000000000000000ffff0a000005";
    let TokenKind::CuObject(d) = rdma::classify(&format!("{desc};")).unwrap() else {
        panic!("not cuObject")
    };
    assert_eq!((d.remote_addr(), d.size()), (0x7f7c_1234_0000, 0x80_0000));
    let resp = [
        (rdma::RDMA_REPLY, Reply::PARTIAL.encode()),
        (rdma::RDMA_BYTES_TRANSFERRED, "1048576".to_owned()),
        (rdma::RDMA_BYTES, "1048576".to_owned()),
    ];
    let pairs = resp.iter().map(|(n, v)| (*n, v.as_str()));
    assert_eq!(
        rdma::bytes::from_headers(pairs),
        Ok(Some(BytesTransferred::new(1 << 20)))
    );
    assert_eq!(
        Reply::parse(&resp[0].1).unwrap().classify(),
        ReplyClass::Success(206)
    );
    // A decline, and the marker a v2 server adds to a 501 for a v1 one-shot RC token.
    assert_eq!(
        Reply::parse("501").unwrap().classify(),
        ReplyClass::Declined
    );
    assert_eq!(rdma::PROTOCOL_STATUS_UNSUPPORTED, "unsupported");
}
