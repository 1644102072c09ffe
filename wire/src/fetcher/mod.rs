//! The consumer's fetch path as a sans-IO state machine: assignment and
//! positions, the Fetch request sent to each broker, and what each Fetch
//! response does to them.
//!
//! ```text
//!  assign / seek ──► Fetcher ──► build_request(broker, partitions) ──► FetchRequest (async layer sends it)
//!                      ▲  │
//!   FetchResponse ─────┘  └──► take_records(max_records, max_bytes) ──► records, positions forward
//!   (handle_response → FetchOutcome: throttle, refresh metadata, reset offsets, errors)
//! ```
//!
//! Nothing here touches a socket or a clock; the async consumer
//! (`src/client/consumer.rs`) only moves bytes and time. That is what lets
//! the `fetch` fuzz target drive it with arbitrary responses
//! (`fuzzing`, built under `cfg(fuzzing)`).
//!
//! What it guarantees, whatever the broker sends:
//! - **Lazy, streamed inflation.** A response's record bytes are kept as
//!   they came (compressed, a slice of the frame). A batch is inflated only
//!   when its records are about to be handed over, and then chunk by chunk
//!   ([`BatchStream`]: about [`INFLATE_CHUNK`] of whole records at a time,
//!   a record larger than that in a window of its own, up to
//!   [`FetcherConfig::max_batch_inflate`] per record), so a batch that
//!   inflates to any size costs about one chunk plus its largest record;
//!   batches that will not be delivered (below the position, aborted,
//!   control) are skipped without inflating.
//! - **Bounded polls.** [`Fetcher::take_records`] hands over at most
//!   `max_records` records and `max_bytes` bytes of keys, values and headers
//!   — except that a first record larger than `max_bytes` still arrives,
//!   alone.
//! - **Monotonic positions.** A partition's position only moves forward,
//!   and a record is handed over only at or after it, so no offset is
//!   delivered twice; a record that would go backwards is dropped.
//! - **Visibility.** Nothing at or past the high watermark (the last stable
//!   offset under `read_committed`, with aborted transactions and control
//!   batches dropped as the Java client's `CompletedFetch` does) is handed
//!   over.
//! - **Only what was asked.** A partition the request (or session) did not
//!   name, named twice, answered at an offset other than the position, or
//!   already holding undelivered data is ignored.
//! - **One fetch per broker in flight**, and a partition with buffered data
//!   is not fetched again until it is consumed.
//! - **Fetch sessions** ([KIP-227], `session`) per broker.
//! - **Leader epochs** ([KIP-320], `leader`): each partition's fetch names
//!   the leader epoch the metadata gave (`current_leader_epoch`), the
//!   position remembers the epoch of the batch it follows, and after a
//!   leader change the position is checked with OffsetForLeaderEpoch before
//!   the partition is fetched again: a log truncated below it is reported
//!   (or, with a reset policy, the position moves back to where the logs
//!   diverge), never silently re-read or skipped.
//! - **Fetching from the closest replica** ([KIP-392], `leader`): with a
//!   client rack set, the broker's `preferred_read_replica` is followed
//!   until it fails, or until it is older than
//!   [`FetcherConfig::preferred_replica_max_age_ms`]; then the leader again.
//!
//! [KIP-320]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-320%3A+Allow+fetchers+to+detect+and+handle+log+truncation
//! [KIP-392]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-392%3A+Allow+consumers+to+fetch+from+closest+replica
//! [KIP-227]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-227%3A+Introduce+Incremental+FetchRequests+to+Increase+Partition+Scalability

mod leader;
mod session;

#[cfg(any(fuzzing, test))]
pub mod fuzzing;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::compression::Compression;
use crate::error_code::KafkaCode;
use crate::record::{
    BatchHeader, BatchStream, ControlKind, DecodeOptions, Record, RecordBatch, RecordCursor, INFLATE_CHUNK,
};

pub use leader::{EpochValidationOutcome, LogTruncation};
pub use session::{FetchSession, FINAL_EPOCH, INITIAL_EPOCH};
use session::{SessionPartition, SessionPlan};

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
    /// The `isolation_level` byte of Fetch and ListOffsets requests.
    pub fn wire(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// A consumed record and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic the record came from.
    pub topic: Arc<str>,
    /// The partition the record came from.
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
        // The sequence wraps at i32::MAX as the producer's does; a delta
        // from a hostile batch only makes a wrong (never a panicking) one.
        let delta = self.record.offset.wrapping_sub(self.batch.base_offset) as i32;
        self.batch.base_sequence.wrapping_add(delta) & i32::MAX
    }
}

/// The bytes a record counts against a poll's byte bound: key, value and
/// header keys and values.
pub fn record_size(r: &Record) -> usize {
    // Lengths of slices of one frame: their sum cannot overflow in
    // practice, and saturating keeps a bound a bound if it ever did.
    let value_len = |v: &Option<Bytes>| v.as_ref().map_or(0, |v| v.len());
    r.headers
        .iter()
        .fold(value_len(&r.key).saturating_add(value_len(&r.value)), |sum, h| {
            sum.saturating_add(h.key.len()).saturating_add(value_len(&h.value))
        })
}

