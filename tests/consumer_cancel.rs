//! Cancel safety against the real broker: `Consumer::poll` and
//! `KafkaSource::produce` futures dropped at every point we can reach (a
//! sweep of timeouts, and futures polled by hand a counted number of times
//! and then dropped), after which every record still arrives exactly once
//! and in order per partition. Also: incremental fetch sessions (KIP-227)
//! are really used against the broker, and results stay correct.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, Consumer, ConsumerConfig, ConsumerRecord, FetchSessionState, NewTopic, Offset, Producer, ProducerConfig,
    ProducerRecord,
};
use clink_kafka::connector::options::{parse_source, FactoryKind};
use clink_kafka::connector::{KafkaMessage, KafkaSource, Source};
use clink_kafka::wire::compression::Compression;

const PARTITIONS: i32 = 3;
const PER_PARTITION: usize = 1500;

/// A topic with `PER_PARTITION` records in each of 3 partitions, lz4, in
/// several batches each; values name partition and index.
async fn fixture(cluster: &Cluster, prefix: &str) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, PARTITIONS, 1)).await;
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig::default()
            .with_compression(Compression::Lz4)
            // Small batches, so a small fetch holds few records and the
            // consumer has to fetch often.
            .with_batch_size(2 * 1024),
    )
    .await
    .unwrap();
    for i in 0..PER_PARTITION {
        for p in 0..PARTITIONS {
            // Hex noise, so lz4 cannot fold a fetch into a few bytes.
            let noise: String = (0..4u64)
                .map(|k| {
                    format!(
                        "{:016x}",
                        (i as u64 * 4 + k).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ p as u64
                    )
                })
                .collect();
            let r = ProducerRecord::new(&topic, format!("p{p}-{i:05}-{noise}")).with_partition(p);
            producer.send(r).await.unwrap();
        }
    }
    producer.flush(Duration::from_secs(60)).await.unwrap();
    topic
}

/// Every partition's offsets are exactly 0..PER_PARTITION, in order, and
/// each value matches its offset.
fn check_exactly_once(got: &[(i32, i64, Vec<u8>)]) {
    let mut by_partition: BTreeMap<i32, Vec<(i64, &[u8])>> = BTreeMap::new();
    for (p, o, v) in got {
        by_partition.entry(*p).or_default().push((*o, v));
    }
    assert_eq!(by_partition.len(), PARTITIONS as usize);
    for (p, records) in by_partition {
        let offsets: Vec<i64> = records.iter().map(|r| r.0).collect();
        let expected: Vec<i64> = (0..PER_PARTITION as i64).collect();
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

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

fn keep(out: &mut Vec<(i32, i64, Vec<u8>)>, records: Vec<ConsumerRecord>) {
    out.extend(
        records
            .into_iter()
            .map(|r| (r.partition, r.record.offset, r.record.value.unwrap().to_vec())),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_polls_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-poll").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let mut consumer = Consumer::new(
        cluster.clone(),
        ConsumerConfig::default()
            .with_max_poll_records(37)
            .with_max_poll_bytes(4000)
            .with_partition_max_bytes(1024),
    );
    consumer.assign_topic(&topic).await.unwrap();
    consumer.seek_all(Offset::Earliest).await.unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut dropped, mut completed) = (0usize, 0usize);
    // Sweep 1: futures polled by hand k times (k = 1, 2, 3, ...) and dropped
    // unless they finished; each hand poll is followed by a yield so the
    // fetch tasks and the connections make progress in between.
    let mut k = 0usize;
    while got.len() < total / 2 {
        assert!(Instant::now() < deadline, "only {} of {total} in 90 s", got.len());
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
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 90 s", got.len());
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
    // Nothing more: a last, undisturbed poll brings nothing.
    let extra = consumer.poll(Duration::from_millis(300)).await.unwrap();
    assert!(extra.is_empty(), "{} records beyond the end", extra.len());
    eprintln!("poll sweep: {dropped} futures dropped, {completed} completed");
    assert!(
        dropped > 0,
        "the sweep dropped no future ({completed} completed): it tested nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_source_produce_calls_lose_and_repeat_nothing() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = fixture(&cluster, "cancel-source").await;
    let total = PARTITIONS as usize * PER_PARTITION;
    let params: BTreeMap<String, String> = common::connector::connector_params(
        &brokers,
        &topic,
        &[
            ("auto_offset_reset", "earliest"),
            ("max_batch_size", "53"),
            ("batch_max_wait_ms", "5"),
            ("kafka.max.partition.fetch.bytes", "1024"),
        ],
    )
    .into_iter()
    .collect();
    let mut source = KafkaSource::new(parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap()).unwrap();
    source.open().await.unwrap();
    let mut got: Vec<(i32, i64, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut dropped, mut k) = (0usize, 0usize);
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 90 s", got.len());
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
    eprintln!("produce sweep: {dropped} futures dropped");
    assert!(dropped > 0, "the sweep dropped no future: it tested nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetch_sessions_are_used_and_stay_correct() {
    let Some(brokers) = common::brokers() else { return };
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
        keep(&mut got, consumer.poll(Duration::from_millis(500)).await.unwrap());
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
            Some(r) => keep(&mut got, vec![r.unwrap()]),
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
            Some(r) => keep(&mut got, vec![r.expect("the stream never ends").unwrap()]),
            None => dropped += 1,
        }
    }
    let mut stream = consumer.stream();
    let mut step = 0u64;
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        step = (step + 1) % 60;
        match tokio::time::timeout(Duration::from_micros(step * 50), common::next(&mut stream)).await {
            Ok(r) => keep(&mut got, vec![r.expect("the stream never ends").unwrap()]),
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
            Some(r) => keep(&mut got, r.expect("the stream never ends").unwrap()),
            None => dropped += 1,
        }
    }
    let mut stream = consumer.batches();
    let mut step = 0u64;
    while got.len() < total {
        assert!(Instant::now() < deadline, "only {} of {total} in 120 s", got.len());
        step = (step + 1) % 60;
        match tokio::time::timeout(Duration::from_micros(step * 50), common::next(&mut stream)).await {
            Ok(r) => keep(&mut got, r.expect("the stream never ends").unwrap()),
            Err(_) => dropped += 1,
        }
    }
    drop(stream);
    check_exactly_once(&got);
    assert!(consumer.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    eprintln!("batch stream sweep: {dropped} streams or next() futures dropped");
    assert!(dropped > 0, "the sweep dropped nothing: it tested nothing");
}
