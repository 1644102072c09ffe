//! `clink-kafka copy`: the exactly-once copy job. `--parallelism N`
//! subtasks (default 1), each a [`KafkaSource`](clink_kafka::connector::KafkaSource) owning the partitions
//! `p % N == i` of `--from` into its own `kafka_2pc_sink_string` sink
//! ([`TwoPhaseCommitSink`](clink_kafka::connector::TwoPhaseCommitSink), writing `--to` with transactional
//! id `<id>-<i>`, or `<id>` alone at parallelism 1), under one checkpoint
//! coordinator ([`clink_kafka::connector::checkpoint`]) whose durable state
//! lives in `--state-dir`. This file is the driver: it owns the operators,
//! decides when a checkpoint is due and places the fault points; the
//! protocol (markers, state files, restore decisions, pruning) is the
//! library's.
//!
//! # Subtasks and the driver
//!
//! After the restore each subtask runs in its own tokio task, which owns
//! its source and sink and loops {poll the source; send the batch to the
//! sink; count it}: a slow or empty source sets no one else's pace (the
//! rounds that waited for every subtask's poll made parallelism 4 three to
//! five times slower than parallelism 1 on the same input). The driver
//! talks to a task only through commands served between two of its batches
//! (`Barrier(n)`, `Commit(n)`, `Stop`, `Close`; a poll waiting for records
//! is dropped for a command, which the source is cancel safe for; a send to
//! the sink never is). It counts the records sent across subtasks (a shared
//! counter, pulsed after each batch) to decide when a checkpoint is due; the
//! count a checkpoint records is the exact sum its barriers report. A due
//! checkpoint waits (at most 500 ms) until every subtask sent records in the
//! interval or has polled nothing for 50 ms, so a subtask whose fetch is a
//! moment late is not left out of it (its sink-side fault points need a
//! transaction in every checkpoint while it has records). With
//! `--checkpoint-every-records` a subtask that sent records in the interval
//! polls no more once the count is reached, until the barrier: the cut
//! lands within a batch per subtask of the trigger even while the driver is
//! still busy confirming the previous checkpoint. A task that fails or panics ends
//! the job with its error, the subtask named.
//!
//! # One process per job
//!
//! `copy` holds `DIR/LOCK` exclusively (`flock`) for its whole run, taken
//! before the state directory is read or a broker reached, and writes its
//! pid into it; the OS releases it when the process dies (SIGKILL
//! included). A second copy on the same directory waits for it up to
//! `--lock-wait-ms` (default 30 s), saying once which pid holds it, then
//! gives up with exit code 4: two instances never run at once, so neither
//! fences the other's transactions nor writes over its checkpoints.
//!
//! # Checkpoint `n` (the steps, in order)
//!
//! 1. batches flow from each source into its sink's open transaction
//!    (`on_data`); when `--checkpoint-every-records` records (across
//!    subtasks, or `--checkpoint-interval-ms`) have passed, or the sources
//!    went idle, or `--expected` records are in (the last two stop every
//!    subtask's polling first):
//! 2. for each subtask at once, in its task between two batches:
//!    `source.snapshot()` and `sink.on_barrier(n)` (flush, seal the
//!    transaction PREPARED; its state row carries the resume handle, no
//!    secret): the same point of its stream; the task then polls nothing
//!    until its commit; the coordinator collects the rows;
//! 3. checkpoint `n`'s state — every subtask's rows plus the running record
//!    count — goes to `DIR/chk-<n>.state` (temporary file, fsync, rename,
//!    fsync of the directory);
//! 4. `DIR/COMPLETED-<n>` is written the same way;
//! 5. for each subtask, one after the other in subtask order:
//!    `sink.on_commit(n)`: EndTxn(commit), then the sink's
//!    receipt `DIR/_jobs/<job>/receipts/sub<i>-<n>` (fsync + rename); the
//!    subtask polls again;
//! 6. `DIR/CONFIRMED-<n>` once every subtask's commit returned; everything
//!    below `n` is pruned (state files, markers, receipts and markers of
//!    every subtask).
//!
//! # Restore (at start)
//!
//! The restore point is the newest `COMPLETED-n` (not marked abandoned):
//!
//! - with `CONFIRMED-n`: the sources resume from `n`'s offsets; the sinks
//!   get none of `n`'s rows and open fresh — `init_transactions` fences and
//!   aborts whatever the dead process had open or prepared after `n`;
//! - without: every sink is restored from `n`'s rows and opened; each
//!   resolves its own prepared transaction BEFORE fencing it (a receipt:
//!   committed, no wire call; otherwise EndTxn commit with the handle's
//!   identity, a fenced answer disambiguated by DescribeTransactions). Every
//!   subtask is resolved before the coordinator decides on their verdicts
//!   (`Sink::restore_verdicts`): all committed → `CONFIRMED-n`, resume from
//!   `n`; any Unreachable → the restart is held (exit 1, nothing fenced);
//!   otherwise a final "not committed" → `ABANDONED-n`, resume from the
//!   newest CONFIRMED checkpoint below `n` (or the beginning), replaying the
//!   interval. With parallelism above 1 that fallback can be a mixed
//!   verdict (some subtasks' commits of `n` proven, receipted). Every
//!   restore that is not a fresh start tells each sink its restore point
//!   (`Sink::on_restore_point`): a sink with receipts above it arms replay
//!   suppression from them and swallows (and counts) exactly the replayed
//!   records they cover: each receipt keeps, per input partition, the
//!   next offset after the last record its sink got before the barrier,
//!   and a replayed record below it is published already.
//!
//! # Replay suppression and event time
//!
//! Copy's sinks judge the replay by input position (the records carry
//! their input partition and offset): exact for any number of partitions
//! per subtask and any timestamps. A record's event time is its Kafka
//! timestamp; after each batch a subtask still hands its sink a watermark
//! (one below the lowest, across its owned partitions, of each
//! partition's highest timestamp: a true watermark when each partition's
//! timestamps never decrease), which the receipts keep as their horizon
//! for records without a position. `copy-done` reports `suppressed=`
//! (records swallowed), `unjudged=` (records an armed sink could not
//! judge and passed) and `suppression-positions=` (input partitions the
//! sinks armed positions for).
//!
//! Checkpoint ids only grow, so an orphan's id is never reused.
//!
//! # Fault points (`CLINK_KAFKA_FAULT=<point>[:<k>][@<subtask>]`)
//!
//! At the k-th occurrence (default 1) in this process of `<point>` (of
//! subtask `<subtask>` when given; of any subtask otherwise), the process
//! SIGKILLs itself (`kill -9` of its own pid; no destructor, no flush, no
//! EndTxn). Subtask points: `mid-batch`, `after-barrier`, `after-end-txn`,
//! `after-commit`, `after-resolve`, `after-recovery-open`; coordinator
//! points (no `@`): `after-state-written`, `after-completed`,
//! `after-confirmed`.
//!
//! | point | state left behind | recovery |
//! |---|---|---|
//! | `mid-batch` | after the k-th `on_data`: an open transaction with records | restore from the newest checkpoint; the init aborts the open transaction; replay |
//! | `after-barrier` | `n` prepared in Kafka (for the subtasks up to this one), no state file | `n` never happened: restore from `n-1`; the inits abort the prepared transactions; replay |
//! | `after-state-written` | `chk-n.state`, no COMPLETED-n | same as `after-barrier` |
//! | `after-completed` | COMPLETED-n, no commit sent | restore `n` unconfirmed: the resolvers commit it over the wire, CONFIRMED-n |
//! | `after-end-txn` | a subtask's EndTxn acknowledged, no receipt (inside the sink) | restore `n` unconfirmed: that subtask's EndTxn again reads fenced, DescribeTransactions proves the commit (or, the id fenced meanwhile, its COMMIT marker in the log), receipt materialised; later subtasks committed over the wire; CONFIRMED-n |
//! | `after-commit` | a subtask's receipt written, no CONFIRMED-n | restore `n` unconfirmed: the receipts prove the commits up to this subtask, the rest resolved over the wire, CONFIRMED-n |
//! | `after-confirmed` | CONFIRMED-n | restore from the confirmed `n` |
//! | `after-resolve` | at a restore of an unconfirmed `n`: a subtask's resolver committed, no receipt yet | restore `n` unconfirmed again: resolved over the wire again |
//! | `after-recovery-open` | at a restore of an unconfirmed `n`: a subtask resolved and opened, no CONFIRMED-n yet | restore `n` unconfirmed again: the receipts the resolution wrote prove it |
//!
//! For the checkpoint points, k counts checkpoints this process took.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use clink_kafka::client::ClientConfig;
use clink_kafka::connector::checkpoint::{CheckpointState, CheckpointStore, Coordinator, RestoreDecision, RestorePlan};
use clink_kafka::connector::options::{SourceOptions, TwoPhaseCommitMode, TwoPhaseCommitOptions};
use clink_kafka::connector::security::SecurityConfig;
use clink_kafka::connector::selected::{SelectedConsumer, SelectedProducer, SelectedTransactionalProducer};
use clink_kafka::connector::{
    selected, ConnectorError, KafkaMessage, KafkaSink, KafkaSource, ResumeRow, Sink, Source, StateRow,
    TwoPhaseCommitSink,
};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::{JoinError, JoinSet};

