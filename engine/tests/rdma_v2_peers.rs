//! Conformance of the engine's dialect negotiation and `mp` gating against small v2-only peers
//! (issue 12; docs/interop.md; the peer is `gateway/tests/support/v2_peer.rs`): with the
//! engine's defaults (`Dialect::Auto`), an endpoint refusing `rc-persistent` is spoken to in
//! `hipobj-rc-v2` and completions say so; UploadPart goes over v2 only to a peer that advertised
//! `mp`, and a peer that ignores the target's query keeps the upload intact (parts over HTTP).

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;
#[path = "../../gateway/tests/support/v2_peer.rs"]
mod v2_peer;

use std::sync::{Arc, Mutex};

use engine::{Fabric, RegisterOptions};
use raw::call;
use rig::{crc64, pattern, run_one};
use ring_api::opcode::{CompleteMultipart, CreateMultipart, Get, Put, UploadPart};
use ring_api::{BufSlice, DataPath, PartNumber, UploadHandle, WireDialect};
use v2_peer::{Peer, Seen, gateway, start_peer};

const MIB: u64 = 1 << 20;

/// PUT and GET a small object, then a two-part upload (5 MiB + 1 MiB + 3); the stored object
/// must equal the parts; returns the completions of the two parts.
fn run(peer: Peer) -> (Vec<ring_api::Cqe>, Arc<Mutex<Seen>>) {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let g = gw.local_addr();
    assert_eq!(call(g, "PUT", "/peerb", "", &[], b"").status(), 200);
    let (p, seen) = start_peer(g, peer);
    // The engine's defaults (Dialect::Auto), soft fabric.
    let engine = rig::engine_builder(p).fabric(Fabric::Soft).build().unwrap();
    let buf = engine
        .register_host(24 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(8).unwrap();

    // PUT then GET: negotiated to hipobj-rc-v2 (the peer refuses rc-persistent).
    let small = pattern(64 * 1024 + 5, 3);
    engine.copy_in(buf, 0, &small).unwrap();
    let obj = engine.object("peerb", "small").unwrap();
    let c = run_one(
        &mut q,
        Put::new(obj, BufSlice::new(buf, 0, small.len() as u64))
            .user_data(1)
            .build(),
    );
    assert!(c.is_ok(), "{peer:?} PUT: {c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{peer:?} PUT path");
    assert_eq!(c.dialect(), Some(WireDialect::RcV2), "{peer:?} PUT dialect");
    let c = run_one(
        &mut q,
        Get::new(obj, BufSlice::new(buf, MIB, MIB))
            .user_data(2)
            .build(),
    );
    assert!(c.is_ok(), "{peer:?} GET: {c:?}");
    assert_eq!(c.dialect(), Some(WireDialect::RcV2), "{peer:?} GET dialect");
    let back = engine.read(buf, MIB, small.len() as u64).unwrap().to_vec();
    assert!(back == small, "{peer:?}: GET bytes");

    let parts = [pattern(5 * MIB as usize, 7), pattern(MIB as usize + 3, 8)];
    let mp = engine.object("peerb", "mp/obj").unwrap();
    let c = run_one(&mut q, CreateMultipart::new(mp).user_data(3).build());
    assert!(c.is_ok(), "{peer:?} Create: {c:?}");
    let upload = UploadHandle(u32::try_from(c.aux()).unwrap());
    let mut at = 2 * MIB;
    let mut done = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        engine.copy_in(buf, at, part).unwrap();
        let n = PartNumber::new(i as u32 + 1).unwrap();
        let c = run_one(
            &mut q,
            UploadPart::new(mp, upload, n, BufSlice::new(buf, at, part.len() as u64))
                .user_data(10 + i as u64)
                .build(),
        );
        assert!(c.is_ok(), "{peer:?} UploadPart {}: {c:?}", i + 1);
        done.push(c);
        at += 8 * MIB;
    }
    let c = run_one(
        &mut q,
        CompleteMultipart::new(mp, upload, PartNumber::new(2).unwrap())
            .user_data(20)
            .build(),
    );
    assert!(c.is_ok(), "{peer:?} Complete: {c:?}");
    let r = call(g, "GET", "/peerb/mp/obj", "", &[], b"");
    assert_eq!(r.status(), 200);
    let want = parts.concat();
    assert_eq!(r.body.len(), want.len(), "{peer:?}: stored size");
    assert_eq!(crc64(&r.body), crc64(&want), "{peer:?}: stored checksum");
    (done, seen)
}

/// A v2 server that never advertises `mp` and ignores the target's query: the parts go over
/// HTTP and the object is intact. Before issue 12 the engine did not speak v2 by default
/// (rc-persistent 404 → HTTP), and with `Dialect::RcV2` it sent the parts over v2, where this
/// peer overwrote the object with each part (the stored size check fails).
#[test]
fn v2_server_without_mp_gets_parts_over_http() {
    let (parts, seen) = run(Peer::NoMp);
    for c in &parts {
        assert_eq!(c.path(), Some(DataPath::Http), "part path: {c:?}");
        assert_eq!(c.dialect(), Some(WireDialect::Http));
    }
    let seen = seen.lock().unwrap();
    assert!(
        seen.targets.iter().all(|t| !t.contains('?')),
        "no part went over v2: {:?}",
        seen.targets
    );
    assert!(seen.rc_persistent >= 1, "rc-persistent was tried first");
}

/// A v2 server that advertises `mp` (our gateway's answers passed through): once learned (from
/// the PUT's PREPARE), parts go over v2 and the object is intact.
#[test]
fn v2_server_with_mp_gets_parts_over_v2() {
    let (parts, seen) = run(Peer::Mp);
    for c in &parts {
        assert_eq!(c.path(), Some(DataPath::RdmaSoft), "part path: {c:?}");
        assert_eq!(c.dialect(), Some(WireDialect::RcV2));
    }
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.targets
            .iter()
            .filter(|t| t.contains("partNumber="))
            .count(),
        2,
        "{:?}",
        seen.targets
    );
}

/// A v2 server that refuses the credential scope's service `s3` (the ROCm reference verifier
/// wants `hipobj`): the engine re-signs the PREPARE once with `hipobj` and keeps that service
/// for the endpoint, so only the first v2 request is refused. Before issue 12 every PREPARE was
/// refused and every op went over HTTP.
#[test]
fn v2_server_wanting_service_hipobj_gets_it_after_one_refusal() {
    let (parts, seen) = run(Peer::HipobjOnly);
    for c in &parts {
        assert_eq!(c.dialect(), Some(WireDialect::RcV2), "part: {c:?}");
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.refused_service, 1, "{:?}", seen.services);
    assert_eq!(seen.services.first().map(String::as_str), Some("s3"));
    assert!(
        seen.services.iter().skip(1).all(|s| s == "hipobj"),
        "{:?}",
        seen.services
    );
}
