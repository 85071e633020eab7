//! Which path and dialect carried each operation: `hipObjGetStats` (per library instance,
//! synchronous calls and batch completions alike) and `hipObjGetLastOpInfo` (the calling
//! thread's most recent synchronous call). The names are the CLI's `--json` ones.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::types::{
    COMPLETION_DIALECT_MASK, COMPLETION_DIALECT_SHIFT, COMPLETION_PATH_MASK, COMPLETION_PATH_SHIFT,
    COMPLETION_VERIFIED, HipObjCompletion, HipObjStats, STATS_DIALECTS, STATS_PATHS,
};

/// `HIPOBJ_PATH_*` names (`hipObjPathName`), as the CLI's `--json` prints them.
pub const PATH_NAMES: [&std::ffi::CStr; STATS_PATHS] =
    [c"none", c"http", c"rdma-soft", c"rdma-verbs"];

/// Dialect names (`hipObjDialectName`), indexed by the completion's dialect field.
pub const DIALECT_NAMES: [&std::ffi::CStr; 5] = [
    c"none",
    c"http",
    c"rc-persistent",
    c"hipobj-rc-v2",
    c"cuobject",
];

/// The path field of a completion's flags.
pub const fn path_of(c: &HipObjCompletion) -> u32 {
    (c.flags & COMPLETION_PATH_MASK) >> COMPLETION_PATH_SHIFT
}

/// The dialect field of a completion's flags.
pub const fn dialect_of(c: &HipObjCompletion) -> u32 {
    (c.flags & COMPLETION_DIALECT_MASK) >> COMPLETION_DIALECT_SHIFT
}

/// Counters of one library instance (reset by `hipObjInit`).
#[derive(Debug)]
pub struct Stats {
    ops: AtomicU64,
    failed: AtomicU64,
    path_ops: [AtomicU64; STATS_PATHS],
    path_bytes: [AtomicU64; STATS_PATHS],
    dialect_ops: [AtomicU64; STATS_DIALECTS],
    /// `path << 8 | dialect` of the latest successful op, `u32::MAX` before the first.
    last_ok: AtomicU32,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            ops: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            path_ops: Default::default(),
            path_bytes: Default::default(),
            dialect_ops: Default::default(),
            last_ok: AtomicU32::new(u32::MAX),
        }
    }
}

impl Stats {
    /// Counts one completed operation (a failure only in `ops` and `failedOps`).
    pub fn record(&self, c: &HipObjCompletion) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        if c.op_error != 0 {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.last_ok
            .store(path_of(c) << 8 | dialect_of(c), Ordering::Relaxed);
        // A value past the known ones (a newer engine) is counted in `ops` only.
        let p = path_of(c) as usize;
        if let (Some(n), Some(b)) = (self.path_ops.get(p), self.path_bytes.get(p)) {
            n.fetch_add(1, Ordering::Relaxed);
            b.fetch_add(c.bytes, Ordering::Relaxed);
        }
        if let Some(n) = self.dialect_ops.get(dialect_of(c) as usize) {
            n.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counters as `hipObjStats_t`.
    pub fn snapshot(&self) -> HipObjStats {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HipObjStats {
            ops: load(&self.ops),
            failed_ops: load(&self.failed),
            ops_by_path: self.path_ops.each_ref().map(load),
            bytes_by_path: self.path_bytes.each_ref().map(load),
            ops_by_dialect: self.dialect_ops.each_ref().map(load),
        }
    }
}

/// The name of a `HIPOBJ_PATH_*` value.
pub fn path_name(p: u32) -> &'static str {
    PATH_NAMES
        .get(p as usize)
        .and_then(|n| n.to_str().ok())
        .unwrap_or("unknown")
}

/// The name of a completion dialect value.
pub fn dialect_name(d: u32) -> &'static str {
    DIALECT_NAMES
        .get(d as usize)
        .and_then(|n| n.to_str().ok())
        .unwrap_or("unknown")
}

