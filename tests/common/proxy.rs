//! A TCP proxy between the client and the real broker, for fault and
//! concurrency tests. It rewrites the broker addresses in Metadata responses
//! to its own, so every connection the client opens goes through it. It can
//! cut connections mid-request or mid-response at points drawn from a seeded
//! generator, and hold Produce responses back for a while, counting how many
//! Produce requests are outstanding at once.
//!
//! [`ClusterProxy`] puts one such proxy in front of each broker of a
//! cluster (Metadata rewritten so each node id points at its own proxy) and
//! can cut the client off from one broker — a network partition: requests
//! and answers silently dropped, new connections accepted and left mute —
//! and heal it, closing the connections that lived through it.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, MetadataResponse, ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The proxy stops cutting after this many cuts, so a run always ends.
pub const MAX_CUTS: usize = 40;

/// What the proxy does besides forwarding.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProxyOptions {
    /// Cut connections (seeded); `None` never cuts.
    pub cut_seed: Option<u64>,
    /// Hold each Produce response this long before passing it on.
    pub hold_produce_responses: Duration,
}

/// xorshift64*: reproducible fault choices without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo) as u64) as usize
    }
}

/// The seed of a fault test: `CLINK_FAULT_SEED` (to replay a run) or a
/// fresh random one; printed either way.
pub fn fault_seed() -> u64 {
    let seed = std::env::var("CLINK_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let mut b = [0u8; 8];
            getrandom::fill(&mut b).unwrap();
            u64::from_le_bytes(b)
        });
    eprintln!("fault seed: {seed} (CLINK_FAULT_SEED={seed} replays this run)");
    seed
}

pub struct Proxy {
    pub addr: SocketAddr,
    /// Connections cut while a request was being written to the broker.
    pub cuts_in_request: Arc<AtomicUsize>,
    /// Connections cut while a response was being written to the client.
    pub cuts_in_response: Arc<AtomicUsize>,
    /// Connections accepted.
    pub accepted: Arc<AtomicUsize>,
    /// Metadata responses whose broker list was rewritten.
    pub rewritten: Arc<AtomicUsize>,
    pub cutting: Arc<AtomicBool>,
    /// Produce requests forwarded whose responses the client has not had yet.
    pub produce_outstanding: Arc<AtomicUsize>,
    /// The most Produce requests ever outstanding at once.
    pub max_produce_outstanding: Arc<AtomicUsize>,
    /// Produce requests forwarded that expect an answer, in all.
    pub produce_requests: Arc<AtomicUsize>,
    /// Partitions answered OUT_OF_ORDER_SEQUENCE_NUMBER in Produce
    /// responses handed to the client whole. An idempotent producer that
    /// keeps each partition's batches on one connection at a time, in
    /// sequence order, never gets one (a stale connection's late appends
    /// only ever make its batches duplicates).
    pub out_of_order_answers: Arc<AtomicUsize>,
    /// While set, nothing passes either way (a network partition).
    pub partitioned: Arc<AtomicBool>,
    /// While set, each new connection is closed at once, as by a broker
    /// that is down (existing connections are left alone).
    pub refusing: Arc<AtomicBool>,
}

/// Where a Metadata answer's brokers are pointed.
#[derive(Clone)]
enum Rewrite {
    /// Every broker at this proxy.
    AllTo(SocketAddr),
    /// Each node id at its own proxy.
    PerNode(Arc<BTreeMap<i32, SocketAddr>>),
}

