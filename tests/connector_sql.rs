//! The SQL table front: the spec's two CREATE TABLE examples build the
//! right factories, the delivery mode selects the factory (exactly-once is a
//! clear "not yet available"), quoted dotted keys reach the passthrough, and
//! rows go through the JSON bridge to the broker and back.

mod common;

use std::time::{Duration, Instant};

use clink_kafka::client::NewTopic;
use clink_kafka::connector::sql::{
    build_table, json_to_row, parse_create_table, plan, row_to_json, Row, SqlType, SqlValue, TableMode, TableRole,
};
use clink_kafka::connector::upsert::RowKind;
use clink_kafka::connector::{install, ConnectorError, Operator, Registry};

const CLICKS: &str = "CREATE TABLE clicks (
  user_id BIGINT,
  url     STRING
) WITH (
  connector = 'kafka',
  format    = 'json',
  brokers   = 'localhost:9092',
  topic     = 'clicks',
  group_id  = 'analytics',
  auto_offset_reset = 'earliest'
);";

const CLICK_COUNTS: &str = "CREATE TABLE click_counts (
  user_id BIGINT,
  n       BIGINT
) WITH (
  connector   = 'kafka',
  format      = 'json',
  brokers     = 'localhost:9092',
  topic       = 'click-counts',
  mode        = 'upsert',
  primary_key = 'user_id'
);";

fn registry() -> Registry {
    let mut r = Registry::new();
    install(&mut r).unwrap();
    r
}

#[test]
fn the_spec_examples_build_the_right_factories() {
    let r = registry();
    let clicks = parse_create_table(CLICKS).unwrap();
    assert_eq!(clicks.name, "clicks");
    assert_eq!(clicks.columns.len(), 2);
    assert_eq!(clicks.columns[0].data_type, SqlType::Integer);
    assert_eq!(clicks.columns[1].data_type, SqlType::String);
    let (planned, op) = build_table(&r, &clicks, TableRole::Source, 0, 1).unwrap();
    assert_eq!(planned.factory, "kafka_source_string");
    assert_eq!(planned.mode, TableMode::Append);
    assert_eq!(planned.context.param("group_id"), Some("analytics"));
    assert_eq!(planned.context.param("connector"), None, "planner options are consumed");
    assert!(matches!(op, Operator::TextSource(_)), "{op:?}");
    let (planned, op) = build_table(&r, &clicks, TableRole::Sink, 0, 1).unwrap();
    assert_eq!(planned.factory, "kafka_sink_string");
    assert_eq!(
        planned.context.param("group_id"),
        None,
        "source-only options stay with the source"
    );
    assert!(matches!(op, Operator::TextSink(_)), "{op:?}");

    let counts = parse_create_table(CLICK_COUNTS).unwrap();
    let (planned, op) = build_table(&r, &counts, TableRole::Sink, 0, 1).unwrap();
    assert_eq!(planned.factory, "kafka_upsert_sink_string");
    assert_eq!(planned.mode, TableMode::Upsert);
    assert_eq!(planned.context.param("primary_key"), Some("user_id"));
    assert!(matches!(op, Operator::TextSink(_)), "{op:?}");
    // Reading an upsert table is the plain string source.
    let (planned, _) = build_table(&r, &counts, TableRole::Source, 1, 2).unwrap();
    assert_eq!(planned.factory, "kafka_source_string");
    assert_eq!(planned.context.subtask_index(), 1);
    assert_eq!(planned.context.parallelism(), 2);
}

