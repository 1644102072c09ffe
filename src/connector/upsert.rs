//! [`UpsertSink`] (`kafka_upsert_sink_string`): keyed at-least-once with
//! log-compaction semantics.
//!
//! Each row is a JSON object. Its `primary_key` fields become the message
//! key: one field gives that value's text (a string as is, anything else as
//! its JSON), several give a JSON array of the values in `primary_key`
//! order. The `__row_kind` field is the change kind:
//!
//! | `__row_kind` | emitted |
//! |---|---|
//! | absent, `insert` / `+I`, `update_after` / `+U` | the row minus `__row_kind`, keyed |
//! | `update_before` / `-U` | nothing (the `update_after` replaces it) |
//! | `delete` / `-D` | a tombstone: null value, keyed |
//!
//! A row that is not a JSON object, lacks a key field (or has it null), or
//! has an unknown `__row_kind` is counted in `skipped` and logged with its
//! position (the row's index in this sink's input since open); never
//! dropped silently.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::backend::{NativeProducer, ProducerBackend};
use super::error::Result;
use super::format::ValueEncoder;
use super::options::UpsertOptions;
use super::record::{KafkaMessage, Text};
use super::sink::open_encoder;
use super::sink::{KafkaSink, SinkCounters};
use super::{Batch, BoxFuture, Sink, SinkCapabilities, StateRow};

/// The change-kind field.
pub const ROW_KIND_FIELD: &str = "__row_kind";

/// A row's change kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// `insert` / `+I`: the row is written as the key's value.
    Insert,
    /// `update_before` / `-U`: the old row of an update; dropped (the `update_after` row follows).
    UpdateBefore,
    /// `update_after` / `+U`: the new row of an update; written as the key's value.
    UpdateAfter,
    /// `delete` / `-D`: written as a tombstone (null value) for the key.
    Delete,
}

impl RowKind {
    /// Parses a `__row_kind` value (case-insensitive; long or short form); `None` when unknown.
    pub fn parse(s: &str) -> Option<RowKind> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "insert" | "+i" => RowKind::Insert,
            "update_before" | "-u" => RowKind::UpdateBefore,
            "update_after" | "+u" => RowKind::UpdateAfter,
            "delete" | "-d" => RowKind::Delete,
            _ => return None,
        })
    }

    /// The long name: `insert`, `update_before`, `update_after` or `delete`.
    pub fn name(self) -> &'static str {
        match self {
            RowKind::Insert => "insert",
            RowKind::UpdateBefore => "update_before",
            RowKind::UpdateAfter => "update_after",
            RowKind::Delete => "delete",
        }
    }
}

/// What one row becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpsertAction {
    /// Produce this keyed record (a value, or a tombstone).
    Emit(KafkaMessage),
    /// `update_before`: nothing to produce.
    Drop,
    /// Unusable; the reason is logged with the row's position.
    Skip(String),
}

/// Turns one JSON row into what to produce.
pub fn upsert_action(row: &str, primary_key: &[String]) -> UpsertAction {
    let mut object: Map<String, Value> = match serde_json::from_str::<Value>(row) {
        Ok(Value::Object(o)) => o,
        Ok(other) => return UpsertAction::Skip(format!("not a JSON object (a {})", json_kind(&other))),
        Err(e) => return UpsertAction::Skip(format!("not JSON: {e}")),
    };
    let kind = match object.shift_remove(ROW_KIND_FIELD) {
        None => RowKind::Insert,
        Some(Value::String(s)) => match RowKind::parse(&s) {
            Some(k) => k,
            None => {
                return UpsertAction::Skip(format!(
                    "unknown {ROW_KIND_FIELD} {s:?} (insert, update_before, update_after, delete)"
                ))
            }
        },
        Some(other) => return UpsertAction::Skip(format!("{ROW_KIND_FIELD} is a {}, not a string", json_kind(&other))),
    };
    if kind == RowKind::UpdateBefore {
        return UpsertAction::Drop;
    }
    let key = match key_of(&object, primary_key) {
        Ok(k) => k,
        Err(reason) => return UpsertAction::Skip(reason),
    };
    match kind {
        RowKind::Delete => UpsertAction::Emit(KafkaMessage::tombstone(key)),
        _ => {
            let payload = Value::Object(object).to_string();
            UpsertAction::Emit(KafkaMessage::new(payload).with_key(key))
        }
    }
}

