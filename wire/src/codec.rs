//! Bounded primitive readers and writers for the Kafka protocol's types.
//!
//! [`Reader`] walks a [`Bytes`] buffer that holds one whole frame. Every
//! length it reads is checked against the bytes that remain *before* anything
//! is allocated, and array capacity is never taken on trust: an array of `n`
//! elements needs at least `n` bytes, so a claimed `i32::MAX` elements in a
//! 20-byte frame is an error, not a 100 GiB `Vec::with_capacity`.
//!
//! Why this exists at all: `kafka-protocol`'s generated decoders call
//! `Vec::with_capacity(n)` on the raw array length, which lets a hostile
//! broker (or a fuzzer) abort the process. We keep its generated *types* and
//! its request encoders, and decode responses with this reader instead.
//! See <https://kafka.apache.org/protocol#protocol_types>.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes};
use kafka_protocol::protocol::StrBytes;

use crate::error::{Error, Result};

/// Most tagged fields a single structure may carry; Kafka defines a handful.
const MAX_TAGGED_FIELDS: usize = 1024;
/// Cap on the capacity reserved up front for any array; beyond this the
/// vector grows as elements actually decode.
const MAX_PREALLOC: usize = 1024;

/// A cursor over one frame's bytes. Slices it hands out share the frame's
/// allocation (zero-copy).
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a Bytes,
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `data`.
    pub fn new(data: &'a Bytes) -> Self {
        Reader { data, pos: 0 }
    }

    /// Bytes not yet read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.rest().len()
    }

    /// The bytes not yet read (`pos` never passes the end: every advance
    /// is of bytes just found in `rest`).
    #[inline]
    fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or_default()
    }

    /// Moves past `n` bytes the caller has just taken from [`rest`](Self::rest).
    /// Saturating: a position past the end would read as no bytes left.
    #[inline]
    fn advance(&mut self, n: usize) {
        self.pos = self.pos.saturating_add(n);
    }

    /// Bytes consumed so far.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Fails with [`Error::TrailingBytes`] unless every byte was consumed.
    pub fn finish(&self, context: &'static str) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            remaining => Err(Error::TrailingBytes { context, remaining }),
        }
    }

    #[inline]
    fn take<const N: usize>(&mut self, context: &'static str) -> Result<[u8; N]> {
        let rest = self.rest();
        let Some(out) = rest.first_chunk::<N>() else {
            return Err(Error::truncated(context, N, rest.len()));
        };
        self.advance(N);
        Ok(*out)
    }

    /// Reads an `int8`; `context` names the field in an error.
    pub fn i8(&mut self, context: &'static str) -> Result<i8> {
        Ok(i8::from_be_bytes(self.take::<1>(context)?))
    }
    /// Reads a `boolean` (any non-zero byte is true).
    pub fn bool(&mut self, context: &'static str) -> Result<bool> {
        Ok(self.i8(context)? != 0)
    }
    /// Reads a big-endian `int16`.
    pub fn i16(&mut self, context: &'static str) -> Result<i16> {
        Ok(i16::from_be_bytes(self.take::<2>(context)?))
    }
    /// Reads a big-endian `uint16`.
    pub fn u16(&mut self, context: &'static str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.take::<2>(context)?))
    }
    /// Reads a big-endian `int32`.
    pub fn i32(&mut self, context: &'static str) -> Result<i32> {
        Ok(i32::from_be_bytes(self.take::<4>(context)?))
    }
    /// Reads a big-endian `uint32`.
    pub fn u32(&mut self, context: &'static str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.take::<4>(context)?))
    }
    /// Reads a big-endian `int64`.
    pub fn i64(&mut self, context: &'static str) -> Result<i64> {
        Ok(i64::from_be_bytes(self.take::<8>(context)?))
    }
    /// Reads a big-endian `float64`.
    pub fn f64(&mut self, context: &'static str) -> Result<f64> {
        Ok(f64::from_be_bytes(self.take::<8>(context)?))
    }
    /// A 16-byte UUID.
    pub fn uuid(&mut self, context: &'static str) -> Result<uuid::Uuid> {
        Ok(uuid::Uuid::from_bytes(self.take::<16>(context)?))
    }

    /// An unsigned LEB128 varint of at most 5 bytes.
    pub fn unsigned_varint(&mut self, context: &'static str) -> Result<u32> {
        let (v, n) = read_unsigned_varint(self.rest(), context)?;
        self.advance(n);
        Ok(v)
    }
    /// A zigzag varint (32-bit).
    pub fn varint(&mut self, context: &'static str) -> Result<i32> {
        let (v, n) = read_varint(self.rest(), context)?;
        self.advance(n);
        Ok(v)
    }
    /// A zigzag varlong (64-bit).
    pub fn varlong(&mut self, context: &'static str) -> Result<i64> {
        let (v, n) = read_varlong(self.rest(), context)?;
        self.advance(n);
        Ok(v)
    }

    /// `n` raw bytes, sharing the frame's allocation.
    pub fn slice(&mut self, n: usize, context: &'static str) -> Result<Bytes> {
        let rest = self.rest();
        let Some(head) = rest.get(..n) else {
            return Err(Error::LengthOutOfBounds {
                context,
                length: n as i64,
                limit: rest.len(),
            });
        };
        let out = self.data.slice_ref(head);
        self.advance(n);
        Ok(out)
    }

    /// A length prefix: i16/i32 for classic fields, unsigned varint minus one
    /// for compact ones. `None` is the null marker (-1).
    fn length(&mut self, compact: bool, wide: bool, context: &'static str) -> Result<Option<usize>> {
        let len: i64 = if compact {
            // Compact: the length plus one, 0 being null.
            match self.unsigned_varint(context)?.checked_sub(1) {
                None => -1,
                Some(l) => i64::from(l),
            }
        } else if wide {
            i64::from(self.i32(context)?)
        } else {
            i64::from(self.i16(context)?)
        };
        match len {
            -1 => Ok(None),
            l if l < -1 => Err(Error::NegativeLength { context, length: l }),
            l => {
                let rem = self.remaining();
                if l as u64 > rem as u64 {
                    Err(Error::LengthOutOfBounds {
                        context,
                        length: l,
                        limit: rem,
                    })
                } else {
                    Ok(Some(l as usize))
                }
            }
        }
    }

    /// A nullable string (`STRING`/`COMPACT_STRING` when `compact`).
    pub fn nullable_string(&mut self, compact: bool, context: &'static str) -> Result<Option<StrBytes>> {
        match self.length(compact, false, context)? {
            None => Ok(None),
            Some(n) => {
                let b = self.slice(n, context)?;
                StrBytes::from_utf8(b)
                    .map(Some)
                    .map_err(|_| Error::InvalidUtf8 { context })
            }
        }
    }
    /// A non-null string.
    pub fn string(&mut self, compact: bool, context: &'static str) -> Result<StrBytes> {
        self.nullable_string(compact, context)?
            .ok_or(Error::NegativeLength { context, length: -1 })
    }
    /// Nullable bytes (`BYTES`/`COMPACT_BYTES`, i32 length when not compact).
    pub fn nullable_bytes(&mut self, compact: bool, context: &'static str) -> Result<Option<Bytes>> {
        match self.length(compact, true, context)? {
            None => Ok(None),
            Some(n) => self.slice(n, context).map(Some),
        }
    }
    /// Non-null bytes.
    pub fn bytes(&mut self, compact: bool, context: &'static str) -> Result<Bytes> {
        self.nullable_bytes(compact, context)?
            .ok_or(Error::NegativeLength { context, length: -1 })
    }

    /// A nullable array whose elements decode with `elem`. Each element must
    /// consume at least one byte, so the count is bounded by what remains.
    pub fn nullable_array<T>(
        &mut self,
        compact: bool,
        context: &'static str,
        mut elem: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Option<Vec<T>>> {
        let n = match self.length(compact, true, context)? {
            None => return Ok(None),
            Some(n) => n,
        };
        let mut out = Vec::with_capacity(n.min(MAX_PREALLOC));
        for _ in 0..n {
            let before = self.pos;
            out.push(elem(self)?);
            if self.pos == before {
                // A zero-width element would let `n` (already bounded by the
                // bytes left) be claimed without consuming input; refuse it.
                return Err(Error::Invalid {
                    context,
                    message: "array element consumed no bytes".into(),
                });
            }
        }
        Ok(Some(out))
    }
    /// A non-null array.
    pub fn array<T>(
        &mut self,
        compact: bool,
        context: &'static str,
        elem: impl FnMut(&mut Self) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.nullable_array(compact, context, elem)?
            .ok_or(Error::NegativeLength { context, length: -1 })
    }

    /// The tagged-field section of a flexible structure. Unknown tags are
    /// kept as raw bytes (zero-copy) the way kafka-protocol's types store them.
    pub fn tagged_fields(
        &mut self,
        context: &'static str,
        mut known: impl FnMut(&mut Self, u32, usize) -> Result<bool>,
    ) -> Result<BTreeMap<i32, Bytes>> {
        let count = self.unsigned_varint(context)? as usize;
        if count > MAX_TAGGED_FIELDS || count > self.remaining() {
            return Err(Error::LengthOutOfBounds {
                context,
                length: count as i64,
                limit: MAX_TAGGED_FIELDS.min(self.remaining()),
            });
        }
        let mut unknown = BTreeMap::new();
        for _ in 0..count {
            let tag = self.unsigned_varint(context)?;
            let size = self.unsigned_varint(context)? as usize;
            let rem = self.remaining();
            if size > rem {
                return Err(Error::LengthOutOfBounds {
                    context,
                    length: size as i64,
                    limit: rem,
                });
            }
            if known(self, tag, size)? {
                // `known` only reads forward, so `rem` is at least what is left.
                let used = rem.abs_diff(self.remaining());
                if used != size {
                    return Err(Error::Invalid {
                        context,
                        message: format!("tagged field {tag} declared {size} bytes but used {used}"),
                    });
                }
            } else {
                let v = self.slice(size, context)?;
                unknown.insert(tag as i32, v);
            }
        }
        Ok(unknown)
    }

    /// Skips a tagged-field section entirely (for structures whose type keeps none).
    pub fn skip_tagged_fields(&mut self, context: &'static str) -> Result<()> {
        self.tagged_fields(context, |_, _, _| Ok(false)).map(|_| ())
    }
}

