//! Work the RDMA dialects run off the worker thread (pairing, hipobj-rc-v2 exchanges) and the
//! doorbell that brings their results back into the worker's event loop.
//!
//! Those exchanges are blocking socket code on threads of their own; their results travel
//! through an mpsc channel, and each send is followed by one byte written to a socket pair
//! whose read end is registered with the worker's `mio` poller under [`NOTIFY`]. The worker
//! wakes on that token (its fabric's `on_ready`), drains the bytes, then the channel.
//!
//! Ordering: a sender puts the message in the channel *before* writing its byte, and the
//! worker drains the bytes *before* the channel, so no message can be left behind without a
//! later readiness edge (the poller is edge-triggered). A full socket buffer on write means
//! the worker has an edge pending already, so the lost byte does not matter.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use mio::{Interest, Token};

use super::connect::{ConnectError, Link};

/// The doorbell's token: above every connection slot, below the worker's own waker.
pub(crate) const NOTIFY: Token = Token(usize::MAX - 1);

/// What an off-worker job reports.
#[derive(Debug)]
pub(crate) enum Msg {
    /// A pairing ended (`epoch` names the pairing it answers).
    Paired {
        epoch: u64,
        result: Result<Link, ConnectError>,
    },
    /// A pairing has run longer than its ops wait for (`Auto`): send them over HTTP.
    PairSlow { epoch: u64 },
}

/// The sending half, one clone per job thread.
#[derive(Debug, Clone)]
pub(crate) struct Poster {
    tx: Sender<Msg>,
    bell: Arc<UnixStream>,
}

impl Poster {
    /// Delivers `m` and wakes the worker. A gone worker (engine dropped) is not an error: the
    /// result is simply dropped.
    pub(crate) fn post(&self, m: Msg) {
        if self.tx.send(m).is_ok() {
            // WouldBlock: the buffer is full, so the worker has a readable edge pending.
            let _ = (&*self.bell).write(&[1]);
        }
    }
}

/// The worker's half.
#[derive(Debug)]
pub(crate) struct Mailbox {
    rx: Receiver<Msg>,
    poster: Poster,
    wake: mio::net::UnixStream,
}

impl Mailbox {
    /// A mailbox registered with `io` under [`NOTIFY`].
    pub(crate) fn new(io: &mio::Registry) -> io::Result<Self> {
        let (r, w) = UnixStream::pair()?;
        r.set_nonblocking(true)?;
        w.set_nonblocking(true)?;
        let mut wake = mio::net::UnixStream::from_std(r);
        io.register(&mut wake, NOTIFY, Interest::READABLE)?;
        let (tx, rx) = channel();
        Ok(Self {
            rx,
            poster: Poster {
                tx,
                bell: Arc::new(w),
            },
            wake,
        })
    }

    /// A sender for a job thread.
    pub(crate) fn poster(&self) -> Poster {
        self.poster.clone()
    }

    /// Everything delivered so far (bytes first, then the channel: see the module docs).
    pub(crate) fn drain(&mut self) -> Vec<Msg> {
        let mut buf = [0u8; 256];
        loop {
            match self.wake.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        // Empty or disconnected (the sender half lives here too, so never the latter).
        self.rx.try_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A post from another thread wakes a poller on `NOTIFY` and is drained in order.
    #[test]
    fn post_wakes_the_poller() {
        let mut poll = mio::Poll::new().unwrap();
        let mut mb = Mailbox::new(poll.registry()).unwrap();
        let p = mb.poster();
        let t = std::thread::spawn(move || {
            p.post(Msg::PairSlow { epoch: 7 });
            p.post(Msg::PairSlow { epoch: 8 });
        });
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert!(events.iter().any(|e| e.token() == NOTIFY));
        t.join().unwrap();
        let got: Vec<u64> = mb
            .drain()
            .into_iter()
            .map(|m| match m {
                Msg::PairSlow { epoch } => epoch,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(got, vec![7, 8]);
        // Drained: nothing more, and no further edge without a new post.
        assert!(mb.drain().is_empty());
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .unwrap();
        assert!(events.is_empty());
    }
}
