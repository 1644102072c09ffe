//! Idempotence under faults: a TCP proxy inside the test stands between the
//! producer and the real broker and cuts connections mid-stream — in the
//! middle of a request frame on the way in, and in the middle of a response
//! frame on the way out (so the broker has appended a batch whose answer the
//! producer never sees) — while 100,000 records are produced with acks=all.
//! Consuming afterwards, straight from the broker, finds every record exactly
//! once and in order within each partition.
//!
//! The proxy rewrites the broker addresses in Metadata responses to its own,
//! so every connection the client opens (bootstrap and leader) goes through
//! it. Cut points come from a seeded generator; the seed is printed, and
//! `CLINK_FAULT_SEED` replays a run.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use clink_kafka::client::{ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
use kafka_protocol::messages::{ApiKey, MetadataResponse, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const RECORDS: usize = 100_000;
const PARTITIONS: i32 = 3;
/// The proxy stops cutting after this many cuts, so the run always ends.
const MAX_CUTS: usize = 40;

/// xorshift64*: reproducible cut points without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo) as u64) as usize
    }
}

struct Proxy {
    addr: SocketAddr,
    /// Connections cut while a request was being written to the broker.
    cuts_in_request: Arc<AtomicUsize>,
    /// Connections cut while a response was being written to the client.
    cuts_in_response: Arc<AtomicUsize>,
    /// Connections accepted.
    accepted: Arc<AtomicUsize>,
    /// Metadata responses whose broker list was rewritten.
    rewritten: Arc<AtomicUsize>,
    cutting: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(upstream: String, seed: u64) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let proxy = Proxy {
            addr,
            cuts_in_request: Arc::default(),
            cuts_in_response: Arc::default(),
            accepted: Arc::default(),
            rewritten: Arc::default(),
            cutting: Arc::new(AtomicBool::new(true)),
        };
        let (req, resp, accepted, rewritten, cutting) = (
            proxy.cuts_in_request.clone(),
            proxy.cuts_in_response.clone(),
            proxy.accepted.clone(),
            proxy.rewritten.clone(),
            proxy.cutting.clone(),
        );
        let rng = Arc::new(Mutex::new(Rng(seed | 1)));
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                accepted.fetch_add(1, Ordering::Relaxed);
                let Ok(broker) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = broker.set_nodelay(true);
                // Each connection is cut in one direction, after a number of
                // bytes drawn here; the first bytes (ApiVersions, Metadata)
                // always pass.
                let (cut_req, cut_resp) = {
                    let mut r = rng.lock().unwrap();
                    if r.next().is_multiple_of(2) {
                        (r.range(20_000, 600_000), usize::MAX)
                    } else {
                        (usize::MAX, r.range(1_000, 8_000))
                    }
                };
                let conn = Conn {
                    proxy_addr: addr,
                    metadata: Arc::default(),
                    cutting: cutting.clone(),
                    total_cuts: (req.clone(), resp.clone()),
                    rewritten: rewritten.clone(),
                };
                tokio::spawn(conn.run(client, broker, cut_req, cut_resp));
            }
        });
        proxy
    }

    fn cuts(&self) -> usize {
        self.cuts_in_request.load(Ordering::Relaxed) + self.cuts_in_response.load(Ordering::Relaxed)
    }
}

struct Conn {
    proxy_addr: SocketAddr,
    /// Correlation id → version of Metadata requests in flight.
    metadata: Arc<Mutex<HashMap<i32, i16>>>,
    cutting: Arc<AtomicBool>,
    total_cuts: (Arc<AtomicUsize>, Arc<AtomicUsize>),
    rewritten: Arc<AtomicUsize>,
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.ok()?;
    let n = i32::from_be_bytes(len);
    assert!((0..=64 << 20).contains(&n), "proxy: frame size {n}");
    let mut frame = vec![0u8; 4 + n as usize];
    frame[..4].copy_from_slice(&len);
    r.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

impl Conn {
    fn may_cut(&self, counter: &AtomicUsize) -> bool {
        if !self.cutting.load(Ordering::Relaxed) {
            return false;
        }
        let total = self.total_cuts.0.load(Ordering::Relaxed) + self.total_cuts.1.load(Ordering::Relaxed);
        if total >= MAX_CUTS {
            return false;
        }
        counter.fetch_add(1, Ordering::Relaxed);
        true
    }

