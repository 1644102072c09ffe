//! A slow broker cannot make the producer buffer more than `buffer_memory`
//! (scripted broker): under acks=0 the broker stops reading its socket,
//! under acks=all it reads but never answers. In every case `send` ends up
//! waiting (it blocks when the buffer is full), the producer's accounted
//! bytes never pass `buffer_memory`, and the heap, measured by a counting
//! global allocator (this binary's own, so one test runs the scenarios in
//! turn), grows by at most about twice that plus a fixed slack. And a
//! producer encodes its batches into the buffers of completed ones.

#[path = "producer_support/broker.rs"]
mod broker;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use broker::{ProduceMode, TOPIC};
use bytes::Bytes;
use clink_kafka::client::{Acks, ClientConfig, Cluster, Producer, ProducerConfig, ProducerRecord};

/// Counts live heap bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Allocations of at least [`LARGE`] bytes (growths by `realloc` included).
static LARGE_ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
const LARGE: usize = 8 * 1024;
/// The tests of this binary share the counters: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn added(n: usize) {
    if n >= LARGE {
        LARGE_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
    let now = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's own pointer
// and layout, so `System`'s guarantees are the caller's; the counters are
// plain atomics and never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            added(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            added(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            added(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BUFFER: usize = 512 * 1024;
/// Runtime, connection read buffers, metadata, the test's own vectors.
const SLACK: usize = 1024 * 1024;
/// At most this many records are offered (100 MB of values).
const OFFERED: usize = 100_000;

struct Measured {
    sent: usize,
    blocked: bool,
    max_accounted: usize,
    heap_growth: usize,
}

async fn scenario(acks: Acks, idempotent: bool, mode: ProduceMode) -> Measured {
    let broker = broker::start(1, mode, true).await;
    let mut config = ClientConfig::new(&broker.addr);
    // Never give up on the silent broker during the test.
    config.request_timeout = Duration::from_secs(120);
    let cluster = Cluster::connect(config).await.expect("connect");
    let producer = Producer::new(
        cluster,
        ProducerConfig::default()
            .with_acks(acks)
            .with_idempotent(idempotent)
            .with_buffer_memory(BUFFER)
            .with_batch_size(16 * 1024)
            .with_linger(Duration::from_millis(1)),
    )
    .await
    .expect("producer");
    let value = Bytes::from(vec![b'x'; 1000]);
    // Warm the topic's metadata and the connection before the baseline.
    let first = producer.send(ProducerRecord::new(TOPIC, value.clone())).await.unwrap();
    drop(first);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let baseline = LIVE.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let mut m = Measured {
        sent: 0,
        blocked: false,
        max_accounted: 0,
        heap_growth: 0,
    };
    for _ in 0..OFFERED {
        let send = producer.send(ProducerRecord::new(TOPIC, value.clone()));
        match tokio::time::timeout(Duration::from_millis(300), send).await {
            Err(_) => {
                m.blocked = true;
                break;
            }
            Ok(r) => drop(r.expect("send")),
        }
        m.sent += 1;
        m.max_accounted = m.max_accounted.max(producer.buffered_bytes());
    }
    m.max_accounted = m.max_accounted.max(producer.buffered_bytes());
    m.heap_growth = PEAK.load(Ordering::Relaxed).saturating_sub(baseline);
    eprintln!(
        "{acks:?} idempotent={idempotent}: {} records queued before send blocked={}, max accounted {} B, \
         heap peak growth {} B (buffer_memory {BUFFER} B), Produce requests read {}",
        m.sent,
        m.blocked,
        m.max_accounted,
        m.heap_growth,
        broker.produce_requests.load(Ordering::SeqCst)
    );
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_broker_keeps_the_producer_within_buffer_memory() {
    let _serial = SERIAL.lock().await;
    for (acks, idempotent, mode) in [
        (Acks::None, false, ProduceMode::StopReading),
        (Acks::All, false, ProduceMode::NeverAnswer),
        (Acks::All, true, ProduceMode::NeverAnswer),
    ] {
        let m = scenario(acks, idempotent, mode).await;
        assert!(m.blocked, "{acks:?}: send never blocked after {} records", m.sent);
        assert!(m.sent > 10, "{acks:?}: blocked after only {} records", m.sent);
        assert!(
            m.max_accounted <= BUFFER,
            "{acks:?}: {} accounted bytes > buffer_memory {BUFFER}",
            m.max_accounted
        );
        assert!(
            m.heap_growth <= 2 * BUFFER + SLACK,
            "{acks:?}: the heap grew by {} bytes with buffer_memory {BUFFER}",
            m.heap_growth
        );
    }
}

/// Each Produce request takes one large allocation on the (in-process)
/// broker's side, to read it; the producer's own batches reuse the buffers
/// of completed ones (a fresh buffer per batch would double the count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_encoded_into_the_buffers_of_completed_ones() {
    let _serial = SERIAL.lock().await;
    // acks=0: a batch is complete once written, the broker reads all.
    let broker = broker::start(1, ProduceMode::NeverAnswer, false).await;
    let cluster = Cluster::connect(ClientConfig::new(&broker.addr))
        .await
        .expect("connect");
    let producer = Producer::new(
        cluster,
        ProducerConfig::default()
            .with_acks(Acks::None)
            .with_idempotent(false)
            .with_batch_size(32 * 1024)
            .with_linger(Duration::from_millis(1)),
    )
    .await
    .expect("producer");
    let value = Bytes::from(vec![b'x'; 1000]);
    drop(producer.send(ProducerRecord::new(TOPIC, value.clone())).await.unwrap());
    producer.flush(Duration::from_secs(10)).await.unwrap();
    let (allocations, requests) = (
        LARGE_ALLOCATIONS.load(Ordering::Relaxed),
        broker.produce_requests.load(Ordering::SeqCst),
    );
    for _ in 0..200 {
        for _ in 0..40 {
            drop(producer.send(ProducerRecord::new(TOPIC, value.clone())).await.unwrap());
        }
        producer.flush(Duration::from_secs(10)).await.unwrap();
    }
    let allocations = LARGE_ALLOCATIONS.load(Ordering::Relaxed) - allocations;
    let requests = broker.produce_requests.load(Ordering::SeqCst) - requests;
    eprintln!("{requests} Produce requests, {allocations} allocations of {LARGE} B or more");
    assert!(requests >= 200, "{requests} requests");
    assert!(
        allocations <= requests + requests / 4 + 16,
        "{allocations} large allocations for {requests} requests: batches do not reuse buffers"
    );
}
