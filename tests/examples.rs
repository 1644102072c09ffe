//! The programs in `examples/` run against the real broker and print what
//! they should: produce then consume, the transactional read-process-write
//! loop, the 2PC sink driven by hand, and resolving an in-doubt
//! transaction. Each example keeps its work in a `run` function that writes
//! to a `Write`; this binary includes the example files as modules and calls
//! those (their `main` only parses arguments), so the test needs no second
//! cargo build.

mod common;

#[path = "../examples/consume.rs"]
mod consume;
#[path = "../examples/produce.rs"]
mod produce;
#[path = "../examples/resolve.rs"]
mod resolve;
#[path = "../examples/transactional.rs"]
mod transactional;
#[path = "../examples/twopc_sink.rs"]
mod twopc_sink;

use clink_kafka::client::{GroupOffsets, NewTopic, TopicPartition};

fn lines(out: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(out).lines().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_then_consume_print_every_record() {
    let Some(brokers) = common::brokers() else { return };
    let topic = common::unique_topic("ex-pc");
    let mut out = Vec::new();
    produce::run(&brokers, &topic, 5, &mut out).await.unwrap();
    let want: Vec<String> = (0..5).map(|i| format!("delivered {topic}[0]@{i}")).collect();
    assert_eq!(lines(&out), want);

    let mut out = Vec::new();
    let read = consume::run(&brokers, &topic, 5, &mut out).await.unwrap();
    assert_eq!(read, 5);
    let want: Vec<String> = (0..5).map(|i| format!("{topic}[0]@{i} key-{i} value-{i}")).collect();
    assert_eq!(lines(&out), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transactional_loop_copies_upper_cased_and_commits_the_offsets() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let input = common::unique_topic("ex-txn-in");
    let output = common::unique_topic("ex-txn-out");
    let group = common::unique_topic("ex-txn-group");
    common::create_topic(&cluster, NewTopic::new(&output, 1, 1)).await;
    produce::run(&brokers, &input, 6, &mut Vec::new()).await.unwrap();

    let mut out = Vec::new();
    let total = transactional::run(&brokers, &input, &output, &group, 6, &mut out)
        .await
        .unwrap();
    assert_eq!(total, 6);
    let committed: usize = lines(&out)
        .iter()
        .map(|l| {
            l.strip_prefix("committed ")
                .and_then(|r| r.strip_suffix(" records"))
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("unexpected line {l:?}"))
        })
        .sum();
    assert_eq!(committed, 6);
    let mut got = common::read_committed_values(&cluster, &output, 1, 6).await;
    got.sort();
    let want: Vec<String> = (0..6).map(|i| format!("VALUE-{i}")).collect();
    assert_eq!(got, want);
    let offsets = GroupOffsets::new(cluster.clone(), &group)
        .unwrap()
        .fetch(&[TopicPartition::new(&input, 0)], true)
        .await
        .unwrap();
    let next = offsets.values().next().cloned().flatten().map(|c| c.offset);
    assert_eq!(next, Some(6), "the group's offset committed with the transaction");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_2pc_sink_by_hand_commits_the_restored_checkpoint() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("ex-2pc");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let receipts = std::env::temp_dir().join(common::unique_topic("ex-2pc-receipts"));
    std::fs::create_dir_all(&receipts).unwrap();
    let mut out = Vec::new();
    twopc_sink::run(&brokers, &topic, &format!("{topic}-txn"), &receipts, &mut out)
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&receipts);
    assert_eq!(
        lines(&out),
        [
            "checkpoint 1 prepared: 1 state rows",
            "checkpoint 1 committed",
            "checkpoint 2 prepared: 1 state rows",
            "checkpoint 2 restored: Committed { by_receipt: false } (1 records)",
        ]
    );
    let mut got = common::read_committed_values(&cluster, &topic, 1, 3).await;
    got.sort();
    assert_eq!(got, ["one", "three", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolving_an_orphan_commits_it() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("ex-resolve");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let handle = resolve::orphan(&brokers, &topic, &format!("{topic}-txn"), 3)
        .await
        .unwrap();
    let mut out = Vec::new();
    assert!(resolve::run(&brokers, &handle, &mut out).await.unwrap());
    let text = lines(&out);
    assert_eq!(text[0], format!("handle: {handle}"));
    assert!(text[1].starts_with("verdict: committed"), "{text:?}");
    let got = common::read_committed_values(&cluster, &topic, 1, 3).await;
    assert_eq!(got.len(), 3);
}
