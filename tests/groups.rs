//! Consumer groups against the real broker, under both protocols
//! (`group.protocol = classic` and KIP-848's `consumer`): members split a
//! topic and hand partitions over, offsets are committed (auto, manual,
//! on revoke) and read back by Kafka's own tool, the rebalance listener
//! hears every move, pattern subscriptions pick up new topics, and a
//! static member restarts without a rebalance.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, ConsumerConfig, GroupConsumer, GroupConsumerConfig, GroupOffsets, GroupProtocol, NewTopic, Offset,
    Producer, ProducerConfig, ProducerRecord, RebalanceEvent, RebalanceListener, Subscription, TopicPartition,
    TopicPartitionOffset,
};

const PROTOCOLS: [GroupProtocol; 2] = [GroupProtocol::Classic, GroupProtocol::Consumer];

fn group_config(group: &str, protocol: GroupProtocol) -> GroupConsumerConfig {
    GroupConsumerConfig::new(group)
        .with_protocol(protocol)
        .with_session_timeout(Duration::from_secs(10))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_auto_commit_interval(Duration::from_millis(500))
        .with_consumer(ConsumerConfig::default().with_auto_offset_reset(Some(Offset::Earliest)))
}

fn unique_group(prefix: &str, protocol: GroupProtocol) -> String {
    common::unique_topic(&format!("group-{prefix}-{}", protocol.name()))
}

async fn topic_with(cluster: &Cluster, prefix: &str, partitions: i32) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, partitions, 1)).await;
    cluster
        .wait_for_topic(&topic, partitions as usize, Duration::from_secs(30))
        .await
        .expect("topic visible");
    topic
}

/// `per_partition` records in each partition, values "p{p}-{n}" from `from`.
async fn produce(cluster: &Cluster, topic: &str, partitions: i32, from: usize, per_partition: usize) {
    let producer = Producer::new(cluster.clone(), ProducerConfig::default()).await.unwrap();
    for p in 0..partitions {
        for n in from..from + per_partition {
            producer
                .send(ProducerRecord::new(topic, format!("p{p}-{n}")).with_partition(p))
                .await
                .unwrap();
        }
    }
    producer.flush(Duration::from_secs(30)).await.unwrap();
}

/// What members read: (partition, offset) -> times read.
#[derive(Default)]
struct Seen(BTreeMap<(i32, i64), usize>);

impl Seen {
    fn add(&mut self, records: &[clink_kafka::client::ConsumerRecord]) {
        for r in records {
            *self.0.entry((r.partition, r.record.offset)).or_default() += 1;
        }
    }
    fn distinct(&self) -> usize {
        self.0.len()
    }
    fn assert_exactly(&self, partitions: i32, per_partition: i64) {
        let dup: Vec<_> = self.0.iter().filter(|(_, &n)| n > 1).collect();
        assert!(dup.is_empty(), "read twice: {dup:?}");
        for p in 0..partitions {
            for o in 0..per_partition {
                assert!(self.0.contains_key(&(p, o)), "{p}/{o} skipped");
            }
        }
        assert_eq!(self.0.len() as i64, partitions as i64 * per_partition);
    }
}

/// Polls `members` in turn until `done` or `limit`.
async fn poll_until(
    members: &mut [&mut GroupConsumer],
    seen: &mut Seen,
    limit: Duration,
    what: &str,
    mut done: impl FnMut(&Seen, &[&mut GroupConsumer]) -> bool,
) {
    let deadline = Instant::now() + limit;
    loop {
        for m in members.iter_mut() {
            let records = m.poll(Duration::from_millis(200)).await.expect("poll");
            seen.add(&records);
        }
        if done(seen, members) {
            return;
        }
        let state: Vec<_> = members.iter().map(|m| m.assignment()).collect();
        assert!(
            Instant::now() < deadline,
            "{what}: not done within {limit:?}; read {} distinct, assignments {state:?}",
            seen.distinct()
        );
    }
}

