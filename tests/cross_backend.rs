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
//!   and abort;
//! - the CLI's `produce` / `consume` / `roundtrip` with `--backend rdkafka`
//!   write and print what the native paths do; without the feature,
//!   `--backend rdkafka` is refused naming the feature.

#![cfg_attr(not(feature = "rdkafka"), allow(dead_code, unused_imports))]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    NewTopic, ProducerConfig, ProducerRecord, TransactionVersion, TransactionalProducer, TxnConfig,
};
use clink_kafka::connector::options::{parse_sink, parse_source, parse_two_phase_commit, FactoryKind};
#[cfg(feature = "rdkafka")]
use clink_kafka::connector::rdkafka::RdkafkaTransactionalProducer;
use clink_kafka::connector::{
    install, selected, BuildContext, Registry, Sink, Source, StagedCheckpoint, StateRow, Text,
};
use clink_kafka::connector::{ProducerBackend, TransactionalProducerBackend};

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
        // A 2PC sink needs a durable receipt directory (issue 13); the child
        // is killed before any commit, so it stays empty.
        .args(["--param", &format!("receipt_dir={}", child_receipts(topic).display())])
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

/// The killed child's receipt directory, under the temp dir.
fn child_receipts(topic: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{topic}-child-receipts"));
    std::fs::create_dir_all(&dir).expect("creating the child's receipt dir");
    dir
}

fn handle_of(rows: &[StateRow]) -> clink_kafka::client::ResumeHandle {
    assert_eq!(rows.len(), 1, "{rows:?}");
    let staged = StagedCheckpoint::from_row(&rows[0]).unwrap().expect("a 2PC row");
    staged.handle.expect("a prepared checkpoint carries its handle")
}

#[cfg(feature = "rdkafka")]
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

#[cfg(feature = "rdkafka")]
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

