//! Fetch response (API key 1), v4..=v18; flexible from v12.
//!
//! Record data stays a zero-copy slice of the frame: `PartitionData::records`
//! shares the response buffer's allocation and is parsed later by the record
//! batch reader. v12+ carries the known tagged fields `diverging_epoch` (0),
//! `current_leader` (1) and `snapshot_id` (2) per partition, and
//! `node_endpoints` (0, v16+) at the top level.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/FetchResponse.json>.

use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchResponse, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
    PartitionData, SnapshotId,
};
use kafka_protocol::messages::{BrokerId, ProducerId, TopicName};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest Fetch response version this decoder reads.
pub const MIN_VERSION: i16 = 4;
/// Newest Fetch response version this decoder reads.
pub const MAX_VERSION: i16 = 18;

impl DecodeResponse for FetchResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "Fetch",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 12;
        let mut out = FetchResponse::default();
        out.throttle_time_ms = r.i32("FetchResponse.throttle_time_ms")?;
        if version >= 7 {
            out.error_code = r.i16("FetchResponse.error_code")?;
            out.session_id = r.i32("FetchResponse.session_id")?;
        }
        out.responses = r.array(flexible, "FetchResponse.responses", |r| topic(r, version))?;
        if flexible {
            let mut node_endpoints = Vec::new();
            out.unknown_tagged_fields = r.tagged_fields("FetchResponse.tagged_fields", |r, tag, _| {
                if tag == 0 && version >= 16 {
                    node_endpoints = r.array(true, "FetchResponse.node_endpoints", node_endpoint)?;
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

fn topic(r: &mut Reader<'_>, version: i16) -> Result<FetchableTopicResponse> {
    let flexible = version >= 12;
    let mut out = FetchableTopicResponse::default();
    if version <= 12 {
        out.topic = TopicName(r.string(flexible, "FetchableTopicResponse.topic")?);
    }
    if version >= 13 {
        out.topic_id = r.uuid("FetchableTopicResponse.topic_id")?;
    }
    out.partitions = r.array(flexible, "FetchableTopicResponse.partitions", |r| partition(r, version))?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("FetchableTopicResponse.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn partition(r: &mut Reader<'_>, version: i16) -> Result<PartitionData> {
    let flexible = version >= 12;
    let mut out = PartitionData::default();
    out.partition_index = r.i32("PartitionData.partition_index")?;
    out.error_code = r.i16("PartitionData.error_code")?;
    out.high_watermark = r.i64("PartitionData.high_watermark")?;
    out.last_stable_offset = r.i64("PartitionData.last_stable_offset")?;
    if version >= 5 {
        out.log_start_offset = r.i64("PartitionData.log_start_offset")?;
    }
    out.aborted_transactions = r.nullable_array(flexible, "PartitionData.aborted_transactions", |r| {
        aborted_transaction(r, flexible)
    })?;
    if version >= 11 {
        out.preferred_read_replica = BrokerId(r.i32("PartitionData.preferred_read_replica")?);
    }
    out.records = r.nullable_bytes(flexible, "PartitionData.records")?;
    if flexible {
        let mut diverging_epoch = EpochEndOffset::default();
        let mut current_leader = LeaderIdAndEpoch::default();
        let mut snapshot_id = SnapshotId::default();
        out.unknown_tagged_fields = r.tagged_fields("PartitionData.tagged_fields", |r, tag, _| match tag {
            0 => {
                diverging_epoch = epoch_end_offset(r)?;
                Ok(true)
            }
            1 => {
                current_leader = leader_id_and_epoch(r)?;
                Ok(true)
            }
            2 => {
                snapshot_id = snapshot(r)?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        out.diverging_epoch = diverging_epoch;
        out.current_leader = current_leader;
        out.snapshot_id = snapshot_id;
    }
    Ok(out)
}

fn aborted_transaction(r: &mut Reader<'_>, flexible: bool) -> Result<AbortedTransaction> {
    let mut out = AbortedTransaction::default();
    out.producer_id = ProducerId(r.i64("AbortedTransaction.producer_id")?);
    out.first_offset = r.i64("AbortedTransaction.first_offset")?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("AbortedTransaction.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

// The three tagged structs below only occur in v12+ (flexible) responses.

fn epoch_end_offset(r: &mut Reader<'_>) -> Result<EpochEndOffset> {
    let mut out = EpochEndOffset::default();
    out.epoch = r.i32("EpochEndOffset.epoch")?;
    out.end_offset = r.i64("EpochEndOffset.end_offset")?;
    out.unknown_tagged_fields = r.tagged_fields("EpochEndOffset.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

fn leader_id_and_epoch(r: &mut Reader<'_>) -> Result<LeaderIdAndEpoch> {
    let mut out = LeaderIdAndEpoch::default();
    out.leader_id = BrokerId(r.i32("LeaderIdAndEpoch.leader_id")?);
    out.leader_epoch = r.i32("LeaderIdAndEpoch.leader_epoch")?;
    out.unknown_tagged_fields = r.tagged_fields("LeaderIdAndEpoch.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

fn snapshot(r: &mut Reader<'_>) -> Result<SnapshotId> {
    let mut out = SnapshotId::default();
    out.end_offset = r.i64("SnapshotId.end_offset")?;
    out.epoch = r.i32("SnapshotId.epoch")?;
    out.unknown_tagged_fields = r.tagged_fields("SnapshotId.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

/// v16+ only (inside a compact array in a tagged field).
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

    fn encode(v: &FetchResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<FetchResponse> {
        let mut r = Reader::new(b);
        let v = FetchResponse::decode_response(&mut r, version)?;
        r.finish("FetchResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x01\x02\x03"));
        }
        m
    }

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    /// A response with every field valid at `version` set to a non-default value.
    fn sample(version: i16) -> FetchResponse {
        let flexible = version >= 12;
        let mut v = FetchResponse::default();
        v.throttle_time_ms = 125;
        if version >= 7 {
            v.error_code = 7;
            v.session_id = 0x1234_5678;
        }
        v.responses = (0..2)
            .map(|t| {
                let mut topic = FetchableTopicResponse::default();
                if version <= 12 {
                    topic.topic = TopicName(if t == 0 { s("orders") } else { s("payments") });
                }
                if version >= 13 {
                    topic.topic_id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0011_2233_4455_6677 + t);
                }
                topic.partitions = (0..3).map(|p| sample_partition(version, p)).collect();
                topic.unknown_tagged_fields = tags(flexible, 40);
                topic
            })
            .collect();
        if version >= 16 {
            let mut a = NodeEndpoint::default();
            a.node_id = BrokerId(3);
            a.host = s("broker-3.example");
            a.port = 9093;
            a.rack = Some(s("rack-a"));
            a.unknown_tagged_fields = tags(true, 9);
            let mut b = NodeEndpoint::default();
            b.node_id = BrokerId(4);
            b.host = s("broker-4.example");
            b.port = 9094;
            v.node_endpoints = vec![a, b];
        }
        v.unknown_tagged_fields = tags(flexible, 77);
        v
    }

    fn sample_partition(version: i16, p: i32) -> PartitionData {
        let flexible = version >= 12;
        let mut part = PartitionData::default();
        part.partition_index = p;
        part.error_code = p as i16;
        part.high_watermark = 1000 + i64::from(p);
        part.last_stable_offset = 900 + i64::from(p);
        if version >= 5 {
            part.log_start_offset = 10 + i64::from(p);
        }
        part.aborted_transactions = if p == 1 {
            None
        } else {
            Some(
                (0..2)
                    .map(|i| {
                        let mut a = AbortedTransaction::default();
                        a.producer_id = ProducerId(5000 + i);
                        a.first_offset = 950 + i;
                        a.unknown_tagged_fields = tags(flexible, 5);
                        a
                    })
                    .collect(),
            )
        };
        if version >= 11 {
            part.preferred_read_replica = BrokerId(2);
        }
        part.records = match p {
            0 => Some(Bytes::from_static(b"record batch bytes, opaque here")),
            1 => None,
            _ => Some(Bytes::new()),
        };
        if flexible && p != 2 {
            part.diverging_epoch.epoch = 4;
            part.diverging_epoch.end_offset = 800;
            part.diverging_epoch.unknown_tagged_fields = tags(true, 3);
            part.current_leader.leader_id = BrokerId(1);
            part.current_leader.leader_epoch = 9;
            part.snapshot_id.end_offset = 700;
            part.snapshot_id.epoch = 8;
        }
        part.unknown_tagged_fields = tags(flexible, 50);
        part
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<FetchResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<FetchResponse as Message>::VERSIONS.max, MAX_VERSION);
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
    fn records_are_zero_copy() {
        let bytes = encode(&sample(MAX_VERSION), MAX_VERSION);
        let decoded = decode(&bytes, MAX_VERSION).unwrap();
        let records = decoded.responses[0].partitions[0].records.as_ref().unwrap();
        let frame = bytes.as_ptr() as usize..bytes.as_ptr() as usize + bytes.len();
        assert!(frame.contains(&(records.as_ptr() as usize)), "records were copied");
    }

    #[test]
    fn known_tag_absent_in_version_is_kept_as_unknown() {
        // Tag 0 at the top level means node_endpoints only from v16.
        let mut v = FetchResponse::default();
        v.unknown_tagged_fields.insert(0, Bytes::from_static(b"\x01"));
        let mut b = BytesMut::new();
        b.put_i32(0); // throttle
        b.put_i16(0); // error
        b.put_i32(0); // session
        b.put_u8(1); // responses: empty compact array
        b.put_u8(1); // one tagged field
        b.put_u8(0); // tag 0
        b.put_u8(1); // size 1
        b.put_u8(1);
        assert_eq!(decode(&b.freeze(), 12).unwrap(), v);
    }

    fn assert_out_of_bounds(frame: BytesMut, version: i16) {
        let err = decode(&frame.freeze(), version).unwrap_err();
        assert!(matches!(err, Error::LengthOutOfBounds { .. }), "v{version}: {err}");
    }

    const COMPACT_HUGE: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

    #[test]
    fn huge_top_level_arrays_are_refused() {
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX); // responses
        assert_out_of_bounds(b, 4);

        for version in [12, 16, 18] {
            let mut b = BytesMut::new();
            b.put_i32(0);
            b.put_i16(0);
            b.put_i32(0);
            b.put_slice(&COMPACT_HUGE); // responses
            assert_out_of_bounds(b, version);

            let mut b = BytesMut::new();
            b.put_i32(0);
            b.put_i16(0);
            b.put_i32(0);
            b.put_u8(1); // no responses
            b.put_slice(&COMPACT_HUGE); // tagged-field count
            assert_out_of_bounds(b, version);
        }

        // node_endpoints (tag 0, v16+) claiming u32::MAX - 1 entries.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_i32(0);
        b.put_u8(1);
        b.put_u8(1); // one tag
        b.put_u8(0); // tag 0
        b.put_u8(5); // size
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 16);
    }

    /// A v7 (classic) frame up to the start of the first partition's
    /// aborted_transactions, or v12 (compact) when `flexible`.
    fn partition_prefix(flexible: bool) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_i32(0);
        if flexible {
            b.put_u8(2); // one topic
            b.put_u8(2); // name "t"
            b.put_u8(b't');
            b.put_u8(2); // one partition
        } else {
            b.put_i32(1);
            b.put_i16(1);
            b.put_u8(b't');
            b.put_i32(1);
        }
        b.put_i32(0); // partition_index
        b.put_i16(0); // error_code
        b.put_i64(10); // high_watermark
        b.put_i64(10); // last_stable_offset
        b.put_i64(0); // log_start_offset
        b
    }

    #[test]
    fn huge_nested_lengths_are_refused() {
        // Topic name claiming i16::MAX bytes.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(i16::MAX);
        b.put_slice(b"abc");
        assert_out_of_bounds(b, 4);

        // partitions claiming i32::MAX.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 4);

        // aborted_transactions claiming i32::MAX / u32::MAX - 1.
        let mut b = partition_prefix(false);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 7);
        let mut b = partition_prefix(true);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 12);

        // records claiming i32::MAX / u32::MAX - 1 bytes.
        let mut b = partition_prefix(false);
        b.put_i32(-1); // aborted_transactions: null
        b.put_i32(i32::MAX);
        b.put_slice(b"tiny");
        assert_out_of_bounds(b, 7);
        let mut b = partition_prefix(true);
        b.put_u8(0); // aborted_transactions: null
        b.put_i32(-1); // preferred_read_replica
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 12);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [4, 11, 12, 18] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 0, 3, 19, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "Fetch",
                        min: 4,
                        max: 18,
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
            version in prop::sample::select(vec![4i16, 7, 11, 12, 13, 16, 18]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in prop::sample::select(vec![4i16, 12, 18]),
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
