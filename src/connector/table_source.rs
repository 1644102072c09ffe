//! [`TableSource`]: a SQL source table — the string channel
//! ([`TextKafkaSource`]) followed by the JSON row bridge, emitting
//! [`TableBatch`]es: typed columns ([`super::columnar`],
//! `columnar_decode = true`, the default for `format = 'json'`) or rows
//! ([`super::sql::decode_row`]).
//!
//! The bridge runs where each record's topic, partition and offset are
//! known, so a record that does not fit the table (not JSON, a wrong-typed
//! field, a malformed timestamp, a DECIMAL over its precision) takes the
//! `decode_error` policy: `fail` stops with
//! [`ConnectorError::RowDecode`] naming the column, topic, partition and
//! offset; `skip` logs it, counts it
//! ([`super::SourceCounters::decode_errors_skipped`]) and goes on.
//! Checkpoints are the string channel's: the bridge holds nothing across
//! batches but the columnar damper.

use std::fmt;

use super::backend::{ConsumerBackend, NativeConsumer};
use super::columnar::{BridgeStats, ColumnBatch, ColumnarBridge};
use super::error::{ConnectorError, Result};
use super::json_row::{decode_row, Column, Row};
use super::source::{ResumeRow, TextKafkaSource};
use super::{BoxFuture, Emitter, Source, StateRow};

/// One batch of a SQL source table.
#[derive(Clone, Debug, PartialEq)]
pub enum TableBatch {
    /// Decoded row by row.
    Rows(Vec<Row>),
    /// Decoded column-wise (with the records' positions in the sidecar).
    Columns(ColumnBatch),
}

impl TableBatch {
    /// Rows in the batch.
    pub fn len(&self) -> usize {
        match self {
            TableBatch::Rows(r) => r.len(),
            TableBatch::Columns(c) => c.len(),
        }
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows, whichever decode made them.
    pub fn into_rows(self) -> Vec<Row> {
        match self {
            TableBatch::Rows(r) => r,
            TableBatch::Columns(c) => c.to_rows(),
        }
    }
}

/// A SQL source table over the string channel.
pub struct TableSource<B: ConsumerBackend = NativeConsumer> {
    text: TextKafkaSource<B>,
    columns: Vec<Column>,
    /// `None`: `columnar_decode = false`.
    columnar: Option<ColumnarBridge>,
}

impl<B: ConsumerBackend> fmt::Debug for TableSource<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableSource")
            .field("text", &self.text)
            .field("columns", &self.columns)
            .field("columnar", &self.columnar.is_some())
            .finish()
    }
}

impl<B: ConsumerBackend> TableSource<B> {
    /// The table `columns` over `text`, decoded column-wise when
    /// `columnar` (where the schema allows; see [`super::columnar`]).
    pub fn new(text: TextKafkaSource<B>, columns: Vec<Column>, columnar: bool) -> Self {
        let columnar = columnar.then(|| ColumnarBridge::new(&columns));
        if let Some(why) = columnar.as_ref().and_then(ColumnarBridge::incapable) {
            tracing::info!(topic = text.topic(), reason = %why, "columnar_decode: the schema is left to the row decode");
        }
        TableSource {
            text,
            columns,
            columnar,
        }
    }

    /// The string source underneath.
    pub fn text_source(&self) -> &TextKafkaSource<B> {
        &self.text
    }

    /// The table's columns, in declaration order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// What the columnar bridge did (`None`: `columnar_decode = false`).
    pub fn bridge_stats(&self) -> Option<BridgeStats> {
        self.columnar.as_ref().map(ColumnarBridge::stats)
    }

    /// The source's resume positions (see [`TextKafkaSource::resume_rows`]).
    pub fn resume_rows(&self) -> Vec<ResumeRow> {
        self.text.resume_rows()
    }

    /// Cancel safety: cancel safe, as the string channel's `produce`: the
    /// bridge runs with no await between taking the texts and emitting.
    async fn produce_table(&mut self, emitter: &mut dyn Emitter<TableBatch>) -> Result<usize> {
        let Some(located) = self.text.next_texts(true).await? else {
            return Ok(0);
        };
        if located.texts.is_empty() {
            return Ok(0);
        }
        if let Some(bridge) = &mut self.columnar {
            if let Some(mut batch) = bridge.try_decode(located.texts.iter().map(|t| t.as_str())) {
                batch.sidecar.partitions = located.partitions;
                batch.sidecar.offsets = located.offsets;
                let n = batch.len();
                emitter.emit(vec![TableBatch::Columns(batch)]);
                return Ok(n);
            }
        }
        let mut rows = Vec::with_capacity(located.texts.len());
        for ((text, partition), offset) in located.texts.iter().zip(&located.partitions).zip(&located.offsets) {
            match decode_row(&self.columns, text) {
                Ok(row) => rows.push(row),
                Err(e) => self.text.decode_failed(ConnectorError::RowDecode {
                    topic: self.text.topic().to_owned(),
                    partition: *partition,
                    offset: *offset,
                    column: e.column,
                    reason: e.reason,
                })?,
            }
        }
        let n = rows.len();
        if n > 0 {
            emitter.emit(vec![TableBatch::Rows(rows)]);
        }
        Ok(n)
    }
}

impl<B: ConsumerBackend> Source for TableSource<B> {
    type Item = TableBatch;

    fn restore(&mut self, rows: &[StateRow]) -> Result<()> {
        self.text.restore(rows)
    }

    fn open(&mut self) -> BoxFuture<'_, Result<()>> {
        self.text.open()
    }

    /// Emits at most one [`TableBatch`]; returns the rows in it.
    fn produce<'a>(&'a mut self, emitter: &'a mut dyn Emitter<TableBatch>) -> BoxFuture<'a, Result<usize>> {
        Box::pin(self.produce_table(emitter))
    }

    fn snapshot(&self) -> Vec<StateRow> {
        self.text.snapshot()
    }

    fn close(&mut self) -> BoxFuture<'_, Result<()>> {
        self.text.close()
    }
}
