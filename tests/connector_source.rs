//! KafkaSource against the real broker: deterministic ownership, restore,
//! start offsets (restored, stored, earliest, latest, none), partition
//! discovery, and the batch bound on a trickling input. A scripted backend
//! in virtual time pins the exact batch shapes.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use clink_kafka::client::{Admin, GroupOffsets, NewTopic, PartitionOffset, TopicPartition, TopicPartitionOffset};
use clink_kafka::connector::options::{parse_source, AutoOffsetReset, FactoryKind, SourceOptions};
use clink_kafka::connector::selected::{self, SelectedConsumer};
use clink_kafka::connector::Origin;
use clink_kafka::connector::{
    install, BuildContext, ConnectorError, KafkaMessage, KafkaSource, Registry, Source, StateRow,
};
use clink_kafka::connector::{ConsumerBackend, Watermark};

fn source(brokers: &str, topic: &str, extra: &[(&str, &str)], index: u32, n: u32) -> KafkaSource<SelectedConsumer> {
    let params: BTreeMap<String, String> = common::connector::connector_params(brokers, topic, extra)
        .into_iter()
        .collect();
    selected::kafka_source(parse_source(FactoryKind::MessageSource, &params, index, n).unwrap()).unwrap()
}

/// Produces batches until `n` records came (bounded: 30 s, 2,000 calls).
async fn read_n<S: Source<Item = KafkaMessage> + ?Sized>(s: &mut S, n: usize) -> Vec<KafkaMessage> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    for _ in 0..2000 {
        if out.len() >= n {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} records within 30 s",
            out.len()
        );
        let mut got = Vec::new();
        s.produce(&mut got).await.unwrap();
        out.extend(got.into_iter().flatten());
    }
    panic!("only {} of {n} records after 2000 produce calls", out.len());
}

fn text(m: &KafkaMessage) -> String {
    String::from_utf8(m.payload_bytes().to_vec()).unwrap()
}

