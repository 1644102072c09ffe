//! Parsing and validating every option the spec names, per factory.
//!
//! Input is the build context's string parameters (a table's `WITH`
//! clause). Each factory reads a fixed set of options; anything else is an
//! [`ConnectorError::UnknownOption`] with a "did you mean" suggestion. Each
//! bad value is an [`ConnectorError::InvalidOption`] naming the option and
//! what it accepts. `kafka.<property>` keys are librdkafka property names
//! passed through: those the native client supports are mapped onto it
//! (onto the same setting as their alias, when there is one: giving both
//! with different values is an error); every other one is refused by name.
//!
//! A namespace module: its items are reached only as `clink_kafka::connector::options::*` and are
//! not re-exported elsewhere (the typed options of every factory, one vocabulary apart from the operators).

use std::collections::BTreeMap;
use std::time::Duration;

use clink_kafka_wire::compression::Compression;

use super::error::{closest, ConnectorError, Result};
use super::format::FormatOptions;
use super::security::{self, SecurityConfig, SecurityInputs, SECURITY_OPTIONS};
use crate::client::{Acks, ClientConfig, ConsumerConfig, IsolationLevel, ProducerConfig};

/// The factory shapes, each with its option set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FactoryKind {
    /// `kafka_message_source`.
    MessageSource,
    /// `kafka_text_source` / `kafka_source_string`.
    TextSource,
    /// `kafka_message_sink`.
    MessageSink,
    /// `kafka_text_sink` / `kafka_sink_string`.
    TextSink,
    /// `kafka_upsert_sink_string`.
    UpsertSink,
    /// `kafka_2pc_sink_string`: the two-phase-commit (transactional) sink.
    TwoPhaseCommitSink,
}

const COMMON: &[&str] = &["brokers", "topic", "client_id", "metric_prefix", "backend"];
const SOURCE: &[&str] = &[
    "group_id",
    "auto_offset_reset",
    "batch_max_wait_ms",
    "poll_timeout",
    "max_batch_size",
    "partition_discovery_interval",
    "commit_mode",
    "enable_debug",
];
const SINK: &[&str] = &[
    "acks",
    "compression",
    "linger_ms",
    "produce_timeout",
    "flush_timeout",
    "fixed_partition",
];
/// The transactional sink's sink options: no `acks` (a transactional
/// producer is idempotent with acks=all, always).
const TWO_PC_SINK: &[&str] = &[
    "compression",
    "linger_ms",
    "produce_timeout",
    "flush_timeout",
    "fixed_partition",
];
/// The transactional sink's own options (the spec's table), plus
/// `receipt_dir` (overrides where commit receipts and unresolved-orphan
/// markers live: by default the build context's
/// `<checkpoint_dir>/_jobs/<job_id>/receipts`) and `receipts_in_memory`
/// (the explicit opt-in to receipts that die with the process).
const TWO_PC: &[&str] = &[
    "transactional_id",
    "transaction_timeout_ms",
    "commit_group",
    "replay_suppression",
    "receipt_dir",
    "receipts_in_memory",
    "two_phase_commit",
];
const STRING_FORMAT: &[&str] = &[
    "format",
    "schema_registry_url",
    "schema_registry_subject",
    "schema_registry_auto_register",
    "schema_registry_value_schema",
    "schema_registry_basic_auth_user_info",
    "schema_registry_bearer_auth_token",
    "schema_registry_ssl_ca_location",
    "schema_registry_timeout_ms",
];

impl FactoryKind {
    /// The factory's primary registered name (for messages).
    pub fn name(self) -> &'static str {
        match self {
            FactoryKind::MessageSource => "kafka_message_source",
            FactoryKind::TextSource => "kafka_text_source",
            FactoryKind::MessageSink => "kafka_message_sink",
            FactoryKind::TextSink => "kafka_text_sink",
            FactoryKind::UpsertSink => "kafka_upsert_sink_string",
            FactoryKind::TwoPhaseCommitSink => "kafka_2pc_sink_string",
        }
    }

    /// Whether the factory builds a source (the message or text source).
    pub fn is_source(self) -> bool {
        matches!(self, FactoryKind::MessageSource | FactoryKind::TextSource)
    }

    /// Every option this factory reads (the `kafka.` passthrough aside).
    pub fn options(self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = COMMON.iter().chain(SECURITY_OPTIONS).copied().collect();
        match self {
            FactoryKind::MessageSource => v.extend(SOURCE),
            FactoryKind::TextSource => {
                v.extend(SOURCE);
                v.extend(STRING_FORMAT);
                v.push("decode_error");
            }
            FactoryKind::MessageSink => v.extend(SINK),
            FactoryKind::TextSink => {
                v.extend(SINK);
                v.extend(STRING_FORMAT);
            }
            FactoryKind::UpsertSink => {
                v.extend(SINK);
                v.extend(STRING_FORMAT);
                v.push("primary_key");
            }
            FactoryKind::TwoPhaseCommitSink => {
                v.extend(TWO_PC_SINK);
                v.extend(STRING_FORMAT);
                v.extend(TWO_PC);
            }
        }
        v
    }

    fn default_client_id(self) -> &'static str {
        match self {
            k if k.is_source() => "clink-source",
            FactoryKind::TwoPhaseCommitSink => "clink-sink-2pc",
            _ => "clink-sink",
        }
    }
}

/// `backend`: which Kafka client the connector runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum Backend {
    /// The pure-Rust client (`crate::client`), the default.
    #[default]
    Native,
    /// librdkafka through the `rdkafka` crate (cargo feature `rdkafka`).
    Rdkafka,
}

/// The values `backend` accepts, for errors.
pub const BACKENDS_ALLOWED: &str = "one of native, rdkafka";

impl Backend {
    /// The option value: `native` or `rdkafka`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Rdkafka => "rdkafka",
        }
    }

    /// Parses `value` given under `option` (case-insensitive).
    pub fn parse(option: &str, value: &str) -> Result<Backend> {
        match value.trim().to_ascii_lowercase().as_str() {
            "native" => Ok(Backend::Native),
            "rdkafka" => Ok(Backend::Rdkafka),
            _ => Err(ConnectorError::invalid(option, value, BACKENDS_ALLOWED)),
        }
    }

    /// Whether this binary can run the backend: `rdkafka` needs the cargo
    /// feature of the same name. The error names the option and the feature.
    pub fn check_available(self, option: &str, value: &str) -> Result<()> {
        if self == Backend::Rdkafka && !cfg!(feature = "rdkafka") {
            return Err(ConnectorError::MissingFeature {
                option: option.to_owned(),
                value: value.to_owned(),
                feature: "rdkafka",
            });
        }
        Ok(())
    }
}

/// `kafka.<property>` settings the native table does not map, handed to
/// librdkafka verbatim on the `rdkafka` backend (after the weakness
/// checks). Keys are librdkafka property names (without `kafka.`). Debug
/// hides the value of every secret-looking property.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Passthrough(pub BTreeMap<String, String>);

impl std::fmt::Debug for Passthrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.0 {
            if security::is_secret_option(k) {
                m.entry(k, &"***");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

/// Where a partition with no restored or committed offset starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// Start at the partition's log start offset (the default).
    #[default]
    Earliest,
    /// Start at the partition's end: only records produced after the assignment.
    Latest,
    /// No fallback: such a partition is an error naming it.
    None,
}

impl AutoOffsetReset {
    /// The option value: `earliest`, `latest` or `none`.
    pub fn name(self) -> &'static str {
        match self {
            AutoOffsetReset::Earliest => "earliest",
            AutoOffsetReset::Latest => "latest",
            AutoOffsetReset::None => "none",
        }
    }
}

/// What the string channel does with a value it cannot decode (not UTF-8,
/// or with `format = avro` not decodable): stop, or skip and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DecodeErrorPolicy {
    /// Stop with an error naming the record (the default).
    #[default]
    Fail,
    /// Skip the record and count it.
    Skip,
}

/// Native client settings reachable only through the passthrough; `None`
/// keeps the client's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTuning {
    /// `kafka.socket.connection.setup.timeout.ms`: the connect bound.
    pub connect_timeout: Option<Duration>,
    /// `kafka.socket.timeout.ms` (or `request.timeout.ms` on a sink): the bound on one response.
    pub request_timeout: Option<Duration>,
    /// `kafka.retry.backoff.ms`: the first retry delay.
    pub retry_backoff: Option<Duration>,
    /// `kafka.retry.backoff.max.ms`: the cap on the retry delay.
    pub retry_backoff_max: Option<Duration>,
    /// `kafka.receive.message.max.bytes`: the largest response frame accepted, in bytes.
    pub max_frame_size: Option<usize>,
    /// `kafka.topic.metadata.propagation.max.ms`: how long a missing topic or leader is retried.
    pub metadata_max_wait: Option<Duration>,
    /// `kafka.default.api.timeout.ms`: how long opening keeps retrying the
    /// bootstrap list (`ClientConfig::bootstrap_timeout`, 60 s; 0 = one pass).
    pub bootstrap_timeout: Option<Duration>,
}

