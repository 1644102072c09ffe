//! DescribeCluster response (API key 60), v0–v2 (KIP-700). Always flexible;
//! v1 adds `endpoint_type` (KIP-919), v2 the brokers' `is_fenced` (KIP-1073).

use kafka_protocol::messages::describe_cluster_response::{DescribeClusterBroker, DescribeClusterResponse};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 2;

impl DecodeResponse for DescribeClusterResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "DescribeCluster",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let mut out = DescribeClusterResponse::default();
        out.throttle_time_ms = r.i32("DescribeClusterResponse.throttle_time_ms")?;
        out.error_code = r.i16("DescribeClusterResponse.error_code")?;
        out.error_message = r.nullable_string(true, "DescribeClusterResponse.error_message")?;
        if version >= 1 {
            out.endpoint_type = r.i8("DescribeClusterResponse.endpoint_type")?;
        }
        out.cluster_id = r.string(true, "DescribeClusterResponse.cluster_id")?;
        out.controller_id = r.i32("DescribeClusterResponse.controller_id")?.into();
        out.brokers = r.array(true, "DescribeClusterResponse.brokers", |r| broker(r, version))?;
        out.cluster_authorized_operations = r.i32("DescribeClusterResponse.cluster_authorized_operations")?;
        out.unknown_tagged_fields = r.tagged_fields("DescribeClusterResponse.tagged_fields", |_, _, _| Ok(false))?;
        Ok(out)
    }
}

fn broker(r: &mut Reader<'_>, version: i16) -> Result<DescribeClusterBroker> {
    let mut b = DescribeClusterBroker::default();
    b.broker_id = r.i32("DescribeClusterResponse.brokers.broker_id")?.into();
    b.host = r.string(true, "DescribeClusterResponse.brokers.host")?;
    b.port = r.i32("DescribeClusterResponse.brokers.port")?;
    b.rack = r.nullable_string(true, "DescribeClusterResponse.brokers.rack")?;
    if version >= 2 {
        b.is_fenced = r.bool("DescribeClusterResponse.brokers.is_fenced")?;
    }
    b.unknown_tagged_fields = r.tagged_fields("DescribeClusterResponse.brokers.tagged_fields", |_, _, _| Ok(false))?;
    Ok(b)
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

    fn sample(version: i16) -> DescribeClusterResponse {
        let mut v = DescribeClusterResponse::default();
        v.throttle_time_ms = 17;
        v.error_code = 0;
        v.error_message = Some(s("partial"));
        if version >= 1 {
            v.endpoint_type = 2;
        }
        v.cluster_id = s("MkU3OEVBNTcwNTJENDM2Qk");
        v.controller_id = 2.into();
        v.brokers = (1..=3)
            .map(|id| {
                let mut b = DescribeClusterBroker::default();
                b.broker_id = id.into();
                b.host = StrBytes::from_string(format!("broker-{id}.kafka.svc"));
                b.port = 9090 + id;
                b.rack = if id == 2 { None } else { Some(s("rack-a")) };
                if version >= 2 {
                    b.is_fenced = id == 3;
                }
                if id == 1 {
                    b.unknown_tagged_fields.insert(7, Bytes::from_static(b"\x00\x07"));
                }
                b
            })
            .collect();
        v.cluster_authorized_operations = 0b1010_1000;
        v.unknown_tagged_fields.insert(3, Bytes::from_static(b"cl"));
        v
    }

    fn encode(v: &DescribeClusterResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<DescribeClusterResponse> {
        let mut r = Reader::new(frame);
        let v = DescribeClusterResponse::decode_response(&mut r, version)?;
        r.finish("DescribeClusterResponse")?;
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
            assert_ne!(value, DescribeClusterResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = DescribeClusterResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // v0: error_message claiming u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // v0: null message, cluster_id claiming u32::MAX - 1 bytes.
        assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], 0);
        // v1: null message, endpoint_type, cluster_id "c", controller, brokers claiming u32::MAX - 1.
        assert_out_of_bounds(
            &[
                0, 0, 0, 0, 0, 0, 0, 1, 2, b'c', 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0,
            ],
            1,
        );
        // v2: one broker whose host claims u32::MAX - 1 bytes.
        assert_out_of_bounds(
            &[
                0, 0, 0, 0, 0, 0, 0, 1, 2, b'c', 0, 0, 0, 1, 2, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0,
            ],
            2,
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 1, 2] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    DescribeClusterResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <DescribeClusterResponse as Message>::VERSIONS;
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
                        ("DescribeCluster", version, MIN_VERSION, MAX_VERSION)
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
