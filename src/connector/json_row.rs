//! The JSON row bridge of the SQL front (the spec's `row_to_json_string`
//! and `json_string_to_row`): a table's column types, row values, and the
//! mapping between a row and one JSON object, both ways.
//!
//! | SQL type | JSON written (sink) | JSON read (source) |
//! |---|---|---|
//! | BIGINT, INT, SMALLINT, TINYINT | integer | integer (64-bit) |
//! | DOUBLE, FLOAT, REAL | number | number |
//! | BOOLEAN | `true` / `false` | boolean |
//! | STRING, VARCHAR, TEXT, CHAR | string | string |
//! | DECIMAL(p, s), NUMERIC | string, exactly `s` fraction digits (`"-12.30"`) | string (`"12.3"`, `"-0.5"`, `"+7"`), or an integer number; a number with a fraction or exponent is refused (binary floating point cannot carry it exactly) |
//! | TIMESTAMP [WITHOUT TIME ZONE] | `"2024-02-29T23:59:58.123"` | `YYYY-MM-DD(T\| )HH:MM[:SS[.f…]]`, no offset |
//! | TIMESTAMP WITH TIME ZONE, TIMESTAMPTZ, TIMESTAMP_LTZ | `"2024-02-29T22:59:58.123Z"` (UTC) | the same with an offset: `Z`, `±HH:MM`, `±HHMM` or `±HH` (RFC 3339 / ISO 8601); normalised to UTC |
//! | DATE | `"2024-02-29"` | `YYYY-MM-DD` |
//! | TIME | `"13:45:00.5"`… (`HH:MM:SS[.fff\|.ffffff]`) | `HH:MM[:SS[.f…]]` |
//! | BYTES, VARBINARY, BINARY, BYTEA | base64 (RFC 4648 standard alphabet, padded) | the same |
//! | `ARRAY<T>`, `T ARRAY`, `T[]` | array (elements may be null) | array |
//! | ROW(a T, …), STRUCT<a T, …> | object of the fields in order | object; missing fields null, extra ignored |
//!
//! Temporal values are held to the microsecond: a fraction has at most 9
//! digits, and digits below the microsecond must be zero (refused, never
//! silently truncated). Years are 0000–9999; a timestamp with an offset
//! is converted to UTC. A DECIMAL wider than its declared precision, or
//! with more fraction digits than its scale (other than trailing zeros), is
//! refused, never rounded. Every refusal is a [`RowError`] naming the
//! column (`"addr"."zip"`, `"tags"[2]` inside nested values); the SQL
//! source turns it into its `decode_error` policy with topic, partition
//! and offset ([`super::table_source`]).

use std::fmt;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::error::{ConnectorError, Result};
use super::record::Text;
use super::upsert::{RowKind, ROW_KIND_FIELD};

/// The largest DECIMAL precision (an `i128` holds 38 digits).
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// A column type the JSON row bridge maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlType {
    /// BIGINT, INT, INTEGER, SMALLINT, TINYINT: a JSON integer.
    Integer,
    /// DOUBLE, DOUBLE PRECISION, FLOAT64: a JSON number.
    Double,
    /// FLOAT, REAL: a JSON number, held as a 64-bit float like DOUBLE (the
    /// columnar bridge leaves such a schema to the row decode).
    Float,
    /// BOOLEAN: a JSON boolean.
    Boolean,
    /// STRING, VARCHAR, TEXT, CHAR: a JSON string.
    String,
    /// DECIMAL(p, s): a JSON string (exact).
    Decimal {
        /// Total digits, 1 to 38.
        precision: u8,
        /// Digits after the point, at most `precision`.
        scale: u8,
    },
    /// TIMESTAMP: an ISO 8601 / RFC 3339 string.
    Timestamp {
        /// Whether it is `TIMESTAMP WITH TIME ZONE` (an instant) rather than a wall-clock time.
        with_time_zone: bool,
    },
    /// DATE: `YYYY-MM-DD`.
    Date,
    /// TIME: `HH:MM:SS[.fraction]`.
    Time,
    /// BYTES: base64.
    Bytes,
    /// `ARRAY<T>`: a JSON array.
    Array(Box<SqlType>),
    /// `ROW(name T, …)`: a JSON object.
    Row(Vec<Column>),
}

impl fmt::Display for SqlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SqlType::Integer => f.write_str("BIGINT"),
            SqlType::Double => f.write_str("DOUBLE"),
            SqlType::Float => f.write_str("FLOAT"),
            SqlType::Boolean => f.write_str("BOOLEAN"),
            SqlType::String => f.write_str("STRING"),
            SqlType::Decimal { precision, scale } => write!(f, "DECIMAL({precision}, {scale})"),
            SqlType::Timestamp { with_time_zone: true } => f.write_str("TIMESTAMP WITH TIME ZONE"),
            SqlType::Timestamp { with_time_zone: false } => f.write_str("TIMESTAMP"),
            SqlType::Date => f.write_str("DATE"),
            SqlType::Time => f.write_str("TIME"),
            SqlType::Bytes => f.write_str("BYTES"),
            SqlType::Array(t) => write!(f, "ARRAY<{t}>"),
            SqlType::Row(fields) => {
                f.write_str("ROW(")?;
                for (i, c) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} {}", c.name, c.data_type)?;
                }
                f.write_str(")")
            }
        }
    }
}