/// Consumer settings reachable only through the passthrough.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerTuning {
    /// `kafka.fetch.wait.max.ms`: how long the broker may hold a fetch for `min_bytes`.
    pub max_wait: Option<Duration>,
    /// `kafka.fetch.min.bytes`: bytes a fetch waits for.
    pub min_bytes: Option<i32>,
    /// `kafka.fetch.max.bytes`: the bound on one fetch answer, in bytes.
    pub max_bytes: Option<i32>,
    /// `kafka.max.partition.fetch.bytes`: the bound per partition in one fetch answer, in bytes.
    pub partition_max_bytes: Option<i32>,
    /// `kafka.check.crcs`: verify each batch's CRC32C.
    pub check_crcs: Option<bool>,
    /// `kafka.isolation.level`: `read_committed` or `read_uncommitted`.
    pub isolation: Option<IsolationLevel>,
    /// `kafka.max.poll.records` (Java's name): records per consumer poll.
    pub max_poll_records: Option<usize>,
    /// `kafka.max.poll.bytes`: bytes of keys, values and headers per
    /// consumer poll (a larger record still arrives, alone).
    pub max_poll_bytes: Option<usize>,
    /// `kafka.max.batch.inflate.bytes`: the native consumer's inflation
    /// bound (see `ConsumerConfig::max_batch_inflate`).
    pub max_batch_inflate: Option<usize>,
    /// `kafka.enable.fetch.sessions`: KIP-227 incremental fetch sessions.
    pub fetch_sessions: Option<bool>,
    /// `kafka.fetch.throttle.max.ms`: the cap on a broker's throttle time.
    pub max_throttle: Option<Duration>,
    /// `kafka.client.rack`: fetch from the replica in this rack (KIP-392).
    pub client_rack: Option<String>,
}

/// Producer settings reachable only through the passthrough.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerTuning {
    /// `kafka.batch.size`: bytes per partition batch.
    pub batch_size: Option<usize>,
    /// `kafka.queue.buffering.max.kbytes` (given in KiB, kept in bytes): records waiting to be sent.
    pub buffer_memory: Option<usize>,
    /// `kafka.message.max.bytes`: the largest record batch sent, in bytes.
    pub max_record_size: Option<usize>,
    /// `kafka.message.timeout.ms` / `delivery.timeout.ms`: the bound on a record's delivery, retries included.
    pub delivery_timeout: Option<Duration>,
    /// `kafka.request.timeout.ms`: the bound on one Produce answer.
    pub ack_timeout: Option<Duration>,
    /// `kafka.enable.idempotence` (needs `acks = all`).
    pub idempotent: Option<bool>,
    /// `kafka.compression.level`: the codec's level (-1: its default), as
    /// librdkafka takes it; which levels each codec has:
    /// [`Compression::accepted_levels`].
    pub compression_level: Option<i32>,
}

/// A source's options (`KafkaSource::Options` in the spec).
#[derive(Clone, Debug)]
pub struct SourceOptions {
    /// `brokers`: bootstrap brokers, `host:port` comma-separated.
    pub brokers: String,
    /// `topic`: the topic read.
    pub topic: String,
    /// `group_id`: the group whose committed offsets are read at a fresh start (never written).
    pub group_id: String,
    /// `client_id`: sent in every request header.
    pub client_id: String,
    /// `auto_offset_reset`: where a partition with no restored or committed offset starts.
    pub auto_offset_reset: AutoOffsetReset,
    /// Bound on forming one whole batch; zero disables it.
    pub batch_max_wait: Duration,
    /// Bound on waiting for a batch's first record.
    pub poll_timeout: Duration,
    /// `max_batch_size`: the most records in one emitted batch.
    pub max_batch_size: usize,
    /// Metadata re-poll period; zero disables discovery.
    pub partition_discovery_interval: Duration,
    /// `metric_prefix`: the prefix of the source's metric names (`None`: the default prefix).
    pub metric_prefix: Option<String>,
    /// `enable_debug`: log every request and answer at debug level.
    pub enable_debug: bool,
    /// `decode_error`: what the text source does with a value it cannot decode.
    pub decode_error: DecodeErrorPolicy,
    /// `format = avro|protobuf|json-schema` and its registry (text source only).
    pub value_format: Option<FormatOptions>,
    /// Deterministic ownership: this subtask owns `p % source_parallelism == subtask_index`.
    pub subtask_index: u32,
    /// How many source subtasks share the topic's partitions.
    pub source_parallelism: u32,
    /// The security options (SASL, TLS).
    pub security: SecurityConfig,
    /// Client settings from the `kafka.` passthrough.
    pub client: ClientTuning,
    /// Consumer settings from the `kafka.` passthrough.
    pub consumer: ConsumerTuning,
    /// Bounded retries of the group committed-offset lookup.
    pub committed_lookup_attempts: u32,
    /// `backend`.
    pub backend: Backend,
    /// `kafka.<property>` settings for librdkafka verbatim (rdkafka backend only).
    pub rdkafka_properties: Passthrough,
    /// `kafka.<property>` settings outside the connector's own mapping that
    /// the client's table applies (native backend): `connections.max.idle.ms`,
    /// `max.in.flight.requests.per.connection`, `debug`, ….
    pub native_properties: Vec<(&'static str, String)>,
}

impl SourceOptions {
    /// The struct defaults for `brokers` and `topic`: a standalone source.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> Self {
        SourceOptions {
            brokers: brokers.into(),
            topic: topic.into(),
            group_id: "clink".into(),
            client_id: "clink-source".into(),
            auto_offset_reset: AutoOffsetReset::Earliest,
            batch_max_wait: Duration::from_millis(5),
            poll_timeout: Duration::from_millis(100),
            max_batch_size: 2048,
            partition_discovery_interval: Duration::from_secs(30),
            metric_prefix: None,
            enable_debug: false,
            decode_error: DecodeErrorPolicy::Fail,
            value_format: None,
            subtask_index: 0,
            source_parallelism: 1,
            security: SecurityConfig::default(),
            client: ClientTuning::default(),
            consumer: ConsumerTuning::default(),
            committed_lookup_attempts: 3,
            backend: Backend::Native,
            rdkafka_properties: Passthrough::default(),
            native_properties: Vec::new(),
        }
    }

    /// Whether this subtask owns `partition`.
    pub fn owns(&self, partition: i32) -> bool {
        partition >= 0 && (partition as u32) % self.source_parallelism.max(1) == self.subtask_index
    }

    /// The native client configuration: `enable_debug` turns on its
    /// protocol log, `metric_prefix` names its series.
    pub fn client_config(&self) -> Result<ClientConfig> {
        let mut c = client_config(&self.brokers, &self.client_id, &self.security, &self.client)?;
        apply_native(
            &self.native_properties,
            &mut c,
            &mut Default::default(),
            &mut Default::default(),
        );
        c.debug |= self.enable_debug;
        if let Some(p) = &self.metric_prefix {
            c.metric_prefix = p.clone();
        }
        Ok(c)
    }

    /// The native consumer configuration. Out-of-range offsets are errors
    /// (no silent reset): start offsets are resolved before assignment.
    /// read_committed unless `kafka.isolation.level=read_uncommitted`, as
    /// librdkafka's consumer (the rdkafka backend is given it explicitly).
    pub fn consumer_config(&self) -> ConsumerConfig {
        // Mutating the default (not a struct literal) keeps this compiling
        // when the client grows settings.
        let mut c = ConsumerConfig::default();
        let t = &self.consumer;
        c.isolation = t.isolation.unwrap_or(IsolationLevel::ReadCommitted);
        if let Some(v) = t.max_wait {
            c.max_wait = v;
        }
        if let Some(v) = t.min_bytes {
            // Validated positive (i32_in), so it fits.
            c.min_bytes = usize::try_from(v).unwrap_or(0);
        }
        if let Some(v) = t.max_bytes {
            // Validated positive (i32_in), so it fits.
            c.max_bytes = usize::try_from(v).unwrap_or(0);
        }
        if let Some(v) = t.partition_max_bytes {
            // Validated positive (i32_in), so it fits.
            c.partition_max_bytes = usize::try_from(v).unwrap_or(0);
        }
        if let Some(v) = t.check_crcs {
            c.check_crcs = v;
        }
        if let Some(v) = t.max_poll_records {
            c.max_poll_records = v;
        }
        if let Some(v) = t.max_poll_bytes {
            c.max_poll_bytes = v;
        }
        if let Some(v) = t.max_batch_inflate {
            c.max_batch_inflate = v;
        }
        if let Some(v) = t.fetch_sessions {
            c.fetch_sessions = v;
        }
        if let Some(v) = t.max_throttle {
            c.max_throttle = v;
        }
        if let Some(v) = &t.client_rack {
            c.client_rack = Some(v.clone());
        }
        apply_native(
            &self.native_properties,
            &mut Default::default(),
            &mut c,
            &mut Default::default(),
        );
        c.auto_offset_reset = None;
        c
    }
}

/// A sink's options (`KafkaSink::Options` in the spec).
#[derive(Clone, Debug)]
pub struct SinkOptions {
    /// `brokers`: bootstrap brokers, `host:port` comma-separated.
    pub brokers: String,
    /// `topic`: the topic written.
    pub topic: String,
    /// `client_id`: sent in every request header.
    pub client_id: String,
    /// `acks`: how many replicas acknowledge a write.
    pub acks: Acks,
    /// `compression`: the batch codec.
    pub compression: Compression,
    /// `linger_ms`: how long a batch waits for more records.
    pub linger: Duration,
    /// Bound on handing one record to the producer (metadata, buffer space).
    pub produce_timeout: Duration,
    /// Bound on a flush (and so on a barrier).
    pub flush_timeout: Duration,
    /// `fixed_partition`: every record goes to this partition (`None`: the producer's partitioner chooses).
    pub fixed_partition: Option<i32>,
    /// `metric_prefix`: the prefix of the sink's metric names (`None`: the default prefix).
    pub metric_prefix: Option<String>,
    /// `format = avro|protobuf|json-schema` and its registry (string sinks only).
    pub value_format: Option<FormatOptions>,
    /// The subtask this sink runs as (a metrics label; set by the registry).
    pub subtask_index: u32,
    /// The security options (SASL, TLS).
    pub security: SecurityConfig,
    /// Client settings from the `kafka.` passthrough.
    pub client: ClientTuning,
    /// Producer settings from the `kafka.` passthrough.
    pub producer: ProducerTuning,
    /// `backend`.
    pub backend: Backend,
    /// `kafka.<property>` settings for librdkafka verbatim (rdkafka backend only).
    pub rdkafka_properties: Passthrough,
    /// `kafka.<property>` settings outside the connector's own mapping that
    /// the client's table applies (native backend): `connections.max.idle.ms`,
    /// `max.in.flight.requests.per.connection`, `debug`, ….
    pub native_properties: Vec<(&'static str, String)>,
}

impl SinkOptions {
    /// The struct defaults for `brokers` and `topic`.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>) -> Self {
        SinkOptions {
            brokers: brokers.into(),
            topic: topic.into(),
            client_id: "clink-sink".into(),
            acks: Acks::All,
            compression: Compression::None,
            linger: Duration::from_millis(5),
            produce_timeout: Duration::from_millis(30_000),
            flush_timeout: Duration::from_millis(30_000),
            fixed_partition: None,
            metric_prefix: None,
            value_format: None,
            subtask_index: 0,
            security: SecurityConfig::default(),
            client: ClientTuning::default(),
            producer: ProducerTuning::default(),
            backend: Backend::Native,
            rdkafka_properties: Passthrough::default(),
            native_properties: Vec::new(),
        }
    }

