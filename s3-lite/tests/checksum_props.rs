//! Property and vector tests of the S3 checksums (CRC64NVME, CRC32C) and their wire form.

use proptest::prelude::*;
use s3_lite::checksum::{
    self, Checksum, ChecksumAlgorithm, Crc32c, Crc64Nvme, decode_crc32c, decode_crc64nvme,
    encode_crc32c, encode_crc64nvme,
};

#[test]
fn published_check_values() {
    assert_eq!(Crc64Nvme::checksum(b"123456789"), 0xAE8B_1486_0A79_9888);
    assert_eq!(
        encode_crc64nvme(Crc64Nvme::checksum(b"123456789")),
        "rosUhgp5mIg="
    );
    assert_eq!(encode_crc64nvme(Crc64Nvme::checksum(b"")), "AAAAAAAAAAA=");
    assert_eq!(Crc32c::checksum(b"123456789"), 0xE306_9283);
    assert_eq!(checksum::HEADER_CRC64NVME, "x-amz-checksum-crc64nvme");
    assert_eq!(checksum::HEADER_CRC32C, "x-amz-checksum-crc32c");
    assert_eq!(checksum::HEADER_ALGORITHM, "x-amz-checksum-algorithm");
    assert_eq!(checksum::HEADER_MODE, "x-amz-checksum-mode");
}

/// Residue check: the CRC register after data‖crc_le(data) is the algorithm's fixed residue
/// (docs/rdma-headers.md, `checksum`: 0xF310303B2B6F6E42 before the final xor), a property independent of the
/// implementation's table layout.
#[test]
fn crc64nvme_residue() {
    for data in [&b""[..], b"123456789", b"hipObject"] {
        let crc = Crc64Nvme::checksum(data);
        let mut h = Crc64Nvme::new();
        h.update(data).update(&crc.to_le_bytes());
        assert_eq!(h.finish() ^ u64::MAX, 0xF310_303B_2B6F_6E42);
    }
}

/// A 3-part multipart upload's full-object CRC64NVME equals the CRC of the concatenation.
#[test]
fn multipart_full_object_combine() {
    let parts: Vec<Vec<u8>> = (0..3u8)
        .map(|p| {
            (0..(5000 + usize::from(p) * 777))
                .map(|i| (i as u8) ^ p)
                .collect()
        })
        .collect();
    let mut full = 0u64;
    let mut whole = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let crc = Crc64Nvme::checksum(part);
        full = if i == 0 {
            crc
        } else {
            Crc64Nvme::combine(full, crc, part.len() as u64)
        };
        whole.extend_from_slice(part);
    }
    assert_eq!(full, Crc64Nvme::checksum(&whole));
}

proptest! {
    #[test]
    fn combine_equals_concatenation(a in proptest::collection::vec(any::<u8>(), 0..2048),
                                    b in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let ab: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        prop_assert_eq!(
            Crc64Nvme::combine(Crc64Nvme::checksum(&a), Crc64Nvme::checksum(&b), b.len() as u64),
            Crc64Nvme::checksum(&ab)
        );
        prop_assert_eq!(
            Crc32c::combine(Crc32c::checksum(&a), Crc32c::checksum(&b), b.len() as u64),
            Crc32c::checksum(&ab)
        );
    }

    #[test]
    fn chunked_updates_equal_one_shot(data in proptest::collection::vec(any::<u8>(), 0..4096),
                                      cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8)) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
        points.sort_unstable();
        let (mut h64, mut h32, mut prev) = (Crc64Nvme::new(), Crc32c::new(), 0);
        for p in points.into_iter().chain([data.len()]) {
            h64.update(&data[prev..p]);
            h32.update(&data[prev..p]);
            prev = p;
        }
        prop_assert_eq!(h64.finish(), Crc64Nvme::checksum(&data));
        prop_assert_eq!(h32.finish(), Crc32c::checksum(&data));
        prop_assert_eq!(h64.len(), data.len() as u64);
    }

    #[test]
    fn base64_round_trip(v64 in any::<u64>(), v32 in any::<u32>()) {
        let e64 = encode_crc64nvme(v64);
        prop_assert_eq!(e64.len(), 12);
        prop_assert!(e64.ends_with('=') && !e64.ends_with("=="));
        prop_assert_eq!(decode_crc64nvme(&e64), Ok(v64));
        let e32 = encode_crc32c(v32);
        prop_assert_eq!(e32.len(), 8);
        prop_assert!(e32.ends_with("=="));
        prop_assert_eq!(decode_crc32c(&e32), Ok(v32));
        prop_assert_eq!(Checksum::from_base64(ChecksumAlgorithm::Crc64Nvme, &e64), Ok(Checksum::Crc64Nvme(v64)));
    }

    /// The strict parser accepts exactly one spelling: anything it accepts re-encodes to itself.
    #[test]
    fn strict_parser_accepts_only_canonical(s in "[A-Za-z0-9+/=]{8,12}") {
        if let Ok(v) = decode_crc64nvme(&s) {
            prop_assert_eq!(encode_crc64nvme(v), s.clone());
        }
        if let Ok(v) = decode_crc32c(&s) {
            prop_assert_eq!(encode_crc32c(v), s);
        }
    }
}
