//! Record batch codec benchmarks: our wire crate against `kafka-protocol`'s
//! RecordBatchDecoder/RecordBatchEncoder on the same bytes, in the same run.
//!
//! A batch of 1,000 records, 10-byte keys, 100-byte values, uncompressed and
//! with each codec. Both implementations use the same pure-Rust codecs (ours
//! are handed to kafka-protocol's custom-compression hooks), so the numbers
//! compare the batch codecs, not the compressors.
//!
//! Uncompressed, kafka-protocol is also measured through its plain
//! `RecordBatchEncoder::encode` / `RecordBatchDecoder::decode`
//! (`kafka_protocol_plain`), its fastest path: with a custom-compression hook,
//! even for `none`, its encoder first writes the records into a fresh,
//! growing `BytesMut` and hands that to the hook, which copies it again.
//! Compare `clink` against `kafka_protocol_plain` for `none`.
//!
//! Each case is measured twice: wall time (criterion's default) and process
//! CPU time (the `cpu` group). Criterion reports the median; divide by 1,000
//! for ns per record (the throughput line gives records/s directly).
//!
//! Run: `cargo bench --bench record_batch` (add `-- --quick` for a fast pass).
//!
//! Instruction counts, which repeat run to run on a noisy machine: set
//! `RECORD_BATCH_CALLGRIND=OP/CODEC/IMPL[/ITERATIONS]` (for example
//! `encode/none/kafka_protocol_plain`) and run the bench binary under
//! `valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*callgrind_measure*'`:
//! it runs only that case, ITERATIONS times (default 100), inside
//! `callgrind_measure`, so the total Ir / (ITERATIONS × 1,000) is
//! instructions per record. `benches/record_batch_callgrind` does all of it.

use std::hint::black_box;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use clink_kafka_wire::compression::{self, Compression};
use clink_kafka_wire::record::{BatchMeta, DecodeOptions, RecordBatch, RecordBatchEncoder, RecordOut};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use kafka_protocol::records as kp;

const N: usize = 1000;
const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Deterministic, mildly compressible payloads (text-like, as real values are).
fn payloads() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let words: [&[u8]; 8] = [
        b"order",
        b"customer",
        b"amount",
        b"eur",
        b"usd",
        b"status",
        b"shipped",
        b"id",
    ];
    let keys = (0..N).map(|i| format!("key-{i:06}").into_bytes()).collect();
    let values = (0..N)
        .map(|_| {
            let mut v = Vec::with_capacity(100);
            while v.len() < 100 {
                let r = next();
                v.extend_from_slice(words[(r % 8) as usize]);
                v.push(b'=');
                v.extend_from_slice(format!("{}", (r >> 8) % 100_000).as_bytes());
                v.push(b';');
            }
            v.truncate(100);
            v
        })
        .collect();
    (keys, values)
}

fn ours_encode(enc: &mut RecordBatchEncoder, codec: Compression, recs: &[RecordOut<'_>], out: &mut BytesMut) {
    out.clear();
    let meta = BatchMeta {
        compression: codec,
        ..BatchMeta::default()
    };
    enc.encode(out, &meta, recs).unwrap();
}

fn kp_codec(c: Compression) -> kp::Compression {
    match c {
        Compression::None => kp::Compression::None,
        Compression::Gzip => kp::Compression::Gzip,
        Compression::Snappy => kp::Compression::Snappy,
        Compression::Lz4 => kp::Compression::Lz4,
        Compression::Zstd => kp::Compression::Zstd,
        _ => unreachable!(),
    }
}

fn ours_codec(c: kp::Compression) -> Compression {
    match c {
        kp::Compression::None => Compression::None,
        kp::Compression::Gzip => Compression::Gzip,
        kp::Compression::Snappy => Compression::Snappy,
        kp::Compression::Lz4 => Compression::Lz4,
        kp::Compression::Zstd => Compression::Zstd,
    }
}

fn kp_decode(batch: &Bytes) -> kp::RecordSet {
    let mut buf = batch.clone();
    kp::RecordBatchDecoder::decode_with_custom_compression(
        &mut buf,
        Some(|b: &mut Bytes, c: kp::Compression| -> anyhow::Result<Bytes> {
            match c {
                kp::Compression::None => Ok(b.clone()),
                c => Ok(Bytes::from(compression::decompress(ours_codec(c), b, 64 << 20)?)),
            }
        }),
    )
    .unwrap()
}

/// kafka-protocol's plain decoder (no hook): uncompressed batches only, as
/// its built-in codecs are not enabled here.
fn kp_decode_plain(batch: &Bytes) -> kp::RecordSet {
    let mut buf = batch.clone();
    kp::RecordBatchDecoder::decode(&mut buf).unwrap()
}

/// kafka-protocol's plain encoder (no hook), its fastest path: it writes the
/// records straight into `out`. Uncompressed only, as above.
fn kp_encode_plain(records: &[kp::Record], out: &mut BytesMut) {
    out.clear();
    let opts = kp::RecordEncodeOptions {
        version: 2,
        compression: kp::Compression::None,
    };
    kp::RecordBatchEncoder::encode(out, records.iter(), &opts).unwrap();
}

fn kp_encode(records: &[kp::Record], codec: Compression, out: &mut BytesMut) {
    out.clear();
    let opts = kp::RecordEncodeOptions {
        version: 2,
        compression: kp_codec(codec),
    };
    kp::RecordBatchEncoder::encode_with_custom_compression(
        out,
        records.iter(),
        &opts,
        Some(
            |src: &mut BytesMut, dst: &mut BytesMut, c: kp::Compression| -> anyhow::Result<()> {
                let mut v = Vec::new();
                compression::compress(ours_codec(c), src, &mut v)?;
                dst.extend_from_slice(&v);
                Ok(())
            },
        ),
    )
    .unwrap();
}

/// The same records in both libraries' input types.
fn kp_records(keys: &[Vec<u8>], values: &[Vec<u8>]) -> Vec<kp::Record> {
    (0..N)
        .map(|i| kp::Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: kp::TimestampType::Creation,
            offset: i as i64,
            sequence: -1,
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(Bytes::from(keys[i].clone())),
            value: Some(Bytes::from(values[i].clone())),
            headers: Default::default(),
        })
        .collect()
}

