//! Fuzz bodies (the `fuzz/` targets are one-liners into here; unit tests run them too).

use crate::header::{LEN_PREFIX, header_len, parse};
use crate::plan::plan_reads;

/// `safetensors_header`: `data` is the start of a file; its size is taken as `data.len()`
/// plus a data section length from the last 4 bytes. A header that parses must tile the data
/// section, and the planned reads must stay inside it.
pub fn safetensors_header(data: &[u8]) {
    let extra = data
        .len()
        .checked_sub(4)
        .and_then(|i| data.get(i..))
        .map_or(0, |t| {
            u64::from(u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
        });
    let size = data.len() as u64 + extra;
    let Ok(n) = header_len(data, size) else {
        return;
    };
    let Some(json) = usize::try_from(n)
        .ok()
        .and_then(|n| data.get(LEN_PREFIX as usize..LEN_PREFIX as usize + n))
    else {
        return;
    };
    let Ok(h) = parse(json, size) else { return };
    assert_eq!(h.data_start + h.data_len, size);
    let mut at = 0;
    let spans: Vec<(u64, u64)> = h
        .tensors
        .iter()
        .map(|t| {
            assert_eq!(t.begin, at, "tensors tile the data section");
            assert_eq!(
                t.shape
                    .iter()
                    .try_fold(t.dtype.size(), |a, &d| a.checked_mul(d)),
                Some(t.len())
            );
            at = t.end;
            (t.begin, t.end)
        })
        .collect();
    let reads = plan_reads(h.data_start, h.data_len, &spans, 1 << 16, 1 << 20);
    let covered: u64 = reads.iter().map(|r| r.len).sum();
    assert_eq!(
        covered, h.data_len,
        "no holes: the reads cover the data section once"
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_body_accepts_a_valid_file_and_garbage() {
        // A data section of 4 zero bytes: the tail encodes 0 extra bytes, so the file is `f`.
        let json = br#"{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}"#;
        let mut f = (json.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(json);
        f.extend_from_slice(&[0, 0, 0, 0]);
        assert!(crate::header::parse(&f[8..8 + json.len()], f.len() as u64).is_ok());
        super::safetensors_header(&f);
        super::safetensors_header(b"");
        super::safetensors_header(&[0xff; 64]);
    }
}

#[cfg(test)]
mod seeds {
    /// The fuzz target's committed seeds (`fuzz/seeds/safetensors_header`) replay here too.
    #[test]
    fn the_fuzz_seeds_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/seeds/safetensors_header");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("seed directory") {
            let data = std::fs::read(entry.expect("entry").path()).expect("seed");
            super::safetensors_header(&data);
            n += 1;
        }
        assert!(n >= 5, "{n} seeds in {}", dir.display());
    }
}
