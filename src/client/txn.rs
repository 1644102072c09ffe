//! The transactional producer ([KIP-98]) and the transaction coordinator
//! plumbing the resolver shares: FindCoordinator(transaction), retries at
//! the coordinator, typed fatal answers, and which transaction protocol the
//! cluster speaks ([KIP-890]).
//!
//! Two protocols, chosen from the cluster's finalized feature
//! `transaction.version` (ApiVersions v3+):
//!
//! - **V1** (transaction.version < 2): AddPartitionsToTxn (v≤3, the client
//!   versions) before a partition's first batch in a transaction, Produce
//!   capped at v11, AddOffsetsToTxn before TxnOffsetCommit (v≤4), EndTxn v≤4.
//!   The epoch stays the same across transactions.
//! - **V2** (transaction.version ≥ 2, KIP-890 part 2): Produce v12 and
//!   TxnOffsetCommit v5 add their partition to the transaction implicitly (the
//!   partition leader asks the coordinator), so there is no AddPartitionsToTxn
//!   and no AddOffsetsToTxn; EndTxn v5 bumps the epoch on every transaction
//!   end and answers the new producer id/epoch (a new producer id with epoch 0
//!   when the epoch would overflow). AddPartitionsToTxn v4/v5 are
//!   broker-to-broker (they need ClusterAction) and are never sent by a client.
//!
//! The identity of the open transaction is readable at any moment with
//! [`TransactionalProducer::identity`], as a [`ResumeHandle`] ready to stage.
//!
//! [KIP-98]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging
//! [KIP-890]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-890%3A+Transactions+Server-Side+Defense

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use clink_kafka_wire::group::ConsumerGroupMetadata;
use clink_kafka_wire::kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use clink_kafka_wire::kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use clink_kafka_wire::kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiVersionsRequest, EndTxnRequest, GroupId,
    InitProducerIdRequest, TopicName, TransactionalId, TxnOffsetCommitRequest,
};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::messages::{InitProducerIdTwoPhaseRequest, TWO_PHASE_COMMIT_VERSION};
use clink_kafka_wire::KafkaCode;

use super::cluster::Cluster;
use super::connection::BrokerConnection;
use super::group::find_coordinator;
use super::producer::{
    DeliveryFuture, PartitionRegistrar, Producer, ProducerConfig, ProducerIdentity, ProducerRecord, TransactionalSend,
};
use super::resolver::ResumeHandle;
use super::topic_partition::TopicPartitionOffset;
use crate::error::{BrokerRef, Error, Result};

/// FindCoordinator key type of a transactional id.
pub(crate) const KEY_TYPE_TRANSACTION: i8 = 1;
/// TRANSACTIONAL_ID_NOT_FOUND (KIP-664).
pub(crate) const TRANSACTIONAL_ID_NOT_FOUND: KafkaCode = KafkaCode(105);

/// The group coordinator's answers to a TxnOffsetCommit whose group
/// metadata is not the group's (KIP-447): ILLEGAL_GENERATION,
/// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH (a KIP-848
/// member's epoch). The Java producer makes each an abortable error
/// (`CommitFailedException`, `FencedInstanceIdException`).
const GROUP_METADATA_FENCED: [KafkaCode; 4] = [KafkaCode(22), KafkaCode(25), KafkaCode(82), KafkaCode(113)];

/// The first TxnOffsetCommit version with the group metadata (KIP-447).
const TXN_OFFSET_COMMIT_GROUP_METADATA_VERSION: i16 = 3;

/// Which transaction protocol is spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransactionVersion {
    /// The original protocol: AddPartitionsToTxn, EndTxn ≤ v4, no epoch bump per transaction.
    V1,
    /// KIP-890: implicit partition add, EndTxn v5, an epoch bump per transaction end.
    V2,
}

impl TransactionVersion {
    /// `1` or `2`.
    pub fn number(self) -> i16 {
        match self {
            TransactionVersion::V1 => 1,
            TransactionVersion::V2 => 2,
        }
    }

    /// From the `transaction.version` feature level (0 and 1 both mean V1).
    pub fn from_feature_level(level: i16) -> Self {
        if level >= 2 {
            TransactionVersion::V2
        } else {
            TransactionVersion::V1
        }
    }

    /// Highest EndTxn version of this protocol (and, for V2, the only one).
    pub(crate) fn end_txn_version_cap(self) -> i16 {
        match self {
            TransactionVersion::V1 => 4,
            TransactionVersion::V2 => 5,
        }
    }

    fn produce_version_cap(self) -> i16 {
        match self {
            TransactionVersion::V1 => 11,
            TransactionVersion::V2 => 12,
        }
    }

    fn txn_offset_commit_version_cap(self) -> i16 {
        match self {
            TransactionVersion::V1 => 4,
            TransactionVersion::V2 => 5,
        }
    }
}

impl std::fmt::Display for TransactionVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl std::str::FromStr for TransactionVersion {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "1" | "v1" | "V1" => Ok(TransactionVersion::V1),
            "2" | "v2" | "V2" => Ok(TransactionVersion::V2),
            other => Err(Error::Config {
                option: "transaction.version",
                message: format!("{other:?} is not one of 1, 2"),
            }),
        }
    }
}

/// The cluster's transaction protocol: the finalized `transaction.version`
/// feature in a broker's ApiVersions answer. V2 also needs EndTxn v5.
pub async fn transaction_version(cluster: &Cluster) -> Result<TransactionVersion> {
    let conn = cluster.any_broker().await?;
    broker_transaction_version(&conn).await
}

/// [`transaction_version`] as one broker sees it.
pub(crate) async fn broker_transaction_version(conn: &BrokerConnection) -> Result<TransactionVersion> {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("clink-kafka"))
        .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
    let response = conn.request(&request).await?;
    if response.error_code != 0 {
        return Err(Error::kafka(
            "ApiVersions",
            conn.broker(),
            None,
            None,
            response.error_code,
            None,
        ));
    }
    let level = response
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == "transaction.version")
        .map_or(0, |f| f.max_version_level);
    let version = TransactionVersion::from_feature_level(level);
    if version == TransactionVersion::V2 && conn.version_for::<EndTxnRequest>(None)? < 5 {
        return Ok(TransactionVersion::V1);
    }
    Ok(version)
}

/// Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED: also the coordinator's
/// answer to `enable2Pc` when `transaction.two.phase.commit.enable` is off.
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

/// Transactional settings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TxnConfig {
    /// `transactional.id`: the identity that survives producer restarts.
    pub transactional_id: String,
    /// `transaction.timeout.ms`: the coordinator aborts a transaction open
    /// longer than this. Also the producer's message (delivery) timeout.
    pub transaction_timeout: Duration,
    /// `max.block.ms`: bound on retrying one coordinator call
    /// (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR).
    pub max_block: Duration,
    /// KIP-939 two-phase-commit participation (`transaction.two.phase.commit.enable`
    /// on the producer): InitProducerId v6 with `enable2Pc`, so the
    /// coordinator never aborts this id's transactions on
    /// `transaction.timeout.ms` (it keeps the timeout at `i32::MAX` ms); a
    /// prepared transaction waits for its commit or abort however long the
    /// job is down, and an open one holds back read_committed readers of its
    /// partitions until then. Needs a broker with
    /// `transaction.two.phase.commit.enable=true` that offers InitProducerId
    /// v6 (Kafka 4.4 marks it unstable: `unstable.api.versions.enable=true`);
    /// `init` refuses otherwise, naming the option. Kafka 4.4.0 answers
    /// `keepPreparedTxn` with UNSUPPORTED_VERSION, so a prepared
    /// transaction is resumed the way this client always does it: EndTxn
    /// with the staged identity, before any InitProducerId fences it.
    pub two_phase_commit: bool,
}

impl TxnConfig {
    /// A transactional id with Kafka's default timeout (60 s).
    pub fn new(transactional_id: impl Into<String>) -> Self {
        TxnConfig {
            transactional_id: transactional_id.into(),
            transaction_timeout: Duration::from_secs(60),
            max_block: Duration::from_secs(60),
            two_phase_commit: false,
        }
    }

    /// Sets `transaction.timeout.ms`.
    pub fn with_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }
}

/// Builder-style setters: each returns the config with one setting
/// changed (the fields stay public; the config is `#[non_exhaustive]`, so
/// build it from [`Default`] or its constructor, then these).
impl TxnConfig {
    /// Sets `max_block` (see the field).
    #[must_use]
    pub fn with_max_block(mut self, value: Duration) -> Self {
        self.max_block = value;
        self
    }

    /// Sets `two_phase_commit` (KIP-939 participation; see the field).
    #[must_use]
    pub fn with_two_phase_commit(mut self, value: bool) -> Self {
        self.two_phase_commit = value;
        self
    }
}

/// The transaction coordinator of one transactional id, found on demand and
/// found again after NOT_COORDINATOR or a lost connection.
pub(crate) struct TxnCoordinator {
    cluster: Cluster,
    transactional_id: String,
    conn: tokio::sync::Mutex<Option<BrokerConnection>>,
}

/// What to do after a failed coordinator call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RetryAs {
    /// Find the coordinator again, then retry.
    Refind,
    /// Retry at the same coordinator after a backoff.
    Backoff,
    /// Give up.
    Fail,
}

/// How a coordinator answer is retried: NOT_COORDINATOR and transport
/// failures find the coordinator again; COORDINATOR_LOAD_IN_PROGRESS and
/// CONCURRENT_TRANSACTIONS (not retriable in Kafka's table, but a pending
/// transition that ends by itself) back off.
pub(crate) fn retry_as(err: &Error) -> RetryAs {
    match err.kafka_code() {
        Some(KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE) => RetryAs::Refind,
        Some(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS | KafkaCode::CONCURRENT_TRANSACTIONS) => RetryAs::Backoff,
        _ if err.is_connection_error() || matches!(err, Error::NoBrokerAvailable { .. }) => RetryAs::Refind,
        Some(code) if code.is_retriable() => RetryAs::Backoff,
        _ => RetryAs::Fail,
    }
}