use super::{thousands, ConnectArgs};

/// Passes a fault point (`super::fault`, cargo feature `failpoints`); without
/// the feature it expands to an empty block and its arguments are not
/// evaluated.
macro_rules! fault_point {
    ($point:ident, $subtask:expr) => {{
        #[cfg(feature = "failpoints")]
        super::fault::fault_point(super::fault::FaultPoint::$point, $subtask);
    }};
}

/// The most subtasks `--parallelism` takes.
const MAX_PARALLELISM: u32 = 256;

/// Options of `copy`.
#[derive(Args, Debug)]
#[cfg_attr(
    feature = "failpoints",
    command(
        after_help = "Fault injection (tests): CLINK_KAFKA_FAULT=<point>[:<k>][@<subtask>] SIGKILLs the process at the \
k-th occurrence of <point> (of that subtask): mid-batch, after-barrier, after-end-txn, after-commit, after-resolve, \
after-recovery-open (subtask points), after-state-written, after-completed, after-confirmed (coordinator points, \
no @) (see src/cli/copy.rs)."
    )
)]
pub struct CopyArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
    #[command(flatten)]
    pub backend: super::backend::BackendArgs,
    /// Topic to read (every partition, from the earliest offset on a fresh start).
    #[arg(long)]
    pub from: String,
    /// Topic to write, in one broker transaction per checkpoint and subtask.
    #[arg(long)]
    pub to: String,
    /// Checkpoint state, COMPLETED/CONFIRMED markers and (under _jobs/) commit receipts.
    /// Required unless --group.
    #[arg(long, value_name = "DIR", required_unless_present = "group")]
    pub state_dir: Option<PathBuf>,
    /// Run as a member of this consumer group instead (src/cli/copy_group.rs):
    /// start the same command in several processes, each with its own
    /// --transactional-id; the group spreads --from's partitions over them,
    /// and each commits its input offsets inside its output transaction
    /// (KIP-447). No --state-dir.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// With --group: session.timeout.ms of the member (default 45000).
    #[arg(long, value_name = "MS", requires = "group")]
    pub session_timeout_ms: Option<u64>,
    /// The sinks' transactional.id (subtask i uses <id>-<i> when --parallelism
    /// is above 1); keep it across restarts of one job.
    #[arg(long)]
    pub transactional_id: String,
    /// exactly-once (the two-phase-commit sink) or at-least-once (the plain
    /// idempotent sink, flushed at each checkpoint: a replay after a crash
    /// may duplicate), to measure the price of exactly once.
    #[arg(long, value_name = "GUARANTEE", default_value = "exactly-once", value_parser = ["exactly-once", "at-least-once"])]
    pub guarantee: String,
    /// Subtasks: subtask i reads the partitions p with p % N == i.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub parallelism: u32,
    /// Most records one source poll hands over (the source's max_batch_size).
    #[arg(long, value_name = "N")]
    pub max_batch_records: Option<usize>,
    /// Take a checkpoint once this many records arrived since the last one
    /// (with --group: commit the transaction; alias --commit-every-records).
    #[arg(
        long,
        value_name = "N",
        conflicts_with = "checkpoint_interval_ms",
        alias = "commit-every-records"
    )]
    pub checkpoint_every_records: Option<u64>,
    /// Take a checkpoint this often (when records arrived). Default 1000
    /// unless --checkpoint-every-records is given (with --group: commit the
    /// transaction; alias --commit-every-ms).
    #[arg(long, value_name = "MS", alias = "commit-every-ms")]
    pub checkpoint_interval_ms: Option<u64>,
    /// Exit 0 once the source has had nothing for this long, after a final checkpoint.
    #[arg(long, value_name = "MS", default_value_t = 5_000)]
    pub until_idle_ms: u64,
    /// Exit 0 as soon as this many records are copied (checkpointed and
    /// committed); more is an error, fewer by the idle exit is exit code 3.
    #[arg(long, value_name = "N")]
    pub expected: Option<u64>,
    /// How long a restore retries an unreachable broker while resolving a
    /// prepared transaction before failing (nothing is fenced meanwhile).
    #[arg(long, value_name = "MS", default_value_t = 30_000, hide = true)]
    pub resolve_unreachable_after_ms: u64,
    /// How long opening the source and sink (also while restoring) keeps
    /// retrying the bootstrap list while no broker answers
    /// (`bootstrap_timeout`, Java's `default.api.timeout.ms`); 0 makes a
    /// single pass.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub bootstrap_timeout_ms: u64,
    /// The source's rack (client.rack, KIP-392): read each partition from
    /// the replica in this rack when the brokers' replica selector names one.
    #[arg(long, value_name = "RACK")]
    pub client_rack: Option<String>,
    /// How long to wait for another copy holding --state-dir (its lock,
    /// <DIR>/LOCK) to exit before giving up with exit code 4. One job, one
    /// process: a second copy on the same state directory never runs beside
    /// the first.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub lock_wait_ms: u64,
    /// The sinks' replay_suppression: after a fallback below commits a
    /// subtask already made (receipted), swallow exactly its replayed
    /// records those commits published (judged by input position: each
    /// receipt keeps per input partition the offset its commit covered).
    /// false: the replay publishes them again.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub replay_suppression: bool,
    /// The sinks' two_phase_commit: resume (a prepared transaction is
    /// committed at the restore with its staged handle; one the broker
    /// aborted on its transaction timeout during a long outage is replayed)
    /// or kip939 (KIP-939: the broker never aborts a prepared transaction on
    /// its timeout, so the restore commits it however long the job was down;
    /// needs brokers with transaction.two.phase.commit.enable=true and
    /// InitProducerId v6, and the native backend).
    #[arg(long, value_name = "MODE", default_value = "resume", value_parser = ["resume", "kip939"])]
    pub two_phase_commit: String,
    /// The sinks' transaction timeout (transaction.timeout.ms, default
    /// 60000): the broker aborts a transaction left open or prepared longer
    /// (unless --two-phase-commit kip939); tests of long outages.
    #[arg(long, value_name = "MS", hide = true)]
    pub transaction_timeout_ms: Option<u64>,
}

