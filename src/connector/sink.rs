//! [`KafkaSink`]: the at-least-once sink (`kafka_message_sink`, and through
//! [`TextKafkaSink`] `kafka_text_sink` / `kafka_sink_string`).
//!
//! Records are handed to the producer as they come; every acknowledgement
//! moves `delivered`, every failure after the producer's retries moves
//! `delivery_errors`. A barrier flushes and waits for every outstanding
//! acknowledgement, and fails if any delivery since the last flush failed,
//! so a completed checkpoint never covers a lost record. There is no
//! rollback: a failure after a partial flush can leave records on the
//! topic, and a replay duplicates them (at least once).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

use super::backend::{NativeProducer, ProducerBackend};
use super::error::{ConnectorError, Result};
use super::format::ValueEncoder;
use super::options::SinkOptions;
use super::record::{KafkaMessage, Text};
use super::{Batch, BoxFuture, Sink, SinkCapabilities, StateRow};

/// A sink's counters.
#[derive(Debug, Default)]
pub struct SinkCounters {
    sent: AtomicU64,
    delivered: AtomicU64,
    delivery_errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl SinkCounters {
    /// Records handed to the producer.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
    /// Records the broker acknowledged.
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }
    /// Records that failed after the producer's retries (or could not be queued).
    pub fn delivery_errors(&self) -> u64 {
        self.delivery_errors.load(Ordering::Relaxed)
    }