/// The state machine's settings (the request-level ones — wait, min and
/// max bytes — are arguments of [`Fetcher::build_request`]).
#[derive(Clone, Copy, Debug)]
pub struct FetcherConfig {
    /// `isolation.level`: read_committed filters aborted records and stops at the last stable offset.
    pub isolation: IsolationLevel,
    /// `check.crcs`.
    pub check_crcs: bool,
    /// `max.partition.fetch.bytes`.
    pub partition_max_bytes: i32,
    /// The most bytes one record of a compressed batch may inflate to (a
    /// larger one is a corrupt-record error, [`crate::Error::RecordTooLarge`]);
    /// also the largest single decoding step (a raw snappy block, an lz4
    /// block, the zstd window kept) and the chunk bound when below
    /// [`INFLATE_CHUNK`]. Batches themselves may inflate to any size: they
    /// are streamed. A control batch (a transaction marker, a few bytes)
    /// is inflated whole under this bound.
    pub max_batch_inflate: usize,
    /// An out-of-range offset unpositions the partition (to be reset by
    /// `auto.offset.reset`) instead of being an error.
    pub auto_reset: bool,
    /// Use fetch sessions (KIP-227).
    pub sessions: bool,
    /// How long a broker's `preferred_read_replica` (KIP-392) is followed
    /// before the leader is asked again (Java: `metadata.max.age.ms`).
    pub preferred_replica_max_age_ms: u64,
}

impl Default for FetcherConfig {
    fn default() -> Self {
        FetcherConfig {
            isolation: IsolationLevel::ReadUncommitted,
            check_crcs: true,
            partition_max_bytes: 4 * 1024 * 1024,
            max_batch_inflate: 64 * 1024 * 1024,
            auto_reset: true,
            sessions: true,
            preferred_replica_max_age_ms: 5 * 60 * 1000,
        }
    }
}

/// What went wrong for one partition or one response.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
// Variant fields are named for what they hold and described by the
// variant's doc and its Display message.
#[allow(missing_docs)]
pub enum FetchError {
    /// A batch failed to decode (CRC, codec, inflation cap, truncation).
    #[error("corrupt record data in {topic}[{partition}] at offset {offset}: {source}")]
    Corrupt {
        topic: Arc<str>,
        partition: i32,
        offset: i64,
        #[source]
        source: Arc<crate::Error>,
    },
    /// The position is outside the log and no reset policy is set.
    #[error("offset {offset} is out of range for {topic}[{partition}]")]
    OffsetOutOfRange {
        topic: Arc<str>,
        partition: i32,
        offset: i64,
    },
    /// A partition-level error that retrying will not fix.
    #[error("fetch of {topic}[{partition}] failed: {code}")]
    Partition {
        topic: Arc<str>,
        partition: i32,
        code: KafkaCode,
    },
    /// A response-level error.
    #[error("fetch failed: {code}")]
    Response { code: KafkaCode },
    /// The log was truncated below the position after a leader change
    /// (KIP-320) and no reset policy is set.
    #[error("{0}")]
    LogTruncation(LogTruncation),
    /// Only part of a batch arrived and nothing else: a size limit on our
    /// side cut it (the broker always sends a first batch whole, KIP-74).
    #[error("partial record batch of {size} bytes in {topic}[{partition}] (max.partition.fetch.bytes = {limit})")]
    PartialBatch {
        topic: Arc<str>,
        partition: i32,
        size: usize,
        limit: usize,
    },
}

impl FetchError {
    /// Worth retrying as is (a retriable Kafka code).
    pub fn is_retriable(&self) -> bool {
        match self {
            FetchError::Partition { code, .. } | FetchError::Response { code } => code.is_retriable(),
            _ => false,
        }
    }
}

/// The codes that mean our metadata is stale (or, from a follower we were
/// sent to, that it cannot serve us: `REPLICA_NOT_AVAILABLE`,
/// `KAFKA_STORAGE_ERROR`, `OFFSET_NOT_AVAILABLE`, as Java's fetcher).
pub fn needs_metadata_refresh(code: KafkaCode) -> bool {
    matches!(
        code,
        KafkaCode::NOT_LEADER_OR_FOLLOWER
            | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
            | KafkaCode::LEADER_NOT_AVAILABLE
            | KafkaCode::FENCED_LEADER_EPOCH
            | KafkaCode::UNKNOWN_LEADER_EPOCH
    ) || matches!(code.0, 9 | 56 | 78)
}

/// Sorts a partition's (non-OK) error `code`: stale metadata (the topic to
/// refresh, retry), retriable (retry), or an error to report. Returns
/// whether it is the last: not to be retried.
fn partition_error(
    code: KafkaCode,
    topic: &Arc<str>,
    partition: i32,
    refresh: &mut Vec<Arc<str>>,
    retriable: &mut bool,
    errors: &mut Vec<FetchError>,
) -> bool {
    if needs_metadata_refresh(code) {
        if !refresh.contains(topic) {
            refresh.push(topic.clone());
        }
        *retriable = true;
        false
    } else if code.is_retriable() {
        *retriable = true;
        false
    } else {
        errors.push(FetchError::Partition {
            topic: topic.clone(),
            partition,
            code,
        });
        true
    }
}

