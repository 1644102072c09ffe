//! The connector layer: what the stream engine sees of Kafka.
//!
//! The contract is `shared/reference/kafka-connector-spec.txt` (factory
//! names, option names, defaults, delivery semantics). The engine reaches
//! Kafka through four things, each owned by one file here:
//!
//! - factories looked up by name: [`Registry`] ([`install`], [`BuildContext`]);
//! - string options (a table's `WITH` clause): [`options`] and [`security`];
//!   the SQL front that produces them: [`sql`], with the JSON row bridge
//!   ([`sql::decode_row`], [`columnar`]) and the SQL source table ([`table_source`]);
//! - batches produced and consumed: [`KafkaSource`], [`KafkaSink`],
//!   [`UpsertSink`], [`TwoPhaseCommitSink`] (exactly once), over the record
//!   shapes [`KafkaMessage`] and [`Text`];
//! - checkpoints: [`Source::snapshot`] / [`Source::restore`] and the sink
//!   barrier hooks.
//!
//! Source and sinks are written once over the backend seam
//! ([`ConsumerBackend`], [`ProducerBackend`], [`TransactionalProducerBackend`]); the native client
//! (`crate::client`) implements it, and so does librdkafka in `rdkafka`
//! (cargo feature `rdkafka`, chosen per operator with `backend = 'rdkafka'`).
//!
//! # Public API: one path per item
//!
//! The source, sinks, backends, registry, records and errors live in
//! private modules and are re-exported here (`clink_kafka::connector::KafkaSource`).
//! The other modules are namespaces, each reached only through its own
//! path (none of their items is re-exported elsewhere): [`options`] and
//! [`security`] (the typed options), [`selected`] (the backend chosen by
//! `backend`), [`sql`] (with the JSON row bridge), [`columnar`] and
//! [`table_source`] (the SQL front), [`format`](mod@format) (registry-framed values), [`checkpoint`],
//! [`commit_group`] and [`suppression`] (the exactly-once protocol's
//! pieces), `rdkafka` (feature `rdkafka`) and `fuzzing` (`cfg(fuzzing)`).
//!
//! # Call order the engine guarantees
//!
//! Source: `restore?` → `open` → (`produce` | `snapshot`)* → `close`.
//! `restore` (at most once, before `open`) gets the union of every subtask's
//! rows; `produce` emits at most one batch and returns, and the engine calls
//! it in a loop until it cancels ([`drive`] is that loop), so a `snapshot`
//! always falls on a batch boundary: it covers exactly the records emitted.
//!
//! Sink: `restore?` → `open` → (`on_data`* → `flush`? → `on_barrier(n)`
//! → (`on_commit(n)` | `on_abort(n)`)?)* → `close`. Barriers come in
//! increasing checkpoint order; `on_commit(n)` arrives only after the
//! checkpoint `n` is globally durable, `on_abort(n)` when it failed; either
//! may be skipped (a later commit subsumes an earlier one). A sink whose
//! [`SinkCapabilities::commit_recoverable`] is false puts its job on the
//! commit-confirmed restore protocol (the spec's 2PC sink).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) mod backend;
pub mod checkpoint;
pub mod columnar;
pub mod commit_group;
mod error;
pub mod format;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
pub(crate) mod json_row;
pub mod options;
#[cfg(feature = "rdkafka")]
#[allow(unsafe_code)] // librdkafka FFI; every block carries its safety argument
pub mod rdkafka;
pub(crate) mod record;
pub(crate) mod registry;
pub mod security;
pub mod selected;
pub(crate) mod sink;
pub(crate) mod source;
pub mod sql;
pub mod suppression;
pub mod table_source;
pub(crate) mod twopc;
pub(crate) mod upsert;

pub use backend::{
    ConsumerBackend, DeliveryOutcome, GroupBatch, GroupConsumerBackend, GroupMetadataHandle, GroupRecord,
    NativeConsumer, NativeDelivery, NativeGroupConsumer, NativeProducer, NativeTransactionalProducer, ProducerBackend,
    TransactionalProducerBackend, Watermark,
};
pub use error::{ConnectorError, Result};
pub use record::{Header, KafkaMessage, Text};
pub use registry::{install, BuildContext, BuildFn, Factory, Operator, Registry, FACTORY_NAMES};
pub use sink::{KafkaSink, SinkCounters, TextKafkaSink};
pub use source::{KafkaSource, Origin, ResumeRow, SourceCounters, TextKafkaSource};
pub use twopc::{
    parse_unresolved_marker, Orphan, PendingMarker, Receipt, StagedCheckpoint, TwoPhaseCommitSink, TwoPhaseCommitStats,
    MAX_RECEIPT_FILE, STATE_KEY_PREFIX, TWO_PHASE_COMMIT,
};
#[cfg(feature = "failpoints")]
pub use twopc::{set_step_hook, SinkStep};
pub use upsert::{upsert_action, RowKind, UpsertAction, UpsertSink, ROW_KIND_FIELD};

