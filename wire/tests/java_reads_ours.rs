//! The other direction: batches written by our encoder, with every codec, are
//! read by Apache Kafka's Java client (kafka-clients 4.4.0 via
//! `tools/golden-batches/verify.sh`), which checks the CRC and compares what
//! it decodes with the dump we expect.
//!
//! Needs Java 17 and Maven (the machine has both; `.ci/run` checks). This
//! test never skips: without Java it fails.

use std::path::PathBuf;
use std::process::Command;

use bytes::BytesMut;
use clink_kafka_wire::compression::Compression;
use clink_kafka_wire::record::{
    dump_batch, BatchMeta, ControlKind, DecodeOptions, HeaderOut, RecordBatch, RecordBatchEncoder, RecordOut,
};

fn value(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

#[test]
fn java_client_reads_what_we_write() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("java_reads_ours");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let keys: Vec<Vec<u8>> = (0..60).map(|i| format!("key-{i:06}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..60)
        .map(|i| match i {
            7 => Vec::new(),
            13 => value(i, 70_000), // crosses snappy's 32 KiB and lz4's 64 KiB blocks
            _ => value(i, 100),
        })
        .collect();
    let hdrs = [
        HeaderOut {
            key: "trace",
            value: Some(b"abc"),
        },
        HeaderOut {
            key: "nil",
            value: None,
        },
    ];
    let records: Vec<RecordOut<'_>> = (0..60)
        .map(|i| RecordOut {
            timestamp: 1_700_000_000_000 + (i as i64) * 17 - if i == 5 { 5_000 } else { 0 },
            key: if i == 3 { None } else { Some(&keys[i][..]) },
            value: if i == 9 { None } else { Some(&values[i][..]) },
            headers: if i % 10 == 1 { &hdrs[..] } else { &[] },
        })
        .collect();

    let mut enc = RecordBatchEncoder::new();
    let mut cases = Vec::new();
    for codec in [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let meta = BatchMeta {
            compression: codec,
            producer_id: 77,
            producer_epoch: 1,
            base_sequence: 10,
            transactional: codec == Compression::Lz4,
            ..BatchMeta::default()
        };
        let mut out = BytesMut::new();
        enc.encode(&mut out, &meta, &records).unwrap();
        cases.push((codec.name().to_string(), out.freeze()));
    }
    let mut out = BytesMut::new();
    enc.encode_end_txn_marker(
        &mut out,
        &BatchMeta {
            base_offset: 60,
            producer_id: 77,
            producer_epoch: 1,
            ..BatchMeta::default()
        },
        ControlKind::Commit,
        3,
        1_700_000_001_000,
    )
    .unwrap();
    cases.push(("control_commit".into(), out.freeze()));

    for (name, bytes) in &cases {
        let batch = RecordBatch::decode_exact(bytes, &DecodeOptions::default()).unwrap();
        let mut dump = String::new();
        dump_batch(&batch, &mut dump).unwrap();
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
        std::fs::write(dir.join(format!("{name}.expected.dump")), dump).unwrap();
    }

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tools/golden-batches/verify.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg(&dir)
        .output()
        .expect("run tools/golden-batches/verify.sh (needs java and mvn)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "Java client refused our batches:\n{stdout}\n{stderr}"
    );
    for (name, _) in &cases {
        assert!(
            stdout.contains(&format!("ok {name}")),
            "no verdict for {name}:\n{stdout}"
        );
    }
}
