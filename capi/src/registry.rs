//! Registered buffers by address: maps a caller pointer (anywhere inside a registration) to the
//! engine's `BufHandle` and the offset in it.
//!
//! A sorted map keyed by base address; lookups take the last registration starting at or below
//! the pointer. Registrations never overlap: two engine handles over the same bytes would defeat
//! the engine's per-handle leases (two GETs could write the same bytes at once).

use std::collections::BTreeMap;

use ring_api::BufHandle;

use crate::error::{Fail, OpError};

/// Largest registration, inclusive (hipObject's `MAX_MR_SIZE`, the anchors' limit).
pub const MAX_REGISTRATION: u64 = 4 << 30;

/// One registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// First byte's address.
    pub base: usize,
    /// Length in bytes.
    pub len: usize,
    /// The engine's handle (host or device memory: the engine stages device memory itself).
    pub handle: BufHandle,
}

/// Where a pointer range lies: the registration's handle and the offset into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located {
    /// Engine handle.
    pub handle: BufHandle,
    /// Offset of the pointer from the registration's base.
    pub offset: u64,
    /// The registration's base address.
    pub base: usize,
}

/// The sorted set of registrations.
#[derive(Debug, Default)]
pub struct Registry {
    by_base: BTreeMap<usize, Registration>,
}

/// Checks that a registration of `len` bytes is allowed: non-empty, at most
/// [`MAX_REGISTRATION`] (before anything is allocated for it, `hipObjBufAlloc`).
pub fn check_len(len: usize) -> Result<(), Fail> {
    if len == 0 {
        return Err(Fail::new(OpError::InvalidValue, "buffer size is 0"));
    }
    if len as u64 > MAX_REGISTRATION {
        return Err(Fail::new(
            OpError::SizeTooLarge,
            format!("registration of {len} bytes exceeds the 4 GiB limit per registration"),
        ));
    }
    Ok(())
}

impl Registry {
    /// Checks that `[base, base+len)` may be registered: non-null, non-empty, at most
    /// [`MAX_REGISTRATION`], no address overflow, no overlap with an existing registration.
    pub fn check_new(&self, base: usize, len: usize) -> Result<(), Fail> {
        if base == 0 {
            return Err(Fail::new(OpError::InvalidValue, "buffer pointer is NULL"));
        }
        check_len(len)?;
        let end = base
            .checked_add(len)
            .ok_or_else(|| Fail::new(OpError::InvalidValue, "pointer + size overflows"))?;
        if let Some((_, r)) = self.by_base.range(..end).next_back()
            && r.base + r.len > base
        {
            let what = if r.base == base && r.len == len {
                "this buffer is already registered"
            } else {
                "the range overlaps an existing registration"
            };
            return Err(Fail::new(
                OpError::BufAlreadyRegistered,
                format!("{what} ({:#x}+{})", r.base, r.len),
            ));
        }
        Ok(())
    }

    /// Adds a registration [`Registry::check_new`] accepted.
    pub fn insert(&mut self, reg: Registration) {
        self.by_base.insert(reg.base, reg);
    }

    /// Removes the registration that starts exactly at `base`.
    pub fn remove(&mut self, base: usize) -> Result<Registration, Fail> {
        self.by_base.remove(&base).ok_or_else(|| {
            let inside = self.containing(base).is_some();
            Fail::new(
                OpError::BufNotRegistered,
                if inside {
                    format!("{base:#x} lies inside a registration but is not its start")
                } else {
                    format!("{base:#x} is not a registered buffer")
                },
            )
        })
    }

    fn containing(&self, ptr: usize) -> Option<&Registration> {
        self.by_base
            .range(..=ptr)
            .next_back()
            .map(|(_, r)| r)
            .filter(|r| ptr - r.base < r.len)
    }

    /// Locates `[ptr, ptr+size)`: it must start inside a registration
    /// ([`OpError::BufNotRegistered`] otherwise) and end inside the same one
    /// ([`OpError::SizeTooLarge`] otherwise).
    pub fn locate(&self, ptr: usize, size: u64) -> Result<Located, Fail> {
        if ptr == 0 {
            return Err(Fail::new(OpError::InvalidValue, "buffer pointer is NULL"));
        }
        let r = self.containing(ptr).ok_or_else(|| {
            Fail::new(
                OpError::BufNotRegistered,
                format!("{ptr:#x} is not inside a registered buffer (hipObjBufRegister)"),
            )
        })?;
        let offset = (ptr - r.base) as u64;
        let room = r.len as u64 - offset;
        if size > room {
            return Err(Fail::new(
                OpError::SizeTooLarge,
                format!(
                    "size {size} exceeds the {room} bytes left in the registration at {:#x} \
                     (offset {offset})",
                    r.base
                ),
            ));
        }
        Ok(Located {
            handle: r.handle,
            offset,
            base: r.base,
        })
    }

