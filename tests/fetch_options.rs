//! The native consumer's own options, set the way an engine sets them
//! (`kafka.<property>` parameters of a source factory, parsed into the
//! consumer configuration the source builds), each shown to take effect
//! against a scripted broker, next to the default that behaves otherwise:
//! `kafka.max.poll.records`, `kafka.max.poll.bytes`,
//! `kafka.max.batch.inflate.bytes`, `kafka.enable.fetch.sessions` and
//! `kafka.fetch.throttle.max.ms`. (The CLI's flags map onto the same
//! settings: `src/cli/consume.rs`'s unit tests.)

mod fetch_peer;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clink_kafka::client::{Consumer, ConsumerConfig, ConsumerRecord, Offset, TopicPartition};
use clink_kafka::connector::options::{parse_source, FactoryKind};
use clink_kafka::wire::compression::Compression;
use clink_kafka::wire::record::{BatchMeta, RecordBatchEncoder, RecordOut};
use fetch_peer::str;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};

const TOPIC: &str = "tuned";
const LOG_LEN: i64 = 40;
const VALUE_LEN: usize = 100;

/// The consumer configuration a `kafka_message_source` built with `extra`
/// runs with (a short `fetch.wait.max.ms` keeps the tests quick).
fn configured(extra: &[(&str, &str)]) -> ConsumerConfig {
    let params: BTreeMap<String, String> = [
        ("brokers", "127.0.0.1:1"),
        ("topic", TOPIC),
        ("kafka.fetch.wait.max.ms", "20"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    parse_source(FactoryKind::MessageSource, &params, 0, 1)
        .expect("valid options")
        .consumer_config()
}

/// The log from `from`: one lz4 batch of `LOG_LEN` records of 100-byte
/// values, or (`big`) one lz4 batch holding one 4 KiB record.
fn log(from: i64, big: bool) -> Bytes {
    let small = [b'v'; VALUE_LEN];
    let large = vec![b'L'; 4096];
    let records: Vec<RecordOut<'_>> = if big {
        vec![RecordOut {
            timestamp: 1,
            key: None,
            value: Some(&large),
            headers: &[],
        }]
    } else {
        (0..LOG_LEN)
            .map(|_| RecordOut {
                timestamp: 1,
                key: None,
                value: Some(&small),
                headers: &[],
            })
            .collect()
    };
    let mut out = BytesMut::new();
    if from < records.len() as i64 {
        let meta = BatchMeta {
            base_offset: 0,
            compression: Compression::Lz4,
            ..BatchMeta::default()
        };
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
    }
    out.freeze()
}

/// What the broker saw of each Fetch: (session id, epoch).
type Seen = Arc<Mutex<Vec<(i32, i32)>>>;

/// A consumer with `config` on a scripted broker serving `log(_, big)`
/// (throttling each answer by `throttle_ms`), positioned at 0.
async fn consumer(config: ConsumerConfig, big: bool, throttle_ms: i32) -> (Consumer, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let answer = Box::new(move |req: &FetchRequest| {
        s.lock().unwrap().push((req.session_id, req.session_epoch));
        let mut resp = FetchResponse::default();
        resp.throttle_time_ms = throttle_ms;
        let end = if big { 1 } else { LOG_LEN };
        for t in &req.topics {
            for p in &t.partitions {
                let mut d = PartitionData::default();
                d.partition_index = p.partition;
                d.high_watermark = end;
                d.last_stable_offset = end;
                d.records = Some(log(p.fetch_offset, big));
                let mut e = FetchableTopicResponse::default();
                e.topic = TopicName(str(TOPIC));
                e.partitions = vec![d];
                resp.responses.push(e);
            }
        }
        resp
    });
    let cluster = fetch_peer::start(TOPIC, 1, answer).await;
    let mut consumer = Consumer::new(cluster, config);
    consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::At(0)).await.unwrap();
    (consumer, seen)
}

