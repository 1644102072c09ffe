//! The backend the `backend` option selected, at run time: one type per
//! trait of [`super::ConsumerBackend`] / [`super::ProducerBackend`] that is either the native client or
//! librdkafka (cargo feature `rdkafka`), so the registry, the CLI and the
//! parity tests build one source or sink type whichever backend runs
//! underneath. Without the feature the `Rdkafka` variants do not exist and
//! `backend = 'rdkafka'` is refused by the option parser
//! ([`ConnectorError::MissingFeature`](super::ConnectorError::MissingFeature)).
//!
//! The cost is one `match` per call, none per record.
//!
//! A namespace module: its items are reached only as `clink_kafka::connector::selected::*` and are
//! not re-exported elsewhere (the per-operator backend choice, used by the registry, the CLI and the parity tests).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::backend::{
    ConsumerBackend, DeliveryOutcome, GroupBatch, GroupConsumerBackend, GroupMetadataHandle, NativeConsumer,
    NativeDelivery, NativeGroupConsumer, NativeProducer, NativeTransactionalProducer, ProducerBackend,
    TransactionalProducerBackend, Watermark,
};
use super::error::Result;
use super::options::{Backend, SinkOptions, SourceOptions, TwoPhaseCommitMode, TwoPhaseCommitOptions, UpsertOptions};
#[cfg(feature = "rdkafka")]
use super::rdkafka::{
    RdkafkaConsumer, RdkafkaDelivery, RdkafkaGroupConsumer, RdkafkaProducer, RdkafkaTransactionalProducer,
};
use super::record::KafkaMessage;
use super::{KafkaSink, KafkaSource, TwoPhaseCommitSink, UpsertSink};
use crate::client::{
    GroupConsumerConfig, PartitionOffset, ResumeHandle, Subscription, TopicPartition, TopicPartitionOffset,
};

/// The consumer `backend` chose.
// One per operator: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum SelectedConsumer {
    /// The pure-Rust client's consumer.
    Native(NativeConsumer),
    /// librdkafka's consumer (cargo feature `rdkafka`).
    #[cfg(feature = "rdkafka")]
    Rdkafka(RdkafkaConsumer),
}

/// The producer `backend` chose.
// One per operator: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum SelectedProducer {
    /// The pure-Rust client's producer.
    Native(NativeProducer),
    /// librdkafka's producer (cargo feature `rdkafka`).
    #[cfg(feature = "rdkafka")]
    Rdkafka(RdkafkaProducer),
}

/// The transactional producer `backend` chose.
// One per operator: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum SelectedTransactionalProducer {
    /// The pure-Rust client's transactional producer.
    Native(NativeTransactionalProducer),
    /// librdkafka's transactional producer (cargo feature `rdkafka`).
    #[cfg(feature = "rdkafka")]
    Rdkafka(RdkafkaTransactionalProducer),
}

/// A delivery of either backend.
pub enum SelectedDelivery {
    /// The pure-Rust client's delivery.
    Native(NativeDelivery),
    /// librdkafka's delivery (cargo feature `rdkafka`).
    #[cfg(feature = "rdkafka")]
    Rdkafka(RdkafkaDelivery),
}

impl Future for SelectedDelivery {
    type Output = DeliveryOutcome;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<DeliveryOutcome> {
        match self.get_mut() {
            SelectedDelivery::Native(d) => Pin::new(d).poll(cx),
            #[cfg(feature = "rdkafka")]
            SelectedDelivery::Rdkafka(d) => Pin::new(d).poll(cx),
        }
    }
}

/// Without the feature the option parser has already refused `rdkafka`.
#[cfg(not(feature = "rdkafka"))]
fn unavailable() -> super::ConnectorError {
    super::ConnectorError::MissingFeature {
        option: "backend".into(),
        value: "rdkafka".into(),
        feature: "rdkafka",
    }
}

impl SelectedConsumer {
    /// The consumer `options.backend` names, configured from `options`.
    pub fn for_options(options: &SourceOptions) -> Result<Self> {
        match options.backend {
            Backend::Native => Ok(SelectedConsumer::Native(NativeConsumer::new(
                options.client_config()?,
                options.consumer_config(),
            ))),
            #[cfg(feature = "rdkafka")]
            Backend::Rdkafka => Ok(SelectedConsumer::Rdkafka(RdkafkaConsumer::new(options)?)),
            #[cfg(not(feature = "rdkafka"))]
            Backend::Rdkafka => Err(unavailable()),
        }
    }
}

impl SelectedProducer {
    /// The producer `options.backend` names, configured from `options`.
    pub fn for_options(options: &SinkOptions) -> Result<Self> {
        match options.backend {
            Backend::Native => Ok(SelectedProducer::Native(NativeProducer::new(
                options.client_config()?,
                options.producer_config()?,
            ))),
            #[cfg(feature = "rdkafka")]
            Backend::Rdkafka => Ok(SelectedProducer::Rdkafka(RdkafkaProducer::new(options)?)),
            #[cfg(not(feature = "rdkafka"))]
            Backend::Rdkafka => Err(unavailable()),
        }
    }
}

