//! The columnar JSON bridge (the spec's `json_string_to_row_columnar`,
//! `columnar_decode`): a batch of JSON texts decoded straight into typed
//! column vectors ([`ColumnBatch`]) plus a sidecar (row kinds, and the
//! records' partitions and offsets), with no per-record JSON tree.
//!
//! It is exactly equivalent to the row decode
//! ([`super::sql::decode_row`]): [`ColumnBatch::to_rows`] gives the
//! rows the row decode gives for the same texts, or the batch is refused
//! and the caller takes the row decode. By construction:
//!
//! - both read the text with the same `serde_json` deserializer, and a
//!   column's value is built from the same visitor call the row decode's
//!   `Value` is built from (numbers included);
//! - an incapable schema is never tried: a FLOAT/REAL column (a column
//!   vector would hold 32 bits), DECIMAL, ARRAY and ROW columns, a name
//!   starting with `__` (reserved for `__row_kind`), a name declared twice;
//! - a record the typed path cannot reproduce exactly — a column or
//!   `__row_kind` given twice (the row decode keeps the last), any value
//!   that does not fit its column, any record that is not a JSON object —
//!   refuses the whole batch; the row decode then reads the batch and its
//!   errors take the `decode_error` policy, so an error is always the row
//!   decode's own, naming the column.
//!
//! The adaptive damper ([`Damper`]): after a refused batch the next
//! 1, 2, 4, … 64 batches go straight to the row decode (the penalty
//! doubles on each refusal and resets on a batch decoded column-wise), so a
//! systematically unfaithful stream pays the double parse on at most one
//! batch in 65.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::json_row::{parse_base64, parse_date, parse_time, parse_timestamp, Column, Row, SqlType, SqlValue};
use super::upsert::{RowKind, ROW_KIND_FIELD};

/// The most batches a refusal sends straight to the row decode.
pub const MAX_DAMPING: u32 = 64;

/// One column's values (a null slot holds the type's zero).
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnData {
    /// BIGINT / INT / SMALLINT / TINYINT values.
    Integer(Vec<i64>),
    /// DOUBLE values.
    Double(Vec<f64>),
    /// BOOLEAN values.
    Boolean(Vec<bool>),
    /// Value `i` is `data[offsets[i]..offsets[i + 1]]` (Arrow's layout).
    Utf8 {
        /// `values.len() + 1` byte offsets into `data`, starting at 0.
        offsets: Vec<usize>,
        /// Every value's text, concatenated.
        data: String,
    },
    /// Microseconds (see [`SqlValue::Timestamp`]).
    Timestamp {
        /// Whether the column is `TIMESTAMP WITH TIME ZONE` (`TIMESTAMP_LTZ`).
        with_time_zone: bool,
        /// Microseconds since the Unix epoch, one per row.
        values: Vec<i64>,
    },
    /// Days since 1970-01-01.
    Date(Vec<i32>),
    /// Microseconds since midnight.
    Time(Vec<i64>),
    /// Value `i` is `data[offsets[i]..offsets[i + 1]]`.
    Binary {
        /// `values.len() + 1` byte offsets into `data`, starting at 0.
        offsets: Vec<usize>,
        /// Every value's bytes, concatenated.
        data: Vec<u8>,
    },
}

impl ColumnData {
    fn for_type(t: &SqlType, capacity: usize) -> Option<ColumnData> {
        let offsets = || {
            let mut o = Vec::with_capacity(capacity + 1);
            o.push(0);
            o
        };
        Some(match t {
            SqlType::Integer => ColumnData::Integer(Vec::with_capacity(capacity)),
            SqlType::Double => ColumnData::Double(Vec::with_capacity(capacity)),
            SqlType::Boolean => ColumnData::Boolean(Vec::with_capacity(capacity)),
            SqlType::String => ColumnData::Utf8 {
                offsets: offsets(),
                data: String::new(),
            },
            SqlType::Timestamp { with_time_zone } => ColumnData::Timestamp {
                with_time_zone: *with_time_zone,
                values: Vec::with_capacity(capacity),
            },
            SqlType::Date => ColumnData::Date(Vec::with_capacity(capacity)),
            SqlType::Time => ColumnData::Time(Vec::with_capacity(capacity)),
            SqlType::Bytes => ColumnData::Binary {
                offsets: offsets(),
                data: Vec::new(),
            },
            SqlType::Float | SqlType::Decimal { .. } | SqlType::Array(_) | SqlType::Row(_) => return None,
        })
    }

