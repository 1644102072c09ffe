//! The consumer: manual partition assignment, seeking (ListOffsets), and a
//! batched [`poll`](Consumer::poll) that fetches from every assigned
//! partition's leader at once and hands back many records per call.
//!
//! Records are the wire crate's zero-copy [`Record`]s: key, value and header
//! bytes are slices of the fetched frame (or of the one inflated buffer of a
//! compressed batch). No consumer group yet: positions live in the consumer.
//!
//! Isolation ([KIP-98]): under `read_committed` the broker returns data only
//! up to the last stable offset and lists the aborted transactions in the
//! range; we apply that list per producer id exactly as the Java client's
//! `CompletedFetch` does (a producer's batches are dropped from the first
//! offset of its aborted transaction until its ABORT marker), never deliver
//! past the last stable offset, and never deliver control records at either
//! level.
//!
//! Fetch is spoken up to v12: v13 and later name topics by id ([KIP-516]).
//!
//! [KIP-98]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging
//! [KIP-516]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-516%3A+Topic+Identifiers

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clink_kafka_wire::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use clink_kafka_wire::kafka_protocol::messages::fetch_response::PartitionData;
use clink_kafka_wire::kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use clink_kafka_wire::kafka_protocol::messages::{FetchRequest, FetchResponse, ListOffsetsRequest, TopicName};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::record::{BatchHeader, BatchIter, ControlKind, DecodeOptions, Record};
use clink_kafka_wire::KafkaCode;

use super::cluster::{needs_metadata_refresh, Cluster};
use super::connection::BrokerConnection;
use crate::error::{BrokerRef, Error, Result};

/// Highest Fetch version used: v13 needs topic ids.
const FETCH_MAX_VERSION: i16 = 12;

/// Which records a consumer may see (`isolation.level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum IsolationLevel {
    /// Everything up to the high watermark, aborted transactions included.
    #[default]
    ReadUncommitted,
    /// Only committed data, up to the last stable offset.
    ReadCommitted,
}

impl IsolationLevel {
    fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// Where to position a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offset {
    /// The log start offset.
    Earliest,
    /// The end: the high watermark, or under `read_committed` the last
    /// stable offset.
    Latest,
    /// An explicit offset.
    At(i64),
    /// The first offset whose timestamp is at or after this one (ms since
    /// the epoch; ListOffsets by timestamp), or the end when there is none.
    Timestamp(i64),
}

/// Consumer settings. Names follow the Java client's.
#[derive(Clone, Debug)]
pub struct ConsumerConfig {
    pub isolation: IsolationLevel,
    /// `fetch.max.wait.ms`.
    pub max_wait: Duration,
    /// `fetch.min.bytes`.
    pub min_bytes: i32,
    /// `fetch.max.bytes`.
    pub max_bytes: i32,
    /// `max.partition.fetch.bytes`.
    pub partition_max_bytes: i32,
    /// `check.crcs`.
    pub check_crcs: bool,
    /// Where an unpositioned or out-of-range partition starts
    /// (`auto.offset.reset`); `None` makes an out-of-range offset an error.
    pub auto_offset_reset: Option<Offset>,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            isolation: IsolationLevel::ReadUncommitted,
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 4 * 1024 * 1024,
            check_crcs: true,
            auto_offset_reset: Some(Offset::Latest),
        }
    }
}

/// A consumed record and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    /// Offset, timestamp, key, value, headers (zero-copy `Bytes`).
    pub record: Record,
    /// The header of the batch the record came in: producer id and epoch,
    /// base sequence, compression, transactional flag, timestamp type.
    pub batch: BatchHeader,
}

impl ConsumerRecord {
    /// The record's producer sequence number (base sequence plus offset
    /// delta), or -1 for a non-idempotent batch.
    pub fn sequence(&self) -> i32 {
        if self.batch.base_sequence < 0 {
            return -1;
        }
        let delta = (self.record.offset - self.batch.base_offset) as i32;
        self.batch.base_sequence.wrapping_add(delta) & i32::MAX
    }
}

#[derive(Clone, Debug)]
struct Assigned {
    topic: Arc<str>,
    partition: i32,
    position: Option<i64>,
    high_watermark: i64,
    last_stable_offset: i64,
}

