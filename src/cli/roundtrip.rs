//! `clink-kafka roundtrip`: the end-to-end check. Creates a fresh topic,
//! produces N generated records with the idempotent producer, consumes them
//! back with `read_committed`, and verifies that every record arrived exactly
//! once, in order, with the payload it was sent with. Reports records/s, MB/s
//! and process CPU time per record for each phase, with a progress line at
//! least every 2 s. Any mismatch is an error (non-zero exit). Either backend
//! (`--backend`), through the backend traits; the topic is created and
//! deleted with the native admin client.
//!
//! Record `i` goes to partition `i % P` with key `i` (decimal) and a value
//! that is a pure function of `i` (see [`fill_value`]), so the consumer can
//! check each record without keeping what was sent. On a fresh topic, record
//! `i` must be at offset `i / P` of its partition.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use clap::Args;
use clink_kafka::client::{Acks, Admin, ClientConfig, Cluster, ConsumerConfig, IsolationLevel, NewTopic};
use clink_kafka::connector::options::Backend;
use clink_kafka::connector::{ConsumerBackend, DeliveryOutcome, KafkaMessage, ProducerBackend, Watermark};
use clink_kafka::wire::compression::Compression;
use cpu_time::ProcessTime;

use super::backend::ProducerSettings;
use super::{thousands, ConnectArgs};

/// Options of `roundtrip`.
#[derive(Args, Debug)]
pub struct RoundtripArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub backend: super::backend::BackendArgs,
    /// How many records to produce and read back.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Bytes per value (at least 8: the record index leads each value).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "lz4")]
    pub compression: String,
    /// The codec's level (librdkafka's compression.level): -1 is the
    /// codec's default; gzip 0..=9, lz4 0..=2, snappy 0, zstd 0..=12.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub compression_level: i32,
    /// Partitions of the fresh topic.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 512 * 1024)]
    pub batch_size: usize,
    /// linger.ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Give up on either phase after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Keep the topic afterwards (default: delete it).
    #[arg(long)]
    pub keep_topic: bool,
}

/// Writes record `i`'s value: the index (8 bytes, big-endian) and then
/// letters from a generator seeded with `i` (compressible like text, but
/// different for every record).
pub fn fill_value(i: u64, out: &mut [u8]) {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz ,.-_!";
    let head = out.len().min(8);
    out[..head].copy_from_slice(&i.to_be_bytes()[..head]);
    let mut state = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for chunk in out[head..].chunks_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for (j, b) in chunk.iter_mut().enumerate() {
            *b = ALPHABET[((state >> (j * 5)) & 31) as usize];
        }
    }
}

struct Phase {
    records: u64,
    bytes: u64,
    wall: Duration,
    cpu: Duration,
}

impl Phase {
    fn line(&self, name: &str) -> String {
        let secs = self.wall.as_secs_f64().max(1e-9);
        format!(
            "{name}: {} records, {:.1} MB in {:.2} s: {} records/s, {:.1} MB/s; process CPU {:.2} s = {} ns/record",
            thousands(self.records),
            self.bytes as f64 / 1e6,
            secs,
            thousands((self.records as f64 / secs) as u64),
            self.bytes as f64 / 1e6 / secs,
            self.cpu.as_secs_f64(),
            thousands(self.cpu.as_nanos() as u64 / self.records.max(1)),
        )
    }
}

/// Prints `label: n/total` every 2 s until dropped (plus how many are
/// queued, when `queued` is given).
struct Progress {
    task: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(label: &'static str, counter: Arc<AtomicU64>, queued: Option<Arc<AtomicU64>>, total: u64) -> Self {
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            tick.tick().await;
            loop {
                tick.tick().await;
                let n = counter.load(Ordering::Relaxed);
                let secs = started.elapsed().as_secs_f64();
                let queued = queued
                    .as_ref()
                    .map(|q| format!(", {} queued", thousands(q.load(Ordering::Relaxed))))
                    .unwrap_or_default();
                println!(
                    "  {label}: {}/{} records{queued} ({} records/s so far)",
                    thousands(n),
                    thousands(total),
                    thousands((n as f64 / secs) as u64)
                );
            }
        });
        Progress { task }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs `roundtrip`.
