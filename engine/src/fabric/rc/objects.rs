//! The four handles of the `rc` interface: protection domain, memory region, completion queue,
//! queue pair. Each forwards to the fabric it wraps; see the parent module for the differences.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use s3_lite::rdma::RcToken;

use super::{Access, RcError, RcKind, RcPostError, RecvWr, SendWr, SoftPath, WorkCompletion};
use crate::fabric::soft;
use crate::verbs;

/// A protection domain.
#[derive(Debug, Clone)]
pub enum RcPd {
    /// Soft fabric.
    Soft(soft::ProtectionDomain),
    /// Verbs.
    Verbs(verbs::ProtectionDomain),
}

impl RcPd {
    /// Which fabric.
    #[must_use]
    pub fn kind(&self) -> RcKind {
        match self {
            Self::Soft(_) => RcKind::Soft,
            Self::Verbs(_) => RcKind::Verbs,
        }
    }

    /// Registers `len` zeroed bytes owned by the registration (staging buffers).
    pub fn register_owned(&self, len: usize, access: Access) -> Result<RcMr, RcError> {
        Ok(match self {
            Self::Soft(pd) => RcMr::Soft(pd.register_owned(len, access)?),
            Self::Verbs(pd) => RcMr::Verbs(pd.register_owned(len, access.into())?),
        })
    }

    /// Registers `len` zeroed bytes owned by the registration as a [`RcStaging`] buffer (the
    /// gateway's staging buffers: files are read straight into it, [`RcStaging::read_file_at`]).
    pub fn register_staging(&self, len: usize, access: Access) -> Result<RcStaging, RcError> {
        Ok(RcStaging {
            mr: self.register_owned(len, access)?,
        })
    }

