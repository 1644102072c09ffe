//! The client on a real three-broker cluster (`scripts/kafka-local up
//! --cluster 3`: replication factor 3, `min.insync.replicas=2`) while brokers
//! die: the idempotent producer with the leader of each partition SIGKILLed
//! in turn. Every record must land exactly once and in order in its
//! partition; the stall each kill causes is measured and printed (not
//! asserted: benchmarks measure, tests assert).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clink_kafka::client::{
    Consumer, ConsumerConfig, IsolationLevel, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord,
    TopicPartition, TransactionalProducer, TxnConfig, Watermarks,
};
use common::cluster::{self as kc, ClusterLock};

use common::cluster::{check_exactly_once_in_order, stall, OrderedReader, PacedProducer, PARTITIONS};

/// The idempotent producer (acks=all) while the leader of each partition is
/// SIGKILLed in turn and started again: every record once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_loses_and_duplicates_nothing_when_leaders_are_killed() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-idem");
    common::create_topic(&cluster, NewTopic::new(&topic, PARTITIONS, 3)).await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;

    let producer = Arc::new(
        Producer::new(
            cluster.clone(),
            ProducerConfig::default()
                .with_acks(clink_kafka::client::Acks::All)
                .with_idempotent(true)
                .with_batch_size(16 * 1024),
        )
        .await
        .expect("producer"),
    );
    // 3,000 records a second (about 100 bytes each with overhead) for as
    // long as the kills last, and at least 150,000 in all (CI's size).
    // CLINK_KAFKA_FAILOVER_RECORDS=1000000 is the full size: the
    // pace rises so the run still lasts about 40 s.
    let records: usize = std::env::var("CLINK_KAFKA_FAILOVER_RECORDS")
        .ok()
        .map(|v| v.parse().expect("CLINK_KAFKA_FAILOVER_RECORDS: a record count"))
        .unwrap_or(150_000);
    let per_tick = (records / 400).max(300);
    let started = Instant::now();
    let run = PacedProducer::start(producer.clone(), topic.clone(), per_tick, records);
    // Under way (every partition acknowledged a record) before the first kill.
    let all: Vec<i32> = (0..PARTITIONS).collect();
    assert!(
        run.recovered(&all, started, Duration::from_secs(60)).await,
        "the producer was not under way within 60 s"
    );

    // The leader of each partition in turn, unless that partition already
    // lost its leader in this run.
    let mut lost_leader = [false; PARTITIONS as usize];
    let mut kills: Vec<(i32, Vec<i32>, Instant)> = Vec::new();
    for p in 0..PARTITIONS {
        if lost_leader[p as usize] {
            continue;
        }
        let r = kc::replicas(&cluster, &topic).await;
        let leader = r[p as usize].leader;
        assert!(leader > 0, "partition {p} has no leader: {r:?}");
        let led: Vec<i32> = r.iter().filter(|x| x.leader == leader).map(|x| x.partition).collect();
        for &q in &led {
            lost_leader[q as usize] = true;
        }
        kc::kill(leader).await;
        // From the moment the process is gone.
        let at = Instant::now();
        eprintln!("killed broker {leader}, leader of partitions {led:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        kc::start(leader).await;
        kc::wait_in_sync(&cluster, &topic, Duration::from_secs(120)).await;
        // One failover at a time: the next kill waits until this one's
        // partitions take records again, so each stall measured is one kill's.
        assert!(
            run.recovered(&led, at, Duration::from_secs(120)).await,
            "partitions {led:?} took no record for 120 s after broker {leader} was killed"
        );
        kills.push((leader, led, at));
    }
    let logs = run.finish().await;
    let counts: Vec<usize> = logs.iter().map(Vec::len).collect();
    let total: usize = counts.iter().sum();
    let producer = Arc::into_inner(producer).expect("the producing task is done");
    producer.close(Duration::from_secs(30)).await.expect("close");

    for (broker, led, at) in &kills {
        match stall(&logs, led, *at) {
            Some(s) => eprintln!(
                "kill of broker {broker} (leader of {led:?}): stall {:.1} s",
                s.as_secs_f64()
            ),
            None => eprintln!("kill of broker {broker} (leader of {led:?}): no record sent after it"),
        }
    }
    eprintln!(
        "{total} records over {PARTITIONS} partitions ({counts:?}), {} broker kills",
        kills.len()
    );
    assert!(kills.len() >= 2, "the leaders must move at least twice: {kills:?}");
    check_exactly_once_in_order(&cluster, &topic, &counts).await;
}

