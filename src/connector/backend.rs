//! The backend seam: what the source and the sinks need from a Kafka
//! client, as three traits. [`KafkaSource`](super::KafkaSource),
//! [`KafkaSink`](super::KafkaSink) and the upsert sink are written once over
//! them; [`NativeConsumer`] and [`NativeProducer`] implement them on
//! `crate::client`, and `super::rdkafka` on librdkafka (cargo feature
//! `rdkafka`); `super::selected` picks one per the `backend` option.
//!
//! The seam is deliberately narrow: manual assignment at concrete offsets
//! (the source resolves every start offset itself, before assigning),
//! watermarks, one committed-offset lookup (the source owns the retries),
//! batched polls; on the producer side send / flush, plus the transaction
//! calls a two-phase-commit sink needs ([`TransactionalProducerBackend`],
//! natively [`NativeTransactionalProducer`] over the client's
//! [`TransactionalProducer`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use super::error::{ConnectorError, Result};
use super::options::SourceOptions;
use super::record::KafkaMessage;
use crate::client::{
    ClientConfig, Cluster, Consumer, ConsumerConfig, ConsumerGroupMetadata, DeliveryFuture, GroupConsumer,
    GroupConsumerConfig, GroupOffsets, IsolationLevel, Offset, PartitionOffset, Producer, ProducerConfig,
    ProducerRecord, RebalanceEvent, ResumeHandle, Subscription, TopicPartition, TopicPartitionOffset,
    TransactionalProducer, TxnConfig,
};

/// Which end of a partition's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watermark {
    /// The log start offset.
    Low,
    /// The high watermark (the last stable offset under read_committed).
    High,
}

