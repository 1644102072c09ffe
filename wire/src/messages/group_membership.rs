//! The group membership responses: JoinGroup (API key 11, v2..=v9),
//! SyncGroup (14, v0..=v5), Heartbeat (12, v0..=v4), LeaveGroup (13,
//! v0..=v5) and ConsumerGroupHeartbeat (68, v0..=v1, KIP-848).
//!
//! Flexible from JoinGroup v6, SyncGroup v4, Heartbeat v4, LeaveGroup v4;
//! ConsumerGroupHeartbeat always. The members' subscription bytes a
//! JoinGroup carries and the assignment a SyncGroup carries are kept as
//! they came (slices of the frame) and decoded, as hostile input, by
//! `group::consumer_protocol`.
//! Schemas: <https://github.com/apache/kafka/tree/trunk/clients/src/main/resources/common/message>.

use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, ConsumerGroupHeartbeatResponse, TopicPartitions,
};
use kafka_protocol::messages::heartbeat_response::HeartbeatResponse;
use kafka_protocol::messages::join_group_response::{JoinGroupResponse, JoinGroupResponseMember};
use kafka_protocol::messages::leave_group_response::{LeaveGroupResponse, MemberResponse};
use kafka_protocol::messages::sync_group_response::SyncGroupResponse;

use super::{check_version as check, no_tags};
use crate::codec::{DecodeResponse, Reader};
use crate::error::{Error, Result};

