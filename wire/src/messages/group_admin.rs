//! The group administration responses: ListGroups (API key 16, v0..=v5),
//! DescribeGroups (15, v0..=v6), DeleteGroups (42, v0..=v2) and
//! ConsumerGroupDescribe (69, v0..=v1, KIP-848).
//!
//! Flexible from ListGroups v3, DescribeGroups v5, DeleteGroups v2;
//! ConsumerGroupDescribe always. ListGroups v4 adds each group's state
//! (KIP-518), v5 its type (KIP-848). A classic group's members' subscription
//! and assignment bytes are kept as they came (slices of the frame); the
//! caller decodes them, as hostile input, with `group::consumer_protocol`.
//! Schemas: <https://github.com/apache/kafka/tree/trunk/clients/src/main/resources/common/message>.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, ConsumerGroupDescribeResponse, DescribedGroup as ConsumerDescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::delete_groups_response::{DeletableGroupResult, DeleteGroupsResponse};
use kafka_protocol::messages::describe_groups_response::{
    DescribeGroupsResponse, DescribedGroup, DescribedGroupMember,
};
use kafka_protocol::messages::list_groups_response::{ListGroupsResponse, ListedGroup};
use kafka_protocol::messages::TopicName;

use super::{check_version as check, no_tags};
use crate::codec::{DecodeResponse, Reader};
use crate::error::Result;

