//! The daemon's control messages: what a client asks over the Unix socket and what the daemon
//! answers. Sans-IO: bytes in, typed values out, and back.
//!
//! Every message is one `SOCK_SEQPACKET` packet: the magic `HOD1`, a kind byte, then the
//! fields in order, integers little-endian, strings as a `u16` length and UTF-8 bytes, booleans
//! as one byte 0 or 1. Decoding is total and canonical: any bytes give a value or a
//! [`WireError`], never a panic, and an accepted message re-encodes to the same bytes (the
//! `daemon_wire` fuzz target holds both). File descriptors travel beside the bytes
//! (`SCM_RIGHTS`); which message carries which is documented on each variant.

use std::fmt;

/// First bytes of every message (version 1 of the protocol).
pub const MAGIC: [u8; 4] = *b"HOD1";
/// Largest request a daemon reads.
pub const MAX_REQUEST: usize = 4096;
/// Largest reply a client reads.
pub const MAX_REPLY: usize = 64 * 1024;
/// Longest client name carried in [`Request::Hello`].
pub const MAX_NAME: usize = 64;

/// Why bytes are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than its fields.
    #[error("message truncated")]
    Truncated,
    /// Does not start with [`MAGIC`].
    #[error("not a hipobj daemon message (bad magic)")]
    BadMagic,
    /// Unknown kind byte.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// Bytes after the last field.
    #[error("{0} bytes after the message")]
    Trailing(usize),
    /// A string that is not UTF-8, or longer than its field allows.
    #[error("bad string field {0}")]
    BadString(&'static str),
    /// A boolean byte other than 0 or 1.
    #[error("bad boolean field {0}")]
    BadBool(&'static str),
    /// More entries than the message may hold.
    #[error("too many entries")]
    TooMany,
}

/// A device allocation exported by a client (a CUDA/HIP IPC handle and where the registered
/// range lies in it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeviceExport {
    /// The runtime's 64-byte IPC memory handle of the allocation.
    pub handle: [u8; 64],
    /// Offset of the registered range in the allocation.
    pub offset: u64,
    /// Size of the allocation.
    pub alloc_len: u64,
    /// Bytes registered.
    pub len: u64,
    /// Device ordinal in the exporting process's runtime.
    pub ordinal: u32,
}

impl fmt::Debug for DeviceExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceExport")
            .field("offset", &self.offset)
            .field("alloc_len", &self.alloc_len)
            .field("len", &self.len)
            .field("ordinal", &self.ordinal)
            .finish_non_exhaustive()
    }
}

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// First message of a connection: who is asking (a name for `status`).
    Hello {
        /// Free text, at most [`MAX_NAME`] bytes.
        name: String,
    },
    /// Intern an object name; the reply's id is this client's alone.
    Intern {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
    },
    /// Register host memory: carries one fd, a memfd sealed against shrinking and growing
    /// and at least `len` bytes long.
    RegisterHost {
        /// Bytes to register from the memfd's start.
        len: u64,
    },
    /// Register device memory exported by the client.
    RegisterDevice(DeviceExport),
    /// Release a registration, waiting up to `timeout_ms` for operations on it.
    Deregister {
        /// The client's buffer id.
        buf: u32,
        /// How long the daemon may wait for operations in flight on it.
        timeout_ms: u32,
    },
    /// Open a queue: the reply carries the ring memfd and two eventfds.
    OpenQueue {
        /// Submission ring entries (a power of two).
        sq_entries: u32,
        /// Completion ring entries (a power of two).
        cq_entries: u32,
        /// Per-operation timestamps.
        timestamps: bool,
    },
    /// The daemon's clients and what they hold.
    Status,
}

