//! The consumer: manual partition assignment, seeking (ListOffsets), and a
//! bounded, pipelined [`poll`](Consumer::poll) over the wire crate's fetch
//! state machine ([`clink_kafka_wire::fetcher`]).
//!
//! The state machine decides everything a Fetch response means — which
//! records are handed over, where positions go, what the next request asks
//! for (full or incremental, [KIP-227] fetch sessions per broker), whether
//! to refresh metadata, reset an offset, back off or honour a throttle
//! ([KIP-219]). This file only moves bytes and time: it sends the requests
//! the state machine builds (at most one in flight per broker, each in its
//! own task so it keeps going while the caller works through the previous
//! answer), feeds the answers back, and sleeps when told to.
//!
//! Memory is bounded by configuration: a response's record bytes stay as
//! they came (compressed) until their records are handed over, a batch is
//! inflated only then, chunk by chunk (each record capped by
//! [`ConsumerConfig::max_batch_inflate`]),
//! and one poll hands over at most [`ConsumerConfig::max_poll_records`]
//! records and [`ConsumerConfig::max_poll_bytes`] bytes. A partition whose
//! data has not all been handed over is not fetched again.
//!
//! Records are the wire crate's zero-copy [`Record`](clink_kafka_wire::record::Record)s: key, value and header
//! bytes are slices of the fetched frame (or of one inflated window of a
//! compressed batch). No consumer group yet: positions live in the consumer.
//!
//! Isolation ([KIP-98]): under `read_committed` the broker returns data only
//! up to the last stable offset and lists the aborted transactions in the
//! range; the state machine applies that list per producer id exactly as the
//! Java client's `CompletedFetch` does, never delivers past the last stable
//! offset, and never delivers control records at either level.
//!
//! Fetch is spoken up to v12: v13 and later name topics by id ([KIP-516]).
//!
//! Replicas ([KIP-392], [KIP-320]; the logic is the state machine's, see
//! `clink_kafka_wire::fetcher`'s `leader` module): with
//! [`ConsumerConfig::client_rack`] set, a partition is fetched from the
//! replica its leader prefers for that rack, and from the leader again when
//! that replica fails or goes away. Every fetch names the leader epoch from
//! the metadata; after a leader change a position is checked with
//! OffsetForLeaderEpoch before the partition is fetched again, and a log
//! truncated below it is reported ([`Consumer::log_truncations`], a warning)
//! and the position moved back to where the logs diverge, or with no
//! `auto_offset_reset`, returned as [`Error::LogTruncation`].
//!
//! [KIP-98]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging
//! [KIP-219]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-219+-+Improve+quota+communication
//! [KIP-227]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-227%3A+Introduce+Incremental+FetchRequests+to+Increase+Partition+Scalability
//! [KIP-516]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-516%3A+Topic+Identifiers
//! [KIP-392]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-392%3A+Allow+consumers+to+fetch+from+closest+replica
//! [KIP-320]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-320%3A+Allow+fetchers+to+detect+and+handle+log+truncation

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

pub use clink_kafka_wire::fetcher::LogTruncation;
use clink_kafka_wire::fetcher::{FetchError, FetchOutcome, Fetcher, FetcherConfig};
use clink_kafka_wire::kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use clink_kafka_wire::kafka_protocol::messages::{
    FetchRequest, FetchResponse, ListOffsetsRequest, OffsetForLeaderEpochRequest, TopicName,
};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;

pub use clink_kafka_wire::fetcher::{ConsumerRecord, IsolationLevel};

use super::backoff::Backoff;
use super::cluster::{needs_metadata_refresh, Cluster, ConnectionRole, Metadata};
use super::connection::BrokerConnection;
use super::topic_partition::TopicPartition;
use crate::error::{BrokerRef, Error, Result};

/// Highest Fetch version used: v13 needs topic ids.
const FETCH_MAX_VERSION: i16 = 12;

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
#[non_exhaustive]
pub struct ConsumerConfig {
    /// `isolation.level` (default read_uncommitted, as Java's).
    pub isolation: IsolationLevel,
    /// `fetch.max.wait.ms`.
    pub max_wait: Duration,
    /// `fetch.min.bytes` (at most `i32::MAX`, the protocol's field).
    pub min_bytes: usize,
    /// `fetch.max.bytes` (1 to `i32::MAX`).
    pub max_bytes: usize,
    /// `max.partition.fetch.bytes` (1 to `i32::MAX`).
    pub partition_max_bytes: usize,
    /// `check.crcs`.
    pub check_crcs: bool,
    /// Where an unpositioned or out-of-range partition starts
    /// (`auto.offset.reset`); `None` makes an out-of-range offset an error.
    pub auto_offset_reset: Option<Offset>,
    /// `max.poll.records`: the most records one [`Consumer::poll`] hands
    /// over (default 500, as Java's). At least 1.
    pub max_poll_records: usize,
    /// The most bytes of keys, values and headers one [`Consumer::poll`]
    /// hands over (default 8 MiB). A record larger than this still arrives,
    /// alone. At least 1.
    pub max_poll_bytes: usize,
    /// The most bytes one **record** of a compressed batch may inflate to
    /// (default 64 MiB); a larger one is a corrupt-record error naming this
    /// bound. Compressed batches are inflated chunk by chunk when their
    /// records are handed over (windows of about 256 KiB of whole records,
    /// a larger record in a window of its own), so a batch may inflate to
    /// any size. Also the largest single decoding step: a raw (non-xerial)
    /// snappy batch must inflate within it whole, an lz4 block over 64 KiB
    /// must fit in it, a zstd window is clamped to it + 128 KiB. The
    /// consumer's memory is about: the compressed data of one answer per
    /// broker (`fetch.max.bytes`, two while the next fetch is pipelined)
    /// plus, per partition being handed over, one window, its largest
    /// record and the codec's state, plus what the caller still holds of
    /// earlier polls.
    pub max_batch_inflate: usize,
    /// Use fetch sessions (KIP-227): after the first (full) fetch, each
    /// request names only what changed. Default on.
    pub fetch_sessions: bool,
    /// The longest a broker's `throttle_time_ms` (KIP-219) is honoured
    /// before the next fetch to it (default 30 s).
    pub max_throttle: Duration,
    /// `client.rack` (KIP-392): sent in every fetch, so a broker with a
    /// rack-aware replica selector names the replica in this rack to fetch
    /// from. `None` (the default): always the leader.
    pub client_rack: Option<String>,
    /// How long a preferred read replica is followed before the leader is
    /// asked again (Java: `metadata.max.age.ms`; default 5 minutes).
    pub preferred_replica_max_age: Duration,
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
            max_poll_records: 500,
            max_poll_bytes: 8 * 1024 * 1024,
            max_batch_inflate: 64 * 1024 * 1024,
            fetch_sessions: true,
            max_throttle: Duration::from_secs(30),
            client_rack: None,
            preferred_replica_max_age: Duration::from_secs(5 * 60),
        }
    }
}

