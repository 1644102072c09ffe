//! The `rdkafka` backend (cargo feature `rdkafka`): the three backend traits
//! of [`super::backend`] over librdkafka, through the `rdkafka` crate. The
//! source and sinks run unchanged on it; `backend = 'rdkafka'` picks it.
//!
//! - [`RdkafkaConsumer`]: a `BaseConsumer` with manual assignment at
//!   concrete offsets (the source resolves them first), never subscribing,
//!   never committing; `auto.offset.reset = error`, so an out-of-range start
//!   is an error as on the native client; the isolation level passed
//!   through. A poll drains what librdkafka has queued without blocking the
//!   runtime: librdkafka's queue-nonempty callback wakes a `Notify`.
//! - [`RdkafkaProducer`]: a `FutureProducer` (idempotent with `acks=all` by
//!   default, as natively), at least once, deliveries as futures.
//! - [`RdkafkaTransactionalProducer`]: the same with `transactional.id`; its
//!   blocking transaction calls run on `spawn_blocking`. The producer id and
//!   epoch for the resume handle come from librdkafka's statistics JSON
//!   (`eos.producer_id`, `eos.producer_epoch`, `statistics.interval.ms`), as
//!   the reference does it: `init_transactions` waits a bounded time for
//!   the first tick carrying an assigned identity and fails loudly without
//!   one. librdkafka 2.12 speaks the original transaction protocol (EndTxn
//!   v0-1, AddPartitionsToTxn), so the handle is a TV1 handle even on a TV2
//!   broker, and the epoch changes only when librdkafka bumps it after an
//!   abortable error (during an abort): an abort therefore waits for a
//!   fresh tick before the identity is trusted again.
//!
//! In-doubt resolution stays on the native [`crate::client::Resolver`]: no
//! librdkafka call ends another producer's transaction.
//!
//! Copies librdkafka forces: a consumed record's key, value and headers live
//! in librdkafka's fetch buffer, which a `BorrowedMessage` cannot outlive,
//! so each poll copies its records once into ONE buffer and hands out
//! `Bytes` slices of it (one allocation per poll, not per record); a
//! produced record is copied by librdkafka into its queue
//! (`RD_KAFKA_MSG_F_COPY`).
//!
//! This build's librdkafka is the bundled one with no optional C library:
//! no OpenSSL (so no TLS and no SCRAM), no zlib (no gzip), no zstd; LZ4 and
//! Snappy are built in, SASL PLAIN is built in. Those configurations are
//! refused when the operator is built, naming the option.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rdkafka::config::ClientConfig as RdConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::Notify;

use super::backend::{ConsumerBackend, DeliveryOutcome, ProducerBackend, TransactionalProducerBackend, Watermark};
use super::error::{ConnectorError, Result};
use super::options::{ClientTuning, Passthrough, SinkOptions, SourceOptions};
use super::record::{Header, KafkaMessage};
use super::security::SecurityConfig;
use crate::client::{Acks, IsolationLevel, ResumeHandle, SecurityProtocol, TransactionVersion};
use clink_kafka_wire::compression::Compression;
use clink_kafka_wire::sasl::SaslMechanism;

/// What this build's librdkafka lacks, as the rdkafka crate's feature
/// that would add it (for error messages).
const NO_TLS: &str = "this build's librdkafka has no TLS (the rdkafka crate's `ssl` feature, which links \
                      OpenSSL, is not enabled); use backend = 'native'";

/// A librdkafka error; a broker error also names Kafka's code
/// (`MESSAGE_TOO_LARGE`), as the native client's errors do.
fn rd_err(operation: impl Into<String>, e: KafkaError) -> ConnectorError {
    let code = e
        .rdkafka_error_code()
        .map(|c| c as i32)
        .filter(|c| *c > 0 && *c <= i16::MAX as i32);
    let message = match code {
        Some(c) => format!("{e} [{}]", clink_kafka_wire::KafkaCode(c as i16).name()),
        None => e.to_string(),
    };
    ConnectorError::Rdkafka {
        operation: operation.into(),
        message,
    }
}

/// Errors a metadata or offset lookup right after a topic's creation or a
/// leader change answers; librdkafka's synchronous lookups do not retry them.
fn transient(e: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        e.rdkafka_error_code(),
        Some(
            NotLeaderForPartition
                | LeaderNotAvailable
                | UnknownTopicOrPartition
                | RequestTimedOut
                | OperationTimedOut
                | BrokerTransportFailure
                | AllBrokersDown
                | NotCoordinator
                | CoordinatorLoadInProgress
                | CoordinatorNotAvailable
                | UnknownLeaderEpoch
                | FencedLeaderEpoch
                | OffsetNotAvailable
        )
    )
}