    fn push_null(&mut self) {
        match self {
            ColumnData::Integer(v) | ColumnData::Timestamp { values: v, .. } | ColumnData::Time(v) => v.push(0),
            ColumnData::Double(v) => v.push(0.0),
            ColumnData::Boolean(v) => v.push(false),
            ColumnData::Date(v) => v.push(0),
            ColumnData::Utf8 { offsets, data } => offsets.push(data.len()),
            ColumnData::Binary { offsets, data } => offsets.push(data.len()),
        }
    }

    fn value(&self, i: usize) -> SqlValue {
        match self {
            ColumnData::Integer(v) => SqlValue::Integer(v[i]),
            ColumnData::Double(v) => SqlValue::Double(v[i]),
            ColumnData::Boolean(v) => SqlValue::Boolean(v[i]),
            ColumnData::Utf8 { offsets, data } => SqlValue::String(data[offsets[i]..offsets[i + 1]].to_owned()),
            ColumnData::Timestamp { values, .. } => SqlValue::Timestamp(values[i]),
            ColumnData::Date(v) => SqlValue::Date(v[i]),
            ColumnData::Time(v) => SqlValue::Time(v[i]),
            ColumnData::Binary { offsets, data } => SqlValue::Bytes(data[offsets[i]..offsets[i + 1]].to_vec()),
        }
    }
}

/// A typed column vector and its validity (`false`: null).
#[derive(Clone, Debug, PartialEq)]
pub struct TypedColumn {
    /// The column's name, as declared.
    pub name: String,
    /// One flag per row: `false` where the value is null.
    pub validity: Vec<bool>,
    /// The values, one slot per row.
    pub data: ColumnData,
}

/// Per-row facts beside the columns: the row kind, and where the record
/// came from (filled by the source; empty from [`ColumnarPlan::decode`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sidecar {
    /// Each row's kind (`__row_kind`, insert when absent).
    pub kinds: Vec<RowKind>,
    /// Each row's source partition.
    pub partitions: Vec<i32>,
    /// Each row's source offset.
    pub offsets: Vec<i64>,
}

/// A batch decoded column-wise.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnBatch {
    /// The table's columns, in declaration order.
    pub columns: Vec<TypedColumn>,
    /// Per-row facts beside the columns.
    pub sidecar: Sidecar,
    rows: usize,
}

impl ColumnBatch {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Row `i` as the row decode gives it.
    pub fn row(&self, i: usize) -> Row {
        Row {
            kind: self.sidecar.kinds[i],
            values: self
                .columns
                .iter()
                .map(|c| if c.validity[i] { c.data.value(i) } else { SqlValue::Null })
                .collect(),
        }
    }

    /// Every row, in order.
    pub fn to_rows(&self) -> Vec<Row> {
        (0..self.rows).map(|i| self.row(i)).collect()
    }
}

/// Why a schema is left to the row decode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incapable {
    /// The first column that makes the schema incapable.
    pub column: String,
    /// Why (e.g. `FLOAT is not decoded column-wise`).
    pub reason: &'static str,
}

impl fmt::Display for Incapable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column {:?}: {}", self.column, self.reason)
    }
}

/// A capable schema, ready to decode batches.
#[derive(Clone, Debug)]
pub struct ColumnarPlan {
    columns: Vec<Column>,
}

