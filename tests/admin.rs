//! Administration against the real broker: create, grow and delete a topic,
//! and describe the cluster.

mod common;

use clink_kafka::client::{Admin, NewTopic};
use clink_kafka::wire::KafkaCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_grow_and_delete_a_topic() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let admin = Admin::new(cluster.clone());
    let topic = common::unique_topic("admin");
    admin.create_topics(&[NewTopic::new(&topic, 2, 1)]).await.unwrap();
    assert_eq!(cluster.partition_count(&topic).await.unwrap(), 2);

    admin.create_partitions(&topic, 5).await.unwrap();
    cluster.refresh_topics(&[&topic]).await.unwrap();
    assert_eq!(cluster.partition_count(&topic).await.unwrap(), 5);

    // Kafka never shrinks a topic; the broker's refusal comes back typed.
    let err = admin.create_partitions(&topic, 3).await.unwrap_err();
    assert_eq!(
        err.kafka_code(),
        Some(KafkaCode(37)),
        "INVALID_PARTITIONS expected: {err}"
    );
    assert!(err.to_string().contains("INVALID_PARTITIONS"), "{err}");

    // Creating it again is TOPIC_ALREADY_EXISTS.
    let err = admin.create_topics(&[NewTopic::new(&topic, 1, 1)]).await.unwrap_err();
    assert!(err.to_string().contains("TOPIC_ALREADY_EXISTS"), "{err}");

    admin.delete_topics(&[&topic]).await.unwrap();
    assert!(!cluster
        .refresh_topics(&[&topic])
        .await
        .unwrap()
        .topics
        .contains_key(topic.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_cluster_names_the_broker() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let d = Admin::new(cluster).describe_cluster().await.unwrap();
    assert!(!d.cluster_id.is_empty());
    assert_eq!(d.brokers.len(), 1, "{d:?}");
    let b = &d.brokers[0];
    assert_eq!(format!("{}:{}", b.host, b.port), brokers, "{d:?}");
    assert_eq!(d.controller_id, b.node_id, "{d:?}");
}
