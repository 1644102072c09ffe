//! The v2 batch encoder.

use bytes::{BufMut, BytesMut};

use super::{
    ControlKind, ATTRIBUTES_OFFSET, BATCH_HEADER_LEN, CONTROL_BIT, CRC_OFFSET, LOG_OVERHEAD, TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
};
use crate::codec::{put_varint, varint_len, varlong_len};
use crate::compression::{self, Compression};
use crate::error::{Error, Result};
use crate::record::TimestampType;

/// The batch-level fields a producer chooses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMeta {
    /// Producers write 0; the broker assigns real offsets.
    pub base_offset: i64,
    /// The leader epoch stamped on the batch (-1 from a producer).
    pub partition_leader_epoch: i32,
    /// -1 when not idempotent.
    pub producer_id: i64,
    /// -1 when not idempotent.
    pub producer_epoch: i16,
    /// -1 when not idempotent.
    pub base_sequence: i32,
    /// The codec the records section is compressed with.
    pub compression: Compression,
    /// The codec's level (librdkafka's `compression.level`; -1: the
    /// codec's default). See [`Compression::check_level`].
    pub compression_level: i32,
    /// Create time or log-append time.
    pub timestamp_type: TimestampType,
    /// Whether the batch belongs to a transaction.
    pub transactional: bool,
    /// Whether the batch is a control batch (transaction markers).
    pub control: bool,
}

impl Default for BatchMeta {
    fn default() -> Self {
        BatchMeta {
            base_offset: 0,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            compression: Compression::None,
            compression_level: -1,
            timestamp_type: TimestampType::CreateTime,
            transactional: false,
            control: false,
        }
    }
}

impl BatchMeta {
    fn attributes(&self) -> i16 {
        let mut a = self.compression.id();
        if self.timestamp_type == TimestampType::LogAppendTime {
            a |= TIMESTAMP_TYPE_BIT;
        }
        if self.transactional {
            a |= TRANSACTIONAL_BIT;
        }
        if self.control {
            a |= CONTROL_BIT;
        }
        a
    }
}

/// A header to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderOut<'a> {
    /// The header's key.
    pub key: &'a str,
    /// The header's value (`None`: null).
    pub value: Option<&'a [u8]>,
}

/// A record to write. Offsets are assigned in order (delta = index).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RecordOut<'a> {
    /// The record's timestamp (ms since the epoch).
    pub timestamp: i64,
    /// The key (`None`: null).
    pub key: Option<&'a [u8]>,
    /// The value (`None`: null, a tombstone).
    pub value: Option<&'a [u8]>,
    /// The record's headers, in order.
    pub headers: &'a [HeaderOut<'a>],
}

/// Encodes batches, keeping a scratch buffer for compressed record sections
/// so a long-lived producer does not allocate per batch.
#[derive(Debug, Default)]
pub struct RecordBatchEncoder {
    scratch: Vec<u8>,
    compressed: Vec<u8>,
}

#[inline]
fn field_len(f: Option<&[u8]>) -> Result<usize> {
    match f {
        None => Ok(1),
        Some(b) => add_len(varint_len(len_i32(b.len())?), b.len()),
    }
}

/// `a + b` for lengths, an error past `usize::MAX` (a record that long
/// fails the i32 length check anyway).
#[inline]
fn add_len(a: usize, b: usize) -> Result<usize> {
    a.checked_add(b).ok_or(Error::LengthOutOfBounds {
        context: "record",
        length: i64::MAX,
        limit: i32::MAX as usize,
    })
}

#[inline]
fn len_i32(n: usize) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::LengthOutOfBounds {
        context: "record field",
        length: n as i64,
        limit: i32::MAX as usize,
    })
}

#[inline]
fn put_field(out: &mut impl BufMut, f: Option<&[u8]>) {
    match f {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.put_slice(b);
        }
    }
}