/// The connector's security settings for what the CLI options resolved to
/// (the same protocol, credentials and TLS material: nothing weaker).
fn connector_security(config: &ClientConfig) -> SecurityConfig {
    SecurityConfig {
        protocol: config.security_protocol,
        sasl: config.sasl.clone(),
        tls: config.security_protocol.uses_tls().then(|| config.tls.clone()),
    }
}

/// The lock file in the state directory.
const LOCK_FILE: &str = "LOCK";

/// How often a copy waiting for the state directory's lock tries again.
const LOCK_RETRY: Duration = Duration::from_millis(100);

/// Takes `<dir>/LOCK` exclusively (`flock`), waiting up to `wait` for the
/// copy that holds it to exit (saying so once, with the pid the holder
/// wrote into the file); `None` when it still holds it then. The lock lives
/// as long as the returned file: the whole run (the OS releases it when the
/// process dies, SIGKILL included). The holder writes `pid=<pid>` into it.
async fn lock_state_dir(dir: &Path, wait: Duration) -> anyhow::Result<Option<std::fs::File>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating --state-dir {}", dir.display()))?;
    let path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .with_context(|| format!("opening the state directory's lock {}", path.display()))?;
    let started = Instant::now();
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(e).with_context(|| format!("locking {}", path.display()));
            }
        }
        let holder = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().strip_prefix("pid=")?.parse::<u32>().ok())
            .map_or_else(|| "pid unknown".to_owned(), |pid| format!("pid {pid}"));
        if started.elapsed() >= wait {
            eprintln!(
                "copy: --state-dir {} is still locked by another copy ({holder}) after {} ms: not starting (one \
                 process per job; exit code {})",
                dir.display(),
                wait.as_millis(),
                super::exit::COPY_LOCKED
            );
            return Ok(None);
        }
        if !told {
            told = true;
            eprintln!(
                "copy: --state-dir {} is locked by another copy ({holder}, {}): waiting up to {} ms for it to exit",
                dir.display(),
                path.display(),
                wait.as_millis()
            );
        }
        tokio::time::sleep(LOCK_RETRY).await;
    }
    if told {
        eprintln!("copy: the other copy is gone; --state-dir {} is ours", dir.display());
    }
    file.set_len(0)
        .and_then(|()| file.write_all(format!("pid={}\n", std::process::id()).as_bytes()))
        .with_context(|| format!("writing our pid into {}", path.display()))?;
    Ok(Some(file))
}

/// The driver's own row in each checkpoint: records copied up to it.
const RECORDS_ROW: &str = "clink-copy/records";

fn records_row(records: u64) -> StateRow {
    StateRow {
        key: RECORDS_ROW.to_owned(),
        value: records.to_string().into_bytes(),
    }
}

fn records_in(state: &CheckpointState) -> anyhow::Result<u64> {
    state
        .rows
        .iter()
        .find(|r| r.key == RECORDS_ROW)
        .and_then(|r| std::str::from_utf8(&r.value).ok()?.parse().ok())
        .ok_or_else(|| anyhow!("checkpoint {} has no {RECORDS_ROW} row", state.id))
}

/// The job id under `<state dir>/_jobs/`: the transactional id, with every
/// byte outside `[A-Za-z0-9._-]` as `%XX` (one path component).
fn job_id(transactional_id: &str) -> String {
    let mut out = String::new();
    for b in transactional_id.bytes() {
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.starts_with('.') {
        out.replace_range(0..1, "%2E");
    }
    out
}

/// When to take a checkpoint.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    Records(u64),
    Interval(Duration),
}

/// A subtask's sink: the job's guarantee.
enum CopySink {
    ExactlyOnce(Box<TwoPhaseCommitSink<SelectedTransactionalProducer>>),
    /// For comparison: flushed at the barrier, nothing to commit.
    AtLeastOnce(Box<KafkaSink<SelectedProducer>>),
}

