//! `ring-api`: io_uring-style submission and completion rings (being written).
#![deny(unsafe_code)]
