//! A consumer in a consumer group: subscribe, and the group's coordinator
//! hands this member its share of the partitions; offsets are committed to
//! the group.
//!
//! Two protocols (`group.protocol`):
//!
//! - `classic` (the default, as in the Java client 4.x): JoinGroup,
//!   SyncGroup, Heartbeat and LeaveGroup, the client-side assignors
//!   (`range`, `roundrobin`, `cooperative-sticky`, KIP-429), static
//!   membership (KIP-345). The state machine is
//!   [`clink_kafka_wire::group::ClassicMember`].
//! - `consumer` (KIP-848): ConsumerGroupHeartbeat, the broker assigns
//!   (`uniform`, `range`), member epochs. The state machine is
//!   [`clink_kafka_wire::group::ConsumerMember`].
//!
//! # How it is driven
//!
//! A background task (the *driver*) owns the state machine behind a
//! `std` mutex (never held across an await): it sends the requests the
//! member asks for (FindCoordinator, then everything else to the
//! coordinator over a connection of its own whose request timeout is
//! `max.poll.interval.ms` + 5 s, the JoinGroup bound; the other requests
//! are bounded by `request.timeout.ms`), feeds the answers back and wakes
//! at the member's deadlines. So heartbeats go on while the application
//! is busy between polls; only `max.poll.interval.ms` without a
//! [`GroupConsumer::poll`] takes the partitions away (Java's meaning: the
//! member leaves the group and rejoins at the next poll).
//!
//! The member's events (assigned, revoked, lost) are applied by the
//! application's poll, which owns the fetching [`Consumer`] (manual
//! assignment underneath): an assigned partition starts from the group's
//! committed offset (OffsetFetch with `require_stable`), else
//! `auto.offset.reset`; a revoked one is committed first (auto-commit:
//! what `poll` handed over, with the event's generation and member id)
//! and then acknowledged to the member, which only then rejoins (classic)
//! or reports it released (KIP-848); a lost one is dropped uncommitted.
//!
//! Classic pattern subscriptions are matched here, against every topic's
//! name (internal topics excluded), refreshed every
//! `metadata.max.age.ms`; under KIP-848 the broker matches the pattern.
//!
//! See <https://kafka.apache.org/protocol#The_Messages_JoinGroup>, KIP-848
//! and the module docs of [`clink_kafka_wire::group`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use clink_kafka_wire::group::{
    Action, Action848, Assignor, ClassicMember, ConsumerGroupConfig, ConsumerMember, ConsumerMemberState, GroupConfig,
    GroupError, GroupEvent, GroupEvent848, GroupRequest, IdPartition, MemberState, RequestKind, Uuid,
};
use clink_kafka_wire::kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, LeaveGroupRequest, MetadataRequest};

pub use clink_kafka_wire::group::ConsumerGroupMetadata;

use super::cluster::Cluster;
use super::connection::BrokerConnection;
use super::consumer::{Consumer, ConsumerConfig, ConsumerRecord, Offset};
use super::group::{find_coordinator, CommittedOffset, GroupOffsets};
use super::properties::{ClientProperties, PropertyPair};
use super::topic_partition::{TopicPartition, TopicPartitionOffset};
use super::ClientConfig;
use crate::error::{Error, Result};

/// FindCoordinator key type of a consumer group.
const KEY_TYPE_GROUP: i8 = 0;
/// Java's extra time for a JoinGroup answer beyond the rebalance timeout.
const JOIN_GRACE: Duration = Duration::from_secs(5);

/// `group.protocol`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupProtocol {
    /// `classic`: JoinGroup/SyncGroup, client-side assignors (the Java
    /// client's default).
    #[default]
    Classic,
    /// `consumer`: KIP-848, ConsumerGroupHeartbeat, broker-side assignors.
    Consumer,
}

impl GroupProtocol {
    /// The property value.
    pub fn name(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }

    /// The protocol of that property value (case-insensitive, as Java's).
    pub fn from_name(name: &str) -> Option<GroupProtocol> {
        match name.trim().to_ascii_lowercase().as_str() {
            "classic" => Some(GroupProtocol::Classic),
            "consumer" => Some(GroupProtocol::Consumer),
            _ => None,
        }
    }
}

/// The broker-side assignors of KIP-848 (`group.remote.assignor`).
pub const REMOTE_ASSIGNORS: &[&str] = &["uniform", "range"];