fn join_err(operation: &str, e: tokio::task::JoinError) -> ConnectorError {
    ConnectorError::Rdkafka {
        operation: operation.to_owned(),
        message: format!("the blocking librdkafka call did not finish: {e}"),
    }
}

fn ms(d: Duration) -> String {
    d.as_millis().min(i32::MAX as u128).to_string()
}

/// The properties every client gets: brokers, client id, security, the
/// client tuning the options map, then the verbatim passthrough (checked
/// for weakness when the options were parsed).
fn base_config(
    brokers: &str,
    client_id: &str,
    security: &SecurityConfig,
    tuning: &ClientTuning,
    verbatim: &Passthrough,
) -> Result<RdConfig> {
    let mut c = RdConfig::new();
    c.set("bootstrap.servers", brokers);
    c.set("client.id", client_id);
    c.set("log_level", "3");
    match security.protocol {
        SecurityProtocol::Plaintext => {
            c.set("security.protocol", "plaintext");
        }
        SecurityProtocol::SaslPlaintext => {
            c.set("security.protocol", "sasl_plaintext");
        }
        SecurityProtocol::Ssl | SecurityProtocol::SaslSsl => {
            return Err(ConnectorError::UnsupportedProperty {
                property: "security_protocol".into(),
                reason: format!(
                    "'{}' on backend 'rdkafka': {NO_TLS}",
                    security.protocol.name().to_ascii_lowercase()
                ),
            });
        }
    }
    if let Some(sasl) = &security.sasl {
        match sasl.mechanism {
            SaslMechanism::Plain => {}
            other => {
                return Err(ConnectorError::UnsupportedProperty {
                    property: "sasl_mechanism".into(),
                    reason: format!(
                        "{} on backend 'rdkafka': librdkafka's SCRAM needs OpenSSL, and this build's librdkafka \
                         has none (the rdkafka crate's `ssl` feature is not enabled); use PLAIN or backend = \
                         'native'",
                        other.name()
                    ),
                });
            }
        }
        c.set("sasl.mechanism", "PLAIN");
        c.set("sasl.username", &sasl.username);
        c.set("sasl.password", sasl.password.expose());
    }
    // librdkafka's floor for the connection setup bound is 1 s (a shorter
    // native bound is raised to it).
    let tuned = [
        (
            "socket.connection.setup.timeout.ms",
            tuning.connect_timeout.map(|d| d.max(Duration::from_secs(1))),
        ),
        ("socket.timeout.ms", tuning.request_timeout),
        ("retry.backoff.ms", tuning.retry_backoff),
        ("retry.backoff.max.ms", tuning.retry_backoff_max),
        ("topic.metadata.propagation.max.ms", tuning.metadata_max_wait),
    ];
    for (property, value) in tuned {
        if let Some(v) = value {
            c.set(property, ms(v));
        }
    }
    if let Some(v) = tuning.max_frame_size {
        c.set("receive.message.max.bytes", v.to_string());
    }
    for (k, v) in &verbatim.0 {
        if k.starts_with("ssl.") || k.starts_with("ssl_") {
            return Err(ConnectorError::UnsupportedProperty {
                property: format!("kafka.{k}"),
                reason: NO_TLS.into(),
            });
        }
        c.set(k, v);
    }
    Ok(c)
}

/// librdkafka's own validation of every property name and value, without
/// I/O: a bad verbatim property fails the build of the operator, naming it.
/// The error names the property as the user wrote it (`kafka.<property>`)
/// and never echoes the value of a secret one.
fn validate(config: &RdConfig) -> Result<()> {
    match config.create_native_config() {
        Ok(_) => Ok(()),
        Err(KafkaError::ClientConfig(_, desc, key, value)) => Err(ConnectorError::UnsupportedProperty {
            property: format!("kafka.{key}"),
            reason: if super::security::is_secret_option(&key) {
                format!("librdkafka refused it: {desc}")
            } else {
                format!("librdkafka refused the value {value:?}: {desc}")
            },
        }),
        Err(e) => Err(ConnectorError::UnsupportedProperty {
            property: "kafka.<property>".into(),
            reason: format!("librdkafka refused the configuration: {e}"),
        }),
    }
}

/// Runs a blocking librdkafka call off the runtime.
async fn blocking<T: Send + 'static>(
    operation: &'static str,
    call: impl FnOnce() -> std::result::Result<T, KafkaError> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| join_err(operation, e))?
        .map_err(|e| rd_err(operation, e))
}