/// A consumer for a source that assigns its own partitions.
pub trait ConsumerBackend: Send {
    /// Connects; called once by `open`.
    fn connect(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// The topic's current partition count, from fresh metadata.
    fn partition_count(&mut self, topic: &str) -> impl Future<Output = Result<i32>> + Send;

    /// One end of `topic[partition]`'s log, asked of its leader.
    fn watermark(&mut self, topic: &str, partition: i32, which: Watermark) -> impl Future<Output = Result<i64>> + Send;

    /// One lookup of the group's committed offsets for `partitions` (`None`:
    /// nothing committed). The caller bounds the retries.
    fn committed(
        &mut self,
        group_id: &str,
        topic: &str,
        partitions: &[i32],
    ) -> impl Future<Output = Result<BTreeMap<i32, Option<i64>>>> + Send;

    /// Replaces the assignment with exactly `partitions`, each positioned at
    /// its concrete offset.
    fn assign(&mut self, topic: &str, partitions: &[PartitionOffset]) -> impl Future<Output = Result<()>> + Send;

    /// Waits up to `timeout` for records; returns what arrived (possibly
    /// more than one fetch's worth, in offset order per partition).
    ///
    /// Cancel safety: implementations must be cancel safe (`KafkaSource`
    /// relies on it): a dropped call loses no fetched record and moves no
    /// position past an undelivered one. `NativeConsumer`'s is, through
    /// `Consumer::poll`.
    fn poll(&mut self, timeout: Duration) -> impl Future<Output = Result<Vec<KafkaMessage>>> + Send;

    /// Closes the consumer; the backend cannot be used again.
    fn close(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// Records between the positions and the high watermarks last seen, over
    /// the assignment; `None` when not known (yet, or by this backend). For
    /// progress lines only.
    fn lag(&self) -> Option<u64> {
        None
    }

    /// Whether the records `poll` returns carry their headers (default: they
    /// do). A caller that never reads headers may say so: a backend may then
    /// leave them out (librdkafka parses them per record, on request).
    fn read_headers(&mut self, read: bool) {
        let _ = read;
    }
}

/// Where one produced record landed (its partition and offset), or why it
/// did not.
pub type DeliveryOutcome = std::result::Result<PartitionOffset, ConnectorError>;

/// A producer for the at-least-once and upsert sinks.
pub trait ProducerBackend: Send + Sync {
    /// Resolves once the record is acknowledged (or failed after retries).
    type Delivery: Future<Output = DeliveryOutcome> + Send + 'static;

    /// Connects; called once by the sink's `open`.
    fn connect(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// Queues `message` for `topic` (at `partition`, or as the key decides).
    fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        message: KafkaMessage,
    ) -> impl Future<Output = Result<Self::Delivery>> + Send;

    /// Sends everything queued and waits for it, up to `timeout`.
    fn flush(&self, timeout: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Flushes within `timeout`, then closes the producer; the backend cannot be used again.
    fn close(&mut self, timeout: Duration) -> impl Future<Output = Result<()>> + Send;
}

/// The producer a two-phase-commit sink (`kafka_2pc_sink_string`) needs:
/// one transaction per checkpoint interval, flushed at the barrier (through
/// [`ProducerBackend::flush`]), committed at `on_commit`, aborted at
/// `on_abort`; and the resume handle (transactional id, producer id and
/// epoch, transaction protocol) it stages into the checkpoint at each
/// barrier, which never carries a credential.
pub trait TransactionalProducerBackend: ProducerBackend {
    /// InitProducerId for `transactional_id` (connecting first): fences
    /// older instances and aborts what they left open.
    fn init_transactions(
        &mut self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> impl Future<Output = Result<ResumeHandle>> + Send;

    /// Begins a transaction (local: nothing is sent until the first record).
    fn begin_transaction(&mut self) -> Result<()>;

    /// Commits the open transaction (after a flush).
    fn commit_transaction(&mut self, timeout: Duration) -> impl Future<Output = Result<()>> + Send;

    /// Aborts the open transaction within `timeout`; its records never become visible.
    fn abort_transaction(&mut self, timeout: Duration) -> impl Future<Output = Result<()>> + Send;

    /// The identity the open (or next) transaction runs under (natively
    /// read directly; on rdkafka from librdkafka's statistics); `None`
    /// before `init_transactions`.
    fn identity(&self) -> Option<ResumeHandle>;

    /// Adds a group member's consumed offsets (each the next offset to
    /// consume) to the open transaction (KIP-447): they are committed for
    /// the member's group if and only if the transaction commits, and the
    /// commit carries the member's generation (member epoch), member id
    /// and instance id, so the group coordinator refuses a zombie's
    /// offsets (the transaction must then be aborted). Take `metadata` from
    /// [`GroupConsumerBackend::group_metadata`] after the last poll whose
    /// records are in the transaction. A handle of the other backend is
    /// refused ([`ConnectorError::CallOrder`]).
    ///
    /// Cancel safety: not cancel safe: a dropped call may or may not have
    /// added the offsets; call it again with the same offsets, or abort.
    fn send_offsets(
        &mut self,
        offsets: &[TopicPartitionOffset],
        metadata: &GroupMetadataHandle,
        timeout: Duration,
    ) -> impl Future<Output = Result<()>> + Send;
}

// ---------------------------------------------------------------------------
// Group membership.

/// A group member's metadata for KIP-447, from
/// [`GroupConsumerBackend::group_metadata`], for
/// [`TransactionalProducerBackend::send_offsets`] of the same backend. Opaque
/// on librdkafka (its `rd_kafka_consumer_group_metadata_t` shows no
/// fields); natively the client's [`ConsumerGroupMetadata`].
#[derive(Clone)]
pub enum GroupMetadataHandle {
    /// The native client's: group id, generation, member id, instance id.
    Native(ConsumerGroupMetadata),
    /// librdkafka's handle (cargo feature `rdkafka`).
    #[cfg(feature = "rdkafka")]
    Rdkafka(super::rdkafka::RdkafkaGroupMetadata),
}

impl GroupMetadataHandle {
    /// The group the metadata is of.
    pub fn group_id(&self) -> &str {
        match self {
            GroupMetadataHandle::Native(m) => &m.group_id,
            #[cfg(feature = "rdkafka")]
            GroupMetadataHandle::Rdkafka(m) => m.group_id(),
        }
    }
}

impl std::fmt::Debug for GroupMetadataHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupMetadataHandle::Native(m) => f.debug_tuple("Native").field(m).finish(),
            #[cfg(feature = "rdkafka")]
            GroupMetadataHandle::Rdkafka(m) => f.debug_tuple("Rdkafka").field(&m.group_id()).finish(),
        }
    }
}

/// A record a group member consumed, with its topic (a subscription may
/// span topics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRecord {
    /// The topic it came from.
    pub topic: std::sync::Arc<str>,
    /// The record (partition, offset, key, value, headers, timestamp).
    pub message: KafkaMessage,
}

