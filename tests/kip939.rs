//! KIP-939 two-phase-commit participation (`two_phase_commit = kip939`,
//! `copy --two-phase-commit kip939`) against the `twopc` broker of
//! `scripts/kafka-local` (Kafka 4.4.0 with `transaction.two.phase.commit.enable`
//! and `unstable.api.versions.enable`, its transaction-timeout sweep every
//! second).
//!
//! The outage: `copy` at parallelism 2 is SIGKILLed after checkpoint 2 is
//! completed and before any commit is sent (both subtasks' transactions
//! prepared), and stays down three times its 2 s transaction timeout.
//!
//! - with `kip939` the broker keeps both prepared transactions: the restart
//!   commits them over the wire and restores from checkpoint 2 (nothing
//!   replayed);
//! - with `resume` (the default) on the same broker the sweep aborts them:
//!   the restart falls back to checkpoint 1 and replays (still exactly
//!   once, through the fallback) — the control that shows the outage did
//!   outlast the timeout;
//! - a broker without KIP-939 refuses `kip939` with an error naming the
//!   option and the broker settings.
//!
//! Oracle: Kafka's Java console consumer under read_committed.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clink_kafka::client::{Cluster, NewTopic, Producer, ProducerConfig, ProducerRecord};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const RECORDS: u64 = 6_000;
const PARTITIONS: i32 = 2;
/// The sinks' transaction timeout; the outage lasts three times as long.
const TRANSACTION_TIMEOUT_MS: u64 = 2_000;
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

use common::copy_job::CopyRun as Run;

fn copy(brokers: &str, topics: (&str, &str), state: &Path, txn_id: &str, mode: &str, fault: Option<&str>) -> Run {
    let log = state.with_extension(fault.unwrap_or("clean").replace([':', '@'], "_"));
    let mut cmd = Command::new(BIN);
    cmd.arg("copy")
        .args(["--brokers", brokers, "--from", topics.0, "--to", topics.1])
        .arg("--state-dir")
        .arg(state)
        .args(["--transactional-id", txn_id, "--parallelism", "2"])
        .args(["--checkpoint-every-records", "1000", "--max-batch-records", "250"])
        .args(["--transaction-timeout-ms", &TRANSACTION_TIMEOUT_MS.to_string()])
        .args(["--two-phase-commit", mode])
        .args(["--until-idle-ms", "5000", "--expected", &RECORDS.to_string()])
        .env("RUST_LOG", "warn");
    common::copy_job::run_copy_command(cmd, fault, &log, RUN_TIMEOUT)
}

/// `RECORDS` keyed records over `PARTITIONS` partitions; their values, sorted.
async fn fill(cluster: &Cluster, topic: &str) -> Vec<String> {
    common::create_topic(cluster, NewTopic::new(topic, PARTITIONS, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut acks = Vec::new();
    let mut values = Vec::new();
    for i in 0..RECORDS {
        let value = format!("v-{i}");
        values.push(value.clone());
        let record = ProducerRecord::new(topic, value)
            .with_key(format!("k{i}"))
            .with_partition((i % PARTITIONS as u64) as i32);
        acks.push(producer.send(record).await.unwrap());
    }
    producer.flush(Duration::from_secs(60)).await.unwrap();
    for a in acks {
        a.await.unwrap();
    }
    values.sort();
    values
}

/// One outage longer than the transaction timeout, then restarts until exit
/// 0; returns the first restart's stderr after checking the output holds
/// every input record exactly once.
async fn outage(brokers: &str, mode: &str) -> String {
    let cluster = common::cluster(common::config(brokers)).await;
    let input = common::unique_topic(&format!("kip939-{mode}-in"));
    let output = common::unique_topic(&format!("kip939-{mode}-out"));
    let expected = fill(&cluster, &input).await;
    common::create_topic(&cluster, NewTopic::new(&output, PARTITIONS, 1)).await;
    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let state = work.join("state");
    let txn_id = format!("{output}-txn");

    let killed = copy(
        brokers,
        (&input, &output),
        &state,
        &txn_id,
        mode,
        Some("after-completed:2"),
    );
    assert_eq!(
        killed.status.signal(),
        Some(9),
        "{mode}: expected the fault's SIGKILL; stderr:\n{}",
        killed.stderr
    );
    // Down three transaction timeouts (the broker sweeps every second).
    tokio::time::sleep(Duration::from_millis(3 * TRANSACTION_TIMEOUT_MS)).await;

    let mut first = None;
    for attempt in 1..=3 {
        let run = copy(brokers, (&input, &output), &state, &txn_id, mode, None);
        first.get_or_insert_with(|| run.stderr.clone());
        if run.status.success() {
            break;
        }
        assert!(
            attempt < 3,
            "{mode}: no exit 0 after 3 restarts; stderr:\n{}",
            run.stderr
        );
    }
    let got = common::java_read_committed(brokers, &output, RECORDS as usize + 1_000, 10_000)
        .expect("Kafka's console consumer (scripts/kafka-local install-tools)");
    let mut sorted = got.clone();
    sorted.sort();
    let duplicates = sorted.windows(2).filter(|w| w[0] == w[1]).count();
    sorted.dedup();
    let missing = expected.iter().filter(|v| sorted.binary_search(v).is_err()).count();
    assert_eq!(
        (got.len(), duplicates, missing),
        (expected.len(), 0, 0),
        "{mode}: (records read, duplicates, missing) under read_committed"
    );
    let _ = std::fs::remove_dir_all(&work);
    first.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip939_prepared_transactions_outlive_the_transaction_timeout() {
    let Some(brokers) = common::twopc_brokers() else { return };
    let stderr = outage(&brokers, "kip939").await;
    assert!(
        stderr.contains(
            "restored from checkpoint 2: its commit is confirmed now (resolved by receipt: 0, over the wire: 2)"
        ),
        "kip939: both prepared transactions must still be there to commit after the outage; first restart:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_kip939_the_broker_aborts_them_and_the_restore_replays() {
    let Some(brokers) = common::twopc_brokers() else { return };
    let stderr = outage(&brokers, "resume").await;
    assert!(
        stderr.contains(
            "checkpoint 2's transaction is not committed and cannot be: restoring from confirmed checkpoint 1"
        ),
        "resume: the broker's timeout must have aborted checkpoint 2 (the control of the kip939 test); first \
         restart:\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_without_kip939_refuses_it_naming_the_option() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let input = common::unique_topic("kip939-refused-in");
    let output = common::unique_topic("kip939-refused-out");
    common::create_topic(&cluster, NewTopic::new(&input, 1, 1)).await;
    common::create_topic(&cluster, NewTopic::new(&output, 1, 1)).await;
    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let run = copy(
        &brokers,
        (&input, &output),
        &work.join("state"),
        "kip939-refused",
        "kip939",
        None,
    );
    assert_eq!(run.status.code(), Some(1), "stderr:\n{}", run.stderr);
    for needle in [
        "two_phase_commit",
        "InitProducerId",
        "transaction.two.phase.commit.enable",
    ] {
        assert!(
            run.stderr.contains(needle),
            "the refusal must name {needle:?}:\n{}",
            run.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
