//! `clink-kafka copy --group G`: one copy job spread over many processes
//! by the consumer group protocol, exactly once through transactional
//! offset commits ([KIP-447]).
//!
//! Start the same command in N processes (one machine or several), each
//! with its own `--transactional-id` (a restarted process keeps its id).
//! Every process is a member of group G subscribed to `--from`; the group
//! coordinator balances the input partitions among them. No state
//! directory: the group's committed offsets are the job's state, and they
//! move with the records.
//!
//! # The loop (exactly-once)
//!
//! 1. `poll_events`: rebalance events first, then records of the partitions
//!    this member holds (read_committed, auto-commit off).
//! 2. The records go to `--to` inside the open transaction, each to the
//!    partition of the same number (modulo `--to`'s partition count), so
//!    the order within an input partition is kept.
//! 3. Every `--commit-every-records` records or `--commit-every-ms`
//!    (default 1000 ms), and before the next poll after a `Revoked` event:
//!    `send_offsets_with_metadata(next offsets, group_metadata)`, then
//!    commit. The input offsets commit if and only if the output does.
//! 4. On `Lost` (the member fell out of its generation: no commit can
//!    succeed) the open transaction is aborted.
//!
//! # Fencing, and why nothing is published twice or skipped
//!
//! - A member that falls behind a rebalance (paused, partitioned, slow) is
//!   a zombie: its TxnOffsetCommit carries its old generation and the
//!   group coordinator refuses it (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
//!   FENCED_INSTANCE_ID), so its transaction is aborted: neither its
//!   records nor its offsets become visible. The partitions' new owner
//!   reads from the last committed offsets (the consumer's OffsetFetch
//!   waits for a pending transactional commit, `require_stable`).
//! - A process restarted with the same `--transactional-id` fences its
//!   predecessor (InitProducerId): whatever that one left open is aborted.
//!   A process that never comes back leaves its open transaction to the
//!   coordinator's `--transaction-timeout-ms`.
//! - After an abort the member seeks the partitions it still holds back
//!   to the first offset of the aborted transaction: they are copied again.
//!
//! `--guarantee at-least-once`: an idempotent producer, no transaction;
//! the offsets are committed (OffsetCommit with the generation) only after
//! every record before them is acknowledged. A crash or fence between the
//! two replays records: duplicates, never a gap.
//!
//! Progress goes to stderr (rebalances, commits every few seconds); the
//! last line on stdout is `copy-done records=… transactions=… aborted=…
//! fenced=… rebalances=…`.
//!
//! [KIP-447]: https://cwiki.apache.org/confluence/display/KAFKA/KIP-447%3A+Producer+scalability+for+exactly+once+semantics

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clink_kafka::client::{
    ConsumerConfig, ConsumerRecord, DeliveryFuture, GroupConsumer, GroupConsumerConfig, GroupPoll, IsolationLevel,
    Offset, Producer, ProducerConfig, ProducerRecord, RebalanceEvent, Subscription, TopicPartition,
    TopicPartitionOffset, TransactionalProducer, TxnConfig,
};
use clink_kafka::Error;

use super::copy::CopyArgs;
use super::thousands;

/// How long one `poll_events` waits for records.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// How often a progress line is written.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The default commit interval.
const DEFAULT_COMMIT_MS: u64 = 1_000;

/// What the open transaction (or, at least once, the unacknowledged
/// batch) holds, per input partition: the first offset in it and the next
/// offset after the last.
#[derive(Debug, Default)]
struct Pending {
    first: BTreeMap<(String, i32), i64>,
    next: BTreeMap<(String, i32), i64>,
    records: u64,
    since: Option<Instant>,
    /// At least once: the records' acknowledgements, awaited before the
    /// offsets are committed.
    deliveries: Vec<DeliveryFuture>,
}

impl Pending {
    fn add(&mut self, r: &ConsumerRecord) {
        let key = (r.topic.to_string(), r.partition);
        self.first.entry(key.clone()).or_insert(r.record.offset);
        self.next.insert(key, r.record.offset + 1);
        self.records += 1;
        self.since.get_or_insert_with(Instant::now);
    }

    fn is_empty(&self) -> bool {
        self.records == 0
    }

    fn offsets(&self) -> Vec<TopicPartitionOffset> {
        self.next
            .iter()
            .map(|((t, p), o)| TopicPartitionOffset::new(t.as_str(), *p, *o))
            .collect()
    }

    fn clear(&mut self) {
        *self = Pending::default();
    }
}

/// Counters for the progress lines and `copy-done`.
#[derive(Debug, Default)]
struct Counts {
    copied: u64,
    transactions: u64,
    aborted: u64,
    fenced: u64,
    rebalances: u64,
}

