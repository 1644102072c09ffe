//! The member state machine: each error code's transition, a scripted
//! coordinator driving three members through rebalances with each
//! assignor, the cooperative two-phase rebalance, and a static member's
//! restart without a rebalance.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::consumer_protocol::{decode_assignment, decode_subscription, encode_assignment};
use super::*;

fn s(x: &str) -> StrBytes {
    StrBytes::from_string(x.to_string())
}

fn topics(ts: &[&str]) -> BTreeSet<String> {
    ts.iter().map(|t| t.to_string()).collect()
}

fn parts(list: &[(&str, i32)]) -> PartitionSet {
    list.iter().map(|(t, p)| TopicPartition::new(*t, *p)).collect()
}

fn assignment_bytes(p: &PartitionSet) -> Bytes {
    let mut a = ConsumerProtocolAssignment::default();
    let mut by: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in p {
        by.entry(&tp.topic).or_default().push(tp.partition);
    }
    a.assigned_partitions = by
        .into_iter()
        .map(|(t, ps)| {
            let mut at = AssignedTopic::default();
            at.topic = TopicName(s(t));
            at.partitions = ps;
            at
        })
        .collect();
    encode_assignment(&a, 3).unwrap()
}

fn join_ok(member_id: &str, generation: i32, leader: &str, protocol: &str) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.member_id = s(member_id);
    r.generation_id = generation;
    r.leader = s(leader);
    r.protocol_name = Some(s(protocol));
    r.protocol_type = Some(s("consumer"));
    r
}

fn join_err(code: i16, member_id: &str) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = code;
    r.member_id = s(member_id);
    r
}

fn sync_ok(p: &PartitionSet) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    r.assignment = assignment_bytes(p);
    r
}

fn sync_err(code: i16) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    r.error_code = code;
    r
}

fn hb(code: i16) -> HeartbeatResponse {
    let mut r = HeartbeatResponse::default();
    r.error_code = code;
    r
}

fn config(assignors: &[Assignor]) -> GroupConfig {
    let mut c = GroupConfig::new("g");
    c.assignors = assignors.to_vec();
    c
}

/// Everything `poll` hands out now.
fn drain(m: &mut ClassicMember, now: u64) -> Vec<Action> {
    let mut out = Vec::new();
    while let Some(a) = m.poll(now) {
        out.push(a);
        assert!(out.len() < 100, "poll never settles");
    }
    out
}

fn sends(actions: &[Action]) -> Vec<&GroupRequest> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(r) => Some(r),
            Action::Event(_) => None,
        })
        .collect()
}

fn events(actions: &[Action]) -> Vec<&GroupEvent> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event(e) => Some(e),
            Action::Send(_) => None,
        })
        .collect()
}

fn join_req(actions: &[Action]) -> JoinGroupRequest {
    sends(actions)
        .into_iter()
        .find_map(|r| match r {
            GroupRequest::JoinGroup(j) => Some(j.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no JoinGroup in {actions:?}"))
}

fn has_join(actions: &[Action]) -> bool {
    sends(actions).iter().any(|r| matches!(r, GroupRequest::JoinGroup(_)))
}

/// A follower through find, join and sync, holding `p` in generation 1.
fn stable_member(cfg: GroupConfig, p: &PartitionSet) -> ClassicMember {
    let protocol = cfg.assignors[0].name();
    let mut m = ClassicMember::new(cfg, 0);
    m.set_subscription(topics(&["t", "u"]));
    assert_eq!(sends(&drain(&mut m, 0)), vec![&GroupRequest::FindCoordinator]);
    m.handle_coordinator_found(0);
    let a = drain(&mut m, 0);
    let j = join_req(&a);
    assert_eq!(j.member_id.as_str(), "");
    assert_eq!(m.state(), MemberState::Joining);
    m.handle_join_response(&join_ok("me", 1, "other", protocol), 0);
    assert_eq!(m.state(), MemberState::AwaitingSync);
    let a = drain(&mut m, 0);
    assert!(matches!(sends(&a)[..], [GroupRequest::SyncGroup(r)] if r.generation_id == 1 && r.assignments.is_empty()));
    m.handle_sync_response(&sync_ok(p), 0);
    let a = drain(&mut m, 0);
    assert_eq!(
        events(&a),
        vec![&GroupEvent::PartitionsAssigned {
            partitions: p.clone(),
            generation: 1
        }]
    );
    assert_eq!(m.state(), MemberState::Stable);
    assert_eq!(m.assigned(), p);
    m
}

fn eager() -> GroupConfig {
    config(&[Assignor::Range])
}

fn cooperative() -> GroupConfig {
    config(&[Assignor::CooperativeSticky])
}

/// Polls at the next heartbeat time and returns the heartbeat sent.
fn heartbeat_now(m: &mut ClassicMember, now: u64) -> HeartbeatRequest {
    m.handle_app_poll(now);
    let a = drain(m, now);
    match sends(&a)[..] {
        [GroupRequest::Heartbeat(h)] => h.clone(),
        _ => panic!("expected a heartbeat, got {a:?}"),
    }
}

#[test]
fn join_request_carries_each_protocol_and_subscription() {
    let mut cfg = config(&[Assignor::Range, Assignor::CooperativeSticky]);
    cfg.rack_id = Some("r1".into());
    cfg.group_instance_id = Some("i-1".into());
    let mut m = ClassicMember::new(cfg, 0);
    assert_eq!(m.rebalance_protocol(), RebalanceProtocol::Eager, "range makes it eager");
    m.set_subscription(topics(&["b", "a"]));
    m.handle_coordinator_found(0);
    let j = join_req(&drain(&mut m, 0));
    assert_eq!(j.group_instance_id.as_deref(), Some("i-1"));
    assert_eq!(j.protocol_type.as_str(), "consumer");
    assert_eq!((j.session_timeout_ms, j.rebalance_timeout_ms), (45_000, 300_000));
    let names: Vec<&str> = j.protocols.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["range", "cooperative-sticky"]);
    let (v, sub) = decode_subscription(&j.protocols[0].metadata).unwrap();
    assert_eq!(v, 3);
    let ts: Vec<&str> = sub.topics.iter().map(|t| t.as_str()).collect();
    assert_eq!(ts, ["a", "b"]);
    assert_eq!(sub.rack_id.as_deref(), Some("r1"));
    assert_eq!(sub.user_data, None);
    let (_, sticky) = decode_subscription(&j.protocols[1].metadata).unwrap();
    assert_eq!(sticky.user_data.as_deref(), Some(&(-1i32).to_be_bytes()[..]));
}

#[test]
fn member_id_required_rejoins_at_once_with_the_id() {
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_err(79, "given-id"), 0);
    let j = join_req(&drain(&mut m, 0));
    assert_eq!(j.member_id.as_str(), "given-id");
}

#[test]
fn join_unknown_member_id_forgets_the_id() {
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_err(79, "old"), 0);
    drain(&mut m, 0);
    m.handle_join_response(&join_err(25, ""), 0);
    assert_eq!(join_req(&drain(&mut m, 0)).member_id.as_str(), "");
}