/// A response body this crate can decode from bytes it does not trust.
///
/// Implemented for `kafka-protocol`'s generated response types (in
/// `crate::messages`), field for field as the Kafka schema lays them out for
/// `version`, with every length bounded by [`Reader`].
pub trait DecodeResponse: Sized {
    /// Decodes the body (after the response header) at `version`.
    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self>;

    /// The answer's `throttle_time_ms` (KIP-219), 0 for APIs without one;
    /// see [`crate::protocol::throttle_delay`].
    fn throttle_time_ms(&self) -> i32 {
        0
    }
}

/// Decodes an unsigned varint from the front of `buf`: (value, bytes used).
#[inline]
pub fn read_unsigned_varint(buf: &[u8], context: &'static str) -> Result<(u32, usize)> {
    let mut value: u32 = 0;
    // (index of the byte, bytes used with it, its shift)
    for (i, (used, shift)) in (1..=5).zip((0..35).step_by(7)).enumerate() {
        let Some(&b) = buf.get(i) else {
            return Err(Error::truncated(context, used, buf.len()));
        };
        if used == 5 && b > 0x0f {
            return Err(Error::VarintTooLong { context, max_bytes: 5 });
        }
        value |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((value, used));
        }
    }
    Err(Error::VarintTooLong { context, max_bytes: 5 })
}

