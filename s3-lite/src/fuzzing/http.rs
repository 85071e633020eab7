//! Fuzz bodies for the `http` parsers (filled by the module's owner).