/// A record's fixed prefix (length, attributes, deltas, key length) is
/// assembled on the stack and written with one `put_slice`: far fewer
/// capacity checks than a `put_u8` per varint byte.
struct Prefix {
    buf: [u8; 32],
    len: usize,
}

impl Prefix {
    #[inline]
    fn new() -> Self {
        Prefix { buf: [0; 32], len: 0 }
    }
    #[inline]
    fn u8(&mut self, b: u8) {
        if let Some(slot) = self.buf.get_mut(self.len) {
            *slot = b;
            // `get_mut(len)` just succeeded, so `len < 32`: `len + 1` cannot overflow.
            #[allow(clippy::arithmetic_side_effects)]
            {
                self.len += 1;
            }
        } else {
            // Unreachable: put_records writes at most 26 bytes per prefix.
            debug_assert!(false, "record prefix longer than 32 bytes");
        }
    }
    #[inline]
    fn uvarint64(&mut self, mut u: u64) {
        while u >= 0x80 {
            self.u8((u as u8) | 0x80);
            u >>= 7;
        }
        self.u8(u as u8);
    }
    #[inline]
    fn varint(&mut self, v: i32) {
        self.uvarint64(u64::from(((v << 1) ^ (v >> 31)) as u32));
    }
    #[inline]
    fn varlong(&mut self, v: i64) {
        self.uvarint64(((v << 1) ^ (v >> 63)) as u64);
    }
    #[inline]
    fn as_slice(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }
}

