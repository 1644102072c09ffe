//! The SQL table front: the spec's two CREATE TABLE examples build the
//! right factories, the delivery mode selects the factory (exactly-once is a
//! clear "not yet available"), quoted dotted keys reach the passthrough, and
//! rows go through the JSON bridge to the broker and back. Every table is
//! declared with `backend = '…'` from `CLINK_KAFKA_TEST_BACKEND`
//! ([`on_backend`]), so the parity pass plans, builds and runs each one on
//! librdkafka.

mod common;

use std::time::{Duration, Instant};

use clink_kafka::client::NewTopic;
use clink_kafka::connector::sql::{
    build_table, json_to_row, parse_create_table, plan, row_to_json, Row, SqlType, SqlValue, TableMode, TableRole,
};
use clink_kafka::connector::RowKind;
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

/// `sql` on the backend the suite runs on (`CLINK_KAFKA_TEST_BACKEND`):
/// `backend = '…'` first in its `WITH` list.
fn on_backend(sql: &str) -> String {
    assert!(sql.contains("WITH ("), "{sql}");
    sql.replacen(
        "WITH (",
        &format!("WITH (backend = '{}', ", common::connector::backend()),
        1,
    )
}

/// Parses `sql` on the suite's backend ([`on_backend`]).
fn parse_on_backend(sql: &str) -> TableDefinition {
    parse_create_table(&on_backend(sql)).unwrap()
}

/// The planned context carries the suite's backend.
fn assert_backend(context: &clink_kafka::connector::BuildContext) {
    assert_eq!(context.param("backend"), Some(common::connector::backend()));
}

fn registry() -> Registry {
    let mut r = Registry::new();
    install(&mut r).unwrap();
    r
}

#[test]
fn the_spec_examples_build_the_right_factories() {
    let r = registry();
    let clicks = parse_on_backend(CLICKS);
    assert_eq!(clicks.name, "clicks");
    assert_eq!(clicks.columns.len(), 2);
    assert_eq!(clicks.columns[0].data_type, SqlType::Integer);
    assert_eq!(clicks.columns[1].data_type, SqlType::String);
    let (planned, op) = build_table(&r, &clicks, TableRole::Source, 0, 1).unwrap();
    assert_eq!(planned.factory, "kafka_source_string");
    assert_eq!(planned.mode, TableMode::Append);
    assert_eq!(planned.context.param("group_id"), Some("analytics"));
    assert_eq!(planned.context.param("connector"), None, "planner options are consumed");
    assert_backend(&planned.context);
    assert!(matches!(op, Operator::TextSource(_)), "{op:?}");
    let (planned, op) = build_table(&r, &clicks, TableRole::Sink, 0, 1).unwrap();
    assert_eq!(planned.factory, "kafka_sink_string");
    assert_backend(&planned.context);
    assert_eq!(
        planned.context.param("group_id"),
        None,
        "source-only options stay with the source"
    );
    assert!(matches!(op, Operator::TextSink(_)), "{op:?}");

    let counts = parse_on_backend(CLICK_COUNTS);
    let (planned, op) = build_table(&r, &counts, TableRole::Sink, 0, 1).unwrap();
    assert_eq!(planned.factory, "kafka_upsert_sink_string");
    assert_backend(&planned.context);
    assert_eq!(planned.mode, TableMode::Upsert);
    assert_eq!(planned.context.param("primary_key"), Some("user_id"));
    assert!(matches!(op, Operator::TextSink(_)), "{op:?}");
    // Reading an upsert table is the plain string source.
    let (planned, _) = build_table(&r, &counts, TableRole::Source, 1, 2).unwrap();
    assert_eq!(planned.factory, "kafka_source_string");
    assert_backend(&planned.context);
    assert_eq!(planned.context.subtask_index(), 1);
    assert_eq!(planned.context.parallelism(), 2);
}