/// One client as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientStatus {
    /// Process id (from `SO_PEERCRED`).
    pub pid: i32,
    /// User id (from `SO_PEERCRED`).
    pub uid: u32,
    /// The name from its `Hello`.
    pub name: String,
    /// Queues open.
    pub queues: u32,
    /// Operations handed to the engine and not yet completed.
    pub in_flight: u64,
    /// Operations completed.
    pub ops: u64,
    /// Bytes moved by successful operations.
    pub bytes: u64,
    /// Live registrations.
    pub registrations: u32,
    /// Bytes they cover.
    pub registered_bytes: u64,
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Answer to [`Request::Hello`].
    Welcome {
        /// The S3 endpoint the daemon's engine talks to.
        endpoint: String,
        /// Its workers (a client sizes its batches by this).
        workers: u32,
        /// Operations of one client the daemon keeps in flight at once.
        max_in_flight: u32,
    },
    /// Answer to [`Request::Intern`].
    Object {
        /// The client's object id.
        id: u32,
    },
    /// Answer to a registration.
    Buffer {
        /// The client's buffer id.
        id: u32,
    },
    /// Answer to [`Request::OpenQueue`]; carries three fds: the ring memfd (layout
    /// `ring_api::QueueLayout` of these numbers), the client's completion eventfd and the
    /// daemon's doorbell eventfd.
    Queue {
        /// Submission ring entries.
        sq_entries: u32,
        /// Completion ring entries.
        cq_entries: u32,
        /// Per-operation timestamps.
        timestamps: bool,
    },
    /// Success without a value.
    Done,
    /// Answer to [`Request::Status`].
    Status(Vec<ClientStatus>),
    /// The request failed.
    Error {
        /// What kind of failure ([`ErrorKind`]).
        kind: ErrorKind,
        /// For people.
        message: String,
    },
}

/// Kinds of [`Reply::Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request was malformed or named something the client does not have.
    Invalid,
    /// The daemon cannot do this (no GPU runtime, unsupported memory).
    Unsupported,
    /// A registration is still in use.
    Busy,
    /// Anything else (the engine refused).
    Failed,
    /// A kind this version does not know.
    Other(u8),
}

impl ErrorKind {
    fn code(self) -> u8 {
        match self {
            Self::Invalid => 1,
            Self::Unsupported => 2,
            Self::Busy => 3,
            Self::Failed => 4,
            Self::Other(c) => c,
        }
    }

    fn from_code(c: u8) -> Self {
        match c {
            1 => Self::Invalid,
            2 => Self::Unsupported,
            3 => Self::Busy,
            4 => Self::Failed,
            c => Self::Other(c),
        }
    }
}

mod kind {
    pub(super) const HELLO: u8 = 1;
    pub(super) const INTERN: u8 = 2;
    pub(super) const REGISTER_HOST: u8 = 3;
    pub(super) const REGISTER_DEVICE: u8 = 4;
    pub(super) const DEREGISTER: u8 = 5;
    pub(super) const OPEN_QUEUE: u8 = 6;
    pub(super) const STATUS: u8 = 7;
    pub(super) const WELCOME: u8 = 128;
    pub(super) const OBJECT: u8 = 129;
    pub(super) const BUFFER: u8 = 130;
    pub(super) const QUEUE: u8 = 131;
    pub(super) const DONE: u8 = 132;
    pub(super) const STATUS_REPORT: u8 = 133;
    pub(super) const ERROR: u8 = 134;
}

struct Writer(Vec<u8>);

impl Writer {
    fn new(kind: u8) -> Self {
        let mut v = MAGIC.to_vec();
        v.push(kind);
        Self(v)
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn i32(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bool(&mut self, v: bool) -> &mut Self {
        self.u8(u8::from(v))
    }
    /// Strings longer than `u16::MAX` bytes are cut at a character boundary (no message
    /// field allows that much; decoders refuse over-long fields anyway).
    fn str(&mut self, s: &str) -> &mut Self {
        let mut end = s.len().min(usize::from(u16::MAX));
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let s = s.get(..end).unwrap_or("");
        self.0
            .extend_from_slice(&u16::try_from(s.len()).unwrap_or(0).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let (head, rest) = self.0.split_at_checked(n).ok_or(WireError::Truncated)?;
        self.0 = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| WireError::Truncated)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn bool(&mut self, field: &'static str) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::BadBool(field)),
        }
    }
    fn str(&mut self, field: &'static str, max: usize) -> Result<String, WireError> {
        let n = usize::from(self.u16()?);
        if n > max {
            return Err(WireError::BadString(field));
        }
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| WireError::BadString(field))
    }
    fn finish(self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.0.len()))
        }
    }
}