/// `FETCH_SESSION_ID_NOT_FOUND`, `INVALID_FETCH_SESSION_EPOCH`,
/// `FETCH_SESSION_TOPIC_ID_ERROR`: answered by a full fetch.
pub fn is_session_error(code: KafkaCode) -> bool {
    matches!(code.0, 70 | 71 | 106)
}

/// What one response asks of the async layer.
#[derive(Clone, Debug, Default)]
pub struct FetchOutcome {
    /// `throttle_time_ms` (KIP-219): send nothing more to this broker for
    /// this long (uncapped; the caller caps it).
    pub throttle_ms: i32,
    /// Topics whose metadata is stale (leader moved, unknown partition).
    pub refresh_metadata: Vec<Arc<str>>,
    /// Partitions unpositioned by an out-of-range offset; reset them.
    pub reset_offsets: Vec<(Arc<str>, i32)>,
    /// Errors to report.
    pub errors: Vec<FetchError>,
    /// Partitions whose data was buffered.
    pub buffered: usize,
    /// Buffered partitions answered at an offset that already yielded
    /// nothing usable once: the broker is not making progress for us.
    pub stalled: usize,
    /// Entries ignored: not asked for, named twice, stale.
    pub ignored: usize,
    /// The session was reset (a session error or a mismatched answer).
    pub session_reset: bool,
    /// A retriable partition or response error arrived.
    pub retriable_error: bool,
}

impl FetchOutcome {
    /// Nothing usable arrived: the caller should wait before asking again.
    pub fn fruitless(&self) -> bool {
        self.buffered == self.stalled
    }
}

#[derive(Debug)]
struct Assigned {
    topic: Arc<str>,
    partition: i32,
    position: Option<i64>,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    buffered: Option<Buffered>,
    /// The broker a fetch for this partition is in flight to.
    in_flight: Option<i32>,
    /// A fetch at this offset was answered with data that yielded nothing.
    fruitless_at: Option<i64>,
    /// Leader, epochs, validation and preferred replica ([`leader`]).
    replica: leader::ReplicaState,
}

/// A partition's fetched, undelivered data (Java's `CompletedFetch`).
#[derive(Debug)]
struct Buffered {
    /// Fetch offset the data answers.
    fetch_offset: i64,
    /// Whole batches not yet looked at, as received (compressed).
    rest: Bytes,
    /// The batch being handed over: its current window of inflated
    /// records, where we are in it, and (compressed) the stream the next
    /// windows come from.
    current: Option<Current>,
    /// Nothing at or past this is delivered (HWM, or LSO).
    upper: i64,
    /// Aborted transactions not yet reached: (first offset, producer id).
    aborted: VecDeque<(i64, i64)>,
    aborted_producers: HashSet<i64>,
    fetched_bytes: usize,
    decoded_any: bool,
    delivered_any: bool,
    /// An error reached after records were handed over in the same poll;
    /// reported by the next take.
    error: Option<FetchError>,
}

/// The batch whose records are being handed over.
#[derive(Debug)]
struct Current {
    /// The whole batch (uncompressed) or its current window (compressed).
    batch: RecordBatch,
    cursor: RecordCursor,
    stream: Option<Box<BatchStream>>,
}

/// What was sent to one broker.
#[derive(Debug)]
struct SentFetch {
    plan: SessionPlan,
    /// Every partition the answer may speak of, at the offset asked.
    expected: BTreeMap<(Arc<str>, i32), i64>,
}

/// The fetch state machine. See the module docs.
#[derive(Debug)]
pub struct Fetcher {
    config: FetcherConfig,
    assigned: Vec<Assigned>,
    /// Partitions with buffered data, in arrival order (indexes).
    ready: VecDeque<usize>,
    sessions: BTreeMap<i32, FetchSession>,
    in_flight: BTreeMap<i32, SentFetch>,
    /// The caller's clock (ms), as last given to [`Fetcher::set_now`].
    now_ms: u64,
    /// `client.rack` (empty: none), [`Fetcher::set_client_rack`].
    rack_id: StrBytes,
    /// How many records the last non-empty [`Fetcher::take_records`]
    /// handed over: the next one starts with room for as many (within its
    /// bound), rather than growing its vector by doubling, which copies
    /// every record taken so far at each step.
    last_take: usize,
}

enum Step {
    /// Progress without a record (batch skipped, or inflated and current).
    Moved,
    Exhausted,
}

enum Drained {
    /// A record count or byte bound was reached.
    BoundReached,
    /// The current batch is done (or cut at the bound).
    BatchDone,
    /// No batch is current.
    NoBatch,
}

