//! The member side of the KIP-848 consumer protocol (`group.protocol =
//! consumer`): one ConsumerGroupHeartbeat request drives everything; the
//! broker assigns (`uniform` or `range`), the member reconciles.
//!
//! - **Join**: a heartbeat with epoch 0, the subscription, the server
//!   assignor and the rebalance timeout. The member id is the client's
//!   own (Kafka 4: a UUID the client makes; here a parameter, since the
//!   wire crate draws no random numbers). Every heartbeat carries the full
//!   fields; the broker takes them as they are.
//! - **Reconciliation**: an answer with an assignment sets the target.
//!   Partitions owned but not in the target are revoked first
//!   ([`GroupEvent848::PartitionsRevoked`]; the application commits, then
//!   [`ConsumerMember::handle_revoke_done`]); until then the heartbeats go
//!   on reporting them as owned, so the broker does not hand them to
//!   another member before the commit. Then the added partitions are
//!   assigned and the next heartbeat (sent at once) reports the new owned
//!   set. Partitions are named by topic id; the driver maps ids to names
//!   from metadata.
//! - **Epochs and fencing**: FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID:
//!   every partition is lost (no commit: another member may own them), and
//!   the member rejoins with epoch 0 and the same member id.
//! - **Errors**: COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR rediscover,
//!   COORDINATOR_LOAD_IN_PROGRESS retries after the backoff; everything
//!   else (UNRELEASED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED,
//!   UNSUPPORTED_ASSIGNOR, authorization, an unknown code…) is fatal.
//! - **Timers**: heartbeats every `heartbeat_interval_ms` the broker
//!   gives; no [`ConsumerMember::handle_app_poll`] within
//!   `max.poll.interval.ms`: the partitions are lost and the member leaves
//!   (epoch -1, or -2 for a static member), rejoining at the next poll.
//! - **Leave** ([`ConsumerMember::leave`]): revoke everything (commit),
//!   then a heartbeat with epoch -1 (-2 static), then `Left`.
//!
//! - **Regular expressions** ([`ConsumerMember::set_subscription_regex`],
//!   ConsumerGroupHeartbeat v1's `subscribed_topic_regex`, KIP-848): the
//!   broker resolves the pattern (RE2/J syntax, whole-name match) against
//!   its topics, including ones created later; the member then sends no
//!   topic names.
//!
//! Not here: sparse heartbeats.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::member::{ConsumerGroupMetadata, GroupError};
use crate::error_code::KafkaCode;

const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;

/// The epoch a member leaves with.
pub const LEAVE_EPOCH: i32 = -1;
/// The epoch a static member leaves with (it may come back).
pub const STATIC_LEAVE_EPOCH: i32 = -2;
/// The most milliseconds between heartbeats the member accepts from the
/// broker (a larger interval is clamped to it).
pub const MAX_HEARTBEAT_INTERVAL_MS: u64 = 60_000;

/// A partition of a topic named by its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdPartition {
    /// The topic id.
    pub topic_id: Uuid,
    /// The partition number.
    pub partition: i32,
}

/// A set of partitions by topic id.
pub type IdPartitionSet = BTreeSet<IdPartition>;

/// The member's settings.
#[derive(Clone, Debug)]
pub struct ConsumerGroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// The member id: the client's own (a UUID in base64 for the Java
    /// client); made by the driver.
    pub member_id: String,
    /// `group.instance.id` (static membership).
    pub group_instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// `group.remote.assignor` (`uniform`, `range`; `None`: the broker's default).
    pub server_assignor: Option<String>,
    /// `max.poll.interval.ms`, also the rebalance timeout.
    pub max_poll_interval_ms: u32,
    /// `retry.backoff.ms`.
    pub retry_backoff_ms: u64,
}

impl ConsumerGroupConfig {
    /// The Java defaults for a group and a member id.
    pub fn new(group_id: impl Into<String>, member_id: impl Into<String>) -> Self {
        ConsumerGroupConfig {
            group_id: group_id.into(),
            member_id: member_id.into(),
            group_instance_id: None,
            rack_id: None,
            server_assignor: None,
            max_poll_interval_ms: 300_000,
            retry_backoff_ms: 100,
        }
    }
}

