//! A synthetic safetensors-style model object: an 8-byte little-endian header length, a JSON
//! header naming every tensor (`dtype`, `shape`, `data_offsets`), then the tensor bytes.
//!
//! The bytes are a pure function of the offset, so an object of any size is generated on the fly
//! (for the upload) and every byte of every range read back is verified without keeping the
//! object in memory.

use std::io::{Read, Seek, SeekFrom};

/// Tensor sizes cycled through when laying out the object: embedding rows, attention and MLP
/// weights, norms — a spread from 4 KiB to 16 MiB like a real checkpoint's.
const TENSOR_SIZES: [u64; 8] = [
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    16 << 20,
];

/// One tensor: its name and byte range within the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// `model.layers.N.<part>`.
    pub name: String,
    /// Absolute offset of the first byte in the object.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The layout and content function of a synthetic model.
#[derive(Debug, Clone)]
pub struct SyntheticModel {
    /// `8-byte length || JSON`.
    prefix: Vec<u8>,
    /// Tensors in file order.
    pub tensors: Vec<Tensor>,
    /// Object size in bytes.
    pub size: u64,
    seed: u64,
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

impl SyntheticModel {
    /// Lays out an object of exactly `size` bytes: the header, then tensors cycling through
    /// `TENSOR_SIZES`, the last one cut to what is left. The header's length depends on the
    /// layout, which depends on the room the header leaves, so the layout is redone with a
    /// larger header until it fits; a header that comes out shorter than the room reserved is
    /// padded with spaces (safetensors allows trailing spaces). Errors when `size` cannot even
    /// hold a header describing one tensor.
    pub fn new(size: u64, seed: u64) -> Result<Self, String> {
        let mut base = 0u64;
        loop {
            let layout = Self::layout(size.saturating_sub(base));
            let mut json = Self::header_json(&layout);
            let needed = 8 + json.len() as u64;
            if needed > base {
                // The header needs more room than reserved: reserve it and lay out again.
                base = needed;
                if layout.is_empty() || base >= size {
                    return Err(format!(
                        "--object-size {size} is too small for a synthetic model (its header \
                         alone needs about {needed} bytes)"
                    ));
                }
                continue;
            }
            // Pad up to the reserved room (a multiple of 8: `needed` always is).
            json.extend(std::iter::repeat_n(' ', (base - needed) as usize));
            let mut prefix = (json.len() as u64).to_le_bytes().to_vec();
            prefix.extend_from_slice(json.as_bytes());
            let tensors = layout
                .into_iter()
                .map(|(name, start, len)| Tensor {
                    name,
                    offset: base + start,
                    len,
                })
                .collect();
            return Ok(Self {
                size,
                prefix,
                tensors,
                seed,
            });
        }
    }

    /// Tensors `(name, offset in the data, len)` filling exactly `data_len` bytes.
    fn layout(data_len: u64) -> Vec<(String, u64, u64)> {
        let mut layout = Vec::new();
        let mut at = 0u64;
        let mut i = 0usize;
        while at < data_len {
            let len = TENSOR_SIZES[i % TENSOR_SIZES.len()].min(data_len - at);
            let name = format!(
                "model.layers.{}.t{}",
                i / TENSOR_SIZES.len(),
                i % TENSOR_SIZES.len()
            );
            layout.push((name, at, len));
            at += len;
            i += 1;
        }
        layout
    }

    /// The JSON header for `layout`, padded with spaces to an 8-byte boundary of the
    /// 8-byte length plus JSON (as safetensors writers do).
    fn header_json(layout: &[(String, u64, u64)]) -> String {
        let mut json = String::from(
            "{\"__metadata__\":{\"format\":\"pt\",\"generator\":\"hipobj bench --embedded\"}",
        );
        for (name, start, len) in layout {
            // bf16: two bytes per element, one row; a cut tensor of odd length is raw bytes.
            let (dtype, elems) = if len % 2 == 0 {
                ("BF16", len / 2)
            } else {
                ("U8", *len)
            };
            json.push_str(&format!(
                ",\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{elems}],\"data_offsets\":[{start},{}]}}",
                start + len
            ));
        }
        json.push('}');
        while !json.len().is_multiple_of(8) {
            json.push(' ');
        }
        json
    }

    /// Length of the header (8-byte length + JSON).
    pub fn header_len(&self) -> u64 {
        self.prefix.len() as u64
    }

    /// Writes the object's bytes at `offset..offset + out.len()` into `out`.
    pub fn fill(&self, offset: u64, out: &mut [u8]) {
        let byte_at = |pos: u64| (splitmix64(self.seed ^ (pos >> 3)) >> ((pos & 7) * 8)) as u8;
        // The header bytes, then single bytes up to an 8-byte boundary, then whole words.
        let prefix_len = self.prefix.len() as u64;
        let mut lead = 0usize;
        while lead < out.len() {
            let p = offset + lead as u64;
            if p >= prefix_len && p.is_multiple_of(8) {
                break;
            }
            lead += 1;
        }
        let (head, rest) = out.split_at_mut(lead);
        for (i, b) in head.iter_mut().enumerate() {
            let p = offset + i as u64;
            *b = usize::try_from(p)
                .ok()
                .and_then(|i| self.prefix.get(i))
                .copied()
                .unwrap_or_else(|| byte_at(p));
        }
        let mut pos = offset + lead as u64;
        let mut words = rest.chunks_exact_mut(8);
        for word in &mut words {
            word.copy_from_slice(&splitmix64(self.seed ^ (pos >> 3)).to_le_bytes());
            pos += 8;
        }
        for byte in words.into_remainder() {
            *byte = byte_at(pos);
            pos += 1;
        }
    }

