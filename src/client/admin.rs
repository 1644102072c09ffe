//! Administration: CreateTopics, CreatePartitions and DeleteTopics, each waiting until
//! the cluster's metadata agrees (a created topic has every partition led; a
//! deleted one is gone), since the broker answers before the change has
//! spread; DescribeCluster; and the full Metadata answer (replicas, in-sync
//! replicas) that `clink-kafka metadata` and `topics` show. See KIP-4 and
//! <https://kafka.apache.org/protocol#The_Messages_CreateTopics>.

use std::time::Duration;

use clink_kafka_wire::kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use clink_kafka_wire::kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use clink_kafka_wire::kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use clink_kafka_wire::kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use clink_kafka_wire::kafka_protocol::messages::{
    CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest, DescribeClusterRequest, MetadataRequest,
    TopicName,
};
use clink_kafka_wire::kafka_protocol::protocol::StrBytes;
use clink_kafka_wire::KafkaCode;

use super::cluster::Cluster;
use crate::error::{Error, Result};

/// A topic to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    /// The topic's name.
    pub name: String,
    /// How many partitions.
    pub partitions: i32,
    /// Replicas per partition.
    pub replication_factor: i16,
    /// Topic configs, e.g. `("max.message.bytes", "2097152")`.
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic with no config overrides.
    pub fn new(name: impl Into<String>, partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor,
            configs: Vec::new(),
        }
    }

    /// Adds a topic config override.
    pub fn with_config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.push((key.into(), value.into()));
        self
    }
}

/// What DescribeCluster reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    /// The cluster's id.
    pub cluster_id: String,
    /// The node id the broker names as controller (in KRaft, a random live
    /// broker, as KIP-590 forwarding makes any broker able to act).
    pub controller_id: i32,
    /// Live brokers, by node id.
    pub brokers: Vec<BrokerDescription>,
}

/// One broker of a [`ClusterDescription`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerDescription {
    /// The broker's node id.
    pub node_id: i32,
    /// The host it advertises.
    pub host: String,
    /// The port it advertises.
    pub port: i32,
    /// Its `broker.rack`, if set.
    pub rack: Option<String>,
}

/// The cluster's Metadata answer in full: what [`Admin::describe_topics`]
/// returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// The cluster's id, if the broker gave one.
    pub cluster_id: Option<String>,
    /// The node id Metadata names as controller (in KRaft, a live broker
    /// that forwards to the quorum, as for DescribeCluster).
    pub controller_id: i32,
    /// Live brokers, by node id.
    pub brokers: Vec<BrokerDescription>,
    /// Topics by name.
    pub topics: Vec<TopicDescription>,
}

/// One topic of a [`ClusterMetadata`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    /// The topic's name.
    pub name: String,
    /// An internal topic (`__consumer_offsets`, `__transaction_state`, …).
    pub internal: bool,
    /// The topic-level error (e.g. `LEADER_NOT_AVAILABLE` while it is being
    /// created); `NONE` normally.
    pub error: KafkaCode,
    /// Partitions by index.
    pub partitions: Vec<PartitionDescription>,
}

/// One partition of a [`TopicDescription`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionDescription {
    /// The partition index.
    pub partition: i32,
    /// The leader's node id, -1 when there is none.
    pub leader: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// Node ids of every replica, the preferred leader first.
    pub replicas: Vec<i32>,
    /// Node ids of the in-sync replicas.
    pub isr: Vec<i32>,
    /// Node ids of replicas on offline log directories or brokers.
    pub offline_replicas: Vec<i32>,
    /// The partition's error in the answer (`NONE` when it is fine).
    pub error: KafkaCode,
}

/// Topic administration over a [`Cluster`].
#[derive(Clone, Debug)]
pub struct Admin {
    cluster: Cluster,
    /// Bound on the broker's own wait and on our wait for metadata.
    timeout: Duration,
}

impl Admin {
    /// Admin operations on `cluster`, each bounded by 30 s.
    pub fn new(cluster: Cluster) -> Self {
        Admin {
            cluster,
            timeout: Duration::from_secs(30),
        }
    }

