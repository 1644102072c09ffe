//! AddOffsetsToTxn response (API key 25), v0–v4. Flexible from v3.

use kafka_protocol::messages::add_offsets_to_txn_response::AddOffsetsToTxnResponse;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 4;

impl DecodeResponse for AddOffsetsToTxnResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "AddOffsetsToTxn",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 3;
        let mut out = AddOffsetsToTxnResponse::default();
        out.throttle_time_ms = r.i32("AddOffsetsToTxnResponse.throttle_time_ms")?;
        out.error_code = r.i16("AddOffsetsToTxnResponse.error_code")?;
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("AddOffsetsToTxnResponse.tagged_fields", |_, _, _| Ok(false))?;
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

    fn sample(version: i16) -> AddOffsetsToTxnResponse {
        let mut v = AddOffsetsToTxnResponse::default();
        v.throttle_time_ms = 1 << 20;
        v.error_code = 51;
        if version >= 3 {
            v.unknown_tagged_fields.insert(2, Bytes::from_static(b"\x00"));
            v.unknown_tagged_fields.insert(1000, Bytes::from_static(b"large tag"));
        }
        v
    }

    fn encode(v: &AddOffsetsToTxnResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<AddOffsetsToTxnResponse> {
        let mut r = Reader::new(frame);
        let v = AddOffsetsToTxnResponse::decode_response(&mut r, version)?;
        r.finish("AddOffsetsToTxnResponse")?;
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
            assert_ne!(value, AddOffsetsToTxnResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = AddOffsetsToTxnResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // The body has no arrays or strings; its only lengths are in the tagged-field section.
        for version in 3..=MAX_VERSION {
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f], version);
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 1, 3, 0xff, 0xff, 0xff, 0xff, 0x0f], version);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 2, 3, 4] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    AddOffsetsToTxnResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <AddOffsetsToTxnResponse as Message>::VERSIONS;
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
                        ("AddOffsetsToTxn", version, MIN_VERSION, MAX_VERSION)
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
