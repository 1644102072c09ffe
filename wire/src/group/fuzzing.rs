//! The `group` fuzz target's harness: drives a [`ClassicMember`] with a
//! script of arbitrary coordinator answers (every error code, any member
//! ids, generations and protocol names, subscription and assignment bytes
//! either well-formed or raw from the input), request failures, metadata,
//! time jumps, application polls, revocation acknowledgements,
//! subscription changes and closes, and checks after every step what the
//! member promises:
//!
//! - no panic, no hang (every loop is bounded by the input);
//! - events are consistent with what the application holds: an assigned
//!   partition is not already held, a revoked or lost one is; after the
//!   events, what the application holds is exactly
//!   [`ClassicMember::assigned`];
//! - never two generations' assignments at once: a SyncGroup answer that
//!   is taken replaces the whole assignment with exactly what it decodes
//!   to, and under the eager protocol nothing is held between JoinGroup
//!   and SyncGroup;
//! - a JoinGroup carries what the member holds as `owned_partitions`,
//!   with its generation;
//! - a leader's SyncGroup gives no partition to two members, and every
//!   assignment it writes decodes;
//! - nothing is sent after a fatal error or after `Left`;
//! - `poll_timeout(now)` never names a time already past (the driver would
//!   spin);
//! - bounded memory: at most a handful of actions per poll, and what is
//!   held comes from one assignment of the input.
//!
//! Input: one flags byte (assignors, static membership), then operations
//! (see [`group`]).

use std::collections::BTreeSet;

use bytes::Bytes;
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::consumer::{
    Action848, ConsumerGroupConfig, ConsumerMember, ConsumerMemberState, GroupEvent848, IdPartition, IdPartitionSet,
};
use super::consumer_protocol::{decode_assignment, decode_subscription, encode_assignment};
use super::member::{
    assignment_set, Action, ClassicMember, GroupConfig, GroupEvent, GroupRequest, MemberState, RequestKind,
};
use super::{Assignor, PartitionSet, RebalanceProtocol, TopicPartition};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as Assignment848, TopicPartitions as TopicPartitions848,
};
use kafka_protocol::messages::ConsumerGroupHeartbeatResponse;
use uuid::Uuid;

const TOPICS: [&str; 3] = ["a", "b", "c"];
const IDS: [&str; 4] = ["", "me", "other", "x"];
const PROTOCOLS: [Option<&str>; 5] = [
    Some("range"),
    Some("roundrobin"),
    Some("cooperative-sticky"),
    Some("bogus"),
    None,
];
const CODES: [i16; 16] = [0, 0, 0, 0, 0, 79, 25, 22, 82, 27, 14, 15, 16, 30, 23, -1];

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        let i = usize::from(self.byte()) % from.len();
        from[i]
    }
    fn bytes(&mut self, n: usize) -> Bytes {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Bytes::copy_from_slice(head)
    }
    fn partitions(&mut self) -> PartitionSet {
        let n = self.byte() % 8;
        (0..n)
            .map(|_| {
                let b = self.byte();
                TopicPartition::new(TOPICS[usize::from(b % 3)], i32::from(b >> 2) % 8)
            })
            .collect()
    }
}

fn encode(p: &PartitionSet) -> Bytes {
    let mut a = ConsumerProtocolAssignment::default();
    for t in TOPICS {
        let ps: Vec<i32> = p.iter().filter(|tp| tp.topic == t).map(|tp| tp.partition).collect();
        if !ps.is_empty() {
            let mut at = AssignedTopic::default();
            at.topic = TopicName(StrBytes::from_static_str(t));
            at.partitions = ps;
            a.assigned_partitions.push(at);
        }
    }
    encode_assignment(&a, 3).expect("small assignments encode")
}

/// The harness state besides the member: what the application holds.
struct App {
    held: PartitionSet,
    /// The metadata of the last JoinGroup sent, per protocol (the leader
    /// path replays it as members' subscriptions).
    last_join: Vec<(String, Bytes)>,
    led: bool,
}

