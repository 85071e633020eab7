//! Landing digests: the CRC-64/NVME of the bytes peers WRITE into a region, computed by the
//! responder as they land.
//!
//! A reader that checks what RDMA WRITEs delivered (the engine compares a GET's bytes with the
//! checksum the server names for them) would otherwise read the whole destination once more
//! after the fact, from memory that has gone cold: at 1 MiB and 16 MiB per op that pass was
//! most of what the soft client spent beyond the HTTP path, which checksums a body while it
//! arrives. A region that tracks its landing ([`super::MemoryRegion::track_landing`]) has the
//! receiving I/O thread feed each WRITE frame's payload to a CRC-64/NVME in the same pass as
//! the frame's own CRC-32C, while the bytes are still in cache.
//!
//! The digest covers the region's bytes `0..cursor` and stays valid only while:
//! - every WRITE frame into the region continued it (started at the cursor), one at a time,
//!   and passed its frame checksum before joining it;
//! - nothing else wrote the region: a WRITE elsewhere (a gap, an overlap, a second writer),
//!   a RECV or READ response landing in it, a local [`super::MemoryRegion::write`], or a frame
//!   that failed half-way breaks it for good.
//!
//! A broken digest, or one that does not cover exactly the bytes asked about, answers `None`:
//! the reader checks the bytes themselves, as without tracking. A digest never vouches for
//! bytes it did not see land.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use s3_lite::checksum::Crc64Nvme;

#[derive(Debug, Default)]
struct State {
    /// The region's bytes `0..cursor` landed in order; `crc` is their CRC-64/NVME.
    cursor: u64,
    crc: u64,
    /// A frame is landing now: its bytes are changing memory but are not in `crc` yet.
    landing: bool,
    /// Something other than an in-order WRITE touched the region.
    broken: bool,
    /// Rung once the digest covers at least this many bytes (no frame landing) or breaks.
    watch: Option<(u64, Arc<mio::Waker>)>,
}

impl State {
    /// Rings the watcher whose wait is over (covered, or broken for good).
    fn notify(&mut self) {
        let due = self
            .watch
            .as_ref()
            .is_some_and(|(at, _)| self.broken || (!self.landing && self.cursor >= *at));
        if due && let Some((_, w)) = self.watch.take() {
            let _ = w.wake();
        }
    }
}

/// Where a region's first `len` bytes stand ([`Landing::state_of_first`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landed {
    /// Exactly those bytes landed in order, with this CRC-64/NVME.
    Covered(u64),
    /// Fewer have landed so far (or a frame is landing now); the digest is intact.
    Pending,
    /// The digest broke, or covers more than `len`: it will never vouch for them.
    Broken,
}

/// A region's landing digest; clones share it (the region keeps one, readers another).
#[derive(Debug, Clone, Default)]
pub struct Landing(Arc<Mutex<State>>);

impl Landing {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The CRC-64/NVME of the region's first `len` bytes, when the digest covers exactly them
    /// and no frame is landing now; `None` tells the reader to checksum the bytes itself.
    #[must_use]
    pub fn crc64_of_first(&self, len: u64) -> Option<u64> {
        match self.state_of_first(len) {
            Landed::Covered(crc) => Some(crc),
            Landed::Pending | Landed::Broken => None,
        }
    }

    /// Whether the region's first `len` bytes have landed, may still land, or never will be
    /// vouched for: what a reader that was answered before the bytes finished landing waits
    /// on.
    #[must_use]
    pub fn state_of_first(&self, len: u64) -> Landed {
        let s = self.lock();
        if s.broken || s.cursor > len {
            Landed::Broken
        } else if s.cursor == len && !s.landing {
            Landed::Covered(s.crc)
        } else {
            Landed::Pending
        }
    }

    /// Rings `waker` once the digest covers at least `len` bytes or breaks (at once if it
    /// already does); replaces an earlier watch.
    pub fn wake_when_covered(&self, len: u64, waker: Arc<mio::Waker>) {
        let mut s = self.lock();
        s.watch = Some((len, waker));
        s.notify();
    }

    /// A write other than an in-order WRITE touches the region: the digest no longer vouches
    /// for its bytes.
    pub(crate) fn invalidate(&self) {
        let mut s = self.lock();
        s.broken = true;
        s.notify();
    }

    /// A WRITE frame starts landing at region offset `off`: its digest to feed, when the frame
    /// continues this one and no other frame is landing; otherwise the digest breaks.
    pub(crate) fn begin(&self, off: u64) -> Option<FrameDigest> {
        let mut s = self.lock();
        if s.broken {
            return None;
        }
        if off != s.cursor || s.landing {
            s.broken = true;
            s.notify();
            return None;
        }
        s.landing = true;
        Some(FrameDigest {
            landing: self.clone(),
            off,
            crc: Crc64Nvme::new(),
            joined: false,
        })
    }
}