    fn fail(&self, error: &ConnectorError) {
        self.delivery_errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| error.to_string());
    }

    fn take_first_error(&self) -> Option<String> {
        self.first_error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The at-least-once Kafka sink.
pub struct KafkaSink<B: ProducerBackend = NativeProducer> {
    options: SinkOptions,
    backend: B,
    opened: bool,
    counters: Arc<SinkCounters>,
    /// `delivered` / `delivery_errors` as series (`crate::metrics`).
    series: crate::metrics::ConnectorSeries,
    /// One task per `on_data` batch, awaiting its acknowledgements.
    watchers: Vec<JoinHandle<()>>,
    /// `delivery_errors` when the last flush reported.
    errors_reported: u64,
}

impl<B: ProducerBackend> fmt::Debug for KafkaSink<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSink")
            .field("topic", &self.options.topic)
            .field("opened", &self.opened)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl KafkaSink<NativeProducer> {
    /// A sink over the native client; refuses what the native client cannot
    /// honour (TLS, for now) here, before any I/O.
    pub fn new(options: SinkOptions) -> Result<Self> {
        let backend = NativeProducer::new(options.client_config()?, options.producer_config()?);
        Ok(KafkaSink::with_backend(options, backend))
    }
}

impl<B: ProducerBackend> KafkaSink<B> {
    /// A sink writing through `backend` (any [`ProducerBackend`]); nothing connects before `open`.
    pub fn with_backend(options: SinkOptions, backend: B) -> Self {
        let series = crate::metrics::ConnectorSeries::sink(
            options.metric_prefix.as_deref(),
            &options.topic,
            options.subtask_index,
        );
        KafkaSink {
            series,
            options,
            backend,
            opened: false,
            counters: Arc::default(),
            watchers: Vec::new(),
            errors_reported: 0,
        }
    }

    /// The options the sink was built from.
    pub fn options(&self) -> &SinkOptions {
        &self.options
    }

    /// The sink's counters (sent, delivered, delivery errors), shared: they stay readable after the sink is gone.
    pub fn counters(&self) -> Arc<SinkCounters> {
        self.counters.clone()
    }

    /// Connects the producer ([`Sink::open`]); a second call does nothing.
    ///
    /// Cancel safety: a dropped call leaves the sink unopened, and a later call connects again.
    pub async fn open_sink(&mut self) -> Result<()> {
        if !self.opened {
            self.backend.connect().await?;
            self.opened = true;
        }
        Ok(())
    }

    /// Hands `batch` to the producer. A record that cannot even be queued
    /// (too large, no such partition, `produce_timeout` passed) fails the
    /// call.
    pub async fn send_batch(&mut self, batch: Batch<KafkaMessage>) -> Result<()> {
        if !self.opened {
            return Err(ConnectorError::CallOrder {
                call: "on_data",
                problem: "before open",
            });
        }
        self.watchers.retain(|w| !w.is_finished());
        let mut deliveries = Vec::with_capacity(batch.len());
        let mut failure = None;
        for message in batch {
            let sent = tokio::time::timeout(
                self.options.produce_timeout,
                self.backend
                    .send(&self.options.topic, self.options.fixed_partition, message),
            )
            .await;
            match sent {
                Ok(Ok(d)) => deliveries.push(d),
                Ok(Err(e)) => {
                    failure = Some(e);
                    break;
                }
                Err(_) => {
                    failure = Some(ConnectorError::Client(crate::error::Error::Timeout {
                        operation: format!("produce to {:?} (produce_timeout)", self.options.topic),
                        timeout: self.options.produce_timeout,
                    }));
                    break;
                }
            }
        }
        self.counters.sent.fetch_add(deliveries.len() as u64, Ordering::Relaxed);
        if !deliveries.is_empty() {
            let counters = self.counters.clone();
            let series = self.series.clone();
            self.watchers.push(tokio::spawn(async move {
                let mut ok = 0u64;
                for d in deliveries {
                    match d.await {
                        Ok(_) => ok += 1,
                        Err(e) => {
                            counters.fail(&e);
                            series.errors.increment(1);
                        }
                    }
                }
                counters.delivered.fetch_add(ok, Ordering::Relaxed);
                series.ok.increment(ok);
            }));
        }
        match failure {
            Some(e) => {
                // Counted, and reported right here: not again at the next flush.
                self.counters.delivery_errors.fetch_add(1, Ordering::Relaxed);
                self.series.errors.increment(1);
                self.errors_reported += 1;
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Flushes the producer and waits for every acknowledgement; fails if a
    /// delivery failed since the last flush.
    pub async fn flush_sink(&mut self) -> Result<()> {
        if !self.opened {
            return Ok(());
        }
        let timeout = self.options.flush_timeout;
        // A producer that could not flush will not acknowledge soon either.
        // Its timeout names the option that bounds it.
        self.backend
            .flush(timeout)
            .await
            .map_err(|e| timeout_named(e, "flush_timeout"))?;
        let watchers = std::mem::take(&mut self.watchers);
        let wait = async {
            for w in watchers {
                let _ = w.await;
            }
        };
        if tokio::time::timeout(timeout, wait).await.is_err() {
            return Err(ConnectorError::Client(crate::error::Error::Timeout {
                operation: format!(
                    "waiting for acknowledgements from {:?} (flush_timeout)",
                    self.options.topic
                ),
                timeout,
            }));
        }
        let errors = self.counters.delivery_errors();
        if errors > self.errors_reported {
            let failed = errors - self.errors_reported;
            self.errors_reported = errors;
            return Err(ConnectorError::DeliveryFailed {
                topic: self.options.topic.clone(),
                failed,
                first: self.counters.take_first_error().unwrap_or_default(),
            });
        }
        Ok(())
    }

    /// Flushes within `flush_timeout` and closes the producer ([`Sink::close`]); the first error is returned, after the close ran.
    pub async fn close_sink(&mut self) -> Result<()> {
        if !self.opened {
            return Ok(());
        }
        let flushed = self.flush_sink().await;
        self.opened = false;
        let closed = self.backend.close(self.options.flush_timeout).await;
        flushed.and(closed)
    }
}

impl<B: ProducerBackend> Sink for KafkaSink<B> {
    type Item = KafkaMessage;

    fn capabilities(&self) -> SinkCapabilities {
        SinkCapabilities::AT_LEAST_ONCE
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.open_sink())
    }

    fn on_data(&mut self, batch: Batch<KafkaMessage>) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.send_batch(batch))
    }

    fn flush(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.flush_sink())
    }

    fn on_barrier(&mut self, _checkpoint_id: u64) -> BoxFuture<'_, Result<Vec<StateRow>>> {
        Box::pin(async move {
            self.flush_sink().await?;
            Ok(Vec::new())
        })
    }

    fn on_commit(&mut self, _checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn on_abort(&mut self, _checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.close_sink())
    }
}

