//! The v2 batch decoder.

use bytes::Bytes;

use super::{
    BatchHeader, ControlKind, ControlRecord, ATTRIBUTES_OFFSET, BATCH_HEADER_LEN, CRC_OFFSET, LOG_OVERHEAD,
    MAGIC_OFFSET, MIN_RECORD_LEN,
};
use crate::codec::{read_varint, read_varlong};
use crate::compression::{self, Compression};
use crate::error::{Error, Result};

/// Knobs for decoding batches.
#[derive(Clone, Copy, Debug)]
pub struct DecodeOptions {
    /// Check each batch's CRC-32C (on by default; the fuzzer's second target
    /// turns it off to reach the records).
    pub verify_crc: bool,
    /// The most bytes one compressed batch may inflate to. Kafka's own bound
    /// is the broker's `message.max.bytes` after decompression; 64 MiB is
    /// generous and stops a decompression bomb.
    pub max_decompressed_size: usize,
    /// The most bytes one batch may claim (its `batchLength` plus 12). A
    /// larger claim is refused outright rather than waited for.
    pub max_batch_size: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            verify_crc: true,
            max_decompressed_size: 64 * 1024 * 1024,
            max_batch_size: crate::frame::DEFAULT_MAX_FRAME_SIZE,
        }
    }
}

/// One decoded batch: its header and its (inflated) record bytes.
#[derive(Clone, Debug)]
pub struct RecordBatch {
    /// The fixed header fields.
    pub header: BatchHeader,
    compression: Compression,
    /// The record section, uncompressed. For an uncompressed batch this is a
    /// slice of the input; for a compressed one, the inflated buffer.
    records: Bytes,
}

