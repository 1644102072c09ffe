//! [`KafkaSource`]: the checkpointed source (the spec's "Deterministic
//! partition ownership" and "Source replay").
//!
//! - Ownership: subtask `i` of `n` owns the partitions `p % n == i` (a
//!   standalone source, `n = 1`, owns them all), assigned manually. No
//!   consumer group membership and no group offset commits: the engine's
//!   checkpoints are the only resume authority.
//! - Start offsets are concrete numbers before assignment: the restored
//!   offset, else the group's committed offset (bounded retries; a courtesy
//!   lookup that falls back when the coordinator does not answer), else
//!   `auto_offset_reset` by the partition's watermarks (`none`: an error
//!   naming the partition). Leaving this to the client would make the fetch
//!   position depend on the group coordinator answering (spec, issue #8).
//! - Every snapshot has one [`ResumeRow`] per owned partition, the first
//!   one included: the resolved start seeds it.
//! - Partition discovery re-reads the partition count every
//!   `partition_discovery_interval`; new owned partitions join at the reset
//!   policy.
//! - One log line per (re)assignment: subtask, partitions, and each start
//!   offset's [`Origin`].
//! - Batches: the first record waits up to `poll_timeout`; once a batch has
//!   begun, `batch_max_wait` bounds the whole batch (0: fill to
//!   `max_batch_size` or until a poll comes back empty). Counters move once
//!   per batch.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::backend::{ConsumerBackend, NativeConsumer, Watermark};
use super::error::{ConnectorError, Result};
use super::format::ValueDecoder;
use super::options::{AutoOffsetReset, DecodeErrorPolicy, SourceOptions};
use super::record::{KafkaMessage, Text};
use super::{Batch, BoxFuture, Emitter, Source, StateRow};
use crate::client::PartitionOffset;

/// The operator-state key prefix of a source resume row.
const ROW_PREFIX: &str = "kafka-source/";

/// Where a partition's start offset came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Assigned before this reassignment; continues where it was.
    Held,
    /// Not assigned, but this source instance had tracked a position for it.
    Tracked,
    /// From the restored checkpoint.
    Restored,
    /// The consumer group's committed offset.
    Stored,
    /// The `auto_offset_reset` policy, by watermark.
    Reset(AutoOffsetReset),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Held => f.write_str("held"),
            Origin::Tracked => f.write_str("tracked"),
            Origin::Restored => f.write_str("restored"),
            Origin::Stored => f.write_str("stored"),
            Origin::Reset(r) => f.write_str(r.name()),
        }
    }
}

/// One partition's resume position: the next offset to emit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeRow {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The next offset the source will emit from this partition.
    pub next_offset: i64,
}

impl ResumeRow {
    /// As operator state: key `kafka-source/<topic>/<partition>`, value the
    /// offset in decimal.
    pub fn to_state(&self) -> StateRow {
        StateRow {
            key: format!("{ROW_PREFIX}{}/{}", self.topic, self.partition),
            value: self.next_offset.to_string().into_bytes(),
        }
    }

    /// Reads a row; `Ok(None)` for a row some other operator wrote.
    pub fn from_state(row: &StateRow) -> Result<Option<ResumeRow>> {
        let Some(rest) = row.key.strip_prefix(ROW_PREFIX) else {
            return Ok(None);
        };
        let bad = |message: &str| ConnectorError::BadState {
            key: row.key.clone(),
            message: message.to_owned(),
        };
        let (topic, partition) = rest.rsplit_once('/').ok_or_else(|| bad("no partition in the key"))?;
        let partition: i32 = partition
            .parse()
            .ok()
            .filter(|p| *p >= 0)
            .ok_or_else(|| bad("the partition is not a non-negative integer"))?;
        let next_offset: i64 = std::str::from_utf8(&row.value)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|o| *o >= 0)
            .ok_or_else(|| bad("the offset is not a non-negative integer"))?;
        if topic.is_empty() {
            return Err(bad("empty topic"));
        }
        Ok(Some(ResumeRow {
            topic: topic.to_owned(),
            partition,
            next_offset,
        }))
    }
}

