//! Committed offsets of a consumer group, for consumers that assign their
//! partitions themselves (no group membership): FindCoordinator(group), then
//! OffsetCommit and OffsetFetch at the group coordinator.
//!
//! This is the "standalone consumer" use of the group protocol, as the Java
//! client does for `assign()` + `commitSync()`: OffsetCommit with generation
//! -1 and an empty member id. The broker accepts it while the group has no
//! active members (an active group answers `ILLEGAL_GENERATION` or
//! `UNKNOWN_MEMBER_ID`, which we surface as they are).
//!
//! Versions: OffsetFetch from v8 carries a `groups` array instead of one
//! group's `topics`; both layouts are written here according to the version
//! the broker negotiates. Topic ids (OffsetCommit v10, OffsetFetch v10) are
//! not used. See <https://kafka.apache.org/protocol#The_Messages_OffsetCommit>
//! and KIP-709 (batched OffsetFetch).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use clink_kafka_wire::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use clink_kafka_wire::kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use clink_kafka_wire::kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, OffsetCommitRequest, OffsetFetchRequest, TopicName,
};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;

use super::cluster::Cluster;
use super::connection::BrokerConnection;
use super::topic_partition::{TopicPartition, TopicPartitionOffset};
use crate::error::{BrokerRef, Error, Result};

/// FindCoordinator key type of a consumer group (1 is a transactional id).
const KEY_TYPE_GROUP: i8 = 0;

/// An offset committed for one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    /// The next offset to consume.
    pub offset: i64,
    /// The metadata string stored beside it.
    pub metadata: Option<String>,
}

/// The committed offsets of one consumer group.
#[derive(Clone, Debug)]
pub struct GroupOffsets {
    cluster: Cluster,
    group_id: String,
}