    /// Registers caller memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid until [`RcPd::deregister`] of the returned region has
    /// returned, and while the region's rkey is advertised or a work request covers it the
    /// caller must not access those bytes except through the region (the fabric writes them
    /// from other threads or from the NIC).
    #[allow(unsafe_code)]
    pub unsafe fn register_raw(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> Result<RcMr, RcError> {
        Ok(match self {
            // SAFETY: the caller's contract is both fabrics' contract for raw registration.
            Self::Soft(pd) => RcMr::Soft(unsafe { pd.register_raw(ptr, len, access) }),
            // SAFETY: as above.
            Self::Verbs(pd) => RcMr::Verbs(unsafe { pd.register_raw(ptr, len, access.into()) }?),
        })
    }

    /// Registers `len` bytes at `offset` of the dmabuf `fd`, addressed by peers from `iova`:
    /// `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)` on verbs (the NIC reads and
    /// writes the exporter's memory, e.g. VRAM, directly), a `MAP_SHARED` mapping of the dmabuf
    /// on the soft device (exporters with `mmap` only). The fd may be closed afterwards.
    ///
    /// Errors: the soft device's [`soft::MrError::Dmabuf`] / `Bounds`; verbs'
    /// `Error::RegDmabufMr` (with the errno) or `Unsupported` (libibverbs before rdma-core 34).
    /// See [`RcError::errno`].
    pub fn register_dmabuf(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<RcMr, RcError> {
        Ok(match self {
            Self::Soft(pd) => RcMr::Soft(pd.register_dmabuf(fd, offset, len, iova, access)?),
            Self::Verbs(pd) => {
                RcMr::Verbs(pd.register_dmabuf(fd, offset, len, iova, access.into())?)
            }
        })
    }

    /// Ends a registration. When this returns no peer access with its keys is in progress
    /// and none will succeed (soft: the domain's fence; verbs: `ibv_dereg_mr`, which runs
    /// here because the region is consumed and regions are never cloned by the dialects).
    pub fn deregister(&self, mr: RcMr) -> Result<(), RcError> {
        match (self, mr) {
            (Self::Soft(pd), RcMr::Soft(mr)) => Ok(pd.deregister(&mr)?),
            (Self::Verbs(_), RcMr::Verbs(mr)) => {
                drop(mr);
                Ok(())
            }
            (_, _) => Err(RcError::Mixed(
                "a memory region",
                "other",
                self.kind().as_str(),
            )),
        }
    }
}

/// A registered memory region.
#[derive(Debug)]
pub enum RcMr {
    /// Soft fabric.
    Soft(soft::MemoryRegion),
    /// Verbs.
    Verbs(verbs::MemoryRegion),
}

impl RcMr {
    /// Start address (what peers add offsets to).
    #[must_use]
    pub fn addr(&self) -> u64 {
        match self {
            Self::Soft(m) => m.addr(),
            Self::Verbs(m) => m.addr(),
        }
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> u64 {
        match self {
            Self::Soft(m) => m.len(),
            Self::Verbs(m) => m.len(),
        }
    }

    /// Whether the region is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Local key (SGEs).
    #[must_use]
    pub fn lkey(&self) -> u32 {
        match self {
            Self::Soft(m) => m.lkey(),
            Self::Verbs(m) => m.lkey(),
        }
    }

    /// Remote key (tokens).
    #[must_use]
    pub fn rkey(&self) -> u32 {
        match self {
            Self::Soft(m) => m.rkey(),
            Self::Verbs(m) => m.rkey(),
        }
    }

    /// The SGE of `len` bytes at `off` (bounds-checked).
    pub fn sge(&self, off: u64, len: u32) -> Result<super::Sge, RcError> {
        off.checked_add(u64::from(len))
            .filter(|&end| end <= self.len())
            .ok_or(RcError::SoftMr(soft::MrError::Bounds))?;
        Ok(super::Sge {
            addr: self.addr() + off,
            length: len,
            lkey: self.lkey(),
        })
    }

    /// Copies region bytes at `off` into `dst` (only while no work request covers them).
    pub fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), RcError> {
        match self {
            Self::Soft(m) => Ok(m.read(off, dst)?),
            Self::Verbs(m) => Ok(m.read(off, dst)?),
        }
    }

    /// Copies `src` into the region at `off` (only while no work request covers them).
    pub fn write(&self, off: u64, src: &[u8]) -> Result<(), RcError> {
        match self {
            Self::Soft(m) => Ok(m.write(off, src)?),
            Self::Verbs(m) => Ok(m.write(off, src)?),
        }
    }

    /// The region's landing digest (the CRC-64/NVME of what peers WRITE into it in order,
    /// computed as it lands: `soft::MemoryRegion::track_landing`), tracked from now on.
    /// `None` on verbs: a NIC places the bytes without the CPU seeing them, so a reader
    /// checksums them itself.
    #[must_use]
    pub fn track_landing(&self) -> Option<soft::Landing> {
        match self {
            Self::Soft(m) => Some(m.track_landing()),
            Self::Verbs(_) => None,
        }
    }
}

/// A registered buffer whose memory the registration itself owns ([`RcPd::register_staging`]):
/// its bytes stay allocated for as long as this handle lives, whatever happens to the keys, so
/// the kernel may be asked to write into it ([`RcStaging::read_file_at`]) without a copy.
///
/// INVARIANT: `mr` came from [`RcPd::register_owned`] (never a caller range, a dmabuf, or a
/// region another handle could free), and `mr.addr()` is the address of its first byte.
#[derive(Debug)]
pub struct RcStaging {
    mr: RcMr,
}

impl RcStaging {
    /// The registration (keys, address, length; [`RcMr::read`] / [`RcMr::write`]).
    #[must_use]
    pub fn mr(&self) -> &RcMr {
        &self.mr
    }

    /// The registration, e.g. for [`RcPd::deregister`].
    #[must_use]
    pub fn into_mr(self) -> RcMr {
        self.mr
    }

    /// Hands the buffer's bytes `off..off+len` to `seen`, in pieces, in order: a soft
    /// registration's bytes in place (one piece, no copy, fabric accesses held off meanwhile,
    /// [`crate::fabric::soft::MemoryRegion::inspect`]); a verbs registration's through a
    /// bounce buffer, since a NIC may access its memory. Call it only while no work request
    /// covers those bytes, as for [`RcMr::read`].
    pub fn inspect(
        &self,
        off: u64,
        len: usize,
        seen: &mut dyn FnMut(&[u8]),
    ) -> Result<(), RcError> {
        match &self.mr {
            RcMr::Soft(m) => Ok(m.inspect(off, len, |b| seen(b))?),
            RcMr::Verbs(m) => {
                // On the stack: this runs for every piece a GET reads from its file.
                let mut bounce = [0u8; 16 * 1024];
                let mut done = 0usize;
                while done < len {
                    let n = (len - done).min(bounce.len());
                    let piece = bounce.get_mut(..n).unwrap_or_default();
                    m.read(off + done as u64, piece)?;
                    seen(piece);
                    done += n;
                }
                Ok(())
            }
        }
    }

    /// Reads up to `len` bytes at offset `at` of `file` straight into the buffer at `off`, in
    /// one `pread(2)` (the file's own offset is not used or moved); returns the bytes read, 0 at
    /// the end of the file. A range outside the buffer is refused before anything is read, so
    /// no byte ever lands outside the registration.
    ///
    /// As with [`RcMr::write`], call it only while no work request covers those bytes: a
    /// concurrent fabric access sees some mix of old and new bytes (the fabrics treat
    /// registered memory as device memory), never undefined behaviour.
    #[allow(unsafe_code)]
    pub fn read_file_at(
        &self,
        off: u64,
        len: usize,
        file: &std::fs::File,
        at: u64,
    ) -> std::io::Result<usize> {
        let out_of_range = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "range outside the staging buffer",
            )
        };
        let end = off
            .checked_add(u64::try_from(len).map_err(|_| out_of_range())?)
            .ok_or_else(out_of_range)?;
        if end > self.mr.len() {
            return Err(out_of_range());
        }
        if len == 0 {
            return Ok(0);
        }
        let addr = self
            .mr
            .addr()
            .checked_add(off)
            .and_then(|a| usize::try_from(a).ok())
            .ok_or_else(out_of_range)?;
        let dst = addr as *mut u8;
        // SAFETY: `addr..addr+len` lies inside the registration (checked above), whose memory
        // the registration owns and keeps allocated while `self.mr` lives (type INVARIANT;
        // soft: the region's `RegionMem` behind an `Arc` this handle holds; verbs: the owned
        // allocation freed only when the last handle drops). Neither fabric ever forms a Rust
        // reference to registered bytes (soft/raw.rs, verbs/mr.rs module docs), so the
        // kernel's write aliases nothing. The pointer is only handed to the kernel.
        unsafe { crate::sys::pread_raw(std::os::fd::AsFd::as_fd(file), dst, len, at) }
    }
}

