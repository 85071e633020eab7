//! `hipObjConfig_t.fabric`: which data path the engine uses (`HIPOBJ_FABRIC_*` → the engine's
//! [`engine::Fabric`]). An explicit `HIPOBJ_FABRIC_VERBS` without a usable device is refused
//! by the engine itself (`EngineError::VerbsUnavailable` → `hipObjNicNotFound`).

use crate::error::{CResult, Fail, OpError};

/// `HIPOBJ_FABRIC_AUTO`: RDMA when the endpoint pairs (verbs when this host has a device,
/// else the soft fabric), HTTP otherwise.
pub const FABRIC_AUTO: u32 = 0;
/// `HIPOBJ_FABRIC_HTTP`: payloads in the HTTP body only.
pub const FABRIC_HTTP: u32 = 1;
/// `HIPOBJ_FABRIC_SOFT`: always try the soft RDMA fabric first; per-request HTTP fallback.
pub const FABRIC_SOFT: u32 = 2;
/// `HIPOBJ_FABRIC_VERBS`: RDMA over libibverbs; per-request HTTP fallback.
pub const FABRIC_VERBS: u32 = 3;

/// The engine fabric a `HIPOBJ_FABRIC_*` value names, or `InvalidValue`.
pub fn fabric_of(v: u32) -> CResult<engine::Fabric> {
    Ok(match v {
        FABRIC_AUTO => engine::Fabric::Auto,
        FABRIC_HTTP => engine::Fabric::Http,
        FABRIC_SOFT => engine::Fabric::Soft,
        FABRIC_VERBS => engine::Fabric::Verbs,
        _ => {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("config.fabric must be a HIPOBJ_FABRIC_* value 0..3 (got {v})"),
            ));
        }
    })
}

/// The name of a `HIPOBJ_FABRIC_*` value, for messages.
pub fn fabric_name(v: u32) -> &'static str {
    match v {
        FABRIC_AUTO => "auto",
        FABRIC_HTTP => "http",
        FABRIC_SOFT => "soft",
        FABRIC_VERBS => "verbs",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_maps_and_others_are_refused() {
        assert_eq!(fabric_of(FABRIC_AUTO).unwrap(), engine::Fabric::Auto);
        assert_eq!(fabric_of(FABRIC_HTTP).unwrap(), engine::Fabric::Http);
        assert_eq!(fabric_of(FABRIC_SOFT).unwrap(), engine::Fabric::Soft);
        assert_eq!(fabric_of(FABRIC_VERBS).unwrap(), engine::Fabric::Verbs);
        let e = fabric_of(4).unwrap_err();
        assert_eq!(e.op, OpError::InvalidValue);
        assert!(e.message.contains("config.fabric"), "{}", e.message);
        assert_eq!(fabric_name(FABRIC_VERBS), "verbs");
        assert_eq!(fabric_name(9), "unknown");
    }
}