/// A boxed future, so the engine-facing traits stay object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A batch of records: the unit the engine moves.
pub type Batch<T> = Vec<T>;

/// Where a source puts its batches.
pub trait Emitter<T>: Send {
    /// Hands one batch to the engine.
    fn emit(&mut self, batch: Batch<T>);
}

impl<T: Send> Emitter<T> for Vec<Batch<T>> {
    fn emit(&mut self, batch: Batch<T>) {
        self.push(batch);
    }
}

/// One row of operator state: an opaque key and value the engine stores in
/// its checkpoint. Never carries a secret.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StateRow {
    /// The row's key (unique within one operator's state).
    pub key: String,
    /// The row's value, in the operator's own encoding.
    pub value: Vec<u8>,
}

/// A source: emits batches, snapshots its position.
pub trait Source: Send {
    /// What the source emits: [`KafkaMessage`] or [`Text`].
    type Item: Send;

    /// Hands over the union of restored rows (every subtask's), before
    /// `open`. A source keeps the rows it owns and ignores the rest.
    fn restore(&mut self, rows: &[StateRow]) -> Result<()>;

    /// Connects and positions; after it, `snapshot` has a row per owned partition.
    fn open(&mut self) -> BoxFuture<'_, Result<()>>;

    /// Emits at most one batch; returns how many records it emitted (0 when
    /// nothing arrived within the poll timeout).
    fn produce<'a>(&'a mut self, emitter: &'a mut dyn Emitter<Self::Item>) -> BoxFuture<'a, Result<usize>>;

    /// The rows that resume this source exactly after the last emitted record.
    fn snapshot(&self) -> Vec<StateRow>;

    /// Releases the consumer; the source cannot be used again.
    fn close(&mut self) -> BoxFuture<'_, Result<()>>;
}

/// Delivery guarantee a sink gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Every record acknowledged before a barrier completes; a replay may
    /// duplicate.
    AtLeastOnce,
    /// Records become visible only when their checkpoint commits.
    ExactlyOnce,
}

/// What a sink declares to the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkCapabilities {
    /// What the sink guarantees for every record handed to it.
    pub delivery: DeliveryGuarantee,
    /// Whether a commit can be re-executed at restore (nothing to lose if
    /// the process dies between barrier and commit). `false` puts the job on
    /// the commit-confirmed restore protocol (a broker transaction cannot be
    /// resumed by a new producer).
    pub commit_recoverable: bool,
    /// Whether `on_commit` / `on_abort` do anything (a two-phase sink).
    pub two_phase: bool,
    /// Whether `on_barrier` stages operator state.
    pub stages_state: bool,
}

impl SinkCapabilities {
    /// A plain at-least-once sink: the barrier flushes, commit and abort are
    /// no-ops, so there is no commit to lose.
    pub const AT_LEAST_ONCE: SinkCapabilities = SinkCapabilities {
        delivery: DeliveryGuarantee::AtLeastOnce,
        commit_recoverable: true,
        two_phase: false,
        stages_state: false,
    };
}

/// What a restore found about one restored checkpoint's commit (a
/// `commit_recoverable = false` sink resolves its staged transactions at
/// `open`, before anything can fence them). The coordinator acts on it:
/// see [`checkpoint::decide_restore`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreVerdict {
    /// The commit happened: proven by the sink's receipt (no wire call) or
    /// by the broker (executed or observed by the resolution, or its COMMIT
    /// marker read from the output log).
    Committed {
        /// Whether the sink's own commit receipt proved it (no broker call was made).
        by_receipt: bool,
    },
    /// Final: the records will never be visible (fenced, expired, never
    /// produced). The job must fall back below this checkpoint.
    NotCommitted {
        /// Why, as the resolution found it.
        reason: String,
    },
    /// No verdict: the broker could not be asked (or it no longer knew the
    /// transaction and the log proved neither end). The restart is held;
    /// nothing may fence the transaction meanwhile.
    Unreachable {
        /// Why the broker could not be asked.
        reason: String,
    },
}

