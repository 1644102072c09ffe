//! The consumer protocol's embedded bytes: `ConsumerProtocolSubscription`
//! (a JoinGroup protocol's `metadata`) and `ConsumerProtocolAssignment` (a
//! SyncGroup `assignment`), v0..=v3.
//!
//! Layout, as the Java client writes them (`ConsumerProtocol.serialize*`,
//! `MessageUtil.toVersionPrefixedByteBuffer`): an `int16` version, then the
//! struct in the classic (non-flexible) encoding:
//!
//! ```text
//! Subscription: version i16
//!               topics             [STRING]          v0+
//!               user_data          nullable BYTES    v0+
//!               owned_partitions   [topic STRING,    v1+
//!                                   partitions [INT32]]
//!               generation_id      INT32             v2+ (-1 absent)
//!               rack_id            nullable STRING   v3+
//! Assignment:   version i16
//!               assigned_partitions [topic STRING, partitions [INT32]]
//!               user_data           nullable BYTES
//! ```
//!
//! These bytes are written by other group members (the subscriptions the
//! leader reads) and relayed by the broker (the assignment a member reads):
//! they are decoded as hostile input with [`crate::codec::Reader`], every
//! length bounded by the bytes that follow it before anything is
//! allocated. `kafka-protocol`'s own `Decodable` for these types reserves
//! the claimed array length, so it is not used; its types and encoders are.
//!
//! Compatibility rules, the Java client's (`ConsumerProtocol.deserialize*`):
//! a version above 3 is read as v3 and what follows is ignored (newer
//! versions only append fields); a negative version is an error; bytes after
//! a complete struct are ignored. One leniency of our own: an empty
//! assignment (zero bytes, what the broker relays to a member the leader
//! gave nothing) is the empty assignment.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::consumer_protocol_subscription::{
    ConsumerProtocolSubscription, TopicPartition as OwnedTopic,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::Encodable;

use crate::codec::Reader;
use crate::error::{Error, Result};

/// The newest ConsumerProtocol version we read and write (Kafka 3.x/4.x).
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

fn version(r: &mut Reader<'_>, context: &'static str) -> Result<i16> {
    let v = r.i16(context)?;
    if v < 0 {
        return Err(Error::Invalid {
            context,
            message: format!("negative version {v}"),
        });
    }
    Ok(v.min(CONSUMER_PROTOCOL_VERSION))
}

/// Decodes a member's subscription (a JoinGroup protocol's metadata).
/// Returns the version it was written with (capped at 3) and the value.
pub fn decode_subscription(bytes: &Bytes) -> Result<(i16, ConsumerProtocolSubscription)> {
    let mut r = Reader::new(bytes);
    let v = version(&mut r, "ConsumerProtocolSubscription.version")?;
    let mut out = ConsumerProtocolSubscription::default();
    out.topics = r.array(false, "ConsumerProtocolSubscription.topics", |r| {
        r.string(false, "ConsumerProtocolSubscription.topics[]")
    })?;
    out.user_data = r.nullable_bytes(false, "ConsumerProtocolSubscription.user_data")?;
    if v >= 1 {
        out.owned_partitions = r.array(false, "ConsumerProtocolSubscription.owned_partitions", |r| {
            let mut t = OwnedTopic::default();
            t.topic = TopicName(r.string(false, "ConsumerProtocolSubscription.owned_partitions.topic")?);
            t.partitions = r.array(false, "ConsumerProtocolSubscription.owned_partitions.partitions", |r| {
                r.i32("ConsumerProtocolSubscription.owned_partitions.partitions[]")
            })?;
            Ok(t)
        })?;
    }
    if v >= 2 {
        out.generation_id = r.i32("ConsumerProtocolSubscription.generation_id")?;
    }
    if v >= 3 {
        out.rack_id = r.nullable_string(false, "ConsumerProtocolSubscription.rack_id")?;
    }
    Ok((v, out))
}

/// Decodes an assignment (a SyncGroup response's `assignment`, or one the
/// leader wrote). Zero bytes are the empty assignment.
pub fn decode_assignment(bytes: &Bytes) -> Result<(i16, ConsumerProtocolAssignment)> {
    if bytes.is_empty() {
        return Ok((CONSUMER_PROTOCOL_VERSION, ConsumerProtocolAssignment::default()));
    }
    let mut r = Reader::new(bytes);
    let v = version(&mut r, "ConsumerProtocolAssignment.version")?;
    let mut out = ConsumerProtocolAssignment::default();
    out.assigned_partitions = r.array(false, "ConsumerProtocolAssignment.assigned_partitions", |r| {
        let mut t = AssignedTopic::default();
        t.topic = TopicName(r.string(false, "ConsumerProtocolAssignment.assigned_partitions.topic")?);
        t.partitions = r.array(
            false,
            "ConsumerProtocolAssignment.assigned_partitions.partitions",
            |r| r.i32("ConsumerProtocolAssignment.assigned_partitions.partitions[]"),
        )?;
        Ok(t)
    })?;
    out.user_data = r.nullable_bytes(false, "ConsumerProtocolAssignment.user_data")?;
    Ok((v, out))
}