impl TxnCoordinator {
    pub(crate) fn new(cluster: Cluster, transactional_id: &str) -> Self {
        TxnCoordinator {
            cluster,
            transactional_id: transactional_id.to_owned(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// The coordinator's connection, finding it if needed.
    pub(crate) async fn connection(&self) -> Result<BrokerConnection> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref().filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let c = find_coordinator(&self.cluster, KEY_TYPE_TRANSACTION, &self.transactional_id).await?;
        *guard = Some(c.clone());
        Ok(c)
    }

    async fn forget(&self) {
        *self.conn.lock().await = None;
    }

    /// Runs `op` at the coordinator, retrying as [`retry_as`] says until
    /// `bound` has passed. The last error is returned as it is.
    pub(crate) async fn call<T, F, Fut>(&self, api: &'static str, bound: Duration, mut op: F) -> Result<T>
    where
        F: FnMut(BrokerConnection) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut backoff = self.cluster.backoff();
        loop {
            let err = match self.connection().await {
                Ok(conn) => match op(conn).await {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            let how = retry_as(&err);
            if how == RetryAs::Fail {
                return Err(err);
            }
            let delay = backoff.next_delay();
            if started.elapsed() + delay >= bound {
                return Err(err);
            }
            if how == RetryAs::Refind {
                self.forget().await;
            }
            tracing::debug!(api, transactional_id = %self.transactional_id, error = %err, ?delay, "retrying at the transaction coordinator");
            tokio::time::sleep(delay).await;
        }
    }
}

/// Maps a coordinator's (or leader's) error code to the typed error: the
/// four fatal transaction answers get their own variants.
pub(crate) fn txn_error(
    api: &'static str,
    broker: &BrokerRef,
    transactional_id: &str,
    identity: ProducerIdentity,
    code: i16,
    message: Option<&str>,
) -> Error {
    match KafkaCode(code) {
        KafkaCode::PRODUCER_FENCED => Error::ProducerFenced {
            transactional_id: transactional_id.to_owned(),
            producer_id: identity.producer_id,
            producer_epoch: identity.producer_epoch,
            api,
            broker: Some(broker.clone()),
        },
        KafkaCode::INVALID_PRODUCER_EPOCH => Error::InvalidProducerEpoch {
            transactional_id: transactional_id.to_owned(),
            producer_id: identity.producer_id,
            producer_epoch: identity.producer_epoch,
            api,
            broker: Some(broker.clone()),
        },
        KafkaCode::INVALID_TXN_STATE => Error::InvalidTxnState {
            transactional_id: transactional_id.to_owned(),
            message: format!(
                "{api} on broker {broker} answered INVALID_TXN_STATE{}",
                message.map(|m| format!(" ({m})")).unwrap_or_default()
            ),
        },
        KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED => Error::TransactionalIdAuthorizationFailed {
            transactional_id: transactional_id.to_owned(),
            api,
            broker: Some(broker.clone()),
        },
        _ => Error::kafka(api, broker, None, None, code, message),
    }
}

/// Whether `err` ends the transactional producer for good.
fn is_fatal(err: &Error) -> bool {
    matches!(
        err,
        Error::ProducerFenced { .. }
            | Error::InvalidProducerEpoch { .. }
            | Error::TransactionalIdAuthorizationFailed { .. }
            | Error::ProducerFailed { .. }
    ) || matches!(
        err.kafka_code(),
        Some(
            KafkaCode::PRODUCER_FENCED
                | KafkaCode::INVALID_PRODUCER_EPOCH
                | KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                | KafkaCode::UNKNOWN_PRODUCER_ID
                | KafkaCode::INVALID_PRODUCER_ID_MAPPING
        )
    )
}

/// EndTxn at the coordinator with `identity` at the protocol's version. For
/// V2, answers the producer id/epoch the coordinator bumped to.
pub(crate) async fn end_txn(
    conn: &BrokerConnection,
    version: TransactionVersion,
    transactional_id: &str,
    identity: ProducerIdentity,
    commit: bool,
) -> Result<Option<ProducerIdentity>> {
    let api_version = conn.version_for::<EndTxnRequest>(Some(version.end_txn_version_cap()))?;
    if version == TransactionVersion::V2 && api_version < 5 {
        return Err(Error::Protocol {
            broker: conn.broker().clone(),
            api: "EndTxn",
            source: Arc::new(clink_kafka_wire::Error::Invalid {
                context: "EndTxn",
                message: format!("transaction.version 2 needs EndTxn v5; the broker speaks up to v{api_version}"),
            }),
        });
    }
    let mut request = EndTxnRequest::default();
    request.transactional_id = TransactionalId(StrBytes::from_string(transactional_id.to_owned()));
    request.producer_id = identity.producer_id.into();
    request.producer_epoch = identity.producer_epoch;
    request.committed = commit;
    let response = conn.request_at(api_version, &request).await?;
    if response.error_code != 0 {
        return Err(txn_error(
            "EndTxn",
            conn.broker(),
            transactional_id,
            identity,
            response.error_code,
            None,
        ));
    }
    Ok((api_version >= 5).then_some(ProducerIdentity {
        producer_id: response.producer_id.0,
        producer_epoch: response.producer_epoch,
    }))
}

/// Where the producer is in its transaction cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// No open transaction.
    Ready,
    /// `begin` was called. `records` once a record was queued, `offsets`
    /// once offsets were added: only then may the coordinator know of the
    /// transaction. `commit_sent` once an EndTxn(commit) was sent: from
    /// then on only a commit may end it.
    Open {
        records: bool,
        offsets: bool,
        commit_sent: bool,
    },
}

/// What the producer's background tasks and the API share.
struct TxnCore {
    config: TxnConfig,
    version: TransactionVersion,
    coordinator: TxnCoordinator,
    /// The identity the open (or next) transaction runs under.
    identity: Mutex<ProducerIdentity>,
    /// Partitions added to the open transaction (V1).
    added: Mutex<HashSet<(String, i32)>>,
    fatal: OnceLock<Error>,
    /// Commits and aborts, count and latency (`crate::metrics`).
    metrics: super::metrics::TxnMetrics,
}

impl TxnCore {
    fn identity(&self) -> ProducerIdentity {
        *self.identity.lock().expect("identity lock")
    }

    /// Records `err` as the sticky fatal error when it is one; returns the
    /// error to report.
    fn check_fatal(&self, err: Error) -> Error {
        let err = self.typed(err);
        if is_fatal(&err) {
            let _ = self.fatal.set(err.clone());
            tracing::error!(transactional_id = %self.config.transactional_id, error = %err, "transactional producer failed");
        }
        err
    }

    /// A fenced or epoch answer from a partition leader arrives as a plain
    /// Kafka error (or wrapped in ProducerFailed); give it the typed form.
    fn typed(&self, err: Error) -> Error {
        let broker = match &err {
            Error::Kafka { broker, .. } => Some(broker.clone()),
            Error::ProducerFailed { cause } => match cause.as_ref() {
                Error::Kafka { broker, .. } => Some(broker.clone()),
                _ => None,
            },
            _ => None,
        };
        let api = match &err {
            Error::Kafka { api, .. } => api,
            Error::ProducerFailed { cause } => match cause.as_ref() {
                Error::Kafka { api, .. } => api,
                _ => &"Produce",
            },
            _ => &"Produce",
        };
        let identity = self.identity();
        let id = self.config.transactional_id.clone();
        match (err.kafka_code(), &err) {
            (_, Error::ProducerFenced { .. } | Error::InvalidProducerEpoch { .. }) => err,
            (Some(KafkaCode::PRODUCER_FENCED), _) => Error::ProducerFenced {
                transactional_id: id,
                producer_id: identity.producer_id,
                producer_epoch: identity.producer_epoch,
                api,
                broker,
            },
            (Some(KafkaCode::INVALID_PRODUCER_EPOCH), _) => Error::InvalidProducerEpoch {
                transactional_id: id,
                producer_id: identity.producer_id,
                producer_epoch: identity.producer_epoch,
                api,
                broker,
            },
            _ => err,
        }
    }

    async fn add_partition(&self, topic: &str, partition: i32) -> Result<()> {
        if self
            .added
            .lock()
            .expect("added lock")
            .contains(&(topic.to_owned(), partition))
        {
            return Ok(());
        }
        let id = &self.config.transactional_id;
        let identity = self.identity();
        self.coordinator
            .call("AddPartitionsToTxn", self.config.max_block, |conn| async move {
                let version = conn.version_for::<AddPartitionsToTxnRequest>(Some(3))?;
                let mut t = AddPartitionsToTxnTopic::default();
                t.name = TopicName(StrBytes::from_string(topic.to_owned()));
                t.partitions = vec![partition];
                let mut request = AddPartitionsToTxnRequest::default();
                request.v3_and_below_transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
                request.v3_and_below_producer_id = identity.producer_id.into();
                request.v3_and_below_producer_epoch = identity.producer_epoch;
                request.v3_and_below_topics = vec![t];
                let response = conn.request_at(version, &request).await?;
                if response.error_code != 0 {
                    return Err(txn_error(
                        "AddPartitionsToTxn",
                        conn.broker(),
                        id,
                        identity,
                        response.error_code,
                        None,
                    ));
                }
                let code = response
                    .results_by_topic_v3_and_below
                    .iter()
                    .filter(|t| t.name.0.as_str() == topic)
                    .flat_map(|t| t.results_by_partition.iter())
                    .find(|p| p.partition_index == partition)
                    .map(|p| p.partition_error_code)
                    .ok_or_else(|| Error::Protocol {
                        broker: conn.broker().clone(),
                        api: "AddPartitionsToTxn",
                        source: Arc::new(clink_kafka_wire::Error::Invalid {
                            context: "AddPartitionsToTxn response",
                            message: format!("no answer for {topic}[{partition}]"),
                        }),
                    })?;
                if code != 0 {
                    let mut e = txn_error("AddPartitionsToTxn", conn.broker(), id, identity, code, None);
                    if let Error::Kafka {
                        topic: t, partition: p, ..
                    } = &mut e
                    {
                        *t = Some(topic.to_owned());
                        *p = Some(partition);
                    }
                    return Err(e);
                }
                Ok(())
            })
            .await
            .map_err(|e| self.check_fatal(e))?;
        self.added
            .lock()
            .expect("added lock")
            .insert((topic.to_owned(), partition));
        Ok(())
    }
}

/// The [`PartitionRegistrar`] the V1 producer runs with.
struct Registrar(Arc<TxnCore>);

impl PartitionRegistrar for Registrar {
    fn ensure_added<'a>(
        &'a self,
        topic: &'a str,
        partition: i32,
    ) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>> {
        Box::pin(self.0.add_partition(topic, partition))
    }
}

/// A transactional producer: `init`, then [`begin`](Self::begin) →
/// [`Transaction`]: `send` … / `commit` or `abort`, repeatedly. Records
/// become visible to `read_committed` readers only when their transaction
/// commits.
///
/// A producer has one transaction at a time, and the types say so:
/// `begin` takes `&mut self` and returns a [`Transaction`] that borrows the
/// producer until `commit(self)` or `abort(self)` consumes it, so nothing
/// can begin, commit or abort concurrently. `send` takes `&self` on the
/// transaction and may be called concurrently from several tasks inside it.
///
/// ```no_run
/// # async fn run() -> clink_kafka::Result<()> {
/// use clink_kafka::client::{ClientConfig, Cluster, ProducerConfig, ProducerRecord, TransactionalProducer, TxnConfig};
///
/// let cluster = Cluster::connect(ClientConfig::new("127.0.0.1:9092")).await?;
/// let mut producer =
///     TransactionalProducer::init(cluster, ProducerConfig::default(), TxnConfig::new("my-txn-id")).await?;
/// let txn = producer.begin().await?;
/// txn.send(ProducerRecord::new("out", "hello")).await?;
/// txn.commit().await?;
/// producer.close().await?;
/// # Ok(())
/// # }
/// ```
pub struct TransactionalProducer {
    core: Arc<TxnCore>,
    producer: Producer,
    phase: Mutex<Phase>,
}

impl std::fmt::Debug for TransactionalProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionalProducer")
            .field("identity", &self.identity())
            .field("phase", &*self.phase.lock().expect("phase lock"))
            .finish()
    }
}

