//! `engine`: the poll-mode data-plane engine.
//!
//! Not implemented yet: the engine lands with the "Engine core" issue. This crate exists so the
//! workspace has its final shape; it exports nothing that pretends to work.
#![deny(unsafe_code)]