fn split_between(members: &[&mut GroupConsumer], partitions: usize) -> bool {
    let all: Vec<TopicPartition> = members.iter().flat_map(|m| m.assignment()).collect();
    let distinct: BTreeSet<_> = all.iter().cloned().collect();
    members.iter().all(|m| !m.assignment().is_empty()) && all.len() == partitions && distinct.len() == partitions
}

async fn committed(cluster: &Cluster, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let tps: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic, p)).collect();
    let got = GroupOffsets::new(cluster.clone(), group)
        .unwrap()
        .fetch(&tps, false)
        .await
        .unwrap();
    tps.iter().map(|tp| got[tp].as_ref().map(|c| c.offset)).collect()
}

/// Two members split a 6-partition topic; one closes and the other takes
/// everything over from the committed offsets: nothing read twice, nothing
/// skipped. Then Kafka's own tool reads the committed offsets back.
async fn two_members_split_and_hand_over(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic_with(&cluster, "grp-split", 6).await;
    let group = unique_group("split", protocol);
    produce(&cluster, &topic, 6, 0, 50).await;

    let mut a = GroupConsumer::new(cluster.clone(), group_config(&group, protocol))
        .await
        .unwrap();
    a.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut seen = Seen::default();
    poll_until(&mut [&mut a], &mut seen, Duration::from_secs(60), "a alone", |s, _| {
        s.distinct() > 0
    })
    .await;

    let mut b = GroupConsumer::new(cluster.clone(), group_config(&group, protocol))
        .await
        .unwrap();
    b.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    poll_until(
        &mut [&mut a, &mut b],
        &mut seen,
        Duration::from_secs(90),
        "split",
        |s, m| split_between(m, 6) && s.distinct() == 300,
    )
    .await;
    produce(&cluster, &topic, 6, 50, 50).await;
    poll_until(
        &mut [&mut a, &mut b],
        &mut seen,
        Duration::from_secs(60),
        "second batch",
        |s, _| s.distinct() == 600,
    )
    .await;
    assert!(
        split_between(&[&mut a, &mut b], 6),
        "{:?} {:?}",
        a.assignment(),
        b.assignment()
    );

    // a leaves (committing on the way out); b takes everything over.
    a.close().await.expect("close a");
    produce(&cluster, &topic, 6, 100, 50).await;
    poll_until(
        &mut [&mut b],
        &mut seen,
        Duration::from_secs(90),
        "hand-over",
        |s, m| m[0].assignment().len() == 6 && s.distinct() == 900,
    )
    .await;
    // Nothing more arrives.
    for _ in 0..3 {
        seen.add(&b.poll(Duration::from_millis(300)).await.unwrap());
    }
    seen.assert_exactly(6, 150);
    b.commit_sync().await.expect("commit");
    b.close().await.expect("close b");
    assert_eq!(committed(&cluster, &group, &topic, 6).await, vec![Some(150); 6]);
    java_tool_reads_committed(&brokers, &group, &topic, 6, 150);
}

/// `kafka-consumer-groups.sh --describe` shows our committed offsets.
fn java_tool_reads_committed(brokers: &str, group: &str, topic: &str, partitions: i32, offset: i64) {
    let Some(script) = common::process::kafka_tools() else {
        return;
    };
    let out = std::process::Command::new(&script)
        .args(["groups", "--bootstrap-server", brokers.split(',').next().unwrap()])
        .args(["--describe", "--group", group])
        .output()
        .expect("running kafka-consumer-groups");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut found = BTreeMap::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 4 && cols[1] == topic {
            found.insert(cols[2].parse::<i32>().unwrap(), cols[3].to_owned());
        }
    }
    let want: BTreeMap<i32, String> = (0..partitions).map(|p| (p, offset.to_string())).collect();
    assert_eq!(found, want, "kafka-consumer-groups said:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_split_and_hand_over_classic() {
    two_members_split_and_hand_over(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_split_and_hand_over_consumer() {
    two_members_split_and_hand_over(GroupProtocol::Consumer).await;
}
