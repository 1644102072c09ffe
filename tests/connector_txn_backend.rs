//! The connector's transactional backend seam, natively: the calls a
//! two-phase-commit sink makes (init → identity, begin, send, flush at the
//! barrier, commit or abort), against both real brokers (transaction.version
//! 2 and 1). A committed interval is visible to a read_committed consumer,
//! an aborted one never is, the identity is readable at any moment and
//! follows the epoch bumps of KIP-890, and the resume handle it gives never
//! holds a credential.

mod common;

use std::time::Duration;

use clink_kafka::client::{NewTopic, ProducerConfig, TransactionVersion};
use clink_kafka::connector::{
    KafkaMessage, NativeTransactionalProducer, ProducerBackend, TransactionalProducerBackend,
};

const T: Duration = Duration::from_secs(30);

async fn interval(backend: &mut NativeTransactionalProducer, topic: &str, checkpoint: u32, n: usize) {
    backend.begin_transaction().unwrap();
    let mut deliveries = Vec::new();
    for i in 0..n {
        let m = KafkaMessage::new(format!("cp{checkpoint}-{i}"));
        deliveries.push(backend.send(topic, Some(0), m).await.unwrap());
    }
    // The barrier: everything of this interval is on the broker.
    backend.flush(T).await.unwrap();
    for d in deliveries {
        d.await.expect("delivered inside the transaction");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_transactional_backend_commits_aborts_and_exposes_its_identity() {
    let brokers = common::transaction_brokers();
    for (bootstrap, version) in brokers {
        let cluster = common::cluster(common::config(&bootstrap)).await;
        let topic = common::unique_topic("conn-txn");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let mut backend = NativeTransactionalProducer::new(common::config(&bootstrap), ProducerConfig::default());
        assert!(backend.identity().is_none(), "no identity before init");
        backend.connect().await.unwrap();
        let id = format!("{topic}-txn");
        let first = backend.init_transactions(&id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(first.transactional_id, id);
        assert!(first.producer_id >= 0 && first.producer_epoch >= 0, "{first:?}");
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
    let mut backend = NativeTransactionalProducer::new(common::config(&bootstrap), ProducerConfig::default());
    backend.connect().await.unwrap();
    let e = backend.begin_transaction().unwrap_err();
    assert!(e.to_string().contains("before init_transactions"), "{e}");
    let Err(e) = backend.send("t", None, KafkaMessage::new("x")).await else {
        panic!("send before init_transactions was accepted");
    };
    assert!(e.to_string().contains("before init_transactions"), "{e}");
}
