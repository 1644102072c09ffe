//! `clink-kafka copy`: the exactly-once copy job. One process runs one
//! [`KafkaSource`](clink_kafka::connector::KafkaSource) (standalone: it owns every partition of `--from`) into one
//! `kafka_2pc_sink_string` sink ([`TwoPhaseCommitSink`](clink_kafka::connector::TwoPhaseCommitSink), writing `--to`),
//! under a checkpoint coordinator of its own whose durable state lives in
//! `--state-dir`. It is the spec's "Delivery semantics" protocol for a
//! `commit_recoverable = false` sink, with one process playing the
//! coordinator, the worker and the sink subtask.
//!
//! # Checkpoint `n` (the steps, in order)
//!
//! 1. batches flow from the source into the sink's open transaction
//!    (`on_data`); when `--checkpoint-every-records` records (or
//!    `--checkpoint-interval-ms`) have passed, or the source went idle, or
//!    `--expected` records are in:
//! 2. `source.snapshot()` (one row per partition: the next offset) and
//!    `sink.on_barrier(n)` (flush, seal the transaction PREPARED; its state
//!    row carries the resume handle, no secret);
//! 3. checkpoint `n`'s state — those rows plus the running record count —
//!    is written to `DIR/chk-<n>.state` (temporary file, fsync, rename,
//!    fsync of the directory);
//! 4. `DIR/COMPLETED-<n>` is written the same way: checkpoint `n` is
//!    durable (the coordinator's "globally durable");
//! 5. `sink.on_commit(n)`: EndTxn(commit), then the sink's own commit
//!    receipt `DIR/receipts/sub0-<n>` (fsync + rename);
//! 6. `DIR/CONFIRMED-<n>`: the commit is confirmed (the worker's
//!    confirmation to the coordinator, and the coordinator's marker, in
//!    one step since they are one process).
//!
//! # Restore (at start)
//!
//! The restore point is the newest `COMPLETED-n` (not marked abandoned):
//!
//! - with `CONFIRMED-n`: the source resumes from `n`'s offsets; the sink
//!   gets none of `n`'s rows (its commit is confirmed, nothing is owed) and
//!   opens fresh — `init_transactions` fences and aborts whatever the dead
//!   process had open or prepared after `n` (its records are replayed);
//! - without: `n` is completed but unconfirmed, so its prepared
//!   transaction is owed a commit. The sink is restored from `n`'s rows and
//!   opened; its in-doubt resolution finalises the transaction BEFORE
//!   fencing it (a receipt: committed, no wire call; otherwise EndTxn commit
//!   with the handle's identity, a fenced answer disambiguated by
//!   DescribeTransactions). Once `open` succeeded, `CONFIRMED-n` is written
//!   and the source resumes from `n`. An unreachable broker fails `open`
//!   (exit 1, nothing fenced; the next start retries). A final
//!   "not committed" verdict makes `n` an orphan: `ABANDONED-n` is written
//!   and the source resumes from the newest CONFIRMED checkpoint below `n`
//!   (or the beginning), replaying `n`'s interval into a new transaction —
//!   the spec's fallback to the newest confirmed checkpoint.
//!
//! Checkpoint ids only grow (the next one is above every marker in DIR), so
//! an orphan's id is never reused. A state file without its COMPLETED
//! marker is ignored (and overwritten when that id is taken again).
//! Differences from the spec's multi-process protocol: the coordinator
//! never has to hold a restart while the resolver answers (resolution
//! happens inside the only process, before anything else opens), and there
//! is no replay suppression to arm (receipts are never above a restore
//! point here: a receipt is only written after its COMPLETED marker, and
//! every restore starts at the newest completed checkpoint unless it was
//! found not committed). Once `CONFIRMED-n` is written, everything below
//! `n` is pruned: state files, markers and the sink's receipts `sub0-<m>`.
//!
//! # Fault points (`CLINK_KAFKA_FAULT=<point>[:<k>]`)
//!
//! At the k-th occurrence (default 1) in this process of `<point>`, the
//! process SIGKILLs itself (`kill -9` of its own pid; no destructor, no
//! flush, no EndTxn). Each step boundary above with its own recovery:
//!
//! | point | state left behind | recovery |
//! |---|---|---|
//! | `mid-batch` | after the k-th `on_data`: an open transaction with records | restore from the newest checkpoint; the init aborts the open transaction; replay |
//! | `after-barrier` | `n` prepared in Kafka, no state file | `n` never happened: restore from `n-1`; the init aborts the prepared transaction; replay |
//! | `after-state-written` | `chk-n.state`, no COMPLETED-n | same as `after-barrier` |
//! | `after-completed` | COMPLETED-n, commit never sent | restore `n` unconfirmed: the resolver commits it over the wire, CONFIRMED-n |
//! | `after-end-txn` | EndTxn acknowledged, no receipt (inside the sink) | restore `n` unconfirmed: EndTxn again reads fenced, DescribeTransactions proves the commit, receipt materialised, CONFIRMED-n |
//! | `after-commit` | receipt written, no CONFIRMED-n | restore `n` unconfirmed: the receipt proves the commit (no wire call), CONFIRMED-n |
//! | `after-confirmed` | CONFIRMED-n | restore from the confirmed `n` |
//! | `after-resolve` | at a restore of an unconfirmed `n`: the resolver's EndTxn committed `n`, no receipt yet (inside the sink) | restore `n` unconfirmed again: resolved over the wire again (a committed transaction answers committed, or fenced + DescribeTransactions), receipt |
//! | `after-recovery-open` | at a restore of an unconfirmed `n`: the sink resolved `n`, no CONFIRMED-n yet | restore `n` unconfirmed again: the receipt the resolution wrote proves it |
//!
//! For the checkpoint points, k counts checkpoints this process took.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use clap::Args;
use clink_kafka::client::ClientConfig;
use clink_kafka::connector::options::{SourceOptions, TwoPhaseCommitOptions};
use clink_kafka::connector::security::SecurityConfig;
use clink_kafka::connector::twopc::{set_step_hook, SinkStep};
use clink_kafka::connector::{selected, KafkaMessage, Source, StateRow};

