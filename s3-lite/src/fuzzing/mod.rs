//! Fuzz bodies, kept in the library so unit tests can run them on their seed corpora and the
//! `fuzz/` targets stay one-liners. Each body asserts properties (round trips, conservation of
//! input), not merely "does not crash".

pub mod exchange;
pub mod http;
pub mod http_server;
pub mod rdma;
pub mod rdma_answers;
pub mod s3xml;
pub mod sigv4;

/// The committed seed corpus of one fuzz target (`fuzz/seeds/<target>/*`), sorted by name, as
/// `(path, bytes)`; panics (tests only) when fewer than `min` seeds exist.
#[cfg(test)]
pub(crate) fn seeds(target: &str, min: usize) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= min,
        "expected at least {min} seeds in {}",
        dir.display()
    );
    files
        .into_iter()
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}