impl CopySink {
    fn restore_rows(&mut self, rows: &[StateRow]) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.restore_rows(rows),
            CopySink::AtLeastOnce(_) => Ok(()),
        }
    }

    /// The restore's first pass (resolution, fencing nothing); the
    /// at-least-once sink has nothing to resolve.
    async fn resolve_before_open(&mut self) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.resolve_before_open().await,
            CopySink::AtLeastOnce(_) => Ok(()),
        }
    }

    async fn open_sink(&mut self) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.open_sink().await,
            CopySink::AtLeastOnce(s) => s.open_sink().await,
        }
    }

    async fn send_batch(&mut self, batch: Vec<KafkaMessage>) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.send_batch(batch).await,
            CopySink::AtLeastOnce(s) => s.send_batch(batch).await,
        }
    }

    async fn barrier(&mut self, id: u64) -> clink_kafka::connector::Result<Vec<StateRow>> {
        match self {
            CopySink::ExactlyOnce(s) => s.barrier(id).await,
            CopySink::AtLeastOnce(s) => s.flush_sink().await.map(|()| Vec::new()),
        }
    }

    async fn commit(&mut self, id: u64) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.commit(id).await,
            CopySink::AtLeastOnce(_) => Ok(()),
        }
    }

    async fn close_sink(&mut self) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.close_sink().await,
            CopySink::AtLeastOnce(s) => s.close_sink().await,
        }
    }

    fn on_watermark(&mut self, watermark: i64) {
        match self {
            CopySink::ExactlyOnce(s) => s.on_watermark(watermark),
            CopySink::AtLeastOnce(_) => {}
        }
    }

    fn on_restore_point(&mut self, checkpoint: Option<u64>) -> clink_kafka::connector::Result<()> {
        match self {
            CopySink::ExactlyOnce(s) => s.on_restore_point(checkpoint),
            CopySink::AtLeastOnce(_) => Ok(()),
        }
    }

    fn stats(&self) -> Option<clink_kafka::connector::TwoPhaseCommitStats> {
        match self {
            CopySink::ExactlyOnce(s) => Some(s.stats()),
            CopySink::AtLeastOnce(_) => None,
        }
    }

    fn restore_verdicts(&self) -> Vec<clink_kafka::connector::CheckpointVerdict> {
        match self {
            CopySink::ExactlyOnce(s) => s.restore_verdicts(),
            CopySink::AtLeastOnce(_) => Vec::new(),
        }
    }

    /// (resolved by receipt, resolved over the wire).
    fn resolved(&self) -> (u64, u64) {
        self.stats()
            .map_or((0, 0), |st| (st.resolved_by_receipt, st.resolved_over_the_wire))
    }
}

/// One subtask: a source over its partitions into its own sink.
struct Subtask {
    index: u32,
    source: KafkaSource<SelectedConsumer>,
    sink: CopySink,
    watermarks: PartitionWatermarks,
}

