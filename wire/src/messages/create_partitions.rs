//! CreatePartitions response (API key 37), v0–v3. Flexible from v2.

use kafka_protocol::messages::create_partitions_response::{CreatePartitionsResponse, CreatePartitionsTopicResult};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 3;

impl DecodeResponse for CreatePartitionsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "CreatePartitions",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 2;
        let mut out = CreatePartitionsResponse::default();
        out.throttle_time_ms = r.i32("CreatePartitionsResponse.throttle_time_ms")?;
        out.results = r.array(flexible, "CreatePartitionsResponse.results", |r| {
            topic_result(r, flexible)
        })?;
        if flexible {
            out.unknown_tagged_fields =
                r.tagged_fields("CreatePartitionsResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn topic_result(r: &mut Reader<'_>, flexible: bool) -> Result<CreatePartitionsTopicResult> {
    let mut t = CreatePartitionsTopicResult::default();
    t.name = r.string(flexible, "CreatePartitionsResponse.results.name")?.into();
    t.error_code = r.i16("CreatePartitionsResponse.results.error_code")?;
    t.error_message = r.nullable_string(flexible, "CreatePartitionsResponse.results.error_message")?;
    if flexible {
        t.unknown_tagged_fields =
            r.tagged_fields("CreatePartitionsResponse.results.tagged_fields", |_, _, _| Ok(false))?;
    }
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

    fn sample(version: i16) -> CreatePartitionsResponse {
        let flexible = version >= 2;
        let mut v = CreatePartitionsResponse::default();
        v.throttle_time_ms = 8;
        let mut a = CreatePartitionsTopicResult::default();
        a.name = s("grown").into();
        a.error_message = None;
        let mut b = CreatePartitionsTopicResult::default();
        b.name = s("shrunk").into();
        b.error_code = 37;
        b.error_message = Some(s(
            "Topic currently has 8 partitions, which is higher than the requested 4.",
        ));
        let mut c = CreatePartitionsTopicResult::default();
        c.name = s("empty-message").into();
        c.error_code = 3;
        c.error_message = Some(s(""));
        if flexible {
            b.unknown_tagged_fields.insert(1, Bytes::from_static(b"\x02"));
            v.unknown_tagged_fields.insert(9, Bytes::from_static(b"top"));
        }
        v.results = vec![a, b, c];
        v
    }

    fn encode(v: &CreatePartitionsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<CreatePartitionsResponse> {
        let mut r = Reader::new(frame);
        let v = CreatePartitionsResponse::decode_response(&mut r, version)?;
        r.finish("CreatePartitionsResponse")?;
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
            assert_ne!(value, CreatePartitionsResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = CreatePartitionsResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v0: results claiming i32::MAX elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0], 0);
        // v1: one result whose name claims i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, b'x'], 1);
        // v1: one result "t", error_message claiming i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0x7f, 0xff, b'x'], 1);
        // v2: compact results claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 2);
        // v3: one result whose name claims u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 3);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 1, 2, 3] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    CreatePartitionsResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <CreatePartitionsResponse as Message>::VERSIONS;
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
                        ("CreatePartitions", version, MIN_VERSION, MAX_VERSION)
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
