//! Connector-level benchmark (issue 10 part 6): CPU per record of the
//! connector itself, per backend, in-process, with no CLI in between.
//!
//! - **source**: a [`KafkaSource`] over a pre-filled topic into an emitter
//!   that drops each batch, until N records were emitted (the reference's
//!   source bench).
//! - **sink**: N records of S bytes handed to an at-least-once
//!   [`KafkaSink`] in batches of 2,048 (the source's default batch), then a
//!   flush that waits for every acknowledgement, into a fresh topic.
//!
//! Each measurement runs in a child process of this binary (so peak RSS is
//! the measurement's own). The figure is process CPU time (user + sys of
//! every thread: tokio workers and librdkafka's threads alike, from
//! `CLOCK_PROCESS_CPUTIME_ID`) from just before `open` to the last record
//! emitted (source) or acknowledged (sink), divided by N; wall time over
//! the same span; peak RSS is the child's `VmHWM`. The source topic of a
//! workload is filled once (natively) and read by every run of both
//! backends; backends alternate, their order rotated per run. Medians of
//! the runs are printed as a table, with each backend's ratio to the other.
//!
//! It is a benchmark, not a test: nothing asserts a timing, and it runs only
//! under `cargo bench`. It needs the local broker (`CLINK_KAFKA_BROKERS`,
//! default 127.0.0.1:19092) and, for the rdkafka backend, the feature:
//!
//! ```sh
//! cargo bench --features rdkafka --bench connector                 # 1M x 100 B, 1 and 12 partitions, none and lz4, 3 runs
//! cargo bench --features rdkafka --bench connector -- --records 200000 --runs 1 --partitions 12 --compression lz4 --sides source
//! ```
//!
//! Options (after `--`): `--records N`, `--value-size S`, `--runs R`,
//! `--partitions 1,12`, `--compression none,lz4`, `--backends
//! native,rdkafka`, `--sides source,sink`, `--raw FILE` (every measurement as
//! a JSON line).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use clink_kafka::client::{Admin, ClientConfig, Cluster, NewTopic};
use clink_kafka::connector::options::{Backend, SinkOptions, SourceOptions};
use clink_kafka::connector::selected::{kafka_sink, kafka_source};
use clink_kafka::connector::{Emitter, KafkaMessage};
use clink_kafka::wire::compression::Compression;
use cpu_time::ProcessTime;

/// What one child measured.
struct Measurement {
    cpu: Duration,
    wall: Duration,
    peak_rss_kib: u64,
}

impl Measurement {
    fn json(&self, side: &str, backend: &str, workload: &str, records: u64, run: usize) -> String {
        format!(
            "{{\"side\":\"{side}\",\"backend\":\"{backend}\",\"workload\":\"{workload}\",\"records\":{records},\"run\":{run},\
             \"cpu_ns\":{},\"wall_ns\":{},\"peak_rss_kib\":{}}}",
            self.cpu.as_nanos(),
            self.wall.as_nanos(),
            self.peak_rss_kib
        )
    }
}

/// An emitter that drops every batch, counting its records.
struct Discard(u64);