/// A source's counters; each moves once per batch.
#[derive(Debug, Default)]
pub struct SourceCounters {
    consumed: AtomicU64,
    consume_errors: AtomicU64,
    batches: AtomicU64,
    null_payloads_skipped: AtomicU64,
    decode_errors_skipped: AtomicU64,
}

impl SourceCounters {
    /// Records emitted.
    pub fn consumed(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }
    /// Failed polls.
    pub fn consume_errors(&self) -> u64 {
        self.consume_errors.load(Ordering::Relaxed)
    }
    /// Batches emitted.
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }
    /// Null-valued records the string channel skipped (it carries text only).
    pub fn null_payloads_skipped(&self) -> u64 {
        self.null_payloads_skipped.load(Ordering::Relaxed)
    }
    /// Records the string channel skipped under `decode_error = skip`.
    pub fn decode_errors_skipped(&self) -> u64 {
        self.decode_errors_skipped.load(Ordering::Relaxed)
    }
}

/// The checkpointed Kafka source, emitting [`KafkaMessage`]s.
pub struct KafkaSource<B: ConsumerBackend = NativeConsumer> {
    options: SourceOptions,
    backend: B,
    opened: bool,
    /// Restored positions of owned partitions (narrowed at `restore`).
    restored: BTreeMap<i32, i64>,
    /// Assigned partitions → next offset to emit.
    assigned: BTreeMap<i32, i64>,
    /// The origin of each assigned partition's start, at the last assignment.
    origins: BTreeMap<i32, Origin>,
    /// Positions of partitions this instance tracked but no longer assigns.
    tracked: BTreeMap<i32, i64>,
    /// Fetched records not yet emitted (a poll can return more than a batch).
    pending: VecDeque<KafkaMessage>,
    partition_count: i32,
    next_discovery: Option<Instant>,
    assignments: u64,
    counters: Arc<SourceCounters>,
    /// The same counts as series (`crate::metrics`), moved alongside.
    series: crate::metrics::ConnectorSeries,
}

impl<B: ConsumerBackend> fmt::Debug for KafkaSource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topic", &self.options.topic)
            .field("subtask_index", &self.options.subtask_index)
            .field("source_parallelism", &self.options.source_parallelism)
            .field("assigned", &self.assigned)
            .finish_non_exhaustive()
    }
}

impl KafkaSource<NativeConsumer> {
    /// A source over the native client. Refuses a configuration the native
    /// client cannot honour (TLS, for now) here, before any I/O.
    pub fn new(options: SourceOptions) -> Result<Self> {
        let backend = NativeConsumer::new(options.client_config()?, options.consumer_config());
        Ok(KafkaSource::with_backend(options, backend))
    }
}

impl<B: ConsumerBackend> KafkaSource<B> {
    /// A source over any backend.
    pub fn with_backend(options: SourceOptions, backend: B) -> Self {
        let series = crate::metrics::ConnectorSeries::source(
            options.metric_prefix.as_deref(),
            &options.topic,
            options.subtask_index,
        );
        KafkaSource {
            series,
            options,
            backend,
            opened: false,
            restored: BTreeMap::new(),
            assigned: BTreeMap::new(),
            origins: BTreeMap::new(),
            tracked: BTreeMap::new(),
            pending: VecDeque::new(),
            partition_count: 0,
            next_discovery: None,
            assignments: 0,
            counters: Arc::default(),
        }
    }

    /// The options the source was built from.
    pub fn options(&self) -> &SourceOptions {
        &self.options
    }

    /// The source's counters, shared: they stay readable after the source is gone.
    pub fn counters(&self) -> Arc<SourceCounters> {
        self.counters.clone()
    }

    /// The assigned partitions and the next offset each will emit.
    pub fn assignment(&self) -> Vec<PartitionOffset> {
        self.assigned
            .iter()
            .map(|(p, o)| PartitionOffset::new(*p, *o))
            .collect()
    }

    /// Where each assigned partition's start offset came from, at the last
    /// (re)assignment.
    pub fn origins(&self) -> BTreeMap<i32, Origin> {
        self.origins.clone()
    }