/// Builder-style setters: each returns the config with one setting
/// changed (the fields stay public; the config is `#[non_exhaustive]`, so
/// build it from [`Default`] or its constructor, then these).
impl ConsumerConfig {
    /// Sets `isolation` (see the field).
    #[must_use]
    pub fn with_isolation(mut self, value: IsolationLevel) -> Self {
        self.isolation = value;
        self
    }

    /// Sets `max_wait` (see the field).
    #[must_use]
    pub fn with_max_wait(mut self, value: Duration) -> Self {
        self.max_wait = value;
        self
    }

    /// Sets `min_bytes`: bytes (see the field).
    #[must_use]
    pub fn with_min_bytes(mut self, value: usize) -> Self {
        self.min_bytes = value;
        self
    }

    /// Sets `max_bytes`: bytes (see the field).
    #[must_use]
    pub fn with_max_bytes(mut self, value: usize) -> Self {
        self.max_bytes = value;
        self
    }

    /// Sets `partition_max_bytes`: bytes (see the field).
    #[must_use]
    pub fn with_partition_max_bytes(mut self, value: usize) -> Self {
        self.partition_max_bytes = value;
        self
    }

    /// Sets `check_crcs` (see the field).
    #[must_use]
    pub fn with_check_crcs(mut self, value: bool) -> Self {
        self.check_crcs = value;
        self
    }

    /// Sets `auto_offset_reset` (see the field).
    #[must_use]
    pub fn with_auto_offset_reset(mut self, value: Option<Offset>) -> Self {
        self.auto_offset_reset = value;
        self
    }

    /// Sets `max_poll_records` (see the field).
    #[must_use]
    pub fn with_max_poll_records(mut self, value: usize) -> Self {
        self.max_poll_records = value;
        self
    }

    /// Sets `max_poll_bytes`: bytes (see the field).
    #[must_use]
    pub fn with_max_poll_bytes(mut self, value: usize) -> Self {
        self.max_poll_bytes = value;
        self
    }

    /// Sets `max_batch_inflate`: bytes (see the field).
    #[must_use]
    pub fn with_max_batch_inflate(mut self, value: usize) -> Self {
        self.max_batch_inflate = value;
        self
    }

    /// Sets `fetch_sessions` (see the field).
    #[must_use]
    pub fn with_fetch_sessions(mut self, value: bool) -> Self {
        self.fetch_sessions = value;
        self
    }

    /// Sets `max_throttle` (see the field).
    #[must_use]
    pub fn with_max_throttle(mut self, value: Duration) -> Self {
        self.max_throttle = value;
        self
    }

    /// Sets `client_rack` (see the field).
    #[must_use]
    pub fn with_client_rack(mut self, value: impl Into<String>) -> Self {
        self.client_rack = Some(value.into());
        self
    }

    /// Sets `preferred_replica_max_age` (see the field).
    #[must_use]
    pub fn with_preferred_replica_max_age(mut self, value: Duration) -> Self {
        self.preferred_replica_max_age = value;
        self
    }
}

impl ConsumerConfig {
    fn fetcher_config(&self) -> FetcherConfig {
        FetcherConfig {
            isolation: self.isolation,
            check_crcs: self.check_crcs,
            partition_max_bytes: wire_bytes(self.partition_max_bytes),
            max_batch_inflate: self.max_batch_inflate,
            auto_reset: self.auto_offset_reset.is_some(),
            sessions: self.fetch_sessions,
            preferred_replica_max_age_ms: self.preferred_replica_max_age.as_millis().min(u64::MAX as u128) as u64,
        }
    }

    fn validate(&self) -> Result<()> {
        let at_least_one = |option: &'static str, v: usize| {
            if v == 0 {
                Err(Error::Config {
                    option,
                    message: "must be at least 1, not 0".to_owned(),
                })
            } else {
                Ok(())
            }
        };
        at_least_one("max_poll_records", self.max_poll_records)?;
        at_least_one("max_poll_bytes", self.max_poll_bytes)?;
        at_least_one("max_batch_inflate", self.max_batch_inflate)?;
        if self.client_rack.as_deref().is_some_and(|r| r.trim().is_empty()) {
            return Err(Error::Config {
                option: "client.rack",
                message: "must name a rack (leave it unset to fetch from leaders)".to_owned(),
            });
        }
        for (option, v, min) in [
            ("fetch.min.bytes", self.min_bytes, 0),
            ("fetch.max.bytes", self.max_bytes, 1),
            ("max.partition.fetch.bytes", self.partition_max_bytes, 1),
        ] {
            if v < min || v > i32::MAX as usize {
                return Err(Error::Config {
                    option,
                    message: format!("{v} is not in {min}..={}", i32::MAX),
                });
            }
        }
        Ok(())
    }
}

/// A byte size as the protocol's `int32` field (validated to fit; clamped
/// for safety).
fn wire_bytes(v: usize) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// When the next fetch to one broker may go.
#[derive(Debug)]
struct BrokerPace {
    not_before: Option<Instant>,
    /// The pause after the last answer whose records were all at or past
    /// its own bound (doubling while that lasts; `None` after a usable one).
    stalled_wait: Option<Duration>,
    /// In a mutex only so that the consumer is `Sync` (its jitter source
    /// is `Send` but not `Sync`); never contended.
    backoff: std::sync::Mutex<Backoff>,
}

impl BrokerPace {
    fn next_delay(&self) -> Duration {
        self.backoff
            .lock()
            .map(|mut b| b.next_delay())
            .unwrap_or(Duration::from_millis(100))
    }
}

/// What a background connect returns.
type ConnectAnswer = (i32, Result<BrokerConnection>);

/// What a fetch task returns.
/// (broker, its address, when sent, the wait asked for, the answer, the
/// answer's record bytes, counted in [`BufferedBytes`] until handled).
type FetchAnswer = (i32, BrokerRef, Instant, Duration, Result<FetchResponse>, usize);

/// What a consumer holds of fetched data not yet handed over (see
/// [`Consumer::buffered_bytes`]): a handle that can be read while the
/// consumer is borrowed by a stream or a poll in progress.
#[derive(Clone, Debug, Default)]
pub struct BufferedBytes(Arc<BufferedInner>);

#[derive(Debug, Default)]
struct BufferedInner {
    /// Record bytes of the answers the state machine holds.
    fetcher: AtomicUsize,
    /// Record bytes of answers that arrived and wait to be handled.
    arrived: AtomicUsize,
}

