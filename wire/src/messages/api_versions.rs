//! ApiVersions response (API key 18), v0..=v4; the body is flexible from v3.
//!
//! Two protocol quirks the caller must handle (this module only decodes a
//! body at the version it is told):
//!
//! * The response *header* is always v0 (no tagged fields), even when the
//!   body is flexible, so a client can read it before it knows what the
//!   broker speaks (KIP-511).
//! * A broker that does not support the requested ApiVersions version answers
//!   with error code 35 (UNSUPPORTED_VERSION) and a **v0** body listing what it
//!   does support (at least its ApiVersions range). Decode that body with
//!   `version = 0`, then retry with a version from the broker's range.
//!
//! Known tagged fields (v3+): `supported_features` (0),
//! `finalized_features_epoch` (1), `finalized_features` (2),
//! `zk_migration_ready` (3).
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/ApiVersionsResponse.json>.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, ApiVersionsResponse, FinalizedFeatureKey, SupportedFeatureKey,
};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

/// Oldest ApiVersions response version this decoder reads.
pub const MIN_VERSION: i16 = 0;
/// Newest ApiVersions response version this decoder reads.
pub const MAX_VERSION: i16 = 4;

impl DecodeResponse for ApiVersionsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "ApiVersions",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 3;
        let mut out = ApiVersionsResponse::default();
        out.error_code = r.i16("ApiVersionsResponse.error_code")?;
        out.api_keys = r.array(flexible, "ApiVersionsResponse.api_keys", |r| api_version(r, flexible))?;
        if version >= 1 {
            out.throttle_time_ms = r.i32("ApiVersionsResponse.throttle_time_ms")?;
        }
        if flexible {
            let mut supported_features = Vec::new();
            let mut finalized_features_epoch = -1;
            let mut finalized_features = Vec::new();
            let mut zk_migration_ready = false;
            out.unknown_tagged_fields = r.tagged_fields("ApiVersionsResponse.tagged_fields", |r, tag, _| {
                match tag {
                    0 => {
                        supported_features =
                            r.array(true, "ApiVersionsResponse.supported_features", supported_feature)?;
                    }
                    1 => finalized_features_epoch = r.i64("ApiVersionsResponse.finalized_features_epoch")?,
                    2 => {
                        finalized_features =
                            r.array(true, "ApiVersionsResponse.finalized_features", finalized_feature)?;
                    }
                    3 => zk_migration_ready = r.bool("ApiVersionsResponse.zk_migration_ready")?,
                    _ => return Ok(false),
                }
                Ok(true)
            })?;
            out.supported_features = supported_features;
            out.finalized_features_epoch = finalized_features_epoch;
            out.finalized_features = finalized_features;
            out.zk_migration_ready = zk_migration_ready;
        }
        Ok(out)
    }
}

fn api_version(r: &mut Reader<'_>, flexible: bool) -> Result<ApiVersion> {
    let mut out = ApiVersion::default();
    out.api_key = r.i16("ApiVersion.api_key")?;
    out.min_version = r.i16("ApiVersion.min_version")?;
    out.max_version = r.i16("ApiVersion.max_version")?;
    if flexible {
        out.unknown_tagged_fields = r.tagged_fields("ApiVersion.tagged_fields", |_, _, _| Ok(false))?;
    }
    Ok(out)
}