/// A completion queue (shared by the QPs that report to it).
#[derive(Debug, Clone)]
pub enum RcCq {
    /// Soft fabric.
    Soft(Arc<soft::CompletionQueue>),
    /// Verbs.
    Verbs(Arc<verbs::CompletionQueue>),
}

impl RcCq {
    /// Moves up to `out.len()` completions into `out`; never blocks.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> Result<usize, RcError> {
        match self {
            Self::Soft(cq) => Ok(cq.poll(out)),
            Self::Verbs(cq) => Ok(cq.poll(out)?),
        }
    }

    /// Asks the queue to wake `waker` whenever a completion arrives (`None`: stop). The soft
    /// CQ does (`true`); a verbs CQ does not (`false`): a worker waits for it through its
    /// completion channel ([`Self::event_fd`]) or polls it on a timer.
    pub fn notify_to(&self, waker: Option<Arc<mio::Waker>>) -> bool {
        match self {
            Self::Soft(cq) => {
                cq.set_waker(waker);
                true
            }
            Self::Verbs(_) => false,
        }
    }

    /// A verbs CQ's completion channel fd: readable once the CQ, armed by [`Self::arm`], has
    /// a completion. `None` for the soft CQ (it rings a waker instead, [`Self::notify_to`]) and
    /// for a verbs CQ whose provider gave no channel.
    pub fn event_fd(&self) -> Option<std::os::fd::RawFd> {
        match self {
            Self::Soft(_) => None,
            Self::Verbs(cq) => cq.event_fd(),
        }
    }

    /// Arms a verbs CQ's channel for its next completion (`ibv_req_notify_cq`); `false` when
    /// it could not be (no channel: poll instead). Poll once more after arming.
    pub fn arm(&self) -> bool {
        match self {
            Self::Soft(_) => false,
            Self::Verbs(cq) => cq.arm().is_ok(),
        }
    }

    /// Takes and acknowledges the events waiting on a verbs CQ's channel (after its fd turned
    /// readable); the CQ must be armed again for the next one.
    pub fn take_events(&self) -> u32 {
        match self {
            Self::Soft(_) => 0,
            Self::Verbs(cq) => cq.take_events(),
        }
    }

    /// Polls until at least one completion arrives or `timeout` passes. The soft CQ sleeps on
    /// its condition variable; a verbs CQ (no completion channel here) yields a few times, then
    /// naps in steps of up to 200 µs so an idle waiter does not take a core.
    pub fn poll_wait(
        &self,
        out: &mut [WorkCompletion],
        timeout: Duration,
    ) -> Result<usize, RcError> {
        let end = Instant::now() + timeout;
        let mut round = 0u32;
        loop {
            let n = self.poll(out)?;
            let now = Instant::now();
            if n > 0 || now >= end {
                return Ok(n);
            }
            match self {
                Self::Soft(cq) => {
                    cq.wait(end - now);
                }
                Self::Verbs(_) => {
                    // A few yields first (a completion usually follows within µs on a NIC),
                    // then naps growing to 200 µs so an idle waiter does not take a core.
                    round = round.saturating_add(1);
                    if round < 64 {
                        std::thread::yield_now();
                    } else {
                        let nap = Duration::from_micros(u64::from(round.min(200)));
                        std::thread::sleep(nap.min(end - now));
                    }
                }
            }
        }
    }
}