    /// The same with another per-operation bound.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The cluster this administers.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The bound on each operation.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Creates `topics` and waits until metadata shows each with all its
    /// partitions led. A topic that already exists is an error
    /// (`TOPIC_ALREADY_EXISTS`).
    pub async fn create_topics(&self, topics: &[NewTopic]) -> Result<()> {
        let mut request = CreateTopicsRequest::default();
        request.timeout_ms = self.timeout.as_millis().min(i32::MAX as u128) as i32;
        request.topics = topics
            .iter()
            .map(|t| {
                let mut c = CreatableTopic::default();
                c.name = TopicName(StrBytes::from_string(t.name.clone()));
                c.num_partitions = t.partitions;
                c.replication_factor = t.replication_factor;
                c.configs = t
                    .configs
                    .iter()
                    .map(|(k, v)| {
                        let mut cfg = CreatableTopicConfig::default();
                        cfg.name = StrBytes::from_string(k.clone());
                        cfg.value = Some(StrBytes::from_string(v.clone()));
                        cfg
                    })
                    .collect();
                c
            })
            .collect();
        let conn = self.cluster.any_broker().await?;
        let response = conn.request(&request).await?;
        for r in &response.topics {
            if r.error_code != 0 {
                return Err(Error::kafka(
                    "CreateTopics",
                    conn.broker(),
                    Some(r.name.0.as_str()),
                    None,
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.as_str()),
                ));
            }
        }
        for t in topics {
            self.cluster
                .wait_for_topic(&t.name, t.partitions.max(1) as usize, self.timeout)
                .await?;
            tracing::info!(topic = %t.name, partitions = t.partitions, "topic created");
        }
        Ok(())
    }

    /// Grows `topic` to `total` partitions (CreatePartitions) and waits
    /// until metadata shows every one of them led. Kafka never shrinks a
    /// topic: a `total` at or below the current count is the broker's
    /// `INVALID_PARTITIONS` error.
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<()> {
        let mut t = CreatePartitionsTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_owned()));
        t.count = total;
        t.assignments = None;
        let mut request = CreatePartitionsRequest::default();
        request.topics = vec![t];
        request.timeout_ms = self.timeout.as_millis().min(i32::MAX as u128) as i32;
        let conn = self.cluster.any_broker().await?;
        let response = conn.request(&request).await?;
        for r in &response.results {
            if r.error_code != 0 {
                return Err(Error::kafka(
                    "CreatePartitions",
                    conn.broker(),
                    Some(r.name.0.as_str()),
                    None,
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.as_str()),
                ));
            }
        }
        self.cluster
            .wait_for_topic(topic, total.max(1) as usize, self.timeout)
            .await?;
        tracing::info!(topic, partitions = total, "partitions created");
        Ok(())
    }

    /// The cluster as the broker describes it (DescribeCluster, KIP-700):
    /// its id, the controller and the live brokers.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription> {
        let (conn, response) = self
            .cluster
            .control_request(|conn| async move { conn.request(&DescribeClusterRequest::default()).await })
            .await?;
        if response.error_code != 0 {
            return Err(Error::kafka(
                "DescribeCluster",
                conn.broker(),
                None,
                None,
                response.error_code,
                response.error_message.as_ref().map(|m| m.as_str()),
            ));
        }
        let mut brokers: Vec<BrokerDescription> = response
            .brokers
            .iter()
            .map(|b| BrokerDescription {
                node_id: b.broker_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.as_ref().map(|r| r.to_string()),
            })
            .collect();
        brokers.sort_by_key(|b| b.node_id);
        Ok(ClusterDescription {
            cluster_id: response.cluster_id.to_string(),
            controller_id: response.controller_id.0,
            brokers,
        })
    }

    /// The cluster's metadata with every replica and in-sync replica of
    /// `topics` (`None`: every topic, internal ones included), from one
    /// Metadata request that never creates a topic. A named topic the
    /// cluster does not have is an `UNKNOWN_TOPIC_OR_PARTITION` error naming
    /// it; a topic another error keeps from being described (e.g. while it
    /// is being created) is returned with that error and the partitions the
    /// broker sent.
    ///
    /// Cancel safety: this method is cancel safe (it changes nothing).
    pub async fn describe_topics(&self, topics: Option<&[&str]>) -> Result<ClusterMetadata> {
        let mut request = MetadataRequest::default();
        request.topics = topics.map(|names| {
            names
                .iter()
                .map(|t| {
                    let mut r = MetadataRequestTopic::default();
                    r.name = Some(TopicName(StrBytes::from_string((*t).to_owned())));
                    r
                })
                .collect()
        });
        request.allow_auto_topic_creation = false;
        let (conn, response) = self
            .cluster
            .control_request(|conn| {
                let request = &request;
                async move { conn.request(request).await }
            })
            .await?;
        if response.error_code != 0 {
            return Err(Error::kafka(
                "Metadata",
                conn.broker(),
                None,
                None,
                response.error_code,
                None,
            ));
        }
        let ids = |nodes: &[clink_kafka_wire::kafka_protocol::messages::BrokerId]| -> Vec<i32> {
            nodes.iter().map(|n| n.0).collect()
        };
        let mut described = Vec::with_capacity(response.topics.len());
        for t in &response.topics {
            let name = t.name.as_ref().map(|n| n.0.to_string()).unwrap_or_default();
            if t.error_code == KafkaCode::UNKNOWN_TOPIC_OR_PARTITION.0 {
                return Err(Error::kafka(
                    "Metadata",
                    conn.broker(),
                    Some(name.as_str()),
                    None,
                    t.error_code,
                    None,
                ));
            }
            let mut partitions: Vec<PartitionDescription> = t
                .partitions
                .iter()
                .map(|p| PartitionDescription {
                    partition: p.partition_index,
                    leader: p.leader_id.0,
                    leader_epoch: p.leader_epoch,
                    replicas: ids(&p.replica_nodes),
                    isr: ids(&p.isr_nodes),
                    offline_replicas: ids(&p.offline_replicas),
                    error: KafkaCode(p.error_code),
                })
                .collect();
            partitions.sort_by_key(|p| p.partition);
            described.push(TopicDescription {
                name,
                internal: t.is_internal,
                error: KafkaCode(t.error_code),
                partitions,
            });
        }
        described.sort_by(|a, b| a.name.cmp(&b.name));
        let mut brokers: Vec<BrokerDescription> = response
            .brokers
            .iter()
            .map(|b| BrokerDescription {
                node_id: b.node_id.0,
                host: b.host.to_string(),
                port: b.port,
                rack: b.rack.as_ref().map(|r| r.to_string()),
            })
            .collect();
        brokers.sort_by_key(|b| b.node_id);
        Ok(ClusterMetadata {
            cluster_id: response.cluster_id.as_ref().map(|c| c.to_string()),
            controller_id: response.controller_id.0,
            brokers,
            topics: described,
        })
    }

    /// Deletes `topics` and waits until metadata no longer shows them.
    pub async fn delete_topics(&self, topics: &[&str]) -> Result<()> {
        let mut request = DeleteTopicsRequest::default();
        request.timeout_ms = self.timeout.as_millis().min(i32::MAX as u128) as i32;
        let conn = self.cluster.any_broker().await?;
        let version = conn.version_for::<DeleteTopicsRequest>(None)?;
        // v6 names topics in `topics`, older versions in `topic_names`, and
        // kafka-protocol refuses a field the version lacks.
        if version >= 6 {
            request.topics = topics
                .iter()
                .map(|t| {
                    let mut s = DeleteTopicState::default();
                    s.name = Some(TopicName(StrBytes::from_string((*t).to_owned())));
                    s
                })
                .collect();
        } else {
            request.topic_names = topics
                .iter()
                .map(|t| TopicName(StrBytes::from_string((*t).to_owned())))
                .collect();
        }
        let response = conn.request_at(version, &request).await?;
        for r in &response.responses {
            if r.error_code != 0 {
                return Err(Error::kafka(
                    "DeleteTopics",
                    conn.broker(),
                    r.name.as_ref().map(|n| n.0.as_str()),
                    None,
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.as_str()),
                ));
            }
        }
        for t in topics {
            self.cluster.wait_for_topic_gone(t, self.timeout).await?;
            tracing::info!(topic = %t, "topic deleted");
        }
        Ok(())
    }
}