impl BufferedBytes {
    /// The record bytes (as fetched, compressed) the consumer holds now:
    /// answers whose records are not all handed over, and answers that
    /// arrived and wait for the next poll.
    pub fn get(&self) -> usize {
        self.0
            .fetcher
            .load(Ordering::Relaxed)
            .saturating_add(self.0.arrived.load(Ordering::Relaxed))
    }
}

/// The record bytes of a fetch answer.
fn answer_bytes(response: &FetchResponse) -> usize {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|p| p.records.as_ref().map(|r| r.len()))
        .fold(0usize, usize::saturating_add)
}

/// What the fetches to one broker brought (see [`Consumer::fetch_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FetchCounts {
    /// Fetch answers received.
    pub answers: u64,
    /// Partitions those answers brought records for.
    pub partitions_with_records: u64,
}

/// A partition's watermarks from the latest fetch answer (see
/// [`Consumer::watermarks`]); `-1` each before an answer carried them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watermarks {
    /// The high watermark: the offset after the last replicated record.
    pub high_watermark: i64,
    /// The last stable offset: the first offset of a still-open
    /// transaction (equals the high watermark when none is open);
    /// `read_committed` consumers read up to it.
    pub last_stable_offset: i64,
}

/// The state of the incremental fetch session with one broker (KIP-227;
/// see [`Consumer::fetch_session`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FetchSessionState {
    /// The session id the broker gave (0 when there is no session).
    pub id: i32,
    /// The epoch the next Fetch request will carry.
    pub epoch: i32,
}

/// The answer to [`Consumer::offset_for_timestamp`]: the first offset whose
/// timestamp is at or after the one asked for, and that record's timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OffsetAndTimestamp {
    /// The offset.
    pub offset: i64,
    /// The record's timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

/// The most log truncations [`Consumer::log_truncations`] keeps.
const TRUNCATIONS_KEPT: usize = 64;

/// A consumer with manual assignment.
pub struct Consumer {
    cluster: Cluster,
    config: ConsumerConfig,
    /// Assignment, positions, buffered (undelivered) data, sessions: all of
    /// it here in `self`, so a dropped `poll` loses nothing.
    fetcher: Fetcher,
    conns: HashMap<i32, BrokerConnection>,
    /// One fetch per broker at most; each keeps going between polls.
    in_flight: tokio::task::JoinSet<FetchAnswer>,
    /// Connections being opened, one task per broker (the brokers in
    /// `connecting_to`): a broker that does not answer never holds up the
    /// poll (see `start_connects`).
    connecting: tokio::task::JoinSet<ConnectAnswer>,
    connecting_to: HashSet<i32>,
    pace: HashMap<i32, BrokerPace>,
    /// Topics whose metadata an answer said is stale.
    refresh: Vec<Arc<str>>,
    /// An error that arrived while records were being handed over, or from
    /// a fetch between polls; the next poll returns it.
    pending_error: Option<Error>,
    /// Per broker id.
    fetch_counts: BTreeMap<i32, FetchCounts>,
    /// The latest log truncations found (at most `TRUNCATIONS_KEPT`).
    truncations: Vec<LogTruncation>,
    /// The origin of the clock given to the fetcher.
    clock: Instant,
    /// Records handed over and per-partition lag (`crate::metrics`).
    metrics: super::metrics::ConsumerMetrics,
    /// What the consumer holds of fetched data (see `buffered_bytes`).
    buffered: BufferedBytes,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("cluster", &self.cluster)
            .field("config", &self.config)
            .field("fetcher", &self.fetcher)
            .field("in_flight", &self.in_flight.len())
            .field("connecting", &self.connecting_to)
            .finish()
    }
}

impl Consumer {
    /// A consumer with nothing assigned.
    pub fn new(cluster: Cluster, config: ConsumerConfig) -> Self {
        let mut fetcher = Fetcher::new(config.fetcher_config());
        fetcher.set_client_rack(config.client_rack.as_deref());
        Consumer {
            metrics: super::metrics::ConsumerMetrics::new(cluster.config()),
            fetcher,
            cluster,
            config,
            conns: HashMap::new(),
            in_flight: tokio::task::JoinSet::new(),
            connecting: tokio::task::JoinSet::new(),
            connecting_to: HashSet::new(),
            pace: HashMap::new(),
            refresh: Vec::new(),
            pending_error: None,
            fetch_counts: BTreeMap::new(),
            truncations: Vec::new(),
            clock: Instant::now(),
            buffered: BufferedBytes::default(),
        }
    }

