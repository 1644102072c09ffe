//! [`TwoPhaseCommitSink`]: `kafka_2pc_sink_string`, exactly once across
//! process loss, over a [`TransactionalProducerBackend`] (natively
//! [`NativeTransactionalProducer`]). The contract is the spec's
//! "Transactional sink" paragraphs ([KIP-98] transactions, [KIP-890]
//! epoch bumps).
//!
//! # One transaction per checkpoint interval
//!
//! Records are produced inside an open transaction. `on_barrier(n)` flushes
//! it, waits for every acknowledgement and seals it as PREPARED for
//! checkpoint `n`: its state rows carry the [`ResumeHandle`] (transactional
//! id, producer id, epoch, transaction version; never a credential).
//! `on_commit(n)` ends it with EndTxn(commit) and writes a commit receipt;
//! `on_abort(n)` aborts it. A producer has one transaction at a time, so
//! records arriving while a commit is outstanding are buffered app-side;
//! each further barrier seals the buffer into a queued segment, produced
//! into its own transaction when the commits cascade down to it (committed
//! at once when its checkpoint is already committed, otherwise it becomes
//! the prepared one). `close` aborts only the OPEN tail; a barrier-sealed
//! prepared transaction is left pending (the producer is dropped without
//! EndTxn), because its checkpoint may have completed with the commit
//! racing the teardown. Capabilities: two-phase, not commit-recoverable
//! (a broker transaction cannot be resumed by a new producer's init).
//!
//! # Restore and in-doubt resolution
//!
//! `restore(rows)` keeps the rows of this subtask's transactional id (the
//! union carries every subtask's). The engine restores only completed
//! checkpoints, so every prepared handle in them is owed a commit. `open`
//! resolves each, BEFORE `init_transactions` (which fences the old epoch
//! and would abort it): a receipt for it means committed with no wire
//! call; otherwise [`Resolver::resolve`] (FindCoordinator + EndTxn commit
//! with the handle's identity, over the sink's own connection settings).
//! `Committed` writes the missing receipt. A NotCommitted answer only
//! says the coordinator no longer knows the transaction (a fence or the
//! transaction timeout overwrote it, perhaps after its commit landed:
//! "committed, then fenced"), so it is checked against the log first
//! ([`Resolver::resolve_proven`]): the staged row carries each output
//! partition's first offset of the transaction (`written=`, from the
//! delivery reports), and the transaction's COMMIT marker there makes it
//! `Committed` (receipt materialised, counted in
//! [`TwoPhaseCommitStats::resolved_from_log`]); its ABORT marker confirms
//! the answer; a log that proves neither is held like `Unreachable` (never
//! guessed: replaying could publish twice, dropping could lose). A row
//! staged without `written=` keeps the coordinator's answer.
//! `NotCommitted` (fenced, timed out, …; confirmed by the log) is a loss
//! from Kafka's view: an error is logged, an
//! unresolved-orphan marker `sub<K>-<N>.unresolved` is written and the
//! orphan is listed in [`TwoPhaseCommitSink::orphans`]; the sink then opens
//! (the verdict is final, refusing would not bring the records back).
//! `Unreachable` is no verdict: a pending marker (`final=false`) is
//! written and `open` fails with [`ConnectorError::InDoubt`], to be
//! retried. Every pending marker not settled by the restored rows (the
//! engine restored below it) is consumed at the next `open`, still before
//! `init_transactions`: a read-only DescribeTransactions showing
//! CompleteCommit / PrepareCommit under the handle's producer id means the
//! commit landed (the receipt is written there); a transaction the
//! coordinator no longer shows (not the open one) is checked against the
//! log as above when the marker carries `written=`; anything else means the
//! init's abort is legitimate; no answer (or a log that proves neither)
//! fails `open`. A queued segment in a
//! restored checkpoint never reached Kafka (its records lived in the dead
//! process's memory): it is reported the same way as a NotCommitted one.
//!
//! # Receipts and replay suppression
//!
//! A receipt `sub<K>-<N>` (K = subtask index, N = checkpoint) is written
//! under `receipt_dir` (write, fsync, rename, fsync the directory) between
//! the broker's commit acknowledgement and the next transaction's begin. It
//! holds the handle committed; restoring the same handle finds it and
//! counts the commit as done, even if a later fence or the transaction
//! timeout erased the broker's record of it. A receipt carries what its
//! transaction (with the ones before it) covered: per input partition the
//! next offset after the last record the sink got, the highest event time
//! of records without a position ([`Coverage`]), and the watermark horizon
//! its sealing barrier saw ([`Sink::on_watermark`]); the staged row and the
//! unresolved marker carry them too, so a receipt the walk materialises
//! has them. Replay suppression ([`super::suppression`]) arms at `open`
//! from the receipts newer than the restored checkpoint, and again at
//! [`Sink::on_restore_point`] once the coordinator decided the restore
//! point (a fallback decides below it): a replayed record below its input
//! partition's receipted position is swallowed (exact), a record without a
//! position is judged by event time (strictly below its partition's
//! receipted maximum, or at or below the receipted watermark), swallowed
//! records are counted ([`TwoPhaseCommitStats::records_suppressed`]), a
//! record with nothing to judge it by passes through with a loud log; a
//! record that might not have been committed is never swallowed.
//! `replay_suppression = false` never arms (the replay publishes again).
//! Receipts and markers below the newest CONFIRMED checkpoint are pruned by
//! the coordinator ([`super::checkpoint`]). Each restored checkpoint's
//! outcome is reported through [`Sink::restore_verdicts`]; the walk never
//! stops at an Unreachable answer (every later unreceipted handle is probed
//! or marked before `open` fails). `receipt_dir` is given by the registry
//! from the build context (`<checkpoint_dir>/_jobs/<job_id>/receipts`) and
//! probed at `open`; without one the sink warns that receipts live in
//! memory only. Not done: staging a queued segment's records into state (a
//! restored checkpoint whose segment never reached Kafka is reported as an
//! orphan).
//!
//! [KIP-98]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-98+-+Exactly+Once+Delivery+and+Transactional+Messaging
//! [KIP-890]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-890%3A+Transactions+Server-Side+Defense

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::backend::{NativeTransactionalProducer, TransactionalProducerBackend};
use super::error::{ConnectorError, Result};
use super::format::ValueEncoder;
use super::options::TwoPhaseCommitOptions;
use super::record::{KafkaMessage, Text};
use super::sink::open_encoder;
use super::suppression::{
    encode_list, event_time, parse_list, Coverage, CoverageTracker, CoverageWarning, InputPartition, Judgement,
    Receipted, ReplaySuppression,
};
use super::{Batch, BoxFuture, CheckpointVerdict, DeliveryGuarantee, RestoreVerdict, Sink, SinkCapabilities, StateRow};
use crate::client::{Admin, Cluster, Decision, PartitionOffset, Resolver, ResumeHandle, TransactionState, Verdict};
use clink_kafka_wire::KafkaCode;

/// TRANSACTIONAL_ID_NOT_FOUND (KIP-664): nothing to describe, nothing to fence.
const TRANSACTIONAL_ID_NOT_FOUND: KafkaCode = KafkaCode(105);

/// A step inside the sink that a fault-injection harness can stop at (the
/// `clink-kafka copy` job's `CLINK_KAFKA_FAULT`): nothing observes it
/// unless a hook is installed with [`set_step_hook`]. Only with the cargo
/// feature `failpoints` (off by default: a build without it has neither the
/// hook nor the calls).
#[cfg(feature = "failpoints")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SinkStep {
    /// The broker acknowledged a checkpoint's EndTxn(commit); its receipt
    /// is not written yet.
    AfterEndTxn,
    /// At `open`, the resolver committed a restored prepared transaction;
    /// its receipt is not written yet.
    AfterResolvedCommit,
}

#[cfg(feature = "failpoints")]
static STEP_HOOK: std::sync::OnceLock<fn(SinkStep, u32)> = std::sync::OnceLock::new();

/// Installs the process-wide step hook (once; `false` if one was already
/// installed). It gets the step and the sink's subtask index. For fault
/// injection only (cargo feature `failpoints`).
#[cfg(feature = "failpoints")]
pub fn set_step_hook(hook: fn(SinkStep, u32)) -> bool {
    STEP_HOOK.set(hook).is_ok()
}

/// A fail point (TiKV `fail_point!` style): calls the installed step hook
/// with the feature `failpoints`, compiles to nothing without it.
macro_rules! sink_step {
    ($step:ident, $subtask:expr) => {
        #[cfg(feature = "failpoints")]
        {
            if let Some(hook) = STEP_HOOK.get() {
                hook(SinkStep::$step, $subtask);
            }
        }
    };
}

/// What the transactional sink declares.
pub const TWO_PHASE_COMMIT: SinkCapabilities = SinkCapabilities {
    delivery: DeliveryGuarantee::ExactlyOnce,
    commit_recoverable: false,
    two_phase: true,
    stages_state: true,
};

/// State row keys: `kafka_2pc/<percent-encoded transactional id>/<checkpoint>`.
pub const STATE_KEY_PREFIX: &str = "kafka_2pc/";
const STATE_VERSION: &str = "clink-2pc-state/1";

/// One staged checkpoint, as a state row holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedCheckpoint {
    /// The transactional id of the subtask that staged it.
    pub transactional_id: String,
    /// The checkpoint id.
    pub checkpoint: u64,
    /// Records in the checkpoint's transaction (or queued segment).
    pub records: u64,
    /// The prepared transaction's handle; `None` for a queued segment (its
    /// records were still app-side when the barrier passed).
    pub handle: Option<ResumeHandle>,
    /// The watermark the sealing barrier saw (the receipt's horizon; a
    /// receipt the restore walk materialises takes it from here). `None`:
    /// no watermark had reached the sink.
    pub horizon: Option<i64>,
    /// What the transaction (with the ones before it) covered: input
    /// positions and event-time horizons (replay suppression).
    pub coverage: Coverage,
    /// Per output partition the transaction wrote, its first offset there
    /// (from the delivery reports; by partition): where the restore reads
    /// the log for the transaction's marker (`written=`; empty in rows
    /// staged before it existed).
    pub written: Vec<PartitionOffset>,
}

impl StagedCheckpoint {
    /// The row: one printable line as value, `;`-separated (the handle's
    /// text has no `;`: its id is percent-encoded).
    pub fn to_row(&self) -> StateRow {
        let mut state = match &self.handle {
            Some(h) => format!("state=prepared;handle={h}"),
            None => "state=queued".to_owned(),
        };
        if let Some(h) = self.horizon {
            state.push_str(&format!(";horizon={h}"));
        }
        if let Some(p) = &self.coverage.positions {
            state.push_str(&format!(";positions={}", encode_list(p)));
        }
        if !self.coverage.event_max.is_empty() {
            state.push_str(&format!(";event_max={}", encode_list(&self.coverage.event_max)));
        }
        push_written(&mut state, &self.written);
        StateRow {
            key: format!(
                "{STATE_KEY_PREFIX}{}/{}",
                percent_encode(&self.transactional_id),
                self.checkpoint
            ),
            value: format!(
                "{STATE_VERSION};checkpoint={};records={};{state}",
                self.checkpoint, self.records
            )
            .into_bytes(),
        }
    }

