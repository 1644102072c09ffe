//! DescribeProducers response (API key 61), v0 (KIP-664). Always flexible.

use kafka_protocol::messages::describe_producers_response::{
    DescribeProducersResponse, PartitionResponse, ProducerState, TopicResponse,
};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 0;

impl DecodeResponse for DescribeProducersResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "DescribeProducers",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let mut out = DescribeProducersResponse::default();
        out.throttle_time_ms = r.i32("DescribeProducersResponse.throttle_time_ms")?;
        out.topics = r.array(true, "DescribeProducersResponse.topics", topic)?;
        out.unknown_tagged_fields = r.tagged_fields("DescribeProducersResponse.tagged_fields", |_, _, _| Ok(false))?;
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>) -> Result<TopicResponse> {
    let mut t = TopicResponse::default();
    t.name = r.string(true, "DescribeProducersResponse.topics.name")?.into();
    t.partitions = r.array(true, "DescribeProducersResponse.topics.partitions", partition)?;
    t.unknown_tagged_fields = r.tagged_fields("DescribeProducersResponse.topics.tagged_fields", |_, _, _| Ok(false))?;
    Ok(t)
}

fn partition(r: &mut Reader<'_>) -> Result<PartitionResponse> {
    let mut p = PartitionResponse::default();
    p.partition_index = r.i32("DescribeProducersResponse.partitions.partition_index")?;
    p.error_code = r.i16("DescribeProducersResponse.partitions.error_code")?;
    p.error_message = r.nullable_string(true, "DescribeProducersResponse.partitions.error_message")?;
    p.active_producers = r.array(
        true,
        "DescribeProducersResponse.partitions.active_producers",
        producer_state,
    )?;
    p.unknown_tagged_fields = r.tagged_fields("DescribeProducersResponse.partitions.tagged_fields", |_, _, _| {
        Ok(false)
    })?;
    Ok(p)
}

fn producer_state(r: &mut Reader<'_>) -> Result<ProducerState> {
    let mut s = ProducerState::default();
    s.producer_id = r.i64("DescribeProducersResponse.active_producers.producer_id")?.into();
    s.producer_epoch = r.i32("DescribeProducersResponse.active_producers.producer_epoch")?;
    s.last_sequence = r.i32("DescribeProducersResponse.active_producers.last_sequence")?;
    s.last_timestamp = r.i64("DescribeProducersResponse.active_producers.last_timestamp")?;
    s.coordinator_epoch = r.i32("DescribeProducersResponse.active_producers.coordinator_epoch")?;
    s.current_txn_start_offset = r.i64("DescribeProducersResponse.active_producers.current_txn_start_offset")?;
    s.unknown_tagged_fields = r
        .tagged_fields("DescribeProducersResponse.active_producers.tagged_fields", |_, _, _| {
            Ok(false)
        })?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
    use proptest::prelude::*;

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn producer(id: i64, salt: i32) -> ProducerState {
        let mut p = ProducerState::default();
        p.producer_id = id.into();
        p.producer_epoch = 5 + salt;
        p.last_sequence = 1000 + salt;
        p.last_timestamp = 1_700_000_000_000 + i64::from(salt);
        p.coordinator_epoch = 2;
        p.current_txn_start_offset = if salt == 0 { -1 } else { 12_345 };
        p
    }

    fn sample(_version: i16) -> DescribeProducersResponse {
        let mut v = DescribeProducersResponse::default();
        v.throttle_time_ms = 3;
        let mut p0 = PartitionResponse::default();
        p0.partition_index = 0;
        p0.error_message = None;
        let mut tagged = producer(7, 1);
        tagged
            .unknown_tagged_fields
            .insert(2, Bytes::from_static(b"\x01\x02\x03\x04"));
        p0.active_producers = vec![producer(6, 0), tagged];
        let mut p1 = PartitionResponse::default();
        p1.partition_index = 4;
        p1.error_code = 6;
        p1.error_message = Some(s("Not leader for partition"));
        p1.unknown_tagged_fields.insert(3, Bytes::from_static(b"p"));
        let mut t = TopicResponse::default();
        t.name = s("events").into();
        t.partitions = vec![p0, p1];
        t.unknown_tagged_fields.insert(1, Bytes::new());
        let mut empty = TopicResponse::default();
        empty.name = s("quiet").into();
        v.topics = vec![t, empty];
        v.unknown_tagged_fields.insert(40, Bytes::from_static(b"\xff"));
        v
    }

    fn encode(v: &DescribeProducersResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<DescribeProducersResponse> {
        let mut r = Reader::new(frame);
        let v = DescribeProducersResponse::decode_response(&mut r, version)?;
        r.finish("DescribeProducersResponse")?;
        Ok(v)
    }

    fn assert_out_of_bounds(frame: &[u8], version: i16) {
        let err = decode(&Bytes::copy_from_slice(frame), version).unwrap_err();
        assert!(matches!(err, Error::LengthOutOfBounds { .. }), "v{version}: {err}");
    }

    #[test]
    fn round_trip_every_version() {
        for version in MIN_VERSION..=MAX_VERSION {
            let value = sample(version);
            assert_ne!(value, DescribeProducersResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = DescribeProducersResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // topics claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // One topic whose name claims u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // One topic "t" whose partitions claim u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 2, b't', 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // One partition whose error_message claims u32::MAX - 1 bytes.
        assert_out_of_bounds(
            &[
                0, 0, 0, 0, 2, 2, b't', 2, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0,
            ],
            0,
        );
        // One partition (null message) whose active_producers claim u32::MAX - 1 elements.
        assert_out_of_bounds(
            &[
                0, 0, 0, 0, 2, 2, b't', 2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0,
            ],
            0,
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    DescribeProducersResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <DescribeProducersResponse as Message>::VERSIONS;
        assert_eq!((MIN_VERSION, MAX_VERSION), (theirs.min, theirs.max));
    }

    #[test]
    fn unsupported_versions() {
        let frame = encode(&sample(MAX_VERSION), MAX_VERSION);
        for version in [MIN_VERSION - 1, MAX_VERSION + 1, i16::MAX] {
            match decode(&frame, version) {
                Err(Error::UnsupportedVersion {
                    api,
                    version: v,
                    min,
                    max,
                }) => {
                    assert_eq!(
                        (api, v, min, max),
                        ("DescribeProducers", version, MIN_VERSION, MAX_VERSION)
                    );
                }
                other => panic!("v{version}: {other:?}"),
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..256),
            version in MIN_VERSION..=MAX_VERSION,
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in MIN_VERSION..=MAX_VERSION,
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let mut frame = encode(&sample(version), version).to_vec();
            let i = at.index(frame.len());
            frame[i] = byte;
            let _ = decode(&Bytes::from(frame), version);
        }
    }
}
