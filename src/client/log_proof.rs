//! Proof of a transaction's end from the log: the markers it left in the
//! partitions it wrote.
//!
//! The coordinator forgets a transaction once a later one of its id (a
//! fence, the transaction timeout's bump, a successor) overwrote it, and
//! EndTxn/DescribeTransactions then read "fenced" whether or not its commit
//! had landed. The partitions remember: each holds the transaction's
//! records from the offset its delivery reports gave, then a COMMIT or
//! ABORT control batch of its producer id. [`prove_from_log`] reads each
//! partition uncommitted (control batches included) from that offset and
//! lets [`clink_kafka_wire::record::TxnEndScan`] judge the batch headers and
//! the marker: the first partition that proves either end decides (a
//! transaction's markers all say the same). Anything the log cannot prove
//! (a partition unreadable, its log deleted past the first offset, a marker
//! not written within the time bound) is [`LogProof::Undecided`]: never a
//! guess.
//!
//! Bounded: one partition is fetched at a time, each fetch asks for at most
//! [`LogProofLimits::fetch_max_bytes`] (the broker still returns a whole
//! first batch, itself bounded by its `message.max.bytes`), the bytes of one
//! answer are dropped before the next, a partition is read for at most
//! [`LogProofLimits::max_bytes_per_partition`], and the whole proof takes at
//! most [`LogProofLimits::timeout`].

use std::time::{Duration, Instant};

use bytes::Bytes;
use clink_kafka_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use clink_kafka_wire::kafka_protocol::messages::{FetchRequest, TopicName};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::record::{PartitionView, ScanStep, TxnEnd, TxnEndQuery, TxnEndScan};
use clink_kafka_wire::KafkaCode;

use super::cluster::Cluster;
use super::resolver::ResumeHandle;
use super::{ClientConfig, PartitionOffset, TransactionVersion};
use crate::error::{Error, Result};

/// The highest Fetch version asked (topics by name).
const FETCH_MAX_VERSION: i16 = 12;

/// Bounds of [`prove_from_log`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogProofLimits {
    /// `max_bytes` (and the partition's) of each Fetch (default 1 MiB).
    pub fetch_max_bytes: i32,
    /// The most bytes read from one partition before it counts as
    /// undecided (default 256 MiB).
    pub max_bytes_per_partition: u64,
    /// The whole proof's bound (default 30 s).
    pub timeout: Duration,
}

