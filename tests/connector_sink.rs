//! The sinks against the real broker: the at-least-once sink (flush on
//! barrier, counters, keys, headers, fixed partition, a delivery error), the
//! upsert sink's tombstones on a compacted topic, every factory building and
//! opening, and a canary password that never reaches logs or state.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clink_kafka::client::{Consumer, ConsumerConfig, ConsumerRecord, NewTopic, Offset, TopicPartition};
use clink_kafka::connector::options::{parse_sink, parse_source, parse_upsert, FactoryKind};
use clink_kafka::connector::selected;
use clink_kafka::connector::FACTORY_NAMES;
use clink_kafka::connector::{
    install, BuildContext, ConnectorError, KafkaMessage, Operator, Registry, Sink, Source, Text, TextKafkaSink,
};

fn params(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    common::connector::connector_params(brokers, topic, extra)
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_sink_delivers_and_flushes_on_barrier() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sink");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let options = parse_sink(FactoryKind::TextSink, &params(&brokers, &topic, &[("linger_ms", "0")])).unwrap();
    let mut sink = TextKafkaSink::new(selected::kafka_sink(options).unwrap());
    let caps = sink.capabilities();
    assert!(caps.commit_recoverable && !caps.two_phase);
    sink.open().await.unwrap();
    let batch: Vec<Text> = (0..10).map(|i| Text::from(format!("payload-{i}"))).collect();
    sink.on_data(batch).await.unwrap();
    let staged = sink.on_barrier(1).await.unwrap();
    assert!(staged.is_empty(), "an at-least-once sink stages no state");
    let counters = sink.inner().counters();
    // The barrier waited for every acknowledgement.
    assert_eq!((counters.delivered(), counters.delivery_errors()), (10, 0));
    sink.on_commit(1).await.unwrap();
    sink.close().await.unwrap();
    let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, 0, Offset::Earliest, 10).await;
    let values: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.record.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(values, (0..10).map(|i| format!("payload-{i}")).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_sink_keeps_keys_and_headers_at_the_fixed_partition() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-msg-sink");
    common::create_topic(&cluster, NewTopic::new(&topic, 3, 1)).await;
    let options = parse_sink(
        FactoryKind::MessageSink,
        &params(
            &brokers,
            &topic,
            &[("fixed_partition", "2"), ("compression", "lz4"), ("acks", "all")],
        ),
    )
    .unwrap();
    let mut sink = selected::kafka_sink(options).unwrap();
    sink.open().await.unwrap();
    let batch: Vec<KafkaMessage> = (0..5)
        .map(|i| {
            KafkaMessage::new(format!("v{i}"))
                .with_key(format!("k{i}"))
                .with_header("h", Some(Bytes::from(format!("x{i}"))))
        })
        .collect();
    sink.on_data(batch).await.unwrap();
    sink.flush().await.unwrap();
    assert_eq!(sink.counters().delivered(), 5);
    sink.close().await.unwrap();
    let got = common::consume_exactly(&cluster, ConsumerConfig::default(), &topic, 2, Offset::Earliest, 5).await;
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.record.key.as_deref(), Some(format!("k{i}").as_bytes()));
        assert_eq!(r.record.headers.len(), 1);
        assert_eq!(&r.record.headers[0].key[..], b"h");
        assert_eq!(r.record.headers[0].value.as_deref(), Some(format!("x{i}").as_bytes()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_cannot_be_delivered_fails_the_call_and_counts() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sink-err");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let options = parse_sink(
        FactoryKind::MessageSink,
        &params(&brokers, &topic, &[("fixed_partition", "5")]),
    )
    .unwrap();
    let mut sink = selected::kafka_sink(options).unwrap();
    sink.open().await.unwrap();
    let e = sink.on_data(vec![KafkaMessage::new("x")]).await.unwrap_err();
    assert!(e.to_string().contains("partition 5"), "{e}");
    assert_eq!(sink.counters().delivery_errors(), 1);
    assert_eq!(sink.counters().delivered(), 0);
    sink.close().await.unwrap();
}