/// Appends the records of a batch (no batch header) to `out`.
fn put_records(out: &mut impl BufMut, base_timestamp: i64, records: &[RecordOut<'_>]) -> Result<()> {
    for (i, r) in records.iter().enumerate() {
        let offset_delta = len_i32(i)?;
        let ts_delta = r.timestamp.wrapping_sub(base_timestamp);
        let mut body = add_len(1, varlong_len(ts_delta))?;
        body = add_len(body, varint_len(offset_delta))?;
        body = add_len(body, field_len(r.key)?)?;
        body = add_len(body, field_len(r.value)?)?;
        body = add_len(body, varint_len(len_i32(r.headers.len())?))?;
        for h in r.headers {
            body = add_len(body, field_len(Some(h.key.as_bytes()))?)?;
            body = add_len(body, field_len(h.value)?)?;
        }
        // 5 + 1 + 10 + 5 + 5 = 26 bytes at most: fits the 32-byte prefix.
        let mut p = Prefix::new();
        p.varint(len_i32(body)?);
        p.u8(0); // record attributes: unused in v2
        p.varlong(ts_delta);
        p.varint(offset_delta);
        match r.key {
            None => p.varint(-1),
            Some(k) => p.varint(k.len() as i32),
        }
        out.put_slice(p.as_slice());
        if let Some(k) = r.key {
            out.put_slice(k);
        }
        let mut p = Prefix::new();
        match r.value {
            None => p.varint(-1),
            Some(v) => p.varint(v.len() as i32),
        }
        out.put_slice(p.as_slice());
        if let Some(v) = r.value {
            out.put_slice(v);
        }
        put_varint(out, r.headers.len() as i32);
        for h in r.headers {
            put_field(out, Some(h.key.as_bytes()));
            put_field(out, h.value);
        }
    }
    Ok(())
}

/// A close upper bound on the bytes `records` encode to, to reserve once
/// (saturating: no batch holds more than `i32::MAX` bytes, and the
/// reservation is capped there).
fn estimate(records: &[RecordOut<'_>]) -> usize {
    let len = |f: Option<&[u8]>| f.map_or(0, <[u8]>::len);
    records.iter().fold(0usize, |total, r| {
        let headers = r.headers.iter().fold(0usize, |sum, h| {
            sum.saturating_add(10)
                .saturating_add(h.key.len())
                .saturating_add(len(h.value))
        });
        total
            .saturating_add(32)
            .saturating_add(len(r.key))
            .saturating_add(len(r.value))
            .saturating_add(headers)
    })
}

impl RecordBatchEncoder {
    /// A new encoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one v2 batch holding `records` to `out`. The base timestamp
    /// is the first record's, as the Java client writes it; the max
    /// timestamp is the largest. An empty `records` is refused: Kafka has no
    /// empty data batches.
    pub fn encode(&mut self, out: &mut BytesMut, meta: &BatchMeta, records: &[RecordOut<'_>]) -> Result<()> {
        let Some((first, after_first)) = records.split_first() else {
            return Err(Error::Invalid {
                context: "record batch",
                message: "a batch needs at least one record".into(),
            });
        };
        let count = len_i32(records.len())?;
        let base_timestamp = first.timestamp;
        let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap_or(base_timestamp);
        let start = out.len();
        let records_estimate = if meta.compression == Compression::None {
            estimate(records)
        } else {
            0
        };
        out.reserve(BATCH_HEADER_LEN.saturating_add(records_estimate).min(i32::MAX as usize));
        out.put_i64(meta.base_offset);
        out.put_i32(0); // batch length, patched
        out.put_i32(meta.partition_leader_epoch);
        out.put_i8(2);
        out.put_u32(0); // crc, patched
        out.put_i16(meta.attributes());
        out.put_i32(len_i32(after_first.len())?); // last offset delta
        out.put_i64(base_timestamp);
        out.put_i64(max_timestamp);
        out.put_i64(meta.producer_id);
        out.put_i16(meta.producer_epoch);
        out.put_i32(meta.base_sequence);
        out.put_i32(count);
        match meta.compression {
            Compression::None => put_records(out, base_timestamp, records)?,
            codec => {
                self.scratch.clear();
                self.scratch.reserve(estimate(records));
                put_records(&mut self.scratch, base_timestamp, records)?;
                self.compressed.clear();
                compression::compress_at(codec, meta.compression_level, &self.scratch, &mut self.compressed)?;
                out.extend_from_slice(&self.compressed);
            }
        }
        finish_batch(out, start)
    }

    /// Appends a control batch carrying one end-transaction marker.
    pub fn encode_end_txn_marker(
        &mut self,
        out: &mut BytesMut,
        meta: &BatchMeta,
        kind: ControlKind,
        coordinator_epoch: i32,
        timestamp: i64,
    ) -> Result<()> {
        let key = {
            let mut k = [0u8; 4];
            k[2..].copy_from_slice(&kind.type_id().to_be_bytes());
            k
        };
        let mut value = [0u8; 6];
        value[2..].copy_from_slice(&coordinator_epoch.to_be_bytes());
        let meta = BatchMeta {
            control: true,
            transactional: true,
            compression: Compression::None,
            ..*meta
        };
        let rec = RecordOut {
            timestamp,
            key: Some(&key),
            value: Some(&value),
            headers: &[],
        };
        self.encode(out, &meta, &[rec])
    }
}

/// Patches the length and CRC of the batch written to `out` from `start`.
fn finish_batch(out: &mut BytesMut, start: usize) -> Result<()> {
    let batch = out.get_mut(start..).unwrap_or_default();
    let total = batch.len();
    let batch_length = i32::try_from(total.saturating_sub(LOG_OVERHEAD)).map_err(|_| Error::LengthOutOfBounds {
        context: "record batch length",
        length: total as i64,
        limit: i32::MAX as usize,
    })?;
    let Some((header, records)) = batch.split_first_chunk_mut::<BATCH_HEADER_LEN>() else {
        return Err(Error::truncated("record batch", BATCH_HEADER_LEN, total));
    };
    header[8..LOG_OVERHEAD].copy_from_slice(&batch_length.to_be_bytes());
    let mut crc = crc32c::crc32c(&header[ATTRIBUTES_OFFSET..]);
    crc = crc32c::crc32c_append(crc, records);
    header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}
