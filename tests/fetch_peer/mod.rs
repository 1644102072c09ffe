//! A scripted broker for the consumer's bad-input tests: node 1 on
//! 127.0.0.1 answering ApiVersions, Metadata (one topic), ListOffsets (0)
//! and Fetch through a closure that writes the Fetch answer for each
//! request. It declines fetch sessions (answers session id 0), as a broker
//! whose session cache is full does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use clink_kafka::client::{ClientConfig, Cluster};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, FetchRequest, FetchResponse, ListOffsetsResponse, MetadataResponse,
    RequestHeader, TopicName,
};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[path = "../common/scripted.rs"]
mod scripted;
pub use scripted::str;

/// Writes the answer to one Fetch request.
pub type Answer = Box<dyn FnMut(&FetchRequest) -> FetchResponse + Send>;

struct Peer {
    port: u16,
    topic: String,
    partitions: i32,
    answer: Answer,
    metadata_requests: Arc<AtomicUsize>,
}

fn metadata(peer: &Peer) -> MetadataResponse {
    let mut m = MetadataResponse::default();
    let mut b = MetadataResponseBroker::default();
    b.node_id = BrokerId(1);
    b.host = str("127.0.0.1");
    b.port = i32::from(peer.port);
    m.brokers = vec![b];
    m.controller_id = BrokerId(1);
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(str(&peer.topic)));
    t.partitions = (0..peer.partitions)
        .map(|i| {
            let mut p = MetadataResponsePartition::default();
            p.partition_index = i;
            p.leader_id = BrokerId(1);
            p.replica_nodes = vec![BrokerId(1)];
            p.isr_nodes = vec![BrokerId(1)];
            p
        })
        .collect();
    m.topics = vec![t];
    m
}

async fn serve(mut s: TcpStream, peer: Arc<Mutex<Peer>>) {
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
                r.api_keys = [(18, 0, 3), (3, 1, 12), (1, 4, 12), (2, 1, 7)]
                    .into_iter()
                    .map(|(k, min, max)| {
                        let mut a = ApiVersion::default();
                        a.api_key = k;
                        a.min_version = min;
                        a.max_version = max;
                        a
                    })
                    .collect();
                scripted::encode(corr, key, version, &r)
            }
            ApiKey::Metadata => {
                let peer = peer.lock().unwrap();
                peer.metadata_requests.fetch_add(1, Ordering::Relaxed);
                scripted::encode(corr, key, version, &metadata(&peer))
            }
            ApiKey::ListOffsets => {
                let topic = peer.lock().unwrap().topic.clone();
                let partitions = peer.lock().unwrap().partitions;
                let mut t = ListOffsetsTopicResponse::default();
                t.name = TopicName(str(&topic));
                t.partitions = (0..partitions)
                    .map(|i| {
                        let mut p = ListOffsetsPartitionResponse::default();
                        p.partition_index = i;
                        p.offset = 0;
                        p.timestamp = -1;
                        p
                    })
                    .collect();
                let mut r = ListOffsetsResponse::default();
                r.topics = vec![t];
                scripted::encode(corr, key, version, &r)
            }
            ApiKey::Fetch => {
                let fetch = FetchRequest::decode(&mut req, version).unwrap();
                let r = (peer.lock().unwrap().answer)(&fetch);
                if r.responses.is_empty() {
                    // Nothing to say: wait as a broker honours max_wait.
                    tokio::time::sleep(Duration::from_millis(fetch.max_wait_ms.clamp(0, 100) as u64)).await;
                }
                scripted::encode(corr, key, version, &r)
            }
            other => panic!("the scripted broker does not answer {other:?}"),
        };
        if s.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// Starts the peer; returns a cluster connected to it.
#[allow(dead_code)] // not every test binary uses both
pub async fn start(topic: &str, partitions: i32, answer: Answer) -> Cluster {
    start_counting(topic, partitions, answer).await.0
}

/// Starts the peer; returns a cluster connected to it and the count of
/// Metadata requests the peer has answered.
#[allow(dead_code)]
pub async fn start_counting(topic: &str, partitions: i32, answer: Answer) -> (Cluster, Arc<AtomicUsize>) {
    let metadata_requests = Arc::new(AtomicUsize::new(0));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = Arc::new(Mutex::new(Peer {
        port,
        topic: topic.to_owned(),
        partitions,
        answer,
        metadata_requests: metadata_requests.clone(),
    }));
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, peer.clone()));
        }
    });
    let mut config = ClientConfig::new(&format!("127.0.0.1:{port}"));
    config.request_timeout = Duration::from_secs(10);
    config.retry_backoff = Duration::from_millis(10);
    let cluster = tokio::time::timeout(Duration::from_secs(10), Cluster::connect(config))
        .await
        .expect("connecting to the scripted broker in time")
        .expect("connecting to the scripted broker");
    (cluster, metadata_requests)
}
