//! The v2 batch decoder.

use bytes::Bytes;

use super::{
    BatchHeader, ControlKind, ControlRecord, ATTRIBUTES_OFFSET, BATCH_HEADER_LEN, CRC_OFFSET, LOG_OVERHEAD,
    MAGIC_OFFSET, MIN_RECORD_LEN,
};
use crate::codec::{read_varint, read_varlong, zigzag32, zigzag64};
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
    /// slice of the input; for a compressed one, the inflated buffer (or,
    /// streamed, one window of whole records: [`super::BatchStream`]).
    records: Bytes,
    /// How many records `records` holds: the header's count, or a
    /// window's.
    count: u32,
}

/// The `N` bytes at `at` in `b`, or a typed error naming `context` when
/// `b` is too short (callers check the length first: this is the bound the
/// optimiser folds away).
#[inline]
fn be_bytes<const N: usize>(b: &[u8], at: usize, context: &'static str) -> Result<[u8; N]> {
    match b.get(at..).and_then(<[u8]>::first_chunk::<N>) {
        Some(a) => Ok(*a),
        None => Err(Error::truncated(context, at.saturating_add(N), b.len())),
    }
}
#[inline]
fn be_i16(b: &[u8], at: usize, context: &'static str) -> Result<i16> {
    be_bytes(b, at, context).map(i16::from_be_bytes)
}
#[inline]
fn be_i32(b: &[u8], at: usize, context: &'static str) -> Result<i32> {
    be_bytes(b, at, context).map(i32::from_be_bytes)
}
#[inline]
fn be_i64(b: &[u8], at: usize, context: &'static str) -> Result<i64> {
    be_bytes(b, at, context).map(i64::from_be_bytes)
}

/// The base offset and batch length at the front of a batch.
#[inline]
fn split_log_overhead(b: &[u8; LOG_OVERHEAD]) -> (i64, i32) {
    let [o0, o1, o2, o3, o4, o5, o6, o7, l0, l1, l2, l3] = *b;
    (
        i64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
        i32::from_be_bytes([l0, l1, l2, l3]),
    )
}

impl RecordBatch {
    /// Decodes the batch at the front of `input`.
    ///
    /// `Ok(None)` when `input` holds less than one whole batch — in a fetch
    /// response that is a batch the broker cut at the size limit, and the
    /// consumer asks again from its offset. `Ok(Some((batch, used)))` otherwise.
    pub fn decode(input: &Bytes, opts: &DecodeOptions) -> Result<Option<(RecordBatch, usize)>> {
        match Self::peek(input, opts)? {
            None => Ok(None),
            Some((header, total)) => Ok(Some((Self::inflate(input, header, opts)?, total))),
        }
    }