pub async fn run(args: CopyArgs) -> anyhow::Result<u8> {
    if args.group.is_some() {
        return super::copy_group::run(args).await;
    }
    let Some(state_dir) = args.state_dir.clone() else {
        bail!("--state-dir is required (unless --group)");
    };
    if args.parallelism == 0 || args.parallelism > MAX_PARALLELISM {
        bail!(
            "--parallelism must be between 1 and {MAX_PARALLELISM} (got {})",
            args.parallelism
        );
    }
    #[cfg(feature = "failpoints")]
    super::fault::arm_faults(args.parallelism)?;
    // Before anything reads the state directory or reaches a broker (an
    // init would fence the running instance's transactions).
    let Some(_lock) = lock_state_dir(&state_dir, Duration::from_millis(args.lock_wait_ms)).await? else {
        return Ok(super::exit::COPY_LOCKED);
    };
    let _metrics = args.metrics.start().await?;
    let trigger = match (args.checkpoint_every_records, args.checkpoint_interval_ms) {
        (Some(0), _) => bail!("--checkpoint-every-records must be at least 1"),
        (Some(n), _) => Trigger::Records(n),
        (None, ms) => Trigger::Interval(Duration::from_millis(ms.unwrap_or(1_000))),
    };
    let backend = args.backend.backend()?;
    let client = args.connect.client_config()?;
    let security = connector_security(&client);
    let parallelism = args.parallelism.to_string();
    let store = CheckpointStore::open(
        &state_dir,
        &[
            ("from", args.from.as_str()),
            ("to", args.to.as_str()),
            ("transactional-id", args.transactional_id.as_str()),
            ("parallelism", parallelism.as_str()),
            ("guarantee", args.guarantee.as_str()),
        ],
    )
    .context("opening --state-dir")?;
    let receipts = store.receipt_dir(&job_id(&args.transactional_id));
    let mut coordinator = Coordinator::new(store, args.parallelism, vec![receipts.clone()])?;

    let mut subtasks = Vec::new();
    for index in 0..args.parallelism {
        let mut sink_options = TwoPhaseCommitOptions::new(&args.connect.brokers, &args.to, &args.transactional_id);
        sink_options.sink.security = security.clone();
        sink_options.sink.client.request_timeout = Some(client.request_timeout);
        sink_options.sink.client.bootstrap_timeout = Some(Duration::from_millis(args.bootstrap_timeout_ms));
        sink_options.receipt_dir = Some(receipts.clone());
        sink_options.resolve_unreachable_after = Duration::from_millis(args.resolve_unreachable_after_ms);
        sink_options.sink.backend = backend;
        sink_options.subtask_index = index;
        sink_options.sink.subtask_index = index;
        sink_options.parallelism = args.parallelism;
        sink_options.replay_suppression = args.replay_suppression;
        sink_options.two_phase_commit = TwoPhaseCommitMode::parse("--two-phase-commit", &args.two_phase_commit)?;
        if let Some(ms) = args.transaction_timeout_ms {
            if ms == 0 || ms > i32::MAX as u64 {
                bail!("--transaction-timeout-ms must be between 1 and {} (got {ms})", i32::MAX);
            }
            sink_options.transaction_timeout = Duration::from_millis(ms);
            sink_options.sink.producer.delivery_timeout = Some(sink_options.transaction_timeout);
        }
        let sink = if args.guarantee == "at-least-once" {
            CopySink::AtLeastOnce(Box::new(
                selected::kafka_sink(sink_options.sink).context("configuring the sink")?,
            ))
        } else {
            CopySink::ExactlyOnce(Box::new(
                selected::two_phase_commit_sink(sink_options).context("configuring the sink")?,
            ))
        };

        let mut source_options = SourceOptions::new(&args.connect.brokers, &args.from);
        source_options.security = security.clone();
        source_options.client.request_timeout = Some(client.request_timeout);
        source_options.client.bootstrap_timeout = Some(Duration::from_millis(args.bootstrap_timeout_ms));
        source_options.group_id = format!("clink-copy-{}", args.transactional_id);
        source_options.backend = backend;
        source_options.subtask_index = index;
        source_options.source_parallelism = args.parallelism;
        if args.parallelism > 1 {
            // A due checkpoint waits for each subtask's batch or empty poll
            // of the interval: a drained source (or one without partitions)
            // says so after 10 ms, not the default 100.
            source_options.poll_timeout = Duration::from_millis(10);
        }
        if let Some(n) = args.max_batch_records {
            if n == 0 {
                bail!("--max-batch-records must be at least 1");
            }
            source_options.max_batch_size = n;
        }
        if let Some(rack) = &args.client_rack {
            if rack.trim().is_empty() {
                bail!("--client-rack must name a rack (leave it out to read from leaders)");
            }
            source_options.consumer.client_rack = Some(rack.clone());
        }
        let source = selected::kafka_source(source_options).context("configuring the source")?;
        subtasks.push(Subtask {
            index,
            source,
            sink,
            watermarks: PartitionWatermarks::new([]),
        });
    }

    let (restored, restore_point) = restore(&mut coordinator, &mut subtasks).await?;
    let mut total = match &restored {
        Some(cp) => records_in(cp)?,
        None => 0,
    };
    for s in &mut subtasks {
        if let Some(point) = restore_point {
            s.sink
                .on_restore_point(point)
                .with_context(|| format!("arming replay suppression at subtask {}", s.index))?;
            if let Some(st) = s.sink.stats().filter(|st| st.replay_suppression_armed) {
                eprintln!(
                    "copy: replay suppression armed at subtask {}: replayed records below the receipted input \
                     positions of {} partition(s) are published already",
                    s.index, st.suppression_positions
                );
            }
        }
        if let Some(cp) = &restored {
            s.source.restore(&cp.rows).context("restoring the source")?;
        }
        s.source.open().await.context("opening the source")?;
        let owned: Vec<i32> = s
            .source
            .snapshot()
            .iter()
            .filter_map(|row| match ResumeRow::from_state(row) {
                Ok(Some(r)) if r.topic == args.from => Some(r.partition),
                _ => None,
            })
            .collect();
        s.watermarks = PartitionWatermarks::new(owned);
    }
    eprintln!(
        "copy: {} -> {}: {} subtask(s), starting at checkpoint {}, {} records copied so far",
        args.from,
        args.to,
        args.parallelism,
        coordinator.markers().next_id(),
        thousands(total)
    );

    let until_idle = Duration::from_millis(args.until_idle_ms);
    let shared = Arc::new(Shared::new(subtasks.len(), trigger));
    let mut tasks = Tasks::spawn(subtasks, &shared);
    let mut last_record = Instant::now();
    let mut last_checkpoint = Instant::now();
    // Records the subtasks sent to their sinks in this process: seen by the
    // driver so far, and inside this process's checkpoints.
    let mut seen = 0u64;
    let mut checkpointed = 0u64;
    let mut due_since: Option<Instant> = None;
    let mut checkpoints = 0u64;
    let mut last = None;
    let mut progress = super::progress::Progress::new("copy");
    loop {
        let sent = shared.records.load(Ordering::Acquire);
        if sent != seen {
            seen = sent;
            last_record = Instant::now();
        }
        let since_checkpoint = sent - checkpointed;
        progress.update(total + since_checkpoint, || None);
        let idle = last_record.elapsed() >= until_idle;
        let reached = args.expected.is_some_and(|e| total + since_checkpoint >= e);
        if reached || idle {
            // The end: every subtask stops polling (between batches), then
            // one last checkpoint takes whatever they sent since the last.
            let left = tasks.stop().await?;
            if left > 0 {
                progress.finish();
                let (id, counted) = checkpoint(&mut coordinator, &mut tasks, total, |_| {}).await?;
                total += counted;
                checkpoints += 1;
                last = Some(id);
                eprintln!("copy: checkpoint {id} confirmed: {} records copied", thousands(total));
            }
            if let Some(e) = args.expected {
                if total > e {
                    bail!("copied {total} records, more than --expected {e}");
                }
            }
            break;
        }
        let due = since_checkpoint > 0
            && match trigger {
                Trigger::Records(n) => since_checkpoint >= n,
                Trigger::Interval(d) => last_checkpoint.elapsed() >= d,
            };
        if due {
            // A due checkpoint waits (at most READY_WAIT) until every
            // subtask sent records in this interval or went idle: a
            // subtask whose fetch is a moment late still has its records in
            // the checkpoint (its sink-side fault points need a transaction
            // in every checkpoint while it has records left).
            let since = *due_since.get_or_insert_with(Instant::now);
            if shared.all_ready() || since.elapsed() >= READY_WAIT {
                due_since = None;
                progress.finish();
                let next = |counted: u64| {
                    if let Trigger::Records(n) = trigger {
                        shared.pause_at.store(checkpointed + counted + n, Ordering::Release);
                    }
                };
                let (id, counted) = checkpoint(&mut coordinator, &mut tasks, total, next).await?;
                checkpointed += counted;
                total += counted;
                checkpoints += 1;
                last = Some(id);
                last_checkpoint = Instant::now();
                eprintln!("copy: checkpoint {id} confirmed: {} records copied", thousands(total));
                continue;
            }
        }
        // Until a batch is sent or a subtask turns ready, a deadline
        // passes, or a subtask's task ends (an error or a panic: the job
        // ends with it).
        let mut wake = last_record + until_idle;
        if let (Trigger::Interval(d), true) = (trigger, since_checkpoint > 0) {
            wake = wake.min(last_checkpoint + d);
        }
        if let Some(t) = due_since {
            wake = wake.min(t + READY_WAIT);
        }
        tokio::select! {
            biased;
            ended = tasks.set.join_next_with_id() => return Err(tasks.failure(ended)),
            () = shared.notify.notified() => {}
            () = tokio::time::sleep_until(tokio::time::Instant::from_std(wake)) => {}
        }
    }
    let mut subtasks = tasks.close().await?;
    progress.finish();
    for s in &mut subtasks {
        s.source.close().await.context("closing the source")?;
        s.sink.close_sink().await.context("closing the sink")?;
    }
    let last = last.unwrap_or_else(|| coordinator.markers().next_id() - 1);
    let (suppressed, unjudged, positions) =
        subtasks
            .iter()
            .filter_map(|s| s.sink.stats())
            .fold((0, 0, 0), |(a, b, c), st| {
                (
                    a + st.records_suppressed,
                    b + st.suppression_passed_through,
                    c + st.suppression_positions,
                )
            });
    println!(
        "copy-done records={total} checkpoints={checkpoints} last-checkpoint={last} restored-from={} \
         suppressed={suppressed} unjudged={unjudged} suppression-positions={positions}",
        restored.as_ref().map_or("none".to_owned(), |cp| cp.id.to_string())
    );
    eprintln!(
        "copy: done: {} records copied, {checkpoints} checkpoints in this run, {suppressed} replayed records \
         suppressed",
        thousands(total),
    );
    match args.expected {
        Some(e) if total < e => {
            eprintln!(
                "copy: idle for {} ms with {total} of --expected {e} records",
                args.until_idle_ms
            );
            Ok(super::exit::COPY_SHORT)
        }
        _ => Ok(super::exit::OK),
    }
}

/// What a restore decided: the state the sources resume from, and the
/// restore point for [`Sink::on_restore_point`] (`None` on a fresh
/// submit, which ignores receipts; `Some(None)`: a fallback to the
/// beginning).
type Restored = (Option<CheckpointState>, Option<Option<u64>>);

