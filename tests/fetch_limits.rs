//! Fetch size limits against the broker: `partition_max_bytes` and
//! `max_bytes` bound what one poll brings (one fetch round), every record
//! still arrives in order, and a record larger than both limits is not a
//! stall: the broker hands over the first batch whole (KIP-74), and so do
//! we.

mod common;

use std::time::{Duration, Instant};

use clink_kafka::client::{
    Consumer, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};

const RECORDS: usize = 120;
const VALUE: usize = 10 * 1024;
const BIG: usize = 200 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_are_bounded_by_the_fetch_limits_and_big_records_still_arrive() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("fetch-limits");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    // One record per batch (batch.size below one record), so the broker's
    // whole-batch granularity is one record.
    let producer = Producer::new(cluster.clone(), ProducerConfig::default().with_batch_size(1024))
        .await
        .unwrap();
    let mut acks = Vec::new();
    for i in 0..RECORDS {
        // Record 60 is bigger than every limit below.
        let size = if i == 60 { BIG } else { VALUE };
        let value = format!("{i:04}")
            .into_bytes()
            .into_iter()
            .chain(std::iter::repeat_n(b'.', size - 4));
        let value: Vec<u8> = value.collect();
        acks.push(
            producer
                .send(ProducerRecord::new(&topic, value).with_partition(0))
                .await
                .unwrap(),
        );
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    for a in acks {
        a.await.unwrap();
    }

    let partition_max_bytes = 24 * 1024;
    let mut consumer = Consumer::new(
        cluster.clone(),
        ConsumerConfig::default()
            .with_partition_max_bytes(partition_max_bytes)
            .with_max_bytes(32 * 1024),
    );
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer.seek(&topic, 0, Offset::Earliest).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    let mut polls = 0;
    while got.len() < RECORDS {
        assert!(
            Instant::now() < deadline,
            "only {} of {RECORDS} records in 60 s",
            got.len()
        );
        let batch = consumer.poll(Duration::from_millis(500)).await.unwrap();
        if batch.is_empty() {
            continue;
        }
        polls += 1;
        let bytes: usize = batch
            .iter()
            .map(|r| r.record.value.as_ref().map_or(0, |v| v.len()))
            .sum();
        let has_big = batch
            .iter()
            .any(|r| r.record.value.as_ref().is_some_and(|v| v.len() == BIG));
        if has_big {
            // The oversized record comes alone: it is the first batch of its fetch.
            assert_eq!(
                batch.len(),
                1,
                "the big record shared a poll with {} others",
                batch.len() - 1
            );
        } else {
            // Whole batches up to the partition limit, the first one always.
            assert!(
                bytes <= partition_max_bytes + VALUE,
                "one poll brought {bytes} bytes ({} records) past partition_max_bytes={partition_max_bytes}",
                batch.len()
            );
        }
        got.extend(batch);
    }
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.record.offset, i as i64);
        assert_eq!(&r.record.value.as_ref().unwrap()[..4], format!("{i:04}").as_bytes());
    }
    // 120 records of 10 KiB cannot come in fewer than ~50 bounded polls.
    assert!(
        polls >= RECORDS / 3,
        "{polls} polls for {RECORDS} records: the limits were not applied"
    );

    // With the defaults (50 MiB), far fewer polls are needed.
    let mut unbounded = Consumer::new(cluster.clone(), ConsumerConfig::default());
    unbounded.assign(&[TopicPartition::new(&topic, 0)]);
    unbounded.seek(&topic, 0, Offset::Earliest).await.unwrap();
    let mut n = 0;
    let mut default_polls = 0;
    while n < RECORDS {
        assert!(
            Instant::now() < deadline + Duration::from_secs(30),
            "default consumer stalled at {n}"
        );
        let batch = unbounded.poll(Duration::from_millis(500)).await.unwrap();
        if !batch.is_empty() {
            default_polls += 1;
            n += batch.len();
        }
    }
    assert!(
        default_polls < polls,
        "{default_polls} polls with the defaults vs {polls} bounded"
    );
}
