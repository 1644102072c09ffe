//! Record-batch compression codecs.
//!
//! This module owns the `compression` attribute bits (bits 0-2) of a v2
//! record batch and the codecs behind them: turning the batch's records
//! section into compressed bytes and back. See the Kafka documentation of
//! the record batch format: <https://kafka.apache.org/documentation/#recordbatch>.
//!
//! | id | codec  | what [`compress`] writes                                         |
//! |----|--------|------------------------------------------------------------------|
//! | 0  | none   | the input, unchanged                                             |
//! | 1  | gzip   | one gzip member (RFC 1952), deflate level 6 (by default), like `GZIPOutputStream` |
//! | 2  | snappy | xerial (snappy-java) framing with 32 KiB blocks                  |
//! | 3  | lz4    | one LZ4 frame: 64 KiB independent blocks, correct header checksum |
//! | 4  | zstd   | one standard zstd frame, level 1 by default (structured-zstd), content checksum |
//!
//! **Why xerial for snappy.** Kafka does not use the official snappy
//! "framing format": the Java client wraps records in snappy-java's
//! `SnappyOutputStream`, whose ad-hoc "xerial" framing is a 16-byte header
//! (`0x82 "SNAPPY" 0x00`, version 1, minimum compatible version 1) followed
//! by blocks of `i32` big-endian length + raw snappy block. Brokers and
//! other clients expect exactly that on the wire, so we write it. When
//! reading we accept xerial framing and also a bare raw snappy block (which
//! some non-Java producers emit), telling them apart by the magic, as
//! snappy-java does.
//!
//! **Hostile input.** [`decompress`] decodes bytes straight from the network.
//! It never panics, always terminates, and never allocates more than is
//! justified: the output is capped at `max_output`
//! ([`CompressionError::OutputTooLarge`] once exceeded), it is produced in
//! bounded chunks, and a length claimed by the input is trusted for an
//! allocation only up to `min(claim, remaining budget, codec's maximum
//! expansion of the bytes actually present)`. Zstd frames declaring a window
//! larger than the output budget are decoded with a window clamped to
//! budget + one block (a frame we would accept never refers further back):
//! a streaming zstd decoder sizes its buffer from the declared window, so an
//! unclamped 128 GiB window would let a bomb claim it before we could count
//! a byte. With the clamp, zstd needs at most about `2 * max_output + 128
//! KiB` of memory; other codecs about `max_output`. Each zstd frame's extent
//! is read from its block headers first, so the decoder (structured-zstd) is
//! handed exactly one frame, and a frame cut short is refused before any of
//! it is decoded.
//!
//! The LZ4 frame format is parsed here (blocks are decoded with
//! `lz4_flex::block`), which lets us bound every allocation, check the
//! header checksum, block and content checksums, and support linked blocks
//! (librdkafka, lz4 CLI) as well as Kafka's independent blocks.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

/// A record batch compression codec (attribute bits 0-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Compression {
    /// No compression (id 0).
    #[default]
    None,
    /// gzip (id 1).
    Gzip,
    /// snappy, xerial-framed (id 2).
    Snappy,
    /// LZ4 frame (id 3).
    Lz4,
    /// zstd (id 4); needs produce/fetch API version 7 / 10 or later.
    Zstd,
}

impl Compression {
    /// Every codec, in id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// Mask of the codec bits in a record batch's `attributes`.
    pub const ATTRIBUTE_MASK: i16 = 0x07;

    /// The codec named by the low three bits of a batch's `attributes`.
    pub fn from_attributes(attributes: i16) -> Result<Self, CompressionError> {
        match attributes & Self::ATTRIBUTE_MASK {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            id => Err(CompressionError::UnknownCodec(id)),
        }
    }

    /// The codec id (the value of attribute bits 0-2).
    pub fn id(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The `compression.level` values this codec takes, as librdkafka
    /// states them (its property's range is -1..=12; -1 is the codec's
    /// default level).
    pub fn accepted_levels(self) -> &'static str {
        match self {
            Compression::None => "-1 (no codec, no level)",
            Compression::Gzip => "-1 (default: 6) or 0..=9",
            Compression::Snappy => "-1 or 0 (snappy has one level)",
            // LZ4 levels below 3 are all LZ4's fast mode (acceleration
            // 1), which is what lz4_flex writes; 3..=12 (LZ4 HC) it has not.
            Compression::Lz4 => "-1, 0, 1 or 2 (LZ4's fast mode; the HC levels 3..=12 are not available)",
            Compression::Zstd => "-1 (default: 1) or 0..=12 (0: zstd's own default, 3)",
        }
    }

    /// Checks a `compression.level` for this codec: `Ok` when
    /// [`compress_at`] can compress at it, else
    /// [`CompressionError::UnsupportedLevel`] naming the accepted values.
    pub fn check_level(self, level: i32) -> Result<(), CompressionError> {
        let ok = level == -1
            || match self {
                Compression::None => false,
                Compression::Gzip => (0..=9).contains(&level),
                Compression::Snappy => level == 0,
                Compression::Lz4 => (0..=2).contains(&level),
                Compression::Zstd => (0..=12).contains(&level),
            };
        if ok {
            Ok(())
        } else {
            Err(CompressionError::UnsupportedLevel {
                codec: self.name(),
                level,
                accepted: self.accepted_levels(),
            })
        }
    }

    /// The name Kafka uses in `compression.type`: "none", "gzip", "snappy",
    /// "lz4" or "zstd".
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = CompressionError;

    /// Parses a codec name, ignoring ASCII case and surrounding whitespace.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Compression::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| CompressionError::UnknownName(s.to_owned()))
    }
}

/// Errors from compressing or decompressing a record batch payload.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum CompressionError {
    /// Attribute bits 0-2 hold an id that names no codec (5, 6 or 7).
    #[error("unknown compression codec id {0} (valid ids are 0..=4)")]
    UnknownCodec(i16),
    /// A codec name that is not one of the known ones.
    #[error("unknown compression codec {0:?}; expected one of: none, gzip, snappy, lz4, zstd")]
    UnknownName(String),
    /// The compressed bytes are malformed, truncated or fail a checksum.
    #[error("corrupt {codec} data: {message}")]
    Corrupt {
        /// Codec name.
        codec: &'static str,
        /// What was wrong.
        message: String,
    },
    /// Decompressing would produce more than the allowed number of bytes.
    #[error("{codec} data decompresses to more than the limit of {limit} bytes")]
    OutputTooLarge {
        /// Codec name.
        codec: &'static str,
        /// The `max_output` that was exceeded.
        limit: usize,
    },
    /// A `compression.level` the codec does not have.
    #[error("compression.level {level} is not a {codec} level; {codec} takes {accepted}")]
    UnsupportedLevel {
        /// Codec name.
        codec: &'static str,
        /// The level asked for.
        level: i32,
        /// The levels the codec takes.
        accepted: &'static str,
    },
    /// The encoder failed (e.g. an input too large for the format).
    #[error("{codec} compression failed: {message}")]
    Encode {
        /// Codec name.
        codec: &'static str,
        /// What went wrong.
        message: String,
    },
}

fn corrupt(codec: &'static str, message: impl Into<String>) -> CompressionError {
    CompressionError::Corrupt {
        codec,
        message: message.into(),
    }
}

