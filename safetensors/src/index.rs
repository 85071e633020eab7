//! A sharded model's `model.safetensors.index.json`: `{"weight_map": {tensor: shard file}}`.

use std::collections::BTreeMap;

/// The index file's name next to the shards.
pub const INDEX_NAME: &str = "model.safetensors.index.json";
/// A single-file model's name.
pub const SINGLE_NAME: &str = "model.safetensors";
/// Largest index file accepted.
pub const MAX_INDEX_LEN: u64 = 64 << 20;

/// The shards of a model and which tensor lives in which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    /// Shard file names relative to the index, sorted, each once.
    pub shards: Vec<String>,
    /// Tensor name to shard file name.
    pub weight_map: BTreeMap<String, String>,
}

/// Why an index was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// Not JSON, or not the expected shape.
    #[error("corrupt {INDEX_NAME}: {0}")]
    Json(String),
    /// A shard name that is not a plain relative path.
    #[error("corrupt {INDEX_NAME}: shard name {0:?} is not a relative file name")]
    ShardName(String),
}

fn plain_relative(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('/')
        && !name.chars().any(char::is_control)
        && name
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

impl ShardIndex {
    /// Parses an index file.
    pub fn parse(json: &[u8]) -> Result<Self, IndexError> {
        let value: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| IndexError::Json(e.to_string()))?;
        let map = value
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| IndexError::Json("no \"weight_map\" object".into()))?;
        let mut weight_map = BTreeMap::new();
        for (tensor, shard) in map {
            let shard = shard.as_str().ok_or_else(|| {
                IndexError::Json(format!("weight_map[{tensor:?}] is not a string"))
            })?;
            if !plain_relative(shard) {
                return Err(IndexError::ShardName(shard.to_owned()));
            }
            weight_map.insert(tensor.clone(), shard.to_owned());
        }
        if weight_map.is_empty() {
            return Err(IndexError::Json("the weight_map is empty".into()));
        }
        let mut shards: Vec<String> = weight_map.values().cloned().collect();
        shards.sort();
        shards.dedup();
        Ok(Self { shards, weight_map })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_each_shard_once() {
        let idx = ShardIndex::parse(
            br#"{"metadata":{"total_size":10},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors","c":"m-2.safetensors"}}"#,
        )
        .unwrap();
        assert_eq!(idx.shards, ["m-1.safetensors", "m-2.safetensors"]);
        assert_eq!(idx.weight_map["c"], "m-2.safetensors");
    }

    #[test]
    fn refuses_escaping_names_and_bad_shapes() {
        for bad in ["../x", "/etc/passwd", "a//b", "", "a/./b", "x\n"] {
            let json = serde_json::json!({"weight_map": {"t": bad}}).to_string();
            assert_eq!(
                ShardIndex::parse(json.as_bytes()),
                Err(IndexError::ShardName(bad.into())),
                "{bad:?}"
            );
        }
        assert!(ShardIndex::parse(br#"{"weight_map":{}}"#).is_err());
        assert!(ShardIndex::parse(br#"{"weight_map":{"a":1}}"#).is_err());
        assert!(ShardIndex::parse(br#"{}"#).is_err());
        assert!(ShardIndex::parse(b"nope").is_err());
    }
}
