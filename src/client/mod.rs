//! The native async client: tokio on top of the sans-IO `clink-kafka-wire`.
//!
//! Data flows one way: socket → connection (framing, correlation ids,
//! ApiVersions, SASL) → [`Cluster`] (metadata, leaders, one connection per
//! broker) → [`Producer`] / [`Consumer`] / [`Admin`].
//!
//! # Public API
//!
//! Every item has one path: the implementation modules are private and
//! their public items are re-exported here (`clink_kafka::client::Consumer`).
//! Two modules are deliberate namespaces and are not re-exported:
//!
//! - [`properties`]: librdkafka's and Java's property names → these
//!   configurations ([`properties::ClientProperties`], the property table).
//! - [`raw`]: raw protocol access ([`raw::BrokerConnection`], whose
//!   `request` is generic over `kafka-protocol`'s message types, and
//!   `kafka-protocol` itself). Nothing outside `raw` names a
//!   `kafka-protocol` type, so its semver stays out of the rest of the API.
//!
//! What is here:
//!
//! - connections: one driver task per broker connection, pipelined requests
//!   ([`raw::BrokerConnection`]); TLS ([`TlsConfig`]); SASL PLAIN and SCRAM
//!   (KIP-43, KIP-152, KIP-84: [`SaslConfig`]).
//! - [`Cluster`]: bootstrap, cached metadata, leader lookup with bounded retries;
//!   [`Backoff`]: bounded exponential backoff with an injectable RNG.
//! - [`Admin`]: topics, cluster metadata; [`Admin::describe_transactions`] and
//!   listing (KIP-664).
//! - [`Producer`]: the idempotent producer (the Java client's murmur2 partitioner).
//! - [`Consumer`]: manual assignment, seek (offset, earliest, latest, timestamp),
//!   batched poll, read_committed.
//! - [`GroupOffsets`]: a group's committed offsets (FindCoordinator, OffsetCommit, OffsetFetch).
//! - Group administration on [`Admin`]: [`Admin::list_groups`], [`Admin::describe_group`],
//!   [`Admin::group_lag`], [`Admin::delete_group`], [`Admin::plan_offset_reset`].
//! - [`TransactionalProducer`]: the transactional producer (KIP-98, KIP-890 aware)
//!   and its [`Transaction`] guard.
//! - [`TopicPartition`], [`TopicPartitionOffset`], [`PartitionOffset`]: named
//!   partitions and offsets.
//! - [`Resolver`]: in-doubt resolution of an orphaned transaction from a [`ResumeHandle`].

use std::time::Duration;

use clink_kafka_wire::sasl::SaslMechanism;
use clink_kafka_wire::secret::Secret;

pub(crate) mod admin;
pub(crate) mod backoff;
pub(crate) mod cluster;
pub(crate) mod connection;
pub(crate) mod consumer;
pub(crate) mod group;
pub(crate) mod group_admin;
pub(crate) mod group_consumer;
pub mod kerberos;
pub(crate) mod log_proof;
pub(crate) mod metrics;
pub mod oauth;
pub(crate) mod partitioner;
pub(crate) mod producer;
pub mod properties;
pub(crate) mod resolver;
pub(crate) mod sasl;
mod sender;
pub(crate) mod tls;
mod topic_partition;
pub(crate) mod txn;
pub(crate) mod txn_admin;

