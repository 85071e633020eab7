//! Runs a list of range-gets and PUTs on the engine, one queue and one thread per worker,
//! and reports every operation's outcome (a failure never hides the others' results).
//!
//! Used by `hipobj load` (through [`crate::model`]) and by the Python package's
//! `get_many` / `get_into` / `put_from`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use engine::Engine;
use ring_api::opcode::{
    AbortMultipart, CompleteMultipart, CreateMultipart, Head, Put, RangeGet, UploadPart,
};
use ring_api::{
    BufHandle, BufSlice, Cqe, ErrorClass, ErrorCode, ObjectId, PartNumber, UploadHandle,
};

use crate::paths::{dialect_name, path_name};

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Range-get of `len` bytes at `offset` of the object.
    RangeGet {
        /// First byte in the object.
        offset: u64,
    },
    /// PUT of the `len` bytes as the whole object.
    Put,
    /// HEAD: [`OpDone::object_size`] is the object's size (`len` 0; the buffer is unused).
    Head,
    /// Starts a multipart upload of the object: [`OpDone::upload`] names it (`len` 0).
    CreateMultipart,
    /// Uploads the `len` bytes as part `part` of `upload`.
    UploadPart {
        /// The upload ([`OpDone::upload`] of its CreateMultipart).
        upload: UploadHandle,
        /// Part number.
        part: PartNumber,
    },
    /// Completes `upload` from its parts `1..=parts` (`len` 0).
    CompleteMultipart {
        /// The upload.
        upload: UploadHandle,
        /// How many parts it has.
        parts: PartNumber,
    },
    /// Aborts `upload`, discarding its parts (`len` 0).
    AbortMultipart {
        /// The upload.
        upload: UploadHandle,
    },
}

impl OpKind {
    /// Whether the operation moves `len` bytes (and its completion must say so).
    const fn moves_bytes(self) -> bool {
        matches!(
            self,
            Self::RangeGet { .. } | Self::Put | Self::UploadPart { .. }
        )
    }
}

/// One operation on registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// What to do.
    pub kind: OpKind,
    /// The object (interned with [`Engine::object`]).
    pub object: ObjectId,
    /// The registration bytes land in (or come from).
    pub buf: BufHandle,
    /// Offset in the registration.
    pub buf_offset: u64,
    /// Bytes (at least 1).
    pub len: u64,
}

/// A successful operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpDone {
    /// Bytes moved.
    pub bytes: u64,
    /// The object size the server named (range-gets; 0 when it named none).
    pub object_size: u64,
    /// The engine compared the bytes with a server checksum of exactly them.
    pub verified: bool,
    /// `http`, `rdma-soft` or `rdma-verbs`.
    pub path: &'static str,
    /// `http`, `rc-persistent`, `hipobj-rc-v2`, `cuobject`.
    pub dialect: &'static str,
    /// The upload a CreateMultipart started (`None` for every other kind).
    pub upload: Option<UploadHandle>,
    /// A range-get of a batch run with [`BatchOptions::range_crc64`]: the CRC-64/NVME of the
    /// bytes it delivered, computed by the engine while they were in host memory (`None`
    /// when the engine could not: bytes the NIC wrote into VRAM, or already verified by a
    /// landing digest).
    pub crc64: Option<u64>,
}

impl OpDone {
    /// An operation that had nothing to move.
    #[must_use]
    pub const fn empty() -> Self {
        Self {
            bytes: 0,
            object_size: 0,
            verified: false,
            path: "none",
            dialect: "none",
            upload: None,
            crc64: None,
        }
    }
}

/// A failed operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpFailure {
    /// The engine's code (`None`: the batch stopped before the engine answered).
    pub code: Option<ErrorCode>,
    /// Whose fault, when the engine said.
    pub class: Option<ErrorClass>,
    /// The dialect the engine was speaking (`none` when not recorded).
    pub dialect: &'static str,
    /// One line for people.
    pub message: String,
}