/// Where the member is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsumerMemberState {
    /// Not in the group (no subscription yet, or after a poll timeout).
    Unjoined,
    /// Joining: epoch 0 sent or to send.
    Joining,
    /// In the group with an epoch.
    Stable,
    /// Waiting for the application to commit a revocation.
    Reconciling,
    /// Closing.
    Leaving,
    /// Closed.
    Left,
    /// A fatal error.
    Fatal,
}

/// What the driver must do or tell.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Action848 {
    /// Find the coordinator, then [`ConsumerMember::handle_coordinator_found`].
    FindCoordinator,
    /// Send to the coordinator, answer with
    /// [`ConsumerMember::handle_heartbeat_response`].
    Heartbeat(ConsumerGroupHeartbeatRequest),
    /// Tell the application.
    Event(GroupEvent848),
}

/// The rebalance listener's events, by topic id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupEvent848 {
    /// Added partitions (start from the committed offset).
    PartitionsAssigned {
        /// The partitions.
        partitions: IdPartitionSet,
        /// The member epoch.
        epoch: i32,
    },
    /// Commit these, stop consuming them, then call
    /// [`ConsumerMember::handle_revoke_done`].
    PartitionsRevoked {
        /// The partitions.
        partitions: IdPartitionSet,
        /// The member epoch to commit with.
        epoch: i32,
    },
    /// Lost: do not commit.
    PartitionsLost {
        /// The partitions.
        partitions: IdPartitionSet,
    },
    /// The member failed for good.
    Fatal(GroupError),
}

/// The KIP-848 member.
#[derive(Debug)]
pub struct ConsumerMember {
    config: ConsumerGroupConfig,
    state: ConsumerMemberState,
    subscription: BTreeSet<String>,
    /// KIP-848 `subscribed_topic_regex` (replaces the names when set).
    regex: Option<String>,
    epoch: i32,
    owned: IdPartitionSet,
    /// Revoked, being committed: still reported as owned.
    revoking: IdPartitionSet,
    target: Option<IdPartitionSet>,
    coordinator_known: bool,
    find_inflight: bool,
    /// The epoch of the heartbeat in flight.
    inflight: Option<i32>,
    heartbeat_interval_ms: u64,
    next_heartbeat_at: u64,
    last_app_poll: u64,
    backoff_until: u64,
    poll_expired: bool,
    /// Send a leave heartbeat with this epoch (poll timeout), not waiting.
    leave_epoch: Option<i32>,
    events: VecDeque<GroupEvent848>,
    error: Option<GroupError>,
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

impl ConsumerMember {
    /// A member; `now` in the driver's monotonic milliseconds.
    pub fn new(config: ConsumerGroupConfig, now: u64) -> Self {
        ConsumerMember {
            config,
            state: ConsumerMemberState::Unjoined,
            subscription: BTreeSet::new(),
            regex: None,
            epoch: 0,
            owned: IdPartitionSet::new(),
            revoking: IdPartitionSet::new(),
            target: None,
            coordinator_known: false,
            find_inflight: false,
            inflight: None,
            heartbeat_interval_ms: 5_000,
            next_heartbeat_at: now,
            last_app_poll: now,
            backoff_until: now,
            poll_expired: false,
            leave_epoch: None,
            events: VecDeque::new(),
            error: None,
        }
    }

    /// The state.
    pub fn state(&self) -> ConsumerMemberState {
        self.state
    }
    /// The member epoch (0: joining).
    pub fn epoch(&self) -> i32 {
        self.epoch
    }
    /// What the application holds.
    pub fn assigned(&self) -> &IdPartitionSet {
        &self.owned
    }
    /// The fatal error.
    pub fn error(&self) -> Option<&GroupError> {
        self.error.as_ref()
    }
    /// The member id (the client's, or the one the broker answered with).
    pub fn member_id(&self) -> &str {
        &self.config.member_id
    }
    /// The regular expression subscribed to, if any.
    pub fn subscription_regex(&self) -> Option<&str> {
        self.regex.as_deref()
    }
    /// What offset commits must carry (the member epoch in
    /// `generation_id`); `None` while the member has no epoch.
    pub fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        (self.epoch > 0).then(|| ConsumerGroupMetadata {
            group_id: self.config.group_id.clone(),
            generation_id: self.epoch,
            member_id: self.config.member_id.clone(),
            group_instance_id: self.config.group_instance_id.clone(),
        })
    }