/// A table column (or a ROW field).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The column's name, as declared.
    pub name: String,
    /// The column's SQL type.
    pub data_type: SqlType,
}

impl Column {
    /// A column `name` of type `data_type`.
    pub fn new(name: impl Into<String>, data_type: SqlType) -> Column {
        Column {
            name: name.into(),
            data_type,
        }
    }
}

/// A column value. Temporal values count microseconds: since
/// 1970-01-01T00:00:00 (UTC for a TIMESTAMP WITH TIME ZONE, wall clock
/// without), since midnight (TIME); DATE counts days since 1970-01-01.
#[derive(Clone, Debug, PartialEq)]
pub enum SqlValue {
    /// SQL NULL (JSON `null` or an absent key).
    Null,
    /// A BOOLEAN.
    Boolean(bool),
    /// An integer (BIGINT and the smaller integer types).
    Integer(i64),
    /// A DOUBLE.
    Double(f64),
    /// A STRING / VARCHAR.
    String(String),
    /// `unscaled × 10^-scale`; written at the column's scale (rescaled
    /// exactly, or refused when that would drop a non-zero digit).
    Decimal {
        /// The digits without the point.
        unscaled: i128,
        /// Digits after the point.
        scale: u8,
    },
    /// A TIMESTAMP: microseconds since the epoch.
    Timestamp(i64),
    /// A DATE: days since 1970-01-01.
    Date(i32),
    /// A TIME: microseconds since midnight.
    Time(i64),
    /// BYTES.
    Bytes(Vec<u8>),
    /// An ARRAY's elements, in order.
    Array(Vec<SqlValue>),
    /// The fields in the ROW type's order.
    Row(Vec<SqlValue>),
}

/// A row: values in column order, and its change kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The change kind (`__row_kind`; insert when absent).
    pub kind: RowKind,
    /// The values, in column order.
    pub values: Vec<SqlValue>,
}

impl Row {
    /// An insert row of `values`.
    pub fn insert(values: Vec<SqlValue>) -> Row {
        Row {
            kind: RowKind::Insert,
            values,
        }
    }
}

/// Why a JSON value does not fit a column (or a row cannot be written),
/// naming the column: `column` is empty for the object as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowError {
    /// `"a"`, `"a"."b"`, `"tags"[2]`; empty for the whole record.
    pub column: String,
    /// Why the value does not fit.
    pub reason: String,
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.column.is_empty() {
            f.write_str(&self.reason)
        } else {
            write!(f, "column {}: {}", self.column, self.reason)
        }
    }
}

impl From<RowError> for ConnectorError {
    fn from(e: RowError) -> Self {
        ConnectorError::Json { message: e.to_string() }
    }
}

/// A failure inside a value, with the path from the column down, innermost
/// segment pushed first.
struct FieldError {
    path: Vec<String>,
    reason: String,
}

impl FieldError {
    fn new(reason: impl Into<String>) -> FieldError {
        FieldError {
            path: Vec::new(),
            reason: reason.into(),
        }
    }

    fn at(mut self, segment: String) -> FieldError {
        self.path.push(segment);
        self
    }

    fn into_row_error(self, column: &str) -> RowError {
        let mut name = format!("{column:?}");
        for s in self.path.into_iter().rev() {
            name.push_str(&s);
        }
        RowError {
            column: name,
            reason: self.reason,
        }
    }
}