impl OpFailure {
    fn from_cqe(c: &Cqe) -> Self {
        let code = c.error_code();
        let class = c.error_class();
        let message = match (code, class) {
            (Some(code), Some(class)) => format!("{code} ({code:?}, {class:?})"),
            (Some(code), None) => format!("{code} ({code:?})"),
            _ => format!("failed with result {}", c.result()),
        };
        Self {
            code,
            class,
            dialect: dialect_name(c.dialect()),
            message,
        }
    }

    /// A failure found before or outside the engine.
    #[must_use]
    pub fn local_msg(message: impl Into<String>) -> Self {
        Self::local(message)
    }

    /// The batch's deadline passed before the op was submitted.
    fn timed_out() -> Self {
        Self {
            code: Some(ErrorCode::TimedOut),
            class: None,
            dialect: "none",
            message: "deadline exceeded before the operation was sent".to_owned(),
        }
    }

    fn local(message: impl Into<String>) -> Self {
        Self {
            code: None,
            class: None,
            dialect: "none",
            message: message.into(),
        }
    }
}

/// How a batch runs.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// Queues (each on its own thread, attached round-robin to the engine's workers).
    pub queues: usize,
    /// Operations in flight per queue.
    pub depth: u32,
    /// No completion for this long on a queue fails its remaining operations.
    pub stall: Duration,
    /// Range-gets ask the engine for the CRC-64/NVME of their bytes ([`OpDone::crc64`]), so a
    /// caller can prove a whole object from its ranges without reading them back.
    pub range_crc64: bool,
    /// When every operation must have completed: each is submitted with the time left as its
    /// engine deadline (it then completes `TimedOut`), and one not yet submitted when it has
    /// passed fails `TimedOut` without going in. `None`: the engine's default deadline.
    pub deadline: Option<Instant>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            queues: 1,
            depth: 64,
            stall: Duration::from_secs(300),
            range_crc64: false,
            deadline: None,
        }
    }
}

/// How often a waiting queue looks at the stop flag (and the calling thread asks `stop`).
const POLL: Duration = Duration::from_millis(50);

/// Runs `ops` and returns one outcome per op, in order. `stop` is asked every few tens of
/// milliseconds on the calling thread (e.g. "did the user press Ctrl-C"); once it says yes,
/// nothing more is submitted, operations in flight are abandoned (their queue is dropped,
/// which aborts them) and every unfinished op fails with "interrupted". The registrations stay
/// valid: [`Engine::deregister`] waits for the aborted ops' leases.
pub fn run(
    engine: &Engine,
    ops: &[Op],
    opts: BatchOptions,
    stop: &mut dyn FnMut() -> bool,
) -> Vec<Result<OpDone, OpFailure>> {
    run_observed(engine, ops, opts, stop, &|_, _| {})
}

/// Called from a batch's queue threads with each operation's index and outcome the moment
/// its completion is reaped (a streaming load reports tensors from it).
pub type Observer<'a> = &'a (dyn Fn(usize, &Result<OpDone, OpFailure>) + Sync);

/// [`run`], calling `observe` as each operation completes (not for operations failed as
/// "interrupted" or "not run").
pub fn run_observed(
    engine: &Engine,
    ops: &[Op],
    opts: BatchOptions,
    stop: &mut dyn FnMut() -> bool,
    observe: Observer<'_>,
) -> Vec<Result<OpDone, OpFailure>> {
    let mut out: Vec<Result<OpDone, OpFailure>> = ops
        .iter()
        .map(|_| Err(OpFailure::local("not run")))
        .collect();
    if ops.is_empty() {
        return out;
    }
    let queues = opts.queues.clamp(1, ops.len());
    let cancel = AtomicBool::new(false);
    let share = |q: usize| -> Vec<usize> { (q..ops.len()).step_by(queues).collect() };
    let caller = std::thread::current();
    let results: Vec<Vec<(usize, Result<OpDone, OpFailure>)>> = std::thread::scope(|s| {
        // Queues 1.. on threads of their own; the calling thread drives queue 0 and asks
        // `stop` while it waits (a single-queue batch starts no thread at all).
        let handles: Vec<_> = (1..queues)
            .map(|q| {
                let (mine, cancel, caller) = (share(q), &cancel, caller.clone());
                s.spawn(move || {
                    let r = drive(engine, ops, &mine, opts, cancel, &mut || false, observe);
                    caller.unpark();
                    r
                })
            })
            .collect();
        let mut watch = || {
            if !cancel.load(Ordering::Relaxed) && stop() {
                cancel.store(true, Ordering::Relaxed);
            }
        };
        let first = drive(
            engine,
            ops,
            &share(0),
            opts,
            &cancel,
            &mut || {
                watch();
                cancel.load(Ordering::Relaxed)
            },
            observe,
        );
        while !handles
            .iter()
            .all(std::thread::ScopedJoinHandle::is_finished)
        {
            watch();
            std::thread::park_timeout(POLL);
        }
        let mut all = vec![first];
        all.extend(handles.into_iter().map(|h| {
            h.join().unwrap_or_else(|_| {
                vec![(usize::MAX, Err(OpFailure::local("queue thread panicked")))]
            })
        }));
        all
    });
    for (i, r) in results.into_iter().flatten() {
        if let Some(slot) = out.get_mut(i) {
            *slot = r;
        }
    }
    out
}

