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
    Admin, Cluster, GroupOffsets, ListTransactionsFilter, NewTopic, ProducerConfig, ProducerRecord, TransactionState,
    TransactionVersion, TransactionalProducer, TxnConfig,
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

async fn send_values(p: &TransactionalProducer, topic: &str, prefix: &str, n: usize) {
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
        let p = producer(&cluster, &txn_id("vis")).await;
        assert_eq!(p.transaction_version(), expected_version, "{brokers}");
        let first = p.identity();
        assert!(first.has_identity());
        assert_eq!(first.transaction_version, expected_version);

        p.begin().unwrap();
        send_values(&p, &topic, "c", 100).await;
        assert_eq!(p.identity(), first, "identity stays put inside a transaction");
        p.commit().await.expect("commit");
        let after_commit = p.identity();

        p.begin().unwrap();
        send_values(&p, &topic, "a", 50).await;
        p.abort().await.expect("abort");
        let after_abort = p.identity();

        p.begin().unwrap();
        send_values(&p, &topic, "d", 20).await;
        p.commit().await.expect("second commit");
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
        let first = producer(&cluster, &id).await;
        first.begin().unwrap();
        send_values(&first, &topic, "old", 10).await;
        let old_identity = first.identity();

        let second = producer(&cluster, &id).await;
        let new_identity = second.identity();
        assert_eq!(new_identity.producer_id, old_identity.producer_id);
        assert!(new_identity.producer_epoch > old_identity.producer_epoch);

        let err = first.commit().await.unwrap_err();
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
        assert!(matches!(first.begin(), Err(Error::ProducerFenced { .. })));
        assert!(matches!(
            first.send(ProducerRecord::new(&topic, "x")).await,
            Err(Error::ProducerFenced { .. })
        ));

        second.begin().unwrap();
        send_values(&second, &topic, "new", 10).await;
        second.commit().await.expect("the new producer commits");
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
        let p = producer(&cluster, &txn_id("offsets")).await;

        p.begin().unwrap();
        send_values(&p, &topic, "x", 5).await;
        p.send_offsets_to_transaction(&group, &[(&topic, 0, 42), (&topic, 1, 7)])
            .await
            .expect("offsets into the transaction");
        p.abort().await.unwrap();
        let offsets = GroupOffsets::new(cluster.clone(), &group).unwrap();
        let fetched = offsets.fetch(&[(&topic, 0), (&topic, 1)], true).await.unwrap();
        assert!(
            fetched.values().all(Option::is_none),
            "{brokers}: aborted offsets are not committed: {fetched:?}"
        );

        p.begin().unwrap();
        send_values(&p, &topic, "y", 5).await;
        p.send_offsets_to_transaction(&group, &[(&topic, 0, 43), (&topic, 1, 8)])
            .await
            .expect("offsets into the transaction");
        p.commit().await.unwrap();
        let fetched = offsets.fetch(&[(&topic, 0), (&topic, 1)], true).await.unwrap();
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
        let p = producer(&cluster, &id).await;
        p.begin().unwrap();
        for partition in 0..2 {
            p.send(ProducerRecord::new(&topic, "v").with_partition(partition))
                .await
                .unwrap();
        }
        p.flush(Duration::from_secs(30)).await.unwrap();
        let admin = Admin::new(cluster.clone());
        let described = admin
            .describe_transactions(&[&id, "clink-no-such-transactional-id"])
            .await
            .unwrap();
        let d = described[0].1.as_ref().expect("the open transaction is described");
        let identity = p.identity();
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

        p.commit().await.unwrap();
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
    let topic = topic(&cluster, "txn-misuse").await;
    let p = producer(&cluster, &txn_id("misuse")).await;
    assert!(matches!(
        p.send(ProducerRecord::new(&topic, "x")).await,
        Err(Error::InvalidTxnState { .. })
    ));
    assert!(matches!(p.commit().await, Err(Error::InvalidTxnState { .. })));
    p.begin().unwrap();
    assert!(matches!(p.begin(), Err(Error::InvalidTxnState { .. })));
    // An empty transaction ends locally.
    p.commit().await.unwrap();
    let err = TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(""))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("transactional.id"), "{err}");
}
