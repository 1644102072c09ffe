//! AddPartitionsToTxn response (API key 24), v0–v5.
//!
//! v0–v3 return per-topic results for the one transaction the client sent;
//! v4+ (KIP-890, broker-to-coordinator batching) group them by transactional
//! id. Flexible from v3.

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResponse, AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 5;

impl DecodeResponse for AddPartitionsToTxnResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "AddPartitionsToTxn",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 3;
        let mut out = AddPartitionsToTxnResponse::default();
        out.throttle_time_ms = r.i32("AddPartitionsToTxnResponse.throttle_time_ms")?;
        if version >= 4 {
            out.error_code = r.i16("AddPartitionsToTxnResponse.error_code")?;
            out.results_by_transaction = r.array(
                true,
                "AddPartitionsToTxnResponse.results_by_transaction",
                transaction_result,
            )?;
        } else {
            out.results_by_topic_v3_and_below = r.array(
                flexible,
                "AddPartitionsToTxnResponse.results_by_topic_v3_and_below",
                |r| topic_result(r, flexible),
            )?;
        }
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("AddPartitionsToTxnResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

/// One entry of `results_by_transaction` (v4+, always flexible).
fn transaction_result(r: &mut Reader<'_>) -> Result<AddPartitionsToTxnResult> {
    let mut t = AddPartitionsToTxnResult::default();
    t.transactional_id = r
        .string(
            true,
            "AddPartitionsToTxnResponse.results_by_transaction.transactional_id",
        )?
        .into();
    t.topic_results = r.array(
        true,
        "AddPartitionsToTxnResponse.results_by_transaction.topic_results",
        |r| topic_result(r, true),
    )?;
    t.unknown_tagged_fields = r.tagged_fields(
        "AddPartitionsToTxnResponse.results_by_transaction.tagged_fields",
        |_, _, _| Ok(false),
    )?;
    Ok(t)
}

fn topic_result(r: &mut Reader<'_>, flexible: bool) -> Result<AddPartitionsToTxnTopicResult> {
    let mut t = AddPartitionsToTxnTopicResult::default();
    t.name = r
        .string(flexible, "AddPartitionsToTxnResponse.topic_results.name")?
        .into();
    t.results_by_partition = r.array(
        flexible,
        "AddPartitionsToTxnResponse.topic_results.results_by_partition",
        |r| partition_result(r, flexible),
    )?;
    if flexible {
        t.unknown_tagged_fields = r
            .tagged_fields("AddPartitionsToTxnResponse.topic_results.tagged_fields", |_, _, _| {
                Ok(false)
            })?;
    }
    Ok(t)
}

fn partition_result(r: &mut Reader<'_>, flexible: bool) -> Result<AddPartitionsToTxnPartitionResult> {
    let mut p = AddPartitionsToTxnPartitionResult::default();
    p.partition_index = r.i32("AddPartitionsToTxnResponse.results_by_partition.partition_index")?;
    p.partition_error_code = r.i16("AddPartitionsToTxnResponse.results_by_partition.partition_error_code")?;
    if flexible {
        p.unknown_tagged_fields = r.tagged_fields(
            "AddPartitionsToTxnResponse.results_by_partition.tagged_fields",
            |_, _, _| Ok(false),
        )?;
    }
    Ok(p)
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

    fn topics(flexible: bool, salt: i32) -> Vec<AddPartitionsToTxnTopicResult> {
        ["orders", "payments"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut t = AddPartitionsToTxnTopicResult::default();
                t.name = s(name).into();
                t.results_by_partition = (0..3)
                    .map(|p| {
                        let mut pr = AddPartitionsToTxnPartitionResult::default();
                        pr.partition_index = p + salt;
                        pr.partition_error_code = if p == 1 { 53 } else { 0 };
                        if flexible && p == 2 {
                            pr.unknown_tagged_fields.insert(4, Bytes::from_static(b"\x01"));
                        }
                        pr
                    })
                    .collect();
                if flexible && i == 0 {
                    t.unknown_tagged_fields.insert(9, Bytes::from_static(b"tt"));
                }
                t
            })
            .collect()
    }

    fn sample(version: i16) -> AddPartitionsToTxnResponse {
        let flexible = version >= 3;
        let mut v = AddPartitionsToTxnResponse::default();
        v.throttle_time_ms = 321;
        if version >= 4 {
            v.error_code = 49;
            let mut a = AddPartitionsToTxnResult::default();
            a.transactional_id = s("txn-a").into();
            a.topic_results = topics(true, 0);
            a.unknown_tagged_fields.insert(1, Bytes::from_static(b"\x00\x00"));
            let mut b = AddPartitionsToTxnResult::default();
            b.transactional_id = s("txn-b").into();
            b.topic_results = topics(true, 10);
            let mut c = AddPartitionsToTxnResult::default();
            c.transactional_id = s("txn-empty").into();
            v.results_by_transaction = vec![a, b, c];
        } else {
            v.results_by_topic_v3_and_below = topics(flexible, 100);
        }
        if flexible {
            v.unknown_tagged_fields.insert(77, Bytes::from_static(b"top"));
        }
        v
    }

    fn encode(v: &AddPartitionsToTxnResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<AddPartitionsToTxnResponse> {
        let mut r = Reader::new(frame);
        let v = AddPartitionsToTxnResponse::decode_response(&mut r, version)?;
        r.finish("AddPartitionsToTxnResponse")?;
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
            assert_ne!(value, AddPartitionsToTxnResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = AddPartitionsToTxnResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v0-v2: results_by_topic claiming i32::MAX elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0], 0);
        // v2: one topic whose name claims i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, b'x'], 2);
        // v2: one topic "t" with results_by_partition claiming i32::MAX elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 1, b't', 0x7f, 0xff, 0xff, 0xff, 0], 2);
        // v3: compact results_by_topic claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 3);
        // v4: results_by_transaction claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 4);
        // v5: one transaction whose transactional_id claims u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 5);
        // v5: one transaction "t" whose topic_results claim u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 2, 2, b't', 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 5);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 2, 3, 4, 5] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    AddPartitionsToTxnResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <AddPartitionsToTxnResponse as Message>::VERSIONS;
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
                        ("AddPartitionsToTxn", version, MIN_VERSION, MAX_VERSION)
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