impl ColumnarPlan {
    /// The plan for `columns`, or why the schema is incapable.
    pub fn new(columns: &[Column]) -> Result<ColumnarPlan, Incapable> {
        for (i, c) in columns.iter().enumerate() {
            let incapable = |reason| {
                Err(Incapable {
                    column: c.name.clone(),
                    reason,
                })
            };
            if c.name.starts_with("__") {
                return incapable("names starting with __ are reserved");
            }
            if columns[..i].iter().any(|d| d.name == c.name) {
                return incapable("declared twice");
            }
            match c.data_type {
                SqlType::Float => return incapable("FLOAT/REAL columns are left to the row decode"),
                SqlType::Decimal { .. } => return incapable("DECIMAL columns are left to the row decode"),
                SqlType::Array(_) | SqlType::Row(_) => {
                    return incapable("ARRAY and ROW columns are left to the row decode")
                }
                _ => {}
            }
        }
        Ok(ColumnarPlan {
            columns: columns.to_vec(),
        })
    }

    /// Decodes `texts` column-wise; `None` when a record does not
    /// round-trip exactly (the caller takes the row decode for the batch).
    pub fn decode<'t>(&self, texts: impl ExactSizeIterator<Item = &'t str>) -> Option<ColumnBatch> {
        let rows = texts.len();
        let mut columns: Vec<TypedColumn> = self
            .columns
            .iter()
            .map(|c| TypedColumn {
                name: c.name.clone(),
                validity: Vec::with_capacity(rows),
                // A plan holds capable types only.
                data: ColumnData::for_type(&c.data_type, rows).unwrap_or(ColumnData::Integer(Vec::new())),
            })
            .collect();
        let mut kinds = Vec::with_capacity(rows);
        let mut seen = vec![false; self.columns.len()];
        for text in texts {
            seen.fill(false);
            let mut kind = None;
            let mut de = serde_json::Deserializer::from_str(text);
            let record = RecordSeed {
                plan: self,
                columns: &mut columns,
                seen: &mut seen,
                kind: &mut kind,
            };
            if record.deserialize(&mut de).is_err() || de.end().is_err() {
                return None;
            }
            for (c, seen) in columns.iter_mut().zip(&seen) {
                if !seen {
                    c.validity.push(false);
                    c.data.push_null();
                }
            }
            kinds.push(kind.unwrap_or(RowKind::Insert));
        }
        Some(ColumnBatch {
            columns,
            sidecar: Sidecar {
                kinds,
                ..Sidecar::default()
            },
            rows,
        })
    }
}

/// The refusal the typed path raises; its text never reaches a user (the
/// row decode re-reads the batch and reports its own error).
#[derive(Debug)]
struct Unfaithful;

impl fmt::Display for Unfaithful {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not exactly representable column-wise")
    }
}

impl std::error::Error for Unfaithful {}

impl de::Error for Unfaithful {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Unfaithful
    }
}

fn refuse<E: de::Error>() -> E {
    E::custom(Unfaithful)
}

struct RecordSeed<'p> {
    plan: &'p ColumnarPlan,
    columns: &'p mut [TypedColumn],
    seen: &'p mut [bool],
    kind: &'p mut Option<RowKind>,
}

enum Key {
    Column(usize),
    RowKind,
    Other,
}