impl Proxy {
    pub async fn start(upstream: String, options: ProxyOptions) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        Proxy::serve(listener, upstream, options, Rewrite::AllTo(addr))
    }

    fn serve(listener: TcpListener, upstream: String, options: ProxyOptions, rewrite: Rewrite) -> Proxy {
        let addr = listener.local_addr().unwrap();
        let proxy = Proxy {
            addr,
            cuts_in_request: Arc::default(),
            cuts_in_response: Arc::default(),
            accepted: Arc::default(),
            rewritten: Arc::default(),
            cutting: Arc::new(AtomicBool::new(options.cut_seed.is_some())),
            produce_outstanding: Arc::default(),
            max_produce_outstanding: Arc::default(),
            produce_requests: Arc::default(),
            out_of_order_answers: Arc::default(),
            partitioned: Arc::default(),
            refusing: Arc::default(),
        };
        let partitioned = proxy.partitioned.clone();
        let refusing = proxy.refusing.clone();
        let (outstanding, max_outstanding) = (proxy.produce_outstanding.clone(), proxy.max_produce_outstanding.clone());
        let hold = options.hold_produce_responses;
        let produce_requests = proxy.produce_requests.clone();
        let out_of_order_answers = proxy.out_of_order_answers.clone();
        let (req, resp, accepted, rewritten, cutting) = (
            proxy.cuts_in_request.clone(),
            proxy.cuts_in_response.clone(),
            proxy.accepted.clone(),
            proxy.rewritten.clone(),
            proxy.cutting.clone(),
        );
        let rng = Arc::new(Mutex::new(Rng(options.cut_seed.unwrap_or(1) | 1)));
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let nth = accepted.fetch_add(1, Ordering::Relaxed);
                if refusing.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                if partitioned.load(Ordering::SeqCst) {
                    // Accepted, then mute until the partition heals.
                    tokio::spawn(mute_until_healed(client, partitioned.clone()));
                    continue;
                }
                let Ok(broker) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = broker.set_nodelay(true);
                // Each connection is cut in one direction, after a number of
                // bytes drawn here; the first bytes (ApiVersions, Metadata)
                // always pass. The direction alternates per connection (a
                // coin per connection could leave a run cut one way only, and
                // the test needs both); the cut points are seeded.
                let (cut_req, cut_resp) = {
                    let mut r = rng.lock().unwrap();
                    if nth.is_multiple_of(2) {
                        (r.range(20_000, 600_000), usize::MAX)
                    } else {
                        (usize::MAX, r.range(1_000, 8_000))
                    }
                };
                let conn = Conn {
                    rewrite: rewrite.clone(),
                    partitioned: partitioned.clone(),
                    metadata: Arc::default(),
                    produce: Arc::default(),
                    hold,
                    outstanding: outstanding.clone(),
                    max_outstanding: max_outstanding.clone(),
                    produce_requests: produce_requests.clone(),
                    out_of_order_answers: out_of_order_answers.clone(),
                    cutting: cutting.clone(),
                    total_cuts: (req.clone(), resp.clone()),
                    rewritten: rewritten.clone(),
                };
                tokio::spawn(conn.run(client, broker, cut_req, cut_resp));
            }
        });
        proxy
    }

    pub fn cuts(&self) -> usize {
        self.cuts_in_request.load(Ordering::Relaxed) + self.cuts_in_response.load(Ordering::Relaxed)
    }
}

/// Holds a connection open and silent while `partitioned` is set, then
/// drops it.
async fn mute_until_healed<T>(held: T, partitioned: Arc<AtomicBool>) {
    while partitioned.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
}

/// One proxy per broker of a cluster; see the module docs.
pub struct ClusterProxy {
    /// By node id.
    pub proxies: BTreeMap<i32, Proxy>,
}

impl ClusterProxy {
    /// Proxies for `brokers` (node id, `host:port`), forwarding only.
    pub async fn start(brokers: &[(i32, String)]) -> ClusterProxy {
        let mut listeners = Vec::new();
        let mut addrs = BTreeMap::new();
        for (id, upstream) in brokers {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            addrs.insert(*id, l.local_addr().unwrap());
            listeners.push((*id, upstream.clone(), l));
        }
        let rewrite = Rewrite::PerNode(Arc::new(addrs));
        let proxies = listeners
            .into_iter()
            .map(|(id, upstream, l)| (id, Proxy::serve(l, upstream, ProxyOptions::default(), rewrite.clone())))
            .collect();
        ClusterProxy { proxies }
    }

