//! The clients against librdkafka's mock cluster (`rdkafka::mocking`, in
//! process, no broker): produce, consume, the idempotent producer and
//! transactions, then the mock's error injection — retriable and fatal
//! request errors per API, a broker going down and up, leader failover,
//! added round-trip time. Each case shows a retry, a failover or a clear
//! error naming the API; every case reads its topic back and counts, so a
//! duplicate or a lost record fails it; every wait is bounded.
//!
//! Clients: the native client (`clink_kafka::client`); the connector on both
//! backends (`backend = native | rdkafka`): the backend seam
//! (`connector::backend`, the same generic cases over `Native*` and
//! `Rdkafka*`), and the sinks (at least once, two-phase commit) and source
//! built from options; and librdkafka through the `rdkafka` crate's own
//! producers and consumer (reading what the native client wrote, and the
//! reverse).
//!
//! What the mock (librdkafka 2.12.1) lacks stays on the real broker
//! (`tests/sasl.rs`, `tls.rs`, `transactions.rs`, `read_committed.rs`,
//! `resolver.rs`, `admin.rs`): SASL, TLS, DescribeTransactions (and so the
//! resolver's verdicts), CreateTopics/DeleteTopics (topics here come from
//! `MockCluster::create_topic`), `transaction.version` 2 (the mock has no
//! features, so transactions here are TV1), and read_committed: the mock
//! writes no transaction markers and answers every Fetch with LSO = high
//! watermark and no aborted list, so an aborted record is visible here;
//! and fencing by transactional id: a second InitProducerId for the same id
//! gets a new producer id, leaving the first producer unfenced (fatal
//! fencing answers are injected here instead).
//! Metadata answers take no injected request errors in the mock; its topic
//! errors are used instead. The mock checks Produce sequences only for a
//! transactional producer, so a connection cut under a plain idempotent
//! producer's Produce may leave the resent batch twice in the mock's log
//! (`produce_connection_cut_resends_the_same_sequence` proves the copies are
//! the same batch; against Kafka, `tests/fault_proxy.rs` proves exactly once).
//!
//! Built only with `--features rdkafka` (the bundled librdkafka); CI runs it
//! in the feature pass: `cargo test --features rdkafka --test mock_cluster`.

#![cfg(feature = "rdkafka")]

mod common;
#[path = "common/mock.rs"]
mod mock;

use std::time::Duration;

use clink_kafka::client::{
    PartitionOffset, Producer, ProducerConfig, ProducerRecord, TopicPartition, TopicPartitionOffset,
    TransactionVersion, TransactionalProducer, TxnConfig,
};
use mock::{assert_exactly_once, native_cluster, native_read_all, rdkafka_read_all, Mock, BOUND};
use rdkafka::types::RDKafkaApiKey as Api;
use rdkafka::types::RDKafkaRespErr as E;

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Sends `values` (keyed by index, so they spread over partitions) through
/// the native idempotent producer and waits for every delivery, bounded.
async fn native_produce(producer: &Producer, topic: &str, values: &[String]) {
    let mut deliveries = Vec::new();
    for (i, v) in values.iter().enumerate() {
        let record = ProducerRecord::new(topic, v.clone()).with_key(format!("k{i}"));
        deliveries.push(producer.send(record).await.expect("send"));
    }
    for d in deliveries {
        tokio::time::timeout(BOUND, d)
            .await
            .expect("a delivery did not resolve within the bound")
            .expect("delivery");
    }
}

fn producer_config() -> ProducerConfig {
    ProducerConfig::default()
        .with_linger(Duration::from_millis(2))
        .with_delivery_timeout(Duration::from_secs(25))
        .with_ack_timeout(Duration::from_secs(5))
}

async fn native_producer(mock: &Mock) -> Producer {
    let cluster = native_cluster(mock.client_config()).await;
    tokio::time::timeout(BOUND, Producer::new(cluster, producer_config()))
        .await
        .expect("producer init timed out")
        .expect("idempotent producer")
}

