//! A partition leader that moves, with scripted peers: two fake brokers on
//! 127.0.0.1 (node 1 and node 2) that answer with kafka-protocol's own
//! response encoders. The single-node Kafka the other tests use cannot move a
//! leader, so this is where "following a leader that moves" is pinned:
//!
//! - the consumer reads offsets 0..5 from node 1, is told
//!   NOT_LEADER_OR_FOLLOWER, refreshes metadata and reads 5..10 from node 2,
//!   in order, with nothing lost or repeated;
//! - the idempotent producer, refused with NOT_LEADER_OR_FOLLOWER by node 1,
//!   resends the same batch (same producer id and sequence) to node 2;
//! - metadata naming a leader (node 3) the broker list has no address for:
//!   consumer and producer refresh and retry until it names one they can
//!   reach — never a panic, nothing lost or repeated.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use clink_kafka::client::{
    ClientConfig, Cluster, Consumer, ConsumerConfig, Offset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use clink_kafka::wire::record::{BatchMeta, DecodeOptions, RecordBatch, RecordBatchEncoder, RecordOut};
use common::scripted::{encode, str};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse, InitProducerIdResponse, ListOffsetsResponse,
    MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOPIC: &str = "moving";
const NOT_LEADER: i16 = 6;

/// The cluster both fake brokers share.
#[derive(Default)]
struct State {
    ports: [u16; 2],
    /// Node id of the current leader of `moving[0]`.
    leader: i32,
    /// Records 0..10, one batch per offset, as the log holds them.
    log: Vec<Bytes>,
    /// (node, api key, partition error) of every Fetch/Produce answered.
    answers: Vec<(i32, i16, i16)>,
    /// Produce batches received: (node, producer id, base sequence, values).
    produced: Vec<(i32, i64, i32, Vec<String>)>,
    /// Move the leader to node 2 once node 1 has served this many fetches
    /// (or produces) successfully.
    move_after: usize,
    served_by_1: usize,
    /// The next this many Metadata answers name node 3, which is in no
    /// broker list, as the leader.
    unlisted_leader_answers: usize,
    metadata_requests: usize,
}

fn one_record_batch(offset: i64) -> Bytes {
    let value = format!("value-{offset}");
    let rec = RecordOut {
        timestamp: 1_700_000_000_000 + offset,
        key: None,
        value: Some(value.as_bytes()),
        headers: &[],
    };
    let mut out = BytesMut::new();
    let meta = BatchMeta {
        base_offset: offset,
        ..BatchMeta::default()
    };
    RecordBatchEncoder::new().encode(&mut out, &meta, &[rec]).unwrap();
    out.freeze()
}

fn metadata(state: &State) -> MetadataResponse {
    let mut m = MetadataResponse::default();
    m.brokers = (0..2)
        .map(|i| {
            let mut b = MetadataResponseBroker::default();
            b.node_id = BrokerId(i + 1);
            b.host = str("127.0.0.1");
            b.port = i32::from(state.ports[i as usize]);
            b
        })
        .collect();
    m.controller_id = BrokerId(1);
    let mut p = MetadataResponsePartition::default();
    p.partition_index = 0;
    p.leader_id = BrokerId(if state.unlisted_leader_answers > 0 {
        3
    } else {
        state.leader
    });
    p.leader_epoch = state.leader;
    p.replica_nodes = vec![BrokerId(1), BrokerId(2)];
    p.isr_nodes = vec![BrokerId(1), BrokerId(2)];
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(str(TOPIC)));
    t.partitions = vec![p];
    m.topics = vec![t];
    m
}

/// Counts a successful answer by node 1 and moves the leader when due.
fn served(state: &mut State, node: i32) {
    if node == 1 {
        state.served_by_1 += 1;
        if state.served_by_1 >= state.move_after {
            state.leader = 2;
        }
    }
}

