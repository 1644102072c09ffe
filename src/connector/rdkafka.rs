//! The `rdkafka` backend (cargo feature `rdkafka`): the backend traits
//! of `super::backend` over librdkafka, through the `rdkafka` crate. The
//! source and sinks run unchanged on it; `backend = 'rdkafka'` picks it.
//!
//! - [`RdkafkaConsumer`]: a `BaseConsumer` with manual assignment at
//!   concrete offsets (the source resolves them first), never subscribing,
//!   never committing; `auto.offset.reset = error`, so an out-of-range start
//!   is an error as on the native client; the isolation level passed
//!   through. A poll drains what librdkafka has queued without blocking the
//!   runtime, in batches (`rd_kafka_consume_batch_queue`, through the
//!   crate's raw bindings: the crate's `poll` serves one message per
//!   call), bounded by `max.poll.records` and the poll byte bound as
//!   natively; librdkafka's queue-nonempty callback wakes a `Notify`.
//!   librdkafka's prefetch is bounded like the native consumer's memory
//!   (`queued.max.messages.kbytes` = `fetch.max.bytes`).
//! - [`RdkafkaProducer`]: a `ThreadedProducer` (idempotent with `acks=all`
//!   by default, as natively), at least once. A record's delivery opaque is
//!   a sequence number; the delivery callback writes the outcome into one
//!   ring that the record's [`RdkafkaDelivery`] reads (no channel, box or
//!   future allocation per record, unlike the crate's `FutureProducer`).
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
//! Copies: a consumed record's key, value and headers live in librdkafka's
//! fetch buffer, which its message keeps alive until destroyed, so each
//! chunk of a poll is copied once into ONE buffer and handed out as `Bytes`
//! slices of it (one allocation per chunk of up to 256 records, not per
//! record; see `RdkafkaConsumer::drain` for why not zero-copy); a produced
//! record is copied by librdkafka into its queue (`RD_KAFKA_MSG_F_COPY`:
//! the caller's `Bytes` may be dropped as soon as `send` returns).
//!
//! This build's librdkafka is the bundled one linked against the system's
//! OpenSSL (TLS, mTLS, SASL SCRAM), zlib (gzip) and zstd; LZ4, Snappy and
//! SASL PLAIN are built in. No libsasl2 (no GSSAPI) and no curl. The typed
//! security settings map onto librdkafka properties in
//! [`SecurityConfig::librdkafka_properties`]; a verbatim `kafka.<property>`
//! that could weaken them is refused when the operator is built
//! ([`super::security::librdkafka_passthrough_refusal`]).

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig as RdConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use tokio::sync::Notify;

use super::backend::{
    ConsumerBackend, DeliveryOutcome, GroupBatch, GroupConsumerBackend, GroupMetadataHandle, GroupRecord,
    ProducerBackend, TransactionalProducerBackend, Watermark,
};
use super::error::{ConnectorError, Result};
use super::options::{ClientTuning, Passthrough, SinkOptions, SourceOptions};
use super::record::{Header, KafkaMessage};
use super::security::SecurityConfig;
use crate::client::{
    Acks, Assignor, ConsumerConfig, GroupConsumerConfig, GroupProtocol, IsolationLevel, PartitionOffset,
    RebalanceEvent, ResumeHandle, Subscription, TopicPartition, TopicPartitionOffset, TransactionVersion,
};
use clink_kafka_wire::compression::Compression;

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
    // TCP_NODELAY, as the native client sets on every connection (and Go,
    // so franz-go): librdkafka leaves Nagle's algorithm on by default, and a
    // small Produce or Fetch written while an earlier one is unacknowledged
    // then waits for the broker's delayed ACK (40-200 ms on Linux): the
    // backend's end-to-end p99 was 118-239 ms at 1k and 10k records/s, its
    // p50 2.6 ms. A verbatim `kafka.socket.nagle.disable` still overrides it.
    c.set("socket.nagle.disable", "true");
    // The typed security settings (checked when the options were parsed),
    // as librdkafka properties; see `SecurityConfig::librdkafka_properties`.
    for (property, value) in security.librdkafka_properties()?.0 {
        c.set(property, value);
    }
    if security.tls.as_ref().is_some_and(|t| t.insecure_skip_verify) && security.protocol.uses_tls() {
        tracing::warn!(
            "TLS certificate verification is OFF (enable_ssl_certificate_verification=false) on backend \
             'rdkafka': connections are encrypted but the broker is not authenticated; anyone on the path can \
             impersonate it"
        );
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
        if let Some(reason) = super::security::librdkafka_passthrough_refusal(k) {
            return Err(ConnectorError::UnsupportedProperty {
                property: format!("kafka.{k}"),
                reason,
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

/// The last authentication or TLS failure librdkafka reported for one
/// client. librdkafka retries such a broker connection forever, and a
/// lookup waiting on it would end only at its timeout with "broker
/// transport failure"; with this, the lookup ends at once and the error
/// names the cause (librdkafka's reason names the broker and the mechanism
/// or the certificate check, never a credential).
///
/// Reported two ways: the error callback (served only when the client is
/// polled, which a consumer is not during its start-up lookups) and the
/// `FAIL` log line (called from librdkafka's broker thread at once). Only
/// messages about a certificate or authentication count, not a
/// disconnect. A failure counts for a call if reported after the client's
/// last successful lookup and at most a minute before the call began
/// (librdkafka repeats an identical failure at most every 30 s), so one a
/// later connection recovered from does not end later calls.
pub struct SecurityFailure {
    last: Mutex<Option<(Instant, String)>>,
    last_ok: Mutex<Instant>,
}

impl Default for SecurityFailure {
    fn default() -> Self {
        SecurityFailure {
            last: Mutex::new(None),
            last_ok: Mutex::new(Instant::now()),
        }
    }
}

/// How long before a call a reported failure still counts for it.
const FAILURE_WINDOW: Duration = Duration::from_secs(60);

impl SecurityFailure {
    fn record(&self, reason: &str) {
        let lower = reason.to_ascii_lowercase();
        if ["certificate", "authentication", "unknown ca", "sasl handshake"]
            .iter()
            .any(|w| lower.contains(w))
        {
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), reason.to_owned()));
        }
    }

    fn succeeded(&self) {
        *self.last_ok.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// The failure that counts for a call begun at `started`.
    fn reason(&self, started: Instant) -> Option<String> {
        let last_ok = *self.last_ok.lock().unwrap_or_else(|p| p.into_inner());
        let since = started.checked_sub(FAILURE_WINDOW).map_or(last_ok, |s| s.max(last_ok));
        match &*self.last.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((at, reason)) if *at >= since => Some(reason.clone()),
            _ => None,
        }
    }

    /// `e`, with the failure that counts for a call begun at `started` as
    /// its cause.
    fn explain(&self, started: Instant, operation: &str, e: KafkaError) -> ConnectorError {
        match self.reason(started) {
            Some(reason) => ConnectorError::Rdkafka {
                operation: operation.to_owned(),
                message: format!("{reason} ({e})"),
            },
            None => rd_err(operation, e),
        }
    }
}

/// The `ClientContext` callbacks the consumer's and the producers' contexts
/// share: librdkafka's log
/// lines and errors go to `tracing` (warnings and worse at `warn`), and
/// security failures are recorded.
fn on_log(failure: &SecurityFailure, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
    use rdkafka::config::RDKafkaLogLevel::*;
    match level {
        Emerg | Alert | Critical | Error | Warning => {
            tracing::warn!(facility, "librdkafka: {message}")
        }
        _ => tracing::debug!(facility, "librdkafka: {message}"),
    }
    if facility == "FAIL" && matches!(level, Emerg | Alert | Critical | Error) {
        failure.record(message);
    }
}

fn on_error(failure: &SecurityFailure, error: &KafkaError, reason: &str) {
    tracing::warn!(error = %error, "librdkafka client error: {reason}");
    failure.record(reason);
}

/// OAUTHBEARER tokens for librdkafka: rust-rdkafka's `generate_oauth_token`
/// callback (with `ENABLE_REFRESH_OAUTH_TOKEN`) asks the configured
/// [`TokenProvider`](crate::client::TokenProvider) (the crate's OIDC
/// client-credentials provider, the same as the native client's), so the
/// bundled librdkafka needs no libcurl. librdkafka calls it before the first
/// connection and again at 80 % of each token's lifetime; re-authentication
/// (KIP-368) then presents the fresh token.
#[derive(Clone, Default)]
pub struct OAuthHook(Option<Arc<dyn crate::client::TokenProvider>>);

impl OAuthHook {
    fn of(security: &SecurityConfig) -> Self {
        OAuthHook(
            security
                .sasl
                .as_ref()
                .and_then(|s| s.oauthbearer.as_ref())
                .map(|o| o.provider.clone()),
        )
    }

    /// A token, fetched on a thread of its own (the callback runs on a
    /// librdkafka polling thread, maybe inside the runtime). A failure is
    /// recorded as a security failure, so a waiting call ends with it.
    fn token(
        &self,
        failure: &SecurityFailure,
    ) -> std::result::Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        let Some(provider) = self.0.clone() else {
            return Err("sasl.mechanism=OAUTHBEARER without a token provider (sasl_oauthbearer_*)".into());
        };
        let fetched = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("starting the token fetch: {e}"))?;
            rt.block_on(provider.token()).map_err(|e| e.to_string())
        })
        .join()
        .unwrap_or_else(|_| Err("the token fetch panicked".into()));
        match fetched {
            Ok(t) => {
                let lifetime_ms = t
                    .expires_at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis().min(i64::MAX as u128) as i64)
                    .unwrap_or(0);
                Ok(rdkafka::client::OAuthToken {
                    token: t.token.expose().to_owned(),
                    principal_name: t.principal.unwrap_or_else(|| "clink-kafka".into()),
                    lifetime_ms,
                })
            }
            Err(e) => {
                let message = format!("SASL OAUTHBEARER authentication: no token: {e}");
                tracing::warn!("librdkafka: {message}");
                failure.record(&message);
                Err(message.into())
            }
        }
    }
}

