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
use clink_kafka::client::{Consumer, ConsumerConfig, Offset, TopicPartition};
use clink_kafka::wire::compression::Compression;
use clink_kafka::wire::record::{BatchMeta, RecordBatchEncoder, RecordOut};
use fetch_peer::str;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};

const TOPIC: &str = "hostile";
const LOG_LEN: i64 = 40;

/// The batch of 4 records holding `offset` (lz4 every other one).
fn batch_at(offset: i64, out: &mut BytesMut) {
    let base = offset - offset % 4;
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
    RecordBatchEncoder::new().encode(out, &meta, &records).unwrap();
}

/// Batches of 4 records from `from` to the end of the log.
fn log_from(from: i64) -> Bytes {
    let mut out = BytesMut::new();
    let mut base = from - from % 4;
    while base < LOG_LEN {
        batch_at(base, &mut out);
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
        ConsumerConfig::default()
            .with_max_wait(Duration::from_millis(20))
            .with_max_poll_records(7),
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
        ConsumerConfig::default().with_max_wait(Duration::from_millis(100)),
    );
    consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
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
            ConsumerConfig::default()
                .with_max_wait(Duration::from_millis(10))
                .with_max_throttle(max_throttle),
        );
        consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
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

/// What the session-keeping peer saw in one Fetch request.
#[derive(Clone, Debug)]
struct SeenFetch {
    session_id: i32,
    epoch: i32,
    /// (partition, fetch offset) listed.
    listed: Vec<(i32, i64)>,
    /// The peer's answer: a top-level error code (0 for none).
    answered_error: i16,
}

/// A broker's side of KIP-227, as strict as Kafka's `FetchSessionCache`:
/// epoch 0 opens a new session (a fresh id), an incremental request must
/// carry the session's id and exactly the next epoch, and the session's
/// partitions are updated from what is listed and forgotten. On the
/// requests numbered in `inject` it answers that top-level error instead
/// and drops the session, as a broker that evicted it does. Each answer
/// carries one batch (4 records) per partition that has data.
struct SessionBroker {
    id: i32,
    next_epoch: i32,
    next_id: i32,
    partitions: std::collections::BTreeMap<i32, i64>,
    inject: Vec<(usize, i16)>,
    seen: Vec<SeenFetch>,
    /// Requests a real broker would have refused, with why.
    violations: Vec<String>,
}

impl SessionBroker {
    fn answer(&mut self, req: &FetchRequest) -> FetchResponse {
        let listed: Vec<(i32, i64)> = req
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
            .collect();
        let n = self.seen.len();
        let mut seen = SeenFetch {
            session_id: req.session_id,
            epoch: req.session_epoch,
            listed: listed.clone(),
            answered_error: 0,
        };
        let mut resp = FetchResponse::default();
        if let Some(&(_, code)) = self.inject.iter().find(|(at, _)| *at == n) {
            self.id = 0;
            self.partitions.clear();
            resp.error_code = code;
            seen.answered_error = code;
            self.seen.push(seen);
            return resp;
        }
        let full = req.session_epoch <= 0;
        if full {
            self.partitions = listed.iter().copied().collect();
            if req.session_epoch == 0 {
                self.id = self.next_id;
                self.next_id += 1;
                self.next_epoch = 1;
            } else {
                self.id = 0;
            }
        } else {
            if self.id == 0 || req.session_id != self.id {
                self.violations.push(format!(
                    "request {n}: session {} is not open (open: {})",
                    req.session_id, self.id
                ));
            } else if req.session_epoch != self.next_epoch {
                self.violations.push(format!(
                    "request {n}: epoch {} where {} was due",
                    req.session_epoch, self.next_epoch
                ));
            }
            self.next_epoch += 1;
            for (p, at) in &listed {
                self.partitions.insert(*p, *at);
            }
            for t in &req.forgotten_topics_data {
                for p in &t.partitions {
                    self.partitions.remove(p);
                }
            }
        }
        resp.session_id = self.id;
        for (&p, &at) in &self.partitions {
            if at >= LOG_LEN {
                if full {
                    resp.responses.push(entry(TOPIC, p, 0, LOG_LEN, Bytes::new()));
                }
                continue;
            }
            let mut records = BytesMut::new();
            batch_at(at, &mut records);
            resp.responses.push(entry(TOPIC, p, 0, LOG_LEN, records.freeze()));
        }
        self.seen.push(seen);
        resp
    }
}