/// Compresses `input` with `codec` at its default level, appending the
/// compressed bytes to `out`.
///
/// On error, `out` is left as it was.
pub fn compress(codec: Compression, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressionError> {
    compress_at(codec, -1, input, out)
}

/// Compresses `input` with `codec` at `level` (librdkafka's
/// `compression.level`: -1 is the codec's default; see
/// [`Compression::check_level`]), appending the compressed bytes to `out`.
/// A level the codec does not have is
/// [`CompressionError::UnsupportedLevel`].
///
/// On error, `out` is left as it was.
pub fn compress_at(codec: Compression, level: i32, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressionError> {
    codec.check_level(level).or_else(|e| match codec {
        // No codec: nothing a level could change.
        Compression::None => Ok(()),
        _ => Err(e),
    })?;
    let start = out.len();
    let result = match codec {
        Compression::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        Compression::Gzip => gzip::compress(input, level, out),
        // One level each (checked above).
        Compression::Snappy => snappy::compress(input, out),
        Compression::Lz4 => lz4::compress(input, out),
        Compression::Zstd => zstd::compress(input, level, out),
    };
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// Decompresses `input`, which came from a record batch compressed with
/// `codec`, refusing to produce more than `max_output` bytes.
///
/// Safe on hostile input: see the module documentation.
pub fn decompress(codec: Compression, input: &[u8], max_output: usize) -> Result<Vec<u8>, CompressionError> {
    let mut out = Vec::new();
    decompress_into(codec, input, max_output, &mut out)?;
    Ok(out)
}

/// Like [`decompress`], but appends to `out` (so its buffer can be reused).
/// `max_output` bounds the number of bytes appended. On error, `out` is
/// truncated back to its original length.
pub fn decompress_into(
    codec: Compression,
    input: &[u8],
    max_output: usize,
    out: &mut Vec<u8>,
) -> Result<(), CompressionError> {
    let mut sink = Sink::new(codec.name(), out, max_output);
    let result = match codec {
        Compression::None => sink.push(input),
        _ if input.is_empty() => Err(corrupt(codec.name(), "empty input")),
        Compression::Gzip => gzip::decompress(input, &mut sink),
        Compression::Snappy => snappy::decompress(input, &mut sink),
        Compression::Lz4 => lz4::decompress(input, &mut sink),
        Compression::Zstd => zstd::decompress(input, &mut sink),
    };
    if result.is_err() {
        sink.rollback();
    }
    result
}

/// A streaming decompressor over one batch's compressed records section:
/// each [`fill`](Inflater::fill) appends a bounded amount of output, so a
/// batch is inflated chunk by chunk instead of whole (what a consumer uses
/// to keep memory at about one chunk plus the largest record, however far
/// a batch inflates).
///
/// `max_unit` bounds what one decoding step may need at once and is the
/// bound named when it is exceeded ([`CompressionError::OutputTooLarge`]):
/// a raw (non-xerial) snappy block, whose whole length is in its header
/// and which cannot be decoded in parts; one xerial block (32 KiB is always
/// allowed: snappy-java's size); one lz4 block (the caller's `limit` must
/// leave room for it: at most 4 MiB by the lz4 format, 64 KiB as Kafka
/// and librdkafka write them); the zstd
/// window kept as history (a larger declared window is clamped to
/// `max_unit` + one block, a single-segment frame larger than that is
/// refused). gzip and zstd output comes in 16 KiB reads.
///
/// Hostile input: every step either makes progress through the (finite)
/// input or ends, and no step allocates past the caller's `limit`; so a
/// stream that never ends or a decompression bomb costs at most one chunk
/// of memory at a time, and the records parser on top stops it at the
/// first byte that the batch's record count does not account for.
pub struct Inflater {
    codec: Compression,
    max_unit: usize,
    state: InflateState,
}

enum InflateState {
    Gzip(Box<flate2::bufread::MultiGzDecoder<bytes::buf::Reader<bytes::Bytes>>>),
    Snappy(snappy::Stream),
    Lz4(Box<lz4::Stream>),
    Zstd(Box<zstd::Stream>),
    Done,
}

impl fmt::Debug for Inflater {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inflater")
            .field("codec", &self.codec)
            .field("max_unit", &self.max_unit)
            .finish_non_exhaustive()
    }
}

impl Inflater {
    /// A decompressor for `input` (the compressed records section) in
    /// `codec`; `Compression::None` is refused (uncompressed records are
    /// used in place).
    pub fn new(codec: Compression, input: bytes::Bytes, max_unit: usize) -> Result<Self, CompressionError> {
        if input.is_empty() {
            return Err(corrupt(codec.name(), "empty input"));
        }
        let state = match codec {
            Compression::None => return Err(corrupt("none", "uncompressed data is not inflated")),
            Compression::Gzip => {
                use bytes::Buf;
                InflateState::Gzip(Box::new(flate2::bufread::MultiGzDecoder::new(input.reader())))
            }
            Compression::Snappy => InflateState::Snappy(snappy::Stream::new(input)?),
            Compression::Lz4 => InflateState::Lz4(Box::new(lz4::Stream::new(input))),
            Compression::Zstd => InflateState::Zstd(Box::new(zstd::Stream::new(input))),
        };
        Ok(Inflater {
            codec,
            max_unit: max_unit.max(1),
            state,
        })
    }

    /// Appends output to `out` until it holds at least `target` bytes or
    /// the stream ends; `out` never grows past `limit` (a step that would
    /// is [`CompressionError::OutputTooLarge`] naming `max_unit`). Returns
    /// whether more output may follow (false: the stream ended cleanly).
    pub fn fill(&mut self, out: &mut Vec<u8>, target: usize, limit: usize) -> Result<bool, CompressionError> {
        let codec = self.codec.name();
        let max_unit = self.max_unit;
        let result = match &mut self.state {
            InflateState::Done => Ok(false),
            InflateState::Gzip(d) => read_some(codec, &mut **d, out, target, limit),
            InflateState::Snappy(s) => s.fill(out, target, limit, max_unit),
            InflateState::Lz4(s) => s.fill(out, target, limit),
            InflateState::Zstd(s) => s.fill(out, target, limit, max_unit),
        };
        let result = result.map_err(|e| match e {
            CompressionError::OutputTooLarge { codec, .. } => {
                CompressionError::OutputTooLarge { codec, limit: max_unit }
            }
            e => e,
        });
        if !matches!(result, Ok(true)) {
            // Ended or failed: nothing more comes from this stream.
            self.state = InflateState::Done;
        }
        result
    }
}

fn too_large(codec: &'static str, limit: usize) -> CompressionError {
    CompressionError::OutputTooLarge { codec, limit }
}

/// Reads `reader` into `out` in bounded pieces until `target` is reached
/// (true) or the reader ends (false).
fn read_some<R: Read>(
    codec: &'static str,
    reader: &mut R,
    out: &mut Vec<u8>,
    target: usize,
    limit: usize,
) -> Result<bool, CompressionError> {
    let mut buf = [0u8; READ_CHUNK];
    while let Some(wanted) = target.checked_sub(out.len()).filter(|&w| w > 0) {
        let room = limit.saturating_sub(out.len()).min(READ_CHUNK);
        if room == 0 {
            return Err(too_large(codec, limit));
        }
        // Never past the target: a window ends where it was asked to.
        let window = buf.get_mut(..room.min(wanted)).unwrap_or_default();
        let n = reader.read(window).map_err(|e| corrupt(codec, e.to_string()))?;
        if n == 0 {
            // Room was exhausted exactly at the end, or the stream ended.
            return Ok(false);
        }
        out.extend_from_slice(read_part(codec, window, n)?);
    }
    Ok(true)
}

/// The first `n` bytes of `buf`, that a reader said it filled: a typed
/// error if it claims more than it was given.
fn read_part<'b>(codec: &'static str, buf: &'b [u8], n: usize) -> Result<&'b [u8], CompressionError> {
    buf.get(..n)
        .ok_or_else(|| corrupt(codec, "a reader returned more bytes than it was asked for"))
}

/// How far into `whole` its suffix `rest` starts (saturating, as a suffix
/// is never longer than the whole).
#[inline]
fn consumed(whole: &[u8], rest: &[u8]) -> usize {
    whole.len().saturating_sub(rest.len())
}

/// `out[at..]`, empty past the end.
#[inline]
fn tail_at_mut(out: &mut [u8], at: usize) -> &mut [u8] {
    out.get_mut(at..).unwrap_or_default()
}

/// `input[at..]`, empty past the end.
#[inline]
fn tail_at(input: &[u8], at: usize) -> &[u8] {
    input.get(at..).unwrap_or_default()
}

/// `a + b` for the size of a buffer being encoded: an `Encode` error naming
/// `codec` past `usize::MAX` (no allocation could hold it anyway).
fn encode_size(codec: &'static str, a: usize, b: usize) -> Result<usize, CompressionError> {
    a.checked_add(b).ok_or_else(|| CompressionError::Encode {
        codec,
        message: "output size overflows usize".into(),
    })
}

/// A streaming xxHash32 (the lz4 content checksum of a streamed frame).
#[derive(Clone, Debug)]
struct Xxh32 {
    v: [u32; 4],
    buf: [u8; 16],
    buf_len: usize,
    total: u64,
    seed: u32,
}

impl Xxh32 {
    const P1: u32 = 2_654_435_761;
    const P2: u32 = 2_246_822_519;

    fn new(seed: u32) -> Self {
        Xxh32 {
            v: [
                seed.wrapping_add(Self::P1).wrapping_add(Self::P2),
                seed.wrapping_add(Self::P2),
                seed,
                seed.wrapping_sub(Self::P1),
            ],
            buf: [0; 16],
            buf_len: 0,
            total: 0,
            seed,
        }
    }

    fn stripe(v: &mut [u32; 4], s: &[u8; 16]) {
        let (lanes, _) = s.as_chunks::<4>();
        for (acc, lane) in v.iter_mut().zip(lanes) {
            *acc = acc
                .wrapping_add(u32::from_le_bytes(*lane).wrapping_mul(Self::P2))
                .rotate_left(13)
                .wrapping_mul(Self::P1);
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        // A byte count: 2^64 bytes are never hashed.
        self.total = self.total.saturating_add(data.len() as u64);
        if self.buf_len > 0 {
            // Top up the partial stripe: `n` fits both the free room and `data`.
            let free = self.buf.get_mut(self.buf_len..).unwrap_or_default();
            let n = free.len().min(data.len());
            if let (Some(dst), Some((src, rest))) = (free.get_mut(..n), data.split_at_checked(n)) {
                dst.copy_from_slice(src);
                data = rest;
            }
            self.buf_len = self.buf_len.saturating_add(n).min(16);
            if self.buf_len < 16 {
                return;
            }
            let buf = self.buf;
            Self::stripe(&mut self.v, &buf);
            self.buf_len = 0;
        }
        let (stripes, tail) = data.as_chunks::<16>();
        for s in stripes {
            Self::stripe(&mut self.v, s);
        }
        // `tail` is shorter than a stripe.
        if let Some(dst) = self.buf.get_mut(..tail.len()) {
            dst.copy_from_slice(tail);
            self.buf_len = tail.len();
        }
    }

    fn digest(&self) -> u32 {
        // The one-shot function's tail over the buffered bytes, with the
        // accumulators (or the short-input seed) of what came before.
        let v = &self.v;
        let acc = if self.total >= 16 {
            v[0].rotate_left(1)
                .wrapping_add(v[1].rotate_left(7))
                .wrapping_add(v[2].rotate_left(12))
                .wrapping_add(v[3].rotate_left(18))
        } else {
            self.seed.wrapping_add(374_761_393)
        };
        xxh32_finish(acc, self.total as u32, self.buf.get(..self.buf_len).unwrap_or_default())
    }
}

/// Size of the chunks in which streaming decoders are read.
const READ_CHUNK: usize = 16 * 1024;

/// The output of one decompression: appends to a `Vec` while enforcing the
/// byte budget and growing the allocation only as output actually appears.
struct Sink<'a> {
    codec: &'static str,
    out: &'a mut Vec<u8>,
    start: usize,
    limit: usize,
}

impl<'a> Sink<'a> {
    fn new(codec: &'static str, out: &'a mut Vec<u8>, limit: usize) -> Self {
        let start = out.len();
        Sink {
            codec,
            out,
            start,
            limit,
        }
    }

    /// Bytes produced so far.
    fn produced(&self) -> usize {
        // `out` never shrinks below `start` (rollback truncates to it).
        self.out.len().saturating_sub(self.start)
    }

    /// Bytes that may still be produced (none once the limit is reached).
    fn budget(&self) -> usize {
        self.limit.saturating_sub(self.produced())
    }

    fn too_large(&self) -> CompressionError {
        CompressionError::OutputTooLarge {
            codec: self.codec,
            limit: self.limit,
        }
    }

    /// Fails unless `n` more bytes fit in the budget.
    fn check(&self, n: usize) -> Result<(), CompressionError> {
        if n > self.budget() {
            Err(self.too_large())
        } else {
            Ok(())
        }
    }

    /// Makes room for `n` more bytes (which must fit in the budget) with
    /// roughly doubling growth that never reserves past the budget.
    fn reserve(&mut self, n: usize) {
        if self.out.capacity().saturating_sub(self.out.len()) < n {
            let grow = self.produced().max(READ_CHUNK).min(self.budget()).max(n);
            self.out.reserve_exact(grow);
        }
    }

    fn push(&mut self, data: &[u8]) -> Result<(), CompressionError> {
        self.check(data.len())?;
        self.reserve(data.len());
        self.out.extend_from_slice(data);
        Ok(())
    }

    /// Appends `n` zero bytes (n must fit in the budget) for a block decoder
    /// to overwrite, returning the offset where they start.
    fn extend_zeroed(&mut self, n: usize) -> Result<usize, CompressionError> {
        self.check(n)?;
        self.reserve(n);
        let at = self.out.len();
        self.out.resize(at.checked_add(n).ok_or_else(|| self.too_large())?, 0);
        Ok(at)
    }

    /// Reads `reader` to its end into the sink, in bounded chunks.
    fn read_from<R: Read>(&mut self, mut reader: R) -> Result<(), CompressionError> {
        let mut buf = [0u8; READ_CHUNK];
        loop {
            // Every error (including `Interrupted`, which slice-backed
            // decoders never return) is final: no retry loop can spin.
            let n = reader.read(&mut buf).map_err(|e| corrupt(self.codec, e.to_string()))?;
            if n == 0 {
                return Ok(());
            }
            self.push(read_part(self.codec, &buf, n)?)?;
        }
    }

    fn rollback(&mut self) {
        self.out.truncate(self.start);
    }
}

/// Splits `N` bytes off the front of `input`.
fn take_array<const N: usize>(input: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = input.split_first_chunk::<N>()?;
    *input = rest;
    Some(*head)
}

/// Splits a big-endian `i32` off the front of `input`.
fn take_i32_be(input: &mut &[u8]) -> Option<i32> {
    take_array(input).map(i32::from_be_bytes)
}

/// Splits a little-endian `u32` off the front of `input`.
fn take_u32_le(input: &mut &[u8]) -> Option<u32> {
    take_array(input).map(u32::from_le_bytes)
}

/// Splits `n` bytes off the front of `input`.
fn take<'i>(input: &mut &'i [u8], n: usize) -> Option<&'i [u8]> {
    if n > input.len() {
        return None;
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Some(head)
}

mod gzip {
    use super::{CompressionError, Sink};
    use std::io::Write;

    const NAME: &str = "gzip";

    /// Level 6 is what java.util.zip's default (-1) means, and Kafka's
    /// default `compression.gzip.level`.
    const DEFAULT_LEVEL: u32 = 6;

    /// `level`: -1 (the default) or 0..=9, checked by the caller.
    pub(super) fn compress(input: &[u8], level: i32, out: &mut Vec<u8>) -> Result<(), CompressionError> {
        let level = u32::try_from(level).unwrap_or(DEFAULT_LEVEL);
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
        enc.write_all(input)
            .and_then(|()| enc.try_finish())
            .map_err(|e| CompressionError::Encode {
                codec: NAME,
                message: e.to_string(),
            })
    }

    pub(super) fn decompress(input: &[u8], sink: &mut Sink<'_>) -> Result<(), CompressionError> {
        // Concatenated members are accepted, as `GZIPInputStream` does.
        // The decoder checks each member's CRC-32 and ISIZE trailer.
        sink.read_from(flate2::bufread::MultiGzDecoder::new(input))
    }
}

mod snappy {
    use super::{consumed, corrupt, encode_size, tail_at, tail_at_mut, take, take_i32_be, CompressionError, Sink};

    const NAME: &str = "snappy";

    /// snappy-java's stream magic.
    pub(super) const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0x00];
    /// The version and minimum compatible version snappy-java writes.
    const XERIAL_VERSION: i32 = 1;
    const XERIAL_COMPATIBLE_VERSION: i32 = 1;
    const XERIAL_HEADER_LEN: usize = 16;
    /// snappy-java's default (uncompressed) block size.
    pub(super) const XERIAL_BLOCK: usize = 32 * 1024;

    /// Upper bound of a raw snappy block's expansion: the densest element
    /// (a 3-byte copy of 64 bytes) expands 64/3 < 22 times.
    const MAX_EXPANSION: usize = 22;

    pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressionError> {
        out.reserve(encode_size(
            NAME,
            XERIAL_HEADER_LEN,
            snap::raw::max_compress_len(input.len().min(XERIAL_BLOCK)),
        )?);
        out.extend_from_slice(&XERIAL_MAGIC);
        out.extend_from_slice(&XERIAL_VERSION.to_be_bytes());
        out.extend_from_slice(&XERIAL_COMPATIBLE_VERSION.to_be_bytes());
        let mut encoder = snap::raw::Encoder::new();
        for chunk in input.chunks(XERIAL_BLOCK) {
            let len_at = out.len();
            let max = encode_size(NAME, 4, snap::raw::max_compress_len(chunk.len()))?;
            out.resize(encode_size(NAME, len_at, max)?, 0);
            let Some((len_field, data)) = out.get_mut(len_at..).and_then(<[u8]>::split_first_chunk_mut::<4>) else {
                return Err(encode_err("no room for the block length"));
            };
            let n = encoder.compress(chunk, data).map_err(encode_err)?;
            // n <= max_compress_len(32 KiB) which is far below i32::MAX.
            *len_field = i32::try_from(n)
                .map_err(|_| encode_err("block too large"))?
                .to_be_bytes();
            out.truncate(encode_size(NAME, len_at, encode_size(NAME, 4, n)?)?);
        }
        Ok(())
    }

    fn encode_err(e: impl std::fmt::Display) -> CompressionError {
        CompressionError::Encode {
            codec: NAME,
            message: e.to_string(),
        }
    }

    pub(super) fn decompress(input: &[u8], sink: &mut Sink<'_>) -> Result<(), CompressionError> {
        let mut decoder = snap::raw::Decoder::new();
        match input.strip_prefix(&XERIAL_MAGIC) {
            Some(_) => decompress_xerial(input, &mut decoder, sink),
            None => decompress_raw(input, &mut decoder, sink),
        }
    }

    fn decompress_xerial(
        input: &[u8],
        decoder: &mut snap::raw::Decoder,
        sink: &mut Sink<'_>,
    ) -> Result<(), CompressionError> {
        // The first four magic bytes read as a block length: snappy-java
        // treats that as the start of a concatenated stream's header.
        let magic_head = i32::from_be_bytes([XERIAL_MAGIC[0], XERIAL_MAGIC[1], XERIAL_MAGIC[2], XERIAL_MAGIC[3]]);
        let mut rest = input;
        skip_header(&mut rest)?;
        while !rest.is_empty() {
            let mut after = rest;
            let len = take_i32_be(&mut after).ok_or_else(|| corrupt(NAME, "truncated xerial block length"))?;
            if len == magic_head {
                // Re-read the 4 bytes as the start of a whole header.
                skip_header(&mut rest)?;
                continue;
            }
            rest = after;
            let len = usize::try_from(len).map_err(|_| corrupt(NAME, format!("negative xerial block length {len}")))?;
            let block = take(&mut rest, len).ok_or_else(|| {
                corrupt(
                    NAME,
                    format!("xerial block length {len} exceeds the {} bytes left", rest.len()),
                )
            })?;
            decompress_raw(block, decoder, sink)?;
        }
        Ok(())
    }

    /// A snappy stream decoded block by block: xerial blocks one at a
    /// time; a raw (non-xerial) block whole, its claimed length checked
    /// against `max_unit` first.
    pub(super) struct Stream {
        input: bytes::Bytes,
        /// Where the undecoded input starts.
        at: usize,
        xerial: bool,
        decoder: snap::raw::Decoder,
    }

    impl Stream {
        pub(super) fn new(input: bytes::Bytes) -> Result<Self, CompressionError> {
            let xerial = input.starts_with(&XERIAL_MAGIC);
            let mut at = 0;
            if xerial {
                let mut rest = &input[..];
                skip_header(&mut rest)?;
                at = consumed(&input, rest);
            }
            Ok(Stream {
                input,
                at,
                xerial,
                decoder: snap::raw::Decoder::new(),
            })
        }

        pub(super) fn fill(
            &mut self,
            out: &mut Vec<u8>,
            target: usize,
            limit: usize,
            max_unit: usize,
        ) -> Result<bool, CompressionError> {
            let magic_head = i32::from_be_bytes([XERIAL_MAGIC[0], XERIAL_MAGIC[1], XERIAL_MAGIC[2], XERIAL_MAGIC[3]]);
            while out.len() < target {
                let mut rest = tail_at(&self.input, self.at);
                if rest.is_empty() {
                    return Ok(false);
                }
                let block = if self.xerial {
                    let len = take_i32_be(&mut rest).ok_or_else(|| corrupt(NAME, "truncated xerial block length"))?;
                    if len == magic_head {
                        let mut again = tail_at(&self.input, self.at);
                        skip_header(&mut again)?;
                        self.at = consumed(&self.input, again);
                        continue;
                    }
                    let len = usize::try_from(len)
                        .map_err(|_| corrupt(NAME, format!("negative xerial block length {len}")))?;
                    take(&mut rest, len).ok_or_else(|| {
                        corrupt(
                            NAME,
                            format!("xerial block length {len} exceeds the {} bytes left", rest.len()),
                        )
                    })?
                } else {
                    std::mem::take(&mut rest)
                };
                self.at = consumed(&self.input, rest);
                let len = snap::raw::decompress_len(block).map_err(|e| corrupt(NAME, e.to_string()))?;
                if len > block.len().saturating_mul(MAX_EXPANSION) {
                    return Err(corrupt(
                        NAME,
                        format!(
                            "block of {} bytes claims an impossible {len} decompressed bytes",
                            block.len()
                        ),
                    ));
                }
                // A raw block is the whole stream: the bound applies as is.
                // Xerial blocks are 32 KiB from snappy-java; one may always
                // be that large.
                let unit = if self.xerial {
                    max_unit.max(XERIAL_BLOCK)
                } else {
                    max_unit
                };
                if len > unit || len > limit.saturating_sub(out.len()) {
                    return Err(super::too_large(NAME, max_unit));
                }
                let at = out.len();
                out.resize(at.checked_add(len).ok_or_else(|| super::too_large(NAME, max_unit))?, 0);
                let n = self
                    .decoder
                    .decompress(block, tail_at_mut(out, at))
                    .map_err(|e| corrupt(NAME, e.to_string()))?;
                if n != len {
                    return Err(corrupt(NAME, "block decoded to fewer bytes than its header claims"));
                }
            }
            Ok(self.at < self.input.len())
        }
    }

    /// Consumes a 16-byte xerial header. Version numbers are not checked:
    /// every snappy-java release writes 1/1 and reads any.
    fn skip_header(rest: &mut &[u8]) -> Result<(), CompressionError> {
        let header = take(rest, XERIAL_HEADER_LEN).ok_or_else(|| corrupt(NAME, "truncated xerial header"))?;
        if !header.starts_with(&XERIAL_MAGIC) {
            return Err(corrupt(NAME, "bad xerial magic"));
        }
        Ok(())
    }

    /// Decodes one raw snappy block, checking its claimed length before
    /// allocating anything.
    fn decompress_raw(
        block: &[u8],
        decoder: &mut snap::raw::Decoder,
        sink: &mut Sink<'_>,
    ) -> Result<(), CompressionError> {
        let len = snap::raw::decompress_len(block).map_err(|e| corrupt(NAME, e.to_string()))?;
        if len > block.len().saturating_mul(MAX_EXPANSION) {
            return Err(corrupt(
                NAME,
                format!(
                    "block of {} bytes claims an impossible {len} decompressed bytes",
                    block.len()
                ),
            ));
        }
        let at = sink.extend_zeroed(len)?;
        let n = decoder
            .decompress(block, tail_at_mut(sink.out, at))
            .map_err(|e| corrupt(NAME, e.to_string()))?;
        if n != len {
            return Err(corrupt(NAME, "block decoded to fewer bytes than its header claims"));
        }
        Ok(())
    }
}

