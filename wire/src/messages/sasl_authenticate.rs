//! SaslAuthenticate response (API key 36), v0–v2. Flexible from v2.
//!
//! `auth_bytes` is a zero-copy slice of the response frame.

use kafka_protocol::messages::sasl_authenticate_response::SaslAuthenticateResponse;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 2;

impl DecodeResponse for SaslAuthenticateResponse {
    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "SaslAuthenticate",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 2;
        let mut out = SaslAuthenticateResponse::default();
        out.error_code = r.i16("SaslAuthenticateResponse.error_code")?;
        out.error_message = r.nullable_string(flexible, "SaslAuthenticateResponse.error_message")?;
        out.auth_bytes = r.bytes(flexible, "SaslAuthenticateResponse.auth_bytes")?;
        if version >= 1 {
            out.session_lifetime_ms = r.i64("SaslAuthenticateResponse.session_lifetime_ms")?;
        }
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("SaslAuthenticateResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
    use proptest::prelude::*;

    fn sample(version: i16) -> SaslAuthenticateResponse {
        let mut v = SaslAuthenticateResponse::default();
        v.error_code = 58;
        v.error_message = if version == 1 {
            None
        } else {
            Some(StrBytes::from_static_str("Authentication failed: invalid credentials"))
        };
        v.auth_bytes = Bytes::from_static(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=\x00\xff");
        if version >= 1 {
            v.session_lifetime_ms = 3_600_000;
        }
        if version >= 2 {
            v.unknown_tagged_fields.insert(0, Bytes::from_static(b"\x10\x20"));
        }
        v
    }

    #[test]
    fn auth_bytes_are_zero_copy() {
        for version in MIN_VERSION..=MAX_VERSION {
            let frame = encode(&sample(version), version);
            let decoded = decode(&frame, version).unwrap();
            let range = frame.as_ptr_range();
            assert!(!decoded.auth_bytes.is_empty());
            assert!(
                range.contains(&decoded.auth_bytes.as_ptr()),
                "v{version}: auth_bytes was copied"
            );
        }
    }

    fn encode(v: &SaslAuthenticateResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<SaslAuthenticateResponse> {
        let mut r = Reader::new(frame);
        let v = SaslAuthenticateResponse::decode_response(&mut r, version)?;
        r.finish("SaslAuthenticateResponse")?;
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
            assert_ne!(value, SaslAuthenticateResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = SaslAuthenticateResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v0/v1: error_message claiming i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0x7f, 0xff, b'e'], 0);
        // v0/v1: null message, auth_bytes claiming i32::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0], 1);
        // v2: compact error_message claiming u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 2);
        // v2: null message, compact auth_bytes claiming u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 2);
        // Null auth_bytes is not allowed.
        let err = decode(&Bytes::from_static(&[0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), 0).unwrap_err();
        assert!(matches!(err, Error::NegativeLength { .. }), "{err}");
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 1, 2] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    SaslAuthenticateResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <SaslAuthenticateResponse as Message>::VERSIONS;
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
                        ("SaslAuthenticate", version, MIN_VERSION, MAX_VERSION)
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