fn open(bytes: &[u8]) -> Result<(u8, Reader<'_>), WireError> {
    let mut r = Reader(bytes);
    if r.take(4).map_err(|_| WireError::BadMagic)? != MAGIC {
        return Err(WireError::BadMagic);
    }
    let kind = r.u8()?;
    Ok((kind, r))
}

/// Longest bucket an [`Request::Intern`] may carry (S3 allows 63 bytes; the engine's own
/// limits are checked when the daemon interns).
const MAX_BUCKET_FIELD: usize = 255;
/// Longest key an [`Request::Intern`] may carry (S3 allows 1024 bytes), and longest endpoint
/// a [`Reply::Welcome`] may carry. With [`MAX_BUCKET_FIELD`], the largest request fits in
/// [`MAX_REQUEST`], so whatever [`Request::decode`] accepts a daemon can also receive.
const MAX_NAME_FIELD: usize = 2048;
/// Longest error message carried.
const MAX_MESSAGE_TEXT: usize = 4096;
/// Most clients one status report lists.
const MAX_STATUS_CLIENTS: usize = 512;

impl Request {
    /// The message's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            Self::Hello { name } => {
                let mut w = Writer::new(kind::HELLO);
                w.str(name);
                w
            }
            Self::Intern { bucket, key } => {
                let mut w = Writer::new(kind::INTERN);
                w.str(bucket).str(key);
                w
            }
            Self::RegisterHost { len } => {
                let mut w = Writer::new(kind::REGISTER_HOST);
                w.u64(*len);
                w
            }
            Self::RegisterDevice(e) => {
                let mut w = Writer::new(kind::REGISTER_DEVICE);
                w.0.extend_from_slice(&e.handle);
                w.u64(e.offset).u64(e.alloc_len).u64(e.len).u32(e.ordinal);
                w
            }
            Self::Deregister { buf, timeout_ms } => {
                let mut w = Writer::new(kind::DEREGISTER);
                w.u32(*buf).u32(*timeout_ms);
                w
            }
            Self::OpenQueue {
                sq_entries,
                cq_entries,
                timestamps,
            } => {
                let mut w = Writer::new(kind::OPEN_QUEUE);
                w.u32(*sq_entries).u32(*cq_entries).bool(*timestamps);
                w
            }
            Self::Status => Writer::new(kind::STATUS),
        };
        w.0
    }

    /// Decodes one request (total: never panics).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let (k, mut r) = open(bytes)?;
        let req = match k {
            kind::HELLO => Self::Hello {
                name: r.str("name", MAX_NAME)?,
            },
            kind::INTERN => Self::Intern {
                bucket: r.str("bucket", MAX_BUCKET_FIELD)?,
                key: r.str("key", MAX_NAME_FIELD)?,
            },
            kind::REGISTER_HOST => Self::RegisterHost { len: r.u64()? },
            kind::REGISTER_DEVICE => Self::RegisterDevice(DeviceExport {
                handle: r.array()?,
                offset: r.u64()?,
                alloc_len: r.u64()?,
                len: r.u64()?,
                ordinal: r.u32()?,
            }),
            kind::DEREGISTER => Self::Deregister {
                buf: r.u32()?,
                timeout_ms: r.u32()?,
            },
            kind::OPEN_QUEUE => Self::OpenQueue {
                sq_entries: r.u32()?,
                cq_entries: r.u32()?,
                timestamps: r.bool("timestamps")?,
            },
            kind::STATUS => Self::Status,
            other => return Err(WireError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(req)
    }
}

