//! The consumer's non-blocking and async forms against the real broker:
//! `poll(Duration::ZERO)` in a bounded loop gets every record, `recv` gets
//! them one at a time in order, the record and batch `Stream`s get them
//! all, and a stream the caller does not read holds no more than the
//! fetches already sent (back-pressure, measured with the consumer's
//! buffered-bytes accounting).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, Consumer, ConsumerConfig, ConsumerRecord, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
};

const PARTITIONS: i32 = 3;

/// A topic with `per_partition` records in each of 3 partitions; each value
/// names its partition and index, padded to `pad` bytes.
async fn fixture(cluster: &Cluster, prefix: &str, per_partition: usize, pad: usize) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, PARTITIONS, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default().with_batch_size(16 * 1024))
        .await
        .unwrap();
    for i in 0..per_partition {
        for p in 0..PARTITIONS {
            let mut value = format!("p{p}-{i:05}-");
            while value.len() < pad {
                value.push_str(&format!(
                    "{:x}",
                    (i as u64 + value.len() as u64).wrapping_mul(0x9E37_79B9)
                ));
            }
            producer
                .send(ProducerRecord::new(&topic, value).with_partition(p))
                .await
                .unwrap();
        }
    }
    producer.flush(Duration::from_secs(60)).await.unwrap();
    topic
}

async fn consumer_at_start(cluster: &Cluster, topic: &str, config: ConsumerConfig) -> Consumer {
    let mut consumer = Consumer::new(cluster.clone(), config);
    consumer.assign_topic(topic).await.unwrap();
    consumer.seek_all(Offset::Earliest).await.unwrap();
    consumer
}

/// Every partition's offsets are exactly `0..per_partition`, in the order
/// they came, each value matching its offset.
fn check_in_order(got: &[ConsumerRecord], per_partition: usize) {
    let mut by_partition: BTreeMap<i32, Vec<&ConsumerRecord>> = BTreeMap::new();
    for r in got {
        by_partition.entry(r.partition).or_default().push(r);
    }
    assert_eq!(by_partition.len(), PARTITIONS as usize, "records of every partition");
    for (p, records) in by_partition {
        let offsets: Vec<i64> = records.iter().map(|r| r.record.offset).collect();
        let expected: Vec<i64> = (0..per_partition as i64).collect();
        assert!(
            offsets == expected,
            "partition {p}: offsets not 0..{per_partition} in order"
        );
        for r in records {
            let o = r.record.offset;
            assert!(
                r.record
                    .value
                    .as_ref()
                    .unwrap()
                    .starts_with(format!("p{p}-{o:05}-").as_bytes()),
                "{p}@{o}"
            );
        }
    }
}

/// On the default (one-thread) runtime: a caller that only ever polls with
/// a zero timeout still gets everything.
#[tokio::test]
async fn poll_zero_in_a_bounded_loop_gets_every_record() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    const PER: usize = 400;
    let topic = fixture(&cluster, "poll-zero", PER, 40).await;
    let mut consumer = consumer_at_start(
        &cluster,
        &topic,
        ConsumerConfig::default()
            .with_max_poll_records(50)
            .with_partition_max_bytes(4096),
    )
    .await;
    let mut got = Vec::new();
    let (mut calls, mut empty) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < PER * PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "poll(ZERO): {} of {} records in 60 s ({calls} calls)",
            got.len(),
            PER * PARTITIONS as usize
        );
        let records = consumer.poll(Duration::ZERO).await.unwrap();
        calls += 1;
        if records.is_empty() {
            empty += 1;
        }
        assert!(records.len() <= 50, "max_poll_records");
        got.extend(records);
    }
    check_in_order(&got, PER);
    eprintln!("poll(ZERO): {} records in {calls} calls ({empty} empty)", got.len());
    // Nothing beyond the end.
    let extra = consumer.poll(Duration::from_millis(300)).await.unwrap();
    assert!(extra.is_empty(), "{} records beyond the end", extra.len());
}

