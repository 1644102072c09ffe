//! The three-broker cluster (`scripts/kafka-local up --cluster 3`) for the
//! failover tests: its address from `CLINK_KAFKA_CLUSTER_BROKERS`, and
//! stopping, killing and starting its brokers by id through the script
//! (state dir `CLINK_KAFKA_CLUSTER_HOME`).
//!
//! Tests that take brokers down hold a [`ClusterLock`]: one such test at a
//! time in a test binary, and every broker is started again when the lock
//! is dropped (also when the test panics), so the next test finds the
//! cluster whole.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    ClientConfig, Cluster, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use clink_kafka::wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use clink_kafka::wire::kafka_protocol::messages::{MetadataRequest, TopicName};
use clink_kafka::wire::kafka_protocol::protocol::StrBytes;

/// The number of brokers (`up --cluster 3`).
pub const BROKERS: i32 = 3;

/// The cluster's bootstrap list, or `None` (outside CI) when it is not up.
pub fn brokers() -> Option<String> {
    super::required_env("CLINK_KAFKA_CLUSTER_BROKERS")
}

/// A client config for the cluster, with timeouts that outlast a failover
/// (`broker.session.timeout.ms` is 9 s).
pub fn config(brokers: &str) -> ClientConfig {
    let mut c = super::config(brokers);
    c.request_timeout = Duration::from_secs(20);
    c.metadata_max_wait = Duration::from_secs(60);
    c
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka-local")
}

/// Runs `scripts/kafka-local ARGS` on the cluster's state dir, bounded.
pub fn kafka_local(args: &[&str]) -> String {
    let mut cmd = Command::new(script());
    cmd.args(args);
    if let Ok(home) = std::env::var("CLINK_KAFKA_CLUSTER_HOME") {
        cmd.env("KAFKA_LOCAL_HOME", home);
    }
    let out = super::process::run(&mut cmd, "", Duration::from_secs(240));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn kafka_local_async(args: Vec<String>) {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kafka_local(&args);
    })
    .await
    .expect("scripts/kafka-local");
}

/// SIGKILLs broker `id` (returns once the process is gone).
pub async fn kill(id: i32) {
    kafka_local_async(vec!["cluster-kill".into(), id.to_string()]).await
}

/// Stops broker `id` cleanly (SIGTERM: controlled shutdown).
pub async fn stop(id: i32) {
    kafka_local_async(vec!["cluster-stop".into(), id.to_string()]).await
}

/// Starts broker `id` and waits until it is ready (a no-op when it runs).
pub async fn start(id: i32) {
    kafka_local_async(vec!["cluster-start".into(), id.to_string()]).await
}

static EXCLUSIVE: Mutex<()> = Mutex::new(());

/// One fault test at a time; every broker runs again on drop.
pub struct ClusterLock {
    _guard: MutexGuard<'static, ()>,
}

impl ClusterLock {
    /// Takes the lock and makes sure every broker runs.
    pub fn take() -> ClusterLock {
        let guard = EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner());
        start_all();
        ClusterLock { _guard: guard }
    }
}

impl Drop for ClusterLock {
    fn drop(&mut self) {
        start_all();
    }
}

/// Starts every broker that is not running.
pub fn start_all() {
    for id in 1..=BROKERS {
        kafka_local(&["cluster-start", &id.to_string()]);
    }
}

/// One partition's replica state, straight from a Metadata response.
#[derive(Clone, Debug)]
pub struct Replicas {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// The replica state of every partition of `topic` (empty while unknown).
pub async fn replicas(cluster: &Cluster, topic: &str) -> Vec<Replicas> {
    let mut request = MetadataRequest::default();
    let mut t = MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(topic.to_owned())));
    request.topics = Some(vec![t]);
    let Ok(conn) = cluster.any_broker().await else {
        return Vec::new();
    };
    let Ok(response) = conn.request(&request).await else {
        return Vec::new();
    };
    let mut out: Vec<Replicas> = response
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .flat_map(|t| t.partitions.iter())
        .map(|p| Replicas {
            partition: p.partition_index,
            leader: p.leader_id.0,
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes.iter().map(|b| b.0).collect(),
            isr: p.isr_nodes.iter().map(|b| b.0).collect(),
        })
        .collect();
    out.sort_by_key(|r| r.partition);
    out
}

/// The leader of `topic[partition]` as the cluster reports it now (-1: none).
pub async fn leader(cluster: &Cluster, topic: &str, partition: i32) -> i32 {
    replicas(cluster, topic)
        .await
        .iter()
        .find(|r| r.partition == partition)
        .map_or(-1, |r| r.leader)
}

