//! Across backends (cargo feature `rdkafka`), against both brokers
//! (transaction.version 2 and 1):
//! - a transaction left prepared by a SIGKILLed rdkafka-backed 2PC sink is
//!   committed by the native resolver in a fresh process (`clink-kafka txn
//!   resolve`), and the reverse: a native sink's prepared transaction is
//!   committed when an rdkafka-backed sink restores it (its restore runs the
//!   native resolver before librdkafka's init_transactions would fence it);
//! - the rdkafka source under read_committed reads exactly what the native
//!   transactional producer committed, and the native consumer reads
//!   exactly what the rdkafka-backed 2PC sink committed;
//! - the rdkafka transactional backend on its own: identity from the
//!   statistics, stable across commits (librdkafka's TV1 protocol), commit
//!   and abort.

#![cfg(feature = "rdkafka")]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    NewTopic, ProducerConfig, ProducerRecord, TransactionVersion, TransactionalProducer, TxnConfig,
};
use clink_kafka::connector::backend::{ProducerBackend, TransactionalProducerBackend};
use clink_kafka::connector::options::{parse_sink, parse_source, parse_two_phase_commit, FactoryKind};
use clink_kafka::connector::rdkafka::RdkafkaTransactionalProducer;
use clink_kafka::connector::{
    install, selected, BuildContext, Registry, Sink, Source, StagedCheckpoint, StateRow, Text,
};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const T: Duration = Duration::from_secs(30);

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Runs the hidden 2PC helper on `backend`: `count` records, barrier 1,
/// then SIGKILL. Returns the staged rows.
fn prepared_by_killed_child(brokers: &str, topic: &str, txn_id: &str, backend: &str, count: u64) -> Vec<StateRow> {
    let mut child = Command::new(BIN)
        .arg("sink2pc-barrier-and-hang")
        .args(["--param", &format!("brokers={brokers}")])
        .args(["--param", &format!("topic={topic}")])
        .args(["--param", &format!("transactional_id={txn_id}")])
        .args(["--param", &format!("backend={backend}")])
        .args(["--param", "linger_ms=1"])
        .args(["--count", &count.to_string(), "--value-prefix", "killed-"])
        .args(["--checkpoint", "1", "--hang-secs", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting clink-kafka sink2pc-barrier-and-hang");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut rows = Vec::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line == "barrier-done" => break,
            Ok(line) => {
                let mut parts = line.splitn(3, '\t');
                assert_eq!(parts.next(), Some("state-row"), "{line:?}");
                rows.push(StateRow {
                    key: parts.next().expect("key").to_owned(),
                    value: parts.next().expect("value").as_bytes().to_vec(),
                });
            }
            Err(_) => {
                let _ = child.kill();
                let status = child.wait();
                panic!("the {backend} sink child took no barrier within 120 s (status {status:?})");
            }
        }
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success(), "killed, not finished: {status}");
    rows
}

