//! An engine PUT over plain HTTP carries the body's CRC64NVME, so a body damaged on the way is
//! refused by the server instead of stored: a relay between the engine and the gateway flips
//! one byte of the first PUT body it forwards. The PUT must not complete as stored, and no
//! object with the damaged bytes may exist; the same PUT without the relay stores exactly.

#[path = "../../gateway/tests/support/raw.rs"]
mod raw;
#[path = "../../gateway/tests/support/rig.rs"]
mod rig;

use engine::{Fabric, RegisterOptions};
use hipobj_gateway::Gateway;
use hipobj_gateway::fault_relay::{Fault, FaultKind, Relay};
use raw::{ACCESS, SECRET, call};
use rig::{pattern, run_one};
use ring_api::BufSlice;
use ring_api::opcode::Put;

#[test]
fn a_put_body_damaged_on_the_way_is_refused_not_stored() {
    let dir = tempfile::tempdir().unwrap();
    let gw = Gateway::builder()
        .listen("127.0.0.1:0")
        .root_dir(dir.path())
        .credentials(ACCESS, SECRET)
        .start()
        .unwrap();
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/sum", "", &[], b"").status(), 200);
    let data = pattern(300_000, 21);
    let relay = Relay::start(
        "127.0.0.1:0",
        &a.to_string(),
        vec![Fault::times(FaultKind::FlipRequest(123_456), 1)],
    )
    .unwrap();

    let engine = rig::engine_builder(relay.addr())
        .fabric(Fabric::Http)
        .build()
        .unwrap();
    let buf = engine
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    engine.copy_in(buf, 0, &data).unwrap();
    let mut q = engine.queue(4).unwrap();
    let obj = engine.object("sum", "damaged").unwrap();
    let put = Put::new(obj, BufSlice::new(buf, 0, data.len() as u64))
        .no_retry()
        .build();
    let c = run_one(&mut q, put);
    assert!(relay.stats().flips() > 0, "the relay never flipped a byte");
    assert!(!c.is_ok(), "a damaged body was reported stored: {c:?}");
    // Nothing damaged was stored.
    let r = call(a, "GET", "/sum/damaged", "", &[], b"");
    assert_eq!(
        r.status(),
        404,
        "an object was stored: {} bytes",
        r.body.len()
    );

    // The same PUT straight to the gateway stores the exact bytes.
    let direct = rig::engine_builder(a).fabric(Fabric::Http).build().unwrap();
    let buf2 = direct
        .register_host(1 << 20, RegisterOptions::pageable())
        .unwrap();
    direct.copy_in(buf2, 0, &data).unwrap();
    let mut q2 = direct.queue(4).unwrap();
    let obj2 = direct.object("sum", "exact").unwrap();
    let c = run_one(
        &mut q2,
        Put::new(obj2, BufSlice::new(buf2, 0, data.len() as u64)).build(),
    );
    assert!(c.is_ok(), "{c:?}");
    let r = call(a, "GET", "/sum/exact", "", &[], b"");
    assert_eq!(r.status(), 200);
    assert!(r.body == data);
    gw.shutdown();
}
