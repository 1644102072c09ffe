//! Memory stays within the configured bounds when a scripted broker's
//! answers carry batches that inflate far past them (8 MiB batches of
//! every codec, a consumer whose `max_batch_inflate` is 1 MiB), and every
//! record still arrives: batches are inflated chunk by chunk.
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
use clink_kafka::client::{Consumer, ConsumerConfig, Offset, TopicPartition};
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
/// Records per batch: 100-byte values, about 10 MiB inflated per batch.
const PER_BATCH: i64 = 90_000;
/// Batches per answer (one answer per codec).
const BATCHES: i64 = 2;
const TOTAL: i64 = PER_BATCH * BATCHES;

/// One answer's records: `BATCHES` batches of `codec`, the first at
/// offset 0. (The CRC does not cover the base offset, so one encoded batch
/// serves at every offset.)
fn bombs(codec: Compression) -> Bytes {
    let values: Vec<[u8; 100]> = (0..PER_BATCH).map(|i| [b'a' + (i % 26) as u8; 100]).collect();
    let records: Vec<RecordOut<'_>> = values
        .iter()
        .map(|v| RecordOut {
            timestamp: 1,
            key: None,
            value: Some(v),
            headers: &[],
        })
        .collect();
    let mut one = BytesMut::new();
    let meta = BatchMeta {
        base_offset: 0,
        compression: codec,
        ..BatchMeta::default()
    };
    RecordBatchEncoder::new().encode(&mut one, &meta, &records).unwrap();
    let mut out = BytesMut::new();
    for b in 0..BATCHES {
        let at = out.len();
        out.extend_from_slice(&one);
        out[at..at + 8].copy_from_slice(&(b * PER_BATCH).to_be_bytes());
    }
    out.freeze()
}

/// Consumes one answer of `codec` bombs; returns the peak live heap above
/// the baseline, the number of polls and the answer's compressed size.
async fn consume_all(codec: Compression, inflate_cap: usize, max_poll_bytes: usize) -> (usize, usize, usize) {
    // The answer, made up front: compressed, it is small.
    let answer_bytes = bombs(codec);
    let compressed = answer_bytes.len();
    assert!(
        answer_bytes.len() < 2 << 20,
        "the {codec} fixture compresses: {} bytes",
        answer_bytes.len()
    );
    let answer_bytes = Arc::new(Mutex::new(answer_bytes));
    let a = answer_bytes.clone();
    let answer = Box::new(move |req: &FetchRequest| {
        let mut resp = FetchResponse::default();
        for t in &req.topics {
            for p in &t.partitions {
                if p.fetch_offset >= TOTAL {
                    continue;
                }
                let mut d = PartitionData::default();
                d.partition_index = p.partition;
                d.high_watermark = TOTAL;
                d.last_stable_offset = TOTAL;
                d.records = Some(a.lock().unwrap().clone());
                let mut e = FetchableTopicResponse::default();
                e.topic = TopicName(str(TOPIC));
                e.partitions = vec![d];
                resp.responses.push(e);
            }
        }
        resp
    });
    let cluster = fetch_peer::start(TOPIC, 1, answer).await;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig::default()
            .with_max_wait(Duration::from_millis(20))
            .with_max_poll_records(2000)
            .with_max_poll_bytes(max_poll_bytes)
            .with_max_batch_inflate(inflate_cap),
    );
    consumer.assign(&[TopicPartition::new(TOPIC, 0)]);
    consumer.seek(TOPIC, 0, Offset::At(0)).await.unwrap();
    let baseline = LIVE.load(Ordering::Relaxed);
    PEAK.store(baseline, Ordering::Relaxed);
    let mut next = 0i64;
    let mut polls = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while next < TOTAL {
        assert!(
            Instant::now() < deadline,
            "{codec}: only {next} of {TOTAL} records in 120 s"
        );
        let records = consumer.poll(Duration::from_millis(500)).await.unwrap();
        let bytes: usize = records
            .iter()
            .map(|r| r.record.value.as_ref().map_or(0, |v| v.len()))
            .sum();
        assert!(bytes <= max_poll_bytes, "a poll of {bytes} bytes");
        for r in &records {
            assert_eq!(r.record.offset, next, "{codec}");
            assert_eq!(
                r.record.value.as_ref().map(|v| v[0]),
                Some(b'a' + (next % PER_BATCH % 26) as u8)
            );
            next += 1;
        }
        polls += !records.is_empty() as usize;
    }
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(baseline);
    drop(consumer);
    (peak, polls, compressed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_inflating_past_the_bounds_cost_bounded_memory_and_still_arrive() {
    let inflate_cap = 1 << 20;
    let max_poll_bytes = 256 << 10;
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let (peak, polls, compressed) = consume_all(codec, inflate_cap, max_poll_bytes).await;
        // The compressed answer twice (the scripted broker encoding it in
        // this process, the consumer's received frame), then one window of
        // inflated records (a 256 KiB chunk plus a codec step), the codec's
        // state (zstd: a window clamped to the cap), one poll's records and
        // their vector: under three caps. Inflating a batch whole (what the
        // consumer did before) takes 10 MiB per batch, and with a cap of
        // 1 MiB it was a corrupt-record error.
        let bound = 2 * compressed + 3 * inflate_cap;
        eprintln!(
            "{codec}: peak live heap above baseline: {peak} bytes (bound {bound}, answer {compressed} bytes \
             compressed, {} inflated); {polls} polls",
            TOTAL * 108
        );
        assert!(
            peak < bound,
            "{codec}: peak live heap {peak} bytes over the bound {bound}"
        );
        assert!(
            polls >= (TOTAL as usize * 100) / max_poll_bytes,
            "{codec}: {polls} polls"
        );
    }
}