fn key_of(object: &Map<String, Value>, primary_key: &[String]) -> std::result::Result<Bytes, String> {
    let mut values = Vec::with_capacity(primary_key.len());
    for field in primary_key {
        match object.get(field) {
            None => return Err(format!("no key field {field:?}")),
            Some(Value::Null) => return Err(format!("key field {field:?} is null")),
            Some(v) => values.push(v),
        }
    }
    Ok(match values.as_slice() {
        [Value::String(s)] => Bytes::from(s.clone()),
        [v] => Bytes::from(v.to_string()),
        many => Bytes::from(Value::Array(many.iter().map(|v| (*v).clone()).collect()).to_string()),
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The upsert sink.
pub struct UpsertSink<B: ProducerBackend = NativeProducer> {
    inner: KafkaSink<B>,
    primary_key: Vec<String>,
    /// Rows seen since open: the position a skip is logged with.
    position: u64,
    skipped: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    /// `format = avro|…`: values encoded before they are sent (made at open).
    encoder: Option<ValueEncoder>,
}

impl<B: ProducerBackend> fmt::Debug for UpsertSink<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpsertSink")
            .field("inner", &self.inner)
            .field("primary_key", &self.primary_key)
            .finish_non_exhaustive()
    }
}

impl UpsertSink<NativeProducer> {
    /// An upsert sink over a native [`KafkaSink`] built from `options`.
    pub fn new(options: UpsertOptions) -> Result<Self> {
        Ok(UpsertSink::with_sink(
            KafkaSink::new(options.sink)?,
            options.primary_key,
        ))
    }
}

impl<B: ProducerBackend> UpsertSink<B> {
    /// An upsert sink over `inner`, keyed by the JSON fields `primary_key` in order.
    pub fn with_sink(inner: KafkaSink<B>, primary_key: Vec<String>) -> Self {
        UpsertSink {
            inner,
            primary_key,
            position: 0,
            skipped: Arc::default(),
            dropped: Arc::default(),
            encoder: None,
        }
    }

    /// Rows skipped as unusable.
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// `update_before` rows dropped.
    pub fn dropped_update_before(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The counters of the sink underneath.
    pub fn counters(&self) -> Arc<SinkCounters> {
        self.inner.counters()
    }

    async fn upsert(&mut self, batch: Batch<Text>) -> Result<()> {
        let mut out = Vec::with_capacity(batch.len());
        for row in batch {
            let position = self.position;
            self.position += 1;
            match upsert_action(row.as_str(), &self.primary_key) {
                UpsertAction::Emit(m) => out.push(m),
                UpsertAction::Drop => {
                    self.dropped.fetch_add(1, Ordering::Relaxed);
                }
                UpsertAction::Skip(reason) => {
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        topic = %self.inner.options().topic,
                        position,
                        reason = %reason,
                        "upsert sink skipped a row"
                    );
                }
            }
        }
        if let Some(e) = &self.encoder {
            e.encode_messages(&self.inner.options().topic, &mut out);
        }
        self.inner.send_batch(out).await
    }

    /// Rows refused because they do not fit the registry schema.
    pub fn refused_rows(&self) -> u64 {
        self.encoder.as_ref().map_or(0, ValueEncoder::refused)
    }
}

impl<B: ProducerBackend> Sink for UpsertSink<B> {
    type Item = Text;

    fn capabilities(&self) -> SinkCapabilities {
        self.inner.capabilities()
    }

    fn restore(&mut self, rows: &[StateRow]) -> Result<()> {
        self.inner.restore(rows)
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        self.position = 0;
        Box::pin(async move {
            open_encoder(&mut self.encoder, self.inner.options()).await?;
            self.inner.open_sink().await
        })
    }

    fn on_data(&mut self, batch: Batch<Text>) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.upsert(batch))
    }

    fn flush(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.flush()
    }

    fn on_barrier(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<Vec<StateRow>>> {
        self.inner.on_barrier(checkpoint_id)
    }

    fn on_commit(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        self.inner.on_commit(checkpoint_id)
    }

    fn on_abort(&mut self, checkpoint_id: u64) -> BoxFuture<'_, Result<()>> {
        self.inner.on_abort(checkpoint_id)
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk(f: &[&str]) -> Vec<String> {
        f.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn row_kinds() {
        let k = pk(&["id"]);
        match upsert_action(r#"{"id":7,"v":"a","__row_kind":"insert"}"#, &k) {
            UpsertAction::Emit(m) => {
                assert_eq!(m.key.as_deref(), Some(&b"7"[..]));
                assert_eq!(m.payload.as_deref(), Some(&br#"{"id":7,"v":"a"}"#[..]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            upsert_action(r#"{"id":"x","__row_kind":"delete"}"#, &k),
            UpsertAction::Emit(KafkaMessage::tombstone("x"))
        );
        assert_eq!(upsert_action(r#"{"id":1,"__row_kind":"-U"}"#, &k), UpsertAction::Drop);
        assert!(
            matches!(upsert_action(r#"{"id":1,"__row_kind":"+U"}"#, &k), UpsertAction::Emit(m) if m.payload.is_some())
        );
        assert!(matches!(upsert_action("[1]", &k), UpsertAction::Skip(r) if r.contains("not a JSON object")));
        assert!(matches!(upsert_action(r#"{"v":1}"#, &k), UpsertAction::Skip(r) if r.contains("no key field")));
        assert!(matches!(upsert_action(r#"{"id":null}"#, &k), UpsertAction::Skip(_)));
        assert!(matches!(
            upsert_action(r#"{"id":1,"__row_kind":"upsert"}"#, &k),
            UpsertAction::Skip(_)
        ));
        assert!(matches!(upsert_action("not json", &k), UpsertAction::Skip(_)));
    }

    #[test]
    fn composite_keys_are_a_json_array() {
        match upsert_action(r#"{"a":1,"b":"x","c":true}"#, &pk(&["b", "a"])) {
            UpsertAction::Emit(m) => assert_eq!(m.key.as_deref(), Some(&br#"["x",1]"#[..])),
            other => panic!("{other:?}"),
        }
    }
}