impl Stats {
    /// For a failure message: the path and dialect of the failed op when the engine recorded
    /// them, else those of this library's latest successful op (what the endpoint negotiated),
    /// and the dialect the configuration asked for.
    pub fn describe_path(&self, failed: &HipObjCompletion, requested: &str) -> String {
        let (p, d) = (path_of(failed), dialect_of(failed));
        if p != 0 || d != 0 {
            return format!(
                "path {}, dialect {} (requested {requested})",
                path_name(p),
                dialect_name(d)
            );
        }
        match self.last_ok.load(Ordering::Relaxed) {
            u32::MAX => format!(
                "path and dialect not recorded for a failed op, and no op has succeeded yet \
                 (requested dialect {requested})"
            ),
            v => format!(
                "path and dialect not recorded for a failed op; the latest successful op went \
                 over path {}, dialect {} (requested {requested})",
                path_name(v >> 8),
                dialect_name(v & 0xFF)
            ),
        }
    }
}

thread_local! {
    static LAST_OP: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
    static LAST_VERIFIED: Cell<bool> = const { Cell::new(false) };
}

/// Remembers the path, dialect and proof of this thread's latest synchronous call (0, 0 and
/// unproven on failure).
pub fn set_last_op(c: &HipObjCompletion) {
    let ok = c.op_error == 0;
    let v = if ok {
        (path_of(c), dialect_of(c))
    } else {
        (0, 0)
    };
    LAST_OP.with(|l| l.set(v));
    LAST_VERIFIED.with(|l| l.set(ok && c.flags & COMPLETION_VERIFIED != 0));
}

/// Forgets this thread's latest synchronous call (a new one starts).
pub fn clear_last_op() {
    LAST_OP.with(|l| l.set((0, 0)));
    LAST_VERIFIED.with(|l| l.set(false));
}

/// (path, dialect) of this thread's latest synchronous call.
pub fn last_op() -> (u32, u32) {
    LAST_OP.with(Cell::get)
}

/// Whether a server checksum proved the bytes of this thread's latest synchronous call.
pub fn last_op_verified() -> bool {
    LAST_VERIFIED.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::convert;
    use ring_api::{Cqe, DataPath, ErrorClass, ErrorCode, WireDialect};

    #[test]
    fn counts_by_path_and_dialect_and_failures() {
        let s = Stats::default();
        s.record(&convert(
            &Cqe::success(1, 100, DataPath::RdmaSoft).with_dialect(WireDialect::RcPersistent),
        ));
        s.record(&convert(
            &Cqe::success(2, 50, DataPath::Http).with_dialect(WireDialect::Http),
        ));
        s.record(&convert(&Cqe::error(
            3,
            ErrorCode::AccessDenied,
            ErrorClass::Client,
        )));
        let failed = convert(&Cqe::error(4, ErrorCode::NotFound, ErrorClass::Client));
        let msg = s.describe_path(&failed, "auto");
        assert!(
            msg.contains("path http, dialect http (requested auto)"),
            "{msg}"
        );
        let fresh = Stats::default().describe_path(&failed, "rc-persistent");
        assert!(fresh.contains("no op has succeeded yet"), "{fresh}");
        let v = s.snapshot();
        assert_eq!((v.ops, v.failed_ops), (3, 1));
        assert_eq!(v.ops_by_path, [0, 1, 1, 0]);
        assert_eq!(v.bytes_by_path, [0, 50, 100, 0]);
        assert_eq!(v.ops_by_dialect[..3], [0, 1, 1]);
    }

    #[test]
    fn names_match_the_cli() {
        assert_eq!(PATH_NAMES[2].to_str().unwrap(), "rdma-soft");
        for d in [WireDialect::Http, WireDialect::RcV2, WireDialect::CuObject] {
            assert_eq!(DIALECT_NAMES[d as usize].to_str().unwrap(), d.as_str());
        }
    }
}
