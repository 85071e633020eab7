//! The gateway's `--upstream` bridge in front of a real S3 server (s3s-fs): the same client
//! operations through the bridge, byte-exact, and the bytes really land upstream.

#[path = "support/s3s_fs.rs"]
mod s3s_fs;

use std::io::Cursor;

use hipobj_cli::client::{ClientError, ClientSettings, S3Client};
use hipobj_cli::net::tls::TlsOptions;
use hipobj_cli::net::transport::Timeouts;
use hipobj_gateway::{Gateway, RunningGateway};
use s3_lite::credentials::Credentials;
use s3_lite::s3::{ByteRange, Endpoint};
use s3s_fs::S3sFs;

const GW_ACCESS: &str = "bridge-client-key";
const GW_SECRET: &str = "bridge-client-secret";

fn bridge(upstream: &S3sFs) -> RunningGateway {
    Gateway::builder()
        .listen("127.0.0.1:0")
        .upstream(
            upstream.endpoint_url(),
            Credentials::new(s3s_fs::ACCESS_KEY, s3s_fs::SECRET_KEY),
            "us-east-1",
        )
        .credentials(GW_ACCESS, GW_SECRET)
        .start()
        .unwrap()
}

fn client(gw: &RunningGateway) -> S3Client {
    S3Client::new(ClientSettings {
        endpoint: Endpoint::parse(&format!("http://{}", gw.local_addr())).unwrap(),
        credentials: Credentials::new(GW_ACCESS, GW_SECRET),
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
        .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 11) as u8)
        .collect()
}

#[test]
fn bridge_round_trips_byte_exact() {
    let upstream = S3sFs::start();
    let gw = bridge(&upstream);
    let mut c = client(&gw);
    c.create_bucket("bridge-bucket").unwrap();
    assert!(
        upstream.root.path().join("bridge-bucket").is_dir(),
        "bucket created upstream"
    );

    let data = pattern(1_000_003, 3);
    c.put_single(
        "bridge-bucket",
        "a/obj.bin",
        &mut Cursor::new(&data),
        data.len() as u64,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(
        std::fs::read(upstream.root.path().join("bridge-bucket/a/obj.bin")).unwrap(),
        data,
        "stored upstream"
    );
    let mut out = Vec::new();
    c.get("bridge-bucket", "a/obj.bin", None, &mut out, &mut |_| {})
        .unwrap();
    assert_eq!(out, data);
    for (range, expect) in [
        (ByteRange::Inclusive(5, 500_004), 5..500_005),
        (ByteRange::From(999_999), 999_999..1_000_003),
        (ByteRange::Suffix(3), 1_000_000..1_000_003),
    ] {
        let mut out = Vec::new();
        c.get(
            "bridge-bucket",
            "a/obj.bin",
            Some(range),
            &mut out,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(out, &data[expect], "{range:?}");
    }
    assert_eq!(
        c.head("bridge-bucket", "a/obj.bin").unwrap().content_length,
        Some(1_000_003)
    );

    // Multipart, 3 parts of 5 MiB + a tail, through the bridge.
    let big = pattern(3 * (5 << 20) + 77, 4);
    let mp = c
        .put_multipart(
            "bridge-bucket",
            "a/big.bin",
            &mut Cursor::new(&big),
            big.len() as u64,
            5 << 20,
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(mp.parts, 4);
    let mut out = Vec::new();
    c.get("bridge-bucket", "a/big.bin", None, &mut out, &mut |_| {})
        .unwrap();
    assert!(out == big, "multipart object byte-exact");

    let l = c.list("bridge-bucket", Some("a/"), None).unwrap();
    let keys: Vec<_> = l.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["a/big.bin", "a/obj.bin"]);
    let l = c.list("bridge-bucket", None, Some("/")).unwrap();
    assert_eq!(l.common_prefixes, ["a/"]);

    c.delete("bridge-bucket", "a/obj.bin").unwrap();
    assert_eq!(
        code(c.head("bridge-bucket", "a/obj.bin").unwrap_err()),
        "NoSuchKey"
    );
    let mut out = Vec::new();
    assert_eq!(
        code(
            c.get("bridge-bucket", "missing", None, &mut out, &mut |_| {})
                .unwrap_err()
        ),
        "NoSuchKey"
    );
    gw.shutdown();
}
