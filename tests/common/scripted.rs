//! Response framing for scripted broker peers: a kafka-protocol response
//! body behind the right response header, size-prefixed.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

pub fn str(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// `body` as a framed `key` v`version` response to `correlation_id`.
/// ApiVersions answers always carry header v0 (KIP-511).
pub fn encode<R: Encodable>(correlation_id: i32, key: ApiKey, version: i16, body: &R) -> Bytes {
    let mut buf = BytesMut::new();
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let header_version = if key == ApiKey::ApiVersions {
        0
    } else {
        key.response_header_version(version)
    };
    header.encode(&mut buf, header_version).unwrap();
    body.encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("encoding the {key:?} v{version} answer: {e}"));
    let mut framed = BytesMut::with_capacity(4 + buf.len());
    framed.extend_from_slice(&(buf.len() as i32).to_be_bytes());
    framed.extend_from_slice(&buf);
    framed.freeze()
}
