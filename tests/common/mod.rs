//! Shared helpers for the broker integration tests: finding the broker from
//! the environment `scripts/kafka-local env` exports, unique topic names,
//! and small produce/consume loops with bounded waits.
//!
//! Without `CLINK_KAFKA_BROKERS` a test returns early with a note — unless
//! `CI` is `true` or `1`, where a missing broker fails the run (conventions:
//! CI never silently skips). [`broker_required`] is the one place that
//! decides; `tests/ci_check.rs` fails when a test spells its own check.

#![allow(dead_code)] // each test binary uses a different subset

pub mod cluster;
pub mod connector;
pub mod copy_job;
pub mod process;
pub mod proxy;
pub mod scripted;

use std::time::{Duration, Instant};

use clink_kafka::client::{
    Admin, ClientConfig, Cluster, Consumer, ConsumerConfig, ConsumerRecord, NewTopic, Offset, TopicPartition,
};
use clink_kafka::wire::sasl::SaslMechanism;
use clink_kafka::wire::secret::Secret;

const NO_BROKER: &str = "CI=true but no broker: run scripts/kafka-local up and eval its env";

/// Whether this run must have its brokers and tools: `CI` set to `true` or
/// `1` (as CI services set it). A test missing one then fails instead of
/// returning early. The only place the check is spelt: every test asks
/// this (or the helpers below, which do); `tests/ci_check.rs` enforces it.
pub fn broker_required() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        let v = v.trim();
        v == "1" || v.eq_ignore_ascii_case("true")
    })
}

fn in_ci() -> bool {
    broker_required()
}

/// A prerequisite (`what`, with how to get it) is missing: under CI that
/// fails the test (this panics); otherwise a note, and the caller returns
/// early.
pub fn skip_or_fail(what: &str) {
    assert!(!broker_required(), "CI=true but {what} is missing");
    eprintln!("note: {what} is missing; skipping this test");
}

/// The environment variable `var` (non-empty), or `None` with a note
/// outside CI; under CI a missing one fails the test.
pub fn required_env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if in_ci() => panic!("{NO_BROKER} ({var} is not set)"),
        _ => {
            eprintln!(
                "note: {var} is not set; skipping this broker test (run scripts/kafka-local up and eval its env)"
            );
            None
        }
    }
}

/// The plaintext bootstrap list, or `None` (outside CI) when no broker is configured.
pub fn brokers() -> Option<String> {
    required_env("CLINK_KAFKA_BROKERS")
}

/// The SASL listener and credentials.
pub struct SaslEnv {
    pub brokers: String,
    pub username: String,
    pub password: String,
}

/// The SASL listener, or `None` (outside CI) when not configured.
pub fn sasl() -> Option<SaslEnv> {
    Some(SaslEnv {
        brokers: required_env("CLINK_KAFKA_SASL_BROKERS")?,
        username: required_env("CLINK_KAFKA_SASL_USERNAME")?,
        password: required_env("CLINK_KAFKA_SASL_PASSWORD")?,
    })
}

impl SaslEnv {
    /// A client config for `mechanism` with `password`.
    pub fn config(&self, mechanism: SaslMechanism, password: &str) -> ClientConfig {
        ClientConfig::new(&self.brokers).with_sasl(mechanism, self.username.clone(), Secret::new(password))
    }
}

/// A topic name no other test run uses.
pub fn unique_topic(prefix: &str) -> String {
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).expect("OS randomness");
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("clink-test-{prefix}-{ms}-{:08x}", u32::from_be_bytes(random))
}

/// A config with short timeouts, so a broken test fails fast.
pub fn config(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new(brokers);
    c.client_id = "clink-kafka-tests".into();
    c.request_timeout = Duration::from_secs(15);
    c.connect_timeout = Duration::from_secs(5);
    c.metadata_max_wait = Duration::from_secs(20);
    c
}

/// Connects, bounded.
pub async fn cluster(config: ClientConfig) -> Cluster {
    tokio::time::timeout(Duration::from_secs(30), Cluster::connect(config))
        .await
        .expect("connecting to the cluster timed out")
        .expect("connecting to the cluster")
}

/// Creates a fresh topic and waits until it is usable.
pub async fn create_topic(cluster: &Cluster, topic: NewTopic) {
    Admin::new(cluster.clone())
        .create_topics(&[topic])
        .await
        .expect("creating the topic");
}