/// A read_committed consumer reads while a transactional producer commits
/// and aborts transactions across 6 partitions and the leader of partition 0
/// (and so of about a third of the partitions) is SIGKILLed and started
/// again: every committed record arrives
/// exactly once, no aborted one at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_consumer_sees_every_committed_record_once_while_leaders_move() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-rc");
    common::create_topic(&cluster, NewTopic::new(&topic, PARTITIONS, 3)).await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;

    // The reader: from the start, until told how many committed records to
    // expect, has them, and stands at the end of every partition.
    let expected = Arc::new(std::sync::atomic::AtomicUsize::new(usize::MAX));
    let reader = {
        let (cluster, topic, expected) = (cluster.clone(), topic.clone(), expected.clone());
        tokio::spawn(async move {
            let mut consumer = Consumer::new(
                cluster,
                ConsumerConfig::default().with_isolation(IsolationLevel::ReadCommitted),
            );
            let assignment: Vec<TopicPartition> = (0..PARTITIONS)
                .map(|p| TopicPartition::new(topic.as_str(), p))
                .collect();
            consumer.assign(&assignment);
            consumer.seek_all(Offset::Earliest).await.expect("seek");
            let deadline = Instant::now() + Duration::from_secs(300);
            let mut values = Vec::new();
            loop {
                let want = expected.load(Ordering::Acquire);
                let at_end = (0..PARTITIONS).all(|p| {
                    matches!((consumer.watermarks(&topic, p), consumer.position(&topic, p)),
                        (Some(Watermarks { high_watermark: hw, last_stable_offset: lso }), Some(pos)) if lso == hw && pos >= lso)
                });
                if values.len() >= want && at_end {
                    return values;
                }
                assert!(
                    Instant::now() < deadline,
                    "the reader has {} of {want} records after 300 s",
                    values.len()
                );
                let records = consumer
                    .poll(Duration::from_millis(500))
                    .await
                    .unwrap_or_else(|e| panic!("read_committed poll while leaders move: {e}"));
                for r in records {
                    values.push(String::from_utf8_lossy(r.record.value.as_deref().unwrap_or(b"")).into_owned());
                }
            }
        })
    };

    // The writer: transactions of 60 records (10 a partition); every third
    // one aborted. Runs until the kills are over.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (cluster, topic, stop) = (cluster.clone(), topic.clone(), stop.clone());
        tokio::spawn(async move {
            let mut producer = TransactionalProducer::init(
                cluster,
                ProducerConfig::default(),
                TxnConfig::new(common::unique_topic("cluster-rc-txn")),
            )
            .await
            .expect("transactional producer");
            let mut committed = 0usize;
            let mut txn = 0usize;
            while txn < 20 || !stop.load(Ordering::Acquire) {
                let abort = txn % 3 == 2;
                let t = producer.begin().await.expect("begin");
                for i in 0..60 {
                    let value = format!("{}-{txn}-{i}", if abort { "aborted" } else { "committed" });
                    let record = ProducerRecord::new(topic.as_str(), value).with_partition(i % PARTITIONS);
                    t.send(record)
                        .await
                        .unwrap_or_else(|e| panic!("send in transaction {txn}: {e}"));
                }
                if abort {
                    t.abort()
                        .await
                        .unwrap_or_else(|e| panic!("abort of transaction {txn}: {e}"));
                } else {
                    t.commit()
                        .await
                        .unwrap_or_else(|e| panic!("commit of transaction {txn}: {e}"));
                    committed += 60;
                }
                txn += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            producer.close().await.expect("close");
            (txn, committed)
        })
    };

    tokio::time::sleep(Duration::from_secs(2)).await;
    let leader = kc::leader(&cluster, &topic, 0).await;
    assert!(leader > 0, "partition 0 has no leader");
    kc::kill(leader).await;
    let kills = 1;
    eprintln!("killed broker {leader}, leader of partition 0");
    tokio::time::sleep(Duration::from_secs(3)).await;
    kc::start(leader).await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(120)).await;
    stop.store(true, Ordering::Release);
    let (transactions, committed) = writer.await.expect("writer");
    expected.store(committed, Ordering::Release);
    let values = reader.await.expect("reader");

    eprintln!(
        "{transactions} transactions ({committed} committed records), {kills} broker kills, {} records read",
        values.len()
    );
    let aborted: Vec<&String> = values.iter().filter(|v| v.starts_with("aborted")).collect();
    assert!(
        aborted.is_empty(),
        "read_committed delivered {} aborted records, e.g. {:?}",
        aborted.len(),
        &aborted[..aborted.len().min(5)]
    );
    let mut seen = std::collections::HashSet::new();
    let duplicates: Vec<&String> = values.iter().filter(|v| !seen.insert(v.as_str())).collect();
    assert!(
        duplicates.is_empty(),
        "{} duplicates, e.g. {:?}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(5)]
    );
    let mut missing = 0;
    for txn in (0..transactions).filter(|t| t % 3 != 2) {
        for i in 0..60 {
            if !seen.contains(format!("committed-{txn}-{i}").as_str()) {
                missing += 1;
            }
        }
    }
    assert_eq!(missing, 0, "{missing} committed records never arrived");
    assert_eq!(values.len(), committed);
}