/// [`blocking`], retried while the error is [`transient`], until `bound`.
async fn blocking_retried<T: Send + 'static>(
    operation: &'static str,
    bound: Duration,
    call: impl Fn() -> std::result::Result<T, KafkaError> + Send + Sync + Clone + 'static,
) -> Result<T> {
    let deadline = Instant::now() + bound;
    loop {
        let attempt = call.clone();
        let r = tokio::task::spawn_blocking(attempt)
            .await
            .map_err(|e| join_err(operation, e))?;
        match r {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) && Instant::now() < deadline => {
                tracing::debug!(operation, error = %e, "transient librdkafka error; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(rd_err(operation, e)),
        }
    }
}

// ---------------------------------------------------------------------------
// Consumer.

/// The most records one poll copies out of librdkafka.
const MAX_POLL_RECORDS: usize = 8192;
/// The most key/value/header bytes one poll copies.
const MAX_POLL_BYTES: usize = 16 * 1024 * 1024;

/// [`ConsumerBackend`] over librdkafka: manual assignment, no group
/// membership, never commits.
pub struct RdkafkaConsumer {
    config: RdConfig,
    group_id: String,
    request_timeout: Duration,
    metadata_max_wait: Duration,
    consumer: Option<Arc<BaseConsumer>>,
    /// Woken by librdkafka when the consumer queue becomes non-empty.
    ready: Arc<Notify>,
    /// An error polled after records of the same poll; returned next.
    deferred: Option<ConnectorError>,
}

impl std::fmt::Debug for RdkafkaConsumer {
    // The librdkafka config holds the SASL password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdkafkaConsumer")
            .field("group_id", &self.group_id)
            .field("connected", &self.consumer.is_some())
            .finish_non_exhaustive()
    }
}

impl RdkafkaConsumer {
    /// The consumer `options` describe; refuses what this build's
    /// librdkafka cannot do, before any I/O.
    pub fn new(options: &SourceOptions) -> Result<Self> {
        let mut c = base_config(
            &options.brokers,
            &options.client_id,
            &options.security,
            &options.client,
            &options.rdkafka_properties,
        )?;
        let cc = options.consumer_config();
        c.set("group.id", &options.group_id);
        c.set("enable.auto.commit", "false");
        c.set("enable.auto.offset.store", "false");
        c.set("enable.partition.eof", "false");
        c.set("auto.offset.reset", "error");
        c.set(
            "isolation.level",
            match cc.isolation {
                IsolationLevel::ReadCommitted => "read_committed",
                IsolationLevel::ReadUncommitted => "read_uncommitted",
            },
        );
        c.set("fetch.wait.max.ms", ms(cc.max_wait));
        c.set("fetch.min.bytes", cc.min_bytes.to_string());
        c.set("fetch.max.bytes", cc.max_bytes.to_string());
        c.set("max.partition.fetch.bytes", cc.partition_max_bytes.to_string());
        c.set("check.crcs", cc.check_crcs.to_string());
        validate(&c)?;
        let client = options.client_config()?;
        Ok(RdkafkaConsumer {
            config: c,
            group_id: options.group_id.clone(),
            request_timeout: client.request_timeout,
            metadata_max_wait: client.metadata_max_wait,
            consumer: None,
            ready: Arc::new(Notify::new()),
            deferred: None,
        })
    }

    fn consumer(&self) -> Result<Arc<BaseConsumer>> {
        self.consumer.clone().ok_or(ConnectorError::CallOrder {
            call: "rdkafka consumer backend",
            problem: "before connect",
        })
    }

    /// Takes what librdkafka has queued, without waiting: one buffer for
    /// the whole poll, records as slices of it.
    fn drain(&mut self, consumer: &BaseConsumer) -> Vec<KafkaMessage> {
        struct Pending {
            partition: i32,
            offset: i64,
            timestamp: i64,
            key: Option<(usize, usize)>,
            payload: Option<(usize, usize)>,
            headers: Vec<((usize, usize), Option<(usize, usize)>)>,
        }
        let mut buf = BytesMut::new();
        let put = |buf: &mut BytesMut, b: &[u8]| {
            let start = buf.len();
            buf.extend_from_slice(b);
            (start, buf.len())
        };
        let mut pending: Vec<Pending> = Vec::new();
        let mut misses = 0;
        while pending.len() < MAX_POLL_RECORDS && buf.len() < MAX_POLL_BYTES {
            match consumer.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    misses = 0;
                    let key = m.key().map(|k| put(&mut buf, k));
                    let payload = m.payload().map(|p| put(&mut buf, p));
                    let mut headers = Vec::new();
                    if let Some(hs) = m.headers() {
                        for h in hs.iter() {
                            let k = put(&mut buf, h.key.as_bytes());
                            let v = h.value.map(|v| put(&mut buf, v));
                            headers.push((k, v));
                        }
                    }
                    pending.push(Pending {
                        partition: m.partition(),
                        offset: m.offset(),
                        timestamp: m.timestamp().to_millis().unwrap_or(-1),
                        key,
                        payload,
                        headers,
                    });
                }
                Some(Err(e)) => match classify(e) {
                    Some(fatal) => {
                        self.deferred = Some(fatal);
                        break;
                    }
                    None => continue,
                },
                // None is also "an event other than a message was served"
                // (statistics, logs): look twice more before calling the
                // queue empty.
                None => {
                    misses += 1;
                    if misses > 2 {
                        break;
                    }
                }
            }
        }
        let buf = buf.freeze();
        let slice = |r: (usize, usize)| buf.slice(r.0..r.1);
        pending
            .into_iter()
            .map(|p| KafkaMessage {
                payload: p.payload.map(slice),
                key: p.key.map(slice),
                headers: p
                    .headers
                    .into_iter()
                    .map(|(k, v)| Header {
                        key: slice(k),
                        value: v.map(slice),
                    })
                    .collect(),
                offset: p.offset,
                partition: p.partition,
                timestamp: p.timestamp,
            })
            .collect()
    }
}