/// How records are written and their offsets committed.
enum Writer {
    ExactlyOnce(TransactionalProducer),
    AtLeastOnce(Producer),
}

/// One `copy --group` process.
struct GroupCopy {
    consumer: GroupConsumer,
    writer: Writer,
    to: String,
    to_partitions: i32,
    pending: Pending,
    counts: Counts,
    group: String,
}

pub async fn run(args: CopyArgs) -> anyhow::Result<u8> {
    let group = args.group.clone().context("--group")?;
    if group.trim().is_empty() {
        bail!("--group must name a consumer group");
    }
    if args.parallelism != 1 {
        bail!("--group runs one member per process: start more processes instead of --parallelism");
    }
    if args.state_dir.is_some() {
        bail!("--group keeps no state directory (the group's committed offsets are the state): drop --state-dir");
    }
    if args.expected.is_some() {
        bail!("--expected does not apply to --group (each process copies a share of the input)");
    }
    if args.backend.backend()? != clink_kafka::connector::options::Backend::Native {
        bail!("--group runs on the native backend only");
    }
    let commit_every_records = match args.checkpoint_every_records {
        Some(0) => bail!("--commit-every-records must be at least 1"),
        n => n,
    };
    let commit_every = Duration::from_millis(match (args.checkpoint_interval_ms, commit_every_records) {
        (Some(0), _) => bail!("--commit-every-ms must be at least 1"),
        (Some(ms), _) => ms,
        (None, Some(_)) => u64::MAX / 4,
        (None, None) => DEFAULT_COMMIT_MS,
    });
    let exactly_once = match args.guarantee.as_str() {
        "exactly-once" => true,
        "at-least-once" => false,
        other => bail!("--guarantee must be exactly-once or at-least-once (got {other:?})"),
    };
    let _metrics = args.metrics.start().await?;
    let client = args.connect.client_config()?;
    let cluster = clink_kafka::client::Cluster::connect(client)
        .await
        .context("connecting to the brokers")?;
    let to_partitions = cluster
        .partition_count(&args.to)
        .await
        .with_context(|| format!("--to {}", args.to))? as i32;

    let mut consumer_config = ConsumerConfig::default()
        .with_isolation(IsolationLevel::ReadCommitted)
        .with_auto_offset_reset(Some(Offset::Earliest));
    if let Some(n) = args.max_batch_records {
        if n == 0 {
            bail!("--max-batch-records must be at least 1");
        }
        consumer_config = consumer_config.with_max_poll_records(n);
    }
    if let Some(rack) = &args.client_rack {
        consumer_config.client_rack = Some(rack.clone());
    }
    let mut config = GroupConsumerConfig::new(group.clone());
    config.enable_auto_commit = false;
    config.consumer = consumer_config;
    if let Some(ms) = args.session_timeout_ms {
        config.session_timeout = Duration::from_millis(ms);
        config.heartbeat_interval = config.heartbeat_interval.min(Duration::from_millis((ms / 3).max(1)));
    }
    config.validate().context("the group consumer's settings")?;

    let transaction_timeout = Duration::from_millis(args.transaction_timeout_ms.unwrap_or(60_000));
    if transaction_timeout.is_zero() || transaction_timeout.as_millis() > i32::MAX as u128 {
        bail!("--transaction-timeout-ms must be between 1 and {}", i32::MAX);
    }
    // Fence the predecessor of this id first: its open transaction is
    // aborted before this process reads any committed offset.
    let writer = if exactly_once {
        let txn = TxnConfig::new(args.transactional_id.clone()).with_transaction_timeout(transaction_timeout);
        Writer::ExactlyOnce(
            TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), txn)
                .await
                .context("starting the transactional producer")?,
        )
    } else {
        Writer::AtLeastOnce(
            Producer::new(cluster.clone(), ProducerConfig::default().with_idempotent(true))
                .await
                .context("starting the producer")?,
        )
    };
    let mut consumer = GroupConsumer::new(cluster.clone(), config)
        .await
        .context("joining the group")?;
    consumer
        .subscribe(Subscription::Topics(vec![args.from.clone()]))
        .context("subscribing to --from")?;
    eprintln!(
        "copy: {} -> {} in group {group:?} as transactional id {:?} ({}), {} output partitions",
        args.from, args.to, args.transactional_id, args.guarantee, to_partitions
    );
    let mut job = GroupCopy {
        consumer,
        writer,
        to: args.to.clone(),
        to_partitions,
        pending: Pending::default(),
        counts: Counts::default(),
        group,
    };
    let until_idle = Duration::from_millis(args.until_idle_ms);
    let mut last_activity = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        let GroupPoll { records, events } = job.consumer.poll_events(POLL_TIMEOUT).await.context("polling")?;
        for event in events {
            last_activity = Instant::now();
            job.on_event(event).await?;
        }
        if !records.is_empty() {
            last_activity = Instant::now();
            job.write(records).await?;
        }
        let due = !job.pending.is_empty()
            && (commit_every_records.is_some_and(|n| job.pending.records >= n)
                || job.pending.since.is_some_and(|t| t.elapsed() >= commit_every));
        if due {
            job.commit("interval").await?;
        }
        if last_progress.elapsed() >= PROGRESS_EVERY {
            last_progress = Instant::now();
            job.progress();
        }
        // A member holding nothing is waiting for a rebalance (a dead
        // member's session to expire, a join to finish), not idle: it
        // waits three times as long before it takes the input as drained.
        let idle_after = if job.consumer.assignment().is_empty() {
            until_idle.saturating_mul(3)
        } else {
            until_idle
        };
        if last_activity.elapsed() >= idle_after {
            break;
        }
    }
    if !job.pending.is_empty() {
        job.commit("idle").await?;
    }
    let GroupCopy {
        consumer,
        writer,
        counts,
        group,
        ..
    } = job;
    consumer.close().await.context("leaving the group")?;
    match writer {
        Writer::ExactlyOnce(p) => p.close().await.context("closing the producer")?,
        Writer::AtLeastOnce(p) => p.close(Duration::from_secs(30)).await.context("closing the producer")?,
    }
    println!(
        "copy-done records={} transactions={} aborted={} fenced={} rebalances={}",
        counts.copied, counts.transactions, counts.aborted, counts.fenced, counts.rebalances
    );
    eprintln!(
        "copy: idle (--until-idle-ms {}): left group {group:?}; {} records copied by this process",
        args.until_idle_ms,
        thousands(counts.copied)
    );
    Ok(super::exit::OK)
}

