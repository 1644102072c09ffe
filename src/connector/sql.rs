//! The SQL table front: `CREATE TABLE … WITH (connector = 'kafka', …)`
//! parsed with `sqlparser`, planned onto a factory by the table's delivery
//! `mode` as the spec's planner does, plus the JSON row bridge of the
//! string channel.
//!
//! | `mode` | read (source) | written (sink) |
//! |---|---|---|
//! | absent, `append` | `kafka_source_string` | `kafka_sink_string` |
//! | `upsert` | `kafka_source_string` | `kafka_upsert_sink_string` |
//! | `exactly_once` | `kafka_source_string`, `read_committed` | `kafka_2pc_sink_string` (needs `transactional_id`) |
//!
//! Option keys are identifiers: unquoted ones are case-folded, and a dotted
//! key needs double quotes to stay one key (`"kafka.client.rack" = '…'`);
//! unquoted dots are joined back, so `kafka.fetch.wait.max.ms = 50` works
//! too. A single-quoted key is a string literal, which the parser rejects.
//! Values are literals: strings, numbers (a leading minus allowed),
//! booleans.

use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};
use sqlparser::ast::{CreateTableOptions, Expr, ObjectName, ObjectNamePart, SqlOption, Statement, UnaryOperator};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::error::{ConnectorError, Result};
use super::record::Text;
use super::registry::{BuildContext, Operator, Registry};
use super::upsert::{RowKind, ROW_KIND_FIELD};

/// A column type the JSON row bridge maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SqlType {
    /// BIGINT, INT, INTEGER, SMALLINT, TINYINT: a JSON integer.
    Integer,
    /// DOUBLE, FLOAT, REAL: a JSON number.
    Double,
    /// BOOLEAN: a JSON boolean.
    Boolean,
    /// STRING, VARCHAR, TEXT, CHAR: a JSON string.
    String,
}

impl SqlType {
    fn from_sql(column: &str, data_type: &str) -> Result<SqlType> {
        let upper = data_type.to_ascii_uppercase();
        let base = upper.split(['(', ' ']).next().unwrap_or("");
        Ok(match base {
            "BIGINT" | "INT" | "INTEGER" | "SMALLINT" | "TINYINT" | "INT64" | "INT32" => SqlType::Integer,
            "DOUBLE" | "FLOAT" | "REAL" | "FLOAT64" => SqlType::Double,
            "BOOLEAN" | "BOOL" => SqlType::Boolean,
            "STRING" | "VARCHAR" | "TEXT" | "CHAR" | "CHARACTER" => SqlType::String,
            _ => {
                return Err(ConnectorError::Sql {
                    message: format!(
                        "column {column:?} has type {data_type}, which the JSON row bridge does not map (BIGINT, \
                         INT, SMALLINT, TINYINT, DOUBLE, FLOAT, REAL, BOOLEAN, STRING, VARCHAR, TEXT)"
                    ),
                })
            }
        })
    }
}

/// A table column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub data_type: SqlType,
}

/// A parsed `CREATE TABLE`.
#[derive(Clone, PartialEq, Eq)]
pub struct TableDefinition {
    pub name: String,
    pub columns: Vec<Column>,
    /// The `WITH` options, keys as written (unquoted ones case-folded).
    pub options: BTreeMap<String, String>,
}

impl std::fmt::Debug for TableDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The options may hold a password; BuildContext's Debug redacts.
        f.debug_struct("TableDefinition")
            .field("name", &self.name)
            .field("columns", &self.columns)
            .field("options", &BuildContext::new(self.options.clone()))
            .finish()
    }
}

fn sql_error(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Sql {
        message: message.into(),
    }
}

fn object_name(name: &ObjectName) -> Result<String> {
    let mut parts = Vec::new();
    for part in &name.0 {
        match part {
            ObjectNamePart::Identifier(ident) => {
                if ident.quote_style == Some('\'') {
                    return Err(sql_error(format!(
                        "'{}' is a string literal, not an option key; quote a dotted key with double quotes: \"{}\"",
                        ident.value, ident.value
                    )));
                }
                if ident.quote_style.is_some() {
                    parts.push(ident.value.clone());
                } else {
                    parts.push(ident.value.to_ascii_lowercase());
                }
            }
            other => return Err(sql_error(format!("unexpected name part {other}"))),
        }
    }
    Ok(parts.join("."))
}

