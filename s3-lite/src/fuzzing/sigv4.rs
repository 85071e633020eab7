//! Fuzz bodies for the `sigv4` parsers (filled by the module's owner).