fn encode_prefixed<T: Encodable>(value: &T, version: i16, api: &'static str) -> Result<Bytes> {
    if !(0..=CONSUMER_PROTOCOL_VERSION).contains(&version) {
        return Err(Error::UnsupportedVersion {
            api,
            version,
            min: 0,
            max: CONSUMER_PROTOCOL_VERSION,
        });
    }
    let mut out = BytesMut::new();
    out.put_i16(version);
    value.encode(&mut out, version).map_err(|e| Error::Encode {
        api,
        version,
        message: e.to_string(),
    })?;
    Ok(out.freeze())
}

/// Encodes a subscription with its version prefix, as the Java client does.
pub fn encode_subscription(s: &ConsumerProtocolSubscription, version: i16) -> Result<Bytes> {
    encode_prefixed(s, version, "ConsumerProtocolSubscription")
}

/// Encodes an assignment with its version prefix, as the Java client does.
pub fn encode_assignment(a: &ConsumerProtocolAssignment, version: i16) -> Result<Bytes> {
    encode_prefixed(a, version, "ConsumerProtocolAssignment")
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    use super::*;

    fn s(x: &str) -> StrBytes {
        StrBytes::from_string(x.to_string())
    }

    fn sub_v3() -> ConsumerProtocolSubscription {
        let mut sub = ConsumerProtocolSubscription::default();
        sub.topics = vec![s("a"), s("bc")];
        sub.user_data = Some(Bytes::from_static(&[0, 0, 0, 7]));
        let mut t = OwnedTopic::default();
        t.topic = TopicName(s("a"));
        t.partitions = vec![0, 2];
        sub.owned_partitions = vec![t];
        sub.generation_id = 7;
        sub.rack_id = Some(s("r1"));
        sub
    }

    /// Written by hand from the schema (ConsumerProtocolSubscription.json),
    /// the bytes Java's `ConsumerProtocol.serializeSubscription` gives.
    fn golden_sub_v3() -> Vec<u8> {
        let mut b = Vec::new();
        b.put_i16(3); // version
        b.put_i32(2); // topics
        b.put_i16(1);
        b.put_slice(b"a");
        b.put_i16(2);
        b.put_slice(b"bc");
        b.put_i32(4); // user_data
        b.put_slice(&[0, 0, 0, 7]);
        b.put_i32(1); // owned_partitions
        b.put_i16(1);
        b.put_slice(b"a");
        b.put_i32(2);
        b.put_i32(0);
        b.put_i32(2);
        b.put_i32(7); // generation_id
        b.put_i16(2); // rack_id
        b.put_slice(b"r1");
        b
    }

    #[test]
    fn subscription_golden_v3() {
        let bytes = encode_subscription(&sub_v3(), 3).unwrap();
        assert_eq!(bytes.as_ref(), golden_sub_v3().as_slice());
        let (v, back) = decode_subscription(&bytes).unwrap();
        assert_eq!(v, 3);
        assert_eq!(back, sub_v3());
    }

    #[test]
    fn subscription_golden_v0_and_null_user_data() {
        let mut sub = ConsumerProtocolSubscription::default();
        sub.topics = vec![s("t")];
        let bytes = encode_subscription(&sub, 0).unwrap();
        assert_eq!(bytes.as_ref(), &[0, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff]);
        let (v, back) = decode_subscription(&bytes).unwrap();
        assert_eq!((v, back), (0, sub));
    }

    #[test]
    fn subscription_every_version_round_trips() {
        for v in 0..=3i16 {
            let mut sub = sub_v3();
            if v < 3 {
                sub.rack_id = None;
            }
            if v < 2 {
                sub.generation_id = -1;
            }
            if v < 1 {
                sub.owned_partitions.clear();
            }
            let bytes = encode_subscription(&sub, v).unwrap();
            assert_eq!(bytes.len(), golden_sub_v3().len() - [0, 4, 8, 27][3 - v as usize]);
            assert_eq!(decode_subscription(&bytes).unwrap(), (v, sub), "v{v}");
        }
    }

    #[test]
    fn newer_versions_read_as_v3_and_trailing_ignored() {
        let mut b = golden_sub_v3();
        b[1] = 9;
        b.extend_from_slice(b"future fields");
        let (v, back) = decode_subscription(&Bytes::from(b)).unwrap();
        assert_eq!((v, back), (3, sub_v3()));
    }

    fn golden_assignment() -> Vec<u8> {
        let mut b = Vec::new();
        b.put_i16(3);
        b.put_i32(2);
        b.put_i16(1);
        b.put_slice(b"a");
        b.put_i32(1);
        b.put_i32(5);
        b.put_i16(1);
        b.put_slice(b"b");
        b.put_i32(0);
        b.put_i32(-1); // user_data null
        b
    }

    fn assignment() -> ConsumerProtocolAssignment {
        let mut a = ConsumerProtocolAssignment::default();
        let mut t = AssignedTopic::default();
        t.topic = TopicName(s("a"));
        t.partitions = vec![5];
        let mut u = AssignedTopic::default();
        u.topic = TopicName(s("b"));
        a.assigned_partitions = vec![t, u];
        a
    }

    #[test]
    fn assignment_golden_every_version() {
        for v in 0..=3i16 {
            let bytes = encode_assignment(&assignment(), v).unwrap();
            let mut golden = golden_assignment();
            golden[1] = v as u8;
            assert_eq!(bytes.as_ref(), golden.as_slice());
            assert_eq!(decode_assignment(&bytes).unwrap(), (v, assignment()));
        }
        assert_eq!(
            decode_assignment(&Bytes::new()).unwrap().1,
            ConsumerProtocolAssignment::default()
        );
    }

    /// Written by kafka-clients 4.4.0's `ConsumerProtocol.serialize*`
    /// (`wire/testdata/group/Check.java`): the same bytes as the vectors
    /// above, written by hand from the schema.
    #[test]
    fn java_written_bytes() {
        let java_sub_v3 =
            "000300000002000161000262630000000400000007000000010001610000000200000000000000020000000700027231";
        assert_eq!(hex::encode(golden_sub_v3()), java_sub_v3);
        let java_sub_v0 = "000000000001000174ffffffff";
        let mut sub = ConsumerProtocolSubscription::default();
        sub.topics = vec![s("t")];
        assert_eq!(hex::encode(encode_subscription(&sub, 0).unwrap()), java_sub_v0);
        let java_assignment_v3 = "0003000000010001610000000100000005ffffffff";
        let (v, a) = decode_assignment(&Bytes::from(hex::decode(java_assignment_v3).unwrap())).unwrap();
        assert_eq!(v, 3);
        assert_eq!(a.assigned_partitions.len(), 1);
        assert_eq!(a.assigned_partitions[0].partitions, [5]);
        assert_eq!(hex::encode(encode_assignment(&a, 3).unwrap()), java_assignment_v3);
    }

    #[test]
    fn huge_lengths_and_garbage_are_typed_errors() {
        let huge = |prefix: &[u8]| {
            let mut b = prefix.to_vec();
            b.put_i32(i32::MAX);
            b.put_slice(&[1, 2, 3]);
            Bytes::from(b)
        };
        // topics count, user_data length, owned_partitions count
        assert!(matches!(
            decode_subscription(&huge(&[0, 3])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        assert!(matches!(
            decode_subscription(&huge(&[0, 3, 0, 0, 0, 0])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        assert!(matches!(
            decode_subscription(&huge(&[0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // partitions of an owned topic
        assert!(matches!(
            decode_subscription(&huge(&[
                0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, 0, 1, b'a'
            ])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // assignment: partitions count, topic string length, user data
        assert!(matches!(
            decode_assignment(&huge(&[0, 0])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        assert!(matches!(
            decode_assignment(&huge(&[0, 0, 0, 0, 0, 1, 0, 1, b'a'])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        assert!(matches!(
            decode_assignment(&huge(&[0, 0, 0, 0, 0, 0])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        assert!(matches!(
            decode_assignment(&Bytes::from_static(&[0, 0, 0, 0, 0, 1, 0x7f, 0xff])),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // negative version, a lone byte, invalid UTF-8, length below -1
        assert!(decode_subscription(&Bytes::from_static(&[0xff, 0xff, 0, 0, 0, 0])).is_err());
        assert!(decode_assignment(&Bytes::from_static(&[0])).is_err());
        assert!(matches!(
            decode_subscription(&Bytes::from_static(&[
                0, 0, 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff
            ])),
            Err(Error::InvalidUtf8 { .. })
        ));
        assert!(matches!(
            decode_subscription(&Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe])),
            Err(Error::NegativeLength { .. })
        ));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = Bytes::from(golden_sub_v3());
        for len in 0..full.len() {
            assert!(decode_subscription(&full.slice(..len)).is_err(), "prefix {len}");
        }
        let full = Bytes::from(golden_assignment());
        // Zero bytes are the empty assignment; every other prefix fails.
        for len in 1..full.len() {
            assert!(decode_assignment(&full.slice(..len)).is_err(), "prefix {len}");
        }
    }

    #[test]
    fn encode_refuses_unknown_versions() {
        assert!(matches!(
            encode_subscription(&sub_v3(), 4),
            Err(Error::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            encode_assignment(&assignment(), -1),
            Err(Error::UnsupportedVersion { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let b = Bytes::from(data);
            let _ = decode_subscription(&b);
            let _ = decode_assignment(&b);
        }

        #[test]
        fn mutated_never_panic(edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4)) {
            for mut frame in [golden_sub_v3(), golden_assignment()] {
                for (at, byte) in &edits {
                    let i = at % frame.len();
                    frame[i] = *byte;
                }
                let b = Bytes::from(frame);
                let _ = decode_subscription(&b);
                let _ = decode_assignment(&b);
            }
        }
    }
}
