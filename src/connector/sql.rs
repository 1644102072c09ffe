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
//!
//! A namespace module: its items are reached only as `clink_kafka::connector::sql::*` and are
//! not re-exported elsewhere (the SQL front and its JSON row bridge, one vocabulary for a planner).

use std::collections::BTreeMap;

use sqlparser::ast::{
    ArrayElemTypeDef, CreateTableOptions, DataType, Expr, ObjectName, ObjectNamePart, SqlOption, Statement,
    UnaryOperator,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::error::{ConnectorError, Result};
pub use super::json_row::{
    decode_row, json_to_row, row_to_json, row_to_json_value, Column, Row, RowError, SqlType, SqlValue,
    MAX_DECIMAL_PRECISION,
};
use super::registry::{BuildContext, Operator, Registry};
use super::selected::SelectedConsumer;
use super::source::TextKafkaSource;
use super::table_source::TableSource;
use super::upsert::ROW_KIND_FIELD;

const MAPPED_TYPES: &str = "BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, REAL, BOOLEAN, STRING, VARCHAR, TEXT, \
                            DECIMAL(p, s), TIMESTAMP [WITH | WITHOUT TIME ZONE], TIMESTAMPTZ, TIMESTAMP_LTZ, DATE, \
                            TIME, BYTES, VARBINARY, BINARY, BYTEA, ARRAY<T>, T ARRAY, T[], ROW(name T, ...), \
                            STRUCT<name T, ...>";

/// The column type of `data_type`; `path` names the column for errors.
fn sql_type(path: &str, data_type: &DataType) -> Result<SqlType> {
    let unmapped = |why: &str| {
        sql_error(format!(
            "column {path} has type {data_type}, which the JSON row bridge does not map{why} (it maps {MAPPED_TYPES})"
        ))
    };
    match data_type {
        DataType::Array(def) => {
            let element = match def {
                ArrayElemTypeDef::AngleBracket(t)
                | ArrayElemTypeDef::SquareBracket(t, _)
                | ArrayElemTypeDef::Parenthesis(t)
                | ArrayElemTypeDef::ParenthesisNotNull(t)
                | ArrayElemTypeDef::Qualified(t, _) => t,
                ArrayElemTypeDef::None => return Err(unmapped(": an ARRAY needs its element type")),
            };
            Ok(SqlType::Array(Box::new(sql_type(&format!("{path}[]"), element)?)))
        }
        DataType::Struct(fields, _) => {
            let mut out: Vec<Column> = Vec::with_capacity(fields.len());
            for f in fields {
                let Some(name) = &f.field_name else {
                    return Err(unmapped(": every ROW field needs a name"));
                };
                let name = name.value.clone();
                if out.iter().any(|c| c.name == name) {
                    return Err(sql_error(format!(
                        "column {path}: ROW field {name:?} is declared twice"
                    )));
                }
                out.push(Column {
                    data_type: sql_type(&format!("{path}.{name:?}"), &f.field_type)?,
                    name,
                });
            }
            Ok(SqlType::Row(out))
        }
        _ => {
            let text = data_type.to_string().to_ascii_uppercase();
            let base = text.split(['(', ' ']).next().unwrap_or("");
            let args: Vec<&str> = match (text.find('('), text.find(')')) {
                (Some(a), Some(b)) if a < b => text[a + 1..b].split(',').map(str::trim).collect(),
                _ => Vec::new(),
            };
            Ok(match base {
                "BIGINT" | "INT" | "INTEGER" | "SMALLINT" | "TINYINT" | "INT64" | "INT32" => SqlType::Integer,
                "DOUBLE" | "FLOAT64" => SqlType::Double,
                "FLOAT" | "REAL" | "FLOAT32" => SqlType::Float,
                "BOOLEAN" | "BOOL" => SqlType::Boolean,
                "STRING" | "VARCHAR" | "TEXT" | "CHAR" | "CHARACTER" => SqlType::String,
                "DECIMAL" | "NUMERIC" | "DEC" => {
                    let number = |s: &str| s.parse::<u8>().ok();
                    let (precision, scale) = match args.as_slice() {
                        [] => (10, 0),
                        [p] => (number(p).ok_or_else(|| unmapped(": bad precision"))?, 0),
                        [p, s] => (
                            number(p).ok_or_else(|| unmapped(": bad precision"))?,
                            number(s).ok_or_else(|| unmapped(": bad scale"))?,
                        ),
                        _ => return Err(unmapped(": DECIMAL takes (precision[, scale])")),
                    };
                    if precision == 0 || precision > MAX_DECIMAL_PRECISION || scale > precision {
                        return Err(unmapped(&format!(
                            ": a DECIMAL's precision is 1 to {MAX_DECIMAL_PRECISION} and its scale 0 to the precision"
                        )));
                    }
                    SqlType::Decimal { precision, scale }
                }
                "TIMESTAMP" | "DATETIME" => SqlType::Timestamp {
                    with_time_zone: text.contains("WITH TIME ZONE"),
                },
                "TIMESTAMPTZ" | "TIMESTAMP_LTZ" => SqlType::Timestamp { with_time_zone: true },
                "DATE" => SqlType::Date,
                "TIME" if text.contains("WITH TIME ZONE") => {
                    return Err(unmapped(
                        ": a TIME WITH TIME ZONE has no instant (use TIMESTAMP WITH TIME ZONE)",
                    ))
                }
                "TIME" => SqlType::Time,
                "BYTES" | "VARBINARY" | "BINARY" | "BYTEA" | "BLOB" => SqlType::Bytes,
                _ => return Err(unmapped("")),
            })
        }
    }
}

/// The statement's tokens with `ROW(name T, …)` spelled `STRUCT<name T, …>`,
/// which sqlparser parses into typed fields (it reads `ROW(…)` as a custom
/// type with flat modifiers, and refuses nested parameters in it).
fn row_types_as_structs(sql: &str) -> Result<Vec<sqlparser::tokenizer::TokenWithSpan>> {
    let mut tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize_with_location()
        .map_err(|e| sql_error(e.to_string()))?;
    // For each open parenthesis: whether it opened a rewritten ROW.
    let mut open: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i].token {
            Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("ROW") => {
                let next = (i + 1..tokens.len()).find(|&j| !matches!(tokens[j].token, Token::Whitespace(_)));
                if let Some(j) = next.filter(|&j| tokens[j].token == Token::LParen) {
                    tokens[i].token = Token::make_keyword("STRUCT");
                    tokens[j].token = Token::Lt;
                    open.push(true);
                    i = j;
                }
            }
            Token::LParen => open.push(false),
            Token::RParen if open.pop() == Some(true) => tokens[i].token = Token::Gt,
            _ => {}
        }
        i += 1;
    }
    Ok(tokens)
}

