//! `clink-kafka groups` against the real broker, with Kafka's own
//! `kafka-consumer-groups.sh` (ConsumerGroupCommand) as the oracle:
//! `describe`'s committed offsets, log end offsets and lag equal the Java
//! tool's for a classic group and a KIP-848 consumer group (both made by
//! Kafka's console consumer), `list` shows both with their types, every
//! `reset-offsets` mode plans what the Java tool's `--dry-run` plans and
//! `--execute` commits it, and `delete` (and `reset-offsets`) refuse a live
//! group, whose members and assignments `describe` shows, then delete it
//! once it is empty.
//!
//! The Java tools come from `scripts/kafka-local install-tools`; under
//! `CI=true` their absence fails the test.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use clink_kafka::client::{NewTopic, Producer, ProducerConfig, ProducerRecord};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);
/// 2024-01-01T00:00:00Z: record i of a partition is stamped this plus i minutes.
const BASE_TS: i64 = 1_704_067_200_000;

fn clink(brokers: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
    cmd.args(args)
        .env("CLINK_KAFKA_BROKERS", brokers)
        .env_remove("RUST_LOG");
    cmd
}

fn ok(brokers: &str, args: &[&str]) -> String {
    let out = common::process::run(&mut clink(brokers, args), "", DEADLINE);
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

fn fails(brokers: &str, args: &[&str]) -> String {
    fails_with(brokers, args, 1)
}

/// Runs and requires exit `code` (1: an error; 2: clap's usage error); stderr.
fn fails_with(brokers: &str, args: &[&str], code: i32) -> String {
    let out: Output = common::process::run_to_exit(&mut clink(brokers, args), "", DEADLINE);
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

/// Kafka's ConsumerGroupCommand with `args`; its stdout.
fn java_groups(tools: &Path, brokers: &str, args: &[&str]) -> String {
    let out = common::process::run(
        Command::new(tools)
            .args(["groups", "--bootstrap-server", brokers])
            .args(args),
        "",
        DEADLINE,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kafka's console consumer in `group`, reading `topic` from the beginning
/// until `max` records (then it commits and leaves).
fn java_consume(tools: &Path, brokers: &str, group: &str, topic: &str, max: usize, protocol: &str) {
    common::process::run(
        Command::new(tools).args([
            "console-consumer",
            "--bootstrap-server",
            brokers,
            "--group",
            group,
            "--topic",
            topic,
            "--from-beginning",
            "--max-messages",
            &max.to_string(),
            "--timeout-ms",
            "60000",
            "--consumer-property",
            &format!("group.protocol={protocol}"),
        ]),
        "",
        DEADLINE,
    );
}

/// (committed, log end, lag) per partition; `None` for the tool's "-".
type Lag = BTreeMap<(String, i32), (Option<i64>, Option<i64>, Option<i64>)>;

/// The rows of the Java tool's `--describe --group`.
fn parse_java_describe(group: &str, text: &str) -> Lag {
    let num = |s: &str| s.parse::<i64>().ok();
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() >= 6 && c[0] == group && c[2].parse::<i32>().is_ok())
        .map(|c| {
            (
                (c[1].to_owned(), c[2].parse().unwrap()),
                (num(c[3]), num(c[4]), num(c[5])),
            )
        })
        .collect()
}

fn our_lag(doc: &Value) -> Lag {
    doc["offsets"]
        .as_array()
        .expect("offsets array")
        .iter()
        .map(|r| {
            (
                (
                    r["topic"].as_str().unwrap().to_owned(),
                    r["partition"].as_i64().unwrap() as i32,
                ),
                (r["committed"].as_i64(), r["log_end"].as_i64(), r["lag"].as_i64()),
            )
        })
        .collect()
}

/// The Java tool's `--reset-offsets --dry-run` plan: new offset per partition.
fn parse_java_plan(group: &str, text: &str) -> BTreeMap<(String, i32), i64> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() == 4 && c[0] == group && c[2].parse::<i32>().is_ok())
        .map(|c| ((c[1].to_owned(), c[2].parse().unwrap()), c[3].parse().unwrap()))
        .collect()
}

fn our_plan(doc: &Value) -> BTreeMap<(String, i32), i64> {
    doc["partitions"]
        .as_array()
        .expect("partitions array")
        .iter()
        .map(|r| {
            (
                (
                    r["topic"].as_str().unwrap().to_owned(),
                    r["partition"].as_i64().unwrap() as i32,
                ),
                r["new_offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// A 3-partition topic: 20 records on partition 0, 10 on 1, none on 2,
/// record i of a partition stamped BASE_TS + i minutes.
fn make_topic(brokers: &str, prefix: &str) -> String {
    let topic = common::unique_topic(prefix);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let cluster = common::cluster(common::config(brokers)).await;
        // Year-old timestamps: keep them from time-based retention.
        common::create_topic(&cluster, NewTopic::new(&topic, 3, 1).with_config("retention.ms", "-1")).await;
        let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
        for (partition, count) in [(0, 20), (1, 10)] {
            for i in 0..count {
                producer
                    .send(
                        ProducerRecord::new(&topic, format!("p{partition}-{i}"))
                            .with_partition(partition)
                            .with_timestamp(BASE_TS + i64::from(i) * 60_000),
                    )
                    .await
                    .unwrap();
            }
        }
        producer.flush(Duration::from_secs(30)).await.unwrap();
    });
    topic
}

fn tools() -> Option<PathBuf> {
    common::process::kafka_tools()
}

#[test]
fn describe_list_and_reset_offsets_agree_with_kafka_consumer_groups() {
    let Some(b) = common::brokers() else { return };
    let Some(tools) = tools() else { return };
    let topic = make_topic(&b, "cli-groups");
    let classic = format!("{topic}-classic");
    let consumer = format!("{topic}-consumer");
    java_consume(&tools, &b, &classic, &topic, 13, "classic");
    java_consume(&tools, &b, &consumer, &topic, 24, "consumer");

    // describe: offsets and lag equal the Java tool's, for both protocols.
    for (group, kind) in [(&classic, "classic"), (&consumer, "consumer")] {
        let ours = json(&ok(&b, &["groups", "describe", group, "--format", "json"]));
        assert_eq!(ours["type"], kind, "{ours}");
        assert_eq!(ours["state"], "Empty", "{ours}");
        let java = parse_java_describe(group, &java_groups(&tools, &b, &["--describe", "--group", group]));
        assert!(!java.is_empty(), "the Java tool shows no offsets for {group}");
        assert_eq!(our_lag(&ours), java, "{kind} group {group}");
        let committed: i64 = java.values().filter_map(|v| v.0).sum();
        let expected = if kind == "classic" { 13 } else { 24 };
        assert_eq!(committed, expected, "{java:?}");
        let text = ok(&b, &["groups", "describe", group]);
        assert!(text.contains(&format!("type {kind}, state Empty")), "{text}");
    }

    // list: both, with their types (and the Java tool agrees on the types).
    let listed = json(&ok(&b, &["groups", "list", "--format", "json"]));
    let type_of = |g: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["group_id"] == g)
            .unwrap_or_else(|| panic!("{g} not listed: {listed}"))["type"]
            .clone()
    };
    assert_eq!(type_of(&classic), "classic");
    assert_eq!(type_of(&consumer), "consumer");
    let only_consumer = json(&ok(&b, &["groups", "list", "--type", "consumer", "--format", "json"]));
    let ids: Vec<&str> = only_consumer
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["group_id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&consumer.as_str()) && !ids.contains(&classic.as_str()),
        "{ids:?}"
    );
    let java_list = java_groups(&tools, &b, &["--list", "--type"]);
    for (group, kind) in [(&classic, "classic"), (&consumer, "consumer")] {
        let row = java_list
            .lines()
            .find(|l| l.split_whitespace().next() == Some(group))
            .unwrap_or_else(|| panic!("{group} not in the Java list:\n{java_list}"));
        assert!(row.to_ascii_lowercase().contains(kind), "{row}");
    }
    let text = ok(&b, &["groups", "list"]);
    assert!(text
        .lines()
        .any(|l| l.split_whitespace().take(2).eq([classic.as_str(), "classic"])));

    // reset-offsets: every mode plans what the Java tool's dry run plans.
    let t0 = format!("{topic}:0,2");
    let modes: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--topic", &topic], vec!["--to-earliest"]),
        (vec!["--topic", &t0], vec!["--to-latest"]),
        (vec!["--all-topics"], vec!["--to-offset", "5"]),
        (vec!["--topic", &topic], vec!["--to-offset", "1000"]),
        (vec!["--topic", &topic], vec!["--shift-by", "-3"]),
        (vec!["--all-topics"], vec!["--shift-by", "7"]),
        (
            vec!["--topic", &topic],
            vec!["--to-datetime", "2024-01-01T00:10:00.000"],
        ),
        (
            vec!["--topic", &topic],
            vec!["--to-datetime", "2024-01-01T06:05:30.000+06:00"],
        ),
        (
            vec!["--topic", &topic],
            vec!["--to-datetime", "2024-01-01T02:00:00.000+01:00"],
        ),
    ];
    for group in [&classic, &consumer] {
        for (scope, mode) in &modes {
            let mut ours_args = vec!["groups", "reset-offsets", group.as_str()];
            ours_args.extend(scope.iter().copied());
            ours_args.extend(mode.iter().copied());
            ours_args.extend(["--format", "json"]);
            let ours = json(&ok(&b, &ours_args));
            assert_eq!(ours["executed"], false);
            let mut java_args = vec!["--group", group.as_str(), "--reset-offsets", "--dry-run"];
            java_args.extend(scope.iter().copied());
            java_args.extend(mode.iter().copied());
            let java = parse_java_plan(group, &java_groups(&tools, &b, &java_args));
            assert!(!java.is_empty(), "{java_args:?}: no Java plan");
            assert_eq!(our_plan(&ours), java, "{group} {scope:?} {mode:?}");
        }
    }
    // A dry run commits nothing.
    let before = json(&ok(&b, &["groups", "describe", &classic, "--format", "json"]));
    assert_eq!(our_lag(&before).values().filter_map(|v| v.0).sum::<i64>(), 13);

    // --execute commits the plan; the Java tool reads it back.
    for group in [&classic, &consumer] {
        let t1 = format!("{topic}:0,1");
        let done = json(&ok(
            &b,
            &[
                "groups",
                "reset-offsets",
                group,
                "--topic",
                &t1,
                "--to-offset",
                "3",
                "--execute",
                "--format",
                "json",
            ],
        ));
        assert_eq!(done["executed"], true);
        let ours = json(&ok(&b, &["groups", "describe", group, "--format", "json"]));
        let java = parse_java_describe(group, &java_groups(&tools, &b, &["--describe", "--group", group]));
        assert_eq!(our_lag(&ours), java);
        assert_eq!(java[&(topic.clone(), 0)], (Some(3), Some(20), Some(17)));
        assert_eq!(java[&(topic.clone(), 1)], (Some(3), Some(10), Some(7)));
    }

    // Refusals name the option.
    let e = fails_with(&b, &["groups", "reset-offsets", &classic, "--topic", &topic], 2);
    assert!(e.contains("--to-earliest"), "{e}");
    let e = fails(
        &b,
        &[
            "groups",
            "reset-offsets",
            &classic,
            "--topic",
            &format!("{topic}:x"),
            "--to-latest",
        ],
    );
    assert!(e.contains("--topic"), "{e}");
    let e = fails(
        &b,
        &[
            "groups",
            "reset-offsets",
            &classic,
            "--all-topics",
            "--to-datetime",
            "yesterday",
        ],
    );
    assert!(
        e.contains("to-datetime") && e.contains("YYYY-MM-DDTHH:mm:SS.sss"),
        "{e}"
    );
    let e = fails(&b, &["groups", "describe", &format!("{topic}-no-such-group")]);
    assert!(e.contains("does not exist"), "{e}");
}

/// A console consumer that stays in `group` until 15 s pass without a record.
fn live_consumer(tools: &Path, brokers: &str, group: &str, topic: &str, protocol: &str) -> std::process::Child {
    Command::new(tools)
        .args([
            "console-consumer",
            "--bootstrap-server",
            brokers,
            "--group",
            group,
            "--topic",
            topic,
            "--from-beginning",
            "--timeout-ms",
            "15000",
            "--consumer-property",
            &format!("group.protocol={protocol}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the console consumer")
}

fn wait_exit(child: &mut std::process::Child) {
    let deadline = Instant::now() + DEADLINE;
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the console consumer did not leave in time");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn delete_and_reset_refuse_a_live_group_then_delete_it() {
    let Some(b) = common::brokers() else { return };
    let Some(tools) = tools() else { return };
    let topic = make_topic(&b, "cli-groups-live");
    let groups = [
        (format!("{topic}-classic"), "classic"),
        (format!("{topic}-consumer"), "consumer"),
    ];
    let mut children: Vec<_> = groups
        .iter()
        .map(|(g, protocol)| live_consumer(&tools, &b, g, &topic, protocol))
        .collect();

    for (group, kind) in &groups {
        // Await the member's assignment (bounded): all three partitions.
        let deadline = Instant::now() + DEADLINE;
        let doc = loop {
            // Until the consumer joins, the group does not exist yet.
            let out = common::process::run_to_exit(
                &mut clink(&b, &["groups", "describe", group, "--format", "json"]),
                "",
                DEADLINE,
            );
            let doc = if out.status.success() {
                json(&String::from_utf8_lossy(&out.stdout))
            } else {
                Value::Null
            };
            let assigned = doc["members"]
                .as_array()
                .and_then(|m| m.first())
                .and_then(|m| m["assignment"].as_array())
                .map_or(0, Vec::len);
            if doc["state"] == "Stable" && assigned == 3 {
                break doc;
            }
            assert!(
                Instant::now() < deadline,
                "{group} never became Stable with 3 partitions: {doc}"
            );
            std::thread::sleep(Duration::from_millis(500));
        };
        assert_eq!(doc["type"], *kind);
        let member = &doc["members"][0];
        assert_eq!(member["subscribed_topics"], serde_json::json!([topic]), "{doc}");
        assert!(member["protocol_error"].is_null(), "{doc}");
        assert!(member["client_id"].as_str().is_some_and(|c| !c.is_empty()), "{doc}");
        if *kind == "consumer" {
            assert!(member["member_epoch"].as_i64().is_some_and(|e| e > 0), "{doc}");
            assert_eq!(doc["assignor"], "uniform", "{doc}");
        } else {
            assert_eq!(doc["assignor"], "range", "{doc}");
        }
        // Every offset row of an owned partition names its owner.
        for row in doc["offsets"].as_array().unwrap() {
            assert_eq!(row["member_id"], member["member_id"], "{doc}");
        }

        let e = fails(&b, &["groups", "delete", group]);
        assert!(e.contains("Stable") && e.contains("stop its consumers"), "{e}");
        let e = fails(&b, &["groups", "reset-offsets", group, "--all-topics", "--to-earliest"]);
        assert!(e.contains("Stable") && e.contains("resetting its offsets"), "{e}");
    }

    for child in &mut children {
        wait_exit(child);
    }
    for (group, _) in &groups {
        let deleted = json(&ok(&b, &["groups", "delete", group, "--format", "json"]));
        assert_eq!(deleted, serde_json::json!({"group_id": group, "deleted": true}));
        let e = fails(&b, &["groups", "describe", group]);
        assert!(e.contains("does not exist"), "{e}");
        let listed = ok(&b, &["groups", "list"]);
        assert!(!listed
            .lines()
            .any(|l| l.split_whitespace().next() == Some(group.as_str())));
        let e = fails(&b, &["groups", "delete", group]);
        assert!(e.contains("does not exist"), "{e}");
    }
}
