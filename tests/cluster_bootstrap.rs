//! A `copy` that restarts while the whole cluster is unreachable stays up
//! and restores once the brokers answer again (issue 24, point 4: the
//! connector's open and the restore walk retry the bootstrap list until
//! `bootstrap_timeout`, 60 s by default, instead of one pass then exit).
//!
//! On the three-broker cluster, through one proxy per broker
//! (tests/common/proxy.rs, which rewrites Metadata addresses to itself):
//! a first copy runs to a checkpoint; then every proxy closes each new
//! connection at once, as a killed broker's port refuses it (the failure
//! the issue saw: "no bootstrap broker reachable … Connection refused"),
//! a second copy starts on the same state directory (it must restore), and
//! must still be running 6 s later; the brokers are let back in, the rest of
//! the input written, and the copy runs to exit 0 with every record exactly
//! once (read_committed).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::NewTopic;
use common::cluster as kc;
use common::proxy::ClusterProxy;

const BIN: &str = env!("CARGO_BIN_EXE_clink-kafka");
const RECORDS: usize = 6_000;
use common::cluster::PARTITIONS;

async fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_restoring_while_every_broker_is_cut_off_stays_up_and_finishes() {
    let Some(brokers) = kc::brokers() else { return };
    let cluster = common::cluster(kc::config(&brokers)).await;
    let input = common::unique_topic("cluster-boot-in");
    let output = common::unique_topic("cluster-boot-out");
    for t in [&input, &output] {
        common::create_topic(&cluster, NewTopic::new(t.as_str(), PARTITIONS, 3)).await;
    }
    let nodes: Vec<(i32, String)> = cluster
        .metadata()
        .brokers
        .values()
        .map(|b| (b.node_id, b.addr()))
        .collect();
    let proxies = ClusterProxy::start(&nodes).await;
    let bootstrap = proxies.bootstrap();

    let work = std::env::temp_dir().join(format!("{output}-work"));
    std::fs::create_dir_all(&work).unwrap();
    let txn_id = format!("{output}-txn");
    let spawn = |name: &str, expected: usize| -> Child {
        Command::new(BIN)
            .arg("copy")
            .args(["--brokers", &bootstrap, "--from", &input, "--to", &output])
            .arg("--state-dir")
            .arg(work.join("state"))
            .args(["--transactional-id", &txn_id])
            .args(["--checkpoint-every-records", "500"])
            .args(["--until-idle-ms", "60000", "--expected", &expected.to_string()])
            .env("RUST_LOG", "warn")
            .env_remove("CLINK_KAFKA_FAULT")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(work.join(format!("{name}.out"))).unwrap())
            .stderr(std::fs::File::create(work.join(format!("{name}.err"))).unwrap())
            .spawn()
            .expect("spawning clink-kafka copy")
    };
    let stderr = |name: &str| std::fs::read_to_string(work.join(format!("{name}.err"))).unwrap_or_default();

    let half = RECORDS / 2;
    kc::feed_input(cluster.clone(), input.clone(), 0..half).await;
    let mut first = spawn("first", half);
    let status = wait_exit(&mut first, Duration::from_secs(120)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "the first copy: {status:?}; stderr:\n{}",
        stderr("first")
    );

    for (id, _) in &nodes {
        proxies.set_refusing(*id, true);
    }
    let cut_at = Instant::now();
    let mut second = spawn("second", RECORDS);
    // Before `bootstrap_timeout`, a copy made one pass over the list and
    // exited within a second here.
    tokio::time::sleep(Duration::from_secs(6)).await;
    if let Some(s) = second.try_wait().unwrap() {
        panic!(
            "the copy exited ({s}) while the brokers were away; stderr:\n{}",
            stderr("second")
        );
    }
    for (id, _) in &nodes {
        proxies.set_refusing(*id, false);
    }
    let outage = cut_at.elapsed();
    kc::feed_input(cluster.clone(), input.clone(), half..RECORDS).await;
    let status = wait_exit(&mut second, Duration::from_secs(180)).await;
    if status.is_none() {
        second.kill().ok();
    }
    eprintln!(
        "second copy: {status:?} after a {outage:?} outage\n{}",
        std::fs::read_to_string(work.join("second.out")).unwrap_or_default()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "the copy that restored through the outage: {status:?}; stderr:\n{}",
        stderr("second")
    );

    let values = common::read_committed_values(&cluster, &output, PARTITIONS, RECORDS).await;
    let distinct: std::collections::BTreeSet<&String> = values.iter().collect();
    assert_eq!(
        (values.len(), distinct.len()),
        (RECORDS, RECORDS),
        "every record exactly once"
    );
}