fn values(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_partition_is_owned_exactly_once_at_parallelism_1_to_4() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-own");
    let partitions = 7;
    common::create_topic(&cluster, NewTopic::new(&topic, partitions, 1)).await;
    for p in 0..partitions {
        common::connector::produce_values(&cluster, &topic, Some(p), &[format!("p{p}")]).await;
    }
    let mut registry = Registry::new();
    install(&mut registry).unwrap();
    for n in 1..=4u32 {
        let mut owners: BTreeMap<i32, Vec<u32>> = BTreeMap::new();
        for i in 0..n {
            let ctx = BuildContext::new(common::connector::connector_params(&brokers, &topic, &[])).with_subtask(i, n);
            let mut s = registry
                .build("kafka_message_source", &ctx)
                .unwrap()
                .into_message_source("kafka_message_source")
                .unwrap();
            s.open().await.unwrap();
            // The first snapshot already has a row per owned partition.
            let rows = s.snapshot();
            let owned: BTreeSet<i32> = rows
                .iter()
                .map(|r| {
                    clink_kafka::connector::ResumeRow::from_state(r)
                        .unwrap()
                        .unwrap()
                        .partition
                })
                .collect();
            assert_eq!(owned.len(), rows.len(), "one row per partition");
            for p in &owned {
                assert_eq!(*p as u32 % n, i, "subtask {i}/{n} owns {p}");
                owners.entry(*p).or_default().push(i);
            }
            // It reads exactly its own partitions' records.
            let got = read_n(s.as_mut(), owned.len()).await;
            let read: BTreeSet<i32> = got.iter().map(|m| m.partition).collect();
            assert_eq!(read, owned, "subtask {i}/{n}");
            for m in &got {
                assert_eq!(text(m), format!("p{}", m.partition));
            }
            s.close().await.unwrap();
        }
        assert_eq!(owners.len(), partitions as usize, "parallelism {n}: {owners:?}");
        assert!(owners.values().all(|o| o.len() == 1), "parallelism {n}: {owners:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_resumes_at_exactly_the_next_record() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-restore");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    common::connector::produce_values(&cluster, &topic, Some(0), &values("payload", 0..10)).await;
    common::connector::produce_values(&cluster, &topic, Some(1), &values("other", 0..4)).await;

    // Standalone source, batches of 3 from partition 0 only... both
    // partitions are owned; read until six partition-0 records went by.
    let mut first = source(&brokers, &topic, &[("max_batch_size", "3")], 0, 1);
    first.open().await.unwrap();
    let initial = first.snapshot();
    assert_eq!(initial.len(), 2, "a row per partition before any record");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.iter().filter(|m: &&KafkaMessage| m.partition == 0).count() < 6 {
        assert!(Instant::now() < deadline, "records did not arrive");
        let mut got = Vec::new();
        let n = first.produce(&mut got).await.unwrap();
        assert!(n <= 3, "batch of {n} > max_batch_size");
        seen.extend(got.into_iter().flatten());
    }
    let rows = first.snapshot();
    first.close().await.unwrap();
    let next = |p: i32| {
        seen.iter()
            .filter(|m| m.partition == p)
            .map(|m| m.offset + 1)
            .max()
            .unwrap_or(0)
    };
    let resumed_at: BTreeMap<i32, i64> = rows
        .iter()
        .map(|r| {
            let r = clink_kafka::connector::ResumeRow::from_state(r).unwrap().unwrap();
            (r.partition, r.next_offset)
        })
        .collect();
    assert_eq!(resumed_at, BTreeMap::from([(0, next(0)), (1, next(1))]));
    assert!(rows.iter().all(|r| r.key.contains(&topic)), "rows name the topic");

    // A new source restored from the snapshot emits exactly the next record.
    let mut second = source(&brokers, &topic, &[], 0, 1);
    let mut union = rows.clone();
    union.push(StateRow {
        key: "someone-else/state".into(),
        value: b"ignored".to_vec(),
    });
    second.restore(&union).unwrap();
    second.open().await.unwrap();
    assert_eq!(
        second.origins(),
        BTreeMap::from([(0, Origin::Restored), (1, Origin::Restored)])
    );
    let remaining = (10 - next(0) + 4 - next(1)) as usize;
    let got = read_n(&mut second, remaining).await;
    let p0: Vec<String> = got.iter().filter(|m| m.partition == 0).map(text).collect();
    assert_eq!(
        p0.first().map(String::as_str),
        Some(format!("payload-{}", next(0)).as_str())
    );
    assert_eq!(p0, values("payload", next(0) as usize..10));
    assert_eq!(got.len(), remaining, "nothing replayed, nothing skipped");
    second.close().await.unwrap();

    // Reopened, the same instance continues from what it tracked.
    common::connector::produce_values(&cluster, &topic, Some(0), &["payload-10".to_owned()]).await;
    second.open().await.unwrap();
    assert_eq!(
        second.origins(),
        BTreeMap::from([(0, Origin::Tracked), (1, Origin::Tracked)])
    );
    let got = read_n(&mut second, 1).await;
    assert_eq!(got.iter().map(text).collect::<Vec<_>>(), ["payload-10"]);
    second.close().await.unwrap();

    // A restore hands every subtask the union; each keeps what it owns.
    let mut odd = source(&brokers, &topic, &[], 1, 2);
    odd.restore(&rows).unwrap();
    odd.open().await.unwrap();
    assert_eq!(odd.assignment(), vec![PartitionOffset::new(1, next(1))]);
    assert_eq!(odd.snapshot().len(), 1);
    odd.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_group_starts_by_policy_and_a_committed_offset_is_used() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-fresh");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    common::connector::produce_values(&cluster, &topic, Some(0), &values("old", 0..3)).await;

    // earliest: from offset 0.
    let group = common::unique_topic("g-earliest");
    let mut s = source(
        &brokers,
        &topic,
        &[("group_id", &group), ("auto_offset_reset", "earliest")],
        0,
        1,
    );
    s.open().await.unwrap();
    assert_eq!(s.origins()[&0], Origin::Reset(AutoOffsetReset::Earliest));
    assert_eq!(s.assignment(), vec![PartitionOffset::new(0, 0)]);
    let got = read_n(&mut s, 3).await;
    assert_eq!(got.iter().map(text).collect::<Vec<_>>(), values("old", 0..3));
    s.close().await.unwrap();

    // latest: only what comes after open.
    let group = common::unique_topic("g-latest");
    let mut s = source(
        &brokers,
        &topic,
        &[("group_id", &group), ("auto_offset_reset", "latest")],
        0,
        1,
    );
    s.open().await.unwrap();
    assert_eq!(s.origins()[&0], Origin::Reset(AutoOffsetReset::Latest));
    assert_eq!(s.assignment(), vec![PartitionOffset::new(0, 3)]);
    common::connector::produce_values(&cluster, &topic, Some(0), &["new-0".to_owned()]).await;
    let got = read_n(&mut s, 1).await;
    assert_eq!(got.iter().map(text).collect::<Vec<_>>(), ["new-0"]);
    assert_eq!(got[0].offset, 3);
    s.close().await.unwrap();

    // none: an error naming the partition.
    let group = common::unique_topic("g-none");
    let mut s = source(
        &brokers,
        &topic,
        &[("group_id", &group), ("auto_offset_reset", "none")],
        0,
        1,
    );
    let e = s.open().await.unwrap_err();
    match &e {
        ConnectorError::NoStartOffset { topic: t, partition } => {
            assert_eq!((t.as_str(), *partition), (topic.as_str(), 0));
        }
        other => panic!("expected NoStartOffset, got {other}"),
    }
    assert!(e.to_string().contains(&format!("{topic}[0]")), "{e}");

    // A committed group offset comes before the policy (and makes `none` work);
    // the source itself never commits.
    let group = common::unique_topic("g-stored");
    let offsets = GroupOffsets::new(cluster.clone(), &group).unwrap();
    offsets
        .commit(&[TopicPartitionOffset::new(topic.as_str(), 0, 2)])
        .await
        .unwrap();
    let mut s = source(
        &brokers,
        &topic,
        &[("group_id", &group), ("auto_offset_reset", "none")],
        0,
        1,
    );
    s.open().await.unwrap();
    assert_eq!(s.origins()[&0], Origin::Stored);
    let got = read_n(&mut s, 2).await;
    assert_eq!(got.iter().map(text).collect::<Vec<_>>(), ["old-2", "new-0"]);
    s.close().await.unwrap();
    let committed = offsets.fetch(&[TopicPartition::new(&topic, 0)], false).await.unwrap();
    assert_eq!(
        committed[&TopicPartition::new(&topic, 0)].as_ref().map(|c| c.offset),
        Some(2),
        "the source did not commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_added_while_running_is_picked_up() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-discover");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    common::connector::produce_values(&cluster, &topic, Some(0), &["p0-a".to_owned()]).await;
    let mut s = source(&brokers, &topic, &[("partition_discovery_interval", "200ms")], 0, 1);
    s.open().await.unwrap();
    assert_eq!(read_n(&mut s, 1).await.iter().map(text).collect::<Vec<_>>(), ["p0-a"]);
    assert_eq!(s.assignments(), 1);

    Admin::new(cluster.clone()).create_partitions(&topic, 2).await.unwrap();
    common::connector::produce_values(&cluster, &topic, Some(1), &["p1-a".to_owned()]).await;
    common::connector::produce_values(&cluster, &topic, Some(0), &["p0-b".to_owned()]).await;
    let got = read_n(&mut s, 2).await;
    let mut texts: Vec<String> = got.iter().map(text).collect();
    texts.sort();
    assert_eq!(texts, ["p0-b", "p1-a"]);
    assert_eq!(s.assignments(), 2, "one reassignment");
    assert_eq!(s.origins()[&0], Origin::Held);
    assert_eq!(s.origins()[&1], Origin::Reset(AutoOffsetReset::Earliest));
    assert_eq!(s.snapshot().len(), 2);
    s.close().await.unwrap();

    // With discovery disabled, the new partition stays unassigned.
    let mut fixed = source(&brokers, &topic, &[("partition_discovery_interval", "0")], 0, 1);
    fixed.open().await.unwrap();
    assert_eq!(fixed.assignment().len(), 2);
    Admin::new(cluster.clone()).create_partitions(&topic, 3).await.unwrap();
    common::connector::produce_values(&cluster, &topic, Some(2), &["p2-a".to_owned()]).await;
    let mut got = read_n(&mut fixed, 3).await;
    for _ in 0..5 {
        let mut more = Vec::new();
        fixed.produce(&mut more).await.unwrap();
        got.extend(more.into_iter().flatten());
    }
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got.iter().all(|m| m.partition < 2), "{got:?}");
    assert_eq!(fixed.assignments(), 1);
    fixed.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_max_wait_bounds_batches_on_a_trickle() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-trickle");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let total = 30usize;

    // Two sources read the same trickle: the default bound (5 ms) and the
    // bound disabled with a long first-record wait.
    let mut bounded = source(&brokers, &topic, &[("auto_offset_reset", "earliest")], 0, 1);
    let mut unbounded = source(
        &brokers,
        &topic,
        &[("batch_max_wait_ms", "0"), ("poll_timeout", "3s")],
        0,
        1,
    );
    bounded.open().await.unwrap();
    unbounded.open().await.unwrap();
    let read = |mut s: KafkaSource<SelectedConsumer>| async move {
        let mut sizes = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        for _ in 0..5000 {
            if sizes.iter().sum::<usize>() >= total || Instant::now() > deadline {
                break;
            }
            let mut got = Vec::new();
            s.produce(&mut got).await.unwrap();
            sizes.extend(got.iter().map(Vec::len));
        }
        s.close().await.unwrap();
        sizes
    };
    let a = tokio::spawn(read(bounded));
    let b = tokio::spawn(read(unbounded));
    // One record every 40 ms, each its own produce request.
    let producer = clink_kafka::client::Producer::new(cluster.clone(), Default::default())
        .await
        .unwrap();
    for i in 0..total {
        let r = clink_kafka::client::ProducerRecord::new(&topic, format!("t-{i}")).with_partition(0);
        producer.send(r).await.unwrap();
        producer.flush(Duration::from_secs(10)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let bounded_sizes = a.await.unwrap();
    let unbounded_sizes = b.await.unwrap();
    eprintln!("bounded batch sizes {bounded_sizes:?}; unbounded {unbounded_sizes:?}");
    assert_eq!(bounded_sizes.iter().sum::<usize>(), total);
    assert_eq!(unbounded_sizes.iter().sum::<usize>(), total);
    // With the bound, a batch closes within 5 ms of its first record, so a
    // 40 ms trickle comes out in many small batches; without it one batch
    // keeps filling while records keep coming.
    assert!(bounded_sizes.len() >= total / 3, "bounded batches: {bounded_sizes:?}");
    assert!(
        unbounded_sizes.len() < bounded_sizes.len() && unbounded_sizes.len() <= 3,
        "unbounded batches: {unbounded_sizes:?} vs bounded {bounded_sizes:?}"
    );
}

// ---------------------------------------------------------------------------
// A scripted backend in virtual time: exact batch shapes.

/// One record arrives every `gap` of (virtual) time.
struct Trickle {
    start: tokio::time::Instant,
    gap: Duration,
    next: i64,
    total: i64,
    /// Records a poll returns at once when several are due.
    queue: VecDeque<KafkaMessage>,
}

impl Trickle {
    fn due(&mut self) {
        let now = tokio::time::Instant::now();
        while self.next < self.total && self.start + self.gap * (self.next as u32) <= now {
            let mut m = KafkaMessage::new(format!("r{}", self.next));
            m.offset = self.next;
            m.partition = 0;
            self.queue.push_back(m);
            self.next += 1;
        }
    }
}

impl ConsumerBackend for Trickle {
    async fn connect(&mut self) -> clink_kafka::connector::Result<()> {
        self.start = tokio::time::Instant::now();
        Ok(())
    }
    async fn partition_count(&mut self, _: &str) -> clink_kafka::connector::Result<i32> {
        Ok(1)
    }
    async fn watermark(&mut self, _: &str, _: i32, _: Watermark) -> clink_kafka::connector::Result<i64> {
        Ok(0)
    }
    async fn committed(
        &mut self,
        _: &str,
        _: &str,
        partitions: &[i32],
    ) -> clink_kafka::connector::Result<BTreeMap<i32, Option<i64>>> {
        Ok(partitions.iter().map(|p| (*p, None)).collect())
    }
    async fn assign(&mut self, _: &str, _: &[PartitionOffset]) -> clink_kafka::connector::Result<()> {
        Ok(())
    }
    async fn poll(&mut self, timeout: Duration) -> clink_kafka::connector::Result<Vec<KafkaMessage>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            self.due();
            if !self.queue.is_empty() {
                return Ok(self.queue.drain(..).collect());
            }
            if self.next >= self.total {
                tokio::time::sleep_until(deadline).await;
                return Ok(Vec::new());
            }
            let arrival = self.start + self.gap * (self.next as u32);
            if arrival > deadline {
                tokio::time::sleep_until(deadline).await;
                return Ok(Vec::new());
            }
            tokio::time::sleep_until(arrival).await;
        }
    }
    async fn close(&mut self) -> clink_kafka::connector::Result<()> {
        Ok(())
    }
}

