//! OffsetCommit response (API key 8), v2..=v10; flexible from v8.
//!
//! No known tagged fields. Topics are named up to v9 and identified by
//! `topic_id` from v10.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/OffsetCommitResponse.json>.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponse, OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::TopicName;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest OffsetCommit response version this decoder reads.
pub const MIN_VERSION: i16 = 2;
/// Newest OffsetCommit response version this decoder reads.
pub const MAX_VERSION: i16 = 10;

impl DecodeResponse for OffsetCommitResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "OffsetCommit",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 8;
        let mut out = OffsetCommitResponse::default();
        if version >= 3 {
            out.throttle_time_ms = r.i32("OffsetCommitResponse.throttle_time_ms")?;
        }
        out.topics = r.array(flexible, "OffsetCommitResponse.topics", |r| topic(r, version))?;
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("OffsetCommitResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>, version: i16) -> Result<OffsetCommitResponseTopic> {
    let flexible = version >= 8;
    let mut out = OffsetCommitResponseTopic::default();
    if version <= 9 {
        out.name = TopicName(r.string(flexible, "OffsetCommitResponseTopic.name")?);
    }
    if version >= 10 {
        out.topic_id = r.uuid("OffsetCommitResponseTopic.topic_id")?;
    }
    out.partitions = r.array(flexible, "OffsetCommitResponseTopic.partitions", |r| {
        partition(r, flexible)
    })?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("OffsetCommitResponseTopic.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn partition(r: &mut Reader<'_>, flexible: bool) -> Result<OffsetCommitResponsePartition> {
    let mut out = OffsetCommitResponsePartition::default();
    out.partition_index = r.i32("OffsetCommitResponsePartition.partition_index")?;
    out.error_code = r.i16("OffsetCommitResponsePartition.error_code")?;
    if flexible {
        out.unknown_tagged_fields =
            r.tagged_fields("OffsetCommitResponsePartition.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode(v: &OffsetCommitResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<OffsetCommitResponse> {
        let mut r = Reader::new(b);
        let v = OffsetCommitResponse::decode_response(&mut r, version)?;
        r.finish("OffsetCommitResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x01\x00"));
        }
        m
    }

    fn sample(version: i16) -> OffsetCommitResponse {
        let flexible = version >= 8;
        let mut v = OffsetCommitResponse::default();
        if version >= 3 {
            v.throttle_time_ms = 1234;
        }
        v.topics = (0..2u8)
            .map(|t| {
                let mut topic = OffsetCommitResponseTopic::default();
                if version <= 9 {
                    topic.name = TopicName(StrBytes::from_static_str(if t == 0 { "in" } else { "out" }));
                }
                if version >= 10 {
                    topic.topic_id = uuid::Uuid::from_u128(0x5555_0000_0000_0000_0000_0000_0000_0001 << u32::from(t));
                }
                topic.partitions = (0..3)
                    .map(|p| {
                        let mut part = OffsetCommitResponsePartition::default();
                        part.partition_index = p;
                        part.error_code = if p == 1 { 25 } else { 0 };
                        part.unknown_tagged_fields = tags(flexible, 1);
                        part
                    })
                    .collect();
                topic.unknown_tagged_fields = tags(flexible, 3);
                topic
            })
            .collect();
        v.unknown_tagged_fields = tags(flexible, 9);
        v
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<OffsetCommitResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<OffsetCommitResponse as Message>::VERSIONS.max, MAX_VERSION);
    }

    #[test]
    fn round_trip_every_version() {
        for version in MIN_VERSION..=MAX_VERSION {
            let value = sample(version);
            let bytes = encode(&value, version);
            let decoded = decode(&bytes, version).unwrap_or_else(|e| panic!("v{version}: {e}"));
            assert_eq!(decoded, value, "v{version}");
        }
    }

    fn assert_out_of_bounds(frame: BytesMut, version: i16) {
        let err = decode(&frame.freeze(), version).unwrap_err();
        assert!(matches!(err, Error::LengthOutOfBounds { .. }), "v{version}: {err}");
    }

    const COMPACT_HUGE: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

    #[test]
    fn huge_lengths_are_refused() {
        // topics
        let mut b = BytesMut::new();
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 2);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 7);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 8);
        // tagged-field count
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 10);
        // topic name
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i16(i16::MAX);
        assert_out_of_bounds(b, 2);
        // partitions (v3 classic, v10 compact after the topic id)
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 3);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(2);
        b.put_u128(7);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 10);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [2, 7, 8, 10] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 0, 1, 11, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "OffsetCommit",
                        min: 2,
                        max: 10,
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            version in prop::sample::select(vec![2i16, 3, 8, 9, 10]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in prop::sample::select(vec![2i16, 7, 8, 10]),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            let mut frame = encode(&sample(version), version).to_vec();
            for (at, byte) in edits {
                let i = at % frame.len();
                frame[i] = byte;
            }
            let _ = decode(&Bytes::from(frame), version);
        }
    }
}