impl Default for LogProofLimits {
    fn default() -> Self {
        LogProofLimits {
            fetch_max_bytes: 1024 * 1024,
            max_bytes_per_partition: 256 * 1024 * 1024,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What the log proves about a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogProof {
    /// A COMMIT marker of the transaction's producer id, at the epoch its
    /// commit writes, follows its records.
    Committed {
        /// The partition that proved it.
        partition: i32,
        /// The marker's offset.
        offset: i64,
    },
    /// An ABORT marker of the transaction follows its records.
    Aborted {
        /// The partition that proved it.
        partition: i32,
        /// The marker's offset.
        offset: i64,
    },
    /// The log proves neither: why, per partition.
    Undecided {
        /// What each partition answered.
        detail: String,
    },
}

/// Reads `topic`'s partitions where the transaction of `handle` wrote
/// (`written`: each partition's first offset of it) until one proves how it
/// ended (see the module docs). Connects with `config`.
///
/// Cancel safety: cancel safe; it only reads.
pub async fn prove_from_log(
    config: &ClientConfig,
    handle: &ResumeHandle,
    topic: &str,
    written: &[PartitionOffset],
    limits: LogProofLimits,
) -> LogProof {
    let undecided = |detail: String| LogProof::Undecided { detail };
    if written.is_empty() {
        return undecided("no first offsets were staged for the transaction".into());
    }
    let deadline = Instant::now() + limits.timeout;
    let tv = match handle.transaction_version {
        TransactionVersion::V1 => 1,
        TransactionVersion::V2 => 2,
    };
    let cluster = match tokio::time::timeout(limits.timeout, Cluster::connect(config.clone())).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return undecided(format!("connecting: {e}")),
        Err(_) => return undecided(format!("connecting: no answer within {:?}", limits.timeout)),
    };
    let mut answers = Vec::new();
    for w in written {
        let Some(query) = TxnEndQuery::new(handle.producer_id, handle.producer_epoch, tv, w.offset) else {
            return undecided(format!("epoch {} has no commit epoch", handle.producer_epoch));
        };
        match scan_partition(&cluster, topic, w.partition, query, limits, deadline).await {
            Ok(TxnEnd::Committed { offset, epoch }) => {
                tracing::debug!(
                    topic,
                    partition = w.partition,
                    offset,
                    epoch,
                    "log proof: COMMIT marker"
                );
                return LogProof::Committed {
                    partition: w.partition,
                    offset,
                };
            }
            Ok(TxnEnd::Aborted { offset, epoch }) => {
                tracing::debug!(topic, partition = w.partition, offset, epoch, "log proof: ABORT marker");
                return LogProof::Aborted {
                    partition: w.partition,
                    offset,
                };
            }
            Err(why) => answers.push(format!("{topic}[{}] from offset {}: {why}", w.partition, w.offset)),
        }
    }
    undecided(answers.join("; "))
}

/// Scans one partition until the judge decides: `Err` says why not.
async fn scan_partition(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    query: TxnEndQuery,
    limits: LogProofLimits,
    deadline: Instant,
) -> std::result::Result<TxnEnd, String> {
    let fetch_max = limits.fetch_max_bytes.max(1024);
    // Kafka returns a whole first batch even above the fetch size; the
    // judge refuses one above the connection's frame cap anyway.
    let mut scan = TxnEndScan::new(query, config_max_batch(cluster.config()));
    let mut read: u64 = 0;
    let mut backoff = cluster.backoff();
    let mut last = String::from("no answer");
    loop {
        if Instant::now() >= deadline {
            return Err(format!("not decided in time (last: {last})"));
        }
        if read > limits.max_bytes_per_partition {
            return Err(format!("read {read} bytes without a marker"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let fetched = tokio::time::timeout(
            left,
            fetch_once(cluster, topic, partition, scan.next_offset(), fetch_max),
        )
        .await;
        let (records, view) = match fetched {
            Err(_) => return Err(format!("not decided in time (last: {last})")),
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                if e.kafka_code() == Some(KafkaCode::OFFSET_OUT_OF_RANGE) {
                    return Err(format!(
                        "offset {} is out of range (log truncated or deleted)",
                        scan.next_offset()
                    ));
                }
                if !(e.is_retriable() || e.is_connection_error()) {
                    return Err(e.to_string());
                }
                last = e.to_string();
                let _ = cluster.refresh_topics(&[topic]).await;
                tokio::time::sleep(backoff.next_delay().min(left)).await;
                continue;
            }
        };
        read = read.saturating_add(records.len() as u64);
        let before = scan.next_offset();
        match scan.handle_fetch(&records, view) {
            ScanStep::Ended(end) => return Ok(end),
            ScanStep::Undecided(why) => return Err(why),
            ScanStep::More { next_offset } => {
                if next_offset == before {
                    // Nothing new (the marker is not written yet): wait.
                    last = format!(
                        "at offset {next_offset}, high watermark {}, last stable offset {}",
                        view.high_watermark, view.last_stable_offset
                    );
                    tokio::time::sleep(backoff.next_delay().min(left)).await;
                } else {
                    backoff = cluster.backoff();
                }
            }
        }
    }
}

fn config_max_batch(config: &ClientConfig) -> usize {
    config.max_frame_size.max(1024 * 1024)
}

/// One read_uncommitted Fetch of `partition` from `offset` at its leader.
async fn fetch_once(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
) -> Result<(Bytes, PartitionView)> {
    let (_, conn) = cluster.leader(topic, partition).await?;
    let version = conn.version_for::<FetchRequest>(Some(FETCH_MAX_VERSION))?;
    let mut fp = FetchPartition::default();
    fp.partition = partition;
    fp.fetch_offset = offset;
    fp.partition_max_bytes = max_bytes;
    fp.current_leader_epoch = -1;
    fp.log_start_offset = -1;
    let mut ft = FetchTopic::default();
    ft.topic = TopicName(StrBytes::from_string(topic.to_owned()));
    ft.partitions = vec![fp];
    let mut request = FetchRequest::default();
    request.replica_id = (-1).into();
    request.max_wait_ms = 100;
    request.min_bytes = 1;
    request.max_bytes = max_bytes;
    // read_uncommitted: the markers and the open transaction's records too.
    request.isolation_level = 0;
    request.session_id = 0;
    request.session_epoch = -1;
    request.topics = vec![ft];
    let response = conn.request_at(version, &request).await?;
    let top = KafkaCode(response.error_code);
    if !top.is_ok() {
        return Err(fetch_error(&conn, topic, partition, top));
    }
    let data = response
        .responses
        .into_iter()
        .filter(|t| t.topic.0.as_str() == topic)
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == partition)
        .ok_or_else(|| fetch_error(&conn, topic, partition, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION))?;
    let code = KafkaCode(data.error_code);
    if !code.is_ok() {
        return Err(fetch_error(&conn, topic, partition, code));
    }
    Ok((
        data.records.unwrap_or_default(),
        PartitionView {
            high_watermark: data.high_watermark,
            last_stable_offset: data.last_stable_offset,
            log_start_offset: data.log_start_offset,
        },
    ))
}

fn fetch_error(conn: &super::connection::BrokerConnection, topic: &str, partition: i32, code: KafkaCode) -> Error {
    Error::Kafka {
        api: "Fetch",
        broker: conn.broker().clone(),
        topic: Some(topic.to_owned()),
        partition: Some(partition),
        code,
        message: None,
    }
}