use super::{thousands, ConnectArgs};

/// Options of `copy`.
#[derive(Args, Debug)]
#[command(
    after_help = "Fault injection (tests): CLINK_KAFKA_FAULT=<point>[:<k>] SIGKILLs the process at the \
k-th occurrence of <point>: mid-batch, after-barrier, after-state-written, after-completed, after-end-txn, \
after-commit, after-confirmed, after-resolve, after-recovery-open (see src/cli/copy.rs)."
)]
pub struct CopyArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub backend: super::backend::BackendArgs,
    /// Topic to read (every partition, from the earliest offset on a fresh start).
    #[arg(long)]
    pub from: String,
    /// Topic to write, in one broker transaction per checkpoint.
    #[arg(long)]
    pub to: String,
    /// Checkpoint state, COMPLETED/CONFIRMED markers and commit receipts.
    #[arg(long, value_name = "DIR")]
    pub state_dir: PathBuf,
    /// The sink's transactional.id (keep it across restarts of one job).
    #[arg(long)]
    pub transactional_id: String,
    /// Take a checkpoint once this many records arrived since the last one.
    #[arg(long, value_name = "N", conflicts_with = "checkpoint_interval_ms")]
    pub checkpoint_every_records: Option<u64>,
    /// Take a checkpoint this often (when records arrived). Default 1000
    /// unless --checkpoint-every-records is given.
    #[arg(long, value_name = "MS")]
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
}

/// The named fault points, in the order of the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultPoint {
    MidBatch,
    AfterBarrier,
    AfterStateWritten,
    AfterCompleted,
    AfterEndTxn,
    AfterCommit,
    AfterConfirmed,
    AfterResolve,
    AfterRecoveryOpen,
}

impl FaultPoint {
    const ALL: [FaultPoint; 9] = [
        FaultPoint::MidBatch,
        FaultPoint::AfterBarrier,
        FaultPoint::AfterStateWritten,
        FaultPoint::AfterCompleted,
        FaultPoint::AfterEndTxn,
        FaultPoint::AfterCommit,
        FaultPoint::AfterConfirmed,
        FaultPoint::AfterResolve,
        FaultPoint::AfterRecoveryOpen,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultPoint::MidBatch => "mid-batch",
            FaultPoint::AfterBarrier => "after-barrier",
            FaultPoint::AfterStateWritten => "after-state-written",
            FaultPoint::AfterCompleted => "after-completed",
            FaultPoint::AfterEndTxn => "after-end-txn",
            FaultPoint::AfterCommit => "after-commit",
            FaultPoint::AfterConfirmed => "after-confirmed",
            FaultPoint::AfterResolve => "after-resolve",
            FaultPoint::AfterRecoveryOpen => "after-recovery-open",
        }
    }
}

