//! librdkafka's mock cluster (`rdkafka::mocking::MockCluster`) for
//! `tests/mock_cluster.rs`: a cluster in this process, unique topics,
//! client configs with short bounds, and bounded read-backs that count
//! every record (by the native client and by librdkafka) so a test can
//! prove "exactly once": no record lost, none duplicated.
//!
//! The mock cluster is `!Send` (a raw pointer; its brokers run on a thread
//! of their own). Tests keep it in the test function's locals, which
//! `#[tokio::test]` runs with `block_on` (never spawned), and hand only its
//! bootstrap string to spawned tasks.

#![allow(dead_code)] // not every helper is used by every test

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clink_kafka::client::{ClientConfig, Cluster, Consumer, ConsumerConfig, Offset, TopicPartition};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

/// Every wait in these tests is bounded by this.
pub const BOUND: Duration = Duration::from_secs(30);

/// A mock cluster of `n` brokers (ids 1..=n).
pub struct Mock {
    pub cluster: MockCluster<'static, DefaultProducerContext>,
    pub brokers: i32,
}

impl Mock {
    pub fn new(brokers: i32) -> Self {
        Mock {
            cluster: MockCluster::new(brokers).expect("creating librdkafka's mock cluster"),
            brokers,
        }
    }

    pub fn bootstrap(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// A new topic (unique name; the mock has no CreateTopics, so it is
    /// created through the mock's own API), replicated on every broker.
    pub fn topic(&self, prefix: &str, partitions: i32) -> String {
        let name = crate::common::unique_topic(prefix);
        self.cluster
            .create_topic(&name, partitions, self.brokers.min(3))
            .expect("creating a mock topic");
        name
    }

    /// Queues `errors`, answered in turn to the next requests of `api`
    /// (`RD_KAFKA_RESP_ERR__TRANSPORT` closes the connection instead).
    pub fn inject(&self, api: RDKafkaApiKey, errors: &[RDKafkaRespErr]) {
        self.cluster.request_errors(api, errors);
    }

    /// The native client's config for this cluster: short bounds, so a
    /// broken case fails fast instead of hanging.
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&self.bootstrap());
        c.client_id = "clink-kafka-mock-tests".into();
        c.connect_timeout = Duration::from_secs(2);
        c.request_timeout = Duration::from_secs(5);
        c.metadata_max_wait = Duration::from_secs(10);
        c.retry_backoff = Duration::from_millis(20);
        c.retry_backoff_max = Duration::from_millis(200);
        c
    }

    /// librdkafka's config for this cluster.
    pub fn rdkafka_config(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap())
            .set("client.id", "clink-kafka-mock-tests-rdkafka")
            .set("socket.timeout.ms", "5000")
            .set("message.timeout.ms", "20000")
            .set("retry.backoff.ms", "20")
            .set("log_level", "3");
        c
    }
}

/// Connects the native client, bounded.
pub async fn native_cluster(config: ClientConfig) -> Cluster {
    tokio::time::timeout(BOUND, Cluster::connect(config))
        .await
        .expect("connecting to the mock cluster timed out")
        .expect("connecting to the mock cluster")
}

/// Every record value of `topic` (all `partitions`), read from the start by
/// the native consumer until `expected` arrived (bounded), then one more
/// poll that must bring nothing. Values with their (partition, offset).
pub async fn native_read_all(
    config: ClientConfig,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> Vec<(i32, i64, String)> {
    let cluster = native_cluster(config).await;
    let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
    let assignment: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic, p)).collect();
    consumer.assign(&assignment);
    for p in 0..partitions {
        consumer.seek(topic, p, Offset::Earliest).await.expect("seek");
    }
    let deadline = Instant::now() + BOUND;
    let mut out = Vec::new();
    while out.len() < expected {
        assert!(
            Instant::now() < deadline,
            "only {} of {expected} records arrived from {topic} within {BOUND:?}",
            out.len()
        );
        // A poll long enough for the consumer's own retries (a retriable
        // error that outlasts one poll is handed to the caller).
        for r in consumer.poll(Duration::from_secs(2)).await.expect("poll") {
            let value = String::from_utf8(r.record.value.map(|v| v.to_vec()).unwrap_or_default()).unwrap();
            out.push((r.partition, r.record.offset, value));
        }
    }
    let extra = consumer.poll(Duration::from_millis(300)).await.expect("poll");
    assert!(
        extra.is_empty() && out.len() == expected,
        "{} records beyond the expected {expected} in {topic}",
        out.len() + extra.len() - expected
    );
    out
}

/// The same through librdkafka's own consumer (manual assignment, no group).
pub async fn rdkafka_read_all(
    config: rdkafka::ClientConfig,
    topic: &str,
    partitions: i32,
    expected: usize,
) -> Vec<(i32, i64, String)> {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::{BaseConsumer, Consumer as _};
        use rdkafka::Message as _;
        let mut config = config;
        config
            .set("group.id", "clink-kafka-mock-reader")
            .set("enable.auto.commit", "false")
            .set("session.timeout.ms", "6000");
        let consumer: BaseConsumer = config.create().expect("librdkafka consumer");
        let mut tpl = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(&topic, p, rdkafka::Offset::Beginning).unwrap();
        }
        consumer.assign(&tpl).expect("assign");
        let deadline = Instant::now() + BOUND;
        let mut out = Vec::new();
        let mut quiet_since: Option<Instant> = None;
        loop {
            assert!(
                Instant::now() < deadline,
                "librdkafka read {} of {expected} records from {topic} within {BOUND:?}",
                out.len()
            );
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    quiet_since = None;
                    let value = String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap();
                    out.push((m.partition(), m.offset(), value));
                }
                // librdkafka hands a retriable fetch error to the application
                // and goes on fetching (ours retries inside `poll`): note it,
                // the count below decides.
                Some(Err(e)) => eprintln!("note: librdkafka consumer error on {topic}: {e}"),
                None if out.len() >= expected => {
                    // Quiet for a moment after the last expected record.
                    let since = *quiet_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_millis(300) {
                        break;
                    }
                }
                None => {}
            }
        }
        assert_eq!(out.len(), expected, "librdkafka read a different count from {topic}");
        out
    })
    .await
    .expect("librdkafka reader task")
}

/// Asserts `got` holds each of `expected` values exactly once.
pub fn assert_exactly_once(got: &[(i32, i64, String)], expected: &[String]) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, v) in got {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    let duplicated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "duplicated records: {duplicated:?}");
    let missing: Vec<_> = expected.iter().filter(|v| !counts.contains_key(v.as_str())).collect();
    assert!(missing.is_empty(), "missing records: {missing:?}");
    assert_eq!(
        got.len(),
        expected.len(),
        "unexpected records besides the expected ones"
    );
}
