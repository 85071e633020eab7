//! The safetensors header: `u64` little-endian length, then that many bytes of JSON.
//!
//! Everything here is untrusted (it comes from an object store): a malformed header is a
//! [`HeaderError`] naming what is wrong, never a panic, and a header that parses describes a
//! data section exactly — every tensor's span has the size its dtype and shape imply, the
//! spans are sorted, do not overlap and leave no holes (as the format requires), and they end
//! at the end of the data section.

use std::collections::BTreeMap;

/// Largest header the loader accepts (the `safetensors` package's own limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;
/// Bytes before the JSON: its length.
pub const LEN_PREFIX: u64 = 8;
/// Largest tensor rank accepted.
pub const MAX_RANK: usize = 64;

/// Element types of the format that occupy whole bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dtype {
    /// `BOOL` (one byte).
    Bool,
    /// `U8`.
    U8,
    /// `I8`.
    I8,
    /// `F8_E5M2`.
    F8E5M2,
    /// `F8_E4M3`.
    F8E4M3,
    /// `F8_E8M0`.
    F8E8M0,
    /// `I16`.
    I16,
    /// `U16`.
    U16,
    /// `F16`.
    F16,
    /// `BF16`.
    BF16,
    /// `I32`.
    I32,
    /// `U32`.
    U32,
    /// `F32`.
    F32,
    /// `C64` (two `f32`).
    C64,
    /// `F64`.
    F64,
    /// `I64`.
    I64,
    /// `U64`.
    U64,
}

impl Dtype {
    /// Every dtype, for tests and error messages.
    pub const ALL: [Self; 17] = [
        Self::Bool,
        Self::U8,
        Self::I8,
        Self::F8E5M2,
        Self::F8E4M3,
        Self::F8E8M0,
        Self::I16,
        Self::U16,
        Self::F16,
        Self::BF16,
        Self::I32,
        Self::U32,
        Self::F32,
        Self::C64,
        Self::F64,
        Self::I64,
        Self::U64,
    ];

    /// The header's spelling (`"F32"`, `"BF16"`, ...).
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Bool => "BOOL",
            Self::U8 => "U8",
            Self::I8 => "I8",
            Self::F8E5M2 => "F8_E5M2",
            Self::F8E4M3 => "F8_E4M3",
            Self::F8E8M0 => "F8_E8M0",
            Self::I16 => "I16",
            Self::U16 => "U16",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::I32 => "I32",
            Self::U32 => "U32",
            Self::F32 => "F32",
            Self::C64 => "C64",
            Self::F64 => "F64",
            Self::I64 => "I64",
            Self::U64 => "U64",
        }
    }

    /// Parses the header's spelling.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Bytes per element.
    #[must_use]
    pub const fn size(self) -> u64 {
        match self {
            Self::Bool | Self::U8 | Self::I8 | Self::F8E5M2 | Self::F8E4M3 | Self::F8E8M0 => 1,
            Self::I16 | Self::U16 | Self::F16 | Self::BF16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::C64 | Self::F64 | Self::I64 | Self::U64 => 8,
        }
    }
}

/// One tensor of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Its name (the JSON key).
    pub name: String,
    /// Element type.
    pub dtype: Dtype,
    /// Dimensions (empty: a scalar).
    pub shape: Vec<u64>,
    /// First byte, relative to the start of the data section.
    pub begin: u64,
    /// One past the last byte, relative to the start of the data section.
    pub end: u64,
}

impl TensorInfo {
    /// Bytes of data.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.end - self.begin
    }

    /// Whether it holds no bytes (a dimension is 0).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.begin == self.end
    }
}

/// A parsed, validated header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Tensors sorted by `begin` (ties: by name).
    pub tensors: Vec<TensorInfo>,
    /// `__metadata__` (string to string), empty when absent.
    pub metadata: BTreeMap<String, String>,
    /// Offset of the data section in the file (`8 + N`).
    pub data_start: u64,
    /// Bytes of the data section (the last tensor's `end`).
    pub data_len: u64,
}