/// The consumer's context: librdkafka's logs to `tracing`, and the last
/// security failure kept (the producers' is [`ProducerReports`]).
#[derive(Clone, Default)]
pub struct FailureContext {
    failure: Arc<SecurityFailure>,
    oauth: OAuthHook,
}

impl ClientContext for FailureContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> std::result::Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.oauth.token(&self.failure)
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        on_log(&self.failure, level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        on_error(&self.failure, &error, reason);
    }
}

impl ConsumerContext for FailureContext {}

/// [`blocking`], ended early (with the cause) when the client reports an
/// authentication or TLS failure meanwhile; an error of the call itself
/// also names such a failure. `pump` serves the client's queued log lines
/// and errors (a consumer's are served only by polling it). Not cancel
/// safe: a dropped future leaves the librdkafka call running to its own
/// timeout (as does an early end).
async fn blocking_guarded<T: Send + 'static>(
    failure: &SecurityFailure,
    pump: &(dyn Fn() + Sync),
    operation: &'static str,
    call: impl FnOnce() -> std::result::Result<T, KafkaError> + Send + 'static,
) -> Result<T> {
    let since = Instant::now();
    let mut task = tokio::task::spawn_blocking(call);
    loop {
        tokio::select! {
            r = &mut task => {
                let r = r.map_err(|e| join_err(operation, e))?.map_err(|e| failure.explain(since, operation, e));
                if r.is_ok() {
                    failure.succeeded();
                }
                return r;
            }
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                pump();
                if let Some(reason) = failure.reason(since) {
                    return Err(ConnectorError::Rdkafka {
                        operation: operation.to_owned(),
                        message: reason,
                    });
                }
            }
        }
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

/// The longest single librdkafka lookup of a retried one: what an early
/// end on a security failure leaves running.
const LOOKUP_ATTEMPT: Duration = Duration::from_secs(1);

/// [`blocking_guarded`], retried while the error is [`transient`], until
/// `bound`.
async fn blocking_retried<T: Send + 'static>(
    failure: &SecurityFailure,
    pump: &(dyn Fn() + Sync),
    operation: &'static str,
    bound: Duration,
    call: impl Fn() -> std::result::Result<T, KafkaError> + Send + Sync + Clone + 'static,
) -> Result<T> {
    let since = Instant::now();
    let deadline = since + bound;
    loop {
        let attempt = call.clone();
        let r = blocking_guarded(failure, pump, operation, move || Ok(attempt())).await?;
        match r {
            Ok(v) => return Ok(v),
            Err(e) if transient(&e) && Instant::now() < deadline && failure.reason(since).is_none() => {
                tracing::debug!(operation, error = %e, "transient librdkafka error; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(failure.explain(since, operation, e)),
        }
    }
}

// ---------------------------------------------------------------------------
// Consumer.

/// librdkafka's `queued.min.messages`: it fetches for a partition while
/// fewer messages than this are queued (its default is 100,000).
const QUEUED_MIN_MESSAGES: usize = 10_000;

/// librdkafka's `fetch.queue.backoff.ms` (see `RdkafkaConsumer::new`).
const FETCH_QUEUE_BACKOFF: Duration = Duration::from_millis(10);

/// How many messages one `rd_kafka_consume_batch_queue` call takes (the
/// poll's byte bound is checked between calls).
const CONSUME_CHUNK: usize = 256;

/// librdkafka's consumer queue, read in batches: one
/// `rd_kafka_consume_batch_queue` call hands over up to [`CONSUME_CHUNK`]
/// messages, where the rdkafka crate's `BaseConsumer::poll` serves one
/// event per call (with a clock read and an `Arc` per message).
///
/// Holds the consumer, so the queue handle is destroyed before the
/// `rd_kafka_t` it belongs to.
struct ConsumerQueue {
    queue: std::ptr::NonNull<rdkafka::bindings::rd_kafka_queue_t>,
    /// Keeps the client alive until the queue handle is released.
    _consumer: Arc<BaseConsumer<FailureContext>>,
}

// SAFETY: librdkafka's queue handles are thread safe (every operation takes
// the queue's lock); the handle is only used through `&mut RdkafkaConsumer`.
unsafe impl Send for ConsumerQueue {}
unsafe impl Sync for ConsumerQueue {}

impl ConsumerQueue {
    fn new(consumer: Arc<BaseConsumer<FailureContext>>) -> Result<Self> {
        // SAFETY: a live client handle; the returned handle is a new
        // reference to the consumer queue (the group queue, to which
        // `BaseConsumer` forwards the main queue), released in `drop`.
        let raw = unsafe { rdkafka::bindings::rd_kafka_queue_get_consumer(consumer.client().native_ptr()) };
        let queue = std::ptr::NonNull::new(raw).ok_or_else(|| ConnectorError::Rdkafka {
            operation: "creating the consumer".into(),
            message: "librdkafka has no consumer queue (no group.id)".into(),
        })?;
        Ok(ConsumerQueue {
            queue,
            _consumer: consumer,
        })
    }

    /// Takes up to `out.len()` messages without waiting; each returned
    /// pointer must be released with `rd_kafka_message_destroy`.
    fn take(&self, out: &mut [*mut rdkafka::bindings::rd_kafka_message_t]) -> usize {
        // SAFETY: a live queue handle and an array of `out.len()` slots.
        let n = unsafe {
            rdkafka::bindings::rd_kafka_consume_batch_queue(self.queue.as_ptr(), 0, out.as_mut_ptr(), out.len())
        };
        usize::try_from(n).unwrap_or(0).min(out.len())
    }
}

impl Drop for ConsumerQueue {
    fn drop(&mut self) {
        // SAFETY: the handle from `rd_kafka_queue_get_consumer`, released
        // once, while `self._consumer` still holds the client.
        unsafe { rdkafka::bindings::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// One consumed message's fields, read out of librdkafka's
/// `rd_kafka_message_t` (which must outlive the slices).
struct RawMessage<'a> {
    partition: i32,
    offset: i64,
    timestamp: i64,
    key: Option<&'a [u8]>,
    payload: Option<&'a [u8]>,
    headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

impl RawMessage<'_> {
    fn len(&self) -> usize {
        self.key.map_or(0, <[u8]>::len)
            + self.payload.map_or(0, <[u8]>::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>()
    }
}

/// # Safety
/// `m` is a live message from `rd_kafka_consume_batch_queue` with no
/// error; the result borrows its memory until it is destroyed.
/// Headers are read only with `with_headers`: librdkafka parses a record's
/// headers on first access, with a reader and an allocation per record
/// (about 1,100 instructions, even for a record without headers, whose
/// header section still holds its count), which a caller that never looks at
/// headers need not pay.
unsafe fn read_message<'a>(m: *const rdkafka::bindings::rd_kafka_message_t, with_headers: bool) -> RawMessage<'a> {
    use rdkafka::bindings as rd;
    let msg = &*m;
    let bytes = |ptr: *mut std::ffi::c_void, len: usize| -> Option<&'a [u8]> {
        (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr as *const u8, len))
    };
    let mut tstype = rd::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    let timestamp = rd::rd_kafka_message_timestamp(m, &mut tstype);
    let mut headers = Vec::new();
    let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    if with_headers && rd::rd_kafka_message_headers(m, &mut hdrs) == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
    {
        let mut i = 0;
        loop {
            let mut name: *const std::ffi::c_char = std::ptr::null();
            let mut value: *const std::ffi::c_void = std::ptr::null();
            let mut size = 0usize;
            if rd::rd_kafka_header_get_all(hdrs, i, &mut name, &mut value, &mut size)
                != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                break;
            }
            let key = std::ffi::CStr::from_ptr(name).to_bytes();
            headers.push((key, bytes(value as *mut _, size)));
            i += 1;
        }
    }
    RawMessage {
        partition: msg.partition,
        offset: msg.offset,
        timestamp: if timestamp >= 0 { timestamp } else { -1 },
        key: bytes(msg.key, msg.key_len),
        payload: bytes(msg.payload, msg.len),
        headers,
    }
}

/// The fetch settings of `cc` (isolation, fetch bounds, CRC checks, rack,
/// and librdkafka's prefetch bounded like the native consumer's memory), as
/// librdkafka properties: the source's consumer and the group consumer's.
fn fetch_properties(c: &mut RdConfig, cc: &ConsumerConfig) {
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
    if let Some(rack) = &cc.client_rack {
        c.set("client.rack", rack.clone());
    }
    // librdkafka prefetches per partition until 100,000 messages or
    // 64 MiB are queued (its defaults); the native consumer holds about
    // one fetch answer (`fetch.max.bytes`). The same bound here.
    c.set(
        "queued.max.messages.kbytes",
        (cc.max_bytes / 1024).clamp(1, 2_097_151).to_string(),
    );
    c.set("queued.min.messages", QUEUED_MIN_MESSAGES.to_string());
    // With the queue over a threshold librdkafka postpones the next
    // fetch by this much (default 1 s: a stall per refill at these
    // thresholds; its documentation says to lower it with them).
    c.set("fetch.queue.backoff.ms", ms(FETCH_QUEUE_BACKOFF));
}

/// [`ConsumerBackend`] over librdkafka: manual assignment, no group
/// membership, never commits.
pub struct RdkafkaConsumer {
    config: RdConfig,
    group_id: String,
    request_timeout: Duration,
    metadata_max_wait: Duration,
    /// `max.poll.records` and the poll's byte bound, as natively.
    max_poll_records: usize,
    max_poll_bytes: usize,
    consumer: Option<Arc<BaseConsumer<FailureContext>>>,
    queue: Option<ConsumerQueue>,
    context: FailureContext,
    /// Whether partitions were assigned (from then on, only `poll` polls).
    assigned: bool,
    /// Woken by librdkafka when the consumer queue becomes non-empty.
    ready: Arc<Notify>,
    /// An error polled after records of the same poll; returned next.
    deferred: Option<ConnectorError>,
    /// Whether records carry their headers (see [`ConsumerBackend::read_headers`]).
    headers: bool,
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
        fetch_properties(&mut c, &cc);
        validate(&c)?;
        let client = options.client_config()?;
        Ok(RdkafkaConsumer {
            config: c,
            group_id: options.group_id.clone(),
            request_timeout: client.request_timeout,
            metadata_max_wait: client.metadata_max_wait,
            max_poll_records: cc.max_poll_records.max(1),
            max_poll_bytes: cc.max_poll_bytes.max(1),
            consumer: None,
            queue: None,
            context: FailureContext {
                oauth: OAuthHook::of(&options.security),
                ..FailureContext::default()
            },
            assigned: false,
            ready: Arc::new(Notify::new()),
            deferred: None,
            headers: true,
        })
    }

    /// Serves the consumer's queued log lines and errors (so a security
    /// failure is seen during a lookup), while no partition is assigned: a
    /// poll then cannot take a record the source would miss.
    fn pump(&self) -> impl Fn() + Sync {
        let idle = self.consumer.clone().filter(|_| !self.assigned);
        move || {
            if let Some(c) = &idle {
                if let Some(Err(e)) = c.poll(Duration::ZERO) {
                    tracing::debug!(error = %e, "librdkafka consumer error before assignment");
                }
            }
        }
    }

    fn consumer(&self) -> Result<Arc<BaseConsumer<FailureContext>>> {
        self.consumer.clone().ok_or(ConnectorError::CallOrder {
            call: "rdkafka consumer backend",
            problem: "before connect",
        })
    }

    /// Takes what librdkafka has queued, without waiting, up to
    /// `max_poll_records` records and (checked per chunk of
    /// [`CONSUME_CHUNK`]) `max_poll_bytes`.
    ///
    /// The one copy: a message's key, value and headers live in
    /// librdkafka's fetch buffers, which the message keeps alive until it
    /// is destroyed; each chunk's records are copied into ONE buffer of
    /// exactly their size and handed out as `Bytes` slices of it, and the
    /// messages are destroyed right away. (Handing out the librdkafka
    /// memory itself would cost an owner allocation and two atomic
    /// operations per record, more than copying a small record, and would
    /// keep whole fetch buffers alive for as long as any record of them.)
    fn drain(&mut self) -> Vec<KafkaMessage> {
        let Some(queue) = &self.queue else {
            return Vec::new();
        };
        let with_headers = self.headers;
        // Room for a few chunks up front: growing from empty moved every
        // message taken so far at each doubling (about 60 instructions a
        // record, callgrind).
        let mut out: Vec<KafkaMessage> = Vec::with_capacity(self.max_poll_records.min(4 * CONSUME_CHUNK));
        let mut raw = [std::ptr::null_mut(); CONSUME_CHUNK];
        let mut copied = 0usize;
        while out.len() < self.max_poll_records && copied < self.max_poll_bytes && self.deferred.is_none() {
            let want = CONSUME_CHUNK.min(self.max_poll_records - out.len());
            let n = queue.take(&mut raw[..want]);
            let taken = &raw[..n];
            let mut records = Vec::with_capacity(n);
            for &m in taken {
                // SAFETY: live messages from `take`, destroyed below,
                // after the last use of what they hold.
                let err = unsafe { (*m).err };
                if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    records.push(unsafe { read_message(m, with_headers) });
                } else if let Some(fatal) = classify(KafkaError::MessageConsumption(err.into())) {
                    // The records taken with it still go out (nothing is
                    // lost); the error ends the poll and is returned next.
                    self.deferred.get_or_insert(fatal);
                }
            }
            let size = copy_messages(records, &mut out);
            for &m in taken {
                // SAFETY: each message from `take` destroyed once; nothing
                // borrows it any more (`records` was consumed above).
                unsafe { rdkafka::bindings::rd_kafka_message_destroy(m) };
            }
            copied += size;
            if n < want {
                break;
            }
        }
        out
    }
}

