//! Cancel safety against the real broker: `Producer::send`, `Producer::flush`
//! and the transactional `commit` / `abort` are dropped at a sweep of points
//! (a `tokio::time::timeout` of growing length around each call), and the
//! topic is read back: every record whose `send` returned is there exactly
//! once, no record whose `send` was dropped is, and after a dropped commit
//! (or abort) the call can be made again and ends the transaction once.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use clink_kafka::client::{
    ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord, TransactionalProducer, TxnConfig,
};

/// Reads `count` records of `topic[0]` and returns their values.
async fn values(cluster: &clink_kafka::client::Cluster, topic: &str, count: usize) -> Vec<String> {
    common::consume_exactly(cluster, ConsumerConfig::default(), topic, 0, Offset::Earliest, count)
        .await
        .into_iter()
        .map(|r| String::from_utf8(r.record.value.unwrap().to_vec()).unwrap())
        .collect()
}

fn assert_exactly_once(got: &[String], expected: &BTreeSet<String>) {
    let set: BTreeSet<String> = got.iter().cloned().collect();
    assert_eq!(set.len(), got.len(), "a record arrived twice");
    assert_eq!(
        &set, expected,
        "the records read back differ from the ones whose send returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_send_queues_nothing_and_a_completed_one_is_delivered_once() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("cancel-send");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    // A small buffer, so sends wait for space and the timeouts land inside
    // those waits as well as before and after them.
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig::default()
            .with_buffer_memory(32 * 1024)
            .with_batch_size(4 * 1024)
            .with_linger(Duration::from_millis(1)),
    )
    .await
    .unwrap();
    let pad = "p".repeat(900);
    let mut expected = BTreeSet::new();
    let mut dropped = 0;
    for i in 0..3_000u32 {
        let value = format!("{i:05}-{pad}");
        let record = ProducerRecord::new(&topic, Bytes::from(value.clone())).with_partition(0);
        // 0, 20, 40, … 980 µs, repeating.
        let limit = Duration::from_micros(u64::from(i % 50) * 20);
        match tokio::time::timeout(limit, producer.send(record)).await {
            Ok(sent) => {
                drop(sent.expect("send"));
                expected.insert(value);
            }
            Err(_) => dropped += 1,
        }
    }
    producer.flush(Duration::from_secs(60)).await.expect("flush");
    assert!(dropped > 0, "no send was dropped: the sweep tested nothing");
    assert!(expected.len() > 100, "only {} sends completed", expected.len());
    let got = values(&cluster, &topic, expected.len()).await;
    assert_exactly_once(&got, &expected);
    // Nothing is left accounted once everything is delivered.
    assert_eq!(producer.buffered_bytes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_flush_loses_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("cancel-flush");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig::default()
            .with_linger(Duration::from_secs(30))
            .with_batch_size(8 * 1024),
    )
    .await
    .unwrap();
    let mut expected = BTreeSet::new();
    let mut dropped = 0;
    for round in 0..40u32 {
        for i in 0..50u32 {
            let value = format!("{round:03}-{i:03}-{}", "f".repeat(200));
            let record = ProducerRecord::new(&topic, Bytes::from(value.clone())).with_partition(0);
            drop(producer.send(record).await.expect("send"));
            expected.insert(value);
        }
        // 0, 100, … 3,900 µs: most flushes are cut off mid-way.
        let limit = Duration::from_micros(u64::from(round) * 100);
        if tokio::time::timeout(limit, producer.flush(Duration::from_secs(60)))
            .await
            .is_err()
        {
            dropped += 1;
        }
    }
    assert!(dropped > 0, "no flush was dropped");
    producer.flush(Duration::from_secs(60)).await.expect("final flush");
    let got = values(&cluster, &topic, expected.len()).await;
    assert_exactly_once(&got, &expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_commit_or_abort_can_be_resumed_and_ends_the_transaction_once() {
    let brokers = common::transaction_brokers();
    if brokers.is_empty() {
        return;
    }
    for (brokers, version) in brokers {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("cancel-txn");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let txn = TxnConfig::new(common::unique_topic("cancel-txn-id"));
        let mut producer = TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), txn)
            .await
            .expect("init");
        assert_eq!(producer.transaction_version(), version);
        let mut committed = BTreeSet::new();
        let mut dropped = 0;
        for round in 0..24u32 {
            let commit = round % 3 != 2;
            let txn = producer.begin().await.expect("begin");
            let mut values = Vec::new();
            for i in 0..10u32 {
                let v = format!("{round:02}-{i}");
                drop(txn.send(ProducerRecord::new(&topic, v.clone())).await.expect("send"));
                values.push(v);
            }
            // 0, 1, … 7 ms, then again: inside the flush, inside EndTxn, after it.
            let limit = Duration::from_millis(u64::from(round % 8));
            let first = if commit {
                tokio::time::timeout(limit, txn.commit()).await
            } else {
                tokio::time::timeout(limit, txn.abort()).await
            };
            match first {
                Ok(r) => r.unwrap_or_else(|e| panic!("{version} round {round}: {e}")),
                Err(_) => {
                    dropped += 1;
                    // The dropped guard's transaction is still open: take it back.
                    let txn = producer.resume().expect("a dropped commit or abort leaves it open");
                    let again = if commit { txn.commit().await } else { txn.abort().await };
                    again.unwrap_or_else(|e| panic!("{version} round {round}: the repeated call failed: {e}"));
                }
            }
            if commit {
                committed.extend(values);
            }
        }
        assert!(dropped > 0, "{version}: no commit or abort was dropped");
        let got = common::read_committed_values(&cluster, &topic, 1, committed.len()).await;
        assert_exactly_once(&got, &committed);
        producer.close().await.expect("close");
    }
}