/// Every record of `topic[0]` from the log start to the end.
async fn read_all(cluster: &clink_kafka::client::Cluster, topic: &str) -> Vec<ConsumerRecord> {
    let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
    consumer.assign(&[TopicPartition::new(topic, 0)]);
    let end = consumer.list_offset(topic, 0, Offset::Latest).await.unwrap();
    consumer.seek(topic, 0, Offset::Earliest).await.unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while consumer.position(topic, 0).unwrap_or(0) < end {
        assert!(Instant::now() < deadline, "could not read {topic} to its end {end}");
        out.extend(consumer.poll(Duration::from_millis(500)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsert_tombstones_delete_keys_on_a_compacted_topic() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-upsert");
    common::create_topic(
        &cluster,
        NewTopic::new(&topic, 1, 1)
            .with_config("cleanup.policy", "compact")
            .with_config("segment.ms", "100")
            .with_config("min.cleanable.dirty.ratio", "0.001")
            .with_config("min.compaction.lag.ms", "0")
            .with_config("delete.retention.ms", "86400000"),
    )
    .await;
    let options = parse_upsert(&params(&brokers, &topic, &[("primary_key", "user_id")])).unwrap();
    let mut sink = selected::upsert_sink(options).unwrap();
    sink.open().await.unwrap();
    let rows = [
        r#"{"user_id":1,"n":1}"#,
        r#"{"user_id":2,"n":1}"#,
        r#"{"user_id":3,"n":1}"#,
        r#"{"user_id":1,"n":1,"__row_kind":"update_before"}"#,
        r#"{"user_id":1,"n":2,"__row_kind":"update_after"}"#,
        r#"{"user_id":2,"n":1,"__row_kind":"delete"}"#,
        r#"[1,2]"#,
        r#"{"n":5}"#,
    ];
    sink.on_data(rows.iter().map(|r| Text::from(*r)).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    assert_eq!(sink.skipped(), 2, "the array and the keyless row");
    assert_eq!(sink.dropped_update_before(), 1);
    assert_eq!(sink.counters().delivered(), 5);

    // Before compaction: the keyed tombstone is there, after key 2's value.
    let raw = read_all(&cluster, &topic).await;
    let keyed: Vec<(String, Option<String>)> = raw
        .iter()
        .map(|r| {
            (
                String::from_utf8(r.record.key.clone().unwrap().to_vec()).unwrap(),
                r.record.value.as_ref().map(|v| String::from_utf8(v.to_vec()).unwrap()),
            )
        })
        .collect();
    assert_eq!(
        keyed,
        [
            ("1".to_owned(), Some(r#"{"user_id":1,"n":1}"#.to_owned())),
            ("2".to_owned(), Some(r#"{"user_id":2,"n":1}"#.to_owned())),
            ("3".to_owned(), Some(r#"{"user_id":3,"n":1}"#.to_owned())),
            ("1".to_owned(), Some(r#"{"user_id":1,"n":2}"#.to_owned())),
            ("2".to_owned(), None),
        ]
    );

    // Roll segments (appends after segment.ms) until the log cleaner has
    // compacted: key 2 has no value left, key 1 only its latest.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut filler = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        filler += 1;
        sink.on_data(vec![Text::from(format!(r#"{{"user_id":"filler-{filler}"}}"#))])
            .await
            .unwrap();
        sink.flush().await.unwrap();
        let mut by_key: BTreeMap<String, Vec<Option<Bytes>>> = BTreeMap::new();
        for r in read_all(&cluster, &topic).await {
            let key = String::from_utf8(r.record.key.unwrap().to_vec()).unwrap();
            by_key.entry(key).or_default().push(r.record.value);
        }
        let key2_deleted = by_key.get("2").is_none_or(|v| v.iter().all(Option::is_none));
        let key1_latest = by_key.get("1").map(Vec::len) == Some(1);
        if key2_deleted && key1_latest {
            eprintln!("compacted after {filler} segment rolls: {by_key:?}");
            assert_eq!(by_key["1"][0].as_deref(), Some(&br#"{"user_id":1,"n":2}"#[..]));
            assert_eq!(by_key["3"].len(), 1);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not compact {topic} within 120 s: {by_key:?}"
        );
    }
    sink.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_factory_name_builds_and_opens() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-factories");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    let mut registry = Registry::new();
    install(&mut registry).unwrap();
    for name in FACTORY_NAMES {
        let mut extra: Vec<(&str, &str)> = vec![];
        if *name == "kafka_upsert_sink_string" {
            extra.push(("primary_key", "id"));
        }
        let txn_id = format!("{topic}-factories");
        if *name == "kafka_2pc_sink_string" {
            extra.push(("transactional_id", &txn_id));
        }
        let ctx = BuildContext::new(common::connector::connector_params(&brokers, &topic, &extra))
            .with_subtask(1, 2)
            .with_checkpoint(std::env::temp_dir().join(format!("{topic}-checkpoints")), "factories");
        let op = registry.build(name, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
        match op {
            Operator::MessageSource(mut s) => {
                s.open().await.unwrap();
                assert_eq!(s.snapshot().len(), 1, "{name}: subtask 1 of 2 owns partition 1");
                s.close().await.unwrap();
            }
            Operator::TextSource(mut s) => {
                s.open().await.unwrap();
                assert_eq!(s.snapshot().len(), 1, "{name}");
                s.close().await.unwrap();
            }
            Operator::MessageSink(mut s) => {
                s.open().await.unwrap();
                s.on_data(vec![KafkaMessage::new(name.to_string())]).await.unwrap();
                s.on_barrier(1).await.unwrap();
                s.close().await.unwrap();
            }
            Operator::TextSink(mut s) => {
                s.open().await.unwrap();
                s.on_data(vec![Text::from(format!(r#"{{"id":"{name}"}}"#))])
                    .await
                    .unwrap();
                s.on_barrier(1).await.unwrap();
                s.close().await.unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_password_never_reaches_logs_or_state() {
    let (Some(brokers), Some(sasl)) = (common::brokers(), common::sasl()) else {
        return;
    };
    let logs = common::connector::capture_logs();
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-canary");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    // The real password is the canary: it authenticates, and must not leak.
    let canary = sasl.password.clone();
    let security = |password: &str| -> Vec<(String, String)> {
        vec![
            ("security_protocol".into(), "sasl_plaintext".into()),
            ("sasl_mechanism".into(), common::connector::sasl_mechanism().into()),
            ("sasl_username".into(), sasl.username.clone()),
            ("sasl_password".into(), password.to_owned()),
        ]
    };
    let mut p = params(&sasl.brokers, &topic, &[("linger_ms", "0")]);
    p.extend(security(&canary));
    let sink_options = parse_sink(FactoryKind::MessageSink, &p).unwrap();
    assert!(!format!("{sink_options:?}").contains(&canary));
    let mut sink = selected::kafka_sink(sink_options).unwrap();
    assert!(!format!("{sink:?}").contains(&canary));
    sink.open().await.unwrap();
    sink.on_data((0..3).map(|i| KafkaMessage::new(format!("c{i}"))).collect())
        .await
        .unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();

    let mut p = params(&sasl.brokers, &topic, &[]);
    p.extend(security(&canary));
    let ctx = BuildContext::new(p.clone());
    assert!(!format!("{ctx:?}").contains(&canary));
    let source_options = parse_source(FactoryKind::MessageSource, &p, 0, 1).unwrap();
    assert!(!format!("{source_options:?}").contains(&canary));
    let mut source = selected::kafka_source(source_options).unwrap();
    source.open().await.unwrap();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while got < 3 {
        assert!(Instant::now() < deadline, "records did not arrive");
        let mut batches = Vec::new();
        got += source.produce(&mut batches).await.unwrap();
    }
    let state = source.snapshot();
    source.close().await.unwrap();
    for row in &state {
        assert!(!row.key.contains(&canary));
        assert!(!String::from_utf8_lossy(&row.value).contains(&canary));
    }

    // A wrong password: the failure names the mechanism, never the password.
    let wrong = "canary-7f3a-wrong-pw";
    let mut p = params(&sasl.brokers, &topic, &[]);
    p.extend(security(wrong));
    let mut bad = selected::kafka_source(parse_source(FactoryKind::MessageSource, &p, 0, 1).unwrap()).unwrap();
    let e = bad.open().await.unwrap_err();
    assert!(
        matches!(e, ConnectorError::Client(_) | ConnectorError::Rdkafka { .. }),
        "{e}"
    );
    assert!(
        !e.to_string().contains(wrong) && !format!("{e:?}").contains(wrong),
        "{e}"
    );

    let text = logs.contents();
    assert!(text.contains("kafka source assignment"), "logs were captured: {text}");
    // The assignment line names the subtask, the partition, its start and origin.
    let line = text
        .lines()
        .find(|l| l.contains("kafka source assignment") && l.contains(&topic))
        .expect("the assignment line");
    assert!(
        line.contains("subtask=0/1") && line.contains("partitions=0@0(earliest)"),
        "{line}"
    );
    assert!(!text.contains(&canary), "the password is in the logs");
    assert!(!text.contains(wrong), "the wrong password is in the logs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_the_broker_refuses_fails_the_barrier() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sink-refused");
    common::create_topic(
        &cluster,
        NewTopic::new(&topic, 1, 1).with_config("max.message.bytes", "2000"),
    )
    .await;
    let options = parse_sink(
        FactoryKind::MessageSink,
        &params(&brokers, &topic, &[("linger_ms", "0")]),
    )
    .unwrap();
    let mut sink = selected::kafka_sink(options).unwrap();
    sink.open().await.unwrap();
    // Queued fine (under the producer's own limit), refused by the broker.
    sink.on_data(vec![KafkaMessage::new(vec![b'x'; 10_000])]).await.unwrap();
    let e = sink.on_barrier(1).await.unwrap_err();
    match &e {
        ConnectorError::DeliveryFailed { failed, first, .. } => {
            assert_eq!(*failed, 1);
            assert!(
                first.contains("MESSAGE_TOO_LARGE") || first.contains("RECORD_LIST_TOO_LARGE"),
                "{first}"
            );
        }
        other => panic!("expected DeliveryFailed, got {other}"),
    }
    assert_eq!(sink.counters().delivery_errors(), 1);
    assert_eq!(sink.counters().delivered(), 0);
    // Reported once: the next barrier with nothing new passes.
    sink.on_barrier(2).await.unwrap();
    sink.close().await.unwrap();
}

/// `produce_timeout` bounds handing a record to the producer (here: the
/// topic does not exist and `kafka.allow.auto.create.topics=false`, so
/// its metadata never comes), `flush_timeout` bounds a barrier's wait for
/// acknowledgements (here: a proxy holds every Produce answer 5 s). Each
/// failure names
/// its option. On the rdkafka backend a record is queued at once, so the
/// first case fails at the flush instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_timeout_and_flush_timeout_bound_their_waits_and_name_themselves() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let missing = common::unique_topic("conn-sink-missing");
    let options = parse_sink(
        FactoryKind::MessageSink,
        &params(
            &brokers,
            &missing,
            &[
                ("produce_timeout", "700ms"),
                ("flush_timeout", "700ms"),
                ("kafka.allow.auto.create.topics", "false"),
            ],
        ),
    )
    .unwrap();
    let mut sink = selected::kafka_sink(options).unwrap();
    sink.open().await.unwrap();
    let sent = sink.on_data(vec![KafkaMessage::new(&b"x"[..])]).await;
    let e = match sent {
        Err(e) => e,
        Ok(()) => sink.on_barrier(1).await.unwrap_err(),
    };
    let want = if common::connector::on_rdkafka() {
        "flush_timeout"
    } else {
        "produce_timeout"
    };
    assert!(e.to_string().contains(want), "{e}");
    let _ = sink.close().await;

    let topic = common::unique_topic("conn-sink-held");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    // Every Produce answer held 5 s by a proxy in front of the broker.
    let proxy = common::proxy::Proxy::start(
        brokers.split(',').next().unwrap().to_owned(),
        common::proxy::ProxyOptions {
            hold_produce_responses: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .await;
    let options = parse_sink(
        FactoryKind::MessageSink,
        &params(
            &proxy.addr.to_string(),
            &topic,
            &[("flush_timeout", "700ms"), ("linger_ms", "0")],
        ),
    )
    .unwrap();
    let mut sink = selected::kafka_sink(options).unwrap();
    sink.open().await.unwrap();
    sink.on_data(vec![KafkaMessage::new(&b"y"[..])]).await.unwrap();
    let e = sink.on_barrier(1).await.unwrap_err();
    assert!(e.to_string().contains("flush_timeout"), "{e}");
    let _ = sink.close().await;
}
