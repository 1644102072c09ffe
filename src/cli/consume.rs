//! `clink-kafka consume`: prints records with a `--format` template or as
//! JSON lines.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use clink_kafka::client::{Cluster, Consumer, ConsumerConfig, ConsumerRecord, IsolationLevel, Offset};

use super::ConnectArgs;

/// Options of `consume`.
#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    #[command(flatten)]
    pub backend: super::backend::BackendArgs,
    /// Topic to read.
    #[arg(long)]
    pub topic: String,
    /// Read only this partition (default: all).
    #[arg(long)]
    pub partition: Option<i32>,
    /// Start at the earliest offset (default: the end).
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
}

/// Runs `consume`.
pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    match args.backend.backend()? {
        clink_kafka::connector::options::Backend::Native => {}
        other => return super::rdkafka_paths::consume(args, other).await,
    }
    let config = args.connect.client_config()?;
    let cluster = Cluster::connect(config).await.context("connecting to the cluster")?;
    let consumer_config = ConsumerConfig {
        isolation: if args.read_committed {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::ReadUncommitted
        },
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::new(cluster, consumer_config);
    match args.partition {
        Some(p) => consumer.assign(&[(args.topic.as_str(), p)]),
        None => consumer.assign_topic(&args.topic).await?,
    }
    let start = if args.from_beginning {
        Offset::Earliest
    } else {
        Offset::Latest
    };
    consumer.seek_all(start).await.context("seeking")?;
    let template = if args.format == "json" {
        None
    } else {
        Some(parse_template(&args.format))
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
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
        for r in &records {
            line.clear();
            match &template {
                Some(t) => render(t, r, args.null_marker.as_deref().map(str::as_bytes), &mut line),
                None => render_json(r, &mut line),
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

fn render(template: &[Piece], r: &ConsumerRecord, null: Option<&[u8]>, out: &mut Vec<u8>) {
    let empty: &[u8] = b"";
    for p in template {
        match p {
            Piece::Literal(l) => out.extend_from_slice(l),
            Piece::Topic => out.extend_from_slice(r.topic.as_bytes()),
            Piece::Partition => out.extend_from_slice(r.partition.to_string().as_bytes()),
            Piece::Offset => out.extend_from_slice(r.record.offset.to_string().as_bytes()),
            Piece::Timestamp => out.extend_from_slice(r.record.timestamp.to_string().as_bytes()),
            Piece::Key => out.extend_from_slice(r.record.key.as_deref().or(null).unwrap_or(empty)),
            Piece::Value => out.extend_from_slice(r.record.value.as_deref().or(null).unwrap_or(empty)),
            Piece::Headers => {
                for (i, h) in r.record.headers.iter().enumerate() {
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

fn render_json(r: &ConsumerRecord, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"topic\":");
    json_string(Some(r.topic.as_bytes()), out);
    out.extend_from_slice(
        format!(
            ",\"partition\":{},\"offset\":{},\"timestamp\":{},\"key\":",
            r.partition, r.record.offset, r.record.timestamp
        )
        .as_bytes(),
    );
    json_string(r.record.key.as_deref(), out);
    out.extend_from_slice(b",\"value\":");
    json_string(r.record.value.as_deref(), out);
    out.extend_from_slice(b",\"headers\":[");
    for (i, h) in r.record.headers.iter().enumerate() {
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
    fn json_strings_escape() {
        let mut out = Vec::new();
        json_string(Some(b"a\"b\\c\n\x01"), &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), r#""a\"b\\c\n\u0001""#);
        let mut out = Vec::new();
        json_string(None, &mut out);
        assert_eq!(out, b"null");
    }
}
