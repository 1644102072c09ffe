//! The answer to one Produce request, checked against what was sent: a pure
//! function from (batches in the request, the decoded response) to one
//! [`BatchOutcome`] per batch. The async producer only moves bytes; every
//! decision about a batch (delivered at which offset, retried, refused, the
//! sequence broken, the answer malformed) is made here, so the fuzz target
//! `produce` can drive it with arbitrary responses.
//!
//! The checks (issue 11): a partition the request carried but the answer
//! does not name, or names twice, and a success without a usable base offset
//! are errors for that batch ([`InvalidAnswer`]), never a silent success;
//! partitions the answer names but the request did not carry are counted
//! ([`ProduceAnswer::unexpected`]) and otherwise ignored.
//!
//! Error classes follow the Java producer's `Sender.completeBatch` and
//! franz-go's `sink.go`: see <https://kafka.apache.org/protocol#The_Messages_Produce>
//! and [KIP-98](https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging).

use std::collections::HashMap;

use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::ProduceResponse;

use crate::error_code::KafkaCode;

/// One batch of a Produce request: which partition it went to and how many
/// records it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentBatch<'a> {
    /// The batch's topic.
    pub topic: &'a str,
    /// The batch's partition.
    pub partition: i32,
    /// Records in the batch (at least 1).
    pub record_count: i32,
}

/// Why an answer for a batch cannot be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidAnswer {
    /// The response does not name the batch's partition.
    Missing,
    /// The response names the batch's partition more than once.
    Duplicated,
    /// Success, but the base offset is negative or its last record's offset
    /// would overflow.
    NoBaseOffset,
}

impl InvalidAnswer {
    /// A short description for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            InvalidAnswer::Missing => "the Produce answer does not name this partition",
            InvalidAnswer::Duplicated => "the Produce answer names this partition more than once",
            InvalidAnswer::NoBaseOffset => "the Produce answer reports success without a valid base offset",
        }
    }
}

