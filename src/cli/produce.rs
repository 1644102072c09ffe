//! `clink-kafka produce`: generated records (`--count`, `--value-size`) or
//! one record per line of stdin, through the backend traits on either
//! backend (`--backend`).

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use clink_kafka::connector::options::Backend;
use clink_kafka::connector::{ConnectorError, DeliveryOutcome, Header, KafkaMessage, ProducerBackend};

use super::backend::ProducerSettings;
use super::{parse_header, thousands, ConnectArgs};

/// Options of `produce`.
#[derive(Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
    #[command(flatten)]
    pub backend: super::backend::BackendArgs,
    #[command(flatten)]
    pub value_format: super::value_format::ValueFormatArgs,
    /// Topic to write to. A missing one is created by a broker whose
    /// auto.create.topics.enable is on (as the Java producer lets it),
    /// unless --no-auto-create.
    #[arg(long)]
    pub topic: String,
    /// Never let the broker create a missing topic (allow.auto.create.topics
    /// =false): producing to one fails, naming it.
    #[arg(long)]
    pub no_auto_create: bool,
    /// Write to this partition (default: by key, or sticky when unkeyed).
    #[arg(long)]
    pub partition: Option<i32>,
    /// Key for every record.
    #[arg(long)]
    pub key: Option<String>,
    /// A header key=value for every record (repeatable).
    #[arg(long = "header", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// The codec's level (librdkafka's compression.level): -1 is the
    /// codec's default; gzip 0..=9, lz4 0..=2, snappy 0, zstd 0..=12.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub compression_level: i32,
    /// 0, 1 or all. Anything but all turns idempotence off.
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// Generate this many records instead of reading stdin.
    #[arg(long)]
    pub count: Option<u64>,
    /// Size of each generated value in bytes (with --count).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// linger.ms.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// batch.size in bytes.
    #[arg(long, default_value_t = 256 * 1024)]
    pub batch_size: usize,
    /// max.in.flight.requests.per.connection: Produce requests outstanding
    /// at once per broker (1-5 when idempotent, else 1-1000; each carries a
    /// batch of every ready partition).
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// Read each stdin line as KEY<delimiter>VALUE, split at the first
    /// delimiter (like kcat -K). A line without the delimiter is an error.
    #[arg(long, value_name = "DELIMITER")]
    pub key_delimiter: Option<String>,
    /// A key or value exactly equal to this text is sent as null (a null
    /// value is a tombstone).
    #[arg(long, value_name = "TEXT")]
    pub null_marker: Option<String>,
}

/// One stdin line as (key, value), per `--key-delimiter` and `--null-marker`:
/// slices of the line, not copies.
pub(super) fn parse_line(
    line: &Bytes,
    line_no: u64,
    delimiter: Option<&str>,
    null_marker: Option<&str>,
) -> anyhow::Result<(Option<Bytes>, Option<Bytes>)> {
    let null_marker = null_marker.map(str::as_bytes);
    let field = |s: Bytes| (Some(&s[..]) != null_marker).then_some(s);
    match delimiter {
        None => Ok((None, field(line.clone()))),
        Some(d) => match memchr::memmem::find(line, d.as_bytes()) {
            Some(i) => Ok((field(line.slice(..i)), field(line.slice(i + d.len()..)))),
            None => anyhow::bail!("stdin line {line_no} has no key delimiter {d:?} (--key-delimiter)"),
        },
    }
}

/// At most this many records' delivery futures are kept: past it, the
/// oldest is awaited before the next record is sent (with stdin as with
/// `--count`), so a long input never grows the process.
const MAX_PENDING: usize = 50_000;

