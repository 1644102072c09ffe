//! Fault injection is a build-time choice (cargo feature `failpoints`,
//! issue 16 point 5): the `clink-kafka copy` binary built without it
//! carries neither the `CLINK_KAFKA_FAULT` reader nor the fault points, and
//! a copy run with the variable set ignores it; built with it (the crash
//! tests' build, `tests/exactly_once.rs`), the same run SIGKILLs itself.
//! This binary runs in both builds (`scripts/test` runs the workspace
//! without the feature, then the crash tests with it) and asserts the
//! behaviour of the build it is in.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::{NewTopic, Producer, ProducerConfig, ProducerRecord};

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const FAILPOINTS: bool = cfg!(feature = "failpoints");
const RECORDS: usize = 200;

/// Whether the file holds `needle` (grep: a byte-by-byte scan of the
/// 200+ MB debug binary in an unoptimised test takes most of a minute).
fn contains(file: &str, needle: &str) -> bool {
    let status = Command::new("grep")
        .args(["-q", "-a", "-F", needle, file])
        .status()
        .expect("running grep");
    match status.code() {
        Some(0) => true,
        Some(1) => false,
        other => panic!("grep {needle:?} {file}: exit {other:?}"),
    }
}

#[test]
fn the_binary_carries_fault_injection_only_with_the_feature() {
    // The variable's name and a point's name are string constants of
    // src/cli/fault.rs only (the help text naming them is gated too).
    for needle in ["CLINK_KAFKA_FAULT", "after-recovery-open"] {
        assert_eq!(
            contains(BIN, needle),
            FAILPOINTS,
            "{needle:?} in {BIN} (built with failpoints: {FAILPOINTS})"
        );
    }
    let help = Command::new(BIN).args(["copy", "--help"]).output().unwrap();
    assert!(help.status.success());
    assert_eq!(
        String::from_utf8_lossy(&help.stdout).contains("Fault injection"),
        FAILPOINTS
    );
}

#[tokio::test]
async fn a_copy_with_a_fault_armed_dies_only_with_the_feature() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let from = common::unique_topic("fp-in");
    let to = common::unique_topic("fp-out");
    common::create_topic(&cluster, NewTopic::new(&from, 1, 1)).await;
    common::create_topic(&cluster, NewTopic::new(&to, 1, 1)).await;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    for i in 0..RECORDS {
        drop(
            producer
                .send(ProducerRecord::new(from.as_str(), format!("v{i}")))
                .await
                .unwrap(),
        );
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();

    let state = std::env::temp_dir().join(format!("clink-fp-{}", common::unique_topic("state")));
    let mut child = Command::new(BIN)
        .args(["copy", "--brokers", &brokers, "--from", &from, "--to", &to])
        .arg("--state-dir")
        .arg(&state)
        .args(["--transactional-id", &common::unique_topic("fp-txn")])
        .args(["--until-idle-ms", "2000", "--expected", &RECORDS.to_string()])
        .env("CLINK_KAFKA_FAULT", "mid-batch")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("clink-kafka copy ran longer than 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::io::read_to_string(child.stderr.take().unwrap()).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&state);
    if FAILPOINTS {
        assert_eq!(
            status.signal(),
            Some(9),
            "expected a self-SIGKILL: {status:?}\n{stderr}"
        );
        assert!(stderr.contains("fault armed"), "{stderr}");
    } else {
        assert!(status.success(), "the fault must be ignored: {status:?}\n{stderr}");
        assert!(!stderr.contains("fault"), "{stderr}");
        let values = common::read_committed_values(&cluster, &to, 1, RECORDS).await;
        assert_eq!(values.len(), RECORDS);
    }
}