/// A consumer error that ends the poll (`Some`), or one librdkafka
/// recovers from itself (`None`: logged).
fn classify(e: KafkaError) -> Option<ConnectorError> {
    use RDKafkaErrorCode::*;
    let code = e.rdkafka_error_code();
    let fatal = matches!(
        code,
        Some(
            AutoOffsetReset
                | OffsetOutOfRange
                | TopicAuthorizationFailed
                | GroupAuthorizationFailed
                | ClusterAuthorizationFailed
                | SaslAuthenticationFailed
                | Authentication
                | Fatal
        )
    );
    if fatal {
        Some(rd_err("consuming", e))
    } else {
        tracing::warn!(error = %e, "librdkafka consumer error (retried by librdkafka)");
        None
    }
}

impl ConsumerBackend for RdkafkaConsumer {
    async fn connect(&mut self) -> Result<()> {
        if self.consumer.is_none() {
            let mut consumer: BaseConsumer = self.config.create().map_err(|e| rd_err("creating the consumer", e))?;
            let ready = self.ready.clone();
            consumer.set_nonempty_callback(move || ready.notify_one());
            self.consumer = Some(Arc::new(consumer));
        }
        Ok(())
    }

    async fn partition_count(&mut self, topic: &str) -> Result<i32> {
        let consumer = self.consumer()?;
        let deadline = Instant::now() + self.metadata_max_wait;
        let timeout = self.request_timeout;
        loop {
            let (c, t) = (consumer.clone(), topic.to_owned());
            let md = blocking("fetching metadata", move || {
                let md = c.fetch_metadata(Some(&t), timeout)?;
                Ok(md
                    .topics()
                    .iter()
                    .find(|m| m.name() == t)
                    .map(|m| (m.error(), m.partitions().len())))
            })
            .await?;
            match md {
                Some((None, n)) if n > 0 => return Ok(n as i32),
                // Unknown (or not led yet): wait for it, bounded, as the native client does.
                found if Instant::now() < deadline => {
                    tracing::debug!(topic, ?found, "topic not in metadata yet; waiting");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                found => {
                    return Err(ConnectorError::Rdkafka {
                        operation: format!("partition count of {topic:?}"),
                        message: format!("not in metadata after {:?}: {found:?}", self.metadata_max_wait),
                    })
                }
            }
        }
    }

    async fn watermark(&mut self, topic: &str, partition: i32, which: Watermark) -> Result<i64> {
        let consumer = self.consumer()?;
        let (t, timeout) = (topic.to_owned(), self.request_timeout);
        let (low, high) = blocking_retried("fetching watermarks", self.metadata_max_wait, move || {
            consumer.fetch_watermarks(&t, partition, timeout)
        })
        .await?;
        Ok(match which {
            Watermark::Low => low,
            Watermark::High => high,
        })
    }

    async fn committed(
        &mut self,
        group_id: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Option<i64>>> {
        let consumer = self.consumer()?;
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition(topic, *p);
        }
        let timeout = self.request_timeout;
        // One lookup (the source bounds the retries).
        let lookup = if group_id == self.group_id {
            blocking("fetching committed offsets", move || {
                consumer.committed_offsets(tpl, timeout)
            })
            .await?
        } else {
            // Another group: a short-lived consumer of that group.
            let mut config = self.config.clone();
            config.set("group.id", group_id);
            blocking("fetching committed offsets", move || {
                let other: BaseConsumer = config.create()?;
                other.committed_offsets(tpl, timeout)
            })
            .await?
        };
        Ok(partitions
            .iter()
            .map(|p| {
                let offset = match lookup.find_partition(topic, *p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) if o >= 0 => Some(o),
                    _ => None,
                };
                (*p, offset)
            })
            .collect())
    }

