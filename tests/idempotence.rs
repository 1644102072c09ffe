//! The idempotent producer against the broker: a producer id is assigned,
//! and every batch carries it with consecutive sequence numbers (read back
//! from the batch headers the consumer exposes).

mod common;

use std::time::Duration;

use clink_kafka::client::{ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_id_and_increasing_sequences() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("idempotent");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig::default()
            // Small batches, so sequences span several batches.
            .with_batch_size(1024),
    )
    .await
    .unwrap();
    let identity = producer.identity().expect("idempotent by default");
    assert!(identity.producer_id >= 0, "{identity:?}");
    assert!(identity.producer_epoch >= 0, "{identity:?}");

    // Three rounds to partition 0, flushed between, plus some to partition 1.
    let mut futures = Vec::new();
    for round in 0..3 {
        for i in 0..40 {
            let r =
                ProducerRecord::new(&topic, format!("round {round} record {i} {}", "x".repeat(50))).with_partition(0);
            futures.push(producer.send(r).await.unwrap());
        }
        for i in 0..5 {
            futures.push(
                producer
                    .send(ProducerRecord::new(&topic, format!("p1 {round} {i}")).with_partition(1))
                    .await
                    .unwrap(),
            );
        }
        producer.flush(Duration::from_secs(30)).await.unwrap();
    }
    for f in futures {
        f.await.unwrap();
    }

    for (partition, count) in [(0, 120usize), (1, 15)] {
        let got = common::consume_exactly(
            &cluster,
            ConsumerConfig::default(),
            &topic,
            partition,
            Offset::Earliest,
            count,
        )
        .await;
        let mut batches = Vec::new();
        for r in &got {
            assert_eq!(
                r.batch.producer_id, identity.producer_id,
                "producer id in the batch header"
            );
            assert_eq!(r.batch.producer_epoch, identity.producer_epoch);
            // A fresh partition written by one producer: sequence == offset.
            assert_eq!(
                r.sequence() as i64,
                r.record.offset,
                "sequence of offset {}",
                r.record.offset
            );
            if batches.last() != Some(&(r.batch.base_offset, r.batch.base_sequence)) {
                batches.push((r.batch.base_offset, r.batch.base_sequence));
            }
        }
        assert!(
            batches.len() >= 3,
            "{partition}: expected several batches, got {batches:?}"
        );
        for w in batches.windows(2) {
            assert!(w[1].1 > w[0].1, "{partition}: sequences must increase: {batches:?}");
            assert_eq!(
                w[1].1 as i64 - w[0].1 as i64,
                w[1].0 - w[0].0,
                "no gap between batches: {batches:?}"
            );
        }
        assert_eq!(batches[0], (0, 0));
    }
}
