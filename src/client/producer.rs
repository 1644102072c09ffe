//! The producer's accumulator and public API: records are appended to
//! per-partition batches (Java's `RecordAccumulator`); the sender task
//! (`client::sender`) seals them (full, or older than `linger`), sends
//! every ready batch of a broker in one Produce request, and completes each
//! batch once: every record's [`DeliveryFuture`] is a handle on its batch's
//! outcome (no channel per record).
//!
//! Idempotent by default ([KIP-98]): the producer takes a producer id from
//! InitProducerId, and each partition's batches carry consecutive sequence
//! numbers. Up to `max_in_flight` requests per broker connection are
//! outstanding, so several batches of one partition may be in flight; a
//! retry re-sends the very same batch bytes with the same sequence, so the
//! broker drops duplicates. When the outcome of a batch is unknown (its
//! requests timed out or lost their connection until the delivery timeout
//! ran out, or the answer made no sense), the sequence can no longer be
//! trusted: the producer then fails, stickily ([`Error::ProducerFailed`]).
//! A batch the broker definitely refused gives its sequence numbers back.
//!
//! Produce is spoken up to v12: v13 names topics by id ([KIP-516]).
//!
//! [KIP-98]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging
//! [KIP-516]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-516%3A+Topic+Identifiers

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clink_kafka_wire::compression::Compression;
use clink_kafka_wire::kafka_protocol::messages::InitProducerIdRequest;
use tokio::sync::{Notify, Semaphore};

use super::cluster::Cluster;
use super::partitioner::partition_for_key;
use crate::error::{Error, Result};

/// Highest Produce version used: v13 needs topic ids.
pub(crate) const PRODUCE_MAX_VERSION: i16 = 12;
/// Bytes a record costs in a batch beyond its key, value and headers
/// (length, attributes, deltas, field lengths), roughly.
const RECORD_OVERHEAD: usize = 16;
/// Cap on a new batch's initial record capacity (taken from the partition's
/// last batch): a few hundred KiB of bookkeeping at most.
const MAX_INITIAL_BATCH_RECORDS: usize = 4096;

/// How many replicas must have a record before the broker acknowledges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Acks {
    /// `acks=0`: no answer at all; offsets are unknown (-1).
    None,
    /// `acks=1`: the leader has it.
    Leader,
    /// `acks=all` (-1): every in-sync replica has it. Required for idempotence.
    #[default]
    All,
}

impl Acks {
    /// The wire value.
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "0" | "none" => Ok(Acks::None),
            "1" | "leader" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(Error::Config {
                option: "acks",
                message: format!("{other:?} is not one of 0, 1, all"),
            }),
        }
    }
}

/// Producer settings. Names follow the Java client's.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProducerConfig {
    /// `acks`: how many replicas must have a record before it counts as delivered (default all).
    pub acks: Acks,
    /// `enable.idempotence`; needs `acks = all`.
    pub idempotent: bool,
    /// `compression.type` of the batches (default none).
    pub compression: Compression,
    /// `compression.level` (librdkafka's name): the codec's level, -1 (the
    /// default) meaning the codec's default (gzip 6, zstd 1). Which levels
    /// each codec takes: [`Compression::accepted_levels`]; another is
    /// refused when the producer is built. Not with `compression.type`
    /// none.
    pub compression_level: i32,
    /// `linger.ms`: how long a batch waits for more records. Measured on
    /// tokio's millisecond timer, as Java measures it on a millisecond
    /// clock: a batch goes between `linger` less one millisecond and about
    /// `linger` plus a tenth of one. A batch whose partition has no free
    /// in-flight slot (`max_in_flight` requests out, or a retry pending)
    /// keeps filling past its linger, up to `batch_size`, and goes when a
    /// slot frees.
    pub linger: Duration,
    /// `batch.size`: a batch is sealed once its records reach this many
    /// bytes (before compression). A larger single record gets its own batch.
    pub batch_size: usize,
    /// `buffer.memory`: bytes of records buffered or in flight before `send`
    /// waits. A record costs its key, value and headers plus the producer's
    /// bookkeeping for it (about 100 bytes); the cost is held until its batch
    /// is acknowledged (acks=0: written to the socket).
    pub buffer_memory: usize,
    /// `max.request.size`: the largest record accepted.
    pub max_record_size: usize,
    /// The broker's bound on replicating a Produce (`timeout_ms` in it).
    pub ack_timeout: Duration,
    /// `delivery.timeout.ms`: bound on delivering a batch, retries included.
    pub delivery_timeout: Duration,
    /// `max.in.flight.requests.per.connection`: Produce requests outstanding
    /// at once on each broker connection, and batches of one partition in
    /// flight at once (1 to 5 with idempotence, as the broker remembers the
    /// last 5 batches of a producer for deduplication; 1 to 1000 without;
    /// default 5). One request carries a batch of every ready partition led
    /// by that broker.
    pub max_in_flight: usize,
    /// `allow.auto.create.topics`: a record for a topic the cluster does not
    /// know lets a broker whose `auto.create.topics.enable` is on create it
    /// (Metadata v4+ `allow_auto_topic_creation`), as the Java producer does
    /// by default. Off: such a record fails with `UnknownTopic` after
    /// `metadata_max_wait`. Default true. (A consumer never creates topics.)
    pub allow_auto_create_topics: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            idempotent: true,
            compression: Compression::None,
            compression_level: -1,
            linger: Duration::from_millis(5),
            batch_size: 256 * 1024,
            buffer_memory: 64 * 1024 * 1024,
            max_record_size: 1024 * 1024,
            ack_timeout: Duration::from_secs(30),
            delivery_timeout: Duration::from_secs(120),
            max_in_flight: 5,
            allow_auto_create_topics: true,
        }
    }
}