#[test]
fn heartbeat_illegal_generation_loses_partitions_keeps_id() {
    let p = parts(&[("t", 0), ("u", 1)]);
    let mut m = stable_member(eager(), &p);
    heartbeat_now(&mut m, 3_000);
    m.handle_heartbeat_response(&hb(22), 3_001);
    let a = drain(&mut m, 3_001);
    assert_eq!(events(&a), vec![&GroupEvent::PartitionsLost { partitions: p }]);
    let j = join_req(&a);
    assert_eq!(j.member_id.as_str(), "me");
    let (_, sub) = decode_subscription(&j.protocols[0].metadata).unwrap();
    assert_eq!(sub.generation_id, -1);
    assert!(sub.owned_partitions.is_empty());
    assert!(m.assigned().is_empty());
}

#[test]
fn heartbeat_unknown_member_id_loses_partitions_and_id() {
    let p = parts(&[("t", 0)]);
    let mut m = stable_member(eager(), &p);
    heartbeat_now(&mut m, 3_000);
    m.handle_heartbeat_response(&hb(25), 3_001);
    let a = drain(&mut m, 3_001);
    assert_eq!(events(&a), vec![&GroupEvent::PartitionsLost { partitions: p }]);
    assert_eq!(join_req(&a).member_id.as_str(), "");
    assert_eq!(m.group_metadata(), None);
}

#[test]
fn fenced_instance_id_is_lost_then_fatal() {
    let mut cfg = eager();
    cfg.group_instance_id = Some("i-1".into());
    let p = parts(&[("t", 0)]);
    let mut m = stable_member(cfg, &p);
    heartbeat_now(&mut m, 3_000);
    m.handle_heartbeat_response(&hb(82), 3_001);
    let a = drain(&mut m, 3_001);
    assert_eq!(events(&a).len(), 2);
    assert_eq!(events(&a)[0], &GroupEvent::PartitionsLost { partitions: p });
    assert!(matches!(
        events(&a)[1],
        GroupEvent::Fatal(GroupError::FencedInstanceId { instance_id, .. }) if instance_id == "i-1"
    ));
    assert_eq!(m.state(), MemberState::Fatal);
    assert!(drain(&mut m, 100_000).is_empty(), "a fatal member sends nothing more");
}

#[test]
fn fenced_on_join_and_sync_is_fatal() {
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_err(82, ""), 0);
    assert_eq!(m.state(), MemberState::Fatal);
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_ok("me", 1, "x", "range"), 0);
    drain(&mut m, 0);
    m.handle_sync_response(&sync_err(82), 0);
    assert_eq!(m.state(), MemberState::Fatal);
}

#[test]
fn eager_rebalance_in_progress_revokes_all_and_waits_for_the_commit() {
    let p = parts(&[("t", 0), ("t", 1)]);
    let mut m = stable_member(eager(), &p);
    heartbeat_now(&mut m, 3_000);
    m.handle_heartbeat_response(&hb(27), 3_001);
    let a = drain(&mut m, 3_001);
    assert_eq!(
        events(&a),
        vec![&GroupEvent::PartitionsRevoked {
            partitions: p,
            generation: 1,
            member_id: "me".into()
        }]
    );
    assert!(!has_join(&a), "no JoinGroup before the revocation is committed");
    assert_eq!(m.state(), MemberState::Revoking);
    assert_eq!(
        m.group_metadata().unwrap().generation_id,
        1,
        "commit with the current generation"
    );
    // Heartbeats go on while the application commits.
    heartbeat_now(&mut m, 6_001);
    m.handle_heartbeat_response(&hb(27), 6_002);
    m.handle_revoke_done();
    let a = drain(&mut m, 6_002);
    let j = join_req(&a);
    assert_eq!(j.member_id.as_str(), "me");
    let (_, sub) = decode_subscription(&j.protocols[0].metadata).unwrap();
    assert!(sub.owned_partitions.is_empty());
    assert_eq!(sub.generation_id, 1);
}

