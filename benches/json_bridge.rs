//! The SQL source's JSON row bridge, per record: the row decode
//! (`json_string_to_row`: a `serde_json::Value` per record, then a row)
//! against the columnar decode (`columnar_decode = true`: typed column
//! vectors straight from the deserializer), on a batch of 2,048 records of
//! a seven-column capable schema (BIGINT, STRING, DOUBLE, BOOLEAN,
//! TIMESTAMP WITH TIME ZONE, DATE, BYTES; about 200 bytes each, with an
//! ignored extra field). Also the worst case of the columnar setting: a
//! batch refused at its last record, so both decodes run (what the damper
//! bounds), and the conversion of a column batch back to rows.
//!
//! ```sh
//! cargo bench --bench json_bridge
//! ```
//!
//! A benchmark, not a test: nothing asserts a timing.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;

use clink_kafka::connector::columnar::ColumnarPlan;
use clink_kafka::connector::sql::{decode_row, Column, SqlType};

const BATCH: usize = 2048;

fn columns() -> Vec<Column> {
    vec![
        Column::new("id", SqlType::Integer),
        Column::new("url", SqlType::String),
        Column::new("score", SqlType::Double),
        Column::new("bot", SqlType::Boolean),
        Column::new("at", SqlType::Timestamp { with_time_zone: true }),
        Column::new("day", SqlType::Date),
        Column::new("raw", SqlType::Bytes),
    ]
}

fn texts() -> Vec<String> {
    (0..BATCH)
        .map(|i| {
            format!(
                r#"{{"id":{i},"url":"/products/{i}/details?ref=campaign-{}","score":{}.25,"bot":{},"at":"2024-03-01T12:{:02}:{:02}.{:03}Z","day":"2024-03-{:02}","raw":"AAECAwQFBgcICQ==","agent":{{"ua":"Mozilla/5.0","v":[1,2,3]}}}}"#,
                i % 97,
                i % 1000,
                i % 7 == 0,
                i / 60 % 60,
                i % 60,
                i % 1000,
                i % 28 + 1
            )
        })
        .collect()
}

fn bridge(c: &mut Criterion) {
    let columns = columns();
    let texts = texts();
    let plan = ColumnarPlan::new(&columns).unwrap();
    let mut group = c.benchmark_group("json_bridge");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("row_decode", |b| {
        b.iter(|| {
            let rows: Vec<_> = texts.iter().map(|t| decode_row(&columns, t).unwrap()).collect();
            black_box(rows)
        })
    });
    group.bench_function("columnar_decode", |b| {
        b.iter(|| black_box(plan.decode(texts.iter().map(String::as_str)).unwrap()))
    });
    let mut refused = texts.clone();
    refused[BATCH - 1] = r#"{"id":"not a number"}"#.to_owned();
    group.bench_function("columnar_refused_then_row", |b| {
        b.iter(|| {
            assert!(plan.decode(refused.iter().map(String::as_str)).is_none());
            let rows: Vec<_> = refused.iter().map(|t| decode_row(&columns, t)).collect();
            black_box(rows)
        })
    });
    let batch = plan.decode(texts.iter().map(String::as_str)).unwrap();
    group.bench_function("columns_to_rows", |b| {
        b.iter_batched(
            || batch.clone(),
            |batch| black_box(batch.to_rows()),
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bridge);
criterion_main!(benches);
