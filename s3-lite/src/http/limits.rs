//! Hard limits on everything a peer controls in a response.

/// Bounds applied by [`crate::http::ResponseDecoder`] while bytes arrive, so a hostile or broken
/// server cannot make the client buffer without bound. Each limit is checked byte by byte, before
/// the structure it bounds is complete: 1 GB of header bytes without an empty line fails as soon
/// as `max_head_bytes` is passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest response head, status line through the terminating empty line (default 64 KiB).
    pub max_head_bytes: usize,
    /// Most header fields in one head, and most trailer fields (default 128).
    pub max_headers: usize,
    /// Longest single line of a head, line ending included (default 16 KiB).
    pub max_line_bytes: usize,
    /// Longest chunk-size line including extensions and CRLF (default 4 KiB; aws-chunked
    /// signatures need about 100 bytes).
    pub max_chunk_line_bytes: usize,
    /// Largest trailer section, final empty line included (default 16 KiB).
    pub max_trailer_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_head_bytes: 64 * 1024,
            max_headers: 128,
            max_line_bytes: 16 * 1024,
            max_chunk_line_bytes: 4 * 1024,
            max_trailer_bytes: 16 * 1024,
        }
    }
}
