//! `clink-kafka consume`: prints records with a `--format` template or as
//! JSON lines. One topic: through the backend traits on either backend
//! (`--backend`); `--group`: the native group consumer.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use clink_kafka::client::{
    parse_assignors, Cluster, ConsumerConfig, GroupConsumer, GroupConsumerConfig, GroupProtocol, IsolationLevel,
    Offset, Subscription,
};
use clink_kafka::connector::options::Backend;
use clink_kafka::connector::{ConsumerBackend, GroupRecord, KafkaMessage};

use super::ConnectArgs;

/// Options of `consume`.
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
    #[command(flatten)]
    pub backend: super::backend::BackendArgs,
    #[command(flatten)]
    pub value_format: super::value_format::ValueFormatArgs,
    /// With --value-format: what a value that cannot be decoded does.
    /// `fail` (default) stops with its topic, partition, offset and the
    /// reason; `skip` logs the same at warn level, leaves it out and goes
    /// on, and the count of skipped records is logged at the end.
    #[arg(long, value_name = "fail|skip", value_parser = ["fail", "skip"])]
    pub decode_error: Option<String>,
    /// Topic to read; with --group, a comma-separated list of topics to
    /// subscribe to.
    #[arg(long, default_value = "", hide_default_value = true)]
    pub topic: String,
    /// Consume as a member of this consumer group (kcat -G): subscribe to
    /// --topic or --pattern, read the partitions the group assigns, and
    /// commit what was printed (auto-commit, on rebalance and on exit:
    /// Ctrl-C or --count). Native backend only.
    #[arg(long, value_name = "GROUP", conflicts_with = "partition")]
    pub group: Option<String>,
    /// With --group: subscribe to every topic whose whole name matches
    /// this regular expression (also topics created later).
    #[arg(long, value_name = "REGEX", requires = "group", conflicts_with = "topic")]
    pub pattern: Option<String>,
    /// With --group: group.protocol, `classic` (default, as the Java
    /// client's) or `consumer` (KIP-848).
    #[arg(long, value_name = "classic|consumer", requires = "group", value_parser = ["classic", "consumer"])]
    pub group_protocol: Option<String>,
    /// With --group: group.instance.id (static membership, KIP-345).
    #[arg(long, value_name = "ID", requires = "group")]
    pub group_instance_id: Option<String>,
    /// With --group: partition.assignment.strategy (classic), a
    /// comma-separated list of range, roundrobin, cooperative-sticky
    /// (default range,cooperative-sticky).
    #[arg(long, value_name = "LIST", requires = "group")]
    pub assignor: Option<String>,
    /// With --group: group.remote.assignor (consumer protocol), `uniform`
    /// or `range` (default: the broker's).
    #[arg(long, value_name = "uniform|range", requires = "group", value_parser = ["uniform", "range"])]
    pub remote_assignor: Option<String>,
    /// With --group: session.timeout.ms (classic; default 45000).
    #[arg(long, value_name = "MS", requires = "group", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub session_timeout_ms: Option<u32>,
    /// With --group: commit nothing (enable.auto.commit=false).
    #[arg(long, requires = "group")]
    pub no_auto_commit: bool,
    /// Read only this partition (default: all).
    #[arg(long)]
    pub partition: Option<i32>,
    /// Start at the earliest offset (default: the end). With --group:
    /// auto.offset.reset=earliest, for partitions the group has no
    /// committed offset for.
    #[arg(long)]
    pub from_beginning: bool,
    /// Stop after this many records.
    #[arg(long)]
    pub count: Option<u64>,
    /// Stop after this many milliseconds without a record.
    #[arg(long)]
    pub idle_timeout_ms: Option<u64>,
    /// Read only committed data (isolation.level=read_committed).
    #[arg(long)]
    pub read_committed: bool,
    /// Output: "json" for JSON lines, or a template with %t topic, %p
    /// partition, %o offset, %T timestamp, %k key, %v value, %h headers,
    /// %% and the escapes \n \t \\.
    #[arg(long, default_value = "%v\\n")]
    pub format: String,
    /// Print a null key or value (%k, %v) as this text instead of nothing
    /// (like kcat -Z with NULL).
    #[arg(long, value_name = "TEXT")]
    pub null_marker: Option<String>,
    /// The most records one poll hands over (max.poll.records; default
    /// 500). Native backend only.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub max_poll_records: Option<u32>,
    /// The most bytes of keys, values and headers one poll hands over
    /// (default 8 MiB; a larger record still arrives, alone). Native
    /// backend only.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub max_poll_bytes: Option<u32>,
    /// The consumer's inflation bound for compressed batches (default
    /// 64 MiB; see the README's named limits). Native backend only.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1024..=i32::MAX as i64))]
    pub max_batch_inflate: Option<u32>,
    /// Send full fetches only, no KIP-227 fetch sessions. Native backend only.
    #[arg(long)]
    pub no_fetch_sessions: bool,
    /// The longest a broker's throttle time (KIP-219) holds the next fetch
    /// back (default 30000). Native backend only.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(0..=i32::MAX as i64))]
    pub max_throttle_ms: Option<u32>,
    /// The consumer's rack (client.rack, KIP-392): fetch each partition from
    /// the replica in this rack when the brokers' replica selector names
    /// one. Native backend only.
    #[arg(long, value_name = "RACK")]
    pub client_rack: Option<String>,
}

