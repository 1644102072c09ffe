//! ListTransactions response (API key 66), v0–v2 (KIP-664). Always flexible;
//! the layout is the same at every version (v1 and v2 only add request filters).

use kafka_protocol::messages::list_transactions_response::{ListTransactionsResponse, TransactionState};

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

const MIN_VERSION: i16 = 0;
const MAX_VERSION: i16 = 2;

impl DecodeResponse for ListTransactionsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                api: "ListTransactions",
                version,
                min: MIN_VERSION,
                max: MAX_VERSION,
            });
        }
        let mut out = ListTransactionsResponse::default();
        out.throttle_time_ms = r.i32("ListTransactionsResponse.throttle_time_ms")?;
        out.error_code = r.i16("ListTransactionsResponse.error_code")?;
        out.unknown_state_filters = r.array(true, "ListTransactionsResponse.unknown_state_filters", |r| {
            r.string(true, "ListTransactionsResponse.unknown_state_filters")
        })?;
        out.transaction_states = r.array(true, "ListTransactionsResponse.transaction_states", transaction_state)?;
        out.unknown_tagged_fields = r.tagged_fields("ListTransactionsResponse.tagged_fields", |_, _, _| Ok(false))?;
        Ok(out)
    }
}

fn transaction_state(r: &mut Reader<'_>) -> Result<TransactionState> {
    let mut t = TransactionState::default();
    t.transactional_id = r
        .string(true, "ListTransactionsResponse.transaction_states.transactional_id")?
        .into();
    t.producer_id = r.i64("ListTransactionsResponse.transaction_states.producer_id")?.into();
    t.transaction_state = r.string(true, "ListTransactionsResponse.transaction_states.transaction_state")?;
    t.unknown_tagged_fields = r.tagged_fields(
        "ListTransactionsResponse.transaction_states.tagged_fields",
        |_, _, _| Ok(false),
    )?;
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

    fn sample(version: i16) -> ListTransactionsResponse {
        let mut v = ListTransactionsResponse::default();
        v.throttle_time_ms = 10 + i32::from(version);
        v.error_code = 7;
        v.unknown_state_filters = vec![s("Bogus"), s("")];
        v.transaction_states = ["txn-1", "txn-2", "txn-3"]
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let mut t = TransactionState::default();
                t.transactional_id = s(id).into();
                t.producer_id = (1000 + i as i64).into();
                t.transaction_state = s(if i == 1 { "PrepareCommit" } else { "Ongoing" });
                if i == 2 {
                    t.unknown_tagged_fields.insert(6, Bytes::from_static(b"\x01\x02"));
                }
                t
            })
            .collect();
        v.unknown_tagged_fields.insert(12, Bytes::from_static(b"z"));
        v
    }

    fn encode(v: &ListTransactionsResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        v.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    fn decode(frame: &Bytes, version: i16) -> Result<ListTransactionsResponse> {
        let mut r = Reader::new(frame);
        let v = ListTransactionsResponse::decode_response(&mut r, version)?;
        r.finish("ListTransactionsResponse")?;
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
            assert_ne!(value, ListTransactionsResponse::default());
            let frame = encode(&value, version);
            assert_eq!(decode(&frame, version).unwrap(), value, "v{version}");
            // Fields absent at this version default the way kafka-protocol's decoder does.
            let theirs = ListTransactionsResponse::decode(&mut frame.clone(), version).unwrap();
            assert_eq!(theirs, value, "kafka-protocol v{version}");
        }
    }

    #[test]
    fn huge_lengths_are_bounded() {
        for version in MIN_VERSION..=MAX_VERSION {
            // unknown_state_filters claiming u32::MAX - 1 elements.
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], version);
            // One filter claiming u32::MAX - 1 bytes.
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], version);
            // No filters, transaction_states claiming u32::MAX - 1 elements.
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], version);
            // One state whose transactional_id claims u32::MAX - 1 bytes.
            assert_out_of_bounds(&[0, 0, 0, 0, 0, 0, 1, 2, 0xff, 0xff, 0xff, 0xff, 0x0f, 0], version);
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for version in [0, 1, 2] {
            let frame = encode(&sample(version), version);
            for len in 0..frame.len() {
                let prefix = frame.slice(..len);
                let mut r = Reader::new(&prefix);
                assert!(
                    ListTransactionsResponse::decode_response(&mut r, version).is_err(),
                    "v{version} prefix {len}/{}",
                    frame.len()
                );
            }
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoder learns it.
        let theirs = <ListTransactionsResponse as Message>::VERSIONS;
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
                        ("ListTransactions", version, MIN_VERSION, MAX_VERSION)
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
