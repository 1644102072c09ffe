//! Unit tests of the batch codec: round trips and hostile input.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;
use crate::error::Error;

/// (timestamp, key, value, headers)
type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>, Vec<(String, Option<Vec<u8>>)>);
type Recs = Vec<Rec>;

fn sample_records() -> Recs {
    vec![
        (1_700_000_000_000, Some(b"k0".to_vec()), Some(b"v0".to_vec()), vec![]),
        (
            1_700_000_000_005,
            None,
            Some(vec![7; 300]),
            vec![("h".into(), Some(b"x".to_vec())), ("n".into(), None)],
        ),
        (1_699_999_999_000, Some(vec![]), None, vec![]),
    ]
}

fn encode(meta: &BatchMeta, recs: &[Rec]) -> Bytes {
    let headers: Vec<Vec<HeaderOut<'_>>> = recs
        .iter()
        .map(|r| {
            r.3.iter()
                .map(|(k, v)| HeaderOut {
                    key: k,
                    value: v.as_deref(),
                })
                .collect()
        })
        .collect();
    let outs: Vec<RecordOut<'_>> = recs
        .iter()
        .zip(&headers)
        .map(|(r, h)| RecordOut {
            timestamp: r.0,
            key: r.1.as_deref(),
            value: r.2.as_deref(),
            headers: h,
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::new().encode(&mut out, meta, &outs).unwrap();
    out.freeze()
}

fn fix_crc(b: &mut [u8]) {
    let crc = crc32c::crc32c(&b[ATTRIBUTES_OFFSET..]);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

fn opts() -> DecodeOptions {
    DecodeOptions::default()
}

#[test]
fn roundtrip_every_codec() {
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let meta = BatchMeta {
            base_offset: 42,
            producer_id: 9,
            producer_epoch: 2,
            base_sequence: 17,
            transactional: true,
            compression: codec,
            ..BatchMeta::default()
        };
        let bytes = encode(&meta, &sample_records());
        let batch = RecordBatch::decode_exact(&bytes, &opts()).unwrap();
        assert_eq!(batch.compression(), codec);
        let h = batch.header;
        assert_eq!(
            (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence),
            (42, 9, 2, 17)
        );
        assert!(h.is_transactional() && !h.is_control());
        assert_eq!(h.record_count, 3);
        assert_eq!(h.last_offset_delta, 2);
        assert_eq!(h.base_timestamp, 1_700_000_000_000);
        assert_eq!(h.max_timestamp, 1_700_000_000_005);
        let recs = batch.decode_records().unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[0].offset, 42);
        assert_eq!(recs[2].offset, 44);
        assert_eq!(recs[2].timestamp, 1_699_999_999_000, "negative timestamp delta");
        assert_eq!(recs[0].key.as_deref(), Some(&b"k0"[..]));
        assert_eq!(recs[1].key, None);
        assert_eq!(recs[1].value.as_deref(), Some(&[7u8; 300][..]));
        assert_eq!(recs[2].key.as_deref(), Some(&b""[..]));
        assert_eq!(recs[2].value, None);
        assert_eq!(recs[1].headers.len(), 2);
        assert_eq!(&recs[1].headers[0].key[..], b"h");
        assert_eq!(recs[1].headers[1].value, None);
    }
}

#[test]
fn uncompressed_records_borrow_from_input() {
    let bytes = encode(&BatchMeta::default(), &sample_records());
    let batch = RecordBatch::decode_exact(&bytes, &opts()).unwrap();
    let r = batch.records().next().unwrap().unwrap();
    let key = r.key.unwrap();
    let range = bytes.as_ptr_range();
    assert!(range.contains(&key.as_ptr()), "key must point into the fetched buffer");
    let owned = batch.to_owned_record(&r);
    assert!(range.contains(&owned.value.as_ref().unwrap().as_ptr()));
}

#[test]
fn control_markers() {
    for (kind, epoch) in [(ControlKind::Commit, 5), (ControlKind::Abort, 9)] {
        let mut out = BytesMut::new();
        let meta = BatchMeta {
            producer_id: 4243,
            producer_epoch: 3,
            ..BatchMeta::default()
        };
        RecordBatchEncoder::new()
            .encode_end_txn_marker(&mut out, &meta, kind, epoch, 1)
            .unwrap();
        let batch = RecordBatch::decode_exact(&out.freeze(), &opts()).unwrap();
        assert!(batch.header.is_control() && batch.header.is_transactional());
        let c = batch.control_record().unwrap().unwrap();
        assert_eq!(c.kind, kind);
        assert_eq!(c.coordinator_epoch, Some(epoch));
    }
    let data = encode(&BatchMeta::default(), &sample_records());
    let batch = RecordBatch::decode_exact(&data, &opts()).unwrap();
    assert_eq!(batch.control_record().unwrap(), None);
}

#[test]
fn empty_batch_refused_by_encoder() {
    let mut out = BytesMut::new();
    assert!(matches!(
        RecordBatchEncoder::new().encode(&mut out, &BatchMeta::default(), &[]),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn bad_crc_is_typed() {
    let mut b = encode(&BatchMeta::default(), &sample_records()).to_vec();
    let last = b.len() - 1;
    b[last] ^= 0x01;
    let err = RecordBatch::decode_exact(&Bytes::from(b.clone()), &opts()).unwrap_err();
    assert!(matches!(err, Error::CrcMismatch { .. }), "{err}");
    // With the check off, it decodes (and the flipped byte shows).
    let o = DecodeOptions {
        verify_crc: false,
        ..opts()
    };
    assert!(RecordBatch::decode_exact(&Bytes::from(b), &o).is_ok());
}

#[test]
fn batch_length_i32_max_is_refused_without_allocating() {
    let mut b = encode(&BatchMeta::default(), &sample_records()).to_vec();
    b[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
    let err = RecordBatch::decode(&Bytes::from(b), &opts()).unwrap_err();
    assert!(
        matches!(err, Error::LengthOutOfBounds { length: 2147483647, .. }),
        "{err}"
    );
    let mut b = encode(&BatchMeta::default(), &sample_records()).to_vec();
    b[8..12].copy_from_slice(&(-5i32).to_be_bytes());
    assert!(matches!(
        RecordBatch::decode(&Bytes::from(b), &opts()),
        Err(Error::LengthOutOfBounds { .. })
    ));
}

#[test]
fn record_count_i32_max_and_disagreeing_counts() {
    let base = encode(&BatchMeta::default(), &sample_records()).to_vec();
    for (count, expect_at_decode) in [(i32::MAX, true), (-1, true), (4, false), (2, false)] {
        let mut b = base.clone();
        b[57..61].copy_from_slice(&count.to_be_bytes());
        fix_crc(&mut b);
        let res = RecordBatch::decode_exact(&Bytes::from(b), &opts());
        if expect_at_decode {
            assert!(
                matches!(res, Err(Error::RecordCountMismatch { .. })),
                "count {count}: {res:?}"
            );
        } else {
            let batch = res.unwrap();
            let err = batch.decode_records().unwrap_err();
            assert!(matches!(err, Error::RecordCountMismatch { .. }), "count {count}: {err}");
            // The iterator stops after its error.
            let n = batch.records().count();
            assert!(n <= count as usize + 1);
        }
    }
}

#[test]
fn record_field_lengths_bounded() {
    let base = encode(
        &BatchMeta::default(),
        &[(0, Some(b"key".to_vec()), Some(b"val".to_vec()), vec![])],
    )
    .to_vec();
    // Record layout at 61: len, attrs, ts delta, offset delta, key len...
    let key_len_at = BATCH_HEADER_LEN + 4;
    assert_eq!(base[key_len_at], 6, "zigzag(3)");
    let mut b = base.clone();
    // Key length varint of i32::MAX (zigzag 0xfffffffe) would need 5 bytes; write a
    // 1-byte claim of 63 instead (more than the record holds).
    b[key_len_at] = 126;
    fix_crc(&mut b);
    let batch = RecordBatch::decode_exact(&Bytes::from(b), &opts()).unwrap();
    assert!(matches!(batch.decode_records(), Err(Error::LengthOutOfBounds { .. })));
    // Record length claiming far more than the batch holds.
    let mut b = base.clone();
    b[BATCH_HEADER_LEN] = 0x7e;
    fix_crc(&mut b);
    let batch = RecordBatch::decode_exact(&Bytes::from(b), &opts()).unwrap();
    assert!(matches!(batch.decode_records(), Err(Error::LengthOutOfBounds { .. })));
}

#[test]
fn varint_that_never_ends_in_a_record() {
    let mut b = encode(&BatchMeta::default(), &[(0, Some(vec![0xff; 12]), None, vec![])]).to_vec();
    // Overwrite from the timestamp delta onward with continuation bytes.
    for byte in &mut b[BATCH_HEADER_LEN + 2..] {
        *byte = 0xff;
    }
    fix_crc(&mut b);
    let batch = RecordBatch::decode_exact(&Bytes::from(b), &opts()).unwrap();
    let err = batch.decode_records().unwrap_err();
    assert!(matches!(err, Error::VarintTooLong { .. }), "{err}");
}

#[test]
fn every_truncation_is_need_more_or_typed_error() {
    let full = encode(
        &BatchMeta {
            compression: Compression::Lz4,
            ..BatchMeta::default()
        },
        &sample_records(),
    );
    for n in 0..full.len() {
        let cut = full.slice(..n);
        assert!(RecordBatch::decode(&cut, &opts()).unwrap().is_none(), "prefix {n}");
        assert!(matches!(
            RecordBatch::decode_exact(&cut, &opts()),
            Err(Error::Truncated { .. })
        ));
    }
}

#[test]
fn legacy_magic_refused() {
    let mut b = encode(&BatchMeta::default(), &sample_records()).to_vec();
    b[MAGIC_OFFSET] = 1;
    let err = RecordBatch::decode(&Bytes::from(b), &opts()).unwrap_err();
    assert!(matches!(err, Error::UnsupportedMagic { magic: 1, .. }));
    assert!(err.to_string().contains("KIP-896"));
}

#[test]
fn batch_iter_stops_at_partial_tail() {
    let one = encode(&BatchMeta::default(), &sample_records());
    let mut all = BytesMut::new();
    all.extend_from_slice(&one);
    all.extend_from_slice(&one);
    all.extend_from_slice(&one[..30]);
    let mut it = BatchIter::new(all.freeze(), opts());
    assert!(it.next().unwrap().is_ok());
    assert!(it.next().unwrap().is_ok());
    assert!(it.next().is_none());
    assert_eq!(it.remaining(), 30);
}

#[test]
fn decompression_bomb_bounded() {
    let big = vec![0u8; 4 << 20];
    let bytes = encode(
        &BatchMeta {
            compression: Compression::Zstd,
            ..BatchMeta::default()
        },
        &[(0, None, Some(big), vec![])],
    );
    let o = DecodeOptions {
        max_decompressed_size: 1 << 20,
        ..opts()
    };
    let err = RecordBatch::decode_exact(&bytes, &o).unwrap_err();
    assert!(matches!(err, Error::Compression(_)), "{err}");
}

fn arb_records() -> impl Strategy<Value = Recs> {
    let field = proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64));
    let header = (
        "[a-z]{0,8}",
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
    );
    proptest::collection::vec(
        (
            any::<i64>(),
            field.clone(),
            field,
            proptest::collection::vec(header, 0..3),
        ),
        1..20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn prop_roundtrip(recs in arb_records(), codec in 0i16..5) {
        let codec = Compression::from_attributes(codec).unwrap();
        let meta = BatchMeta { compression: codec, base_offset: 1000, ..BatchMeta::default() };
        let bytes = encode(&meta, &recs);
        let batch = RecordBatch::decode_exact(&bytes, &opts()).unwrap();
        let got = batch.decode_records().unwrap();
        prop_assert_eq!(got.len(), recs.len());
        for (i, (g, w)) in got.iter().zip(&recs).enumerate() {
            prop_assert_eq!(g.offset, 1000 + i as i64);
            prop_assert_eq!(g.timestamp, w.0);
            prop_assert_eq!(g.key.as_deref(), w.1.as_deref());
            prop_assert_eq!(g.value.as_deref(), w.2.as_deref());
            prop_assert_eq!(g.headers.len(), w.3.len());
            for (gh, wh) in g.headers.iter().zip(&w.3) {
                prop_assert_eq!(&gh.key[..], wh.0.as_bytes());
                prop_assert_eq!(gh.value.as_deref(), wh.1.as_deref());
            }
        }
    }

    #[test]
    fn prop_arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let o = DecodeOptions { verify_crc: false, max_decompressed_size: 1 << 16, ..opts() };
        let bytes = Bytes::from(data);
        if let Ok(Some((batch, _))) = RecordBatch::decode(&bytes, &o) {
            let _ = batch.decode_records();
            let _ = batch.control_record();
        }
    }

    #[test]
    fn prop_mutated_batch_never_panics(recs in arb_records(), at in any::<usize>(), byte in any::<u8>()) {
        let mut b = encode(&BatchMeta::default(), &recs).to_vec();
        let i = at % b.len();
        b[i] = byte;
        let o = DecodeOptions { verify_crc: false, ..opts() };
        if let Ok(Some((batch, _))) = RecordBatch::decode(&Bytes::from(b), &o) {
            for r in batch.records().flatten() {
                let _ = r.headers().count();
            }
        }
    }

    /// The fast record parser accepts exactly what the careful one accepts,
    /// and yields the same records and the same first error.
    #[test]
    fn prop_fast_and_slow_paths_agree(recs in arb_records(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..3)) {
        let mut b = encode(&BatchMeta::default(), &recs).to_vec();
        for (at, byte) in edits {
            let i = at % b.len();
            b[i] = byte;
        }
        let o = DecodeOptions { verify_crc: false, ..opts() };
        if let Ok(Some((batch, _))) = RecordBatch::decode(&Bytes::from(b), &o) {
            let fast: Vec<_> = batch.records().map(|r| r.map_err(|e| e.to_string())).collect();
            let slow: Vec<_> = batch.records_slow_path().into_iter().map(|r| r.map_err(|e| e.to_string())).collect();
            prop_assert_eq!(fast, slow);
        }
    }
}