/// A reliable-connected queue pair.
#[derive(Debug)]
pub enum RcQp {
    /// Soft fabric.
    Soft(soft::QueuePair),
    /// Verbs.
    Verbs(verbs::QueuePair),
}

impl RcQp {
    /// Which fabric.
    #[must_use]
    pub fn kind(&self) -> RcKind {
        match self {
            Self::Soft(_) => RcKind::Soft,
            Self::Verbs(_) => RcKind::Verbs,
        }
    }

    /// QP number.
    #[must_use]
    pub fn qpn(&self) -> u32 {
        match self {
            Self::Soft(q) => q.qpn(),
            Self::Verbs(q) => q.qpn(),
        }
    }

    /// The most bytes one RDMA READ work request should ask for on this QP: the device's
    /// `max_read_packets` (engine/src/verbs/vendor.rs; rxe: 128) times the port's path MTU,
    /// or `None` where any size is fine (the soft fabric; NICs that pace READ responses).
    #[must_use]
    pub fn max_read_bytes(&self) -> Option<u32> {
        match self {
            Self::Soft(_) => None,
            Self::Verbs(q) => q
                .pd()
                .ctx()
                .vendor()
                .max_read_packets
                .map(|p| p.saturating_mul(q.port().path_mtu(None).bytes())),
        }
    }

    /// Whether the QP is in the error state (soft: as the fabric saw it; verbs: as our calls
    /// left it, or as a completion error reported through [`RcQp::note_completion`]).
    #[must_use]
    pub fn is_failed(&self) -> bool {
        match self {
            Self::Soft(q) => q.state() == soft::QpState::Err,
            Self::Verbs(q) => matches!(q.state(), verbs::QpState::Err | verbs::QpState::Sqe),
        }
    }

    /// Whether the soft fabric's dial of the peer (a connect with [`SoftPath::Connect`]) is
    /// still under way (always `false` on verbs: its connect makes no round trip).
    #[must_use]
    pub fn is_connecting(&self) -> bool {
        match self {
            Self::Soft(q) => q.is_connecting(),
            Self::Verbs(_) => false,
        }
    }

    /// Whether the soft fabric's dial of the peer failed (the QP is in `Err`; its posted
    /// work requests were flushed). Always `false` on verbs.
    #[must_use]
    pub fn dial_failed(&self) -> bool {
        match self {
            Self::Soft(q) => q.connect_error().is_some(),
            Self::Verbs(_) => false,
        }
    }

    /// Records a completion of this QP: a failed one (other than a flush) has moved a verbs
    /// QP to `Err` in the device; mirror it so [`RcQp::is_failed`] sees it.
    pub fn note_completion(&self, c: &WorkCompletion) {
        if !c.is_ok() {
            self.modify_to_err();
        }
    }

    /// `Reset → Init` with the remote rights peers get on this QP.
    pub fn modify_to_init(&self, access: Access) -> Result<(), RcError> {
        match self {
            Self::Soft(q) => Ok(q.modify_to_init(access)?),
            Self::Verbs(q) => Ok(q.modify_to_init(access.into())?),
        }
    }

    /// `Init → Rtr → Rts` towards the peer `peer` names. `path` is the soft fabric's TCP
    /// path (required there, ignored by verbs).
    pub fn connect(
        &self,
        peer: &RcToken,
        rq_psn: u32,
        sq_psn: u32,
        path: Option<SoftPath>,
    ) -> Result<(), RcError> {
        // The soft fabric's default dial bound (its `RtrAttr::from_token`).
        self.connect_within(peer, rq_psn, sq_psn, path, Duration::from_secs(10))
    }

