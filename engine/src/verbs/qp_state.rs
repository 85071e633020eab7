//! The RC queue-pair state machine as a table: which `ibv_modify_qp` attribute masks each
//! transition requires and allows (InfiniBand spec vol. 1, table "QP state transition
//! properties", RC column), and the decoding of an `EINVAL` from `ibv_modify_qp` into a message
//! that names the current state, the requested one and what is wrong with the attribute set.
//!
//! Pure: no FFI. The kernel answers a bad mask or a bad value with the same bare `EINVAL`; this
//! table tells the two apart before the call ([`check`]) and after it ([`diagnose_einval`]).

use std::fmt;

use super::sys;

/// Verbs QP states (`enum ibv_qp_state`). Same names as the soft fabric's `QpState` where both
/// exist; verbs adds the send-queue-drain states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// `IBV_QPS_RESET`: created, unusable.
    Reset,
    /// `IBV_QPS_INIT`: port and access set; RECVs may be posted.
    Init,
    /// `IBV_QPS_RTR`: ready to receive (path and peer known).
    Rtr,
    /// `IBV_QPS_RTS`: ready to send.
    Rts,
    /// `IBV_QPS_SQD`: send queue drained.
    Sqd,
    /// `IBV_QPS_SQE`: send queue error.
    Sqe,
    /// `IBV_QPS_ERR`: everything flushed.
    Err,
}

impl QpState {
    /// The C value.
    #[must_use]
    pub const fn to_raw(self) -> u32 {
        match self {
            Self::Reset => sys::IBV_QPS_RESET,
            Self::Init => sys::IBV_QPS_INIT,
            Self::Rtr => sys::IBV_QPS_RTR,
            Self::Rts => sys::IBV_QPS_RTS,
            Self::Sqd => sys::IBV_QPS_SQD,
            Self::Sqe => sys::IBV_QPS_SQE,
            Self::Err => sys::IBV_QPS_ERR,
        }
    }
}

impl TryFrom<u32> for QpState {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        Ok(match v {
            sys::IBV_QPS_RESET => Self::Reset,
            sys::IBV_QPS_INIT => Self::Init,
            sys::IBV_QPS_RTR => Self::Rtr,
            sys::IBV_QPS_RTS => Self::Rts,
            sys::IBV_QPS_SQD => Self::Sqd,
            sys::IBV_QPS_SQE => Self::Sqe,
            sys::IBV_QPS_ERR => Self::Err,
            other => return Err(other),
        })
    }
}

/// A set of `ibv_qp_attr_mask` bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub i32);

/// Mask bits with their C names, in bit order (for messages).
const NAMES: &[(i32, &str)] = &[
    (sys::IBV_QP_STATE, "STATE"),
    (sys::IBV_QP_CUR_STATE, "CUR_STATE"),
    (1 << 2, "EN_SQD_ASYNC_NOTIFY"),
    (sys::IBV_QP_ACCESS_FLAGS, "ACCESS_FLAGS"),
    (sys::IBV_QP_PKEY_INDEX, "PKEY_INDEX"),
    (sys::IBV_QP_PORT, "PORT"),
    (sys::IBV_QP_QKEY, "QKEY"),
    (sys::IBV_QP_AV, "AV"),
    (sys::IBV_QP_PATH_MTU, "PATH_MTU"),
    (sys::IBV_QP_TIMEOUT, "TIMEOUT"),
    (sys::IBV_QP_RETRY_CNT, "RETRY_CNT"),
    (sys::IBV_QP_RNR_RETRY, "RNR_RETRY"),
    (sys::IBV_QP_RQ_PSN, "RQ_PSN"),
    (sys::IBV_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
    (sys::IBV_QP_ALT_PATH, "ALT_PATH"),
    (sys::IBV_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER"),
    (sys::IBV_QP_SQ_PSN, "SQ_PSN"),
    (sys::IBV_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
    (sys::IBV_QP_PATH_MIG_STATE, "PATH_MIG_STATE"),
    (sys::IBV_QP_CAP, "CAP"),
    (sys::IBV_QP_DEST_QPN, "DEST_QPN"),
];

impl AttrMask {
    /// No bits.
    pub const EMPTY: AttrMask = AttrMask(0);

    /// Bits of `self` not in `other`.
    #[must_use]
    pub const fn minus(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }

    /// Union.
    #[must_use]
    pub const fn with(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }

    /// Whether no bit is set.
    #[must_use]
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for AttrMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for AttrMask {
    /// `STATE|AV|PATH_MTU`, unknown bits as hex, `(none)` when empty.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("(none)");
        }
        let mut rest = self.0;
        let mut first = true;
        for (bit, name) in NAMES {
            if rest & bit != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
                rest &= !bit;
            }
        }
        if rest != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(f, "{rest:#x}")?;
        }
        Ok(())
    }
}