    /// The bootstrap list through the proxies.
    pub fn bootstrap(&self) -> String {
        self.proxies
            .values()
            .map(|p| p.addr.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Makes broker `node` look down (new connections closed at once), or
    /// up again.
    pub fn set_refusing(&self, node: i32, refusing: bool) {
        self.proxies[&node].refusing.store(refusing, Ordering::SeqCst);
    }

    /// Cuts the client off from broker `node` (silently), or heals it.
    pub fn set_partitioned(&self, node: i32, partitioned: bool) {
        self.proxies[&node].partitioned.store(partitioned, Ordering::SeqCst);
    }
}

struct Conn {
    rewrite: Rewrite,
    partitioned: Arc<AtomicBool>,
    /// Correlation id → version of Metadata requests in flight.
    metadata: Arc<Mutex<HashMap<i32, i16>>>,
    /// Correlation id → version of Produce requests that expect an answer.
    produce: Arc<Mutex<HashMap<i32, i16>>>,
    hold: Duration,
    outstanding: Arc<AtomicUsize>,
    max_outstanding: Arc<AtomicUsize>,
    produce_requests: Arc<AtomicUsize>,
    out_of_order_answers: Arc<AtomicUsize>,
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
                    if this.partitioned.load(Ordering::SeqCst) {
                        // Dropped on the wire; the connection dies with the partition.
                        mute_until_healed((), this.partitioned.clone()).await;
                        return;
                    }
                    // Request header: api key, api version, correlation id.
                    if frame.len() >= 12 && i16::from_be_bytes([frame[4], frame[5]]) == ApiKey::Metadata as i16 {
                        let version = i16::from_be_bytes([frame[6], frame[7]]);
                        let correlation = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
                        this.metadata.lock().unwrap().insert(correlation, version);
                    }
                    // Produce v3+: header, client id, transactional id, acks.
                    if frame.len() >= 12 && i16::from_be_bytes([frame[4], frame[5]]) == ApiKey::Produce as i16 {
                        let version = i16::from_be_bytes([frame[6], frame[7]]);
                        let correlation = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
                        if produce_expects_answer(&frame) {
                            this.produce.lock().unwrap().insert(correlation, version);
                            let now = this.outstanding.fetch_add(1, Ordering::SeqCst) + 1;
                            this.max_outstanding.fetch_max(now, Ordering::SeqCst);
                            this.produce_requests.fetch_add(1, Ordering::SeqCst);
                        }
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
                    if this.partitioned.load(Ordering::SeqCst) {
                        mute_until_healed((), this.partitioned.clone()).await;
                        return;
                    }
                    let correlation = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                    let metadata_version = this.metadata.lock().unwrap().remove(&correlation);
                    if let Some(version) = metadata_version {
                        frame = this.rewrite_metadata(&frame, version);
                    }
                    let produce_version = this.produce.lock().unwrap().remove(&correlation);
                    if produce_version.is_some() {
                        if !this.hold.is_zero() {
                            tokio::time::sleep(this.hold).await;
                        }
                        this.outstanding.fetch_sub(1, Ordering::SeqCst);
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
                    if let Some(version) = produce_version {
                        let n = out_of_order_partitions(&frame, version);
                        this.out_of_order_answers.fetch_add(n, Ordering::SeqCst);
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
            let to = match &self.rewrite {
                Rewrite::AllTo(addr) => *addr,
                Rewrite::PerNode(map) => match map.get(&b.node_id.0) {
                    Some(addr) => *addr,
                    None => continue,
                },
            };
            b.host = super::scripted::str(&to.ip().to_string());
            b.port = i32::from(to.port());
        }
        self.rewritten.fetch_add(1, Ordering::Relaxed);
        super::scripted::encode(header.correlation_id, ApiKey::Metadata, version, &body).to_vec()
    }
}

/// Whether a Produce request wants a response (acks != 0). Request header
/// v1/v2: api key, version, correlation id, client id (i16 length), tagged
/// fields when flexible (v9+); then the transactional id and acks.
/// Partitions answered OUT_OF_ORDER_SEQUENCE_NUMBER (45) in a Produce
/// response frame (size prefix included) of request version `version`.
fn out_of_order_partitions(frame: &[u8], version: i16) -> usize {
    let mut buf = Bytes::copy_from_slice(&frame[4..]);
    let header_version = ApiKey::Produce.response_header_version(version);
    ResponseHeader::decode(&mut buf, header_version).expect("produce response header");
    let body = ProduceResponse::decode(&mut buf, version).expect("produce response");
    body.responses
        .iter()
        .flat_map(|t| t.partition_responses.iter())
        .filter(|p| p.error_code == 45)
        .count()
}

fn produce_expects_answer(frame: &[u8]) -> bool {
    let version = i16::from_be_bytes([frame[6], frame[7]]);
    let mut pos = 12;
    let client_id_len = i16::from_be_bytes([frame[pos], frame[pos + 1]]).max(0) as usize;
    pos += 2 + client_id_len;
    if version >= 9 {
        pos += 1; // empty header tagged fields
                  // compact nullable string: unsigned varint length + 1
        let mut len = 0usize;
        let mut shift = 0;
        loop {
            let b = frame[pos];
            pos += 1;
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        pos += len.saturating_sub(1);
    } else {
        let n = i16::from_be_bytes([frame[pos], frame[pos + 1]]);
        pos += 2 + n.max(0) as usize;
    }
    i16::from_be_bytes([frame[pos], frame[pos + 1]]) != 0
}
