//! Scripted-peer tests of the transactional producer and the resolver: a
//! fake broker on 127.0.0.1 answering with kafka-protocol's own response
//! encoders, for what a real broker will not do on demand:
//!
//! - transient coordinator answers (COORDINATOR_NOT_AVAILABLE on
//!   FindCoordinator, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS
//!   on InitProducerId and EndTxn, NOT_COORDINATOR forcing a new
//!   FindCoordinator) are retried;
//! - under transaction.version 2 an EndTxn v5 that rolls the epoch over to a
//!   new producer id: `identity()` follows it, and the next transaction's
//!   batches carry the new id, epoch 0 and sequence 0;
//! - under transaction.version 1: AddPartitionsToTxn v3 before the first
//!   batch of a partition, Produce ≤ v11, EndTxn v4, no epoch change;
//! - the resolver's PRODUCER_FENCED answer disambiguated by a
//!   DescribeTransactions that shows PrepareCommit under the handle's id.

mod common;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clink_kafka::client::{
    ClientConfig, Cluster, CommitProof, Decision, ProducerConfig, ProducerRecord, Resolver, ResumeHandle,
    TransactionVersion, TransactionalProducer, TxnConfig, Verdict,
};
use clink_kafka::wire::record::{DecodeOptions, RecordBatch};
use common::scripted::{encode, str};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ApiKey, ApiVersionsResponse, BrokerId,
    DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    InitProducerIdRequest, InitProducerIdResponse, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOPIC: &str = "t";

