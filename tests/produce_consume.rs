//! Produce + consume round trips over the plaintext listener: every record
//! field (keys, null key, null value, headers with null values, explicit
//! timestamps, a 0-byte and a 1 MiB value) and every compression codec.

mod common;

use std::time::Duration;

use bytes::Bytes;
use clink_kafka::client::{
    Acks, ConsumerConfig, IsolationLevel, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
};
use clink_kafka::wire::compression::Compression;

/// 1 MiB exactly. The broker's default `max.message.bytes` (1,048,588) is
/// too small for a batch holding it, so the topic is created with
/// `max.message.bytes=2097152`.
const ONE_MIB: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_record_field_round_trips() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("fields");
    common::create_topic(
        &cluster,
        NewTopic::new(&topic, 1, 1).with_config("max.message.bytes", "2097152"),
    )
    .await;
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig::default().with_max_record_size(2 * ONE_MIB),
    )
    .await
    .unwrap();
    let big: Bytes = (0..ONE_MIB).map(|i| (i % 251) as u8).collect::<Vec<u8>>().into();
    let ts = 1_700_000_000_000i64;
    let records = vec![
        ProducerRecord::new(&topic, "v0").with_key("k0").with_timestamp(ts),
        // Null key.
        ProducerRecord::new(&topic, "no key").with_timestamp(ts + 1),
        // Null value (a tombstone).
        ProducerRecord {
            topic: topic.as_str().into(),
            key: Some(Bytes::from_static(b"tombstone")),
            value: None,
            timestamp: Some(ts + 2),
            ..ProducerRecord::default()
        },
        // Headers, one with a null value, one repeated key.
        ProducerRecord::new(&topic, "with headers")
            .with_key("k3")
            .with_timestamp(ts + 3)
            .with_header("trace", Some(Bytes::from_static(b"abc")))
            .with_header("empty", None)
            .with_header("trace", Some(Bytes::from_static(b"def"))),
        // A 0-byte value (not null).
        ProducerRecord::new(&topic, Bytes::new())
            .with_key("zero")
            .with_timestamp(ts + 4),
        // 1 MiB.
        ProducerRecord::new(&topic, big.clone())
            .with_key("big")
            .with_timestamp(ts + 5),
        // Timestamp chosen by the producer (now).
        ProducerRecord::new(&topic, "now").with_key("k6"),
    ];
    let mut futures = Vec::new();
    for r in records.clone() {
        futures.push(producer.send(r.with_partition(0)).await.unwrap());
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    let mut offsets = Vec::new();
    for f in futures {
        let report = f.await.unwrap();
        assert_eq!(report.partition, 0);
        offsets.push(report.offset);
    }
    assert_eq!(offsets, (0..records.len() as i64).collect::<Vec<_>>());

    let got = common::consume_exactly(
        &cluster,
        ConsumerConfig::default(),
        &topic,
        0,
        Offset::Earliest,
        records.len(),
    )
    .await;
    for (i, (sent, r)) in records.iter().zip(&got).enumerate() {
        assert_eq!(r.record.offset, i as i64);
        assert_eq!(r.record.key, sent.key, "record {i} key");
        assert_eq!(r.record.value, sent.value, "record {i} value");
        match sent.timestamp {
            Some(t) => assert_eq!(r.record.timestamp, t, "record {i} timestamp"),
            None => assert!(
                r.record.timestamp > ts,
                "record {i}: producer-chosen timestamp {}",
                r.record.timestamp
            ),
        }
        let headers: Vec<(Vec<u8>, Option<Vec<u8>>)> = r
            .record
            .headers
            .iter()
            .map(|h| (h.key.to_vec(), h.value.as_ref().map(|v| v.to_vec())))
            .collect();
        let want: Vec<(Vec<u8>, Option<Vec<u8>>)> = sent
            .headers
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_ref().map(|v| v.to_vec())))
            .collect();
        assert_eq!(headers, want, "record {i} headers");
    }
    assert_eq!(
        got[4].record.value.as_deref(),
        Some(&b""[..]),
        "0-byte value is empty, not null"
    );
    assert_eq!(got[5].record.value.as_ref().map(Bytes::len), Some(ONE_MIB));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_compression_codec_round_trips() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("codecs");
    common::create_topic(&cluster, NewTopic::new(&topic, Compression::ALL.len() as i32, 1)).await;
    // One partition per codec; the topic's compression.type is `producer`,
    // so the broker keeps each batch as written.
    for (p, codec) in Compression::ALL.into_iter().enumerate() {
        let producer = Producer::new(
            cluster.clone(),
            ProducerConfig::default()
                .with_compression(codec)
                .with_linger(Duration::from_millis(20)),
        )
        .await
        .unwrap();
        let mut futures = Vec::new();
        for i in 0..500 {
            let value = format!("{codec} record {i} {}", "payload ".repeat(i % 7));
            let r = ProducerRecord::new(&topic, value)
                .with_key(format!("{i}"))
                .with_partition(p as i32);
            futures.push(producer.send(r).await.unwrap());
        }
        producer.flush(Duration::from_secs(30)).await.unwrap();
        for f in futures {
            f.await.unwrap_or_else(|e| panic!("{codec}: {e}"));
        }
        let got = common::consume_exactly(
            &cluster,
            ConsumerConfig::default().with_isolation(IsolationLevel::ReadCommitted),
            &topic,
            p as i32,
            Offset::Earliest,
            500,
        )
        .await;
        for (i, r) in got.iter().enumerate() {
            let value = format!("{codec} record {i} {}", "payload ".repeat(i % 7));
            assert_eq!(r.record.value.as_deref(), Some(value.as_bytes()), "{codec} record {i}");
            assert_eq!(r.record.key.as_deref(), Some(format!("{i}").as_bytes()));
            assert_eq!(r.batch.compression().unwrap(), codec, "{codec}: batch attribute");
        }
    }
}

