//! `Engine.get_into` / `put_from` / `get_many`: items of `(kind, url, memory, offset, length)`
//! run at once, each item's outcome reported on its own.
//!
//! Steps: parse each URL and find each item's memory; HEAD the gets that have no length; check
//! lengths against the memory and register it; split gets into range-gets of [`CHUNK`]; run
//! every operation in one batch with the GIL released; deregister; settle each item (its first
//! failure, or its byte count).

use hipobj_cli::load::batch::{Op, OpFailure, OpKind, split_range_get};
use hipobj_cli::s3uri::S3Uri;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use ring_api::{BufHandle, ObjectId};

use crate::errors::{self, make};
use crate::memory::{self, Memory};
use crate::registration::Registration;
use crate::state::{State, invalid_url, run_interruptible};

/// Largest range-get (larger ranges are split and run in parallel).
pub const CHUNK: u64 = 8 << 20;
/// Largest single PUT (S3's limit).
pub const MAX_PUT: u64 = 5 << 30;

/// One item as Python passes it: `(kind, url, memory, offset, length)`.
pub type Item<'py> = (String, String, Bound<'py, PyAny>, u64, Option<u64>);

/// An item that passed its checks.
struct Target {
    bucket: String,
    key: String,
    object: ObjectId,
    put: bool,
    offset: u64,
    length: Option<u64>,
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
        other => return Err(PyValueError::new_err(format!("kind {other:?}"))),
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
                length,
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
fn learn_lengths(py: Python<'_>, state: &State, slots: &mut [Slot]) -> PyResult<()> {
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
    let results = run_interruptible(py, state, &ops)?;
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

/// Why a pending item cannot run, if it cannot; else its byte count.
fn check_length(py: Python<'_>, t: &Target) -> Result<u64, PyErr> {
    let path = t.path();
    let fail = |class: &str, msg: String| make(py, class, &msg, &[("path", Some(path.clone()))]);
    if t.put {
        if t.offset != 0 || t.length.is_some() {
            return Err(PyValueError::new_err("put takes no offset or length"));
        }
        return match t.mem.len {
            0 => Err(fail(
                "UnsupportedError",
                format!("{path}: the engine cannot PUT an empty buffer"),
            )),
            n if n > MAX_PUT => Err(fail(
                "UnsupportedError",
                format!(
                    "{path}: put_from of {n} bytes: above 5 GiB needs a multipart upload, which the Python package does not do"
                ),
            )),
            n => Ok(n),
        };
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

/// Runs `items` and returns, per item, its byte count or the exception it failed with.
pub fn run(py: Python<'_>, state: &State, items: Vec<Item<'_>>) -> PyResult<Vec<Py<PyAny>>> {
    let mut slots = items
        .into_iter()
        .map(|it| prepare(py, state, it))
        .collect::<PyResult<Vec<Slot>>>()?;
    learn_lengths(py, state, &mut slots)?;
    let mut regs: Vec<Registration<'_>> = Vec::new();
    let mut ops: Vec<Op> = Vec::new();
    let mut owner: Vec<usize> = Vec::new();
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
        let reg = match Registration::new(&state.engine, &t.mem) {
            Ok(r) => r,
            Err(e) => {
                let msg = format!("{}: {e}", t.path());
                *slot = Slot::Failed(make(py, "HipobjError", &msg, &[("path", Some(t.path()))]));
                continue;
            }
        };
        let item_ops = if t.put {
            vec![Op {
                kind: OpKind::Put,
                object: t.object,
                buf: reg.handle,
                buf_offset: 0,
                len,
            }]
        } else {
            split_range_get(t.object, t.offset, reg.handle, 0, len, CHUNK)
        };
        owner.extend(std::iter::repeat_n(i, item_ops.len()));
        ops.extend(item_ops);
        lens[i] = len;
        regs.push(reg);
    }
    let results = run_interruptible(py, state, &ops);
    py.detach(|| drop(regs));
    let mut first_failure: Vec<Option<(String, OpFailure)>> = vec![None; slots.len()];
    for ((op, &i), r) in ops.iter().zip(&owner).zip(results?) {
        let what = match op.kind {
            OpKind::RangeGet { offset } => format!("range-get {offset}+{}", op.len),
            OpKind::Put => "PUT".into(),
            OpKind::Head => "HEAD".into(),
        };
        let size = match &slots[i] {
            Slot::Pending(t) => t.size,
            _ => None,
        };
        match r {
            Err(f) => {
                first_failure[i].get_or_insert((what, f));
            }
            // Every answer that names the object's size must name the one HEAD said.
            Ok(d) if size.is_some_and(|s| d.object_size != 0 && d.object_size != s) => {
                let msg = format!(
                    "integrity: the server names an object of {} bytes, HEAD said {}",
                    d.object_size,
                    size.unwrap_or(0)
                );
                first_failure[i].get_or_insert((what, OpFailure::local_msg(msg)));
            }
            Ok(_) => {}
        }
    }
    Ok(slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| {
            let settled = match (slot, &first_failure[i]) {
                (Slot::Pending(t), Some((what, f))) => Err(errors::op_error(
                    py,
                    &state.settings,
                    &t.bucket,
                    &t.key,
                    what,
                    f,
                )),
                (Slot::Pending(_), None) => Ok(lens[i]),
                (Slot::Done(n), _) => Ok(n),
                (Slot::Failed(e), _) => Err(e),
            };
            match settled {
                Ok(n) => match n.into_pyobject(py) {
                    Ok(v) => v.into_any().unbind(),
                    Err(never) => match never {},
                },
                Err(e) => e.into_value(py).into_any(),
            }
        })
        .collect())
}