/// What one [`GroupConsumerBackend::poll_events`] returned: rebalance
/// events or records. A call that has events returns them at once, without
/// records, so the order is the order they happened in: every record of a
/// later call was fetched under the assignment the earlier events left.
#[derive(Clone, Debug, Default)]
pub struct GroupBatch {
    /// Partitions assigned, revoked or lost, in order.
    pub events: Vec<RebalanceEvent>,
    /// Records of the partitions this member holds, in offset order per
    /// partition.
    pub records: Vec<GroupRecord>,
}

/// A consumer in a consumer group (both `group.protocol`s): subscribe,
/// poll records and rebalance events, commit, and the group metadata a
/// transactional producer's [`send_offsets`](TransactionalProducerBackend::send_offsets)
/// needs (KIP-447). Natively [`NativeGroupConsumer`] over the client's
/// [`GroupConsumer`]; on librdkafka `RdkafkaGroupConsumer` over its
/// KafkaConsumer. Made from a source's connection options (brokers, client
/// id, security, client tuning, fetch tuning, passthrough) and a
/// [`GroupConsumerConfig`] (group id, protocol, instance id, timeouts,
/// auto-commit, `auto.offset.reset`, isolation).
///
/// One difference shows: a revocation is acknowledged natively at the
/// poll after the one that reported it, on librdkafka inside the poll that
/// reports it (its rebalance callback). Work on partitions is therefore
/// finished before polling again on both.
pub trait GroupConsumerBackend: Send {
    /// Connects (natively the cluster; librdkafka's consumer is created);
    /// called once, before anything else.
    ///
    /// Cancel safety: cancel safe (nothing is joined yet).
    fn connect(&mut self) -> impl Future<Output = Result<()>> + Send;

    /// Subscribes (replacing an earlier subscription); the member joins
    /// the group (natively in the background, on librdkafka as it is
    /// polled). A pattern must match a topic's whole name.
    fn subscribe(&mut self, subscription: &Subscription) -> Result<()>;

    /// Waits up to `timeout` for records or rebalance events; see
    /// [`GroupBatch`] for the order. Must be called at least every
    /// `max.poll.interval.ms`.
    ///
    /// Cancel safety: cancel safe: an event or record leaves the backend
    /// only inside the synchronous step that returns it.
    fn poll_events(&mut self, timeout: Duration) -> impl Future<Output = Result<GroupBatch>> + Send;

    /// The partitions this member holds now.
    fn assignment(&self) -> Result<Vec<TopicPartition>>;

    /// Commits `offsets` (each the next offset to consume) with the
    /// member's generation, and waits for the coordinator's answer.
    ///
    /// Cancel safety: not cancel safe: a dropped call may or may not have
    /// committed.
    fn commit(&mut self, offsets: &[TopicPartitionOffset]) -> impl Future<Output = Result<()>> + Send;

    /// The group's committed offsets of `partitions` (`None`: nothing
    /// committed).
    ///
    /// Cancel safety: cancel safe (it only reads).
    fn committed(
        &mut self,
        partitions: &[TopicPartition],
    ) -> impl Future<Output = Result<BTreeMap<TopicPartition, Option<i64>>>> + Send;

    /// The member's metadata for a transactional `send_offsets`; `None`
    /// natively outside a generation (librdkafka always has one; outside a
    /// generation the coordinator refuses it).
    fn group_metadata(&self) -> Option<GroupMetadataHandle>;

    /// Leaves the group (a static member keeps its place until its session
    /// times out) and closes; the backend cannot be used again. Commits
    /// what was consumed first only with `enable.auto.commit`.
    ///
    /// Cancel safety: not cancel safe: a dropped call may leave the member
    /// in the group until its session times out.
    fn close(&mut self) -> impl Future<Output = Result<()>> + Send;
}

