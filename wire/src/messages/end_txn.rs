//! EndTxn response (API key 26), v0–v5.
//!
//! v5 (KIP-890, transactions v2) returns the producer id and epoch the
//! coordinator bumped to. Flexible from v3.

use kafka_protocol::messages::end_txn_response::EndTxnResponse;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 5;

impl DecodeResponse for EndTxnResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "EndTxn",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 3;
        let mut out = EndTxnResponse::default();
        out.throttle_time_ms = r.i32("EndTxnResponse.throttle_time_ms")?;
        out.error_code = r.i16("EndTxnResponse.error_code")?;
        if version >= 5 {
            out.producer_id = r.i64("EndTxnResponse.producer_id")?.into();
            out.producer_epoch = r.i16("EndTxnResponse.producer_epoch")?;
        }
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("EndTxnResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, Message};
    use proptest::prelude::*;

    fn sample(version: i16) -> EndTxnResponse {
        let mut v = EndTxnResponse::default();
        v.throttle_time_ms = 99;
        v.error_code = 48;
        if version >= 5 {
            v.producer_id = 9_000_000_001.into();
            v.producer_epoch = 12;
        }
        if version >= 3 {
            v.unknown_tagged_fields.insert(0, Bytes::from_static(b"\x7f"));
            v.unknown_tagged_fields.insert(130, Bytes::from_static(b"xyz"));
        }
        v
    }

    fn encode(v: &EndTxnResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<EndTxnResponse> {
        let mut r = Reader::new(frame);
        let v = EndTxnResponse::decode_response(&mut r, version)?;
        r.finish("EndTxnResponse")?;
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
            assert_ne!(value, EndTxnResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = EndTxnResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // The body has no arrays or strings; its only lengths are in the tagged-field section.
        let fixed = [0u8; 4 + 2];
        assert_out_of_bounds(&[&fixed[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), 3);
        assert_out_of_bounds(&[&fixed[..], &[1, 9, 0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), 4);
        let fixed5 = [0u8; 4 + 2 + 8 + 2];
        assert_out_of_bounds(&[&fixed5[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), 5);
        assert_out_of_bounds(&[&fixed5[..], &[2, 1, 0, 2, 0x7f]].concat(), 5);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 2, 3, 5] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    EndTxnResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <EndTxnResponse as Message>::VERSIONS;
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
                    assert_eq!((api, v, min, max), ("EndTxn", version, MIN_VERSION, MAX_VERSION));
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