/// Copies `records` into ONE buffer of exactly their size and appends them
/// to `out` as `Bytes` slices of it; returns the bytes copied. The
/// librdkafka messages may be destroyed once this returns.
///
/// Two passes and no vector in between (a profile had the per-record
/// span and metadata vectors at about 40 ns a record): the first copies
/// every field in record order; the second walks the same fields in the
/// same order, so each one's place in the buffer is the running sum of
/// the lengths before it.
fn copy_messages(records: Vec<RawMessage<'_>>, out: &mut Vec<KafkaMessage>) -> usize {
    let size: usize = records.iter().map(RawMessage::len).sum();
    let mut buf = Vec::with_capacity(size);
    for r in &records {
        buf.extend_from_slice(r.key.unwrap_or_default());
        buf.extend_from_slice(r.payload.unwrap_or_default());
        for (k, v) in &r.headers {
            buf.extend_from_slice(k);
            buf.extend_from_slice(v.unwrap_or_default());
        }
    }
    let buf = bytes::Bytes::from(buf);
    let mut at = 0;
    let mut next = |field: &[u8]| {
        let start = at;
        at += field.len();
        buf.slice(start..at)
    };
    out.reserve(records.len());
    for r in &records {
        let key = r.key.map(&mut next);
        let payload = r.payload.map(&mut next);
        // (An empty collect still costs its iterator set-up, per record.)
        let headers = if r.headers.is_empty() {
            Vec::new()
        } else {
            r.headers
                .iter()
                .map(|(k, v)| Header {
                    key: next(k),
                    value: v.map(&mut next),
                })
                .collect()
        };
        out.push(KafkaMessage {
            payload,
            key,
            headers,
            offset: r.offset,
            partition: r.partition,
            timestamp: r.timestamp,
        });
    }
    size
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
                // A batch librdkafka cannot inflate: never skipped silently.
                | NotImplemented
                | BadCompression
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
            let mut consumer: BaseConsumer<FailureContext> = self
                .config
                .create_with_context(self.context.clone())
                .map_err(|e| rd_err("creating the consumer", e))?;
            let ready = self.ready.clone();
            consumer.set_nonempty_callback(move || ready.notify_one());
            let consumer = Arc::new(consumer);
            self.queue = Some(ConsumerQueue::new(consumer.clone())?);
            self.consumer = Some(consumer);
        }
        Ok(())
    }

    async fn partition_count(&mut self, topic: &str) -> Result<i32> {
        let consumer = self.consumer()?;
        let deadline = Instant::now() + self.metadata_max_wait;
        let timeout = self.request_timeout;
        // Short attempts, retried while transient up to the request
        // timeout: a lookup ended early by a security failure leaves at
        // most one attempt running.
        let attempt = timeout.min(LOOKUP_ATTEMPT);
        loop {
            let (c, t) = (consumer.clone(), topic.to_owned());
            let md = blocking_retried(
                &self.context.failure,
                &self.pump(),
                "fetching metadata",
                timeout,
                move || {
                    let md = c.fetch_metadata(Some(&t), attempt)?;
                    Ok(md
                        .topics()
                        .iter()
                        .find(|m| m.name() == t)
                        .map(|m| (m.error(), m.partitions().len())))
                },
            )
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
        let failure = &self.context.failure;
        let pump = self.pump();
        let (low, high) = blocking_retried(
            failure,
            &pump,
            "fetching watermarks",
            self.metadata_max_wait,
            move || consumer.fetch_watermarks(&t, partition, timeout.min(LOOKUP_ATTEMPT)),
        )
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
            blocking_guarded(
                &self.context.failure,
                &self.pump(),
                "fetching committed offsets",
                move || consumer.committed_offsets(tpl, timeout),
            )
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

    async fn assign(&mut self, topic: &str, partitions: &[PartitionOffset]) -> Result<()> {
        let consumer = self.consumer()?;
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition_offset(topic, p.partition, Offset::Offset(p.offset))
                .map_err(|e| rd_err("assigning", e))?;
        }
        consumer.assign(&tpl).map_err(|e| rd_err("assigning", e))?;
        self.assigned = true;
        Ok(())
    }

    /// Cancel safe: records leave librdkafka only inside one synchronous
    /// step that returns them; the waits in between take nothing
    /// (`tests/consumer_cancel.rs` drops these futures at every point a
    /// sweep reaches).
    async fn poll(&mut self, timeout: Duration) -> Result<Vec<KafkaMessage>> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        if self.queue.is_none() {
            return Err(ConnectorError::CallOrder {
                call: "rdkafka consumer backend",
                problem: "before connect",
            });
        }
        let deadline = Instant::now() + timeout;
        loop {
            let records = self.drain();
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

    fn read_headers(&mut self, read: bool) {
        self.headers = read;
    }

    async fn close(&mut self) -> Result<()> {
        let queue = self.queue.take();
        if let Some(consumer) = self.consumer.take() {
            // Dropping the last reference closes the consumer, which blocks
            // (the queue handle goes first).
            tokio::task::spawn_blocking(move || {
                drop(queue);
                drop(consumer)
            })
            .await
            .map_err(|e| join_err("closing the consumer", e))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Group consumer.

/// librdkafka's group metadata (`rd_kafka_consumer_group_metadata_t`), for
/// [`RdkafkaTransactionalProducer`]'s `send_offsets`.
#[derive(Clone)]
pub struct RdkafkaGroupMetadata {
    group_id: String,
    inner: Arc<rdkafka::consumer::ConsumerGroupMetadata>,
}

impl RdkafkaGroupMetadata {
    /// The group.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }
}

/// The rebalances librdkafka's callback reported, not yet polled.
#[derive(Default)]
struct Rebalances(Mutex<VecDeque<RebalanceEvent>>);

impl Rebalances {
    fn push(&self, event: RebalanceEvent) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push_back(event);
    }

    fn take(&self) -> Vec<RebalanceEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect()
    }

    fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }
}

/// The group consumer's context: [`FailureContext`]'s logging, plus the
/// rebalance callbacks, which record each assignment, revocation and loss
/// (`rd_kafka_assignment_lost`) before the crate's default handling
/// applies it (`incremental_assign` / `incremental_unassign` under a
/// cooperative protocol, cooperative-sticky or KIP-848's `consumer`;
/// `assign` otherwise).
#[derive(Clone, Default)]
pub struct GroupContext {
    failure: Arc<SecurityFailure>,
    rebalances: Arc<Rebalances>,
    oauth: OAuthHook,
}

impl ClientContext for GroupContext {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> std::result::Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.oauth.token(&self.failure)
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        on_log(&self.failure, level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        on_error(&self.failure, &error, reason);
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| TopicPartition::new(e.topic(), e.partition()))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) if tpl.count() > 0 => {
                self.rebalances.push(RebalanceEvent::Assigned(partitions_of(tpl)))
            }
            Rebalance::Revoke(tpl) if tpl.count() > 0 => {
                let partitions = partitions_of(tpl);
                self.rebalances.push(if consumer.assignment_lost() {
                    RebalanceEvent::Lost(partitions)
                } else {
                    RebalanceEvent::Revoked(partitions)
                })
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "librdkafka rebalance error"),
            _ => {}
        }
    }
}

