//! The member side of the classic group protocol (JoinGroup, SyncGroup,
//! Heartbeat, LeaveGroup) as a sans-IO state machine. See the module docs
//! of [`crate::group`] for the driver's contract.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use kafka_protocol::messages::consumer_protocol_assignment::{
    ConsumerProtocolAssignment, TopicPartition as AssignedTopic,
};
use kafka_protocol::messages::consumer_protocol_subscription::{
    ConsumerProtocolSubscription, TopicPartition as OwnedTopic,
};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::assignor::{Assignor, MemberSubscription, PartitionSet, RebalanceProtocol, TopicPartition};
use super::consumer_protocol::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription, CONSUMER_PROTOCOL_VERSION,
};
use crate::error_code::KafkaCode;

/// The JoinGroup `protocol_type` of consumer groups.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

const MEMBER_ID_REQUIRED: i16 = 79;
const UNKNOWN_MEMBER_ID: i16 = 25;
const ILLEGAL_GENERATION: i16 = 22;
const FENCED_INSTANCE_ID: i16 = 82;
const REBALANCE_IN_PROGRESS: i16 = 27;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;

/// A member's settings, with the Java consumer's names and defaults.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: a static member (KIP-345). It sends no
    /// LeaveGroup on close, so a restart within the session timeout
    /// takes its partitions back without a rebalance.
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms` (45 s): how long the coordinator waits for a
    /// heartbeat, and how long this member waits for a heartbeat answer
    /// before it looks for the coordinator again.
    pub session_timeout_ms: u32,
    /// `heartbeat.interval.ms` (3 s).
    pub heartbeat_interval_ms: u64,
    /// `max.poll.interval.ms` (5 min): the application must call
    /// [`ClassicMember::handle_app_poll`] this often, or the member
    /// leaves the group; it is also the JoinGroup rebalance timeout.
    pub max_poll_interval_ms: u32,
    /// `retry.backoff.ms` (100 ms): the wait before a retried request.
    pub retry_backoff_ms: u64,
    /// `partition.assignment.strategy`, in order of preference. The
    /// Java default is `[range, cooperative-sticky]`; the rebalance
    /// protocol is cooperative only if every one is cooperative.
    pub assignors: Vec<Assignor>,
    /// `client.rack`, sent in the subscription (v3).
    pub rack_id: Option<String>,
}

impl GroupConfig {
    /// The Java consumer's defaults for `group_id`.
    pub fn new(group_id: impl Into<String>) -> Self {
        GroupConfig {
            group_id: group_id.into(),
            group_instance_id: None,
            session_timeout_ms: 45_000,
            heartbeat_interval_ms: 3_000,
            max_poll_interval_ms: 300_000,
            retry_backoff_ms: 100,
            assignors: vec![Assignor::Range, Assignor::CooperativeSticky],
            rack_id: None,
        }
    }

    /// The rebalance protocol the configured assignors all support.
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        if !self.assignors.is_empty()
            && self
                .assignors
                .iter()
                .all(|a| a.rebalance_protocol() == RebalanceProtocol::Cooperative)
        {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        }
    }
}

/// Where the member is in the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Not in a generation, or about to rejoin one (no JoinGroup in flight).
    Unjoined,
    /// Waiting for the application to finish a revocation
    /// ([`ClassicMember::handle_revoke_done`]) before it rejoins or leaves.
    Revoking,
    /// JoinGroup sent, no answer yet.
    Joining,
    /// Leader: waiting for the partition counts of the group's topics.
    AwaitingMetadata,
    /// SyncGroup to send or sent.
    AwaitingSync,
    /// In a generation with an assignment; heartbeating.
    Stable,
    /// Closing: LeaveGroup to send or sent.
    Leaving,
    /// Closed.
    Left,
    /// A fatal error ([`ClassicMember::error`]); no more requests.
    Fatal,
}

/// A request for the driver to send (to the group coordinator unless said).
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum GroupRequest {
    /// Find the group's coordinator (FindCoordinator, key type group),
    /// then call [`ClassicMember::handle_coordinator_found`].
    FindCoordinator,
    /// Fetch the partition counts of these topics from any broker (leader
    /// only), then call [`ClassicMember::handle_metadata`].
    Metadata {
        /// The topics every member subscribes to, together.
        topics: BTreeSet<String>,
    },
    /// JoinGroup; answer with [`ClassicMember::handle_join_response`].
    JoinGroup(JoinGroupRequest),
    /// SyncGroup; answer with [`ClassicMember::handle_sync_response`].
    SyncGroup(SyncGroupRequest),
    /// Heartbeat; answer with [`ClassicMember::handle_heartbeat_response`].
    Heartbeat(HeartbeatRequest),
    /// LeaveGroup; answer with [`ClassicMember::handle_leave_response`].
    LeaveGroup(LeaveGroupRequest),
}

/// Which request failed without an answer (for
/// [`ClassicMember::handle_request_failed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// FindCoordinator.
    FindCoordinator,
    /// Metadata.
    Metadata,
    /// JoinGroup.
    JoinGroup,
    /// SyncGroup.
    SyncGroup,
    /// Heartbeat.
    Heartbeat,
    /// LeaveGroup.
    LeaveGroup,
}

