//! The verbs layer on a host without RDMA: one typed "unavailable" answer, no panic, and the
//! constructors fail with that same answer. `VERBS_EXPECT_DEVICE=1` (the rxe VM lane) requires
//! a device, `=0` requires none; unset, whichever the host has is checked for its invariants
//! (so `cargo test` also passes on a workstation with an RDMA NIC).

use engine::verbs::{self, Context, Error, Probe, Unavailable};

/// `Some(true)`: a device is required; `Some(false)`: none may exist; `None`: either.
fn expectation() -> Option<bool> {
    match std::env::var("VERBS_EXPECT_DEVICE").as_deref() {
        Ok("1") => Some(true),
        Ok("0") => Some(false),
        _ => None,
    }
}

#[test]
fn probe_answers_unavailable_without_a_device() {
    let p = verbs::probe();
    if expectation() == Some(true) || (expectation().is_none() && p.is_available()) {
        let Probe::Available(devs) = &p else {
            panic!("VERBS_EXPECT_DEVICE=1 but probe says {p:?}")
        };
        assert!(!devs.is_empty());
        for d in devs {
            println!("{d:?}");
        }
        return;
    }
    let Probe::Unavailable(why) = &p else {
        panic!("this host was expected to have no RDMA device, probe says {p:?}")
    };
    // Which one depends on whether libibverbs is installed and on the kernel (this CI host:
    // libibverbs present, kernel without RDMA → NoKernelSupport); each is one clear sentence.
    assert!(
        matches!(
            why,
            Unavailable::NoDevice | Unavailable::NoKernelSupport | Unavailable::LibraryMissing(_)
        ),
        "{why:?}"
    );
    let msg = why.to_string();
    assert!(msg.starts_with("RDMA verbs unavailable: "), "{msg}");
    println!("probe: {msg}");
    // A second probe gives the same answer (the library is loaded once).
    assert_eq!(verbs::probe(), p);
}

#[test]
fn report_is_said_once() {
    let p = verbs::probe();
    let first = verbs::report_once(&p);
    assert!(first.is_some());
    assert_eq!(verbs::report_once(&p), None);
    assert_eq!(verbs::report_once(&p), None);
}

#[test]
fn open_fails_with_the_same_typed_reason() {
    if expectation() == Some(true) || verbs::probe().is_available() {
        return;
    }
    match Context::open(None) {
        Err(Error::Unavailable(u)) => {
            assert!(matches!(
                u,
                Unavailable::NoDevice
                    | Unavailable::NoKernelSupport
                    | Unavailable::LibraryMissing(_)
            ));
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    match Context::open(Some("mlx5_0")) {
        Err(Error::Unavailable(_)) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
}
