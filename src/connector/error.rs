//! The connector layer's typed errors.
//!
//! Every misconfiguration names the option (the spec's option name, or the
//! `kafka.<property>` passthrough key) and what would be accepted. Values of
//! secret options never appear in an error: they are not echoed back.

use std::fmt;

/// Result alias for the connector layer.
pub type Result<T, E = ConnectorError> = std::result::Result<T, E>;

/// An error from building, opening or running a connector.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectorError {
    /// The option is not one this factory reads.
    #[error("unknown option {option:?} for {factory}{}", suggestion_suffix(.suggestion))]
    UnknownOption {
        /// The option's name, as given.
        option: String,
        /// The connector factory's name.
        factory: &'static str,
        /// The closest option this factory does read, when one is close.
        suggestion: Option<&'static str>,
    },
    /// A required option is absent (or empty).
    #[error("missing required option {option:?} for {factory}")]
    MissingOption {
        /// The option's name.
        option: &'static str,
        /// The connector factory's name.
        factory: &'static str,
    },
    /// The option's value is not one of the accepted ones.
    #[error("invalid value {value:?} for option {option:?}: expected {expected}")]
    InvalidOption {
        /// The option's name.
        option: String,
        /// The value as given (never the value of a secret option).
        value: String,
        /// The allowed values, or the shape a value must have.
        expected: String,
    },
    /// Two settings contradict each other (an alias and its passthrough
    /// property with different values, a certificate without its key).
    #[error("conflicting options: {message}")]
    ConflictingOptions {
        /// Which options conflict, and why.
        message: String,
    },
    /// A security configuration that would be silently weaker than it looks
    /// (credentials on a transport that never presents them, a certificate
    /// on a transport that never uses it). Refused before any connection.
    #[error("insecure configuration refused: {option} {message}")]
    InsecureConfig {
        /// The option that makes it insecure.
        option: String,
        /// Why it is refused.
        message: String,
    },
    /// A `kafka.<property>` passthrough (or an option value) the native
    /// client cannot honour.
    #[error("unsupported property {property:?}: {reason}")]
    UnsupportedProperty {
        /// The property's name, as given.
        property: String,
        /// Why the property is not supported.
        reason: String,
    },
    /// Something the spec describes that this build does not provide yet.
    #[error("{what} is not yet available: {reason}")]
    NotYetAvailable {
        /// The feature asked for.
        what: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// No factory is registered under this name.
    #[error("no factory named {name:?}{}", suggestion_suffix(.suggestion))]
    UnknownFactory {
        /// The name asked for.
        name: String,
        /// The closest known name, when one is close.
        suggestion: Option<String>,
    },
    /// A factory name registered twice.
    #[error("factory {name:?} is already registered")]
    DuplicateFactory {
        /// The name registered twice.
        name: String,
    },
    /// The operator built is not of the shape the caller asked for.
    #[error("factory {factory:?} builds a {actual}, not a {expected}")]
    WrongOperatorKind {
        /// The factory's name.
        factory: String,
        /// The operator kind asked for.
        expected: &'static str,
        /// The operator kind it builds.
        actual: &'static str,
    },
    /// `auto_offset_reset = none` and the partition has neither a restored
    /// nor a committed offset.
    #[error("{topic}[{partition}] has no restored or committed offset and auto_offset_reset is 'none'")]
    NoStartOffset {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
    },
    /// A payload on the string channel is not UTF-8.
    #[error("the payload at {topic}[{partition}] offset {offset} is not UTF-8 text: {reason}")]
    NotText {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// Where the UTF-8 check failed.
        reason: String,
    },
    /// A registry-framed value (`format = avro|…`) that cannot be decoded:
    /// bad framing, an unknown schema id, a registry that did not answer,
    /// or a payload that does not fit its schema (`decode_error = fail`).
    #[error("the value at {topic}[{partition}] offset {offset} cannot be decoded as {format}: {reason}")]
    Undecodable {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// The value format (e.g. `avro`).
        format: &'static str,
        /// Why decoding failed.
        reason: String,
    },
    /// A SQL source table's record that does not fit the table's row (the
    /// JSON row bridge; `decode_error = fail`): the column (empty for the
    /// record as a whole: not JSON, not an object) and why.
    #[error("the value at {topic}[{partition}] offset {offset} does not fit the table's row: {}{reason}", column_prefix(.column))]
    RowDecode {
        /// The topic.
        topic: String,
        /// The partition index.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// The column that failed (empty when the row as a whole did not fit).
        column: String,
        /// Why the value does not fit.
        reason: String,
    },
    /// The Schema Registry failed (a sink resolving its schema at open).
    #[error(transparent)]
    SchemaRegistry(#[from] crate::schema_registry::RegistryError),
    /// Operator state handed to `restore` is malformed.
    #[error("malformed operator state row {key:?}: {message}")]
    BadState {
        /// The state row's key.
        key: String,
        /// What is wrong with the row.
        message: String,
    },
    /// A call out of the documented order (`on_data` before `open`, …).
    #[error("{call} called {problem}")]
    CallOrder {
        /// The method called.
        call: &'static str,
        /// What is wrong with the call's order (e.g. `before open`).
        problem: &'static str,
    },
    /// Deliveries failed after the producer's retries; the barrier or flush
    /// that found them fails, so no checkpoint covers lost records.
    #[error("{failed} deliveries to {topic:?} failed; first: {first}")]
    DeliveryFailed {
        /// The topic written to.
        topic: String,
        /// How many deliveries failed.
        failed: u64,
        /// The first failure, as text.
        first: String,
    },
    /// A restored prepared transaction could not be resolved (the broker
    /// was unreachable): the two-phase-commit sink refuses to open, because
    /// opening fences it. Retry later; never a "not committed" verdict.
    #[error("in-doubt transaction {transactional_id:?} of checkpoint {checkpoint} is unresolved: {detail}")]
    InDoubt {
        /// The transactional id (`transactional.id`).
        transactional_id: String,
        /// The checkpoint id.
        checkpoint: u64,
        /// What resolution found out, or why it could not.
        detail: String,
    },
    /// A commit receipt or unresolved-orphan marker could not be written
    /// or read.
    #[error("commit receipt {path}: {message}")]
    Receipt {
        /// The file's path.
        path: String,
        /// What is wrong with the receipt.
        message: String,
    },
    /// A checkpoint coordinator's state file or marker is corrupt, foreign
    /// (another job's) or cannot be written or read.
    #[error("checkpoint state {path}: {message}")]
    CheckpointState {
        /// The file's path.
        path: String,
        /// What is wrong with the state file.
        message: String,
    },
    /// A restore cannot proceed yet: a resolution answered Unreachable, so
    /// the restart is held (nothing was fenced); retry later.
    #[error("restore of checkpoint {checkpoint} held: {detail}")]
    RestoreHeld {
        /// The checkpoint id.
        checkpoint: u64,
        /// Why the restore cannot proceed yet.
        detail: String,
    },
    /// `on_commit(n)` of a transactional sink whose commit group had
    /// aborted checkpoint `n`: the sink aborted its transaction instead.
    #[error("checkpoint {checkpoint} not committed: commit group {group:?} aborted it (epoch {epoch})")]
    GroupAborted {
        /// The commit group's name.
        group: String,
        /// The checkpoint id that was aborted.
        checkpoint: u64,
        /// The commit group's epoch.
        epoch: u64,
    },
    /// A SQL statement the table front cannot use.
    #[error("SQL: {message}")]
    Sql {
        /// What is wrong with the statement.
        message: String,
    },
    /// A JSON text the row bridge cannot use.
    #[error("JSON row: {message}")]
    Json {
        /// What is wrong with the JSON.
        message: String,
    },
    /// `backend = 'rdkafka'` in a binary built without the `rdkafka` cargo
    /// feature (or another backend-specific capability this build lacks).
    #[error("option {option:?} = {value:?} needs the cargo feature `{feature}`, which this binary was built without (rebuild with `cargo build --features {feature}`)")]
    MissingFeature {
        /// The option's name.
        option: String,
        /// The value that needs the feature.
        value: String,
        /// The cargo feature it needs.
        feature: &'static str,
    },
    /// librdkafka (the `rdkafka` backend) failed.
    #[error("librdkafka: {operation}: {message}")]
    Rdkafka {
        /// The librdkafka call that failed.
        operation: String,
        /// librdkafka's error text.
        message: String,
    },
    /// The native client failed.
    #[error(transparent)]
    Client(#[from] crate::error::Error),
}

fn column_prefix(column: &str) -> String {
    if column.is_empty() {
        String::new()
    } else {
        format!("column {column}: ")
    }
}

fn suggestion_suffix<S: fmt::Debug>(s: &Option<S>) -> String {
    match s {
        Some(s) => format!(" (did you mean {s:?}?)"),
        None => String::new(),
    }
}

impl ConnectorError {
    pub(crate) fn invalid(option: impl Into<String>, value: impl Into<String>, expected: impl Into<String>) -> Self {
        ConnectorError::InvalidOption {
            option: option.into(),
            value: value.into(),
            expected: expected.into(),
        }
    }

    /// The option or property this error is about, when it is about one.
    pub fn option(&self) -> Option<&str> {
        match self {
            ConnectorError::UnknownOption { option, .. } | ConnectorError::InvalidOption { option, .. } => Some(option),
            ConnectorError::MissingOption { option, .. } => Some(option),
            ConnectorError::InsecureConfig { option, .. } => Some(option),
            ConnectorError::UnsupportedProperty { property, .. } => Some(property),
            ConnectorError::MissingFeature { option, .. } => Some(option),
            _ => None,
        }
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The candidate closest to `word`, if it is close enough to be a typo:
/// within a third of the word's length (at least 1, at most 3 edits).
pub(crate) fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).clamp(1, 3);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_suggestions() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        let names = ["brokers", "topic", "group_id", "auto_offset_reset"];
        assert_eq!(closest("borkers", names), Some("brokers"));
        assert_eq!(closest("auto_ofset_reset", names), Some("auto_offset_reset"));
        assert_eq!(closest("zzzzzz", names), None);
    }
}