mod lz4 {
    use super::{
        consumed, corrupt, encode_size, tail_at, tail_at_mut, take, take_array, take_u32_le, xxh32, CompressionError,
        Sink,
    };

    const NAME: &str = "lz4";
    const MAGIC: u32 = 0x184D_2204;
    const SKIPPABLE_MAGIC: u32 = 0x184D_2A50; // ..=0x184D2A5F
    /// Block size written (Kafka's `KafkaLZ4BlockOutputStream` uses 64 KiB).
    pub(super) const BLOCK: usize = 64 * 1024;
    /// FLG: version 01, block independence; no checksums, no content size.
    const FLG: u8 = 0b0110_0000;
    /// BD: block maximum size 64 KiB (code 4).
    const BD: u8 = 4 << 4;
    const UNCOMPRESSED_BIT: u32 = 0x8000_0000;
    /// Linked blocks may refer to the previous 64 KiB of output.
    const WINDOW: usize = 64 * 1024;
    /// An LZ4 block can expand at most ~255 times (each extra match-length
    /// byte adds 255 bytes of output).
    const MAX_EXPANSION: usize = 255;

    pub(super) fn header_checksum(descriptor: &[u8]) -> u8 {
        // The "HC" byte: second byte of xxh32 of FLG..end of descriptor.
        // (Kafka before 0.10 wrongly hashed the magic too; we never do.)
        (xxh32(descriptor, 0) >> 8) as u8
    }

    fn encode_err(e: impl std::fmt::Display) -> CompressionError {
        CompressionError::Encode {
            codec: NAME,
            message: e.to_string(),
        }
    }

    pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressionError> {
        out.extend_from_slice(&MAGIC.to_le_bytes());
        out.extend_from_slice(&[FLG, BD, header_checksum(&[FLG, BD])]);
        for chunk in input.chunks(BLOCK) {
            let size_at = out.len();
            let max = encode_size(NAME, 4, lz4_flex::block::get_maximum_output_size(chunk.len()))?;
            out.resize(encode_size(NAME, size_at, max)?, 0);
            let Some((size_field, data)) = out.get_mut(size_at..).and_then(<[u8]>::split_first_chunk_mut::<4>) else {
                return Err(encode_err("no room for the block size"));
            };
            let n = lz4_flex::block::compress_into(chunk, data).map_err(encode_err)?;
            if n < chunk.len() {
                *size_field = (n as u32).to_le_bytes();
                out.truncate(encode_size(NAME, size_at, encode_size(NAME, 4, n)?)?);
            } else {
                // Incompressible: store as is, as Kafka does.
                *size_field = (chunk.len() as u32 | UNCOMPRESSED_BIT).to_le_bytes();
                out.truncate(encode_size(NAME, size_at, 4)?);
                out.extend_from_slice(chunk);
            }
        }
        out.extend_from_slice(&0u32.to_le_bytes()); // end mark
        Ok(())
    }

    pub(super) fn decompress(input: &[u8], sink: &mut Sink<'_>) -> Result<(), CompressionError> {
        let mut rest = input;
        while !rest.is_empty() {
            let magic = take_u32_le(&mut rest).ok_or_else(|| corrupt(NAME, "truncated magic"))?;
            if magic & 0xFFFF_FFF0 == SKIPPABLE_MAGIC {
                let len = take_u32_le(&mut rest).ok_or_else(|| corrupt(NAME, "truncated skippable frame"))?;
                take(&mut rest, len as usize).ok_or_else(|| corrupt(NAME, "truncated skippable frame"))?;
                continue;
            }
            if magic != MAGIC {
                return Err(corrupt(NAME, format!("bad frame magic {magic:#010x}")));
            }
            decompress_frame(&mut rest, sink)?;
        }
        Ok(())
    }

    /// A frame descriptor's settings.
    #[derive(Clone, Copy, Debug)]
    struct FrameInfo {
        independent: bool,
        block_checksum: bool,
        content_checksum: bool,
        content_size: Option<u64>,
        block_max: usize,
    }