/// Decodes a zigzag varint (i32) from the front of `buf`.
#[inline]
pub fn read_varint(buf: &[u8], context: &'static str) -> Result<(i32, usize)> {
    // Fast path: one byte covers -64..=63, the common case for record fields.
    if let Some(&b) = buf.first() {
        if b & 0x80 == 0 {
            return Ok((zigzag32(u32::from(b)), 1));
        }
    }
    let (u, n) = read_unsigned_varint(buf, context)?;
    Ok((zigzag32(u), n))
}

/// Decodes a zigzag varlong (i64) from the front of `buf`.
#[inline]
pub fn read_varlong(buf: &[u8], context: &'static str) -> Result<(i64, usize)> {
    let mut value: u64 = 0;
    // (index of the byte, bytes used with it, its shift)
    for (i, (used, shift)) in (1..=10).zip((0..70).step_by(7)).enumerate() {
        let Some(&b) = buf.get(i) else {
            return Err(Error::truncated(context, used, buf.len()));
        };
        if used == 10 && b > 0x01 {
            return Err(Error::VarintTooLong { context, max_bytes: 10 });
        }
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((zigzag64(value), used));
        }
    }
    Err(Error::VarintTooLong { context, max_bytes: 10 })
}

/// Zigzag-decodes a varint's 32 bits (0, 1, 2, 3… → 0, -1, 1, -2…); the
/// negation of the low bit (0 or 1) is the all-ones mask or zero.
#[inline(always)]
pub fn zigzag32(u: u32) -> i32 {
    ((u >> 1) as i32) ^ ((u & 1).wrapping_neg() as i32)
}

/// Zigzag-decodes a varlong's 64 bits.
#[inline(always)]
pub fn zigzag64(u: u64) -> i64 {
    ((u >> 1) as i64) ^ ((u & 1).wrapping_neg() as i64)
}