/// A consumer with manual assignment.
#[derive(Debug)]
pub struct Consumer {
    cluster: Cluster,
    config: ConsumerConfig,
    assigned: Vec<Assigned>,
}

/// What one partition's fetch answer told us to do next.
enum Next {
    Continue,
    RefreshMetadata,
}

impl Consumer {
    /// A consumer with nothing assigned.
    pub fn new(cluster: Cluster, config: ConsumerConfig) -> Self {
        Consumer {
            cluster,
            config,
            assigned: Vec::new(),
        }
    }

    /// Replaces the assignment. Partitions kept from the old assignment keep
    /// their positions; new ones start unpositioned (see
    /// [`ConsumerConfig::auto_offset_reset`]).
    pub fn assign<T: AsRef<str>>(&mut self, partitions: &[(T, i32)]) {
        let old = std::mem::take(&mut self.assigned);
        for (topic, partition) in partitions {
            let topic = topic.as_ref();
            let kept = old
                .iter()
                .find(|a| &*a.topic == topic && a.partition == *partition)
                .cloned();
            self.assigned.push(kept.unwrap_or_else(|| Assigned {
                topic: Arc::from(topic),
                partition: *partition,
                position: None,
                high_watermark: -1,
                last_stable_offset: -1,
            }));
        }
    }

    /// Assigns every partition of `topic`.
    pub async fn assign_topic(&mut self, topic: &str) -> Result<()> {
        let t = self.cluster.topic(topic).await?;
        let parts: Vec<(&str, i32)> = t.partitions.iter().map(|p| (topic, p.partition)).collect();
        self.assign(&parts);
        Ok(())
    }

    /// The partitions assigned.
    pub fn assignment(&self) -> Vec<(Arc<str>, i32)> {
        self.assigned.iter().map(|a| (a.topic.clone(), a.partition)).collect()
    }

    fn find(&mut self, topic: &str, partition: i32) -> Result<&mut Assigned> {
        self.assigned
            .iter_mut()
            .find(|a| &*a.topic == topic && a.partition == partition)
            .ok_or_else(|| Error::NotAssigned {
                topic: topic.to_owned(),
                partition,
            })
    }

    /// Moves `topic[partition]` to `offset`; returns the resolved position.
    pub async fn seek(&mut self, topic: &str, partition: i32, offset: Offset) -> Result<i64> {
        self.find(topic, partition)?;
        let position = match offset {
            Offset::At(o) => o,
            other => self.list_offset(topic, partition, other).await?,
        };
        self.find(topic, partition)?.position = Some(position);
        Ok(position)
    }

    /// Moves every assigned partition to `offset`.
    pub async fn seek_all(&mut self, offset: Offset) -> Result<()> {
        for (topic, partition) in self.assignment() {
            self.seek(&topic, partition, offset).await?;
        }
        Ok(())
    }

