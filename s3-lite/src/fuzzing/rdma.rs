//! Fuzz bodies for the `rdma` parsers (filled by the module's owner).