async fn batch_sizes(batch_max_wait_ms: u64, max_batch_size: usize) -> Vec<usize> {
    let mut o = SourceOptions::new("h:1", "t");
    o.batch_max_wait = Duration::from_millis(batch_max_wait_ms);
    o.max_batch_size = max_batch_size;
    o.partition_discovery_interval = Duration::ZERO;
    let backend = Trickle {
        start: tokio::time::Instant::now(),
        gap: Duration::from_millis(2),
        next: 0,
        total: 40,
        queue: VecDeque::new(),
    };
    let mut s = KafkaSource::with_backend(o, backend);
    s.open().await.unwrap();
    let mut sizes = Vec::new();
    for _ in 0..100 {
        let mut got = Vec::new();
        if s.produce(&mut got).await.unwrap() == 0 {
            break;
        }
        sizes.extend(got.iter().map(Vec::len));
    }
    assert_eq!(s.counters().consumed(), 40);
    assert_eq!(s.counters().batches(), sizes.len() as u64);
    sizes
}

#[tokio::test(start_paused = true)]
async fn batch_shapes_in_virtual_time() {
    // A record every 2 ms. With a 5 ms bound a batch is its first record
    // plus the two due within 5 ms of it.
    let bounded = batch_sizes(5, 2048).await;
    let mut expected = vec![3; 13];
    expected.push(1);
    assert_eq!(bounded, expected);
    // Disabled: one batch fills while records keep arriving within the
    // poll timeout.
    assert_eq!(batch_sizes(0, 2048).await, vec![40]);
    // max_batch_size caps either way.
    assert_eq!(batch_sizes(0, 16).await, vec![16, 16, 8]);
}