    async fn assign(&mut self, topic: &str, partitions: &[(i32, i64)]) -> Result<()> {
        let consumer = self.consumer()?;
        let mut tpl = TopicPartitionList::new();
        for (p, o) in partitions {
            tpl.add_partition_offset(topic, *p, Offset::Offset(*o))
                .map_err(|e| rd_err("assigning", e))?;
        }
        consumer.assign(&tpl).map_err(|e| rd_err("assigning", e))
    }

    /// Cancel safe: records leave librdkafka only inside one synchronous
    /// step that returns them; the waits in between take nothing.
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<KafkaMessage>> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let consumer = self.consumer()?;
        let deadline = Instant::now() + timeout;
        loop {
            let records = self.drain(&consumer);
            if !records.is_empty() {
                return Ok(records);
            }
            if let Some(e) = self.deferred.take() {
                return Err(e);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(records);
            }
            // The callback fires on empty → non-empty; the cap covers a
            // queue that stayed non-empty behind a non-message event.
            let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), self.ready.notified()).await;
        }
    }

    async fn close(&mut self) -> Result<()> {
        if let Some(consumer) = self.consumer.take() {
            // Dropping the last reference closes the consumer, which blocks.
            tokio::task::spawn_blocking(move || drop(consumer))
                .await
                .map_err(|e| join_err("closing the consumer", e))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Producers.

/// The producer properties `options` describe (the native defaults and
/// meanings: acks, idempotence, compression, linger, batch and buffer
/// bounds, timeouts).
fn producer_config(options: &SinkOptions) -> Result<RdConfig> {
    let mut c = base_config(
        &options.brokers,
        &options.client_id,
        &options.security,
        &options.client,
        &options.rdkafka_properties,
    )?;
    let pc = options.producer_config()?;
    c.set(
        "acks",
        match pc.acks {
            Acks::All => "all",
            Acks::Leader => "1",
            Acks::None => "0",
        },
    );
    c.set("enable.idempotence", pc.idempotent.to_string());
    let codec = match pc.compression {
        Compression::None => "none",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        other => {
            return Err(ConnectorError::UnsupportedProperty {
                property: "compression".into(),
                reason: format!(
                    "{other:?} on backend 'rdkafka': this build's librdkafka has no {} (the rdkafka crate's `{}` \
                     feature is not enabled); use none, snappy or lz4, or backend = 'native'",
                    if other == Compression::Gzip { "zlib" } else { "zstd" },
                    if other == Compression::Gzip { "libz" } else { "zstd" },
                ),
            })
        }
    };
    c.set("compression.codec", codec);
    c.set("linger.ms", ms(pc.linger));
    c.set("batch.size", pc.batch_size.min(i32::MAX as usize).to_string());
    c.set(
        "queue.buffering.max.kbytes",
        (pc.buffer_memory / 1024).clamp(1, i32::MAX as usize).to_string(),
    );
    c.set("message.max.bytes", pc.max_record_size.max(1000).to_string());
    c.set("message.timeout.ms", ms(pc.delivery_timeout));
    c.set("request.timeout.ms", ms(pc.ack_timeout));
    Ok(c)
}

/// [`ProducerBackend`] over librdkafka's `FutureProducer`.
pub struct RdkafkaProducer<C: ClientContext + 'static = rdkafka::client::DefaultClientContext> {
    config: RdConfig,
    producer: Option<FutureProducer<C>>,
    partitions: PartitionCounts,
}

impl<C: ClientContext + 'static> std::fmt::Debug for RdkafkaProducer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdkafkaProducer")
            .field("connected", &self.producer.is_some())
            .finish_non_exhaustive()
    }
}

impl RdkafkaProducer {
    /// The producer `options` describe; refuses what this build's
    /// librdkafka cannot do, before any I/O.
    pub fn new(options: &SinkOptions) -> Result<Self> {
        let config = producer_config(options)?;
        validate(&config)?;
        Ok(RdkafkaProducer {
            config,
            producer: None,
            partitions: PartitionCounts::default(),
        })
    }
}

impl<C: ClientContext + 'static> RdkafkaProducer<C> {
    fn producer(&self) -> Result<&FutureProducer<C>> {
        self.producer.as_ref().ok_or(ConnectorError::CallOrder {
            call: "rdkafka producer backend",
            problem: "before connect",
        })
    }
}

/// A librdkafka delivery, as a [`DeliveryOutcome`].
pub struct RdkafkaDelivery(rdkafka::producer::DeliveryFuture);