/// Two of three brokers down: a partition with `min.insync.replicas=2` cannot
/// take acks=all writes (NOT_ENOUGH_REPLICAS, or no leader at all). The
/// producer keeps retrying within its delivery timeout, and the records land
/// once the brokers are back; with a delivery timeout shorter than the
/// outage, the error names the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_enough_replicas_is_retried_until_the_brokers_return() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-ner");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 3)).await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;
    let leader = kc::leader(&cluster, &topic, 0).await;
    let others: Vec<i32> = (1..=kc::BROKERS).filter(|&b| b != leader).collect();

    // Clean stops: the leader stays leader, with an ISR of itself alone.
    for &b in &others {
        kc::stop(b).await;
    }
    eprintln!("brokers {others:?} stopped: {:?}", kc::replicas(&cluster, &topic).await);
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    let short = Producer::new(
        cluster.clone(),
        ProducerConfig::default()
            .with_delivery_timeout(Duration::from_secs(8))
            .with_ack_timeout(Duration::from_secs(4)),
    )
    .await
    .expect("producer with a short delivery timeout");
    let mut acks = Vec::new();
    for i in 0..100 {
        acks.push(
            producer
                .send(ProducerRecord::new(topic.as_str(), format!("r{i}")))
                .await
                .expect("send"),
        );
    }
    let doomed = short
        .send(ProducerRecord::new(topic.as_str(), "doomed"))
        .await
        .expect("send");
    let error = tokio::time::timeout(Duration::from_secs(60), doomed)
        .await
        .expect("the short delivery timeout ends the wait")
        .expect_err("two brokers of three are down: min.insync.replicas=2 cannot be met");
    let text = error.to_string();
    eprintln!("with two brokers down: {text}");
    assert!(
        text.contains("NOT_ENOUGH_REPLICAS") || text.contains("NotEnoughReplicas") || text.contains("not enough"),
        "the error must name the cause: {text}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    for &b in &others {
        kc::start(b).await;
    }
    for (i, ack) in acks.into_iter().enumerate() {
        let report = ack
            .await
            .unwrap_or_else(|e| panic!("record {i} after the brokers returned: {e}"));
        assert_eq!(report.offset, i as i64);
    }
    producer.close(Duration::from_secs(30)).await.expect("close");
    let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, 0, Offset::Earliest, 100).await;
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.record.value.as_deref(), Some(format!("r{i}").as_bytes()));
    }
}

/// A rolling restart: each of the three brokers stopped cleanly (controlled
/// shutdown) and started again, one at a time, while the idempotent
/// producer writes and a consumer reads all 6 partitions. The consumer sees
/// every partition's records in order, each once, and all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_during_produce_and_consume() {
    let Some(brokers) = kc::brokers() else { return };
    let _lock = ClusterLock::take();
    let cluster = common::cluster(kc::config(&brokers)).await;
    let topic = common::unique_topic("cluster-rolling");
    common::create_topic(&cluster, NewTopic::new(&topic, PARTITIONS, 3)).await;
    kc::wait_in_sync(&cluster, &topic, Duration::from_secs(60)).await;

    let reader = OrderedReader::start(cluster.clone(), topic.clone(), "during a rolling restart");

    let producer = Arc::new(
        Producer::new(cluster.clone(), ProducerConfig::default())
            .await
            .expect("producer"),
    );
    let started = Instant::now();
    let run = PacedProducer::start(producer.clone(), topic.clone(), 200, 50_000);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    assert!(
        run.recovered(&all, started, Duration::from_secs(60)).await,
        "the producer was not under way within 60 s"
    );
    for broker in 1..=kc::BROKERS {
        kc::stop(broker).await;
        eprintln!("stopped broker {broker}");
        kc::start(broker).await;
        kc::wait_in_sync(&cluster, &topic, Duration::from_secs(120)).await;
    }
    let counts = run.finish_and_close(producer).await;
    let total: usize = counts.iter().sum();
    let read = reader.finish(total).await;
    eprintln!(
        "rolling restart of {} brokers: {total} records produced, {read} consumed in order",
        kc::BROKERS
    );
    assert_eq!(read, total);
    check_exactly_once_in_order(&cluster, &topic, &counts).await;
}