/// A group consumer's settings, with the Java consumer's names and
/// defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct GroupConsumerConfig {
    /// `group.id`.
    pub group_id: String,
    /// `group.protocol` (default `classic`, as Java 4.x).
    pub protocol: GroupProtocol,
    /// `group.instance.id`: static membership (KIP-345).
    pub group_instance_id: Option<String>,
    /// `partition.assignment.strategy` (classic), in order of preference;
    /// default `[range, cooperative-sticky]`.
    pub assignors: Vec<Assignor>,
    /// `group.remote.assignor` (consumer protocol): `uniform` or `range`;
    /// `None`: the broker's default.
    pub remote_assignor: Option<String>,
    /// `session.timeout.ms` (45 s; classic: sent in JoinGroup; under
    /// KIP-848 the broker's `group.consumer.session.timeout.ms` applies).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (3 s; classic; under KIP-848 the broker
    /// sets the interval).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (5 min): the longest time between two polls
    /// before the member leaves the group; also the rebalance timeout.
    pub max_poll_interval: Duration,
    /// `enable.auto.commit` (true).
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms` (5 s).
    pub auto_commit_interval: Duration,
    /// `metadata.max.age.ms` (5 min): how often a classic pattern
    /// subscription (and a leader's partition counts) is checked against
    /// the topics.
    pub metadata_max_age: Duration,
    /// Fetch settings, isolation, `auto.offset.reset` (default `latest`,
    /// as Java's).
    pub consumer: ConsumerConfig,
}

impl GroupConsumerConfig {
    /// The Java defaults for `group_id`.
    pub fn new(group_id: impl Into<String>) -> Self {
        GroupConsumerConfig {
            group_id: group_id.into(),
            protocol: GroupProtocol::Classic,
            group_instance_id: None,
            assignors: vec![Assignor::Range, Assignor::CooperativeSticky],
            remote_assignor: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            metadata_max_age: Duration::from_secs(300),
            consumer: ConsumerConfig::default(),
        }
    }

    /// Sets `group.protocol`.
    pub fn with_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.protocol = protocol;
        self
    }
    /// Sets `group.instance.id`.
    pub fn with_group_instance_id(mut self, id: Option<String>) -> Self {
        self.group_instance_id = id;
        self
    }
    /// Sets `partition.assignment.strategy`.
    pub fn with_assignors(mut self, assignors: Vec<Assignor>) -> Self {
        self.assignors = assignors;
        self
    }
    /// Sets `group.remote.assignor`.
    pub fn with_remote_assignor(mut self, assignor: Option<String>) -> Self {
        self.remote_assignor = assignor;
        self
    }
    /// Sets `session.timeout.ms`.
    pub fn with_session_timeout(mut self, value: Duration) -> Self {
        self.session_timeout = value;
        self
    }
    /// Sets `heartbeat.interval.ms`.
    pub fn with_heartbeat_interval(mut self, value: Duration) -> Self {
        self.heartbeat_interval = value;
        self
    }
    /// Sets `max.poll.interval.ms`.
    pub fn with_max_poll_interval(mut self, value: Duration) -> Self {
        self.max_poll_interval = value;
        self
    }
    /// Sets `enable.auto.commit`.
    pub fn with_enable_auto_commit(mut self, value: bool) -> Self {
        self.enable_auto_commit = value;
        self
    }
    /// Sets `auto.commit.interval.ms`.
    pub fn with_auto_commit_interval(mut self, value: Duration) -> Self {
        self.auto_commit_interval = value;
        self
    }
    /// Sets `metadata.max.age.ms`.
    pub fn with_metadata_max_age(mut self, value: Duration) -> Self {
        self.metadata_max_age = value;
        self
    }
    /// Sets the fetch settings.
    pub fn with_consumer(mut self, consumer: ConsumerConfig) -> Self {
        self.consumer = consumer;
        self
    }

    /// The group settings named by Java (or librdkafka) properties:
    /// `group.id` (required), `group.protocol`, `group.instance.id`,
    /// `partition.assignment.strategy`, `group.remote.assignor`,
    /// `session.timeout.ms`, `heartbeat.interval.ms`,
    /// `max.poll.interval.ms`, `enable.auto.commit`,
    /// `auto.commit.interval.ms`, `metadata.max.age.ms`, plus every
    /// consumer and client property ([`ClientProperties::parse`]). A bad
    /// value is an error naming the option and the allowed values.
    pub fn from_properties<I>(properties: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: PropertyPair,
    {
        Ok(Self::client_and_group_from_properties(properties)?.1)
    }

    /// [`from_properties`](Self::from_properties), with the client
    /// configuration (to connect the [`Cluster`]).
    pub fn client_and_group_from_properties<I>(properties: I) -> Result<(ClientConfig, Self)>
    where
        I: IntoIterator,
        I::Item: PropertyPair,
    {
        let mut group: Vec<(&'static str, String)> = Vec::new();
        let mut rest: Vec<(String, String)> = Vec::new();
        for item in properties {
            let (name, value) = item.pair();
            match GROUP_PROPERTIES.iter().find(|n| **n == name.trim()) {
                Some(known) => group.push((known, value.to_owned())),
                None => rest.push((name.to_owned(), value.to_owned())),
            }
        }
        let parsed = ClientProperties::parse(&rest)?;
        let group_id = parsed.group_id.clone().ok_or(Error::Config {
            option: "group.id",
            message: "required for a group consumer".into(),
        })?;
        let mut c = GroupConsumerConfig::new(group_id).with_consumer(parsed.consumer);
        for (name, value) in group {
            let v = value.trim();
            let invalid = |allowed: &str| Error::Config {
                option: name,
                message: format!("invalid value {v:?}; allowed: {allowed}"),
            };
            let ms = |min: u64| -> Result<Duration> {
                v.parse::<u64>()
                    .ok()
                    .filter(|n| (min..=i32::MAX as u64).contains(n))
                    .map(Duration::from_millis)
                    .ok_or_else(|| invalid(&format!("milliseconds from {min} to {}", i32::MAX)))
            };
            let boolean = || match v.to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(invalid("true, false")),
            };
            match name {
                "group.protocol" => {
                    c.protocol = GroupProtocol::from_name(v).ok_or_else(|| invalid("classic, consumer"))?;
                }
                "group.instance.id" => {
                    c.group_instance_id = if v.is_empty() { None } else { Some(v.to_owned()) };
                }
                "partition.assignment.strategy" => {
                    c.assignors = parse_assignors(v).ok_or_else(|| {
                        invalid(
                            "a comma-separated list of range, roundrobin, cooperative-sticky (or the Java class \
                             names)",
                        )
                    })?;
                }
                "group.remote.assignor" => {
                    let a = v.to_ascii_lowercase();
                    if !REMOTE_ASSIGNORS.contains(&a.as_str()) {
                        return Err(invalid("uniform, range"));
                    }
                    c.remote_assignor = Some(a);
                }
                "session.timeout.ms" => c.session_timeout = ms(1)?,
                "heartbeat.interval.ms" => c.heartbeat_interval = ms(1)?,
                "max.poll.interval.ms" => c.max_poll_interval = ms(1)?,
                "enable.auto.commit" | "auto.commit.enable" => c.enable_auto_commit = boolean()?,
                "auto.commit.interval.ms" | "auto.commit.interval" => c.auto_commit_interval = ms(0)?,
                "metadata.max.age.ms" => c.metadata_max_age = ms(0)?,
                _ => {}
            }
        }
        c.validate()?;
        Ok((parsed.client, c))
    }

    /// Checks the settings together; the error names the option and what
    /// is allowed.
    pub fn validate(&self) -> Result<()> {
        let bad = |option: &'static str, message: String| Err(Error::Config { option, message });
        if self.group_id.trim().is_empty() {
            return bad("group.id", "must not be empty".into());
        }
        if self.group_instance_id.as_deref().is_some_and(|i| i.trim().is_empty()) {
            return bad("group.instance.id", "must not be empty when set".into());
        }
        if self.protocol == GroupProtocol::Classic && self.assignors.is_empty() {
            return bad(
                "partition.assignment.strategy",
                "must name at least one of range, roundrobin, cooperative-sticky".into(),
            );
        }
        if let Some(a) = &self.remote_assignor {
            if !REMOTE_ASSIGNORS.contains(&a.as_str()) {
                return bad(
                    "group.remote.assignor",
                    format!("invalid value {a:?}; allowed: uniform, range"),
                );
            }
        }
        let ms = |d: Duration| d.as_millis();
        for (option, d, min) in [
            ("session.timeout.ms", self.session_timeout, 1),
            ("heartbeat.interval.ms", self.heartbeat_interval, 1),
            ("max.poll.interval.ms", self.max_poll_interval, 1),
        ] {
            if !(min..=i32::MAX as u128).contains(&ms(d)) {
                return bad(option, format!("must be from {min} to {} milliseconds", i32::MAX));
            }
        }
        if self.protocol == GroupProtocol::Classic && self.heartbeat_interval >= self.session_timeout {
            return bad(
                "heartbeat.interval.ms",
                format!(
                    "must be lower than session.timeout.ms ({} ms), not {} ms",
                    ms(self.session_timeout),
                    ms(self.heartbeat_interval)
                ),
            );
        }
        if self.enable_auto_commit && self.auto_commit_interval.is_zero() {
            return bad(
                "auto.commit.interval.ms",
                "must be at least 1 ms with enable.auto.commit=true".into(),
            );
        }
        Ok(())
    }
}

/// The property names [`GroupConsumerConfig::from_properties`] takes
/// itself (the others go to [`ClientProperties::parse`]).
const GROUP_PROPERTIES: &[&str] = &[
    "group.protocol",
    "group.instance.id",
    "partition.assignment.strategy",
    "group.remote.assignor",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "enable.auto.commit",
    "auto.commit.enable",
    "auto.commit.interval.ms",
    "metadata.max.age.ms",
];

/// `range,cooperative-sticky`, or the Java class names.
pub fn parse_assignors(list: &str) -> Option<Vec<Assignor>> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let short = match name.rsplit('.').next().unwrap_or(name) {
            "RangeAssignor" => "range",
            "RoundRobinAssignor" => "roundrobin",
            "CooperativeStickyAssignor" => "cooperative-sticky",
            other => other,
        };
        let a = Assignor::from_name(&short.to_ascii_lowercase())?;
        if !out.contains(&a) {
            out.push(a);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// What to subscribe to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subscription {
    /// These topics.
    Topics(Vec<String>),
    /// Every topic whose whole name matches this regular expression
    /// (including topics created later).
    Pattern(String),
}

/// A rebalance, as [`GroupConsumer::poll_events`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RebalanceEvent {
    /// These partitions are now this member's (each starts from the
    /// group's committed offset, else `auto.offset.reset`).
    Assigned(Vec<TopicPartition>),
    /// These partitions were taken away after their offsets were committed
    /// (with auto-commit). A caller with open work on them (a transaction)
    /// must finish it before the next poll: the member acknowledges the
    /// revocation at the next poll.
    Revoked(Vec<TopicPartition>),
    /// These partitions were lost (the member was fenced or timed out);
    /// another member may own them already: nothing was committed.
    Lost(Vec<TopicPartition>),
}

/// Records and the rebalances that happened, in order (the events come
/// before the records).
#[derive(Clone, Debug, Default)]
pub struct GroupPoll {
    /// The records handed over.
    pub records: Vec<ConsumerRecord>,
    /// The rebalance events.
    pub events: Vec<RebalanceEvent>,
}

/// Called by [`GroupConsumer::poll`] as partitions move (Java's
/// `ConsumerRebalanceListener`).
pub trait RebalanceListener: Send {
    /// Partitions added.
    fn on_assigned(&mut self, _partitions: &[TopicPartition]) {}
    /// Partitions taken away (their offsets are committed first with
    /// auto-commit).
    fn on_revoked(&mut self, _partitions: &[TopicPartition]) {}
    /// Partitions lost (nothing committed).
    fn on_lost(&mut self, _partitions: &[TopicPartition]) {}
}

// ---------------------------------------------------------------------------
// The member and its driver.

#[allow(clippy::large_enum_variant)] // one per consumer, never moved
enum Member {
    Classic(ClassicMember),
    Consumer(ConsumerMember),
}

/// A member event with topic names.
#[derive(Debug)]
enum MemberEvent {
    Assigned(Vec<TopicPartition>),
    Revoked {
        partitions: Vec<TopicPartition>,
        meta: ConsumerGroupMetadata,
    },
    Lost(Vec<TopicPartition>),
    Fatal(GroupError),
}

/// What the driver sends.
enum Outgoing {
    Classic(GroupRequest),
    Heartbeat848(ConsumerGroupHeartbeatRequest),
    FindCoordinator,
}

struct State {
    member: Member,
    events: VecDeque<MemberEvent>,
    /// KIP-848 events waiting for topic names.
    raw848: VecDeque<GroupEvent848>,
    /// Topic ids to names (KIP-848).
    names: HashMap<Uuid, String>,
    coordinator: Option<BrokerConnection>,
    /// Classic pattern subscription: look at the topics now.
    pattern_dirty: bool,
    pattern: Option<regex::Regex>,
}

struct Shared {
    state: Mutex<State>,
    /// The application changed something the driver must act on.
    to_driver: tokio::sync::Notify,
    /// The driver queued events.
    to_app: tokio::sync::Notify,
    clock: Instant,
}

impl Shared {
    fn now(&self) -> u64 {
        self.clock.elapsed().as_millis().min(u64::MAX as u128) as u64
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn wire_tp(tp: &clink_kafka_wire::group::TopicPartition) -> TopicPartition {
    TopicPartition::new(tp.topic.clone(), tp.partition)
}

impl State {
    fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        match &self.member {
            Member::Classic(m) => m.group_metadata(),
            Member::Consumer(m) => m.group_metadata(),
        }
    }

    fn member_id(&self) -> String {
        match &self.member {
            Member::Classic(m) => m.member_id().to_owned(),
            Member::Consumer(m) => m.member_id().to_owned(),
        }
    }

    fn generation(&self) -> i32 {
        match &self.member {
            Member::Classic(m) => m.generation(),
            Member::Consumer(m) => m.epoch(),
        }
    }

    fn finished(&self) -> bool {
        match &self.member {
            Member::Classic(m) => matches!(m.state(), MemberState::Left | MemberState::Fatal),
            Member::Consumer(m) => matches!(m.state(), ConsumerMemberState::Left | ConsumerMemberState::Fatal),
        }
    }

    fn error(&self) -> Option<GroupError> {
        match &self.member {
            Member::Classic(m) => m.error().cloned(),
            Member::Consumer(m) => m.error().cloned(),
        }
    }

    fn app_poll(&mut self, now: u64) {
        match &mut self.member {
            Member::Classic(m) => m.handle_app_poll(now),
            Member::Consumer(m) => m.handle_app_poll(now),
        }
    }

    fn revoke_done(&mut self) {
        match &mut self.member {
            Member::Classic(m) => m.handle_revoke_done(),
            Member::Consumer(m) => m.handle_revoke_done(),
        }
    }

    fn leave(&mut self) {
        match &mut self.member {
            Member::Classic(m) => m.leave(),
            Member::Consumer(m) => m.leave(),
        }
    }

    /// Runs the member: the requests to send; events are queued.
    fn step(&mut self, now: u64, group_id: &str) -> (Vec<Outgoing>, Option<u64>) {
        let mut sends = Vec::new();
        match &mut self.member {
            Member::Classic(m) => {
                while let Some(a) = m.poll(now) {
                    match a {
                        Action::Send(GroupRequest::FindCoordinator) => sends.push(Outgoing::FindCoordinator),
                        Action::Send(r) => sends.push(Outgoing::Classic(r)),
                        Action::Event(e) => self.events.push_back(match e {
                            GroupEvent::PartitionsAssigned { partitions, .. } => {
                                MemberEvent::Assigned(partitions.iter().map(wire_tp).collect())
                            }
                            GroupEvent::PartitionsRevoked {
                                partitions,
                                generation,
                                member_id,
                            } => MemberEvent::Revoked {
                                partitions: partitions.iter().map(wire_tp).collect(),
                                meta: ConsumerGroupMetadata {
                                    group_id: group_id.to_owned(),
                                    generation_id: generation,
                                    member_id,
                                    group_instance_id: m.group_metadata().and_then(|g| g.group_instance_id),
                                },
                            },
                            GroupEvent::PartitionsLost { partitions } => {
                                MemberEvent::Lost(partitions.iter().map(wire_tp).collect())
                            }
                            GroupEvent::Fatal(e) => MemberEvent::Fatal(e),
                        }),
                    }
                }
                (sends, m.poll_timeout(now))
            }
            Member::Consumer(m) => {
                while let Some(a) = m.poll(now) {
                    match a {
                        Action848::FindCoordinator => sends.push(Outgoing::FindCoordinator),
                        Action848::Heartbeat(r) => sends.push(Outgoing::Heartbeat848(r)),
                        Action848::Event(e) => self.raw848.push_back(e),
                    }
                }
                (sends, m.poll_timeout(now))
            }
        }
    }

    /// Topic ids of queued KIP-848 events not yet named.
    fn unnamed(&self) -> bool {
        self.raw848.iter().any(|e| {
            let ps = match e {
                GroupEvent848::PartitionsAssigned { partitions, .. }
                | GroupEvent848::PartitionsRevoked { partitions, .. }
                | GroupEvent848::PartitionsLost { partitions } => partitions,
                GroupEvent848::Fatal(_) => return false,
            };
            ps.iter().any(|p| !self.names.contains_key(&p.topic_id))
        })
    }

    /// Names the queued KIP-848 events (a topic id no metadata names, a
    /// topic deleted meanwhile, is left out).
    fn name_848_events(&mut self, group_id: &str, instance: &Option<String>) {
        let member_id = self.member_id();
        while let Some(e) = self.raw848.pop_front() {
            let named = |ps: &BTreeSet<IdPartition>| -> Vec<TopicPartition> {
                ps.iter()
                    .filter_map(|p| {
                        self.names
                            .get(&p.topic_id)
                            .map(|t| TopicPartition::new(t.clone(), p.partition))
                    })
                    .collect()
            };
            let ev = match e {
                GroupEvent848::PartitionsAssigned { partitions, .. } => MemberEvent::Assigned(named(&partitions)),
                GroupEvent848::PartitionsRevoked { partitions, epoch } => MemberEvent::Revoked {
                    partitions: named(&partitions),
                    meta: ConsumerGroupMetadata {
                        group_id: group_id.to_owned(),
                        generation_id: epoch,
                        member_id: member_id.clone(),
                        group_instance_id: instance.clone(),
                    },
                },
                GroupEvent848::PartitionsLost { partitions } => MemberEvent::Lost(named(&partitions)),
                GroupEvent848::Fatal(e) => MemberEvent::Fatal(e),
            };
            self.events.push_back(ev);
        }
    }
}

/// An answer for the driver.
enum Answer {
    Coordinator(Result<BrokerConnection>),
    Join(Result<clink_kafka_wire::kafka_protocol::messages::JoinGroupResponse>),
    Sync(Result<clink_kafka_wire::kafka_protocol::messages::SyncGroupResponse>),
    Heartbeat(Result<clink_kafka_wire::kafka_protocol::messages::HeartbeatResponse>),
    Leave(Result<clink_kafka_wire::kafka_protocol::messages::LeaveGroupResponse>),
    Metadata(Result<BTreeMap<String, i32>>),
    Heartbeat848(Result<clink_kafka_wire::kafka_protocol::messages::ConsumerGroupHeartbeatResponse>),
    /// Every topic: name, id, partition count, internal.
    Topics(Result<Vec<(String, Uuid, i32, bool)>>),
}

struct Driver {
    shared: Arc<Shared>,
    cluster: Cluster,
    group_id: String,
    instance: Option<String>,
    join_timeout: Duration,
    request_timeout: Duration,
    metadata_max_age: Duration,
    tasks: tokio::task::JoinSet<Answer>,
    topics_inflight: bool,
    next_topics: Instant,
    names_retry_at: Instant,
    unnamed_since: Option<Instant>,
}

/// Every topic with its id, partition count and whether it is internal.
async fn list_topics(cluster: Cluster) -> Result<Vec<(String, Uuid, i32, bool)>> {
    let mut req = MetadataRequest::default();
    req.topics = None;
    req.allow_auto_topic_creation = false;
    let (_, resp) = cluster
        .control_request(|conn| {
            let req = &req;
            async move { conn.request(req).await }
        })
        .await?;
    Ok(resp
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .filter_map(|t| {
            t.name.as_ref().map(|n| {
                (
                    n.0.as_str().to_owned(),
                    t.topic_id,
                    i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
                    t.is_internal,
                )
            })
        })
        .collect())
}

impl Driver {
    async fn run(mut self) {
        loop {
            let now = self.shared.now();
            let (sends, wake, need_names, pattern_now, finished) = {
                let mut st = self.shared.lock();
                let (sends, wake) = st.step(now, &self.group_id);
                let mut need_names = st.unnamed();
                if need_names {
                    // A topic id no metadata names yet (a topic just
                    // created): ask again, for a while; then go on
                    // without it (a topic deleted meanwhile).
                    let since = *self.unnamed_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > Duration::from_secs(10) {
                        need_names = false;
                    }
                    need_names &= Instant::now() >= self.names_retry_at;
                } else {
                    self.unnamed_since = None;
                }
                if !st.unnamed()
                    || self
                        .unnamed_since
                        .is_some_and(|s| s.elapsed() > Duration::from_secs(10))
                {
                    st.name_848_events(&self.group_id, &self.instance);
                    self.unnamed_since = None;
                }
                let pattern_now = std::mem::take(&mut st.pattern_dirty);
                if !st.events.is_empty() {
                    self.shared.to_app.notify_one();
                }
                (sends, wake, need_names, pattern_now, st.finished())
            };
            if finished {
                self.shared.to_app.notify_one();
                return;
            }
            for s in sends {
                self.send(s);
            }
            let periodic = Instant::now() >= self.next_topics;
            if (need_names || pattern_now || periodic) && !self.topics_inflight {
                self.topics_inflight = true;
                self.next_topics = Instant::now() + self.metadata_max_age;
                let cluster = self.cluster.clone();
                self.tasks
                    .spawn(async move { Answer::Topics(list_topics(cluster).await) });
            }
            let wake_at = wake.map_or(Instant::now() + Duration::from_secs(3600), |w| {
                self.shared.clock + Duration::from_millis(w)
            });
            let mut wake_at = wake_at.min(self.next_topics.max(Instant::now() + Duration::from_millis(10)));
            if self.unnamed_since.is_some() {
                wake_at = wake_at.min(self.names_retry_at.max(Instant::now() + Duration::from_millis(10)));
            }
            tokio::select! {
                Some(joined) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    match joined {
                        Ok(answer) => self.handle(answer),
                        Err(e) => tracing::error!(error = %e, "group request task failed"),
                    }
                }
                _ = self.shared.to_driver.notified() => {}
                _ = tokio::time::sleep_until(wake_at.into()) => {}
            }
        }
    }

    fn coordinator(&self) -> Option<BrokerConnection> {
        self.shared.lock().coordinator.clone().filter(|c| !c.is_closed())
    }

    fn send(&mut self, s: Outgoing) {
        let timeout = self.request_timeout;
        match s {
            Outgoing::FindCoordinator => {
                let cluster = self.cluster.clone();
                let group = self.group_id.clone();
                let join_timeout = self.join_timeout;
                self.tasks.spawn(async move {
                    let r = async {
                        let via = find_coordinator(&cluster, KEY_TYPE_GROUP, &group).await?;
                        let broker = via.broker().clone();
                        // A connection of our own: its request timeout
                        // bounds a JoinGroup, which waits up to the
                        // rebalance timeout.
                        let mut config = cluster.config().clone();
                        config.request_timeout = config.request_timeout.max(join_timeout);
                        BrokerConnection::connect(&broker.addr, broker.node_id, &config).await
                    };
                    Answer::Coordinator(tokio::time::timeout(timeout, r).await.unwrap_or_else(|_| {
                        Err(Error::Timeout {
                            operation: "finding the group coordinator".into(),
                            timeout,
                        })
                    }))
                });
            }
            Outgoing::Classic(GroupRequest::Metadata { topics }) => {
                let cluster = self.cluster.clone();
                self.tasks.spawn(async move {
                    let r = async {
                        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                        let md = cluster.refresh_topics(&names).await?;
                        Ok(topics
                            .iter()
                            .filter_map(|t| {
                                md.topics
                                    .get(t)
                                    .map(|m| (t.clone(), i32::try_from(m.partitions.len()).unwrap_or(i32::MAX)))
                            })
                            .collect())
                    };
                    Answer::Metadata(r.await)
                });
            }
            Outgoing::Classic(req) => {
                let conn = self.coordinator();
                let join_timeout = self.join_timeout;
                self.tasks.spawn(async move {
                    let closed = || Error::Config {
                        option: "group coordinator",
                        message: "no connection".into(),
                    };
                    async fn bounded<T>(t: Duration, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
                        tokio::time::timeout(t, f).await.unwrap_or_else(|_| {
                            Err(Error::Timeout {
                                operation: "a group request".into(),
                                timeout: t,
                            })
                        })
                    }
                    match req {
                        GroupRequest::JoinGroup(r) => Answer::Join(match conn {
                            Some(c) => bounded(join_timeout, c.request(&r)).await,
                            None => Err(closed()),
                        }),
                        GroupRequest::SyncGroup(r) => Answer::Sync(match conn {
                            Some(c) => bounded(join_timeout, c.request(&r)).await,
                            None => Err(closed()),
                        }),
                        GroupRequest::Heartbeat(r) => Answer::Heartbeat(match conn {
                            Some(c) => bounded(timeout, c.request(&r)).await,
                            None => Err(closed()),
                        }),
                        GroupRequest::LeaveGroup(mut r) => Answer::Leave(match conn {
                            Some(c) => {
                                // The member fills both layouts: v0-2's
                                // `member_id`, v3+'s `members` (KIP-345).
                                // Only the negotiated version's may be set,
                                // or encoding refuses the request.
                                match c.version_for::<LeaveGroupRequest>(None) {
                                    Ok(v) => {
                                        if v >= 3 {
                                            r.member_id = Default::default();
                                        } else {
                                            r.members.clear();
                                        }
                                        bounded(timeout, c.request_at(v, &r)).await
                                    }
                                    Err(e) => Err(e),
                                }
                            }
                            None => Err(closed()),
                        }),
                        GroupRequest::FindCoordinator | GroupRequest::Metadata { .. } => {
                            unreachable!("sent above")
                        }
                    }
                });
            }
            Outgoing::Heartbeat848(r) => {
                let conn = self.coordinator();
                self.tasks.spawn(async move {
                    let r = async {
                        let c = conn.ok_or(Error::Config {
                            option: "group coordinator",
                            message: "no connection".into(),
                        })?;
                        c.request(&r).await
                    };
                    Answer::Heartbeat848(tokio::time::timeout(timeout, r).await.unwrap_or_else(|_| {
                        Err(Error::Timeout {
                            operation: "ConsumerGroupHeartbeat".into(),
                            timeout,
                        })
                    }))
                });
            }
        }
    }

    fn handle(&mut self, answer: Answer) {
        let now = self.shared.now();
        let group = &self.group_id;
        let mut st = self.shared.lock();
        let failed = |st: &mut State, e: &Error| {
            tracing::debug!(group = %group, error = %e, "group request failed");
            if e.is_connection_error() || matches!(e, Error::Timeout { .. } | Error::Config { .. }) {
                st.coordinator = None;
            }
        };
        match (answer, &mut st.member) {
            (Answer::Coordinator(r), _) => match r {
                Ok(conn) => {
                    tracing::debug!(group = %group, coordinator = %conn.broker(), "group coordinator found");
                    st.coordinator = Some(conn);
                    match &mut st.member {
                        Member::Classic(m) => m.handle_coordinator_found(now),
                        Member::Consumer(m) => m.handle_coordinator_found(),
                    }
                }
                Err(e) => {
                    tracing::debug!(group = %group, error = %e, "finding the group coordinator failed");
                    match &mut st.member {
                        Member::Classic(m) => m.handle_request_failed(RequestKind::FindCoordinator, now),
                        Member::Consumer(m) => m.handle_find_coordinator_failed(now),
                    }
                }
            },
            (Answer::Join(r), Member::Classic(_)) => match r {
                Ok(resp) => {
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_join_response(&resp, now)
                    }
                }
                Err(e) => {
                    failed(&mut st, &e);
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_request_failed(RequestKind::JoinGroup, now)
                    }
                }
            },
            (Answer::Sync(r), Member::Classic(_)) => match r {
                Ok(resp) => {
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_sync_response(&resp, now)
                    }
                }
                Err(e) => {
                    failed(&mut st, &e);
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_request_failed(RequestKind::SyncGroup, now)
                    }
                }
            },
            (Answer::Heartbeat(r), Member::Classic(_)) => match r {
                Ok(resp) => {
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_heartbeat_response(&resp, now)
                    }
                }
                Err(e) => {
                    failed(&mut st, &e);
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_request_failed(RequestKind::Heartbeat, now)
                    }
                }
            },
            (Answer::Leave(r), Member::Classic(_)) => match r {
                Ok(resp) => {
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_leave_response(&resp)
                    }
                }
                Err(e) => {
                    failed(&mut st, &e);
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_request_failed(RequestKind::LeaveGroup, now)
                    }
                }
            },
            (Answer::Metadata(r), Member::Classic(_)) => match r {
                Ok(counts) => {
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_metadata(&counts, now)
                    }
                }
                Err(e) => {
                    tracing::debug!(group = %group, error = %e, "metadata for the assignment failed");
                    if let Member::Classic(m) = &mut st.member {
                        m.handle_request_failed(RequestKind::Metadata, now)
                    }
                }
            },
            (Answer::Heartbeat848(r), Member::Consumer(_)) => match r {
                Ok(resp) => {
                    if let Member::Consumer(m) = &mut st.member {
                        m.handle_heartbeat_response(&resp, now)
                    }
                }
                Err(e) => {
                    failed(&mut st, &e);
                    if let Member::Consumer(m) = &mut st.member {
                        m.handle_heartbeat_failed(now)
                    }
                }
            },
            (Answer::Topics(r), _) => {
                self.topics_inflight = false;
                match r {
                    Ok(topics) => {
                        for (name, id, _, _) in &topics {
                            st.names.insert(*id, name.clone());
                        }
                        let counts: BTreeMap<String, i32> = topics.iter().map(|(n, _, c, _)| (n.clone(), *c)).collect();
                        let matched: Option<BTreeSet<String>> = st.pattern.as_ref().map(|re| {
                            topics
                                .iter()
                                .filter(|(n, _, _, internal)| !internal && re.is_match(n))
                                .map(|(n, ..)| n.clone())
                                .collect()
                        });
                        if let Member::Classic(m) = &mut st.member {
                            if let Some(set) = matched {
                                m.set_subscription(set);
                            }
                            m.handle_metadata(&counts, now);
                        }
                        self.names_retry_at = Instant::now() + Duration::from_millis(200);
                    }
                    Err(e) => {
                        tracing::debug!(group = %group, error = %e, "listing topics failed");
                        self.next_topics = Instant::now() + Duration::from_millis(500);
                    }
                }
            }
            (_, _) => {}
        }
    }
}

// ---------------------------------------------------------------------------
// The consumer.

/// A consumer in a consumer group. See the module docs.
pub struct GroupConsumer {
    config: GroupConsumerConfig,
    cluster: Cluster,
    consumer: Consumer,
    offsets: GroupOffsets,
    shared: Arc<Shared>,
    driver: tokio::task::JoinHandle<()>,
    listener: Option<Box<dyn RebalanceListener>>,
    /// Events taken from the member, applied one by one (an event stays
    /// here until applied, so a dropped poll loses none).
    pending: VecDeque<MemberEvent>,
    assigned: BTreeSet<TopicPartition>,
    /// A revocation delivered by `poll_events`: acknowledged at the next poll.
    revoke_ack_pending: bool,
    /// What each partition's last commit stored.
    committed: HashMap<TopicPartition, i64>,
    last_auto_commit: Instant,
    /// Asynchronous commits: (manual, result).
    async_commits: tokio::task::JoinSet<(bool, Vec<TopicPartitionOffset>, Result<()>)>,
    async_error: Option<Error>,
    fatal: Option<Error>,
    member_id: String,
    generation: i32,
}

impl std::fmt::Debug for GroupConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupConsumer")
            .field("group_id", &self.config.group_id)
            .field("protocol", &self.config.protocol)
            .field("member_id", &self.member_id)
            .field("generation", &self.generation)
            .field("assigned", &self.assigned)
            .finish()
    }
}

/// A member id for KIP-848 (the client's own: a random UUID, base64url
/// without padding, as the Java client's `Uuid.toString`).
fn new_member_id() -> Result<String> {
    use base64::Engine as _;
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| Error::Config {
        option: "member id",
        message: format!("no random numbers: {e}"),
    })?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b))
}

impl GroupConsumer {
    /// A member of `config.group_id` on `cluster`, not yet subscribed
    /// (nothing is sent until [`subscribe`](Self::subscribe)). Starts the
    /// background task that runs the membership.
    ///
    /// Cancel safety: this method is cancel safe (it only validates and
    /// starts the task).
    pub async fn new(cluster: Cluster, config: GroupConsumerConfig) -> Result<Self> {
        config.validate()?;
        let clock = Instant::now();
        let member = match config.protocol {
            GroupProtocol::Classic => {
                let mut g = GroupConfig::new(config.group_id.clone());
                g.group_instance_id = config.group_instance_id.clone();
                g.session_timeout_ms = config.session_timeout.as_millis().min(i32::MAX as u128) as u32;
                g.heartbeat_interval_ms = config.heartbeat_interval.as_millis().min(u64::MAX as u128) as u64;
                g.max_poll_interval_ms = config.max_poll_interval.as_millis().min(i32::MAX as u128) as u32;
                g.retry_backoff_ms = cluster.config().retry_backoff.as_millis().min(u64::MAX as u128) as u64;
                g.assignors = config.assignors.clone();
                g.rack_id = config.consumer.client_rack.clone();
                Member::Classic(ClassicMember::new(g, 0))
            }
            GroupProtocol::Consumer => {
                let mut g = ConsumerGroupConfig::new(config.group_id.clone(), new_member_id()?);
                g.group_instance_id = config.group_instance_id.clone();
                g.rack_id = config.consumer.client_rack.clone();
                g.server_assignor = config.remote_assignor.clone();
                g.max_poll_interval_ms = config.max_poll_interval.as_millis().min(i32::MAX as u128) as u32;
                g.retry_backoff_ms = cluster.config().retry_backoff.as_millis().min(u64::MAX as u128) as u64;
                Member::Consumer(ConsumerMember::new(g, 0))
            }
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                member,
                events: VecDeque::new(),
                raw848: VecDeque::new(),
                names: HashMap::new(),
                coordinator: None,
                pattern_dirty: false,
                pattern: None,
            }),
            to_driver: tokio::sync::Notify::new(),
            to_app: tokio::sync::Notify::new(),
            clock,
        });
        let request_timeout = cluster.config().request_timeout;
        let driver = Driver {
            shared: shared.clone(),
            cluster: cluster.clone(),
            group_id: config.group_id.clone(),
            instance: config.group_instance_id.clone(),
            join_timeout: config.max_poll_interval + JOIN_GRACE,
            request_timeout,
            metadata_max_age: config.metadata_max_age,
            tasks: tokio::task::JoinSet::new(),
            topics_inflight: false,
            next_topics: Instant::now() + config.metadata_max_age,
            names_retry_at: Instant::now(),
            unnamed_since: None,
        };
        let driver = tokio::spawn(driver.run());
        Ok(GroupConsumer {
            consumer: Consumer::new(cluster.clone(), config.consumer.clone()),
            offsets: GroupOffsets::new(cluster.clone(), config.group_id.clone())?,
            cluster,
            shared,
            driver,
            listener: None,
            pending: VecDeque::new(),
            assigned: BTreeSet::new(),
            revoke_ack_pending: false,
            committed: HashMap::new(),
            last_auto_commit: Instant::now(),
            async_commits: tokio::task::JoinSet::new(),
            async_error: None,
            fatal: None,
            member_id: String::new(),
            generation: -1,
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> &GroupConsumerConfig {
        &self.config
    }

    /// The cluster.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Subscribes (replacing an earlier subscription); the member joins
    /// (or rejoins) the group in the background. A pattern must match a
    /// topic's whole name; under the classic protocol it is matched here
    /// against the topics, every `metadata.max.age.ms`; under KIP-848 the
    /// broker matches it.
    pub fn subscribe(&mut self, sub: Subscription) -> Result<()> {
        let mut st = self.shared.lock();
        match (&sub, &mut st.member) {
            (Subscription::Topics(topics), Member::Classic(m)) => {
                m.set_subscription(topics.iter().cloned().collect());
            }
            (Subscription::Topics(topics), Member::Consumer(m)) => {
                m.set_subscription_regex(None);
                m.set_subscription(topics.iter().cloned().collect());
            }
            (Subscription::Pattern(p), member) => {
                let re = regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| Error::Config {
                    option: "subscription pattern",
                    message: format!("invalid regular expression {p:?}: {e}"),
                })?;
                match member {
                    Member::Classic(_) => {
                        st.pattern = Some(re);
                        st.pattern_dirty = true;
                    }
                    Member::Consumer(m) => {
                        m.set_subscription(BTreeSet::new());
                        m.set_subscription_regex(Some(p.clone()));
                    }
                }
            }
        }
        if let Subscription::Topics(_) = sub {
            st.pattern = None;
        }
        drop(st);
        self.shared.to_driver.notify_one();
        Ok(())
    }

    /// Sets the rebalance listener [`poll`](Self::poll) calls.
    pub fn set_listener(&mut self, listener: Box<dyn RebalanceListener>) {
        self.listener = Some(listener);
    }

    /// The partitions this member holds.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assigned.iter().cloned().collect()
    }

    /// Per assigned partition with a position: the next offset after what
    /// poll handed over (what a commit stores).
    pub fn consumed_offsets(&self) -> Vec<TopicPartitionOffset> {
        self.assigned
            .iter()
            .filter_map(|tp| {
                self.consumer
                    .position(&tp.topic, tp.partition)
                    .map(|o| TopicPartitionOffset::new(tp.topic.clone(), tp.partition, o))
            })
            .collect()
    }

    /// The member id ("" before the first join).
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// The generation (classic) or member epoch (KIP-848); -1 or 0 outside
    /// the group.
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// What offset commits carry (OffsetCommit, and TxnOffsetCommit under
    /// KIP-447); `None` outside a generation.
    pub fn group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        self.shared.lock().group_metadata()
    }

    /// The fetching consumer underneath (positions, watermarks).
    pub fn consumer(&self) -> &Consumer {
        &self.consumer
    }

    fn refresh_identity(&mut self) {
        let st = self.shared.lock();
        self.member_id = st.member_id();
        self.generation = st.generation();
    }

    fn check(&mut self) -> Result<()> {
        if let Some(e) = &self.fatal {
            return Err(e.clone());
        }
        Ok(())
    }

    /// Moves `topic[partition]` (assigned to this member) to `offset`;
    /// returns the position.
    ///
    /// Cancel safety: cancel safe as [`Consumer::seek`]: a dropped call
    /// changes nothing.
    pub async fn seek(&mut self, topic: &str, partition: i32, offset: Offset) -> Result<i64> {
        self.consumer.seek(topic, partition, offset).await
    }

    /// The group's committed offsets of `partitions` (`None`: none).
    ///
    /// Cancel safety: cancel safe (it only reads).
    pub async fn committed(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<Vec<(TopicPartition, Option<CommittedOffset>)>> {
        let got = self.offsets.fetch(partitions, true).await?;
        Ok(partitions
            .iter()
            .map(|tp| (tp.clone(), got.get(tp).cloned().flatten()))
            .collect())
    }

    /// Records, many per call (see [`Consumer::poll`]), of the partitions
    /// the group gave this member; runs the rebalances (the listener is
    /// called, revoked partitions are committed with auto-commit) and the
    /// auto-commit. Must be called at least every `max.poll.interval.ms`,
    /// or the member leaves the group (and rejoins at the next poll);
    /// heartbeats do not depend on it.
    ///
    /// Cancel safety: this method is cancel safe: a rebalance event is
    /// removed only once applied, positions move only when records are
    /// returned, so a dropped call loses no record and no event; a
    /// revocation's commit may then be sent twice (harmless).
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        Ok(self.poll_inner(timeout, false).await?.records)
    }

    /// [`poll`](Self::poll), but returning the rebalance events too (in
    /// order, before the records). A call that has events returns at once
    /// with them (and no records). After [`RebalanceEvent::Revoked`] the
    /// caller must finish its work on those partitions (e.g. commit or
    /// abort a transaction) before the next call, which acknowledges the
    /// revocation to the group. The listener, if set, is called too.
    ///
    /// Cancel safety: cancel safe, as [`poll`](Self::poll).
    pub async fn poll_events(&mut self, timeout: Duration) -> Result<GroupPoll> {
        self.poll_inner(timeout, true).await
    }

    async fn poll_inner(&mut self, timeout: Duration, deliver: bool) -> Result<GroupPoll> {
        self.check()?;
        let deadline = tokio::time::Instant::now() + timeout;
        {
            let now = self.shared.now();
            let mut st = self.shared.lock();
            if std::mem::take(&mut self.revoke_ack_pending) {
                st.revoke_done();
            }
            st.app_poll(now);
        }
        self.shared.to_driver.notify_one();
        self.reap_async_commits()?;
        loop {
            let mut events = Vec::new();
            self.apply_events(&mut events, deliver).await?;
            self.refresh_identity();
            if !events.is_empty() {
                self.shared.to_driver.notify_one();
                return Ok(GroupPoll {
                    records: Vec::new(),
                    events,
                });
            }
            self.maybe_auto_commit();
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(GroupPoll::default());
            }
            let remaining = deadline - now;
            let wait_events = self.shared.to_app.notified();
            tokio::pin!(wait_events);
            // Register before looking, so no wake-up is missed.
            wait_events.as_mut().enable();
            if !self.shared.lock().events.is_empty() {
                continue;
            }
            tokio::select! {
                r = self.consumer.poll(remaining) => {
                    let records = r?;
                    if !records.is_empty() || tokio::time::Instant::now() >= deadline {
                        return Ok(GroupPoll { records, events: Vec::new() });
                    }
                }
                _ = &mut wait_events => {}
            }
        }
    }

    /// Applies the member's events in order. Each stays at the front of
    /// `pending` until applied (cancel safety).
    async fn apply_events(&mut self, out: &mut Vec<RebalanceEvent>, deliver: bool) -> Result<()> {
        loop {
            if self.pending.is_empty() {
                let mut st = self.shared.lock();
                self.pending.extend(st.events.drain(..));
            }
            let Some(ev) = self.pending.front() else {
                return Ok(());
            };
            match ev {
                MemberEvent::Assigned(parts) => {
                    let parts = parts.clone();
                    // Committed offsets first: nothing changes before they
                    // are here.
                    let committed = if parts.is_empty() {
                        BTreeMap::new()
                    } else {
                        self.offsets.fetch(&parts, true).await?
                    };
                    self.assigned.extend(parts.iter().cloned());
                    let all: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
                    self.consumer.assign(&all);
                    for tp in &parts {
                        if let Some(Some(c)) = committed.get(tp) {
                            self.consumer
                                .seek(&tp.topic, tp.partition, Offset::At(c.offset))
                                .await?;
                            self.committed.insert(tp.clone(), c.offset);
                        }
                    }
                    tracing::info!(group = %self.config.group_id, partitions = ?parts, "partitions assigned");
                    self.pending.pop_front();
                    if let Some(l) = self.listener.as_mut() {
                        l.on_assigned(&parts);
                    }
                    if deliver {
                        out.push(RebalanceEvent::Assigned(parts));
                    }
                }
                MemberEvent::Revoked { partitions, meta } => {
                    let parts = partitions.clone();
                    let meta = meta.clone();
                    if self.config.enable_auto_commit {
                        let offsets: Vec<TopicPartitionOffset> = self
                            .consumed_offsets()
                            .into_iter()
                            .filter(|o| parts.contains(&o.topic_partition()))
                            .collect();
                        if let Err(e) = self.offsets.commit_as(&offsets, Some(&meta)).await {
                            tracing::warn!(group = %self.config.group_id, error = %e, "commit on revoke failed");
                        }
                    }
                    self.drop_partitions(&parts);
                    tracing::info!(group = %self.config.group_id, partitions = ?parts, "partitions revoked");
                    self.pending.pop_front();
                    if let Some(l) = self.listener.as_mut() {
                        l.on_revoked(&parts);
                    }
                    if deliver {
                        out.push(RebalanceEvent::Revoked(parts));
                        // Acknowledged at the next poll (the caller's
                        // transaction ends first).
                        self.revoke_ack_pending = true;
                    } else {
                        self.shared.lock().revoke_done();
                        self.shared.to_driver.notify_one();
                    }
                }
                MemberEvent::Lost(parts) => {
                    let parts = parts.clone();
                    self.drop_partitions(&parts);
                    tracing::info!(group = %self.config.group_id, partitions = ?parts, "partitions lost");
                    self.pending.pop_front();
                    if let Some(l) = self.listener.as_mut() {
                        l.on_lost(&parts);
                    }
                    if deliver {
                        out.push(RebalanceEvent::Lost(parts));
                    }
                }
                MemberEvent::Fatal(e) => {
                    let e = Error::Group { source: e.clone() };
                    self.pending.pop_front();
                    self.fatal = Some(e.clone());
                    return Err(e);
                }
            }
        }
    }

    fn drop_partitions(&mut self, parts: &[TopicPartition]) {
        for tp in parts {
            self.assigned.remove(tp);
            self.committed.remove(tp);
        }
        let all: Vec<TopicPartition> = self.assigned.iter().cloned().collect();
        self.consumer.assign(&all);
    }

    /// The consumed offsets that differ from the last commit.
    fn uncommitted(&self) -> Vec<TopicPartitionOffset> {
        self.consumed_offsets()
            .into_iter()
            .filter(|o| self.committed.get(&o.topic_partition()) != Some(&o.offset))
            .collect()
    }

    fn maybe_auto_commit(&mut self) {
        if !self.config.enable_auto_commit || self.last_auto_commit.elapsed() < self.config.auto_commit_interval {
            return;
        }
        self.last_auto_commit = Instant::now();
        let offsets = self.uncommitted();
        self.spawn_commit(offsets, false);
    }

    fn spawn_commit(&mut self, offsets: Vec<TopicPartitionOffset>, manual: bool) {
        if offsets.is_empty() {
            return;
        }
        let Some(meta) = self.group_metadata() else {
            return;
        };
        let group = self.offsets.clone();
        self.async_commits.spawn(async move {
            let r = group.commit_as(&offsets, Some(&meta)).await;
            (manual, offsets, r)
        });
    }

    /// Finished asynchronous commits: note what they stored; the first
    /// failure of a manual one is returned (auto-commit failures are
    /// logged, as Java's).
    fn reap_async_commits(&mut self) -> Result<()> {
        while let Some(joined) = self.async_commits.try_join_next() {
            match joined {
                Ok((_, offsets, Ok(()))) => self.note_committed(&offsets),
                Ok((manual, _, Err(e))) => {
                    tracing::warn!(group = %self.config.group_id, error = %e, manual, "asynchronous commit failed");
                    if manual && self.async_error.is_none() {
                        self.async_error = Some(e);
                    }
                }
                Err(e) => tracing::error!(error = %e, "commit task failed"),
            }
        }
        match self.async_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn note_committed(&mut self, offsets: &[TopicPartitionOffset]) {
        for o in offsets {
            let tp = o.topic_partition();
            if self.assigned.contains(&tp) {
                self.committed.insert(tp, o.offset);
            }
        }
    }

    async fn wait_async_commits(&mut self) -> Result<()> {
        while let Some(joined) = self.async_commits.join_next().await {
            match joined {
                Ok((_, offsets, Ok(()))) => self.note_committed(&offsets),
                Ok((manual, _, Err(e))) => {
                    if manual && self.async_error.is_none() {
                        self.async_error = Some(e);
                    }
                }
                Err(e) => tracing::error!(error = %e, "commit task failed"),
            }
        }
        match self.async_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Commits what [`poll`](Self::poll) handed over
    /// ([`consumed_offsets`](Self::consumed_offsets)) with the member's
    /// generation, and waits for it (after any asynchronous commit still
    /// on its way, whose failure it returns).
    ///
    /// Cancel safety: not cancel safe: a dropped call may or may not have
    /// committed.
    pub async fn commit_sync(&mut self) -> Result<()> {
        let offsets = self.consumed_offsets();
        self.commit_offsets_sync(&offsets).await
    }

    /// Commits `offsets` (each the next offset to consume) with the
    /// member's generation and member id, and waits for it.
    ///
    /// Cancel safety: not cancel safe: a dropped call may or may not have
    /// committed.
    pub async fn commit_offsets_sync(&mut self, offsets: &[TopicPartitionOffset]) -> Result<()> {
        self.check()?;
        self.wait_async_commits().await?;
        let meta = self.group_metadata();
        if meta.is_none() && !offsets.is_empty() {
            return Err(Error::Config {
                option: "group.id",
                message: format!(
                    "this member of group {:?} is not in a generation (rebalancing or not joined): nothing \
                     committed",
                    self.config.group_id
                ),
            });
        }
        self.offsets.commit_as(offsets, meta.as_ref()).await?;
        self.note_committed(offsets);
        Ok(())
    }

    /// Commits what poll handed over in the background; a failure is
    /// returned by a later poll or commit.
    pub fn commit_async(&mut self) {
        let offsets = self.consumed_offsets();
        self.spawn_commit(offsets, true);
    }

    /// Leaves the group: commits what poll handed over (auto-commit),
    /// gives up the partitions (the listener hears of it), then sends
    /// LeaveGroup (a static member does not: a restart within the session
    /// timeout gets its partitions back without a rebalance). Bounded by
    /// the request timeout.
    ///
    /// Cancel safety: not cancel safe: a dropped call may leave the member
    /// in the group until its session times out.
    pub async fn close(mut self) -> Result<()> {
        let waited = self.wait_async_commits().await;
        if self.revoke_ack_pending {
            self.revoke_ack_pending = false;
            self.shared.lock().revoke_done();
        }
        self.shared.lock().leave();
        self.shared.to_driver.notify_one();
        let deadline = tokio::time::Instant::now() + self.cluster.config().request_timeout;
        let mut result = Ok(());
        let shared = self.shared.clone();
        loop {
            let wait_events = shared.to_app.notified();
            tokio::pin!(wait_events);
            wait_events.as_mut().enable();
            let mut events = Vec::new();
            if let Err(e) = self.apply_events(&mut events, false).await {
                result = Err(e);
                break;
            }
            if self.shared.lock().finished() {
                break;
            }
            if tokio::time::timeout_at(deadline, wait_events).await.is_err() {
                result = Err(Error::Timeout {
                    operation: format!("leaving group {}", self.config.group_id),
                    timeout: self.cluster.config().request_timeout,
                });
                break;
            }
        }
        self.driver.abort();
        if let Some(e) = self.shared.lock().error() {
            if !matches!(e, GroupError::FencedInstanceId { .. }) {
                tracing::debug!(group = %self.config.group_id, error = %e, "member error at close");
            }
        }
        waited.and(result)
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_take_java_names_and_refuse_bad_values() {
        let c = GroupConsumerConfig::from_properties([
            ("bootstrap.servers", "h:1"),
            ("group.id", "g"),
            ("group.protocol", "CONSUMER"),
            ("group.remote.assignor", "range"),
            (
                "partition.assignment.strategy",
                "org.apache.kafka.clients.consumer.RoundRobinAssignor,range",
            ),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "earliest"),
            ("max.poll.interval.ms", "1000"),
        ])
        .unwrap();
        assert_eq!(c.protocol, GroupProtocol::Consumer);
        assert_eq!(c.assignors, vec![Assignor::RoundRobin, Assignor::Range]);
        assert!(!c.enable_auto_commit);
        assert_eq!(c.consumer.auto_offset_reset, Some(Offset::Earliest));
        assert_eq!(c.max_poll_interval, Duration::from_secs(1));
        for (name, value, allowed) in [
            ("group.protocol", "eager", "classic, consumer"),
            ("group.remote.assignor", "sticky", "uniform, range"),
            ("partition.assignment.strategy", "sticky", "range, roundrobin"),
            ("enable.auto.commit", "yes", "true, false"),
            ("session.timeout.ms", "-1", "milliseconds"),
        ] {
            let e =
                GroupConsumerConfig::from_properties([("bootstrap.servers", "h:1"), ("group.id", "g"), (name, value)])
                    .unwrap_err()
                    .to_string();
            assert!(e.contains(name) && e.contains(allowed), "{e}");
        }
        let e = GroupConsumerConfig::from_properties([("bootstrap.servers", "h:1")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("group.id"), "{e}");
        let e = GroupConsumerConfig::new("g")
            .with_heartbeat_interval(Duration::from_secs(50))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("heartbeat.interval.ms"), "{e}");
    }

    #[test]
    fn member_ids_are_base64_uuids() {
        let a = new_member_id().unwrap();
        assert_eq!(a.len(), 22);
        assert_ne!(a, new_member_id().unwrap());
    }
}