/// Polls until the whole log arrived; returns each poll's records.
async fn polls(consumer: &mut Consumer) -> Vec<Vec<ConsumerRecord>> {
    let mut out: Vec<Vec<ConsumerRecord>> = Vec::new();
    let mut next = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while next < LOG_LEN {
        assert!(Instant::now() < deadline, "only {next} records in 20 s");
        let records = consumer.poll(Duration::from_millis(200)).await.unwrap();
        for r in &records {
            assert_eq!(r.record.offset, next);
            next += 1;
        }
        if !records.is_empty() {
            out.push(records);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_poll_records_bounds_each_poll() {
    let (mut c, _) = consumer(configured(&[("kafka.max.poll.records", "7")]), false, 0).await;
    let sizes: Vec<usize> = polls(&mut c).await.iter().map(Vec::len).collect();
    assert!(sizes.iter().all(|n| *n <= 7), "{sizes:?}");
    assert_eq!(sizes[0], 7, "{sizes:?}");
    // The default hands the whole answer over at once.
    let (mut c, _) = consumer(configured(&[]), false, 0).await;
    let sizes: Vec<usize> = polls(&mut c).await.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![LOG_LEN as usize]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_poll_bytes_bounds_each_poll() {
    let (mut c, _) = consumer(configured(&[("kafka.max.poll.bytes", "350")]), false, 0).await;
    let sizes: Vec<usize> = polls(&mut c).await.iter().map(Vec::len).collect();
    // 3 values of 100 bytes fit in 350, a 4th does not.
    assert!(sizes.iter().all(|n| *n <= 3), "{sizes:?}");
    assert_eq!(sizes[0], 3, "{sizes:?}");
    let (mut c, _) = consumer(configured(&[]), false, 0).await;
    let sizes: Vec<usize> = polls(&mut c).await.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![LOG_LEN as usize]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_batch_inflate_bounds_what_one_record_may_inflate_to() {
    // A 4 KiB record in an lz4 batch: over a 1 KiB bound it is a typed
    // error naming the bound; under the default it arrives.
    let (mut c, _) = consumer(configured(&[("kafka.max.batch.inflate.bytes", "1024")]), true, 0).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let e = loop {
        assert!(Instant::now() < deadline, "no error in 20 s");
        match c.poll(Duration::from_millis(200)).await {
            Ok(r) => assert!(r.is_empty(), "a 4 KiB record arrived through a 1 KiB bound"),
            Err(e) => break e,
        }
    };
    assert!(matches!(e, clink_kafka::Error::CorruptRecord { .. }), "{e}");
    assert!(e.to_string().contains("1024"), "the error names the bound: {e}");
    let (mut c, _) = consumer(configured(&[]), true, 0).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "the 4 KiB record did not arrive");
        let r = c.poll(Duration::from_millis(200)).await.unwrap();
        if let Some(r) = r.first() {
            assert_eq!(r.record.value.as_ref().map(|v| v.len()), Some(4096));
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enable_fetch_sessions_false_sends_sessionless_fetches() {
    let (mut c, seen) = consumer(configured(&[("kafka.enable.fetch.sessions", "false")]), false, 0).await;
    polls(&mut c).await;
    let seen = seen.lock().unwrap().clone();
    // Epoch -1: a full fetch that opens no session (KIP-227).
    assert!(!seen.is_empty() && seen.iter().all(|s| *s == (0, -1)), "{seen:?}");
    let (mut c, seen) = consumer(configured(&[]), false, 0).await;
    polls(&mut c).await;
    // By default every fetch asks for a session (this peer declines them).
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty() && seen.iter().all(|s| *s == (0, 0)), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_throttle_max_ms_caps_a_brokers_throttle() {
    // The broker throttles every answer by a minute; 1.2 s of polling.
    async fn fetches(config: ConsumerConfig) -> usize {
        let (mut c, seen) = consumer(config, false, 60_000).await;
        let until = Instant::now() + Duration::from_millis(1200);
        while Instant::now() < until {
            c.poll(Duration::from_millis(100)).await.unwrap();
        }
        let n = seen.lock().unwrap().len();
        n
    }
    let capped = fetches(configured(&[("kafka.fetch.throttle.max.ms", "100")])).await;
    assert!(capped >= 3, "{capped} fetches: the throttle was not capped at 100 ms");
    let uncapped = fetches(configured(&[])).await;
    assert!(
        uncapped <= 2,
        "{uncapped} fetches: the default 30 s cap let the consumer through"
    );
}
