//! The admin commands and auto-create through the built binary, against the
//! real broker: `topics list|describe|create|delete` and `metadata` (text
//! and `--format json`, cross-checked with kcat -L), the refusals in the
//! user's words, and `produce` letting an auto-create broker (the tv1 one,
//! `CLINK_KAFKA_AUTO_CREATE_BROKERS`) create a new topic — but not with
//! `--no-auto-create`, and never `consume`.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(90);

fn clink(brokers: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
    cmd.args(args)
        .env("CLINK_KAFKA_BROKERS", brokers)
        .env_remove("RUST_LOG");
    cmd
}

/// Runs and requires success; stdout as text.
fn ok(brokers: &str, args: &[&str]) -> String {
    let out = common::process::run(&mut clink(brokers, args), "", DEADLINE);
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs and requires failure with exit code `code`; stderr as text.
fn fails(brokers: &str, args: &[&str], stdin: &str, code: i32) -> String {
    let out: Output = common::process::run_to_exit(&mut clink(brokers, args), stdin, DEADLINE);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: want exit {code}\nstdout:\n{}\nstderr:\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn topic<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["topics"]
        .as_array()
        .expect("topics array")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in {doc}"))
}

#[test]
fn topics_create_list_describe_delete_and_their_refusals() {
    let Some(b) = common::brokers() else { return };
    let t = common::unique_topic("cli-topics");
    let created = common::process::run(
        &mut clink(
            &b,
            &["topics", "create", &t, "--partitions", "3", "--replication-factor", "1"],
        ),
        "",
        DEADLINE,
    );
    assert!(
        String::from_utf8_lossy(&created.stderr).contains(&format!("created topic {t}")),
        "{created:?}"
    );

    assert!(ok(&b, &["topics", "list"]).lines().any(|l| l == t));
    let listed = json(&ok(&b, &["topics", "list", "--format", "json"]));
    let row = listed
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["name"] == t.as_str())
        .expect("listed");
    assert_eq!(
        (row["partitions"].as_u64(), row["internal"].as_bool()),
        (Some(3), Some(false))
    );
    assert!(
        !ok(&b, &["topics", "list"]).lines().any(|l| l == "__consumer_offsets"),
        "internal topics only with --internal"
    );
    let described = json(&ok(&b, &["topics", "describe", &t, "--format", "json"]));
    let partitions = topic(&described, &t)["partitions"]
        .as_array()
        .expect("partitions")
        .clone();
    assert_eq!(partitions.len(), 3);
    for (i, p) in partitions.iter().enumerate() {
        assert_eq!(p["partition"], i as u64);
        let leader = p["leader"].as_i64().expect("leader");
        assert!(leader >= 0, "{p}");
        assert_eq!(p["replicas"], serde_json::json!([leader]), "{p}");
        assert_eq!(p["isr"], serde_json::json!([leader]), "{p}");
        assert!(p["error"].is_null(), "{p}");
    }
    let text = ok(&b, &["topics", "describe", &t]);
    assert!(text.contains(&format!("topic \"{t}\" with 3 partitions:")), "{text}");
    assert!(text.contains("partition 2, leader "), "{text}");

    let e = fails(&b, &["topics", "create", &t, "--partitions", "1"], "", 1);
    assert!(e.contains(&format!("creating topic {t:?}: it already exists")), "{e}");
    assert!(e.contains("TOPIC_ALREADY_EXISTS"), "{e}");

    common::process::run(&mut clink(&b, &["topics", "delete", &t]), "", DEADLINE);
    let e = fails(&b, &["topics", "describe", &t], "", 1);
    assert!(e.contains(&format!("topic {t:?}: it does not exist")), "{e}");
    let e = fails(&b, &["topics", "delete", &t], "", 1);
    assert!(e.contains(&format!("deleting topic {t:?}: it does not exist")), "{e}");
}

#[test]
fn invalid_partitions_and_replication_factors_are_named() {
    let Some(b) = common::brokers() else { return };
    let t = common::unique_topic("cli-invalid");
    // Refused before any request, naming the flag (usage error: exit 2).
    let e = fails(&b, &["topics", "create", &t, "--partitions", "0"], "", 2);
    assert!(e.contains("--partitions"), "{e}");
    // Refused by the single broker: three replicas cannot be placed.
    let e = fails(&b, &["topics", "create", &t, "--replication-factor", "3"], "", 1);
    assert!(
        e.contains(&format!(
            "creating topic {t:?}: it cannot have that replication factor (--replication-factor)"
        )),
        "{e}"
    );
    assert!(e.contains("INVALID_REPLICATION_FACTOR"), "{e}");
    let e = fails(
        &b,
        &["topics", "create", &t, "--config", "cleanup.policy=sideways"],
        "",
        1,
    );
    assert!(e.contains("(--config)") && e.contains("INVALID_CONFIG"), "{e}");
    let e = fails(&b, &["topics", "describe", &t], "", 1);
    assert!(e.contains("does not exist"), "nothing was created: {e}");
}

