//! The Confluent Schema Registry wire framing of a record value.
//!
//! ```text
//! magic (1 byte, 0) | schema id (4 bytes, big endian) | [Protobuf: message indexes] | payload
//! ```
//!
//! Protobuf values carry, between the id and the payload, the path of the
//! message type inside its `.proto` file: a zigzag varint count followed by
//! that many zigzag varint indexes (the first top-level message, `[0]`, is
//! written as the single byte `0`). Confluent's serializers document this in
//! "Wire format" of the Schema Registry docs; Apicurio's Confluent-compatible
//! serdes write the same bytes.
//!
//! Pure functions over byte slices: no allocation beyond the bounded index
//! list, every length checked before use.

use std::fmt;

/// The magic byte of the Confluent framing.
pub const MAGIC: u8 = 0;
/// Magic byte + schema id.
pub const HEADER_LEN: usize = 5;
/// The most message indexes we accept (nesting depth of a Protobuf message
/// type). Real files nest a handful deep; a count above this is corrupt input.
pub const MAX_MESSAGE_INDEXES: usize = 64;

/// Why a value is not a Confluent-framed value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
// Variant fields are named for what they hold and described by the
// variant's doc and its Display message.
#[allow(missing_docs)]
pub enum FrameError {
    /// Fewer than the 5 header bytes.
    Truncated { len: usize },
    /// The first byte is not 0.
    WrongMagic { found: u8 },
    /// The Protobuf message-index array is cut short or malformed.
    BadMessageIndexes { reason: &'static str },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated { len } => write!(
                f,
                "{len} bytes: too short for the Confluent framing (magic byte and 4-byte schema id)"
            ),
            FrameError::WrongMagic { found } => {
                write!(
                    f,
                    "magic byte {found:#04x}: not a Confluent-framed value (expected 0x00)"
                )
            }
            FrameError::BadMessageIndexes { reason } => write!(f, "bad Protobuf message indexes: {reason}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// A decoded frame, borrowing the payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The registry's schema id (big-endian after the magic byte).
    pub schema_id: u32,
    /// The Protobuf message path (empty for Avro and JSON Schema).
    pub message_indexes: Vec<i32>,
    /// The serialized value after the framing.
    pub payload: &'a [u8],
}

/// Reads the header (and, when `protobuf`, the message indexes) of `value`.
pub fn decode(value: &[u8], protobuf: bool) -> Result<Frame<'_>, FrameError> {
    let Some((&[magic, a, b, c, d], mut rest)) = value.split_first_chunk::<HEADER_LEN>() else {
        return Err(FrameError::Truncated { len: value.len() });
    };
    if magic != MAGIC {
        return Err(FrameError::WrongMagic { found: magic });
    }
    let schema_id = u32::from_be_bytes([a, b, c, d]);
    let mut message_indexes = Vec::new();
    if protobuf {
        let count = read_zigzag(&mut rest)?;
        if count < 0 {
            return Err(FrameError::BadMessageIndexes {
                reason: "negative count",
            });
        }
        if count == 0 {
            message_indexes.push(0);
        } else {
            let count = count as usize;
            if count > MAX_MESSAGE_INDEXES {
                return Err(FrameError::BadMessageIndexes {
                    reason: "more indexes than the nesting bound (64)",
                });
            }
            message_indexes.reserve(count);
            for _ in 0..count {
                let i = read_zigzag(&mut rest)?;
                if i < 0 {
                    return Err(FrameError::BadMessageIndexes {
                        reason: "negative index",
                    });
                }
                message_indexes.push(i);
            }
        }
    }
    Ok(Frame {
        schema_id,
        message_indexes,
        payload: rest,
    })
}

