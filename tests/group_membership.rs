//! Group membership changes against the real broker (issue 22, point 5):
//! a rolling bounce of three members while a feeder produces, a member
//! crashed (its partitions move within the session timeout plus one
//! rebalance), a static member restarted within the session timeout (no
//! rebalance), and the group coordinator's broker killed on the
//! three-broker cluster. Under both group protocols (classic and KIP-848's
//! `consumer`).
//!
//! Every member commits by hand after processing each poll
//! (`enable.auto.commit=false`, `commit_sync` after the records are
//! counted), so the accounting is exact: every produced record is read at
//! least once, and a record read twice must come from a poll whose commit
//! failed (a commit refused during a rebalance, or lost with the
//! coordinator): nothing is read twice beyond what was uncommitted.
//!
//! A crash is a member dropped without `close`: its background task stops
//! at once, with no LeaveGroup and no more heartbeats, which is what the
//! coordinator sees of a SIGKILLed process (the commit of its last poll
//! was acknowledged before, as a process killed between polls).
//!
//! Timing bounds are generous (the CI machine is a noisy 2-core box); the
//! measured times are printed, the benchmark (benches/groups) compares them
//! with franz-go and the Java client.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Cluster, ConsumerConfig, GroupConsumer, GroupConsumerConfig, GroupProtocol, NewTopic, Offset, Producer,
    ProducerConfig, ProducerRecord, RebalanceEvent, Subscription,
};
use clink_kafka::wire::kafka_protocol::messages::FindCoordinatorRequest;
use clink_kafka::wire::kafka_protocol::protocol::StrBytes;

const PARTITIONS: i32 = 6;
/// `session.timeout.ms` of the classic members.
const CLASSIC_SESSION: Duration = Duration::from_secs(10);
/// The broker's `group.consumer.session.timeout.ms` (Kafka's default; the
/// test brokers keep it, and a group cannot go below the broker's
/// minimum, also 45 s).
const CONSUMER_SESSION: Duration = Duration::from_secs(45);

fn session_timeout(protocol: GroupProtocol) -> Duration {
    match protocol {
        GroupProtocol::Classic => CLASSIC_SESSION,
        _ => CONSUMER_SESSION,
    }
}

fn group_config(group: &str, protocol: GroupProtocol, instance: Option<String>) -> GroupConsumerConfig {
    GroupConsumerConfig::new(group)
        .with_protocol(protocol)
        .with_group_instance_id(instance)
        .with_session_timeout(CLASSIC_SESSION)
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_enable_auto_commit(false)
        .with_consumer(ConsumerConfig::default().with_auto_offset_reset(Some(Offset::Earliest)))
}

// ---------------------------------------------------------------------------
// What the members read, and what they could not commit.

#[derive(Default)]
struct Ledger {
    /// (partition, offset) -> (member, when) of every read.
    reads: BTreeMap<(i32, i64), Vec<(String, Instant)>>,
    /// Records handed over by a poll whose commit failed.
    uncommitted: BTreeSet<(i32, i64)>,
    /// Failed commits and polls, for the report.
    errors: Vec<String>,
}

impl Ledger {
    /// Every offset below `ends[p]` read at least once (`None` if so, else
    /// the first missing).
    fn first_missing(&self, ends: &[i64]) -> Option<(i32, i64)> {
        (0..PARTITIONS).find_map(|p| {
            (0..ends[p as usize])
                .find(|o| !self.reads.contains_key(&(p, *o)))
                .map(|o| (p, o))
        })
    }

