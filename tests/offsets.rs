//! Offsets against the real broker: ListOffsets by timestamp (and seeking by
//! it), and a group's committed offsets through OffsetCommit / OffsetFetch at
//! the coordinator FindCoordinator names.

mod common;

use std::time::Duration;

use clink_kafka::client::{
    CommittedOffset, Consumer, ConsumerConfig, GroupOffsets, NewTopic, Offset, OffsetAndTimestamp, Producer,
    ProducerConfig, ProducerRecord, TopicPartition, TopicPartitionOffset,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_by_timestamp_and_seek() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("by-ts");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    // Offsets 0..5 with timestamps 1000, 2000, 2000, 5000, 9000.
    let stamps = [1000i64, 2000, 2000, 5000, 9000];
    for (i, ts) in stamps.iter().enumerate() {
        producer
            .send(
                ProducerRecord::new(&topic, format!("v{i}"))
                    .with_partition(0)
                    .with_timestamp(*ts),
            )
            .await
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();

    let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    let at = |ts| consumer.offset_for_timestamp(&topic, 0, ts);
    assert_eq!(
        at(0).await.unwrap(),
        Some(OffsetAndTimestamp {
            offset: 0,
            timestamp_ms: 1000
        })
    );
    assert_eq!(
        at(1000).await.unwrap(),
        Some(OffsetAndTimestamp {
            offset: 0,
            timestamp_ms: 1000
        })
    );
    assert_eq!(
        at(1001).await.unwrap(),
        Some(OffsetAndTimestamp {
            offset: 1,
            timestamp_ms: 2000
        }),
        "the first of two equal stamps"
    );
    assert_eq!(
        at(2001).await.unwrap(),
        Some(OffsetAndTimestamp {
            offset: 3,
            timestamp_ms: 5000
        })
    );
    assert_eq!(
        at(9000).await.unwrap(),
        Some(OffsetAndTimestamp {
            offset: 4,
            timestamp_ms: 9000
        })
    );
    assert_eq!(at(9001).await.unwrap(), None, "no record that late");
    let err = at(-5).await.unwrap_err();
    assert!(err.to_string().contains("timestamp"), "{err}");

    // Seeking by timestamp positions there; past the last record, at the end.
    assert_eq!(consumer.seek(&topic, 0, Offset::Timestamp(4000)).await.unwrap(), 3);
    let got = consumer.poll(Duration::from_secs(5)).await.unwrap();
    let values: Vec<_> = got
        .iter()
        .map(|r| String::from_utf8(r.record.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, ["v3", "v4"]);
    assert_eq!(consumer.seek(&topic, 0, Offset::Timestamp(100_000)).await.unwrap(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_offsets_commit_and_fetch() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("group-offsets");
    common::create_topic(&cluster, NewTopic::new(&topic, 3, 1)).await;
    let group = GroupOffsets::new(cluster.clone(), common::unique_topic("group")).unwrap();

    // Nothing committed yet: every partition maps to None.
    let fetched = group
        .fetch(&[TopicPartition::new(&topic, 0), TopicPartition::new(&topic, 1)], false)
        .await
        .unwrap();
    assert_eq!(fetched.len(), 2);
    assert!(fetched.values().all(Option::is_none), "{fetched:?}");

    group
        .commit(&[
            TopicPartitionOffset::new(&topic, 0, 17).with_metadata("checkpoint-1"),
            TopicPartitionOffset::new(&topic, 2, 4),
        ])
        .await
        .unwrap();
    let fetched = group
        .fetch(
            &[
                TopicPartition::new(&topic, 0),
                TopicPartition::new(&topic, 1),
                TopicPartition::new(&topic, 2),
            ],
            true,
        )
        .await
        .unwrap();
    assert_eq!(
        fetched.get(&TopicPartition::new(&topic, 0)),
        Some(&Some(CommittedOffset {
            offset: 17,
            metadata: Some("checkpoint-1".into())
        }))
    );
    assert_eq!(fetched.get(&TopicPartition::new(&topic, 1)), Some(&None));
    assert_eq!(
        fetched
            .get(&TopicPartition::new(&topic, 2))
            .cloned()
            .flatten()
            .map(|c| c.offset),
        Some(4)
    );

    // A later commit replaces the earlier one; other partitions keep theirs.
    group.commit(&[TopicPartitionOffset::new(&topic, 0, 40)]).await.unwrap();
    let fetched = group
        .fetch(&[TopicPartition::new(&topic, 0), TopicPartition::new(&topic, 2)], false)
        .await
        .unwrap();
    assert_eq!(
        fetched[&TopicPartition::new(&topic, 0)].as_ref().map(|c| c.offset),
        Some(40)
    );
    assert_eq!(
        fetched[&TopicPartition::new(&topic, 2)].as_ref().map(|c| c.offset),
        Some(4)
    );

    // Another handle on the same group (a restarted consumer) sees them.
    let again = GroupOffsets::new(cluster.clone(), group.group_id()).unwrap();
    let fetched = again.fetch(&[TopicPartition::new(&topic, 0)], false).await.unwrap();
    assert_eq!(
        fetched[&TopicPartition::new(&topic, 0)].as_ref().map(|c| c.offset),
        Some(40)
    );

    // Misconfiguration names the option.
    let err = GroupOffsets::new(cluster.clone(), "").unwrap_err();
    assert!(err.to_string().contains("group.id"), "{err}");
}