/// Appends the framing of `schema_id` (and, when `message_indexes` is
/// `Some`, the Protobuf index array) then `payload` to `out`.
pub fn encode(schema_id: u32, message_indexes: Option<&[i32]>, payload: &[u8], out: &mut Vec<u8>) {
    out.reserve(payload.len().saturating_add(HEADER_LEN + 2));
    out.push(MAGIC);
    out.extend_from_slice(&schema_id.to_be_bytes());
    if let Some(indexes) = message_indexes {
        if indexes == [0] {
            out.push(0);
        } else {
            write_zigzag(indexes.len() as i32, out);
            for i in indexes {
                write_zigzag(*i, out);
            }
        }
    }
    out.extend_from_slice(payload);
}

fn read_zigzag(buf: &mut &[u8]) -> Result<i32, FrameError> {
    let mut value: u32 = 0;
    for shift in (0..35).step_by(7) {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(FrameError::BadMessageIndexes {
                reason: "truncated varint",
            });
        };
        *buf = rest;
        if shift == 28 && b > 0x0f {
            return Err(FrameError::BadMessageIndexes {
                reason: "varint longer than 32 bits",
            });
        }
        value |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(crate::codec::zigzag32(value));
        }
    }
    // The 5th byte either ends the varint or is refused above.
    Err(FrameError::BadMessageIndexes {
        reason: "varint longer than 32 bits",
    })
}

fn write_zigzag(v: i32, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 31)) as u32;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn avro_frame_layout() {
        let mut out = Vec::new();
        encode(0x0102_0304, None, b"xy", &mut out);
        assert_eq!(out, [0, 1, 2, 3, 4, b'x', b'y']);
        let f = decode(&out, false).unwrap();
        assert_eq!(f.schema_id, 0x0102_0304);
        assert!(f.message_indexes.is_empty());
        assert_eq!(f.payload, b"xy");
    }

    #[test]
    fn protobuf_first_message_is_one_zero_byte() {
        let mut out = Vec::new();
        encode(7, Some(&[0]), b"p", &mut out);
        assert_eq!(out, [0, 0, 0, 0, 7, 0, b'p']);
        assert_eq!(decode(&out, true).unwrap().message_indexes, [0]);
        // [1, 2]: count 2 -> zigzag 4, 1 -> 2, 2 -> 4.
        let mut out = Vec::new();
        encode(7, Some(&[1, 2]), b"", &mut out);
        assert_eq!(&out[5..], [4, 2, 4]);
        assert_eq!(decode(&out, true).unwrap().message_indexes, [1, 2]);
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        assert_eq!(decode(&[], false), Err(FrameError::Truncated { len: 0 }));
        assert_eq!(decode(&[0, 0, 0, 1], false), Err(FrameError::Truncated { len: 4 }));
        assert_eq!(
            decode(&[1, 0, 0, 0, 1], false),
            Err(FrameError::WrongMagic { found: 1 })
        );
        assert!(matches!(
            decode(&[0, 0, 0, 0, 1], true),
            Err(FrameError::BadMessageIndexes { .. })
        ));
        // count 3 but one index
        assert!(decode(&[0, 0, 0, 0, 1, 6, 2], true).is_err());
        // a negative count (zigzag 1 = -1)
        assert!(decode(&[0, 0, 0, 0, 1, 1], true).is_err());
        // a count above the bound, without allocating for it
        let mut huge = vec![0, 0, 0, 0, 1];
        write_zigzag(i32::MAX, &mut huge);
        assert!(decode(&huge, true).is_err());
        // a varint that never ends / is too long
        assert!(decode(&[0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], true).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(id: u32, idx in proptest::collection::vec(0i32..i32::MAX, 0..8), payload: Vec<u8>, pb: bool) {
            let mut out = Vec::new();
            let indexes = if idx.is_empty() { vec![0] } else { idx };
            encode(id, pb.then_some(indexes.as_slice()), &payload, &mut out);
            let f = decode(&out, pb).unwrap();
            prop_assert_eq!(f.schema_id, id);
            prop_assert_eq!(f.payload, payload.as_slice());
            if pb { prop_assert_eq!(f.message_indexes, indexes); }
        }

        #[test]
        fn never_panics(bytes: Vec<u8>, pb: bool) {
            let _ = decode(&bytes, pb);
        }
    }
}
