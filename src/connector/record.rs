//! The two record shapes the connector carries: [`KafkaMessage`] (the full
//! broker record) and the string channel's [`Text`] (payload only).
//!
//! Both hold `Bytes` slices of the fetched response frame: consuming one
//! copies no key, value or header (the client decodes uncompressed batches
//! without copying; a compressed batch is inflated once into its own
//! buffer, and records slice that).

use std::fmt;
use std::ops::Deref;

use bytes::Bytes;

/// A record header: the client's own type (key and value as `Bytes`
/// slices of the fetched frame), so a consumed record's headers pass to the
/// connector as they are, with no conversion per record. Kafka header keys
/// are strings; they are kept as the fetched bytes (`std::str::from_utf8`
/// where text is needed).
pub use clink_kafka_wire::record::Header;

/// A full broker record, as consumed or as to be produced.
///
/// On the sink side `offset`, `partition` and `timestamp` are inputs only
/// where they make sense: `partition` is ignored (the sink's
/// `fixed_partition` or the key decides), and a `timestamp` of -1 lets the
/// producer stamp the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaMessage {
    /// The value; `None` is a null value (a tombstone on a compacted topic).
    pub payload: Option<Bytes>,
    /// The key; `None` is a null key.
    pub key: Option<Bytes>,
    /// The headers, in record order.
    pub headers: Vec<Header>,
    /// The record's offset; -1 for a record not yet produced.
    pub offset: i64,
    /// The partition it was read from; -1 for a record not yet produced.
    pub partition: i32,
    /// Milliseconds since the epoch; -1 for "not set".
    pub timestamp: i64,
}

impl KafkaMessage {
    /// A record to produce with this value and nothing else set.
    pub fn new(payload: impl Into<Bytes>) -> Self {
        KafkaMessage {
            payload: Some(payload.into()),
            key: None,
            headers: Vec::new(),
            offset: -1,
            partition: -1,
            timestamp: -1,
        }
    }

    /// A tombstone (null value) for `key`.
    pub fn tombstone(key: impl Into<Bytes>) -> Self {
        KafkaMessage {
            payload: None,
            key: Some(key.into()),
            ..KafkaMessage::new(Bytes::new())
        }
    }

    /// The same record with `key`.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The same record with one more header.
    pub fn with_header(mut self, key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        self.headers.push(Header { key: key.into(), value });
        self
    }

    /// The payload bytes, empty for a null value.
    pub fn payload_bytes(&self) -> &[u8] {
        self.payload.as_deref().unwrap_or_default()
    }
}

/// One string-channel record: UTF-8 text, checked once, kept as the
/// `Bytes` slice it arrived in (or the `String` it was made from).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Text(Bytes);

impl Text {
    /// Wraps `bytes` if they are UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Text, std::str::Utf8Error> {
        std::str::from_utf8(&bytes)?;
        Ok(Text(bytes))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // The constructors admit only UTF-8 and `Bytes` is immutable, so this
        // cannot fail; it is checked again rather than assumed, to stay
        // free of `unsafe` (the check is a fast SIMD scan).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The underlying bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.0
    }

    /// The underlying bytes, without copying.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl Deref for Text {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(Bytes::from(s))
    }
}

impl From<&'static str> for Text {
    fn from(s: &'static str) -> Self {
        Text(Bytes::from_static(s.as_bytes()))
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_checked_and_shares_the_buffer() {
        let frame = Bytes::from_static(b"xxhello, worldyy");
        let slice = frame.slice(2..14);
        let text = Text::from_utf8(slice.clone()).unwrap();
        assert_eq!(text, "hello, world");
        assert_eq!(text.as_bytes().as_ptr(), slice.as_ptr(), "no copy");
        assert!(Text::from_utf8(Bytes::from_static(b"\xff\xfe")).is_err());
        assert_eq!(Text::from(String::from("a")).len(), 1);
    }

    #[test]
    fn tombstone_has_a_null_value() {
        let t = KafkaMessage::tombstone("k");
        assert_eq!(t.payload, None);
        assert_eq!(t.key.as_deref(), Some(&b"k"[..]));
        assert!(t.payload_bytes().is_empty());
    }
}
