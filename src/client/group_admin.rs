//! Consumer group administration, what `kafka-consumer-groups.sh` does:
//! list the groups of every broker (ListGroups, with KIP-518 state and
//! KIP-848 type filters where the broker speaks v4/v5), describe one
//! (ConsumerGroupDescribe for a KIP-848 `consumer` group, DescribeGroups for
//! a `classic` one, whose members' ConsumerProtocol bytes are decoded as
//! hostile input), its committed offsets (OffsetFetch) against the log end
//! (ListOffsets latest, read_uncommitted: the high watermark, as the Java
//! tool's `new ListOffsetsOptions()`), delete it (DeleteGroups), and reset
//! its offsets (OffsetCommit with generation -1, as the Java admin client's
//! `alterConsumerGroupOffsets`).
//!
//! Reset follows the Java tool (`OffsetsUtils`): `--to-offset` and
//! `--shift-by` are clamped to [log start, log end]; `--to-datetime` is
//! ListOffsets by timestamp, falling back to the log end where no record is
//! that late; the group must be inactive (`Empty` or `Dead`), for the plan
//! as for its execution. See
//! <https://kafka.apache.org/protocol#The_Messages_ListGroups>, KIP-848.

use std::collections::BTreeMap;
use std::time::Instant;

use clink_kafka_wire::group::consumer_protocol::{decode_assignment, decode_subscription};
use clink_kafka_wire::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use clink_kafka_wire::kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, DeleteGroupsRequest, DescribeGroupsRequest, GroupId, ListGroupsRequest,
    OffsetFetchRequest,
};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::KafkaCode;

use super::admin::Admin;
use super::connection::BrokerConnection;
use super::consumer::{Consumer, ConsumerConfig, Offset};
use super::group::GroupOffsets;
use super::topic_partition::{TopicPartition, TopicPartitionOffset};
use crate::error::{Error, Result};

/// `NON_EMPTY_GROUP`: DeleteGroups of a group with members.
const NON_EMPTY_GROUP: KafkaCode = KafkaCode(68);
/// `GROUP_ID_NOT_FOUND`: the coordinator does not know the group (or it is
/// not of the type asked about).
const GROUP_ID_NOT_FOUND: KafkaCode = KafkaCode(69);

/// Which group protocol a group runs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupType {
    /// JoinGroup/SyncGroup (and groups that only hold committed offsets).
    Classic,
    /// KIP-848 ConsumerGroupHeartbeat.
    Consumer,
    /// Another type the broker names (`share`, `streams`, …).
    Other(String),
}

impl GroupType {
    /// Kafka's name: `classic`, `consumer`, or the broker's own.
    pub fn as_str(&self) -> &str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
            GroupType::Other(s) => s,
        }
    }

    /// Parses Kafka's name, case-insensitively.
    pub fn from_name(name: &str) -> Self {
        match name.to_ascii_lowercase().as_str() {
            "classic" => GroupType::Classic,
            "consumer" => GroupType::Consumer,
            other => GroupType::Other(other.to_owned()),
        }
    }
}

impl std::fmt::Display for GroupType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of [`Admin::list_groups`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// Its type (ListGroups v5; `classic` from older brokers).
    pub group_type: GroupType,
    /// Its protocol type: `consumer`, or empty for a group that only has
    /// committed offsets.
    pub protocol_type: String,
    /// Its state (ListGroups v4+): `Stable`, `Empty`, `PreparingRebalance`, …
    pub state: Option<String>,
    /// The node id of the broker that coordinates it.
    pub coordinator: i32,
}

/// [`Admin::list_groups`] filters; empty lists every consumer group.
#[derive(Clone, Debug, Default)]
pub struct ListGroupsFilter {
    /// Only groups in these states (needs ListGroups v4).
    pub states: Vec<String>,
    /// Only groups of these types (needs ListGroups v5).
    pub types: Vec<GroupType>,
}

/// One member of a [`GroupDescription`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupMember {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// Its `client.id`.
    pub client_id: String,
    /// The host it connects from, as the broker saw it.
    pub client_host: String,
    /// Its rack (consumer groups).
    pub rack_id: Option<String>,
    /// Its member epoch (consumer groups).
    pub member_epoch: Option<i32>,
    /// The topics it subscribes to.
    pub subscribed_topics: Vec<String>,
    /// Its subscription pattern (consumer groups, KIP-848 regex).
    pub subscribed_pattern: Option<String>,
    /// The partitions it owns.
    pub assignment: Vec<TopicPartition>,
    /// The partitions the coordinator means it to own (consumer groups).
    pub target_assignment: Option<Vec<TopicPartition>>,
    /// Why its ConsumerProtocol bytes could not be read (classic groups),
    /// when they could not.
    pub protocol_error: Option<String>,
}