// ---------------------------------------------------------------------------
// Produce, consume, idempotence, transactions.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_produce_consume_across_brokers() {
    let mock = Mock::new(3);
    let topic = mock.topic("mock-pc", 3);
    let producer = native_producer(&mock).await;
    let sent = values("pc", 300);
    native_produce(&producer, &topic, &sent).await;
    let got = native_read_all(mock.client_config(), &topic, 3, sent.len()).await;
    assert_exactly_once(&got, &sent);
    // Keys spread over all three partitions (led by different brokers).
    for p in 0..3 {
        assert!(got.iter().any(|(q, _, _)| *q == p), "nothing in partition {p}");
    }
    // librdkafka reads the same records.
    let got = rdkafka_read_all(mock.rdkafka_config(), &topic, 3, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_idempotent_producer_sequences() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-idem", 1);
    let cluster = native_cluster(mock.client_config()).await;
    let producer = Producer::new(cluster.clone(), producer_config().with_batch_size(512))
        .await
        .unwrap();
    let identity = producer.identity().expect("idempotent by default");
    assert!(
        identity.producer_id >= 0 && identity.producer_epoch >= 0,
        "{identity:?}"
    );
    let sent = values("idem", 60);
    native_produce(&producer, &topic, &sent).await;
    let mut consumer = clink_kafka::client::Consumer::new(cluster, Default::default());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer
        .seek(&topic, 0, clink_kafka::client::Offset::Earliest)
        .await
        .unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + BOUND;
    while got.len() < sent.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} read",
            got.len(),
            sent.len()
        );
        got.extend(consumer.poll(Duration::from_millis(300)).await.unwrap());
    }
    assert_eq!(got.len(), sent.len());
    let mut batches = std::collections::BTreeSet::new();
    for r in &got {
        assert_eq!(r.batch.producer_id, identity.producer_id);
        assert_eq!(r.batch.producer_epoch, identity.producer_epoch);
        // One producer on a fresh partition: sequence == offset.
        assert_eq!(r.sequence() as i64, r.record.offset);
        batches.insert(r.batch.base_offset);
    }
    assert!(batches.len() > 1, "small batches span several: {batches:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_transactions_commit_abort_and_offsets() {
    let mock = Mock::new(3);
    let topic = mock.topic("mock-txn", 2);
    let cluster = native_cluster(mock.client_config()).await;
    assert_eq!(
        clink_kafka::client::transaction_version(&cluster).await.unwrap(),
        TransactionVersion::V1,
        "the mock finalizes no transaction.version feature"
    );
    let tid = common::unique_topic("mock-tid");
    let mut txn = TransactionalProducer::init(cluster.clone(), producer_config(), TxnConfig::new(&tid))
        .await
        .expect("InitProducerId through the mock's coordinator");
    assert_eq!(txn.transaction_version(), TransactionVersion::V1);
    let first = txn.identity();

    // Committed, with consumed offsets in the transaction.
    let mut t = txn.begin().await.unwrap();
    let committed = values("commit", 20);
    let mut deliveries = Vec::new();
    for v in &committed {
        deliveries.push(t.send(ProducerRecord::new(&topic, v.clone())).await.unwrap());
    }
    t.send_offsets("mock-group", &[TopicPartitionOffset::new(topic.as_str(), 0, 5)])
        .await
        .expect("AddOffsetsToTxn + TxnOffsetCommit");
    tokio::time::timeout(BOUND, t.commit())
        .await
        .expect("commit bounded")
        .expect("commit");
    for d in deliveries {
        d.await.expect("delivered in the transaction");
    }
    // Aborted.
    let t = txn.begin().await.unwrap();
    let aborted = values("abort", 5);
    for v in &aborted {
        t.send(ProducerRecord::new(&topic, v.clone()).with_partition(1))
            .await
            .unwrap();
    }
    tokio::time::timeout(BOUND, t.abort())
        .await
        .expect("abort bounded")
        .expect("abort");
    // TV1 keeps the identity across transactions.
    assert_eq!(txn.identity().producer_id, first.producer_id);

    // The mock writes no markers and filters nothing: every record, once.
    let mut all = committed.clone();
    all.extend(aborted);
    let got = native_read_all(mock.client_config(), &topic, 2, all.len()).await;
    assert_exactly_once(&got, &all);
}

// ---------------------------------------------------------------------------
// Injected request errors.