fn literal(key: &str, value: &Expr) -> Result<String> {
    use sqlparser::ast::Value as V;
    match value {
        Expr::Value(v) => match &v.value {
            V::SingleQuotedString(s) => Ok(s.clone()),
            V::Number(n, _) => Ok(n.to_string()),
            V::Boolean(b) => Ok(b.to_string()),
            other => Err(sql_error(format!(
                "option {key:?}: {other} is not a string, number or boolean literal"
            ))),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            Expr::Value(v) => match &v.value {
                V::Number(n, _) => Ok(format!("-{n}")),
                other => Err(sql_error(format!("option {key:?}: -{other} is not a number"))),
            },
            other => Err(sql_error(format!("option {key:?}: -{other} is not a literal"))),
        },
        other => Err(sql_error(format!(
            "option {key:?}: {other} is not a literal (string values take single quotes)"
        ))),
    }
}

/// Parses one `CREATE TABLE` statement.
pub fn parse_create_table(sql: &str) -> Result<TableDefinition> {
    let statements = Parser::parse_sql(&GenericDialect {}, sql).map_err(|e| sql_error(e.to_string()))?;
    let [statement] = statements.as_slice() else {
        return Err(sql_error(format!(
            "expected one CREATE TABLE statement, found {} statements",
            statements.len()
        )));
    };
    let Statement::CreateTable(create) = statement else {
        return Err(sql_error("expected a CREATE TABLE statement"));
    };
    let name = object_name(&create.name)?;
    let mut columns = Vec::with_capacity(create.columns.len());
    for c in &create.columns {
        let column = c.name.value.clone();
        if columns.iter().any(|x: &Column| x.name == column) {
            return Err(sql_error(format!("column {column:?} is declared twice")));
        }
        if column.starts_with("__") {
            return Err(sql_error(format!(
                "column {column:?}: names starting with __ are reserved ({ROW_KIND_FIELD})"
            )));
        }
        columns.push(Column {
            data_type: SqlType::from_sql(&column, &c.data_type.to_string())?,
            name: column,
        });
    }
    let with = match &create.table_options {
        CreateTableOptions::With(options) => options.as_slice(),
        CreateTableOptions::None => &[],
        _ => return Err(sql_error("table options go in WITH (key = value, …)")),
    };
    let mut options = BTreeMap::new();
    for option in with {
        let SqlOption::KeyValue { key, value } = option else {
            return Err(sql_error(format!("WITH option {option} is not key = value")));
        };
        let key = object_name(key)?;
        let value = literal(&key, value)?;
        if options.insert(key.clone(), value).is_some() {
            return Err(sql_error(format!("WITH option {key:?} is given twice")));
        }
    }
    Ok(TableDefinition { name, columns, options })
}

/// Whether the plan reads or writes the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableRole {
    Source,
    Sink,
}

/// The table's delivery mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableMode {
    Append,
    Upsert,
    ExactlyOnce,
}

/// A planned table: the factory and the parameters it gets.
#[derive(Clone, Debug)]
pub struct PlannedTable {
    pub factory: &'static str,
    pub mode: TableMode,
    pub context: BuildContext,
}

/// Options the planner consumes (not passed to the factory).
const PLANNER_OPTIONS: &[&str] = &["connector", "mode", "columnar_decode"];
/// Sink-side options a source of the same table does not take.
const SINK_ONLY: &[&str] = &[
    "primary_key",
    "transactional_id",
    "transaction_timeout_ms",
    "commit_group",
    "replay_suppression",
    "receipt_dir",
    "receipts_in_memory",
    "acks",
    "compression",
    "linger_ms",
    "produce_timeout",
    "flush_timeout",
    "fixed_partition",
    "schema_registry_subject",
    "schema_registry_auto_register",
    "schema_registry_value_schema",
];
/// Source-side options a sink of the same table does not take.
const SOURCE_ONLY: &[&str] = &[
    "group_id",
    "auto_offset_reset",
    "batch_max_wait_ms",
    "poll_timeout",
    "max_batch_size",
    "partition_discovery_interval",
    "commit_mode",
    "enable_debug",
    "decode_error",
];