/// Builder-style setters: each returns the config with one setting
/// changed (the fields stay public; the config is `#[non_exhaustive]`, so
/// build it from [`Default`] or its constructor, then these).
impl ProducerConfig {
    /// Sets `acks` (see the field).
    #[must_use]
    pub fn with_acks(mut self, value: Acks) -> Self {
        self.acks = value;
        self
    }

    /// Sets `idempotent` (see the field).
    #[must_use]
    pub fn with_idempotent(mut self, value: bool) -> Self {
        self.idempotent = value;
        self
    }

    /// Sets `compression` (see the field).
    #[must_use]
    pub fn with_compression(mut self, value: Compression) -> Self {
        self.compression = value;
        self
    }

    /// Sets `compression_level` (see the field).
    #[must_use]
    pub fn with_compression_level(mut self, value: i32) -> Self {
        self.compression_level = value;
        self
    }

    /// Sets `linger` (see the field).
    #[must_use]
    pub fn with_linger(mut self, value: Duration) -> Self {
        self.linger = value;
        self
    }

    /// Sets `batch_size`: bytes (see the field).
    #[must_use]
    pub fn with_batch_size(mut self, value: usize) -> Self {
        self.batch_size = value;
        self
    }

    /// Sets `buffer_memory`: bytes (see the field).
    #[must_use]
    pub fn with_buffer_memory(mut self, value: usize) -> Self {
        self.buffer_memory = value;
        self
    }

    /// Sets `max_record_size`: bytes (see the field).
    #[must_use]
    pub fn with_max_record_size(mut self, value: usize) -> Self {
        self.max_record_size = value;
        self
    }

    /// Sets `ack_timeout` (see the field).
    #[must_use]
    pub fn with_ack_timeout(mut self, value: Duration) -> Self {
        self.ack_timeout = value;
        self
    }

    /// Sets `delivery_timeout` (see the field).
    #[must_use]
    pub fn with_delivery_timeout(mut self, value: Duration) -> Self {
        self.delivery_timeout = value;
        self
    }

    /// Sets `max_in_flight` (see the field).
    #[must_use]
    pub fn with_max_in_flight(mut self, value: usize) -> Self {
        self.max_in_flight = value;
        self
    }

    /// Sets `allow_auto_create_topics` (see the field).
    #[must_use]
    pub fn with_allow_auto_create_topics(mut self, value: bool) -> Self {
        self.allow_auto_create_topics = value;
        self
    }
}

/// A record to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    /// The topic. An `Arc<str>`, so a caller that sends many records to one
    /// topic clones a pointer, not the name (and the producer finds its
    /// queues by pointer).
    pub topic: Arc<str>,
    /// An explicit partition; otherwise keyed records hash (murmur2) and
    /// unkeyed ones stick to a partition per batch.
    pub partition: Option<i32>,
    /// The key (`None`: null).
    pub key: Option<Bytes>,
    /// The value (`None`: null, a tombstone).
    pub value: Option<Bytes>,
    /// Header keys are strings; values may be null.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value and nothing else.
    pub fn new(topic: impl IntoTopic, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into_topic(),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    /// Sets the key.
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sets an explicit partition.
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    /// Adds a header.
    pub fn with_header(mut self, key: impl Into<String>, value: Option<Bytes>) -> Self {
        self.headers.push((key.into(), value));
        self
    }

    /// Sets the timestamp (ms since the epoch).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    fn size_estimate(&self) -> usize {
        RECORD_OVERHEAD
            + self.key.as_ref().map_or(0, Bytes::len)
            + self.value.as_ref().map_or(0, Bytes::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len) + 4)
                .sum::<usize>()
    }
}

/// What names a topic in a [`ProducerRecord`]: `&str`, `String`,
/// `&String`, or (no allocation per record) a clone of an `Arc<str>`.
pub trait IntoTopic {
    /// The topic's name as the shared string a record holds.
    fn into_topic(self) -> Arc<str>;
}

impl IntoTopic for Arc<str> {
    fn into_topic(self) -> Arc<str> {
        self
    }
}

impl IntoTopic for &Arc<str> {
    fn into_topic(self) -> Arc<str> {
        self.clone()
    }
}

impl IntoTopic for &str {
    fn into_topic(self) -> Arc<str> {
        Arc::from(self)
    }
}