async fn serve(mut s: TcpStream, node: i32, state: Arc<Mutex<State>>) {
    loop {
        let Ok(len) = s.read_i32().await else { return };
        let mut frame = vec![0u8; len as usize];
        if s.read_exact(&mut frame).await.is_err() {
            return;
        }
        let mut req = Bytes::from(frame);
        let key = ApiKey::try_from(i16::from_be_bytes([req[0], req[1]])).unwrap();
        let version = i16::from_be_bytes([req[2], req[3]]);
        let header = RequestHeader::decode(&mut req, key.request_header_version(version)).unwrap();
        let corr = header.correlation_id;
        let reply = match key {
            ApiKey::ApiVersions => {
                let mut r = ApiVersionsResponse::default();
                r.api_keys = [(18, 0, 3), (3, 1, 12), (1, 4, 12), (2, 1, 7), (0, 3, 9), (22, 0, 4)]
                    .into_iter()
                    .map(|(k, min, max)| {
                        let mut a = ApiVersion::default();
                        a.api_key = k;
                        a.min_version = min;
                        a.max_version = max;
                        a
                    })
                    .collect();
                encode(corr, key, version, &r)
            }
            ApiKey::Metadata => {
                let mut st = state.lock().unwrap();
                let answer = metadata(&st);
                st.metadata_requests += 1;
                st.unlisted_leader_answers = st.unlisted_leader_answers.saturating_sub(1);
                encode(corr, key, version, &answer)
            }
            ApiKey::InitProducerId => {
                let mut r = InitProducerIdResponse::default();
                r.producer_id = 4242.into();
                r.producer_epoch = 0;
                encode(corr, key, version, &r)
            }
            ApiKey::ListOffsets => {
                let mut p = ListOffsetsPartitionResponse::default();
                p.partition_index = 0;
                p.offset = 0;
                p.timestamp = -1;
                let mut t = ListOffsetsTopicResponse::default();
                t.name = TopicName(str(TOPIC));
                t.partitions = vec![p];
                let mut r = ListOffsetsResponse::default();
                r.topics = vec![t];
                encode(corr, key, version, &r)
            }
            ApiKey::Fetch => {
                let fetch = FetchRequest::decode(&mut req, version).unwrap();
                let offset = fetch.topics[0].partitions[0].fetch_offset;
                let r = {
                    let mut st = state.lock().unwrap();
                    let mut p = PartitionData::default();
                    p.partition_index = 0;
                    if st.leader != node {
                        p.error_code = NOT_LEADER;
                        p.high_watermark = -1;
                    } else {
                        // Five records per answer at most, from the asked offset.
                        let from = offset as usize;
                        let to = (from + 5).min(st.log.len());
                        let mut records = BytesMut::new();
                        for b in &st.log[from..to] {
                            records.extend_from_slice(b);
                        }
                        p.records = Some(records.freeze());
                        p.high_watermark = st.log.len() as i64;
                        p.last_stable_offset = st.log.len() as i64;
                        if to > from {
                            served(&mut st, node);
                        }
                    }
                    st.answers.push((node, 1, p.error_code));
                    let mut t = FetchableTopicResponse::default();
                    t.topic = TopicName(str(TOPIC));
                    t.partitions = vec![p];
                    let mut r = FetchResponse::default();
                    r.responses = vec![t];
                    r
                };
                if offset >= 10 {
                    // Nothing new: wait a little, as a broker honours max_wait.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                encode(corr, key, version, &r)
            }
            ApiKey::Produce => {
                let produce = ProduceRequest::decode(&mut req, version).unwrap();
                let records = produce.topic_data[0].partition_data[0].records.clone().unwrap();
                let batch = RecordBatch::decode_exact(&records, &DecodeOptions::default()).unwrap();
                let values: Vec<String> = batch
                    .records()
                    .map(|r| String::from_utf8(r.unwrap().value.unwrap().to_vec()).unwrap())
                    .collect();
                let mut st = state.lock().unwrap();
                let mut p = PartitionProduceResponse::default();
                p.index = 0;
                p.log_append_time_ms = -1;
                if st.leader != node {
                    p.error_code = NOT_LEADER;
                    p.base_offset = -1;
                } else {
                    p.base_offset = st.produced.iter().map(|e| e.3.len() as i64).sum();
                    st.produced
                        .push((node, batch.header.producer_id, batch.header.base_sequence, values));
                    served(&mut st, node);
                }
                st.answers.push((node, 0, p.error_code));
                let mut t = TopicProduceResponse::default();
                t.name = TopicName(str(TOPIC));
                t.partition_responses = vec![p];
                let mut r = ProduceResponse::default();
                r.responses = vec![t];
                encode(corr, key, version, &r)
            }
            other => panic!("the fake broker does not answer {other:?}"),
        };
        if s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// Two fake brokers; the bootstrap is node 1.
async fn start(move_after: usize) -> (Cluster, Arc<Mutex<State>>) {
    let state = Arc::new(Mutex::new(State {
        leader: 1,
        log: (0..10).map(one_record_batch).collect(),
        move_after,
        ..State::default()
    }));
    let mut ports = [0u16; 2];
    for (i, port) in ports.iter_mut().enumerate() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        *port = listener.local_addr().unwrap().port();
        let state = state.clone();
        let node = i as i32 + 1;
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(serve(s, node, state.clone()));
            }
        });
    }
    state.lock().unwrap().ports = ports;
    let mut config = ClientConfig::new(&format!("127.0.0.1:{}", ports[0]));
    config.request_timeout = Duration::from_secs(5);
    config.metadata_max_wait = Duration::from_secs(10);
    config.retry_backoff = Duration::from_millis(10);
    let cluster = tokio::time::timeout(Duration::from_secs(10), Cluster::connect(config))
        .await
        .unwrap()
        .unwrap();
    (cluster, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_follows_the_leader_to_another_broker() {
    let (cluster, state) = start(1).await;
    let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
    consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::Earliest).await.unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} records: {:?}",
            got.len(),
            got
        );
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            got.push(r.record.offset);
        }
    }
    assert_eq!(got, (0..10).collect::<Vec<i64>>(), "every record once, in order");
    let answers = state.lock().unwrap().answers.clone();
    let fetches: Vec<_> = answers.iter().filter(|a| a.1 == 1).collect();
    assert_eq!(fetches[0], &(1, 1, 0), "first fetch served by node 1");
    assert!(
        fetches.contains(&&(1, 1, NOT_LEADER)),
        "node 1 refused after the move: {fetches:?}"
    );
    assert!(
        fetches.contains(&&(2, 1, 0)),
        "node 2 served after the move: {fetches:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_follows_the_leader_and_keeps_its_sequence() {
    let (cluster, state) = start(2).await;
    let producer = Producer::new(cluster, ProducerConfig::default().with_linger(Duration::ZERO))
        .await
        .unwrap();
    let mut offsets = Vec::new();
    for i in 0..5 {
        let f = producer
            .send(ProducerRecord::new(TOPIC, format!("p{i}")).with_partition(0))
            .await
            .unwrap();
        producer.flush(Duration::from_secs(10)).await.unwrap();
        offsets.push(f.await.unwrap().offset);
    }
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    let st = state.lock().unwrap();
    let nodes: Vec<i32> = st.produced.iter().map(|p| p.0).collect();
    assert_eq!(nodes, vec![1, 1, 2, 2, 2], "two batches on node 1, the rest on node 2");
    let sequences: Vec<i32> = st.produced.iter().map(|p| p.2).collect();
    assert_eq!(sequences, vec![0, 1, 2, 3, 4], "one sequence across both brokers");
    assert!(st.produced.iter().all(|p| p.1 == 4242));
    let values: Vec<String> = st.produced.iter().flat_map(|p| p.3.clone()).collect();
    assert_eq!(values, ["p0", "p1", "p2", "p3", "p4"]);
    assert!(
        st.answers.contains(&(1, 0, NOT_LEADER)),
        "node 1 refused a produce after the move: {:?}",
        st.answers
    );
}

