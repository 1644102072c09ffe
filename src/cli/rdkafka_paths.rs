//! `produce`, `consume` and `roundtrip` with `--backend rdkafka`: the same
//! options and output as the native paths, through the connector's backend
//! traits ([`ConsumerBackend`], [`ProducerBackend`]) on librdkafka
//! (`clink_kafka::connector::rdkafka`, cargo feature `rdkafka`). The native
//! paths stay in `produce.rs`, `consume.rs` and `roundtrip.rs`; each only
//! dispatches here. (`copy` takes `--backend` directly: it is built on the
//! connector already.)

use std::collections::VecDeque;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use clink_kafka::client::{Acks, ClientConfig, IsolationLevel, PartitionOffset};
use clink_kafka::connector::options::{Backend, SinkOptions, SourceOptions};
use clink_kafka::connector::security::SecurityConfig;
use clink_kafka::connector::selected::{SelectedConsumer, SelectedProducer};
use clink_kafka::connector::{ConsumerBackend, ProducerBackend, Watermark};
use clink_kafka::connector::{Header, KafkaMessage};
use clink_kafka::wire::compression::Compression;
use tokio::io::AsyncBufReadExt;

use super::consume::{json_string, parse_template, ConsumeArgs, Piece};
use super::produce::{parse_line, ProduceArgs};
use super::thousands;

/// The connector's security settings for what the CLI options resolved to.
fn security(config: &ClientConfig) -> SecurityConfig {
    SecurityConfig {
        protocol: config.security_protocol,
        sasl: config.sasl.clone(),
        tls: config.security_protocol.uses_tls().then(|| config.tls.clone()),
    }
}

/// A producer on `backend` for `topic`, with the CLI's settings.
#[allow(clippy::too_many_arguments)]
async fn producer(
    backend: Backend,
    config: &ClientConfig,
    brokers: &str,
    topic: &str,
    acks: Acks,
    compression: Compression,
    linger: Duration,
    batch_size: usize,
    allow_auto_create_topics: bool,
) -> anyhow::Result<SelectedProducer> {
    let mut o = SinkOptions::new(brokers, topic);
    o.backend = backend;
    o.client_id = config.client_id.clone();
    o.security = security(config);
    o.client.request_timeout = Some(config.request_timeout);
    o.acks = acks;
    o.compression = compression;
    o.linger = linger;
    o.producer.batch_size = Some(batch_size);
    if !allow_auto_create_topics {
        // librdkafka's producer default is true, as natively.
        o.rdkafka_properties
            .0
            .insert("allow.auto.create.topics".into(), "false".into());
    }
    let mut p = SelectedProducer::for_options(&o).context("configuring the producer")?;
    p.connect().await.context("starting the producer")?;
    Ok(p)
}

/// `produce --backend rdkafka`.
pub async fn produce(args: ProduceArgs, backend: Backend) -> anyhow::Result<()> {
    let config = args.connect.client_config()?;
    let compression: Compression = args.compression.parse().context("--compression")?;
    let acks: Acks = args.acks.parse().context("--acks")?;
    let mut producer = producer(
        backend,
        &config,
        &args.connect.brokers,
        &args.topic,
        acks,
        compression,
        Duration::from_millis(args.linger_ms),
        args.batch_size,
        !args.no_auto_create,
    )
    .await?;
    let headers: Vec<Header> = args
        .headers
        .iter()
        .map(|(k, v)| Header {
            key: Bytes::from(k.clone()),
            value: Some(Bytes::from(v.clone())),
        })
        .collect();
    let key = args.key.clone().map(Bytes::from);
    let make = |key: Option<Bytes>, value: Option<Bytes>| KafkaMessage {
        payload: value,
        key,
        headers: headers.clone(),
        offset: -1,
        partition: -1,
        timestamp: -1,
    };
    let started = Instant::now();
    let mut pending = VecDeque::new();
    let (mut sent, mut failed) = (0u64, 0u64);
    let mut first_error = None;
    let mut settle = |r: clink_kafka::connector::DeliveryOutcome| {
        if let Err(e) = r {
            failed += 1;
            first_error.get_or_insert(e);
        }
    };
    if let Some(count) = args.count {
        let value = Bytes::from(vec![b'x'; args.value_size]);
        for _ in 0..count {
            pending.push_back(
                producer
                    .send(&args.topic, args.partition, make(key.clone(), Some(value.clone())))
                    .await?,
            );
            sent += 1;
            while pending.len() > 50_000 {
                settle(pending.pop_front().expect("non-empty").await);
            }
        }
    } else {
        if args.key_delimiter.as_deref() == Some("") {
            bail!("--key-delimiter must not be empty");
        }
        let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await.context("reading stdin")? {
            let (k, v) = parse_line(
                &line,
                sent + 1,
                args.key_delimiter.as_deref(),
                args.null_marker.as_deref(),
            )?;
            let k = if args.key_delimiter.is_some() { k } else { key.clone() };
            pending.push_back(producer.send(&args.topic, args.partition, make(k, v)).await?);
            sent += 1;
        }
    }
    producer.flush(Duration::from_secs(120)).await.context("flushing")?;
    for d in pending {
        settle(d.await);
    }
    producer.close(Duration::from_secs(30)).await?;
    eprintln!(
        "produced {} records to {} in {:.2} s ({} failed)",
        thousands(sent - failed),
        args.topic,
        started.elapsed().as_secs_f64(),
        failed
    );
    match first_error {
        Some(e) => Err(anyhow::Error::new(e).context(format!("{failed} records failed"))),
        None => Ok(()),
    }
}

