//! Replay suppression after a long outage (issue 21): a mixed verdict
//! (subtask 0 committed checkpoint 2, receipted; the other subtasks'
//! prepared transactions lost) falls back to checkpoint 1, and the replay
//! must publish exactly what the broker does not have: 0 duplicates AND 0
//! missing, with suppression swallowing > 0 records.
//!
//! The input repeats timestamps (128 records per millisecond value), which
//! is what broke suppression by event time: at parallelism 2 (a subtask
//! owning 3 partitions) the receipts had no usable horizon (2,500
//! duplicates measured on the old code), at parallelism 6 records read
//! after the barrier that shared the horizon's millisecond were swallowed
//! though never committed (165 to 384 records LOST). Suppression by input
//! position is exact for both.
//!
//! The other subtasks' transactions end in the two ways a long outage ends
//! them: an outside fence (another producer inits their transactional ids)
//! or the broker's transaction timeout (copy runs with
//! `--transaction-timeout-ms 10000`; the test waits until
//! DescribeTransactions shows the abort). Then through the `Sink` trait: two
//! registry-built `kafka_2pc_sink_string` sinks under the library's
//! checkpoint `Coordinator`, event times on the engine channel
//! (`Sink::on_timed_data`) and watermarks, a simulated crash after subtask
//! 0's commit, a fence, a restore through the coordinator and a replay.
//! The oracle is Kafka's Java console consumer under read_committed.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Admin, Cluster, NewTopic, Producer, ProducerConfig, ProducerRecord, TransactionState, TransactionalProducer,
    TxnConfig,
};
use clink_kafka::connector::checkpoint::{CheckpointStore, Coordinator, RestoreDecision, RestorePlan};
use clink_kafka::connector::{install, BuildContext, Operator, Registry, Sink, Text};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const RECORDS: u64 = 60_000;
const PARTITIONS: i32 = 6;
/// Records sharing one timestamp value (a producer writes thousands per ms;
/// not a divisor of a checkpoint interval's records per partition, so a
/// barrier falls inside a millisecond).
const PER_MS: u64 = 128;
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_RESTARTS: u32 = 3;

#[derive(Clone, Copy, Debug)]
enum Ending {
    /// Another producer inits every other subtask's transactional id.
    Fence,
    /// The job stays down past the transaction timeout: the broker aborts.
    Timeout,
}