#[derive(Default)]
struct State {
    port: u16,
    /// The finalized transaction.version feature level.
    tv: i16,
    /// Error codes to answer, per API key, before answering 0.
    errors: HashMap<i16, VecDeque<i16>>,
    init_identity: (i64, i16),
    /// What EndTxn v5 answers, in order.
    end_txn_identities: VecDeque<(i64, i16)>,
    /// DescribeTransactions answer: (state, producer id, epoch).
    describe: Option<(&'static str, i64, i16)>,
    /// What the broker saw, one line per request.
    log: Vec<String>,
}

impl State {
    fn error(&mut self, key: ApiKey) -> i16 {
        self.errors
            .get_mut(&(key as i16))
            .and_then(VecDeque::pop_front)
            .unwrap_or(0)
    }
}

async fn serve(mut s: TcpStream, state: Arc<Mutex<State>>) {
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
        let reply = answer(key, version, corr, &mut req, &mut state.lock().unwrap());
        if s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

fn answer(key: ApiKey, version: i16, corr: i32, req: &mut Bytes, st: &mut State) -> Bytes {
    {
        match key {
            ApiKey::ApiVersions => {
                let mut r = ApiVersionsResponse::default();
                r.api_keys = [
                    (18, 0, 4),
                    (3, 4, 12),
                    (0, 3, 12),
                    (10, 0, 6),
                    (22, 0, 5),
                    (24, 0, 5),
                    (26, 0, 5),
                    (65, 0, 0),
                ]
                .into_iter()
                .map(|(k, min, max)| {
                    let mut a = ApiVersion::default();
                    a.api_key = k;
                    a.min_version = min;
                    a.max_version = max;
                    a
                })
                .collect();
                if version >= 3 {
                    let mut f = FinalizedFeatureKey::default();
                    f.name = str("transaction.version");
                    f.min_version_level = st.tv;
                    f.max_version_level = st.tv;
                    r.finalized_features = vec![f];
                    r.finalized_features_epoch = 1;
                }
                encode(corr, key, version, &r)
            }
            ApiKey::Metadata => {
                let mut m = MetadataResponse::default();
                let mut b = MetadataResponseBroker::default();
                b.node_id = BrokerId(1);
                b.host = str("127.0.0.1");
                b.port = i32::from(st.port);
                m.brokers = vec![b];
                m.controller_id = BrokerId(1);
                let mut p = MetadataResponsePartition::default();
                p.partition_index = 0;
                p.leader_id = BrokerId(1);
                p.replica_nodes = vec![BrokerId(1)];
                p.isr_nodes = vec![BrokerId(1)];
                let mut t = MetadataResponseTopic::default();
                t.name = Some(TopicName(str(TOPIC)));
                t.partitions = vec![p];
                m.topics = vec![t];
                encode(corr, key, version, &m)
            }
            ApiKey::FindCoordinator => {
                let request = FindCoordinatorRequest::decode(req, version).unwrap();
                let code = st.error(key);
                st.log
                    .push(format!("FindCoordinator type={} err={code}", request.key_type));
                let mut r = FindCoordinatorResponse::default();
                let mut c = Coordinator::default();
                c.key = request
                    .coordinator_keys
                    .first()
                    .cloned()
                    .unwrap_or_else(|| request.key.clone());
                c.node_id = BrokerId(1);
                c.host = str("127.0.0.1");
                c.port = i32::from(st.port);
                c.error_code = code;
                if version >= 4 {
                    r.coordinators = vec![c];
                } else {
                    r.node_id = BrokerId(1);
                    r.host = str("127.0.0.1");
                    r.port = i32::from(st.port);
                    r.error_code = code;
                }
                encode(corr, key, version, &r)
            }
            ApiKey::InitProducerId => {
                let request = InitProducerIdRequest::decode(req, version).unwrap();
                let code = st.error(key);
                st.log.push(format!(
                    "InitProducerId id={:?} timeout={} err={code}",
                    request.transactional_id.as_ref().map(|t| t.0.to_string()),
                    request.transaction_timeout_ms
                ));
                let mut r = InitProducerIdResponse::default();
                r.error_code = code;
                r.producer_id = st.init_identity.0.into();
                r.producer_epoch = st.init_identity.1;
                encode(corr, key, version, &r)
            }
            ApiKey::AddPartitionsToTxn => {
                let request = AddPartitionsToTxnRequest::decode(req, version).unwrap();
                let code = st.error(key);
                let t = &request.v3_and_below_topics[0];
                st.log.push(format!(
                    "AddPartitionsToTxn v{version} pid={} epoch={} {}[{}] err={code}",
                    request.v3_and_below_producer_id.0, request.v3_and_below_producer_epoch, t.name.0, t.partitions[0]
                ));
                let mut p = AddPartitionsToTxnPartitionResult::default();
                p.partition_index = t.partitions[0];
                p.partition_error_code = code;
                let mut tr = AddPartitionsToTxnTopicResult::default();
                tr.name = t.name.clone();
                tr.results_by_partition = vec![p];
                let mut r = AddPartitionsToTxnResponse::default();
                r.results_by_topic_v3_and_below = vec![tr];
                encode(corr, key, version, &r)
            }
            ApiKey::Produce => {
                let request = ProduceRequest::decode(req, version).unwrap();
                let records = request.topic_data[0].partition_data[0].records.clone().unwrap();
                let batch = RecordBatch::decode_exact(&records, &DecodeOptions::default()).unwrap();
                let h = &batch.header;
                st.log.push(format!(
                    "Produce v{version} id={:?} pid={} epoch={} seq={} transactional={} records={}",
                    request.transactional_id.as_ref().map(|t| t.0.to_string()),
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.is_transactional(),
                    h.record_count
                ));
                let mut p = PartitionProduceResponse::default();
                p.index = 0;
                p.base_offset = 0;
                p.log_append_time_ms = -1;
                let mut t = TopicProduceResponse::default();
                t.name = TopicName(str(TOPIC));
                t.partition_responses = vec![p];
                let mut r = ProduceResponse::default();
                r.responses = vec![t];
                encode(corr, key, version, &r)
            }
            ApiKey::EndTxn => {
                let request = EndTxnRequest::decode(req, version).unwrap();
                let code = st.error(key);
                st.log.push(format!(
                    "EndTxn v{version} pid={} epoch={} commit={} err={code}",
                    request.producer_id.0, request.producer_epoch, request.committed
                ));
                let mut r = EndTxnResponse::default();
                r.error_code = code;
                r.producer_id = (-1).into();
                r.producer_epoch = -1;
                if code == 0 && version >= 5 {
                    let (pid, epoch) = st.end_txn_identities.pop_front().expect("scripted EndTxn identity");
                    r.producer_id = pid.into();
                    r.producer_epoch = epoch;
                }
                encode(corr, key, version, &r)
            }
            ApiKey::DescribeTransactions => {
                let (state_name, pid, epoch) = st.describe.expect("scripted description");
                st.log.push("DescribeTransactions".into());
                let mut t = TransactionState::default();
                t.transactional_id = TransactionalId(str("x"));
                t.transaction_state = str(state_name);
                t.producer_id = pid.into();
                t.producer_epoch = epoch;
                t.transaction_timeout_ms = 60_000;
                t.transaction_start_time_ms = 1;
                let mut r = DescribeTransactionsResponse::default();
                r.transaction_states = vec![t];
                encode(corr, key, version, &r)
            }
            other => panic!("the fake broker does not answer {other:?}"),
        }
    }
}

async fn start(state: State) -> (ClientConfig, Arc<Mutex<State>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let state = Arc::new(Mutex::new(State { port, ..state }));
    let s = state.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            tokio::spawn(serve(conn, s.clone()));
        }
    });
    let mut config = ClientConfig::new(&format!("127.0.0.1:{port}"));
    config.retry_backoff = Duration::from_millis(5);
    config.retry_backoff_max = Duration::from_millis(20);
    config.request_timeout = Duration::from_secs(5);
    (config, state)
}

