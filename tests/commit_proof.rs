//! "Committed, then fenced": `clink-kafka copy` is SIGKILLed in the ack
//! window (`after-end-txn`: the broker acknowledged a subtask's EndTxn,
//! its receipt is not written), then another producer takes the
//! transactional id over (InitProducerId bumps the epoch: the coordinator
//! forgets the commit, EndTxn and DescribeTransactions read "fenced"). The
//! restore must prove the commit from the log (the COMMIT marker after the
//! transaction's first offset in the output partitions), materialise the
//! receipt and not publish the interval again: 0 duplicates, 0 missing,
//! read with read_committed by our consumer and by Kafka's Java console
//! consumer. On transaction.version 2 (the marker carries the bumped epoch)
//! and 1 (the transaction's own); at parallelism 1 and 3 (subtask 0
//! receipted, 1 acknowledged without receipt, 2 not committed; 1 and 2
//! fenced: a mixed verdict whose fallback suppresses 0's and 1's replay).
//! Without the log proof the fenced commit is replayed (duplicates): the
//! restart must say the log proved it.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, NewTopic, PartitionOffset, Producer, ProducerConfig, ProducerRecord, TransactionalProducer, TxnConfig,
};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const RECORDS: u64 = 6_000;
const PARTITIONS: i32 = 3;
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// What the restart logs when the log proved a fenced commit.
const LOG_PROOF: &str = "commit proven from the log";

use common::copy_job::{done_field, CopyRun as Run};

/// `args`: `--brokers` and the job's other options.
fn run_copy(args: &[String], from: &str, to: &str, state: &Path, txn_id: &str, fault: Option<&str>, log: &Path) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("copy")
        .args(["--backend", common::connector::backend()])
        .args(args)
        .args(["--from", from, "--to", to])
        .arg("--state-dir")
        .arg(state)
        .args(["--transactional-id", txn_id])
        .args(["--checkpoint-every-records", "1500"])
        .args(["--until-idle-ms", "5000", "--expected", &RECORDS.to_string()])
        .env("RUST_LOG", "warn");
    common::copy_job::run_copy_command(cmd, fault, log, RUN_TIMEOUT)
}

