//! The soft fabric speaks the RC vocabulary of [`crate::fabric::rc`] (work requests,
//! completions and access rights are defined there, once, for both devices).

pub use crate::fabric::rc::wr::{
    Access, RecvWr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};