/// What the application must hear about (the rebalance listener).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// These partitions are now this member's (only the added ones under
    /// the cooperative protocol; emitted after every completed rebalance,
    /// possibly empty). Start each from the group's committed offset,
    /// else `auto.offset.reset`.
    PartitionsAssigned {
        /// The partitions added.
        partitions: PartitionSet,
        /// The generation they were assigned in.
        generation: i32,
    },
    /// These partitions are no longer this member's, and the member is
    /// still in `generation`: commit their offsets now (with this
    /// generation and member id), stop handing their records over, then
    /// call [`ClassicMember::handle_revoke_done`]. The member does not
    /// rejoin or leave until then.
    PartitionsRevoked {
        /// The partitions taken away.
        partitions: PartitionSet,
        /// The generation to commit with.
        generation: i32,
        /// The member id to commit with.
        member_id: String,
    },
    /// These partitions were lost: the member is no longer in the
    /// generation they belonged to (fenced, expired or reset). Another
    /// member may already own them; do not commit their offsets.
    PartitionsLost {
        /// The partitions lost.
        partitions: PartitionSet,
    },
    /// The member failed for good ([`MemberState::Fatal`]).
    Fatal(GroupError),
}

/// What [`ClassicMember::poll`] hands the driver.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Send this request.
    Send(GroupRequest),
    /// Tell the application.
    Event(GroupEvent),
}

/// A member's fatal error. Variant fields are named for what they hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum GroupError {
    /// The coordinator answered with an error that ends membership
    /// (authorization, invalid group id or session timeout, group full,
    /// inconsistent protocol, an unknown code…).
    #[error("group {group}: {api} failed: {code}")]
    Coordinator {
        group: String,
        api: &'static str,
        code: KafkaCode,
    },
    /// Another member joined with this member's `group.instance.id`.
    #[error("group {group}: group.instance.id {instance_id} was fenced by a newer member with the same id")]
    FencedInstanceId { group: String, instance_id: String },
    /// The coordinator chose a protocol this member did not offer.
    #[error("group {group}: the coordinator chose protocol {protocol:?}, which this member did not offer")]
    InconsistentProtocol { group: String, protocol: String },
    /// The member's own subscription or assignment did not encode.
    #[error("group {group}: encoding the consumer protocol: {message}")]
    Encode { group: String, message: String },
    /// A configuration that cannot work (no assignor).
    #[error("group {group}: invalid configuration: {message}")]
    Config { group: String, message: String },
}

/// The group metadata an offset commit carries (OffsetCommit,
/// TxnOffsetCommit with KIP-447): a commit from a zombie of an older
/// generation is fenced with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerGroupMetadata {
    /// `group.id`.
    pub group_id: String,
    /// The current generation.
    pub generation_id: i32,
    /// The member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub group_instance_id: Option<String>,
}

/// The leader's work between JoinGroup and SyncGroup.
#[derive(Debug, Default)]
struct LeaderRound {
    /// Every member id of the generation, in the order given (the
    /// SyncGroup lists each once).
    member_ids: Vec<String>,
    /// The decoded subscriptions (an undecodable one subscribes to nothing).
    members: Vec<MemberSubscription>,
    topics: BTreeSet<String>,
}

/// The member side of the classic group protocol.
///
/// Inputs: `handle_*` (answers, failures, time, the application's polls);
/// outputs: [`poll`](Self::poll) (requests and events) and
/// [`poll_timeout`](Self::poll_timeout) (when to call again).
#[derive(Debug)]
pub struct ClassicMember {
    config: GroupConfig,
    protocol: RebalanceProtocol,
    state: MemberState,
    subscription: BTreeSet<String>,
    member_id: String,
    generation: i32,
    protocol_name: Option<Assignor>,
    leader: bool,
    assigned: PartitionSet,
    coordinator_known: bool,
    find_inflight: bool,
    /// A JoinGroup, SyncGroup or Metadata request in flight.
    inflight: Option<RequestKind>,
    /// The generation of the heartbeat in flight.
    heartbeat_inflight: Option<i32>,
    leave_inflight: bool,
    /// A LeaveGroup to send without waiting for it (poll timeout).
    leave_to_send: Option<LeaveGroupRequest>,
    rejoin_needed: bool,
    /// The join's revocations are done (onJoinPrepare ran).
    join_prepared: bool,
    revoke_pending: bool,
    poll_expired: bool,
    round: Option<LeaderRound>,
    sync_request: Option<SyncGroupRequest>,
    /// Leader: the partition counts the last assignment used.
    assignment_snapshot: Option<BTreeMap<String, i32>>,
    next_heartbeat_at: u64,
    last_heartbeat_ok: u64,
    last_app_poll: u64,
    backoff_until: u64,
    events: VecDeque<GroupEvent>,
    error: Option<GroupError>,
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn grouped(parts: &PartitionSet) -> BTreeMap<&str, Vec<i32>> {
    let mut out: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in parts {
        out.entry(tp.topic.as_str()).or_default().push(tp.partition);
    }
    out
}

/// A decoded assignment as a set.
pub fn assignment_set(a: &ConsumerProtocolAssignment) -> PartitionSet {
    a.assigned_partitions
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| TopicPartition::new(t.topic.0.as_str(), p)))
        .collect()
}

