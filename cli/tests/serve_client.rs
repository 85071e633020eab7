//! The cli's blocking S3 client against an in-process gateway (local directory backend):
//! every operation the client uses, byte-exact, and the typed errors it must see.

use std::io::Cursor;

use hipobj_cli::client::{ClientError, ClientSettings, S3Client};
use hipobj_cli::net::tls::TlsOptions;
use hipobj_cli::net::transport::Timeouts;
use hipobj_gateway::{Gateway, RunningGateway};
use s3_lite::credentials::Credentials;
use s3_lite::s3::{ByteRange, Endpoint};

const ACCESS: &str = "serve-test-key";
const SECRET: &str = "serve-test-secret/0123456789";

fn gateway(root: &std::path::Path) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .min_part_size(256 * 1024)
        .start()
        .unwrap()
}

fn client(gw: &RunningGateway, secret: &str) -> S3Client {
    S3Client::new(ClientSettings {
        endpoint: Endpoint::parse(&format!("http://{}", gw.local_addr())).unwrap(),
        credentials: Credentials::new(ACCESS, secret),
        region: "us-east-1".into(),
        tls: TlsOptions::default(),
        timeouts: Timeouts::default(),
    })
    .unwrap()
}

fn code(e: ClientError) -> String {
    match e {
        ClientError::S3(e) => e.code,
        other => panic!("expected an S3 error, got {other}"),
    }
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
        .collect()
}

#[test]
fn objects_ranges_multipart_listing_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let mut c = client(&gw, SECRET);
    c.create_bucket("serve-bucket").unwrap();
    assert_eq!(
        code(c.create_bucket("serve-bucket").unwrap_err()),
        "BucketAlreadyOwnedByYou"
    );

    let data = pattern(300_001, 1);
    let put = c
        .put_single(
            "serve-bucket",
            "dir/one.bin",
            &mut Cursor::new(&data),
            data.len() as u64,
            &mut |_| {},
        )
        .unwrap();
    let etag = put.etag.clone().unwrap();
    let meta = c.head("serve-bucket", "dir/one.bin").unwrap();
    assert_eq!(
        (meta.content_length, meta.etag.as_deref()),
        (Some(300_001), Some(etag.as_str()))
    );

    let mut out = Vec::new();
    let got = c
        .get("serve-bucket", "dir/one.bin", None, &mut out, &mut |_| {})
        .unwrap();
    assert!(
        got.checksum_verified,
        "whole-object GET checks the stored CRC64NVME"
    );
    assert_eq!(out, data);
    for (range, expect) in [
        (ByteRange::Inclusive(0, 0), 0..1),
        (ByteRange::Inclusive(1000, 200_999), 1000..201_000),
        (ByteRange::From(299_990), 299_990..300_001),
        (ByteRange::Suffix(17), 300_001 - 17..300_001),
        (ByteRange::Inclusive(299_000, 999_999), 299_000..300_001),
    ] {
        let mut out = Vec::new();
        c.get_with(
            "serve-bucket",
            "dir/one.bin",
            Some(range),
            Some(&etag),
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(out, &data[expect], "{range:?}");
    }
    let mut out = Vec::new();
    let err = c.get_with(
        "serve-bucket",
        "dir/one.bin",
        Some(ByteRange::Inclusive(0, 9)),
        Some("\"other\""),
        &mut out,
        &mut |_| {},
    );
    assert_eq!(code(err.unwrap_err()), "PreconditionFailed");
    let err = c.get(
        "serve-bucket",
        "dir/one.bin",
        Some(ByteRange::From(300_001)),
        &mut Vec::new(),
        &mut |_| {},
    );
    assert_eq!(code(err.unwrap_err()), "InvalidRange");

    // Multipart: 4 parts (3 full + 1 short), full-object CRC64NVME combined and checked.
    let big = pattern(3 * 262_144 + 1234, 2);
    let mp = c
        .put_multipart(
            "serve-bucket",
            "dir/big.bin",
            &mut Cursor::new(&big),
            big.len() as u64,
            262_144,
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(mp.parts, 4);
    assert!(
        mp.etag.as_deref().unwrap().ends_with("-4\""),
        "{:?}",
        mp.etag
    );
    let mut out = Vec::new();
    assert!(
        c.get("serve-bucket", "dir/big.bin", None, &mut out, &mut |_| {})
            .unwrap()
            .checksum_verified
    );
    assert_eq!(out, big);

    // Abort leaves nothing; a part after abort is NoSuchUpload.
    let id = c
        .create_multipart("serve-bucket", "dir/aborted", &Default::default())
        .unwrap();
    c.upload_part_bytes("serve-bucket", "dir/aborted", &id, 1, &[1u8; 1000])
        .unwrap();
    c.abort_multipart("serve-bucket", "dir/aborted", &id)
        .unwrap();
    assert_eq!(
        code(
            c.upload_part_bytes("serve-bucket", "dir/aborted", &id, 2, &[1u8; 10])
                .unwrap_err()
        ),
        "NoSuchUpload"
    );

    // Listing with a delimiter and across pages (1 100 keys > one page of 1000).
    for i in 0..1100 {
        c.put_single(
            "serve-bucket",
            &format!("many/{i:05}"),
            &mut Cursor::new(b"x"),
            1,
            &mut |_| {},
        )
        .unwrap();
    }
    let l = c.list("serve-bucket", None, Some("/")).unwrap();
    assert_eq!(
        l.common_prefixes,
        vec!["dir/".to_owned(), "many/".to_owned()]
    );
    assert!(l.objects.is_empty());
    let l = c.list("serve-bucket", Some("many/"), None).unwrap();
    assert_eq!((l.objects.len(), l.pages), (1100, 2));
    assert!(l.objects.windows(2).all(|w| w[0].key < w[1].key));
    let l = c.list("serve-bucket", Some("dir/"), None).unwrap();
    let keys: Vec<_> = l.objects.iter().map(|o| (o.key.as_str(), o.size)).collect();
    assert_eq!(
        keys,
        vec![("dir/big.bin", big.len() as u64), ("dir/one.bin", 300_001)]
    );

    c.delete("serve-bucket", "dir/one.bin").unwrap();
    assert_eq!(
        code(c.head("serve-bucket", "dir/one.bin").unwrap_err()),
        "NoSuchKey"
    );
    c.delete("serve-bucket", "dir/one.bin").unwrap(); // idempotent, as in S3
    gw.shutdown();
}

#[test]
fn wrong_secret_is_signature_does_not_match() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    client(&gw, SECRET).create_bucket("secret-bucket").unwrap();
    let mut bad = client(&gw, "not-the-secret");
    assert_eq!(
        code(bad.list("secret-bucket", None, None).unwrap_err()),
        "SignatureDoesNotMatch"
    );
    let err = bad.put_single(
        "secret-bucket",
        "k",
        &mut Cursor::new(vec![0u8; 100_000]),
        100_000,
        &mut |_| {},
    );
    assert_eq!(code(err.unwrap_err()), "SignatureDoesNotMatch");
    assert!(
        client(&gw, SECRET)
            .list("secret-bucket", None, None)
            .unwrap()
            .objects
            .is_empty(),
        "nothing stored"
    );
    gw.shutdown();
}