impl SelectedTransactionalProducer {
    /// The transactional producer `options.backend` names, configured from
    /// `options` (the transactional id is given to `init_transactions`).
    pub fn for_options(options: &SinkOptions) -> Result<Self> {
        match options.backend {
            Backend::Native => Ok(SelectedTransactionalProducer::Native(NativeTransactionalProducer::new(
                options.client_config()?,
                options.producer_config()?,
            ))),
            #[cfg(feature = "rdkafka")]
            Backend::Rdkafka => Ok(SelectedTransactionalProducer::Rdkafka(
                RdkafkaTransactionalProducer::new(options)?,
            )),
            #[cfg(not(feature = "rdkafka"))]
            Backend::Rdkafka => Err(unavailable()),
        }
    }
}

/// A source on the backend its options select.
pub fn kafka_source(options: SourceOptions) -> Result<KafkaSource<SelectedConsumer>> {
    let backend = SelectedConsumer::for_options(&options)?;
    Ok(KafkaSource::with_backend(options, backend))
}

/// An at-least-once sink on the backend its options select.
pub fn kafka_sink(options: SinkOptions) -> Result<KafkaSink<SelectedProducer>> {
    let backend = SelectedProducer::for_options(&options)?;
    Ok(KafkaSink::with_backend(options, backend))
}

/// An upsert sink on the backend its options select.
pub fn upsert_sink(options: UpsertOptions) -> Result<UpsertSink<SelectedProducer>> {
    let backend = SelectedProducer::for_options(&options.sink)?;
    Ok(UpsertSink::with_sink(
        KafkaSink::with_backend(options.sink, backend),
        options.primary_key,
    ))
}

/// A two-phase-commit sink on the backend its options select.
pub fn two_phase_commit_sink(
    options: TwoPhaseCommitOptions,
) -> Result<TwoPhaseCommitSink<SelectedTransactionalProducer>> {
    let backend = match options.two_phase_commit {
        TwoPhaseCommitMode::Resume => SelectedTransactionalProducer::for_options(&options.sink)?,
        TwoPhaseCommitMode::Kip939 => match options.sink.backend {
            Backend::Native => SelectedTransactionalProducer::Native(
                NativeTransactionalProducer::new(options.sink.client_config()?, options.sink.producer_config()?)
                    .with_two_phase_commit(true),
            ),
            #[cfg(feature = "rdkafka")]
            Backend::Rdkafka => {
                return Err(super::ConnectorError::invalid(
                    "two_phase_commit",
                    TwoPhaseCommitMode::Kip939.as_str(),
                    "resume on the rdkafka backend (librdkafka has no KIP-939 two-phase commit; kip939 needs the \
                     native backend)",
                ))
            }
            #[cfg(not(feature = "rdkafka"))]
            Backend::Rdkafka => return Err(unavailable()),
        },
    };
    Ok(TwoPhaseCommitSink::with_backend(options, backend))
}

macro_rules! each {
    ($self:expr, $b:ident => $e:expr, $enum:ident) => {
        match $self {
            $enum::Native($b) => $e,
            #[cfg(feature = "rdkafka")]
            $enum::Rdkafka($b) => $e,
        }
    };
}

impl ConsumerBackend for SelectedConsumer {
    async fn connect(&mut self) -> Result<()> {
        each!(self, b => b.connect().await, SelectedConsumer)
    }

    async fn partition_count(&mut self, topic: &str) -> Result<i32> {
        each!(self, b => b.partition_count(topic).await, SelectedConsumer)
    }

    async fn watermark(&mut self, topic: &str, partition: i32, which: Watermark) -> Result<i64> {
        each!(self, b => b.watermark(topic, partition, which).await, SelectedConsumer)
    }

    async fn committed(
        &mut self,
        group_id: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Option<i64>>> {
        each!(self, b => b.committed(group_id, topic, partitions).await, SelectedConsumer)
    }

    async fn assign(&mut self, topic: &str, partitions: &[PartitionOffset]) -> Result<()> {
        each!(self, b => b.assign(topic, partitions).await, SelectedConsumer)
    }

    async fn poll(&mut self, timeout: Duration) -> Result<Vec<KafkaMessage>> {
        each!(self, b => b.poll(timeout).await, SelectedConsumer)
    }

    async fn close(&mut self) -> Result<()> {
        each!(self, b => b.close().await, SelectedConsumer)
    }

    fn lag(&self) -> Option<u64> {
        each!(self, b => b.lag(), SelectedConsumer)
    }

    fn read_headers(&mut self, read: bool) {
        each!(self, b => b.read_headers(read), SelectedConsumer)
    }
}

impl ProducerBackend for SelectedProducer {
    type Delivery = SelectedDelivery;

    async fn connect(&mut self) -> Result<()> {
        each!(self, b => b.connect().await, SelectedProducer)
    }

    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<SelectedDelivery> {
        match self {
            SelectedProducer::Native(b) => Ok(SelectedDelivery::Native(b.send(topic, partition, message).await?)),
            #[cfg(feature = "rdkafka")]
            SelectedProducer::Rdkafka(b) => Ok(SelectedDelivery::Rdkafka(b.send(topic, partition, message).await?)),
        }
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        each!(self, b => b.flush(timeout).await, SelectedProducer)
    }