/// What happened to one batch of a Produce request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
// Variant fields are named for what they hold and described by the
// variant's doc and its Display message.
#[allow(missing_docs)]
pub enum BatchOutcome {
    /// Written: records got `base_offset ..= base_offset + count - 1`.
    /// `log_append_time` is -1 unless the topic uses `LogAppendTime`.
    Delivered { base_offset: i64, log_append_time: i64 },
    /// `DUPLICATE_SEQUENCE_NUMBER`: an earlier attempt of this very batch was
    /// written; the broker no longer knows at which offset.
    Duplicate,
    /// Not written, worth retrying with the same bytes; `refresh_metadata`
    /// when the leader may have moved.
    Retry { code: KafkaCode, refresh_metadata: bool },
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER`: not written. Retriable only when an
    /// earlier batch of the same partition is itself being retried or was
    /// refused; otherwise the sequence is broken.
    OutOfOrder,
    /// The producer id or epoch is no longer valid (`UNKNOWN_PRODUCER_ID`,
    /// `INVALID_PRODUCER_EPOCH`, `PRODUCER_FENCED`, ...): not written, and
    /// the producer cannot go on with this identity.
    IdentityLost { code: KafkaCode },
    /// Definitely not written and not worth retrying (too large, not
    /// authorised, invalid record, ...). `message` carries the broker's
    /// message and its first record error, if any.
    Refused { code: KafkaCode, message: Option<String> },
    /// The answer for this batch makes no sense: it may or may not have been
    /// written.
    Invalid(InvalidAnswer),
}

impl BatchOutcome {
    /// Whether the broker certainly did not write the batch.
    pub fn not_written(&self) -> bool {
        matches!(
            self,
            BatchOutcome::Retry { .. }
                | BatchOutcome::OutOfOrder
                | BatchOutcome::IdentityLost { .. }
                | BatchOutcome::Refused { .. }
        )
    }
}

/// The outcomes of one Produce answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProduceAnswer {
    /// One outcome per sent batch, in the order of `sent`.
    pub outcomes: Vec<BatchOutcome>,
    /// Partition entries the answer names that the request did not carry.
    pub unexpected: usize,
    /// The broker's throttle (KIP-219), clamped at 0.
    pub throttle_time_ms: i32,
}

/// Codes after which the leader may have moved: refresh metadata first.
pub fn needs_metadata_refresh(code: KafkaCode) -> bool {
    matches!(
        code,
        KafkaCode::NOT_LEADER_OR_FOLLOWER
            | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
            | KafkaCode::LEADER_NOT_AVAILABLE
            | KafkaCode::FENCED_LEADER_EPOCH
            | KafkaCode::UNKNOWN_LEADER_EPOCH
    )
}

/// Classifies a non-zero partition error code.
pub fn classify_error(code: KafkaCode, message: Option<String>) -> BatchOutcome {
    match code {
        KafkaCode::DUPLICATE_SEQUENCE_NUMBER => BatchOutcome::Duplicate,
        KafkaCode::OUT_OF_ORDER_SEQUENCE_NUMBER => BatchOutcome::OutOfOrder,
        KafkaCode::UNKNOWN_PRODUCER_ID
        | KafkaCode::INVALID_PRODUCER_EPOCH
        | KafkaCode::PRODUCER_FENCED
        | KafkaCode::INVALID_PRODUCER_ID_MAPPING => BatchOutcome::IdentityLost { code },
        // KIP-890: a v12 Produce adds its partition to the transaction; while
        // the previous transaction's markers are still being written the
        // broker answers this, and the batch is to be retried.
        KafkaCode::CONCURRENT_TRANSACTIONS => BatchOutcome::Retry {
            code,
            refresh_metadata: false,
        },
        c if c.is_retriable() => BatchOutcome::Retry {
            code,
            refresh_metadata: needs_metadata_refresh(code),
        },
        _ => BatchOutcome::Refused { code, message },
    }
}

/// Most bytes of broker text kept in one outcome's message.
const MAX_MESSAGE: usize = 1024;

fn bounded(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let end = (0..=MAX_MESSAGE)
            .rev()
            .find(|&end| s.is_char_boundary(end))
            .unwrap_or(0);
        s.truncate(end);
    }
    s
}

/// Matches `response` against the batches of the request (`sent`, each
/// partition at most once) and classifies each batch. Allocates one map
/// and one vector, both of `sent.len()` entries, plus each refused batch's
/// message (capped at 1 KiB).
pub fn handle_produce_response(sent: &[SentBatch<'_>], response: &ProduceResponse) -> ProduceAnswer {
    let mut index: HashMap<(&str, i32), usize> = HashMap::with_capacity(sent.len());
    for (i, b) in sent.iter().enumerate() {
        index.entry((b.topic, b.partition)).or_insert(i);
    }
    // Which response entry (topic, partition index) answers each batch;
    // None = not seen yet.
    type Found<'r> = Option<Result<&'r PartitionProduceResponse, InvalidAnswer>>;
    let mut answer: Vec<Found<'_>> = vec![None; sent.len()];
    let mut unexpected = 0usize;
    for t in &response.responses {
        let name: &str = t.name.0.as_str();
        for p in &t.partition_responses {
            match index.get(&(name, p.index)).and_then(|&i| answer.get_mut(i)) {
                None => unexpected = unexpected.saturating_add(1),
                Some(slot) => {
                    *slot = Some(match slot {
                        None => Ok(p),
                        Some(_) => Err(InvalidAnswer::Duplicated),
                    });
                }
            }
        }
    }
    let outcomes = sent
        .iter()
        .zip(answer)
        .map(|(b, a)| match a {
            None => BatchOutcome::Invalid(InvalidAnswer::Missing),
            Some(Err(e)) => BatchOutcome::Invalid(e),
            Some(Ok(p)) => {
                if p.error_code == 0 {
                    let count = i64::from(b.record_count.max(1));
                    if p.base_offset < 0 || p.base_offset.checked_add(count).is_none() {
                        BatchOutcome::Invalid(InvalidAnswer::NoBaseOffset)
                    } else {
                        BatchOutcome::Delivered {
                            base_offset: p.base_offset,
                            log_append_time: p.log_append_time_ms.max(-1),
                        }
                    }
                } else {
                    let code = KafkaCode::from(p.error_code);
                    let mut message = p.error_message.as_ref().map(|m| bounded(m.to_string()));
                    if let Some(first) = p.record_errors.first() {
                        let detail = bounded(format!(
                            "record {}: {}",
                            first.batch_index,
                            first.batch_index_error_message.as_ref().map_or("", |m| m.as_str())
                        ));
                        message = Some(match message {
                            Some(m) => bounded(format!("{m}; {detail}")),
                            None => detail,
                        });
                    }
                    classify_error(code, message)
                }
            }
        })
        .collect();
    ProduceAnswer {
        outcomes,
        unexpected,
        throttle_time_ms: response.throttle_time_ms.max(0),
    }
}

/// Where the base sequence sits in a record batch v2, and the span the CRC
/// covers (attributes to the end).
const BASE_SEQUENCE_OFFSET: usize = 53;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const BATCH_HEADER: usize = 61;

/// Rewrites the base sequence of an encoded record batch and its CRC: how a
/// batch that the broker certainly did not write takes the sequence numbers
/// a refused batch before it gave back. The batch's records are unchanged.
pub fn rewrite_base_sequence(batch: &mut [u8], base_sequence: i32) -> crate::Result<()> {
    let len = batch.len();
    let Some((header, records)) = batch.split_first_chunk_mut::<BATCH_HEADER>() else {
        return Err(crate::Error::Invalid {
            context: "record batch",
            message: format!("{len} bytes is shorter than a batch header"),
        });
    };
    header[BASE_SEQUENCE_OFFSET..BASE_SEQUENCE_OFFSET + 4].copy_from_slice(&base_sequence.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&header[ATTRIBUTES_OFFSET..]), records);
    header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
    use kafka_protocol::protocol::StrBytes;

    use super::*;

    fn response(entries: &[(&str, i32, i16, i64)]) -> ProduceResponse {
        let mut r = ProduceResponse::default();
        for &(topic, partition, code, base) in entries {
            let mut p = PartitionProduceResponse::default();
            p.index = partition;
            p.error_code = code;
            p.base_offset = base;
            p.log_append_time_ms = -1;
            let mut t = TopicProduceResponse::default();
            t.name = StrBytes::from_string(topic.to_string()).into();
            t.partition_responses.push(p);
            r.responses.push(t);
        }
        r
    }

    fn sent() -> Vec<SentBatch<'static>> {
        vec![
            SentBatch {
                topic: "a",
                partition: 0,
                record_count: 3,
            },
            SentBatch {
                topic: "a",
                partition: 1,
                record_count: 1,
            },
            SentBatch {
                topic: "b",
                partition: 0,
                record_count: 2,
            },
        ]
    }

    #[test]
    fn every_batch_gets_its_own_answer() {
        let r = response(&[("b", 0, 0, 7), ("a", 1, 6, -1), ("a", 0, 0, 100)]);
        let a = handle_produce_response(&sent(), &r);
        assert_eq!(
            a.outcomes,
            vec![
                BatchOutcome::Delivered {
                    base_offset: 100,
                    log_append_time: -1
                },
                BatchOutcome::Retry {
                    code: KafkaCode::NOT_LEADER_OR_FOLLOWER,
                    refresh_metadata: true
                },
                BatchOutcome::Delivered {
                    base_offset: 7,
                    log_append_time: -1
                },
            ]
        );
        assert_eq!(a.unexpected, 0);
    }

    #[test]
    fn missing_duplicated_extra_and_offsetless_answers_are_errors() {
        // a[0] missing, a[1] twice, b[0] success at -1, c[9] never sent.
        let r = response(&[("a", 1, 0, 5), ("a", 1, 0, 6), ("b", 0, 0, -1), ("c", 9, 0, 1)]);
        let a = handle_produce_response(&sent(), &r);
        assert_eq!(
            a.outcomes,
            vec![
                BatchOutcome::Invalid(InvalidAnswer::Missing),
                BatchOutcome::Invalid(InvalidAnswer::Duplicated),
                BatchOutcome::Invalid(InvalidAnswer::NoBaseOffset),
            ]
        );
        assert_eq!(a.unexpected, 1);
    }

    #[test]
    fn offset_overflow_is_not_a_success() {
        let r = response(&[("a", 0, 0, i64::MAX - 1)]);
        let a = handle_produce_response(&sent()[..1], &r);
        assert_eq!(a.outcomes, vec![BatchOutcome::Invalid(InvalidAnswer::NoBaseOffset)]);
    }

    #[test]
    fn rewritten_sequence_decodes_with_a_valid_crc() {
        use crate::record::{BatchMeta, DecodeOptions, RecordBatch, RecordBatchEncoder, RecordOut};
        let meta = BatchMeta {
            producer_id: 5,
            producer_epoch: 1,
            base_sequence: 10,
            ..BatchMeta::default()
        };
        let records = [RecordOut {
            timestamp: 1,
            key: None,
            value: Some(b"v"),
            headers: &[],
        }];
        let mut out = bytes::BytesMut::new();
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
        rewrite_base_sequence(&mut out, 4).unwrap();
        let bytes = out.freeze();
        let batch = RecordBatch::decode_exact(&bytes, &DecodeOptions::default()).unwrap();
        assert_eq!(batch.header.base_sequence, 4);
        assert!(rewrite_base_sequence(&mut [0u8; 10], 1).is_err());
    }

    #[test]
    fn error_classes() {
        let r = response(&[("a", 0, 46, -1), ("a", 1, 45, -1), ("b", 0, 10, -1)]);
        let a = handle_produce_response(&sent(), &r);
        assert_eq!(a.outcomes[0], BatchOutcome::Duplicate);
        assert_eq!(a.outcomes[1], BatchOutcome::OutOfOrder);
        assert!(matches!(a.outcomes[2], BatchOutcome::Refused { code, .. } if code.0 == 10));
        assert!(a.outcomes[2].not_written());
        assert_eq!(
            classify_error(KafkaCode::UNKNOWN_PRODUCER_ID, None),
            BatchOutcome::IdentityLost {
                code: KafkaCode::UNKNOWN_PRODUCER_ID
            }
        );
    }
}
