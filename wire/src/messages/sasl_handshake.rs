//! SaslHandshake response (API key 17), v0–v1. Never flexible.

use kafka_protocol::messages::sasl_handshake_response::SaslHandshakeResponse;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 1;

impl DecodeResponse for SaslHandshakeResponse {
    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "SaslHandshake",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let mut out = SaslHandshakeResponse::default();
        out.error_code = r.i16("SaslHandshakeResponse.error_code")?;
        out.mechanisms = r.array(false, "SaslHandshakeResponse.mechanisms", |r| {
            r.string(false, "SaslHandshakeResponse.mechanisms")
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
    use proptest::prelude::*;

    fn sample(version: i16) -> SaslHandshakeResponse {
        let mut v = SaslHandshakeResponse::default();
        v.error_code = if version == 0 { 33 } else { 0 };
        v.mechanisms = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", ""]
            .into_iter()
            .map(StrBytes::from_static_str)
            .collect();
        v
    }

    fn encode(v: &SaslHandshakeResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<SaslHandshakeResponse> {
        let mut r = Reader::new(frame);
        let v = SaslHandshakeResponse::decode_response(&mut r, version)?;
        r.finish("SaslHandshakeResponse")?;
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
            assert_ne!(value, SaslHandshakeResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = SaslHandshakeResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        for version in MIN_VERSION..=MAX_VERSION {
            // mechanisms claiming i32::MAX elements.
            assert_out_of_bounds(&[0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 1, b'x'], version);
            // One mechanism claiming i16::MAX bytes.
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 1, 0x7f, 0xff, b'x'], version);
        }
        // A null mechanism is not a string.
        let err = decode(&Bytes::from_static(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]), 1).unwrap_err();
        assert!(matches!(err, Error::NegativeLength { .. }), "{err}");
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 1] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    SaslHandshakeResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <SaslHandshakeResponse as Message>::VERSIONS;
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
                    assert_eq!((api, v, min, max), ("SaslHandshake", version, MIN_VERSION, MAX_VERSION));
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