    /// Removes and returns every registration (shutdown).
    pub fn drain(&mut self) -> Vec<Registration> {
        std::mem::take(&mut self.by_base).into_values().collect()
    }

    /// Number of registrations.
    pub fn len(&self) -> usize {
        self.by_base.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_base.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(base: usize, len: usize, h: u32) -> Registration {
        Registration {
            base,
            len,
            handle: BufHandle(h),
        }
    }

    fn with(regs: &[Registration]) -> Registry {
        let mut r = Registry::default();
        for g in regs {
            r.check_new(g.base, g.len).unwrap();
            r.insert(*g);
        }
        r
    }

    #[test]
    fn locate_anywhere_inside() {
        let r = with(&[reg(0x1000, 0x1000, 1), reg(0x3000, 0x100, 2)]);
        assert_eq!(
            r.locate(0x1000, 0x1000).unwrap(),
            Located {
                handle: BufHandle(1),
                offset: 0,
                base: 0x1000,
            }
        );
        assert_eq!(r.locate(0x1800, 0x800).unwrap().offset, 0x800);
        let dev = r.locate(0x30ff, 1).unwrap();
        assert_eq!((dev.handle, dev.base), (BufHandle(2), 0x3000));
        assert_eq!(r.locate(0x1fff, 1).unwrap().offset, 0xfff);
        assert_eq!(r.locate(0x1800, 0).unwrap().offset, 0x800);
    }

    #[test]
    fn locate_errors() {
        let r = with(&[reg(0x1000, 0x1000, 1)]);
        assert_eq!(
            r.locate(0x2000, 1).unwrap_err().op,
            OpError::BufNotRegistered
        );
        assert_eq!(
            r.locate(0xfff, 1).unwrap_err().op,
            OpError::BufNotRegistered
        );
        assert_eq!(
            r.locate(0x1800, 0x801).unwrap_err().op,
            OpError::SizeTooLarge
        );
        assert_eq!(
            r.locate(0x1000, u64::MAX).unwrap_err().op,
            OpError::SizeTooLarge
        );
        assert_eq!(r.locate(0, 1).unwrap_err().op, OpError::InvalidValue);
    }

    #[test]
    fn overlaps_and_limits_are_refused() {
        let r = with(&[reg(0x1000, 0x1000, 1)]);
        assert_eq!(
            r.check_new(0x1000, 0x1000).unwrap_err().op,
            OpError::BufAlreadyRegistered
        );
        assert_eq!(
            r.check_new(0x800, 0x801).unwrap_err().op,
            OpError::BufAlreadyRegistered
        );
        assert_eq!(
            r.check_new(0x1fff, 0x10).unwrap_err().op,
            OpError::BufAlreadyRegistered
        );
        r.check_new(0x800, 0x800).unwrap();
        r.check_new(0x2000, 0x10).unwrap();
        assert_eq!(r.check_new(0, 1).unwrap_err().op, OpError::InvalidValue);
        assert_eq!(
            r.check_new(0x9000, 0).unwrap_err().op,
            OpError::InvalidValue
        );
        assert_eq!(
            r.check_new(usize::MAX - 4, 10).unwrap_err().op,
            OpError::InvalidValue
        );
        r.check_new(0x10_0000_0000, MAX_REGISTRATION as usize)
            .unwrap();
        assert_eq!(
            r.check_new(0x10_0000_0000, MAX_REGISTRATION as usize + 1)
                .unwrap_err()
                .op,
            OpError::SizeTooLarge
        );
    }

    #[test]
    fn remove_needs_the_base() {
        let mut r = with(&[reg(0x1000, 0x1000, 1)]);
        let e = r.remove(0x1800).unwrap_err();
        assert_eq!(e.op, OpError::BufNotRegistered);
        assert!(e.message.contains("not its start"), "{}", e.message);
        assert_eq!(r.remove(0x1000).unwrap().handle, BufHandle(1));
        assert!(r.is_empty());
        assert_eq!(r.remove(0x1000).unwrap_err().op, OpError::BufNotRegistered);
    }
}