impl TransactionalProducer {
    /// Finds the transaction coordinator, learns the cluster's transaction
    /// protocol, and runs InitProducerId with the transactional id — which
    /// fences every older producer of that id (their open transaction is
    /// aborted by the coordinator).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped `init` may already have fenced older
    /// producers of the id. Nothing is left behind here; call it again.
    pub async fn init(cluster: Cluster, config: ProducerConfig, txn: TxnConfig) -> Result<TransactionalProducer> {
        if txn.transactional_id.is_empty() {
            return Err(Error::Config {
                option: "transactional.id",
                message: "must not be empty".into(),
            });
        }
        let timeout_ms = txn.transaction_timeout.as_millis();
        if timeout_ms == 0 || timeout_ms > i32::MAX as u128 {
            return Err(Error::Config {
                option: "transaction.timeout.ms",
                message: format!("{timeout_ms} is not in 1..={}", i32::MAX),
            });
        }
        let mut config = config;
        // The message timeout is the transaction timeout: a batch not
        // delivered by then belongs to a transaction the coordinator aborts.
        config.delivery_timeout = txn.transaction_timeout;
        config.ack_timeout = config.ack_timeout.min(txn.transaction_timeout);
        let coordinator = TxnCoordinator::new(cluster.clone(), &txn.transactional_id);
        let version = coordinator
            .call("ApiVersions", txn.max_block, |conn| async move {
                broker_transaction_version(&conn).await
            })
            .await?;
        let id = &txn.transactional_id;
        let two_phase_commit = txn.two_phase_commit;
        let identity = coordinator
            .call("InitProducerId", txn.max_block, |conn| async move {
                let mut request = InitProducerIdRequest::default();
                request.transactional_id = Some(TransactionalId(StrBytes::from_string(id.clone())));
                request.transaction_timeout_ms = timeout_ms as i32;
                request.producer_id = (-1).into();
                request.producer_epoch = -1;
                let response = if two_phase_commit {
                    if conn.version_for::<InitProducerIdTwoPhaseRequest>(None).is_err() {
                        let offered = conn.version_for::<InitProducerIdRequest>(None)?;
                        return Err(Error::Config {
                            option: "two_phase_commit",
                            message: format!(
                                "the broker {} offers InitProducerId up to v{offered}; KIP-939 two-phase commit \
                                 needs v{TWO_PHASE_COMMIT_VERSION} (Kafka 4.4: unstable.api.versions.enable=true \
                                 and transaction.two.phase.commit.enable=true on the brokers)",
                                conn.broker()
                            ),
                        });
                    }
                    request.enable_2_pc = true;
                    let request = InitProducerIdTwoPhaseRequest { request };
                    conn.request_at(TWO_PHASE_COMMIT_VERSION, &request).await?
                } else {
                    conn.request(&request).await?
                };
                if two_phase_commit && response.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED {
                    return Err(Error::Config {
                        option: "two_phase_commit",
                        message: format!(
                            "the broker {} refused two-phase commit for transactional id {id:?} \
                             (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): it needs \
                             transaction.two.phase.commit.enable=true and, under an authorizer, the \
                             TWO_PHASE_COMMIT operation on the transactional id",
                            conn.broker()
                        ),
                    });
                }
                if response.error_code != 0 {
                    let none = ProducerIdentity {
                        producer_id: -1,
                        producer_epoch: -1,
                    };
                    return Err(txn_error(
                        "InitProducerId",
                        conn.broker(),
                        id,
                        none,
                        response.error_code,
                        None,
                    ));
                }
                Ok(ProducerIdentity {
                    producer_id: response.producer_id.0,
                    producer_epoch: response.producer_epoch,
                })
            })
            .await?;
        tracing::info!(transactional_id = %id, producer_id = identity.producer_id,
            epoch = identity.producer_epoch, transaction_version = %version, two_phase_commit,
            "transactional producer ready");
        let core = Arc::new(TxnCore {
            config: txn.clone(),
            version,
            coordinator,
            identity: Mutex::new(identity),
            added: Mutex::new(HashSet::new()),
            fatal: OnceLock::new(),
            metrics: super::metrics::TxnMetrics::new(cluster.config()),
        });
        let send = TransactionalSend {
            transactional_id: txn.transactional_id.clone(),
            produce_max_version: version.produce_version_cap(),
            registrar: match version {
                TransactionVersion::V1 => Some(Arc::new(Registrar(core.clone())) as Arc<dyn PartitionRegistrar>),
                TransactionVersion::V2 => None,
            },
        };
        let producer = Producer::transactional(cluster, config, identity, send)?;
        Ok(TransactionalProducer {
            core,
            producer,
            phase: Mutex::new(Phase::Ready),
        })
    }