    /// Reads and checks the header of the batch at the front of `input`
    /// (length, magic, CRC, count, codec) without touching its records:
    /// nothing is inflated. `Ok(None)` as for [`decode`](Self::decode);
    /// otherwise the header and the batch's size. A consumer uses this to
    /// skip batches it will not deliver and to inflate a batch only when its
    /// records are about to be handed over ([`inflate`](Self::inflate)).
    pub fn peek(input: &[u8], opts: &DecodeOptions) -> Result<Option<(BatchHeader, usize)>> {
        let b: &[u8] = input;
        let Some(overhead) = b.first_chunk::<LOG_OVERHEAD>() else {
            return Ok(None);
        };
        let (base_offset, batch_length) = split_log_overhead(overhead);
        // Magic sits at the same place in every format; a legacy message set
        // is refused whatever its length says.
        if let Some(&magic) = b.get(MAGIC_OFFSET) {
            let magic = magic as i8;
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
        // batch_length >= 49 here, and an i32 plus 12 fits a usize.
        let total = (batch_length as usize).saturating_add(LOG_OVERHEAD);
        if total > opts.max_batch_size {
            return Err(Error::LengthOutOfBounds {
                context: "record batch length",
                length: i64::from(batch_length),
                limit: opts.max_batch_size.saturating_sub(LOG_OVERHEAD),
            });
        }
        let Some(batch) = b.get(..total) else {
            return Ok(None);
        };
        let context = "record batch header";
        let crc = u32::from_be_bytes(be_bytes(batch, CRC_OFFSET, context)?);
        if opts.verify_crc {
            let computed = crc32c::crc32c(batch.get(ATTRIBUTES_OFFSET..).unwrap_or_default());
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
            partition_leader_epoch: be_i32(batch, 12, context)?,
            magic: 2,
            crc,
            attributes: be_i16(batch, 21, context)?,
            last_offset_delta: be_i32(batch, 23, context)?,
            base_timestamp: be_i64(batch, 27, context)?,
            max_timestamp: be_i64(batch, 35, context)?,
            producer_id: be_i64(batch, 43, context)?,
            producer_epoch: be_i16(batch, 51, context)?,
            base_sequence: be_i32(batch, 53, context)?,
            record_count: be_i32(batch, 57, context)?,
        };
        if header.record_count < 0 {
            return Err(Error::RecordCountMismatch {
                base_offset,
                declared: header.record_count,
                detail: "a count cannot be negative",
            });
        }
        Compression::from_attributes(header.attributes)?;
        Ok(Some((header, total)))
    }

    /// The batch whose header [`peek`](Self::peek) returned for the front
    /// of `input`: its record section, inflated (capped at
    /// `max_decompressed_size`) when compressed, a zero-copy slice when not.
    pub fn inflate(input: &Bytes, header: BatchHeader, opts: &DecodeOptions) -> Result<RecordBatch> {
        let total = header.size_in_bytes();
        if input.len() < total || total < BATCH_HEADER_LEN {
            return Err(Error::truncated("record batch", total, input.len()));
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
                base_offset: header.base_offset,
                declared: header.record_count,
                detail: "the batch is too short to hold them",
            });
        }
        Ok(RecordBatch {
            header,
            compression,
            records,
            count: header.record_count as u32,
        })
    }

    /// A window of a streamed batch: `count` whole records in `records`.
    pub(crate) fn window(header: BatchHeader, compression: Compression, records: Bytes, count: u32) -> RecordBatch {
        RecordBatch {
            header,
            compression,
            records,
            count,
        }
    }

    /// Decodes `input` as exactly one whole batch: a short input is an
    /// error here, not "need more", and so are trailing bytes.
    pub fn decode_exact(input: &Bytes, opts: &DecodeOptions) -> Result<RecordBatch> {
        match Self::decode(input, opts)? {
            Some((batch, used)) if used == input.len() => Ok(batch),
            Some((_, used)) => Err(Error::TrailingBytes {
                context: "record batch",
                remaining: input.len().saturating_sub(used),
            }),
            None => {
                let needed = match input.first_chunk::<LOG_OVERHEAD>() {
                    Some(overhead) => (split_log_overhead(overhead).1.max(0) as usize).saturating_add(LOG_OVERHEAD),
                    None => LOG_OVERHEAD,
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

    /// Resumes iterating where [`RecordIter::cursor`] was taken, over this
    /// same batch. (A cursor from another batch parses whatever its numbers
    /// point at: errors, never a panic.)
    pub fn records_at(&self, cursor: RecordCursor) -> RecordIter<'_> {
        let len = self.records.len();
        RecordIter {
            rest: self
                .records
                .get(len.saturating_sub(cursor.rest_len)..)
                .unwrap_or_default(),
            left: cursor.left,
            header: &self.header,
            failed: cursor.failed,
        }
    }

    /// Iterates the records as borrowed views. Yields exactly
    /// `record_count` items, or an error where the bytes disagree with it.
    pub fn records(&self) -> RecordIter<'_> {
        RecordIter {
            rest: &self.records,
            left: self.count,
            header: &self.header,
            failed: false,
        }
    }

    /// The records through the careful parser only, for tests that pin the
    /// fast path to it.
    #[cfg(any(test, fuzzing))]
    pub fn records_slow_path(&self) -> Vec<Result<RecordRef<'_>>> {
        let mut it = self.records();
        let mut out = Vec::new();
        while it.left > 0 {
            it.left -= 1;
            let r = it.parse_slow();
            let stop = r.is_err();
            out.push(r);
            if stop {
                return out;
            }
        }
        if !it.rest.is_empty() {
            out.push(Err(Error::RecordCountMismatch {
                base_offset: self.header.base_offset,
                declared: self.header.record_count,
                detail: "bytes remain after the last of them",
            }));
        }
        out
    }

    /// Decodes every record into owned values that share this batch's buffer.
    pub fn decode_records(&self) -> Result<Vec<Record>> {
        let mut out = Vec::with_capacity(self.count as usize);
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
        let version = be_i16(key, 0, "control record key")?;
        let kind = ControlKind::from_type(be_i16(key, 2, "control record key")?);
        let coordinator_epoch = match kind {
            ControlKind::Abort | ControlKind::Commit => {
                let v = r
                    .value
                    .ok_or_else(|| invalid("end-transaction marker with null value"))?;
                if v.len() < 6 {
                    return Err(invalid("end-transaction marker value shorter than 6 bytes"));
                }
                Some(be_i32(v, 2, "control record value")?)
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
    /// The record's key (`None`: null).
    pub key: Option<&'a [u8]>,
    /// The record's value (`None`: null).
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
        self.left = self.left.checked_sub(1)?;
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
    /// The record's absolute offset.
    pub offset: i64,
    /// The record's timestamp (ms since the epoch; create or log-append time per the batch).
    pub timestamp: i64,
    /// The key (`None`: null), a slice of the fetched frame.
    pub key: Option<Bytes>,
    /// The value (`None`: null, a tombstone), a slice of the fetched frame.
    pub value: Option<Bytes>,
    /// The record's headers, in order.
    pub headers: Vec<Header>,
}

/// An owned record header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header keys are strings in Kafka; kept as bytes, use
    /// `std::str::from_utf8` where text is needed.
    pub key: Bytes,
    /// The header's value (`None`: null).
    pub value: Option<Bytes>,
}

/// Reads a varint length then that many bytes; -1 is null.
#[inline]
fn take_field<'a>(buf: &'a [u8], context: &'static str) -> Result<(Option<&'a [u8]>, &'a [u8])> {
    let (len, n) = read_varint(buf, context)?;
    let rest = buf.get(n..).unwrap_or_default();
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
    match rest.split_at_checked(len) {
        Some((field, rest)) => Ok((Some(field), rest)),
        None => Err(Error::LengthOutOfBounds {
            context,
            length: len as i64,
            limit: rest.len(),
        }),
    }
}

/// Where a [`RecordIter`] stands: enough to resume it later over the same
/// batch ([`RecordBatch::records_at`]) without holding a borrow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordCursor {
    rest_len: usize,
    left: u32,
    failed: bool,
}

