//! The native async client: tokio on top of the sans-IO `clink-kafka-wire`.
//!
//! Data flows one way: socket → [`connection`] (framing, correlation ids,
//! ApiVersions, SASL) → [`cluster`] (metadata, leaders, one connection per
//! broker) → [`producer`] / [`consumer`] / [`admin`].
//!
//! - [`connection`]: one driver task per broker connection; pipelined requests.
//! - [`sasl`]: SaslHandshake + SaslAuthenticate with PLAIN and SCRAM (KIP-43, KIP-152, KIP-84).
//! - [`cluster`]: bootstrap, cached metadata, leader lookup with bounded retries.
//! - [`backoff`]: bounded exponential backoff with an injectable RNG.
//! - [`admin`]: create and delete topics.
//! - [`partitioner`]: the Java client's murmur2 partitioner.
//! - [`producer`]: the idempotent producer.
//! - [`consumer`]: manual assignment, seek (offset, earliest, latest, timestamp), batched poll, read_committed.
//! - [`group`]: a group's committed offsets (FindCoordinator, OffsetCommit, OffsetFetch).
//! - [`txn`]: the transactional producer (KIP-98, KIP-890 aware).
//! - [`txn_admin`]: DescribeTransactions and ListTransactions (KIP-664).
//! - [`resolver`]: in-doubt resolution of an orphaned transaction from a [`ResumeHandle`].

use std::time::Duration;

use clink_kafka_wire::sasl::SaslMechanism;
use clink_kafka_wire::secret::Secret;

pub mod admin;
pub mod backoff;
pub mod cluster;
pub mod connection;
pub mod consumer;
pub mod group;
pub mod partitioner;
pub mod producer;
pub mod resolver;
pub mod sasl;
pub mod txn;
pub mod txn_admin;

pub use admin::{Admin, BrokerDescription, ClusterDescription, NewTopic};
pub use cluster::Cluster;
pub use connection::BrokerConnection;
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, IsolationLevel, Offset};
pub use group::{CommittedOffset, GroupOffsets};
pub use producer::{Acks, DeliveryFuture, DeliveryReport, Producer, ProducerConfig, ProducerRecord};
pub use resolver::{CommitProof, Decision, NotCommittedReason, Resolver, ResumeHandle, Verdict};
pub use txn::{TransactionVersion, TransactionalProducer, TxnConfig};
pub use txn_admin::{ListTransactionsFilter, TransactionDescription, TransactionListing, TransactionState};

/// SASL credentials for a `SASL_PLAINTEXT` listener.
///
/// The password is a [`Secret`]: it prints as `***` and is never logged.
#[derive(Clone, Debug)]
pub struct SaslConfig {
    /// The one mechanism to use; there is no fallback to another.
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: Secret,
}

/// How to reach the cluster and how long to wait for it.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Bootstrap brokers, `host:port` each.
    pub bootstrap: Vec<String>,
    /// Sent in every request header (`client.id`).
    pub client_id: String,
    /// Bound on establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Bound on waiting for any one response (`request.timeout.ms`). A request
    /// that times out closes its connection.
    pub request_timeout: Duration,
    /// Largest response frame accepted; bigger size prefixes are refused
    /// before a byte of them is buffered.
    pub max_frame_size: usize,
    /// SASL, or `None` for an unauthenticated plaintext listener.
    pub sasl: Option<SaslConfig>,
    /// First retry delay (`retry.backoff.ms`).
    pub retry_backoff: Duration,
    /// Cap on the retry delay (`retry.backoff.max.ms`).
    pub retry_backoff_max: Duration,
    /// How long metadata lookups retry a missing topic or leader before
    /// giving up.
    pub metadata_max_wait: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap: vec!["127.0.0.1:9092".into()],
            client_id: "clink-kafka".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_frame_size: clink_kafka_wire::frame::DEFAULT_MAX_FRAME_SIZE,
            sasl: None,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            metadata_max_wait: Duration::from_secs(30),
        }
    }
}

impl ClientConfig {
    /// A default configuration for these bootstrap brokers: a
    /// comma-separated `host:port` list.
    pub fn new(bootstrap: &str) -> Self {
        ClientConfig {
            bootstrap: bootstrap
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
            ..ClientConfig::default()
        }
    }

    /// The same configuration with SASL credentials.
    pub fn with_sasl(mut self, mechanism: SaslMechanism, username: impl Into<String>, password: Secret) -> Self {
        self.sasl = Some(SaslConfig {
            mechanism,
            username: username.into(),
            password,
        });
        self
    }
}

/// Milliseconds since the Unix epoch, for record timestamps.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_list_is_split_and_password_redacted() {
        let c = ClientConfig::new(" a:1, b:2 ,,").with_sasl(SaslMechanism::Plain, "alice", Secret::new("alice-secret"));
        assert_eq!(c.bootstrap, vec!["a:1", "b:2"]);
        let debug = format!("{c:?}");
        assert!(!debug.contains("alice-secret"), "{debug}");
        assert!(debug.contains("alice"));
    }
}