/// A parsed `CREATE TABLE`.
#[derive(Clone, PartialEq, Eq)]
pub struct TableDefinition {
    /// The table's name, as written.
    pub name: String,
    /// The columns, in declaration order.
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
    let statements = Parser::new(&GenericDialect {})
        .with_tokens_with_locations(row_types_as_structs(sql)?)
        .parse_statements()
        .map_err(|e| sql_error(e.to_string()))?;
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
            data_type: sql_type(&format!("{column:?}"), &c.data_type)?,
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
    /// The plan reads the table (a source).
    Source,
    /// The plan writes the table (a sink).
    Sink,
}

/// The table's delivery mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableMode {
    /// `mode = 'append'`: every row is a record (the message or text source / sink).
    Append,
    /// `mode = 'upsert'`: the primary key is the record key; deletes are tombstones (the upsert sink).
    Upsert,
    /// `mode = 'exactly_once'`: the two-phase-commit sink (the source side reads `read_committed`).
    ExactlyOnce,
}

/// Which JSON → row decode a source table uses (`columnar_decode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonBridge {
    /// `json_string_to_row`: one [`Row`] per record.
    Row,
    /// `json_string_to_row_columnar`: typed column vectors per batch
    /// ([`super::columnar`]), falling back to the row decode where it
    /// cannot be exact. The default for a `format = 'json'` (or
    /// format-less) source table.
    Columnar,
}

/// A planned table: the factory and the parameters it gets.
#[derive(Clone, Debug)]
pub struct PlannedTable {
    /// The factory name the table maps to.
    pub factory: &'static str,
    /// The delivery mode.
    pub mode: TableMode,
    /// The parameters the factory is built with.
    pub context: BuildContext,
    /// The JSON → row decode of a source ([`build_table_source`]); a sink
    /// ignores it.
    pub bridge: JsonBridge,
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
    // The reference: columnar is the default for a format = 'json' table;
    // a registry format's decoder hands the bridge JSON text too, and takes
    // the row decode unless columnar_decode = 'true'.
    let json_format = table
        .options
        .get("format")
        .is_none_or(|f| f.trim().eq_ignore_ascii_case("json"));
    let columnar = match table.options.get("columnar_decode") {
        Some(v) => super::options::parse_bool("columnar_decode", v)?,
        None => json_format,
    };
    let bridge = if columnar {
        JsonBridge::Columnar
    } else {
        JsonBridge::Row
    };
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
        bridge,
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

/// Plans `table` as a source and builds its [`TableSource`]: the string
/// source `kafka_source_string` (the same option parsing as the registry's
/// builder) followed by the JSON row bridge the plan chose
/// ([`PlannedTable::bridge`]), each record's failures on the
/// `decode_error` policy.
pub fn build_table_source(
    table: &TableDefinition,
    subtask_index: u32,
    parallelism: u32,
) -> Result<(PlannedTable, TableSource<SelectedConsumer>)> {
    let planned = plan(table, TableRole::Source, subtask_index, parallelism)?;
    let options = super::options::parse_source(
        super::options::FactoryKind::TextSource,
        planned.context.params(),
        subtask_index,
        parallelism,
    )?;
    let text = TextKafkaSource::new(super::selected::kafka_source(options)?);
    let source = TableSource::new(text, table.columns.clone(), planned.bridge == JsonBridge::Columnar);
    Ok((planned, source))
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
}