/// `compression.level` reaches the batches on the broker: the same 2,000
/// records, each run one batch, take fewer bytes at gzip 9 than at 1, and
/// more than raw at gzip 0 (stored); fewer at zstd 12 than at 1; and every
/// level reads back intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_level_changes_the_batches_on_the_broker() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("levels");
    let runs = [
        (Compression::Gzip, 0),
        (Compression::Gzip, 1),
        (Compression::Gzip, 9),
        (Compression::Zstd, 1),
        (Compression::Zstd, 12),
    ];
    common::create_topic(&cluster, NewTopic::new(&topic, runs.len() as i32, 1)).await;
    // Text that compresses about 3x: words drawn by a fixed LCG.
    const WORDS: [&str; 16] = [
        "order",
        "id",
        "user",
        "amount",
        "currency",
        "EUR",
        "status",
        "shipped",
        "pending",
        "warehouse",
        "north",
        "south",
        "priority",
        "express",
        "standard",
        "item",
    ];
    let mut seed = 7u64;
    let values: Vec<String> = (0..2000)
        .map(|i| {
            let mut v = format!("{{\"n\":{i},");
            for _ in 0..12 {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                v.push_str(WORDS[(seed >> 60) as usize]);
                v.push_str(&format!(":{},", (seed >> 40) % 10_000));
            }
            v
        })
        .collect();
    let raw: usize = values.iter().map(String::len).sum();
    let mut sizes = Vec::new();
    for (p, (codec, level)) in runs.into_iter().enumerate() {
        let producer = Producer::new(
            cluster.clone(),
            ProducerConfig::default()
                .with_compression(codec)
                .with_compression_level(level)
                .with_batch_size(4 << 20)
                .with_linger(Duration::from_millis(200)),
        )
        .await
        .unwrap();
        let mut futures = Vec::new();
        for v in &values {
            futures.push(
                producer
                    .send(ProducerRecord::new(&topic, v.clone()).with_partition(p as i32))
                    .await
                    .unwrap(),
            );
        }
        producer.flush(Duration::from_secs(30)).await.unwrap();
        for f in futures {
            f.await.unwrap_or_else(|e| panic!("{codec} {level}: {e}"));
        }
        let got = common::consume_exactly(
            &cluster,
            ConsumerConfig::default(),
            &topic,
            p as i32,
            Offset::Earliest,
            values.len(),
        )
        .await;
        let mut batches = std::collections::BTreeMap::new();
        for (r, v) in got.iter().zip(&values) {
            assert_eq!(r.record.value.as_deref(), Some(v.as_bytes()), "{codec} {level}");
            assert_eq!(r.batch.compression().unwrap(), codec);
            batches.insert(r.batch.base_offset, r.batch.batch_length as usize);
        }
        let bytes: usize = batches.values().sum();
        eprintln!(
            "{codec} level {level}: {} batch(es), {bytes} B (raw values {raw} B)",
            batches.len()
        );
        sizes.push(bytes);
    }
    assert!(sizes[0] > raw, "gzip 0 stores: {} B vs {raw} B raw", sizes[0]);
    assert!(sizes[2] < sizes[1], "gzip 9 ({} B) < gzip 1 ({} B)", sizes[2], sizes[1]);
    assert!(
        sizes[4] < sizes[3],
        "zstd 12 ({} B) < zstd 1 ({} B)",
        sizes[4],
        sizes[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_one_and_zero_deliver() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("acks");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    for (p, acks) in [(0, Acks::Leader), (1, Acks::None)] {
        let producer = Producer::new(
            cluster.clone(),
            ProducerConfig::default().with_acks(acks).with_idempotent(false),
        )
        .await
        .unwrap();
        assert!(producer.identity().is_none());
        let mut futures = Vec::new();
        for i in 0..100 {
            futures.push(
                producer
                    .send(ProducerRecord::new(&topic, format!("{i}")).with_partition(p))
                    .await
                    .unwrap(),
            );
        }
        producer.flush(Duration::from_secs(30)).await.unwrap();
        for (i, f) in futures.into_iter().enumerate() {
            let report = f.await.unwrap();
            match acks {
                Acks::None => assert_eq!(report.offset, -1, "acks=0 gives no offsets"),
                _ => assert_eq!(report.offset, i as i64),
            }
        }
        let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, p, Offset::Earliest, 100).await;
        assert!(
            got.iter().all(|r| r.batch.producer_id == -1),
            "non-idempotent batches carry no producer id"
        );
    }
    // The idempotent producer refuses acks != all.
    let err = Producer::new(cluster.clone(), ProducerConfig::default().with_acks(Acks::Leader))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("acks"), "{err}");
}
