//! CreateTopics response (API key 19), v2..=v7; flexible from v5.
//!
//! Known tagged field (v5+): `topic_config_error_code` (0) per topic.
//! `configs` is a nullable array on the wire (v5+); before v5 it keeps
//! kafka-protocol's default of `Some(vec![])`.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/CreateTopicsResponse.json>.

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::messages::TopicName;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest CreateTopics response version this decoder reads.
pub const MIN_VERSION: i16 = 2;
/// Newest CreateTopics response version this decoder reads.
pub const MAX_VERSION: i16 = 7;

impl DecodeResponse for CreateTopicsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "CreateTopics",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 5;
        let mut out = CreateTopicsResponse::default();
        out.throttle_time_ms = r.i32("CreateTopicsResponse.throttle_time_ms")?;
        out.topics = r.array(flexible, "CreateTopicsResponse.topics", |r| topic(r, version))?;
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("CreateTopicsResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>, version: i16) -> Result<CreatableTopicResult> {
    let flexible = version >= 5;
    let mut out = CreatableTopicResult::default();
    out.name = TopicName(r.string(flexible, "CreatableTopicResult.name")?);
    if version >= 7 {
        out.topic_id = r.uuid("CreatableTopicResult.topic_id")?;
    }
    out.error_code = r.i16("CreatableTopicResult.error_code")?;
    out.error_message = r.nullable_string(flexible, "CreatableTopicResult.error_message")?;
    if flexible {
        out.num_partitions = r.i32("CreatableTopicResult.num_partitions")?;
        out.replication_factor = r.i16("CreatableTopicResult.replication_factor")?;
        out.configs = r.nullable_array(true, "CreatableTopicResult.configs", config)?;
        let mut topic_config_error_code = 0;
        out.unknown_tagged_fields = r.tagged_fields("CreatableTopicResult.tagged_fields", |r, tag, _| {
            if tag == 0 {
                topic_config_error_code = r.i16("CreatableTopicResult.topic_config_error_code")?;
                Ok(true)
            } else {
                Ok(false)
            }
        })?;
        out.topic_config_error_code = topic_config_error_code;
    }
    Ok(out)
}

/// v5+ only (always flexible).
fn config(r: &mut Reader<'_>) -> Result<CreatableTopicConfigs> {
    let mut out = CreatableTopicConfigs::default();
    out.name = r.string(true, "CreatableTopicConfigs.name")?;
    out.value = r.nullable_string(true, "CreatableTopicConfigs.value")?;
    out.read_only = r.bool("CreatableTopicConfigs.read_only")?;
    out.config_source = r.i8("CreatableTopicConfigs.config_source")?;
    out.is_sensitive = r.bool("CreatableTopicConfigs.is_sensitive")?;
    out.unknown_tagged_fields = r.tagged_fields("CreatableTopicConfigs.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode(v: &CreateTopicsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<CreateTopicsResponse> {
        let mut r = Reader::new(b);
        let v = CreateTopicsResponse::decode_response(&mut r, version)?;
        r.finish("CreateTopicsResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x0f\x0e\x0d"));
        }
        m
    }

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn sample(version: i16) -> CreateTopicsResponse {
        let flexible = version >= 5;
        let mut v = CreateTopicsResponse::default();
        v.throttle_time_ms = 4;
        v.topics = (0..3u8)
            .map(|t| {
                let mut topic = CreatableTopicResult::default();
                topic.name = TopicName([s("new-a"), s("new-b"), s("dup")][usize::from(t)].clone());
                if version >= 7 {
                    topic.topic_id = uuid::Uuid::from_u128(0x7070_u128 + u128::from(t));
                }
                topic.error_code = if t == 2 { 36 } else { 0 };
                topic.error_message = if t == 2 {
                    Some(s("Topic 'dup' already exists."))
                } else {
                    None
                };
                if flexible {
                    topic.num_partitions = 6;
                    topic.replication_factor = 3;
                    topic.configs = match t {
                        0 => Some(
                            (0..2)
                                .map(|i| {
                                    let mut c = CreatableTopicConfigs::default();
                                    c.name = if i == 0 { s("cleanup.policy") } else { s("ssl.secret") };
                                    c.value = if i == 0 { Some(s("compact")) } else { None };
                                    c.read_only = i == 0;
                                    c.config_source = 5;
                                    c.is_sensitive = i == 1;
                                    c.unknown_tagged_fields = tags(true, 2);
                                    c
                                })
                                .collect(),
                        ),
                        1 => None,
                        _ => Some(Vec::new()),
                    };
                    if t == 1 {
                        topic.topic_config_error_code = 29;
                    }
                }
                topic.unknown_tagged_fields = tags(flexible, 10);
                topic
            })
            .collect();
        v.unknown_tagged_fields = tags(flexible, 3);
        v
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<CreateTopicsResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<CreateTopicsResponse as Message>::VERSIONS.max, MAX_VERSION);
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

    #[test]
    fn pre_flexible_configs_default_to_empty_not_null() {
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i16(0);
        b.put_i16(-1);
        let v = decode(&b.freeze(), 4).unwrap();
        assert_eq!(v.topics[0].configs, Some(Vec::new()));
        assert_eq!(v.topics[0].error_message, None);
        assert_eq!(v.topics[0].num_partitions, -1);
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
        b.put_i32(0);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 2);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 5);
        // tagged-field count
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 7);
        // topic name, error message
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(i16::MAX);
        assert_out_of_bounds(b, 2);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i16(0);
        b.put_i16(i16::MAX);
        assert_out_of_bounds(b, 3);
        // configs (v5)
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(2);
        b.put_u8(2);
        b.put_u8(b't');
        b.put_i16(0);
        b.put_u8(0); // error_message: null
        b.put_i32(1);
        b.put_i16(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 5);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [2, 4, 5, 7] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 0, 1, 8, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "CreateTopics",
                        min: 2,
                        max: 7,
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
            version in 2i16..=7,
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in 2i16..=7,
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