type RdGroupConsumer = BaseConsumer<GroupContext>;

/// [`GroupConsumerBackend`] over librdkafka's KafkaConsumer (subscribe,
/// rebalance callbacks, commits, `rd_kafka_consumer_group_metadata`).
///
/// A poll serves librdkafka's consumer queue without blocking the runtime
/// (the crate's `BaseConsumer::poll` with a zero timeout, which runs the
/// rebalance callbacks; the batch read of [`RdkafkaConsumer`] would
/// bypass them), woken by the queue-nonempty callback as there; each
/// record is copied once as there. Blocking calls (commit, committed,
/// close) run on `spawn_blocking`.
///
/// Named differences: `partition.assignment.strategy` may not mix eager
/// and cooperative assignors in librdkafka, so only the assignors of the
/// first one's kind are given (the Java default `range,
/// cooperative-sticky` becomes `range`); under `group.protocol=consumer`
/// the classic settings (session and heartbeat timeouts, assignors) are
/// the broker's, as natively.
pub struct RdkafkaGroupConsumer {
    config: RdConfig,
    group_id: String,
    request_timeout: Duration,
    max_poll_records: usize,
    consumer: Option<Arc<RdGroupConsumer>>,
    context: GroupContext,
    ready: Arc<Notify>,
    deferred: Option<ConnectorError>,
}

impl std::fmt::Debug for RdkafkaGroupConsumer {
    // The librdkafka config holds the SASL password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdkafkaGroupConsumer")
            .field("group_id", &self.group_id)
            .field("connected", &self.consumer.is_some())
            .finish_non_exhaustive()
    }
}