impl GroupOffsets {
    /// Offsets of `group_id` on `cluster`.
    pub fn new(cluster: Cluster, group_id: impl Into<String>) -> Result<Self> {
        let group_id = group_id.into();
        if group_id.is_empty() {
            return Err(Error::Config {
                option: "group.id",
                message: "must not be empty".into(),
            });
        }
        Ok(GroupOffsets { cluster, group_id })
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    /// Finds the group coordinator and connects to it. Retriable answers
    /// (`COORDINATOR_NOT_AVAILABLE` while a fresh cluster creates
    /// `__consumer_offsets`, `NOT_COORDINATOR` while it moves, a lost
    /// connection) are retried with backoff until `metadata_max_wait`.
    pub async fn coordinator(&self) -> Result<BrokerConnection> {
        let started = Instant::now();
        let mut backoff = self.cluster.backoff();
        loop {
            match find_coordinator(&self.cluster, KEY_TYPE_GROUP, &self.group_id).await {
                Ok(conn) => return Ok(conn),
                Err(e) if e.is_retriable() && started.elapsed() < self.cluster.config().metadata_max_wait => {
                    tracing::debug!(group = %self.group_id, error = %e, "finding the group coordinator again");
                    backoff.sleep().await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Commits `offsets` (each the next offset to consume, with optional
    /// metadata). Every partition must be accepted; the first refusal is the
    /// error.
    pub async fn commit(&self, offsets: &[TopicPartitionOffset]) -> Result<()> {
        self.commit_as(offsets, None).await
    }

    /// [`commit`](Self::commit) as a member of the group: OffsetCommit
    /// carries `member`'s generation (the member epoch under KIP-848),
    /// member id and `group.instance.id`, so the coordinator refuses a
    /// commit from a member it no longer counts (ILLEGAL_GENERATION,
    /// UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH). `None`:
    /// the standalone commit (generation -1).
    pub async fn commit_as(
        &self,
        offsets: &[TopicPartitionOffset],
        member: Option<&clink_kafka_wire::group::ConsumerGroupMetadata>,
    ) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut by_topic: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for o in offsets {
            let mut p = OffsetCommitRequestPartition::default();
            p.partition_index = o.partition;
            p.committed_offset = o.offset;
            p.committed_leader_epoch = -1;
            p.committed_metadata = o.metadata.as_ref().map(|m| StrBytes::from_string(m.clone()));
            by_topic.entry(o.topic.as_str()).or_default().push(p);
        }
        let mut request = OffsetCommitRequest::default();
        request.group_id = GroupId(StrBytes::from_string(self.group_id.clone()));
        match member {
            Some(m) => {
                request.generation_id_or_member_epoch = m.generation_id;
                request.member_id = StrBytes::from_string(m.member_id.clone());
                request.group_instance_id = m.group_instance_id.as_ref().map(|i| StrBytes::from_string(i.clone()));
            }
            None => {
                request.generation_id_or_member_epoch = -1;
                request.member_id = StrBytes::from_static_str("");
            }
        }
        request.retention_time_ms = -1;
        request.topics = by_topic
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = OffsetCommitRequestTopic::default();
                t.name = TopicName(StrBytes::from_string(name.to_owned()));
                t.partitions = partitions;
                t
            })
            .collect();
        self.retrying("OffsetCommit", |conn| {
            let request = &request;
            async move {
                let response = conn.request(request).await?;
                for t in &response.topics {
                    for p in &t.partitions {
                        if p.error_code != 0 {
                            return Err(Error::kafka(
                                "OffsetCommit",
                                conn.broker(),
                                Some(t.name.0.as_str()),
                                Some(p.partition_index),
                                p.error_code,
                                None,
                            ));
                        }
                    }
                }
                Ok(())
            }
        })
        .await
    }

    /// The committed offsets of `partitions`; a partition with no committed
    /// offset maps to `None`. With `require_stable`, offsets that a pending
    /// transaction is about to commit are waited for (the broker answers
    /// `UNSTABLE_OFFSET_COMMIT`, which is retried), as `read_committed`
    /// consumers need.
    pub async fn fetch(
        &self,
        partitions: &[TopicPartition],
        require_stable: bool,
    ) -> Result<BTreeMap<TopicPartition, Option<CommittedOffset>>> {
        let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in partitions {
            by_topic.entry(tp.topic.as_str()).or_default().push(tp.partition);
        }
        self.retrying("OffsetFetch", |conn| {
            let by_topic = &by_topic;
            async move {
                let version = conn.version_for::<OffsetFetchRequest>(None)?;
                let mut request = OffsetFetchRequest::default();
                request.require_stable = require_stable;
                if version >= 8 {
                    let mut g = OffsetFetchRequestGroup::default();
                    g.group_id = GroupId(StrBytes::from_string(self.group_id.clone()));
                    g.member_epoch = -1;
                    g.topics = Some(
                        by_topic
                            .iter()
                            .map(|(name, parts)| {
                                let mut t = OffsetFetchRequestTopics::default();
                                t.name = TopicName(StrBytes::from_string((*name).to_owned()));
                                t.partition_indexes = parts.clone();
                                t
                            })
                            .collect(),
                    );
                    request.groups = vec![g];
                } else {
                    request.group_id = GroupId(StrBytes::from_string(self.group_id.clone()));
                    request.topics = Some(
                        by_topic
                            .iter()
                            .map(|(name, parts)| {
                                let mut t = OffsetFetchRequestTopic::default();
                                t.name = TopicName(StrBytes::from_string((*name).to_owned()));
                                t.partition_indexes = parts.clone();
                                t
                            })
                            .collect(),
                    );
                }
                let response = conn.request_at(version, &request).await?;
                let broker = conn.broker();
                let group_error = |code: i16| {
                    if code != 0 {
                        Err(Error::kafka("OffsetFetch", broker, None, None, code, None))
                    } else {
                        Ok(())
                    }
                };
                // Flatten both layouts to (topic, partition, offset, metadata, error).
                let mut rows: Vec<(String, i32, i64, Option<String>, i16)> = Vec::new();
                if version >= 8 {
                    let group = response
                        .groups
                        .iter()
                        .find(|g| g.group_id.0.as_str() == self.group_id)
                        .ok_or_else(|| {
                            invalid_answer(
                                "OffsetFetch",
                                broker,
                                format!("no answer for group {:?}", self.group_id),
                            )
                        })?;
                    group_error(group.error_code)?;
                    for t in &group.topics {
                        for p in &t.partitions {
                            rows.push((
                                t.name.0.to_string(),
                                p.partition_index,
                                p.committed_offset,
                                p.metadata.as_ref().map(|m| m.to_string()),
                                p.error_code,
                            ));
                        }
                    }
                } else {
                    group_error(response.error_code)?;
                    for t in &response.topics {
                        for p in &t.partitions {
                            rows.push((
                                t.name.0.to_string(),
                                p.partition_index,
                                p.committed_offset,
                                p.metadata.as_ref().map(|m| m.to_string()),
                                p.error_code,
                            ));
                        }
                    }
                }
                let mut out = BTreeMap::new();
                for (topic, partition, offset, metadata, code) in rows {
                    if code != 0 {
                        return Err(Error::kafka(
                            "OffsetFetch",
                            broker,
                            Some(&topic),
                            Some(partition),
                            code,
                            None,
                        ));
                    }
                    let committed = (offset >= 0).then_some(CommittedOffset { offset, metadata });
                    out.insert(TopicPartition { topic, partition }, committed);
                }
                for (topic, parts) in by_topic {
                    for p in parts {
                        if !out.contains_key(&TopicPartition::new(*topic, *p)) {
                            return Err(invalid_answer(
                                "OffsetFetch",
                                broker,
                                format!("no answer for {topic}[{p}]"),
                            ));
                        }
                    }
                }
                Ok(out)
            }
        })
        .await
    }

    /// Runs `op` at the coordinator, finding it again after
    /// `NOT_COORDINATOR` / `COORDINATOR_NOT_AVAILABLE` or a lost connection,
    /// and retrying retriable answers with backoff until `metadata_max_wait`.
    async fn retrying<T, F, Fut>(&self, api: &'static str, mut op: F) -> Result<T>
    where
        F: FnMut(BrokerConnection) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let started = Instant::now();
        let mut backoff = self.cluster.backoff();
        loop {
            let err = match find_coordinator(&self.cluster, KEY_TYPE_GROUP, &self.group_id).await {
                Ok(conn) => match op(conn).await {
                    Ok(v) => return Ok(v),
                    Err(e) => e,
                },
                Err(e) => e,
            };
            // UNSTABLE_OFFSET_COMMIT (88) is retriable in Kafka's table.
            if !err.is_retriable() || started.elapsed() >= self.cluster.config().metadata_max_wait {
                return Err(err);
            }
            tracing::debug!(api, group = %self.group_id, error = %err, "retrying at the group coordinator");
            backoff.sleep().await;
        }
    }
}

/// FindCoordinator for `key` of `key_type` (0 group, 1 transaction), then a
/// connection to that broker. v4 and later batch keys; we send one.
pub(crate) async fn find_coordinator(cluster: &Cluster, key_type: i8, key: &str) -> Result<BrokerConnection> {
    // Hedged like Metadata: a cut-off control connection must not hold a
    // coordinator lookup for `request_timeout`.
    let (conn, (version, response)) = cluster
        .control_request(|conn: BrokerConnection| async move {
            let version = conn.version_for::<FindCoordinatorRequest>(None)?;
            let mut request = FindCoordinatorRequest::default();
            request.key_type = key_type;
            if version >= 4 {
                request.coordinator_keys = vec![StrBytes::from_string(key.to_owned())];
            } else {
                request.key = StrBytes::from_string(key.to_owned());
            }
            let response = conn.request_at(version, &request).await?;
            Ok((version, response))
        })
        .await?;
    let (code, message, node_id) = if version >= 4 {
        let c = response
            .coordinators
            .iter()
            .find(|c| c.key.as_str() == key)
            .ok_or_else(|| invalid_answer("FindCoordinator", conn.broker(), format!("no answer for key {key:?}")))?;
        (
            c.error_code,
            c.error_message.as_ref().map(|m| m.to_string()),
            c.node_id.0,
        )
    } else {
        (
            response.error_code,
            response.error_message.as_ref().map(|m| m.to_string()),
            response.node_id.0,
        )
    };
    if code != 0 {
        return Err(Error::kafka(
            "FindCoordinator",
            conn.broker(),
            None,
            None,
            code,
            message.as_deref(),
        ));
    }
    cluster.broker(node_id).await
}

/// A well-formed answer that lacks what was asked for.
fn invalid_answer(api: &'static str, broker: &BrokerRef, message: String) -> Error {
    Error::Protocol {
        broker: broker.clone(),
        api,
        source: Arc::new(clink_kafka_wire::Error::Invalid {
            context: "response",
            message,
        }),
    }
}