    async fn run(self, client: TcpStream, broker: TcpStream, cut_req: usize, cut_resp: usize) {
        let (mut cr, mut cw) = client.into_split();
        let (mut br, mut bw) = broker.into_split();
        let this = Arc::new(self);
        let up = {
            let this = this.clone();
            async move {
                let mut sent = 0usize;
                while let Some(frame) = read_frame(&mut cr).await {
                    // Request header: api key, api version, correlation id.
                    if frame.len() >= 12 && i16::from_be_bytes([frame[4], frame[5]]) == ApiKey::Metadata as i16 {
                        let version = i16::from_be_bytes([frame[6], frame[7]]);
                        let correlation = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
                        this.metadata.lock().unwrap().insert(correlation, version);
                    }
                    if sent + frame.len() > cut_req && frame.len() > 64 && this.may_cut(&this.total_cuts.0) {
                        // Half a request reaches the broker, then the line drops.
                        let _ = bw.write_all(&frame[..frame.len() / 2]).await;
                        return;
                    }
                    sent += frame.len();
                    if bw.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            }
        };
        let down = {
            let this = this.clone();
            async move {
                let mut sent = 0usize;
                while let Some(mut frame) = read_frame(&mut br).await {
                    let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                    let metadata_version = this.metadata.lock().unwrap().remove(&correlation);
                    if let Some(version) = metadata_version {
                        frame = this.rewrite_metadata(&frame, version);
                    }
                    if sent + frame.len() > cut_resp && metadata_version.is_none() && this.may_cut(&this.total_cuts.1) {
                        // The broker did the work; the answer is lost halfway.
                        let _ = cw.write_all(&frame[..frame.len() / 2]).await;
                        return;
                    }
                    sent += frame.len();
                    if cw.write_all(&frame).await.is_err() {
                        return;
                    }
                }
            }
        };
        // Either direction ending ends both: the sockets drop here.
        tokio::select! {
            _ = up => {}
            _ = down => {}
        }
    }

    /// Points every broker in a Metadata response at the proxy.
    fn rewrite_metadata(&self, frame: &[u8], version: i16) -> Vec<u8> {
        let header_version = ApiKey::Metadata.response_header_version(version);
        let mut buf = Bytes::copy_from_slice(&frame[4..]);
        let header = ResponseHeader::decode(&mut buf, header_version).expect("metadata response header");
        let mut body = MetadataResponse::decode(&mut buf, version).expect("metadata response");
        for b in &mut body.brokers {
            b.host = StrBytes::from_string(self.proxy_addr.ip().to_string());
            b.port = i32::from(self.proxy_addr.port());
        }
        let mut out = BytesMut::new();
        header.encode(&mut out, header_version).unwrap();
        body.encode(&mut out, version).unwrap();
        self.rewritten.fetch_add(1, Ordering::Relaxed);
        let mut framed = (out.len() as i32).to_be_bytes().to_vec();
        framed.extend_from_slice(&out);
        framed
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_survives_cut_connections_without_duplicates_or_reordering() {
    let Some(brokers) = common::brokers() else { return };
    let seed = std::env::var("CLINK_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b).unwrap();
            u64::from_le_bytes(b)
        });
    eprintln!("fault proxy seed: {seed} (CLINK_FAULT_SEED={seed} replays this run)");

    let direct = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("faults");
    common::create_topic(&direct, NewTopic::new(&topic, PARTITIONS, 1)).await;

    let proxy = Proxy::start(brokers.split(',').next().unwrap().to_owned(), seed).await;
    let mut config = common::config(&proxy.addr.to_string());
    config.request_timeout = Duration::from_secs(10);
    let through_proxy = common::cluster(config).await;
    let producer = Producer::new(
        through_proxy.clone(),
        ProducerConfig {
            // acks=all and idempotence are the defaults; say so.
            acks: clink_kafka::client::Acks::All,
            idempotent: true,
            batch_size: 16 * 1024,
            linger: Duration::from_millis(2),
            delivery_timeout: Duration::from_secs(120),
            ..ProducerConfig::default()
        },
    )
    .await
    .expect("producer through the proxy");

    let mut acks = Vec::with_capacity(RECORDS);
    let mut next = [0usize; PARTITIONS as usize];
    for i in 0..RECORDS {
        let p = (i % PARTITIONS as usize) as i32;
        let n = next[p as usize];
        next[p as usize] += 1;
        let value = format!("p{p}-{n:06}-{}", "z".repeat(n % 64));
        let record = ProducerRecord::new(&topic, value).with_partition(p);
        acks.push(producer.send(record).await.expect("send"));
    }
    producer
        .flush(Duration::from_secs(150))
        .await
        .expect("flush through the proxy");
    let mut offsets = vec![Vec::new(); PARTITIONS as usize];
    for (i, ack) in acks.into_iter().enumerate() {
        let delivered = ack.await.expect("every record is acknowledged");
        offsets[i % PARTITIONS as usize].push(delivered.offset);
    }
    proxy.cutting.store(false, Ordering::Relaxed);
    let (req, resp) = (
        proxy.cuts_in_request.load(Ordering::Relaxed),
        proxy.cuts_in_response.load(Ordering::Relaxed),
    );
    eprintln!(
        "proxy: {} connections, {req} cut mid-request, {resp} cut mid-response, {} metadata responses rewritten",
        proxy.accepted.load(Ordering::Relaxed),
        proxy.rewritten.load(Ordering::Relaxed)
    );
    assert!(
        req >= 1 && resp >= 1,
        "the run must be cut both ways to prove anything ({req} request cuts, {resp} response cuts)"
    );
    assert!(proxy.cuts() >= 5, "only {} cuts", proxy.cuts());
    assert!(
        proxy.rewritten.load(Ordering::Relaxed) >= 1,
        "the client must have gone through the proxy"
    );

    // Delivery reports: per partition, offsets 0, 1, 2, ... in send order.
    for (p, offs) in offsets.iter().enumerate() {
        for (n, &o) in offs.iter().enumerate() {
            assert_eq!(o, n as i64, "partition {p}: record {n} was acknowledged at offset {o}");
        }
    }

    // The log itself, read straight from the broker: each record once, in order.
    for p in 0..PARTITIONS {
        let expected = next[p as usize];
        let got = common::consume_exactly(
            &direct,
            ConsumerConfig::default(),
            &topic,
            p,
            Offset::Earliest,
            expected,
        )
        .await;
        for (n, r) in got.iter().enumerate() {
            let value = std::str::from_utf8(r.record.value.as_deref().unwrap()).unwrap();
            let want = format!("p{p}-{n:06}-{}", "z".repeat(n % 64));
            assert_eq!(value, want, "partition {p} offset {}", r.record.offset);
            assert_eq!(r.record.offset, n as i64);
        }
    }
}