    /// The native client's configuration: brokers, client id, security, tuning and applied `kafka.` properties.
    pub fn client_config(&self) -> Result<ClientConfig> {
        let mut c = client_config(&self.brokers, &self.client_id, &self.security, &self.client)?;
        apply_native(
            &self.native_properties,
            &mut c,
            &mut Default::default(),
            &mut Default::default(),
        );
        if let Some(p) = &self.metric_prefix {
            c.metric_prefix = p.clone();
        }
        Ok(c)
    }

    /// The native producer's configuration; refuses idempotence without `acks = all`.
    pub fn producer_config(&self) -> Result<ProducerConfig> {
        let t = &self.producer;
        let idempotent = match t.idempotent {
            Some(true) if self.acks != Acks::All => {
                return Err(ConnectorError::ConflictingOptions {
                    message: "kafka.enable.idempotence=true needs acks='all'".into(),
                })
            }
            Some(v) => v,
            None => self.acks == Acks::All,
        };
        let mut c = ProducerConfig {
            acks: self.acks,
            idempotent,
            compression: self.compression,
            linger: self.linger,
            ..ProducerConfig::default()
        };
        if let Some(v) = t.batch_size {
            c.batch_size = v;
        }
        if let Some(v) = t.compression_level {
            c.compression_level = v;
        }
        if let Some(v) = t.buffer_memory {
            c.buffer_memory = v;
        }
        if let Some(v) = t.max_record_size {
            c.max_record_size = v;
        }
        if let Some(v) = t.ack_timeout {
            c.ack_timeout = v;
        }
        if let Some(v) = t.delivery_timeout {
            c.delivery_timeout = v;
        }
        apply_native(
            &self.native_properties,
            &mut Default::default(),
            &mut Default::default(),
            &mut c,
        );
        if c.idempotent && c.max_in_flight > 5 {
            return Err(ConnectorError::ConflictingOptions {
                message: "kafka.max.in.flight.requests.per.connection above 5 needs kafka.enable.idempotence=false \
                          (the broker deduplicates an idempotent producer's last 5 batches)"
                    .into(),
            });
        }
        Ok(c)
    }
}

/// The upsert sink's options.
#[derive(Clone, Debug)]
pub struct UpsertOptions {
    /// The sink's options (the upsert sink writes through a plain sink).
    pub sink: SinkOptions,
    /// The JSON fields whose values form the message key, in order.
    pub primary_key: Vec<String>,
}

fn client_config(brokers: &str, client_id: &str, security: &SecurityConfig, t: &ClientTuning) -> Result<ClientConfig> {
    let mut c = ClientConfig::new(brokers);
    c.client_id = client_id.to_owned();
    if let Some(v) = t.connect_timeout {
        c.connect_timeout = v;
    }
    if let Some(v) = t.request_timeout {
        c.request_timeout = v;
    }
    if let Some(v) = t.retry_backoff {
        c.retry_backoff = v;
    }
    if let Some(v) = t.retry_backoff_max {
        c.retry_backoff_max = v;
    }
    if let Some(v) = t.max_frame_size {
        c.max_frame_size = v;
    }
    if let Some(v) = t.metadata_max_wait {
        c.metadata_max_wait = v;
    }
    if let Some(v) = t.bootstrap_timeout {
        c.bootstrap_timeout = v;
    }
    security.apply_to(&mut c)?;
    Ok(c)
}

// ---------------------------------------------------------------------------
// The passthrough table.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Any,
    Source,
    Sink,
    /// Only `kafka_2pc_sink_string`.
    Transactional,
}

/// librdkafka property → (canonical setting, which factories read it).
/// Canonical names are the spec's alias where one exists, else the
/// librdkafka property itself.
fn passthrough(property: &str) -> Option<(&'static str, Scope)> {
    use Scope::*;
    Some(match property {
        "client.id" => ("client_id", Any),
        "bootstrap.servers" | "metadata.broker.list" => ("brokers", Any),
        "socket.connection.setup.timeout.ms" => ("socket.connection.setup.timeout.ms", Any),
        "socket.timeout.ms" => ("socket.timeout.ms", Any),
        "retry.backoff.ms" => ("retry.backoff.ms", Any),
        "retry.backoff.max.ms" => ("retry.backoff.max.ms", Any),
        "receive.message.max.bytes" => ("receive.message.max.bytes", Any),
        "topic.metadata.propagation.max.ms" => ("topic.metadata.propagation.max.ms", Any),
        "default.api.timeout.ms" => ("default.api.timeout.ms", Any),
        "group.id" => ("group_id", Source),
        "auto.offset.reset" => ("auto_offset_reset", Source),
        "fetch.wait.max.ms" => ("fetch.wait.max.ms", Source),
        "fetch.min.bytes" => ("fetch.min.bytes", Source),
        "fetch.max.bytes" => ("fetch.max.bytes", Source),
        "max.partition.fetch.bytes" | "fetch.message.max.bytes" => ("max.partition.fetch.bytes", Source),
        "check.crcs" => ("check.crcs", Source),
        "isolation.level" => ("isolation.level", Source),
        "enable.auto.commit" => ("enable.auto.commit", Source),
        // The native consumer's own settings (librdkafka has none of these:
        // refused on the rdkafka backend, see `native_only`).
        "max.poll.records" => ("max.poll.records", Source),
        "max.poll.bytes" => ("max.poll.bytes", Source),
        "max.batch.inflate.bytes" => ("max.batch.inflate.bytes", Source),
        "enable.fetch.sessions" => ("enable.fetch.sessions", Source),
        "fetch.throttle.max.ms" => ("fetch.throttle.max.ms", Source),
        "client.rack" => ("client.rack", Source),
        "linger.ms" | "queue.buffering.max.ms" => ("linger_ms", Sink),
        "acks" | "request.required.acks" => ("acks", Sink),
        "compression.codec" | "compression.type" => ("compression", Sink),
        "compression.level" => ("compression.level", Sink),
        "batch.size" => ("batch.size", Sink),
        "queue.buffering.max.kbytes" => ("queue.buffering.max.kbytes", Sink),
        "message.max.bytes" => ("message.max.bytes", Sink),
        "message.timeout.ms" | "delivery.timeout.ms" => ("message.timeout.ms", Sink),
        "request.timeout.ms" => ("request.timeout.ms", Sink),
        "enable.idempotence" => ("enable.idempotence", Sink),
        "transactional.id" => ("transactional_id", Transactional),
        "transaction.timeout.ms" => ("transaction_timeout_ms", Transactional),
        _ => return None,
    })
}

fn unsupported_reason(property: &str) -> String {
    match property {
        "enable.auto.offset.store"
        | "auto.commit.interval.ms"
        | "group.instance.id"
        | "session.timeout.ms"
        | "max.poll.interval.ms"
        | "partition.assignment.strategy" => {
            "the source assigns partitions itself and never joins or commits to a consumer group; the engine's \
             checkpoints are the resume authority"
                .into()
        }
        p if p.starts_with("ssl.") || p.starts_with("sasl.") => {
            "this security property is not supported by the native client (supported: security.protocol, \
             sasl.mechanism(s), sasl.username, sasl.password, ssl.ca.location, ssl.certificate.location, \
             ssl.key.location, ssl.key.password, ssl.endpoint.identification.algorithm, \
             enable.ssl.certificate.verification)"
                .into()
        }
        _ => "not a librdkafka property the native client supports".into(),
    }
}

/// The passthrough properties only the native consumer has: librdkafka
/// has no such setting, so on the rdkafka backend they are refused rather
/// than silently ignored.
fn native_only(canonical: &str) -> bool {
    matches!(
        canonical,
        "max.poll.records"
            | "max.poll.bytes"
            | "max.batch.inflate.bytes"
            | "enable.fetch.sessions"
            | "fetch.throttle.max.ms"
            | "default.api.timeout.ms"
    )
}

/// On the rdkafka backend, the properties that still are not passed
/// through: the source and sinks own these settings (or they contradict
/// how the source works), whichever client runs underneath.
fn refused_on_rdkafka(property: &str) -> Option<String> {
    // The security-weakening ones first (refused in every build, so with
    // or without the `rdkafka` feature the refusal names the property).
    if let Some(reason) = security::librdkafka_passthrough_refusal(property) {
        return Some(reason);
    }
    match property {
        "enable.auto.offset.store"
        | "auto.commit.interval.ms"
        | "group.instance.id"
        | "session.timeout.ms"
        | "max.poll.interval.ms"
        | "partition.assignment.strategy"
        | "group.protocol"
        | "group.remote.assignor" => Some(unsupported_reason(property)),
        "enable.partition.eof" | "statistics.interval.ms" | "enable.auto.commit" => Some(
            "the rdkafka backend sets this itself (partition EOF events, the statistics that carry the \
             producer identity, no auto commit)"
                .into(),
        ),
        p if p.starts_with("sasl.oauthbearer") => {
            Some("SASL mechanisms other than PLAIN and SCRAM are not supported on either backend".into())
        }
        _ => None,
    }
}