impl DecodeResponse for JoinGroupResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("JoinGroup", version, 2, 9)?;
        let flexible = version >= 6;
        let mut out = JoinGroupResponse::default();
        out.throttle_time_ms = r.i32("JoinGroupResponse.throttle_time_ms")?;
        out.error_code = r.i16("JoinGroupResponse.error_code")?;
        out.generation_id = r.i32("JoinGroupResponse.generation_id")?;
        if version >= 7 {
            out.protocol_type = r.nullable_string(flexible, "JoinGroupResponse.protocol_type")?;
            out.protocol_name = r.nullable_string(flexible, "JoinGroupResponse.protocol_name")?;
        } else {
            out.protocol_name = Some(r.string(flexible, "JoinGroupResponse.protocol_name")?);
        }
        out.leader = r.string(flexible, "JoinGroupResponse.leader")?;
        if version >= 9 {
            out.skip_assignment = r.bool("JoinGroupResponse.skip_assignment")?;
        }
        out.member_id = r.string(flexible, "JoinGroupResponse.member_id")?;
        out.members = r.array(flexible, "JoinGroupResponse.members", |r| {
            let mut m = JoinGroupResponseMember::default();
            m.member_id = r.string(flexible, "JoinGroupResponseMember.member_id")?;
            if version >= 5 {
                m.group_instance_id = r.nullable_string(flexible, "JoinGroupResponseMember.group_instance_id")?;
            }
            m.metadata = r.bytes(flexible, "JoinGroupResponseMember.metadata")?;
            if flexible {
                m.unknown_tagged_fields = no_tags(r, "JoinGroupResponseMember.tagged_fields")?;
            }
            Ok(m)
        })?;
        if flexible {
            out.unknown_tagged_fields = no_tags(r, "JoinGroupResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

impl DecodeResponse for SyncGroupResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("SyncGroup", version, 0, 5)?;
        let flexible = version >= 4;
        let mut out = SyncGroupResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32("SyncGroupResponse.throttle_time_ms")?;
        }
        out.error_code = r.i16("SyncGroupResponse.error_code")?;
        if version >= 5 {
            out.protocol_type = r.nullable_string(flexible, "SyncGroupResponse.protocol_type")?;
            out.protocol_name = r.nullable_string(flexible, "SyncGroupResponse.protocol_name")?;
        }
        out.assignment = r.bytes(flexible, "SyncGroupResponse.assignment")?;
        if flexible {
            out.unknown_tagged_fields = no_tags(r, "SyncGroupResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

impl DecodeResponse for HeartbeatResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("Heartbeat", version, 0, 4)?;
        let mut out = HeartbeatResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32("HeartbeatResponse.throttle_time_ms")?;
        }
        out.error_code = r.i16("HeartbeatResponse.error_code")?;
        if version >= 4 {
            out.unknown_tagged_fields = no_tags(r, "HeartbeatResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

impl DecodeResponse for LeaveGroupResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("LeaveGroup", version, 0, 5)?;
        let flexible = version >= 4;
        let mut out = LeaveGroupResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32("LeaveGroupResponse.throttle_time_ms")?;
        }
        out.error_code = r.i16("LeaveGroupResponse.error_code")?;
        if version >= 3 {
            out.members = r.array(flexible, "LeaveGroupResponse.members", |r| {
                let mut m = MemberResponse::default();
                m.member_id = r.string(flexible, "MemberResponse.member_id")?;
                m.group_instance_id = r.nullable_string(flexible, "MemberResponse.group_instance_id")?;
                m.error_code = r.i16("MemberResponse.error_code")?;
                if flexible {
                    m.unknown_tagged_fields = no_tags(r, "MemberResponse.tagged_fields")?;
                }
                Ok(m)
            })?;
        }
        if flexible {
            out.unknown_tagged_fields = no_tags(r, "LeaveGroupResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

impl DecodeResponse for ConsumerGroupHeartbeatResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("ConsumerGroupHeartbeat", version, 0, 1)?;
        let mut out = ConsumerGroupHeartbeatResponse::default();
        out.throttle_time_ms = r.i32("ConsumerGroupHeartbeatResponse.throttle_time_ms")?;
        out.error_code = r.i16("ConsumerGroupHeartbeatResponse.error_code")?;
        out.error_message = r.nullable_string(true, "ConsumerGroupHeartbeatResponse.error_message")?;
        out.member_id = r.nullable_string(true, "ConsumerGroupHeartbeatResponse.member_id")?;
        out.member_epoch = r.i32("ConsumerGroupHeartbeatResponse.member_epoch")?;
        out.heartbeat_interval_ms = r.i32("ConsumerGroupHeartbeatResponse.heartbeat_interval_ms")?;
        // A nullable struct: -1 absent, 1 present.
        out.assignment = match r.i8("ConsumerGroupHeartbeatResponse.assignment")? {
            1 => {
                let mut a = Assignment::default();
                a.topic_partitions = r.array(true, "Assignment.topic_partitions", |r| {
                    let mut t = TopicPartitions::default();
                    t.topic_id = r.uuid("TopicPartitions.topic_id")?;
                    t.partitions = r.array(true, "TopicPartitions.partitions", |r| {
                        r.i32("TopicPartitions.partitions[]")
                    })?;
                    t.unknown_tagged_fields = no_tags(r, "TopicPartitions.tagged_fields")?;
                    Ok(t)
                })?;
                a.unknown_tagged_fields = no_tags(r, "Assignment.tagged_fields")?;
                Some(a)
            }
            -1 => None,
            other => {
                return Err(Error::Invalid {
                    context: "ConsumerGroupHeartbeatResponse.assignment",
                    message: format!("nullable struct marker {other}"),
                })
            }
        };
        out.unknown_tagged_fields = no_tags(r, "ConsumerGroupHeartbeatResponse.tagged_fields")?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn encode<T: Encodable>(v: &T, version: i16) -> Bytes {
        let mut b = BytesMut::new();
        v.encode(&mut b, version).expect("kafka-protocol encodes the sample");
        b.freeze()
    }

    fn decode<T: DecodeResponse>(b: &Bytes, version: i16) -> Result<T> {
        let mut r = Reader::new(b);
        let v = T::decode_response(&mut r, version)?;
        r.finish("response")?;
        Ok(v)
    }

    fn tags(flexible: bool) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(5, Bytes::from_static(b"\x01"));
        }
        m
    }

    fn join(version: i16) -> JoinGroupResponse {
        let flexible = version >= 6;
        let mut v = JoinGroupResponse::default();
        v.throttle_time_ms = 3;
        v.error_code = 0;
        v.generation_id = 7;
        if version >= 7 {
            v.protocol_type = Some(StrBytes::from_static_str("consumer"));
        }
        v.protocol_name = Some(StrBytes::from_static_str("range"));
        v.leader = StrBytes::from_static_str("m-1");
        v.skip_assignment = version >= 9;
        v.member_id = StrBytes::from_static_str("m-1");
        v.members = (0..2)
            .map(|i| {
                let mut m = JoinGroupResponseMember::default();
                m.member_id = StrBytes::from_string(format!("m-{i}"));
                if version >= 5 && i == 1 {
                    m.group_instance_id = Some(StrBytes::from_static_str("inst"));
                }
                m.metadata = Bytes::from_static(&[0, 3, 0, 0, 0, 0]);
                m.unknown_tagged_fields = tags(flexible);
                m
            })
            .collect();
        v.unknown_tagged_fields = tags(flexible);
        v
    }

    fn sync(version: i16) -> SyncGroupResponse {
        let mut v = SyncGroupResponse::default();
        if version >= 1 {
            v.throttle_time_ms = 1;
        }
        v.error_code = 27;
        if version >= 5 {
            v.protocol_type = Some(StrBytes::from_static_str("consumer"));
            v.protocol_name = None;
        }
        v.assignment = Bytes::from_static(&[0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        v.unknown_tagged_fields = tags(version >= 4);
        v
    }

    fn heartbeat(version: i16) -> HeartbeatResponse {
        let mut v = HeartbeatResponse::default();
        if version >= 1 {
            v.throttle_time_ms = 9;
        }
        v.error_code = 22;
        v.unknown_tagged_fields = tags(version >= 4);
        v
    }

    fn leave(version: i16) -> LeaveGroupResponse {
        let flexible = version >= 4;
        let mut v = LeaveGroupResponse::default();
        if version >= 1 {
            v.throttle_time_ms = 9;
        }
        if version >= 3 {
            let mut m = MemberResponse::default();
            m.member_id = StrBytes::from_static_str("m");
            m.group_instance_id = Some(StrBytes::from_static_str("i"));
            m.error_code = 25;
            m.unknown_tagged_fields = tags(flexible);
            v.members = vec![m];
        }
        v.unknown_tagged_fields = tags(flexible);
        v
    }

    fn cgh(with_assignment: bool) -> ConsumerGroupHeartbeatResponse {
        let mut v = ConsumerGroupHeartbeatResponse::default();
        v.error_message = Some(StrBytes::from_static_str("msg"));
        v.member_id = Some(StrBytes::from_static_str("m"));
        v.member_epoch = 4;
        v.heartbeat_interval_ms = 5000;
        if with_assignment {
            let mut a = Assignment::default();
            let mut t = TopicPartitions::default();
            t.topic_id = uuid::Uuid::from_u128(99);
            t.partitions = vec![0, 5];
            t.unknown_tagged_fields = tags(true);
            a.topic_partitions = vec![t];
            v.assignment = Some(a);
        }
        v.unknown_tagged_fields = tags(true);
        v
    }

    /// Every sample, encoded by kafka-protocol, with its version.
    fn samples() -> Vec<(&'static str, i16, Bytes)> {
        let mut out = Vec::new();
        for v in 2..=9 {
            out.push(("join", v, encode(&join(v), v)));
        }
        for v in 0..=5 {
            out.push(("sync", v, encode(&sync(v), v)));
            out.push(("leave", v, encode(&leave(v), v)));
        }
        for v in 0..=4 {
            out.push(("heartbeat", v, encode(&heartbeat(v), v)));
        }
        for v in 0..=1 {
            out.push(("cgh", v, encode(&cgh(true), v)));
            out.push(("cgh-none", v, encode(&cgh(false), v)));
        }
        out
    }

    fn decode_any(kind: &str, b: &Bytes, v: i16) -> Result<()> {
        match kind {
            "join" => decode::<JoinGroupResponse>(b, v).map(|_| ()),
            "sync" => decode::<SyncGroupResponse>(b, v).map(|_| ()),
            "leave" => decode::<LeaveGroupResponse>(b, v).map(|_| ()),
            "heartbeat" => decode::<HeartbeatResponse>(b, v).map(|_| ()),
            _ => decode::<ConsumerGroupHeartbeatResponse>(b, v).map(|_| ()),
        }
    }

    #[test]
    fn round_trip_every_version() {
        for v in 2..=9 {
            assert_eq!(
                decode::<JoinGroupResponse>(&encode(&join(v), v), v).unwrap(),
                join(v),
                "v{v}"
            );
        }
        for v in 0..=5 {
            assert_eq!(
                decode::<SyncGroupResponse>(&encode(&sync(v), v), v).unwrap(),
                sync(v),
                "v{v}"
            );
            assert_eq!(
                decode::<LeaveGroupResponse>(&encode(&leave(v), v), v).unwrap(),
                leave(v),
                "v{v}"
            );
        }
        for v in 0..=4 {
            assert_eq!(
                decode::<HeartbeatResponse>(&encode(&heartbeat(v), v), v).unwrap(),
                heartbeat(v)
            );
        }
        for v in 0..=1 {
            for a in [true, false] {
                assert_eq!(
                    decode::<ConsumerGroupHeartbeatResponse>(&encode(&cgh(a), v), v).unwrap(),
                    cgh(a)
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for (kind, v, full) in samples() {
            for len in 0..full.len() {
                assert!(
                    decode_any(kind, &full.slice(..len), v).is_err(),
                    "{kind} v{v} prefix {len}"
                );
            }
        }
    }

    #[test]
    fn huge_lengths_are_refused() {
        // JoinGroup v5: throttle, error, generation, protocol name, leader,
        // member id, then a members count of i32::MAX.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_i32(1);
        for s in ["r", "m", "m"] {
            b.put_i16(1);
            b.put_slice(s.as_bytes());
        }
        b.put_i32(i32::MAX);
        assert!(matches!(
            decode::<JoinGroupResponse>(&b.freeze(), 5),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // SyncGroup v3: an assignment of i32::MAX bytes.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_i32(i32::MAX);
        assert!(matches!(
            decode::<SyncGroupResponse>(&b.freeze(), 3),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // ConsumerGroupHeartbeat: a compact partitions count of u32::MAX - 1.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_u8(0);
        b.put_u8(0);
        b.put_i32(1);
        b.put_i32(1);
        b.put_i8(1);
        b.put_u8(2);
        b.put_u128(1);
        b.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            decode::<ConsumerGroupHeartbeatResponse>(&b.freeze(), 0),
            Err(Error::LengthOutOfBounds { .. })
        ));
        // LeaveGroup v3: members i32::MAX.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_i32(i32::MAX);
        assert!(matches!(
            decode::<LeaveGroupResponse>(&b.freeze(), 3),
            Err(Error::LengthOutOfBounds { .. })
        ));
    }

    #[test]
    fn unsupported_versions_are_typed() {
        let b = Bytes::from_static(&[0; 64]);
        assert!(matches!(
            decode::<JoinGroupResponse>(&b, 1),
            Err(Error::UnsupportedVersion { api: "JoinGroup", .. })
        ));
        assert!(matches!(
            decode::<SyncGroupResponse>(&b, 6),
            Err(Error::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            decode::<ConsumerGroupHeartbeatResponse>(&b, 2),
            Err(Error::UnsupportedVersion { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn mutated_frames_never_panic(
            pick in any::<usize>(),
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ) {
            let all = samples();
            let (kind, v, full) = &all[pick % all.len()];
            let mut frame = full.to_vec();
            for (at, byte) in edits {
                let i = at % frame.len();
                frame[i] = byte;
            }
            let _ = decode_any(kind, &Bytes::from(frame), *v);
        }
    }
}