pub use admin::{
    Admin, BrokerDescription, ClusterDescription, ClusterMetadata, NewTopic, PartitionDescription, TopicDescription,
};
pub use backoff::{Backoff, JitterSource};
pub use clink_kafka_wire::group::Assignor;
pub use cluster::{BrokerInfo, Cluster, ConnectionRole, Metadata, PartitionMetadata, TopicMetadata};
pub use consumer::{
    BatchStream, BufferedBytes, Consumer, ConsumerConfig, ConsumerRecord, FetchCounts, FetchSessionState,
    IsolationLevel, LogTruncation, Offset, OffsetAndTimestamp, RecordStream, Watermarks,
};
pub use group::{CommittedOffset, GroupOffsets};
pub use group_admin::{
    clamp_offset, parse_datetime, GroupDescription, GroupListing, GroupMember, GroupType, ListGroupsFilter,
    OffsetReset, PartitionLag, PlannedOffset, ResetScope,
};
pub use group_consumer::{
    parse_assignors, ConsumerGroupMetadata, GroupConsumer, GroupConsumerConfig, GroupPoll, GroupProtocol,
    RebalanceEvent, RebalanceListener, Subscription, REMOTE_ASSIGNORS,
};
pub use kerberos::{KerberosConfig, KerberosError};
pub use log_proof::{prove_from_log, LogProof, LogProofLimits};
pub use oauth::{
    OAuthToken, OidcClientCredentials, OidcConfig, StaticTokenProvider, TokenError, TokenFuture, TokenProvider,
};
pub use producer::{
    Acks, DeliveryFuture, DeliveryReport, IntoTopic, Producer, ProducerConfig, ProducerIdentity, ProducerRecord,
};
pub use resolver::{
    apply_resume_tls, handle_from_description, CommitProof, Decision, NotCommittedReason, Resolver, ResumeHandle,
    ResumeTlsEnv, Verdict, ENV_SASL_MECHANISM, ENV_SASL_PASSWORD, ENV_SASL_USERNAME, ENV_TLS_CA, ENV_TLS_CERT,
    ENV_TLS_KEY,
};
pub use tls::{
    TlsConfig, TlsConnector, OPT_CA, OPT_CERT, OPT_HOSTNAME, OPT_INSECURE, OPT_KEY, OPT_KEY_PASSWORD, OPT_SERVER_NAME,
};
pub use topic_partition::{PartitionOffset, TopicPartition, TopicPartitionOffset};
pub use txn::{transaction_version, Transaction, TransactionVersion, TransactionalProducer, TxnConfig};
pub use txn_admin::{ListTransactionsFilter, TransactionDescription, TransactionListing, TransactionState};

/// Raw protocol access: a broker connection that sends any request type
/// of `kafka-protocol` (re-exported here as [`raw::kafka_protocol`]).
///
/// Everything here follows `kafka-protocol`'s semver, not this crate's:
/// a new `kafka-protocol` release may change these signatures. The rest of
/// the client names no `kafka-protocol` type.
pub mod raw {
    pub use super::connection::BrokerConnection;
    /// The generated Kafka message types [`BrokerConnection::request`] sends
    /// and answers with.
    pub use clink_kafka_wire::kafka_protocol;
}

use crate::error::{Error, Result};

/// Kafka's `security.protocol`: whether the connection is TLS and whether it
/// authenticates with SASL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SecurityProtocol {
    /// `PLAINTEXT`: neither.
    #[default]
    Plaintext,
    /// `SSL`: TLS (with a client certificate for mTLS listeners).
    Ssl,
    /// `SASL_PLAINTEXT`: SASL over an unencrypted connection.
    SaslPlaintext,
    /// `SASL_SSL`: SASL inside TLS.
    SaslSsl,
}

impl SecurityProtocol {
    /// All four, in Kafka's order.
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// Whether the connection is TLS.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether the connection authenticates with SASL.
    pub fn uses_sasl(self) -> bool {
        matches!(self, SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl)
    }

    /// Kafka's name: `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

impl std::fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for SecurityProtocol {
    type Err = Error;

    /// Case-insensitive: `sasl_ssl`, `SASL_SSL`, `Sasl_Ssl`.
    fn from_str(s: &str) -> Result<Self> {
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| Error::Config {
                option: "security.protocol",
                message: format!("unknown value {s:?}; allowed: plaintext, ssl, sasl_plaintext, sasl_ssl"),
            })
    }
}