    /// [`RcQp::connect`] with the soft fabric's dial bounded by `within` (a verbs connect
    /// makes no round trip: only local state changes). The soft dial runs on the device's I/O
    /// thread: this returns at once with the QP in `Rts` ([`RcQp::is_connecting`] until the
    /// connection is up); a failed dial fails the QP ([`RcQp::dial_failed`]), flushing what was
    /// posted, and rings the waker of the QP's CQ.
    pub fn connect_within(
        &self,
        peer: &RcToken,
        rq_psn: u32,
        sq_psn: u32,
        path: Option<SoftPath>,
        within: Duration,
    ) -> Result<(), RcError> {
        match self {
            Self::Soft(q) => {
                let mut rtr =
                    soft::RtrAttr::from_token(peer, rq_psn, path.ok_or(RcError::NoSoftPath)?);
                rtr.connect_timeout = within;
                q.modify_to_rtr(&rtr)?;
                Ok(q.modify_to_rts(&soft::RtsAttr::new(sq_psn))?)
            }
            Self::Verbs(q) => Ok(q.connect(peer, rq_psn, sq_psn)?),
        }
    }

    /// Any state `→ Err`: outstanding work is flushed; nothing more moves.
    pub fn modify_to_err(&self) {
        match self {
            Self::Soft(q) => q.modify_to_err(),
            Self::Verbs(q) => {
                let _ = q.modify_to_err();
            }
        }
    }

    /// This QP's RC token, advertising `window = (region, offset, len)` when given.
    pub fn local_token(&self, window: Option<(&RcMr, u64, u64)>) -> Result<RcToken, RcError> {
        match (self, window) {
            (Self::Soft(q), None) => Ok(q.local_token(None)?),
            (Self::Verbs(q), None) => Ok(q.local_token(None)?),
            (Self::Soft(q), Some((RcMr::Soft(m), o, l))) => Ok(q.local_token(Some((m, o, l)))?),
            (Self::Verbs(q), Some((RcMr::Verbs(m), o, l))) => Ok(q.local_token(Some((m, o, l)))?),
            _ => Err(RcError::Mixed(
                "a memory region",
                "other",
                self.kind().as_str(),
            )),
        }
    }

    /// Posts one send work request.
    pub fn post_send(&self, wr: &SendWr) -> Result<(), RcPostError> {
        match self {
            Self::Soft(q) => Ok(q.post_send(wr)?),
            Self::Verbs(q) => Ok(q.post_send(wr)?),
        }
    }

    /// Posts one receive.
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), RcPostError> {
        match self {
            Self::Soft(q) => Ok(q.post_recv(wr)?),
            Self::Verbs(q) => Ok(q.post_recv(wr)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn staging(len: usize) -> RcStaging {
        RcPd::Soft(soft::ProtectionDomain::new())
            .register_staging(len, Access::LOCAL_WRITE)
            .unwrap()
    }

    fn file_of(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn staging_reads_a_file_straight_in_byte_exact() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let f = file_of(&data);
        let s = staging(8192);
        assert_eq!(s.read_file_at(100, 4000, &f, 2500).unwrap(), 4000);
        let mut got = vec![0u8; 4000];
        s.mr().read(100, &mut got).unwrap();
        assert_eq!(got, &data[2500..6500]);
        // Untouched around the landing zone.
        let mut before = vec![1u8; 100];
        s.mr().read(0, &mut before).unwrap();
        assert!(before.iter().all(|&b| b == 0));
        // Past the end of the file: a short read, then 0.
        assert_eq!(s.read_file_at(0, 4096, &f, 9_000).unwrap(), 1000);
        assert_eq!(s.read_file_at(0, 4096, &f, 10_000).unwrap(), 0);
    }

    #[test]
    fn staging_refuses_a_range_outside_the_buffer_and_writes_nothing() {
        let f = file_of(&[0xAB; 9000]);
        let s = staging(4096);
        for (off, len) in [(0u64, 4097usize), (4000, 97), (4096, 1), (u64::MAX, 1)] {
            let e = s.read_file_at(off, len, &f, 0).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{off} {len}");
        }
        let mut all = vec![1u8; 4096];
        s.mr().read(0, &mut all).unwrap();
        assert!(
            all.iter().all(|&b| b == 0),
            "nothing may land on a refused read"
        );
        // The last byte exactly fits.
        assert_eq!(s.read_file_at(4095, 1, &f, 0).unwrap(), 1);
        let mut last = [0u8; 1];
        s.mr().read(4095, &mut last).unwrap();
        assert_eq!(last, [0xAB]);
    }
}
