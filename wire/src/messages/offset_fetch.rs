//! OffsetFetch response (API key 9), v1..=v10; flexible from v6.
//!
//! Two layouts share one type: up to v7 the response holds one group's
//! `topics` (+ a top-level `error_code` from v2); from v8 it holds `groups`,
//! each with its own `topics` (named up to v9, by `topic_id` from v10).
//! Fields of the layout not on the wire keep kafka-protocol's defaults.
//! No known tagged fields.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/OffsetFetchResponse.json>.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponse, OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, TopicName};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest OffsetFetch response version this decoder reads.
pub const MIN_VERSION: i16 = 1;
/// Newest OffsetFetch response version this decoder reads.
pub const MAX_VERSION: i16 = 10;

impl DecodeResponse for OffsetFetchResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "OffsetFetch",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 6;
        let mut out = OffsetFetchResponse::default();
        if version >= 3 {
            out.throttle_time_ms = r.i32("OffsetFetchResponse.throttle_time_ms")?;
        }
        if version <= 7 {
            out.topics = r.array(flexible, "OffsetFetchResponse.topics", |r| topic(r, version))?;
            if version >= 2 {
                out.error_code = r.i16("OffsetFetchResponse.error_code")?;
            }
        } else {
            out.groups = r.array(true, "OffsetFetchResponse.groups", |r| group(r, version))?;
        }
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("OffsetFetchResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

/// v1..=v7.
fn topic(r: &mut Reader<'_>, version: i16) -> Result<OffsetFetchResponseTopic> {
    let flexible = version >= 6;
    let mut out = OffsetFetchResponseTopic::default();
    out.name = TopicName(r.string(flexible, "OffsetFetchResponseTopic.name")?);
    out.partitions = r.array(flexible, "OffsetFetchResponseTopic.partitions", |r| {
        partition(r, version)
    })?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("OffsetFetchResponseTopic.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

/// v1..=v7.
fn partition(r: &mut Reader<'_>, version: i16) -> Result<OffsetFetchResponsePartition> {
    let flexible = version >= 6;
    let mut out = OffsetFetchResponsePartition::default();
    out.partition_index = r.i32("OffsetFetchResponsePartition.partition_index")?;
    out.committed_offset = r.i64("OffsetFetchResponsePartition.committed_offset")?;
    if version >= 5 {
        out.committed_leader_epoch = r.i32("OffsetFetchResponsePartition.committed_leader_epoch")?;
    }
    out.metadata = r.nullable_string(flexible, "OffsetFetchResponsePartition.metadata")?;
    out.error_code = r.i16("OffsetFetchResponsePartition.error_code")?;
    if flexible {
        out.unknown_tagged_fields =
            r.tagged_fields("OffsetFetchResponsePartition.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

/// v8+ (always flexible).
fn group(r: &mut Reader<'_>, version: i16) -> Result<OffsetFetchResponseGroup> {
    let mut out = OffsetFetchResponseGroup::default();
    out.group_id = GroupId(r.string(true, "OffsetFetchResponseGroup.group_id")?);
    out.topics = r.array(true, "OffsetFetchResponseGroup.topics", |r| group_topic(r, version))?;
    out.error_code = r.i16("OffsetFetchResponseGroup.error_code")?;
    out.unknown_tagged_fields = r.tagged_fields("OffsetFetchResponseGroup.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

/// v8+ (always flexible).
fn group_topic(r: &mut Reader<'_>, version: i16) -> Result<OffsetFetchResponseTopics> {
    let mut out = OffsetFetchResponseTopics::default();
    if version <= 9 {
        out.name = TopicName(r.string(true, "OffsetFetchResponseTopics.name")?);
    }
    if version >= 10 {
        out.topic_id = r.uuid("OffsetFetchResponseTopics.topic_id")?;
    }
    out.partitions = r.array(true, "OffsetFetchResponseTopics.partitions", group_partition)?;
    out.unknown_tagged_fields = r.tagged_fields("OffsetFetchResponseTopics.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

/// v8+ (always flexible).
fn group_partition(r: &mut Reader<'_>) -> Result<OffsetFetchResponsePartitions> {
    let mut out = OffsetFetchResponsePartitions::default();
    out.partition_index = r.i32("OffsetFetchResponsePartitions.partition_index")?;
    out.committed_offset = r.i64("OffsetFetchResponsePartitions.committed_offset")?;
    out.committed_leader_epoch = r.i32("OffsetFetchResponsePartitions.committed_leader_epoch")?;
    out.metadata = r.nullable_string(true, "OffsetFetchResponsePartitions.metadata")?;
    out.error_code = r.i16("OffsetFetchResponsePartitions.error_code")?;
    out.unknown_tagged_fields = r.tagged_fields("OffsetFetchResponsePartitions.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode(v: &OffsetFetchResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<OffsetFetchResponse> {
        let mut r = Reader::new(b);
        let v = OffsetFetchResponse::decode_response(&mut r, version)?;
        r.finish("OffsetFetchResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x42\x43"));
        }
        m
    }

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn sample(version: i16) -> OffsetFetchResponse {
        let flexible = version >= 6;
        let mut v = OffsetFetchResponse::default();
        if version >= 3 {
            v.throttle_time_ms = 99;
        }
        if version <= 7 {
            v.topics = ["a", "bb"]
                .into_iter()
                .map(|name| {
                    let mut t = OffsetFetchResponseTopic::default();
                    t.name = TopicName(s(name));
                    t.partitions = (0..3)
                        .map(|p| {
                            let mut part = OffsetFetchResponsePartition::default();
                            part.partition_index = p;
                            part.committed_offset = 5000 + i64::from(p);
                            if version >= 5 {
                                part.committed_leader_epoch = 6;
                            }
                            part.metadata = if p == 1 { None } else { Some(s("meta")) };
                            part.error_code = if p == 2 { 16 } else { 0 };
                            part.unknown_tagged_fields = tags(flexible, 2);
                            part
                        })
                        .collect();
                    t.unknown_tagged_fields = tags(flexible, 4);
                    t
                })
                .collect();
            if version >= 2 {
                v.error_code = 14;
            }
        } else {
            v.groups = ["g1", "g2"]
                .into_iter()
                .map(|id| {
                    let mut g = OffsetFetchResponseGroup::default();
                    g.group_id = GroupId(s(id));
                    g.topics = (0..2u8)
                        .map(|t| {
                            let mut topic = OffsetFetchResponseTopics::default();
                            if version <= 9 {
                                topic.name = TopicName(if t == 0 { s("x") } else { s("yy") });
                            }
                            if version >= 10 {
                                topic.topic_id = uuid::Uuid::from_u128(0xbeef_u128 << (8 * u32::from(t)));
                            }
                            topic.partitions = (0..2)
                                .map(|p| {
                                    let mut part = OffsetFetchResponsePartitions::default();
                                    part.partition_index = p;
                                    part.committed_offset = 10 + i64::from(p);
                                    part.committed_leader_epoch = 3;
                                    part.metadata = if p == 0 { None } else { Some(s("md")) };
                                    part.error_code = 0;
                                    part.unknown_tagged_fields = tags(true, 1);
                                    part
                                })
                                .collect();
                            topic.unknown_tagged_fields = tags(true, 6);
                            topic
                        })
                        .collect();
                    g.error_code = 15;
                    g.unknown_tagged_fields = tags(true, 8);
                    g
                })
                .collect();
        }
        v.unknown_tagged_fields = tags(flexible, 11);
        v
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<OffsetFetchResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<OffsetFetchResponse as Message>::VERSIONS.max, MAX_VERSION);
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
        // topics (v1: no throttle; v3: throttle first; v6: compact)
        let mut b = BytesMut::new();
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 1);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        b.put_i16(0);
        assert_out_of_bounds(b, 3);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 6);
        // groups (v8+)
        for version in [8, 10] {
            let mut b = BytesMut::new();
            b.put_i32(0);
            b.put_slice(&COMPACT_HUGE);
            assert_out_of_bounds(b, version);
            // a group's topics
            let mut b = BytesMut::new();
            b.put_i32(0);
            b.put_u8(2);
            b.put_u8(2);
            b.put_u8(b'g');
            b.put_slice(&COMPACT_HUGE);
            assert_out_of_bounds(b, version);
        }
        // tagged-field count
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 9);
        // partition metadata string claiming i16::MAX bytes (v1)
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(1);
        b.put_i32(0);
        b.put_i64(0);
        b.put_i16(i16::MAX);
        b.put_i16(0);
        assert_out_of_bounds(b, 1);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [1, 5, 6, 7, 8, 10] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 0, 11, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "OffsetFetch",
                        min: 1,
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
            version in prop::sample::select(vec![1i16, 2, 5, 6, 7, 8, 10]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in prop::sample::select(vec![1i16, 6, 8, 10]),
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