/// KIP-227 session errors from the broker mid-stream: each of
/// FETCH_SESSION_ID_NOT_FOUND (70), INVALID_FETCH_SESSION_EPOCH (71) and
/// FETCH_SESSION_TOPIC_ID_ERROR (106) is answered by a full fetch (epoch 0)
/// that opens a new session, whose incremental fetches then carry its id
/// and epochs 1, 2, …; every record arrives exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_errors_mid_stream_fall_back_to_a_full_fetch_and_a_new_session() {
    let inject = vec![(3usize, 70i16), (7, 71), (11, 106)];
    let broker = Arc::new(Mutex::new(SessionBroker {
        id: 0,
        next_epoch: 0,
        next_id: 1000,
        partitions: Default::default(),
        inject: inject.clone(),
        seen: Vec::new(),
        violations: Vec::new(),
    }));
    let b = broker.clone();
    let answer = Box::new(move |req: &FetchRequest| b.lock().unwrap().answer(req));
    let cluster = fetch_peer::start(TOPIC, 2, answer).await;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig::default().with_max_wait(Duration::from_millis(20)),
    );
    consumer.assign_topic(TOPIC).await.unwrap();
    consumer.seek_all(Offset::Earliest).await.unwrap();
    let mut got: Vec<Vec<i64>> = vec![Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.iter().map(Vec::len).sum::<usize>() < 2 * LOG_LEN as usize {
        assert!(
            Instant::now() < deadline,
            "stuck at {:?}; requests: {:?}",
            got.iter().map(Vec::len).collect::<Vec<_>>(),
            broker.lock().unwrap().seen
        );
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
    assert!(consumer.poll(Duration::from_millis(100)).await.unwrap().is_empty());
    let broker = broker.lock().unwrap();
    let seen = &broker.seen;
    assert!(broker.violations.is_empty(), "{:?}", broker.violations);
    assert!(
        seen.len() > 12,
        "{} requests: the errors were not all reached",
        seen.len()
    );
    assert_eq!(
        (seen[0].session_id, seen[0].epoch),
        (0, 0),
        "the first fetch opens a session"
    );
    for &(at, code) in &inject {
        assert_eq!(seen[at].answered_error, code);
        assert!(seen[at].epoch > 0, "request {at} was incremental: {:?}", seen[at]);
        let next = &seen[at + 1];
        assert_eq!(next.epoch, 0, "after error {code} a full fetch: {next:?}");
        assert!(!next.listed.is_empty(), "the full fetch lists the partitions: {next:?}");
        // The new session (the peer's next id) is used incrementally.
        let opened = seen[at + 2].session_id;
        assert!(
            opened > seen[at].session_id,
            "a new session after {code}: {:?}",
            &seen[at..at + 3]
        );
        assert_eq!(seen[at + 2].epoch, 1, "{:?}", &seen[at..at + 3]);
    }
    // Between the errors: one session, epochs 1, 2, 3, … with no gap.
    for w in seen.windows(2) {
        if w[0].answered_error == 0 && w[1].epoch > 0 {
            if w[0].epoch > 0 {
                assert_eq!(w[1].session_id, w[0].session_id, "{w:?}");
            }
            assert_eq!(w[1].epoch, w[0].epoch + 1, "{w:?}");
        }
    }
}

/// A retriable Fetch error that means stale leadership, per partition
/// (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
/// LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) or for
/// the whole answer: the consumer re-reads the metadata (counted at the
/// peer) and resumes fetching where it was, every record once, in order.
/// (Following a leader to another broker: `tests/leader_move.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_leadership_errors_refresh_metadata_and_the_fetch_resumes() {
    for (code, top_level) in [
        (6i16, false),
        (3, false),
        (5, false),
        (74, false),
        (75, false),
        (6, true),
    ] {
        let fetches = Arc::new(Mutex::new(0usize));
        let f = fetches.clone();
        let answer = Box::new(move |req: &FetchRequest| {
            let mut n = f.lock().unwrap();
            *n += 1;
            let mut resp = FetchResponse::default();
            // The second and third fetches fail: records have arrived
            // before, and must go on arriving after.
            let fail = *n == 2 || *n == 3;
            if fail && top_level {
                resp.error_code = code;
                return resp;
            }
            for t in &req.topics {
                for p in &t.partitions {
                    if p.fetch_offset >= LOG_LEN {
                        continue;
                    }
                    if fail {
                        resp.responses.push(entry(TOPIC, p.partition, code, -1, Bytes::new()));
                        continue;
                    }
                    let mut records = BytesMut::new();
                    batch_at(p.fetch_offset, &mut records);
                    resp.responses
                        .push(entry(TOPIC, p.partition, 0, LOG_LEN, records.freeze()));
                }
            }
            resp
        });
        let (cluster, metadata) = fetch_peer::start_counting(TOPIC, 1, answer).await;
        let mut consumer = Consumer::new(
            cluster,
            ConsumerConfig::default().with_max_wait(Duration::from_millis(20)),
        );
        consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
        consumer.seek(TOPIC, 0, Offset::At(0)).await.unwrap();
        let before = metadata.load(std::sync::atomic::Ordering::Relaxed);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while got.len() < LOG_LEN as usize {
            assert!(Instant::now() < deadline, "code {code}: stuck at {}", got.len());
            for r in consumer.poll(Duration::from_millis(200)).await.unwrap() {
                got.push(r.record.offset);
            }
        }
        assert_eq!(got, (0..LOG_LEN).collect::<Vec<_>>(), "code {code}");
        let refreshed = metadata.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(
            refreshed >= 2,
            "code {code} (top level: {top_level}): {refreshed} metadata requests after two stale-leader answers"
        );
    }
}