/// SASL credentials for a `SASL_PLAINTEXT` or `SASL_SSL` listener.
///
/// The password is a [`Secret`]: it prints as `***` and is never logged.
#[derive(Clone, Debug)]
pub struct SaslConfig {
    /// The one mechanism to use; there is no fallback to another.
    pub mechanism: SaslMechanism,
    /// The SASL username.
    pub username: String,
    /// The password (Debug prints `***`).
    pub password: Secret,
    /// OAUTHBEARER: where tokens come from (required with
    /// `SaslMechanism::OAuthBearer`, which ignores `username` and
    /// `password`).
    pub oauthbearer: Option<OAuthBearerConfig>,
    /// GSSAPI: the Kerberos principal, keytab and KDC (required with
    /// `SaslMechanism::Gssapi`, which ignores `username` and `password`).
    pub kerberos: Option<KerberosConfig>,
}

/// SASL/OAUTHBEARER settings: the token source and the KIP-342 extensions.
#[derive(Clone)]
pub struct OAuthBearerConfig {
    /// Asked for a token at every authentication and re-authentication.
    pub provider: std::sync::Arc<dyn TokenProvider>,
    /// Sent after the token (`sasl.oauthbearer.extensions`).
    pub extensions: Vec<clink_kafka_wire::sasl::oauthbearer::SaslExtension>,
}

impl OAuthBearerConfig {
    /// Tokens from `provider`, no extensions.
    pub fn new(provider: std::sync::Arc<dyn TokenProvider>) -> Self {
        OAuthBearerConfig {
            provider,
            extensions: Vec::new(),
        }
    }
}

impl std::fmt::Debug for OAuthBearerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBearerConfig")
            .field("provider", &self.provider.describe())
            .field("extensions", &self.extensions)
            .finish()
    }
}

/// How to reach the cluster and how long to wait for it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClientConfig {
    /// Bootstrap brokers, `host:port` each.
    pub bootstrap: Vec<String>,
    /// Sent in every request header (`client.id`).
    pub client_id: String,
    /// Bound on establishing a connection: the TCP connect, the TLS
    /// handshake and the ApiVersions exchange together (SASL then runs
    /// under `request_timeout` per step).
    pub connect_timeout: Duration,
    /// Bound on waiting for any one response (`request.timeout.ms`). A request
    /// that times out closes its connection.
    pub request_timeout: Duration,
    /// Largest response frame accepted; bigger size prefixes are refused
    /// before a byte of them is buffered.
    pub max_frame_size: usize,
    /// `security.protocol`. Must agree with `sasl` and `tls`
    /// ([`ClientConfig::validate`]); [`ClientConfig::with_sasl`] and
    /// [`ClientConfig::with_tls`] keep it in step.
    pub security_protocol: SecurityProtocol,
    /// SASL credentials: required by `SASL_*` protocols, refused by the others.
    pub sasl: Option<SaslConfig>,
    /// TLS settings, for `SSL` and `SASL_SSL`; left at the default otherwise.
    pub tls: TlsConfig,
    /// Close a connection that has had no request in flight for this long
    /// (`connections.max.idle.ms`, 9 minutes like the Java client); the next
    /// use opens a new one. `Duration::ZERO` keeps idle connections open.
    pub connections_max_idle: Duration,
    /// First retry delay (`retry.backoff.ms`).
    pub retry_backoff: Duration,
    /// Cap on the retry delay (`retry.backoff.max.ms`).
    pub retry_backoff_max: Duration,
    /// How long metadata lookups retry a missing topic or leader before
    /// giving up.
    pub metadata_max_wait: Duration,
    /// How long opening a [`Cluster`] keeps retrying its bootstrap list
    /// (whole passes, with backoff) while no broker answers, before it
    /// fails with an error naming this option. 60 s by default, like the
    /// Java client's `default.api.timeout.ms` (and `max.block.ms`), which
    /// bound the same wait there; `Duration::ZERO` makes a single pass
    /// (the CLI's one-shot commands).
    pub bootstrap_timeout: Duration,
    /// The longest a broker's `throttle_time_ms` (KIP-219) mutes a
    /// connection: after any answer carrying one, nothing more is sent on
    /// that connection until the time given has passed, up to this bound
    /// (30 s by default, `Duration::ZERO` ignores throttles).
    pub max_throttle: Duration,
    /// Log every request and answer, retry and metadata change at debug
    /// level (target `clink_kafka::protocol`; the connector's
    /// `enable_debug`). Never a secret: SASL exchanges log the API name only.
    pub debug: bool,
    /// The prefix of this client's metric names (the connector's
    /// `metric_prefix`; see [`crate::metrics`]).
    pub metric_prefix: String,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            bootstrap: vec!["127.0.0.1:9092".into()],
            client_id: "clink-kafka".into(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_frame_size: clink_kafka_wire::frame::DEFAULT_MAX_FRAME_SIZE,
            security_protocol: SecurityProtocol::Plaintext,
            sasl: None,
            tls: TlsConfig::default(),
            connections_max_idle: Duration::from_secs(9 * 60),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            metadata_max_wait: Duration::from_secs(30),
            bootstrap_timeout: Duration::from_secs(60),
            max_throttle: Duration::from_secs(30),
            debug: false,
            metric_prefix: crate::metrics::DEFAULT_PREFIX.into(),
        }
    }
}