#[test]
fn exactly_once_plans_the_2pc_sink_and_modes_are_checked() {
    let sql = "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
               mode = 'exactly_once', transactional_id = 'tx', receipts_in_memory = 'true')";
    let table = parse_on_backend(sql);
    let (planned, op) = build_table(&registry(), &table, TableRole::Sink, 1, 3).unwrap();
    assert_eq!(planned.factory, "kafka_2pc_sink_string");
    assert_backend(&planned.context);
    assert_eq!(planned.context.param("transactional_id"), Some("tx"));
    let Operator::TextSink(sink) = op else {
        panic!("an exactly-once sink table is a text sink: {op:?}")
    };
    let caps = sink.capabilities();
    assert!(caps.two_phase && !caps.commit_recoverable, "{caps:?}");
    // Without a transactional id the factory names the missing option.
    let no_id = parse_on_backend(
        "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't', mode = 'exactly_once')",
    );
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
    assert_backend(&planned.context);
    registry().build(planned.factory, &planned.context).unwrap();

    let bogus = parse_on_backend("CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', mode = 'sometimes')");
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
    let table = parse_on_backend(sql);
    assert_eq!(table.options["kafka.client.rack"], "eu-central-1a");
    // The rack reaches the consumer (KIP-392): it builds, and an empty one
    // is refused by name.
    let (planned, _) =
        build_table(&r, &table, TableRole::Source, 0, 1).expect("kafka.client.rack is the consumer's rack");
    assert_backend(&planned.context);
    let sql = r#"CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
                 "kafka.client.rack" = ' ')"#;
    let e = build_table(&r, &parse_on_backend(sql), TableRole::Source, 0, 1).unwrap_err();
    assert!(
        matches!(&e, ConnectorError::InvalidOption { option, .. } if option == "kafka.client.rack"),
        "{e}"
    );
    let sql = r#"CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't',
                 "kafka.fetch.wait.max.ms" = '50', "kafka.isolation.level" = 'read_committed')"#;
    let table = parse_on_backend(sql);
    let (planned, _) = build_table(&r, &table, TableRole::Source, 0, 1).unwrap();
    assert_backend(&planned.context);
    // A single-quoted key is a string literal, refused with the fix.
    let e = parse_create_table("CREATE TABLE t (a BIGINT) WITH ('kafka.client.rack' = 'x')").unwrap_err();
    assert!(e.to_string().contains("double quotes"), "{e}");
    // Options go to the factory's validation: a bad value names itself.
    let sql = "CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', brokers = 'h:1', topic = 't', linger_ms = -3)";
    let e = build_table(&r, &parse_on_backend(sql), TableRole::Sink, 0, 1).unwrap_err();
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
    let table = parse_on_backend(&sql);
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
    let (planned, sink) = build_table(&r, &table, TableRole::Sink, 0, 1).unwrap();
    assert_backend(&planned.context);
    let mut sink = sink.into_text_sink("kafka_sink_string").unwrap();
    sink.open().await.unwrap();
    let texts = rows
        .iter()
        .map(|row| row_to_json(&table.columns, row).unwrap())
        .collect();
    sink.on_data(texts).await.unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();

    let (planned, source) = build_table(&r, &table, TableRole::Source, 0, 1).unwrap();
    assert_backend(&planned.context);
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

// ---------------------------------------------------------------------------
// Issue 15: the SQL types and the columnar bridge, through the broker.

use clink_kafka::connector::columnar::BridgeStats;
use clink_kafka::connector::sql::{build_table_source, JsonBridge, TableDefinition};
use clink_kafka::connector::table_source::TableBatch;
use clink_kafka::connector::{Source, Text};

/// Writes `texts` through the table's planned sink (`kafka_sink_string`).
async fn write_texts(table: &TableDefinition, texts: Vec<Text>) {
    let (planned, sink) = build_table(&registry(), table, TableRole::Sink, 0, 1).unwrap();
    assert_backend(&planned.context);
    let mut sink = sink.into_text_sink("kafka_sink_string").unwrap();
    sink.open().await.unwrap();
    sink.on_data(texts).await.unwrap();
    sink.on_barrier(1).await.unwrap();
    sink.close().await.unwrap();
}

/// Reads `want` rows through the table's planned source with the bridge
/// `columnar_decode` selects; returns the rows, the batch shapes and the
/// bridge's counts, or the first error.
async fn read_rows(
    table: &TableDefinition,
    want: usize,
) -> Result<(Vec<Row>, Vec<&'static str>, Option<BridgeStats>, u64), ConnectorError> {
    let (planned, mut source) = build_table_source(table, 0, 1)?;
    assert_eq!(planned.factory, "kafka_source_string");
    assert_backend(&planned.context);
    assert_eq!(
        source.text_source().inner().options().backend.name(),
        common::connector::backend()
    );
    source.open().await?;
    let mut rows = Vec::new();
    let mut shapes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut result = Ok(());
    for _ in 0..1000 {
        if rows.len() >= want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {want} rows came back",
            rows.len()
        );
        let mut batches: Vec<Vec<TableBatch>> = Vec::new();
        if let Err(e) = source.produce(&mut batches).await {
            result = Err(e);
            break;
        }
        for batch in batches.into_iter().flatten() {
            shapes.push(match batch {
                TableBatch::Rows(_) => "rows",
                TableBatch::Columns(_) => "columns",
            });
            rows.extend(batch.into_rows());
        }
    }
    let stats = source.bridge_stats();
    let skipped = source.text_source().inner().counters().decode_errors_skipped();
    source.close().await.unwrap();
    result.map(|()| (rows, shapes, stats, skipped))
}

