//! A compressed batch inflated chunk by chunk ([`BatchStream`]): the
//! consumer's way to hand over the records of a batch that inflates far
//! past its memory bound.
//!
//! Each [`next_window`](BatchStream::next_window) inflates about one chunk
//! ([`INFLATE_CHUNK`], or less) through the codec's streaming decoder
//! ([`Inflater`]), and returns the whole records in it as a
//! [`RecordBatch`] over one frozen buffer: records stay zero-copy `Bytes`
//! slices of it. The bytes of a record cut by the chunk's end (a length
//! varint or a body) are carried to the front of the next window: one
//! record's copy per chunk. A record larger than a chunk is inflated whole
//! into its own window, up to `max_record` bytes (larger: a typed
//! [`Error::RecordTooLarge`]). So memory per batch is about one chunk plus
//! the largest record plus the codec's state, however far the batch
//! inflates, and the record count in the header is held against the
//! bytes: output past the last declared record, or an end before it, is a
//! typed error as soon as it is seen — a stream that never ends or a bomb
//! is stopped at its first byte too many. (The last window, in which no
//! record can break the bound, is not scanned: its record iterator holds
//! the count against the bytes, as for a batch decoded whole, so a batch
//! that fits in one window costs what it did before streaming.)

use bytes::Bytes;

use super::{BatchHeader, RecordBatch, BATCH_HEADER_LEN, MIN_RECORD_LEN};
use crate::codec::zigzag32;
use crate::compression::{Compression, Inflater};
use crate::error::{Error, Result};

/// The bytes of inflated records one window aims at (a window holding a
/// larger record is that record's size).
pub const INFLATE_CHUNK: usize = 256 * 1024;

/// The room a window always has for one decoding step past its target:
/// a 64 KiB lz4 block (Kafka's and librdkafka's block size).
const MIN_STEP: usize = 64 * 1024;

/// A compressed batch being inflated window by window. See the module docs.
#[derive(Debug)]
pub struct BatchStream {
    header: BatchHeader,
    compression: Compression,
    inflater: Inflater,
    /// The compressed size (to size windows of small batches).
    inflater_input: usize,
    /// Inflated bytes after the last whole record windowed.
    carry: Bytes,
    /// Records declared and not yet windowed.
    left: u32,
    /// The inflater has ended.
    ended: bool,
    chunk: usize,
    max_record: usize,
}

impl BatchStream {
    /// Starts inflating `batch` (the whole batch as [`RecordBatch::peek`]
    /// measured it, `header` its header, compressed). Windows aim at
    /// `chunk` bytes; one record may take at most `max_record` bytes.
    pub fn new(batch: &Bytes, header: BatchHeader, chunk: usize, max_record: usize) -> Result<Self> {
        let total = header.size_in_bytes();
        if batch.len() < total || total < BATCH_HEADER_LEN {
            return Err(Error::truncated("record batch", total, batch.len()));
        }
        let compression = header.compression()?;
        let body = batch.slice(BATCH_HEADER_LEN..total);
        let max_record = max_record.max(1);
        Ok(BatchStream {
            header,
            compression,
            inflater_input: body.len(),
            inflater: Inflater::new(compression, body, max_record)?,
            carry: Bytes::new(),
            left: header.record_count.max(0) as u32,
            ended: false,
            chunk: chunk.clamp(1, max_record),
            max_record,
        })
    }

