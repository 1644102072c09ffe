//! Kafka framing: a 4-byte big-endian size prefix, then a request or response
//! header, then the body. See <https://kafka.apache.org/protocol#protocol_common>.
//!
//! Request headers are v1 (classic) or v2 (flexible, with tagged fields);
//! response headers are v0 or v1. Which one applies is a property of the API
//! and version, taken from `kafka-protocol`'s generated tables — with the one
//! exception Kafka makes: ApiVersions responses always use header v0 so that a
//! client can read the broker's answer before it knows what the broker speaks.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};
use crate::protocol::ApiRequest;

/// Default cap on one frame, matching the Java client's generous bound on
/// what it will buffer (the broker's own default is `socket.request.max.bytes`
/// = 100 MiB).
pub const DEFAULT_MAX_FRAME_SIZE: usize = 100 * 1024 * 1024;

/// Splits a byte stream into frames, refusing any size prefix over the cap
/// before a byte of it is buffered.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_size: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder {
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
        }
    }
}

impl FrameDecoder {
    /// A decoder with the given cap (bytes after the size prefix).
    pub fn new(max_frame_size: usize) -> Self {
        FrameDecoder { max_frame_size }
    }

    /// The configured cap.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Looks at the front of `input`: `Ok(None)` means more bytes are needed;
    /// `Ok(Some((frame, used)))` gives the frame's bytes (without the prefix)
    /// and how many bytes of `input` it used (prefix included).
    pub fn decode<'a>(&self, input: &'a [u8]) -> Result<Option<(&'a [u8], usize)>> {
        let Some(len) = self.frame_len(input)? else {
            return Ok(None);
        };
        // `len` is at most the cap, far from `usize::MAX`.
        let used = len.saturating_add(4);
        Ok(input.get(4..used).map(|frame| (frame, used)))
    }

    /// Like [`decode`](Self::decode) but splits the frame off a `BytesMut`
    /// without copying, leaving the rest in `buf`.
    pub fn decode_bytes(&self, buf: &mut BytesMut) -> Result<Option<Bytes>> {
        let Some(len) = self.frame_len(buf)? else {
            return Ok(None);
        };
        let used = len.saturating_add(4);
        if let Some(missing) = used.checked_sub(buf.len()).filter(|&m| m > 0) {
            // Reserve what the frame will need, now that the size is known to
            // be under the cap.
            buf.reserve(missing);
            return Ok(None);
        }
        buf.advance(4);
        Ok(Some(buf.split_to(len).freeze()))
    }

    /// The size of the frame at the start of `input` (after its 4-byte
    /// length), checked against the frame size limit; `None` until the
    /// length has arrived.
    pub fn frame_len(&self, input: &[u8]) -> Result<Option<usize>> {
        let Some(prefix) = input.first_chunk::<4>() else {
            return Ok(None);
        };
        let size = i32::from_be_bytes(*prefix);
        // The smallest valid frame is a response header v0: a correlation id.
        if size < 4 {
            return Err(Error::InvalidFrameSize { size });
        }
        let size = size as usize;
        if size > self.max_frame_size {
            return Err(Error::FrameTooLarge {
                size,
                max: self.max_frame_size,
            });
        }
        Ok(Some(size))
    }
}

/// The request header version (1 or 2) for `api` at `version`.
pub fn request_header_version(api: ApiKey, version: i16) -> i16 {
    api.request_header_version(version)
}

/// The response header version (0 or 1) for `api` at `version`.
pub fn response_header_version(api: ApiKey, version: i16) -> i16 {
    if api == ApiKey::ApiVersions {
        0
    } else {
        api.response_header_version(version)
    }
}