/// A consumer on `backend` assigned to `partitions` of `topic` (all when
/// `None`) at the log start or end.
async fn consumer(
    backend: Backend,
    config: &ClientConfig,
    brokers: &str,
    topic: &str,
    partition: Option<i32>,
    from_beginning: bool,
    read_committed: bool,
) -> anyhow::Result<SelectedConsumer> {
    let mut o = SourceOptions::new(brokers, topic);
    o.backend = backend;
    o.client_id = config.client_id.clone();
    o.security = security(config);
    o.client.request_timeout = Some(config.request_timeout);
    o.client.metadata_max_wait = Some(config.metadata_max_wait);
    o.consumer.isolation = Some(if read_committed {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    });
    let mut c = SelectedConsumer::for_options(&o).context("configuring the consumer")?;
    c.connect().await.context("connecting to the cluster")?;
    let partitions: Vec<i32> = match partition {
        Some(p) => vec![p],
        None => (0..c.partition_count(topic).await?).collect(),
    };
    let which = if from_beginning {
        Watermark::Low
    } else {
        Watermark::High
    };
    let mut at = Vec::with_capacity(partitions.len());
    for p in partitions {
        at.push(PartitionOffset::new(
            p,
            c.watermark(topic, p, which).await.context("seeking")?,
        ));
    }
    c.assign(topic, &at).await?;
    Ok(c)
}

/// One record by the `--format` template (as `consume.rs` renders a
/// native record).
fn render(template: &[Piece], topic: &str, m: &KafkaMessage, null: Option<&[u8]>, out: &mut Vec<u8>) {
    let empty: &[u8] = b"";
    for p in template {
        match p {
            Piece::Literal(l) => out.extend_from_slice(l),
            Piece::Topic => out.extend_from_slice(topic.as_bytes()),
            Piece::Partition => out.extend_from_slice(m.partition.to_string().as_bytes()),
            Piece::Offset => out.extend_from_slice(m.offset.to_string().as_bytes()),
            Piece::Timestamp => out.extend_from_slice(m.timestamp.to_string().as_bytes()),
            Piece::Key => out.extend_from_slice(m.key.as_deref().or(null).unwrap_or(empty)),
            Piece::Value => out.extend_from_slice(m.payload.as_deref().or(null).unwrap_or(empty)),
            Piece::Headers => {
                for (i, h) in m.headers.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(&h.key);
                    out.push(b'=');
                    out.extend_from_slice(h.value.as_deref().unwrap_or(b""));
                }
            }
        }
    }
}

/// One record as a JSON line (the native path's shape).
fn render_json(topic: &str, m: &KafkaMessage, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"topic\":");
    json_string(Some(topic.as_bytes()), out);
    out.extend_from_slice(
        format!(
            ",\"partition\":{},\"offset\":{},\"timestamp\":{},\"key\":",
            m.partition, m.offset, m.timestamp
        )
        .as_bytes(),
    );
    json_string(m.key.as_deref(), out);
    out.extend_from_slice(b",\"value\":");
    json_string(m.payload.as_deref(), out);
    out.extend_from_slice(b",\"headers\":[");
    for (i, h) in m.headers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'[');
        json_string(Some(&h.key), out);
        out.push(b',');
        json_string(h.value.as_deref(), out);
        out.push(b']');
    }
    out.extend_from_slice(b"]}\n");
}