/// What [`Admin::describe_group`] reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    /// The group id.
    pub group_id: String,
    /// The protocol it runs.
    pub group_type: GroupType,
    /// Its state; `Dead` for a group the coordinator does not know.
    pub state: String,
    /// `consumer`, or empty (a classic group with no members).
    pub protocol_type: String,
    /// The assignor: the classic protocol's chosen one (`range`, …) or the
    /// broker's (`uniform`, `range`).
    pub assignor: String,
    /// The group epoch (consumer groups).
    pub group_epoch: Option<i32>,
    /// The target assignment's epoch (consumer groups).
    pub assignment_epoch: Option<i32>,
    /// The coordinator's node id.
    pub coordinator: i32,
    /// The members.
    pub members: Vec<GroupMember>,
}

impl GroupDescription {
    /// Whether the coordinator knows the group (it is not `Dead`).
    pub fn exists(&self) -> bool {
        self.state != "Dead"
    }

    /// Whether nothing is consuming in it: `Empty` or `Dead`, the Java
    /// tool's condition for resetting offsets.
    pub fn is_inactive(&self) -> bool {
        self.state == "Empty" || self.state == "Dead"
    }
}

/// One partition of [`Admin::group_lag`]: committed offset, log end, lag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLag {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset; `None` when the group has none.
    pub committed: Option<i64>,
    /// The log end offset (high watermark); `None` when the partition no
    /// longer exists.
    pub log_end: Option<i64>,
    /// `log_end - committed` when both are known.
    pub lag: Option<i64>,
    /// The member that owns the partition, if one does.
    pub member_id: Option<String>,
    /// That member's `client.id`.
    pub client_id: Option<String>,
    /// That member's host.
    pub client_host: Option<String>,
}

/// Where [`Admin::plan_offset_reset`] moves each partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetReset {
    /// The log start offset (`--to-earliest`).
    Earliest,
    /// The log end offset (`--to-latest`).
    Latest,
    /// This offset, clamped to [log start, log end] (`--to-offset`).
    ToOffset(i64),
    /// The committed offset plus this (negative: back), clamped to
    /// [log start, log end] (`--shift-by`).
    ShiftBy(i64),
    /// The first offset at or after this time, ms since the epoch, or the
    /// log end when no record is that late (`--to-datetime`).
    ToTimestamp(i64),
}

/// Which partitions [`Admin::plan_offset_reset`] resets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResetScope {
    /// Each topic, with all its partitions (`None`) or the ones listed.
    Topics(Vec<(String, Option<Vec<i32>>)>),
    /// Every partition the group has a committed offset for.
    AllTopics,
}

/// One row of a reset plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The committed offset now, if any.
    pub current: Option<i64>,
    /// The offset the reset commits.
    pub new_offset: i64,
}

/// `requested` moved into [`earliest`, `latest`], as the Java tool's
/// `checkOffsetsRange` does: above the end is the end, else below the
/// start is the start.
pub fn clamp_offset(requested: i64, earliest: i64, latest: i64) -> i64 {
    if requested > latest {
        latest
    } else if requested < earliest {
        earliest
    } else {
        requested
    }
}

