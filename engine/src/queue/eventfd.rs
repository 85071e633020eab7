//! The completion-readiness eventfd of a [`Queue`](super::Queue): the only FFI of the queue
//! module. Each block makes exactly one libc call.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
#[cfg(feature = "tokio")]
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ring_api::Doorbell;

/// A non-blocking, close-on-exec eventfd in counter mode, and how often it was written: a
/// queue's completion-readiness fd, and the doorbells a daemon and its clients share.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
    /// Successful or saturated writes so far (diagnostics: coalescing is measurable).
    signals: AtomicU64,
}

impl EventFd {
    /// A new eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; it returns a new fd or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a freshly created fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self {
            fd,
            signals: AtomicU64::new(0),
        })
    }

    /// Takes over a descriptor received from another process; the caller checked that it is
    /// an eventfd ([`crate::attach::sys::is_eventfd`]). Writes and reads on anything else fail
    /// harmlessly (`EINVAL`/`EBADF`).
    pub fn from_owned(fd: OwnedFd) -> Self {
        Self {
            fd,
            signals: AtomicU64::new(0),
        }
    }

    /// Adds 1 to the counter, making the fd readable. Never blocks: a saturated counter
    /// (`EAGAIN`) is already readable.
    pub fn signal(&self) {
        self.signals.fetch_add(1, Ordering::Relaxed);
        let one: u64 = 1;
        // SAFETY: `one` is 8 readable bytes that outlive the call; a bad fd only yields EBADF.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Reads (and so resets) the counter; returns whether it was non-zero. Never blocks.
    pub fn drain(&self) -> bool {
        let mut value: u64 = 0;
        // SAFETY: `value` is 8 writable bytes exclusively borrowed for the call.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut value).cast(), 8) };
        n == 8 && value > 0
    }

    /// Writes so far (diagnostics).
    pub fn signals(&self) -> u64 {
        self.signals.load(Ordering::Relaxed)
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// What tokio's reactor watches for an [`AsyncQueue`](crate::AsyncQueue): a counted
/// reference to the queue's eventfd, so the fd outlives the registration.
#[cfg(feature = "tokio")]
#[derive(Debug)]
pub(crate) struct ReadyFd(Arc<EventFd>);

#[cfg(feature = "tokio")]
impl AsRawFd for ReadyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Registers the eventfd with the current tokio runtime's reactor (readable interest).
///
/// Errors outside a runtime or when the registration fails; panics, as tokio does, in a
/// runtime built without IO.
#[cfg(feature = "tokio")]
pub(crate) fn register_with_tokio(
    fd: Arc<EventFd>,
) -> io::Result<tokio::io::unix::AsyncFd<ReadyFd>> {
    tokio::runtime::Handle::try_current().map_err(io::Error::other)?;
    // SAFETY: `ReadyFd` holds an `Arc` of the `EventFd`, whose `OwnedFd` is closed only when
    // the last reference drops, so the fd stays open and names the same eventfd for the
    // `AsyncFd`'s whole life; `as_raw_fd` always returns that one fd.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(ReadyFd(fd), tokio::io::Interest::READABLE)
    }
    .map_err(|e| e.into_parts().1)
}

/// The worker rings the eventfd through ring-api's completion bell.
impl Doorbell for EventFd {
    fn ring(&self) {
        self.signal();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_then_drain_once() {
        let e = EventFd::new().unwrap();
        assert!(
            !e.drain(),
            "fresh eventfd is empty (and reading it does not block)"
        );
        e.signal();
        e.signal();
        assert!(e.drain());
        assert!(!e.drain(), "one read resets the counter");
        assert_eq!(e.signals(), 2);
    }
}