/// Appends an unsigned varint.
#[inline]
pub fn put_unsigned_varint(out: &mut impl BufMut, mut v: u32) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Appends a zigzag varint.
#[inline]
pub fn put_varint(out: &mut impl BufMut, v: i32) {
    put_unsigned_varint(out, ((v << 1) ^ (v >> 31)) as u32);
}

/// Appends a zigzag varlong.
#[inline]
pub fn put_varlong(out: &mut impl BufMut, v: i64) {
    let mut u = ((v << 1) ^ (v >> 63)) as u64;
    while u >= 0x80 {
        out.put_u8((u as u8) | 0x80);
        u >>= 7;
    }
    out.put_u8(u as u8);
}

/// Bytes a zigzag varint takes.
#[inline]
pub fn varint_len(v: i32) -> usize {
    let u = ((v << 1) ^ (v >> 31)) as u32;
    match u {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0x0fff_ffff => 4,
        _ => 5,
    }
}

/// Bytes a zigzag varlong takes.
#[inline]
pub fn varlong_len(v: i64) -> usize {
    let u = ((v << 1) ^ (v >> 63)) as u64;
    // leading_zeros() <= 64: the difference is the bit length.
    let bits = u64::BITS.abs_diff(u.leading_zeros()) as usize;
    bits.max(1).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn varint_never_ends_is_typed_error() {
        let buf = [0xffu8; 16];
        assert!(matches!(
            read_unsigned_varint(&buf, "x"),
            Err(Error::VarintTooLong { .. })
        ));
        assert!(matches!(read_varint(&buf, "x"), Err(Error::VarintTooLong { .. })));
        assert!(matches!(read_varlong(&buf, "x"), Err(Error::VarintTooLong { .. })));
        // Ends exactly at the input boundary: truncated, not too long.
        assert!(matches!(read_varlong(&[0x80, 0x80], "x"), Err(Error::Truncated { .. })));
    }

    #[test]
    fn array_length_i32_max_is_bounded() {
        let data = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 1]);
        let mut r = Reader::new(&data);
        let err = r.array(false, "topics", |r| r.i32("x")).unwrap_err();
        assert!(
            matches!(
                err,
                Error::LengthOutOfBounds {
                    length: 2147483647,
                    limit: 4,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn compact_lengths_bounded() {
        // COMPACT_STRING claiming u32::MAX - 1 bytes.
        let data = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, b'a']);
        let mut r = Reader::new(&data);
        assert!(matches!(r.string(true, "s"), Err(Error::LengthOutOfBounds { .. })));
        // Classic BYTES claiming i32::MAX.
        let data = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(matches!(
            Reader::new(&data).bytes(false, "b"),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // Length below -1.
        let data = Bytes::from_static(&[0xff, 0xfe]);
        assert!(matches!(
            Reader::new(&data).string(false, "s"),
            Err(Error::NegativeLength { length: -2, .. })
        ));
    }

    #[test]
    fn tagged_fields_bounded() {
        let data = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x07]);
        assert!(matches!(
            Reader::new(&data).skip_tagged_fields("t"),
            Err(Error::LengthOutOfBounds { .. })
        ));
        let data = Bytes::from_static(&[1, 0, 0x7f]);
        assert!(matches!(
            Reader::new(&data).skip_tagged_fields("t"),
            Err(Error::LengthOutOfBounds { .. })
        ));
        let data = Bytes::from_static(&[1, 5, 2, 0xaa, 0xbb]);
        let tags = Reader::new(&data).tagged_fields("t", |_, _, _| Ok(false)).unwrap();
        assert_eq!(tags.get(&5).unwrap().as_ref(), &[0xaa, 0xbb]);
    }

    #[test]
    fn invalid_utf8_is_typed() {
        let data = Bytes::from_static(&[0, 2, 0xff, 0xfe]);
        assert!(matches!(
            Reader::new(&data).string(false, "s"),
            Err(Error::InvalidUtf8 { .. })
        ));
    }

    proptest! {
        #[test]
        fn varint_roundtrip(v in any::<i32>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            prop_assert_eq!(read_varint(&out, "v").unwrap(), (v, out.len()));
        }
        #[test]
        fn varlong_roundtrip(v in any::<i64>()) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_len(v));
            prop_assert_eq!(read_varlong(&out, "v").unwrap(), (v, out.len()));
        }
        #[test]
        fn unsigned_varint_roundtrip(v in any::<u32>()) {
            let mut out = Vec::new();
            put_unsigned_varint(&mut out, v);
            prop_assert_eq!(read_unsigned_varint(&out, "v").unwrap(), (v, out.len()));
        }
    }
}