/// Parses `--to-datetime` as the Java tool does (`Utils.getDateTime`):
/// `YYYY-MM-DDTHH:mm:SS.sss` with an optional zone (`Z`, `±hh`, `±hhmm`,
/// `±hh:mm`); no zone means UTC. The milliseconds may be left out
/// (`YYYY-MM-DDTHH:mm:SS`), which the Java tool does not allow. Returns ms
/// since the epoch.
pub fn parse_datetime(s: &str) -> Result<i64> {
    let bad = |why: &str| Error::Config {
        option: "to-datetime",
        message: format!("{s:?} {why}; expected YYYY-MM-DDTHH:mm:SS.sss with an optional zone (Z, +hh, +hhmm, +hh:mm)"),
    };
    let (date, rest) = s.split_once('T').ok_or_else(|| bad("has no 'T'"))?;
    let num = |t: &str, what: &str| -> Result<i64> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) || t.len() > 4 {
            return Err(bad(&format!("has a bad {what}")));
        }
        t.parse::<i64>().map_err(|_| bad(&format!("has a bad {what}")))
    };
    let mut d = date.split('-');
    let (Some(y), Some(mo), Some(da), None) = (d.next(), d.next(), d.next(), d.next()) else {
        return Err(bad("has a bad date"));
    };
    if y.len() != 4 || mo.len() != 2 || da.len() != 2 {
        return Err(bad("has a bad date"));
    }
    let (year, month, day) = (num(y, "year")?, num(mo, "month")?, num(da, "day")?);
    // The zone: a trailing Z, or the last '+' / '-' in the time part.
    let (time, offset_min) = if let Some(t) = rest.strip_suffix('Z') {
        (t, 0)
    } else if let Some(i) = rest.rfind(['+', '-']) {
        let (t, z) = rest.split_at(i);
        let sign = if z.starts_with('-') { -1 } else { 1 };
        let z = &z[1..];
        let (h, m) = match z.len() {
            2 => (z, "00"),
            4 => z.split_at(2),
            5 if z.as_bytes()[2] == b':' => (&z[..2], &z[3..]),
            _ => return Err(bad("has a bad zone")),
        };
        let (h, m) = (num(h, "zone")?, num(m, "zone")?);
        if h > 18 || m > 59 {
            return Err(bad("has a bad zone"));
        }
        (t, sign * (h * 60 + m))
    } else {
        (rest, 0)
    };
    let (hms, millis) = match time.split_once('.') {
        Some((hms, ms)) if ms.len() == 3 => (hms, num(ms, "milliseconds")?),
        Some(_) => return Err(bad("needs exactly three digits of milliseconds")),
        None => (time, 0),
    };
    let mut t = hms.split(':');
    let (Some(h), Some(mi), Some(se), None) = (t.next(), t.next(), t.next(), t.next()) else {
        return Err(bad("has a bad time"));
    };
    if h.len() != 2 || mi.len() != 2 || se.len() != 2 {
        return Err(bad("has a bad time"));
    }
    let (hour, minute, second) = (num(h, "hour")?, num(mi, "minute")?, num(se, "second")?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[(month - 1) as usize] {
        return Err(bad("is not a calendar date"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(bad("is not a time of day"));
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_min * 60;
    Ok(seconds * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn group_error(api: &'static str, conn: &BrokerConnection, group_id: &str, code: i16, message: Option<&str>) -> Error {
    let mut e = Error::kafka(api, conn.broker(), None, None, code, message);
    if let Error::Kafka { message: m, .. } = &mut e {
        if m.is_none() {
            *m = Some(format!("group {group_id:?}"));
        }
    }
    e
}

fn assigned(topics: &[(String, Vec<i32>)]) -> Vec<TopicPartition> {
    let mut out: Vec<TopicPartition> = topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
        .collect();
    out.sort();
    out
}

impl Admin {
    /// Runs `op` at `group_id`'s coordinator, finding it again and retrying
    /// retriable answers (`NOT_COORDINATOR`, `COORDINATOR_LOAD_IN_PROGRESS`,
    /// a lost connection) with backoff for up to the admin timeout.
    async fn at_group_coordinator<T, F, Fut>(&self, group_id: &str, mut op: F) -> Result<T>
    where
        F: FnMut(BrokerConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let offsets = GroupOffsets::new(self.cluster().clone(), group_id)?;
        let started = Instant::now();
        let mut backoff = self.cluster().backoff();
        loop {
            let err = match offsets.coordinator().await {
                Ok(conn) => match op(conn).await {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            if !err.is_retriable() || started.elapsed() >= self.timeout() {
                return Err(err);
            }
            tracing::debug!(group = group_id, error = %err, "retrying at the group coordinator");
            backoff.sleep().await;
        }
    }

    /// Lists the consumer groups of every broker (each coordinates the
    /// groups of its `__consumer_offsets` partitions), sorted by id: groups
    /// whose protocol type is `consumer` or empty (offsets only). A state
    /// filter needs ListGroups v4 and a type filter v5; an older broker is
    /// an error naming the filter.
    ///
    /// Cancel safety: this method is cancel safe (it changes nothing).
    pub async fn list_groups(&self, filter: &ListGroupsFilter) -> Result<Vec<GroupListing>> {
        let cluster = self.cluster();
        let metadata = cluster.refresh_topics(&[]).await?;
        let mut nodes: Vec<i32> = metadata.brokers.keys().copied().collect();
        nodes.sort_unstable();
        let mut out = Vec::new();
        for node in nodes {
            let conn = cluster.broker(node).await?;
            let version = conn.version_for::<ListGroupsRequest>(None)?;
            let mut request = ListGroupsRequest::default();
            if !filter.states.is_empty() {
                if version < 4 {
                    return Err(Error::Config {
                        option: "state",
                        message: format!(
                            "broker {} speaks ListGroups v{version}; a state filter needs v4",
                            conn.broker()
                        ),
                    });
                }
                request.states_filter = filter.states.iter().map(|s| StrBytes::from_string(s.clone())).collect();
            }
            if !filter.types.is_empty() {
                if version < 5 {
                    return Err(Error::Config {
                        option: "type",
                        message: format!(
                            "broker {} speaks ListGroups v{version}; a type filter needs v5",
                            conn.broker()
                        ),
                    });
                }
                request.types_filter = filter
                    .types
                    .iter()
                    .map(|t| StrBytes::from_string(t.as_str().to_owned()))
                    .collect();
            }
            let response = conn.request_at(version, &request).await?;
            if response.error_code != 0 {
                return Err(Error::kafka(
                    "ListGroups",
                    conn.broker(),
                    None,
                    None,
                    response.error_code,
                    None,
                ));
            }
            for g in &response.groups {
                let protocol_type = g.protocol_type.to_string();
                if !(protocol_type.is_empty() || protocol_type == "consumer") {
                    continue;
                }
                out.push(GroupListing {
                    group_id: g.group_id.0.to_string(),
                    group_type: if version >= 5 {
                        GroupType::from_name(g.group_type.as_str())
                    } else {
                        GroupType::Classic
                    },
                    protocol_type,
                    state: (version >= 4).then(|| g.group_state.to_string()),
                    coordinator: node,
                });
            }
        }
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        Ok(out)
    }

    /// Describes `group_id` at its coordinator: ConsumerGroupDescribe first
    /// (KIP-848); a group that is not a consumer group (`GROUP_ID_NOT_FOUND`)
    /// or a broker without that API is asked with DescribeGroups. A classic
    /// member's subscription and assignment are decoded from the bytes
    /// other members wrote; bytes that do not decode leave the member with
    /// [`GroupMember::protocol_error`] rather than failing the description.
    /// A group the coordinator does not know is `Dead` with no members.
    ///
    /// Cancel safety: this method is cancel safe (it changes nothing).
    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription> {
        self.at_group_coordinator(group_id, |conn| async move {
            if let Some(d) = consumer_group_describe(&conn, group_id).await? {
                return Ok(d);
            }
            classic_describe(&conn, group_id).await
        })
        .await
    }

    /// The group's committed offsets, every partition it has one for
    /// (OffsetFetch with no topic list; not waiting for pending
    /// transactional commits, as the Java tool does not).
    ///
    /// Cancel safety: this method is cancel safe (it changes nothing).
    pub async fn group_committed_offsets(&self, group_id: &str) -> Result<BTreeMap<TopicPartition, i64>> {
        self.at_group_coordinator(group_id, |conn| async move {
            let version = conn.version_for::<OffsetFetchRequest>(None)?;
            let mut request = OffsetFetchRequest::default();
            if version >= 8 {
                let mut g = OffsetFetchRequestGroup::default();
                g.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
                g.member_epoch = -1;
                g.topics = None;
                request.groups = vec![g];
            } else {
                request.group_id = GroupId(StrBytes::from_string(group_id.to_owned()));
                request.topics = None;
            }
            let response = conn.request_at(version, &request).await?;
            let mut rows: Vec<(String, i32, i64, i16)> = Vec::new();
            if version >= 8 {
                let Some(g) = response.groups.iter().find(|g| g.group_id.0.as_str() == group_id) else {
                    return Err(group_error(
                        "OffsetFetch",
                        &conn,
                        group_id,
                        GROUP_ID_NOT_FOUND.0,
                        Some("no answer for the group"),
                    ));
                };
                if g.error_code != 0 {
                    return Err(group_error("OffsetFetch", &conn, group_id, g.error_code, None));
                }
                for t in &g.topics {
                    rows.extend(t.partitions.iter().map(|p| {
                        (
                            t.name.0.to_string(),
                            p.partition_index,
                            p.committed_offset,
                            p.error_code,
                        )
                    }));
                }
            } else {
                if response.error_code != 0 {
                    return Err(group_error("OffsetFetch", &conn, group_id, response.error_code, None));
                }
                for t in &response.topics {
                    rows.extend(t.partitions.iter().map(|p| {
                        (
                            t.name.0.to_string(),
                            p.partition_index,
                            p.committed_offset,
                            p.error_code,
                        )
                    }));
                }
            }
            let mut out = BTreeMap::new();
            for (topic, partition, offset, code) in rows {
                if code != 0 {
                    return Err(Error::kafka(
                        "OffsetFetch",
                        conn.broker(),
                        Some(&topic),
                        Some(partition),
                        code,
                        None,
                    ));
                }
                if offset >= 0 {
                    out.insert(TopicPartition { topic, partition }, offset);
                }
            }
            Ok(out)
        })
        .await
    }

    /// Each partition the group has a committed offset for or a member
    /// owns, with its log end offset and lag (the rows of
    /// `kafka-consumer-groups.sh --describe`), sorted by topic and partition.
    ///
    /// Cancel safety: this method is cancel safe (it changes nothing).
    pub async fn group_lag(&self, description: &GroupDescription) -> Result<Vec<PartitionLag>> {
        let committed = self.group_committed_offsets(&description.group_id).await?;
        let mut owner: BTreeMap<TopicPartition, &GroupMember> = BTreeMap::new();
        for m in &description.members {
            for tp in &m.assignment {
                owner.insert(tp.clone(), m);
            }
        }
        let mut partitions: Vec<TopicPartition> = committed.keys().chain(owner.keys()).cloned().collect();
        partitions.sort();
        partitions.dedup();
        let ends = self.log_offsets(&partitions, Offset::Latest, true).await?;
        Ok(partitions
            .into_iter()
            .map(|tp| {
                let committed = committed.get(&tp).copied();
                let log_end = ends.get(&tp).copied().flatten();
                let member = owner.get(&tp);
                PartitionLag {
                    lag: committed.zip(log_end).map(|(c, e)| e - c),
                    committed,
                    log_end,
                    member_id: member.map(|m| m.member_id.clone()),
                    client_id: member.map(|m| m.client_id.clone()),
                    client_host: member.map(|m| m.client_host.clone()),
                    topic: tp.topic,
                    partition: tp.partition,
                }
            })
            .collect())
    }

    /// ListOffsets (read_uncommitted) for each partition; with
    /// `missing_ok` a partition or topic that no longer exists maps to
    /// `None` instead of failing.
    async fn log_offsets(
        &self,
        partitions: &[TopicPartition],
        which: Offset,
        missing_ok: bool,
    ) -> Result<BTreeMap<TopicPartition, Option<i64>>> {
        let consumer = Consumer::new(self.cluster().clone(), ConsumerConfig::default());
        let mut out = BTreeMap::new();
        for tp in partitions {
            let answer = match consumer.list_offset(&tp.topic, tp.partition, which).await {
                Ok(o) => Some(o),
                Err(Error::UnknownTopic { .. } | Error::UnknownPartition { .. }) if missing_ok => None,
                Err(e) if missing_ok && e.kafka_code() == Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION) => None,
                Err(e) => return Err(e),
            };
            out.insert(tp.clone(), answer);
        }
        Ok(out)
    }

    /// Deletes `group_id` (DeleteGroups at its coordinator). A group with
    /// members is [`Error::GroupNotEmpty`]; one the coordinator does not
    /// know is [`Error::GroupNotFound`].
    ///
    /// Cancel safety: not cancel safe: the coordinator may delete the group
    /// after the future is dropped.
    pub async fn delete_group(&self, group_id: &str) -> Result<()> {
        let result = self
            .at_group_coordinator(group_id, |conn| async move {
                let mut request = DeleteGroupsRequest::default();
                request.groups_names = vec![GroupId(StrBytes::from_string(group_id.to_owned()))];
                let response = conn.request(&request).await?;
                let r = response
                    .results
                    .iter()
                    .find(|r| r.group_id.0.as_str() == group_id)
                    .ok_or_else(|| {
                        group_error(
                            "DeleteGroups",
                            &conn,
                            group_id,
                            GROUP_ID_NOT_FOUND.0,
                            Some("no answer for the group"),
                        )
                    })?;
                if r.error_code != 0 {
                    return Err(group_error("DeleteGroups", &conn, group_id, r.error_code, None));
                }
                Ok(())
            })
            .await;
        match result {
            Err(e) if e.kafka_code() == Some(NON_EMPTY_GROUP) => {
                let d = self.describe_group(group_id).await?;
                Err(Error::GroupNotEmpty {
                    group_id: group_id.to_owned(),
                    state: d.state,
                    members: d.members.len(),
                    operation: "deleting it",
                })
            }
            Err(e) if e.kafka_code() == Some(GROUP_ID_NOT_FOUND) => Err(Error::GroupNotFound {
                group_id: group_id.to_owned(),
            }),
            other => other,
        }
    }

    /// The offsets a reset would commit, per partition, sorted. Refuses a
    /// group that is not `Empty` or `Dead` ([`Error::GroupNotEmpty`]), as
    /// the Java tool does for a dry run too; a partition that does not
    /// exist is an error; `ShiftBy` needs a committed offset on every
    /// partition.
    ///
    /// Cancel safety: this method is cancel safe (it changes nothing).
    pub async fn plan_offset_reset(
        &self,
        group_id: &str,
        scope: &ResetScope,
        reset: OffsetReset,
    ) -> Result<Vec<PlannedOffset>> {
        let d = self.describe_group(group_id).await?;
        if !d.is_inactive() {
            return Err(Error::GroupNotEmpty {
                group_id: group_id.to_owned(),
                state: d.state,
                members: d.members.len(),
                operation: "resetting its offsets",
            });
        }
        let committed = self.group_committed_offsets(group_id).await?;
        let mut partitions: Vec<TopicPartition> = match scope {
            ResetScope::AllTopics => committed.keys().cloned().collect(),
            ResetScope::Topics(topics) => {
                let mut out = Vec::new();
                for (topic, only) in topics {
                    let count = self.cluster().partition_count(topic).await?;
                    match only {
                        None => out.extend((0..count as i32).map(|p| TopicPartition::new(topic.clone(), p))),
                        Some(ps) => {
                            for &p in ps {
                                if p < 0 || p as usize >= count {
                                    return Err(Error::UnknownPartition {
                                        topic: topic.clone(),
                                        partition: p,
                                        partitions: count,
                                    });
                                }
                                out.push(TopicPartition::new(topic.clone(), p));
                            }
                        }
                    }
                }
                out
            }
        };
        partitions.sort();
        partitions.dedup();
        let new_offsets: BTreeMap<TopicPartition, i64> = match reset {
            OffsetReset::Earliest => flatten(self.log_offsets(&partitions, Offset::Earliest, false).await?),
            OffsetReset::Latest => flatten(self.log_offsets(&partitions, Offset::Latest, false).await?),
            OffsetReset::ToTimestamp(ts) => flatten(self.log_offsets(&partitions, Offset::Timestamp(ts), false).await?),
            OffsetReset::ToOffset(_) | OffsetReset::ShiftBy(_) => {
                let earliest = flatten(self.log_offsets(&partitions, Offset::Earliest, false).await?);
                let latest = flatten(self.log_offsets(&partitions, Offset::Latest, false).await?);
                let mut out = BTreeMap::new();
                for tp in &partitions {
                    let requested = match reset {
                        OffsetReset::ToOffset(n) => n,
                        OffsetReset::ShiftBy(n) => match committed.get(tp) {
                            Some(c) => c.saturating_add(n),
                            None => {
                                return Err(Error::Config {
                                    option: "shift-by",
                                    message: format!(
                                        "cannot shift {}[{}]: group {group_id:?} has no committed offset for it",
                                        tp.topic, tp.partition
                                    ),
                                })
                            }
                        },
                        _ => unreachable!("only ToOffset and ShiftBy reach here"),
                    };
                    out.insert(tp.clone(), clamp_offset(requested, earliest[tp], latest[tp]));
                }
                out
            }
        };
        Ok(new_offsets
            .into_iter()
            .map(|(tp, new_offset)| PlannedOffset {
                current: committed.get(&tp).copied(),
                topic: tp.topic,
                partition: tp.partition,
                new_offset,
            })
            .collect())
    }

    /// Commits `plan` for `group_id` (OffsetCommit, generation -1), after
    /// checking again that the group is inactive.
    ///
    /// Cancel safety: not cancel safe: the commit may land after the future
    /// is dropped.
    pub async fn execute_offset_reset(&self, group_id: &str, plan: &[PlannedOffset]) -> Result<()> {
        let d = self.describe_group(group_id).await?;
        if !d.is_inactive() {
            return Err(Error::GroupNotEmpty {
                group_id: group_id.to_owned(),
                state: d.state,
                members: d.members.len(),
                operation: "resetting its offsets",
            });
        }
        let offsets: Vec<TopicPartitionOffset> = plan
            .iter()
            .map(|p| TopicPartitionOffset::new(p.topic.clone(), p.partition, p.new_offset))
            .collect();
        GroupOffsets::new(self.cluster().clone(), group_id)?
            .commit(&offsets)
            .await
    }
}

fn flatten(m: BTreeMap<TopicPartition, Option<i64>>) -> BTreeMap<TopicPartition, i64> {
    m.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
}

/// ConsumerGroupDescribe; `None` when the group is not a consumer group or
/// the broker does not speak the API.
async fn consumer_group_describe(conn: &BrokerConnection, group_id: &str) -> Result<Option<GroupDescription>> {
    let Ok(version) = conn.version_for::<ConsumerGroupDescribeRequest>(None) else {
        return Ok(None);
    };
    let mut request = ConsumerGroupDescribeRequest::default();
    request.group_ids = vec![GroupId(StrBytes::from_string(group_id.to_owned()))];
    let response = conn.request_at(version, &request).await?;
    let Some(g) = response.groups.iter().find(|g| g.group_id.0.as_str() == group_id) else {
        return Ok(None);
    };
    if g.error_code == GROUP_ID_NOT_FOUND.0 || g.error_code == KafkaCode::UNSUPPORTED_VERSION.0 {
        return Ok(None);
    }
    if g.error_code != 0 {
        return Err(group_error(
            "ConsumerGroupDescribe",
            conn,
            group_id,
            g.error_code,
            g.error_message.as_ref().map(|m| m.as_str()),
        ));
    }
    let topics = |a: &clink_kafka_wire::kafka_protocol::messages::consumer_group_describe_response::Assignment| {
        assigned(
            &a.topic_partitions
                .iter()
                .map(|t| (t.topic_name.0.to_string(), t.partitions.clone()))
                .collect::<Vec<_>>(),
        )
    };
    let members = g
        .members
        .iter()
        .map(|m| GroupMember {
            member_id: m.member_id.to_string(),
            group_instance_id: m.instance_id.as_ref().map(|s| s.to_string()),
            client_id: m.client_id.to_string(),
            client_host: m.client_host.to_string(),
            rack_id: m.rack_id.as_ref().map(|s| s.to_string()),
            member_epoch: Some(m.member_epoch),
            subscribed_topics: m.subscribed_topic_names.iter().map(|t| t.0.to_string()).collect(),
            subscribed_pattern: m.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
            assignment: topics(&m.assignment),
            target_assignment: Some(topics(&m.target_assignment)),
            protocol_error: None,
        })
        .collect();
    Ok(Some(GroupDescription {
        group_id: group_id.to_owned(),
        group_type: GroupType::Consumer,
        state: g.group_state.to_string(),
        protocol_type: "consumer".into(),
        assignor: g.assignor_name.to_string(),
        group_epoch: Some(g.group_epoch),
        assignment_epoch: Some(g.assignment_epoch),
        coordinator: conn.broker().node_id.unwrap_or(-1),
        members,
    }))
}

/// DescribeGroups for one classic group.
async fn classic_describe(conn: &BrokerConnection, group_id: &str) -> Result<GroupDescription> {
    let mut request = DescribeGroupsRequest::default();
    request.groups = vec![GroupId(StrBytes::from_string(group_id.to_owned()))];
    let response = conn.request(&request).await?;
    let g = response
        .groups
        .iter()
        .find(|g| g.group_id.0.as_str() == group_id)
        .ok_or_else(|| {
            group_error(
                "DescribeGroups",
                conn,
                group_id,
                GROUP_ID_NOT_FOUND.0,
                Some("no answer for the group"),
            )
        })?;
    if g.error_code == GROUP_ID_NOT_FOUND.0 {
        return Ok(GroupDescription {
            group_id: group_id.to_owned(),
            group_type: GroupType::Classic,
            state: "Dead".into(),
            protocol_type: String::new(),
            assignor: String::new(),
            group_epoch: None,
            assignment_epoch: None,
            coordinator: conn.broker().node_id.unwrap_or(-1),
            members: Vec::new(),
        });
    }
    if g.error_code != 0 {
        return Err(group_error(
            "DescribeGroups",
            conn,
            group_id,
            g.error_code,
            g.error_message.as_ref().map(|m| m.as_str()),
        ));
    }
    let is_consumer = g.protocol_type.as_str() == "consumer";
    let members = g
        .members
        .iter()
        .map(|m| {
            let mut member = GroupMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                ..GroupMember::default()
            };
            if is_consumer {
                match decode_subscription(&m.member_metadata) {
                    Ok((_, s)) => member.subscribed_topics = s.topics.iter().map(|t| t.to_string()).collect(),
                    Err(e) => member.protocol_error = Some(format!("subscription: {e}")),
                }
                match decode_assignment(&m.member_assignment) {
                    Ok((_, a)) => {
                        member.assignment = assigned(
                            &a.assigned_partitions
                                .iter()
                                .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
                                .collect::<Vec<_>>(),
                        )
                    }
                    Err(e) => {
                        let prior = member.protocol_error.take();
                        member.protocol_error = Some(match prior {
                            Some(p) => format!("{p}; assignment: {e}"),
                            None => format!("assignment: {e}"),
                        });
                    }
                }
            }
            member
        })
        .collect();
    Ok(GroupDescription {
        group_id: group_id.to_owned(),
        group_type: GroupType::Classic,
        state: g.group_state.to_string(),
        protocol_type: g.protocol_type.to_string(),
        assignor: g.protocol_data.to_string(),
        group_epoch: None,
        assignment_epoch: None,
        coordinator: conn.broker().node_id.unwrap_or(-1),
        members,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_like_the_java_tool() {
        // Utils.getDateTime: no zone is UTC.
        assert_eq!(parse_datetime("1970-01-01T00:00:00.000").unwrap(), 0);
        assert_eq!(parse_datetime("2020-11-10T16:51:38.198").unwrap(), 1_605_027_098_198);
        assert_eq!(parse_datetime("2020-11-10T16:51:38.198Z").unwrap(), 1_605_027_098_198);
        let plus8 = 1_605_027_098_198 - 8 * 3_600_000;
        assert_eq!(parse_datetime("2020-11-10T16:51:38.198+08:00").unwrap(), plus8);
        assert_eq!(parse_datetime("2020-11-10T16:51:38.198+0800").unwrap(), plus8);
        assert_eq!(parse_datetime("2020-11-10T16:51:38.198+08").unwrap(), plus8);
        assert_eq!(
            parse_datetime("2020-11-10T16:51:38.198-05:30").unwrap(),
            1_605_027_098_198 + 330 * 60_000
        );
        assert_eq!(parse_datetime("2024-02-29T23:59:59").unwrap(), 1_709_251_199_000);
        assert_eq!(parse_datetime("1969-12-31T23:59:59.000").unwrap(), -1000);
        for bad in [
            "",
            "2020-11-10",
            "2020-11-10 16:51:38.198",
            "2020-13-10T16:51:38.198",
            "2023-02-29T00:00:00.000",
            "2020-11-10T24:00:00.000",
            "2020-11-10T16:51:38.19",
            "2020-11-10T16:51.198",
            "2020-11-10T16:51:38.198+1",
            "2020-11-10T16:51:38.198+08:0x",
            "20201-11-10T16:51:38.198",
            "2020-11-10T16:51:38.198ZZ",
        ] {
            let e = parse_datetime(bad).unwrap_err().to_string();
            assert!(
                e.contains("to-datetime") && e.contains("YYYY-MM-DDTHH:mm:SS.sss"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn shifts_and_offsets_are_clamped_to_the_log() {
        assert_eq!(clamp_offset(5, 2, 10), 5);
        assert_eq!(clamp_offset(-3, 2, 10), 2);
        assert_eq!(clamp_offset(11, 2, 10), 10);
        assert_eq!(clamp_offset(i64::MAX, 0, 0), 0);
        // Start past end (never from a real log): the start wins below it, as in Java.
        assert_eq!(clamp_offset(7, 9, 8), 9);
        assert_eq!(clamp_offset(10, 9, 8), 8);
    }

    #[test]
    fn group_types_and_inactivity() {
        assert_eq!(GroupType::from_name("Consumer"), GroupType::Consumer);
        assert_eq!(GroupType::from_name("classic").to_string(), "classic");
        assert_eq!(GroupType::from_name("share"), GroupType::Other("share".into()));
        let mut d = GroupDescription {
            group_id: "g".into(),
            group_type: GroupType::Classic,
            state: "Empty".into(),
            protocol_type: String::new(),
            assignor: String::new(),
            group_epoch: None,
            assignment_epoch: None,
            coordinator: 1,
            members: Vec::new(),
        };
        assert!(d.is_inactive() && d.exists());
        d.state = "Stable".into();
        assert!(!d.is_inactive());
        d.state = "Dead".into();
        assert!(d.is_inactive() && !d.exists());
    }
}