fn record_outs<'a>(keys: &'a [Vec<u8>], values: &'a [Vec<u8>]) -> Vec<RecordOut<'a>> {
    (0..N)
        .map(|i| RecordOut {
            timestamp: 1_700_000_000_000 + i as i64,
            key: Some(&keys[i]),
            value: Some(&values[i]),
            headers: &[],
        })
        .collect()
}

fn bench<M: Measurement + 'static>(c: &mut Criterion<M>, label: &str) {
    let (keys, values) = payloads();
    let outs = record_outs(&keys, &values);
    let kp_records = kp_records(&keys, &values);
    let mut enc = RecordBatchEncoder::new();
    for codec in CODECS {
        let mut out = BytesMut::new();
        ours_encode(&mut enc, codec, &outs, &mut out);
        let batch = out.freeze();
        // Both decoders must agree on the bytes before we time them.
        let theirs = kp_decode(&batch);
        let ours = RecordBatch::decode_exact(&batch, &DecodeOptions::default())
            .unwrap()
            .decode_records()
            .unwrap();
        assert_eq!(theirs.records.len(), ours.len());
        assert_eq!(theirs.records[999].value, ours[999].value);

        let mut g = c.benchmark_group(format!("{label}/decode/{}", codec.name()));
        g.throughput(Throughput::Elements(N as u64));
        g.bench_function(BenchmarkId::new("clink_borrowed", N), |b| {
            b.iter(|| black_box(clink_decode_borrowed(black_box(&batch))))
        });
        g.bench_function(BenchmarkId::new("clink_owned", N), |b| {
            b.iter(|| black_box(clink_decode_owned(black_box(&batch))))
        });
        g.bench_function(BenchmarkId::new("kafka_protocol", N), |b| {
            b.iter(|| black_box(kp_decode(black_box(&batch))))
        });
        if codec == Compression::None {
            g.bench_function(BenchmarkId::new("kafka_protocol_plain", N), |b| {
                b.iter(|| black_box(kp_decode_plain(black_box(&batch))))
            });
        }
        g.finish();

        let mut g = c.benchmark_group(format!("{label}/encode/{}", codec.name()));
        g.throughput(Throughput::Elements(N as u64));
        let mut out = BytesMut::with_capacity(256 * 1024);
        g.bench_function(BenchmarkId::new("clink", N), |b| {
            b.iter(|| {
                ours_encode(&mut enc, codec, black_box(&outs), &mut out);
                black_box(out.len())
            })
        });
        let mut out = BytesMut::with_capacity(256 * 1024);
        g.bench_function(BenchmarkId::new("kafka_protocol", N), |b| {
            b.iter(|| {
                kp_encode(black_box(&kp_records), codec, &mut out);
                black_box(out.len())
            })
        });
        if codec == Compression::None {
            let mut out = BytesMut::with_capacity(256 * 1024);
            g.bench_function(BenchmarkId::new("kafka_protocol_plain", N), |b| {
                b.iter(|| {
                    kp_encode_plain(black_box(&kp_records), &mut out);
                    black_box(out.len())
                })
            });
        }
        g.finish();
    }
}

fn clink_decode_borrowed(batch: &Bytes) -> usize {
    let batch = RecordBatch::decode_exact(batch, &DecodeOptions::default()).unwrap();
    let mut sum = 0usize;
    for r in batch.records() {
        let r = r.unwrap();
        sum += r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len) + r.offset as usize;
    }
    sum
}

fn clink_decode_owned(batch: &Bytes) -> usize {
    let batch = RecordBatch::decode_exact(batch, &DecodeOptions::default()).unwrap();
    batch.decode_records().unwrap().len()
}