impl ConsumeArgs {
    /// The native consumer's configuration these flags describe.
    pub fn consumer_config(&self) -> ConsumerConfig {
        let mut c = ConsumerConfig::default().with_isolation(if self.read_committed {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        });
        if let Some(n) = self.max_poll_records {
            c.max_poll_records = n as usize;
        }
        if let Some(n) = self.max_poll_bytes {
            c.max_poll_bytes = n as usize;
        }
        if let Some(n) = self.max_batch_inflate {
            c.max_batch_inflate = n as usize;
        }
        if self.no_fetch_sessions {
            c.fetch_sessions = false;
        }
        if let Some(ms) = self.max_throttle_ms {
            c.max_throttle = Duration::from_millis(u64::from(ms));
        }
        c.client_rack = self.client_rack.clone();
        c
    }

    /// The native-only flags given (refused on another backend rather
    /// than ignored).
    fn native_only_flags(&self) -> Vec<&'static str> {
        [
            ("--max-poll-records", self.max_poll_records.is_some()),
            ("--max-poll-bytes", self.max_poll_bytes.is_some()),
            ("--max-batch-inflate", self.max_batch_inflate.is_some()),
            ("--no-fetch-sessions", self.no_fetch_sessions),
            ("--max-throttle-ms", self.max_throttle_ms.is_some()),
            ("--client-rack", self.client_rack.is_some()),
            ("--group", self.group.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
}

/// Runs `consume`: with `--group` on the native group consumer, else on
/// either backend through the backend traits.
pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let _metrics = args.metrics.start().await?;
    let backend = args.backend.backend()?;
    if backend != Backend::Native {
        let flags = args.native_only_flags();
        if !flags.is_empty() {
            anyhow::bail!(
                "{} applies only with --backend native (librdkafka has no such setting)",
                flags.join(", ")
            );
        }
        if args.value_format.is_set() || args.decode_error.is_some() {
            anyhow::bail!("--value-format and --decode-error run on --backend native only");
        }
    }
    let mut decoder = args.value_format.decoder()?;
    let skip_undecodable = match args.decode_error.as_deref() {
        None | Some("fail") => false,
        Some(_) if decoder.is_none() => {
            anyhow::bail!("--decode-error skip needs --value-format (nothing else is decoded)")
        }
        Some(_) => true,
    };
    let mut skipped: u64 = 0;
    let config = args.connect.client_config()?;
    if let Some(group) = &args.group {
        let cluster = Cluster::connect(config).await.context("connecting to the cluster")?;
        return run_group(&args, group, cluster, decoder, skip_undecodable).await;
    }
    if args.topic.is_empty() {
        anyhow::bail!("--topic is required (or --group with --pattern)");
    }
    let mut consumer = super::backend::consumer(
        backend,
        &config,
        &args.topic,
        args.partition,
        args.from_beginning,
        args.consumer_config(),
    )
    .await?;
    let template = if args.format == "json" {
        None
    } else {
        Some(parse_template(&args.format))
    };
    // Headers are printed by JSON and %h only (librdkafka parses them per
    // record when asked).
    consumer.read_headers(
        template
            .as_ref()
            .is_none_or(|t| t.iter().any(|p| matches!(p, Piece::Headers))),
    );
    let topic = args.topic.as_str();
    let mut out = Lines::new(std::io::stdout().lock());
    let mut seen: u64 = 0;
    let mut last_record = Instant::now();
    let mut progress = super::progress::Progress::new("consume");
    let mut failure = None;
    'outer: loop {
        if let Some(idle) = args.idle_timeout_ms {
            if last_record.elapsed() >= Duration::from_millis(idle) {
                break;
            }
        }
        let mut records = consumer.poll(Duration::from_millis(500)).await?;
        // An undecodable value (--decode-error fail): the records before it
        // are printed, then the run stops with its error.
        let mut undecodable = None;
        if let Some(d) = &mut decoder {
            match super::value_format::decode_records(d, &mut records, topic, skip_undecodable).await {
                Ok(n) => skipped += n,
                Err(e) => undecodable = Some(e),
            }
        }
        if !records.is_empty() {
            last_record = Instant::now();
        }
        for m in &records {
            match &template {
                Some(t) => render(t, topic, m, args.null_marker.as_deref().map(str::as_bytes), out.line()),
                None => render_json(topic, m, out.line()),
            }
            out.end_line()?;
            seen += 1;
            if args.count.is_some_and(|c| seen >= c) {
                break 'outer;
            }
        }
        out.flush()?;
        if let Some(e) = undecodable {
            failure = Some(e);
            break;
        }
        if !records.is_empty() {
            // After a fetch, so the lag is known.
            progress.update(seen, || consumer.lag());
        }
    }
    out.flush()?;
    drop(out);
    progress.finish();
    if skip_undecodable {
        tracing::warn!(
            skipped,
            topic = %args.topic,
            "{skipped} records could not be decoded and were skipped (--decode-error skip)"
        );
    }
    let closed = consumer.close().await;
    if let Some(e) = failure {
        return Err(e);
    }
    closed?;
    Ok(())
}

