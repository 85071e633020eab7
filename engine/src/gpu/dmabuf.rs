//! Dmabuf export: the page-aligned window arithmetic and the exported region.
//!
//! `cuMemGetHandleForAddressRange` (and HIP's equivalent) export whole host pages: the range
//! must start and end on a host page boundary. A registration of a sub-allocation (a buffer
//! that starts inside a page, or a slice of a larger `cuMemAlloc`) therefore exports the
//! enclosing page-aligned range and remembers where the caller's bytes start in it: that is
//! the `offset` passed to `ibv_reg_dmabuf_mr(pd, offset, len, iova, fd, access)`.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use super::GpuError;

/// The page-aligned range to export for the caller's bytes `[addr, addr + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmabufWindow {
    /// First byte exported (page aligned, within the allocation).
    pub start: u64,
    /// Bytes exported (a multiple of the page size, within the allocation).
    pub size: u64,
    /// Where the caller's first byte lies inside the exported range.
    pub offset: u64,
}

/// Computes the export window for `[addr, addr + len)` inside the allocation
/// `[alloc_base, alloc_base + alloc_len)`, aligned to `page` (a power of two).
///
/// Errors when the range is empty, overflows, or is not inside the allocation. The window is
/// clamped to the allocation: runtimes refuse ranges that cross allocations, and device
/// allocations start page aligned, so clamping never cuts the caller's bytes.
pub fn window(
    addr: u64,
    len: u64,
    page: u64,
    alloc_base: u64,
    alloc_len: u64,
) -> Result<DmabufWindow, GpuError> {
    let bad = |why: &str| {
        GpuError::InvalidArgument(format!("dmabuf export of {len} bytes at {addr:#x}: {why}"))
    };
    if len == 0 {
        return Err(bad("empty range"));
    }
    if page == 0 || !page.is_power_of_two() {
        return Err(bad("page size is not a power of two"));
    }
    let end = addr
        .checked_add(len)
        .ok_or_else(|| bad("range overflows"))?;
    let alloc_end = alloc_base
        .checked_add(alloc_len)
        .ok_or_else(|| bad("allocation overflows"))?;
    if addr < alloc_base || end > alloc_end {
        return Err(bad("range is not inside one allocation"));
    }
    let mask = page - 1;
    let start = (addr & !mask).max(alloc_base);
    let aligned_end = end
        .checked_add(mask)
        .map(|e| e & !mask)
        .ok_or_else(|| bad("range overflows when page aligned"))?
        .min(alloc_end);
    Ok(DmabufWindow {
        start,
        size: aligned_end - start,
        offset: addr - start,
    })
}

/// Device memory exported as a dmabuf: the fd (closed on drop) and where the registered bytes
/// start in it.
#[derive(Debug)]
pub struct DmabufRegion {
    /// The dmabuf file descriptor.
    pub fd: OwnedFd,
    /// Offset of the caller's first byte within the dmabuf (`ibv_reg_dmabuf_mr`'s `offset`).
    pub offset: u64,
    /// The caller's length.
    pub len: u64,
    /// Size of the exported (page-aligned) range.
    pub exported_size: u64,
}

impl DmabufRegion {
    /// The raw fd, for `ibv_reg_dmabuf_mr`.
    #[must_use]
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The host page size (dmabuf export granularity), 4096 if `sysconf` cannot tell.
#[must_use]
#[allow(unsafe_code)]
pub fn host_page_size() -> u64 {
    // SAFETY: sysconf reads a process-wide constant; no pointers are involved.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    match u64::try_from(p) {
        Ok(p) if p.is_power_of_two() => p,
        _ => 4096,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = 4096;

    #[test]
    fn aligned_whole_allocation_has_zero_offset() {
        let w = window(0x7f00_0000_0000, 1 << 20, P, 0x7f00_0000_0000, 1 << 20).unwrap();
        assert_eq!(
            w,
            DmabufWindow {
                start: 0x7f00_0000_0000,
                size: 1 << 20,
                offset: 0
            }
        );
    }

    #[test]
    fn sub_allocation_inside_a_page_gets_its_offset() {
        // 1000 bytes at base + 5000: pages [4096, 8192) enclose it, offset 904.
        let base = 0x1000_0000;
        let w = window(base + 5000, 1000, P, base, 1 << 21).unwrap();
        assert_eq!(w.start, base + 4096);
        assert_eq!(w.size, 4096);
        assert_eq!(w.offset, 904);
    }

    #[test]
    fn range_crossing_pages_covers_both() {
        let base = 0x2000_0000;
        let w = window(base + 4000, 200, P, base, 1 << 21).unwrap();
        assert_eq!((w.start, w.size, w.offset), (base, 8192, 4000));
    }

    #[test]
    fn window_is_clamped_to_an_unaligned_allocation_end() {
        let base = 0x3000_0000;
        let w = window(base + 10, 90, P, base, 100).unwrap();
        assert_eq!((w.start, w.size, w.offset), (base, 100, 10));
    }

    #[test]
    fn bad_ranges_are_refused() {
        let base = 0x4000_0000;
        assert!(window(base, 0, P, base, 4096).is_err());
        assert!(window(base + 4000, 200, P, base, 4096).is_err());
        assert!(window(base - 1, 2, P, base, 4096).is_err());
        assert!(window(u64::MAX - 1, 8, P, 0, u64::MAX).is_err());
        assert!(window(base, 8, 3000, base, 4096).is_err());
    }

    #[test]
    fn page_size_is_a_power_of_two() {
        assert!(host_page_size().is_power_of_two());
    }
}
