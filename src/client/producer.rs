//! The producer: records are appended to per-partition batches, a sender
//! task seals them (full, or older than `linger`), and each sealed batch is
//! encoded once and produced, with retries, until it is acknowledged.
//!
//! Idempotent by default ([KIP-98]): the producer takes a producer id from
//! InitProducerId, and each partition's batches carry consecutive sequence
//! numbers. At most one batch per partition is in flight, and a retry
//! re-sends the very same batch bytes with the same sequence, so the broker
//! drops duplicates and order holds without further bookkeeping. When the
//! outcome of a batch is unknown (its requests timed out or lost their
//! connection until the delivery timeout ran out), the sequence can no longer
//! be trusted: the producer then fails, stickily ([`Error::ProducerFailed`]).
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
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clink_kafka_wire::compression::Compression;
use clink_kafka_wire::kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use clink_kafka_wire::kafka_protocol::messages::{InitProducerIdRequest, ProduceRequest, TopicName, TransactionalId};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::record::{BatchMeta, HeaderOut, RecordBatchEncoder, RecordOut};
use clink_kafka_wire::KafkaCode;
use tokio::sync::{oneshot, Notify, Semaphore};

use super::cluster::{needs_metadata_refresh, Cluster};
use super::partitioner::partition_for_key;
use crate::error::{Error, Result};

/// Highest Produce version used: v13 needs topic ids.
const PRODUCE_MAX_VERSION: i16 = 12;
/// Bytes a record costs in a batch beyond its key, value and headers
/// (length, attributes, deltas, field lengths), roughly.
const RECORD_OVERHEAD: usize = 16;

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
pub struct ProducerConfig {
    pub acks: Acks,
    /// `enable.idempotence`; needs `acks = all`.
    pub idempotent: bool,
    pub compression: Compression,
    /// `linger.ms`: how long a batch waits for more records.
    pub linger: Duration,
    /// `batch.size`: a batch is sealed once its records reach this many
    /// bytes (before compression). A larger single record gets its own batch.
    pub batch_size: usize,
    /// `buffer.memory`: bytes of records buffered before `send` waits.
    pub buffer_memory: usize,
    /// `max.request.size`: the largest record accepted.
    pub max_record_size: usize,
    /// The broker's bound on replicating a Produce (`timeout_ms` in it).
    pub ack_timeout: Duration,
    /// `delivery.timeout.ms`: bound on delivering a batch, retries included.
    pub delivery_timeout: Duration,
    /// `max.in.flight.requests`: Produce requests this producer has
    /// outstanding at once, across all partitions and brokers (1 to 1000;
    /// default 5). A partition never has more than one batch in flight, so
    /// ordering and idempotence do not depend on this; it bounds how many
    /// partitions' batches are on the wire together. Stricter than the Java
    /// client's per-connection `max.in.flight.requests.per.connection` when
    /// a producer writes to several brokers.
    pub max_in_flight: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            acks: Acks::All,
            idempotent: true,
            compression: Compression::None,
            linger: Duration::from_millis(5),
            batch_size: 256 * 1024,
            buffer_memory: 64 * 1024 * 1024,
            max_record_size: 1024 * 1024,
            ack_timeout: Duration::from_secs(30),
            delivery_timeout: Duration::from_secs(120),
            max_in_flight: 5,
        }
    }
}

/// A record to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    pub topic: String,
    /// An explicit partition; otherwise keyed records hash (murmur2) and
    /// unkeyed ones stick to a partition per batch.
    pub partition: Option<i32>,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header keys are strings; values may be null.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Milliseconds since the epoch; `None` means now.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record with a value and nothing else.
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: topic.into(),
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

/// Where a record landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryReport {
    pub topic: Arc<str>,
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
    pub producer_id: i64,
    pub producer_epoch: i16,
}

/// Resolves to the [`DeliveryReport`] of one sent record.
#[derive(Debug)]
pub struct DeliveryFuture {
    rx: oneshot::Receiver<Result<DeliveryReport>>,
}

impl Future for DeliveryFuture {
    type Output = Result<DeliveryReport>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(Error::ProducerClosed)))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TopicPartition {
    topic: Arc<str>,
    partition: i32,
}