impl IntoTopic for String {
    fn into_topic(self) -> Arc<str> {
        Arc::from(self)
    }
}

impl IntoTopic for &String {
    fn into_topic(self) -> Arc<str> {
        Arc::from(self.as_str())
    }
}

/// Where a record landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryReport {
    /// The record's topic.
    pub topic: Arc<str>,
    /// The partition it was written to.
    pub partition: i32,
    /// The record's offset; -1 with `acks = 0` (or for a duplicate the broker
    /// had already written, where older brokers give no offset).
    pub offset: i64,
    /// The record's timestamp: the broker's if the topic uses
    /// `LogAppendTime`, else the producer's.
    pub timestamp: i64,
}

/// The producer id and epoch of an idempotent producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerIdentity {
    /// The producer id the broker assigned.
    pub producer_id: i64,
    /// The epoch of that id.
    pub producer_epoch: i16,
}

/// The outcome of one batch, shared by the [`DeliveryFuture`]s of its
/// records: one allocation per batch, not a channel per record.
pub(crate) struct Completion {
    topic: Arc<str>,
    partition: i32,
    /// `(base_offset, log_append_time)`.
    result: OnceLock<Result<(i64, i64)>>,
    wakers: Mutex<Vec<Waker>>,
}

impl Completion {
    fn new(topic: Arc<str>, partition: i32) -> Arc<Completion> {
        Arc::new(Completion {
            topic,
            partition,
            result: OnceLock::new(),
            wakers: Mutex::new(Vec::new()),
        })
    }

    /// Sets the outcome (the first one wins) and wakes every waiter.
    pub(crate) fn complete(&self, result: Result<(i64, i64)>) {
        let _ = self.result.set(result);
        let wakers = std::mem::take(&mut *self.wakers.lock().expect("waker lock"));
        for w in wakers {
            w.wake();
        }
    }

    pub(crate) fn is_complete(&self) -> bool {
        self.result.get().is_some()
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn partition(&self) -> i32 {
        self.partition
    }
}

/// Owns a batch's completion; a batch dropped without an outcome (the
/// runtime shut down under it) completes as [`Error::ProducerClosed`].
pub(crate) struct CompletionGuard(pub(crate) Arc<Completion>);

impl Drop for CompletionGuard {
    fn drop(&mut self) {
        if !self.0.is_complete() {
            self.0.complete(Err(Error::ProducerClosed));
        }
    }
}

/// Resolves to the [`DeliveryReport`] of one sent record: a handle on its
/// batch's outcome and its index in the batch. Dropping it does not affect
/// the record's delivery.
pub struct DeliveryFuture {
    batch: Arc<Completion>,
    index: u32,
    timestamp: i64,
}

impl std::fmt::Debug for DeliveryFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeliveryFuture")
            .field("topic", &self.batch.topic)
            .field("partition", &self.batch.partition)
            .field("index", &self.index)
            .field("done", &self.batch.is_complete())
            .finish()
    }
}

