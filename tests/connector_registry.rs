//! Registry-framed values (issue 12) against the real broker and a real
//! Schema Registry (Apicurio Registry 3.3.3, `scripts/registry-local`, its
//! Confluent-compatible API): `decode_error = fail | skip` on text and on
//! Avro; Avro round trips through the text, upsert and 2PC sinks and the text
//! source; schema evolution; bad values (wrong magic, truncated, unknown
//! id, a payload that does not fit); rows a sink refuses; TLS to the
//! registry with a private CA. A scripted HTTP double adds what the real
//! registry cannot do on cue (404, 500, garbage, silence, an outage after
//! the cache is warm, checking the credentials it is sent).
//!
//! Needs `CLINK_KAFKA_BROKERS` and `CLINK_REGISTRY_URL` (`eval "$(scripts/
//! registry-local env)"`); under `CI=true` a missing one fails.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clink_kafka::client::{Cluster, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
use clink_kafka::connector::options::{parse_sink, parse_source, parse_upsert, FactoryKind};
use clink_kafka::connector::selected::{self, SelectedConsumer};
use clink_kafka::connector::{
    install, BuildContext, ConnectorError, Registry, Sink, Source, StateRow, Text, TextKafkaSink, TextKafkaSource,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const USER_V1: &str = r#"{"type":"record","name":"User","namespace":"clink.test","fields":[
  {"name":"id","type":"long"},
  {"name":"name","type":"string"},
  {"name":"tags","type":{"type":"array","items":"string"}},
  {"name":"nick","type":["null","string"],"default":null}]}"#;

fn user_v2() -> String {
    USER_V1.replace(
        r#"{"name":"nick","type":["null","string"],"default":null}]"#,
        r#"{"name":"nick","type":["null","string"],"default":null},{"name":"score","type":"double","default":0.0}]"#,
    )
}

fn registry_url() -> Option<String> {
    match std::env::var("CLINK_REGISTRY_URL") {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            common::skip_or_fail("a schema registry (CLINK_REGISTRY_URL: scripts/registry-local up and eval its env)");
            None
        }
    }
}

fn params(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    common::connector::connector_params(brokers, topic, extra)
        .into_iter()
        .collect()
}

fn text_source(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> TextKafkaSource<SelectedConsumer> {
    let o = parse_source(FactoryKind::TextSource, &params(brokers, topic, extra), 0, 1).unwrap();
    assert_eq!(o.backend.name(), common::connector::backend());
    TextKafkaSource::new(selected::kafka_source(o).unwrap())
}

fn text_sink(
    brokers: &str,
    topic: &str,
    extra: &[(&str, &str)],
) -> TextKafkaSink<clink_kafka::connector::selected::SelectedProducer> {
    let o = parse_sink(FactoryKind::TextSink, &params(brokers, topic, extra)).unwrap();
    assert_eq!(o.backend.name(), common::connector::backend());
    TextKafkaSink::new(selected::kafka_sink(o).unwrap())
}

/// Reads until `n` texts came or an error (bounded: 30 s, 2,000 calls).
async fn read_texts<S: Source<Item = Text> + ?Sized>(s: &mut S, n: usize) -> Result<Vec<String>, ConnectorError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    for _ in 0..2000 {
        if out.len() >= n {
            return Ok(out);
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} texts within 30 s: {out:?}",
            out.len()
        );
        let mut got = Vec::new();
        s.produce(&mut got).await?;
        out.extend(got.into_iter().flatten().map(|t| t.as_str().to_owned()));
    }
    panic!("only {} of {n} texts after 2000 produce calls", out.len());
}

/// Polls `s` a few times and returns whatever came (to show nothing more does).
async fn drain<S: Source<Item = Text> + ?Sized>(s: &mut S) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..5 {
        let mut got = Vec::new();
        s.produce(&mut got).await.unwrap();
        out.extend(got.into_iter().flatten().map(|t| t.as_str().to_owned()));
    }
    out
}

async fn produce_raw(cluster: &Cluster, topic: &str, values: &[Vec<u8>]) {
    let producer = Producer::new(cluster.clone(), ProducerConfig::default())
        .await
        .expect("producer");
    for v in values {
        let mut r = ProducerRecord::new(topic, v.clone());
        r.partition = Some(0);
        producer.send(r).await.expect("send");
    }
    producer.flush(Duration::from_secs(30)).await.expect("flush");
}

async fn consume_raw(cluster: &Cluster, topic: &str, n: usize) -> Vec<Vec<u8>> {
    common::consume_exactly(cluster, ConsumerConfig::default(), topic, 0, Offset::Earliest, n)
        .await
        .into_iter()
        .map(|r| r.record.value.map(|v| v.to_vec()).unwrap_or_default())
        .collect()
}

async fn topic(cluster: &Cluster, prefix: &str) -> String {
    let t = common::unique_topic(prefix);
    common::create_topic(cluster, NewTopic::new(&t, 1, 1)).await;
    t
}

