//! Completions in one vocabulary: the soft fabric's statuses and opcodes are a subset of
//! verbs' (`enum ibv_wc_status`, `enum ibv_wc_opcode`) and map one to one; the verbs types
//! are the ones the `rc` interface reports.

use super::{WcOpcode, WcStatus, WorkCompletion};
use crate::fabric::soft;

/// The verbs status a soft status stands for.
#[must_use]
pub const fn status_from_soft(s: soft::WcStatus) -> WcStatus {
    match s {
        soft::WcStatus::Success => WcStatus::Success,
        soft::WcStatus::LocalLengthError => WcStatus::LocalLengthError,
        soft::WcStatus::LocalProtectionError => WcStatus::LocalProtectionError,
        soft::WcStatus::WrFlushError => WcStatus::WrFlushError,
        soft::WcStatus::RemoteAccessError => WcStatus::RemoteAccessError,
        soft::WcStatus::RemoteInvalidRequest => WcStatus::RemoteInvalidRequest,
        soft::WcStatus::RemoteOperationError => WcStatus::RemoteOperationError,
        soft::WcStatus::RetryExceeded => WcStatus::RetryExceeded,
        soft::WcStatus::RnrRetryExceeded => WcStatus::RnrRetryExceeded,
        soft::WcStatus::BadResponse => WcStatus::BadResponse,
    }
}

/// The verbs opcode a soft opcode stands for.
#[must_use]
pub const fn opcode_from_soft(o: soft::WcOpcode) -> WcOpcode {
    match o {
        soft::WcOpcode::RdmaWrite => WcOpcode::RdmaWrite,
        soft::WcOpcode::RdmaRead => WcOpcode::RdmaRead,
        soft::WcOpcode::Send => WcOpcode::Send,
        soft::WcOpcode::Recv => WcOpcode::Recv,
        soft::WcOpcode::RecvRdmaWithImm => WcOpcode::RecvRdmaWithImm,
    }
}

/// A soft completion as the `rc` interface reports it (no vendor error: 0).
#[must_use]
pub const fn from_soft(c: &soft::WorkCompletion) -> WorkCompletion {
    WorkCompletion {
        wr_id: c.wr_id,
        status: status_from_soft(c.status),
        opcode: opcode_from_soft(c.opcode),
        byte_len: c.byte_len,
        imm_data: c.imm_data,
        qp_num: c.qp_num,
        vendor_err: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_soft_status_keeps_its_verbs_code() {
        // The C values of `enum ibv_wc_status`, so a soft completion reads like a NIC's.
        let pairs = [
            (soft::WcStatus::Success, 0),
            (soft::WcStatus::LocalLengthError, 1),
            (soft::WcStatus::LocalProtectionError, 4),
            (soft::WcStatus::WrFlushError, 5),
            (soft::WcStatus::BadResponse, 7),
            (soft::WcStatus::RemoteInvalidRequest, 9),
            (soft::WcStatus::RemoteAccessError, 10),
            (soft::WcStatus::RemoteOperationError, 11),
            (soft::WcStatus::RetryExceeded, 12),
            (soft::WcStatus::RnrRetryExceeded, 13),
        ];
        for (s, code) in pairs {
            assert_eq!(status_from_soft(s), WcStatus::from_raw(code), "{s:?}");
        }
    }

    #[test]
    fn completion_fields_carry_over() {
        let c = soft::WorkCompletion {
            wr_id: 9,
            status: soft::WcStatus::Success,
            opcode: soft::WcOpcode::RecvRdmaWithImm,
            byte_len: 4096,
            imm_data: Some(0xdead_beef),
            qp_num: 0x42,
        };
        let v = from_soft(&c);
        assert_eq!(
            (
                v.wr_id,
                v.opcode,
                v.byte_len,
                v.imm_data,
                v.qp_num,
                v.vendor_err
            ),
            (
                9,
                WcOpcode::RecvRdmaWithImm,
                4096,
                Some(0xdead_beef),
                0x42,
                0
            )
        );
        assert!(v.is_ok());
    }
}
