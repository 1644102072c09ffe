//! End-to-end latency of the connector's backends (issue 23 point 5), run by
//! `benches/clients/run --latency-rates ...`: one process produces at a
//! fixed rate into a topic and consumes the same topic, and reports the
//! produce-to-consume latency of every record after a warm-up.
//!
//! The rules are the OpenMessaging Benchmark's: a fixed-rate producer, the
//! send timestamp in the payload, a warm-up discarded. Record `i` is due at
//! `start + i / rate`; the producer sends every due record each 1 ms tick,
//! and its payload starts with that due time (nanoseconds since a
//! process-wide monotonic origin, big-endian u64) and `i`; the rest is
//! `'x'`. The latency of a record is the time the consumer's `poll` returned
//! it minus its due time, so a producer that falls behind its schedule is
//! charged for it (no coordinated omission). Records due in the first
//! `--warmup-s` seconds are not counted.
//!
//! Producer and consumer go through the connector's backend traits
//! ([`ProducerBackend`], [`ConsumerBackend`], one code path for both
//! backends), in one tokio runtime, each in its own task. The consumer is
//! assigned every partition at the high watermark before the first send.
//!
//! ```sh
//! cargo build --release --bench client_latency              # native only
//! cargo build --release --features rdkafka --bench client_latency
//! client_latency --backend native --topic T --rate 10000 --duration-s 20 --warmup-s 5
//! ```
//!
//! Prints one JSON line on stdout: `sent`, `received`, `measured`, `failed`,
//! `p50_us`, `p99_us`, `p999_us`, `max_us`, `mean_us`. Exits non-zero if a
//! delivery failed or a record did not arrive within `--drain-s` after the
//! last send. A benchmark, not a test: it asserts no timing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use clink_kafka::client::{Acks, PartitionOffset};
use clink_kafka::connector::options::{Backend, SinkOptions, SourceOptions};
use clink_kafka::connector::selected::{SelectedConsumer, SelectedProducer};
use clink_kafka::connector::{ConsumerBackend, KafkaMessage, ProducerBackend, Watermark};
use clink_kafka::wire::compression::Compression;

