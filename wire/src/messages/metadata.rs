//! Metadata response (API key 3), v0..=v13; flexible from v9.
//!
//! No known tagged fields at any version. `MetadataResponseTopic::name` is
//! nullable (the schema says v12+; like kafka-protocol we accept null at
//! every version). `cluster_authorized_operations` is only on the wire in
//! v8..=v10 and stays `i32::MIN` otherwise, as kafka-protocol decodes it.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/MetadataResponse.json>.

use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, TopicName};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest Metadata response version this decoder reads.
pub const MIN_VERSION: i16 = 0;
/// Newest Metadata response version this decoder reads.
pub const MAX_VERSION: i16 = 13;

impl DecodeResponse for MetadataResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "Metadata",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 9;
        let mut out = MetadataResponse::default();
        if version >= 3 {
            out.throttle_time_ms = r.i32("MetadataResponse.throttle_time_ms")?;
        }
        out.brokers = r.array(flexible, "MetadataResponse.brokers", |r| broker(r, version))?;
        if version >= 2 {
            out.cluster_id = r.nullable_string(flexible, "MetadataResponse.cluster_id")?;
        }
        if version >= 1 {
            out.controller_id = BrokerId(r.i32("MetadataResponse.controller_id")?);
        }
        out.topics = r.array(flexible, "MetadataResponse.topics", |r| topic(r, version))?;
        if (8..=10).contains(&version) {
            out.cluster_authorized_operations = r.i32("MetadataResponse.cluster_authorized_operations")?;
        }
        if version >= 13 {
            out.error_code = r.i16("MetadataResponse.error_code")?;
        }
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("MetadataResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn broker(r: &mut Reader<'_>, version: i16) -> Result<MetadataResponseBroker> {
    let flexible = version >= 9;
    let mut out = MetadataResponseBroker::default();
    out.node_id = BrokerId(r.i32("MetadataResponseBroker.node_id")?);
    out.host = r.string(flexible, "MetadataResponseBroker.host")?;
    out.port = r.i32("MetadataResponseBroker.port")?;
    if version >= 1 {
        out.rack = r.nullable_string(flexible, "MetadataResponseBroker.rack")?;
    }
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("MetadataResponseBroker.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn topic(r: &mut Reader<'_>, version: i16) -> Result<MetadataResponseTopic> {
    let flexible = version >= 9;
    let mut out = MetadataResponseTopic::default();
    out.error_code = r.i16("MetadataResponseTopic.error_code")?;
    out.name = r
        .nullable_string(flexible, "MetadataResponseTopic.name")?
        .map(TopicName);
    if version >= 10 {
        out.topic_id = r.uuid("MetadataResponseTopic.topic_id")?;
    }
    if version >= 1 {
        out.is_internal = r.bool("MetadataResponseTopic.is_internal")?;
    }
    out.partitions = r.array(flexible, "MetadataResponseTopic.partitions", |r| partition(r, version))?;
    if version >= 8 {
        out.topic_authorized_operations = r.i32("MetadataResponseTopic.topic_authorized_operations")?;
    }
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("MetadataResponseTopic.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn partition(r: &mut Reader<'_>, version: i16) -> Result<MetadataResponsePartition> {
    let flexible = version >= 9;
    let mut out = MetadataResponsePartition::default();
    out.error_code = r.i16("MetadataResponsePartition.error_code")?;
    out.partition_index = r.i32("MetadataResponsePartition.partition_index")?;
    out.leader_id = BrokerId(r.i32("MetadataResponsePartition.leader_id")?);
    if version >= 7 {
        out.leader_epoch = r.i32("MetadataResponsePartition.leader_epoch")?;
    }
    out.replica_nodes = broker_ids(r, flexible, "MetadataResponsePartition.replica_nodes")?;
    out.isr_nodes = broker_ids(r, flexible, "MetadataResponsePartition.isr_nodes")?;
    if version >= 5 {
        out.offline_replicas = broker_ids(r, flexible, "MetadataResponsePartition.offline_replicas")?;
    }
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("MetadataResponsePartition.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn broker_ids(r: &mut Reader<'_>, flexible: bool, context: &'static str) -> Result<Vec<BrokerId>> {
    r.array(flexible, context, |r| r.i32(context).map(BrokerId))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode(v: &MetadataResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<MetadataResponse> {
        let mut r = Reader::new(b);
        let v = MetadataResponse::decode_response(&mut r, version)?;
        r.finish("MetadataResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\xaa\xbb"));
        }
        m
    }

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn sample(version: i16) -> MetadataResponse {
        let flexible = version >= 9;
        let mut v = MetadataResponse::default();
        if version >= 3 {
            v.throttle_time_ms = 33;
        }
        v.brokers = (1..=3)
            .map(|id| {
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(id);
                b.host = s("broker.example");
                b.port = 9090 + id;
                if version >= 1 && id != 2 {
                    b.rack = Some(s("rack-x"));
                }
                b.unknown_tagged_fields = tags(flexible, 11);
                b
            })
            .collect();
        if version >= 2 {
            v.cluster_id = Some(s("cluster-Zx9"));
        }
        if version >= 1 {
            v.controller_id = BrokerId(2);
        }
        v.topics = (0..3)
            .map(|t| {
                let mut topic = MetadataResponseTopic::default();
                topic.error_code = t as i16;
                topic.name = match t {
                    0 => Some(TopicName(s("orders"))),
                    1 if version >= 12 => None,
                    _ => Some(TopicName(s("__consumer_offsets"))),
                };
                if version >= 10 {
                    topic.topic_id = uuid::Uuid::from_u128(0xfeed_0000_0000_0000_0000_0000_0000_0000 + t as u128);
                }
                if version >= 1 {
                    topic.is_internal = t == 2;
                }
                topic.partitions = (0..2)
                    .map(|p| {
                        let mut part = MetadataResponsePartition::default();
                        part.error_code = 9;
                        part.partition_index = p;
                        part.leader_id = BrokerId(p + 1);
                        if version >= 7 {
                            part.leader_epoch = 17 + p;
                        }
                        part.replica_nodes = vec![BrokerId(1), BrokerId(2), BrokerId(3)];
                        part.isr_nodes = vec![BrokerId(1), BrokerId(2)];
                        if version >= 5 {
                            part.offline_replicas = vec![BrokerId(3)];
                        }
                        part.unknown_tagged_fields = tags(flexible, 21);
                        part
                    })
                    .collect();
                if version >= 8 {
                    topic.topic_authorized_operations = 0x0bf8;
                }
                topic.unknown_tagged_fields = tags(flexible, 31);
                topic
            })
            .collect();
        if (8..=10).contains(&version) {
            v.cluster_authorized_operations = 0x0ff8;
        }
        if version >= 13 {
            v.error_code = 58;
        }
        v.unknown_tagged_fields = tags(flexible, 41);
        v
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<MetadataResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<MetadataResponse as Message>::VERSIONS.max, MAX_VERSION);
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
    fn huge_top_level_arrays_are_refused() {
        // brokers
        let mut b = BytesMut::new();
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 0);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 8);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 12);

        // topics (v0: brokers, topics)
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 0);
        // v9: throttle, brokers, cluster_id (null), controller, topics
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(1);
        b.put_u8(0);
        b.put_i32(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 9);
        // cluster_id string claiming i16::MAX bytes (v2)
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(i16::MAX);
        b.put_slice(b"abc");
        assert_out_of_bounds(b, 2);
        // top-level tagged-field count (v13)
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(1);
        b.put_u8(0);
        b.put_i32(1);
        b.put_u8(1);
        b.put_i16(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 13);
    }

    #[test]
    fn huge_nested_lengths_are_refused() {
        // Broker host claiming i16::MAX bytes (v0).
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i32(1);
        b.put_i16(i16::MAX);
        b.put_slice(b"host");
        assert_out_of_bounds(b, 0);
        // Broker host, compact (v9).
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(2);
        b.put_i32(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 9);

        // A v1 frame up to one topic's partitions array.
        let topic_prefix = || {
            let mut b = BytesMut::new();
            b.put_i32(0); // brokers
            b.put_i32(1); // controller
            b.put_i32(1); // one topic
            b.put_i16(0);
            b.put_i16(1);
            b.put_u8(b't');
            b.put_u8(0); // is_internal
            b
        };
        let mut b = topic_prefix();
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 1);
        // replica_nodes claiming i32::MAX entries.
        let mut b = topic_prefix();
        b.put_i32(1);
        b.put_i16(0);
        b.put_i32(0);
        b.put_i32(1);
        b.put_i32(i32::MAX);
        b.put_i32(1);
        assert_out_of_bounds(b, 1);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 8, 9, 13] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 14, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "Metadata",
                        min: 0,
                        max: 13,
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
            version in prop::sample::select(vec![0i16, 1, 5, 8, 9, 10, 12, 13]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in prop::sample::select(vec![0i16, 8, 9, 13]),
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
