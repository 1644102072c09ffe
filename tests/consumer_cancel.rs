//! Cancel safety against the real broker, on the backend
//! `CLINK_KAFKA_TEST_BACKEND` selects (the trait requires it of both):
//! `ConsumerBackend::poll` (natively `Consumer::poll`) and
//! `KafkaSource::produce` futures dropped at every point we can reach (a
//! sweep of timeouts, and futures polled by hand a counted number of times
//! and then dropped), after which every record still arrives exactly once
//! and in order per partition. Also (native client only, skipped in the
//! rdkafka pass): incremental fetch sessions (KIP-227) are really used
//! against the broker, and results stay correct.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, Consumer, ConsumerConfig, ConsumerRecord, FetchSessionState, NewTopic, Offset, PartitionOffset, Producer,
    ProducerConfig, ProducerRecord,
};
use clink_kafka::connector::options::{parse_source, FactoryKind, SourceOptions};
use clink_kafka::connector::selected::{self, SelectedConsumer};
use clink_kafka::connector::{ConsumerBackend, KafkaMessage, Source};
use clink_kafka::wire::compression::Compression;

const PARTITIONS: i32 = 3;
const PER_PARTITION: usize = 1500;
/// Records per partition appended while the poll sweep waits at the end of
/// the log, in groups of `TAIL_GROUP`.
const TAIL: usize = 150;
const TAIL_GROUP: usize = 5;

/// The value of record `i` of partition `p`: names both, then hex noise so
/// lz4 cannot fold a fetch into a few bytes.
fn value(p: i32, i: usize) -> String {
    let noise: String = (0..4u64)
        .map(|k| {
            format!(
                "{:016x}",
                (i as u64 * 4 + k).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ p as u64
            )
        })
        .collect();
    format!("p{p}-{i:05}-{noise}")
}

/// A producer of small lz4 batches, so a small fetch holds few records and
/// the consumer has to fetch often.
async fn small_batch_producer(cluster: &Cluster) -> Producer {
    Producer::new(
        cluster.clone(),
        ProducerConfig::default()
            .with_compression(Compression::Lz4)
            .with_batch_size(2 * 1024),
    )
    .await
    .unwrap()
}

/// A topic with `PER_PARTITION` records in each of 3 partitions, lz4, in
/// several batches each; values name partition and index ([`value`]).
async fn fixture(cluster: &Cluster, prefix: &str) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, PARTITIONS, 1)).await;
    let producer = small_batch_producer(cluster).await;
    for i in 0..PER_PARTITION {
        for p in 0..PARTITIONS {
            let r = ProducerRecord::new(&topic, value(p, i)).with_partition(p);
            producer.send(r).await.unwrap();
        }
    }
    producer.flush(Duration::from_secs(60)).await.unwrap();
    topic
}

/// Every partition's offsets are exactly 0..PER_PARTITION, in order, and
/// each value matches its offset.
fn check_exactly_once(got: &[(i32, i64, Vec<u8>)]) {
    check_exactly_once_of(got, PER_PARTITION)
}

/// Every partition's offsets are exactly 0..per_partition, in order, and
/// each value matches its offset.
fn check_exactly_once_of(got: &[(i32, i64, Vec<u8>)], per_partition: usize) {
    let mut by_partition: BTreeMap<i32, Vec<(i64, &[u8])>> = BTreeMap::new();
    for (p, o, v) in got {
        by_partition.entry(*p).or_default().push((*o, v));
    }
    assert_eq!(by_partition.len(), PARTITIONS as usize);
    for (p, records) in by_partition {
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        let expected: Vec<i64> = (0..per_partition as i64).collect();
        if offsets != expected {
            let dup = offsets.windows(2).find(|w| w[1] <= w[0]);
            let gap = offsets.windows(2).find(|w| w[1] > w[0] + 1);
            panic!(
                "partition {p}: {} records, first repeat/backwards {dup:?}, first gap {gap:?}",
                offsets.len()
            );
        }
        for (o, v) in records {
            assert!(v.starts_with(format!("p{p}-{o:05}-").as_bytes()), "{p}@{o}");
        }
    }
}

/// Ends a sweep that stopped making progress: after `STALL` without a new
/// record, the records so far are checked (a lost record shows as the
/// first gap), and if they have none the sweep fails as too slow; `deadline`
/// bounds the whole sweep.
struct Progress {
    count: usize,
    at: Instant,
    deadline: Instant,
}

const STALL: Duration = Duration::from_secs(10);

impl Progress {
    fn new(deadline: Instant) -> Progress {
        Progress {
            count: 0,
            at: Instant::now(),
            deadline,
        }
    }