    /// How many (re)assignments this source has made.
    pub fn assignments(&self) -> u64 {
        self.assignments
    }

    /// Keeps the restored rows of partitions this subtask owns.
    pub fn restore_rows(&mut self, rows: &[StateRow]) -> Result<()> {
        if self.opened {
            return Err(ConnectorError::CallOrder {
                call: "restore",
                problem: "after open",
            });
        }
        self.restored.clear();
        // A restore is the resume authority over anything tracked before it.
        self.tracked.clear();
        for row in rows {
            let Some(r) = ResumeRow::from_state(row)? else { continue };
            if r.topic == self.options.topic && self.options.owns(r.partition) {
                self.restored.insert(r.partition, r.next_offset);
            }
        }
        Ok(())
    }

    /// The resume rows: one per owned partition (before `open`, what a
    /// restore or an earlier run left).
    pub fn resume_rows(&self) -> Vec<ResumeRow> {
        let positions = if self.opened {
            self.assigned.clone()
        } else {
            let mut p = self.restored.clone();
            p.extend(self.tracked.iter().map(|(k, v)| (*k, *v)));
            p
        };
        positions
            .iter()
            .map(|(p, o)| ResumeRow {
                topic: self.options.topic.clone(),
                partition: *p,
                next_offset: *o,
            })
            .collect()
    }

    /// Connects, resolves every owned partition's start, assigns.
    pub async fn open_source(&mut self) -> Result<()> {
        if self.opened {
            return Err(ConnectorError::CallOrder {
                call: "open",
                problem: "twice",
            });
        }
        self.backend.connect().await?;
        let count = self.backend.partition_count(&self.options.topic).await?;
        let owned: Vec<i32> = (0..count).filter(|p| self.options.owns(*p)).collect();
        let starts = self.resolve_starts(&owned, true).await?;
        // Applied: from here on the live positions are the authority.
        self.restored.clear();
        self.partition_count = count;
        self.opened = true;
        self.reassign(starts).await?;
        self.schedule_discovery();
        Ok(())
    }

    fn schedule_discovery(&mut self) {
        let every = self.options.partition_discovery_interval;
        self.next_discovery = (!every.is_zero()).then(|| Instant::now() + every);
    }

    /// Start offsets of `partitions`: restored, tracked, then (when
    /// `use_group`) the group's committed offset, then the reset policy.
    async fn resolve_starts(&mut self, partitions: &[i32], use_group: bool) -> Result<BTreeMap<i32, (i64, Origin)>> {
        let mut starts = BTreeMap::new();
        let mut open: Vec<i32> = Vec::new();
        for &p in partitions {
            if let Some(o) = self.restored.get(&p) {
                starts.insert(p, (*o, Origin::Restored));
            } else if let Some(o) = self.tracked.get(&p) {
                starts.insert(p, (*o, Origin::Tracked));
            } else {
                open.push(p);
            }
        }
        if use_group && !open.is_empty() {
            let committed = self.committed_with_retries(&open).await;
            open.retain(|p| match committed.get(p).copied().flatten() {
                Some(o) => {
                    starts.insert(*p, (o, Origin::Stored));
                    false
                }
                None => true,
            });
        }
        let reset = self.options.auto_offset_reset;
        for p in open {
            let which = match reset {
                AutoOffsetReset::Earliest => Watermark::Low,
                AutoOffsetReset::Latest => Watermark::High,
                AutoOffsetReset::None => {
                    return Err(ConnectorError::NoStartOffset {
                        topic: self.options.topic.clone(),
                        partition: p,
                    })
                }
            };
            let o = self.backend.watermark(&self.options.topic, p, which).await?;
            starts.insert(p, (o, Origin::Reset(reset)));
        }
        Ok(starts)
    }