/// Drains the member's actions, checking each.
fn drain(m: &mut ClassicMember, app: &mut App, now: u64, eager: bool) {
    let terminal = matches!(m.state(), MemberState::Fatal | MemberState::Left);
    for n in 0.. {
        assert!(n < 16, "poll does not settle");
        let Some(action) = m.poll(now) else { break };
        match action {
            Action::Event(GroupEvent::PartitionsAssigned { partitions, generation }) => {
                assert!(app.held.is_disjoint(&partitions), "assigned twice");
                assert_eq!(generation, m.generation());
                app.held.extend(partitions);
            }
            Action::Event(GroupEvent::PartitionsRevoked { partitions, .. }) => {
                assert!(partitions.is_subset(&app.held), "revoked what is not held");
                app.held.retain(|tp| !partitions.contains(tp));
            }
            Action::Event(GroupEvent::PartitionsLost { partitions }) => {
                assert!(partitions.is_subset(&app.held), "lost what is not held");
                app.held.retain(|tp| !partitions.contains(tp));
            }
            Action::Event(GroupEvent::Fatal(_)) => {
                assert_eq!(m.state(), MemberState::Fatal);
            }
            Action::Send(req) => {
                assert!(!terminal, "sent {req:?} after the end");
                check_request(m, app, &req);
            }
        }
    }
    assert_eq!(&app.held, m.assigned(), "the application holds what the member says");
    if let Some(at) = m.poll_timeout(now) {
        assert!(at > now, "a wake-up in the past would spin the driver");
    }
    if eager
        && matches!(
            m.state(),
            MemberState::Joining | MemberState::AwaitingSync | MemberState::AwaitingMetadata
        )
    {
        assert!(m.assigned().is_empty(), "eager: nothing held during a rebalance");
    }
}

fn check_request(m: &ClassicMember, app: &mut App, req: &GroupRequest) {
    match req {
        GroupRequest::JoinGroup(j) => {
            app.last_join = j
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect();
            for p in &j.protocols {
                let (_, sub) = decode_subscription(&p.metadata).expect("our own subscription decodes");
                let owned: PartitionSet = sub
                    .owned_partitions
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|&p| TopicPartition::new(t.topic.0.as_str(), p)))
                    .collect();
                assert_eq!(&owned, m.assigned(), "owned_partitions is what is held");
                assert_eq!(sub.generation_id, m.generation());
            }
        }
        GroupRequest::SyncGroup(s) => {
            let mut given = PartitionSet::new();
            for a in &s.assignments {
                let (_, a) = decode_assignment(&a.assignment).expect("the leader's assignments decode");
                for tp in assignment_set(&a) {
                    assert!(given.insert(tp), "a partition given to two members");
                }
            }
            assert_eq!(s.generation_id, m.generation());
            app.led |= !s.assignments.is_empty();
        }
        GroupRequest::Heartbeat(h) => {
            assert_eq!(h.generation_id, m.generation());
            assert_eq!(h.member_id.as_str(), m.member_id());
        }
        GroupRequest::LeaveGroup(_) | GroupRequest::FindCoordinator | GroupRequest::Metadata { .. } => {}
    }
}

/// The harness. Returns normally for every input (with the number of
/// operations run); a broken promise panics.
pub fn group(data: &[u8]) -> usize {
    run(data).ops
}

/// What a run reached (for the seeds' tests).
#[derive(Debug)]
pub struct Outcome {
    /// Operations run.
    pub ops: usize,
    /// The most partitions held at once.
    pub max_held: usize,
    /// Whether the member ever sent a SyncGroup as leader.
    pub led: bool,
    /// The state at the end.
    pub state: MemberState,
}