/// One WRITE frame's payload digest while it lands. Joins the region's digest with
/// [`FrameDigest::join`] once the frame passed its checksum; dropped without joining (the
/// frame failed, the connection ended), it breaks the region's digest.
#[derive(Debug)]
pub(crate) struct FrameDigest {
    landing: Landing,
    off: u64,
    crc: Crc64Nvme,
    joined: bool,
}

impl FrameDigest {
    /// The running checksum the frame's payload is fed to, in order.
    pub(crate) fn crc(&mut self) -> &mut Crc64Nvme {
        &mut self.crc
    }

    /// The frame passed its checksum: its bytes extend the region's digest.
    pub(crate) fn join(mut self) {
        self.joined = true;
        let mut s = self.landing.lock();
        s.landing = false;
        if s.broken || s.cursor != self.off {
            s.broken = true;
            s.notify();
            return;
        }
        let len = self.crc.len();
        s.crc = Crc64Nvme::combine(s.crc, self.crc.finish(), len);
        s.cursor += len;
        s.notify();
    }
}

impl Drop for FrameDigest {
    fn drop(&mut self) {
        if !self.joined {
            let mut s = self.landing.lock();
            s.landing = false;
            s.broken = true;
            s.notify();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn land(l: &Landing, off: u64, bytes: &[u8]) -> bool {
        let Some(mut d) = l.begin(off) else {
            return false;
        };
        for piece in bytes.chunks(7) {
            d.crc().update(piece);
        }
        d.join();
        true
    }

    #[test]
    fn in_order_frames_give_the_checksum_of_the_whole() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let l = Landing::default();
        assert_eq!(l.crc64_of_first(0), Some(Crc64Nvme::checksum(&[])));
        assert!(land(&l, 0, &data[..4096]));
        assert!(land(&l, 4096, &data[4096..9000]));
        assert!(land(&l, 9000, &data[9000..]));
        assert_eq!(l.crc64_of_first(10_000), Some(Crc64Nvme::checksum(&data)));
        // Only exactly the covered length is vouched for.
        assert_eq!(l.crc64_of_first(9_999), None);
        assert_eq!(l.crc64_of_first(10_001), None);
    }

    #[test]
    fn a_gap_an_overlap_or_a_rewrite_breaks_it_for_good() {
        for off in [0u64, 100, 300] {
            let l = Landing::default();
            assert!(land(&l, 0, &[1; 200]));
            assert!(!land(&l, off, &[2; 50]), "a frame at {off} after 0..200");
            assert!(!land(&l, 200, &[3; 50]), "stays broken");
            assert_eq!(l.crc64_of_first(200), None);
            assert_eq!(l.crc64_of_first(250), None);
        }
        let l = Landing::default();
        assert!(land(&l, 0, &[1; 10]));
        l.invalidate();
        assert_eq!(l.crc64_of_first(10), None);
    }

    /// A watch rings once the digest covers the length (not before), or when it breaks.
    #[test]
    fn a_watch_rings_when_covered_or_broken() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(7)).unwrap());
        let mut events = mio::Events::with_capacity(4);
        let mut rung = |poll: &mut mio::Poll| {
            events.clear();
            poll.poll(&mut events, Some(std::time::Duration::from_millis(20)))
                .unwrap();
            !events.is_empty()
        };
        let mut poll = poll;
        let l = Landing::default();
        l.wake_when_covered(20, Arc::clone(&waker));
        assert!(land(&l, 0, &[1; 10]));
        assert_eq!(l.state_of_first(20), Landed::Pending);
        assert!(!rung(&mut poll), "10 of 20 bytes");
        assert!(land(&l, 10, &[2; 10]));
        assert!(rung(&mut poll), "covered");
        let mut want = Crc64Nvme::new();
        want.update(&[1; 10]);
        want.update(&[2; 10]);
        assert_eq!(l.state_of_first(20), Landed::Covered(want.finish()));
        assert_eq!(
            l.state_of_first(19),
            Landed::Broken,
            "more than asked landed"
        );

        let l = Landing::default();
        l.wake_when_covered(20, Arc::clone(&waker));
        assert!(!land(&l, 5, &[1; 10]), "a gap");
        assert!(rung(&mut poll), "broken");
        assert_eq!(l.state_of_first(20), Landed::Broken);
        // Already covered: rings at once.
        let l = Landing::default();
        assert!(land(&l, 0, &[1; 4]));
        l.wake_when_covered(4, Arc::clone(&waker));
        assert!(rung(&mut poll), "already covered");
    }

    #[test]
    fn a_frame_landing_now_or_failed_vouches_for_nothing() {
        let l = Landing::default();
        assert!(land(&l, 0, &[1; 10]));
        let d = l.begin(10).expect("continues the digest");
        assert_eq!(l.crc64_of_first(10), None, "bytes are changing");
        assert!(l.begin(10).is_none(), "a second frame at once breaks it");
        d.join();
        assert_eq!(l.crc64_of_first(10), None);

        let l = Landing::default();
        let mut d = l.begin(0).expect("first frame");
        d.crc().update(&[9; 4]);
        drop(d);
        assert_eq!(l.crc64_of_first(0), None);
        assert_eq!(l.crc64_of_first(4), None);
    }
}