impl Future for RdkafkaDelivery {
    type Output = DeliveryOutcome;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<DeliveryOutcome> {
        std::pin::Pin::new(&mut self.0).poll(cx).map(|r| match r {
            Ok(Ok(d)) => Ok((d.partition, d.offset)),
            Ok(Err((e, _))) => Err(rd_err("delivery", e)),
            Err(_) => Err(ConnectorError::Rdkafka {
                operation: "delivery".into(),
                message: "the producer was dropped before the delivery report".into(),
            }),
        })
    }
}

/// Partition counts of the topics produced to with an explicit partition.
#[derive(Default)]
struct PartitionCounts(Mutex<BTreeMap<String, i32>>);

/// An explicit partition must exist, as the native producer checks against
/// its metadata (librdkafka would queue the record until it times out).
async fn check_partition<C: ClientContext + 'static>(
    producer: &FutureProducer<C>,
    counts: &PartitionCounts,
    topic: &str,
    partition: i32,
    bound: Duration,
) -> Result<()> {
    let cached = counts.0.lock().unwrap_or_else(|p| p.into_inner()).get(topic).copied();
    if partition >= 0 && cached.is_some_and(|n| partition < n) {
        return Ok(());
    }
    let (p, t) = (producer.clone(), topic.to_owned());
    let n = blocking_retried("fetching metadata", bound, move || {
        let md = p.client().fetch_metadata(Some(&t), bound)?;
        match md.topics().iter().find(|m| m.name() == t) {
            Some(m) if m.error().is_none() => Ok(m.partitions().len() as i32),
            Some(m) => Err(KafkaError::MetadataFetch(
                m.error()
                    .map(RDKafkaErrorCode::from)
                    .unwrap_or(RDKafkaErrorCode::UnknownTopicOrPartition),
            )),
            None => Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)),
        }
    })
    .await?;
    counts
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(topic.to_owned(), n);
    if partition < 0 || partition >= n {
        return Err(ConnectorError::Rdkafka {
            operation: format!("producing to {topic:?}"),
            message: format!("partition {partition} does not exist ({topic:?} has {n} partitions)"),
        });
    }
    Ok(())
}

/// Queues one record; waits (asynchronously) while librdkafka's queue is
/// full. The caller bounds the wait (`produce_timeout`).
async fn send_record<C: ClientContext + 'static>(
    producer: &FutureProducer<C>,
    counts: &PartitionCounts,
    topic: &str,
    partition: Option<i32>,
    message: KafkaMessage,
) -> Result<RdkafkaDelivery> {
    if let Some(p) = partition {
        check_partition(producer, counts, topic, p, Duration::from_secs(30)).await?;
    }
    let mut headers = OwnedHeaders::new_with_capacity(message.headers.len());
    for h in &message.headers {
        headers = headers.insert(rdkafka::message::Header {
            key: &String::from_utf8_lossy(&h.key),
            value: h.value.as_deref(),
        });
    }
    let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic);
    if let Some(k) = message.key.as_deref() {
        record = record.key(k);
    }
    if let Some(p) = message.payload.as_deref() {
        record = record.payload(p);
    }
    if let Some(p) = partition {
        record = record.partition(p);
    }
    if message.timestamp >= 0 {
        record = record.timestamp(message.timestamp);
    }
    if !message.headers.is_empty() {
        record = record.headers(headers);
    }
    loop {
        match producer.send_result(record) {
            Ok(delivery) => return Ok(RdkafkaDelivery(delivery)),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err((e, _)) => return Err(rd_err(format!("producing to {topic:?}"), e)),
        }
    }
}

impl<C: ClientContext + Default + 'static> ProducerBackend for RdkafkaProducer<C> {
    type Delivery = RdkafkaDelivery;

    async fn connect(&mut self) -> Result<()> {
        if self.producer.is_none() {
            let p = self
                .config
                .create_with_context(C::default())
                .map_err(|e| rd_err("creating the producer", e))?;
            self.producer = Some(p);
        }
        Ok(())
    }

    /// Cancel safe only between records: a dropped future may have queued
    /// its record (whose delivery is then not observed).
    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<RdkafkaDelivery> {
        send_record(self.producer()?, &self.partitions, topic, partition, message).await
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        let p = self.producer()?.clone();
        blocking("flushing", move || p.flush(timeout)).await
    }

    async fn close(&mut self, timeout: Duration) -> Result<()> {
        if let Some(p) = self.producer.take() {
            blocking("closing the producer", move || {
                let r = p.flush(timeout);
                drop(p);
                r
            })
            .await?;
        }
        Ok(())
    }
}

/// What librdkafka's statistics said about the producer identity.
#[derive(Default)]
struct IdentityCell {
    /// (producer id, epoch) once `eos.idemp_state` is `Assigned`.
    identity: Mutex<Option<(i64, i16)>>,
    ticks: AtomicU64,
    tick: Notify,
}