/// Collects batches and cancels the loop once `until` records came.
struct CancelAfter<'a> {
    got: Vec<KafkaMessage>,
    until: usize,
    cancel: &'a std::sync::atomic::AtomicBool,
}

impl clink_kafka::connector::Emitter<KafkaMessage> for CancelAfter<'_> {
    fn emit(&mut self, batch: Vec<KafkaMessage>) {
        self.got.extend(batch);
        if self.got.len() >= self.until {
            self.cancel.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn drive_runs_until_cancelled_and_snapshots_fall_on_batch_boundaries() {
    let mut o = SourceOptions::new("h:1", "t");
    o.partition_discovery_interval = Duration::ZERO;
    let backend = Trickle {
        start: tokio::time::Instant::now(),
        gap: Duration::from_millis(2),
        next: 0,
        total: 40,
        queue: VecDeque::new(),
    };
    let mut s = KafkaSource::with_backend(o, backend);
    s.open().await.unwrap();
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let mut emitter = CancelAfter {
        got: Vec::new(),
        until: 10,
        cancel: &cancel,
    };
    let emitted = clink_kafka::connector::drive(&mut s, &mut emitter, &cancel)
        .await
        .unwrap();
    assert_eq!(emitted as usize, emitter.got.len());
    assert!(emitter.got.len() >= 10);
    // The snapshot resumes right after the last emitted record.
    let rows = s.snapshot();
    let row = clink_kafka::connector::ResumeRow::from_state(&rows[0])
        .unwrap()
        .unwrap();
    assert_eq!(row.next_offset, emitter.got.last().unwrap().offset + 1);
}

/// Every field of every record arrives as produced, on either backend:
/// keys (and a null key), values (and a null value), headers (several, a
/// null-valued one, none), explicit timestamps, partitions and offsets;
/// 1,300 records over two partitions, so a poll is cut by `max.poll.records`
/// (500) and, on rdkafka, by its 256-message batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_values_headers_and_timestamps_arrive_intact() {
    use bytes::Bytes;
    use clink_kafka::client::{Producer, ProducerConfig, ProducerRecord};
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-fields");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    let n = 1300usize;
    let record = |i: usize| {
        let mut r = ProducerRecord::new(topic.as_str(), format!("value-{i}"));
        r.partition = Some((i % 2) as i32);
        r.key = (!i.is_multiple_of(7)).then(|| Bytes::from(format!("key-{i}")));
        if i.is_multiple_of(11) {
            r.value = None;
        }
        r.headers = match i % 3 {
            0 => vec![],
            1 => vec![("h1".into(), Some(Bytes::from(format!("v-{i}"))))],
            _ => vec![
                ("h1".into(), Some(Bytes::from_static(b""))),
                ("null".into(), None),
                ("h3".into(), Some(Bytes::from(vec![0u8, 255, b'x']))),
            ],
        };
        r.timestamp = Some(1_700_000_000_000 + i as i64);
        r
    };
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    for i in 0..n {
        producer.send(record(i)).await.unwrap();
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();

    let group = common::unique_topic("g-fields");
    let mut s = source(
        &brokers,
        &topic,
        &[("group_id", &group), ("auto_offset_reset", "earliest")],
        0,
        1,
    );
    s.open().await.unwrap();
    let got = read_n(&mut s, n).await;
    assert_eq!(got.len(), n, "exactly the records produced");
    let mut next = [0i64; 2];
    for m in &got {
        let p = m.partition as usize;
        assert!(p < 2, "partition {p}");
        assert_eq!(m.offset, next[p], "partition {p}: offsets in order, none skipped");
        let i = (m.offset as usize) * 2 + p;
        next[p] += 1;
        let want = record(i);
        assert_eq!(m.key, want.key, "record {i}: key");
        assert_eq!(m.payload, want.value, "record {i}: value");
        assert_eq!(m.timestamp, want.timestamp.unwrap(), "record {i}: timestamp");
        let headers: Vec<(String, Option<Bytes>)> = m
            .headers
            .iter()
            .map(|h| (String::from_utf8(h.key.to_vec()).unwrap(), h.value.clone()))
            .collect();
        assert_eq!(headers, want.headers, "record {i}: headers");
    }
    s.close().await.unwrap();
}

/// Sources read read_committed by default (as librdkafka's consumer):
/// an aborted transaction never arrives and an open one holds everything
/// after it back; `kafka.isolation.level=read_uncommitted` sees them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_read_committed_by_default_and_read_uncommitted_opts_out() {
    use clink_kafka::client::{ProducerConfig, ProducerRecord, TransactionalProducer, TxnConfig};
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-isolation");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let plain = |v: &str| vec![v.to_owned()];
    common::connector::produce_values(&cluster, &topic, Some(0), &plain("committed-1")).await;
    let mut producer = TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(&topic))
        .await
        .unwrap();
    let send = |v: &'static str| {
        let mut r = ProducerRecord::new(topic.as_str(), v);
        r.partition = Some(0);
        r
    };
    let txn = producer.begin().await.unwrap();
    txn.send(send("aborted")).await.unwrap();
    txn.flush(Duration::from_secs(30)).await.unwrap();
    txn.abort().await.unwrap();
    common::connector::produce_values(&cluster, &topic, Some(0), &plain("committed-2")).await;
    let txn = producer.begin().await.unwrap();
    txn.send(send("open")).await.unwrap();
    txn.flush(Duration::from_secs(30)).await.unwrap();
    common::connector::produce_values(&cluster, &topic, Some(0), &plain("after-open")).await;

    let read_all = |extra: &'static [(&'static str, &'static str)], n: usize| {
        let mut s = source(&brokers, &topic, extra, 0, 1);
        async move {
            s.open().await.unwrap();
            let mut got: Vec<String> = read_n(&mut s, n).await.iter().map(text).collect();
            // Nothing more arrives (bounded: 10 calls of poll_timeout).
            for _ in 0..10 {
                let mut more = Vec::new();
                s.produce(&mut more).await.unwrap();
                got.extend(more.into_iter().flatten().map(|m| text(&m)));
            }
            s.close().await.unwrap();
            got
        }
    };
    let default = read_all(&[], 2).await;
    assert_eq!(default, ["committed-1", "committed-2"], "read_committed by default");
    let explicit = read_all(&[("kafka.isolation.level", "read_committed")], 2).await;
    assert_eq!(explicit, default);
    let dirty = read_all(&[("kafka.isolation.level", "read_uncommitted")], 5).await;
    assert_eq!(dirty, ["committed-1", "aborted", "committed-2", "open", "after-open"]);
    txn.abort().await.unwrap();
}
