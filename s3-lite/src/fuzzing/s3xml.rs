//! Fuzz bodies for the `s3xml` parsers (filled by the module's owner).