/// A decoded subscription as the assignors see it. The generation of its
/// owned partitions is the v2+ field, else the 4-byte user data the Java
/// `CooperativeStickyAssignor` writes, else -1.
pub fn member_subscription(
    member_id: &str,
    group_instance_id: Option<&str>,
    s: &ConsumerProtocolSubscription,
) -> MemberSubscription {
    let generation = if s.generation_id >= 0 {
        s.generation_id
    } else {
        match s.user_data.as_deref() {
            Some(&[a, b, c, d]) => i32::from_be_bytes([a, b, c, d]),
            _ => -1,
        }
    };
    MemberSubscription {
        member_id: member_id.to_owned(),
        group_instance_id: group_instance_id.map(str::to_owned),
        topics: s.topics.iter().map(|t| t.as_str().to_owned()).collect(),
        owned: s
            .owned_partitions
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| TopicPartition::new(t.topic.0.as_str(), p)))
            .collect(),
        generation,
        rack_id: s.rack_id.as_ref().map(|r| r.as_str().to_owned()),
    }
}

impl ClassicMember {
    /// A member that will join as soon as it has a subscription and a
    /// coordinator. `now` is the driver's monotonic clock in milliseconds
    /// (it starts the `max.poll.interval.ms` timer).
    pub fn new(config: GroupConfig, now: u64) -> Self {
        let protocol = config.rebalance_protocol();
        let mut m = ClassicMember {
            config,
            protocol,
            state: MemberState::Unjoined,
            subscription: BTreeSet::new(),
            member_id: String::new(),
            generation: -1,
            protocol_name: None,
            leader: false,
            assigned: PartitionSet::new(),
            coordinator_known: false,
            find_inflight: false,
            inflight: None,
            heartbeat_inflight: None,
            leave_inflight: false,
            leave_to_send: None,
            rejoin_needed: false,
            join_prepared: false,
            revoke_pending: false,
            poll_expired: false,
            round: None,
            sync_request: None,
            assignment_snapshot: None,
            next_heartbeat_at: now,
            last_heartbeat_ok: now,
            last_app_poll: now,
            backoff_until: now,
            events: VecDeque::new(),
            error: None,
        };
        if m.config.assignors.is_empty() {
            let group = m.config.group_id.clone();
            m.fail(GroupError::Config {
                group,
                message: "partition.assignment.strategy is empty".into(),
            });
        }
        m
    }

    // ---- accessors ----

