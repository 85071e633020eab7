//! The type system forbids two producers (or two consumers) on one ring. Each case in
//! `tests/compile_fail/` must fail to compile with the error in its `.stderr` snapshot.
//! Regenerate snapshots with `TRYBUILD=overwrite cargo test -p ring-api --test compile_fail`
//! and review the diff.

#[test]
fn compile_fail() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/compile_fail/*.rs");
}
