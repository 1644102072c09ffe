//! The group consumer backend (`GroupConsumerBackend`) on the backend
//! `CLINK_KAFKA_TEST_BACKEND` names (native, or rdkafka in the parity
//! pass), under both group protocols (classic and KIP-848 `consumer`),
//! against the main broker:
//! - two members split a 4-partition topic (each hears `Assigned`),
//!   together read every record exactly once, commit; one closes and the
//!   other takes its partitions over, resuming from its committed offsets;
//!   a new member of the group resumes from the committed offsets too
//!   (checked against a native OffsetFetch);
//! - consume-transform-produce with `send_offsets` (KIP-447, the member's
//!   group metadata) inside a transaction: committed, the group's offsets
//!   advance; aborted, they do not.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use clink_kafka::client::{
    ConsumerConfig, GroupConsumerConfig, GroupOffsets, GroupProtocol, NewTopic, Offset, RebalanceEvent, Subscription,
    TopicPartition, TopicPartitionOffset,
};
use clink_kafka::connector::options::{parse_sink, parse_source, FactoryKind};
use clink_kafka::connector::selected::{SelectedGroupConsumer, SelectedTransactionalProducer};
use clink_kafka::connector::KafkaMessage;
use clink_kafka::connector::{GroupConsumerBackend, GroupRecord, ProducerBackend, TransactionalProducerBackend};

const T: Duration = Duration::from_secs(30);

fn member(brokers: &str, topic: &str, group: &str, protocol: GroupProtocol) -> SelectedGroupConsumer {
    let params: BTreeMap<String, String> = common::connector::connector_params(brokers, topic, &[])
        .into_iter()
        .collect();
    let options = parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap();
    let mut fetch = ConsumerConfig::default();
    fetch.auto_offset_reset = Some(Offset::Earliest);
    let config = GroupConsumerConfig::new(group)
        .with_protocol(protocol)
        .with_session_timeout(Duration::from_secs(6))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_max_poll_interval(Duration::from_secs(20))
        .with_enable_auto_commit(false)
        .with_consumer(fetch);
    SelectedGroupConsumer::for_options(&options, config).unwrap()
}

async fn joined(brokers: &str, topic: &str, group: &str, protocol: GroupProtocol) -> SelectedGroupConsumer {
    let mut m = member(brokers, topic, group, protocol);
    m.connect().await.unwrap();
    m.subscribe(&Subscription::Topics(vec![topic.to_owned()])).unwrap();
    m
}

/// What one member saw.
#[derive(Default)]
struct Seen {
    events: Vec<RebalanceEvent>,
    records: Vec<GroupRecord>,
}

impl Seen {
    async fn poll(&mut self, m: &mut SelectedGroupConsumer) {
        let b = m.poll_events(Duration::from_millis(100)).await.unwrap();
        self.events.extend(b.events);
        self.records.extend(b.records);
    }