impl GroupCopy {
    fn progress(&self) {
        eprintln!(
            "copy: {} records copied, {} transactions ({} aborted, {} fenced), generation {}, partitions {}",
            thousands(self.counts.copied),
            self.counts.transactions,
            self.counts.aborted,
            self.counts.fenced,
            self.consumer.generation(),
            describe(&self.consumer.assignment()),
        );
    }

    /// A rebalance event, before the next poll: a revocation commits what
    /// is open (the generation is still current until the member rejoins,
    /// which the next poll does); a loss aborts it.
    async fn on_event(&mut self, event: RebalanceEvent) -> anyhow::Result<()> {
        match event {
            RebalanceEvent::Assigned(tps) => {
                self.counts.rebalances += 1;
                eprintln!(
                    "copy: assigned {} (generation {}; now holding {})",
                    describe(&tps),
                    self.consumer.generation(),
                    describe(&self.consumer.assignment())
                );
            }
            RebalanceEvent::Revoked(tps) => {
                eprintln!("copy: revoked {}: committing first", describe(&tps));
                if !self.pending.is_empty() {
                    self.commit("revoke").await?;
                }
            }
            RebalanceEvent::Lost(tps) => {
                eprintln!("copy: lost {}: aborting the open transaction", describe(&tps));
                if !self.pending.is_empty() {
                    self.abort("partitions lost").await?;
                }
            }
        }
        Ok(())
    }

    /// Sends `records` (inside the open transaction, exactly once).
    async fn write(&mut self, records: Vec<ConsumerRecord>) -> anyhow::Result<()> {
        if let Writer::ExactlyOnce(p) = &mut self.writer {
            if p.resume().is_none() {
                // The guard is dropped at once: the transaction stays open in
                // the producer, and `resume` hands it back below.
                drop(p.begin().await.context("beginning a transaction")?);
            }
        }
        for r in records {
            self.pending.add(&r);
            let partition = r.partition % self.to_partitions;
            let mut out = ProducerRecord {
                topic: self.to.as_str().into(),
                partition: Some(partition),
                key: r.record.key.clone(),
                value: r.record.value.clone(),
                headers: Vec::with_capacity(r.record.headers.len()),
                timestamp: Some(r.record.timestamp),
            };
            for h in &r.record.headers {
                out.headers
                    .push((String::from_utf8_lossy(&h.key).into_owned(), h.value.clone()));
            }
            let sent = match &mut self.writer {
                Writer::ExactlyOnce(p) => {
                    let t = p.resume().expect("a transaction is open");
                    t.send(out).await.map(drop)
                }
                Writer::AtLeastOnce(p) => p.send(out).await.map(|d| self.pending.deliveries.push(d)),
            };
            if let Err(e) = sent {
                return self.failed(e).await;
            }
        }
        Ok(())
    }

