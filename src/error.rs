//! The client's typed errors.
//!
//! One [`Error`] enum for the whole async client. Each variant carries what a
//! user needs to find the fault: the broker (`host:port`, plus its node id
//! when known), the API, the topic and partition, the option name. Kafka error
//! codes are kept as [`KafkaCode`], so a caller can ask
//! [`Error::is_retriable`] without string matching (after franz-go's `kerr`).
//!
//! Errors are `Clone` (I/O and protocol sources sit behind an `Arc`): a fatal
//! connection error is sticky, and every later call on that connection gets
//! the very same value back (see [`crate::client::connection`]).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use clink_kafka_wire::KafkaCode;

/// Result alias for the client.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which broker: the address we dialled and, once known, its node id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BrokerRef {
    /// `host:port` as dialled.
    pub addr: String,
    /// The broker's node id, if the connection was made for a known node
    /// (bootstrap connections do not know it).
    pub node_id: Option<i32>,
}

impl BrokerRef {
    /// A broker known only by its address.
    pub fn addr(addr: impl Into<String>) -> Self {
        BrokerRef {
            addr: addr.into(),
            node_id: None,
        }
    }
}

impl fmt::Display for BrokerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.node_id {
            Some(id) => write!(f, "{} (node {id})", self.addr),
            None => f.write_str(&self.addr),
        }
    }
}

