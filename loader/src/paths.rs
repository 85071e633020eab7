//! How reports name the path and the wire dialect that carried a completion's bytes, and the
//! per-path byte totals kept from them: shared by the loader's report, the CLI's `get`, `put`
//! and `bench`, and the Python package.

use ring_api::Cqe;

/// `--dialect`: parses `auto`, `rc-persistent`, `rc-v2` or `http` (the engine's `Dialect`).
pub fn parse_dialect(s: &str) -> Result<engine::Dialect, String> {
    match engine::Dialect::parse(s) {
        Some(d) if s.trim() != "cuobject" => Ok(d),
        _ => Err(format!(
            "--dialect {s:?}: expected auto, rc-persistent, rc-v2 or http"
        )),
    }
}

/// The name a completion's wire dialect goes by in reports and `--json` (`http`,
/// `rc-persistent`, `hipobj-rc-v2`, `cuobject`; `none` when not recorded).
#[must_use]
pub fn dialect_name(d: Option<ring_api::WireDialect>) -> &'static str {
    d.map_or("none", ring_api::WireDialect::as_str)
}

/// The name a completion's path goes by in reports and `--json` (the one naming of the CLI:
/// `get`/`put`, `bench` and `bench --embedded` all use it).
#[must_use]
pub fn path_name(p: Option<ring_api::DataPath>) -> &'static str {
    match p {
        Some(ring_api::DataPath::Http) => "http",
        Some(ring_api::DataPath::RdmaSoft) => "rdma-soft",
        Some(ring_api::DataPath::RdmaVerbs) => "rdma-verbs",
        _ => "none",
    }
}

/// Adds `bytes` carried by the path `name` to per-path totals kept in first-seen order.
pub fn add_path_bytes(paths: &mut Vec<(&'static str, u64)>, name: &'static str, bytes: u64) {
    match paths.iter_mut().find(|(p, _)| *p == name) {
        Some((_, b)) => *b += bytes,
        None => paths.push((name, bytes)),
    }
}

/// Bytes carried per path (`.0`) and per wire dialect (`.1`: `http`, `rc-persistent`,
/// `hipobj-rc-v2`, `cuobject`), in first-seen order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathBytes(pub Vec<(&'static str, u64)>, pub Vec<(&'static str, u64)>);

impl PathBytes {
    /// Adds `bytes` carried by the path `name`.
    pub fn add(&mut self, name: &'static str, bytes: u64) {
        add_path_bytes(&mut self.0, name, bytes);
    }

    /// Counts `bytes` of a successful completion under its path and its dialect.
    pub fn add_completion(&mut self, c: &Cqe, bytes: u64) {
        self.add(path_name(c.path()), bytes);
        add_path_bytes(&mut self.1, dialect_name(c.dialect()), bytes);
    }

    /// The one dialect that carried everything (`mixed` when several did, `none`: no bytes);
    /// `--json`'s `"dialect"`.
    #[must_use]
    pub fn dialect(&self) -> &'static str {
        match self.1.as_slice() {
            [] => "none",
            [(d, _)] => d,
            _ => "mixed",
        }
    }

    /// The one path that carried everything, or `mixed` when several did (`none`: no bytes).
    #[must_use]
    pub fn summary(&self) -> &'static str {
        match self.0.as_slice() {
            [] => "none",
            [(p, _)] => p,
            _ => "mixed",
        }
    }

    /// `{"rdma-soft": bytes, ...}`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.0
                .iter()
                .map(|(p, b)| ((*p).to_owned(), (*b).into()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_bytes_aggregate_per_path() {
        let mut p = PathBytes::default();
        p.add("rdma-soft", 8);
        p.add("rdma-soft", 2);
        assert_eq!(p.summary(), "rdma-soft");
        assert_eq!(p.to_json(), serde_json::json!({"rdma-soft": 10}));
        p.add("http", 1);
        assert_eq!(p.summary(), "mixed");
    }
}