fn whole(reason: impl Into<String>) -> RowError {
    RowError {
        column: String::new(),
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------------------
// Row → JSON (sinks).

/// A row as JSON text for the string channel (`row_to_json_string`): an
/// object of the columns in order, plus `__row_kind` unless an insert.
pub fn row_to_json(columns: &[Column], row: &Row) -> Result<Text> {
    row_to_json_value(columns, row)
        .map(|v| Text::from(v.to_string()))
        .map_err(ConnectorError::from)
}

/// [`row_to_json`] as a JSON value, with the column-naming error.
pub fn row_to_json_value(columns: &[Column], row: &Row) -> Result<Value, RowError> {
    if row.values.len() != columns.len() {
        return Err(whole(format!(
            "the row has {} values for {} columns",
            row.values.len(),
            columns.len()
        )));
    }
    let mut object = Map::with_capacity(columns.len() + 1);
    for (c, v) in columns.iter().zip(&row.values) {
        let json = value_to_json(&c.data_type, v).map_err(|e| e.into_row_error(&c.name))?;
        object.insert(c.name.clone(), json);
    }
    if row.kind != RowKind::Insert {
        object.insert(ROW_KIND_FIELD.into(), Value::String(row.kind.name().into()));
    }
    Ok(Value::Object(object))
}

fn value_to_json(t: &SqlType, v: &SqlValue) -> Result<Value, FieldError> {
    Ok(match (t, v) {
        (_, SqlValue::Null) => Value::Null,
        (SqlType::Integer, SqlValue::Integer(i)) => Value::Number((*i).into()),
        (SqlType::Double | SqlType::Float, SqlValue::Double(d)) => {
            Value::Number(Number::from_f64(*d).ok_or_else(|| FieldError::new(format!("{d} has no JSON form")))?)
        }
        (SqlType::Double | SqlType::Float, SqlValue::Integer(i)) => Value::Number((*i).into()),
        (SqlType::Boolean, SqlValue::Boolean(b)) => Value::Bool(*b),
        (SqlType::String, SqlValue::String(s)) => Value::String(s.clone()),
        (SqlType::Decimal { precision, scale }, SqlValue::Decimal { unscaled, scale: from }) => {
            let u = rescale_decimal(*unscaled, *from, *scale).map_err(FieldError::new)?;
            check_precision(u, *precision, *scale).map_err(FieldError::new)?;
            Value::String(format_decimal(u, *scale))
        }
        (SqlType::Decimal { precision, scale }, SqlValue::Integer(i)) => {
            let u = rescale_decimal(i128::from(*i), 0, *scale).map_err(FieldError::new)?;
            check_precision(u, *precision, *scale).map_err(FieldError::new)?;
            Value::String(format_decimal(u, *scale))
        }
        (SqlType::Timestamp { with_time_zone }, SqlValue::Timestamp(us)) => {
            Value::String(format_timestamp(*us, *with_time_zone).map_err(FieldError::new)?)
        }
        (SqlType::Date, SqlValue::Date(d)) => Value::String(format_date(*d).map_err(FieldError::new)?),
        (SqlType::Time, SqlValue::Time(us)) => Value::String(format_time(*us).map_err(FieldError::new)?),
        (SqlType::Bytes, SqlValue::Bytes(b)) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        (SqlType::Array(element), SqlValue::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(value_to_json(element, item).map_err(|e| e.at(format!("[{i}]")))?);
            }
            Value::Array(out)
        }
        (SqlType::Row(fields), SqlValue::Row(values)) => {
            if fields.len() != values.len() {
                return Err(FieldError::new(format!(
                    "the ROW value has {} fields for {} declared",
                    values.len(),
                    fields.len()
                )));
            }
            let mut object = Map::with_capacity(fields.len());
            for (f, v) in fields.iter().zip(values) {
                let json = value_to_json(&f.data_type, v).map_err(|e| e.at(format!(".{:?}", f.name)))?;
                object.insert(f.name.clone(), json);
            }
            Value::Object(object)
        }
        (t, v) => return Err(FieldError::new(format!("is {t}, the value is {v:?}"))),
    })
}

// ---------------------------------------------------------------------------
// JSON → row (sources).

/// JSON text from the string channel as a row (`json_string_to_row`):
/// missing columns are null, extra fields are ignored, a value that does
/// not fit its column is an error naming the column.
pub fn json_to_row(columns: &[Column], text: &str) -> Result<Row> {
    decode_row(columns, text).map_err(ConnectorError::from)
}

/// [`json_to_row`] with the column-naming error (what the source's
/// `decode_error` policy reports).
pub fn decode_row(columns: &[Column], text: &str) -> Result<Row, RowError> {
    let object = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => o,
        Ok(_) => return Err(whole("not a JSON object")),
        Err(e) => return Err(whole(format!("not JSON: {e}"))),
    };
    let kind = match object.get(ROW_KIND_FIELD) {
        None => RowKind::Insert,
        Some(Value::String(s)) => RowKind::parse(s).ok_or_else(|| RowError {
            column: ROW_KIND_FIELD.into(),
            reason: format!("unknown row kind {s:?}"),
        })?,
        Some(_) => {
            return Err(RowError {
                column: ROW_KIND_FIELD.into(),
                reason: "not a string".into(),
            })
        }
    };
    let mut values = Vec::with_capacity(columns.len());
    for c in columns {
        let v = match object.get(&c.name) {
            None => SqlValue::Null,
            Some(json) => value_from_json(&c.data_type, json).map_err(|e| e.into_row_error(&c.name))?,
        };
        values.push(v);
    }
    Ok(Row { kind, values })
}

