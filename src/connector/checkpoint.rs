//! The checkpoint coordinator for jobs with a `commit_recoverable = false`
//! sink (the spec's "commit-confirmed" protocol): what an engine embedding
//! the connector, and `clink-kafka copy`, run around their subtasks.
//!
//! # Checkpoint `n`
//!
//! 1. [`Coordinator::begin_checkpoint`]: the barrier `n` goes to every
//!    subtask (the driver calls `Source::snapshot` + `Sink::on_barrier(n)`);
//! 2. [`Coordinator::collect`]: each subtask's state rows, once per subtask;
//! 3. [`Coordinator::write_state`]: once every subtask answered, the rows go
//!    to `chk-<n>.state` durably (temporary file, fsync, rename, fsync of
//!    the directory);
//! 4. [`Coordinator::mark_completed`]: `COMPLETED-<n>` (globally durable);
//!    the driver then sends `on_commit(n)` to every subtask;
//! 5. [`Coordinator::commit_returned`]: each subtask whose commit returned;
//! 6. [`Coordinator::confirm`]: `CONFIRMED-<n>` — refused until every
//!    subtask's commit returned — and everything below `n` is pruned:
//!    state files, markers, and the sinks' receipts and unresolved markers
//!    (`sub<K>-<m>`, `sub<K>-<m>.unresolved`, `m < n`) in the receipt
//!    directories the coordinator was given. That is the retention rule:
//!    no restore can reach below the newest CONFIRMED checkpoint.
//!
//! # Restore
//!
//! [`plan_restore`] picks the newest `COMPLETED-n` not `ABANDONED`. With
//! `CONFIRMED-n`, sources resume at `n` and sinks open fresh (their init
//! aborts whatever was open or prepared after `n`). Without, every sink
//! subtask is restored from `n`'s rows and opened — each resolves its own
//! staged transactions BEFORE its init fences them — and the driver hands
//! every subtask's [`RestoreVerdict`]s to [`Coordinator::settle_restore`],
//! which applies [`decide_restore`]: every handle of every subtask is
//! probed before deciding (an early refusal never stops the walk);
//! any Unreachable holds the restart (nothing is fenced, the next start
//! retries); otherwise any final NotCommitted abandons `n` (`ABANDONED-n`)
//! and falls back to the newest CONFIRMED checkpoint below it (subtasks
//! whose commit was proven keep their receipts: a mixed verdict); all
//! committed confirms `n`.
//!
//! The pure parts — [`CheckpointRound`], [`MarkerSet`], [`plan_restore`],
//! [`decide_restore`] — do no I/O and are unit-tested here; the file I/O is
//! [`CheckpointStore`]; [`Coordinator`] joins them. The driver owns the
//! operators and the order of calls (and, in `copy`, the fault points
//! between them).
//!
//! A namespace module: its items are reached only as `clink_kafka::connector::checkpoint::*` and are
//! not re-exported elsewhere (the checkpoint coordinator an engine runs around a 2PC sink).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{ConnectorError, Result};
use super::{CheckpointVerdict, RestoreVerdict, StateRow};

/// First line of every state file.
pub const STATE_HEADER: &str = "clink-checkpoint/1";
/// A state file larger than this is refused before it is read.
pub const MAX_STATE_FILE: u64 = 64 << 20;
/// A marker larger than this is refused before it is read.
const MAX_MARKER_FILE: u64 = 64 << 10;

/// The coordinator's markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Marker {
    /// The checkpoint is globally durable (its state file is complete).
    Completed,
    /// Every sink subtask's commit of it returned.
    Confirmed,
    /// Found not committed at a restore: never restored from again.
    Abandoned,
}

impl Marker {
    /// Every marker, in protocol order.
    pub const ALL: [Marker; 3] = [Marker::Completed, Marker::Confirmed, Marker::Abandoned];

    /// The marker file's name prefix: `COMPLETED`, `CONFIRMED` or `ABANDONED` (the file is `<prefix>-<id>`).
    pub fn prefix(self) -> &'static str {
        match self {
            Marker::Completed => "COMPLETED",
            Marker::Confirmed => "CONFIRMED",
            Marker::Abandoned => "ABANDONED",
        }
    }
}

/// The markers present in a state directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarkerSet {
    /// Ids with a COMPLETED marker.
    pub completed: BTreeSet<u64>,
    /// Ids with a CONFIRMED marker.
    pub confirmed: BTreeSet<u64>,
    /// Ids with an ABANDONED marker.
    pub abandoned: BTreeSet<u64>,
}

impl MarkerSet {
    /// The ids carrying `marker`.
    pub fn get(&self, marker: Marker) -> &BTreeSet<u64> {
        match marker {
            Marker::Completed => &self.completed,
            Marker::Confirmed => &self.confirmed,
            Marker::Abandoned => &self.abandoned,
        }
    }

    /// Records that checkpoint `id` carries `marker`.
    pub fn insert(&mut self, marker: Marker, id: u64) {
        match marker {
            Marker::Completed => self.completed.insert(id),
            Marker::Confirmed => self.confirmed.insert(id),
            Marker::Abandoned => self.abandoned.insert(id),
        };
    }