    /// Asserts nothing was skipped and nothing was read twice beyond what
    /// was left uncommitted; returns (records, duplicates).
    fn check(&self, ends: &[i64], what: &str) -> (usize, usize) {
        assert_eq!(self.first_missing(ends), None, "{what}: a record was skipped");
        let dups: Vec<_> = self
            .reads
            .iter()
            .filter(|(_, r)| r.len() > 1)
            .map(|(k, _)| *k)
            .collect();
        let unexplained: Vec<_> = dups.iter().filter(|k| !self.uncommitted.contains(k)).collect();
        assert!(
            unexplained.is_empty(),
            "{what}: {} records read twice although their commit was acknowledged, e.g. {:?} read by {:?}",
            unexplained.len(),
            unexplained[0],
            self.reads[unexplained[0]]
        );
        let beyond: Vec<_> = self.reads.keys().filter(|(p, o)| *o >= ends[*p as usize]).collect();
        assert!(
            beyond.is_empty(),
            "{what}: offsets beyond the produced ones: {beyond:?}"
        );
        (self.reads.len(), dups.len())
    }

    /// When `member`-other members first read each of `partitions` at or
    /// after `at`: the latest of those, or `None` while one is missing.
    fn taken_over(&self, partitions: &[i32], not_by: &str, at: Instant) -> Option<Duration> {
        let mut latest = Duration::ZERO;
        for &p in partitions {
            let first = self
                .reads
                .range((p, 0)..(p, i64::MAX))
                .flat_map(|(_, r)| r.iter())
                .filter(|(m, t)| m != not_by && *t >= at)
                .map(|(_, t)| *t)
                .min()?;
            latest = latest.max(first - at);
        }
        Some(latest)
    }
}

// ---------------------------------------------------------------------------
// A member: a GroupConsumer in its own task, polling and committing.

#[derive(Clone, Default, Debug)]
struct MemberState {
    assignment: Vec<i32>,
    generation: i32,
    member_id: String,
    /// Rebalance events, in order.
    events: Vec<RebalanceEvent>,
    polls: u64,
}

#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Close,
    Crash,
}