    /// The record bytes (as fetched, compressed) this consumer holds and
    /// has not handed over: the answers being handed over, and answers
    /// that arrived meanwhile. While the caller does not poll, this grows
    /// by at most the fetches already sent (one per broker, each at most
    /// [`ConsumerConfig::max_bytes`], or one record batch when a single
    /// batch is larger): a partition whose data is not all handed over is
    /// never fetched again, and nothing is sent between polls.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.get()
    }

    /// A handle reading [`buffered_bytes`](Self::buffered_bytes) that
    /// stays usable while the consumer is borrowed (by a
    /// [`stream`](Self::stream), say).
    pub fn buffered_bytes_handle(&self) -> BufferedBytes {
        self.buffered.clone()
    }

    fn note_buffered(&self) {
        self.buffered
            .0
            .fetcher
            .store(self.fetcher.buffered_bytes(), Ordering::Relaxed);
    }

    /// Per broker id: the fetch answers it sent and how many partitions'
    /// records they brought. With [`ConsumerConfig::client_rack`] set this
    /// shows which replicas served the data.
    pub fn fetch_counts(&self) -> BTreeMap<i32, FetchCounts> {
        self.fetch_counts.clone()
    }

    /// The preferred read replica `topic[partition]` is fetched from now
    /// (KIP-392), if any.
    pub fn preferred_replica(&self, topic: &str, partition: i32) -> Option<i32> {
        self.fetcher.preferred_replica(topic, partition)
    }

    /// The latest log truncations found after leader changes (KIP-320),
    /// oldest first, at most 64. With `auto_offset_reset` set each moved the
    /// position back to where the logs diverge; without, each was also
    /// returned by `poll` as [`Error::LogTruncation`].
    pub fn log_truncations(&self) -> &[LogTruncation] {
        &self.truncations
    }

    fn tick(&mut self) {
        let now = self.clock.elapsed().as_millis().min(u64::MAX as u128) as u64;
        self.fetcher.set_now(now);
    }

    /// Tells the state machine each assigned partition's leader and epoch
    /// from `metadata` (a change may start a position check), and returns
    /// the broker to fetch each fetchable partition from: its preferred
    /// read replica while one is known, else its leader. A leader the
    /// metadata lists no address for counts as none (refresh, retry).
    fn route(&mut self, metadata: &Metadata) -> Vec<(i32, Arc<str>, i32)> {
        self.tick();
        let leader_of = |topic: &str, partition: i32| {
            metadata
                .topics
                .get(topic)
                .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
                .filter(|p| p.leader >= 0 && metadata.brokers.contains_key(&p.leader))
                .map(|p| (p.leader, p.leader_epoch))
        };
        for TopicPartition { topic, partition } in self.assignment() {
            if let Some((leader, epoch)) = leader_of(&topic, partition) {
                self.fetcher.update_leader(&topic, partition, leader, epoch);
            }
        }
        let mut out = Vec::new();
        for (topic, partition) in self.fetcher.fetchable() {
            if let Some((leader, _)) = leader_of(&topic, partition) {
                let target = self
                    .fetcher
                    .fetch_target(&topic, partition, leader, |b| metadata.brokers.contains_key(&b));
                out.push((target, topic, partition));
            }
        }
        out
    }

    /// Replaces the assignment. Partitions kept from the old assignment keep
    /// their positions and undelivered records; new ones start unpositioned
    /// (see [`ConsumerConfig::auto_offset_reset`]).
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        let list: Vec<(&str, i32)> = partitions.iter().map(|tp| (tp.topic.as_str(), tp.partition)).collect();
        self.fetcher.assign(&list);
        self.note_buffered();
    }

    /// Assigns every partition of `topic`.
    ///
    /// Cancel safety: this method is cancel safe; the assignment changes
    /// only once the metadata has arrived.
    pub async fn assign_topic(&mut self, topic: &str) -> Result<()> {
        let t = self.cluster.topic(topic).await?;
        let parts: Vec<TopicPartition> = t
            .partitions
            .iter()
            .map(|p| TopicPartition::new(topic, p.partition))
            .collect();
        self.assign(&parts);
        Ok(())
    }

    /// The partitions assigned.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.fetcher
            .assignment()
            .map(|(t, p)| TopicPartition::new(&**t, p))
            .collect()
    }

    fn check_assigned(&self, topic: &str, partition: i32) -> Result<()> {
        if self.fetcher.is_assigned(topic, partition) {
            Ok(())
        } else {
            Err(Error::NotAssigned {
                topic: topic.to_owned(),
                partition,
            })
        }
    }

    /// Moves `topic[partition]` to `offset`; returns the resolved position.
    /// Undelivered records of the partition are dropped.
    ///
    /// Cancel safety: this method is cancel safe in that a dropped call
    /// changes nothing (the position moves only after the ListOffsets
    /// answer arrived); but the seek itself is then lost, so a caller that
    /// drops it must seek again before relying on the position.
    pub async fn seek(&mut self, topic: &str, partition: i32, offset: Offset) -> Result<i64> {
        self.check_assigned(topic, partition)?;
        let position = match offset {
            Offset::At(o) => o,
            other => self.list_offset(topic, partition, other).await?,
        };
        self.check_assigned(topic, partition)?;
        self.fetcher.seek(topic, partition, Some(position));
        self.note_buffered();
        Ok(position)
    }

    /// Moves every assigned partition to `offset`.
    ///
    /// Cancel safety: not cancel safe: a dropped call may have moved some
    /// partitions and not others.
    pub async fn seek_all(&mut self, offset: Offset) -> Result<()> {
        for tp in self.assignment() {
            self.seek(&tp.topic, tp.partition, offset).await?;
        }
        Ok(())
    }

    /// The next offset `poll` will hand over, once positioned.
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.fetcher.position(topic, partition)
    }

    /// The high watermark and last stable offset from the latest fetch.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Option<Watermarks> {
        self.fetcher
            .watermarks(topic, partition)
            .map(|(high_watermark, last_stable_offset)| Watermarks {
                high_watermark,
                last_stable_offset,
            })
    }

    /// The fetch session with the broker `node_id`: its id (0 when none)
    /// and the epoch of the next request (KIP-227).
    pub fn fetch_session(&self, node_id: i32) -> Option<FetchSessionState> {
        self.fetcher.session(node_id).map(|s| {
            let (id, epoch) = s.id_and_epoch();
            FetchSessionState { id, epoch }
        })
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
                    Some(found) => Ok(found.offset),
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
    ) -> Result<Option<OffsetAndTimestamp>> {
        if timestamp_ms < 0 {
            return Err(Error::Config {
                option: "timestamp",
                message: format!("must be milliseconds since the epoch (>= 0), not {timestamp_ms}"),
            });
        }
        let (offset, ts) = self.list_offsets_at(topic, partition, timestamp_ms).await?;
        Ok((offset >= 0).then_some(OffsetAndTimestamp {
            offset,
            timestamp_ms: ts,
        }))
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

    /// Hands over the records that arrived: many per call, in offset order
    /// per partition, at most [`ConsumerConfig::max_poll_records`] and
    /// [`ConsumerConfig::max_poll_bytes`]. `timeout` is a deadline for the
    /// whole call: it returns an empty vector when nothing came by then.
    /// Before returning records it sends the next fetch to every broker
    /// whose partitions are drained, so the next answer is on its way while
    /// the caller works. A retriable error is retried until `timeout`, then
    /// returned.
    ///
    /// `poll(Duration::ZERO)` does not wait for the network: it takes in
    /// the fetch answers that have arrived, hands over what is buffered,
    /// starts the fetches that are due (they ask the broker to wait up to
    /// [`ConsumerConfig::max_wait`] and keep going after the call returns;
    /// the next call hands over what they bring) and returns, yielding to
    /// the runtime once when it has nothing, so a loop of zero polls lets
    /// the fetches progress. Only a call that must first position a
    /// partition (a ListOffsets), check a position after a leader change or
    /// refresh stale metadata awaits that answer.
    ///
    /// Cancel safety: this method is cancel safe. Fetched records not yet
    /// handed over live in the consumer, and positions move only when
    /// records are returned; if the future is dropped before it completes,
    /// no record is lost and none is skipped: the next call hands over
    /// exactly what this one would have. A fetch already sent keeps going
    /// and its answer is used by the next call.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        let deadline = Instant::now().checked_add(timeout);
        self.poll_until(deadline, self.config.max_poll_records).await
    }

    /// Waits for the next record and hands it over: records come in offset
    /// order per partition, exactly as [`poll`](Self::poll) would hand them
    /// over one at a time. Retriable errors (a broker restarting, a leader
    /// moving) are retried without end; wrap the call in
    /// `tokio::time::timeout` for a bound. A non-retriable error is
    /// returned (the next call goes on after it, as with `poll`).
    ///
    /// Cancel safety: this method is cancel safe, as [`poll`](Self::poll):
    /// a record is taken out of the consumer only in the step that returns
    /// it, so a dropped call loses and repeats nothing.
    pub async fn recv(&mut self) -> Result<ConsumerRecord> {
        loop {
            let mut records = self.poll_until(None, 1).await?;
            if let Some(r) = records.pop() {
                return Ok(r);
            }
        }
    }

    /// A [`Stream`](futures_core::Stream) of single records (as
    /// [`recv`](Self::recv) hands them over), borrowing the consumer. It
    /// never ends; an error is yielded as an item and the stream goes on
    /// after it.
    ///
    /// Back-pressure: the stream fetches only while it is polled. While
    /// the caller does not read, the consumer holds at most what the
    /// fetches already sent bring (see
    /// [`buffered_bytes`](Self::buffered_bytes)); nothing more is fetched.
    ///
    /// Cancel safety: dropping the stream, or a `next()` on it, at any
    /// point loses and repeats nothing; the consumer (usable again once
    /// the stream is dropped) hands over the next record exactly where the
    /// stream stopped.
    pub fn stream(&mut self) -> RecordStream<'_> {
        RecordStream {
            buffered: self.buffered.clone(),
            state: StreamState::Idle(self),
        }
    }

    /// A [`Stream`](futures_core::Stream) of batches: each item is what one
    /// [`poll`](Self::poll) hands over (never empty; at most
    /// [`ConsumerConfig::max_poll_records`] records and
    /// [`ConsumerConfig::max_poll_bytes`] bytes). It never ends; an error
    /// is yielded as an item and the stream goes on after it.
    /// Back-pressure and cancel safety as for [`stream`](Self::stream).
    pub fn batches(&mut self) -> BatchStream<'_> {
        BatchStream {
            buffered: self.buffered.clone(),
            state: StreamState::Idle(self),
        }
    }

    /// Takes in the fetch answers and connects that have finished, without
    /// waiting; whether there were any.
    fn take_finished(&mut self) -> bool {
        let mut any = false;
        while let Some(joined) = self.in_flight.try_join_next() {
            self.handle_answer(joined);
            any = true;
        }
        while let Some(joined) = self.connecting.try_join_next() {
            self.handle_connected(joined);
            any = true;
        }
        any
    }

    /// [`poll`](Self::poll) with a deadline (`None`: none) and a record
    /// bound.
    async fn poll_until(&mut self, deadline: Option<Instant>, max_records: usize) -> Result<Vec<ConsumerRecord>> {
        self.config.validate()?;
        let mut backoff = self.cluster.backoff();
        // A call whose deadline has passed takes in what has arrived once,
        // and returns.
        let mut looked = false;
        loop {
            // No await between taking records and returning them.
            let partitions_before = self.fetcher.buffered_partitions();
            let taken = self.fetcher.take_records(max_records, self.config.max_poll_bytes);
            match taken {
                Ok(records) if !records.is_empty() => {
                    self.note_poll(&records);
                    // A partition drained: fetch it again while the caller
                    // works (for single records, only then: the rest is
                    // already fetched or in flight).
                    if max_records > 1 || self.fetcher.buffered_partitions() < partitions_before {
                        self.send_fetches(self.config.max_wait);
                    }
                    self.note_buffered();
                    return Ok(records);
                }
                Ok(_) => {}
                Err(e) => {
                    self.note_buffered();
                    return Err(fetch_error(e, None));
                }
            }
            if let Some(e) = self.pending_error.take() {
                return Err(e);
            }
            // Everything below may be dropped at any await without loss.
            if let Err(e) = self.prepare().await {
                let now = Instant::now();
                if !e.is_retriable() || deadline.is_some_and(|d| now >= d) {
                    return Err(e);
                }
                tracing::debug!(error = %e, "preparing the fetch failed; retrying");
                let delay = backoff.next_delay();
                let delay = deadline.map_or(delay, |d| delay.min(d - now));
                tokio::time::sleep(delay).await;
                continue;
            }
            // Within the call, the broker's wait ends by our deadline; a
            // call that does not wait (any more) lets it wait as configured,
            // the answer serving the next call.
            let remaining = deadline.map_or(self.config.max_wait, |d| d.saturating_duration_since(Instant::now()));
            let wait = if remaining.is_zero() {
                self.config.max_wait
            } else {
                self.config.max_wait.min(remaining)
            };
            self.send_fetches(wait);
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                if !looked {
                    looked = true;
                    if self.take_finished() {
                        continue;
                    }
                }
                // Nothing yet: let the fetch and connect tasks run (a
                // caller looping on zero polls on a one-thread runtime
                // would otherwise never let them).
                tokio::task::yield_now().await;
                return Ok(Vec::new());
            }
            let far = now + Duration::from_secs(3600);
            let deadline = deadline.unwrap_or(far);
            let mut wake = self.next_wake(now).map_or(deadline, |w| w.min(deadline));
            if !self.refresh.is_empty() {
                // Stale metadata (a leader unreachable): look again soon.
                wake = wake.min(now + backoff.next_delay());
            }
            if self.in_flight.is_empty() && self.connecting.is_empty() {
                tokio::time::sleep_until(wake.into()).await;
                continue;
            }
            tokio::select! {
                Some(joined) = self.in_flight.join_next(), if !self.in_flight.is_empty() => {
                    self.handle_answer(joined);
                }
                Some(joined) = self.connecting.join_next(), if !self.connecting.is_empty() => {
                    self.handle_connected(joined);
                }
                _ = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// Once per poll: the records counter, and the lag (end − position;
    /// the end is the last stable offset under read_committed) of each
    /// partition the poll handed records of. Records of a partition come
    /// together, so that is one look-up per partition, not per record.
    fn note_poll(&mut self, records: &[ConsumerRecord]) {
        self.metrics.consumed(records.len());
        let read_committed = self.config.isolation == IsolationLevel::ReadCommitted;
        let mut last: Option<(&Arc<str>, i32)> = None;
        for r in records {
            if last.is_some_and(|(t, p)| p == r.partition && Arc::ptr_eq(t, &r.topic)) {
                continue;
            }
            last = Some((&r.topic, r.partition));
            let position = self.fetcher.position(&r.topic, r.partition);
            let ends = self.fetcher.watermarks(&r.topic, r.partition);
            if let (Some(position), Some((hwm, lso))) = (position, ends) {
                let end = if read_committed { lso } else { hwm };
                if end >= 0 {
                    self.metrics.lag(&r.topic, r.partition, end - position);
                }
            }
        }
    }

    /// Refreshes stale metadata, positions unpositioned partitions and
    /// starts opening (in the background) connections to the brokers that
    /// fetchable partitions are routed to. Changes `self` only with
    /// finished work.
    async fn prepare(&mut self) -> Result<()> {
        if !self.refresh.is_empty() {
            let topics: Vec<Arc<str>> = self.refresh.clone();
            let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
            self.cluster.refresh_topics(&names).await?;
            self.refresh.retain(|t| !topics.contains(t));
        }
        self.validate_positions().await?;
        for (topic, partition) in self.fetcher.unpositioned() {
            let reset = self.config.auto_offset_reset.unwrap_or(Offset::Latest);
            let position = self.list_offset(&topic, partition, reset).await?;
            // Still unpositioned (no seek meanwhile): position it.
            if self.fetcher.is_assigned(&topic, partition) && self.fetcher.position(&topic, partition).is_none() {
                tracing::debug!(%topic, partition, position, "positioned");
                self.fetcher.seek(&topic, partition, Some(position));
            }
        }
        // A partition with no leader, or one the metadata has no address
        // for, waits for one here (refreshing, with backoff, up to
        // metadata_max_wait).
        let routed = self.route(&self.cluster.metadata());
        for (topic, partition) in self.fetcher.fetchable() {
            if !routed.iter().any(|(_, t, p)| *t == topic && *p == partition) {
                self.cluster.leader(&topic, partition).await?;
            }
        }
        self.start_connects();
        Ok(())
    }

    /// Opens, in the background, a connection to each broker that a
    /// fetchable partition is routed to and that has none: one task per
    /// broker (`connecting`). A broker that does not answer
    /// (a network partition: the connect or its handshake hangs until
    /// `connect_timeout`) therefore holds up only its
    /// own partitions, never the fetches to the others. A broker whose
    /// connect failed waits out its backoff before the next attempt.
    fn start_connects(&mut self) {
        let now = Instant::now();
        let metadata = self.cluster.metadata();
        for (target, _, _) in self.route(&metadata) {
            let open = self.conns.get(&target).is_some_and(|c| !c.is_closed());
            if open || self.connecting_to.contains(&target) {
                continue;
            }
            if self
                .pace
                .get(&target)
                .and_then(|p| p.not_before)
                .is_some_and(|t| t > now)
            {
                continue;
            }
            self.connecting_to.insert(target);
            let cluster = self.cluster.clone();
            let max_throttle = self.config.max_throttle;
            self.connecting.spawn(async move {
                let conn = cluster.broker_for(target, ConnectionRole::Fetch).await;
                (target, conn.inspect(|c| c.cap_throttle(max_throttle)))
            });
        }
    }

    /// A background connect finished: keep the connection, or apply the
    /// failure to the partitions routed to that broker.
    fn handle_connected(&mut self, joined: std::result::Result<ConnectAnswer, tokio::task::JoinError>) {
        let (target, result) = match joined {
            Ok(answer) => answer,
            Err(e) => {
                // Only a cancelled task (the consumer is being dropped) or a
                // bug; the broker is tried again by the next poll.
                tracing::error!(error = %e, "connect task failed");
                self.connecting_to.clear();
                return;
            }
        };
        self.connecting_to.remove(&target);
        let e = match result {
            Ok(conn) => {
                self.conns.insert(target, conn);
                return;
            }
            Err(e) => e,
        };
        let now = Instant::now();
        let pace = self.pace(target);
        pace.not_before = Some(now + pace.next_delay());
        let metadata = self.cluster.metadata();
        let mut forgot_replica = false;
        for (routed, topic, partition) in self.route(&metadata) {
            if routed != target {
                continue;
            }
            if e.is_connection_error() && self.fetcher.preferred_replica(&topic, partition) == Some(target) {
                // A preferred read replica that is unreachable: the
                // leader, at once (KIP-392).
                if !forgot_replica {
                    tracing::debug!(%topic, partition, replica = target, error = %e, "preferred read replica unreachable; fetching from the leader");
                    self.fetcher.forget_preferred_replica(target);
                    forgot_replica = true;
                }
            } else if e.is_connection_error() || matches!(e, Error::Config { option: "metadata", .. }) {
                // A leader that is gone (killed, restarting, cut off) must
                // not stop the fetches to the other brokers: look again at
                // the metadata, where leadership may have moved (the
                // cluster fences a dead broker after
                // broker.session.timeout.ms).
                tracing::debug!(%topic, partition, leader = target, error = %e, "leader unreachable; refreshing metadata");
                if !self.refresh.contains(&topic) {
                    self.refresh.push(topic.clone());
                }
            }
        }
        if !(e.is_retriable() || matches!(e, Error::Config { option: "metadata", .. })) {
            self.pending_error.get_or_insert(e);
        }
    }

    /// Checks positions against new leaders (KIP-320): an
    /// OffsetForLeaderEpoch request per leader for the partitions whose
    /// leader changed under them. Cancel safe: a check dropped in flight is
    /// asked again by the next call.
    async fn validate_positions(&mut self) -> Result<()> {
        self.fetcher.retry_epoch_requests();
        self.route(&self.cluster.metadata());
        for (broker, request) in self.fetcher.epoch_requests() {
            let fetch_conn = self.cluster.broker_for(broker, ConnectionRole::Fetch).await;
            let fetch_conn = fetch_conn.inspect(|c| c.cap_throttle(self.config.max_throttle));
            let answer = match fetch_conn {
                Ok(conn) => match conn.version_for::<OffsetForLeaderEpochRequest>(None) {
                    Ok(version) => conn
                        .request_at(version, &request)
                        .await
                        .map(|r| (conn.broker().clone(), r)),
                    Err(e) => {
                        tracing::debug!(broker, error = %e, "no OffsetForLeaderEpoch v2+: positions kept unchecked");
                        self.fetcher.handle_epoch_unsupported(broker);
                        continue;
                    }
                },
                Err(e) => Err(e),
            };
            let (broker_ref, response) = match answer {
                Ok(a) => a,
                Err(e) => {
                    self.fetcher.handle_epoch_failure(broker);
                    if !(e.is_retriable() || matches!(e, Error::Config { option: "metadata", .. })) {
                        return Err(e);
                    }
                    tracing::debug!(broker, error = %e, "position check failed; retrying after a metadata refresh");
                    self.refresh_awaiting_validation();
                    continue;
                }
            };
            let outcome = self.fetcher.handle_epoch_response(broker, response);
            for t in outcome.truncations {
                tracing::warn!("{t}");
                if self.truncations.len() == TRUNCATIONS_KEPT {
                    self.truncations.remove(0);
                }
                self.truncations.push(t);
            }
            for (topic, partition) in &outcome.reset_offsets {
                tracing::warn!(%topic, partition, "the new leader does not know the position's leader epoch; resetting");
            }
            for topic in outcome.refresh_metadata {
                if !self.refresh.contains(&topic) {
                    self.refresh.push(topic);
                }
            }
            if outcome.retriable_error {
                self.refresh_awaiting_validation();
            }
            if let Some(e) = outcome.errors.into_iter().next() {
                self.pending_error.get_or_insert(fetch_error(e, Some(&broker_ref)));
            }
        }
        Ok(())
    }

    fn refresh_awaiting_validation(&mut self) {
        for topic in self.fetcher.topics_awaiting_validation() {
            if !self.refresh.contains(&topic) {
                self.refresh.push(topic);
            }
        }
    }

    /// Sends a fetch to every broker that leads a fetchable partition, has
    /// an open connection, nothing in flight and no pause, asking it to
    /// wait up to `max_wait` for data. Never waits itself.
    fn send_fetches(&mut self, max_wait: Duration) {
        if self.fetcher.fetchable().is_empty() {
            return;
        }
        let mut by_leader: HashMap<i32, Vec<(Arc<str>, i32)>> = HashMap::new();
        for (target, topic, partition) in self.route(&self.cluster.metadata()) {
            by_leader.entry(target).or_default().push((topic, partition));
        }
        let now = Instant::now();
        // While other partitions still hold undelivered data the caller
        // comes back for it anyway: a long poll would only hold this
        // broker's one fetch slot, so partitions drained meanwhile would
        // wait out the whole `max_wait` behind it, one after another (seen
        // as a stall of ~`max_wait` per partition on uncompressed topics
        // with many partitions). Ask for whatever is there now instead; at
        // most one such fetch per broker and poll call, so this never spins.
        let max_wait = if self.fetcher.has_buffered() {
            Duration::ZERO
        } else {
            max_wait
        };
        let max_wait = max_wait.as_millis().min(i32::MAX as u128) as i32;
        for (broker, partitions) in by_leader {
            if self.fetcher.in_flight(broker) {
                continue;
            }
            if self
                .pace
                .get(&broker)
                .and_then(|p| p.not_before)
                .is_some_and(|t| t > now)
            {
                continue;
            }
            let Some(conn) = self.conns.get(&broker).filter(|c| !c.is_closed()).cloned() else {
                continue;
            };
            let version = match conn.version_for::<FetchRequest>(Some(FETCH_MAX_VERSION)) {
                Ok(v) => v,
                Err(e) => {
                    self.pending_error.get_or_insert(e);
                    continue;
                }
            };
            let Some(mut request) = self.fetcher.build_request(
                broker,
                &partitions,
                max_wait,
                wire_bytes(self.config.min_bytes),
                wire_bytes(self.config.max_bytes),
            ) else {
                continue;
            };
            // Fields older versions do not carry (a peer below Kafka 2.4).
            if version < 11 {
                request.rack_id = Default::default();
            }
            if version < 9 {
                for p in request.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
                    p.current_leader_epoch = -1;
                }
            }
            tracing::trace!(
                broker,
                session_id = request.session_id,
                session_epoch = request.session_epoch,
                partitions = request.topics.iter().map(|t| t.partitions.len()).sum::<usize>(),
                "fetch"
            );
            let asked = Duration::from_millis(max_wait.max(0) as u64);
            let gauge = self.buffered.clone();
            self.in_flight.spawn(async move {
                let sent = Instant::now();
                let result = conn.request_at(version, &request).await;
                let bytes = result.as_ref().map_or(0, answer_bytes);
                gauge.0.arrived.fetch_add(bytes, Ordering::Relaxed);
                (broker, conn.broker().clone(), sent, asked, result, bytes)
            });
        }
    }

    /// The earliest time a paused broker may be fetched from again.
    fn next_wake(&self, now: Instant) -> Option<Instant> {
        self.pace
            .values()
            .filter_map(|p| p.not_before)
            .filter(|t| *t > now)
            .min()
    }

    fn pace(&mut self, broker: i32) -> &mut BrokerPace {
        // Built only for a broker seen first (a backoff's jitter seed is a
        // system call; this runs once per fetch answer).
        let cluster = &self.cluster;
        self.pace.entry(broker).or_insert_with(|| BrokerPace {
            not_before: None,
            stalled_wait: None,
            backoff: std::sync::Mutex::new(cluster.backoff()),
        })
    }

    /// Feeds one fetch's answer to the state machine and applies what it
    /// asks for.
    fn handle_answer(&mut self, joined: std::result::Result<FetchAnswer, tokio::task::JoinError>) {
        let (broker, broker_ref, sent, asked, result, bytes) = match joined {
            Ok(answer) => answer,
            Err(e) => {
                // A fetch task cannot panic short of a bug; a cancelled one
                // (the consumer is being dropped) has no broker to blame.
                tracing::error!(error = %e, "fetch task failed");
                return;
            }
        };
        self.buffered.0.arrived.fetch_sub(bytes, Ordering::Relaxed);
        let now = Instant::now();
        self.tick();
        let counts = self.fetch_counts.entry(broker).or_default();
        let response = match result {
            Ok(r) => {
                counts.answers += 1;
                r
            }
            Err(e) => {
                self.fetcher.handle_failure(broker);
                if self.conns.get(&broker).is_some_and(|c| c.is_closed()) {
                    self.conns.remove(&broker);
                }
                if e.is_connection_error() {
                    // The broker may be gone: its partitions' leadership
                    // is looked up again before they are fetched.
                    let metadata = self.cluster.metadata();
                    for (topic, partition) in self.fetcher.fetchable() {
                        let led = metadata
                            .topics
                            .get(&*topic)
                            .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
                            .is_some_and(|p| p.leader == broker);
                        if led && !self.refresh.contains(&topic) {
                            self.refresh.push(topic);
                        }
                    }
                }
                let pace = self.pace(broker);
                pace.not_before = Some(now + pace.next_delay());
                if e.is_retriable() {
                    tracing::debug!(broker, error = %e, "fetch failed; retrying");
                } else {
                    self.pending_error.get_or_insert(e);
                }
                return;
            }
        };
        let outcome: FetchOutcome = self.fetcher.handle_response(broker, response);
        self.note_buffered();
        self.fetch_counts.entry(broker).or_default().partitions_with_records += outcome.buffered as u64;
        if outcome.ignored > 0 {
            tracing::debug!(broker, ignored = outcome.ignored, "fetch answer entries ignored");
        }
        for topic in &outcome.refresh_metadata {
            if !self.refresh.contains(topic) {
                self.refresh.push(topic.clone());
            }
        }
        for (topic, partition) in &outcome.reset_offsets {
            tracing::info!(%topic, partition, "offset out of range; resetting");
        }
        let fruitless = outcome.fruitless();
        if let Some(e) = outcome.errors.into_iter().next() {
            self.pending_error.get_or_insert(fetch_error(e, Some(&broker_ref)));
        }
        let throttle = Duration::from_millis(outcome.throttle_ms as u64).min(self.config.max_throttle);
        let retriable_error = outcome.retriable_error;
        let pace = self.pace(broker);
        let mut not_before = now + throttle;
        if retriable_error {
            not_before = not_before.max(now + pace.next_delay());
        } else if fruitless && outcome.buffered > 0 {
            // Records came, but none could be handed over (at or past the
            // bound the answer itself reports: Kafka does that for a
            // moment under read_committed; or below the position): ask
            // again after 1 ms, doubling up to the wait asked while it
            // lasts, rather than after the whole wait (a ~max_wait stall).
            let wait = pace.stalled_wait.map_or(Duration::from_millis(1), |w| {
                (w * 2).min(asked.max(Duration::from_millis(1)))
            });
            pace.stalled_wait = Some(wait);
            not_before = not_before.max(now + wait);
        } else if fruitless {
            // Nothing usable: no sooner than the wait we asked the broker
            // for (a broker that long-polled as asked costs no extra wait;
            // one that answers empty at once cannot make us spin).
            not_before = not_before.max(sent + asked);
        } else {
            pace.backoff.get_mut().unwrap_or_else(|e| e.into_inner()).reset();
            pace.stalled_wait = None;
        }
        pace.not_before = (not_before > now).then_some(not_before);
    }
}