struct Args {
    backend: String,
    brokers: String,
    topic: String,
    rate: u64,
    duration_s: f64,
    warmup_s: f64,
    drain_s: f64,
    value_size: usize,
    compression: String,
    linger_ms: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        backend: "native".into(),
        brokers: std::env::var("CLINK_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into()),
        topic: String::new(),
        rate: 1000,
        duration_s: 20.0,
        warmup_s: 5.0,
        drain_s: 30.0,
        value_size: 100,
        compression: "none".into(),
        linger_ms: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        // `cargo bench` passes --bench; ignore it.
        if flag == "--bench" {
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let num = |v: &str| -> anyhow::Result<f64> {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .with_context(|| format!("{flag}: not a non-negative number: {v:?}"))
        };
        match flag.as_str() {
            "--backend" => a.backend = value,
            "--brokers" => a.brokers = value,
            "--topic" => a.topic = value,
            "--rate" => a.rate = num(&value)? as u64,
            "--duration-s" => a.duration_s = num(&value)?,
            "--warmup-s" => a.warmup_s = num(&value)?,
            "--drain-s" => a.drain_s = num(&value)?,
            "--value-size" => a.value_size = num(&value)? as usize,
            "--compression" => a.compression = value,
            "--linger-ms" => a.linger_ms = num(&value)? as u64,
            other => bail!(
                "unknown option {other}; allowed: --backend, --brokers, --topic, --rate, --duration-s, \
                 --warmup-s, --drain-s, --value-size, --compression, --linger-ms"
            ),
        }
    }
    ensure!(!a.topic.is_empty(), "--topic is required");
    ensure!(
        (1..=10_000_000).contains(&a.rate),
        "--rate must be between 1 and 10,000,000 records/s"
    );
    ensure!(
        (16..=1 << 20).contains(&a.value_size),
        "--value-size must be between 16 and 1048576"
    );
    ensure!(a.warmup_s < a.duration_s, "--warmup-s must be less than --duration-s");
    Ok(a)
}

/// Nearest-rank percentile of sorted `xs` (not empty).
fn percentile(xs: &[u64], q: f64) -> u64 {
    let rank = ((q * xs.len() as f64).ceil() as usize).clamp(1, xs.len());
    xs[rank - 1]
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let backend = Backend::parse("--backend", &args.backend).map_err(|e| anyhow::anyhow!("{e}"))?;
    backend
        .check_available("--backend", &args.backend)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let compression: Compression = args.compression.parse().context("--compression")?;

    let mut so = SourceOptions::new(&args.brokers, &args.topic);
    so.backend = backend;
    let mut consumer = SelectedConsumer::for_options(&so).context("configuring the consumer")?;
    consumer.connect().await.context("connecting the consumer")?;
    let partitions = consumer.partition_count(&args.topic).await?;
    let mut at = Vec::new();
    for p in 0..partitions {
        at.push(PartitionOffset::new(
            p,
            consumer.watermark(&args.topic, p, Watermark::High).await?,
        ));
    }
    consumer.assign(&args.topic, &at).await?;

    let mut o = SinkOptions::new(&args.brokers, &args.topic);
    o.backend = backend;
    o.acks = Acks::All;
    o.compression = compression;
    o.linger = Duration::from_millis(args.linger_ms);
    let mut producer = SelectedProducer::for_options(&o).context("configuring the producer")?;
    producer.connect().await.context("connecting the producer")?;

    let origin = Instant::now();
    let now_ns = move || origin.elapsed().as_nanos() as u64;
    let total = (args.rate as f64 * args.duration_s).round() as u64;
    let period_ns = 1e9 / args.rate as f64;
    // Start a little later, so the first records are not due before the loops run.
    let start_ns = now_ns() + 50_000_000;
    let warmup_end_ns = start_ns + (args.warmup_s * 1e9) as u64;
    let failed = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let (dtx, mut drx) = tokio::sync::mpsc::unbounded_channel::<<SelectedProducer as ProducerBackend>::Delivery>();
    let (f2, a2) = (failed.clone(), acked.clone());
    let settle = tokio::spawn(async move {
        while let Some(d) = drx.recv().await {
            match d.await {
                Ok(_) => a2.fetch_add(1, Ordering::Relaxed),
                Err(_) => f2.fetch_add(1, Ordering::Relaxed),
            };
        }
    });
    let filler = vec![b'x'; args.value_size - 16];

    let produce = async {
        let mut i = 0u64;
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        while i < total {
            tick.tick().await;
            let now = now_ns();
            while i < total {
                let due = start_ns + (i as f64 * period_ns) as u64;
                if due > now {
                    break;
                }
                let mut v = Vec::with_capacity(args.value_size);
                v.extend_from_slice(&due.to_be_bytes());
                v.extend_from_slice(&i.to_be_bytes());
                v.extend_from_slice(&filler);
                let m = KafkaMessage::new(Bytes::from(v));
                let d = producer.send(&args.topic, None, m).await?;
                let _ = dtx.send(d);
                i += 1;
            }
        }
        producer.flush(Duration::from_secs(60)).await?;
        anyhow::Ok(i)
    };

    let drain_s = args.drain_s;
    // The consumer runs in its own task, so a poll that takes its time
    // never holds up the producer's schedule (and the reverse).
    let consume = tokio::spawn(async move {
        let mut lat = Vec::with_capacity(total as usize);
        let mut received = 0u64;
        let last_due = start_ns + (total.saturating_sub(1) as f64 * period_ns) as u64;
        let give_up = last_due + (args.drain_s * 1e9) as u64;
        while received < total {
            ensure!(
                now_ns() < give_up,
                "received {received} of {total} records within --drain-s {} after the last was due",
                drain_s
            );
            let batch = consumer.poll(Duration::from_millis(100)).await?;
            let now = now_ns();
            for m in batch {
                let p = m.payload.as_deref().unwrap_or(&[]);
                ensure!(p.len() >= 16, "a record of {} bytes (not ours)", p.len());
                let due = u64::from_be_bytes(p[..8].try_into().expect("8 bytes"));
                received += 1;
                if due >= warmup_end_ns {
                    lat.push(now.saturating_sub(due));
                }
            }
        }
        consumer.close().await?;
        anyhow::Ok((received, lat))
    });

    let sent = produce.await;
    let consumed = consume.await.context("consumer task")?;
    let sent = sent?;
    let (received, mut lat) = consumed?;
    drop(dtx);
    settle.await.context("delivery task")?;
    producer.close(Duration::from_secs(30)).await?;
    let failed = failed.load(Ordering::Relaxed);
    ensure!(!lat.is_empty(), "no record after the warm-up");
    lat.sort_unstable();
    let us = |ns: u64| (ns as f64 / 1e3 * 10.0).round() / 10.0;
    let mean = lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len() as f64;
    println!(
        "{{\"backend\":\"{}\",\"rate\":{},\"sent\":{sent},\"received\":{received},\"acked\":{},\"failed\":{failed},\
         \"measured\":{},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"mean_us\":{}}}",
        backend.name(),
        args.rate,
        acked.load(Ordering::Relaxed),
        lat.len(),
        us(percentile(&lat, 0.50)),
        us(percentile(&lat, 0.99)),
        us(percentile(&lat, 0.999)),
        us(*lat.last().expect("not empty")),
        (mean / 100.0).round() / 10.0,
    );
    ensure!(failed == 0, "{failed} deliveries failed");
    Ok(())
}
