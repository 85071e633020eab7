//! `hipobj serve` names the CRC64NVME of exactly the body of a ranged GET it answers
//! (`x-hipobj-range-checksum-crc64nvme`, ranges up to 16 MiB) and the stored checksum for a
//! range that covers the whole object when asked (`x-amz-checksum-mode`); an RDMA-less plain
//! GET carries neither header it does not owe.

#[path = "support/raw.rs"]
mod raw;
#[path = "support/rig.rs"]
mod rig;

use raw::call;
use rig::{crc64, pattern};

const RANGE_CRC: &str = "x-hipobj-range-checksum-crc64nvme";

#[test]
fn ranged_answers_name_the_checksum_of_their_body() {
    let dir = tempfile::tempdir().unwrap();
    let gw = raw::start(dir.path());
    let a = gw.local_addr();
    assert_eq!(call(a, "PUT", "/rcsum", "", &[], b"").status(), 200);
    let data = pattern((17 << 20) + 5, 3);
    assert_eq!(call(a, "PUT", "/rcsum/obj", "", &[], &data).status(), 200);

    for (range, want) in [
        ("bytes=0-0", 0..1),
        ("bytes=1000-2000999", 1000..2_001_000),
        ("bytes=-777", data.len() - 777..data.len()),
        ("bytes=17825792-", 17_825_792..data.len()),
    ] {
        let r = call(a, "GET", "/rcsum/obj", "", &[("range", range)], b"");
        assert_eq!(r.status(), 206, "{range}");
        assert!(r.body == data[want.clone()], "{range}");
        assert_eq!(
            r.header(RANGE_CRC),
            Some(crc64(&data[want]).as_str()),
            "{range}"
        );
    }
    // Past 16 MiB the range streams without it (its length is still bound by Content-Range).
    let r = call(
        a,
        "GET",
        "/rcsum/obj",
        "",
        &[("range", "bytes=0-16777216")],
        b"",
    );
    assert_eq!(r.status(), 206);
    assert_eq!(r.body.len(), (16 << 20) + 1);
    assert_eq!(r.header(RANGE_CRC), None);
    // A whole-object 200 has no range checksum; with checksum mode, the stored one.
    let r = call(
        a,
        "GET",
        "/rcsum/obj",
        "",
        &[("x-amz-checksum-mode", "ENABLED")],
        b"",
    );
    assert_eq!(r.status(), 200);
    assert_eq!(r.header(RANGE_CRC), None);
    assert_eq!(
        r.header("x-amz-checksum-crc64nvme"),
        Some(crc64(&data).as_str())
    );
    // A range that covers every byte is the whole object: the stored checksum too.
    let small = pattern(1000, 4);
    assert_eq!(
        call(a, "PUT", "/rcsum/small", "", &[], &small).status(),
        200
    );
    let r = call(
        a,
        "GET",
        "/rcsum/small",
        "",
        &[("range", "bytes=0-"), ("x-amz-checksum-mode", "ENABLED")],
        b"",
    );
    assert_eq!(r.status(), 206);
    assert_eq!(
        r.header("x-amz-checksum-crc64nvme"),
        Some(crc64(&small).as_str())
    );
    assert_eq!(r.header(RANGE_CRC), Some(crc64(&small).as_str()));
    gw.shutdown();
}
