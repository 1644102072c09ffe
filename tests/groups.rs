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
    // The coordinator drops a at once (LeaveGroup, or KIP-848's leave
    // heartbeat), not after its session times out.
    let a_id = a.member_id().to_owned();
    a.close().await.expect("close a");
    let described = clink_kafka::client::Admin::new(cluster.clone())
        .describe_group(&group)
        .await
        .expect("describe the group");
    assert!(
        described.members.iter().all(|m| m.member_id != a_id),
        "a ({a_id}) is still a member after close: {:?}",
        described.members.iter().map(|m| &m.member_id).collect::<Vec<_>>()
    );
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

fn tps(topic: &str, parts: impl IntoIterator<Item = i32>) -> Vec<TopicPartition> {
    parts.into_iter().map(|p| TopicPartition::new(topic, p)).collect()
}

/// Auto-commit stores only what poll handed over: the fetcher holds far
/// more (100 records fetched, 10 handed over per poll), yet every
/// committed offset seen is a poll boundary, never beyond.
async fn auto_commit_commits_only_what_poll_returned(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic_with(&cluster, "grp-auto", 1).await;
    let group = unique_group("auto", protocol);
    produce(&cluster, &topic, 1, 0, 100).await;
    let config = group_config(&group, protocol)
        .with_auto_commit_interval(Duration::from_millis(100))
        .with_consumer(
            ConsumerConfig::default()
                .with_auto_offset_reset(Some(Offset::Earliest))
                .with_max_poll_records(10),
        );
    let mut c = GroupConsumer::new(cluster.clone(), config).await.unwrap();
    c.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut handed = 0i64;
    let mut boundaries = vec![0i64];
    let mut commits_seen = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while handed < 60 || commits_seen.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "handed {handed}, commits seen {commits_seen:?}"
        );
        let records = c.poll(Duration::from_millis(300)).await.unwrap();
        assert!(records.len() <= 10);
        handed += records.len() as i64;
        if !records.is_empty() {
            boundaries.push(handed);
            // Let an auto-commit interval pass between polls.
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        if let Some(o) = committed(&cluster, &group, &topic, 1).await[0] {
            assert!(o <= handed && boundaries.contains(&o), "committed {o}, handed {handed}");
            if o > 0 {
                commits_seen.insert(o);
            }
        }
    }
    assert_eq!(c.consumed_offsets(), vec![TopicPartitionOffset::new(&topic, 0, handed)]);
    c.close().await.unwrap();
    // Closing commits the rest (commit on revoke).
    assert_eq!(committed(&cluster, &group, &topic, 1).await, vec![Some(handed)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_commits_only_what_poll_returned_classic() {
    auto_commit_commits_only_what_poll_returned(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_commits_only_what_poll_returned_consumer() {
    auto_commit_commits_only_what_poll_returned(GroupProtocol::Consumer).await;
}

/// With enable.auto.commit=false: commit_offsets_sync, commit_sync and
/// commit_async store what they are told, and close commits nothing.
async fn manual_commit_sync_and_async(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic_with(&cluster, "grp-manual", 2).await;
    let group = unique_group("manual", protocol);
    produce(&cluster, &topic, 2, 0, 20).await;
    let mut c = GroupConsumer::new(
        cluster.clone(),
        group_config(&group, protocol).with_enable_auto_commit(false),
    )
    .await
    .unwrap();
    c.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut seen = Seen::default();
    poll_until(&mut [&mut c], &mut seen, Duration::from_secs(60), "read", |s, _| {
        s.distinct() == 40
    })
    .await;
    assert_eq!(committed(&cluster, &group, &topic, 2).await, vec![None, None]);
    c.commit_offsets_sync(&[TopicPartitionOffset::new(&topic, 0, 5)])
        .await
        .unwrap();
    assert_eq!(committed(&cluster, &group, &topic, 2).await, vec![Some(5), None]);
    c.commit_sync().await.unwrap();
    assert_eq!(committed(&cluster, &group, &topic, 2).await, vec![Some(20), Some(20)]);
    produce(&cluster, &topic, 2, 20, 5).await;
    poll_until(&mut [&mut c], &mut seen, Duration::from_secs(60), "more", |s, _| {
        s.distinct() == 50
    })
    .await;
    c.commit_async();
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed(&cluster, &group, &topic, 2).await != vec![Some(25), Some(25)] {
        assert!(Instant::now() < deadline, "commit_async never landed");
        // Everything produced was seen: a poll meanwhile brings nothing.
        let extra = c.poll(Duration::from_millis(100)).await.unwrap();
        assert!(extra.is_empty(), "{} records beyond the 50 produced", extra.len());
    }
    produce(&cluster, &topic, 2, 25, 5).await;
    poll_until(&mut [&mut c], &mut seen, Duration::from_secs(60), "more", |s, _| {
        s.distinct() == 60
    })
    .await;
    c.close().await.unwrap();
    assert_eq!(
        committed(&cluster, &group, &topic, 2).await,
        vec![Some(25), Some(25)],
        "close committed without enable.auto.commit"
    );
    seen.assert_exactly(2, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_commit_sync_and_async_classic() {
    manual_commit_sync_and_async(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_commit_sync_and_async_consumer() {
    manual_commit_sync_and_async(GroupProtocol::Consumer).await;
}

/// A listener that records what it hears.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<RebalanceEvent>>>);

impl RebalanceListener for Recorder {
    fn on_assigned(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(RebalanceEvent::Assigned(p.to_vec()));
    }
    fn on_revoked(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(RebalanceEvent::Revoked(p.to_vec()));
    }
    fn on_lost(&mut self, p: &[TopicPartition]) {
        self.0.lock().unwrap().push(RebalanceEvent::Lost(p.to_vec()));
    }
}

/// The partitions held after replaying `events`.
fn replay(events: &[RebalanceEvent]) -> BTreeSet<TopicPartition> {
    let mut held = BTreeSet::new();
    for e in events {
        match e {
            RebalanceEvent::Assigned(p) => held.extend(p.iter().cloned()),
            RebalanceEvent::Revoked(p) | RebalanceEvent::Lost(p) => {
                for tp in p {
                    assert!(held.remove(tp), "{tp:?} revoked but not held: {events:?}");
                }
            }
        }
    }
    held
}

/// Member a reads everything; b joins: a's revoked partitions are
/// committed on revoke (auto-commit, the interval too long to matter),
/// so b starts at a's positions. The listener (a) and poll_events (b)
/// report every move, matching the assignment.
async fn commit_on_revoke_and_listener_events(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic_with(&cluster, "grp-revoke", 6).await;
    let group = unique_group("revoke", protocol);
    produce(&cluster, &topic, 6, 0, 10).await;
    let config = group_config(&group, protocol).with_auto_commit_interval(Duration::from_secs(3600));
    let mut a = GroupConsumer::new(cluster.clone(), config.clone()).await.unwrap();
    let heard = Recorder::default();
    a.set_listener(Box::new(heard.clone()));
    a.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut seen = Seen::default();
    poll_until(
        &mut [&mut a],
        &mut seen,
        Duration::from_secs(60),
        "a reads all",
        |s, _| s.distinct() == 60,
    )
    .await;
    assert_eq!(committed(&cluster, &group, &topic, 6).await, vec![None; 6]);
    assert_eq!(
        *heard.0.lock().unwrap(),
        vec![RebalanceEvent::Assigned(tps(&topic, 0..6))]
    );

    let mut b = GroupConsumer::new(cluster.clone(), config).await.unwrap();
    b.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut b_events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !split_between(&[&mut a, &mut b], 6) {
        assert!(Instant::now() < deadline, "{:?} {:?}", a.assignment(), b.assignment());
        seen.add(&a.poll(Duration::from_millis(200)).await.unwrap());
        let got = b.poll_events(Duration::from_millis(200)).await.unwrap();
        seen.add(&got.records);
        b_events.extend(got.events);
    }
    let b_parts = b.assignment();
    let a_events = heard.0.lock().unwrap().clone();
    assert_eq!(replay(&a_events), a.assignment().into_iter().collect(), "{a_events:?}");
    assert_eq!(replay(&b_events), b_parts.iter().cloned().collect(), "{b_events:?}");
    let revoked: BTreeSet<TopicPartition> = a_events
        .iter()
        .filter_map(|e| match e {
            RebalanceEvent::Revoked(p) => Some(p.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(b_parts.iter().all(|tp| revoked.contains(tp)), "{a_events:?}");
    // Committed on revoke: b's partitions at 10 (a read them all).
    let offsets = committed(&cluster, &group, &topic, 6).await;
    for tp in &b_parts {
        assert_eq!(offsets[tp.partition as usize], Some(10), "{offsets:?}");
    }
    // b read nothing twice.
    for _ in 0..3 {
        seen.add(&b.poll(Duration::from_millis(200)).await.unwrap());
    }
    seen.assert_exactly(6, 10);
    a.close().await.unwrap();
    b.close().await.unwrap();
    let last = heard.0.lock().unwrap().last().cloned();
    assert!(
        matches!(last, Some(RebalanceEvent::Revoked(_))),
        "close revokes: {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_on_revoke_and_listener_events_classic() {
    commit_on_revoke_and_listener_events(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_on_revoke_and_listener_events_consumer() {
    commit_on_revoke_and_listener_events(GroupProtocol::Consumer).await;
}

/// A pattern subscription picks up a topic created after it (classic:
/// matched here every metadata.max.age.ms; KIP-848: by the broker).
async fn regex_subscription_picks_up_new_topic(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let prefix = common::unique_topic("grp-regex");
    let first = format!("{prefix}-a");
    common::create_topic(&cluster, NewTopic::new(&first, 2, 1)).await;
    produce(&cluster, &first, 2, 0, 5).await;
    let group = unique_group("regex", protocol);
    let mut c = GroupConsumer::new(
        cluster.clone(),
        group_config(&group, protocol).with_metadata_max_age(Duration::from_secs(1)),
    )
    .await
    .unwrap();
    c.subscribe(Subscription::Pattern(format!("{}-.*", regex_escape(&prefix))))
        .unwrap();
    let mut by_topic: BTreeMap<String, usize> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while by_topic.get(&first) != Some(&10) {
        assert!(Instant::now() < deadline, "{by_topic:?} {:?}", c.assignment());
        for r in c.poll(Duration::from_millis(300)).await.unwrap() {
            *by_topic.entry(r.topic.to_string()).or_default() += 1;
        }
    }
    let second = format!("{prefix}-b");
    common::create_topic(&cluster, NewTopic::new(&second, 3, 1)).await;
    produce(&cluster, &second, 3, 0, 4).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while by_topic.get(&second) != Some(&12) {
        assert!(Instant::now() < deadline, "{by_topic:?} {:?}", c.assignment());
        for r in c.poll(Duration::from_millis(300)).await.unwrap() {
            *by_topic.entry(r.topic.to_string()).or_default() += 1;
        }
    }
    assert_eq!(c.assignment().len(), 5);
    c.close().await.unwrap();
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_subscription_picks_up_new_topic_classic() {
    regex_subscription_picks_up_new_topic(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regex_subscription_picks_up_new_topic_consumer() {
    regex_subscription_picks_up_new_topic(GroupProtocol::Consumer).await;
}

/// A static member (group.instance.id) that restarts within the session
/// timeout gets its partitions back with no rebalance: the generation
/// (classic) is unchanged, and the other member keeps its partitions.
async fn static_member_restart_keeps_partitions(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic_with(&cluster, "grp-static", 4).await;
    let group = unique_group("static", protocol);
    produce(&cluster, &topic, 4, 0, 5).await;
    let config = |id: &str| {
        group_config(&group, protocol)
            .with_session_timeout(Duration::from_secs(30))
            .with_group_instance_id(Some(id.to_owned()))
    };
    let mut a = GroupConsumer::new(cluster.clone(), config("a")).await.unwrap();
    let mut b = GroupConsumer::new(cluster.clone(), config("b")).await.unwrap();
    a.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    b.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut seen = Seen::default();
    poll_until(
        &mut [&mut a, &mut b],
        &mut seen,
        Duration::from_secs(90),
        "split",
        |s, m| split_between(m, 4) && s.distinct() == 20,
    )
    .await;
    // Settle: a few more rounds with nothing moving.
    for _ in 0..5 {
        seen.add(&a.poll(Duration::from_millis(200)).await.unwrap());
        seen.add(&b.poll(Duration::from_millis(200)).await.unwrap());
    }
    let (a_parts, b_parts) = (a.assignment(), b.assignment());
    let generation = a.generation();
    a.close().await.unwrap();
    let mut a2 = GroupConsumer::new(cluster.clone(), config("a")).await.unwrap();
    let heard = Recorder::default();
    b.set_listener(Box::new(heard.clone()));
    a2.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    produce(&cluster, &topic, 4, 5, 5).await;
    poll_until(
        &mut [&mut a2, &mut b],
        &mut seen,
        Duration::from_secs(60),
        "restart",
        |s, m| !m[0].assignment().is_empty() && s.distinct() == 40,
    )
    .await;
    assert_eq!(a2.assignment(), a_parts);
    assert_eq!(b.assignment(), b_parts);
    assert!(
        heard.0.lock().unwrap().is_empty(),
        "b saw a rebalance: {:?}",
        heard.0.lock().unwrap()
    );
    if protocol == GroupProtocol::Classic {
        assert_eq!(a2.generation(), generation, "a rebalance happened");
    }
    seen.assert_exactly(4, 10);
    a2.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_restart_keeps_partitions_classic() {
    static_member_restart_keeps_partitions(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_restart_keeps_partitions_consumer() {
    static_member_restart_keeps_partitions(GroupProtocol::Consumer).await;
}

/// Bad settings are refused naming the option; a config from Java
/// properties works against the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_properties_joins() {
    let Some(brokers) = common::brokers() else { return };
    let group = unique_group("props", GroupProtocol::Classic);
    let (client, config) = GroupConsumerConfig::client_and_group_from_properties([
        ("bootstrap.servers", brokers.as_str()),
        ("group.id", group.as_str()),
        ("group.protocol", "classic"),
        ("partition.assignment.strategy", "cooperative-sticky"),
        ("auto.offset.reset", "earliest"),
        ("session.timeout.ms", "10000"),
    ])
    .unwrap();
    let cluster = common::cluster(client).await;
    let topic = topic_with(&cluster, "grp-props", 1).await;
    produce(&cluster, &topic, 1, 0, 3).await;
    let mut c = GroupConsumer::new(cluster.clone(), config).await.unwrap();
    c.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut seen = Seen::default();
    poll_until(&mut [&mut c], &mut seen, Duration::from_secs(60), "read", |s, _| {
        s.distinct() == 3
    })
    .await;
    c.close().await.unwrap();
    assert_eq!(committed(&cluster, &group, &topic, 1).await, vec![Some(3)]);
}

/// Heartbeats do not depend on poll: a member that does not poll for
/// longer than the session timeout (classic: 6 s) keeps its partitions.
/// max.poll.interval.ms still applies with Java's meaning: past it the
/// member's partitions go to the other member, and at its next poll it
/// hears they were lost and rejoins.
async fn heartbeats_go_on_between_polls_but_max_poll_interval_applies(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic_with(&cluster, "grp-poll", 2).await;
    let group = unique_group("poll", protocol);
    produce(&cluster, &topic, 2, 0, 5).await;
    let config = group_config(&group, protocol)
        .with_session_timeout(Duration::from_secs(6))
        .with_max_poll_interval(Duration::from_secs(15));
    let mut a = GroupConsumer::new(cluster.clone(), config.clone()).await.unwrap();
    let mut b = GroupConsumer::new(cluster.clone(), config).await.unwrap();
    let heard_a = Recorder::default();
    let heard_b = Recorder::default();
    a.set_listener(Box::new(heard_a.clone()));
    b.set_listener(Box::new(heard_b.clone()));
    a.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    b.subscribe(Subscription::Topics(vec![topic.clone()])).unwrap();
    let mut seen = Seen::default();
    poll_until(
        &mut [&mut a, &mut b],
        &mut seen,
        Duration::from_secs(90),
        "split",
        |s, m| split_between(m, 2) && s.distinct() == 10,
    )
    .await;
    for _ in 0..5 {
        seen.add(&a.poll(Duration::from_millis(200)).await.unwrap());
        seen.add(&b.poll(Duration::from_millis(200)).await.unwrap());
    }
    let (a_parts, b_parts) = (a.assignment(), b.assignment());
    let (a_heard, b_heard) = (heard_a.0.lock().unwrap().len(), heard_b.0.lock().unwrap().len());
    // a does not poll for 10 s (> session timeout, < max.poll.interval).
    let quiet = Instant::now() + Duration::from_secs(10);
    while Instant::now() < quiet {
        seen.add(&b.poll(Duration::from_millis(300)).await.unwrap());
    }
    seen.add(&a.poll(Duration::from_millis(200)).await.unwrap());
    assert_eq!((a.assignment(), b.assignment()), (a_parts.clone(), b_parts.clone()));
    assert_eq!(
        heard_a.0.lock().unwrap().len(),
        a_heard,
        "{:?}",
        heard_a.0.lock().unwrap()
    );
    assert_eq!(
        heard_b.0.lock().unwrap().len(),
        b_heard,
        "{:?}",
        heard_b.0.lock().unwrap()
    );

    // a does not poll past max.poll.interval.ms: b gets everything.
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.assignment().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "b never got a's partitions: {:?}",
            b.assignment()
        );
        seen.add(&b.poll(Duration::from_millis(300)).await.unwrap());
    }
    // a polls again: lost, then it rejoins and the group splits again.
    poll_until(
        &mut [&mut a, &mut b],
        &mut seen,
        Duration::from_secs(90),
        "rejoin",
        |_, m| split_between(m, 2),
    )
    .await;
    let a_events = heard_a.0.lock().unwrap().clone();
    assert!(
        a_events[a_heard..]
            .iter()
            .any(|e| matches!(e, RebalanceEvent::Lost(p) if *p == a_parts)),
        "{a_events:?}"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_go_on_between_polls_but_max_poll_interval_applies_classic() {
    heartbeats_go_on_between_polls_but_max_poll_interval_applies(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_go_on_between_polls_but_max_poll_interval_applies_consumer() {
    heartbeats_go_on_between_polls_but_max_poll_interval_applies(GroupProtocol::Consumer).await;
}
