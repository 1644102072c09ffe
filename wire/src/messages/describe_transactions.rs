//! DescribeTransactions response (API key 65), v0 (KIP-664). Always flexible.

use kafka_protocol::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TopicData, TransactionState,
};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 0;

impl DecodeResponse for DescribeTransactionsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "DescribeTransactions",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let mut out = DescribeTransactionsResponse::default();
        out.throttle_time_ms = r.i32("DescribeTransactionsResponse.throttle_time_ms")?;
        out.transaction_states = r.array(
            true,
            "DescribeTransactionsResponse.transaction_states",
            transaction_state,
        )?;
        out.unknown_tagged_fields =
            r.tagged_fields("DescribeTransactionsResponse.tagged_fields", |_, _, _| Ok(false))?;
        Ok(out)
    }
}

fn transaction_state(r: &mut Reader<'_>) -> Result<TransactionState> {
    let mut t = TransactionState::default();
    t.error_code = r.i16("DescribeTransactionsResponse.transaction_states.error_code")?;
    t.transactional_id = r
        .string(true, "DescribeTransactionsResponse.transaction_states.transactional_id")?
        .into();
    t.transaction_state = r.string(
        true,
        "DescribeTransactionsResponse.transaction_states.transaction_state",
    )?;
    t.transaction_timeout_ms = r.i32("DescribeTransactionsResponse.transaction_states.transaction_timeout_ms")?;
    t.transaction_start_time_ms = r.i64("DescribeTransactionsResponse.transaction_states.transaction_start_time_ms")?;
    t.producer_id = r
        .i64("DescribeTransactionsResponse.transaction_states.producer_id")?
        .into();
    t.producer_epoch = r.i16("DescribeTransactionsResponse.transaction_states.producer_epoch")?;
    t.topics = r.array(
        true,
        "DescribeTransactionsResponse.transaction_states.topics",
        topic_data,
    )?;
    t.unknown_tagged_fields = r.tagged_fields(
        "DescribeTransactionsResponse.transaction_states.tagged_fields",
        |_, _, _| Ok(false),
    )?;
    Ok(t)
}

fn topic_data(r: &mut Reader<'_>) -> Result<TopicData> {
    let mut t = TopicData::default();
    t.topic = r.string(true, "DescribeTransactionsResponse.topics.topic")?.into();
    t.partitions = r.array(true, "DescribeTransactionsResponse.topics.partitions", |r| {
        r.i32("DescribeTransactionsResponse.topics.partitions")
    })?;
    t.unknown_tagged_fields =
        r.tagged_fields("DescribeTransactionsResponse.topics.tagged_fields", |_, _, _| Ok(false))?;
    Ok(t)
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

    fn sample(_version: i16) -> DescribeTransactionsResponse {
        let mut v = DescribeTransactionsResponse::default();
        v.throttle_time_ms = 5;
        let mut a = TransactionState::default();
        a.transactional_id = s("txn-a").into();
        a.transaction_state = s("Ongoing");
        a.transaction_timeout_ms = 60_000;
        a.transaction_start_time_ms = 1_700_000_000_123;
        a.producer_id = 77.into();
        a.producer_epoch = 3;
        let mut t1 = TopicData::default();
        t1.topic = s("orders").into();
        t1.partitions = vec![0, 5, 2_000_000];
        t1.unknown_tagged_fields.insert(2, Bytes::from_static(b"\x05"));
        let mut t2 = TopicData::default();
        t2.topic = s("empty").into();
        a.topics = vec![t1, t2];
        a.unknown_tagged_fields.insert(8, Bytes::from_static(b"ab"));
        let mut b = TransactionState::default();
        b.error_code = 105;
        b.transactional_id = s("missing").into();
        b.producer_id = (-1).into();
        b.producer_epoch = -1;
        b.transaction_start_time_ms = -1;
        v.transaction_states = vec![a, b];
        v.unknown_tagged_fields.insert(1, Bytes::from_static(b"\xfe\xff"));
        v
    }

    fn encode(v: &DescribeTransactionsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<DescribeTransactionsResponse> {
        let mut r = Reader::new(frame);
        let v = DescribeTransactionsResponse::decode_response(&mut r, version)?;
        r.finish("DescribeTransactionsResponse")?;
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
            assert_ne!(value, DescribeTransactionsResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = DescribeTransactionsResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // transaction_states claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // One state whose transactional_id claims u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // One state "t"/"s" whose topics claim u32::MAX - 1 elements.
        let mut frame = vec![0, 0, 0, 0, 2, 0, 0, 2, b't', 2, b's'];
        frame.extend_from_slice(&[0; 4 + 8 + 8 + 2]);
        frame.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
        assert_out_of_bounds(&frame, 0);
        // ...and one topic "x" whose partitions claim u32::MAX - 1 elements.
        frame.truncate(frame.len() - 6);
        frame.extend_from_slice(&[2, 2, b'x', 0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
        assert_out_of_bounds(&frame, 0);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    DescribeTransactionsResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <DescribeTransactionsResponse as Message>::VERSIONS;
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
                        ("DescribeTransactions", version, MIN_VERSION, MAX_VERSION)
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