/// A poll in progress, owning the consumer's borrow until it finishes.
type PollFuture<'a, T> = Pin<Box<dyn Future<Output = (&'a mut Consumer, Result<T>)> + Send + 'a>>;

/// Where a consumer stream is: holding the consumer between items, or
/// polling it for the next one.
enum StreamState<'a, T> {
    Idle(&'a mut Consumer),
    Polling(PollFuture<'a, T>),
    /// Only while switching (never seen outside `poll_next`).
    Gone,
}

impl<T> StreamState<'_, T> {
    fn poll_item(
        &mut self,
        cx: &mut Context<'_>,
        start: impl for<'c> FnOnce(&'c mut Consumer) -> PollFuture<'c, T>,
    ) -> Poll<Option<Result<T>>> {
        let mut future = match std::mem::replace(self, StreamState::Gone) {
            StreamState::Idle(consumer) => start(consumer),
            StreamState::Polling(future) => future,
            StreamState::Gone => return Poll::Ready(None),
        };
        match future.as_mut().poll(cx) {
            Poll::Ready((consumer, item)) => {
                *self = StreamState::Idle(consumer);
                Poll::Ready(Some(item))
            }
            Poll::Pending => {
                *self = StreamState::Polling(future);
                Poll::Pending
            }
        }
    }
}