/// One queue's share: `mine` are indices into `ops`.
fn drive(
    engine: &Engine,
    ops: &[Op],
    mine: &[usize],
    opts: BatchOptions,
    cancel: &AtomicBool,
    stopped: &mut dyn FnMut() -> bool,
    observe: Observer<'_>,
) -> Vec<(usize, Result<OpDone, OpFailure>)> {
    let mut done = Vec::with_capacity(mine.len());
    let fail_rest = |done: &mut Vec<_>, from: &[usize], why: &str| {
        done.extend(from.iter().map(|&i| (i, Err(OpFailure::local(why)))));
    };
    let mut q = match engine.queue(opts.depth.max(1)) {
        Ok(q) => q,
        Err(e) => {
            fail_rest(&mut done, mine, &format!("engine queue: {e}"));
            return done;
        }
    };
    let depth = q.sq_capacity().min(opts.depth.max(1) as usize);
    let mut in_flight: Vec<usize> = Vec::with_capacity(depth);
    let mut next = 0;
    let mut cqes = vec![Cqe::default(); q.cq_capacity()];
    let mut last_progress = Instant::now();
    let mut last_stop_check = Instant::now();
    while next < mine.len() || !in_flight.is_empty() {
        let asked = last_stop_check.elapsed() >= POLL && {
            last_stop_check = Instant::now();
            stopped()
        };
        if asked || cancel.load(Ordering::Relaxed) {
            fail_rest(&mut done, &in_flight, "interrupted");
            fail_rest(&mut done, &mine[next..], "interrupted");
            return done;
        }
        while next < mine.len() && in_flight.len() < depth {
            let i = mine[next];
            let op = &ops[i];
            let slice = BufSlice::new(op.buf, op.buf_offset, op.len);
            let tag = i as u64;
            // The time left to the batch's deadline bounds the op in the engine; an op not
            // yet submitted when it passed fails as timed out without going in.
            let left_ns = match opts.deadline {
                None => 0,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => {
                        u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)
                    }
                    _ => {
                        done.push((i, Err(OpFailure::timed_out())));
                        next += 1;
                        continue;
                    }
                },
            };
            let sqe = match op.kind {
                OpKind::RangeGet { offset } if opts.range_crc64 => {
                    RangeGet::new(op.object, offset, slice)
                        .user_data(tag)
                        .deadline_ns(left_ns)
                        .crc64()
                        .build()
                }
                OpKind::RangeGet { offset } => RangeGet::new(op.object, offset, slice)
                    .user_data(tag)
                    .deadline_ns(left_ns)
                    .build(),
                OpKind::Put => Put::new(op.object, slice)
                    .user_data(tag)
                    .deadline_ns(left_ns)
                    .build(),
                OpKind::Head => Head::new(op.object)
                    .user_data(tag)
                    .deadline_ns(left_ns)
                    .build(),
                OpKind::CreateMultipart => CreateMultipart::new(op.object)
                    .user_data(tag)
                    .deadline_ns(left_ns)
                    .build(),
                OpKind::UploadPart { upload, part } => {
                    UploadPart::new(op.object, upload, part, slice)
                        .user_data(tag)
                        .deadline_ns(left_ns)
                        .build()
                }
                OpKind::CompleteMultipart { upload, parts } => {
                    CompleteMultipart::new(op.object, upload, parts)
                        .user_data(tag)
                        .deadline_ns(left_ns)
                        .build()
                }
                OpKind::AbortMultipart { upload } => AbortMultipart::new(op.object, upload)
                    .user_data(tag)
                    .deadline_ns(left_ns)
                    .build(),
            };
            if let Err(e) = q.push(&sqe) {
                if !in_flight.is_empty() {
                    break; // full: reap first
                }
                // Refused with nothing in flight: it would never go in.
                done.push((i, Err(OpFailure::local(format!("queueing: {e:?}")))));
                next += 1;
                continue;
            }
            in_flight.push(i);
            next += 1;
        }
        if q.wait(1, Some(POLL)) == 0 {
            if last_progress.elapsed() >= opts.stall {
                let why = format!("stalled: no completion in {} s", opts.stall.as_secs());
                fail_rest(&mut done, &in_flight, &why);
                fail_rest(&mut done, &mine[next..], &why);
                return done;
            }
            continue;
        }
        last_progress = Instant::now();
        let n = q.reap(&mut cqes);
        for c in cqes.iter().take(n) {
            let Ok(i) = usize::try_from(c.user_data()) else {
                continue;
            };
            let Some(pos) = in_flight.iter().position(|&x| x == i) else {
                continue; // not ours: ignored, never trusted
            };
            in_flight.swap_remove(pos);
            let want = ops[i].len;
            let r = if !c.is_ok() {
                Err(OpFailure::from_cqe(c))
            } else if ops[i].kind.moves_bytes() && c.bytes() != want {
                Err(OpFailure {
                    message: format!("{} bytes arrived, {want} expected", c.bytes()),
                    ..OpFailure::local("")
                })
            } else {
                let create = ops[i].kind == OpKind::CreateMultipart;
                Ok(OpDone {
                    bytes: c.bytes(),
                    // With a CRC in `aux`, no size was reported.
                    object_size: if create || c.crc64().is_some() {
                        0
                    } else {
                        c.aux()
                    },
                    crc64: c.crc64(),
                    verified: c.verified(),
                    path: path_name(c.path()),
                    dialect: dialect_name(c.dialect()),
                    upload: create
                        .then(|| u32::try_from(c.aux()).ok().map(UploadHandle))
                        .flatten(),
                })
            };
            observe(i, &r);
            done.push((i, r));
        }
    }
    done
}

