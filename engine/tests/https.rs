//! `https://` endpoints: the engine's HTTP fabric speaks TLS inside the worker's mio loop.
//! A TLS front (rustls, a server certificate from a fresh test CA) relays to a real s3s-fs.
//! With the CA trusted, range-gets, a PUT and a HEAD complete byte-exact; with an unknown CA
//! every op is refused at once with a typed error naming the certificate problem.

mod common;

#[path = "../../cli/tests/support/tls_front.rs"]
mod tls_front;

use std::time::Duration;

use common::{S3sFs, builder, pattern, put_file};
use engine::{EngineError, Fabric, RegisterOptions};
use ring_api::opcode::{Head, Put, RangeGet};
use ring_api::{BufSlice, DataPath, ErrorClass, ErrorCode};
use s3_lite::net::tls::CertificateProblem;
use tls_front::TlsFront;

fn https_url(front: &TlsFront) -> String {
    format!("https://127.0.0.1:{}", front.port)
}

#[test]
fn range_gets_over_tls_are_byte_exact_with_the_right_ca() {
    let server = S3sFs::start();
    let data = pattern(3 << 20, 11);
    put_file(&server, "bkt", "obj.bin", &data);
    let front = TlsFront::start(server.addr);
    let dir = tempfile::tempdir().unwrap();
    let engine = builder(&server)
        .endpoint_url(https_url(&front))
        .ca_bundle(front.write_ca(dir.path()))
        .connections_per_worker(4)
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let buf = engine
        .register_host(4 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(64).unwrap();
    // Small and large ranges, several in flight (several TLS connections), one crossing the
    // object's end.
    let ranges: [(u64, u64); 6] = [
        (0, 1),
        (1000, 50_000),
        (1 << 20, 1 << 20),
        (7, 300_000),
        ((3 << 20) - 4096, 4096),
        (2 << 20, 65_536),
    ];
    let mut at = 0u64;
    let mut placed = Vec::new();
    for (i, &(off, len)) in ranges.iter().enumerate() {
        q.push(
            &RangeGet::new(obj, off, BufSlice::new(buf, at, len))
                .user_data(i as u64)
                .build(),
        )
        .unwrap();
        placed.push((at, off, len));
        at += len;
    }
    assert_eq!(
        q.wait(ranges.len(), Some(Duration::from_secs(60))),
        ranges.len()
    );
    for c in q.completion() {
        assert!(
            c.is_ok(),
            "range {} failed: {:?} {:?} (tls: {:?})",
            c.user_data(),
            c.error_code(),
            c.error_class(),
            engine.tls_failure()
        );
        let (at, off, len) = placed[c.user_data() as usize];
        assert_eq!(c.bytes(), len);
        assert_eq!(c.path(), Some(DataPath::Http));
        let off = off as usize;
        assert!(
            *engine.read(buf, at, len).unwrap() == data[off..off + len as usize],
            "range {} differs",
            c.user_data()
        );
    }
    // A PUT from registered memory over TLS, then HEAD: the bytes arrived whole.
    let fresh = pattern(700_000, 5);
    engine.copy_in(buf, 0, &fresh).unwrap();
    let new_obj = engine.object("bkt", "over-tls.bin").unwrap();
    q.push(
        &Put::new(new_obj, BufSlice::new(buf, 0, fresh.len() as u64))
            .user_data(100)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(60))), 1);
    let put = q.completion().next().unwrap();
    assert!(put.is_ok(), "put failed: {:?}", put.error_code());
    assert_eq!(
        std::fs::read(server.root.path().join("bkt/over-tls.bin")).unwrap(),
        fresh
    );
    q.push(&Head::new(new_obj).user_data(101).build()).unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(60))), 1);
    let head = q.completion().next().unwrap();
    assert!(head.is_ok());
    assert_eq!(head.aux(), fresh.len() as u64);
    assert_eq!(engine.tls_failure(), None);
}

#[test]
fn an_unknown_ca_is_refused_with_the_certificate_problem_named() {
    let server = S3sFs::start();
    put_file(&server, "bkt", "obj.bin", &pattern(100_000, 3));
    let front = TlsFront::start(server.addr);
    // No bundle: the built-in Mozilla roots do not know the test CA.
    let engine = builder(&server)
        .endpoint_url(https_url(&front))
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(
        &RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096))
            .user_data(1)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert!(!c.is_ok(), "an unknown CA must be refused");
    assert_eq!(c.error_code(), Some(ErrorCode::AccessDenied));
    assert_eq!(c.error_class(), Some(ErrorClass::Transport));
    let problem = engine.tls_failure().expect("the refusal is named");
    assert_eq!(problem, CertificateProblem::UnknownIssuer);
    assert!(problem.to_string().contains("unknown CA"), "{problem}");

    // A bundle of another CA is no better.
    let other = TlsFront::start(server.addr);
    let dir = tempfile::tempdir().unwrap();
    let engine = builder(&server)
        .endpoint_url(https_url(&front))
        .ca_bundle(other.write_ca(dir.path()))
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(&RangeGet::new(obj, 0, BufSlice::new(buf, 0, 4096)).build())
        .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert_eq!(c.error_code(), Some(ErrorCode::AccessDenied));
    assert_eq!(
        engine.tls_failure(),
        Some(CertificateProblem::UnknownIssuer)
    );
}

#[test]
fn the_certificate_must_name_the_host() {
    let server = S3sFs::start();
    put_file(&server, "bkt", "obj.bin", &pattern(10_000, 3));
    // The certificate names localhost only; the engine connects to 127.0.0.1.
    let front = TlsFront::start_for(server.addr, &["localhost"]);
    let dir = tempfile::tempdir().unwrap();
    let engine = builder(&server)
        .endpoint_url(https_url(&front))
        .ca_bundle(front.write_ca(dir.path()))
        .build()
        .unwrap();
    let obj = engine.object("bkt", "obj.bin").unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();
    q.push(&RangeGet::new(obj, 0, BufSlice::new(buf, 0, 100)).build())
        .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(30))), 1);
    let c = q.completion().next().unwrap();
    assert_eq!(c.error_code(), Some(ErrorCode::AccessDenied));
    assert_eq!(
        engine.tls_failure(),
        Some(CertificateProblem::NotValidForName)
    );
}

#[test]
fn bad_bundles_are_refused_at_build_and_rdma_fabrics_build() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificates here\n").unwrap();
    let base = || {
        engine::Engine::builder()
            .endpoint_url("https://localhost:1")
            .credentials(s3_lite::credentials::Credentials::new("a", "b"))
            .region("us-east-1")
            .placement(engine::Placement::Workers(1))
    };
    let err = base().ca_bundle(&empty).build().unwrap_err();
    assert!(matches!(err, EngineError::Tls(_)), "{err}");
    assert!(err.to_string().contains("empty.pem"), "{err}");
    // An RDMA fabric named explicitly builds: its control exchanges speak TLS
    // (tests/https_rdma.rs); Auto and Http carry payloads over HTTPS.
    base().fabric(Fabric::Soft).build().unwrap();
    base().fabric(Fabric::Auto).build().unwrap();
}