fn value_from_json(t: &SqlType, json: &Value) -> Result<SqlValue, FieldError> {
    let wrong = |json: &Value| FieldError::new(format!("is {t}, the JSON value is {}", shorten(json)));
    Ok(match (t, json) {
        (_, Value::Null) => SqlValue::Null,
        (SqlType::Integer, Value::Number(n)) => SqlValue::Integer(
            n.as_i64()
                .ok_or_else(|| FieldError::new(format!("{n} is not a 64-bit integer")))?,
        ),
        (SqlType::Double | SqlType::Float, Value::Number(n)) => SqlValue::Double(
            n.as_f64()
                .ok_or_else(|| FieldError::new(format!("{n} is not a number")))?,
        ),
        (SqlType::Boolean, Value::Bool(b)) => SqlValue::Boolean(*b),
        (SqlType::String, Value::String(s)) => SqlValue::String(s.clone()),
        (SqlType::Decimal { precision, scale }, Value::String(s)) => SqlValue::Decimal {
            unscaled: parse_decimal(s, *precision, *scale).map_err(FieldError::new)?,
            scale: *scale,
        },
        (SqlType::Decimal { precision, scale }, Value::Number(n)) => {
            let whole = if let Some(i) = n.as_i64() {
                i128::from(i)
            } else if let Some(u) = n.as_u64() {
                i128::from(u)
            } else {
                return Err(FieldError::new(format!(
                    "{n} is a JSON number with a fraction or exponent, which binary floating point cannot carry \
                     exactly; write a DECIMAL as a string (\"{n}\")"
                )));
            };
            let u = rescale_decimal(whole, 0, *scale).map_err(FieldError::new)?;
            check_precision(u, *precision, *scale).map_err(FieldError::new)?;
            SqlValue::Decimal {
                unscaled: u,
                scale: *scale,
            }
        }
        (SqlType::Timestamp { with_time_zone }, Value::String(s)) => {
            SqlValue::Timestamp(parse_timestamp(s, *with_time_zone).map_err(FieldError::new)?)
        }
        (SqlType::Date, Value::String(s)) => SqlValue::Date(parse_date(s).map_err(FieldError::new)?),
        (SqlType::Time, Value::String(s)) => SqlValue::Time(parse_time(s).map_err(FieldError::new)?),
        (SqlType::Bytes, Value::String(s)) => SqlValue::Bytes(parse_base64(s).map_err(FieldError::new)?),
        (SqlType::Array(element), Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(value_from_json(element, item).map_err(|e| e.at(format!("[{i}]")))?);
            }
            SqlValue::Array(out)
        }
        (SqlType::Row(fields), Value::Object(object)) => {
            let mut out = Vec::with_capacity(fields.len());
            for f in fields {
                out.push(match object.get(&f.name) {
                    None => SqlValue::Null,
                    Some(v) => value_from_json(&f.data_type, v).map_err(|e| e.at(format!(".{:?}", f.name)))?,
                });
            }
            SqlValue::Row(out)
        }
        (_, other) => return Err(wrong(other)),
    })
}

/// A JSON value for an error message: at most about 64 characters.
fn shorten(json: &Value) -> String {
    let s = json.to_string();
    if s.len() <= 64 {
        return s;
    }
    let mut cut = 61;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &s[..cut])
}

pub(crate) fn parse_base64(s: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("{:?} is not base64 (standard alphabet, padded): {e}", short_str(s)))
}