    /// The newest checkpoint both completed and confirmed, below `below`.
    pub fn newest_confirmed_below(&self, below: u64) -> Option<u64> {
        self.confirmed
            .range(..below)
            .rev()
            .find(|n| self.completed.contains(n))
            .copied()
    }

    /// Ids only grow: the next one is above every marker (an abandoned id
    /// is never reused).
    pub fn next_id(&self) -> u64 {
        self.completed
            .iter()
            .chain(&self.confirmed)
            .chain(&self.abandoned)
            .max()
            .map_or(1, |m| m + 1)
    }
}

/// Where a restore starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePlan {
    /// Nothing completed: sources start fresh, sinks open fresh.
    Fresh,
    /// The newest completed checkpoint is confirmed: restore from it, sinks
    /// get none of its rows (nothing is owed).
    Confirmed(u64),
    /// The newest completed checkpoint is not confirmed: its sinks are
    /// restored from its rows and resolve before fencing; `fallback` is the
    /// newest confirmed checkpoint below it.
    Unconfirmed {
        /// The newest completed checkpoint.
        checkpoint: u64,
        /// The newest confirmed checkpoint below it, if any.
        fallback: Option<u64>,
    },
}

/// The restore point the markers imply.
pub fn plan_restore(markers: &MarkerSet) -> RestorePlan {
    let Some(n) = markers
        .completed
        .iter()
        .rev()
        .find(|n| !markers.abandoned.contains(n))
        .copied()
    else {
        return RestorePlan::Fresh;
    };
    if markers.confirmed.contains(&n) {
        RestorePlan::Confirmed(n)
    } else {
        RestorePlan::Unconfirmed {
            checkpoint: n,
            fallback: markers.newest_confirmed_below(n),
        }
    }
}

/// What to do with an unconfirmed checkpoint once every sink subtask
/// reported its verdicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreDecision {
    /// Every owed commit is proven: write CONFIRMED-n, restore from `n`.
    Confirm {
        /// The checkpoint to confirm and restore from.
        checkpoint: u64,
    },
    /// A final "not committed": write ABANDONED-n, restore from `to` (the
    /// newest confirmed below, or the beginning). `committed` are the
    /// subtasks whose commits of `n` were proven (a mixed verdict when not
    /// empty: their receipts stay, the replay owes suppression there).
    FallBack {
        /// The checkpoint to abandon.
        abandon: u64,
        /// The checkpoint to restore from instead (`None`: the beginning).
        to: Option<u64>,
        /// The subtasks whose commit was found not committed.
        not_committed: Vec<u32>,
        /// The subtasks whose commit was proven.
        committed: Vec<u32>,
    },
    /// Some resolution answered Unreachable: hold the restart (nothing may
    /// fence those transactions); the next attempt decides.
    Hold {
        /// The checkpoint whose restart is held.
        checkpoint: u64,
        /// The subtasks whose resolution could not reach the broker.
        unreachable: Vec<u32>,
    },
}

/// The cross-subtask decision over every subtask's verdicts (index =
/// subtask). A subtask with no verdict owed nothing (no records staged).
/// Unreachable anywhere holds, even beside a NotCommitted: a fallback now
/// could restore below a commit the unreachable walk might yet prove.
pub fn decide_restore(
    checkpoint: u64,
    fallback: Option<u64>,
    verdicts: &[(u32, Vec<CheckpointVerdict>)],
) -> RestoreDecision {
    let mut unreachable = Vec::new();
    let mut not_committed = Vec::new();
    let mut committed = Vec::new();
    for (subtask, vs) in verdicts {
        let owed: Vec<&CheckpointVerdict> = vs.iter().filter(|v| v.checkpoint <= checkpoint).collect();
        if owed
            .iter()
            .any(|v| matches!(v.verdict, RestoreVerdict::Unreachable { .. }))
        {
            unreachable.push(*subtask);
        } else if owed
            .iter()
            .any(|v| matches!(v.verdict, RestoreVerdict::NotCommitted { .. }))
        {
            not_committed.push(*subtask);
        } else if owed.iter().any(|v| v.checkpoint == checkpoint && v.records > 0) {
            committed.push(*subtask);
        }
    }
    if !unreachable.is_empty() {
        RestoreDecision::Hold {
            checkpoint,
            unreachable,
        }
    } else if !not_committed.is_empty() {
        RestoreDecision::FallBack {
            abandon: checkpoint,
            to: fallback,
            not_committed,
            committed,
        }
    } else {
        RestoreDecision::Confirm { checkpoint }
    }
}

/// Where one checkpoint round is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundStage {
    /// Barriers sent; collecting rows.
    Collecting,
    /// Every subtask's rows are in; the state is to be written.
    Collected,
    /// The state file is durable; COMPLETED is to be written.
    StateWritten,
    /// COMPLETED-n is durable; commits are out.
    Committing,
    /// Every subtask's commit returned: CONFIRMED may be written.
    Confirmable,
}

