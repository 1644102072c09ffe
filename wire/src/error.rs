//! The wire crate's typed errors.
//!
//! Every decoder returns [`Error`]; nothing in this crate panics on hostile
//! input. Each variant carries the context a user needs to find the fault: the
//! field being read, the length that was claimed and the limit it broke.

use crate::compression::CompressionError;
use crate::sasl::SaslError;

/// Result alias for the wire crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A protocol-level error: malformed, truncated or hostile bytes, or a request
/// the two sides cannot agree on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
// Variant fields are named for what they hold and described by the
// variant's doc and its Display message.
#[allow(missing_docs)]
pub enum Error {
    /// The input ended before a field was complete (inside a frame whose size
    /// is already known, so "need more bytes" no longer applies).
    #[error("truncated input while reading {context}: needed {needed} bytes, {remaining} remain")]
    Truncated {
        context: &'static str,
        needed: usize,
        remaining: usize,
    },
    /// A length read from the wire is larger than the bytes that follow it
    /// or than a configured cap; nothing was allocated for it.
    #[error("length {length} for {context} exceeds the limit of {limit}")]
    LengthOutOfBounds {
        context: &'static str,
        length: i64,
        limit: usize,
    },
    /// A negative length where null is not allowed (or below -1).
    #[error("invalid negative length {length} for {context}")]
    NegativeLength { context: &'static str, length: i64 },
    /// A varint ran past its maximum width (5 bytes for 32 bits, 10 for 64).
    #[error("varint for {context} does not terminate within {max_bytes} bytes")]
    VarintTooLong { context: &'static str, max_bytes: usize },
    /// A string field held bytes that are not UTF-8.
    #[error("{context} is not valid UTF-8")]
    InvalidUtf8 { context: &'static str },
    /// A frame's 4-byte size prefix is over the configured maximum.
    #[error("frame of {size} bytes exceeds the maximum frame size of {max} bytes")]
    FrameTooLarge { size: usize, max: usize },
    /// A frame size prefix below the smallest valid frame.
    #[error("invalid frame size {size}")]
    InvalidFrameSize { size: i32 },
    /// The response's correlation id is not the one the request carried.
    #[error("correlation id mismatch: expected {expected}, got {actual}")]
    CorrelationMismatch { expected: i32, actual: i32 },
    /// A record batch's CRC32C does not match its contents.
    #[error(
        "record batch at offset {base_offset}: CRC32C mismatch (stored {stored:#010x}, computed {computed:#010x})"
    )]
    CrcMismatch {
        base_offset: i64,
        stored: u32,
        computed: u32,
    },
    /// A record batch with a message format (magic) other than 2.
    #[error("record batch at offset {base_offset}: message format v{magic} is not supported (only v2; v0/v1 were removed in Kafka 4.0, KIP-896)")]
    UnsupportedMagic { base_offset: i64, magic: i8 },
    /// A record batch whose declared record count disagrees with its bytes.
    #[error("record batch at offset {base_offset}: declares {declared} records but {detail}")]
    RecordCountMismatch {
        base_offset: i64,
        declared: i32,
        detail: &'static str,
    },
    /// A record of a compressed batch, inflated chunk by chunk, is larger
    /// than the per-record bound (the consumer's `max_batch_inflate`).
    #[error("record batch at offset {base_offset}: a record of {size} bytes exceeds the per-record inflation bound of {limit} bytes (max_batch_inflate)")]
    RecordTooLarge { base_offset: i64, size: u64, limit: usize },
    /// A structure that decoded but left bytes it does not account for.
    #[error("{remaining} trailing bytes after {context}")]
    TrailingBytes { context: &'static str, remaining: usize },
    /// A value that is syntactically fine but not allowed here.
    #[error("invalid {context}: {message}")]
    Invalid { context: &'static str, message: String },
    /// The API key is not one this crate knows.
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    /// We cannot decode or encode this API at this version.
    #[error("{api} v{version} is not supported (we speak v{min}..=v{max})")]
    UnsupportedVersion {
        api: &'static str,
        version: i16,
        min: i16,
        max: i16,
    },
    /// Version negotiation found no version both sides speak.
    #[error("no common version for {api}: we speak v{ours_min}..=v{ours_max}, the broker {broker}")]
    NoCommonVersion {
        api: &'static str,
        ours_min: i16,
        ours_max: i16,
        /// What the broker said, in words ("does not support it" or "speaks v3..=v9").
        broker: String,
    },
    /// Encoding a request failed (kafka-protocol reported the reason).
    #[error("encoding {api} v{version}: {message}")]
    Encode {
        api: &'static str,
        version: i16,
        message: String,
    },
    /// A codec failed.
    #[error(transparent)]
    Compression(#[from] CompressionError),
    /// A SASL exchange failed.
    #[error(transparent)]
    Sasl(#[from] SaslError),
}

impl Error {
    pub(crate) fn truncated(context: &'static str, needed: usize, remaining: usize) -> Self {
        Error::Truncated {
            context,
            needed,
            remaining,
        }
    }
}