#[test]
fn cooperative_rebalance_in_progress_keeps_partitions() {
    let p = parts(&[("t", 0), ("u", 2)]);
    let mut m = stable_member(cooperative(), &p);
    heartbeat_now(&mut m, 3_000);
    m.handle_heartbeat_response(&hb(27), 3_001);
    let a = drain(&mut m, 3_001);
    assert!(events(&a).is_empty());
    let j = join_req(&a);
    let (_, sub) = decode_subscription(&j.protocols[0].metadata).unwrap();
    let owned: PartitionSet = sub
        .owned_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| TopicPartition::new(t.topic.0.as_str(), p)))
        .collect();
    assert_eq!(owned, p);
    assert_eq!(sub.generation_id, 1);
    assert_eq!(sub.user_data.as_deref(), Some(&1i32.to_be_bytes()[..]));
    // Generation 2 takes u-2 away: revoked, then a rejoin after the commit.
    m.handle_join_response(&join_ok("me", 2, "other", "cooperative-sticky"), 3_002);
    drain(&mut m, 3_002);
    m.handle_sync_response(&sync_ok(&parts(&[("t", 0), ("t", 1)])), 3_003);
    let a = drain(&mut m, 3_003);
    assert_eq!(
        events(&a),
        vec![
            &GroupEvent::PartitionsRevoked {
                partitions: parts(&[("u", 2)]),
                generation: 2,
                member_id: "me".into()
            },
            &GroupEvent::PartitionsAssigned {
                partitions: parts(&[("t", 1)]),
                generation: 2
            }
        ]
    );
    assert!(!has_join(&a));
    m.handle_revoke_done();
    let j = join_req(&drain(&mut m, 3_004));
    let (_, sub) = decode_subscription(&j.protocols[0].metadata).unwrap();
    assert_eq!(sub.owned_partitions.len(), 1);
    assert_eq!(sub.owned_partitions[0].partitions, [0, 1]);
}

#[test]
fn cooperative_subscription_change_revokes_dropped_topics_only() {
    let p = parts(&[("t", 0), ("u", 2)]);
    let mut m = stable_member(cooperative(), &p);
    m.set_subscription(topics(&["t"]));
    let a = drain(&mut m, 10);
    assert_eq!(
        events(&a),
        vec![&GroupEvent::PartitionsRevoked {
            partitions: parts(&[("u", 2)]),
            generation: 1,
            member_id: "me".into()
        }]
    );
    m.handle_revoke_done();
    assert!(has_join(&drain(&mut m, 11)));
    assert_eq!(m.assigned(), &parts(&[("t", 0)]));
}

#[test]
fn coordinator_errors_rediscover() {
    let p = parts(&[("t", 0)]);
    let mut m = stable_member(eager(), &p);
    heartbeat_now(&mut m, 3_000);
    m.handle_heartbeat_response(&hb(16), 3_001);
    let a = drain(&mut m, 3_200);
    assert_eq!(sends(&a), vec![&GroupRequest::FindCoordinator]);
    assert!(events(&a).is_empty(), "NOT_COORDINATOR keeps the partitions");
    m.handle_coordinator_found(3_300);
    assert!(matches!(
        heartbeat_now(&mut m, 6_100),
        HeartbeatRequest { generation_id: 1, .. }
    ));
    // On JoinGroup: rediscover, then rejoin.
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_err(15, ""), 0);
    assert_eq!(sends(&drain(&mut m, 100)), vec![&GroupRequest::FindCoordinator]);
    m.handle_coordinator_found(100);
    assert!(has_join(&drain(&mut m, 100)));
}

#[test]
fn sync_rebalance_in_progress_rejoins_in_the_generation() {
    let mut m = ClassicMember::new(cooperative(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_ok("me", 4, "x", "cooperative-sticky"), 0);
    drain(&mut m, 0);
    m.handle_sync_response(&sync_err(27), 1);
    assert_eq!(m.generation(), 4);
    let j = join_req(&drain(&mut m, 1));
    assert_eq!(j.member_id.as_str(), "me");
}

#[test]
fn sync_errors_reset_or_fail() {
    for (code, keeps_id, fatal) in [
        (25i16, false, false),
        (22, true, false),
        (30, false, true),
        (23, false, true),
    ] {
        let mut m = ClassicMember::new(eager(), 0);
        m.set_subscription(topics(&["t"]));
        m.handle_coordinator_found(0);
        drain(&mut m, 0);
        m.handle_join_response(&join_ok("me", 4, "x", "range"), 0);
        drain(&mut m, 0);
        m.handle_sync_response(&sync_err(code), 1);
        if fatal {
            assert_eq!(m.state(), MemberState::Fatal, "{code}");
            assert!(matches!(
                m.error(),
                Some(GroupError::Coordinator { api: "SyncGroup", .. })
            ));
        } else {
            assert_eq!(m.generation(), -1, "{code}");
            assert_eq!(m.member_id() == "me", keeps_id, "{code}");
            assert!(has_join(&drain(&mut m, 1)), "{code}");
        }
    }
}

#[test]
fn hostile_assignments_are_not_taken() {
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_ok("me", 1, "x", "range"), 0);
    drain(&mut m, 0);
    // A topic not subscribed: not taken, rejoin after the backoff.
    m.handle_sync_response(&sync_ok(&parts(&[("other", 0)])), 10);
    assert!(m.assigned().is_empty());
    assert!(drain(&mut m, 10).is_empty(), "backoff");
    assert!(has_join(&drain(&mut m, 110)));
    m.handle_join_response(&join_ok("me", 2, "x", "range"), 110);
    drain(&mut m, 110);
    // Garbage, and an i32::MAX array length: typed decode errors, rejoin.
    let mut r = SyncGroupResponse::default();
    r.assignment = Bytes::from_static(&[0, 3, 0x7f, 0xff, 0xff, 0xff, 1]);
    m.handle_sync_response(&r, 120);
    assert!(m.assigned().is_empty());
    assert_eq!(m.state(), MemberState::Unjoined);
    assert!(has_join(&drain(&mut m, 300)));
}

