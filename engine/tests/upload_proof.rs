//! The success rule of uploads on the engine (issue 33, docs/protocol.md "What proves a PUT"):
//! a PUT, UploadPart or CompleteMultipart completes `VERIFIED` when a server checksum proved
//! its bytes, and without it (still a success) when nothing did; a mismatch proven is an
//! error. Against our gateway, directly, over the soft fabric, and through the fault relay:
//! a server that proves nothing (`drop-header`), and a Complete answer cut short
//! (`content-length-minus=20` on the Complete answer: the upload was carried out, and the HEAD
//! after it proves it).

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use engine::{Engine, Fabric, RegisterOptions};
use hipobj_gateway::Gateway;
use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
use raw::{ACCESS, SECRET, call};
use rig::{pattern, run_one};
use ring_api::opcode::{CompleteMultipart, CreateMultipart, Put, UploadPart};
use ring_api::{BufSlice, Cqe, DataPath, PartNumber, UploadHandle};

const PART: u64 = 5 << 20;

fn gateway(root: &std::path::Path) -> hipobj_gateway::RunningGateway {
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(root)
        .credentials(ACCESS, SECRET)
        .start()
        .unwrap();
    assert_eq!(
        call(gw.local_addr(), "PUT", "/upl", "", &[], b"").status(),
        200
    );
    gw
}

fn http_engine(addr: std::net::SocketAddr) -> Engine {
    rig::engine_builder(addr)
        .fabric(Fabric::Http)
        .build()
        .unwrap()
}

/// One PUT of `data` as `upl/key`.
fn put(engine: &Engine, key: &str, data: &[u8]) -> Cqe {
    let buf = engine
        .register_host(data.len(), RegisterOptions::pageable())
        .unwrap();
    engine.copy_in(buf, 0, data).unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("upl", key).unwrap();
    run_one(
        &mut q,
        Put::new(obj, BufSlice::new(buf, 0, data.len() as u64)).build(),
    )
}

/// A multipart upload of `data` as `upl/key` in parts of [`PART`]: every completion (Create,
/// the parts, Complete), stopping at the first failure.
fn multipart(engine: &Engine, key: &str, data: &[u8]) -> Vec<Cqe> {
    let buf = engine
        .register_host(data.len(), RegisterOptions::pageable())
        .unwrap();
    engine.copy_in(buf, 0, data).unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("upl", key).unwrap();
    let mut steps = vec![run_one(&mut q, CreateMultipart::new(obj).build())];
    if !steps[0].is_ok() {
        return steps;
    }
    let h = UploadHandle(u32::try_from(steps[0].aux()).unwrap());
    let len = data.len() as u64;
    let mut n = 0u32;
    let mut off = 0;
    while off < len {
        n += 1;
        let l = PART.min(len - off);
        let part = PartNumber::new(n).unwrap();
        let c = run_one(
            &mut q,
            UploadPart::new(obj, h, part, BufSlice::new(buf, off, l)).build(),
        );
        steps.push(c);
        if !c.is_ok() {
            return steps;
        }
        off += l;
    }
    steps.push(run_one(
        &mut q,
        CompleteMultipart::new(obj, h, PartNumber::new(n).unwrap()).build(),
    ));
    steps
}

#[test]
fn a_put_the_server_echoed_is_verified_and_one_it_did_not_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let data = pattern(300_000, 3);
    let c = put(&http_engine(gw.local_addr()), "echoed", &data);
    assert!(c.is_ok() && c.verified(), "{c:?}");

    // A server that echoes no checksum (the relay drops it): stored, but nothing proved it.
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::always(FaultKind::DropHeader(
            "x-amz-checksum-crc64nvme".into(),
        ))],
    )
    .unwrap();
    let c = put(&http_engine(relay.addr()), "silent", &data);
    assert!(c.is_ok(), "an unproven PUT is a success: {c:?}");
    assert!(!c.verified(), "nothing proved it: {c:?}");
    let r = call(gw.local_addr(), "GET", "/upl/silent", "", &[], b"");
    assert!(r.body == data);
    gw.shutdown();
}

#[test]
fn a_soft_fabric_put_the_gateway_echoed_is_verified() {
    let dir = tempfile::tempdir().unwrap();
    let gw = rig::soft_gateway(dir.path());
    assert_eq!(
        call(gw.local_addr(), "PUT", "/upl", "", &[], b"").status(),
        200
    );
    let engine = rig::engine_builder(gw.local_addr())
        .fabric(Fabric::Soft)
        .build()
        .unwrap();
    let data = pattern(300_000, 4);
    let c = put(&engine, "soft", &data);
    assert!(c.is_ok() && c.verified(), "{c:?}");
    assert_eq!(c.path(), Some(DataPath::RdmaSoft), "{c:?}");
    gw.shutdown();
}

#[test]
fn a_multipart_upload_whose_complete_answer_was_cut_short_succeeds_verified() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(dir.path());
    let data = pattern((PART + 300_000) as usize, 5);
    // The answers with a body are Create's and Complete's (UploadPart answers have none):
    // the second is the Complete's, 20 bytes short, the connection closed after it.
    let relay = Relay::start(
        "127.0.0.1:0",
        &gw.local_addr().to_string(),
        vec![Fault::times(FaultKind::ContentLengthMinus(20), 1).every_nth(2)],
    )
    .unwrap();
    let steps = multipart(&http_engine(relay.addr()), "cut", &data);
    assert_eq!(relay.stats().faults(), 1, "the fault never hit");
    let done = steps.last().unwrap();
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert!(done.is_ok(), "the stored upload was failed: {done:?}");
    assert!(done.verified(), "the HEAD's CRC64NVME proves it: {done:?}");
    let r = call(gw.local_addr(), "GET", "/upl/cut", "", &[], b"");
    assert!(r.body == data);
    // The parts were proven by their echoed checksums.
    assert!(steps[1..3].iter().all(Cqe::verified), "{steps:?}");
    gw.shutdown();
}