struct PendingRecord {
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
    headers: Vec<(String, Option<Bytes>)>,
    permits: u32,
    reply: oneshot::Sender<Result<DeliveryReport>>,
}

struct OpenBatch {
    records: Vec<PendingRecord>,
    bytes: usize,
    created: Instant,
}

#[derive(Default)]
struct PartitionQueue {
    open: Option<OpenBatch>,
    sealed: VecDeque<OpenBatch>,
    in_flight: bool,
    next_sequence: i32,
}

#[derive(Default)]
struct State {
    partitions: HashMap<TopicPartition, PartitionQueue>,
    /// The partition unkeyed records of a topic currently go to.
    sticky: HashMap<Arc<str>, i32>,
    /// Interned topic names.
    topics: HashMap<String, Arc<str>>,
    rng: u64,
}

impl State {
    fn next_random(&mut self) -> u64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
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

struct Shared {
    cluster: Cluster,
    config: ProducerConfig,
    /// Changes only between transactions (epoch bumps of KIP-890), while
    /// nothing is in flight.
    identity: Mutex<Option<ProducerIdentity>>,
    txn: Option<TransactionalSend>,
    /// The first failed delivery since [`Producer::take_failure`] (kept
    /// only for a transactional producer: a transaction with a failed
    /// batch must abort).
    first_failure: Mutex<Option<Error>>,
    state: Mutex<State>,
    /// Wakes the sender task.
    wake: Notify,
    /// Signalled whenever `outstanding` drops to zero.
    idle: Notify,
    /// Records sent but not yet completed.
    outstanding: AtomicUsize,
    flushing: AtomicUsize,
    closed: AtomicBool,
    fatal: OnceLock<Error>,
    memory: Semaphore,
    /// One permit per Produce request on the wire (`max_in_flight`).
    requests: Semaphore,
}

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

impl Producer {
    /// A producer on `cluster`. An idempotent one first obtains its
    /// producer id (InitProducerId).
    pub async fn new(cluster: Cluster, config: ProducerConfig) -> Result<Producer> {
        if config.idempotent && config.acks != Acks::All {
            return Err(Error::Config {
                option: "acks",
                message: "the idempotent producer needs acks=all (or disable idempotence)".into(),
            });
        }
        if config.batch_size == 0 || config.buffer_memory == 0 {
            return Err(Error::Config {
                option: "batch.size",
                message: "batch.size and buffer.memory must be positive".into(),
            });
        }
        check_max_in_flight(config.max_in_flight)?;
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
        check_max_in_flight(config.max_in_flight)?;
        if config.batch_size == 0 || config.buffer_memory == 0 {
            return Err(Error::Config {
                option: "batch.size",
                message: "batch.size and buffer.memory must be positive".into(),
            });
        }
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
            requests: Semaphore::new(config.max_in_flight),
            config,
        });
        tokio::spawn(sender(shared.clone()));
        Producer { shared }
    }

    /// The producer id and epoch, for an idempotent producer.
    pub fn identity(&self) -> Option<ProducerIdentity> {
        *self.shared.identity.lock().expect("identity lock")
    }

    /// Switches to a new producer id/epoch (an epoch bump between
    /// transactions): every partition's sequence starts again at 0. The
    /// caller makes sure nothing is buffered or in flight.
    pub(crate) fn set_identity(&self, identity: ProducerIdentity) {
        let mut state = self.shared.state.lock().expect("producer state lock");
        for q in state.partitions.values_mut() {
            q.next_sequence = 0;
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
        let partitions = match shared.cluster.metadata().topics.get(&record.topic) {
            Some(t) => t.partitions.len(),
            None => shared.cluster.partition_count(&record.topic).await?,
        };
        if let Some(p) = record.partition {
            if p < 0 || p as usize >= partitions {
                return Err(Error::UnknownPartition {
                    topic: record.topic,
                    partition: p,
                    partitions,
                });
            }
        }
        let permits = size.min(shared.memory_limit()) as u32;
        shared
            .memory
            .acquire_many(permits)
            .await
            .map_err(|_| Error::ProducerClosed)?
            .forget();
        let (tx, rx) = oneshot::channel();
        let timestamp = record.timestamp.unwrap_or_else(super::now_ms);
        let unkeyed = record.key.is_none() && record.partition.is_none();
        let mut wake = false;
        // Counted before the sender can see the record, so its completion
        // never runs ahead of this increment.
        shared.outstanding.fetch_add(1, Ordering::AcqRel);
        {
            let mut state = shared.state.lock().expect("producer state lock");
            let topic = match state.topics.get(&record.topic) {
                Some(t) => t.clone(),
                None => {
                    let t: Arc<str> = Arc::from(record.topic.as_str());
                    state.topics.insert(record.topic.clone(), t.clone());
                    t
                }
            };
            let partition = match (record.partition, &record.key) {
                (Some(p), _) => p,
                (None, Some(key)) => partition_for_key(key, partitions),
                (None, None) => match state.sticky.get(&topic) {
                    Some(p) if (*p as usize) < partitions => *p,
                    _ => {
                        let p = (state.next_random() % partitions as u64) as i32;
                        state.sticky.insert(topic.clone(), p);
                        p
                    }
                },
            };
            let tp = TopicPartition {
                topic: topic.clone(),
                partition,
            };
            let batch_size = shared.config.batch_size;
            let queue = state.partitions.entry(tp).or_default();
            let pending = PendingRecord {
                timestamp,
                key: record.key,
                value: record.value,
                headers: record.headers,
                permits,
                reply: tx,
            };
            // Seal the open batch first if this record would overflow it.
            if queue
                .open
                .as_ref()
                .is_some_and(|b| b.bytes + size > batch_size && !b.records.is_empty())
            {
                let full = queue.open.take().expect("checked");
                queue.sealed.push_back(full);
                wake = true;
            }
            let batch = queue.open.get_or_insert_with(|| {
                wake = true;
                OpenBatch {
                    records: Vec::new(),
                    bytes: 0,
                    created: Instant::now(),
                }
            });
            batch.records.push(pending);
            batch.bytes += size;
            let mut sealed_full = false;
            if batch.bytes >= batch_size {
                let full = queue.open.take().expect("just filled");
                queue.sealed.push_back(full);
                sealed_full = true;
                wake = true;
            }
            // A full batch moves unkeyed records on to another partition (KIP-480).
            if sealed_full && unkeyed {
                state.sticky.remove(&topic);
            }
        }
        if wake {
            shared.wake.notify_one();
        }
        Ok(DeliveryFuture { rx })
    }

    /// Sends every buffered record now (ignoring `linger`) and waits until all
    /// records sent so far have completed, or `timeout` passes. Individual
    /// failures are reported through their [`DeliveryFuture`]s; a failed
    /// producer returns its error here too.
    pub async fn flush(&self, timeout: Duration) -> Result<()> {
        let shared = &self.shared;
        shared.flushing.fetch_add(1, Ordering::AcqRel);
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
        shared.flushing.fetch_sub(1, Ordering::AcqRel);
        if result.is_err() {
            return Err(Error::Timeout {
                operation: format!(
                    "flush ({} records outstanding)",
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
    fn memory_limit(&self) -> usize {
        self.config
            .buffer_memory
            .min(u32::MAX as usize)
            .min(Semaphore::MAX_PERMITS)
    }

    /// Completes `count` records and wakes whoever waits.
    fn complete(&self, count: usize, permits: usize) {
        self.memory.add_permits(permits);
        if self.outstanding.fetch_sub(count, Ordering::AcqRel) == count {
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
        let conn = cluster.any_broker().await?;
        let result = conn.request(&request).await;
        let err = match result {
            Ok(r) if r.error_code == 0 => {
                return Ok(ProducerIdentity {
                    producer_id: r.producer_id.0,
                    producer_epoch: r.producer_epoch,
                })
            }
            Ok(r) => Error::kafka("InitProducerId", conn.broker(), None, None, r.error_code, None),
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
fn increment_sequence(sequence: i32, by: i32) -> i32 {
    if sequence > i32::MAX - by {
        by - (i32::MAX - sequence) - 1
    } else {
        sequence + by
    }
}

/// The background task: seals batches and starts one delivery per partition.
async fn sender(shared: Arc<Shared>) {
    loop {
        let mut to_send = Vec::new();
        let mut to_fail = Vec::new();
        let mut next_deadline: Option<Instant> = None;
        let closing = shared.closed.load(Ordering::Acquire);
        let failed = shared.fatal.get().is_some();
        {
            let mut state = shared.state.lock().expect("producer state lock");
            if failed {
                // The sequence is broken: nothing queued may be sent.
                for q in state.partitions.values_mut() {
                    to_fail.extend(q.open.take());
                    to_fail.extend(q.sealed.drain(..));
                }
            }
            let now = Instant::now();
            let flushing = closing || shared.flushing.load(Ordering::Acquire) > 0;
            let linger = shared.config.linger;
            let State { partitions, sticky, .. } = &mut *state;
            for (tp, q) in partitions.iter_mut() {
                if let Some(open) = &q.open {
                    let due = open.created + linger;
                    if flushing || due <= now {
                        let batch = q.open.take().expect("checked");
                        q.sealed.push_back(batch);
                        if sticky.get(&tp.topic) == Some(&tp.partition) {
                            sticky.remove(&tp.topic);
                        }
                    } else {
                        next_deadline = Some(next_deadline.map_or(due, |d| d.min(due)));
                    }
                }
                if !q.in_flight {
                    if let Some(batch) = q.sealed.pop_front() {
                        let count = batch.records.len() as i32;
                        let base_sequence = q.next_sequence;
                        q.next_sequence = increment_sequence(q.next_sequence, count);
                        q.in_flight = true;
                        to_send.push((tp.clone(), batch, base_sequence));
                    }
                }
            }
        }
        if let Some(error) = shared.fatal.get() {
            for batch in to_fail {
                let count = batch.records.len();
                let permits = batch.records.iter().map(|r| r.permits as usize).sum();
                for r in batch.records {
                    let _ = r.reply.send(Err(error.clone()));
                }
                shared.complete(count, permits);
            }
        }
        for (tp, batch, base_sequence) in to_send {
            tokio::spawn(deliver(shared.clone(), tp, batch, base_sequence));
        }
        if closing && shared.outstanding.load(Ordering::Acquire) == 0 {
            break;
        }
        match next_deadline {
            Some(d) => {
                tokio::select! {
                    _ = shared.wake.notified() => {}
                    _ = tokio::time::sleep_until(d.into()) => {}
                }
            }
            None => shared.wake.notified().await,
        }
    }
    tracing::debug!("producer sender stopped");
}

/// `max_in_flight` must be 1..=1000.
fn check_max_in_flight(n: usize) -> Result<()> {
    if (1..=1000).contains(&n) {
        Ok(())
    } else {
        Err(Error::Config {
            option: "max.in.flight.requests",
            message: format!("must be between 1 and 1000, got {n}"),
        })
    }
}

/// How a batch's delivery ended, for the sequence bookkeeping.
enum Outcome {
    Delivered {
        base_offset: i64,
        log_append_time: i64,
    },
    /// The broker did not write it: its sequence numbers can be reused.
    Refused(Error),
    /// It may or may not be written: the sequence is broken.
    Unknown(Error),
}

async fn deliver(shared: Arc<Shared>, tp: TopicPartition, batch: OpenBatch, base_sequence: i32) {
    let count = batch.records.len();
    let permits: usize = batch.records.iter().map(|r| r.permits as usize).sum();
    let encoded = encode_batch(&shared, &batch, base_sequence);
    // Payloads are in the encoded batch now; keep only what the reports need.
    let replies: Vec<(i64, oneshot::Sender<Result<DeliveryReport>>)> =
        batch.records.into_iter().map(|r| (r.timestamp, r.reply)).collect();
    let registered = match shared.txn.as_ref().and_then(|t| t.registrar.as_ref()) {
        Some(registrar) => registrar.ensure_added(&tp.topic, tp.partition).await,
        None => Ok(()),
    };
    let outcome = match (encoded, registered) {
        (Ok(bytes), Ok(())) => produce_with_retries(&shared, &tp, bytes).await,
        (Err(e), _) | (_, Err(e)) => Outcome::Refused(e),
    };
    let result = {
        let mut state = shared.state.lock().expect("producer state lock");
        let q = state.partitions.get_mut(&tp).expect("queue exists while in flight");
        q.in_flight = false;
        match outcome {
            Outcome::Delivered {
                base_offset,
                log_append_time,
            } => Ok((base_offset, log_append_time)),
            Outcome::Refused(e) => {
                if shared.identity.lock().expect("identity lock").is_some() {
                    // Nothing later holds a sequence yet (one batch in flight).
                    q.next_sequence = base_sequence;
                }
                Err(e)
            }
            Outcome::Unknown(e) => {
                if shared.identity.lock().expect("identity lock").is_some() {
                    let fatal = Error::ProducerFailed { cause: Box::new(e) };
                    if shared.fatal.set(fatal).is_ok() {
                        tracing::error!(topic = %tp.topic, partition = tp.partition,
                            error = %shared.fatal.get().expect("set"), "idempotent producer failed");
                    }
                    Err(shared.fatal.get().expect("set").clone())
                } else {
                    Err(e)
                }
            }
        }
    };
    match result {
        Ok((base_offset, log_append_time)) => {
            for (i, (timestamp, reply)) in replies.into_iter().enumerate() {
                let _ = reply.send(Ok(DeliveryReport {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: if base_offset >= 0 { base_offset + i as i64 } else { -1 },
                    timestamp: if log_append_time >= 0 {
                        log_append_time
                    } else {
                        timestamp
                    },
                }));
            }
        }
        Err(e) => {
            tracing::warn!(topic = %tp.topic, partition = tp.partition, records = count, error = %e, "batch failed");
            if shared.txn.is_some() {
                let mut first = shared.first_failure.lock().expect("failure lock");
                if first.is_none() {
                    *first = Some(e.clone());
                }
            }
            for (_, reply) in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
    shared.complete(count, permits);
}

fn encode_batch(shared: &Shared, batch: &OpenBatch, base_sequence: i32) -> Result<Bytes> {
    let headers: Vec<Vec<HeaderOut<'_>>> = batch
        .records
        .iter()
        .map(|r| {
            r.headers
                .iter()
                .map(|(k, v)| HeaderOut {
                    key: k,
                    value: v.as_deref(),
                })
                .collect()
        })
        .collect();
    let records: Vec<RecordOut<'_>> = batch
        .records
        .iter()
        .zip(&headers)
        .map(|(r, h)| RecordOut {
            timestamp: r.timestamp,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: h,
        })
        .collect();
    let mut meta = BatchMeta {
        compression: shared.config.compression,
        ..BatchMeta::default()
    };
    if let Some(id) = *shared.identity.lock().expect("identity lock") {
        meta.producer_id = id.producer_id;
        meta.producer_epoch = id.producer_epoch;
        meta.base_sequence = base_sequence;
    }
    meta.transactional = shared.txn.is_some();
    let mut out = BytesMut::with_capacity(batch.bytes + 128);
    RecordBatchEncoder::new()
        .encode(&mut out, &meta, &records)
        .map_err(|e| Error::Protocol {
            broker: crate::error::BrokerRef::addr("(none: encoding a record batch)"),
            api: "Produce",
            source: Arc::new(e),
        })?;
    Ok(out.freeze())
}

/// Produces one encoded batch until it is acknowledged, refused, or the
/// delivery timeout runs out. Every attempt sends the same bytes.
async fn produce_with_retries(shared: &Shared, tp: &TopicPartition, batch: Bytes) -> Outcome {
    let started = Instant::now();
    let deadline = started + shared.config.delivery_timeout;
    let mut backoff = shared.cluster.backoff();
    // Whether an earlier attempt may have been written.
    let mut ambiguous = false;
    loop {
        let permit = match tokio::time::timeout_at(deadline.into(), shared.requests.acquire()).await {
            Ok(permit) => permit.expect("the request semaphore is never closed"),
            Err(_) => {
                let e = Error::Timeout {
                    operation: format!(
                        "waiting for one of max_in_flight={} request slots for {}[{}]",
                        shared.config.max_in_flight, tp.topic, tp.partition
                    ),
                    timeout: shared.config.delivery_timeout,
                };
                // Not sent this time; only an earlier attempt can have landed.
                return if ambiguous {
                    Outcome::Unknown(e)
                } else {
                    Outcome::Refused(e)
                };
            }
        };
        let attempt = produce_once(shared, tp, batch.clone());
        let answer = tokio::time::timeout_at(deadline.into(), attempt).await;
        drop(permit);
        let err = match answer {
            Ok(Ok((base_offset, log_append_time))) => {
                return Outcome::Delivered {
                    base_offset,
                    log_append_time,
                }
            }
            Ok(Err(e)) => e,
            Err(_) => {
                let e = Error::Timeout {
                    operation: format!("delivering a batch to {}[{}]", tp.topic, tp.partition),
                    timeout: shared.config.delivery_timeout,
                };
                return Outcome::Unknown(e);
            }
        };
        let code = err.kafka_code();
        if code == Some(KafkaCode::DUPLICATE_SEQUENCE_NUMBER) {
            // An earlier attempt was written; the broker no longer knows its offset.
            return Outcome::Delivered {
                base_offset: -1,
                log_append_time: -1,
            };
        }
        if matches!(
            code,
            Some(
                KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER
                    | KafkaCode::UNKNOWN_PRODUCER_ID
                    | KafkaCode::INVALID_PRODUCER_EPOCH
            )
        ) {
            return Outcome::Unknown(err);
        }
        if err.is_connection_error() {
            ambiguous = true;
        }
        if !err.is_retriable() {
            return if ambiguous {
                Outcome::Unknown(err)
            } else {
                Outcome::Refused(err)
            };
        }
        if code.is_some_and(needs_metadata_refresh) {
            if let Err(e) = shared.cluster.refresh_topics(&[&tp.topic]).await {
                tracing::debug!(error = %e, "metadata refresh failed");
            }
        }
        let delay = backoff.next_delay();
        if Instant::now() + delay >= deadline {
            return if ambiguous {
                Outcome::Unknown(err)
            } else {
                Outcome::Refused(err)
            };
        }
        tracing::debug!(topic = %tp.topic, partition = tp.partition, error = %err, ?delay, "retrying produce");
        tokio::time::sleep(delay).await;
    }
}

/// One Produce request for one batch: `(base_offset, log_append_time)`.
async fn produce_once(shared: &Shared, tp: &TopicPartition, batch: Bytes) -> Result<(i64, i64)> {
    let (_, conn) = shared.cluster.leader(&tp.topic, tp.partition).await?;
    let cap = shared
        .txn
        .as_ref()
        .map_or(PRODUCE_MAX_VERSION, |t| t.produce_max_version);
    let version = conn.version_for::<ProduceRequest>(Some(cap.min(PRODUCE_MAX_VERSION)))?;
    let mut partition = PartitionProduceData::default();
    partition.index = tp.partition;
    partition.records = Some(batch);
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_string(tp.topic.to_string()));
    topic.partition_data = vec![partition];
    let mut request = ProduceRequest::default();
    request.transactional_id = shared
        .txn
        .as_ref()
        .map(|t| TransactionalId(StrBytes::from_string(t.transactional_id.clone())));
    request.acks = shared.config.acks.wire();
    request.timeout_ms = shared.config.ack_timeout.as_millis().min(i32::MAX as u128) as i32;
    request.topic_data = vec![topic];
    if shared.config.acks == Acks::None {
        conn.send_without_response(version, &request)?;
        return Ok((-1, -1));
    }
    let response = conn.request_at(version, &request).await?;
    let p = response
        .responses
        .iter()
        .filter(|t| t.name.0.as_str() == &*tp.topic)
        .flat_map(|t| t.partition_responses.iter())
        .find(|p| p.index == tp.partition)
        .ok_or_else(|| Error::Protocol {
            broker: conn.broker().clone(),
            api: "Produce",
            source: Arc::new(clink_kafka_wire::Error::Invalid {
                context: "Produce response",
                message: format!("no answer for {}[{}]", tp.topic, tp.partition),
            }),
        })?;
    if p.error_code != 0 {
        let mut message = p.error_message.as_ref().map(|m| m.to_string());
        if let Some(first) = p.record_errors.first() {
            let detail = format!(
                "record {}: {}",
                first.batch_index,
                first.batch_index_error_message.as_ref().map_or("", |m| m.as_str())
            );
            message = Some(match message {
                Some(m) => format!("{m}; {detail}"),
                None => detail,
            });
        }
        return Err(Error::kafka(
            "Produce",
            conn.broker(),
            Some(&tp.topic),
            Some(tp.partition),
            p.error_code,
            message.as_deref(),
        ));
    }
    Ok((p.base_offset, p.log_append_time_ms))
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