fn run(data: &[u8]) -> Outcome {
    let mut input = Input { data };
    let flags = input.byte();
    if flags & 8 != 0 {
        return run_848(&mut input, flags);
    }
    let mut config = GroupConfig::new("g");
    config.assignors = match flags % 4 {
        0 => vec![Assignor::Range],
        1 => vec![Assignor::RoundRobin],
        2 => vec![Assignor::CooperativeSticky],
        _ => vec![Assignor::Range, Assignor::CooperativeSticky],
    };
    if flags & 4 != 0 {
        config.group_instance_id = Some("instance".into());
    }
    config.session_timeout_ms = 10_000;
    config.max_poll_interval_ms = 30_000;
    let eager = config.rebalance_protocol() == RebalanceProtocol::Eager;
    let mut now = 0u64;
    let mut m = ClassicMember::new(config, now);
    m.set_subscription(["a", "b"].iter().map(|t| t.to_string()).collect());
    let mut app = App {
        held: PartitionSet::new(),
        last_join: Vec::new(),
        led: false,
    };
    let mut ops = 0;
    let mut max_held = 0;
    while !input.data.is_empty() && ops < 512 {
        ops += 1;
        let op = input.byte();
        match op % 13 {
            0 => {}
            1 => {
                let mut r = JoinGroupResponse::default();
                r.error_code = input.pick(&CODES);
                r.generation_id = i32::from(input.byte() as i8);
                r.member_id = StrBytes::from_static_str(input.pick(&IDS));
                r.leader = StrBytes::from_static_str(input.pick(&IDS));
                r.protocol_name = input.pick(&PROTOCOLS).map(StrBytes::from_static_str);
                let b = input.byte();
                r.skip_assignment = b & 1 != 0;
                if b & 2 != 0 {
                    r.protocol_type = Some(StrBytes::from_static_str(if b & 4 != 0 {
                        "connect"
                    } else {
                        "consumer"
                    }));
                }
                for _ in 0..input.byte() % 5 {
                    let mut x = JoinGroupResponseMember::default();
                    x.member_id = StrBytes::from_static_str(input.pick(&IDS));
                    let sel = input.byte();
                    x.metadata = match (sel % 3, app.last_join.get(usize::from(sel >> 2) % 2)) {
                        (0, Some((_, md))) => md.clone(),
                        _ => {
                            let n = usize::from(input.byte());
                            input.bytes(n)
                        }
                    };
                    if sel & 0x80 != 0 {
                        x.group_instance_id = Some(StrBytes::from_static_str("other-instance"));
                    }
                    r.members.push(x);
                }
                m.handle_join_response(&r, now);
            }
            2 => {
                let mut r = SyncGroupResponse::default();
                r.error_code = input.pick(&CODES);
                let sel = input.byte();
                let expected = if sel & 1 == 0 {
                    let p = input.partitions();
                    r.assignment = encode(&p);
                    Some(p)
                } else {
                    let n = usize::from(input.byte());
                    r.assignment = input.bytes(n);
                    decode_assignment(&r.assignment).ok().map(|(_, a)| assignment_set(&a))
                };
                if sel & 2 != 0 {
                    r.protocol_name = input.pick(&PROTOCOLS).map(StrBytes::from_static_str);
                }
                let before = (m.state(), m.generation());
                m.handle_sync_response(&r, now);
                if before.0 == MemberState::AwaitingSync
                    && matches!(m.state(), MemberState::Stable | MemberState::Revoking)
                {
                    // Taken: the whole assignment is exactly this answer's.
                    assert_eq!(Some(m.assigned()), expected.as_ref(), "assignment taken whole");
                    assert_eq!(m.generation(), before.1);
                }
            }
            3 => {
                let mut r = HeartbeatResponse::default();
                r.error_code = input.pick(&CODES);
                m.handle_heartbeat_response(&r, now);
            }
            4 => m.handle_leave_response(&LeaveGroupResponse::default()),
            5 => {
                let kind = input.pick(&[
                    RequestKind::FindCoordinator,
                    RequestKind::Metadata,
                    RequestKind::JoinGroup,
                    RequestKind::SyncGroup,
                    RequestKind::Heartbeat,
                    RequestKind::LeaveGroup,
                ]);
                m.handle_request_failed(kind, now);
            }
            6 => m.handle_coordinator_found(now),
            7 => {
                let counts = TOPICS
                    .iter()
                    .filter_map(|t| {
                        let b = input.byte();
                        (b & 8 == 0).then(|| (t.to_string(), i32::from(b % 8) - 1))
                    })
                    .collect();
                m.handle_metadata(&counts, now);
            }
            8 => {
                let b = u64::from(input.byte());
                now = now.saturating_add(if b & 0x80 != 0 { (b & 0x7f) * 1_000 } else { b * 20 });
            }
            9 => m.handle_app_poll(now),
            10 => m.handle_revoke_done(),
            11 => {
                let b = input.byte();
                let topics: BTreeSet<String> = TOPICS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| b & (1 << i) != 0)
                    .map(|(_, t)| t.to_string())
                    .collect();
                m.set_subscription(topics);
            }
            _ => {
                if input.byte().is_multiple_of(4) {
                    m.leave();
                }
            }
        }
        m.handle_timeout(now);
        drain(&mut m, &mut app, now, eager);
        assert!(app.held.len() <= 24, "more than one assignment's worth held");
        max_held = max_held.max(app.held.len());
    }
    Outcome {
        ops,
        max_held,
        led: app.led,
        state: m.state(),
    }
}