impl DeliveryFuture {
    fn report(&self, r: &Result<(i64, i64)>) -> Result<DeliveryReport> {
        match r {
            Ok((base_offset, log_append_time)) => Ok(DeliveryReport {
                topic: self.batch.topic.clone(),
                partition: self.batch.partition,
                offset: if *base_offset >= 0 {
                    base_offset + i64::from(self.index)
                } else {
                    -1
                },
                timestamp: if *log_append_time >= 0 {
                    *log_append_time
                } else {
                    self.timestamp
                },
            }),
            Err(e) => Err(e.clone()),
        }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<DeliveryReport>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(r) = self.batch.result.get() {
            return Poll::Ready(self.report(r));
        }
        {
            let mut wakers = self.batch.wakers.lock().expect("waker lock");
            // Checked again under the lock: `complete` takes the wakers after setting.
            if self.batch.result.get().is_none() {
                if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                    wakers.push(cx.waker().clone());
                }
                return Poll::Pending;
            }
        }
        let r = self.batch.result.get().expect("checked");
        Poll::Ready(self.report(r))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TopicPartition {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
}

pub(crate) struct PendingRecord {
    pub(crate) timestamp: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<(String, Option<Bytes>)>,
}

/// What one buffered record costs against `buffer_memory`: its payload and
/// headers plus the bookkeeping the producer keeps for it.
fn record_cost(record: &ProducerRecord) -> usize {
    record.size_estimate()
        + std::mem::size_of::<PendingRecord>()
        + record.headers.len() * std::mem::size_of::<(String, Option<Bytes>)>()
}

/// A batch still taking records.
pub(crate) struct OpenBatch {
    pub(crate) records: Vec<PendingRecord>,
    /// Encoded-size estimate (for `batch_size`).
    pub(crate) bytes: usize,
    /// Buffer-memory permits held.
    pub(crate) permits: usize,
    pub(crate) created: Instant,
    /// Position in the partition's batch order.
    pub(crate) order: u64,
    pub(crate) completion: CompletionGuard,
}

/// The payload of a sealed batch: records until its first send, then the
/// encoded bytes every attempt re-sends.
pub(crate) enum Body {
    Records(Vec<PendingRecord>),
    Encoded(Bytes),
}

/// A sealed batch, queued, in flight or awaiting a retry.
pub(crate) struct Batch {
    pub(crate) body: Body,
    pub(crate) count: i32,
    pub(crate) permits: usize,
    pub(crate) created: Instant,
    /// Valid once encoded (idempotent producers).
    pub(crate) base_sequence: i32,
    /// Whether an earlier attempt may have been written.
    pub(crate) maybe_written: bool,
    /// Position in the partition's batch order (sealing order).
    pub(crate) order: u64,
    pub(crate) completion: CompletionGuard,
}

impl From<OpenBatch> for Batch {
    fn from(b: OpenBatch) -> Batch {
        Batch {
            count: b.records.len() as i32,
            body: Body::Records(b.records),
            permits: b.permits,
            created: b.created,
            base_sequence: -1,
            maybe_written: false,
            order: b.order,
            completion: b.completion,
        }
    }
}

/// One partition's accumulator and pipeline: batches leave in sequence
/// order; up to `max_in_flight` of them may be on the wire; after any
/// failure nothing new is sent until every in-flight batch has returned
/// (`draining`), then the queue (retries first, in sequence order) goes out
/// again.
pub(crate) struct PartitionQueue {
    pub(crate) tp: TopicPartition,
    pub(crate) open: Option<OpenBatch>,
    pub(crate) queue: VecDeque<Batch>,
    /// `order` of the batches in flight, in send order.
    pub(crate) in_flight: VecDeque<u64>,
    /// The connection ([`BrokerConnection::id`](super::connection::BrokerConnection::id))
    /// the batches in flight went out on: all of them, always one.
    pub(crate) in_flight_conn: Option<u64>,
    /// The `order` the next batch takes.
    pub(crate) next_order: u64,
    /// The sequence the next batch to be encoded takes.
    pub(crate) next_sequence: i32,
    /// The sequence after the last batch known written.
    pub(crate) confirmed_next: i32,
    /// Whether a batch was acknowledged under the current identity (until
    /// then one batch at a time: see the sender).
    pub(crate) acked: bool,
    /// A batch failed: send nothing until the in-flight ones have returned.
    pub(crate) draining: bool,
    /// A refused batch gave its sequence numbers back: queued batches must
    /// be renumbered from `confirmed_next` before they go out again.
    pub(crate) resequence: bool,
    pub(crate) retry_at: Option<Instant>,
    /// The broker the batch waiting for `retry_at` failed against: when the
    /// metadata names another leader, the retry need not wait.
    pub(crate) retry_leader: Option<i32>,
    pub(crate) backoff: Option<super::backoff::Backoff>,
    /// Records in the last batch sealed here: the next batch's initial
    /// capacity, so a full batch is not built by repeated doubling (each a
    /// copy of every record so far).
    pub(crate) last_batch_len: usize,
}

impl PartitionQueue {
    fn new(tp: TopicPartition) -> Self {
        PartitionQueue {
            tp,
            open: None,
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            in_flight_conn: None,
            next_order: 0,
            next_sequence: 0,
            confirmed_next: 0,
            acked: false,
            draining: false,
            resequence: false,
            retry_leader: None,
            retry_at: None,
            backoff: None,
            last_batch_len: 0,
        }
    }
}

/// A topic as the send path sees it: its partitions' queues (indexes into
/// `State::partitions`) and the sticky partition for unkeyed records.
pub(crate) struct TopicEntry {
    pub(crate) name: Arc<str>,
    pub(crate) queues: Vec<usize>,
    pub(crate) sticky: Option<i32>,
}

/// FxHash (rustc's): topic names are few and trusted, so a fast non-keyed
/// hash is enough for the per-record topic lookup.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(i)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0.rotate_left(5) ^ u64::from(i)).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

pub(crate) type FxBuild = std::hash::BuildHasherDefault<FxHasher>;

#[derive(Default)]
pub(crate) struct State {
    pub(crate) topics: HashMap<Arc<str>, usize, FxBuild>,
    pub(crate) topic_list: Vec<TopicEntry>,
    /// The topic of the previous record (most callers write one topic).
    pub(crate) last_topic: Option<usize>,
    pub(crate) partitions: Vec<PartitionQueue>,
    /// Produce requests in flight per broker node.
    pub(crate) broker_in_flight: HashMap<i32, usize, FxBuild>,
    pub(crate) rng: u64,
}

impl State {
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn find_topic(&mut self, name: &Arc<str>) -> Option<usize> {
        if let Some(i) = self.last_topic {
            let known = &self.topic_list[i].name;
            if Arc::ptr_eq(known, name) || **known == **name {
                return Some(i);
            }
        }
        let i = *self.topics.get(&**name)?;
        self.last_topic = Some(i);
        Some(i)
    }