/// The restore: the coordinator's plan, every sink opened (resolving before
/// fencing), the verdicts settled.
async fn restore(coordinator: &mut Coordinator, subtasks: &mut [Subtask]) -> anyhow::Result<Restored> {
    match coordinator.restore_plan() {
        RestorePlan::Fresh => {
            for s in subtasks.iter_mut() {
                s.sink.open_sink().await.context("opening the sink")?;
            }
            Ok((None, None))
        }
        RestorePlan::Confirmed(n) => {
            let cp = coordinator.read_state(n)?;
            for s in subtasks.iter_mut() {
                s.sink.open_sink().await.context("opening the sink")?;
            }
            eprintln!("copy: restored from confirmed checkpoint {n}");
            Ok((Some(cp), Some(Some(n))))
        }
        RestorePlan::Unconfirmed { checkpoint: n, .. } => {
            let cp = coordinator.read_state(n)?;
            // Every subtask resolves (never stopping at the first refusal)
            // before the coordinator decides.
            let mut verdicts = Vec::new();
            let mut held = None;
            let mut failed = None;
            // First every subtask's handles, fencing nothing; then, unless
            // the walk is held, every sink's init. An init never runs
            // before the last resolution: a slow init (librdkafka waits
            // out an unreachable cluster) would otherwise outlast the
            // transactions the walk holds for.
            for s in subtasks.iter_mut() {
                s.sink.restore_rows(&cp.rows).context("restoring the sink")?;
                match s.sink.resolve_before_open().await {
                    Ok(()) => {}
                    Err(e @ ConnectorError::InDoubt { .. }) => {
                        held.get_or_insert(e);
                    }
                    // Not a verdict: the walk goes on, the restore fails
                    // after it without deciding.
                    Err(e) => {
                        failed.get_or_insert((s.index, e));
                    }
                }
                verdicts.push((s.index, s.sink.restore_verdicts()));
            }
            if held.is_none() && failed.is_none() {
                for s in subtasks.iter_mut() {
                    match s.sink.open_sink().await {
                        Ok(()) => fault_point!(AfterRecoveryOpen, Some(s.index)),
                        // An init that failed: nothing decided.
                        Err(e) => {
                            failed.get_or_insert((s.index, e));
                        }
                    }
                }
            }
            if let Some((index, e)) = failed {
                return Err(e).with_context(|| {
                    format!(
                        "restoring completed but unconfirmed checkpoint {n}: opening subtask {index}'s sink (nothing \
                         decided; restart to retry)"
                    )
                });
            }
            match coordinator.settle_restore(n, &verdicts)? {
                RestoreDecision::Confirm { .. } => {
                    let (by_receipt, over_the_wire) = subtasks.iter().fold((0, 0), |(r, w), s| {
                        let (sr, sw) = s.sink.resolved();
                        (r + sr, w + sw)
                    });
                    eprintln!(
                        "copy: restored from checkpoint {n}: its commit is confirmed now (resolved by receipt: \
                         {by_receipt}, over the wire: {over_the_wire})"
                    );
                    Ok((Some(cp), Some(Some(n))))
                }
                RestoreDecision::FallBack {
                    to,
                    not_committed,
                    committed,
                    ..
                } => {
                    eprintln!(
                        "copy: checkpoint {n}'s transaction is not committed and cannot be: restoring from {} and \
                         replaying its interval (not committed: subtask(s) {not_committed:?})",
                        to.map_or("the beginning".to_owned(), |m| format!("confirmed checkpoint {m}"))
                    );
                    if !committed.is_empty() {
                        eprintln!(
                            "copy: a mixed verdict: subtask(s) {committed:?} committed checkpoint {n} (receipted); \
                             their sinks' replay suppression judges the replayed records"
                        );
                    }
                    match to {
                        Some(m) => Ok((Some(coordinator.read_state(m)?), Some(Some(m)))),
                        None => Ok((None, Some(None))),
                    }
                }
                RestoreDecision::Hold { unreachable, .. } => {
                    let e = held.map_or_else(|| "unreachable".to_owned(), |e| e.to_string());
                    bail!(
                        "restoring completed but unconfirmed checkpoint {n}: resolving its prepared transaction: \
                         held, subtask(s) {unreachable:?} could not reach the broker (nothing was fenced; restart to \
                         retry): {e}"
                    )
                }
            }
        }
    }
}

/// A subtask's event-time watermark, what `copy` hands its sink
/// ([`Sink::on_watermark`]): each owned partition's highest record
/// timestamp, the lowest across them, minus one. A partition that has
/// delivered nothing yet holds it back (no watermark), so the watermark
/// never claims a record of a partition it has not seen. It is a true
/// watermark (nothing at or below it follows) when each partition's
/// timestamps never decrease (a later record may share the highest
/// timestamp: hence the minus one). Copy's suppression judges by input
/// position; the watermark serves records without one.
#[derive(Debug)]
struct PartitionWatermarks {
    max: std::collections::BTreeMap<i32, Option<i64>>,
}

impl PartitionWatermarks {
    fn new(partitions: impl IntoIterator<Item = i32>) -> Self {
        PartitionWatermarks {
            max: partitions.into_iter().map(|p| (p, None)).collect(),
        }
    }

    /// Takes a batch's timestamps (none: -1, ignored) into account.
    fn observe(&mut self, batch: &[KafkaMessage]) {
        for m in batch.iter().filter(|m| m.timestamp >= 0) {
            let max = self.max.entry(m.partition).or_insert(None);
            *max = Some(max.map_or(m.timestamp, |t| t.max(m.timestamp)));
        }
    }

    fn current(&self) -> Option<i64> {
        let low = self.max.values().try_fold(None, |low: Option<i64>, max| {
            max.map(|m| Some(low.map_or(m, |l| l.min(m))))
        })??;
        Some(low - 1)
    }
}

/// How long a due checkpoint waits for every subtask's first batch (or
/// empty poll) of the interval before it goes without.
const READY_WAIT: Duration = Duration::from_millis(500);

/// A subtask that has polled nothing for this long (drained, or without
/// partitions) counts as ready for a due checkpoint without records in it.
const IDLE_READY: Duration = Duration::from_millis(50);

/// After a poll that came back empty this fast (no partition, a refused
/// connection), a subtask rests this long (serving commands) before the next.
const EMPTY_POLL_REST: Duration = Duration::from_millis(10);