/// Reads `topic[partition]` from `start` until `count` records arrived (or
/// 30 s passed), then checks that nothing more arrives for a moment.
pub async fn consume_exactly(
    cluster: &Cluster,
    config: ConsumerConfig,
    topic: &str,
    partition: i32,
    start: Offset,
    count: usize,
) -> Vec<ConsumerRecord> {
    let mut consumer = Consumer::new(cluster.clone(), config);
    consumer.assign(&[TopicPartition::new(topic, partition)]);
    consumer.seek(topic, partition, start).await.expect("seek");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    while out.len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} of {count} records arrived from {topic}[{partition}] within 30 s",
            out.len()
        );
        out.extend(consumer.poll(Duration::from_millis(500)).await.expect("poll"));
    }
    let extra = consumer.poll(Duration::from_millis(300)).await.expect("poll");
    assert!(
        extra.is_empty() && out.len() == count,
        "{} records beyond the expected {count}",
        out.len() + extra.len() - count
    );
    out
}

/// The KIP-939 broker (`scripts/kafka-local up --twopc`), or `None`
/// (outside CI) when not configured.
pub fn twopc_brokers() -> Option<String> {
    required_env("CLINK_KAFKA_TWOPC_BROKERS")
}

/// The transaction.version=1 broker, or `None` (outside CI) when not configured.
pub fn tv1_brokers() -> Option<String> {
    required_env("CLINK_KAFKA_TV1_BROKERS")
}

/// A broker whose `auto.create.topics.enable` is on (the tv1 broker of
/// `scripts/kafka-local`), or `None` (outside CI) when not configured.
pub fn auto_create_brokers() -> Option<String> {
    required_env("CLINK_KAFKA_AUTO_CREATE_BROKERS")
}

/// Both brokers transaction tests run against, labelled with the
/// transaction protocol each must speak: the main one (transaction.version=2)
/// and the tv1 one. Empty (outside CI) when the environment is missing.
pub fn transaction_brokers() -> Vec<(String, clink_kafka::client::TransactionVersion)> {
    use clink_kafka::client::TransactionVersion;
    let mut out = Vec::new();
    if let Some(b) = brokers() {
        out.push((b, TransactionVersion::V2));
    }
    if let Some(b) = tv1_brokers() {
        out.push((b, TransactionVersion::V1));
    }
    out
}

/// What Kafka's Java console consumer reads from `topic` with
/// isolation.level=read_committed: the values, one per record, after at
/// most `max` records or `timeout_ms` without a new one. `None` when the
/// tools are missing (outside CI).
pub fn java_read_committed(brokers: &str, topic: &str, max: usize, timeout_ms: u64) -> Option<Vec<String>> {
    use std::io::Read;
    let tools = process::kafka_tools()?;
    let mut child = std::process::Command::new(tools)
        .args(["console-consumer", "--bootstrap-server", brokers, "--topic", topic])
        .args(["--from-beginning", "--isolation-level", "read_committed"])
        .args([
            "--max-messages",
            &max.to_string(),
            "--timeout-ms",
            &timeout_ms.to_string(),
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the console consumer");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_millis(timeout_ms) + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for the console consumer") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the console consumer did not finish; stderr:\n{}", err.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(
        status.success() || err.contains("TimeoutException"),
        "console consumer failed ({status}):\n{err}"
    );
    Some(out.lines().map(str::to_owned).collect())
}

/// Reads every partition of `topic` from the beginning with our
/// read_committed consumer until at least `expected` records arrived and
/// every partition is read to its end with no transaction undecided (last
/// stable offset = high watermark), or 60 s passed. Values as text.
pub async fn read_committed_values(cluster: &Cluster, topic: &str, partitions: i32, expected: usize) -> Vec<String> {
    read_committed_until(cluster, topic, partitions, expected, true).await
}

/// Like [`read_committed_values`], but with `settled = false` it stops at
/// the last stable offset even while a transaction is still open.
pub async fn read_committed_until(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    expected: usize,
    settled: bool,
) -> Vec<String> {
    let config = ConsumerConfig::default().with_isolation(clink_kafka::client::IsolationLevel::ReadCommitted);
    let mut consumer = Consumer::new(cluster.clone(), config);
    let assignment: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic, p)).collect();
    consumer.assign(&assignment);
    consumer.seek_all(Offset::Earliest).await.expect("seek");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    let at_end = |consumer: &Consumer| {
        (0..partitions).all(|p| match (consumer.watermarks(topic, p), consumer.position(topic, p)) {
            (Some(w), Some(pos)) => {
                let (hw, lso) = (w.high_watermark, w.last_stable_offset);
                hw >= 0 && lso >= 0 && pos >= lso && (!settled || lso == hw)
            }
            _ => false,
        })
    };
    let mut polls = 0;
    while Instant::now() < deadline && (out.len() < expected || polls == 0 || !at_end(&consumer)) {
        polls += 1;
        for r in consumer.poll(Duration::from_millis(300)).await.expect("poll") {
            out.push(String::from_utf8_lossy(r.record.value.as_deref().unwrap_or(b"")).into_owned());
        }
    }
    for r in consumer.poll(Duration::from_millis(300)).await.expect("poll") {
        out.push(String::from_utf8_lossy(r.record.value.as_deref().unwrap_or(b"")).into_owned());
    }
    out
}