// ---------------------------------------------------------------------------
// The native backend.

/// [`ConsumerBackend`] over `crate::client::Consumer`. Never commits.
#[derive(Debug)]
pub struct NativeConsumer {
    config: ClientConfig,
    consumer_config: ConsumerConfig,
    cluster: Option<Cluster>,
    consumer: Option<Consumer>,
    topic: Option<std::sync::Arc<str>>,
}

impl NativeConsumer {
    /// A consumer that connects with `config` at `connect`.
    pub fn new(config: ClientConfig, consumer_config: ConsumerConfig) -> Self {
        NativeConsumer {
            config,
            consumer_config,
            cluster: None,
            consumer: None,
            topic: None,
        }
    }

    fn parts(&mut self) -> Result<(&Cluster, &mut Consumer)> {
        match (&self.cluster, &mut self.consumer) {
            (Some(c), Some(k)) => Ok((c, k)),
            _ => Err(ConnectorError::CallOrder {
                call: "consumer backend",
                problem: "before connect",
            }),
        }
    }
}

impl ConsumerBackend for NativeConsumer {
    async fn connect(&mut self) -> Result<()> {
        if self.cluster.is_none() {
            let cluster = Cluster::connect(self.config.clone()).await?;
            self.consumer = Some(Consumer::new(cluster.clone(), self.consumer_config.clone()));
            self.cluster = Some(cluster);
        }
        Ok(())
    }

    async fn partition_count(&mut self, topic: &str) -> Result<i32> {
        let (cluster, _) = self.parts()?;
        let md = cluster.refresh_topics(&[topic]).await?;
        match md.topics.get(topic) {
            Some(t) => Ok(t.partitions.len() as i32),
            // Unknown (or not led yet): wait for it as the client does.
            None => Ok(cluster.partition_count(topic).await? as i32),
        }
    }

    async fn watermark(&mut self, topic: &str, partition: i32, which: Watermark) -> Result<i64> {
        let (_, consumer) = self.parts()?;
        let which = match which {
            Watermark::Low => Offset::Earliest,
            Watermark::High => Offset::Latest,
        };
        Ok(consumer.list_offset(topic, partition, which).await?)
    }