/// Why a header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// The file is shorter than the 8-byte length prefix.
    #[error("not a safetensors file: {size} bytes, shorter than the 8-byte header length")]
    TooShort {
        /// File size.
        size: u64,
    },
    /// The length prefix is 0, over [`MAX_HEADER_LEN`] or past the end of the file.
    #[error(
        "corrupt safetensors header: header length {len} (file of {size} bytes, limit {MAX_HEADER_LEN})"
    )]
    BadLength {
        /// The prefix's value.
        len: u64,
        /// File size.
        size: u64,
    },
    /// The JSON does not parse, or is not an object.
    #[error("corrupt safetensors header: {0}")]
    Json(String),
    /// A tensor entry is malformed.
    #[error("corrupt safetensors header: tensor {name:?}: {reason}")]
    Tensor {
        /// The tensor's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The spans leave a hole, overlap, or do not end where the file does.
    #[error("corrupt safetensors header: {0}")]
    Layout(String),
}

/// Reads the length prefix and checks it against the file size: `N` with `8 + N <= size`.
pub fn header_len(first_bytes: &[u8], size: u64) -> Result<u64, HeaderError> {
    let prefix: [u8; 8] = first_bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(HeaderError::TooShort { size })?;
    let len = u64::from_le_bytes(prefix);
    if len == 0 || len > MAX_HEADER_LEN || len > size.saturating_sub(LEN_PREFIX) {
        return Err(HeaderError::BadLength { len, size });
    }
    Ok(len)
}

fn tensor_err(name: &str, reason: impl Into<String>) -> HeaderError {
    HeaderError::Tensor {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

fn parse_u64s(
    name: &str,
    field: &str,
    v: Option<&serde_json::Value>,
) -> Result<Vec<u64>, HeaderError> {
    let arr = v
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| tensor_err(name, format!("{field} is not an array")))?;
    arr.iter()
        .map(|x| {
            x.as_u64().ok_or_else(|| {
                tensor_err(
                    name,
                    format!("{field} holds {x}, not a non-negative integer"),
                )
            })
        })
        .collect()
}

fn parse_tensor(name: &str, v: &serde_json::Value) -> Result<TensorInfo, HeaderError> {
    let obj = v
        .as_object()
        .ok_or_else(|| tensor_err(name, "entry is not an object"))?;
    let dtype_s = obj
        .get("dtype")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| tensor_err(name, "no dtype string"))?;
    let dtype = Dtype::parse(dtype_s)
        .ok_or_else(|| tensor_err(name, format!("unsupported dtype {dtype_s:?}")))?;
    let shape = parse_u64s(name, "shape", obj.get("shape"))?;
    if shape.len() > MAX_RANK {
        return Err(tensor_err(
            name,
            format!("rank {} over {MAX_RANK}", shape.len()),
        ));
    }
    let offsets = parse_u64s(name, "data_offsets", obj.get("data_offsets"))?;
    let [begin, end] = offsets[..] else {
        return Err(tensor_err(name, "data_offsets is not [begin, end]"));
    };
    if end < begin {
        return Err(tensor_err(
            name,
            format!("data_offsets [{begin}, {end}] end before begin"),
        ));
    }
    let want = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| tensor_err(name, "shape overflows 64 bits of bytes"))?;
    if end - begin != want {
        return Err(tensor_err(
            name,
            format!(
                "data_offsets [{begin}, {end}] hold {} bytes; {} {shape:?} needs {want}",
                end - begin,
                dtype.name()
            ),
        ));
    }
    Ok(TensorInfo {
        name: name.to_owned(),
        dtype,
        shape,
        begin,
        end,
    })
}