const CODES_848: [i16; 12] = [0, 0, 0, 0, 110, 25, 15, 16, 14, 111, 81, -1];

fn id_partitions(input: &mut Input<'_>) -> IdPartitionSet {
    let n = input.byte() % 8;
    (0..n)
        .map(|_| {
            let b = input.byte();
            IdPartition {
                topic_id: Uuid::from_u128(u128::from(b & 1)),
                partition: i32::from(b >> 1) % 8,
            }
        })
        .collect()
}

/// The KIP-848 member (flags bit 3): the same promises, with
/// reconciliation: what the heartbeats report as owned covers what the
/// application holds and what it is still committing.
fn run_848(input: &mut Input<'_>, flags: u8) -> Outcome {
    let mut config = ConsumerGroupConfig::new("g", "m");
    if flags & 4 != 0 {
        config.group_instance_id = Some("instance".into());
    }
    config.max_poll_interval_ms = 30_000;
    let mut now = 0u64;
    let mut m = ConsumerMember::new(config, now);
    m.set_subscription(["a".to_string()].into());
    let mut held = IdPartitionSet::new();
    let mut committing = IdPartitionSet::new();
    let (mut ops, mut max_held) = (0, 0);
    while !input.data.is_empty() && ops < 512 {
        ops += 1;
        match input.byte() % 10 {
            0 => {}
            1 => {
                let mut r = ConsumerGroupHeartbeatResponse::default();
                r.error_code = input.pick(&CODES_848);
                r.member_epoch = i32::from(input.byte() as i8);
                r.heartbeat_interval_ms = i32::from(input.byte()) * 100 - 100;
                let sel = input.byte();
                if sel & 1 != 0 {
                    let mut a = Assignment848::default();
                    let set = id_partitions(input);
                    for p in &set {
                        let mut t = TopicPartitions848::default();
                        t.topic_id = p.topic_id;
                        t.partitions = vec![p.partition];
                        a.topic_partitions.push(t);
                    }
                    r.assignment = Some(a);
                }
                if sel & 2 != 0 {
                    r.member_id = Some(StrBytes::from_static_str("other"));
                }
                m.handle_heartbeat_response(&r, now);
            }
            2 => m.handle_heartbeat_failed(now),
            3 => m.handle_coordinator_found(),
            4 => m.handle_find_coordinator_failed(now),
            5 => {
                let b = u64::from(input.byte());
                now = now.saturating_add(if b & 0x80 != 0 { (b & 0x7f) * 1_000 } else { b * 20 });
            }
            6 => m.handle_app_poll(now),
            7 => {
                m.handle_revoke_done();
                committing.clear();
            }
            8 => {
                let b = input.byte();
                m.set_subscription(
                    TOPICS
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| b & (1 << i) != 0)
                        .map(|(_, t)| t.to_string())
                        .collect(),
                );
            }
            _ => {
                if input.byte().is_multiple_of(4) {
                    m.leave();
                }
            }
        }
        let terminal = matches!(m.state(), ConsumerMemberState::Fatal | ConsumerMemberState::Left);
        for n in 0.. {
            assert!(n < 16, "poll does not settle");
            let Some(action) = m.poll(now) else { break };
            match action {
                Action848::Event(GroupEvent848::PartitionsAssigned { partitions, epoch }) => {
                    assert!(held.is_disjoint(&partitions) && committing.is_disjoint(&partitions));
                    assert_eq!(epoch, m.epoch());
                    held.extend(partitions);
                }
                Action848::Event(GroupEvent848::PartitionsRevoked { partitions, .. }) => {
                    assert!(partitions.is_subset(&held));
                    held.retain(|p| !partitions.contains(p));
                    committing.extend(partitions);
                }
                Action848::Event(GroupEvent848::PartitionsLost { partitions }) => {
                    let both: IdPartitionSet = held.union(&committing).copied().collect();
                    assert!(partitions.is_subset(&both));
                    held.retain(|p| !partitions.contains(p));
                    committing.retain(|p| !partitions.contains(p));
                }
                Action848::Event(GroupEvent848::Fatal(_)) => assert_eq!(m.state(), ConsumerMemberState::Fatal),
                Action848::FindCoordinator => assert!(!terminal),
                Action848::Heartbeat(h) => {
                    assert!(!terminal, "heartbeat after the end");
                    if h.member_epoch >= 0 {
                        let reported: IdPartitionSet = h
                            .topic_partitions
                            .iter()
                            .flatten()
                            .flat_map(|t| {
                                t.partitions.iter().map(|&p| IdPartition {
                                    topic_id: t.topic_id,
                                    partition: p,
                                })
                            })
                            .collect();
                        let both: IdPartitionSet = held.union(&committing).copied().collect();
                        assert_eq!(reported, both, "owned as reported = held + being committed");
                    }
                }
            }
        }
        assert_eq!(&held, m.assigned());
        if let Some(at) = m.poll_timeout(now) {
            assert!(at > now, "a wake-up in the past would spin the driver");
        }
        max_held = max_held.max(held.len());
    }
    Outcome {
        ops,
        max_held,
        led: false,
        state: MemberState::Unjoined,
    }
}