    /// The next offset `poll` will fetch from, once positioned.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.assigned
            .iter()
            .find(|a| &*a.topic == topic && a.partition == partition)
            .and_then(|a| a.position)
    }

    /// The high watermark and last stable offset from the latest fetch.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Option<(i64, i64)> {
        self.assigned
            .iter()
            .find(|a| &*a.topic == topic && a.partition == partition)
            .map(|a| (a.high_watermark, a.last_stable_offset))
    }

    /// Asks the leader for the earliest or latest offset (ListOffsets; the
    /// latest is the last stable offset under `read_committed`), or for the
    /// first offset at or after a timestamp (the end when no record is that
    /// late).
    pub async fn list_offset(&self, topic: &str, partition: i32, which: Offset) -> Result<i64> {
        let timestamp = match which {
            Offset::At(o) => return Ok(o),
            Offset::Earliest => -2,
            Offset::Latest => -1,
            Offset::Timestamp(ts) => {
                return match self.offset_for_timestamp(topic, partition, ts).await? {
                    Some((offset, _)) => Ok(offset),
                    None => self.list_offsets_at(topic, partition, -1).await.map(|(o, _)| o),
                }
            }
        };
        self.list_offsets_at(topic, partition, timestamp).await.map(|(o, _)| o)
    }

    /// The first offset whose timestamp is at or after `timestamp_ms`, with
    /// that record's timestamp; `None` when no record is that late (the
    /// Java client's `offsetsForTimes`).
    pub async fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
    ) -> Result<Option<(i64, i64)>> {
        if timestamp_ms < 0 {
            return Err(Error::Config {
                option: "timestamp",
                message: format!("must be milliseconds since the epoch (>= 0), not {timestamp_ms}"),
            });
        }
        let (offset, ts) = self.list_offsets_at(topic, partition, timestamp_ms).await?;
        Ok((offset >= 0).then_some((offset, ts)))
    }

    /// One ListOffsets query: -2 earliest, -1 latest, or a timestamp.
    async fn list_offsets_at(&self, topic: &str, partition: i32, timestamp: i64) -> Result<(i64, i64)> {
        let started = Instant::now();
        let mut backoff = self.cluster.backoff();
        loop {
            let (_, conn) = self.cluster.leader(topic, partition).await?;
            let mut p = ListOffsetsPartition::default();
            p.partition_index = partition;
            p.timestamp = timestamp;
            p.current_leader_epoch = -1;
            let mut t = ListOffsetsTopic::default();
            t.name = TopicName(StrBytes::from_string(topic.to_owned()));
            t.partitions = vec![p];
            let mut request = ListOffsetsRequest::default();
            request.replica_id = (-1).into();
            request.isolation_level = self.config.isolation.wire();
            request.topics = vec![t];
            request.timeout_ms = self.cluster.config().request_timeout.as_millis().min(i32::MAX as u128) as i32;
            let err = match conn.request(&request).await {
                Ok(response) => {
                    let answer = response
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str() == topic)
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == partition);
                    match answer {
                        Some(p) if p.error_code == 0 => return Ok((p.offset, p.timestamp)),
                        Some(p) => Error::kafka(
                            "ListOffsets",
                            conn.broker(),
                            Some(topic),
                            Some(partition),
                            p.error_code,
                            None,
                        ),
                        None => missing_partition("ListOffsets", conn.broker(), topic, partition),
                    }
                }
                Err(e) => e,
            };
            if !err.is_retriable() || started.elapsed() >= self.cluster.config().metadata_max_wait {
                return Err(err);
            }
            if err.kafka_code().is_some_and(needs_metadata_refresh) {
                self.cluster.refresh_topics(&[topic]).await?;
            }
            backoff.sleep().await;
        }
    }

    /// Fetches from every assigned partition and returns what arrived: many
    /// records per call, in offset order per partition. Waits up to
    /// `timeout` for at least one record; an empty vector means none came.
    /// A retriable error is retried until `timeout`, then returned.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut backoff = self.cluster.backoff();
        loop {
            let result = self.fetch_round(deadline, &mut out).await;
            let now = Instant::now();
            match result {
                Ok(()) if !out.is_empty() || now >= deadline => return Ok(out),
                Ok(()) => {}
                Err(e) if e.is_retriable() && now < deadline => {
                    tracing::debug!(error = %e, "fetch failed; retrying");
                    let delay = backoff.next_delay().min(deadline - now);
                    tokio::time::sleep(delay).await;
                }
                Err(e) => {
                    if out.is_empty() {
                        return Err(e);
                    }
                    // Hand over what we have; the error comes back next time.
                    tracing::debug!(error = %e, "fetch failed after records arrived");
                    return Ok(out);
                }
            }
        }
    }

    /// One fetch from each leader; appends records to `out`.
    async fn fetch_round(&mut self, deadline: Instant, out: &mut Vec<ConsumerRecord>) -> Result<()> {
        if self.assigned.is_empty() {
            tokio::time::sleep_until(deadline.into()).await;
            return Ok(());
        }
        // Position whatever is unpositioned.
        for i in 0..self.assigned.len() {
            if self.assigned[i].position.is_none() {
                let (topic, partition) = (self.assigned[i].topic.clone(), self.assigned[i].partition);
                let reset = self.config.auto_offset_reset.unwrap_or(Offset::Latest);
                self.seek(&topic, partition, reset).await?;
            }
        }
        // Group by leader.
        let mut by_leader: BTreeMap<i32, (BrokerConnection, Vec<usize>)> = BTreeMap::new();
        for (i, a) in self.assigned.iter().enumerate() {
            let (leader, conn) = self.cluster.leader(&a.topic, a.partition).await?;
            by_leader.entry(leader).or_insert_with(|| (conn, Vec::new())).1.push(i);
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        let max_wait = self.config.max_wait.min(remaining);
        let mut tasks = tokio::task::JoinSet::new();
        for (_, (conn, indexes)) in by_leader {
            let request = self.fetch_request(&indexes, max_wait);
            tasks.spawn(async move {
                let result = fetch(&conn, &request).await;
                (conn.broker().clone(), indexes, result)
            });
        }
        let mut first_error = None;
        let mut refresh = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            let (broker, indexes, result) = joined.expect("fetch task panicked");
            let response = match result {
                Ok(r) => r,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            if response.error_code != 0 {
                first_error.get_or_insert(Error::kafka("Fetch", &broker, None, None, response.error_code, None));
                continue;
            }
            for topic in response.responses {
                for data in topic.partitions {
                    let Some(&i) = indexes.iter().find(|&&i| {
                        self.assigned[i].topic.as_ref() == topic.topic.0.as_str()
                            && self.assigned[i].partition == data.partition_index
                    }) else {
                        continue;
                    };
                    match self.handle_partition(i, &broker, data, out) {
                        Ok(Next::Continue) => {}
                        Ok(Next::RefreshMetadata) => refresh.push(self.assigned[i].topic.clone()),
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
            }
        }
        if !refresh.is_empty() {
            let topics: Vec<&str> = refresh.iter().map(|t| &**t).collect();
            self.cluster.refresh_topics(&topics).await?;
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn fetch_request(&self, indexes: &[usize], max_wait: Duration) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for &i in indexes {
            let a = &self.assigned[i];
            let mut p = FetchPartition::default();
            p.partition = a.partition;
            p.fetch_offset = a.position.expect("positioned before fetching");
            p.partition_max_bytes = self.config.partition_max_bytes;
            p.current_leader_epoch = -1;
            p.log_start_offset = -1;
            match topics.iter_mut().find(|t| t.topic.0.as_str() == &*a.topic) {
                Some(t) => t.partitions.push(p),
                None => {
                    let mut t = FetchTopic::default();
                    t.topic = TopicName(StrBytes::from_string(a.topic.to_string()));
                    t.partitions = vec![p];
                    topics.push(t);
                }
            }
        }
        let mut request = FetchRequest::default();
        request.replica_id = (-1).into();
        request.max_wait_ms = max_wait.as_millis().min(i32::MAX as u128) as i32;
        request.min_bytes = self.config.min_bytes;
        request.max_bytes = self.config.max_bytes;
        request.isolation_level = self.config.isolation.wire();
        request.session_id = 0;
        request.session_epoch = -1;
        request.topics = topics;
        request
    }

    /// Applies one partition's answer: records to `out`, position forward.
    fn handle_partition(
        &mut self,
        i: usize,
        broker: &BrokerRef,
        data: PartitionData,
        out: &mut Vec<ConsumerRecord>,
    ) -> Result<Next> {
        let read_committed = self.config.isolation == IsolationLevel::ReadCommitted;
        let check_crcs = self.config.check_crcs;
        let reset = self.config.auto_offset_reset;
        let a = &mut self.assigned[i];
        let code = KafkaCode(data.error_code);
        if code == KafkaCode::OFFSET_OUT_OF_RANGE {
            let offset = a.position.unwrap_or(-1);
            return match reset {
                Some(_) => {
                    tracing::info!(topic = %a.topic, partition = a.partition, offset, "offset out of range; resetting");
                    a.position = None;
                    Ok(Next::Continue)
                }
                None => Err(Error::OffsetOutOfRange {
                    topic: a.topic.to_string(),
                    partition: a.partition,
                    offset,
                }),
            };
        }
        if !code.is_ok() {
            if needs_metadata_refresh(code) {
                return Ok(Next::RefreshMetadata);
            }
            if code.is_retriable() {
                return Ok(Next::Continue);
            }
            return Err(Error::kafka(
                "Fetch",
                broker,
                Some(&a.topic),
                Some(a.partition),
                code.0,
                None,
            ));
        }
        a.high_watermark = data.high_watermark;
        a.last_stable_offset = data.last_stable_offset;
        let mut position = a.position.expect("positioned before fetching");
        // Never deliver at or past this offset.
        let upper = if read_committed && data.last_stable_offset >= 0 {
            data.last_stable_offset
        } else {
            data.high_watermark
        };
        let records = data.records.unwrap_or_default();
        let fetched_bytes = records.len();
        let mut aborted: VecDeque<(i64, i64)> = VecDeque::new();
        if read_committed {
            let mut list: Vec<(i64, i64)> = data
                .aborted_transactions
                .unwrap_or_default()
                .iter()
                .map(|t| (t.first_offset, t.producer_id.0))
                .collect();
            list.sort_unstable();
            aborted = list.into();
        }
        let mut aborted_producers: HashSet<i64> = HashSet::new();
        let opts = DecodeOptions {
            verify_crc: check_crcs,
            ..DecodeOptions::default()
        };
        let mut decoded_any = false;
        let corrupt = |offset: i64, e: clink_kafka_wire::Error| Error::CorruptRecord {
            topic: a.topic.to_string(),
            partition: a.partition,
            offset,
            source: Arc::new(e),
        };
        'batches: for batch in BatchIter::new(records, opts) {
            let batch = batch.map_err(|e| corrupt(position, e))?;
            decoded_any = true;
            let h = batch.header;
            if h.next_offset() <= position {
                continue;
            }
            if h.base_offset >= upper {
                break;
            }
            if read_committed && h.producer_id >= 0 {
                while let Some(&(first_offset, pid)) = aborted.front() {
                    if first_offset > h.last_offset() {
                        break;
                    }
                    aborted_producers.insert(pid);
                    aborted.pop_front();
                }
                if h.is_control() {
                    let control = batch.control_record().map_err(|e| corrupt(h.base_offset, e))?;
                    if matches!(control.map(|c| c.kind), Some(ControlKind::Abort)) {
                        aborted_producers.remove(&h.producer_id);
                    }
                    position = h.next_offset();
                    continue;
                }
                if h.is_transactional() && aborted_producers.contains(&h.producer_id) {
                    tracing::trace!(topic = %a.topic, partition = a.partition, offset = h.base_offset,
                        producer_id = h.producer_id, "skipping aborted batch");
                    position = h.next_offset();
                    continue;
                }
            }
            if h.is_control() {
                position = h.next_offset();
                continue;
            }
            for r in batch.records() {
                let r = r.map_err(|e| corrupt(h.base_offset, e))?;
                if r.offset < position {
                    continue;
                }
                if r.offset >= upper {
                    position = r.offset;
                    break 'batches;
                }
                out.push(ConsumerRecord {
                    topic: a.topic.clone(),
                    partition: a.partition,
                    record: batch.to_owned_record(&r),
                    batch: h,
                });
            }
            position = h.next_offset();
        }
        if fetched_bytes > 0 && !decoded_any {
            // The broker always sends the first batch whole (KIP-74), so a
            // partial one alone means a limit on our side cut it.
            return Err(Error::TooLarge {
                what: "partial record batch",
                size: fetched_bytes,
                limit: self.config.partition_max_bytes as usize,
                option: "max.partition.fetch.bytes",
            });
        }
        self.assigned[i].position = Some(position);
        Ok(Next::Continue)
    }
}

async fn fetch(conn: &BrokerConnection, request: &FetchRequest) -> Result<FetchResponse> {
    let version = conn.version_for::<FetchRequest>(Some(FETCH_MAX_VERSION))?;
    conn.request_at(version, request).await
}

fn missing_partition(api: &'static str, broker: &BrokerRef, topic: &str, partition: i32) -> Error {
    Error::Protocol {
        broker: broker.clone(),
        api,
        source: Arc::new(clink_kafka_wire::Error::Invalid {
            context: "response",
            message: format!("no answer for {topic}[{partition}]"),
        }),
    }
}
