//! DeleteTopics response (API key 20), v1–v6 (v0 was removed in Kafka 4.0,
//! KIP-896). Flexible from v4; v5 adds `error_message`, v6 `topic_id` and a
//! nullable `name` (KIP-516).

use kafka_protocol::messages::delete_topics_response::{DeletableTopicResult, DeleteTopicsResponse};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 1;
const MAX_VERSION: i16 = 6;

impl DecodeResponse for DeleteTopicsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "DeleteTopics",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 4;
        let mut out = DeleteTopicsResponse::default();
        out.throttle_time_ms = r.i32("DeleteTopicsResponse.throttle_time_ms")?;
        out.responses = r.array(flexible, "DeleteTopicsResponse.responses", |r| {
            deletable_topic_result(r, version, flexible)
        })?;
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("DeleteTopicsResponse.tagged_fields", |_, _, _| Ok(false))?;
        }
        Ok(out)
    }
}

fn deletable_topic_result(r: &mut Reader<'_>, version: i16, flexible: bool) -> Result<DeletableTopicResult> {
    let mut t = DeletableTopicResult::default();
    // The schema makes `name` nullable from v6; like kafka-protocol's own
    // decoder we accept the null marker at every version.
    t.name = r
        .nullable_string(flexible, "DeleteTopicsResponse.responses.name")?
        .map(Into::into);
    if version >= 6 {
        t.topic_id = r.uuid("DeleteTopicsResponse.responses.topic_id")?;
    }
    t.error_code = r.i16("DeleteTopicsResponse.responses.error_code")?;
    if version >= 5 {
        t.error_message = r.nullable_string(true, "DeleteTopicsResponse.responses.error_message")?;
    }
    if flexible {
        t.unknown_tagged_fields =
            r.tagged_fields("DeleteTopicsResponse.responses.tagged_fields", |_, _, _| Ok(false))?;
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

    fn sample(version: i16) -> DeleteTopicsResponse {
        let flexible = version >= 4;
        let mut v = DeleteTopicsResponse::default();
        v.throttle_time_ms = 1500;
        let mut a = DeletableTopicResult::default();
        a.name = Some(s("doomed").into());
        let mut b = DeletableTopicResult::default();
        b.name = Some(s("protected").into());
        b.error_code = 41;
        let mut c = DeletableTopicResult::default();
        c.name = Some(s("").into());
        c.error_code = 3;
        if version >= 5 {
            b.error_message = Some(s("Topic deletion is disabled."));
        }
        if version >= 6 {
            a.topic_id = uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
            // Deleted by id, unknown name.
            c.name = None;
            c.topic_id = uuid::Uuid::from_u128(42);
            c.error_code = 100;
        }
        if flexible {
            a.unknown_tagged_fields.insert(4, Bytes::from_static(b"\x0a"));
            v.unknown_tagged_fields.insert(0, Bytes::from_static(b"\x01\x01"));
        }
        v.responses = vec![a, b, c];
        v
    }

    fn encode(v: &DeleteTopicsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<DeleteTopicsResponse> {
        let mut r = Reader::new(frame);
        let v = DeleteTopicsResponse::decode_response(&mut r, version)?;
        r.finish("DeleteTopicsResponse")?;
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
            assert_ne!(value, DeleteTopicsResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = DeleteTopicsResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v1: responses claiming i32::MAX elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0], 1);
        // v3: one response whose name claims i16::MAX bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, b'x'], 3);
        // v4: compact responses claiming u32::MAX - 1 elements.
        assert_out_of_bounds(&[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 4);
        // v5: one response "t", error_message claiming u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 2, b't', 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 5);
        // v6: one response whose name claims u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 6);
    }

    #[test]
    fn null_name_accepted_like_kafka_protocol() {
        // v1 frame: one response with a null name, error_code 3.
        let frame = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0, 3]);
        let ours = decode(&frame, 1).unwrap();
        let theirs = DeleteTopicsResponse::decode(&mut frame.clone(), 1).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours.responses[0].name, None);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [1, 3, 4, 6] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    DeleteTopicsResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <DeleteTopicsResponse as Message>::VERSIONS;
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
                    assert_eq!((api, v, min, max), ("DeleteTopics", version, MIN_VERSION, MAX_VERSION));
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