/// A fresh broker has no `__consumer_offsets` until a group needs one:
/// finding a group coordinator makes the broker create it.
fn ensure_consumer_offsets(brokers: &str) {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let cluster = common::cluster(common::config(brokers)).await;
        let group = clink_kafka::client::GroupOffsets::new(cluster, "clink-test-cli-metadata").expect("a group id");
        // COORDINATOR_NOT_AVAILABLE while the broker creates the topic:
        // `coordinator` retries it until `metadata_max_wait`.
        if let Err(e) = group.coordinator().await {
            panic!("no group coordinator (the broker creates __consumer_offsets for it): {e}");
        }
    });
}

#[test]
fn metadata_shows_brokers_controller_and_partitions_as_kcat_does() {
    let Some(b) = common::brokers() else { return };
    let t = common::unique_topic("cli-metadata");
    ok(
        &b,
        &[
            "topics",
            "create",
            &t,
            "--partitions",
            "2",
            "--config",
            "cleanup.policy=compact",
        ],
    );

    ensure_consumer_offsets(&b);
    let md = json(&ok(&b, &["metadata", "--format", "json"]));
    let brokers = md["brokers"].as_array().expect("brokers");
    let port: u64 = b.rsplit(':').next().unwrap().parse().unwrap();
    assert!(brokers.iter().any(|x| x["port"] == port), "{md}");
    assert!(
        brokers.iter().any(|x| x["id"] == md["controller_id"]),
        "the controller is a listed broker: {md}"
    );
    assert!(md["cluster_id"].as_str().is_some_and(|c| !c.is_empty()), "{md}");
    assert_eq!(topic(&md, &t)["partitions"].as_array().unwrap().len(), 2);
    assert_eq!(
        topic(&md, "__consumer_offsets")["internal"],
        true,
        "every topic, internal ones too"
    );

    let only = json(&ok(&b, &["metadata", "--topic", &t, "--format", "json"]));
    assert_eq!(only["topics"].as_array().unwrap().len(), 1, "{only}");
    let text = ok(&b, &["metadata", "--topic", &t]);
    assert!(text.contains(&format!("topic \"{t}\" with 2 partitions:")), "{text}");
    assert!(
        text.contains(&format!("at {b}")) && text.contains("(controller)"),
        "{text}"
    );

    // The same leaders and replicas as librdkafka's view (kcat -L -J).
    let Some(kcat) = common::process::kcat() else { return };
    let out = common::process::run(Command::new(kcat).args(["-b", &b, "-L", "-J", "-t", &t]), "", DEADLINE);
    let theirs = json(&String::from_utf8_lossy(&out.stdout));
    let their_topic = theirs["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["topic"] == t.as_str())
        .expect("kcat sees the topic");
    for (ours, theirs) in topic(&only, &t)["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .zip(their_topic["partitions"].as_array().unwrap())
    {
        assert_eq!(ours["partition"], theirs["partition"]);
        assert_eq!(ours["leader"], theirs["leader"]);
        let ids = |v: &Value| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(ours["replicas"].as_array().unwrap(), &ids(&theirs["replicas"]));
        assert_eq!(ours["isr"].as_array().unwrap(), &ids(&theirs["isrs"]));
    }
    ok(&b, &["topics", "delete", &t]);
}

#[test]
fn produce_lets_an_auto_create_broker_create_the_topic() {
    let Some(b) = common::auto_create_brokers() else { return };
    let t = common::unique_topic("cli-auto-create");
    common::process::run(&mut clink(&b, &["produce", "--topic", &t]), "a\nb\nc\n", DEADLINE);
    let consumed = ok(
        &b,
        &[
            "consume",
            "--topic",
            &t,
            "--from-beginning",
            "--count",
            "3",
            "--idle-timeout-ms",
            "20000",
        ],
    );
    assert_eq!(consumed, "a\nb\nc\n");
    let described = json(&ok(&b, &["topics", "describe", &t, "--format", "json"]));
    assert_eq!(topic(&described, &t)["partitions"].as_array().unwrap().len(), 1);
}

#[test]
fn no_auto_create_and_the_consumer_leave_a_missing_topic_missing() {
    let Some(b) = common::auto_create_brokers() else { return };
    let (produced, consumed) = (
        common::unique_topic("cli-no-create"),
        common::unique_topic("cli-consume-missing"),
    );
    let (e_produce, e_consume) = std::thread::scope(|s| {
        let p = s.spawn(|| fails(&b, &["produce", "--topic", &produced, "--no-auto-create"], "x\n", 1));
        let c = s.spawn(|| fails(&b, &["consume", "--topic", &consumed, "--from-beginning"], "", 1));
        (p.join().unwrap(), c.join().unwrap())
    });
    assert!(
        e_produce.contains(&format!(
            "topic {produced:?} does not exist and --no-auto-create is set"
        )),
        "{e_produce}"
    );
    assert!(
        e_consume.contains(&format!("topic {consumed:?} does not exist")),
        "{e_consume}"
    );
    for t in [&produced, &consumed] {
        let e = fails(&b, &["topics", "describe", t], "", 1);
        assert!(e.contains("does not exist"), "{t} must not have been created: {e}");
    }
}

#[test]
fn produce_to_a_missing_topic_on_a_broker_that_does_not_create_says_why() {
    let Some(b) = common::brokers() else { return };
    let t = common::unique_topic("cli-not-created");
    let e = fails(&b, &["produce", "--topic", &t], "x\n", 1);
    assert!(
        e.contains(&format!("topic {t:?} does not exist and the broker did not create it")),
        "{e}"
    );
}
