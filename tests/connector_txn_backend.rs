//! The connector's transactional backend seam, on the backend
//! `CLINK_KAFKA_TEST_BACKEND` selects (native, or librdkafka in the parity
//! pass): the calls a two-phase-commit sink makes (init → identity, begin,
//! send, flush at the barrier, commit or abort), against both real brokers
//! (transaction.version 2 and 1). A committed interval is visible to a
//! read_committed consumer, an aborted one never is, the identity is
//! readable at any moment and follows the epoch bumps of KIP-890 (natively;
//! librdkafka 2.12 speaks the TV1 protocol on every broker, so its handle
//! stays TV1 and its epoch does not bump per commit, a named difference),
//! and the resume handle it gives never holds a credential.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use clink_kafka::client::{NewTopic, TransactionVersion};
use clink_kafka::connector::options::parse_two_phase_commit;
use clink_kafka::connector::selected::SelectedTransactionalProducer;
use clink_kafka::connector::{KafkaMessage, ProducerBackend, TransactionalProducerBackend};

const T: Duration = Duration::from_secs(30);

/// The transactional producer a `kafka_2pc_sink_string` on `bootstrap`
/// would run on, on the suite's backend (checked).
fn producer(bootstrap: &str, topic: &str) -> SelectedTransactionalProducer {
    let params: BTreeMap<String, String> = [
        ("brokers", bootstrap),
        ("topic", topic),
        ("transactional_id", &format!("{topic}-txn")),
        ("receipts_in_memory", "true"),
        ("backend", common::connector::backend()),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let options = parse_two_phase_commit(&params, 0, 1).expect("options");
    let producer = SelectedTransactionalProducer::for_options(&options.sink).expect("producer");
    let name = match &producer {
        SelectedTransactionalProducer::Native(_) => "native",
        #[cfg(feature = "rdkafka")]
        SelectedTransactionalProducer::Rdkafka(_) => "rdkafka",
    };
    assert_eq!(name, common::connector::backend());
    producer
}

async fn interval<P: TransactionalProducerBackend>(producer: &mut P, topic: &str, checkpoint: u32, n: usize) {
    producer.begin_transaction().unwrap();
    let mut deliveries = Vec::new();
    for i in 0..n {
        let m = KafkaMessage::new(format!("cp{checkpoint}-{i}"));
        deliveries.push(producer.send(topic, Some(0), m).await.unwrap());
    }
    // The barrier: everything of this interval is on the broker.
    producer.flush(T).await.unwrap();
    for d in deliveries {
        d.await.expect("delivered inside the transaction");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_backend_commits_aborts_and_exposes_its_identity() {
    let brokers = common::transaction_brokers();
    for (bootstrap, version) in brokers {
        let cluster = common::cluster(common::config(&bootstrap)).await;
        let topic = common::unique_topic("conn-txn");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let mut backend = producer(&bootstrap, &topic);
        assert!(backend.identity().is_none(), "no identity before init");
        backend.connect().await.unwrap();
        let id = format!("{topic}-txn");
        let first = backend.init_transactions(&id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(first.transactional_id, id);
        assert!(first.producer_id >= 0 && first.producer_epoch >= 0, "{first:?}");
        // The protocol the backend speaks on this broker (always TV1 on rdkafka).
        let version = common::connector::handle_version(version);
        assert_eq!(first.transaction_version, version, "{bootstrap}");
        assert_eq!(backend.identity().as_ref(), Some(&first));

        interval(&mut backend, &topic, 1, 20).await;
        let during = backend.identity().unwrap();
        assert_eq!(during, first, "the open transaction runs under the identity init gave");
        backend.commit_transaction(T).await.unwrap();
        let after_commit = backend.identity().unwrap();
        match version {
            // KIP-890: every EndTxn bumps the epoch, and the handle follows.
            TransactionVersion::V2 => assert!(
                after_commit.producer_epoch > first.producer_epoch || after_commit.producer_id != first.producer_id,
                "{first:?} -> {after_commit:?}"
            ),
            _ => assert_eq!(after_commit, first),
        }

        interval(&mut backend, &topic, 2, 15).await;
        backend.abort_transaction(T).await.unwrap();

        interval(&mut backend, &topic, 3, 5).await;
        backend.commit_transaction(T).await.unwrap();

        let got = common::read_committed_values(&cluster, &topic, 1, 25).await;
        let want: Vec<String> = (0..20)
            .map(|i| format!("cp1-{i}"))
            .chain((0..5).map(|i| format!("cp3-{i}")))
            .collect();
        assert_eq!(got, want, "{version:?}: committed intervals only, in order, once");

        let handle_text = backend.identity().unwrap().to_string();
        assert!(handle_text.contains(&id), "{handle_text}");
        backend.close(T).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_calls_before_init_are_call_order_errors() {
    let Some(bootstrap) = common::brokers() else { return };
    let topic = common::unique_topic("conn-txn-order");
    let mut backend = producer(&bootstrap, &topic);
    backend.connect().await.unwrap();
    let e = backend.begin_transaction().unwrap_err();
    assert!(e.to_string().contains("before init_transactions"), "{e}");
    let Err(e) = backend.send("t", None, KafkaMessage::new("x")).await else {
        panic!("send before init_transactions was accepted");
    };
    assert!(e.to_string().contains("before init_transactions"), "{e}");
}