/// Splits `len` bytes at `offset` of an object into range-gets of at most `chunk` bytes
/// landing at `buf_offset..` of `buf`.
#[must_use]
pub fn split_range_get(
    object: ObjectId,
    offset: u64,
    buf: BufHandle,
    buf_offset: u64,
    len: u64,
    chunk: u64,
) -> Vec<Op> {
    let chunk = chunk.max(1);
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        let n = chunk.min(len - at);
        out.push(Op {
            kind: OpKind::RangeGet {
                offset: offset + at,
            },
            object,
            buf,
            buf_offset: buf_offset + at,
            len: n,
        });
        at += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_is_split_into_adjacent_reads_of_at_most_chunk_bytes() {
        let ops = split_range_get(ObjectId(7), 100, BufHandle(3), 10, 25, 10);
        let got: Vec<_> = ops
            .iter()
            .map(|o| match o.kind {
                OpKind::RangeGet { offset } => (offset, o.buf_offset, o.len),
                _ => panic!("a range-get"),
            })
            .collect();
        assert_eq!(got, [(100, 10, 10), (110, 20, 10), (120, 30, 5)]);
        assert!(split_range_get(ObjectId(7), 0, BufHandle(3), 0, 0, 10).is_empty());
        assert_eq!(
            split_range_get(ObjectId(7), 0, BufHandle(3), 0, 3, 0).len(),
            3
        );
    }
}