    /// The group's committed offsets, with bounded retries; after the last
    /// failed attempt, none (the reset policy applies), loudly.
    async fn committed_with_retries(&mut self, partitions: &[i32]) -> BTreeMap<i32, Option<i64>> {
        let attempts = self.options.committed_lookup_attempts.max(1);
        let mut delay = Duration::from_millis(100);
        for attempt in 1..=attempts {
            match self
                .backend
                .committed(&self.options.group_id, &self.options.topic, partitions)
                .await
            {
                Ok(found) => return found,
                Err(e) if attempt < attempts => {
                    tracing::debug!(group = %self.options.group_id, attempt, error = %e, "committed offset lookup failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::warn!(
                        group = %self.options.group_id,
                        topic = %self.options.topic,
                        attempts,
                        error = %e,
                        "committed offset lookup failed; falling back to auto_offset_reset"
                    );
                }
            }
        }
        BTreeMap::new()
    }

    /// Assigns the held partitions at their positions plus `new` ones, and
    /// logs the one line.
    async fn reassign(&mut self, new: BTreeMap<i32, (i64, Origin)>) -> Result<()> {
        let mut origins: BTreeMap<i32, Origin> = self.assigned.keys().map(|p| (*p, Origin::Held)).collect();
        let mut positions = self.assigned.clone();
        for (p, (o, origin)) in new {
            positions.insert(p, o);
            origins.insert(p, origin);
        }
        let list: Vec<PartitionOffset> = positions.iter().map(|(p, o)| PartitionOffset::new(*p, *o)).collect();
        // Buffered records would be fetched again from the held positions.
        self.pending.clear();
        self.backend.assign(&self.options.topic, &list).await?;
        for p in positions.keys() {
            self.tracked.remove(p);
        }
        self.assigned = positions;
        self.origins = origins;
        self.assignments += 1;
        self.series.assigned.set(self.assigned.len() as f64);
        let described: Vec<String> = list
            .iter()
            .map(|p| format!("{}@{}({})", p.partition, p.offset, self.origins[&p.partition]))
            .collect();
        tracing::info!(
            subtask = %format_args!("{}/{}", self.options.subtask_index, self.options.source_parallelism),
            topic = %self.options.topic,
            partitions = %described.join(" "),
            "kafka source assignment"
        );
        Ok(())
    }

