//! Interop both ways with independent clients, for every compression codec:
//!
//! - librdkafka, through Debian's `kcat`;
//! - the Java client, through Kafka's own console producer and consumer
//!   (`scripts/kafka-local console-producer|console-consumer`, the tools jars
//!   of the same Maven Central release as the broker).
//!
//! What we write with each codec they read exactly (key, null key, value,
//! headers); what they write with each codec we read exactly, and every
//! batch we read carries the codec the other client was told to use (so the
//! other client's compressor really fed our decompressor; the topics keep
//! `compression.type=producer`).
//!
//! Under `CI=true` a missing `kcat` or missing Kafka tools fail the test;
//! outside CI the test notes what is missing and returns.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::process::run;

use clink_kafka::client::{Cluster, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
use clink_kafka::wire::compression::Compression;

const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
/// Records per codec and direction: enough for several records per batch.
const N: usize = 300;

/// One record as every tool can print it: text key (or none), text value,
/// text headers.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    key: Option<String>,
    value: String,
    headers: Vec<(String, String)>,
}

/// The records we write: every 7th has a null key, every 3rd no headers,
/// values of varying length (compressible, but not trivially).
fn ours(codec: &str) -> Vec<Rec> {
    (0..N)
        .map(|i| Rec {
            key: (i % 7 != 0).then(|| format!("key-{i}")),
            value: format!("value-{i}-{codec}-{}", "abcdefghij".repeat(i % 40)),
            headers: if i % 3 == 0 {
                Vec::new()
            } else {
                vec![("seq".into(), i.to_string()), ("codec".into(), codec.into())]
            },
        })
        .collect()
}

async fn topic(cluster: &Cluster, prefix: &str, codec: &str) -> String {
    let topic = common::unique_topic(&format!("interop-{prefix}-{codec}"));
    common::create_topic(cluster, NewTopic::new(&topic, 1, 1)).await;
    topic
}

async fn produce_ours(cluster: &Cluster, topic: &str, codec: &str, recs: &[Rec]) {
    let config = ProducerConfig::default()
        .with_compression(codec.parse().unwrap())
        .with_linger(Duration::from_millis(20));
    let producer = Producer::new(cluster.clone(), config).await.expect("producer");
    let mut acks = Vec::new();
    for r in recs {
        let mut rec = ProducerRecord::new(topic, r.value.clone()).with_partition(0);
        if let Some(k) = &r.key {
            rec = rec.with_key(k.clone());
        }
        for (k, v) in &r.headers {
            rec = rec.with_header(k.clone(), Some(v.clone().into()));
        }
        acks.push(producer.send(rec).await.expect("send"));
    }
    producer.flush(Duration::from_secs(30)).await.expect("flush");
    for a in acks {
        a.await.expect("delivery");
    }
}

/// Reads the topic back with our consumer, checking each batch's codec.
async fn consume_ours(cluster: &Cluster, topic: &str, codec: &str, n: usize) -> Vec<Rec> {
    let want: Compression = codec.parse().unwrap();
    let got = common::consume_exactly(cluster, ConsumerConfig::default(), topic, 0, Offset::Earliest, n).await;
    got.into_iter()
        .map(|r| {
            let codec = r.batch.compression().expect("a known codec");
            assert_eq!(
                codec, want,
                "offset {} of {topic} came in a {codec:?} batch",
                r.record.offset
            );
            let text = |b: &bytes::Bytes| String::from_utf8(b.to_vec()).expect("utf-8");
            Rec {
                key: r.record.key.as_ref().map(text),
                value: r.record.value.as_ref().map(text).expect("a value"),
                headers: r
                    .record
                    .headers
                    .iter()
                    .map(|h| (text(&h.key), h.value.as_ref().map(text).unwrap_or_default()))
                    .collect(),
            }
        })
        .collect()
}