impl RecordCursor {
    /// The start of `batch`'s records.
    pub fn start(batch: &RecordBatch) -> Self {
        RecordCursor {
            rest_len: batch.records.len(),
            left: batch.count,
            failed: false,
        }
    }
}

/// Iterates a batch's records as [`RecordRef`]s.
#[derive(Clone, Debug)]
pub struct RecordIter<'a> {
    /// The records not yet read.
    rest: &'a [u8],
    left: u32,
    header: &'a BatchHeader,
    failed: bool,
}

/// Fast-path varint readers for the record loop: one to three bytes are
/// decoded inline (every field of a typical record fits in two); anything
/// longer goes to the general readers in [`crate::codec`]. `None` means "not
/// valid here"; the caller then re-parses on the slow path for the precise
/// error, so the two paths cannot disagree on what is accepted.
#[inline(always)]
fn fast_uvarint(b: &mut &[u8]) -> Option<u32> {
    let s: &[u8] = b;
    match *s {
        [b0, ref rest @ ..] if b0 & 0x80 == 0 => {
            *b = rest;
            Some(u32::from(b0))
        }
        [b0, b1, ref rest @ ..] if b1 & 0x80 == 0 => {
            *b = rest;
            Some(u32::from(b0 & 0x7f) | (u32::from(b1) << 7))
        }
        [b0, b1, b2, ref rest @ ..] if b2 & 0x80 == 0 => {
            *b = rest;
            Some(u32::from(b0 & 0x7f) | (u32::from(b1 & 0x7f) << 7) | (u32::from(b2) << 14))
        }
        _ => {
            let (v, n) = crate::codec::read_unsigned_varint(b, "").ok()?;
            *b = b.get(n..)?;
            Some(v)
        }
    }
}