/// The group consumer's settings these flags describe.
fn group_config(args: &ConsumeArgs, group: &str) -> anyhow::Result<GroupConsumerConfig> {
    let mut consumer = args.consumer_config();
    consumer.auto_offset_reset = Some(if args.from_beginning {
        Offset::Earliest
    } else {
        Offset::Latest
    });
    let mut c = GroupConsumerConfig::new(group)
        .with_consumer(consumer)
        .with_group_instance_id(args.group_instance_id.clone())
        .with_remote_assignor(args.remote_assignor.clone())
        .with_enable_auto_commit(!args.no_auto_commit);
    if let Some(p) = &args.group_protocol {
        c = c.with_protocol(GroupProtocol::from_name(p).context("--group-protocol")?);
    }
    if let Some(list) = &args.assignor {
        let assignors = parse_assignors(list).with_context(|| {
            format!("--assignor {list:?}: allowed: a comma-separated list of range, roundrobin, cooperative-sticky")
        })?;
        c = c.with_assignors(assignors);
    }
    if let Some(ms) = args.session_timeout_ms {
        c = c.with_session_timeout(Duration::from_millis(u64::from(ms)));
        // Java's rule of thumb: a third of the session timeout.
        let third = Duration::from_millis(u64::from(ms / 3).max(1));
        let heartbeat = c.heartbeat_interval.min(third);
        c = c.with_heartbeat_interval(heartbeat);
    }
    c.validate()?;
    Ok(c)
}