    fn subscribed(&self) -> bool {
        !self.subscription.is_empty() || self.regex.is_some()
    }

    fn terminal(&self) -> bool {
        matches!(self.state, ConsumerMemberState::Left | ConsumerMemberState::Fatal)
    }

    /// Sets the topics subscribed to (the next heartbeat carries them).
    pub fn set_subscription(&mut self, topics: BTreeSet<String>) {
        if topics != self.subscription {
            self.subscription = topics;
            self.next_heartbeat_at = 0;
        }
    }

    /// Subscribes by regular expression instead of (or, with `None`, no
    /// longer by) [`set_subscription`](Self::set_subscription)'s names;
    /// the broker matches it against whole topic names. Needs
    /// ConsumerGroupHeartbeat v1.
    pub fn set_subscription_regex(&mut self, regex: Option<String>) {
        if regex != self.regex {
            self.regex = regex;
            self.next_heartbeat_at = 0;
        }
    }

    /// The application polled.
    pub fn handle_app_poll(&mut self, now: u64) {
        self.last_app_poll = now;
        self.poll_expired = false;
    }

    /// The application committed a revocation.
    pub fn handle_revoke_done(&mut self) {
        if !self.revoking.is_empty() {
            self.revoking.clear();
            // Tell the broker at once.
            self.next_heartbeat_at = 0;
        }
        if self.state == ConsumerMemberState::Reconciling {
            self.state = ConsumerMemberState::Stable;
        }
    }

    /// FindCoordinator answered.
    pub fn handle_coordinator_found(&mut self) {
        self.find_inflight = false;
        self.coordinator_known = true;
    }

    /// FindCoordinator failed.
    pub fn handle_find_coordinator_failed(&mut self, now: u64) {
        self.find_inflight = false;
        self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
    }

    /// A heartbeat got no answer.
    pub fn handle_heartbeat_failed(&mut self, now: u64) {
        if self.inflight.take().is_none() {
            return;
        }
        if self.state == ConsumerMemberState::Leaving {
            self.state = ConsumerMemberState::Left;
            return;
        }
        self.coordinator_known = false;
        self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
    }

    /// Closes: revoke everything (commit), then leave.
    pub fn leave(&mut self) {
        if self.terminal() || self.state == ConsumerMemberState::Leaving {
            return;
        }
        let all: IdPartitionSet = std::mem::take(&mut self.owned);
        self.target = None;
        if !all.is_empty() && self.epoch > 0 {
            self.revoking.extend(all.iter().copied());
            self.events.push_back(GroupEvent848::PartitionsRevoked {
                partitions: all,
                epoch: self.epoch,
            });
        } else if !all.is_empty() {
            self.events.push_back(GroupEvent848::PartitionsLost { partitions: all });
        }
        self.state = ConsumerMemberState::Leaving;
    }

    fn lose_all(&mut self) {
        let mut all = std::mem::take(&mut self.owned);
        all.append(&mut self.revoking);
        self.target = None;
        if !all.is_empty() {
            self.events.push_back(GroupEvent848::PartitionsLost { partitions: all });
        }
    }

    fn fail(&mut self, code: i16) {
        self.lose_all();
        self.state = ConsumerMemberState::Fatal;
        let e = GroupError::Coordinator {
            group: self.config.group_id.clone(),
            api: "ConsumerGroupHeartbeat",
            code: KafkaCode(code),
        };
        self.error = Some(e.clone());
        self.events.push_back(GroupEvent848::Fatal(e));
    }