/// Caches metadata whose leader of `moving[0]` is node 3, a broker the
/// answer lists no address for, and lets the next two answers say the same.
async fn cache_an_unlisted_leader(cluster: &Cluster, state: &Mutex<State>) {
    state.lock().unwrap().unlisted_leader_answers = 3;
    let md = cluster.refresh_topics(&[TOPIC]).await.unwrap();
    assert_eq!(md.topics[TOPIC].partitions[0].leader, 3);
    assert!(!md.brokers.contains_key(&3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_without_an_address_is_refreshed_and_retried() {
    let (cluster, state) = start(usize::MAX).await;
    cache_an_unlisted_leader(&cluster, &state).await;
    let before = state.lock().unwrap().metadata_requests;
    let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
    consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::At(0)).await.unwrap();
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while got.len() < 10 {
        assert!(tokio::time::Instant::now() < deadline, "only {got:?}");
        let records = consumer
            .poll(Duration::from_millis(500))
            .await
            .unwrap_or_else(|e| panic!("an unlisted leader must be retried, not fail the poll: {e}"));
        got.extend(records.iter().map(|r| r.record.offset));
    }
    assert_eq!(got, (0..10).collect::<Vec<i64>>(), "every record once, in order");
    let after = state.lock().unwrap().metadata_requests;
    assert!(after - before >= 2, "the consumer refreshed: {before} -> {after}");

    cache_an_unlisted_leader(&cluster, &state).await;
    let producer = Producer::new(cluster, ProducerConfig::default()).await.unwrap();
    let ack = producer
        .send(ProducerRecord::new(TOPIC, "after-unlisted").with_partition(0))
        .await
        .unwrap();
    producer.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(ack.await.unwrap().offset, 0);
    let st = state.lock().unwrap();
    assert_eq!(st.unlisted_leader_answers, 0);
    let values: Vec<String> = st.produced.iter().flat_map(|p| p.3.clone()).collect();
    assert_eq!(values, ["after-unlisted"], "produced once, to node 1");
}

#[test]
fn log_batches_decode() {
    // The fake log itself is well-formed (guards the scripted peer).
    let mut all = BytesMut::new();
    for o in 0..10 {
        all.extend_from_slice(&one_record_batch(o));
    }
    let mut buf = all.freeze();
    let mut n = 0;
    while buf.has_remaining() {
        let (b, used) = RecordBatch::decode(&buf, &DecodeOptions::default()).unwrap().unwrap();
        assert_eq!(b.header.base_offset, n);
        buf.advance(used);
        n += 1;
    }
    assert_eq!(n, 10);
}
