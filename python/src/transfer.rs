//! `Engine.get_into` / `put_from` / `get_many`: items of `(kind, url, memory, offset, length)`
//! run at once, each item's outcome reported on its own.
//!
//! Steps: parse each URL and find each item's memory; HEAD the gets that have no length; check
//! lengths against the memory and register it; split gets into range-gets of [`CHUNK`]; start
//! the multipart uploads of large puts (`hipobj_loader::multipart`); run every operation in one
//! batch with the GIL released; deregister; complete (or abort) the multipart uploads; settle
//! each item (its first failure, or its byte count).

use std::time::{Duration, Instant};

use hipobj_loader::batch::{BatchOptions, Op, OpDone, OpFailure, OpKind, split_range_get};
use hipobj_loader::multipart;
use hipobj_loader::s3uri::S3Uri;
use pyo3::prelude::*;
use ring_api::{BufHandle, ObjectId, UploadHandle};

use crate::errors::{self, make};
use crate::memory::{self, Memory};
use crate::registration::Registration;
use crate::state::{State, invalid_url, run_interruptible};

/// Largest range-get (larger ranges are split and run in parallel).
pub const CHUNK: u64 = 8 << 20;

/// One item as Python passes it: `(kind, url, memory, offset, length)`; a put's `length` is
/// its `part_size` (`None`: one PUT up to 5 GiB, parts above).
pub type Item<'py> = (String, String, Bound<'py, PyAny>, u64, Option<u64>);

/// An item that passed its checks.
struct Target {
    bucket: String,
    key: String,
    object: ObjectId,
    put: bool,
    offset: u64,
    length: Option<u64>,
    /// A put's part size, as asked, then as chosen (`None`: one PUT).
    part_size: Option<u64>,
    /// The object's size, when a HEAD asked.
    size: Option<u64>,
    mem: Memory,
}

impl Target {
    fn path(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.key)
    }
}

/// Where an item stands.
enum Slot {
    Pending(Box<Target>),
    Done(u64),
    Failed(PyErr),
}

fn prepare(py: Python<'_>, state: &State, item: Item<'_>) -> PyResult<Slot> {
    let (kind, url, obj, offset, length) = item;
    let put = match kind.as_str() {
        "get" => false,
        "put" => true,
        other => return Err(errors::invalid_argument(py, &format!("kind {other:?}"))),
    };
    let checked = S3Uri::parse_object(&url)
        .map_err(|e| invalid_url(py, &url, e.reason))
        .and_then(|uri| {
            let object = state
                .engine
                .object(&uri.bucket, &uri.key)
                .map_err(|e| invalid_url(py, &url, &e.to_string()))?;
            let mem = memory::resolve(&obj, !put)?;
            Ok(Target {
                bucket: uri.bucket,
                key: uri.key,
                object,
                put,
                offset,
                length: if put { None } else { length },
                part_size: if put { length } else { None },
                size: None,
                mem,
            })
        });
    Ok(match checked {
        Ok(t) => Slot::Pending(Box::new(t)),
        Err(e) => Slot::Failed(e),
    })
}

/// Gives every pending get without a length the rest of its object from its offset (HEAD).
fn learn_lengths(
    py: Python<'_>,
    state: &State,
    batch: BatchOptions,
    slots: &mut [Slot],
) -> PyResult<()> {
    let needs: Vec<usize> = (0..slots.len())
        .filter(|&i| matches!(&slots[i], Slot::Pending(t) if !t.put && t.length.is_none()))
        .collect();
    let ops: Vec<Op> = needs
        .iter()
        .filter_map(|&i| match &slots[i] {
            Slot::Pending(t) => Some(Op {
                kind: OpKind::Head,
                object: t.object,
                buf: BufHandle(0),
                buf_offset: 0,
                len: 0,
            }),
            _ => None,
        })
        .collect();
    let results = run_interruptible(py, state, batch, &ops)?;
    for (&i, r) in needs.iter().zip(results) {
        let Slot::Pending(t) = &mut slots[i] else {
            continue;
        };
        match r {
            Ok(d) => {
                t.size = Some(d.object_size);
                t.length = Some(d.object_size.saturating_sub(t.offset));
            }
            Err(f) => {
                let e = errors::op_error(py, &state.settings, &t.bucket, &t.key, "HEAD", &f);
                slots[i] = Slot::Failed(e);
            }
        }
    }
    Ok(())
}

