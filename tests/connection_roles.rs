//! Connections by role (issue 24, point 2): a producer and a consumer on
//! one `Cluster` use separate connections to the same broker, so a Produce
//! never queues behind a Fetch long-poll.
//!
//! The producer's acknowledgement latency (one record at a time, awaited)
//! is measured alone, then beside a consumer long-polling an empty topic
//! (`max_wait` 3 s) on the same `Cluster` and broker. Asserted: the Produce
//! and Fetch connections to the broker differ, and the p99 beside the
//! consumer stays far below the long-poll wait (with one shared connection
//! a Produce waits for the Fetch ahead of it, up to 3 s). The figures are
//! printed, not asserted (a shared 2-core machine).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, ConnectionRole, Consumer, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
};

const SENDS: usize = 200;
const LONG_POLL: Duration = Duration::from_secs(3);

/// p50 and p99 of `SENDS` acknowledged sends, one at a time.
async fn latencies(producer: &Producer, topic: &str) -> (Duration, Duration) {
    let mut took = Vec::with_capacity(SENDS);
    for i in 0..SENDS {
        let started = Instant::now();
        producer
            .send(ProducerRecord::new(topic, format!("v{i}")).with_partition(0))
            .await
            .expect("queued")
            .await
            .expect("acknowledged");
        took.push(started.elapsed());
    }
    took.sort();
    (took[SENDS / 2], took[SENDS * 99 / 100])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_polling_consumer_does_not_hold_back_the_producer_on_the_same_cluster() {
    let Some(brokers) = common::brokers() else { return };
    let cluster: Cluster = common::cluster(common::config(&brokers)).await;
    let produced = common::unique_topic("roles-produce");
    let idle = common::unique_topic("roles-idle");
    common::create_topic(&cluster, NewTopic::new(&produced, 1, 1)).await;
    common::create_topic(&cluster, NewTopic::new(&idle, 1, 1)).await;

    let producer = Producer::new(cluster.clone(), ProducerConfig::default().with_linger(Duration::ZERO))
        .await
        .expect("producer");
    // Warm up (connections, producer id).
    latencies(&producer, &produced).await;
    let alone = latencies(&producer, &produced).await;

    let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default().with_max_wait(LONG_POLL));
    consumer.assign_topic(&idle).await.expect("assign");
    consumer.seek_all(Offset::Latest).await.expect("seek");
    let stop = Arc::new(AtomicBool::new(false));
    let polls = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut polls = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let records = consumer.poll(Duration::from_millis(500)).await.expect("poll");
                assert!(records.is_empty(), "the idle topic had records");
                polls += 1;
            }
            (consumer, polls)
        })
    };
    // Let the first long-poll reach the broker.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let beside = latencies(&producer, &produced).await;
    stop.store(true, Ordering::SeqCst);
    let (consumer, polls) = tokio::time::timeout(Duration::from_secs(30), polls)
        .await
        .expect("the consumer stopped")
        .unwrap();
    drop(consumer);

    let leader = cluster.metadata().topics[&produced].partitions[0].leader;
    let produce = cluster.broker_for(leader, ConnectionRole::Produce).await.unwrap();
    let fetch = cluster.broker_for(leader, ConnectionRole::Fetch).await.unwrap();
    let control = cluster.broker_for(leader, ConnectionRole::Control).await.unwrap();
    println!(
        "producer ack latency p50/p99: alone {:?}/{:?}; beside a consumer long-polling {LONG_POLL:?} \
         ({polls} polls) on the same Cluster {:?}/{:?}",
        alone.0, alone.1, beside.0, beside.1
    );
    assert!(!produce.same_connection(&fetch), "Produce and Fetch share a connection");
    assert!(!produce.same_connection(&control) && !fetch.same_connection(&control));
    assert!(
        beside.1 < LONG_POLL / 3,
        "p99 beside the long-polling consumer is {:?}: a Produce waited behind a Fetch ({LONG_POLL:?})",
        beside.1
    );
    producer.close(Duration::from_secs(10)).await.ok();
}