/// `consume --backend rdkafka`.
pub async fn consume(args: ConsumeArgs, backend: Backend) -> anyhow::Result<()> {
    let config = args.connect.client_config()?;
    let mut consumer = consumer(
        backend,
        &config,
        &args.connect.brokers,
        &args.topic,
        args.partition,
        args.from_beginning,
        args.read_committed,
    )
    .await?;
    let template = (args.format != "json").then(|| parse_template(&args.format));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut seen: u64 = 0;
    let mut last_record = Instant::now();
    let mut line = Vec::with_capacity(256);
    'outer: loop {
        if let Some(idle) = args.idle_timeout_ms {
            if last_record.elapsed() >= Duration::from_millis(idle) {
                break;
            }
        }
        let records = consumer.poll(Duration::from_millis(500)).await?;
        if !records.is_empty() {
            last_record = Instant::now();
        }
        for m in &records {
            line.clear();
            match &template {
                Some(t) => render(
                    t,
                    &args.topic,
                    m,
                    args.null_marker.as_deref().map(str::as_bytes),
                    &mut line,
                ),
                None => render_json(&args.topic, m, &mut line),
            }
            out.write_all(&line)?;
            seen += 1;
            if args.count.is_some_and(|c| seen >= c) {
                break 'outer;
            }
        }
        out.flush()?;
    }
    out.flush()?;
    drop(out);
    consumer.close().await?;
    Ok(())
}

/// `roundtrip --backend rdkafka`: the same job (fresh topic, record `i` to
/// partition `i % P` with key `i` and a value that is a function of `i`,
/// read back under read_committed, each checked: exactly once, in order,
/// at offset `i / P`), with librdkafka producing and consuming. The topic
/// is created and deleted with the native admin client.
pub async fn roundtrip(args: super::roundtrip::RoundtripArgs, backend: Backend) -> anyhow::Result<()> {
    use clink_kafka::client::{Admin, Cluster, NewTopic};
    ensure!(args.value_size >= 8, "--value-size must be at least 8");
    ensure!(args.partitions >= 1, "--partitions must be at least 1");
    let config = args.connect.client_config()?;
    let compression: Compression = args.compression.parse().context("--compression")?;
    let admin = Admin::new(Cluster::connect(config.clone()).await.context("connecting")?);
    let topic = super::roundtrip::unique_topic_name();
    admin
        .create_topics(&[NewTopic::new(&topic, args.partitions, 1)])
        .await
        .context("creating the topic")?;
    let result = roundtrip_on(&args, backend, &config, &topic, compression).await;
    if !args.keep_topic {
        if let Err(e) = admin.delete_topics(&[topic.as_str()]).await {
            eprintln!("warning: deleting {topic}: {e}");
        }
    }
    result
}

async fn roundtrip_on(
    args: &super::roundtrip::RoundtripArgs,
    backend: Backend,
    config: &ClientConfig,
    topic: &str,
    compression: Compression,
) -> anyhow::Result<()> {
    let n = args.records;
    let parts = args.partitions as u64;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let mut producer = producer(
        backend,
        config,
        &args.connect.brokers,
        topic,
        Acks::All,
        compression,
        Duration::from_millis(args.linger_ms),
        args.batch_size,
        true,
    )
    .await?;
    let started = Instant::now();
    let mut pending = VecDeque::new();
    for i in 0..n {
        let mut value = vec![0u8; args.value_size];
        super::roundtrip::fill_value(i, &mut value);
        let m = KafkaMessage::new(value).with_key(i.to_string());
        pending.push_back(producer.send(topic, Some((i % parts) as i32), m).await?);
        while pending.len() > 50_000 {
            pending.pop_front().expect("non-empty").await?;
        }
        ensure!(Instant::now() < deadline, "producing took longer than --timeout-secs");
    }
    producer.flush(Duration::from_secs(args.timeout_secs)).await?;
    for d in pending {
        d.await?;
    }
    producer.close(Duration::from_secs(30)).await?;
    let produced = started.elapsed();

    let mut consumer = consumer(backend, config, &args.connect.brokers, topic, None, true, true).await?;
    let started = Instant::now();
    let mut next = vec![0u64; args.partitions as usize];
    let mut seen = 0u64;
    let mut expected = vec![0u8; args.value_size];
    while seen < n {
        ensure!(
            Instant::now() < deadline,
            "consumed {seen} of {n} records within --timeout-secs"
        );
        for m in consumer.poll(Duration::from_millis(500)).await? {
            let p = m.partition as usize;
            ensure!(p < next.len(), "a record from partition {p}");
            let i = next[p] * parts + p as u64;
            ensure!(
                m.offset == next[p] as i64,
                "partition {p}: offset {} where {} was due",
                m.offset,
                next[p]
            );
            super::roundtrip::fill_value(i, &mut expected);
            ensure!(
                m.payload.as_deref() == Some(&expected[..]),
                "record {i} (partition {p} offset {}): wrong value",
                m.offset
            );
            ensure!(
                m.key.as_deref() == Some(i.to_string().as_bytes()),
                "record {i}: wrong key"
            );
            next[p] += 1;
            seen += 1;
        }
    }
    consumer.close().await?;
    let consumed = started.elapsed();
    let rate = |d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    println!(
        "roundtrip ({}): {} records, each exactly once, in order; produce {:.0} records/s, consume {:.0} records/s",
        backend.name(),
        thousands(n),
        rate(produced),
        rate(consumed)
    );
    Ok(())
}