async fn fill_input(cluster: &Cluster, topic: &str) -> Vec<String> {
    common::create_topic(cluster, NewTopic::new(topic, PARTITIONS, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut futures = Vec::new();
    let mut values = Vec::new();
    // Strictly increasing timestamps ending now: event time for replay suppression.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let base = now_ms - RECORDS as i64;
    for i in 0..RECORDS {
        let p = (i % PARTITIONS as u64) as i32;
        let value = format!("{p}-{i}");
        values.push(value.clone());
        let record = ProducerRecord::new(topic, value)
            .with_key(format!("k{i}"))
            .with_partition(p)
            .with_timestamp(base + i as i64);
        futures.push(producer.send(record).await.unwrap());
    }
    producer.flush(Duration::from_secs(60)).await.unwrap();
    for f in futures {
        f.await.unwrap();
    }
    values.sort();
    values
}

/// Takes `txn_id` over: InitProducerId bumps the epoch (and aborts an open
/// transaction of the dead producer).
async fn fence(cluster: &Cluster, txn_id: &str) {
    let producer = TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(txn_id))
        .await
        .expect("fencing the transactional id");
    producer.close().await.expect("closing the fencing producer");
}

/// Every value of `expected` exactly once in `got`, or what differs.
fn difference(expected: &[String], got: &[String]) -> Option<String> {
    let mut counts: BTreeMap<&str, i64> = expected.iter().map(|v| (v.as_str(), 1)).collect();
    let mut foreign = 0;
    for v in got {
        match counts.get_mut(v.as_str()) {
            Some(c) => *c -= 1,
            None => foreign += 1,
        }
    }
    let missing = counts.values().filter(|c| **c > 0).count();
    let duplicated = counts.values().filter(|c| **c < 0).count();
    (missing + duplicated + foreign > 0).then(|| {
        format!(
            "{} records read: {missing} missing, {duplicated} duplicated, {foreign} foreign",
            got.len()
        )
    })
}

/// One "committed, then fenced" run: the kill at `fault`, the fence of
/// `fenced` subtasks (`None`: parallelism 1, the id itself), the restart,
/// which must say each of `says`.
async fn committed_then_fenced(brokers: &str, tag: &str, parallelism: u32, fault: &str, fenced: &[u32], says: &[&str]) {
    let started = Instant::now();
    let cluster = common::cluster(common::config(brokers)).await;
    let input = common::unique_topic(&format!("proof-{tag}-in"));
    let expected = fill_input(&cluster, &input).await;
    let out = common::unique_topic(&format!("proof-{tag}-out"));
    common::create_topic(&cluster, NewTopic::new(&out, PARTITIONS, 1)).await;
    let work = std::env::temp_dir().join(format!("{out}-work"));
    let state = work.join("state");
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{out}-txn");
    let extra: Vec<String> = [
        "--brokers",
        brokers,
        "--parallelism",
        &parallelism.to_string(),
        "--max-batch-records",
        "100",
    ]
    .map(str::to_owned)
    .to_vec();
    let run = run_copy(&extra, &input, &out, &state, &txn_id, Some(fault), &work.join("run-1"));
    assert!(
        run.status.signal() == Some(9) && run.stderr.contains("copy: fault after-end-txn:"),
        "{tag}: expected death by SIGKILL at {fault}, got {:?}; stderr:\n{}",
        run.status,
        run.stderr
    );
    if parallelism == 1 {
        fence(&cluster, &txn_id).await;
    } else {
        for i in fenced {
            fence(&cluster, &format!("{txn_id}-{i}")).await;
        }
    }
    let restarted = Instant::now();
    let run = run_copy(&extra, &input, &out, &state, &txn_id, None, &work.join("run-2"));
    assert!(
        run.status.success(),
        "{tag}: the restart failed: {:?}\n{}",
        run.status,
        run.stderr
    );
    let restart_took = restarted.elapsed();
    for want in [LOG_PROOF].iter().chain(says) {
        assert!(
            run.stderr.contains(want),
            "{tag}: the restart did not say {want:?}:\n{}",
            run.stderr
        );
    }
    assert_eq!(
        done_field(&run.stdout, "records"),
        Some(RECORDS),
        "{tag}: {}",
        run.stdout
    );
    let ours = common::read_committed_values(&cluster, &out, PARTITIONS, RECORDS as usize).await;
    if let Some(diff) = difference(&expected, &ours) {
        panic!(
            "{tag}: our read_committed view of {out}: {diff}\nrestart stderr:\n{}",
            run.stderr
        );
    }
    let java = common::java_read_committed(brokers, &out, RECORDS as usize + 1, 5_000);
    match &java {
        Some(java) => {
            if let Some(diff) = difference(&expected, java) {
                panic!("{tag}: the Java console consumer's read_committed view of {out}: {diff}");
            }
        }
        None => assert!(!common::broker_required(), "the Java tools are missing under CI"),
    }
    eprintln!(
        "{tag}: committed, then fenced: the log proved the commit; {RECORDS} records, 0 duplicates, 0 missing \
         (Java oracle: {}); restart {restart_took:.1?}, whole test {:.1?}",
        if java.is_some() { "checked" } else { "absent" },
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(&work);
}

/// Checkpoint 2 committed (EndTxn acknowledged), no receipt, fenced: the
/// log proves it, the restore confirms checkpoint 2 (nothing replayed).
const SINGLE: &[&str] =
    &["restored from checkpoint 2: its commit is confirmed now (resolved by receipt: 0, over the wire: 1)"];

/// Subtask 0 receipted, 1's commit proven from the log (its receipt
/// materialised), 2 not committed (the fence aborted it): a mixed verdict,
/// the fallback replays checkpoint 2's interval and the sinks of 0 and 1
/// swallow their part of it.
const PARALLEL: &[&str] = &[
    "checkpoint 2's transaction is not committed and cannot be: restoring from confirmed checkpoint 1",
    "a mixed verdict: subtask(s) [0, 1] committed checkpoint 2",
    "replay suppression armed at subtask 1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_fenced_before_its_receipt_is_proven_from_the_log_tv2() {
    let Some(brokers) = common::brokers() else { return };
    committed_then_fenced(&brokers, "p1-tv2", 1, "after-end-txn:2", &[], SINGLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_fenced_before_its_receipt_is_proven_from_the_log_tv1() {
    let Some(brokers) = common::tv1_brokers() else { return };
    committed_then_fenced(&brokers, "p1-tv1", 1, "after-end-txn:2", &[], SINGLE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_commit_in_a_mixed_verdict_is_proven_from_the_log_tv2() {
    let Some(brokers) = common::brokers() else { return };
    committed_then_fenced(&brokers, "p3-tv2", 3, "after-end-txn:2@1", &[1, 2], PARALLEL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_commit_in_a_mixed_verdict_is_proven_from_the_log_tv1() {
    let Some(brokers) = common::tv1_brokers() else { return };
    committed_then_fenced(&brokers, "p3-tv1", 3, "after-end-txn:2@1", &[1, 2], PARALLEL).await;
}

/// One transaction of `records` records over partitions 0 and 1 of
/// `topic`: its handle and each partition's first offset.
async fn one_transaction<'a>(
    producer: &'a mut TransactionalProducer,
    topic: &str,
    records: usize,
) -> (
    clink_kafka::client::Transaction<'a>,
    clink_kafka::client::ResumeHandle,
    Vec<PartitionOffset>,
) {
    let txn = producer.begin().await.expect("begin");
    let handle = txn.identity();
    let mut futures = Vec::new();
    for i in 0..records {
        let record = ProducerRecord::new(topic, format!("v{i}")).with_partition((i % 2) as i32);
        futures.push(txn.send(record).await.expect("send"));
    }
    let mut first: BTreeMap<i32, i64> = BTreeMap::new();
    for f in futures {
        let d = f.await.expect("delivery");
        let e = first.entry(d.partition).or_insert(d.offset);
        *e = (*e).min(d.offset);
    }
    let written = first.into_iter().map(|(p, o)| PartitionOffset::new(p, o)).collect();
    (txn, handle, written)
}

/// The log proof on its own, against the real brokers (both protocols):
/// a committed then fenced transaction is proven committed (the COMMIT
/// marker's epoch is the one the protocol writes: the transaction's under
/// version 1, one above under version 2), an aborted one aborted; an open
/// transaction, a first offset past the log's end or another
/// transaction's records prove nothing (undecided, within the bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_proves_commits_and_aborts_and_nothing_else() {
    use clink_kafka::client::{
        prove_from_log, CommitProof, Decision, LogProof, LogProofLimits, Resolver, TransactionVersion, Verdict,
    };
    let pairs = common::transaction_brokers();
    assert!(
        !pairs.is_empty() || !common::broker_required(),
        "no transaction brokers under CI"
    );
    for (brokers, version) in pairs {
        let started = Instant::now();
        let config = common::config(&brokers);
        let cluster = common::cluster(config.clone()).await;
        let topic = common::unique_topic("proof-unit");
        common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
        let txn_id = common::unique_topic("proof-unit-txn");
        let limits = LogProofLimits {
            timeout: Duration::from_secs(3),
            ..LogProofLimits::default()
        };
        let mut producer =
            TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(&txn_id))
                .await
                .expect("init");
        let (txn, committed, committed_at) = one_transaction(&mut producer, &topic, 10).await;
        txn.commit().await.expect("commit");
        let (txn, aborted, aborted_at) = one_transaction(&mut producer, &topic, 6).await;
        txn.abort().await.expect("abort");
        drop(producer);
        fence(&cluster, &txn_id).await;

        let proof = prove_from_log(&config, &committed, &topic, &committed_at, limits).await;
        // The COMMIT marker's epoch, as the broker wrote it: the
        // transaction's own under version 1, one above under version 2
        // (the coordinator bumps at every end, KIP-890).
        let commit_epoch = match version {
            TransactionVersion::V1 => committed.producer_epoch,
            TransactionVersion::V2 => committed.producer_epoch + 1,
        };
        assert!(
            matches!(proof, LogProof::Committed { epoch, .. } if epoch == commit_epoch),
            "{brokers} ({version:?}): {proof:?}, handle {committed}"
        );
        // Through the resolver: the coordinator says fenced, the log overturns it.
        let resolver = Resolver::new(config.clone()).with_unreachable_after(Duration::from_secs(3));
        assert!(
            !resolver.resolve(&committed, Decision::Commit).await.is_committed(),
            "{brokers}: the coordinator no longer knows the fenced commit"
        );
        let v = resolver
            .resolve_proven(&committed, Decision::Commit, Some((&topic, &committed_at)))
            .await;
        assert!(
            matches!(
                v,
                Verdict::Committed {
                    proof: CommitProof::LogMarker { .. }
                }
            ),
            "{brokers} ({version:?}): {v}"
        );
        let proof = prove_from_log(&config, &aborted, &topic, &aborted_at, limits).await;
        assert!(
            matches!(proof, LogProof::Aborted { .. }),
            "{brokers} ({version:?}): {proof:?}"
        );
        let v = resolver
            .resolve_proven(&aborted, Decision::Commit, Some((&topic, &aborted_at)))
            .await;
        assert!(
            matches!(v, Verdict::NotCommitted { .. }),
            "{brokers} ({version:?}): {v}"
        );

        // Past the log's end.
        let past = [PartitionOffset::new(0, 1_000_000)];
        let proof = prove_from_log(&config, &committed, &topic, &past, limits).await;
        assert!(matches!(proof, LogProof::Undecided { .. }), "{brokers}: {proof:?}");
        // The resolver holds on it: no verdict, rather than a guess.
        let v = resolver
            .resolve_proven(&committed, Decision::Commit, Some((&topic, &past)))
            .await;
        assert!(matches!(v, Verdict::Unreachable { .. }), "{brokers}: {v}");
        // Still open: nothing to prove within the bound; the resolver holds.
        let mut producer =
            TransactionalProducer::init(cluster.clone(), ProducerConfig::default(), TxnConfig::new(&txn_id))
                .await
                .expect("init");
        let (txn, open, open_at) = one_transaction(&mut producer, &topic, 4).await;
        let waited = Instant::now();
        let proof = prove_from_log(&config, &open, &topic, &open_at, limits).await;
        assert!(matches!(proof, LogProof::Undecided { .. }), "{brokers}: {proof:?}");
        assert!(
            waited.elapsed() < limits.timeout + Duration::from_secs(2),
            "bounded: {:?}",
            waited.elapsed()
        );
        txn.abort().await.expect("abort");
        eprintln!(
            "{brokers} ({version:?}): log proofs checked in {:.1?}",
            started.elapsed()
        );
    }
}
