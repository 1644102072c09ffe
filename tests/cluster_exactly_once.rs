//! Exactly once on the three-broker cluster: `clink-kafka copy` over 6
//! partitions (replication factor 3) while, from outside the process, the
//! leader of an output partition and then the broker coordinating the job's
//! transactional id are SIGKILLed (and started again). Losing one broker of
//! three, with the replicas in sync, is retried, not fatal: the copy exits 0
//! on its first start, and Kafka's own Java console consumer, reading with
//! read_committed, finds every input record exactly once. Plus an in-doubt
//! transaction committed through a new coordinator, and the whole cluster
//! stopped and started under a running copy (issue 13, part 7).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::{NewTopic, Producer, ProducerConfig, ProducerRecord};
use common::cluster::{self as kc, ClusterLock};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const PARTITIONS: i32 = 6;
const RECORDS: usize = 60_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_is_exactly_once_and_survives_leader_and_coordinator_kills() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let input = common::unique_topic("cluster-eo-in");
    let output = common::unique_topic("cluster-eo-out");
    common::create_topic(&cluster, NewTopic::new(&input, PARTITIONS, 3)).await;
    common::create_topic(&cluster, NewTopic::new(&output, PARTITIONS, 3)).await;
    kc::wait_in_sync(&cluster, &input, Duration::from_secs(60)).await;
    kc::wait_in_sync(&cluster, &output, Duration::from_secs(60)).await;

    // The input is written while the copy runs (1,500 records a second), so
    // the kills land mid-copy.
    let feeder = {
        let (cluster, input) = (cluster.clone(), input.clone());
        tokio::spawn(async move {
            let producer = Producer::new(cluster, ProducerConfig::default())
                .await
                .expect("producer");
            let mut acks = Vec::with_capacity(RECORDS);
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            for chunk in 0..RECORDS / 150 {
                tick.tick().await;
                for j in 0..150 {
                    let i = chunk * 150 + j;
                    let record = ProducerRecord::new(input.as_str(), format!("v{i}"))
                        .with_key(format!("k{i}"))
                        .with_partition((i % PARTITIONS as usize) as i32);
                    acks.push(producer.send(record).await.expect("send"));
                }
            }
            producer.flush(Duration::from_secs(120)).await.expect("flush");
            for a in acks {
                a.await.expect("input record delivered");
            }
            producer.close(Duration::from_secs(30)).await.expect("close");
        })
    };

    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{output}-txn");
    let (out_path, err_path) = (work.join("copy.out"), work.join("copy.err"));
    let mut child = Command::new(BIN)
        .arg("copy")
        .args(["--backend", common::connector::backend()])
        .args(["--brokers", &brokers, "--from", &input, "--to", &output])
        .arg("--state-dir")
        .arg(work.join("state"))
        .args(["--transactional-id", &txn_id])
        .args(["--checkpoint-every-records", "2500"])
        // Idle only well past any failover.
        .args(["--until-idle-ms", "60000", "--expected", &RECORDS.to_string()])
        .env("RUST_LOG", "warn")
        .env_remove("CLINK_KAFKA_FAULT")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("spawning clink-kafka copy");

    // Kill 1: the leader of output partition 0. Kill 2: the transaction
    // coordinator of the copy's transactional id.
    let mut kills = Vec::new();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let leader = kc::leader(&cluster, &output, 0).await;
    assert!(leader > 0, "output partition 0 has no leader");
    kc::kill(leader).await;
    kills.push(format!("broker {leader} (leader of {output}[0])"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    kc::start(leader).await;
    kc::wait_in_sync(&cluster, &output, Duration::from_secs(120)).await;
    let coordinator = kc::coordinator(&txn_id)
        .await
        .expect("the copy's transaction coordinator");
    kc::kill(coordinator).await;
    kills.push(format!("broker {coordinator} (coordinator of {txn_id})"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    kc::start(coordinator).await;

    feeder.await.expect("feeding the input");
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the copy ran over 240 s; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    eprintln!("copy: {status}; kills: {kills:?}\n{stdout}");
    assert!(
        status.success(),
        "the copy must survive the loss of one broker of three on its first start ({status}); stderr:\n{stderr}"
    );

    let Some(got) = common::java_read_committed(&brokers, &output, RECORDS + 1_000, 15_000) else {
        return;
    };
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for v in &got {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    let duplicated = counts.values().filter(|c| **c > 1).count();
    let missing = (0..RECORDS)
        .filter(|i| !counts.contains_key(format!("v{i}").as_str()))
        .count();
    let foreign = counts.keys().filter(|k| !k.starts_with('v')).count();
    eprintln!(
        "{RECORDS} records, {} broker kills, 0 process kills: {} read back, {duplicated} duplicated, {missing} missing",
        kills.len(),
        got.len()
    );
    assert_eq!((duplicated, missing, foreign), (0, 0, 0), "exactly once");
    assert_eq!(got.len(), RECORDS);
}

/// The transaction coordinator's broker dies between the barrier and the
/// commit: the copy is SIGKILLed at `after-completed:2` (checkpoint 2 is
/// durable, its transaction prepared, the commit not sent), then the broker
/// coordinating its transactional id is SIGKILLed too. The restarted copy,
/// while that broker is still down, finds the new coordinator and commits
/// the in-doubt transaction over the wire, then finishes: every record
/// exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_doubt_transaction_is_committed_through_the_new_coordinator() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let input = common::unique_topic("cluster-2pc-in");
    let output = common::unique_topic("cluster-2pc-out");
    common::create_topic(&cluster, NewTopic::new(&input, PARTITIONS, 3)).await;
    common::create_topic(&cluster, NewTopic::new(&output, PARTITIONS, 3)).await;
    const N: usize = 12_000;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let mut acks = Vec::new();
    for i in 0..N {
        let record =
            ProducerRecord::new(input.as_str(), format!("v{i}")).with_partition((i % PARTITIONS as usize) as i32);
        acks.push(producer.send(record).await.expect("send"));
    }
    producer.flush(Duration::from_secs(60)).await.expect("flush");
    for a in acks {
        a.await.expect("input delivered");
    }
    producer.close(Duration::from_secs(30)).await.expect("close");

    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{output}-txn");
    let copy = |fault: Option<&str>, name: &str| {
        let mut cmd = Command::new(BIN);
        cmd.arg("copy")
            .args(["--backend", common::connector::backend()])
            .args(["--brokers", &brokers, "--from", &input, "--to", &output])
            .arg("--state-dir")
            .arg(work.join("state"))
            .args(["--transactional-id", &txn_id])
            .args(["--checkpoint-every-records", "2000"])
            .args(["--until-idle-ms", "30000", "--expected", &N.to_string()])
            .env("RUST_LOG", "warn")
            .env_remove("CLINK_KAFKA_FAULT")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(work.join(format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(work.join(format!("{name}.err"))).unwrap());
        if let Some(f) = fault {
            cmd.env("CLINK_KAFKA_FAULT", f);
        }
        let status = common::cluster::wait_child(
            cmd.spawn().expect("spawning clink-kafka copy"),
            Duration::from_secs(240),
        );
        let read = |ext: &str| std::fs::read_to_string(work.join(format!("{name}.{ext}"))).unwrap_or_default();
        (status, read("out"), read("err"))
    };

    let (status, _, stderr) = tokio::task::block_in_place(|| copy(Some("after-completed:2"), "run-1"));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the fault point must SIGKILL the copy; stderr:\n{stderr}"
    );
    let coordinator = kc::coordinator(&txn_id)
        .await
        .expect("the copy's transaction coordinator");
    kc::kill(coordinator).await;
    eprintln!("copy killed after checkpoint 2 completed; killed broker {coordinator}, its transaction coordinator");
    let (status, stdout, stderr) = tokio::task::block_in_place(|| copy(None, "run-2"));
    kc::start(coordinator).await;
    assert!(status.success(), "the restored copy ({status}); stderr:\n{stderr}");
    assert!(
        stderr.contains(
            "restored from checkpoint 2: its commit is confirmed now (resolved by receipt: 0, over the wire: 1)"
        ),
        "the restore must commit checkpoint 2's transaction over the wire; stderr:\n{stderr}"
    );
    let now = kc::coordinator(&txn_id).await;
    eprintln!("coordinator after the failover: {now:?}\n{stdout}");

    let Some(got) = common::java_read_committed(&brokers, &output, N + 1_000, 15_000) else {
        return;
    };
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for v in &got {
        *counts.entry(v.as_str()).or_default() += 1;
    }
    let duplicated = counts.values().filter(|c| **c > 1).count();
    let missing = (0..N)
        .filter(|i| !counts.contains_key(format!("v{i}").as_str()))
        .count();
    eprintln!(
        "{N} records, 1 broker kill, 1 process kill: {} read back, {duplicated} duplicated, {missing} missing",
        got.len()
    );
    assert_eq!((duplicated, missing, got.len()), (0, 0, N), "exactly once");
}

/// Part 7 of issue 13: every broker of the cluster stops (SIGTERM,
/// controlled shutdown, one after the other) and starts again under a
/// running `clink-kafka copy --parallelism 2`. The job continues, or fails
/// and is restarted from its state directory (at most `MAX_RUNS` runs in
/// all), until it exits 0; read_committed readers (ours and Kafka's Java
/// console consumer) then find every input record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_survives_a_whole_cluster_restart_mid_copy() {
    const N: usize = 24_000;
    const MAX_RUNS: u32 = 8;
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let input = common::unique_topic("cluster-restart-in");
    let output = common::unique_topic("cluster-restart-out");
    common::create_topic(&cluster, NewTopic::new(&input, PARTITIONS, 3)).await;
    common::create_topic(&cluster, NewTopic::new(&output, PARTITIONS, 3)).await;
    kc::wait_in_sync(&cluster, &input, Duration::from_secs(60)).await;
    kc::wait_in_sync(&cluster, &output, Duration::from_secs(60)).await;

    // Records i in [from, to), 1,200 a second, each acknowledged.
    let feed = |cluster: clink_kafka::client::Cluster, input: String, from: usize, to: usize| async move {
        let producer = Producer::new(cluster, ProducerConfig::default())
            .await
            .expect("producer");
        let mut acks = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        for chunk in (from..to).step_by(120) {
            tick.tick().await;
            for i in chunk..(chunk + 120).min(to) {
                let record = ProducerRecord::new(input.as_str(), format!("v{i}"))
                    .with_key(format!("k{i}"))
                    .with_partition((i % PARTITIONS as usize) as i32);
                acks.push(producer.send(record).await.expect("send"));
            }
        }
        producer.flush(Duration::from_secs(120)).await.expect("flush");
        for a in acks {
            a.await.expect("input record delivered");
        }
        producer.close(Duration::from_secs(30)).await.expect("close");
    };

    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{output}-txn");
    let spawn = |run: u32| {
        Command::new(BIN)
            .arg("copy")
            .args(["--backend", common::connector::backend()])
            .args(["--brokers", &brokers, "--from", &input, "--to", &output])
            .arg("--state-dir")
            .arg(work.join("state"))
            .args(["--transactional-id", &txn_id, "--parallelism", "2"])
            .args(["--checkpoint-interval-ms", "500"])
            // Idle only well past the outage.
            .args(["--until-idle-ms", "60000", "--expected", &N.to_string()])
            .env("RUST_LOG", "warn")
            .env_remove("CLINK_KAFKA_FAULT")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(work.join(format!("run-{run}.out"))).unwrap())
            .stderr(std::fs::File::create(work.join(format!("run-{run}.err"))).unwrap())
            .spawn()
            .expect("spawning clink-kafka copy")
    };
    let mut run = 1;
    let mut child = spawn(run);

    // The first half is fed while the copy runs; the cluster stops right
    // after its last record (the copy holds an open or prepared transaction
    // of it), stays down for 5 s and starts again; then the second half.
    feed(cluster.clone(), input.clone(), 0, N / 2).await;
    let outage = Instant::now();
    tokio::join!(kc::stop(1), kc::stop(2), kc::stop(3));
    let copy_during_outage = child.try_wait().unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    tokio::join!(kc::start(1), kc::start(2), kc::start(3));
    eprintln!(
        "cluster stopped and started in {:.1?} (the copy {} while it was down)",
        outage.elapsed(),
        match copy_during_outage {
            Some(s) => format!("had exited: {s}"),
            None => "was running".to_owned(),
        }
    );
    kc::wait_in_sync(&cluster, &input, Duration::from_secs(120)).await;
    kc::wait_in_sync(&cluster, &output, Duration::from_secs(120)).await;
    feed(cluster.clone(), input.clone(), N / 2, N).await;

    let mut exits = Vec::new();
    let stdout = loop {
        let status = tokio::task::block_in_place(|| kc::wait_child(child, Duration::from_secs(240)));
        let read = |ext: &str| std::fs::read_to_string(work.join(format!("run-{run}.{ext}"))).unwrap_or_default();
        exits.push(status.to_string());
        if status.success() {
            break read("out");
        }
        assert!(
            run < MAX_RUNS,
            "no exit 0 in {MAX_RUNS} runs ({exits:?}); last stderr:\n{}",
            read("err")
        );
        eprintln!("run {run}: {status}; restarting; stderr:\n{}", read("err"));
        run += 1;
        child = spawn(run);
    };
    eprintln!("copy: {run} run(s): {exits:?}\n{stdout}");
    assert!(stdout.contains(&format!("copy-done records={N} ")), "{stdout}");

    let ours = common::read_committed_values(&cluster, &output, PARTITIONS, N).await;
    // The console consumer's group coordinator is freshly restarted too.
    let java = common::java_read_committed(&brokers, &output, N + 1_000, 60_000);
    for (reader, got) in [("ours", Some(ours)), ("the Java console consumer", java)] {
        let Some(got) = got else { continue };
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        for v in &got {
            *counts.entry(v.as_str()).or_default() += 1;
        }
        let duplicated = counts.values().filter(|c| **c > 1).count();
        let missing = (0..N)
            .filter(|i| !counts.contains_key(format!("v{i}").as_str()))
            .count();
        eprintln!(
            "{N} records, 1 whole-cluster restart, {} run(s): {reader} read {} back, {duplicated} duplicated, \
             {missing} missing",
            run,
            got.len()
        );
        assert_eq!((duplicated, missing, got.len()), (0, 0, N), "exactly once ({reader})");
    }
}