/// An error from the async client.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The TCP connection could not be established.
    #[error("connecting to broker {broker}: {source}")]
    Connect {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        #[source]
        /// The I/O error.
        source: Arc<io::Error>,
    },
    /// The connection (TCP, TLS, ApiVersions) was not established within
    /// the connect timeout.
    #[error("connecting to broker {broker}: timed out after {timeout:?}")]
    ConnectTimeout {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// The connect timeout.
        timeout: Duration,
    },
    /// Reading or writing an established connection failed.
    #[error("I/O error on the connection to broker {broker}: {source}")]
    Io {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        #[source]
        /// The I/O error.
        source: Arc<io::Error>,
    },
    /// The broker closed the connection.
    #[error("broker {broker} closed the connection{}", hint_suffix(.hint))]
    Disconnected {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// What we were doing, and a likely cause when there is one.
        hint: Option<String>,
    },
    /// The connection was closed by this client (its handle was dropped or
    /// its driver stopped).
    #[error("the connection to broker {broker} is closed")]
    ConnectionClosed {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
    },
    /// No response arrived within the request timeout. The connection is
    /// closed as a result (as the Java client does), so the outcome of the
    /// request is unknown.
    #[error("{api} request to broker {broker} timed out after {timeout:?}")]
    RequestTimeout {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// The Kafka API of the request (e.g. `Produce`).
        api: &'static str,
        /// The request timeout.
        timeout: Duration,
    },
    /// The broker sent bytes we could not frame or decode, or the two sides
    /// share no version of an API.
    #[error("protocol error with broker {broker} ({api}): {source}")]
    Protocol {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// The Kafka API of the request (e.g. `Produce`).
        api: &'static str,
        #[source]
        /// The wire crate's error.
        source: Arc<clink_kafka_wire::Error>,
    },
    /// SASL authentication failed. Carries the broker's message (never the
    /// password). The client never falls back to another mechanism.
    #[error("SASL {mechanism} authentication with broker {broker} failed: {message}")]
    Authentication {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// The SASL mechanism (e.g. `SCRAM-SHA-256`).
        mechanism: &'static str,
        /// The broker's error message (never the password).
        message: String,
    },
    /// TLS failed: the broker's certificate is not trusted or does not name
    /// the host, the broker refused our client certificate, or the handshake
    /// failed. Never followed by a plaintext attempt.
    #[error("TLS with broker {broker} failed: {kind}: {reason}")]
    Tls {
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// Which kind of TLS failure.
        kind: TlsFailure,
        /// The TLS library's description.
        reason: String,
    },
    /// The broker answered with a Kafka error code.
    #[error("{api}{} on broker {broker}: {code}{}", location(.topic, .partition), message_suffix(.message))]
    Kafka {
        /// The Kafka API of the request (e.g. `Produce`).
        api: &'static str,
        /// The broker (its address, and node id when known).
        broker: BrokerRef,
        /// The topic, when the error is about one.
        topic: Option<String>,
        /// The partition, when the error is about one.
        partition: Option<i32>,
        /// The Kafka error code the broker answered with.
        code: KafkaCode,
        /// The broker's error message, when it sent one.
        message: Option<String>,
    },
    /// None of the bootstrap brokers could be reached.
    #[error("no bootstrap broker reachable ({brokers}); last error: {last}")]
    NoBrokerAvailable {
        /// The bootstrap brokers tried, comma-separated.
        brokers: String,
        /// The last connection error.
        last: Box<Error>,
    },
    /// The topic is not in the cluster's metadata.
    #[error("topic {topic:?} does not exist (UNKNOWN_TOPIC_OR_PARTITION after {waited:?})")]
    UnknownTopic {
        /// The topic.
        topic: String,
        /// How long the client retried before giving up.
        waited: Duration,
    },
    /// The topic exists but has no such partition.
    #[error("topic {topic:?} has {partitions} partitions; partition {partition} does not exist")]
    UnknownPartition {
        /// The topic.
        topic: String,
        /// The partition asked for.
        partition: i32,
        /// How many partitions the topic has.
        partitions: usize,
    },
    /// The partition has no leader, and none appeared while we retried.
    #[error("{topic}[{partition}] has no available leader after {waited:?}: {code}")]
    LeaderNotAvailable {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// How long the client retried before giving up.
        waited: Duration,
        /// The last error code the metadata gave for the partition.
        code: KafkaCode,
    },
    /// A bounded wait ran out.
    #[error("{operation} did not complete within {timeout:?}")]
    Timeout {
        /// What was waited for.
        operation: String,
        /// The bound that ran out.
        timeout: Duration,
    },
    /// A configuration value is invalid.
    #[error("invalid configuration {option}: {message}")]
    Config {
        /// The option (or flag) the value came from.
        option: &'static str,
        /// Why the value is invalid.
        message: String,
    },
    /// A librdkafka or Java property the client cannot take (unknown, with
    /// the closest known name; refused, with the reason).
    #[error("property {property:?}: {message}")]
    Property {
        /// The property's name, as given.
        property: String,
        /// Why the property is refused, or the closest known name.
        message: String,
    },
    /// A fetched record batch failed to decode (CRC, codec, truncation).
    #[error("corrupt record data in {topic}[{partition}] at offset {offset}: {source}")]
    CorruptRecord {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// The offset of the batch (or record) that failed.
        offset: i64,
        #[source]
        /// The wire crate's decode error.
        source: Arc<clink_kafka_wire::Error>,
    },
    /// The fetch offset is outside the partition's log.
    #[error("offset {offset} is out of range for {topic}[{partition}]")]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// The offset that was asked for.
        offset: i64,
    },
    /// After a leader change the new leader's log ends the position's
    /// leader epoch below the position (KIP-320: an unclean election
    /// truncated records this consumer had handed over), and no
    /// `auto_offset_reset` is set. The partition is not fetched until a seek.
    #[error("log truncation on {topic}[{partition}]: the position {position} is past {divergent_offset}, where the new leader's log diverges (records {divergent_offset}..{position} were truncated); no offset reset policy is set: seek to continue")]
    LogTruncation {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// The consumer's position (the next offset it would hand over).
        position: i64,
        /// The offset where the new leader's log diverges from the records handed over.
        divergent_offset: i64,
    },
    /// The partition is not assigned to this consumer.
    #[error("{topic}[{partition}] is not assigned to this consumer")]
    NotAssigned {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
    },
    /// A record or request is larger than a limit.
    #[error("{what} of {size} bytes exceeds the limit of {limit} bytes ({option})")]
    TooLarge {
        /// What is too large (e.g. a record).
        what: &'static str,
        /// The size, in bytes.
        size: usize,
        /// The limit, in bytes.
        limit: usize,
        /// The option that sets the limit.
        option: &'static str,
    },
    /// The producer hit an error it cannot recover from (for the idempotent
    /// producer: an unknown outcome or a broken sequence). Sticky: every
    /// later send fails with it.
    #[error("producer failed: {cause}")]
    ProducerFailed {
        /// The error that made the producer fail.
        cause: Box<Error>,
    },
    /// The producer was closed before the record was delivered.
    #[error("the producer is closed")]
    ProducerClosed,
    /// PRODUCER_FENCED: a newer producer with the same transactional id
    /// (InitProducerId) or a coordinator-side timeout bumped the epoch.
    /// Fatal and sticky for the transactional producer.
    #[error("transactional producer {transactional_id:?} (producer id {producer_id}, epoch {producer_epoch}) was fenced: {api} answered PRODUCER_FENCED{}", broker_suffix(.broker))]
    ProducerFenced {
        /// The transactional id (`transactional.id`).
        transactional_id: String,
        /// The producer id.
        producer_id: i64,
        /// The producer epoch.
        producer_epoch: i16,
        /// The Kafka API of the request (e.g. `Produce`).
        api: &'static str,
        /// The broker that answered, when known.
        broker: Option<BrokerRef>,
    },
    /// INVALID_PRODUCER_EPOCH: the epoch is not the coordinator's (the
    /// pre-KIP-588 spelling of a fence). Fatal and sticky.
    #[error("transactional producer {transactional_id:?} (producer id {producer_id}, epoch {producer_epoch}): {api} answered INVALID_PRODUCER_EPOCH{}", broker_suffix(.broker))]
    InvalidProducerEpoch {
        /// The transactional id (`transactional.id`).
        transactional_id: String,
        /// The producer id.
        producer_id: i64,
        /// The producer epoch.
        producer_epoch: i16,
        /// The Kafka API of the request (e.g. `Produce`).
        api: &'static str,
        /// The broker that answered, when known.
        broker: Option<BrokerRef>,
    },
    /// INVALID_TXN_STATE from the coordinator, or a call that does not fit
    /// the transaction's state here (e.g. `send` with no open transaction).
    #[error("transaction {transactional_id:?}: invalid transaction state: {message}")]
    InvalidTxnState {
        /// The transactional id (`transactional.id`).
        transactional_id: String,
        /// The state, and the call that did not fit it.
        message: String,
    },
    /// TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Fatal.
    #[error("not authorized to use transactional id {transactional_id:?} ({api}{})", broker_suffix(.broker))]
    TransactionalIdAuthorizationFailed {
        /// The transactional id (`transactional.id`).
        transactional_id: String,
        /// The Kafka API of the request (e.g. `Produce`).
        api: &'static str,
        /// The broker that answered, when known.
        broker: Option<BrokerRef>,
    },
    /// A record of the open transaction failed; the transaction can only be
    /// aborted now (then a new one may begin).
    #[error("transaction {transactional_id:?} must be aborted: {cause}")]
    TransactionAbortRequired {
        /// The transactional id (`transactional.id`).
        transactional_id: String,
        /// The record's failure.
        cause: Box<Error>,
    },
    /// The consumer group membership failed for good (fenced static
    /// member, a coordinator error that ends membership, a bad
    /// configuration); every later call of the group consumer returns it.
    #[error("consumer group membership failed: {source}")]
    Group {
        /// The member's error.
        source: clink_kafka_wire::group::GroupError,
    },
}