struct Member {
    name: String,
    stop: tokio::sync::watch::Sender<Option<Stop>>,
    state: Arc<Mutex<MemberState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Member {
    async fn start(
        cluster: &Cluster,
        config: GroupConsumerConfig,
        topic: &str,
        name: &str,
        ledger: Arc<Mutex<Ledger>>,
    ) -> Member {
        let mut consumer = GroupConsumer::new(cluster.clone(), config)
            .await
            .expect("GroupConsumer::new");
        consumer
            .subscribe(Subscription::Topics(vec![topic.to_owned()]))
            .expect("subscribe");
        let (stop, stop_rx) = tokio::sync::watch::channel(None);
        let state = Arc::new(Mutex::new(MemberState::default()));
        let (st, me) = (state.clone(), name.to_owned());
        let task = tokio::spawn(async move {
            loop {
                // Checked between polls, never by cancelling one: what a
                // poll handed over is always counted and committed.
                let stop = *stop_rx.borrow();
                match stop {
                    Some(Stop::Crash) => {
                        drop(consumer); // the driver stops: no leave, no heartbeat
                        return;
                    }
                    Some(Stop::Close) => {
                        if let Err(e) = consumer.close().await {
                            ledger.lock().unwrap().errors.push(format!("{me} close: {e}"));
                        }
                        return;
                    }
                    None => {}
                }
                let polled = consumer.poll_events(Duration::from_millis(200)).await;
                let now = Instant::now();
                let polled = match polled {
                    Ok(p) => p,
                    Err(e) => {
                        ledger.lock().unwrap().errors.push(format!("{me} poll: {e}"));
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                {
                    let mut s = st.lock().unwrap();
                    s.events.extend(polled.events.iter().cloned());
                    s.assignment = consumer.assignment().iter().map(|tp| tp.partition).collect();
                    s.assignment.sort_unstable();
                    s.generation = consumer.generation();
                    s.member_id = consumer.member_id().to_owned();
                    s.polls += 1;
                }
                if polled.records.is_empty() {
                    continue;
                }
                {
                    let mut l = ledger.lock().unwrap();
                    for r in &polled.records {
                        l.reads
                            .entry((r.partition, r.record.offset))
                            .or_default()
                            .push((me.clone(), now));
                    }
                }
                if let Err(e) = consumer.commit_sync().await {
                    let mut l = ledger.lock().unwrap();
                    l.errors.push(format!("{me} commit: {e}"));
                    for r in &polled.records {
                        l.uncommitted.insert((r.partition, r.record.offset));
                    }
                }
            }
        });
        Member {
            name: name.to_owned(),
            stop,
            state,
            task,
        }
    }

    fn state(&self) -> MemberState {
        self.state.lock().unwrap().clone()
    }

    async fn stop(self, how: Stop) {
        let _ = self.stop.send(Some(how));
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .unwrap_or_else(|_| panic!("{} did not stop within 60 s", self.name))
            .expect("member task");
    }
}

/// Waits until `members` own disjoint, non-empty parts of the topic that
/// together cover every partition (bounded by `limit`); their states then.
async fn settled(members: &[&Member], limit: Duration, what: &str) -> Vec<MemberState> {
    let deadline = Instant::now() + limit;
    loop {
        let states: Vec<MemberState> = members.iter().map(|m| m.state()).collect();
        let all: Vec<i32> = states.iter().flat_map(|s| s.assignment.iter().copied()).collect();
        let distinct: BTreeSet<i32> = all.iter().copied().collect();
        if states.iter().all(|s| !s.assignment.is_empty())
            && all.len() == PARTITIONS as usize
            && distinct.len() == PARTITIONS as usize
        {
            return states;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the group did not settle within {limit:?}: {:?}",
            states.iter().map(|s| &s.assignment).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// The feeder: values "p{p}-{n}" round robin over the partitions, every
// 100 ms, until stopped; the records per partition (all acknowledged).

struct Feeder {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<i64>>,
}

impl Feeder {
    fn start(cluster: Cluster, topic: String, per_tick: usize) -> Feeder {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let producer = Producer::new(cluster, ProducerConfig::default())
                .await
                .expect("producer");
            let mut acks = Vec::new();
            let mut next = vec![0i64; PARTITIONS as usize];
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut i = 0usize;
            while !stop2.load(Ordering::Acquire) {
                tick.tick().await;
                for _ in 0..per_tick {
                    let p = (i % PARTITIONS as usize) as i32;
                    i += 1;
                    let value = format!("p{p}-{}", next[p as usize]);
                    next[p as usize] += 1;
                    let record = ProducerRecord::new(topic.as_str(), value).with_partition(p);
                    acks.push(producer.send(record).await.expect("send"));
                }
            }
            producer.flush(Duration::from_secs(120)).await.expect("flush");
            for a in acks {
                a.await.expect("a fed record was not delivered");
            }
            producer.close(Duration::from_secs(30)).await.expect("close");
            next
        });
        Feeder { stop, task }
    }

    async fn finish(self) -> Vec<i64> {
        self.stop.store(true, Ordering::Release);
        self.task.await.expect("feeder")
    }
}

/// Waits until every fed record was read (bounded), then stops `members`.
async fn drain_and_check(
    ledger: &Arc<Mutex<Ledger>>,
    ends: &[i64],
    members: Vec<Member>,
    what: &str,
) -> (usize, usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let missing = ledger.lock().unwrap().first_missing(ends);
        let Some(missing) = missing else { break };
        assert!(
            Instant::now() < deadline,
            "{what}: {missing:?} not read within 60 s after the feed stopped; errors: {:?}",
            ledger.lock().unwrap().errors
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for m in members {
        m.stop(Stop::Close).await;
    }
    let l = ledger.lock().unwrap();
    let (records, dups) = l.check(ends, what);
    eprintln!(
        "{what}: {records} records read, {dups} read twice (all uncommitted: {} records in failed commits); {} errors: {:?}",
        l.uncommitted.len(),
        l.errors.len(),
        l.errors.iter().take(5).collect::<Vec<_>>()
    );
    (records, dups)
}

async fn topic(cluster: &Cluster, prefix: &str, replication: i16) -> String {
    let topic = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&topic, PARTITIONS, replication)).await;
    cluster
        .wait_for_topic(&topic, PARTITIONS as usize, Duration::from_secs(30))
        .await
        .expect("topic visible");
    topic
}

fn group_name(prefix: &str, protocol: GroupProtocol) -> String {
    common::unique_topic(&format!("gm-{prefix}-{}", protocol.name()))
}

async fn start_three(
    cluster: &Cluster,
    group: &str,
    protocol: GroupProtocol,
    topic: &str,
    ledger: &Arc<Mutex<Ledger>>,
    static_ids: bool,
) -> Vec<Member> {
    let mut members = Vec::new();
    for i in 0..3 {
        let instance = static_ids.then(|| format!("{group}-static-{i}"));
        let config = group_config(group, protocol, instance);
        members.push(Member::start(cluster, config, topic, &format!("m{i}"), ledger.clone()).await);
    }
    members
}

// ---------------------------------------------------------------------------
// Rolling bounce.

/// Three members; each in turn is closed and started again while the
/// feeder produces, and the group settles before the next. Nothing is
/// skipped; nothing is read twice beyond the failed commits.
async fn rolling_bounce(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic(&cluster, "gm-bounce", 1).await;
    let group = group_name("bounce", protocol);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let feeder = Feeder::start(cluster.clone(), topic.clone(), 30);
    let mut members = start_three(&cluster, &group, protocol, &topic, &ledger, false).await;
    let limit = session_timeout(protocol) + Duration::from_secs(60);
    settled(&members.iter().collect::<Vec<_>>(), limit, "start").await;
    for i in 0..3 {
        let old = members.remove(i);
        let name = old.name.clone();
        let started = Instant::now();
        old.stop(Stop::Close).await;
        let closed = started.elapsed();
        let config = group_config(&group, protocol, None);
        members.insert(i, Member::start(&cluster, config, &topic, &name, ledger.clone()).await);
        settled(&members.iter().collect::<Vec<_>>(), limit, &format!("bounce of {name}")).await;
        eprintln!(
            "{} bounce of {name}: closed after {closed:?}, the group settled after {:?}",
            protocol.name(),
            started.elapsed()
        );
    }
    let ends = feeder.finish().await;
    let (records, _) = drain_and_check(
        &ledger,
        &ends,
        members,
        &format!("rolling bounce ({})", protocol.name()),
    )
    .await;
    assert_eq!(records as i64, ends.iter().sum::<i64>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_bounce_classic() {
    rolling_bounce(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_bounce_consumer() {
    rolling_bounce(GroupProtocol::Consumer).await;
}

// ---------------------------------------------------------------------------
// A member crashed.

/// Three members on a live topic; one crashes (no leave). Its partitions
/// are read again by the others within the session timeout plus one
/// rebalance (bound: session timeout + 45 s), nothing is skipped and
/// nothing read twice beyond the failed commits.
async fn member_crash(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic(&cluster, "gm-crash", 1).await;
    let group = group_name("crash", protocol);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let feeder = Feeder::start(cluster.clone(), topic.clone(), 30);
    let mut members = start_three(&cluster, &group, protocol, &topic, &ledger, false).await;
    let session = session_timeout(protocol);
    let states = settled(
        &members.iter().collect::<Vec<_>>(),
        session + Duration::from_secs(60),
        "start",
    )
    .await;
    let lost = states[0].assignment.clone();
    let victim = members.remove(0);
    let name = victim.name.clone();
    let at = Instant::now();
    victim.stop(Stop::Crash).await;
    let bound = session + Duration::from_secs(45);
    let took = loop {
        let taken = ledger.lock().unwrap().taken_over(&lost, &name, at);
        if let Some(t) = taken {
            break t;
        }
        assert!(
            at.elapsed() < bound,
            "{}: partitions {lost:?} of the crashed member not read again within {bound:?}: {:?}",
            protocol.name(),
            members.iter().map(|m| m.state().assignment).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "{}: the crashed member's partitions {lost:?} read again after {took:?} (session timeout {session:?})",
        protocol.name()
    );
    settled(
        &members.iter().collect::<Vec<_>>(),
        Duration::from_secs(30),
        "after the crash",
    )
    .await;
    let ends = feeder.finish().await;
    drain_and_check(&ledger, &ends, members, &format!("member crash ({})", protocol.name())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_crash_classic() {
    member_crash(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_crash_consumer() {
    member_crash(GroupProtocol::Consumer).await;
}

// ---------------------------------------------------------------------------
// A static member restarted.

/// Three static members (group.instance.id); one is closed (a static
/// member does not leave) and started again with the same instance id
/// within the session timeout: it gets its partitions back, and the others
/// see no rebalance (same generation or member epoch, same assignment, no
/// event) while the restarted member reads again and for a few heartbeats
/// after.
async fn static_restart(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = topic(&cluster, "gm-static", 1).await;
    let group = group_name("static", protocol);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let feeder = Feeder::start(cluster.clone(), topic.clone(), 30);
    let mut members = start_three(&cluster, &group, protocol, &topic, &ledger, true).await;
    let before = settled(
        &members.iter().collect::<Vec<_>>(),
        session_timeout(protocol) + Duration::from_secs(60),
        "start",
    )
    .await;
    // The others' event logs so far; nothing may be added.
    let old = members.remove(0);
    let name = old.name.clone();
    let at = Instant::now();
    old.stop(Stop::Close).await;
    let config = group_config(&group, protocol, Some(format!("{group}-static-0")));
    members.insert(0, Member::start(&cluster, config, &topic, &name, ledger.clone()).await);
    // Back: the restarted member reads each of its old partitions again.
    let deadline = at + Duration::from_secs(30);
    loop {
        let back = {
            let l = ledger.lock().unwrap();
            before[0].assignment.iter().all(|&p| {
                l.reads
                    .range((p, 0)..(p, i64::MAX))
                    .any(|(_, r)| r.iter().any(|(m, t)| *m == name && *t > at))
            })
        };
        if back {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: the restarted static member did not read its partitions {:?} within 30 s: {:?}",
            protocol.name(),
            before[0].assignment,
            members[0].state()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{}: the static member read again after {:?}",
        protocol.name(),
        at.elapsed()
    );
    // A rebalance would reach the others within a few heartbeats (classic:
    // 500 ms; KIP-848: the broker's 5 s interval): watch that long.
    let watch = match protocol {
        GroupProtocol::Classic => Duration::from_secs(3),
        _ => Duration::from_secs(11),
    };
    tokio::time::sleep(watch).await;
    let after: Vec<MemberState> = members.iter().map(|m| m.state()).collect();
    assert_eq!(
        after[0].assignment,
        before[0].assignment,
        "{}: the restarted member's partitions",
        protocol.name()
    );
    for i in 1..3 {
        assert_eq!(
            after[i].generation,
            before[i].generation,
            "{}: m{i}'s generation changed (a rebalance)",
            protocol.name()
        );
        assert_eq!(
            after[i].assignment,
            before[i].assignment,
            "{}: m{i}'s partitions",
            protocol.name()
        );
        assert_eq!(
            after[i].events.len(),
            before[i].events.len(),
            "{}: m{i} saw rebalance events: {:?}",
            protocol.name(),
            &after[i].events[before[i].events.len()..]
        );
        assert_eq!(after[i].member_id, before[i].member_id);
    }
    let ends = feeder.finish().await;
    drain_and_check(
        &ledger,
        &ends,
        members,
        &format!("static restart ({})", protocol.name()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_restart_classic() {
    static_restart(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_restart_consumer() {
    static_restart(GroupProtocol::Consumer).await;
}

// ---------------------------------------------------------------------------
// The group coordinator's broker killed (three-broker cluster).

/// `flock /tmp/cluster-kill.lock` held by a child process until dropped:
/// one broker fault at a time across test binaries and helpers.
struct KillLock {
    child: Child,
}

impl KillLock {
    fn take() -> KillLock {
        let mut child = Command::new("flock")
            .args(["/tmp/cluster-kill.lock", "sh", "-c", "echo locked; cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting flock");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("reading flock's output");
        assert_eq!(line.trim(), "locked", "flock /tmp/cluster-kill.lock");
        KillLock { child }
    }
}

impl Drop for KillLock {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        } // closing stdin ends `cat`, and flock releases the lock
        let _ = self.child.wait();
    }
}

/// The broker coordinating `group` (FindCoordinator v4+, which Kafka 4
/// brokers speak), retried while the cluster has none.
async fn group_coordinator(cluster: &Cluster, group: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last: String;
    loop {
        let mut request = FindCoordinatorRequest::default();
        request.key_type = 0;
        request.coordinator_keys = vec![StrBytes::from_string(group.to_owned())];
        match cluster.any_broker().await {
            Err(e) => last = format!("{e}"),
            Ok(conn) => match conn.request(&request).await {
                Err(e) => last = format!("{e}"),
                Ok(response) => {
                    last = format!("{response:?}");
                    let found = response
                        .coordinators
                        .first()
                        .filter(|c| c.error_code == 0)
                        .map(|c| c.node_id.0);
                    if let Some(id) = found.filter(|id| *id >= 0) {
                        return id;
                    }
                }
            },
        }
        assert!(
            Instant::now() < deadline,
            "no coordinator for {group} within 60 s: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Three members on a replicated topic of the three-broker cluster; the
/// group coordinator's broker is SIGKILLed while the feeder produces and
/// started again later. The group keeps consuming (the coordinator moves
/// to another broker with the offsets topic's leadership): nothing skipped,
/// nothing read twice beyond the failed commits.
async fn coordinator_killed(protocol: GroupProtocol) {
    let Some(brokers) = common::cluster::brokers() else {
        return;
    };
    let _cluster_lock = common::cluster::ClusterLock::take();
    let cluster = common::cluster(common::cluster::config(&brokers)).await;
    let topic = topic(&cluster, "gm-coord", 3).await;
    common::cluster::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;
    let group = group_name("coord", protocol);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let feeder = Feeder::start(cluster.clone(), topic.clone(), 30);
    let members = start_three(&cluster, &group, protocol, &topic, &ledger, false).await;
    let limit = session_timeout(protocol) + Duration::from_secs(60);
    settled(&members.iter().collect::<Vec<_>>(), limit, "start").await;
    let coordinator = group_coordinator(&cluster, &group).await;
    let at = Instant::now();
    {
        let _kill = KillLock::take();
        common::cluster::kill(coordinator).await;
        // Consuming goes on while the broker is down: every partition read
        // again after the kill (records of every partition keep coming).
        let all: Vec<i32> = (0..PARTITIONS).collect();
        let deadline = at + Duration::from_secs(90);
        let took = loop {
            let taken = ledger.lock().unwrap().taken_over(&all, "", at + Duration::from_secs(1));
            if let Some(t) = taken {
                break t;
            }
            assert!(
                Instant::now() < deadline,
                "{}: not every partition read within 90 s of killing coordinator {coordinator}: {:?}; errors {:?}",
                protocol.name(),
                members.iter().map(|m| m.state().assignment).collect::<Vec<_>>(),
                ledger.lock().unwrap().errors.iter().rev().take(5).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let moved = group_coordinator(&cluster, &group).await;
        eprintln!(
            "{}: coordinator {coordinator} killed; every partition read again {took:?} after (+1 s); the group's \
             coordinator is now {moved}",
            protocol.name()
        );
        common::cluster::start(coordinator).await;
    }
    common::cluster::wait_in_sync(&cluster, &topic, Duration::from_secs(120)).await;
    let ends = feeder.finish().await;
    drain_and_check(
        &ledger,
        &ends,
        members,
        &format!("coordinator killed ({})", protocol.name()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_killed_classic() {
    coordinator_killed(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_killed_consumer() {
    coordinator_killed(GroupProtocol::Consumer).await;
}
