//! The tokio_server example's core: a line protocol over TCP whose requests are range-gets
//! awaited through one shared [`AsyncQueue`]. Used by `main.rs` and by
//! `engine/tests/async_queue.rs`, which runs it against a real gateway on 127.0.0.1.
//!
//! Protocol, one request per line, answered in order on each connection:
//!
//! ```text
//! GET <bucket> <key> <offset> <len>\n   ->   OK <n>\n<n bytes>   |   ERR <reason>\n
//! ```
// The example binary serves; the test also uses the client half and the counters.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use engine::opcode::RangeGet;
use engine::{AsyncError, AsyncQueue, BufHandle, BufSlice, Engine, RegisterOptions};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Serves ranges through one engine queue; `slots` requests are in flight at once, each into
/// its own `slot_len`-byte slot of one registered buffer.
#[derive(Debug)]
pub struct RangeServer {
    engine: Arc<Engine>,
    queue: AsyncQueue,
    buf: BufHandle,
    slot_len: u64,
    free: Mutex<Vec<u64>>,
    permits: Semaphore,
    next_tag: AtomicU64,
}

impl RangeServer {
    /// Registers `slots * slot_len` bytes and takes one queue of `slots` depth. Call inside a
    /// tokio runtime.
    pub fn new(engine: Arc<Engine>, slots: usize, slot_len: u64) -> Result<Self, String> {
        let len = slots as u64 * slot_len;
        let buf = engine
            .register_host(len as usize, RegisterOptions::pinned())
            .map_err(|e| format!("register {len} bytes: {e}"))?;
        let depth = u32::try_from(slots).map_err(|_| "too many slots".to_owned())?;
        let queue = engine.queue(depth).map_err(|e| e.to_string())?;
        let queue = AsyncQueue::new(queue).map_err(|e| e.to_string())?;
        Ok(Self {
            engine,
            queue,
            buf,
            slot_len,
            free: Mutex::new((0..slots as u64).collect()),
            permits: Semaphore::new(slots),
            next_tag: AtomicU64::new(1),
        })
    }

    /// The queue (tests read its counters).
    pub fn queue(&self) -> &AsyncQueue {
        &self.queue
    }

    /// Accepts connections until the listener fails, one task per connection.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (sock, _) = listener.accept().await?;
            let me = Arc::clone(&self);
            tokio::spawn(async move {
                let _ = me.connection(sock).await;
            });
        }
    }

    async fn connection(&self, sock: TcpStream) -> std::io::Result<()> {
        let (r, mut w) = sock.into_split();
        let mut lines = BufReader::new(r).lines();
        while let Some(line) = lines.next_line().await? {
            match self.answer(&line).await {
                Ok(bytes) => {
                    w.write_all(format!("OK {}\n", bytes.len()).as_bytes())
                        .await?;
                    w.write_all(&bytes).await?;
                }
                Err(why) => w.write_all(format!("ERR {why}\n").as_bytes()).await?,
            }
        }
        Ok(())
    }

    /// One request: parse, take a slot, await the range-get, copy the bytes out.
    pub async fn answer(&self, line: &str) -> Result<Vec<u8>, String> {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [verb, bucket, key, offset, len] = parts.as_slice() else {
            return Err("expected: GET <bucket> <key> <offset> <len>".into());
        };
        if *verb != "GET" {
            return Err(format!("unknown verb {verb:?}"));
        }
        let offset: u64 = offset.parse().map_err(|_| "bad offset".to_owned())?;
        let len: u64 = len.parse().map_err(|_| "bad len".to_owned())?;
        if len == 0 || len > self.slot_len {
            return Err(format!("len must be 1..={}", self.slot_len));
        }
        let obj = self.engine.object(bucket, key).map_err(|e| e.to_string())?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| "server closing".to_owned())?;
        let slot = self.take_slot().ok_or("no free slot")?;
        let at = slot * self.slot_len;
        let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
        let sqe = RangeGet::new(obj, offset, BufSlice::new(self.buf, at, len))
            .user_data(tag)
            .build();
        let out = match self.queue.submit(sqe).await {
            Ok(n) => self
                .engine
                .read(self.buf, at, n)
                .map(|v| v.to_vec())
                .map_err(|e| e.to_string()),
            Err(AsyncError::Op(e)) => Err(format!("{e}")),
            Err(e) => Err(e.to_string()),
        };
        // A slot is reused only after its op completed: should this future be dropped
        // early, the op's lease on the slot still makes an overlapping op fail with EBUSY
        // rather than interleave bytes.
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
        out
    }

    fn take_slot(&self) -> Option<u64> {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }
}

/// A client of the protocol: sends one request, reads its answer.
pub async fn request(
    conn: &mut BufReader<TcpStream>,
    bucket: &str,
    key: &str,
    offset: u64,
    len: u64,
) -> std::io::Result<Result<Vec<u8>, String>> {
    use tokio::io::AsyncReadExt;
    conn.get_mut()
        .write_all(format!("GET {bucket} {key} {offset} {len}\n").as_bytes())
        .await?;
    let mut head = String::new();
    conn.read_line(&mut head).await?;
    let head = head.trim_end();
    if let Some(n) = head.strip_prefix("OK ") {
        let n: usize = n
            .parse()
            .map_err(|_| std::io::Error::other(format!("bad answer {head:?}")))?;
        let mut body = vec![0; n];
        conn.read_exact(&mut body).await?;
        Ok(Ok(body))
    } else if let Some(why) = head.strip_prefix("ERR ") {
        Ok(Err(why.to_owned()))
    } else {
        Err(std::io::Error::other(format!("bad answer {head:?}")))
    }
}