    async fn committed(
        &mut self,
        group_id: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Option<i64>>> {
        let require_stable = self.consumer_config.isolation == IsolationLevel::ReadCommitted;
        let (cluster, _) = self.parts()?;
        let group = GroupOffsets::new(cluster.clone(), group_id)?;
        let wanted: Vec<TopicPartition> = partitions.iter().map(|p| TopicPartition::new(topic, *p)).collect();
        let found = group.fetch(&wanted, require_stable).await?;
        Ok(partitions
            .iter()
            .map(|p| {
                let offset = found
                    .get(&TopicPartition::new(topic, *p))
                    .and_then(|c| c.as_ref())
                    .map(|c| c.offset)
                    .filter(|o| *o >= 0);
                (*p, offset)
            })
            .collect())
    }

    async fn assign(&mut self, topic: &str, partitions: &[PartitionOffset]) -> Result<()> {
        let (_, consumer) = self.parts()?;
        let list: Vec<TopicPartition> = partitions
            .iter()
            .map(|p| TopicPartition::new(topic, p.partition))
            .collect();
        consumer.assign(&list);
        for p in partitions {
            consumer.seek(topic, p.partition, Offset::At(p.offset)).await?;
        }
        self.topic = Some(std::sync::Arc::from(topic));
        Ok(())
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<KafkaMessage>> {
        let (_, consumer) = self.parts()?;
        let records = consumer.poll(timeout).await?;
        Ok(records.into_iter().map(KafkaMessage::from).collect())
    }

    async fn close(&mut self) -> Result<()> {
        self.consumer = None;
        self.cluster = None;
        Ok(())
    }

    fn lag(&self) -> Option<u64> {
        let consumer = self.consumer.as_ref()?;
        consumer.assignment().iter().try_fold(0u64, |sum, tp| {
            let position = consumer.position(&tp.topic, tp.partition)?;
            let high_watermark = consumer.watermarks(&tp.topic, tp.partition)?.high_watermark;
            Some(sum + high_watermark.saturating_sub(position).max(0) as u64)
        })
    }
}

/// A consumed record as a connector message (the topic is dropped).
impl From<crate::client::ConsumerRecord> for KafkaMessage {
    fn from(r: crate::client::ConsumerRecord) -> Self {
        KafkaMessage {
            payload: r.record.value,
            key: r.record.key,
            // The same header type: moved, not converted.
            headers: r.record.headers,
            offset: r.record.offset,
            partition: r.partition,
            timestamp: r.record.timestamp,
        }
    }
}

/// [`GroupConsumerBackend`] over the client's [`GroupConsumer`].
#[derive(Debug)]
pub struct NativeGroupConsumer {
    config: ClientConfig,
    group: GroupConsumerConfig,
    consumer: Option<GroupConsumer>,
    /// The committed-offset lookups (the member's own is not `Sync`).
    offsets: Option<GroupOffsets>,
}

impl NativeGroupConsumer {
    /// A member whose connection `options` describe (its brokers, client
    /// id, security, client tuning and fetch tuning; not its topic, group
    /// or offset options) in the group `group` describes (whose
    /// `consumer` fetch settings are replaced by the options' fetch tuning,
    /// keeping its isolation level and `auto.offset.reset`).
    pub fn new(options: &SourceOptions, mut group: GroupConsumerConfig) -> Result<Self> {
        let mut fetch = options.consumer_config();
        fetch.isolation = group.consumer.isolation;
        fetch.auto_offset_reset = group.consumer.auto_offset_reset;
        group.consumer = fetch;
        group.validate()?;
        Ok(NativeGroupConsumer {
            config: options.client_config()?,
            group,
            consumer: None,
            offsets: None,
        })
    }

    fn member(&mut self) -> Result<&mut GroupConsumer> {
        self.consumer.as_mut().ok_or(ConnectorError::CallOrder {
            call: "group consumer backend",
            problem: "before connect (or after close)",
        })
    }
}

impl GroupConsumerBackend for NativeGroupConsumer {
    async fn connect(&mut self) -> Result<()> {
        if self.consumer.is_none() {
            let cluster = Cluster::connect(self.config.clone()).await?;
            self.offsets = Some(GroupOffsets::new(cluster.clone(), self.group.group_id.clone())?);
            self.consumer = Some(GroupConsumer::new(cluster, self.group.clone()).await?);
        }
        Ok(())
    }

    fn subscribe(&mut self, subscription: &Subscription) -> Result<()> {
        Ok(self.member()?.subscribe(subscription.clone())?)
    }

    async fn poll_events(&mut self, timeout: Duration) -> Result<GroupBatch> {
        let polled = self.member()?.poll_events(timeout).await?;
        Ok(GroupBatch {
            events: polled.events,
            records: polled
                .records
                .into_iter()
                .map(|r| GroupRecord {
                    topic: r.topic.clone(),
                    message: KafkaMessage::from(r),
                })
                .collect(),
        })
    }

    fn assignment(&self) -> Result<Vec<TopicPartition>> {
        match &self.consumer {
            Some(c) => Ok(c.assignment()),
            None => Err(ConnectorError::CallOrder {
                call: "group consumer backend",
                problem: "before connect (or after close)",
            }),
        }
    }

    async fn commit(&mut self, offsets: &[TopicPartitionOffset]) -> Result<()> {
        Ok(self.member()?.commit_offsets_sync(offsets).await?)
    }

    async fn committed(&mut self, partitions: &[TopicPartition]) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        let offsets = self.offsets.as_ref().ok_or(ConnectorError::CallOrder {
            call: "group consumer backend",
            problem: "before connect (or after close)",
        })?;
        let found = offsets.fetch(partitions, true).await?;
        Ok(partitions
            .iter()
            .map(|tp| {
                let offset = found.get(tp).and_then(|c| c.as_ref()).map(|c| c.offset);
                (tp.clone(), offset.filter(|o| *o >= 0))
            })
            .collect())
    }

    fn group_metadata(&self) -> Option<GroupMetadataHandle> {
        self.consumer
            .as_ref()?
            .group_metadata()
            .map(GroupMetadataHandle::Native)
    }

    async fn close(&mut self) -> Result<()> {
        match self.consumer.take() {
            Some(c) => Ok(c.close().await?),
            None => Ok(()),
        }
    }
}

/// [`ProducerBackend`] over `crate::client::Producer` (idempotent with
/// `acks = all`).
#[derive(Debug)]
pub struct NativeProducer {
    config: ClientConfig,
    producer_config: ProducerConfig,
    producer: Option<Producer>,
    topic: TopicName,
}

/// The first topic a producer sends to, shared by every record for it: a
/// record's topic is then a pointer copy, not an allocation per record.
#[derive(Debug, Default)]
struct TopicName(std::sync::OnceLock<std::sync::Arc<str>>);

impl TopicName {
    fn of(&self, topic: &str) -> std::sync::Arc<str> {
        let first = self.0.get_or_init(|| topic.into());
        if **first == *topic {
            first.clone()
        } else {
            topic.into()
        }
    }
}

impl NativeProducer {
    /// A producer for `config`, connected by [`ProducerBackend::connect`].
    pub fn new(config: ClientConfig, producer_config: ProducerConfig) -> Self {
        NativeProducer {
            config,
            producer_config,
            producer: None,
            topic: TopicName::default(),
        }
    }

