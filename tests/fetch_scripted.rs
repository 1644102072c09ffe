//! The consumer against a scripted broker that answers Fetch with entries
//! the consumer did not ask for: a partition named twice, a partition and a
//! topic not in the request, records below the fetch offset (the whole log
//! every time), batches that repeat or go backwards, high watermarks that
//! jump around and records past them, an error code on a duplicate. Every
//! record still arrives exactly once, in order, and nothing at or past the
//! watermark of the answer it came in.

mod fetch_peer;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clink_kafka::client::{Consumer, ConsumerConfig, Offset};
use clink_kafka::wire::compression::Compression;
use clink_kafka::wire::record::{BatchMeta, RecordBatchEncoder, RecordOut};
use fetch_peer::str;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};

const TOPIC: &str = "hostile";
const LOG_LEN: i64 = 40;

/// Batches of 4 records from `from` to the end of the log, lz4 every
/// other one.
fn log_from(from: i64) -> Bytes {
    let mut out = BytesMut::new();
    let mut base = from - from % 4;
    while base < LOG_LEN {
        let values: Vec<String> = (base..base + 4).map(|o| format!("value-{o}")).collect();
        let records: Vec<RecordOut<'_>> = values
            .iter()
            .map(|v| RecordOut {
                timestamp: 1,
                key: None,
                value: Some(v.as_bytes()),
                headers: &[],
            })
            .collect();
        let meta = BatchMeta {
            base_offset: base,
            compression: if base % 8 == 0 {
                Compression::Lz4
            } else {
                Compression::None
            },
            ..BatchMeta::default()
        };
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
        base += 4;
    }
    out.freeze()
}

