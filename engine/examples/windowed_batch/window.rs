//! The windowed_batch example's core: read a whole object through a registered buffer much
//! smaller than it, as range-gets awaited through one [`AsyncQueue`], each slot reused as soon
//! as its completion has been read. Used by `main.rs` and by `engine/tests/windowed_batch.rs`,
//! which runs it against a real gateway on 127.0.0.1.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use engine::opcode::{Head, RangeGet};
use engine::{AsyncQueue, BufSlice, DataPath, Engine, PushError, RegisterOptions, WireDialect};

/// What to read and through how much memory.
#[derive(Clone, Debug)]
pub struct Window {
    pub bucket: String,
    pub key: String,
    /// Slots in the registered buffer (and ops in flight at once).
    pub slots: usize,
    /// Bytes per slot: the object is read in ranges of this size (the last may be shorter).
    pub slot_len: u64,
    /// Per-op deadline.
    pub deadline: Duration,
}

/// One completed range-get: where it read and which path and dialect carried it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpRecord {
    pub offset: u64,
    pub len: u64,
    pub slot: u64,
    pub path: Option<DataPath>,
    pub dialect: Option<WireDialect>,
}

/// The whole batch: the object's size and every op, in completion order.
#[derive(Clone, Debug)]
pub struct BatchReport {
    pub object_len: u64,
    pub ops: Vec<OpRecord>,
}

impl BatchReport {
    /// Ops per `path/dialect` name, e.g. `{"rdma-soft/rc-persistent": 41}`.
    pub fn by_path(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for op in &self.ops {
            let dialect = op.dialect.map_or("?", WireDialect::as_str);
            *m.entry(format!("{}/{dialect}", path_name(op.path)))
                .or_insert(0) += 1;
        }
        m
    }
}

/// The name the CLI prints for a data path.
pub fn path_name(path: Option<DataPath>) -> &'static str {
    match path {
        Some(DataPath::Http) => "http",
        Some(DataPath::RdmaSoft) => "rdma-soft",
        Some(DataPath::RdmaVerbs) => "rdma-verbs",
        Some(DataPath::None) => "none",
        _ => "unknown",
    }
}

/// Reads the object `w.bucket/w.key` range by range into `w.slots` slots of one registered
/// buffer, handing each range's bytes to `on_range(offset, bytes)` while its slot is still
/// leased to nobody else, then reusing the slot. Call inside a tokio runtime.
///
/// Any failed op ends the batch with its decoded error; ops still in flight then complete
/// into a queue nobody reads, and the buffer stays registered until the engine is dropped (a
/// slot is never written by two ops at once: the engine's leases refuse an overlapping op).
pub async fn read_windowed(
    engine: &Engine,
    w: &Window,
    mut on_range: impl FnMut(u64, &[u8]) -> Result<(), String>,
) -> Result<BatchReport, String> {
    if w.slots == 0 || w.slot_len == 0 {
        return Err("slots and slot length must be at least 1".into());
    }
    let depth = u32::try_from(w.slots).map_err(|_| "too many slots".to_owned())?;
    let deadline_ns = u64::try_from(w.deadline.as_nanos()).unwrap_or(u64::MAX);
    let obj = engine
        .object(&w.bucket, &w.key)
        .map_err(|e| e.to_string())?;
    let buf_len = usize::try_from(w.slot_len)
        .ok()
        .and_then(|l| l.checked_mul(w.slots))
        .ok_or("buffer too large")?;
    let buf = engine
        .register_host(buf_len, RegisterOptions::pinned())
        .map_err(|e| format!("register {buf_len} bytes: {e}"))?;
    let q = AsyncQueue::new(engine.queue(depth).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;

    // The object's size (Head answers it in `aux`); tag 0 is never a range.
    let object_len = head_size(&q, obj, deadline_ns)
        .await
        .map_err(|e| format!("{}/{}: {e}", w.bucket, w.key))?;

    let ranges = object_len.div_ceil(w.slot_len);
    let mut free: Vec<u64> = (0..w.slots as u64).rev().collect();
    // Tag (range index + 1) -> (slot, offset, len).
    let mut in_flight: HashMap<u64, (u64, u64, u64)> = HashMap::new();
    let mut next = 0u64;
    let mut ops = Vec::with_capacity(usize::try_from(ranges).unwrap_or(0));
    while (ops.len() as u64) < ranges {
        // Fill every free slot with the next range.
        while next < ranges {
            let Some(&slot) = free.last() else { break };
            let offset = next * w.slot_len;
            let len = w.slot_len.min(object_len - offset);
            let sqe = RangeGet::new(obj, offset, BufSlice::new(buf, slot * w.slot_len, len))
                .user_data(next + 1)
                .deadline_ns(deadline_ns)
                .build();
            match q.push(&sqe) {
                Ok(()) => {
                    free.pop();
                    in_flight.insert(next + 1, (slot, offset, len));
                    next += 1;
                }
                // The submission ring is full: reap first.
                Err(PushError::Full { .. }) => break,
                Err(e) => return Err(format!("push: {e}")),
            }
        }
        let cqe = q
            .next_completion()
            .await
            .ok_or("the engine shut down mid-batch")?;
        let Some((slot, offset, len)) = in_flight.remove(&cqe.user_data()) else {
            return Err(format!("completion for unknown tag {}", cqe.user_data()));
        };
        let (path, dialect) = (cqe.path(), cqe.dialect());
        let n = cqe
            .into_result()
            .map_err(|e| format!("range {offset}+{len}: {e}"))?;
        if n != len {
            return Err(format!("range {offset}+{len}: {n} bytes moved"));
        }
        {
            // The view fails with Busy while an op writes these bytes; it is dropped before
            // the slot is handed to the next range.
            let view = engine
                .read(buf, slot * w.slot_len, len)
                .map_err(|e| format!("read slot {slot}: {e}"))?;
            on_range(offset, &view)?;
        }
        free.push(slot);
        ops.push(OpRecord {
            offset,
            len,
            slot,
            path,
            dialect,
        });
    }
    Ok(BatchReport { object_len, ops })
}

/// The object's size: a Head pushed untracked, so its completion (with `aux`) comes back whole.
async fn head_size(q: &AsyncQueue, obj: engine::ObjectId, deadline_ns: u64) -> Result<u64, String> {
    q.push(&Head::new(obj).user_data(0).deadline_ns(deadline_ns).build())
        .map_err(|e| format!("push: {e}"))?;
    let cqe = q
        .next_completion()
        .await
        .ok_or("the engine shut down before Head completed")?;
    let aux = cqe.aux();
    cqe.into_result().map_err(|e| format!("head: {e}"))?;
    Ok(aux)
}