    /// The state (with [`MemberState::Revoking`] while a revocation waits).
    pub fn state(&self) -> MemberState {
        if self.revoke_pending && matches!(self.state, MemberState::Unjoined | MemberState::Stable) {
            MemberState::Revoking
        } else {
            self.state
        }
    }
    /// The partitions the member holds (what the application may consume).
    pub fn assigned(&self) -> &PartitionSet {
        &self.assigned
    }
    /// The current generation (-1: none).
    pub fn generation(&self) -> i32 {
        self.generation
    }
    /// The member id ("" before the first join).
    pub fn member_id(&self) -> &str {
        &self.member_id
    }
    /// Whether this member led the last join.
    pub fn is_leader(&self) -> bool {
        self.leader
    }
    /// The rebalance protocol in use.
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.protocol
    }
    /// The subscription.
    pub fn subscription(&self) -> &BTreeSet<String> {
        &self.subscription
    }
    /// The fatal error, once [`MemberState::Fatal`].
    pub fn error(&self) -> Option<&GroupError> {
        self.error.as_ref()
    }
    /// What offset commits must carry; `None` outside a generation.
    pub fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        (self.generation >= 0 && !self.member_id.is_empty()).then(|| ConsumerGroupMetadata {
            group_id: self.config.group_id.clone(),
            generation_id: self.generation,
            member_id: self.member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
        })
    }

    fn terminal(&self) -> bool {
        matches!(self.state, MemberState::Left | MemberState::Fatal)
    }

    fn is_static(&self) -> bool {
        self.config.group_instance_id.is_some()
    }

    fn group(&self) -> String {
        self.config.group_id.clone()
    }

    // ---- application inputs ----

    /// Sets the topics to subscribe to. A change while in a generation
    /// rejoins (under the cooperative protocol, partitions of topics no
    /// longer subscribed are revoked first).
    pub fn set_subscription(&mut self, topics: BTreeSet<String>) {
        if topics != self.subscription {
            self.subscription = topics;
            if self.generation >= 0 {
                self.rejoin_needed = true;
            }
        }
    }

    /// The application polled: restarts the `max.poll.interval.ms` timer;
    /// after a poll timeout, the member rejoins.
    pub fn handle_app_poll(&mut self, now: u64) {
        self.last_app_poll = now;
        self.poll_expired = false;
    }

    /// The application finished a [`GroupEvent::PartitionsRevoked`]
    /// (offsets committed): the member may rejoin or leave.
    pub fn handle_revoke_done(&mut self) {
        self.revoke_pending = false;
    }

    /// Closes the member: revokes what it holds (commit first, then
    /// [`handle_revoke_done`](Self::handle_revoke_done)), then sends
    /// LeaveGroup — unless it is a static member, which just stops
    /// heartbeating so a restart with the same `group.instance.id`
    /// rejoins without a rebalance. Ends in [`MemberState::Left`].
    pub fn leave(&mut self) {
        if self.terminal() || self.state == MemberState::Leaving {
            return;
        }
        self.release_all();
        self.state = MemberState::Leaving;
        self.inflight = None;
        self.round = None;
        self.sync_request = None;
    }

    /// Revokes everything held (lost if the generation is gone).
    fn release_all(&mut self) {
        if self.assigned.is_empty() {
            return;
        }
        let parts = std::mem::take(&mut self.assigned);
        if self.generation >= 0 && !self.member_id.is_empty() {
            self.revoke_pending = true;
            self.events.push_back(GroupEvent::PartitionsRevoked {
                partitions: parts,
                generation: self.generation,
                member_id: self.member_id.clone(),
            });
        } else {
            self.events.push_back(GroupEvent::PartitionsLost { partitions: parts });
        }
    }

    fn lose_all(&mut self) {
        if !self.assigned.is_empty() {
            let parts = std::mem::take(&mut self.assigned);
            self.events.push_back(GroupEvent::PartitionsLost { partitions: parts });
        }
    }

    /// Out of the generation: forget member id (unless `keep_member_id`)
    /// and generation, lose the partitions.
    fn reset_generation(&mut self, keep_member_id: bool) {
        self.generation = -1;
        if !keep_member_id {
            self.member_id.clear();
        }
        self.leader = false;
        self.assignment_snapshot = None;
        self.lose_all();
    }

    fn fail(&mut self, e: GroupError) {
        self.lose_all();
        self.revoke_pending = false;
        self.state = MemberState::Fatal;
        self.inflight = None;
        self.error = Some(e.clone());
        self.events.push_back(GroupEvent::Fatal(e));
    }

    fn fail_code(&mut self, api: &'static str, code: i16) {
        if code == FENCED_INSTANCE_ID {
            let instance_id = self.config.group_instance_id.clone().unwrap_or_default();
            let group = self.group();
            self.fail(GroupError::FencedInstanceId { group, instance_id });
        } else {
            let group = self.group();
            self.fail(GroupError::Coordinator {
                group,
                api,
                code: KafkaCode(code),
            });
        }
    }

    fn coordinator_lost(&mut self, now: u64) {
        self.coordinator_known = false;
        self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
    }

    /// Back to [`MemberState::Unjoined`] to rejoin (the generation kept).
    fn rejoin(&mut self, now: u64, backoff: bool) {
        if self.state == MemberState::Leaving || self.terminal() {
            return;
        }
        self.state = MemberState::Unjoined;
        self.inflight = None;
        self.round = None;
        self.sync_request = None;
        self.join_prepared = false;
        if backoff {
            self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
        }
    }

    // ---- coordinator and broker inputs ----

    /// FindCoordinator answered: requests may go to the coordinator.
    pub fn handle_coordinator_found(&mut self, now: u64) {
        self.find_inflight = false;
        self.coordinator_known = true;
        self.last_heartbeat_ok = now;
    }

    /// The partition counts of the topics a [`GroupRequest::Metadata`]
    /// asked for (a topic that does not exist is left out). Also takes
    /// unasked-for metadata refreshes: a leader whose assignment used other
    /// counts for the group's topics rejoins (a new partition gets
    /// assigned).
    pub fn handle_metadata(&mut self, counts: &BTreeMap<String, i32>, now: u64) {
        if self.state == MemberState::AwaitingMetadata && self.inflight == Some(RequestKind::Metadata) {
            self.inflight = None;
            self.assign_as_leader(counts, now);
            return;
        }
        if self.state == MemberState::Stable && self.leader {
            let changed = self
                .assignment_snapshot
                .as_ref()
                .is_some_and(|snap| snap.iter().any(|(t, n)| counts.get(t).is_some_and(|m| m != n)));
            if changed {
                self.rejoin_needed = true;
            }
        }
    }

    fn assign_as_leader(&mut self, counts: &BTreeMap<String, i32>, now: u64) {
        let Some(round) = self.round.take() else {
            self.rejoin(now, true);
            return;
        };
        let Some(assignor) = self.protocol_name else {
            self.rejoin(now, true);
            return;
        };
        // Every topic of the group, 0 for one that does not exist (yet):
        // a later count that differs makes the leader rejoin.
        let snapshot: BTreeMap<String, i32> = round
            .topics
            .iter()
            .map(|t| (t.clone(), counts.get(t).copied().unwrap_or(0)))
            .collect();
        let result = assignor.assign(&round.members, &snapshot);
        let mut assignments = Vec::with_capacity(round.member_ids.len());
        for id in &round.member_ids {
            let parts = result.get(id).cloned().unwrap_or_default();
            let mut a = ConsumerProtocolAssignment::default();
            a.assigned_partitions = grouped(&parts)
                .into_iter()
                .map(|(t, ps)| {
                    let mut at = AssignedTopic::default();
                    at.topic = TopicName(str_bytes(t));
                    at.partitions = ps;
                    at
                })
                .collect();
            match encode_assignment(&a, CONSUMER_PROTOCOL_VERSION) {
                Ok(bytes) => {
                    let mut sa = SyncGroupRequestAssignment::default();
                    sa.member_id = str_bytes(id);
                    sa.assignment = bytes;
                    assignments.push(sa);
                }
                Err(e) => {
                    let group = self.group();
                    self.fail(GroupError::Encode {
                        group,
                        message: e.to_string(),
                    });
                    return;
                }
            }
        }
        self.assignment_snapshot = Some(snapshot);
        let mut req = self.sync_base();
        req.assignments = assignments;
        self.sync_request = Some(req);
        self.state = MemberState::AwaitingSync;
    }

    fn sync_base(&self) -> SyncGroupRequest {
        let mut req = SyncGroupRequest::default();
        req.group_id = GroupId(str_bytes(&self.config.group_id));
        req.generation_id = self.generation;
        req.member_id = str_bytes(&self.member_id);
        req.group_instance_id = self.config.group_instance_id.as_deref().map(str_bytes);
        req.protocol_type = Some(StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE));
        req.protocol_name = self.protocol_name.map(|a| StrBytes::from_static_str(a.name()));
        req
    }

    /// A JoinGroup answer.
    pub fn handle_join_response(&mut self, resp: &JoinGroupResponse, now: u64) {
        if self.inflight != Some(RequestKind::JoinGroup) {
            return;
        }
        self.inflight = None;
        if self.state != MemberState::Joining {
            return;
        }
        match resp.error_code {
            0 => self.joined(resp, now),
            MEMBER_ID_REQUIRED => {
                // KIP-394: join again, at once, with the id given.
                self.member_id = resp.member_id.as_str().to_owned();
                self.rejoin(now, false);
            }
            UNKNOWN_MEMBER_ID => {
                self.reset_generation(false);
                self.rejoin(now, false);
            }
            ILLEGAL_GENERATION => {
                self.reset_generation(true);
                self.rejoin(now, false);
            }
            COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR => {
                self.coordinator_lost(now);
                self.rejoin(now, true);
            }
            COORDINATOR_LOAD_IN_PROGRESS | REBALANCE_IN_PROGRESS => self.rejoin(now, true),
            code => self.fail_code("JoinGroup", code),
        }
    }

    fn joined(&mut self, resp: &JoinGroupResponse, now: u64) {
        let offered = |name: &str| self.config.assignors.iter().copied().find(|a| a.name() == name);
        let chosen = resp.protocol_name.as_ref().and_then(|n| offered(n.as_str()));
        let type_ok = resp
            .protocol_type
            .as_ref()
            .is_none_or(|t| t.as_str() == CONSUMER_PROTOCOL_TYPE);
        let Some(assignor) = chosen.filter(|_| type_ok) else {
            let protocol = resp
                .protocol_name
                .as_ref()
                .map_or_else(String::new, |n| n.as_str().to_owned());
            let group = self.group();
            self.fail(GroupError::InconsistentProtocol { group, protocol });
            return;
        };
        self.member_id = resp.member_id.as_str().to_owned();
        self.generation = resp.generation_id;
        self.protocol_name = Some(assignor);
        self.leader = !self.member_id.is_empty() && resp.leader.as_str() == self.member_id;
        self.last_heartbeat_ok = now;
        if self.leader && !resp.skip_assignment {
            let mut round = LeaderRound::default();
            let mut seen = BTreeSet::new();
            for m in &resp.members {
                let id = m.member_id.as_str();
                if !seen.insert(id) {
                    continue;
                }
                round.member_ids.push(id.to_owned());
                // A subscription that does not decode is a member that
                // subscribes to nothing: it gets an empty assignment and
                // the rest of the group goes on.
                if let Ok((_, s)) = decode_subscription(&m.metadata) {
                    let sub = member_subscription(id, m.group_instance_id.as_ref().map(|s| s.as_str()), &s);
                    round.topics.extend(sub.topics.iter().cloned());
                    round.members.push(sub);
                }
            }
            self.round = Some(round);
            self.state = MemberState::AwaitingMetadata;
        } else {
            self.sync_request = Some(self.sync_base());
            self.state = MemberState::AwaitingSync;
        }
    }

    /// A SyncGroup answer.
    pub fn handle_sync_response(&mut self, resp: &SyncGroupResponse, now: u64) {
        if self.inflight != Some(RequestKind::SyncGroup) {
            return;
        }
        self.inflight = None;
        if self.state != MemberState::AwaitingSync {
            return;
        }
        match resp.error_code {
            0 => self.synced(resp, now),
            REBALANCE_IN_PROGRESS => self.rejoin(now, false),
            UNKNOWN_MEMBER_ID => {
                self.reset_generation(false);
                self.rejoin(now, false);
            }
            ILLEGAL_GENERATION => {
                self.reset_generation(true);
                self.rejoin(now, false);
            }
            COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR => {
                self.coordinator_lost(now);
                self.rejoin(now, true);
            }
            COORDINATOR_LOAD_IN_PROGRESS => self.rejoin(now, true),
            code => self.fail_code("SyncGroup", code),
        }
    }

    fn synced(&mut self, resp: &SyncGroupResponse, now: u64) {
        let name_ok = resp
            .protocol_name
            .as_ref()
            .is_none_or(|n| self.protocol_name.is_some_and(|a| a.name() == n.as_str()));
        let type_ok = resp
            .protocol_type
            .as_ref()
            .is_none_or(|t| t.as_str() == CONSUMER_PROTOCOL_TYPE);
        if !name_ok || !type_ok {
            let protocol = resp
                .protocol_name
                .as_ref()
                .map_or_else(String::new, |n| n.as_str().to_owned());
            let group = self.group();
            self.fail(GroupError::InconsistentProtocol { group, protocol });
            return;
        }
        // An assignment that does not decode, or names a topic this member
        // does not subscribe to, is not taken (Java's rule): rejoin.
        let new = match decode_assignment(&resp.assignment) {
            Ok((_, a)) => assignment_set(&a),
            Err(_) => {
                self.rejoin(now, true);
                return;
            }
        };
        if new.iter().any(|tp| !self.subscription.contains(&tp.topic)) {
            self.rejoin(now, true);
            return;
        }
        let revoked: PartitionSet = self.assigned.difference(&new).cloned().collect();
        let added: PartitionSet = new.difference(&self.assigned).cloned().collect();
        if !revoked.is_empty() {
            self.revoke_pending = true;
            self.events.push_back(GroupEvent::PartitionsRevoked {
                partitions: revoked,
                generation: self.generation,
                member_id: self.member_id.clone(),
            });
            if self.protocol == RebalanceProtocol::Cooperative {
                // KIP-429: rejoin so the revoked partitions can go to
                // their new owner.
                self.rejoin_needed = true;
            }
        }
        self.assigned = new;
        self.events.push_back(GroupEvent::PartitionsAssigned {
            partitions: added,
            generation: self.generation,
        });
        self.state = MemberState::Stable;
        self.last_heartbeat_ok = now;
        self.next_heartbeat_at = now.saturating_add(self.config.heartbeat_interval_ms);
    }

    /// A Heartbeat answer.
    pub fn handle_heartbeat_response(&mut self, resp: &HeartbeatResponse, now: u64) {
        let Some(generation) = self.heartbeat_inflight.take() else {
            return;
        };
        if generation != self.generation || self.state != MemberState::Stable {
            // The answer for a generation this member has left.
            return;
        }
        match resp.error_code {
            0 => self.last_heartbeat_ok = now,
            REBALANCE_IN_PROGRESS => self.rejoin_needed = true,
            UNKNOWN_MEMBER_ID => {
                self.reset_generation(false);
                self.rejoin(now, false);
            }
            ILLEGAL_GENERATION => {
                self.reset_generation(true);
                self.rejoin(now, false);
            }
            COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR => self.coordinator_lost(now),
            COORDINATOR_LOAD_IN_PROGRESS => {
                self.next_heartbeat_at = now.saturating_add(self.config.retry_backoff_ms);
            }
            code => self.fail_code("Heartbeat", code),
        }
    }

    /// A LeaveGroup answer (whatever it says, the member has left).
    pub fn handle_leave_response(&mut self, _resp: &LeaveGroupResponse) {
        if self.leave_inflight {
            self.leave_inflight = false;
            if self.state == MemberState::Leaving {
                self.state = MemberState::Left;
            }
        }
    }

    /// A request [`poll`](Self::poll) handed out got no answer (the
    /// connection failed or it timed out).
    pub fn handle_request_failed(&mut self, kind: RequestKind, now: u64) {
        match kind {
            RequestKind::FindCoordinator => {
                if self.find_inflight {
                    self.find_inflight = false;
                    self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
                }
            }
            RequestKind::Metadata => {
                if self.inflight == Some(RequestKind::Metadata) {
                    self.inflight = None;
                    self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
                }
            }
            RequestKind::JoinGroup | RequestKind::SyncGroup => {
                if self.inflight == Some(kind) {
                    self.inflight = None;
                    self.coordinator_lost(now);
                    self.rejoin(now, true);
                }
            }
            RequestKind::Heartbeat => {
                if self.heartbeat_inflight.take().is_some() {
                    self.coordinator_lost(now);
                }
            }
            RequestKind::LeaveGroup => {
                if self.leave_inflight {
                    self.leave_inflight = false;
                    if self.state == MemberState::Leaving {
                        self.state = MemberState::Left;
                    }
                }
            }
        }
    }

    /// Time passed: checks the session (no heartbeat answer within
    /// `session.timeout.ms`: find the coordinator again) and the poll
    /// deadline (no application poll within `max.poll.interval.ms`: the
    /// partitions are lost, a dynamic member sends LeaveGroup, and the
    /// member rejoins at the next [`handle_app_poll`](Self::handle_app_poll)).
    pub fn handle_timeout(&mut self, now: u64) {
        if self.terminal() || self.state == MemberState::Leaving {
            return;
        }
        let in_group = self.generation >= 0 || matches!(self.state, MemberState::AwaitingSync | MemberState::Joining);
        if in_group
            && !self.poll_expired
            && now
                >= self
                    .last_app_poll
                    .saturating_add(u64::from(self.config.max_poll_interval_ms))
        {
            self.poll_expired = true;
            if !self.is_static() && !self.member_id.is_empty() && self.coordinator_known {
                self.leave_to_send = Some(self.leave_request());
            }
            // Revocations pending are moot: the generation is gone.
            self.revoke_pending = false;
            self.reset_generation(false);
            self.rejoin(now, false);
            self.rejoin_needed = false;
            return;
        }
        if self.state == MemberState::Stable
            && self.coordinator_known
            && now
                >= self
                    .last_heartbeat_ok
                    .saturating_add(u64::from(self.config.session_timeout_ms))
        {
            self.coordinator_lost(now);
        }
    }

    fn leave_request(&self) -> LeaveGroupRequest {
        let mut req = LeaveGroupRequest::default();
        req.group_id = GroupId(str_bytes(&self.config.group_id));
        req.member_id = str_bytes(&self.member_id);
        let mut who = MemberIdentity::default();
        who.member_id = str_bytes(&self.member_id);
        who.group_instance_id = self.config.group_instance_id.as_deref().map(str_bytes);
        req.members = vec![who];
        req
    }

    /// When [`handle_timeout`](Self::handle_timeout) and
    /// [`poll`](Self::poll) next need calling (a heartbeat, a deadline,
    /// the end of a backoff): the earliest such time after `now`; `None`:
    /// only on new input.
    pub fn poll_timeout(&self, now: u64) -> Option<u64> {
        if self.terminal() {
            return None;
        }
        let mut at = Vec::with_capacity(4);
        if self.state == MemberState::Stable {
            at.push(self.next_heartbeat_at);
            at.push(
                self.last_heartbeat_ok
                    .saturating_add(u64::from(self.config.session_timeout_ms)),
            );
        }
        if self.generation >= 0 && !self.poll_expired {
            at.push(
                self.last_app_poll
                    .saturating_add(u64::from(self.config.max_poll_interval_ms)),
            );
        }
        at.push(self.backoff_until);
        // A deadline already past is waiting on an answer (a heartbeat in
        // flight, the coordinator unknown): not a reason to wake.
        at.into_iter().filter(|&t| t > now).min()
    }

    // ---- output ----

    /// The next thing to do: events first (in order), then at most one
    /// request. Call until `None`, after every input and at
    /// [`poll_timeout`](Self::poll_timeout).
    pub fn poll(&mut self, now: u64) -> Option<Action> {
        if let Some(e) = self.events.pop_front() {
            return Some(Action::Event(e));
        }
        if self.terminal() {
            return None;
        }
        self.handle_timeout(now);
        if let Some(e) = self.events.pop_front() {
            return Some(Action::Event(e));
        }
        if let Some(req) = self.leave_to_send.take() {
            if self.coordinator_known {
                return Some(Action::Send(GroupRequest::LeaveGroup(req)));
            }
        }
        if self.state == MemberState::Leaving {
            return self.poll_leaving();
        }
        if !self.coordinator_known {
            if !self.find_inflight && now >= self.backoff_until {
                self.find_inflight = true;
                return Some(Action::Send(GroupRequest::FindCoordinator));
            }
            return None;
        }
        match self.state {
            MemberState::Unjoined => self.poll_join(now),
            MemberState::Stable => {
                // The revocations before a rejoin happen in the
                // generation: heartbeats go on until JoinGroup is sent.
                if self.rejoin_needed {
                    if let Some(a) = self.poll_join(now) {
                        return Some(a);
                    }
                }
                self.poll_heartbeat(now)
            }
            MemberState::AwaitingMetadata => {
                if self.inflight.is_none() && now >= self.backoff_until {
                    let topics = self.round.as_ref().map(|r| r.topics.clone()).unwrap_or_default();
                    self.inflight = Some(RequestKind::Metadata);
                    return Some(Action::Send(GroupRequest::Metadata { topics }));
                }
                None
            }
            MemberState::AwaitingSync => {
                if self.inflight.is_none() {
                    if let Some(req) = self.sync_request.take() {
                        self.inflight = Some(RequestKind::SyncGroup);
                        return Some(Action::Send(GroupRequest::SyncGroup(req)));
                    }
                }
                None
            }
            _ => None,
        }
    }

    fn poll_leaving(&mut self) -> Option<Action> {
        if self.revoke_pending || self.leave_inflight {
            return None;
        }
        if !self.is_static() && !self.member_id.is_empty() && self.coordinator_known {
            let req = self.leave_request();
            self.leave_inflight = true;
            self.generation = -1;
            return Some(Action::Send(GroupRequest::LeaveGroup(req)));
        }
        self.generation = -1;
        self.state = MemberState::Left;
        None
    }

    fn poll_heartbeat(&mut self, now: u64) -> Option<Action> {
        if self.generation < 0 || self.heartbeat_inflight.is_some() || now < self.next_heartbeat_at {
            return None;
        }
        self.heartbeat_inflight = Some(self.generation);
        self.next_heartbeat_at = now.saturating_add(self.config.heartbeat_interval_ms);
        let mut req = HeartbeatRequest::default();
        req.group_id = GroupId(str_bytes(&self.config.group_id));
        req.generation_id = self.generation;
        req.member_id = str_bytes(&self.member_id);
        req.group_instance_id = self.config.group_instance_id.as_deref().map(str_bytes);
        Some(Action::Send(GroupRequest::Heartbeat(req)))
    }

    fn poll_join(&mut self, now: u64) -> Option<Action> {
        if self.inflight.is_some() || self.poll_expired || self.subscription.is_empty() {
            return None;
        }
        if !self.join_prepared {
            // Java's onJoinPrepare: eager gives everything up; cooperative
            // only what is no longer subscribed.
            self.join_prepared = true;
            if self.generation >= 0 && !self.member_id.is_empty() {
                let revoked: PartitionSet = match self.protocol {
                    RebalanceProtocol::Eager => std::mem::take(&mut self.assigned),
                    RebalanceProtocol::Cooperative => {
                        let gone: PartitionSet = self
                            .assigned
                            .iter()
                            .filter(|tp| !self.subscription.contains(&tp.topic))
                            .cloned()
                            .collect();
                        self.assigned.retain(|tp| !gone.contains(tp));
                        gone
                    }
                };
                if !revoked.is_empty() {
                    self.revoke_pending = true;
                    return Some(Action::Event(GroupEvent::PartitionsRevoked {
                        partitions: revoked,
                        generation: self.generation,
                        member_id: self.member_id.clone(),
                    }));
                }
            } else {
                self.lose_all();
                if let Some(e) = self.events.pop_front() {
                    return Some(Action::Event(e));
                }
            }
        }
        if self.revoke_pending || now < self.backoff_until {
            return None;
        }
        match self.join_request() {
            Ok(req) => {
                self.inflight = Some(RequestKind::JoinGroup);
                self.state = MemberState::Joining;
                self.rejoin_needed = false;
                self.join_prepared = false;
                self.leader = false;
                Some(Action::Send(GroupRequest::JoinGroup(req)))
            }
            Err(message) => {
                let group = self.group();
                self.fail(GroupError::Encode { group, message });
                self.events.pop_front().map(Action::Event)
            }
        }
    }

    /// The subscription this member sends for `assignor`.
    pub fn subscription_for(&self, assignor: Assignor) -> ConsumerProtocolSubscription {
        let mut s = ConsumerProtocolSubscription::default();
        s.topics = self.subscription.iter().map(|t| str_bytes(t)).collect();
        s.owned_partitions = grouped(&self.assigned)
            .into_iter()
            .map(|(t, ps)| {
                let mut o = OwnedTopic::default();
                o.topic = TopicName(str_bytes(t));
                o.partitions = ps;
                o
            })
            .collect();
        s.generation_id = self.generation;
        s.rack_id = self.config.rack_id.as_deref().map(str_bytes);
        if assignor == Assignor::CooperativeSticky {
            // The Java CooperativeStickyAssignor's user data: the
            // generation, for members that read subscriptions before v2.
            s.user_data = Some(Bytes::copy_from_slice(&self.generation.to_be_bytes()));
        }
        s
    }

    fn join_request(&self) -> Result<JoinGroupRequest, String> {
        let mut req = JoinGroupRequest::default();
        req.group_id = GroupId(str_bytes(&self.config.group_id));
        req.session_timeout_ms = i32::try_from(self.config.session_timeout_ms).unwrap_or(i32::MAX);
        req.rebalance_timeout_ms = i32::try_from(self.config.max_poll_interval_ms).unwrap_or(i32::MAX);
        req.member_id = str_bytes(&self.member_id);
        req.group_instance_id = self.config.group_instance_id.as_deref().map(str_bytes);
        req.protocol_type = StrBytes::from_static_str(CONSUMER_PROTOCOL_TYPE);
        for &a in &self.config.assignors {
            let metadata =
                encode_subscription(&self.subscription_for(a), CONSUMER_PROTOCOL_VERSION).map_err(|e| e.to_string())?;
            let mut p = JoinGroupRequestProtocol::default();
            p.name = StrBytes::from_static_str(a.name());
            p.metadata = metadata;
            req.protocols.push(p);
        }
        Ok(req)
    }
}
