//! Replicas on the real three-broker cluster (`scripts/kafka-local up
//! --cluster 3`; each broker has `broker.rack=rack-<id>` and the rack-aware
//! replica selector):
//!
//! - rack-aware fetching (KIP-392): a consumer naming a follower's rack
//!   fetches every record from that follower (the consumer's per-broker
//!   fetch counts show it: the leader served none), and when that follower
//!   goes away, from the leader, every record once and in order;
//! - log truncation (KIP-320): records written with acks=1 to a leader whose
//!   followers are down are consumed, the leader is SIGKILLed and a stale
//!   follower becomes leader uncleanly (`unclean.leader.election.enable`):
//!   the consumer finds its position past the new leader's log with
//!   OffsetForLeaderEpoch and, with a reset policy, moves back to where the
//!   logs diverge (reported), or without one fails naming topic, partition
//!   and both offsets — never re-reading or skipping silently;
//! - a network partition between the client and one broker (the fault
//!   proxy in front of every broker, one cut off silently for 12 s and
//!   healed): producer and consumer keep going on the other brokers' partitions
//!   and resume on the cut one, every record once and in order; and a
//!   consumer alone cut off (its producer around the proxy) gets records of
//!   the other brokers' partitions in every 3-second window of a 15-second
//!   cut (its connects to the cut broker run in the background).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Acks, Consumer, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use clink_kafka::Error;
use common::cluster::{self as kc, check_exactly_once_in_order, ClusterLock, OrderedReader, PacedProducer, PARTITIONS};
use common::proxy::ClusterProxy;

/// Produces `values` into `topic[0]` and waits for every acknowledgement.
async fn produce_all(producer: &Producer, topic: &str, values: impl Iterator<Item = String>) {
    let mut acks = Vec::new();
    for v in values {
        acks.push(
            producer
                .send(ProducerRecord::new(topic, v).with_partition(0))
                .await
                .expect("send"),
        );
    }
    producer.flush(Duration::from_secs(60)).await.expect("flush");
    for a in acks {
        a.await.expect("delivered");
    }
}

/// Polls until `want` values arrived (bounded: 90 s), returning them.
async fn poll_values(consumer: &mut Consumer, want: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut out = Vec::new();
    while out.len() < want {
        assert!(Instant::now() < deadline, "{} of {want} records after 90 s", out.len());
        for r in consumer.poll(Duration::from_millis(500)).await.expect("poll") {
            out.push(String::from_utf8_lossy(r.record.value.as_deref().unwrap_or(b"")).into_owned());
        }
    }
    out
}

/// acks=1, not idempotent: writes the leader alone takes.
async fn leader_only_producer(cluster: &clink_kafka::client::Cluster) -> Producer {
    let config = ProducerConfig::default().with_acks(Acks::Leader).with_idempotent(false);
    Producer::new(cluster.clone(), config).await.expect("producer")
}