struct Fault {
    point: FaultPoint,
    at: u64,
    seen: AtomicU64,
}

static FAULT: OnceLock<Option<Fault>> = OnceLock::new();

const FAULT_VAR: &str = "CLINK_KAFKA_FAULT";

fn parse_fault(spec: &str) -> anyhow::Result<Fault> {
    let (name, at) = match spec.split_once(':') {
        Some((name, k)) => (
            name,
            k.parse::<u64>()
                .ok()
                .filter(|k| *k >= 1)
                .ok_or_else(|| anyhow!("{FAULT_VAR}={spec:?}: the occurrence after ':' must be an integer >= 1"))?,
        ),
        None => (spec, 1),
    };
    let point = FaultPoint::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
        let allowed: Vec<&str> = FaultPoint::ALL.iter().map(|p| p.name()).collect();
        anyhow!(
            "{FAULT_VAR}={spec:?}: unknown fault point {name:?}; allowed: {}",
            allowed.join(", ")
        )
    })?;
    Ok(Fault {
        point,
        at,
        seen: AtomicU64::new(0),
    })
}

fn arm_faults() -> anyhow::Result<()> {
    let fault = match std::env::var(FAULT_VAR) {
        Ok(spec) if !spec.is_empty() => Some(parse_fault(&spec)?),
        _ => None,
    };
    if let Some(f) = &fault {
        eprintln!("copy: fault armed: {}:{}", f.point.name(), f.at);
    }
    let _ = FAULT.set(fault);
    set_step_hook(|step| {
        if step == SinkStep::AfterEndTxn {
            fault_point(FaultPoint::AfterEndTxn);
        } else if step == SinkStep::AfterResolvedCommit {
            fault_point(FaultPoint::AfterResolve);
        }
    });
    Ok(())
}