/// One restored checkpoint's verdict, as a sink reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointVerdict {
    /// The checkpoint id.
    pub checkpoint: u64,
    /// Records the checkpoint's transaction (or queued segment) held.
    pub records: u64,
    /// What the restore found.
    pub verdict: RestoreVerdict,
}

/// A sink: takes batches, makes them durable at barriers.
pub trait Sink: Send {
    /// What the sink takes: [`KafkaMessage`] or [`Text`].
    type Item: Send;

    /// What the sink guarantees and which protocol calls it uses.
    fn capabilities(&self) -> SinkCapabilities;

    /// Restored rows (the union of every subtask's), before `open`.
    fn restore(&mut self, rows: &[StateRow]) -> Result<()> {
        let _ = rows;
        Ok(())
    }

    /// Connects (and, for a two-phase sink, resolves restored transactions).
    fn open(&mut self) -> BoxFuture<'_, Result<()>>;

    /// What the last `restore` + `open` found for each restored checkpoint
    /// this subtask owed a commit, oldest first (also after an `open` that
    /// failed because a resolution answered Unreachable). Empty for a sink
    /// that resolves nothing (commit-recoverable or stateless).
    fn restore_verdicts(&self) -> Vec<CheckpointVerdict> {
        Vec::new()
    }

    /// Hands over one batch; records may be buffered until `flush` or the next barrier.
    fn on_data(&mut self, batch: Batch<Self::Item>) -> BoxFuture<'_, Result<()>>;

    /// Hands over one batch whose records carry the engine's event times
    /// (milliseconds since the epoch; `None`: none), which a sink with
    /// replay suppression judges the replay by (see
    /// [`suppression`](mod@suppression): a record swallowed by event time
    /// is one strictly below the highest event time the receipted
    /// transactions held, or at or below the receipted watermark; exact
    /// for strictly increasing event times and for windowed emissions
    /// under a watermark). The event time is not written into the record.
    /// The default drops the times and calls [`Self::on_data`].
    fn on_timed_data(&mut self, batch: Batch<(Self::Item, Option<i64>)>) -> BoxFuture<'_, Result<()>> {
        self.on_data(batch.into_iter().map(|(record, _)| record).collect())
    }

    /// Event time: the watermark `watermark` (milliseconds since the
    /// epoch) passed this sink; the engine promises no record at or below
    /// it follows (on the message channel a record's event time is its
    /// timestamp). Watermarks only grow; a lower one is ignored. A 2PC sink
    /// stamps the newest on the next barrier as its receipt's horizon and
    /// retires replay suppression once one passes the armed horizon. Sinks
    /// that do not judge event time ignore it.
    fn on_watermark(&mut self, watermark: i64) {
        let _ = watermark;
    }

    /// The checkpoint the job's sources resume from (`None`: the
    /// beginning), once the coordinator decided it: called after `open`
    /// on every restore that is not a fresh submit, since a fallback can
    /// decide a point below the checkpoint the sink was restored from. A
    /// sink with replay suppression arms it from its receipts above the
    /// point (an error: a receipt is unreadable or corrupt, naming it).
    fn on_restore_point(&mut self, checkpoint: Option<u64>) -> Result<()> {
        let _ = checkpoint;
        Ok(())
    }

    /// Waits until everything handed over so far is acknowledged (or failed).
    fn flush(&mut self) -> BoxFuture<'_, Result<()>>;

    /// The checkpoint `checkpoint_id` passes this sink. Returns the rows to
    /// store in that checkpoint (a 2PC sink's resume handle; none for an
    /// at-least-once sink, which flushes here).
    fn on_barrier(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<Vec<StateRow>>>;

    /// The checkpoint is globally durable.
    fn on_commit(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>>;

    /// The checkpoint failed.
    fn on_abort(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>>;

    /// Flushes what it can and releases the producer; the sink cannot be used again.
    fn close(&mut self) -> BoxFuture<'_, Result<()>>;
}

/// The engine's source loop: `produce` until `cancel` is set. Returns the
/// number of records emitted.
pub async fn drive<S: Source + ?Sized>(
    source: &mut S,
    emitter: &mut dyn Emitter<S::Item>,
    cancel: &AtomicBool,
) -> Result<u64> {
    let mut total = 0u64;
    while !cancel.load(Ordering::Acquire) {
        total += source.produce(emitter).await? as u64;
    }
    Ok(total)
}
