//! `numa`: GPU/NIC/CPU topology from sysfs (being written).
#![forbid(unsafe_code)]