/// Runs `op` `iterations` times. The only code callgrind counts in
/// `RECORD_BATCH_CALLGRIND` mode (`--toggle-collect='*callgrind_measure*'`).
#[inline(never)]
fn callgrind_measure(iterations: u64, op: &mut dyn FnMut() -> usize) -> usize {
    let mut sum = 0;
    for _ in 0..iterations {
        sum += black_box(op());
    }
    sum
}

/// `RECORD_BATCH_CALLGRIND=OP/CODEC/IMPL[/ITERATIONS]`: one case, no criterion.
fn callgrind(selector: &str) {
    let parts: Vec<&str> = selector.split('/').collect();
    let (op, codec_name, imp) = match parts[..] {
        [op, codec, imp] | [op, codec, imp, _] => (op, codec, imp),
        _ => panic!("RECORD_BATCH_CALLGRIND: expected OP/CODEC/IMPL[/ITERATIONS], got {selector:?}"),
    };
    let iterations: u64 = parts.get(3).map_or(100, |n| n.parse().expect("ITERATIONS: an integer"));
    let codec = CODECS
        .into_iter()
        .find(|c| c.name() == codec_name)
        .unwrap_or_else(|| panic!("CODEC: one of none, gzip, snappy, lz4, zstd, got {codec_name:?}"));
    let (keys, values) = payloads();
    let outs = record_outs(&keys, &values);
    let kp_records = kp_records(&keys, &values);
    let mut enc = RecordBatchEncoder::new();
    let mut out = BytesMut::with_capacity(256 * 1024);
    ours_encode(&mut enc, codec, &outs, &mut out);
    let batch = out.split().freeze();
    let mut op: Box<dyn FnMut() -> usize + '_> = match (op, imp) {
        ("decode", "clink_borrowed") => Box::new(|| clink_decode_borrowed(black_box(&batch))),
        ("decode", "clink_owned") => Box::new(|| clink_decode_owned(black_box(&batch))),
        ("decode", "kafka_protocol") => Box::new(|| kp_decode(black_box(&batch)).records.len()),
        ("decode", "kafka_protocol_plain") if codec == Compression::None => {
            Box::new(|| kp_decode_plain(black_box(&batch)).records.len())
        }
        ("encode", "clink") => Box::new(|| {
            ours_encode(&mut enc, codec, black_box(&outs), &mut out);
            out.len()
        }),
        ("encode", "kafka_protocol") => Box::new(|| {
            kp_encode(black_box(&kp_records), codec, &mut out);
            out.len()
        }),
        ("encode", "kafka_protocol_plain") if codec == Compression::None => Box::new(|| {
            kp_encode_plain(black_box(&kp_records), &mut out);
            out.len()
        }),
        _ => panic!(
            "RECORD_BATCH_CALLGRIND: no case {op}/{codec_name}/{imp}; decode: clink_borrowed, clink_owned, \
             kafka_protocol, kafka_protocol_plain (none only); encode: clink, kafka_protocol, kafka_protocol_plain (none only)"
        ),
    };
    // One untimed pass first, so buffers are grown before counting, as
    // criterion's warm-up does.
    op();
    let sum = callgrind_measure(iterations, &mut *op);
    println!("{selector}: {iterations} iterations of {N} records (checksum {sum})");
}

/// Process CPU time as a criterion measurement, so the CPU cost per record
/// is reported beside wall time.
struct CpuTime;

struct NanosFormatter;

impl ValueFormatter for NanosFormatter {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "ns (cpu)"
    }
    fn scale_throughputs(&self, _typical: f64, throughput: &Throughput, values: &mut [f64]) -> &'static str {
        if let Throughput::Elements(n) = throughput {
            for v in values.iter_mut() {
                *v /= *n as f64;
            }
        }
        "cpu ns/record"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

impl Measurement for CpuTime {
    type Intermediate = cpu_time::ProcessTime;
    type Value = Duration;
    fn start(&self) -> Self::Intermediate {
        cpu_time::ProcessTime::now()
    }
    fn end(&self, i: Self::Intermediate) -> Self::Value {
        i.elapsed()
    }
    fn add(&self, a: &Self::Value, b: &Self::Value) -> Self::Value {
        *a + *b
    }
    fn zero(&self) -> Self::Value {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Self::Value) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &NanosFormatter
    }
}

fn wall(c: &mut Criterion) {
    bench(c, "wall");
}

fn cpu(c: &mut Criterion<CpuTime>) {
    bench(c, "cpu");
}

criterion_group! {
    name = wall_benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = wall
}
criterion_group! {
    name = cpu_benches;
    config = Criterion::default().with_measurement(CpuTime).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    targets = cpu
}
fn main() {
    if let Ok(selector) = std::env::var("RECORD_BATCH_CALLGRIND") {
        callgrind(&selector);
        return;
    }
    // What criterion_main!(wall_benches, cpu_benches) expands to.
    wall_benches();
    cpu_benches();
    Criterion::default().configure_from_args().final_summary();
}