impl RdkafkaGroupConsumer {
    /// A member connecting as `options` say (brokers, client id, security,
    /// client and fetch tuning, passthrough), in the group `group`
    /// describes (id, protocol, instance id, timeouts, auto-commit,
    /// `auto.offset.reset`, isolation); refuses what librdkafka cannot do,
    /// before any I/O.
    pub fn new(options: &SourceOptions, group: GroupConsumerConfig) -> Result<Self> {
        group.validate()?;
        let mut c = base_config(
            &options.brokers,
            &options.client_id,
            &options.security,
            &options.client,
            &options.rdkafka_properties,
        )?;
        let mut cc = options.consumer_config();
        cc.isolation = group.consumer.isolation;
        fetch_properties(&mut c, &cc);
        c.set("group.id", &group.group_id);
        c.set("group.protocol", group.protocol.name());
        if let Some(id) = &group.group_instance_id {
            c.set("group.instance.id", id);
        }
        c.set("enable.auto.commit", group.enable_auto_commit.to_string());
        c.set("auto.commit.interval.ms", ms(group.auto_commit_interval));
        c.set("enable.auto.offset.store", "true");
        c.set("enable.partition.eof", "false");
        c.set("max.poll.interval.ms", ms(group.max_poll_interval));
        c.set("topic.metadata.refresh.interval.ms", ms(group.metadata_max_age));
        let reset = match group.consumer.auto_offset_reset {
            Some(crate::client::Offset::Earliest) => "earliest",
            Some(crate::client::Offset::Latest) => "latest",
            None => "error",
            Some(other) => {
                return Err(ConnectorError::UnsupportedProperty {
                    property: "auto.offset.reset".into(),
                    reason: format!("{other:?} has no librdkafka equivalent (earliest, latest or none)"),
                })
            }
        };
        c.set("auto.offset.reset", reset);
        match group.protocol {
            GroupProtocol::Classic => {
                c.set("session.timeout.ms", ms(group.session_timeout));
                c.set("heartbeat.interval.ms", ms(group.heartbeat_interval));
                let cooperative = group.assignors.first() == Some(&Assignor::CooperativeSticky);
                let names: Vec<&str> = group
                    .assignors
                    .iter()
                    .filter(|a| (**a == Assignor::CooperativeSticky) == cooperative)
                    .map(|a| a.name())
                    .collect();
                c.set("partition.assignment.strategy", names.join(","));
            }
            GroupProtocol::Consumer => {
                if let Some(a) = &group.remote_assignor {
                    c.set("group.remote.assignor", a);
                }
            }
        }
        validate(&c)?;
        let client = options.client_config()?;
        Ok(RdkafkaGroupConsumer {
            config: c,
            group_id: group.group_id,
            request_timeout: client.request_timeout,
            max_poll_records: cc.max_poll_records.max(1),
            consumer: None,
            context: GroupContext {
                oauth: OAuthHook::of(&options.security),
                ..GroupContext::default()
            },
            ready: Arc::new(Notify::new()),
            deferred: None,
        })
    }

    fn consumer(&self) -> Result<Arc<RdGroupConsumer>> {
        self.consumer.clone().ok_or(ConnectorError::CallOrder {
            call: "rdkafka group consumer backend",
            problem: "before connect (or after close)",
        })
    }

    /// Takes what librdkafka has queued, without waiting, up to
    /// `max_poll_records`; stops at a rebalance (its callback ran inside
    /// the crate's poll), so the records taken precede it.
    fn drain(&mut self, consumer: &RdGroupConsumer) -> Vec<GroupRecord> {
        let mut taken = Vec::new();
        let mut empty = 0;
        while taken.len() < self.max_poll_records && empty < 2 {
            match consumer.poll(Duration::ZERO) {
                Some(Ok(m)) => {
                    empty = 0;
                    taken.push(m);
                }
                Some(Err(e)) => {
                    if let Some(fatal) = classify(e) {
                        self.deferred = Some(fatal);
                        break;
                    }
                }
                // Nothing queued, or a rebalance or commit event served.
                None => {
                    if !self.context.rebalances.is_empty() {
                        break;
                    }
                    empty += 1;
                }
            }
        }
        let mut out = Vec::with_capacity(taken.len());
        let mut topic: Option<Arc<str>> = None;
        let mut messages = Vec::with_capacity(taken.len());
        let mut topics = Vec::with_capacity(taken.len());
        // SAFETY: live messages (each `BorrowedMessage` keeps its
        // librdkafka message until dropped, after the copy below).
        let raw: Vec<RawMessage<'_>> = taken.iter().map(|m| unsafe { read_message(m.ptr(), true) }).collect();
        copy_messages(raw, &mut messages);
        for m in &taken {
            let name = m.topic();
            let t = match &topic {
                Some(t) if &**t == name => t.clone(),
                _ => Arc::<str>::from(name),
            };
            topic = Some(t.clone());
            topics.push(t);
        }
        drop(taken);
        out.extend(
            topics
                .into_iter()
                .zip(messages)
                .map(|(topic, message)| GroupRecord { topic, message }),
        );
        out
    }
}

/// `offsets` as a librdkafka list.
fn offset_list(offsets: &[TopicPartitionOffset]) -> Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for o in offsets {
        let mut e = tpl.add_partition(&o.topic, o.partition);
        e.set_offset(Offset::Offset(o.offset))
            .map_err(|e| rd_err("listing offsets", e))?;
        if let Some(m) = &o.metadata {
            e.set_metadata(m.clone());
        }
    }
    Ok(tpl)
}

impl GroupConsumerBackend for RdkafkaGroupConsumer {
    async fn connect(&mut self) -> Result<()> {
        if self.consumer.is_none() {
            let mut consumer: RdGroupConsumer = self
                .config
                .create_with_context(self.context.clone())
                .map_err(|e| rd_err("creating the group consumer", e))?;
            let ready = self.ready.clone();
            consumer.set_nonempty_callback(move || ready.notify_one());
            self.consumer = Some(Arc::new(consumer));
        }
        Ok(())
    }

    fn subscribe(&mut self, subscription: &Subscription) -> Result<()> {
        let consumer = self.consumer()?;
        let topics: Vec<String> = match subscription {
            Subscription::Topics(t) => t.clone(),
            // librdkafka reads a name starting with `^` as a regular expression.
            Subscription::Pattern(p) => vec![format!("^({p})$")],
        };
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        consumer.subscribe(&names).map_err(|e| rd_err("subscribing", e))
    }

