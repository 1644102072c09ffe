//! FindCoordinator response (API key 10), v0–v6.
//!
//! v0–v3 describe one coordinator at the top level; v4+ (KIP-699) answer a
//! batch of keys in `coordinators`. Flexible from v3.

use kafka_protocol::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 6;

impl DecodeResponse for FindCoordinatorResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "FindCoordinator",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 3;
        let mut out = FindCoordinatorResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32("FindCoordinatorResponse.throttle_time_ms")?;
        }
        if version <= 3 {
            out.error_code = r.i16("FindCoordinatorResponse.error_code")?;
            if version >= 1 {
                out.error_message = r.nullable_string(flexible, "FindCoordinatorResponse.error_message")?;
            }
            out.node_id = r.i32("FindCoordinatorResponse.node_id")?.into();
            // Non-nullable, but librdkafka's mock cluster writes null with an
            // error (Kafka writes ""). Null is read as "" beside an error only.
            out.host = match r.nullable_string(flexible, "FindCoordinatorResponse.host")? {
                Some(host) => host,
                None if out.error_code != 0 => Default::default(),
                None => {
                    return Err(Error::Invalid {
                        context: "FindCoordinatorResponse.host",
                        message: "null host without an error".into(),
                    })
                }
            };
            out.port = r.i32("FindCoordinatorResponse.port")?;
        } else {
            out.coordinators = r.array(true, "FindCoordinatorResponse.coordinators", coordinator)?;
        }
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("FindCoordinatorResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

/// One entry of `coordinators` (v4+, always flexible).
fn coordinator(r: &mut Reader<'_>) -> Result<Coordinator> {
    let mut c = Coordinator::default();
    c.key = r.string(true, "FindCoordinatorResponse.coordinators.key")?;
    c.node_id = r.i32("FindCoordinatorResponse.coordinators.node_id")?.into();
    c.host = r.string(true, "FindCoordinatorResponse.coordinators.host")?;
    c.port = r.i32("FindCoordinatorResponse.coordinators.port")?;
    c.error_code = r.i16("FindCoordinatorResponse.coordinators.error_code")?;
    c.error_message = r.nullable_string(true, "FindCoordinatorResponse.coordinators.error_message")?;
    c.unknown_tagged_fields = r.tagged_fields("FindCoordinatorResponse.coordinators.tagged_fields", |_, _, _| {
        Ok(false)
    })?;
    Ok(c)
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

    fn sample(version: i16) -> FindCoordinatorResponse {
        let flexible = version >= 3;
        let mut v = FindCoordinatorResponse::default();
        if version >= 1 {
            v.throttle_time_ms = 1234;
        }
        if version <= 3 {
            v.error_code = 15;
            if version >= 1 {
                v.error_message = if version == 2 {
                    None
                } else {
                    Some(s("coordinator not available"))
                };
            }
            v.node_id = 7.into();
            v.host = s("broker-7.example");
            v.port = 9093;
        } else {
            let mut a = Coordinator::default();
            a.key = s("group-a");
            a.node_id = 3.into();
            a.host = s("broker-3");
            a.port = 9092;
            a.error_message = None;
            a.unknown_tagged_fields.insert(11, Bytes::from_static(b"\x09"));
            let mut b = Coordinator::default();
            b.key = s("txn-b");
            b.node_id = (-1).into();
            b.host = s("");
            b.port = -1;
            b.error_code = 15;
            b.error_message = Some(s("not available"));
            v.coordinators = vec![a, b];
        }
        if flexible {
            v.unknown_tagged_fields.insert(5, Bytes::from_static(b"\x01\x02\x03"));
        }
        v
    }

    fn encode(v: &FindCoordinatorResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<FindCoordinatorResponse> {
        let mut r = Reader::new(frame);
        let v = FindCoordinatorResponse::decode_response(&mut r, version)?;
        r.finish("FindCoordinatorResponse")?;
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
            assert_ne!(value, FindCoordinatorResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = FindCoordinatorResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v0: error_code, node_id, host claiming i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 1, 0x7f, 0xff, b'h'], 0);
        // v1: throttle, error_code, error_message claiming i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0x7f, 0xff, b'e'], 1);
        // v3: compact error_message claiming u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 3);
        // v4: coordinators claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0], 4);
        // v6: one coordinator whose key claims u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 6);
        // v6: top-level tagged fields claiming u32::MAX entries.
        assert_out_of_bounds(&[0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f], 6);
    }

    #[test]
    fn null_host_only_beside_an_error() {
        // v0..=v2 and v3 (compact): error_code, [error_message], node_id -1, host null, port -1.
        // librdkafka's mock cluster answers an error so.
        let v0 = |code: i16| {
            let mut b = code.to_be_bytes().to_vec();
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.extend_from_slice(&(-1i16).to_be_bytes()); // null string
            b.extend_from_slice(&(-1i32).to_be_bytes());
            Bytes::from(b)
        };
        let got = decode(&v0(15), 0).unwrap();
        assert_eq!((got.error_code, got.host.as_str(), got.node_id.0), (15, "", -1));
        let err = decode(&v0(0), 0).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
        let v3 = |code: i16| {
            let mut b = 0i32.to_be_bytes().to_vec(); // throttle
            b.extend_from_slice(&code.to_be_bytes());
            b.push(0); // error_message: null
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.push(0); // host: null
            b.extend_from_slice(&(-1i32).to_be_bytes());
            b.push(0); // tagged fields
            Bytes::from(b)
        };
        assert_eq!(decode(&v3(53), 3).unwrap().error_code, 53);
        assert!(matches!(decode(&v3(0), 3).unwrap_err(), Error::Invalid { .. }));
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 2, 3, 4, 6] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    FindCoordinatorResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <FindCoordinatorResponse as Message>::VERSIONS;
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
                        ("FindCoordinator", version, MIN_VERSION, MAX_VERSION)
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