fn handle_of(rows: &[StateRow]) -> clink_kafka::client::ResumeHandle {
    assert_eq!(rows.len(), 1, "{rows:?}");
    let staged = StagedCheckpoint::from_row(&rows[0]).unwrap().expect("a 2PC row");
    staged.handle.expect("a prepared checkpoint carries its handle")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rdkafka_sinks_prepared_transaction_is_committed_by_the_native_resolver_in_a_fresh_process() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("xb-rd-killed");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let txn_id = format!("{topic}-txn");
        let rows = prepared_by_killed_child(&brokers, &topic, &txn_id, "rdkafka", 500);
        let handle = handle_of(&rows);
        assert!(handle.has_identity(), "{handle:?}");
        assert_eq!(
            handle.transaction_version,
            TransactionVersion::V1,
            "librdkafka speaks TV1"
        );
        assert!(
            common::read_committed_until(&cluster, &topic, 1, 0, false)
                .await
                .is_empty(),
            "{version:?}: prepared is invisible"
        );
        let out = Command::new(BIN)
            .args([
                "txn",
                "resolve",
                "--brokers",
                &brokers,
                "--handle",
                &handle.to_string(),
                "--commit",
            ])
            .output()
            .expect("clink-kafka txn resolve");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{version:?}: committed; stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let got = common::read_committed_values(&cluster, &topic, 1, 500).await;
        let want: Vec<String> = (0..500).map(|i| format!("killed-{i}")).collect();
        assert_eq!(got, want, "{version:?}: exactly once, in order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_sinks_prepared_transaction_is_committed_when_an_rdkafka_sink_restores_it() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("xb-native-killed");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let txn_id = format!("{topic}-txn");
        let rows = prepared_by_killed_child(&brokers, &topic, &txn_id, "native", 300);
        assert_eq!(handle_of(&rows).transaction_version, version);
        let receipts = std::env::temp_dir().join(format!("{topic}-receipts"));
        let mut registry = Registry::new();
        install(&mut registry).unwrap();
        let ctx = BuildContext::new(params(&[
            ("brokers", &brokers),
            ("topic", &topic),
            ("transactional_id", &txn_id),
            ("backend", "rdkafka"),
            ("receipt_dir", receipts.to_str().unwrap()),
            ("linger_ms", "1"),
        ]));
        let mut sink = registry
            .build("kafka_2pc_sink_string", &ctx)
            .unwrap()
            .into_text_sink("kafka_2pc_sink_string")
            .unwrap();
        sink.restore(&rows).unwrap();
        sink.open().await.unwrap();
        assert!(
            receipts.join("sub0-1").exists(),
            "{version:?}: the resolver committed and receipted"
        );
        // The rdkafka sink then carries on under its own (fencing) init.
        sink.on_data(values("after", 20).into_iter().map(Text::from).collect())
            .await
            .unwrap();
        sink.on_barrier(2).await.unwrap();
        sink.on_commit(2).await.unwrap();
        sink.close().await.unwrap();
        let mut want: Vec<String> = (0..300).map(|i| format!("killed-{i}")).collect();
        want.extend(values("after", 20));
        assert_eq!(
            common::read_committed_values(&cluster, &topic, 1, 320).await,
            want,
            "{version:?}: exactly once"
        );
        let _ = std::fs::remove_dir_all(&receipts);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rdkafka_source_under_read_committed_reads_exactly_what_native_transactions_committed() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("xb-native-txn");
        common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
        let producer = TransactionalProducer::init(
            cluster.clone(),
            ProducerConfig::default(),
            TxnConfig::new(format!("{topic}-txn")),
        )
        .await
        .unwrap();
        let mut want = Vec::new();
        for (i, commit) in [true, false, true, false, true].into_iter().enumerate() {
            producer.begin().unwrap();
            for v in values(&format!("t{i}"), 40) {
                let mut r = ProducerRecord::new(&topic, v.clone());
                r.partition = Some((v.len() % 2) as i32);
                producer.send(r).await.unwrap();
                if commit {
                    want.push(v);
                }
            }
            producer.flush(T).await.unwrap();
            if commit {
                producer.commit().await.unwrap();
            } else {
                producer.abort().await.unwrap();
            }
        }
        producer.close().await.unwrap();

        let o = parse_source(
            FactoryKind::MessageSource,
            &params(&[
                ("brokers", &brokers),
                ("topic", &topic),
                ("backend", "rdkafka"),
                ("kafka.isolation.level", "read_committed"),
            ]),
            0,
            1,
        )
        .unwrap();
        let mut source = selected::kafka_source(o).unwrap();
        source.open().await.unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut quiet = 0;
        // Until everything committed arrived, then a few empty polls (nothing more may come).
        while quiet < 5 {
            assert!(
                Instant::now() < deadline,
                "{version:?}: got {} of {}",
                got.len(),
                want.len()
            );
            let mut batches = Vec::new();
            if source.produce(&mut batches).await.unwrap() == 0 && got.len() >= want.len() {
                quiet += 1;
            }
            for m in batches.into_iter().flatten() {
                got.push(String::from_utf8(m.payload_bytes().to_vec()).unwrap());
            }
        }
        source.close().await.unwrap();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{version:?}: committed records only, each once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_consumer_reads_exactly_what_the_rdkafka_2pc_sink_committed() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("xb-rd-txn");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let o = parse_two_phase_commit(
            &params(&[
                ("brokers", &brokers),
                ("topic", &topic),
                ("transactional_id", &format!("{topic}-txn")),
                ("backend", "rdkafka"),
                ("linger_ms", "1"),
            ]),
            0,
            1,
        )
        .unwrap();
        let mut sink = selected::two_phase_commit_sink(o).unwrap();
        sink.open().await.unwrap();
        let batch = |p: &str, n| values(p, n).into_iter().map(Text::from).collect::<Vec<_>>();
        sink.on_data(batch("cp1", 30)).await.unwrap();
        sink.on_barrier(1).await.unwrap();
        sink.on_commit(1).await.unwrap();
        sink.on_data(batch("cp2", 25)).await.unwrap();
        sink.on_barrier(2).await.unwrap();
        sink.on_abort(2).await.unwrap();
        sink.on_data(batch("cp3", 10)).await.unwrap();
        sink.on_barrier(3).await.unwrap();
        sink.on_commit(3).await.unwrap();
        let stats = sink.stats();
        sink.close().await.unwrap();
        let mut want = values("cp1", 30);
        want.extend(values("cp3", 10));
        assert_eq!(
            common::read_committed_values(&cluster, &topic, 1, 40).await,
            want,
            "{version:?}: committed checkpoints only, in order, once ({stats:?})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rdkafka_transactional_backend_takes_its_identity_from_the_statistics() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("xb-rd-identity");
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let o = parse_sink(
            FactoryKind::MessageSink,
            &params(&[("brokers", &brokers), ("topic", &topic), ("backend", "rdkafka")]),
        )
        .unwrap();
        let mut backend = RdkafkaTransactionalProducer::new(&o).unwrap();
        assert!(backend.identity().is_none(), "no identity before init");
        let id = format!("{topic}-txn");
        let first = backend.init_transactions(&id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(first.transactional_id, id);
        assert!(first.has_identity(), "{first:?}");
        assert_eq!(first.transaction_version, TransactionVersion::V1);
        // The broker agrees: the transactional id's producer id and epoch.
        let admin = clink_kafka::client::Admin::new(cluster.clone());
        let described = admin.describe_transactions(&[id.as_str()]).await.unwrap();
        let d = described[0].1.as_ref().expect("described");
        assert_eq!(
            (d.producer_id, d.producer_epoch),
            (first.producer_id, first.producer_epoch),
            "{version:?}"
        );
        for (round, commit) in [(1, true), (2, false), (3, true)] {
            backend.begin_transaction().unwrap();
            let mut deliveries = Vec::new();
            for v in values(&format!("r{round}"), 10) {
                deliveries.push(
                    backend
                        .send(&topic, None, clink_kafka::connector::KafkaMessage::new(v))
                        .await
                        .unwrap(),
                );
            }
            backend.flush(T).await.unwrap();
            for d in deliveries {
                d.await.unwrap();
            }
            if commit {
                backend.commit_transaction(T).await.unwrap();
                assert_eq!(
                    backend.identity().as_ref(),
                    Some(&first),
                    "TV1: a commit keeps the epoch"
                );
            } else {
                backend.abort_transaction(T).await.unwrap();
                assert!(backend.identity().is_some_and(|h| h.has_identity()));
            }
        }
        backend.close(T).await.unwrap();
        let mut want = values("r1", 10);
        want.extend(values("r3", 10));
        assert_eq!(
            common::read_committed_values(&cluster, &topic, 1, 20).await,
            want,
            "{version:?}"
        );
    }
}