    /// The identity the open transaction runs under (between transactions:
    /// the one the next will run under), as a handle to stage for in-doubt
    /// resolution. Exact after every epoch bump and producer id rollover.
    pub fn identity(&self) -> ResumeHandle {
        let id = self.core.identity();
        ResumeHandle {
            transactional_id: self.core.config.transactional_id.clone(),
            producer_id: id.producer_id,
            producer_epoch: id.producer_epoch,
            transaction_version: self.core.version,
        }
    }

    /// The transaction protocol in use.
    pub fn transaction_version(&self) -> TransactionVersion {
        self.core.version
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.core.config.transactional_id
    }

    fn check(&self) -> Result<()> {
        if let Some(e) = self.core.fatal.get() {
            return Err(e.clone());
        }
        if let Some(e) = self.producer.fatal_error() {
            return Err(self.core.check_fatal(e));
        }
        Ok(())
    }

    fn invalid_state(&self, message: &str) -> Error {
        Error::InvalidTxnState {
            transactional_id: self.core.config.transactional_id.clone(),
            message: message.to_owned(),
        }
    }

    /// Opens a transaction and returns its guard (locally; the coordinator
    /// learns of it with the first record or offsets).
    ///
    /// A transaction whose [`Transaction`] was dropped without `commit` or
    /// `abort` is still open here: `begin` ends it first. It aborts it,
    /// unless a dropped or failed `commit` may already have reached the
    /// coordinator (its EndTxn was sent): then it completes that commit
    /// (the coordinator answers a repeated EndTxn for a transaction it
    /// committed with success), because an abort would be refused. An error
    /// there is returned and the transaction stays open (call `begin`
    /// again, or take it back with [`resume`](Self::resume)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the only await is ending a dropped transaction, whose
    /// state lives in `self` (as [`Transaction::commit`]).
    pub async fn begin(&mut self) -> Result<Transaction<'_>> {
        let open = match *self.phase.lock().expect("phase lock") {
            Phase::Open { commit_sent, .. } => Some(commit_sent),
            Phase::Ready => None,
        };
        if let Some(commit) = open {
            tracing::debug!(transactional_id = %self.core.config.transactional_id, commit,
                "begin: ending the transaction a dropped guard left open");
            self.end_measured(commit).await?;
        }
        self.open_transaction()?;
        Ok(Transaction { producer: self })
    }

    /// The guard of the open transaction, if one is open (its
    /// [`Transaction`] was dropped, or a `commit` / `abort` failed or was
    /// cancelled): to retry the commit after a dropped `commit`, or to go on.
    pub fn resume(&mut self) -> Option<Transaction<'_>> {
        let open = matches!(*self.phase.lock().expect("phase lock"), Phase::Open { .. });
        open.then_some(Transaction { producer: self })
    }

    /// Opens a transaction without a guard (the connector's backend, which
    /// keeps the producer in a struct and serialises its calls with `&mut`).
    pub(crate) fn open_transaction(&self) -> Result<()> {
        self.check()?;
        let mut phase = self.phase.lock().expect("phase lock");
        if *phase != Phase::Ready {
            return Err(self.invalid_state("begin: a transaction is already open"));
        }
        self.core.added.lock().expect("added lock").clear();
        let _ = self.producer.take_failure();
        *phase = Phase::Open {
            records: false,
            offsets: false,
            commit_sent: false,
        };
        Ok(())
    }

    /// Sends `record` inside the open transaction. The future resolves when
    /// the record is written (still invisible to read_committed readers).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`Producer::send`]: the record is part
    /// of the transaction only if the call returned `Ok`.
    pub(crate) async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        self.check()?;
        if *self.phase.lock().expect("phase lock") == Phase::Ready {
            return Err(self.invalid_state("send: no open transaction (call begin first)"));
        }
        let delivery = self.producer.send(record).await.map_err(|e| self.core.check_fatal(e))?;
        if let Phase::Open { records, .. } = &mut *self.phase.lock().expect("phase lock") {
            *records = true;
        }
        Ok(delivery)
    }

    /// Sends every buffered record and waits for them, bounded by `timeout`.
    /// A record that failed makes the transaction abort-only: the error is
    /// returned here (and again by `commit`).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only waits ([`Producer::flush`]); a
    /// failure it has not yet reported stays kept for `commit`.
    pub(crate) async fn flush(&self, timeout: Duration) -> Result<()> {
        self.check()?;
        self.producer
            .flush(timeout)
            .await
            .map_err(|e| self.core.check_fatal(e))?;
        let failure = self.producer.take_failure();
        if let Some(e) = failure {
            let e = self.core.check_fatal(e);
            if is_fatal(&e) {
                return Err(e);
            }
            // Keep it for commit.
            self.producer.record_failure(e.clone());
            return Err(Error::TransactionAbortRequired {
                transactional_id: self.core.config.transactional_id.clone(),
                cause: Box::new(e),
            });
        }
        Ok(())
    }

    /// Adds consumed offsets to the transaction: they are committed for
    /// `group_id` if and only if the transaction commits (consume →
    /// transform → produce). Each entry is (topic, partition, next offset
    /// to consume). V1: AddOffsetsToTxn, then TxnOffsetCommit at the group
    /// coordinator; V2: TxnOffsetCommit v5 alone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may or may not have added the
    /// offsets to the transaction. Call it again with the same offsets (the
    /// coordinator keeps the last ones given), or abort.
    pub(crate) async fn send_offsets_to_transaction(
        &self,
        group_id: &str,
        offsets: &[TopicPartitionOffset],
    ) -> Result<()> {
        self.send_offsets_inner(group_id, offsets, None).await
    }

    /// [`send_offsets_to_transaction`](Self::send_offsets_to_transaction)
    /// with the consumer's group metadata (KIP-447): TxnOffsetCommit v3+
    /// carries its generation, member id and instance id, and the group
    /// coordinator refuses the commit of a member that is no longer in that
    /// generation ([`Error::GroupMetadataFenced`]; the transaction is then
    /// abort-only).
    ///
    /// # Cancel safety
    ///
    /// As `send_offsets_to_transaction`.
    pub(crate) async fn send_offsets_with_metadata(
        &self,
        offsets: &[TopicPartitionOffset],
        metadata: &ConsumerGroupMetadata,
    ) -> Result<()> {
        if metadata.group_id.is_empty() {
            return Err(Error::Config {
                option: "group.id",
                message: "the consumer group metadata names no group".into(),
            });
        }
        self.send_offsets_inner(&metadata.group_id, offsets, Some(metadata))
            .await
    }

    async fn send_offsets_inner(
        &self,
        group_id: &str,
        offsets: &[TopicPartitionOffset],
        metadata: Option<&ConsumerGroupMetadata>,
    ) -> Result<()> {
        self.check()?;
        if *self.phase.lock().expect("phase lock") == Phase::Ready {
            return Err(self.invalid_state("send_offsets_to_transaction: no open transaction"));
        }
        // From here the coordinator may know of the transaction (AddOffsetsToTxn,
        // or TxnOffsetCommit v5's implicit add even when it then fails).
        if let Phase::Open { offsets, .. } = &mut *self.phase.lock().expect("phase lock") {
            *offsets = true;
        }
        let core = &self.core;
        let id = &core.config.transactional_id;
        let identity = core.identity();
        if core.version == TransactionVersion::V1 {
            core.coordinator
                .call("AddOffsetsToTxn", core.config.max_block, |conn| async move {
                    let mut request = AddOffsetsToTxnRequest::default();
                    request.transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
                    request.producer_id = identity.producer_id.into();
                    request.producer_epoch = identity.producer_epoch;
                    request.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
                    let response = conn.request(&request).await?;
                    if response.error_code != 0 {
                        return Err(txn_error(
                            "AddOffsetsToTxn",
                            conn.broker(),
                            id,
                            identity,
                            response.error_code,
                            None,
                        ));
                    }
                    Ok(())
                })
                .await
                .map_err(|e| core.check_fatal(e))?;
        }
        let mut by_topic: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
        for o in offsets {
            let mut p = TxnOffsetCommitRequestPartition::default();
            p.partition_index = o.partition;
            p.committed_offset = o.offset;
            p.committed_leader_epoch = -1;
            if let Some(m) = &o.metadata {
                p.committed_metadata = Some(StrBytes::from_string(m.clone()));
            }
            by_topic.entry(o.topic.as_str()).or_default().push(p);
        }
        let topics: Vec<TxnOffsetCommitRequestTopic> = by_topic
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = TxnOffsetCommitRequestTopic::default();
                t.name = TopicName(StrBytes::from_string(name.to_owned()));
                t.partitions = partitions;
                t
            })
            .collect();
        let cluster = &core.coordinator.cluster;
        let started = Instant::now();
        let mut backoff = cluster.backoff();
        loop {
            let attempt = async {
                let conn = find_coordinator(cluster, 0, group_id).await?;
                let version =
                    conn.version_for::<TxnOffsetCommitRequest>(Some(core.version.txn_offset_commit_version_cap()))?;
                let mut request = TxnOffsetCommitRequest::default();
                request.transactional_id = TransactionalId(StrBytes::from_string(id.clone()));
                request.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
                request.producer_id = identity.producer_id.into();
                request.producer_epoch = identity.producer_epoch;
                request.generation_id = -1;
                request.member_id = StrBytes::from_static_str("");
                if let Some(m) = metadata {
                    if version < TXN_OFFSET_COMMIT_GROUP_METADATA_VERSION {
                        return Err(Error::Protocol {
                            broker: conn.broker().clone(),
                            api: "TxnOffsetCommit",
                            source: Arc::new(clink_kafka_wire::Error::Invalid {
                                context: "TxnOffsetCommit",
                                message: format!(
                                    "KIP-447 group metadata needs TxnOffsetCommit \
                                     v{TXN_OFFSET_COMMIT_GROUP_METADATA_VERSION}; the broker speaks up to v{version}"
                                ),
                            }),
                        });
                    }
                    request.generation_id = m.generation_id;
                    request.member_id = StrBytes::from_string(m.member_id.clone());
                    request.group_instance_id = m.group_instance_id.clone().map(StrBytes::from_string);
                }
                request.topics = topics.clone();
                let response = conn.request_at(version, &request).await?;
                for t in &response.topics {
                    for p in &t.partitions {
                        // Only a commit that carried a member's metadata
                        // can be fenced by it; without one these codes are
                        // ordinary errors.
                        if p.error_code != 0
                            && metadata.is_some()
                            && GROUP_METADATA_FENCED.contains(&KafkaCode(p.error_code))
                        {
                            return Err(Error::GroupMetadataFenced {
                                group_id: group_id.to_owned(),
                                generation_id: request.generation_id,
                                member_id: request.member_id.to_string(),
                                group_instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
                                code: KafkaCode(p.error_code),
                                broker: Some(conn.broker().clone()),
                            });
                        }
                        if p.error_code != 0 {
                            let mut e = txn_error("TxnOffsetCommit", conn.broker(), id, identity, p.error_code, None);
                            if let Error::Kafka { topic, partition, .. } = &mut e {
                                *topic = Some(t.name.0.to_string());
                                *partition = Some(p.partition_index);
                            }
                            return Err(e);
                        }
                    }
                }
                Ok(())
            };
            let err = match attempt.await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if let Error::GroupMetadataFenced { .. } = &err {
                // Abort-only, as a failed record: `commit` refuses, `abort` clears it.
                tracing::warn!(transactional_id = %id, error = %err, "the group fenced this transaction's offsets");
                self.producer.record_failure(err.clone());
                return Err(err);
            }
            let delay = backoff.next_delay();
            if retry_as(&err) == RetryAs::Fail || started.elapsed() + delay >= core.config.max_block {
                return Err(core.check_fatal(err));
            }
            tracing::debug!(error = %err, "retrying TxnOffsetCommit");
            tokio::time::sleep(delay).await;
        }
    }

    /// Commits the open transaction (the backend's unguarded path; see
    /// [`Transaction::commit`]).
    pub(crate) async fn commit(&self) -> Result<()> {
        self.end_measured(true).await
    }

    /// Aborts the open transaction (the backend's unguarded path; see
    /// [`Transaction::abort`]).
    pub(crate) async fn abort(&self) -> Result<()> {
        self.end_measured(false).await
    }

    async fn end_measured(&self, commit: bool) -> Result<()> {
        let begun = std::time::Instant::now();
        self.end(commit).await?;
        self.core.metrics.ended(commit, begun.elapsed());
        Ok(())
    }

    async fn end(&self, commit: bool) -> Result<()> {
        self.check()?;
        let what = if commit { "commit" } else { "abort" };
        let (records, offsets) = match &*self.phase.lock().expect("phase lock") {
            Phase::Open { records, offsets, .. } => (*records, *offsets),
            Phase::Ready => return Err(self.invalid_state(&format!("{what}: no open transaction"))),
        };
        let flushed = self.flush(self.core.config.transaction_timeout).await;
        match flushed {
            Ok(()) => {}
            Err(e) if is_fatal(&e) => return Err(e),
            Err(Error::TransactionAbortRequired { .. }) if !commit => {
                let _ = self.producer.take_failure();
            }
            Err(e) => return Err(e),
        }
        // Under V1 the coordinator knows of the transaction once a partition
        // or the offsets were added; under V2 once anything was produced.
        let started = match self.core.version {
            TransactionVersion::V1 => offsets || !self.core.added.lock().expect("added lock").is_empty(),
            TransactionVersion::V2 => offsets || records,
        };
        if !started {
            // The coordinator never heard of this transaction: nothing to end.
            *self.phase.lock().expect("phase lock") = Phase::Ready;
            return Ok(());
        }
        if commit {
            if let Phase::Open { commit_sent, .. } = &mut *self.phase.lock().expect("phase lock") {
                *commit_sent = true;
            }
        }
        let core = &self.core;
        let id = &core.config.transactional_id;
        let identity = core.identity();
        let version = core.version;
        let bumped = core
            .coordinator
            .call("EndTxn", core.config.max_block, |conn| async move {
                end_txn(&conn, version, id, identity, commit).await
            })
            .await
            .map_err(|e| core.check_fatal(e))?;
        if let Some(next) = bumped {
            if next.producer_id >= 0 && next != identity {
                if next.producer_id != identity.producer_id {
                    tracing::info!(transactional_id = %id, old = identity.producer_id, new = next.producer_id,
                        "epoch rolled over to a new producer id");
                }
                *core.identity.lock().expect("identity lock") = next;
                self.producer.set_identity(next);
            }
        }
        core.added.lock().expect("added lock").clear();
        *self.phase.lock().expect("phase lock") = Phase::Ready;
        tracing::debug!(transactional_id = %id, what, "transaction ended");
        Ok(())
    }

    /// Ends an open transaction, if any (aborts it, or completes a commit
    /// whose EndTxn was sent: as [`begin`](Self::begin)), then closes the
    /// producer.
    ///
    /// # Cancel safety
    ///
    /// Dropping it drops the producer: an open transaction is left to the
    /// coordinator's `transaction.timeout`, which aborts it.
    pub async fn close(self) -> Result<()> {
        let open = match *self.phase.lock().expect("phase lock") {
            Phase::Open { commit_sent, .. } => Some(commit_sent),
            Phase::Ready => None,
        };
        if let Some(commit) = open.filter(|_| self.check().is_ok()) {
            self.end_measured(commit).await?;
        }
        self.producer.close(self.core.config.transaction_timeout).await
    }
}