fn table_sql(name: &str, columns: &str, brokers: &str, topic: &str, extra: &str) -> TableDefinition {
    parse_on_backend(&format!(
        "CREATE TABLE {name} ({columns}) WITH (connector = 'kafka', format = 'json', brokers = '{brokers}', \
         topic = '{topic}', auto_offset_reset = 'earliest'{extra})"
    ))
}

const ALL_TYPES: &str = "id BIGINT, price DECIMAL(18, 3), at TIMESTAMP(3) WITH TIME ZONE, local TIMESTAMP(6), \
                         day DATE, t TIME, raw BYTES, tags ARRAY<BIGINT>, \
                         addr ROW(city STRING, zip DECIMAL(5, 0), seen ARRAY<TIMESTAMP WITH TIME ZONE>), name STRING";
/// The capable subset of the same records (the columnar bridge's types).
const CAPABLE: &str = "id BIGINT, at TIMESTAMP WITH TIME ZONE, local TIMESTAMP, day DATE, t TIME, raw BYTES, \
                       name STRING";

fn all_types_row(i: i64) -> Row {
    let nullable = |v: SqlValue| if i % 3 == 2 { SqlValue::Null } else { v };
    Row::insert(vec![
        SqlValue::Integer(i),
        nullable(SqlValue::Decimal {
            unscaled: 123_456_789_012_345 * if i % 2 == 0 { 1 } else { -1 } + i as i128,
            scale: 3,
        }),
        SqlValue::Timestamp(1_709_251_198_123_000 + i * 1_000),
        nullable(SqlValue::Timestamp(-62_135_596_800_000_000 + i)),
        SqlValue::Date(19_782 - i as i32),
        nullable(SqlValue::Time(49_500_000_001 + i)),
        SqlValue::Bytes((0..i as u8 * 3).map(|b| b.wrapping_mul(97)).collect()),
        nullable(SqlValue::Array(vec![
            SqlValue::Integer(i),
            SqlValue::Null,
            SqlValue::Integer(-i),
        ])),
        nullable(SqlValue::Row(vec![
            SqlValue::String(format!("Zürich \"{i}\"")),
            SqlValue::Decimal {
                unscaled: 8000 + i as i128,
                scale: 0,
            },
            SqlValue::Array(vec![SqlValue::Timestamp(i * 1_000_000)]),
        ])),
        SqlValue::String(format!("n{i}")),
    ])
}

/// Every mapped type goes from rows to JSON through the broker and back to
/// the same rows, under both settings of `columnar_decode`; the capable
/// subset is decoded column-wise and equals the row decode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sql_type_round_trips_through_the_broker_under_both_bridges() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sql-types");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let table = table_sql("everything", ALL_TYPES, &brokers, &topic, "");
    assert!(
        matches!(&table.columns[8].data_type, SqlType::Row(fields) if fields.len() == 3),
        "{:?}",
        table.columns[8]
    );
    let rows: Vec<Row> = (0..30).map(all_types_row).collect();
    let texts = rows.iter().map(|r| row_to_json(&table.columns, r).unwrap()).collect();
    write_texts(&table, texts).await;

    for columnar in ["true", "false"] {
        let t = table_sql(
            "everything",
            ALL_TYPES,
            &brokers,
            &topic,
            &format!(", columnar_decode = '{columnar}'"),
        );
        let (back, shapes, stats, _) = read_rows(&t, rows.len()).await.unwrap();
        assert_eq!(back, rows, "columnar_decode = {columnar}");
        // DECIMAL, ARRAY and ROW columns leave the schema to the row decode.
        assert!(shapes.iter().all(|s| *s == "rows"), "{shapes:?}");
        if columnar == "true" {
            let s = stats.unwrap();
            assert!(s.incapable > 0 && s.columnar == 0, "{s:?}");
        } else {
            assert_eq!(stats, None);
        }
    }

    // The capable subset: column-wise by default, equal to the row decode.
    let by_default = table_sql("capable", CAPABLE, &brokers, &topic, "");
    assert_eq!(
        plan(&by_default, TableRole::Source, 0, 1).unwrap().bridge,
        JsonBridge::Columnar
    );
    let (columnar_rows, shapes, stats, _) = read_rows(&by_default, rows.len()).await.unwrap();
    assert!(shapes.contains(&"columns"), "{shapes:?}");
    assert!(stats.unwrap().columnar > 0, "{stats:?}");
    let row_only = table_sql("capable", CAPABLE, &brokers, &topic, ", columnar_decode = 'false'");
    assert_eq!(
        plan(&row_only, TableRole::Source, 0, 1).unwrap().bridge,
        JsonBridge::Row
    );
    let (row_rows, shapes, _, _) = read_rows(&row_only, rows.len()).await.unwrap();
    assert!(shapes.iter().all(|s| *s == "rows"), "{shapes:?}");
    assert_eq!(columnar_rows, row_rows);
    assert_eq!(columnar_rows.len(), rows.len());
    assert_eq!(columnar_rows[4].values[6], SqlValue::String("n4".into()));
}