/// Builder-style setters: each returns the config with one setting
/// changed (the fields stay public; the config is `#[non_exhaustive]`, so
/// build it from [`Default`] or its constructor, then these).
impl ClientConfig {
    /// Sets `client_id` (see the field).
    #[must_use]
    pub fn with_client_id(mut self, value: impl Into<String>) -> Self {
        self.client_id = value.into();
        self
    }

    /// Sets `connect_timeout` (see the field).
    #[must_use]
    pub fn with_connect_timeout(mut self, value: Duration) -> Self {
        self.connect_timeout = value;
        self
    }

    /// Sets `request_timeout` (see the field).
    #[must_use]
    pub fn with_request_timeout(mut self, value: Duration) -> Self {
        self.request_timeout = value;
        self
    }

    /// Sets `max_frame_size`: bytes (see the field).
    #[must_use]
    pub fn with_max_frame_size(mut self, value: usize) -> Self {
        self.max_frame_size = value;
        self
    }

    /// Sets `security_protocol` (see the field).
    #[must_use]
    pub fn with_security_protocol(mut self, value: SecurityProtocol) -> Self {
        self.security_protocol = value;
        self
    }

    /// Sets `connections_max_idle` (see the field).
    #[must_use]
    pub fn with_connections_max_idle(mut self, value: Duration) -> Self {
        self.connections_max_idle = value;
        self
    }

    /// Sets `retry_backoff` (see the field).
    #[must_use]
    pub fn with_retry_backoff(mut self, value: Duration) -> Self {
        self.retry_backoff = value;
        self
    }

    /// Sets `retry_backoff_max` (see the field).
    #[must_use]
    pub fn with_retry_backoff_max(mut self, value: Duration) -> Self {
        self.retry_backoff_max = value;
        self
    }

    /// Sets `metadata_max_wait` (see the field).
    #[must_use]
    pub fn with_metadata_max_wait(mut self, value: Duration) -> Self {
        self.metadata_max_wait = value;
        self
    }

    /// Sets `bootstrap_timeout` (see the field).
    #[must_use]
    pub fn with_bootstrap_timeout(mut self, value: Duration) -> Self {
        self.bootstrap_timeout = value;
        self
    }

    /// Sets `max_throttle` (see the field).
    #[must_use]
    pub fn with_max_throttle(mut self, value: Duration) -> Self {
        self.max_throttle = value;
        self
    }

    /// Sets `debug` (see the field).
    #[must_use]
    pub fn with_debug(mut self, value: bool) -> Self {
        self.debug = value;
        self
    }

