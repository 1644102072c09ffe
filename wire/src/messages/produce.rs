//! Produce response (API key 0), v3..=v13; flexible from v9.
//!
//! Known tagged fields (v10+): `current_leader` (0) per partition and
//! `node_endpoints` (0) at the top level. Topics are named up to v12 and
//! identified by `topic_id` from v13.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/ProduceResponse.json>.

use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, ProduceResponse,
    TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, TopicName};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest Produce response version this decoder reads.
pub const MIN_VERSION: i16 = 3;
/// Newest Produce response version this decoder reads.
pub const MAX_VERSION: i16 = 13;

impl DecodeResponse for ProduceResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "Produce",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 9;
        let mut out = ProduceResponse::default();
        out.responses = r.array(flexible, "ProduceResponse.responses", |r| topic(r, version))?;
        out.throttle_time_ms = r.i32("ProduceResponse.throttle_time_ms")?;
        if flexible {
            let mut node_endpoints = Vec::new();
            out.unknown_tagged_fields = r.tagged_fields("ProduceResponse.tagged_fields", |r, tag, _| {
                if tag == 0 && version >= 10 {
                    node_endpoints = r.array(true, "ProduceResponse.node_endpoints", node_endpoint)?;
                    Ok(true)
                } else {
                    Ok(false)
                }
            })?;
            out.node_endpoints = node_endpoints;
        }
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>, version: i16) -> Result<TopicProduceResponse> {
    let flexible = version >= 9;
    let mut out = TopicProduceResponse::default();
    if version <= 12 {
        out.name = TopicName(r.string(flexible, "TopicProduceResponse.name")?);
    }
    if version >= 13 {
        out.topic_id = r.uuid("TopicProduceResponse.topic_id")?;
    }
    out.partition_responses = r.array(flexible, "TopicProduceResponse.partition_responses", |r| {
        partition(r, version)
    })?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("TopicProduceResponse.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn partition(r: &mut Reader<'_>, version: i16) -> Result<PartitionProduceResponse> {
    let flexible = version >= 9;
    let mut out = PartitionProduceResponse::default();
    out.index = r.i32("PartitionProduceResponse.index")?;
    out.error_code = r.i16("PartitionProduceResponse.error_code")?;
    out.base_offset = r.i64("PartitionProduceResponse.base_offset")?;
    out.log_append_time_ms = r.i64("PartitionProduceResponse.log_append_time_ms")?;
    if version >= 5 {
        out.log_start_offset = r.i64("PartitionProduceResponse.log_start_offset")?;
    }
    if version >= 8 {
        out.record_errors = r.array(flexible, "PartitionProduceResponse.record_errors", |r| {
            record_error(r, flexible)
        })?;
        out.error_message = r.nullable_string(flexible, "PartitionProduceResponse.error_message")?;
    }
    if flexible {
        let mut current_leader = LeaderIdAndEpoch::default();
        out.unknown_tagged_fields = r.tagged_fields("PartitionProduceResponse.tagged_fields", |r, tag, _| {
            if tag == 0 && version >= 10 {
                current_leader = leader_id_and_epoch(r)?;
                Ok(true)
            } else {
                Ok(false)
            }
        })?;
        out.current_leader = current_leader;
    }
    Ok(out)
}

/// v8+ only.
fn record_error(r: &mut Reader<'_>, flexible: bool) -> Result<BatchIndexAndErrorMessage> {
    let mut out = BatchIndexAndErrorMessage::default();
    out.batch_index = r.i32("BatchIndexAndErrorMessage.batch_index")?;
    out.batch_index_error_message =
        r.nullable_string(flexible, "BatchIndexAndErrorMessage.batch_index_error_message")?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("BatchIndexAndErrorMessage.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

/// v10+ only (a tagged field).
fn leader_id_and_epoch(r: &mut Reader<'_>) -> Result<LeaderIdAndEpoch> {
    let mut out = LeaderIdAndEpoch::default();
    out.leader_id = BrokerId(r.i32("LeaderIdAndEpoch.leader_id")?);
    out.leader_epoch = r.i32("LeaderIdAndEpoch.leader_epoch")?;
    out.unknown_tagged_fields = r.tagged_fields("LeaderIdAndEpoch.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

/// v10+ only (inside a compact array in a tagged field).
fn node_endpoint(r: &mut Reader<'_>) -> Result<NodeEndpoint> {
    let mut out = NodeEndpoint::default();
    out.node_id = BrokerId(r.i32("NodeEndpoint.node_id")?);
    out.host = r.string(true, "NodeEndpoint.host")?;
    out.port = r.i32("NodeEndpoint.port")?;
    out.rack = r.nullable_string(true, "NodeEndpoint.rack")?;
    out.unknown_tagged_fields = r.tagged_fields("NodeEndpoint.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode(v: &ProduceResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<ProduceResponse> {
        let mut r = Reader::new(b);
        let v = ProduceResponse::decode_response(&mut r, version)?;
        r.finish("ProduceResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x07\x08\x09\x0a"));
        }
        m
    }

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn sample(version: i16) -> ProduceResponse {
        let flexible = version >= 9;
        let mut v = ProduceResponse::default();
        v.responses = (0..2u8)
            .map(|t| {
                let mut topic = TopicProduceResponse::default();
                if version <= 12 {
                    topic.name = TopicName(if t == 0 { s("events") } else { s("audit") });
                }
                if version >= 13 {
                    topic.topic_id = uuid::Uuid::from_u128(0xabcd_ef01_2345_6789_0000_0000_0000_0010 + u128::from(t));
                }
                topic.partition_responses = (0..3).map(|p| sample_partition(version, p)).collect();
                topic.unknown_tagged_fields = tags(flexible, 12);
                topic
            })
            .collect();
        v.throttle_time_ms = 250;
        if version >= 10 {
            let mut a = NodeEndpoint::default();
            a.node_id = BrokerId(7);
            a.host = s("b7.example");
            a.port = 19092;
            a.rack = Some(s("az-1"));
            let mut b = NodeEndpoint::default();
            b.node_id = BrokerId(8);
            b.host = s("b8.example");
            b.port = 19093;
            b.unknown_tagged_fields = tags(true, 2);
            v.node_endpoints = vec![a, b];
        }
        v.unknown_tagged_fields = tags(flexible, 66);
        v
    }

    fn sample_partition(version: i16, p: i32) -> PartitionProduceResponse {
        let flexible = version >= 9;
        let mut part = PartitionProduceResponse::default();
        part.index = p;
        part.error_code = if p == 1 { 6 } else { 0 };
        part.base_offset = 4242 + i64::from(p);
        part.log_append_time_ms = 1_700_000_000_000;
        if version >= 5 {
            part.log_start_offset = 12;
        }
        if version >= 8 {
            part.record_errors = (0..2)
                .map(|i| {
                    let mut e = BatchIndexAndErrorMessage::default();
                    e.batch_index = i + 3;
                    e.batch_index_error_message = if i == 0 { Some(s("bad record")) } else { None };
                    e.unknown_tagged_fields = tags(flexible, 1);
                    e
                })
                .collect();
            part.error_message = if p == 1 { Some(s("not leader")) } else { None };
        }
        if version >= 10 && p != 2 {
            part.current_leader.leader_id = BrokerId(8);
            part.current_leader.leader_epoch = 31;
            part.current_leader.unknown_tagged_fields = tags(true, 4);
        }
        part.unknown_tagged_fields = tags(flexible, 20);
        part
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<ProduceResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<ProduceResponse as Message>::VERSIONS.max, MAX_VERSION);
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
        let mut b = BytesMut::new();
        b.put_i32(i32::MAX); // responses
        b.put_i32(0);
        assert_out_of_bounds(b, 3);
        let mut b = BytesMut::new();
        b.put_slice(&COMPACT_HUGE);
        b.put_i32(0);
        assert_out_of_bounds(b, 9);
        // tagged-field count
        let mut b = BytesMut::new();
        b.put_u8(1);
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 13);
        // node_endpoints claiming u32::MAX - 1 entries
        let mut b = BytesMut::new();
        b.put_u8(1);
        b.put_i32(0);
        b.put_slice(&[1, 0, 5]);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 10);
    }

    #[test]
    fn huge_nested_lengths_are_refused() {
        // topic name
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i16(i16::MAX);
        b.put_slice(b"xyz");
        assert_out_of_bounds(b, 3);
        // partition_responses
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 3);
        // record_errors (v8)
        let mut b = BytesMut::new();
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(1);
        b.put_i32(0);
        b.put_i16(0);
        b.put_i64(0);
        b.put_i64(-1);
        b.put_i64(0);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 8);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [3, 8, 9, 10, 13] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 0, 2, 14, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "Produce",
                        min: 3,
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
            version in prop::sample::select(vec![3i16, 5, 8, 9, 10, 13]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in prop::sample::select(vec![3i16, 8, 10, 13]),
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