    /// A ConsumerGroupHeartbeat answer.
    pub fn handle_heartbeat_response(&mut self, resp: &ConsumerGroupHeartbeatResponse, now: u64) {
        let Some(sent_epoch) = self.inflight.take() else {
            return;
        };
        if self.state == ConsumerMemberState::Leaving {
            if sent_epoch < 0 {
                self.state = ConsumerMemberState::Left;
            }
            return;
        }
        if self.terminal() || sent_epoch < 0 {
            return;
        }
        match resp.error_code {
            0 => {
                if let Some(id) = &resp.member_id {
                    if !id.is_empty() {
                        self.config.member_id = id.as_str().to_owned();
                    }
                }
                self.epoch = resp.member_epoch;
                self.heartbeat_interval_ms = u64::try_from(resp.heartbeat_interval_ms)
                    .unwrap_or(0)
                    .min(MAX_HEARTBEAT_INTERVAL_MS);
                self.next_heartbeat_at = now.saturating_add(self.heartbeat_interval_ms);
                if let Some(a) = &resp.assignment {
                    self.target = Some(
                        a.topic_partitions
                            .iter()
                            .flat_map(|t| {
                                t.partitions.iter().map(|&p| IdPartition {
                                    topic_id: t.topic_id,
                                    partition: p,
                                })
                            })
                            .collect(),
                    );
                }
                if self.state == ConsumerMemberState::Joining {
                    self.state = ConsumerMemberState::Stable;
                }
            }
            FENCED_MEMBER_EPOCH | UNKNOWN_MEMBER_ID => {
                // Fenced: lost, rejoin with epoch 0 and the same id.
                self.lose_all();
                self.epoch = 0;
                self.state = ConsumerMemberState::Joining;
                self.next_heartbeat_at = now;
            }
            COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR => {
                self.coordinator_known = false;
                self.backoff_until = now.saturating_add(self.config.retry_backoff_ms);
            }
            COORDINATOR_LOAD_IN_PROGRESS => {
                self.next_heartbeat_at = now.saturating_add(self.config.retry_backoff_ms);
            }
            code => self.fail(code),
        }
    }

    /// Time passed: the poll deadline.
    pub fn handle_timeout(&mut self, now: u64) {
        if self.terminal() || self.state == ConsumerMemberState::Leaving || self.poll_expired {
            return;
        }
        if self.epoch > 0
            && now
                >= self
                    .last_app_poll
                    .saturating_add(u64::from(self.config.max_poll_interval_ms))
        {
            self.poll_expired = true;
            self.lose_all();
            self.leave_epoch = Some(if self.config.group_instance_id.is_some() {
                STATIC_LEAVE_EPOCH
            } else {
                LEAVE_EPOCH
            });
            self.epoch = 0;
            self.state = ConsumerMemberState::Unjoined;
        }
    }

    /// When to call [`poll`](Self::poll) again: the earliest deadline
    /// after `now` (a heartbeat, the end of a backoff, the poll deadline).
    pub fn poll_timeout(&self, now: u64) -> Option<u64> {
        if self.terminal() {
            return None;
        }
        let mut at = vec![self.next_heartbeat_at, self.backoff_until];
        if self.epoch > 0 && !self.poll_expired {
            at.push(
                self.last_app_poll
                    .saturating_add(u64::from(self.config.max_poll_interval_ms)),
            );
        }
        at.into_iter().filter(|&t| t > now).min()
    }

    fn request(&self, epoch: i32) -> ConsumerGroupHeartbeatRequest {
        let mut r = ConsumerGroupHeartbeatRequest::default();
        r.group_id = GroupId(str_bytes(&self.config.group_id));
        r.member_id = str_bytes(&self.config.member_id);
        r.member_epoch = epoch;
        r.instance_id = self.config.group_instance_id.as_deref().map(str_bytes);
        if epoch >= 0 {
            r.rack_id = self.config.rack_id.as_deref().map(str_bytes);
            r.rebalance_timeout_ms = i32::try_from(self.config.max_poll_interval_ms).unwrap_or(i32::MAX);
            match &self.regex {
                Some(re) => r.subscribed_topic_regex = Some(str_bytes(re)),
                None => {
                    r.subscribed_topic_names = Some(self.subscription.iter().map(|t| TopicName(str_bytes(t))).collect())
                }
            }
            r.server_assignor = self.config.server_assignor.as_deref().map(str_bytes);
            let mut by: BTreeMap<Uuid, Vec<i32>> = BTreeMap::new();
            for p in self.owned.iter().chain(self.revoking.iter()) {
                by.entry(p.topic_id).or_default().push(p.partition);
            }
            r.topic_partitions = Some(
                by.into_iter()
                    .map(|(topic_id, partitions)| {
                        let mut t = TopicPartitions::default();
                        t.topic_id = topic_id;
                        t.partitions = partitions;
                        t
                    })
                    .collect(),
            );
        }
        r
    }