/// One checkpoint's progress through the protocol (pure).
#[derive(Clone, Debug)]
pub struct CheckpointRound {
    id: u64,
    stage: RoundStage,
    rows: Vec<Option<Vec<StateRow>>>,
    committed: Vec<bool>,
}

fn call_order(problem: &'static str) -> ConnectorError {
    ConnectorError::CallOrder {
        call: "the checkpoint coordinator",
        problem,
    }
}

impl CheckpointRound {
    /// Round `id` for `parallelism` subtasks, collecting rows.
    pub fn new(id: u64, parallelism: u32) -> Self {
        CheckpointRound {
            id,
            stage: RoundStage::Collecting,
            rows: vec![None; parallelism as usize],
            committed: vec![false; parallelism as usize],
        }
    }

    /// The checkpoint id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Where the round is in the protocol.
    pub fn stage(&self) -> RoundStage {
        self.stage
    }

    /// Subtask `subtask`'s rows for this barrier (each subtask once).
    pub fn handle_rows(&mut self, subtask: u32, rows: Vec<StateRow>) -> Result<()> {
        if self.stage != RoundStage::Collecting {
            return Err(call_order("collecting rows after every subtask's were in"));
        }
        let slot = self
            .rows
            .get_mut(subtask as usize)
            .ok_or(call_order("with a subtask index above the parallelism"))?;
        if slot.is_some() {
            return Err(call_order("with a subtask's rows twice for one checkpoint"));
        }
        *slot = Some(rows);
        if self.rows.iter().all(Option::is_some) {
            self.stage = RoundStage::Collected;
        }
        Ok(())
    }

    /// Every subtask's rows, in subtask order, once all are in.
    pub fn state_rows(&self) -> Result<Vec<StateRow>> {
        if self.stage == RoundStage::Collecting {
            return Err(call_order("writing state before every subtask's rows were in"));
        }
        Ok(self.rows.iter().flatten().flatten().cloned().collect())
    }

    /// The collected state is durable (Collected → StateWritten).
    pub fn handle_state_written(&mut self) -> Result<()> {
        if self.stage != RoundStage::Collected {
            return Err(call_order("marking state written out of order"));
        }
        self.stage = RoundStage::StateWritten;
        Ok(())
    }

    /// COMPLETED is written (StateWritten → Committing).
    pub fn handle_completed(&mut self) -> Result<()> {
        if self.stage != RoundStage::StateWritten {
            return Err(call_order("writing COMPLETED before the state is durable"));
        }
        self.stage = RoundStage::Committing;
        if self.committed.is_empty() {
            self.stage = RoundStage::Confirmable;
        }
        Ok(())
    }

    /// Subtask `subtask`'s `on_commit(n)` returned.
    pub fn handle_commit_returned(&mut self, subtask: u32) -> Result<()> {
        if !matches!(self.stage, RoundStage::Committing | RoundStage::Confirmable) {
            return Err(call_order("a commit returned before COMPLETED was durable"));
        }
        let slot = self
            .committed
            .get_mut(subtask as usize)
            .ok_or(call_order("with a subtask index above the parallelism"))?;
        *slot = true;
        if self.committed.iter().all(|c| *c) {
            self.stage = RoundStage::Confirmable;
        }
        Ok(())
    }

    /// Subtasks whose commit has not returned yet.
    pub fn awaiting_commit(&self) -> Vec<u32> {
        (0..self.committed.len() as u32)
            .filter(|i| !self.committed[*i as usize])
            .collect()
    }
}

/// One checkpoint's durable state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointState {
    /// The checkpoint id.
    pub id: u64,
    /// Every subtask's rows plus the driver's own, in subtask order.
    pub rows: Vec<StateRow>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

/// The id in `<prefix><digits><suffix>`.
fn id_in(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    name.strip_prefix(prefix)
        .and_then(|r| r.strip_suffix(suffix))
        .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|id| id.parse().ok())
}

/// The checkpoint in a sink's receipt or marker name: `sub<K>-<N>` or
/// `sub<K>-<N>.unresolved`.
fn receipt_checkpoint(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("sub")?;
    let (k, n) = rest.split_once('-')?;
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = n.strip_suffix(".unresolved").unwrap_or(n);
    id_in(n, "", "")
}

/// The coordinator's directory: `chk-<n>.state`, `COMPLETED-<n>`,
/// `CONFIRMED-<n>`, `ABANDONED-<n>`, and `_jobs/<job id>/receipts/` (where
/// the sinks keep receipts and markers). Every file names the job: another
/// job's files are refused, naming the file.
#[derive(Clone, Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
    /// `key=value` lines identifying the job.
    job: String,
}