#[inline]
fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
#[inline]
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl RecordBatch {
    /// Decodes the batch at the front of `input`.
    ///
    /// `Ok(None)` when `input` holds less than one whole batch — in a fetch
    /// response that is a batch the broker cut at the size limit, and the
    /// consumer asks again from its offset. `Ok(Some((batch, used)))` otherwise.
    pub fn decode(input: &Bytes, opts: &DecodeOptions) -> Result<Option<(RecordBatch, usize)>> {
        let b: &[u8] = input;
        if b.len() < LOG_OVERHEAD {
            return Ok(None);
        }
        let base_offset = be_i64(b, 0);
        let batch_length = be_i32(b, 8);
        // Magic sits at the same place in every format; a legacy message set
        // is refused whatever its length says.
        if b.len() > MAGIC_OFFSET {
            let magic = b[MAGIC_OFFSET] as i8;
            if magic != 2 {
                return Err(Error::UnsupportedMagic { base_offset, magic });
            }
        }
        if batch_length < (BATCH_HEADER_LEN - LOG_OVERHEAD) as i32 {
            return Err(Error::LengthOutOfBounds {
                context: "record batch length",
                length: i64::from(batch_length),
                limit: b.len().saturating_sub(LOG_OVERHEAD),
            });
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > opts.max_batch_size {
            return Err(Error::LengthOutOfBounds {
                context: "record batch length",
                length: i64::from(batch_length),
                limit: opts.max_batch_size - LOG_OVERHEAD.min(opts.max_batch_size),
            });
        }
        if b.len() < total {
            return Ok(None);
        }
        let batch = &b[..total];
        let crc = u32::from_be_bytes([
            batch[CRC_OFFSET],
            batch[CRC_OFFSET + 1],
            batch[CRC_OFFSET + 2],
            batch[CRC_OFFSET + 3],
        ]);
        if opts.verify_crc {
            let computed = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
            if computed != crc {
                return Err(Error::CrcMismatch {
                    base_offset,
                    stored: crc,
                    computed,
                });
            }
        }
        let header = BatchHeader {
            base_offset,
            batch_length,
            partition_leader_epoch: be_i32(batch, 12),
            magic: 2,
            crc,
            attributes: be_i16(batch, 21),
            last_offset_delta: be_i32(batch, 23),
            base_timestamp: be_i64(batch, 27),
            max_timestamp: be_i64(batch, 35),
            producer_id: be_i64(batch, 43),
            producer_epoch: be_i16(batch, 51),
            base_sequence: be_i32(batch, 53),
            record_count: be_i32(batch, 57),
        };
        if header.record_count < 0 {
            return Err(Error::RecordCountMismatch {
                base_offset,
                declared: header.record_count,
                detail: "a count cannot be negative",
            });
        }
        let compression = Compression::from_attributes(header.attributes)?;
        let body = input.slice(BATCH_HEADER_LEN..total);
        let records = match compression {
            Compression::None => body,
            codec => Bytes::from(compression::decompress(codec, &body, opts.max_decompressed_size)?),
        };
        // Every record takes at least MIN_RECORD_LEN bytes: refuse a count
        // the bytes cannot hold before anyone sizes a buffer from it.
        if header.record_count as usize > records.len() / MIN_RECORD_LEN {
            return Err(Error::RecordCountMismatch {
                base_offset,
                declared: header.record_count,
                detail: "the batch is too short to hold them",
            });
        }
        Ok(Some((
            RecordBatch {
                header,
                compression,
                records,
            },
            total,
        )))
    }

    /// Decodes `input` as exactly one whole batch: a short input is an
    /// error here, not "need more", and so are trailing bytes.
    pub fn decode_exact(input: &Bytes, opts: &DecodeOptions) -> Result<RecordBatch> {
        match Self::decode(input, opts)? {
            Some((batch, used)) if used == input.len() => Ok(batch),
            Some((_, used)) => Err(Error::TrailingBytes {
                context: "record batch",
                remaining: input.len() - used,
            }),
            None => {
                let needed = if input.len() >= LOG_OVERHEAD {
                    LOG_OVERHEAD + be_i32(input, 8).max(0) as usize
                } else {
                    LOG_OVERHEAD
                };
                Err(Error::truncated("record batch", needed, input.len()))
            }
        }
    }

    /// The codec the batch was written with.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// The uncompressed record section (zero-copy for uncompressed batches).
    pub fn records_bytes(&self) -> &Bytes {
        &self.records
    }

    /// Iterates the records as borrowed views. Yields exactly
    /// `record_count` items, or an error where the bytes disagree with it.
    pub fn records(&self) -> RecordIter<'_> {
        RecordIter {
            buf: &self.records,
            pos: 0,
            left: self.header.record_count as u32,
            header: &self.header,
            failed: false,
        }
    }

    /// Decodes every record into owned values that share this batch's buffer.
    pub fn decode_records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::with_capacity(self.header.record_count as usize);
        for r in self.records() {
            out.push(self.to_owned_record(&r?));
        }
        Ok(out)
    }

    /// Turns a view from [`records`](Self::records) into an owned [`Record`]
    /// sharing this batch's allocation (no copy of key, value or headers).
    pub fn to_owned_record(&self, r: &RecordRef<'_>) -> Record {
        let headers = if r.header_count == 0 {
            Vec::new()
        } else {
            r.headers()
                .map(|(k, v)| Header {
                    key: self.records.slice_ref(k),
                    value: v.map(|v| self.records.slice_ref(v)),
                })
                .collect()
        };
        Record {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(|k| self.records.slice_ref(k)),
            value: r.value.map(|v| self.records.slice_ref(v)),
            headers,
        }
    }

    /// For a control batch, its one control record (a transaction marker).
    pub fn control_record(&self) -> Result<Option<ControlRecord>> {
        if !self.header.is_control() {
            return Ok(None);
        }
        let base_offset = self.header.base_offset;
        let invalid = |message: &str| Error::Invalid {
            context: "control record",
            message: format!("batch at offset {base_offset}: {message}"),
        };
        let Some(first) = self.records().next() else {
            return Err(invalid("control batch holds no record"));
        };
        let r = first?;
        let key = r.key.ok_or_else(|| invalid("null key"))?;
        if key.len() < 4 {
            return Err(invalid("key shorter than 4 bytes"));
        }
        let version = be_i16(key, 0);
        let kind = ControlKind::from_type(be_i16(key, 2));
        let coordinator_epoch = match kind {
            ControlKind::Abort | ControlKind::Commit => {
                let v = r
                    .value
                    .ok_or_else(|| invalid("end-transaction marker with null value"))?;
                if v.len() < 6 {
                    return Err(invalid("end-transaction marker value shorter than 6 bytes"));
                }
                Some(be_i32(v, 2))
            }
            ControlKind::Other(_) => None,
        };
        Ok(Some(ControlRecord {
            version,
            kind,
            coordinator_epoch,
        }))
    }
}

/// A record borrowed from its batch's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Absolute offset: base offset + offset delta.
    pub offset: i64,
    /// Absolute timestamp: base timestamp + timestamp delta (for
    /// `LogAppendTime` batches, Kafka's rule is the batch's max timestamp;
    /// see [`RecordBatch`]'s header).
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    headers_raw: &'a [u8],
    header_count: u32,
}

impl<'a> RecordRef<'a> {
    /// The number of headers.
    pub fn header_count(&self) -> usize {
        self.header_count as usize
    }
    /// The headers in order, as (key, value) byte views. They were validated
    /// when the record was decoded.
    pub fn headers(&self) -> HeaderIter<'a> {
        HeaderIter {
            buf: self.headers_raw,
            left: self.header_count,
        }
    }
}

/// Iterates one record's headers.
#[derive(Clone, Debug)]
pub struct HeaderIter<'a> {
    buf: &'a [u8],
    left: u32,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = (&'a [u8], Option<&'a [u8]>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Already validated by `parse_headers`; a failure here cannot occur,
        // and ends the iteration rather than panicking.
        let (key, rest) = take_field(self.buf, "header key").ok()?;
        let (value, rest) = take_field(rest, "header value").ok()?;
        self.buf = rest;
        Some((key.unwrap_or(&[]), value))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// An owned record whose byte fields share the batch's buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<Header>,
}