    fn producer(&self) -> Result<&Producer> {
        self.producer.as_ref().ok_or(ConnectorError::CallOrder {
            call: "producer backend",
            problem: "before connect",
        })
    }
}

/// A native delivery, as a [`DeliveryOutcome`].
pub struct NativeDelivery(DeliveryFuture);

impl Future for NativeDelivery {
    type Output = DeliveryOutcome;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<DeliveryOutcome> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(|r| {
            r.map(|d| PartitionOffset::new(d.partition, d.offset))
                .map_err(ConnectorError::from)
        })
    }
}

impl ProducerBackend for NativeProducer {
    type Delivery = NativeDelivery;

    async fn connect(&mut self) -> Result<()> {
        if self.producer.is_none() {
            let cluster = Cluster::connect(self.config.clone()).await?;
            self.producer = Some(Producer::new(cluster, self.producer_config.clone()).await?);
        }
        Ok(())
    }

    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<NativeDelivery> {
        let producer = self.producer()?;
        Ok(NativeDelivery(
            producer
                .send(producer_record(self.topic.of(topic), partition, message))
                .await?,
        ))
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        Ok(self.producer()?.flush(timeout).await?)
    }

    async fn close(&mut self, timeout: Duration) -> Result<()> {
        match self.producer.take() {
            Some(p) => Ok(p.close(timeout).await?),
            None => Ok(()),
        }
    }
}

/// A connector message as the client's record.
fn producer_record(topic: std::sync::Arc<str>, partition: Option<i32>, message: KafkaMessage) -> ProducerRecord {
    ProducerRecord {
        topic,
        partition,
        key: message.key,
        value: message.payload,
        headers: message
            .headers
            .into_iter()
            .map(|h| (String::from_utf8_lossy(&h.key).into_owned(), h.value))
            .collect(),
        timestamp: (message.timestamp >= 0).then_some(message.timestamp),
    }
}

/// [`TransactionalProducerBackend`] over the client's
/// [`TransactionalProducer`]: `connect` only connects; the producer exists
/// from `init_transactions` on.
pub struct NativeTransactionalProducer {
    config: ClientConfig,
    producer_config: ProducerConfig,
    cluster: Option<Cluster>,
    producer: Option<TransactionalProducer>,
    two_phase_commit: bool,
    topic: TopicName,
}

impl std::fmt::Debug for NativeTransactionalProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeTransactionalProducer")
            .field("config", &self.config)
            .field("identity", &self.identity())
            .finish()
    }
}

