//! OffsetForLeaderEpoch response (API key 23), v2..=v4; flexible from v4.
//!
//! The consumer's position check after a leader change ([KIP-320]): for
//! the epoch of its position, the leader's end offset of that epoch.
//! Kafka 4.0 removed v0 and v1 ([KIP-896]).
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/OffsetForLeaderEpochResponse.json>.
//!
//! [KIP-320]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-320%3A+Allow+fetchers+to+detect+and+handle+log+truncation
//! [KIP-896]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-896%3A+Remove+old+client+protocol+API+versions+in+Kafka+4.0

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderEpochResponse, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::TopicName;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest OffsetForLeaderEpoch response version this decoder reads.
pub const MIN_VERSION: i16 = 2;
/// Newest OffsetForLeaderEpoch response version this decoder reads.
pub const MAX_VERSION: i16 = 4;

impl DecodeResponse for OffsetForLeaderEpochResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "OffsetForLeaderEpoch",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 4;
        let mut out = OffsetForLeaderEpochResponse::default();
        out.throttle_time_ms = r.i32("OffsetForLeaderEpochResponse.throttle_time_ms")?;
        out.topics = r.array(flexible, "OffsetForLeaderEpochResponse.topics", |r| topic(r, flexible))?;
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("OffsetForLeaderEpochResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>, flexible: bool) -> Result<OffsetForLeaderTopicResult> {
    let mut out = OffsetForLeaderTopicResult::default();
    out.topic = TopicName(r.string(flexible, "OffsetForLeaderTopicResult.topic")?);
    out.partitions = r.array(flexible, "OffsetForLeaderTopicResult.partitions", |r| {
        partition(r, flexible)
    })?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("OffsetForLeaderTopicResult.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

fn partition(r: &mut Reader<'_>, flexible: bool) -> Result<EpochEndOffset> {
    let mut out = EpochEndOffset::default();
    out.error_code = r.i16("EpochEndOffset.error_code")?;
    out.partition = r.i32("EpochEndOffset.partition")?;
    out.leader_epoch = r.i32("EpochEndOffset.leader_epoch")?;
    out.end_offset = r.i64("EpochEndOffset.end_offset")?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("EpochEndOffset.tagged_fields", |_, _, _| Ok(false))?;
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

    fn encode(v: &OffsetForLeaderEpochResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<OffsetForLeaderEpochResponse> {
        let mut r = Reader::new(b);
        let v = OffsetForLeaderEpochResponse::decode_response(&mut r, version)?;
        r.finish("OffsetForLeaderEpochResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x10"));
        }
        m
    }

    fn sample(version: i16) -> OffsetForLeaderEpochResponse {
        let flexible = version >= 4;
        let mut v = OffsetForLeaderEpochResponse::default();
        v.throttle_time_ms = 5;
        v.topics = ["clicks", "views"]
            .into_iter()
            .map(|name| {
                let mut t = OffsetForLeaderTopicResult::default();
                t.topic = TopicName(StrBytes::from_static_str(name));
                t.partitions = (0..3)
                    .map(|p| {
                        let mut e = EpochEndOffset::default();
                        e.partition = p;
                        e.error_code = if p == 2 { 74 } else { 0 };
                        e.leader_epoch = 7 + p;
                        e.end_offset = 1_000 + i64::from(p);
                        e.unknown_tagged_fields = tags(flexible, 2);
                        e
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
        assert_eq!(<OffsetForLeaderEpochResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<OffsetForLeaderEpochResponse as Message>::VERSIONS.max, MAX_VERSION);
    }

    #[test]
    fn round_trip_every_version() {
        for version in MIN_VERSION..=MAX_VERSION {
            let value = sample(version);
            let decoded = decode(&encode(&value, version), version).unwrap_or_else(|e| panic!("v{version}: {e}"));
            assert_eq!(decoded, value, "v{version}");
        }
    }

    const COMPACT_HUGE: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

    #[test]
    fn huge_lengths_are_refused() {
        let out_of_bounds = |b: BytesMut, version: i16| {
            let err = decode(&b.freeze(), version).unwrap_err();
            assert!(matches!(err, Error::LengthOutOfBounds { .. }), "v{version}: {err}");
        };
        // topics
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        out_of_bounds(b, 2);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&COMPACT_HUGE);
        out_of_bounds(b, 4);
        // topic name
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(i16::MAX);
        out_of_bounds(b, 3);
        // partitions
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(1);
        b.put_u8(b't');
        b.put_i32(i32::MAX);
        out_of_bounds(b, 2);
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_u8(2);
        b.put_u8(2);
        b.put_u8(b't');
        b.put_slice(&COMPACT_HUGE);
        out_of_bounds(b, 4);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in MIN_VERSION..=MAX_VERSION {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 0, 1, 5, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "OffsetForLeaderEpoch",
                        min: 2,
                        max: 4,
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
            version in prop::sample::select(vec![2i16, 3, 4]),
        ) {
            let _ = decode(&Bytes::from(data), version);
        }
    }
}
