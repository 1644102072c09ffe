//! TxnOffsetCommit response (API key 28), v0–v5. Flexible from v3.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponse, TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 5;

impl DecodeResponse for TxnOffsetCommitResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "TxnOffsetCommit",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 3;
        let mut out = TxnOffsetCommitResponse::default();
        out.throttle_time_ms = r.i32("TxnOffsetCommitResponse.throttle_time_ms")?;
        out.topics = r.array(flexible, "TxnOffsetCommitResponse.topics", |r| topic(r, flexible))?;
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("TxnOffsetCommitResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn topic(r: &mut Reader<'_>, flexible: bool) -> Result<TxnOffsetCommitResponseTopic> {
    let mut t = TxnOffsetCommitResponseTopic::default();
    t.name = r.string(flexible, "TxnOffsetCommitResponse.topics.name")?.into();
    t.partitions = r.array(flexible, "TxnOffsetCommitResponse.topics.partitions", |r| {
        partition(r, flexible)
    })?;
    if flexible {
        t.unknown_tagged_fields =
            r.tagged_fields("TxnOffsetCommitResponse.topics.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(t)
}

fn partition(r: &mut Reader<'_>, flexible: bool) -> Result<TxnOffsetCommitResponsePartition> {
    let mut p = TxnOffsetCommitResponsePartition::default();
    p.partition_index = r.i32("TxnOffsetCommitResponse.partitions.partition_index")?;
    p.error_code = r.i16("TxnOffsetCommitResponse.partitions.error_code")?;
    if flexible {
        p.unknown_tagged_fields =
            r.tagged_fields("TxnOffsetCommitResponse.partitions.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
    use proptest::prelude::*;

    fn sample(version: i16) -> TxnOffsetCommitResponse {
        let flexible = version >= 3;
        let mut v = TxnOffsetCommitResponse::default();
        v.throttle_time_ms = 77;
        v.topics = ["clicks", "views", "idle"]
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let mut t = TxnOffsetCommitResponseTopic::default();
                t.name = StrBytes::from_static_str(name).into();
                t.partitions = (0..(2 - i as i32))
                    .map(|p| {
                        let mut pr = TxnOffsetCommitResponsePartition::default();
                        pr.partition_index = p * 3 + i as i32;
                        pr.error_code = if p == 0 { 0 } else { 22 };
                        if flexible && p == 1 {
                            pr.unknown_tagged_fields.insert(5, Bytes::from_static(b"\x03"));
                        }
                        pr
                    })
                    .collect();
                if flexible && i == 1 {
                    t.unknown_tagged_fields.insert(3, Bytes::from_static(b"tp"));
                }
                t
            })
            .collect();
        if flexible {
            v.unknown_tagged_fields.insert(21, Bytes::from_static(b"\x00\x01"));
        }
        v
    }

    fn encode(v: &TxnOffsetCommitResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<TxnOffsetCommitResponse> {
        let mut r = Reader::new(frame);
        let v = TxnOffsetCommitResponse::decode_response(&mut r, version)?;
        r.finish("TxnOffsetCommitResponse")?;
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
            assert_ne!(value, TxnOffsetCommitResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = TxnOffsetCommitResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v0: topics claiming i32::MAX elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0], 0);
        // v1: one topic whose name claims i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, b'x'], 1);
        // v2: one topic "t" whose partitions claim i32::MAX elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 1, b't', 0x7f, 0xff, 0xff, 0xff, 0], 2);
        // v3: compact topics claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 3);
        // v5: one topic "t" whose partitions claim u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 2, b't', 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 5);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 2, 3, 5] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    TxnOffsetCommitResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <TxnOffsetCommitResponse as Message>::VERSIONS;
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
                        ("TxnOffsetCommit", version, MIN_VERSION, MAX_VERSION)
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
