//! The transactional producer against the real broker, under both
//! transaction protocols: the main broker (transaction.version=2, KIP-890:
//! EndTxn v5, an epoch bump per transaction end, implicit partition add) and
//! the tv1 broker (transaction.version=1: AddPartitionsToTxn, one epoch).
//!
//! Visibility is checked with our read_committed consumer and with Kafka's
//! Java console consumer (isolation.level=read_committed).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use clink_kafka::client::{
    Admin, Cluster, GroupOffsets, ListTransactionsFilter, NewTopic, ProducerConfig, ProducerRecord, TopicPartition,
    TopicPartitionOffset, Transaction, TransactionState, TransactionVersion, TransactionalProducer, TxnConfig,
};
use clink_kafka::Error;

const PARTITIONS: i32 = 3;

async fn topic(cluster: &Cluster, prefix: &str) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, PARTITIONS, 1)).await;
    topic
}

fn txn_id(prefix: &str) -> String {
    common::unique_topic(&format!("txn-{prefix}"))
}

async fn producer(cluster: &Cluster, id: &str) -> TransactionalProducer {
    let mut txn = TxnConfig::new(id).with_transaction_timeout(Duration::from_secs(60));
    txn.max_block = Duration::from_secs(30);
    tokio::time::timeout(
        Duration::from_secs(60),
        TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), txn),
    )
    .await
    .expect("init timed out")
    .expect("init")
}