struct KeySeed<'p>(&'p ColumnarPlan);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Key;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Key;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Key, E> {
        if key == ROW_KIND_FIELD {
            return Ok(Key::RowKind);
        }
        Ok(match self.0.columns.iter().position(|c| c.name == key) {
            Some(i) => Key::Column(i),
            None => Key::Other,
        })
    }
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeySeed(self.plan))? {
            match key {
                Key::Column(i) => {
                    if std::mem::replace(&mut self.seen[i], true) {
                        return Err(refuse());
                    }
                    map.next_value_seed(ValueSeed(&mut self.columns[i]))?;
                }
                Key::RowKind => {
                    if self.kind.is_some() {
                        return Err(refuse());
                    }
                    *self.kind = Some(map.next_value_seed(KindSeed)?);
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct KindSeed;

impl<'de> DeserializeSeed<'de> for KindSeed {
    type Value = RowKind;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RowKind, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KindSeed {
    type Value = RowKind;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row kind")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<RowKind, E> {
        RowKind::parse(s).ok_or_else(refuse)
    }
}

/// One value into its column; every visit the row decode's `Value` would
/// take the same way, everything else refused.
struct ValueSeed<'c>(&'c mut TypedColumn);

impl<'de> DeserializeSeed<'de> for ValueSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl ValueSeed<'_> {
    fn valid(self) -> Self {
        self.0.validity.push(true);
        self
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a column value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.0.validity.push(false);
        self.0.data.push_null();
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        match &mut self.valid().0.data {
            ColumnData::Boolean(v) => v.push(b),
            _ => return Err(refuse()),
        }
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, i: i64) -> Result<(), E> {
        match &mut self.valid().0.data {
            ColumnData::Integer(v) => v.push(i),
            ColumnData::Double(v) => v.push(i as f64),
            _ => return Err(refuse()),
        }
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, u: u64) -> Result<(), E> {
        match &mut self.valid().0.data {
            ColumnData::Integer(v) => v.push(i64::try_from(u).map_err(|_| refuse::<E>())?),
            ColumnData::Double(v) => v.push(u as f64),
            _ => return Err(refuse()),
        }
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, d: f64) -> Result<(), E> {
        match &mut self.valid().0.data {
            ColumnData::Double(v) => v.push(d),
            _ => return Err(refuse()),
        }
        Ok(())
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        match &mut self.valid().0.data {
            ColumnData::Utf8 { offsets, data } => {
                data.push_str(s);
                offsets.push(data.len());
            }
            ColumnData::Timestamp { with_time_zone, values } => {
                values.push(parse_timestamp(s, *with_time_zone).map_err(|_| refuse::<E>())?)
            }
            ColumnData::Date(v) => v.push(parse_date(s).map_err(|_| refuse::<E>())?),
            ColumnData::Time(v) => v.push(parse_time(s).map_err(|_| refuse::<E>())?),
            ColumnData::Binary { offsets, data } => {
                data.extend_from_slice(&parse_base64(s).map_err(|_| refuse::<E>())?);
                offsets.push(data.len());
            }
            _ => return Err(refuse()),
        }
        Ok(())
    }
}

/// The damper in front of the columnar decode: after a refusal, the next
/// `penalty` batches skip the attempt; the penalty doubles (1 … 64) on each
/// refusal and resets on a success.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Damper {
    penalty: u32,
    skip: u32,
}

impl Damper {
    /// Whether to try the columnar decode on this batch (counts a skip).
    pub fn should_try(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        true
    }

    /// The attempt's outcome.
    pub fn record(&mut self, faithful: bool) {
        if faithful {
            self.penalty = 0;
        } else {
            self.penalty = (self.penalty * 2).clamp(1, MAX_DAMPING);
            self.skip = self.penalty;
        }
    }
}

/// What the bridge did with each batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Batches decoded column-wise.
    pub columnar: u64,
    /// Batches tried column-wise and refused (then row-decoded).
    pub refused: u64,
    /// Batches the damper sent straight to the row decode.
    pub damped: u64,
    /// Batches of an incapable schema (row-decoded, never tried).
    pub incapable: u64,
}

/// The columnar bridge of one source: the plan (or why there is none),
/// the damper and the counts.
#[derive(Clone, Debug)]
pub struct ColumnarBridge {
    plan: Result<ColumnarPlan, Incapable>,
    damper: Damper,
    stats: BridgeStats,
}

impl ColumnarBridge {
    /// A bridge for the table's `columns`; an incapable schema always falls back to the row decode.
    pub fn new(columns: &[Column]) -> ColumnarBridge {
        ColumnarBridge {
            plan: ColumnarPlan::new(columns),
            damper: Damper::default(),
            stats: BridgeStats::default(),
        }
    }

    /// Why the schema is left to the row decode, if it is.
    pub fn incapable(&self) -> Option<&Incapable> {
        self.plan.as_ref().err()
    }

    /// Counts so far: batches decoded column-wise, refused, damped, incapable.
    pub fn stats(&self) -> BridgeStats {
        self.stats
    }