fn entry(topic: &str, partition: i32, error: i16, hwm: i64, records: Bytes) -> FetchableTopicResponse {
    let mut p = PartitionData::default();
    p.partition_index = partition;
    p.error_code = error;
    p.high_watermark = hwm;
    p.last_stable_offset = hwm;
    p.records = Some(records);
    let mut t = FetchableTopicResponse::default();
    t.topic = TopicName(str(topic));
    t.partitions = vec![p];
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_naming_what_was_not_asked_are_ignored_and_records_arrive_once() {
    let round = Arc::new(Mutex::new(0i64));
    let r = round.clone();
    let answer = Box::new(move |req: &FetchRequest| {
        let mut n = r.lock().unwrap();
        *n += 1;
        let mut resp = FetchResponse::default();
        for t in &req.topics {
            for p in &t.partitions {
                let at = p.fetch_offset;
                if at >= LOG_LEN {
                    continue;
                }
                // The watermark this answer claims: a few records ahead,
                // sometimes behind the position, sometimes negative.
                let hwm = match *n % 4 {
                    0 => at + 5,
                    1 => LOG_LEN,
                    2 => at - 3,
                    _ => -1,
                };
                // The whole log (records below the position), a repeat of
                // the tail, and a batch going backwards.
                let mut records = BytesMut::new();
                records.extend_from_slice(&log_from(0));
                records.extend_from_slice(&log_from(at));
                records.extend_from_slice(&log_from(0)[..]);
                resp.responses
                    .push(entry(TOPIC, p.partition, 0, hwm.min(LOG_LEN), records.freeze()));
                // Named twice (the second with other data and an error).
                resp.responses.push(entry(TOPIC, p.partition, 0, LOG_LEN, log_from(0)));
                resp.responses.push(entry(TOPIC, p.partition, 6, -1, Bytes::new()));
            }
        }
        if !resp.responses.is_empty() {
            // Not asked: another partition, another topic.
            resp.responses.push(entry(TOPIC, 9, 0, LOG_LEN, log_from(0)));
            resp.responses.push(entry("elsewhere", 0, 0, LOG_LEN, log_from(0)));
        }
        resp
    });
    let cluster = fetch_peer::start(TOPIC, 2, answer).await;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig {
            max_wait: Duration::from_millis(20),
            max_poll_records: 7,
            ..ConsumerConfig::default()
        },
    );
    consumer.assign_topic(TOPIC).await.unwrap();
    consumer.seek_all(Offset::Earliest).await.unwrap();
    let mut got: Vec<Vec<i64>> = vec![Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut polls = 0;
    while got.iter().map(Vec::len).sum::<usize>() < 2 * LOG_LEN as usize {
        assert!(
            Instant::now() < deadline,
            "stuck at {:?}",
            got.iter().map(Vec::len).collect::<Vec<_>>()
        );
        polls += 1;
        assert!(polls < 5000, "too many polls");
        for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
            assert_eq!(
                r.record.value.as_deref(),
                Some(format!("value-{}", r.record.offset).as_bytes())
            );
            got[r.partition as usize].push(r.record.offset);
        }
    }
    for (p, offsets) in got.iter().enumerate() {
        assert_eq!(offsets, &(0..LOG_LEN).collect::<Vec<_>>(), "partition {p}");
    }
    // And nothing after the end, though every answer carries the whole log.
    let extra = consumer.poll(Duration::from_millis(200)).await.unwrap();
    assert!(extra.is_empty());
    assert!(*round.lock().unwrap() > 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_answering_nothing_at_once_is_not_spun_on() {
    // Answers immediately, always with data below the position only.
    let rounds = Arc::new(Mutex::new(0usize));
    let r = rounds.clone();
    let answer = Box::new(move |req: &FetchRequest| {
        *r.lock().unwrap() += 1;
        let mut resp = FetchResponse::default();
        for t in &req.topics {
            for p in &t.partitions {
                resp.responses
                    .push(entry(TOPIC, p.partition, 0, LOG_LEN, log_from(0).slice(..)));
                let _ = p;
            }
        }
        resp
    });
    let cluster = fetch_peer::start(TOPIC, 1, answer).await;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig {
            max_wait: Duration::from_millis(100),
            ..ConsumerConfig::default()
        },
    );
    consumer.assign(&[(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::At(LOG_LEN)).await.unwrap();
    // 1 s of polling: without pacing this is thousands of requests.
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        assert!(consumer.poll(Duration::from_millis(100)).await.unwrap().is_empty());
    }
    let n = *rounds.lock().unwrap();
    assert!(
        n <= 40,
        "{n} fetches in 1 s against a broker that answers nothing usable at once"
    );
    assert!(n >= 2, "{n} fetches: the consumer stopped asking");
}

/// KIP-219: a broker's `throttle_time_ms` holds that broker's next fetch
/// back (up to `max_throttle`). The broker answers empty at once, so
/// without the throttle the 10 ms wait asked for would allow ~100 fetches
/// in the 1.2 s of polling; a 400 ms throttle allows about 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_throttling_is_honoured_up_to_the_cap() {
    async fn fetches_in(throttle_ms: i32, max_throttle: Duration) -> usize {
        let rounds = Arc::new(Mutex::new(0usize));
        let r = rounds.clone();
        let answer = Box::new(move |req: &FetchRequest| {
            *r.lock().unwrap() += 1;
            let mut resp = FetchResponse::default();
            resp.throttle_time_ms = throttle_ms;
            for t in &req.topics {
                for p in &t.partitions {
                    resp.responses
                        .push(entry(TOPIC, p.partition, 0, LOG_LEN, log_from(0).slice(..)));
                }
            }
            resp
        });
        let cluster = fetch_peer::start(TOPIC, 1, answer).await;
        let mut consumer = Consumer::new(
            cluster,
            ConsumerConfig {
                max_wait: Duration::from_millis(10),
                max_throttle,
                ..ConsumerConfig::default()
            },
        );
        consumer.assign(&[(TOPIC, 0)]);
        consumer.seek(TOPIC, 0, Offset::At(LOG_LEN)).await.unwrap();
        let until = Instant::now() + Duration::from_millis(1200);
        while Instant::now() < until {
            assert!(consumer.poll(Duration::from_millis(100)).await.unwrap().is_empty());
        }
        let fetches = *rounds.lock().unwrap();
        drop(consumer);
        fetches
    }
    let throttled = fetches_in(400, Duration::from_secs(30)).await;
    assert!(
        (1..=5).contains(&throttled),
        "{throttled} fetches in 1.2 s against a broker throttling each answer by 400 ms"
    );
    // A throttle of a minute is capped at 100 ms: the consumer keeps asking.
    let capped = fetches_in(60_000, Duration::from_millis(100)).await;
    assert!(
        capped >= 3,
        "{capped} fetches in 1.2 s: a 60 s throttle was not capped at max_throttle = 100 ms"
    );
}