fn broker_suffix(broker: &Option<BrokerRef>) -> String {
    match broker {
        Some(b) => format!(" on broker {b}"),
        None => String::new(),
    }
}

/// What went wrong in a TLS handshake ([`Error::Tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The broker's chain does not lead to a trusted CA.
    CertificateNotTrusted,
    /// The broker's certificate does not name the host dialled.
    HostnameMismatch,
    /// The broker's certificate is expired, not yet valid or malformed.
    CertificateInvalid,
    /// The broker wants a client certificate, or refused ours.
    ClientCertificateRejected,
    /// Anything else: no TLS answer, a closed connection, a protocol error.
    HandshakeFailed,
    /// A plaintext client reached a TLS listener (the broker answered with
    /// a TLS record).
    ProtocolMismatch,
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsFailure::CertificateNotTrusted => "certificate not trusted",
            TlsFailure::HostnameMismatch => "hostname mismatch",
            TlsFailure::CertificateInvalid => "certificate invalid",
            TlsFailure::ClientCertificateRejected => "client certificate rejected",
            TlsFailure::HandshakeFailed => "handshake failed",
            TlsFailure::ProtocolMismatch => "protocol mismatch",
        })
    }
}

fn hint_suffix(hint: &Option<String>) -> String {
    match hint {
        Some(h) => format!(" {h}"),
        None => String::new(),
    }
}