/// The transactional producer's context: reads the identity out of each
/// statistics tick (the only place librdkafka exposes it).
#[derive(Clone, Default)]
pub struct IdentityContext {
    cell: Arc<IdentityCell>,
}

impl ClientContext for IdentityContext {
    fn stats_raw(&self, statistics: &[u8]) {
        let parsed: Option<(i64, i16, bool)> =
            serde_json::from_slice::<serde_json::Value>(statistics)
                .ok()
                .and_then(|v| {
                    let eos = v.get("eos")?;
                    Some((
                        eos.get("producer_id")?.as_i64()?,
                        i16::try_from(eos.get("producer_epoch")?.as_i64()?).ok()?,
                        eos.get("idemp_state")?.as_str()? == "Assigned",
                    ))
                });
        let identity = match parsed {
            Some((pid, epoch, true)) if pid >= 0 && epoch >= 0 => Some((pid, epoch)),
            _ => None,
        };
        *self.cell.identity.lock().unwrap_or_else(|p| p.into_inner()) = identity;
        self.cell.ticks.fetch_add(1, Ordering::AcqRel);
        self.cell.tick.notify_waiters();
    }
}

/// How often librdkafka emits statistics for the transactional producer.
const STATISTICS_INTERVAL: Duration = Duration::from_millis(100);
/// The bound on waiting for a statistics tick with an identity.
const IDENTITY_WAIT: Duration = Duration::from_secs(5);

/// [`TransactionalProducerBackend`] over librdkafka (`transactional.id`).
pub struct RdkafkaTransactionalProducer {
    options_config: RdConfig,
    inner: RdkafkaProducer<IdentityContext>,
    context: IdentityContext,
    transactional_id: Option<String>,
    /// False between an abort and the next fresh statistics tick.
    identity_fresh: bool,
}

impl std::fmt::Debug for RdkafkaTransactionalProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdkafkaTransactionalProducer")
            .field("identity", &self.identity())
            .finish_non_exhaustive()
    }
}

impl RdkafkaTransactionalProducer {
    /// The transactional producer `options` describe (the sink's; the
    /// transactional id and timeout come at `init_transactions`).
    pub fn new(options: &SinkOptions) -> Result<Self> {
        let mut config = producer_config(options)?;
        config.set("enable.idempotence", "true");
        config.set("acks", "all");
        config.set("statistics.interval.ms", ms(STATISTICS_INTERVAL));
        config.set("transactional.id", "clink-validate");
        validate(&config)?;
        Ok(RdkafkaTransactionalProducer {
            options_config: config.clone(),
            inner: RdkafkaProducer {
                config,
                producer: None,
                partitions: PartitionCounts::default(),
            },
            context: IdentityContext::default(),
            transactional_id: None,
            identity_fresh: false,
        })
    }

    fn producer(&self) -> Result<FutureProducer<IdentityContext>> {
        self.inner.producer.clone().ok_or(ConnectorError::CallOrder {
            call: "rdkafka transactional producer backend",
            problem: "before init_transactions",
        })
    }

    /// Waits (bounded) for a statistics tick later than `after` that
    /// carries an assigned identity.
    async fn fresh_identity(&self, after: u64) -> Result<(i64, i16)> {
        let cell = &self.context.cell;
        let deadline = Instant::now() + IDENTITY_WAIT;
        loop {
            let notified = cell.tick.notified();
            if cell.ticks.load(Ordering::Acquire) > after {
                if let Some(id) = *cell.identity.lock().unwrap_or_else(|p| p.into_inner()) {
                    return Ok(id);
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ConnectorError::Rdkafka {
                    operation: "capturing the producer identity".into(),
                    message: format!(
                        "no statistics tick with an assigned producer id and epoch within {IDENTITY_WAIT:?} \
                         (statistics.interval.ms = {}); refusing to run without a resume handle",
                        STATISTICS_INTERVAL.as_millis()
                    ),
                });
            }
            let _ = tokio::time::timeout(left.min(STATISTICS_INTERVAL), notified).await;
        }
    }
}

impl ProducerBackend for RdkafkaTransactionalProducer {
    type Delivery = RdkafkaDelivery;

    /// Nothing to do: the producer exists from `init_transactions` on.
    async fn connect(&mut self) -> Result<()> {
        Ok(())
    }

    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<RdkafkaDelivery> {
        send_record(
            self.inner.producer()?,
            &self.inner.partitions,
            topic,
            partition,
            message,
        )
        .await
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        self.inner.flush(timeout).await
    }