/// A `kafka.<property>` the connector's own mapping does not name, by the
/// client's table of every librdkafka property
/// ([`crate::client::properties::treatment`]):
/// - unknown: refused with the closest known name (both backends);
/// - refused (security, group semantics, C callbacks): refused, with why;
/// - fixed: accepted at the native behaviour's value only;
/// - on `rdkafka`: otherwise passed to librdkafka verbatim (after the
///   refusals of [`refused_on_rdkafka`]);
/// - on `native`: ignored ones warned about (one line naming the property),
///   unsupported ones refused, applied ones kept in
///   [`Inputs::native`] and applied onto the client configurations.
fn table_property(kind: FactoryKind, inputs: &mut Inputs, key: &str, property: &str, value: &str) -> Result<()> {
    use crate::client::properties::{self as table, Role, Treatment};
    let refuse = |reason: String| ConnectorError::UnsupportedProperty {
        property: key.to_owned(),
        reason,
    };
    let Some(treatment) = table::treatment(property) else {
        return Err(refuse(match table::closest_name(property) {
            Some(s) => format!("not a librdkafka property; did you mean \"kafka.{s}\"?"),
            None => "not a librdkafka property (nor a Java client one the native client reads)".into(),
        }));
    };
    match treatment {
        Treatment::Refused(why) => return Err(refuse(why.into())),
        Treatment::Fixed { value: fixed, reason } => {
            if !value.trim().eq_ignore_ascii_case(fixed) {
                return Err(ConnectorError::invalid(key, value, format!("{fixed} ({reason})")));
            }
            // The same value on librdkafka, where it is not (always) the default.
            if inputs.backend == Backend::Rdkafka && refused_on_rdkafka(property).is_none() {
                inputs.verbatim.insert(property.to_owned(), value.to_owned());
            }
            return Ok(());
        }
        _ => {}
    }
    let librdkafka_name = table::is_librdkafka_property(property);
    let role = table::role(property).unwrap_or(Role::Any);
    let wrong = match role {
        Role::Consumer if !kind.is_source() => Some("a consumer property, and this is a sink"),
        Role::Producer if kind.is_source() => Some("a producer property, and this is a source"),
        _ => None,
    };
    if inputs.backend == Backend::Rdkafka {
        if let Some(reason) = refused_on_rdkafka(property) {
            return Err(refuse(reason));
        }
        if let Some(why) = wrong {
            return Err(refuse(why.into()));
        }
        if !librdkafka_name {
            return Err(refuse(
                "a Java client name librdkafka does not have; it applies with backend = native (on rdkafka use \
                 librdkafka's name)"
                    .into(),
            ));
        }
        inputs.verbatim.insert(property.to_owned(), value.to_owned());
        return Ok(());
    }
    if let Some(why) = wrong {
        return Err(refuse(why.into()));
    }
    match treatment {
        Treatment::Unsupported(why) => Err(refuse(format!("not supported by the native client: {why}"))),
        Treatment::Ignored(_) => {
            table::warn_ignored(property);
            Ok(())
        }
        Treatment::Applied(setting) => {
            if matches!(setting, crate::client::properties::Setting::TransactionMaxBlock) {
                return Err(refuse(
                    "the transactional sink bounds its coordinator retries by transaction_timeout_ms".into(),
                ));
            }
            let name = table::known_names().find(|n| *n == property).unwrap_or("property");
            // Validated now (a bad value fails the build, naming it).
            let (mut c, mut con, mut pro) = Default::default();
            crate::client::properties::apply_setting(name, value, &mut c, &mut con, &mut pro)
                .map_err(|e| ConnectorError::invalid(key, value, e.to_string()))?;
            if setting == crate::client::properties::Setting::Retries {
                table::warn_ignored(property);
                return Ok(());
            }
            inputs.native.push((name, value.to_owned()));
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Applies the table-mapped `kafka.<property>` settings (validated at
/// parse) onto the configurations.
fn apply_native(
    native: &[(&'static str, String)],
    client: &mut ClientConfig,
    consumer: &mut ConsumerConfig,
    producer: &mut ProducerConfig,
) {
    for (name, value) in native {
        if let Err(e) = crate::client::properties::apply_setting(name, value, client, consumer, producer) {
            tracing::error!(property = name, error = %e, "a validated property failed to apply");
        }
    }
}

/// The options as given, keyed by canonical name, with the key the user
/// wrote (for errors).
#[derive(Default)]
struct Inputs {
    values: BTreeMap<&'static str, (String, String)>,
    /// `backend` (parsed first: it decides what the passthrough accepts).
    backend: Backend,
    /// Unmapped `kafka.<property>` settings kept for librdkafka (rdkafka backend).
    verbatim: BTreeMap<String, String>,
    /// `kafka.<property>` settings the client's table maps (native backend).
    native: Vec<(&'static str, String)>,
}

impl Inputs {
    fn set(&mut self, canonical: &'static str, value: &str, written: &str) -> Result<()> {
        if let Some((old, old_key)) = self.values.get(canonical) {
            if old != value {
                return Err(ConnectorError::ConflictingOptions {
                    message: format!("{old_key:?} and {written:?} set the same setting to different values"),
                });
            }
            return Ok(());
        }
        self.values.insert(canonical, (value.to_owned(), written.to_owned()));
        Ok(())
    }

    fn get(&self, canonical: &str) -> Option<(&str, &str)> {
        self.values.get(canonical).map(|(v, k)| (v.as_str(), k.as_str()))
    }
}

/// Splits `params` into the factory's own options, security settings and
/// mapped passthrough properties; refuses anything else.
fn collect(kind: FactoryKind, params: &BTreeMap<String, String>) -> Result<(Inputs, SecurityInputs)> {
    let allowed = kind.options();
    let mut inputs = Inputs::default();
    if let Some(v) = params.get("backend") {
        inputs.backend = Backend::parse("backend", v)?;
    }
    let mut security = SecurityInputs::default();
    for (key, value) in params {
        if let Some(property) = key.strip_prefix("kafka.") {
            if let Some(alias) = security::alias_of_property(property) {
                security.set(alias, value, key)?;
                continue;
            }
            match passthrough(property) {
                Some((canonical, scope)) => {
                    let wrong = match scope {
                        Scope::Any => None,
                        Scope::Source if !kind.is_source() => Some("a consumer property, and this is a sink"),
                        Scope::Sink if kind.is_source() => Some("a producer property, and this is a source"),
                        Scope::Transactional if kind != FactoryKind::TwoPhaseCommitSink => {
                            Some("a transaction property: transactions belong to kafka_2pc_sink_string")
                        }
                        _ => None,
                    };
                    if let Some(why) = wrong {
                        return Err(ConnectorError::UnsupportedProperty {
                            property: key.clone(),
                            reason: why.into(),
                        });
                    }
                    if inputs.backend == Backend::Rdkafka && native_only(canonical) {
                        return Err(ConnectorError::UnsupportedProperty {
                            property: key.clone(),
                            reason: "a setting of the native consumer, which librdkafka does not have; it \
                                     applies only with backend = native"
                                .into(),
                        });
                    }
                    inputs.set(canonical, value, key)?;
                }
                None => table_property(kind, &mut inputs, key, property, value)?,
            }
            continue;
        }
        let Some(&name) = allowed.iter().find(|o| **o == key.as_str()) else {
            return Err(ConnectorError::UnknownOption {
                option: key.clone(),
                factory: kind.name(),
                suggestion: closest(key, allowed.iter().copied()),
            });
        };
        if SECURITY_OPTIONS.contains(&name) {
            security.set(name, value, key)?;
        } else {
            inputs.set(name, value, key)?;
        }
    }
    Ok((inputs, security))
}

// ---------------------------------------------------------------------------
// Value parsers. Each error names the option as written.

pub(crate) fn parse_bool(option: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConnectorError::invalid(option, value, "true or false")),
    }
}

fn parse_u64(option: &str, value: &str, expected: &str) -> Result<u64> {
    let v = value.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConnectorError::invalid(option, value, expected));
    }
    v.parse::<u64>()
        .map_err(|_| ConnectorError::invalid(option, value, expected))
}

fn parse_ms(option: &str, value: &str) -> Result<Duration> {
    const EXPECTED: &str = "a non-negative integer number of milliseconds";
    let ms = parse_u64(option, value, EXPECTED)?;
    if ms > i32::MAX as u64 {
        return Err(ConnectorError::invalid(
            option,
            value,
            format!("{EXPECTED} up to {}", i32::MAX),
        ));
    }
    Ok(Duration::from_millis(ms))
}

/// A duration: integer milliseconds, or a number with `ms`, `s` or `m`.
fn parse_duration(option: &str, value: &str) -> Result<Duration> {
    const EXPECTED: &str = "a non-negative duration: milliseconds (e.g. 100) or a number with ms, s or m (e.g. 30s)";
    let v = value.trim();
    let (digits, unit_ms) = if let Some(d) = v.strip_suffix("ms") {
        (d, 1)
    } else if let Some(d) = v.strip_suffix('s') {
        (d, 1000)
    } else if let Some(d) = v.strip_suffix('m') {
        (d, 60_000)
    } else {
        (v, 1)
    };
    let n = parse_u64(option, digits.trim(), EXPECTED).map_err(|_| ConnectorError::invalid(option, value, EXPECTED))?;
    let ms = n
        .checked_mul(unit_ms)
        .filter(|ms| *ms <= i32::MAX as u64)
        .ok_or_else(|| ConnectorError::invalid(option, value, EXPECTED))?;
    Ok(Duration::from_millis(ms))
}

fn parse_int_in(option: &str, value: &str, min: u64, max: u64) -> Result<u64> {
    let expected = format!("an integer from {min} to {max}");
    let n = parse_u64(option, value, &expected)?;
    if n < min || n > max {
        return Err(ConnectorError::invalid(option, value, expected));
    }
    Ok(n)
}

fn parse_auto_offset_reset(option: &str, value: &str) -> Result<AutoOffsetReset> {
    match value.trim().to_ascii_lowercase().as_str() {
        "earliest" | "smallest" | "beginning" => Ok(AutoOffsetReset::Earliest),
        "latest" | "largest" | "end" => Ok(AutoOffsetReset::Latest),
        "none" | "error" => Ok(AutoOffsetReset::None),
        _ => Err(ConnectorError::invalid(option, value, "one of earliest, latest, none")),
    }
}

fn parse_acks(option: &str, value: &str) -> Result<Acks> {
    match value.trim().to_ascii_lowercase().as_str() {
        "all" | "-1" => Ok(Acks::All),
        "1" => Ok(Acks::Leader),
        "0" => Ok(Acks::None),
        _ => Err(ConnectorError::invalid(option, value, "one of all, 1, 0")),
    }
}

fn parse_compression(option: &str, value: &str) -> Result<Compression> {
    value
        .parse::<Compression>()
        .map_err(|_| ConnectorError::invalid(option, value, "one of none, gzip, snappy, lz4, zstd"))
}

fn parse_brokers(option: &str, value: &str) -> Result<String> {
    const EXPECTED: &str = "a comma-separated list of host:port";
    let entries: Vec<&str> = value.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if entries.is_empty() {
        return Err(ConnectorError::invalid(option, value, EXPECTED));
    }
    for e in &entries {
        let ok = e
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(ConnectorError::invalid(option, value, EXPECTED));
        }
    }
    Ok(entries.join(","))
}

fn parse_topic(option: &str, value: &str) -> Result<String> {
    let ok = !value.is_empty()
        && value.len() <= 249
        && value != "."
        && value != ".."
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(value.to_owned())
    } else {
        Err(ConnectorError::invalid(
            option,
            value,
            "a Kafka topic name: 1 to 249 of [a-zA-Z0-9._-], not '.' or '..'",
        ))
    }
}

fn non_empty(option: &str, value: &str) -> Result<String> {
    if value.trim().is_empty() {
        Err(ConnectorError::invalid(option, value, "a non-empty string"))
    } else {
        Ok(value.to_owned())
    }
}

fn required<'a>(inputs: &'a Inputs, option: &'static str, kind: FactoryKind) -> Result<(&'a str, &'a str)> {
    match inputs.get(option) {
        Some((v, k)) if !v.trim().is_empty() => Ok((v, k)),
        _ => Err(ConnectorError::MissingOption {
            option,
            factory: kind.name(),
        }),
    }
}