    /// The next action: events first, then at most one request.
    pub fn poll(&mut self, now: u64) -> Option<Action848> {
        if let Some(e) = self.events.pop_front() {
            return Some(Action848::Event(e));
        }
        if self.terminal() {
            return None;
        }
        self.handle_timeout(now);
        if let Some(e) = self.events.pop_front() {
            return Some(Action848::Event(e));
        }
        if !self.coordinator_known {
            if self.state == ConsumerMemberState::Leaving && self.revoking.is_empty() {
                self.state = ConsumerMemberState::Left;
                return None;
            }
            if !self.find_inflight && now >= self.backoff_until {
                self.find_inflight = true;
                return Some(Action848::FindCoordinator);
            }
            return None;
        }
        if let Some(epoch) = self.leave_epoch.take() {
            if self.inflight.is_none() {
                self.inflight = Some(epoch);
                return Some(Action848::Heartbeat(self.request(epoch)));
            }
        }
        if self.inflight.is_some() {
            return None;
        }
        match self.state {
            ConsumerMemberState::Leaving => {
                if !self.revoking.is_empty() {
                    return None;
                }
                if self.epoch <= 0 && self.config.group_instance_id.is_none() {
                    self.state = ConsumerMemberState::Left;
                    return None;
                }
                let epoch = if self.config.group_instance_id.is_some() {
                    STATIC_LEAVE_EPOCH
                } else {
                    LEAVE_EPOCH
                };
                self.inflight = Some(epoch);
                Some(Action848::Heartbeat(self.request(epoch)))
            }
            ConsumerMemberState::Unjoined => {
                if self.poll_expired || !self.subscribed() || now < self.backoff_until {
                    return None;
                }
                self.state = ConsumerMemberState::Joining;
                self.epoch = 0;
                self.inflight = Some(0);
                self.next_heartbeat_at = now.saturating_add(self.heartbeat_interval_ms);
                Some(Action848::Heartbeat(self.request(0)))
            }
            ConsumerMemberState::Joining | ConsumerMemberState::Stable | ConsumerMemberState::Reconciling => {
                if let Some(a) = self.reconcile() {
                    return Some(a);
                }
                if now < self.next_heartbeat_at || now < self.backoff_until {
                    return None;
                }
                self.inflight = Some(self.epoch);
                self.next_heartbeat_at = now.saturating_add(self.heartbeat_interval_ms);
                Some(Action848::Heartbeat(self.request(self.epoch)))
            }
            ConsumerMemberState::Left | ConsumerMemberState::Fatal => None,
        }
    }

    /// Moves toward the target: revoke first, then assign.
    fn reconcile(&mut self) -> Option<Action848> {
        if !self.revoking.is_empty() || self.epoch <= 0 {
            return None;
        }
        let target = self.target.as_ref()?;
        let revoked: IdPartitionSet = self.owned.difference(target).copied().collect();
        if !revoked.is_empty() {
            self.owned.retain(|p| !revoked.contains(p));
            self.revoking = revoked.clone();
            self.state = ConsumerMemberState::Reconciling;
            return Some(Action848::Event(GroupEvent848::PartitionsRevoked {
                partitions: revoked,
                epoch: self.epoch,
            }));
        }
        let target = self.target.take()?;
        let added: IdPartitionSet = target.difference(&self.owned).copied().collect();
        self.owned = target;
        if added.is_empty() {
            return None;
        }
        // Report the new owned set at once.
        self.next_heartbeat_at = 0;
        Some(Action848::Event(GroupEvent848::PartitionsAssigned {
            partitions: added,
            epoch: self.epoch,
        }))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions as RespTopic};

    use super::*;

    const T: Uuid = Uuid::from_u128(7);