/// `consume --group`: subscribe, print, commit; on Ctrl-C or --count,
/// commit what was printed and leave the group.
async fn run_group(
    args: &ConsumeArgs,
    group: &str,
    cluster: Cluster,
    mut decoder: Option<clink_kafka::connector::format::ValueDecoder>,
    skip_undecodable: bool,
) -> anyhow::Result<()> {
    let subscription = match &args.pattern {
        Some(p) => Subscription::Pattern(p.clone()),
        None => {
            let topics: Vec<String> = args
                .topic
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
                .collect();
            if topics.is_empty() {
                anyhow::bail!("--group needs --topic t[,t2] or --pattern REGEX");
            }
            Subscription::Topics(topics)
        }
    };
    let mut consumer = GroupConsumer::new(cluster, group_config(args, group)?).await?;
    consumer.subscribe(subscription)?;
    let template = if args.format == "json" {
        None
    } else {
        Some(parse_template(&args.format))
    };
    let mut out = Lines::new(std::io::stdout().lock());
    let mut seen: u64 = 0;
    let mut skipped: u64 = 0;
    let mut last_record = Instant::now();
    let mut progress = super::progress::Progress::new("consume");
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let mut failure = None;
    'outer: loop {
        if let Some(idle) = args.idle_timeout_ms {
            if last_record.elapsed() >= Duration::from_millis(idle) {
                break;
            }
        }
        let mut records: Vec<GroupRecord> = tokio::select! {
            r = consumer.poll(Duration::from_millis(500)) => match r {
                Ok(r) => r
                    .into_iter()
                    .map(|r| GroupRecord {
                        topic: r.topic.clone(),
                        message: KafkaMessage::from(r),
                    })
                    .collect(),
                Err(e) => {
                    failure = Some(anyhow::Error::from(e));
                    break;
                }
            },
            _ = &mut ctrl_c => {
                tracing::info!(group, "interrupted: committing and leaving the group");
                break;
            }
        };
        let mut undecodable = None;
        if let Some(d) = &mut decoder {
            match super::value_format::decode_records(d, &mut records, "", skip_undecodable).await {
                Ok(n) => skipped += n,
                Err(e) => undecodable = Some(e),
            }
        }
        if !records.is_empty() {
            last_record = Instant::now();
        }
        for (i, r) in records.iter().enumerate() {
            let null = args.null_marker.as_deref().map(str::as_bytes);
            match &template {
                Some(t) => render(t, &r.topic, &r.message, null, out.line()),
                None => render_json(&r.topic, &r.message, out.line()),
            }
            out.end_line()?;
            seen += 1;
            if args.count.is_some_and(|c| seen >= c) {
                // What was handed over but not printed is not committed:
                // each partition goes back to its first unprinted record.
                let mut back: std::collections::BTreeMap<(&str, i32), i64> = std::collections::BTreeMap::new();
                for u in &records[i + 1..] {
                    back.entry((&*u.topic, u.message.partition)).or_insert(u.message.offset);
                }
                for ((topic, partition), offset) in back {
                    consumer.seek(topic, partition, Offset::At(offset)).await?;
                }
                break 'outer;
            }
        }
        out.flush()?;
        if let Some(e) = undecodable {
            failure = Some(e);
            break;
        }
        if !records.is_empty() {
            progress.update(seen, || None);
        }
    }
    out.flush()?;
    progress.finish();
    if skip_undecodable {
        tracing::warn!(
            skipped,
            "{skipped} records could not be decoded and were skipped (--decode-error skip)"
        );
    }
    // Commit (auto-commit) and leave, also after a failure.
    let closed = consumer.close().await;
    if let Some(e) = failure {
        return Err(e);
    }
    closed.context("leaving the group")?;
    Ok(())
}

pub(super) enum Piece {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Timestamp,
    Key,
    Value,
    Headers,
}