impl CheckpointStore {
    /// Opens (creating) `dir` for the job identified by `job` (pairs such as
    /// `("job-id", …)`, each value non-empty and on one line).
    pub fn open(dir: &Path, job: &[(&str, &str)]) -> Result<Self> {
        let mut text = String::new();
        for (k, v) in job {
            if v.is_empty() || v.contains(['\n', '\r']) || k.contains(['=', '\n']) {
                return Err(ConnectorError::InvalidOption {
                    option: (*k).to_owned(),
                    value: (*v).to_owned(),
                    expected: "a non-empty value on one line".to_owned(),
                });
            }
            text.push_str(&format!("{k}={v}\n"));
        }
        std::fs::create_dir_all(dir).map_err(|e| Self::io(dir, &format!("creating the directory: {e}")))?;
        Ok(CheckpointStore {
            dir: dir.to_owned(),
            job: text,
        })
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `<dir>/_jobs/<job id>/receipts`: where a 2PC sink of this job keeps
    /// its receipts and markers (the spec's layout).
    pub fn receipt_dir(&self, job_id: &str) -> PathBuf {
        receipt_dir(&self.dir, job_id)
    }

    fn io(path: &Path, message: &str) -> ConnectorError {
        ConnectorError::CheckpointState {
            path: path.display().to_string(),
            message: message.to_owned(),
        }
    }

    /// Temporary file, fsync, rename, fsync of the directory.
    fn write_durably(&self, name: &str, contents: &str) -> Result<()> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let mut f = std::fs::File::create(&tmp).map_err(|e| Self::io(&tmp, &format!("creating: {e}")))?;
        f.write_all(contents.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| Self::io(&tmp, &format!("writing: {e}")))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| Self::io(&path, &format!("renaming into place: {e}")))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| Self::io(&self.dir, &format!("syncing the directory: {e}")))?;
        Ok(())
    }

    fn read_bounded(&self, path: &Path, cap: u64) -> Result<String> {
        let len = std::fs::metadata(path)
            .map_err(|e| Self::io(path, &format!("reading: {e}")))?
            .len();
        if len > cap {
            return Err(Self::io(
                path,
                &format!("{len} bytes, more than the {cap} a state file may hold"),
            ));
        }
        let bytes = std::fs::read(path).map_err(|e| Self::io(path, &format!("reading: {e}")))?;
        String::from_utf8(bytes).map_err(|_| Self::io(path, "not UTF-8: not a checkpoint file"))
    }

    /// Writes `chk-<id>.state` durably (temporary file, fsync, rename, directory fsync).
    pub fn write_state(&self, state: &CheckpointState) -> Result<()> {
        let text = state_text(&self.job, state)?;
        self.write_durably(&format!("chk-{}.state", state.id), &text)
    }

    /// Reads and checks `chk-<id>.state` (its job must be this store's; bounded in size).
    pub fn read_state(&self, id: u64) -> Result<CheckpointState> {
        let path = self.dir.join(format!("chk-{id}.state"));
        let text = self.read_bounded(&path, MAX_STATE_FILE)?;
        parse_state(&self.job, id, &text).map_err(|m| Self::io(&path, &m))
    }

    /// Writes the marker file `<PREFIX>-<id>` durably.
    pub fn write_marker(&self, marker: Marker, id: u64) -> Result<()> {
        self.write_durably(
            &format!("{}-{id}", marker.prefix()),
            &format!("{STATE_HEADER}\n{}checkpoint={id}\n", self.job),
        )
    }

    /// Every marker in the directory, each checked (a corrupt or another
    /// job's marker is refused, naming the file).
    pub fn markers(&self) -> Result<MarkerSet> {
        let mut set = MarkerSet::default();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| Self::io(&self.dir, &format!("listing: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| Self::io(&self.dir, &format!("listing: {e}")))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            for marker in Marker::ALL {
                let Some(id) = id_in(name, &format!("{}-", marker.prefix()), "") else {
                    continue;
                };
                let path = entry.path();
                let text = self.read_bounded(&path, MAX_MARKER_FILE)?;
                parse_marker(&self.job, id, &text).map_err(|m| Self::io(&path, &m))?;
                set.insert(marker, id);
            }
        }
        Ok(set)
    }

    /// Removes what no restore can need once `CONFIRMED-<n>` is durable:
    /// state files and markers below `n`, and in each of `receipt_dirs` the
    /// receipts and unresolved markers of checkpoints below `n` (every
    /// subtask's). Failures are logged, not fatal (the next prune retries).
    pub fn prune_below(&self, n: u64, receipt_dirs: &[PathBuf]) {
        let sweep = |dir: &Path, below: &dyn Fn(&str) -> bool| {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if below(name) {
                    if let Err(e) = std::fs::remove_file(entry.path()) {
                        tracing::warn!(path = %entry.path().display(), error = %e, "pruning");
                    }
                }
            }
        };
        sweep(&self.dir, &|name| {
            id_in(name, "chk-", ".state")
                .into_iter()
                .chain(
                    Marker::ALL
                        .iter()
                        .filter_map(|m| id_in(name, &format!("{}-", m.prefix()), "")),
                )
                .any(|id| id < n)
        });
        for dir in receipt_dirs {
            sweep(dir, &|name| receipt_checkpoint(name).is_some_and(|id| id < n));
        }
    }
}