/// What one transition needs and allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionRule {
    /// Bits that must be present (always includes `STATE`).
    pub required: AttrMask,
    /// Bits that may be present in addition.
    pub optional: AttrMask,
}

const fn m(bits: i32) -> AttrMask {
    AttrMask(bits)
}

/// The RC rule for `from → to`, `None` when verbs does not allow that transition.
#[must_use]
pub const fn rc_rule(from: QpState, to: QpState) -> Option<TransitionRule> {
    use QpState::*;
    use sys::*;
    let (required, optional) = match (from, to) {
        // Any state may go to RESET or ERR with the state bit alone.
        (_, Reset) | (_, Err) => (IBV_QP_STATE, 0),
        (Reset, Init) => (
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
            0,
        ),
        (Init, Init) => (
            IBV_QP_STATE,
            IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
        ),
        (Init, Rtr) => (
            IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER,
            IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
        ),
        (Rtr, Rts) => (
            IBV_QP_STATE
                | IBV_QP_SQ_PSN
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_MAX_QP_RD_ATOMIC,
            IBV_QP_CUR_STATE
                | IBV_QP_ALT_PATH
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_MIN_RNR_TIMER
                | IBV_QP_PATH_MIG_STATE,
        ),
        (Rts, Rts) | (Sqe, Rts) => (
            IBV_QP_STATE,
            IBV_QP_CUR_STATE
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_ALT_PATH
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_MIN_RNR_TIMER,
        ),
        (Rts, Sqd) => (IBV_QP_STATE, 1 << 2),
        (Sqd, Rts) => (
            IBV_QP_STATE,
            IBV_QP_CUR_STATE
                | IBV_QP_ACCESS_FLAGS
                | IBV_QP_ALT_PATH
                | IBV_QP_PATH_MIG_STATE
                | IBV_QP_MIN_RNR_TIMER,
        ),
        _ => return None,
    };
    Some(TransitionRule {
        required: m(required),
        optional: m(optional),
    })
}

/// Why an attribute set does not fit a transition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MaskError {
    /// Verbs has no such transition for RC.
    #[error("an RC queue pair cannot go from {from:?} to {to:?}{}", path_hint(*from, *to))]
    NoTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// Required bits are missing.
    #[error("{from:?} -> {to:?} needs {missing} in the attribute mask (given {given})")]
    Missing {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// Bits to add.
        missing: AttrMask,
        /// The mask given.
        given: AttrMask,
    },
    /// Bits the transition does not accept.
    #[error("{from:?} -> {to:?} does not accept {extra} in the attribute mask (given {given})")]
    NotAllowed {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
        /// Bits to remove.
        extra: AttrMask,
        /// The mask given.
        given: AttrMask,
    },
}

fn path_hint(from: QpState, to: QpState) -> &'static str {
    match (from, to) {
        (QpState::Reset, QpState::Rtr | QpState::Rts) => " (go through INIT first)",
        (QpState::Init, QpState::Rts) => " (go through RTR first)",
        (QpState::Rts, QpState::Rtr | QpState::Init) => {
            " (an RC QP cannot be re-paired: move it to RESET and connect again)"
        }
        _ => "",
    }
}

/// Checks `mask` against the RC rule for `from → to`.
pub fn check(from: QpState, to: QpState, mask: AttrMask) -> Result<(), MaskError> {
    let rule = rc_rule(from, to).ok_or(MaskError::NoTransition { from, to })?;
    let missing = rule.required.minus(mask);
    if !missing.is_empty() {
        return Err(MaskError::Missing {
            from,
            to,
            missing,
            given: mask,
        });
    }
    let extra = mask.minus(rule.required.with(rule.optional));
    if !extra.is_empty() {
        return Err(MaskError::NotAllowed {
            from,
            to,
            extra,
            given: mask,
        });
    }
    Ok(())
}

/// The attribute values that can make a well-formed mask fail, with the limits we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrValues {
    /// `port_num`.
    pub port_num: u8,
    /// `path_mtu` (enum value 1..=5).
    pub path_mtu: u32,
    /// The port's `active_mtu` (enum value), 0 if unknown.
    pub port_active_mtu: u32,
    /// `ah_attr.grh.sgid_index`.
    pub sgid_index: u8,
    /// The port's GID table length, 0 if unknown.
    pub gid_tbl_len: u32,
    /// `ah_attr.is_global`.
    pub is_global: bool,
    /// Whether the port is Ethernet (RoCE: a GRH is mandatory).
    pub ethernet: bool,
    /// `dest_qp_num`.
    pub dest_qp_num: u32,
    /// `rq_psn`.
    pub rq_psn: u32,
    /// `sq_psn`.
    pub sq_psn: u32,
    /// `timeout`.
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `min_rnr_timer`.
    pub min_rnr_timer: u8,
}