/// Waits (up to `timeout`) until every partition of `topic` has a leader and
/// all its replicas in sync, so the next kill starts from a whole cluster.
pub async fn wait_in_sync(cluster: &Cluster, topic: &str, timeout: Duration) {
    let started = Instant::now();
    loop {
        let r = replicas(cluster, topic).await;
        if !r.is_empty() && r.iter().all(|p| p.leader >= 0 && p.isr.len() == p.replicas.len()) {
            return;
        }
        assert!(
            started.elapsed() < timeout,
            "{topic}: replicas not in sync after {timeout:?}: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The broker coordinating `transactional_id` (via Kafka's
/// TransactionsCommand), or `None` while the cluster does not know it.
pub async fn coordinator(transactional_id: &str) -> Option<i32> {
    let id = transactional_id.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(script());
        cmd.args(["cluster-coordinator", &id]);
        if let Ok(home) = std::env::var("CLINK_KAFKA_CLUSTER_HOME") {
            cmd.env("KAFKA_LOCAL_HOME", home);
        }
        let out = cmd.stderr(std::process::Stdio::null()).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    })
    .await
    .expect("scripts/kafka-local cluster-coordinator")
}

/// Waits for `child` up to `timeout` (then kills it and panics).
pub fn wait_child(mut child: std::process::Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(s) = child.try_wait().expect("waiting for the child") {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child process ran over {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Partitions of the failover topics.
pub const PARTITIONS: i32 = 6;

/// Records produced at a steady pace into every partition in turn, each
/// acknowledgement timed, until told to stop.
pub struct PacedProducer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Vec<(Instant, Instant)>>>,
    /// Per partition, when the newest acknowledged record was sent.
    newest_acked: Arc<std::sync::Mutex<Vec<Option<Instant>>>>,
}

impl PacedProducer {
    /// Sends `per_tick` records every 100 ms, round robin over the
    /// partitions, values `p{partition}-{n}` with `n` counting per partition.
    /// Each partition's acknowledgements are awaited in order by its own task,
    /// which keeps (sent, acknowledged) per record.
    pub fn start(producer: Arc<Producer>, topic: String, per_tick: usize, min_records: usize) -> PacedProducer {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let newest_acked = Arc::new(std::sync::Mutex::new(vec![None; PARTITIONS as usize]));
        let newest = newest_acked.clone();
        let task = tokio::spawn(async move {
            let mut senders = Vec::new();
            let mut waiters = Vec::new();
            for p in 0..PARTITIONS {
                let (tx, mut rx) =
                    tokio::sync::mpsc::unbounded_channel::<(Instant, clink_kafka::client::DeliveryFuture)>();
                senders.push(tx);
                let newest = newest.clone();
                waiters.push(tokio::spawn(async move {
                    let mut log = Vec::new();
                    let mut n = 0usize;
                    while let Some((sent, ack)) = rx.recv().await {
                        let report = ack
                            .await
                            .unwrap_or_else(|e| panic!("partition {p}: record {n} was not delivered: {e}"));
                        assert_eq!(report.partition, p);
                        assert_eq!(
                            report.offset, n as i64,
                            "partition {p}: record {n} acknowledged at offset {}",
                            report.offset
                        );
                        log.push((sent, Instant::now()));
                        newest.lock().unwrap()[p as usize] = Some(sent);
                        n += 1;
                    }
                    log
                }));
            }
            let mut next = [0usize; PARTITIONS as usize];
            let mut total = 0usize;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            while total < min_records || !stop2.load(Ordering::Acquire) {
                tick.tick().await;
                for _ in 0..per_tick {
                    let p = (total % PARTITIONS as usize) as i32;
                    let n = next[p as usize];
                    next[p as usize] += 1;
                    total += 1;
                    let record = ProducerRecord::new(topic.as_str(), format!("p{p}-{n}")).with_partition(p);
                    let ack = producer.send(record).await.expect("send");
                    senders[p as usize].send((Instant::now(), ack)).expect("ack task");
                }
            }
            drop(senders);
            producer.flush(Duration::from_secs(120)).await.expect("flush");
            let mut logs = Vec::new();
            for w in waiters {
                logs.push(w.await.expect("ack task"));
            }
            logs
        });
        PacedProducer {
            stop,
            task,
            newest_acked,
        }
    }

    /// Waits (up to `limit`) until each of `partitions` has had a record
    /// sent after `at` acknowledged: the stall of a kill at `at` is then
    /// known, and the next fault does not add to it. Whether it came.
    pub async fn recovered(&self, partitions: &[i32], at: Instant, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let done = {
                let newest = self.newest_acked.lock().unwrap();
                partitions.iter().all(|&p| newest[p as usize].is_some_and(|s| s >= at))
            };
            if done {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn finish(self) -> Vec<Vec<(Instant, Instant)>> {
        self.stop.store(true, Ordering::Release);
        self.task.await.expect("producing task")
    }

    /// [`finish`](Self::finish), then closes `producer` (the one this was
    /// started with): the number of records per partition.
    pub async fn finish_and_close(self, producer: Arc<Producer>) -> Vec<usize> {
        let logs = self.finish().await;
        Arc::into_inner(producer)
            .expect("the producing task is done")
            .close(Duration::from_secs(30))
            .await
            .expect("close");
        logs.iter().map(Vec::len).collect()
    }
}

/// The stall a kill at `at` caused on `partitions`: the longest wait, over
/// those partitions, between the kill and the acknowledgement of the first
/// record sent after it.
pub fn stall(logs: &[Vec<(Instant, Instant)>], partitions: &[i32], at: Instant) -> Option<Duration> {
    partitions
        .iter()
        .filter_map(|&p| {
            logs[p as usize]
                .iter()
                .find(|(sent, _)| *sent >= at)
                .map(|(_, acked)| *acked - at)
        })
        .max()
}

/// Reads every partition back from the start and checks it holds exactly
/// `p{p}-0`, `p{p}-1`, … `p{p}-{count-1}` in order: no loss, no duplicate,
/// no reordering.
pub async fn check_exactly_once_in_order(cluster: &Cluster, topic: &str, counts: &[usize]) {
    for p in 0..PARTITIONS {
        let expected = counts[p as usize];
        let got =
            super::consume_exactly(cluster, ConsumerConfig::default(), topic, p, Offset::Earliest, expected).await;
        for (n, r) in got.iter().enumerate() {
            let value = std::str::from_utf8(r.record.value.as_deref().unwrap()).unwrap();
            assert_eq!(value, format!("p{p}-{n}"), "partition {p} offset {}", r.record.offset);
            assert_eq!(r.record.offset, n as i64);
        }
    }
}

/// A consumer reading every partition of `topic` from the start in its own
/// task, checking that each partition holds `p{p}-0`, `p{p}-1`, … in order
/// (as [`PacedProducer`] writes them), until it has the number of records
/// [`finish`](Self::finish) names (bounded: 300 s).
pub struct OrderedReader {
    expected: Arc<AtomicUsize>,
    read: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<usize>,
}

impl OrderedReader {
    /// `during` names the circumstances in a failed poll's panic.
    pub fn start(cluster: Cluster, topic: String, during: &'static str) -> OrderedReader {
        let expected = Arc::new(AtomicUsize::new(usize::MAX));
        let read = Arc::new(AtomicUsize::new(0));
        let (want, progress) = (expected.clone(), read.clone());
        let task = tokio::spawn(async move {
            let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
            let assignment: Vec<TopicPartition> = (0..PARTITIONS)
                .map(|p| TopicPartition::new(topic.as_str(), p))
                .collect();
            consumer.assign(&assignment);
            consumer.seek_all(Offset::Earliest).await.expect("seek");
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut next = [0usize; PARTITIONS as usize];
            loop {
                let total: usize = next.iter().sum();
                progress.store(total, Ordering::Release);
                if total >= want.load(Ordering::Acquire) {
                    return total;
                }
                assert!(
                    Instant::now() < deadline,
                    "the consumer has {total} records after 300 s"
                );
                let records = consumer
                    .poll(Duration::from_millis(500))
                    .await
                    .unwrap_or_else(|e| panic!("poll {during}: {e}"));
                for r in records {
                    let p = r.partition as usize;
                    let value = String::from_utf8_lossy(r.record.value.as_deref().unwrap_or(b"")).into_owned();
                    assert_eq!(
                        value,
                        format!("p{p}-{}", next[p]),
                        "partition {p} offset {}",
                        r.record.offset
                    );
                    next[p] += 1;
                }
            }
        });
        OrderedReader { expected, read, task }
    }

    /// Records read so far.
    pub fn read(&self) -> usize {
        self.read.load(Ordering::Acquire)
    }

    /// Waits until `expected` records were read; returns how many.
    pub async fn finish(self, expected: usize) -> usize {
        self.expected.store(expected, Ordering::Release);
        self.task.await.expect("the reading task")
    }
}

/// Writes the values `v{i}` for `i` in `records` into `input` (record i to
/// partition i % PARTITIONS), 150 every 100 ms, and waits until each is
/// acknowledged.
pub async fn feed_input(cluster: Cluster, input: String, records: std::ops::Range<usize>) {
    let producer = Producer::new(cluster, ProducerConfig::default())
        .await
        .expect("producer");
    let mut acks = Vec::with_capacity(records.len());
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for chunk in 0..records.len().div_ceil(150) {
        tick.tick().await;
        let from = records.start + chunk * 150;
        for i in (from..from + 150).take_while(|i| *i < records.end) {
            let record =
                ProducerRecord::new(input.as_str(), format!("v{i}")).with_partition((i % PARTITIONS as usize) as i32);
            acks.push(producer.send(record).await.expect("send"));
        }
    }
    producer.flush(Duration::from_secs(120)).await.expect("flush");
    for a in acks {
        a.await.expect("input record delivered");
    }
    producer.close(Duration::from_secs(30)).await.expect("close");
}

/// What Kafka's Java console consumer reads from `topic` under
/// read_committed, against the values `v0` … `v{records-1}`:
/// (read, duplicated, missing, foreign). `None` when the tools are missing
/// (outside CI).
pub fn java_exactly_once(brokers: &str, topic: &str, records: usize) -> Option<(usize, usize, usize, usize)> {
    let got = super::java_read_committed(brokers, topic, records + 1_000, 15_000)?;
    let mut counts: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for v in &got {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    let duplicated = counts.values().filter(|c| **c > 1).count();
    let missing = (0..records)
        .filter(|i| !counts.contains_key(format!("v{i}").as_str()))
        .count();
    let foreign = counts.keys().filter(|k| !k.starts_with('v')).count();
    Some((got.len(), duplicated, missing, foreign))
}