async fn send_values(p: &Transaction<'_>, topic: &str, prefix: &str, n: usize) {
    let mut futures = Vec::with_capacity(n);
    for i in 0..n {
        let v = format!("{prefix}{i}");
        futures.push(
            p.send(ProducerRecord::new(topic, v.clone()).with_key(v))
                .await
                .expect("send"),
        );
    }
    p.flush(Duration::from_secs(30)).await.expect("flush");
    for f in futures {
        f.await.expect("delivery");
    }
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_is_visible_and_abort_is_not_under_both_protocols() {
    for (brokers, expected_version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "txn-vis").await;
        let mut p = producer(&cluster, &txn_id("vis")).await;
        assert_eq!(p.transaction_version(), expected_version, "{brokers}");
        let first = p.identity();
        assert!(first.has_identity());
        assert_eq!(first.transaction_version, expected_version);

        let t = p.begin().await.unwrap();
        send_values(&t, &topic, "c", 100).await;
        assert_eq!(t.identity(), first, "identity stays put inside a transaction");
        t.commit().await.expect("commit");
        let after_commit = p.identity();

        let t = p.begin().await.unwrap();
        send_values(&t, &topic, "a", 50).await;
        t.abort().await.expect("abort");
        let after_abort = p.identity();

        let t = p.begin().await.unwrap();
        send_values(&t, &topic, "d", 20).await;
        t.commit().await.expect("second commit");
        let last = p.identity();

        // The identity each transaction ran under, as the coordinator sees it.
        match expected_version {
            TransactionVersion::V2 => {
                // KIP-890: every transaction end bumps the epoch by one.
                assert_eq!(after_commit.producer_id, first.producer_id);
                assert_eq!(after_commit.producer_epoch, first.producer_epoch + 1);
                assert_eq!(after_abort.producer_epoch, first.producer_epoch + 2);
                assert_eq!(last.producer_epoch, first.producer_epoch + 3);
            }
            TransactionVersion::V1 => {
                assert_eq!(after_commit, first);
                assert_eq!(after_abort, first);
                assert_eq!(last, first);
            }
        }

        let mut want: BTreeSet<String> = values("c", 100).into_iter().collect();
        want.extend(values("d", 20));
        let ours = common::read_committed_values(&cluster, &topic, PARTITIONS, want.len()).await;
        assert_eq!(ours.len(), want.len(), "{brokers}: read_committed count");
        assert_eq!(
            ours.iter().cloned().collect::<BTreeSet<_>>(),
            want,
            "{brokers}: our read_committed view"
        );

        // Ask the Java consumer for one more than was committed: it must stop short.
        if let Some(java) = common::java_read_committed(&brokers, &topic, want.len() + 1, 10_000) {
            assert_eq!(java.len(), want.len(), "{brokers}: Java read_committed count");
            assert_eq!(
                java.into_iter().collect::<BTreeSet<_>>(),
                want,
                "{brokers}: Java's view"
            );
        }
        p.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_producer_fences_the_first_with_a_typed_error() {
    for (brokers, expected_version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "txn-fence").await;
        let id = txn_id("fence");
        let mut first = producer(&cluster, &id).await;
        let t = first.begin().await.unwrap();
        send_values(&t, &topic, "old", 10).await;
        let old_identity = t.identity();

        let mut second = producer(&cluster, &id).await;
        let new_identity = second.identity();
        assert_eq!(new_identity.producer_id, old_identity.producer_id);
        assert!(new_identity.producer_epoch > old_identity.producer_epoch);

        let err = t.commit().await.unwrap_err();
        match &err {
            Error::ProducerFenced {
                transactional_id,
                producer_id,
                producer_epoch,
                api,
                ..
            } => {
                assert_eq!(transactional_id, &id);
                assert_eq!(*producer_id, old_identity.producer_id);
                assert_eq!(*producer_epoch, old_identity.producer_epoch);
                assert_eq!(*api, "EndTxn", "{expected_version:?}");
            }
            other => panic!("{brokers}: expected ProducerFenced, got {other:?}"),
        }
        // Sticky: later calls give the same error and do nothing.
        assert!(matches!(first.begin().await, Err(Error::ProducerFenced { .. })));
        assert!(matches!(
            first
                .resume()
                .expect("the failed commit left it open")
                .send(ProducerRecord::new(&topic, "x"))
                .await,
            Err(Error::ProducerFenced { .. })
        ));

        let t = second.begin().await.unwrap();
        send_values(&t, &topic, "new", 10).await;
        t.commit().await.expect("the new producer commits");
        let got = common::read_committed_values(&cluster, &topic, PARTITIONS, 10).await;
        assert_eq!(
            got.into_iter().collect::<BTreeSet<_>>(),
            values("new", 10).into_iter().collect(),
            "{brokers}: only the new producer's records are visible"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_commit_with_the_transaction_only() {
    for (brokers, _) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "txn-offsets").await;
        let group = common::unique_topic("txn-group");
        let mut p = producer(&cluster, &txn_id("offsets")).await;

        let mut t = p.begin().await.unwrap();
        send_values(&t, &topic, "x", 5).await;
        t.send_offsets(
            &group,
            &[
                TopicPartitionOffset::new(&topic, 0, 42),
                TopicPartitionOffset::new(&topic, 1, 7),
            ],
        )
        .await
        .expect("offsets into the transaction");
        t.abort().await.unwrap();
        let offsets = GroupOffsets::new(cluster.clone(), &group).unwrap();
        let fetched = offsets
            .fetch(&[TopicPartition::new(&topic, 0), TopicPartition::new(&topic, 1)], true)
            .await
            .unwrap();
        assert!(
            fetched.values().all(Option::is_none),
            "{brokers}: aborted offsets are not committed: {fetched:?}"
        );

        let mut t = p.begin().await.unwrap();
        send_values(&t, &topic, "y", 5).await;
        t.send_offsets(
            &group,
            &[
                TopicPartitionOffset::new(&topic, 0, 43),
                TopicPartitionOffset::new(&topic, 1, 8),
            ],
        )
        .await
        .expect("offsets into the transaction");
        t.commit().await.unwrap();
        let fetched = offsets
            .fetch(&[TopicPartition::new(&topic, 0), TopicPartition::new(&topic, 1)], true)
            .await
            .unwrap();
        let got: Vec<Option<i64>> = fetched.values().map(|o| o.as_ref().map(|c| c.offset)).collect();
        assert_eq!(got, vec![Some(43), Some(8)], "{brokers}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_list_show_the_open_transaction() {
    for (brokers, _) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "txn-describe").await;
        let id = txn_id("describe");
        let mut p = producer(&cluster, &id).await;
        let t = p.begin().await.unwrap();
        for partition in 0..2 {
            t.send(ProducerRecord::new(&topic, "v").with_partition(partition))
                .await
                .unwrap();
        }
        t.flush(Duration::from_secs(30)).await.unwrap();
        let admin = Admin::new(cluster.clone());
        let described = admin
            .describe_transactions(&[&id, "clink-no-such-transactional-id"])
            .await
            .unwrap();
        let d = described[0].1.as_ref().expect("the open transaction is described");
        let identity = t.identity();
        assert_eq!(d.state, TransactionState::Ongoing, "{brokers}");
        assert_eq!(d.producer_id, identity.producer_id);
        assert_eq!(
            d.producer_epoch, identity.producer_epoch,
            "{brokers}: describe agrees with identity()"
        );
        assert_eq!(d.transaction_timeout, Duration::from_secs(60));
        assert!(d.start_time_ms.is_some());
        assert_eq!(d.partitions.get(&topic), Some(&vec![0, 1]), "{brokers}: {d:?}");
        let missing = described[1].1.as_ref().unwrap_err();
        assert_eq!(missing.kafka_code().map(|c| c.0), Some(105), "{missing}");

        let listed = admin
            .list_transactions(&ListTransactionsFilter {
                states: vec![TransactionState::Ongoing],
                ..ListTransactionsFilter::default()
            })
            .await
            .unwrap();
        let row = listed.iter().find(|t| t.transactional_id == id).expect("listed");
        assert_eq!(row.producer_id, identity.producer_id);
        assert_eq!(row.state, TransactionState::Ongoing);
        let by_pattern = admin
            .list_transactions(&ListTransactionsFilter {
                transactional_id_pattern: Some(regex_escape(&id)),
                ..ListTransactionsFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(by_pattern.len(), 1, "{brokers}: {by_pattern:?}");

        t.commit().await.unwrap();
        let described = admin.describe_transactions(&[&id]).await.unwrap();
        let d = described[0].1.as_ref().unwrap();
        assert!(
            matches!(
                d.state,
                TransactionState::CompleteCommit | TransactionState::PrepareCommit
            ),
            "{brokers}: {d:?}"
        );
    }
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_is_a_typed_error() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let mut p = producer(&cluster, &txn_id("misuse")).await;
    assert!(p.resume().is_none(), "no transaction is open");
    // An empty transaction ends locally.
    p.begin().await.unwrap().commit().await.unwrap();
    let err = TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(""))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("transactional.id"), "{err}");
}

/// The guard (issue 16): a `Transaction` dropped without commit or abort
/// leaves its transaction open in the producer; `resume` gives it back, and
/// the next `begin` aborts it (its records never become visible), under
/// both protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_transaction_is_aborted_by_the_next_begin() {
    for (brokers, _) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = topic(&cluster, "txn-drop").await;
        let mut p = producer(&cluster, &txn_id("drop")).await;

        let t = p.begin().await.unwrap();
        send_values(&t, &topic, "dropped", 10).await;
        drop(t);
        let t = p.resume().expect("the dropped transaction is still open");
        send_values(&t, &topic, "resumed", 5).await;
        drop(t);

        // begin aborts the dropped transaction first.
        let t = p.begin().await.expect("begin after a dropped transaction");
        send_values(&t, &topic, "kept", 10).await;
        t.commit().await.unwrap();
        let got = common::read_committed_values(&cluster, &topic, PARTITIONS, 10).await;
        assert_eq!(
            got.into_iter().collect::<BTreeSet<_>>(),
            values("kept", 10).into_iter().collect(),
            "{brokers}: only the committed transaction is visible"
        );

        // close ends a dropped one too.
        let t = p.begin().await.unwrap();
        send_values(&t, &topic, "closed", 3).await;
        drop(t);
        p.close().await.expect("close aborts the dropped transaction");
        let got = common::read_committed_values(&cluster, &topic, PARTITIONS, 10).await;
        assert_eq!(got.len(), 10, "{brokers}: {got:?}");
    }
}