/// Value problems for the bits in `mask` (empty when every value is inside its known limit).
#[must_use]
pub fn value_problems(mask: AttrMask, v: &AttrValues) -> Vec<String> {
    let has = |bit: i32| mask.0 & bit != 0;
    let mut out = Vec::new();
    if has(sys::IBV_QP_PORT) && v.port_num == 0 {
        out.push("port_num is 0 (ports count from 1)".to_string());
    }
    if has(sys::IBV_QP_PATH_MTU) {
        if !(1..=5).contains(&v.path_mtu) {
            out.push(format!("path_mtu {} is not an ibv_mtu (1..=5)", v.path_mtu));
        } else if v.port_active_mtu != 0 && v.path_mtu > v.port_active_mtu {
            out.push(format!(
                "path_mtu {} B exceeds the port's active MTU {} B",
                128u32 << v.path_mtu,
                128u32 << v.port_active_mtu.min(5)
            ));
        }
    }
    if has(sys::IBV_QP_AV) {
        if v.ethernet && !v.is_global {
            out.push("RoCE port but ah_attr.is_global is 0 (a GRH is mandatory)".to_string());
        }
        if v.gid_tbl_len != 0 && u32::from(v.sgid_index) >= v.gid_tbl_len {
            out.push(format!(
                "sgid_index {} is outside the port's GID table ({} entries)",
                v.sgid_index, v.gid_tbl_len
            ));
        }
    }
    let wide = |name: &str, x: u32, out: &mut Vec<String>| {
        if x > 0x00ff_ffff {
            out.push(format!("{name} {x:#x} is wider than 24 bits"));
        }
    };
    if has(sys::IBV_QP_DEST_QPN) {
        wide("dest_qp_num", v.dest_qp_num, &mut out);
    }
    if has(sys::IBV_QP_RQ_PSN) {
        wide("rq_psn", v.rq_psn, &mut out);
    }
    if has(sys::IBV_QP_SQ_PSN) {
        wide("sq_psn", v.sq_psn, &mut out);
    }
    if has(sys::IBV_QP_TIMEOUT) && v.timeout > 31 {
        out.push(format!("timeout {} exceeds 31", v.timeout));
    }
    if has(sys::IBV_QP_RETRY_CNT) && v.retry_cnt > 7 {
        out.push(format!("retry_cnt {} exceeds 7", v.retry_cnt));
    }
    if has(sys::IBV_QP_RNR_RETRY) && v.rnr_retry > 7 {
        out.push(format!("rnr_retry {} exceeds 7", v.rnr_retry));
    }
    if has(sys::IBV_QP_MIN_RNR_TIMER) && v.min_rnr_timer > 31 {
        out.push(format!("min_rnr_timer {} exceeds 31", v.min_rnr_timer));
    }
    out
}