/// Runs `produce`, on either backend through the backend traits.
pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let _metrics = args.metrics.start().await?;
    let backend = args.backend.backend()?;
    if backend != Backend::Native && args.value_format.is_set() {
        anyhow::bail!("--value-format runs on --backend native only");
    }
    let encoder = args.value_format.encoder(&args.topic).await?;
    if encoder.is_some() && args.count.is_some() {
        anyhow::bail!("--value-format encodes stdin lines (JSON); it does not apply to --count");
    }
    if args.count.is_none() && args.key_delimiter.as_deref() == Some("") {
        anyhow::bail!("--key-delimiter must not be empty");
    }
    let config = args.connect.client_config()?;
    let settings = ProducerSettings {
        acks: args.acks.parse().context("--acks")?,
        compression: args.compression.parse().context("--compression")?,
        compression_level: args.compression_level,
        linger: Duration::from_millis(args.linger_ms),
        batch_size: args.batch_size,
        max_in_flight: args.max_in_flight,
        allow_auto_create_topics: !args.no_auto_create,
        max_record_size: None,
    };
    let mut producer = super::backend::producer(backend, &config, &args.topic, &settings).await?;
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
    let topic = args.topic.as_str();
    let started = Instant::now();
    let mut progress = super::progress::Progress::new("produce");
    let unknown_topic = |e: ConnectorError| missing_topic_hint(e, &args.topic, args.no_auto_create);
    let mut pending = std::collections::VecDeque::new();
    let mut sent: u64 = 0;
    let mut failed: u64 = 0;
    let mut first_error = None;
    let mut handle = |result: DeliveryOutcome| {
        if let Err(e) = result {
            failed += 1;
            first_error.get_or_insert(e);
        }
    };
    if let Some(count) = args.count {
        let value = Bytes::from(vec![b'x'; args.value_size]);
        for _ in 0..count {
            let m = make(key.clone(), Some(value.clone()));
            pending.push_back(producer.send(topic, args.partition, m).await.map_err(unknown_topic)?);
            sent += 1;
            progress.update(sent, || None);
            while pending.len() > MAX_PENDING {
                handle(pending.pop_front().expect("non-empty").await);
            }
        }
    } else {
        let mut lines = super::stdin_lines::LineReader::stdin().context("reading stdin")?;
        while let Some(line) = lines.next_line().await.context("reading stdin")? {
            let (k, value) = parse_line(
                &line,
                sent + 1,
                args.key_delimiter.as_deref(),
                args.null_marker.as_deref(),
            )?;
            let value = match &encoder {
                Some(e) => super::value_format::encode_line(e, value, sent + 1)?,
                None => value,
            };
            let k = if args.key_delimiter.is_some() { k } else { key.clone() };
            let m = make(k, value);
            pending.push_back(producer.send(topic, args.partition, m).await.map_err(unknown_topic)?);
            sent += 1;
            progress.update(sent, || None);
            // Memory is bounded by the delivery futures kept, not by the
            // input's length: wait for the oldest once too many are out.
            while pending.len() > MAX_PENDING {
                handle(pending.pop_front().expect("non-empty").await);
            }
        }
        tracing::debug!(lines = sent, fresh_blocks = lines.fresh_blocks(), "stdin read");
    }
    producer.flush(Duration::from_secs(120)).await.context("flushing")?;
    for f in pending {
        handle(f.await);
    }
    let elapsed = started.elapsed();
    producer.close(Duration::from_secs(30)).await?;
    progress.finish();
    eprintln!(
        "produced {} records to {} in {:.2} s ({} failed)",
        thousands(sent - failed),
        args.topic,
        elapsed.as_secs_f64(),
        failed
    );
    match first_error {
        Some(e) => Err(anyhow::Error::new(e).context(format!("{failed} records failed"))),
        None => Ok(()),
    }
}

/// An unknown topic as the user meets it: why it was not created.
fn missing_topic_hint(e: ConnectorError, topic: &str, no_auto_create: bool) -> anyhow::Error {
    let unknown = matches!(e, ConnectorError::Client(clink_kafka::Error::UnknownTopic { .. }));
    let e = anyhow::Error::new(e);
    match (unknown, no_auto_create) {
        (false, _) => e,
        (true, true) => e.context(format!(
            "topic {topic:?} does not exist and --no-auto-create is set (create it with `clink-kafka topics create`)"
        )),
        (true, false) => e.context(format!(
            "topic {topic:?} does not exist and the broker did not create it (its auto.create.topics.enable \
             is off?); create it with `clink-kafka topics create`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_line;

    #[test]
    fn lines_split_into_key_and_value() {
        let b = |s: &str| Some(bytes::Bytes::from(s.to_owned()));
        let l = |s: &str| bytes::Bytes::from(s.to_owned());
        assert_eq!(parse_line(&l("v"), 1, None, None).unwrap(), (None, b("v")));
        assert_eq!(parse_line(&l("k:v:w"), 1, Some(":"), None).unwrap(), (b("k"), b("v:w")));
        assert_eq!(parse_line(&l("k::v"), 1, Some("::"), None).unwrap(), (b("k"), b("v")));
        assert_eq!(
            parse_line(&l("NULL:v"), 1, Some(":"), Some("NULL")).unwrap(),
            (None, b("v"))
        );
        assert_eq!(
            parse_line(&l("k:NULL"), 1, Some(":"), Some("NULL")).unwrap(),
            (b("k"), None)
        );
        assert_eq!(parse_line(&l("NULL"), 1, None, Some("NULL")).unwrap(), (None, None));
        let e = parse_line(&l("novalue"), 7, Some("|"), None).unwrap_err().to_string();
        assert!(e.contains("line 7") && e.contains("--key-delimiter"), "{e}");
    }
}
