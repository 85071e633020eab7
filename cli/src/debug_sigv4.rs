//! `hipobj debug sigv4` (being written).