/// Turns `EINVAL` from `ibv_modify_qp(from → to, mask)` into a sentence a user can act on.
/// `actual` is the state the QP reports after the failure (`ibv_query_qp`), when known: a QP
/// that is not where the caller believed is the most common cause.
#[must_use]
pub fn diagnose_einval(
    from: QpState,
    to: QpState,
    actual: Option<QpState>,
    mask: AttrMask,
    values: &AttrValues,
) -> String {
    let cur = actual.unwrap_or(from);
    let mut s = format!("modify_qp {from:?} -> {to:?} with {mask} was refused (EINVAL)");
    if actual.is_some_and(|a| a != from) {
        s.push_str(&format!(
            "; the QP is actually in {cur:?}, not {from:?} (did an earlier error move it to Err?)"
        ));
    }
    if let Err(e) = check(cur, to, mask) {
        s.push_str(&format!("; {e}"));
        return s;
    }
    let problems = value_problems(mask, values);
    if problems.is_empty() {
        s.push_str(
            "; the mask fits the transition and every value is inside the limits known here, \
             so the device refused a value (check max_rd_atomic / max_dest_rd_atomic against \
             the device's max_qp_rd_atom, and the GID index's netdev)",
        );
    } else {
        s.push_str("; ");
        s.push_str(&problems.join("; "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::sys::*;

    const INIT_MASK: i32 = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    const RTR_MASK: i32 = IBV_QP_STATE
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_DEST_QPN
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER;
    const RTS_MASK: i32 = IBV_QP_STATE
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_SQ_PSN
        | IBV_QP_MAX_QP_RD_ATOMIC;

    #[test]
    fn connect_path_masks_are_exactly_the_ones_rdma_core_examples_use() {
        // The masks ibv_rc_pingpong and the shared rxe reference program pass.
        assert_eq!(INIT_MASK, 0x39);
        assert_eq!(RTR_MASK, 0x12_9181);
        assert_eq!(RTS_MASK, 0x1_2e01);
        check(QpState::Reset, QpState::Init, AttrMask(INIT_MASK)).unwrap();
        check(QpState::Init, QpState::Rtr, AttrMask(RTR_MASK)).unwrap();
        check(QpState::Rtr, QpState::Rts, AttrMask(RTS_MASK)).unwrap();
    }

    #[test]
    fn missing_and_extra_bits_are_named() {
        let e = check(
            QpState::Init,
            QpState::Rtr,
            AttrMask(RTR_MASK & !IBV_QP_PATH_MTU & !IBV_QP_RQ_PSN),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Init -> Rtr needs PATH_MTU|RQ_PSN in the attribute mask \
             (given STATE|AV|MIN_RNR_TIMER|MAX_DEST_RD_ATOMIC|DEST_QPN)"
        );
        let e = check(
            QpState::Init,
            QpState::Rtr,
            AttrMask(RTR_MASK | IBV_QP_SQ_PSN),
        )
        .unwrap_err();
        assert!(
            matches!(e, MaskError::NotAllowed { extra, .. } if extra == AttrMask(IBV_QP_SQ_PSN))
        );
        assert!(e.to_string().contains("does not accept SQ_PSN"), "{e}");
    }

    #[test]
    fn impossible_transitions_explain_the_path() {
        let e = check(QpState::Reset, QpState::Rts, AttrMask(RTS_MASK)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "an RC queue pair cannot go from Reset to Rts (go through INIT first)"
        );
        let e = check(QpState::Rts, QpState::Rtr, AttrMask(RTR_MASK)).unwrap_err();
        assert!(e.to_string().contains("cannot be re-paired"), "{e}");
        // Error and reset are reachable from everywhere with the state bit alone.
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Err,
        ] {
            check(s, QpState::Err, AttrMask(IBV_QP_STATE)).unwrap();
            check(s, QpState::Reset, AttrMask(IBV_QP_STATE)).unwrap();
        }
    }

    #[test]
    fn raw_state_round_trip_and_unknown_value() {
        for s in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ] {
            assert_eq!(QpState::try_from(s.to_raw()), Ok(s));
        }
        assert_eq!(QpState::try_from(7), Err(7));
    }

    #[test]
    fn einval_with_a_good_mask_blames_the_values() {
        let v = AttrValues {
            port_num: 1,
            path_mtu: 5,        // 4096
            port_active_mtu: 3, // 1024 (rxe)
            sgid_index: 9,
            gid_tbl_len: 4,
            is_global: true,
            ethernet: true,
            dest_qp_num: 0x0100_0000,
            ..AttrValues::default()
        };
        let s = diagnose_einval(QpState::Init, QpState::Rtr, None, AttrMask(RTR_MASK), &v);
        assert!(s.starts_with("modify_qp Init -> Rtr with STATE|AV|"), "{s}");
        assert!(
            s.contains("path_mtu 4096 B exceeds the port's active MTU 1024 B"),
            "{s}"
        );
        assert!(
            s.contains("sgid_index 9 is outside the port's GID table (4 entries)"),
            "{s}"
        );
        assert!(
            s.contains("dest_qp_num 0x1000000 is wider than 24 bits"),
            "{s}"
        );
    }

    #[test]
    fn einval_names_the_real_state_when_it_differs() {
        let s = diagnose_einval(
            QpState::Rtr,
            QpState::Rts,
            Some(QpState::Err),
            AttrMask(RTS_MASK),
            &AttrValues::default(),
        );
        assert!(s.contains("the QP is actually in Err, not Rtr"), "{s}");
        assert!(s.contains("cannot go from Err to Rts"), "{s}");
    }

    #[test]
    fn einval_with_good_mask_and_values_says_so() {
        let v = AttrValues {
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..AttrValues::default()
        };
        let s = diagnose_einval(QpState::Rtr, QpState::Rts, None, AttrMask(RTS_MASK), &v);
        assert!(s.contains("the device refused a value"), "{s}");
    }
}