#[cfg(feature = "rdkafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rdkafka_source_under_read_committed_reads_exactly_what_native_transactions_committed() {
    for (brokers, version) in common::transaction_brokers() {
        let cluster = common::cluster(common::config(&brokers)).await;
        let topic = common::unique_topic("xb-native-txn");
        common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
        let mut producer = TransactionalProducer::init(
            cluster.clone(),
            ProducerConfig::default(),
            TxnConfig::new(format!("{topic}-txn")),
        )
        .await
        .unwrap();
        let mut want = Vec::new();
        for (i, commit) in [true, false, true, false, true].into_iter().enumerate() {
            let t = producer.begin().await.unwrap();
            for v in values(&format!("t{i}"), 40) {
                let mut r = ProducerRecord::new(&topic, v.clone());
                r.partition = Some((v.len() % 2) as i32);
                t.send(r).await.unwrap();
                if commit {
                    want.push(v);
                }
            }
            t.flush(T).await.unwrap();
            if commit {
                t.commit().await.unwrap();
            } else {
                t.abort().await.unwrap();
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

#[cfg(feature = "rdkafka")]
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

#[cfg(feature = "rdkafka")]
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

/// Runs the CLI with `stdin`; returns (exit code, stdout, stderr).
fn cli(args: &[&str], stdin: &[u8]) -> (Option<i32>, String, String) {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("clink-kafka");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(not(feature = "rdkafka"))]
#[test]
fn the_cli_without_the_feature_names_it() {
    for command in ["produce", "consume", "roundtrip", "copy"] {
        let mut args = vec![command, "--backend", "rdkafka", "--brokers", "127.0.0.1:1"];
        match command {
            "produce" | "consume" => args.extend(["--topic", "t"]),
            "copy" => args.extend([
                "--from",
                "a",
                "--to",
                "b",
                "--state-dir",
                "/nonexistent-xb",
                "--transactional-id",
                "t",
            ]),
            _ => {}
        }
        let (code, _, err) = cli(&args, b"");
        assert_eq!(code, Some(1), "{command}: {err}");
        assert!(err.contains("cargo feature `rdkafka`"), "{command}: {err}");
    }
    let (code, _, err) = cli(&["produce", "--backend", "kafka", "--topic", "t"], b"");
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("one of native, rdkafka"), "{err}");
}

#[cfg(feature = "rdkafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_on_rdkafka_writes_and_prints_what_the_native_paths_do() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let input = b"k1|hello\nk2|NULL\nNULL|v3\nk4|world\n";
    let mut printed = Vec::new();
    for backend in ["native", "rdkafka"] {
        let topic = common::unique_topic(&format!("xb-cli-{backend}"));
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let (code, _, err) = cli(
            &[
                "produce",
                "--backend",
                backend,
                "--brokers",
                &brokers,
                "--topic",
                &topic,
                "--key-delimiter",
                "|",
                "--null-marker",
                "NULL",
                "--header",
                "h=1",
                "--compression",
                "lz4",
            ],
            input,
        );
        assert_eq!(code, Some(0), "{backend}: {err}");
        assert!(
            err.contains("produced 4 records") && err.contains("(0 failed)"),
            "{err}"
        );
        // Each backend's output read by both consumers, identically.
        for reader in ["native", "rdkafka"] {
            let (code, out, err) = cli(
                &[
                    "consume",
                    "--backend",
                    reader,
                    "--brokers",
                    &brokers,
                    "--topic",
                    &topic,
                    "--from-beginning",
                    "--count",
                    "4",
                    "--null-marker",
                    "NULL",
                    "--format",
                    "%p/%o %k=%v %h\\n",
                ],
                b"",
            );
            assert_eq!(code, Some(0), "{reader}: {err}");
            printed.push((backend, reader, out.clone()));
            let (code, json, err) = cli(
                &[
                    "consume",
                    "--backend",
                    reader,
                    "--brokers",
                    &brokers,
                    "--topic",
                    &topic,
                    "--from-beginning",
                    "--count",
                    "4",
                    "--format",
                    "json",
                ],
                b"",
            );
            assert_eq!(code, Some(0), "{reader}: {err}");
            assert_eq!(json.lines().count(), 4, "{json}");
            assert!(
                json.contains(r#""key":null"#) && json.contains(r#""value":null"#),
                "{json}"
            );
            assert!(json.contains(&topic), "{json}");
        }
    }
    let want = "0/0 k1=hello h=1\n0/1 k2=NULL h=1\n0/2 NULL=v3 h=1\n0/3 k4=world h=1\n";
    for (backend, reader, out) in &printed {
        assert_eq!(out, want, "written by {backend}, read by {reader}");
    }
    let (code, out, err) = cli(
        &[
            "roundtrip",
            "--backend",
            "rdkafka",
            "--brokers",
            &brokers,
            "--records",
            "5000",
            "--partitions",
            "2",
            "--compression",
            "snappy",
        ],
        b"",
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("verified: all 5,000 records arrived exactly once, in order"),
        "{out}"
    );
}

/// The CLI's `--backend rdkafka` paths take the TLS and SASL flags the
/// native paths take: `produce` over mTLS (encrypted key, zstd) and
/// `consume` over SASL_SSL with SCRAM-SHA-256 on rdkafka, each checked
/// against the other backend; a wrong password is an error that does not
/// echo it.
#[cfg(feature = "rdkafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_on_rdkafka_takes_the_tls_and_sasl_flags() {
    let (Some(brokers), Some(tls), Some(sasl)) = (common::brokers(), common::tls(), common::sasl()) else {
        return;
    };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("xb-cli-tls");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let ca = tls.ca.to_str().unwrap();
    let mtls = |backend: &'static str| -> Vec<String> {
        [
            "--backend",
            backend,
            "--brokers",
            &tls.mtls_brokers,
            "--tls-ca",
            ca,
            "--tls-cert",
            tls.cert.to_str().unwrap(),
            "--tls-key",
            tls.key_encrypted.to_str().unwrap(),
            "--tls-key-password-env",
            "CLINK_XB_KEY_PASSWORD",
            "--topic",
            &topic,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let sasl_ssl = |backend: &'static str, password_var: &'static str| -> Vec<String> {
        [
            "--backend",
            backend,
            "--brokers",
            &tls.sasl_ssl_brokers,
            "--security-protocol",
            "sasl_ssl",
            "--tls-ca",
            ca,
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--sasl-username",
            &sasl.username,
            "--sasl-password-env",
            password_var,
            "--topic",
            &topic,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let run = |args: Vec<String>, stdin: &[u8]| {
        use std::io::Write;
        let mut child = Command::new(BIN)
            .args(&args)
            .env("CLINK_XB_KEY_PASSWORD", &tls.key_password)
            .env("CLINK_XB_SASL_PASSWORD", &sasl.password)
            .env("CLINK_XB_WRONG_PASSWORD", "canary-9d2b-wrong-cli-pw")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("clink-kafka");
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let consume = ["--from-beginning", "--count", "3", "--format", "%v\\n"].map(str::to_owned);

    let mut args = vec!["produce".to_owned()];
    args.extend(mtls("rdkafka"));
    args.extend(["--compression", "zstd"].map(str::to_owned));
    let (code, _, err) = run(args, b"tls-a\ntls-b\ntls-c\n");
    assert_eq!(code, Some(0), "produce --backend rdkafka over mTLS: {err}");
    for (reader, args) in [
        ("native", mtls("native")),
        ("rdkafka", sasl_ssl("rdkafka", "CLINK_XB_SASL_PASSWORD")),
    ] {
        let mut a = vec!["consume".to_owned()];
        a.extend(args);
        a.extend(consume.clone());
        let (code, out, err) = run(a, b"");
        assert_eq!(code, Some(0), "consume --backend {reader}: {err}");
        assert_eq!(out, "tls-a\ntls-b\ntls-c\n", "consume --backend {reader}");
        assert!(
            !err.contains(&sasl.password) && !err.contains(&tls.key_password),
            "{err}"
        );
    }
    let mut a = vec!["consume".to_owned()];
    a.extend(sasl_ssl("rdkafka", "CLINK_XB_WRONG_PASSWORD"));
    a.extend(consume.clone());
    let (code, _, err) = run(a, b"");
    assert_eq!(code, Some(1), "a wrong password fails: {err}");
    assert!(!err.contains("canary-9d2b-wrong-cli-pw"), "{err}");
    assert!(err.to_ascii_lowercase().contains("authentication"), "{err}");
}

/// gzip and zstd across backends, both ways: the rdkafka sink's batches
/// are read by the native consumer (which sees the codec in each batch
/// header), and the native producer's by the rdkafka source.
#[cfg(feature = "rdkafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_and_zstd_batches_cross_backends_both_ways() {
    use clink_kafka::client::{ConsumerConfig, Offset, Producer};
    use clink_kafka::connector::KafkaMessage;
    use clink_kafka::wire::compression::Compression;
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    const N: usize = 50;
    for (name, codec) in [("gzip", Compression::Gzip), ("zstd", Compression::Zstd)] {
        // rdkafka writes, native reads.
        let topic = common::unique_topic(&format!("xb-{name}-rd"));
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let want = values(&format!("{name}-rd"), N);
        let o = parse_sink(
            FactoryKind::MessageSink,
            &params(&[
                ("brokers", &brokers),
                ("topic", &topic),
                ("backend", "rdkafka"),
                ("compression", name),
                ("linger_ms", "20"),
            ]),
        )
        .unwrap();
        let mut sink = selected::kafka_sink(o).unwrap();
        sink.open().await.unwrap();
        sink.on_data(want.iter().map(|v| KafkaMessage::new(v.clone())).collect())
            .await
            .unwrap();
        sink.on_barrier(1).await.unwrap();
        sink.close().await.unwrap();
        let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, 0, Offset::Earliest, N).await;
        let got_values: Vec<String> = got
            .iter()
            .map(|r| String::from_utf8(r.record.value.clone().unwrap().to_vec()).unwrap())
            .collect();
        assert_eq!(got_values, want, "{name}: written by rdkafka, read natively");
        for r in &got {
            assert_eq!(
                r.batch.compression().ok(),
                Some(codec),
                "{name}: the batch at {}",
                r.record.offset
            );
        }

        // native writes, rdkafka reads.
        let topic = common::unique_topic(&format!("xb-{name}-native"));
        common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
        let want = values(&format!("{name}-native"), N);
        let config = ProducerConfig::default().with_compression(codec);
        let producer = Producer::new(cluster.clone(), config).await.unwrap();
        for v in &want {
            producer.send(ProducerRecord::new(&topic, v.clone())).await.unwrap();
        }
        producer.flush(T).await.unwrap();
        let o = parse_source(
            FactoryKind::MessageSource,
            &params(&[("brokers", &brokers), ("topic", &topic), ("backend", "rdkafka")]),
            0,
            1,
        )
        .unwrap();
        let got = common::connector::read_values(o, N).await;
        assert_eq!(got, want, "{name}: written natively, read by rdkafka");
    }
}