/// Where the Java client's jars are: the tools classpath if installed, else
/// the broker's own lib dir. `None` (outside CI) when neither exists.
pub fn java_clients_classpath() -> Option<String> {
    if let Ok(cp) = std::env::var("CLINK_KAFKA_TOOLS_CLASSPATH") {
        if !cp.is_empty() {
            return Some(cp);
        }
    }
    let home = std::env::var("KAFKA_LOCAL_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".kafka-local"));
    let lib = home.join("broker-lib");
    let found = std::fs::read_dir(&lib).ok().is_some_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("kafka-clients-"))
    });
    if found {
        return Some(format!("{}/*", lib.display()));
    }
    assert!(!in_ci(), "CI=true but the Kafka client jars are missing");
    eprintln!("note: the Kafka client jars are missing; skipping the Java producer test");
    None
}

/// The TLS listeners and the material `scripts/kafka-local` generated.
pub struct TlsEnv {
    /// SSL listener, server authentication only.
    pub ssl_brokers: String,
    /// SSL listener that requires a client certificate.
    pub mtls_brokers: String,
    /// SASL_SSL listener (SCRAM-SHA-256/512, PLAIN).
    pub sasl_ssl_brokers: String,
    /// The CA that signed the broker and client certificates.
    pub ca: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// `cert`'s key as encrypted PKCS#8 (PBES2, AES-256-CBC).
    pub key_encrypted: std::path::PathBuf,
    /// The password of `key_encrypted` (read from its file).
    pub key_password: String,
    /// An unrelated CA, and a client certificate + key it signed.
    pub other_ca: std::path::PathBuf,
    pub other_cert: std::path::PathBuf,
    pub other_key: std::path::PathBuf,
}

/// The TLS listeners and files, or `None` (outside CI) when not configured.
pub fn tls() -> Option<TlsEnv> {
    let path = |var: &str| required_env(var).map(std::path::PathBuf::from);
    let password_file = path("CLINK_KAFKA_TLS_KEY_PASSWORD_FILE")?;
    let key_password = std::fs::read_to_string(&password_file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", password_file.display()))
        .trim_end_matches(['\n', '\r'])
        .to_owned();
    Some(TlsEnv {
        ssl_brokers: required_env("CLINK_KAFKA_SSL_BROKERS")?,
        mtls_brokers: required_env("CLINK_KAFKA_MTLS_BROKERS")?,
        sasl_ssl_brokers: required_env("CLINK_KAFKA_SASL_SSL_BROKERS")?,
        ca: path("CLINK_KAFKA_TLS_CA")?,
        cert: path("CLINK_KAFKA_TLS_CERT")?,
        key: path("CLINK_KAFKA_TLS_KEY")?,
        key_encrypted: path("CLINK_KAFKA_TLS_KEY_ENCRYPTED")?,
        key_password,
        other_ca: path("CLINK_KAFKA_TLS_OTHER_CA")?,
        other_cert: path("CLINK_KAFKA_TLS_OTHER_CERT")?,
        other_key: path("CLINK_KAFKA_TLS_OTHER_KEY")?,
    })
}

impl TlsEnv {
    /// Trusting our CA, no client certificate.
    pub fn server_auth(&self) -> clink_kafka::client::TlsConfig {
        clink_kafka::client::TlsConfig::default().with_ca_file(self.ca.clone())
    }

    /// Trusting our CA, with the client certificate and its plain key.
    pub fn mutual(&self) -> clink_kafka::client::TlsConfig {
        self.server_auth()
            .with_cert_file(self.cert.clone())
            .with_key_file(self.key.clone())
    }
}

/// The next item of a stream (what `futures::StreamExt::next` does, without
/// the dependency). Cancel safe when the stream is.
pub async fn next<S: futures_core::Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| std::pin::Pin::new(&mut *stream).poll_next(cx)).await
}