impl DecodeResponse for ListGroupsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("ListGroups", version, 0, 5)?;
        let flexible = version >= 3;
        let mut out = ListGroupsResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32("ListGroupsResponse.throttle_time_ms")?;
        }
        out.error_code = r.i16("ListGroupsResponse.error_code")?;
        out.groups = r.array(flexible, "ListGroupsResponse.groups", |r| {
            let mut g = ListedGroup::default();
            g.group_id = r.string(flexible, "ListGroupsResponse.groups.group_id")?.into();
            g.protocol_type = r.string(flexible, "ListGroupsResponse.groups.protocol_type")?;
            if version >= 4 {
                g.group_state = r.string(true, "ListGroupsResponse.groups.group_state")?;
            }
            if version >= 5 {
                g.group_type = r.string(true, "ListGroupsResponse.groups.group_type")?;
            }
            if flexible {
                g.unknown_tagged_fields = no_tags(r, "ListGroupsResponse.groups.tagged_fields")?;
            }
            Ok(g)
        })?;
        if flexible {
            out.unknown_tagged_fields = no_tags(r, "ListGroupsResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

impl DecodeResponse for DescribeGroupsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("DescribeGroups", version, 0, 6)?;
        let flexible = version >= 5;
        let mut out = DescribeGroupsResponse::default();
        if version >= 1 {
            out.throttle_time_ms = r.i32("DescribeGroupsResponse.throttle_time_ms")?;
        }
        out.groups = r.array(flexible, "DescribeGroupsResponse.groups", |r| {
            described_group(r, version)
        })?;
        if flexible {
            out.unknown_tagged_fields = no_tags(r, "DescribeGroupsResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

fn described_group(r: &mut Reader<'_>, version: i16) -> Result<DescribedGroup> {
    let flexible = version >= 5;
    let mut g = DescribedGroup::default();
    g.error_code = r.i16("DescribeGroupsResponse.groups.error_code")?;
    if version >= 6 {
        g.error_message = r.nullable_string(true, "DescribeGroupsResponse.groups.error_message")?;
    }
    g.group_id = r.string(flexible, "DescribeGroupsResponse.groups.group_id")?.into();
    g.group_state = r.string(flexible, "DescribeGroupsResponse.groups.group_state")?;
    g.protocol_type = r.string(flexible, "DescribeGroupsResponse.groups.protocol_type")?;
    g.protocol_data = r.string(flexible, "DescribeGroupsResponse.groups.protocol_data")?;
    g.members = r.array(flexible, "DescribeGroupsResponse.groups.members", |r| {
        let mut m = DescribedGroupMember::default();
        m.member_id = r.string(flexible, "DescribeGroupsResponse.members.member_id")?;
        if version >= 4 {
            m.group_instance_id = r.nullable_string(flexible, "DescribeGroupsResponse.members.group_instance_id")?;
        }
        m.client_id = r.string(flexible, "DescribeGroupsResponse.members.client_id")?;
        m.client_host = r.string(flexible, "DescribeGroupsResponse.members.client_host")?;
        m.member_metadata = r.bytes(flexible, "DescribeGroupsResponse.members.member_metadata")?;
        m.member_assignment = r.bytes(flexible, "DescribeGroupsResponse.members.member_assignment")?;
        if flexible {
            m.unknown_tagged_fields = no_tags(r, "DescribeGroupsResponse.members.tagged_fields")?;
        }
        Ok(m)
    })?;
    if version >= 3 {
        g.authorized_operations = r.i32("DescribeGroupsResponse.groups.authorized_operations")?;
    }
    if flexible {
        g.unknown_tagged_fields = no_tags(r, "DescribeGroupsResponse.groups.tagged_fields")?;
    }
    Ok(g)
}

impl DecodeResponse for DeleteGroupsResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("DeleteGroups", version, 0, 2)?;
        let flexible = version >= 2;
        let mut out = DeleteGroupsResponse::default();
        out.throttle_time_ms = r.i32("DeleteGroupsResponse.throttle_time_ms")?;
        out.results = r.array(flexible, "DeleteGroupsResponse.results", |r| {
            let mut g = DeletableGroupResult::default();
            g.group_id = r.string(flexible, "DeleteGroupsResponse.results.group_id")?.into();
            g.error_code = r.i16("DeleteGroupsResponse.results.error_code")?;
            if flexible {
                g.unknown_tagged_fields = no_tags(r, "DeleteGroupsResponse.results.tagged_fields")?;
            }
            Ok(g)
        })?;
        if flexible {
            out.unknown_tagged_fields = no_tags(r, "DeleteGroupsResponse.tagged_fields")?;
        }
        Ok(out)
    }
}

impl DecodeResponse for ConsumerGroupDescribeResponse {
    fn throttle_time_ms(&self) -> i32 {
        self.throttle_time_ms
    }

    fn decode_response(r: &mut Reader<'_>, version: i16) -> Result<Self> {
        check("ConsumerGroupDescribe", version, 0, 1)?;
        let mut out = ConsumerGroupDescribeResponse::default();
        out.throttle_time_ms = r.i32("ConsumerGroupDescribeResponse.throttle_time_ms")?;
        out.groups = r.array(true, "ConsumerGroupDescribeResponse.groups", |r| {
            consumer_group(r, version)
        })?;
        out.unknown_tagged_fields = no_tags(r, "ConsumerGroupDescribeResponse.tagged_fields")?;
        Ok(out)
    }
}

fn consumer_group(r: &mut Reader<'_>, version: i16) -> Result<ConsumerDescribedGroup> {
    let mut g = ConsumerDescribedGroup::default();
    g.error_code = r.i16("ConsumerGroupDescribeResponse.groups.error_code")?;
    g.error_message = r.nullable_string(true, "ConsumerGroupDescribeResponse.groups.error_message")?;
    g.group_id = r.string(true, "ConsumerGroupDescribeResponse.groups.group_id")?.into();
    g.group_state = r.string(true, "ConsumerGroupDescribeResponse.groups.group_state")?;
    g.group_epoch = r.i32("ConsumerGroupDescribeResponse.groups.group_epoch")?;
    g.assignment_epoch = r.i32("ConsumerGroupDescribeResponse.groups.assignment_epoch")?;
    g.assignor_name = r.string(true, "ConsumerGroupDescribeResponse.groups.assignor_name")?;
    g.members = r.array(true, "ConsumerGroupDescribeResponse.groups.members", |r| {
        let mut m = Member::default();
        m.member_id = r.string(true, "ConsumerGroupDescribeResponse.members.member_id")?;
        m.instance_id = r.nullable_string(true, "ConsumerGroupDescribeResponse.members.instance_id")?;
        m.rack_id = r.nullable_string(true, "ConsumerGroupDescribeResponse.members.rack_id")?;
        m.member_epoch = r.i32("ConsumerGroupDescribeResponse.members.member_epoch")?;
        m.client_id = r.string(true, "ConsumerGroupDescribeResponse.members.client_id")?;
        m.client_host = r.string(true, "ConsumerGroupDescribeResponse.members.client_host")?;
        m.subscribed_topic_names = r.array(
            true,
            "ConsumerGroupDescribeResponse.members.subscribed_topic_names",
            |r| {
                r.string(true, "ConsumerGroupDescribeResponse.members.subscribed_topic_names[]")
                    .map(TopicName)
            },
        )?;
        m.subscribed_topic_regex =
            r.nullable_string(true, "ConsumerGroupDescribeResponse.members.subscribed_topic_regex")?;
        m.assignment = assignment(r)?;
        m.target_assignment = assignment(r)?;
        if version >= 1 {
            m.member_type = r.i8("ConsumerGroupDescribeResponse.members.member_type")?;
        }
        m.unknown_tagged_fields = no_tags(r, "ConsumerGroupDescribeResponse.members.tagged_fields")?;
        Ok(m)
    })?;
    g.authorized_operations = r.i32("ConsumerGroupDescribeResponse.groups.authorized_operations")?;
    g.unknown_tagged_fields = no_tags(r, "ConsumerGroupDescribeResponse.groups.tagged_fields")?;
    Ok(g)
}

fn assignment(r: &mut Reader<'_>) -> Result<Assignment> {
    let mut a = Assignment::default();
    a.topic_partitions = r.array(true, "ConsumerGroupDescribeResponse.assignment.topic_partitions", |r| {
        let mut t = TopicPartitions::default();
        t.topic_id = r.uuid("ConsumerGroupDescribeResponse.assignment.topic_id")?;
        t.topic_name = TopicName(r.string(true, "ConsumerGroupDescribeResponse.assignment.topic_name")?);
        t.partitions = r.array(true, "ConsumerGroupDescribeResponse.assignment.partitions", |r| {
            r.i32("ConsumerGroupDescribeResponse.assignment.partitions[]")
        })?;
        t.unknown_tagged_fields = no_tags(r, "ConsumerGroupDescribeResponse.assignment.topic.tagged_fields")?;
        Ok(t)
    })?;
    a.unknown_tagged_fields = no_tags(r, "ConsumerGroupDescribeResponse.assignment.tagged_fields")?;
    Ok(a)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
    use proptest::prelude::*;

    use super::*;
    use crate::error::Error;

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

    fn s(v: &'static str) -> StrBytes {
        StrBytes::from_static_str(v)
    }

    fn tags(flexible: bool) -> BTreeMap<i32, Bytes> {
        let mut m = BTreeMap::new();
        if flexible {
            m.insert(7, Bytes::from_static(b"\x02"));
        }
        m
    }

    fn list(version: i16) -> ListGroupsResponse {
        let flexible = version >= 3;
        let mut v = ListGroupsResponse::default();
        if version >= 1 {
            v.throttle_time_ms = 4;
        }
        v.error_code = 0;
        v.groups = ["g1", "g2"]
            .into_iter()
            .map(|id| {
                let mut g = ListedGroup::default();
                g.group_id = s(id).into();
                g.protocol_type = s("consumer");
                if version >= 4 {
                    g.group_state = s("Stable");
                }
                if version >= 5 {
                    g.group_type = s("classic");
                }
                g.unknown_tagged_fields = tags(flexible);
                g
            })
            .collect();
        v.unknown_tagged_fields = tags(flexible);
        v
    }

    fn describe(version: i16) -> DescribeGroupsResponse {
        let flexible = version >= 5;
        let mut v = DescribeGroupsResponse::default();
        if version >= 1 {
            v.throttle_time_ms = 2;
        }
        let mut g = DescribedGroup::default();
        if version >= 6 {
            g.error_message = Some(s("oops"));
        }
        g.group_id = s("g").into();
        g.group_state = s("Stable");
        g.protocol_type = s("consumer");
        g.protocol_data = s("range");
        let mut m = DescribedGroupMember::default();
        m.member_id = s("m-1");
        if version >= 4 {
            m.group_instance_id = Some(s("i-1"));
        }
        m.client_id = s("c");
        m.client_host = s("/127.0.0.1");
        m.member_metadata = Bytes::from_static(&[0, 3, 0, 0, 0, 0]);
        m.member_assignment = Bytes::from_static(&[0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
        m.unknown_tagged_fields = tags(flexible);
        g.members = vec![m];
        if version >= 3 {
            g.authorized_operations = 0x5f;
        }
        g.unknown_tagged_fields = tags(flexible);
        v.groups = vec![g];
        v.unknown_tagged_fields = tags(flexible);
        v
    }

    fn delete(version: i16) -> DeleteGroupsResponse {
        let flexible = version >= 2;
        let mut v = DeleteGroupsResponse::default();
        v.throttle_time_ms = 1;
        let mut g = DeletableGroupResult::default();
        g.group_id = s("g").into();
        g.error_code = 68;
        g.unknown_tagged_fields = tags(flexible);
        v.results = vec![g];
        v.unknown_tagged_fields = tags(flexible);
        v
    }

    fn cgd(version: i16) -> ConsumerGroupDescribeResponse {
        let mut v = ConsumerGroupDescribeResponse::default();
        v.throttle_time_ms = 3;
        let mut g = ConsumerDescribedGroup::default();
        g.error_message = None;
        g.group_id = s("g").into();
        g.group_state = s("Stable");
        g.group_epoch = 5;
        g.assignment_epoch = 5;
        g.assignor_name = s("uniform");
        let mut m = Member::default();
        m.member_id = s("m");
        m.instance_id = None;
        m.rack_id = Some(s("r1"));
        m.member_epoch = 5;
        m.client_id = s("c");
        m.client_host = s("/h");
        m.subscribed_topic_names = vec![TopicName(s("t"))];
        m.subscribed_topic_regex = Some(s("t.*"));
        let mut t = TopicPartitions::default();
        t.topic_id = uuid::Uuid::from_u128(42);
        t.topic_name = TopicName(s("t"));
        t.partitions = vec![0, 2];
        t.unknown_tagged_fields = tags(true);
        m.assignment.topic_partitions = vec![t.clone()];
        m.assignment.unknown_tagged_fields = tags(true);
        m.target_assignment.topic_partitions = vec![t];
        if version >= 1 {
            m.member_type = 1;
        }
        m.unknown_tagged_fields = tags(true);
        g.members = vec![m];
        g.authorized_operations = -2147483648;
        g.unknown_tagged_fields = tags(true);
        v.groups = vec![g];
        v.unknown_tagged_fields = tags(true);
        v
    }

    fn samples() -> Vec<(&'static str, i16, Bytes)> {
        let mut out = Vec::new();
        for v in 0..=5 {
            out.push(("list", v, encode(&list(v), v)));
        }
        for v in 0..=6 {
            out.push(("describe", v, encode(&describe(v), v)));
        }
        for v in 0..=2 {
            out.push(("delete", v, encode(&delete(v), v)));
        }
        for v in 0..=1 {
            out.push(("cgd", v, encode(&cgd(v), v)));
        }
        out
    }

    fn decode_any(kind: &str, b: &Bytes, v: i16) -> Result<()> {
        match kind {
            "list" => decode::<ListGroupsResponse>(b, v).map(|_| ()),
            "describe" => decode::<DescribeGroupsResponse>(b, v).map(|_| ()),
            "delete" => decode::<DeleteGroupsResponse>(b, v).map(|_| ()),
            _ => decode::<ConsumerGroupDescribeResponse>(b, v).map(|_| ()),
        }
    }

    #[test]
    fn round_trip_every_version_and_agree_with_kafka_protocol() {
        for v in 0..=5 {
            let frame = encode(&list(v), v);
            assert_eq!(decode::<ListGroupsResponse>(&frame, v).unwrap(), list(v), "v{v}");
            assert_eq!(ListGroupsResponse::decode(&mut frame.clone(), v).unwrap(), list(v));
        }
        for v in 0..=6 {
            let frame = encode(&describe(v), v);
            assert_eq!(
                decode::<DescribeGroupsResponse>(&frame, v).unwrap(),
                describe(v),
                "v{v}"
            );
            assert_eq!(
                DescribeGroupsResponse::decode(&mut frame.clone(), v).unwrap(),
                describe(v)
            );
        }
        for v in 0..=2 {
            let frame = encode(&delete(v), v);
            assert_eq!(decode::<DeleteGroupsResponse>(&frame, v).unwrap(), delete(v), "v{v}");
        }
        for v in 0..=1 {
            let frame = encode(&cgd(v), v);
            assert_eq!(
                decode::<ConsumerGroupDescribeResponse>(&frame, v).unwrap(),
                cgd(v),
                "v{v}"
            );
            assert_eq!(
                ConsumerGroupDescribeResponse::decode(&mut frame.clone(), v).unwrap(),
                cgd(v)
            );
        }
    }

    #[test]
    fn versions_match_kafka_protocol() {
        // A kafka-protocol upgrade that adds a version must fail here until the decoders learn it.
        assert_eq!(<ListGroupsResponse as Message>::VERSIONS.max, 5);
        assert_eq!(<DescribeGroupsResponse as Message>::VERSIONS.max, 6);
        assert_eq!(<DeleteGroupsResponse as Message>::VERSIONS.max, 2);
        assert_eq!(<ConsumerGroupDescribeResponse as Message>::VERSIONS.max, 1);
        assert!(matches!(
            decode::<ListGroupsResponse>(&encode(&list(5), 5), 6),
            Err(Error::UnsupportedVersion { .. })
        ));
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
        let out_of_bounds = |kind: &str, b: BytesMut, v: i16| {
            let err = decode_any(kind, &b.freeze(), v).unwrap_err();
            assert!(matches!(err, Error::LengthOutOfBounds { .. }), "{kind} v{v}: {err}");
        };
        // ListGroups v2: throttle, error, then i32::MAX groups.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i16(0);
        b.put_i32(i32::MAX);
        out_of_bounds("list", b, 2);
        // DescribeGroups v4: one group "g" whose members claim i32::MAX.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(0);
        for s in ["g", "Stable", "consumer", "range"] {
            b.put_i16(s.len() as i16);
            b.put_slice(s.as_bytes());
        }
        b.put_i32(i32::MAX);
        out_of_bounds("describe", b, 4);
        // ...and one member whose metadata claims i32::MAX bytes.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(1);
        b.put_i16(0);
        for s in ["g", "Stable", "consumer", "range"] {
            b.put_i16(s.len() as i16);
            b.put_slice(s.as_bytes());
        }
        b.put_i32(1);
        b.put_i16(1);
        b.put_slice(b"m");
        b.put_i16(-1);
        b.put_i16(1);
        b.put_slice(b"c");
        b.put_i16(1);
        b.put_slice(b"h");
        b.put_i32(i32::MAX);
        out_of_bounds("describe", b, 4);
        // DeleteGroups v1: i32::MAX results.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_i32(i32::MAX);
        out_of_bounds("delete", b, 1);
        // ConsumerGroupDescribe: compact groups count u32::MAX - 1.
        let mut b = BytesMut::new();
        b.put_i32(0);
        b.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        out_of_bounds("cgd", b, 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn mutated_frames_never_panic(
            pick in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
        ) {
            let samples = samples();
            let (kind, v, frame) = &samples[pick.index(samples.len())];
            let mut frame = frame.to_vec();
            let i = at.index(frame.len());
            frame[i] = byte;
            let _ = decode_any(kind, &Bytes::from(frame), *v);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256), pick in 0usize..4, v in 0i16..=6) {
            let kind = ["list", "describe", "delete", "cgd"][pick];
            let _ = decode_any(kind, &Bytes::from(data), v);
        }
    }
}