/// v3+ only (a tagged field).
fn supported_feature(r: &mut Reader<'_>) -> Result<SupportedFeatureKey> {
    let mut out = SupportedFeatureKey::default();
    out.name = r.string(true, "SupportedFeatureKey.name")?;
    out.min_version = r.i16("SupportedFeatureKey.min_version")?;
    out.max_version = r.i16("SupportedFeatureKey.max_version")?;
    out.unknown_tagged_fields = r.tagged_fields("SupportedFeatureKey.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

/// v3+ only (a tagged field). Note the schema puts max before min here.
fn finalized_feature(r: &mut Reader<'_>) -> Result<FinalizedFeatureKey> {
    let mut out = FinalizedFeatureKey::default();
    out.name = r.string(true, "FinalizedFeatureKey.name")?;
    out.max_version_level = r.i16("FinalizedFeatureKey.max_version_level")?;
    out.min_version_level = r.i16("FinalizedFeatureKey.min_version_level")?;
    out.unknown_tagged_fields = r.tagged_fields("FinalizedFeatureKey.tagged_fields", |_, _, _| Ok(false))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode(v: &ApiVersionsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).expect("kafka-protocol encodes the sample");
        buf.freeze()
    }

    fn decode(b: &Bytes, version: i16) -> Result<ApiVersionsResponse> {
        let mut r = Reader::new(b);
        let v = ApiVersionsResponse::decode_response(&mut r, version)?;
        r.finish("ApiVersionsResponse")?;
        Ok(v)
    }

    fn tags(flexible: bool, tag: i32) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(tag, Bytes::from_static(b"\x00\xff"));
        }
        m
    }

    fn sample(version: i16) -> ApiVersionsResponse {
        let flexible = version >= 3;
        let mut v = ApiVersionsResponse::default();
        v.error_code = 0;
        v.api_keys = [(0i16, 3i16, 13i16), (1, 4, 18), (3, 0, 13), (18, 0, 4)]
            .into_iter()
            .map(|(key, min, max)| {
                let mut a = ApiVersion::default();
                a.api_key = key;
                a.min_version = min;
                a.max_version = max;
                a.unknown_tagged_fields = tags(flexible, 8);
                a
            })
            .collect();
        if version >= 1 {
            v.throttle_time_ms = 17;
        }
        if flexible {
            let mut f = SupportedFeatureKey::default();
            f.name = StrBytes::from_static_str("metadata.version");
            f.min_version = 1;
            f.max_version = 27;
            f.unknown_tagged_fields = tags(true, 3);
            let mut g = SupportedFeatureKey::default();
            g.name = StrBytes::from_static_str("kraft.version");
            g.max_version = 1;
            v.supported_features = vec![f, g];
            v.finalized_features_epoch = 4711;
            let mut ff = FinalizedFeatureKey::default();
            ff.name = StrBytes::from_static_str("metadata.version");
            ff.max_version_level = 21;
            ff.min_version_level = 20;
            ff.unknown_tagged_fields = tags(true, 6);
            v.finalized_features = vec![ff];
            v.zk_migration_ready = true;
        }
        v.unknown_tagged_fields = tags(flexible, 99);
        v
    }

    #[test]
    fn versions_match_kafka_protocol() {
        assert_eq!(<ApiVersionsResponse as Message>::VERSIONS.min, MIN_VERSION);
        assert_eq!(<ApiVersionsResponse as Message>::VERSIONS.max, MAX_VERSION);
    }

    #[test]
    fn round_trip_every_version() {
        for version in MIN_VERSION..=MAX_VERSION {
            let value = sample(version);
            let bytes = encode(&value, version);
            let decoded = decode(&bytes, version).unwrap_or_else(|e| panic!("v{version}: {e}"));
            assert_eq!(decoded, value, "v{version}");
        }
    }

    #[test]
    fn flexible_defaults_when_tags_absent() {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_u8(1); // no api keys
        b.put_i32(0);
        b.put_u8(0); // no tags
        let v = decode(&b.freeze(), 3).unwrap();
        assert_eq!(v, ApiVersionsResponse::default());
        assert_eq!(v.finalized_features_epoch, -1);
    }

    #[test]
    fn unsupported_version_fallback_body_is_v0() {
        // What a broker sends for an ApiVersions version it does not speak.
        let mut b = BytesMut::new();
        b.put_i16(35);
        b.put_i32(1);
        b.put_i16(18);
        b.put_i16(0);
        b.put_i16(3);
        let v = decode(&b.freeze(), 0).unwrap();
        assert_eq!(v.error_code, 35);
        assert_eq!((v.api_keys[0].api_key, v.api_keys[0].max_version), (18, 3));
    }

    fn assert_out_of_bounds(frame: BytesMut, version: i16) {
        let err = decode(&frame.freeze(), version).unwrap_err();
        assert!(matches!(err, Error::LengthOutOfBounds { .. }), "v{version}: {err}");
    }

    const COMPACT_HUGE: [u8; 5] = [0xff, 0xff, 0xff, 0xff, 0x0f];

    #[test]
    fn huge_lengths_are_refused() {
        for version in [0, 1, 2] {
            let mut b = BytesMut::new();
            b.put_i16(0);
            b.put_i32(i32::MAX);
            b.put_slice(&[0; 10]);
            assert_out_of_bounds(b, version);
        }
        for version in [3, 4] {
            let mut b = BytesMut::new();
            b.put_i16(0);
            b.put_slice(&COMPACT_HUGE);
            b.put_slice(&[0; 10]);
            assert_out_of_bounds(b, version);
            // tagged-field count
            let mut b = BytesMut::new();
            b.put_i16(0);
            b.put_u8(1);
            b.put_i32(0);
            b.put_slice(&COMPACT_HUGE);
            assert_out_of_bounds(b, version);
            // supported_features (tag 0) and finalized_features (tag 2)
            for tag in [0u8, 2] {
                let mut b = BytesMut::new();
                b.put_i16(0);
                b.put_u8(1);
                b.put_i32(0);
                b.put_slice(&[1, tag, 5]);
                b.put_slice(&COMPACT_HUGE);
                assert_out_of_bounds(b, version);
            }
            // a feature name claiming u32::MAX - 1 bytes
            let mut b = BytesMut::new();
            b.put_i16(0);
            b.put_u8(1);
            b.put_i32(0);
            b.put_slice(&[1, 0, 6, 2]);
            b.put_slice(&COMPACT_HUGE);
            assert_out_of_bounds(b, version);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 2, 3, 4] {
            let full = encode(&sample(version), version);
            for len in 0..full.len() {
                assert!(decode(&full.slice(..len), version).is_err(), "v{version} prefix {len}");
            }
        }
    }

    #[test]
    fn unsupported_versions_are_typed() {
        for version in [-1, 5, i16::MAX] {
            let err = decode(&Bytes::from_static(&[0; 64]), version).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::UnsupportedVersion {
                        api: "ApiVersions",
                        min: 0,
                        max: 4,
                        ..
                    }
                ),
                "{err}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            version in 0i16..=4,
        ) {
            let _ = decode(&Bytes::from(data), version);
        }

        #[test]
        fn mutated_frames_never_panic(
            version in 0i16..=4,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            let mut frame = encode(&sample(version), version).to_vec();
            for (at, byte) in edits {
                let i = at % frame.len();
                frame[i] = byte;
            }
            let _ = decode(&Bytes::from(frame), version);
        }
    }
}
