//! `hipObjConfig_t.stripePolicy`, `.stripeThreshold` and `.stripeChunk`: how large transfers
//! on memory bound to several NICs are split across them (`HIPOBJ_STRIPE_*` → the engine's
//! [`engine::Stripe`], see docs/engine.md "Striping"). Zero is the engine's default in each.

use crate::error::{CResult, Fail, OpError};

/// `HIPOBJ_STRIPE_DEFAULT`: the engine's default policy (best tier).
pub const STRIPE_DEFAULT: u32 = 0;
/// `HIPOBJ_STRIPE_OFF`: never split an operation.
pub const STRIPE_OFF: u32 = 1;
/// `HIPOBJ_STRIPE_BEST_TIER`: across the NICs a registration is bound to.
pub const STRIPE_BEST_TIER: u32 = 2;
/// `HIPOBJ_STRIPE_ALL`: across every NIC the engine's workers serve.
pub const STRIPE_ALL: u32 = 3;

/// Largest `stripeChunk`: 5 GiB, S3's largest part (a striped PUT's parts are chunks).
pub const MAX_STRIPE_CHUNK: u64 = 5 << 30;

/// The three striping fields of a `hipObjConfig_t`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeSettings {
    /// `None`: the engine's default policy.
    pub policy: Option<engine::Stripe>,
    /// `None`: the engine's default threshold.
    pub threshold: Option<u64>,
    /// `None`: the engine's default chunk.
    pub chunk: Option<u64>,
}

/// Checks the fields (`policy` a `HIPOBJ_STRIPE_*` value, `chunk` at most 5 GiB); zero in
/// any of them is the engine's default.
pub fn stripe_of(policy: u32, threshold: u64, chunk: u64) -> CResult<StripeSettings> {
    let policy = match policy {
        STRIPE_DEFAULT => None,
        STRIPE_OFF => Some(engine::Stripe::Off),
        STRIPE_BEST_TIER => Some(engine::Stripe::BestTier),
        STRIPE_ALL => Some(engine::Stripe::All),
        v => {
            return Err(Fail::new(
                OpError::InvalidValue,
                format!("config.stripePolicy must be a HIPOBJ_STRIPE_* value 0..3 (got {v})"),
            ));
        }
    };
    if chunk > MAX_STRIPE_CHUNK {
        return Err(Fail::new(
            OpError::InvalidValue,
            format!(
                "config.stripeChunk must be at most 5 GiB ({MAX_STRIPE_CHUNK} bytes, S3's \
                 largest part; got {chunk}); 0 is the default"
            ),
        ));
    }
    Ok(StripeSettings {
        policy,
        threshold: (threshold != 0).then_some(threshold),
        chunk: (chunk != 0).then_some(chunk),
    })
}

impl StripeSettings {
    /// `b` with the settings that are not the default.
    pub fn apply(self, mut b: engine::EngineBuilder) -> engine::EngineBuilder {
        if let Some(p) = self.policy {
            b = b.stripe(p);
        }
        if let Some(t) = self.threshold {
            b = b.stripe_threshold(t);
        }
        if let Some(c) = self.chunk {
            b = b.stripe_chunk(c);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_the_default_and_bad_values_are_named() {
        let d = stripe_of(0, 0, 0).unwrap();
        assert_eq!(
            d,
            StripeSettings {
                policy: None,
                threshold: None,
                chunk: None
            }
        );
        let s = stripe_of(STRIPE_ALL, 1 << 20, 8 << 20).unwrap();
        assert_eq!(s.policy, Some(engine::Stripe::All));
        assert_eq!((s.threshold, s.chunk), (Some(1 << 20), Some(8 << 20)));
        assert_eq!(
            stripe_of(STRIPE_OFF, 0, 0).unwrap().policy,
            Some(engine::Stripe::Off)
        );
        assert_eq!(
            stripe_of(STRIPE_BEST_TIER, 0, 0).unwrap().policy,
            Some(engine::Stripe::BestTier)
        );
        let e = stripe_of(4, 0, 0).unwrap_err();
        assert_eq!(e.op, OpError::InvalidValue);
        assert!(e.message.contains("config.stripePolicy"), "{}", e.message);
        assert!(stripe_of(0, 0, MAX_STRIPE_CHUNK).is_ok());
        let e = stripe_of(0, 0, MAX_STRIPE_CHUNK + 1).unwrap_err();
        assert!(e.message.contains("config.stripeChunk"), "{}", e.message);
    }
}