    /// Cancel safe: events and records leave librdkafka only inside one
    /// synchronous step that returns them.
    async fn poll_events(&mut self, timeout: Duration) -> Result<GroupBatch> {
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        let consumer = self.consumer()?;
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.context.rebalances.take();
            if !events.is_empty() {
                return Ok(GroupBatch {
                    events,
                    records: Vec::new(),
                });
            }
            let records = self.drain(&consumer);
            if !records.is_empty() {
                return Ok(GroupBatch {
                    events: Vec::new(),
                    records,
                });
            }
            if let Some(e) = self.deferred.take() {
                return Err(e);
            }
            if !self.context.rebalances.is_empty() {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(GroupBatch::default());
            }
            let _ = tokio::time::timeout(left.min(Duration::from_millis(50)), self.ready.notified()).await;
        }
    }

    fn assignment(&self) -> Result<Vec<TopicPartition>> {
        let tpl = self
            .consumer()?
            .assignment()
            .map_err(|e| rd_err("reading the assignment", e))?;
        Ok(partitions_of(&tpl))
    }

    async fn commit(&mut self, offsets: &[TopicPartitionOffset]) -> Result<()> {
        let consumer = self.consumer()?;
        let tpl = offset_list(offsets)?;
        blocking_guarded(&self.context.failure, &|| {}, "committing offsets", move || {
            consumer.commit(&tpl, CommitMode::Sync)
        })
        .await
    }

    async fn committed(&mut self, partitions: &[TopicPartition]) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        let consumer = self.consumer()?;
        let mut tpl = TopicPartitionList::new();
        for tp in partitions {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        let timeout = self.request_timeout;
        let found = blocking_retried(
            &self.context.failure,
            &|| {},
            "fetching committed offsets",
            timeout,
            move || consumer.committed_offsets(tpl.clone(), timeout.min(LOOKUP_ATTEMPT * 5)),
        )
        .await?;
        Ok(partitions
            .iter()
            .map(|tp| {
                let offset = match found.find_partition(&tp.topic, tp.partition).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) if o >= 0 => Some(o),
                    _ => None,
                };
                (tp.clone(), offset)
            })
            .collect())
    }

    fn group_metadata(&self) -> Option<GroupMetadataHandle> {
        let m = self.consumer.as_ref()?.group_metadata()?;
        Some(GroupMetadataHandle::Rdkafka(RdkafkaGroupMetadata {
            group_id: self.group_id.clone(),
            inner: Arc::new(m),
        }))
    }

    /// Dropping the last reference closes the consumer (librdkafka revokes,
    /// commits with auto-commit, leaves the group), off the runtime.
    async fn close(&mut self) -> Result<()> {
        if let Some(consumer) = self.consumer.take() {
            tokio::task::spawn_blocking(move || drop(consumer))
                .await
                .map_err(|e| join_err("closing the group consumer", e))?;
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
        Compression::Gzip => "gzip",
        Compression::Snappy => "snappy",
        Compression::Lz4 => "lz4",
        Compression::Zstd => "zstd",
        other => {
            return Err(ConnectorError::UnsupportedProperty {
                property: "compression".into(),
                reason: format!("{other:?} has no librdkafka codec"),
            })
        }
    };
    c.set("compression.codec", codec);
    if pc.compression_level != -1 {
        c.set("compression.level", pc.compression_level.to_string());
    }
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

// The delivery path. librdkafka reports each record's delivery through the
// producer context's `delivery` callback, on the `ThreadedProducer`'s poll
// thread, with the opaque the record was queued with. The opaque is a plain
// sequence number, and the outcome goes into one ring (`Ledger`) that the
// record's `RdkafkaDelivery` reads: no boxed opaque, channel or future
// allocation per record (the rdkafka crate's `FutureProducer` costs a
// oneshot channel and a box per record).

/// One record's delivery, as its handle will see it.
enum Slot {
    /// Queued in librdkafka; no report yet.
    Pending,
    /// Queued, its handle dropped: the report only frees the slot.
    Unwatched,
    Delivered(i32, i64),
    Failed(Box<ConnectorError>),
    /// The outcome was taken (or is not wanted): free once at the front.
    Settled,
}

#[derive(Default)]
struct LedgerState {
    /// The sequence number of `slots[0]`.
    base: usize,
    /// One slot per record from the oldest one whose outcome is not taken
    /// yet: the ring is as long as the span of outstanding handles.
    slots: VecDeque<Slot>,
    /// Handles waiting for their report (few: they are awaited in order).
    waiting: Vec<(usize, Waker)>,
}

impl LedgerState {
    fn slot(&mut self, seq: usize) -> Option<&mut Slot> {
        let i = seq.checked_sub(self.base)?;
        self.slots.get_mut(i)
    }

    fn trim(&mut self) {
        while matches!(self.slots.front(), Some(Slot::Settled)) {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    fn wake(&mut self, seq: usize) {
        if let Some(i) = self.waiting.iter().position(|(s, _)| *s == seq) {
            self.waiting.swap_remove(i).1.wake();
        }
    }
}

/// The outcomes of a producer's records by sequence number, shared by the
/// producer context (which reports) and the delivery handles (which take).
#[derive(Default)]
struct Ledger(Mutex<LedgerState>);

impl Ledger {
    fn state(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a record about to be queued.
    fn reserve(&self) -> usize {
        let mut st = self.state();
        st.slots.push_back(Slot::Pending);
        st.base + st.slots.len() - 1
    }

    /// A reserved record that was never queued.
    fn release(&self, seq: usize) {
        let mut st = self.state();
        if let Some(slot) = st.slot(seq) {
            *slot = Slot::Settled;
        }
        st.trim();
    }

    /// librdkafka's report for `seq`.
    fn report(&self, seq: usize, outcome: DeliveryOutcome) {
        let mut st = self.state();
        let Some(slot) = st.slot(seq) else { return };
        match slot {
            Slot::Pending => {
                *slot = match outcome {
                    Ok(at) => Slot::Delivered(at.partition, at.offset),
                    Err(e) => Slot::Failed(Box::new(e)),
                };
                st.wake(seq);
            }
            Slot::Unwatched => {
                *slot = Slot::Settled;
                st.trim();
            }
            _ => {}
        }
    }

    /// Fails every record still without a report (the producer is gone:
    /// no report will come).
    fn fail_pending(&self, why: &str) {
        let mut st = self.state();
        for slot in st.slots.iter_mut() {
            match slot {
                Slot::Pending => {
                    *slot = Slot::Failed(Box::new(ConnectorError::Rdkafka {
                        operation: "delivery".into(),
                        message: why.to_owned(),
                    }))
                }
                Slot::Unwatched => *slot = Slot::Settled,
                _ => {}
            }
        }
        for (_, w) in std::mem::take(&mut st.waiting) {
            w.wake();
        }
        st.trim();
    }

    fn poll(&self, seq: usize, cx: &mut std::task::Context<'_>) -> std::task::Poll<DeliveryOutcome> {
        let mut st = self.state();
        let Some(slot) = st.slot(seq) else {
            return std::task::Poll::Ready(Err(ConnectorError::Rdkafka {
                operation: "delivery".into(),
                message: "the delivery outcome was already taken".into(),
            }));
        };
        let outcome = match std::mem::replace(slot, Slot::Settled) {
            Slot::Delivered(p, o) => Ok(PartitionOffset::new(p, o)),
            Slot::Failed(e) => Err(*e),
            other => {
                *slot = other;
                match st.waiting.iter_mut().find(|(s, _)| *s == seq) {
                    Some((_, w)) => w.clone_from(cx.waker()),
                    None => st.waiting.push((seq, cx.waker().clone())),
                }
                return std::task::Poll::Pending;
            }
        };
        st.trim();
        std::task::Poll::Ready(outcome)
    }

    /// A handle dropped: its record's report is no longer wanted.
    fn forget(&self, seq: usize) {
        let mut st = self.state();
        if let Some(slot) = st.slot(seq) {
            *slot = match slot {
                Slot::Pending | Slot::Unwatched => Slot::Unwatched,
                _ => Slot::Settled,
            };
        }
        st.waiting.retain(|(s, _)| *s != seq);
        st.trim();
    }
}

/// The producers' librdkafka context, one type for every job: delivery
/// reports into the `Ledger`; librdkafka's logs to `tracing` and the last
/// authentication or TLS failure kept (as the consumer's
/// [`FailureContext`]); for the transactional producer also the identity
/// from the statistics ticks (the only place librdkafka exposes it; the
/// plain producer sets no `statistics.interval.ms` and gets none).
#[derive(Clone, Default)]
pub struct ProducerReports {
    ledger: Arc<Ledger>,
    cell: Arc<IdentityCell>,
    failure: Arc<SecurityFailure>,
    oauth: OAuthHook,
}

impl ClientContext for ProducerReports {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(
        &self,
        _config: Option<&str>,
    ) -> std::result::Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
        self.oauth.token(&self.failure)
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        on_log(&self.failure, level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        on_error(&self.failure, &error, reason);
    }

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

impl ProducerContext for ProducerReports {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        let outcome = match result {
            Ok(m) => Ok(PartitionOffset::new(m.partition(), m.offset())),
            Err((e, _)) => Err(rd_err("delivery", e.clone())),
        };
        self.ledger.report(seq, outcome);
    }
}

/// The librdkafka producer the backends drive: a `BaseProducer` whose
/// delivery reports a dedicated thread serves (`ThreadedProducer`).
type RdProducer = ThreadedProducer<ProducerReports>;

/// [`ProducerBackend`] over librdkafka's `ThreadedProducer`, with delivery
/// reports into a `Ledger` (see [`RdkafkaDelivery`]).
pub struct RdkafkaProducer {
    config: RdConfig,
    producer: Option<Arc<RdProducer>>,
    /// The producer's context (kept across `init_transactions`): the
    /// ledger, the identity and the last security failure.
    reports: ProducerReports,
    partitions: PartitionCounts,
    /// The handle of the first topic produced to (see [`TopicHandle`]);
    /// reset with the producer.
    topic: std::sync::OnceLock<TopicHandle>,
}

/// A librdkafka topic handle (`rd_kafka_topic_new`) to queue records with
/// `rd_kafka_produce`: the rdkafka crate's `send` names the topic instead,
/// which costs a C string allocation per record and, in librdkafka, a topic
/// lookup under the client's write lock per record (kcat, like any C
/// program, keeps a handle). Holds the client, so the handle is destroyed
/// before the client is.
struct TopicHandle {
    name: Box<str>,
    rkt: std::ptr::NonNull<rdkafka::bindings::rd_kafka_topic_t>,
    _producer: Arc<RdProducer>,
}

// SAFETY: librdkafka topic handles are thread safe (reference counted, their
// state under their own locks); `rd_kafka_produce` may be called on one from
// any thread.
unsafe impl Send for TopicHandle {}
unsafe impl Sync for TopicHandle {}

impl TopicHandle {
    fn new(producer: &Arc<RdProducer>, topic: &str) -> Result<Self> {
        let failed = |message: String| ConnectorError::Rdkafka {
            operation: format!("producing to {topic:?}"),
            message,
        };
        let name = std::ffi::CString::new(topic).map_err(|_| failed("the topic name holds a NUL byte".into()))?;
        // SAFETY: a live client handle and a NUL-terminated name (copied by
        // librdkafka); a null configuration is the producer's default topic
        // configuration, as when a record names its topic.
        let raw = unsafe {
            rdkafka::bindings::rd_kafka_topic_new(producer.client().native_ptr(), name.as_ptr(), std::ptr::null_mut())
        };
        // SAFETY: reads this thread's last librdkafka error.
        let rkt = std::ptr::NonNull::new(raw).ok_or_else(|| {
            failed(RDKafkaErrorCode::from(unsafe { rdkafka::bindings::rd_kafka_last_error() }).to_string())
        })?;
        Ok(TopicHandle {
            name: topic.into(),
            rkt,
            _producer: producer.clone(),
        })
    }
}

/// `rd_kafka_produce` of one record on `handle` (0: queued; else see
/// `rd_kafka_last_error`), with the ledger slot `seq` as its opaque.
fn produce_raw(
    handle: &TopicHandle,
    partition: Option<i32>,
    key: Option<&[u8]>,
    payload: Option<&[u8]>,
    seq: usize,
) -> i32 {
    let raw = |b: Option<&[u8]>| b.map_or((std::ptr::null(), 0), |b| (b.as_ptr(), b.len()));
    let (key, key_len) = raw(key);
    let (payload, len) = raw(payload);
    // SAFETY: a live topic handle; librdkafka copies the key and the payload
    // before returning (`RD_KAFKA_MSG_F_COPY`) and never writes through the
    // payload pointer with that flag; the opaque is a plain integer (the
    // ledger slot), read back by the delivery report as `usize`.
    unsafe {
        rdkafka::bindings::rd_kafka_produce(
            handle.rkt.as_ptr(),
            partition.unwrap_or(-1),
            rdkafka::bindings::RD_KAFKA_MSG_F_COPY,
            payload as *mut std::ffi::c_void,
            len,
            key as *const std::ffi::c_void,
            key_len,
            seq as *mut std::ffi::c_void,
        )
    }
}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: the handle from `rd_kafka_topic_new`, destroyed once, while
        // `_producer` still holds the client.
        unsafe { rdkafka::bindings::rd_kafka_topic_destroy(self.rkt.as_ptr()) };
    }
}

impl std::fmt::Debug for RdkafkaProducer {
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
        let mut producer = RdkafkaProducer::with_config(config);
        producer.reports.oauth = OAuthHook::of(&options.security);
        Ok(producer)
    }

    fn with_config(config: RdConfig) -> Self {
        RdkafkaProducer {
            config,
            producer: None,
            reports: ProducerReports::default(),
            partitions: PartitionCounts::default(),
            topic: std::sync::OnceLock::new(),
        }
    }

    /// The handle for `topic` when it is the first topic produced to (most
    /// producers write one topic); `None` for any other.
    fn topic_handle(&self, producer: &Arc<RdProducer>, topic: &str) -> Result<Option<&TopicHandle>> {
        if self.topic.get().is_none() {
            // A concurrent first send may win: its handle is kept, ours dropped.
            let _ = self.topic.set(TopicHandle::new(producer, topic)?);
        }
        Ok(self.topic.get().filter(|h| &*h.name == topic))
    }

    fn producer(&self) -> Result<&Arc<RdProducer>> {
        self.producer.as_ref().ok_or(ConnectorError::CallOrder {
            call: "rdkafka producer backend",
            problem: "before connect",
        })
    }

    /// Queues one record; waits (asynchronously) while librdkafka's queue
    /// is full. The caller bounds the wait (`produce_timeout`).
    async fn send_record(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<RdkafkaDelivery> {
        let producer = self.producer()?;
        if let Some(p) = partition {
            check_partition(
                producer,
                &self.reports.failure,
                &self.partitions,
                topic,
                p,
                Duration::from_secs(30),
            )
            .await?;
        }
        let ledger = &self.reports.ledger;
        let seq = ledger.reserve();
        // Releases the slot unless the record was queued.
        let mut reserved = Reserved { ledger, seq: Some(seq) };
        if message.headers.is_empty() && message.timestamp < 0 {
            if let Some(handle) = self.topic_handle(producer, topic)? {
                loop {
                    let rc = produce_raw(
                        handle,
                        partition,
                        message.key.as_deref(),
                        message.payload.as_deref(),
                        seq,
                    );
                    if rc == 0 {
                        reserved.seq = None;
                        return Ok(RdkafkaDelivery {
                            ledger: ledger.clone(),
                            seq,
                        });
                    }
                    // SAFETY: reads this thread's last librdkafka error, set
                    // by the failed call above.
                    let code = RDKafkaErrorCode::from(unsafe { rdkafka::bindings::rd_kafka_last_error() });
                    if code != RDKafkaErrorCode::QueueFull {
                        return Err(rd_err(
                            format!("producing to {topic:?}"),
                            KafkaError::MessageProduction(code),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        let mut record: BaseRecord<'_, [u8], [u8], usize> = BaseRecord::with_opaque_to(topic, seq);
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
        // librdkafka allocates a header list: only for records that have headers.
        if !message.headers.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(message.headers.len());
            for h in &message.headers {
                headers = headers.insert(rdkafka::message::Header {
                    key: &String::from_utf8_lossy(&h.key),
                    value: h.value.as_deref(),
                });
            }
            record = record.headers(headers);
        }
        loop {
            match producer.send(record) {
                Ok(()) => {
                    reserved.seq = None;
                    return Ok(RdkafkaDelivery {
                        ledger: ledger.clone(),
                        seq,
                    });
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err((e, _)) => return Err(rd_err(format!("producing to {topic:?}"), e)),
            }
        }
    }

    async fn flush_producer(&self, timeout: Duration) -> Result<()> {
        let p = self.producer()?.clone();
        blocking("flushing", move || p.flush(timeout)).await
    }

    /// Flushes (bounded), then destroys the producer off the runtime;
    /// records still without a report fail.
    async fn close_producer(&mut self, flush: Option<Duration>) -> Result<()> {
        // The topic handle first: it holds the client.
        drop(self.topic.take());
        let mut result = Ok(());
        if let Some(p) = self.producer.take() {
            result = blocking("closing the producer", move || {
                let r = match flush {
                    Some(timeout) => p.flush(timeout),
                    None => Ok(()),
                };
                drop(p);
                r
            })
            .await;
        }
        self.reports
            .ledger
            .fail_pending("the producer was closed before the delivery report");
        result
    }
}

/// Dropped without `close`: librdkafka purges what is still queued (its
/// reports fail those records); a record left without a report fails too,
/// so no delivery handle waits for ever.
impl Drop for RdkafkaProducer {
    fn drop(&mut self) {
        drop(self.topic.take());
        drop(self.producer.take());
        self.reports
            .ledger
            .fail_pending("the producer was dropped before the delivery report");
    }
}

/// A reserved ledger slot, released on drop unless the record was queued
/// (`seq` taken): a dropped or failed send leaves no slot behind.
struct Reserved<'a> {
    ledger: &'a Ledger,
    seq: Option<usize>,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if let Some(seq) = self.seq {
            self.ledger.release(seq);
        }
    }
}

impl ProducerBackend for RdkafkaProducer {
    type Delivery = RdkafkaDelivery;

    async fn connect(&mut self) -> Result<()> {
        if self.producer.is_none() {
            let p: RdProducer = self
                .config
                .create_with_context(self.reports.clone())
                .map_err(|e| rd_err("creating the producer", e))?;
            self.producer = Some(Arc::new(p));
        }
        Ok(())
    }

    /// Cancel safe only between records: a dropped future may have queued
    /// its record (whose delivery is then not observed).
    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<RdkafkaDelivery> {
        self.send_record(topic, partition, message).await
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        self.flush_producer(timeout).await
    }

    async fn close(&mut self, timeout: Duration) -> Result<()> {
        self.close_producer(Some(timeout)).await
    }
}

/// A librdkafka delivery, as a [`DeliveryOutcome`]: a sequence number into
/// its producer's ledger. Dropping it does not affect the delivery.
pub struct RdkafkaDelivery {
    ledger: Arc<Ledger>,
    seq: usize,
}

impl Future for RdkafkaDelivery {
    type Output = DeliveryOutcome;
    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<DeliveryOutcome> {
        self.ledger.poll(self.seq, cx)
    }
}

impl Drop for RdkafkaDelivery {
    fn drop(&mut self) {
        self.ledger.forget(self.seq);
    }
}

/// Partition counts of the topics produced to with an explicit partition.
#[derive(Default)]
struct PartitionCounts(Mutex<BTreeMap<String, i32>>);

/// An explicit partition must exist, as the native producer checks against
/// its metadata (librdkafka would queue the record until it times out).
async fn check_partition(
    producer: &Arc<RdProducer>,
    failure: &SecurityFailure,
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
    let n = blocking_retried(failure, &|| {}, "fetching metadata", bound, move || {
        let md = p.client().fetch_metadata(Some(&t), bound.min(LOOKUP_ATTEMPT))?;
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

/// What librdkafka's statistics said about the producer identity.
#[derive(Default)]
struct IdentityCell {
    /// (producer id, epoch) once `eos.idemp_state` is `Assigned`.
    identity: Mutex<Option<(i64, i16)>>,
    ticks: AtomicU64,
    tick: Notify,
}

/// How often librdkafka emits statistics for the transactional producer.
const STATISTICS_INTERVAL: Duration = Duration::from_millis(100);
/// The bound on waiting for a statistics tick with an identity.
const IDENTITY_WAIT: Duration = Duration::from_secs(5);

/// [`TransactionalProducerBackend`] over librdkafka (`transactional.id`).
pub struct RdkafkaTransactionalProducer {
    options_config: RdConfig,
    inner: RdkafkaProducer,
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
        let mut inner = RdkafkaProducer::with_config(config.clone());
        inner.reports.oauth = OAuthHook::of(&options.security);
        Ok(RdkafkaTransactionalProducer {
            options_config: config,
            inner,
            transactional_id: None,
            identity_fresh: false,
        })
    }

    fn producer(&self) -> Result<Arc<RdProducer>> {
        self.inner.producer.clone().ok_or(ConnectorError::CallOrder {
            call: "rdkafka transactional producer backend",
            problem: "before init_transactions",
        })
    }

    /// Waits (bounded) for a statistics tick later than `after` that
    /// carries an assigned identity.
    async fn fresh_identity(&self, after: u64) -> Result<(i64, i16)> {
        let cell = &self.inner.reports.cell;
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

    /// Cancel safe only between records, as [`RdkafkaProducer::send`].
    async fn send(&self, topic: &str, partition: Option<i32>, message: KafkaMessage) -> Result<RdkafkaDelivery> {
        // Before init_transactions is a call-order error, as natively.
        self.producer()?;
        self.inner.send_record(topic, partition, message).await
    }

    async fn flush(&self, timeout: Duration) -> Result<()> {
        self.inner.flush_producer(timeout).await
    }

    /// Aborts an open transaction (the open tail) by closing: librdkafka
    /// aborts what is open when the producer is destroyed.
    async fn close(&mut self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        self.identity_fresh = false;
        self.inner.close_producer(None).await
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
        // A producer of an earlier init is destroyed first (off the runtime).
        self.inner.close_producer(None).await?;
        let producer: RdProducer = config
            .create_with_context(self.inner.reports.clone())
            .map_err(|e| rd_err("creating the transactional producer", e))?;
        let producer = Arc::new(producer);
        let p = producer.clone();
        let timeout = transaction_timeout;
        blocking_guarded(&self.inner.reports.failure, &|| {}, "init_transactions", move || {
            p.init_transactions(timeout)
        })
        .await?;
        let after = self.inner.reports.cell.ticks.load(Ordering::Acquire);
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
        // Before init_transactions is a call-order error, as natively.
        let producer = self.producer()?;
        if !self.identity_fresh {
            return Err(ConnectorError::Rdkafka {
                operation: "begin_transaction".into(),
                message: "the producer identity is not known (no statistics tick since the last abort); refusing \
                          a transaction whose resume handle would be stale"
                    .into(),
            });
        }
        producer.begin_transaction().map_err(|e| rd_err("begin_transaction", e))
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
        let after = self.inner.reports.cell.ticks.load(Ordering::Acquire);
        self.fresh_identity(after).await?;
        self.identity_fresh = true;
        Ok(())
    }

    async fn send_offsets(
        &mut self,
        offsets: &[TopicPartitionOffset],
        metadata: &GroupMetadataHandle,
        timeout: Duration,
    ) -> Result<()> {
        let GroupMetadataHandle::Rdkafka(metadata) = metadata else {
            return Err(ConnectorError::CallOrder {
                call: "send_offsets",
                problem: "with the native client's group metadata (the rdkafka producer takes the rdkafka \
                          consumer's)",
            });
        };
        let p = self.producer()?;
        let tpl = offset_list(offsets)?;
        let cgm = metadata.inner.clone();
        blocking("send_offsets_to_transaction", move || {
            p.send_offsets_to_transaction(&tpl, &cgm, timeout)
        })
        .await
    }

    /// From the last statistics tick; `None` before `init_transactions`.
    fn identity(&self) -> Option<ResumeHandle> {
        let id = self.transactional_id.as_ref()?;
        let (pid, epoch) = (*self
            .inner
            .reports
            .cell
            .identity
            .lock()
            .unwrap_or_else(|p| p.into_inner()))?;
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
    fn every_client_disables_nagle_unless_a_verbatim_property_says_otherwise() {
        let base = |verbatim: &[(&str, &str)]| {
            let verbatim = Passthrough(verbatim.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
            base_config(
                "127.0.0.1:1",
                "t",
                &SecurityConfig::default(),
                &ClientTuning::default(),
                &verbatim,
            )
            .unwrap()
        };
        assert_eq!(base(&[]).get("socket.nagle.disable"), Some("true"));
        assert_eq!(
            base(&[("socket.nagle.disable", "false")]).get("socket.nagle.disable"),
            Some("false")
        );
    }

    #[test]
    fn identity_comes_from_the_statistics_json() {
        let ctx = ProducerReports::default();
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

    fn poll_once(ledger: &Ledger, seq: usize) -> std::task::Poll<DeliveryOutcome> {
        ledger.poll(seq, &mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn the_ledger_hands_each_outcome_to_its_record_and_frees_its_slots() {
        let ledger = Ledger::default();
        let seqs: Vec<usize> = (0..4).map(|_| ledger.reserve()).collect();
        assert_eq!(seqs, [0, 1, 2, 3]);
        // Reports arrive out of order (different partitions).
        ledger.report(
            2,
            Ok(PartitionOffset {
                partition: 1,
                offset: 7,
            }),
        );
        ledger.report(
            0,
            Ok(PartitionOffset {
                partition: 0,
                offset: 5,
            }),
        );
        assert!(poll_once(&ledger, 1).is_pending());
        assert_eq!(ledger.state().waiting.len(), 1, "the waiting handle is registered once");
        assert!(poll_once(&ledger, 1).is_pending());
        assert_eq!(ledger.state().waiting.len(), 1);
        ledger.report(
            1,
            Err(ConnectorError::Rdkafka {
                operation: "delivery".into(),
                message: "MSG_TIMED_OUT".into(),
            }),
        );
        assert!(ledger.state().waiting.is_empty(), "the report woke the waiting handle");
        match poll_once(&ledger, 1) {
            std::task::Poll::Ready(Err(e)) => assert!(e.to_string().contains("MSG_TIMED_OUT"), "{e}"),
            other => panic!("record 1: {:?}", other.map(|r| r.map_err(|e| e.to_string()))),
        }
        assert!(matches!(
            poll_once(&ledger, 2),
            std::task::Poll::Ready(Ok(PartitionOffset {
                partition: 1,
                offset: 7
            }))
        ));
        // Slot 0 is still unclaimed: nothing is freed before it.
        assert_eq!(ledger.state().slots.len(), 4);
        assert!(matches!(
            poll_once(&ledger, 0),
            std::task::Poll::Ready(Ok(PartitionOffset {
                partition: 0,
                offset: 5
            }))
        ));
        assert_eq!(ledger.state().base, 3, "slots 0-2 freed once taken");
        // A dropped handle's slot is freed by its report; a record that was
        // never queued frees its slot at once.
        ledger.forget(3);
        let never_queued = ledger.reserve();
        ledger.release(never_queued);
        assert_eq!(ledger.state().slots.len(), 2);
        ledger.report(
            3,
            Ok(PartitionOffset {
                partition: 0,
                offset: 6,
            }),
        );
        assert!(ledger.state().slots.is_empty());
        assert_eq!(ledger.state().base, 5);
        // A late report for a freed slot is ignored.
        ledger.report(
            3,
            Ok(PartitionOffset {
                partition: 0,
                offset: 6,
            }),
        );
        assert!(ledger.state().slots.is_empty());
    }

    #[test]
    fn records_without_a_report_fail_when_the_producer_is_gone() {
        let ledger = Ledger::default();
        let (a, b) = (ledger.reserve(), ledger.reserve());
        ledger.report(
            a,
            Ok(PartitionOffset {
                partition: 0,
                offset: 1,
            }),
        );
        assert!(poll_once(&ledger, b).is_pending());
        ledger.fail_pending("the producer was closed before the delivery report");
        assert!(ledger.state().waiting.is_empty(), "waiters are woken");
        assert!(
            matches!(
                poll_once(&ledger, a),
                std::task::Poll::Ready(Ok(PartitionOffset {
                    partition: 0,
                    offset: 1
                }))
            ),
            "a report that came stays"
        );
        match poll_once(&ledger, b) {
            std::task::Poll::Ready(Err(e)) => assert!(e.to_string().contains("closed before"), "{e}"),
            _ => panic!("record b must fail"),
        }
        assert!(ledger.state().slots.is_empty());
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