#[inline(always)]
fn fast_varint(b: &mut &[u8]) -> Option<i32> {
    fast_uvarint(b).map(zigzag32)
}

#[inline(always)]
fn fast_varlong(b: &mut &[u8]) -> Option<i64> {
    let s: &[u8] = b;
    match *s {
        [b0, ref rest @ ..] if b0 & 0x80 == 0 => {
            *b = rest;
            Some(zigzag64(u64::from(b0)))
        }
        [b0, b1, ref rest @ ..] if b1 & 0x80 == 0 => {
            *b = rest;
            Some(zigzag64(u64::from(b0 & 0x7f) | (u64::from(b1) << 7)))
        }
        _ => {
            let (v, n) = read_varlong(b, "").ok()?;
            *b = b.get(n..)?;
            Some(v)
        }
    }
}

/// An unsigned varint of one or two bytes at the low end of `x` (bytes in
/// little-endian order), with the bytes it took and `x` past them.
#[inline(always)]
fn word_varint(x: u64) -> Option<(u32, usize, u64)> {
    let lo = x as u32;
    if lo & 0x80 == 0 {
        Some((lo & 0x7f, 1, x >> 8))
    } else if lo & 0x8000 == 0 {
        Some(((lo & 0x7f) | ((lo >> 1) & 0x3f80), 2, x >> 16))
    } else {
        None
    }
}

/// A length-prefixed field; `Some(None)` is a null (-1).
#[inline(always)]
fn fast_field<'a>(b: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    let len = fast_varint(b)?;
    if len < 0 {
        return if len == -1 { Some(None) } else { None };
    }
    let s: &'a [u8] = b;
    let (field, rest) = s.split_at_checked(len as usize)?;
    *b = rest;
    Some(Some(field))
}

impl<'a> RecordIter<'a> {
    /// Where this iterator stands, to resume later with
    /// [`RecordBatch::records_at`].
    pub fn cursor(&self) -> RecordCursor {
        RecordCursor {
            rest_len: self.rest.len(),
            left: self.left,
            failed: self.failed,
        }
    }