/// `k<n>` → `v-<n>` over `PARTITIONS` partitions (n % PARTITIONS), the
/// timestamp repeating `PER_MS` times per value. Returns the values.
async fn fill_input(cluster: &Cluster, topic: &str) -> Vec<String> {
    common::create_topic(cluster, NewTopic::new(topic, PARTITIONS, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = now_ms - (RECORDS / PER_MS) as i64 - 1_000;
    let mut futures = Vec::new();
    let mut values = Vec::new();
    for n in 0..RECORDS {
        let value = format!("v-{n}");
        values.push(value.clone());
        futures.push(
            producer
                .send(
                    ProducerRecord::new(topic, value)
                        .with_key(format!("k{n}"))
                        .with_partition((n % PARTITIONS as u64) as i32)
                        .with_timestamp(base + (n / PER_MS) as i64),
                )
                .await
                .unwrap(),
        );
    }
    producer.flush(Duration::from_secs(60)).await.unwrap();
    for f in futures {
        f.await.unwrap();
    }
    values.sort();
    values
}

/// Takes `txn_id` over: the broker aborts the dead producer's transaction.
async fn fence(cluster: &Cluster, txn_id: &str) {
    let producer = TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(txn_id))
        .await
        .expect("fencing the transactional id");
    producer.close().await.expect("closing the fencing producer");
}

/// Waits (bounded) until the broker has aborted every transaction of
/// `ids` on its own (CompleteAbort, or nothing open); returns how long.
async fn await_timeout_abort(cluster: &Cluster, ids: &[String]) -> Duration {
    let started = Instant::now();
    let admin = Admin::new(cluster.clone());
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    loop {
        let described = admin.describe_transactions(&ids).await.expect("describe transactions");
        let open: Vec<String> = described
            .iter()
            .filter_map(|(id, d)| match d {
                Ok(d) if matches!(d.state, TransactionState::CompleteAbort | TransactionState::Empty) => None,
                Ok(d) => Some(format!("{id}: {:?}", d.state)),
                Err(e) => Some(format!("{id}: {e}")),
            })
            .collect();
        if open.is_empty() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the broker did not time out the transactions within 90 s: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every value of `expected` exactly once in `got`: `(missing, duplicated, foreign)`.
fn difference(expected: &[String], got: &[String]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut counts: BTreeMap<&str, i64> = expected.iter().map(|v| (v.as_str(), 1)).collect();
    let mut foreign = Vec::new();
    for v in got {
        match counts.get_mut(v.as_str()) {
            Some(c) => *c -= 1,
            None => foreign.push(v.clone()),
        }
    }
    let missing = counts
        .iter()
        .filter(|(_, c)| **c > 0)
        .map(|(v, _)| v.to_string())
        .collect();
    let duplicated = counts
        .iter()
        .filter(|(_, c)| **c < 0)
        .map(|(v, _)| v.to_string())
        .collect();
    (missing, duplicated, foreign)
}

/// The Java console consumer's read_committed view must hold every
/// expected value exactly once.
fn assert_exactly_once(brokers: &str, topic: &str, expected: &[String], label: &str) {
    let got = common::java_read_committed(brokers, topic, expected.len() + 1, 15_000).unwrap_or_else(|| {
        panic!("{label}: the Java console consumer is the oracle (scripts/kafka-local install-tools)")
    });
    let (missing, duplicated, foreign) = difference(expected, &got);
    assert!(
        missing.is_empty() && duplicated.is_empty() && foreign.is_empty(),
        "{label}: {} records read: {} MISSING (first {:?}), {} duplicated (first {:?}), {} foreign",
        got.len(),
        missing.len(),
        &missing[..missing.len().min(5)],
        duplicated.len(),
        &duplicated[..duplicated.len().min(5)],
        foreign.len()
    );
}

use common::copy_job::{done_field, CopyRun as Run};

#[allow(clippy::too_many_arguments)]
fn run_copy(
    brokers: &str,
    from: &str,
    to: &str,
    state: &Path,
    txn_id: &str,
    parallelism: u32,
    fault: Option<&str>,
    log: &Path,
) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("copy")
        .args(["--backend", common::connector::backend()])
        .args(["--brokers", brokers, "--from", from, "--to", to])
        .arg("--state-dir")
        .arg(state)
        .args(["--transactional-id", txn_id])
        .args(["--parallelism", &parallelism.to_string()])
        .args(["--checkpoint-every-records", "5000", "--max-batch-records", "500"])
        .args(["--transaction-timeout-ms", "10000"])
        .args(["--until-idle-ms", "5000", "--expected", &RECORDS.to_string()])
        .env("RUST_LOG", "warn");
    common::copy_job::run_copy_command(cmd, fault, log, RUN_TIMEOUT)
}

async fn copy_scenario(parallelism: u32, ending: Ending) {
    let Some(brokers) = common::brokers() else { return };
    let started = Instant::now();
    let label = format!("p{parallelism}x{PARTITIONS} {ending:?}");
    let cluster = common::cluster(common::config(&brokers)).await;
    let input = common::unique_topic(&format!("lo-p{parallelism}-{ending:?}-in").to_lowercase());
    let expected = fill_input(&cluster, &input).await;
    let out = common::unique_topic(&format!("lo-p{parallelism}-{ending:?}-out").to_lowercase());
    common::create_topic(&cluster, NewTopic::new(&out, PARTITIONS, 1)).await;
    let work = std::env::temp_dir().join(format!("{out}-work"));
    let state = work.join("state");
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{out}-txn");
    let mut runs = 0;
    let mut log = || {
        runs += 1;
        work.join(format!("run-{runs}"))
    };

    let run = run_copy(
        &brokers,
        &input,
        &out,
        &state,
        &txn_id,
        parallelism,
        Some("after-commit:2@0"),
        &log(),
    );
    assert!(
        run.status.signal() == Some(9) && run.stderr.contains("copy: fault after-commit:"),
        "{label}: expected death by SIGKILL at after-commit:2@0, got {:?}; stderr:\n{}",
        run.status,
        run.stderr
    );
    let others: Vec<String> = (1..parallelism).map(|s| format!("{txn_id}-{s}")).collect();
    let waited = match ending {
        Ending::Fence => {
            for id in &others {
                fence(&cluster, id).await;
            }
            Duration::ZERO
        }
        Ending::Timeout => await_timeout_abort(&cluster, &others).await,
    };

    let mut restarts = 0;
    let mut first = None;
    let suppressed = loop {
        let run = run_copy(&brokers, &input, &out, &state, &txn_id, parallelism, None, &log());
        restarts += 1;
        first.get_or_insert_with(|| run.stderr.clone());
        if run.status.success() {
            assert_eq!(
                done_field(&run.stdout, "records"),
                Some(RECORDS),
                "{label}: {}",
                run.stdout
            );
            break done_field(&run.stdout, "suppressed").expect("suppressed= in the copy-done line");
        }
        assert!(
            restarts < MAX_RESTARTS,
            "{label}: no exit 0 after {restarts} restarts; last {:?}, stderr:\n{}",
            run.status,
            run.stderr
        );
    };
    let first = first.unwrap_or_default();
    assert!(
        first.contains("a mixed verdict: subtask(s) [0] committed checkpoint 2")
            && first.contains("replay suppression armed at subtask 0"),
        "{label}: the restart must find the mixed verdict and arm subtask 0's suppression:\n{first}"
    );
    assert!(suppressed > 0, "{label}: suppression swallowed nothing:\n{first}");
    assert_exactly_once(&brokers, &out, &expected, &label);
    eprintln!(
        "{label}: {restarts} restart(s), {suppressed} replayed records suppressed, waited {waited:.0?} for the \
         broker's abort: 0 duplicates, 0 missing ({:.0?})",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&work);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_over_6_partitions_fenced_outage_is_exact() {
    copy_scenario(2, Ending::Fence).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_over_6_partitions_fenced_outage_is_exact() {
    copy_scenario(6, Ending::Fence).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_over_6_partitions_timed_out_outage_is_exact() {
    copy_scenario(2, Ending::Timeout).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p6_over_6_partitions_timed_out_outage_is_exact() {
    copy_scenario(6, Ending::Timeout).await;
}

/// The engine channel: records with event times, the watermark after
/// each batch at the last event time (event times strictly increase, so
/// the promise holds), as a windowed pipeline would drive the sink.
struct Engine {
    sinks: Vec<Box<dyn Sink<Item = Text>>>,
}

/// Subtask `s`'s records `from..to` (event time = record number, strictly
/// increasing per subtask).
fn records(s: u32, from: u64, to: u64) -> Vec<(Text, Option<i64>)> {
    (from..to)
        .map(|n| (Text::from(format!("s{s}-{n}")), Some(1_000_000 + n as i64)))
        .collect()
}

impl Engine {
    fn build(brokers: &str, topic: &str, txn_id: &str, dir: &Path, extra: &[(&str, &str)]) -> Engine {
        let mut registry = Registry::new();
        install(&mut registry).unwrap();
        let sinks = (0..2)
            .map(|s| {
                let mut params = vec![
                    ("brokers", brokers),
                    ("topic", topic),
                    ("transactional_id", txn_id),
                    ("linger_ms", "1"),
                    ("backend", common::connector::backend()),
                ];
                params.extend_from_slice(extra);
                let ctx = BuildContext::new(params).with_subtask(s, 2).with_checkpoint(dir, "job");
                match registry.build("kafka_2pc_sink_string", &ctx).unwrap() {
                    Operator::TextSink(sink) => sink,
                    other => panic!("the 2PC sink is a text sink, not {other:?}"),
                }
            })
            .collect();
        Engine { sinks }
    }

    async fn feed(&mut self, from: u64, to: u64) {
        for (s, sink) in self.sinks.iter_mut().enumerate() {
            sink.on_timed_data(records(s as u32, from, to)).await.unwrap();
            sink.on_watermark(1_000_000 + to as i64 - 1);
        }
    }

    /// Barriers and state up to COMPLETED-n; returns n.
    async fn complete(&mut self, coordinator: &mut Coordinator) -> u64 {
        let id = coordinator.begin_checkpoint().unwrap();
        for (s, sink) in self.sinks.iter_mut().enumerate() {
            let rows = sink.on_barrier(id).await.unwrap();
            coordinator.collect(s as u32, rows).unwrap();
        }
        coordinator.write_state(Vec::new()).unwrap();
        coordinator.mark_completed().unwrap()
    }

    async fn commit(&mut self, coordinator: &mut Coordinator, id: u64, subtasks: &[u32]) {
        for &s in subtasks {
            self.sinks[s as usize].on_commit(id).await.unwrap();
            coordinator.commit_returned(s).unwrap();
        }
    }
}

/// Through the `Sink` trait: checkpoint 1 committed by both subtasks,
/// checkpoint 2 committed by subtask 0 only, then a crash (everything
/// dropped, no EndTxn), subtask 1's transaction lost to an outside fence or
/// the transaction timeout; the coordinator's restore falls back to 1 and
/// the replay through new sinks is exact.
async fn sink_trait_scenario(ending: Ending) {
    let Some(brokers) = common::brokers() else { return };
    let logs = common::connector::capture_logs();
    let started = Instant::now();
    let label = format!("Sink trait {ending:?}");
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic(&format!("lo-sink-{ending:?}").to_lowercase());
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let dir = std::env::temp_dir().join(format!("{topic}-ckpt"));
    let txn_id = format!("{topic}-txn");
    let timeout = [("transaction_timeout_ms", "10000")];
    let extra: &[(&str, &str)] = match ending {
        Ending::Fence => &[],
        Ending::Timeout => &timeout,
    };
    let open_coordinator = || {
        let store = CheckpointStore::open(&dir, &[("job", "long-outage")]).unwrap();
        let receipts = store.receipt_dir("job");
        Coordinator::new(store, 2, vec![receipts]).unwrap()
    };

    {
        let mut coordinator = open_coordinator();
        let mut engine = Engine::build(&brokers, &topic, &txn_id, &dir, extra);
        for sink in &mut engine.sinks {
            sink.open().await.unwrap();
        }
        engine.feed(0, 300).await;
        let one = engine.complete(&mut coordinator).await;
        engine.commit(&mut coordinator, one, &[0, 1]).await;
        coordinator.confirm().unwrap();
        engine.feed(300, 700).await;
        let two = engine.complete(&mut coordinator).await;
        engine.commit(&mut coordinator, two, &[0]).await;
        // Read after the barrier: the open tail, never committed.
        engine.feed(700, 800).await;
        // The crash: dropped without close (no EndTxn for anything).
    }
    match ending {
        Ending::Fence => fence(&cluster, &format!("{txn_id}-1")).await,
        Ending::Timeout => {
            await_timeout_abort(&cluster, &[format!("{txn_id}-1")]).await;
        }
    }

    let mut coordinator = open_coordinator();
    let RestorePlan::Unconfirmed { checkpoint: two, .. } = coordinator.restore_plan() else {
        panic!(
            "{label}: checkpoint 2 is completed, not confirmed: {:?}",
            coordinator.restore_plan()
        );
    };
    let state = coordinator.read_state(two).unwrap();
    let mut engine = Engine::build(&brokers, &topic, &txn_id, &dir, extra);
    let mut verdicts = Vec::new();
    for (s, sink) in engine.sinks.iter_mut().enumerate() {
        sink.restore(&state.rows).unwrap();
        sink.open().await.unwrap();
        verdicts.push((s as u32, sink.restore_verdicts()));
    }
    let decision = coordinator.settle_restore(two, &verdicts).unwrap();
    let RestoreDecision::FallBack { to, committed, .. } = decision else {
        panic!("{label}: a mixed verdict falls back, not {decision:?}");
    };
    assert_eq!((to, committed), (Some(1), vec![0]), "{label}");
    for sink in &mut engine.sinks {
        sink.on_restore_point(to).unwrap();
    }
    // The replay from checkpoint 1, then the rest.
    engine.feed(300, 1_000).await;
    let three = engine.complete(&mut coordinator).await;
    engine.commit(&mut coordinator, three, &[0, 1]).await;
    coordinator.confirm().unwrap();
    for sink in &mut engine.sinks {
        sink.close().await.unwrap();
    }
    let mut expected: Vec<String> = (0..2)
        .flat_map(|s| records(s, 0, 1_000).into_iter().map(|(t, _)| t.to_string()))
        .collect();
    expected.sort();
    // Subtask 0 swallowed exactly its 400 records of checkpoint 2 (300..700).
    let retired: Vec<String> = logs
        .contents()
        .lines()
        .filter(|l| l.contains("replay suppression retired") && l.contains(&format!("{txn_id}-")))
        .map(str::to_owned)
        .collect();
    assert!(
        retired.len() == 1
            && retired[0].contains(&format!("transactional_id={txn_id}-0"))
            && retired[0].contains("suppressed=400"),
        "{label}: subtask 0's suppression must swallow its 400 committed records and retire: {retired:?}"
    );
    assert_exactly_once(&brokers, &topic, &expected, &label);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{label}: 400 replayed records suppressed, 0 duplicates, 0 missing ({:.0?})",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_sink_trait_a_fenced_outage_is_exact() {
    sink_trait_scenario(Ending::Fence).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_the_sink_trait_a_timed_out_outage_is_exact() {
    sink_trait_scenario(Ending::Timeout).await;
}