/// Seeds for the corpus: a follower joining and syncing, a leader
/// assigning from replayed subscriptions, and error codes after that.
#[cfg(test)]
pub(crate) fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    // ops: 6 found, 0 poll (join sent), 1 join ok, 0 poll (sync), 2 sync
    // with an encoded assignment, 8 time, 3 heartbeat answers.
    let follower = vec![
        0, 6, 0, 1, 0, 10, 1, 2, 0, 0, 0, 2, 0, 0, 3, 0, 4, 9, 8, 150, 3, 0, 8, 150, 3, 9, 10, 0,
    ];
    // Leader: join ok with member "me" leading, two members replaying our
    // own subscription; metadata; sync; then REBALANCE_IN_PROGRESS.
    let leader = vec![
        2, 6, 0, 1, 0, 1, 1, 1, 2, 0, 2, 1, 0, 2, 0, 0, 7, 3, 2, 4, 2, 0, 0, 2, 0, 1, 3, 4, 8, 150, 3, 9, 10, 0, 9, 10,
        0,
    ];
    // Static member: joins, syncs, then FENCED_INSTANCE_ID.
    let fenced = vec![
        4 | 3,
        6,
        0,
        1,
        0,
        10,
        1,
        2,
        0,
        0,
        0,
        2,
        0,
        0,
        2,
        0,
        4,
        8,
        0x83,
        9,
        3,
        8,
        9,
    ];
    // KIP-848: found, the join heartbeat answered with epoch 1 and three
    // partitions, then epoch 2 taking one away (revoked, committed), then
    // FENCED_MEMBER_EPOCH.
    let kip848 = vec![
        8, 3, 0, 1, 0, 1, 50, 1, 3, 0, 2, 4, 5, 0x85, 1, 0, 2, 50, 1, 2, 0, 2, 7, 0, 5, 0x85, 1, 4, 0, 0, 0,
    ];
    vec![
        ("follower", follower),
        ("leader", leader),
        ("fenced", fenced),
        ("kip848", kip848),
    ]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn arbitrary_scripts_keep_the_promises(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            group(&data);
        }

        #[test]
        fn mutated_seeds_keep_the_promises(
            pick in 0usize..4,
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        ) {
            let mut seed = seeds()[pick].1.clone();
            for (at, b) in edits {
                let i = at % seed.len();
                seed[i] = b;
            }
            group(&seed);
        }
    }

    #[test]
    fn seeds_reach_what_they_are_for() {
        let seeds = seeds();
        let follower = run(&seeds[0].1);
        assert!(follower.max_held > 0, "{follower:?}");
        let leader = run(&seeds[1].1);
        assert!(leader.led && leader.max_held > 0, "{leader:?}");
        let fenced = run(&seeds[2].1);
        assert!(fenced.max_held > 0 && fenced.state == MemberState::Fatal, "{fenced:?}");
        let kip848 = run(&seeds[3].1);
        assert!(kip848.max_held >= 2 && kip848.ops > 8, "{kip848:?}");
    }
}
