//! Produce request (API key 0), v3..=v12 (flexible from v9), written as
//! parts: the request's own bytes interleaved with the record batches'
//! `Bytes`, so that no batch is copied into the frame (the connection
//! writes the parts with vectored writes). The bytes are exactly those
//! `kafka-protocol`'s `ProduceRequest` encodes (tested below, every version).
//! Schema: <https://github.com/apache/kafka/blob/trunk/clients/src/main/resources/common/message/ProduceRequest.json>.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;

use crate::codec::put_unsigned_varint;
use crate::error::{Error, Result};
use crate::frame::put_request_header;

/// Oldest Produce request version this encoder writes.
pub const PRODUCE_REQUEST_MIN_VERSION: i16 = 3;
/// Newest Produce request version this encoder writes (v13 names topics by
/// id, which the producer does not use).
pub const PRODUCE_REQUEST_MAX_VERSION: i16 = 12;

/// One topic of a Produce request: each partition with its record batch.
#[derive(Debug, Clone)]
pub struct ProduceTopic<'a> {
    /// The topic's name.
    pub name: &'a str,
    /// `(partition, batch)`: the batch is an encoded record batch.
    pub partitions: Vec<(i32, Bytes)>,
}

/// A whole request frame (size prefix included) in parts, to be written in
/// order.
#[derive(Debug, Clone, Default)]
pub struct FrameParts {
    parts: Vec<Bytes>,
    len: usize,
}

impl FrameParts {
    /// The parts, in order (none empty).
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The frame's length: every part's, the size prefix included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the frame has no bytes (never, for an encoded request).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frame as one buffer (a copy when there is more than one part).
    pub fn to_bytes(&self) -> Bytes {
        match self.parts.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut out = BytesMut::with_capacity(self.len);
                for p in many {
                    out.put_slice(p);
                }
                out.freeze()
            }
        }
    }
}

fn too_long(context: &'static str, len: usize, max: usize) -> Error {
    Error::Invalid {
        context,
        message: format!("{len} bytes is longer than the protocol allows ({max})"),
    }
}

fn put_len(out: &mut BytesMut, flexible: bool, len: usize, context: &'static str) -> Result<()> {
    if flexible {
        let v = u32::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(1))
            .ok_or_else(|| too_long(context, len, u32::MAX as usize))?;
        put_unsigned_varint(out, v);
    } else {
        let v = i32::try_from(len).map_err(|_| too_long(context, len, i32::MAX as usize))?;
        out.put_i32(v);
    }
    Ok(())
}

fn put_string(out: &mut BytesMut, flexible: bool, s: &str, context: &'static str) -> Result<()> {
    if flexible {
        put_len(out, true, s.len(), context)?;
    } else {
        let v = i16::try_from(s.len()).map_err(|_| too_long(context, s.len(), i16::MAX as usize))?;
        out.put_i16(v);
    }
    out.put_slice(s.as_bytes());
    Ok(())
}