/// The string channel over [`KafkaSink`]: each text is a record's value.
/// With `format = avro|…` each text is a JSON row, encoded and framed with
/// the subject's schema id (resolved at `open`); a row that does not fit
/// is refused, logged and counted ([`Self::refused_rows`]).
pub struct TextKafkaSink<B: ProducerBackend = NativeProducer> {
    inner: KafkaSink<B>,
    encoder: Option<ValueEncoder>,
}

/// Makes (once) and prepares the encoder a string sink's options ask for.
pub(crate) async fn open_encoder(encoder: &mut Option<ValueEncoder>, options: &SinkOptions) -> Result<()> {
    if encoder.is_none() {
        if let Some(f) = &options.value_format {
            *encoder = Some(ValueEncoder::new(f, &options.topic)?);
        }
    }
    match encoder {
        Some(e) => e.prepare().await,
        None => Ok(()),
    }
}

impl<B: ProducerBackend> fmt::Debug for TextKafkaSink<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TextKafkaSink").field(&self.inner).finish()
    }
}

impl<B: ProducerBackend> TextKafkaSink<B> {
    /// The string channel over `inner`: text values are encoded (with `format`, framed by the registry) and written through it.
    pub fn new(inner: KafkaSink<B>) -> Self {
        TextKafkaSink { inner, encoder: None }
    }

    /// The sink underneath.
    pub fn inner(&self) -> &KafkaSink<B> {
        &self.inner
    }

    /// Rows refused because they do not fit the registry schema.
    pub fn refused_rows(&self) -> u64 {
        self.encoder.as_ref().map_or(0, ValueEncoder::refused)
    }

    /// The registry encoder, once opened with a registry format.
    pub fn encoder(&self) -> Option<&ValueEncoder> {
        self.encoder.as_ref()
    }

    async fn open_text(&mut self) -> Result<()> {
        open_encoder(&mut self.encoder, &self.inner.options).await?;
        self.inner.open_sink().await
    }

    async fn send_texts(&mut self, batch: Batch<Text>) -> Result<()> {
        let mut batch: Vec<KafkaMessage> = batch.into_iter().map(|t| KafkaMessage::new(t.into_bytes())).collect();
        if let Some(e) = &self.encoder {
            e.encode_messages(&self.inner.options.topic, &mut batch);
        }
        self.inner.send_batch(batch).await
    }
}

impl<B: ProducerBackend> Sink for TextKafkaSink<B> {
    type Item = Text;

    fn capabilities(&self) -> SinkCapabilities {
        self.inner.capabilities()
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.open_text())
    }

    fn on_data(&mut self, batch: Batch<Text>) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.send_texts(batch))
    }

    fn flush(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.flush()
    }

    fn on_barrier(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<Vec<StateRow>>> {
        self.inner.on_barrier(checkpoint_id)
    }

    fn on_commit(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        self.inner.on_commit(checkpoint_id)
    }

    fn on_abort(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        self.inner.on_abort(checkpoint_id)
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.close()
    }
}

/// A client timeout, with the option that set its bound named.
pub(crate) fn timeout_named(e: ConnectorError, option: &str) -> ConnectorError {
    match e {
        ConnectorError::Client(crate::error::Error::Timeout { operation, timeout }) => {
            ConnectorError::Client(crate::error::Error::Timeout {
                operation: format!("{operation} ({option})"),
                timeout,
            })
        }
        // librdkafka's "Local: Timed out" (the rdkafka backend).
        ConnectorError::Rdkafka { operation, message } if message.to_ascii_lowercase().contains("timed out") => {
            ConnectorError::Rdkafka {
                operation: format!("{operation} ({option})"),
                message,
            }
        }
        other => other,
    }
}
