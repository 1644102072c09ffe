//! Memory stays within the configured bounds when a scripted broker's
//! answers carry batches that inflate far past them (a few KiB of zstd
//! inflating to MiBs each), and the records still arrive.
//!
//! Measured for real: a counting global allocator records the peak of live
//! heap bytes while the consumer works through the answers. This binary
//! holds one test so nothing else allocates meanwhile.

mod fetch_peer;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clink_kafka::client::{Consumer, ConsumerConfig, Offset};
use clink_kafka::wire::compression::Compression;
use clink_kafka::wire::record::{BatchMeta, RecordBatchEncoder, RecordOut};
use fetch_peer::str;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is forwarded as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = LIVE.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size - layout.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const TOPIC: &str = "bombs";
/// Records per batch: 100-byte values, about 3 MiB inflated per batch.
const PER_BATCH: i64 = 28_000;
/// Batches per answer, answers in all.
const BATCHES: i64 = 4;
const ANSWERS: i64 = 2;
const TOTAL: i64 = PER_BATCH * BATCHES * ANSWERS;

fn bombs(from: i64) -> Bytes {
    let value = [b'z'; 100];
    let records: Vec<RecordOut<'_>> = (0..PER_BATCH)
        .map(|_| RecordOut {
            timestamp: 1,
            key: None,
            value: Some(&value),
            headers: &[],
        })
        .collect();
    let mut out = BytesMut::new();
    for b in 0..BATCHES {
        let meta = BatchMeta {
            base_offset: from + b * PER_BATCH,
            compression: Compression::Zstd,
            ..BatchMeta::default()
        };
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
    }
    out.freeze()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_inflating_past_the_bounds_cost_bounded_memory_and_still_arrive() {
    // The answers, made up front: compressed, they are small.
    let answers: Vec<Bytes> = (0..ANSWERS).map(|a| bombs(a * PER_BATCH * BATCHES)).collect();
    let compressed: usize = answers.iter().map(Bytes::len).sum();
    assert!(compressed < 2 << 20, "the fixture compresses: {compressed} bytes");
    let answers = Arc::new(Mutex::new(answers));
    let a = answers.clone();
    let answer = Box::new(move |req: &FetchRequest| {
        let mut resp = FetchResponse::default();
        for t in &req.topics {
            for p in &t.partitions {
                let i = p.fetch_offset / (PER_BATCH * BATCHES);
                let Some(records) = a.lock().unwrap().get(i as usize).cloned() else {
                    continue;
                };
                let mut d = PartitionData::default();
                d.partition_index = p.partition;
                d.high_watermark = TOTAL;
                d.last_stable_offset = TOTAL;
                d.records = Some(records);
                let mut e = FetchableTopicResponse::default();
                e.topic = TopicName(str(TOPIC));
                e.partitions = vec![d];
                resp.responses.push(e);
            }
        }
        resp
    });
    let cluster = fetch_peer::start(TOPIC, 1, answer).await;
    let inflate_cap = 4 << 20;
    let max_poll_bytes = 256 << 10;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig {
            max_wait: Duration::from_millis(20),
            max_poll_records: 2000,
            max_poll_bytes,
            max_batch_inflate: inflate_cap,
            ..ConsumerConfig::default()
        },
    );
    consumer.assign(&[(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::At(0)).await.unwrap();
    let baseline = LIVE.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let mut next = 0i64;
    let mut polls = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < TOTAL {
        assert!(Instant::now() < deadline, "only {next} of {TOTAL} records in 60 s");
        let records = consumer.poll(Duration::from_millis(500)).await.unwrap();
        let bytes: usize = records
            .iter()
            .map(|r| r.record.value.as_ref().map_or(0, |v| v.len()))
            .sum();
        assert!(bytes <= max_poll_bytes, "a poll of {bytes} bytes");
        for r in &records {
            assert_eq!(r.record.offset, next);
            next += 1;
        }
        polls += !records.is_empty() as usize;
    }
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(baseline);
    // One inflated batch (zstd may hold up to twice the cap while
    // decoding), the compressed answers in flight, one poll's records and
    // their vector: well under three caps. Inflating a whole answer at once
    // (what the consumer did before) needs BATCHES * 2.8 MiB plus a record
    // struct per record (over 20 MiB for one answer).
    let bound = 3 * inflate_cap;
    eprintln!("peak live heap above baseline: {peak} bytes (bound {bound}); {polls} polls");
    assert!(peak < bound, "peak live heap {peak} bytes over the bound {bound}");
    assert!(polls >= (TOTAL as usize * 100) / max_poll_bytes, "{polls} polls");
}