/// Chooses the factory for reading or writing `table`.
pub fn plan(table: &TableDefinition, role: TableRole, subtask_index: u32, parallelism: u32) -> Result<PlannedTable> {
    match table.options.get("connector").map(|c| c.trim().to_ascii_lowercase()) {
        Some(c) if c == "kafka" => {}
        Some(c) => return Err(ConnectorError::invalid("connector", c, "kafka")),
        None => {
            return Err(ConnectorError::MissingOption {
                option: "connector",
                factory: "a CREATE TABLE for Kafka",
            })
        }
    }
    let mode = match table.options.get("mode").map(|m| m.trim().to_ascii_lowercase()) {
        None => TableMode::Append,
        Some(m) => match m.as_str() {
            "append" | "plain" => TableMode::Append,
            "upsert" => TableMode::Upsert,
            "exactly_once" | "exactly-once" | "transactional" | "2pc" => TableMode::ExactlyOnce,
            _ => {
                return Err(ConnectorError::invalid(
                    "mode",
                    m,
                    "one of append (the default), upsert, exactly_once",
                ))
            }
        },
    };
    if let Some(v) = table.options.get("columnar_decode") {
        super::options::parse_bool("columnar_decode", v)?;
    }
    let mut params: BTreeMap<String, String> = table
        .options
        .iter()
        .filter(|(k, _)| !PLANNER_OPTIONS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let factory = match (role, mode) {
        (TableRole::Source, _) => {
            params.retain(|k, _| !SINK_ONLY.contains(&k.as_str()));
            if mode == TableMode::ExactlyOnce {
                params
                    .entry("kafka.isolation.level".into())
                    .or_insert_with(|| "read_committed".into());
            }
            "kafka_source_string"
        }
        (TableRole::Sink, TableMode::Append) => "kafka_sink_string",
        (TableRole::Sink, TableMode::Upsert) => "kafka_upsert_sink_string",
        (TableRole::Sink, TableMode::ExactlyOnce) => "kafka_2pc_sink_string",
    };
    if role == TableRole::Sink {
        params.retain(|k, _| !SOURCE_ONLY.contains(&k.as_str()));
    }
    Ok(PlannedTable {
        factory,
        mode,
        context: BuildContext::new(params).with_subtask(subtask_index, parallelism),
    })
}

/// Plans and builds in one step.
pub fn build_table(
    registry: &Registry,
    table: &TableDefinition,
    role: TableRole,
    subtask_index: u32,
    parallelism: u32,
) -> Result<(PlannedTable, Operator)> {
    let planned = plan(table, role, subtask_index, parallelism)?;
    let operator = registry.build(planned.factory, &planned.context)?;
    Ok((planned, operator))
}

// ---------------------------------------------------------------------------
// The JSON row bridge.

/// A column value.
#[derive(Clone, Debug, PartialEq)]
pub enum SqlValue {
    Null,
    Boolean(bool),
    Integer(i64),
    Double(f64),
    String(String),
}

/// A row: values in column order, and its change kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub kind: RowKind,
    pub values: Vec<SqlValue>,
}

impl Row {
    pub fn insert(values: Vec<SqlValue>) -> Row {
        Row {
            kind: RowKind::Insert,
            values,
        }
    }
}

fn json_error(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Json {
        message: message.into(),
    }
}

/// A row as JSON text for the string channel (`row_to_json_string`): an
/// object of the columns in order, plus `__row_kind` unless an insert.
pub fn row_to_json(columns: &[Column], row: &Row) -> Result<Text> {
    if row.values.len() != columns.len() {
        return Err(json_error(format!(
            "the row has {} values for {} columns",
            row.values.len(),
            columns.len()
        )));
    }
    let mut object = Map::with_capacity(columns.len() + 1);
    for (c, v) in columns.iter().zip(&row.values) {
        let json = match (c.data_type, v) {
            (_, SqlValue::Null) => Value::Null,
            (SqlType::Integer, SqlValue::Integer(i)) => Value::Number((*i).into()),
            (SqlType::Double, SqlValue::Double(d)) => Value::Number(
                Number::from_f64(*d).ok_or_else(|| json_error(format!("column {:?}: {d} has no JSON form", c.name)))?,
            ),
            (SqlType::Double, SqlValue::Integer(i)) => Value::Number((*i).into()),
            (SqlType::Boolean, SqlValue::Boolean(b)) => Value::Bool(*b),
            (SqlType::String, SqlValue::String(s)) => Value::String(s.clone()),
            (t, v) => return Err(json_error(format!("column {:?} is {t:?}, the value is {v:?}", c.name))),
        };
        object.insert(c.name.clone(), json);
    }
    if row.kind != RowKind::Insert {
        object.insert(ROW_KIND_FIELD.into(), Value::String(row.kind.name().into()));
    }
    Ok(Text::from(Value::Object(object).to_string()))
}