    /// Aborts an open transaction (the open tail) by closing: librdkafka
    /// aborts what is open when the producer is destroyed.
    async fn close(&mut self, timeout: Duration) -> Result<()> {
        if let Some(p) = self.inner.producer.take() {
            tokio::task::spawn_blocking(move || drop(p))
                .await
                .map_err(|e| join_err("closing the transactional producer", e))?;
        }
        let _ = timeout;
        self.identity_fresh = false;
        Ok(())
    }
}

impl TransactionalProducerBackend for RdkafkaTransactionalProducer {
    async fn init_transactions(
        &mut self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<ResumeHandle> {
        let mut config = self.options_config.clone();
        config.set("transactional.id", transactional_id);
        config.set("transaction.timeout.ms", ms(transaction_timeout));
        // librdkafka refuses a record that could outlive its transaction.
        let delivery = config
            .get("message.timeout.ms")
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(transaction_timeout);
        config.set("message.timeout.ms", ms(delivery.min(transaction_timeout)));
        let producer: FutureProducer<IdentityContext> = config
            .create_with_context(self.context.clone())
            .map_err(|e| rd_err("creating the transactional producer", e))?;
        let p = producer.clone();
        let timeout = transaction_timeout;
        blocking("init_transactions", move || p.init_transactions(timeout)).await?;
        let after = self.context.cell.ticks.load(Ordering::Acquire);
        self.inner.producer = Some(producer);
        self.transactional_id = Some(transactional_id.to_owned());
        self.fresh_identity(after).await?;
        self.identity_fresh = true;
        self.identity().ok_or(ConnectorError::CallOrder {
            call: "identity",
            problem: "without a captured producer identity",
        })
    }

    fn begin_transaction(&mut self) -> Result<()> {
        if !self.identity_fresh {
            return Err(ConnectorError::Rdkafka {
                operation: "begin_transaction".into(),
                message: "the producer identity is not known (no statistics tick since the last abort); refusing \
                          a transaction whose resume handle would be stale"
                    .into(),
            });
        }
        self.producer()?
            .begin_transaction()
            .map_err(|e| rd_err("begin_transaction", e))
    }

    async fn commit_transaction(&mut self, timeout: Duration) -> Result<()> {
        let p = self.producer()?;
        blocking("commit_transaction", move || p.commit_transaction(timeout)).await
    }

    /// Waits for a fresh statistics tick afterwards: librdkafka bumps the
    /// epoch while recovering from an abortable error.
    async fn abort_transaction(&mut self, timeout: Duration) -> Result<()> {
        let p = self.producer()?;
        self.identity_fresh = false;
        blocking("abort_transaction", move || p.abort_transaction(timeout)).await?;
        let after = self.context.cell.ticks.load(Ordering::Acquire);
        self.fresh_identity(after).await?;
        self.identity_fresh = true;
        Ok(())
    }

    /// From the last statistics tick; `None` before `init_transactions`.
    fn identity(&self) -> Option<ResumeHandle> {
        let id = self.transactional_id.as_ref()?;
        let (pid, epoch) = (*self.context.cell.identity.lock().unwrap_or_else(|p| p.into_inner()))?;
        Some(ResumeHandle {
            transactional_id: id.clone(),
            producer_id: pid,
            producer_epoch: epoch,
            transaction_version: TransactionVersion::V1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_comes_from_the_statistics_json() {
        let ctx = IdentityContext::default();
        ctx.stats_raw(br#"{"eos":{"idemp_state":"WaitPID","producer_id":-1,"producer_epoch":-1}}"#);
        assert_eq!(*ctx.cell.identity.lock().unwrap(), None);
        ctx.stats_raw(br#"{"eos":{"idemp_state":"Assigned","producer_id":4001,"producer_epoch":3}}"#);
        assert_eq!(*ctx.cell.identity.lock().unwrap(), Some((4001, 3)));
        ctx.stats_raw(b"not json");
        assert_eq!(
            *ctx.cell.identity.lock().unwrap(),
            None,
            "an unreadable tick forgets the identity"
        );
        assert_eq!(ctx.cell.ticks.load(Ordering::Acquire), 3);
    }

    #[tokio::test]
    async fn init_without_a_statistics_identity_is_refused_loudly() {
        // A closed port: init_transactions cannot succeed, and the error
        // names the call (never an empty handle).
        let o = super::super::options::parse_two_phase_commit(
            &[
                ("brokers", "127.0.0.1:1"),
                ("topic", "t"),
                ("transactional_id", "tx"),
                ("backend", "rdkafka"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            0,
            1,
        )
        .unwrap();
        let mut p = RdkafkaTransactionalProducer::new(&o.sink).unwrap();
        assert!(p.identity().is_none());
        let e = p
            .init_transactions("tx", Duration::from_millis(1500))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("init_transactions"), "{e}");
        assert!(p.identity().is_none());
    }
}