/// Checks a file's header and the job lines (`key=value\n` each, as
/// [`CheckpointStore::open`] keeps them); returns the rest.
fn check_job<'a>(job: &str, text: &'a str) -> std::result::Result<&'a str, String> {
    let Some(rest) = text.strip_prefix(STATE_HEADER).and_then(|r| r.strip_prefix('\n')) else {
        return Err(format!("not a {STATE_HEADER} file (corrupt or foreign)"));
    };
    match rest.strip_prefix(job) {
        Some(rest) => Ok(rest),
        None => {
            let theirs: Vec<&str> = rest.lines().take_while(|l| !l.starts_with("checkpoint=")).collect();
            Err(format!(
                "another job's file ({}); this job is {}: give each job its own state directory",
                theirs.join(", "),
                job.trim_end().replace('\n', ", ")
            ))
        }
    }
}

/// A state file's text for job `job` (its `key=value` lines).
pub fn state_text(job: &str, state: &CheckpointState) -> Result<String> {
    let mut text = format!("{STATE_HEADER}\n{job}checkpoint={}\n", state.id);
    for row in &state.rows {
        if row.key.contains(['\t', '\n', '\r']) {
            return Err(ConnectorError::BadState {
                key: row.key.clone(),
                message: "a state row key with a tab or newline cannot be stored".into(),
            });
        }
        text.push_str(&format!("row={}\t{}\n", row.key, hex(&row.value)));
    }
    Ok(text)
}

/// Parses `chk-<id>.state` of job `job` (pure: what the fuzz target
/// drives); the error says what is wrong.
pub fn parse_state(job: &str, id: u64, text: &str) -> std::result::Result<CheckpointState, String> {
    let rest = check_job(job, text)?;
    let bad = |what: &str| format!("corrupt: {what}");
    let mut checkpoint = None;
    let mut rows = Vec::new();
    for line in rest.lines() {
        if let Some(v) = line.strip_prefix("checkpoint=") {
            checkpoint = Some(v.parse::<u64>().map_err(|_| bad("checkpoint= is not a number"))?);
        } else if let Some(v) = line.strip_prefix("row=") {
            let (key, value) = v.split_once('\t').ok_or_else(|| bad("a row without a tab"))?;
            let value = unhex(value).ok_or_else(|| bad("a row value is not hex"))?;
            rows.push(StateRow {
                key: key.to_owned(),
                value,
            });
        } else {
            return Err(bad(&format!(
                "unexpected line {:?}",
                line.chars().take(80).collect::<String>()
            )));
        }
    }
    if checkpoint != Some(id) {
        return Err(bad(&format!("does not hold checkpoint {id}")));
    }
    Ok(CheckpointState { id, rows })
}

/// Checks a marker (`COMPLETED-<id>`, …) of job `job`.
pub fn parse_marker(job: &str, id: u64, text: &str) -> std::result::Result<(), String> {
    if check_job(job, text)? != format!("checkpoint={id}\n") {
        return Err(format!("corrupt: does not hold checkpoint={id} alone"));
    }
    Ok(())
}

/// `<checkpoint dir>/_jobs/<job id>/receipts`.
pub fn receipt_dir(checkpoint_dir: &Path, job_id: &str) -> PathBuf {
    checkpoint_dir.join("_jobs").join(job_id).join("receipts")
}

/// The coordinator: a [`CheckpointStore`] plus the protocol's state.
#[derive(Debug)]
pub struct Coordinator {
    store: CheckpointStore,
    parallelism: u32,
    markers: MarkerSet,
    round: Option<CheckpointRound>,
    receipt_dirs: Vec<PathBuf>,
}

impl Coordinator {
    /// Reads (and checks) every marker in the store.
    pub fn new(store: CheckpointStore, parallelism: u32, receipt_dirs: Vec<PathBuf>) -> Result<Self> {
        if parallelism == 0 {
            return Err(ConnectorError::InvalidOption {
                option: "parallelism".into(),
                value: "0".into(),
                expected: "at least 1".into(),
            });
        }
        let markers = store.markers()?;
        Ok(Coordinator {
            store,
            parallelism,
            markers,
            round: None,
            receipt_dirs,
        })
    }

    /// The state directory this coordinator writes.
    pub fn store(&self) -> &CheckpointStore {
        &self.store
    }

    /// How many subtasks each checkpoint collects rows from.
    pub fn parallelism(&self) -> u32 {
        self.parallelism
    }

    /// The markers as last read or written.
    pub fn markers(&self) -> &MarkerSet {
        &self.markers
    }

    /// The restore point the markers imply ([`plan_restore`]).
    pub fn restore_plan(&self) -> RestorePlan {
        plan_restore(&self.markers)
    }

    /// Reads checkpoint `id`'s durable state.
    pub fn read_state(&self, id: u64) -> Result<CheckpointState> {
        self.store.read_state(id)
    }