/// JSON text from the string channel as a row (`json_string_to_row`):
/// missing columns are null, extra fields are ignored, a value of the wrong
/// type is an error naming the column.
pub fn json_to_row(columns: &[Column], text: &str) -> Result<Row> {
    let object = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(json_error("not a JSON object")),
        Err(e) => return Err(json_error(format!("not JSON: {e}"))),
    };
    let kind = match object.get(ROW_KIND_FIELD) {
        None => RowKind::Insert,
        Some(Value::String(s)) => {
            RowKind::parse(s).ok_or_else(|| json_error(format!("unknown {ROW_KIND_FIELD} {s:?}")))?
        }
        Some(_) => return Err(json_error(format!("{ROW_KIND_FIELD} is not a string"))),
    };
    let mut values = Vec::with_capacity(columns.len());
    for c in columns {
        let v = match (c.data_type, object.get(&c.name)) {
            (_, None | Some(Value::Null)) => SqlValue::Null,
            (SqlType::Integer, Some(Value::Number(n))) => SqlValue::Integer(
                n.as_i64()
                    .ok_or_else(|| json_error(format!("column {:?}: {n} is not a 64-bit integer", c.name)))?,
            ),
            (SqlType::Double, Some(Value::Number(n))) => SqlValue::Double(
                n.as_f64()
                    .ok_or_else(|| json_error(format!("column {:?}: {n} is not a number", c.name)))?,
            ),
            (SqlType::Boolean, Some(Value::Bool(b))) => SqlValue::Boolean(*b),
            (SqlType::String, Some(Value::String(s))) => SqlValue::String(s.clone()),
            (t, Some(other)) => {
                return Err(json_error(format!(
                    "column {:?} is {t:?}, the JSON value is {other}",
                    c.name
                )))
            }
        };
        values.push(v);
    }
    Ok(Row { kind, values })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_quoted_and_unquoted() {
        let t = parse_create_table(
            r#"CREATE TABLE t (a BIGINT) WITH (connector = 'kafka', "kafka.client.rack" = 'eu-1a',
               kafka.fetch.wait.max.ms = 50, Linger_MS = 0, acks = -1)"#,
        )
        .unwrap();
        assert_eq!(t.options["kafka.client.rack"], "eu-1a");
        assert_eq!(t.options["kafka.fetch.wait.max.ms"], "50");
        assert_eq!(t.options["linger_ms"], "0");
        assert_eq!(t.options["acks"], "-1");
        assert!(parse_create_table("CREATE TABLE t (a BIGINT) WITH ('kafka.client.rack' = 'x')").is_err());
    }

    #[test]
    fn json_bridge_round_trips() {
        let cols = vec![
            Column {
                name: "id".into(),
                data_type: SqlType::Integer,
            },
            Column {
                name: "name".into(),
                data_type: SqlType::String,
            },
            Column {
                name: "score".into(),
                data_type: SqlType::Double,
            },
            Column {
                name: "ok".into(),
                data_type: SqlType::Boolean,
            },
        ];
        let row = Row {
            kind: RowKind::Delete,
            values: vec![
                SqlValue::Integer(-3),
                SqlValue::String("é\"x".into()),
                SqlValue::Double(1.5),
                SqlValue::Null,
            ],
        };
        let text = row_to_json(&cols, &row).unwrap();
        assert_eq!(
            text.as_str(),
            r#"{"id":-3,"name":"é\"x","score":1.5,"ok":null,"__row_kind":"delete"}"#
        );
        assert_eq!(json_to_row(&cols, &text).unwrap(), row);
        let e = json_to_row(&cols, r#"{"id":"7"}"#).unwrap_err();
        assert!(e.to_string().contains("\"id\""), "{e}");
        assert!(json_to_row(&cols, r#"{"id":1.5}"#).is_err());
        assert!(json_to_row(&cols, "[]").is_err());
    }
}