    /// Parses a row; `Ok(None)` for a row that is not a 2PC sink's.
    pub fn from_row(row: &StateRow) -> Result<Option<Self>> {
        let Some(rest) = row.key.strip_prefix(STATE_KEY_PREFIX) else {
            return Ok(None);
        };
        let bad = |message: String| ConnectorError::BadState {
            key: row.key.clone(),
            message,
        };
        let (id, cp) = rest
            .rsplit_once('/')
            .ok_or_else(|| bad("no /<checkpoint> in the key".into()))?;
        let transactional_id =
            percent_decode(id).ok_or_else(|| bad("the transactional id is not percent-encoded UTF-8".into()))?;
        let key_checkpoint: u64 = cp
            .parse()
            .map_err(|_| bad(format!("checkpoint {cp:?} is not a number")))?;
        let value = std::str::from_utf8(&row.value).map_err(|_| bad("the value is not UTF-8".into()))?;
        let mut fields = value.split(';');
        if fields.next() != Some(STATE_VERSION) {
            return Err(bad(format!("the value does not start with {STATE_VERSION:?}")));
        }
        let (mut checkpoint, mut records, mut state, mut handle, mut horizon) = (None, None, None, None, None);
        let mut coverage = Coverage::default();
        let mut written = Vec::new();
        for field in fields {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| bad(format!("field {field:?} is not key=value")))?;
            match k {
                "checkpoint" => checkpoint = Some(v.parse::<u64>().map_err(|_| bad(format!("checkpoint {v:?}")))?),
                "records" => records = Some(v.parse::<u64>().map_err(|_| bad(format!("records {v:?}")))?),
                "state" => state = Some(v.to_owned()),
                "horizon" => horizon = Some(v.parse::<i64>().map_err(|_| bad(format!("horizon {v:?}")))?),
                "positions" => coverage.positions = Some(parse_list(v).map_err(|e| bad(format!("positions: {e}")))?),
                "event_max" => coverage.event_max = parse_list(v).map_err(|e| bad(format!("event_max: {e}")))?,
                "written" => written = parse_written(v).map_err(bad)?,
                "handle" => {
                    handle = Some(
                        v.parse::<ResumeHandle>()
                            .map_err(|e| bad(format!("resume handle: {e}")))?,
                    )
                }
                other => return Err(bad(format!("unknown field {other:?}"))),
            }
        }
        let checkpoint = checkpoint.ok_or_else(|| bad("no checkpoint= field".into()))?;
        if checkpoint != key_checkpoint {
            return Err(bad(format!(
                "the key says checkpoint {key_checkpoint}, the value {checkpoint}"
            )));
        }
        let handle = match state.as_deref() {
            Some("prepared") => {
                let h = handle.ok_or_else(|| bad("a prepared checkpoint without handle=".into()))?;
                if h.transactional_id != transactional_id {
                    return Err(bad(format!(
                        "the handle's transactional id {:?} is not the key's {transactional_id:?}",
                        h.transactional_id
                    )));
                }
                Some(h)
            }
            Some("queued") => None,
            other => return Err(bad(format!("state {other:?} is not prepared or queued"))),
        };
        Ok(Some(StagedCheckpoint {
            transactional_id,
            checkpoint,
            records: records.ok_or_else(|| bad("no records= field".into()))?,
            handle,
            horizon,
            coverage,
            written,
        }))
    }
}

/// Keeps the lowest delivered offset per partition (an unknown offset,
/// below 0, is not kept).
fn note_written(written: &mut BTreeMap<i32, i64>, at: PartitionOffset) {
    if at.offset >= 0 && at.partition >= 0 {
        let first = written.entry(at.partition).or_insert(at.offset);
        *first = (*first).min(at.offset);
    }
}

/// The most partitions a `written=` field may name.
const MAX_WRITTEN: usize = 1 << 16;

/// `;written=<partition>@<first offset>,...` (nothing when empty).
fn push_written(state: &mut String, written: &[PartitionOffset]) {
    if written.is_empty() {
        return;
    }
    state.push_str(";written=");
    for (i, w) in written.iter().enumerate() {
        if i > 0 {
            state.push(',');
        }
        state.push_str(&format!("{}@{}", w.partition, w.offset));
    }
}

/// Parses a `written=` value: at most [`MAX_WRITTEN`] `partition@offset`
/// pairs, partitions ascending, both not negative.
fn parse_written(v: &str) -> std::result::Result<Vec<PartitionOffset>, String> {
    let mut out: Vec<PartitionOffset> = Vec::new();
    for (i, pair) in v.split(',').enumerate() {
        if i >= MAX_WRITTEN {
            return Err(format!("written= names more than {MAX_WRITTEN} partitions"));
        }
        let parsed = pair
            .split_once('@')
            .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)));
        let Some((partition, offset)) = parsed.filter(|(p, o)| *p >= 0 && *o >= 0) else {
            let shown: String = pair.chars().take(40).collect();
            return Err(format!("written= entry {shown:?} is not <partition>@<offset>"));
        };
        if out.last().is_some_and(|w| w.partition >= partition) {
            return Err(format!("written= partitions are not ascending at {partition}"));
        }
        out.push(PartitionOffset::new(partition, offset));
    }
    Ok(out)
}

fn percent_encode(s: &str) -> String {
    percent_encode_keeping(s, b"-_.~:")
}

/// `s` with every byte outside `[A-Za-z0-9]` and `keep` as `%XX`.
pub(super) fn percent_encode_keeping(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || keep.contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`percent_encode_keeping`]; `None` for a bad escape or
/// bytes that are not UTF-8.
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            out.push(u8::from_str_radix(s.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A restored checkpoint whose records Kafka will not show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Orphan {
    /// The checkpoint id.
    pub checkpoint: u64,
    /// Records the checkpoint's transaction (or queued segment) held.
    pub records: u64,
    /// The handle, for a prepared transaction; `None` for a queued segment.
    pub handle: Option<ResumeHandle>,
    /// Why: the resolver's verdict, or that the segment was never produced.
    pub reason: String,
    /// The unresolved-orphan marker written, when there is a `receipt_dir`.
    pub marker: Option<PathBuf>,
}

/// What the sink has done (a snapshot of its counters).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TwoPhaseCommitStats {
    /// Records handed to the producer.
    pub records_sent: u64,
    /// Records in transactions this sink committed.
    pub records_committed: u64,
    /// Transactions (with records) this sink committed at `on_commit`.
    pub transactions_committed: u64,
    /// Transactions aborted.
    pub transactions_aborted: u64,
    /// Commit receipts written.
    pub receipts_written: u64,
    /// Restored prepared transactions committed over the wire at `open`
    /// (including those proven by the log).
    pub resolved_over_the_wire: u64,
    /// Of those, commits the coordinator no longer knew (fenced, timed
    /// out) that the log proved: their COMMIT marker.
    pub resolved_from_log: u64,
    /// Restored prepared transactions found receipted (no wire call).
    pub resolved_by_receipt: u64,
    /// Whether replay suppression armed (at `open` or at
    /// [`Sink::on_restore_point`]).
    pub replay_suppression_armed: bool,
    /// The horizon it armed with (the highest receipted horizon above the
    /// restore point).
    pub suppression_horizon: Option<i64>,
    /// Replayed records at or below the horizon, swallowed (published
    /// already by a receipted commit).
    pub records_suppressed: u64,
    /// Input partitions it armed positions for (exact suppression by
    /// input position; 0: by event time only).
    pub suppression_positions: usize,
    /// Records an armed suppression passed through (nothing to judge them by).
    pub suppression_passed_through: u64,
    /// Whether a watermark passed the horizon (suppression retired).
    pub suppression_retired: bool,
    /// Unresolved markers described (read only) at `open`, before fencing.
    pub markers_consumed: u64,
    /// Of those, commits that had landed (now receipted).
    pub markers_found_committed: u64,
    /// `commit_group`: the group's epoch as this sink last saw it (at
    /// `open`, at an abort, at a refused commit); `None` without a group.
    pub commit_group_epoch: Option<u64>,
    /// Commits refused because the commit group had aborted the checkpoint.
    pub commits_refused_by_group: u64,
}

/// Receipts and markers for one subtask, under `receipt_dir` (or in memory).
#[derive(Debug)]
struct ReceiptStore {
    dir: Option<PathBuf>,
    subtask: u32,
    /// Without a directory: checkpoint → receipt.
    memory: BTreeMap<u64, Receipt>,
}

/// The most bytes a receipt or marker file may hold (refused above).
pub const MAX_RECEIPT_FILE: u64 = 64 << 10;

/// A commit receipt `sub<K>-<N>`: the handle whose commit of checkpoint `N`
/// the broker acknowledged, and the watermark horizon its sealing barrier
/// saw. One `key=value` line each; `horizon=` is absent when no watermark
/// had reached the sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The checkpoint id.
    pub checkpoint: u64,
    /// The handle's text ([`ResumeHandle`]'s `Display`).
    pub handle: String,
    /// The newest watermark the sealing barrier saw (milliseconds since the epoch); `None` when none had reached the sink.
    pub horizon: Option<i64>,
    /// What the committed transaction (with the ones before it) covered
    /// (`positions=` / `event_max=` lines; a receipt written before they
    /// existed has neither: positions unknown).
    pub coverage: Coverage,
}

impl Receipt {
    /// The receipt file's text: one `key=value` line per field.
    pub fn to_text(&self) -> String {
        let mut text = format!("checkpoint={}\nhandle={}\n", self.checkpoint, self.handle);
        if let Some(h) = self.horizon {
            text.push_str(&format!("horizon={h}\n"));
        }
        if let Some(p) = &self.coverage.positions {
            text.push_str(&format!("positions={}\n", encode_list(p)));
        }
        if !self.coverage.event_max.is_empty() {
            text.push_str(&format!("event_max={}\n", encode_list(&self.coverage.event_max)));
        }
        text
    }

    /// Parses a receipt's text; the error says what is wrong.
    pub fn parse(text: &str) -> std::result::Result<Receipt, String> {
        let (mut checkpoint, mut handle, mut horizon) = (None, None, None);
        let (mut positions, mut event_max) = (None, None);
        for line in text.lines() {
            let (k, v) = line
                .split_once('=')
                .ok_or_else(|| format!("line {:?} is not key=value", line.chars().take(40).collect::<String>()))?;
            if v.chars().any(char::is_control) {
                return Err(format!(
                    "a control character in {:?}",
                    k.chars().take(40).collect::<String>()
                ));
            }
            let dup = |what: &str| format!("{what}= twice");
            match k {
                "checkpoint" => {
                    let n = v
                        .parse::<u64>()
                        .map_err(|_| format!("checkpoint {v:?} is not a number"))?;
                    if checkpoint.replace(n).is_some() {
                        return Err(dup(k));
                    }
                }
                "handle" => {
                    if handle.replace(v.to_owned()).is_some() {
                        return Err(dup(k));
                    }
                }
                "horizon" => {
                    let h = v.parse::<i64>().map_err(|_| format!("horizon {v:?} is not a number"))?;
                    if horizon.replace(h).is_some() {
                        return Err(dup(k));
                    }
                }
                "positions" => {
                    if positions.replace(parse_list(v)?).is_some() {
                        return Err(dup(k));
                    }
                }
                "event_max" => {
                    if event_max.replace(parse_list(v)?).is_some() {
                        return Err(dup(k));
                    }
                }
                other => {
                    return Err(format!(
                        "unknown field {:?}",
                        other.chars().take(40).collect::<String>()
                    ))
                }
            }
        }
        Ok(Receipt {
            checkpoint: checkpoint.ok_or("no checkpoint= line")?,
            handle: handle.ok_or("no handle= line")?,
            horizon,
            coverage: Coverage {
                positions,
                event_max: event_max.unwrap_or_default(),
            },
        })
    }
}

/// A pending unresolved-orphan marker: the checkpoint, handle and horizon
/// its resolution could not settle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingMarker {
    /// The checkpoint id.
    pub checkpoint: u64,
    /// The transaction's resume handle.
    pub handle: ResumeHandle,
    /// The newest watermark its barrier saw (milliseconds since the epoch), if any.
    pub horizon: Option<i64>,
    /// What its transaction covered (for the receipt a landed commit gets).
    pub coverage: Coverage,
    /// Each output partition's first offset of the transaction (`written=`
    /// line; empty in markers written before it existed).
    pub written: Vec<PartitionOffset>,
}

/// Parses marker `sub<K>-<checkpoint>.unresolved`: `Ok(None)` for a final
/// verdict's marker (a recorded loss, nothing to describe), the error says
/// what is wrong.
pub fn parse_unresolved_marker(checkpoint: u64, text: &str) -> std::result::Result<Option<PendingMarker>, String> {
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name));
    if field("checkpoint=") != Some(checkpoint.to_string().as_str()) {
        return Err(format!("does not name checkpoint {checkpoint}"));
    }
    match field("final=") {
        Some("true") => return Ok(None),
        Some("false") => {}
        _ => return Err("no final=true|false line".into()),
    }
    let handle = field("handle=")
        .ok_or("no handle= line")?
        .parse::<ResumeHandle>()
        .map_err(|e| format!("handle: {e}"))?;
    let horizon = match field("horizon=") {
        None | Some("none") => None,
        Some(h) => Some(h.parse::<i64>().map_err(|_| format!("horizon {h:?} is not a number"))?),
    };
    let coverage = Coverage {
        positions: field("positions=")
            .map(parse_list)
            .transpose()
            .map_err(|e| format!("positions: {e}"))?,
        event_max: field("event_max=")
            .map(parse_list)
            .transpose()
            .map_err(|e| format!("event_max: {e}"))?
            .unwrap_or_default(),
    };
    let written = match field("written=") {
        None => Vec::new(),
        Some(w) => parse_written(w)?,
    };
    Ok(Some(PendingMarker {
        checkpoint,
        handle,
        horizon,
        coverage,
        written,
    }))
}