fn resume_offset(rows: &[StateRow]) -> String {
    rows.iter()
        .map(|r| String::from_utf8_lossy(&r.value).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_error_on_text_fails_with_where_or_skips_counts_and_moves_the_checkpoint() {
    let logs = common::connector::capture_logs();
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-text").await;
    produce_raw(&cluster, &t, &[b"a".to_vec(), vec![0xff, 0xfe], b"c".to_vec()]).await;

    let mut fail = text_source(&brokers, &t, &[]);
    fail.open().await.unwrap();
    let e = read_texts(&mut fail, 3).await.unwrap_err();
    assert!(
        matches!(&e, ConnectorError::NotText { topic, partition: 0, offset: 1, .. } if *topic == t),
        "{e}"
    );
    assert!(e.to_string().contains(&format!("{t}[0] offset 1")), "{e}");

    let mut skip = text_source(&brokers, &t, &[("decode_error", "skip")]);
    skip.open().await.unwrap();
    assert_eq!(read_texts(&mut skip, 2).await.unwrap(), ["a", "c"]);
    assert_eq!(skip.inner().counters().decode_errors_skipped(), 1);
    let rows = skip.snapshot();
    assert_eq!(resume_offset(&rows), "3", "the checkpoint is past the skipped record");
    let warned = logs.contents();
    assert!(
        warned.contains("decode_error = skip") && warned.contains(&t) && warned.contains("offset=1"),
        "{warned}"
    );
    skip.close().await.unwrap();

    // A restore from that checkpoint does not meet the bad record again,
    // even with decode_error = fail.
    produce_raw(&cluster, &t, &[b"d".to_vec()]).await;
    let mut restored = text_source(&brokers, &t, &[]);
    restored.restore(&rows).unwrap();
    restored.open().await.unwrap();
    assert_eq!(read_texts(&mut restored, 1).await.unwrap(), ["d"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_round_trips_through_the_text_sink_the_broker_the_registry_and_the_text_source() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-avro").await;
    let fmt = [
        ("format", "avro"),
        ("schema_registry_url", url.as_str()),
        ("schema_registry_auto_register", "true"),
        ("schema_registry_value_schema", USER_V1),
    ];
    let mut sink = text_sink(&brokers, &t, &fmt);
    sink.open().await.unwrap();
    let id = sink.encoder().unwrap().schema_id().unwrap();
    assert_eq!(sink.encoder().unwrap().subject(), format!("{t}-value"));
    let rows = [
        r#"{"id":1,"name":"ann","tags":["a","b"],"nick":"annie"}"#,
        r#"{"id":2,"name":"bob","tags":[],"nick":null}"#,
        r#"{"id":"three","name":"x","tags":[]}"#, // does not fit: refused, counted
        r#"{"id":4,"name":"dee","tags":["x"]}"#,  // nick takes its default
    ];
    sink.on_data(rows.iter().map(|r| Text::from(r.to_string())).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(sink.refused_rows(), 1);
    sink.close().await.unwrap();

    // The bytes on the topic are Confluent-framed with the registered id.
    let raw = consume_raw(&cluster, &t, 3).await;
    for v in &raw {
        assert_eq!(v[0], 0, "magic");
        assert_eq!(u32::from_be_bytes([v[1], v[2], v[3], v[4]]), id);
    }

    let mut source = text_source(
        &brokers,
        &t,
        &[("format", "avro"), ("schema_registry_url", url.as_str())],
    );
    source.open().await.unwrap();
    let got = read_texts(&mut source, 3).await.unwrap();
    assert_eq!(
        got,
        [
            rows[0].to_owned(),
            rows[1].to_owned(),
            r#"{"id":4,"name":"dee","tags":["x"],"nick":null}"#.to_owned()
        ]
    );
    // One lookup for the one id, however many records carry it.
    assert_eq!(source.decoder().unwrap().registry_requests(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evolved_compatible_schema_decodes_old_and_new_records() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-evolve").await;
    let v2 = user_v2();
    let mut ids = Vec::new();
    for (schema, row) in [
        (USER_V1, r#"{"id":1,"name":"old","tags":[]}"#),
        (v2.as_str(), r#"{"id":2,"name":"new","tags":[],"score":2.5}"#),
    ] {
        let mut sink = text_sink(
            &brokers,
            &t,
            &[
                ("format", "avro"),
                ("schema_registry_url", url.as_str()),
                ("schema_registry_auto_register", "true"),
                ("schema_registry_value_schema", schema),
            ],
        );
        sink.open().await.unwrap();
        ids.push(sink.encoder().unwrap().schema_id().unwrap());
        sink.on_data(vec![Text::from(row.to_owned())]).await.unwrap();
        sink.on_barrier(1).await.unwrap();
        sink.close().await.unwrap();
    }
    assert_ne!(ids[0], ids[1], "two versions, two ids");
    // A sink that does not register uses the subject's latest version (v2).
    let mut latest = text_sink(
        &brokers,
        &t,
        &[("format", "avro"), ("schema_registry_url", url.as_str())],
    );
    latest.open().await.unwrap();
    assert_eq!(latest.encoder().unwrap().schema_id(), Some(ids[1]));
    latest.close().await.unwrap();

    let mut source = text_source(
        &brokers,
        &t,
        &[("format", "avro"), ("schema_registry_url", url.as_str())],
    );
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 2).await.unwrap(),
        [
            r#"{"id":1,"name":"old","tags":[],"nick":null}"#,
            r#"{"id":2,"name":"new","tags":[],"nick":null,"score":2.5}"#
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upsert_and_2pc_sinks_encode_avro_too() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let fmt = [
        ("format", "avro"),
        ("schema_registry_url", url.as_str()),
        ("schema_registry_auto_register", "true"),
        ("schema_registry_value_schema", USER_V1),
    ];
    let source_fmt = [("format", "avro"), ("schema_registry_url", url.as_str())];

    let t = topic(&cluster, "reg-upsert").await;
    let mut extra = fmt.to_vec();
    extra.push(("primary_key", "id"));
    let mut upsert = selected::upsert_sink(parse_upsert(&params(&brokers, &t, &extra)).unwrap()).unwrap();
    upsert.open().await.unwrap();
    upsert
        .on_data(vec![
            Text::from(r#"{"id":1,"name":"a","tags":[],"__row_kind":"insert"}"#.to_owned()),
            Text::from(r#"{"id":1,"name":1,"tags":[],"__row_kind":"insert"}"#.to_owned()),
            Text::from(r#"{"id":1,"__row_kind":"delete"}"#.to_owned()),
        ])
        .await
        .unwrap();
    upsert.on_barrier(1).await.unwrap();
    assert_eq!(upsert.refused_rows(), 1);
    upsert.close().await.unwrap();
    let raw = common::consume_exactly(&cluster, ConsumerConfig::default(), &t, 0, Offset::Earliest, 2).await;
    assert_eq!(raw[0].record.key.as_deref(), Some(&b"1"[..]));
    assert!(raw[1].record.value.is_none(), "the delete is a tombstone, not encoded");
    let mut source = text_source(&brokers, &t, &source_fmt);
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"id":1,"name":"a","tags":[],"nick":null}"#]
    );

    let t = topic(&cluster, "reg-2pc").await;
    let mut registry = Registry::new();
    install(&mut registry).unwrap();
    let mut extra = fmt.to_vec();
    let txid = format!("{t}-tx");
    extra.extend([("transactional_id", txid.as_str()), ("receipts_in_memory", "true")]);
    let mut sink = registry
        .build(
            "kafka_2pc_sink_string",
            &BuildContext::new(common::connector::connector_params(&brokers, &t, &extra)),
        )
        .unwrap()
        .into_text_sink("kafka_2pc_sink_string")
        .unwrap();
    sink.open().await.unwrap();
    sink.on_data(vec![
        Text::from(r#"{"id":7,"name":"tx","tags":["t"]}"#.to_owned()),
        Text::from("not json".to_owned()),
    ])
    .await
    .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.on_commit(1).await.unwrap();
    sink.close().await.unwrap();
    let mut source = text_source(&brokers, &t, &source_fmt);
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"id":7,"name":"tx","tags":["t"],"nick":null}"#]
    );
    assert!(drain(&mut source).await.is_empty(), "the refused row was never sent");
}

/// Registers `schema` under `subject` through the registry's REST API
/// with a plain HTTP request of the test's own, independent of the client
/// under test; returns the id.
async fn register_directly(url: &str, subject: &str, schema: &str) -> u32 {
    register_directly_as(url, subject, schema, None, serde_json::json!([])).await
}

/// [`register_directly`] with a `schemaType` and `references`.
async fn register_directly_as(
    url: &str,
    subject: &str,
    schema: &str,
    schema_type: Option<&str>,
    references: serde_json::Value,
) -> u32 {
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, base) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut body = serde_json::json!({ "schema": schema, "references": references });
    if let Some(t) = schema_type {
        body["schemaType"] = t.into();
    }
    let body = body.to_string();
    let req = format!(
        "POST {base}/subjects/{subject}/versions HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/vnd.schemaregistry.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut s = tokio::net::TcpStream::connect(authority).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    let json = answer.split("\r\n\r\n").nth(1).unwrap();
    // A chunked body has a size line first; take the JSON object.
    let json = &json[json.find('{').unwrap_or_else(|| panic!("{answer}"))..=json.rfind('}').unwrap()];
    serde_json::from_str::<serde_json::Value>(json).unwrap()["id"]
        .as_u64()
        .unwrap() as u32
}

fn framed(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_avro_values_take_the_decode_error_path() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-bad").await;
    let id = register_directly(&url, &format!("{t}-value"), USER_V1).await;
    // {"id":1,"name":"a","tags":[],"nick":null}: long 1, string "a", empty array, union branch 0.
    let good = framed(id, &[0x02, 0x02, b'a', 0x00, 0x00]);
    let values = vec![
        good.clone(),
        vec![1, 0, 0, 0, 1, 2],                      // wrong magic
        vec![0, 0, 0],                               // truncated frame
        framed(0x7fff_fff0, &[0x02]),                // unknown schema id
        framed(id, &[0x02, 0x02]),                   // truncated payload
        framed(id, &[0x02, 0x02, b'a', 0x00, 0x08]), // union branch 4 of 2: does not fit
        good,
    ];
    produce_raw(&cluster, &t, &values).await;
    let fmt = [("format", "avro"), ("schema_registry_url", url.as_str())];

    let mut fail = text_source(&brokers, &t, &fmt);
    fail.open().await.unwrap();
    let e = read_texts(&mut fail, 7).await.unwrap_err();
    assert!(
        matches!(
            &e,
            ConnectorError::Undecodable {
                partition: 0,
                offset: 1,
                format: "avro",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("magic"), "{e}");

    let mut extra = fmt.to_vec();
    extra.push(("decode_error", "skip"));
    let mut skip = text_source(&brokers, &t, &extra);
    skip.open().await.unwrap();
    let expected = r#"{"id":1,"name":"a","tags":[],"nick":null}"#;
    assert_eq!(read_texts(&mut skip, 2).await.unwrap(), [expected, expected]);
    assert_eq!(skip.inner().counters().decode_errors_skipped(), 5);
    assert_eq!(resume_offset(&skip.snapshot()), "7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_without_auto_register_needs_the_subject_and_options_are_checked() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let t = common::unique_topic("reg-nosubject");
    let mut sink = text_sink(
        &brokers,
        &t,
        &[("format", "avro"), ("schema_registry_url", url.as_str())],
    );
    let e = sink.open().await.map(drop).unwrap_err();
    assert!(
        e.to_string().contains(&format!("{t}-value")) && e.to_string().contains("not found"),
        "{e}"
    );

    for (extra, option) in [
        (vec![("format", "avro")], "schema_registry_url"),
        (
            vec![("format", "avro"), ("schema_registry_url", "ftp://x")],
            "schema_registry_url",
        ),
        (vec![("format", "xml")], "format"),
        (vec![("schema_registry_url", url.as_str())], "schema_registry_url"),
        (
            vec![
                ("format", "avro"),
                ("schema_registry_url", url.as_str()),
                ("schema_registry_auto_register", "true"),
            ],
            "schema_registry_value_schema",
        ),
        (
            vec![
                ("format", "avro"),
                ("schema_registry_url", url.as_str()),
                ("schema_registry_timeout_ms", "0"),
            ],
            "schema_registry_timeout_ms",
        ),
    ] {
        let e = parse_sink(FactoryKind::TextSink, &params(&brokers, &t, &extra)).unwrap_err();
        assert_eq!(e.option(), Some(option), "{extra:?}: {e}");
    }
    // A sink whose subject holds a schema of another language is refused
    // at open, naming the subject.
    let t = common::unique_topic("reg-wrongtype");
    register_directly(&url, &format!("{t}-value"), USER_V1).await;
    let mut sink = text_sink(
        &brokers,
        &t,
        &[("format", "protobuf"), ("schema_registry_url", url.as_str())],
    );
    let e = sink.open().await.map(drop).unwrap_err();
    assert_eq!(e.option(), Some("schema_registry_subject"), "{e}");
    assert!(e.to_string().contains("AVRO"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_registry_with_a_private_ca() {
    let Some(brokers) = common::brokers() else { return };
    let Some(_) = registry_url() else { return };
    let (Ok(tls_url), Ok(ca), Ok(other)) = (
        std::env::var("CLINK_REGISTRY_TLS_URL"),
        std::env::var("CLINK_REGISTRY_TLS_CA"),
        std::env::var("CLINK_REGISTRY_TLS_OTHER_CA"),
    ) else {
        panic!("CLINK_REGISTRY_URL is set but the TLS variables of scripts/registry-local env are not");
    };
    let t = common::unique_topic("reg-tls");
    let with = |ca: &str| {
        text_sink(
            &brokers,
            &t,
            &[
                ("format", "avro"),
                ("schema_registry_url", tls_url.as_str()),
                ("schema_registry_ssl_ca_location", ca),
                ("schema_registry_auto_register", "true"),
                ("schema_registry_value_schema", USER_V1),
            ],
        )
    };
    let mut trusted = with(&ca);
    trusted.open().await.unwrap();
    assert!(trusted.encoder().unwrap().schema_id().is_some());
    trusted.close().await.unwrap();
    let mut untrusted = with(&other);
    let e = untrusted.open().await.map(drop).unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
}

// ---------------------------------------------------------------------------
// A scripted registry: answers per path, records what it was sent.

#[derive(Clone)]
enum Answer {
    Json(u16, String),
    Garbage,
    Close,
    Silence,
}

#[derive(Clone, Default)]
struct Double {
    answers: Arc<Mutex<BTreeMap<String, Answer>>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Double {
    async fn start() -> (Double, String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/base", listener.local_addr().unwrap());
        let d = Double::default();
        let served = d.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let d = served.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).into_owned();
                    let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
                    d.requests.lock().unwrap().push(head);
                    let answer = d.answers.lock().unwrap().get(&path).cloned();
                    match answer.unwrap_or(Answer::Json(
                        404,
                        r#"{"error_code":40403,"message":"Schema not found"}"#.into(),
                    )) {
                        Answer::Json(status, body) => {
                            let r = format!(
                                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = s.write_all(r.as_bytes()).await;
                        }
                        Answer::Garbage => {
                            let _ = s.write_all(b"SSH-2.0-not-http\r\n\r\n").await;
                        }
                        Answer::Close => {}
                        Answer::Silence => tokio::time::sleep(Duration::from_secs(30)).await,
                    }
                });
            }
        });
        (d, url, task)
    }

    fn answer(&self, path: &str, a: Answer) {
        self.answers.lock().unwrap().insert(path.to_owned(), a);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_failures_take_the_decode_error_path_and_a_warm_cache_outlives_an_outage() {
    let logs = common::connector::capture_logs();
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-double").await;
    let (double, url, server) = Double::start().await;
    let schema = serde_json::json!({ "schema": r#""string""# }).to_string();
    double.answer("/base/schemas/ids/1", Answer::Json(200, schema));
    double.answer(
        "/base/schemas/ids/2",
        Answer::Json(500, r#"{"error_code":50001,"message":"boom"}"#.into()),
    );
    double.answer("/base/schemas/ids/3", Answer::Garbage);
    double.answer("/base/schemas/ids/4", Answer::Close);
    double.answer("/base/schemas/ids/5", Answer::Silence);
    double.answer("/base/schemas/ids/6", Answer::Json(200, "{not json".into()));
    // id 7: 404 by default
    let s = |id: u32, text: &str| {
        let mut p = vec![(text.len() as u8) << 1];
        p.extend_from_slice(text.as_bytes());
        framed(id, &p)
    };
    produce_raw(
        &cluster,
        &t,
        &[
            s(1, "one"),
            s(2, "x"),
            s(3, "x"),
            s(4, "x"),
            s(5, "x"),
            s(6, "x"),
            s(7, "x"),
            s(1, "two"),
        ],
    )
    .await;
    let fmt = [
        ("format", "avro"),
        ("schema_registry_url", url.as_str()),
        ("schema_registry_timeout_ms", "500"),
        ("schema_registry_basic_auth_user_info", "reader:canary-registry-pw"),
        ("decode_error", "skip"),
    ];
    let mut source = text_source(&brokers, &t, &fmt);
    source.open().await.unwrap();
    assert_eq!(read_texts(&mut source, 2).await.unwrap(), [r#""one""#, r#""two""#]);
    assert_eq!(source.inner().counters().decode_errors_skipped(), 6);
    let seen = double.requests.lock().unwrap().clone();
    assert!(
        seen.iter()
            .all(|r| r.contains("Authorization: Basic cmVhZGVyOmNhbmFyeS1yZWdpc3RyeS1wdw==")),
        "{seen:?}"
    );
    let log = logs.contents();
    for reason in [
        "HTTP 500",
        "boom",
        "not an HTTP answer",
        "closed",
        "no answer within",
        "not JSON",
        "not found",
    ] {
        assert!(log.contains(reason), "{reason:?} missing from the warnings:\n{log}");
    }

    // A bearer token is sent as such (and a cached id is not asked twice).
    let mut config = clink_kafka::schema_registry::RegistryConfig::new(url.clone());
    config.auth = clink_kafka::schema_registry::RegistryAuth::Bearer {
        token: clink_kafka::wire::secret::Secret::new("canary-registry-token"),
    };
    let mut client = clink_kafka::schema_registry::SchemaRegistryClient::new(config).unwrap();
    double.requests.lock().unwrap().clear();
    client.schema_by_id(1).await.unwrap();
    client.schema_by_id(1).await.unwrap();
    let seen = double.requests.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("Authorization: Bearer canary-registry-token"),
        "{seen:?}"
    );
    assert!(!format!("{client:?}").contains("canary"));

    // The registry goes away: records of the cached id still decode.
    server.abort();
    let _ = server.await;
    produce_raw(&cluster, &t, &[s(1, "three")]).await;
    assert_eq!(read_texts(&mut source, 1).await.unwrap(), [r#""three""#]);

    // The secret is in no log line, no snapshot row, no Debug output.
    let rows = source.snapshot();
    for text in [
        logs.contents(),
        format!("{rows:?}"),
        format!("{source:?}"),
        format!("{:?}", source.decoder()),
    ] {
        assert!(!text.contains("canary-registry-pw") && !text.contains("cmVhZGVyOmNhbmFyeS1yZWdpc3RyeS1wdw"));
    }

    // decode_error = fail names where and why.
    let mut fail_fmt = fmt.to_vec();
    fail_fmt.pop();
    let mut fail = text_source(&brokers, &t, &fail_fmt);
    fail.open().await.unwrap();
    let e = read_texts(&mut fail, 9).await.unwrap_err();
    assert!(matches!(&e, ConnectorError::Undecodable { offset: 0, .. }), "{e}");
    assert!(
        e.to_string().contains("schema id 1") || e.to_string().contains("connecting"),
        "{e}"
    );
}

/// Runs the fastavro peer (`tests/interop_avro/fastavro_peer.py`) with
/// `stdin`, bounded; its stdout lines.
fn fastavro(args: &[&str], stdin: &str) -> Vec<String> {
    let python = match std::env::var("CLINK_FASTAVRO_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => panic!("CLINK_FASTAVRO_PYTHON is not set: eval \"$(tests/interop_avro/setup)\" (scripts/test does)"),
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop_avro/fastavro_peer.py");
    let mut cmd = std::process::Command::new(python);
    cmd.arg(script).args(args);
    lines_of(
        common::process::run(&mut cmd, stdin, Duration::from_secs(60)),
        "the fastavro peer",
    )
}

/// The stdout lines of a command `common::process::run` saw succeed.
fn lines_of(out: std::process::Output, what: &str) -> Vec<String> {
    String::from_utf8(out.stdout)
        .unwrap_or_else(|e| panic!("{what} printed non-UTF-8: {e}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn avro_interop_with_fastavro_both_ways_through_the_broker_and_registry() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let rows = [
        r#"{"id": 1, "name": "ann", "tags": ["a", "b"], "nick": "annie"}"#,
        r#"{"id": -9000000000, "name": "\u00e9t\u00e9 \u2603", "tags": [], "nick": null}"#,
    ];

    // fastavro writes (and registers through the REST API); we read.
    let t = topic(&cluster, "reg-fastavro-in").await;
    let schema_file = std::env::temp_dir().join(format!("{t}.avsc"));
    std::fs::write(&schema_file, USER_V1).unwrap();
    let framed = fastavro(
        &["encode", &url, &format!("{t}-value"), schema_file.to_str().unwrap()],
        &rows.join("\n"),
    );
    assert_eq!(framed.len(), rows.len());
    produce_raw(&cluster, &t, &framed.iter().map(|h| unhex(h)).collect::<Vec<_>>()).await;
    let mut source = text_source(
        &brokers,
        &t,
        &[("format", "avro"), ("schema_registry_url", url.as_str())],
    );
    source.open().await.unwrap();
    let got = read_texts(&mut source, rows.len()).await.unwrap();
    for (g, r) in got.iter().zip(rows) {
        assert_eq!(json(g), json(r));
    }

    // We write; fastavro reads (fetching the schema by id itself).
    let t = topic(&cluster, "reg-fastavro-out").await;
    let mut sink = text_sink(
        &brokers,
        &t,
        &[
            ("format", "avro"),
            ("schema_registry_url", url.as_str()),
            ("schema_registry_auto_register", "true"),
            ("schema_registry_value_schema", USER_V1),
        ],
    );
    sink.open().await.unwrap();
    sink.on_data(rows.iter().map(|r| Text::from(r.to_string())).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
    let raw = consume_raw(&cluster, &t, rows.len()).await;
    let decoded = fastavro(
        &["decode", &url],
        &raw.iter().map(|v| hex(v)).collect::<Vec<_>>().join("\n"),
    );
    assert_eq!(decoded.len(), rows.len());
    for (d, r) in decoded.iter().zip(rows) {
        assert_eq!(json(d), json(r));
    }
    let _ = std::fs::remove_file(schema_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_framed_sql_table_round_trips_rows_through_the_json_bridge() {
    use clink_kafka::connector::sql::{
        build_table, json_to_row, parse_create_table, row_to_json, Row, SqlValue, TableRole,
    };
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-sql").await;
    let schema = r#"{"type":"record","name":"Click","fields":[{"name":"user_id","type":"long"},{"name":"url","type":["null","string"]}]}"#;
    let sql = format!(
        "CREATE TABLE clicks (user_id BIGINT, url STRING) WITH (
           connector = 'kafka', format = 'avro', schema_registry_url = '{url}',
           schema_registry_auto_register = 'true', schema_registry_value_schema = '{schema}',
           brokers = '{brokers}', topic = '{t}', auto_offset_reset = 'earliest')"
    );
    let table = parse_create_table(&sql).unwrap();
    let mut r = Registry::new();
    install(&mut r).unwrap();
    let rows = vec![
        Row::insert(vec![SqlValue::Integer(1), SqlValue::String("/a".into())]),
        Row::insert(vec![SqlValue::Integer(2), SqlValue::Null]),
    ];
    let (_, sink) = build_table(&r, &table, TableRole::Sink, 0, 1).unwrap();
    let mut sink = sink.into_text_sink("kafka_sink_string").unwrap();
    sink.open().await.unwrap();
    sink.on_data(
        rows.iter()
            .map(|row| row_to_json(&table.columns, row).unwrap())
            .collect(),
    )
    .await
    .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
    let raw = consume_raw(&cluster, &t, 2).await;
    assert!(
        raw.iter().all(|v| v[0] == 0 && v.len() > 5),
        "framed values on the topic"
    );
    let (_, source) = build_table(&r, &table, TableRole::Source, 0, 1).unwrap();
    let mut source = source.into_text_source("kafka_source_string").unwrap();
    source.open().await.unwrap();
    let back: Vec<Row> = read_texts(&mut *source, 2)
        .await
        .unwrap()
        .iter()
        .map(|text| json_to_row(&table.columns, text).unwrap())
        .collect();
    assert_eq!(back, rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_produces_and_consumes_avro_as_json_lines() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-cli").await;
    let schema_file = std::env::temp_dir().join(format!("{t}.avsc"));
    std::fs::write(&schema_file, USER_V1).unwrap();
    let rows = [
        r#"{"id":1,"name":"ann","tags":["a"],"nick":null}"#,
        r#"{"id":2,"name":"bob","tags":[],"nick":"b"}"#,
    ];
    let cli = |args: &[&str], stdin: &str| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
        cmd.args(args)
            .args(["--brokers", &brokers, "--topic", &t, "--value-format", "avro"]);
        cmd.args(["--schema-registry-url", &url]);
        common::process::run(&mut cmd, stdin, Duration::from_secs(60))
    };
    let schema_arg = schema_file.to_str().unwrap();
    lines_of(
        cli(&["produce", "--value-schema-file", schema_arg], &rows.join("\n")),
        "produce",
    );
    // A row that does not fit names its line and fails the run (with the
    // subject's latest schema: no --value-schema-file this time).
    let bad_row = std::env::temp_dir().join(format!("{t}.bad"));
    std::fs::write(&bad_row, r#"{"id":"x"}"#).unwrap();
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_clink-kafka"))
        .args([
            "produce",
            "--brokers",
            &brokers,
            "--topic",
            &t,
            "--value-format",
            "avro",
        ])
        .args(["--schema-registry-url", &url])
        .stdin(std::fs::File::open(&bad_row).unwrap())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("stdin line 1") && stderr.contains("does not fit"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(bad_row);
    let raw = consume_raw(&cluster, &t, 2).await;
    assert!(raw.iter().all(|v| v[0] == 0), "framed");
    let out = lines_of(cli(&["consume", "--from-beginning", "--count", "2"], ""), "consume");
    assert_eq!(out, rows);
    let _ = std::fs::remove_file(schema_file);
}

const ORDER_SCHEMA: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
  "properties":{"id":{"type":"integer"},"item":{"type":"string"},"qty":{"type":"number","minimum":0}},
  "required":["id","item"],"additionalProperties":false}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_schema_round_trips_and_interoperates_both_ways_with_an_independent_peer() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let rows = [r#"{"id":1,"item":"tea","qty":2.5}"#, r#"{"id":2,"item":"caf\u00e9"}"#];
    let fmt = [("format", "json-schema"), ("schema_registry_url", url.as_str())];

    // We write (auto-registering a JSON schema) and read back; misfits are refused.
    let t = topic(&cluster, "reg-json").await;
    let mut extra = fmt.to_vec();
    extra.extend([
        ("schema_registry_auto_register", "true"),
        ("schema_registry_value_schema", ORDER_SCHEMA),
    ]);
    let mut sink = text_sink(&brokers, &t, &extra);
    sink.open().await.unwrap();
    let mut batch: Vec<Text> = rows.iter().map(|r| Text::from(r.to_string())).collect();
    batch.push(Text::from(r#"{"id":3,"item":"x","qty":-1}"#.to_owned()));
    batch.push(Text::from(r#"{"item":"no id"}"#.to_owned()));
    sink.on_data(batch).await.unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(sink.refused_rows(), 2);
    sink.close().await.unwrap();
    let raw = consume_raw(&cluster, &t, rows.len()).await;
    // The independent peer reads what we wrote.
    let decoded = fastavro(
        &["json-decode", &url],
        &raw.iter().map(|v| hex(v)).collect::<Vec<_>>().join("\n"),
    );
    for (d, r) in decoded.iter().zip(rows) {
        assert_eq!(json(d), json(r));
    }
    // A value that does not fit its schema takes the decode_error path.
    let id = u32::from_be_bytes([raw[0][1], raw[0][2], raw[0][3], raw[0][4]]);
    produce_raw(&cluster, &t, &[framed(id, br#"{"id":"not a number","item":"x"}"#)]).await;
    let mut fail = text_source(&brokers, &t, &fmt);
    fail.open().await.unwrap();
    let e = read_texts(&mut fail, 3).await.unwrap_err();
    assert!(
        matches!(
            &e,
            ConnectorError::Undecodable {
                offset: 2,
                format: "json-schema",
                ..
            }
        ) && e.to_string().contains("does not fit"),
        "{e}"
    );
    let mut skip_fmt = fmt.to_vec();
    skip_fmt.push(("decode_error", "skip"));
    let mut skip = text_source(&brokers, &t, &skip_fmt);
    skip.open().await.unwrap();
    let got = read_texts(&mut skip, 2).await.unwrap();
    assert_eq!(got.iter().map(|g| json(g)).collect::<Vec<_>>(), rows.map(json));
    assert!(drain(&mut skip).await.is_empty());
    assert_eq!(skip.inner().counters().decode_errors_skipped(), 1);

    // The peer writes (registering through the REST API); we read.
    let t = topic(&cluster, "reg-json-in").await;
    let schema_file = std::env::temp_dir().join(format!("{t}.json"));
    std::fs::write(&schema_file, ORDER_SCHEMA).unwrap();
    let framed_in = fastavro(
        &[
            "json-encode",
            &url,
            &format!("{t}-value"),
            schema_file.to_str().unwrap(),
        ],
        &rows.join("\n"),
    );
    produce_raw(&cluster, &t, &framed_in.iter().map(|h| unhex(h)).collect::<Vec<_>>()).await;
    let mut source = text_source(&brokers, &t, &fmt);
    source.open().await.unwrap();
    let got = read_texts(&mut source, 2).await.unwrap();
    assert_eq!(got.iter().map(|g| json(g)).collect::<Vec<_>>(), rows.map(json));

    // An evolved schema (a new optional field) under the same subject: its
    // records and the peer's version-1 records decode alike.
    let v2 = ORDER_SCHEMA.replace(
        r#""qty":{"type":"number","minimum":0}}"#,
        r#""qty":{"type":"number","minimum":0},"note":{"type":"string"}}"#,
    );
    assert_ne!(v2, ORDER_SCHEMA);
    let mut extra = fmt.to_vec();
    extra.extend([
        ("schema_registry_auto_register", "true"),
        ("schema_registry_value_schema", v2.as_str()),
    ]);
    let mut sink = text_sink(&brokers, &t, &extra);
    sink.open().await.unwrap();
    let first = unhex(&framed_in[0]);
    let v1_id = u32::from_be_bytes([first[1], first[2], first[3], first[4]]);
    assert_ne!(sink.encoder().unwrap().schema_id(), Some(v1_id));
    sink.on_data(vec![Text::from(r#"{"id":3,"item":"x","note":"v2"}"#.to_owned())])
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"id":3,"item":"x","note":"v2"}"#]
    );
    let _ = std::fs::remove_file(schema_file);
}

// ---------------------------------------------------------------------------
// Protobuf.

const ORDER_PROTO: &str = r#"syntax = "proto3";
package clink.test;
message Order {
  int64 id = 1;
  string item = 2;
  repeated string tags = 3;
  Status status = 4;
  Line line = 5;
  enum Status { NEW = 0; PAID = 1; }
  message Line { string sku = 1; double qty = 2; }
}
message Refund { int64 order_id = 1; string reason = 2; }
message Basket {
  map<string, int32> counts = 1;
  repeated Item items = 2;
  message Item { string sku = 1; }
}
"#;

fn order_proto_v2() -> String {
    ORDER_PROTO.replace("  Line line = 5;\n", "  Line line = 5;\n  string note = 6;\n")
}

/// A Protobuf-framed value: magic, id, the message-index bytes as given, payload.
fn framed_pb(id: u32, indexes: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = framed(id, indexes);
    v.extend_from_slice(payload);
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_round_trips_through_the_text_sink_the_broker_the_registry_and_the_text_source_and_evolves() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-proto").await;
    let sink_with = |schema: &str| {
        text_sink(
            &brokers,
            &t,
            &[
                ("format", "protobuf"),
                ("schema_registry_url", url.as_str()),
                ("schema_registry_auto_register", "true"),
                ("schema_registry_value_schema", schema),
            ],
        )
    };
    let mut sink = sink_with(ORDER_PROTO);
    sink.open().await.unwrap();
    let id = sink.encoder().unwrap().schema_id().unwrap();
    let rows = [
        r#"{"id":9000000001,"item":"tea","tags":["a","b"],"status":"PAID","line":{"sku":"s-1","qty":1.5}}"#,
        r#"{"id":2}"#,
        r#"{"id":3,"colour":"red"}"#, // no such field: refused, counted
        r#"{"id":"4","item":"caf\u00e9","status":"NEW"}"#,
    ];
    sink.on_data(rows.iter().map(|r| Text::from(r.to_string())).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(sink.refused_rows(), 1);
    sink.close().await.unwrap();

    // Framed with the id and the one-byte index [0] of the first message.
    let raw = consume_raw(&cluster, &t, 3).await;
    for v in &raw {
        assert_eq!(&v[..6], &framed(id, &[0])[..], "{v:?}");
    }

    // Version 2 adds a field; its records and version 1's decode alike.
    let mut sink = sink_with(&order_proto_v2());
    sink.open().await.unwrap();
    let id2 = sink.encoder().unwrap().schema_id().unwrap();
    assert_ne!(id, id2);
    sink.on_data(vec![Text::from(r#"{"id":5,"note":"v2"}"#.to_owned())])
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();

    let mut source = text_source(
        &brokers,
        &t,
        &[("format", "protobuf"), ("schema_registry_url", url.as_str())],
    );
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 4).await.unwrap(),
        [
            rows[0],
            r#"{"id":2,"item":"","tags":[],"status":"NEW"}"#,
            r#"{"id":4,"item":"café","tags":[],"status":"NEW"}"#,
            r#"{"id":5,"item":"","tags":[],"status":"NEW","note":"v2"}"#,
        ]
    );
    // One lookup per id.
    assert_eq!(source.decoder().unwrap().registry_requests(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upsert_and_2pc_sinks_encode_protobuf_too() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let fmt = [
        ("format", "protobuf"),
        ("schema_registry_url", url.as_str()),
        ("schema_registry_auto_register", "true"),
        ("schema_registry_value_schema", ORDER_PROTO),
    ];
    let source_fmt = [("format", "protobuf"), ("schema_registry_url", url.as_str())];

    let t = topic(&cluster, "reg-proto-upsert").await;
    let mut extra = fmt.to_vec();
    extra.push(("primary_key", "id"));
    let mut upsert = selected::upsert_sink(parse_upsert(&params(&brokers, &t, &extra)).unwrap()).unwrap();
    upsert.open().await.unwrap();
    upsert
        .on_data(vec![
            Text::from(r#"{"id":1,"item":"a","__row_kind":"insert"}"#.to_owned()),
            Text::from(r#"{"id":1,"item":7,"__row_kind":"insert"}"#.to_owned()),
            Text::from(r#"{"id":1,"__row_kind":"delete"}"#.to_owned()),
        ])
        .await
        .unwrap();
    upsert.on_barrier(1).await.unwrap();
    assert_eq!(upsert.refused_rows(), 1);
    upsert.close().await.unwrap();
    let raw = common::consume_exactly(&cluster, ConsumerConfig::default(), &t, 0, Offset::Earliest, 2).await;
    assert_eq!(raw[0].record.key.as_deref(), Some(&b"1"[..]));
    assert!(raw[1].record.value.is_none(), "the delete is a tombstone, not encoded");
    let mut source = text_source(&brokers, &t, &source_fmt);
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"id":1,"item":"a","tags":[],"status":"NEW"}"#]
    );

    let t = topic(&cluster, "reg-proto-2pc").await;
    let mut registry = Registry::new();
    install(&mut registry).unwrap();
    let mut extra = fmt.to_vec();
    let txid = format!("{t}-tx");
    extra.extend([("transactional_id", txid.as_str()), ("receipts_in_memory", "true")]);
    let mut sink = registry
        .build(
            "kafka_2pc_sink_string",
            &BuildContext::new(common::connector::connector_params(&brokers, &t, &extra)),
        )
        .unwrap()
        .into_text_sink("kafka_2pc_sink_string")
        .unwrap();
    sink.open().await.unwrap();
    sink.on_data(vec![
        Text::from(r#"{"id":7,"item":"tx","status":"PAID"}"#.to_owned()),
        Text::from(r#"{"id":8,"status":"LOST"}"#.to_owned()),
    ])
    .await
    .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.on_commit(1).await.unwrap();
    sink.close().await.unwrap();
    let mut source = text_source(&brokers, &t, &source_fmt);
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"id":7,"item":"tx","tags":[],"status":"PAID"}"#]
    );
    assert!(drain(&mut source).await.is_empty(), "the refused row was never sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_protobuf_values_take_the_decode_error_path() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-proto-bad").await;
    let id = register_directly_as(
        &url,
        &format!("{t}-value"),
        ORDER_PROTO,
        Some("PROTOBUF"),
        serde_json::json!([]),
    )
    .await;
    let good = framed_pb(id, &[0], &[0x08, 0x01]); // Order {id: 1}
    let values = vec![
        good.clone(),
        framed_pb(id, &[0x02, 0x0e], &[0x08, 0x01]), // [7]: the file has 3 messages
        framed_pb(id, &[0x04, 0x00, 0x0a], &[]),     // [0, 5]: Order has 1 nested message
        framed_pb(id, &[0x06, 0x02], &[]),           // count 3, one index: truncated
        framed_pb(id, &[0xfe, 0xff, 0xff, 0xff, 0x0f], &[]), // count i32::MAX: over the bound
        framed_pb(id, &[0], &[0x08]),                // a varint cut short
        framed_pb(id, &[0], &[0x12, 0x05, b'a']),    // a string claiming 5 bytes, 1 there
        framed_pb(id, &[0x02, 0x02], &[0x08, 0x05]), // [1]: Refund {order_id: 5}
        good,
    ];
    produce_raw(&cluster, &t, &values).await;
    let fmt = [("format", "protobuf"), ("schema_registry_url", url.as_str())];

    let mut fail = text_source(&brokers, &t, &fmt);
    fail.open().await.unwrap();
    let e = read_texts(&mut fail, 9).await.unwrap_err();
    assert!(
        matches!(
            &e,
            ConnectorError::Undecodable {
                partition: 0,
                offset: 1,
                format: "protobuf",
                ..
            }
        ) && e.to_string().contains("out of range"),
        "{e}"
    );

    let logs = common::connector::capture_logs();
    let mut extra = fmt.to_vec();
    extra.push(("decode_error", "skip"));
    let mut skip = text_source(&brokers, &t, &extra);
    skip.open().await.unwrap();
    let order = r#"{"id":1,"item":"","tags":[],"status":"NEW"}"#;
    assert_eq!(
        read_texts(&mut skip, 3).await.unwrap(),
        [order, r#"{"order_id":5,"reason":""}"#, order]
    );
    assert_eq!(skip.inner().counters().decode_errors_skipped(), 6);
    assert_eq!(resume_offset(&skip.snapshot()), "9");
    let warned = logs.contents();
    for reason in [
        "out of range",
        "truncated varint",
        "nesting bound",
        "not a clink.test.Order message",
    ] {
        assert!(
            warned.contains(reason),
            "{reason:?} missing from the warnings:\n{warned}"
        );
    }
}

/// Runs the Protobuf peer (`tests/interop_avro/protobuf_peer.py`: Google's
/// protobuf runtime and protoc) with `stdin`, bounded; its stdout lines.
fn protobuf_peer(args: &[&str], stdin: &str) -> Vec<String> {
    let python = match std::env::var("CLINK_FASTAVRO_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => panic!("CLINK_FASTAVRO_PYTHON is not set: eval \"$(tests/interop_avro/setup)\" (scripts/test does)"),
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop_avro/protobuf_peer.py");
    let mut cmd = std::process::Command::new(python);
    cmd.arg(script).args(args);
    lines_of(
        common::process::run(&mut cmd, stdin, Duration::from_secs(90)),
        "the protobuf peer",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_interop_with_googles_runtime_both_ways_through_the_broker_and_registry() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let proto_file = std::env::temp_dir().join(format!("{}.proto", common::unique_topic("order")));
    std::fs::write(&proto_file, ORDER_PROTO).unwrap();
    let proto_path = proto_file.to_str().unwrap();

    // The peer writes (registering through the REST API) the first message,
    // a nested one ([0, 0]) and the second top-level one ([1]); we read.
    let t = topic(&cluster, "reg-proto-in").await;
    let subject = format!("{t}-value");
    let mut framed_in = Vec::new();
    for (message, row) in [
        (
            "clink.test.Order",
            r#"{"id": "-9000000000", "item": "th\u00e9", "tags": ["x"], "status": "PAID", "line": {"sku": "k", "qty": 0.25}}"#,
        ),
        ("clink.test.Order.Line", r#"{"sku": "nested", "qty": 3}"#),
        ("clink.test.Refund", r#"{"order_id": "12", "reason": "late"}"#),
        // Basket's map field is its first nested type (the entry type), so
        // Item is [2, 1]: the peer's protoc and our protox must agree.
        ("clink.test.Basket.Item", r#"{"sku": "in-basket"}"#),
        ("clink.test.Basket", r#"{"counts": {"a": 1}, "items": [{"sku": "z"}]}"#),
    ] {
        framed_in.extend(protobuf_peer(&["encode", &url, &subject, proto_path, message], row));
    }
    assert_eq!(framed_in.len(), 5);
    let framed_in: Vec<Vec<u8>> = framed_in.iter().map(|h| unhex(h)).collect();
    assert_eq!(framed_in[0][5], 0, "[0] as the single byte 0");
    assert_eq!(&framed_in[1][5..8], [4, 0, 0], "[0, 0] as count 2, 0, 0");
    assert_eq!(&framed_in[2][5..7], [2, 2], "[1] as count 1, 1");
    assert_eq!(&framed_in[3][5..8], [4, 4, 2], "[2, 1] as count 2, 2, 1");
    produce_raw(&cluster, &t, &framed_in).await;
    let mut source = text_source(
        &brokers,
        &t,
        &[("format", "protobuf"), ("schema_registry_url", url.as_str())],
    );
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 5).await.unwrap(),
        [
            r#"{"id":-9000000000,"item":"thé","tags":["x"],"status":"PAID","line":{"sku":"k","qty":0.25}}"#,
            r#"{"sku":"nested","qty":3.0}"#,
            r#"{"order_id":12,"reason":"late"}"#,
            r#"{"sku":"in-basket"}"#,
            r#"{"counts":{"a":1},"items":[{"sku":"z"}]}"#,
        ]
    );

    // We write; the peer reads (fetching and compiling the schema itself).
    let t = topic(&cluster, "reg-proto-out").await;
    let mut sink = text_sink(
        &brokers,
        &t,
        &[
            ("format", "protobuf"),
            ("schema_registry_url", url.as_str()),
            ("schema_registry_auto_register", "true"),
            ("schema_registry_value_schema", ORDER_PROTO),
        ],
    );
    sink.open().await.unwrap();
    sink.on_data(vec![
        Text::from(
            r#"{"id":9000000001,"item":"tea","tags":["a","b"],"status":"PAID","line":{"sku":"s","qty":1.5}}"#
                .to_owned(),
        ),
        Text::from(r#"{"id":2}"#.to_owned()),
    ])
    .await
    .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
    let raw = consume_raw(&cluster, &t, 2).await;
    let decoded = protobuf_peer(
        &["decode", &url],
        &raw.iter().map(|v| hex(v)).collect::<Vec<_>>().join("\n"),
    );
    // Google's JSON mapping prints 64-bit integers as strings.
    assert_eq!(
        decoded.iter().map(|d| json(d)).collect::<Vec<_>>(),
        [
            json(r#"{"id":"9000000001","item":"tea","tags":["a","b"],"status":"PAID","line":{"sku":"s","qty":1.5}}"#),
            json(r#"{"id":"2","item":"","tags":[],"status":"NEW"}"#),
        ]
    );
    let _ = std::fs::remove_file(proto_file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_schema_references_are_fetched_and_imported() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-proto-ref").await;
    let money = "syntax = \"proto3\";\npackage shop;\nmessage Money { int64 cents = 1; string currency = 2; }\n";
    let money_subject = format!("{t}-money");
    register_directly_as(&url, &money_subject, money, Some("PROTOBUF"), serde_json::json!([])).await;
    let price = "syntax = \"proto3\";\npackage shop;\nimport \"shop/money.proto\";\nmessage Price { string sku = 1; shop.Money amount = 2; }\n";
    let id = register_directly_as(
        &url,
        &format!("{t}-value"),
        price,
        Some("PROTOBUF"),
        serde_json::json!([{"name": "shop/money.proto", "subject": money_subject, "version": 1}]),
    )
    .await;
    // Price {sku: "a", amount: {cents: 250, currency: "EUR"}}
    let payload = [
        0x0a, 0x01, b'a', 0x12, 0x08, 0x08, 0xfa, 0x01, 0x12, 0x03, b'E', b'U', b'R',
    ];
    produce_raw(&cluster, &t, &[framed_pb(id, &[0], &payload)]).await;
    let mut source = text_source(
        &brokers,
        &t,
        &[("format", "protobuf"), ("schema_registry_url", url.as_str())],
    );
    source.open().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"sku":"a","amount":{"cents":250,"currency":"EUR"}}"#]
    );
    // The subject's latest version, with its reference, serves a sink too.
    let mut sink = text_sink(
        &brokers,
        &t,
        &[("format", "protobuf"), ("schema_registry_url", url.as_str())],
    );
    sink.open().await.unwrap();
    assert_eq!(sink.encoder().unwrap().schema_id(), Some(id));
    sink.on_data(vec![Text::from(r#"{"sku":"b","amount":{"cents":1}}"#.to_owned())])
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
    assert_eq!(
        read_texts(&mut source, 1).await.unwrap(),
        [r#"{"sku":"b","amount":{"cents":1,"currency":""}}"#]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_produces_and_consumes_protobuf_and_skips_undecodable_values_on_request() {
    let Some(brokers) = common::brokers() else { return };
    let Some(url) = registry_url() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let t = topic(&cluster, "reg-cli-proto").await;
    let proto_file = std::env::temp_dir().join(format!("{t}.proto"));
    std::fs::write(&proto_file, ORDER_PROTO).unwrap();
    let rows = [
        r#"{"id":1,"item":"tea","tags":["a"],"status":"PAID"}"#,
        r#"{"id":2,"item":"","tags":[],"status":"NEW","line":{"sku":"x","qty":2.0}}"#,
    ];
    let cli = |args: &[&str]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
        cmd.args(args)
            .args(["--brokers", &brokers, "--topic", &t, "--value-format", "protobuf"])
            .args(["--schema-registry-url", &url]);
        cmd
    };
    let mut produce = cli(&["produce", "--value-schema-file", proto_file.to_str().unwrap()]);
    common::process::run(&mut produce, rows[0], Duration::from_secs(60));
    // An undecodable value between the two good ones.
    produce_raw(&cluster, &t, &[vec![7, 7, 7]]).await;
    let mut produce = cli(&["produce"]);
    common::process::run(&mut produce, rows[1], Duration::from_secs(60));

    // fail (the default): stops at offset 1, naming it, non-zero exit.
    let mut consume = cli(&[
        "consume",
        "--from-beginning",
        "--count",
        "2",
        "--idle-timeout-ms",
        "20000",
    ]);
    let out = common::process::run_to_exit(&mut consume, "", Duration::from_secs(60));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{t}[0] offset 1")) && stderr.contains("magic"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{}\n", rows[0]));

    // skip: the two good values, a warning naming the skipped one, a count.
    let mut consume = cli(&["consume", "--from-beginning", "--count", "2", "--decode-error", "skip"]);
    let out = common::process::run(&mut consume, "", Duration::from_secs(60));
    assert_eq!(lines_of(out.clone(), "consume"), rows);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("offset=1") && stderr.contains("magic") && stderr.contains("1 records could not be decoded"),
        "{stderr}"
    );

    // --decode-error without --value-format is refused, naming the flag.
    let mut bare = std::process::Command::new(env!("CARGO_BIN_EXE_clink-kafka"));
    bare.args([
        "consume",
        "--brokers",
        &brokers,
        "--topic",
        &t,
        "--decode-error",
        "skip",
        "--count",
        "1",
    ]);
    let out = common::process::run_to_exit(&mut bare, "", Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--value-format"));
    let _ = std::fs::remove_file(proto_file);
}