pub async fn run(args: RoundtripArgs) -> anyhow::Result<()> {
    let backend = args.backend.backend()?;
    ensure!(args.records > 0, "--records must be positive");
    ensure!(
        args.value_size >= 8,
        "--value-size must be at least 8 (the record index leads each value)"
    );
    ensure!(args.partitions > 0, "--partitions must be positive");
    let compression: Compression = args.compression.parse().context("--compression")?;
    let config = args.connect.client_config()?;
    let cluster = Cluster::connect(config.clone())
        .await
        .context("connecting to the cluster")?;
    let topic = unique_topic_name();
    let admin = Admin::new(cluster);
    admin
        .create_topics(&[NewTopic::new(&topic, args.partitions, 1)])
        .await
        .with_context(|| format!("creating topic {topic}"))?;
    println!(
        "roundtrip ({}): topic {topic} ({} partition(s)), {} records x {} B values, compression {compression}, \
         brokers {}",
        backend.name(),
        args.partitions,
        thousands(args.records),
        args.value_size,
        args.connect.brokers
    );
    let result = produce_and_verify(&args, backend, &config, &topic, compression).await;
    if !args.keep_topic {
        if let Err(e) = admin.delete_topics(&[&topic]).await {
            eprintln!("warning: deleting topic {topic}: {e}");
        }
    }
    result
}