/// Passes fault point `point`; SIGKILLs the process at the armed occurrence.
fn fault_point(point: FaultPoint) {
    let Some(Some(fault)) = FAULT.get() else {
        return;
    };
    if fault.point != point {
        return;
    }
    let seen = fault.seen.fetch_add(1, Ordering::SeqCst) + 1;
    if seen != fault.at {
        return;
    }
    eprintln!("copy: fault {}:{seen}: SIGKILL", point.name());
    let pid = std::process::id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .or_else(|_| {
            std::process::Command::new("sh")
                .args(["-c", &format!("kill -9 {pid}")])
                .status()
        });
    if !sent.is_ok_and(|s| s.success()) {
        // No way to SIGKILL ourselves: die loudly another way (a test sees
        // the wrong signal rather than a hang).
        eprintln!("copy: fault {}: could not send SIGKILL; aborting", point.name());
        std::process::abort();
    }
    // The signal is on its way; never run another step.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
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

const STATE_HEADER: &str = "clink-copy-checkpoint/1";

/// One checkpoint's durable state.
struct Checkpoint {
    id: u64,
    /// Records copied up to and including this checkpoint.
    records: u64,
    rows: Vec<StateRow>,
}

/// The coordinator's directory: `chk-<n>.state`, `COMPLETED-<n>`,
/// `CONFIRMED-<n>`, `ABANDONED-<n>`, `receipts/`. Each state file names the
/// job (topics, transactional id): another job's state is refused.
struct StateDir {
    dir: PathBuf,
    /// `from=…`, `to=…`, `transactional-id=…` lines.
    job: String,
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

impl StateDir {
    fn open(dir: &Path, from: &str, to: &str, transactional_id: &str) -> anyhow::Result<StateDir> {
        for (option, value) in [("--from", from), ("--to", to), ("--transactional-id", transactional_id)] {
            if value.is_empty() || value.contains(['\n', '\r']) {
                bail!("{option} must be non-empty and on one line (got {value:?})");
            }
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating --state-dir {}", dir.display()))?;
        Ok(StateDir {
            dir: dir.to_owned(),
            job: format!("from={from}\nto={to}\ntransactional-id={transactional_id}\n"),
        })
    }

    fn receipts(&self) -> PathBuf {
        self.dir.join("receipts")
    }

    /// Temporary file, fsync, rename, fsync of the directory.
    fn write_durably(&self, name: &str, contents: &str) -> anyhow::Result<()> {
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.tmp"));
        let mut f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(contents.as_bytes())
            .and_then(|()| f.sync_all())
            .with_context(|| format!("writing {}", tmp.display()))?;
        drop(f);
        std::fs::rename(&tmp, &path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
        std::fs::File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("syncing {}", self.dir.display()))?;
        Ok(())
    }

    fn write_checkpoint(&self, cp: &Checkpoint) -> anyhow::Result<()> {
        let mut text = format!(
            "{STATE_HEADER}\n{}checkpoint={}\nrecords={}\n",
            self.job, cp.id, cp.records
        );
        for row in &cp.rows {
            if row.key.contains(['\t', '\n']) {
                bail!("state row key {:?} has a tab or newline", row.key);
            }
            text.push_str(&format!("row={}\t{}\n", row.key, hex(&row.value)));
        }
        self.write_durably(&format!("chk-{}.state", cp.id), &text)
    }

    fn read_checkpoint(&self, id: u64) -> anyhow::Result<Checkpoint> {
        let path = self.dir.join(format!("chk-{id}.state"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let bad = |what: &str| anyhow!("{}: {what}", path.display());
        let Some(rest) = text.strip_prefix(STATE_HEADER).and_then(|r| r.strip_prefix('\n')) else {
            return Err(bad(&format!("not a {STATE_HEADER} file")));
        };
        let Some(rest) = rest.strip_prefix(self.job.as_str()) else {
            let theirs: Vec<&str> = rest.lines().take(3).collect();
            bail!(
                "--state-dir {} holds another job's checkpoint {id} ({}); this job is {}: give this job its own \
                 --state-dir",
                self.dir.display(),
                theirs.join(", "),
                self.job.trim_end().replace('\n', ", ")
            );
        };
        let lines = rest.lines();
        let mut checkpoint = None;
        let mut records = None;
        let mut rows = Vec::new();
        for line in lines {
            if let Some(v) = line.strip_prefix("checkpoint=") {
                checkpoint = Some(v.parse::<u64>().map_err(|_| bad("checkpoint= is not a number"))?);
            } else if let Some(v) = line.strip_prefix("records=") {
                records = Some(v.parse::<u64>().map_err(|_| bad("records= is not a number"))?);
            } else if let Some(v) = line.strip_prefix("row=") {
                let (key, value) = v.split_once('\t').ok_or_else(|| bad("a row without a tab"))?;
                let value = unhex(value).ok_or_else(|| bad("a row value is not hex"))?;
                rows.push(StateRow {
                    key: key.to_owned(),
                    value,
                });
            } else {
                return Err(bad(&format!("unexpected line {line:?}")));
            }
        }
        if checkpoint != Some(id) {
            return Err(bad(&format!("does not hold checkpoint {id}")));
        }
        Ok(Checkpoint {
            id,
            records: records.ok_or_else(|| bad("no records= line"))?,
            rows,
        })
    }

    fn write_marker(&self, kind: &str, id: u64) -> anyhow::Result<()> {
        self.write_durably(&format!("{kind}-{id}"), &format!("checkpoint={id}\n"))
    }

    /// Checkpoint ids with a `<kind>-<n>` marker.
    fn markers(&self, kind: &str) -> anyhow::Result<BTreeSet<u64>> {
        let mut ids = BTreeSet::new();
        let prefix = format!("{kind}-");
        for entry in std::fs::read_dir(&self.dir).with_context(|| format!("listing {}", self.dir.display()))? {
            let name = entry?.file_name();
            if let Some(id) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) {
                if let Ok(id) = id.parse::<u64>() {
                    ids.insert(id);
                }
            }
        }
        Ok(ids)
    }
}

impl StateDir {
    /// Removes what no restore can need once `CONFIRMED-<n>` is durable:
    /// every restore from now on starts at `n` or above (an abandoned
    /// checkpoint above falls back to the newest confirmed one, `n` at
    /// least). So the state files and markers below `n` go, and the sink's
    /// receipts `sub0-<m>` for `m < n` (the spec: receipts are pruned, never
    /// below the newest CONFIRMED marker). Failures are logged, not fatal.
    fn prune_below(&self, n: u64) {
        let below = |name: &str, prefix: &str, suffix: &str| {
            name.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(suffix))
                .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|id| id.parse::<u64>().ok())
                .is_some_and(|id| id < n)
        };
        let sweep = |dir: &Path, patterns: &[(&str, &str)]| {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if patterns.iter().any(|(prefix, suffix)| below(name, prefix, suffix)) {
                    if let Err(e) = std::fs::remove_file(entry.path()) {
                        eprintln!("copy: warning: pruning {}: {e}", entry.path().display());
                    }
                }
            }
        };
        sweep(
            &self.dir,
            &[
                ("chk-", ".state"),
                ("COMPLETED-", ""),
                ("CONFIRMED-", ""),
                ("ABANDONED-", ""),
            ],
        );
        sweep(&self.receipts(), &[("sub0-", "")]);
    }
}

/// When to take a checkpoint.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    Records(u64),
    Interval(Duration),
}

