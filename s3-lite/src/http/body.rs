//! The message-body half of both decoders ([`super::ResponseDecoder`] and
//! [`super::server::RequestDecoder`]): `Content-Length`, chunked and read-until-close bodies.
//! Body bytes are handed back as slices of the input, never copied.

use super::chunked::{ChunkEvent, ChunkedDecoder};
use super::error::HttpError;
use super::framing::BodyFraming;
use super::limits::Limits;

/// Where a decoder is inside one message body.
#[derive(Debug, Clone)]
pub(crate) enum BodyDecoder {
    /// `Content-Length` (or no body: `remaining == 0`).
    Length { remaining: u64 },
    /// `Transfer-Encoding: chunked`.
    Chunked(Box<ChunkedDecoder>),
    /// The body runs until the peer closes the connection.
    UntilClose,
}

/// What one [`BodyDecoder::step`] found.
#[derive(Debug)]
pub(crate) enum BodyStep<'a> {
    /// All of the input was taken; more is needed.
    NeedMore,
    /// Body bytes (a prefix of the input).
    Data(&'a [u8]),
    /// The body is complete; the trailers of a chunked body (empty otherwise).
    End(Vec<(String, String)>),
}

impl BodyDecoder {
    /// The decoder for a body framed as `framing`.
    pub(crate) fn new(framing: BodyFraming, limits: Limits) -> Self {
        match framing {
            BodyFraming::None => Self::Length { remaining: 0 },
            BodyFraming::Length(n) => Self::Length { remaining: n },
            BodyFraming::Chunked => Self::Chunked(Box::new(ChunkedDecoder::new(limits))),
            BodyFraming::UntilClose => Self::UntilClose,
        }
    }

    /// Consumes a prefix of `input`: `(consumed, what it was)`. The end of a length-delimited
    /// body is reported without waiting for more input.
    pub(crate) fn step<'a>(&mut self, input: &'a [u8]) -> Result<(usize, BodyStep<'a>), HttpError> {
        Ok(match self {
            Self::Length { remaining: 0 } => (0, BodyStep::End(Vec::new())),
            Self::Length { remaining } => {
                let take = usize::try_from(*remaining).map_or(input.len(), |r| r.min(input.len()));
                *remaining = remaining.saturating_sub(take as u64);
                match input.get(..take) {
                    Some(body) if take > 0 => (take, BodyStep::Data(body)),
                    _ => (input.len(), BodyStep::NeedMore),
                }
            }
            Self::UntilClose if input.is_empty() => (0, BodyStep::NeedMore),
            Self::UntilClose => (input.len(), BodyStep::Data(input)),
            Self::Chunked(chunked) => match chunked.decode(input)? {
                (n, ChunkEvent::NeedMore) => (n, BodyStep::NeedMore),
                (n, ChunkEvent::Data(d)) => (n, BodyStep::Data(d)),
                (n, ChunkEvent::End) => (n, BodyStep::End(chunked.take_trailers())),
            },
        })
    }

    /// The body bytes still to come, when the caller may read them itself straight into
    /// their destination and report them with [`BodyDecoder::placed`]: a `Content-Length`
    /// body with bytes left. Chunked and read-until-close bodies need the decoder.
    pub(crate) fn direct_room(&self) -> Option<u64> {
        match self {
            Self::Length { remaining } if *remaining > 0 => Some(*remaining),
            _ => None,
        }
    }

    /// The caller read `n` body bytes itself (at most [`BodyDecoder::direct_room`]).
    pub(crate) fn placed(&mut self, n: u64) -> Result<(), HttpError> {
        match self {
            Self::Length { remaining } if n <= *remaining => {
                *remaining -= n;
                Ok(())
            }
            _ => Err(HttpError::PlacedPastBody),
        }
    }

    /// Whether a close of the connection here ends the body cleanly (nothing left to read, or
    /// a body delimited by the close itself).
    pub(crate) fn ends_at_eof(&self) -> bool {
        matches!(self, Self::UntilClose | Self::Length { remaining: 0 })
    }
}
