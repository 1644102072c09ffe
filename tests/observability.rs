//! Metrics and the protocol log against the real broker (native client).
//!
//! - The CLI's `--metrics-addr`: `consume` and `copy` scraped while they
//!   run, the values checked against what was produced; a non-loopback or
//!   busy address refused naming the flag.
//! - `metric_prefix`: the connector's and its client's series carry it.
//! - `enable_debug`: the client's protocol log (requests, answers,
//!   metadata) appears with it and not without it, over SASL, and the
//!   password never does.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::NewTopic;
use clink_kafka::connector::{install, BuildContext, KafkaMessage, Registry};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");

/// One `GET /metrics` (bounded: 5 s).
fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the scrape");
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    out
}

/// The value of the series whose line starts with `name{` and contains
/// every one of `labels` (`key="value"`), if present.
fn value(scraped: &str, name: &str, labels: &[&str]) -> Option<f64> {
    scraped
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Scrapes until `done` holds (bounded: 60 s, 300 scrapes); returns the
/// last scrape.
fn scrape_until(addr: &str, child: &mut Child, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    for _ in 0..300 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the command exited ({status}) before its metrics showed it; last scrape:\n{last}");
        }
        if TcpStream::connect(addr).is_ok() {
            last = scrape(addr);
            if done(&last) {
                return last;
            }
        }
        assert!(
            Instant::now() < deadline,
            "metrics never reached the expected values:\n{last}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("metrics never reached the expected values:\n{last}");
}

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills and reaps a child this test started.
fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_serves_metrics_that_match_what_was_produced() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("metrics-consume");
    common::create_topic(&cluster, NewTopic::new(&topic, 3, 1)).await;
    let per_partition = 400;
    for p in 0..3 {
        let values: Vec<String> = (0..per_partition).map(|i| format!("p{p}-value-{i:05}")).collect();
        common::connector::produce_values(&cluster, &topic, Some(p), &values).await;
    }
    let value_bytes: usize = 3 * per_partition * "p0-value-00000".len();
    let addr = format!("127.0.0.1:{}", free_port());
    let client_id = format!("metrics-{}", std::process::id());
    let mut child = Command::new(BIN)
        .args(["consume", "--brokers", &brokers, "--topic", &topic, "--from-beginning"])
        .args(["--client-id", &client_id, "--metrics-addr", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let total = (3 * per_partition) as f64;
    let id = format!("client_id=\"{client_id}\"");
    let s = scrape_until(&addr, &mut child, |s| {
        value(s, "clink_kafka_records_consumed", &[&id]) == Some(total)
            && (0..3).all(|p| value(s, "clink_kafka_consumer_lag", &[&id, &format!("partition=\"{p}\"")]) == Some(0.0))
    });
    stop(child);
    // Wire bytes of the Fetch answers: at least the values themselves.
    let fetched = value(&s, "clink_kafka_fetch_bytes", &[&id]).expect("fetch_bytes");
    assert!(
        fetched >= value_bytes as f64,
        "fetch_bytes {fetched} < {value_bytes}\n{s}"
    );
    let fetches = value(&s, "clink_kafka_request_latency_seconds_count", &[&id, "api=\"Fetch\""])
        .expect("a Fetch latency histogram");
    assert!(fetches >= 1.0, "{s}");
    assert!(
        s.contains("clink_kafka_request_latency_seconds_bucket{") && s.contains("le=\"0.005\""),
        "latency is a histogram with buckets:\n{s}"
    );
    assert!(
        value(&s, "clink_kafka_in_flight_requests", &[&id]).is_some_and(|v| (0.0..=3.0).contains(&v)),
        "at most one fetch per broker in flight:\n{s}"
    );
    for p in 0..3 {
        assert!(
            s.contains(&format!("topic=\"{topic}\"")) && s.contains(&format!("partition=\"{p}\"")),
            "lag labelled by topic and partition:\n{s}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_serves_connector_and_transaction_metrics() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let from = common::unique_topic("metrics-copy-in");
    let to = common::unique_topic("metrics-copy-out");
    common::create_topic(&cluster, NewTopic::new(&from, 2, 1)).await;
    common::create_topic(&cluster, NewTopic::new(&to, 2, 1)).await;
    let values: Vec<String> = (0..600).map(|i| format!("copy-{i}")).collect();
    common::connector::produce_values(&cluster, &from, None, &values).await;
    let state = std::env::temp_dir().join(format!("{to}-state"));
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(BIN)
        .args(["copy", "--brokers", &brokers, "--from", &from, "--to", &to])
        .args(["--state-dir", state.to_str().unwrap(), "--transactional-id", &to])
        .args(["--checkpoint-every-records", "100", "--max-batch-records", "100"])
        .args(["--until-idle-ms", "20000"])
        .args(["--metrics-addr", &addr])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let consumed = format!("topic=\"{from}\"");
    let delivered = format!("topic=\"{to}\"");
    let s = scrape_until(&addr, &mut child, |s| {
        value(s, "clink_kafka_consumed", &[&consumed, "subtask=\"0\""]) == Some(600.0)
            && value(s, "clink_kafka_delivered", &[&delivered, "subtask=\"0\""]) == Some(600.0)
    });
    stop(child);
    let _ = std::fs::remove_dir_all(&state);
    assert_eq!(value(&s, "clink_kafka_consume_errors", &[&consumed]), Some(0.0), "{s}");
    assert_eq!(
        value(&s, "clink_kafka_delivery_errors", &[&delivered]),
        Some(0.0),
        "{s}"
    );
    assert_eq!(
        value(&s, "clink_kafka_assigned_partitions", &[&consumed]),
        Some(2.0),
        "{s}"
    );
    // 600 records in batches of 100, a checkpoint every 100: at least 6 committed
    // transactions, each with a latency sample; no abort.
    // The series come out in no fixed order, and the source's client carries
    // zero-valued ones too: every lookup names the sink's client.
    let sink = "client_id=\"clink-sink-2pc\"";
    let commits = value(&s, "clink_kafka_transaction_commits", &[sink]).expect("transaction_commits");
    assert!(commits >= 6.0, "{commits}\n{s}");
    let timed = value(&s, "clink_kafka_transaction_commit_latency_seconds_count", &[sink]).expect("commit latency");
    assert_eq!(timed, commits, "{s}");
    assert_eq!(value(&s, "clink_kafka_transaction_aborts", &[sink]), Some(0.0), "{s}");
    let produced = value(&s, "clink_kafka_records_produced", &[sink]).expect("records_produced");
    assert_eq!(produced, 600.0, "{s}");
    assert!(
        value(
            &s,
            "clink_kafka_request_latency_seconds_count",
            &[sink, "api=\"Produce\""]
        )
        .is_some_and(|n| n >= 1.0),
        "{s}"
    );
}

#[test]
fn metrics_addr_must_be_a_free_loopback_address() {
    let run = |addr: &str| {
        let out = Command::new(BIN)
            .args([
                "consume",
                "--brokers",
                "127.0.0.1:1",
                "--topic",
                "t",
                "--metrics-addr",
                addr,
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{addr} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = run("0.0.0.0:9464");
    assert!(e.contains("--metrics-addr") && e.contains("loopback"), "{e}");
    let e = run("localhost:9464");
    assert!(e.contains("--metrics-addr") && e.contains("IP:PORT"), "{e}");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let e = run(&busy.local_addr().unwrap().to_string());
    assert!(e.contains("--metrics-addr") && e.contains("cannot listen"), "{e}");
}

fn registry() -> Registry {
    let mut r = Registry::new();
    install(&mut r).unwrap();
    r
}

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Produce calls until `n` records came (bounded: 30 s, 2,000 calls).
async fn read_n(source: &mut Box<dyn clink_kafka::connector::Source<Item = KafkaMessage>>, n: usize) -> usize {
    common::connector::read_n(source.as_mut(), n).await.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metric_prefix_names_the_connector_and_client_series() {
    let Some(brokers) = common::brokers() else { return };
    let handle = clink_kafka::metrics::install_prometheus("test").unwrap();
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("metrics-prefix");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let prefix = format!("mp{}", std::process::id());
    let registry = registry();
    let ctx = BuildContext::new(params(&[
        ("brokers", &brokers),
        ("topic", &topic),
        ("metric_prefix", &prefix),
        ("client_id", "prefixed-sink"),
    ]));
    let mut sink = registry
        .build("kafka_message_sink", &ctx)
        .unwrap()
        .into_message_sink("kafka_message_sink")
        .unwrap();
    sink.open().await.unwrap();
    sink.on_data((0..5).map(|i| KafkaMessage::new(format!("m{i}"))).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
    let ctx = BuildContext::new(params(&[
        ("brokers", &brokers),
        ("topic", &topic),
        ("metric_prefix", &prefix),
        ("client_id", "prefixed-source"),
    ]));
    let mut source = registry
        .build("kafka_message_source", &ctx)
        .unwrap()
        .into_message_source("kafka_message_source")
        .unwrap();
    source.open().await.unwrap();
    assert_eq!(read_n(&mut source, 5).await, 5);
    source.close().await.unwrap();
    let s = handle.render();
    let t = format!("topic=\"{topic}\"");
    let name = |n: &str| format!("{prefix}_{n}");
    assert_eq!(value(&s, &name("delivered"), &[&t, "subtask=\"0\""]), Some(5.0), "{s}");
    assert_eq!(value(&s, &name("consumed"), &[&t, "subtask=\"0\""]), Some(5.0), "{s}");
    assert_eq!(value(&s, &name("assigned_partitions"), &[&t]), Some(1.0), "{s}");
    assert_eq!(
        value(&s, &name("records_produced"), &["client_id=\"prefixed-sink\""]),
        Some(5.0),
        "{s}"
    );
    assert_eq!(
        value(&s, &name("records_consumed"), &["client_id=\"prefixed-source\""]),
        Some(5.0),
        "{s}"
    );
    // Nothing of these clients under the default prefix.
    assert!(
        !s.contains("clink_kafka_records_consumed{client_id=\"prefixed-source\""),
        "{s}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_debug_logs_the_protocol_and_never_the_password() {
    let Some(brokers) = common::brokers() else { return };
    let Some(sasl) = common::sasl() else { return };
    let logs = common::connector::capture_logs();
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("debug-log");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    common::connector::produce_values(&cluster, &topic, None, &["a".into(), "b".into()]).await;
    let registry = registry();
    let read = |debug: &'static str| {
        let ctx = BuildContext::new(params(&[
            ("brokers", &sasl.brokers),
            ("topic", &topic),
            ("security_protocol", "sasl_plaintext"),
            ("sasl_mechanism", common::connector::sasl_mechanism()),
            ("sasl_username", &sasl.username),
            ("sasl_password", &sasl.password),
            ("enable_debug", debug),
        ]));
        let mut source = registry
            .build("kafka_message_source", &ctx)
            .unwrap()
            .into_message_source("kafka_message_source")
            .unwrap();
        async move {
            source.open().await.unwrap();
            assert_eq!(read_n(&mut source, 2).await, 2);
            source.close().await.unwrap();
        }
    };
    let before = logs.contents().len();
    read("false").await;
    let quiet = logs.contents()[before..].to_owned();
    assert!(
        !quiet.contains("clink_kafka::protocol"),
        "no protocol log without enable_debug:\n{quiet}"
    );
    let before = logs.contents().len();
    read("true").await;
    let debug = logs.contents()[before..].to_owned();
    let protocol: Vec<&str> = debug.lines().filter(|l| l.contains("clink_kafka::protocol")).collect();
    for want in [
        "api=\"SaslAuthenticate\"",
        "api=\"Metadata\"",
        "api=\"Fetch\"",
        "api=\"ListOffsets\"",
    ] {
        assert!(
            protocol.iter().any(|l| l.contains(want) && l.contains("request"))
                && protocol.iter().any(|l| l.contains(want) && l.contains("response")),
            "request and response lines for {want}:\n{}",
            protocol.join("\n")
        );
    }
    assert!(
        protocol
            .iter()
            .any(|l| l.contains("metadata changed") && l.contains(&topic)),
        "a metadata change:\n{}",
        protocol.join("\n")
    );
    assert!(
        protocol
            .iter()
            .any(|l| l.contains("connected") && l.contains(&sasl.username)),
        "the connection (mechanism and user):\n{}",
        protocol.join("\n")
    );
    let all = logs.contents();
    assert!(!all.contains(&sasl.password), "the password reached the log");
}