impl NativeTransactionalProducer {
    /// A transactional producer for `config`; [`TransactionalProducerBackend::init_transactions`]
    /// names the transactional id and connects.
    pub fn new(config: ClientConfig, producer_config: ProducerConfig) -> Self {
        NativeTransactionalProducer {
            config,
            producer_config,
            cluster: None,
            producer: None,
            two_phase_commit: false,
            topic: TopicName::default(),
        }
    }

    /// With KIP-939 two-phase-commit participation: `init_transactions`
    /// asks the broker never to abort this id's transactions on their
    /// timeout ([`TxnConfig::two_phase_commit`]).
    #[must_use]
    pub fn with_two_phase_commit(mut self, enabled: bool) -> Self {
        self.two_phase_commit = enabled;
        self
    }

    fn producer(&self) -> Result<&TransactionalProducer> {
        self.producer.as_ref().ok_or(ConnectorError::CallOrder {
            call: "transactional producer backend",
            problem: "before init_transactions",
        })
    }
}

/// Bounds a transaction call by `timeout`.
async fn bounded<T>(what: &str, timeout: Duration, call: impl Future<Output = crate::Result<T>>) -> Result<T> {
    match tokio::time::timeout(timeout, call).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ConnectorError::from(crate::error::Error::Timeout {
            operation: what.to_owned(),
            timeout,
        })),
    }
}

impl ProducerBackend for NativeTransactionalProducer {
    type Delivery = NativeDelivery;

    async fn connect(&mut self) -> Result<()> {
        if self.cluster.is_none() {
            self.cluster = Some(Cluster::connect(self.config.clone()).await?);
        }
        Ok(())
    }

    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<NativeDelivery> {
        let producer = self.producer()?;
        Ok(NativeDelivery(
            producer
                .send(producer_record(self.topic.of(topic), partition, message))
                .await?,
        ))
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        Ok(self.producer()?.flush(timeout).await?)
    }

    /// Aborts an open transaction (the open tail), then closes.
    async fn close(&mut self, timeout: Duration) -> Result<()> {
        match self.producer.take() {
            Some(p) => bounded("closing the transactional producer", timeout, p.close()).await,
            None => Ok(()),
        }
    }
}

impl TransactionalProducerBackend for NativeTransactionalProducer {
    async fn init_transactions(
        &mut self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<ResumeHandle> {
        self.connect().await?;
        let cluster = self.cluster.clone().expect("connected above");
        let txn = TxnConfig::new(transactional_id)
            .with_transaction_timeout(transaction_timeout)
            .with_two_phase_commit(self.two_phase_commit);
        let producer = TransactionalProducer::init(cluster, self.producer_config.clone(), txn).await?;
        let handle = producer.identity();
        self.producer = Some(producer);
        Ok(handle)
    }

    fn begin_transaction(&mut self) -> Result<()> {
        Ok(self.producer()?.open_transaction()?)
    }

    async fn commit_transaction(&mut self, timeout: Duration) -> Result<()> {
        bounded("committing the transaction", timeout, self.producer()?.commit()).await
    }

    async fn abort_transaction(&mut self, timeout: Duration) -> Result<()> {
        bounded("aborting the transaction", timeout, self.producer()?.abort()).await
    }

    fn identity(&self) -> Option<ResumeHandle> {
        self.producer.as_ref().map(TransactionalProducer::identity)
    }

    async fn send_offsets(
        &mut self,
        offsets: &[TopicPartitionOffset],
        metadata: &GroupMetadataHandle,
        timeout: Duration,
    ) -> Result<()> {
        // Without the feature the handle has one variant.
        #[allow(clippy::infallible_destructuring_match)]
        let metadata = match metadata {
            GroupMetadataHandle::Native(m) => m,
            #[cfg(feature = "rdkafka")]
            GroupMetadataHandle::Rdkafka(_) => {
                return Err(ConnectorError::CallOrder {
                    call: "send_offsets",
                    problem: "with librdkafka's group metadata (the native producer takes the native consumer's)",
                })
            }
        };
        let producer = self.producer()?;
        bounded(
            "sending offsets to the transaction",
            timeout,
            producer.send_offsets_with_metadata(offsets, metadata),
        )
        .await
    }
}