/// Appends a request header (v1, or v2 with its empty tagged fields when
/// `api` at `version` is flexible) to `out`.
pub fn put_request_header(
    out: &mut impl BufMut,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Result<()> {
    out.put_i16(api as i16);
    out.put_i16(version);
    out.put_i32(correlation_id);
    match client_id {
        None => out.put_i16(-1),
        Some(id) => {
            let len = i16::try_from(id.len()).map_err(|_| Error::Invalid {
                context: "client_id",
                message: format!("{} bytes is longer than the protocol allows (32767)", id.len()),
            })?;
            out.put_i16(len);
            out.put_slice(id.as_bytes());
        }
    }
    if request_header_version(api, version) >= 2 {
        out.put_u8(0); // no tagged fields
    }
    Ok(())
}

/// Appends one whole request frame (size prefix, header, body) to `out`.
///
/// The same arguments always give the same bytes, so a retry re-sends exactly
/// what the first attempt sent.
pub fn encode_request<R: ApiRequest>(
    out: &mut BytesMut,
    correlation_id: i32,
    client_id: Option<&str>,
    version: i16,
    body: &R,
) -> Result<()> {
    R::check_version(version)?;
    // Reserve the whole frame at once: a Produce request carries its record
    // batches, and growing the buffer by doubling would copy them again and
    // again. An error here surfaces from `encode` below.
    let body_size = body.compute_size(version).unwrap_or(0);
    // (Saturating: a reservation that large fails, as the frame would.)
    let header_size = 4 + 2 + 2 + 4 + 2 + 1;
    out.reserve(
        body_size
            .saturating_add(header_size)
            .saturating_add(client_id.map_or(0, str::len)),
    );
    let start = out.len();
    out.put_i32(0); // patched below
    put_request_header(out, R::KEY, version, correlation_id, client_id)?;
    body.encode(out, version).map_err(|e| Error::Encode {
        api: R::NAME,
        version,
        message: e.to_string(),
    })?;
    let Some((prefix, frame)) = out.get_mut(start..).and_then(<[u8]>::split_first_chunk_mut::<4>) else {
        return Err(Error::truncated("request frame", 4, 0));
    };
    let size = frame.len();
    let size = i32::try_from(size).map_err(|_| Error::FrameTooLarge {
        size,
        max: i32::MAX as usize,
    })?;
    *prefix = size.to_be_bytes();
    Ok(())
}

/// A response frame whose header has been read.
#[derive(Debug, Clone)]
pub struct ResponseFrame {
    /// The correlation id the broker echoed.
    pub correlation_id: i32,
    frame: Bytes,
    body_start: usize,
    /// Whether the header (and so the body) is flexible (KIP-482).
    flexible: bool,
}

impl ResponseFrame {
    /// Reads the response header of `frame` (the bytes after the size prefix)
    /// as `api` at `version` will have written it.
    pub fn parse(frame: Bytes, api: ApiKey, version: i16) -> Result<Self> {
        let mut r = Reader::new(&frame);
        let correlation_id = r.i32("response header correlation_id")?;
        let flexible = response_header_version(api, version) >= 1;
        if flexible {
            r.skip_tagged_fields("response header tagged fields")?;
        }
        let body_start = r.position();
        Ok(ResponseFrame {
            correlation_id,
            frame,
            body_start,
            flexible,
        })
    }

    /// Just the correlation id at the front of a frame, for routing a frame
    /// to the request that is waiting for it before its API is known.
    pub fn peek_correlation_id(frame: &[u8]) -> Result<i32> {
        match frame.first_chunk::<4>() {
            Some(b) => Ok(i32::from_be_bytes(*b)),
            None => Err(Error::truncated("response header correlation_id", 4, frame.len())),
        }
    }

    /// The body bytes (zero-copy).
    pub fn body(&self) -> Bytes {
        self.frame.slice(self.body_start..)
    }

    /// Decodes the body as `T` at `version`, requiring every byte be used.
    ///
    /// One exception: a flexible body followed by a single `0x00`, an empty
    /// tagged-field section written twice. librdkafka's mock cluster (2.12)
    /// ends its Metadata v9+ answers so (its handler writes the section and
    /// its send path appends another); Kafka's own clients and librdkafka
    /// ignore trailing bytes altogether. Any other trailing byte is an error.
    pub fn decode<T: DecodeResponse>(&self, version: i16, context: &'static str) -> Result<T> {
        let body = self.body();
        let mut r = Reader::new(&body);
        let value = T::decode_response(&mut r, version)?;
        if self.flexible && body.get(r.position()..) == Some(&[0u8][..]) {
            return Ok(value);
        }
        r.finish(context)?;
        Ok(value)
    }
}

/// Decodes a whole response frame for request type `R` at `version`, checking
/// that it answers `expected_correlation_id`.
pub fn decode_response<R: ApiRequest>(frame: Bytes, version: i16, expected_correlation_id: i32) -> Result<R::Response> {
    let parsed = ResponseFrame::parse(frame, R::KEY, version)?;
    if parsed.correlation_id != expected_correlation_id {
        return Err(Error::CorrelationMismatch {
            expected: expected_correlation_id,
            actual: parsed.correlation_id,
        });
    }
    parsed.decode(version, R::NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn need_more_then_frame() {
        let d = FrameDecoder::default();
        assert!(d.decode(&[]).unwrap().is_none());
        assert!(d.decode(&[0, 0, 0]).unwrap().is_none());
        assert!(d.decode(&[0, 0, 0, 6, 1, 2, 3]).unwrap().is_none());
        let input = [0, 0, 0, 4, 9, 9, 9, 9, 0xaa];
        let (frame, used) = d.decode(&input).unwrap().unwrap();
        assert_eq!(frame, &[9, 9, 9, 9]);
        assert_eq!(used, 8);
    }

    #[test]
    fn size_cap_is_enforced_before_buffering() {
        let d = FrameDecoder::new(1024);
        let mut buf = BytesMut::from(&[0x7f, 0xff, 0xff, 0xff][..]);
        let err = d.decode_bytes(&mut buf).unwrap_err();
        assert!(
            matches!(
                err,
                Error::FrameTooLarge {
                    size: 2147483647,
                    max: 1024
                }
            ),
            "{err}"
        );
        assert!(buf.capacity() < 4096, "must not reserve for a refused frame");
        // Default cap is 100 MiB.
        let d = FrameDecoder::default();
        assert_eq!(d.max_frame_size(), 100 * 1024 * 1024);
        let big = (100 * 1024 * 1024 + 1i32).to_be_bytes();
        assert!(matches!(d.decode(&big), Err(Error::FrameTooLarge { .. })));
        assert!(matches!(
            d.decode(&(-1i32).to_be_bytes()),
            Err(Error::InvalidFrameSize { size: -1 })
        ));
        assert!(matches!(
            d.decode(&[0, 0, 0, 3]),
            Err(Error::InvalidFrameSize { size: 3 })
        ));
    }

    #[test]
    fn decode_bytes_splits_zero_copy() {
        let d = FrameDecoder::default();
        let mut buf = BytesMut::from(&[0, 0, 0, 4, 1, 2, 3, 4, 0, 0, 0, 5, 1][..]);
        let f = d.decode_bytes(&mut buf).unwrap().unwrap();
        assert_eq!(&f[..], &[1, 2, 3, 4]);
        assert!(d.decode_bytes(&mut buf).unwrap().is_none());
        assert_eq!(&buf[..], &[0, 0, 0, 5, 1]);
    }

    #[test]
    fn header_versions_follow_api_tables() {
        // Metadata is flexible from v9.
        assert_eq!(request_header_version(ApiKey::Metadata, 8), 1);
        assert_eq!(request_header_version(ApiKey::Metadata, 9), 2);
        assert_eq!(response_header_version(ApiKey::Metadata, 8), 0);
        assert_eq!(response_header_version(ApiKey::Metadata, 9), 1);
        // ApiVersions: flexible request at v3, but response header stays v0.
        assert_eq!(request_header_version(ApiKey::ApiVersions, 3), 2);
        assert_eq!(response_header_version(ApiKey::ApiVersions, 3), 0);
    }

    #[test]
    fn response_header_truncated_is_typed() {
        let err = ResponseFrame::parse(Bytes::from_static(&[0, 1]), ApiKey::Metadata, 1).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }));
        let err = ResponseFrame::parse(
            Bytes::from_static(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f]),
            ApiKey::Metadata,
            12,
        )
        .unwrap_err();
        assert!(matches!(err, Error::LengthOutOfBounds { .. }), "{err}");
    }

    #[test]
    fn encoded_request_is_what_kafka_protocol_parses() {
        use kafka_protocol::messages::{MetadataRequest, RequestHeader};
        use kafka_protocol::protocol::{Decodable, StrBytes};
        for version in [4i16, 8, 9, 12] {
            let mut req = MetadataRequest::default();
            let mut t = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default();
            t.name = Some(StrBytes::from_static_str("orders").into());
            req.topics = Some(vec![t]);
            let mut out = BytesMut::new();
            encode_request(&mut out, 77, Some("clink"), version, &req).unwrap();
            // Same bytes on every call: a retry re-sends exactly what was sent.
            let mut again = BytesMut::new();
            encode_request(&mut again, 77, Some("clink"), version, &req).unwrap();
            assert_eq!(out, again);
            let (frame, used) = FrameDecoder::default().decode(&out).unwrap().unwrap();
            assert_eq!(used, out.len());
            let mut buf = Bytes::copy_from_slice(frame);
            let header = RequestHeader::decode(&mut buf, request_header_version(ApiKey::Metadata, version)).unwrap();
            assert_eq!(header.request_api_key, ApiKey::Metadata as i16);
            assert_eq!(header.request_api_version, version);
            assert_eq!(header.correlation_id, 77);
            assert_eq!(header.client_id.as_deref(), Some("clink"));
            let decoded = MetadataRequest::decode(&mut buf, version).unwrap();
            assert_eq!(decoded, req);
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn unsupported_version_refused_before_encoding() {
        let mut out = BytesMut::new();
        let err = encode_request(&mut out, 1, None, 3, &kafka_protocol::messages::FetchRequest::default()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::UnsupportedVersion {
                    api: "Fetch",
                    version: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(out.is_empty());
    }

    #[test]
    fn decode_response_checks_correlation_id() {
        use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
        use kafka_protocol::protocol::Encodable;
        let mut resp = FindCoordinatorResponse::default();
        resp.throttle_time_ms = 5;
        for version in [0i16, 3, 4] {
            let mut frame = BytesMut::new();
            frame.put_i32(41);
            if response_header_version(ApiKey::FindCoordinator, version) >= 1 {
                frame.put_u8(0);
            }
            let mut body = resp.clone();
            if version == 0 {
                body.throttle_time_ms = 0;
            }
            body.encode(&mut frame, version).unwrap();
            let frame = frame.freeze();
            let got = decode_response::<FindCoordinatorRequest>(frame.clone(), version, 41).unwrap();
            assert_eq!(got, body);
            let err = decode_response::<FindCoordinatorRequest>(frame.clone(), version, 42).unwrap_err();
            assert!(matches!(
                err,
                Error::CorrelationMismatch {
                    expected: 42,
                    actual: 41
                }
            ));
            // Trailing garbage after the body is an error, not ignored.
            for garbage in [&[1u8][..], &[0, 0], &[0, 1]] {
                let mut long = BytesMut::from(&frame[..]);
                long.put_slice(garbage);
                assert!(
                    matches!(
                        decode_response::<FindCoordinatorRequest>(long.freeze(), version, 41),
                        Err(Error::TrailingBytes { .. })
                    ),
                    "v{version} {garbage:?}"
                );
            }
            // One empty tagged-field section too many (librdkafka's mock
            // cluster) is read past at flexible versions only.
            let mut long = BytesMut::from(&frame[..]);
            long.put_u8(0);
            let got = decode_response::<FindCoordinatorRequest>(long.freeze(), version, 41);
            if version >= 3 {
                assert_eq!(got.unwrap(), body);
            } else {
                assert!(matches!(got, Err(Error::TrailingBytes { .. })), "v{version}");
            }
        }
    }
}