    /// Whether the sweep goes on with `got` records of `want`.
    fn go_on(&mut self, got: &[(i32, i64, Vec<u8>)], want: usize, per_partition: usize) -> bool {
        if got.len() >= want {
            return false;
        }
        if got.len() > self.count {
            (self.count, self.at) = (got.len(), Instant::now());
        }
        if self.at.elapsed() > STALL || Instant::now() > self.deadline {
            check_no_gap(got, per_partition);
            panic!("only {} of {want} records, and none lost: too slow", got.len());
        }
        true
    }
}

/// No partition's offsets so far repeat, go backwards or skip one.
fn check_no_gap(got: &[(i32, i64, Vec<u8>)], per_partition: usize) {
    let mut by_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (p, o, _) in got {
        by_partition.entry(*p).or_default().push(*o);
    }
    for (p, offsets) in by_partition {
        let n = offsets.len();
        if offsets != (0..n as i64).collect::<Vec<_>>() {
            // The full check names the first repeat and gap.
            check_exactly_once_of(got, per_partition);
            panic!("partition {p}: offsets not 0..{n}");
        }
    }
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

fn keep(out: &mut Vec<(i32, i64, Vec<u8>)>, records: Vec<KafkaMessage>) {
    out.extend(
        records
            .into_iter()
            .map(|m| (m.partition, m.offset, m.payload_bytes().to_vec())),
    );
}

/// What the native client's poll hands over, as [`keep`] takes it.
fn keep_native(out: &mut Vec<(i32, i64, Vec<u8>)>, records: Vec<ConsumerRecord>) {
    out.extend(
        records
            .into_iter()
            .map(|r| (r.partition, r.record.offset, r.record.value.unwrap().to_vec())),
    );
}

/// Source options on the suite's backend for `topic`, from the earliest
/// offsets, with small fetches (1 KiB per partition) so the consumer has
/// to fetch often, plus `extra`.
fn source_options(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> SourceOptions {
    let mut extra = extra.to_vec();
    extra.extend([
        ("auto_offset_reset", "earliest"),
        ("kafka.max.partition.fetch.bytes", "1024"),
    ]);
    let params: BTreeMap<String, String> = common::connector::connector_params(brokers, topic, &extra)
        .into_iter()
        .collect();
    let options = parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap();
    assert_eq!(options.backend.name(), common::connector::backend());
    options
}

/// `ConsumerBackend::poll` futures of the suite's backend (natively
/// `Consumer::poll` underneath; on rdkafka the drain of librdkafka's queue
/// and the wait for its non-empty callback) dropped at every point a sweep
/// reaches: every record still arrives exactly once, in order per
/// partition, and nothing more after the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_polls_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-poll").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    // Natively, polls of at most 37 records / 4,000 bytes: many polls, each
    // cut out of a buffered fetch. librdkafka has no such bounds (refused on
    // rdkafka by design); there a poll takes what librdkafka has queued.
    let bounds: &[(&str, &str)] = if common::connector::on_rdkafka() {
        &[]
    } else {
        &[("kafka.max.poll.records", "37"), ("kafka.max.poll.bytes", "4000")]
    };
    let mut consumer = SelectedConsumer::for_options(&source_options(&brokers, &topic, bounds)).unwrap();
    consumer.connect().await.unwrap();
    assert_eq!(consumer.partition_count(&topic).await.unwrap(), PARTITIONS);
    let from_start: Vec<PartitionOffset> = (0..PARTITIONS)
        .map(|partition| PartitionOffset { partition, offset: 0 })
        .collect();
    consumer.assign(&topic, &from_start).await.unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut dropped, mut completed) = (0usize, 0usize);
    // Sweep 1: futures polled by hand k times (k = 1, 2, 3, ...) and dropped
    // unless they finished; each hand poll is followed by a yield so the
    // fetch tasks and the connections make progress in between.
    let mut k = 0usize;
    let mut progress = Progress::new(deadline);
    while progress.go_on(&got, total / 2, PER_PARTITION + TAIL) {
        k = k % 40 + 1;
        let mut fut = Box::pin(consumer.poll(Duration::from_secs(5)));
        let mut cx = noop_cx();
        let mut done = None;
        for _ in 0..k {
            if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                done = Some(r.unwrap());
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        drop(fut);
        match done {
            Some(records) => {
                completed += 1;
                keep(&mut got, records);
            }
            None => dropped += 1,
        }
    }
    // Sweep 2: tokio timeouts from 0 to 3 ms in 50 µs steps, cycling.
    let mut step = 0u64;
    while progress.go_on(&got, total, PER_PARTITION + TAIL) {
        step = (step + 1) % 60;
        match tokio::time::timeout(Duration::from_micros(step * 50), consumer.poll(Duration::from_secs(5))).await {
            Ok(records) => {
                completed += 1;
                keep(&mut got, records.unwrap());
            }
            Err(_) => dropped += 1,
        }
    }
    check_exactly_once(&got);
    // Sweep 3, at the end of the log: polls that wait for records not yet
    // written (natively a fetch the broker holds; on rdkafka the wait for
    // librdkafka's non-empty callback), dropped after 0-3 ms while a
    // producer appends a tail in small groups: the callbacks and fetch
    // answers land between, before and after the drops.
    let tail_producer = small_batch_producer(&cluster).await;
    let tail_topic = topic.clone();
    let tail = tokio::spawn(async move {
        for group in 0..TAIL / TAIL_GROUP {
            for i in PER_PARTITION + group * TAIL_GROUP..PER_PARTITION + (group + 1) * TAIL_GROUP {
                for p in 0..PARTITIONS {
                    let r = ProducerRecord::new(&tail_topic, value(p, i)).with_partition(p);
                    tail_producer.send(r).await.unwrap();
                }
            }
            tail_producer.flush(Duration::from_secs(30)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let with_tail = PARTITIONS as usize * (PER_PARTITION + TAIL);
    let mut waiting_dropped = 0usize;
    while progress.go_on(&got, with_tail, PER_PARTITION + TAIL) {
        step = (step + 1) % 60;
        match tokio::time::timeout(Duration::from_micros(step * 50), consumer.poll(Duration::from_secs(5))).await {
            Ok(records) => {
                completed += 1;
                keep(&mut got, records.unwrap());
            }
            Err(_) => waiting_dropped += 1,
        }
    }
    tail.await.unwrap();
    check_exactly_once_of(&got, PER_PARTITION + TAIL);
    // Nothing more: a last, undisturbed poll brings nothing.
    let extra = consumer.poll(Duration::from_millis(300)).await.unwrap();
    assert!(extra.is_empty(), "{} records beyond the end", extra.len());
    consumer.close().await.unwrap();
    eprintln!(
        "poll sweep on {}: {dropped} futures dropped, {waiting_dropped} at the end of the log, {completed} completed",
        common::connector::backend()
    );
    assert!(
        dropped > 0,
        "the sweep dropped no future ({completed} completed): it tested nothing"
    );
    assert!(
        waiting_dropped > 0,
        "the end-of-log sweep dropped no waiting future: it tested nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_source_produce_calls_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-source").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let options = source_options(
        &brokers,
        &topic,
        &[("max_batch_size", "53"), ("batch_max_wait_ms", "5")],
    );
    let mut source = selected::kafka_source(options).unwrap();
    source.open().await.unwrap();
    let mut got: Vec<(i32, i64, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut dropped, mut k) = (0usize, 0usize);
    let mut progress = Progress::new(deadline);
    while progress.go_on(&got, total, PER_PARTITION) {
        // Up to ~2.4 ms of hand polls: shorter than most produce calls,
        // whose batch_max_wait is 5 ms.
        k = k % 12 + 1;
        let mut emitted: Vec<Vec<KafkaMessage>> = Vec::new();
        let finished = {
            let mut fut = source.produce(&mut emitted);
            let mut cx = noop_cx();
            let mut finished = false;
            for _ in 0..k {
                if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
                    r.unwrap();
                    finished = true;
                    break;
                }
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            finished
        };
        if !finished {
            dropped += 1;
            assert!(emitted.is_empty(), "a dropped produce emitted a batch");
        }
        for m in emitted.into_iter().flatten() {
            got.push((m.partition, m.offset, m.payload_bytes().to_vec()));
        }
    }
    check_exactly_once(&got);
    assert!(!source.snapshot().is_empty());
    source.close().await.unwrap();
    eprintln!(
        "produce sweep on {}: {dropped} futures dropped",
        common::connector::backend()
    );
    assert!(dropped > 0, "the sweep dropped no future: it tested nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetch_sessions_are_used_and_stay_correct() {
    let Some(brokers) = common::brokers() else { return };
    if common::connector::on_rdkafka() {
        // The native client's fetch sessions: no connector backend is
        // involved, so the parity pass has nothing to run here.
        eprintln!("the native client's fetch sessions: not a backend test, skipped on rdkafka");
        return;
    }
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "fetch-session").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let mut consumer = Consumer::new(
        cluster.clone(),
        ConsumerConfig::default()
            // Small fetches: many requests in one session.
            .with_partition_max_bytes(1024)
            .with_max_poll_records(100),
    );
    consumer.assign_topic(&topic).await.unwrap();
    consumer.seek_all(Offset::Earliest).await.unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut epochs = Vec::new();
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 60 s", got.len());
        keep_native(&mut got, consumer.poll(Duration::from_millis(500)).await.unwrap());
        // The single broker is node 1.
        if let Some(FetchSessionState { id, epoch }) = consumer.fetch_session(1) {
            epochs.push((id, epoch));
        }
    }
    check_exactly_once(&got);
    let ids: std::collections::BTreeSet<i32> = epochs.iter().map(|e| e.0).filter(|id| *id != 0).collect();
    assert_eq!(ids.len(), 1, "one session id from the broker, not {ids:?}");
    let max_epoch = epochs.iter().map(|e| e.1).max().unwrap();
    eprintln!("fetch session {ids:?}: epoch reached {max_epoch}");
    assert!(
        max_epoch > 5,
        "incremental fetches: the session epoch reached only {max_epoch}"
    );
}

/// Polls `fut` by hand up to `k` times (a short sleep after each, so the
/// fetch tasks and connections progress); its output if it finished.
async fn hand_poll<F: Future>(mut fut: std::pin::Pin<&mut F>, k: usize) -> Option<F::Output> {
    let mut cx = noop_cx();
    for _ in 0..k {
        if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
            return Some(r);
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    None
}

async fn small_fetch_consumer(cluster: &Cluster, topic: &str) -> Consumer {
    let mut consumer = Consumer::new(
        cluster.clone(),
        ConsumerConfig::default()
            .with_max_poll_records(37)
            .with_max_poll_bytes(4000)
            .with_partition_max_bytes(1024),
    );
    consumer.assign_topic(topic).await.unwrap();
    consumer.seek_all(Offset::Earliest).await.unwrap();
    consumer
}

/// `recv` futures dropped after k hand polls (k = 1..40, cycling), then
/// under tokio timeouts of 0 to 3 ms: every record exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_recvs_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-recv").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let mut consumer = small_fetch_consumer(&cluster, &topic).await;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut dropped, mut k, mut step) = (0usize, 0usize, 0u64);
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        let r = if got.len() < total / 2 {
            k = k % 40 + 1;
            let fut = std::pin::pin!(consumer.recv());
            hand_poll(fut, k).await
        } else {
            step = (step + 1) % 60;
            tokio::time::timeout(Duration::from_micros(step * 50), consumer.recv())
                .await
                .ok()
        };
        match r {
            Some(r) => keep_native(&mut got, vec![r.unwrap()]),
            None => dropped += 1,
        }
    }
    check_exactly_once(&got);
    assert!(tokio::time::timeout(Duration::from_millis(300), consumer.recv())
        .await
        .is_err());
    eprintln!("recv sweep: {dropped} futures dropped");
    assert!(dropped > 0, "the sweep dropped no future: it tested nothing");
}

/// Record streams dropped (with their `next()` in flight) after k hand
/// polls, a new stream each time; and `next()` futures dropped under tokio
/// timeouts while one stream lives on: every record exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_record_streams_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-stream").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let mut consumer = small_fetch_consumer(&cluster, &topic).await;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut dropped, mut k) = (0usize, 0usize);
    while got.len() < total / 2 {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        k = k % 40 + 1;
        let mut stream = consumer.stream();
        let r = {
            let fut = std::pin::pin!(common::next(&mut stream));
            hand_poll(fut, k).await
        };
        drop(stream);
        match r {
            Some(r) => keep_native(&mut got, vec![r.expect("the stream never ends").unwrap()]),
            None => dropped += 1,
        }
    }
    let mut stream = consumer.stream();
    let mut step = 0u64;
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        step = (step + 1) % 60;
        match tokio::time::timeout(Duration::from_micros(step * 50), common::next(&mut stream)).await {
            Ok(r) => keep_native(&mut got, vec![r.expect("the stream never ends").unwrap()]),
            Err(_) => dropped += 1,
        }
    }
    drop(stream);
    check_exactly_once(&got);
    assert!(consumer.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    eprintln!("record stream sweep: {dropped} streams or next() futures dropped");
    assert!(dropped > 0, "the sweep dropped nothing: it tested nothing");
}

/// As above for the batch stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_batch_streams_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-batches").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let mut consumer = small_fetch_consumer(&cluster, &topic).await;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut dropped, mut k) = (0usize, 0usize);
    while got.len() < total / 2 {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        k = k % 40 + 1;
        let mut stream = consumer.batches();
        let r = {
            let fut = std::pin::pin!(common::next(&mut stream));
            hand_poll(fut, k).await
        };
        drop(stream);
        match r {
            Some(r) => keep_native(&mut got, r.expect("the stream never ends").unwrap()),
            None => dropped += 1,
        }
    }
    let mut stream = consumer.batches();
    let mut step = 0u64;
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        step = (step + 1) % 60;
        match tokio::time::timeout(Duration::from_micros(step * 50), common::next(&mut stream)).await {
            Ok(r) => keep_native(&mut got, r.expect("the stream never ends").unwrap()),
            Err(_) => dropped += 1,
        }
    }
    drop(stream);
    check_exactly_once(&got);
    assert!(consumer.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    eprintln!("batch stream sweep: {dropped} streams or next() futures dropped");
    assert!(dropped > 0, "the sweep dropped nothing: it tested nothing");
}