    /// Sets `metric_prefix` (see the field).
    #[must_use]
    pub fn with_metric_prefix(mut self, value: impl Into<String>) -> Self {
        self.metric_prefix = value.into();
        self
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

    /// The same configuration with SASL credentials. The protocol becomes
    /// `SASL_PLAINTEXT` (from `PLAINTEXT`) or `SASL_SSL` (from `SSL`).
    pub fn with_sasl(mut self, mechanism: SaslMechanism, username: impl Into<String>, password: Secret) -> Self {
        self.sasl = Some(SaslConfig {
            mechanism,
            username: username.into(),
            password,
            oauthbearer: None,
            kerberos: None,
        });
        self.security_protocol = match self.security_protocol {
            SecurityProtocol::Plaintext => SecurityProtocol::SaslPlaintext,
            SecurityProtocol::Ssl => SecurityProtocol::SaslSsl,
            other => other,
        };
        self
    }

    /// The same configuration with SASL/OAUTHBEARER: tokens from
    /// `oauth.provider`. The protocol changes as with
    /// [`ClientConfig::with_sasl`].
    pub fn with_oauthbearer(self, oauth: OAuthBearerConfig) -> Self {
        let mut c = self.with_sasl(SaslMechanism::OAuthBearer, "", Secret::default());
        if let Some(sasl) = &mut c.sasl {
            sasl.oauthbearer = Some(oauth);
        }
        c
    }

    /// The same configuration with SASL/GSSAPI (Kerberos): the principal's
    /// key from `kerberos.keytab`. The protocol changes as with
    /// [`ClientConfig::with_sasl`].
    pub fn with_kerberos(self, kerberos: KerberosConfig) -> Self {
        let mut c = self.with_sasl(SaslMechanism::Gssapi, "", Secret::default());
        if let Some(sasl) = &mut c.sasl {
            sasl.kerberos = Some(kerberos);
        }
        c
    }

    /// The same configuration over TLS. The protocol becomes `SSL` (from
    /// `PLAINTEXT`) or `SASL_SSL` (from `SASL_PLAINTEXT`).
    pub fn with_tls(mut self, tls: TlsConfig) -> Self {
        self.tls = tls;
        self.security_protocol = match self.security_protocol {
            SecurityProtocol::Plaintext => SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext => SecurityProtocol::SaslSsl,
            other => other,
        };
        self
    }

    /// Refuses a configuration that is weaker than it looks, or cannot
    /// work: SASL credentials under a protocol without SASL (they would not
    /// be sent), a SASL protocol without credentials, TLS settings under a
    /// plaintext protocol (they would be ignored), inconsistent TLS files.
    pub fn validate(&self) -> Result<()> {
        let protocol = self.security_protocol;
        match (protocol.uses_sasl(), &self.sasl) {
            (true, None) => {
                return Err(Error::Config {
                    option: "security.protocol",
                    message: format!(
                        "{protocol} needs SASL credentials (sasl.mechanism, sasl.username, sasl.password)"
                    ),
                })
            }
            (false, Some(sasl)) => {
                return Err(Error::Config {
                    option: "security.protocol",
                    message: format!(
                        "SASL {} credentials are set but {protocol} does not authenticate; use {} or drop them",
                        sasl.mechanism.name(),
                        if protocol.uses_tls() {
                            "SASL_SSL"
                        } else {
                            "SASL_PLAINTEXT"
                        },
                    ),
                })
            }
            _ => {}
        }
        if let Some(sasl) = &self.sasl {
            if sasl.mechanism == SaslMechanism::OAuthBearer && sasl.oauthbearer.is_none() {
                return Err(Error::Config {
                    option: "sasl.oauthbearer.method",
                    message: "OAUTHBEARER needs a token source: sasl.oauthbearer.method=oidc with \
                              sasl.oauthbearer.token.endpoint.url, or a TokenProvider"
                        .into(),
                });
            }
            if sasl.mechanism == SaslMechanism::Gssapi {
                match &sasl.kerberos {
                    None => {
                        return Err(Error::Config {
                            option: kerberos::OPT_KEYTAB,
                            message: "GSSAPI needs a Kerberos identity: sasl.kerberos.principal and \
                                      sasl.kerberos.keytab"
                                .into(),
                        })
                    }
                    Some(k) => k.validate()?,
                }
            }
        }
        if !protocol.uses_tls() {
            if let Some(option) = self.tls.first_set_option() {
                return Err(Error::Config {
                    option: "security.protocol",
                    message: format!(
                        "{option} is set but {protocol} does not use TLS; use {} or drop the TLS settings",
                        if protocol.uses_sasl() { "SASL_SSL" } else { "SSL" },
                    ),
                });
            }
        }
        self.tls.validate()
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