    fn ps(list: &[i32]) -> IdPartitionSet {
        list.iter()
            .map(|&p| IdPartition {
                topic_id: T,
                partition: p,
            })
            .collect()
    }

    fn ok(epoch: i32, assignment: Option<&[i32]>) -> ConsumerGroupHeartbeatResponse {
        let mut r = ConsumerGroupHeartbeatResponse::default();
        r.member_epoch = epoch;
        r.heartbeat_interval_ms = 5_000;
        r.assignment = assignment.map(|a| {
            let mut x = Assignment::default();
            let mut t = RespTopic::default();
            t.topic_id = T;
            t.partitions = a.to_vec();
            x.topic_partitions = vec![t];
            x
        });
        r
    }

    fn err(code: i16) -> ConsumerGroupHeartbeatResponse {
        let mut r = ConsumerGroupHeartbeatResponse::default();
        r.error_code = code;
        r
    }

    fn drain(m: &mut ConsumerMember, now: u64) -> Vec<Action848> {
        let mut out = Vec::new();
        while let Some(a) = m.poll(now) {
            out.push(a);
            assert!(out.len() < 50);
        }
        out
    }

    fn heartbeat(actions: &[Action848]) -> ConsumerGroupHeartbeatRequest {
        actions
            .iter()
            .find_map(|a| match a {
                Action848::Heartbeat(h) => Some(h.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no heartbeat in {actions:?}"))
    }

    fn owned(h: &ConsumerGroupHeartbeatRequest) -> Vec<i32> {
        h.topic_partitions
            .as_ref()
            .unwrap()
            .iter()
            .flat_map(|t| t.partitions.clone())
            .collect()
    }

    fn joined(partitions: &[i32]) -> ConsumerMember {
        let mut m = ConsumerMember::new(ConsumerGroupConfig::new("g", "m1"), 0);
        m.set_subscription(["t".to_string()].into());
        assert_eq!(drain(&mut m, 0), vec![Action848::FindCoordinator]);
        m.handle_coordinator_found();
        let h = heartbeat(&drain(&mut m, 0));
        assert_eq!((h.member_epoch, h.member_id.as_str()), (0, "m1"));
        assert_eq!(h.subscribed_topic_names.as_ref().unwrap().len(), 1);
        m.handle_heartbeat_response(&ok(1, Some(partitions)), 1);
        let a = drain(&mut m, 1);
        assert!(a.contains(&Action848::Event(GroupEvent848::PartitionsAssigned {
            partitions: ps(partitions),
            epoch: 1
        })));
        // The new owned set goes out at once.
        assert_eq!(owned(&heartbeat(&a)), partitions);
        m.handle_heartbeat_response(&ok(1, None), 2);
        m
    }

    #[test]
    fn revocation_is_reported_owned_until_committed_then_assignment() {
        let mut m = joined(&[0, 1, 2]);
        m.handle_heartbeat_response(&ok(0, None), 3); // not in flight: ignored
        let h = heartbeat(&drain(&mut m, 5_002));
        assert_eq!(h.member_epoch, 1);
        m.handle_heartbeat_response(&ok(2, Some(&[0, 3])), 5_003);
        let a = drain(&mut m, 5_003);
        assert_eq!(
            a,
            vec![Action848::Event(GroupEvent848::PartitionsRevoked {
                partitions: ps(&[1, 2]),
                epoch: 2
            })]
        );
        assert_eq!(m.state(), ConsumerMemberState::Reconciling);
        // A heartbeat during the commit still says 1 and 2 are owned.
        let h = heartbeat(&drain(&mut m, 10_003));
        assert_eq!(owned(&h), [0, 1, 2]);
        m.handle_heartbeat_response(&ok(2, None), 10_004);
        m.handle_revoke_done();
        let a = drain(&mut m, 10_005);
        assert_eq!(
            a[0],
            Action848::Event(GroupEvent848::PartitionsAssigned {
                partitions: ps(&[3]),
                epoch: 2
            })
        );
        assert_eq!(owned(&heartbeat(&a)), [0, 3]);
        assert_eq!(m.assigned(), &ps(&[0, 3]));
    }

    #[test]
    fn fenced_loses_and_rejoins_with_epoch_zero() {
        for code in [110i16, 25] {
            let mut m = joined(&[0, 1]);
            heartbeat(&drain(&mut m, 5_002));
            m.handle_heartbeat_response(&err(code), 5_003);
            let a = drain(&mut m, 5_003);
            assert_eq!(
                a[0],
                Action848::Event(GroupEvent848::PartitionsLost {
                    partitions: ps(&[0, 1])
                })
            );
            let h = heartbeat(&a);
            assert_eq!((h.member_epoch, h.member_id.as_str()), (0, "m1"));
            assert!(owned(&h).is_empty());
        }
    }

    #[test]
    fn errors_rediscover_retry_or_fail() {
        let mut m = joined(&[0]);
        heartbeat(&drain(&mut m, 5_002));
        m.handle_heartbeat_response(&err(16), 5_003);
        assert_eq!(drain(&mut m, 5_200), vec![Action848::FindCoordinator]);
        for code in [111i16, 81, 112, 30, 9999] {
            let mut m = joined(&[0]);
            heartbeat(&drain(&mut m, 5_002));
            m.handle_heartbeat_response(&err(code), 5_003);
            let a = drain(&mut m, 5_003);
            assert!(
                matches!(a.last(), Some(Action848::Event(GroupEvent848::Fatal(_)))),
                "{code}"
            );
            assert_eq!(m.state(), ConsumerMemberState::Fatal);
        }
    }

    #[test]
    fn leave_commits_then_sends_epoch_minus_one_or_two() {
        for (instance, epoch) in [(None, -1), (Some("i".to_string()), -2)] {
            let mut m = joined(&[0]);
            m.config.group_instance_id = instance;
            m.leave();
            let a = drain(&mut m, 3);
            assert_eq!(
                a,
                vec![Action848::Event(GroupEvent848::PartitionsRevoked {
                    partitions: ps(&[0]),
                    epoch: 1
                })]
            );
            m.handle_revoke_done();
            let h = heartbeat(&drain(&mut m, 4));
            assert_eq!(h.member_epoch, epoch);
            m.handle_heartbeat_response(&ok(epoch, None), 5);
            assert_eq!(m.state(), ConsumerMemberState::Left);
        }
    }

    #[test]
    fn regex_subscription_joins_and_replaces_the_names() {
        let mut m = ConsumerMember::new(ConsumerGroupConfig::new("g", "m1"), 0);
        m.set_subscription_regex(Some("orders-.*".into()));
        assert_eq!(drain(&mut m, 0), vec![Action848::FindCoordinator]);
        m.handle_coordinator_found();
        let h = heartbeat(&drain(&mut m, 0));
        assert_eq!(h.subscribed_topic_regex.as_ref().map(|r| r.as_str()), Some("orders-.*"));
        assert!(h.subscribed_topic_names.is_none());
        m.handle_heartbeat_response(&ok(1, Some(&[0])), 1);
        let a = drain(&mut m, 1);
        assert_eq!(owned(&heartbeat(&a)), [0]);
        m.handle_heartbeat_response(&ok(1, None), 2);
        assert_eq!(m.group_metadata().map(|g| g.generation_id), Some(1));
        // Back to names: the next heartbeat carries them, no pattern.
        m.set_subscription_regex(None);
        m.set_subscription(["t".to_string()].into());
        let h = heartbeat(&drain(&mut m, 3));
        assert!(h.subscribed_topic_regex.is_none());
        assert_eq!(h.subscribed_topic_names.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn poll_timeout_loses_and_leaves() {
        let mut m = joined(&[0]);
        let mut now = 2;
        let mut left = false;
        while now < 400_000 && !left {
            now += 5_000;
            for a in drain(&mut m, now) {
                match a {
                    Action848::Heartbeat(h) if h.member_epoch == -1 => left = true,
                    Action848::Heartbeat(_) => m.handle_heartbeat_response(&ok(1, None), now),
                    _ => {}
                }
            }
        }
        assert!(left && (300_000..=305_002).contains(&now), "{now}");
        assert!(m.assigned().is_empty());
    }
}
