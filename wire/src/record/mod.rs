//! Record batches, message format v2: a zero-copy decoder over
//! [`bytes::Bytes`] and an encoder that appends to a `BytesMut`.
//!
//! Layout (<https://kafka.apache.org/documentation/#recordbatch>):
//!
//! ```text
//! baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 (=2)
//! crc u32 (CRC-32C of everything after it) | attributes i16 | lastOffsetDelta i32
//! baseTimestamp i64 | maxTimestamp i64 | producerId i64 | producerEpoch i16
//! baseSequence i32 | recordCount i32 | records...
//! ```
//!
//! Records borrow from the fetched buffer: [`RecordRef`] holds `&[u8]`
//! views, [`Record`] holds `Bytes` slices of the same allocation. A
//! compressed batch is inflated once into one buffer the records then share.
//! Message formats v0 and v1 were removed in Kafka 4.0 (KIP-896) and are
//! refused with [`Error::UnsupportedMagic`](crate::Error::UnsupportedMagic).

mod decode;
mod dump;
mod encode;
mod stream;
mod txn_end;

pub use decode::{
    BatchIter, DecodeOptions, Header, HeaderIter, Record, RecordBatch, RecordCursor, RecordIter, RecordRef,
};
pub use dump::dump_batch;
pub use encode::{BatchMeta, HeaderOut, RecordBatchEncoder, RecordOut};
pub use stream::{BatchStream, INFLATE_CHUNK};
pub use txn_end::{PartitionView, ScanStep, TxnEnd, TxnEndQuery, TxnEndScan};

use crate::compression::Compression;

/// Bytes of a v2 batch header, from `baseOffset` through `recordCount`.
pub const BATCH_HEADER_LEN: usize = 61;
/// Offset of `batchLength`'s end: `batchLength` counts the bytes after it.
pub(crate) const LOG_OVERHEAD: usize = 12;
/// Offset of the magic byte (the same in v0, v1 and v2, which is how a
/// legacy message set is told apart).
pub(crate) const MAGIC_OFFSET: usize = 16;
/// Offset of the CRC field; the CRC covers everything after it.
pub(crate) const CRC_OFFSET: usize = 17;
/// Offset of the attributes field (where the CRC's coverage starts).
pub(crate) const ATTRIBUTES_OFFSET: usize = 21;
/// The smallest a record can be: length, attributes, timestamp delta, offset
/// delta, key length, value length and header count, one byte each.
pub(crate) const MIN_RECORD_LEN: usize = 7;

const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;
const DELETE_HORIZON_BIT: i16 = 0x40;

/// How a batch's timestamps were set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TimestampType {
    /// The producer's clock (`CreateTime`).
    #[default]
    CreateTime,
    /// The broker's clock when it appended the batch (`LogAppendTime`).
    LogAppendTime,
}

/// The fixed fields of a v2 batch header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    /// The offset of the batch's first record.
    pub base_offset: i64,
    /// Bytes after this field to the batch's end.
    pub batch_length: i32,
    /// The partition leader's epoch when the batch was appended.
    pub partition_leader_epoch: i32,
    /// The record batch format (2).
    pub magic: i8,
    /// CRC-32C of everything after this field.
    pub crc: u32,
    /// Compression, timestamp type, transactional and control bits.
    pub attributes: i16,
    /// The offset of the last record relative to `base_offset`.
    pub last_offset_delta: i32,
    /// The first record's timestamp (records carry deltas from it).
    pub base_timestamp: i64,
    /// The batch's largest timestamp.
    pub max_timestamp: i64,
    /// The producer id (-1: not idempotent).
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The first record's sequence number (-1: not idempotent).
    pub base_sequence: i32,
    /// How many records the batch holds.
    pub record_count: i32,
}

impl BatchHeader {
    /// The codec named by attribute bits 0-2.
    pub fn compression(&self) -> Result<Compression, crate::compression::CompressionError> {
        Compression::from_attributes(self.attributes)
    }
    /// Attribute bit 3.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & TIMESTAMP_TYPE_BIT != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }
    /// Attribute bit 4: written inside a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    /// Attribute bit 5: a control batch (transaction marker).
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    /// Attribute bit 6: `baseTimestamp` holds the delete horizon (compaction).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & DELETE_HORIZON_BIT != 0
    }
    /// The offset of the last record: `base_offset + last_offset_delta`.
    pub fn last_offset(&self) -> i64 {
        self.base_offset.saturating_add(i64::from(self.last_offset_delta))
    }
    /// The offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }
    /// Whole batch size on the wire.
    pub fn size_in_bytes(&self) -> usize {
        // A negative (invalid) length reads as impossibly large.
        (self.batch_length as usize).saturating_add(LOG_OVERHEAD)
    }
}

/// What a control record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlKind {
    /// An `ABORT` transaction marker (type 0).
    Abort,
    /// A `COMMIT` transaction marker (type 1).
    Commit,
    /// Another control type (e.g. KRaft's leader-change records, type 2+).
    Other(i16),
}

/// The decoded control record of a control batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRecord {
    /// Control key version (0 today).
    pub version: i16,
    /// Commit or abort.
    pub kind: ControlKind,
    /// From an end-transaction marker's value; `None` for other kinds.
    pub coordinator_epoch: Option<i32>,
}

impl ControlKind {
    pub(crate) fn from_type(t: i16) -> Self {
        match t {
            0 => ControlKind::Abort,
            1 => ControlKind::Commit,
            other => ControlKind::Other(other),
        }
    }
    pub(crate) fn type_id(self) -> i16 {
        match self {
            ControlKind::Abort => 0,
            ControlKind::Commit => 1,
            ControlKind::Other(t) => t,
        }
    }
}

#[cfg(test)]
mod tests;
