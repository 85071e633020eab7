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

/// The bytes of one fuzz input handed to a decoder in pieces of the sizes the case names, as
/// a socket driver would read them (used by the `http` and `exchange` bodies).
pub(crate) struct Pieces<'a> {
    data: &'a [u8],
    fed: usize,
    sizes: std::slice::Iter<'a, usize>,
}

impl<'a> Pieces<'a> {
    pub(crate) fn new(data: &'a [u8], sizes: &'a [usize]) -> Self {
        Self {
            data,
            fed: 0,
            sizes: sizes.iter(),
        }
    }

    /// Whether every byte of the input has been handed out.
    pub(crate) fn all_fed(&self) -> bool {
        self.fed >= self.data.len()
    }

    /// Appends the next piece to `pending`; `false` once the input is used up (or the sizes
    /// run out): the peer closed.
    pub(crate) fn next_into(&mut self, pending: &mut Vec<u8>) -> bool {
        match self.sizes.next() {
            Some(&n) if self.fed < self.data.len() => {
                let end = self.fed.saturating_add(n).min(self.data.len());
                pending.extend_from_slice(self.data.get(self.fed..end).unwrap_or_default());
                self.fed = end;
                true
            }
            _ => false,
        }
    }
}