/// One open transaction of a [`TransactionalProducer`], from
/// [`TransactionalProducer::begin`]: `send` … then [`commit`](Self::commit)
/// or [`abort`](Self::abort), which consume it.
///
/// It borrows the producer mutably, so no second transaction, commit or
/// abort can race it. `send` and `flush` take `&self` and may run
/// concurrently from several tasks.
///
/// # Dropped without `commit` or `abort`
///
/// `Drop` cannot await EndTxn, so dropping the guard leaves the
/// transaction open in the producer (and at the coordinator, if a record
/// or offsets reached it) and marks nothing else: the next
/// [`TransactionalProducer::begin`] or [`TransactionalProducer::close`]
/// aborts it first (or completes a commit whose EndTxn was already sent),
/// and [`TransactionalProducer::resume`] gives the guard back. A producer
/// dropped altogether leaves it to the coordinator's
/// `transaction.timeout`, which aborts it.
#[must_use = "a transaction dropped without commit or abort is aborted by the next begin"]
pub struct Transaction<'p> {
    producer: &'p mut TransactionalProducer,
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction").field("producer", &self.producer).finish()
    }
}

impl Transaction<'_> {
    /// Sends `record` inside the transaction. The future resolves when the
    /// record is written (still invisible to read_committed readers).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`Producer::send`]: the record is part
    /// of the transaction only if the call returned `Ok`.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        self.producer.send(record).await
    }

    /// Sends every buffered record and waits for them, bounded by `timeout`.
    /// A record that failed makes the transaction abort-only: the error is
    /// returned here (and again by `commit`).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only waits ([`Producer::flush`]); a
    /// failure it has not yet reported stays kept for `commit`.
    pub async fn flush(&self, timeout: Duration) -> Result<()> {
        self.producer.flush(timeout).await
    }

    /// Adds consumed offsets to the transaction: they are committed for
    /// `group_id` if and only if the transaction commits (consume →
    /// transform → produce). Each entry's offset is the next one to consume.
    /// V1: AddOffsetsToTxn, then TxnOffsetCommit at the group coordinator;
    /// V2: TxnOffsetCommit v5 alone.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped call may or may not have added the
    /// offsets to the transaction. Call it again with the same offsets (the
    /// coordinator keeps the last ones given), or abort.
    pub async fn send_offsets(&mut self, group_id: &str, offsets: &[TopicPartitionOffset]) -> Result<()> {
        self.producer.send_offsets_to_transaction(group_id, offsets).await
    }

    /// [`send_offsets`](Self::send_offsets) for a group member
    /// ([KIP-447]): the offsets are committed for `metadata.group_id` if and
    /// only if the transaction commits, and TxnOffsetCommit (v3+, under
    /// both transaction protocols) carries the member's generation, member
    /// id and `group.instance.id`, so the group coordinator refuses the
    /// commit of a zombie: a member whose generation is gone (its
    /// partitions were moved in a rebalance), that the group no longer
    /// knows, or a static member fenced by a newer instance. That refusal is
    /// [`Error::GroupMetadataFenced`] and leaves the transaction abort-only:
    /// `commit` then fails with [`Error::TransactionAbortRequired`];
    /// [`abort`](Self::abort) it (its records are discarded, the producer
    /// goes on). Take `metadata` from the consumer right before the call
    /// (`GroupConsumer::group_metadata`), after the last poll whose records
    /// are in the transaction.
    ///
    /// Under transaction.version 1 AddOffsetsToTxn goes first; under 2
    /// TxnOffsetCommit v5 adds the offsets to the transaction itself
    /// (KIP-890). A broker without TxnOffsetCommit v3 is refused with
    /// [`Error::Protocol`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, as `send_offsets`: call it again with the same
    /// offsets, or abort.
    ///
    /// [KIP-447]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-447%3A+Producer+scalability+for+exactly+once+semantics
    pub async fn send_offsets_with_metadata(
        &mut self,
        offsets: &[TopicPartitionOffset],
        metadata: &ConsumerGroupMetadata,
    ) -> Result<()> {
        self.producer.send_offsets_with_metadata(offsets, metadata).await
    }

    /// The identity this transaction runs under, as a handle to stage for
    /// in-doubt resolution ([`TransactionalProducer::identity`]).
    pub fn identity(&self) -> ResumeHandle {
        self.producer.identity()
    }

    /// Flushes, then commits the transaction (EndTxn). Under V2 the
    /// coordinator's bumped identity is taken for the next transaction.
    ///
    /// # Cancel safety
    ///
    /// Every piece of state lives in the producer and changes only after the
    /// coordinator's answer, so a dropped (or failed) `commit` leaves the
    /// transaction open there (it may or may not have committed at the
    /// coordinator). Take it back with [`TransactionalProducer::resume`]
    /// and call `commit` again: the coordinator answers a repeated EndTxn
    /// for a transaction it already committed with success (under V2 with
    /// the bumped epoch), so it ends exactly once; or let the next `begin`
    /// finish it. Do not switch to `abort` after a dropped `commit`: if the
    /// commit went through, the abort is refused. Tested by dropping it at a
    /// sweep of points (`tests/producer_cancel.rs`).
    pub async fn commit(self) -> Result<()> {
        self.producer.end_measured(true).await
    }

    /// Flushes what is buffered, then aborts the transaction. Records that
    /// failed to deliver do not stop an abort.
    ///
    /// # Cancel safety
    ///
    /// As [`commit`](Self::commit): after a dropped `abort`, take the
    /// transaction back with [`TransactionalProducer::resume`] and call
    /// `abort` again.
    pub async fn abort(self) -> Result<()> {
        self.producer.end_measured(false).await
    }
}