impl Emitter<KafkaMessage> for Discard {
    fn emit(&mut self, batch: Vec<KafkaMessage>) {
        self.0 += batch.len() as u64;
    }
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn backend(name: &str) -> anyhow::Result<Backend> {
    match name {
        "native" => Ok(Backend::Native),
        "rdkafka" => Ok(Backend::Rdkafka),
        other => bail!("unknown backend {other:?}: native or rdkafka"),
    }
}

fn sink_options(brokers: &str, topic: &str, backend: Backend, compression: Compression) -> SinkOptions {
    let mut o = SinkOptions::new(brokers, topic);
    o.backend = backend;
    o.compression = compression;
    o.linger = Duration::from_millis(5);
    o.producer.batch_size = Some(256 * 1024);
    o
}

/// The records the sink side sends and the source topics hold: `size`
/// bytes of `x`, no key (the clients bench's workload).
fn batches(records: u64, size: usize) -> impl Iterator<Item = Vec<KafkaMessage>> {
    const BATCH: u64 = 2048;
    let value = Bytes::from(vec![b'x'; size]);
    (0..records.div_ceil(BATCH)).map(move |i| {
        let n = BATCH.min(records - i * BATCH);
        (0..n).map(|_| KafkaMessage::new(value.clone())).collect()
    })
}

/// Sends `records` records through a sink on `backend`, flushing at the end.
async fn run_sink(
    brokers: &str,
    topic: &str,
    backend: Backend,
    codec: Compression,
    records: u64,
    size: usize,
) -> anyhow::Result<()> {
    let mut sink = kafka_sink(sink_options(brokers, topic, backend, codec))?;
    sink.open_sink().await?;
    for batch in batches(records, size) {
        sink.send_batch(batch).await?;
    }
    sink.flush_sink().await?;
    let counters = sink.counters();
    ensure!(
        counters.delivered() == records && counters.delivery_errors() == 0,
        "sink: {} of {records} delivered, {} errors",
        counters.delivered(),
        counters.delivery_errors()
    );
    sink.close_sink().await?;
    Ok(())
}

/// The child: one measurement, printed as `cpu_ns wall_ns peak_rss_kib`.
async fn child(args: &[String]) -> anyhow::Result<()> {
    let [side, backend_name, brokers, topic, records, size, codec] = args else {
        bail!("child arguments: side backend brokers topic records size codec");
    };
    let backend = backend(backend_name)?;
    let records: u64 = records.parse()?;
    let size: usize = size.parse()?;
    let codec: Compression = codec.parse().context("codec")?;
    let started = (Instant::now(), ProcessTime::now());
    let (wall, cpu) = match side.as_str() {
        "source" => {
            let mut o = SourceOptions::new(brokers.as_str(), topic.as_str());
            o.backend = backend;
            o.group_id = format!("clink-bench-{}", std::process::id());
            let mut source = kafka_source(o)?;
            source.open_source().await?;
            let mut out = Discard(0);
            let deadline = Instant::now() + Duration::from_secs(300);
            while out.0 < records {
                ensure!(
                    Instant::now() < deadline,
                    "source: {} of {records} records in 300 s",
                    out.0
                );
                source.produce_batch(&mut out).await?;
            }
            let measured = (started.0.elapsed(), started.1.elapsed());
            ensure!(out.0 == records, "source: {} records where {records} were due", out.0);
            source.close_source().await?;
            measured
        }
        "sink" => {
            run_sink(brokers, topic, backend, codec, records, size).await?;
            (started.0.elapsed(), started.1.elapsed())
        }
        other => bail!("unknown side {other:?}"),
    };
    println!("{} {} {}", cpu.as_nanos(), wall.as_nanos(), peak_rss_kib());
    Ok(())
}

fn measure(
    side: &str,
    backend: &str,
    brokers: &str,
    topic: &str,
    records: u64,
    size: usize,
    codec: &str,
) -> anyhow::Result<Measurement> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .args([
            "--child",
            side,
            backend,
            brokers,
            topic,
            &records.to_string(),
            &size.to_string(),
            codec,
        ])
        .output()
        .context("starting the measurement")?;
    ensure!(
        out.status.success(),
        "{side} on {backend} over {topic}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u128> = text
        .split_whitespace()
        .map(|s| s.parse())
        .collect::<Result<_, _>>()
        .with_context(|| format!("child output {text:?}"))?;
    ensure!(v.len() == 3, "child output {text:?}");
    Ok(Measurement {
        cpu: Duration::from_nanos(v[0] as u64),
        wall: Duration::from_nanos(v[1] as u64),
        peak_rss_kib: v[2] as u64,
    })
}

fn list(args: &[String], flag: &str, default: &str) -> Vec<String> {
    let v = args
        .iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .unwrap_or(default);
    v.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Runtime::new()?;
    if args.first().map(String::as_str) == Some("--child") {
        return runtime.block_on(child(&args[1..]));
    }
    // `cargo test --benches` runs bench targets without `--bench`: nothing
    // to check there, and a benchmark is not a test.
    if !args.iter().any(|a| a == "--bench") {
        println!("connector bench: run it with `cargo bench --bench connector` (it needs the local broker)");
        return Ok(());
    }
    let records: u64 = list(&args, "--records", "1000000")[0].parse()?;
    let size: usize = list(&args, "--value-size", "100")[0].parse()?;
    let runs: usize = list(&args, "--runs", "3")[0].parse()?;
    let partitions: Vec<i32> = list(&args, "--partitions", "1,12")
        .iter()
        .map(|p| p.parse())
        .collect::<Result<_, _>>()?;
    let codecs = list(&args, "--compression", "none,lz4");
    let default_backends = if cfg!(feature = "rdkafka") {
        "native,rdkafka"
    } else {
        "native"
    };
    let backends = list(&args, "--backends", default_backends);
    for b in &backends {
        backend(b)?;
    }
    let sides = list(&args, "--sides", "source,sink");
    let mut raw = match list(&args, "--raw", "").first() {
        Some(path) => Some(std::fs::File::create(path).with_context(|| format!("--raw {path}"))?),
        None => None,
    };
    let brokers = std::env::var("CLINK_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:19092".into());
    let admin = runtime.block_on(async {
        let cluster = Cluster::connect(ClientConfig::new(brokers.as_str())).await?;
        anyhow::Ok(Admin::new(cluster))
    })?;
    let tag = std::process::id();
    // (side, workload, backend) → measurements.
    let mut results: BTreeMap<(String, String, String), Vec<Measurement>> = BTreeMap::new();
    let started = Instant::now();
    for &p in &partitions {
        for codec_name in &codecs {
            let codec: Compression = codec_name.parse().context("--compression")?;
            let workload = format!("{size}B-p{p}-{codec_name}");
            let mut topics = Vec::new();
            if sides.iter().any(|s| s == "source") {
                let topic = format!("clink-bench-source-{workload}-{tag}");
                runtime.block_on(async {
                    admin.create_topics(&[NewTopic::new(&topic, p, 1)]).await?;
                    run_sink(&brokers, &topic, Backend::Native, codec, records, size).await
                })?;
                topics.push(topic.clone());
                for run in 0..runs {
                    for i in 0..backends.len() {
                        let b = &backends[(i + run) % backends.len()];
                        let m = measure("source", b, &brokers, &topic, records, size, codec_name)?;
                        eprintln!(
                            "source {workload} {b} run {run}: {:.0} ns/record CPU",
                            m.cpu.as_nanos() as f64 / records as f64
                        );
                        if let Some(f) = raw.as_mut() {
                            writeln!(f, "{}", m.json("source", b, &workload, records, run))?;
                        }
                        results
                            .entry(("source".into(), workload.clone(), b.clone()))
                            .or_default()
                            .push(m);
                    }
                }
            }
            if sides.iter().any(|s| s == "sink") {
                for run in 0..runs {
                    for i in 0..backends.len() {
                        let b = &backends[(i + run) % backends.len()];
                        let topic = format!("clink-bench-sink-{workload}-{b}-{run}-{tag}");
                        runtime.block_on(admin.create_topics(&[NewTopic::new(&topic, p, 1)]))?;
                        topics.push(topic.clone());
                        let m = measure("sink", b, &brokers, &topic, records, size, codec_name)?;
                        eprintln!(
                            "sink {workload} {b} run {run}: {:.0} ns/record CPU",
                            m.cpu.as_nanos() as f64 / records as f64
                        );
                        if let Some(f) = raw.as_mut() {
                            writeln!(f, "{}", m.json("sink", b, &workload, records, run))?;
                        }
                        results
                            .entry(("sink".into(), workload.clone(), b.clone()))
                            .or_default()
                            .push(m);
                    }
                }
            }
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            if let Err(e) = runtime.block_on(admin.delete_topics(&names)) {
                eprintln!("warning: deleting the bench topics: {e}");
            }
        }
    }
    println!(
        "\nconnector bench: {records} records of {size} B per measurement, {runs} run(s), medians; CPU = process \
         user+sys from open to the last record emitted (source) or acknowledged (sink); {:.0} s in all\n",
        started.elapsed().as_secs_f64()
    );
    println!("| side | workload | backend | CPU ns/record | min–max | records/s | peak RSS MiB |");
    println!("|---|---|---|---|---|---|---|");
    let mut medians: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    for ((side, workload, b), ms) in &results {
        let mut cpu: Vec<f64> = ms.iter().map(|m| m.cpu.as_nanos() as f64 / records as f64).collect();
        let mut wall: Vec<f64> = ms.iter().map(|m| m.wall.as_secs_f64()).collect();
        let mut rss: Vec<f64> = ms.iter().map(|m| m.peak_rss_kib as f64 / 1024.0).collect();
        let (lo, hi) = cpu.iter().fold((f64::MAX, 0f64), |(lo, hi), &c| (lo.min(c), hi.max(c)));
        let c = median(&mut cpu);
        medians.insert((side.clone(), workload.clone(), b.clone()), c);
        println!(
            "| {side} | {workload} | {b} | {c:.0} | {lo:.0}–{hi:.0} | {:.0} | {:.0} |",
            records as f64 / median(&mut wall),
            median(&mut rss)
        );
    }
    if backends.len() == 2 {
        println!("\nnative CPU per record / rdkafka's (issue 10's targets: ≤ 0.5 source, ≤ 0.7 sink):\n");
        for ((side, workload, b), c) in &medians {
            if b != "native" {
                continue;
            }
            if let Some(r) = medians.get(&(side.clone(), workload.clone(), "rdkafka".into())) {
                let target = if side == "source" { 0.5 } else { 0.7 };
                let ratio = c / r;
                println!(
                    "- {side} {workload}: {ratio:.2}x ({})",
                    if ratio <= target { "met" } else { "missed" }
                );
            }
        }
    }
    Ok(())
}
