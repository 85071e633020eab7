//! Pure decoding of HIP values: versions, pointer attributes, PCI bus ids.
//!
//! Kept apart from the FFI so it is unit-tested on any machine.

use crate::gpu::PointerKind;

use super::sys::hipPointerAttribute_t;

/// A HIP version number (`HIP_VERSION` = major·10⁷ + minor·10⁵ + patch, as
/// `hipRuntimeGetVersion` returns it) split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HipVersion {
    /// Major (ROCm major).
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch (a build number, e.g. 21153).
    pub patch: u32,
}

impl HipVersion {
    /// Decodes `hipRuntimeGetVersion`'s value; `None` for negative values.
    #[must_use]
    pub fn from_raw(v: i32) -> Option<HipVersion> {
        let v = u32::try_from(v).ok()?;
        Some(HipVersion {
            major: v / 10_000_000,
            minor: (v / 100_000) % 100,
            patch: v % 100_000,
        })
    }
}

impl std::fmt::Display for HipVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Decodes `hipPointerAttribute_t` for the runtime of major version `major`.
///
/// ROCm ≤ 5 numbers `hipMemoryType` Host 0, Device 1, Array 2, Unified 3; ROCm ≥ 6 uses CUDA's
/// numbering, Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11.
#[must_use]
pub fn pointer_kind(major: u32, a: &hipPointerAttribute_t) -> PointerKind {
    if a.isManaged != 0 {
        return PointerKind::Managed;
    }
    let ordinal = u32::try_from(a.device).unwrap_or(0);
    match (major >= 6, a.memoryType) {
        (false, 0) | (true, 1) => PointerKind::Host,
        (false, 1 | 2) | (true, 2 | 10) => PointerKind::Device { ordinal },
        (false, 3) | (true, 3 | 11) => PointerKind::Managed,
        _ => PointerKind::Unknown,
    }
}

/// Names of the `hipError_t` values this crate branches on or expects to see, from
/// `hip_runtime_api.h` (ROCm 5.2; unchanged in 6.x). Used when `hipGetErrorName` is
/// unavailable or returns NULL; the runtime's own name is preferred.
#[must_use]
pub fn error_name(code: i32) -> Option<&'static str> {
    Some(match code {
        0 => "hipSuccess",
        1 => "hipErrorInvalidValue",
        2 => "hipErrorOutOfMemory",
        3 => "hipErrorNotInitialized",
        4 => "hipErrorDeinitialized",
        35 => "hipErrorInsufficientDriver",
        100 => "hipErrorNoDevice",
        101 => "hipErrorInvalidDevice",
        201 => "hipErrorInvalidContext",
        400 => "hipErrorInvalidHandle",
        600 => "hipErrorNotReady",
        801 => "hipErrorNotSupported",
        999 => "hipErrorUnknown",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mt: i32, dev: i32, managed: i32) -> hipPointerAttribute_t {
        hipPointerAttribute_t {
            memoryType: mt,
            device: dev,
            isManaged: managed,
            ..Default::default()
        }
    }

    #[test]
    fn version_of_rocm_5_2_3() {
        // HIP_VERSION of Debian's libamdhip64-dev 5.2.3: 5*10^7 + 2*10^5 + 21153.
        let v = HipVersion::from_raw(50_221_153).unwrap();
        assert_eq!(
            v,
            HipVersion {
                major: 5,
                minor: 2,
                patch: 21153
            }
        );
        assert_eq!(v.to_string(), "5.2.21153");
        assert_eq!(HipVersion::from_raw(60_342_134).unwrap().major, 6);
        assert_eq!(HipVersion::from_raw(-1), None);
    }

    #[test]
    fn error_names_match_the_header() {
        assert_eq!(error_name(100), Some("hipErrorNoDevice"));
        assert_eq!(error_name(600), Some("hipErrorNotReady"));
        assert_eq!(error_name(801), Some("hipErrorNotSupported"));
        assert_eq!(error_name(12345), None);
    }

    #[test]
    fn rocm5_memory_types() {
        assert_eq!(pointer_kind(5, &attr(0, 0, 0)), PointerKind::Host);
        assert_eq!(
            pointer_kind(5, &attr(1, 2, 0)),
            PointerKind::Device { ordinal: 2 }
        );
        assert_eq!(pointer_kind(5, &attr(3, 0, 0)), PointerKind::Managed);
        assert_eq!(pointer_kind(5, &attr(1, 0, 1)), PointerKind::Managed);
        assert_eq!(pointer_kind(5, &attr(-1, -1, 0)), PointerKind::Unknown);
    }

    #[test]
    fn rocm6_memory_types() {
        assert_eq!(pointer_kind(6, &attr(0, -1, 0)), PointerKind::Unknown);
        assert_eq!(pointer_kind(6, &attr(1, 0, 0)), PointerKind::Host);
        assert_eq!(
            pointer_kind(6, &attr(2, 1, 0)),
            PointerKind::Device { ordinal: 1 }
        );
        assert_eq!(pointer_kind(6, &attr(3, 0, 0)), PointerKind::Managed);
        assert_eq!(
            pointer_kind(6, &attr(10, 0, 0)),
            PointerKind::Device { ordinal: 0 }
        );
        assert_eq!(pointer_kind(7, &attr(11, 0, 0)), PointerKind::Managed);
    }
}