/// `poll(ZERO)` does not wait: with nothing to hand over it returns at once
/// (generous bound: the broker is asked to wait 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_zero_does_not_wait_for_the_broker() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "poll-zero-empty", 0, 0).await;
    let mut consumer = consumer_at_start(
        &cluster,
        &topic,
        ConsumerConfig::default().with_max_wait(Duration::from_secs(5)),
    )
    .await;
    for _ in 0..20 {
        let started = Instant::now();
        let records = consumer.poll(Duration::ZERO).await.unwrap();
        assert!(records.is_empty());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "poll(ZERO) waited {:?} (the broker's long poll is 5 s)",
            started.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recv_gets_every_record_in_order() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    const PER: usize = 300;
    let topic = fixture(&cluster, "recv", PER, 30).await;
    let mut consumer = consumer_at_start(
        &cluster,
        &topic,
        ConsumerConfig::default().with_partition_max_bytes(2048),
    )
    .await;
    let mut got = Vec::new();
    for _ in 0..PER * PARTITIONS as usize {
        let r = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("a record within 30 s")
            .unwrap();
        got.push(r);
    }
    check_in_order(&got, PER);
    assert_eq!(
        consumer.position(&topic, 0),
        Some(PER as i64),
        "positions move past what recv handed over"
    );
    // Nothing beyond the end.
    assert!(tokio::time::timeout(Duration::from_millis(500), consumer.recv())
        .await
        .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_and_batch_streams_get_every_record() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    const PER: usize = 300;
    let total = PER * PARTITIONS as usize;
    let topic = fixture(&cluster, "stream", PER, 30).await;
    let config = ConsumerConfig::default()
        .with_partition_max_bytes(2048)
        .with_max_poll_records(64);

    let mut consumer = consumer_at_start(&cluster, &topic, config.clone()).await;
    let mut got = Vec::new();
    {
        let mut stream = consumer.stream();
        while got.len() < total {
            let r = tokio::time::timeout(Duration::from_secs(30), common::next(&mut stream))
                .await
                .expect("a record within 30 s")
                .expect("the stream never ends")
                .unwrap();
            got.push(r);
        }
    }
    check_in_order(&got, PER);

    let mut consumer = consumer_at_start(&cluster, &topic, config).await;
    let mut got = Vec::new();
    let mut batches = 0;
    {
        let mut stream = consumer.batches();
        while got.len() < total {
            let batch = tokio::time::timeout(Duration::from_secs(30), common::next(&mut stream))
                .await
                .expect("a batch within 30 s")
                .expect("the stream never ends")
                .unwrap();
            assert!(!batch.is_empty() && batch.len() <= 64, "{} records", batch.len());
            batches += 1;
            got.extend(batch);
        }
    }
    check_in_order(&got, PER);
    assert!(batches >= total / 64, "{batches} batches");
    // The consumer is usable again once the stream is dropped.
    assert!(consumer.poll(Duration::from_millis(300)).await.unwrap().is_empty());
}

/// A stream the caller stops reading holds at most what the fetches
/// already sent bring: one answer per broker being handed over and one
/// pipelined, each at most `fetch.max.bytes` (plus one batch the broker
/// may send past it). The topic holds far more than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_stream_holds_no_more_than_the_buffer_bound() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    const PER: usize = 2000;
    const PAD: usize = 500;
    let topic = fixture(&cluster, "stream-backpressure", PER, PAD).await;
    let topic_bytes = PER * PARTITIONS as usize * PAD;
    const MAX_BYTES: usize = 64 * 1024;
    let brokers_in_cluster = cluster.metadata().brokers.len().max(1);
    // Two answers per broker, each up to fetch.max.bytes plus one producer
    // batch (16 KiB, with its overhead) past it.
    let bound = brokers_in_cluster * 2 * (MAX_BYTES + 20 * 1024);
    assert!(topic_bytes > 10 * bound, "the topic must dwarf the bound");
    let mut consumer = consumer_at_start(
        &cluster,
        &topic,
        ConsumerConfig::default()
            .with_max_bytes(MAX_BYTES)
            .with_partition_max_bytes(MAX_BYTES),
    )
    .await;
    let mut got = Vec::new();
    let mut stream = consumer.stream();
    // Read a little, so fetches are under way.
    for _ in 0..10 {
        got.push(common::next(&mut stream).await.unwrap().unwrap());
    }
    // Then stop reading for 3 s (the caller is busy: not a wait for an
    // event), sampling what the consumer holds.
    let mut peak = 0usize;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        peak = peak.max(stream.buffered_bytes());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("unread stream: peak {peak} bytes held (bound {bound}, topic {topic_bytes})");
    assert!(peak > 0, "the accounting saw nothing: it measured nothing");
    assert!(peak <= bound, "an unread stream held {peak} bytes (bound {bound})");
    // Reading again, every record arrives, and the bound holds throughout.
    let total = PER * PARTITIONS as usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got.len() < total {
        assert!(Instant::now() < deadline, "{} of {total} in 120 s", got.len());
        got.push(common::next(&mut stream).await.unwrap().unwrap());
        let held = stream.buffered_bytes();
        assert!(held <= bound, "held {held} bytes while read (bound {bound})");
    }
    drop(stream);
    check_in_order(&got, PER);
}