    /// Picks up partitions added since the last look.
    async fn discover(&mut self) -> Result<()> {
        let count = match self.backend.partition_count(&self.options.topic).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(topic = %self.options.topic, error = %e, "partition discovery failed; retrying at the next interval");
                return Ok(());
            }
        };
        if count <= self.partition_count {
            return Ok(());
        }
        let added: Vec<i32> = (self.partition_count..count)
            .filter(|p| self.options.owns(*p))
            .collect();
        if added.is_empty() {
            self.partition_count = count;
            return Ok(());
        }
        // Counted only once assigned, so a dropped call is redone.
        let starts = self.resolve_starts(&added, false).await?;
        self.reassign(starts).await?;
        self.partition_count = count;
        Ok(())
    }

    fn take_pending(&mut self, batch: &mut Vec<KafkaMessage>) {
        let n = (self.options.max_batch_size - batch.len()).min(self.pending.len());
        batch.extend(self.pending.drain(..n));
    }

    /// One poll; a failed one counts and, when retriable, reads as empty.
    async fn poll_into_pending(&mut self, timeout: Duration) -> Result<()> {
        match self.backend.poll(timeout).await {
            Ok(records) => {
                self.pending.extend(records);
                Ok(())
            }
            Err(e) => {
                self.counters.consume_errors.fetch_add(1, Ordering::Relaxed);
                self.series.errors.increment(1);
                let retriable = matches!(&e, ConnectorError::Client(c) if c.is_retriable());
                if retriable {
                    tracing::warn!(topic = %self.options.topic, error = %e, "poll failed; retrying");
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Forms and emits at most one batch.
    ///
    /// Cancel safety: this method is cancel safe. Polled records wait in
    /// `self.pending` until the batch is formed, and the batch is taken,
    /// the positions advanced and the batch emitted with no await in
    /// between; a future dropped before that leaves every record pending for
    /// the next call (which starts a fresh `batch_max_wait`). A dropped
    /// partition discovery is redone by the next call.
    pub async fn produce_batch(&mut self, emitter: &mut dyn Emitter<KafkaMessage>) -> Result<usize> {
        if !self.opened {
            return Err(ConnectorError::CallOrder {
                call: "produce",
                problem: "before open",
            });
        }
        if self.next_discovery.is_some_and(|at| Instant::now() >= at) {
            self.discover().await?;
            self.schedule_discovery();
        }
        let max = self.options.max_batch_size;
        if self.pending.is_empty() {
            self.poll_into_pending(self.options.poll_timeout).await?;
            if self.pending.is_empty() {
                return Ok(0);
            }
        }
        let begun = Instant::now();
        let bound = self.options.batch_max_wait;
        while self.pending.len() < max {
            let timeout = if bound.is_zero() {
                self.options.poll_timeout
            } else {
                let left = bound.saturating_sub(begun.elapsed());
                if left.is_zero() {
                    break;
                }
                left
            };
            let before = self.pending.len();
            self.poll_into_pending(timeout).await?;
            if self.pending.len() == before && bound.is_zero() {
                break;
            }
        }
        // From here to the end: no await, so a batch is either emitted with
        // its positions advanced, or not formed at all.
        let mut batch = Vec::with_capacity(max.min(self.pending.len()));
        self.take_pending(&mut batch);
        // One merge into the offset map per batch.
        let mut scratch: Vec<(i32, i64)> = Vec::new();
        for m in &batch {
            match scratch.iter_mut().find(|(p, _)| *p == m.partition) {
                Some(entry) => entry.1 = entry.1.max(m.offset + 1),
                None => scratch.push((m.partition, m.offset + 1)),
            }
        }
        for (p, next) in scratch {
            if let Some(o) = self.assigned.get_mut(&p) {
                *o = (*o).max(next);
            }
        }
        let n = batch.len();
        self.counters.consumed.fetch_add(n as u64, Ordering::Relaxed);
        self.series.ok.increment(n as u64);
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        emitter.emit(batch);
        Ok(n)
    }

    /// Closes the consumer ([`Source::close`]); the positions stay in the snapshot.
    pub async fn close_source(&mut self) -> Result<()> {
        for (p, o) in std::mem::take(&mut self.assigned) {
            self.tracked.insert(p, o);
        }
        self.pending.clear();
        self.opened = false;
        self.backend.close().await
    }
}

impl<B: ConsumerBackend> Source for KafkaSource<B> {
    type Item = KafkaMessage;

    fn restore(&mut self, rows: &[StateRow]) -> Result<()> {
        self.restore_rows(rows)
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.open_source())
    }

    fn produce<'a>(&'a mut self, emitter: &'a mut dyn Emitter<KafkaMessage>) -> BoxFuture<'a, Result<usize>> {
        Box::pin(self.produce_batch(emitter))
    }

    fn snapshot(&self) -> Vec<StateRow> {
        self.resume_rows().iter().map(ResumeRow::to_state).collect()
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.close_source())
    }
}

/// One batch of the string channel, with each record's position when asked
/// for (`partitions[i]`, `offsets[i]` belong to `texts[i]`).
#[derive(Debug, Default)]
pub(crate) struct LocatedTexts {
    pub texts: Vec<Text>,
    pub partitions: Vec<i32>,
    pub offsets: Vec<i64>,
}

/// The string channel over [`KafkaSource`]: payloads as [`Text`]. The
/// checkpoint hooks are the inner source's, so the string and SQL paths
/// keep replay. A null value (no text to carry) is skipped and counted.
///
/// A value that cannot become text — not UTF-8, or with `format = avro`
/// not decodable (framing, schema id, registry, payload) — takes the
/// `decode_error` path: `fail` stops with [`ConnectorError::NotText`] /
/// [`ConnectorError::Undecodable`] naming topic, partition, offset and
/// reason; `skip` logs the same at warn level, counts it
/// ([`SourceCounters::decode_errors_skipped`]) and goes on. The skipped
/// record's offset is behind the batch's positions, so the next snapshot
/// resumes past it.
pub struct TextKafkaSource<B: ConsumerBackend = NativeConsumer> {
    inner: KafkaSource<B>,
    decoder: Option<ValueDecoder>,
    /// A batch taken from the inner source whose schemas are being fetched:
    /// kept here so a dropped `produce` future loses nothing, and so a
    /// snapshot taken meanwhile resumes at its first record.
    held: Option<Batch<KafkaMessage>>,
}

impl<B: ConsumerBackend> fmt::Debug for TextKafkaSource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TextKafkaSource").field(&self.inner).finish()
    }
}

