//! The exactly-once proof: `clink-kafka copy` (a KafkaSource into the
//! two-phase-commit sink under the job's own checkpoint coordinator) is
//! SIGKILLed at every named fault point (`CLINK_KAFKA_FAULT`), restarted
//! without the fault until it exits 0, and the output topic read with
//! read_committed holds every input record exactly once. Against the
//! transaction.version 2 broker and the transaction.version 1 one; plus a
//! completed checkpoint whose transaction another producer fenced (abandoned,
//! replayed from the newest confirmed one), a restore that cannot reach the
//! broker (fails, fences nothing, converges later), a SCRAM-SHA-512 run whose
//! password must reach no file, and time-triggered checkpoints. Each restart
//! must also report the restore path its fault implies (confirmed
//! checkpoint, resolved over the wire, resolved by receipt).

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    ClientConfig, Cluster, NewTopic, Producer, ProducerConfig, ProducerRecord, TransactionalProducer, TxnConfig,
};
use clink_kafka::wire::sasl::SaslMechanism;

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const RECORDS: u64 = 20_000;
const PARTITIONS: i32 = 3;
/// About eight checkpoints per full copy, so a fault at the second one is mid-run.
const CHECKPOINT_EVERY: u64 = 2_500;
/// Restarts without the fault before giving up.
const MAX_RESTARTS: u32 = 3;
/// Bound on one run of the job.
const RUN_TIMEOUT: Duration = Duration::from_secs(180);

/// One scenario: the faults armed in the first runs (each must end in
/// SIGKILL), and what the first clean restart must say it restored from.
struct Scenario {
    name: &'static str,
    faults: &'static [&'static str],
    /// After the faults: another producer takes the transactional id
    /// (InitProducerId fences the dead one and aborts its transaction).
    fence: bool,
    /// After the faults: one restart against a port nobody listens on must
    /// fail (exit 1) without fencing, leaving the transaction resolvable.
    unreachable: bool,
    restored: Option<&'static str>,
}

/// Checkpoint 2 completed unconfirmed, its prepared transaction committed by the resolver.
const OVER_THE_WIRE: &str =
    "restored from checkpoint 2: its commit is confirmed now (resolved by receipt: 0, over the wire: 1)";
/// Checkpoint 2 completed unconfirmed, its commit proven by the sink's receipt.
const BY_RECEIPT: &str =
    "restored from checkpoint 2: its commit is confirmed now (resolved by receipt: 1, over the wire: 0)";

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "baseline",
        faults: &[],
        fence: false,
        unreachable: false,
        restored: None,
    },
    Scenario {
        name: "mid-batch",
        faults: &["mid-batch:4"],
        fence: false,
        unreachable: false,
        restored: None,
    },
    Scenario {
        name: "after-barrier",
        faults: &["after-barrier:2"],
        fence: false,
        unreachable: false,
        restored: Some("restored from confirmed checkpoint 1"),
    },
    Scenario {
        name: "after-state-written",
        faults: &["after-state-written:2"],
        fence: false,
        unreachable: false,
        restored: Some("restored from confirmed checkpoint 1"),
    },
    Scenario {
        name: "after-completed",
        faults: &["after-completed:2"],
        fence: false,
        unreachable: false,
        restored: Some(OVER_THE_WIRE),
    },
    Scenario {
        name: "after-end-txn",
        faults: &["after-end-txn:2"],
        fence: false,
        unreachable: false,
        restored: Some(OVER_THE_WIRE),
    },
    Scenario {
        name: "after-commit",
        faults: &["after-commit:2"],
        fence: false,
        unreachable: false,
        restored: Some(BY_RECEIPT),
    },
    Scenario {
        name: "after-confirmed",
        faults: &["after-confirmed:2"],
        fence: false,
        unreachable: false,
        restored: Some("restored from confirmed checkpoint 2"),
    },
    Scenario {
        name: "after-resolve",
        faults: &["after-completed:2", "after-resolve"],
        fence: false,
        unreachable: false,
        restored: Some(OVER_THE_WIRE),
    },
    Scenario {
        name: "after-recovery-open",
        faults: &["after-completed:2", "after-recovery-open"],
        fence: false,
        unreachable: false,
        restored: Some(BY_RECEIPT),
    },
    // One job killed at every point in turn (each restart recovers from the
    // previous kill, then dies at the next point). Each run commits at most
    // one checkpoint (< 2 x 2,500 records) before the last, so the last still
    // has records to checkpoint and its fault fires.
    Scenario {
        name: "every-point-in-turn",
        faults: &[
            "mid-batch:3",
            "after-confirmed:1",
            "after-barrier:1",
            "after-completed:1",
            "after-resolve",
            "after-recovery-open",
            "after-state-written:1",
            "after-end-txn:1",
            "after-commit:1",
        ],
        fence: false,
        unreachable: false,
        restored: Some("its commit is confirmed now (resolved by receipt: 1, over the wire: 0)"),
    },
    Scenario {
        name: "unreachable-at-restore",
        faults: &["after-completed:2"],
        fence: false,
        unreachable: true,
        restored: Some(OVER_THE_WIRE),
    },
    Scenario {
        name: "fenced-after-completed",
        faults: &["after-completed:2"],
        fence: true,
        unreachable: false,
        restored: Some(
            "checkpoint 2's transaction is not committed and cannot be: restoring from confirmed checkpoint 1",
        ),
    },
];

struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// How the job reaches the cluster: `--brokers` and security options, their
/// environment, and a secret that must never reach a file or a log.
struct Job {
    args: Vec<String>,
    env: Vec<(String, String)>,
    secret: Option<String>,
    /// `--checkpoint-every-records N` or `--checkpoint-interval-ms MS`.
    trigger: [String; 2],
}

impl Job {
    fn plaintext(brokers: &str) -> Job {
        Job {
            args: vec!["--brokers".into(), brokers.into()],
            env: Vec::new(),
            secret: None,
            trigger: ["--checkpoint-every-records".into(), CHECKPOINT_EVERY.to_string()],
        }
    }
}

/// Files under `dir` (recursively) that contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes())) {
                found.push(path);
            }
        }
    }
    found
}

fn run_copy(job: &Job, from: &str, to: &str, state: &Path, txn_id: &str, fault: Option<&str>, log: &Path) -> Run {
    let out_path = log.with_extension("out");
    let err_path = log.with_extension("err");
    let mut cmd = Command::new(BIN);
    cmd.arg("copy")
        .args(["--backend", common::connector::backend()])
        .args(&job.args)
        .envs(job.env.iter().map(|(k, v)| (k, v)))
        .args(["--from", from, "--to", to])
        .arg("--state-dir")
        .arg(state)
        .args(["--transactional-id", txn_id])
        .args(&job.trigger)
        .args(["--until-idle-ms", "5000", "--expected", &RECORDS.to_string()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    cmd.env_remove("CLINK_KAFKA_FAULT");
    if let Some(f) = fault {
        cmd.env("CLINK_KAFKA_FAULT", f);
    }
    let mut child = cmd.spawn().expect("spawning clink-kafka copy");
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "clink-kafka copy (fault {fault:?}) ran longer than {RUN_TIMEOUT:?}; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        status,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
    }
}

/// `copy-done records=N checkpoints=C ...` → (records, checkpoints).
fn done_line(stdout: &str) -> Option<(u64, u64)> {
    let line = stdout.lines().find(|l| l.starts_with("copy-done "))?;
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    Some((field("records=")?, field("last-checkpoint=")?))
}

async fn fill_input(cluster: &Cluster, topic: &str) -> Vec<String> {
    common::create_topic(cluster, NewTopic::new(topic, PARTITIONS, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    let mut futures = Vec::new();
    let mut values = Vec::new();
    for i in 0..RECORDS {
        let p = (i % PARTITIONS as u64) as i32;
        let value = format!("{p}-{i}");
        values.push(value.clone());
        futures.push(
            producer
                .send(
                    ProducerRecord::new(topic, value)
                        .with_key(format!("k{i}"))
                        .with_partition(p),
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

/// Every value of `expected` exactly once in `got`: a short description of
/// what differs, or `None`.
fn multiset_difference(expected: &[String], got: &[String]) -> Option<String> {
    let mut counts: BTreeMap<&str, i64> = expected.iter().map(|v| (v.as_str(), 1)).collect();
    let mut foreign = 0;
    for v in got {
        match counts.get_mut(v.as_str()) {
            Some(c) => *c -= 1,
            None => foreign += 1,
        }
    }
    let missing: Vec<&str> = counts.iter().filter(|(_, c)| **c > 0).map(|(v, _)| *v).collect();
    let duplicated: Vec<&str> = counts.iter().filter(|(_, c)| **c < 0).map(|(v, _)| *v).collect();
    if missing.is_empty() && duplicated.is_empty() && foreign == 0 {
        return None;
    }
    Some(format!(
        "{} records read, {} missing (first {:?}), {} duplicated (first {:?}), {foreign} foreign",
        got.len(),
        missing.len(),
        &missing[..missing.len().min(5)],
        duplicated.len(),
        &duplicated[..duplicated.len().min(5)],
    ))
}

/// Runs one scenario; `Err` describes what went wrong.
async fn scenario(
    job: &Job,
    cluster: &Cluster,
    input: &str,
    expected: &[String],
    scenario: &Scenario,
    tag: &str,
) -> Result<String, String> {
    let out = common::unique_topic(&format!("eo-{tag}-{}", scenario.name));
    common::create_topic(cluster, NewTopic::new(&out, PARTITIONS, 1)).await;
    let work = std::env::temp_dir().join(format!("{out}-work"));
    let state: PathBuf = work.join("state");
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{out}-txn");
    let mut step = 0;
    let log = |step: &mut u32| {
        *step += 1;
        work.join(format!("run-{step}"))
    };
    for fault in scenario.faults {
        let run = run_copy(job, input, &out, &state, &txn_id, Some(fault), &log(&mut step));
        if run.status.signal() != Some(9) {
            return Err(format!(
                "fault {fault}: expected death by SIGKILL, got {:?}; stderr:\n{}",
                run.status, run.stderr
            ));
        }
        let point = fault.split(':').next().unwrap();
        if !run.stderr.contains(&format!("copy: fault {point}:")) {
            return Err(format!(
                "fault {fault}: killed, but not by the fault point; stderr:\n{}",
                run.stderr
            ));
        }
    }
    if scenario.fence {
        fence(cluster, &txn_id).await;
    }
    if scenario.unreachable {
        let nowhere = Job {
            args: ["--brokers", "127.0.0.1:1", "--resolve-unreachable-after-ms", "2000"]
                .map(str::to_owned)
                .to_vec(),
            env: Vec::new(),
            secret: None,
            trigger: job.trigger.clone(),
        };
        let run = run_copy(&nowhere, input, &out, &state, &txn_id, None, &log(&mut step));
        if run.status.code() != Some(1) || !run.stderr.contains("completed but unconfirmed checkpoint 2") {
            return Err(format!(
                "a restore with the broker unreachable: expected exit 1 naming checkpoint 2, got {:?}; stderr:\n{}",
                run.status, run.stderr
            ));
        }
    }
    let mut restarts = 0;
    let mut first_restart_stderr = None;
    let (records, checkpoints) = loop {
        let run = run_copy(job, input, &out, &state, &txn_id, None, &log(&mut step));
        if !scenario.faults.is_empty() {
            restarts += 1;
        }
        if first_restart_stderr.is_none() {
            first_restart_stderr = Some(run.stderr.clone());
        }
        if run.status.success() {
            break done_line(&run.stdout).ok_or_else(|| format!("no copy-done line in:\n{}", run.stdout))?;
        }
        if restarts >= MAX_RESTARTS || scenario.faults.is_empty() {
            return Err(format!(
                "no exit 0 after {restarts} restarts; last {:?}, stderr:\n{}",
                run.status, run.stderr
            ));
        }
    };
    let got = common::read_committed_values(cluster, &out, PARTITIONS, RECORDS as usize).await;
    if let Some(diff) = multiset_difference(expected, &got) {
        return Err(format!("output of {out}: {diff}"));
    }
    if records != RECORDS {
        return Err(format!("the job reported {records} records copied, not {RECORDS}"));
    }
    if let Some(want) = scenario.restored {
        let stderr = first_restart_stderr.unwrap_or_default();
        if !stderr.contains(want) {
            return Err(format!("the first restart did not say {want:?}; stderr:\n{stderr}"));
        }
    }
    let mut left: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    left.sort();
    let want = [
        format!("COMPLETED-{checkpoints}"),
        format!("CONFIRMED-{checkpoints}"),
        format!("chk-{checkpoints}.state"),
        "receipts".to_owned(),
    ];
    if left != want {
        return Err(format!(
            "the state dir holds {left:?} after the run, not {want:?} (pruning)"
        ));
    }
    let receipts: Vec<String> = std::fs::read_dir(state.join("receipts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("sub0-") && !n.ends_with(".unresolved"))
        .collect();
    if receipts != [format!("sub0-{checkpoints}")] {
        return Err(format!("receipts left: {receipts:?}, not only the last checkpoint's"));
    }
    if let Some(secret) = &job.secret {
        let leaked = files_containing(&work, secret);
        if !leaked.is_empty() {
            return Err(format!("the secret reached {leaked:?}"));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(format!(
        "{tag} {:<22} kills={} restarts={restarts} checkpoints={checkpoints} records={records} exactly once",
        scenario.name,
        scenario.faults.len()
    ))
}

async fn every_fault_point(job: &Job, config: ClientConfig, tag: &str, only: Option<&[&str]>) {
    let cluster = common::cluster(config).await;
    let input = common::unique_topic(&format!("eo-{tag}-in"));
    let expected = fill_input(&cluster, &input).await;
    let mut failures = Vec::new();
    for s in SCENARIOS.iter().filter(|s| only.is_none_or(|o| o.contains(&s.name))) {
        match scenario(job, &cluster, &input, &expected, s, tag).await {
            Ok(line) => eprintln!("{line}"),
            Err(e) => {
                eprintln!("{tag} {}: FAILED: {e}", s.name);
                failures.push(format!("{}: {e}", s.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} scenario(s) failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_is_exactly_once_across_sigkill_at_every_fault_point_tv2() {
    let Some(brokers) = common::brokers() else { return };
    every_fault_point(&Job::plaintext(&brokers), common::config(&brokers), "tv2", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_is_exactly_once_across_sigkill_at_every_fault_point_tv1() {
    let Some(brokers) = common::tv1_brokers() else { return };
    every_fault_point(&Job::plaintext(&brokers), common::config(&brokers), "tv1", None).await;
}

/// Over SCRAM-SHA-512 (PLAIN on the rdkafka backend, whose librdkafka has
/// no SCRAM): the source, the sink and the restore-time resolver all
/// authenticate; the password reaches no state file, receipt or log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_over_sasl_resolves_and_never_writes_the_password() {
    let Some(sasl) = common::sasl() else { return };
    let job = Job {
        args: [
            "--brokers",
            &sasl.brokers,
            "--sasl-mechanism",
            common::connector::sasl_mechanism(),
            "--sasl-username",
            &sasl.username,
            "--sasl-password-env",
            "CLINK_COPY_TEST_SASL_PASSWORD",
        ]
        .map(str::to_owned)
        .to_vec(),
        env: vec![("CLINK_COPY_TEST_SASL_PASSWORD".into(), sasl.password.clone())],
        secret: Some(sasl.password.clone()),
        trigger: ["--checkpoint-every-records".into(), CHECKPOINT_EVERY.to_string()],
    };
    let mut config = sasl.config(SaslMechanism::ScramSha512, &sasl.password);
    config.request_timeout = Duration::from_secs(15);
    every_fault_point(
        &job,
        config,
        "sasl",
        Some(&["after-completed", "after-end-txn", "after-commit"]),
    )
    .await;
}

/// Over mTLS with an encrypted client key: the TLS options reach the
/// source, the sink and the resolver; the key's password reaches no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_over_mtls_resolves_and_never_writes_the_key_password() {
    let Some(tls) = common::tls() else { return };
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let job = Job {
        args: vec![
            "--brokers".into(),
            tls.mtls_brokers.clone(),
            "--tls-ca".into(),
            path(&tls.ca),
            "--tls-cert".into(),
            path(&tls.cert),
            "--tls-key".into(),
            path(&tls.key_encrypted),
            "--tls-key-password-env".into(),
            "CLINK_COPY_TEST_KEY_PASSWORD".into(),
        ],
        env: vec![("CLINK_COPY_TEST_KEY_PASSWORD".into(), tls.key_password.clone())],
        secret: Some(tls.key_password.clone()),
        trigger: ["--checkpoint-every-records".into(), CHECKPOINT_EVERY.to_string()],
    };
    if common::connector::on_rdkafka() {
        // A named difference: this build's librdkafka has no TLS. The job
        // is refused before it touches a topic.
        let dir = std::env::temp_dir().join(common::unique_topic("eo-mtls-rdkafka"));
        let log = dir.with_extension("log");
        let run = run_copy(
            &job,
            "eo-never-read",
            "eo-never-written",
            &dir,
            "eo-mtls-rdkafka",
            None,
            &log,
        );
        assert_eq!(run.status.code(), Some(1), "{}", run.stderr);
        assert!(
            run.stderr.contains("security_protocol") && run.stderr.contains("backend 'rdkafka'"),
            "{}",
            run.stderr
        );
        assert!(!run.stderr.contains(&tls.key_password), "{}", run.stderr);
        return;
    }
    let config = common::config(&tls.mtls_brokers).with_tls(tls.mutual());
    every_fault_point(&job, config, "mtls", Some(&["after-completed", "after-end-txn"])).await;
}

/// Checkpoints by time instead of by count: every millisecond, so about
/// one per batch (how many depends on the machine, so only the scenarios
/// whose fault does not name a checkpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_with_a_checkpoint_interval_is_exactly_once() {
    let Some(brokers) = common::brokers() else { return };
    let mut job = Job::plaintext(&brokers);
    job.trigger = ["--checkpoint-interval-ms".into(), "1".into()];
    every_fault_point(
        &job,
        common::config(&brokers),
        "interval",
        Some(&["baseline", "mid-batch"]),
    )
    .await;
}

#[test]
fn an_unknown_fault_point_is_refused_naming_the_allowed_ones() {
    let out = Command::new(BIN)
        .args(["copy", "--brokers", "127.0.0.1:1", "--from", "a", "--to", "b"])
        .args(["--state-dir", "/nonexistent-clink-copy-test", "--transactional-id", "t"])
        .env("CLINK_KAFKA_FAULT", "after-lunch")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("after-lunch") && err.contains("after-completed") && err.contains("mid-batch"),
        "{err}"
    );
}