/// What the driver and the subtasks' tasks share.
struct Shared {
    /// Records the subtasks sent to their sinks in this process (the
    /// checkpoint trigger; the exact counts ride the barrier replies).
    records: AtomicU64,
    /// Per subtask, since its last barrier: it sent records, or it has
    /// polled nothing for [`IDLE_READY`] (a single empty poll may be a fetch
    /// still on its way).
    ready: Vec<AtomicBool>,
    /// With `--checkpoint-every-records`: the count at which the next
    /// checkpoint is due. A ready subtask polls no more once `records`
    /// reached it, until the barrier: the cut lands within a batch per
    /// subtask of the trigger, whatever the driver is busy with (a
    /// checkpoint's commits, fsyncs), and a subtask whose fetch is late
    /// still gets its records into the interval. `u64::MAX`: never.
    pause_at: AtomicU64,
    /// Pulsed after every batch and when a subtask turns ready.
    notify: Notify,
}

impl Shared {
    fn new(subtasks: usize, trigger: Trigger) -> Self {
        Shared {
            records: AtomicU64::new(0),
            ready: (0..subtasks).map(|_| AtomicBool::new(false)).collect(),
            pause_at: AtomicU64::new(match trigger {
                Trigger::Records(n) => n,
                Trigger::Interval(_) => u64::MAX,
            }),
            notify: Notify::new(),
        }
    }

    fn all_ready(&self) -> bool {
        self.ready.iter().all(|r| r.load(Ordering::Acquire))
    }
}

/// What the driver tells a subtask's task; served between batches.
enum Command {
    /// Checkpoint `n`'s cut: the source's snapshot and the sink's barrier at
    /// the same point of the stream; replies their rows and the records
    /// sent since the previous barrier. The task then polls nothing until
    /// the commit.
    Barrier(u64, oneshot::Sender<(Vec<StateRow>, u64)>),
    /// Commit checkpoint `n`'s transaction; replies once it returned. The
    /// task polls again (unless stopped).
    Commit(u64, oneshot::Sender<()>),
    /// Poll no more; replies the records sent since the last barrier.
    Stop(oneshot::Sender<u64>),
    /// End the task, handing the subtask back.
    Close,
}

/// What a subtask's task did next.
enum Step {
    Command(Option<Command>),
    Produced(clink_kafka::connector::Result<usize>),
    Rested,
}

/// A subtask's task: it owns the subtask and loops {poll its source; send
/// the batch to its sink; count it}, so a slow or empty source sets no one
/// else's pace. A command is served between batches (`biased`: before the
/// next poll; a poll waiting for records is dropped for it, which
/// [`KafkaSource::produce_batch`] is safe for: its records stay pending). A
/// send to the sink is never cancelled. An error ends the task (and, through
/// the driver, the job) with the subtask named.
async fn subtask_task(
    mut s: Subtask,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shared: Arc<Shared>,
) -> anyhow::Result<Subtask> {
    let index = s.index;
    let ready = &shared.ready[index as usize];
    let mut since_barrier = 0u64;
    let mut committing = false;
    let mut stopped = false;
    let mut rest_until: Option<tokio::time::Instant> = None;
    // Since when every poll came back empty.
    let mut empty_since: Option<tokio::time::Instant> = None;
    let mut batches: Vec<Vec<KafkaMessage>> = Vec::new();
    loop {
        let started = tokio::time::Instant::now();
        let held = ready.load(Ordering::Acquire)
            && shared.records.load(Ordering::Acquire) >= shared.pause_at.load(Ordering::Acquire);
        let step = if committing || stopped || held {
            Step::Command(commands.recv().await)
        } else if let Some(until) = rest_until {
            tokio::select! {
                biased;
                command = commands.recv() => Step::Command(command),
                () = tokio::time::sleep_until(until) => Step::Rested,
            }
        } else {
            tokio::select! {
                biased;
                command = commands.recv() => Step::Command(command),
                produced = s.source.produce(&mut batches) => Step::Produced(produced),
            }
        };
        let command = match step {
            Step::Command(Some(command)) => command,
            Step::Command(None) => bail!("subtask {index}: the driver is gone"),
            Step::Rested => {
                rest_until = None;
                continue;
            }
            Step::Produced(produced) => {
                let produced = produced.with_context(|| format!("subtask {index}: reading the source"))?;
                if produced == 0 {
                    batches.clear();
                    let since = *empty_since.get_or_insert(started);
                    if since.elapsed() >= IDLE_READY && !ready.swap(true, Ordering::AcqRel) {
                        shared.notify.notify_one();
                    }
                    if started.elapsed() < EMPTY_POLL_REST {
                        rest_until = Some(started + EMPTY_POLL_REST);
                    }
                    continue;
                }
                empty_since = None;
                for batch in batches.drain(..) {
                    if batch.is_empty() {
                        continue;
                    }
                    let n = batch.len() as u64;
                    s.watermarks.observe(&batch);
                    s.sink
                        .send_batch(batch)
                        .await
                        .with_context(|| format!("subtask {index}: writing to the sink"))?;
                    if let Some(w) = s.watermarks.current() {
                        s.sink.on_watermark(w);
                    }
                    since_barrier += n;
                    shared.records.fetch_add(n, Ordering::AcqRel);
                    ready.store(true, Ordering::Release);
                    shared.notify.notify_one();
                    fault_point!(MidBatch, Some(index));
                }
                // A source with records always pending never waits: let the
                // other subtasks and the driver run.
                tokio::task::yield_now().await;
                continue;
            }
        };
        match command {
            Command::Barrier(id, reply) => {
                let mut rows = s.source.snapshot();
                rows.extend(
                    s.sink
                        .barrier(id)
                        .await
                        .with_context(|| format!("barrier of checkpoint {id} at subtask {index}"))?,
                );
                fault_point!(AfterBarrier, Some(index));
                ready.store(
                    empty_since.is_some_and(|t| t.elapsed() >= IDLE_READY),
                    Ordering::Release,
                );
                committing = true;
                // A driver that is gone is seen at the next command.
                let _ = reply.send((rows, std::mem::take(&mut since_barrier)));
            }
            Command::Commit(id, reply) => {
                s.sink
                    .commit(id)
                    .await
                    .with_context(|| format!("committing checkpoint {id} at subtask {index}"))?;
                fault_point!(AfterCommit, Some(index));
                committing = false;
                let _ = reply.send(());
            }
            Command::Stop(reply) => {
                stopped = true;
                let _ = reply.send(since_barrier);
            }
            Command::Close => return Ok(s),
        }
    }
}

/// The subtasks' tasks, as the driver sees them.
struct Tasks {
    commands: Vec<mpsc::UnboundedSender<Command>>,
    set: JoinSet<anyhow::Result<Subtask>>,
    /// Task id → subtask index (to name a panicked task's subtask).
    ids: std::collections::HashMap<tokio::task::Id, u32>,
}

type Joined = Option<Result<(tokio::task::Id, anyhow::Result<Subtask>), JoinError>>;

