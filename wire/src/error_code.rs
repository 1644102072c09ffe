//! Kafka's error codes: each code's name and whether Kafka classes it as
//! retriable (the Java client's `RetriableException` subclasses), after
//! `org.apache.kafka.common.protocol.Errors` and franz-go's `kerr`.
//!
//! "Retriable" here is Kafka's classification only. Some layers retry more:
//! the transactional producer, for one, retries `CONCURRENT_TRANSACTIONS`,
//! which Kafka does not class as retriable.

use std::fmt;

/// `(code, name, retriable)` for every code Kafka 4.x defines.
pub const ERROR_CODES: &[(i16, &str, bool)] = &[
    (-1, "UNKNOWN_SERVER_ERROR", false),
    (0, "NONE", false),
    (1, "OFFSET_OUT_OF_RANGE", false),
    (2, "CORRUPT_MESSAGE", true),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", true),
    (4, "INVALID_FETCH_SIZE", false),
    (5, "LEADER_NOT_AVAILABLE", true),
    (6, "NOT_LEADER_OR_FOLLOWER", true),
    (7, "REQUEST_TIMED_OUT", true),
    (8, "BROKER_NOT_AVAILABLE", false),
    (9, "REPLICA_NOT_AVAILABLE", true),
    (10, "MESSAGE_TOO_LARGE", false),
    (11, "STALE_CONTROLLER_EPOCH", false),
    (12, "OFFSET_METADATA_TOO_LARGE", false),
    (13, "NETWORK_EXCEPTION", true),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", true),
    (15, "COORDINATOR_NOT_AVAILABLE", true),
    (16, "NOT_COORDINATOR", true),
    (17, "INVALID_TOPIC_EXCEPTION", false),
    (18, "RECORD_LIST_TOO_LARGE", false),
    (19, "NOT_ENOUGH_REPLICAS", true),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", true),
    (21, "INVALID_REQUIRED_ACKS", false),
    (22, "ILLEGAL_GENERATION", false),
    (23, "INCONSISTENT_GROUP_PROTOCOL", false),
    (24, "INVALID_GROUP_ID", false),
    (25, "UNKNOWN_MEMBER_ID", false),
    (26, "INVALID_SESSION_TIMEOUT", false),
    (27, "REBALANCE_IN_PROGRESS", false),
    (28, "INVALID_COMMIT_OFFSET_SIZE", false),
    (29, "TOPIC_AUTHORIZATION_FAILED", false),
    (30, "GROUP_AUTHORIZATION_FAILED", false),
    (31, "CLUSTER_AUTHORIZATION_FAILED", false),
    (32, "INVALID_TIMESTAMP", false),
    (33, "UNSUPPORTED_SASL_MECHANISM", false),
    (34, "ILLEGAL_SASL_STATE", false),
    (35, "UNSUPPORTED_VERSION", false),
    (36, "TOPIC_ALREADY_EXISTS", false),
    (37, "INVALID_PARTITIONS", false),
    (38, "INVALID_REPLICATION_FACTOR", false),
    (39, "INVALID_REPLICA_ASSIGNMENT", false),
    (40, "INVALID_CONFIG", false),
    (41, "NOT_CONTROLLER", true),
    (42, "INVALID_REQUEST", false),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", false),
    (44, "POLICY_VIOLATION", false),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", false),
    (46, "DUPLICATE_SEQUENCE_NUMBER", false),
    (47, "INVALID_PRODUCER_EPOCH", false),
    (48, "INVALID_TXN_STATE", false),
    (49, "INVALID_PRODUCER_ID_MAPPING", false),
    (50, "INVALID_TRANSACTION_TIMEOUT", false),
    (51, "CONCURRENT_TRANSACTIONS", false),
    (52, "TRANSACTION_COORDINATOR_FENCED", false),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", false),
    (54, "SECURITY_DISABLED", false),
    (55, "OPERATION_NOT_ATTEMPTED", false),
    (56, "KAFKA_STORAGE_ERROR", true),
    (57, "LOG_DIR_NOT_FOUND", false),
    (58, "SASL_AUTHENTICATION_FAILED", false),
    (59, "UNKNOWN_PRODUCER_ID", false),
    (60, "REASSIGNMENT_IN_PROGRESS", false),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", false),
    (62, "DELEGATION_TOKEN_NOT_FOUND", false),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", false),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", false),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", false),
    (66, "DELEGATION_TOKEN_EXPIRED", false),
    (67, "INVALID_PRINCIPAL_TYPE", false),
    (68, "NON_EMPTY_GROUP", false),
    (69, "GROUP_ID_NOT_FOUND", false),
    (70, "FETCH_SESSION_ID_NOT_FOUND", true),
    (71, "INVALID_FETCH_SESSION_EPOCH", true),
    (72, "LISTENER_NOT_FOUND", true),
    (73, "TOPIC_DELETION_DISABLED", false),
    (74, "FENCED_LEADER_EPOCH", true),
    (75, "UNKNOWN_LEADER_EPOCH", true),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", false),
    (77, "STALE_BROKER_EPOCH", false),
    (78, "OFFSET_NOT_AVAILABLE", true),
    (79, "MEMBER_ID_REQUIRED", false),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", true),
    (81, "GROUP_MAX_SIZE_REACHED", false),
    (82, "FENCED_INSTANCE_ID", false),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", true),
    (84, "ELECTION_NOT_NEEDED", true),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", false),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", false),
    (87, "INVALID_RECORD", false),
    (88, "UNSTABLE_OFFSET_COMMIT", true),
    (89, "THROTTLING_QUOTA_EXCEEDED", true),
    (90, "PRODUCER_FENCED", false),
    (91, "RESOURCE_NOT_FOUND", false),
    (92, "DUPLICATE_RESOURCE", false),
    (93, "UNACCEPTABLE_CREDENTIAL", false),
    (94, "INCONSISTENT_VOTER_SET", false),
    (95, "INVALID_UPDATE_VERSION", false),
    (96, "FEATURE_UPDATE_FAILED", false),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", false),
    (98, "SNAPSHOT_NOT_FOUND", false),
    (99, "POSITION_OUT_OF_RANGE", false),
    (100, "UNKNOWN_TOPIC_ID", true),
    (101, "DUPLICATE_BROKER_REGISTRATION", false),
    (102, "BROKER_ID_NOT_REGISTERED", false),
    (103, "INCONSISTENT_TOPIC_ID", true),
    (104, "INCONSISTENT_CLUSTER_ID", false),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", false),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", true),
    (107, "INELIGIBLE_REPLICA", false),
    (108, "NEW_LEADER_ELECTED", false),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", false),
    (110, "FENCED_MEMBER_EPOCH", false),
    (111, "UNRELEASED_INSTANCE_ID", false),
    (112, "UNSUPPORTED_ASSIGNOR", false),
    (113, "STALE_MEMBER_EPOCH", false),
    (114, "MISMATCHED_ENDPOINT_TYPE", false),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", false),
    (116, "UNKNOWN_CONTROLLER_ID", false),
    (117, "UNKNOWN_SUBSCRIPTION_ID", false),
    (118, "TELEMETRY_TOO_LARGE", false),
    (119, "INVALID_REGISTRATION", false),
    (120, "TRANSACTION_ABORTABLE", false),
    (121, "INVALID_RECORD_STATE", false),
    (122, "SHARE_SESSION_NOT_FOUND", true),
    (123, "INVALID_SHARE_SESSION_EPOCH", true),
    (124, "FENCED_STATE_EPOCH", false),
    (125, "INVALID_VOTER_KEY", false),
    (126, "DUPLICATE_VOTER", false),
    (127, "VOTER_NOT_FOUND", false),
    (128, "INVALID_REGULAR_EXPRESSION", false),
    (129, "REBOOTSTRAP_REQUIRED", false),
    (130, "STREAMS_INVALID_TOPOLOGY", false),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", false),
    (132, "STREAMS_TOPOLOGY_FENCED", false),
    (133, "SHARE_SESSION_LIMIT_REACHED", true),
];