async fn produce_and_verify(
    args: &RoundtripArgs,
    backend: Backend,
    config: &ClientConfig,
    topic: &str,
    compression: Compression,
) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout_secs);
    let parts = args.partitions as u64;
    let n = args.records;

    // Produce (idempotent: acks=all).
    let settings = ProducerSettings {
        acks: Acks::All,
        compression,
        compression_level: args.compression_level,
        linger: Duration::from_millis(args.linger_ms),
        batch_size: args.batch_size,
        max_in_flight: 5,
        allow_auto_create_topics: true,
        max_record_size: Some(args.value_size + 1024),
    };
    let mut producer = super::backend::producer(backend, config, topic, &settings).await?;
    let acked = Arc::new(AtomicU64::new(0));
    let queued = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("produce: acknowledged", acked.clone(), Some(queued.clone()), n);
    let cpu_start = ProcessTime::now();
    let started = Instant::now();
    let mut pending = std::collections::VecDeque::new();
    let mut value = vec![0u8; args.value_size];
    let mut bytes: u64 = 0;
    let check = |i: u64, report: DeliveryOutcome| -> anyhow::Result<()> {
        let report = report.with_context(|| format!("delivering record {i}"))?;
        let (want_p, want_o) = ((i % parts) as i32, (i / parts) as i64);
        if report.partition != want_p || report.offset != want_o {
            bail!(
                "record {i} was acknowledged at {topic}[{}] offset {}, expected partition {want_p} offset {want_o}",
                report.partition,
                report.offset
            );
        }
        acked.fetch_add(1, Ordering::Relaxed);
        Ok(())
    };
    for i in 0..n {
        fill_value(i, &mut value);
        let key = Bytes::from(i.to_string());
        bytes += (key.len() + value.len()) as u64;
        let m = KafkaMessage::new(Bytes::copy_from_slice(&value)).with_key(key);
        let fut = producer
            .send(topic, Some((i % parts) as i32), m)
            .await
            .with_context(|| format!("sending record {i}"))?;
        pending.push_back((i, fut));
        queued.store(i + 1, Ordering::Relaxed);
        // Check reports as we go; 50,000 records are many batches per
        // partition, so this window never starves the producer.
        while pending.len() > 50_000 {
            let (j, f) = pending.pop_front().expect("non-empty");
            check(j, f.await)?;
        }
        if started.elapsed() > timeout {
            bail!("producing took longer than {timeout:?}");
        }
    }
    producer.flush(timeout).await.context("flushing the producer")?;
    for (i, f) in pending {
        check(i, f.await)?;
    }
    let produce = Phase {
        records: n,
        bytes,
        wall: started.elapsed(),
        cpu: cpu_start.elapsed(),
    };
    drop(progress);
    producer.close(Duration::from_secs(30)).await?;
    println!("{}", produce.line("produce"));

    // Consume (read_committed) and verify.
    let native = ConsumerConfig::default()
        .with_isolation(IsolationLevel::ReadCommitted)
        .with_auto_offset_reset(None);
    let mut consumer = super::backend::consumer(backend, config, topic, None, true, native)
        .await
        .context("seeking to the beginning")?;
    let received = Arc::new(AtomicU64::new(0));
    let progress = Progress::start("consume", received.clone(), None, n);
    let cpu_start = ProcessTime::now();
    let started = Instant::now();
    let mut next_offset = vec![0i64; args.partitions as usize];
    let mut expected = vec![0u8; args.value_size];
    let mut count: u64 = 0;
    let mut bytes: u64 = 0;
    while count < n {
        if started.elapsed() > timeout {
            bail!("consumed only {count} of {n} records within {timeout:?}");
        }
        let records = consumer.poll(Duration::from_secs(1)).await.context("polling")?;
        for r in &records {
            let p = r.partition as usize;
            let offset = r.offset;
            ensure!(p < next_offset.len(), "{topic}: a record from partition {p}");
            if offset != next_offset[p] {
                bail!(
                    "{topic}[{p}]: got offset {offset}, expected {} (a record is missing or duplicated)",
                    next_offset[p]
                );
            }
            let i = offset as u64 * parts + p as u64;
            if i >= n {
                bail!("{topic}[{p}] offset {offset}: more records than were produced");
            }
            let key = r.key.as_deref().unwrap_or_default();
            if key != i.to_string().as_bytes() {
                bail!(
                    "{topic}[{p}] offset {offset}: key {:?}, expected {i}",
                    String::from_utf8_lossy(key)
                );
            }
            fill_value(i, &mut expected);
            let got = r.payload.as_deref().unwrap_or_default();
            if got != expected.as_slice() {
                bail!(
                    "{topic}[{p}] offset {offset}: the value of record {i} differs from what was sent ({} bytes)",
                    got.len()
                );
            }
            bytes += (key.len() + got.len()) as u64;
            next_offset[p] += 1;
            count += 1;
        }
        received.store(count, Ordering::Relaxed);
    }
    let consume = Phase {
        records: count,
        bytes,
        wall: started.elapsed(),
        cpu: cpu_start.elapsed(),
    };
    drop(progress);
    println!("{}", consume.line("consume"));

    // Nothing beyond: one more short poll, and the log end per partition.
    let extra = consumer
        .poll(Duration::from_millis(300))
        .await
        .context("polling for extra records")?;
    if let Some(r) = extra.first() {
        bail!(
            "unexpected extra record at {topic}[{}] offset {}",
            r.partition,
            r.offset
        );
    }
    for p in 0..args.partitions {
        let end = consumer.watermark(topic, p, Watermark::High).await?;
        let want = next_offset[p as usize];
        ensure!(
            end == want,
            "{topic}[{p}]: log end offset {end}, but {want} records were read"
        );
    }
    consumer.close().await?;
    println!(
        "verified: all {} records arrived exactly once, in order, with the payloads sent",
        thousands(n)
    );
    Ok(())
}

pub(super) fn unique_topic_name() -> String {
    let mut random = [0u8; 4];
    let _ = getrandom::fill(&mut random);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("clink-roundtrip-{ms}-{:08x}", u32::from_be_bytes(random))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_distinct() {
        let mut a = vec![0u8; 100];
        let mut b = vec![0u8; 100];
        fill_value(7, &mut a);
        fill_value(7, &mut b);
        assert_eq!(a, b);
        fill_value(8, &mut b);
        assert_ne!(a, b);
        assert_eq!(&a[..8], &7u64.to_be_bytes());
        let mut short = [0u8; 3];
        fill_value(1, &mut short);
    }
}
