//! Golden record batches written by Apache Kafka's own Java client
//! (kafka-clients 4.4.0, `tools/golden-batches`): our decoder must read each
//! exactly as Kafka's reader does, for every codec.

use std::path::PathBuf;

use bytes::Bytes;
use clink_kafka_wire::compression::Compression;
use clink_kafka_wire::record::{dump_batch, BatchIter, ControlKind, DecodeOptions, RecordBatch};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/golden")
}

fn read(name: &str) -> (Bytes, String) {
    let dir = golden_dir();
    let bin = std::fs::read(dir.join(format!("{name}.bin"))).unwrap();
    let dump = std::fs::read_to_string(dir.join(format!("{name}.dump"))).unwrap();
    (Bytes::from(bin), dump)
}

fn our_dump(bytes: Bytes) -> String {
    let mut it = BatchIter::new(bytes, DecodeOptions::default());
    let mut out = String::new();
    for batch in it.by_ref() {
        dump_batch(&batch.unwrap(), &mut out).unwrap();
    }
    assert_eq!(it.remaining(), 0, "no partial batch expected in a golden file");
    out
}

fn check(name: &str) {
    let (bin, want) = read(name);
    let got = our_dump(bin);
    if got != want {
        let first = got.lines().zip(want.lines()).position(|(a, b)| a != b);
        panic!(
            "{name}: our dump differs from Kafka's (first differing line {first:?}; ours {} lines, theirs {})",
            got.lines().count(),
            want.lines().count()
        );
    }
}

#[test]
fn golden_uncompressed() {
    check("none");
}
#[test]
fn golden_gzip() {
    check("gzip");
}
#[test]
fn golden_snappy_xerial() {
    check("snappy");
}
#[test]
fn golden_lz4_frame() {
    check("lz4");
}
#[test]
fn golden_zstd() {
    check("zstd");
}
#[test]
fn golden_idempotent_fields() {
    check("idempotent");
    let (bin, _) = read("idempotent");
    let b = RecordBatch::decode_exact(&bin, &DecodeOptions::default()).unwrap();
    assert_eq!(
        (b.header.producer_id, b.header.producer_epoch, b.header.base_sequence),
        (4242, 7, 100)
    );
    assert!(!b.header.is_transactional());
}
#[test]
fn golden_transactional() {
    check("transactional");
    let (bin, _) = read("transactional");
    let b = RecordBatch::decode_exact(&bin, &DecodeOptions::default()).unwrap();
    assert!(b.header.is_transactional() && !b.header.is_control());
    assert_eq!(b.compression(), Compression::Lz4);
    assert_eq!(b.header.producer_id, 4243);
}
#[test]
fn golden_control_markers() {
    for (name, kind) in [
        ("control_commit", ControlKind::Commit),
        ("control_abort", ControlKind::Abort),
    ] {
        check(name);
        let (bin, _) = read(name);
        let b = RecordBatch::decode_exact(&bin, &DecodeOptions::default()).unwrap();
        let c = b.control_record().unwrap().expect("control batch");
        assert_eq!(c.kind, kind);
        assert_eq!(c.coordinator_epoch, Some(5));
    }
}
#[test]
fn golden_two_batches_in_one_buffer() {
    check("multi");
}

/// Our encoder, fed Kafka's decoded records, must reproduce the uncompressed
/// golden batch byte for byte (compressed ones legitimately differ: each
/// codec implementation picks its own matches).
#[test]
fn encoder_reproduces_uncompressed_golden_bytes() {
    use bytes::BytesMut;
    use clink_kafka_wire::record::{BatchMeta, HeaderOut, RecordBatchEncoder, RecordOut};
    for name in ["none", "idempotent"] {
        let (bin, _) = read(name);
        let batch = RecordBatch::decode_exact(&bin, &DecodeOptions::default()).unwrap();
        let recs = batch.decode_records().unwrap();
        let header_keys: Vec<Vec<String>> = recs
            .iter()
            .map(|r| {
                r.headers
                    .iter()
                    .map(|h| String::from_utf8(h.key.to_vec()).unwrap())
                    .collect()
            })
            .collect();
        let headers: Vec<Vec<HeaderOut<'_>>> = recs
            .iter()
            .zip(&header_keys)
            .map(|(r, keys)| {
                r.headers
                    .iter()
                    .zip(keys)
                    .map(|(h, k)| HeaderOut {
                        key: k,
                        value: h.value.as_deref(),
                    })
                    .collect()
            })
            .collect();
        let outs: Vec<RecordOut<'_>> = recs
            .iter()
            .zip(&headers)
            .map(|(r, h)| RecordOut {
                timestamp: r.timestamp,
                key: r.key.as_deref(),
                value: r.value.as_deref(),
                headers: h,
            })
            .collect();
        let h = batch.header;
        let meta = BatchMeta {
            base_offset: h.base_offset,
            partition_leader_epoch: h.partition_leader_epoch,
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            base_sequence: h.base_sequence,
            transactional: h.is_transactional(),
            ..BatchMeta::default()
        };
        let mut out = BytesMut::new();
        RecordBatchEncoder::new().encode(&mut out, &meta, &outs).unwrap();
        assert!(out[..] == bin[..], "{name}: our bytes differ from the Java client's");
    }
}