impl<B: ConsumerBackend> TextKafkaSource<B> {
    /// The string channel; with `format = avro|…` in the options, values
    /// are decoded through the registry (its client is made at `open`).
    pub fn new(inner: KafkaSource<B>) -> Self {
        TextKafkaSource {
            inner,
            decoder: None,
            held: None,
        }
    }

    async fn open_text(&mut self) -> Result<()> {
        if self.decoder.is_none() {
            if let Some(f) = &self.inner.options.value_format {
                self.decoder = Some(ValueDecoder::new(f)?);
            }
        }
        self.inner.open_source().await
    }

    /// The source underneath.
    pub fn inner(&self) -> &KafkaSource<B> {
        &self.inner
    }

    /// The registry decoder, when a registry format is configured.
    pub fn decoder(&self) -> Option<&ValueDecoder> {
        self.decoder.as_ref()
    }

    /// Cancel safety: cancel safe. A batch taken from the inner source is
    /// held in `self` while its schemas are fetched, and decoded and emitted
    /// with no await in between.
    async fn produce_text(&mut self, emitter: &mut dyn Emitter<Text>) -> Result<usize> {
        let Some(located) = self.next_texts(false).await? else {
            return Ok(0);
        };
        let n = located.texts.len();
        if n > 0 {
            emitter.emit(located.texts);
        }
        Ok(n)
    }

    /// The next batch as text, each record's partition and offset alongside
    /// when `positions` (the SQL source's `decode_error` names them);
    /// `None` when no batch came. Undecodable records took the
    /// `decode_error` path. Cancel safe, as `produce`: the texts are
    /// returned with no await after the inner source's positions moved, so
    /// the caller must use them before its next await.
    pub(crate) async fn next_texts(&mut self, positions: bool) -> Result<Option<LocatedTexts>> {
        if self.held.is_none() {
            let mut got: Vec<Batch<KafkaMessage>> = Vec::with_capacity(1);
            self.inner.produce_batch(&mut got).await?;
            let Some(batch) = got.pop() else { return Ok(None) };
            self.held = Some(batch);
        }
        if let (Some(decoder), Some(batch)) = (self.decoder.as_mut(), self.held.as_ref()) {
            decoder.prepare(batch.iter().filter_map(|m| m.payload.as_deref())).await;
        }
        let Some(batch) = self.held.take() else { return Ok(None) };
        let capacity = if positions { batch.len() } else { 0 };
        let mut out = LocatedTexts {
            texts: Vec::with_capacity(batch.len()),
            partitions: Vec::with_capacity(capacity),
            offsets: Vec::with_capacity(capacity),
        };
        let mut nulls = 0u64;
        for m in batch {
            let Some(payload) = m.payload else {
                nulls += 1;
                continue;
            };
            let decoded = match &self.decoder {
                None => Text::from_utf8(payload).map_err(|e| ConnectorError::NotText {
                    topic: self.inner.options.topic.clone(),
                    partition: m.partition,
                    offset: m.offset,
                    reason: e.to_string(),
                }),
                Some(d) => d
                    .decode(&payload)
                    .map(Text::from)
                    .map_err(|f| ConnectorError::Undecodable {
                        topic: self.inner.options.topic.clone(),
                        partition: m.partition,
                        offset: m.offset,
                        format: d.format().name(),
                        reason: f.0,
                    }),
            };
            match decoded {
                Ok(text) => {
                    out.texts.push(text);
                    if positions {
                        out.partitions.push(m.partition);
                        out.offsets.push(m.offset);
                    }
                }
                Err(e) => self.decode_failed(e)?,
            }
        }
        if nulls > 0 {
            self.inner
                .counters
                .null_payloads_skipped
                .fetch_add(nulls, Ordering::Relaxed);
        }
        Ok(Some(out))
    }