fn errors(list: &[(ApiKey, &[i16])]) -> HashMap<i16, VecDeque<i16>> {
    list.iter()
        .map(|(k, e)| (*k as i16, e.iter().copied().collect()))
        .collect()
}

fn txn_config() -> TxnConfig {
    let mut t = TxnConfig::new("x").with_transaction_timeout(Duration::from_secs(30));
    t.max_block = Duration::from_secs(10);
    t
}

async fn one_transaction(p: &mut TransactionalProducer, n: usize) {
    let t = p.begin().await.unwrap();
    let mut futures = Vec::new();
    for i in 0..n {
        futures.push(t.send(ProducerRecord::new(TOPIC, format!("v{i}"))).await.unwrap());
    }
    t.commit().await.expect("commit");
    for f in futures {
        f.await.expect("delivered before the commit");
    }
}

#[tokio::test]
async fn tv2_retries_at_the_coordinator_and_follows_an_epoch_rollover() {
    let (config, state) = start(State {
        tv: 2,
        errors: errors(&[
            (ApiKey::FindCoordinator, &[15]),
            (ApiKey::InitProducerId, &[14, 51]),
            (ApiKey::EndTxn, &[51, 16]),
        ]),
        init_identity: (100, i16::MAX - 1),
        // The first commit rolls over to a new producer id; the second bumps.
        end_txn_identities: [(101, 0), (101, 1)].into_iter().collect(),
        ..State::default()
    })
    .await;
    let cluster = Cluster::connect(config).await.unwrap();
    let mut p = TransactionalProducer::init(cluster, ProducerConfig::default(), txn_config())
        .await
        .expect("init after transient answers");
    assert_eq!(p.transaction_version(), TransactionVersion::V2);
    let id = p.identity();
    assert_eq!((id.producer_id, id.producer_epoch), (100, i16::MAX - 1));

    one_transaction(&mut p, 3).await;
    let id = p.identity();
    assert_eq!(
        (id.producer_id, id.producer_epoch),
        (101, 0),
        "rolled over to a new producer id"
    );
    one_transaction(&mut p, 2).await;
    let id = p.identity();
    assert_eq!((id.producer_id, id.producer_epoch), (101, 1));

    let log = state.lock().unwrap().log.clone();
    let want = vec![
        "FindCoordinator type=1 err=15",
        "FindCoordinator type=1 err=0",
        "InitProducerId id=Some(\"x\") timeout=30000 err=14",
        "InitProducerId id=Some(\"x\") timeout=30000 err=51",
        "InitProducerId id=Some(\"x\") timeout=30000 err=0",
        "Produce v12 id=Some(\"x\") pid=100 epoch=32766 seq=0 transactional=true records=3",
        "EndTxn v5 pid=100 epoch=32766 commit=true err=51",
        "EndTxn v5 pid=100 epoch=32766 commit=true err=16",
        "FindCoordinator type=1 err=0",
        "EndTxn v5 pid=100 epoch=32766 commit=true err=0",
        "Produce v12 id=Some(\"x\") pid=101 epoch=0 seq=0 transactional=true records=2",
        "EndTxn v5 pid=101 epoch=0 commit=true err=0",
    ];
    assert_eq!(log, want);
}