#[test]
fn exactly_once_plans_the_2pc_sink_and_modes_are_checked() {
    let sql = "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
               mode = 'exactly_once', transactional_id = 'tx', receipts_in_memory = 'true')";
    let table = parse_create_table(sql).unwrap();
    let (planned, op) = build_table(&registry(), &table, TableRole::Sink, 1, 3).unwrap();
    assert_eq!(planned.factory, "kafka_2pc_sink_string");
    assert_eq!(planned.context.param("transactional_id"), Some("tx"));
    let Operator::TextSink(sink) = op else {
        panic!("an exactly-once sink table is a text sink: {op:?}")
    };
    let caps = sink.capabilities();
    assert!(caps.two_phase && !caps.commit_recoverable, "{caps:?}");
    // Without a transactional id the factory names the missing option.
    let no_id = parse_create_table(
        "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't', mode = 'exactly_once')",
    )
    .unwrap();
    let e = build_table(&registry(), &no_id, TableRole::Sink, 0, 1).unwrap_err();
    assert!(
        matches!(
            e,
            ConnectorError::MissingOption {
                option: "transactional_id",
                ..
            }
        ),
        "{e}"
    );
    // Reading it reads committed data only.
    let planned = plan(&table, TableRole::Source, 0, 1).unwrap();
    assert_eq!(planned.context.param("kafka.isolation.level"), Some("read_committed"));
    assert_eq!(planned.context.param("transactional_id"), None);
    registry().build(planned.factory, &planned.context).unwrap();

    let bogus = parse_create_table("CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', mode = 'sometimes')").unwrap();
    let e = plan(&bogus, TableRole::Sink, 0, 1).unwrap_err();
    assert_eq!(e.option(), Some("mode"), "{e}");
    let jdbc = parse_create_table("CREATE TABLE t (a BIGINT) WITH (connector = 'jdbc')").unwrap();
    assert_eq!(
        plan(&jdbc, TableRole::Sink, 0, 1).unwrap_err().option(),
        Some("connector")
    );
    let none = parse_create_table("CREATE TABLE t (a BIGINT)").unwrap();
    assert_eq!(
        plan(&none, TableRole::Sink, 0, 1).unwrap_err().option(),
        Some("connector")
    );
    assert!(parse_create_table("SELECT 1").is_err());
    assert!(parse_create_table("CREATE TABLE t (a UUID) WITH (connector = 'kafka')").is_err());
}