    /// The `decode_error` policy on one record's error: `fail` returns it,
    /// `skip` logs it at warn level, counts it and returns `Ok`.
    pub(crate) fn decode_failed(&self, e: ConnectorError) -> Result<()> {
        if self.inner.options.decode_error != DecodeErrorPolicy::Skip {
            return Err(e);
        }
        let (partition, offset) = match &e {
            ConnectorError::NotText { partition, offset, .. }
            | ConnectorError::Undecodable { partition, offset, .. }
            | ConnectorError::RowDecode { partition, offset, .. } => (Some(*partition), Some(*offset)),
            _ => (None, None),
        };
        tracing::warn!(
            topic = %self.inner.options.topic,
            partition,
            offset,
            error = %e,
            "decode_error = skip: skipped a record"
        );
        self.inner
            .counters
            .decode_errors_skipped
            .fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The topic read.
    pub fn topic(&self) -> &str {
        &self.inner.options.topic
    }

    /// The inner source's rows, moved back to the first held record of a
    /// partition when a batch is held mid-decode.
    pub fn resume_rows(&self) -> Vec<ResumeRow> {
        let mut rows = self.inner.resume_rows();
        if let Some(held) = &self.held {
            for r in &mut rows {
                if let Some(first) = held
                    .iter()
                    .filter(|m| m.partition == r.partition)
                    .map(|m| m.offset)
                    .min()
                {
                    r.next_offset = r.next_offset.min(first);
                }
            }
        }
        rows
    }
}

impl<B: ConsumerBackend> Source for TextKafkaSource<B> {
    type Item = Text;

    fn restore(&mut self, rows: &[StateRow]) -> Result<()> {
        self.held = None;
        self.inner.restore_rows(rows)
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.open_text())
    }

    fn produce<'a>(&'a mut self, emitter: &'a mut dyn Emitter<Text>) -> BoxFuture<'a, Result<usize>> {
        Box::pin(self.produce_text(emitter))
    }

    fn snapshot(&self) -> Vec<StateRow> {
        self.resume_rows().iter().map(ResumeRow::to_state).collect()
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if let Some(held) = self.held.take() {
                // Positions go back to the held records so a reopen reads them again.
                for (p, first) in held.iter().map(|m| (m.partition, m.offset)) {
                    if let Some(o) = self.inner.assigned.get_mut(&p) {
                        *o = (*o).min(first);
                    }
                }
            }
            self.inner.close_source().await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resume_rows_round_trip_and_foreign_rows_are_ignored() {
        let r = ResumeRow {
            topic: "a.b-c".into(),
            partition: 7,
            next_offset: 42,
        };
        assert_eq!(ResumeRow::from_state(&r.to_state()).unwrap(), Some(r));
        let foreign = StateRow {
            key: "other/thing".into(),
            value: vec![1],
        };
        assert_eq!(ResumeRow::from_state(&foreign).unwrap(), None);
        let bad = StateRow {
            key: "kafka-source/t/x".into(),
            value: b"1".to_vec(),
        };
        assert!(ResumeRow::from_state(&bad).is_err());
        let bad = StateRow {
            key: "kafka-source/t/1".into(),
            value: b"-5".to_vec(),
        };
        assert!(ResumeRow::from_state(&bad).is_err());
    }

    #[test]
    fn ownership_partitions_the_partitions() {
        for n in 1..=4u32 {
            let mut owners = vec![0; 13];
            for i in 0..n {
                let mut o = SourceOptions::new("h:1", "t");
                o.subtask_index = i;
                o.source_parallelism = n;
                for (p, owner) in owners.iter_mut().enumerate() {
                    if o.owns(p as i32) {
                        *owner += 1;
                    }
                }
            }
            assert!(owners.iter().all(|c| *c == 1), "{n}: {owners:?}");
        }
    }
}
