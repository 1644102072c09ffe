//! ListOffsets response (API key 2), v1..=v10; flexible from v6.
//!
//! No known tagged fields. `leader_epoch` is on the wire from v4 and is -1
//! before that.
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/ListOffsetsResponse.json>.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::TopicName;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest ListOffsets response version this decoder reads.
pub const MIN_VERSION: i16 = 1;
/// Newest ListOffsets response version this decoder reads.
pub const MAX_VERSION: i16 = 10;

impl DecodeResponse for ListOffsetsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "ListOffsets",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 6;
        let mut out = ListOffsetsResponse::default();
        if version >= 2 {
            out.throttle_time_ms = r.i32("ListOffsetsResponse.throttle_time_ms")?;
        }
        out.topics = r.array(flexible, "ListOffsetsResponse.topics", |r| topic(r, version))?;
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("ListOffsetsResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>, version: i16) -> Result<ListOffsetsTopicResponse> {
    let flexible = version >= 6;
    let mut out = ListOffsetsTopicResponse::default();
    out.name = TopicName(r.string(flexible, "ListOffsetsTopicResponse.name")?);
    out.partitions = r.array(flexible, "ListOffsetsTopicResponse.partitions", |r| {
        partition(r, version)
    })?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("ListOffsetsTopicResponse.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn partition(r: &mut Reader<'_>, version: i16) -> Result<ListOffsetsPartitionResponse> {
    let flexible = version >= 6;
    let mut out = ListOffsetsPartitionResponse::default();
    out.partition_index = r.i32("ListOffsetsPartitionResponse.partition_index")?;
    out.error_code = r.i16("ListOffsetsPartitionResponse.error_code")?;
    out.timestamp = r.i64("ListOffsetsPartitionResponse.timestamp")?;
    out.offset = r.i64("ListOffsetsPartitionResponse.offset")?;
    if version >= 4 {
        out.leader_epoch = r.i32("ListOffsetsPartitionResponse.leader_epoch")?;
    }
    if flexible {
        out.unknown_tagged_fields =
            r.tagged_fields("ListOffsetsPartitionResponse.tagged_fields", |_, _, _| Ok(false))?;
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

    fn encode(v: &ListOffsetsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<ListOffsetsResponse> {
        let mut r = Reader::new(b);
        let v = ListOffsetsResponse::decode_response(&mut r, version)?;
        r.finish("ListOffsetsResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x10"));
        }
        m
    }

    fn sample(version: i16) -> ListOffsetsResponse {
        let flexible = version >= 6;
        let mut v = ListOffsetsResponse::default();
        if version >= 2 {
            v.throttle_time_ms = 5;
        }
        v.topics = ["clicks", "views"]
            .into_iter()
            .map(|name| {
                let mut t = ListOffsetsTopicResponse::default();
                t.name = TopicName(StrBytes::from_static_str(name));
                t.partitions = (0..3)
                    .map(|p| {
                        let mut part = ListOffsetsPartitionResponse::default();
                        part.partition_index = p;
                        part.error_code = if p == 2 { 3 } else { 0 };
                        part.timestamp = 1_650_000_000_000 + i64::from(p);
                        part.offset = 77_000 + i64::from(p);
                        if version >= 4 {
                            part.leader_epoch = 12;
                        }
                        part.unknown_tagged_fields = tags(flexible, 2);
                        part
                    })
                    .collect();
                t.unknown_tagged_fields = tags(flexible, 5);
                t
            })
            .collect();
        v.unknown_tagged_fields = tags(flexible, 7);
        v
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<ListOffsetsResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<ListOffsetsResponse as Message>::VERSIONS.max, MAX_VERSION);
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
        assert_out_of_bounds(b, 1);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        assert_out_of_bounds(b, 5);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 6);
        // tagged-field count
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(1);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 10);
        // topic name
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(i16::MAX);
        assert_out_of_bounds(b, 2);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(2);
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 6);
        // partitions
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
        b.put_u8(2);
        b.put_u8(b't');
        b.put_slice(&COMPACT_HUGE);
        assert_out_of_bounds(b, 6);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [1, 4, 6, 10] {
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
                        api: "ListOffsets",
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
            version in prop::sample::select(vec![1i16, 2, 4, 6, 10]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in prop::sample::select(vec![1i16, 4, 6, 10]),
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
