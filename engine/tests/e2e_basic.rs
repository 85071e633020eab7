//! Vertical slice: builder → register → queue → worker → RangeGet/Head/Put over HTTP → CQE.

mod common;

use std::time::{Duration, Instant};

use common::{S3sFs, builder, pattern, put_file};
use engine::RegisterOptions;
use ring_api::opcode::{Get, Head, Put, RangeGet};
use ring_api::{BufSlice, DataPath, ErrorClass, ErrorCode};

#[test]
fn range_get_head_and_put_round_trip() {
    let server = S3sFs::start();
    let data = pattern(1 << 20, 7);
    put_file(&server, "bkt", "dir/obj.bin", &data);
    let engine = builder(&server).build().unwrap();
    let obj = engine.object("bkt", "dir/obj.bin").unwrap();
    let buf = engine
        .register_host(2 << 20, RegisterOptions::pageable())
        .unwrap();
    let mut q = engine.queue(64).unwrap();

    q.push(
        &RangeGet::new(obj, 1000, BufSlice::new(buf, 4096, 50_000))
            .user_data(1)
            .build(),
    )
    .unwrap();
    q.push(&Head::new(obj).user_data(2).build()).unwrap();
    let t = Instant::now();
    assert_eq!(q.wait(2, Some(Duration::from_secs(20))), 2);
    eprintln!("first two ops: {:?}", t.elapsed());
    let mut got: Vec<_> = q.completion().collect();
    got.sort_by_key(|c| c.user_data());
    let (rg, head) = (got[0], got[1]);
    assert!(
        rg.is_ok(),
        "range get failed: {:?} {:?}",
        rg.error_code(),
        rg.error_class()
    );
    assert_eq!(rg.bytes(), 50_000);
    assert_eq!(rg.path(), Some(DataPath::Http));
    assert_eq!(
        &*engine.read(buf, 4096, 50_000).unwrap(),
        &data[1000..51_000]
    );
    assert!(head.is_ok());
    assert_eq!(head.aux(), 1 << 20, "HEAD reports the object size in aux");

    // PUT a fresh object from registered memory, then GET it back whole.
    let fresh = pattern(300_000, 99);
    engine.copy_in(buf, 0, &fresh).unwrap();
    let new_obj = engine.object("bkt", "put/back.bin").unwrap();
    q.push(
        &Put::new(new_obj, BufSlice::new(buf, 0, 300_000))
            .user_data(3)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(20))), 1);
    let put = q.completion().next().unwrap();
    assert!(put.is_ok(), "put failed: {:?}", put.error_code());
    assert_eq!(put.bytes(), 300_000);
    assert_eq!(
        std::fs::read(server.root.path().join("bkt/put/back.bin")).unwrap(),
        fresh
    );

    q.push(
        &Get::new(new_obj, BufSlice::new(buf, 1 << 20, 1 << 20))
            .user_data(4)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(1, Some(Duration::from_secs(20))), 1);
    let get = q.completion().next().unwrap();
    assert!(get.is_ok(), "get failed: {:?}", get.error_code());
    assert_eq!(get.bytes(), 300_000);
    assert_eq!(&*engine.read(buf, 1 << 20, 300_000).unwrap(), &fresh[..]);

    // A missing key is a typed client error.
    let missing = engine.object("bkt", "nope").unwrap();
    q.push(&Head::new(missing).user_data(5).build()).unwrap();
    q.push(
        &RangeGet::new(missing, 0, BufSlice::new(buf, 0, 10))
            .user_data(6)
            .build(),
    )
    .unwrap();
    assert_eq!(q.wait(2, Some(Duration::from_secs(20))), 2);
    for c in q.completion() {
        assert_eq!(c.error_code(), Some(ErrorCode::NotFound), "{c:?}");
        assert_eq!(c.error_class(), Some(ErrorClass::Client));
    }
}