/// Parses the JSON of a header of `header_len` bytes in a file of `size` bytes and checks
/// that its spans tile the data section `[8 + header_len, size)` exactly.
pub fn parse(json: &[u8], size: u64) -> Result<Header, HeaderError> {
    let header_len = json.len() as u64;
    let data_start = LEN_PREFIX + header_len;
    let data_len = size.checked_sub(data_start).ok_or(HeaderError::BadLength {
        len: header_len,
        size,
    })?;
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| HeaderError::Json(e.to_string()))?;
    let map = value
        .as_object()
        .ok_or_else(|| HeaderError::Json("the header is not a JSON object".into()))?;
    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(map.len());
    for (name, v) in map {
        if name == "__metadata__" {
            let m = v
                .as_object()
                .ok_or_else(|| HeaderError::Json("__metadata__ is not an object".into()))?;
            for (k, v) in m {
                let s = v.as_str().ok_or_else(|| {
                    HeaderError::Json(format!("__metadata__ value of {k:?} is not a string"))
                })?;
                metadata.insert(k.clone(), s.to_owned());
            }
            continue;
        }
        tensors.push(parse_tensor(name, v)?);
    }
    tensors.sort_by(|a, b| (a.begin, a.end, &a.name).cmp(&(b.begin, b.end, &b.name)));
    let mut at = 0u64;
    for t in &tensors {
        if t.begin != at {
            let what = if t.begin > at { "a hole" } else { "an overlap" };
            return Err(HeaderError::Layout(format!(
                "{what} before tensor {:?}: it starts at {} where the previous one ends at {at}",
                t.name, t.begin
            )));
        }
        at = t.end;
    }
    if at != data_len {
        return Err(HeaderError::Layout(format!(
            "the tensors end at byte {at} of the data section, the file holds {data_len}"
        )));
    }
    Ok(Header {
        tensors,
        metadata,
        data_start,
        data_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(json: &str, data_len: u64) -> (Vec<u8>, u64) {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        let size = v.len() as u64 + data_len;
        (v, size)
    }

    fn parse_file(json: &str, data_len: u64) -> Result<Header, HeaderError> {
        let (bytes, size) = file(json, data_len);
        let n = header_len(&bytes, size)?;
        parse(&bytes[8..8 + n as usize], size)
    }

    #[test]
    fn parses_tensors_metadata_and_sorts_by_offset() {
        let h = parse_file(
            r#"{"b":{"dtype":"F32","shape":[2,2],"data_offsets":[2,18]},
                "__metadata__":{"format":"pt"},
                "a":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},
                "s":{"dtype":"I64","shape":[],"data_offsets":[18,26]},
                "e":{"dtype":"U8","shape":[0,3],"data_offsets":[26,26]}}  "#,
            26,
        )
        .unwrap();
        let names: Vec<_> = h.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "s", "e"]);
        assert_eq!(h.tensors[1].shape, [2, 2]);
        assert_eq!(h.tensors[1].dtype, Dtype::F32);
        assert_eq!(h.metadata.get("format").map(String::as_str), Some("pt"));
        assert_eq!(h.data_len, 26);
        assert!(h.tensors[3].is_empty());
    }

    #[test]
    fn refuses_bad_lengths() {
        assert_eq!(
            header_len(&[1, 2, 3], 3),
            Err(HeaderError::TooShort { size: 3 })
        );
        assert!(matches!(
            header_len(&0u64.to_le_bytes(), 100),
            Err(HeaderError::BadLength { .. })
        ));
        assert!(matches!(
            header_len(&93u64.to_le_bytes(), 100),
            Err(HeaderError::BadLength { .. })
        ));
        assert_eq!(header_len(&92u64.to_le_bytes(), 100), Ok(92));
        assert!(matches!(
            header_len(&u64::MAX.to_le_bytes(), u64::MAX),
            Err(HeaderError::BadLength { .. })
        ));
    }

    #[test]
    fn refuses_inconsistent_tensors() {
        let cases = [
            (
                r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}"#,
                4,
                "needs 8",
            ),
            (
                r#"{"a":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}}"#,
                4,
                "unsupported dtype",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}"#,
                4,
                "non-negative",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}"#,
                4,
                "end before begin",
            ),
            (
                r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}"#,
                4,
                "[begin, end]",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}}"#,
                0,
                "overflows",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#,
                2,
                "a hole",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#,
                3,
                "an overlap",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                2,
                "file holds 2",
            ),
            (r#"[1,2]"#, 0, "not a JSON object"),
            (r#"{"a":1"#, 0, "EOF"),
            (r#"{"__metadata__":{"k":1}}"#, 0, "not a string"),
            (r#"{"a":"x"}"#, 0, "not an object"),
        ];
        for (json, data_len, want) in cases {
            let err = parse_file(json, data_len).unwrap_err().to_string();
            assert!(err.contains(want), "{json}: {err} (wanted {want:?})");
            assert!(err.starts_with("corrupt safetensors header"), "{err}");
        }
    }

    #[test]
    fn every_dtype_round_trips_its_name() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::parse(d.name()), Some(d));
        }
        assert_eq!(Dtype::parse("f32"), None);
    }
}