pub(super) fn parse_template(s: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut lit = Vec::new();
    let mut chars = s.chars().peekable();
    let flush = |lit: &mut Vec<u8>, pieces: &mut Vec<Piece>| {
        if !lit.is_empty() {
            pieces.push(Piece::Literal(std::mem::take(lit)));
        }
    };
    while let Some(c) = chars.next() {
        match (c, chars.peek().copied()) {
            ('%', Some(n)) => {
                chars.next();
                let piece = match n {
                    't' => Piece::Topic,
                    'p' => Piece::Partition,
                    'o' => Piece::Offset,
                    'T' => Piece::Timestamp,
                    'k' => Piece::Key,
                    'v' => Piece::Value,
                    'h' => Piece::Headers,
                    other => {
                        if other != '%' {
                            lit.push(b'%');
                        }
                        let mut b = [0u8; 4];
                        lit.extend_from_slice(other.encode_utf8(&mut b).as_bytes());
                        continue;
                    }
                };
                flush(&mut lit, &mut pieces);
                pieces.push(piece);
            }
            ('\\', Some(n)) => {
                chars.next();
                match n {
                    'n' => lit.push(b'\n'),
                    't' => lit.push(b'\t'),
                    '\\' => lit.push(b'\\'),
                    other => {
                        lit.push(b'\\');
                        let mut b = [0u8; 4];
                        lit.extend_from_slice(other.encode_utf8(&mut b).as_bytes());
                    }
                }
            }
            (c, _) => {
                let mut b = [0u8; 4];
                lit.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    flush(&mut lit, &mut pieces);
    pieces
}

/// The records' lines on their way to stdout: each is rendered straight
/// into one buffer (a record's value is copied once, not into a line and
/// then into a `BufWriter`'s buffer), written out in writes of about
/// [`Lines::WRITE_AT`] bytes.
struct Lines<W: Write> {
    buf: Vec<u8>,
    out: W,
}

impl<W: Write> Lines<W> {
    /// The buffer is written once it holds this many bytes.
    const WRITE_AT: usize = 64 * 1024;

    fn new(out: W) -> Self {
        Lines {
            buf: Vec::with_capacity(Self::WRITE_AT + 4096),
            out,
        }
    }

    /// Where the next line is rendered (appended).
    fn line(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// A line is complete: written out if the buffer is full enough.
    fn end_line(&mut self) -> std::io::Result<()> {
        if self.buf.len() >= Self::WRITE_AT {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
            // A huge record's room is not kept.
            self.buf.shrink_to(Self::WRITE_AT + 4096);
        }
        Ok(())
    }

    /// Writes out what is buffered and flushes.
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
}

/// `n` in decimal, appended.
fn push_number(out: &mut Vec<u8>, n: i64) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "{n}");
}

/// One record by the `--format` template.
fn render(template: &[Piece], topic: &str, m: &KafkaMessage, null: Option<&[u8]>, out: &mut Vec<u8>) {
    let empty: &[u8] = b"";
    for p in template {
        match p {
            // One byte (a separator, the newline) is pushed: no copy call.
            Piece::Literal(l) => match l.as_slice() {
                [b] => out.push(*b),
                l => out.extend_from_slice(l),
            },
            Piece::Topic => out.extend_from_slice(topic.as_bytes()),
            // Numbers are formatted into the line, not into a String each.
            Piece::Partition => push_number(out, i64::from(m.partition)),
            Piece::Offset => push_number(out, m.offset),
            Piece::Timestamp => push_number(out, m.timestamp),
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

pub(super) fn json_string(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    let Some(bytes) = bytes else {
        out.extend_from_slice(b"null");
        return;
    };
    out.push(b'"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes()),
            c => {
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// One record as a JSON line.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the writes it takes.
    struct Writes(Vec<usize>, Vec<u8>);

    impl Write for Writes {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.push(b.len());
            self.1.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_are_written_in_large_writes_and_all_arrive() {
        let mut lines = Lines::new(Writes(Vec::new(), Vec::new()));
        let mut want = Vec::new();
        for i in 0..1000 {
            let line = format!("{i} {}\n", "v".repeat(1000));
            lines.line().extend_from_slice(line.as_bytes());
            want.extend_from_slice(line.as_bytes());
            lines.end_line().unwrap();
        }
        assert!(lines.out.1.len() < want.len(), "some lines still buffered");
        lines.flush().unwrap();
        assert_eq!(lines.out.1, want);
        // 1 MB in 16 writes of about 64 KiB (and the rest at the flush),
        // not one write (or one 8 KiB buffer) per line.
        assert_eq!(lines.out.0.len(), 16, "{:?}", lines.out.0);
        assert!(lines.out.0[..15].iter().all(|&n| n >= Lines::<Writes>::WRITE_AT));
        // A huge line is written whole and its room is given back.
        lines.line().extend_from_slice(&vec![b'x'; 1 << 20]);
        lines.end_line().unwrap();
        assert!(lines.buf.capacity() <= Lines::<Writes>::WRITE_AT + 4096);
    }

    #[test]
    fn template_parses_placeholders_and_escapes() {
        let t = parse_template("%k\\t%v\\n100%% %x");
        let kinds: Vec<String> = t
            .iter()
            .map(|p| match p {
                Piece::Literal(l) => format!("{:?}", String::from_utf8_lossy(l)),
                Piece::Key => "K".into(),
                Piece::Value => "V".into(),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(kinds, vec!["K", "\"\\t\"", "V", "\"\\n100% %x\""]);
    }

    #[test]
    fn render_fills_every_piece() {
        let m = KafkaMessage {
            offset: 1_234_567_890_123,
            partition: 7,
            timestamp: -1,
            ..KafkaMessage::new(bytes::Bytes::from_static(b"v1")).with_key(bytes::Bytes::from_static(b"k1"))
        };
        let mut out = Vec::new();
        render(&parse_template("%t|%p|%o|%T|%k|%v|.\\n"), "topic", &m, None, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "topic|7|1234567890123|-1|k1|v1|.\n");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        consume: ConsumeArgs,
    }

    fn parse(extra: &[&str]) -> Result<ConsumeArgs, clap::Error> {
        use clap::Parser;
        let args = ["consume", "--topic", "t"].iter().chain(extra);
        Cli::try_parse_from(args).map(|c| c.consume)
    }

    #[test]
    fn consumer_flags_reach_the_consumer_config() {
        let c = parse(&[
            "--max-poll-records",
            "7",
            "--max-poll-bytes",
            "4096",
            "--max-batch-inflate",
            "1048576",
            "--no-fetch-sessions",
            "--max-throttle-ms",
            "250",
            "--client-rack",
            "rack-2",
        ])
        .unwrap();
        assert_eq!(c.native_only_flags().len(), 6);
        let c = c.consumer_config();
        assert_eq!(c.client_rack.as_deref(), Some("rack-2"));
        assert_eq!(c.max_poll_records, 7);
        assert_eq!(c.max_poll_bytes, 4096);
        assert_eq!(c.max_batch_inflate, 1 << 20);
        assert!(!c.fetch_sessions);
        assert_eq!(c.max_throttle, Duration::from_millis(250));
        let d = parse(&[]).unwrap();
        assert!(d.native_only_flags().is_empty());
        let d = d.consumer_config();
        assert_eq!(d.client_rack, None);
        let default = ConsumerConfig::default();
        assert_eq!(
            (
                d.max_poll_records,
                d.max_poll_bytes,
                d.max_batch_inflate,
                d.fetch_sessions,
                d.max_throttle
            ),
            (
                default.max_poll_records,
                default.max_poll_bytes,
                default.max_batch_inflate,
                default.fetch_sessions,
                default.max_throttle
            )
        );
    }

    #[test]
    fn consumer_flags_out_of_range_name_the_flag_and_range() {
        for (flag, bad, range) in [
            ("--max-poll-records", "0", "1..=2147483647"),
            ("--max-poll-bytes", "0", "1..=2147483647"),
            ("--max-batch-inflate", "1023", "1024..=2147483647"),
            ("--max-throttle-ms", "2147483648", "0..=2147483647"),
        ] {
            let e = parse(&[flag, bad]).unwrap_err().to_string();
            assert!(e.contains(flag) && e.contains(range), "{flag} {bad}: {e}");
        }
    }

    #[test]
    fn json_strings_escape() {
        let mut out = Vec::new();
        json_string(Some(b"a\"b\\c\n\x01"), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\n\u0001""#);
        let mut out = Vec::new();
        json_string(None, &mut out);
        assert_eq!(out, b"null");
    }
}