    async fn close(&mut self, timeout: Duration) -> Result<()> {
        each!(self, b => b.close(timeout).await, SelectedProducer)
    }
}

impl ProducerBackend for SelectedTransactionalProducer {
    type Delivery = SelectedDelivery;

    async fn connect(&mut self) -> Result<()> {
        each!(self, b => b.connect().await, SelectedTransactionalProducer)
    }

    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<SelectedDelivery> {
        match self {
            SelectedTransactionalProducer::Native(b) => {
                Ok(SelectedDelivery::Native(b.send(topic, partition, message).await?))
            }
            #[cfg(feature = "rdkafka")]
            SelectedTransactionalProducer::Rdkafka(b) => {
                Ok(SelectedDelivery::Rdkafka(b.send(topic, partition, message).await?))
            }
        }
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        each!(self, b => b.flush(timeout).await, SelectedTransactionalProducer)
    }

    async fn close(&mut self, timeout: Duration) -> Result<()> {
        each!(self, b => b.close(timeout).await, SelectedTransactionalProducer)
    }
}

impl TransactionalProducerBackend for SelectedTransactionalProducer {
    async fn init_transactions(
        &mut self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<ResumeHandle> {
        each!(self, b => b.init_transactions(transactional_id, transaction_timeout).await, SelectedTransactionalProducer)
    }

    fn begin_transaction(&mut self) -> Result<()> {
        each!(self, b => b.begin_transaction(), SelectedTransactionalProducer)
    }

    async fn commit_transaction(&mut self, timeout: Duration) -> Result<()> {
        each!(self, b => b.commit_transaction(timeout).await, SelectedTransactionalProducer)
    }

    async fn abort_transaction(&mut self, timeout: Duration) -> Result<()> {
        each!(self, b => b.abort_transaction(timeout).await, SelectedTransactionalProducer)
    }

    fn identity(&self) -> Option<ResumeHandle> {
        each!(self, b => b.identity(), SelectedTransactionalProducer)
    }

    async fn send_offsets(
        &mut self,
        offsets: &[TopicPartitionOffset],
        metadata: &GroupMetadataHandle,
        timeout: Duration,
    ) -> Result<()> {
        each!(self, b => b.send_offsets(offsets, metadata, timeout).await, SelectedTransactionalProducer)
    }
}

/// The group consumer `backend` chose.
// One per member: the size difference between variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum SelectedGroupConsumer {
    /// The pure-Rust client's group consumer.
    Native(NativeGroupConsumer),
    /// librdkafka's KafkaConsumer (cargo feature `rdkafka`).
    #[cfg(feature = "rdkafka")]
    Rdkafka(RdkafkaGroupConsumer),
}

impl SelectedGroupConsumer {
    /// The group consumer `options.backend` names, connecting as `options`
    /// say, in the group `group` describes (see
    /// [`NativeGroupConsumer::new`]).
    pub fn for_options(options: &SourceOptions, group: GroupConsumerConfig) -> Result<Self> {
        match options.backend {
            Backend::Native => Ok(SelectedGroupConsumer::Native(NativeGroupConsumer::new(options, group)?)),
            #[cfg(feature = "rdkafka")]
            Backend::Rdkafka => Ok(SelectedGroupConsumer::Rdkafka(RdkafkaGroupConsumer::new(
                options, group,
            )?)),
            #[cfg(not(feature = "rdkafka"))]
            Backend::Rdkafka => Err(unavailable()),
        }
    }
}

impl GroupConsumerBackend for SelectedGroupConsumer {
    async fn connect(&mut self) -> Result<()> {
        each!(self, b => b.connect().await, SelectedGroupConsumer)
    }

    fn subscribe(&mut self, subscription: &Subscription) -> Result<()> {
        each!(self, b => b.subscribe(subscription), SelectedGroupConsumer)
    }

    async fn poll_events(&mut self, timeout: Duration) -> Result<GroupBatch> {
        each!(self, b => b.poll_events(timeout).await, SelectedGroupConsumer)
    }

    fn assignment(&self) -> Result<Vec<TopicPartition>> {
        each!(self, b => b.assignment(), SelectedGroupConsumer)
    }

    async fn commit(&mut self, offsets: &[TopicPartitionOffset]) -> Result<()> {
        each!(self, b => b.commit(offsets).await, SelectedGroupConsumer)
    }

    async fn committed(&mut self, partitions: &[TopicPartition]) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        each!(self, b => b.committed(partitions).await, SelectedGroupConsumer)
    }

    fn group_metadata(&self) -> Option<GroupMetadataHandle> {
        each!(self, b => b.group_metadata(), SelectedGroupConsumer)
    }

    async fn close(&mut self) -> Result<()> {
        each!(self, b => b.close().await, SelectedGroupConsumer)
    }
}
