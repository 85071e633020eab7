//! Shapes every command's `--json` shares (docs/cli.md). Bytes per data path are one object,
//! `{"http": 1024, "rdma-soft": 4096}`, in `get`/`put` results and in both `bench` reports.

use serde::Serializer;
use serde::ser::SerializeMap;

/// Serializes `[(path, bytes), ...]` as `{"path": bytes, ...}` (for `#[serde(serialize_with)]`).
pub fn serialize_paths<S: Serializer, P: AsRef<str>>(
    paths: &[(P, u64)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(paths.len()))?;
    for (path, bytes) in paths {
        map.serialize_entry(path.as_ref(), bytes)?;
    }
    map.end()
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct Report {
        #[serde(serialize_with = "super::serialize_paths")]
        paths: Vec<(&'static str, u64)>,
    }

    #[test]
    fn paths_are_one_object() {
        let r = Report {
            paths: vec![("rdma-soft", 4096), ("http", 10)],
        };
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            serde_json::json!({"paths": {"rdma-soft": 4096, "http": 10}})
        );
    }
}
