//! A scripted broker for the producer tests: ApiVersions, Metadata (one
//! topic, every partition led by this broker), InitProducerId, and Produce
//! answered by a script, never answered, or never even read (a slow broker).
//! Requests are decoded with kafka-protocol's broker-side decoders.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, InitProducerIdResponse, MetadataResponse, ProduceRequest, ProduceResponse,
    RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

pub const TOPIC: &str = "t";
pub const PRODUCER_ID: i64 = 4242;

/// What the broker does with a Produce request.
#[derive(Clone)]
pub enum ProduceMode {
    /// Answers with what the script returns for the request.
    Answer(Arc<dyn Fn(&ProduceRequest) -> ProduceResponse + Send + Sync>),
    /// Reads every request, answers none.
    NeverAnswer,
    /// Stops reading the connection at the first Produce request.
    StopReading,
}

pub struct Broker {
    pub addr: String,
    /// Produce requests read.
    pub produce_requests: Arc<AtomicUsize>,
    /// Every Produce request read.
    pub requests: Arc<Mutex<Vec<ProduceRequest>>>,
}

fn frame<R: Encodable>(correlation_id: i32, key: ApiKey, version: i16, body: &R) -> Bytes {
    let mut buf = BytesMut::new();
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let hv = if key == ApiKey::ApiVersions {
        0
    } else {
        key.response_header_version(version)
    };
    header.encode(&mut buf, hv).unwrap();
    body.encode(&mut buf, version).unwrap();
    let mut out = BytesMut::with_capacity(buf.len() + 4);
    out.extend_from_slice(&(buf.len() as i32).to_be_bytes());
    out.extend_from_slice(&buf);
    out.freeze()
}

const APIS: &[(i16, i16, i16)] = &[(18, 0, 3), (3, 1, 12), (0, 3, 9), (22, 0, 4)];

async fn serve(
    mut s: TcpStream,
    port: u16,
    partitions: i32,
    mode: ProduceMode,
    count: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<ProduceRequest>>>,
) {
    loop {
        let Ok(len) = s.read_i32().await else { return };
        if !(0..=64 << 20).contains(&len) {
            return;
        }
        let mut buf = vec![0u8; len as usize];
        if s.read_exact(&mut buf).await.is_err() {
            return;
        }
        let mut req = Bytes::from(buf);
        let key = ApiKey::try_from(i16::from_be_bytes([req[0], req[1]])).unwrap();
        let version = i16::from_be_bytes([req[2], req[3]]);
        let header = RequestHeader::decode(&mut req, key.request_header_version(version)).unwrap();
        let corr = header.correlation_id;
        let out = match key {
            ApiKey::ApiVersions => {
                let mut r = ApiVersionsResponse::default();
                for (k, min, max) in APIS {
                    let mut v = ApiVersion::default();
                    v.api_key = *k;
                    v.min_version = *min;
                    v.max_version = *max;
                    r.api_keys.push(v);
                }
                frame(corr, key, version, &r)
            }
            ApiKey::Metadata => {
                let mut r = MetadataResponse::default();
                let mut b = MetadataResponseBroker::default();
                b.node_id = 1.into();
                b.host = StrBytes::from_static_str("127.0.0.1");
                b.port = i32::from(port);
                r.brokers.push(b);
                r.controller_id = 1.into();
                let mut t = MetadataResponseTopic::default();
                t.name = Some(StrBytes::from_static_str(TOPIC).into());
                for p in 0..partitions {
                    let mut mp = MetadataResponsePartition::default();
                    mp.partition_index = p;
                    mp.leader_id = 1.into();
                    mp.replica_nodes = vec![1.into()];
                    mp.isr_nodes = vec![1.into()];
                    t.partitions.push(mp);
                }
                r.topics.push(t);
                frame(corr, key, version, &r)
            }
            ApiKey::InitProducerId => {
                let mut r = InitProducerIdResponse::default();
                r.producer_id = PRODUCER_ID.into();
                r.producer_epoch = 0;
                frame(corr, key, version, &r)
            }
            ApiKey::Produce => {
                if let ProduceMode::StopReading = mode {
                    count.fetch_add(1, Ordering::SeqCst);
                    // Hold the connection open, unread, for the test's lifetime.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    return;
                }
                let request = ProduceRequest::decode(&mut req, version).unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                let answer = match &mode {
                    ProduceMode::Answer(f) => Some(f(&request)),
                    _ => None,
                };
                log.lock().unwrap().push(request);
                match answer {
                    Some(r) => frame(corr, key, version, &r),
                    None => continue,
                }
            }
            other => panic!("the scripted broker does not speak {other:?}"),
        };
        let _ = req.remaining();
        if s.write_all(&out).await.is_err() {
            return;
        }
    }
}

/// Starts the broker. `small_buffers` shrinks the socket receive buffer so
/// a broker that stops reading pushes back quickly.
pub async fn start(partitions: i32, mode: ProduceMode, small_buffers: bool) -> Broker {
    let socket = TcpSocket::new_v4().unwrap();
    if small_buffers {
        socket.set_recv_buffer_size(4096).unwrap();
    }
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (c, l) = (count.clone(), log.clone());
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, port, partitions, mode.clone(), c.clone(), l.clone()));
        }
    });
    Broker {
        addr: format!("127.0.0.1:{port}"),
        produce_requests: count,
        requests: log,
    }
}