fn records_from(counts: &BTreeMap<i32, clink_kafka::client::FetchCounts>, broker: i32) -> u64 {
    counts.get(&broker).map_or(0, |c| c.partitions_with_records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_aware_consumer_fetches_from_the_follower_in_its_rack_and_falls_back_to_the_leader() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-rack");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 3)).await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;
    let leader = kc::leader(&cluster, &topic, 0).await;
    let follower = leader % kc::BROKERS + 1;
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    const FIRST: usize = 3_000;
    produce_all(&producer, &topic, (0..FIRST).map(|i| format!("r{i}"))).await;

    let mut consumer = Consumer::new(
        cluster.clone(),
        ConsumerConfig::default()
            .with_client_rack(format!("rack-{follower}"))
            // Small answers: many fetches, each counted.
            .with_partition_max_bytes(16 * 1024),
    );
    consumer.assign(&[TopicPartition::new(&topic, 0)]);
    consumer.seek(&topic, 0, Offset::Earliest).await.expect("seek");
    let mut values = poll_values(&mut consumer, FIRST).await;
    let counts = consumer.fetch_counts();
    eprintln!("leader {leader}, client in rack-{follower}: fetch counts {counts:?}");
    assert_eq!(consumer.preferred_replica(&topic, 0), Some(follower));
    // At least one answer with records: the producer may have put all
    // FIRST records in one batch, which one answer carries whole.
    assert!(
        records_from(&counts, follower) >= 1,
        "the follower in the client's rack served the records: {counts:?}"
    );
    assert_eq!(
        records_from(&counts, leader),
        0,
        "the leader named the follower and served no records: {counts:?}"
    );

    // The follower goes away: the leader serves the rest.
    kc::stop(follower).await;
    const SECOND: usize = 2_000;
    produce_all(&producer, &topic, (FIRST..FIRST + SECOND).map(|i| format!("r{i}"))).await;
    values.extend(poll_values(&mut consumer, SECOND).await);
    let after = consumer.fetch_counts();
    eprintln!("follower {follower} stopped: fetch counts {after:?}");
    assert!(
        records_from(&after, leader) > 0,
        "the leader served once the follower was gone: {after:?}"
    );
    let expected: Vec<String> = (0..FIRST + SECOND).map(|i| format!("r{i}")).collect();
    assert_eq!(values, expected, "every record once, in order");
    assert!(consumer
        .poll(Duration::from_millis(500))
        .await
        .expect("poll")
        .is_empty());
    // Every record was acknowledged above; a close racing the stopped
    // broker's metadata is not what this test is about.
    if let Err(e) = producer.close(Duration::from_secs(30)).await {
        eprintln!("producer close with broker {follower} stopped: {e}");
    }
}

/// Runs Kafka's LeaderElectionCommand (unclean) for `topic[0]`; a failure
/// (the controller elected one meanwhile) is only printed.
fn elect_uncleanly(bootstrap: &str, topic: &str) {
    let Some(tools) = common::process::kafka_tools() else {
        return;
    };
    let mut cmd = std::process::Command::new(tools);
    cmd.args([
        "tool",
        "org.apache.kafka.tools.LeaderElectionCommand",
        "--bootstrap-server",
        bootstrap,
    ])
    .args(["--election-type", "unclean", "--topic", topic, "--partition", "0"]);
    if let Ok(home) = std::env::var("CLINK_KAFKA_CLUSTER_HOME") {
        cmd.env("KAFKA_LOCAL_HOME", home);
    }
    match cmd.output() {
        Ok(o) => eprintln!(
            "unclean election: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("unclean election tool: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_truncated_by_an_unclean_election_is_detected_never_silently_reread_or_skipped() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-truncate");
    common::create_topic(
        &cluster,
        NewTopic::new(&topic, 1, 3)
            .with_config("unclean.leader.election.enable", "true")
            .with_config("min.insync.replicas", "1"),
    )
    .await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;
    let leader = kc::leader(&cluster, &topic, 0).await;
    let stale = leader % kc::BROKERS + 1;
    let other = stale % kc::BROKERS + 1;
    assert!(leader != other);

    // 100 records on every replica.
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    produce_all(&producer, &topic, (0..100).map(|i| format!("replicated-{i}"))).await;
    producer.close(Duration::from_secs(30)).await.expect("close");
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;
    // The followers stop; 50 more on the leader alone (acks=1).
    kc::stop(stale).await;
    kc::stop(other).await;
    let lonely = leader_only_producer(&cluster).await;
    produce_all(&lonely, &topic, (100..150).map(|i| format!("unreplicated-{i}"))).await;
    lonely.close(Duration::from_secs(30)).await.expect("close");

    // Two consumers read all 150 from the leader: one with a reset policy,
    // one without.
    let consumer =
        |reset: Option<Offset>| Consumer::new(cluster.clone(), ConsumerConfig::default().with_auto_offset_reset(reset));
    let mut resetting = consumer(Some(Offset::Earliest));
    let mut strict = consumer(None);
    for c in [&mut resetting, &mut strict] {
        c.assign(&[TopicPartition::new(&topic, 0)]);
        c.seek(&topic, 0, Offset::Earliest).await.expect("seek");
        let got = poll_values(c, 150).await;
        assert_eq!(got.last().map(String::as_str), Some("unreplicated-149"));
    }

    // The leader dies with the only copy of 100..150; the stale follower
    // comes back and is elected uncleanly.
    kc::kill(leader).await;
    kc::start(stale).await;
    let started = Instant::now();
    let mut asked = false;
    let new_leader = loop {
        let r = kc::replicas(&cluster, &topic).await;
        if let Some(p) = r.first().filter(|p| p.leader == stale) {
            break p.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "broker {stale} was not elected: {r:?}"
        );
        if !asked && started.elapsed() > Duration::from_secs(12) {
            asked = true;
            let bootstrap = brokers
                .split(',')
                .nth((stale - 1) as usize)
                .unwrap_or(&brokers)
                .to_owned();
            let t = topic.clone();
            tokio::task::spawn_blocking(move || elect_uncleanly(&bootstrap, &t))
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("broker {leader} killed; broker {stale} leads uncleanly: {new_leader:?}");
    // The new leader's log ends at 100; new records take offsets 100.. there.
    let producer = leader_only_producer(&cluster).await;
    produce_all(&producer, &topic, (0..20).map(|i| format!("after-{i}"))).await;
    producer.close(Duration::from_secs(30)).await.expect("close");

    // With a reset policy: moved back to the divergence (100), reported,
    // and the new leader's records arrive, each once.
    let got = poll_values(&mut resetting, 20).await;
    let expected: Vec<String> = (0..20).map(|i| format!("after-{i}")).collect();
    assert_eq!(got, expected, "the new leader's records from the divergence, once");
    let truncations = resetting.log_truncations().to_vec();
    eprintln!("detected: {truncations:?}");
    let [t] = &truncations[..] else {
        panic!("one truncation reported: {truncations:?}")
    };
    assert_eq!(
        (t.partition, t.position, t.divergent_offset, t.reset),
        (0, 150, 100, true)
    );
    assert_eq!(&*t.topic, topic);
    assert_eq!(resetting.position(&topic, 0), Some(120));

    // Without one: an error naming topic, partition and both offsets, and
    // the position kept.
    let deadline = Instant::now() + Duration::from_secs(90);
    let error = loop {
        assert!(Instant::now() < deadline, "no truncation error within 90 s");
        match strict.poll(Duration::from_millis(500)).await {
            Ok(records) => assert!(records.is_empty(), "records past a truncation: {records:?}"),
            Err(e) => break e,
        }
    };
    eprintln!("without a reset policy: {error}");
    match &error {
        Error::LogTruncation {
            topic: t,
            partition: 0,
            position: 150,
            divergent_offset: 100,
        } if *t == topic => {}
        other => panic!("expected a log truncation error: {other}"),
    }
    let text = error.to_string();
    assert!(
        text.contains(&format!("{topic}[0]")) && text.contains("150") && text.contains("100"),
        "{text}"
    );
    assert_eq!(strict.position(&topic, 0), Some(150));
    assert!(strict
        .poll(Duration::from_millis(300))
        .await
        .expect("stopped, quiet")
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_network_partition_from_one_broker_loses_and_duplicates_nothing() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let direct = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-netsplit");
    common::create_topic(&direct, NewTopic::new(&topic, PARTITIONS, 3)).await;
    kc::wait_in_sync(&direct, &topic, Duration::from_secs(60)).await;
    let nodes: Vec<(i32, String)> = direct
        .metadata()
        .brokers
        .values()
        .map(|b| (b.node_id, b.addr()))
        .collect();
    let proxy = ClusterProxy::start(&nodes).await;
    let mut config = kc::config(&proxy.bootstrap());
    config.request_timeout = Duration::from_secs(4);
    config.connect_timeout = Duration::from_secs(2);
    let cluster = common::cluster(config).await;

    let reader = OrderedReader::start(cluster.clone(), topic.clone(), "across a network partition");
    let producer = Arc::new(
        Producer::new(
            cluster.clone(),
            ProducerConfig::default().with_delivery_timeout(Duration::from_secs(120)),
        )
        .await
        .expect("producer"),
    );
    let run = PacedProducer::start(producer.clone(), topic.clone(), 200, 40_000);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The reader must be under way before the cut (bounded): right after
    // another cluster test it may still be starting, and then "nothing
    // consumed during the cut" would say nothing about the partition.
    let warm = Instant::now() + Duration::from_secs(60);
    while reader.read() == 0 {
        assert!(Instant::now() < warm, "the reader has read nothing after 60 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let cut = kc::leader(&direct, &topic, 0).await;
    let others: Vec<i32> = kc::replicas(&direct, &topic)
        .await
        .iter()
        .filter(|r| r.leader != cut)
        .map(|r| r.partition)
        .collect();
    proxy.set_partitioned(cut, true);
    let read_at_cut = reader.read();
    eprintln!("client cut off from broker {cut} (partitions led elsewhere: {others:?})");
    // Each second: what was consumed and where the logs end (read around
    // the proxy), so a stall shows whose it is.
    let probe = Consumer::new(direct.clone(), ConsumerConfig::default());
    for second in 1..=12 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut ends = Vec::new();
        for p in 0..PARTITIONS {
            ends.push(probe.list_offset(&topic, p, Offset::Latest).await.unwrap_or(-1));
        }
        eprintln!("{second} s into the cut: {} consumed, log ends {ends:?}", reader.read());
    }
    let read_during = reader.read() - read_at_cut;
    proxy.set_partitioned(cut, false);
    eprintln!("healed after 12 s; {read_during} records consumed meanwhile");

    let counts = run.finish_and_close(producer).await;
    let total: usize = counts.iter().sum();
    let consumed = reader.finish(total).await;
    eprintln!("network partition of 12 s from broker {cut}: {total} records produced ({counts:?}), {consumed} consumed in order");
    assert_eq!(consumed, total);
    if !others.is_empty() {
        assert!(
            read_during > 0,
            "the partitions led by other brokers kept flowing during the partition"
        );
    }
    check_exactly_once_in_order(&direct, &topic, &counts).await;
}

/// Issue 14 (found with the test above): while one broker is cut off, the
/// partitions the other brokers lead keep arriving, in every window of the
/// cut — the consumer's polls are never held by the connect to the
/// unreachable broker (a connect is bounded by `connect_timeout` and runs
/// in the background). The producer writes around the proxy, so only the
/// consumer sees the partition. Fails with the connect in the poll path:
/// once the first fetch to the cut broker times out (`request_timeout`
/// 5 s), every poll waits out a 10 s `connect_timeout` first, and the
/// windows after it see nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_cut_off_from_one_broker_keeps_reading_the_partitions_the_others_lead() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const WINDOWS: usize = 5;
    const WINDOW: Duration = Duration::from_secs(3);

    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let direct = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-netsplit-consumer");
    common::create_topic(&direct, NewTopic::new(&topic, PARTITIONS, 3)).await;
    kc::wait_in_sync(&direct, &topic, Duration::from_secs(60)).await;
    let nodes: Vec<(i32, String)> = direct
        .metadata()
        .brokers
        .values()
        .map(|b| (b.node_id, b.addr()))
        .collect();
    let proxy = ClusterProxy::start(&nodes).await;
    let mut config = kc::config(&proxy.bootstrap());
    config.request_timeout = Duration::from_secs(5);
    config.connect_timeout = Duration::from_secs(10);
    let proxied = common::cluster(config).await;

    let producer = Arc::new(
        Producer::new(direct.clone(), ProducerConfig::default())
            .await
            .expect("producer"),
    );
    let run = PacedProducer::start(producer.clone(), topic.clone(), 60, 0);

    // The reader: every record once and in order, its progress per partition.
    let progress: Arc<Vec<AtomicUsize>> = Arc::new((0..PARTITIONS).map(|_| AtomicUsize::new(0)).collect());
    let want = Arc::new(AtomicUsize::new(usize::MAX));
    let reader = {
        let (progress, want, topic) = (progress.clone(), want.clone(), topic.clone());
        tokio::spawn(async move {
            let mut consumer = Consumer::new(proxied, ConsumerConfig::default());
            let assignment: Vec<TopicPartition> = (0..PARTITIONS)
                .map(|p| TopicPartition::new(topic.as_str(), p))
                .collect();
            consumer.assign(&assignment);
            consumer.seek_all(Offset::Earliest).await.expect("seek");
            let deadline = Instant::now() + Duration::from_secs(180);
            loop {
                let total: usize = progress.iter().map(|n| n.load(Ordering::Acquire)).sum();
                if total >= want.load(Ordering::Acquire) {
                    return total;
                }
                assert!(
                    Instant::now() < deadline,
                    "the consumer has {total} records after 180 s"
                );
                for r in consumer.poll(Duration::from_millis(500)).await.expect("poll") {
                    let p = r.partition as usize;
                    let n = progress[p].load(Ordering::Acquire);
                    let value = String::from_utf8_lossy(r.record.value.as_deref().unwrap_or(b"")).into_owned();
                    assert_eq!(value, format!("p{p}-{n}"), "partition {p} offset {}", r.record.offset);
                    progress[p].store(n + 1, Ordering::Release);
                }
            }
        })
    };
    let snapshot = || -> Vec<usize> { progress.iter().map(|n| n.load(Ordering::Acquire)).collect() };

    // Warm up: every partition has arrived (bounded).
    let warm = Instant::now() + Duration::from_secs(60);
    while snapshot().contains(&0) {
        assert!(
            Instant::now() < warm,
            "partitions not read after 60 s: {:?}",
            snapshot()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let cut = kc::leader(&direct, &topic, 0).await;
    let others: Vec<usize> = kc::replicas(&direct, &topic)
        .await
        .iter()
        .filter(|r| r.leader != cut)
        .map(|r| r.partition as usize)
        .collect();
    assert!(!others.is_empty(), "every partition is led by broker {cut}");
    proxy.set_partitioned(cut, true);
    eprintln!("consumer cut off from broker {cut}; partitions led elsewhere: {others:?}");
    let mut stalled = Vec::new();
    for window in 0..WINDOWS {
        let before = snapshot();
        tokio::time::sleep(WINDOW).await;
        let after = snapshot();
        let idle: Vec<usize> = others.iter().copied().filter(|p| after[*p] == before[*p]).collect();
        eprintln!(
            "window {window}: records per partition led elsewhere {:?}",
            others.iter().map(|p| after[*p] - before[*p]).collect::<Vec<_>>()
        );
        if !idle.is_empty() {
            stalled.push((window, idle));
        }
    }
    proxy.set_partitioned(cut, false);
    eprintln!("healed after {} s", WINDOWS as u64 * WINDOW.as_secs());

    let counts = run.finish_and_close(producer).await;
    let total: usize = counts.iter().sum();
    want.store(total, Ordering::Release);
    let consumed = reader.await.expect("the reading task");
    assert_eq!(consumed, total, "every record once and in order after healing");
    assert!(
        stalled.is_empty(),
        "while broker {cut} was cut off, partitions led by other brokers got no record in these \
         {}-second windows (window, partitions) of {WINDOWS}: {stalled:?}",
        WINDOW.as_secs()
    );
}