/// Encodes a whole Produce request frame at `version` (v3..=v12): size
/// prefix, request header, body. Each batch goes into the frame as its own
/// part, uncopied.
#[allow(clippy::too_many_arguments)]
pub fn encode_produce_request(
    correlation_id: i32,
    client_id: Option<&str>,
    version: i16,
    transactional_id: Option<&str>,
    acks: i16,
    timeout_ms: i32,
    topics: &[ProduceTopic<'_>],
) -> Result<FrameParts> {
    if !(PRODUCE_REQUEST_MIN_VERSION..=PRODUCE_REQUEST_MAX_VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion {
            api: "Produce",
            version,
            min: PRODUCE_REQUEST_MIN_VERSION,
            max: PRODUCE_REQUEST_MAX_VERSION,
        });
    }
    let flexible = version >= 9;
    let names = topics
        .iter()
        .fold(0usize, |n, t| n.saturating_add(t.name.len()).saturating_add(16));
    let partitions: usize = topics.iter().map(|t| t.partitions.len()).sum();
    let mut skeleton = BytesMut::with_capacity(
        client_id
            .map_or(0, str::len)
            .saturating_add(names)
            .saturating_add(partitions.saturating_mul(16))
            .saturating_add(64),
    );
    // Where each batch goes: after this many bytes of the skeleton.
    let mut batches: Vec<(usize, &Bytes)> = Vec::with_capacity(partitions);
    let mut batch_bytes = 0usize;
    skeleton.put_i32(0); // patched below
    put_request_header(&mut skeleton, ApiKey::Produce, version, correlation_id, client_id)?;
    match transactional_id {
        None if flexible => put_unsigned_varint(&mut skeleton, 0),
        None => skeleton.put_i16(-1),
        Some(id) => put_string(&mut skeleton, flexible, id, "transactional_id")?,
    }
    skeleton.put_i16(acks);
    skeleton.put_i32(timeout_ms);
    put_len(&mut skeleton, flexible, topics.len(), "topic_data")?;
    for topic in topics {
        put_string(&mut skeleton, flexible, topic.name, "topic name")?;
        put_len(&mut skeleton, flexible, topic.partitions.len(), "partition_data")?;
        for (index, records) in &topic.partitions {
            skeleton.put_i32(*index);
            put_len(&mut skeleton, flexible, records.len(), "records")?;
            batches.push((skeleton.len(), records));
            batch_bytes = batch_bytes.saturating_add(records.len());
            if flexible {
                skeleton.put_u8(0); // partition tagged fields
            }
        }
        if flexible {
            skeleton.put_u8(0); // topic tagged fields
        }
    }
    if flexible {
        skeleton.put_u8(0); // request tagged fields
    }
    let len = skeleton.len().saturating_add(batch_bytes);
    let size = len.saturating_sub(4);
    let size = i32::try_from(size).map_err(|_| Error::FrameTooLarge {
        size,
        max: i32::MAX as usize,
    })?;
    if let Some(prefix) = skeleton.first_chunk_mut::<4>() {
        *prefix = size.to_be_bytes();
    }
    let skeleton = skeleton.freeze();
    let mut parts = Vec::with_capacity(batches.len().saturating_mul(2).saturating_add(1));
    let mut from = 0;
    for (at, records) in batches {
        if at > from {
            parts.push(skeleton.slice(from..at));
        }
        if !records.is_empty() {
            parts.push(records.clone());
        }
        from = at;
    }
    if skeleton.len() > from {
        parts.push(skeleton.slice(from..));
    }
    Ok(FrameParts { parts, len })
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::frame::encode_request;

    fn theirs(
        version: i16,
        client_id: Option<&str>,
        txn: Option<&str>,
        acks: i16,
        topics: &[ProduceTopic<'_>],
    ) -> Bytes {
        let mut request = ProduceRequest::default();
        request.transactional_id = txn.map(|t| TransactionalId(StrBytes::from_string(t.to_owned())));
        request.acks = acks;
        request.timeout_ms = 30_000;
        request.topic_data = topics
            .iter()
            .map(|t| {
                let mut topic = TopicProduceData::default();
                topic.name = TopicName(StrBytes::from_string(t.name.to_owned()));
                topic.partition_data = t
                    .partitions
                    .iter()
                    .map(|(i, b)| {
                        let mut p = PartitionProduceData::default();
                        p.index = *i;
                        p.records = Some(b.clone());
                        p
                    })
                    .collect();
                topic
            })
            .collect();
        let mut out = BytesMut::new();
        encode_request(&mut out, 77, client_id, version, &request).expect("kafka-protocol encodes it");
        out.freeze()
    }

    fn batch(n: usize, seed: u8) -> Bytes {
        Bytes::from(
            (0..n)
                .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
                .collect::<Vec<u8>>(),
        )
    }

    #[test]
    fn every_version_is_byte_for_byte_what_kafka_protocol_writes() {
        let long_name = "t".repeat(200);
        let shapes: Vec<Vec<ProduceTopic<'_>>> = vec![
            vec![],
            vec![ProduceTopic {
                name: "events",
                partitions: vec![(0, batch(300, 1))],
            }],
            vec![
                ProduceTopic {
                    name: "events",
                    partitions: vec![(0, batch(70, 2)), (3, batch(200, 3)), (7, Bytes::new())],
                },
                ProduceTopic {
                    name: &long_name,
                    partitions: vec![(1, batch(129, 4))],
                },
                ProduceTopic {
                    name: "empty",
                    partitions: vec![],
                },
            ],
        ];
        let mut checked = 0;
        for version in PRODUCE_REQUEST_MIN_VERSION..=PRODUCE_REQUEST_MAX_VERSION {
            for topics in &shapes {
                for (client_id, txn, acks) in [
                    (Some("clink"), None, -1),
                    (None, Some("txn-1"), 1),
                    (Some(""), Some(""), 0),
                ] {
                    let ours = encode_produce_request(77, client_id, version, txn, acks, 30_000, topics).unwrap();
                    let want = theirs(version, client_id, txn, acks, topics);
                    assert_eq!(ours.len(), want.len(), "v{version}");
                    assert_eq!(ours.to_bytes(), want, "v{version} {client_id:?} {txn:?}");
                    assert!(ours.parts().iter().all(|p| !p.is_empty()));
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 10 * 3 * 3);
    }

    #[test]
    fn batches_are_parts_of_their_own_not_copies() {
        let b0 = batch(1000, 5);
        let b1 = batch(2000, 6);
        let topics = [ProduceTopic {
            name: "events",
            partitions: vec![(0, b0.clone()), (1, b1.clone())],
        }];
        for version in [3, 12] {
            let frame = encode_produce_request(1, Some("c"), version, None, -1, 1000, &topics).unwrap();
            let shared: Vec<bool> = frame
                .parts()
                .iter()
                .map(|p| p.as_ptr() == b0.as_ptr() || p.as_ptr() == b1.as_ptr())
                .collect();
            assert_eq!(shared.iter().filter(|s| **s).count(), 2, "v{version}: {shared:?}");
        }
    }

    #[test]
    fn versions_outside_the_range_and_overlong_names_are_refused() {
        for version in [2, 13] {
            let e = encode_produce_request(1, None, version, None, 1, 1, &[]).unwrap_err();
            assert!(
                matches!(e, Error::UnsupportedVersion { version: v, .. } if v == version),
                "{e}"
            );
        }
        let name = "n".repeat(40_000);
        let topics = [ProduceTopic {
            name: &name,
            partitions: vec![],
        }];
        let e = encode_produce_request(1, None, 3, None, 1, 1, &topics).unwrap_err();
        assert!(e.to_string().contains("topic name"), "{e}");
        // A flexible version takes it (compact lengths).
        assert!(encode_produce_request(1, None, 9, None, 1, 1, &topics).is_ok());
    }
}