/// Produce: each retriable error is retried (a connection the mock closes
/// too) and every record lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_retriable_errors_are_retried_without_duplicates() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-produce-retry", 1);
    let producer = native_producer(&mock).await;
    mock.inject(
        Api::Produce,
        &[
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            E::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            E::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    let sent = values("retry", 50);
    native_produce(&producer, &topic, &sent).await;
    let got = native_read_all(mock.client_config(), &topic, 1, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

/// Produce answered by a closed connection (the mock appends, then cuts):
/// the outcome is unknown, so the batch is resent with the same producer
/// id, epoch and sequence. The mock deduplicates only transactional
/// producers (`rd_kafka_mock_validate_records` skips a Produce without a
/// transactional id), so for the idempotent producer a copy may land twice
/// here; the test proves every copy is the same batch (what a real broker
/// deduplicates: `tests/fault_proxy.rs` checks that against Kafka), and the
/// transactional producer, which the mock does deduplicate, lands exactly
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_connection_cut_resends_the_same_sequence() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-produce-cut", 1);
    let producer = native_producer(&mock).await;
    mock.inject(
        Api::Produce,
        &[E::RD_KAFKA_RESP_ERR__TRANSPORT, E::RD_KAFKA_RESP_ERR__TRANSPORT],
    );
    let sent = values("cut", 40);
    native_produce(&producer, &topic, &sent).await;
    let cluster = native_cluster(mock.client_config()).await;
    let mut consumer = clink_kafka::client::Consumer::new(cluster.clone(), Default::default());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer
        .seek(&topic, 0, clink_kafka::client::Offset::Earliest)
        .await
        .unwrap();
    let mut copies: std::collections::BTreeMap<String, Vec<(i64, i16, i32)>> = Default::default();
    let deadline = std::time::Instant::now() + BOUND;
    while copies.len() < sent.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {} read",
            copies.len(),
            sent.len()
        );
        for r in consumer.poll(Duration::from_secs(2)).await.unwrap() {
            let value = String::from_utf8(r.record.value.clone().unwrap().to_vec()).unwrap();
            copies
                .entry(value)
                .or_default()
                .push((r.batch.producer_id, r.batch.producer_epoch, r.sequence()));
        }
    }
    let identity = producer.identity().unwrap();
    for v in &sent {
        let c = copies.get(v).unwrap_or_else(|| panic!("{v} missing"));
        assert!(
            c.iter().all(|x| *x == c[0]) && c[0].0 == identity.producer_id,
            "{v}: copies from different batches: {c:?}"
        );
    }
    assert_eq!(copies.len(), sent.len(), "values that were never sent");

    // Transactional: the mock checks sequences, so exactly once.
    let topic = mock.topic("mock-produce-cut-txn", 1);
    let mut txn = TransactionalProducer::init(
        cluster.clone(),
        producer_config(),
        TxnConfig::new(common::unique_topic("mock-cut-tid")),
    )
    .await
    .unwrap();
    let t = txn.begin().await.unwrap();
    mock.inject(
        Api::Produce,
        &[E::RD_KAFKA_RESP_ERR__TRANSPORT, E::RD_KAFKA_RESP_ERR__TRANSPORT],
    );
    let sent = values("cut-txn", 40);
    let mut deliveries = Vec::new();
    for v in &sent {
        deliveries.push(t.send(ProducerRecord::new(&topic, v.clone())).await.unwrap());
    }
    tokio::time::timeout(BOUND, t.commit())
        .await
        .expect("bounded")
        .expect("commit after the cuts");
    for d in deliveries {
        d.await.expect("delivered");
    }
    let got = native_read_all(mock.client_config(), &topic, 1, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

/// Produce: a fatal error fails the delivery with an error naming Produce
/// and the code; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_fatal_error_names_the_api() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-produce-fatal", 1);
    let producer = native_producer(&mock).await;
    mock.inject(Api::Produce, &[E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED]);
    let d = producer.send(ProducerRecord::new(&topic, "refused")).await.unwrap();
    let err = tokio::time::timeout(BOUND, d)
        .await
        .expect("bounded")
        .expect_err("TOPIC_AUTHORIZATION_FAILED is not retriable");
    let text = err.to_string();
    assert!(
        text.contains("Produce") && text.contains("TOPIC_AUTHORIZATION_FAILED"),
        "{text}"
    );
    let got = native_read_all(mock.client_config(), &topic, 1, 0).await;
    assert!(got.is_empty(), "{got:?}");
}

/// Fetch: retriable errors (the connection closed too) are retried; every
/// record is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_retriable_errors_are_retried() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-fetch-retry", 1);
    let producer = native_producer(&mock).await;
    let sent = values("fetch", 40);
    native_produce(&producer, &topic, &sent).await;
    mock.inject(
        Api::Fetch,
        &[
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            E::RD_KAFKA_RESP_ERR__TRANSPORT,
            E::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        ],
    );
    let got = native_read_all(mock.client_config(), &topic, 1, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

/// Fetch: a fatal error is the poll's error, naming Fetch and the code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_fatal_error_names_the_api() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-fetch-fatal", 1);
    let cluster = native_cluster(mock.client_config()).await;
    let mut consumer = clink_kafka::client::Consumer::new(cluster, Default::default());
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer
        .seek(&topic, 0, clink_kafka::client::Offset::Earliest)
        .await
        .unwrap();
    mock.inject(Api::Fetch, &[E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED]);
    let mut outcome = None;
    for _ in 0..20 {
        match consumer.poll(Duration::from_millis(200)).await {
            Ok(r) => assert!(r.is_empty(), "{r:?}"),
            Err(e) => {
                outcome = Some(e);
                break;
            }
        }
    }
    let text = outcome.expect("the poll must fail").to_string();
    assert!(
        text.contains("Fetch") && text.contains("TOPIC_AUTHORIZATION_FAILED"),
        "{text}"
    );
}

/// Metadata: a retriable topic error holds the producer back (the record is
/// not delivered while it lasts) and is retried until it clears; a fatal one
/// is an error naming Metadata and the topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_topic_errors_retry_or_name_the_api() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-md", 1);
    let producer = native_producer(&mock).await;
    let topic_name = topic.clone();
    mock.cluster
        .topic_error(&topic, E::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
        .unwrap();
    // `send` itself waits for the topic's metadata (to partition).
    let delivery =
        tokio::spawn(async move { producer.send(ProducerRecord::new(&topic_name, "after-md")).await?.await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!delivery.is_finished(), "delivered while the topic had no leader");
    mock.cluster.topic_error(&topic, E::RD_KAFKA_RESP_ERR_NO_ERROR).unwrap();
    tokio::time::timeout(BOUND, delivery)
        .await
        .expect("bounded")
        .unwrap()
        .expect("delivered once the error cleared");
    let got = native_read_all(mock.client_config(), &topic, 1, 1).await;
    assert_exactly_once(&got, &["after-md".to_string()]);

    let refused = mock.topic("mock-md-refused", 1);
    mock.cluster
        .topic_error(&refused, E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
        .unwrap();
    let cluster = native_cluster(mock.client_config()).await;
    let err = tokio::time::timeout(BOUND, cluster.topic(&refused))
        .await
        .expect("bounded")
        .expect_err("an unauthorized topic is an error");
    let text = err.to_string();
    assert!(
        text.contains("Metadata") && text.contains("TOPIC_AUTHORIZATION_FAILED") && text.contains(&refused),
        "{text}"
    );
}

/// FindCoordinator and InitProducerId: retriable answers are retried and
/// the transactional producer comes up; a fatal answer is an error naming
/// the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_and_init_errors_retry_or_name_the_api() {
    let mock = Mock::new(3);
    let cluster = native_cluster(mock.client_config()).await;
    let config = || TxnConfig::new(common::unique_topic("mock-tid")).with_max_block(Duration::from_secs(10));
    mock.inject(
        Api::FindCoordinator,
        &[
            E::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
        ],
    );
    mock.inject(
        Api::InitProducerId,
        &[
            E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            E::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
            E::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
        ],
    );
    let txn = tokio::time::timeout(
        BOUND,
        TransactionalProducer::init(cluster.clone(), producer_config(), config()),
    )
    .await
    .expect("bounded")
    .expect("retried to success");
    assert!(txn.identity().producer_id >= 0);

    for (api, name, code) in [
        (
            Api::FindCoordinator,
            "FindCoordinator",
            E::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        (
            Api::InitProducerId,
            "InitProducerId",
            E::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
    ] {
        mock.inject(api, &[code]);
        let err = tokio::time::timeout(
            BOUND,
            TransactionalProducer::init(cluster.clone(), producer_config(), config()),
        )
        .await
        .expect("bounded")
        .err()
        .unwrap_or_else(|| panic!("{name} refused: init must fail"));
        let text = err.to_string();
        assert!(
            text.contains(name)
                && (text.contains("TRANSACTIONAL_ID_AUTHORIZATION_FAILED") || text.contains("not authorized")),
            "{name}: {text}"
        );
    }

    // The idempotent producer's InitProducerId (no transactional id).
    mock.inject(
        Api::InitProducerId,
        &[E::RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED],
    );
    let err = tokio::time::timeout(BOUND, Producer::new(cluster.clone(), producer_config()))
        .await
        .expect("bounded")
        .expect_err("refused InitProducerId");
    let text = err.to_string();
    assert!(
        text.contains("InitProducerId") && text.contains("CLUSTER_AUTHORIZATION_FAILED"),
        "{text}"
    );
}

/// AddPartitionsToTxn and EndTxn: retriable answers are retried and the
/// transaction commits with every record once; a fatal EndTxn answer is an
/// error naming EndTxn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_request_errors_retry_or_name_the_api() {
    let mock = Mock::new(3);
    let topic = mock.topic("mock-txn-err", 2);
    let cluster = native_cluster(mock.client_config()).await;
    let mut txn = TransactionalProducer::init(
        cluster.clone(),
        producer_config(),
        TxnConfig::new(common::unique_topic("mock-tid")).with_max_block(Duration::from_secs(10)),
    )
    .await
    .unwrap();

    mock.inject(
        Api::AddPartitionsToTxn,
        &[
            E::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
            E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
        ],
    );
    mock.inject(
        Api::EndTxn,
        &[
            E::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
            E::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            E::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        ],
    );
    let t = txn.begin().await.unwrap();
    let sent = values("txn-retry", 30);
    for v in &sent {
        t.send(ProducerRecord::new(&topic, v.clone())).await.unwrap();
    }
    tokio::time::timeout(BOUND, t.commit())
        .await
        .expect("bounded")
        .expect("commit after retries");
    let got = native_read_all(mock.client_config(), &topic, 2, sent.len()).await;
    assert_exactly_once(&got, &sent);

    mock.inject(Api::EndTxn, &[E::RD_KAFKA_RESP_ERR_PRODUCER_FENCED]);
    let t = txn.begin().await.unwrap();
    t.send(ProducerRecord::new(&topic, "fenced")).await.unwrap();
    let err = tokio::time::timeout(BOUND, t.commit())
        .await
        .expect("bounded")
        .expect_err("PRODUCER_FENCED is fatal");
    let text = err.to_string();
    assert!(text.contains("EndTxn") && text.contains("PRODUCER_FENCED"), "{text}");
    // Sticky: no new transaction after a fence.
    assert!(txn.begin().await.is_err(), "begin after a fence must fail");
}

// ---------------------------------------------------------------------------
// Brokers going down and up, leader failover, round-trip time.

/// The leader goes down while records are produced; they wait, and once it
/// is back every record is delivered exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_down_then_up_delivers_once() {
    let mock = Mock::new(2);
    let topic = mock.topic("mock-down", 1);
    mock.cluster.partition_leader(&topic, 0, Some(1)).unwrap();
    let producer = native_producer(&mock).await;
    let first = values("before", 20);
    native_produce(&producer, &topic, &first).await;

    mock.cluster.broker_down(1).unwrap();
    let during = values("during", 20);
    let mut deliveries = Vec::new();
    for v in &during {
        deliveries.push(producer.send(ProducerRecord::new(&topic, v.clone())).await.unwrap());
    }
    let pending = tokio::spawn(async move {
        for d in deliveries {
            d.await.expect("delivered after the leader came back");
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!pending.is_finished(), "delivered while the only leader was down");
    mock.cluster.broker_up(1).unwrap();
    tokio::time::timeout(BOUND, pending).await.expect("bounded").unwrap();

    let mut all = first;
    all.extend(during);
    let got = native_read_all(mock.client_config(), &topic, 1, all.len()).await;
    assert_exactly_once(&got, &all);
}

/// Failover: the partition's leadership moves to another broker and the old
/// leader goes down; producer and consumer follow the new leader. And a
/// client whose first bootstrap broker is down connects through another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_and_bootstrap_failover() {
    let mock = Mock::new(3);
    let topic = mock.topic("mock-failover", 1);
    mock.cluster.partition_leader(&topic, 0, Some(1)).unwrap();
    let producer = native_producer(&mock).await;
    let first = values("on-1", 20);
    native_produce(&producer, &topic, &first).await;

    mock.cluster.partition_leader(&topic, 0, Some(2)).unwrap();
    mock.cluster.broker_down(1).unwrap();
    let second = values("on-2", 20);
    native_produce(&producer, &topic, &second).await;
    let mut all = first;
    all.extend(second);
    let got = native_read_all(mock.client_config(), &topic, 1, all.len()).await;
    assert_exactly_once(&got, &all);

    // Broker 1 (first in the bootstrap list) is still down: a new client
    // connects through another, and the mock lists only the live two.
    assert_eq!(mock.bootstrap().split(',').count(), 3);
    let cluster = native_cluster(mock.client_config()).await;
    let brokers = cluster.metadata().brokers.keys().copied().collect::<Vec<_>>();
    assert!(!brokers.contains(&1) && brokers.len() == 2, "{brokers:?}");
}

/// Added round-trip time: slower answers still complete; an answer slower
/// than the request timeout is a timeout naming the API, retried on a new
/// connection once the delay is gone, without a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_time_slow_and_timed_out() {
    let mock = Mock::new(1);
    let topic = mock.topic("mock-rtt", 1);
    let producer = native_producer(&mock).await;
    mock.cluster
        .broker_round_trip_time(-1, Duration::from_millis(150))
        .unwrap();
    let slow = values("slow", 10);
    native_produce(&producer, &topic, &slow).await;
    let got = native_read_all(mock.client_config(), &topic, 1, slow.len()).await;
    assert_exactly_once(&got, &slow);

    // A request timeout below the round-trip time.
    mock.cluster.broker_round_trip_time(-1, Duration::ZERO).unwrap();
    let mut config = mock.client_config();
    config.request_timeout = Duration::from_secs(1);
    let cluster = native_cluster(config.clone()).await;
    mock.cluster.broker_round_trip_time(-1, Duration::from_secs(3)).unwrap();
    let err = tokio::time::timeout(BOUND, cluster.refresh_topics(&[&topic]))
        .await
        .expect("bounded")
        .expect_err("a 3 s answer under a 1 s request timeout");
    // Metadata times out; its one retry on a fresh connection times out in
    // the ApiVersions handshake: both named in the error.
    let text = err.to_string();
    assert!(
        matches!(&err, clink_kafka::Error::NoBrokerAvailable { last, .. }
            if matches!(**last, clink_kafka::Error::RequestTimeout { api: "ApiVersions", .. }))
            || matches!(err, clink_kafka::Error::RequestTimeout { api: "Metadata", .. }),
        "{text}"
    );
    assert!(text.contains("timed out after 1s"), "{text}");
    mock.cluster.broker_round_trip_time(-1, Duration::ZERO).unwrap();

    // Produce timing out once, then retried with the same sequence numbers.
    let producer = tokio::time::timeout(BOUND, Producer::new(cluster.clone(), producer_config()))
        .await
        .unwrap()
        .unwrap();
    // Leader known before the delay (`send` does not retry its own
    // metadata lookup; the delivery retries below are the point).
    cluster.topic(&topic).await.unwrap();
    mock.cluster
        .broker_round_trip_time(-1, Duration::from_millis(1500))
        .unwrap();
    let timed_out = values("timed-out", 10);
    let mut deliveries = Vec::new();
    for v in &timed_out {
        deliveries.push(
            producer
                .send(ProducerRecord::new(&topic, v.clone()).with_partition(0))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    mock.cluster.broker_round_trip_time(-1, Duration::ZERO).unwrap();
    for d in deliveries {
        tokio::time::timeout(BOUND, d)
            .await
            .expect("bounded")
            .expect("delivered after the timeouts");
    }
    let mut all = slow;
    all.extend(timed_out);
    let got = native_read_all(mock.client_config(), &topic, 1, all.len()).await;
    assert_exactly_once(&got, &all);
}

// ---------------------------------------------------------------------------
// librdkafka through the `rdkafka` crate's own producer, on the same mock:
// what it writes, the native consumer reads exactly once. (The connector's
// rdkafka backend runs the backend-level and connector cases below.)

/// librdkafka's idempotent producer, with the same injected Produce errors
/// as the native case, reads back exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdkafka_idempotent_producer_through_errors() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let mock = Mock::new(3);
    let topic = mock.topic("mock-rdk-produce", 3);
    let producer: FutureProducer = mock
        .rdkafka_config()
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .create()
        .expect("librdkafka producer");
    mock.inject(
        Api::Produce,
        &[
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            E::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            E::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        ],
    );
    let sent = values("rdk", 200);
    let mut deliveries = Vec::new();
    for (i, v) in sent.iter().enumerate() {
        let key = format!("k{i}");
        let record = FutureRecord::to(&topic).key(&key).payload(v);
        deliveries.push(producer.send_result(record).expect("librdkafka queue"));
    }
    for d in deliveries {
        tokio::time::timeout(BOUND, d)
            .await
            .expect("bounded")
            .expect("delivery future")
            .map_err(|(e, _)| e)
            .expect("librdkafka delivered");
    }
    let got = native_read_all(mock.client_config(), &topic, 3, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

/// librdkafka's transactional producer through the mock's coordinator (TV1
/// calls, as ours): commit, abort, then a retriable EndTxn answer retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdkafka_transactions_through_the_mock() {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer as _, ThreadedProducer};
    let mock = Mock::new(3);
    let topic = mock.topic("mock-rdk-txn", 2);
    let producer: ThreadedProducer<DefaultProducerContext> = mock
        .rdkafka_config()
        .set("transactional.id", common::unique_topic("mock-rdk-tid"))
        .set("transaction.timeout.ms", "20000")
        .create()
        .expect("librdkafka transactional producer");
    let committed = values("rdk-commit", 20);
    let aborted = values("rdk-abort", 5);
    let retried = values("rdk-retried", 5);
    let (topic2, c, a, r) = (topic.clone(), committed.clone(), aborted.clone(), retried.clone());
    let run = tokio::task::spawn_blocking(move || {
        let t = Duration::from_secs(20);
        producer.init_transactions(t).expect("init_transactions");
        for (values, commit) in [(&c, true), (&a, false)] {
            producer.begin_transaction().expect("begin");
            for v in values {
                producer
                    .send(BaseRecord::<(), String>::to(&topic2).payload(v))
                    .map_err(|(e, _)| e)
                    .expect("queue");
            }
            producer.flush(t).expect("flush");
            if commit {
                producer.commit_transaction(t).expect("commit");
            } else {
                producer.abort_transaction(t).expect("abort");
            }
        }
        producer
    });
    let producer = tokio::time::timeout(BOUND, run).await.expect("bounded").unwrap();
    // A retriable EndTxn answer: librdkafka retries it.
    mock.inject(
        Api::EndTxn,
        &[
            E::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
            E::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        ],
    );
    let topic3 = topic.clone();
    let run = tokio::task::spawn_blocking(move || {
        let t = Duration::from_secs(20);
        producer.begin_transaction().expect("begin");
        for v in &r {
            producer
                .send(BaseRecord::<(), String>::to(&topic3).payload(v))
                .map_err(|(e, _)| e)
                .expect("queue");
        }
        producer.flush(t).expect("flush");
        producer.commit_transaction(t).expect("commit after EndTxn retries");
    });
    tokio::time::timeout(BOUND, run).await.expect("bounded").unwrap();

    // The mock filters nothing (no markers): every record once, aborted too.
    let mut all = committed;
    all.extend(aborted);
    all.extend(retried);
    let got = native_read_all(mock.client_config(), &topic, 2, all.len()).await;
    assert_exactly_once(&got, &all);
}

/// librdkafka's producer with its leader down: records wait and arrive once
/// after the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdkafka_leader_down_then_up() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let mock = Mock::new(2);
    let topic = mock.topic("mock-rdk-down", 1);
    mock.cluster.partition_leader(&topic, 0, Some(1)).unwrap();
    let producer: FutureProducer = mock
        .rdkafka_config()
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let first = FutureRecord::<(), _>::to(&topic).payload("before");
    tokio::time::timeout(BOUND, producer.send(first, Duration::from_secs(10)))
        .await
        .expect("bounded")
        .map_err(|(e, _)| e)
        .unwrap();
    mock.cluster.broker_down(1).unwrap();
    let topic2 = topic.clone();
    let p2 = producer.clone();
    let pending = tokio::spawn(async move {
        let record = FutureRecord::<(), _>::to(&topic2).payload("during");
        p2.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e)
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!pending.is_finished(), "delivered while the only leader was down");
    mock.cluster.broker_up(1).unwrap();
    tokio::time::timeout(BOUND, pending)
        .await
        .expect("bounded")
        .unwrap()
        .expect("delivered after the broker came back");
    let got = native_read_all(mock.client_config(), &topic, 1, 2).await;
    assert_exactly_once(&got, &["before".to_string(), "during".to_string()]);
}

// ---------------------------------------------------------------------------
// The connector's backend seam (`connector::backend`), generic over the
// backend: the same cases on the native and the rdkafka backend.

use clink_kafka::connector::KafkaMessage;
use clink_kafka::connector::{
    ConsumerBackend, NativeConsumer, NativeProducer, NativeTransactionalProducer, ProducerBackend,
    TransactionalProducerBackend, Watermark,
};

/// Sends `sent` through a producer backend (keyed, so they spread), flushes
/// and waits for every delivery.
async fn backend_produce<P: ProducerBackend>(producer: &P, topic: &str, sent: &[String]) {
    let mut deliveries = Vec::new();
    for (i, v) in sent.iter().enumerate() {
        let mut m = KafkaMessage::new(v.clone());
        m.key = Some(format!("k{i}").into());
        deliveries.push(producer.send(topic, None, m).await.expect("backend send"));
    }
    producer.flush(BOUND).await.expect("backend flush");
    for d in deliveries {
        let PartitionOffset { partition, offset } = tokio::time::timeout(BOUND, d)
            .await
            .expect("bounded")
            .expect("backend delivery");
        // -1: a resend the broker recognised as a duplicate has no offset
        // to report (DUPLICATE_SEQUENCE_NUMBER; Java reports -1 too).
        assert!(partition >= 0 && offset >= -1, "({partition}, {offset})");
    }
}

/// Reads every partition of `topic` from its low watermark through a
/// consumer backend until `expected` records arrived (bounded), then one
/// more poll that must bring nothing.
async fn backend_read_all<C: ConsumerBackend>(
    consumer: &mut C,
    topic: &str,
    expected: usize,
) -> Vec<(i32, i64, String)> {
    consumer.connect().await.expect("consumer backend connect");
    let partitions = consumer.partition_count(topic).await.expect("partition count");
    let mut assignment = Vec::new();
    let mut high_sum = 0;
    for p in 0..partitions {
        let low = consumer.watermark(topic, p, Watermark::Low).await.unwrap();
        high_sum += consumer.watermark(topic, p, Watermark::High).await.unwrap() - low;
        assignment.push(PartitionOffset::new(p, low));
    }
    assert_eq!(high_sum as usize, expected, "watermarks of {topic}");
    consumer.assign(topic, &assignment).await.expect("assign");
    let deadline = std::time::Instant::now() + BOUND;
    let mut out = Vec::new();
    while out.len() < expected {
        assert!(std::time::Instant::now() < deadline, "{} of {expected} read", out.len());
        for m in consumer.poll(Duration::from_secs(2)).await.expect("backend poll") {
            let value = String::from_utf8(m.payload.map(|b| b.to_vec()).unwrap_or_default()).unwrap();
            out.push((m.partition, m.offset, value));
        }
    }
    let extra = consumer.poll(Duration::from_millis(300)).await.expect("backend poll");
    assert!(extra.is_empty(), "{} records beyond {expected}", extra.len());
    out
}

async fn backend_produce_consume_case<P: ProducerBackend, C: ConsumerBackend>(
    mock: &Mock,
    mut producer: P,
    mut consumer: C,
) {
    let topic = mock.topic("mock-backend", 3);
    producer.connect().await.expect("producer backend connect");
    // Retriable Produce errors on the way: retried, no duplicate.
    // (No connection cut here: the mock does not deduplicate a
    // non-transactional idempotent producer; see the cut test above.)
    mock.inject(
        Api::Produce,
        &[
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            E::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
    let sent = values("backend", 120);
    backend_produce(&producer, &topic, &sent).await;
    producer.close(BOUND).await.unwrap();
    // And Fetch errors on the way back.
    mock.inject(
        Api::Fetch,
        &[
            E::RD_KAFKA_RESP_ERR__TRANSPORT,
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        ],
    );
    let got = backend_read_all(&mut consumer, &topic, sent.len()).await;
    assert_exactly_once(&got, &sent);
    consumer.close().await.unwrap();
}

async fn backend_transactions_case<T: TransactionalProducerBackend, C: ConsumerBackend>(
    mock: &Mock,
    mut txn: T,
    mut consumer: C,
) {
    let topic = mock.topic("mock-backend-txn", 2);
    assert!(txn.identity().is_none(), "no identity before init");
    let tid = common::unique_topic("mock-backend-tid");
    let handle = txn
        .init_transactions(&tid, Duration::from_secs(20))
        .await
        .expect("init_transactions");
    assert_eq!(handle.transactional_id, tid);
    let committed = values("backend-commit", 15);
    let aborted = values("backend-abort", 5);
    for (batch, commit) in [(&committed, true), (&aborted, false)] {
        txn.begin_transaction().unwrap();
        // A connection cut under Produce: resent, deduplicated by sequence.
        mock.inject(Api::Produce, &[E::RD_KAFKA_RESP_ERR__TRANSPORT]);
        backend_produce(&txn, &topic, batch).await;
        if commit {
            // A retriable EndTxn answer on the way.
            mock.inject(Api::EndTxn, &[E::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS]);
            txn.commit_transaction(BOUND).await.expect("commit");
        } else {
            txn.abort_transaction(BOUND).await.expect("abort");
        }
    }
    let identity = txn.identity().expect("identity after init");
    assert_eq!(identity.producer_id, handle.producer_id);
    txn.close(BOUND).await.unwrap();
    // No markers on the mock: the aborted records are read too, once.
    let mut all = committed;
    all.extend(aborted);
    let got = backend_read_all(&mut consumer, &topic, all.len()).await;
    assert_exactly_once(&got, &all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_backend_produce_consume() {
    let mock = Mock::new(3);
    let producer = NativeProducer::new(mock.client_config(), producer_config());
    let consumer = NativeConsumer::new(mock.client_config(), Default::default());
    backend_produce_consume_case(&mock, producer, consumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_backend_transactions() {
    let mock = Mock::new(3);
    let txn = NativeTransactionalProducer::new(mock.client_config(), producer_config());
    let consumer = NativeConsumer::new(mock.client_config(), Default::default());
    backend_transactions_case(&mock, txn, consumer).await;
}

// ---------------------------------------------------------------------------
// The connector's sinks, built from their options, against the mock.

/// The at-least-once text sink (options parsed as the engine gives them)
/// delivers through a retriable Produce error and flushes on the barrier;
/// the two-phase-commit sink prepares at the barrier and commits through a
/// retriable EndTxn answer, writing its receipt. Read back once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_sinks_through_the_mock_native() {
    connector_sinks_case("native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_sinks_through_the_mock_rdkafka() {
    connector_sinks_case("rdkafka").await;
}

async fn connector_sinks_case(backend: &str) {
    use clink_kafka::connector::options::{parse_sink, parse_two_phase_commit, FactoryKind};
    use clink_kafka::connector::selected::{kafka_sink, two_phase_commit_sink};
    use clink_kafka::connector::{Sink, StagedCheckpoint, Text, TextKafkaSink};
    let mock = Mock::new(3);
    let bootstrap = mock.bootstrap();

    let topic = mock.topic("mock-sink", 2);
    let params: std::collections::BTreeMap<String, String> = [
        ("brokers", bootstrap.as_str()),
        ("topic", topic.as_str()),
        ("linger_ms", "1"),
        ("backend", backend),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut sink = TextKafkaSink::new(kafka_sink(parse_sink(FactoryKind::TextSink, &params).unwrap()).unwrap());
    tokio::time::timeout(BOUND, sink.open())
        .await
        .expect("bounded")
        .unwrap();
    mock.inject(Api::Produce, &[E::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS]);
    let sent = values("sink", 30);
    sink.on_data(sent.iter().map(|v| Text::from(v.clone())).collect())
        .await
        .unwrap();
    tokio::time::timeout(BOUND, sink.on_barrier(1))
        .await
        .expect("bounded")
        .unwrap();
    let counters = sink.inner().counters();
    assert_eq!((counters.delivered(), counters.delivery_errors()), (30, 0));
    sink.on_commit(1).await.unwrap();
    sink.close().await.unwrap();
    let got = native_read_all(mock.client_config(), &topic, 2, sent.len()).await;
    assert_exactly_once(&got, &sent);

    let topic = mock.topic("mock-2pc", 1);
    let receipts = std::env::temp_dir().join(format!("{topic}-receipts"));
    let tid = format!("{topic}-txn");
    let params: std::collections::BTreeMap<String, String> = [
        ("brokers", bootstrap.as_str()),
        ("topic", topic.as_str()),
        ("transactional_id", tid.as_str()),
        ("receipt_dir", receipts.to_str().unwrap()),
        ("linger_ms", "1"),
        ("backend", backend),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut sink = two_phase_commit_sink(parse_two_phase_commit(&params, 0, 1).unwrap()).unwrap();
    tokio::time::timeout(BOUND, sink.open())
        .await
        .expect("bounded")
        .unwrap();
    let sent = values("2pc", 25);
    sink.on_data(sent.iter().map(|v| Text::from(v.clone())).collect())
        .await
        .unwrap();
    let rows = tokio::time::timeout(BOUND, sink.on_barrier(1))
        .await
        .expect("bounded")
        .unwrap();
    let staged: Vec<StagedCheckpoint> = rows
        .iter()
        .map(|r| StagedCheckpoint::from_row(r).unwrap().expect("a 2PC row"))
        .collect();
    assert_eq!((staged.len(), staged[0].records), (1, 25), "{rows:?}");
    let handle = staged[0]
        .handle
        .clone()
        .expect("a prepared checkpoint carries its handle");
    assert_eq!(handle.transaction_version, TransactionVersion::V1);
    mock.inject(
        Api::EndTxn,
        &[
            E::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
            E::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
        ],
    );
    tokio::time::timeout(BOUND, sink.on_commit(1))
        .await
        .expect("bounded")
        .expect("commit through retriable EndTxn answers");
    assert!(receipts.join("sub0-1").exists(), "the commit wrote its receipt");
    tokio::time::timeout(BOUND, sink.close())
        .await
        .expect("bounded")
        .unwrap();
    let _ = std::fs::remove_dir_all(&receipts);
    let got = native_read_all(mock.client_config(), &topic, 1, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

/// The connector's source, built from options (two subtasks, a group's
/// committed offsets looked up through the mock's group coordinator, start
/// at earliest), reads every record once across both subtasks through a cut
/// Fetch connection; a source restored from their snapshots reads only what
/// came after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_source_through_the_mock_native() {
    connector_source_case("native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_source_through_the_mock_rdkafka() {
    connector_source_case("rdkafka").await;
}

async fn connector_source_case(backend: &str) {
    use clink_kafka::connector::options::{parse_source, FactoryKind};
    use clink_kafka::connector::selected::{kafka_source, SelectedConsumer};
    use clink_kafka::connector::{KafkaSource, Source};
    let mock = Mock::new(3);
    let topic = mock.topic("mock-source", 3);
    let producer = native_producer(&mock).await;
    let first = values("src", 90);
    native_produce(&producer, &topic, &first).await;

    let bootstrap = mock.bootstrap();
    let group = common::unique_topic("mock-group");
    let params: std::collections::BTreeMap<String, String> = [
        ("brokers", bootstrap.as_str()),
        ("topic", topic.as_str()),
        ("group_id", group.as_str()),
        ("auto_offset_reset", "earliest"),
        ("backend", backend),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let build = |index| kafka_source(parse_source(FactoryKind::MessageSource, &params, index, 2).unwrap()).unwrap();

    /// Calls `produce` until `n` records came, bounded.
    async fn read_n(s: &mut KafkaSource<SelectedConsumer>, n: usize) -> Vec<(i32, i64, String)> {
        let deadline = std::time::Instant::now() + BOUND;
        let mut out = Vec::new();
        while out.len() < n {
            assert!(std::time::Instant::now() < deadline, "{} of {n} records", out.len());
            let mut got = Vec::new();
            s.produce(&mut got).await.expect("source produce");
            for m in got.into_iter().flatten() {
                let v = String::from_utf8(m.payload_bytes().to_vec()).unwrap();
                out.push((m.partition, m.offset, v));
            }
        }
        out
    }

    let (mut a, mut b) = (build(0), build(1));
    tokio::time::timeout(BOUND, a.open()).await.expect("bounded").unwrap();
    tokio::time::timeout(BOUND, b.open()).await.expect("bounded").unwrap();
    mock.inject(Api::Fetch, &[E::RD_KAFKA_RESP_ERR__TRANSPORT]);
    // Which subtask owns which partition is the source's rule; together
    // they own all three, so read until both have their partitions' share.
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + BOUND;
    while got.len() < first.len() {
        assert!(std::time::Instant::now() < deadline, "{} of {}", got.len(), first.len());
        for s in [&mut a, &mut b] {
            let mut batch = Vec::new();
            s.produce(&mut batch).await.expect("source produce");
            for m in batch.into_iter().flatten() {
                got.push((
                    m.partition,
                    m.offset,
                    String::from_utf8(m.payload_bytes().to_vec()).unwrap(),
                ));
            }
        }
    }
    assert_exactly_once(&got, &first);
    let rows: Vec<_> = a.snapshot().into_iter().chain(b.snapshot()).collect();
    a.close().await.unwrap();
    b.close().await.unwrap();

    // More records, then one restored source at parallelism 1 over both
    // snapshots reads exactly the new ones.
    let second = values("src-after", 30);
    native_produce(&producer, &topic, &second).await;
    let mut restored = kafka_source(parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap()).unwrap();
    restored.restore(&rows).expect("restore from both subtasks' rows");
    tokio::time::timeout(BOUND, restored.open())
        .await
        .expect("bounded")
        .unwrap();
    let got = read_n(&mut restored, second.len()).await;
    assert_exactly_once(&got, &second);
    let mut extra = Vec::new();
    restored.produce(&mut extra).await.unwrap();
    assert!(
        extra.iter().all(|b| b.is_empty()),
        "records beyond the restored position"
    );
    restored.close().await.unwrap();
}

/// librdkafka's consumer reads what the native producer wrote, once, through
/// retriable Fetch errors, a cut connection and added round-trip time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdkafka_consumer_through_fetch_errors_and_delay() {
    let mock = Mock::new(2);
    let topic = mock.topic("mock-rdk-consume", 2);
    let producer = native_producer(&mock).await;
    let sent = values("rdk-read", 80);
    native_produce(&producer, &topic, &sent).await;
    mock.inject(
        Api::Fetch,
        &[
            E::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            E::RD_KAFKA_RESP_ERR__TRANSPORT,
            E::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
    mock.cluster
        .broker_round_trip_time(-1, Duration::from_millis(100))
        .unwrap();
    let got = rdkafka_read_all(mock.rdkafka_config(), &topic, 2, sent.len()).await;
    assert_exactly_once(&got, &sent);
}

/// Options for the rdkafka backend's constructors: the mock, `topic`.
fn rdkafka_backend_params(mock: &Mock, topic: &str) -> std::collections::BTreeMap<String, String> {
    [
        ("brokers", mock.bootstrap()),
        ("topic", topic.to_owned()),
        ("backend", "rdkafka".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdkafka_backend_produce_consume() {
    use clink_kafka::connector::options::{parse_sink, parse_source, FactoryKind};
    use clink_kafka::connector::rdkafka::{RdkafkaConsumer, RdkafkaProducer};
    let mock = Mock::new(3);
    // The case creates its own topic; the options only need a name.
    let params = rdkafka_backend_params(&mock, "unused");
    let producer: RdkafkaProducer =
        RdkafkaProducer::new(&parse_sink(FactoryKind::MessageSink, &params).unwrap()).unwrap();
    let consumer = RdkafkaConsumer::new(&parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap()).unwrap();
    backend_produce_consume_case(&mock, producer, consumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rdkafka_backend_transactions() {
    use clink_kafka::connector::options::{parse_sink, parse_source, FactoryKind};
    use clink_kafka::connector::rdkafka::{RdkafkaConsumer, RdkafkaTransactionalProducer};
    let mock = Mock::new(3);
    let params = rdkafka_backend_params(&mock, "unused");
    let txn = RdkafkaTransactionalProducer::new(&parse_sink(FactoryKind::MessageSink, &params).unwrap()).unwrap();
    let consumer = RdkafkaConsumer::new(&parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap()).unwrap();
    backend_transactions_case(&mock, txn, consumer).await;
}