    /// Reads a frame descriptor (after the magic) and checks its checksum.
    fn read_header(rest: &mut &[u8]) -> Result<FrameInfo, CompressionError> {
        let truncated = || corrupt(NAME, "truncated frame");
        let frame_input = *rest;
        let [flg, bd] = take_array(rest).ok_or_else(truncated)?;
        if flg >> 6 != 0b01 {
            return Err(corrupt(NAME, format!("unsupported frame version {}", flg >> 6)));
        }
        if flg & 0b10 != 0 || bd & 0b1000_1111 != 0 {
            return Err(corrupt(NAME, "reserved frame descriptor bits set"));
        }
        let independent = flg & 0b0010_0000 != 0;
        let block_checksum = flg & 0b0001_0000 != 0;
        let has_content_size = flg & 0b0000_1000 != 0;
        let content_checksum = flg & 0b0000_0100 != 0;
        let has_dict_id = flg & 0b0000_0001 != 0;
        let block_max = match bd >> 4 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            code => return Err(corrupt(NAME, format!("invalid block maximum size code {code}"))),
        };
        let content_size = if has_content_size {
            Some(u64::from_le_bytes(take_array(rest).ok_or_else(truncated)?))
        } else {
            None
        };
        if has_dict_id {
            take(rest, 4).ok_or_else(truncated)?;
        }
        let descriptor = frame_input.get(..consumed(frame_input, rest)).unwrap_or_default();
        let [hc] = take_array(rest).ok_or_else(truncated)?;
        if hc != header_checksum(descriptor) {
            return Err(corrupt(NAME, "frame header checksum mismatch"));
        }
        if has_dict_id {
            return Err(corrupt(NAME, "frames compressed with a dictionary are not supported"));
        }
        Ok(FrameInfo {
            independent,
            block_checksum,
            content_checksum,
            content_size,
            block_max,
        })
    }

    /// Reads one block's size word and data (and checks its checksum):
    /// `None` at the end mark; `Some((data, uncompressed))` otherwise.
    fn read_block<'i>(rest: &mut &'i [u8], info: &FrameInfo) -> Result<Option<(&'i [u8], bool)>, CompressionError> {
        let word = take_u32_le(rest).ok_or_else(|| corrupt(NAME, "truncated block size"))?;
        if word == 0 {
            return Ok(None);
        }
        let len = (word & !UNCOMPRESSED_BIT) as usize;
        if len > info.block_max {
            return Err(corrupt(
                NAME,
                format!("block of {len} bytes exceeds the frame's maximum {}", info.block_max),
            ));
        }
        let data = take(rest, len).ok_or_else(|| corrupt(NAME, "truncated block"))?;
        if info.block_checksum {
            let sum = take_u32_le(rest).ok_or_else(|| corrupt(NAME, "truncated block checksum"))?;
            if sum != xxh32(data, 0) {
                return Err(corrupt(NAME, "block checksum mismatch"));
            }
        }
        Ok(Some((data, word & UNCOMPRESSED_BIT != 0)))
    }

    fn decompress_frame(rest: &mut &[u8], sink: &mut Sink<'_>) -> Result<(), CompressionError> {
        let info = read_header(rest)?;
        let FrameInfo {
            independent,
            content_checksum,
            content_size,
            block_max,
            ..
        } = info;
        if let Some(size) = content_size {
            if size > sink.budget() as u64 {
                return Err(sink.too_large());
            }
        }

        let frame_start = sink.out.len();
        while let Some((data, uncompressed)) = read_block(rest, &info)? {
            if uncompressed {
                sink.push(data)?;
                continue;
            }
            // Room for the largest output this block could justify.
            let justified = block_max.min(data.len().saturating_mul(MAX_EXPANSION));
            let room = justified.min(sink.budget());
            let at = sink.extend_zeroed(room)?;
            let Some((history, target)) = sink.out.split_at_mut_checked(at) else {
                return Err(corrupt(NAME, "output buffer out of step"));
            };
            let result = if independent {
                lz4_flex::block::decompress_into(data, target)
            } else {
                let dict_start = frame_start.max(at.saturating_sub(WINDOW));
                lz4_flex::block::decompress_into_with_dict(data, target, tail_at(history, dict_start))
            };
            match result {
                // n <= room: the decoder wrote into `target`.
                Ok(n) => sink.out.truncate(at.saturating_add(n)),
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if room < justified => {
                    return Err(sink.too_large())
                }
                Err(e) => return Err(corrupt(NAME, e.to_string())),
            }
        }
        let frame_output = tail_at(sink.out, frame_start);
        if content_checksum {
            let sum = take_u32_le(rest).ok_or_else(|| corrupt(NAME, "truncated content checksum"))?;
            if sum != xxh32(frame_output, 0) {
                return Err(corrupt(NAME, "content checksum mismatch"));
            }
        }
        if let Some(size) = content_size {
            if size != frame_output.len() as u64 {
                return Err(corrupt(
                    NAME,
                    format!(
                        "frame declares {size} bytes of content but holds {}",
                        frame_output.len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// An lz4 stream decoded block by block into the caller's buffer;
    /// linked blocks see the last 64 KiB of output through `history`.
    pub(super) struct Stream {
        input: bytes::Bytes,
        at: usize,
        frame: Option<FrameState>,
    }

    struct FrameState {
        info: FrameInfo,
        produced: u64,
        hasher: Option<super::Xxh32>,
        /// The last `WINDOW` bytes of this frame's output (linked blocks).
        history: Vec<u8>,
    }

    impl Stream {
        pub(super) fn new(input: bytes::Bytes) -> Self {
            Stream {
                input,
                at: 0,
                frame: None,
            }
        }

        pub(super) fn fill(
            &mut self,
            out: &mut Vec<u8>,
            target: usize,
            limit: usize,
        ) -> Result<bool, CompressionError> {
            while out.len() < target {
                let mut rest = tail_at(&self.input, self.at);
                let Some(frame) = self.frame.as_mut() else {
                    if rest.is_empty() {
                        return Ok(false);
                    }
                    let magic = take_u32_le(&mut rest).ok_or_else(|| corrupt(NAME, "truncated magic"))?;
                    if magic & 0xFFFF_FFF0 == SKIPPABLE_MAGIC {
                        let len = take_u32_le(&mut rest).ok_or_else(|| corrupt(NAME, "truncated skippable frame"))?;
                        take(&mut rest, len as usize).ok_or_else(|| corrupt(NAME, "truncated skippable frame"))?;
                    } else if magic != MAGIC {
                        return Err(corrupt(NAME, format!("bad frame magic {magic:#010x}")));
                    } else {
                        let info = read_header(&mut rest)?;
                        self.frame = Some(FrameState {
                            info,
                            produced: 0,
                            hasher: info.content_checksum.then(|| super::Xxh32::new(0)),
                            history: Vec::new(),
                        });
                    }
                    self.at = consumed(&self.input, rest);
                    continue;
                };
                let block = read_block(&mut rest, &frame.info)?;
                self.at = consumed(&self.input, rest);
                let Some((data, uncompressed)) = block else {
                    if frame.info.content_checksum {
                        let mut rest = tail_at(&self.input, self.at);
                        let sum = take_u32_le(&mut rest).ok_or_else(|| corrupt(NAME, "truncated content checksum"))?;
                        self.at = consumed(&self.input, rest);
                        if frame.hasher.as_ref().map(|h| h.digest()) != Some(sum) {
                            return Err(corrupt(NAME, "content checksum mismatch"));
                        }
                    }
                    if let Some(size) = frame.info.content_size {
                        if size != frame.produced {
                            return Err(corrupt(
                                NAME,
                                format!("frame declares {size} bytes of content but holds {}", frame.produced),
                            ));
                        }
                    }
                    self.frame = None;
                    continue;
                };
                let at = out.len();
                let budget = limit.saturating_sub(at);
                if uncompressed {
                    if data.len() > budget {
                        return Err(super::too_large(NAME, limit));
                    }
                    out.extend_from_slice(data);
                } else {
                    let justified = frame.info.block_max.min(data.len().saturating_mul(MAX_EXPANSION));
                    let room = justified.min(budget);
                    // at + room <= limit.
                    out.resize(at.saturating_add(room), 0);
                    let result = if frame.info.independent {
                        lz4_flex::block::decompress_into(data, tail_at_mut(out, at))
                    } else {
                        lz4_flex::block::decompress_into_with_dict(data, tail_at_mut(out, at), &frame.history)
                    };
                    match result {
                        // n <= room: the decoder wrote into `out[at..]`.
                        Ok(n) => out.truncate(at.saturating_add(n)),
                        Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if room < justified => {
                            out.truncate(at);
                            return Err(super::too_large(NAME, limit));
                        }
                        Err(e) => {
                            out.truncate(at);
                            return Err(corrupt(NAME, e.to_string()));
                        }
                    }
                }
                let produced = tail_at(out, at);
                // A byte count: 2^64 bytes are never inflated.
                frame.produced = frame.produced.saturating_add(produced.len() as u64);
                if let Some(h) = frame.hasher.as_mut() {
                    h.update(produced);
                }
                if !frame.info.independent {
                    let h = &mut frame.history;
                    h.extend_from_slice(produced);
                    if let Some(excess) = h.len().checked_sub(WINDOW).filter(|&e| e > 0) {
                        h.drain(..excess);
                    }
                }
            }
            Ok(self.frame.is_some() || self.at < self.input.len())
        }
    }
}

mod zstd {
    use super::{consumed, corrupt, take, take_u32_le, CompressionError, Sink};
    use std::cell::RefCell;
    use std::io::Read;
    use structured_zstd::decoding::{ContentChecksum, FrameDecoder, StreamingDecoder};
    use structured_zstd::encoding::FrameCompressor;

    const NAME: &str = "zstd";
    const MAGIC: u32 = 0xFD2F_B528;
    const SKIPPABLE_MAGIC: u32 = 0x184D_2A50; // ..=0x184D2A5F
    /// Largest zstd block; the decoder may run this far past the budget
    /// before the overrun is seen.
    const BLOCK_MAX: u64 = 128 * 1024;
    /// The encoder's level (C zstd's numbering).
    const LEVEL: structured_zstd::encoding::CompressionLevel = structured_zstd::encoding::CompressionLevel::Fastest;
    /// The encoder; its source and drain types are unused
    /// (`compress_independent_frame_into` takes both as arguments).
    type Encoder = FrameCompressor<&'static [u8], Vec<u8>>;
    /// The encoder's window: 64 KiB (see [`encoder`]).
    const WINDOW_LOG: u32 = 16;

    /// A compressor as the producer uses it: level 1, a 64 KiB window (as
    /// franz-go's), a content checksum (as libzstd's `--check`: a consumer
    /// can verify the frame end to end).
    ///
    /// No content size in the header: the frame then carries a window
    /// descriptor instead of being single-segment, so a decoder needs 64 KiB
    /// of history whatever the batch's size, and the streaming decoder's
    /// output bound (`max_batch_inflate`) can stay small.
    fn encoder(level: structured_zstd::encoding::CompressionLevel) -> Encoder {
        let mut enc = FrameCompressor::new(level);
        let params = structured_zstd::encoding::CompressionParameters::builder(level)
            .window_log(WINDOW_LOG)
            .build()
            .expect("levels 0..=12 with a 64 KiB window are valid parameter sets");
        enc.set_parameters(&params);
        enc.set_content_size_flag(false);
        enc.set_content_checksum(true);
        enc
    }

    /// `level`: -1 (the default, level 1) or 0..=12 (C zstd's numbering,
    /// 0 meaning its default, 3), checked by the caller.
    pub(super) fn compress(input: &[u8], level: i32, out: &mut Vec<u8>) -> Result<(), CompressionError> {
        let level = match level {
            -1 => LEVEL,
            n => structured_zstd::encoding::CompressionLevel::Level(n),
        };
        // Level 1 by default: on the realistic payload (wire/benches/codecs.rs) it
        // compresses as well as level 3 (about 3.4x) at a fraction of the
        // cost; see the README's "Codecs" paragraph. Writes to a Vec
        // cannot fail, and reading from a slice cannot fail either.
        // One compressor per thread, reused batch after batch: its match
        // tables are allocated once, not per batch (as a reused ZSTD_CCtx).
        // (Kept with its level: a producer asking for another level gets
        // a compressor of its own level.)
        thread_local! {
            static ENCODER: RefCell<Option<(structured_zstd::encoding::CompressionLevel, Encoder)>> =
                const { RefCell::new(None) };
        }
        // It writes a whole frame into a buffer it clears first, so an
        // `out` that already holds bytes gets the frame appended.
        let mut run = |enc: &mut Encoder| {
            if out.is_empty() {
                enc.compress_independent_frame_into(input, out);
            } else {
                let mut frame = Vec::new();
                enc.compress_independent_frame_into(input, &mut frame);
                out.extend_from_slice(&frame);
            }
        };
        ENCODER.with(|cell| match cell.try_borrow_mut() {
            Ok(mut slot) => {
                if slot.as_ref().is_none_or(|(l, _)| *l != level) {
                    *slot = Some((level, encoder(level)));
                }
                if let Some((_, enc)) = slot.as_mut() {
                    run(enc);
                }
            }
            // Re-entered on this thread (nothing here calls back into
            // compress, so it cannot happen): a one-off compressor.
            Err(_) => run(&mut encoder(level)),
        });
        Ok(())
    }

    /// Window size encoded by a frame header's Window_Descriptor byte.
    pub(super) fn window_size(descriptor: u8) -> u64 {
        let base = (1u64 << 10) << (descriptor >> 3);
        // At most 2^41 + 7 * 2^38: far from overflowing.
        base.saturating_add((base / 8).saturating_mul(u64::from(descriptor & 7)))
    }

    /// The smallest Window_Descriptor whose window is at least `min`
    /// (saturating at the largest).
    pub(super) fn descriptor_for(min: u64) -> u8 {
        (0..=u8::MAX).find(|&d| window_size(d) >= min).unwrap_or(u8::MAX)
    }

    /// What [`inspect_header`] learned.
    struct Header {
        /// Bytes of the header (magic included).
        len: usize,
        /// Whether a 4-byte content checksum ends the frame.
        checksum: bool,
        /// Declared Frame_Content_Size, if any.
        content_size: Option<u64>,
        /// Replacement Window_Descriptor, if the declared window is larger
        /// than the budget can justify.
        clamp_window: Option<u8>,
    }

    /// Checks a frame header before the decoder sees it. Fails with
    /// `OutputTooLarge` if the declared content size exceeds the budget.
    fn inspect_header(
        frame: &[u8],
        budget: u64,
        streaming: bool,
        too_large: impl Fn() -> CompressionError,
    ) -> Result<Header, CompressionError> {
        let truncated = || corrupt(NAME, "truncated frame header");
        let &fhd = frame.get(4).ok_or_else(truncated)?;
        let single_segment = fhd & 0x20 != 0;
        let dict_id_len = match fhd & 3 {
            0 => 0,
            1 => 1,
            2 => 2,
            _ => 4,
        };
        let fcs_len = match fhd >> 6 {
            0 => usize::from(single_segment),
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let wd_len = usize::from(!single_segment);
        // After the magic, the descriptor, the window byte and the dictionary id.
        let fcs = frame
            .get(5..)
            .and_then(|f| f.get(wd_len..))
            .and_then(|f| f.get(dict_id_len..))
            .and_then(|f| f.get(..fcs_len))
            .ok_or_else(truncated)?;
        // At most 5 + 1 + 4 + 8 bytes.
        let len = wd_len
            .saturating_add(dict_id_len)
            .saturating_add(fcs_len)
            .saturating_add(5);
        let checksum = fhd & 0x04 != 0;
        let content_size = (fcs_len > 0).then(|| {
            let mut le = [0u8; 8];
            le.iter_mut().zip(fcs).for_each(|(d, s)| *d = *s);
            let size = u64::from_le_bytes(le);
            if fcs_len == 2 {
                // A 2-byte size is offset by 256: at most 65,791.
                size.saturating_add(256)
            } else {
                size
            }
        });
        // Streamed, a frame's content may exceed the budget, but a
        // single-segment frame's window is its whole content.
        if content_size.is_some_and(|size| size > budget) && (!streaming || single_segment) {
            return Err(too_large());
        }
        if single_segment {
            // The window is the content size, already bounded above.
            return Ok(Header {
                len,
                checksum,
                content_size,
                clamp_window: None,
            });
        }
        let wd = *frame.get(5).ok_or_else(truncated)?;
        // Output beyond the budget is an error anyway, so a frame we would
        // accept never needs more history than budget + one block.
        let needed = budget.saturating_add(BLOCK_MAX);
        Ok(Header {
            len,
            checksum,
            content_size,
            clamp_window: (window_size(wd) > needed).then(|| descriptor_for(needed)),
        })
    }

    /// The length of the frame at the start of `frame` whose header is
    /// `header` (RFC 8878 3.1.1): the header, every block up to the last
    /// one, the content checksum. Reads only the 3-byte block headers, so a
    /// frame cut short is refused before a byte of it is decoded, and the
    /// decoder is handed exactly one frame.
    fn frame_len(frame: &[u8], header: &Header) -> Result<usize, CompressionError> {
        let truncated = || corrupt(NAME, "truncated frame");
        let mut at = header.len;
        loop {
            let block = frame
                .get(at..)
                .and_then(|b| b.first_chunk::<3>())
                .ok_or_else(truncated)?;
            let bits = u32::from(block[0]) | u32::from(block[1]) << 8 | u32::from(block[2]) << 16;
            let size = (bits >> 3) as usize;
            let content = match (bits >> 1) & 3 {
                // Raw, Compressed: `size` bytes follow; RLE: one byte.
                0 | 2 => size,
                1 => 1,
                _ => return Err(corrupt(NAME, "reserved block type")),
            };
            // At most 3 + 2^21 past an index inside `frame`.
            at = at.saturating_add(3).saturating_add(content);
            if at > frame.len() {
                return Err(truncated());
            }
            if bits & 1 != 0 {
                break;
            }
        }
        if header.checksum {
            at = at.saturating_add(4);
            if at > frame.len() {
                return Err(corrupt(NAME, "truncated content checksum"));
            }
        }
        Ok(at)
    }

    /// A frame decoder that verifies content checksums and refuses a window
    /// beyond what `budget` justifies (the clamp keeps every frame we
    /// accept within it; this is the decoder's own guard behind it).
    ///
    /// It is this thread's spare one when there is one: a decoder that
    /// finished its last frame, kept by [`Stream`]'s drop. A new one costs
    /// tens of thousands of instructions (its scratch tables, zeroed), which
    /// a batch of one small record would otherwise pay every time. What a
    /// thread keeps is one decoder, whose buffers are bounded by the largest
    /// window it was allowed (the clamp of the largest `budget` seen on the
    /// thread).
    fn frame_decoder(budget: u64) -> FrameDecoder {
        let mut decoder = SPARE.with(std::cell::Cell::take).unwrap_or_else(|| {
            let mut d = FrameDecoder::new();
            d.set_content_checksum(ContentChecksum::Verify);
            d
        });
        let ceiling = window_size(descriptor_for(budget.saturating_add(BLOCK_MAX)))
            .clamp(1024, structured_zstd::decoding::MAX_DECODER_WINDOW_SIZE);
        // In range by the clamp just above.
        let _ = decoder.set_max_window_size(ceiling);
        decoder
    }

    thread_local! {
        /// This thread's spare frame decoder (see [`frame_decoder`]).
        static SPARE: std::cell::Cell<Option<FrameDecoder>> = const { std::cell::Cell::new(None) };
    }

    /// The start of one frame as the decoder reads it: the header with its
    /// Window_Descriptor (byte 5, present whenever a clamp is returned)
    /// replaced when `clamp` says so, and how many of the frame's own bytes
    /// it stands for (0: the frame is read as it is).
    fn clamped_head(frame: &[u8], clamp: Option<u8>) -> Result<(Vec<u8>, usize), CompressionError> {
        let Some(wd) = clamp else {
            return Ok((Vec::new(), 0));
        };
        let head = frame
            .get(..5)
            .filter(|_| frame.len() >= 6)
            .ok_or_else(|| corrupt(NAME, "truncated frame header"))?;
        Ok(([head, &[wd][..]].concat(), 6))
    }

    /// Splits a skippable frame (RFC 8878 3.1.2) off the front of `rest`
    /// if one starts there; refuses anything that is not a zstd frame.
    /// `Ok(true)`: a skippable frame was skipped.
    fn skip_skippable(rest: &mut &[u8]) -> Result<bool, CompressionError> {
        let mut peek = *rest;
        let magic = take_u32_le(&mut peek).ok_or_else(|| corrupt(NAME, "truncated magic"))?;
        if magic & 0xFFFF_FFF0 == SKIPPABLE_MAGIC {
            let len = take_u32_le(&mut peek).ok_or_else(|| corrupt(NAME, "truncated skippable frame"))?;
            take(&mut peek, len as usize).ok_or_else(|| corrupt(NAME, "truncated skippable frame"))?;
            *rest = peek;
            return Ok(true);
        }
        if magic != MAGIC {
            return Err(corrupt(NAME, format!("bad frame magic {magic:#010x}")));
        }
        Ok(false)
    }

    /// `Err` unless a frame that declared `content_size` produced exactly that.
    fn check_content_size(content_size: Option<u64>, produced: u64) -> Result<(), CompressionError> {
        match content_size {
            Some(size) if size != produced => Err(corrupt(
                NAME,
                format!("frame declares {size} bytes of content but holds {produced}"),
            )),
            _ => Ok(()),
        }
    }

    pub(super) fn decompress(input: &[u8], sink: &mut Sink<'_>) -> Result<(), CompressionError> {
        let mut rest = input;
        let mut decoder = None;
        while !rest.is_empty() {
            if skip_skippable(&mut rest)? {
                continue;
            }
            let budget = sink.budget() as u64;
            let header = inspect_header(rest, budget, false, || sink.too_large())?;
            let len = frame_len(rest, &header)?;
            let (frame, tail) = rest.split_at(len);
            let frame_start = sink.produced();
            let (head, skip) = clamped_head(frame, header.clamp_window)?;
            let source = (&head[..]).chain(frame.get(skip..).unwrap_or_default());
            let mut stream =
                StreamingDecoder::new_with_decoder(source, decoder.take().unwrap_or_else(|| frame_decoder(budget)));
            sink.read_from(&mut stream)?;
            decoder = Some(stream.into_frame_decoder());
            check_content_size(header.content_size, sink.produced().saturating_sub(frame_start) as u64)?;
            rest = tail;
        }
        Ok(())
    }

    /// The input of one streamed frame: a rewritten header (when the window
    /// is clamped), then the rest of the frame's compressed bytes.
    struct Source {
        head: Vec<u8>,
        rest: bytes::Bytes,
    }

    impl Read for Source {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            use bytes::Buf;
            let from_head = !self.head.is_empty();
            let src: &[u8] = if from_head { &self.head } else { &self.rest };
            let n = src.len().min(buf.len());
            if let (Some(dst), Some(src)) = (buf.get_mut(..n), src.get(..n)) {
                dst.copy_from_slice(src);
            }
            if from_head {
                self.head.drain(..n);
            } else {
                self.rest.advance(n);
            }
            Ok(n)
        }
    }

    struct Frame {
        decoder: StreamingDecoder<Source, FrameDecoder>,
        content_size: Option<u64>,
        produced: u64,
    }

    /// A zstd stream: frame after frame, each handed whole (its extent read
    /// from its block headers) to structured-zstd's streaming decoder, with
    /// its window clamped to `max_unit` + one block.
    pub(super) struct Stream {
        /// Input not yet handed to a frame decoder.
        rest: bytes::Bytes,
        frame: Option<Frame>,
        /// The decoder of the last finished frame, reused for the next one
        /// (its buffers are allocated once per batch, not per frame).
        spare: Option<FrameDecoder>,
    }

    impl Drop for Stream {
        /// A decoder that finished its frame goes back to the thread (one
        /// in the middle of a frame, or refused, is dropped).
        fn drop(&mut self) {
            if let Some(decoder) = self.spare.take() {
                // During the thread's own teardown there is no spare to keep.
                let _ = SPARE.try_with(|cell| cell.set(Some(decoder)));
            }
        }
    }

    impl Stream {
        pub(super) fn new(input: bytes::Bytes) -> Self {
            Stream {
                rest: input,
                frame: None,
                spare: None,
            }
        }

        pub(super) fn fill(
            &mut self,
            out: &mut Vec<u8>,
            target: usize,
            limit: usize,
            max_unit: usize,
        ) -> Result<bool, CompressionError> {
            while out.len() < target {
                if let Some(f) = self.frame.as_mut() {
                    let before = out.len();
                    let more = super::read_some(NAME, &mut f.decoder, out, target, limit)?;
                    // A byte count: 2^64 bytes are never inflated.
                    f.produced = f.produced.saturating_add(out.len().saturating_sub(before) as u64);
                    if more {
                        return Ok(true);
                    }
                    // The decoder read its one frame to the end and checked
                    // its content size and checksum.
                    let Some(f) = self.frame.take() else {
                        return Err(corrupt(NAME, "no frame"));
                    };
                    check_content_size(f.content_size, f.produced)?;
                    self.spare = Some(f.decoder.into_frame_decoder());
                    continue;
                }
                if self.rest.is_empty() {
                    return Ok(false);
                }
                let mut rest = &self.rest[..];
                if skip_skippable(&mut rest)? {
                    let used = consumed(&self.rest, rest);
                    let _ = self.rest.split_to(used);
                    continue;
                }
                let budget = max_unit as u64;
                let header = inspect_header(&self.rest, budget, true, || super::too_large(NAME, max_unit))?;
                let len = frame_len(&self.rest, &header)?;
                let frame = self.rest.split_to(len);
                let (head, skip) = clamped_head(&frame, header.clamp_window)?;
                let source = Source {
                    head,
                    rest: frame.slice(skip..),
                };
                let decoder = self.spare.take().unwrap_or_else(|| frame_decoder(budget));
                self.frame = Some(Frame {
                    decoder: StreamingDecoder::new_with_decoder(source, decoder),
                    content_size: header.content_size,
                    produced: 0,
                });
            }
            Ok(true)
        }
    }
}

/// xxHash32 (one shot), as used by the LZ4 frame format.
fn xxh32(data: &[u8], seed: u32) -> u32 {
    const P1: u32 = 2_654_435_761;
    const P2: u32 = 2_246_822_519;
    const P5: u32 = 374_761_393;
    fn round(acc: u32, lane: u32) -> u32 {
        acc.wrapping_add(lane.wrapping_mul(P2)).rotate_left(13).wrapping_mul(P1)
    }

    let (stripes, rest) = data.as_chunks::<16>();
    let h = if data.len() >= 16 {
        let mut v = [
            seed.wrapping_add(P1).wrapping_add(P2),
            seed.wrapping_add(P2),
            seed,
            seed.wrapping_sub(P1),
        ];
        for stripe in stripes {
            let (lanes, _) = stripe.as_chunks::<4>();
            for (acc, lane) in v.iter_mut().zip(lanes) {
                *acc = round(*acc, u32::from_le_bytes(*lane));
            }
        }
        v[0].rotate_left(1)
            .wrapping_add(v[1].rotate_left(7))
            .wrapping_add(v[2].rotate_left(12))
            .wrapping_add(v[3].rotate_left(18))
    } else {
        seed.wrapping_add(P5)
    };
    xxh32_finish(h, data.len() as u32, rest)
}

/// xxHash32's last steps: the length (mod 2^32), the last 0-15 bytes, the
/// avalanche.
fn xxh32_finish(acc: u32, len: u32, rest: &[u8]) -> u32 {
    const P1: u32 = 2_654_435_761;
    const P2: u32 = 2_246_822_519;
    const P3: u32 = 3_266_489_917;
    const P4: u32 = 668_265_263;
    const P5: u32 = 374_761_393;
    // The format mixes in the length modulo 2^32.
    let mut h = acc.wrapping_add(len);
    let (lanes, bytes) = rest.as_chunks::<4>();
    for lane in lanes {
        h = h
            .wrapping_add(u32::from_le_bytes(*lane).wrapping_mul(P3))
            .rotate_left(17)
            .wrapping_mul(P4);
    }
    for &b in bytes {
        h = h
            .wrapping_add(u32::from(b).wrapping_mul(P5))
            .rotate_left(11)
            .wrapping_mul(P1);
    }
    h ^= h >> 15;
    h = h.wrapping_mul(P2);
    h ^= h >> 13;
    h = h.wrapping_mul(P3);
    h ^= h >> 16;
    h
}

/// Entry points for fuzz targets (built with `--cfg fuzzing`; also under
/// `test`, where the corpus replay uses them).
#[cfg(any(fuzzing, test))]
pub mod fuzzing {
    use super::Compression;

    /// Decodes hostile `data` with a 1 MiB cap; must never panic or hang.
    /// Then streams it through an [`Inflater`](super::Inflater) in small,
    /// uneven steps: where the whole decode succeeded, the stream yields
    /// the same bytes (the consumer's path and the whole one agree).
    pub fn decompress(codec: Compression, data: &[u8]) {
        const CAP: usize = 1 << 20;
        let whole = super::decompress(codec, data, CAP);
        if codec == Compression::None || data.is_empty() {
            return;
        }
        let Ok(mut inflater) = super::Inflater::new(codec, bytes::Bytes::copy_from_slice(data), CAP) else {
            assert!(whole.is_err(), "{codec}: the stream refused what the whole decode took");
            return;
        };
        let mut streamed = Vec::new();
        let mut step = 1 + data.len() % 7_000;
        let ended = loop {
            let target = streamed.len().saturating_add(step);
            match inflater.fill(&mut streamed, target, CAP + (1 << 18)) {
                Ok(true) if streamed.len() <= CAP => step = step % 50_000 + 4_099,
                Ok(true) => break false,
                Ok(false) => break true,
                Err(_) => break false,
            }
        };
        if let Ok(whole) = whole {
            assert!(ended, "{codec}: the stream failed where the whole decode succeeded");
            assert!(streamed == whole, "{codec}: the stream and the whole decode differ");
        }
    }

    /// Compresses `data` and checks that it decompresses to itself under
    /// a cap of exactly its length.
    pub fn round_trip(codec: Compression, data: &[u8]) {
        let mut compressed = Vec::new();
        super::compress(codec, data, &mut compressed).expect("compress failed");
        let back = super::decompress(codec, &compressed, data.len()).expect("decompress failed");
        assert!(back == data, "{codec} round trip changed the data");
    }

    /// Both of the above for every codec.
    pub fn all(data: &[u8]) {
        for codec in Compression::ALL {
            decompress(codec, data);
            round_trip(codec, data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;

    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// Deterministic xorshift64* bytes.
    fn noise(n: usize, mut seed: u64) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        while v.len() < n {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            v.extend_from_slice(&seed.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// Text, runs and noise interleaved: compressible, but not trivially.
    fn mixed(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut i = 0u64;
        while v.len() < n {
            match i % 3 {
                0 => {
                    for j in 0..40 {
                        v.extend_from_slice(format!("key-{i}-{j}: value {}\n", i * 31 + j).as_bytes());
                    }
                }
                1 => v.resize(v.len() + 700, i as u8),
                _ => v.extend(noise(900, i + 1)),
            }
            i += 1;
        }
        v.truncate(n);
        v
    }

    /// Must match `patterned()` in testdata/compression/make_fixtures.py.
    fn patterned() -> Vec<u8> {
        let mut v = Vec::new();
        let mut i: u64 = 0;
        while v.len() < 100 * KIB {
            v.extend_from_slice(format!("record-{i:06} value={}\n", (i * 2_654_435_761) % 1_000_003).as_bytes());
            i += 1;
        }
        v.truncate(100 * KIB);
        v
    }

    const HELLO: &[u8] = b"Hello, Kafka!\n";

    fn compressed(codec: Compression, input: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        compress(codec, input, &mut out).unwrap();
        out
    }

    fn is_corrupt(r: &Result<Vec<u8>, CompressionError>) -> bool {
        matches!(r, Err(CompressionError::Corrupt { .. }))
    }

    fn is_too_large(r: &Result<Vec<u8>, CompressionError>) -> bool {
        matches!(r, Err(CompressionError::OutputTooLarge { .. }))
    }

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/testdata/compression/",
                $name
            ))
        };
    }

    // ---- streaming (Inflater) ----

    /// Everything an [`Inflater`] yields, `target` bytes at a time.
    fn streamed(codec: Compression, input: &[u8], target: usize, max_unit: usize) -> Result<Vec<u8>, CompressionError> {
        let mut inflater = Inflater::new(codec, bytes::Bytes::copy_from_slice(input), max_unit)?;
        let mut all = Vec::new();
        loop {
            let mut out = Vec::new();
            let more = inflater.fill(&mut out, target, target + max_unit)?;
            assert!(out.len() <= target + max_unit);
            all.extend_from_slice(&out);
            if !more {
                return Ok(all);
            }
            assert!(out.len() >= target, "a fill that did not end stopped short");
        }
    }

    #[test]
    fn streamed_output_equals_whole_output_at_every_target() {
        let inputs: Vec<(Compression, Vec<u8>)> = vec![
            (Compression::Gzip, fixture!("patterned.gz").to_vec()),
            (Compression::Gzip, fixture!("multi-member.gz").to_vec()),
            (Compression::Snappy, fixture!("patterned.snappy.raw").to_vec()),
            (Compression::Snappy, fixture!("patterned.snappy.xerial").to_vec()),
            (Compression::Lz4, fixture!("patterned.lz4").to_vec()),
            (Compression::Lz4, fixture!("patterned-linked.lz4").to_vec()),
            (Compression::Lz4, fixture!("hello.lz4").to_vec()),
            (Compression::Zstd, fixture!("patterned.zst").to_vec()),
            (Compression::Zstd, fixture!("patterned-stream-l19.zst").to_vec()),
            (Compression::Zstd, compressed(Compression::Zstd, &mixed(300 * KIB))),
            (Compression::Lz4, compressed(Compression::Lz4, &mixed(300 * KIB))),
            (Compression::Snappy, compressed(Compression::Snappy, &mixed(300 * KIB))),
        ];
        for (codec, input) in &inputs {
            let whole = decompress(*codec, input, 64 << 20).unwrap();
            for target in [1, 100, 4 * KIB, 64 * KIB, 1 << 20] {
                let got = streamed(*codec, input, target, 1 << 20).unwrap();
                assert!(got == whole, "{codec} at target {target}");
            }
        }
    }

    #[test]
    fn streaming_bounds_one_step_and_names_the_bound() {
        // A raw snappy block cannot be split: its claimed length is held
        // against the bound before anything is decoded.
        let raw = snap::raw::Encoder::new().compress_vec(&vec![7u8; 100 * KIB]).unwrap();
        let e = streamed(Compression::Snappy, &raw, 1, 64 * KIB).unwrap_err();
        assert!(
            matches!(e, CompressionError::OutputTooLarge { limit, .. } if limit == 64 * KIB),
            "{e}"
        );
        assert!(e.to_string().contains(&(64 * KIB).to_string()), "{e}");
        // Streamed, the other codecs inflate far past the bound in steps.
        for codec in [
            Compression::Gzip,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Snappy,
        ] {
            let data = mixed(2 << 20);
            let got = streamed(codec, &compressed(codec, &data), 16 * KIB, 64 * KIB).unwrap();
            assert!(got == data, "{codec}");
        }
    }

    #[test]
    fn streamed_hostile_input_is_an_error_not_a_panic() {
        for codec in [
            Compression::Gzip,
            Compression::Lz4,
            Compression::Zstd,
            Compression::Snappy,
        ] {
            let good = compressed(codec, &mixed(100 * KIB));
            for cut in [1, 5, 17, good.len() / 2, good.len() - 1] {
                let r = streamed(codec, &good[..cut], 4 * KIB, 1 << 20);
                let whole = decompress(codec, &good[..cut], 1 << 20);
                assert_eq!(r.is_err(), whole.is_err(), "{codec} cut at {cut}");
            }
            let mut flipped = good.clone();
            let mid = flipped.len() / 2;
            flipped[mid] ^= 0x55;
            let _ = streamed(codec, &flipped, 4 * KIB, 1 << 20);
        }
        assert!(Inflater::new(Compression::Zstd, bytes::Bytes::new(), 10).is_err());
    }

    #[test]
    fn streaming_xxh32_equals_one_shot() {
        let data = mixed(10 * KIB);
        for split in [0, 1, 3, 15, 16, 17, 100, 5000] {
            for len in [0, 1, 15, 16, 33, 10 * KIB] {
                let d = &data[..len];
                let mut h = Xxh32::new(0);
                let (a, b) = d.split_at(split.min(len));
                h.update(a);
                h.update(b);
                assert_eq!(h.digest(), xxh32(d, 0), "len {len} split {split}");
            }
        }
    }

    // ---- codec ids and names ----

    #[test]
    fn attributes_select_codec_from_low_three_bits() {
        for (id, codec) in Compression::ALL.into_iter().enumerate() {
            assert_eq!(codec.id(), id as i16);
            assert_eq!(Compression::from_attributes(id as i16).unwrap(), codec);
            // Timestamp type, transactional and control bits are ignored.
            assert_eq!(Compression::from_attributes(id as i16 | 0x0038).unwrap(), codec);
            assert_eq!(Compression::from_attributes(id as i16 | -0x100).unwrap(), codec);
        }
        for id in 5..=7 {
            assert!(matches!(
                Compression::from_attributes(id | 0x10),
                Err(CompressionError::UnknownCodec(x)) if x == id
            ));
        }
        assert_eq!(Compression::default(), Compression::None);
    }

    #[test]
    fn names_parse_case_insensitively() {
        let names = ["none", "gzip", "snappy", "lz4", "zstd"];
        for (codec, name) in Compression::ALL.into_iter().zip(names) {
            assert_eq!(codec.name(), name);
            assert_eq!(codec.to_string(), name);
            assert_eq!(name.parse::<Compression>().unwrap(), codec);
            assert_eq!(name.to_uppercase().parse::<Compression>().unwrap(), codec);
        }
        assert_eq!(" ZStd ".parse::<Compression>().unwrap(), Compression::Zstd);
        let err = "brotli".parse::<Compression>().unwrap_err();
        assert!(matches!(err, CompressionError::UnknownName(_)));
        let msg = err.to_string();
        assert!(msg.contains("brotli"), "{msg}");
        assert!(msg.contains("none, gzip, snappy, lz4, zstd"), "{msg}");
        assert!("".parse::<Compression>().is_err());
    }

    // ---- round trips ----

    #[test]
    fn round_trip_every_codec() {
        let inputs: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("one byte", vec![0x42]),
            ("mixed 100 KiB", mixed(100 * KIB)),
            ("noise 100 KiB", noise(100 * KIB, 7)),
            ("patterned", patterned()),
        ];
        for codec in Compression::ALL {
            for (what, input) in &inputs {
                let c = compressed(codec, input);
                // A cap of exactly the input length must be enough.
                let back = decompress(codec, &c, input.len()).unwrap_or_else(|e| panic!("{codec} {what}: {e}"));
                assert!(back == *input, "{codec} {what}: round trip differs");
                if !input.is_empty() {
                    // ... and one byte less must not.
                    assert!(
                        is_too_large(&decompress(codec, &c, input.len() - 1)),
                        "{codec} {what}: cap not enforced"
                    );
                }
            }
        }
    }

    #[test]
    fn compressible_data_shrinks() {
        let input = mixed(100 * KIB);
        for codec in CODECS {
            let c = compressed(codec, &input);
            assert!(c.len() < input.len() * 3 / 4, "{codec}: {} bytes", c.len());
        }
    }

    #[test]
    fn every_accepted_level_round_trips_and_the_level_acts() {
        let input = mixed(100 * KIB);
        let size = |codec, level| {
            let mut out = Vec::new();
            compress_at(codec, level, &input, &mut out).unwrap_or_else(|e| panic!("{codec} {level}: {e}"));
            assert_eq!(
                decompress(codec, &out, input.len()).unwrap(),
                input,
                "{codec} at {level}"
            );
            out.len()
        };
        for codec in Compression::ALL {
            for level in -1..=12 {
                if codec.check_level(level).is_ok() {
                    size(codec, level);
                }
            }
        }
        // The level changes what is written: gzip 0 stores, 9 beats 1;
        // zstd 12 beats 1; -1 is each codec's default (gzip 6, zstd 1).
        let gzip = |l| size(Compression::Gzip, l);
        assert!(gzip(0) > input.len(), "gzip 0 stores: {}", gzip(0));
        assert!(gzip(9) < gzip(1), "gzip 9 {} vs 1 {}", gzip(9), gzip(1));
        assert_eq!(gzip(-1), gzip(6));
        let zstd = |l| size(Compression::Zstd, l);
        assert!(zstd(12) < zstd(1), "zstd 12 {} vs 1 {}", zstd(12), zstd(1));
        assert_eq!(zstd(-1), zstd(1));
    }

    #[test]
    fn a_level_the_codec_lacks_is_refused_by_name() {
        for (codec, level) in [
            (Compression::Gzip, 10),
            (Compression::Gzip, -2),
            (Compression::Snappy, 1),
            (Compression::Lz4, 3),
            (Compression::Lz4, 12),
            (Compression::Zstd, 13),
            (Compression::Zstd, -5),
            (Compression::None, 1),
        ] {
            let e = codec.check_level(level).unwrap_err().to_string();
            assert!(
                e.contains(&format!("compression.level {level}")) && e.contains(codec.name()),
                "{e}"
            );
            assert!(e.contains(codec.accepted_levels()), "{e}");
            if codec != Compression::None {
                let mut out = b"kept".to_vec();
                assert!(compress_at(codec, level, HELLO, &mut out).is_err(), "{codec} {level}");
                assert_eq!(out, b"kept", "{codec} {level}: out left as it was");
            }
        }
        // No codec: a level changes nothing, and compress_at copies.
        let mut out = Vec::new();
        compress_at(Compression::None, 5, HELLO, &mut out).unwrap();
        assert_eq!(out, HELLO);
    }

    #[test]
    fn compress_appends_and_decompress_into_appends() {
        for codec in Compression::ALL {
            let mut out = b"prefix".to_vec();
            compress(codec, HELLO, &mut out).unwrap();
            assert_eq!(&out[..6], b"prefix");
            assert_eq!(decompress(codec, &out[6..], 100).unwrap(), HELLO);

            let mut buf = b"keep".to_vec();
            decompress_into(codec, &out[6..], HELLO.len(), &mut buf).unwrap();
            assert_eq!(&buf[..4], b"keep");
            assert_eq!(&buf[4..], HELLO);
            // An error leaves the buffer as it was.
            assert!(decompress_into(codec, &out[6..], 3, &mut buf).is_err());
            assert_eq!(&buf[4..], HELLO);
            assert_eq!(buf.len(), 4 + HELLO.len());
        }
    }

    // ---- snappy framing ----

    #[test]
    fn snappy_writes_xerial_header_and_32k_blocks() {
        let input = mixed(100 * KIB);
        let c = compressed(Compression::Snappy, &input);
        assert_eq!(
            &c[..16],
            &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1]
        );
        // Walk the blocks: 32+32+32+4 KiB of input.
        let mut rest = &c[16..];
        let mut sizes = Vec::new();
        while !rest.is_empty() {
            let len = i32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            let block = &rest[4..4 + len];
            sizes.push(snap::raw::decompress_len(block).unwrap());
            rest = &rest[4 + len..];
        }
        assert_eq!(sizes, [32 * KIB, 32 * KIB, 32 * KIB, 4 * KIB]);
        // Empty input: header only, which decodes to nothing.
        let empty = compressed(Compression::Snappy, b"");
        assert_eq!(empty.len(), 16);
        assert_eq!(decompress(Compression::Snappy, &empty, 0).unwrap(), b"");
    }

    #[test]
    fn snappy_accepts_raw_blocks() {
        for input in [HELLO.to_vec(), patterned(), noise(5000, 3)] {
            let raw = snap::raw::Encoder::new().compress_vec(&input).unwrap();
            assert_eq!(decompress(Compression::Snappy, &raw, input.len()).unwrap(), input);
        }
    }

    #[test]
    fn snappy_hand_built_block_from_the_format_spec() {
        // varint 16; literal "abcd" (tag (4-1)<<2); copy-2 len 12 offset 4
        // (tag (12-1)<<2 | 0b10, offset LE).
        let raw = [0x10, 0x0C, b'a', b'b', b'c', b'd', 0x2E, 0x04, 0x00];
        let want = b"abcdabcdabcdabcd";
        assert_eq!(decompress(Compression::Snappy, &raw, 16).unwrap(), want);
        let mut xerial = snappy::XERIAL_MAGIC.to_vec();
        xerial.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9]);
        xerial.extend_from_slice(&raw);
        assert_eq!(decompress(Compression::Snappy, &xerial, 16).unwrap(), want);
    }

    #[test]
    fn xerial_concatenated_streams() {
        let mut c = compressed(Compression::Snappy, HELLO);
        c.extend(compressed(Compression::Snappy, b"second stream"));
        assert_eq!(
            decompress(Compression::Snappy, &c, 100).unwrap(),
            b"Hello, Kafka!\nsecond stream"
        );
    }

    #[test]
    fn xerial_bad_block_lengths_are_corrupt_without_allocating() {
        let mut header = snappy::XERIAL_MAGIC.to_vec();
        header.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for len in [i32::MAX, -1, i32::MIN, 5] {
            let mut input = header.clone();
            input.extend_from_slice(&len.to_be_bytes());
            input.extend_from_slice(&[0x01, 0x00]); // 2 bytes of "block"
            let mut out = Vec::new();
            let r = decompress_into(Compression::Snappy, &input, 64 * MIB, &mut out);
            assert!(matches!(r, Err(CompressionError::Corrupt { .. })), "{len}: {r:?}");
            assert_eq!(out.capacity(), 0, "{len}: allocated");
        }
        // A length cut short, and a header cut short.
        let mut input = header.clone();
        input.extend_from_slice(&[0, 0]);
        assert!(is_corrupt(&decompress(Compression::Snappy, &input, MIB)));
        assert!(is_corrupt(&decompress(Compression::Snappy, &header[..12], MIB)));
    }

    #[test]
    fn raw_snappy_huge_claimed_length_errors_without_allocating() {
        // varint 0x7FFF_FFFF then a literal
        let input = [0xFF, 0xFF, 0xFF, 0xFF, 0x07, 0x00, b'x'];
        for limit in [usize::MAX, 64 * MIB] {
            let mut out = Vec::new();
            let r = decompress_into(Compression::Snappy, &input, limit, &mut out);
            assert!(r.is_err());
            assert_eq!(out.capacity(), 0);
        }
        // A plausible claim beyond the cap is reported as too large.
        let raw = snap::raw::Encoder::new().compress_vec(&vec![0u8; 100_000]).unwrap();
        let mut out = Vec::new();
        let r = decompress_into(Compression::Snappy, &raw, 1000, &mut out);
        assert!(matches!(r, Err(CompressionError::OutputTooLarge { limit: 1000, .. })));
        assert_eq!(out.capacity(), 0);
    }

    // ---- lz4 framing ----

    #[test]
    fn lz4_writes_kafka_frame_header_and_end_mark() {
        let c = compressed(Compression::Lz4, HELLO);
        // magic, FLG 0x60 (v01, independent), BD 0x40 (64 KiB), HC 0x82
        assert_eq!(&c[..7], &[0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82]);
        assert_eq!(&c[c.len() - 4..], &[0, 0, 0, 0]);
        let empty = compressed(Compression::Lz4, b"");
        assert_eq!(empty, [0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82, 0, 0, 0, 0]);
    }

    #[test]
    fn lz4_output_decodes_with_lz4_flex_frame_decoder() {
        for input in [mixed(100 * KIB), noise(70 * KIB, 9), Vec::new()] {
            let c = compressed(Compression::Lz4, &input);
            let mut back = Vec::new();
            lz4_flex::frame::FrameDecoder::new(&c[..])
                .read_to_end(&mut back)
                .unwrap();
            assert!(back == input);
        }
    }

    #[test]
    fn lz4_stores_incompressible_blocks_uncompressed() {
        let input = noise(64 * KIB, 5);
        let c = compressed(Compression::Lz4, &input);
        let word = u32::from_le_bytes(c[7..11].try_into().unwrap());
        assert_eq!(word, 0x8000_0000 | (64 * KIB) as u32);
        assert_eq!(&c[11..11 + 64 * KIB], &input[..]);
    }

    #[test]
    fn lz4_rejects_bad_header_checksum_including_kafka_08_style() {
        let mut c = compressed(Compression::Lz4, HELLO);
        c[6] ^= 0xFF;
        assert!(is_corrupt(&decompress(Compression::Lz4, &c, 100)));
        // Kafka 0.8/0.9 hashed the magic as well.
        c[6] = (xxh32(&[0x04, 0x22, 0x4D, 0x18, 0x60, 0x40], 0) >> 8) as u8;
        assert_ne!(c[6], 0x82);
        assert!(is_corrupt(&decompress(Compression::Lz4, &c, 100)));
    }

    /// An LZ4 frame header with content size `size` (and its HC byte).
    fn lz4_header_with_size(size: u64) -> Vec<u8> {
        let mut desc = vec![0x68, 0x40];
        desc.extend_from_slice(&size.to_le_bytes());
        let mut h = 0x184D_2204u32.to_le_bytes().to_vec();
        h.extend_from_slice(&desc);
        h.push((xxh32(&desc, 0) >> 8) as u8);
        h
    }

    #[test]
    fn lz4_content_size_is_checked() {
        // Declared size beyond the cap: refused before any block.
        let mut h = lz4_header_with_size(1 << 40);
        h.extend_from_slice(&[0, 0, 0, 0]);
        assert!(is_too_large(&decompress(Compression::Lz4, &h, MIB)));
        // Declared size that does not match the content.
        let mut h = lz4_header_with_size(5);
        h.extend_from_slice(&(0x8000_0003u32).to_le_bytes());
        h.extend_from_slice(b"abc");
        h.extend_from_slice(&[0, 0, 0, 0]);
        assert!(is_corrupt(&decompress(Compression::Lz4, &h, MIB)));
        let mut ok = lz4_header_with_size(3);
        ok.extend_from_slice(&(0x8000_0003u32).to_le_bytes());
        ok.extend_from_slice(b"abc");
        ok.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(decompress(Compression::Lz4, &ok, MIB).unwrap(), b"abc");
    }

    #[test]
    fn lz4_block_larger_than_block_max_is_corrupt() {
        let mut c = compressed(Compression::Lz4, b"");
        c.truncate(7);
        c.extend_from_slice(&(64 * KIB as u32 + 1).to_le_bytes());
        c.extend(vec![0u8; 64 * KIB + 1]);
        c.extend_from_slice(&[0, 0, 0, 0]);
        assert!(is_corrupt(&decompress(Compression::Lz4, &c, 10 * MIB)));
    }

    #[test]
    fn lz4_small_block_in_4mib_frame_allocates_little() {
        // FLG v01 independent, BD 4 MiB; one 2-byte block (literal "a").
        let mut c = 0x184D_2204u32.to_le_bytes().to_vec();
        c.extend_from_slice(&[0x60, 0x70, lz4::header_checksum(&[0x60, 0x70])]);
        c.extend_from_slice(&2u32.to_le_bytes());
        c.extend_from_slice(&[0x10, b'a']);
        c.extend_from_slice(&[0, 0, 0, 0]);
        let mut out = Vec::new();
        decompress_into(Compression::Lz4, &c, 64 * MIB, &mut out).unwrap();
        assert_eq!(out, b"a");
        assert!(out.capacity() <= 64 * KIB, "{}", out.capacity());
    }

    #[test]
    fn lz4_concatenated_and_skippable_frames() {
        let mut c = compressed(Compression::Lz4, HELLO);
        c.extend_from_slice(&0x184D_2A53u32.to_le_bytes());
        c.extend_from_slice(&3u32.to_le_bytes());
        c.extend_from_slice(b"xyz");
        c.extend(compressed(Compression::Lz4, b"again"));
        assert_eq!(decompress(Compression::Lz4, &c, 100).unwrap(), b"Hello, Kafka!\nagain");
        c.push(0);
        assert!(is_corrupt(&decompress(Compression::Lz4, &c, 100)));
    }

    #[test]
    fn xxh32_known_values() {
        // Reference values from the xxHash specification / implementation.
        assert_eq!(xxh32(b"", 0), 0x02CC_5D05);
        assert_eq!(xxh32(b"a", 0), 0x550D_7456);
        assert_eq!(xxh32(b"abc", 0), 0x32D1_53FF);
        assert_eq!(xxh32(b"Nobody inspects the spammish repetition", 0), 0xE229_3B2F);
        // The long-input path is checked by the python-lz4 fixtures'
        // header and content checksums.
    }

    // ---- zstd ----

    #[test]
    fn zstd_window_descriptor_math() {
        assert_eq!(zstd::window_size(0), 1024);
        assert_eq!(zstd::window_size(0x68), 8 * MIB as u64);
        assert_eq!(zstd::window_size(0x69), 9 * MIB as u64);
        assert_eq!(zstd::descriptor_for(1024), 0);
        assert_eq!(zstd::descriptor_for(1025), 1);
        assert_eq!(zstd::descriptor_for(8 * MIB as u64), 0x68);
        assert_eq!(zstd::descriptor_for(8 * MIB as u64 + 1), 0x69);
    }

    #[test]
    fn zstd_huge_declared_window_is_clamped_and_still_decodes() {
        let input = mixed(50 * KIB);
        let mut c = compressed(Compression::Zstd, &input);
        assert_eq!(c[4] & 0x20, 0, "our zstd frames carry a window descriptor");
        // 64 MiB (a decoder would reserve all of it) and 2 TiB (beyond
        // what the decoder accepts at all).
        for wd in [0x80, 0xD8] {
            c[5] = wd;
            assert_eq!(decompress(Compression::Zstd, &c, 50 * KIB).unwrap(), input);
            assert!(is_too_large(&decompress(Compression::Zstd, &c, 10 * KIB)));
        }
    }

    #[test]
    fn zstd_huge_window_bomb_is_streamed_not_buffered() {
        // 4 MiB of zeros in a frame claiming a 128 GiB window. Unclamped, a
        // decoder would hold everything as "window"; clamped, output streams
        // out and the cap fires first.
        let mut c = compressed(Compression::Zstd, &vec![0u8; 4 * MIB]);
        c[5] = 0xD8;
        let r = decompress(Compression::Zstd, &c, MIB);
        assert!(is_too_large(&r), "{:?}", r.err());
        assert_eq!(decompress(Compression::Zstd, &c, 4 * MIB).unwrap().len(), 4 * MIB);
        // Cut short, it is refused from its block headers, before a byte is
        // decoded, whatever the cap.
        c.truncate(c.len() - 8);
        for cap in [MIB, 8 * MIB] {
            let r = decompress(Compression::Zstd, &c, cap);
            assert!(is_corrupt(&r), "{:?}", r.err());
        }
    }

    #[test]
    fn zstd_a_decoder_reused_on_one_thread_keeps_each_decodes_limits_and_checks() {
        // Every decode below runs on this thread, and all but the first get
        // the decoder the one before it finished with (`frame_decoder`).
        let big = compressed(Compression::Zstd, &vec![7u8; 4 * MIB]);
        assert_eq!(decompress(Compression::Zstd, &big, 8 * MIB).unwrap().len(), 4 * MIB);
        // A decoder last allowed a multi-MiB window still clamps a bomb's.
        let mut bomb = compressed(Compression::Zstd, &vec![0u8; 4 * MIB]);
        bomb[5] = 0xD8;
        assert!(is_too_large(&decompress(Compression::Zstd, &bomb, MIB)));
        // And still verifies content checksums.
        let small = compressed(Compression::Zstd, b"hello, reused decoder");
        assert_ne!(small[4] & 0x04, 0, "the encoder writes a content checksum");
        let mut bad = small.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xFF;
        assert!(is_corrupt(&decompress(Compression::Zstd, &bad, MIB)));
        assert_eq!(
            decompress(Compression::Zstd, &small, MIB).unwrap(),
            b"hello, reused decoder"
        );
        // A decode refused mid-frame leaves no half-used decoder behind.
        let mut cut = compressed(Compression::Zstd, &vec![1u8; MIB]);
        cut.truncate(cut.len() / 2);
        assert!(decompress(Compression::Zstd, &cut, 2 * MIB).is_err());
        assert_eq!(
            decompress(Compression::Zstd, &small, MIB).unwrap(),
            b"hello, reused decoder"
        );
    }

    #[test]
    fn zstd_declared_content_size_beyond_cap_is_refused() {
        // Single-segment frame claiming 2^40 bytes, 8-byte FCS.
        let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
        f.extend_from_slice(&(1u64 << 40).to_le_bytes());
        f.extend_from_slice(&[0x01, 0x00, 0x00]); // a last, empty raw block
        assert!(is_too_large(&decompress(Compression::Zstd, &f, MIB)));
    }

    #[test]
    fn zstd_content_size_must_match() {
        // Single-segment frame, 1-byte FCS, one last raw block of "abc".
        let frame = |fcs: u8| {
            let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x20, fcs];
            f.extend_from_slice(&[(3 << 3) | 1, 0, 0]); // last, raw, size 3
            f.extend_from_slice(b"abc");
            f
        };
        assert_eq!(decompress(Compression::Zstd, &frame(3), 100).unwrap(), b"abc");
        assert!(is_corrupt(&decompress(Compression::Zstd, &frame(4), 100)));
        assert!(is_corrupt(&decompress(Compression::Zstd, &frame(2), 100)));
    }

    #[test]
    fn zstd_frame_extent_counts_rle_blocks_and_refuses_reserved_ones() {
        // Single-segment frame, 1-byte FCS 5, then a block of `kind` that
        // holds `body`.
        let frame = |kind: u32, body: &[u8]| {
            let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x20, 5];
            let bits = (5u32 << 3) | (kind << 1) | 1;
            f.extend_from_slice(&bits.to_le_bytes()[..3]);
            f.extend_from_slice(body);
            f
        };
        // RLE: one byte repeated 5 times, however many bytes the size says.
        let rle = frame(1, b"a");
        assert_eq!(decompress(Compression::Zstd, &rle, 100).unwrap(), b"aaaaa");
        assert_eq!(streamed(Compression::Zstd, &rle, 2, 100).unwrap(), b"aaaaa");
        // The same with a byte too many: a second frame that is not one.
        let mut long = rle.clone();
        long.push(b'a');
        assert!(is_corrupt(&decompress(Compression::Zstd, &long, 100)));
        // Reserved block type.
        assert!(is_corrupt(&decompress(Compression::Zstd, &frame(3, b"abcde"), 100)));
        // A raw block cut short.
        assert!(is_corrupt(&decompress(Compression::Zstd, &frame(0, b"abc"), 100)));
    }

    #[test]
    fn zstd_concatenated_and_skippable_frames() {
        let mut c = compressed(Compression::Zstd, HELLO);
        c.extend_from_slice(&0x184D_2A5Fu32.to_le_bytes());
        c.extend_from_slice(&2u32.to_le_bytes());
        c.extend_from_slice(b"zz");
        c.extend(compressed(Compression::Zstd, b"again"));
        assert_eq!(decompress(Compression::Zstd, &c, 100).unwrap(), b"Hello, Kafka!\nagain");
        c.extend_from_slice(b"junk");
        assert!(is_corrupt(&decompress(Compression::Zstd, &c, 100)));
    }

    #[test]
    fn zstd_checksum_mismatch_is_corrupt() {
        let c = compressed(Compression::Zstd, &mixed(10 * KIB));
        assert_ne!(c[4] & 0x04, 0, "our zstd frames carry a content checksum");
        let mut bad = c.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(is_corrupt(&decompress(Compression::Zstd, &bad, MIB)));
    }

    // ---- known answers from independent implementations ----

    #[test]
    fn gzip_fixtures_from_python_stdlib() {
        let pat = patterned();
        assert_eq!(
            decompress(Compression::Gzip, fixture!("hello.txt.gz"), 100).unwrap(),
            HELLO
        );
        assert!(decompress(Compression::Gzip, fixture!("patterned.gz"), pat.len()).unwrap() == pat);
        let mut both = HELLO.to_vec();
        both.extend_from_slice(&pat);
        let got = decompress(Compression::Gzip, fixture!("multi-member.gz"), both.len()).unwrap();
        assert!(got == both);
    }

    #[test]
    fn zstd_fixtures_from_libzstd() {
        let pat = patterned();
        assert_eq!(
            decompress(Compression::Zstd, fixture!("hello.zst"), 100).unwrap(),
            HELLO
        );
        assert!(decompress(Compression::Zstd, fixture!("patterned.zst"), pat.len()).unwrap() == pat);
        // Level 19 streaming: 8 MiB window descriptor, no content size.
        let l19 = fixture!("patterned-stream-l19.zst");
        assert_eq!(zstd::window_size(l19[5]), 8 * MIB as u64);
        assert!(decompress(Compression::Zstd, l19, pat.len()).unwrap() == pat);
        assert!(decompress(Compression::Zstd, l19, 64 * MIB).unwrap() == pat);
        assert!(is_too_large(&decompress(Compression::Zstd, l19, 50 * KIB)));
        // Declared content size beyond the cap.
        assert!(is_too_large(&decompress(
            Compression::Zstd,
            fixture!("patterned.zst"),
            1000
        )));
    }

    #[test]
    fn lz4_fixtures_from_liblz4() {
        let pat = patterned();
        let hello = fixture!("hello.lz4");
        assert_eq!(&hello[..7], &[0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x82]);
        assert_eq!(decompress(Compression::Lz4, hello, 100).unwrap(), HELLO);
        for f in [&fixture!("patterned.lz4")[..], &fixture!("patterned-linked.lz4")[..]] {
            assert!(decompress(Compression::Lz4, f, pat.len()).unwrap() == pat);
            assert!(is_too_large(&decompress(Compression::Lz4, f, pat.len() - 1)));
        }
        // The content checksum (xxh32 over 100 KiB) is really checked.
        let mut bad = fixture!("patterned.lz4").to_vec();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(is_corrupt(&decompress(Compression::Lz4, &bad, MIB)));
    }

    #[test]
    fn snappy_fixtures_from_python_snappy() {
        let pat = patterned();
        assert_eq!(
            decompress(Compression::Snappy, fixture!("hello.snappy.raw"), 100).unwrap(),
            HELLO
        );
        for f in [
            &fixture!("patterned.snappy.raw")[..],
            &fixture!("patterned.snappy.xerial")[..],
        ] {
            assert!(decompress(Compression::Snappy, f, pat.len()).unwrap() == pat);
        }
        // Our xerial writer produces the same framing as the fixture's.
        let ours = compressed(Compression::Snappy, &pat);
        assert_eq!(&ours[..16], &fixture!("patterned.snappy.xerial")[..16]);
    }

    // ---- hostile input ----

    #[test]
    fn truncated_streams_are_corrupt() {
        let input = mixed(100 * KIB);
        for codec in CODECS {
            let c = compressed(codec, &input);
            let mut cuts: Vec<usize> = (1..c.len()).step_by(1999).collect();
            cuts.extend([1, 2, 5, 10, c.len() / 2, c.len() - 4, c.len() - 1]);
            for cut in cuts {
                if codec == Compression::Snappy && on_xerial_block_boundary(&c, cut) {
                    continue; // a shorter but well-formed stream
                }
                let r = decompress(codec, &c[..cut], 10 * MIB);
                assert!(is_corrupt(&r), "{codec} cut at {cut}/{}: {:?}", c.len(), r.err());
            }
        }
    }

    fn on_xerial_block_boundary(c: &[u8], cut: usize) -> bool {
        let mut at = 16;
        while at < cut {
            at += 4 + i32::from_be_bytes(c[at..at + 4].try_into().unwrap()) as usize;
        }
        at == cut
    }

    #[test]
    fn garbage_is_rejected() {
        let inputs = [
            b"definitely not compressed data".to_vec(),
            noise(4096, 11),
            vec![0u8; 64],
            vec![0xFF; 64],
            vec![0x82, b'S', b'N', b'A'],
        ];
        for codec in CODECS {
            assert!(is_corrupt(&decompress(codec, b"", MIB)), "{codec}: empty");
            for input in &inputs {
                assert!(decompress(codec, input, MIB).is_err(), "{codec}: {input:?}");
            }
        }
        assert_eq!(decompress(Compression::None, b"", 0).unwrap(), b"");
    }

    #[test]
    fn decompression_bombs_hit_the_cap() {
        let zeros = vec![0u8; 10 * MIB];
        for codec in Compression::ALL {
            let c = compressed(codec, &zeros);
            let mut out = Vec::new();
            let r = decompress_into(codec, &c, MIB, &mut out);
            assert!(
                matches!(r, Err(CompressionError::OutputTooLarge { limit, .. }) if limit == MIB),
                "{codec}: {r:?}"
            );
            assert!(out.is_empty());
            // Never grew the output far beyond the cap.
            assert!(out.capacity() <= MIB + 64 * KIB, "{codec}: {}", out.capacity());
        }
    }

    #[test]
    fn mutated_streams_never_panic() {
        let input = mixed(20 * KIB);
        for codec in CODECS {
            let c = compressed(codec, &input);
            for (i, flip) in noise(300, 99).into_iter().enumerate() {
                let mut bad = c.clone();
                let at = (i * 7919) % bad.len();
                bad[at] ^= flip | 1;
                let _ = decompress(codec, &bad, 64 * KIB);
            }
        }
    }

    fn codec_strategy() -> impl Strategy<Value = Compression> {
        prop::sample::select(Compression::ALL.to_vec())
    }

    /// Arbitrary bytes, or a short arbitrary pattern repeated (so the
    /// encoders' match paths get exercised too).
    fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..2048),
            (prop::collection::vec(any::<u8>(), 1..16), 0usize..100_000).prop_map(|(p, n)| p
                .iter()
                .copied()
                .cycle()
                .take(n)
                .collect()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn decompress_arbitrary_bytes_never_panics(
            codec in codec_strategy(),
            data in prop::collection::vec(any::<u8>(), 0..4096),
        ) {
            let _ = decompress(codec, &data, 64 * KIB);
        }

        #[test]
        fn decompress_mutated_streams_never_panics(
            codec in codec_strategy(),
            data in data_strategy(),
            edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut c = compressed(codec, &data);
            for (at, byte) in edits {
                if !c.is_empty() {
                    let i = at % c.len();
                    c[i] = byte;
                }
            }
            c.truncate(cut % (c.len() + 1));
            let _ = decompress(codec, &c, 64 * KIB);
        }

        #[test]
        fn compress_then_decompress_round_trips(codec in codec_strategy(), data in data_strategy()) {
            let c = compressed(codec, &data);
            prop_assert_eq!(decompress(codec, &c, data.len()).unwrap(), data);
        }
    }
}