    fn add_topic(&mut self, name: &Arc<str>, partitions: usize) -> usize {
        if let Some(i) = self.find_topic(name) {
            return i;
        }
        // The caller's own `Arc`: its later records match by pointer.
        let name = name.clone();
        let i = self.topic_list.len();
        self.topic_list.push(TopicEntry {
            name: name.clone(),
            queues: vec![usize::MAX; partitions],
            sticky: None,
        });
        self.topics.insert(name, i);
        self.last_topic = Some(i);
        i
    }

    /// The queue of partition `p` of topic `t`, created on first use.
    fn queue_index(&mut self, t: usize, p: i32) -> usize {
        let entry = &mut self.topic_list[t];
        let slot = &mut entry.queues[p as usize];
        if *slot == usize::MAX {
            *slot = self.partitions.len();
            let tp = TopicPartition {
                topic: entry.name.clone(),
                partition: p,
            };
            self.partitions.push(PartitionQueue::new(tp));
        }
        *slot
    }
}

/// What a transactional producer adds to the plain one (see
/// [`super::txn`]): the transactional id in every Produce, the Produce
/// version cap that tells the broker which transaction protocol we speak,
/// and, under transaction.version 1, AddPartitionsToTxn before a
/// partition's first batch of a transaction.
pub(crate) struct TransactionalSend {
    pub(crate) transactional_id: String,
    /// 11 under transaction.version 1, 12 under 2 (KIP-890: a v12 Produce
    /// adds its partition to the transaction implicitly).
    pub(crate) produce_max_version: i16,
    /// Adds a partition to the open transaction; `None` under TV2.
    pub(crate) registrar: Option<Arc<dyn PartitionRegistrar>>,
}

/// Adds partitions to the open transaction before their first batch.
pub(crate) trait PartitionRegistrar: Send + Sync {
    /// Resolves once `topic[partition]` is part of the open transaction.
    fn ensure_added<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;
}

pub(crate) struct Shared {
    pub(crate) cluster: Cluster,
    pub(crate) config: ProducerConfig,
    /// Changes only between transactions (epoch bumps of KIP-890), while
    /// nothing is in flight.
    pub(crate) identity: Mutex<Option<ProducerIdentity>>,
    pub(crate) txn: Option<TransactionalSend>,
    /// The first failed delivery since [`Producer::take_failure`] (kept
    /// only for a transactional producer: a transaction with a failed
    /// batch must abort).
    pub(crate) first_failure: Mutex<Option<Error>>,
    pub(crate) state: Mutex<State>,
    /// Wakes the sender task.
    pub(crate) wake: Notify,
    /// Signalled whenever `outstanding` drops to zero.
    pub(crate) idle: Notify,
    /// Batches (open, queued or in flight) not yet completed.
    pub(crate) outstanding: AtomicUsize,
    pub(crate) flushing: AtomicUsize,
    pub(crate) closed: AtomicBool,
    pub(crate) fatal: OnceLock<Error>,
    /// `buffer_memory`, in bytes of [`record_cost`].
    pub(crate) memory: Semaphore,
    /// Permits currently taken from `memory` (for tests and metrics).
    pub(crate) memory_used: AtomicUsize,
    /// Records acknowledged, batches failed (`crate::metrics`).
    pub(crate) metrics: super::metrics::ProducerMetrics,
    /// Buffers of completed batches, encoded into again (at most
    /// [`BATCH_BUFFERS_KEPT`], each no larger than 4 × `batch_size`: a
    /// buffer grows by doubling when a batch outgrows it, and only the
    /// pages a batch writes are touched), so
    /// that the sender does not fault in fresh pages for every batch.
    pub(crate) batch_buffers: Mutex<Vec<bytes::BytesMut>>,
}

/// How many buffers of completed batches a producer keeps for new ones.
pub(crate) const BATCH_BUFFERS_KEPT: usize = 8;

/// A Kafka producer. `send` takes `&self`; share it with an `Arc`. Dropping
/// it closes it: buffered records are still delivered by the background
/// task, but use [`flush`](Producer::flush) to wait for them.
pub struct Producer {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("identity", &self.identity())
            .field("config", &self.shared.config)
            .finish()
    }
}

/// `compression.level` against `compression.type` (checked when the
/// producer is built and when properties are parsed).
pub(crate) fn check_compression_level(config: &ProducerConfig) -> Result<()> {
    config
        .compression
        .check_level(config.compression_level)
        .map_err(|e| Error::Config {
            option: "compression.level",
            message: match config.compression {
                Compression::None => format!(
                "{} needs a codec: set compression.type (gzip, snappy, lz4 or zstd), or leave compression.level at -1",
                config.compression_level
            ),
                _ => e.to_string(),
            },
        })
}

fn check_config(config: &ProducerConfig) -> Result<()> {
    check_compression_level(config)?;
    if config.batch_size == 0 {
        return Err(Error::Config {
            option: "batch.size",
            message: "must be positive".into(),
        });
    }
    if config.buffer_memory == 0 {
        return Err(Error::Config {
            option: "buffer.memory",
            message: "must be positive".into(),
        });
    }
    check_max_in_flight(config.max_in_flight, config.idempotent)
}