/// Why a pending item cannot run, if it cannot; else its byte count (and, for a put, how it
/// goes: its part size).
fn check_length(py: Python<'_>, t: &mut Target) -> Result<u64, PyErr> {
    let path = t.path();
    let fail = |class: &str, msg: String| make(py, class, &msg, &[("path", Some(path.clone()))]);
    if t.put {
        if t.offset != 0 {
            return Err(errors::invalid_argument(py, "put takes no offset"));
        }
        let n = t.mem.len;
        if n == 0 {
            return Err(fail(
                "UnsupportedError",
                format!("{path}: the engine cannot PUT an empty buffer"),
            ));
        }
        t.part_size = multipart::part_size(n, t.part_size)
            .map_err(|e| errors::invalid_argument(py, &format!("{path}: {e}")))?;
        return Ok(n);
    }
    let len = t.length.unwrap_or(0);
    if len > t.mem.len {
        return Err(fail(
            "HipobjError",
            format!(
                "{path}: {len} bytes from offset {} do not fit the destination's {} bytes",
                t.offset, t.mem.len
            ),
        ));
    }
    Ok(len)
}

/// Runs `items` and returns, per item, its byte count (a put: `(bytes, verified)`, verified when
/// a server checksum proved the object: its PUT's echo, or its Complete's full-object CRC64NVME)
/// or the exception it failed with.
/// `timeout` bounds the call's HEADs, uploads' creation and transfers (each operation goes to
/// the engine with the time left as its deadline, and fails `TimedOut` when it passes); the
/// completion or abort of a multipart upload that follows is not cut short.
pub fn run(
    py: Python<'_>,
    state: &State,
    items: Vec<Item<'_>>,
    timeout: Option<Duration>,
) -> PyResult<Vec<Py<PyAny>>> {
    let timed = BatchOptions {
        deadline: timeout.map(|t| Instant::now() + t),
        ..state.batch
    };
    let mut slots = items
        .into_iter()
        .map(|it| prepare(py, state, it))
        .collect::<PyResult<Vec<Slot>>>()?;
    learn_lengths(py, state, timed, &mut slots)?;
    let mut regs: Vec<Registration<'_>> = Vec::new();
    let mut bufs: Vec<Option<BufHandle>> = vec![None; slots.len()];
    let mut lens = vec![0u64; slots.len()];
    for (i, slot) in slots.iter_mut().enumerate() {
        let Slot::Pending(t) = slot else { continue };
        let len = match check_length(py, t) {
            Ok(0) => {
                *slot = Slot::Done(0);
                continue;
            }
            Ok(n) => n,
            Err(e) => {
                *slot = Slot::Failed(e);
                continue;
            }
        };
        match Registration::new(&state.engine, &t.mem) {
            Ok(reg) => {
                bufs[i] = Some(reg.handle);
                lens[i] = len;
                regs.push(reg);
            }
            Err(e) => {
                let msg = format!("{}: {e}", t.path());
                *slot = Slot::Failed(make(py, "HipobjError", &msg, &[("path", Some(t.path()))]));
            }
        }
    }
    let mut settle = Settle::new(slots.len());
    // Per put: whether a server checksum proved the object (its PUT, or its Complete).
    let mut proven = vec![true; slots.len()];
    // Multipart puts first start their uploads.
    let mut uploads: Vec<Option<UploadHandle>> = vec![None; slots.len()];
    let creates: Vec<(usize, Op)> = pending(&slots)
        .filter(|(i, t)| t.part_size.is_some() && bufs[*i].is_some())
        .map(|(i, t)| (i, multipart::create(t.object)))
        .collect();
    let created = match run_ops(py, state, timed, &creates) {
        Ok(r) => r,
        Err(e) => {
            py.detach(|| drop(regs));
            return Err(e);
        }
    };
    for ((i, op), r) in creates.iter().zip(created) {
        match r {
            Ok(OpDone {
                upload: Some(u), ..
            }) => uploads[*i] = Some(u),
            Ok(_) => settle.fail(*i, op, OpFailure::local_msg("no upload named")),
            Err(f) => settle.fail(*i, op, f),
        }
    }
    // Then every range-get, PUT and part, in one batch.
    let mut ops: Vec<(usize, Op)> = Vec::new();
    for (i, t) in pending(&slots) {
        let (Some(buf), len) = (bufs[i], lens[i]) else {
            continue;
        };
        let item_ops = match (t.put, t.part_size, uploads[i]) {
            (false, ..) => split_range_get(t.object, t.offset, buf, 0, len, CHUNK),
            (true, None, _) => vec![Op {
                kind: OpKind::Put,
                object: t.object,
                buf,
                buf_offset: 0,
                len,
            }],
            (true, Some(size), Some(u)) => multipart::parts(t.object, u, buf, len, size),
            (true, Some(_), None) => continue, // its CreateMultipart failed
        };
        ops.extend(item_ops.into_iter().map(|op| (i, op)));
    }
    let results = run_ops(py, state, timed, &ops);
    py.detach(|| drop(regs));
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            // Interrupted: no upload stays open.
            let aborts = opened(&slots, &uploads)
                .map(|(i, t, u)| (i, multipart::abort(t.object, u)))
                .collect::<Vec<_>>();
            let _ = py.detach(|| run_ops_unstoppable(state, &aborts));
            return Err(e);
        }
    };
    for ((i, op), r) in ops.iter().zip(results) {
        let size = match &slots[*i] {
            Slot::Pending(t) => t.size,
            _ => None,
        };
        if let (Ok(d), OpKind::Put) = (&r, op.kind) {
            proven[*i] &= d.verified;
        }
        match r {
            Err(f) => settle.fail(*i, op, f),
            // Every answer that names the object's size must name the one HEAD said.
            Ok(d) if size.is_some_and(|s| d.object_size != 0 && d.object_size != s) => {
                let msg = format!(
                    "integrity: the server names an object of {} bytes, HEAD said {}",
                    d.object_size,
                    size.unwrap_or(0)
                );
                settle.fail(*i, op, OpFailure::local_msg(msg));
            }
            Ok(_) => {}
        }
    }
    // Last, each upload is completed when all its parts went, else aborted.
    let ends: Vec<(usize, Op)> = opened(&slots, &uploads)
        .filter_map(|(i, t, u)| {
            if settle.failed(i) {
                return Some((i, multipart::abort(t.object, u)));
            }
            let size = t.part_size?;
            multipart::complete(t.object, u, lens[i], size).map(|op| (i, op))
        })
        .collect();
    for ((i, op), r) in ends.iter().zip(run_ops(py, state, state.batch, &ends)?) {
        match (r, op.kind) {
            (Err(f), OpKind::CompleteMultipart { .. }) => settle.fail(*i, op, f),
            // The parts' proofs do not prove the object the server assembled; its Complete's
            // (the full-object CRC64NVME) does.
            (Ok(d), OpKind::CompleteMultipart { .. }) => proven[*i] &= d.verified,
            _ => {}
        }
    }
    Ok(slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| {
            let settled = match (slot, settle.first(i)) {
                (Slot::Pending(t), Some((what, f))) => Err(errors::op_error(
                    py,
                    &state.settings,
                    &t.bucket,
                    &t.key,
                    what,
                    f,
                )),
                (Slot::Pending(t), None) => Ok((lens[i], t.put.then_some(proven[i]))),
                (Slot::Done(n), _) => Ok((n, None)),
                (Slot::Failed(e), _) => Err(e),
            };
            match settled {
                // A get: its byte count; a put: `(bytes, verified)`.
                Ok((n, None)) => match n.into_pyobject(py) {
                    Ok(v) => v.into_any().unbind(),
                    Err(never) => match never {},
                },
                Ok((n, Some(verified))) => match (n, verified).into_pyobject(py) {
                    Ok(v) => v.into_any().unbind(),
                    Err(e) => e.into_value(py).into_any(),
                },
                Err(e) => e.into_value(py).into_any(),
            }
        })
        .collect())
}