impl Reply {
    /// The message's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            Self::Welcome {
                endpoint,
                workers,
                max_in_flight,
            } => {
                let mut w = Writer::new(kind::WELCOME);
                w.str(endpoint).u32(*workers).u32(*max_in_flight);
                w
            }
            Self::Object { id } => {
                let mut w = Writer::new(kind::OBJECT);
                w.u32(*id);
                w
            }
            Self::Buffer { id } => {
                let mut w = Writer::new(kind::BUFFER);
                w.u32(*id);
                w
            }
            Self::Queue {
                sq_entries,
                cq_entries,
                timestamps,
            } => {
                let mut w = Writer::new(kind::QUEUE);
                w.u32(*sq_entries).u32(*cq_entries).bool(*timestamps);
                w
            }
            Self::Done => Writer::new(kind::DONE),
            Self::Status(clients) => {
                let mut w = Writer::new(kind::STATUS_REPORT);
                let shown = &clients[..clients.len().min(MAX_STATUS_CLIENTS)];
                w.u32(u32::try_from(shown.len()).unwrap_or(0));
                for c in shown {
                    w.i32(c.pid)
                        .u32(c.uid)
                        .str(&c.name)
                        .u32(c.queues)
                        .u64(c.in_flight)
                        .u64(c.ops)
                        .u64(c.bytes)
                        .u32(c.registrations)
                        .u64(c.registered_bytes);
                }
                w
            }
            Self::Error { kind: k, message } => {
                let mut w = Writer::new(kind::ERROR);
                w.u8(k.code()).str(message);
                w
            }
        };
        w.0
    }

    /// Decodes one reply (total: never panics).
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let (k, mut r) = open(bytes)?;
        let reply = match k {
            kind::WELCOME => Self::Welcome {
                endpoint: r.str("endpoint", MAX_NAME_FIELD)?,
                workers: r.u32()?,
                max_in_flight: r.u32()?,
            },
            kind::OBJECT => Self::Object { id: r.u32()? },
            kind::BUFFER => Self::Buffer { id: r.u32()? },
            kind::QUEUE => Self::Queue {
                sq_entries: r.u32()?,
                cq_entries: r.u32()?,
                timestamps: r.bool("timestamps")?,
            },
            kind::DONE => Self::Done,
            kind::STATUS_REPORT => {
                let n = r.u32()? as usize;
                if n > MAX_STATUS_CLIENTS {
                    return Err(WireError::TooMany);
                }
                let mut clients = Vec::with_capacity(n);
                for _ in 0..n {
                    clients.push(ClientStatus {
                        pid: r.i32()?,
                        uid: r.u32()?,
                        name: r.str("name", MAX_NAME)?,
                        queues: r.u32()?,
                        in_flight: r.u64()?,
                        ops: r.u64()?,
                        bytes: r.u64()?,
                        registrations: r.u32()?,
                        registered_bytes: r.u64()?,
                    });
                }
                Self::Status(clients)
            }
            kind::ERROR => Self::Error {
                kind: ErrorKind::from_code(r.u8()?),
                message: r.str("message", MAX_MESSAGE_TEXT)?,
            },
            other => return Err(WireError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests() -> Vec<Request> {
        vec![
            Request::Hello {
                name: "rank-3".into(),
            },
            Request::Intern {
                bucket: "b".into(),
                key: "model/shard-00001.safetensors".into(),
            },
            Request::RegisterHost { len: 1 << 30 },
            Request::RegisterDevice(DeviceExport {
                handle: [7; 64],
                offset: 4096,
                alloc_len: 1 << 21,
                len: 8192,
                ordinal: 0,
            }),
            Request::Deregister {
                buf: 3,
                timeout_ms: 5000,
            },
            Request::OpenQueue {
                sq_entries: 256,
                cq_entries: 512,
                timestamps: true,
            },
            Request::Status,
        ]
    }

    #[test]
    fn requests_and_replies_round_trip() {
        for r in requests() {
            let bytes = r.encode();
            assert!(bytes.len() <= MAX_REQUEST);
            assert_eq!(Request::decode(&bytes), Ok(r));
        }
        let replies = vec![
            Reply::Welcome {
                endpoint: "http://127.0.0.1:9000".into(),
                workers: 8,
                max_in_flight: 512,
            },
            Reply::Object { id: 1 },
            Reply::Buffer { id: 2 },
            Reply::Queue {
                sq_entries: 64,
                cq_entries: 128,
                timestamps: false,
            },
            Reply::Done,
            Reply::Status(vec![ClientStatus {
                pid: 42,
                uid: 1000,
                name: "x".into(),
                queues: 1,
                in_flight: 2,
                ops: 3,
                bytes: 4,
                registrations: 5,
                registered_bytes: 6,
            }]),
            Reply::Error {
                kind: ErrorKind::Busy,
                message: "in use".into(),
            },
        ];
        for r in replies {
            assert_eq!(Reply::decode(&r.encode()), Ok(r));
        }
    }

    #[test]
    fn whatever_decodes_fits_the_receive_buffers() {
        // A request the decoder accepts must fit the daemon's receive buffer, or a client
        // would be dropped (truncated packet) for a request the codec calls valid. Bucket and
        // key each at, and one past, their limits and the old 2048-byte bucket limit.
        let mut accepted = 0;
        for b in [1, MAX_BUCKET_FIELD, MAX_BUCKET_FIELD + 1, MAX_NAME_FIELD] {
            for k in [MAX_NAME_FIELD, MAX_NAME_FIELD + 1] {
                let bytes = Request::Intern {
                    bucket: "b".repeat(b),
                    key: "k".repeat(k),
                }
                .encode();
                if Request::decode(&bytes).is_ok() {
                    assert!(bytes.len() <= MAX_REQUEST, "{b}+{k}: {} bytes", bytes.len());
                    accepted += 1;
                }
            }
        }
        assert_eq!(
            accepted, 2,
            "buckets of 1 and MAX_BUCKET_FIELD bytes with a full key"
        );
        // The largest replies fit the client's receive buffer.
        let full = ClientStatus {
            name: "n".repeat(MAX_NAME),
            ..ClientStatus::default()
        };
        let largest = [
            Reply::Status(vec![full; MAX_STATUS_CLIENTS]),
            Reply::Error {
                kind: ErrorKind::Failed,
                message: "m".repeat(MAX_MESSAGE_TEXT),
            },
            Reply::Welcome {
                endpoint: "e".repeat(MAX_NAME_FIELD),
                workers: u32::MAX,
                max_in_flight: u32::MAX,
            },
        ];
        for r in largest {
            let bytes = r.encode();
            assert!(bytes.len() <= MAX_REPLY, "{} bytes", bytes.len());
            assert_eq!(Reply::decode(&bytes), Ok(r));
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        assert_eq!(Request::decode(b""), Err(WireError::BadMagic));
        assert_eq!(Request::decode(b"XXXX\x01"), Err(WireError::BadMagic));
        assert_eq!(Request::decode(b"HOD1"), Err(WireError::Truncated));
        assert_eq!(
            Request::decode(b"HOD1\x63"),
            Err(WireError::UnknownKind(0x63))
        );
        let mut b = Request::Status.encode();
        b.push(0);
        assert_eq!(Request::decode(&b), Err(WireError::Trailing(1)));
        let mut q = Request::OpenQueue {
            sq_entries: 1,
            cq_entries: 1,
            timestamps: false,
        }
        .encode();
        *q.last_mut().unwrap() = 2;
        assert_eq!(Request::decode(&q), Err(WireError::BadBool("timestamps")));
        let long = Request::Hello {
            name: "n".repeat(MAX_NAME + 1),
        }
        .encode();
        assert_eq!(Request::decode(&long), Err(WireError::BadString("name")));
        // Every prefix of every valid request is refused, never a panic.
        for r in requests() {
            let bytes = r.encode();
            for cut in 0..bytes.len() {
                assert!(Request::decode(&bytes[..cut]).is_err());
            }
        }
    }
}