/// The records of a [`Consumer`], one at a time: see
/// [`Consumer::stream`]. Never ends.
pub struct RecordStream<'a> {
    buffered: BufferedBytes,
    state: StreamState<'a, ConsumerRecord>,
}

impl RecordStream<'_> {
    /// The consumer's [`buffered_bytes`](Consumer::buffered_bytes), read
    /// while the stream holds it.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.get()
    }
}

impl std::fmt::Debug for RecordStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordStream")
            .field("buffered_bytes", &self.buffered.get())
            .finish_non_exhaustive()
    }
}

impl futures_core::Stream for RecordStream<'_> {
    type Item = Result<ConsumerRecord>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().state.poll_item(cx, |consumer| {
            Box::pin(async move {
                let item = consumer.recv().await;
                (consumer, item)
            })
        })
    }
}

/// The records of a [`Consumer`], a poll's worth at a time: see
/// [`Consumer::batches`]. Never ends; never yields an empty batch.
pub struct BatchStream<'a> {
    buffered: BufferedBytes,
    state: StreamState<'a, Vec<ConsumerRecord>>,
}

impl BatchStream<'_> {
    /// The consumer's [`buffered_bytes`](Consumer::buffered_bytes), read
    /// while the stream holds it.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.get()
    }
}

impl std::fmt::Debug for BatchStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("buffered_bytes", &self.buffered.get())
            .finish_non_exhaustive()
    }
}