/// A broker that answers, for a moment, with records at or past the bound
/// it reports in the same answer (seen from Kafka 4.4 under read_committed:
/// records past the answer's last stable offset for well under 100 ms):
/// the consumer fetches again within milliseconds, not after the whole wait
/// it asked for (it used to wait ~`max_wait`, a ~100 ms latency stall).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_past_the_answers_bound_are_fetched_again_soon() {
    let rounds = Arc::new(Mutex::new(0usize));
    let r = rounds.clone();
    let answer = Box::new(move |req: &FetchRequest| {
        let round = {
            let mut n = r.lock().unwrap();
            *n += 1;
            *n
        };
        // The first two answers hold the last batch (36..40) but report
        // the bound at 36; from the third on, at 40.
        let hwm = if round <= 2 { LOG_LEN - 4 } else { LOG_LEN };
        let mut resp = FetchResponse::default();
        for t in &req.topics {
            for p in &t.partitions {
                resp.responses
                    .push(entry(TOPIC, p.partition, 0, hwm, log_from(LOG_LEN - 4)));
            }
        }
        resp
    });
    let cluster = fetch_peer::start(TOPIC, 1, answer).await;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig::default().with_max_wait(Duration::from_millis(500)),
    );
    consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::At(LOG_LEN - 4)).await.unwrap();
    let started = Instant::now();
    let mut got = Vec::new();
    while got.len() < 4 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "only {} of 4 records",
            got.len()
        );
        got.extend(consumer.poll(Duration::from_millis(500)).await.unwrap());
    }
    let took = started.elapsed();
    let offsets: Vec<i64> = got.iter().map(|r| r.record.offset).collect();
    assert_eq!(offsets, vec![36, 37, 38, 39]);
    assert!(*rounds.lock().unwrap() >= 3);
    assert!(
        took < Duration::from_millis(200),
        "the records took {took:?}: the consumer waited out its fetch wait after an answer past its bound"
    );
}
