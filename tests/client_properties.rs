//! The client configured with librdkafka / Java property names
//! (`ClientProperties::parse`, `…::from_properties`) against the real
//! broker: a transactional producer and a consumer built only from
//! properties, each property's effect observed (read_committed hides the
//! aborted transaction, `max.poll.records` bounds each poll,
//! `auto.offset.reset=earliest` starts at the beginning without a seek,
//! `compression.type` reaches the batches, `client.id` the broker).

mod common;

use std::time::{Duration, Instant};

use clink_kafka::client::properties::ClientProperties;
use clink_kafka::client::{
    Cluster, Consumer, ConsumerConfig, NewTopic, ProducerConfig, ProducerRecord, TopicPartition, TransactionalProducer,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_and_consumer_built_from_properties_act_on_them() {
    let Some(brokers) = common::brokers() else { return };
    let topic = common::unique_topic("props");
    let transactional_id = format!("{topic}-tx");
    let producer_props = [
        ("bootstrap.servers", brokers.as_str()),
        ("client.id", "props-producer"),
        ("acks", "all"),
        ("enable.idempotence", "true"),
        ("compression.type", "lz4"),
        ("linger.ms", "10"),
        ("batch.size", "65536"),
        ("max.in.flight.requests.per.connection", "5"),
        ("transactional.id", transactional_id.as_str()),
        ("transaction.timeout.ms", "30000"),
        ("socket.connection.setup.timeout.ms", "5000"),
        ("statistics.interval.ms", "1000"), // accepted, warned about, no effect
    ];
    let p = ClientProperties::parse(producer_props).expect("producer properties");
    assert_eq!(p.ignored, vec!["statistics.interval.ms"]);
    assert_eq!(p.producer.compression, clink_kafka::wire::compression::Compression::Lz4);
    let cluster = common::cluster(p.client.clone()).await;
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let txn = p.transaction.clone().expect("transactional.id makes a TxnConfig");
    assert_eq!(txn.transaction_timeout, Duration::from_secs(30));
    let mut producer = TransactionalProducer::init(cluster.clone(), p.producer.clone(), txn)
        .await
        .expect("init from properties");
    assert_eq!(producer.transactional_id(), transactional_id);
    // One committed transaction of 5, one aborted of 3.
    for (values, commit) in [(0..5, true), (5..8, false)] {
        let txn = producer.begin().await.expect("begin");
        let mut deliveries = Vec::new();
        for i in values {
            deliveries.push(
                txn.send(ProducerRecord::new(&topic, format!("v{i}")).with_partition(0))
                    .await
                    .unwrap(),
            );
        }
        if commit {
            txn.commit().await.expect("commit");
        } else {
            txn.abort().await.expect("abort");
        }
        drop(deliveries);
    }

    // The consumer: read_committed (librdkafka's default, given anyway),
    // earliest without a seek, at most 2 records per poll.
    let (client, consumer_config) = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", brokers.as_str()),
        ("client.id", "props-consumer"),
        ("isolation.level", "read_committed"),
        ("auto.offset.reset", "earliest"),
        ("max.poll.records", "2"),
        ("fetch.wait.max.ms", "100"),
        ("enable.auto.commit", "false"),
    ])
    .expect("consumer properties");
    assert_eq!(consumer_config.max_poll_records, 2);
    let consumer_cluster = common::cluster(client).await;
    let mut consumer = Consumer::new(consumer_cluster, consumer_config);
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut values = Vec::new();
    let mut largest_poll = 0;
    while values.len() < 5 && Instant::now() < deadline {
        let got = consumer.poll(Duration::from_millis(500)).await.expect("poll");
        largest_poll = largest_poll.max(got.len());
        for r in &got {
            assert_eq!(
                r.batch.compression().unwrap(),
                clink_kafka::wire::compression::Compression::Lz4
            );
            assert!(
                r.batch.is_transactional(),
                "transactional.id made the batches transactional"
            );
        }
        values.extend(
            got.iter()
                .map(|r| String::from_utf8_lossy(r.record.value.as_deref().unwrap_or_default()).into_owned()),
        );
    }
    // Nothing more: the aborted three stay hidden.
    for _ in 0..3 {
        let got = consumer.poll(Duration::from_millis(300)).await.expect("poll");
        values.extend(
            got.iter()
                .map(|r| String::from_utf8_lossy(r.record.value.as_deref().unwrap_or_default()).into_owned()),
        );
    }
    assert_eq!(
        values,
        ["v0", "v1", "v2", "v3", "v4"],
        "committed records only, from the start"
    );
    assert!(
        largest_poll <= 2,
        "max.poll.records=2, yet a poll returned {largest_poll}"
    );

    // read_uncommitted, by property, sees the aborted ones too.
    let (client, config) = ConsumerConfig::from_properties(&[
        ("bootstrap.servers", brokers.as_str()),
        ("isolation.level", "read_uncommitted"),
        ("auto.offset.reset", "earliest"),
    ])
    .unwrap();
    let all = read_all(common::cluster(client).await, config, &topic, 8).await;
    for i in 5..8 {
        assert!(
            all.contains(&format!("v{i}")),
            "read_uncommitted sees aborted v{i}: {all:?}"
        );
    }

    // A plain producer from properties too, and a refusal naming the property.
    let (client, config) = ProducerConfig::from_properties(&[
        ("bootstrap.servers", brokers.as_str()),
        ("linger.ms", "0"),
        ("acks", "1"),
        ("enable.idempotence", "false"),
    ])
    .unwrap();
    let plain = clink_kafka::client::Producer::new(common::cluster(client).await, config)
        .await
        .unwrap();
    let report = plain
        .send(ProducerRecord::new(&topic, "plain").with_partition(0))
        .await
        .unwrap()
        .await
        .expect("acks=1 delivery");
    assert!(report.offset >= 8);
    let e = ProducerConfig::from_properties(&[("bootstrap.servers", brokers.as_str()), ("lingr.ms", "5")]).unwrap_err();
    assert!(e.to_string().contains("did you mean \"linger.ms\""), "{e}");
}

async fn read_all(cluster: Cluster, config: ConsumerConfig, topic: &str, at_least: usize) -> Vec<String> {
    let mut consumer = Consumer::new(cluster, config);
    consumer.assign(&[TopicPartition::new(topic, 0)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut values = Vec::new();
    while values.len() < at_least && Instant::now() < deadline {
        let got = consumer.poll(Duration::from_millis(500)).await.expect("poll");
        values.extend(
            got.iter()
                .map(|r| String::from_utf8_lossy(r.record.value.as_deref().unwrap_or_default()).into_owned()),
        );
    }
    values
}