#[tokio::test]
async fn tv1_adds_partitions_and_keeps_its_epoch() {
    let (config, state) = start(State {
        tv: 1,
        errors: errors(&[(ApiKey::AddPartitionsToTxn, &[51])]),
        init_identity: (7, 3),
        ..State::default()
    })
    .await;
    let cluster = Cluster::connect(config).await.unwrap();
    let mut p = TransactionalProducer::init(cluster, ProducerConfig::default(), txn_config())
        .await
        .unwrap();
    assert_eq!(p.transaction_version(), TransactionVersion::V1);
    one_transaction(&mut p, 2).await;
    one_transaction(&mut p, 1).await;
    let id = p.identity();
    assert_eq!((id.producer_id, id.producer_epoch), (7, 3));
    let log = state.lock().unwrap().log.clone();
    let want = vec![
        "FindCoordinator type=1 err=0",
        "InitProducerId id=Some(\"x\") timeout=30000 err=0",
        "AddPartitionsToTxn v3 pid=7 epoch=3 t[0] err=51",
        "AddPartitionsToTxn v3 pid=7 epoch=3 t[0] err=0",
        "Produce v11 id=Some(\"x\") pid=7 epoch=3 seq=0 transactional=true records=2",
        "EndTxn v4 pid=7 epoch=3 commit=true err=0",
        "AddPartitionsToTxn v3 pid=7 epoch=3 t[0] err=0",
        "Produce v11 id=Some(\"x\") pid=7 epoch=3 seq=2 transactional=true records=1",
        "EndTxn v4 pid=7 epoch=3 commit=true err=0",
    ];
    assert_eq!(log, want);
}

#[tokio::test]
async fn a_fenced_commit_shown_as_prepare_commit_is_committed() {
    let (config, state) = start(State {
        tv: 2,
        errors: errors(&[(ApiKey::EndTxn, &[90])]),
        describe: Some(("PrepareCommit", 55, 9)),
        ..State::default()
    })
    .await;
    let handle = ResumeHandle {
        transactional_id: "x".into(),
        producer_id: 55,
        producer_epoch: 8,
        transaction_version: TransactionVersion::V2,
    };
    let verdict = Resolver::new(config.clone()).resolve(&handle, Decision::Commit).await;
    assert_eq!(
        verdict,
        Verdict::Committed {
            proof: CommitProof::Described {
                answer: clink_kafka::wire::KafkaCode::PRODUCER_FENCED,
                state: clink_kafka::client::TransactionState::PrepareCommit,
            }
        }
    );
    // Under another producer id it is not ours.
    state.lock().unwrap().errors = errors(&[(ApiKey::EndTxn, &[90])]);
    state.lock().unwrap().describe = Some(("PrepareCommit", 56, 0));
    let verdict = Resolver::new(config).resolve(&handle, Decision::Commit).await;
    assert!(!verdict.is_committed(), "{verdict}");
    let log = state.lock().unwrap().log.clone();
    assert!(
        log.iter().all(|l| !l.starts_with("InitProducerId")),
        "the resolver never fences: {log:?}"
    );
    assert!(
        log.contains(&"EndTxn v5 pid=55 epoch=8 commit=true err=90".to_owned()),
        "{log:?}"
    );
}
