//! Throttling everywhere (issue 24, point 3; KIP-219): a scripted broker
//! answers Produce, Fetch, Metadata and FindCoordinator at once with a
//! `throttle_time_ms`; the next request on that connection must not reach
//! it before the throttle has passed, and a throttle larger than
//! `max_throttle` mutes the connection only for `max_throttle`.
//!
//! The peer records when each request arrives and when each answer left,
//! so the gap is measured on the broker's side of the socket.

#[path = "common/scripted.rs"]
mod scripted;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clink_kafka::client::raw::BrokerConnection;
use clink_kafka::client::ClientConfig;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, FetchRequest, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader,
};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the peer saw: (api, when the request arrived, when its answer left).
type Log = Arc<Mutex<Vec<(ApiKey, Instant, Instant)>>>;

struct Peer {
    addr: String,
    /// The throttle every answer (but ApiVersions) carries.
    throttle_ms: Arc<AtomicI32>,
    log: Log,
}

async fn serve(mut s: TcpStream, throttle_ms: Arc<AtomicI32>, log: Log) {
    loop {
        let Ok(len) = s.read_i32().await else { return };
        let arrived = Instant::now();
        let mut frame = vec![0u8; len as usize];
        if s.read_exact(&mut frame).await.is_err() {
            return;
        }
        let mut req = Bytes::from(frame);
        let key = ApiKey::try_from(i16::from_be_bytes([req[0], req[1]])).unwrap();
        let version = i16::from_be_bytes([req[2], req[3]]);
        let header = RequestHeader::decode(&mut req, key.request_header_version(version)).unwrap();
        let corr = header.correlation_id;
        let throttle = throttle_ms.load(Ordering::SeqCst);
        let reply = match key {
            ApiKey::ApiVersions => {
                let mut r = ApiVersionsResponse::default();
                r.api_keys = [(0, 3, 9), (1, 4, 12), (3, 3, 12), (10, 1, 4)]
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
                let mut r = MetadataResponse::default();
                r.throttle_time_ms = throttle;
                scripted::encode(corr, key, version, &r)
            }
            ApiKey::FindCoordinator => {
                let mut r = FindCoordinatorResponse::default();
                r.throttle_time_ms = throttle;
                scripted::encode(corr, key, version, &r)
            }
            ApiKey::Produce => {
                let mut r = ProduceResponse::default();
                r.throttle_time_ms = throttle;
                scripted::encode(corr, key, version, &r)
            }
            ApiKey::Fetch => {
                let mut r = FetchResponse::default();
                r.throttle_time_ms = throttle;
                scripted::encode(corr, key, version, &r)
            }
            other => panic!("the scripted broker does not answer {other:?}"),
        };
        if s.write_all(&reply).await.is_err() {
            return;
        }
        log.lock().unwrap().push((key, arrived, Instant::now()));
    }
}

async fn start() -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let throttle_ms = Arc::new(AtomicI32::new(0));
    let log: Log = Arc::default();
    let (t, l) = (throttle_ms.clone(), log.clone());
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, t.clone(), l.clone()));
        }
    });
    Peer { addr, throttle_ms, log }
}

/// Sends one request of `key` on `conn`.
async fn send(conn: &BrokerConnection, key: ApiKey) {
    match key {
        ApiKey::Metadata => {
            let mut r = MetadataRequest::default();
            r.topics = Some(Vec::new());
            conn.request(&r).await.map(|_| ()).unwrap()
        }
        ApiKey::FindCoordinator => {
            let version = conn.version_for::<FindCoordinatorRequest>(None).unwrap();
            let mut r = FindCoordinatorRequest::default();
            if version >= 4 {
                r.coordinator_keys = vec![scripted::str("g")];
            } else {
                r.key = scripted::str("g");
            }
            conn.request_at(version, &r).await.map(|_| ()).unwrap()
        }
        ApiKey::Produce => {
            let mut r = ProduceRequest::default();
            r.acks = 1;
            r.timeout_ms = 1000;
            conn.request(&r).await.map(|_| ()).unwrap()
        }
        ApiKey::Fetch => {
            let mut r = FetchRequest::default();
            r.max_wait_ms = 10;
            r.max_bytes = 1 << 20;
            conn.request(&r).await.map(|_| ()).unwrap()
        }
        other => panic!("{other:?}"),
    }
}

/// The gap between the first answer of `key` leaving the peer and the
/// next request arriving there, with every answer throttled by
/// `throttle_ms`.
async fn gap_after(key: ApiKey, throttle_ms: i32, max_throttle: Duration) -> Duration {
    let peer = start().await;
    let config = ClientConfig::new(&peer.addr).with_max_throttle(max_throttle);
    let conn = BrokerConnection::connect(&peer.addr, Some(1), &config).await.unwrap();
    peer.throttle_ms.store(throttle_ms, Ordering::SeqCst);
    send(&conn, key).await;
    peer.throttle_ms.store(0, Ordering::SeqCst);
    assert_eq!(
        conn.throttled_for().is_some(),
        throttle_ms > 0,
        "{key:?}: muted or not, against the throttle of {throttle_ms} ms"
    );
    send(&conn, key).await;
    // The peer logs an answer after writing it, so the client may read the
    // second answer before the peer has logged it: wait (bounded) for it.
    let deadline = Instant::now() + Duration::from_secs(5);
    let log = loop {
        let log = peer.log.lock().unwrap().clone();
        if log.iter().filter(|(k, _, _)| *k == key).count() >= 2 || Instant::now() > deadline {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let throttled: Vec<_> = log.iter().filter(|(k, _, _)| *k == key).collect();
    assert_eq!(throttled.len(), 2, "{key:?}: {log:?}");
    throttled[1].1.duration_since(throttled[0].2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answers_throttle_mutes_its_connection() {
    let throttle = Duration::from_millis(400);
    for key in [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
    ] {
        let gap = gap_after(key, throttle.as_millis() as i32, Duration::from_secs(30)).await;
        println!("{key:?}: throttled {throttle:?}, next request {gap:?} later");
        assert!(
            gap >= throttle - Duration::from_millis(5),
            "{key:?}: the next request came {gap:?} after an answer throttled {throttle:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_is_bounded_by_max_throttle() {
    let max = Duration::from_millis(300);
    for key in [ApiKey::Produce, ApiKey::Metadata] {
        let gap = gap_after(key, 60_000, max).await;
        println!("{key:?}: throttled 60 s, max_throttle {max:?}, next request {gap:?} later");
        assert!(gap >= max - Duration::from_millis(5), "{key:?}: {gap:?}");
        assert!(
            gap < Duration::from_secs(10),
            "{key:?}: waited {gap:?}, past max_throttle"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_throttle_no_wait() {
    let gap = gap_after(ApiKey::Metadata, 0, Duration::from_secs(30)).await;
    // Not a timing claim: only that nothing near a throttle was waited.
    assert!(gap < Duration::from_secs(5), "{gap:?}");
}
