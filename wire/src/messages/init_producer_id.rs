//! InitProducerId (API key 22): the response, v0–v6, and the v6 request.
//!
//! v6 (KIP-939, two-phase commit) adds `enable2Pc` and `keepPreparedTxn` to
//! the request and the ongoing transaction's producer id and epoch to the
//! response. Flexible from v2. kafka-protocol 0.18 encodes the request only
//! up to v5, so [`InitProducerIdTwoPhaseRequest`] writes v6 by hand.

use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Encodable, VersionRange};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};
use crate::protocol::ApiRequest;

impl ApiRequest for InitProducerIdTwoPhaseRequest {
    const KEY: ApiKey = ApiKey::InitProducerId;
    const NAME: &'static str = "InitProducerId";
    const VERSIONS: VersionRange = VersionRange {
        min: TWO_PHASE_COMMIT_VERSION,
        max: TWO_PHASE_COMMIT_VERSION,
    };
    type Response = InitProducerIdResponse;
}

/// InitProducerId v6 (KIP-939), the only version it speaks: the fields of
/// kafka-protocol's [`InitProducerIdRequest`] including `enable_2_pc` and
/// `keep_prepared_txn`, in the v6 layout (compact nullable transactional id,
/// timeout, producer id, epoch, the two booleans, tagged fields). Unknown
/// tagged fields are not written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InitProducerIdTwoPhaseRequest {
    /// The request's fields.
    pub request: InitProducerIdRequest,
}

/// The one version [`InitProducerIdTwoPhaseRequest`] speaks.
pub const TWO_PHASE_COMMIT_VERSION: i16 = 6;

impl Encodable for InitProducerIdTwoPhaseRequest {
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {
        if version != TWO_PHASE_COMMIT_VERSION {
            anyhow::bail!(
                "InitProducerId two-phase-commit request: version {version} (only v{TWO_PHASE_COMMIT_VERSION})"
            );
        }
        let r = &self.request;
        match &r.transactional_id {
            // A compact nullable string: length + 1 as an unsigned varint (0: null).
            None => put_unsigned_varint(buf, 0),
            Some(id) => {
                let bytes = id.0.as_bytes();
                let len = u32::try_from(bytes.len())
                    .ok()
                    .and_then(|l| l.checked_add(1))
                    .ok_or_else(|| anyhow::anyhow!("InitProducerId: transactional id of {} bytes", bytes.len()))?;
                put_unsigned_varint(buf, len);
                buf.put_slice(bytes);
            }
        }
        buf.put_i32(r.transaction_timeout_ms);
        buf.put_i64(r.producer_id.0);
        buf.put_i16(r.producer_epoch);
        buf.put_u8(u8::from(r.enable_2_pc));
        buf.put_u8(u8::from(r.keep_prepared_txn));
        // No tagged fields.
        put_unsigned_varint(buf, 0);
        Ok(())
    }

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {
        let mut buf = bytes::BytesMut::new();
        self.encode(&mut buf, version)?;
        Ok(buf.len())
    }
}

fn put_unsigned_varint<B: ByteBufMut>(buf: &mut B, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 6;

impl DecodeResponse for InitProducerIdResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "InitProducerId",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let flexible = version >= 2;
        let mut out = InitProducerIdResponse::default();
        out.throttle_time_ms = r.i32("InitProducerIdResponse.throttle_time_ms")?;
        out.error_code = r.i16("InitProducerIdResponse.error_code")?;
        out.producer_id = r.i64("InitProducerIdResponse.producer_id")?.into();
        out.producer_epoch = r.i16("InitProducerIdResponse.producer_epoch")?;
        if version >= 6 {
            out.ongoing_txn_producer_id = r.i64("InitProducerIdResponse.ongoing_txn_producer_id")?.into();
            out.ongoing_txn_producer_epoch = r.i16("InitProducerIdResponse.ongoing_txn_producer_epoch")?;
        }
        if flexible {
            out.unknown_tagged_fields = r.tagged_fields("InitProducerIdResponse.tagged_fields", |_, _, _| Ok(false))?;
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

    fn sample(version: i16) -> InitProducerIdResponse {
        let mut v = InitProducerIdResponse::default();
        v.throttle_time_ms = 25;
        v.error_code = 47;
        v.producer_id = 0x0102_0304_0506_0708.into();
        v.producer_epoch = 300;
        if version >= 6 {
            v.ongoing_txn_producer_id = 4242.into();
            v.ongoing_txn_producer_epoch = 17;
        }
        if version >= 2 {
            v.unknown_tagged_fields.insert(3, Bytes::from_static(b"\xaa\xbb"));
            v.unknown_tagged_fields.insert(200, Bytes::new());
        }
        v
    }

    fn encode(v: &InitProducerIdResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<InitProducerIdResponse> {
        let mut r = Reader::new(frame);
        let v = InitProducerIdResponse::decode_response(&mut r, version)?;
        r.finish("InitProducerIdResponse")?;
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
            assert_ne!(value, InitProducerIdResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = InitProducerIdResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn the_two_phase_commit_request_is_v6s_layout() {
        use kafka_protocol::messages::TransactionalId;
        use kafka_protocol::protocol::StrBytes;
        let mut request = InitProducerIdRequest::default();
        request.transactional_id = Some(TransactionalId(StrBytes::from_static_str("tx")));
        request.transaction_timeout_ms = 0x0102_0304;
        request.producer_id = (-1).into();
        request.producer_epoch = -1;
        request.enable_2_pc = true;
        let r = InitProducerIdTwoPhaseRequest { request };
        let mut buf = BytesMut::new();
        r.encode(&mut buf, 6).unwrap();
        let want: &[u8] = &[
            3, b't', b'x', // compact string: length + 1
            1, 2, 3, 4, // transaction_timeout_ms
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // producer_id -1
            0xff, 0xff, // producer_epoch -1
            1,    // enable2Pc
            0,    // keepPreparedTxn
            0,    // no tagged fields
        ];
        assert_eq!(&buf[..], want);
        assert_eq!(r.compute_size(6).unwrap(), want.len());
        // v6's first fields are v5's: kafka-protocol's v5 encoding is the
        // same bytes without the two booleans.
        let mut v5 = BytesMut::new();
        r.request.encode(&mut v5, 5).unwrap();
        assert_eq!(&v5[..], &[&want[..want.len() - 3], &[0]].concat()[..]);
        assert!(r.encode(&mut BytesMut::new(), 5).is_err(), "only v6");
        assert_eq!(<InitProducerIdTwoPhaseRequest as ApiRequest>::VERSIONS.max, 6);
    }

    #[test]
    fn huge_lengths_are_bounded() {
        // The body has no arrays or strings; its only lengths are in the tagged-field section.
        let fixed = [0u8; 4 + 2 + 8 + 2];
        // Tagged-field count claiming u32::MAX entries.
        assert_out_of_bounds(&[&fixed[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), 2);
        // One tagged field whose size claims u32::MAX bytes.
        assert_out_of_bounds(&[&fixed[..], &[1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), 5);
        // v6, after the extra fixed fields.
        let fixed6 = [0u8; 4 + 2 + 8 + 2 + 8 + 2];
        assert_out_of_bounds(&[&fixed6[..], &[0xff, 0xff, 0xff, 0xff, 0x0f]].concat(), 6);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 1, 2, 5, 6] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    InitProducerIdResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <InitProducerIdResponse as Message>::VERSIONS;
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
                        ("InitProducerId", version, MIN_VERSION, MAX_VERSION)
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
