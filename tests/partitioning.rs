//! Keyed partitioning against the broker: records with the same key land on
//! the partition Java's murmur2 partitioner picks.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use clink_kafka::client::{ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};

/// `Utils.toPositive(Utils.murmur2(key)) % 7` from kafka-clients 4.4.0.
const JAVA_PARTITION_OF_7: &[(&str, i32)] = &[
    ("", 2),
    ("kafka", 3),
    ("a", 5),
    ("abc", 4),
    ("hello world", 2),
    ("key-0", 0),
    ("key-1", 5),
    ("key-42", 3),
    ("clink", 5),
    ("0123456789abcdef", 6),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_where_java_puts_them() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("keyed");
    common::create_topic(&cluster, NewTopic::new(&topic, 7, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut futures = Vec::new();
    // Each key three times: the same key always lands on the same partition.
    for round in 0..3 {
        for (key, want) in JAVA_PARTITION_OF_7 {
            let f = producer
                .send(ProducerRecord::new(&topic, format!("{round}")).with_key(key.to_string()))
                .await
                .unwrap();
            futures.push((*key, *want, f));
        }
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
    let mut per_partition: HashMap<i32, usize> = HashMap::new();
    for (key, want, f) in futures {
        let report = f.await.unwrap();
        assert_eq!(report.partition, want, "key {key:?}");
        *per_partition.entry(want).or_default() += 1;
    }
    // And the broker agrees: each partition holds exactly those keys.
    for (partition, count) in per_partition {
        let got = common::consume_exactly(
            &cluster,
            ConsumerConfig::default(),
            &topic,
            partition,
            Offset::Earliest,
            count,
        )
        .await;
        for r in got {
            let key = String::from_utf8(r.record.key.unwrap().to_vec()).unwrap();
            let want = JAVA_PARTITION_OF_7.iter().find(|(k, _)| *k == key).unwrap().1;
            assert_eq!(want, partition, "key {key:?} read from partition {partition}");
        }
    }
}

/// Unkeyed records stick to one partition only until that partition's
/// batch is sealed (KIP-480): a batch sealed by `linger` or a flush, not
/// only a full one, moves them on. Twenty flushed waves over 6 partitions
/// all landing on one partition has probability 6^-19.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unkeyed_records_move_on_when_their_batch_is_sealed() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("unkeyed");
    common::create_topic(&cluster, NewTopic::new(&topic, 6, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut per_partition: HashMap<i32, usize> = HashMap::new();
    for wave in 0..20 {
        let mut futures = Vec::new();
        for i in 0..5 {
            futures.push(
                producer
                    .send(ProducerRecord::new(&topic, format!("{wave}-{i}")))
                    .await
                    .unwrap(),
            );
        }
        producer.flush(Duration::from_secs(30)).await.unwrap();
        for f in futures {
            *per_partition.entry(f.await.unwrap().partition).or_default() += 1;
        }
    }
    assert!(
        per_partition.len() > 1,
        "100 unkeyed records in 20 sealed batches all went to one partition: {per_partition:?}"
    );
}