#[test]
fn inconsistent_protocol_is_fatal() {
    let mut m = ClassicMember::new(eager(), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    drain(&mut m, 0);
    m.handle_join_response(&join_ok("me", 1, "x", "roundrobin"), 0);
    assert!(matches!(
        m.error(),
        Some(GroupError::InconsistentProtocol { protocol, .. }) if protocol == "roundrobin"
    ));
}

#[test]
fn unexpected_join_error_is_fatal_and_retriable_ones_back_off() {
    for code in [14i16, 27] {
        let mut m = ClassicMember::new(eager(), 0);
        m.set_subscription(topics(&["t"]));
        m.handle_coordinator_found(0);
        drain(&mut m, 0);
        m.handle_join_response(&join_err(code, ""), 0);
        assert!(drain(&mut m, 50).is_empty());
        assert!(has_join(&drain(&mut m, 100)), "{code}");
    }
    for code in [24i16, 26, 30, 81, 111, 9999] {
        let mut m = ClassicMember::new(eager(), 0);
        m.set_subscription(topics(&["t"]));
        m.handle_coordinator_found(0);
        drain(&mut m, 0);
        m.handle_join_response(&join_err(code, ""), 0);
        let a = drain(&mut m, 0);
        assert!(matches!(events(&a)[..], [GroupEvent::Fatal(_)]), "{code}");
    }
}

#[test]
fn poll_timeout_names_the_next_deadline() {
    let mut m = stable_member(eager(), &parts(&[("t", 0)]));
    assert_eq!(m.poll_timeout(10), Some(3_000), "the next heartbeat");
    heartbeat_now(&mut m, 3_000);
    // Heartbeat in flight: the session deadline, never a past time.
    assert_eq!(m.poll_timeout(3_000), Some(6_000));
    assert_eq!(m.poll_timeout(44_000), Some(45_000));
    m.leave();
    drain(&mut m, 50_000);
    m.handle_revoke_done();
    drain(&mut m, 50_001);
    m.handle_leave_response(&LeaveGroupResponse::default());
    assert_eq!(m.poll_timeout(50_002), None);
}

#[test]
fn session_timeout_rediscovers_the_coordinator() {
    let mut m = stable_member(eager(), &parts(&[("t", 0)]));
    heartbeat_now(&mut m, 3_000);
    m.handle_request_failed(RequestKind::Heartbeat, 3_010);
    m.handle_coordinator_found(3_020);
    // Heartbeats go unanswered from here on.
    let mut now = 3_020;
    let mut found = false;
    while now < 60_000 {
        now += 1_000;
        m.handle_app_poll(now);
        let a = drain(&mut m, now);
        if sends(&a).contains(&&GroupRequest::FindCoordinator) {
            found = true;
            break;
        }
    }
    assert!(found);
    assert!((48_020..=49_020).contains(&now), "{now}");
    assert_eq!(m.assigned().len(), 1, "the member may still be in the group");
}

#[test]
fn poll_timeout_leaves_and_loses_dynamic_member() {
    let p = parts(&[("t", 0)]);
    let mut m = stable_member(eager(), &p);
    let a = drain(&mut m, 300_000);
    assert_eq!(events(&a), vec![&GroupEvent::PartitionsLost { partitions: p }]);
    assert!(
        matches!(sends(&a)[..], [GroupRequest::LeaveGroup(LeaveGroupRequest { member_id, .. })] if member_id.as_str() == "me")
    );
    assert!(
        drain(&mut m, 400_000).is_empty(),
        "no rejoin before the application polls"
    );
    m.handle_app_poll(400_001);
    assert_eq!(join_req(&drain(&mut m, 400_001)).member_id.as_str(), "");
}

#[test]
fn poll_timeout_static_member_sends_no_leave() {
    let mut cfg = eager();
    cfg.group_instance_id = Some("i".into());
    let p = parts(&[("t", 0)]);
    let mut m = stable_member(cfg, &p);
    let a = drain(&mut m, 300_000);
    assert_eq!(events(&a), vec![&GroupEvent::PartitionsLost { partitions: p }]);
    assert!(sends(&a).is_empty());
}

#[test]
fn leave_revokes_then_leaves_dynamic_and_static() {
    let p = parts(&[("t", 0)]);
    let mut m = stable_member(eager(), &p);
    m.leave();
    let a = drain(&mut m, 10);
    assert_eq!(
        events(&a),
        vec![&GroupEvent::PartitionsRevoked {
            partitions: p.clone(),
            generation: 1,
            member_id: "me".into()
        }]
    );
    assert!(sends(&a).is_empty(), "LeaveGroup waits for the commit");
    m.handle_revoke_done();
    let a = drain(&mut m, 11);
    assert!(
        matches!(sends(&a)[..], [GroupRequest::LeaveGroup(r)] if r.members.len() == 1 && r.members[0].member_id.as_str() == "me")
    );
    assert_eq!(m.state(), MemberState::Leaving);
    m.handle_leave_response(&LeaveGroupResponse::default());
    assert_eq!(m.state(), MemberState::Left);

    let mut cfg = eager();
    cfg.group_instance_id = Some("i".into());
    let mut m = stable_member(cfg, &p);
    m.leave();
    drain(&mut m, 10);
    m.handle_revoke_done();
    assert!(
        sends(&drain(&mut m, 11)).is_empty(),
        "a static member sends no LeaveGroup"
    );
    assert_eq!(m.state(), MemberState::Left);
}

#[test]
fn leader_asks_metadata_assigns_and_survives_a_hostile_member() {
    let mut m = ClassicMember::new(config(&[Assignor::RoundRobin]), 0);
    m.set_subscription(topics(&["t"]));
    m.handle_coordinator_found(0);
    let j = join_req(&drain(&mut m, 0));
    let mut resp = join_ok("a", 1, "a", "roundrobin");
    let member = |id: &str, metadata: Bytes| {
        let mut x = JoinGroupResponseMember::default();
        x.member_id = s(id);
        x.metadata = metadata;
        x
    };
    resp.members = vec![
        member("a", j.protocols[0].metadata.clone()),
        member("b", j.protocols[0].metadata.clone()),
        member("evil", Bytes::from_static(&[0, 1, 0x7f, 0xff, 0xff, 0xff])),
        member("b", Bytes::new()),
    ];
    m.handle_join_response(&resp, 0);
    assert_eq!(m.state(), MemberState::AwaitingMetadata);
    let a = drain(&mut m, 0);
    assert_eq!(sends(&a), vec![&GroupRequest::Metadata { topics: topics(&["t"]) }]);
    m.handle_metadata(&[("t".to_string(), 3)].into(), 1);
    let a = drain(&mut m, 1);
    let GroupRequest::SyncGroup(SyncGroupRequest { assignments, .. }) = sends(&a)[0] else {
        panic!("{a:?}")
    };
    let got: BTreeMap<&str, PartitionSet> = assignments
        .iter()
        .map(|x| {
            let (_, a) = decode_assignment(&x.assignment).unwrap();
            (x.member_id.as_str(), member::assignment_set(&a))
        })
        .collect();
    assert_eq!(got["a"], parts(&[("t", 0), ("t", 2)]));
    assert_eq!(got["b"], parts(&[("t", 1)]));
    assert!(got["evil"].is_empty());
    assert_eq!(assignments.len(), 3, "each member once");
    m.handle_sync_response(&sync_ok(&got["a"]), 2);
    drain(&mut m, 2);
    assert!(m.is_leader());
    // A new partition: the leader rejoins.
    m.handle_metadata(&[("t".to_string(), 3)].into(), 3);
    assert!(!has_join(&drain(&mut m, 3)));
    m.handle_metadata(&[("t".to_string(), 4)].into(), 4);
    assert!(events(&drain(&mut m, 4)).len() == 1, "eager: revoke before the rejoin");
}

// ---- a scripted coordinator and three members ----

#[derive(Default)]
struct CoordMember {
    instance: Option<String>,
    protocols: Vec<(String, Bytes)>,
}

#[derive(PartialEq, Eq, Debug, Clone, Copy)]
enum CState {
    Empty,
    Preparing,
    Completing,
    Stable,
}

enum Reply {
    Join(JoinGroupResponse),
    Sync(SyncGroupResponse),
}

/// Kafka's classic group coordinator, as much of it as these tests need:
/// KIP-394 member ids, joins completing when every member has rejoined,
/// protocol selection, SyncGroup from the leader, heartbeats answering
/// REBALANCE_IN_PROGRESS during a rebalance, LeaveGroup, and static members
/// rejoining a stable group without a rebalance (KIP-345).
struct Coordinator {
    state: CState,
    generation: i32,
    members: BTreeMap<String, CoordMember>,
    issued: BTreeSet<String>,
    next_id: u32,
    pending_joins: BTreeMap<String, usize>,
    pending_syncs: BTreeMap<String, usize>,
    leader: Option<String>,
    protocol: Option<String>,
    assignments: BTreeMap<String, Bytes>,
    rebalances: u32,
    replies: Vec<(usize, Reply)>,
}

impl Coordinator {
    fn new() -> Self {
        Coordinator {
            state: CState::Empty,
            generation: 0,
            members: BTreeMap::new(),
            issued: BTreeSet::new(),
            next_id: 0,
            pending_joins: BTreeMap::new(),
            pending_syncs: BTreeMap::new(),
            leader: None,
            protocol: None,
            assignments: BTreeMap::new(),
            rebalances: 0,
            replies: Vec::new(),
        }
    }

    fn new_id(&mut self) -> String {
        self.next_id += 1;
        let id = format!("member-{:02}", self.next_id);
        self.issued.insert(id.clone());
        id
    }

    fn prepare(&mut self) {
        if self.state != CState::Preparing {
            self.state = CState::Preparing;
            self.rebalances += 1;
            // Members waiting on a sync learn of the new round.
            for (_, conn) in std::mem::take(&mut self.pending_syncs) {
                self.replies.push((conn, Reply::Sync(sync_err(27))));
            }
        }
    }

    fn join(&mut self, conn: usize, req: &JoinGroupRequest) {
        let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
        let protocols: Vec<(String, Bytes)> = req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        let mut id = req.member_id.to_string();
        if id.is_empty() {
            if let Some(inst) = &instance {
                let old = self
                    .members
                    .iter()
                    .find(|(_, m)| m.instance.as_ref() == Some(inst))
                    .map(|(id, _)| id.clone());
                if let (Some(old), CState::Stable) = (old.clone(), self.state) {
                    // KIP-345: the same instance takes the old member's
                    // place and assignment; no rebalance.
                    let new = self.new_id();
                    let m = self.members.remove(&old).unwrap();
                    self.members.insert(new.clone(), CoordMember { protocols, ..m });
                    if let Some(a) = self.assignments.remove(&old) {
                        self.assignments.insert(new.clone(), a);
                    }
                    let was_leader = self.leader.as_deref() == Some(old.as_str());
                    if was_leader {
                        self.leader = Some(new.clone());
                    }
                    let mut r = join_ok(
                        &new,
                        self.generation,
                        self.leader.as_deref().unwrap(),
                        self.protocol.as_deref().unwrap(),
                    );
                    r.skip_assignment = was_leader;
                    self.replies.push((conn, Reply::Join(r)));
                    return;
                }
                id = match old {
                    Some(old) => old,
                    None => self.new_id(),
                };
            } else {
                let new = self.new_id();
                self.replies.push((conn, Reply::Join(join_err(79, &new))));
                return;
            }
        } else if !self.issued.contains(&id) {
            self.replies.push((conn, Reply::Join(join_err(25, ""))));
            return;
        }
        self.members.insert(id.clone(), CoordMember { instance, protocols });
        self.pending_joins.insert(id, conn);
        self.prepare();
        self.maybe_complete_join();
    }

    fn maybe_complete_join(&mut self) {
        if self.state != CState::Preparing || !self.members.keys().all(|id| self.pending_joins.contains_key(id)) {
            return;
        }
        self.generation += 1;
        // The first protocol of the first member that every member offers.
        let first = self.members.values().next().unwrap();
        let protocol = first
            .protocols
            .iter()
            .map(|(n, _)| n.clone())
            .find(|n| self.members.values().all(|m| m.protocols.iter().any(|(x, _)| x == n)))
            .expect("a common protocol");
        if !self.leader.as_ref().is_some_and(|l| self.members.contains_key(l)) {
            self.leader = self.members.keys().next().cloned();
        }
        let leader = self.leader.clone().unwrap();
        for (id, conn) in std::mem::take(&mut self.pending_joins) {
            let mut r = join_ok(&id, self.generation, &leader, &protocol);
            if id == leader {
                r.members = self
                    .members
                    .iter()
                    .map(|(mid, m)| {
                        let mut x = JoinGroupResponseMember::default();
                        x.member_id = s(mid);
                        x.group_instance_id = m.instance.as_deref().map(s);
                        x.metadata = m.protocols.iter().find(|(n, _)| *n == protocol).unwrap().1.clone();
                        x
                    })
                    .collect();
            }
            self.replies.push((conn, Reply::Join(r)));
        }
        self.protocol = Some(protocol);
        self.assignments.clear();
        self.state = CState::Completing;
    }

    fn sync(&mut self, conn: usize, req: &SyncGroupRequest) {
        let id = req.member_id.to_string();
        let reply = if !self.members.contains_key(&id) {
            Some(sync_err(25))
        } else if req.generation_id != self.generation {
            Some(sync_err(22))
        } else {
            match self.state {
                CState::Preparing | CState::Empty => Some(sync_err(27)),
                CState::Stable => {
                    let mut r = SyncGroupResponse::default();
                    r.assignment = self.assignments.get(&id).cloned().unwrap_or_default();
                    Some(r)
                }
                CState::Completing => {
                    self.pending_syncs.insert(id.clone(), conn);
                    if self.leader.as_deref() == Some(id.as_str()) {
                        for a in &req.assignments {
                            self.assignments.insert(a.member_id.to_string(), a.assignment.clone());
                        }
                        self.state = CState::Stable;
                        for (mid, c) in std::mem::take(&mut self.pending_syncs) {
                            let mut r = SyncGroupResponse::default();
                            r.assignment = self.assignments.get(&mid).cloned().unwrap_or_default();
                            self.replies.push((c, Reply::Sync(r)));
                        }
                    }
                    None
                }
            }
        };
        if let Some(r) = reply {
            self.replies.push((conn, Reply::Sync(r)));
        }
    }

    fn heartbeat(&mut self, req: &HeartbeatRequest) -> HeartbeatResponse {
        let id = req.member_id.to_string();
        if !self.members.contains_key(&id) {
            hb(25)
        } else if req.generation_id != self.generation {
            hb(22)
        } else if matches!(self.state, CState::Preparing | CState::Completing) {
            hb(27)
        } else {
            hb(0)
        }
    }

    fn leave(&mut self, req: &LeaveGroupRequest) {
        for m in &req.members {
            self.members.remove(m.member_id.as_str());
            self.pending_joins.remove(m.member_id.as_str());
        }
        if self.members.is_empty() {
            self.state = CState::Empty;
        } else {
            self.prepare();
            self.maybe_complete_join();
        }
    }
}

struct Sim {
    coord: Coordinator,
    members: Vec<ClassicMember>,
    held: Vec<PartitionSet>,
    counts: BTreeMap<String, i32>,
    now: u64,
    /// Every event, per member.
    log: Vec<Vec<GroupEvent>>,
}

impl Sim {
    fn new(counts: &[(&str, i32)]) -> Self {
        Sim {
            coord: Coordinator::new(),
            members: Vec::new(),
            held: Vec::new(),
            counts: counts.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
            now: 0,
            log: Vec::new(),
        }
    }

    fn add(&mut self, cfg: GroupConfig) -> usize {
        let mut m = ClassicMember::new(cfg, self.now);
        m.set_subscription(self.counts.keys().cloned().collect());
        self.members.push(m);
        self.held.push(PartitionSet::new());
        self.log.push(Vec::new());
        self.members.len() - 1
    }

    /// No partition held by two members at once, ever.
    fn check_disjoint(&self) {
        let mut seen = PartitionSet::new();
        for h in &self.held {
            for tp in h {
                assert!(seen.insert(tp.clone()), "{tp:?} held twice: {:?}", self.held);
            }
        }
    }

    fn step(&mut self) {
        for i in 0..self.members.len() {
            if matches!(self.members[i].state(), MemberState::Left) {
                continue;
            }
            self.members[i].handle_app_poll(self.now);
            let now = self.now;
            for _ in 0..100 {
                let Some(action) = self.members[i].poll(now) else { break };
                match action {
                    Action::Event(e) => {
                        match &e {
                            GroupEvent::PartitionsAssigned { partitions, .. } => {
                                assert!(self.held[i].is_disjoint(partitions));
                                self.held[i].extend(partitions.iter().cloned());
                            }
                            GroupEvent::PartitionsRevoked { partitions, .. } => {
                                assert!(partitions.is_subset(&self.held[i]));
                                self.held[i].retain(|tp| !partitions.contains(tp));
                                self.members[i].handle_revoke_done();
                            }
                            GroupEvent::PartitionsLost { partitions } => {
                                assert!(partitions.is_subset(&self.held[i]));
                                self.held[i].retain(|tp| !partitions.contains(tp));
                            }
                            GroupEvent::Fatal(e) => panic!("member {i}: {e}"),
                        }
                        self.log[i].push(e);
                        self.check_disjoint();
                    }
                    Action::Send(GroupRequest::FindCoordinator) => self.members[i].handle_coordinator_found(now),
                    Action::Send(GroupRequest::Metadata { topics }) => {
                        let counts = self
                            .counts
                            .iter()
                            .filter(|(t, _)| topics.contains(*t))
                            .map(|(t, n)| (t.clone(), *n))
                            .collect();
                        self.members[i].handle_metadata(&counts, now);
                    }
                    Action::Send(GroupRequest::JoinGroup(r)) => self.coord.join(i, &r),
                    Action::Send(GroupRequest::SyncGroup(r)) => self.coord.sync(i, &r),
                    Action::Send(GroupRequest::Heartbeat(r)) => {
                        let resp = self.coord.heartbeat(&r);
                        self.members[i].handle_heartbeat_response(&resp, now);
                    }
                    Action::Send(GroupRequest::LeaveGroup(r)) => {
                        self.coord.leave(&r);
                        self.members[i].handle_leave_response(&LeaveGroupResponse::default());
                    }
                }
            }
            assert_eq!(&self.held[i], self.members[i].assigned(), "member {i}");
        }
        for (conn, reply) in std::mem::take(&mut self.coord.replies) {
            match reply {
                Reply::Join(r) => self.members[conn].handle_join_response(&r, self.now),
                Reply::Sync(r) => self.members[conn].handle_sync_response(&r, self.now),
            }
        }
        self.now += 500;
    }

    fn settled(&self) -> bool {
        self.coord.state == CState::Stable
            && self.coord.replies.is_empty()
            && self
                .members
                .iter()
                .filter(|m| m.state() != MemberState::Left)
                .all(|m| m.state() == MemberState::Stable && m.generation() == self.coord.generation)
    }

    /// Steps until the group is stable and stays so across a heartbeat.
    fn settle(&mut self) {
        for _ in 0..200 {
            self.step();
            if self.settled() {
                for _ in 0..8 {
                    self.step();
                }
                if self.settled() {
                    return;
                }
            }
        }
        panic!(
            "never settled: coordinator {:?} gen {}, members {:?}",
            self.coord.state,
            self.coord.generation,
            self.members
                .iter()
                .map(|m| (m.state(), m.generation()))
                .collect::<Vec<_>>()
        );
    }

    fn by_member(&self) -> BTreeMap<String, PartitionSet> {
        self.members
            .iter()
            .zip(&self.held)
            .filter(|(m, _)| m.state() != MemberState::Left)
            .map(|(m, h)| (m.member_id().to_string(), h.clone()))
            .collect()
    }

    fn all(&self) -> PartitionSet {
        self.counts
            .iter()
            .flat_map(|(t, n)| (0..*n).map(|p| TopicPartition::new(t.clone(), p)))
            .collect()
    }

    fn assert_complete(&self) {
        let union: PartitionSet = self.held.iter().flatten().cloned().collect();
        assert_eq!(union, self.all());
        self.check_disjoint();
    }
}

fn three_members(assignor: Assignor) -> Sim {
    let mut sim = Sim::new(&[("t", 6), ("u", 3)]);
    for _ in 0..3 {
        sim.add(config(&[assignor]));
        sim.settle();
        sim.assert_complete();
    }
    sim
}

fn names(a: &BTreeMap<String, PartitionSet>) -> BTreeMap<String, Vec<String>> {
    a.iter()
        .map(|(m, s)| {
            (
                m.clone(),
                s.iter().map(|tp| format!("{}{}", tp.topic, tp.partition)).collect(),
            )
        })
        .collect()
}

// The expected assignments of `three_members_range` and
// `three_members_round_robin` are what kafka-clients 4.4.0's RangeAssignor
// and RoundRobinAssignor give for the same members and topics
// (`wire/testdata/group/Check.java`).
#[test]
fn three_members_range() {
    let sim = three_members(Assignor::Range);
    // Ids in join order (each took a MEMBER_ID_REQUIRED round first).
    let want: BTreeMap<String, Vec<String>> = [
        ("member-01", vec!["t0", "t1", "u0"]),
        ("member-02", vec!["t2", "t3", "u1"]),
        ("member-03", vec!["t4", "t5", "u2"]),
    ]
    .into_iter()
    .map(|(m, v)| (m.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(names(&sim.by_member()), want);
    assert_eq!(sim.coord.generation, 3);
}

#[test]
fn three_members_round_robin() {
    let sim = three_members(Assignor::RoundRobin);
    let want: BTreeMap<String, Vec<String>> = [
        ("member-01", vec!["t0", "t3", "u0"]),
        ("member-02", vec!["t1", "t4", "u1"]),
        ("member-03", vec!["t2", "t5", "u2"]),
    ]
    .into_iter()
    .map(|(m, v)| (m.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(names(&sim.by_member()), want);
}

#[test]
fn three_members_cooperative_sticky_two_phase() {
    let mut sim = Sim::new(&[("t", 6), ("u", 3)]);
    sim.add(config(&[Assignor::CooperativeSticky]));
    sim.settle();
    assert_eq!(sim.coord.generation, 1);
    let first = sim.held[0].clone();
    assert_eq!(first.len(), 9);
    sim.add(config(&[Assignor::CooperativeSticky]));
    sim.settle();
    // Two rounds: in the first, member 0 keeps 5 (or 4) and revokes the
    // rest; in the second, member 1 gets them.
    assert_eq!(
        sim.coord.generation, 3,
        "cooperative: a revoking round, then an assigning one"
    );
    assert!(sim.held[0].is_subset(&first), "member 0 kept only what it had");
    assert!(sim.log[0]
        .iter()
        .all(|e| !matches!(e, GroupEvent::PartitionsLost { .. })));
    let revoked: Vec<&GroupEvent> = sim.log[0]
        .iter()
        .filter(|e| matches!(e, GroupEvent::PartitionsRevoked { .. }))
        .collect();
    assert_eq!(revoked.len(), 1, "only the moved partitions, once: {revoked:?}");
    sim.add(config(&[Assignor::CooperativeSticky]));
    sim.settle();
    sim.assert_complete();
    let counts: Vec<usize> = sim.held.iter().map(|h| h.len()).collect();
    assert_eq!(counts, [3, 3, 3]);
    // Every partition that stayed put was never revoked from its owner.
    for (i, log) in sim.log.iter().enumerate() {
        for e in log {
            if let GroupEvent::PartitionsRevoked { partitions, .. } = e {
                assert!(partitions.is_disjoint(&sim.held[i]), "member {i} revoked what it kept");
            }
        }
    }
    // A member leaves: its partitions move to the other two, balanced.
    sim.members[2].leave();
    sim.settle();
    assert_eq!(sim.members[2].state(), MemberState::Left);
    let counts: Vec<usize> = sim.held.iter().map(|h| h.len()).collect();
    assert_eq!(counts[2], 0);
    assert!(counts[0].abs_diff(counts[1]) <= 1, "{counts:?}");
    sim.assert_complete();
}

#[test]
fn three_members_eager_revoke_everything_each_round() {
    let sim = three_members(Assignor::RoundRobin);
    // Member 0 revoked everything before each of the two later rounds.
    let revokes = sim.log[0]
        .iter()
        .filter(|e| matches!(e, GroupEvent::PartitionsRevoked { .. }))
        .count();
    assert_eq!(revokes, 2);
}

#[test]
fn static_member_restart_without_rebalance() {
    let mut sim = Sim::new(&[("t", 6)]);
    for i in 0..3 {
        let mut cfg = config(&[Assignor::Range]);
        cfg.group_instance_id = Some(format!("instance-{i}"));
        sim.add(cfg);
        sim.settle();
    }
    let before = sim.held.clone();
    let generation = sim.coord.generation;
    let rebalances = sim.coord.rebalances;
    // Instance 1 closes (no LeaveGroup: static) and a new process with
    // the same group.instance.id takes its place.
    sim.members[1].leave();
    sim.step();
    assert_eq!(sim.members[1].state(), MemberState::Left);
    let mut cfg = config(&[Assignor::Range]);
    cfg.group_instance_id = Some("instance-1".into());
    let mut fresh = ClassicMember::new(cfg, sim.now);
    fresh.set_subscription(topics(&["t"]));
    sim.members[1] = fresh;
    sim.held[1].clear();
    let others_log: Vec<usize> = [0, 2].iter().map(|&i| sim.log[i].len()).collect();
    sim.settle();
    assert_eq!(sim.coord.generation, generation, "no new generation");
    assert_eq!(sim.coord.rebalances, rebalances, "no rebalance");
    assert_eq!(sim.held, before, "the restarted instance got its partitions back");
    assert_eq!(
        [0, 2].iter().map(|&i| sim.log[i].len()).collect::<Vec<_>>(),
        others_log,
        "the other members heard nothing"
    );
    // The restarted static leader: instance-0 led (first to join).
    sim.members[0].leave();
    sim.step();
    let mut cfg = config(&[Assignor::Range]);
    cfg.group_instance_id = Some("instance-0".into());
    let mut fresh = ClassicMember::new(cfg, sim.now);
    fresh.set_subscription(topics(&["t"]));
    sim.members[0] = fresh;
    sim.held[0].clear();
    sim.settle();
    assert_eq!(sim.coord.rebalances, rebalances, "skip_assignment: still no rebalance");
    assert_eq!(sim.held, before);
}