    /// The batch's header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    fn count_error(&self, detail: &'static str) -> Error {
        Error::RecordCountMismatch {
            base_offset: self.header.base_offset,
            declared: self.header.record_count,
            detail,
        }
    }

    /// The next window of whole records, or `None` once every declared
    /// record has been windowed and the stream has ended with them.
    pub fn next_window(&mut self) -> Result<Option<RecordBatch>> {
        if self.left == 0 {
            if !self.carry.is_empty() {
                return Err(self.count_error("bytes remain after the last of them"));
            }
            if !self.ended {
                let mut probe = Vec::new();
                self.inflater.fill(&mut probe, 1, self.max_record)?;
                self.ended = true;
                if !probe.is_empty() {
                    return Err(self.count_error("bytes remain after the last of them"));
                }
            }
            return Ok(None);
        }
        // Room for a chunk and one decoding step past it (no regrowth and
        // copy at the end of a full window), or for what this batch's
        // compressed bytes are likely to inflate to when that is less.
        // (Growing a window past its first capacity copies it: measured, an
        // 8x guess cost lz4 batches of 100-byte records a copy each.)
        // (Sizes of buffers in memory: the sums saturate, never in practice.)
        let carry = self.carry.len();
        let guess = carry.saturating_add(self.inflater_input.saturating_mul(64).max(16 * 1024));
        let room = carry.saturating_add(self.chunk).saturating_add(MIN_STEP);
        let mut buf: Vec<u8> = Vec::with_capacity(room.min(guess));
        buf.extend_from_slice(&self.carry);
        self.carry = Bytes::new();
        let mut target = self.chunk.max(buf.len().saturating_add(1));
        loop {
            if !self.ended && buf.len() < target {
                // Room for one decoding step past the target: the record
                // bound, and never less than an lz4 block as Kafka writes
                // them (a larger block needs a larger bound).
                let limit = target.saturating_add(self.max_record.max(MIN_STEP));
                self.ended = !self.inflater.fill(&mut buf, target, limit)?;
            }
            if self.ended && buf.len() <= self.max_record {
                // The last window, and no record in it can break the
                // bound: hand the rest over as the whole-batch path does,
                // the record iterator holding the count against the bytes
                // (a batch that fits in one window is never scanned).
                let count = std::mem::take(&mut self.left);
                // As for a whole batch: a count the bytes cannot hold is
                // refused before anyone sizes a buffer from it.
                if count as usize > buf.len() / MIN_RECORD_LEN {
                    return Err(self.count_error("the batch is too short to hold them"));
                }
                return Ok(Some(RecordBatch::window(
                    self.header,
                    self.compression,
                    Bytes::from(buf),
                    count,
                )));
            }
            let (count, used, need) = self.scan(&buf)?;
            if count > 0 {
                // scan() counts at most `left`.
                self.left = self
                    .left
                    .checked_sub(count)
                    .ok_or_else(|| self.count_error("more records were windowed than declared"))?;
                let all = Bytes::from(buf);
                self.carry = all.slice(used..);
                return Ok(Some(RecordBatch::window(
                    self.header,
                    self.compression,
                    all.slice(..used),
                    count,
                )));
            }
            if self.ended {
                return Err(if buf.is_empty() {
                    self.count_error("the records end before that many were read")
                } else {
                    Error::truncated("record", need.unwrap_or(buf.len().saturating_add(1)), buf.len())
                });
            }
            // Not one whole record yet: inflate up to the first record's
            // length (when its varint is whole) or one more chunk.
            target = match need {
                Some(n) => n,
                None => buf.len().saturating_add(self.chunk),
            };
        }
    }

    /// Counts the whole records at the front of `buf` (at most `left`):
    /// (count, bytes they take, the length `buf` needs for the next one
    /// when its length varint is whole).
    fn scan(&self, buf: &[u8]) -> Result<(u32, usize, Option<usize>)> {
        let mut rest = buf;
        // Bytes of `buf` before `rest` (the records counted so far).
        let at = |rest: &[u8]| buf.len().abs_diff(rest.len());
        for count in 0..self.left {
            let (len, n) = match *rest {
                // One or two bytes: every record under 8 KiB.
                [b0, ..] if b0 & 0x80 == 0 => (zigzag32(u32::from(b0)), 1),
                [b0, b1, ..] if b1 & 0x80 == 0 => (zigzag32(u32::from(b0 & 0x7f) | (u32::from(b1) << 7)), 2),
                _ => {
                    // A varint cut by the window's end: need more.
                    let whole = rest.iter().take(5).any(|b| b & 0x80 == 0) || rest.len() >= 5;
                    if !whole {
                        return Ok((count, at(rest), None));
                    }
                    crate::codec::read_varint(rest, "record length")?
                }
            };
            if len < 0 {
                return Err(Error::LengthOutOfBounds {
                    context: "record length",
                    length: i64::from(len),
                    limit: 0,
                });
            }
            // n <= 5 and len <= i32::MAX: no overflow.
            let size = (len as usize).saturating_add(n);
            if size > self.max_record {
                return Err(Error::RecordTooLarge {
                    base_offset: self.header.base_offset,
                    size: size as u64,
                    limit: self.max_record,
                });
            }
            let Some(after) = rest.get(size..) else {
                return Ok((count, at(rest), Some(at(rest).saturating_add(size))));
            };
            rest = after;
        }
        Ok((self.left, at(rest), None))
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::*;
    use crate::record::{BatchMeta, DecodeOptions, HeaderOut, Record, RecordBatchEncoder, RecordOut};

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// Records of every shape: empty and null fields, 1- to 3-byte length
    /// varints, headers, and one record of 20 KiB.
    fn batch(codec: Compression) -> Bytes {
        let values: Vec<Vec<u8>> = (0..600usize)
            .map(|i| vec![b'a' + (i % 26) as u8; if i == 151 { 20 * 1024 } else { (i * 7) % 200 }])
            .collect();
        let headers = [HeaderOut {
            key: "h",
            value: Some(b"header-value"),
        }];
        let records: Vec<RecordOut<'_>> = values
            .iter()
            .enumerate()
            .map(|(i, v)| RecordOut {
                timestamp: i as i64,
                key: (i % 3 != 0).then_some(&v[..v.len().min(5)]),
                value: (i % 5 != 0).then_some(&v[..]),
                headers: if i % 4 == 0 { &headers } else { &[] },
            })
            .collect();
        let mut out = BytesMut::new();
        let meta = BatchMeta {
            base_offset: 1000,
            compression: codec,
            ..BatchMeta::default()
        };
        RecordBatchEncoder::new().encode(&mut out, &meta, &records).unwrap();
        out.freeze()
    }

    fn header(batch: &Bytes) -> BatchHeader {
        let opts = DecodeOptions {
            verify_crc: false,
            ..DecodeOptions::default()
        };
        RecordBatch::peek(batch, &opts).unwrap().unwrap().0
    }

    /// Every record a stream yields, and the windows' sizes.
    fn stream_all(batch: &Bytes, chunk: usize, max_record: usize) -> Result<(Vec<Record>, Vec<usize>)> {
        let mut s = BatchStream::new(batch, header(batch), chunk, max_record)?;
        let mut records = Vec::new();
        let mut windows = Vec::new();
        while let Some(w) = s.next_window()? {
            windows.push(w.records_bytes().len());
            records.extend(w.decode_records()?);
        }
        Ok((records, windows))
    }

    #[test]
    fn every_chunk_size_yields_the_records_of_the_whole_batch() {
        // Chunks of 1 to 3 bytes cut every length varint and every header;
        // larger ones cut bodies; the last chunk ends the stream.
        for codec in CODECS {
            let b = batch(codec);
            let whole = RecordBatch::decode_exact(&b, &DecodeOptions::default())
                .unwrap()
                .decode_records()
                .unwrap();
            assert_eq!(whole.len(), 600);
            for chunk in [1, 2, 3, 7, 64, 1000, 16 * 1024, 1 << 20] {
                let (got, windows) = stream_all(&b, chunk, 1 << 20).unwrap();
                assert!(got == whole, "{codec} at chunk {chunk}");
                if chunk <= 1000 {
                    assert!(windows.len() >= 2, "{codec} at chunk {chunk}: {windows:?}");
                }
                // A window is a chunk plus at most one record and one codec
                // step (16 KiB reads, 64 KiB lz4 blocks, 32 KiB snappy).
                let max = windows.iter().max().copied().unwrap_or(0);
                assert!(max <= chunk + 20 * 1024 + 64 * 1024 + 16, "{codec} at {chunk}: {max}");
            }
        }
    }

    #[test]
    fn a_record_larger_than_the_chunk_arrives_and_one_past_the_bound_is_named() {
        for codec in CODECS {
            let b = batch(codec);
            let (got, _) = stream_all(&b, 100, 21 * 1024).unwrap();
            assert_eq!(got[151].value.as_ref().map(|v| v.len()), Some(20 * 1024), "{codec}");
            let e = stream_all(&b, 100, 20 * 1024).unwrap_err();
            assert!(
                matches!(e, Error::RecordTooLarge { base_offset: 1000, limit, .. } if limit == 20 * 1024),
                "{codec}: {e}"
            );
            assert!(e.to_string().contains("max_batch_inflate"), "{e}");
        }
    }

    /// `records` (an uncompressed records section) compressed with `codec`
    /// as a batch declaring `count` records.
    fn with_body(codec: Compression, count: i32, records: &[u8]) -> Bytes {
        let mut body = Vec::new();
        crate::compression::compress(codec, records, &mut body).unwrap();
        let mut b = BytesMut::new();
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&((BATCH_HEADER_LEN - 12 + body.len()) as i32).to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&[2]);
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&codec.id().to_be_bytes());
        b.extend_from_slice(&(count - 1).to_be_bytes());
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(&(-1i64).to_be_bytes());
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&count.to_be_bytes());
        b.extend_from_slice(&body);
        b.freeze()
    }

    #[test]
    fn a_record_count_that_lies_is_a_typed_error() {
        let plain = batch(Compression::None);
        let section = &plain[BATCH_HEADER_LEN..];
        for codec in CODECS {
            // Declares more than are there.
            let e = stream_all(&with_body(codec, 601, section), 500, 1 << 20).unwrap_err();
            assert!(
                matches!(e, Error::RecordCountMismatch { declared: 601, .. }),
                "{codec}: {e}"
            );
            // Declares fewer: the first byte past the last is an error.
            let e = stream_all(&with_body(codec, 599, section), 500, 1 << 20).unwrap_err();
            assert!(
                matches!(e, Error::RecordCountMismatch { declared: 599, .. }),
                "{codec}: {e}"
            );
            // Declares billions: refused before a buffer is sized by it.
            let e = stream_all(&with_body(codec, i32::MAX, section), 1 << 20, 1 << 20).unwrap_err();
            assert!(matches!(e, Error::RecordCountMismatch { .. }), "{codec}: {e}");
            // A record cut short at the end of the stream.
            let e = stream_all(&with_body(codec, 600, &section[..section.len() - 3]), 500, 1 << 20).unwrap_err();
            assert!(
                matches!(e, Error::Truncated { .. } | Error::LengthOutOfBounds { .. }),
                "{codec}: {e}"
            );
            // A length varint that never ends, and a negative length.
            for bad in [&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01][..], &[0x01, 0, 0, 0, 0, 0, 0, 0]] {
                assert!(stream_all(&with_body(codec, 1, bad), 2, 1 << 20).is_err(), "{codec}");
            }
        }
    }

    #[test]
    fn a_bomb_is_stopped_at_its_first_byte_past_the_declared_records() {
        // 8 MiB of zeros: as records, each byte is an empty record (length
        // 0). Declaring 1, the second one is an error after one window,
        // never the whole 8 MiB.
        let zeros = vec![0u8; 8 << 20];
        for codec in CODECS {
            if codec == Compression::Snappy {
                continue; // snappy-xerial blocks are 32 KiB: the same path.
            }
            let b = with_body(codec, 1, &zeros);
            let mut s = BatchStream::new(&b, header(&b), 1024, 64 * 1024).unwrap();
            let w = s.next_window().unwrap().unwrap();
            assert!(w.records_bytes().len() <= 1024 + 64 * 1024);
            let e = s.next_window().unwrap_err();
            assert!(
                matches!(e, Error::RecordCountMismatch { declared: 1, .. }),
                "{codec}: {e}"
            );
        }
    }
}
