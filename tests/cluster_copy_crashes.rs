//! Exactly once on the three-broker cluster with the copy itself crashing:
//! bounded rounds of (start `clink-kafka copy`; SIGKILL the broker leading a
//! random output partition or (odd rounds) coordinating the job's
//! transactional id;
//! start a second copy on the same state directory while the first still
//! runs, which must wait for its lock; SIGKILL the first, then the second
//! once it took over; start the broker again), while the input is still being
//! written, then one last start that runs to exit 0. Kafka's own Java console
//! consumer, reading with read_committed, must find every input record
//! exactly once. The rounds' choices come from a seed that is printed
//! (`CLINK_FAULT_SEED` replays a run).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use clink_kafka::client::NewTopic;
use common::cluster::{self as kc, ClusterLock, PARTITIONS};
use common::proxy::{fault_seed, Rng};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const RECORDS: usize = 45_000;
const ROUNDS: usize = 3;

/// Whether `path` holds `needle` within `timeout`.
async fn wait_for_line(path: &std::path::Path, needle: &str, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|t| t.contains(needle)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn millis(rng: &mut Rng, lo: usize, hi: usize) -> Duration {
    Duration::from_millis(rng.range(lo, hi) as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_is_exactly_once_through_broker_kills_and_its_own_sigkills() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let mut rng = Rng(fault_seed() | 1);
    let cluster = common::cluster(kc::config(&brokers)).await;
    let input = common::unique_topic("cluster-crash-in");
    let output = common::unique_topic("cluster-crash-out");
    for t in [&input, &output] {
        common::create_topic(&cluster, NewTopic::new(t.as_str(), PARTITIONS, 3)).await;
        kc::wait_in_sync(&cluster, t, Duration::from_secs(60)).await;
    }

    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{output}-txn");
    let spawn = |name: &str| -> Child {
        Command::new(BIN)
            .arg("copy")
            .args(["--backend", common::connector::backend()])
            .args(["--brokers", &brokers, "--from", &input, "--to", &output])
            .arg("--state-dir")
            .arg(work.join("state"))
            .args(["--transactional-id", &txn_id])
            .args(["--checkpoint-every-records", "2000"])
            .args(["--until-idle-ms", "60000", "--expected", &RECORDS.to_string()])
            .env("RUST_LOG", "warn")
            .env_remove("CLINK_KAFKA_FAULT")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(work.join(format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(work.join(format!("{name}.err"))).unwrap())
            .spawn()
            .expect("spawning clink-kafka copy")
    };

    let (mut broker_kills, mut process_kills) = (0, 0);
    // Each round's share of the input is written during the round (1,500
    // records a second), the last share during the last run: no run but
    // the last can reach the end.
    let share = RECORDS / (ROUNDS + 1);
    let feed = |k: usize| {
        let end = if k == ROUNDS { RECORDS } else { (k + 1) * share };
        tokio::spawn(kc::feed_input(cluster.clone(), input.clone(), k * share..end))
    };
    for round in 0..ROUNDS {
        let feeder = feed(round);
        let mut child = spawn(&format!("round-{round}"));
        tokio::time::sleep(millis(&mut rng, 3_000, 7_000)).await;
        // Odd rounds the transaction coordinator (once the cluster knows
        // it), even rounds the leader of a random output partition.
        let coordinator = if round % 2 == 1 {
            kc::coordinator(&txn_id).await
        } else {
            None
        };
        let (victim, role) = match coordinator {
            Some(c) => (c, format!("coordinator of {txn_id}")),
            None => {
                let p = (rng.next() % PARTITIONS as u64) as i32;
                (
                    kc::leader(&cluster, &output, p).await,
                    format!("leader of {output}[{p}]"),
                )
            }
        };
        assert!(victim > 0, "round {round}: no broker to kill ({role})");
        kc::kill(victim).await;
        broker_kills += 1;
        // A restart while the old copy still lives (a supervisor that did
        // not wait): it must wait for the old one's state-dir lock, not run
        // beside it.
        let successor_name = format!("round-{round}-successor");
        let mut successor = spawn(&successor_name);
        let waiting = format!("is locked by another copy (pid {}", child.id());
        let contended = wait_for_line(
            &work.join(format!("{successor_name}.err")),
            &waiting,
            Duration::from_secs(10),
        )
        .await;
        let successor_err = || std::fs::read_to_string(work.join(format!("{successor_name}.err"))).unwrap_or_default();
        assert!(
            contended && !successor_err().contains("starting at checkpoint"),
            "round {round}: the second copy must wait for the first's lock; its stderr:\n{}",
            successor_err()
        );
        tokio::time::sleep(millis(&mut rng, 500, 3_000)).await;
        let exited = child.try_wait().unwrap();
        child.kill().ok();
        let status = child.wait().unwrap();
        match exited {
            None => process_kills += 1,
            Some(s) => panic!(
                "round {round}: the copy exited by itself ({s}) before its SIGKILL; stderr:\n{}",
                std::fs::read_to_string(work.join(format!("round-{round}.err"))).unwrap_or_default()
            ),
        }
        // The successor takes over (restores from the old one's state
        // while the broker is still down) and is SIGKILLed in its turn.
        let took_over = wait_for_line(
            &work.join(format!("{successor_name}.err")),
            "the other copy is gone",
            Duration::from_secs(10),
        )
        .await;
        assert!(
            took_over,
            "round {round}: the successor never took the lock over:\n{}",
            successor_err()
        );
        tokio::time::sleep(millis(&mut rng, 500, 2_000)).await;
        if let Some(s) = successor.try_wait().unwrap() {
            panic!(
                "round {round}: the successor exited by itself ({s}); stderr:\n{}",
                successor_err()
            );
        }
        successor.kill().ok();
        successor.wait().unwrap();
        process_kills += 1;
        eprintln!(
            "round {round}: SIGKILLed broker {victim} ({role}), then the copy ({status}) while its successor \
             waited for the lock, then the successor"
        );
        kc::start(victim).await;
        kc::wait_in_sync(&cluster, &output, Duration::from_secs(120)).await;
        feeder.await.expect("feeding the input");
    }
    let feeder = feed(ROUNDS);
    let status = tokio::task::block_in_place(|| kc::wait_child(spawn("final"), Duration::from_secs(300)));
    feeder.await.expect("feeding the input");
    let stderr = std::fs::read_to_string(work.join("final.err")).unwrap_or_default();
    let stdout = std::fs::read_to_string(work.join("final.out")).unwrap_or_default();
    eprintln!("final run: {status}\n{stdout}");
    assert!(
        status.success(),
        "the last copy must run to exit 0 ({status}); stderr:\n{stderr}"
    );

    let Some((read, duplicated, missing, foreign)) = kc::java_exactly_once(&brokers, &output, RECORDS) else {
        return;
    };
    eprintln!(
        "{ROUNDS} rounds, {RECORDS} records, {broker_kills} broker kills, {process_kills} process kills: \
         {read} read back, {duplicated} duplicated, {missing} missing"
    );
    assert_eq!((duplicated, missing, foreign, read), (0, 0, 0, RECORDS), "exactly once");
}