/// `format` and the `schema_registry_*` options of a string factory (see
/// [`super::format::parse_options`]).
fn check_format(inputs: &Inputs, sink: bool) -> Result<Option<FormatOptions>> {
    super::format::parse_options(|name| inputs.get(name), sink)
}

fn client_tuning(inputs: &Inputs) -> Result<ClientTuning> {
    let ms = |name: &str| inputs.get(name).map(|(v, k)| parse_ms(k, v)).transpose();
    Ok(ClientTuning {
        connect_timeout: ms("socket.connection.setup.timeout.ms")?,
        request_timeout: ms("socket.timeout.ms")?,
        retry_backoff: ms("retry.backoff.ms")?,
        retry_backoff_max: ms("retry.backoff.max.ms")?,
        max_frame_size: inputs
            .get("receive.message.max.bytes")
            .map(|(v, k)| parse_int_in(k, v, 1024, i32::MAX as u64).map(|n| n as usize))
            .transpose()?,
        metadata_max_wait: ms("topic.metadata.propagation.max.ms")?,
        bootstrap_timeout: ms("default.api.timeout.ms")?,
    })
}

/// Parses a source factory's parameters.
pub fn parse_source(
    kind: FactoryKind,
    params: &BTreeMap<String, String>,
    subtask_index: u32,
    parallelism: u32,
) -> Result<SourceOptions> {
    debug_assert!(kind.is_source());
    if parallelism == 0 || subtask_index >= parallelism {
        return Err(ConnectorError::invalid(
            "subtask_index",
            subtask_index.to_string(),
            format!("a subtask index below the parallelism ({parallelism}), which must be at least 1"),
        ));
    }
    let (inputs, security) = collect(kind, params)?;
    let (b, bk) = required(&inputs, "brokers", kind)?;
    let (t, tk) = required(&inputs, "topic", kind)?;
    let mut o = SourceOptions::new(parse_brokers(bk, b)?, parse_topic(tk, t)?);
    o.subtask_index = subtask_index;
    o.source_parallelism = parallelism;
    o.client_id = kind.default_client_id().into();
    if let Some((v, k)) = inputs.get("group_id") {
        o.group_id = non_empty(k, v)?;
    }
    if let Some((v, k)) = inputs.get("client_id") {
        o.client_id = non_empty(k, v)?;
    }
    if let Some((v, k)) = inputs.get("auto_offset_reset") {
        o.auto_offset_reset = parse_auto_offset_reset(k, v)?;
    }
    if let Some((v, k)) = inputs.get("batch_max_wait_ms") {
        o.batch_max_wait = parse_ms(k, v)?;
    }
    if let Some((v, k)) = inputs.get("poll_timeout") {
        o.poll_timeout = parse_duration(k, v)?;
        if o.poll_timeout.is_zero() {
            return Err(ConnectorError::invalid(k, v, "a positive duration (e.g. 100ms)"));
        }
    }
    if let Some((v, k)) = inputs.get("max_batch_size") {
        o.max_batch_size = parse_int_in(k, v, 1, 1_000_000)? as usize;
    }
    if let Some((v, k)) = inputs.get("partition_discovery_interval") {
        o.partition_discovery_interval = parse_duration(k, v)?;
    }
    if let Some((v, k)) = inputs.get("commit_mode") {
        if !v.trim().eq_ignore_ascii_case("manual") {
            return Err(ConnectorError::invalid(
                k,
                v,
                "manual (an engine-managed source never commits group offsets: the checkpoints are the \
                 resume authority)",
            ));
        }
    }
    if let Some((v, k)) = inputs.get("enable.auto.commit") {
        if parse_bool(k, v)? {
            return Err(ConnectorError::invalid(
                k,
                v,
                "false (the source never commits group offsets)",
            ));
        }
    }
    if let Some((v, k)) = inputs.get("enable_debug") {
        o.enable_debug = parse_bool(k, v)?;
    }
    if let Some((v, k)) = inputs.get("metric_prefix") {
        o.metric_prefix = Some(non_empty(k, v)?);
    }
    if let Some((v, k)) = inputs.get("decode_error") {
        o.decode_error = match v.trim().to_ascii_lowercase().as_str() {
            "fail" => DecodeErrorPolicy::Fail,
            "skip" => DecodeErrorPolicy::Skip,
            _ => return Err(ConnectorError::invalid(k, v, "one of fail, skip")),
        };
    }
    if kind == FactoryKind::TextSource {
        o.value_format = check_format(&inputs, false)?;
    }
    let i32_in = |name: &str, min: u64| {
        inputs
            .get(name)
            .map(|(v, k)| parse_int_in(k, v, min, i32::MAX as u64).map(|n| n as i32))
            .transpose()
    };
    o.consumer = ConsumerTuning {
        max_wait: inputs
            .get("fetch.wait.max.ms")
            .map(|(v, k)| parse_ms(k, v))
            .transpose()?,
        min_bytes: i32_in("fetch.min.bytes", 1)?,
        max_bytes: i32_in("fetch.max.bytes", 1024)?,
        partition_max_bytes: i32_in("max.partition.fetch.bytes", 1)?,
        check_crcs: inputs.get("check.crcs").map(|(v, k)| parse_bool(k, v)).transpose()?,
        isolation: inputs
            .get("isolation.level")
            .map(|(v, k)| match v.trim().to_ascii_lowercase().as_str() {
                "read_committed" => Ok(IsolationLevel::ReadCommitted),
                "read_uncommitted" => Ok(IsolationLevel::ReadUncommitted),
                _ => Err(ConnectorError::invalid(k, v, "one of read_committed, read_uncommitted")),
            })
            .transpose()?,
        max_poll_records: i32_in("max.poll.records", 1)?.map(|n| n as usize),
        max_poll_bytes: i32_in("max.poll.bytes", 1)?.map(|n| n as usize),
        max_batch_inflate: i32_in("max.batch.inflate.bytes", 1024)?.map(|n| n as usize),
        fetch_sessions: inputs
            .get("enable.fetch.sessions")
            .map(|(v, k)| parse_bool(k, v))
            .transpose()?,
        max_throttle: inputs
            .get("fetch.throttle.max.ms")
            .map(|(v, k)| parse_ms(k, v))
            .transpose()?,
        client_rack: inputs
            .get("client.rack")
            .map(|(v, k)| match v.trim() {
                "" => Err(ConnectorError::invalid(
                    k,
                    v,
                    "a rack id (leave it unset to fetch from leaders)",
                )),
                rack => Ok(rack.to_owned()),
            })
            .transpose()?,
    };
    o.client = client_tuning(&inputs)?;
    o.security = security.resolve()?;
    o.rdkafka_properties = verbatim_checked(&inputs, &o.security)?;
    o.native_properties = inputs.native.clone();
    o.backend = inputs.backend;
    if let (true, Backend::Rdkafka, Some((v, k))) = (o.enable_debug, o.backend, inputs.get("enable_debug")) {
        return Err(ConnectorError::invalid(
            k,
            v,
            "false with backend = rdkafka (the protocol log is the native client's; pass librdkafka's own \
             contexts as kafka.debug, e.g. 'broker,protocol,metadata')",
        ));
    }
    check_backend(&inputs)?;
    Ok(o)
}