impl ReceiptStore {
    fn receipt_path(&self, checkpoint: u64) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("sub{}-{checkpoint}", self.subtask)))
    }

    fn marker_path(&self, checkpoint: u64) -> Option<PathBuf> {
        self.dir
            .as_ref()
            .map(|d| d.join(format!("sub{}-{checkpoint}.unresolved", self.subtask)))
    }

    fn io_error(path: &Path, e: std::io::Error) -> ConnectorError {
        ConnectorError::Receipt {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }

    /// Writes `contents` to `path` durably: temporary file, fsync, rename,
    /// fsync of the directory.
    fn write_durably(path: &Path, contents: &str) -> Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| Self::io_error(dir, e))?;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| Self::io_error(&tmp, e))?;
        f.write_all(contents.as_bytes()).map_err(|e| Self::io_error(&tmp, e))?;
        f.sync_all().map_err(|e| Self::io_error(&tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(|e| Self::io_error(path, e))?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Creates the receipt directory and proves it writable (a file
    /// written, fsynced and removed), so an unwritable or full directory
    /// fails `open`, not a commit.
    fn check_writable(&self) -> Result<()> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let probe = dir.join(format!(".sub{}-probe", self.subtask));
        Self::write_durably(&probe, "receipt directory probe\n")?;
        std::fs::remove_file(&probe).map_err(|e| Self::io_error(&probe, e))
    }

    fn write_receipt(
        &mut self,
        checkpoint: u64,
        handle: &ResumeHandle,
        horizon: Option<i64>,
        coverage: &Coverage,
    ) -> Result<()> {
        let receipt = Receipt {
            checkpoint,
            handle: handle.to_string(),
            horizon,
            coverage: coverage.clone(),
        };
        match self.receipt_path(checkpoint) {
            Some(path) => Self::write_durably(&path, &receipt.to_text())?,
            None => {
                self.memory.insert(checkpoint, receipt);
            }
        }
        Ok(())
    }

    /// Reads a bounded file as text; `Ok(None)` when it does not exist.
    fn read_small(path: &Path) -> Result<Option<String>> {
        let corrupt = |message: String| ConnectorError::Receipt {
            path: path.display().to_string(),
            message,
        };
        match std::fs::metadata(path) {
            Ok(m) if m.len() > MAX_RECEIPT_FILE => {
                return Err(corrupt(format!("corrupt or foreign: {} bytes", m.len())))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io_error(path, e)),
        }
        let bytes = std::fs::read(path).map_err(|e| Self::io_error(path, e))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| corrupt("corrupt or foreign: not UTF-8 text".into()))
    }

    /// This subtask's receipt of `checkpoint`, checked.
    fn receipt(&self, checkpoint: u64) -> Result<Option<Receipt>> {
        let Some(path) = self.receipt_path(checkpoint) else {
            return Ok(self.memory.get(&checkpoint).cloned());
        };
        let Some(text) = Self::read_small(&path)? else {
            return Ok(None);
        };
        let receipt = Receipt::parse(&text)
            .and_then(|r| {
                if r.checkpoint == checkpoint {
                    Ok(r)
                } else {
                    Err(format!("names checkpoint {}", r.checkpoint))
                }
            })
            .map_err(|m| ConnectorError::Receipt {
                path: path.display().to_string(),
                message: format!("corrupt or foreign receipt: {m}"),
            })?;
        Ok(Some(receipt))
    }

    /// Whether checkpoint `checkpoint`'s commit of `handle` is receipted.
    fn has_receipt(&self, checkpoint: u64, handle: &ResumeHandle) -> Result<bool> {
        Ok(self
            .receipt(checkpoint)?
            .is_some_and(|r| r.handle == handle.to_string()))
    }

    /// This subtask's receipts of checkpoints above `checkpoint`, oldest first.
    fn receipts_above(&self, checkpoint: u64) -> Result<Vec<Receipt>> {
        let Some(dir) = &self.dir else {
            return Ok(self.memory.range(checkpoint + 1..).map(|(_, r)| r.clone()).collect());
        };
        let prefix = format!("sub{}-", self.subtask);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(Vec::new());
        };
        let mut ids: Vec<u64> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_prefix(&prefix)?.parse::<u64>().ok())
            .filter(|n| *n > checkpoint)
            .collect();
        ids.sort_unstable();
        let mut out = Vec::new();
        for n in ids {
            out.extend(self.receipt(n)?);
        }
        Ok(out)
    }

    /// Markers left by an unresolved (unreachable) resolution, oldest first.
    fn pending_markers(&self) -> Result<Vec<PendingMarker>> {
        let Some(dir) = &self.dir else {
            return Ok(Vec::new());
        };
        let prefix = format!("sub{}-", self.subtask);
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            let Some(n) = name.to_str().and_then(|n| {
                n.strip_prefix(&prefix)?
                    .strip_suffix(".unresolved")?
                    .parse::<u64>()
                    .ok()
            }) else {
                continue;
            };
            let path = entry.path();
            let corrupt = |what: String| ConnectorError::Receipt {
                path: path.display().to_string(),
                message: format!("corrupt or foreign unresolved marker: {what}"),
            };
            let Some(text) = Self::read_small(&path)? else { continue };
            out.extend(parse_unresolved_marker(n, &text).map_err(corrupt)?);
        }
        out.sort_by_key(|m| m.checkpoint);
        Ok(out)
    }

    /// Writes `sub<K>-<N>.unresolved`. `final_verdict`: the broker answered
    /// "not committed" (the marker records a loss); otherwise nothing is
    /// known yet and the next `open` describes the transaction before its
    /// init can fence it.
    fn write_marker(&self, orphan: &StagedCheckpoint, reason: &str, final_verdict: bool) -> Result<Option<PathBuf>> {
        let Some(path) = self.marker_path(orphan.checkpoint) else {
            return Ok(None);
        };
        let handle = match &orphan.handle {
            Some(h) => h.to_string(),
            None => "none (queued segment, never produced)".into(),
        };
        let mut contents = format!(
            "checkpoint={}\nrecords={}\ntransactional_id={}\nhandle={handle}\nhorizon={}\nfinal={final_verdict}\nreason={}\n",
            orphan.checkpoint,
            orphan.records,
            percent_encode(&orphan.transactional_id),
            orphan.horizon.map_or("none".to_owned(), |h| h.to_string()),
            reason.replace('\n', " ")
        );
        if let Some(p) = &orphan.coverage.positions {
            contents.push_str(&format!("positions={}\n", encode_list(p)));
        }
        if !orphan.coverage.event_max.is_empty() {
            contents.push_str(&format!("event_max={}\n", encode_list(&orphan.coverage.event_max)));
        }
        let mut written = String::new();
        push_written(&mut written, &orphan.written);
        if let Some(w) = written.strip_prefix(';') {
            contents.push_str(w);
            contents.push('\n');
        }
        Self::write_durably(&path, &contents)?;
        Ok(Some(path))
    }

    fn retire_marker(&self, checkpoint: u64) {
        if let Some(path) = self.marker_path(checkpoint) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The barrier-sealed transaction awaiting its checkpoint's commit.
#[derive(Debug)]
struct Prepared {
    checkpoint: u64,
    records: u64,
    handle: ResumeHandle,
    /// The watermark its sealing barrier saw.
    horizon: Option<i64>,
    coverage: Coverage,
    /// Each partition's first offset of it.
    written: Vec<PartitionOffset>,
}

/// Records sealed by a barrier while an earlier commit was outstanding.
#[derive(Debug)]
struct Segment {
    checkpoint: u64,
    records: Vec<KafkaMessage>,
    horizon: Option<i64>,
    coverage: Coverage,
}

/// The two-phase-commit Kafka sink.
pub struct TwoPhaseCommitSink<B: TransactionalProducerBackend = NativeTransactionalProducer> {
    options: TwoPhaseCommitOptions,
    transactional_id: String,
    /// `None` once closed.
    backend: Option<B>,
    opened: bool,
    /// [`Self::resolve_before_open`] ran for the current restore.
    resolved_before_open: bool,
    /// Rows of this subtask handed to `restore`, resolved at `open`.
    restored: Vec<StagedCheckpoint>,
    /// The open tail's transaction: begun, with this many records sent.
    open_records: Option<u64>,
    pending: Vec<B::Delivery>,
    /// The open transaction's first offset per partition (delivery reports).
    open_written: BTreeMap<i32, i64>,
    prepared: Option<Prepared>,
    queued: VecDeque<Segment>,
    /// Records that arrived while a commit was outstanding, not yet sealed.
    buffer: Vec<KafkaMessage>,
    receipts: ReceiptStore,
    orphans: Vec<Orphan>,
    /// What the last restore found, per restored checkpoint.
    verdicts: Vec<CheckpointVerdict>,
    stats: TwoPhaseCommitStats,
    /// The newest watermark that reached the sink ([`Sink::on_watermark`]).
    watermark: Option<i64>,
    suppression: ReplaySuppression,
    suppression_warned: bool,
    /// What this sink got in its life (staged at each barrier).
    coverage: CoverageTracker,
    /// `format = avro|…`: rows encoded before they are sent (made at open).
    encoder: Option<ValueEncoder>,
    /// `delivered` (records in committed transactions) and
    /// `delivery_errors` (failed commits) as series (`crate::metrics`).
    series: crate::metrics::ConnectorSeries,
    /// `commit_group`: the group whose aborts this sink shares.
    group: Option<super::commit_group::CommitGroup>,
}

impl<B: TransactionalProducerBackend> fmt::Debug for TwoPhaseCommitSink<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoPhaseCommitSink")
            .field("topic", &self.options.sink.topic)
            .field("transactional_id", &self.transactional_id)
            .field("opened", &self.opened)
            .field("prepared", &self.prepared.as_ref().map(|p| p.checkpoint))
            .field("queued", &self.queued.iter().map(|s| s.checkpoint).collect::<Vec<_>>())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl TwoPhaseCommitSink<NativeTransactionalProducer> {
    /// A sink over the native client; refuses what it cannot honour here,
    /// before any I/O.
    pub fn new(options: TwoPhaseCommitOptions) -> Result<Self> {
        let backend = NativeTransactionalProducer::new(options.sink.client_config()?, options.sink.producer_config()?);
        Ok(TwoPhaseCommitSink::with_backend(options, backend))
    }
}

impl<B: TransactionalProducerBackend> TwoPhaseCommitSink<B> {
    /// A 2PC sink writing through `backend`; nothing connects before `open`.
    pub fn with_backend(options: TwoPhaseCommitOptions, backend: B) -> Self {
        let transactional_id = options.subtask_transactional_id();
        let receipts = ReceiptStore {
            dir: options.receipt_dir.clone(),
            subtask: options.subtask_index,
            memory: BTreeMap::new(),
        };
        let series = crate::metrics::ConnectorSeries::sink(
            options.sink.metric_prefix.as_deref(),
            &options.sink.topic,
            options.subtask_index,
        );
        let group = options
            .commit_group
            .as_deref()
            .map(super::commit_group::CommitGroup::named);
        TwoPhaseCommitSink {
            series,
            group,
            options,
            transactional_id,
            backend: Some(backend),
            opened: false,
            resolved_before_open: false,
            restored: Vec::new(),
            open_records: None,
            pending: Vec::new(),
            open_written: BTreeMap::new(),
            prepared: None,
            queued: VecDeque::new(),
            buffer: Vec::new(),
            receipts,
            orphans: Vec::new(),
            verdicts: Vec::new(),
            stats: TwoPhaseCommitStats::default(),
            watermark: None,
            suppression: ReplaySuppression::off(),
            suppression_warned: false,
            coverage: CoverageTracker::new(),
            encoder: None,
        }
    }

    /// The options the sink was built from.
    pub fn options(&self) -> &TwoPhaseCommitOptions {
        &self.options
    }

    /// This subtask's transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// A snapshot of the sink's counters.
    pub fn stats(&self) -> TwoPhaseCommitStats {
        self.stats.clone()
    }

    /// Restored checkpoints whose records Kafka will not show (found at `open`).
    pub fn orphans(&self) -> &[Orphan] {
        &self.orphans
    }

    /// What the last `restore` + `open` found per restored checkpoint (see
    /// [`Sink::restore_verdicts`]).
    pub fn verdicts(&self) -> &[CheckpointVerdict] {
        &self.verdicts
    }

    fn record_verdict(&mut self, staged: &StagedCheckpoint, verdict: RestoreVerdict) {
        self.verdicts.push(CheckpointVerdict {
            checkpoint: staged.checkpoint,
            records: staged.records,
            verdict,
        });
    }

    /// The checkpoint of the prepared transaction awaiting its commit.
    pub fn prepared_checkpoint(&self) -> Option<u64> {
        self.prepared.as_ref().map(|p| p.checkpoint)
    }

    /// The identity the open (or next) transaction runs under.
    pub fn identity(&self) -> Option<ResumeHandle> {
        self.backend.as_ref().and_then(|b| b.identity())
    }

    fn backend(&mut self) -> Result<&mut B> {
        match (self.opened, self.backend.as_mut()) {
            (true, Some(b)) => Ok(b),
            (false, Some(_)) => Err(ConnectorError::CallOrder {
                call: "the two-phase-commit sink",
                problem: "before open",
            }),
            (_, None) => Err(ConnectorError::CallOrder {
                call: "the two-phase-commit sink",
                problem: "after close",
            }),
        }
    }

    fn timeout(&self) -> Duration {
        self.options.sink.flush_timeout.max(self.options.transaction_timeout)
    }

    /// Keeps this subtask's rows (by transactional id).
    pub fn restore_rows(&mut self, rows: &[StateRow]) -> Result<()> {
        let mut own = Vec::new();
        for row in rows {
            if let Some(staged) = StagedCheckpoint::from_row(row)? {
                if staged.transactional_id == self.transactional_id {
                    own.push(staged);
                }
            }
        }
        own.sort_by_key(|s| s.checkpoint);
        own.dedup_by_key(|s| s.checkpoint);
        self.restored = own;
        self.resolved_before_open = false;
        Ok(())
    }

    /// The first half of [`open_sink`](Self::open_sink): resolves what was
    /// restored (and the pending unresolved markers) without fencing
    /// anything. A driver with several subtasks runs it for every subtask
    /// before it opens any (the cross-subtask walk): a walk held by an
    /// unreachable cluster then ends without a single `init_transactions`
    /// (on the rdkafka backend an init against an unreachable cluster
    /// waits up to `transaction_timeout_ms`, long enough for the broker to
    /// time out the very transactions the walk is holding for). Runs once
    /// per restore; [`open_sink`](Self::open_sink) runs it when the driver
    /// did not.
    ///
    /// Cancellation: dropped part-way, it has fenced nothing (no init
    /// runs here), but verdicts it reached are not kept; calling it (or
    /// `open_sink`) again resolves every restored handle again, and a
    /// transaction already committed answers as committed.
    pub async fn resolve_before_open(&mut self) -> Result<()> {
        if self.opened || self.resolved_before_open {
            return Ok(());
        }
        if self.backend.is_none() {
            return Err(ConnectorError::CallOrder {
                call: "open",
                problem: "after close",
            });
        }
        self.verdicts.clear();
        self.receipts.check_writable()?;
        if self.receipts.dir.is_none() {
            tracing::warn!(transactional_id = %self.transactional_id,
                "commit receipts are kept in memory only: a crash loses them, and with them the proof of commits \
                 the broker may later deny (set receipt_dir, or build with a checkpoint directory)");
        }
        let restored = self.restored.clone();
        if restored.iter().any(|s| s.records > 0) {
            self.resolve_restored(&restored).await?;
        }
        self.consume_markers().await?;
        self.resolved_before_open = true;
        Ok(())
    }

    /// Resolves what was restored ([`resolve_before_open`](Self::resolve_before_open),
    /// unless the driver ran it), then runs `init_transactions` (which
    /// fences every older producer of the id).
    pub async fn open_sink(&mut self) -> Result<()> {
        if self.opened {
            return Ok(());
        }
        self.resolve_before_open().await?;
        let restore_point = self.restored.iter().map(|s| s.checkpoint).max();
        let id = self.transactional_id.clone();
        let timeout = self.options.transaction_timeout;
        let handle = self
            .backend
            .as_mut()
            .expect("checked above")
            .init_transactions(&id, timeout)
            .await?;
        tracing::info!(transactional_id = %id, handle = %handle, "two-phase-commit sink open");
        if let Some(group) = &self.group {
            let epoch = group.join(&id);
            self.stats.commit_group_epoch = Some(epoch);
            tracing::info!(transactional_id = %id, commit_group = %group.name(), epoch,
                "joined the commit group: an abort issued to any member aborts that checkpoint for every member");
        }
        self.restored.clear();
        self.opened = true;
        self.resolved_before_open = false;
        if let Some(point) = restore_point {
            self.arm_suppression(point)?;
        }
        Ok(())
    }

    /// Arms replay suppression from this subtask's receipts above the
    /// restore point `point` (their commits are published; the replay
    /// re-emits their records): by input position where the receipts
    /// carry positions, by event time otherwise ([`super::suppression`]).
    /// Receipts with nothing to judge by are warned about; their replay is
    /// published again.
    fn arm_suppression(&mut self, point: u64) -> Result<()> {
        let newer = self.receipts.receipts_above(point)?;
        self.suppression = ReplaySuppression::off();
        self.stats.replay_suppression_armed = false;
        self.stats.suppression_horizon = None;
        self.stats.suppression_positions = 0;
        if newer.is_empty() {
            return Ok(());
        }
        let receipted: Vec<u64> = newer.iter().map(|r| r.checkpoint).collect();
        let id = self.transactional_id.clone();
        if !self.options.replay_suppression {
            tracing::warn!(transactional_id = %id, restore_point = point, receipted = ?receipted,
                "replay_suppression = false: this subtask committed checkpoints above the restore point, and the \
                 replay publishes their records again");
            return Ok(());
        }
        let blind: Vec<u64> = newer
            .iter()
            .filter(|r| r.horizon.is_none() && r.coverage.positions.is_none() && r.coverage.event_max.is_empty())
            .map(|r| r.checkpoint)
            .collect();
        if !blind.is_empty() {
            tracing::warn!(transactional_id = %id, receipted = ?blind,
                "receipts with neither input positions nor an event-time horizon: their replayed records cannot \
                 be judged and are published again");
        }
        self.suppression = ReplaySuppression::arm(
            newer.iter().map(|r| Receipted {
                horizon: r.horizon,
                coverage: &r.coverage,
            }),
            self.watermark,
        );
        self.stats.replay_suppression_armed = self.suppression.is_armed();
        self.stats.suppression_horizon = self.suppression.horizon();
        let positions = self.suppression.positions();
        self.stats.suppression_positions = positions.len();
        if self.suppression.is_armed() {
            let shown: Vec<String> = positions
                .iter()
                .take(16)
                .map(|(k, o)| {
                    format!(
                        "{}{}<{o}",
                        if k.topic.is_empty() {
                            String::new()
                        } else {
                            format!("{}/", k.topic)
                        },
                        k.partition
                    )
                })
                .collect();
            tracing::warn!(transactional_id = %id, restore_point = point, receipted = ?receipted,
                positions = ?shown, horizon = ?self.suppression.horizon(),
                event_horizons = self.suppression.event_horizons().len(),
                "replay suppression armed: replayed records the receipts cover are swallowed");
        }
        Ok(())
    }

    /// The sink's side of [`Sink::on_restore_point`].
    pub fn restore_point(&mut self, checkpoint: Option<u64>) -> Result<()> {
        self.arm_suppression(checkpoint.unwrap_or(0))
    }

    /// The sink's side of [`Sink::on_watermark`]: the next barrier's
    /// horizon; retires an armed suppression once past its horizon.
    pub fn watermark(&mut self, watermark: i64) {
        if self.watermark.is_some_and(|w| w >= watermark) {
            return;
        }
        self.watermark = Some(watermark);
        if self.suppression.handle_watermark(watermark) {
            self.stats.suppression_retired = true;
            tracing::info!(transactional_id = %self.transactional_id, watermark,
                suppressed = self.suppression.swallowed(), "replay suppression retired: the watermark passed what \
                the receipts cover");
        }
    }

    /// Resolves every restored handle, oldest first. The walk never stops
    /// early: an Unreachable answer marks that handle (a pending marker) and
    /// the walk goes on, so every unreceipted handle above it is probed or
    /// marked too, before `open` fails with [`ConnectorError::InDoubt`].
    async fn resolve_restored(&mut self, restored: &[StagedCheckpoint]) -> Result<()> {
        let mut resolver: Option<Resolver> = None;
        let mut unresolved: Option<(u64, String, String)> = None;
        for staged in restored.iter().filter(|s| s.records > 0) {
            let Some(handle) = &staged.handle else {
                let reason = "a queued segment: its records waited app-side behind an outstanding commit and \
                              were never produced"
                    .to_owned();
                self.orphan(staged, reason)?;
                continue;
            };
            if self.receipts.has_receipt(staged.checkpoint, handle)? {
                tracing::info!(checkpoint = staged.checkpoint, handle = %handle,
                    "restored prepared transaction is receipted: committed");
                self.stats.resolved_by_receipt += 1;
                self.receipts.retire_marker(staged.checkpoint);
                self.record_verdict(staged, RestoreVerdict::Committed { by_receipt: true });
                continue;
            }
            if resolver.is_none() {
                resolver = Some(
                    Resolver::new(self.options.sink.client_config()?)
                        .with_unreachable_after(self.options.resolve_unreachable_after),
                );
            }
            let topic = self.options.sink.topic.clone();
            let verdict = resolver
                .as_ref()
                .expect("set above")
                .resolve_proven(handle, Decision::Commit, Some((&topic, &staged.written)))
                .await;
            match verdict {
                Verdict::Committed { .. } => {
                    sink_step!(AfterResolvedCommit, self.options.subtask_index);
                    tracing::info!(checkpoint = staged.checkpoint, handle = %handle, verdict = %verdict,
                        "restored prepared transaction committed");
                    self.stats.resolved_over_the_wire += 1;
                    self.note_log_proof(staged, &verdict);
                    self.receipts
                        .write_receipt(staged.checkpoint, handle, staged.horizon, &staged.coverage)?;
                    self.stats.receipts_written += 1;
                    self.receipts.retire_marker(staged.checkpoint);
                    self.record_verdict(staged, RestoreVerdict::Committed { by_receipt: false });
                }
                Verdict::NotCommitted { .. } => {
                    self.orphan(staged, verdict.to_string())?;
                }
                Verdict::Unreachable { .. } => {
                    let reason = verdict.to_string();
                    let marker = self.receipts.write_marker(staged, &reason, false)?;
                    tracing::error!(checkpoint = staged.checkpoint, handle = %handle, verdict = %verdict,
                        marker = ?marker, "restored prepared transaction is unresolved; refusing to open (opening \
                        would fence it)");
                    self.record_verdict(staged, RestoreVerdict::Unreachable { reason: reason.clone() });
                    unresolved.get_or_insert((staged.checkpoint, staged.transactional_id.clone(), reason));
                }
            }
        }
        if let Some((checkpoint, transactional_id, detail)) = unresolved {
            return Err(ConnectorError::InDoubt {
                transactional_id,
                checkpoint,
                detail,
            });
        }
        Ok(())
    }

    /// Before `init_transactions` fences them: each transaction an earlier
    /// unreachable resolution left marked is described (read only). A
    /// commit that landed (CompleteCommit / PrepareCommit under the
    /// handle's producer id) gets its receipt; one the coordinator no longer
    /// shows (overwritten by a fence or a timeout: not the open transaction
    /// itself) is checked against the log when the marker names its first
    /// offsets ([`Self::proven_from_log`]); anything else is undecided or
    /// aborted, so the init's abort is legitimate and the replay owes it.
    /// While no broker answers (or the log proves neither), `open` fails
    /// rather than fence blind.
    async fn consume_markers(&mut self) -> Result<()> {
        let pending: Vec<PendingMarker> = self
            .receipts
            .pending_markers()?
            .into_iter()
            .filter(|m| m.handle.transactional_id == self.transactional_id)
            .collect();
        let Some(first) = pending.first().map(|m| m.checkpoint) else {
            return Ok(());
        };
        let transactional_id = self.transactional_id.clone();
        let in_doubt = |checkpoint: u64, detail: String| ConnectorError::InDoubt {
            transactional_id: transactional_id.clone(),
            checkpoint,
            detail,
        };
        let cluster = Cluster::connect(self.options.sink.client_config()?)
            .await
            .map_err(|e| in_doubt(first, format!("describing a marked transaction before fencing it: {e}")))?;
        let admin = Admin::new(cluster);
        for PendingMarker {
            checkpoint,
            handle,
            horizon,
            coverage,
            written,
        } in &pending
        {
            let described = admin
                .describe_transactions(&[handle.transactional_id.as_str()])
                .await
                .map_err(|e| in_doubt(*checkpoint, format!("describing before fencing: {e}")))?;
            // `open`: the marked transaction itself is still running.
            let (mut landed, open) = match described.into_iter().next().map(|(_, d)| d) {
                Some(Ok(d)) => (
                    matches!(
                        d.state,
                        TransactionState::CompleteCommit | TransactionState::PrepareCommit
                    ) && d.producer_id == handle.producer_id
                        && d.producer_epoch >= handle.producer_epoch,
                    d.state == TransactionState::Ongoing
                        && d.producer_id == handle.producer_id
                        && d.producer_epoch == handle.producer_epoch,
                ),
                Some(Err(e)) if e.kafka_code() == Some(TRANSACTIONAL_ID_NOT_FOUND) => (false, false),
                Some(Err(e)) => return Err(in_doubt(*checkpoint, format!("describing before fencing: {e}"))),
                None => return Err(in_doubt(*checkpoint, "DescribeTransactions answered nothing".into())),
            };
            if !landed && !open && !written.is_empty() {
                // Overwritten since (fenced, timed out): the log may still
                // hold its commit ("committed, then fenced").
                landed = self.proven_from_log(*checkpoint, handle, written).await?;
            }
            self.stats.markers_consumed += 1;
            if landed {
                tracing::info!(checkpoint, handle = %handle, "a marked transaction's commit landed: receipted");
                self.receipts.write_receipt(*checkpoint, handle, *horizon, coverage)?;
                self.stats.receipts_written += 1;
                self.stats.markers_found_committed += 1;
            } else {
                tracing::warn!(checkpoint, handle = %handle,
                    "a marked transaction is not committed: init_transactions aborts it, the replay owes it");
            }
            self.receipts.retire_marker(*checkpoint);
        }
        Ok(())
    }

    /// A marked transaction the coordinator no longer shows: its COMMIT
    /// marker proves it landed, its ABORT marker that it did not; a log
    /// that proves neither fails `open` (held, not fenced blind).
    async fn proven_from_log(
        &mut self,
        checkpoint: u64,
        handle: &ResumeHandle,
        written: &[PartitionOffset],
    ) -> Result<bool> {
        let limits = crate::client::LogProofLimits {
            timeout: self.options.resolve_unreachable_after,
            ..crate::client::LogProofLimits::default()
        };
        let config = self.options.sink.client_config()?;
        match crate::client::prove_from_log(&config, handle, &self.options.sink.topic, written, limits).await {
            crate::client::LogProof::Committed { partition, offset, .. } => {
                self.stats.resolved_from_log += 1;
                tracing::warn!(checkpoint, handle = %handle, partition, offset,
                    "commit proven from the log: a marked transaction the coordinator no longer shows committed");
                Ok(true)
            }
            crate::client::LogProof::Aborted { .. } => Ok(false),
            crate::client::LogProof::Undecided { detail } => Err(ConnectorError::InDoubt {
                transactional_id: self.transactional_id.clone(),
                checkpoint,
                detail: format!(
                    "a marked transaction the coordinator no longer shows; the log proves neither: {detail}"
                ),
            }),
        }
    }

    /// Counts and logs a commit the log proved (the coordinator had
    /// forgotten it: without the marker it would have been replayed).
    fn note_log_proof(&mut self, staged: &StagedCheckpoint, verdict: &Verdict) {
        if let Verdict::Committed {
            proof: crate::client::CommitProof::LogMarker { .. },
        } = verdict
        {
            self.stats.resolved_from_log += 1;
            tracing::warn!(transactional_id = %staged.transactional_id, checkpoint = staged.checkpoint,
                verdict = %verdict, "commit proven from the log: the coordinator no longer knew this transaction, \
                its COMMIT marker is in the output partition");
        }
    }

    fn orphan(&mut self, staged: &StagedCheckpoint, reason: String) -> Result<()> {
        let marker = self.receipts.write_marker(staged, &reason, true)?;
        self.record_verdict(staged, RestoreVerdict::NotCommitted { reason: reason.clone() });
        tracing::error!(transactional_id = %staged.transactional_id, checkpoint = staged.checkpoint,
            records = staged.records, reason = %reason, marker = ?marker,
            "a completed checkpoint's records are not committed in Kafka and will not be: unresolved orphan");
        self.orphans.push(Orphan {
            checkpoint: staged.checkpoint,
            records: staged.records,
            handle: staged.handle.clone(),
            reason,
            marker,
        });
        Ok(())
    }

    /// Produces into the open tail, or buffers while a commit is outstanding.
    /// Each record's input position (`partition`, `offset`) and event time
    /// (its timestamp) feed replay suppression; all records are taken as
    /// read from ONE input topic (several: [`Self::send_batch_from`]).
    ///
    /// Cancel safety: not cancel safe (a dropped call may have produced
    /// part of the batch into the open transaction).
    pub async fn send_batch(&mut self, batch: Batch<KafkaMessage>) -> Result<()> {
        self.send_batch_from("", batch).await
    }

    /// [`Self::send_batch`] for records read from input topic `topic`:
    /// replay suppression keys input positions by (topic, partition), so a
    /// sink fed from several input topics must name each batch's.
    ///
    /// Cancel safety: as [`Self::send_batch`].
    pub async fn send_batch_from(&mut self, topic: &str, batch: Batch<KafkaMessage>) -> Result<()> {
        let timed = batch
            .into_iter()
            .map(|m| {
                let t = event_time(m.timestamp);
                (m, t)
            })
            .collect();
        self.send_timed(topic, timed).await
    }

    /// Records with the event time suppression judges them by (`None`:
    /// none), the record's own timestamp left as it is.
    async fn send_timed(&mut self, topic: &str, batch: Vec<(KafkaMessage, Option<i64>)>) -> Result<()> {
        self.backend()?;
        let batch = self.judge(topic, batch);
        if self.prepared.is_some() {
            self.buffer.extend(batch);
            return Ok(());
        }
        self.produce_into_open(batch).await
    }

    /// Tracks every record's coverage; drops the records an armed
    /// suppression swallows; counts both kinds.
    fn judge(&mut self, topic: &str, batch: Vec<(KafkaMessage, Option<i64>)>) -> Vec<KafkaMessage> {
        let mut key = InputPartition::new(topic, -1);
        let mut out = Vec::with_capacity(batch.len());
        for (m, t) in batch {
            key.partition = m.partition.max(-1);
            let offset = if m.partition >= 0 { m.offset.max(-1) } else { -1 };
            if let Some(w) = self.coverage.observe(&key, offset, t) {
                self.warn_coverage(w);
            }
            if self.suppression.is_armed() && self.suppression.judge(&key, offset, t) == Judgement::Swallow {
                continue;
            }
            out.push(m);
        }
        if self.stats.replay_suppression_armed {
            self.stats.records_suppressed = self.suppression.swallowed();
            if !self.suppression.is_armed() && !self.stats.suppression_retired {
                self.stats.suppression_retired = true;
                tracing::info!(transactional_id = %self.transactional_id, suppressed = self.suppression.swallowed(),
                    "replay suppression retired: every replayed record the receipts cover has passed");
            }
        }
        let unjudged = self.suppression.unjudged();
        if unjudged > self.stats.suppression_passed_through {
            self.stats.suppression_passed_through = unjudged;
            if !self.suppression_warned {
                self.suppression_warned = true;
                tracing::warn!(transactional_id = %self.transactional_id, horizon = ?self.suppression.horizon(),
                    "replay suppression is armed but a record carries neither an input position nor an event time \
                     it can be judged by: passing it through (it may be a duplicate; counted in \
                     suppression_passed_through)");
            }
        }
        out
    }

    fn warn_coverage(&self, warning: CoverageWarning) {
        let id = &self.transactional_id;
        match warning {
            CoverageWarning::OffsetsOutOfOrder {
                input,
                offset,
                position,
            } => tracing::warn!(transactional_id = %id, topic = %input.topic, partition = input.partition, offset,
                position, "input offsets went back in one (topic, partition): several input topics under one key \
                (name them: send_batch_from) or a source that seeked; later receipts carry no input positions and \
                their replay is published again"),
            CoverageWarning::EventTimeDecreased {
                input,
                event_time,
                last,
            } => tracing::warn!(transactional_id = %id, topic = %input.topic, partition = input.partition,
                event_time, last, "an event time decreased: replay suppression by event time cannot be exact for \
                this partition; later receipts carry no event-time horizon for it (its replay is published again)"),
            CoverageWarning::EventTimeRepeated { input, event_time } => tracing::warn!(transactional_id = %id,
                topic = %input.topic, partition = input.partition, event_time, "an event time repeated: replay \
                suppression by event time is exact only for strictly increasing event times; replayed records at \
                the receipted horizon are published again (a duplicate, never a loss)"),
        }
    }

    /// The watermark a barrier stages (none once an abort stopped the
    /// coverage: the aborted records lie below it).
    fn staged_watermark(&self) -> Option<i64> {
        (!self.coverage.stopped()).then_some(self.watermark).flatten()
    }

    async fn produce_into_open(&mut self, batch: Vec<KafkaMessage>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        if self.open_records.is_none() {
            self.backend()?.begin_transaction()?;
            self.open_records = Some(0);
            self.open_written.clear();
        }
        let topic = self.options.sink.topic.clone();
        let partition = self.options.sink.fixed_partition;
        let produce_timeout = self.options.sink.produce_timeout;
        for message in batch {
            let backend = self.backend.as_ref().expect("open");
            let delivery = match tokio::time::timeout(produce_timeout, backend.send(&topic, partition, message)).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(ConnectorError::Client(crate::error::Error::Timeout {
                        operation: format!("produce to {topic:?} (produce_timeout)"),
                        timeout: produce_timeout,
                    }))
                }
            };
            self.pending.push(delivery);
            self.stats.records_sent += 1;
            *self.open_records.as_mut().expect("begun above") += 1;
        }
        Ok(())
    }

    /// Flushes the open transaction and waits for every acknowledgement.
    async fn flush_open(&mut self) -> Result<()> {
        if self.open_records.is_none() {
            return Ok(());
        }
        let timeout = self.options.sink.flush_timeout;
        self.backend()?
            .flush(timeout)
            .await
            .map_err(|e| super::sink::timeout_named(e, "flush_timeout"))?;
        let pending = std::mem::take(&mut self.pending);
        let topic = self.options.sink.topic.clone();
        let written = &mut self.open_written;
        let wait = async {
            let mut failed = 0u64;
            let mut first = None;
            for d in pending {
                match d.await {
                    Ok(at) => note_written(written, at),
                    Err(e) => {
                        failed += 1;
                        first.get_or_insert_with(|| e.to_string());
                    }
                }
            }
            (failed, first)
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok((0, _)) => Ok(()),
            Ok((failed, first)) => Err(ConnectorError::DeliveryFailed {
                topic,
                failed,
                first: first.unwrap_or_default(),
            }),
            Err(_) => Err(ConnectorError::Client(crate::error::Error::Timeout {
                operation: format!("waiting for acknowledgements from {topic:?} (flush_timeout)"),
                timeout,
            })),
        }
    }

    /// The open transaction's first offsets, by partition (emptied).
    fn take_written(&mut self) -> Vec<PartitionOffset> {
        std::mem::take(&mut self.open_written)
            .into_iter()
            .map(|(partition, offset)| PartitionOffset::new(partition, offset))
            .collect()
    }

    /// Seals the interval for `checkpoint`; returns the rows to stage.
    /// Seals the interval for `checkpoint` (pre-commit). A failure is an
    /// abort of `checkpoint` for the sink's commit group.
    pub async fn barrier(&mut self, checkpoint: u64) -> Result<Vec<StateRow>> {
        let sealed = self.seal(checkpoint).await;
        if sealed.is_err() {
            self.group_abort(checkpoint);
        }
        sealed
    }

    /// Records an abort of `checkpoint` in the commit group (the epoch
    /// advances the first time a checkpoint is aborted).
    fn group_abort(&mut self, checkpoint: u64) {
        if let Some(group) = &self.group {
            let epoch = group.record_abort(checkpoint);
            self.stats.commit_group_epoch = Some(epoch);
            tracing::info!(transactional_id = %self.transactional_id, commit_group = %group.name(), checkpoint,
                epoch, "abort issued: the commit group will not commit this checkpoint");
        }
    }

    async fn seal(&mut self, checkpoint: u64) -> Result<Vec<StateRow>> {
        self.backend()?;
        if let Some(last) = self.queued.back().map(|s| s.checkpoint).or(self.prepared_checkpoint()) {
            if checkpoint <= last {
                return Err(ConnectorError::CallOrder {
                    call: "on_barrier",
                    problem: "with a checkpoint id not above the last barrier's",
                });
            }
        }
        if self.prepared.is_some() {
            let records = std::mem::take(&mut self.buffer);
            self.queued.push_back(Segment {
                checkpoint,
                records,
                horizon: self.staged_watermark(),
                coverage: self.coverage.coverage(),
            });
        } else {
            if let Err(e) = self.flush_open().await {
                // The interval cannot commit; end it so the producer can go on.
                if self.open_records.take().is_some() {
                    let timeout = self.timeout();
                    if let Err(abort) = self.backend()?.abort_transaction(timeout).await {
                        tracing::warn!(error = %abort, "aborting the failed interval's transaction");
                    }
                    self.stats.transactions_aborted += 1;
                }
                return Err(e);
            }
            let handle = self.identity().ok_or(ConnectorError::CallOrder {
                call: "on_barrier",
                problem: "before the producer has an identity",
            })?;
            let records = self.open_records.take().unwrap_or(0);
            self.prepared = Some(Prepared {
                checkpoint,
                records,
                handle,
                horizon: self.staged_watermark(),
                coverage: self.coverage.coverage(),
                written: self.take_written(),
            });
        }
        Ok(self.staged_rows())
    }

    /// Every outstanding checkpoint (a later checkpoint's completion implies
    /// the earlier ones', so each carries all).
    fn staged_rows(&self) -> Vec<StateRow> {
        let mut rows = Vec::new();
        if let Some(p) = &self.prepared {
            if p.records > 0 {
                rows.push(
                    StagedCheckpoint {
                        transactional_id: self.transactional_id.clone(),
                        checkpoint: p.checkpoint,
                        records: p.records,
                        handle: Some(p.handle.clone()),
                        horizon: p.horizon,
                        coverage: p.coverage.clone(),
                        written: p.written.clone(),
                    }
                    .to_row(),
                );
            }
        }
        for s in &self.queued {
            if !s.records.is_empty() {
                rows.push(
                    StagedCheckpoint {
                        transactional_id: self.transactional_id.clone(),
                        checkpoint: s.checkpoint,
                        records: s.records.len() as u64,
                        handle: None,
                        horizon: s.horizon,
                        coverage: s.coverage.clone(),
                        written: Vec::new(),
                    }
                    .to_row(),
                );
            }
        }
        rows
    }

    /// Commits every sealed checkpoint up to `checkpoint`, cascading through
    /// the queued segments.
    pub async fn commit(&mut self, checkpoint: u64) -> Result<()> {
        self.backend()?;
        if self.prepared.as_ref().is_none_or(|p| p.checkpoint > checkpoint) {
            return Ok(());
        }
        // A checkpoint the commit group aborted is aborted here too.
        if let Some(group) = &self.group {
            let covered = self.prepared.as_ref().map_or(checkpoint, |p| p.checkpoint);
            if let Some(epoch) = group.aborted(checkpoint).or(group.aborted(covered)) {
                let name = group.name().to_owned();
                self.stats.commit_group_epoch = Some(group.epoch());
                self.stats.commits_refused_by_group += 1;
                tracing::warn!(transactional_id = %self.transactional_id, commit_group = %name, checkpoint, epoch,
                    "commit refused: the commit group aborted this checkpoint; aborting it here too");
                self.abort(checkpoint).await?;
                return Err(ConnectorError::GroupAborted {
                    group: name,
                    checkpoint,
                    epoch,
                });
            }
        }
        let p = self.prepared.take().expect("checked above");
        self.commit_prepared(p).await?;
        self.advance(Some(checkpoint)).await
    }

    /// Commits `p`; when the commit fails, `p` stays the prepared
    /// transaction (a retried `on_commit` ends it again: EndTxn is idempotent).
    async fn commit_prepared(&mut self, p: Prepared) -> Result<()> {
        if p.records > 0 {
            let timeout = self.timeout();
            let committed = match self.backend() {
                Ok(b) => b.commit_transaction(timeout).await,
                Err(e) => Err(e),
            };
            if let Err(e) = committed {
                self.series.errors.increment(1);
                self.prepared = Some(p);
                return Err(e);
            }
            sink_step!(AfterEndTxn, self.options.subtask_index);
            self.stats.transactions_committed += 1;
            self.stats.records_committed += p.records;
            self.series.ok.increment(p.records);
            // Between the broker's acknowledgement and the next begin.
            self.receipts
                .write_receipt(p.checkpoint, &p.handle, p.horizon, &p.coverage)?;
            self.stats.receipts_written += 1;
            tracing::debug!(checkpoint = p.checkpoint, records = p.records, "checkpoint committed");
        }
        Ok(())
    }

    /// With no transaction prepared: produces queued segments (committing
    /// those at or below `committed`), then the buffer as the open tail.
    async fn advance(&mut self, committed: Option<u64>) -> Result<()> {
        debug_assert!(self.prepared.is_none() && self.open_records.is_none());
        while let Some(segment) = self.queued.pop_front() {
            let done = committed.is_some_and(|c| segment.checkpoint <= c);
            if segment.records.is_empty() {
                if done {
                    continue;
                }
                self.prepared = Some(Prepared {
                    checkpoint: segment.checkpoint,
                    records: 0,
                    handle: self.identity().expect("open"),
                    horizon: segment.horizon,
                    coverage: segment.coverage,
                    written: Vec::new(),
                });
                return Ok(());
            }
            self.produce_into_open(segment.records).await?;
            self.flush_open().await?;
            let records = self.open_records.take().unwrap_or(0);
            let p = Prepared {
                checkpoint: segment.checkpoint,
                records,
                handle: self.identity().expect("open"),
                horizon: segment.horizon,
                coverage: segment.coverage,
                written: self.take_written(),
            };
            if done {
                self.commit_prepared(p).await?;
            } else {
                self.prepared = Some(p);
                return Ok(());
            }
        }
        let buffer = std::mem::take(&mut self.buffer);
        self.produce_into_open(buffer).await
    }

    /// Aborts the prepared transaction of `checkpoint` (and drops queued
    /// segments at or below it: the restore replays them).
    pub async fn abort(&mut self, checkpoint: u64) -> Result<()> {
        self.backend()?;
        self.group_abort(checkpoint);
        if !self.coverage.stopped() {
            // The aborted interval lies below every later barrier, not
            // committed: later receipts must not claim it.
            self.coverage.stop();
            tracing::info!(transactional_id = %self.transactional_id, checkpoint,
                "an abort: later receipts of this sink carry no replay-suppression coverage (their replay is \
                 published again)");
        }
        if self.prepared.as_ref().is_none_or(|p| p.checkpoint > checkpoint) {
            return Ok(());
        }
        let p = self.prepared.take().expect("checked above");
        if p.records > 0 {
            let timeout = self.timeout();
            let aborted = match self.backend() {
                Ok(b) => b.abort_transaction(timeout).await,
                Err(e) => Err(e),
            };
            if let Err(e) = aborted {
                self.prepared = Some(p);
                return Err(e);
            }
            self.stats.transactions_aborted += 1;
            tracing::info!(
                checkpoint = p.checkpoint,
                records = p.records,
                "checkpoint's transaction aborted"
            );
        }
        while self.queued.front().is_some_and(|s| s.checkpoint <= checkpoint) {
            self.queued.pop_front();
        }
        self.advance(None).await
    }

    /// Aborts the open tail; leaves a prepared transaction pending.
    pub async fn close_sink(&mut self) -> Result<()> {
        let Some(mut backend) = self.backend.take() else {
            return Ok(());
        };
        if !self.opened {
            return Ok(());
        }
        self.opened = false;
        if let Some(group) = &self.group {
            group.leave(&self.transactional_id);
        }
        let timeout = self.timeout();
        if let Some(p) = self.prepared.take() {
            tracing::info!(transactional_id = %self.transactional_id, checkpoint = p.checkpoint,
                handle = %p.handle, "closing with a prepared transaction: left pending for in-doubt resolution");
            // Dropped without EndTxn: closing the producer would abort it.
            drop(backend);
            self.queued.clear();
            self.buffer.clear();
            self.pending.clear();
            return Ok(());
        }
        let aborted = match self.open_records.take() {
            Some(_) => {
                self.pending.clear();
                let r = backend.abort_transaction(timeout).await;
                if r.is_ok() {
                    self.stats.transactions_aborted += 1;
                }
                r
            }
            None => Ok(()),
        };
        let closed = backend.close(timeout).await;
        aborted.and(closed)
    }
}