fn location(topic: &Option<String>, partition: &Option<i32>) -> String {
    match (topic, partition) {
        (Some(t), Some(p)) => format!(" for {t}[{p}]"),
        (Some(t), None) => format!(" for topic {t:?}"),
        _ => String::new(),
    }
}

fn message_suffix(message: &Option<String>) -> String {
    match message {
        Some(m) if !m.is_empty() => format!(" ({m})"),
        _ => String::new(),
    }
}

impl Error {
    /// The Kafka error code, if the broker sent one.
    pub fn kafka_code(&self) -> Option<KafkaCode> {
        match self {
            Error::Kafka { code, .. } | Error::LeaderNotAvailable { code, .. } => Some(*code),
            Error::ProducerFailed { cause } | Error::TransactionAbortRequired { cause, .. } => cause.kafka_code(),
            Error::ProducerFenced { .. } => Some(KafkaCode::PRODUCER_FENCED),
            Error::InvalidProducerEpoch { .. } => Some(KafkaCode::INVALID_PRODUCER_EPOCH),
            Error::TransactionalIdAuthorizationFailed { .. } => Some(KafkaCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            _ => None,
        }
    }

    /// Whether retrying the same operation may succeed: a retriable Kafka
    /// code (Kafka's own classification), or a transport failure on one
    /// connection (a new connection may work).
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Kafka { code, .. } => code.is_retriable(),
            Error::LeaderNotAvailable { .. } => true,
            other => other.is_connection_error(),
        }
    }

    /// Whether the error is a transport failure: the connection is gone and
    /// a new one is needed.
    pub fn is_connection_error(&self) -> bool {
        matches!(
            self,
            Error::Connect { .. }
                | Error::ConnectTimeout { .. }
                | Error::Io { .. }
                | Error::Disconnected { .. }
                | Error::ConnectionClosed { .. }
                | Error::RequestTimeout { .. }
        )
    }

    /// Builds [`Error::Kafka`] from a response's error code and message.
    pub(crate) fn kafka(
        api: &'static str,
        broker: &BrokerRef,
        topic: Option<&str>,
        partition: Option<i32>,
        code: i16,
        message: Option<&str>,
    ) -> Self {
        Error::Kafka {
            api,
            broker: broker.clone(),
            topic: topic.map(str::to_owned),
            partition,
            code: KafkaCode(code),
            message: message.map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_error_names_everything() {
        let b = BrokerRef {
            addr: "127.0.0.1:9092".into(),
            node_id: Some(1),
        };
        let e = Error::kafka("Produce", &b, Some("orders"), Some(3), 6, Some("not the leader"));
        let text = e.to_string();
        assert_eq!(
            text,
            "Produce for orders[3] on broker 127.0.0.1:9092 (node 1): NOT_LEADER_OR_FOLLOWER (6) (not the leader)"
        );
        assert!(e.is_retriable());
        assert_eq!(e.kafka_code(), Some(KafkaCode::NOT_LEADER_OR_FOLLOWER));
        let e = Error::kafka("CreateTopics", &b, Some("t"), None, 36, None);
        assert!(!e.is_retriable());
        assert!(e.to_string().contains("TOPIC_ALREADY_EXISTS"), "{e}");
    }

    #[test]
    fn errors_are_clone_and_transport_errors_retriable() {
        let e = Error::Io {
            broker: BrokerRef::addr("h:1"),
            source: Arc::new(io::Error::new(io::ErrorKind::BrokenPipe, "pipe")),
        };
        let c = e.clone();
        assert_eq!(e.to_string(), c.to_string());
        assert!(c.is_retriable() && c.is_connection_error());
        let d = Error::Disconnected {
            broker: BrokerRef::addr("h:1"),
            hint: Some("while waiting for Metadata".into()),
        };
        assert_eq!(
            d.to_string(),
            "broker h:1 closed the connection while waiting for Metadata"
        );
    }
}