    /// Index of the first byte of `data` that differs from the object at `offset`, if any.
    pub fn first_mismatch(&self, offset: u64, data: &[u8]) -> Option<usize> {
        let mut expected = [0u8; 4096];
        for (chunk_index, chunk) in data.chunks(expected.len()).enumerate() {
            let start = chunk_index * expected.len();
            let want = &mut expected[..chunk.len()];
            self.fill(offset + start as u64, want);
            if let Some(i) = chunk.iter().zip(want.iter()).position(|(a, b)| a != b) {
                return Some(start + i);
            }
        }
        None
    }

    /// A reader over the whole object (for uploads).
    pub fn reader(&self) -> SyntheticReader<'_> {
        SyntheticReader {
            model: self,
            pos: 0,
        }
    }
}

/// `Read + Seek` over a [`SyntheticModel`].
pub struct SyntheticReader<'a> {
    model: &'a SyntheticModel,
    pos: u64,
}

impl Read for SyntheticReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.model.size.saturating_sub(self.pos);
        let n = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        self.model.fill(self.pos, &mut buf[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for SyntheticReader<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.model.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before start")
        })?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_a_valid_safetensors_header() {
        let m = SyntheticModel::new(40 << 20, 7).unwrap();
        assert_eq!(m.size, 40 << 20);
        let mut head = vec![0u8; m.header_len() as usize];
        m.reader().read_exact(&mut head).unwrap();
        let n = u64::from_le_bytes(head[..8].try_into().unwrap());
        assert_eq!(n + 8, m.header_len());
        let json: serde_json::Value = serde_json::from_slice(&head[8..]).unwrap();
        let first = &m.tensors[0];
        let offsets = &json[&first.name]["data_offsets"];
        assert_eq!(offsets[0].as_u64().unwrap() + m.header_len(), first.offset);
        assert_eq!(m.tensors.last().map(|t| t.offset + t.len), Some(m.size));
    }

    /// `--object-size 64MiB` once built 70 MiB (tensors were added until the data alone
    /// reached the size, header not counted, the last 16 MiB tensor overshooting).
    #[test]
    fn the_object_is_exactly_the_requested_size() {
        for size in [64u64 << 20, 40 << 20, (1 << 20) + 1, 4096, 1000, 9_999_999] {
            let m = SyntheticModel::new(size, 1).unwrap();
            assert_eq!(m.size, size, "requested {size}");
            let last = m.tensors.last().unwrap();
            assert_eq!(last.offset + last.len, size);
            // The header still parses and its offsets are the tensors'.
            let mut head = vec![0u8; m.header_len() as usize];
            m.reader().read_exact(&mut head).unwrap();
            let n = u64::from_le_bytes(head[..8].try_into().unwrap());
            assert_eq!(n + 8, m.header_len());
            assert_eq!(m.header_len() % 8, 0);
            let json: serde_json::Value = serde_json::from_slice(&head[8..]).unwrap();
            let offsets = &json[&last.name]["data_offsets"];
            assert_eq!(offsets[1].as_u64().unwrap() + m.header_len(), size);
            let mut r = m.reader();
            r.seek(SeekFrom::Start(size - 3)).unwrap();
            let mut tail = Vec::new();
            r.read_to_end(&mut tail).unwrap();
            assert_eq!(tail.len(), 3, "the reader ends at the size");
        }
        assert!(SyntheticModel::new(100, 1).is_err());
        assert!(SyntheticModel::new(0, 1).is_err());
    }

    #[test]
    fn content_is_a_function_of_offset_and_mismatches_are_found() {
        let m = SyntheticModel::new(1 << 20, 3).unwrap();
        let mut a = vec![0u8; 10_000];
        m.fill(12_345, &mut a);
        let mut r = m.reader();
        r.seek(SeekFrom::Start(12_345)).unwrap();
        let mut b = vec![0u8; 10_000];
        r.read_exact(&mut b).unwrap();
        assert_eq!(a, b);
        assert_eq!(m.first_mismatch(12_345, &a), None);
        a[9_000] ^= 1;
        assert_eq!(m.first_mismatch(12_345, &a), Some(9_000));
    }

    #[test]
    fn word_fill_equals_byte_by_byte_definition() {
        let m = SyntheticModel::new(1 << 20, 9).unwrap();
        let header = m.header_len();
        for (offset, len) in [
            (0u64, 100usize),
            (header - 3, 29),
            (header + 5, 3),
            (header + 8, 64),
            (777_777, 1001),
        ] {
            let mut fast = vec![0u8; len];
            m.fill(offset, &mut fast);
            for (i, b) in fast.iter().enumerate() {
                let pos = offset + i as u64;
                let want = if pos < header {
                    let mut h = vec![0u8; header as usize];
                    m.reader().read_exact(&mut h).unwrap();
                    h[pos as usize]
                } else {
                    (splitmix64(9 ^ (pos >> 3)) >> ((pos & 7) * 8)) as u8
                };
                assert_eq!(*b, want, "offset {pos}");
            }
        }
    }
}