/// The pending items, with their index.
fn pending(slots: &[Slot]) -> impl Iterator<Item = (usize, &Target)> {
    slots.iter().enumerate().filter_map(|(i, s)| match s {
        Slot::Pending(t) => Some((i, &**t)),
        _ => None,
    })
}

/// The pending items with an open multipart upload.
fn opened<'a>(
    slots: &'a [Slot],
    uploads: &'a [Option<UploadHandle>],
) -> impl Iterator<Item = (usize, &'a Target, UploadHandle)> {
    pending(slots).filter_map(|(i, t)| Some((i, t, (*uploads.get(i)?)?)))
}

/// Runs the operations of `ops` (each tagged with its item), the GIL released, Ctrl-C stopping
/// it.
fn run_ops(
    py: Python<'_>,
    state: &State,
    batch: BatchOptions,
    ops: &[(usize, Op)],
) -> PyResult<Vec<Result<OpDone, OpFailure>>> {
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    let ops: Vec<Op> = ops.iter().map(|(_, op)| *op).collect();
    run_interruptible(py, state, batch, &ops)
}

/// Runs `ops` to the end whatever signals arrive (the aborts after an interrupted batch).
fn run_ops_unstoppable(state: &State, ops: &[(usize, Op)]) -> Vec<Result<OpDone, OpFailure>> {
    let ops: Vec<Op> = ops.iter().map(|(_, op)| *op).collect();
    hipobj_loader::batch::run(&state.engine, &ops, state.batch, &mut || false)
}

/// Each item's first failure: what failed, and how.
struct Settle(Vec<Option<(String, OpFailure)>>);

impl Settle {
    fn new(items: usize) -> Self {
        Self(vec![None; items])
    }

    /// Records `f` for item `i`'s `op`, unless the item failed already.
    fn fail(&mut self, i: usize, op: &Op, f: OpFailure) {
        if let Some(slot) = self.0.get_mut(i) {
            slot.get_or_insert_with(|| (multipart::describe(op.kind, op.len), f));
        }
    }

    fn failed(&self, i: usize) -> bool {
        self.first(i).is_some()
    }

    fn first(&self, i: usize) -> Option<&(String, OpFailure)> {
        self.0.get(i)?.as_ref()
    }
}