fn texts(batch: Batch<Text>, encoder: Option<&ValueEncoder>, topic: &str) -> Vec<KafkaMessage> {
    let mut messages: Vec<KafkaMessage> = batch.into_iter().map(|t| KafkaMessage::new(t.into_bytes())).collect();
    if let Some(e) = encoder {
        e.encode_messages(topic, &mut messages);
    }
    messages
}

impl<B: TransactionalProducerBackend> Sink for TwoPhaseCommitSink<B> {
    type Item = Text;

    fn capabilities(&self) -> SinkCapabilities {
        TWO_PHASE_COMMIT
    }

    fn restore(&mut self, rows: &[StateRow]) -> Result<()> {
        self.restore_rows(rows)
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            open_encoder(&mut self.encoder, &self.options.sink).await?;
            self.open_sink().await
        })
    }

    fn restore_verdicts(&self) -> Vec<CheckpointVerdict> {
        self.verdicts.clone()
    }

    fn on_data(&mut self, batch: Batch<Text>) -> BoxFuture<'_, Result<()>> {
        let messages = texts(batch, self.encoder.as_ref(), &self.options.sink.topic);
        Box::pin(self.send_batch(messages))
    }

    /// Texts with the engine's event times: replay suppression judges them
    /// by event time (the records' own timestamps stay unset).
    fn on_timed_data(&mut self, batch: Batch<(Text, Option<i64>)>) -> BoxFuture<'_, Result<()>> {
        // The event time rides in the timestamp through the encoder (which
        // may refuse rows), then leaves it: the producer stamps the record.
        let mut messages: Vec<KafkaMessage> = batch
            .into_iter()
            .map(|(t, time)| {
                let mut m = KafkaMessage::new(t.into_bytes());
                m.timestamp = time.filter(|t| *t >= 0).unwrap_or(-1);
                m
            })
            .collect();
        if let Some(e) = &self.encoder {
            e.encode_messages(&self.options.sink.topic, &mut messages);
        }
        let timed = messages
            .into_iter()
            .map(|mut m| {
                let t = event_time(std::mem::replace(&mut m.timestamp, -1));
                (m, t)
            })
            .collect();
        Box::pin(self.send_timed("", timed))
    }

    fn on_watermark(&mut self, watermark: i64) {
        self.watermark(watermark);
    }

    fn on_restore_point(&mut self, checkpoint: Option<u64>) -> Result<()> {
        self.restore_point(checkpoint)
    }

    /// Flushes the open tail (a prepared transaction is flushed already).
    fn flush(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if self.opened {
                self.flush_open().await?;
            }
            Ok(())
        })
    }

    fn on_barrier(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<Vec<StateRow>>> {
        Box::pin(self.barrier(checkpoint_id))
    }

    fn on_commit(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.commit(checkpoint_id))
    }

    fn on_abort(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.abort(checkpoint_id))
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.close_sink())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::TransactionVersion;

    fn handle(id: &str) -> ResumeHandle {
        ResumeHandle {
            transactional_id: id.into(),
            producer_id: 4001,
            producer_epoch: 7,
            transaction_version: TransactionVersion::V2,
        }
    }

    /// A scripted backend: records each call, fails the first
    /// `fail_commits` commits, bumps the epoch per commit (as TV2 does).
    #[derive(Default)]
    struct Script {
        calls: Vec<String>,
        fail_commits: u32,
        epoch: i16,
    }

    struct ScriptedBackend(std::sync::Arc<std::sync::Mutex<Script>>);

    impl ScriptedBackend {
        fn push(&self, call: String) {
            self.0.lock().unwrap().calls.push(call);
        }
    }

    impl crate::connector::ProducerBackend for ScriptedBackend {
        type Delivery = std::future::Ready<crate::connector::DeliveryOutcome>;
        async fn connect(&mut self) -> Result<()> {
            Ok(())
        }
        async fn send(&self, _topic: &str, _partition: Option<i32>, message: KafkaMessage) -> Result<Self::Delivery> {
            self.push(format!("send:{}", String::from_utf8_lossy(message.payload_bytes())));
            Ok(std::future::ready(Ok(crate::client::PartitionOffset::new(0, 0))))
        }
        async fn flush(&self, _timeout: Duration) -> Result<()> {
            self.push("flush".into());
            Ok(())
        }
        async fn close(&mut self, _timeout: Duration) -> Result<()> {
            self.push("close".into());
            Ok(())
        }
    }

    impl TransactionalProducerBackend for ScriptedBackend {
        async fn init_transactions(&mut self, _id: &str, _timeout: Duration) -> Result<ResumeHandle> {
            self.push("init".into());
            Ok(self.identity().unwrap())
        }
        fn begin_transaction(&mut self) -> Result<()> {
            self.push("begin".into());
            Ok(())
        }
        async fn commit_transaction(&mut self, _timeout: Duration) -> Result<()> {
            let mut s = self.0.lock().unwrap();
            if s.fail_commits > 0 {
                s.fail_commits -= 1;
                s.calls.push("commit-failed".into());
                return Err(ConnectorError::Client(crate::error::Error::Timeout {
                    operation: "EndTxn".into(),
                    timeout: Duration::from_secs(1),
                }));
            }
            s.calls.push("commit".into());
            s.epoch += 1;
            Ok(())
        }
        async fn abort_transaction(&mut self, _timeout: Duration) -> Result<()> {
            self.push("abort".into());
            self.0.lock().unwrap().epoch += 1;
            Ok(())
        }
        fn identity(&self) -> Option<ResumeHandle> {
            let mut h = handle("tx");
            h.producer_epoch = self.0.lock().unwrap().epoch;
            Some(h)
        }
        async fn send_offsets(
            &mut self,
            _offsets: &[crate::client::TopicPartitionOffset],
            _metadata: &crate::connector::GroupMetadataHandle,
            _timeout: Duration,
        ) -> Result<()> {
            self.push("send_offsets".into());
            Ok(())
        }
    }

    fn scripted(
        fail_commits: u32,
    ) -> (
        TwoPhaseCommitSink<ScriptedBackend>,
        std::sync::Arc<std::sync::Mutex<Script>>,
    ) {
        let script = std::sync::Arc::new(std::sync::Mutex::new(Script {
            fail_commits,
            ..Script::default()
        }));
        let sink = TwoPhaseCommitSink::with_backend(
            TwoPhaseCommitOptions::new("h:1", "t", "tx"),
            ScriptedBackend(script.clone()),
        );
        (sink, script)
    }

    fn msgs(v: &[&str]) -> Vec<KafkaMessage> {
        v.iter().map(|s| KafkaMessage::new(s.to_string())).collect()
    }

    fn calls(script: &std::sync::Arc<std::sync::Mutex<Script>>) -> Vec<String> {
        std::mem::take(&mut script.lock().unwrap().calls)
    }

    #[tokio::test]
    async fn commits_cascade_through_queued_segments_in_order() {
        let (mut sink, script) = scripted(0);
        sink.open_sink().await.unwrap();
        sink.send_batch(msgs(&["a"])).await.unwrap();
        let rows = sink.barrier(1).await.unwrap();
        let handle_at_barrier = StagedCheckpoint::from_row(&rows[0]).unwrap().unwrap().handle.unwrap();
        sink.send_batch(msgs(&["b"])).await.unwrap();
        sink.barrier(2).await.unwrap();
        sink.send_batch(msgs(&["c"])).await.unwrap();
        assert_eq!(calls(&script), ["init", "begin", "send:a", "flush"]);
        sink.commit(1).await.unwrap();
        assert_eq!(calls(&script), ["commit", "begin", "send:b", "flush"]);
        assert_eq!(sink.prepared_checkpoint(), Some(2));
        // The receipt holds the handle staged at the barrier (before the epoch bump).
        assert!(sink.receipts.has_receipt(1, &handle_at_barrier).unwrap());
        sink.commit(2).await.unwrap();
        assert_eq!(calls(&script), ["commit", "begin", "send:c"]);
        // The open tail is aborted at close.
        sink.close_sink().await.unwrap();
        assert_eq!(calls(&script), ["abort", "close"]);
        let e = sink.barrier(3).await.unwrap_err();
        assert!(matches!(e, ConnectorError::CallOrder { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_failed_commit_keeps_the_prepared_transaction_and_close_leaves_it() {
        let (mut sink, script) = scripted(1);
        sink.open_sink().await.unwrap();
        sink.send_batch(msgs(&["a"])).await.unwrap();
        sink.barrier(1).await.unwrap();
        assert!(sink.commit(1).await.is_err());
        assert_eq!(
            sink.prepared_checkpoint(),
            Some(1),
            "still prepared after a failed commit"
        );
        sink.commit(1).await.unwrap();
        assert_eq!(sink.prepared_checkpoint(), None);
        sink.send_batch(msgs(&["b"])).await.unwrap();
        sink.barrier(2).await.unwrap();
        let e = sink.barrier(2).await.unwrap_err();
        assert!(matches!(e, ConnectorError::CallOrder { .. }), "{e}");
        calls(&script);
        sink.close_sink().await.unwrap();
        assert!(
            calls(&script).is_empty(),
            "no abort and no close: the prepared transaction stays pending"
        );
        assert_eq!(sink.stats().transactions_committed, 1);
    }

    #[tokio::test]
    async fn an_abort_drops_its_queued_segments_and_the_next_one_becomes_prepared() {
        let (mut sink, script) = scripted(0);
        sink.open_sink().await.unwrap();
        sink.send_batch(msgs(&["a"])).await.unwrap();
        sink.barrier(1).await.unwrap();
        sink.send_batch(msgs(&["b"])).await.unwrap();
        sink.barrier(2).await.unwrap();
        sink.send_batch(msgs(&["c"])).await.unwrap();
        sink.barrier(3).await.unwrap();
        calls(&script);
        sink.abort(2).await.unwrap();
        assert_eq!(calls(&script), ["abort", "begin", "send:c", "flush"]);
        assert_eq!(sink.prepared_checkpoint(), Some(3));
    }

    #[test]
    fn state_rows_round_trip_and_reject_garbage() {
        for staged in [
            StagedCheckpoint {
                transactional_id: "tx/1;weird id".into(),
                checkpoint: 5,
                records: 20,
                handle: Some(handle("tx/1;weird id")),
                horizon: Some(1_700_000_000_123),
                coverage: Coverage {
                    positions: Some(
                        [
                            (InputPartition::new("", 0), 5000),
                            (InputPartition::new("in;x=1", 3), 7),
                        ]
                        .into(),
                    ),
                    event_max: [(InputPartition::new("", -1), 99)].into(),
                },
                written: vec![PartitionOffset::new(0, 12), PartitionOffset::new(3, 40_000_000_000)],
            },
            StagedCheckpoint {
                transactional_id: "tx-0".into(),
                checkpoint: 6,
                records: 3,
                handle: None,
                horizon: None,
                coverage: Coverage::default(),
                written: Vec::new(),
            },
        ] {
            let row = staged.to_row();
            assert!(!String::from_utf8_lossy(&row.value).contains('\n'));
            assert_eq!(StagedCheckpoint::from_row(&row).unwrap(), Some(staged));
        }
        let other = StateRow {
            key: "source/p0".into(),
            value: b"12".to_vec(),
        };
        assert_eq!(StagedCheckpoint::from_row(&other).unwrap(), None);
        // A row staged before written= existed parses, with no first offsets.
        let old = StateRow {
            key: "kafka_2pc/tx/4".into(),
            value: format!(
                "clink-2pc-state/1;checkpoint=4;records=2;state=prepared;handle={};horizon=9",
                handle("tx")
            )
            .into_bytes(),
        };
        let parsed = StagedCheckpoint::from_row(&old).unwrap().unwrap();
        assert!(parsed.written.is_empty() && parsed.horizon == Some(9), "{parsed:?}");
        for (key, value) in [
            (
                "kafka_2pc/tx/x",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/2;checkpoint=1;records=1;state=queued",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=2;records=1;state=queued",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=prepared",
            ),
            ("kafka_2pc/tx/1", "clink-2pc-state/1;checkpoint=1;records=1;state=maybe"),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;horizon=later",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;positions=:0",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;event_max=:0:1,:0:2",
            ),
            ("kafka_2pc/tx/1", "clink-2pc-state/1;checkpoint=1;state=queued"),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=prepared;handle=nope",
            ),
            (
                "kafka_2pc/other/1",
                &format!(
                    "clink-2pc-state/1;checkpoint=1;records=1;state=prepared;handle={}",
                    handle("tx")
                ),
            ),
            // written=: pairs of a partition and an offset, partitions ascending.
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=0",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=0@-1",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=-1@5",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=0@1,0@2",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=2@1,1@2",
            ),
            (
                "kafka_2pc/tx/1",
                "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written=0@99999999999999999999",
            ),
            (
                "kafka_2pc/tx/1",
                &format!(
                    "clink-2pc-state/1;checkpoint=1;records=1;state=queued;written={}",
                    (0..=MAX_WRITTEN)
                        .map(|p| format!("{p}@0"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            ),
        ] {
            let row = StateRow {
                key: key.into(),
                value: value.as_bytes().to_vec(),
            };
            let e = StagedCheckpoint::from_row(&row).unwrap_err();
            assert!(matches!(e, ConnectorError::BadState { .. }), "{key} {value}: {e}");
        }
    }

    #[test]
    fn receipts_and_markers_live_under_the_receipt_dir() {
        let dir = std::env::temp_dir().join(format!("clink-2pc-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut store = ReceiptStore {
            dir: Some(dir.clone()),
            subtask: 3,
            memory: BTreeMap::new(),
        };
        let h = handle("tx");
        assert!(!store.has_receipt(4, &h).unwrap());
        store.write_receipt(4, &h, None, &Coverage::default()).unwrap();
        let cov9 = Coverage {
            positions: Some([(InputPartition::new("", 2), 40)].into()),
            event_max: BTreeMap::new(),
        };
        store.write_receipt(9, &h, Some(77), &cov9).unwrap();
        assert!(dir.join("sub3-4").exists());
        assert!(store.has_receipt(4, &h).unwrap());
        let mut other = h.clone();
        other.producer_epoch += 1;
        assert!(!store.has_receipt(4, &other).unwrap(), "a receipt is for one handle");
        let above = |store: &ReceiptStore| -> Vec<(u64, Option<i64>)> {
            store
                .receipts_above(4)
                .unwrap()
                .into_iter()
                .map(|r| (r.checkpoint, r.horizon))
                .collect()
        };
        assert_eq!(above(&store), vec![(9, Some(77))]);
        assert_eq!(store.receipts_above(4).unwrap()[0].coverage, cov9);
        let staged = StagedCheckpoint {
            transactional_id: "tx".into(),
            checkpoint: 5,
            records: 1,
            handle: Some(h),
            horizon: Some(55),
            coverage: cov9.clone(),
            written: vec![PartitionOffset::new(1, 77)],
        };
        let marker = store
            .write_marker(&staged, "not committed: fenced", true)
            .unwrap()
            .unwrap();
        assert!(
            store.pending_markers().unwrap().is_empty(),
            "a final verdict's marker is not pending"
        );
        store.write_marker(&staged, "unreachable", false).unwrap();
        assert_eq!(
            store.pending_markers().unwrap(),
            vec![PendingMarker {
                checkpoint: 5,
                handle: staged.handle.clone().unwrap(),
                horizon: Some(55),
                coverage: cov9.clone(),
                written: vec![PartitionOffset::new(1, 77)],
            }]
        );
        assert!(store.check_writable().is_ok());
        for corrupt in [
            "garbage",
            "checkpoint=6\nfinal=false\nhandle=x\n",
            "checkpoint=6\nfinal=false\n",
        ] {
            std::fs::write(dir.join("sub3-6.unresolved"), corrupt).unwrap();
            let e = store.pending_markers().unwrap_err().to_string();
            assert!(
                e.contains("sub3-6.unresolved") && e.contains("corrupt"),
                "{corrupt:?}: {e}"
            );
        }
        std::fs::remove_file(dir.join("sub3-6.unresolved")).unwrap();
        assert_eq!(marker, dir.join("sub3-5.unresolved"));
        assert_eq!(above(&store), vec![(9, Some(77))], "a marker is not a receipt");
        for corrupt in [
            "garbage",
            "checkpoint=9\nhandle=x\nhorizon=soon\n",
            "checkpoint=9\nhandle=x\npositions=:0:x\n",
            "checkpoint=8\nhandle=x\n",
        ] {
            std::fs::write(dir.join("sub3-9"), corrupt).unwrap();
            let e = store.receipts_above(4).unwrap_err().to_string();
            assert!(e.contains("sub3-9") && e.contains("corrupt"), "{corrupt:?}: {e}");
        }
        store.retire_marker(5);
        assert!(!marker.exists());
        let _ = std::fs::remove_dir_all(&dir);

        let mut memory = ReceiptStore {
            dir: None,
            subtask: 0,
            memory: BTreeMap::new(),
        };
        memory
            .write_receipt(2, &handle("tx"), None, &Coverage::default())
            .unwrap();
        assert!(memory.has_receipt(2, &handle("tx")).unwrap());
        assert_eq!(memory.write_marker(&staged, "x", false).unwrap(), None);
    }

    #[test]
    fn an_unwritable_receipt_dir_fails_the_probe_naming_the_path() {
        let file = std::env::temp_dir().join(format!("clink-2pc-unwritable-{}", std::process::id()));
        std::fs::write(&file, "a file where the directory should be").unwrap();
        let store = ReceiptStore {
            dir: Some(file.join("receipts")),
            subtask: 0,
            memory: BTreeMap::new(),
        };
        let e = store.check_writable().unwrap_err().to_string();
        assert!(e.contains("clink-2pc-unwritable"), "{e}");
        let _ = std::fs::remove_file(&file);
    }

    fn scripted_in(
        dir: &Path,
        suppression: bool,
    ) -> (
        TwoPhaseCommitSink<ScriptedBackend>,
        std::sync::Arc<std::sync::Mutex<Script>>,
    ) {
        let script = std::sync::Arc::new(std::sync::Mutex::new(Script::default()));
        let mut options = TwoPhaseCommitOptions::new("h:1", "t", "tx");
        options.receipt_dir = Some(dir.to_owned());
        options.replay_suppression = suppression;
        let sink = TwoPhaseCommitSink::with_backend(options, ScriptedBackend(script.clone()));
        (sink, script)
    }

    /// Read records: `(partition, offset)`, all with timestamp 7 (a
    /// millisecond shared across the barrier).
    fn read(at: &[(i32, i64)]) -> Vec<KafkaMessage> {
        at.iter()
            .map(|&(p, o)| {
                let mut m = KafkaMessage::new(format!("p{p}o{o}"));
                m.partition = p;
                m.offset = o;
                m.timestamp = 7;
                m
            })
            .collect()
    }

    /// By input position: the receipt keeps each input partition's next
    /// offset; the replay swallows exactly the records below it (whatever
    /// their timestamps: the same millisecond on both sides of the
    /// barrier here), passes the rest, and retires once every partition
    /// is past its position; with the option off nothing is swallowed.
    #[tokio::test]
    async fn replay_suppression_by_input_position_is_exact() {
        let dir = std::env::temp_dir().join(format!("clink-2pc-suppress-pos-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut first, _) = scripted_in(&dir, true);
        first.open_sink().await.unwrap();
        first.send_batch(read(&[(0, 10), (1, 3), (0, 11)])).await.unwrap();
        let rows = first.barrier(1).await.unwrap();
        let staged = StagedCheckpoint::from_row(&rows[0]).unwrap().unwrap();
        let want: BTreeMap<_, _> = [(InputPartition::new("", 0), 12), (InputPartition::new("", 1), 4)].into();
        assert_eq!(staged.coverage.positions.as_ref(), Some(&want));
        first.commit(1).await.unwrap();
        let receipt = std::fs::read_to_string(dir.join("sub0-1")).unwrap();
        assert!(receipt.contains("positions=:0:12,:1:4\n"), "{receipt}");
        // Read after the barrier, never committed (the crash).
        first.send_batch(read(&[(0, 12), (1, 4)])).await.unwrap();

        let (mut replay, script) = scripted_in(&dir, true);
        replay.open_sink().await.unwrap();
        Sink::on_restore_point(&mut replay, Some(1)).unwrap();
        assert!(!replay.stats().replay_suppression_armed, "nothing receipted above 1");
        Sink::on_restore_point(&mut replay, None).unwrap();
        let st = replay.stats();
        assert!(st.replay_suppression_armed, "{st:?}");
        assert_eq!(st.suppression_positions, 2);
        calls(&script);
        replay.send_batch(read(&[(0, 10), (0, 11), (0, 12)])).await.unwrap();
        assert_eq!(calls(&script), ["begin", "send:p0o12"]);
        assert!(
            !replay.stats().suppression_retired,
            "partition 1 has not reached its position"
        );
        replay.send_batch(read(&[(1, 3), (1, 4)])).await.unwrap();
        assert_eq!(calls(&script), ["send:p1o4"]);
        let st = replay.stats();
        assert_eq!(
            (
                st.records_suppressed,
                st.suppression_passed_through,
                st.suppression_retired
            ),
            (3, 0, true)
        );
        replay.send_batch(read(&[(1, 0)])).await.unwrap();
        assert_eq!(calls(&script), ["send:p1o0"], "retired: nothing is judged");

        let (mut off, script) = scripted_in(&dir, false);
        off.open_sink().await.unwrap();
        Sink::on_restore_point(&mut off, Some(0)).unwrap();
        calls(&script);
        off.send_batch(read(&[(0, 10)])).await.unwrap();
        assert_eq!(calls(&script), ["begin", "send:p0o10"]);
        assert_eq!(off.stats().records_suppressed, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// After an abort the aborted interval's records lie below every later
    /// barrier without being committed: later staged rows (and receipts)
    /// carry no coverage and no horizon, so their replay is published again.
    #[tokio::test]
    async fn an_abort_stops_the_coverage_later_barriers_stage() {
        let (mut sink, _) = scripted(0);
        sink.open_sink().await.unwrap();
        sink.send_batch(read(&[(0, 1)])).await.unwrap();
        Sink::on_watermark(&mut sink, 5);
        let rows = sink.barrier(1).await.unwrap();
        let staged = StagedCheckpoint::from_row(&rows[0]).unwrap().unwrap();
        assert_eq!(staged.coverage.positions.map(|p| p.len()), Some(1));
        assert_eq!(staged.horizon, Some(5));
        sink.abort(1).await.unwrap();
        sink.send_batch(read(&[(0, 2)])).await.unwrap();
        let rows = sink.barrier(2).await.unwrap();
        let staged = StagedCheckpoint::from_row(&rows[0]).unwrap().unwrap();
        assert_eq!((staged.coverage, staged.horizon), (Coverage::default(), None));
    }

    /// By event time through the `Sink` trait's timed channel: strictly
    /// below the highest event time the receipted transaction held (a
    /// record at it may have been read after the barrier: published
    /// again, never lost), at or below the receipted watermark (the
    /// promise: nothing at or below it followed), an untimed record passed
    /// and counted; retired once a watermark passes what is left.
    #[tokio::test]
    async fn replay_suppression_by_event_time_never_swallows_at_the_horizon() {
        let dir = std::env::temp_dir().join(format!("clink-2pc-suppress-time-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let timed = |v: &[(&'static str, Option<i64>)]| -> Vec<(Text, Option<i64>)> {
            v.iter().map(|(t, time)| (Text::from(*t), *time)).collect()
        };
        let (mut first, _) = scripted_in(&dir, true);
        first.open_sink().await.unwrap();
        Sink::on_timed_data(&mut first, timed(&[("a", Some(10)), ("b", Some(20)), ("c", Some(20))]))
            .await
            .unwrap();
        Sink::on_watermark(&mut first, 15);
        first.barrier(1).await.unwrap();
        first.commit(1).await.unwrap();
        let receipt = std::fs::read_to_string(dir.join("sub0-1")).unwrap();
        assert!(
            receipt.contains("event_max=:-1:20\n") && receipt.contains("horizon=15\n"),
            "{receipt}"
        );

        let (mut replay, script) = scripted_in(&dir, true);
        replay.open_sink().await.unwrap();
        Sink::on_restore_point(&mut replay, None).unwrap();
        assert!(replay.stats().replay_suppression_armed);
        assert_eq!(replay.stats().suppression_horizon, Some(15));
        calls(&script);
        Sink::on_timed_data(
            &mut replay,
            timed(&[
                ("a", Some(10)),
                ("b", Some(20)),
                ("c", Some(20)),
                ("d", Some(20)),
                ("n", None),
            ]),
        )
        .await
        .unwrap();
        assert_eq!(
            calls(&script),
            ["begin", "send:b", "send:c", "send:d", "send:n"],
            "only below 20 is swallowed"
        );
        Sink::on_watermark(&mut replay, 20);
        let st = replay.stats();
        assert_eq!(
            (
                st.records_suppressed,
                st.suppression_passed_through,
                st.suppression_retired
            ),
            (1, 1, true)
        );
        // Without times (plain on_data) an armed sink cannot judge.
        let (mut untimed, _) = scripted_in(&dir, true);
        untimed.open_sink().await.unwrap();
        Sink::on_restore_point(&mut untimed, None).unwrap();
        Sink::on_data(&mut untimed, vec![Text::from("a")]).await.unwrap();
        assert_eq!(untimed.stats().suppression_passed_through, 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn receipts_and_pending_markers_parse_or_say_what_is_wrong() {
        let r = Receipt {
            checkpoint: 3,
            handle: handle("tx").to_string(),
            horizon: Some(-5),
            coverage: Coverage {
                positions: Some([(InputPartition::new("t", 1), 9)].into()),
                event_max: [(InputPartition::new("", -1), 4)].into(),
            },
        };
        assert_eq!(Receipt::parse(&r.to_text()).unwrap(), r);
        let old = Receipt {
            horizon: None,
            coverage: Coverage::default(),
            ..r.clone()
        };
        assert_eq!(
            Receipt::parse(&old.to_text()).unwrap(),
            old,
            "a receipt without horizon"
        );
        for (bad, says) in [
            ("handle=x\n", "checkpoint="),
            ("checkpoint=1\n", "handle="),
            ("checkpoint=1\ncheckpoint=1\nhandle=x\n", "twice"),
            ("checkpoint=x\nhandle=x\n", "not a number"),
            ("checkpoint=1\nhandle=x\nwho=me\n", "unknown"),
            ("checkpoint=1\nhandle=x\npositions=\npositions=\n", "twice"),
            ("checkpoint=1\nhandle=x\nevent_max=:1\n", "topic:partition:value"),
            ("nonsense", "key=value"),
        ] {
            let e = Receipt::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        let marker = format!("checkpoint=4\nhandle={}\nhorizon=none\nfinal=false\n", handle("tx"));
        assert_eq!(parse_unresolved_marker(4, &marker).unwrap().unwrap().horizon, None);
        assert!(parse_unresolved_marker(5, &marker).is_err());
        assert_eq!(parse_unresolved_marker(4, "checkpoint=4\nfinal=true\n").unwrap(), None);
        assert!(parse_unresolved_marker(4, &marker.replace("none", "x")).is_err());
        let positioned = format!("{marker}positions=:3:17\n");
        assert_eq!(
            parse_unresolved_marker(4, &positioned)
                .unwrap()
                .unwrap()
                .coverage
                .positions,
            Some([(InputPartition::new("", 3), 17)].into())
        );
        assert!(parse_unresolved_marker(4, &format!("{marker}positions=:3\n")).is_err());
    }
}