impl futures_core::Stream for BatchStream<'_> {
    type Item = Result<Vec<ConsumerRecord>>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().state.poll_item(cx, |consumer| {
            Box::pin(async move {
                let max = consumer.config.max_poll_records;
                let item = loop {
                    match consumer.poll_until(None, max).await {
                        Ok(records) if records.is_empty() => continue,
                        other => break other,
                    }
                };
                (consumer, item)
            })
        })
    }
}

fn fetch_error(e: FetchError, broker: Option<&BrokerRef>) -> Error {
    match e {
        FetchError::Corrupt {
            topic,
            partition,
            offset,
            source,
        } => Error::CorruptRecord {
            topic: topic.to_string(),
            partition,
            offset,
            source,
        },
        FetchError::OffsetOutOfRange {
            topic,
            partition,
            offset,
        } => Error::OffsetOutOfRange {
            topic: topic.to_string(),
            partition,
            offset,
        },
        FetchError::LogTruncation(t) => Error::LogTruncation {
            topic: t.topic.to_string(),
            partition: t.partition,
            position: t.position,
            divergent_offset: t.divergent_offset,
        },
        FetchError::PartialBatch { size, limit, .. } => Error::TooLarge {
            what: "partial record batch",
            size,
            limit,
            option: "max.partition.fetch.bytes",
        },
        FetchError::Partition { topic, partition, code } => match broker {
            Some(b) => Error::kafka("Fetch", b, Some(&topic), Some(partition), code.0, None),
            None => Error::Protocol {
                broker: BrokerRef::addr("unknown broker"),
                api: "Fetch",
                source: Arc::new(clink_kafka_wire::Error::Invalid {
                    context: "fetch",
                    message: format!("{topic}[{partition}]: {code}"),
                }),
            },
        },
        FetchError::Response { code } => match broker {
            Some(b) => Error::kafka("Fetch", b, None, None, code.0, None),
            None => Error::Protocol {
                broker: BrokerRef::addr("unknown broker"),
                api: "Fetch",
                source: Arc::new(clink_kafka_wire::Error::Invalid {
                    context: "fetch",
                    message: code.to_string(),
                }),
            },
        },
        other => Error::Protocol {
            broker: broker.cloned().unwrap_or_else(|| BrokerRef::addr("unknown broker")),
            api: "Fetch",
            source: Arc::new(clink_kafka_wire::Error::Invalid {
                context: "fetch",
                message: other.to_string(),
            }),
        },
    }
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