/// A Kafka error code as it came off the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KafkaCode(pub i16);

impl KafkaCode {
    /// `NONE` (0): no error.
    pub const NONE: KafkaCode = KafkaCode(0);
    /// `OFFSET_OUT_OF_RANGE` (1).
    pub const OFFSET_OUT_OF_RANGE: KafkaCode = KafkaCode(1);
    /// `UNKNOWN_TOPIC_OR_PARTITION` (3).
    pub const UNKNOWN_TOPIC_OR_PARTITION: KafkaCode = KafkaCode(3);
    /// `LEADER_NOT_AVAILABLE` (5).
    pub const LEADER_NOT_AVAILABLE: KafkaCode = KafkaCode(5);
    /// `NOT_LEADER_OR_FOLLOWER` (6).
    pub const NOT_LEADER_OR_FOLLOWER: KafkaCode = KafkaCode(6);
    /// `REQUEST_TIMED_OUT` (7).
    pub const REQUEST_TIMED_OUT: KafkaCode = KafkaCode(7);
    /// `COORDINATOR_LOAD_IN_PROGRESS` (14).
    pub const COORDINATOR_LOAD_IN_PROGRESS: KafkaCode = KafkaCode(14);
    /// `COORDINATOR_NOT_AVAILABLE` (15).
    pub const COORDINATOR_NOT_AVAILABLE: KafkaCode = KafkaCode(15);
    /// `NOT_COORDINATOR` (16).
    pub const NOT_COORDINATOR: KafkaCode = KafkaCode(16);
    /// `TOPIC_AUTHORIZATION_FAILED` (29).
    pub const TOPIC_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(29);
    /// `UNSUPPORTED_SASL_MECHANISM` (33).
    pub const UNSUPPORTED_SASL_MECHANISM: KafkaCode = KafkaCode(33);
    /// `UNSUPPORTED_VERSION` (35).
    pub const UNSUPPORTED_VERSION: KafkaCode = KafkaCode(35);
    /// `TOPIC_ALREADY_EXISTS` (36).
    pub const TOPIC_ALREADY_EXISTS: KafkaCode = KafkaCode(36);
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER` (45).
    pub const OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaCode = KafkaCode(45);
    /// `DUPLICATE_SEQUENCE_NUMBER` (46).
    pub const DUPLICATE_SEQUENCE_NUMBER: KafkaCode = KafkaCode(46);
    /// `INVALID_PRODUCER_EPOCH` (47).
    pub const INVALID_PRODUCER_EPOCH: KafkaCode = KafkaCode(47);
    /// `INVALID_TXN_STATE` (48).
    pub const INVALID_TXN_STATE: KafkaCode = KafkaCode(48);
    /// `INVALID_PRODUCER_ID_MAPPING` (49).
    pub const INVALID_PRODUCER_ID_MAPPING: KafkaCode = KafkaCode(49);
    /// `CONCURRENT_TRANSACTIONS` (51).
    pub const CONCURRENT_TRANSACTIONS: KafkaCode = KafkaCode(51);
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED` (53).
    pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(53);
    /// `SASL_AUTHENTICATION_FAILED` (58).
    pub const SASL_AUTHENTICATION_FAILED: KafkaCode = KafkaCode(58);
    /// `UNKNOWN_PRODUCER_ID` (59).
    pub const UNKNOWN_PRODUCER_ID: KafkaCode = KafkaCode(59);
    /// `FENCED_LEADER_EPOCH` (74).
    pub const FENCED_LEADER_EPOCH: KafkaCode = KafkaCode(74);
    /// `UNKNOWN_LEADER_EPOCH` (75).
    pub const UNKNOWN_LEADER_EPOCH: KafkaCode = KafkaCode(75);
    /// `PRODUCER_FENCED` (90).
    pub const PRODUCER_FENCED: KafkaCode = KafkaCode(90);
    /// `UNKNOWN_TOPIC_ID` (100).
    pub const UNKNOWN_TOPIC_ID: KafkaCode = KafkaCode(100);
    /// `TRANSACTIONAL_ID_NOT_FOUND` (105).
    pub const TRANSACTIONAL_ID_NOT_FOUND: KafkaCode = KafkaCode(105);
    /// `TRANSACTION_ABORTABLE` (120).
    pub const TRANSACTION_ABORTABLE: KafkaCode = KafkaCode(120);