impl Producer {
    /// A producer on `cluster`. An idempotent one first obtains its
    /// producer id (InitProducerId).
    ///
    /// Not cancel safe in the sense that a dropped call may have taken a
    /// producer id that is then never used (harmless: the broker expires it).
    pub async fn new(cluster: Cluster, config: ProducerConfig) -> Result<Producer> {
        if config.idempotent && config.acks != Acks::All {
            return Err(Error::Config {
                option: "acks",
                message: "the idempotent producer needs acks=all (or disable idempotence)".into(),
            });
        }
        check_config(&config)?;
        let identity = if config.idempotent {
            Some(init_producer_id(&cluster).await?)
        } else {
            None
        };
        if let Some(id) = identity {
            tracing::info!(
                producer_id = id.producer_id,
                epoch = id.producer_epoch,
                "idempotent producer ready"
            );
        }
        Ok(Self::start(cluster, config, identity, None))
    }

    /// A producer running under a transactional identity obtained by the
    /// caller (InitProducerId with a transactional id, see [`super::txn`]).
    pub(crate) fn transactional(
        cluster: Cluster,
        config: ProducerConfig,
        identity: ProducerIdentity,
        txn: TransactionalSend,
    ) -> Result<Producer> {
        if config.acks != Acks::All || !config.idempotent {
            return Err(Error::Config {
                option: "acks",
                message: "a transactional producer needs acks=all and enable.idempotence=true".into(),
            });
        }
        check_config(&config)?;
        Ok(Self::start(cluster, config, Some(identity), Some(txn)))
    }

    fn start(
        cluster: Cluster,
        config: ProducerConfig,
        identity: Option<ProducerIdentity>,
        txn: Option<TransactionalSend>,
    ) -> Producer {
        let permits = config.buffer_memory.min(u32::MAX as usize).min(Semaphore::MAX_PERMITS);
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        let shared = Arc::new(Shared {
            metrics: super::metrics::ProducerMetrics::new(cluster.config()),
            cluster,
            identity: Mutex::new(identity),
            txn,
            first_failure: Mutex::new(None),
            state: Mutex::new(State {
                rng: u64::from_le_bytes(seed) | 1,
                ..State::default()
            }),
            wake: Notify::new(),
            idle: Notify::new(),
            outstanding: AtomicUsize::new(0),
            flushing: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            fatal: OnceLock::new(),
            memory: Semaphore::new(permits),
            memory_used: AtomicUsize::new(0),
            batch_buffers: Mutex::new(Vec::new()),
            config,
        });
        tokio::spawn(super::sender::run(shared.clone()));
        Producer { shared }
    }

    /// The producer id and epoch, for an idempotent producer.
    pub fn identity(&self) -> Option<ProducerIdentity> {
        *self.shared.identity.lock().expect("identity lock")
    }

    /// Bytes of `buffer_memory` currently taken by buffered and in-flight
    /// records (see [`ProducerConfig::buffer_memory`] for what a record costs).
    pub fn buffered_bytes(&self) -> usize {
        self.shared.memory_used.load(Ordering::Acquire)
    }

    /// Switches to a new producer id/epoch (an epoch bump between
    /// transactions): every partition's sequence starts again at 0. The
    /// caller makes sure nothing is buffered or in flight.
    pub(crate) fn set_identity(&self, identity: ProducerIdentity) {
        let mut state = self.shared.state.lock().expect("producer state lock");
        for q in state.partitions.iter_mut() {
            q.next_sequence = 0;
            q.confirmed_next = 0;
            q.acked = false;
        }
        *self.shared.identity.lock().expect("identity lock") = Some(identity);
    }