    /// Applies [`decide_restore`] to an unconfirmed checkpoint's verdicts
    /// (one entry per sink subtask) and writes its outcome: CONFIRMED-n and
    /// a prune, or ABANDONED-n. A hold writes nothing.
    pub fn settle_restore(
        &mut self,
        checkpoint: u64,
        verdicts: &[(u32, Vec<CheckpointVerdict>)],
    ) -> Result<RestoreDecision> {
        let fallback = self.markers.newest_confirmed_below(checkpoint);
        let decision = decide_restore(checkpoint, fallback, verdicts);
        match &decision {
            RestoreDecision::Confirm { checkpoint } => {
                self.write_marker(Marker::Confirmed, *checkpoint)?;
                self.store.prune_below(*checkpoint, &self.receipt_dirs);
            }
            RestoreDecision::FallBack { abandon, .. } => self.write_marker(Marker::Abandoned, *abandon)?,
            RestoreDecision::Hold { .. } => {}
        }
        Ok(decision)
    }

    fn write_marker(&mut self, marker: Marker, id: u64) -> Result<()> {
        self.store.write_marker(marker, id)?;
        self.markers.insert(marker, id);
        Ok(())
    }

    /// Starts checkpoint `n` (above every id in the store): the barrier the
    /// driver sends to every subtask.
    pub fn begin_checkpoint(&mut self) -> Result<u64> {
        if self.round.is_some() {
            return Err(call_order("beginning a checkpoint while another is in progress"));
        }
        let id = self.markers.next_id();
        self.round = Some(CheckpointRound::new(id, self.parallelism));
        Ok(id)
    }

    fn round(&mut self) -> Result<&mut CheckpointRound> {
        self.round.as_mut().ok_or(call_order("with no checkpoint in progress"))
    }

    /// The checkpoint in progress.
    pub fn current(&self) -> Option<&CheckpointRound> {
        self.round.as_ref()
    }

    /// Subtask `subtask`'s rows for the checkpoint in progress (each subtask once).
    pub fn collect(&mut self, subtask: u32, rows: Vec<StateRow>) -> Result<()> {
        self.round()?.handle_rows(subtask, rows)
    }

    /// Writes the collected state durably, plus `extra` rows (the driver's
    /// own, e.g. a record count).
    pub fn write_state(&mut self, extra: Vec<StateRow>) -> Result<()> {
        let round = self.round()?;
        let mut rows = round.state_rows()?;
        rows.extend(extra);
        let state = CheckpointState { id: round.id(), rows };
        round.handle_state_written()?;
        self.store.write_state(&state)
    }

    /// Writes COMPLETED-n: the checkpoint is globally durable; the driver
    /// now sends `on_commit(n)` to every subtask.
    pub fn mark_completed(&mut self) -> Result<u64> {
        let round = self.round()?;
        round.handle_completed()?;
        let id = round.id();
        self.write_marker(Marker::Completed, id)?;
        Ok(id)
    }

    /// Subtask `subtask`'s `on_commit` returned for the checkpoint in progress.
    pub fn commit_returned(&mut self, subtask: u32) -> Result<()> {
        self.round()?.handle_commit_returned(subtask)
    }

    /// Writes CONFIRMED-n once every subtask's commit returned, prunes
    /// below it and ends the round.
    pub fn confirm(&mut self) -> Result<u64> {
        let round = self.round()?;
        if round.stage() != RoundStage::Confirmable {
            return Err(call_order("confirming before every subtask's commit returned"));
        }
        let id = round.id();
        self.write_marker(Marker::Confirmed, id)?;
        self.round = None;
        self.store.prune_below(id, &self.receipt_dirs);
        Ok(id)
    }