impl Tasks {
    fn spawn(subtasks: Vec<Subtask>, shared: &Arc<Shared>) -> Self {
        let mut tasks = Tasks {
            commands: Vec::new(),
            set: JoinSet::new(),
            ids: Default::default(),
        };
        for s in subtasks {
            let (tx, rx) = mpsc::unbounded_channel();
            let index = s.index;
            let handle = tasks.set.spawn(subtask_task(s, rx, shared.clone()));
            tasks.ids.insert(handle.id(), index);
            tasks.commands.push(tx);
        }
        tasks
    }

    /// The error of a task that ended on its own (an error, a panic).
    fn failure(&self, ended: Joined) -> anyhow::Error {
        match ended {
            Some(Ok((_, Err(e)))) => e,
            Some(Ok((id, Ok(_)))) => anyhow!("subtask {:?}'s task ended unasked", self.ids.get(&id)),
            Some(Err(e)) => {
                let subtask = self
                    .ids
                    .get(&e.id())
                    .map_or_else(|| "a subtask".to_owned(), |i| format!("subtask {i}"));
                if e.is_panic() {
                    let panic = e.into_panic();
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|m| m.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    anyhow!("{subtask}'s task panicked: {message}")
                } else {
                    anyhow!("{subtask}'s task was cancelled")
                }
            }
            None => anyhow!("no subtask task is left"),
        }
    }

    /// Sends subtask `index` a command with a reply channel.
    fn send<R>(&self, index: usize, command: impl FnOnce(oneshot::Sender<R>) -> Command) -> oneshot::Receiver<R> {
        let (tx, rx) = oneshot::channel();
        // A task that is gone drops the reply sender: seen by `reply`.
        let _ = self.commands[index].send(command(tx));
        rx
    }

    /// A reply, or the error that ended the task that owed it.
    async fn reply<R>(&mut self, rx: oneshot::Receiver<R>) -> anyhow::Result<R> {
        match rx.await {
            Ok(r) => Ok(r),
            Err(_) => {
                let ended = self.set.join_next_with_id().await;
                Err(self.failure(ended))
            }
        }
    }

    /// Stops every subtask's polling; the records they sent since their
    /// last barrier.
    async fn stop(&mut self) -> anyhow::Result<u64> {
        let replies: Vec<_> = (0..self.commands.len()).map(|i| self.send(i, Command::Stop)).collect();
        let mut left = 0;
        for rx in replies {
            left += self.reply(rx).await?;
        }
        Ok(left)
    }

    /// Ends every task; the subtasks in order.
    async fn close(mut self) -> anyhow::Result<Vec<Subtask>> {
        for tx in &self.commands {
            let _ = tx.send(Command::Close);
        }
        let mut subtasks = Vec::new();
        while let Some(joined) = self.set.join_next_with_id().await {
            match joined {
                Ok((_, Ok(s))) => subtasks.push(s),
                ended => return Err(self.failure(Some(ended))),
            }
        }
        subtasks.sort_by_key(|s| s.index);
        Ok(subtasks)
    }
}

/// One checkpoint through the coordinator; returns its id, once confirmed,
/// and the records it added (`total` before it).
///
/// Every subtask's task takes its cut (source snapshot, then sink barrier:
/// a flush and, exactly once, a pre-commit) between two of its batches, all
/// at once: one after the other, a checkpoint at parallelism 4 waited for 4
/// flushes in a row. A fault point after a subtask's barrier fires as that
/// subtask's barrier returns, whatever the others have done by then, as a
/// crash would find them (nothing is committed before the checkpoint is
/// completed, so the restore aborts them all alike). A subtask polls
/// nothing between its barrier and its commit.
async fn checkpoint(
    coordinator: &mut Coordinator,
    tasks: &mut Tasks,
    total: u64,
    on_cut: impl FnOnce(u64),
) -> anyhow::Result<(u64, u64)> {
    let id = coordinator.begin_checkpoint()?;
    let subtasks = tasks.commands.len();
    let replies: Vec<_> = (0..subtasks)
        .map(|i| tasks.send(i, |tx| Command::Barrier(id, tx)))
        .collect();
    let mut counted = 0;
    for (index, rx) in replies.into_iter().enumerate() {
        let (rows, records) = tasks.reply(rx).await?;
        counted += records;
        coordinator.collect(index as u32, rows)?;
    }
    on_cut(counted);
    coordinator.write_state(vec![records_row(total + counted)])?;
    fault_point!(AfterStateWritten, None);
    coordinator.mark_completed()?;
    fault_point!(AfterCompleted, None);
    // The commits stay one after the other: a crash between two commits
    // leaves the later subtasks' transactions open, and the restore's walk
    // settles each (tests/exactly_once.rs's fenced and mixed scenarios).
    // "Committed, then fenced" (no receipt, the coordinator forgot the
    // commit) is told from "fenced before its commit" by the transaction's
    // COMMIT marker in the output log (Resolver::resolve_proven,
    // tests/commit_proof.rs). An EndTxn is a few milliseconds on a healthy
    // cluster.
    for index in 0..subtasks {
        let rx = tasks.send(index, |tx| Command::Commit(id, tx));
        tasks.reply(rx).await?;
        coordinator.commit_returned(index as u32)?;
    }
    coordinator.confirm()?;
    fault_point!(AfterConfirmed, None);
    Ok((id, counted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_one_path_component() {
        assert_eq!(job_id("copy-tx_1.a"), "copy-tx_1.a");
        assert_eq!(job_id("a/b c"), "a%2Fb%20c");
        assert_eq!(job_id(".."), "%2E.");
    }

    #[test]
    fn the_watermark_is_the_lowest_partition_maximum_once_every_partition_spoke() {
        let msg = |partition: i32, timestamp: i64| {
            let mut m = KafkaMessage::new("v");
            m.partition = partition;
            m.timestamp = timestamp;
            m
        };
        let mut w = PartitionWatermarks::new([1, 5]);
        assert_eq!(w.current(), None);
        w.observe(&[msg(1, 10), msg(1, 30), msg(1, 20)]);
        assert_eq!(w.current(), None, "partition 5 has delivered nothing");
        w.observe(&[msg(5, -1)]);
        assert_eq!(w.current(), None, "no timestamp, no event time");
        w.observe(&[msg(5, 25)]);
        assert_eq!(w.current(), Some(24), "a later record may share 25");
        w.observe(&[msg(5, 40)]);
        assert_eq!(w.current(), Some(29));
        w.observe(&[msg(1, 3)]);
        assert_eq!(w.current(), Some(29), "a partition's maximum never goes back");
        assert_eq!(PartitionWatermarks::new([]).current(), None);
    }

    #[test]
    fn the_record_count_rides_in_the_state() {
        let cp = CheckpointState {
            id: 3,
            rows: vec![records_row(1234)],
        };
        assert_eq!(records_in(&cp).unwrap(), 1234);
        assert!(records_in(&CheckpointState { id: 3, rows: vec![] }).is_err());
    }
}