    /// The first delivery failure since the last call, and clears it
    /// (transactional producers only).
    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.shared.first_failure.lock().expect("failure lock").take()
    }

    /// Keeps `err` as the first failure (if none is kept).
    pub(crate) fn record_failure(&self, err: Error) {
        let mut first = self.shared.first_failure.lock().expect("failure lock");
        if first.is_none() {
            *first = Some(err);
        }
    }

    /// The sticky fatal error, if the producer has failed.
    pub(crate) fn fatal_error(&self) -> Option<Error> {
        self.shared.fatal.get().cloned()
    }

    /// Queues `record`. Waits for metadata the first time a topic is seen,
    /// and for buffer space when `buffer_memory` is used up; the returned
    /// future resolves once the record is acknowledged (or failed).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe. The record is queued only when the call
    /// returns `Ok`; if the future is dropped before (while it waits for
    /// metadata or buffer space), nothing was queued and the buffer space it
    /// held is given back.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        let shared = &self.shared;
        if let Some(e) = shared.fatal.get() {
            return Err(e.clone());
        }
        if shared.closed.load(Ordering::Acquire) {
            return Err(Error::ProducerClosed);
        }
        let size = record.size_estimate();
        if size > shared.config.max_record_size {
            return Err(Error::TooLarge {
                what: "record",
                size,
                limit: shared.config.max_record_size,
                option: "max.request.size",
            });
        }
        let cost = record_cost(&record).min(shared.memory_limit());
        // Held as a guard until the record is queued: a dropped send gives it back.
        let permit = match shared.memory.try_acquire_many(cost as u32) {
            Ok(p) => p,
            Err(_) => shared
                .memory
                .acquire_many(cost as u32)
                .await
                .map_err(|_| Error::ProducerClosed)?,
        };
        let timestamp = record.timestamp.unwrap_or_else(super::now_ms);
        let found = shared
            .state
            .lock()
            .expect("producer state lock")
            .find_topic(&record.topic);
        let topic_index = match found {
            Some(i) => i,
            None => {
                let n = shared
                    .cluster
                    .topic_for_produce(&record.topic, shared.config.allow_auto_create_topics)
                    .await?
                    .partitions
                    .len();
                shared
                    .state
                    .lock()
                    .expect("producer state lock")
                    .add_topic(&record.topic, n)
            }
        };
        let mut wake = false;
        let delivery = {
            let mut state = shared.state.lock().expect("producer state lock");
            let state = &mut *state;
            let partitions = state.topic_list[topic_index].queues.len();
            let unkeyed = record.key.is_none() && record.partition.is_none();
            let partition = match (record.partition, &record.key) {
                (Some(p), _) => {
                    if p < 0 || p as usize >= partitions {
                        return Err(Error::UnknownPartition {
                            topic: record.topic.to_string(),
                            partition: p,
                            partitions,
                        });
                    }
                    p
                }
                (None, Some(key)) => partition_for_key(key, partitions),
                (None, None) => match state.topic_list[topic_index].sticky {
                    Some(p) if (p as usize) < partitions => p,
                    _ => {
                        let p = (state.next_random() % partitions as u64) as i32;
                        state.topic_list[topic_index].sticky = Some(p);
                        p
                    }
                },
            };
            let qi = state.queue_index(topic_index, partition);
            let batch_size = shared.config.batch_size;
            let queue = &mut state.partitions[qi];
            // Seal the open batch first if this record would overflow it.
            if queue
                .open
                .as_ref()
                .is_some_and(|b| b.bytes + size > batch_size && !b.records.is_empty())
            {
                let full = queue.open.take().expect("checked");
                queue.last_batch_len = full.records.len();
                queue.queue.push_back(full.into());
                wake = true;
            }
            let batch = match &mut queue.open {
                Some(b) => b,
                None => {
                    wake = true;
                    shared.outstanding.fetch_add(1, Ordering::AcqRel);
                    queue.next_order += 1;
                    queue.open.insert(OpenBatch {
                        order: queue.next_order,
                        records: Vec::with_capacity(queue.last_batch_len.clamp(16, MAX_INITIAL_BATCH_RECORDS)),
                        bytes: 0,
                        permits: 0,
                        created: Instant::now(),
                        completion: CompletionGuard(Completion::new(queue.tp.topic.clone(), partition)),
                    })
                }
            };
            let delivery = DeliveryFuture {
                batch: batch.completion.0.clone(),
                index: batch.records.len() as u32,
                timestamp,
            };
            batch.records.push(PendingRecord {
                timestamp,
                key: record.key,
                value: record.value,
                headers: record.headers,
            });
            batch.bytes += size;
            batch.permits += cost;
            permit.forget();
            shared.memory_used.fetch_add(cost, Ordering::AcqRel);
            if batch.bytes >= batch_size {
                let full = queue.open.take().expect("just filled");
                queue.last_batch_len = full.records.len();
                queue.queue.push_back(full.into());
                wake = true;
                // A full batch moves unkeyed records on to another partition (KIP-480).
                if unkeyed {
                    state.topic_list[topic_index].sticky = None;
                }
            }
            delivery
        };
        if wake {
            shared.wake.notify_one();
        }
        Ok(delivery)
    }

    /// Sends every buffered record now (ignoring `linger`) and waits until all
    /// records sent so far have completed, or `timeout` passes. Individual
    /// failures are reported through their [`DeliveryFuture`]s; a failed
    /// producer returns its error here too.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only waits. Dropping the future loses
    /// no record and leaves nothing behind; the records keep being
    /// delivered (with `linger` applying again) and a later `flush` waits
    /// for them.
    pub async fn flush(&self, timeout: Duration) -> Result<()> {
        let shared = &self.shared;
        /// Undoes the flushing mark however the wait ends.
        struct Flushing<'a>(&'a Shared);
        impl Drop for Flushing<'_> {
            fn drop(&mut self) {
                self.0.flushing.fetch_sub(1, Ordering::AcqRel);
            }
        }
        shared.flushing.fetch_add(1, Ordering::AcqRel);
        let _flushing = Flushing(shared);
        shared.wake.notify_one();
        let wait = async {
            loop {
                let notified = shared.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if shared.outstanding.load(Ordering::Acquire) == 0 {
                    break;
                }
                notified.await;
            }
        };
        let result = tokio::time::timeout(timeout, wait).await;
        if result.is_err() {
            return Err(Error::Timeout {
                operation: format!(
                    "flush ({} batches outstanding)",
                    shared.outstanding.load(Ordering::Acquire)
                ),
                timeout,
            });
        }
        match shared.fatal.get() {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Flushes, then closes the producer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as [`flush`](Producer::flush): a dropped close drops the
    /// producer, whose background task still delivers what was buffered.
    pub async fn close(self, timeout: Duration) -> Result<()> {
        self.flush(timeout).await
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

impl Shared {
    /// An empty buffer to encode a batch into: a completed batch's, when
    /// one is kept.
    pub(crate) fn batch_buffer(&self) -> bytes::BytesMut {
        self.batch_buffers
            .lock()
            .expect("batch buffers lock")
            .pop()
            .unwrap_or_default()
    }

    /// Keeps a completed batch's buffer for a new batch, when nothing else
    /// holds it (a retried request's frame, say), it is not oversized
    /// (a batch of one large record, say), and fewer than
    /// [`BATCH_BUFFERS_KEPT`] are kept.
    pub(crate) fn recycle_batch_buffer(&self, batch: Bytes) {
        let Ok(mut buffer) = batch.try_into_mut() else { return };
        if buffer.capacity() > self.config.batch_size.saturating_mul(4) {
            return;
        }
        let mut kept = self.batch_buffers.lock().expect("batch buffers lock");
        if kept.len() < BATCH_BUFFERS_KEPT {
            buffer.clear();
            kept.push(buffer);
        }
    }

    fn memory_limit(&self) -> usize {
        self.config
            .buffer_memory
            .min(u32::MAX as usize)
            .min(Semaphore::MAX_PERMITS)
    }

    /// Completes one batch: its outcome, its buffer space, the flush count.
    pub(crate) fn complete(&self, completion: &CompletionGuard, permits: usize, result: Result<(i64, i64)>) {
        if let Err(e) = &result {
            self.metrics.failed();
            let c = &completion.0;
            tracing::warn!(topic = %c.topic, partition = c.partition, error = %e, "batch failed");
            if self.txn.is_some() {
                let mut first = self.first_failure.lock().expect("failure lock");
                if first.is_none() {
                    *first = Some(e.clone());
                }
            }
        }
        completion.0.complete(result);
        self.memory_used.fetch_sub(permits, Ordering::AcqRel);
        self.memory.add_permits(permits);
        if self.outstanding.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
        self.wake.notify_one();
    }
}

/// `InitProducerId` for an idempotent (non-transactional) producer, retried
/// while the broker reports a retriable code.
async fn init_producer_id(cluster: &Cluster) -> Result<ProducerIdentity> {
    let started = Instant::now();
    let mut backoff = cluster.backoff();
    let mut request = InitProducerIdRequest::default();
    request.transactional_id = None;
    request.transaction_timeout_ms = 60_000;
    request.producer_id = (-1).into();
    request.producer_epoch = -1;
    loop {
        // Hedged like Metadata (any broker answers; a second producer id
        // allocated by the slower answer is never used).
        let result = cluster
            .control_request(|conn: super::connection::BrokerConnection| {
                let request = &request;
                async move { conn.request(request).await }
            })
            .await;
        let err = match result {
            Ok((_, r)) if r.error_code == 0 => {
                return Ok(ProducerIdentity {
                    producer_id: r.producer_id.0,
                    producer_epoch: r.producer_epoch,
                })
            }
            Ok((conn, r)) => Error::kafka("InitProducerId", conn.broker(), None, None, r.error_code, None),
            Err(e) => e,
        };
        if !err.is_retriable() || started.elapsed() >= cluster.config().metadata_max_wait {
            return Err(err);
        }
        tracing::debug!(error = %err, "InitProducerId failed; retrying");
        backoff.sleep().await;
    }
}

/// Kafka's sequence arithmetic: wraps from `i32::MAX` to 0.
pub(crate) fn increment_sequence(sequence: i32, by: i32) -> i32 {
    if sequence > i32::MAX - by {
        by - (i32::MAX - sequence) - 1
    } else {
        sequence + by
    }
}

/// `max_in_flight` must be 1..=5 for an idempotent producer, else 1..=1000.
fn check_max_in_flight(n: usize, idempotent: bool) -> Result<()> {
    let max = if idempotent { 5 } else { 1000 };
    if (1..=max).contains(&n) {
        Ok(())
    } else {
        Err(Error::Config {
            option: "max.in.flight.requests.per.connection",
            message: format!(
                "must be between 1 and {max}{}, got {n}",
                if idempotent { " with enable.idempotence" } else { "" }
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_wraps_like_kafka() {
        assert_eq!(increment_sequence(0, 5), 5);
        assert_eq!(increment_sequence(i32::MAX - 1, 1), i32::MAX);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 2, 5), 2);
    }

    #[test]
    fn acks_parse() {
        assert_eq!("all".parse::<Acks>().unwrap(), Acks::All);
        assert_eq!("-1".parse::<Acks>().unwrap().wire(), -1);
        assert_eq!("1".parse::<Acks>().unwrap(), Acks::Leader);
        assert_eq!("0".parse::<Acks>().unwrap().wire(), 0);
        assert!("2".parse::<Acks>().is_err());
    }
}