    /// The batch column-wise, or `None`: the caller row-decodes it.
    pub fn try_decode<'t>(&mut self, texts: impl ExactSizeIterator<Item = &'t str>) -> Option<ColumnBatch> {
        let plan = match &self.plan {
            Ok(plan) => plan,
            Err(_) => {
                self.stats.incapable += 1;
                return None;
            }
        };
        if !self.damper.should_try() {
            self.stats.damped += 1;
            return None;
        }
        let batch = plan.decode(texts);
        self.damper.record(batch.is_some());
        if batch.is_some() {
            self.stats.columnar += 1;
        } else {
            self.stats.refused += 1;
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::connector::json_row::decode_row;

    fn capable() -> Vec<Column> {
        vec![
            Column::new("id", SqlType::Integer),
            Column::new("name", SqlType::String),
            Column::new("score", SqlType::Double),
            Column::new("ok", SqlType::Boolean),
            Column::new("at", SqlType::Timestamp { with_time_zone: true }),
            Column::new("local", SqlType::Timestamp { with_time_zone: false }),
            Column::new("day", SqlType::Date),
            Column::new("t", SqlType::Time),
            Column::new("raw", SqlType::Bytes),
        ]
    }

    fn rows(columns: &[Column], texts: &[&str]) -> Vec<Row> {
        texts.iter().map(|t| decode_row(columns, t).unwrap()).collect()
    }

    #[test]
    fn a_capable_batch_gives_the_row_decodes_rows() {
        let columns = capable();
        let texts = [
            r#"{"id":1,"name":"a","score":1.5,"ok":true,"at":"2024-01-01T00:00:00+01:00","local":"2024-01-01 00:00",
                "day":"2024-02-29","t":"12:00:00.000001","raw":"AAE="}"#,
            r#"{"id":-9223372036854775808,"name":"é\"\u00e9\n","score":18446744073709551615,"ok":null}"#,
            r#"{"score":-0,"extra":{"deep":[1,2,{"x":null}]},"__row_kind":"-U","name":""}"#,
            r#" { "sc\u006fre" : 1e300 , "id" : 9223372036854775807 } "#,
            r#"{"score":-0.0,"__row_kind":"delete","unknown":"\ud83d\ude00"}"#,
            "{}",
        ];
        let batch = ColumnarPlan::new(&columns)
            .unwrap()
            .decode(texts.iter().copied())
            .unwrap();
        assert_eq!(batch.len(), texts.len());
        let expected = rows(&columns, &texts);
        let got = batch.to_rows();
        assert_eq!(got, expected);
        // -0 and -0.0 keep their sign bit, as in the row decode.
        for (g, e) in got.iter().zip(&expected) {
            if let (SqlValue::Double(g), SqlValue::Double(e)) = (&g.values[2], &e.values[2]) {
                assert_eq!(g.to_bits(), e.to_bits());
            }
        }
        assert_eq!(batch.sidecar.kinds[2], RowKind::UpdateBefore);
        match &batch.columns[1].data {
            ColumnData::Utf8 { offsets, data } => {
                assert_eq!(offsets.len(), texts.len() + 1);
                assert_eq!(&data[..], "aé\"é\n");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn incapable_schemas_are_named() {
        let with = |c: Column| {
            let mut cs = capable();
            cs.push(c);
            ColumnarPlan::new(&cs).unwrap_err()
        };
        assert!(with(Column::new("f", SqlType::Float)).reason.contains("FLOAT"));
        let d = with(Column::new("d", SqlType::Decimal { precision: 5, scale: 2 }));
        assert_eq!(d.column, "d");
        assert!(d.reason.contains("DECIMAL"));
        assert!(with(Column::new("a", SqlType::Array(Box::new(SqlType::Integer))))
            .reason
            .contains("ARRAY"));
        assert!(with(Column::new("r", SqlType::Row(vec![]))).reason.contains("ROW"));
        assert!(with(Column::new("__x", SqlType::Integer)).reason.contains("__"));
        assert!(with(Column::new("id", SqlType::String)).reason.contains("twice"));
        let mut bridge = ColumnarBridge::new(&[Column::new("f", SqlType::Float)]);
        assert!(bridge.incapable().is_some());
        assert!(bridge.try_decode(["{}"].into_iter()).is_none());
        assert_eq!(bridge.stats().incapable, 1);
    }

    #[test]
    fn records_that_do_not_round_trip_refuse_the_batch() {
        let columns = capable();
        let plan = ColumnarPlan::new(&columns).unwrap();
        for bad in [
            r#"{"id":1,"id":2}"#,
            r#"{"id":1,"i\u0064":2}"#,
            r#"{"__row_kind":"insert","__row_kind":"delete"}"#,
            r#"{"__row_kind":"sideways"}"#,
            r#"{"__row_kind":null}"#,
            r#"{"id":1.0}"#,
            r#"{"id":9223372036854775808}"#,
            r#"{"id":"1"}"#,
            r#"{"ok":1}"#,
            r#"{"at":"2024-01-01T00:00:00"}"#,
            r#"{"local":"2024-01-01T00:00:00Z"}"#,
            r#"{"day":"2024-02-30"}"#,
            r#"{"raw":"A"}"#,
            r#"{"name":["x"]}"#,
            r#"{"id":1} x"#,
            r#"{"id":1"#,
            "[1]",
            "null",
            "",
        ] {
            assert!(plan.decode(["{}", bad].into_iter()).is_none(), "{bad}");
        }
        // The duplicate key the row decode resolves (last wins) is read the
        // same way by the fallback.
        let dup = r#"{"id":1,"id":2}"#;
        assert_eq!(decode_row(&columns, dup).unwrap().values[0], SqlValue::Integer(2));
    }

    #[test]
    fn the_damper_backs_off_and_resets() {
        let columns = [Column::new("id", SqlType::Integer)];
        let mut bridge = ColumnarBridge::new(&columns);
        let bad = || [r#"{"id":"x"}"#].into_iter();
        let good = || [r#"{"id":1}"#].into_iter();
        // Refusals at batches 0, 2, 5, 10, 19, 36, 69, 134, 199 (penalties
        // 1, 2, 4, 8, 16, 32, 64, 64, …).
        let mut tried = Vec::new();
        for i in 0..200 {
            let before = bridge.stats().refused;
            assert!(bridge.try_decode(bad()).is_none());
            if bridge.stats().refused > before {
                tried.push(i);
            }
        }
        assert_eq!(tried, [0, 2, 5, 10, 19, 36, 69, 134, 199]);
        let s = bridge.stats();
        assert_eq!((s.refused, s.damped, s.columnar), (9, 191, 0));
        // Damped until the penalty is served, then a good batch resets it.
        let mut waited = 0;
        while bridge.try_decode(good()).is_none() {
            waited += 1;
            assert!(waited <= MAX_DAMPING);
        }
        assert_eq!(waited, 64);
        assert!(bridge.try_decode(bad()).is_none());
        assert!(
            bridge.try_decode(good()).is_none(),
            "one batch damped after a fresh refusal"
        );
        assert!(bridge.try_decode(good()).is_some());
    }

    /// A JSON fragment for a column: a fitting value, a null, a wrong-typed
    /// or malformed one.
    fn fragment(t: &SqlType) -> BoxedStrategy<String> {
        let fitting: BoxedStrategy<String> = match t {
            SqlType::Integer => any::<i64>().prop_map(|i| i.to_string()).boxed(),
            SqlType::Double => prop_oneof![
                any::<f64>()
                    .prop_filter("finite", |d| d.is_finite())
                    .prop_map(|d| format!("{d:?}")),
                any::<i64>().prop_map(|i| i.to_string()),
                any::<u64>().prop_map(|u| u.to_string()),
                Just("-0".to_owned()),
                Just("1e-400".to_owned()),
            ]
            .boxed(),
            SqlType::Boolean => any::<bool>().prop_map(|b| b.to_string()).boxed(),
            SqlType::String => "[a-zé\"\\\\\n\u{1F600}]{0,6}"
                .prop_map(|s| serde_json::to_string(&s).unwrap())
                .boxed(),
            SqlType::Timestamp { with_time_zone } => {
                let zone = if *with_time_zone { "Z" } else { "" };
                (0u32..10_000, 1u32..13, 1u32..32, 0u32..24, 0u32..1_000_000)
                    .prop_map(move |(y, m, d, h, us)| format!("\"{y:04}-{m:02}-{d:02}T{h:02}:30:00.{us:06}{zone}\""))
                    .boxed()
            }
            SqlType::Date => (0u32..10_000, 1u32..13, 1u32..32)
                .prop_map(|(y, m, d)| format!("\"{y:04}-{m:02}-{d:02}\""))
                .boxed(),
            SqlType::Time => (0u32..25, 0u32..61)
                .prop_map(|(h, m)| format!("\"{h:02}:{m:02}\""))
                .boxed(),
            SqlType::Bytes => proptest::collection::vec(any::<u8>(), 0..8)
                .prop_map(|b| {
                    format!(
                        "\"{}\"",
                        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b)
                    )
                })
                .boxed(),
            _ => Just("null".to_owned()).boxed(),
        };
        prop_oneof![
            8 => fitting,
            1 => Just("null".to_owned()),
            1 => prop_oneof![
                Just("\"x\"".to_owned()),
                Just("1.5".to_owned()),
                Just("[]".to_owned()),
                Just("{}".to_owned()),
                Just("true".to_owned()),
                Just("18446744073709551615".to_owned()),
            ],
        ]
        .boxed()
    }

    /// A record: each column present (maybe twice) or absent, extra
    /// fields, maybe a row kind, in a shuffled order.
    fn record(columns: Vec<Column>) -> BoxedStrategy<String> {
        let fields: Vec<BoxedStrategy<Vec<String>>> = columns
            .iter()
            .map(|c| {
                let name = serde_json::to_string(&c.name).unwrap();
                let one = fragment(&c.data_type).prop_map(move |v| format!("{name}:{v}"));
                // Absent, present, or (less often) given twice.
                prop_oneof![3 => proptest::collection::vec(one.clone(), 0..=1), 1 => proptest::collection::vec(one, 2..=2)]
                    .boxed()
            })
            .collect();
        let kind = prop_oneof![
            6 => Just(vec![]),
            1 => Just(vec![r#""__row_kind":"+U""#.to_owned()]),
            1 => Just(vec![r#""__row_kind":"bogus""#.to_owned()]),
        ];
        let extra = prop_oneof![Just(vec![]), Just(vec![r#""zz":[1,{"a":null}]"#.to_owned()])];
        (fields, kind, extra, any::<u64>())
            .prop_map(|(fields, kind, extra, seed)| {
                let mut all: Vec<String> = fields.into_iter().flatten().chain(kind).chain(extra).collect();
                // A deterministic shuffle from the seed.
                let mut s = seed;
                for i in (1..all.len()).rev() {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    all.swap(i, (s >> 33) as usize % (i + 1));
                }
                format!("{{{}}}", all.join(","))
            })
            .boxed()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Both settings give the same rows: a batch the columnar decode
        /// accepts is the row decode's rows; one it refuses has a record
        /// the row decode refuses or reads a duplicated key of.
        #[test]
        fn columnar_equals_row(texts in proptest::collection::vec(record(capable()), 1..6)) {
            let columns = capable();
            let plan = ColumnarPlan::new(&columns).unwrap();
            let row: Vec<_> = texts.iter().map(|t| decode_row(&columns, t)).collect();
            match plan.decode(texts.iter().map(String::as_str)) {
                Some(batch) => {
                    let expected: Vec<Row> = row.into_iter().map(|r| r.expect("columnar accepted a record the row decode refuses")).collect();
                    prop_assert_eq!(batch.to_rows(), expected);
                }
                None => {
                    let explained = row.iter().any(Result::is_err) || texts.iter().any(|t| {
                        let names: Vec<String> = columns.iter().map(|c| format!("\"{}\":", c.name)).chain([format!("\"{ROW_KIND_FIELD}\":")]).collect();
                        names.iter().any(|n| t.matches(n.as_str()).count() > 1)
                    });
                    prop_assert!(explained, "refused a batch the row decode reads plainly: {:?}", texts);
                }
            }
        }
    }
}