fn short_str(s: &str) -> &str {
    let mut cut = s.len().min(48);
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

// ---------------------------------------------------------------------------
// DECIMAL.

fn pow10(n: u8) -> i128 {
    10i128.pow(u32::from(n))
}

/// `unscaled` at scale `from` as scale `to`, exactly.
fn rescale_decimal(unscaled: i128, from: u8, to: u8) -> Result<i128, String> {
    if from > MAX_DECIMAL_PRECISION || to > MAX_DECIMAL_PRECISION {
        return Err(format!("scale {} is above {MAX_DECIMAL_PRECISION}", from.max(to)));
    }
    if to >= from {
        unscaled
            .checked_mul(pow10(to - from))
            .ok_or_else(|| "overflows 38 digits".to_owned())
    } else {
        let d = pow10(from - to);
        if unscaled % d != 0 {
            return Err(format!(
                "{} has more than {to} fraction digits (refused, not rounded)",
                format_decimal(unscaled, from)
            ));
        }
        Ok(unscaled / d)
    }
}

fn check_precision(unscaled: i128, precision: u8, scale: u8) -> Result<(), String> {
    if unscaled.unsigned_abs() >= pow10(precision).unsigned_abs() {
        return Err(format!(
            "{} overflows DECIMAL({precision}, {scale}) (at most {} integer digits)",
            format_decimal(unscaled, scale),
            precision - scale
        ));
    }
    Ok(())
}

/// A decimal literal (`[+-]digits[.digits]`, at least one digit; no
/// exponent) at `scale`, within `precision`.
pub(crate) fn parse_decimal(s: &str, precision: u8, scale: u8) -> Result<i128, String> {
    let bad = || format!("{:?} is not a decimal number ([+-]digits[.digits])", short_str(s));
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || (body.contains('.') && frac.is_empty() && int.is_empty())
    {
        return Err(bad());
    }
    let int = int.trim_start_matches('0');
    let kept = frac.trim_end_matches('0');
    if kept.len() > usize::from(scale) {
        return Err(format!(
            "{:?} has more than {scale} fraction digits (refused, not rounded)",
            short_str(s)
        ));
    }
    if int.len() > usize::from(precision - scale) {
        return Err(format!(
            "{:?} overflows DECIMAL({precision}, {scale}) (at most {} integer digits)",
            short_str(s),
            precision - scale
        ));
    }
    // At most 38 digits in all: fits an i128.
    let mut u: i128 = 0;
    for b in int.bytes().chain(kept.bytes()) {
        u = u * 10 + i128::from(b - b'0');
    }
    u *= pow10(scale - kept.len() as u8);
    Ok(if negative { -u } else { u })
}

/// `unscaled × 10^-scale` with exactly `scale` fraction digits.
pub(crate) fn format_decimal(unscaled: i128, scale: u8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale == 0 {
        return format!("{sign}{digits}");
    }
    let padded = if digits.len() <= scale {
        format!("{}{digits}", "0".repeat(scale + 1 - digits.len()))
    } else {
        digits
    };
    let (i, f) = padded.split_at(padded.len() - scale);
    format!("{sign}{i}.{f}")
}

// ---------------------------------------------------------------------------
// DATE, TIME, TIMESTAMP.

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count (`civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

fn digits(s: &[u8]) -> Option<u32> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |a, b| a * 10 + u32::from(b - b'0')))
}

/// `YYYY-MM-DD` → days since the epoch.
fn date_days(s: &[u8]) -> Option<i64> {
    if s.len() != 10 || s[4] != b'-' || s[7] != b'-' {
        return None;
    }
    let (y, m, d) = (digits(&s[..4])?, digits(&s[5..7])?, digits(&s[8..])?);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(i64::from(y), m) {
        return None;
    }
    Some(days_from_civil(i64::from(y), m, d))
}

/// `HH:MM[:SS[.f{1,9}]]` → microseconds since midnight; `Err` names the
/// sub-microsecond digits.
fn time_micros(s: &[u8]) -> Option<Result<i64, &'static str>> {
    if s.len() < 5 || s[2] != b':' {
        return None;
    }
    let (h, mi) = (digits(&s[..2])?, digits(&s[3..5])?);
    let mut sec = 0;
    let mut micros = 0i64;
    if s.len() > 5 {
        if s[5] != b':' || s.len() < 8 {
            return None;
        }
        sec = digits(&s[6..8])?;
        if s.len() > 8 {
            let frac = &s[9..];
            if s[8] != b'.' || frac.is_empty() || frac.len() > 9 {
                return None;
            }
            digits(frac)?;
            for (i, b) in frac.iter().enumerate() {
                if i < 6 {
                    micros += i64::from(b - b'0') * 10i64.pow(5 - i as u32);
                } else if *b != b'0' {
                    return Some(Err(
                        "has digits below the microsecond (values are held to the microsecond)",
                    ));
                }
            }
        }
    }
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    Some(Ok((i64::from(h) * 3600 + i64::from(mi) * 60 + i64::from(sec))
        * MICROS_PER_SECOND
        + micros))
}

/// `YYYY-MM-DD`.
pub(crate) fn parse_date(s: &str) -> Result<i32, String> {
    date_days(s.as_bytes())
        .map(|d| d as i32)
        .ok_or_else(|| format!("{:?} is not a date (YYYY-MM-DD)", short_str(s)))
}

/// `HH:MM[:SS[.fraction]]`.
pub(crate) fn parse_time(s: &str) -> Result<i64, String> {
    match time_micros(s.as_bytes()) {
        Some(Ok(us)) => Ok(us),
        Some(Err(why)) => Err(format!("{:?} {why}", short_str(s))),
        None => Err(format!("{:?} is not a time (HH:MM[:SS[.fraction]])", short_str(s))),
    }
}

/// A timestamp: `YYYY-MM-DD`, `T` (or `t` or a space), a time, and — with
/// a time zone, required; without, refused — `Z` or `±HH[[:]MM]`.
pub(crate) fn parse_timestamp(s: &str, with_time_zone: bool) -> Result<i64, String> {
    let form = if with_time_zone {
        "YYYY-MM-DDTHH:MM[:SS[.fraction]] with Z or ±HH:MM (RFC 3339)"
    } else {
        "YYYY-MM-DDTHH:MM[:SS[.fraction]], no offset"
    };
    let bad = || format!("{:?} is not a timestamp ({form})", short_str(s));
    let b = s.as_bytes();
    if b.len() < 16 || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let days = date_days(&b[..10]).ok_or_else(bad)?;
    let rest = &b[11..];
    let zone_at = rest.iter().position(|c| matches!(c, b'Z' | b'z' | b'+' | b'-'));
    let (time, zone) = match zone_at {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let micros = match time_micros(time) {
        Some(Ok(us)) => us,
        Some(Err(why)) => return Err(format!("{:?} {why}", short_str(s))),
        None => return Err(bad()),
    };
    let offset_minutes: i64 = match (zone, with_time_zone) {
        (None, false) => 0,
        (None, true) => {
            return Err(format!(
                "{:?} has no offset; a TIMESTAMP WITH TIME ZONE needs Z or ±HH:MM",
                short_str(s)
            ))
        }
        (Some(_), false) => {
            return Err(format!(
                "{:?} has an offset; a TIMESTAMP WITHOUT TIME ZONE takes none (declare the column \
                 TIMESTAMP WITH TIME ZONE)",
                short_str(s)
            ))
        }
        (Some(b"Z" | b"z"), true) => 0,
        (Some(z), true) => {
            let sign = if z[0] == b'-' { -1 } else { 1 };
            let z = &z[1..];
            let (h, m) = match z.len() {
                2 => (digits(z), Some(0)),
                4 => (digits(&z[..2]), digits(&z[2..])),
                5 if z[2] == b':' => (digits(&z[..2]), digits(&z[3..])),
                _ => (None, None),
            };
            match (h, m) {
                (Some(h), Some(m)) if h <= 23 && m <= 59 => sign * i64::from(h * 60 + m),
                _ => return Err(bad()),
            }
        }
    };
    Ok(days * MICROS_PER_DAY + micros - offset_minutes * 60 * MICROS_PER_SECOND)
}

fn write_fraction(out: &mut String, micros: i64) {
    if micros == 0 {
        return;
    }
    if micros % 1000 == 0 {
        out.push_str(&format!(".{:03}", micros / 1000));
    } else {
        out.push_str(&format!(".{micros:06}"));
    }
}

fn write_time(out: &mut String, micros: i64) {
    let secs = micros / MICROS_PER_SECOND;
    out.push_str(&format!("{:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60));
    write_fraction(out, micros % MICROS_PER_SECOND);
}

fn date_string(days: i64) -> Result<String, String> {
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return Err(format!("day {days} is outside the years 0000-9999"));
    }
    Ok(format!("{y:04}-{m:02}-{d:02}"))
}

pub(crate) fn format_date(days: i32) -> Result<String, String> {
    date_string(i64::from(days))
}

pub(crate) fn format_time(micros: i64) -> Result<String, String> {
    if !(0..MICROS_PER_DAY).contains(&micros) {
        return Err(format!("{micros} µs is not a time of day"));
    }
    let mut out = String::with_capacity(15);
    write_time(&mut out, micros);
    Ok(out)
}

pub(crate) fn format_timestamp(micros: i64, with_time_zone: bool) -> Result<String, String> {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let mut out = date_string(days)?;
    out.push('T');
    write_time(&mut out, micros.rem_euclid(MICROS_PER_DAY));
    if with_time_zone {
        out.push('Z');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, t: SqlType) -> Column {
        Column::new(name, t)
    }

    fn one(t: SqlType, json: &str) -> Result<SqlValue, RowError> {
        decode_row(&[col("c", t)], &format!("{{\"c\":{json}}}")).map(|mut r| r.values.remove(0))
    }

    fn out(t: SqlType, v: SqlValue) -> Result<String, RowError> {
        row_to_json_value(&[col("c", t)], &Row::insert(vec![v])).map(|o| o["c"].to_string())
    }

    #[test]
    fn the_flat_types_round_trip() {
        let cols = vec![
            col("id", SqlType::Integer),
            col("name", SqlType::String),
            col("score", SqlType::Double),
            col("ok", SqlType::Boolean),
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
        let e = decode_row(&cols, r#"{"id":"7"}"#).unwrap_err();
        assert_eq!(e.column, "\"id\"", "{e}");
        assert!(decode_row(&cols, r#"{"id":1.5}"#).is_err());
        assert!(decode_row(&cols, "[]").unwrap_err().column.is_empty());
    }

    #[test]
    fn decimal_keeps_precision_as_a_string() {
        let t = SqlType::Decimal {
            precision: 10,
            scale: 2,
        };
        let d = |u| SqlValue::Decimal { unscaled: u, scale: 2 };
        assert_eq!(one(t.clone(), r#""12.3""#).unwrap(), d(1230));
        assert_eq!(one(t.clone(), r#""-0.05""#).unwrap(), d(-5));
        assert_eq!(one(t.clone(), r#""+7""#).unwrap(), d(700));
        assert_eq!(one(t.clone(), r#""7.""#).unwrap(), d(700));
        assert_eq!(one(t.clone(), r#"".5""#).unwrap(), d(50));
        assert_eq!(
            one(t.clone(), r#""1.2300""#).unwrap(),
            d(123),
            "trailing zeros are exact"
        );
        assert_eq!(one(t.clone(), "42").unwrap(), d(4200), "an integer number is exact");
        assert_eq!(out(t.clone(), d(-5)).unwrap(), r#""-0.05""#);
        assert_eq!(out(t.clone(), d(9_999_999_999)).unwrap(), r#""99999999.99""#);
        assert_eq!(
            out(t.clone(), SqlValue::Decimal { unscaled: 5, scale: 0 }).unwrap(),
            r#""5.00""#
        );
        // 38 digits survive both ways.
        let wide = SqlType::Decimal {
            precision: 38,
            scale: 10,
        };
        let text = r#""1234567890123456789012345678.0123456789""#;
        let v = one(wide.clone(), text).unwrap();
        assert_eq!(out(wide.clone(), v).unwrap(), text);
        // Overflow, extra digits, fractions as numbers, garbage: named.
        for bad in [
            r#""123456789.1""#,
            r#""1.234""#,
            "1.5",
            "1e3",
            r#""""#,
            r#""1.2.3""#,
            r#""1e3""#,
            r#""-""#,
            r#"".""#,
            r#"" 1""#,
            "true",
            "99999999999",
        ] {
            let e = one(t.clone(), bad).unwrap_err();
            assert_eq!(e.column, "\"c\"", "{bad}: {e}");
        }
        assert!(one(t.clone(), r#""123456789.1""#)
            .unwrap_err()
            .reason
            .contains("overflows DECIMAL(10, 2)"));
        assert!(out(t.clone(), d(10_000_000_000))
            .unwrap_err()
            .reason
            .contains("overflows"));
        assert!(out(t, SqlValue::Decimal { unscaled: 1, scale: 3 }).is_err());
    }

    #[test]
    fn timestamps_with_and_without_a_zone() {
        let ntz = SqlType::Timestamp { with_time_zone: false };
        let tz = SqlType::Timestamp { with_time_zone: true };
        let at = |s: &str| one(ntz.clone(), &format!("{s:?}")).unwrap();
        // 2024-02-29T23:59:58.123 = 1709251198.123 s.
        let base = SqlValue::Timestamp(1_709_251_198_123_000);
        assert_eq!(at("2024-02-29T23:59:58.123"), base);
        assert_eq!(at("2024-02-29 23:59:58.123000000"), base);
        assert_eq!(at("1970-01-01T00:00"), SqlValue::Timestamp(0));
        assert_eq!(at("1969-12-31T23:59:59.999999"), SqlValue::Timestamp(-1));
        assert_eq!(at("0001-01-01T00:00:00"), SqlValue::Timestamp(-62_135_596_800_000_000));
        assert_eq!(out(ntz.clone(), base.clone()).unwrap(), r#""2024-02-29T23:59:58.123""#);
        assert_eq!(
            out(ntz.clone(), SqlValue::Timestamp(-1)).unwrap(),
            r#""1969-12-31T23:59:59.999999""#
        );
        let z = |s: &str| one(tz.clone(), &format!("{s:?}")).unwrap();
        assert_eq!(z("2024-03-01T00:59:58.123+01:00"), base);
        assert_eq!(z("2024-02-29T23:59:58.123Z"), base);
        assert_eq!(z("2024-02-29T18:29:58.123-0530"), base);
        assert_eq!(z("2024-03-01T01:59:58.123+02"), base);
        assert_eq!(out(tz.clone(), base).unwrap(), r#""2024-02-29T23:59:58.123Z""#);
        for bad in [
            "2023-02-29T00:00:00",
            "2024-13-01T00:00:00",
            "2024-01-01T24:00:00",
            "2024-01-01T23:60:00",
            "2024-01-01T23:59:60",
            "2024-01-01",
            "2024-01-01T00:00:00.",
            "2024-01-01T00:00:00.1234567891",
            "2024-01-01T00:00:00.0000001",
            "2024-01-01X00:00:00",
            "24-01-01T00:00:00",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00+01:00",
        ] {
            let e = one(ntz.clone(), &format!("{bad:?}")).unwrap_err();
            assert_eq!(e.column, "\"c\"", "{bad}: {e}");
        }
        for bad in [
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+24:00",
            "2024-01-01T00:00:00+1",
            "2024-01-01T00:00:00Zx",
        ] {
            assert!(one(tz.clone(), &format!("{bad:?}")).is_err(), "{bad}");
        }
        assert!(one(tz.clone(), "1709251198").is_err(), "a number is not a timestamp");
        assert!(out(tz, SqlValue::Timestamp(i64::MAX)).is_err(), "beyond year 9999");
    }

    #[test]
    fn dates_times_and_bytes() {
        assert_eq!(one(SqlType::Date, r#""2024-02-29""#).unwrap(), SqlValue::Date(19_782));
        assert_eq!(one(SqlType::Date, r#""1969-12-31""#).unwrap(), SqlValue::Date(-1));
        assert_eq!(out(SqlType::Date, SqlValue::Date(19_782)).unwrap(), r#""2024-02-29""#);
        for bad in [r#""2024-2-29""#, r#""2024-02-30""#, r#""2024-02-29T00:00""#, "19782"] {
            assert!(one(SqlType::Date, bad).is_err(), "{bad}");
        }
        assert_eq!(
            one(SqlType::Time, r#""13:45:00.5""#).unwrap(),
            SqlValue::Time(49_500_500_000)
        );
        assert_eq!(
            one(SqlType::Time, r#""13:45""#).unwrap(),
            SqlValue::Time(49_500_000_000)
        );
        assert_eq!(
            out(SqlType::Time, SqlValue::Time(49_500_500_000)).unwrap(),
            r#""13:45:00.500""#
        );
        assert_eq!(
            out(SqlType::Time, SqlValue::Time(49_500_000_001)).unwrap(),
            r#""13:45:00.000001""#
        );
        for bad in [r#""25:00""#, r#""1:00""#, r#""12:00:00Z""#, r#""12:00:00.1234567""#] {
            assert!(one(SqlType::Time, bad).is_err(), "{bad}");
        }
        assert!(out(SqlType::Time, SqlValue::Time(MICROS_PER_DAY)).is_err());
        let b = SqlValue::Bytes(vec![0, 1, 254, 255]);
        assert_eq!(out(SqlType::Bytes, b.clone()).unwrap(), r#""AAH+/w==""#);
        assert_eq!(one(SqlType::Bytes, r#""AAH+/w==""#).unwrap(), b);
        for bad in [r#""AAH+/w""#, r#""AAH-_w==""#, r#""!!""#, "[0,1]"] {
            assert!(one(SqlType::Bytes, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn arrays_and_rows_nest_and_name_the_path() {
        let t = SqlType::Row(vec![
            col("zip", SqlType::String),
            col("tags", SqlType::Array(Box::new(SqlType::Integer))),
            col(
                "at",
                SqlType::Array(Box::new(SqlType::Row(vec![col("d", SqlType::Date)]))),
            ),
        ]);
        let v = SqlValue::Row(vec![
            SqlValue::String("10115".into()),
            SqlValue::Array(vec![SqlValue::Integer(1), SqlValue::Null]),
            SqlValue::Array(vec![SqlValue::Row(vec![SqlValue::Date(0)])]),
        ]);
        let text = out(t.clone(), v.clone()).unwrap();
        assert_eq!(text, r#"{"zip":"10115","tags":[1,null],"at":[{"d":"1970-01-01"}]}"#);
        assert_eq!(one(t.clone(), &text).unwrap(), v);
        // Missing fields are null, extra ignored.
        assert_eq!(
            one(t.clone(), r#"{"x":1}"#).unwrap(),
            SqlValue::Row(vec![SqlValue::Null, SqlValue::Null, SqlValue::Null])
        );
        let e = one(t.clone(), r#"{"tags":[1,"2"]}"#).unwrap_err();
        assert_eq!(e.column, r#""c"."tags"[1]"#, "{e}");
        let e = one(t.clone(), r#"{"at":[{"d":"1970-01-01"},{"d":"x"}]}"#).unwrap_err();
        assert_eq!(e.column, r#""c"."at"[1]."d""#, "{e}");
        assert!(one(t.clone(), "[]").is_err());
        let e = out(t, SqlValue::Row(vec![SqlValue::Null])).unwrap_err();
        assert!(e.reason.contains("1 fields for 3"), "{e}");
    }

    #[test]
    fn row_kind_errors_name_the_field() {
        let cols = [col("a", SqlType::Integer)];
        assert_eq!(
            decode_row(&cols, r#"{"__row_kind":"nope"}"#).unwrap_err().column,
            ROW_KIND_FIELD
        );
        assert_eq!(
            decode_row(&cols, r#"{"__row_kind":1}"#).unwrap_err().column,
            ROW_KIND_FIELD
        );
        assert!(decode_row(&cols, "{").unwrap_err().reason.starts_with("not JSON"));
    }

    #[test]
    fn civil_conversions_agree_over_the_range() {
        for days in (-719_528..2_932_897).step_by(997) {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
            assert!(d >= 1 && d <= days_in_month(y, m));
        }
    }
}