    fn assigned(&self) -> BTreeSet<TopicPartition> {
        self.events
            .iter()
            .filter_map(|e| match e {
                RebalanceEvent::Assigned(p) => Some(p.clone()),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The next offset per partition after what was read.
    fn positions(&self) -> Vec<TopicPartitionOffset> {
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for r in &self.records {
            let e = next.entry((r.topic.to_string(), r.message.partition)).or_default();
            *e = (*e).max(r.message.offset + 1);
        }
        next.into_iter()
            .map(|((t, p), o)| TopicPartitionOffset::new(t, p, o))
            .collect()
    }
}

fn set(v: Vec<TopicPartition>) -> BTreeSet<TopicPartition> {
    v.into_iter().collect()
}

async fn produce(brokers: &str, topic: &str, partitions: i32, per_partition: usize, tag: &str) {
    let cluster = common::cluster(common::config(brokers)).await;
    for p in 0..partitions {
        let values: Vec<String> = (0..per_partition).map(|i| format!("{tag}-{p}-{i}")).collect();
        common::connector::produce_values(&cluster, topic, Some(p), &values).await;
    }
}

async fn group_committed(brokers: &str, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let cluster = common::cluster(common::config(brokers)).await;
    let tps: Vec<TopicPartition> = (0..partitions).map(|p| TopicPartition::new(topic, p)).collect();
    let got = GroupOffsets::new(cluster, group)
        .unwrap()
        .fetch(&tps, true)
        .await
        .unwrap();
    tps.iter()
        .map(|tp| got.get(tp).cloned().flatten().map(|c| c.offset))
        .collect()
}

async fn split_commit_and_take_over(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("grp-backend");
    let group = format!("{topic}-g");
    common::create_topic(&cluster, NewTopic::new(&topic, 4, 1)).await;
    let all: BTreeSet<TopicPartition> = (0..4).map(|p| TopicPartition::new(&topic, p)).collect();

    let mut a = joined(&brokers, &topic, &group, protocol).await;
    let mut b = joined(&brokers, &topic, &group, protocol).await;
    let (mut sa, mut sb) = (Seen::default(), Seen::default());
    // Both hold a share: disjoint, together every partition.
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        sa.poll(&mut a).await;
        sb.poll(&mut b).await;
        let (pa, pb) = (set(a.assignment().unwrap()), set(b.assignment().unwrap()));
        if !pa.is_empty()
            && !pb.is_empty()
            && pa.is_disjoint(&pb)
            && pa.union(&pb).cloned().collect::<BTreeSet<_>>() == all
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{protocol:?}: no stable split within 40 s: {pa:?} / {pb:?}"
        );
    }
    let (pa, pb) = (set(a.assignment().unwrap()), set(b.assignment().unwrap()));
    assert!(
        pa.is_subset(&sa.assigned()),
        "{protocol:?}: A's partitions came in Assigned events: {:?}",
        sa.events
    );
    assert!(
        pb.is_subset(&sb.assigned()),
        "{protocol:?}: B's partitions came in Assigned events: {:?}",
        sb.events
    );

    // Every record exactly once, each from its reader's partitions.
    produce(&brokers, &topic, 4, 25, "one").await;
    let deadline = Instant::now() + T;
    while sa.records.len() + sb.records.len() < 100 {
        sa.poll(&mut a).await;
        sb.poll(&mut b).await;
        assert!(
            Instant::now() < deadline,
            "{protocol:?}: {} + {} of 100",
            sa.records.len(),
            sb.records.len()
        );
    }
    sa.poll(&mut a).await;
    sb.poll(&mut b).await;
    let mut values = BTreeSet::new();
    for (seen, owned) in [(&sa, &pa), (&sb, &pb)] {
        for r in &seen.records {
            assert!(
                owned.contains(&TopicPartition::new(&*r.topic, r.message.partition)),
                "{protocol:?}"
            );
            assert!(
                values.insert(r.message.payload.clone()),
                "{protocol:?}: read twice: {:?}",
                r.message
            );
        }
    }
    assert_eq!(values.len(), 100, "{protocol:?}");

    // Commit; A leaves, B takes its partitions over from A's offsets.
    a.commit(&sa.positions()).await.unwrap();
    b.commit(&sb.positions()).await.unwrap();
    a.close().await.unwrap();
    let before = sb.records.len();
    let deadline = Instant::now() + Duration::from_secs(40);
    while set(b.assignment().unwrap()) != all {
        sb.poll(&mut b).await;
        assert!(
            Instant::now() < deadline,
            "{protocol:?}: B did not take A's partitions: {:?}",
            sb.events
        );
    }
    assert!(
        pa.is_subset(&sb.assigned()),
        "{protocol:?}: A's partitions came to B in Assigned events: {:?}",
        sb.events
    );
    produce(&brokers, &topic, 4, 10, "two").await;
    let deadline = Instant::now() + T;
    while sb.records.len() < before + 40 {
        sb.poll(&mut b).await;
        assert!(
            Instant::now() < deadline,
            "{protocol:?}: {} of 40 after the takeover",
            sb.records.len() - before
        );
    }
    sb.poll(&mut b).await;
    let after: Vec<&GroupRecord> = sb.records[before..].iter().collect();
    assert_eq!(after.len(), 40, "{protocol:?}: nothing read twice after the takeover");
    assert!(
        after.iter().all(|r| r.message.offset >= 25),
        "{protocol:?}: resumed from the committed offsets"
    );
    b.commit(&sb.positions()).await.unwrap();
    let committed = b.committed(&all.iter().cloned().collect::<Vec<_>>()).await.unwrap();
    assert!(
        committed.values().all(|o| *o == Some(35)),
        "{protocol:?}: {committed:?}"
    );
    b.close().await.unwrap();
    assert_eq!(
        group_committed(&brokers, &group, &topic, 4).await,
        vec![Some(35); 4],
        "{protocol:?}: OffsetFetch"
    );

    // A new member resumes from the committed offsets.
    produce(&brokers, &topic, 4, 5, "three").await;
    let mut c = joined(&brokers, &topic, &group, protocol).await;
    let mut sc = Seen::default();
    let deadline = Instant::now() + Duration::from_secs(40);
    while sc.records.len() < 20 {
        sc.poll(&mut c).await;
        assert!(
            Instant::now() < deadline,
            "{protocol:?}: {} of 20 for the new member",
            sc.records.len()
        );
    }
    sc.poll(&mut c).await;
    assert_eq!(sc.records.len(), 20, "{protocol:?}");
    assert!(sc.records.iter().all(|r| r.message.offset >= 35), "{protocol:?}");
    c.close().await.unwrap();
}

/// Begins a transaction with one output record per input record, flushed.
async fn transform(producer: &mut SelectedTransactionalProducer, output: &str, records: &[GroupRecord]) {
    producer.begin_transaction().unwrap();
    for r in records {
        let msg = KafkaMessage::new(format!("{:?}", r.message.payload));
        producer.send(output, Some(0), msg).await.unwrap();
    }
    producer.flush(T).await.unwrap();
}

async fn send_offsets_follow_the_transaction(protocol: GroupProtocol) {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let input = common::unique_topic("grp-backend-in");
    let output = format!("{input}-out");
    let group = format!("{input}-g");
    common::create_topic(&cluster, NewTopic::new(&input, 2, 1)).await;
    common::create_topic(&cluster, NewTopic::new(&output, 1, 1)).await;
    produce(&brokers, &input, 2, 10, "in").await;

    let mut m = joined(&brokers, &input, &group, protocol).await;
    let mut seen = Seen::default();
    let deadline = Instant::now() + Duration::from_secs(40);
    while seen.records.len() < 20 {
        seen.poll(&mut m).await;
        assert!(Instant::now() < deadline, "{protocol:?}: {} of 20", seen.records.len());
    }
    let params: BTreeMap<String, String> = common::connector::connector_params(&brokers, &output, &[])
        .into_iter()
        .collect();
    let sink = parse_sink(FactoryKind::MessageSink, &params).unwrap();
    let mut producer = SelectedTransactionalProducer::for_options(&sink).unwrap();
    producer.connect().await.unwrap();
    producer
        .init_transactions(&format!("{input}-txn"), Duration::from_secs(60))
        .await
        .unwrap();

    transform(&mut producer, &output, &seen.records).await;
    let meta = m.group_metadata().expect("a member in a generation has group metadata");
    assert_eq!(meta.group_id(), group);
    producer.send_offsets(&seen.positions(), &meta, T).await.unwrap();
    producer.commit_transaction(T).await.unwrap();
    assert_eq!(
        group_committed(&brokers, &group, &input, 2).await,
        vec![Some(10); 2],
        "{protocol:?}: committed with the transaction"
    );

    // The next batch's transaction is aborted: the offsets stay.
    produce(&brokers, &input, 2, 5, "more").await;
    let mut next = Seen::default();
    let deadline = Instant::now() + T;
    while next.records.len() < 10 {
        next.poll(&mut m).await;
        assert!(Instant::now() < deadline, "{protocol:?}: {} of 10", next.records.len());
    }
    transform(&mut producer, &output, &next.records).await;
    let meta = m.group_metadata().unwrap();
    producer.send_offsets(&next.positions(), &meta, T).await.unwrap();
    producer.abort_transaction(T).await.unwrap();
    assert_eq!(
        group_committed(&brokers, &group, &input, 2).await,
        vec![Some(10); 2],
        "{protocol:?}: aborted, not committed"
    );
    producer.close(T).await.unwrap();
    m.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_members_split_commit_and_take_over() {
    split_commit_and_take_over(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_members_split_commit_and_take_over() {
    split_commit_and_take_over(GroupProtocol::Consumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_send_offsets_follow_the_transaction() {
    send_offsets_follow_the_transaction(GroupProtocol::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_send_offsets_follow_the_transaction() {
    send_offsets_follow_the_transaction(GroupProtocol::Consumer).await;
}

/// Each backend's producer takes only its own consumer's group metadata.
#[cfg(feature = "rdkafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_refuses_the_other_backends_group_metadata() {
    use clink_kafka::client::ProducerConfig;
    use clink_kafka::connector::rdkafka::RdkafkaGroupConsumer;
    use clink_kafka::connector::NativeTransactionalProducer;
    let Some(brokers) = common::brokers() else { return };
    let params: BTreeMap<String, String> = common::connector::connector_params(&brokers, "t", &[])
        .into_iter()
        .collect();
    let options = parse_source(FactoryKind::MessageSource, &params, 0, 1).unwrap();
    let mut rd = RdkafkaGroupConsumer::new(&options, GroupConsumerConfig::new("g-refused")).unwrap();
    rd.connect().await.unwrap();
    let meta = rd.group_metadata().expect("librdkafka always has group metadata");
    let mut native = NativeTransactionalProducer::new(common::config(&brokers), ProducerConfig::default());
    let e = native
        .send_offsets(&[TopicPartitionOffset::new("t", 0, 1)], &meta, T)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("librdkafka's group metadata"), "{e}");
    rd.close().await.unwrap();
}