/// Parses a sink factory's parameters (the upsert sink's too, but for
/// `primary_key`).
pub fn parse_sink(kind: FactoryKind, params: &BTreeMap<String, String>) -> Result<SinkOptions> {
    debug_assert!(!kind.is_source());
    let (inputs, security) = collect(kind, params)?;
    let o = sink_from_inputs(kind, &inputs, security)?;
    check_backend(&inputs)?;
    Ok(o)
}

fn sink_from_inputs(kind: FactoryKind, inputs: &Inputs, security: SecurityInputs) -> Result<SinkOptions> {
    let (b, bk) = required(inputs, "brokers", kind)?;
    let (t, tk) = required(inputs, "topic", kind)?;
    let mut o = SinkOptions::new(parse_brokers(bk, b)?, parse_topic(tk, t)?);
    o.client_id = kind.default_client_id().into();
    if let Some((v, k)) = inputs.get("client_id") {
        o.client_id = non_empty(k, v)?;
    }
    if let Some((v, k)) = inputs.get("acks") {
        o.acks = parse_acks(k, v)?;
    }
    if let Some((v, k)) = inputs.get("compression") {
        o.compression = parse_compression(k, v)?;
    }
    if let Some((v, k)) = inputs.get("linger_ms") {
        o.linger = parse_ms(k, v)?;
    }
    if let Some((v, k)) = inputs.get("produce_timeout") {
        o.produce_timeout = parse_duration(k, v)?;
        if o.produce_timeout.is_zero() {
            return Err(ConnectorError::invalid(k, v, "a positive duration (e.g. 30000)"));
        }
    }
    if let Some((v, k)) = inputs.get("flush_timeout") {
        o.flush_timeout = parse_duration(k, v)?;
        if o.flush_timeout.is_zero() {
            return Err(ConnectorError::invalid(k, v, "a positive duration (e.g. 30000)"));
        }
    }
    if let Some((v, k)) = inputs.get("fixed_partition") {
        o.fixed_partition = Some(parse_int_in(k, v, 0, i32::MAX as u64)? as i32);
    }
    if let Some((v, k)) = inputs.get("metric_prefix") {
        o.metric_prefix = Some(non_empty(k, v)?);
    }
    if matches!(
        kind,
        FactoryKind::TextSink | FactoryKind::UpsertSink | FactoryKind::TwoPhaseCommitSink
    ) {
        o.value_format = check_format(inputs, true)?;
    }
    let usize_in = |name: &str, min: u64, scale: u64| {
        inputs
            .get(name)
            .map(|(v, k)| parse_int_in(k, v, min, i32::MAX as u64).map(|n| (n * scale) as usize))
            .transpose()
    };
    let ms = |name: &str| inputs.get(name).map(|(v, k)| parse_ms(k, v)).transpose();
    o.producer = ProducerTuning {
        batch_size: usize_in("batch.size", 1, 1)?,
        buffer_memory: usize_in("queue.buffering.max.kbytes", 1, 1024)?,
        max_record_size: usize_in("message.max.bytes", 1000, 1)?,
        delivery_timeout: ms("message.timeout.ms")?,
        ack_timeout: ms("request.timeout.ms")?,
        idempotent: inputs
            .get("enable.idempotence")
            .map(|(v, k)| parse_bool(k, v))
            .transpose()?,
        compression_level: inputs
            .get("compression.level")
            .map(|(v, k)| {
                // The codec's own check (wire's `Compression::check_level`) is
                // the one range; only the wording names this layer's options.
                match v.trim().parse::<i32>().ok() {
                    Some(l) if o.compression.check_level(l).is_ok() => Ok(l),
                    _ if o.compression == Compression::None => Err(ConnectorError::invalid(
                        k,
                        v,
                        "-1 (no codec is set: set compression to gzip, snappy, lz4 or zstd to choose its level)",
                    )),
                    _ => Err(ConnectorError::invalid(
                        k,
                        v,
                        format!("for {}: {}", o.compression, o.compression.accepted_levels()),
                    )),
                }
            })
            .transpose()?,
    };
    o.client = client_tuning(inputs)?;
    o.security = security.resolve()?;
    o.native_properties = inputs.native.clone();
    o.producer_config()?;
    o.rdkafka_properties = verbatim_checked(inputs, &o.security)?;
    o.backend = inputs.backend;
    Ok(o)
}

/// The verbatim properties, after the same weakness checks the aliases get:
/// a TLS setting (`ssl.*`) needs a TLS protocol, a SASL setting (`sasl.*`)
/// a SASL one, or it would be configured and silently never used.
fn verbatim_checked(inputs: &Inputs, security: &SecurityConfig) -> Result<Passthrough> {
    for property in inputs.verbatim.keys() {
        let key = format!("kafka.{property}");
        if property.starts_with("ssl.") && !security.protocol.uses_tls() {
            return Err(ConnectorError::InsecureConfig {
                option: key,
                message: "is set but the transport is not TLS: it would never be used; set security_protocol to \
                          'ssl' or 'sasl_ssl'"
                    .into(),
            });
        }
        if property.starts_with("sasl.") && !security.protocol.uses_sasl() {
            return Err(ConnectorError::InsecureConfig {
                option: key,
                message: "is set but the security protocol does not use SASL: it would never be presented; set \
                          security_protocol to 'sasl_plaintext' or 'sasl_ssl'"
                    .into(),
            });
        }
    }
    Ok(Passthrough(inputs.verbatim.clone()))
}

/// Last of all the checks (so a weak configuration is refused as such in
/// every build): `backend = rdkafka` needs the cargo feature.
fn check_backend(inputs: &Inputs) -> Result<()> {
    match inputs.get("backend") {
        Some((v, k)) => inputs.backend.check_available(k, v),
        None => Ok(()),
    }
}

/// Parses the upsert sink's parameters.
pub fn parse_upsert(params: &BTreeMap<String, String>) -> Result<UpsertOptions> {
    let kind = FactoryKind::UpsertSink;
    let (inputs, security) = collect(kind, params)?;
    let sink = sink_from_inputs(kind, &inputs, security)?;
    let (pk, pkk) = required(&inputs, "primary_key", kind)?;
    let fields: Vec<String> = pk.split(',').map(|f| f.trim().to_owned()).collect();
    if fields.iter().any(|f| f.is_empty()) {
        return Err(ConnectorError::invalid(
            pkk,
            pk,
            "a comma-separated list of JSON field names (no empty names)",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(dup) = fields.iter().find(|f| !seen.insert(f.as_str())) {
        return Err(ConnectorError::invalid(
            pkk,
            pk,
            format!("distinct JSON field names ({dup:?} is listed twice)"),
        ));
    }
    check_backend(&inputs)?;
    Ok(UpsertOptions {
        sink,
        primary_key: fields,
    })
}

/// The transactional sink's options (`kafka_2pc_sink_string`).
#[derive(Clone, Debug)]
pub struct TwoPhaseCommitOptions {
    /// brokers, topic, client_id (default `clink-sink-2pc`), compression,
    /// linger_ms, security; `acks` is always `all`, idempotence always on.
    pub sink: SinkOptions,
    /// `transactional_id` as given.
    pub transactional_id: String,
    /// The subtask this sink runs as.
    pub subtask_index: u32,
    /// How many sink subtasks there are.
    pub parallelism: u32,
    /// `transaction_timeout_ms` (default 60000); also the message timeout.
    pub transaction_timeout: Duration,
    /// `commit_group`: declared membership only (no cross-sink atomicity).
    pub commit_group: Option<String>,
    /// `replay_suppression` (default true).
    pub replay_suppression: bool,
    /// `receipt_dir`: where commit receipts (`sub<K>-<N>`) and
    /// unresolved-orphan markers (`sub<K>-<N>.unresolved`) are written.
    /// `None`: receipts are kept in memory only and markers only logged
    /// (the registry refuses that unless `receipts_in_memory`; a sink built
    /// directly warns at `open`).
    pub receipt_dir: Option<std::path::PathBuf>,
    /// `receipts_in_memory` (default false): the explicit opt-in to
    /// receipts without a directory.
    pub receipts_in_memory: bool,
    /// Bound on retrying transport failures while resolving a restored
    /// prepared transaction before `open` fails (not an option: a field).
    pub resolve_unreachable_after: Duration,
    /// `two_phase_commit` (default `resume`): how a prepared transaction
    /// outlives a job that is down.
    pub two_phase_commit: TwoPhaseCommitMode,
}

/// `two_phase_commit`: how a prepared transaction outlives a job that is down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum TwoPhaseCommitMode {
    /// `resume` (the default): the restore commits a prepared transaction
    /// over the wire with its staged resume handle. While the job is down
    /// longer than `transaction_timeout_ms`, the broker aborts the
    /// transaction; the restore then falls back and replays the interval
    /// (exactly once still holds: receipts and replay suppression).
    #[default]
    Resume,
    /// `kip939`: KIP-939 two-phase-commit participation. The producer
    /// initialises with `enable2Pc` (InitProducerId v6), so the broker
    /// never aborts a prepared transaction on its timeout: the restore
    /// commits it however long the job was down, and nothing is replayed.
    /// The price: an open or prepared transaction holds back
    /// read_committed readers of its partitions until the job comes back
    /// (or an operator aborts it). Needs brokers with
    /// `transaction.two.phase.commit.enable=true` offering InitProducerId
    /// v6 (Kafka 4.4: `unstable.api.versions.enable=true`) and the native
    /// backend; refused otherwise, naming this option.
    Kip939,
}

impl TwoPhaseCommitMode {
    /// The option's value for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            TwoPhaseCommitMode::Resume => "resume",
            TwoPhaseCommitMode::Kip939 => "kip939",
        }
    }

    /// Parses the option's value (`resume` or `kip939`, any case).
    pub fn parse(option: &str, value: &str) -> Result<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "resume" => Ok(TwoPhaseCommitMode::Resume),
            "kip939" | "kip-939" => Ok(TwoPhaseCommitMode::Kip939),
            _ => Err(ConnectorError::invalid(option, value, "resume or kip939")),
        }
    }
}