impl Fetcher {
    /// A fetcher with nothing assigned.
    pub fn new(config: FetcherConfig) -> Self {
        Fetcher {
            config,
            assigned: Vec::new(),
            ready: VecDeque::new(),
            sessions: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            now_ms: 0,
            rack_id: StrBytes::default(),
            last_take: 0,
        }
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &FetcherConfig {
        &self.config
    }

    /// Replaces the assignment. Partitions kept keep their positions and
    /// buffered data; new ones start unpositioned.
    pub fn assign<T: AsRef<str>>(&mut self, partitions: &[(T, i32)]) {
        let mut old = std::mem::take(&mut self.assigned);
        let mut kept_ready = Vec::new();
        for (topic, partition) in partitions {
            let topic = topic.as_ref();
            if self.index(topic, *partition).is_some() {
                continue;
            }
            match old.iter().position(|a| &*a.topic == topic && a.partition == *partition) {
                Some(i) => {
                    let a = old.swap_remove(i);
                    if a.buffered.is_some() {
                        kept_ready.push((a.topic.clone(), a.partition));
                    }
                    self.assigned.push(a);
                }
                None => self.assigned.push(Assigned {
                    topic: Arc::from(topic),
                    partition: *partition,
                    position: None,
                    high_watermark: -1,
                    last_stable_offset: -1,
                    log_start_offset: -1,
                    buffered: None,
                    in_flight: None,
                    fruitless_at: None,
                    replica: leader::ReplicaState::default(),
                }),
            }
        }
        // Keep the old arrival order of what is still buffered.
        let old_order: Vec<(Arc<str>, i32)> = kept_ready;
        self.ready = old_order.iter().filter_map(|(t, p)| self.index(t, *p)).collect();
    }

    /// The assigned partitions, in assignment order.
    pub fn assignment(&self) -> impl Iterator<Item = (&Arc<str>, i32)> {
        self.assigned.iter().map(|a| (&a.topic, a.partition))
    }

    fn index(&self, topic: &str, partition: i32) -> Option<usize> {
        self.assigned
            .iter()
            .position(|a| &*a.topic == topic && a.partition == partition)
    }

    fn find(&self, topic: &str, partition: i32) -> Option<&Assigned> {
        self.assigned
            .iter()
            .find(|a| &*a.topic == topic && a.partition == partition)
    }

    fn find_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Assigned> {
        self.assigned
            .iter_mut()
            .find(|a| &*a.topic == topic && a.partition == partition)
    }

    /// Whether `topic[partition]` is assigned.
    pub fn is_assigned(&self, topic: &str, partition: i32) -> bool {
        self.index(topic, partition).is_some()
    }

    /// The next offset to hand over, once positioned.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.find(topic, partition).and_then(|a| a.position)
    }