/// An owned record header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header keys are strings in Kafka; kept as bytes, use
    /// `std::str::from_utf8` where text is needed.
    pub key: Bytes,
    pub value: Option<Bytes>,
}

/// Reads a varint length then that many bytes; -1 is null.
#[inline]
fn take_field<'a>(buf: &'a [u8], context: &'static str) -> Result<(Option<&'a [u8]>, &'a [u8])> {
    let (len, n) = read_varint(buf, context)?;
    let rest = &buf[n..];
    if len < 0 {
        if len == -1 {
            return Ok((None, rest));
        }
        return Err(Error::NegativeLength {
            context,
            length: i64::from(len),
        });
    }
    let len = len as usize;
    if len > rest.len() {
        return Err(Error::LengthOutOfBounds {
            context,
            length: len as i64,
            limit: rest.len(),
        });
    }
    Ok((Some(&rest[..len]), &rest[len..]))
}

/// Iterates a batch's records as [`RecordRef`]s.
#[derive(Clone, Debug)]
pub struct RecordIter<'a> {
    buf: &'a [u8],
    pos: usize,
    left: u32,
    header: &'a BatchHeader,
    failed: bool,
}

impl<'a> RecordIter<'a> {
    #[inline]
    fn parse_one(&mut self) -> Result<RecordRef<'a>> {
        let h = self.header;
        let rest = &self.buf[self.pos..];
        if rest.is_empty() {
            return Err(Error::RecordCountMismatch {
                base_offset: h.base_offset,
                declared: h.record_count,
                detail: "the records end before that many were read",
            });
        }
        let (len, n) = read_varint(rest, "record length")?;
        if len < 0 || len as usize > rest.len() - n {
            return Err(Error::LengthOutOfBounds {
                context: "record length",
                length: i64::from(len),
                limit: rest.len() - n,
            });
        }
        let body = &rest[n..n + len as usize];
        self.pos += n + len as usize;

        // attributes (unused in v2) must be present
        let Some((_, b)) = body.split_first() else {
            return Err(Error::truncated("record attributes", 1, 0));
        };
        let (ts_delta, k) = read_varlong(b, "record timestamp delta")?;
        let b = &b[k..];
        let (off_delta, k) = read_varint(b, "record offset delta")?;
        let b = &b[k..];
        let (key, b) = take_field(b, "record key")?;
        let (value, b) = take_field(b, "record value")?;
        let (count, k) = read_varint(b, "record header count")?;
        let headers_raw = &b[k..];
        if count < 0 || count as usize > headers_raw.len() / 2 {
            return Err(Error::LengthOutOfBounds {
                context: "record header count",
                length: i64::from(count),
                limit: headers_raw.len() / 2,
            });
        }
        let mut hb = headers_raw;
        for _ in 0..count {
            let (k, r) = take_field(hb, "header key")?;
            if k.is_none() {
                return Err(Error::NegativeLength {
                    context: "header key",
                    length: -1,
                });
            }
            let (_, r) = take_field(r, "header value")?;
            hb = r;
        }
        if !hb.is_empty() {
            return Err(Error::TrailingBytes {
                context: "record (its length covers more than its fields)",
                remaining: hb.len(),
            });
        }
        Ok(RecordRef {
            offset: h.base_offset.wrapping_add(i64::from(off_delta)),
            // Under LogAppendTime the broker's time, kept once as the batch's
            // max timestamp, is every record's timestamp (Kafka's rule).
            timestamp: if h.attributes & super::TIMESTAMP_TYPE_BIT != 0 {
                h.max_timestamp
            } else {
                h.base_timestamp.wrapping_add(ts_delta)
            },
            key,
            value,
            headers_raw,
            header_count: count as u32,
        })
    }
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RecordRef<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.left == 0 {
            if self.pos != self.buf.len() {
                self.failed = true;
                return Some(Err(Error::RecordCountMismatch {
                    base_offset: self.header.base_offset,
                    declared: self.header.record_count,
                    detail: "bytes remain after the last of them",
                }));
            }
            return None;
        }
        self.left -= 1;
        let r = self.parse_one();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left as usize + 1))
    }
}

/// Iterates the batches of a fetch response's `records` bytes, stopping
/// quietly at a trailing partial batch (the broker cuts at the size limit).
#[derive(Clone, Debug)]
pub struct BatchIter {
    buf: Bytes,
    opts: DecodeOptions,
    failed: bool,
}

impl BatchIter {
    /// Batches in `records`.
    pub fn new(records: Bytes, opts: DecodeOptions) -> Self {
        BatchIter {
            buf: records,
            opts,
            failed: false,
        }
    }

    /// Bytes not yet consumed: after the iterator ends without error, a
    /// partial trailing batch (or nothing).
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
}

impl Iterator for BatchIter {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.buf.is_empty() {
            return None;
        }
        match RecordBatch::decode(&self.buf, &self.opts) {
            Ok(None) => None,
            Ok(Some((batch, used))) => {
                let _ = self.buf.split_to(used);
                Some(Ok(batch))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