#[test]
fn quoted_dotted_keys_reach_the_passthrough() {
    let r = registry();
    let sql = r#"CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
                 "kafka.fetch.wait.max.ms" = '50', "kafka.client.rack" = 'eu-central-1a')"#;
    let table = parse_create_table(sql).unwrap();
    assert_eq!(table.options["kafka.client.rack"], "eu-central-1a");
    // The rack reaches the consumer (KIP-392): it builds, and an empty one
    // is refused by name.
    build_table(&r, &table, TableRole::Source, 0, 1).expect("kafka.client.rack is the consumer's rack");
    let sql = r#"CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
                 "kafka.client.rack" = ' ')"#;
    let e = build_table(&r, &parse_create_table(sql).unwrap(), TableRole::Source, 0, 1).unwrap_err();
    assert!(
        matches!(&e, ConnectorError::InvalidOption { option, .. } if option == "kafka.client.rack"),
        "{e}"
    );
    let sql = r#"CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
                 "kafka.fetch.wait.max.ms" = '50', "kafka.isolation.level" = 'read_committed')"#;
    let table = parse_create_table(sql).unwrap();
    build_table(&r, &table, TableRole::Source, 0, 1).unwrap();
    // A single-quoted key is a string literal, refused with the fix.
    let e = parse_create_table("CREATE TABLE t (a BIGINT) WITH ('kafka.client.rack' = 'x')").unwrap_err();
    assert!(e.to_string().contains("double quotes"), "{e}");
    // Options go to the factory's validation: a bad value names itself.
    let sql = "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't', linger_ms = -3)";
    let e = build_table(&r, &parse_create_table(sql).unwrap(), TableRole::Sink, 0, 1).unwrap_err();
    assert_eq!(e.option(), Some("linger_ms"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_go_through_the_json_bridge_to_the_broker_and_back() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sql");
    common::create_topic(&cluster, NewTopic::new(&topic, 2, 1)).await;
    let sql = format!(
        "CREATE TABLE clicks (user_id BIGINT, url STRING, score DOUBLE, bot BOOLEAN) WITH (
           connector = 'kafka', format = 'json', brokers = '{brokers}', topic = '{topic}',
           group_id = '{topic}-g', auto_offset_reset = 'earliest')"
    );
    let table = parse_create_table(&sql).unwrap();
    let r = registry();
    let rows: Vec<Row> = (0..6)
        .map(|i| {
            Row::insert(vec![
                SqlValue::Integer(i),
                SqlValue::String(format!("/page/{i}?q=\"x\"")),
                SqlValue::Double(i as f64 / 2.0),
                if i % 2 == 0 {
                    SqlValue::Boolean(false)
                } else {
                    SqlValue::Null
                },
            ])
        })
        .collect();
    let (_, sink) = build_table(&r, &table, TableRole::Sink, 0, 1).unwrap();
    let mut sink = sink.into_text_sink("kafka_sink_string").unwrap();
    sink.open().await.unwrap();
    let texts = rows
        .iter()
        .map(|row| row_to_json(&table.columns, row).unwrap())
        .collect();
    sink.on_data(texts).await.unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();

    let (_, source) = build_table(&r, &table, TableRole::Source, 0, 1).unwrap();
    let mut source = source.into_text_source("kafka_source_string").unwrap();
    source.open().await.unwrap();
    let mut back = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    for _ in 0..1000 {
        if back.len() >= rows.len() {
            break;
        }
        assert!(Instant::now() < deadline, "only {} rows came back", back.len());
        let mut batches = Vec::new();
        source.produce(&mut batches).await.unwrap();
        for text in batches.into_iter().flatten() {
            back.push(json_to_row(&table.columns, &text).unwrap());
        }
    }
    source.close().await.unwrap();
    back.sort_by_key(|row| match row.values[0] {
        SqlValue::Integer(i) => i,
        _ => -1,
    });
    assert_eq!(back, rows);
    assert!(back.iter().all(|row| row.kind == RowKind::Insert));
}

/// `backend` in `WITH` reaches every factory the planner picks: the
/// selected one builds (rdkafka in the parity pass), an unknown one names
/// the allowed values, and rdkafka without the feature names the feature.
#[test]
fn backend_in_with_reaches_the_factory() {
    let r = registry();
    let sql = |backend: &str, mode: &str| {
        let extra = match mode {
            "upsert" => ", primary_key = 'user_id'",
            "exactly_once" => ", transactional_id = 'tx', receipts_in_memory = 'true'",
            _ => "",
        };
        format!(
            "CREATE TABLE t (user_id BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't', \
             backend = '{backend}', mode = '{mode}'{extra})"
        )
    };
    for mode in ["append", "upsert", "exactly_once"] {
        for role in [TableRole::Source, TableRole::Sink] {
            if role == TableRole::Source && mode != "append" {
                continue;
            }
            let table = parse_create_table(&sql(common::connector::backend(), mode)).unwrap();
            let (planned, _) = build_table(&r, &table, role, 0, 1).unwrap_or_else(|e| panic!("{mode} {role:?}: {e}"));
            assert_eq!(planned.context.param("backend"), Some(common::connector::backend()));
            let table = parse_create_table(&sql("librdkafka", mode)).unwrap();
            let e = build_table(&r, &table, role, 0, 1).map(drop).unwrap_err();
            assert!(e.to_string().contains("one of native, rdkafka"), "{e}");
            if !cfg!(feature = "rdkafka") {
                let table = parse_create_table(&sql("rdkafka", mode)).unwrap();
                let e = build_table(&r, &table, role, 0, 1).map(drop).unwrap_err();
                assert!(matches!(e, ConnectorError::MissingFeature { .. }), "{e}");
            }
        }
    }
}