    /// High watermark and last stable offset from the latest answer.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Option<(i64, i64)> {
        self.find(topic, partition)
            .map(|a| (a.high_watermark, a.last_stable_offset))
    }

    /// Moves a partition to `offset` (`None` unpositions it), dropping its
    /// buffered data. Returns false when it is not assigned. An answer in
    /// flight for the old offset will be ignored.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: Option<i64>) -> bool {
        let Some(i) = self.index(topic, partition) else {
            return false;
        };
        let Some(a) = self.assigned.get_mut(i) else {
            return false;
        };
        a.position = offset;
        a.buffered = None;
        a.fruitless_at = None;
        a.replica.seeked();
        self.ready.retain(|&r| r != i);
        true
    }

    /// Partitions without a position (to reset with ListOffsets).
    pub fn unpositioned(&self) -> Vec<(Arc<str>, i32)> {
        self.assigned
            .iter()
            .filter(|a| a.position.is_none())
            .map(|a| (a.topic.clone(), a.partition))
            .collect()
    }

    /// Partitions that want a fetch now: positioned, nothing buffered,
    /// nothing in flight.
    pub fn fetchable(&self) -> Vec<(Arc<str>, i32)> {
        self.assigned
            .iter()
            .filter(|a| a.position.is_some() && a.buffered.is_none() && a.in_flight.is_none() && a.replica.fetchable())
            .map(|a| (a.topic.clone(), a.partition))
            .collect()
    }

    /// Whether a fetch to `broker` is in flight.
    pub fn in_flight(&self, broker: i32) -> bool {
        self.in_flight.contains_key(&broker)
    }

    /// Whether any partition holds undelivered data.
    pub fn has_buffered(&self) -> bool {
        !self.ready.is_empty()
    }

    /// How many partitions hold undelivered data.
    pub fn buffered_partitions(&self) -> usize {
        self.ready.len()
    }

    /// The record bytes (as fetched, compressed) of the answers whose
    /// records are not all handed over yet: what the fetcher holds.
    pub fn buffered_bytes(&self) -> usize {
        self.assigned
            .iter()
            .filter_map(|a| a.buffered.as_ref())
            .map(|b| b.fetched_bytes)
            .fold(0usize, usize::saturating_add)
    }

    /// The session state for `broker`.
    pub fn session(&self, broker: i32) -> Option<&FetchSession> {
        self.sessions.get(&broker)
    }

    /// The Fetch request for `broker` covering `partitions` (those led by
    /// it; entries not fetchable now are left out). `None` when a fetch to
    /// it is already in flight or nothing is left to ask for. The request
    /// is recorded as in flight until [`handle_response`](Self::handle_response)
    /// or [`handle_failure`](Self::handle_failure).
    pub fn build_request(
        &mut self,
        broker: i32,
        partitions: &[(Arc<str>, i32)],
        max_wait_ms: i32,
        min_bytes: i32,
        max_bytes: i32,
    ) -> Option<FetchRequest> {
        if self.in_flight.contains_key(&broker) {
            return None;
        }
        let mut wanted: Vec<(Arc<str>, i32, SessionPartition)> = Vec::new();
        for (t, p) in partitions {
            let Some(a) = self.find(t, *p) else { continue };
            let (Some(position), None, None, true) = (a.position, &a.buffered, a.in_flight, a.replica.fetchable())
            else {
                continue;
            };
            if wanted.iter().any(|(wt, wp, _)| wt == t && wp == p) {
                continue;
            }
            wanted.push((
                a.topic.clone(),
                a.partition,
                SessionPartition {
                    fetch_offset: position,
                    max_bytes: self.config.partition_max_bytes,
                    current_leader_epoch: a.replica.current_leader_epoch(),
                },
            ));
        }
        if wanted.is_empty() {
            return None;
        }
        let sessions = self.config.sessions;
        let plan = self.sessions.entry(broker).or_default().plan(&wanted, sessions);
        let mut expected = BTreeMap::new();
        for (t, p, sp) in &wanted {
            expected.insert((t.clone(), *p), sp.fetch_offset);
            if let Some(a) = self.find_mut(t, *p) {
                a.in_flight = Some(broker);
            }
        }
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (t, p, sp) in &plan.listed {
            let mut fp = FetchPartition::default();
            fp.partition = *p;
            fp.fetch_offset = sp.fetch_offset;
            fp.partition_max_bytes = sp.max_bytes;
            fp.current_leader_epoch = sp.current_leader_epoch;
            fp.log_start_offset = -1;
            match topics.iter_mut().find(|ft| ft.topic.0.as_str() == &**t) {
                Some(ft) => ft.partitions.push(fp),
                None => {
                    let mut ft = FetchTopic::default();
                    ft.topic = TopicName(StrBytes::from_string(t.to_string()));
                    ft.partitions = vec![fp];
                    topics.push(ft);
                }
            }
        }
        let mut forgotten: Vec<ForgottenTopic> = Vec::new();
        for (t, p) in &plan.forgotten {
            match forgotten.iter_mut().find(|ft| ft.topic.0.as_str() == &**t) {
                Some(ft) => ft.partitions.push(*p),
                None => {
                    let mut ft = ForgottenTopic::default();
                    ft.topic = TopicName(StrBytes::from_string(t.to_string()));
                    ft.partitions = vec![*p];
                    forgotten.push(ft);
                }
            }
        }
        let mut request = FetchRequest::default();
        request.replica_id = (-1).into();
        request.max_wait_ms = max_wait_ms;
        request.min_bytes = min_bytes;
        request.max_bytes = max_bytes;
        request.isolation_level = self.config.isolation.wire();
        request.session_id = plan.id;
        request.session_epoch = plan.epoch;
        request.topics = topics;
        request.forgotten_topics_data = forgotten;
        request.rack_id = self.rack_id.clone();
        self.in_flight.insert(broker, SentFetch { plan, expected });
        Some(request)
    }

    /// The fetch to `broker` failed without an answer (transport error,
    /// timeout, cancelled): its partitions become fetchable again and the
    /// session starts over with a full fetch.
    pub fn handle_failure(&mut self, broker: i32) {
        self.forget_preferred_replica(broker);
        if let Some(sent) = self.in_flight.remove(&broker) {
            self.clear_in_flight(broker, &sent);
        }
        if let Some(s) = self.sessions.get_mut(&broker) {
            s.reset();
        }
    }

    fn clear_in_flight(&mut self, broker: i32, sent: &SentFetch) {
        for (t, p) in sent.expected.keys() {
            if let Some(a) = self.find_mut(t, *p) {
                if a.in_flight == Some(broker) {
                    a.in_flight = None;
                }
            }
        }
    }

    /// Applies the answer to the fetch in flight to `broker`. An answer
    /// with nothing in flight is ignored.
    pub fn handle_response(&mut self, broker: i32, response: FetchResponse) -> FetchOutcome {
        let mut out = FetchOutcome {
            throttle_ms: response.throttle_time_ms.max(0),
            ..FetchOutcome::default()
        };
        let Some(sent) = self.in_flight.remove(&broker) else {
            out.ignored = 1;
            return out;
        };
        self.clear_in_flight(broker, &sent);
        let sessions = self.config.sessions;
        let code = KafkaCode(response.error_code);
        if !code.is_ok() {
            if let Some(s) = self.sessions.get_mut(&broker) {
                s.reset();
            }
            out.session_reset = true;
            if is_session_error(code) {
                // Answered by the full fetch that follows.
            } else if needs_metadata_refresh(code) {
                // Stale leadership for the whole request: every topic in it.
                for (t, _) in sent.expected.keys() {
                    if !out.refresh_metadata.contains(t) {
                        out.refresh_metadata.push(t.clone());
                    }
                }
                out.retriable_error = true;
            } else if code.is_retriable() {
                out.retriable_error = true;
            } else {
                out.errors.push(FetchError::Response { code });
            }
            return out;
        }
        let session = self.sessions.entry(broker).or_default();
        let before = session.id;
        session.accepted(&sent.plan, response.session_id, sessions);
        if !sent.plan.full && session.id != before {
            out.session_reset = true;
        }
        let mut seen: HashSet<(Arc<str>, i32)> = HashSet::new();
        for topic in response.responses {
            for data in topic.partitions {
                let key_topic = sent
                    .expected
                    .keys()
                    .find(|(t, p)| &**t == topic.topic.0.as_str() && *p == data.partition_index)
                    .map(|(t, _)| t.clone());
                let Some(t) = key_topic else {
                    out.ignored = out.ignored.saturating_add(1);
                    continue;
                };
                let p = data.partition_index;
                if !seen.insert((t.clone(), p)) {
                    out.ignored = out.ignored.saturating_add(1);
                    continue;
                }
                let (Some(&fetch_offset), Some(i)) = (sent.expected.get(&(t.clone(), p)), self.index(&t, p)) else {
                    out.ignored = out.ignored.saturating_add(1);
                    continue;
                };
                let read_committed = self.config.isolation == IsolationLevel::ReadCommitted;
                let auto_reset = self.config.auto_reset;
                let (now_ms, preferred_max_age) = (self.now_ms, self.config.preferred_replica_max_age_ms);
                let Some(a) = self.assigned.get_mut(i) else {
                    out.ignored = out.ignored.saturating_add(1);
                    continue;
                };
                // Stale (moved, already holding data), or waiting for its
                // position to be checked against a new leader (KIP-320).
                if a.position != Some(fetch_offset) || a.buffered.is_some() || !a.replica.fetchable() {
                    out.ignored = out.ignored.saturating_add(1);
                    continue;
                }
                let code = KafkaCode(data.error_code);
                // KIP-392: an error clears the preferred replica (the next
                // fetch goes to the leader); from a broker that is not the
                // leader, an out-of-range offset is the follower lagging,
                // not ours to reset (Java's fetcher).
                let from_follower = a.replica.is_follower(broker);
                if !code.is_ok() {
                    a.replica.clear_preferred();
                }
                if code == KafkaCode::OFFSET_OUT_OF_RANGE && from_follower {
                    out.retriable_error = true;
                    continue;
                }
                if code == KafkaCode::OFFSET_OUT_OF_RANGE {
                    if auto_reset {
                        a.position = None;
                        out.reset_offsets.push((a.topic.clone(), a.partition));
                    } else {
                        out.errors.push(FetchError::OffsetOutOfRange {
                            topic: a.topic.clone(),
                            partition: a.partition,
                            offset: fetch_offset,
                        });
                    }
                    continue;
                }
                if !code.is_ok() {
                    partition_error(
                        code,
                        &a.topic,
                        a.partition,
                        &mut out.refresh_metadata,
                        &mut out.retriable_error,
                        &mut out.errors,
                    );
                    continue;
                }
                let preferred = data.preferred_read_replica.0;
                if preferred >= 0 && preferred != broker {
                    a.replica
                        .set_preferred(preferred, now_ms.saturating_add(preferred_max_age));
                }
                a.high_watermark = data.high_watermark;
                a.last_stable_offset = data.last_stable_offset;
                a.log_start_offset = data.log_start_offset;
                let records = data.records.unwrap_or_default();
                if records.is_empty() {
                    continue;
                }
                let upper = if read_committed && data.last_stable_offset >= 0 {
                    data.last_stable_offset
                } else {
                    data.high_watermark
                };
                let mut aborted: Vec<(i64, i64)> = Vec::new();
                if read_committed {
                    aborted = data
                        .aborted_transactions
                        .unwrap_or_default()
                        .iter()
                        .map(|t| (t.first_offset, t.producer_id.0))
                        .collect();
                    aborted.sort_unstable();
                }
                if a.fruitless_at == Some(fetch_offset) {
                    out.stalled = out.stalled.saturating_add(1);
                }
                a.buffered = Some(Buffered {
                    fetch_offset,
                    fetched_bytes: records.len(),
                    rest: records,
                    current: None,
                    upper,
                    aborted: aborted.into(),
                    aborted_producers: HashSet::new(),
                    decoded_any: false,
                    delivered_any: false,
                    error: None,
                });
                self.ready.push_back(i);
                out.buffered = out.buffered.saturating_add(1);
            }
        }
        out
    }

    /// Hands over buffered records: at most `max_records`, and at most
    /// `max_bytes` of keys, values and headers (a first record larger than
    /// that still comes, alone). Positions move past what is handed over.
    /// An error is returned only when no record precedes it; otherwise it
    /// comes back from the next call.
    pub fn take_records(&mut self, max_records: usize, max_bytes: usize) -> Result<Vec<ConsumerRecord>, FetchError> {
        let max_records = max_records.max(1);
        let mut out: Vec<ConsumerRecord> = Vec::with_capacity(self.last_take.min(max_records));
        let mut bytes = 0usize;
        'partitions: while out.len() < max_records {
            let Some(&i) = self.ready.front() else { break };
            if i >= self.assigned.len() {
                // Not a partition (cannot happen: `ready` is rebuilt with
                // every assignment); dropped rather than trusted.
                self.ready.pop_front();
                continue;
            }
            loop {
                let pending_error = self
                    .assigned
                    .get_mut(i)
                    .and_then(|a| a.buffered.as_mut())
                    .and_then(|b| b.error.take());
                let step = match pending_error {
                    Some(e) => Err(e),
                    None => match self.drain_current(i, &mut out, &mut bytes, max_records, max_bytes) {
                        Ok(Drained::BoundReached) => break 'partitions,
                        Ok(Drained::BatchDone) => Ok(Step::Moved),
                        Ok(Drained::NoBatch) => self.step(i),
                        Err(e) => Err(e),
                    },
                };
                match step {
                    Ok(Step::Moved) => {}
                    Ok(Step::Exhausted) => {
                        if let Some(a) = self.assigned.get_mut(i) {
                            if let Some(b) = a.buffered.take() {
                                a.fruitless_at =
                                    (!b.delivered_any && a.position == Some(b.fetch_offset)).then_some(b.fetch_offset);
                            }
                        }
                        self.ready.pop_front();
                        continue 'partitions;
                    }
                    Err(e) => {
                        let a = self.assigned.get_mut(i);
                        if out.is_empty() {
                            if let Some(a) = a {
                                a.buffered = None;
                            }
                            self.ready.pop_front();
                            return Err(e);
                        }
                        if let Some(b) = a.and_then(|a| a.buffered.as_mut()) {
                            b.error = Some(e);
                        }
                        break 'partitions;
                    }
                }
            }
        }
        if !out.is_empty() {
            self.last_take = out.len();
        }
        Ok(out)
    }

    /// Hands over records of partition `i`'s current (inflated) batch until
    /// a bound is reached or the batch ends. Positions and the cursor move
    /// only past records pushed to `out`.
    fn drain_current(
        &mut self,
        i: usize,
        out: &mut Vec<ConsumerRecord>,
        bytes: &mut usize,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<Drained, FetchError> {
        let Assigned {
            topic,
            partition,
            position,
            buffered,
            replica,
            ..
        } = match self.assigned.get_mut(i) {
            Some(a) => a,
            None => return Ok(Drained::NoBatch),
        };
        let Some(b) = buffered.as_mut() else {
            return Ok(Drained::NoBatch);
        };
        let Some(pos) = *position else {
            return Ok(Drained::NoBatch);
        };
        let upper = b.upper;
        let Some(current) = b.current.as_mut() else {
            return Ok(Drained::NoBatch);
        };
        let h = current.batch.header;
        let start = pos;
        let mut pos = pos;
        let mut delivered = false;
        let result = 'windows: loop {
            let Current { batch, cursor, stream } = &mut *current;
            let mut it = batch.records_at(*cursor);
            let window = loop {
                if out.len() >= max_records {
                    *cursor = it.cursor();
                    break Some(Ok(Drained::BoundReached));
                }
                let before = it.cursor();
                match it.next() {
                    None => break None,
                    Some(Err(e)) => {
                        break Some(Err(FetchError::Corrupt {
                            topic: topic.clone(),
                            partition: *partition,
                            offset: pos,
                            source: Arc::new(e),
                        }))
                    }
                    Some(Ok(r)) => {
                        if r.offset < pos {
                            // Below the position, or going backwards: never
                            // handed over.
                            continue;
                        }
                        if r.offset >= upper {
                            break Some(Ok(Drained::BatchDone));
                        }
                        let record = batch.to_owned_record(&r);
                        let size = record_size(&record);
                        if !out.is_empty() && bytes.saturating_add(size) > max_bytes {
                            *cursor = before;
                            break Some(Ok(Drained::BoundReached));
                        }
                        *bytes = bytes.saturating_add(size);
                        pos = r.offset.saturating_add(1);
                        delivered = true;
                        out.push(ConsumerRecord {
                            topic: topic.clone(),
                            partition: *partition,
                            record,
                            batch: h,
                        });
                        if *bytes >= max_bytes {
                            *cursor = it.cursor();
                            break Some(Ok(Drained::BoundReached));
                        }
                    }
                }
            };
            if let Some(r) = window {
                break 'windows r;
            }
            // The window is done: the next one of a streamed batch, if any.
            let Some(s) = stream.as_mut() else {
                break 'windows Ok(Drained::BatchDone);
            };
            match s.next_window() {
                Ok(Some(next)) => {
                    *cursor = RecordCursor::start(&next);
                    *batch = next;
                }
                Ok(None) => break 'windows Ok(Drained::BatchDone),
                Err(e) => {
                    break 'windows Err(FetchError::Corrupt {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: pos,
                        source: Arc::new(e),
                    })
                }
            }
        };
        if let Ok(Drained::BatchDone) = result {
            // Batch done: move past it (never past the bound); a batch cut
            // at the bound ends the answer.
            let cut = pos < h.next_offset() && h.next_offset() > upper;
            b.current = None;
            if cut {
                b.rest = Bytes::new();
            } else if h.next_offset() > pos {
                pos = h.next_offset();
            }
        }
        *position = Some(pos);
        if pos > start {
            replica.moved_past(&h);
        }
        if delivered {
            b.delivered_any = true;
        }
        result
    }

    /// One step through partition `i`'s buffered data when no batch is
    /// current: the next batch is skipped (below the position, aborted,
    /// control, past the bound) or inflated and made current.
    fn step(&mut self, i: usize) -> Result<Step, FetchError> {
        let read_committed = self.config.isolation == IsolationLevel::ReadCommitted;
        let opts = DecodeOptions {
            verify_crc: self.config.check_crcs,
            max_decompressed_size: self.config.max_batch_inflate,
            ..DecodeOptions::default()
        };
        let partition_max_bytes = self.config.partition_max_bytes;
        let Some(a) = self.assigned.get_mut(i) else {
            return Ok(Step::Exhausted);
        };
        let Some(position) = a.position else {
            return Ok(Step::Exhausted);
        };
        let Some(b) = a.buffered.as_mut() else {
            return Ok(Step::Exhausted);
        };
        let corrupt = |offset: i64, e: crate::Error| FetchError::Corrupt {
            topic: a.topic.clone(),
            partition: a.partition,
            offset,
            source: Arc::new(e),
        };
        // The next whole batch, header only.
        let (h, total) = match RecordBatch::peek(&b.rest, &opts) {
            Ok(Some(x)) => x,
            Ok(None) => {
                if !b.decoded_any && b.fetched_bytes > 0 {
                    return Err(FetchError::PartialBatch {
                        topic: a.topic.clone(),
                        partition: a.partition,
                        size: b.fetched_bytes,
                        limit: partition_max_bytes.max(0) as usize,
                    });
                }
                return Ok(Step::Exhausted);
            }
            Err(e) => return Err(corrupt(position, e)),
        };
        b.decoded_any = true;
        let bytes = b.rest.split_to(total);
        if h.next_offset() <= position {
            return Ok(Step::Moved);
        }
        if h.base_offset >= b.upper || h.base_offset < 0 {
            b.rest = Bytes::new();
            return Ok(Step::Moved);
        }
        let skip_whole = |b: &mut Buffered, a_pos: &mut Option<i64>, replica: &mut leader::ReplicaState| {
            let next = h.next_offset();
            if next <= b.upper {
                if next > position {
                    *a_pos = Some(next);
                    replica.moved_past(&h);
                }
            } else {
                // Would move past the bound: stop here, ask again later.
                b.rest = Bytes::new();
            }
        };
        if read_committed && h.producer_id >= 0 {
            while let Some(&(first_offset, pid)) = b.aborted.front() {
                if first_offset > h.last_offset() {
                    break;
                }
                if b.aborted_producers.len() < 4096 || b.aborted_producers.contains(&pid) {
                    b.aborted_producers.insert(pid);
                }
                b.aborted.pop_front();
            }
            if h.is_control() {
                let batch = RecordBatch::inflate(&bytes, h, &opts).map_err(|e| corrupt(h.base_offset, e))?;
                let control = batch.control_record().map_err(|e| corrupt(h.base_offset, e))?;
                if matches!(control.map(|c| c.kind), Some(ControlKind::Abort)) {
                    b.aborted_producers.remove(&h.producer_id);
                }
                skip_whole(b, &mut a.position, &mut a.replica);
                return Ok(Step::Moved);
            }
            if h.is_transactional() && b.aborted_producers.contains(&h.producer_id) {
                skip_whole(b, &mut a.position, &mut a.replica);
                return Ok(Step::Moved);
            }
        }
        if h.is_control() {
            skip_whole(b, &mut a.position, &mut a.replica);
            return Ok(Step::Moved);
        }
        let at = h.base_offset.max(position);
        let compressed = h.compression().map_or(true, |c| c != Compression::None);
        let current = if compressed {
            let chunk = INFLATE_CHUNK.min(self.config.max_batch_inflate);
            let mut stream =
                BatchStream::new(&bytes, h, chunk, self.config.max_batch_inflate).map_err(|e| corrupt(at, e))?;
            let Some(batch) = stream.next_window().map_err(|e| corrupt(at, e))? else {
                // No records: move past the batch.
                skip_whole(b, &mut a.position, &mut a.replica);
                return Ok(Step::Moved);
            };
            Current {
                cursor: RecordCursor::start(&batch),
                batch,
                stream: Some(Box::new(stream)),
            }
        } else {
            let batch = RecordBatch::inflate(&bytes, h, &opts).map_err(|e| corrupt(at, e))?;
            Current {
                cursor: RecordCursor::start(&batch),
                batch,
                stream: None,
            }
        };
        b.current = Some(current);
        Ok(Step::Moved)
    }
}