pub async fn run(args: CopyArgs) -> anyhow::Result<u8> {
    arm_faults()?;
    let trigger = match (args.checkpoint_every_records, args.checkpoint_interval_ms) {
        (Some(0), _) => bail!("--checkpoint-every-records must be at least 1"),
        (Some(n), _) => Trigger::Records(n),
        (None, ms) => Trigger::Interval(Duration::from_millis(ms.unwrap_or(1_000))),
    };
    let backend = args.backend.backend()?;
    let client = args.connect.client_config()?;
    let security = connector_security(&client);
    let state = StateDir::open(&args.state_dir, &args.from, &args.to, &args.transactional_id)?;

    let mut sink_options = TwoPhaseCommitOptions::new(&args.connect.brokers, &args.to, &args.transactional_id);
    sink_options.sink.security = security.clone();
    sink_options.sink.client.request_timeout = Some(client.request_timeout);
    sink_options.receipt_dir = Some(state.receipts());
    sink_options.resolve_unreachable_after = Duration::from_millis(args.resolve_unreachable_after_ms);
    sink_options.sink.backend = backend;
    let mut sink = selected::two_phase_commit_sink(sink_options).context("configuring the sink")?;

    let mut source_options = SourceOptions::new(&args.connect.brokers, &args.from);
    source_options.security = security;
    source_options.client.request_timeout = Some(client.request_timeout);
    source_options.group_id = format!("clink-copy-{}", args.transactional_id);
    source_options.backend = backend;
    let mut source = selected::kafka_source(source_options).context("configuring the source")?;

    // Restore.
    let completed = state.markers("COMPLETED")?;
    let confirmed = state.markers("CONFIRMED")?;
    let abandoned = state.markers("ABANDONED")?;
    let newest_confirmed = confirmed.iter().rev().find(|n| completed.contains(n)).copied();
    let candidate = completed.iter().rev().find(|n| !abandoned.contains(n)).copied();
    let restored: Option<Checkpoint> = match candidate {
        None => {
            sink.open_sink().await.context("opening the sink")?;
            None
        }
        Some(n) if confirmed.contains(&n) => {
            let cp = state.read_checkpoint(n)?;
            sink.open_sink().await.context("opening the sink")?;
            eprintln!("copy: restored from confirmed checkpoint {n}");
            Some(cp)
        }
        Some(n) => {
            let cp = state.read_checkpoint(n)?;
            sink.restore_rows(&cp.rows).context("restoring the sink")?;
            sink.open_sink().await.with_context(|| {
                format!("restoring completed but unconfirmed checkpoint {n}: resolving its prepared transaction")
            })?;
            fault_point(FaultPoint::AfterRecoveryOpen);
            if sink.orphans().iter().any(|o| o.checkpoint == n) {
                state.write_marker("ABANDONED", n)?;
                let fallback = newest_confirmed.filter(|m| *m < n);
                eprintln!(
                    "copy: checkpoint {n}'s transaction is not committed and cannot be: restoring from {} and \
                     replaying its interval",
                    fallback.map_or("the beginning".to_owned(), |m| format!("confirmed checkpoint {m}"))
                );
                match fallback {
                    Some(m) => Some(state.read_checkpoint(m)?),
                    None => None,
                }
            } else {
                state.write_marker("CONFIRMED", n)?;
                state.prune_below(n);
                let stats = sink.stats();
                eprintln!(
                    "copy: restored from checkpoint {n}: its commit is confirmed now (resolved by receipt: {}, \
                     over the wire: {})",
                    stats.resolved_by_receipt, stats.resolved_over_the_wire
                );
                Some(cp)
            }
        }
    };
    let mut next_id = completed
        .iter()
        .chain(&confirmed)
        .chain(&abandoned)
        .max()
        .map_or(1, |m| m + 1);
    let mut total = restored.as_ref().map_or(0, |cp| cp.records);
    if let Some(cp) = &restored {
        source.restore(&cp.rows).context("restoring the source")?;
    }
    source.open().await.context("opening the source")?;
    eprintln!(
        "copy: {} -> {}: starting at checkpoint {next_id}, {} records copied so far",
        args.from,
        args.to,
        thousands(total)
    );

    let until_idle = Duration::from_millis(args.until_idle_ms);
    let mut last_record = Instant::now();
    let mut last_checkpoint = Instant::now();
    let mut since_checkpoint = 0u64;
    let mut checkpoints = 0u64;
    loop {
        let mut batches: Vec<Vec<KafkaMessage>> = Vec::new();
        let emitted = source.produce(&mut batches).await.context("reading the source")?;
        for batch in batches {
            if batch.is_empty() {
                continue;
            }
            sink.send_batch(batch).await.context("writing to the sink")?;
            fault_point(FaultPoint::MidBatch);
        }
        if emitted > 0 {
            last_record = Instant::now();
            since_checkpoint += emitted as u64;
        }
        let idle = last_record.elapsed() >= until_idle;
        let reached = args.expected.is_some_and(|e| total + since_checkpoint >= e);
        let due = match trigger {
            Trigger::Records(n) => since_checkpoint >= n,
            Trigger::Interval(d) => last_checkpoint.elapsed() >= d,
        };
        if since_checkpoint > 0 && (due || idle || reached) {
            let id = next_id;
            let mut rows = source.snapshot();
            let sink_rows = sink
                .barrier(id)
                .await
                .with_context(|| format!("barrier of checkpoint {id}"))?;
            fault_point(FaultPoint::AfterBarrier);
            rows.extend(sink_rows);
            let cp = Checkpoint {
                id,
                records: total + since_checkpoint,
                rows,
            };
            state.write_checkpoint(&cp)?;
            fault_point(FaultPoint::AfterStateWritten);
            state.write_marker("COMPLETED", id)?;
            fault_point(FaultPoint::AfterCompleted);
            sink.commit(id)
                .await
                .with_context(|| format!("committing checkpoint {id}"))?;
            fault_point(FaultPoint::AfterCommit);
            state.write_marker("CONFIRMED", id)?;
            fault_point(FaultPoint::AfterConfirmed);
            state.prune_below(id);
            total = cp.records;
            since_checkpoint = 0;
            next_id += 1;
            checkpoints += 1;
            last_checkpoint = Instant::now();
            eprintln!("copy: checkpoint {id} confirmed: {} records copied", thousands(total));
            continue;
        }
        if since_checkpoint == 0 {
            if let Some(e) = args.expected {
                if total > e {
                    bail!("copied {total} records, more than --expected {e}");
                }
            }
            if reached || idle {
                break;
            }
        }
    }
    source.close().await.context("closing the source")?;
    sink.close_sink().await.context("closing the sink")?;
    let last = next_id - 1;
    println!(
        "copy-done records={total} checkpoints={checkpoints} last-checkpoint={last} restored-from={}",
        restored.as_ref().map_or("none".to_owned(), |cp| cp.id.to_string())
    );
    eprintln!(
        "copy: done: {} records copied, {checkpoints} checkpoints in this run",
        thousands(total)
    );
    match args.expected {
        Some(e) if total < e => {
            eprintln!(
                "copy: idle for {} ms with {total} of --expected {e} records",
                args.until_idle_ms
            );
            Ok(3)
        }
        _ => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("clink-copy-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn fault_specs_parse_and_bad_ones_name_the_allowed_points() {
        let f = parse_fault("after-completed:2").unwrap();
        assert_eq!((f.point, f.at), (FaultPoint::AfterCompleted, 2));
        let f = parse_fault("mid-batch").unwrap();
        assert_eq!((f.point, f.at), (FaultPoint::MidBatch, 1));
        let e = parse_fault("after-lunch").err().unwrap().to_string();
        assert!(
            e.contains("CLINK_KAFKA_FAULT") && e.contains("after-end-txn") && e.contains("after-recovery-open"),
            "{e}"
        );
        for bad in ["after-commit:0", "after-commit:x", "after-commit:-1", "after-commit:"] {
            let e = parse_fault(bad).err().unwrap().to_string();
            assert!(e.contains(">= 1"), "{bad}: {e}");
        }
        for p in FaultPoint::ALL {
            assert_eq!(parse_fault(p.name()).unwrap().point, p);
        }
    }

    #[test]
    fn checkpoint_state_round_trips_and_another_jobs_state_is_refused() {
        let dir = temp_dir("roundtrip");
        let state = StateDir::open(&dir, "in", "out", "tx").unwrap();
        let cp = Checkpoint {
            id: 7,
            records: 1234,
            rows: vec![
                StateRow {
                    key: "kafka-source/in/0".into(),
                    value: b"42".to_vec(),
                },
                StateRow {
                    key: "kafka_2pc/tx/7".into(),
                    value: vec![0, 0xff, b';', b'\n'],
                },
            ],
        };
        state.write_checkpoint(&cp).unwrap();
        state.write_marker("COMPLETED", 7).unwrap();
        let back = state.read_checkpoint(7).unwrap();
        assert_eq!((back.id, back.records, back.rows), (7, 1234, cp.rows.clone()));
        assert_eq!(
            state.markers("COMPLETED").unwrap().into_iter().collect::<Vec<_>>(),
            vec![7]
        );
        assert!(state.markers("CONFIRMED").unwrap().is_empty());
        assert!(state.read_checkpoint(8).is_err(), "no such checkpoint");

        let other = StateDir::open(&dir, "in", "elsewhere", "tx").unwrap();
        let e = format!("{:#}", other.read_checkpoint(7).err().unwrap());
        assert!(
            e.contains("another job") && e.contains("to=out") && e.contains("to=elsewhere"),
            "{e}"
        );

        std::fs::write(dir.join("chk-9.state"), "garbage").unwrap();
        let e = format!("{:#}", state.read_checkpoint(9).err().unwrap());
        assert!(e.contains("chk-9.state"), "{e}");
        std::fs::write(
            dir.join("chk-10.state"),
            format!("{STATE_HEADER}\n{}checkpoint=10\nrecords=1\nrow=k\tzz\n", state.job),
        )
        .unwrap();
        let e = format!("{:#}", state.read_checkpoint(10).err().unwrap());
        assert!(e.contains("not hex"), "{e}");
        assert!(StateDir::open(&dir, "in", "out", "two\nlines").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn pruning_removes_only_what_is_below_the_confirmed_checkpoint() {
        let dir = temp_dir("prune");
        let state = StateDir::open(&dir, "in", "out", "tx").unwrap();
        std::fs::create_dir_all(state.receipts()).unwrap();
        let files = [
            "chk-3.state",
            "COMPLETED-3",
            "CONFIRMED-3",
            "ABANDONED-4",
            "chk-12.state",
            "COMPLETED-12",
            "CONFIRMED-12",
            ".chk-3.state.tmp",
            "chk-x.state",
            "receipts/sub0-3",
            "receipts/sub0-3.unresolved",
            "receipts/sub0-12",
            "receipts/sub1-3",
        ];
        for f in files {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        state.prune_below(12);
        let left: Vec<&str> = files.into_iter().filter(|f| dir.join(f).exists()).collect();
        assert_eq!(
            left,
            [
                "chk-12.state",
                "COMPLETED-12",
                "CONFIRMED-12",
                ".chk-3.state.tmp",
                "chk-x.state",
                "receipts/sub0-3.unresolved",
                "receipts/sub0-12",
                "receipts/sub1-3",
            ]
        );
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