    /// Parses the next record: a branch-light fast path, falling back to
    /// [`parse_slow`](Self::parse_slow) (which names the exact fault) on any
    /// irregularity.
    #[inline]
    fn parse_one(&mut self) -> Result<RecordRef<'a>> {
        match Self::parse_fast(self.header, self.rest) {
            Some((r, rest)) => {
                self.rest = rest;
                Ok(r)
            }
            None => self.parse_slow(),
        }
    }

    #[inline(always)]
    fn parse_fast(h: &BatchHeader, rest: &'a [u8]) -> Option<(RecordRef<'a>, &'a [u8])> {
        let mut b = rest;
        let len = fast_varint(&mut b)?;
        let (body, after) = b.split_at_checked(usize::try_from(len).ok()?)?;
        let (ts_delta, off_delta, key, mut p) = match Self::prefix_word(body) {
            Some(prefix) => prefix,
            None => {
                let (_attributes, mut p) = body.split_first()?;
                let ts_delta = fast_varlong(&mut p)?;
                let off_delta = fast_varint(&mut p)?;
                let key = fast_field(&mut p)?;
                (ts_delta, off_delta, key, p)
            }
        };
        let value = fast_field(&mut p)?;
        let count = fast_varint(&mut p)?;
        let headers_raw = p;
        if count != 0 {
            if count < 0 || count as usize > p.len() / 2 {
                return None;
            }
            for _ in 0..count {
                fast_field(&mut p)??;
                fast_field(&mut p)?;
            }
        }
        if !p.is_empty() {
            return None;
        }
        Some((
            RecordRef {
                offset: h.base_offset.wrapping_add(i64::from(off_delta)),
                timestamp: if h.attributes & super::TIMESTAMP_TYPE_BIT != 0 {
                    h.max_timestamp
                } else {
                    h.base_timestamp.wrapping_add(ts_delta)
                },
                key,
                value,
                headers_raw,
                header_count: count as u32,
            },
            after,
        ))
    }

    /// The record prefix (attributes, timestamp delta, offset delta, key)
    /// from one 8-byte load, when each varint takes one or two bytes (the
    /// usual case); `None` sends the record to the byte-wise path.
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn prefix_word(body: &'a [u8]) -> Option<(i64, i32, Option<&'a [u8]>, &'a [u8])> {
        let (_attributes, after) = body.split_first()?;
        let word = after.first_chunk::<8>()?;
        let x = u64::from_le_bytes(*word);
        let (ts, n1, x) = word_varint(x)?;
        let (off, n2, x) = word_varint(x)?;
        let (klen, n3, _) = word_varint(x)?;
        // At most 6 of the 8 bytes just loaded: these cannot fail.
        let p = after.get(n1..)?.get(n2..)?.get(n3..)?;
        let ts = i64::from(zigzag32(ts));
        let off = zigzag32(off);
        let klen = zigzag32(klen);
        if klen < 0 {
            return (klen == -1).then_some((ts, off, None, p));
        }
        let (key, p) = p.split_at_checked(klen as usize)?;
        Some((ts, off, Some(key), p))
    }

    /// The careful parser: the same grammar as `parse_fast`, with a precise
    /// error for every way a record can be malformed.
    #[cold]
    #[inline(never)]
    fn parse_slow(&mut self) -> Result<RecordRef<'a>> {
        let h = self.header;
        let rest = self.rest;
        if rest.is_empty() {
            return Err(Error::RecordCountMismatch {
                base_offset: h.base_offset,
                declared: h.record_count,
                detail: "the records end before that many were read",
            });
        }
        let (len, n) = read_varint(rest, "record length")?;
        let after_len = rest.get(n..).unwrap_or_default();
        let Some((body, after)) = usize::try_from(len).ok().and_then(|l| after_len.split_at_checked(l)) else {
            return Err(Error::LengthOutOfBounds {
                context: "record length",
                length: i64::from(len),
                limit: after_len.len(),
            });
        };
        self.rest = after;

        // attributes (unused in v2) must be present
        let Some((_, b)) = body.split_first() else {
            return Err(Error::truncated("record attributes", 1, 0));
        };
        let (ts_delta, k) = read_varlong(b, "record timestamp delta")?;
        let b = b.get(k..).unwrap_or_default();
        let (off_delta, k) = read_varint(b, "record offset delta")?;
        let b = b.get(k..).unwrap_or_default();
        let (key, b) = take_field(b, "record key")?;
        let (value, b) = take_field(b, "record value")?;
        let (count, k) = read_varint(b, "record header count")?;
        let headers_raw = b.get(k..).unwrap_or_default();
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
        let Some(left) = self.left.checked_sub(1) else {
            if !self.rest.is_empty() {
                self.failed = true;
                return Some(Err(Error::RecordCountMismatch {
                    base_offset: self.header.base_offset,
                    declared: self.header.record_count,
                    detail: "bytes remain after the last of them",
                }));
            }
            return None;
        };
        self.left = left;
        let r = self.parse_one();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, (self.left as usize).checked_add(1))
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