impl TwoPhaseCommitOptions {
    /// The struct defaults for `brokers`, `topic` and `transactional_id`: a
    /// standalone sink.
    pub fn new(brokers: impl Into<String>, topic: impl Into<String>, transactional_id: impl Into<String>) -> Self {
        let mut sink = SinkOptions::new(brokers, topic);
        sink.client_id = FactoryKind::TwoPhaseCommitSink.default_client_id().into();
        TwoPhaseCommitOptions {
            sink,
            transactional_id: transactional_id.into(),
            subtask_index: 0,
            parallelism: 1,
            transaction_timeout: Duration::from_millis(60_000),
            commit_group: None,
            replay_suppression: true,
            receipt_dir: None,
            receipts_in_memory: false,
            resolve_unreachable_after: Duration::from_secs(30),
            two_phase_commit: TwoPhaseCommitMode::Resume,
        }
    }

    /// The transactional id this subtask's producer uses: `transactional_id`,
    /// with `-<subtask_index>` appended when `parallelism > 1` (the spec).
    pub fn subtask_transactional_id(&self) -> String {
        if self.parallelism > 1 {
            format!("{}-{}", self.transactional_id, self.subtask_index)
        } else {
            self.transactional_id.clone()
        }
    }
}

/// Parses `kafka_2pc_sink_string`'s parameters.
pub fn parse_two_phase_commit(
    params: &BTreeMap<String, String>,
    subtask_index: u32,
    parallelism: u32,
) -> Result<TwoPhaseCommitOptions> {
    let kind = FactoryKind::TwoPhaseCommitSink;
    if parallelism == 0 || subtask_index >= parallelism {
        return Err(ConnectorError::invalid(
            "subtask_index",
            subtask_index.to_string(),
            format!("a subtask index below the parallelism ({parallelism}), which must be at least 1"),
        ));
    }
    let (inputs, security) = collect(kind, params)?;
    let sink = sink_from_inputs(kind, &inputs, security)?;
    if let Some((v, k)) = inputs.get("acks") {
        if sink.acks != Acks::All {
            return Err(ConnectorError::invalid(
                k,
                v,
                "all (a transactional producer is idempotent and needs acks=all)",
            ));
        }
    }
    if let Some((v, k)) = inputs.get("enable.idempotence") {
        if !parse_bool(k, v)? {
            return Err(ConnectorError::invalid(
                k,
                v,
                "true (a transactional producer is idempotent)",
            ));
        }
    }
    let (id, idk) = required(&inputs, "transactional_id", kind)?;
    let id = id.trim();
    // Kafka's limit on a transactional id is a short string's (i16) length.
    if id.len() > 32_000 || id.chars().any(char::is_control) {
        return Err(ConnectorError::invalid(
            idk,
            id,
            "a transactional id: 1 to 32000 bytes, no control characters",
        ));
    }
    let mut o = TwoPhaseCommitOptions::new(sink.brokers.clone(), sink.topic.clone(), id);
    o.sink = sink;
    o.subtask_index = subtask_index;
    o.parallelism = parallelism;
    if let Some((v, k)) = inputs.get("transaction_timeout_ms") {
        o.transaction_timeout = parse_ms(k, v)?;
        if o.transaction_timeout.is_zero() {
            return Err(ConnectorError::invalid(
                k,
                v,
                format!("a positive integer number of milliseconds up to {}", i32::MAX),
            ));
        }
    }
    // librdkafka requires message.timeout.ms <= transaction.timeout.ms; the
    // sink sets it to the transaction timeout.
    if let (Some(delivery), Some((v, k))) = (o.sink.producer.delivery_timeout, inputs.get("message.timeout.ms")) {
        if delivery > o.transaction_timeout {
            return Err(ConnectorError::invalid(
                k,
                v,
                format!(
                    "at most transaction_timeout_ms ({} ms): a record cannot outlive its transaction",
                    o.transaction_timeout.as_millis()
                ),
            ));
        }
    }
    o.sink.producer.delivery_timeout = Some(o.transaction_timeout);
    if let Some((v, k)) = inputs.get("commit_group") {
        o.commit_group = Some(non_empty(k, v)?);
    }
    if let Some((v, k)) = inputs.get("replay_suppression") {
        o.replay_suppression = parse_bool(k, v)?;
    }
    if let Some((v, k)) = inputs.get("receipt_dir") {
        o.receipt_dir = Some(non_empty(k, v)?.into());
    }
    if let Some((v, k)) = inputs.get("two_phase_commit") {
        o.two_phase_commit = TwoPhaseCommitMode::parse(k, v)?;
    }
    if let Some((v, k)) = inputs.get("receipts_in_memory") {
        o.receipts_in_memory = parse_bool(k, v)?;
    }
    check_backend(&inputs)?;
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn source_defaults_follow_the_spec() {
        let o = parse_source(FactoryKind::TextSource, &p(&[("brokers", "h:1"), ("topic", "t")]), 0, 1).unwrap();
        assert_eq!(o.group_id, "clink");
        assert_eq!(o.client_id, "clink-source");
        assert_eq!(o.auto_offset_reset, AutoOffsetReset::Earliest);
        assert_eq!(o.batch_max_wait, Duration::from_millis(5));
        assert_eq!(o.poll_timeout, Duration::from_millis(100));
        assert_eq!(o.max_batch_size, 2048);
        assert_eq!(o.partition_discovery_interval, Duration::from_secs(30));
        assert_eq!(o.consumer_config().auto_offset_reset, None);
        // As librdkafka's consumer: read_committed unless opted out.
        assert_eq!(o.consumer_config().isolation, IsolationLevel::ReadCommitted);
        assert!(!o.client_config().unwrap().debug);
        assert_eq!(o.client_config().unwrap().metric_prefix, crate::metrics::DEFAULT_PREFIX);
    }

    #[test]
    fn enable_debug_and_metric_prefix_reach_the_client_config() {
        let base = [("brokers", "h:1"), ("topic", "t")];
        let with = |extra: &[(&str, &str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            p(&v)
        };
        let o = parse_source(
            FactoryKind::MessageSource,
            &with(&[("enable_debug", "true"), ("metric_prefix", "job7")]),
            0,
            1,
        )
        .unwrap();
        let c = o.client_config().unwrap();
        assert!(c.debug);
        assert_eq!(c.metric_prefix, "job7");
        let o = parse_sink(FactoryKind::MessageSink, &with(&[("metric_prefix", "job7")])).unwrap();
        assert_eq!(o.client_config().unwrap().metric_prefix, "job7");
        // The protocol log is the native client's: on librdkafka it would
        // be inert, so it is refused there, naming the option.
        let e = parse_source(
            FactoryKind::MessageSource,
            &with(&[("enable_debug", "true"), ("backend", "rdkafka")]),
            0,
            1,
        )
        .unwrap_err();
        assert_eq!(e.option(), Some("enable_debug"), "{e}");
        assert!(e.to_string().contains("kafka.debug"), "{e}");
    }

    #[test]
    fn sink_defaults_follow_the_spec() {
        let o = parse_sink(FactoryKind::TextSink, &p(&[("brokers", "h:1"), ("topic", "t")])).unwrap();
        assert_eq!(o.client_id, "clink-sink");
        assert_eq!(o.acks, Acks::All);
        assert_eq!(o.compression, Compression::None);
        assert_eq!(o.linger, Duration::from_millis(5));
        assert_eq!(o.produce_timeout, Duration::from_millis(30_000));
        assert_eq!(o.flush_timeout, Duration::from_millis(30_000));
        assert_eq!(o.fixed_partition, None);
        assert!(o.producer_config().unwrap().idempotent);
    }

    #[test]
    fn two_phase_commit_takes_resume_or_kip939_and_names_itself_otherwise() {
        let base = [("brokers", "h:1"), ("topic", "t"), ("transactional_id", "tx")];
        let with = |mode: &str| {
            let mut v = base.to_vec();
            v.push(("two_phase_commit", mode));
            parse_two_phase_commit(&p(&v), 0, 1)
        };
        assert_eq!(
            parse_two_phase_commit(&p(&base), 0, 1).unwrap().two_phase_commit,
            TwoPhaseCommitMode::Resume
        );
        assert_eq!(with("resume").unwrap().two_phase_commit, TwoPhaseCommitMode::Resume);
        assert_eq!(with("KIP939").unwrap().two_phase_commit, TwoPhaseCommitMode::Kip939);
        let e = with("xa").unwrap_err();
        assert_eq!(e.option(), Some("two_phase_commit"), "{e}");
        assert!(e.to_string().contains("resume or kip939"), "{e}");
        assert_eq!(TwoPhaseCommitMode::Kip939.as_str(), "kip939");
    }

    #[test]
    fn two_phase_commit_defaults_follow_the_spec() {
        let base = [("brokers", "h:1"), ("topic", "t"), ("transactional_id", "tx")];
        let o = parse_two_phase_commit(&p(&base), 0, 1).unwrap();
        assert_eq!(o.sink.client_id, "clink-sink-2pc");
        assert_eq!(o.transaction_timeout, Duration::from_millis(60_000));
        assert_eq!(o.sink.producer.delivery_timeout, Some(o.transaction_timeout));
        assert!(o.replay_suppression);
        assert_eq!(o.commit_group, None);
        assert_eq!(o.subtask_transactional_id(), "tx");
        assert_eq!(o.sink.acks, Acks::All);
        let o = parse_two_phase_commit(&p(&base), 2, 3).unwrap();
        assert_eq!(o.subtask_transactional_id(), "tx-2");
        let o = parse_two_phase_commit(
            &p(&[("kafka.transactional.id", "tx2"), ("brokers", "h:1"), ("topic", "t")]),
            0,
            1,
        )
        .unwrap();
        assert_eq!(o.transactional_id, "tx2");
    }

    #[test]
    fn two_phase_commit_refusals_name_the_option() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = vec![("brokers", "h:1"), ("topic", "t"), ("transactional_id", "tx")];
            v.extend_from_slice(extra);
            parse_two_phase_commit(&p(&v), 0, 1).unwrap_err()
        };
        let e = parse_two_phase_commit(&p(&[("brokers", "h:1"), ("topic", "t")]), 0, 1).unwrap_err();
        assert!(
            matches!(
                e,
                ConnectorError::MissingOption {
                    option: "transactional_id",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(with(&[("acks", "all")]).option(), Some("acks"));
        assert_eq!(with(&[("kafka.acks", "1")]).option(), Some("kafka.acks"));
        assert_eq!(
            with(&[("kafka.enable.idempotence", "false")]).option(),
            Some("kafka.enable.idempotence")
        );
        assert_eq!(
            with(&[("transaction_timeout_ms", "0")]).option(),
            Some("transaction_timeout_ms")
        );
        assert_eq!(
            with(&[("transaction_timeout_ms", "soon")]).option(),
            Some("transaction_timeout_ms")
        );
        assert_eq!(
            with(&[("replay_suppression", "maybe")]).option(),
            Some("replay_suppression")
        );
        assert_eq!(with(&[("commit_group", " ")]).option(), Some("commit_group"));
        let e = with(&[("transaction_timeout_ms", "1000"), ("kafka.message.timeout.ms", "5000")]);
        assert_eq!(e.option(), Some("kafka.message.timeout.ms"), "{e}");
        let e = with(&[("transactional_idd", "x")]);
        assert!(e.to_string().contains("transactional_id"), "{e}");
        let e = parse_sink(
            FactoryKind::TextSink,
            &p(&[("brokers", "h:1"), ("topic", "t"), ("kafka.transactional.id", "x")]),
        )
        .unwrap_err();
        assert!(e.to_string().contains("kafka_2pc_sink_string"), "{e}");
    }

    #[test]
    fn kafka_compression_level_reaches_the_producer_or_is_refused_naming_the_levels() {
        let sink = |pairs: &[(&str, &str)]| {
            let mut all = vec![("brokers", "h:1"), ("topic", "t")];
            all.extend_from_slice(pairs);
            parse_sink(FactoryKind::TextSink, &p(&all))
        };
        let o = sink(&[("compression", "gzip"), ("kafka.compression.level", "9")]).unwrap();
        assert_eq!(o.producer_config().unwrap().compression_level, 9);
        let o = sink(&[("compression", "zstd")]).unwrap();
        assert_eq!(
            o.producer_config().unwrap().compression_level,
            -1,
            "the codec's default"
        );
        for (codec, level, names) in [
            ("lz4", "5", "lz4: -1, 0, 1 or 2"),
            ("gzip", "10", "gzip: -1 (default: 6) or 0..=9"),
            ("zstd", "x", "zstd: -1 (default: 1) or 0..=12"),
            ("none", "3", "set compression to gzip"),
        ] {
            let e = sink(&[("compression", codec), ("kafka.compression.level", level)]).unwrap_err();
            assert_eq!(e.option(), Some("kafka.compression.level"), "{e}");
            assert!(e.to_string().contains(names), "{codec} {level}: {e}");
        }
    }

    #[test]
    fn sink_options_reach_the_producer_and_registry_configs() {
        let o = parse_sink(
            FactoryKind::TextSink,
            &p(&[
                ("brokers", "h:1"),
                ("topic", "t"),
                ("acks", "1"),
                ("linger_ms", "42"),
                ("compression", "zstd"),
                ("format", "avro"),
                ("schema_registry_url", "http://127.0.0.1:1"),
                ("schema_registry_subject", "custom-subject"),
                ("schema_registry_bearer_auth_token", "tok-canary"),
            ]),
        )
        .unwrap();
        let pc = o.producer_config().unwrap();
        assert_eq!(
            (pc.acks, pc.linger, pc.compression),
            (Acks::Leader, Duration::from_millis(42), Compression::Zstd)
        );
        assert!(!pc.idempotent, "acks=1 turns idempotence off");
        let f = o.value_format.as_ref().unwrap();
        assert_eq!(f.subject_for("t"), "custom-subject");
        assert!(
            matches!(f.registry.auth, crate::schema_registry::RegistryAuth::Bearer { .. }),
            "{:?}",
            f.registry.auth
        );
        assert!(!format!("{o:?}").contains("tok-canary"));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("x", "250").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("x", "30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("x", "2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("x", "15ms").unwrap(), Duration::from_millis(15));
        assert!(parse_duration("x", "-1").is_err());
        assert!(parse_duration("x", "1h").is_err());
        assert!(parse_duration("x", "99999999999s").is_err());
    }

    #[test]
    fn passthrough_maps_onto_the_alias_and_scope_is_checked() {
        let o = parse_sink(
            FactoryKind::MessageSink,
            &p(&[("brokers", "h:1"), ("topic", "t"), ("kafka.linger.ms", "7")]),
        )
        .unwrap();
        assert_eq!(o.linger, Duration::from_millis(7));
        let e = parse_sink(
            FactoryKind::MessageSink,
            &p(&[
                ("brokers", "h:1"),
                ("topic", "t"),
                ("linger_ms", "5"),
                ("kafka.linger.ms", "7"),
            ]),
        )
        .unwrap_err();
        assert!(matches!(e, ConnectorError::ConflictingOptions { .. }), "{e}");
        let e = parse_sink(
            FactoryKind::MessageSink,
            &p(&[("brokers", "h:1"), ("topic", "t"), ("kafka.fetch.wait.max.ms", "7")]),
        )
        .unwrap_err();
        assert_eq!(e.option(), Some("kafka.fetch.wait.max.ms"), "{e}");
    }

    #[test]
    fn native_consumer_settings_reach_the_consumer_config_and_are_range_checked() {
        let src = |extra: &[(&str, &str)]| {
            let mut params = p(&[("brokers", "h:1"), ("topic", "t")]);
            params.extend(p(extra));
            parse_source(FactoryKind::MessageSource, &params, 0, 1)
        };
        let c = src(&[
            ("kafka.max.poll.records", "7"),
            ("kafka.max.poll.bytes", "4096"),
            ("kafka.max.batch.inflate.bytes", "1048576"),
            ("kafka.enable.fetch.sessions", "false"),
            ("kafka.fetch.throttle.max.ms", "250"),
            ("kafka.client.rack", "rack-2"),
        ])
        .unwrap()
        .consumer_config();
        assert_eq!(c.client_rack.as_deref(), Some("rack-2"));
        assert_eq!(src(&[]).unwrap().consumer_config().client_rack, None);
        assert_eq!(c.max_poll_records, 7);
        assert_eq!(c.max_poll_bytes, 4096);
        assert_eq!(c.max_batch_inflate, 1 << 20);
        assert!(!c.fetch_sessions);
        assert_eq!(c.max_throttle, Duration::from_millis(250));
        let d = src(&[]).unwrap().consumer_config();
        let default = ConsumerConfig::default();
        assert_eq!(
            (
                d.max_poll_records,
                d.max_poll_bytes,
                d.max_batch_inflate,
                d.fetch_sessions,
                d.max_throttle
            ),
            (
                default.max_poll_records,
                default.max_poll_bytes,
                default.max_batch_inflate,
                default.fetch_sessions,
                default.max_throttle
            )
        );
        for (key, bad, expected) in [
            ("kafka.max.poll.records", "0", "an integer from 1 to 2147483647"),
            (
                "kafka.max.poll.records",
                "2147483648",
                "an integer from 1 to 2147483647",
            ),
            ("kafka.max.poll.bytes", "0", "an integer from 1 to 2147483647"),
            (
                "kafka.max.batch.inflate.bytes",
                "1023",
                "an integer from 1024 to 2147483647",
            ),
            ("kafka.enable.fetch.sessions", "yes", "true or false"),
            ("kafka.fetch.throttle.max.ms", "-5", "milliseconds"),
            ("kafka.client.rack", " ", "a rack id"),
        ] {
            let e = src(&[(key, bad)]).unwrap_err();
            assert_eq!(e.option(), Some(key), "{e}");
            assert!(e.to_string().contains(expected), "{key}={bad}: {e}");
        }
        // A sink has no consumer.
        let e = parse_sink(
            FactoryKind::MessageSink,
            &p(&[("brokers", "h:1"), ("topic", "t"), ("kafka.max.poll.records", "7")]),
        )
        .unwrap_err();
        assert_eq!(e.option(), Some("kafka.max.poll.records"), "{e}");
        // librdkafka has none of them: refused by name, not ignored.
        for key in [
            "kafka.max.poll.records",
            "kafka.max.poll.bytes",
            "kafka.max.batch.inflate.bytes",
            "kafka.enable.fetch.sessions",
            "kafka.fetch.throttle.max.ms",
        ] {
            let e = src(&[("backend", "rdkafka"), (key, "1024")]).unwrap_err();
            assert_eq!(e.option(), Some(key), "{e}");
            assert!(e.to_string().contains("backend = native"), "{e}");
        }
    }
}