/// A malformed timestamp, a wrong-typed field, a DECIMAL over its
/// precision and a record that is not JSON take `decode_error`: `fail`
/// names column, topic, partition and offset; `skip` counts and goes on;
/// both bridges give the same rows (the columnar one refuses the batch and
/// falls back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_records_take_decode_error_naming_the_column() {
    let Some(brokers) = common::brokers() else { return };
    let cluster = common::cluster(common::config(&brokers)).await;
    let topic = common::unique_topic("conn-sql-bad");
    common::create_topic(&cluster, NewTopic::new(&topic, 1, 1)).await;
    let columns = "id BIGINT, at TIMESTAMP WITH TIME ZONE, price DECIMAL(4, 2)";
    let good = |i: i64| Text::from(format!(r#"{{"id":{i},"at":"2024-01-01T00:00:0{i}Z","price":"10.5"}}"#));
    let texts = vec![
        good(0),
        good(1),
        Text::from(r#"{"id":2,"at":"2024-01-01 00:00:02"}"#), // offset 2: no zone
        Text::from(r#"{"id":"3"}"#),                          // offset 3: wrong type
        Text::from(r#"{"id":4,"price":"100.00"}"#),           // offset 4: overflows DECIMAL(4, 2)
        Text::from("{not json"),                              // offset 5
        good(6),
    ];
    let table = table_sql("bad", columns, &brokers, &topic, "");
    write_texts(&table, texts).await;

    let capable_columns = "id BIGINT, at TIMESTAMP WITH TIME ZONE";
    for (columns, columnar) in [(columns, "true"), (columns, "false"), (capable_columns, "true")] {
        let fail = table_sql(
            "bad",
            columns,
            &brokers,
            &topic,
            &format!(", columnar_decode = '{columnar}'"),
        );
        let e = read_rows(&fail, 3).await.map(|_| ()).unwrap_err();
        match &e {
            ConnectorError::RowDecode {
                topic: t,
                partition,
                offset,
                column,
                reason,
            } => {
                assert_eq!((t.as_str(), *partition, *offset), (topic.as_str(), 0, 2), "{e}");
                assert_eq!(column, "\"at\"", "{e}");
                assert!(reason.contains("has no offset"), "{e}");
            }
            other => panic!("{columns} / {columnar}: {other}"),
        }
        let skip = table_sql(
            "bad",
            columns,
            &brokers,
            &topic,
            &format!(", columnar_decode = '{columnar}', decode_error = 'skip'"),
        );
        let want_rows = if columns == capable_columns { 4 } else { 3 };
        let (rows, shapes, stats, skipped) = read_rows(&skip, want_rows).await.unwrap();
        // Without the price column, offset 4 fits the table.
        let (want_skipped, want_ids) = if columns == capable_columns {
            (3, vec![0, 1, 4, 6])
        } else {
            (4, vec![0, 1, 6])
        };
        assert_eq!(skipped, want_skipped, "{columns} / {columnar}");
        let ids: Vec<SqlValue> = rows.iter().map(|r| r.values[0].clone()).collect();
        let want: Vec<SqlValue> = want_ids.into_iter().map(SqlValue::Integer).collect();
        assert_eq!(ids, want, "{columns} / {columnar}");
        assert!(shapes.iter().all(|s| *s == "rows"), "{shapes:?}");
        if columns == capable_columns {
            assert!(stats.unwrap().refused >= 1, "{stats:?}");
        }
    }
    // The messages name the column.
    let e = read_rows(&table_sql("bad", columns, &brokers, &topic, ""), 3)
        .await
        .map(|_| ())
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&format!("{topic}[0] offset 2")) && text.contains("column \"at\""),
        "{text}"
    );
}