    /// Commits what is pending: the transaction with its offsets, or (at
    /// least once) the offsets once every record is acknowledged.
    async fn commit(&mut self, why: &str) -> anyhow::Result<()> {
        let offsets = self.pending.offsets();
        let records = self.pending.records;
        let result = match &mut self.writer {
            Writer::ExactlyOnce(p) => {
                let Some(meta) = self.consumer.group_metadata() else {
                    // Not in a generation: nothing can commit.
                    return self.abort("no group generation").await;
                };
                let mut t = p.resume().expect("a transaction is open");
                match t.send_offsets_with_metadata(&offsets, &meta).await {
                    Ok(()) => t.commit().await,
                    Err(e) => Err(e),
                }
            }
            Writer::AtLeastOnce(p) => match acknowledged(p, &mut self.pending.deliveries).await {
                Ok(()) => self.consumer.commit_offsets_sync(&offsets).await,
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(()) => {
                self.counts.copied += records;
                self.counts.transactions += 1;
                tracing::debug!(why, records, "committed");
                self.pending.clear();
                Ok(())
            }
            Err(e) => self.failed(e).await,
        }
    }

    /// A failed send or commit: a fence of the group metadata or an
    /// abortable failure aborts and rewinds; anything else ends the job.
    async fn failed(&mut self, e: Error) -> anyhow::Result<()> {
        let fenced = matches!(e, Error::GroupMetadataFenced { .. });
        let abortable = fenced
            || matches!(e, Error::TransactionAbortRequired { .. })
            || (matches!(self.writer, Writer::AtLeastOnce(_)) && commit_refused(&e));
        if !abortable {
            return Err(anyhow::Error::new(e).context("copying (a fatal error)"));
        }
        if fenced {
            self.counts.fenced += 1;
        }
        eprintln!("copy: {e}");
        self.abort(if fenced { "fenced by the group" } else { "write failed" })
            .await
    }

    /// Aborts the open transaction (at least once: forgets the batch) and
    /// seeks every partition still held back to the first offset it had in
    /// the transaction, so its records are copied again.
    async fn abort(&mut self, why: &str) -> anyhow::Result<()> {
        if let Writer::ExactlyOnce(p) = &mut self.writer {
            if let Some(t) = p.resume() {
                t.abort().await.context("aborting the transaction")?;
            }
        }
        self.counts.aborted += 1;
        let held = self.consumer.assignment();
        let mut rewound = 0;
        for ((topic, partition), first) in std::mem::take(&mut self.pending.first) {
            if held.contains(&TopicPartition::new(topic.as_str(), partition)) {
                self.consumer
                    .seek(&topic, partition, Offset::At(first))
                    .await
                    .with_context(|| format!("seeking {topic}[{partition}] back to {first}"))?;
                rewound += 1;
            }
        }
        eprintln!(
            "copy: aborted {} records ({why}); {rewound} partition(s) still held read again",
            self.pending.records
        );
        self.pending.clear();
        Ok(())
    }
}

/// Flushes, then waits for every record's acknowledgement: the first
/// failure is the error.
async fn acknowledged(p: &Producer, deliveries: &mut Vec<DeliveryFuture>) -> Result<(), Error> {
    p.flush(Duration::from_secs(120)).await?;
    for d in deliveries.drain(..) {
        d.await?;
    }
    Ok(())
}

/// An OffsetCommit the group refused (at least once): the records are
/// written; the next owner copies them again.
fn commit_refused(e: &Error) -> bool {
    matches!(e.kafka_code().map(|c| c.0), Some(22 | 25 | 27 | 82 | 113))
}

fn describe(tps: &[TopicPartition]) -> String {
    if tps.is_empty() {
        return "nothing".to_owned();
    }
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in tps {
        by_topic.entry(tp.topic.as_str()).or_default().push(tp.partition);
    }
    by_topic
        .into_iter()
        .map(|(t, mut ps)| {
            ps.sort_unstable();
            format!("{t}[{}]", ps.iter().map(i32::to_string).collect::<Vec<_>>().join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_described_per_topic_in_order() {
        let tps = vec![
            TopicPartition::new("b", 2),
            TopicPartition::new("a", 1),
            TopicPartition::new("b", 0),
        ];
        assert_eq!(describe(&tps), "a[1] b[0,2]");
        assert_eq!(describe(&[]), "nothing");
    }

    #[test]
    fn a_group_refusal_is_recognised() {
        let e = Error::Config {
            option: "x",
            message: String::new(),
        };
        assert!(!commit_refused(&e));
    }
}
