//! Helpers for the connector tests: producing fixture records, build
//! parameters, and capturing `tracing` output to check it for secrets.

use std::time::Duration;

use clink_kafka::client::Cluster;

/// Produces `values` to `topic` (to `partition`, or spread), flushed.
pub async fn produce_values(cluster: &Cluster, topic: &str, partition: Option<i32>, values: &[String]) {
    use clink_kafka::client::{Producer, ProducerConfig, ProducerRecord};
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    for v in values {
        let mut r = ProducerRecord::new(topic, v.clone());
        r.partition = partition;
        producer.send(r).await.expect("send");
    }
    producer.flush(Duration::from_secs(30)).await.expect("flush");
}

/// The backend the connector tests run on: `CLINK_KAFKA_TEST_BACKEND`
/// (`native` or `rdkafka`), `native` when unset. `scripts/test` runs the
/// connector suites a second time with `rdkafka` (and `--features rdkafka`).
pub fn backend() -> &'static str {
    match std::env::var("CLINK_KAFKA_TEST_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("native") => "native",
        Ok("rdkafka") if cfg!(feature = "rdkafka") => "rdkafka",
        Ok("rdkafka") => panic!("CLINK_KAFKA_TEST_BACKEND=rdkafka needs the tests built with --features rdkafka"),
        Ok(other) => panic!("CLINK_KAFKA_TEST_BACKEND={other:?}: expected native or rdkafka"),
    }
}

/// Whether the tests run on the rdkafka backend.
pub fn on_rdkafka() -> bool {
    backend() == "rdkafka"
}

/// The transaction version a 2PC sink's resume handle carries on a broker
/// of `broker` version: the broker's natively; always V1 on rdkafka
/// (librdkafka 2.12 speaks EndTxn v0-1 and AddPartitionsToTxn, the
/// original protocol, on every broker — a named difference).
pub fn handle_version(broker: clink_kafka::client::TransactionVersion) -> clink_kafka::client::TransactionVersion {
    if on_rdkafka() {
        clink_kafka::client::TransactionVersion::V1
    } else {
        broker
    }
}

/// The SASL mechanism the connector tests authenticate with, on both
/// backends (librdkafka's SCRAM comes with its OpenSSL).
pub fn sasl_mechanism() -> &'static str {
    "SCRAM-SHA-512"
}

/// Polls `source` until `n` records came (bounded: 30 s, 2,000 calls).
pub async fn read_n<S>(source: &mut S, n: usize) -> Vec<clink_kafka::connector::KafkaMessage>
where
    S: clink_kafka::connector::Source<Item = clink_kafka::connector::KafkaMessage> + ?Sized,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    for _ in 0..2000 {
        if out.len() >= n {
            return out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {n} records within 30 s",
            out.len()
        );
        let mut got = Vec::new();
        source.produce(&mut got).await.unwrap();
        out.extend(got.into_iter().flatten());
    }
    panic!("only {} of {n} records after 2000 produce calls", out.len());
}

/// Opens the selected backend's source with `options`, reads `n` records
/// ([`read_n`]), closes it, and returns their values as UTF-8 strings.
pub async fn read_values(options: clink_kafka::connector::options::SourceOptions, n: usize) -> Vec<String> {
    use clink_kafka::connector::Source;
    let mut source = clink_kafka::connector::selected::kafka_source(options).unwrap();
    source.open().await.unwrap();
    let got = read_n(&mut source, n).await;
    source.close().await.unwrap();
    got.iter()
        .map(|m| String::from_utf8(m.payload_bytes().to_vec()).unwrap())
        .collect()
}

/// Connector build parameters: `brokers`, `topic`, `backend` (see
/// [`backend`]), then `extra`.
pub fn connector_params(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut p = vec![
        ("brokers".to_owned(), brokers.to_owned()),
        ("topic".to_owned(), topic.to_owned()),
        ("backend".to_owned(), backend().to_owned()),
    ];
    p.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    p
}

/// A `tracing` writer into a shared buffer, for tests that inspect logs.
#[derive(Clone, Default)]
pub struct LogBuffer(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogBuffer {
    pub fn contents(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> LogBuffer {
        self.clone()
    }
}

/// Captures every event (TRACE and up) of this test binary into one
/// shared buffer, from the first call on. Global rather than per-thread:
/// tracing caches callsite interest process-wide, and a scoped subscriber
/// misses events whose callsites other threads registered first.
pub fn capture_logs() -> LogBuffer {
    static BUFFER: std::sync::OnceLock<LogBuffer> = std::sync::OnceLock::new();
    BUFFER
        .get_or_init(|| {
            let buffer = LogBuffer::default();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::TRACE)
                .with_ansi(false)
                .with_writer(buffer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
            buffer
        })
        .clone()
}