fn lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `a=1,b=2` (kcat) or `a:1,b:2` (Java) → pairs; `empty` → none.
fn parse_headers(s: &str, sep: char, empty: &str) -> Vec<(String, String)> {
    if s == empty {
        return Vec::new();
    }
    s.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once(sep).unwrap_or_else(|| panic!("header {kv:?}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_reads_what_we_write_with_every_codec() {
    let Some(brokers) = common::brokers() else { return };
    let Some(kcat) = common::process::kcat() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    for codec in CODECS {
        let topic = topic(&cluster, "to-kcat", codec).await;
        let recs = ours(codec);
        produce_ours(&cluster, &topic, codec, &recs).await;
        let out = run(
            Command::new(&kcat)
                .args(["-C", "-b", &brokers, "-t", &topic, "-p", "0", "-o", "beginning"])
                .args(["-c", &N.to_string(), "-e", "-Z", "-f", "%k|%s|%h\n"]),
            "",
            Duration::from_secs(60),
        );
        let got: Vec<Rec> = lines(&out)
            .iter()
            .map(|l| {
                let mut f = l.splitn(3, '|');
                let (k, v, h) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap_or(""));
                Rec {
                    key: (k != "NULL").then(|| k.to_owned()),
                    value: v.to_owned(),
                    headers: parse_headers(h, '=', ""),
                }
            })
            .collect();
        assert_eq!(got.len(), N, "kcat read {} of {N} records ({codec})", got.len());
        assert_eq!(got, recs, "kcat's view of our {codec} records");
        // And they really were written compressed with that codec.
        let back = consume_ours(&cluster, &topic, codec, N).await;
        assert_eq!(back, recs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_read_what_kcat_writes_with_every_codec() {
    let Some(brokers) = common::brokers() else { return };
    let Some(kcat) = common::process::kcat() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    for codec in CODECS {
        let topic = topic(&cluster, "from-kcat", codec).await;
        // -Z: an empty key is sent as a null key. -H: one header on all.
        let expected: Vec<Rec> = (0..N)
            .map(|i| Rec {
                key: (i % 7 != 0).then(|| format!("k{i}")),
                value: format!("kcat-{i}-{codec}-{}", "0123456789".repeat(i % 30)),
                headers: vec![("origin".into(), "kcat".into())],
            })
            .collect();
        let input: String = expected
            .iter()
            .map(|r| format!("{}:{}\n", r.key.as_deref().unwrap_or(""), r.value))
            .collect();
        run(
            Command::new(&kcat)
                .args([
                    "-P", "-b", &brokers, "-t", &topic, "-p", "0", "-z", codec, "-K", ":", "-Z",
                ])
                .args(["-H", "origin=kcat", "-X", "linger.ms=50"]),
            &input,
            Duration::from_secs(60),
        );
        let got = consume_ours(&cluster, &topic, codec, N).await;
        assert_eq!(got, expected, "our view of kcat's {codec} records");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_console_consumer_reads_what_we_write_with_every_codec() {
    let Some(brokers) = common::brokers() else { return };
    let Some(tools) = common::process::kafka_tools() else {
        return;
    };
    let cluster = common::cluster(common::config(&brokers)).await;
    for codec in CODECS {
        let topic = topic(&cluster, "to-java", codec).await;
        let recs = ours(codec);
        produce_ours(&cluster, &topic, codec, &recs).await;
        let out = run(
            Command::new(&tools)
                .args(["console-consumer", "--bootstrap-server", &brokers, "--topic", &topic])
                .args([
                    "--partition",
                    "0",
                    "--offset",
                    "earliest",
                    "--max-messages",
                    &N.to_string(),
                ])
                .args(["--timeout-ms", "30000"])
                .args(["--formatter-property", "print.key=true"])
                .args(["--formatter-property", "print.headers=true"])
                .args(["--formatter-property", "key.separator=|"])
                .args(["--formatter-property", "headers.separator=,"])
                .args(["--formatter-property", "headers.key.separator=:"]),
            "",
            Duration::from_secs(120),
        );
        // Default layout with these properties: headers|key|value.
        let got: Vec<Rec> = lines(&out)
            .iter()
            .filter(|l| l.contains('|'))
            .map(|l| {
                let mut f = l.splitn(3, '|');
                let (h, k, v) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
                Rec {
                    key: (k != "null").then(|| k.to_owned()),
                    value: v.to_owned(),
                    headers: parse_headers(h, ':', "NO_HEADERS"),
                }
            })
            .collect();
        assert_eq!(
            got.len(),
            N,
            "the Java consumer read {} of {N} records ({codec})",
            got.len()
        );
        assert_eq!(got, recs, "the Java consumer's view of our {codec} records");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_read_what_the_java_console_producer_writes_with_every_codec() {
    let Some(brokers) = common::brokers() else { return };
    let Some(tools) = common::process::kafka_tools() else {
        return;
    };
    let cluster = common::cluster(common::config(&brokers)).await;
    for codec in CODECS {
        let topic = topic(&cluster, "from-java", codec).await;
        let expected: Vec<Rec> = (0..N)
            .map(|i| Rec {
                key: (i % 7 != 0).then(|| format!("jk{i}")),
                value: format!("java-{i}-{codec}-{}", "qwertyuiop".repeat(i % 30)),
                headers: vec![("seq".into(), i.to_string()), ("origin".into(), "java".into())],
            })
            .collect();
        // parse.headers: `h1:v1,h2:v2<TAB>key<TAB>value`; null.marker makes a null key.
        let input: String = expected
            .iter()
            .map(|r| {
                let h: Vec<String> = r.headers.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{}\t{}\t{}\n", h.join(","), r.key.as_deref().unwrap_or("NULL"), r.value)
            })
            .collect();
        run(
            Command::new(&tools)
                .args(["console-producer", "--bootstrap-server", &brokers, "--topic", &topic])
                .args(["--compression-codec", codec])
                .args(["--command-property", "linger.ms=50"])
                .args(["--reader-property", "parse.key=true"])
                .args(["--reader-property", "parse.headers=true"])
                .args(["--reader-property", "null.marker=NULL"]),
            &input,
            Duration::from_secs(120),
        );
        let got = consume_ours(&cluster, &topic, codec, N).await;
        assert_eq!(got, expected, "our view of the Java producer's {codec} records");
    }
}