    fn entry(self) -> Option<&'static (i16, &'static str, bool)> {
        // Codes are dense from -1; index directly, then confirm.
        let idx = usize::try_from(i32::from(self.0).checked_add(1)?).ok()?;
        ERROR_CODES.get(idx).filter(|e| e.0 == self.0)
    }

    /// `true` for code 0.
    pub fn is_ok(self) -> bool {
        self.0 == 0
    }

    /// Kafka's name for the code (`UNKNOWN` for a code this table lacks).
    pub fn name(self) -> &'static str {
        self.entry().map_or("UNKNOWN", |e| e.1)
    }

    /// Whether Kafka classes the code as retriable. Unknown codes are not.
    pub fn is_retriable(self) -> bool {
        self.entry().is_some_and(|e| e.2)
    }

    /// Whether the code is one this table knows.
    pub fn is_known(self) -> bool {
        self.entry().is_some()
    }
}

impl fmt::Debug for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for KafkaCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

impl From<i16> for KafkaCode {
    fn from(code: i16) -> Self {
        KafkaCode(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_dense_and_ordered() {
        for (i, (code, name, _)) in ERROR_CODES.iter().enumerate() {
            assert_eq!(i32::from(*code), i as i32 - 1, "{name} out of place");
        }
    }

    #[test]
    fn names_and_retriability() {
        assert_eq!(KafkaCode(6).name(), "NOT_LEADER_OR_FOLLOWER");
        assert!(KafkaCode::NOT_LEADER_OR_FOLLOWER.is_retriable());
        assert!(KafkaCode::COORDINATOR_LOAD_IN_PROGRESS.is_retriable());
        assert!(!KafkaCode::PRODUCER_FENCED.is_retriable());
        assert_eq!(KafkaCode::PRODUCER_FENCED.name(), "PRODUCER_FENCED");
        assert_eq!(KafkaCode(-1).name(), "UNKNOWN_SERVER_ERROR");
        assert_eq!(KafkaCode(105).name(), "TRANSACTIONAL_ID_NOT_FOUND");
        assert_eq!(KafkaCode(9999).name(), "UNKNOWN");
        assert!(!KafkaCode(9999).is_retriable());
        assert!(!KafkaCode(i16::MIN).is_known());
        assert_eq!(format!("{}", KafkaCode(16)), "NOT_COORDINATOR (16)");
    }

    #[test]
    fn agrees_with_kafka_protocol_table() {
        use kafka_protocol::error::ParseResponseErrorCode;
        for (code, _, retriable) in ERROR_CODES {
            if *code == 0 {
                continue;
            }
            let theirs = code.err().expect("known code");
            assert_eq!(theirs.is_retriable(), *retriable, "code {code}");
        }
    }
}