    /// Drops a round that failed before COMPLETED (its id is not reused
    /// only if a marker was written; a never-completed id may be taken
    /// again, overwriting its state file).
    pub fn abandon_round(&mut self) {
        self.round = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: &str, v: &[u8]) -> StateRow {
        StateRow {
            key: k.into(),
            value: v.to_vec(),
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("clink-checkpoint-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn verdict(checkpoint: u64, v: RestoreVerdict) -> CheckpointVerdict {
        CheckpointVerdict {
            checkpoint,
            records: 5,
            verdict: v,
        }
    }

    fn committed() -> RestoreVerdict {
        RestoreVerdict::Committed { by_receipt: false }
    }

    fn not_committed() -> RestoreVerdict {
        RestoreVerdict::NotCommitted {
            reason: "fenced".into(),
        }
    }

    fn unreachable() -> RestoreVerdict {
        RestoreVerdict::Unreachable { reason: "down".into() }
    }

    #[test]
    fn a_round_confirms_only_after_every_subtasks_commit() {
        let mut r = CheckpointRound::new(4, 3);
        assert!(r.state_rows().is_err(), "no state before every row");
        r.handle_rows(1, vec![row("b", b"1")]).unwrap();
        assert!(r.handle_rows(1, vec![]).is_err(), "a subtask answers once");
        assert!(r.handle_rows(3, vec![]).is_err(), "no subtask 3 of 3");
        assert!(r.handle_completed().is_err(), "COMPLETED before state");
        r.handle_rows(0, vec![row("a", b"0")]).unwrap();
        assert_eq!(r.stage(), RoundStage::Collecting);
        assert!(r.handle_commit_returned(0).is_err(), "commit before COMPLETED");
        r.handle_rows(2, vec![]).unwrap();
        assert_eq!(r.stage(), RoundStage::Collected);
        assert_eq!(r.state_rows().unwrap(), vec![row("a", b"0"), row("b", b"1")]);
        r.handle_state_written().unwrap();
        r.handle_completed().unwrap();
        r.handle_commit_returned(2).unwrap();
        r.handle_commit_returned(0).unwrap();
        assert_eq!(r.stage(), RoundStage::Committing);
        assert_eq!(r.awaiting_commit(), vec![1]);
        r.handle_commit_returned(1).unwrap();
        assert_eq!(r.stage(), RoundStage::Confirmable);
    }

    #[test]
    fn the_restore_plan_follows_the_markers() {
        let mut m = MarkerSet::default();
        assert_eq!(plan_restore(&m), RestorePlan::Fresh);
        assert_eq!(m.next_id(), 1);
        m.insert(Marker::Completed, 3);
        m.insert(Marker::Confirmed, 3);
        assert_eq!(plan_restore(&m), RestorePlan::Confirmed(3));
        m.insert(Marker::Completed, 4);
        assert_eq!(
            plan_restore(&m),
            RestorePlan::Unconfirmed {
                checkpoint: 4,
                fallback: Some(3)
            }
        );
        m.insert(Marker::Abandoned, 4);
        assert_eq!(plan_restore(&m), RestorePlan::Confirmed(3));
        assert_eq!(m.next_id(), 5, "an abandoned id is never reused");
        // A CONFIRMED without its COMPLETED is not a restore point.
        let mut m = MarkerSet::default();
        m.insert(Marker::Confirmed, 2);
        m.insert(Marker::Completed, 5);
        assert_eq!(
            plan_restore(&m),
            RestorePlan::Unconfirmed {
                checkpoint: 5,
                fallback: None
            }
        );
    }

    #[test]
    fn the_decision_probes_every_subtask_and_holds_on_unreachable() {
        let all = |vs: Vec<Vec<CheckpointVerdict>>| -> Vec<(u32, Vec<CheckpointVerdict>)> {
            vs.into_iter().enumerate().map(|(i, v)| (i as u32, v)).collect()
        };
        assert_eq!(
            decide_restore(7, Some(6), &all(vec![vec![verdict(7, committed())], vec![]])),
            RestoreDecision::Confirm { checkpoint: 7 }
        );
        // Mixed: subtask 0 committed, 1 fenced, 2 owed nothing.
        assert_eq!(
            decide_restore(
                7,
                Some(6),
                &all(vec![
                    vec![verdict(7, committed())],
                    vec![verdict(7, not_committed())],
                    vec![]
                ])
            ),
            RestoreDecision::FallBack {
                abandon: 7,
                to: Some(6),
                not_committed: vec![1],
                committed: vec![0]
            }
        );
        // Unreachable beside a final "not committed" still holds.
        assert_eq!(
            decide_restore(
                7,
                None,
                &all(vec![vec![verdict(7, not_committed())], vec![verdict(7, unreachable())]])
            ),
            RestoreDecision::Hold {
                checkpoint: 7,
                unreachable: vec![1]
            }
        );
        // A queued segment below n that was never produced is a NotCommitted too.
        assert!(matches!(
            decide_restore(
                7,
                None,
                &all(vec![vec![verdict(6, not_committed()), verdict(7, committed())]])
            ),
            RestoreDecision::FallBack { .. }
        ));
    }

    #[test]
    fn state_round_trips_and_corrupt_or_foreign_files_are_refused_by_name() {
        let dir = temp_dir("store");
        let store = CheckpointStore::open(&dir, &[("job-id", "j1"), ("to", "out")]).unwrap();
        let state = CheckpointState {
            id: 7,
            rows: vec![
                row("kafka-source/in/0", b"42"),
                row("kafka_2pc/tx/7", &[0, 0xff, b'\n']),
            ],
        };
        store.write_state(&state).unwrap();
        store.write_marker(Marker::Completed, 7).unwrap();
        assert_eq!(store.read_state(7).unwrap(), state);
        assert_eq!(
            store.markers().unwrap().completed.into_iter().collect::<Vec<_>>(),
            vec![7]
        );
        assert!(store.read_state(8).is_err());

        let other = CheckpointStore::open(&dir, &[("job-id", "j1"), ("to", "elsewhere")]).unwrap();
        let e = other.read_state(7).unwrap_err().to_string();
        assert!(
            e.contains("chk-7.state") && e.contains("another job") && e.contains("to=out"),
            "{e}"
        );
        let e = other.markers().unwrap_err().to_string();
        assert!(e.contains("COMPLETED-7") && e.contains("another job"), "{e}");

        std::fs::write(dir.join("chk-9.state"), "garbage").unwrap();
        let e = store.read_state(9).unwrap_err().to_string();
        assert!(e.contains("chk-9.state") && e.contains("corrupt"), "{e}");
        std::fs::write(
            dir.join("chk-10.state"),
            format!("{STATE_HEADER}\njob-id=j1\nto=out\ncheckpoint=10\nrow=k\tzz\n"),
        )
        .unwrap();
        let e = store.read_state(10).unwrap_err().to_string();
        assert!(e.contains("chk-10.state") && e.contains("not hex"), "{e}");
        std::fs::write(dir.join("chk-11.state"), [0xff, 0xfe]).unwrap();
        assert!(store.read_state(11).unwrap_err().to_string().contains("chk-11.state"));

        std::fs::write(dir.join("CONFIRMED-7"), "checkpoint=7\n").unwrap();
        let e = store.markers().unwrap_err().to_string();
        assert!(e.contains("CONFIRMED-7"), "{e}");
        std::fs::write(
            dir.join("CONFIRMED-7"),
            format!("{STATE_HEADER}\njob-id=j1\nto=out\ncheckpoint=8\n"),
        )
        .unwrap();
        let e = store.markers().unwrap_err().to_string();
        assert!(e.contains("CONFIRMED-7") && e.contains("corrupt"), "{e}");
        assert!(CheckpointStore::open(&dir, &[("job-id", "two\nlines")]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unwritable_state_dir_is_an_error_naming_the_path() {
        let dir = temp_dir("unwritable");
        std::fs::write(&dir, "a file, not a directory").unwrap();
        let e = CheckpointStore::open(&dir.join("sub"), &[("job-id", "j")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("clink-checkpoint-unit-unwritable"), "{e}");
        let _ = std::fs::remove_file(&dir);
    }

    #[test]
    fn the_coordinator_runs_a_checkpoint_and_prunes_below_the_confirmed_one() {
        let dir = temp_dir("coordinator");
        let store = CheckpointStore::open(&dir, &[("job-id", "j")]).unwrap();
        let receipts = store.receipt_dir("j");
        std::fs::create_dir_all(&receipts).unwrap();
        let mut c = Coordinator::new(store, 2, vec![receipts.clone()]).unwrap();
        for f in [
            "sub0-1",
            "sub1-1",
            "sub1-1.unresolved",
            "sub0-2",
            "sub12-3",
            "subx-1",
            "other",
        ] {
            std::fs::write(receipts.join(f), "x").unwrap();
        }
        let id = c.begin_checkpoint().unwrap();
        assert_eq!(id, 1);
        assert!(c.begin_checkpoint().is_err());
        c.collect(0, vec![row("a", b"1")]).unwrap();
        assert!(c.write_state(vec![]).is_err(), "subtask 1 has not answered");
        c.collect(1, vec![]).unwrap();
        c.write_state(vec![row("records", b"9")]).unwrap();
        assert!(c.confirm().is_err());
        c.mark_completed().unwrap();
        c.commit_returned(0).unwrap();
        assert!(c.confirm().is_err(), "subtask 1's commit has not returned");
        c.commit_returned(1).unwrap();
        assert_eq!(c.confirm().unwrap(), 1);
        for _ in 0..2 {
            let id = c.begin_checkpoint().unwrap();
            c.collect(0, vec![]).unwrap();
            c.collect(1, vec![]).unwrap();
            c.write_state(vec![]).unwrap();
            c.mark_completed().unwrap();
            c.commit_returned(0).unwrap();
            c.commit_returned(1).unwrap();
            c.confirm().unwrap();
            assert!(id > 1);
        }
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["COMPLETED-3", "CONFIRMED-3", "_jobs", "chk-3.state"]);
        let mut receipts_left: Vec<String> = std::fs::read_dir(&receipts)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        receipts_left.sort();
        assert_eq!(receipts_left, ["other", "sub12-3", "subx-1"]);

        // A restart reads the same markers back; an unconfirmed checkpoint
        // is settled by the verdicts.
        let store = CheckpointStore::open(&dir, &[("job-id", "j")]).unwrap();
        store.write_state(&CheckpointState { id: 4, rows: vec![] }).unwrap();
        store.write_marker(Marker::Completed, 4).unwrap();
        let mut c = Coordinator::new(store, 2, vec![receipts]).unwrap();
        assert_eq!(
            c.restore_plan(),
            RestorePlan::Unconfirmed {
                checkpoint: 4,
                fallback: Some(3)
            }
        );
        let held = c
            .settle_restore(4, &[(0, vec![verdict(4, unreachable())]), (1, vec![])])
            .unwrap();
        assert!(matches!(held, RestoreDecision::Hold { .. }));
        assert!(!dir.join("ABANDONED-4").exists() && !dir.join("CONFIRMED-4").exists());
        let d = c
            .settle_restore(4, &[(0, vec![verdict(4, not_committed())]), (1, vec![])])
            .unwrap();
        assert!(matches!(d, RestoreDecision::FallBack { to: Some(3), .. }), "{d:?}");
        assert!(dir.join("ABANDONED-4").exists());
        assert_eq!(c.restore_plan(), RestorePlan::Confirmed(3));
        assert_eq!(c.begin_checkpoint().unwrap(), 5);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn hex_round_trips_and_refuses_bad_digits() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&all)).unwrap(), all);
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é"), None, "a multi-byte char never panics the slicing");
    }
}
